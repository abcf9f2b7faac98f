//! `engram-bench server`: redis-benchmark against `engram serve` and
//! against `redis-server`, in the same run, at matching durability.
//!
//! | durability | Engram                         | Redis                                  |
//! |------------|--------------------------------|----------------------------------------|
//! | process    | `serve --durability process`   | `appendonly yes`, `appendfsync no`     |
//! | everysec   | `serve --durability everysec`  | `appendonly yes`, `appendfsync everysec` |
//! | always     | `serve --durability always`    | `appendonly yes`, `appendfsync always` |
//!
//! Per durability level and run, a fresh Engram and a fresh Redis are
//! started side by side (each on a free port, with its own data directory
//! and log); then for each pipeline depth the same redis-benchmark command
//! runs against one and then the other. Who goes first alternates from
//! pipeline to pipeline, run to run and level to level, and the file systems
//! are synced before each measurement, so that neither server pays for the
//! other's write-back or profits from going first. The servers are stopped
//! with SIGTERM after the run.
//!
//! Modules: [`peers`] (the server processes, and finding Redis's tools), [`redis_benchmark`] (running it, parsing `--csv`), [`report`]
//! (the table and the JSON).

mod error;
pub mod peers;
pub mod redis_benchmark;
pub mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use error::{Result, ServerBenchError};
pub use peers::System;
pub use redis_benchmark::{parse_csv, CsvRow, Invocation};
pub use report::Report;

use crate::command::{ReportOutput, RunDir};
use crate::machine::Machine;
use peers::Peer;
use report::{Pairing, PipelineRequests, ReportConfig};

/// Requests per test with `--quick`: a smoke test, seconds in all.
pub const QUICK_REQUESTS: u64 = 20_000;
/// Requests per test without pipelining: a few seconds per test.
pub const DEFAULT_REQUESTS: u64 = 200_000;
/// Requests per test when pipelining, which is several times faster.
pub const DEFAULT_PIPELINED_REQUESTS: u64 = 1_000_000;
/// Both servers' default `maxclients`: more clients would be refused.
pub const MAX_CLIENTS: u32 = 10_000;
pub const MAX_RUNS: usize = 1000;

/// A durability level, named as `engram serve --durability` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Durability {
    /// A write survives a crash of the server process once acknowledged;
    /// Redis: `appendfsync no`.
    Process,
    /// Power-fail durable within about a second; Redis: `appendfsync everysec`.
    Everysec,
    /// Power-fail durable before the reply; Redis: `appendfsync always`.
    Always,
}

