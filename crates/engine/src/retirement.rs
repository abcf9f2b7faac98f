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
//! - an in-place update appends a new version instead (`write.rs`);
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
//! 3. set the queued records' DELETED bits (their blocks are not reused
//!    yet: see 4);
//! 4. release the blocks the *previous* round took: they died before that
//!    round began, so every record in them was queued no later than it,
//!    and this round's sync made those bits durable. A tombstone among
//!    them was written after the retirements of the versions it shadows
//!    were queued, so it goes only once they can no longer come back.
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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use engram_pmem::{PmemOffset, Region};
use parking_lot::Mutex;

use crate::record;
use crate::Result;

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
    /// One round at a time; holds the blocks the last round took, released
    /// by the next.
    round: Mutex<Vec<u32>>,
    pub rounds: AtomicU64,
    /// Rounds that synced the file.
    pub syncs: AtomicU64,
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
        !self.queued.lock().is_empty()
            || !self.died.lock().is_empty()
            || !self.round.lock().is_empty()
    }

    /// One round (module docs). `generation_of(offset)` gives the current
    /// generation of the block holding `offset` (a record whose block was
    /// reused meanwhile must not have a bit set in the new content);
    /// `release` gets the blocks whose time has come. On a failed sync
    /// nothing is lost: the taken work goes back for the next round.
    pub fn round(
        &self,
        region: &Region,
        generation_of: impl Fn(u64) -> u32,
        mut release: impl FnMut(Vec<u32>),
    ) -> Result<()> {
        let mut previous = self.round.lock();
        // The dead blocks first, then the queue: a block dies only after
        // the retirements it shadows were queued (a tombstone's delete
        // queues its victim while pinned, and the block's death waits for
        // that epoch), so every such retirement is in this queue and gets
        // its bit this round, durable by the next round's sync, before the
        // block is released. Taken the other way round, a retirement
        // queued between the two takes would get its bit only in the
        // round that releases the block, after that round's sync.
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
        for offset in queued {
            let at = PmemOffset(offset);
            let header = record::read_header(region, at);
            // A queued record's block is not released before this round
            // (step 4), so its generation still matches.
            debug_assert_eq!(header.generation(), generation_of(offset));
            if header.generation() == generation_of(offset) {
                record::set_flags(region, at, record::DELETED);
            }
        }
        release(std::mem::replace(&mut *previous, died));
        self.rounds.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
