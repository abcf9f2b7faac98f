//! Records: one key and its value, written once into a block.
//!
//! Records start 8-byte aligned and are packed back to back from byte 64 of
//! a log block (or fill an extent from byte 64 of its head). Little-endian:
//!
//! ```text
//! offset        size  field        mutability            covered by
//!      0           8  state        atomic bit flips      (nothing: see below)
//!      8           4  crc_header   immutable             -
//!                                                        (crc_header also covers the
//!                                                        state word's generation)
//!     12           4  crc_value    immutable             crc_header
//!     16           8  seq          immutable             crc_header
//!     24           4  key_len      immutable             crc_header
//!     28           4  value_len    immutable             crc_header
//!     32     key_len  key          immutable             crc_header
//!  32+a8(k) value_len value        8-byte words in place crc_value (unless IN_PLACE)
//! ```
//!
//! `a8(n)` rounds up to a multiple of 8, so the value is 8-byte aligned and
//! its aligned words can be updated atomically in place (Viper 4.4).
//!
//! The state word is `generation << 32 | flags`: the generation must equal the
//! block's (so stale records of a reused block are invalid), and the flags are
//! `DELETED` (the record is retired: Viper's delete bit, flipped with one
//! atomic OR and persisted) and `IN_PLACE` (a word of the value was updated in
//! place, so `crc_value` no longer describes it; the flag is persisted before
//! the first such update).
//!
//! `crc_header` is CRC32C over the generation (4 bytes, little-endian), bytes
//! 12..32 and the key. Covering the generation matters: a block is reused
//! without being cleared, so a torn write can leave a new state word in front
//! of the body of a record from the block's previous life, whose own checksum
//! is intact. Found by the crash explorer (tests/crash_explorer.rs, seed 1).
//!
//! ## Commit rule
//!
//! A record is written whole and persisted once. It is valid when its
//! generation matches, `crc_header` matches, and `crc_value` matches unless
//! `IN_PLACE` is set. A torn record fails a checksum (IN_PLACE cannot be set on
//! one: only a published, hence complete, record gets it), so recovery never
//! mistakes it for data. Within a log block records are written in order by
//! one writer at a time and each is persisted before the next begins, so the
//! first invalid record ends the block's log.
//!
//! `seq` is a store-wide sequence number: when two live records of one key
//! survive a crash, the larger `seq` is the newer write.
//!
//! ## Tombstones (format 2)
//!
//! A *tombstone* says "deleted at `seq`": bit 31 of `key_len` set, no
//! value (`value_len` 0). Under lazy retirement (`retirement.rs`) a
//! delete appends one instead of setting DELETED bits in place, so that
//! the only page an acknowledged delete dirties is the log's tail; it
//! outranks every older version of its key by `seq` and is never indexed.
//! The flag sits in a field `crc_header` covers, so a torn or damaged
//! tombstone is rejected like any other record. Format 1 stores never
//! hold one (a format 1 reader would take the flag for a bad length).
//!
//! ## Batch headers (format 2)
//!
//! A *batch header* (bit 30 of `key_len`, no key, an 8-byte value: the
//! count N) says that the N records after it, in the same block, are one
//! atomic write: recovery keeps them only if all N are valid, so a power
//! failure never leaves part of a multi-key write (`write::write_batch`).
//! Each of the N is an ordinary record or tombstone, read, retired and
//! moved like any other; the header itself is never indexed.

use engram_pmem::{PmemOffset, Region};

pub const MAX_KEY_BYTES: usize = 64 << 10;
pub const MAX_VALUE_BYTES: usize = 512 << 20;
pub const HEADER_BYTES: u64 = 32;
pub const DELETED: u64 = 1;
pub const IN_PLACE: u64 = 2;
/// Bit of the stored `key_len` that makes the record a tombstone.
const TOMBSTONE_KEY_LEN_BIT: u32 = 1 << 31;
/// Bit of the stored `key_len` that makes the record a batch header.
const BATCH_KEY_LEN_BIT: u32 = 1 << 30;
const KIND_BITS: u32 = TOMBSTONE_KEY_LEN_BIT | BATCH_KEY_LEN_BIT;
/// A batch header's value: the count of records it covers.
pub const BATCH_HEADER_VALUE_BYTES: usize = 8;
/// Bytes a batch header occupies.
pub const BATCH_HEADER_BYTES: u64 = encoded_bytes(0, BATCH_HEADER_VALUE_BYTES);
const FLAG_MASK: u64 = DELETED | IN_PLACE;

