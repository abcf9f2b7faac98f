//! The `engram` command line.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use engram_bench::{Distribution, SystemKind};
use engram_engine::FlushInstruction;

#[derive(Parser)]
#[command(
    name = "engram",
    version,
    about = "Engram: a persistent-memory-native data store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks, each measured against its peers in the same run.
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Subcommand)]
enum Bench {
    /// Viper's micro-benchmarks: insert, get, update, delete and recovery,
    /// against RocksDB, LMDB (with --features peers) and a volatile baseline.
    Engine(EngineArgs),
}

#[derive(Args)]
struct EngineArgs {
    /// Records prefilled before the measured phases.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Operations per measured phase (default: half the records).
    #[arg(long)]
    ops: Option<u64>,
    /// Client threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Runs per system; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Peers to measure beside Engram (comma-separated: rocksdb, lmdb, volatile).
    #[arg(long, value_delimiter = ',')]
    peers: Option<Vec<SystemKind>>,
    /// Flush instruction Engram issues on each persist (clwb, clflushopt, none).
    #[arg(long, default_value = "none")]
    flush: FlushInstruction,
    #[arg(long, default_value_t = 16)]
    key_bytes: usize,
    #[arg(long, default_value_t = 200)]
    value_bytes: usize,
    /// Key choice for get and update (uniform or zipfian).
    #[arg(long, default_value = "uniform")]
    distribution: Distribution,
    /// Where the stores go (default: a temporary directory here, removed after).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// A small run for a demonstration: 200,000 records, one run.
    #[arg(long)]
    quick: bool,
    /// Write the JSON report to this file, or `-` for standard output.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Bench(Bench::Engine(args)) => bench_engine(args),
    }
}

fn bench_engine(args: EngineArgs) -> Result<()> {
    let records = if args.quick {
        args.records.min(200_000)
    } else {
        args.records
    };
    let runs = if args.quick { 1 } else { args.runs };
    let mut systems = vec![SystemKind::Engram];
    for peer in args.peers.unwrap_or_else(SystemKind::default_peers) {
        if !systems.contains(&peer) {
            systems.push(peer);
        }
    }
    let temporary = match &args.dir {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("engram-bench-")
                .tempdir_in(".")
                .context("creating a temporary directory for the benchmark stores")?,
        ),
    };
    let dir = args.dir.clone().unwrap_or_else(|| {
        temporary
            .as_ref()
            .expect("temporary dir")
            .path()
            .to_path_buf()
    });
    let config = engram_bench::Config {
        records,
        ops: args.ops.unwrap_or(records / 2).max(1),
        threads: args.threads,
        runs,
        systems,
        flush: args.flush,
        key_bytes: args.key_bytes,
        value_bytes: args.value_bytes,
        distribution: args.distribution,
        dir,
        progress: true,
    };
    let report = engram_bench::run(&config)?;
    let to_stdout = args.json.as_deref() == Some(std::path::Path::new("-"));
    if to_stdout {
        println!("{}", report.json());
        eprint!("{}", report.table());
    } else {
        print!("{}", report.table());
        if let Some(path) = &args.json {
            std::fs::write(path, report.json())
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}
