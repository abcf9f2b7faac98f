//! Background space reclamation (Viper 4.6).
//!
//! Blocks empty themselves as their records are overwritten or deleted; a
//! block whose live bytes reach zero is freed at once by whoever retired its
//! last record. The compactor handles the rest: it picks sealed blocks that
//! are at most `max_live_ratio` live, least live first, and moves each live
//! record into its own lane's block (same key, value and sequence number),
//! switching the index entry and retiring the old copy under the key's shard
//! lock. Then the old block has no live bytes and is freed.
//!
//! A block that is still dying waits (`Decay`): until the background
//! compactor has seen a candidate's live bytes hold still for
//! `COLD_AFTER`, it leaves the block alone, as long as free blocks are
//! plentiful (well above the mark at which the file grows) or the file is
//! below three quarters of its space budget (the reserve thread grows it
//! when free blocks run low: a one-time cost of fresh pages to fault in).
//! Under a hot set of overwritten keys blocks then die whole and return
//! to the free set without a byte copied; compacting them at half live
//! copied records that their next overwrite would have killed anyway, on
//! every round for as long as the load lasted (SET -P 16 at `process`:
//! the compactor's CPU 183 -> 22 ticks). Near the budget with free blocks
//! short it compacts least-live-first, dying or not. A block whose live
//! bytes hold still (cold data among dead) is compacted once they have
//! held for `COLD_AFTER`.
//!
//! Why so long, and not one round: a block's last few live records die
//! slowly (a hot set of 100,000 keys overwritten at 145,000 writes a
//! second kills a given record about once in 0.7 s), so over 50 ms
//! rounds almost every block sooner or later holds still for one while a
//! dozen records live. Compacting it then moves those few records but
//! reads all of the block's (about 14,000 in 1 MiB): under lazy
//! retirement a dead record carries no DELETED bit, and each costs an
//! index lookup. A Raft member (SET -P 16, 100,000 keys) compacted four
//! blocks in five that way, 0.4 µs of CPU per write for 0.15% of the
//! writes moved.
//!
//! It never stops the foreground: it holds one shard lock for one record at a
//! time, and a block being compacted stays readable until an epoch after its
//! last record moved. Writers help only when the file reaches its space budget
//! with nothing free ([`block_for_writer`], where an application lane's next
//! block comes from).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engram_pmem::PmemOffset;

use crate::append;
use crate::block::{state, BLOCK_HEADER_BYTES};
use crate::index::hash_key;
use crate::record::{self, Header};
use crate::space::flush_epochs;
use crate::store_state::StoreState;
use crate::Result;

/// Blocks one background round compacts at most before sleeping again.
const MAX_BLOCKS_PER_ROUND: usize = 64;
/// How many blocks a writer compacts itself, when the file is at its space
/// budget and no block is free, before it grows the file anyway.
const MAX_ASSISTS_PER_BLOCK: usize = 4;

/// The background compactor waits for a dying block unless free blocks
/// are short and the file is past this share of its space budget (writers
/// must help beyond the budget itself).
const PATIENT_UNTIL_BUDGET_SHARE: f64 = 0.75;

/// How long a patient compactor waits for a block's live bytes to hold
/// still before it takes the block for cold data among dead.
const COLD_AFTER: Duration = Duration::from_secs(2);

/// The compactor thread.
pub fn run(store: &StoreState) {
    let mut decay = Decay::default();
    while store.sleep(store.options.compaction.interval) {
        let patient = store.space.free_to_spare()
            || store.space.may_grow(
                store.options.compaction.max_space_amplification * PATIENT_UNTIL_BUDGET_SHARE,
            );
        let chosen = candidates(store, MAX_BLOCKS_PER_ROUND, patient.then_some(&mut decay));
        compact_blocks(store, chosen);
        flush_epochs();
    }
}

/// Each block's live bytes when the compactor last looked, and since
/// when they have held (the compactor thread's own memory).
#[derive(Default)]
struct Decay {
    seen: Vec<(u64, Instant)>,
}

impl Decay {
    /// Whether the block's live bytes changed within `COLD_AFTER` of
    /// `now` (a block first seen counts as changed now); records what it
    /// has.
    fn dying(&mut self, id: u32, live: u64, now: Instant) -> bool {
        let id = id as usize;
        if self.seen.len() <= id {
            self.seen.resize(id + 1, (u64::MAX, now));
        }
        let (before, since) = &mut self.seen[id];
        if *before != live {
            *before = live;
            *since = now;
        }
        now.duration_since(*since) < COLD_AFTER
    }
}

/// Compacts up to `max_blocks` of the best candidates, dying or not;
/// returns how many.
pub fn round(store: &StoreState, max_blocks: usize) -> usize {
    compact_blocks(store, candidates(store, max_blocks, None))
}

fn compact_blocks(store: &StoreState, chosen: Vec<u32>) -> usize {
    let mut compacted = 0;
    for id in chosen {
        if store.shutdown.load(Ordering::Acquire) {
            break;
        }
        if compact_block(store, id) {
            compacted += 1;
        }
    }
    compacted
}

/// Compacts the single best candidate; false if there is none.
pub fn compact_one(store: &StoreState) -> bool {
    candidates(store, 1, None)
        .first()
        .is_some_and(|id| compact_block(store, *id))
}

