//! `engram-bench engine`: Viper's micro-benchmarks (VLDB 2021, 5.3.1) over
//! Engram and its peers, in one process, one system at a time.
//!
//! One run of one system: open a fresh store, prefill it, measure insert,
//! get, update and delete (the `runner`), check the key count, then crash it
//! and time its recovery with 1 and with 2 recovery threads, each from its
//! own copy of the crash image, checking the key count after each. With several runs, the systems take turns run by run
//! (engram, peer, peer, engram, ...) so that drift in the machine (page
//! cache, frequency, other tenants) spreads over all of them instead of
//! landing on whichever ran last; each result is the median run.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use engram_engine::FlushInstruction;

use crate::command::{remove_if_present, ReportOutput, RunDir};
use crate::crash_image;
use crate::error::{at_least, at_most, BenchError, Result};
use crate::progress::progress_bar;
use crate::report::{Report, Sample};
use crate::runner::{self, Workload};
use crate::systems::{self, KvSystem, OpenSettings, SystemKind};
use crate::workload::{Distribution, Op, ValuePool, MIN_KEY_BYTES};

/// Recovery is timed with these thread counts, in this order.
pub const RECOVERY_THREADS: [usize; 2] = [1, 2];
/// More benchmark threads than this is a typo, not an experiment.
pub const MAX_THREADS: usize = 1024;
/// Runs per system; each keeps a few histograms' summaries, nothing more.
pub const MAX_RUNS: usize = 1000;
/// Seeds the value pool, so every run and every system stores the same bytes.
const VALUE_SEED: u64 = 0xBEEF;
/// `--quick`: a run for demonstrations and smoke tests, seconds not minutes.
const QUICK_RECORDS: u64 = 200_000;
const QUICK_RUNS: usize = 1;
/// Without `--quick`: a data set whose index does not fit in the CPU caches
/// (Viper prefills 100 M; pass `--records 100000000` to match it).
const DEFAULT_RECORDS: u64 = 1_000_000;
/// Without `--quick`: enough runs for a median to mean something.
const DEFAULT_RUNS: usize = 3;

/// The flags of `engram-bench engine`.
#[derive(Clone, Debug, clap::Args)]
pub struct EngineBenchArgs {
    /// Records prefilled before the measured phases [default: 1000000, or
    /// 200000 with --quick].
    #[arg(long)]
    pub records: Option<u64>,
    /// Operations per measured phase [default: half the records].
    #[arg(long)]
    pub ops: Option<u64>,
    /// Client threads [default: one per core].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Runs per system, each on a fresh store; the median is reported
    /// [default: 3, or 1 with --quick].
    #[arg(long)]
    pub runs: Option<usize>,
    /// Systems measured besides Engram, comma-separated: rocksdb, lmdb,
    /// volatile [default: all compiled in].
    #[arg(long, value_delimiter = ',')]
    pub peers: Option<Vec<SystemKind>>,
    /// Flush instruction Engram issues per persisted cache line (clwb,
    /// clflushopt or none).
    #[arg(long, default_value = "none")]
    pub flush: FlushInstruction,
    #[arg(long, default_value_t = 16)]
    pub key_bytes: usize,
    #[arg(long, default_value_t = 200)]
    pub value_bytes: usize,
    /// Which prefilled keys get and update touch: uniform or zipfian (s = 0.99).
    #[arg(long, default_value = "uniform")]
    pub distribution: Distribution,
    /// Where the stores go [default: a fresh temporary directory under the
    /// current one, removed at the end].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// A small run for demonstrations and smoke tests (200000 records, one
    /// run, unless --records or --runs say otherwise).
    #[arg(long)]
    pub quick: bool,
    /// Also write the results as JSON to this file, or to standard output
    /// with `-` (the table then goes to standard error).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Leave transparent huge pages on for this process, as the allocator
    /// asks for them. By default they are off, as `engram serve` runs
    /// (`disable-thp yes`, Redis's default): with them the volatile
    /// baseline's heap grows a zeroed 2 MiB page at a time, which made it
    /// several times slower on the development VM (BENCHMARKS.md).
    #[arg(long)]
    pub huge_pages: bool,
}

