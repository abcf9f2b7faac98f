//! Index images: the DRAM index checkpointed to a file, so that recovery
//! loads it and scans only the blocks claimed since (DIPPER's persistent
//! image plus a short log tail, applied to the string index: here the
//! "log" is the value blocks themselves).
//!
//! ## What an image promises
//!
//! An image holds `(hash, offset)` for every key the index held while it
//! was copied, sorted by offset, and a *generation floor* F. Every record
//! that recovery needs and the image does not name lies in a block whose
//! generation is at least F (a *tail* block). Taking an image
//! (`image_writer::write_image`) makes that true in three steps:
//!
//! 1. Hold every write lane at once: no record is being appended. F is the
//!    smallest of the next generation and the generations of the blocks the
//!    lanes own, so every record appended later lands in a tail block.
//! 2. Wait for every write that started before step 1 to publish (an epoch
//!    grace period: `put` is pinned from its append to its publish). Now a
//!    record appended before step 1 is either in the index or retired.
//! 3. Copy the shards. A record in a non-tail block that is live at a crash
//!    was published before its shard was copied (else it would have been
//!    appended after step 1), so the copy names it or a newer version.
//!
//! Recovery takes each named record in a non-tail block that is still
//! valid and not DELETED (deletes and overwrites after the image set that
//! bit), scans the tail blocks as a full recovery would, and resolves two
//! versions of a key by sequence number as always. A block freed after the
//! image is either FREE, reused (so a tail block), or still a log block
//! whose records are all DELETED. Generations never go backwards: recovery
//! sets the next one above both the image's and every header's.
//!
//! Anything unexpected in an image (a checksum, another store's id, an
//! entry that does not lead to a record) makes recovery fall back to the
//! full scan: an image only ever saves time.
//!
//! ## File format (`DIR/index-0.pmem`, `DIR/index-1.pmem`)
//!
//! Two files, written alternately, so the newest complete image survives a
//! crash while the next one is written. Little-endian:
//!
//! ```text
//! offset  size  field
//!      0     8  magic "ENGIDX01"
//!      8     4  version (1)
//!     12     4  floor generation F
//!     16     8  store id (the superblock's: an image of another store is refused)
//!     24     8  image number (the larger valid one wins)
//!     32     8  next sequence number when the copy ended
//!     40     8  entry count n
//!     48     4  next block generation when the copy ended
//!     52     4  CRC32C of the entries
//!     56     4  CRC32C of bytes 0..56
//!     60     4  zero
//!   4096  16·n  entries: hash (8), record offset (8), ascending offsets
//! ```
//!
//! A file is written whole (created afresh, entries persisted and synced)
//! before its header, which is persisted and synced last, so a torn image
//! has no valid header. These files are not under the integrity layer:
//! their own checksums decide, and a damaged image is simply not used.

use std::path::Path;

use engram_pmem::{sync_directory, PmemOffset, Region, RegionOptions};

use crate::index::Located;
use crate::{Error, Result};

/// The two image files in a store's directory.
pub const FILE_NAMES: [&str; 2] = ["index-0.pmem", "index-1.pmem"];

const MAGIC: u64 = u64::from_le_bytes(*b"ENGIDX01");
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 64;
const ENTRIES_AT: u64 = 4096;
pub const ENTRY_BYTES: u64 = 16;
/// Entries are written through a buffer of this many bytes.
const WRITE_CHUNK_BYTES: usize = 1 << 20;

/// An image header: what the image covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageHeader {
    pub number: u64,
    pub store_id: u64,
    /// Blocks of this generation or later are the tail recovery scans.
    pub floor_generation: u32,
    /// The block generation counter when the copy ended.
    pub next_generation: u32,
    /// The sequence counter when the copy ended: above every named record.
    pub next_seq: u64,
    pub entries: u64,
}

/// A validated image, mapped.
pub struct LoadedImage {
    pub header: ImageHeader,
    /// Which of [`FILE_NAMES`] holds it.
    pub slot: usize,
    region: Region,
}

impl LoadedImage {
    /// The entries, as `(hash, offset)` in ascending offset order.
    pub fn entries(&self) -> &[u8] {
        self.region
            .read(PmemOffset(ENTRIES_AT), self.header.entries * ENTRY_BYTES)
    }
}

/// Where the images stand (under `StoreState::image`, which also
/// serialises writing them).
#[derive(Debug, Default)]
pub struct ImageState {
    /// Which file the next image replaces: never the newest valid one.
    pub next_slot: usize,
    /// The largest image number seen or written.
    pub last_number: u64,
    /// Floor of the newest image recovery can use (0: none).
    pub floor: u32,
    /// The sequence counter when that image was taken.
    pub next_seq: u64,
}

