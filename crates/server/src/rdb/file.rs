//! Whole RDB files: `REDIS` and four version digits, then opcodes and
//! key-value records, `EOF`, and (from version 5) the CRC-64 of everything
//! before it, little-endian (zero: the writer computed none).
//!
//! The checksum is verified before any record is handed out, so a damaged
//! file is refused before a caller has acted on part of it. Files are read
//! through a window (a few MiB, grown to hold the largest record), not
//! whole: each opcode is parsed from the window, and one the window cuts
//! short is parsed again once more of the file is in. Parsing an opcode
//! changes nothing until it has succeeded, so the retry is exact.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

use super::error::{Error, Result};
use super::input::Input;
use super::reader::read_object;
use super::value::Value;
use super::{crc64, opcode, CRC64};

/// The newest RDB version read (Redis 7.0's); older ones are read too.
pub const MAX_VERSION: u32 = 10;
const MAGIC: &[u8] = b"REDIS";
const HEADER: usize = 9;
/// The first version that ends with a checksum.
const FIRST_CHECKSUMMED: u32 = 5;
/// How much of a file is read at a time, at most: reads start at
/// `FIRST_READ` and double (a small file costs no large buffer). In unit
/// tests little, so records straddle windows all the time.
#[cfg(not(test))]
const WINDOW: usize = 8 << 20;
#[cfg(test)]
const WINDOW: usize = 16;
const FIRST_READ: usize = if WINDOW < 64 << 10 { WINDOW } else { 64 << 10 };

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

/// What one opcode (or one key and its value) said.
enum Step {
    Expire(i64),
    /// An eviction hint of the next record.
    Hint,
    /// A size hint of the next database.
    Resize,
    Select(u64),
    Aux(Vec<u8>, Vec<u8>),
    Function,
    Eof,
    Record(Vec<u8>, Value),
}

pub struct FileReader<R> {
    source: R,
    /// Bytes read from the source; `window[start..]` not parsed yet.
    window: Vec<u8>,
    start: usize,
    /// The file offset of `window[0]`.
    base: u64,
    at_eof: bool,
    /// The next read's size (at least; more when a record needs it).
    read_size: usize,
    pub version: u32,
    db: u64,
    /// Expiry and start of the record being read (its opcodes so far).
    expire_at_ms: Option<i64>,
    record_start: Option<u64>,
    /// AUX fields (redis-ver, ctime, ...), in file order.
    pub aux: Vec<(Vec<u8>, Vec<u8>)>,
    /// Function libraries (FUNCTION2) passed over: Engram has no Lua.
    pub functions_skipped: u64,
    done: bool,
}

/// The version a file's first bytes name.
fn version(header: &[u8]) -> Result<u32> {
    if header.len() < HEADER || &header[..5] != MAGIC {
        return Err(Error::at(
            0,
            "not an RDB file (it does not start with REDIS)",
        ));
    }
    let version = std::str::from_utf8(&header[5..HEADER])
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
    Ok(version)
}

fn checksum_mismatch(body: u64) -> Error {
    Error::at(body, "checksum mismatch: the file is damaged or truncated")
}