impl EngineBenchArgs {
    /// The run the flags ask for, defaults filled in; `dir` is left empty
    /// for [`cli`] to fill, and nothing is checked yet ([`Config::validate`]).
    pub fn config(&self, command: String) -> Config {
        let records = self.records.unwrap_or(if self.quick {
            QUICK_RECORDS
        } else {
            DEFAULT_RECORDS
        });
        Config {
            records,
            ops: self.ops.unwrap_or((records / 2).max(1)),
            threads: self.threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |cores| cores.get())
            }),
            runs: self
                .runs
                .unwrap_or(if self.quick { QUICK_RUNS } else { DEFAULT_RUNS }),
            peers: self.peers.clone().unwrap_or_else(SystemKind::default_peers),
            flush: self.flush,
            key_bytes: self.key_bytes,
            value_bytes: self.value_bytes,
            distribution: self.distribution,
            dir: PathBuf::new(),
            progress: std::io::stderr().is_terminal(),
            command,
        }
    }
}

/// `engram-bench engine`: checks the flags, runs the benchmark in a fresh
/// directory (or `--dir`), prints the table and writes the JSON.
pub fn cli(args: EngineBenchArgs, command: String) -> Result<()> {
    let mut config = args.config(command);
    // Refuse bad flags before anything is created on disk.
    config.validate()?;
    if !args.huge_pages {
        if let Err(e) = engram_memory::disable_huge_pages() {
            eprintln!("warning: cannot turn transparent huge pages off: {e}");
        }
    }
    let output = ReportOutput::create(args.json.as_deref())?;
    let run_dir = RunDir::new(args.dir.as_deref(), "engram-bench-")?;
    config.dir = run_dir.path().to_path_buf();
    let report = run(&config)?;
    output.write(&report.table(), || report.json())?;
    run_dir.close()?;
    Ok(())
}

#[derive(Clone, Debug)]
pub struct Config {
    /// Records prefilled before the measured phases.
    pub records: u64,
    /// Operations in each measured phase.
    pub ops: u64,
    pub threads: usize,
    pub runs: usize,
    /// The peers measured besides Engram (Engram is always measured first).
    pub peers: Vec<SystemKind>,
    pub flush: FlushInstruction,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub distribution: Distribution,
    /// Where stores are created, one subdirectory per system and run, each
    /// removed when its run ends.
    pub dir: PathBuf,
    /// Draw progress bars on standard error.
    pub progress: bool,
    /// The command line, quoted in the report.
    pub command: String,
}

impl Config {
    /// Engram first, then each named peer once.
    pub fn systems(&self) -> Vec<SystemKind> {
        let mut systems = vec![SystemKind::Engram];
        for &peer in &self.peers {
            if !systems.contains(&peer) {
                systems.push(peer);
            }
        }
        systems
    }

    pub fn validate(&self) -> Result<()> {
        for system in self.systems() {
            if !system.compiled() {
                return Err(BenchError::PeerNotCompiled {
                    system: system.name(),
                });
            }
        }
        at_least("records", self.records, 1)?;
        at_least("ops", self.ops, 1)?;
        at_least("threads", self.threads as u64, 1)?;
        at_least("runs", self.runs as u64, 1)?;
        at_least("key-bytes", self.key_bytes as u64, MIN_KEY_BYTES as u64)?;
        at_least("value-bytes", self.value_bytes as u64, 1)?;
        at_most(
            "threads",
            self.threads as u64,
            MAX_THREADS as u64,
            "the benchmark's MAX_THREADS",
        )?;
        at_most(
            "runs",
            self.runs as u64,
            MAX_RUNS as u64,
            "the benchmark's MAX_RUNS",
        )?;
        for system in self.systems() {
            if let Some((max_key_bytes, whose)) = system.key_limit() {
                at_most("key-bytes", self.key_bytes as u64, max_key_bytes, whose)?;
            }
        }
        at_most(
            "value-bytes",
            self.value_bytes as u64,
            engram_engine::MAX_VALUE_BYTES as u64,
            "Engram's largest value",
        )?;
        // Records are numbered 0..records+ops; the numbers must not wrap.
        at_most(
            "ops",
            self.ops,
            u64::MAX - self.records,
            "records + ops must fit 64 bits",
        )?;
        Ok(())
    }
}

/// What one system's runs measured.
struct Samples {
    kind: SystemKind,
    /// Indexed like `Op::ALL`, one sample per run.
    phases: Vec<Vec<Sample>>,
    /// Indexed like `RECOVERY_THREADS`, one duration per run.
    recoveries: Vec<Vec<Duration>>,
}