impl Durability {
    pub const ALL: [Durability; 3] = [
        Durability::Process,
        Durability::Everysec,
        Durability::Always,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Durability::Process => "process",
            Durability::Everysec => "everysec",
            Durability::Always => "always",
        }
    }

    /// Redis's `appendfsync` setting for the same guarantee.
    pub fn appendfsync(self) -> &'static str {
        match self {
            Durability::Process => "no",
            Durability::Everysec => "everysec",
            Durability::Always => "always",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(name: &str) -> std::result::Result<Self, String> {
        Durability::ALL
            .into_iter()
            .find(|durability| durability.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                format!("unknown durability '{name}' (expected process, everysec or always)")
            })
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The flags of `engram-bench server`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServerBenchArgs {
    /// Durability levels to compare, comma-separated: process (against Redis
    /// appendfsync no), everysec, always.
    #[arg(long, value_delimiter = ',', default_value = "process,everysec,always")]
    pub durability: Vec<Durability>,
    /// Pipeline depths (redis-benchmark -P), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub pipelines: Vec<u32>,
    /// redis-benchmark tests (-t), comma-separated; they run in
    /// redis-benchmark's order, SET before GET.
    #[arg(long, value_delimiter = ',', default_value = "set,get,incr,mset")]
    pub tests: Vec<String>,
    /// Parallel connections (redis-benchmark -c).
    #[arg(long, default_value_t = 50)]
    pub clients: u32,
    /// Value size in bytes (redis-benchmark -d).
    #[arg(long, default_value_t = 200)]
    pub value_bytes: usize,
    /// Random keys drawn from this many (redis-benchmark -r).
    #[arg(long, default_value_t = 1_000_000)]
    pub keyspace: u64,
    /// Requests per test (redis-benchmark -n) [default: 200000 without
    /// pipelining, 1000000 with; 20000 with --quick].
    #[arg(long)]
    pub requests: Option<u64>,
    /// Runs per durability level, each on fresh servers; the median is
    /// reported.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// A small run for demonstrations and smoke tests (20000 requests per
    /// test unless --requests says otherwise).
    #[arg(long)]
    pub quick: bool,
    /// Also write the results as JSON to this file, or to standard output
    /// with `-` (the table then goes to standard error).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Where the servers' data and logs go [default: a fresh temporary
    /// directory under the current one, removed at the end]. Data on tmpfs
    /// would make fsync free: keep it on the disk being measured.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the servers' data directories and logs.
    #[arg(long)]
    pub keep: bool,
    /// The engram binary run as `engram serve` [default: the `engram` beside
    /// this engram-bench, as cargo builds both into one target directory].
    #[arg(long)]
    pub engram_bin: Option<PathBuf>,
    /// redis-server to compare against (this default: found on PATH; not
    /// installed by the benchmark).
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// redis-benchmark to measure with (this default: found on PATH, from
    /// Debian's redis-tools; not installed by the benchmark).
    #[arg(long, default_value = "redis-benchmark")]
    pub redis_benchmark: PathBuf,
    /// Seconds one redis-benchmark invocation may take before it is killed.
    #[arg(long, default_value_t = 1800)]
    pub timeout: u64,
}

/// A validated `engram-bench server` run.
#[derive(Clone, Debug)]
pub struct Config {
    pub durabilities: Vec<Durability>,
    pub tests: Vec<String>,
    pub clients: u32,
    pub value_bytes: usize,
    pub keyspace: u64,
    /// One entry per pipeline depth, in the order given.
    pub requests: Vec<PipelineRequests>,
    pub runs: usize,
    pub engram_bin: PathBuf,
    pub redis_server: PathBuf,
    pub redis_benchmark: PathBuf,
    /// The most one redis-benchmark invocation may take.
    pub timeout: Duration,
    /// Keep each server's data directory after it stops.
    pub keep_data: bool,
    /// The command line, quoted in the report.
    pub command: String,
}

impl ServerBenchArgs {
    /// Checks the flags and fills in the defaults.
    pub fn config(&self, command: String) -> Result<Config> {
        let durabilities = dedup(&self.durability);
        if durabilities.is_empty() {
            return Err(ServerBenchError::flag("durability", "names no level"));
        }
        let pipelines = dedup(&self.pipelines);
        if pipelines.is_empty() || pipelines.contains(&0) {
            return Err(ServerBenchError::flag(
                "pipelines",
                "needs depths of at least 1",
            ));
        }
        let tests = dedup(
            &self
                .tests
                .iter()
                .map(|test| test.trim().to_ascii_lowercase())
                .collect::<Vec<_>>(),
        );
        if tests.is_empty() {
            return Err(ServerBenchError::flag("tests", "names no test"));
        }
        if let Some(bad) = tests.iter().find(|test| {
            test.is_empty() || !test.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }) {
            return Err(ServerBenchError::flag(
                "tests",
                format!("'{bad}' is not a redis-benchmark test name"),
            ));
        }
        if !(1..=MAX_CLIENTS).contains(&self.clients) {
            return Err(ServerBenchError::flag(
                "clients",
                format!(
                    "must be 1 to {MAX_CLIENTS} (both servers' maxclients), got {}",
                    self.clients
                ),
            ));
        }
        if self.value_bytes == 0 {
            return Err(ServerBenchError::flag("value-bytes", "must be at least 1"));
        }
        if self.keyspace == 0 {
            return Err(ServerBenchError::flag("keyspace", "must be at least 1"));
        }
        if self.requests == Some(0) {
            return Err(ServerBenchError::flag("requests", "must be at least 1"));
        }
        if !(1..=MAX_RUNS).contains(&self.runs) {
            return Err(ServerBenchError::flag(
                "runs",
                format!("must be 1 to {MAX_RUNS}, got {}", self.runs),
            ));
        }
        if self.timeout == 0 {
            return Err(ServerBenchError::flag("timeout", "must be at least 1"));
        }
        let requests = pipelines
            .iter()
            .map(|&pipeline| PipelineRequests {
                pipeline,
                requests: self.requests.unwrap_or(if self.quick {
                    QUICK_REQUESTS
                } else if pipeline == 1 {
                    DEFAULT_REQUESTS
                } else {
                    DEFAULT_PIPELINED_REQUESTS
                }),
            })
            .collect();
        let engram_bin = match &self.engram_bin {
            Some(path) => path.clone(),
            None => engram_beside_this_program()?,
        };
        Ok(Config {
            durabilities,
            tests,
            clients: self.clients,
            value_bytes: self.value_bytes,
            keyspace: self.keyspace,
            requests,
            runs: self.runs,
            engram_bin,
            redis_server: self.redis_server.clone(),
            redis_benchmark: self.redis_benchmark.clone(),
            timeout: Duration::from_secs(self.timeout),
            keep_data: self.keep,
            command,
        })
    }
}

/// The whole command: checks the flags, runs the benchmark in a fresh
/// directory (or `--dir`), prints the table and writes the JSON.
pub fn cli(args: ServerBenchArgs, command: String) -> Result<()> {
    let config = args.config(command)?;
    check_programs(&config)?;
    if args.engram_bin.is_none() && cfg!(debug_assertions) {
        eprintln!(
            "warning: this is a debug build, and so is likely the engram beside it, the server \
             measured; build with `cargo build --release -p engram -p engram-bench` for numbers \
             worth quoting"
        );
    }
    let output = ReportOutput::create(args.json.as_deref())?;
    let run_dir = RunDir::new(args.dir.as_deref(), "engram-bench-server-")?;
    // Absolute, so the servers (Redis changes into its --dir) and the
    // messages agree on where things are.
    let dir = std::fs::canonicalize(run_dir.path())
        .map_err(|e| ServerBenchError::io("resolving", run_dir.path(), e))?;
    let report = match run(&config, &dir) {
        Ok(report) => report,
        Err(e) => {
            // The logs say what went wrong: keep them (the data directories
            // are gone already unless --keep).
            run_dir.keep();
            eprintln!("the servers' logs are in {}", dir.display());
            return Err(e);
        }
    };
    output.write(&report.table(), || report.json())?;
    if !args.keep {
        run_dir.close()?;
    } else if run_dir.is_temporary() {
        run_dir.keep();
        eprintln!("data and logs kept in {}", dir.display());
    }
    Ok(())
}

/// Runs every durability level, `config.runs` times each, with data and
/// logs under `dir`.
pub fn run(config: &Config, dir: &Path) -> Result<Report> {
    check_programs(config)?;
    let mut report = Report::new(ReportConfig {
        command: config.command.clone(),
        durabilities: config.durabilities.iter().map(|d| d.name()).collect(),
        pipelines: config.requests.iter().map(|r| r.pipeline).collect(),
        tests: config.tests.clone(),
        clients: config.clients,
        value_bytes: config.value_bytes,
        keyspace: config.keyspace,
        runs: config.runs,
        requests: config.requests.clone(),
        engram_binary: config.engram_bin.display().to_string(),
        engram_version: peers::version(&config.engram_bin),
        redis_server_version: peers::version(&config.redis_server),
        redis_benchmark_version: peers::version(&config.redis_benchmark),
        pairings: config
            .durabilities
            .iter()
            .map(|&d| Pairing::of(d))
            .collect(),
        machine: Machine::this(),
    });
    for (level, &durability) in config.durabilities.iter().enumerate() {
        // Each run's rows, by system and pipeline depth.
        let mut runs: BTreeMap<(System, u32), Vec<Vec<CsvRow>>> = BTreeMap::new();
        for run in 1..=config.runs {
            let tag = format!("{durability}-run{run}");
            let engram = start(config, System::Engram, durability, dir, &tag)?;
            let redis = start(config, System::Redis, durability, dir, &tag)?;
            let mut peers = [engram, redis];
            for (depth, pipeline) in config.requests.iter().enumerate() {
                let invocation = Invocation {
                    program: config.redis_benchmark.clone(),
                    clients: config.clients,
                    value_bytes: config.value_bytes,
                    keyspace: config.keyspace,
                    requests: pipeline.requests,
                    tests: config.tests.clone(),
                    pipeline: pipeline.pipeline,
                };
                // Take turns going first.
                let order = if (level + run - 1 + depth) % 2 == 0 {
                    [0, 1]
                } else {
                    [1, 0]
                };
                for index in order {
                    let peer = &mut peers[index];
                    peers::sync_file_systems();
                    peer.check_alive("before redis-benchmark")?;
                    let started = Instant::now();
                    let rows = invocation.run(peer, config.timeout)?;
                    if let Some(missing) = config
                        .tests
                        .iter()
                        .find(|test| !redis_benchmark::covers(&rows, test))
                    {
                        return Err(ServerBenchError::flag(
                            "tests",
                            format!("redis-benchmark ran no test named '{missing}'"),
                        ));
                    }
                    eprintln!(
                        "[{tag}] {:<6} -P {:<3} {} ({:.1} s)",
                        peer.system.name(),
                        pipeline.pipeline,
                        rows.iter()
                            .map(|row| format!(
                                "{} {}/s",
                                row.test,
                                crate::table::thousands(row.ops_per_sec)
                            ))
                            .collect::<Vec<_>>()
                            .join(", "),
                        started.elapsed().as_secs_f64()
                    );
                    runs.entry((peer.system, pipeline.pipeline))
                        .or_default()
                        .push(rows);
                }
            }
            for peer in peers {
                report.add_key_count(peer.system, durability, run, peer.key_count());
                peer.stop()?;
            }
        }
        for pipeline in &config.requests {
            let key = |system| (system, pipeline.pipeline);
            // The tests in the order redis-benchmark ran them.
            let tests: Vec<String> = runs
                .get(&key(System::Engram))
                .and_then(|runs| runs.first())
                .map(|rows| rows.iter().map(|row| row.test.clone()).collect())
                .unwrap_or_default();
            for test in dedup(&tests) {
                for system in System::BOTH {
                    let samples: Vec<CsvRow> = runs
                        .get(&key(system))
                        .into_iter()
                        .flatten()
                        .filter_map(|rows| rows.iter().find(|row| row.test == test).cloned())
                        .collect();
                    if !samples.is_empty() {
                        report.add_result(
                            system,
                            durability,
                            pipeline.pipeline,
                            pipeline.requests,
                            &samples,
                        );
                    }
                }
            }
        }
    }
    Ok(report)
}

/// Where `engram` is when nobody says: in the directory of this program,
/// where `cargo build -p engram -p engram-bench` puts both (and where an
/// installation puts both, as Redis's puts redis-benchmark beside
/// redis-server).
pub fn engram_beside_this_program() -> Result<PathBuf> {
    let this = std::env::current_exe()
        .map_err(|e| ServerBenchError::io("finding this executable", "engram-bench", e))?;
    Ok(this.with_file_name("engram"))
}

/// Makes sure the three programs can be run (see
/// [`peers::check_redis_tools`]).
pub fn check_programs(config: &Config) -> Result<()> {
    peers::check_redis_tools(&config.redis_server, &config.redis_benchmark)?;
    if peers::find_program(&config.engram_bin).is_none() {
        return Err(ServerBenchError::flag(
            "engram-bin",
            format!(
                "{} does not exist; build it beside engram-bench (`cargo build --release -p \
                 engram -p engram-bench`) or name another",
                config.engram_bin.display()
            ),
        ));
    }
    Ok(())
}

/// Starts one server for one run, on a free port, with its data in
/// `dir/<system>-<tag>` and its log in `dir/<system>-<tag>.log`.
fn start(
    config: &Config,
    system: System,
    durability: Durability,
    dir: &Path,
    tag: &str,
) -> Result<Peer> {
    let port = peers::free_port()?;
    let data = dir.join(format!("{}-{tag}", system.name()));
    let log = dir.join(format!("{}-{tag}.log", system.name()));
    let (program, args) = match system {
        System::Engram => (
            &config.engram_bin,
            peers::engram_args(port, &data, durability),
        ),
        System::Redis => (
            &config.redis_server,
            peers::redis_args(port, &data, durability),
        ),
    };
    eprintln!(
        "[{tag}] starting {} {} (log {})",
        program.display(),
        args.iter()
            .map(|arg| if arg.is_empty() { "\"\"" } else { arg })
            .collect::<Vec<_>>()
            .join(" "),
        log.display()
    );
    Peer::start(system, program, &args, port, data, log, config.keep_data)
}

/// The distinct values, first occurrence first.
fn dedup<T: Clone + PartialEq>(values: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(values.len());
    for value in values {
        if !out.contains(value) {
            out.push(value.clone());
        }
    }
    out
}
