//! One cell of `engram-bench integrity`: a configuration on a workload, on
//! a fresh store (module docs of [`super`] for the sequence).
//!
//! ## Threads
//!
//! The client threads are scoped: they borrow the store, own their
//! histograms, and start together with this thread at a barrier. Each runs
//! until `stop` is set: by this thread when the run's time is up, or by a
//! client that failed (so that the others stop too). Each publishes how
//! many operations it has done in a counter of its own cache line every
//! [`PUBLISH_EVERY`] operations, from which this thread computes throughput
//! per second. Meanwhile this thread is the sampler: every
//! [`SAMPLE_EVERY`] it reads `integrity_stats()` (in every configuration,
//! so each pays the same sampling cost; with integrity off it returns at
//! once) and advances the progress bar.
//!
//! ## The timed loop
//!
//! Per operation: pick the record (zipfian or uniform over the prefilled
//! ones) and whether it is a read (by the workload's percentage), write its
//! key, read the clock, `get` (value copied out, length checked) or `put`
//! (a value from the pool, different from the stored one), read the clock,
//! record the latency in the read or the update histogram. Throughput
//! counts both, over the wall time from the first client's start to the
//! last one's end, as [`crate::runner`] does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use engram_engine::{IntegrityStats, Options, Store};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Config, Configuration, Workload, SAMPLE_EVERY};
use crate::command::remove_if_present;
use crate::cpu_time::CpuTimes;
use crate::error::{BenchError, Result};
use crate::progress::progress_bar;
use crate::runner::{self, new_histogram};
use crate::systems::KvSystem;
use crate::workload::{fill_key, KeyChooser, Op, ValuePool};

/// A client publishes its operation count once per this many operations.
const PUBLISH_EVERY: u64 = 1024;
/// Throughput is also reported per window of this length.
const WINDOW: Duration = Duration::from_secs(1);
/// Seeds the key choice and the read/update coin; each thread adds its
/// number, so runs are repeatable.
const KEY_CHOICE_SEED: u64 = 0x5EED;
const MIX_SEED: u64 = 0xC0FFEE;
/// After the run, the drain is watched for at most this long past two
/// periods (inline: past zero), and never longer than [`MAX_DRAIN_WAIT`]:
/// beyond it the result says "not drained" (and the 2x target is missed).
const DRAIN_PATIENCE: Duration = Duration::from_secs(10);
const MAX_DRAIN_WAIT: Duration = Duration::from_secs(600);
/// Other processes' CPU use is judged over this span before a timed run.
const QUIET_SPAN: Duration = Duration::from_secs(1);

/// What one cell measured.
pub struct Measured {
    pub prefill_ops_per_sec: f64,
    pub reads: u64,
    pub updates: u64,
    /// First client's start to last client's end.
    pub elapsed: Duration,
    pub update_ns: Histogram<u64>,
    pub read_ns: Histogram<u64>,
    /// Operations per second in each whole [`WINDOW`] of the run.
    pub ops_per_sec_by_window: Vec<f64>,
    /// Records compaction moved in each window: on two cores a busy
    /// compactor takes a third of the clients' CPU, so this is the first
    /// thing to hold beside a slow second.
    pub moves_by_window: Vec<u64>,
    /// Share of the machine's CPU time other processes used during the
    /// timed run (0 to 1), when /proc says: on a shared machine, the first
    /// thing to look at when a number surprises.
    pub other_cpu: Option<f64>,
    /// How long the cell waited for other processes to calm down.
    pub quiet_wait: Duration,
    /// Integrity on: how quickly writes were protected.
    pub coverage: Option<Coverage>,
    /// Integrity on: the on-demand scrub after the run.
    pub scrub: Option<ScrubSample>,
}