const _: () = assert!(MAX_KEY_BYTES <= u32::MAX as usize);
const _: () = assert!(MAX_VALUE_BYTES <= u32::MAX as usize);
const _: () = assert!(HEADER_BYTES.is_multiple_of(8));

pub const fn align8(n: u64) -> u64 {
    (n + 7) & !7
}

/// Bytes a record of these lengths occupies, padding included.
pub const fn encoded_bytes(key_len: usize, value_len: usize) -> u64 {
    HEADER_BYTES + align8(key_len as u64) + align8(value_len as u64)
}

pub const fn value_offset(key_len: usize) -> u64 {
    HEADER_BYTES + align8(key_len as u64)
}

#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub state: u64,
    pub crc_header: u32,
    pub crc_value: u32,
    pub seq: u64,
    pub key_len: u32,
    pub value_len: u32,
    /// A tombstone (see the module docs): its key was deleted at `seq`.
    pub tombstone: bool,
    /// A batch header (see the module docs).
    pub batch: bool,
}

impl Header {
    pub fn generation(&self) -> u32 {
        (self.state >> 32) as u32
    }
    pub fn is_deleted(&self) -> bool {
        self.state & DELETED != 0
    }
    pub fn is_in_place(&self) -> bool {
        self.state & IN_PLACE != 0
    }
    pub fn encoded_bytes(&self) -> u64 {
        encoded_bytes(self.key_len as usize, self.value_len as usize)
    }
    pub fn value_offset(&self) -> u64 {
        value_offset(self.key_len as usize)
    }
}

/// Writes a record at `at` (not persisted: the caller persists the whole
/// range once). Returns its encoded size.
pub fn write(
    region: &Region,
    at: PmemOffset,
    generation: u32,
    seq: u64,
    key: &[u8],
    value: &[u8],
) -> u64 {
    write_record(region, at, generation, seq, key, value, 0)
}

/// Writes a tombstone for `key` at `at` (not persisted). Returns its size.
pub fn write_tombstone(
    region: &Region,
    at: PmemOffset,
    generation: u32,
    seq: u64,
    key: &[u8],
) -> u64 {
    write_record(region, at, generation, seq, key, &[], TOMBSTONE_KEY_LEN_BIT)
}

/// Writes a batch header covering the `count` records that follow it (not
/// persisted). Returns its size.
pub fn write_batch_header(
    region: &Region,
    at: PmemOffset,
    generation: u32,
    seq: u64,
    count: u64,
) -> u64 {
    write_record(
        region,
        at,
        generation,
        seq,
        &[],
        &count.to_le_bytes(),
        BATCH_KEY_LEN_BIT,
    )
}

/// The count of records a batch header covers.
pub fn batch_count(region: &Region, at: PmemOffset, header: &Header) -> u64 {
    debug_assert!(header.batch);
    u64::from_le_bytes(value(region, at, header).try_into().expect("8 bytes"))
}

/// Writes a value piece by piece (`Store::put_written`), its checksum
/// appended as it goes: small pieces are gathered and written 64 KiB at a
/// time, large ones directly. Into a record ([`ValueWriter::into_record`]
/// writes its header once the value is whole), or, for a value small
/// enough for a log block, into memory ([`ValueWriter::into_bytes`]).
pub struct ValueWriter<'r> {
    /// The record's region and where its value's next byte goes; None:
    /// gathered in `staged` whole.
    target: Option<(&'r Region, PmemOffset)>,
    /// Bytes the caller declared and has not written yet.
    left: usize,
    crc: u32,
    staged: Vec<u8>,
}

/// What [`ValueWriter`] gathers before writing to the region.
const STAGED_BYTES: usize = 64 << 10;

