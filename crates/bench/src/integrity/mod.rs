//! `engram-bench integrity`: what lazy redundancy costs and how quickly it
//! protects a write (issue 5, item 6; the paper's section 5.1: YCSB with
//! Redis, throughput and update latency against a baseline without
//! redundancy, periods of 1 s and 30 s, and a redundancy-at-every-write
//! design, "TxBoundary", which is our `inline`).
//!
//! ## One cell: a configuration on a workload
//!
//! A fresh store (its own directory) with the configuration's integrity
//! mode; `records` records prefilled (the engine bench's keys and values,
//! [`crate::workload`]); every page's redundancy brought up to date
//! (`refresh_redundancy_now`), so each run starts with nothing stale; then
//! `threads` threads run the workload over the prefilled records for
//! `duration` (on a shared machine, after waiting up to `quiet_wait` for
//! other processes to calm down). Meanwhile this thread samples `integrity_stats()` every
//! [`SAMPLE_EVERY`]: `oldest_stale_age`, the age of the oldest page whose
//! checksum and parity are out of date, is how long a write has been
//! waiting for its protection. After the threads stop: how long until no
//! page is stale (the drain), then an on-demand scrub (`scrub_now`, after a
//! refresh) timed for its speed. The store is then abandoned and removed.
//!
//! Background scrubbing is off (`scrub_bytes_per_sec` 0) in every cell, so
//! the cells measure redundancy maintenance only. The background scrubber
//! is measured on its own at the end: a fresh lazy store, prefilled and
//! refreshed, left idle for `background_scrub` with scrubbing at the
//! default rate.
//!
//! ## Order, runs, medians
//!
//! For each run, for each workload, every configuration runs once, in an
//! order that reverses from one (run, workload) block to the next (off
//! first, then off last, ...), so that drift in the machine does not always
//! land on the same configuration. Throughput is the median over runs, its
//! latencies those of the median run; `ratio_to_off` is the median of the
//! per-run ratios to `off` (each pairs runs measured minutes apart, not
//! hours). Coverage and drain are the worst run's: they are bounds.
//!
//! ## Caveat: short runs flatter long periods
//!
//! A lazy store's first pass comes one period after it opens. A run shorter
//! than the period therefore pays nothing for redundancy during the run;
//! the default 60 s lets the 30 s period fire at least once. The table says
//! so when `--seconds` is not above the longest period.
//!
//! ## Paired slices (`--paired`)
//!
//! Instead of the cells: off and each lazy period on two stores open side
//! by side, in alternating slices of one run ([`paired`]), for a host
//! whose speed changes between runs.
//!
//! Modules: [`cell`] (one cell: the store, the timed threads, the sampler,
//! the drain, the scrub), [`paired`], [`report`] (the JSON and the table).

pub mod cell;
pub mod paired;
pub mod report;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use engram_engine::{FlushInstruction, IntegrityMode, IntegrityOptions};

use crate::command::{warn_if_debug_build, ReportOutput, RunDir};
use crate::error::{at_least, at_most, BenchError, Result};
use crate::machine::Machine;
use crate::workload::{Distribution, ValuePool, MIN_KEY_BYTES};
pub use report::Report;

/// How often the sampler reads `integrity_stats()` during a timed run.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// More threads than this is a typo, not an experiment.
pub const MAX_THREADS: usize = 1024;
pub const MAX_RUNS: usize = 1000;
/// A timed run longer than a day is a typo.
pub const MAX_SECONDS: f64 = 86_400.0;
/// Seeds the value pool: every cell stores the same bytes.
const VALUE_SEED: u64 = 0xBEEF;

/// One integrity configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Configuration {
    /// No checksums, no parity: the baseline.
    Off,
    /// The background pass refreshes stale pages every `period`.
    Lazy(Duration),
    /// Every store refreshes its pages' redundancy before it returns.
    Inline,
}

impl Configuration {
    /// `off`, `lazy-1s`, `lazy-200ms`, `inline`.
    pub fn name(self) -> String {
        match self {
            Configuration::Off => "off".into(),
            Configuration::Lazy(period) => format!("lazy-{}", period_name(period)),
            Configuration::Inline => "inline".into(),
        }
    }

    pub fn mode(self) -> IntegrityMode {
        match self {
            Configuration::Off => IntegrityMode::Off,
            Configuration::Lazy(_) => IntegrityMode::Lazy,
            Configuration::Inline => IntegrityMode::Inline,
        }
    }

    pub fn period(self) -> Option<Duration> {
        match self {
            Configuration::Lazy(period) => Some(period),
            Configuration::Off | Configuration::Inline => None,
        }
    }