impl Measured {
    pub fn ops_per_sec(&self) -> f64 {
        (self.reads + self.updates) as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// Time to coverage, from the sampled `integrity_stats()`.
#[derive(Clone, Debug)]
pub struct Coverage {
    pub samples: usize,
    /// The largest and the 99th-percentile `oldest_stale_age` sampled.
    pub max: Duration,
    pub p99: Duration,
    /// From the last client's end until `pages_stale` was 0; `None` if it
    /// was not within the patience.
    pub drain: Option<Duration>,
    pub max_pages_stale: u64,
    pub pages_covered: u64,
    /// Background passes and pages they refreshed during the run.
    pub passes: u64,
    pub pages_refreshed: u64,
    /// The longest pass seen (each pass's duration is sampled while it is
    /// the last one).
    pub longest_pass: Duration,
    /// Corruptions the layer reported by the end of the cell: a benchmark
    /// writes nothing behind the store's back, so anything here is a bug.
    pub corruptions_found: u64,
}

/// One `scrub_now`.
#[derive(Clone, Debug)]
pub struct ScrubSample {
    pub pages_checked: u64,
    pub pages_stale: u64,
    pub duration: Duration,
    pub corrupt_pages: u64,
    pub unrepairable_pages: u64,
}

/// The background scrubber, watched on an idle store.
#[derive(Clone, Debug)]
pub struct BackgroundScrub {
    pub configuration: String,
    pub limit_bytes_per_sec: u64,
    pub watched: Duration,
    pub pages_scrubbed: u64,
    pub sweeps: u64,
    /// `scrub_bytes_per_sec_measured`: speed while scrubbing.
    pub measured_bytes_per_sec: u64,
    pub pages_covered: u64,
}

/// Runs one cell in `config.dir/<configuration>-<workload>-run<n>`.
pub fn measure(
    config: &Config,
    values: &ValuePool,
    configuration: Configuration,
    workload: Workload,
    run: usize,
    label: &str,
) -> Result<Measured> {
    let dir = config.dir.join(format!(
        "{}-{}-run{}",
        configuration.name(),
        workload,
        run + 1
    ));
    remove_if_present(&dir)?;
    let store = open(config, &dir, configuration, 0)?;
    let prefill_ops_per_sec = prefill(config, values, &store, label)?;
    // Start with nothing stale, and off the first pass's backlog.
    store.refresh_redundancy_now();
    let quiet_wait = wait_for_quiet(config, label);
    let before = store.integrity_stats();
    let bar = progress_bar(
        config.progress,
        Some(config.duration.as_millis() as u64),
        label,
    );
    let timed = timed_run(config, values, workload, &store, &bar, 0);
    bar.finish_and_clear();
    let timed = timed?;
    let coverage = match (before, store.integrity_stats()) {
        (Some(before), Some(after)) => {
            let patience = (configuration.period().unwrap_or_default() * 2 + DRAIN_PATIENCE)
                .min(MAX_DRAIN_WAIT);
            let spinner = progress_bar(config.progress, None, &format!("{label} drain"));
            let drain = drain(&store, timed.ended, patience);
            spinner.finish_and_clear();
            Some(Coverage {
                samples: timed.stale_ages.len(),
                max: timed.stale_ages.iter().copied().max().unwrap_or_default(),
                p99: percentile(&timed.stale_ages, 0.99),
                drain,
                max_pages_stale: timed.max_pages_stale,
                pages_covered: after.pages_covered,
                passes: after.passes - before.passes,
                pages_refreshed: after.pages_refreshed - before.pages_refreshed,
                longest_pass: timed.longest_pass,
                corruptions_found: 0,
            })
        }
        _ => None,
    };
    let scrub = match coverage {
        Some(_) => {
            store.refresh_redundancy_now();
            let report = store.scrub_now()?;
            Some(ScrubSample {
                pages_checked: report.pages_checked,
                pages_stale: report.pages_stale,
                duration: report.duration,
                corrupt_pages: report.corrupt_pages,
                unrepairable_pages: report.unrepairable_pages.len() as u64,
            })
        }
        None => None,
    };
    let coverage = coverage.map(|coverage| Coverage {
        corruptions_found: store
            .integrity_stats()
            .map_or(0, |stats| stats.corruptions_found),
        ..coverage
    });
    // The directory goes next: a clean close would only spend time syncing
    // (and refreshing) what is about to be deleted.
    store.crash();
    remove_if_present(&dir)?;
    Ok(Measured {
        prefill_ops_per_sec,
        reads: timed.reads,
        updates: timed.updates,
        elapsed: timed.elapsed,
        update_ns: timed.update_ns,
        read_ns: timed.read_ns,
        ops_per_sec_by_window: timed.ops_per_sec_by_window,
        moves_by_window: timed.moves_by_window,
        other_cpu: timed.other_cpu,
        quiet_wait,
        coverage,
        scrub,
    })
}

/// Watches the background scrubber on a fresh, prefilled, refreshed and
/// otherwise idle store with lazy `period` and scrubbing at the default rate.
pub fn background_scrub(
    config: &Config,
    values: &ValuePool,
    period: Duration,
) -> Result<BackgroundScrub> {
    let configuration = Configuration::Lazy(period);
    let dir = config.dir.join("background-scrub");
    remove_if_present(&dir)?;
    let limit_bytes_per_sec = engram_engine::IntegrityOptions::default().scrub_bytes_per_sec;
    let store = open(config, &dir, configuration, limit_bytes_per_sec)?;
    let label = format!("{} background scrub", configuration.name());
    prefill(config, values, &store, &label)?;
    store.refresh_redundancy_now();
    let before = stats(&store);
    let spinner = progress_bar(config.progress, None, &label);
    let started = Instant::now();
    std::thread::sleep(config.background_scrub);
    let watched = started.elapsed();
    spinner.finish_and_clear();
    let after = stats(&store);
    store.crash();
    remove_if_present(&dir)?;
    Ok(BackgroundScrub {
        configuration: configuration.name(),
        limit_bytes_per_sec,
        watched,
        pages_scrubbed: after.pages_scrubbed - before.pages_scrubbed,
        sweeps: after.scrub_sweeps - before.scrub_sweeps,
        measured_bytes_per_sec: after.scrub_bytes_per_sec_measured,
        pages_covered: after.pages_covered,
    })
}

fn stats(store: &Store) -> IntegrityStats {
    store
        .integrity_stats()
        .expect("a lazy store has integrity stats")
}

/// Engram as `systems::engram` opens it (emulated memory by default, sync
/// `never`, the flush asked for), with this configuration's integrity.
pub(super) fn open(
    config: &Config,
    dir: &std::path::Path,
    configuration: Configuration,
    scrub_bytes_per_sec: u64,
) -> Result<Store> {
    let options = Options {
        flush: Some(config.flush),
        integrity: configuration.options(config.stripe_pages, scrub_bytes_per_sec),
        ..Options::default()
    };
    Ok(Store::open(dir, options)?)
}

/// The store as the shared runner drives it, for the prefill phase.
struct Prefilling<'a>(&'a Store);

impl KvSystem for Prefilling<'_> {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.0.put(key, value)?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(key)?)
    }

    fn delete(&self, key: &[u8]) -> Result<bool> {
        Ok(self.0.delete(key)?)
    }

    fn key_count(&self) -> Result<Option<u64>> {
        Ok(Some(self.0.len()))
    }

    /// Never called: the cell abandons the store it owns itself.
    fn crash(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// Loads records `0..records` with the shared runner; returns its speed.
pub(super) fn prefill(
    config: &Config,
    values: &ValuePool,
    store: &Store,
    label: &str,
) -> Result<f64> {
    let workload = runner::Workload {
        records: config.records,
        ops: 0,
        threads: config.threads,
        key_bytes: config.key_bytes,
        distribution: config.distribution,
        values,
    };
    let bar = progress_bar(
        config.progress,
        Some(config.records),
        &format!("{label} prefill"),
    );
    let phase = runner::measure(&Prefilling(store), "engram", Op::Prefill, &workload, &bar);
    bar.finish_and_clear();
    let phase = phase?;
    if store.len() != config.records {
        return Err(BenchError::WrongKeyCount {
            system: "engram",
            when: "after the prefill",
            found: store.len(),
            expected: config.records,
        });
    }
    Ok(phase.ops_per_sec())
}

/// What the timed run measured.
pub(super) struct Timed {
    pub reads: u64,
    pub updates: u64,
    pub elapsed: Duration,
    /// When the last client stopped.
    ended: Instant,
    update_ns: Histogram<u64>,
    read_ns: Histogram<u64>,
    ops_per_sec_by_window: Vec<f64>,
    moves_by_window: Vec<u64>,
    other_cpu: Option<f64>,
    stale_ages: Vec<Duration>,
    max_pages_stale: u64,
    longest_pass: Duration,
}

/// One client thread's share.
struct Client {
    began: Instant,
    ended: Instant,
    reads: u64,
    updates: u64,
    update_ns: Histogram<u64>,
    read_ns: Histogram<u64>,
}

/// What the sampler (this thread) saw.
#[derive(Default)]
struct Sampled {
    stale_ages: Vec<Duration>,
    max_pages_stale: u64,
    longest_pass: Duration,
    ops_per_sec_by_window: Vec<f64>,
    moves_by_window: Vec<u64>,
}

pub(super) fn timed_run(
    config: &Config,
    values: &ValuePool,
    workload: Workload,
    store: &Store,
    bar: &ProgressBar,
    seed: u64,
) -> Result<Timed> {
    let threads = config.threads;
    let start = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let done: Vec<CachePadded<AtomicU64>> = (0..threads)
        .map(|_| CachePadded::new(AtomicU64::new(0)))
        .collect();
    let (sampled, other_cpu, outcomes) = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..threads)
            .map(|thread| {
                let (start, stop, done) = (&start, &stop, &done[thread]);
                scope.spawn(move || {
                    let stream = Stream { thread, seed };
                    client(config, values, workload, store, stream, start, stop, done)
                })
            })
            .collect();
        start.wait();
        let cpu_before = CpuTimes::now();
        let sampled = sample(config, store, &stop, &done, bar);
        stop.store(true, Ordering::Relaxed);
        let other_cpu = cpu_before
            .zip(CpuTimes::now())
            .map(|(a, b)| b.others_share_since(&a));
        let outcomes: Vec<Result<Client>> = clients
            .into_iter()
            .map(|client| {
                client
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect();
        (sampled, other_cpu, outcomes)
    });
    let clients = outcomes.into_iter().collect::<Result<Vec<Client>>>()?;
    let began = clients.iter().map(|c| c.began).min().expect("threads >= 1");
    let ended = clients.iter().map(|c| c.ended).max().expect("threads >= 1");
    let mut update_ns = new_histogram();
    let mut read_ns = new_histogram();
    for c in &clients {
        update_ns
            .add(&c.update_ns)
            .expect("histograms made by new_histogram share bounds");
        read_ns
            .add(&c.read_ns)
            .expect("histograms made by new_histogram share bounds");
    }
    Ok(Timed {
        reads: clients.iter().map(|c| c.reads).sum(),
        updates: clients.iter().map(|c| c.updates).sum(),
        elapsed: ended - began,
        ended,
        update_ns,
        read_ns,
        ops_per_sec_by_window: sampled.ops_per_sec_by_window,
        moves_by_window: sampled.moves_by_window,
        other_cpu: other_cpu.flatten(),
        stale_ages: sampled.stale_ages,
        max_pages_stale: sampled.max_pages_stale,
        longest_pass: sampled.longest_pass,
    })
}