impl<'r> ValueWriter<'r> {
    /// A writer of `len` bytes into memory.
    pub fn in_memory(len: usize) -> ValueWriter<'static> {
        ValueWriter {
            target: None,
            left: len,
            crc: 0,
            staged: Vec::with_capacity(len),
        }
    }

    /// A writer of `len` bytes into the value of the record at `at` (for
    /// a key of `key_len` bytes).
    pub fn in_record(region: &'r Region, at: PmemOffset, key_len: usize, len: usize) -> Self {
        ValueWriter {
            target: Some((region, at.add(value_offset(key_len)))),
            left: len,
            crc: 0,
            staged: Vec::with_capacity(STAGED_BYTES.min(len)),
        }
    }

    /// Appends `bytes` to the value. Panics past the declared length: the
    /// caller computed it from what it writes.
    pub fn write(&mut self, bytes: &[u8]) {
        assert!(
            bytes.len() + self.staged.len() <= self.left,
            "a value written past its declared length"
        );
        if self.target.is_none() {
            self.staged.extend_from_slice(bytes);
            return;
        }
        if self.staged.len() + bytes.len() > STAGED_BYTES {
            self.flush();
        }
        if bytes.len() >= STAGED_BYTES {
            self.store(bytes);
        } else {
            self.staged.extend_from_slice(bytes);
        }
    }

    fn flush(&mut self) {
        let staged = std::mem::take(&mut self.staged);
        self.store(&staged);
        self.staged = staged;
        self.staged.clear();
    }

    fn store(&mut self, bytes: &[u8]) {
        let (region, at) = self.target.as_mut().expect("a record's writer");
        region.write(*at, bytes);
        *at = at.add(bytes.len() as u64);
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.left -= bytes.len();
    }

    /// Bytes declared and not written yet (0 once the value is whole).
    pub fn left(&self) -> usize {
        self.left - self.staged.len()
    }

    /// The value gathered in memory.
    pub fn into_bytes(self) -> Vec<u8> {
        debug_assert!(self.target.is_none());
        self.staged
    }

    /// Ends the record at `at` whose value this wrote: its header, with
    /// the value's checksum (not persisted). Returns the record's size.
    /// Panics if the value is not whole.
    pub fn into_record(
        mut self,
        at: PmemOffset,
        generation: u32,
        seq: u64,
        key: &[u8],
        value_len: usize,
    ) -> u64 {
        self.flush();
        assert_eq!(self.left, 0, "a value written short of its declared length");
        let (region, _) = self.target.expect("a record's writer");
        write_head(region, at, generation, seq, key, value_len, self.crc, 0)
    }
}

fn write_record(
    region: &Region,
    at: PmemOffset,
    generation: u32,
    seq: u64,
    key: &[u8],
    value: &[u8],
    kind: u32,
) -> u64 {
    debug_assert!(kind != TOMBSTONE_KEY_LEN_BIT || value.is_empty());
    region.write(at.add(value_offset(key.len())), value);
    let crc_value = crc32c::crc32c(value);
    write_head(
        region,
        at,
        generation,
        seq,
        key,
        value.len(),
        crc_value,
        kind,
    )
}

/// A record's header and key, for a value of `value_len` bytes whose
/// checksum is `crc_value` (not persisted). Returns the record's size.
#[allow(clippy::too_many_arguments)]
fn write_head(
    region: &Region,
    at: PmemOffset,
    generation: u32,
    seq: u64,
    key: &[u8],
    value_len: usize,
    crc_value: u32,
    kind: u32,
) -> u64 {
    debug_assert!(key.len() <= MAX_KEY_BYTES);
    debug_assert!(value_len <= MAX_VALUE_BYTES);
    debug_assert!(at.0.is_multiple_of(8));
    let mut header = [0u8; HEADER_BYTES as usize];
    header[0..8].copy_from_slice(&((generation as u64) << 32).to_le_bytes());
    header[12..16].copy_from_slice(&crc_value.to_le_bytes());
    header[16..24].copy_from_slice(&seq.to_le_bytes());
    let stored_key_len = key.len() as u32 | kind;
    header[24..28].copy_from_slice(&stored_key_len.to_le_bytes());
    header[28..32].copy_from_slice(&(value_len as u32).to_le_bytes());
    let crc_header = header_crc(generation, &header[12..32], key);
    header[8..12].copy_from_slice(&crc_header.to_le_bytes());
    region.write(at, &header);
    region.write(at.add(HEADER_BYTES), key);
    encoded_bytes(key.len(), value_len)
}

