//! Listpack (RDB 10's small hashes, sorted sets and quicklist nodes):
//!
//! ```text
//! total-bytes u32le | num-elements u16le | entry* | 0xff
//! entry = encoding+data | backlen (the entry's length, 1 to 5 bytes)
//! 0xxxxxxx: uint 0..=127         10llllll: string of l bytes
//! 110xxxxx x: 13-bit signed int  1110llll l: string of l bytes (12 bits)
//! 0xf0 u32le: string of l bytes  0xf1/f2/f3/f4: i16/i24/i32/i64 little-endian
//! ```
//!
//! `backlen` lets Redis walk backwards: 7 bits per byte, the high bit set
//! on every byte but the first, least significant group last.

use super::{int_le, slice, Item};

const HEADER: usize = 6;
const EOF: u8 = 0xff;

/// Every entry of a listpack, checked against its header, terminator and
/// each entry's backlen.
pub fn entries(blob: &[u8]) -> Result<Vec<Item<'_>>, String> {
    if blob.len() < HEADER + 1 {
        return Err("listpack shorter than its header".into());
    }
    let total = u32::from_le_bytes(blob[0..4].try_into().expect("4 bytes")) as usize;
    let count = u16::from_le_bytes(blob[4..6].try_into().expect("2 bytes"));
    if total != blob.len() {
        return Err(format!("listpack says {total} bytes, holds {}", blob.len()));
    }
    let mut items = Vec::new();
    let mut pos = HEADER;
    loop {
        let &first = blob.get(pos).ok_or("listpack without its end byte")?;
        if first == EOF {
            if pos != blob.len() - 1 {
                return Err("bytes after a listpack's end".into());
            }
            break;
        }
        let start = pos;
        let (item, len) = if first & 0x80 == 0 {
            (Item::Int(i64::from(first & 0x7f)), 1)
        } else if first & 0xc0 == 0x80 {
            let len = usize::from(first & 0x3f);
            (Item::Bytes(slice(blob, pos + 1, len, "listpack")?), 1 + len)
        } else if first & 0xe0 == 0xc0 {
            let low = *blob.get(pos + 1).ok_or("listpack entry cut short")?;
            let raw = (i64::from(first & 0x1f) << 8) | i64::from(low);
            // Two's complement in 13 bits.
            let value = if raw >= 1 << 12 { raw - (1 << 13) } else { raw };
            (Item::Int(value), 2)
        } else if first & 0xf0 == 0xe0 {
            let low = *blob.get(pos + 1).ok_or("listpack entry cut short")?;
            let len = (usize::from(first & 0x0f) << 8) | usize::from(low);
            (Item::Bytes(slice(blob, pos + 2, len, "listpack")?), 2 + len)
        } else {
            match first {
                0xf0 => {
                    let bytes = slice(blob, pos + 1, 4, "listpack")?;
                    let len = u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize;
                    (Item::Bytes(slice(blob, pos + 5, len, "listpack")?), 5 + len)
                }
                0xf1..=0xf4 => {
                    let width = match first {
                        0xf1 => 2,
                        0xf2 => 3,
                        0xf3 => 4,
                        _ => 8,
                    };
                    (
                        Item::Int(int_le(slice(blob, pos + 1, width, "listpack")?)),
                        1 + width,
                    )
                }
                other => return Err(format!("unknown listpack encoding {other:#04x}")),
            }
        };
        pos = start + len;
        let mut expected = [0u8; 5];
        let backlen = encode_backlen(len, &mut expected);
        if slice(blob, pos, backlen.len(), "listpack")? != backlen {
            return Err("listpack entry's backlen does not match its length".into());
        }
        pos += backlen.len();
        items.push(item);
    }
    // 65535: too many entries to count in the header.
    if count != u16::MAX && usize::from(count) != items.len() {
        return Err(format!(
            "listpack says {count} entries, holds {}",
            items.len()
        ));
    }
    Ok(items)
}

/// The backlen bytes of an entry of `len` bytes, in file order.
fn encode_backlen(len: usize, buf: &mut [u8; 5]) -> &[u8] {
    let n = match len {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    };
    for (i, byte) in buf[..n].iter_mut().enumerate() {
        // The most significant group first, without the high bit.
        let group = (len >> (7 * (n - 1 - i))) & 127;
        *byte = if i == 0 {
            group as u8
        } else {
            group as u8 | 128
        };
    }
    &buf[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(entries: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        for entry in entries {
            body.extend_from_slice(entry);
            let mut buf = [0; 5];
            body.extend_from_slice(encode_backlen(entry.len(), &mut buf));
        }
        let mut out = Vec::new();
        out.extend_from_slice(&((HEADER + body.len() + 1) as u32).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&body);
        out.push(EOF);
        out
    }

    #[test]
    fn every_encoding() {
        let mut long = vec![0xe1, 0x00];
        long.extend(std::iter::repeat_n(b'x', 256));
        let blob = build(&[
            b"\x05",
            b"\x83abc",
            b"\xdf\xff",
            b"\xd0\x00",
            b"\xf1\x00\x80",
            b"\xf2\x01\x00\x00",
            b"\xf3\xff\xff\xff\x7f",
            b"\xf4\x00\x00\x00\x00\x00\x00\x00\x80",
            &long,
        ]);
        let items = entries(&blob).unwrap();
        assert_eq!(items[0], Item::Int(5));
        assert_eq!(items[1], Item::Bytes(b"abc"));
        assert_eq!(items[2], Item::Int(-1));
        assert_eq!(items[3], Item::Int(4096 - 8192));
        assert_eq!(items[4], Item::Int(-32768));
        assert_eq!(items[5], Item::Int(1));
        assert_eq!(items[6], Item::Int(i64::from(i32::MAX)));
        assert_eq!(items[7], Item::Int(i64::MIN));
        assert_eq!(items[8], Item::Bytes(&[b'x'; 256]));
    }

    #[test]
    fn backlen_like_redis() {
        let mut buf = [0; 5];
        assert_eq!(encode_backlen(5, &mut buf), &[5]);
        // 300 = 2 * 128 + 44.
        assert_eq!(encode_backlen(300, &mut buf), &[2, 44 | 128]);
    }

    #[test]
    fn damaged_listpacks_are_errors() {
        let blob = build(&[b"\x83abc", b"\x05"]);
        for cut in 0..blob.len() {
            assert!(entries(&blob[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_backlen = blob.clone();
        bad_backlen[10] = 9;
        assert!(entries(&bad_backlen).is_err());
    }
}