/// The sampler: until the run's time is up (or a client failed), every
/// [`SAMPLE_EVERY`] the integrity stats, every [`WINDOW`] the throughput
/// and compaction's moves.
fn sample(
    config: &Config,
    store: &Store,
    stop: &AtomicBool,
    done: &[CachePadded<AtomicU64>],
    bar: &ProgressBar,
) -> Sampled {
    let started = Instant::now();
    let deadline = started + config.duration;
    let total = || done.iter().map(|d| d.load(Ordering::Relaxed)).sum::<u64>();
    let mut sampled = Sampled::default();
    let moved = || store.stats().records_moved;
    let (mut window_started, mut window_ops, mut window_moved) = (started, 0, moved());
    let mut next = started;
    loop {
        next += SAMPLE_EVERY;
        let now = Instant::now();
        if now >= deadline || stop.load(Ordering::Relaxed) {
            return sampled;
        }
        std::thread::sleep(next.min(deadline).saturating_duration_since(now));
        if let Some(stats) = store.integrity_stats() {
            sampled.stale_ages.push(stats.oldest_stale_age);
            sampled.max_pages_stale = sampled.max_pages_stale.max(stats.pages_stale);
            sampled.longest_pass = sampled.longest_pass.max(stats.last_pass_duration);
        }
        let now = Instant::now();
        if now - window_started >= WINDOW {
            let ops = total();
            sampled
                .ops_per_sec_by_window
                .push((ops - window_ops) as f64 / (now - window_started).as_secs_f64());
            let moves = moved();
            sampled.moves_by_window.push(moves - window_moved);
            (window_started, window_ops, window_moved) = (now, ops, moves);
        }
        bar.set_position((now - started).as_millis() as u64);
    }
}

