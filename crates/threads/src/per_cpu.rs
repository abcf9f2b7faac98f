//! Values kept once per CPU, so that threads on different cores update
//! them without moving one cache line back and forth between the cores.
//!
//! A statistic every command bumps (INFO's `total_commands_processed`,
//! `keyspace_hits`, a command's `calls` and `usec`) is one cache line that
//! every network worker writes: each write by another core than the last
//! one's waits for the line to come over, as long as a cache miss; on GET
//! at -P 16 the bump of `keyspace_hits` alone was a sixth of the
//! keyspace's read time (BENCHMARKS.md, thirteenth session). The kernel
//! keeps its own statistics per CPU for the same reason (`percpu_counter`).
//!
//! A thread updates the slot of the CPU it runs on (`sched_getcpu`, read
//! from the thread's rseq area by glibc: a few nanoseconds); readers sum
//! every slot. The thread may move to another CPU between the lookup and
//! the update, so the slots are atomics and two threads may now and then
//! share one: the sum stays exact, only the locality is lost for that once.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

use crossbeam_utils::CachePadded;

/// At most this many slots (on bigger machines CPUs share them).
const MAX_SLOTS: usize = 256;

/// How many slots a per-CPU value has: the CPUs the system has
/// configured (not only those this process may use: `sched_getcpu` can
/// name any of them), at most `MAX_SLOTS`.
fn slots() -> usize {
    static SLOTS: OnceLock<usize> = OnceLock::new();
    *SLOTS.get_or_init(|| {
        // SAFETY: sysconf only reads system configuration.
        let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        (configured.max(1) as usize).min(MAX_SLOTS)
    })
}

/// The slot of the CPU this thread runs on now.
#[inline]
fn this_slot(slots: usize) -> usize {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let cpu = unsafe { libc::sched_getcpu() };
    // -1 when the kernel cannot say: any slot is correct, only slower.
    (cpu.max(0) as usize) % slots
}

/// One `T` per CPU, each on a cache line of its own.
pub struct PerCpu<T> {
    slots: Box<[CachePadded<T>]>,
}

impl<T> PerCpu<T> {
    pub fn new(mut make: impl FnMut() -> T) -> PerCpu<T> {
        PerCpu {
            slots: (0..slots()).map(|_| CachePadded::new(make())).collect(),
        }
    }

    /// The slot of the CPU the calling thread runs on. Another thread may
    /// use it at the same time (after a migration), so `T` must be safe to
    /// share: atomics.
    #[inline]
    pub fn local(&self) -> &T {
        &self.slots[this_slot(self.slots.len())]
    }

    /// Every slot, to sum or reset them.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|slot| &**slot)
    }
}

impl<T: Default> Default for PerCpu<T> {
    fn default() -> PerCpu<T> {
        PerCpu::new(T::default)
    }
}

/// A counter kept per CPU. Reading sums the slots: exact when no update
/// is in flight, otherwise a value the counter passed through or will.
/// Negative deltas are allowed (a slot may go below zero; the sum will not
/// if the counter's own rules keep it from it).
#[derive(Default)]
pub struct StripedCounter {
    slots: PerCpu<AtomicI64>,
}

impl StripedCounter {
    pub fn new() -> StripedCounter {
        StripedCounter::default()
    }

    #[inline]
    pub fn add(&self, delta: i64) {
        self.slots.local().fetch_add(delta, Ordering::Relaxed);
    }

    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    pub fn sum(&self) -> i64 {
        self.slots
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .sum()
    }

    /// The sum, as a count that cannot be negative.
    pub fn get(&self) -> u64 {
        self.sum().max(0) as u64
    }

    /// Back to zero (CONFIG RESETSTAT). Updates racing with the reset may
    /// be kept or lost, as with one atomic stored over.
    pub fn reset(&self) {
        for slot in self.slots.iter() {
            slot.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_what_every_thread_added_wherever_it_ran() {
        let counter = StripedCounter::new();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for i in 0..10_000 {
                        counter.add(3);
                        counter.add(-1);
                        if i % 1000 == 0 {
                            // Give the scheduler a chance to move us.
                            std::thread::yield_now();
                        }
                    }
                });
            }
        });
        assert_eq!(counter.sum(), 4 * 10_000 * 2);
        assert_eq!(counter.get(), 80_000);
        counter.reset();
        assert_eq!(counter.sum(), 0);
    }

    #[test]
    fn a_negative_sum_reads_as_zero_through_get() {
        let counter = StripedCounter::new();
        counter.add(-5);
        assert_eq!(counter.sum(), -5);
        assert_eq!(counter.get(), 0);
    }

    #[test]
    fn every_cpu_has_a_slot_and_local_picks_one_of_them() {
        let values: PerCpu<AtomicI64> = PerCpu::default();
        assert_eq!(values.iter().count(), slots());
        values.local().fetch_add(7, Ordering::Relaxed);
        let total: i64 = values.iter().map(|v| v.load(Ordering::Relaxed)).sum();
        assert_eq!(total, 7);
    }
}
