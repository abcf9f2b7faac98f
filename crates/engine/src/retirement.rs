//! Lazy retirement: on emulated memory, acknowledged writes dirty only the
//! log's tail (`Options::lazy_retirement`).
//!
//! Why: on emulated memory every page a write stores to must be written
//! back by the next `msync` before the write may be acknowledged at
//! `always`. Retiring an overwritten record in place (its DELETED bit)
//! dirties one random page per overwrite, and an `msync` of 200 writes
//! then writes ~200 random pages besides the few of the log's tail
//! (BENCHMARKS, issue 25: SET at `-P 16` ran at a fifth of Redis's speed).
//! Here nothing but the tail is on the acknowledgement's path:
//!
//! - an overwritten (or moved, or losing) record stays valid on the media
//!   and loses to its successor by sequence number (invariant 4 already
//!   made recovery pick the larger);
//! - a delete appends a tombstone (`record.rs`), which outranks every
//!   older version of its key the same way;
//! - an in-place update appends a new version instead (`write.rs`; not
//!   where nothing is ordered against power loss, below);
//! - `Store::sync` writes back only the ranges appended through the
//!   application lanes since the last sync (`Tail`).
//!
//! The DELETED bits still matter: a tombstone, and the block it lies in,
//! must not vanish while an older version of its key is valid on the
//! media without its bit. So the bits follow in rounds, on the
//! `engram-retirement` thread (or whoever needs space now):
//!
//! 1. take the blocks that died since the last round, then the queue of
//!    records retired since (in that order: see `round`);
//! 2. sync the whole file: every record that superseded a queued one, and
//!    every compaction copy of a dead block's records, is now durable;
//! 3. write the FREE header of each dead log block just taken, unless it
//!    holds a tombstone: its records are dead on the media with it, one
//!    page written instead of one per record. Then settle the retired
//!    records, this round's and those deferred: a record whose block was
//!    marked so (or reused since) needs nothing; an extent's record gets
//!    its bit; a live log block's record waits up to `DEFER_ROUNDS`
//!    rounds for its block to die, then gets its bit. A hot set's blocks
//!    die whole within seconds, so most overwritten records never get a
//!    bit (SET -P 16 at `always`: this thread's CPU 142 -> 24 ticks);
//! 4. release the blocks the *previous* round took: they died before that
//!    round began, so every record in them was queued no later than it,
//!    and this round's sync made their FREE headers or bits durable.
//!
//! A tombstone is what must outlive the versions it outranks: taken after
//! their retirements were queued (a delete queues its victim while
//! pinned, and a block's death waits for that epoch), its block goes a
//! round after those versions are settled. So a round that takes a dead
//! block holding a tombstone settles every deferred record at once, and
//! such a block keeps its header until reuse: its FREE header, durable
//! before the versions' bits, could let one of them come back after a
//! power failure.
//!
//! Steps 2 and 4 order the bits against power loss only. Where writes are
//! not promised to survive it (`process`: the owner says so with
//! `set_power_fail_ordering(false)`), a round skips the sync: a process
//! crash keeps the page cache whole, and the eager path sets its bits and
//! reuses blocks unsynced in that mode too. (At `everysec` the sync
//! stays: it is what writes compaction's copies back before their old
//! blocks are reused.) That whole-file `msync` twice a second was a third
//! of a Raft member's CPU.
//!
//! A dead block is therefore reused two full syncs after it died, and a
//! block's bytes are counted dead as soon as nothing in the index points
//! there (tombstones are never counted live). Nothing here runs on DAX,
//! where a persisted bit costs a cache line and the eager path stays.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use engram_pmem::{PmemOffset, Region};
use parking_lot::Mutex;

use crate::record;
use crate::Result;

/// Rounds a retired record of a log block waits for its block to die
/// before it gets its bit anyway (8 s at the default interval: a hot
/// set's blocks die within seconds of their records).
const DEFER_ROUNDS: u64 = 16;