/// Which stretch of keys and coin flips a client draws: its thread's, in
/// timed run `seed` (0 for a cell's one run; the paired slices count up).
#[derive(Clone, Copy)]
struct Stream {
    thread: usize,
    seed: u64,
}

/// Streams of one timed run are seeded apart by less than this.
const SEEDS_PER_RUN: u64 = 1 << 20;

/// One client: operations until `stop`.
#[allow(clippy::too_many_arguments)]
fn client(
    config: &Config,
    values: &ValuePool,
    workload: Workload,
    store: &Store,
    stream: Stream,
    start: &Barrier,
    stop: &AtomicBool,
    done: &AtomicU64,
) -> Result<Client> {
    let offset = stream.seed * SEEDS_PER_RUN + stream.thread as u64;
    let mut chooser = KeyChooser::new(
        config.distribution,
        config.records,
        KEY_CHOICE_SEED + offset,
    );
    let mut coin = SmallRng::seed_from_u64(MIX_SEED + offset);
    let read_percent = workload.read_percent();
    let mut key = vec![0u8; config.key_bytes];
    let mut update_ns = new_histogram();
    let mut read_ns = new_histogram();
    let (mut reads, mut updates) = (0u64, 0u64);
    start.wait();
    let began = Instant::now();
    let outcome = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        let id = chooser.next_id();
        fill_key(id, &mut key);
        if coin.random_range(0..100) < read_percent {
            let began = Instant::now();
            let found = store.get(&key);
            read_ns.saturating_record(nanos(began.elapsed()));
            reads += 1;
            match found {
                Ok(Some(value)) if value.len() == config.value_bytes => {}
                Ok(_) => {
                    break Err(BenchError::LostWrite {
                        system: "engram",
                        op: Op::Get,
                        record: id,
                    })
                }
                Err(e) => break Err(e.into()),
            }
        } else {
            // Version 0 is what the prefill stored; every update differs.
            let value = values.value(id, updates + 1);
            let began = Instant::now();
            let put = store.put(&key, value);
            update_ns.saturating_record(nanos(began.elapsed()));
            updates += 1;
            if let Err(e) = put {
                break Err(e.into());
            }
        }
        if (reads + updates) % PUBLISH_EVERY == 0 {
            done.store(reads + updates, Ordering::Relaxed);
        }
    };
    let ended = Instant::now();
    if outcome.is_err() {
        // The others stop too, and the sampler with them.
        stop.store(true, Ordering::Relaxed);
    }
    outcome.map(|()| Client {
        began,
        ended,
        reads,
        updates,
        update_ns,
        read_ns,
    })
}