    /// The store's integrity options, with background scrubbing at
    /// `scrub_bytes_per_sec` (0: off).
    // `IntegrityOptions` has a `faults` field only when the integrity crate's
    // `fault-injection` feature is on (a workspace test build turns it on,
    // `-p engram-bench` alone does not): the struct update serves both.
    #[allow(clippy::needless_update)]
    pub fn options(self, stripe_pages: u32, scrub_bytes_per_sec: u64) -> IntegrityOptions {
        IntegrityOptions {
            mode: self.mode(),
            // Unused unless lazy; the default keeps validation happy.
            period: self
                .period()
                .unwrap_or(engram_engine::IntegrityOptions::default().period),
            stripe_pages,
            scrub_bytes_per_sec,
            ..IntegrityOptions::default()
        }
    }
}

/// `1s`, `30s`, `200ms`, `1500ms`.
fn period_name(period: Duration) -> String {
    if period.subsec_nanos() == 0 {
        format!("{}s", period.as_secs())
    } else {
        format!("{}ms", period.as_millis())
    }
}

/// Parses a length of time: `60`, `1.5` (seconds), `30s`, `200ms`; zero
/// is allowed, more than [`MAX_SECONDS`] is not. Whole milliseconds.
pub fn parse_seconds(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    let (number, unit_seconds) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("'{text}' is not a length of time (expected e.g. 60, 30s or 200ms)")
    })?;
    let seconds = value * unit_seconds;
    if !(seconds.is_finite() && (0.0..=MAX_SECONDS).contains(&seconds)) {
        return Err(format!("'{text}' must be from 0 to {MAX_SECONDS} seconds"));
    }
    // Whole milliseconds: the integrity stats report ages in milliseconds.
    Ok(Duration::from_millis((seconds * 1e3).round() as u64))
}

/// Like [`parse_seconds`], but above zero: a lazy period or a run length.
pub fn parse_period(text: &str) -> std::result::Result<Duration, String> {
    let period = parse_seconds(text)?;
    if period.is_zero() {
        return Err(format!("'{}' must be at least 1 ms", text.trim()));
    }
    Ok(period)
}

/// A YCSB-style mix over the prefilled records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// YCSB A: 50% reads, 50% updates.
    YcsbA,
    /// YCSB B: 95% reads, 5% updates.
    YcsbB,
    /// 100% updates (the paper's update-only).
    WriteOnly,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::YcsbA, Workload::YcsbB, Workload::WriteOnly];

    pub fn name(self) -> &'static str {
        match self {
            Workload::YcsbA => "ycsb-a",
            Workload::YcsbB => "ycsb-b",
            Workload::WriteOnly => "write-only",
        }
    }

    /// Percent of operations that are reads; the rest are updates.
    pub fn read_percent(self) -> u32 {
        match self {
            Workload::YcsbA => 50,
            Workload::YcsbB => 95,
            Workload::WriteOnly => 0,
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Workload {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "a" | "ycsb-a" | "ycsba" => Ok(Workload::YcsbA),
            "b" | "ycsb-b" | "ycsbb" => Ok(Workload::YcsbB),
            "w" | "write" | "write-only" | "update-only" => Ok(Workload::WriteOnly),
            _ => Err(BenchError::UnknownName {
                what: "workload",
                name: s.into(),
                expected: "ycsb-a (a), ycsb-b (b) or write-only (w)",
            }),
        }
    }
}

/// The flags of `engram-bench integrity`.
#[derive(Clone, Debug, clap::Args)]
pub struct IntegrityBenchArgs {
    /// Records prefilled into each fresh store.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    #[arg(long, default_value_t = 200)]
    pub value_bytes: usize,
    #[arg(long, default_value_t = 16)]
    pub key_bytes: usize,
    /// Client threads running the workload.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Length of each timed run (60, 90s, 500ms). Runs not longer than a
    /// lazy period flatter it: its first pass comes one period after the
    /// store opens.
    #[arg(long, default_value = "60", value_parser = parse_period)]
    pub seconds: Duration,
    /// Runs of every cell; medians are reported.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Which prefilled records operations touch: uniform or zipfian (s = 0.99).
    #[arg(long, default_value = "zipfian")]
    pub distribution: Distribution,
    /// Workloads, comma-separated: ycsb-a (a, 50% reads), ycsb-b (b, 95%
    /// reads), write-only (w).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ycsb-a,ycsb-b,write-only"
    )]
    pub workloads: Vec<Workload>,
    /// Periods of the lazy configurations, comma-separated (off and inline
    /// are always measured too).
    #[arg(long, value_delimiter = ',', default_value = "1s,30s", value_parser = parse_period)]
    pub lazy_periods: Vec<Duration>,
    /// Data pages per parity page.
    #[arg(long, default_value_t = engram_engine::IntegrityOptions::default().stripe_pages)]
    pub stripe_pages: u32,
    /// Flush instruction per persisted cache line (clwb, clflushopt, none).
    #[arg(long, default_value = "none")]
    pub flush: FlushInstruction,
    /// Seconds the background scrubber is watched on an idle lazy store at
    /// the end (0: skip).
    #[arg(long, default_value = "5", value_parser = parse_seconds)]
    pub background_scrub_seconds: Duration,
    /// A shared machine: before each timed run, wait until other processes
    /// use less than --quiet-percent of the CPU over a second, for at most
    /// this long (0: do not wait). What they used during each run is
    /// reported either way.
    #[arg(long, default_value = "60", value_parser = parse_seconds)]
    pub quiet_wait: Duration,
    #[arg(long, default_value_t = 10.0)]
    pub quiet_percent: f64,
    /// Instead of the cells: off against each lazy period, two stores open
    /// side by side taking turns in slices of this length (1s, 500ms) for
    /// --seconds each; the median of the per-pair ratios (see the module
    /// docs: for a host whose speed changes between runs).
    #[arg(long, value_parser = parse_period)]
    pub paired: Option<Duration>,
    /// Where the stores go [default: a fresh temporary directory under the
    /// current one, removed at the end].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write the results as JSON to this file, or to standard output
    /// with `-` (the table then goes to standard error).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// A validated run of the integrity benchmark.
