//! `engram-bench tracker`: is the kernel's dirty-page tracking (userfaultfd
//! write protection in async mode, collected with `PAGEMAP_SCAN`, Linux
//! 6.7+) cheaper than Engram's software marks? (Issue 5.)
//!
//! ## The trackers
//!
//! Two store paths, each untracked and tracked:
//!
//! - `none`: atomic 8-byte stores and `copy_nonoverlapping` into a plain
//!   shared mapping ([`memory`]), nothing tracked: the hardware's limit,
//!   and the baseline of `x none`.
//! - `kernel`: the same plain stores, the range registered for async write
//!   protection ([`kernel`]); every `period` a collector thread calls
//!   `PAGEMAP_SCAN` to fetch the written pages and protect them again, then
//!   does the same checksum and parity work as Engram's refresh over them
//!   ([`redundancy`], into a file of Engram's integrity layout).
//! - `region`: the stores through `engram_pmem::Region`'s helpers with no
//!   tracker installed: Engram's store path without tracking, the baseline
//!   of `x reg`.
//! - `software`: Engram as it is: a Region with
//!   `engram_integrity::Integrity` attached (mode lazy, background
//!   scrubbing off). Each store enters the writer gate and tests a DRAM bit;
//!   the first store to a page in an epoch persists a mark bit first. Every
//!   `period` the integrity thread refreshes the marked pages (shadow copy,
//!   clear marks, drain the gate, checksums, parity, meta checksums).
//! - `region-kernel`: the kernel tracker over stores through Region (no
//!   software tracker): what adopting it behind Region's interface would
//!   run, since every store would still go through Region's helpers.
//!
//! ## The measurements
//!
//! 1. Support ([`support`]): on a small mapping of each memory kind (ext4
//!    file, tmpfs file, memfd, anonymous), register, protect, write, scan,
//!    and check that the scans report exactly the pages written; then
//!    whether a written page stays reported across writeback and reclaim.
//! 2. Per-page costs, one thread, nothing else running: a store to every
//!    page of the region, untracked, then on a fresh epoch of each tracker
//!    (the kernel's write-protect fault against the software mark), then
//!    again (both trackers' steady state); a scan with nothing written and
//!    with everything written; a full checksum pass.
//! 3. Throughput: `threads` writers run each workload ([`workload`]) for
//!    `run` on each (memory, tracker) pair, the tracker's pass every
//!    `period`. Region maps only files, so `region`, `software` and
//!    `region-kernel` run on file and tmpfs memory only.
//! 4. The crash gap: the kernel's protection bits die with the process, so
//!    after any crash the kernel tracker must re-checksum the whole region
//!    (timed here warm and cold), where Engram's marks tell it which pages
//!    changed (a reopen after a simulated process crash, timed).
//!
//! Every pair starts from a fresh mapping (and fresh files in a directory of
//! its own, removed after). Order: the trackers run in the order given for
//! the first workload and in reverse for the next, so drift in the machine
//! does not always land on the same tracker.

pub mod error;
pub mod kernel;
pub mod memory;
pub mod redundancy;
pub mod report;
pub mod support;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use engram_integrity::{
    Integrity, IntegrityMode, IntegrityOptions, DEFAULT_STRIPE_PAGES, MAX_PERIOD,
};
use engram_pmem::{ModeChoice, PmemOffset, Region, RegionOptions};
use serde::Serialize;

pub use error::{Result, TrackerBenchError};
pub use memory::MemoryKind;
pub use report::Report;
pub use workload::Workload;

use crate::command::ReportOutput;
use crate::cpu_time::{self, CpuTimes};
use crate::machine::Machine;
use kernel::WriteTracker;
use memory::{MapOptions, Mapping, PAGE_BYTES};
use redundancy::{PageRedundancy, PageSource};
use report::{
    CrashGap, KernelCosts, KernelInfo, PageCosts, PassRecord, ReportConfig, RunResult,
    SoftwareCosts, SoftwareReopen,
};
use support::{create_memory, Support};
use workload::{write_until_stopped, Stores, WRITE_BYTES};

/// The smallest region accepted: a few integrity groups.
pub const MIN_REGION_BYTES: u64 = 16 << 20;
/// Regions are whole MiB (whole stripes and groups, whole writer slices).
pub const REGION_GRANULE_BYTES: u64 = 1 << 20;
pub const MAX_THREADS: usize = 64;
pub const MAX_RUNS: usize = 100;
pub const MIN_PERIOD: Duration = Duration::from_millis(10);
pub const MIN_RUN: Duration = Duration::from_millis(100);
/// The `data_id` that ties the integrity files to their data here.
const DATA_ID: u64 = 0x5452_4143_4b45_5221;
/// How often the sampling threads look at the stop flag or the stats.
const POLL: Duration = Duration::from_millis(5);

/// Who tracks the stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackerKind {
    /// Plain stores into a plain mapping.
    None,
    /// The kernel tracker over plain stores into a plain mapping.
    Kernel,
    /// Stores through Engram's Region, no tracker.
    Region,
    /// Stores through Engram's Region with its integrity layer (software
    /// marks).
    Software,
    /// The kernel tracker over stores through Engram's Region: what
    /// adopting it behind Region's interface would run.
    #[serde(rename = "region-kernel")]
    RegionKernel,
}

