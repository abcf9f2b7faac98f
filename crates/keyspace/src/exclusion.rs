//! Whole-keyspace exclusion without locking every key group: a big-reader
//! lock whose readers are the holders of key groups.
//!
//! A script, FLUSHALL, SWAPDB or an EXEC that reads the whole keyspace must
//! run with no other writer in it. Locking all 1,024 key groups one by one
//! for that cost more than the rest of a short script (half the server's
//! CPU per EVALSHA: BENCHMARKS, issue 23), while a finer lock would tax
//! every ordinary write. Here a writer announces itself in its thread's
//! slot before it takes any key group (`Shared`: one uncontended atomic on
//! a cache line its own thread uses) and leaves it after releasing them; an
//! excluding holder raises a flag, waits for every slot to drain, and then
//! owns every key group: it takes the mutexes of those it touches, lazily,
//! and none of them can be contended.
//!
//! The protocol is Dekker's: a reader increments its slot, then reads the
//! flag; the excluder sets the flag, then reads the slots (both sequentially
//! consistent). Either the reader sees the flag (and backs out before
//! touching a key group) or the excluder sees the reader (and waits). A
//! reader that saw the flag waits on `excluder`, which the excluding holder
//! keeps write-locked for its whole life.
//!
//! A thread must not enter twice: a reader waiting for the flag while
//! already counted in a slot would wait for an excluder that waits for it.
//! Nothing in the keyspace locks a key group while holding another outside
//! one ascending acquisition (`guards_of`), and debug builds assert it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::{Backoff, CachePadded};
use parking_lot::{RwLock, RwLockWriteGuard};

/// Reader slots: threads share them by index, so more than the cores that
/// write at once is enough; each is a cache line of its own.
const SLOTS: usize = 16;

pub struct Exclusion {
    readers: [CachePadded<AtomicUsize>; SLOTS],
    excluding: AtomicBool,
    /// Write-held by the excluding holder; readers that met `excluding`
    /// wait on its read side.
    excluder: RwLock<()>,
}

/// A reader's presence (dropped after the key groups it covers; on the
/// thread that entered, whose slot it counts in).
pub struct Shared<'x> {
    exclusion: &'x Exclusion,
    slot: usize,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// The whole keyspace, excluded from every other writer.
pub struct Exclusive<'x> {
    exclusion: &'x Exclusion,
    /// Always Some until the drop hands it on.
    excluder: Option<RwLockWriteGuard<'x, ()>>,
}

thread_local! {
    static SLOT: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS
    };
}

#[cfg(debug_assertions)]
thread_local! {
    /// The exclusions this thread is inside (as readers or excluders).
    static INSIDE: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Default for Exclusion {
    fn default() -> Exclusion {
        Exclusion {
            readers: std::array::from_fn(|_| CachePadded::new(AtomicUsize::new(0))),
            excluding: AtomicBool::new(false),
            excluder: RwLock::new(()),
        }
    }
}

impl Exclusion {
    /// Enters as a reader, waiting while an excluding holder is inside.
    pub fn shared(&self) -> Shared<'_> {
        self.note_entry();
        let slot = SLOT.with(|s| *s);
        self.readers[slot].fetch_add(1, Ordering::SeqCst);
        if self.excluding.load(Ordering::SeqCst) {
            self.readers[slot].fetch_sub(1, Ordering::SeqCst);
            // Write-held while `excluding` is up; with its read side held
            // no excluder can start, so counting in now cannot be missed.
            // (The excluder unlocks fairly: a queue of scripts does not
            // starve the writers that met one.)
            let _between = self.excluder.read();
            self.readers[slot].fetch_add(1, Ordering::SeqCst);
        }
        Shared {
            exclusion: self,
            slot,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Excludes every other writer, waiting for those inside to leave.
    pub fn exclusive(&self) -> Exclusive<'_> {
        self.note_entry();
        let excluder = self.excluder.write();
        self.excluding.store(true, Ordering::SeqCst);
        let backoff = Backoff::new();
        while !self.drained() {
            if backoff.is_completed() {
                // A reader may be waiting for a sync under `always`.
                std::thread::sleep(Duration::from_micros(20));
            } else {
                backoff.snooze();
            }
        }
        Exclusive {
            exclusion: self,
            excluder: Some(excluder),
        }
    }

    /// `exclusive` if no other excluding holder is inside and the readers
    /// inside leave within `patience`; otherwise None, having changed
    /// nothing (for a network worker that must not block for long).
    pub fn try_exclusive(&self, patience: Duration) -> Option<Exclusive<'_>> {
        let excluder = self.excluder.try_write()?;
        self.excluding.store(true, Ordering::SeqCst);
        // The clock is read only once there is something to wait for: a
        // script usually finds the keyspace drained at the first look.
        let mut started = None;
        let backoff = Backoff::new();
        while !self.drained() {
            if started.get_or_insert_with(Instant::now).elapsed() >= patience {
                self.excluding.store(false, Ordering::SeqCst);
                return None;
            }
            backoff.snooze();
        }
        self.note_entry();
        Some(Exclusive {
            exclusion: self,
            excluder: Some(excluder),
        })
    }

    fn drained(&self) -> bool {
        self.readers
            .iter()
            .all(|readers| readers.load(Ordering::SeqCst) == 0)
    }

    #[cfg(debug_assertions)]
    fn note_entry(&self) {
        let me = self as *const Exclusion as usize;
        INSIDE.with(|inside| {
            let mut inside = inside.borrow_mut();
            assert!(
                !inside.contains(&me),
                "a thread entered the keyspace's exclusion twice (a key group \
                 locked while holding others, outside one ascending acquisition)"
            );
            inside.push(me);
        });
    }

    #[cfg(not(debug_assertions))]
    fn note_entry(&self) {}

    #[cfg(debug_assertions)]
    fn note_exit(&self) {
        let me = self as *const Exclusion as usize;
        INSIDE.with(|inside| inside.borrow_mut().retain(|&x| x != me));
    }

    #[cfg(not(debug_assertions))]
    fn note_exit(&self) {}
}

