//! LZF decompression, the format of liblzf that Redis compresses strings
//! with (`RDB_ENC_LZF`). Written here rather than taken from a crate so
//! that every read is bounds-checked against both the input and the length
//! the RDB declares, whatever the bytes say.
//!
//! A stream is a sequence of tokens, each starting with a control byte:
//! - `000lllll`: a literal run of `lllll + 1` bytes that follow;
//! - `LLLhhhhh [e] oooooooo`: a back reference of length `LLL + 2` (when
//!   `LLL` is 7, plus the extra byte `e`) starting `hhhhh oooooooo + 1`
//!   bytes back in the output; it may overlap what it produces.

/// The most output one input byte can stand for: a 3-byte back reference
/// yields at most 7 + 255 + 2 = 264 bytes. Declared lengths beyond
/// `MAX_RATIO` times the input are refused before anything is allocated.
pub const MAX_RATIO: u64 = 88;

/// Decompresses `input` into exactly `out_len` bytes.
pub fn decompress(input: &[u8], out_len: usize) -> Result<Vec<u8>, &'static str> {
    if out_len as u64 > (input.len() as u64).saturating_mul(MAX_RATIO) {
        return Err("LZF string declares a length its compressed bytes cannot hold");
    }
    let mut out = Vec::with_capacity(out_len);
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let literal = input
                .get(i..i + run)
                .ok_or("LZF literal run goes past the end of the input")?;
            if out.len() + run > out_len {
                return Err("LZF output longer than declared");
            }
            out.extend_from_slice(literal);
            i += run;
            continue;
        }
        let mut len = ctrl >> 5;
        if len == 7 {
            len += usize::from(*input.get(i).ok_or("LZF input ends in a back reference")?);
            i += 1;
        }
        len += 2;
        let low = usize::from(*input.get(i).ok_or("LZF input ends in a back reference")?);
        i += 1;
        let distance = ((ctrl & 0x1f) << 8) + low + 1;
        if distance > out.len() {
            return Err("LZF back reference before the start of the output");
        }
        if out.len() + len > out_len {
            return Err("LZF output longer than declared");
        }
        let start = out.len() - distance;
        // Byte by byte: the reference may overlap the bytes it produces.
        for k in start..start + len {
            let byte = out[k];
            out.push(byte);
        }
    }
    if out.len() != out_len {
        return Err("LZF output shorter than declared");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_overlapping_references() {
        // "abcabcabcabc": literal "abc", then a reference 3 back, length 9.
        let input = [2, b'a', b'b', b'c', (7 << 5), 0, 2];
        // LLL = 7 means 7 + extra(0) + 2 = 9 bytes, distance 2 + 1 = 3.
        assert_eq!(decompress(&input, 12).unwrap(), b"abcabcabcabc");
        assert!(decompress(&input, 11).is_err());
        assert!(decompress(&input, 13).is_err());
        assert!(
            decompress(&[5 << 5, 9], 7).is_err(),
            "reference before start"
        );
        assert!(decompress(&[3, b'a'], 4).is_err(), "truncated literal");
        assert!(decompress(&[0, b'a'], 1 << 40).is_err(), "absurd length");
    }
}