impl TrackerKind {
    pub const ALL: [TrackerKind; 5] = [
        TrackerKind::None,
        TrackerKind::Kernel,
        TrackerKind::Region,
        TrackerKind::Software,
        TrackerKind::RegionKernel,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TrackerKind::None => "none",
            TrackerKind::Kernel => "kernel",
            TrackerKind::Region => "region",
            TrackerKind::Software => "software",
            TrackerKind::RegionKernel => "region-kernel",
        }
    }

    /// Whether it runs a collection pass every period.
    pub fn has_pass(self) -> bool {
        matches!(
            self,
            TrackerKind::Software | TrackerKind::Kernel | TrackerKind::RegionKernel
        )
    }

    /// Whether its stores go through Engram's Region (which maps files).
    pub fn uses_region(self) -> bool {
        matches!(
            self,
            TrackerKind::Region | TrackerKind::Software | TrackerKind::RegionKernel
        )
    }

    fn uses_kernel(self) -> bool {
        matches!(self, TrackerKind::Kernel | TrackerKind::RegionKernel)
    }
}

impl std::str::FromStr for TrackerKind {
    type Err = String;
    fn from_str(name: &str) -> std::result::Result<Self, String> {
        TrackerKind::ALL
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                format!(
                    "unknown tracker '{name}' (expected none, kernel, region, software or region-kernel)"
                )
            })
    }
}

impl std::fmt::Display for TrackerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The flags of `engram-bench tracker`.
#[derive(Clone, Debug, clap::Args)]
pub struct TrackerBenchArgs {
    /// Size of the tracked region, MiB.
    #[arg(long, default_value_t = 1024)]
    pub region_mib: u64,
    /// Writer threads (each owns a slice of the region).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Length of each timed run (one per workload, memory and tracker).
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Runs of each (workload, memory, tracker), interleaved; the median
    /// by ops/s is reported, with every run's ops/s in the JSON.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Time between collection passes (start to start), as Engram's
    /// integrity `period`.
    #[arg(long, default_value_t = 1000)]
    pub period_ms: u64,
    /// Workloads, comma-separated: rand8 (random 8-byte stores), rand256
    /// (random 256-byte writes), seq256 (sequential 256-byte appends).
    #[arg(long, value_delimiter = ',', default_value = "rand8,rand256,seq256")]
    pub workloads: Vec<Workload>,
    /// Memory to run on, comma-separated: file (--dir), tmpfs (--shm-dir),
    /// memfd, anon. The support probe always tries all four.
    #[arg(long, value_delimiter = ',', default_value = "file,tmpfs,anon")]
    pub memory: Vec<MemoryKind>,
    /// Trackers, comma-separated: none (plain stores), kernel (plain stores,
    /// uffd-wp async + PAGEMAP_SCAN), region (Engram's Region, untracked),
    /// software (Region + integrity marks), region-kernel (Region + uffd-wp
    /// async + PAGEMAP_SCAN).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,kernel,region,software,region-kernel"
    )]
    pub trackers: Vec<TrackerKind>,
    /// Where file memory (and the integrity files) go [default: a fresh
    /// temporary directory under the current one, removed at the end].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// A tmpfs directory for tmpfs memory (a temporary directory inside it
    /// is used and removed).
    #[arg(long, default_value = "/dev/shm")]
    pub shm_dir: PathBuf,
    /// Skip the crash-gap measurements (full re-checksum warm and cold, the
    /// software tracker's reopen after a crash).
    #[arg(long)]
    pub no_crash_gap: bool,
    /// Keep file memory in 4 KiB page-cache folios, as Engram does with
    /// `fine_writeback` (durability always): no readahead, so no large
    /// folios. Applies to Region's mappings and to the plain ones.
    #[arg(long)]
    pub fine_writeback: bool,
    /// Also write the results as JSON to this file, or to standard output
    /// with `-` (the table then goes to standard error).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct TrackerConfig {
    pub region_bytes: u64,
    pub threads: usize,
    pub run: Duration,
    pub period: Duration,
    pub workloads: Vec<Workload>,
    pub memory: Vec<MemoryKind>,
    pub trackers: Vec<TrackerKind>,
    /// File memory and integrity files go in a temporary directory here.
    pub dir: PathBuf,
    /// tmpfs memory goes in a temporary directory here.
    pub shm_dir: PathBuf,
    pub crash_gap: bool,
    /// Runs of each (workload, memory, tracker); the median is reported.
    pub runs: usize,
    /// File memory in 4 KiB page-cache folios (Region's `fine_writeback`).
    pub fine_writeback: bool,
    /// Progress lines on standard error.
    pub progress: bool,
    pub command: String,
}