impl ImageState {
    /// After recovery found `image` (and started from it if `used`): the
    /// next image replaces the file recovery did not use (an older or
    /// unusable image), and numbers go on from the largest seen.
    pub fn after_recovery(image: Option<&LoadedImage>, used: bool) -> ImageState {
        match image {
            Some(image) if used => ImageState {
                next_slot: 1 - image.slot,
                last_number: image.header.number,
                floor: image.header.floor_generation,
                next_seq: image.header.next_seq,
            },
            // Unusable against these blocks: overwrite it first.
            Some(image) => ImageState {
                next_slot: image.slot,
                last_number: image.header.number,
                ..ImageState::default()
            },
            None => ImageState::default(),
        }
    }
}

/// Decodes entry `i` of [`LoadedImage::entries`].
pub fn entry_at(bytes: &[u8], i: usize) -> (u64, u64) {
    let at = i * ENTRY_BYTES as usize;
    let word = |from: usize| u64::from_le_bytes(bytes[from..from + 8].try_into().unwrap());
    (word(at), word(at + 8))
}

fn region_options(template: &RegionOptions, len: u64) -> RegionOptions {
    RegionOptions {
        mode: template.mode,
        flush: template.flush,
        reserve_bytes: len.max(ENTRIES_AT),
        populate: true,
        file_limit_bytes: None,
        observer: None,
        fine_writeback: false,
        staged: false,
    }
}

/// The newest valid image in `dir` for the store `store_id`, and why any
/// image file present was not used.
pub fn load_newest(
    dir: &Path,
    store_id: u64,
    template: &RegionOptions,
) -> (Option<LoadedImage>, Vec<String>) {
    let mut rejected = Vec::new();
    let mut best: Option<LoadedImage> = None;
    for (slot, name) in FILE_NAMES.iter().enumerate() {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        match load(&path, slot, store_id, template) {
            Ok(image) => {
                if best
                    .as_ref()
                    .is_none_or(|b| b.header.number < image.header.number)
                {
                    best = Some(image);
                }
            }
            // The whole path: a server holds two stores (strings, and the
            // collections' images), each with its own image files.
            Err(why) => rejected.push(format!("{}: {why}", path.display())),
        }
    }
    (best, rejected)
}

/// Why an image file is not used: a sentence for the recovery report.
type Rejection = String;

fn load(
    path: &Path,
    slot: usize,
    store_id: u64,
    template: &RegionOptions,
) -> std::result::Result<LoadedImage, Rejection> {
    let len = std::fs::metadata(path)
        .map_err(|e| format!("cannot read its size: {e}"))?
        .len();
    if len < ENTRIES_AT {
        return Err("shorter than its header page".to_string());
    }
    let region = Region::open(path, region_options(template, len))
        .map_err(|e| format!("cannot map it: {e}"))?;
    let header = decode_header(region.read(PmemOffset(0), HEADER_BYTES as u64))?;
    if header.store_id != store_id {
        return Err("written for another store".to_string());
    }
    let entry_bytes = header
        .entries
        .checked_mul(ENTRY_BYTES)
        .filter(|bytes| ENTRIES_AT + bytes <= len)
        .ok_or_else(|| "entry count runs past the end of the file".to_string())?;
    let stored_crc = u32::from_le_bytes(region.read(PmemOffset(52), 4).try_into().unwrap());
    if crc32c::crc32c(region.read(PmemOffset(ENTRIES_AT), entry_bytes)) != stored_crc {
        return Err("entries fail their checksum".to_string());
    }
    Ok(LoadedImage {
        header,
        slot,
        region,
    })
}

fn decode_header(bytes: &[u8]) -> std::result::Result<ImageHeader, Rejection> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    if u64_at(0) != MAGIC {
        return Err("no image header (never completed)".to_string());
    }
    // The version before the checksum: another version's header need not
    // be checksummed as this one is, and the reason worth reporting is
    // that the image is too new, not that it looks damaged.
    if u32_at(8) != VERSION {
        return Err(format!(
            "format version {} is not supported (this build reads {VERSION})",
            u32_at(8)
        ));
    }
    if crc32c::crc32c(&bytes[..56]) != u32_at(56) {
        return Err("header fails its checksum".to_string());
    }
    Ok(ImageHeader {
        floor_generation: u32_at(12),
        store_id: u64_at(16),
        number: u64_at(24),
        next_seq: u64_at(32),
        entries: u64_at(40),
        next_generation: u32_at(48),
    })
}