impl<'a> FileReader<&'a [u8]> {
    /// A file in memory: checks its header and checksum.
    pub fn new(data: &'a [u8]) -> Result<FileReader<&'a [u8]>> {
        let version = version(data)?;
        if version >= FIRST_CHECKSUMMED {
            let body = data
                .len()
                .checked_sub(8)
                .filter(|&end| end > HEADER)
                .ok_or_else(|| {
                    Error::truncated(data.len() as u64, "the file ends before its checksum")
                })?;
            let stored = u64::from_le_bytes(data[body..].try_into().expect("8 bytes"));
            // Zero: written with `rdbchecksum no`.
            if stored != 0 && stored != crc64(&data[..body]) {
                return Err(checksum_mismatch(body as u64));
            }
        }
        Ok(FileReader::start(&data[HEADER..], version))
    }
}

impl FileReader<File> {
    /// A file on disk: checks its header and checksum (one pass over the
    /// file), then reads it from the start.
    pub fn open(path: &Path) -> Result<FileReader<File>> {
        let io = |e: std::io::Error| Error::at(0, format!("cannot read the file: {e}"));
        let mut file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut header = [0u8; HEADER];
        let got = read_full(&mut file, &mut header).map_err(io)?;
        let version = version(&header[..got])?;
        if version >= FIRST_CHECKSUMMED {
            let body = len
                .checked_sub(8)
                .filter(|&end| end > HEADER as u64)
                .ok_or_else(|| Error::truncated(len, "the file ends before its checksum"))?;
            let mut digest = CRC64.digest();
            digest.update(&header);
            let mut left = body - HEADER as u64;
            let mut chunk = vec![0u8; 1 << 20];
            while left > 0 {
                let n = (chunk.len() as u64).min(left) as usize;
                file.read_exact(&mut chunk[..n]).map_err(io)?;
                digest.update(&chunk[..n]);
                left -= n as u64;
            }
            let mut stored = [0u8; 8];
            file.read_exact(&mut stored).map_err(io)?;
            let stored = u64::from_le_bytes(stored);
            if stored != 0 && stored != digest.finalize() {
                return Err(checksum_mismatch(body));
            }
        }
        file.seek(SeekFrom::Start(HEADER as u64)).map_err(io)?;
        Ok(FileReader::start(file, version))
    }
}

/// Reads until `buf` is full or the source ends; how much was read.
fn read_full(source: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match source.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

impl<R: Read> FileReader<R> {
    /// A reader of `source`, positioned just after the header.
    fn start(source: R, version: u32) -> FileReader<R> {
        FileReader {
            source,
            window: Vec::new(),
            start: 0,
            base: HEADER as u64,
            at_eof: false,
            read_size: FIRST_READ,
            version,
            db: 0,
            expire_at_ms: None,
            record_start: None,
            aux: Vec::new(),
            functions_skipped: 0,
            done: false,
        }
    }

    /// Where the reader is in the file.
    pub fn offset(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Drops what was parsed and reads more: at least as much as the
    /// window held, so a record longer than it takes few rounds.
    fn refill(&mut self) -> Result<()> {
        self.window.drain(..self.start);
        self.base += self.start as u64;
        self.start = 0;
        let kept = self.window.len();
        let wanted = kept.max(self.read_size);
        self.read_size = (self.read_size * 2).min(WINDOW);
        self.window.resize(kept + wanted, 0);
        let got = read_full(&mut self.source, &mut self.window[kept..]).map_err(|e| {
            Error::at(
                self.base + kept as u64,
                format!("cannot read the file: {e}"),
            )
        })?;
        self.window.truncate(kept + got);
        if got < wanted {
            self.at_eof = true;
        }
        Ok(())
    }

    /// The next key, or None after EOF.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        while !self.done {
            let at = self.offset();
            let step = {
                let mut input = Input::at(&self.window[self.start..], at);
                match parse_step(&mut input) {
                    Ok(step) => Ok((step, input.consumed())),
                    Err(e) => Err(e),
                }
            };
            let (step, consumed) = match step {
                Ok(parsed) => parsed,
                Err(e) if e.truncated && !self.at_eof => {
                    self.refill()?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.start += consumed;
            match step {
                Step::Expire(ms) => {
                    self.record_start.get_or_insert(at);
                    self.expire_at_ms = Some(ms);
                }
                Step::Hint => {
                    self.record_start.get_or_insert(at);
                }
                Step::Resize => {}
                Step::Select(db) => self.db = db,
                Step::Aux(name, value) => self.aux.push((name, value)),
                Step::Function => self.functions_skipped += 1,
                Step::Eof => {
                    while !self.at_eof {
                        self.refill()?;
                    }
                    let trailer = if self.version >= FIRST_CHECKSUMMED {
                        8
                    } else {
                        0
                    };
                    let left = self.window.len() - self.start;
                    if left != trailer {
                        return Err(Error::at(
                            self.offset(),
                            format!(
                                "{left} bytes after the end of the RDB data, {trailer} expected"
                            ),
                        ));
                    }
                    self.done = true;
                }
                Step::Record(key, value) => {
                    return Ok(Some(Record {
                        db: self.db,
                        key,
                        value,
                        expire_at_ms: self.expire_at_ms.take(),
                        offset: self.record_start.take().unwrap_or(at),
                    }));
                }
            }
        }
        Ok(None)
    }
}

/// Parses one opcode and what belongs to it (a key and its value, for a
/// type byte).
fn parse_step(input: &mut Input) -> Result<Step> {
    let at = input.offset();
    Ok(match input.u8()? {
        opcode::EXPIRETIME_MS => Step::Expire(input.i64_le()?),
        opcode::EXPIRETIME => Step::Expire(i64::from(input.i32_le()?) * 1000),
        // Eviction hints: Engram keeps no LRU or LFU data.
        opcode::IDLE => {
            input.length()?;
            Step::Hint
        }
        opcode::FREQ => {
            input.u8()?;
            Step::Hint
        }
        opcode::SELECTDB => Step::Select(input.length()?),
        opcode::RESIZEDB => {
            input.length()?;
            input.length()?;
            Step::Resize
        }
        opcode::AUX => {
            let name = input.string()?.into_owned();
            let value = input.string()?.into_owned();
            Step::Aux(name, value)
        }
        opcode::FUNCTION2 => {
            input.string()?;
            Step::Function
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
        opcode::EOF => Step::Eof,
        ty => {
            let key = input.string()?.into_owned();
            let value = read_object(input, ty)?;
            Step::Record(key, value)
        }
    })
}
