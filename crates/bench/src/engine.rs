//! `engram bench engine`: Viper's micro-benchmarks over every system.

use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use engram_engine::FlushInstruction;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::systems::{self, EngramSettings, KvSystem, SystemKind};
use crate::workload::{fill_key, slice, value, Distribution, KeyChooser};

/// The measured operations, in the order they run on one store.
pub const OPS: [&str; 5] = ["prefill", "insert", "get", "update", "delete"];
/// Recovery is timed with these thread counts.
pub const RECOVERY_THREADS: [usize; 2] = [1, 2];
/// Progress bars advance in steps of this many operations per thread.
const PROGRESS_STEP: u64 = 4096;
/// Latencies above a minute are clamped (HdrHistogram needs a bound).
const MAX_LATENCY_NS: u64 = 60_000_000_000;

#[derive(Clone, Debug)]
pub struct Config {
    pub records: u64,
    /// Operations per measured phase.
    pub ops: u64,
    pub threads: usize,
    pub runs: usize,
    /// Engram first, then the peers.
    pub systems: Vec<SystemKind>,
    pub flush: FlushInstruction,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub distribution: Distribution,
    /// Where stores are created (one subdirectory per system and run).
    pub dir: PathBuf,
    pub progress: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct OpResult {
    pub system: &'static str,
    pub op: &'static str,
    pub threads: usize,
    /// Median over the runs.
    pub ops_per_sec: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// Every run's throughput, to show the spread.
    pub runs_ops_per_sec: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RecoveryResult {
    pub system: &'static str,
    pub records: u64,
    pub threads: usize,
    /// Median over the runs.
    pub seconds: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConfigSummary {
    pub records: u64,
    pub ops: u64,
    pub threads: usize,
    pub runs: usize,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub distribution: String,
    pub flush: String,
    pub cores: usize,
    pub kernel: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: ConfigSummary,
    pub results: Vec<OpResult>,
    pub recovery: Vec<RecoveryResult>,
}

struct Phase {
    ops_per_sec: f64,
    histogram: Histogram<u64>,
}

pub fn run(config: &Config) -> Result<Report> {
    if config.key_bytes < 8 {
        bail!("--key-bytes must be at least 8 so that every record has a distinct key");
    }
    if config.records == 0 || config.ops == 0 || config.threads == 0 || config.runs == 0 {
        bail!("--records, --ops, --threads and --runs must all be at least 1");
    }
    if config.ops > config.records {
        bail!(
            "--ops ({}) may not exceed --records ({})",
            config.ops,
            config.records
        );
    }
    for kind in &config.systems {
        if !kind.compiled() {
            bail!(
                "{} is not compiled into this binary; rebuild with `cargo build --release -p engram --features peers`",
                kind.name()
            );
        }
    }
    std::fs::create_dir_all(&config.dir)
        .with_context(|| format!("creating {}", config.dir.display()))?;
    let settings = EngramSettings {
        flush: config.flush,
    };
    let mut results = Vec::new();
    let mut recovery = Vec::new();
    for &kind in &config.systems {
        let mut phases: Vec<Vec<Phase>> = OPS.iter().map(|_| Vec::new()).collect();
        let mut recoveries: Vec<Vec<f64>> = RECOVERY_THREADS.iter().map(|_| Vec::new()).collect();
        for run in 0..config.runs {
            let dir = config.dir.join(format!("{}-{run}", kind.name()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            let mut system = systems::open(kind, &dir, &settings)?;
            for (i, op) in OPS.iter().enumerate() {
                let label = format!("{} {op} (run {}/{})", kind.name(), run + 1, config.runs);
                phases[i].push(measure(config, system.as_ref(), op, &label)?);
            }
            if kind != SystemKind::Volatile {
                for (i, threads) in RECOVERY_THREADS.iter().enumerate() {
                    let (reopened, took) = system.crash_and_reopen(*threads)?;
                    system = reopened;
                    recoveries[i].push(took.as_secs_f64());
                }
            }
            drop(system);
            let _ = std::fs::remove_dir_all(&dir);
        }
        for (i, op) in OPS.iter().enumerate() {
            results.push(summarise(kind, op, config.threads, &mut phases[i]));
        }
        for (i, threads) in RECOVERY_THREADS.iter().enumerate() {
            if !recoveries[i].is_empty() {
                recovery.push(RecoveryResult {
                    system: kind.name(),
                    records: config.records,
                    threads: *threads,
                    seconds: median(&mut recoveries[i]),
                });
            }
        }
    }
    Ok(Report {
        config: ConfigSummary {
            records: config.records,
            ops: config.ops,
            threads: config.threads,
            runs: config.runs,
            key_bytes: config.key_bytes,
            value_bytes: config.value_bytes,
            distribution: config.distribution.to_string(),
            flush: config.flush.name().into(),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        },
        results,
        recovery,
    })
}

/// Runs one phase on `config.threads` threads; each operation is timed.
fn measure(config: &Config, system: &dyn KvSystem, op: &str, label: &str) -> Result<Phase> {
    let total = if op == "prefill" {
        config.records
    } else {
        config.ops
    };
    let bar = progress_bar(config.progress, total, label);
    let threads = config.threads;
    let start = Barrier::new(threads + 1);
    let (elapsed, histograms) =
        std::thread::scope(|scope| -> Result<(Duration, Vec<Histogram<u64>>)> {
            let workers: Vec<_> = (0..threads)
                .map(|thread| {
                    let (start, bar) = (&start, &bar);
                    scope.spawn(move || worker(config, system, op, thread, start, bar))
                })
                .collect();
            start.wait();
            let began = Instant::now();
            let histograms = workers
                .into_iter()
                .map(|w| w.join().expect("benchmark thread panicked"))
                .collect::<Result<Vec<_>>>()?;
            Ok((began.elapsed(), histograms))
        })?;
    bar.finish_and_clear();
    let mut histogram = new_histogram();
    for h in &histograms {
        histogram.add(h).expect("histograms share bounds");
    }
    Ok(Phase {
        ops_per_sec: total as f64 / elapsed.as_secs_f64(),
        histogram,
    })
}

fn worker(
    config: &Config,
    system: &dyn KvSystem,
    op: &str,
    thread: usize,
    start: &Barrier,
    bar: &ProgressBar,
) -> Result<Histogram<u64>> {
    let mut histogram = new_histogram();
    let mut key = vec![0u8; config.key_bytes];
    let (first_value, second_value) = (value(config.value_bytes, 0), value(config.value_bytes, 1));
    let threads = config.threads;
    let fresh = slice(config.records, config.ops, thread, threads);
    let mut chooser = KeyChooser::new(config.distribution, config.records, 0x5EED + thread as u64);
    let count = match op {
        "prefill" => slice(0, config.records, thread, threads).count() as u64,
        "insert" | "delete" => fresh.clone().count() as u64,
        _ => slice(0, config.ops, thread, threads).count() as u64,
    };
    // Deletes visit this thread's fresh keys in a scattered order.
    let stride = coprime_stride(count);
    start.wait();
    for i in 0..count {
        let id = match op {
            "prefill" => slice(0, config.records, thread, threads).start + i,
            "insert" => fresh.start + i,
            "delete" => fresh.start + (i * stride) % count,
            _ => chooser.next_id(),
        };
        fill_key(id, &mut key);
        let began = Instant::now();
        match op {
            "prefill" | "insert" => system.put(&key, &first_value)?,
            "update" => system.put(&key, &second_value)?,
            "delete" => system.delete(&key)?,
            "get" => {
                if system.get(&key)?.is_none() {
                    bail!("record {id} is missing: the system lost a write");
                }
            }
            other => bail!("unknown operation {other}"),
        }
        histogram.saturating_record(began.elapsed().as_nanos() as u64);
        if (i + 1) % PROGRESS_STEP == 0 {
            bar.inc(PROGRESS_STEP);
        }
    }
    Ok(histogram)
}

/// A stride that visits every index of `0..count` once (a prime that does
/// not divide `count`, or 1).
fn coprime_stride(count: u64) -> u64 {
    const PRIME: u64 = 1_000_003;
    if count > 1 && count % PRIME != 0 {
        PRIME % count.max(1)
    } else {
        1
    }
    .max(1)
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("histogram bounds")
}

fn progress_bar(enabled: bool, total: u64, label: &str) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{msg:<32} [{bar:30}] {pos}/{len} ({per_sec}, eta {eta})")
            .expect("progress template")
            .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    bar
}

fn summarise(kind: SystemKind, op: &'static str, threads: usize, phases: &mut [Phase]) -> OpResult {
    let runs_ops_per_sec: Vec<f64> = phases.iter().map(|p| p.ops_per_sec).collect();
    phases.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    let median_run = &phases[phases.len() / 2];
    OpResult {
        system: kind.name(),
        op,
        threads,
        ops_per_sec: median_run.ops_per_sec,
        p50_ns: median_run.histogram.value_at_quantile(0.50),
        p99_ns: median_run.histogram.value_at_quantile(0.99),
        p999_ns: median_run.histogram.value_at_quantile(0.999),
        runs_ops_per_sec,
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(dir: PathBuf) -> Config {
        Config {
            records: 2000,
            ops: 1000,
            threads: 2,
            runs: 1,
            systems: vec![SystemKind::Engram, SystemKind::Volatile],
            flush: FlushInstruction::None,
            key_bytes: 16,
            value_bytes: 200,
            distribution: Distribution::Uniform,
            dir,
            progress: false,
        }
    }

    #[test]
    fn tiny_run_measures_every_op_for_every_system() {
        let dir = tempfile::tempdir().unwrap();
        let report = run(&tiny(dir.path().to_path_buf())).unwrap();
        assert_eq!(report.results.len(), 2 * OPS.len());
        for result in &report.results {
            assert!(result.ops_per_sec > 0.0, "{result:?}");
            assert!(result.p50_ns <= result.p99_ns && result.p99_ns <= result.p999_ns);
        }
        // Recovery is timed for the persistent system only.
        assert_eq!(report.recovery.len(), RECOVERY_THREADS.len());
        assert!(report.recovery.iter().all(|r| r.system == "engram"));
    }

    #[test]
    fn json_has_the_documented_fields() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = tiny(dir.path().to_path_buf());
        config.systems = vec![SystemKind::Volatile];
        let report = run(&config).unwrap();
        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        let row = &json["results"][0];
        for field in [
            "system",
            "op",
            "threads",
            "ops_per_sec",
            "p50_ns",
            "p99_ns",
            "p999_ns",
        ] {
            assert!(!row[field].is_null(), "missing {field}");
        }
        assert!(json["recovery"].is_array());
        assert_eq!(json["config"]["records"], 2000);
    }

    #[test]
    fn bad_configurations_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = tiny(dir.path().to_path_buf());
        config.ops = config.records + 1;
        assert!(run(&config).unwrap_err().to_string().contains("--ops"));
        config.ops = 10;
        config.key_bytes = 4;
        assert!(run(&config)
            .unwrap_err()
            .to_string()
            .contains("--key-bytes"));
    }

    #[test]
    fn strides_visit_every_index_once() {
        for count in [1u64, 2, 7, 1000, 1_000_003, 2_000_006] {
            let stride = coprime_stride(count);
            if count <= 10_000 {
                let mut seen = vec![false; count as usize];
                for i in 0..count {
                    seen[((i * stride) % count) as usize] = true;
                }
                assert!(seen.iter().all(|s| *s), "count {count}");
            }
        }
    }
}