impl TrackerConfig {
    /// A small configuration for tests: every tracker and memory, one
    /// workload, short runs.
    pub fn small(dir: &Path) -> TrackerConfig {
        TrackerConfig {
            region_bytes: 64 << 20,
            threads: 2,
            run: Duration::from_secs(1),
            period: Duration::from_millis(250),
            workloads: vec![Workload::Random8],
            memory: vec![MemoryKind::File, MemoryKind::Tmpfs, MemoryKind::Anon],
            trackers: TrackerKind::ALL.to_vec(),
            dir: dir.to_path_buf(),
            shm_dir: PathBuf::from("/dev/shm"),
            crash_gap: true,
            runs: 1,
            fine_writeback: false,
            progress: false,
            command: "engram-bench tracker (test)".into(),
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.region_bytes < MIN_REGION_BYTES
            || !self.region_bytes.is_multiple_of(REGION_GRANULE_BYTES)
        {
            return Err(TrackerBenchError::flag(
                "region-mib",
                format!(
                    "must be a whole number of MiB, at least {}",
                    MIN_REGION_BYTES >> 20
                ),
            ));
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(TrackerBenchError::flag(
                "threads",
                format!("must be from 1 to {MAX_THREADS}, got {}", self.threads),
            ));
        }
        if self.run < MIN_RUN {
            return Err(TrackerBenchError::flag(
                "seconds",
                format!("must be at least {:?}", MIN_RUN),
            ));
        }
        if self.period < MIN_PERIOD || self.period > MAX_PERIOD {
            return Err(TrackerBenchError::flag(
                "period-ms",
                format!(
                    "must be from {} to {} ms",
                    MIN_PERIOD.as_millis(),
                    MAX_PERIOD.as_millis()
                ),
            ));
        }
        if self.runs == 0 || self.runs > MAX_RUNS {
            return Err(TrackerBenchError::flag(
                "runs",
                format!("must be from 1 to {MAX_RUNS}, got {}", self.runs),
            ));
        }
        for (flag, empty) in [
            ("workloads", self.workloads.is_empty()),
            ("memory", self.memory.is_empty()),
            ("trackers", self.trackers.is_empty()),
        ] {
            if empty {
                return Err(TrackerBenchError::flag(flag, "name at least one"));
            }
        }
        Ok(())
    }

    fn pages(&self) -> u64 {
        self.region_bytes / PAGE_BYTES
    }

    fn note(&self, message: std::fmt::Arguments) {
        if self.progress {
            eprintln!("tracker: {message}");
        }
    }
}

/// The working directories: one under `dir`, one under `shm_dir` (if it is
/// a directory); both removed when dropped.
struct Dirs {
    base: tempfile::TempDir,
    shm: Option<tempfile::TempDir>,
    next: usize,
}

impl Dirs {
    fn new(config: &TrackerConfig) -> Result<Dirs> {
        let base = tempfile::Builder::new()
            .prefix("engram-tracker-")
            .tempdir_in(&config.dir)
            .map_err(|e| TrackerBenchError::io("creating a directory in", &config.dir, e))?;
        let shm = tempfile::Builder::new()
            .prefix("engram-tracker-")
            .tempdir_in(&config.shm_dir)
            .ok();
        Ok(Dirs { base, shm, next: 0 })
    }

    fn base(&self) -> &Path {
        self.base.path()
    }

    /// The tmpfs directory, or the base directory when there is none (the
    /// tmpfs runs are then refused before anything is put there).
    fn shm(&self) -> &Path {
        self.shm.as_ref().map_or(self.base.path(), |dir| dir.path())
    }

