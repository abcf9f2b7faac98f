//! `engram-bench timeline`: the collections layer (DIPPER) over time — what
//! checkpoints cost the clients while they run, YCSB over collections and
//! strings, and how long recovery takes. It mirrors the DIPPER paper's
//! evaluation (Chen et al., sections 5.3 to 5.5) on the embedded store,
//! and — with `--target server` — the first two parts against the server
//! over TCP ([`server`]).
//!
//! ## Part 1, `tail`: tail latency and quiescent freedom ([`tail`])
//!
//! A 50% read / 50% write run (HGET / HSET of one field of a record) for
//! `--seconds` with `--threads` clients over `--records` hashes, in three
//! configurations, one after another on fresh stores: checkpoints
//! `background` (DIPPER's), `off` (none at all) and `stop-the-world`
//! (writers wait for the whole checkpoint: the paper's cached system).
//! Checkpoints come at the store's default, every 64 MiB of log
//! (`--checkpoint-log-mib`): at these write rates that is every second or
//! two, tens of times a run. For each: throughput in every 10 ms window, latency percentiles of
//! reads, writes and both (as measured, and corrected for coordinated
//! omission: [`timed`]), the checkpoints and the spans they ran in
//! ([`series`]). From these, three ratios against targets:
//!
//! - the smallest 10 ms window during a background checkpoint over the
//!   median window (≥ 0.5: checkpoints never quiesce the store);
//! - p99.99 with background checkpoints over p99.99 without any (≤ 2);
//! - p99.99 with background checkpoints over p99.99 stop-the-world
//!   (≤ 0.25).
//!
//! The latency ratios are reported for the latencies as measured and as
//! corrected: with few closed-loop clients, a stop-the-world checkpoint
//! stalls one operation per client, too few to move an uncorrected p99.99
//! (see [`timed`]); the corrected ones count the requests that would have
//! waited.
//!
//! ## Part 2, `ycsb`: YCSB A–F ([`ycsb`] has the mapping)
//!
//! Each workload for `--ycsb-seconds` under each distribution over
//! collections (background checkpoints) and strings (the engine store,
//! default options; E skipped): throughput and latency percentiles.
//!
//! ## Part 3, `recovery` ([`recovery`])
//!
//! `--recovery-keys` collections of `--recovery-members` elements in all:
//! the time `Collections::open` takes from the log alone, and from images
//! plus a 1% tail (target ≤ 2 s with 2 recovery threads).
//!
//! ## `--target server` ([`server`])
//!
//! Parts 1 and 2 against an engram server started in this process for each
//! configuration, on a port the system picks and a fresh data directory,
//! driven over TCP by `--threads` Redis clients (the `redis` crate, one
//! request in flight each): the same operations as commands (HGET / HSET,
//! HGETALL, ZRANGEBYSCORE, GET / SET, ...), the same windows, percentiles
//! and output, labelled `target: server`, with the server's `INFO
//! collections` counters at the end of each run. The server checkpoints in
//! the background only: part 1's `off` and `stop-the-world`, and part 3,
//! are skipped with a note. Each of these runs is then repeated against a
//! fresh `redis-server` (`--peers redis`, the default; AOF with
//! `appendfsync no`, the server's `process` durability): the same prefill,
//! clients, seeds, commands and duration, its rows beside Engram's and the
//! ratios Engram / Redis ([`peer_report`]). `--peers none` leaves Redis out.
//!
//! ## Output
//!
//! A table on standard output, `--json FILE` with everything (each run's
//! window series too), `--plot FILE.png`: part 1's throughput over time,
//! the configurations on one chart, checkpoint spans shaded ([`plot`]).
//!
//! Modules: [`records`] (the data set), [`timed`] (the timed run),
//! [`series`] (spans, windows, ratios), the three parts, [`server`] (the
//! server target and its Redis peer), [`report`], [`peer_report`] (Redis's
//! rows and the ratios), [`plot`].

pub mod error;
pub mod peer_report;
pub mod plot;
pub mod records;
pub mod recovery;
pub mod report;
pub mod series;
pub mod server;
pub mod stats;
pub mod string_recovery;
pub mod tail;
pub mod timed;
pub mod ycsb;

#[cfg(test)]
mod tests;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use engram_threads::{self as background, BackgroundCpus};

