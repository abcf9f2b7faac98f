//! The superblock: what a data file is, and how many blocks it holds.
//!
//! It occupies the first block of `values.pmem` (data blocks start at
//! `block_bytes`, so every block is aligned to its own size). All integers are
//! little-endian.
//!
//! ```text
//! offset size  field             mutability  valid when
//!      0    8  magic             immutable   = 89 'E' 'N' 'G' 'R' 'A' 'M' 0A
//!      8    4  format_version    immutable   1 or 2 (FORMAT_VERSION, new stores)
//!     12    4  reserved (0)
//!     16    8  block_bytes       immutable   power of two, 64 KiB ..= 64 MiB
//!     24    8  created_unix_ms   immutable
//!     32    8  store_id          immutable   random, names the store in logs
//!     40    4  header_crc        immutable   CRC32C of bytes 0..40
//!     64   24  size slot A       mutable     see below
//!    128   24  size slot B       mutable
//! ```
//!
//! A size slot is `seq: u64, block_count: u64, crc: u32` (CRC32C of its first
//! 16 bytes). The slots are double-buffered (redb's header slots): an update
//! writes the slot *not* holding the newest valid value, with `seq + 1`, and
//! persists it; a reader takes the valid slot with the larger `seq`, so a
//! torn update leaves the previous size readable. `block_count` is the number
//! of data blocks the file is known to hold: a shorter file was truncated. The
//! file may be longer (a crash between growing the file and writing the slot);
//! the extra blocks are zeros and are used.
//!
//! The magic's first byte is not ASCII and its last is a newline, so text-mode
//! transfers and text files are recognised as foreign at once (the PNG trick).

use std::path::Path;

use engram_pmem::{PmemOffset, Region};

use crate::{Error, Result};

pub const MAGIC: [u8; 8] = [0x89, b'E', b'N', b'G', b'R', b'A', b'M', 0x0A];
/// The version new stores are created with. Format 2 may hold tombstone
/// records (`record.rs`); format 1 never does, and is still read (a store
/// of format 1 is run without lazy retirement, so it never gains one and
/// older builds can still open it).
pub const FORMAT_VERSION: u32 = 2;
/// The oldest version this build reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;
const HEADER_CRC_OFFSET: u64 = 40;
const HEADER_BYTES: u64 = 44;
const SLOT_OFFSETS: [u64; 2] = [64, 128];
const SLOT_BYTES: u64 = 24;
pub const MIN_BLOCK_BYTES: u64 = 64 << 10;
pub const MAX_BLOCK_BYTES: u64 = 64 << 20;

#[derive(Clone, Debug)]
pub struct Superblock {
    pub block_bytes: u64,
    pub created_unix_ms: u64,
    pub store_id: u64,
    /// Data blocks recorded in the newest valid size slot.
    pub block_count: u64,
    /// 1 or 2: whether tombstones may be written (2).
    pub format_version: u32,
    slot_seq: u64,
    slot_index: usize,
}

impl Superblock {
    /// Writes a fresh superblock into a new, zeroed region and persists it.
    pub fn format(
        region: &Region,
        block_bytes: u64,
        block_count: u64,
        store_id: u64,
    ) -> Superblock {
        let created_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut header = [0u8; HEADER_BYTES as usize];
        header[0..8].copy_from_slice(&MAGIC);
        header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        header[16..24].copy_from_slice(&block_bytes.to_le_bytes());
        header[24..32].copy_from_slice(&created_unix_ms.to_le_bytes());
        header[32..40].copy_from_slice(&store_id.to_le_bytes());
        let crc = crc32c::crc32c(&header[..HEADER_CRC_OFFSET as usize]);
        header[40..44].copy_from_slice(&crc.to_le_bytes());
        region.write(PmemOffset(0), &header);
        region.persist(PmemOffset(0), HEADER_BYTES);
        let mut superblock = Superblock {
            block_bytes,
            created_unix_ms,
            store_id,
            block_count: 0,
            format_version: FORMAT_VERSION,
            slot_seq: 0,
            slot_index: 1,
        };
        superblock.record_block_count(region, block_count);
        superblock
    }