    /// A fresh directory for one run's files, on the memory's file system.
    fn fresh(&mut self, memory: MemoryKind) -> Result<PathBuf> {
        self.next += 1;
        let parent = if memory == MemoryKind::Tmpfs {
            self.shm()
        } else {
            self.base()
        };
        let dir = parent.join(format!("run-{}", self.next));
        std::fs::create_dir(&dir).map_err(|e| TrackerBenchError::io("creating", &dir, e))?;
        Ok(dir)
    }
}

fn remove_dir(dir: &Path) {
    if let Err(error) = std::fs::remove_dir_all(dir) {
        log::warn!("could not remove {}: {error}", dir.display());
    }
}

/// Runs every measurement `config` asks for.
pub fn run(config: &TrackerConfig) -> Result<Report> {
    config.validate()?;
    let mut dirs = Dirs::new(config)?;
    let shm_file_system = dirs
        .shm
        .as_ref()
        .and_then(|_| memory::file_system_name(&config.shm_dir).ok());
    let kernel = match kernel::offered_features() {
        Ok(features) => KernelInfo {
            wp_async_offered: features & kernel::UFFD_FEATURE_WP_ASYNC != 0,
            features: kernel::feature_names(features),
            error: None,
        },
        Err(error) => KernelInfo {
            wp_async_offered: false,
            features: Vec::new(),
            error: Some(error.to_string()),
        },
    };
    let support: Vec<Support> = MemoryKind::ALL
        .into_iter()
        .map(|memory| {
            if memory == MemoryKind::Tmpfs && dirs.shm.is_none() {
                return Support::refused(memory, no_tmpfs(config));
            }
            support::probe(memory, dirs.base(), dirs.shm())
        })
        .collect();
    for s in &support {
        config.note(format_args!(
            "{}: uffd-wp async {}",
            s.memory,
            if s.supported {
                "works".to_string()
            } else {
                format!("refused: {}", s.reason.as_deref().unwrap_or("?"))
            }
        ));
    }
    let support_of =
        |memory: MemoryKind| support.iter().find(|s| s.memory == memory).expect("probed");

    let mut costs = Vec::new();
    for &memory in &config.memory {
        if memory == MemoryKind::Tmpfs && dirs.shm.is_none() {
            continue;
        }
        config.note(format_args!("per-page costs on {memory}"));
        costs.push(page_costs(config, memory, support_of(memory), &mut dirs)?);
    }

    // Every round runs every pair once; the order of the trackers flips
    // from one (round, workload) block to the next. The reported run of a
    // pair is its median by ops/s.
    let mut measured: Vec<RunResult> = Vec::new();
    let pairs = config.workloads.len() * config.memory.len() * config.trackers.len();
    let total = pairs * config.runs;
    let mut index = 0;
    for round in 0..config.runs {
        for (block, &workload) in config.workloads.iter().enumerate() {
            let mut trackers = config.trackers.clone();
            if (round + block) % 2 == 1 {
                trackers.reverse();
            }
            for &memory in &config.memory {
                for &tracker in &trackers {
                    index += 1;
                    let refused = refusal(
                        config,
                        memory,
                        tracker,
                        support_of(memory),
                        dirs.shm.is_some(),
                    );
                    let result = match refused {
                        Some(_) if round > 0 => continue,
                        Some(why) => RunResult::unsupported(workload, memory, tracker, why),
                        None => {
                            config.note(format_args!(
                                "[{index}/{total}] {workload} on {memory}, {tracker}"
                            ));
                            run_one(config, workload, memory, tracker, &mut dirs)?
                        }
                    };
                    if result.unsupported.is_none() {
                        config.note(format_args!(
                            "[{index}/{total}] {workload} on {memory}, {tracker}: {:.0} ops/s, {} passes, \
                             other processes {:.2} cores",
                            result.ops_per_sec,
                            result.passes,
                            result.other_cores.unwrap_or(f64::NAN)
                        ));
                    }
                    measured.push(result);
                }
            }
        }
    }
    let mut runs = median_runs(measured);
    let baselines: Vec<(Workload, MemoryKind, f64)> = runs
        .iter()
        .filter(|r| r.tracker == TrackerKind::None && r.unsupported.is_none())
        .map(|r| (r.workload, r.memory, r.ops_per_sec))
        .collect();
    for r in runs
        .iter_mut()
        .filter(|r| r.tracker != TrackerKind::None && r.unsupported.is_none())
    {
        r.ratio_to_baseline = baselines
            .iter()
            .find(|(w, m, _)| *w == r.workload && *m == r.memory)
            .filter(|(_, _, base)| *base > 0.0)
            .map(|(_, _, base)| r.ops_per_sec / base);
    }
    let regions: Vec<(Workload, MemoryKind, f64)> = runs
        .iter()
        .filter(|r| r.tracker == TrackerKind::Region && r.unsupported.is_none())
        .map(|r| (r.workload, r.memory, r.ops_per_sec))
        .collect();
    for r in runs.iter_mut().filter(|r| {
        r.tracker.uses_region() && r.tracker != TrackerKind::Region && r.unsupported.is_none()
    }) {
        r.ratio_to_region = regions
            .iter()
            .find(|(w, m, _)| *w == r.workload && *m == r.memory)
            .filter(|(_, _, base)| *base > 0.0)
            .map(|(_, _, base)| r.ops_per_sec / base);
    }
    // Sort for reading: workload, memory, tracker (run order alternated).
    runs.sort_by_key(|r| (r.workload, r.memory, r.tracker));

    let crash_gap = if config.crash_gap {
        config.note(format_args!(
            "crash gap: full re-checksum, warm and cold; software reopen"
        ));
        Some(crash_gap(config, &mut dirs)?)
    } else {
        None
    };

    Ok(Report {
        config: ReportConfig {
            command: config.command.clone(),
            region_bytes: config.region_bytes,
            threads: config.threads,
            seconds: config.run.as_secs_f64(),
            runs: config.runs,
            period_ms: config.period.as_millis() as u64,
            stripe_pages: DEFAULT_STRIPE_PAGES,
            write_bytes: WRITE_BYTES,
            workloads: config.workloads.clone(),
            memory: config.memory.clone(),
            trackers: config.trackers.clone(),
            dir: config.dir.display().to_string(),
            dir_file_system: memory::file_system_name(&config.dir).ok(),
            shm_dir: config.shm_dir.display().to_string(),
            shm_file_system,
            fine_writeback: config.fine_writeback,
            machine: Machine::this(),
        },
        kernel,
        support,
        costs,
        runs,
        crash_gap,
    })
}

/// One result per (workload, memory, tracker): the median run by ops/s,
/// carrying every run's ops/s.
fn median_runs(measured: Vec<RunResult>) -> Vec<RunResult> {
    let mut groups: Vec<Vec<RunResult>> = Vec::new();
    for result in measured {
        let key = (result.workload, result.memory, result.tracker);
        match groups
            .iter_mut()
            .find(|group| (group[0].workload, group[0].memory, group[0].tracker) == key)
        {
            Some(group) => group.push(result),
            None => groups.push(vec![result]),
        }
    }
    groups
        .into_iter()
        .map(|mut group| {
            let all: Vec<f64> = group.iter().map(|r| r.ops_per_sec).collect();
            group.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
            let mut median = group.swap_remove(group.len() / 2);
            median.runs_ops_per_sec = all;
            median
        })
        .collect()
}

fn no_tmpfs(config: &TrackerConfig) -> String {
    format!("no usable tmpfs directory at {}", config.shm_dir.display())
}

/// Why a (memory, tracker) pair is not measured, if it is not.
fn refusal(
    config: &TrackerConfig,
    memory: MemoryKind,
    tracker: TrackerKind,
    support: &Support,
    have_shm: bool,
) -> Option<String> {
    if memory == MemoryKind::Tmpfs && !have_shm {
        return Some(no_tmpfs(config));
    }
    if tracker.uses_region() && !memory.has_path() {
        return Some(format!(
            "Engram's Region maps files by path; {memory} memory has none"
        ));
    }
    if tracker.uses_kernel() && !support.supported {
        return Some(format!(
            "uffd-wp async unsupported on {memory}: {}",
            support.reason.as_deref().unwrap_or("unknown reason")
        ));
    }
    None
}

fn region_options(bytes: u64, fine_writeback: bool) -> RegionOptions {
    RegionOptions {
        mode: ModeChoice::Emulated,
        reserve_bytes: bytes,
        populate: true,
        fine_writeback,
        ..RegionOptions::default()
    }
}

fn map_options(config: &TrackerConfig) -> MapOptions {
    MapOptions {
        populate: true,
        fine_writeback: config.fine_writeback,
    }
}

// `IntegrityOptions` has a `faults` field only when the integrity crate's
// `fault-injection` feature is on (a workspace test build turns it on,
// `-p engram-bench` alone does not): the struct update serves both.
#[allow(clippy::needless_update)]
fn integrity_options(period: Duration) -> IntegrityOptions {
    IntegrityOptions {
        mode: IntegrityMode::Lazy,
        period,
        stripe_pages: DEFAULT_STRIPE_PAGES,
        scrub_bytes_per_sec: 0,
        ..IntegrityOptions::default()
    }
}

/// What the thread beside the writers saw: the passes, or why it stopped.
struct Side {
    passes: Vec<PassRecord>,
    error: Option<String>,
}

struct Timed {
    ops: u64,
    elapsed: Duration,
    side: Side,
    /// System-wide pages written back during the run (`nr_written`).
    written_back_pages: Option<u64>,
    /// Cores' worth of CPU other processes used during the run.
    other_cores: Option<f64>,
}

/// A counter of `/proc/vmstat`.
fn vmstat(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Runs the writers over `stores` (of `len` bytes) for the configured time,
/// with `side` on a thread of its own from the same start.
fn timed<S, F>(stores: &S, len: u64, config: &TrackerConfig, workload: Workload, side: F) -> Timed
where
    S: Stores + ?Sized,
    F: FnOnce(Instant, &AtomicBool) -> Side + Send,
{
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(config.threads + 1);
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..config.threads)
            .map(|thread| {
                let (stop, barrier) = (&stop, &barrier);
                let slice = workload::slice(len, config.threads, thread);
                scope.spawn(move || {
                    barrier.wait();
                    write_until_stopped(stores, workload, slice, 0x1000 + thread as u64, stop)
                })
            })
            .collect();
        let written_before = vmstat("nr_written");
        let cpu_before = CpuTimes::now();
        barrier.wait();
        let start = Instant::now();
        let side = {
            let stop = &stop;
            scope.spawn(move || side(start, stop))
        };
        std::thread::sleep(config.run);
        stop.store(true, Ordering::Release);
        let ops = writers
            .into_iter()
            .map(|writer| writer.join().expect("a writer thread panicked"))
            .sum();
        let elapsed = start.elapsed();
        let written_back_pages = vmstat("nr_written")
            .zip(written_before)
            .map(|(after, before)| after.saturating_sub(before));
        // Cores' worth of CPU that other processes used.
        let other_cores = CpuTimes::now()
            .zip(cpu_before)
            .and_then(|(after, before)| after.others_share_since(&before))
            .zip(cpu_time::machine_cores())
            .map(|(share, cores)| share * cores as f64);
        let side = side.join().expect("the collection thread panicked");
        Timed {
            ops,
            elapsed,
            side,
            written_back_pages,
            other_cores,
        }
    })
}

