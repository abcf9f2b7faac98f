//! Write lanes: per-writer write locations (Viper's clients, 4.1).
//!
//! Each lane owns at most one place to append to at a time (the engine's
//! lanes a log block, the collections' operation log a segment) and
//! appends to it sequentially, so writers on different lanes never touch
//! the same block or the same lock. A thread always starts at the same lane
//! (its home, from a per-thread number), so with no more threads than lanes
//! every writer has a lane to itself and its lock is never contended; a
//! busy lane sends the writer on to the next free one rather than making it
//! wait. [`Lanes`] is that mechanism, whatever a lane holds; the engine and
//! the operation log share it.

use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

/// The block an engine lane is filling.
#[derive(Default)]
pub(crate) struct Lane {
    pub block: Option<u32>,
    pub block_start: u64,
    /// Next free byte, relative to `block_start` (starts after the header).
    pub used_bytes: u64,
    pub generation: u32,
    /// Under lazy retirement: where in the block the last tail sync
    /// stopped (absolute offset; `retirement.rs`).
    pub synced_to: u64,
    /// The compactor's lane: its copies are not on any acknowledgement's
    /// path, so the tail sync leaves them to the retirement rounds.
    pub compaction: bool,
}

/// A fixed set of lanes, each holding an `L` under its own lock, on its
/// own cache line.
pub struct Lanes<L> {
    lanes: Box<[CachePadded<Mutex<L>>]>,
}

static NEXT_THREAD_NUMBER: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_NUMBER: usize = NEXT_THREAD_NUMBER.fetch_add(1, Ordering::Relaxed);
}

impl<L: Default> Lanes<L> {
    /// `count` lanes (at least one), each starting as `L::default()`.
    pub fn new(count: usize) -> Lanes<L> {
        Lanes {
            lanes: (0..count.max(1))
                .map(|_| CachePadded::new(Mutex::new(L::default())))
                .collect(),
        }
    }
}

impl<L> Lanes<L> {
    /// A lane for the calling thread: its home lane if free, else the next
    /// free one, else (all busy) wait for the home lane.
    pub fn acquire(&self) -> MutexGuard<'_, L> {
        let home = THREAD_NUMBER.with(|n| *n) % self.lanes.len();
        for step in 0..self.lanes.len() {
            if let Some(guard) = self.lanes[(home + step) % self.lanes.len()].try_lock() {
                return guard;
            }
        }
        self.lanes[home].lock()
    }

    /// Every lane, in order (the lock order among lanes): while they are
    /// held nothing is appended through any lane.
    pub fn lock_all(&self) -> Vec<MutexGuard<'_, L>> {
        self.lanes.iter().map(|lane| lane.lock()).collect()
    }

    /// Each lane's lock, one at a time (for counters that look at each).
    pub fn iter(&self) -> impl Iterator<Item = &Mutex<L>> {
        self.lanes.iter().map(|lane| &**lane)
    }
}
