//! The `engram-bench` command line: the benchmarks, each measured against
//! its peers in the same run (`engram-bench engine`, `server`, `integrity`,
//! `tracker`, `timeline`). A binary of its own, beside `engram`, as Redis
//! ships redis-benchmark beside redis-server: the server does not link the
//! harness, its plotting or the peers it is measured against.

#![forbid(unsafe_code)]

use anyhow::Result;
use clap::{Parser, Subcommand};
use engram_bench::command::command_line;
use engram_bench::{engine, integrity, server, stream_pairs, timeline, tracker};

// The allocator `engram` runs with, so that what is measured in this process
// (the embedded stores, the in-process server of `timeline --target server`)
// allocates as the server does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Engine(engine::EngineBenchArgs),
    /// redis-benchmark against `engram serve` and redis-server in the same
    /// run, at matching durability (process, everysec, always against Redis
    /// AOF with appendfsync no, everysec, always).
    Server(server::ServerBenchArgs),
    /// What lazy redundancy costs: YCSB A, B and write-only with integrity
    /// off, lazy (1 s, 30 s) and inline, time to coverage, scrub speed.
    Integrity(integrity::IntegrityBenchArgs),
    /// Dirty-page tracking: Engram's software marks against uffd-wp
    /// async + PAGEMAP_SCAN, per workload and memory type, and the cost of
    /// each after a crash.
    Tracker(tracker::TrackerBenchArgs),
    /// The collections layer over time: throughput per 10 ms window and
    /// tail latency with background, no and stop-the-world checkpoints,
    /// YCSB A-F over collections and strings, recovery times.
    Timeline(timeline::TimelineBenchArgs),
    /// Stream consumers against one server: XREADGROUP of one entry, then
    /// XACK of the ID it returned, over many connections from one event
    /// loop (the pair redis-benchmark cannot run).
    StreamPairs(stream_pairs::StreamPairsArgs),
}

fn main() -> Result<()> {
    let command = command_line();
    match Cli::parse().command {
        Command::Engine(args) => engine::cli(args, command)?,
        Command::Server(args) => server::cli(args, command)?,
        Command::Integrity(args) => integrity::cli(args, command)?,
        Command::Tracker(args) => tracker::cli(args, command)?,
        Command::Timeline(args) => timeline::cli(args, command)?,
        Command::StreamPairs(args) => stream_pairs::cli(args)?,
    }
    Ok(())
}