impl Drop for Shared<'_> {
    fn drop(&mut self) {
        self.exclusion.readers[self.slot].fetch_sub(1, Ordering::Release);
        self.exclusion.note_exit();
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        // Lowered before the excluder's lock lets waiting readers in,
        // handed straight to them (not to the next excluder barging in).
        self.exclusion.excluding.store(false, Ordering::SeqCst);
        if let Some(excluder) = self.excluder.take() {
            RwLockWriteGuard::unlock_fair(excluder);
        }
        self.exclusion.note_exit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn an_exclusive_holder_waits_for_readers_and_keeps_them_out() {
        let exclusion = Exclusion::default();
        // Bit 0: an excluder is inside; above it, twice the readers inside.
        let inside = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let entries: [AtomicU64; 3] = Default::default();
        let exclusions = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for entered in &entries {
                let (exclusion, inside, stop) = (&exclusion, &inside, &stop);
                scope.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _shared = exclusion.shared();
                        assert_eq!(
                            inside.fetch_add(2, Ordering::SeqCst) & 1,
                            0,
                            "reader met excluder"
                        );
                        std::hint::spin_loop();
                        inside.fetch_sub(2, Ordering::SeqCst);
                        entered.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let _exclusive = exclusion.exclusive();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "excluder met a reader"
                    );
                    std::hint::spin_loop();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    exclusions.fetch_add(1, Ordering::Relaxed);
                }
            });
            // Excluders back to back do not starve the readers (nor the
            // readers the excluder).
            let deadline = Instant::now() + Duration::from_secs(20);
            while entries.iter().any(|e| e.load(Ordering::Relaxed) < 1000)
                || exclusions.load(Ordering::Relaxed) < 1000
            {
                assert!(
                    Instant::now() < deadline,
                    "starved: {entries:?}, {exclusions:?}"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Relaxed);
        });
    }

    #[test]
    fn try_exclusive_gives_up_on_a_reader_that_stays_and_changes_nothing() {
        let exclusion = Exclusion::default();
        let (entered, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _shared = exclusion.shared();
                entered.wait();
                release.wait();
            });
            entered.wait();
            assert!(exclusion.try_exclusive(Duration::from_millis(2)).is_none());
            // The flag is down again: another reader gets in at once.
            let other = std::thread::scope(|s| s.spawn(|| drop(exclusion.shared())).join());
            assert!(other.is_ok());
            release.wait();
        });
        assert!(exclusion.try_exclusive(Duration::from_millis(2)).is_some());
    }

    #[test]
    fn a_second_excluder_is_refused_by_try_exclusive() {
        let exclusion = Exclusion::default();
        let first = exclusion.exclusive();
        std::thread::scope(|scope| {
            let tried = scope.spawn(|| exclusion.try_exclusive(Duration::from_millis(1)).is_none());
            assert!(tried.join().unwrap());
        });
        drop(first);
    }
}
