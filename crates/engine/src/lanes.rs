//! Write lanes: per-writer write locations (Viper's clients, 4.1).
//!
//! Each lane owns at most one log block at a time and appends records to it
//! sequentially, so writers on different lanes never touch the same block or
//! the same lock. A thread always starts at the same lane (its home, from a
//! per-thread number), so with no more threads than lanes every writer has a
//! lane to itself and its lock is never contended; a busy lane sends the
//! writer on to the next free one rather than making it wait.

use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

/// The block a lane is filling.
#[derive(Default)]
pub struct Lane {
    pub block: Option<u32>,
    pub block_start: u64,
    /// Next free byte, relative to `block_start` (starts after the header).
    pub used_bytes: u64,
    pub generation: u32,
}

pub struct Lanes {
    lanes: Box<[CachePadded<Mutex<Lane>>]>,
}

static NEXT_THREAD_NUMBER: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_NUMBER: usize = NEXT_THREAD_NUMBER.fetch_add(1, Ordering::Relaxed);
}

impl Lanes {
    pub fn new(count: usize) -> Lanes {
        Lanes {
            lanes: (0..count.max(1))
                .map(|_| CachePadded::new(Mutex::new(Lane::default())))
                .collect(),
        }
    }

    /// A lane for the calling thread: its home lane if free, else the next
    /// free one, else (all busy) wait for the home lane.
    pub fn acquire(&self) -> MutexGuard<'_, Lane> {
        let home = THREAD_NUMBER.with(|n| *n) % self.lanes.len();
        for step in 0..self.lanes.len() {
            if let Some(guard) = self.lanes[(home + step) % self.lanes.len()].try_lock() {
                return guard;
            }
        }
        self.lanes[home].lock()
    }

    /// Every lane, in order: while they are held no record is appended to a
    /// lane block (an index image reads the blocks they own).
    pub fn lock_all(&self) -> Vec<MutexGuard<'_, Lane>> {
        self.lanes.iter().map(|lane| lane.lock()).collect()
    }
}
