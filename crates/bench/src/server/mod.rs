//! `engram-bench server`: redis-benchmark against `engram serve` and
//! against `redis-server`, in the same run, at matching durability.
//!
//! | durability | Engram                         | Redis                                  |
//! |------------|--------------------------------|----------------------------------------|
//! | process    | `serve --durability process`   | `appendonly yes`, `appendfsync no`     |
//! | everysec   | `serve --durability everysec`  | `appendonly yes`, `appendfsync everysec` |
//! | always     | `serve --durability always`    | `appendonly yes`, `appendfsync always` |
//!
//! At `always` a third server runs beside the two: Redis with
//! `appendfsync no` (the `process` pairing's), the ceiling issue 25
//! measures `always` against (`--skip-redis-no-fsync` leaves it out).
//!
//! The measurement is in rounds (`--runs`). Per durability level and round,
//! fresh servers are started side by side (each on a free port, with its
//! own data directory and log); then for each pipeline depth and test, the
//! same redis-benchmark command (one test per invocation) runs against each
//! server in turn, back to back. The order is Engram, Redis (, Redis without
//! fsync) in odd rounds and the reverse in even ones, and the file systems
//! are synced before each measurement, so that no server pays for
//! another's write-back or profits from its place. The tests run in
//! redis-benchmark's own order (GET after SET). The servers are stopped with
//! SIGTERM after each round; the median round is reported per cell.
//!
//! Around each redis-benchmark run, the server's CPU time (utime+stime from
//! /proc/PID/stat) is read just before and just after, and reported as CPU
//! seconds per million operations: what an operation costs the server,
//! whatever the client's speed. `--matrix` runs issue 25's acceptance
//! matrix.
//!
//! Modules: [`peers`] (the server processes, and finding Redis's tools),
//! [`redis_benchmark`] (running it, parsing `--csv`), [`report`] (the
//! tables and the JSON).

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
pub use report::{Report, Sample};

use crate::command::{ReportOutput, RunDir};
use crate::cpu_time;
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
/// Issue 25's matrix (`--matrix`): the tests, in redis-benchmark's order.
pub const MATRIX_TESTS: [&str; 8] = [
    "set", "get", "incr", "lpush", "sadd", "hset", "zadd", "mset",
];
/// `--matrix`'s pipeline depths.
pub const MATRIX_PIPELINES: [u32; 2] = [1, 16];
/// `--matrix`'s keyspace: small enough that most writes overwrite a key, as
/// in a real store.
pub const MATRIX_KEYSPACE: u64 = 100_000;
/// `--matrix`'s rounds: the issue asks for the median of at least 3.
pub const MATRIX_RUNS: usize = 3;
/// redis-benchmark's own order of its tests (`-t` does not change it), so
/// that running them one invocation each keeps GET after SET, as one
/// invocation of them all would.
const REDIS_BENCHMARK_ORDER: [&str; 21] = [
    "ping_inline",
    "ping_mbulk",
    "ping",
    "set",
    "get",
    "incr",
    "lpush",
    "rpush",
    "lpop",
    "rpop",
    "sadd",
    "hset",
    "spop",
    "zadd",
    "zpopmin",
    "lrange",
    "lrange_100",
    "lrange_300",
    "lrange_500",
    "lrange_600",
    "mset",
];

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
    /// Rounds per durability level, each on fresh servers, the order of the
    /// systems reversed every other round (round 1 Engram first, round 2
    /// Engram last, ...); the median is reported [default: 1; 3 with
    /// --matrix].
    #[arg(long)]
    pub runs: Option<usize>,
    /// Issue 25's acceptance matrix: tests set,get,incr,lpush,sadd,hset,
    /// zadd,mset at -P 1 and 16, 50 clients, 200-byte values, 100,000 keys,
    /// 3 rounds unless --runs says otherwise; at each --durability level.
    #[arg(long, conflicts_with_all = ["tests", "pipelines", "clients", "value_bytes", "keyspace"])]
    pub matrix: bool,
    /// Leave out the Redis without fsync (`appendfsync no`) that otherwise
    /// runs beside the other two at `always`, as the ceiling issue 25
    /// measures `always` against.
    #[arg(long)]
    pub skip_redis_no_fsync: bool,
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
    /// Run Redis without fsync beside the other two at `always`.
    pub redis_no_fsync: bool,
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

