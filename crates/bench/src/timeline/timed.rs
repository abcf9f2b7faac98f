//! The timed run every part shares: client threads running operations for
//! a fixed time, each latency recorded, each completion counted in its
//! 10 ms window, while a sampler thread samples the store every
//! millisecond.
//!
//! ## Threads
//!
//! The clients and the sampler are scoped threads; the clients own their
//! histograms and window counters (nothing shared is written per
//! operation but the client's own cache lines). They and this thread meet
//! at a barrier; the first to pass it fixes the run's origin, which every
//! window and checkpoint span is measured from. Each client then runs
//! operations until `stop`: set by this thread when the duration is up, or
//! by a client that failed (so the others stop too). The sampler calls the
//! part's sampling closure every [`SAMPLE_EVERY`] until `stop`; it has a
//! thread of its own so that a slow sample (a lock held by a checkpoint)
//! cannot make the run end late.
//! This thread keeps the time and advances the progress bar.
//!
//! ## One operation
//!
//! A client is a closure that does one operation and returns its kind and
//! the instant it began (read just before the store call, so choosing the
//! key is not counted). The harness reads the clock when it returns: the
//! latency goes into the kind's histogram, and the operation counts in the
//! window its end falls in. Only whole windows inside the duration are
//! reported.
//!
//! ## Coordinated omission
//!
//! A closed-loop client that stalls for 100 ms issues one slow operation,
//! not the 100 ms worth of operations a steady stream of requests would
//! have had waiting: its percentiles hide stalls (Gil Tene's "coordinated
//! omission"). Besides the latencies as measured (service times), each
//! histogram is also reported corrected: every operation slower than the
//! client's mean interval between operations is joined by the operations
//! that would have arrived meanwhile, waiting `latency - interval`,
//! `latency - 2 × interval`, ... ([`correct`], HdrHistogram's
//! `record_correct` with a bounded amount of work).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::error::{Result, TimelineError};
use crate::cpu_time::CpuTimes;
use crate::progress::progress_bar;
use crate::runner::new_histogram;

/// How often the sampler runs during a timed run.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(1);
/// Throughput is counted per window of this length.
pub const WINDOW: Duration = Duration::from_millis(10);
/// How often this thread checks the time and moves the progress bar.
const PROGRESS_EVERY: Duration = Duration::from_millis(10);
/// [`correct`] records at most this many synthetic values per recorded
/// value (grouping neighbours beyond it), so its work stays bounded
/// whatever the longest stall.
const MAX_CORRECTIONS_PER_VALUE: u64 = 10_000;

/// What one operation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A read of one record (HGET of one field, or every field).
    Read,
    /// A write of one field of an existing record.
    Update,
    /// A new record.
    Insert,
    /// A short range of records (YCSB E).
    Scan,
    /// A read and a write of one record, atomic over collections (YCSB F).
    ReadModifyWrite,
}

pub const KINDS: usize = 5;

impl Kind {
    pub const ALL: [Kind; KINDS] = [
        Kind::Read,
        Kind::Update,
        Kind::Insert,
        Kind::Scan,
        Kind::ReadModifyWrite,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Update => "update",
            Kind::Insert => "insert",
            Kind::Scan => "scan",
            Kind::ReadModifyWrite => "read-modify-write",
        }
    }

    /// Whether it logs (a writer waits for a stop-the-world checkpoint).
    pub fn writes(self) -> bool {
        !matches!(self, Kind::Read | Kind::Scan)
    }
}

/// What a timed run measured.
pub struct Measured {
    /// When the run began (the barrier), and the duration asked for.
    pub origin: Instant,
    pub duration: Duration,
    /// First client's start to last client's end.
    pub elapsed: Duration,
    pub counts: [u64; KINDS],
    /// Latencies as measured, in nanoseconds, per kind.
    pub latency_ns: [Histogram<u64>; KINDS],
    /// The same corrected for coordinated omission (module docs).
    pub corrected_ns: [Histogram<u64>; KINDS],
    /// Operations completed in each whole [`WINDOW`] of the duration, per
    /// kind.
    pub windows: [Vec<u64>; KINDS],
    /// Share of the machine's CPU time other processes used during the run
    /// (0 to 1), when /proc says.
    pub other_cpu: Option<f64>,
}