use crate::command::{warn_if_debug_build, ReportOutput, RunDir};
use crate::integrity::parse_period;
use crate::machine::Machine;
use crate::workload::{Distribution, ValuePool};
pub use error::{Result, TimelineError};
use records::Shape;
use recovery::{DataSet, Types};
pub use report::Report;
pub use server::peer::Peers;
pub use server::Target;
use tail::Configuration;
use ycsb::{StoreKind, Workload};

/// More threads than this is a typo, not an experiment.
pub const MAX_THREADS: usize = 1024;
/// A record (all its fields) is logged as one operation: it must fit an
/// operation-log segment (8 MiB by default) with room to spare.
pub const MAX_RECORD_BYTES: usize = 4 << 20;
/// Likewise a recovery key with all its elements.
pub const MAX_KEY_ELEMENT_BYTES: u64 = 4 << 20;
/// Seeds the value pools: every store holds the same bytes.
const VALUE_SEED: u64 = 0xBEEF;

/// A part of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    Tail,
    Ycsb,
    Recovery,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Tail => "tail",
            Part::Ycsb => "ycsb",
            Part::Recovery => "recovery",
        }
    }
}

impl std::str::FromStr for Part {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "tail" | "quiescence" => Ok(Part::Tail),
            "ycsb" => Ok(Part::Ycsb),
            "recovery" => Ok(Part::Recovery),
            _ => Err(format!(
                "unknown part '{s}' (expected tail, ycsb or recovery)"
            )),
        }
    }
}

/// The flags of `engram-bench timeline`.
#[derive(Clone, Debug, clap::Args)]
pub struct TimelineBenchArgs {
    /// Parts to run, comma-separated: tail (checkpoints' cost over time),
    /// ycsb (A-F), recovery.
    #[arg(long, value_delimiter = ',', default_value = "tail,ycsb,recovery")]
    pub parts: Vec<Part>,
    /// What tail and ycsb measure: embedded (the stores in this process)
    /// or server (an engram server started in this process, over TCP with
    /// Redis clients; background checkpoints only, no recovery part).
    #[arg(long, value_enum, default_value = "embedded")]
    pub target: Target,
    /// With --target server, also measure each run against: redis (a fresh
    /// redis-server per run, AOF with appendfsync no, on the same workload;
    /// the default) or none. Ignored with --target embedded.
    #[arg(long, value_enum)]
    pub peers: Option<Peers>,
    /// --peers redis: the redis-server to run (this default: found on
    /// PATH; not installed by the benchmark).
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Client threads (also the prefill's and the recovery build's writers).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Records (hashes, or strings in ycsb) prefilled into each fresh store.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Fields per record.
    #[arg(long, default_value_t = 10)]
    pub fields: usize,
    /// Bytes of each field's value.
    #[arg(long, default_value_t = 100)]
    pub field_bytes: usize,
    /// tail: length of each configuration's timed run (60, 90s, 500ms).
    #[arg(long, default_value = "60", value_parser = parse_period)]
    pub seconds: Duration,
    /// tail: which records operations touch: zipfian (s = 0.99) or uniform.
    #[arg(long, default_value = "zipfian")]
    pub distribution: Distribution,
    /// tail: percent of operations that read (the rest write).
    #[arg(long, default_value_t = 50)]
    pub read_percent: u32,
    /// tail: configurations, comma-separated: background, off,
    /// stop-the-world (the ratios need all three).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "background,off,stop-the-world"
    )]
    pub configurations: Vec<Configuration>,
    /// A checkpoint starts when this many MiB of log were written since the
    /// last one (the store's default). Smaller means more checkpoints, each
    /// rewriting the images of most hot keys again.
    #[arg(long, default_value_t = 64)]
    pub checkpoint_log_mib: u64,
    /// Cores the stores' background threads (checkpoints, compaction, the
    /// integrity pass) start on: auto (the last quarter of this process's
    /// cores), all, or a CPU list (as `engram serve --background-cpus`).
    #[arg(long, default_value = "auto")]
    pub background_cpus: BackgroundCpus,
    /// ycsb: length of each timed run.
    #[arg(long, default_value = "10", value_parser = parse_period)]
    pub ycsb_seconds: Duration,
    /// ycsb: workloads, comma-separated (a to f, or ycsb-a ...).
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d,e,f")]
    pub workloads: Vec<Workload>,
    /// ycsb: distributions, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "zipfian,uniform")]
    pub ycsb_distributions: Vec<Distribution>,
    /// ycsb: stores, comma-separated: collections (hashes, background
    /// checkpoints), strings (the engine store; no E).
    #[arg(long, value_delimiter = ',', default_value = "collections,strings")]
    pub ycsb_stores: Vec<StoreKind>,
    /// recovery: collections built.
    #[arg(long, default_value_t = 1_000_000)]
    pub recovery_keys: u64,
    /// recovery: elements in all (spread over the keys).
    #[arg(long, default_value_t = 10_000_000)]
    pub recovery_members: u64,
    /// recovery: bytes of each element.
    #[arg(long, default_value_t = 16)]
    pub recovery_member_bytes: usize,
    /// recovery: mixed (sets, hashes, sorted sets, lists in turn) or sets.
    #[arg(long, default_value = "mixed")]
    pub recovery_types: Types,
    /// recovery: the tail written after the checkpoint, in percent of the
    /// keys (each tail write creates a key).
    #[arg(long, default_value_t = 1.0)]
    pub recovery_tail_percent: f64,
    /// recovery: threads decoding images at open (and recovering the
    /// strings store).
    #[arg(long, default_value_t = 2)]
    pub recovery_threads: usize,
    /// recovery: string keys (values of --recovery-member-bytes) whose
    /// engine store is recovered by a full scan and from an index image
    /// plus the tail (0: skip the strings).
    #[arg(long, default_value_t = 10_000_000)]
    pub recovery_string_keys: u64,
    /// Where the stores go [default: a fresh temporary directory under the
    /// current one, removed at the end].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write the results as JSON to this file, or to standard output
    /// with `-` (the table then goes to standard error).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the tail part's throughput over time into this PNG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// A validated run of the timeline benchmark.
