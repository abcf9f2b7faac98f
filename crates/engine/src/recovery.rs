//! Recovery: rebuild the DRAM index from the blocks (Viper 4.7), in parallel.
//!
//! The same path serves a clean shutdown and a crash; nothing is persisted
//! specially at shutdown. Four phases:
//!
//! 1. Walk the block headers in order (one cache line per block): log blocks
//!    and extent heads become scan tasks, everything else is free. Extents are
//!    stepped over whole, so their tail blocks' bytes are never read as
//!    headers.
//! 2. Scan tasks in parallel: validate each record (generation, checksums),
//!    stop a block at its first invalid record, and collect `(hash, offset)`
//!    for live records, bucketed by index shard group.
//! 3. Build the index in parallel, one shard group per thread, so no two
//!    threads touch a shard. Two live records of one key (a crash between
//!    writing a new version and retiring the old) resolve to the larger
//!    sequence number; the loser is retired on the spot.
//! 4. Free blocks with nothing live, and dead extents (after writing FREE
//!    headers over them, as a normal free would).
//!
//! Recovery writes only retirements and FREE headers, both idempotent, so a
//! crash during recovery is repaired by recovering again.
//!
//! With an index image (`index_image.rs`), phase 2 scans only the tail: the
//! blocks of the image's generation floor or later. Records in older blocks
//! come from the image's entries instead, each checked where it lies (still
//! a valid record of its block, not DELETED); reading one header per key in
//! offset order replaces reading and checksumming every value. An entry
//! that does not check out abandons the image before anything is changed,
//! and recovery scans every block as without one.
//!
//! A layer above may ride along ([`RecoveryVisitor`]): phase 2 hands it
//! each live record's key and value where the record is being read anyway
//! (in offset order) and keeps the word it returns beside the candidate;
//! phase 3 tells it, once per key, the word of the record that won. So the
//! layer learns what it needs of every value (the keyspace: database,
//! expiry) without reading each record again, at random, once the store
//! is open.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_integrity::{Integrity, RangeHealth};
use engram_pmem::PmemOffset;

use crate::block::{state, BlockHeader, BlockKind, BLOCK_HEADER_BYTES};
use crate::index::{hash_key, shard_of, Entry, Index, SHARD_COUNT};
use crate::index_image::{self, LoadedImage};
use crate::record::{self, Invalid};
use crate::space::Space;
use crate::Result;

/// What the last open found and how long it took.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub records: u64,
    pub blocks_scanned: u64,
    pub threads: usize,
    pub duration: Duration,
    /// Records that lost to a newer version of their key and were retired.
    pub superseded: u64,
    /// Blocks whose log ended at a torn or damaged record.
    pub torn_tails: u64,
    /// Records on pages damaged beyond repair: indexed when their header
    /// survived (reads of them fail with `Error::Unrepairable`), skipped
    /// when it did not (their keys cannot be known).
    pub damaged_records: u64,
    /// Data-file offsets of pages the integrity layer rebuilt from parity
    /// while recovery read them.
    pub repaired_pages: Vec<u64>,
    /// What the integrity layer found at open (`None` when it is off).
    pub integrity: Option<engram_integrity::OpenReport>,
    /// Block headers that were neither valid nor blank (torn claims).
    pub damaged_headers: u64,
    /// Whether recovery started from an index image, and how it went.
    pub index_image: ImageRecovery,
}

/// Recovery's use of an index image.
#[derive(Clone, Debug, Default)]
pub struct ImageRecovery {
    /// The number of the image recovery started from (`None`: it scanned
    /// every block).
    pub image: Option<u64>,
    /// Keys the image named, and how many of them were still live.
    pub named: u64,
    pub live: u64,
    /// Blocks claimed since the image, which recovery scanned.
    pub tail_blocks: u64,
    /// Why image files present were not used.
    pub rejected: Vec<String>,
}

/// Shards are grouped so that phase 3 hands out work in sizeable pieces.
const SHARD_GROUPS: usize = 256;
const _: () = assert!(SHARD_COUNT.is_multiple_of(SHARD_GROUPS));