#[derive(Clone, Debug)]
pub struct Config {
    pub records: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub threads: usize,
    /// Each timed run.
    pub duration: Duration,
    pub runs: usize,
    pub distribution: Distribution,
    pub workloads: Vec<Workload>,
    /// One lazy configuration per period, between off and inline.
    pub lazy_periods: Vec<Duration>,
    pub stripe_pages: u32,
    pub flush: FlushInstruction,
    /// How long the background scrubber is watched (zero: not at all).
    pub background_scrub: Duration,
    /// Before each timed run, wait at most this long until other processes
    /// use less than `quiet_share` of the machine's CPU (zero: no wait).
    pub quiet_wait: Duration,
    pub quiet_share: f64,
    /// Where stores are created, one subdirectory per cell, each removed
    /// when its cell ends.
    pub dir: PathBuf,
    /// Draw progress bars on standard error.
    pub progress: bool,
    /// The command line, quoted in the report.
    pub command: String,
    /// Paired slices of this length instead of the cells.
    pub paired: Option<Duration>,
}

impl Config {
    /// Off, each lazy period (in the order given, once), inline.
    pub fn configurations(&self) -> Vec<Configuration> {
        let mut all = vec![Configuration::Off];
        for &period in &self.lazy_periods {
            if !all.contains(&Configuration::Lazy(period)) {
                all.push(Configuration::Lazy(period));
            }
        }
        all.push(Configuration::Inline);
        all
    }

    /// The workloads, each once, in the order given.
    pub fn workloads(&self) -> Vec<Workload> {
        let mut all: Vec<Workload> = Vec::new();
        for &workload in &self.workloads {
            if !all.contains(&workload) {
                all.push(workload);
            }
        }
        all
    }

    pub fn validate(&self) -> Result<()> {
        at_least("records", self.records, 1)?;
        if let Some(slice) = self.paired {
            at_most(
                "paired (ms)",
                slice.as_millis() as u64,
                self.duration.as_millis() as u64,
                "--seconds: each configuration runs that long, in slices",
            )?;
        }
        at_least("threads", self.threads as u64, 1)?;
        at_most(
            "threads",
            self.threads as u64,
            MAX_THREADS as u64,
            "the benchmark's MAX_THREADS",
        )?;
        at_least("runs", self.runs as u64, 1)?;
        at_most(
            "runs",
            self.runs as u64,
            MAX_RUNS as u64,
            "the benchmark's MAX_RUNS",
        )?;
        at_least("key-bytes", self.key_bytes as u64, MIN_KEY_BYTES as u64)?;
        at_most(
            "key-bytes",
            self.key_bytes as u64,
            engram_engine::MAX_KEY_BYTES as u64,
            "Engram's longest key",
        )?;
        at_least("value-bytes", self.value_bytes as u64, 1)?;
        at_most(
            "value-bytes",
            self.value_bytes as u64,
            engram_engine::MAX_VALUE_BYTES as u64,
            "Engram's largest value",
        )?;
        at_least(
            "seconds (in milliseconds)",
            self.duration.as_millis() as u64,
            1,
        )?;
        at_most(
            "seconds",
            self.duration.as_secs(),
            MAX_SECONDS as u64,
            "a day; longer is a typo",
        )?;
        at_least("workloads", self.workloads.len() as u64, 1)?;
        if !(self.quiet_share > 0.0 && self.quiet_share <= 1.0) {
            return Err(BenchError::UnknownName {
                what: "--quiet-percent",
                name: format!("{}", self.quiet_share * 100.0),
                expected: "a percentage above 0, at most 100",
            });
        }
        // The integrity layer validates stripe_pages and the periods when a
        // store opens; check them here, before anything is created.
        for configuration in self.configurations() {
            configuration
                .options(self.stripe_pages, 0)
                .validate()
                .map_err(|e| BenchError::Engram(e.into()))?;
        }
        Ok(())
    }

