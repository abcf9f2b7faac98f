//! One timed phase: `threads` threads share the phase's operations, each
//! operation is timed on its own into the thread's HdrHistogram, and the
//! histograms are merged when the threads are done.
//!
//! ## Threads
//!
//! The phase's threads are scoped: they borrow the system and the workload,
//! own their histogram and key buffer, and start together at a barrier.
//! Throughput is the phase's operations over the wall time from the first
//! thread's start to the last thread's end, so a straggler counts against
//! the system.
//!
//! ## The timed loop
//!
//! Per operation: pick the record (outside the timed span), write its key
//! into the thread's buffer, read the clock, call the system, read the clock,
//! record. Every phase has its own loop, monomorphised, so no branch on the
//! operation and no allocation is added to what the system's API does
//! itself. Values are slices of a pool built before the phase.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::ProgressBar;

use crate::error::{BenchError, Result};
use crate::systems::KvSystem;
use crate::workload::{fill_key, slice, Distribution, KeyChooser, Op, Scattered, ValuePool};

/// Latencies are recorded up to a minute; longer ones are clamped to it.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// HdrHistogram's precision: 3 significant digits (0.1 % error).
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;
/// A thread advances the progress bar once per this many operations, so the
/// bar's shared counter is not touched on every operation.
const PROGRESS_STEP: u64 = 4096;
/// Seeds key choice; each thread adds its number, so runs are repeatable.
const KEY_CHOICE_SEED: u64 = 0x5EED;

/// What a phase needs to know about the data set.
pub struct Workload<'a> {
    /// Records prefilled: `0..records`.
    pub records: u64,
    /// Operations in each measured phase (insert, get, update, delete).
    pub ops: u64,
    pub threads: usize,
    pub key_bytes: usize,
    pub distribution: Distribution,
    pub values: &'a ValuePool,
}

impl Workload<'_> {
    /// Operations `op` runs over all threads.
    pub fn total(&self, op: Op) -> u64 {
        match op {
            Op::Prefill => self.records,
            Op::Insert | Op::Get | Op::Update | Op::Delete => self.ops,
        }
    }
}

/// One phase's measurement.
pub struct Phase {
    pub ops: u64,
    pub elapsed: Duration,
    pub latency_ns: Histogram<u64>,
}