/// Sleeps until `deadline`; false if `stop` was set first.
fn wait_until(deadline: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(POLL));
    }
}

fn run_one(
    config: &TrackerConfig,
    workload: Workload,
    memory: MemoryKind,
    tracker: TrackerKind,
    dirs: &mut Dirs,
) -> Result<RunResult> {
    // Write back whatever is dirty (other processes' files too) before this
    // run dirties its own gigabyte: background writeback starts when the
    // machine's dirty pages pass a threshold, and it write-protects every
    // page it writes, ours included, so a run that crossed it would pay a
    // fault per page. (Not after creating the data: that is the fault.)
    if let Err(error) = std::process::Command::new("sync").status() {
        log::warn!("running sync: {error}");
    }
    let dir = dirs.fresh(memory)?;
    let result = run_in(config, workload, memory, tracker, &dir);
    remove_dir(&dir);
    result
}

fn run_in(
    config: &TrackerConfig,
    workload: Workload,
    memory: MemoryKind,
    tracker: TrackerKind,
    dir: &Path,
) -> Result<RunResult> {
    let len = config.region_bytes;
    let data_path = dir.join("data");
    let pages = config.pages();
    // The run's directory is already on the memory's file system. Every
    // run starts with each page stored to once (so, with fine writeback,
    // which maps new pages for reading only, no run pays first-write
    // faults that another does not).
    let create = || -> Result<Mapping> {
        let mapping = create_memory(memory, dir, dir, "data", len, map_options(config))
            .map_err(|e| TrackerBenchError::io("creating the data mapping in", dir, e))?;
        touch_every_page(&mapping, pages, 1);
        Ok(mapping)
    };
    let create_region = || -> Result<Region> {
        let region = Region::create(&data_path, len, region_options(len, config.fine_writeback))?;
        Ok(region)
    };
    let timed = match tracker {
        TrackerKind::None => {
            let mapping = create()?;
            timed(&mapping, len, config, workload, |_, _| Side {
                passes: Vec::new(),
                error: None,
            })
        }
        TrackerKind::Region => {
            let region = create_region()?;
            touch_every_page(&region, pages, 1);
            timed(&region, len, config, workload, |_, _| Side {
                passes: Vec::new(),
                error: None,
            })
        }
        TrackerKind::Software => {
            let region = Arc::new(create_region()?);
            let (integrity, _) = Integrity::open(
                dir,
                Arc::clone(&region),
                DATA_ID,
                integrity_options(config.period),
                None,
            )?;
            touch_every_page(&*region, pages, 1);
            integrity.refresh_now();
            // Let the background pass that was scheduled at open go by, so
            // the timed passes fall a period apart from the run's start, as
            // the kernel collector's do. (`refresh_now` counts as a pass.)
            let passes_before = integrity.stats().passes;
            let deadline = Instant::now() + 2 * config.period + Duration::from_secs(1);
            while integrity.stats().passes == passes_before && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            let timed = timed(&*region, len, config, workload, |start, stop| {
                monitor_software(&integrity, start, stop)
            });
            integrity.abandon();
            timed
        }
        TrackerKind::RegionKernel => {
            let region = create_region()?;
            touch_every_page(&region, pages, 1);
            let address = region.read(PmemOffset(0), 8).as_ptr() as u64;
            let mut redundancy = PageRedundancy::create(
                &dir.join("kernel-redundancy"),
                len / PAGE_BYTES,
                DEFAULT_STRIPE_PAGES,
            )
            .map_err(|e| TrackerBenchError::io("creating the redundancy file in", dir, e))?;
            let mut tracker = match WriteTracker::register(address, len)
                .and_then(|tracker| tracker.protect_all().map(|()| tracker))
            {
                Ok(tracker) => tracker,
                Err(error) => {
                    return Ok(RunResult::unsupported(
                        workload,
                        memory,
                        tracker,
                        error.to_string(),
                    ))
                }
            };
            redundancy.refresh_all(&region);
            let period = config.period;
            let region = &region;
            timed(region, len, config, workload, move |start, stop| {
                collect_kernel(&mut tracker, &mut redundancy, region, period, start, stop)
            })
        }
        TrackerKind::Kernel => {
            let mapping = create()?;
            let mut redundancy = PageRedundancy::create(
                &dir.join("kernel-redundancy"),
                mapping.pages(),
                DEFAULT_STRIPE_PAGES,
            )
            .map_err(|e| TrackerBenchError::io("creating the redundancy file in", dir, e))?;
            let mut tracker = match WriteTracker::register(mapping.address(), mapping.len())
                .and_then(|tracker| tracker.protect_all().map(|()| tracker))
            {
                Ok(tracker) => tracker,
                Err(error) => {
                    return Ok(RunResult::unsupported(
                        workload,
                        memory,
                        TrackerKind::Kernel,
                        error.to_string(),
                    ))
                }
            };
            redundancy.refresh_all(&mapping);
            let period = config.period;
            let mapping = &mapping;
            timed(mapping, len, config, workload, move |start, stop| {
                collect_kernel(&mut tracker, &mut redundancy, mapping, period, start, stop)
            })
        }
    };
    if let Some(error) = &timed.side.error {
        return Ok(RunResult::unsupported(
            workload,
            memory,
            tracker,
            format!("the collection pass failed: {error}"),
        ));
    }
    Ok(summarise(config, workload, memory, tracker, timed))
}

