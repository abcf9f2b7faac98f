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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use engram_integrity::{Integrity, RangeHealth};
use engram_pmem::PmemOffset;

use crate::block::{state, BlockHeader, BlockKind, BLOCK_HEADER_BYTES};
use crate::index::{entry_hash, hash_key, shard_of, Entry, Index, SHARD_COUNT};
use crate::record::{self, Invalid};
use crate::space::Space;
use crate::store::RecoveryReport;
use crate::Result;

/// Shards are grouped so that phase 3 hands out work in sizeable pieces.
const SHARD_GROUPS: usize = 256;
const _: () = assert!(SHARD_COUNT % SHARD_GROUPS == 0);

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

#[derive(Clone, Copy)]
struct Candidate {
    hash: u64,
    offset: u64,
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
) -> Result<Recovered> {
    let started = Instant::now();
    let threads = threads.max(1);
    let (tasks, mut free, max_generation, damaged_headers) = walk_headers(space, integrity);

    // Phase 2: scan blocks in parallel.
    let next_task = AtomicUsize::new(0);
    let results: Vec<ScanResult> = std::thread::scope(|scope| {
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
                        scan_task(space, task, integrity, &mut result);
                    }
                    result
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("recovery scan thread"))
            .collect()
    });

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
                        let (k, s) = build_group(space, index, &results, group);
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
    for task in &tasks {
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
    space.set_next_generation(max_generation + 1);

    let max_seq = results.iter().map(|r| r.max_seq).max().unwrap_or(0);
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
        },
        next_seq: max_seq + 1,
        keys,
    })
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
fn scan_task(space: &Space, task: &Task, integrity: Option<&Integrity>, result: &mut ScanResult) {
    let region = &space.region;
    match *task {
        Task::Log { id, generation } => {
            let start = space.block_offset(id).0;
            let end = start + space.block_bytes;
            let mut at = start + BLOCK_HEADER_BYTES;
            let mut live_bytes = 0;
            let mut repaired_at = None;
            loop {
                match record::parse(region, PmemOffset(at), end, generation) {
                    Ok(header) => {
                        if !header.is_deleted() {
                            collect(result, region, at, &header);
                            live_bytes += header.encoded_bytes();
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
                                    if !header.is_deleted() {
                                        collect(result, region, at, &header);
                                        live_bytes += header.encoded_bytes();
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
            space.meta(id).state.store(state::SEALED, Ordering::Release);
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
            if matches!(parsed, Err(Invalid::BadLength | Invalid::BadChecksum)) {
                match classify(region, integrity, at, end, generation) {
                    Damage::Repaired => {
                        parsed = record::parse(region, PmemOffset(at), end, generation)
                    }
                    Damage::Lost => {
                        result.damaged_records += 1;
                        parsed = record::parse_header(region, PmemOffset(at), end, generation);
                    }
                    Damage::Torn => {}
                }
            }
            match parsed {
                Ok(header) if !header.is_deleted() => {
                    collect(result, region, at, &header);
                    space.mark_extent(head, blocks, generation);
                    space.add_live(head, header.encoded_bytes());
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

fn collect(
    result: &mut ScanResult,
    region: &engram_pmem::Region,
    at: u64,
    header: &record::Header,
) {
    let hash = hash_key(record::key(region, PmemOffset(at), header));
    result.candidates[shard_of(hash) % SHARD_GROUPS].push(Candidate { hash, offset: at });
    result.records += 1;
    result.max_seq = result.max_seq.max(header.seq);
}

/// Phase 3 for one shard group; returns (keys indexed, records superseded).
/// Candidates are sorted by shard so each shard is locked once, and a
/// record's key is read from the region only when fingerprints collide.
fn build_group(space: &Space, index: &Index, results: &[ScanResult], group: usize) -> (u64, u64) {
    let region = &space.region;
    let mut candidates: Vec<Candidate> = results
        .iter()
        .flat_map(|result| result.candidates[group].iter().copied())
        .collect();
    candidates.sort_unstable_by_key(|candidate| shard_of(candidate.hash));
    let (mut keys, mut superseded) = (0, 0);
    for run in candidates.chunk_by(|a, b| shard_of(a.hash) == shard_of(b.hash)) {
        let mut table = index.shard(run[0].hash).write();
        table.reserve(run.len(), entry_hash);
        for candidate in run {
            let hash = candidate.hash;
            let same_key = |entry: &Entry| {
                entry.hash == hash && same_key(region, entry.offset, candidate.offset)
            };
            match table.find_entry(hash, same_key) {
                Ok(mut occupied) => {
                    let existing = occupied.get().offset;
                    let existing_seq = record::read_header(region, PmemOffset(existing)).seq;
                    let loser = if existing_seq
                        < record::read_header(region, PmemOffset(candidate.offset)).seq
                    {
                        occupied.get_mut().offset = candidate.offset;
                        existing
                    } else {
                        candidate.offset
                    };
                    retire_loser(space, loser);
                    superseded += 1;
                }
                Err(absent) => {
                    absent.into_table().insert_unique(
                        hash,
                        Entry {
                            hash,
                            offset: candidate.offset,
                        },
                        entry_hash,
                    );
                    keys += 1;
                }
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

fn retire_loser(space: &Space, offset: u64) {
    let at = PmemOffset(offset);
    record::set_flags(&space.region, at, record::DELETED);
    let size = record::read_header(&space.region, at).encoded_bytes();
    space.sub_live(space.block_of(offset), size);
}