/// A block for an application lane. When the file is at its space budget
/// and nothing is free, the writer compacts a block or two itself before
/// growing: an overwrite-heavy load then keeps the file bounded instead of
/// outrunning the background compactor.
pub fn block_for_writer(store: &StoreState) -> Result<u32> {
    let budget = store.options.compaction.max_space_amplification;
    for _ in 0..MAX_ASSISTS_PER_BLOCK {
        if let Some(id) = store.space.take_free() {
            return Ok(id);
        }
        if !store.options.compaction.enabled || store.space.may_grow(budget) {
            break;
        }
        if !compact_one(store) {
            break;
        }
        flush_epochs();
    }
    store.space.take_free_or_grow()
}

/// Sealed blocks at most `max_live_ratio` live, least live first; with
/// `decay`, not those whose live bytes changed within `COLD_AFTER`.
fn candidates(store: &StoreState, max_blocks: usize, mut decay: Option<&mut Decay>) -> Vec<u32> {
    let space = &store.space;
    let now = Instant::now();
    let threshold =
        (space.log_payload_bytes() as f64 * store.options.compaction.max_live_ratio) as u64;
    let mut sealed: Vec<(u64, u32)> = (0..space.block_count() as u32)
        .filter_map(|id| {
            let meta = space.meta(id);
            let live = meta.live_bytes.load(Ordering::Relaxed);
            let dying = decay.as_mut().is_some_and(|d| d.dying(id, live, now));
            (meta.state() == state::SEALED && live <= threshold && !dying).then_some((live, id))
        })
        .collect();
    if sealed.len() > max_blocks {
        sealed.select_nth_unstable(max_blocks - 1);
        sealed.truncate(max_blocks);
    }
    sealed.sort_unstable();
    sealed.into_iter().map(|(_, id)| id).collect()
}

/// Moves every live record out of block `id`. False if another thread
/// claimed the block first.
fn compact_block(store: &StoreState, id: u32) -> bool {
    let space = &store.space;
    let meta = space.meta(id);
    if !meta.change_state(state::SEALED, state::COMPACTING) {
        return false;
    }
    {
        // Pinned while reading the block: it may be freed as soon as its last
        // record moves, and must not be reused before we stop reading it.
        let _guard = crossbeam_epoch::pin();
        let generation = meta.generation.load(Ordering::Relaxed);
        let start = space.block_offset(id).0;
        let end = start + space.block_bytes;
        let mut at = start + BLOCK_HEADER_BYTES;
        while !store.shutdown.load(Ordering::Acquire) {
            let Ok(header) = record::parse(&space.region, PmemOffset(at), end, generation) else {
                break;
            };
            // A record on a page damaged beyond repair stays where reads
            // of it fail; copying would give its bytes a fresh checksum.
            let damaged = space
                .integrity
                .as_ref()
                .is_some_and(|i| i.overlaps_unrepairable(at, header.encoded_bytes()));
            if damaged || (!header.is_deleted() && !move_record(store, at, &header)) {
                break;
            }
            at += header.encoded_bytes();
        }
    }
    // Unless its last record's retirement already began to free it.
    meta.change_state(state::COMPACTING, state::SEALED);
    store.compactions.fetch_add(1, Ordering::Relaxed);
    space.free_if_dead(id);
    true
}

/// Moves the record at `at` if the index still points at it. False when
/// there is no space to move it to (compaction stops for now).
fn move_record(store: &StoreState, at: u64, header: &Header) -> bool {
    let region = &store.space.region;
    let key = record::key(region, PmemOffset(at), header);
    let hash = hash_key(key);
    let mut table = store.index.shard(hash).write();
    let Ok(mut occupied) = table.find_entry(hash, |e| e.hash == hash && e.offset() == at) else {
        // Superseded or deleted since we read it, or not yet published.
        return true;
    };
    // Under the write lock no in-place update runs, so this is the value.
    let value = record::value(region, PmemOffset(at), header);
    match copy(store, key, value, header.seq) {
        Ok(new_at) => {
            // Invariant 4: a copy keeps its record's seq (so either may
            // survive a crash between here and the retirement below), and
            // no other version of the key ties with it.
            verify!(
                record::read_header(region, PmemOffset(new_at)).seq == header.seq,
                "invariant 4: the copy of the record at {at:#x} does not keep its seq {}",
                header.seq
            );
            occupied.get_mut().set_offset(new_at);
            append::retire(store, at);
            store.records_moved.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(_) => false,
    }
}

/// Appends a moved record (same key, value and sequence number) through
/// the compaction lane; returns its new offset. The compactor claims
/// blocks without assisting anyone: it is the assistance.
fn copy(store: &StoreState, key: &[u8], value: &[u8], seq: u64) -> Result<u64> {
    // Records of sealed log blocks always fit one; an extent is never
    // compacted, but would go to an extent of its own.
    let (at, _) = if append::fits_log_block(store, key, value) {
        let mut lane = store.compaction_lane.lock();
        append::append_to_lane(store, &mut lane, key, value, Some(seq), || {
            store.space.take_free_or_grow()
        })?
    } else {
        append::append_extent(store, key, value, Some(seq), false)?
    };
    Ok(at)
}