impl Measured {
    pub fn ops(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn ops_per_sec(&self) -> f64 {
        self.ops() as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Every kind's latencies together (`corrected`: the corrected ones).
    pub fn all(&self, corrected: bool) -> Histogram<u64> {
        let source = if corrected {
            &self.corrected_ns
        } else {
            &self.latency_ns
        };
        merge(source.iter())
    }

    /// The writers' latencies together.
    pub fn writes(&self, corrected: bool) -> Histogram<u64> {
        let source = if corrected {
            &self.corrected_ns
        } else {
            &self.latency_ns
        };
        merge(
            Kind::ALL
                .iter()
                .filter(|kind| kind.writes())
                .map(|kind| &source[kind.index()]),
        )
    }

    /// Operations of every kind per window.
    pub fn ops_by_window(&self) -> Vec<u64> {
        self.windows_of(|_| true)
    }

    /// Operations that log per window.
    pub fn writes_by_window(&self) -> Vec<u64> {
        self.windows_of(Kind::writes)
    }

    fn windows_of(&self, include: impl Fn(Kind) -> bool) -> Vec<u64> {
        let mut total = vec![0; self.windows[0].len()];
        for kind in Kind::ALL.into_iter().filter(|&kind| include(kind)) {
            for (sum, count) in total.iter_mut().zip(&self.windows[kind.index()]) {
                *sum += count;
            }
        }
        total
    }
}

fn merge<'a>(histograms: impl Iterator<Item = &'a Histogram<u64>>) -> Histogram<u64> {
    let mut all = new_histogram();
    for histogram in histograms {
        all.add(histogram)
            .expect("histograms made by new_histogram share bounds");
    }
    all
}

/// Whole windows in `duration`.
pub fn whole_windows(duration: Duration) -> usize {
    (duration.as_nanos() / WINDOW.as_nanos()) as usize
}

/// One client's share.
struct Client {
    began: Instant,
    ended: Instant,
    counts: [u64; KINDS],
    latency_ns: [Histogram<u64>; KINDS],
    windows: [Vec<u64>; KINDS],
}

/// Runs `threads` clients made by `make_client(thread)` (on their own
/// thread) for `duration`, calling `sample(origin)` every [`SAMPLE_EVERY`]
/// meanwhile (on a thread of its own), under a progress bar labelled
/// `label` (drawn when `progress`) that counts milliseconds.
pub fn run<F, C>(
    progress: bool,
    label: &str,
    threads: usize,
    duration: Duration,
    make_client: F,
    sample: &mut (dyn FnMut(Instant) + Send),
) -> Result<Measured>
where
    F: Fn(usize) -> C + Sync,
    C: FnMut() -> Result<(Kind, Instant)>,
{
    assert!(threads > 0, "a timed run needs a client");
    let bar = progress_bar(progress, Some(duration.as_millis() as u64), label);
    let windows = whole_windows(duration);
    // The clients, the sampler and this thread.
    let start = Barrier::new(threads + 2);
    let origin = OnceLock::new();
    let stop = AtomicBool::new(false);
    let (other_cpu, outcomes) = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..threads)
            .map(|thread| {
                let (start, origin, stop, make_client) = (&start, &origin, &stop, &make_client);
                scope.spawn(move || {
                    let client = make_client(thread);
                    start.wait();
                    let origin = *origin.get_or_init(Instant::now);
                    let outcome = drive(client, origin, windows, stop);
                    if outcome.is_err() {
                        // The others stop too, and the sampler with them.
                        stop.store(true, Ordering::Relaxed);
                    }
                    outcome
                })
            })
            .collect();
        let sampler = {
            let (start, origin, stop) = (&start, &origin, &stop);
            scope.spawn(move || {
                start.wait();
                let origin = *origin.get_or_init(Instant::now);
                let mut next = origin;
                while !stop.load(Ordering::Relaxed) {
                    next += SAMPLE_EVERY;
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                    sample(origin);
                }
            })
        };
        start.wait();
        let origin = *origin.get_or_init(Instant::now);
        let cpu_before = CpuTimes::now();
        let deadline = origin + duration;
        loop {
            let now = Instant::now();
            if now >= deadline || stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(PROGRESS_EVERY.min(deadline - now));
            bar.set_position((Instant::now() - origin).as_millis() as u64);
        }
        stop.store(true, Ordering::Relaxed);
        let other_cpu = cpu_before
            .zip(CpuTimes::now())
            .and_then(|(before, after)| after.others_share_since(&before));
        let outcomes: Vec<Result<Client>> = clients
            .into_iter()
            .map(|client| {
                client
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect();
        sampler
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (other_cpu, outcomes)
    });
    bar.finish_and_clear();
    let clients = outcomes.into_iter().collect::<Result<Vec<Client>>>()?;
    let origin = *origin.get().expect("set at the barrier");
    let began = clients.iter().map(|c| c.began).min().expect("threads > 0");
    let ended = clients.iter().map(|c| c.ended).max().expect("threads > 0");
    let mut measured = Measured {
        origin,
        duration,
        elapsed: ended - began,
        counts: [0; KINDS],
        latency_ns: std::array::from_fn(|_| new_histogram()),
        corrected_ns: std::array::from_fn(|_| new_histogram()),
        windows: std::array::from_fn(|_| vec![0; windows]),
        other_cpu,
    };
    for client in &clients {
        let ops: u64 = client.counts.iter().sum();
        // The client's mean interval between operations: the rate a steady
        // stream of requests would have arrived at.
        let interval_ns =
            ((client.ended - client.began).as_nanos() / u128::from(ops.max(1))) as u64;
        for kind in 0..KINDS {
            measured.counts[kind] += client.counts[kind];
            measured.latency_ns[kind]
                .add(&client.latency_ns[kind])
                .expect("histograms made by new_histogram share bounds");
            measured.corrected_ns[kind]
                .add(correct(&client.latency_ns[kind], interval_ns))
                .expect("histograms made by new_histogram share bounds");
            for (sum, count) in measured.windows[kind].iter_mut().zip(&client.windows[kind]) {
                *sum += count;
            }
        }
    }
    Ok(measured)
}

