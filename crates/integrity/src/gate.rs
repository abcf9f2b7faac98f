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
//! Each thread owns a slot whose sequence number is odd while the thread
//! is inside a bracket. Entering is a plain store and a light fence
//! (`engram_pmem::barrier`): no locked instruction on the store path.
//! `drain` issues the heavy fence (membarrier), then waits for every slot
//! that was odd to move on. Asymmetric Dekker: for each store, either its
//! mark check sees the cleared mark (so it marks the page again), or the
//! drain sees its slot odd and waits for it. (An earlier version counted
//! brackets with two locked RMWs per store; `engram bench tracker` showed
//! them as most of the tracker's cost.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use engram_pmem::barrier::{heavy_fence, init_asymmetric_fences, light_fence};
use parking_lot::Mutex;

struct Slot {
    /// Odd while the owner is inside a bracket. Written only by the owner.
    seq: AtomicU64,
    in_use: AtomicBool,
}

/// Every slot ever handed out (they are reused, never freed): shared by all
/// gates in the process, since a thread may store to several regions.
static SLOTS: Mutex<Vec<&'static CachePadded<Slot>>> = Mutex::new(Vec::new());

/// A thread's claim on its slot; gives it back when the thread exits.
struct Claim(&'static CachePadded<Slot>);

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.in_use.store(false, Ordering::Release);
    }
}

thread_local! {
    static MINE: Claim = Claim(claim_slot());
}

fn claim_slot() -> &'static CachePadded<Slot> {
    let mut slots = SLOTS.lock();
    if let Some(free) = slots.iter().find(|slot| {
        slot.in_use
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }) {
        return free;
    }
    let slot: &'static CachePadded<Slot> = Box::leak(Box::new(CachePadded::new(Slot {
        seq: AtomicU64::new(0),
        in_use: AtomicBool::new(true),
    })));
    slots.push(slot);
    slot
}

#[derive(Default)]
pub struct Gate {
    /// One drain at a time (the pass and inline writers may both drain).
    draining: Mutex<()>,
}

impl Gate {
    pub fn new() -> Gate {
        init_asymmetric_fences();
        Gate::default()
    }

    /// Opens a bracket. The light fence orders the announcement before the
    /// caller's mark check, against the drain's heavy fence.
    #[inline]
    pub fn enter(&self) -> u64 {
        MINE.with(|claim| {
            let seq = claim.0.seq.load(Ordering::Relaxed);
            debug_assert!(seq % 2 == 0, "writer-gate brackets do not nest");
            claim.0.seq.store(seq + 1, Ordering::Relaxed);
        });
        light_fence();
        0
    }

    /// Closes the bracket. Release: the store it covered happens before a
    /// drain that sees the slot move on.
    #[inline]
    pub fn exit(&self, _ticket: u64) {
        MINE.with(|claim| {
            let seq = claim.0.seq.load(Ordering::Relaxed);
            claim.0.seq.store(seq + 1, Ordering::Release);
        });
    }

    /// Waits until every bracket opened before this call has closed, on
    /// every thread but the caller's. A thread never drains inside its own
    /// bracket in normal operation (the pass, scrubber and recovery store
    /// nothing tracked; an inline writer closes its bracket first); the
    /// crash simulator's hook does, when it recovers another store inside
    /// a fence of a marking store, and must not wait for itself.
    pub fn drain(&self) {
        let _one_at_a_time = self.draining.lock();
        heavy_fence();
        let own: *const CachePadded<Slot> = MINE.with(|claim| claim.0);
        let slots: Vec<&'static CachePadded<Slot>> = SLOTS.lock().clone();
        for slot in slots {
            if std::ptr::eq(slot, own) {
                continue;
            }
            let seq = slot.seq.load(Ordering::Acquire);
            if seq % 2 == 0 {
                continue;
            }
            let mut spins = 0u32;
            while slot.seq.load(Ordering::Acquire) == seq {
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
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn drain_waits_for_open_brackets_only() {
        let gate = Arc::new(Gate::new());
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let writer = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let ticket = gate.enter();
                entered_tx.send(()).unwrap();
                release_rx.recv().unwrap();
                gate.exit(ticket);
            })
        };
        entered_rx.recv().unwrap();
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
        release_tx.send(()).unwrap();
        drainer.join().unwrap();
        writer.join().unwrap();
        assert!(finished.load(Ordering::SeqCst));
        // A thread inside no bracket is not waited for.
        let _idle = gate.enter();
        gate.exit(0);
        gate.drain();
    }
}