/// The kernel tracker's collection thread: every `period`, collect and
/// re-protect the written pages, then refresh their redundancy.
fn collect_kernel<D: PageSource + Sync + ?Sized>(
    tracker: &mut WriteTracker,
    redundancy: &mut PageRedundancy,
    mapping: &D,
    period: Duration,
    start: Instant,
    stop: &AtomicBool,
) -> Side {
    let mut passes = Vec::new();
    let mut written = Vec::new();
    let mut next = start + period;
    while wait_until(next, stop) {
        let began = Instant::now();
        let collected = match tracker.collect_written(&mut written) {
            Ok(collected) => collected,
            Err(error) => {
                return Side {
                    passes,
                    error: Some(error.to_string()),
                }
            }
        };
        let scanned = began.elapsed();
        redundancy.refresh(mapping, &written);
        let took = began.elapsed();
        passes.push(PassRecord {
            at_ms: (began - start).as_secs_f64() * 1e3,
            pages: collected.pages,
            pass_ms: took.as_secs_f64() * 1e3,
            scan_ms: Some(scanned.as_secs_f64() * 1e3),
            scan_calls: Some(collected.ioctl_calls),
        });
        // Start to start; a pass longer than the period is followed at once
        // (as Engram's integrity thread does).
        next = (next + period).max(Instant::now());
    }
    Side {
        passes,
        error: None,
    }
}

/// Engram's passes run on its own thread; this one reads its statistics
/// and records each pass as it completes.
fn monitor_software(integrity: &Integrity, start: Instant, stop: &AtomicBool) -> Side {
    let mut last = integrity.stats();
    let mut passes = Vec::new();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(POLL);
        let now = integrity.stats();
        if now.passes > last.passes {
            let duration = now.last_pass_duration;
            passes.push(PassRecord {
                at_ms: (start.elapsed().saturating_sub(duration)).as_secs_f64() * 1e3,
                pages: (now.pages_refreshed - last.pages_refreshed) / (now.passes - last.passes),
                pass_ms: duration.as_secs_f64() * 1e3,
                scan_ms: None,
                scan_calls: None,
            });
            last = now;
        }
    }
    Side {
        passes,
        error: None,
    }
}