/// Polls until no page is stale; the time since `writes_ended`, or `None`
/// after `patience`.
fn drain(store: &Store, writes_ended: Instant, patience: Duration) -> Option<Duration> {
    loop {
        let stale = store.integrity_stats().map_or(0, |stats| stats.pages_stale);
        let waited = writes_ended.elapsed();
        if stale == 0 {
            return Some(waited);
        }
        if waited > patience {
            return None;
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
}

/// Waits until other processes used less than `config.quiet_share` of the
/// machine over [`QUIET_SPAN`], for at most `config.quiet_wait`; returns
/// how long it waited.
pub(super) fn wait_for_quiet(config: &Config, label: &str) -> Duration {
    let started = Instant::now();
    if config.quiet_wait.is_zero() {
        return Duration::ZERO;
    }
    let spinner = progress_bar(config.progress, None, &format!("{label} waits for quiet"));
    let mut earlier = CpuTimes::now();
    loop {
        std::thread::sleep(QUIET_SPAN);
        let now = CpuTimes::now();
        let share = earlier
            .as_ref()
            .zip(now.as_ref())
            .and_then(|(earlier, now)| now.others_share_since(earlier));
        // No /proc: nothing to wait for.
        if share.is_none_or(|share| share < config.quiet_share)
            || started.elapsed() >= config.quiet_wait
        {
            break;
        }
        earlier = now;
    }
    spinner.finish_and_clear();
    started.elapsed()
}

/// Nearest-rank percentile of `samples` (zero when there are none).
fn percentile(samples: &[Duration], quantile: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((quantile * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn nanos(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let ms = |n| Duration::from_millis(n);
        let samples: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&samples, 0.99), ms(99));
        assert_eq!(percentile(&samples, 1.0), ms(100));
        assert_eq!(percentile(&[ms(7)], 0.99), ms(7));
        assert_eq!(percentile(&[], 0.99), Duration::ZERO);
    }
}