/// One client's loop until `stop`.
fn drive<C>(mut client: C, origin: Instant, windows: usize, stop: &AtomicBool) -> Result<Client>
where
    C: FnMut() -> Result<(Kind, Instant)>,
{
    let window_ns = WINDOW.as_nanos();
    let mut counts = [0u64; KINDS];
    let mut latency_ns: [Histogram<u64>; KINDS] = std::array::from_fn(|_| new_histogram());
    let mut window_counts: [Vec<u64>; KINDS] = std::array::from_fn(|_| vec![0; windows]);
    let began = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let (kind, op_began) = client()?;
        let ended = Instant::now();
        let kind = kind.index();
        counts[kind] += 1;
        latency_ns[kind].saturating_record(nanos(ended - op_began));
        let window = ((ended - origin).as_nanos() / window_ns) as usize;
        if let Some(count) = window_counts[kind].get_mut(window) {
            *count += 1;
        }
    }
    Ok(Client {
        began,
        ended: Instant::now(),
        counts,
        latency_ns,
        windows: window_counts,
    })
}

/// `histogram` corrected for coordinated omission at `interval_ns`: each
/// value `v` above the interval is joined by `v - interval`, `v - 2 ×
/// interval`, ... down to the interval, with the same count (what
/// HdrHistogram's `clone_correct` does), in at most
/// [`MAX_CORRECTIONS_PER_VALUE`] records per value: beyond that, runs of
/// neighbouring synthetic values are recorded as one at their middle.
pub fn correct(histogram: &Histogram<u64>, interval_ns: u64) -> Histogram<u64> {
    let mut corrected = new_histogram();
    corrected
        .add(histogram)
        .expect("histograms made by new_histogram share bounds");
    if interval_ns == 0 {
        return corrected;
    }
    for value in histogram.iter_recorded() {
        let (latency, count) = (value.value_iterated_to(), value.count_at_value());
        if latency <= interval_ns {
            continue;
        }
        // Synthetic values latency - k × interval for k in 1..=missing.
        let missing = (latency - interval_ns) / interval_ns;
        let group = missing.div_ceil(MAX_CORRECTIONS_PER_VALUE).max(1);
        let mut k = 1;
        while k <= missing {
            let members = group.min(missing - k + 1);
            let middle = latency - (k + (members - 1) / 2) * interval_ns;
            corrected.saturating_record_n(middle, count * members);
            k += members;
        }
    }
    corrected
}