#[derive(Clone, Debug)]
pub struct Config {
    pub parts: Vec<Part>,
    pub target: Target,
    /// Measured beside the server target (always `None` when embedded).
    pub peers: Peers,
    /// `--peers redis`: the program.
    pub redis_server: PathBuf,
    pub threads: usize,
    pub shape: Shape,
    pub duration: Duration,
    pub distribution: Distribution,
    pub read_percent: u32,
    pub configurations: Vec<Configuration>,
    pub checkpoint_log_bytes: u64,
    /// Applied process-wide when the run starts.
    pub background_cpus: BackgroundCpus,
    pub ycsb_duration: Duration,
    pub workloads: Vec<Workload>,
    pub ycsb_distributions: Vec<Distribution>,
    pub ycsb_stores: Vec<StoreKind>,
    pub recovery: DataSet,
    pub recovery_tail_percent: f64,
    pub recovery_threads: usize,
    pub recovery_string_keys: u64,
    /// Where stores are created, one subdirectory each, removed when done.
    pub dir: PathBuf,
    /// Draw progress bars on standard error.
    pub progress: bool,
    /// The command line, quoted in the report.
    pub command: String,
}

impl Config {
    pub fn runs(&self, part: Part) -> bool {
        self.parts.contains(&part)
    }

    pub fn validate(&self) -> Result<()> {
        use TimelineError as E;
        let flag = |name, reason: String| E::flag(name, reason);
        if self.parts.is_empty() {
            return Err(flag("parts", "name at least one part".into()));
        }
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return Err(flag("threads", format!("must be from 1 to {MAX_THREADS}")));
        }
        let shape = &self.shape;
        if !(1..records::MAX_RECORDS).contains(&shape.records) {
            return Err(flag(
                "records",
                format!("must be from 1 to {}", records::MAX_RECORDS - 1),
            ));
        }
        if !(1..=records::MAX_FIELDS).contains(&shape.fields) {
            return Err(flag(
                "fields",
                format!("must be from 1 to {}", records::MAX_FIELDS),
            ));
        }
        let largest = MAX_RECORD_BYTES.min(engram_engine::MAX_VALUE_BYTES);
        if shape.field_bytes == 0 || shape.record_bytes() > largest {
            return Err(flag(
                "field-bytes",
                format!(
                    "must be at least 1, and a record (fields × field bytes) at most {largest} bytes"
                ),
            ));
        }
        if self.read_percent > 100 {
            return Err(flag("read-percent", "must be from 0 to 100".into()));
        }
        if let Err(error) = background::resolve(&self.background_cpus, &background::allowed_cpus())
        {
            return Err(flag("background-cpus", error.to_string()));
        }
        if self.checkpoint_log_bytes < 1 << 20 {
            return Err(flag("checkpoint-log-mib", "must be at least 1".into()));
        }
        for (name, duration) in [
            ("seconds", self.duration),
            ("ycsb-seconds", self.ycsb_duration),
        ] {
            if timed::whole_windows(duration) == 0 {
                return Err(flag(
                    name,
                    format!(
                        "must be at least one {} ms window",
                        timed::WINDOW.as_millis()
                    ),
                ));
            }
        }
        if self.runs(Part::Tail) && self.configurations.is_empty() {
            return Err(flag("configurations", "name at least one".into()));
        }
        if self.runs(Part::Ycsb)
            && (self.workloads.is_empty()
                || self.ycsb_distributions.is_empty()
                || self.ycsb_stores.is_empty())
        {
            return Err(flag(
                "workloads",
                "ycsb needs at least one workload, distribution and store".into(),
            ));
        }
        let data = &self.recovery;
        if data.keys == 0 {
            return Err(flag("recovery-keys", "must be at least 1".into()));
        }
        if data.member_bytes < recovery::MIN_MEMBER_BYTES {
            return Err(flag(
                "recovery-member-bytes",
                format!("must be at least {}", recovery::MIN_MEMBER_BYTES),
            ));
        }
        if data.members_of(0) * data.member_bytes as u64 * 2 > MAX_KEY_ELEMENT_BYTES {
            return Err(flag(
                "recovery-members",
                format!(
                    "a key's elements must fit one log record: at most {MAX_KEY_ELEMENT_BYTES} \
                     bytes per key (hashes twice the elements)"
                ),
            ));
        }
        if !(0.0..=100.0).contains(&self.recovery_tail_percent) {
            return Err(flag(
                "recovery-tail-percent",
                "must be from 0 to 100".into(),
            ));
        }
        if !(1..=MAX_THREADS).contains(&self.recovery_threads) {
            return Err(flag(
                "recovery-threads",
                format!("must be from 1 to {MAX_THREADS}"),
            ));
        }
        Ok(())
    }

    /// Each item once, in the order given.
    fn unique<T: PartialEq + Copy>(items: &[T]) -> Vec<T> {
        let mut all: Vec<T> = Vec::new();
        for &item in items {
            if !all.contains(&item) {
                all.push(item);
            }
        }
        all
    }
}