fn summarise(
    config: &TrackerConfig,
    workload: Workload,
    memory: MemoryKind,
    tracker: TrackerKind,
    timed: Timed,
) -> RunResult {
    let seconds = timed.elapsed.as_secs_f64();
    let passes = &timed.side.passes;
    let count = passes.len() as u64;
    let mean = |values: &mut dyn Iterator<Item = f64>| {
        let (sum, n) = values.fold((0.0, 0u64), |(sum, n), v| (sum + v, n + 1));
        if n == 0 {
            0.0
        } else {
            sum / n as f64
        }
    };
    let pass_ms_total: f64 = passes.iter().map(|p| p.pass_ms).sum();
    let pages_total: u64 = passes.iter().map(|p| p.pages).sum();
    let scan_ms_total: Option<f64> = passes.iter().map(|p| p.scan_ms).sum();
    RunResult {
        workload,
        memory,
        tracker,
        unsupported: None,
        ops: timed.ops,
        seconds,
        ops_per_sec: timed.ops as f64 / seconds,
        ratio_to_baseline: None,
        ratio_to_region: None,
        passes: count,
        pages_per_pass: mean(&mut passes.iter().map(|p| p.pages as f64)),
        pass_ms_mean: mean(&mut passes.iter().map(|p| p.pass_ms)),
        pass_ms_max: passes.iter().map(|p| p.pass_ms).fold(0.0, f64::max),
        pass_busy_fraction: pass_ms_total / 1e3 / seconds,
        scan_ms_mean: scan_ms_total
            .filter(|_| count > 0)
            .map(|total| total / count as f64),
        scan_ns_per_written_page: scan_ms_total
            .filter(|_| pages_total > 0)
            .map(|total| total * 1e6 / pages_total as f64),
        scan_ns_per_region_page: scan_ms_total
            .filter(|_| count > 0)
            .map(|total| total * 1e6 / (count * config.pages()) as f64),
        written_back_pages: timed.written_back_pages,
        other_cores: timed.other_cores,
        runs_ops_per_sec: vec![timed.ops as f64 / seconds],
        pass_list: timed.side.passes,
    }
}

