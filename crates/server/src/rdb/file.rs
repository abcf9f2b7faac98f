//! Whole RDB files: `REDIS` and four version digits, then opcodes and
//! key-value records, `EOF`, and (from version 5) the CRC-64 of everything
//! before it, little-endian (zero: the writer computed none).
//!
//! The reader checks the checksum before it hands out anything, so a
//! damaged file is refused before a caller has acted on part of it.

use super::error::{Error, Result};
use super::input::Input;
use super::reader::read_object;
use super::value::Value;
use super::{crc64, opcode};

/// The newest RDB version read (Redis 7.0's); older ones are read too.
pub const MAX_VERSION: u32 = 10;
const MAGIC: &[u8] = b"REDIS";
/// The first version that ends with a checksum.
const FIRST_CHECKSUMMED: u32 = 5;

/// A key and its value, as a file holds them.
pub struct Record {
    pub db: u64,
    pub key: Vec<u8>,
    pub value: Value,
    /// Milliseconds since the Unix epoch (may be in the past, or negative).
    pub expire_at_ms: Option<i64>,
    /// Where the record starts (its first opcode).
    pub offset: u64,
}

pub struct FileReader<'a> {
    input: Input<'a>,
    pub version: u32,
    db: u64,
    /// AUX fields (redis-ver, ctime, ...), in file order.
    pub aux: Vec<(Vec<u8>, Vec<u8>)>,
    /// Function libraries (FUNCTION2) passed over: Engram has no Lua.
    pub functions_skipped: u64,
    done: bool,
}

impl<'a> FileReader<'a> {
    /// Checks the header and the checksum of a whole file.
    pub fn new(data: &'a [u8]) -> Result<FileReader<'a>> {
        if data.len() < 9 || &data[..5] != MAGIC {
            return Err(Error::at(
                0,
                "not an RDB file (it does not start with REDIS)",
            ));
        }
        let version = std::str::from_utf8(&data[5..9])
            .ok()
            .filter(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u32>().ok())
            .ok_or_else(|| Error::at(5, "the RDB version is not four digits"))?;
        if version == 0 || version > MAX_VERSION {
            return Err(Error::unsupported(
                5,
                format!(
                    "RDB version {version}: Engram reads versions 1 to {MAX_VERSION} (Redis 7.0's)"
                ),
            ));
        }
        if version >= FIRST_CHECKSUMMED {
            let body = data
                .len()
                .checked_sub(8)
                .filter(|&end| end > 9)
                .ok_or_else(|| Error::at(data.len() as u64, "the file ends before its checksum"))?;
            let stored = u64::from_le_bytes(data[body..].try_into().expect("8 bytes"));
            // Zero: written with `rdbchecksum no`.
            if stored != 0 && stored != crc64(&data[..body]) {
                return Err(Error::at(
                    body as u64,
                    "checksum mismatch: the file is damaged or truncated",
                ));
            }
        }
        let mut input = Input::new(data);
        input.bytes(9)?;
        Ok(FileReader {
            input,
            version,
            db: 0,
            aux: Vec::new(),
            functions_skipped: 0,
            done: false,
        })
    }

    /// The next key, or None after EOF.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        if self.done {
            return Ok(None);
        }
        let input = &mut self.input;
        let mut expire_at_ms = None;
        let mut start = None;
        loop {
            let at = input.offset();
            let op = input.u8()?;
            match op {
                opcode::EXPIRETIME_MS => {
                    start.get_or_insert(at);
                    expire_at_ms = Some(input.i64_le()?);
                }
                opcode::EXPIRETIME => {
                    start.get_or_insert(at);
                    expire_at_ms = Some(i64::from(input.i32_le()?) * 1000);
                }
                // Eviction hints: Engram keeps no LRU or LFU data.
                opcode::IDLE => {
                    start.get_or_insert(at);
                    input.length()?;
                }
                opcode::FREQ => {
                    start.get_or_insert(at);
                    input.u8()?;
                }
                opcode::SELECTDB => self.db = input.length()?,
                opcode::RESIZEDB => {
                    input.length()?;
                    input.length()?;
                }
                opcode::AUX => {
                    let name = input.string()?.into_owned();
                    let value = input.string()?.into_owned();
                    self.aux.push((name, value));
                }
                opcode::FUNCTION2 => {
                    input.string()?;
                    self.functions_skipped += 1;
                }
                opcode::FUNCTION => {
                    return Err(Error::unsupported(
                        at,
                        "a function library in the format of Redis 7.0's release candidates \
                         (opcode FUNCTION)",
                    ))
                }
                opcode::MODULE_AUX => {
                    return Err(Error::unsupported(
                        at,
                        "module data (opcode MODULE_AUX): Engram has no modules",
                    ))
                }
                opcode::EOF => {
                    let trailer = if self.version >= FIRST_CHECKSUMMED {
                        8
                    } else {
                        0
                    };
                    if input.remaining() != trailer {
                        return Err(input.error(format!(
                            "{} bytes after the end of the RDB data, {trailer} expected",
                            input.remaining()
                        )));
                    }
                    self.done = true;
                    return Ok(None);
                }
                ty => {
                    let key = input.string()?.into_owned();
                    let value = read_object(input, ty)?;
                    return Ok(Some(Record {
                        db: self.db,
                        key,
                        value,
                        expire_at_ms,
                        offset: start.unwrap_or(at),
                    }));
                }
            }
        }
    }

    /// Where the reader is (for errors a caller finds in a record).
    pub fn offset(&self) -> u64 {
        self.input.offset()
    }
}