pub fn run(config: &Config) -> Result<Report> {
    config.validate()?;
    std::fs::create_dir_all(&config.dir)
        .map_err(|e| BenchError::io("creating benchmark directory", &config.dir, e))?;
    let values = ValuePool::new(config.value_bytes, VALUE_SEED);
    let workload = Workload {
        records: config.records,
        ops: config.ops,
        threads: config.threads,
        key_bytes: config.key_bytes,
        distribution: config.distribution,
        values: &values,
    };
    let settings = OpenSettings {
        flush: config.flush,
        threads: config.threads,
    };
    let mut all_samples: Vec<Samples> = config
        .systems()
        .into_iter()
        .map(|kind| Samples {
            kind,
            phases: Op::ALL.iter().map(|_| Vec::new()).collect(),
            recoveries: RECOVERY_THREADS.iter().map(|_| Vec::new()).collect(),
        })
        .collect();
    for run in 0..config.runs {
        for samples in &mut all_samples {
            one_run(config, run, &workload, &settings, samples)?;
        }
    }
    let mut report = Report::new(config);
    for samples in &all_samples {
        for (op, runs) in Op::ALL.iter().zip(&samples.phases) {
            report.add_result(samples.kind, *op, config.threads, runs);
        }
        for (threads, runs) in RECOVERY_THREADS.iter().zip(&samples.recoveries) {
            if !runs.is_empty() {
                report.add_recovery(samples.kind, config.records, *threads, runs);
            }
        }
    }
    Ok(report)
}

fn one_run(
    config: &Config,
    run: usize,
    workload: &Workload,
    settings: &OpenSettings,
    samples: &mut Samples,
) -> Result<()> {
    let kind = samples.kind;
    let dir = config.dir.join(format!("{kind}-run{}", run + 1));
    remove_if_present(&dir)?;
    let system = systems::open(kind, &dir, settings)?;
    for (op, phases) in Op::ALL.iter().zip(&mut samples.phases) {
        let label = format!("{kind} {op} (run {}/{})", run + 1, config.runs);
        let bar = progress_bar(config.progress, Some(workload.total(*op)), &label);
        let phase = runner::measure(system.as_ref(), kind.name(), *op, workload, &bar)?;
        bar.finish_and_clear();
        phases.push(Sample::of(&phase));
    }
    check_key_count(
        system.as_ref(),
        kind,
        "after the delete phase",
        config.records,
    )?;
    if !kind.survives_crash() {
        drop(system);
        return Ok(remove_if_present(&dir)?);
    }
    system.crash()?;
    // One crash image per recovery: the store's own directory for the first,
    // a copy made before any recovery for each other (see `crash_image`).
    let images: Vec<PathBuf> = (0..RECOVERY_THREADS.len())
        .map(|i| match i {
            0 => dir.clone(),
            _ => dir.with_file_name(format!("{kind}-run{}-image{i}", run + 1)),
        })
        .collect();
    for image in &images[1..] {
        remove_if_present(image)?;
        crash_image::copy(&dir, image)?;
    }
    for ((threads, durations), image) in RECOVERY_THREADS
        .iter()
        .zip(&mut samples.recoveries)
        .zip(&images)
    {
        let label = format!("{kind} recovery, {threads} thread(s)");
        let spinner = progress_bar(config.progress, None, &label);
        let started = Instant::now();
        let recovered = systems::reopen(kind, image, settings, *threads)?;
        durations.push(started.elapsed());
        spinner.finish_and_clear();
        check_key_count(recovered.as_ref(), kind, "after recovery", config.records)?;
        drop(recovered);
        remove_if_present(image)?;
    }
    Ok(())
}