pub struct Recovered {
    pub report: RecoveryReport,
    pub next_seq: u64,
    pub keys: u64,
}

enum Task {
    Log {
        id: u32,
        generation: u32,
    },
    Extent {
        head: u32,
        blocks: u32,
        generation: u32,
    },
}

/// What a layer above the store learns from recovery, so that it does
/// not read every record again once the store is open. Both methods are
/// called from recovery's threads, concurrently.
pub trait RecoveryVisitor: Send + Sync {
    /// A live record as recovery reads it (phase 2, in offset order within
    /// a thread): returns a word recovery keeps with the record. `value` is
    /// `None` when the record's value cannot be trusted (its pages could
    /// not be rebuilt from parity); reads of it fail. A key may be seen
    /// more than once (a crash between a write and the retirement of the
    /// version it replaced); only the winner's word reaches `indexed`.
    fn summarize(&self, key: &[u8], value: Option<&[u8]>) -> u64;
    /// A key recovery put in the index (phase 3, once per key), with its
    /// index hash and the word `summarize` gave its record.
    fn indexed(&self, hash: u64, summary: u64, key: RecoveredKey<'_>);
}

/// The key of an indexed record, read from the region only when asked for
/// (reading it is a random access per key).
pub struct RecoveredKey<'a> {
    region: &'a engram_pmem::Region,
    offset: u64,
}

impl RecoveredKey<'_> {
    pub fn bytes(&self) -> &[u8] {
        let at = PmemOffset(self.offset);
        record::key(self.region, at, &record::read_header(self.region, at))
    }
}

#[derive(Clone, Copy)]
struct Candidate {
    hash: u64,
    offset: u64,
    /// The visitor's word for the record (0 without a visitor).
    summary: u64,
    /// A tombstone (lazy retirement's delete): it outranks older versions
    /// by seq like any record, and if it wins the key is not indexed.
    tombstone: bool,
}

#[derive(Default)]
struct ScanResult {
    candidates: Vec<Vec<Candidate>>,
    max_seq: u64,
    records: u64,
    torn_tails: u64,
    damaged_records: u64,
}

