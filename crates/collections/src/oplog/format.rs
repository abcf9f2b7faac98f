//! The operation log's file format (`DIR/oplog.pmem`). Little-endian.
//!
//! ```text
//! file     = superblock (4096 bytes), then segments of `segment_bytes` each
//!
//! superblock
//!   offset size field
//!        0    8 magic "ENGROPLG"
//!        8    4 version (2; version 1, which has no runs, is read and
//!                  upgraded at open)
//!       12    4 segment_bytes (a power of two, 64 KiB ..= 1 GiB)
//!       16    4 crc32c of bytes 0..16
//!
//! segment  = header (64 bytes), then records packed back to back
//!   offset size field
//!        0    8 header word: SEGMENT_TAG << 32 | generation (u32, nonzero)
//!
//! run      = a record too large for one segment: `length` consecutive
//!            segments, one header, then the one record
//!   offset size field
//!        0    8 header word: RUN_TAG << 32 | generation (u32, nonzero)
//!        8    8 length (segments, >= 2), persisted before the header word
//!
//! record   (8-byte aligned; 48-byte header, then the payload, padded to 8)
//!   offset size field
//!        0    8 commit       = seq; stored and persisted after everything else
//!        8    4 crc          crc32c of generation (4 bytes) ++ bytes 12..48+len
//!       12    4 len          payload bytes
//!       16    8 seq          store-wide sequence number (conflict order)
//!       24    8 term         replication term (0 on a standalone store)
//!       32    8 index        replication log index (0 on a standalone store)
//!       40    1 kind         KIND_OPERATION | KIND_TRUNCATE
//!       41    7 zero
//!       48  len payload      the operation (see `crate::op`), or for
//!                            KIND_TRUNCATE the 8-byte index after which
//!                            earlier-written records are void
//! ```
//!
//! The segments after a run's head (its interior) hold record bytes where
//! a header would be. Recovery skips them while the head is valid, and
//! releasing a run zeroes their header words before any of its segments
//! is reused, so they are never read as segments of their own.
//!
//! ## Commit rule (DIPPER 3.4)
//!
//! A record is written whole, persisted, and only then is its `commit` word
//! stored and persisted. It is valid when `commit == seq`, the crc matches,
//! and the crc's generation is the segment's. So:
//!
//! - a record whose commit word never reached the media is not replayed,
//!   whatever else did (its commit word is zero on a fresh segment, or a
//!   smaller seq from the segment's previous life);
//! - a record left from the segment's previous life fails the crc, which
//!   covers the generation, even when its own bytes are intact;
//! - one writer appends to a segment at a time and commits each record
//!   before it starts the next, so the first invalid record ends the
//!   segment: nothing valid can follow it.
//!
//! A segment is claimed by persisting a new header word (with a generation
//! larger than any in the file) before its first record is written. Nothing
//! marks a segment free on the media: a segment whose records are all
//! covered by a checkpoint is free, and the checkpoint is what says so.

use engram_pmem::{PmemOffset, Region};

pub const MAGIC: &[u8; 8] = b"ENGROPLG";
pub const VERSION: u32 = 2;
/// The first version, without runs: a file of this version is read as is
/// and its superblock rewritten as [`VERSION`] at open.
pub const VERSION_WITHOUT_RUNS: u32 = 1;
pub const SUPERBLOCK_BYTES: u64 = 4096;
pub const SEGMENT_HEADER_BYTES: u64 = 64;
pub const RECORD_HEADER_BYTES: u64 = 48;
pub const SEGMENT_TAG: u64 = 0x5345_474d; // "SEGM"
pub const RUN_TAG: u64 = 0x5255_4e53; // "RUNS"
/// The largest payload of one record: its length is a u32, and the record
/// (header, payload padded to 8) must fit in a u32 as well.
pub const MAX_PAYLOAD_BYTES: usize = (u32::MAX as usize - RECORD_HEADER_BYTES as usize) & !7;
pub const MIN_SEGMENT_BYTES: u64 = 64 << 10;
pub const MAX_SEGMENT_BYTES: u64 = 1 << 30;

pub const KIND_OPERATION: u8 = 0;
pub const KIND_TRUNCATE: u8 = 1;

const _: () =
    assert!(RECORD_HEADER_BYTES.is_multiple_of(8) && SEGMENT_HEADER_BYTES.is_multiple_of(8));