fn encode_header(header: &ImageHeader, entries_crc: u32) -> [u8; HEADER_BYTES] {
    let mut bytes = [0u8; HEADER_BYTES];
    bytes[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    bytes[8..12].copy_from_slice(&VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&header.floor_generation.to_le_bytes());
    bytes[16..24].copy_from_slice(&header.store_id.to_le_bytes());
    bytes[24..32].copy_from_slice(&header.number.to_le_bytes());
    bytes[32..40].copy_from_slice(&header.next_seq.to_le_bytes());
    bytes[40..48].copy_from_slice(&header.entries.to_le_bytes());
    bytes[48..52].copy_from_slice(&header.next_generation.to_le_bytes());
    bytes[52..56].copy_from_slice(&entries_crc.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..56]);
    bytes[56..60].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Writes an image into `FILE_NAMES[slot]`, replacing what was there:
/// entries first (persisted and synced), header last.
pub fn write(
    dir: &Path,
    slot: usize,
    header: &ImageHeader,
    entries: &[Located],
    template: &RegionOptions,
) -> Result<()> {
    let (region, entries_crc) = write_entries(dir, slot, header, entries, template)?;
    region.write(PmemOffset(0), &encode_header(header, entries_crc));
    region.persist(PmemOffset(0), HEADER_BYTES as u64);
    region.sync(PmemOffset(0), HEADER_BYTES as u64)?;
    sync_directory(dir).map_err(|e| Error::io("syncing directory of index image", dir, e))
}

/// [`write`] cut short before the header, as a crash there would leave
/// the file (fault injection).
#[cfg(any(test, feature = "fault-injection"))]
pub fn write_without_header(
    dir: &Path,
    slot: usize,
    header: &ImageHeader,
    entries: &[Located],
    template: &RegionOptions,
) -> Result<()> {
    write_entries(dir, slot, header, entries, template)?;
    sync_directory(dir).map_err(|e| Error::io("syncing directory of index image", dir, e))
}

/// A new `FILE_NAMES[slot]` holding `entries`, persisted and synced, with
/// no header yet; returns it and the entries' checksum.
fn write_entries(
    dir: &Path,
    slot: usize,
    header: &ImageHeader,
    entries: &[Located],
    template: &RegionOptions,
) -> Result<(Region, u32)> {
    debug_assert_eq!(header.entries, entries.len() as u64);
    let path = dir.join(FILE_NAMES[slot]);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("removing old index image", &path, e));
        }
        _ => {}
    }
    let entry_bytes = entries.len() as u64 * ENTRY_BYTES;
    let len = (ENTRIES_AT + entry_bytes).next_multiple_of(ENTRIES_AT);
    let region =
        Region::create(&path, len, region_options(template, len)).map_err(Error::from_growth)?;
    let mut crc = 0u32;
    let mut buffer = Vec::with_capacity(WRITE_CHUNK_BYTES);
    let mut at = ENTRIES_AT;
    for chunk in entries.chunks(WRITE_CHUNK_BYTES / ENTRY_BYTES as usize) {
        buffer.clear();
        for entry in chunk {
            buffer.extend_from_slice(&entry.hash.to_le_bytes());
            buffer.extend_from_slice(&entry.offset.to_le_bytes());
        }
        crc = crc32c::crc32c_append(crc, &buffer);
        region.write(PmemOffset(at), &buffer);
        at += buffer.len() as u64;
    }
    region.persist(PmemOffset(ENTRIES_AT), entry_bytes);
    region.sync(PmemOffset(ENTRIES_AT), entry_bytes)?;
    Ok((region, crc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let header = ImageHeader {
            number: 7,
            store_id: 0xfeed,
            floor_generation: 41,
            next_generation: 45,
            next_seq: 1 << 40,
            entries: 3,
        };
        let mut bytes = encode_header(&header, 0xabcd);
        assert_eq!(decode_header(&bytes).unwrap(), header);
        bytes[30] ^= 1;
        assert!(decode_header(&bytes).is_err());
        assert!(decode_header(&[0u8; HEADER_BYTES]).is_err());
        // Another version is named as such, its checksum notwithstanding.
        let mut bytes = encode_header(&header, 0xabcd);
        bytes[8..12].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(
            decode_header(&bytes).unwrap_err(),
            "format version 9 is not supported (this build reads 1)"
        );
    }

    #[test]
    fn written_image_loads_and_a_headerless_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let entries: Vec<Located> = (0..100_000u64)
            .map(|i| Located {
                hash: i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                offset: 4096 + i * 64,
            })
            .collect();
        let header = ImageHeader {
            number: 1,
            store_id: 9,
            floor_generation: 3,
            next_generation: 5,
            next_seq: 100_001,
            entries: entries.len() as u64,
        };
        let template = RegionOptions::default();
        write(dir.path(), 0, &header, &entries, &template).unwrap();
        let (image, rejected) = load_newest(dir.path(), 9, &template);
        assert!(rejected.is_empty(), "{rejected:?}");
        let image = image.expect("image loads");
        assert_eq!(image.header, header);
        let bytes = image.entries();
        for i in [0usize, 1, 65_535, 65_536, 99_999] {
            assert_eq!(entry_at(bytes, i), (entries[i].hash, entries[i].offset));
        }
        // Another store's id: refused.
        let (other, rejected) = load_newest(dir.path(), 10, &template);
        assert!(other.is_none());
        assert!(rejected[0].contains("another store"), "{rejected:?}");
        let path = dir.path().join(FILE_NAMES[0]).display().to_string();
        assert!(rejected[0].starts_with(&path), "{rejected:?}");
        // A newer image cut short before its header: the older one wins.
        let newer = ImageHeader {
            number: 2,
            ..header
        };
        write_without_header(dir.path(), 1, &newer, &entries, &template).unwrap();
        let (image, rejected) = load_newest(dir.path(), 9, &template);
        assert_eq!(image.unwrap().header.number, 1);
        assert!(rejected[0].contains("never completed"), "{rejected:?}");
    }
}