/// Reads the header at `at` without validating it (for records the index
/// points at, which were validated when written or recovered).
pub fn read_header(region: &Region, at: PmemOffset) -> Header {
    let state = region.load_u64(at);
    let bytes = region.read(at.add(8), HEADER_BYTES - 8);
    let stored_key_len = u32::from_le_bytes(bytes[16..20].try_into().unwrap());
    Header {
        state,
        crc_header: u32::from_le_bytes(bytes[0..4].try_into().unwrap()),
        crc_value: u32::from_le_bytes(bytes[4..8].try_into().unwrap()),
        seq: u64::from_le_bytes(bytes[8..16].try_into().unwrap()),
        key_len: stored_key_len & !KIND_BITS,
        value_len: u32::from_le_bytes(bytes[20..24].try_into().unwrap()),
        tombstone: stored_key_len & TOMBSTONE_KEY_LEN_BIT != 0,
        batch: stored_key_len & BATCH_KEY_LEN_BIT != 0,
    }
}

/// Why a position holds no valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// Not enough room left for a header: the normal end of a full block.
    NoRoom,
    /// The generation does not match: never written in this block's life.
    /// The normal end of a block's log.
    Unwritten,
    /// Lengths out of range or past the end of the block: damage.
    BadLength,
    /// A checksum failed: a torn write or damage.
    BadChecksum,
}

/// Validates the record at `at`, which must end by `end`, in a block of
/// `generation`. Deleted records are validated too (their length is needed to
/// step over them), except for their value, which nobody will read.
pub fn parse(
    region: &Region,
    at: PmemOffset,
    end: u64,
    generation: u32,
) -> Result<Header, Invalid> {
    let header = parse_header(region, at, end, generation)?;
    if !header.is_deleted() && !value_checksum_ok(region, at, &header) {
        return Err(Invalid::BadChecksum);
    }
    Ok(header)
}

/// Whether the header (and key) of an in-bounds record still match their
/// checksum, i.e. its key can be trusted.
pub fn header_intact(region: &Region, at: PmemOffset, header: &Header) -> bool {
    let fixed = region.read(at.add(12), HEADER_BYTES - 12);
    header_crc(header.generation(), fixed, key(region, at, header)) == header.crc_header
}

/// Like [`parse`], but does not check the value: for recovery, which must
/// still index a record whose value lies on a page damaged beyond repair
/// (so that reads of its key fail loudly instead of finding nothing).
pub fn parse_header(
    region: &Region,
    at: PmemOffset,
    end: u64,
    generation: u32,
) -> Result<Header, Invalid> {
    if at.0 + HEADER_BYTES > end {
        return Err(Invalid::NoRoom);
    }
    let header = read_header(region, at);
    if header.generation() != generation || header.state & !FLAG_MASK & 0xffff_ffff != 0 {
        return Err(Invalid::Unwritten);
    }
    if header.key_len as usize > MAX_KEY_BYTES
        || header.value_len as usize > MAX_VALUE_BYTES
        || (header.tombstone && header.value_len != 0)
        || (header.batch
            && (header.tombstone
                || header.key_len != 0
                || header.value_len as usize != BATCH_HEADER_VALUE_BYTES))
        || at.0 + header.encoded_bytes() > end
    {
        return Err(Invalid::BadLength);
    }
    if !header_intact(region, at, &header) {
        return Err(Invalid::BadChecksum);
    }
    Ok(header)
}

fn header_crc(generation: u32, fixed: &[u8], key: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&generation.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c_append(crc, fixed), key)
}

/// Whether the value still matches its checksum (always true once updated in
/// place, when the checksum no longer applies).
pub fn value_checksum_ok(region: &Region, at: PmemOffset, header: &Header) -> bool {
    header.is_in_place() || crc32c::crc32c(value(region, at, header)) == header.crc_value
}

pub fn key<'r>(region: &'r Region, at: PmemOffset, header: &Header) -> &'r [u8] {
    region.read(at.add(HEADER_BYTES), header.key_len as u64)
}

pub fn value<'r>(region: &'r Region, at: PmemOffset, header: &Header) -> &'r [u8] {
    region.read(at.add(header.value_offset()), header.value_len as u64)
}

/// Whether the record at `at` holds `key` (reads only what it must). Never
/// true of a tombstone (its stored length carries the flag bit): the index
/// never points at one.
pub fn has_key(region: &Region, at: PmemOffset, key: &[u8]) -> bool {
    let len = u32::from_le_bytes(region.read(at.add(24), 4).try_into().unwrap());
    len as usize == key.len()
        && region.contains(at.add(HEADER_BYTES), len as u64)
        && region.read(at.add(HEADER_BYTES), len as u64) == key
}