pub fn encode_superblock(segment_bytes: u64) -> [u8; 20] {
    let mut bytes = [0u8; 20];
    bytes[0..8].copy_from_slice(MAGIC);
    bytes[8..12].copy_from_slice(&VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&(segment_bytes as u32).to_le_bytes());
    let crc = crc32c::crc32c(&bytes[0..16]);
    bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// What is wrong with a superblock, or the segment size and the version it
/// records.
pub fn parse_superblock(bytes: &[u8]) -> Result<(u64, u32), String> {
    if bytes.len() < 20 || &bytes[0..8] != MAGIC {
        return Err("not an operation log (bad magic)".into());
    }
    // The version before the checksum: a later version may lay out (or
    // checksum) its superblock differently, so "too new" is what to say
    // about it, not "damaged".
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION && version != VERSION_WITHOUT_RUNS {
        return Err(format!(
            "format version {version} is not supported (this build reads versions \
             {VERSION_WITHOUT_RUNS} and {VERSION})"
        ));
    }
    let crc = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if crc != crc32c::crc32c(&bytes[0..16]) {
        return Err("superblock checksum mismatch".into());
    }
    let segment_bytes = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as u64;
    if !valid_segment_bytes(segment_bytes) {
        return Err(format!("invalid segment size {segment_bytes}"));
    }
    Ok((segment_bytes, version))
}

pub fn valid_segment_bytes(bytes: u64) -> bool {
    bytes.is_power_of_two() && (MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&bytes)
}

pub fn segment_header_word(generation: u32) -> u64 {
    SEGMENT_TAG << 32 | generation as u64
}

pub fn run_header_word(generation: u32) -> u64 {
    RUN_TAG << 32 | generation as u64
}

/// What a segment's header word says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    /// A segment claimed with this generation.
    Segment(u32),
    /// The head of a run claimed with this generation (its length is the
    /// next word).
    Run(u32),
}

/// What a header word says, or `None` (never claimed, or not a header at
/// all).
pub fn parse_segment_header(word: u64) -> Option<Header> {
    let generation = word as u32;
    if generation == 0 {
        return None;
    }
    match word >> 32 {
        SEGMENT_TAG => Some(Header::Segment(generation)),
        RUN_TAG => Some(Header::Run(generation)),
        _ => None,
    }
}

/// Bytes a record with `payload_len` payload bytes occupies.
pub fn record_bytes(payload_len: usize) -> u64 {
    RECORD_HEADER_BYTES + (payload_len as u64).next_multiple_of(8)
}

/// The identity of a record, apart from its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub seq: u64,
    pub term: u64,
    pub index: u64,
    pub kind: u8,
}

/// A segment's generation, with the checksum of its four bytes that every
/// record checksum in the segment starts from: worked out once per claim
/// (and once per segment read) rather than once per record, because for a
/// record of a few hundred bytes each `crc32c` call's set-up costs about as
/// much as the bytes it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    seed: u32,
}

impl Generation {
    pub fn new(value: u32) -> Generation {
        Generation {
            seed: crc32c::crc32c(&value.to_le_bytes()),
        }
    }
}

/// Generation 0, which no claimed segment has (a lane before its first
/// claim).
impl Default for Generation {
    fn default() -> Generation {
        Generation::new(0)
    }
}

/// Bytes 8..48 of a record (everything but the commit word), the crc left
/// zero: the writer fills it in from the bytes as written
/// ([`record_crc`] over 12..48+len, header tail and payload in one run).
pub fn encode_header(header: &RecordHeader, payload_len: usize) -> [u8; 40] {
    let mut bytes = [0u8; 40];
    // Offsets below are relative to byte 8 of the record.
    bytes[4..8].copy_from_slice(&(payload_len as u32).to_le_bytes());
    bytes[8..16].copy_from_slice(&header.seq.to_le_bytes());
    bytes[16..24].copy_from_slice(&header.term.to_le_bytes());
    bytes[24..32].copy_from_slice(&header.index.to_le_bytes());
    bytes[32] = header.kind;
    bytes
}

/// Bytes 8..48 of a record with its crc, for a record assembled in DRAM
/// (tests that plant records); the log's writer checksums the record's
/// bytes in place instead.
pub fn encode_header_with_crc(
    header: &RecordHeader,
    generation: Generation,
    payload: &[u8],
) -> [u8; 40] {
    let mut bytes = encode_header(header, payload.len());
    let covered = [&bytes[4..40], payload].concat();
    bytes[0..4].copy_from_slice(&record_crc(generation, &covered).to_le_bytes());
    bytes
}

/// A record's checksum: crc32c of its segment's generation followed by
/// `covered`, the record's bytes 12..48+len (contiguous in the segment, so
/// one call covers the header's tail and the payload).
pub fn record_crc(generation: Generation, covered: &[u8]) -> u32 {
    crc32c::crc32c_append(generation.seed, covered)
}