/// The store must hold exactly the prefilled records: inserts were all
/// deleted again, and recovery must bring back every acknowledged write.
fn check_key_count(
    system: &dyn KvSystem,
    kind: SystemKind,
    when: &'static str,
    expected: u64,
) -> Result<()> {
    match system.key_count()? {
        Some(found) if found != expected => Err(BenchError::WrongKeyCount {
            system: kind.name(),
            when,
            found,
            expected,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn tiny(dir: &Path) -> Config {
        Config {
            records: 2000,
            ops: 1000,
            threads: 2,
            runs: 1,
            peers: vec![SystemKind::Volatile],
            flush: FlushInstruction::None,
            key_bytes: 16,
            value_bytes: 200,
            distribution: Distribution::Uniform,
            dir: dir.to_path_buf(),
            progress: false,
            command: "test".into(),
        }
    }

    /// Engram is always measured, so this run measures Engram and the map.
    #[test]
    fn tiny_run_over_the_volatile_map_measures_every_op() {
        let dir = tempfile::tempdir().unwrap();
        let report = run(&tiny(dir.path())).unwrap();
        for system in ["engram", "volatile"] {
            let ops: Vec<&str> = report
                .results
                .iter()
                .filter(|r| r.system == system)
                .map(|r| r.op)
                .collect();
            assert_eq!(ops, ["prefill", "insert", "get", "update", "delete"]);
        }
        assert_eq!(report.results.len(), 2 * Op::ALL.len());
        for result in &report.results {
            assert!(result.ops_per_sec > 0.0, "{result:?}");
            assert!(result.p50_ns <= result.p99_ns, "{result:?}");
            assert!(result.p99_ns <= result.p999_ns, "{result:?}");
            assert_eq!(result.threads, 2);
        }
        // Recovery is timed for the persistent system only, once per count.
        let recovery: Vec<_> = report
            .recovery
            .iter()
            .map(|r| (r.system, r.threads, r.records))
            .collect();
        assert_eq!(recovery, [("engram", 1, 2000), ("engram", 2, 2000)]);
        // Every store directory was removed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn engram_comes_first_and_each_peer_once() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            peers: vec![
                SystemKind::Volatile,
                SystemKind::Engram,
                SystemKind::Volatile,
            ],
            ..tiny(dir.path())
        };
        assert_eq!(config.systems(), [SystemKind::Engram, SystemKind::Volatile]);
        let alone = Config {
            peers: vec![],
            ..tiny(dir.path())
        };
        assert_eq!(alone.systems(), [SystemKind::Engram]);
    }

    #[test]
    fn bad_configurations_are_refused_with_the_flag_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = tiny(dir.path());
        let refused = |config: Config| config.validate().unwrap_err().to_string();
        assert!(refused(Config {
            key_bytes: 4,
            ..good.clone()
        })
        .contains("--key-bytes must be at least 8"));
        assert!(refused(Config {
            threads: 0,
            ..good.clone()
        })
        .contains("--threads"));
        assert!(refused(Config {
            threads: MAX_THREADS + 1,
            ..good.clone()
        })
        .contains("--threads may be at most 1024"));
        assert!(refused(Config {
            records: 0,
            ..good.clone()
        })
        .contains("--records"));
        assert!(refused(Config {
            value_bytes: engram_engine::MAX_VALUE_BYTES + 1,
            ..good.clone()
        })
        .contains("--value-bytes"));
        assert!(refused(Config {
            key_bytes: engram_engine::MAX_KEY_BYTES + 1,
            ..good.clone()
        })
        .contains("Engram's longest key"));
        good.validate().unwrap();
    }

    #[cfg(not(feature = "peers"))]
    #[test]
    fn a_peer_not_compiled_in_names_the_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            peers: vec![SystemKind::Lmdb],
            ..tiny(dir.path())
        };
        let error = run(&config).unwrap_err().to_string();
        assert!(error.contains("lmdb is not compiled"), "{error}");
        assert!(error.contains("--features peers"), "{error}");
    }

    /// Each peer runs every phase and recovers from its crash (LMDB's key
    /// count is checked after each recovery; RocksDB cannot count exactly).
    #[cfg(feature = "peers")]
    #[test]
    fn tiny_run_over_the_peers_times_their_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            peers: vec![SystemKind::RocksDb, SystemKind::Lmdb],
            ..tiny(dir.path())
        };
        let report = run(&config).unwrap();
        assert_eq!(report.results.len(), 3 * Op::ALL.len());
        let recovered: Vec<_> = report
            .recovery
            .iter()
            .map(|r| (r.system, r.threads))
            .collect();
        assert_eq!(
            recovered,
            [
                ("engram", 1),
                ("engram", 2),
                ("rocksdb", 1),
                ("rocksdb", 2),
                ("lmdb", 1),
                ("lmdb", 2)
            ]
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[cfg(feature = "peers")]
    #[test]
    fn lmdb_refuses_keys_longer_than_it_stores() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            peers: vec![SystemKind::Lmdb],
            key_bytes: 512,
            ..tiny(dir.path())
        };
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("LMDB's longest key"), "{error}");
    }
}
