//! Zipmap (hashes in RDB files of Redis before 2.6):
//!
//! ```text
//! zmlen u8 | (len key len free value free-bytes)* | 0xff
//! len = one byte < 254, or 254 + u32le
//! ```

const BIGLEN: u8 = 254;
const END: u8 = 255;

/// A field and its value.
pub type Pair<'a> = (&'a [u8], &'a [u8]);

/// The field-value pairs of a zipmap.
pub fn pairs(blob: &[u8]) -> Result<Vec<Pair<'_>>, String> {
    let &count = blob.first().ok_or("empty zipmap")?;
    let mut pos = 1;
    let mut pairs = Vec::new();
    loop {
        let &first = blob.get(pos).ok_or("zipmap without its end byte")?;
        if first == END {
            if pos != blob.len() - 1 {
                return Err("bytes after a zipmap's end".into());
            }
            break;
        }
        let field_len = length(blob, &mut pos)?;
        let field = take(blob, &mut pos, field_len)?;
        let value_len = length(blob, &mut pos)?;
        let free = usize::from(*blob.get(pos).ok_or("zipmap entry cut short")?);
        pos += 1;
        let value = take(blob, &mut pos, value_len)?;
        take(blob, &mut pos, free)?;
        pairs.push((field, value));
    }
    // 254 and up: too many pairs to count in the header.
    if count < BIGLEN && usize::from(count) != pairs.len() {
        return Err(format!("zipmap says {count} pairs, holds {}", pairs.len()));
    }
    Ok(pairs)
}

fn length(blob: &[u8], pos: &mut usize) -> Result<usize, String> {
    let &first = blob.get(*pos).ok_or("zipmap entry cut short")?;
    *pos += 1;
    match first {
        BIGLEN => {
            let bytes = take(blob, pos, 4)?;
            Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize)
        }
        END => Err("zipmap ends inside an entry".into()),
        len => Ok(usize::from(len)),
    }
}

fn take<'a>(blob: &'a [u8], pos: &mut usize, len: usize) -> Result<&'a [u8], String> {
    let bytes = super::slice(blob, *pos, len, "zipmap")?;
    *pos += len;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn pairs_with_free_space() {
        let blob = b"\x02\x01a\x02\x01xyZ\x01b\x00\x00\xff";
        let pairs = super::pairs(blob).unwrap();
        assert_eq!(pairs, vec![(&b"a"[..], &b"xy"[..]), (&b"b"[..], &b""[..])]);
        for cut in 0..blob.len() {
            assert!(super::pairs(&blob[..cut]).is_err(), "cut at {cut}");
        }
    }
}
