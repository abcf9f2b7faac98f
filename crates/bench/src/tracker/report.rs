//! The report of `engram-bench tracker`: JSON for machines (`--json`), a
//! table for people.
//!
//! JSON shape (field names are a contract; the test pins the main ones):
//!
//! ```text
//! { "config":  { command, region_bytes, threads, seconds, runs, period_ms,
//!                stripe_pages, write_bytes, workloads, memory, trackers,
//!                dir, dir_file_system, shm_dir, shm_file_system,
//!                fine_writeback,
//!                machine: { cores, kernel, cpu } },
//!   "kernel":  { wp_async_offered, features, error },
//!   "support": [ { memory, file_system, supported, reason, errno,
//!                  tracks_writes, written_survives_writeback,
//!                  written_survives_reclaim,
//!                  reclaimed_reported_after_refault, notes }, ... ],
//!   "costs":   [ { memory, pages, plain_store_ns, kernel: {...} | null,
//!                  kernel_error, software: {...} | null }, ... ],
//!   "runs":    [ { workload, memory, tracker, unsupported, ops, seconds,
//!                  ops_per_sec, ratio_to_baseline, ratio_to_region,
//!                  passes, pages_per_pass,
//!                  pass_ms_mean, pass_ms_max, pass_busy_fraction,
//!                  scan_ms_mean, scan_ns_per_written_page,
//!                  scan_ns_per_region_page,
//!                  written_back_pages, other_cores, runs_ops_per_sec,
//!                  pass_list: [ { at_ms, pages, pass_ms, scan_ms,
//!                                 scan_calls } ] }, ... ],
//!   "crash_gap": { ... } | null }
//! ```
//!
//! With `--runs N`, each (workload, memory, tracker) runs N times
//! (interleaved) and the median run by ops/s is reported; ratios are of
//! medians.
//!
//! `ratio_to_baseline` is a run's ops/s over the `none` tracker's on the
//! same memory and workload (null for `none` itself, or when there is no
//! baseline); `ratio_to_region` likewise over the `region` tracker's, for
//! the trackers whose stores go through Region (`software`,
//! `region-kernel`). `unsupported` holds why a (memory, tracker) pair was not
//! measured; its numbers are then zero.

use std::fmt::Write as _;

use serde::Serialize;

use super::memory::MemoryKind;
use super::support::Support;
use super::workload::Workload;
use super::TrackerKind;
use crate::machine::Machine;
use crate::table::{decimals, thousands, Column, Table};

/// The uffd-wp support table's columns: memory, file system, supported,
/// the three probes, refault, and the notes.
const SUPPORT_COLUMNS: [Column; 8] = [
    Column::Left(7),
    Column::Left(6),
    Column::Left(9),
    Column::Left(7),
    Column::Left(10),
    Column::Left(10),
    Column::Left(9),
    Column::Left(0),
];

/// The per-page costs table's: memory, a plain store, `|`, the kernel
/// tracker's five figures, `|`, the software tracker's three.
const COST_COLUMNS: [Column; 13] = [
    Column::Left(7),
    Column::Right(7),
    Column::Left(1),
    Column::Right(10),
    Column::Right(8),
    Column::Right(9),
    Column::Right(9),
    Column::Right(8),
    Column::Right(9),
    Column::Left(1),
    Column::Right(10),
    Column::Right(8),
    Column::Right(9),
];

/// The throughput table's: workload, memory, tracker, ops/s, the two
/// ratios, the passes (count, size, time, busy share), the scans,
/// written-back pages, others.
const RUN_COLUMNS: [Column; 14] = [
    Column::Left(8),
    Column::Left(6),
    Column::Left(13),
    Column::Right(12),
    Column::Right(6),
    Column::Right(6),
    Column::Right(6),
    Column::Right(10),
    Column::Right(11),
    Column::Right(5),
    Column::Right(7),
    Column::Right(7),
    Column::Right(9),
    Column::Right(6),
];

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: ReportConfig,
    pub kernel: KernelInfo,
    pub support: Vec<Support>,
    pub costs: Vec<PageCosts>,
    pub runs: Vec<RunResult>,
    pub crash_gap: Option<CrashGap>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReportConfig {
    pub command: String,
    pub region_bytes: u64,
    pub threads: usize,
    pub seconds: f64,
    pub runs: usize,
    pub period_ms: u64,
    pub stripe_pages: u32,
    pub write_bytes: u64,
    pub workloads: Vec<Workload>,
    pub memory: Vec<MemoryKind>,
    pub trackers: Vec<TrackerKind>,
    pub dir: String,
    pub dir_file_system: Option<String>,
    pub shm_dir: String,
    pub shm_file_system: Option<String>,
    /// File memory kept in 4 KiB page-cache folios (`--fine-writeback`).
    pub fine_writeback: bool,
    pub machine: Machine,
}