pub fn recover(
    space: &Arc<Space>,
    index: &Index,
    threads: usize,
    integrity: Option<&Integrity>,
    image: Option<&LoadedImage>,
    mut image_report: ImageRecovery,
    visitor: Option<&dyn RecoveryVisitor>,
) -> Result<Recovered> {
    let started = Instant::now();
    let threads = threads.max(1);
    let (mut tasks, mut free, max_generation, damaged_headers) = walk_headers(space, integrity);

    // With an image: its records in the blocks older than its floor, and
    // only the rest of the blocks to scan.
    let mut results: Vec<ScanResult> = Vec::new();
    let mut floor = None;
    if let Some(image) = image {
        match named_records(space, &tasks, image, threads, integrity, visitor) {
            Ok(named) => {
                let image_floor = image.header.floor_generation;
                settle_old_blocks(space, &tasks, image_floor, &named.live);
                image_report.image = Some(image.header.number);
                image_report.named = image.header.entries;
                image_report.live = named.results.iter().map(|r| r.records).sum();
                results = named.results;
                floor = Some(image_floor);
            }
            Err(why) => image_report.rejected.push(format!(
                "image {}: {why}; scanned every block instead",
                image.header.number
            )),
        }
    }
    let old_tasks: Vec<Task>;
    if let Some(floor) = floor {
        let (tail, old): (Vec<Task>, Vec<Task>) = std::mem::take(&mut tasks)
            .into_iter()
            .partition(|task| task.generation() >= floor);
        tasks = tail;
        old_tasks = old;
        image_report.tail_blocks = tasks.len() as u64;
    } else {
        old_tasks = Vec::new();
    }

    // Phase 2: scan blocks in parallel.
    let next_task = AtomicUsize::new(0);
    results.extend(std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut result = ScanResult {
                        candidates: vec![Vec::new(); SHARD_GROUPS],
                        ..ScanResult::default()
                    };
                    loop {
                        let i = next_task.fetch_add(1, Ordering::Relaxed);
                        let Some(task) = tasks.get(i) else { break };
                        scan_task(space, task, integrity, visitor, &mut result);
                    }
                    result
                })
            })
            .collect::<Vec<_>>();
        workers
            .into_iter()
            .map(|w| w.join().expect("recovery scan thread"))
            .collect::<Vec<_>>()
    }));

    // Phase 3: build the index, one shard group per thread at a time.
    let next_group = AtomicUsize::new(0);
    let (keys, superseded) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let (mut keys, mut superseded) = (0u64, 0u64);
                    loop {
                        let group = next_group.fetch_add(1, Ordering::Relaxed);
                        if group >= SHARD_GROUPS {
                            break;
                        }
                        let (k, s) = build_group(space, index, &results, group, visitor);
                        keys += k;
                        superseded += s;
                    }
                    (keys, superseded)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("recovery index thread"))
            .fold((0, 0), |(k, s), (k2, s2)| (k + k2, s + s2))
    });

    // Phase 4: hand out the free space: blocks that held nothing live, or
    // whose last live record lost to a newer version in phase 3.
    for task in tasks.iter().chain(&old_tasks) {
        match *task {
            Task::Log { id, .. } if space.meta(id).live_bytes.load(Ordering::Relaxed) == 0 => {
                free.push(id)
            }
            Task::Extent {
                head,
                blocks,
                generation,
            } if space.meta(head).live_bytes.load(Ordering::Relaxed) == 0 => {
                space.free_dead_extent(head, blocks, generation)
            }
            _ => {}
        }
    }
    space.add_free(free);
    // Never below the image's counters: its floor stays meaningful only
    // while generations grow (and its records' sequence numbers stay old).
    let image_counters = image.filter(|_| floor.is_some()).map(|i| i.header);
    space.set_next_generation(
        (max_generation + 1).max(image_counters.map_or(0, |h| h.next_generation)),
    );

    let max_seq = results.iter().map(|r| r.max_seq).max().unwrap_or(0);
    let next_seq = (max_seq + 1).max(image_counters.map_or(0, |h| h.next_seq));
    Ok(Recovered {
        report: RecoveryReport {
            records: results.iter().map(|r| r.records).sum(),
            blocks_scanned: tasks.len() as u64,
            threads,
            duration: started.elapsed(),
            superseded,
            torn_tails: results.iter().map(|r| r.torn_tails).sum(),
            damaged_records: results.iter().map(|r| r.damaged_records).sum(),
            damaged_headers,
            repaired_pages: Vec::new(),
            integrity: None,
            index_image: image_report,
        },
        next_seq,
        keys,
    })
}

impl Task {
    fn generation(&self) -> u32 {
        match *self {
            Task::Log { generation, .. } | Task::Extent { generation, .. } => generation,
        }
    }
}

/// What an image contributes: its live records as candidates, and the live
/// bytes of each older block they lie in.
struct Named {
    results: Vec<ScanResult>,
    live: Vec<(u32, u64)>,
}

/// How a block stands with respect to an image's floor.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockClass {
    /// Free, or damaged: an entry pointing here names a record since freed.
    Gone,
    /// Claimed at the floor or later: scanned, entries here are skipped.
    Tail,
    /// An older log block of this generation.
    OldLog(u32),
    /// The head of an older extent: (generation, blocks).
    OldExtent(u32, u32),
    /// Inside an older extent: no record starts here.
    OldExtentBody,
}