    /// Reads and checks the superblock without writing anything. The checks
    /// run from the most to the least basic so that the error names the real
    /// problem: not ours, then too new, then damaged, then cut short.
    pub fn read(region: &Region) -> Result<Superblock> {
        let path = region.path();
        let file_bytes = region.len();
        if file_bytes < MAGIC.len() as u64 || region.read(PmemOffset(0), 8) != MAGIC {
            return Err(Error::NotAnEngramFile { path: path.into() });
        }
        if file_bytes < SLOT_OFFSETS[1] + SLOT_BYTES {
            return Err(Error::Truncated {
                path: path.into(),
                expected_bytes: SLOT_OFFSETS[1] + SLOT_BYTES,
                actual_bytes: file_bytes,
            });
        }
        let header = region.read(PmemOffset(0), HEADER_BYTES);
        let version = u32::from_le_bytes(header[8..12].try_into().unwrap());
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                path: path.into(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let stored_crc = u32::from_le_bytes(header[40..44].try_into().unwrap());
        if crc32c::crc32c(&header[..HEADER_CRC_OFFSET as usize]) != stored_crc {
            return Err(corrupt(path, "header checksum mismatch"));
        }
        let block_bytes = u64::from_le_bytes(header[16..24].try_into().unwrap());
        if !block_bytes.is_power_of_two()
            || !(MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&block_bytes)
        {
            return Err(corrupt(path, "block size out of range"));
        }
        let slots = SLOT_OFFSETS.map(|offset| read_slot(region, offset));
        let (slot_index, (slot_seq, block_count)) = slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| slot.map(|s| (i, s)))
            .max_by_key(|(_, (seq, _))| *seq)
            .ok_or_else(|| corrupt(path, "both size slots are damaged"))?;
        let needed_bytes = (block_count + 1)
            .checked_mul(block_bytes)
            .ok_or_else(|| corrupt(path, "block count out of range"))?;
        if file_bytes < needed_bytes || !file_bytes.is_multiple_of(block_bytes) {
            return Err(Error::Truncated {
                path: path.into(),
                expected_bytes: needed_bytes.max(file_bytes.next_multiple_of(block_bytes)),
                actual_bytes: file_bytes,
            });
        }
        Ok(Superblock {
            block_bytes,
            created_unix_ms: u64::from_le_bytes(header[24..32].try_into().unwrap()),
            store_id: u64::from_le_bytes(header[32..40].try_into().unwrap()),
            // Blocks past the recorded count come from a growth that crashed
            // before its slot update; they are zeroed and usable.
            block_count: file_bytes / block_bytes - 1,
            format_version: version,
            slot_seq,
            slot_index,
        })
    }

    /// Records a new block count in the older slot, durably (persist, and
    /// `msync` of the superblock page on emulated memory: growth is rare).
    pub fn record_block_count(&mut self, region: &Region, block_count: u64) {
        let slot_index = 1 - self.slot_index;
        let seq = self.slot_seq + 1;
        let mut slot = [0u8; SLOT_BYTES as usize];
        slot[0..8].copy_from_slice(&seq.to_le_bytes());
        slot[8..16].copy_from_slice(&block_count.to_le_bytes());
        let crc = crc32c::crc32c(&slot[..16]);
        slot[16..20].copy_from_slice(&crc.to_le_bytes());
        let offset = PmemOffset(SLOT_OFFSETS[slot_index]);
        region.write(offset, &slot);
        region.persist(offset, SLOT_BYTES);
        // A failed msync leaves the slot durable against process crash; the
        // next growth or sync retries it. Nothing to report to the writer.
        let _ = region.sync(offset, SLOT_BYTES);
        self.slot_index = slot_index;
        self.slot_seq = seq;
        self.block_count = block_count;
    }
}

fn read_slot(region: &Region, offset: u64) -> Option<(u64, u64)> {
    let slot = region.read(PmemOffset(offset), SLOT_BYTES);
    let seq = u64::from_le_bytes(slot[0..8].try_into().unwrap());
    let block_count = u64::from_le_bytes(slot[8..16].try_into().unwrap());
    let crc = u32::from_le_bytes(slot[16..20].try_into().unwrap());
    (crc32c::crc32c(&slot[..16]) == crc && seq > 0).then_some((seq, block_count))
}

fn corrupt(path: &Path, what: &'static str) -> Error {
    Error::CorruptSuperblock {
        path: path.into(),
        what,
    }
}