pub fn nanos(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

/// Asks a client to stop with `error` (a helper for client closures).
pub fn lost(store: &'static str, what: String) -> TimelineError {
    TimelineError::LostWrite { store, what }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What HdrHistogram's own correction gives, when it is cheap enough.
    #[test]
    fn correction_matches_hdrhistogram_for_short_stalls() {
        let mut histogram = new_histogram();
        for latency in [100, 250, 900, 5_000, 47_000] {
            histogram.record_n(latency, 3).unwrap();
        }
        let ours = correct(&histogram, 200);
        let theirs = histogram.clone_correct(200);
        assert_eq!(ours.len(), theirs.len());
        for quantile in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                ours.value_at_quantile(quantile),
                theirs.value_at_quantile(quantile),
                "q{quantile}"
            );
        }
    }

    #[test]
    fn correction_of_a_long_stall_is_bounded_and_close() {
        let mut histogram = new_histogram();
        histogram.record_n(1_000, 1_000_000).unwrap();
        // One stall of 10 s with a 1 µs interval: ten million synthetic
        // operations, recorded in 10,000 groups.
        histogram.record(10_000_000_000).unwrap();
        let corrected = correct(&histogram, 1_000);
        let synthetic = (corrected.len() - histogram.len()) as f64;
        assert!((synthetic / 1e7 - 1.0).abs() < 0.002, "{synthetic}");
        // The synthetic values spread evenly below the stall: the median
        // operation is the one 4.5 million synthetic ones above the
        // million fast ones.
        let median = corrected.value_at_quantile(0.5) as f64;
        let expected = (corrected.len() as f64 / 2.0 - 1e6) * 1_000.0;
        assert!(
            (median / expected - 1.0).abs() < 0.01,
            "{median} vs {expected}"
        );
        assert_eq!(correct(&histogram, 0).len(), histogram.len());
    }

    #[test]
    fn windows_are_whole() {
        assert_eq!(whole_windows(Duration::from_millis(1000)), 100);
        assert_eq!(whole_windows(Duration::from_millis(1009)), 100);
        assert_eq!(whole_windows(Duration::from_millis(5)), 0);
    }

    #[test]
    fn a_run_counts_every_operation_in_its_window() {
        let samples = std::sync::atomic::AtomicU64::new(0);
        let measured = run(
            false,
            "test",
            2,
            Duration::from_millis(200),
            |thread| {
                let mut n = 0u64;
                move || {
                    n += 1;
                    let began = Instant::now();
                    std::thread::sleep(Duration::from_micros(200));
                    let kind = if (n + thread as u64) % 2 == 1 {
                        Kind::Update
                    } else {
                        Kind::Read
                    };
                    Ok((kind, began))
                }
            },
            &mut |_| {
                samples.fetch_add(1, Ordering::Relaxed);
            },
        )
        .unwrap();
        let samples = samples.into_inner();
        assert!(samples > 50, "{samples} samples in 200 ms");
        assert_eq!(measured.windows[0].len(), 20);
        let in_windows: u64 = measured.ops_by_window().iter().sum();
        assert!(in_windows > 0 && in_windows <= measured.ops());
        assert!(measured.counts[Kind::Read.index()] > 0);
        assert!(measured.counts[Kind::Update.index()] > 0);
        assert_eq!(measured.counts[Kind::Scan.index()], 0);
        assert!(measured.all(false).min() >= 200_000);
        assert!(measured.all(true).len() >= measured.all(false).len());
        assert_eq!(
            measured.writes(false).len(),
            measured.counts[Kind::Update.index()]
        );
    }

    #[test]
    fn a_failing_client_stops_the_run() {
        let began = Instant::now();
        let outcome = run(
            false,
            "test",
            2,
            Duration::from_secs(30),
            |thread| {
                move || {
                    if thread == 1 {
                        return Err(lost("test", "gone".into()));
                    }
                    Ok((Kind::Read, Instant::now()))
                }
            },
            &mut |_| {},
        );
        assert!(matches!(outcome, Err(TimelineError::LostWrite { .. })));
        assert!(began.elapsed() < Duration::from_secs(10));
    }
}