impl Config {
    /// The systems measured at `durability`, in round 1's order: Engram,
    /// Redis, and at `always` Redis without fsync (unless left out).
    pub fn systems(&self, durability: Durability) -> Vec<System> {
        let mut systems = vec![System::Engram, System::Redis];
        if durability == Durability::Always && self.redis_no_fsync {
            systems.push(System::RedisNoFsync);
        }
        systems
    }
}

/// The order of `systems` in round `round` (from 1): as given in odd
/// rounds, reversed in even ones, so that over the rounds each system goes
/// first as often as last and neither pays for or profits from its place
/// (a disk still writing back the other's data, a warmer or cooler CPU).
pub fn round_order(systems: &[System], round: usize) -> Vec<System> {
    let mut order = systems.to_vec();
    if round.is_multiple_of(2) {
        order.reverse();
    }
    order
}

/// `tests` in redis-benchmark's order; names it does not know keep theirs,
/// after the others.
pub fn in_redis_benchmark_order(tests: &[String]) -> Vec<String> {
    let rank = |test: &String| {
        REDIS_BENCHMARK_ORDER
            .iter()
            .position(|known| known == test)
            .unwrap_or(REDIS_BENCHMARK_ORDER.len())
    };
    let mut sorted = tests.to_vec();
    // Stable: unknown names stay in the order given.
    sorted.sort_by_key(rank);
    sorted
}

impl ServerBenchArgs {
    /// Checks the flags and fills in the defaults (`--matrix`'s where it is
    /// given: clap refuses the flags it sets beside it).
    pub fn config(&self, command: String) -> Result<Config> {
        let durabilities = dedup(&self.durability);
        if durabilities.is_empty() {
            return Err(ServerBenchError::flag("durability", "names no level"));
        }
        let matrix = self.matrix.then(|| ServerBenchArgs {
            tests: MATRIX_TESTS.iter().map(|test| test.to_string()).collect(),
            pipelines: MATRIX_PIPELINES.to_vec(),
            clients: 50,
            value_bytes: 200,
            keyspace: MATRIX_KEYSPACE,
            runs: Some(self.runs.unwrap_or(MATRIX_RUNS)),
            ..self.clone()
        });
        let args = matrix.as_ref().unwrap_or(self);
        args.checked(durabilities, command)
    }