/// Retired records waiting at most (16 bytes each, 16 MiB; about 7 s
/// of SET -P 16 here): beyond it the oldest get their bits at once.
const MAX_DEFERRED: usize = 1 << 20;

/// What a retired record still needs, as its block stands now.
pub enum Bit {
    /// None: its block was reused, or died and had its FREE header
    /// written by a round.
    Spared,
    /// Its block, a log block, lives: the bit may wait for its death.
    MayWait,
    /// Its block is an extent: the bit now (see `Blocks::bit_for`).
    Now,
}

/// What a round needs of the blocks (the store's `Space`).
pub trait Blocks {
    /// For a retired record at `offset` written in block generation
    /// `generation`.
    fn bit_for(&self, offset: u64, generation: u32) -> Bit;
    /// The current generation of the block holding `offset`.
    fn generation_of(&self, offset: u64) -> u32;
    fn holds_tombstone(&self, id: u32) -> bool;
    /// Writes the FREE header of dead log block `id` unless it holds a
    /// tombstone (an extent is left for its release); its records need
    /// no bits from then on.
    fn mark_freed(&self, id: u32);
    /// Returns dead blocks to the allocator.
    fn release(&self, blocks: Vec<u32>);
}

/// The queues of one store's lazy retirement.
pub struct Retirement {
    /// Records retired since the last round began (offsets).
    queued: Mutex<Vec<u64>>,
    /// Blocks that died (their epoch passed) since the last round began.
    died: Mutex<Vec<u32>>,
    /// Whether a round syncs the file before setting bits (step 2). Only
    /// power loss can reorder the page cache's writes, so a store whose
    /// writes are not promised to survive it (`process`: the eager path
    /// sets its bits and reuses blocks unsynced there too) skips the sync;
    /// see `set_power_fail_ordering`.
    power_fail_ordering: AtomicBool,
    /// One round at a time; what rounds hand on to the next.
    round: Mutex<Carried>,
    pub rounds: AtomicU64,
    /// Rounds that synced the file.
    pub syncs: AtomicU64,
    /// DELETED bits set, and retired records whose block's FREE header
    /// spared them one.
    pub bits_set: AtomicU64,
    pub bits_spared: AtomicU64,
}

#[derive(Default)]
struct Carried {
    /// The blocks the last round took, released by the next.
    previous: Vec<u32>,
    /// Retired records (offset, block generation) of live log blocks
    /// whose bits wait, oldest batch first, each with the round that took
    /// it.
    deferred: VecDeque<(u64, Vec<(u64, u32)>)>,
    deferred_len: usize,
    /// Rounds run (the age of a deferred batch).
    number: u64,
}

impl Default for Retirement {
    fn default() -> Retirement {
        Retirement {
            queued: Mutex::default(),
            died: Mutex::default(),
            power_fail_ordering: AtomicBool::new(true),
            round: Mutex::default(),
            rounds: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            bits_set: AtomicU64::new(0),
            bits_spared: AtomicU64::new(0),
        }
    }
}

impl Retirement {
    /// Whether rounds keep their order against power loss (the default):
    /// set while acknowledged writes are promised to survive it. Turned
    /// on, the next round's sync covers every bit set before.
    pub fn set_power_fail_ordering(&self, on: bool) {
        self.power_fail_ordering.store(on, Ordering::Relaxed);
    }

    /// Whether writes are ordered against power loss (see above): an
    /// in-place update is then appended as a new version instead
    /// (`write::update_word`).
    pub fn power_fail_ordering(&self) -> bool {
        self.power_fail_ordering.load(Ordering::Relaxed)
    }

    /// Queues a record for its DELETED bit (its bytes are already counted
    /// dead by the caller).
    pub fn queue(&self, offset: u64) {
        self.queued.lock().push(offset);
    }

    /// A dead block whose epoch has passed: reused after two rounds.
    pub fn block_died(&self, id: u32) {
        self.died.lock().push(id);
    }