impl TimelineBenchArgs {
    /// Checks the flags and fills in what the command line leaves open.
    pub fn config(&self, command: String) -> Result<Config> {
        if self.plot.is_some() && !self.parts.contains(&Part::Tail) {
            return Err(TimelineError::flag(
                "plot",
                "draws the tail part, which --parts leaves out",
            ));
        }
        let config = Config {
            parts: Config::unique(&self.parts),
            target: self.target,
            peers: match self.target {
                Target::Embedded => Peers::None,
                Target::Server => self.peers.unwrap_or_default(),
            },
            redis_server: self.redis_server.clone(),
            threads: self.threads,
            shape: Shape {
                records: self.records,
                fields: self.fields,
                field_bytes: self.field_bytes,
            },
            duration: self.seconds,
            distribution: self.distribution,
            read_percent: self.read_percent,
            configurations: Config::unique(&self.configurations),
            checkpoint_log_bytes: self.checkpoint_log_mib.saturating_mul(1 << 20),
            background_cpus: self.background_cpus.clone(),
            ycsb_duration: self.ycsb_seconds,
            workloads: Config::unique(&self.workloads),
            ycsb_distributions: Config::unique(&self.ycsb_distributions),
            ycsb_stores: Config::unique(&self.ycsb_stores),
            recovery: DataSet {
                keys: self.recovery_keys,
                members: self.recovery_members,
                member_bytes: self.recovery_member_bytes,
                types: self.recovery_types,
            },
            recovery_tail_percent: self.recovery_tail_percent,
            recovery_threads: self.recovery_threads,
            recovery_string_keys: self.recovery_string_keys,
            dir: self.dir.clone().unwrap_or_default(),
            progress: std::io::stderr().is_terminal(),
            command,
        };
        config.validate()?;
        Ok(config)
    }
}

