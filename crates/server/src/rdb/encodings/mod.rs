//! Redis's compact in-memory encodings, which RDB files store as one
//! string each: ziplist (RDB 4 to 9's small lists, hashes and sorted sets,
//! and quicklist nodes), listpack (RDB 10), intset (small integer sets)
//! and zipmap (small hashes before Redis 2.6). Each decoder checks every
//! length against the blob it was given and the blob's own header and
//! terminator, and gives the elements in order.

pub mod intset;
pub mod listpack;
pub mod ziplist;
pub mod zipmap;

/// An element of a ziplist or listpack: bytes, or an integer stored as one
/// (which Redis turns back into its decimal text).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Item<'a> {
    Bytes(&'a [u8]),
    Int(i64),
}

impl Item<'_> {
    pub fn to_vec(self) -> Vec<u8> {
        match self {
            Item::Bytes(bytes) => bytes.to_vec(),
            Item::Int(n) => itoa::Buffer::new().format(n).as_bytes().to_vec(),
        }
    }

    /// A sorted set's score stored as an element.
    pub fn to_score(self) -> Option<f64> {
        match self {
            Item::Bytes(bytes) => crate::rdb::input::parse_double(bytes),
            Item::Int(n) => Some(n as f64),
        }
    }
}

/// `len` bytes of `blob` at `at`, or an error naming the encoding.
fn slice<'a>(blob: &'a [u8], at: usize, len: usize, what: &str) -> Result<&'a [u8], String> {
    at.checked_add(len)
        .and_then(|end| blob.get(at..end))
        .ok_or_else(|| format!("{what} entry runs past the end of the blob"))
}

/// A little-endian signed integer of `bytes.len()` bytes (1 to 8).
fn int_le(bytes: &[u8]) -> i64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    let shift = 64 - 8 * bytes.len() as u32;
    // Sign-extends from the top byte given.
    (i64::from_le_bytes(word) << shift) >> shift
}

#[cfg(test)]
mod tests {
    #[test]
    fn sign_extension() {
        assert_eq!(super::int_le(&[0xff, 0xff, 0xff]), -1);
        assert_eq!(super::int_le(&[0x00, 0x00, 0x80]), -(1 << 23));
        assert_eq!(super::int_le(&[0xff, 0xff, 0x7f]), (1 << 23) - 1);
        assert_eq!(super::int_le(&[0x80]), -128);
    }
}