    /// The longest lazy period, if any.
    pub fn longest_period(&self) -> Option<Duration> {
        self.lazy_periods.iter().copied().max()
    }
}

impl IntegrityBenchArgs {
    /// Checks the flags and fills in what the command line leaves open.
    pub fn config(&self, command: String) -> Result<Config> {
        let config = Config {
            records: self.records,
            key_bytes: self.key_bytes,
            value_bytes: self.value_bytes,
            threads: self.threads,
            duration: self.seconds,
            runs: self.runs,
            distribution: self.distribution,
            workloads: self.workloads.clone(),
            lazy_periods: self.lazy_periods.clone(),
            stripe_pages: self.stripe_pages,
            flush: self.flush,
            background_scrub: self.background_scrub_seconds,
            quiet_wait: self.quiet_wait,
            quiet_share: self.quiet_percent / 100.0,
            dir: self.dir.clone().unwrap_or_default(),
            progress: std::io::stderr().is_terminal(),
            command,
            paired: self.paired,
        };
        config.validate()?;
        Ok(config)
    }
}

/// `engram-bench integrity`: runs the benchmark, prints the table, writes
/// the JSON.
pub fn cli(args: IntegrityBenchArgs, command: String) -> Result<()> {
    let mut config = args.config(command)?;
    warn_if_debug_build();
    let output = ReportOutput::create(args.json.as_deref())?;
    let run_dir = RunDir::new(args.dir.as_deref(), "engram-bench-integrity-")?;
    config.dir = run_dir.path().to_path_buf();
    let report = run(&config)?;
    output.write(&report.table(), || report.json())?;
    run_dir.close()?;
    Ok(())
}

/// Runs every cell `config.runs` times, then the background scrubber, and
/// reports. The library entry point (the test drives it with tiny sizes).
pub fn run(config: &Config) -> Result<Report> {
    config.validate()?;
    std::fs::create_dir_all(&config.dir)
        .map_err(|e| BenchError::io("creating benchmark directory", &config.dir, e))?;
    let values = ValuePool::new(config.value_bytes, VALUE_SEED);
    let configurations = config.configurations();
    let workloads = config.workloads();
    let mut report = Report::new(config, Machine::this());
    if let Some(slice) = config.paired {
        for &workload in &workloads {
            for &configuration in &configurations {
                if let Configuration::Lazy(_) = configuration {
                    let paired = paired::measure(config, &values, configuration, workload, slice)?;
                    report.paired.push(paired);
                }
            }
        }
        report.finish();
        return Ok(report);
    }
    let mut block = 0;
    for run in 0..config.runs {
        for &workload in &workloads {
            // Reverse the order every other block (module docs).
            let mut order = configurations.clone();
            if block % 2 == 1 {
                order.reverse();
            }
            block += 1;
            for &configuration in &order {
                let label = format!(
                    "{} {} (run {}/{})",
                    configuration.name(),
                    workload,
                    run + 1,
                    config.runs
                );
                let measured =
                    cell::measure(config, &values, configuration, workload, run, &label)?;
                report.add(configuration, workload, run, measured);
            }
        }
    }
    if !config.background_scrub.is_zero() {
        let period = config
            .lazy_periods
            .first()
            .copied()
            .unwrap_or(Duration::from_secs(1));
        report.background_scrub = Some(cell::background_scrub(config, &values, period)?);
    }
    report.finish();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_parse_in_seconds_and_milliseconds() {
        assert_eq!(parse_period("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_period("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_period("200ms").unwrap(), Duration::from_millis(200));
        assert_eq!(parse_period("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_period("0s").is_err());
        assert!(parse_period("soon").is_err());
        assert!(parse_period("100000s").is_err());
        assert!(parse_seconds("0").unwrap().is_zero());
        assert!(parse_seconds("-1").is_err());
        assert_eq!(
            Configuration::Lazy(Duration::from_secs(30)).name(),
            "lazy-30s"
        );
        assert_eq!(
            Configuration::Lazy(Duration::from_millis(200)).name(),
            "lazy-200ms"
        );
    }

    #[test]
    fn workloads_have_short_names() {
        assert_eq!("a".parse::<Workload>().unwrap(), Workload::YcsbA);
        assert_eq!("YCSB-B".parse::<Workload>().unwrap(), Workload::YcsbB);
        assert_eq!("w".parse::<Workload>().unwrap(), Workload::WriteOnly);
        assert!("c".parse::<Workload>().is_err());
    }
}