/// Sets flag bits in the state word and persists it; returns the previous word.
pub fn set_flags(region: &Region, at: PmemOffset, flags: u64) -> u64 {
    debug_assert!(flags & !FLAG_MASK == 0);
    let previous = region.fetch_or_u64(at, flags);
    region.persist(at, 8);
    previous
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_pmem::{ModeChoice, RegionOptions};

    fn region() -> (tempfile::TempDir, Region) {
        let dir = tempfile::tempdir().unwrap();
        let options = RegionOptions {
            mode: ModeChoice::Emulated,
            reserve_bytes: 1 << 24,
            ..RegionOptions::default()
        };
        let region = Region::create(&dir.path().join("r.pmem"), 1 << 16, options).unwrap();
        (dir, region)
    }

    #[test]
    fn written_record_parses_back() {
        let (_dir, region) = region();
        let size = write(&region, PmemOffset(64), 7, 99, b"key", b"value!");
        assert_eq!(size, 32 + 8 + 8);
        let header = parse(&region, PmemOffset(64), 4096, 7).unwrap();
        assert_eq!(header.seq, 99);
        assert_eq!(key(&region, PmemOffset(64), &header), b"key");
        assert_eq!(value(&region, PmemOffset(64), &header), b"value!");
        assert!(has_key(&region, PmemOffset(64), b"key"));
        assert!(!has_key(&region, PmemOffset(64), b"kez"));
    }

    #[test]
    fn wrong_generation_is_unwritten() {
        let (_dir, region) = region();
        write(&region, PmemOffset(64), 7, 1, b"k", b"v");
        assert_eq!(
            parse(&region, PmemOffset(64), 4096, 8).unwrap_err(),
            Invalid::Unwritten
        );
        assert_eq!(
            parse(&region, PmemOffset(512), 4096, 7).unwrap_err(),
            Invalid::Unwritten
        );
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let (_dir, region) = region();
        let size = write(
            &region,
            PmemOffset(64),
            3,
            5,
            b"some key",
            b"some value bytes",
        );
        for byte in 8..size {
            let at = PmemOffset(64 + byte);
            let original = region.read(at, 1)[0];
            region.write(at, &[original ^ 0x10]);
            // Key and value are 8 bytes and 16: no padding, every byte counts.
            assert!(
                parse(&region, PmemOffset(64), 4096, 3).is_err(),
                "flip at byte {byte} undetected"
            );
            region.write(at, &[original]);
        }
        assert!(parse(&region, PmemOffset(64), 4096, 3).is_ok());
    }

    /// The state word of a new record over the body of an old one (a torn
    /// write into a reused block) must not validate.
    #[test]
    fn new_state_word_over_an_old_body_is_rejected() {
        let (_dir, region) = region();
        write(&region, PmemOffset(64), 3, 5, b"old key", b"old value");
        set_flags(&region, PmemOffset(64), DELETED);
        region.store_u64(PmemOffset(64), 4u64 << 32);
        assert_eq!(
            parse(&region, PmemOffset(64), 4096, 4).unwrap_err(),
            Invalid::BadChecksum
        );
    }

    #[test]
    fn record_past_the_end_is_bad_length() {
        let (_dir, region) = region();
        write(&region, PmemOffset(64), 3, 5, b"k", &[1u8; 100]);
        assert_eq!(
            parse(&region, PmemOffset(64), 64 + 64, 3).unwrap_err(),
            Invalid::BadLength
        );
    }

    #[test]
    fn in_place_flag_exempts_the_value_checksum() {
        let (_dir, region) = region();
        write(
            &region,
            PmemOffset(64),
            3,
            5,
            b"counter",
            &0u64.to_le_bytes(),
        );
        let header = parse(&region, PmemOffset(64), 4096, 3).unwrap();
        let word = PmemOffset(64 + header.value_offset());
        region.fetch_add_u64(word, 1);
        assert_eq!(
            parse(&region, PmemOffset(64), 4096, 3).unwrap_err(),
            Invalid::BadChecksum
        );
        set_flags(&region, PmemOffset(64), IN_PLACE);
        assert!(parse(&region, PmemOffset(64), 4096, 3).is_ok());
    }

    #[test]
    fn deleted_records_still_parse_for_their_length() {
        let (_dir, region) = region();
        let size = write(&region, PmemOffset(64), 3, 5, b"k", b"v");
        set_flags(&region, PmemOffset(64), DELETED);
        let header = parse(&region, PmemOffset(64), 4096, 3).unwrap();
        assert!(header.is_deleted());
        assert_eq!(header.encoded_bytes(), size);
    }
}
