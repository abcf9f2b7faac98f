//! Ziplist (RDB versions up to 9, and quicklist nodes of RDB 9):
//!
//! ```text
//! zlbytes u32le | zltail u32le | zllen u16le | entry* | 0xff
//! entry = prevlen (1 byte < 254, or 0xfe + u32le) | encoding | data
//! encoding: 00llllll / 01llllll llllllll / 10000000 + u32be: string of l bytes
//!           0xc0 i16, 0xd0 i32, 0xe0 i64, 0xf0 i24, 0xfe i8 (little-endian),
//!           0xf1..=0xfd: the integer 0..=12 in the low nibble (minus one)
//! ```

use super::{int_le, slice, Item};

const HEADER: usize = 10;
const END: u8 = 0xff;
const BIG_PREVLEN: u8 = 0xfe;

/// Every entry of a ziplist, checked against its header and terminator
/// (and each entry's prevlen against the entry before it).
pub fn entries(blob: &[u8]) -> Result<Vec<Item<'_>>, String> {
    if blob.len() < HEADER + 1 {
        return Err("ziplist shorter than its header".into());
    }
    let zlbytes = u32::from_le_bytes(blob[0..4].try_into().expect("4 bytes")) as usize;
    let zltail = u32::from_le_bytes(blob[4..8].try_into().expect("4 bytes")) as usize;
    let zllen = u16::from_le_bytes(blob[8..10].try_into().expect("2 bytes"));
    if zlbytes != blob.len() {
        return Err(format!(
            "ziplist says {zlbytes} bytes, holds {}",
            blob.len()
        ));
    }
    if zltail >= blob.len() {
        return Err("ziplist tail offset past its end".into());
    }
    let mut items = Vec::new();
    let mut pos = HEADER;
    let mut prev_len = 0usize;
    let mut last_start = HEADER;
    loop {
        let &first = blob.get(pos).ok_or("ziplist without its end byte")?;
        if first == END {
            if pos != blob.len() - 1 {
                return Err("bytes after a ziplist's end".into());
            }
            break;
        }
        let start = pos;
        let prevlen = if first == BIG_PREVLEN {
            let bytes = slice(blob, pos + 1, 4, "ziplist")?;
            pos += 5;
            u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize
        } else {
            pos += 1;
            usize::from(first)
        };
        if prevlen != prev_len {
            return Err("ziplist entry's prevlen does not match the entry before it".into());
        }
        let &encoding = blob.get(pos).ok_or("ziplist entry without its encoding")?;
        let item = match encoding >> 6 {
            0 => {
                let len = usize::from(encoding & 0x3f);
                pos += 1;
                Item::Bytes(take(blob, &mut pos, len)?)
            }
            1 => {
                let low = *blob.get(pos + 1).ok_or("ziplist entry header cut short")?;
                let len = (usize::from(encoding & 0x3f) << 8) | usize::from(low);
                pos += 2;
                Item::Bytes(take(blob, &mut pos, len)?)
            }
            2 => {
                let bytes = slice(blob, pos + 1, 4, "ziplist")?;
                let len = u32::from_be_bytes(bytes.try_into().expect("4 bytes")) as usize;
                pos += 5;
                Item::Bytes(take(blob, &mut pos, len)?)
            }
            _ => {
                pos += 1;
                let width = match encoding {
                    0xc0 => 2,
                    0xd0 => 4,
                    0xe0 => 8,
                    0xf0 => 3,
                    0xfe => 1,
                    0xf1..=0xfd => 0,
                    other => return Err(format!("unknown ziplist encoding {other:#04x}")),
                };
                if width == 0 {
                    Item::Int(i64::from(encoding & 0x0f) - 1)
                } else {
                    Item::Int(int_le(take(blob, &mut pos, width)?))
                }
            }
        };
        items.push(item);
        prev_len = pos - start;
        last_start = start;
    }
    if !items.is_empty() && zltail != last_start {
        return Err("ziplist tail offset does not point at its last entry".into());
    }
    // 0xffff: too many entries to count in the header.
    if zllen != u16::MAX && usize::from(zllen) != items.len() {
        return Err(format!(
            "ziplist says {zllen} entries, holds {}",
            items.len()
        ));
    }
    Ok(items)
}

fn take<'a>(blob: &'a [u8], pos: &mut usize, len: usize) -> Result<&'a [u8], String> {
    let bytes = slice(blob, *pos, len, "ziplist")?;
    *pos += len;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a ziplist from already encoded entries (encoding + data).
    fn build(entries: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        let mut prev = 0usize;
        let mut tail = HEADER;
        for entry in entries {
            tail = HEADER + body.len();
            let start = body.len();
            body.push(prev as u8);
            body.extend_from_slice(entry);
            prev = body.len() - start;
        }
        let total = HEADER + body.len() + 1;
        let mut out = Vec::new();
        out.extend_from_slice(&(total as u32).to_le_bytes());
        out.extend_from_slice(&(tail as u32).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&body);
        out.push(END);
        out
    }

    #[test]
    fn strings_and_every_integer_width() {
        let blob = build(&[
            b"\x03abc",
            b"\xf1",
            b"\xfd",
            b"\xfe\x80",
            b"\xc0\x00\x80",
            b"\xf0\xff\xff\x7f",
            b"\xd0\x00\x00\x00\x80",
            b"\xe0\xff\xff\xff\xff\xff\xff\xff\xff",
        ]);
        let items = entries(&blob).unwrap();
        assert_eq!(
            items,
            vec![
                Item::Bytes(b"abc"),
                Item::Int(0),
                Item::Int(12),
                Item::Int(-128),
                Item::Int(-32768),
                Item::Int((1 << 23) - 1),
                Item::Int(i64::from(i32::MIN)),
                Item::Int(-1),
            ]
        );
    }

    #[test]
    fn damaged_ziplists_are_errors() {
        let blob = build(&[b"\x03abc", b"\x01x"]);
        for cut in 0..blob.len() {
            assert!(entries(&blob[..cut]).is_err(), "cut at {cut}");
        }
        let mut wrong_count = blob.clone();
        wrong_count[8] = 3;
        assert!(entries(&wrong_count).is_err());
        let mut long_string = blob.clone();
        long_string[11] = 0x3f;
        assert!(entries(&long_string).is_err());
    }
}