impl Phase {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, LATENCY_SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// Runs phase `op` of `workload` against `system` and times it.
pub fn measure(
    system: &dyn KvSystem,
    system_name: &'static str,
    op: Op,
    workload: &Workload,
    bar: &ProgressBar,
) -> Result<Phase> {
    let threads = workload.threads;
    let start = Barrier::new(threads);
    let outcomes: Vec<Result<Timed>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let start = &start;
                scope.spawn(move || -> Result<Timed> {
                    let mut timer = Timer::new(system_name, op, workload.key_bytes, bar);
                    start.wait();
                    let began = Instant::now();
                    run_thread(&mut timer, system, op, workload, thread)?;
                    Ok(Timed {
                        began,
                        ended: Instant::now(),
                        latency_ns: timer.latency_ns,
                    })
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let timed = outcomes.into_iter().collect::<Result<Vec<Timed>>>()?;
    let mut latency_ns = new_histogram();
    for thread in &timed {
        latency_ns
            .add(&thread.latency_ns)
            .expect("histograms made by new_histogram share bounds");
    }
    let began = timed.iter().map(|thread| thread.began).min();
    let ended = timed.iter().map(|thread| thread.ended).max();
    let elapsed = ended
        .zip(began)
        .map_or(Duration::ZERO, |(ended, began)| ended - began);
    Ok(Phase {
        ops: workload.total(op),
        elapsed,
        latency_ns,
    })
}

/// A thread's histogram and the span it ran in. The phase's wall time runs
/// from the first thread's start to the last one's end, read by the threads
/// themselves, so a coordinator waiting for a core cannot shorten it.
struct Timed {
    began: Instant,
    ended: Instant,
    latency_ns: Histogram<u64>,
}

/// One thread's share of the phase.
fn run_thread(
    timer: &mut Timer,
    system: &dyn KvSystem,
    op: Op,
    workload: &Workload,
    thread: usize,
) -> Result<()> {
    let (records, ops, threads) = (workload.records, workload.ops, workload.threads);
    let values = workload.values;
    match op {
        Op::Prefill => timer.run(slice(0, records, thread, threads), |key, id| {
            system.put(key, values.value(id, 0)).map(|()| true)
        }),
        // Viper 5.3.1: each thread inserts consecutive fresh keys of its own.
        Op::Insert => timer.run(slice(records, ops, thread, threads), |key, id| {
            system.put(key, values.value(id, 0)).map(|()| true)
        }),
        Op::Get => {
            let count = slice(0, ops, thread, threads).count();
            let mut chooser = chooser(workload, thread);
            let value_bytes = values.value_bytes();
            timer.run((0..count).map(|_| chooser.next_id()), |key, _| {
                Ok(system
                    .get(key)?
                    .is_some_and(|value| value.len() == value_bytes))
            })
        }
        Op::Update => {
            let count = slice(0, ops, thread, threads).count();
            let mut chooser = chooser(workload, thread);
            timer.run((0..count).map(|_| chooser.next_id()), |key, id| {
                system.put(key, values.value(id, 1)).map(|()| true)
            })
        }
        // The records insert wrote, each thread its own, scattered.
        Op::Delete => timer.run(
            Scattered::new(slice(records, ops, thread, threads)),
            |key, _| system.delete(key),
        ),
    }
}

fn chooser(workload: &Workload, thread: usize) -> KeyChooser {
    KeyChooser::new(
        workload.distribution,
        workload.records,
        KEY_CHOICE_SEED + thread as u64,
    )
}

/// A thread's key buffer, histogram and progress.
struct Timer<'a> {
    system: &'static str,
    op: Op,
    key: Vec<u8>,
    latency_ns: Histogram<u64>,
    bar: &'a ProgressBar,
}

impl<'a> Timer<'a> {
    fn new(system: &'static str, op: Op, key_bytes: usize, bar: &'a ProgressBar) -> Timer<'a> {
        Timer {
            system,
            op,
            key: vec![0; key_bytes],
            latency_ns: new_histogram(),
            bar,
        }
    }

    /// Applies `operation` to the key of each record `ids` yields, timing
    /// each call. `operation` answers whether the system behaved as the
    /// workload expects (the key was found, the delete hit); a `false` stops
    /// the phase with an error, after the call has been timed.
    #[inline]
    fn run(
        &mut self,
        ids: impl Iterator<Item = u64>,
        mut operation: impl FnMut(&[u8], u64) -> Result<bool>,
    ) -> Result<()> {
        let mut unreported = 0;
        for id in ids {
            fill_key(id, &mut self.key);
            let began = Instant::now();
            let as_expected = operation(&self.key, id)?;
            let took_ns = began.elapsed().as_nanos();
            self.latency_ns
                .saturating_record(u64::try_from(took_ns).unwrap_or(u64::MAX));
            if !as_expected {
                return Err(BenchError::LostWrite {
                    system: self.system,
                    op: self.op,
                    record: id,
                });
            }
            unreported += 1;
            if unreported == PROGRESS_STEP {
                self.bar.inc(unreported);
                unreported = 0;
            }
        }
        self.bar.inc(unreported);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::{self, OpenSettings, SystemKind};

    #[test]
    fn every_phase_times_every_operation_once() {
        let values = ValuePool::new(100, 1);
        let workload = Workload {
            records: 3000,
            ops: 1001,
            threads: 3,
            key_bytes: 16,
            distribution: Distribution::Zipfian,
            values: &values,
        };
        let settings = OpenSettings {
            flush: engram_engine::FlushInstruction::None,
            threads: 3,
        };
        // The volatile map keeps no files, so it needs no directory.
        let unused = std::path::Path::new("unused");
        let system = systems::open(SystemKind::Volatile, unused, &settings).unwrap();
        let bar = ProgressBar::hidden();
        for op in Op::ALL {
            let phase = measure(system.as_ref(), "volatile", op, &workload, &bar).unwrap();
            assert_eq!(phase.latency_ns.len(), workload.total(op), "{op}");
            assert!(phase.ops_per_sec() > 0.0);
        }
        assert_eq!(system.key_count().unwrap(), Some(3000));
    }

    #[test]
    fn a_get_that_misses_is_a_lost_write() {
        let values = ValuePool::new(8, 1);
        let workload = Workload {
            records: 100,
            ops: 10,
            threads: 2,
            key_bytes: 8,
            distribution: Distribution::Uniform,
            values: &values,
        };
        let settings = OpenSettings {
            flush: engram_engine::FlushInstruction::None,
            threads: 2,
        };
        let unused = std::path::Path::new("unused");
        let system = systems::open(SystemKind::Volatile, unused, &settings).unwrap();
        // Nothing was prefilled, so the first get misses.
        let result = measure(
            system.as_ref(),
            "volatile",
            Op::Get,
            &workload,
            &ProgressBar::hidden(),
        );
        assert!(
            matches!(
                result,
                Err(BenchError::LostWrite {
                    system: "volatile",
                    op: Op::Get,
                    ..
                })
            ),
            "{:?}",
            result.err()
        );
    }
}