/// `engram-bench timeline`: runs the parts, prints the table, writes the
/// JSON and the plot.
pub fn cli(args: TimelineBenchArgs, command: String) -> Result<()> {
    let mut config = args.config(command)?;
    warn_if_debug_build();
    let output = ReportOutput::create(args.json.as_deref())?;
    // Created now too, so a bad path fails before the run.
    if let Some(path) = &args.plot {
        std::fs::File::create(path).map_err(|e| TimelineError::io("creating the plot", path, e))?;
    }
    let run_dir = RunDir::new(args.dir.as_deref(), "engram-bench-timeline-")?;
    config.dir = run_dir.path().to_path_buf();
    let report = run(&config)?;
    output.write(&report.table(), || report.json())?;
    if let (Some(path), Some(tail)) = (&args.plot, &report.tail) {
        let peer = report.peer.as_ref().map_or(&[][..], |peer| &peer.tail[..]);
        plot::draw(path, tail, peer)?;
    }
    run_dir.close()?;
    Ok(())
}

/// Runs the parts and reports. The library entry point (the tests drive
/// it with tiny sizes).
pub fn run(config: &Config) -> Result<Report> {
    config.validate()?;
    background::configure(&config.background_cpus)
        .map_err(|e| TimelineError::flag("background-cpus", e.to_string()))?;
    std::fs::create_dir_all(&config.dir)
        .map_err(|e| TimelineError::io("creating benchmark directory", &config.dir, e))?;
    let mut report = Report::new(config, Machine::this());
    // The Redis peer, found before anything is measured.
    let redis = match (config.target, config.peers) {
        (Target::Server, Peers::Redis) if config.runs(Part::Tail) || config.runs(Part::Ycsb) => {
            Some(server::peer::RedisServer::find(&config.redis_server)?)
        }
        _ => None,
    };
    let mut peer = redis.as_ref().map(peer_report::PeerReport::new);
    // Neither server pays for the write-back of the one measured before it.
    let settle = || {
        if redis.is_some() {
            crate::server::peers::sync_file_systems();
        }
    };
    let field_values = ValuePool::new(config.shape.field_bytes, VALUE_SEED);
    if config.runs(Part::Tail) {
        let mut measured = Vec::new();
        let mut peer_measured = Vec::new();
        for &configuration in &config.configurations {
            measured.push(match config.target {
                Target::Embedded => tail::measure(config, &field_values, configuration)?,
                Target::Server if configuration == Configuration::Background => {
                    settle();
                    let engram = server::tail::measure(config, &field_values, configuration)?;
                    if let Some(redis) = &redis {
                        settle();
                        peer_measured.push((
                            configuration,
                            server::tail::measure_peer(
                                config,
                                &field_values,
                                configuration,
                                redis,
                            )?,
                        ));
                    }
                    engram
                }
                Target::Server => {
                    let why = server::ONLY_BACKGROUND;
                    report.skipped.push(format!("tail {configuration}: {why}"));
                    continue;
                }
            });
        }
        let tail = report::TailReport::new(&measured);
        if let Some(peer) = &mut peer {
            for (configuration, measured) in &peer_measured {
                peer.add_tail(&tail, *configuration, measured);
            }
        }
        report.tail = Some(tail);
    }
    if config.runs(Part::Ycsb) {
        let record_values = ValuePool::new(config.shape.record_bytes(), VALUE_SEED);
        let mut ycsb = report::YcsbReport::default();
        for &store in &config.ycsb_stores {
            for &workload in &config.workloads {
                if !store.runs(workload) {
                    ycsb.skipped.push(format!(
                        "{workload} over {store}: strings keep no order to scan"
                    ));
                    continue;
                }
                for &distribution in &config.ycsb_distributions {
                    let case = ycsb::Case {
                        config,
                        field_values: &field_values,
                        record_values: &record_values,
                        store,
                        workload,
                        distribution,
                    };
                    let measure = match config.target {
                        Target::Embedded => ycsb::measure,
                        Target::Server => server::ycsb::measure,
                    };
                    settle();
                    let measured = measure(&case)?;
                    ycsb.add(&measured);
                    if let (Some(redis), Some(peer)) = (&redis, &mut peer) {
                        settle();
                        let measured = server::ycsb::measure_peer(&case, redis)?;
                        let engram = ycsb.results.last().expect("just added");
                        peer.add_ycsb(engram, workload, &measured);
                    }
                }
            }
        }
        report.ycsb = Some(ycsb);
    }
    report.peer = peer;
    if config.runs(Part::Recovery) && config.target == Target::Server {
        let why = server::NO_RECOVERY;
        report.skipped.push(format!("recovery: {why}"));
    } else if config.runs(Part::Recovery) {
        report.recovery = Some(report::RecoveryReport::new(&recovery::measure(config)?));
    }
    Ok(report)
}