    /// [`ServerBenchArgs::config`] once `--matrix` is applied.
    fn checked(&self, durabilities: Vec<Durability>, command: String) -> Result<Config> {
        let runs = self.runs.unwrap_or(1);
        let pipelines = dedup(&self.pipelines);
        if pipelines.is_empty() || pipelines.contains(&0) {
            return Err(ServerBenchError::flag(
                "pipelines",
                "needs depths of at least 1",
            ));
        }
        let tests = in_redis_benchmark_order(&dedup(
            &self
                .tests
                .iter()
                .map(|test| test.trim().to_ascii_lowercase())
                .collect::<Vec<_>>(),
        ));
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
        if !(1..=MAX_RUNS).contains(&runs) {
            return Err(ServerBenchError::flag(
                "runs",
                format!("must be 1 to {MAX_RUNS}, got {runs}"),
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
            runs,
            redis_no_fsync: !self.skip_redis_no_fsync,
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

/// Each system's samples at one durability level: by (system, pipeline
/// depth, test as redis-benchmark labels it), one per round.
type Samples = BTreeMap<(System, u32, String), Vec<Sample>>;

/// Runs every durability level, `config.runs` rounds each, with data and
/// logs under `dir`.
pub fn run(config: &Config, dir: &Path) -> Result<Report> {
    check_programs(config)?;
    let mut report = Report::new(report_config(config));
    for &durability in &config.durabilities {
        let mut samples = Samples::new();
        // The tests in the order redis-benchmark labelled them.
        let mut labels: Vec<String> = Vec::new();
        for round in 1..=config.runs {
            let measured = run_round(config, durability, round, dir, &mut report)?;
            for (system, pipeline, sample) in measured {
                if !labels.contains(&sample.row.test) {
                    labels.push(sample.row.test.clone());
                }
                samples
                    .entry((system, pipeline, sample.row.test.clone()))
                    .or_default()
                    .push(sample);
            }
        }
        add_results(&mut report, config, durability, &labels, &samples);
    }
    Ok(report)
}

/// What the report says of the run before any result is in.
fn report_config(config: &Config) -> ReportConfig {
    ReportConfig {
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
        cpu_ticks_per_second: cpu_time::ticks_per_second(),
        pairings: config
            .durabilities
            .iter()
            .map(|&d| Pairing::of(d, config.systems(d).contains(&System::RedisNoFsync)))
            .collect(),
        machine: Machine::this(),
    }
}

/// One round at `durability`: fresh servers, then for each pipeline depth
/// and test, the same redis-benchmark command against each server in the
/// round's order ([`round_order`]), back to back so that the machine is in
/// the same state for all; then the servers' key counts, and they stop.
fn run_round(
    config: &Config,
    durability: Durability,
    round: usize,
    dir: &Path,
    report: &mut Report,
) -> Result<Vec<(System, u32, Sample)>> {
    let tag = format!("{durability}-run{round}");
    let order = round_order(&config.systems(durability), round);
    let mut peers = order
        .iter()
        .map(|&system| start(config, system, durability, dir, &tag))
        .collect::<Result<Vec<Peer>>>()?;
    let mut measured = Vec::new();
    for pipeline in &config.requests {
        for test in &config.tests {
            for peer in &mut peers {
                let samples = measure(config, peer, *pipeline, test, &tag)?;
                measured.extend(
                    samples
                        .into_iter()
                        .map(|sample| (peer.system, pipeline.pipeline, sample)),
                );
            }
        }
    }
    for peer in peers {
        report.add_key_count(peer.system, durability, round, peer.key_count());
        peer.stop()?;
    }
    Ok(measured)
}

/// One redis-benchmark run of one test against `peer`, with the server's
/// CPU time read just before and just after it: a sample per row it prints
/// (one, except for tests such as `lrange` that print several, which share
/// the run's CPU per operation).
fn measure(
    config: &Config,
    peer: &mut Peer,
    pipeline: PipelineRequests,
    test: &str,
    tag: &str,
) -> Result<Vec<Sample>> {
    let invocation = Invocation {
        program: config.redis_benchmark.clone(),
        clients: config.clients,
        value_bytes: config.value_bytes,
        keyspace: config.keyspace,
        requests: pipeline.requests,
        tests: vec![test.to_string()],
        pipeline: pipeline.pipeline,
    };
    peers::sync_file_systems();
    peer.check_alive("before redis-benchmark")?;
    let started = Instant::now();
    let cpu_before = peer.cpu_seconds();
    let rows = invocation.run(peer, config.timeout)?;
    let cpu_after = peer.cpu_seconds();
    let elapsed = started.elapsed();
    if !redis_benchmark::covers(&rows, test) {
        return Err(ServerBenchError::flag(
            "tests",
            format!("redis-benchmark ran no test named '{test}'"),
        ));
    }
    let operations = pipeline.requests as f64 * rows.len() as f64;
    let cpu_s_per_million_ops = cpu_before
        .zip(cpu_after)
        .map(|(before, after)| (after - before).max(0.0) / operations * 1e6);
    eprintln!(
        "[{tag}] {:<14} -P {:<3} {} (CPU {} s/M ops; {:.1} s)",
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
        cpu_s_per_million_ops.map_or("-".into(), |cpu| format!("{cpu:.2}")),
        elapsed.as_secs_f64()
    );
    Ok(rows
        .into_iter()
        .map(|row| Sample {
            row,
            cpu_s_per_million_ops,
        })
        .collect())
}

/// Adds each (system, pipeline, test)'s rounds to the report, Engram first
/// so that each other system's ratio to it follows.
fn add_results(
    report: &mut Report,
    config: &Config,
    durability: Durability,
    labels: &[String],
    samples: &Samples,
) {
    for pipeline in &config.requests {
        for test in labels {
            for system in config.systems(durability) {
                if let Some(rounds) = samples.get(&(system, pipeline.pipeline, test.clone())) {
                    report.add_result(
                        system,
                        durability,
                        pipeline.pipeline,
                        pipeline.requests,
                        rounds,
                    );
                }
            }
        }
    }
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
    let program = if system.is_redis() {
        &config.redis_server
    } else {
        &config.engram_bin
    };
    let args = system.server_args(port, &data, durability);
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
