//! The `engram-bench` command line: the benchmarks, each measured against
//! its peers in the same run (`engram-bench engine`, `server`, `integrity`,
//! `tracker`, `timeline`). A binary of its own, beside `engram`, as Redis
//! ships redis-benchmark beside redis-server: the server does not link the
//! harness, its plotting or the peers it is measured against.

#![forbid(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use engram_bench::{Distribution, SystemKind};
use engram_engine::FlushInstruction;

// The allocator `engram` runs with, so that what is measured in this process
// (the embedded stores, the in-process server of `timeline --target server`)
// allocates as the server does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `--quick`: a run for demonstrations and smoke tests, seconds not minutes.
const QUICK_RECORDS: u64 = 200_000;
const QUICK_RUNS: usize = 1;
/// Without `--quick`: a data set whose index does not fit in the CPU caches
/// (Viper prefills 100 M; pass `--records 100000000` to match it).
const DEFAULT_RECORDS: u64 = 1_000_000;
/// Without `--quick`: enough runs for a median to mean something.
const DEFAULT_RUNS: usize = 3;

#[derive(Parser)]
#[command(
    name = "engram-bench",
    version,
    about = "Engram's benchmarks, each measured against its peers in the same run"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Viper's micro-benchmarks: insert, get, update, delete and recovery,
    /// against RocksDB and LMDB (built with --features peers) and a volatile
    /// baseline.
    Engine(EngineArgs),
    /// redis-benchmark against `engram serve` and redis-server in the same
    /// run, at matching durability (process, everysec, always against Redis
    /// AOF with appendfsync no, everysec, always).
    Server(engram_bench::server::ServerBenchArgs),
    /// What lazy redundancy costs: YCSB A, B and write-only with integrity
    /// off, lazy (1 s, 30 s) and inline, time to coverage, scrub speed.
    Integrity(engram_bench::integrity::IntegrityBenchArgs),
    /// Dirty-page tracking: Engram's software marks against uffd-wp async
    /// + PAGEMAP_SCAN, per workload and memory type, and the cost of each
    /// after a crash.
    Tracker(engram_bench::tracker::TrackerBenchArgs),
    /// The collections layer over time: throughput per 10 ms window and
    /// tail latency with background, no and stop-the-world checkpoints,
    /// YCSB A-F over collections and strings, recovery times.
    Timeline(engram_bench::timeline::TimelineBenchArgs),
}

#[derive(Args)]
struct EngineArgs {
    /// Records prefilled before the measured phases [default: 1000000, or
    /// 200000 with --quick].
    #[arg(long)]
    records: Option<u64>,
    /// Operations per measured phase [default: half the records].
    #[arg(long)]
    ops: Option<u64>,
    /// Client threads [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
    /// Runs per system, each on a fresh store; the median is reported
    /// [default: 3, or 1 with --quick].
    #[arg(long)]
    runs: Option<usize>,
    /// Systems measured besides Engram, comma-separated: rocksdb, lmdb,
    /// volatile [default: all compiled in].
    #[arg(long, value_delimiter = ',')]
    peers: Option<Vec<SystemKind>>,
    /// Flush instruction Engram issues per persisted cache line (clwb,
    /// clflushopt or none).
    #[arg(long, default_value = "none")]
    flush: FlushInstruction,
    #[arg(long, default_value_t = 16)]
    key_bytes: usize,
    #[arg(long, default_value_t = 200)]
    value_bytes: usize,
    /// Which prefilled keys get and update touch: uniform or zipfian (s = 0.99).
    #[arg(long, default_value = "uniform")]
    distribution: Distribution,
    /// Where the stores go [default: a fresh temporary directory under the
    /// current one, removed at the end].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// A small run for demonstrations and smoke tests (200000 records, one
    /// run, unless --records or --runs say otherwise).
    #[arg(long)]
    quick: bool,
    /// Also write the results as JSON to this file, or to standard output
    /// with `-` (the table then goes to standard error).
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Engine(args) => bench_engine(args),
        Command::Server(args) => Ok(engram_bench::server::cli(args, command_line())?),
        Command::Integrity(args) => Ok(engram_bench::integrity::cli(args, command_line())?),
        Command::Tracker(args) => Ok(engram_bench::tracker::cli(args, command_line())?),
        Command::Timeline(args) => Ok(engram_bench::timeline::cli(args, command_line())?),
    }
}

fn bench_engine(args: EngineArgs) -> Result<()> {
    let records = args.records.unwrap_or(if args.quick {
        QUICK_RECORDS
    } else {
        DEFAULT_RECORDS
    });
    let runs = args
        .runs
        .unwrap_or(if args.quick { QUICK_RUNS } else { DEFAULT_RUNS });
    let mut config = engram_bench::Config {
        records,
        ops: args.ops.unwrap_or((records / 2).max(1)),
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |cores| cores.get())),
        runs,
        peers: args.peers.unwrap_or_else(SystemKind::default_peers),
        flush: args.flush,
        key_bytes: args.key_bytes,
        value_bytes: args.value_bytes,
        distribution: args.distribution,
        dir: PathBuf::new(),
        progress: std::io::stderr().is_terminal(),
        command: command_line(),
    };
    // Refuse bad flags before anything is created on disk.
    config.validate()?;
    // Create the JSON file now, so a bad path fails before the run, not after.
    let json_to_stdout = args.json.as_deref() == Some(Path::new("-"));
    let json_file = match &args.json {
        Some(path) if !json_to_stdout => Some((
            std::fs::File::create(path)
                .with_context(|| format!("creating the JSON report {}", path.display()))?,
            path,
        )),
        _ => None,
    };
    // `temporary` is held to the end of this function: dropping it (also on
    // an early return with an error) removes the stores.
    let temporary = match &args.dir {
        Some(dir) => {
            config.dir = dir.clone();
            None
        }
        None => {
            let temporary = tempfile::Builder::new()
                .prefix("engram-bench-")
                .tempdir_in(".")
                .context("creating a temporary directory for the stores under the current one")?;
            config.dir = temporary.path().to_path_buf();
            Some(temporary)
        }
    };
    let report = engram_bench::run(&config).with_context(|| {
        format!(
            "running the engine benchmark (stores in {})",
            config.dir.display()
        )
    })?;
    if json_to_stdout {
        println!("{}", report.json());
        eprint!("{}", report.table());
    } else {
        print!("{}", report.table());
    }
    if let Some((mut file, path)) = json_file {
        writeln!(file, "{}", report.json())
            .with_context(|| format!("writing the JSON report {}", path.display()))?;
    }
    if let Some(temporary) = temporary {
        temporary
            .close()
            .with_context(|| format!("removing {}", config.dir.display()))?;
    }
    Ok(())
}

/// The command as typed, for the report (`engram-bench engine --quick`).
fn command_line() -> String {
    let mut words = std::env::args();
    let program = words
        .next()
        .map(|path| {
            Path::new(&path)
                .file_name()
                .map_or(path.clone(), |name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "engram-bench".into());
    std::iter::once(program)
        .chain(words)
        .collect::<Vec<_>>()
        .join(" ")
}