    /// Whether a round would do anything.
    pub fn has_work(&self) -> bool {
        !self.queued.lock().is_empty() || !self.died.lock().is_empty() || {
            let carried = self.round.lock();
            !carried.previous.is_empty() || carried.deferred_len > 0
        }
    }

    /// One round (module docs). With `every_bit` (an index image), the
    /// deferred bits are all set now too. On a failed sync nothing is
    /// lost: the taken work goes back for the next round.
    pub fn round(&self, region: &Region, blocks: &impl Blocks, every_bit: bool) -> Result<()> {
        let mut carried = self.round.lock();
        // The dead blocks first, then the queue: a block dies only after
        // the retirements it shadows were queued (a tombstone's delete
        // queues its victim while pinned, and the block's death waits for
        // that epoch), so every such retirement is in this queue or
        // deferred from an earlier round, and is settled this round,
        // durably by the next round's sync, before the block is released.
        // Taken the other way round, a retirement queued between the two
        // takes would be settled only in the round that releases the
        // block, after that round's sync.
        let died = std::mem::take(&mut *self.died.lock());
        let queued = std::mem::take(&mut *self.queued.lock());
        if self.power_fail_ordering.load(Ordering::Relaxed) {
            if let Err(error) = region.sync_all() {
                self.queued.lock().extend(queued);
                self.died.lock().extend(died);
                return Err(error.into());
            }
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        // A tombstone's block may go once every version it outranks is
        // settled: then no bit may wait any longer.
        let every_bit = every_bit || died.iter().any(|&id| blocks.holds_tombstone(id));
        for &id in &died {
            blocks.mark_freed(id);
        }
        carried.number += 1;
        let now = carried.number;
        // Each with its block's generation (from DRAM, not the record's
        // page), taken while the block cannot have been reused (its death
        // comes after this retirement, so it is released in the next
        // round at the earliest): later rounds tell a reused block by it
        // without reading its new content.
        let queued: Vec<(u64, u32)> = queued
            .into_iter()
            .map(|offset| {
                let generation = blocks.generation_of(offset);
                debug_assert_eq!(
                    generation,
                    record::read_header(region, PmemOffset(offset)).generation()
                );
                (offset, generation)
            })
            .collect();
        carried.deferred_len += queued.len();
        carried.deferred.push_back((now, queued));
        let mut kept = VecDeque::new();
        let mut kept_len = 0;
        let mut over = carried.deferred_len.saturating_sub(MAX_DEFERRED);
        while let Some((taken, batch)) = carried.deferred.pop_front() {
            let due = every_bit || now - taken >= DEFER_ROUNDS || over > 0;
            over = over.saturating_sub(batch.len());
            let waiting = self.settle(region, blocks, batch, due);
            if !waiting.is_empty() {
                kept_len += waiting.len();
                kept.push_back((taken, waiting));
            }
        }
        carried.deferred = kept;
        carried.deferred_len = kept_len;
        blocks.release(std::mem::replace(&mut carried.previous, died));
        self.rounds.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Sets the bits of `batch` that are needed now (all of them when
    /// `due`); returns those that may wait. A block `bit_for` does not
    /// spare cannot be reused under a bit set here: only rounds mark
    /// blocks, and a dead block is released only once marked, or, if it
    /// holds a tombstone, a round after every deferred bit was set.
    fn settle(
        &self,
        region: &Region,
        blocks: &impl Blocks,
        batch: Vec<(u64, u32)>,
        due: bool,
    ) -> Vec<(u64, u32)> {
        let mut waiting = Vec::new();
        let (mut set, mut spared) = (0, 0);
        for (offset, generation) in batch {
            match blocks.bit_for(offset, generation) {
                Bit::Spared => spared += 1,
                Bit::MayWait if !due => waiting.push((offset, generation)),
                Bit::MayWait | Bit::Now => {
                    record::set_flags(region, PmemOffset(offset), record::DELETED);
                    set += 1;
                }
            }
        }
        self.bits_set.fetch_add(set, Ordering::Relaxed);
        self.bits_spared.fetch_add(spared, Ordering::Relaxed);
        waiting
    }
}