#[derive(Clone, Debug, Serialize)]
pub struct KernelInfo {
    pub wp_async_offered: bool,
    /// `UFFD_FEATURE_*` names the API handshake reported.
    pub features: Vec<String>,
    /// The handshake itself failed (no userfaultfd at all).
    pub error: Option<String>,
}

/// One page at a time, one thread: what each tracker adds to a store, and
/// what a collection costs, with nothing else running.
#[derive(Clone, Debug, Serialize)]
pub struct PageCosts {
    pub memory: MemoryKind,
    pub pages: u64,
    /// One 8-byte store per page, untracked.
    pub plain_store_ns: f64,
    pub kernel: Option<KernelCosts>,
    pub kernel_error: Option<String>,
    pub software: Option<SoftwareCosts>,
}

#[derive(Clone, Debug, Serialize)]
pub struct KernelCosts {
    /// `UFFDIO_REGISTER` + `UFFDIO_WRITEPROTECT` of the whole region.
    pub register_and_protect_ms: f64,
    /// `PAGEMAP_SCAN` (collect + re-protect) with no page written.
    pub scan_idle_ms: f64,
    /// A store to a protected page: the write-protect fault.
    pub first_store_ns: f64,
    /// A store to a page already written this epoch.
    pub later_store_ns: f64,
    /// `PAGEMAP_SCAN` with every page written: collect and re-protect all.
    pub scan_all_written_ms: f64,
    pub scan_ns_per_page: f64,
    /// Pages that scan reported (every page, if tracking is exact).
    pub scan_all_written_pages: u64,
    /// Checksums and parity of every page (steady state).
    pub full_pass_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SoftwareCosts {
    /// `Integrity::open` on a new file (every page marked stale).
    pub open_ms: f64,
    /// The first refresh of every page (the integrity file's first touch).
    pub initial_refresh_ms: f64,
    /// A store to a page with no mark: persist a mark bit first.
    pub first_store_ns: f64,
    /// A store to a marked page: the gate and a bit test.
    pub later_store_ns: f64,
    /// `refresh_now` with every page stale (steady state).
    pub full_pass_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PassRecord {
    /// When the pass started, from the start of the timed run.
    pub at_ms: f64,
    pub pages: u64,
    pub pass_ms: f64,
    /// Kernel tracker: the `PAGEMAP_SCAN` part of the pass.
    pub scan_ms: Option<f64>,
    pub scan_calls: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub workload: Workload,
    pub memory: MemoryKind,
    pub tracker: TrackerKind,
    pub unsupported: Option<String>,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub ratio_to_baseline: Option<f64>,
    /// Trackers over Region's stores: ops/s over the `region` run's.
    pub ratio_to_region: Option<f64>,
    pub passes: u64,
    pub pages_per_pass: f64,
    pub pass_ms_mean: f64,
    pub pass_ms_max: f64,
    /// Time spent in passes over the run's time (of one core).
    pub pass_busy_fraction: f64,
    pub scan_ms_mean: Option<f64>,
    pub scan_ns_per_written_page: Option<f64>,
    pub scan_ns_per_region_page: Option<f64>,
    /// Pages the kernel wrote back, system-wide, during the run
    /// (`/proc/vmstat nr_written`): writeback write-protects file pages, so
    /// a nonzero count means the run also paid page-fault work.
    pub written_back_pages: Option<u64>,
    /// Cores' worth of CPU other processes used during the run (a shared
    /// machine's noise, made visible).
    pub other_cores: Option<f64>,
    /// Every run's ops/s (the reported run is the median).
    pub runs_ops_per_sec: Vec<f64>,
    pub pass_list: Vec<PassRecord>,
}

impl RunResult {
    pub fn unsupported(
        workload: Workload,
        memory: MemoryKind,
        tracker: TrackerKind,
        why: String,
    ) -> RunResult {
        RunResult {
            workload,
            memory,
            tracker,
            unsupported: Some(why),
            ops: 0,
            seconds: 0.0,
            ops_per_sec: 0.0,
            ratio_to_baseline: None,
            ratio_to_region: None,
            passes: 0,
            pages_per_pass: 0.0,
            pass_ms_mean: 0.0,
            pass_ms_max: 0.0,
            pass_busy_fraction: 0.0,
            scan_ms_mean: None,
            scan_ns_per_written_page: None,
            scan_ns_per_region_page: None,
            written_back_pages: None,
            other_cores: None,
            runs_ops_per_sec: Vec::new(),
            pass_list: Vec::new(),
        }
    }
}

/// What a tracker must do after a crash to trust its checksums again.
#[derive(Clone, Debug, Serialize)]
pub struct CrashGap {
    pub region_bytes: u64,
    /// Kernel tracker: checksums and parity of every page, from the page
    /// cache (a process crash: the data is still cached).
    pub full_recompute_warm_ms: f64,
    /// The same from disk, after the file's cached pages were dropped (a
    /// power failure or reboot).
    pub full_recompute_cold_ms: Option<f64>,
    pub cold_resident_pages_before: Option<u64>,
    pub cold_error: Option<String>,
    /// Engram's software tracker after a process crash.
    pub software_reopen: Option<SoftwareReopen>,
    pub software_error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SoftwareReopen {
    /// Pages stored to after the last refresh, before the crash.
    pub pages_written_before_crash: u64,
    pub region_open_ms: f64,
    pub integrity_open_ms: f64,
    pub stale_pages_found: u64,
    pub marks_distrusted: bool,
    pub refresh_ms: f64,
}

fn yes_no(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

impl Report {
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serialises")
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let c = &self.config;
        let _ = writeln!(
            out,
            "engram-bench tracker: software marks vs uffd-wp async + PAGEMAP_SCAN"
        );
        let _ = writeln!(out, "command: {}", c.command);
        let _ = writeln!(
            out,
            "machine: {} cores, {}, {}",
            c.machine.cores, c.machine.kernel, c.machine.cpu
        );
        let _ = writeln!(
            out,
            "region {} MiB; file memory in {} ({}), tmpfs in {} ({}); {} writer threads; {:.1} s per run; \
             a pass every {} ms; stripes of {} pages{}",
            c.region_bytes >> 20,
            c.dir,
            c.dir_file_system.as_deref().unwrap_or("?"),
            c.shm_dir,
            c.shm_file_system.as_deref().unwrap_or("?"),
            c.threads,
            c.seconds,
            c.period_ms,
            c.stripe_pages,
            if c.fine_writeback { "; fine writeback (4 KiB page-cache folios)" } else { "" }
        );
        let _ = writeln!(out);
        match &self.kernel.error {
            Some(error) => {
                let _ = writeln!(out, "kernel: userfaultfd unavailable: {error}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "kernel: UFFD_FEATURE_WP_ASYNC offered: {}; features: {}",
                    if self.kernel.wp_async_offered {
                        "yes"
                    } else {
                        "no"
                    },
                    self.kernel.features.join(" ")
                );
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "uffd-wp async, by memory (probe: 64 pages written and scanned)"
        );
        // The notes stand two spaces off: the gap and a space of their own.
        let support = Table::new("", &SUPPORT_COLUMNS).gap(" ");
        support.row(
            &mut out,
            &[
                "memory",
                "fs",
                "supported",
                "tracks",
                "kept over",
                "kept over",
                "refault",
                " why not / notes",
            ],
        );
        support.row(
            &mut out,
            &["", "", "", "writes", "msync", "reclaim", "reports"],
        );
        for s in &self.support {
            let mut notes = s.reason.clone().into_iter().collect::<Vec<_>>();
            notes.extend(s.notes.iter().cloned());
            support.row(
                &mut out,
                &[
                    s.memory.name(),
                    s.file_system.as_deref().unwrap_or("-"),
                    if s.supported { "yes" } else { "NO" },
                    yes_no(s.tracks_writes),
                    yes_no(s.written_survives_writeback),
                    yes_no(s.written_survives_reclaim),
                    yes_no(s.reclaimed_reported_after_refault),
                    &format!(" {}", notes.join("; ")),
                ],
            );
        }
        if !self.costs.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "Per page, one thread, nothing else running (one 8-byte store to every page of the region)"
            );
            let costs = Table::new("", &COST_COLUMNS).gap(" ");
            costs.row(
                &mut out,
                &[
                    "memory",
                    "plain",
                    "|",
                    "kernel 1st",
                    "later",
                    "scan idle",
                    "scan all",
                    "scan",
                    "full pass",
                    "|",
                    "sw 1st",
                    "later",
                    "full pass",
                ],
            );
            costs.row(
                &mut out,
                &[
                    "", "ns", "|", "store ns", "ns", "ms", "ms", "ns/page", "ms", "|", "store ns",
                    "ns", "ms",
                ],
            );
            for cost in &self.costs {
                let k = cost.kernel.as_ref();
                let s = cost.software.as_ref();
                costs.row(
                    &mut out,
                    &[
                        cost.memory.name(),
                        &format!("{:.1}", cost.plain_store_ns),
                        "|",
                        &decimals(k.map(|k| k.first_store_ns), 0, "-"),
                        &decimals(k.map(|k| k.later_store_ns), 1, "-"),
                        &decimals(k.map(|k| k.scan_idle_ms), 2, "-"),
                        &decimals(k.map(|k| k.scan_all_written_ms), 1, "-"),
                        &decimals(k.map(|k| k.scan_ns_per_page), 0, "-"),
                        &decimals(k.map(|k| k.full_pass_ms), 0, "-"),
                        "|",
                        &decimals(s.map(|s| s.first_store_ns), 0, "-"),
                        &decimals(s.map(|s| s.later_store_ns), 1, "-"),
                        &decimals(s.map(|s| s.full_pass_ms), 0, "-"),
                    ],
                );
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Throughput: {} threads, {:.1} s per run, median of {} run(s); a pass (collect, checksum, \
             parity) every {} ms; wrback: pages the kernel wrote back meanwhile; others: CPU other \
             processes used",
            c.threads, c.seconds, c.runs, c.period_ms
        );
        let runs = Table::new("", &RUN_COLUMNS).gap(" ");
        // A run not measured: its name, then why, unpadded.
        let unmeasured_columns = [
            RUN_COLUMNS[0],
            RUN_COLUMNS[1],
            RUN_COLUMNS[2],
            Column::Left(0),
        ];
        let unmeasured = Table::new("", &unmeasured_columns).gap(" ");
        runs.row(
            &mut out,
            &[
                "workload",
                "memory",
                "tracker",
                "ops/s",
                "x none",
                "x reg",
                "passes",
                "pages/pass",
                "pass ms",
                "busy",
                "scan ms",
                "scan ns",
                "wrback",
                "others",
            ],
        );
        runs.row(
            &mut out,
            &[
                "", "", "", "", "", "", "", "", "mean/max", "", "mean", "/page", "pages", "cores",
            ],
        );
        for r in &self.runs {
            let names = [r.workload.name(), r.memory.name(), r.tracker.name()];
            if let Some(why) = &r.unsupported {
                let why = format!("not measured: {why}");
                unmeasured.row(&mut out, &[names[0], names[1], names[2], &why]);
                continue;
            }
            let passes = if r.tracker.has_pass() {
                [
                    r.passes.to_string(),
                    thousands(r.pages_per_pass.round()),
                    format!("{:.0}/{:.0}", r.pass_ms_mean, r.pass_ms_max),
                    format!("{:.0}%", r.pass_busy_fraction * 100.0),
                ]
            } else {
                ["-".into(), "-".into(), "-".into(), "-".into()]
            };
            runs.row(
                &mut out,
                &[
                    names[0],
                    names[1],
                    names[2],
                    &thousands(r.ops_per_sec.round()),
                    &decimals(r.ratio_to_baseline, 2, "-"),
                    &decimals(r.ratio_to_region, 2, "-"),
                    &passes[0],
                    &passes[1],
                    &passes[2],
                    &passes[3],
                    &decimals(r.scan_ms_mean, 1, "-"),
                    &decimals(r.scan_ns_per_written_page, 0, "-"),
                    &r.written_back_pages
                        .map_or_else(|| "-".into(), |pages| thousands(pages as f64)),
                    &decimals(r.other_cores, 2, "-"),
                ],
            );
        }
        if let Some(gap) = &self.crash_gap {
            let _ = writeln!(out);
            let _ = writeln!(out, "After a crash ({} MiB region)", gap.region_bytes >> 20);
            let _ = writeln!(
                out,
                "kernel tracker: no record of what changed; re-checksum every page: {:.0} ms from the page cache{}",
                gap.full_recompute_warm_ms,
                match (gap.full_recompute_cold_ms, &gap.cold_error) {
                    (Some(ms), _) => format!(", {ms:.0} ms from disk"),
                    (None, Some(error)) => format!(" (from disk: {error})"),
                    (None, None) => String::new(),
                }
            );
            match (&gap.software_reopen, &gap.software_error) {
                (Some(s), _) => {
                    let _ = writeln!(
                        out,
                        "software tracker, process crash: reopen (region {:.0} ms, integrity {:.0} ms) found {} stale \
                         pages ({} written before the crash), refreshed in {:.0} ms",
                        s.region_open_ms,
                        s.integrity_open_ms,
                        thousands(s.stale_pages_found as f64),
                        thousands(s.pages_written_before_crash as f64),
                        s.refresh_ms
                    );
                }
                (None, Some(error)) => {
                    let _ = writeln!(out, "software tracker reopen failed: {error}");
                }
                (None, None) => {}
            }
        }
        out
    }
}