/// One 8-byte store to the start of every page; ns per page.
fn touch_every_page<S: Stores + ?Sized>(stores: &S, pages: u64, value: u64) -> f64 {
    let began = Instant::now();
    for page in 0..pages {
        stores.store_u64(page * PAGE_BYTES, value ^ page);
    }
    began.elapsed().as_nanos() as f64 / pages as f64
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

fn page_costs(
    config: &TrackerConfig,
    memory: MemoryKind,
    support: &Support,
    dirs: &mut Dirs,
) -> Result<PageCosts> {
    let dir = dirs.fresh(memory)?;
    let costs = page_costs_in(config, memory, support, &dir);
    remove_dir(&dir);
    costs
}

fn page_costs_in(
    config: &TrackerConfig,
    memory: MemoryKind,
    support: &Support,
    dir: &Path,
) -> Result<PageCosts> {
    let len = config.region_bytes;
    let pages = config.pages();
    let create = |name: &str| -> Result<Mapping> {
        create_memory(memory, dir, dir, name, len, map_options(config))
            .map_err(|e| TrackerBenchError::io("creating a mapping in", dir, e))
    };

    // Each part removes its files when done: dirty page cache left behind
    // would push the kernel into background writeback during later parts
    // and runs, and writeback write-protects pages (a fault at the next
    // store to each).
    let remove = |names: &[&str]| {
        for name in names {
            let _ = std::fs::remove_file(dir.join(name));
        }
    };
    let plain_store_ns = {
        let mapping = create("plain")?;
        touch_every_page(&mapping, pages, 1);
        touch_every_page(&mapping, pages, 2)
    };
    remove(&["plain"]);

    let (kernel, kernel_error) = if !support.supported {
        (None, support.reason.clone())
    } else {
        let mapping = create("kernel")?;
        let mut redundancy =
            PageRedundancy::create(&dir.join("kernel-redundancy"), pages, DEFAULT_STRIPE_PAGES)
                .map_err(|e| TrackerBenchError::io("creating the redundancy file in", dir, e))?;
        touch_every_page(&mapping, pages, 1);
        let began = Instant::now();
        let registered = WriteTracker::register(mapping.address(), mapping.len())
            .and_then(|tracker| tracker.protect_all().map(|()| tracker));
        match registered {
            Err(error) => (None, Some(error.to_string())),
            Ok(mut tracker) => {
                let register_and_protect_ms = ms(began);
                let mut written = Vec::new();
                let began = Instant::now();
                let idle = tracker.collect_written(&mut written);
                let scan_idle_ms = ms(began);
                let first_store_ns = touch_every_page(&mapping, pages, 2);
                let later_store_ns = touch_every_page(&mapping, pages, 3);
                let began = Instant::now();
                let all = tracker.collect_written(&mut written);
                let scan_all_written_ms = ms(began);
                match (idle, all) {
                    (Ok(_), Ok(all)) => {
                        redundancy.refresh_all(&mapping);
                        let began = Instant::now();
                        redundancy.refresh_all(&mapping);
                        let full_pass_ms = ms(began);
                        (
                            Some(KernelCosts {
                                register_and_protect_ms,
                                scan_idle_ms,
                                first_store_ns,
                                later_store_ns,
                                scan_all_written_ms,
                                scan_ns_per_page: scan_all_written_ms * 1e6 / pages as f64,
                                scan_all_written_pages: all.pages,
                                full_pass_ms,
                            }),
                            None,
                        )
                    }
                    (Err(error), _) | (_, Err(error)) => (None, Some(error.to_string())),
                }
            }
        }
    };

    remove(&["kernel", "kernel-redundancy"]);

    let software = if !memory.has_path() {
        None
    } else {
        let region = Arc::new(Region::create(
            &dir.join("software"),
            len,
            region_options(len, config.fine_writeback),
        )?);
        let began = Instant::now();
        // No background pass during the measurement: the longest period.
        let (integrity, _) = Integrity::open(
            dir,
            Arc::clone(&region),
            DATA_ID,
            integrity_options(MAX_PERIOD),
            None,
        )?;
        let open_ms = ms(began);
        touch_every_page(&*region, pages, 1);
        let began = Instant::now();
        integrity.refresh_now();
        let initial_refresh_ms = ms(began);
        let first_store_ns = touch_every_page(&*region, pages, 2);
        let later_store_ns = touch_every_page(&*region, pages, 3);
        let began = Instant::now();
        integrity.refresh_now();
        let full_pass_ms = ms(began);
        integrity.abandon();
        drop(integrity);
        drop(region);
        remove(&["software", engram_integrity::FILE_NAME]);
        Some(SoftwareCosts {
            open_ms,
            initial_refresh_ms,
            first_store_ns,
            later_store_ns,
            full_pass_ms,
        })
    };

    Ok(PageCosts {
        memory,
        pages,
        plain_store_ns,
        kernel,
        kernel_error,
        software,
    })
}

fn crash_gap(config: &TrackerConfig, dirs: &mut Dirs) -> Result<CrashGap> {
    let dir = dirs.fresh(MemoryKind::File)?;
    let gap = crash_gap_in(config, &dir);
    remove_dir(&dir);
    gap
}

fn crash_gap_in(config: &TrackerConfig, dir: &Path) -> Result<CrashGap> {
    let len = config.region_bytes;
    let pages = config.pages();
    let data_path = dir.join("data");
    let io = |action| move |e| TrackerBenchError::io(action, dir, e);

    // The kernel tracker after any crash: every page, warm then cold.
    let mapping = Mapping::create_file(&data_path, len, map_options(config))
        .map_err(io("creating the data file in"))?;
    touch_every_page(&mapping, pages, 7);
    let mut redundancy =
        PageRedundancy::create(&dir.join("kernel-redundancy"), pages, DEFAULT_STRIPE_PAGES)
            .map_err(io("creating the redundancy file in"))?;
    redundancy.refresh_all(&mapping);
    let began = Instant::now();
    redundancy.refresh_all(&mapping);
    let full_recompute_warm_ms = ms(began);
    let file = mapping
        .file()
        .expect("a file mapping has its file")
        .try_clone()
        .map_err(io("duplicating the descriptor of the data file in"))?;
    drop(mapping);
    let cold = memory::drop_cached_pages(&file).and_then(|()| {
        let mapping = Mapping::open_file(&data_path, MapOptions::LAZY)?;
        let resident = mapping.resident_pages(0, len)?;
        let began = Instant::now();
        redundancy.refresh_all(&mapping);
        Ok((ms(began), resident))
    });
    drop(file);
    let (full_recompute_cold_ms, cold_resident_pages_before, cold_error) = match cold {
        Ok((cold_ms, resident)) => (Some(cold_ms), Some(resident), None),
        Err(error) => (None, None, Some(error.to_string())),
    };
    drop(redundancy);
    let _ = std::fs::remove_file(&data_path);

    // Engram's software tracker after a process crash: its marks say which
    // pages changed. One page in 16 is written after the last refresh.
    let software = software_reopen(config, dir);
    let (software_reopen, software_error) = match software {
        Ok(reopen) => (Some(reopen), None),
        Err(error) => (None, Some(format!("{error}"))),
    };

    Ok(CrashGap {
        region_bytes: len,
        full_recompute_warm_ms,
        full_recompute_cold_ms,
        cold_resident_pages_before,
        cold_error,
        software_reopen,
        software_error,
    })
}

fn software_reopen(config: &TrackerConfig, dir: &Path) -> Result<SoftwareReopen> {
    let len = config.region_bytes;
    let pages = config.pages();
    let path = dir.join("software");
    let written = {
        let region = Arc::new(Region::create(
            &path,
            len,
            region_options(len, config.fine_writeback),
        )?);
        let (integrity, _) = Integrity::open(
            dir,
            Arc::clone(&region),
            DATA_ID,
            integrity_options(MAX_PERIOD),
            None,
        )?;
        integrity.refresh_now();
        let mut written = 0;
        for page in (0..pages).step_by(16) {
            region.store_u64(PmemOffset(page * PAGE_BYTES + 8), page + 1);
            written += 1;
        }
        // The process "crashes": nothing refreshed, the session left open.
        integrity.abandon();
        written
    };
    let began = Instant::now();
    let region = Arc::new(Region::open(
        &path,
        region_options(len, config.fine_writeback),
    )?);
    let region_open_ms = ms(began);
    let began = Instant::now();
    let (integrity, report) = Integrity::open(
        dir,
        Arc::clone(&region),
        DATA_ID,
        integrity_options(MAX_PERIOD),
        None,
    )?;
    let integrity_open_ms = ms(began);
    let began = Instant::now();
    integrity.refresh_now();
    let refresh_ms = ms(began);
    integrity.abandon();
    Ok(SoftwareReopen {
        pages_written_before_crash: written,
        region_open_ms,
        integrity_open_ms,
        stale_pages_found: report.stale_pages,
        marks_distrusted: report.marks_distrusted,
        refresh_ms,
    })
}

/// `engram-bench tracker`: runs, prints the table, writes the JSON.
pub fn cli(args: TrackerBenchArgs, command: String) -> Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err(TrackerBenchError::flag(
            "seconds",
            "must be a positive number",
        ));
    }
    let output = ReportOutput::create(args.json.as_deref())?;
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|e| TrackerBenchError::io("finding", ".", e))?,
    };
    let config = TrackerConfig {
        region_bytes: args.region_mib.saturating_mul(1 << 20),
        threads: args.threads,
        run: Duration::from_secs_f64(args.seconds),
        period: Duration::from_millis(args.period_ms),
        workloads: args.workloads,
        memory: args.memory,
        trackers: args.trackers,
        dir,
        shm_dir: args.shm_dir,
        crash_gap: !args.no_crash_gap,
        runs: args.runs,
        fine_writeback: args.fine_writeback,
        progress: true,
        command,
    };
    let report = run(&config)?;
    output.write(&report.table(), || report.json())?;
    Ok(())
}
