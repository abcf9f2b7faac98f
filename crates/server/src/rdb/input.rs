//! A bounds-checked cursor over RDB bytes: the primitives every encoding is
//! built from (lengths, strings, doubles, times), each an error rather than
//! a panic when the bytes run out or make no sense.
//!
//! Lengths come from untrusted input, so nothing is allocated from one
//! before it is checked against the bytes that remain: a string of length
//! N needs N bytes, a collection of N elements at least N.

use std::borrow::Cow;

use super::error::{Error, Result};
use super::lzf;

/// Length prefixes (the top two bits of the first byte).
const LEN_6BIT: u8 = 0;
const LEN_14BIT: u8 = 1;
const LEN_32BIT: u8 = 0x80;
const LEN_64BIT: u8 = 0x81;
const ENCVAL: u8 = 3;
/// Special string encodings (after `ENCVAL`).
const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;

/// The longest string a compressed one may expand to: the most a value
/// of Engram's store holds (and Redis's default string limit), which also
/// bounds what a lying header can make the reader allocate.
const MAX_STRING: u64 = engram_engine::MAX_VALUE_BYTES as u64;

/// A length, or (for strings) the tag of a special encoding.
enum Length {
    Plain(u64),
    Encoded(u8),
}

pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
    /// The offset of `data[0]` in the whole input (a file read in windows).
    base: u64,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input::at(data, 0)
    }

    /// `data` that starts `base` bytes into the whole input.
    pub fn at(data: &'a [u8], base: u64) -> Input<'a> {
        Input { data, pos: 0, base }
    }

    /// Offset from the start of the whole input.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes read since `new`/`at`.
    pub fn consumed(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// An error at the current position.
    pub fn error(&self, message: impl Into<String>) -> Error {
        Error::at(self.offset(), message)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::truncated(
                self.offset(),
                format!(
                    "input ends early: {n} bytes wanted, {} left",
                    self.remaining()
                ),
            ));
        }
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    pub fn i32_le(&mut self) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub fn i64_le(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A double as 8 little-endian bytes (`RDB_TYPE_ZSET_2`).
    pub fn f64_le(&mut self) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    fn length_or_encoding(&mut self) -> Result<Length> {
        let first = self.u8()?;
        Ok(match first >> 6 {
            LEN_6BIT => Length::Plain(u64::from(first & 0x3f)),
            LEN_14BIT => Length::Plain((u64::from(first & 0x3f) << 8) | u64::from(self.u8()?)),
            ENCVAL => Length::Encoded(first & 0x3f),
            _ => match first {
                LEN_32BIT => Length::Plain(u64::from(u32::from_be_bytes(self.array()?))),
                LEN_64BIT => Length::Plain(u64::from_be_bytes(self.array()?)),
                _ => return Err(self.error(format!("unknown length prefix {first:#04x}"))),
            },
        })
    }

    /// A plain length (an encoded one is an error here).
    pub fn length(&mut self) -> Result<u64> {
        match self.length_or_encoding()? {
            Length::Plain(len) => Ok(len),
            Length::Encoded(_) => Err(self.error("an encoded value where a length belongs")),
        }
    }

    /// A count of items that take at least `min_bytes` each: more than
    /// the remaining bytes could hold is an error, which bounds what a
    /// caller allocates for them.
    pub fn count(&mut self, what: &str, min_bytes: usize) -> Result<usize> {
        let at = self.offset();
        let n = self.length()?;
        if n > (self.remaining() / min_bytes.max(1)) as u64 {
            return Err(Error::truncated(
                at,
                format!(
                    "{what} {n} is more than the remaining {} bytes hold",
                    self.remaining()
                ),
            ));
        }
        Ok(n as usize)
    }

    /// A string: raw, an integer (rendered in decimal, as Redis does), or
    /// LZF-compressed. Borrowed from the input when stored raw.
    pub fn string(&mut self) -> Result<Cow<'a, [u8]>> {
        let at = self.offset();
        match self.length_or_encoding()? {
            Length::Plain(len) => {
                if len > self.remaining() as u64 {
                    return Err(Error::truncated(
                        at,
                        format!("string of {len} bytes, only {} left", self.remaining()),
                    ));
                }
                Ok(Cow::Borrowed(self.bytes(len as usize)?))
            }
            Length::Encoded(ENC_INT8) => Ok(decimal(i64::from(self.u8()? as i8))),
            Length::Encoded(ENC_INT16) => Ok(decimal(i64::from(i16::from_le_bytes(self.array()?)))),
            Length::Encoded(ENC_INT32) => Ok(decimal(i64::from(self.i32_le()?))),
            Length::Encoded(ENC_LZF) => {
                let compressed_len = self.length()?;
                let len = self.length()?;
                if compressed_len > self.remaining() as u64 {
                    return Err(Error::truncated(
                        at,
                        format!(
                            "compressed string of {compressed_len} bytes, only {} left",
                            self.remaining()
                        ),
                    ));
                }
                let compressed = self.bytes(compressed_len as usize)?;
                if len == 0
                    || len > compressed_len.saturating_mul(lzf::MAX_RATIO)
                    || len > MAX_STRING
                {
                    return Err(Error::at(
                        at,
                        format!("compressed string declares {len} bytes from {compressed_len}"),
                    ));
                }
                lzf::decompress(compressed, len as usize)
                    .map(Cow::Owned)
                    .map_err(|e| Error::at(at, e))
            }
            Length::Encoded(other) => {
                Err(Error::at(at, format!("unknown string encoding {other}")))
            }
        }
    }

    /// A double as text with a one-byte length (`RDB_TYPE_ZSET`): 253 is
    /// NaN, 254 +inf, 255 -inf.
    pub fn text_double(&mut self) -> Result<f64> {
        let at = self.offset();
        match self.u8()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            len => {
                let text = self.bytes(usize::from(len))?;
                parse_double(text).ok_or_else(|| Error::at(at, "a score that is not a number"))
            }
        }
    }
}

fn decimal(n: i64) -> Cow<'static, [u8]> {
    Cow::Owned(itoa::Buffer::new().format(n).as_bytes().to_vec())
}

/// A double written as text (`%.17g`, `inf`, `-inf`), as Redis's `strtod`
/// reads one.
pub fn parse_double(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    if text.is_empty() || text.trim() != text {
        return None;
    }
    text.parse::<f64>().ok()
}
