//! The writer gate: lets the redundancy pass wait until every store that
//! could have seen a page's old dirty mark has finished.
//!
//! A store checks its page's DRAM mark and, when it is already set, skips
//! marking. If the pass cleared the mark between that check and the store,
//! the store would land after the mark was cleared, and the new checksum
//! could miss it: the race of the paper's Figure 4(a). The paper avoids it
//! with hardware dirty bits; we bracket each store in the gate instead and,
//! after clearing marks, wait for every bracket opened before the clear.
//!
//! It is the two-phase counter scheme of SRCU (sleepable RCU): writers count
//! themselves in the current phase's counter (one cache line per thread
//! slot, so writers on different threads share nothing); `drain` flips the
//! phase and waits for the old phase's counters to reach zero. Writers that
//! enter after the flip count in the new phase and are not waited for; they
//! see the cleared mark (the flip follows the clear in the SeqCst order) and
//! mark the page again.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Thread slots; threads beyond this share slots (correct, just contended).
const SLOTS: usize = 64;

pub struct Gate {
    phase: AtomicU64,
    counters: [Box<[CachePadded<AtomicU64>]>; 2],
    /// One drain at a time: a drain must finish before the phase flips again.
    draining: Mutex<()>,
}

impl Default for Gate {
    fn default() -> Self {
        let counters = || (0..SLOTS).map(|_| CachePadded::new(AtomicU64::new(0))).collect();
        Gate {
            phase: AtomicU64::new(0),
            counters: [counters(), counters()],
            draining: Mutex::new(()),
        }
    }
}

fn slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS;
    }
    SLOT.with(|slot| *slot)
}

impl Gate {
    /// Opens a bracket; the returned ticket closes it. SeqCst pairs with the
    /// flip and the counter reads in `drain`: a writer whose increment is
    /// not seen by the drain makes all its later loads (the mark check)
    /// after the flip, hence after the clear.
    #[inline]
    pub fn enter(&self) -> u64 {
        let phase = self.phase.load(Ordering::SeqCst) & 1;
        let slot = slot();
        self.counters[phase as usize][slot].fetch_add(1, Ordering::SeqCst);
        phase << 32 | slot as u64
    }

    /// Closes the bracket. Release: the store it covered happens before a
    /// drain that sees the counter drop.
    #[inline]
    pub fn exit(&self, ticket: u64) {
        let phase = (ticket >> 32) as usize;
        let slot = (ticket & 0xffff_ffff) as usize;
        self.counters[phase][slot].fetch_sub(1, Ordering::Release);
    }

    /// Waits until every bracket opened before this call has closed.
    pub fn drain(&self) {
        let _one_at_a_time = self.draining.lock();
        let old = (self.phase.fetch_add(1, Ordering::SeqCst) & 1) as usize;
        let mut spins = 0u32;
        for counter in self.counters[old].iter() {
            while counter.load(Ordering::SeqCst) != 0 {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn drain_waits_for_open_brackets_only() {
        let gate = Arc::new(Gate::default());
        let ticket = gate.enter();
        let finished = Arc::new(AtomicBool::new(false));
        let drainer = {
            let (gate, finished) = (gate.clone(), finished.clone());
            std::thread::spawn(move || {
                gate.drain();
                finished.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!finished.load(Ordering::SeqCst), "drain ignored an open bracket");
        // A bracket opened after the drain began is not waited for.
        let later = gate.enter();
        gate.exit(ticket);
        drainer.join().unwrap();
        assert!(finished.load(Ordering::SeqCst));
        gate.exit(later);
        gate.drain();
    }
}
