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

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;

use crossbeam_utils::CachePadded;
use engram_pmem::barrier::{heavy_fence, init_asymmetric_fences, light_fence};
use parking_lot::Mutex;

/// A thread's announcement for one gate: odd while it is inside a bracket.
/// Written only by its thread.
type Slot = CachePadded<AtomicU64>;

static NEXT_GATE_ID: AtomicU64 = AtomicU64::new(1);

/// Slots of dropped gates, for the next gate. Slots live as long as the
/// process (a thread's cached slot must outlive any gate it belonged to,
/// and `&'static` lets the cache below be a plain `Cell`); recycling keeps
/// their number at the peak of (thread, live gate) pairs.
static SPARE_SLOTS: Mutex<Vec<&'static Slot>> = Mutex::new(Vec::new());

thread_local! {
    /// The slot of the gate this thread used last: one comparison on the
    /// store path, no borrow flag and no destructor to register; other
    /// gates take the slow path once per switch. (A `RefCell` holding an
    /// `Arc` here showed up as 1% of a YCSB A profile.)
    static LAST: Cell<Option<(u64, &'static Slot)>> = const { Cell::new(None) };
}

/// Each gate has its own slots, so draining one store's gate never waits
/// for writers of another (tests run many stores on parallel threads, and
/// the crash simulator recovers a second store inside a fence of the
/// first).
pub struct Gate {
    id: u64,
    slots: Mutex<Vec<(ThreadId, &'static Slot)>>,
    /// One drain at a time (the pass and inline writers may both drain).
    draining: Mutex<()>,
}

impl Gate {
    pub fn new() -> Gate {
        init_asymmetric_fences();
        Gate {
            id: NEXT_GATE_ID.fetch_add(1, Ordering::Relaxed),
            slots: Mutex::new(Vec::new()),
            draining: Mutex::new(()),
        }
    }

    #[inline]
    fn slot(&self) -> &'static Slot {
        match LAST.get() {
            Some((id, slot)) if id == self.id => slot,
            _ => {
                let slot = self.slot_of_this_thread();
                LAST.set(Some((self.id, slot)));
                slot
            }
        }
    }

    fn slot_of_this_thread(&self) -> &'static Slot {
        let me = std::thread::current().id();
        let mut slots = self.slots.lock();
        if let Some((_, slot)) = slots.iter().find(|(owner, _)| *owner == me) {
            return slot;
        }
        let slot = SPARE_SLOTS
            .lock()
            .pop()
            .unwrap_or_else(|| Box::leak(Box::new(CachePadded::new(AtomicU64::new(0)))));
        // A spare's count is even (its gate was dropped with no bracket
        // open); starting from it keeps "odd = inside" true.
        slots.push((me, slot));
        slot
    }

    /// Opens a bracket. The light fence orders the announcement before the
    /// caller's mark check, against the drain's heavy fence.
    #[inline]
    pub fn enter(&self) -> u64 {
        let slot = self.slot();
        let seq = slot.load(Ordering::Relaxed);
        debug_assert!(seq.is_multiple_of(2), "writer-gate brackets do not nest");
        slot.store(seq + 1, Ordering::Relaxed);
        light_fence();
        0
    }

    /// Closes the bracket. Release: the store it covered happens before a
    /// drain that sees the slot move on.
    #[inline]
    pub fn exit(&self, _ticket: u64) {
        let slot = self.slot();
        let seq = slot.load(Ordering::Relaxed);
        slot.store(seq + 1, Ordering::Release);
    }

    /// Waits until every bracket of this gate opened before this call has
    /// closed. Never called inside a bracket of the same gate: the pass,
    /// scrubber and recovery store nothing tracked, and an inline writer
    /// closes its bracket first.
    pub fn drain(&self) {
        let _one_at_a_time = self.draining.lock();
        heavy_fence();
        let slots: Vec<&'static Slot> = self.slots.lock().iter().map(|(_, s)| *s).collect();
        for slot in slots {
            let seq = slot.load(Ordering::Acquire);
            if seq % 2 == 0 {
                continue;
            }
            let mut spins = 0u32;
            while slot.load(Ordering::Acquire) == seq {
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

impl Drop for Gate {
    fn drop(&mut self) {
        let slots = std::mem::take(self.slots.get_mut());
        SPARE_SLOTS
            .lock()
            .extend(slots.into_iter().map(|(_, slot)| slot));
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
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let drainer = {
            let (gate, finished) = (gate.clone(), finished.clone());
            std::thread::spawn(move || {
                gate.drain();
                finished.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !finished.load(Ordering::SeqCst),
            "drain ignored an open bracket"
        );
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