/// Checks every entry of the image against the blocks as they are, in
/// parallel, without changing anything. An entry that does not lead to a
/// record of its block (damage, or an image that does not belong to these
/// blocks) is an error: the caller then scans everything.
fn named_records(
    space: &Space,
    tasks: &[Task],
    image: &LoadedImage,
    threads: usize,
    integrity: Option<&Integrity>,
    visitor: Option<&dyn RecoveryVisitor>,
) -> std::result::Result<Named, String> {
    let floor = image.header.floor_generation;
    let mut class = vec![BlockClass::Gone; space.block_count() as usize];
    for task in tasks {
        match *task {
            Task::Log { id, generation } => {
                class[id as usize] = if generation >= floor {
                    BlockClass::Tail
                } else {
                    BlockClass::OldLog(generation)
                };
            }
            Task::Extent {
                head,
                blocks,
                generation,
            } => {
                let (head_class, body) = if generation >= floor {
                    (BlockClass::Tail, BlockClass::Tail)
                } else {
                    (
                        BlockClass::OldExtent(generation, blocks),
                        BlockClass::OldExtentBody,
                    )
                };
                class[head as usize] = head_class;
                for id in head + 1..head + blocks {
                    class[id as usize] = body;
                }
            }
        }
    }
    let bytes = image.entries();
    let count = image.header.entries as usize;
    let chunk = count.div_ceil(threads).max(1);
    let outcomes: Vec<std::result::Result<Named, String>> = std::thread::scope(|scope| {
        let class = &class;
        let workers: Vec<_> = (0..count.div_ceil(chunk))
            .map(|t| {
                scope.spawn(move || {
                    let range = t * chunk..((t + 1) * chunk).min(count);
                    check_entries(space, class, bytes, range, integrity, visitor)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("recovery image thread"))
            .collect()
    });
    let mut named = Named {
        results: Vec::new(),
        live: Vec::new(),
    };
    for outcome in outcomes {
        let part = outcome?;
        named.results.extend(part.results);
        named.live.extend(part.live);
    }
    Ok(named)
}

fn check_entries(
    space: &Space,
    class: &[BlockClass],
    bytes: &[u8],
    range: std::ops::Range<usize>,
    integrity: Option<&Integrity>,
    visitor: Option<&dyn RecoveryVisitor>,
) -> std::result::Result<Named, String> {
    let region = &space.region;
    // The entries spread evenly over the shard groups (by hash): each
    // group's list sized once, with room for the spread.
    let per_group = range.len() / SHARD_GROUPS;
    let mut result = ScanResult {
        candidates: (0..SHARD_GROUPS)
            .map(|_| Vec::with_capacity(per_group + per_group / 16 + 16))
            .collect(),
        ..ScanResult::default()
    };
    let mut live: Vec<(u32, u64)> = Vec::new();
    // Equal offsets are fine in the tail: a block freed and reused while
    // the shards were copied one by one can be named for two keys.
    let (mut last_offset, mut last_named) = (0, None);
    for i in range {
        let (hash, offset) = index_image::entry_at(bytes, i);
        if offset < last_offset || offset % 8 != 0 {
            return Err(format!("entry {i} (offset {offset:#x}) is out of order"));
        }
        last_offset = offset;
        let block = space.block_of(offset);
        let start = space.block_offset(block).0;
        let (generation, end) = match class.get(block as usize) {
            None => return Err(format!("entry {i} points past the end of the file")),
            Some(BlockClass::Gone | BlockClass::Tail) => continue,
            Some(BlockClass::OldExtentBody) => {
                return Err(format!("entry {i} points inside an extent"))
            }
            Some(&BlockClass::OldLog(generation)) => (generation, start + space.block_bytes),
            Some(&BlockClass::OldExtent(generation, blocks)) => {
                if offset != start + BLOCK_HEADER_BYTES {
                    return Err(format!("entry {i} points inside an extent"));
                }
                (generation, start + blocks as u64 * space.block_bytes)
            }
        };
        if offset < start + BLOCK_HEADER_BYTES {
            return Err(format!("entry {i} points at a block header"));
        }
        if last_named == Some(offset) {
            return Err(format!("entry {i} names a record another entry names"));
        }
        last_named = Some(offset);
        let header =
            record::parse_header(region, PmemOffset(offset), end, generation).map_err(|why| {
                format!("entry {i} (offset {offset:#x}) has no valid record: {why:?}")
            })?;
        if header.is_deleted() {
            continue;
        }
        if header.tombstone || header.batch {
            return Err(format!(
                "entry {i} (offset {offset:#x}) names a tombstone or a batch header"
            ));
        }
        let summary = visitor.map_or(0, |visitor| {
            // The image names the record, so its value was not read (and
            // its checksum not checked) here: what parity could not
            // rebuild is withheld, as a read would refuse it.
            let at = PmemOffset(offset);
            let lost =
                integrity.is_some_and(|i| i.overlaps_unrepairable(offset, header.encoded_bytes()));
            let value = (!lost).then(|| record::value(region, at, &header));
            visitor.summarize(record::key(region, at, &header), value)
        });
        result.candidates[shard_of(hash) % SHARD_GROUPS].push(Candidate {
            hash,
            offset,
            summary,
            tombstone: false,
        });
        result.records += 1;
        result.max_seq = result.max_seq.max(header.seq);
        match live.last_mut() {
            Some((last, bytes)) if *last == block => *bytes += header.encoded_bytes(),
            _ => live.push((block, header.encoded_bytes())),
        }
    }
    Ok(Named {
        results: vec![result],
        live,
    })
}

/// The older blocks take the state a scan would have given them: log blocks
/// are sealed, extents with a live record are extents again; both count the
/// live bytes the image's records hold (phase 4 frees the rest).
fn settle_old_blocks(space: &Space, tasks: &[Task], floor: u32, live: &[(u32, u64)]) {
    for &(block, bytes) in live {
        space.add_live(block, bytes);
    }
    for task in tasks {
        match *task {
            Task::Log { id, generation } if generation < floor => {
                space.meta(id).set_state_in_recovery(state::SEALED);
            }
            Task::Extent {
                head,
                blocks,
                generation,
            } if generation < floor && space.meta(head).live_bytes.load(Ordering::Relaxed) > 0 => {
                space.mark_extent(head, blocks, generation);
            }
            _ => {}
        }
    }
}

/// Phase 1. Returns the scan tasks, the free blocks, the largest generation
/// seen, and how many headers were damaged (neither valid nor blank).
fn walk_headers(space: &Space, integrity: Option<&Integrity>) -> (Vec<Task>, Vec<u32>, u32, u64) {
    let region = &space.region;
    let count = space.block_count();
    let (mut tasks, mut free) = (Vec::new(), Vec::new());
    let (mut max_generation, mut damaged) = (0u32, 0u64);
    let mut id = 0u64;
    while id < count {
        let block = id as u32;
        let offset = space.block_offset(block);
        let mut header = BlockHeader::read(region, offset);
        // A damaged header would free the whole block: try parity first.
        if header.is_none()
            && region
                .read(offset, BLOCK_HEADER_BYTES)
                .iter()
                .any(|b| *b != 0)
            && integrity.is_some_and(|i| {
                i.check_range(offset.0, BLOCK_HEADER_BYTES) == RangeHealth::Repaired
            })
        {
            header = BlockHeader::read(region, offset);
        }
        let Some(header) = header else {
            if region
                .read(offset, BLOCK_HEADER_BYTES)
                .iter()
                .any(|b| *b != 0)
            {
                damaged += 1;
            }
            free.push(block);
            id += 1;
            continue;
        };
        max_generation = max_generation.max(header.generation);
        let meta = space.meta(block);
        meta.generation.store(header.generation, Ordering::Relaxed);
        meta.extent_blocks.store(1, Ordering::Relaxed);
        match header.kind {
            BlockKind::Log => {
                tasks.push(Task::Log {
                    id: block,
                    generation: header.generation,
                });
                id += 1;
            }
            BlockKind::Extent
                if header.extent_blocks >= 2 && id + header.extent_blocks as u64 <= count =>
            {
                tasks.push(Task::Extent {
                    head: block,
                    blocks: header.extent_blocks,
                    generation: header.generation,
                });
                id += header.extent_blocks as u64;
            }
            BlockKind::Extent => {
                // An extent that does not fit the file: damage. Nothing in it
                // can be trusted; its head alone is reclaimed.
                damaged += 1;
                free.push(block);
                id += 1;
            }
            BlockKind::Free => {
                free.push(block);
                id += 1;
            }
        }
    }
    (tasks, free, max_generation, damaged)
}

/// Phase 2 for one task.
fn scan_task(
    space: &Space,
    task: &Task,
    integrity: Option<&Integrity>,
    visitor: Option<&dyn RecoveryVisitor>,
    result: &mut ScanResult,
) {
    let region = &space.region;
    let keep = |result: &mut ScanResult, at: u64, header: &record::Header, trusted: bool| {
        collect(result, region, at, header, trusted, visitor)
    };
    match *task {
        Task::Log { id, generation } => {
            let start = space.block_offset(id).0;
            let end = start + space.block_bytes;
            let mut at = start + BLOCK_HEADER_BYTES;
            let mut live_bytes = 0;
            let mut repaired_at = None;
            loop {
                match record::parse(region, PmemOffset(at), end, generation) {
                    Ok(header) if header.batch => {
                        // All of the batch, or (torn) none of it, and the
                        // block's log ends there as at any torn write.
                        // Damage that parity can answer for is left to
                        // the records' own checks below.
                        let count = record::batch_count(region, PmemOffset(at), &header);
                        let first = at + header.encoded_bytes();
                        match whole_batch(region, first, end, generation, count) {
                            Ok(()) => at = first,
                            Err(broken) => {
                                match classify(region, integrity, broken, end, generation) {
                                    Damage::Torn => {
                                        result.torn_tails += 1;
                                        break;
                                    }
                                    Damage::Repaired | Damage::Lost => at = first,
                                }
                            }
                        }
                    }
                    Ok(header) => {
                        if !header.is_deleted() {
                            keep(result, at, &header, true);
                            if !header.tombstone {
                                live_bytes += header.encoded_bytes();
                            }
                        }
                        at += header.encoded_bytes();
                    }
                    Err(Invalid::NoRoom | Invalid::Unwritten) => break,
                    Err(Invalid::BadLength | Invalid::BadChecksum) => {
                        match classify(region, integrity, at, end, generation) {
                            Damage::Torn => {
                                result.torn_tails += 1;
                                break;
                            }
                            // At most once per record: repaired bytes parse.
                            Damage::Repaired if repaired_at != Some(at) => {
                                repaired_at = Some(at);
                            }
                            Damage::Repaired | Damage::Lost => {
                                result.damaged_records += 1;
                                if let Ok(header) =
                                    record::parse_header(region, PmemOffset(at), end, generation)
                                {
                                    // A batch header is never a candidate;
                                    // its records are checked one by one.
                                    if !header.is_deleted() && !header.batch {
                                        keep(result, at, &header, false);
                                        if !header.tombstone {
                                            live_bytes += header.encoded_bytes();
                                        }
                                    }
                                    at += header.encoded_bytes();
                                } else if let Some(next) = resync(region, at + 8, end, generation) {
                                    at = next;
                                } else {
                                    break;
                                }
                            }
                        }
                    }
                }
            }
            space.meta(id).set_state_in_recovery(state::SEALED);
            space.add_live(id, live_bytes);
        }
        Task::Extent {
            head,
            blocks,
            generation,
        } => {
            let start = space.block_offset(head).0;
            let end = start + blocks as u64 * space.block_bytes;
            let at = start + BLOCK_HEADER_BYTES;
            let mut parsed = record::parse(region, PmemOffset(at), end, generation);
            let mut trusted = true;
            if matches!(parsed, Err(Invalid::BadLength | Invalid::BadChecksum)) {
                match classify(region, integrity, at, end, generation) {
                    Damage::Repaired => {
                        parsed = record::parse(region, PmemOffset(at), end, generation)
                    }
                    Damage::Lost => {
                        result.damaged_records += 1;
                        trusted = false;
                        parsed = record::parse_header(region, PmemOffset(at), end, generation);
                    }
                    Damage::Torn => {}
                }
            }
            match parsed {
                Ok(header) if !header.is_deleted() && !header.batch => {
                    keep(result, at, &header, trusted);
                    space.mark_extent(head, blocks, generation);
                    // A tombstone (of a key too long for a log block) only
                    // shadows older versions: phase 4 frees its extent.
                    if !header.tombstone {
                        space.add_live(head, header.encoded_bytes());
                    }
                }
                outcome => {
                    // Deleted, or torn while being written: phase 4 frees it.
                    if matches!(outcome, Err(Invalid::BadLength | Invalid::BadChecksum)) {
                        result.torn_tails += 1;
                    }
                }
            }
        }
    }
}

/// Whether the `count` records from `at` are all valid (a batch written
/// whole); else the position of the first that is not.
fn whole_batch(
    region: &engram_pmem::Region,
    mut at: u64,
    end: u64,
    generation: u32,
    count: u64,
) -> std::result::Result<(), u64> {
    for _ in 0..count {
        match record::parse(region, PmemOffset(at), end, generation) {
            Ok(header) if !header.batch => at += header.encoded_bytes(),
            _ => return Err(at),
        }
    }
    Ok(())
}

/// What unparsable bytes at a record position mean.
enum Damage {
    /// A write cut short by a crash: the normal end of a block's log.
    Torn,
    /// Media corruption, rebuilt from parity: parse again.
    Repaired,
    /// Media corruption parity could not rebuild.
    Lost,
}

/// Tells a torn write from corruption with the integrity layer: a page
/// written since its last refresh is stale (a torn write is there); a clean
/// page that fails its checksum is damage. Without integrity, all is torn.
fn classify(
    region: &engram_pmem::Region,
    integrity: Option<&Integrity>,
    at: u64,
    end: u64,
    generation: u32,
) -> Damage {
    let Some(integrity) = integrity else {
        return Damage::Torn;
    };
    let header = record::read_header(region, PmemOffset(at));
    let key_len = (header.key_len as u64).min(record::MAX_KEY_BYTES as u64);
    let head_len = (record::HEADER_BYTES + key_len).min(end - at);
    match integrity.check_range(at, head_len) {
        RangeHealth::Stale => Damage::Torn,
        RangeHealth::Repaired => Damage::Repaired,
        RangeHealth::Unrepairable => Damage::Lost,
        // The header is as it was written: torn before the last refresh,
        // unless its value is what broke.
        RangeHealth::Clean => match record::parse_header(region, PmemOffset(at), end, generation) {
            Err(_) => Damage::Torn,
            Ok(header) => match integrity.check_range(at, header.encoded_bytes()) {
                RangeHealth::Repaired => Damage::Repaired,
                RangeHealth::Unrepairable => Damage::Lost,
                RangeHealth::Stale | RangeHealth::Clean => Damage::Torn,
            },
        },
    }
}

/// The next position after `from` holding a valid record of this block's
/// generation: where the log goes on after a record destroyed beyond
/// repair. Checksums over the generation make a false match negligible.
fn resync(region: &engram_pmem::Region, from: u64, end: u64, generation: u32) -> Option<u64> {
    (from..end)
        .step_by(8)
        .find(|&at| record::parse(region, PmemOffset(at), end, generation).is_ok())
}

/// A live record becomes a candidate for the index; `trusted`: its value
/// passed its checksum (or parity rebuilt it).
fn collect(
    result: &mut ScanResult,
    region: &engram_pmem::Region,
    at: u64,
    header: &record::Header,
    trusted: bool,
    visitor: Option<&dyn RecoveryVisitor>,
) {
    let key = record::key(region, PmemOffset(at), header);
    let hash = hash_key(key);
    // A tombstone has no value to summarize: if it wins, nothing is told.
    let summary = match visitor {
        Some(visitor) if !header.tombstone => {
            let value = trusted.then(|| record::value(region, PmemOffset(at), header));
            visitor.summarize(key, value)
        }
        _ => 0,
    };
    result.candidates[shard_of(hash) % SHARD_GROUPS].push(Candidate {
        hash,
        offset: at,
        summary,
        tombstone: header.tombstone,
    });
    result.records += 1;
    result.max_seq = result.max_seq.max(header.seq);
}

/// Phase 3 for one shard group; returns (keys indexed, records superseded).
/// Candidates are sorted by shard so each shard is locked once, and a
/// record's key is read from the region only when fingerprints collide.
fn build_group(
    space: &Space,
    index: &Index,
    results: &[ScanResult],
    group: usize,
    visitor: Option<&dyn RecoveryVisitor>,
) -> (u64, u64) {
    let region = &space.region;
    // Sized once: grown by doubling, this copy and the fresh pages each
    // growth touches cost more than the sort (5M keys: ~20% of recovery).
    let total = results.iter().map(|r| r.candidates[group].len()).sum();
    let mut candidates: Vec<Candidate> = Vec::with_capacity(total);
    for result in results {
        candidates.extend_from_slice(&result.candidates[group]);
    }
    candidates.sort_unstable_by_key(|candidate| shard_of(candidate.hash));
    let (mut keys, mut superseded) = (0, 0);
    // With a visitor: the records this shard ended with. Every entry of a
    // shard comes from its run (the index starts empty, a shard belongs to
    // one group), so a replaced entry is always found here.
    let mut winners: Vec<Candidate> = Vec::new();
    // Tombstones that became a key's entry in this run: removed at its end
    // (a later candidate may still outrank them).
    let mut tombstones: Vec<(u64, u64)> = Vec::new();
    for run in candidates.chunk_by(|a, b| shard_of(a.hash) == shard_of(b.hash)) {
        let mut table = index.shard(run[0].hash).write();
        table.reserve(run.len());
        for candidate in run {
            let hash = candidate.hash;
            let same_key = |entry: &Entry| {
                entry.hash == hash && same_key(region, entry.offset(), candidate.offset)
            };
            match table.find_entry(hash, same_key) {
                Ok(mut occupied) => {
                    let existing = occupied.get().offset();
                    let existing_seq = record::read_header(region, PmemOffset(existing)).seq;
                    let candidate_seq =
                        record::read_header(region, PmemOffset(candidate.offset)).seq;
                    // Invariant 4: equal numbers only from a compaction
                    // copy and its original, which hold equal values.
                    verify!(
                        existing_seq != candidate_seq
                            || same_value(region, existing, candidate.offset),
                        "invariant 4: records at {existing:#x} and {:#x} share seq {existing_seq} \
                         but not their value",
                        candidate.offset
                    );
                    let loser = if existing_seq < candidate_seq {
                        occupied.get_mut().set_offset(candidate.offset);
                        if candidate.tombstone {
                            tombstones.push((hash, candidate.offset));
                        }
                        if visitor.is_some() {
                            let replaced = winners
                                .iter_mut()
                                .find(|w| w.offset == existing)
                                .expect("a shard's entries come from its own run");
                            *replaced = *candidate;
                        }
                        existing
                    } else {
                        candidate.offset
                    };
                    retire_loser(space, loser);
                    superseded += 1;
                }
                Err(absent) => {
                    // The field is not persisted: a recovered key's is
                    // zero, which the keyspace reads as "as old as the
                    // store's opening".
                    absent.insert(Entry::new(hash, candidate.offset, 0));
                    keys += 1;
                    if candidate.tombstone {
                        tombstones.push((hash, candidate.offset));
                    }
                    if visitor.is_some() {
                        winners.push(*candidate);
                    }
                }
            }
        }
        // A key whose newest record is a tombstone was deleted: no entry.
        for (hash, offset) in tombstones.drain(..) {
            if let Ok(entry) = table.find_entry(hash, |e| e.offset() == offset) {
                entry.remove();
                keys -= 1;
            }
        }
        winners.retain(|winner| !winner.tombstone);
        drop(table);
        if let Some(visitor) = visitor {
            for winner in winners.drain(..) {
                let key = RecoveredKey {
                    region,
                    offset: winner.offset,
                };
                visitor.indexed(winner.hash, winner.summary, key);
            }
        }
    }
    (keys, superseded)
}

fn same_key(region: &engram_pmem::Region, a: u64, b: u64) -> bool {
    let key_of = |offset: u64| {
        let at = PmemOffset(offset);
        record::key(region, at, &record::read_header(region, at))
    };
    key_of(a) == key_of(b)
}

fn same_value(region: &engram_pmem::Region, a: u64, b: u64) -> bool {
    let value_of = |offset: u64| {
        let at = PmemOffset(offset);
        record::value(region, at, &record::read_header(region, at))
    };
    value_of(a) == value_of(b)
}

fn retire_loser(space: &Space, offset: u64) {
    let at = PmemOffset(offset);
    record::set_flags(&space.region, at, record::DELETED);
    let header = record::read_header(&space.region, at);
    // A tombstone's bytes were never counted live.
    if !header.tombstone {
        space.sub_live(space.block_of(offset), header.encoded_bytes());
    }
}