/// A valid record found in a segment.
#[derive(Clone, Copy, Debug)]
pub struct Parsed<'a> {
    pub header: RecordHeader,
    /// Where the record starts in the file.
    pub at: u64,
    pub payload: &'a [u8],
    /// Bytes the record occupies (the next one starts this far on).
    pub bytes: u64,
}

/// The record at `at` if it is valid under the commit rule, reading no
/// further than `end`.
pub fn parse_record(
    region: &Region,
    at: u64,
    end: u64,
    generation: Generation,
) -> Option<Parsed<'_>> {
    if at + RECORD_HEADER_BYTES > end {
        return None;
    }
    let commit = region.load_u64(PmemOffset(at));
    if commit == 0 {
        return None;
    }
    let head = region.read(PmemOffset(at + 8), RECORD_HEADER_BYTES - 8);
    let crc = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
    let seq = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    if seq != commit || at + record_bytes(len) > end {
        return None;
    }
    let covered = region.read(PmemOffset(at + 12), RECORD_HEADER_BYTES - 12 + len as u64);
    if record_crc(generation, covered) != crc {
        return None;
    }
    let payload = &covered[(RECORD_HEADER_BYTES - 12) as usize..];
    Some(Parsed {
        header: RecordHeader {
            seq,
            term: u64::from_le_bytes(head[16..24].try_into().expect("8 bytes")),
            index: u64::from_le_bytes(head[24..32].try_into().expect("8 bytes")),
            kind: head[32],
        },
        at,
        payload,
        bytes: record_bytes(len),
    })
}

/// The term and index of the record at `at`, which [`parse_record`] found
/// valid.
pub fn record_position(region: &Region, at: u64) -> (u64, u64) {
    let bytes = region.read(PmemOffset(at + 24), 16);
    (
        u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checksum is the documented one (crc32c of the generation's four
    /// bytes, then bytes 12..48+len of the record, in one run), whichever
    /// way it is computed: records written before the seed was kept per
    /// segment (three chained calls) still parse, and the other way round.
    #[test]
    fn a_record_checksum_is_the_crc_of_generation_header_tail_and_payload() {
        let header = RecordHeader {
            seq: 0x0102_0304_0506_0708,
            term: 3,
            index: 77,
            kind: KIND_OPERATION,
        };
        let payload = b"an operation's bytes, not a multiple of eight";
        let generation = Generation::new(0xdead_beef);
        let head = encode_header_with_crc(&header, generation, payload);
        let documented =
            crc32c::crc32c(&[&0xdead_beefu32.to_le_bytes()[..], &head[4..40], payload].concat());
        assert_eq!(head[0..4], documented.to_le_bytes());
        let chained = crc32c::crc32c_append(
            crc32c::crc32c_append(crc32c::crc32c(&0xdead_beefu32.to_le_bytes()), &head[4..40]),
            payload,
        );
        assert_eq!(chained, documented);
        // Another generation gives another checksum (a record from a
        // segment's earlier life does not pass).
        let other = encode_header_with_crc(&header, Generation::new(0xdead_bef0), payload);
        assert_ne!(other[0..4], head[0..4]);
        assert_eq!(other[4..], head[4..]);
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let bytes = encode_superblock(1 << 20);
        assert_eq!(parse_superblock(&bytes), Ok((1 << 20, VERSION)));
        let mut bad = bytes;
        bad[13] ^= 1;
        assert!(parse_superblock(&bad).unwrap_err().contains("checksum"));
        let mut bad = bytes;
        bad[0] = b'X';
        assert!(parse_superblock(&bad).unwrap_err().contains("magic"));
    }

    /// A later version is named as such even though its checksum (computed
    /// over version 2's layout) no longer matches.
    #[test]
    fn an_unknown_version_is_named_before_the_checksum() {
        let mut bytes = encode_superblock(1 << 20);
        bytes[8..12].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(
            parse_superblock(&bytes).unwrap_err(),
            "format version 9 is not supported (this build reads versions 1 and 2)"
        );
        bytes[8..12].copy_from_slice(&VERSION_WITHOUT_RUNS.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[0..16]);
        bytes[16..20].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            parse_superblock(&bytes),
            Ok((1 << 20, VERSION_WITHOUT_RUNS))
        );
    }

    #[test]
    fn segment_headers_need_the_tag_and_a_generation() {
        assert_eq!(
            parse_segment_header(segment_header_word(7)),
            Some(Header::Segment(7))
        );
        assert_eq!(
            parse_segment_header(run_header_word(7)),
            Some(Header::Run(7))
        );
        assert_eq!(parse_segment_header(0), None);
        assert_eq!(parse_segment_header(SEGMENT_TAG << 32), None);
        assert_eq!(parse_segment_header(RUN_TAG << 32), None);
        assert_eq!(parse_segment_header(7), None);
    }
}
