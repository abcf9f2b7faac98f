//! The report of `engram-bench integrity`: JSON for machines, a table for
//! people.
//!
//! JSON shape (field names are a contract; the test pins the main ones):
//!
//! ```text
//! { "config":  { command, records, key_bytes, value_bytes, threads, seconds,
//!                runs, distribution, flush, stripe_pages, configurations,
//!                workloads, scrub_bytes_per_sec_during_runs, sample_every_ms,
//!                machine: { cores, kernel, cpu } },
//!   "results": [ { configuration, mode, period_ms, workload, read_percent,
//!                  ops_per_sec, ratio_to_off, median_second_ratio_to_off,
//!                  update_p50_us, update_p99_us, update_p999_us,
//!                  read_p50_us, read_p99_us,
//!                  coverage_max_ms, coverage_p99_ms, drain_ms,
//!                  coverage_max_over_period, drain_over_period,
//!                  runs_ops_per_sec, runs_ratio_to_off,
//!                  runs: [ { run, ops_per_sec, ratio_to_off,
//!                            median_second_ops_per_sec,
//!                            median_second_ratio_to_off, ..., coverage,
//!                            scrub } ] }, ... ],
//!   "scrub":   { gb_per_sec, measurements: [ { configuration, workload, run,
//!                  pages_checked, seconds, gb_per_sec, ... } ],
//!                background: { limit_bytes_per_sec, effective_bytes_per_sec,
//!                  measured_bytes_per_sec, ... } } }
//! ```
//!
//! One result per (configuration, workload). `ops_per_sec` is the median
//! run's and the latencies are that run's; `ratio_to_off` is the median of
//! the per-run ratios to `off`. `median_second_ratio_to_off` is the same
//! over each run's median second instead of its mean: robust to a few
//! seconds of interference (on a shared two-core machine another process
//! waking costs a client thread a third of its CPU), which moves the mean
//! of a 30 s run by as much as the effect measured. Coverage (`oldest_stale_age` sampled) and
//! drain (last write until no page is stale) are the worst run's; they are
//! `null` with integrity off, and `drain_ms` is `null` when some run did not
//! drain within two periods and 10 s (at most 10 minutes). Latencies in microseconds, times
//! in milliseconds, GB = 10^9 bytes.

use std::fmt::Write as _;

use serde::Serialize;

use super::cell::{BackgroundScrub, Measured};
use super::paired::PairedResult;
use super::{Config, Configuration, Workload, SAMPLE_EVERY};
use crate::machine::Machine;
use crate::table::{decimals, micros, thousands, trim_line_ends, whole_millis, Column, Table};

/// Bytes in a page the integrity layer checksums.
const PAGE_BYTES: u64 = 4096;

/// The cells table's columns: configuration, ops/s, the three ratios to
/// off, update latencies, coverage and drain, over the period, others.
const CELL_COLUMNS: [Column; 14] = [
    Column::Left(11),
    Column::Right(12),
    Column::Right(7),
    Column::Right(11),
    Column::Right(12),
    Column::Right(9),
    Column::Right(9),
    Column::Right(10),
    Column::Right(10),
    Column::Right(10),
    Column::Right(9),
    Column::Right(7),
    Column::Right(8),
    Column::Right(7),
];

/// The paired table's: configuration, workload, slice, pairs, the ratios.
const PAIRED_COLUMNS: [Column; 7] = [
    Column::Left(11),
    Column::Left(12),
    Column::Right(8),
    Column::Right(7),
    Column::Right(9),
    Column::Right(9),
    Column::Right(16),
];

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: ReportConfig,
    pub results: Vec<CellResult>,
    /// `--paired`: each lazy configuration against off in alternating
    /// slices (then `results` is empty).
    pub paired: Vec<PairedResult>,
    pub scrub: ScrubSummary,
    /// Filled by `run` before `finish`.
    #[serde(skip)]
    pub(super) background_scrub: Option<BackgroundScrub>,
    #[serde(skip)]
    periods: Vec<(String, Option<f64>)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReportConfig {
    pub command: String,
    pub records: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub threads: usize,
    pub seconds: f64,
    pub runs: usize,
    pub distribution: String,
    pub flush: String,
    pub stripe_pages: u32,
    pub configurations: Vec<String>,
    pub workloads: Vec<&'static str>,
    /// Background scrubbing during the timed runs: always 0 (off).
    pub scrub_bytes_per_sec_during_runs: u64,
    pub sample_every_ms: u64,
    pub machine: Machine,
}

#[derive(Clone, Debug, Serialize)]
pub struct CellResult {
    pub configuration: String,
    pub mode: &'static str,
    pub period_ms: Option<f64>,
    pub workload: &'static str,
    pub read_percent: u32,
    pub ops_per_sec: f64,
    pub ratio_to_off: f64,
    /// Median over runs of [`RunResult::median_second_ratio_to_off`].
    pub median_second_ratio_to_off: f64,
    pub update_p50_us: f64,
    pub update_p99_us: f64,
    pub update_p999_us: f64,
    pub read_p50_us: Option<f64>,
    pub read_p99_us: Option<f64>,
    pub coverage_max_ms: Option<f64>,
    pub coverage_p99_ms: Option<f64>,
    pub drain_ms: Option<f64>,
    pub coverage_max_over_period: Option<f64>,
    pub drain_over_period: Option<f64>,
    pub runs_ops_per_sec: Vec<f64>,
    pub runs_ratio_to_off: Vec<f64>,
    pub runs: Vec<RunResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// 1-based.
    pub run: usize,
    pub ops_per_sec: f64,
    pub ratio_to_off: f64,
    /// The median of `ops_per_sec_by_second`.
    pub median_second_ops_per_sec: f64,
    /// Over off's in the same run, both by their median second.
    pub median_second_ratio_to_off: f64,
    pub seconds: f64,
    pub reads: u64,
    pub updates: u64,
    pub update_p50_us: f64,
    pub update_p99_us: f64,
    pub update_p999_us: f64,
    pub update_max_us: f64,
    pub read_p50_us: Option<f64>,
    pub read_p99_us: Option<f64>,
    pub read_p999_us: Option<f64>,
    pub prefill_ops_per_sec: f64,
    /// Throughput in each whole second of the run.
    pub ops_per_sec_by_second: Vec<f64>,
    /// Records compaction moved in each of those seconds.
    pub compaction_moves_by_second: Vec<u64>,
    /// CPU time other processes used during the run, percent of the
    /// machine's (null when /proc cannot say).
    pub other_cpu_percent: Option<f64>,
    /// How long the run waited for other processes to calm down first.
    pub quiet_wait_seconds: f64,
    pub coverage: Option<CoverageResult>,
    pub scrub: Option<ScrubMeasurement>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CoverageResult {
    pub samples: usize,
    pub max_ms: f64,
    pub p99_ms: f64,
    pub drain_ms: Option<f64>,
    pub max_pages_stale: u64,
    pub pages_covered: u64,
    pub passes: u64,
    pub pages_refreshed: u64,
    pub longest_pass_ms: f64,
    pub corruptions_found: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScrubSummary {
    /// Median over the measurements.
    pub gb_per_sec: Option<f64>,
    pub measurements: Vec<ScrubMeasurement>,
    pub background: Option<BackgroundScrubResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScrubMeasurement {
    pub configuration: String,
    pub workload: &'static str,
    pub run: usize,
    pub pages_checked: u64,
    pub pages_stale: u64,
    pub seconds: f64,
    pub gb_per_sec: f64,
    pub corrupt_pages: u64,
    pub unrepairable_pages: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BackgroundScrubResult {
    pub configuration: String,
    pub limit_bytes_per_sec: u64,
    pub seconds: f64,
    pub pages_scrubbed: u64,
    pub sweeps: u64,
    /// Bytes verified over the time watched: what the rate limit let through.
    pub effective_bytes_per_sec: f64,
    /// The layer's `scrub_bytes_per_sec_measured`: speed while working.
    pub measured_bytes_per_sec: u64,
    pub pages_covered: u64,
}

impl Report {
    pub fn new(config: &Config, machine: Machine) -> Report {
        let configurations = config.configurations();
        Report {
            config: ReportConfig {
                command: config.command.clone(),
                records: config.records,
                key_bytes: config.key_bytes,
                value_bytes: config.value_bytes,
                threads: config.threads,
                seconds: config.duration.as_secs_f64(),
                runs: config.runs,
                distribution: config.distribution.to_string(),
                flush: config.flush.name().to_string(),
                stripe_pages: config.stripe_pages,
                configurations: configurations.iter().map(|c| c.name()).collect(),
                workloads: config.workloads().iter().map(|w| w.name()).collect(),
                scrub_bytes_per_sec_during_runs: 0,
                sample_every_ms: SAMPLE_EVERY.as_millis() as u64,
                machine,
            },
            results: Vec::new(),
            paired: Vec::new(),
            scrub: ScrubSummary {
                gb_per_sec: None,
                measurements: Vec::new(),
                background: None,
            },
            background_scrub: None,
            periods: configurations
                .iter()
                .map(|c| (c.name(), c.period().map(|p| p.as_secs_f64() * 1e3)))
                .collect(),
        }
    }

    /// Adds run `run` (0-based) of one cell.
    pub fn add(
        &mut self,
        configuration: Configuration,
        workload: Workload,
        run: usize,
        measured: Measured,
    ) {
        let name = configuration.name();
        let index = match self
            .results
            .iter()
            .position(|r| r.configuration == name && r.workload == workload.name())
        {
            Some(index) => index,
            None => {
                self.results.push(CellResult {
                    configuration: name.clone(),
                    mode: configuration.mode().name(),
                    period_ms: configuration.period().map(|p| p.as_secs_f64() * 1e3),
                    workload: workload.name(),
                    read_percent: workload.read_percent(),
                    ops_per_sec: 0.0,
                    ratio_to_off: f64::NAN,
                    median_second_ratio_to_off: f64::NAN,
                    update_p50_us: 0.0,
                    update_p99_us: 0.0,
                    update_p999_us: 0.0,
                    read_p50_us: None,
                    read_p99_us: None,
                    coverage_max_ms: None,
                    coverage_p99_ms: None,
                    drain_ms: None,
                    coverage_max_over_period: None,
                    drain_over_period: None,
                    runs_ops_per_sec: Vec::new(),
                    runs_ratio_to_off: Vec::new(),
                    runs: Vec::new(),
                });
                self.results.len() - 1
            }
        };
        let us = |ns: u64| ns as f64 / 1e3;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let has_reads = measured.reads > 0;
        let read = |q: f64| has_reads.then(|| us(measured.read_ns.value_at_quantile(q)));
        let scrub = measured.scrub.as_ref().map(|s| ScrubMeasurement {
            configuration: name.clone(),
            workload: workload.name(),
            run: run + 1,
            pages_checked: s.pages_checked,
            pages_stale: s.pages_stale,
            seconds: s.duration.as_secs_f64(),
            gb_per_sec: (s.pages_checked * PAGE_BYTES) as f64
                / s.duration.as_secs_f64().max(f64::MIN_POSITIVE)
                / 1e9,
            corrupt_pages: s.corrupt_pages,
            unrepairable_pages: s.unrepairable_pages,
        });
        let result = RunResult {
            run: run + 1,
            ops_per_sec: measured.ops_per_sec(),
            ratio_to_off: f64::NAN,
            median_second_ops_per_sec: median(&measured.ops_per_sec_by_window).unwrap_or(f64::NAN),
            median_second_ratio_to_off: f64::NAN,
            seconds: measured.elapsed.as_secs_f64(),
            reads: measured.reads,
            updates: measured.updates,
            update_p50_us: us(measured.update_ns.value_at_quantile(0.50)),
            update_p99_us: us(measured.update_ns.value_at_quantile(0.99)),
            update_p999_us: us(measured.update_ns.value_at_quantile(0.999)),
            update_max_us: us(measured.update_ns.max()),
            read_p50_us: read(0.50),
            read_p99_us: read(0.99),
            read_p999_us: read(0.999),
            prefill_ops_per_sec: measured.prefill_ops_per_sec,
            ops_per_sec_by_second: measured.ops_per_sec_by_window.clone(),
            compaction_moves_by_second: measured.moves_by_window.clone(),
            other_cpu_percent: measured.other_cpu.map(|share| share * 100.0),
            quiet_wait_seconds: measured.quiet_wait.as_secs_f64(),
            coverage: measured.coverage.as_ref().map(|c| CoverageResult {
                samples: c.samples,
                max_ms: ms(c.max),
                p99_ms: ms(c.p99),
                drain_ms: c.drain.map(ms),
                max_pages_stale: c.max_pages_stale,
                pages_covered: c.pages_covered,
                passes: c.passes,
                pages_refreshed: c.pages_refreshed,
                longest_pass_ms: ms(c.longest_pass),
                corruptions_found: c.corruptions_found,
            }),
            scrub: scrub.clone(),
        };
        if let Some(scrub) = scrub {
            self.scrub.measurements.push(scrub);
        }
        self.results[index].runs.push(result);
    }

    /// Ratios to `off`, medians and worst cases, the scrub summary.
    pub fn finish(&mut self) {
        // Off's runs of each workload: (mean, median second) throughput.
        let off: Vec<(&'static str, Vec<(f64, f64)>)> = self
            .results
            .iter()
            .filter(|r| r.configuration == Configuration::Off.name())
            .map(|r| {
                (
                    r.workload,
                    r.runs
                        .iter()
                        .map(|run| (run.ops_per_sec, run.median_second_ops_per_sec))
                        .collect(),
                )
            })
            .collect();
        for result in &mut self.results {
            let baseline = off
                .iter()
                .find(|(workload, _)| *workload == result.workload)
                .map(|(_, runs)| runs.clone())
                .unwrap_or_default();
            for run in &mut result.runs {
                let off = baseline.get(run.run - 1);
                run.ratio_to_off = off.map_or(f64::NAN, |off| run.ops_per_sec / off.0);
                run.median_second_ratio_to_off =
                    off.map_or(f64::NAN, |off| run.median_second_ops_per_sec / off.1);
            }
            let median_run = {
                let mut sorted: Vec<&RunResult> = result.runs.iter().collect();
                sorted.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
                sorted[sorted.len() / 2].clone()
            };
            result.ops_per_sec = median_run.ops_per_sec;
            result.update_p50_us = median_run.update_p50_us;
            result.update_p99_us = median_run.update_p99_us;
            result.update_p999_us = median_run.update_p999_us;
            result.read_p50_us = median_run.read_p50_us;
            result.read_p99_us = median_run.read_p99_us;
            result.runs_ops_per_sec = result.runs.iter().map(|r| r.ops_per_sec).collect();
            result.runs_ratio_to_off = result.runs.iter().map(|r| r.ratio_to_off).collect();
            result.ratio_to_off = median(&result.runs_ratio_to_off).unwrap_or(f64::NAN);
            let by_median_second: Vec<f64> = result
                .runs
                .iter()
                .map(|r| r.median_second_ratio_to_off)
                .collect();
            result.median_second_ratio_to_off = median(&by_median_second).unwrap_or(f64::NAN);
            let coverages: Vec<&CoverageResult> = result
                .runs
                .iter()
                .filter_map(|r| r.coverage.as_ref())
                .collect();
            if !coverages.is_empty() {
                let worst = |f: fn(&CoverageResult) -> f64| {
                    coverages.iter().map(|c| f(c)).fold(0.0, f64::max)
                };
                result.coverage_max_ms = Some(worst(|c| c.max_ms));
                result.coverage_p99_ms = Some(worst(|c| c.p99_ms));
                result.drain_ms = coverages
                    .iter()
                    .map(|c| c.drain_ms)
                    .collect::<Option<Vec<f64>>>()
                    .map(|drains| drains.into_iter().fold(0.0, f64::max));
                if let Some(period) = result.period_ms {
                    result.coverage_max_over_period = result.coverage_max_ms.map(|m| m / period);
                    result.drain_over_period = result.drain_ms.map(|d| d / period);
                }
            }
        }
        let speeds: Vec<f64> = self
            .scrub
            .measurements
            .iter()
            .map(|m| m.gb_per_sec)
            .collect();
        self.scrub.gb_per_sec = median(&speeds);
        self.scrub.background = self
            .background_scrub
            .as_ref()
            .map(|b| BackgroundScrubResult {
                configuration: b.configuration.clone(),
                limit_bytes_per_sec: b.limit_bytes_per_sec,
                seconds: b.watched.as_secs_f64(),
                pages_scrubbed: b.pages_scrubbed,
                sweeps: b.sweeps,
                effective_bytes_per_sec: (b.pages_scrubbed * PAGE_BYTES) as f64
                    / b.watched.as_secs_f64().max(f64::MIN_POSITIVE),
                measured_bytes_per_sec: b.measured_bytes_per_sec,
                pages_covered: b.pages_covered,
            });
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain data")
    }

    /// Per workload, each configuration's throughput, its multiple of off's,
    /// update latency, and time to coverage; then the scrubs.
    pub fn table(&self) -> String {
        let mut text = String::new();
        let c = &self.config;
        let _ = writeln!(text, "{}", c.command);
        let _ = writeln!(
            text,
            "{} records, {} B keys, {} B values, {}, {} threads, {} s per run, {} run(s) \
             (median shown), flush {}, stripes of {} pages",
            thousands(c.records as f64),
            c.key_bytes,
            c.value_bytes,
            c.distribution,
            c.threads,
            c.seconds,
            c.runs,
            c.flush,
            c.stripe_pages
        );
        let _ = writeln!(text, "{}", c.machine);
        let _ = writeln!(
            text,
            "Background scrubbing is off during the timed runs (scrub_bytes_per_sec 0): \
             they measure redundancy maintenance only."
        );
        let _ = writeln!(
            text,
            "× off: throughput over off's in the same run (median of the runs; each run's \
             in \"runs × off\"). × off (s): the same\nby each run's median second (robust to \
             seconds of interference). upd: update latency (median run). cover: age of\nthe \
             oldest stale page, sampled every {} ms (worst run's max and p99) = how long a \
             write waits for its protection.\ndrain: last write until no page is stale. \
             cov/P, drain/P: over the lazy period (target ≤ 2). others: CPU other processes\n\
             used during the run (worst run), share of the machine.",
            c.sample_every_ms
        );
        let longest = self
            .periods
            .iter()
            .filter_map(|(_, p)| *p)
            .fold(0.0, f64::max);
        if longest > 0.0 && c.seconds * 1e3 <= longest {
            let _ = writeln!(
                text,
                "NOTE: runs of {} s are not longer than the {} period: its first pass may not \
                 come during the run, which flatters it.",
                c.seconds,
                whole_millis(longest)
            );
        }
        for workload in &c.workloads {
            let rows: Vec<&CellResult> = self
                .results
                .iter()
                .filter(|r| r.workload == *workload)
                .collect();
            let Some(first) = rows.first() else { continue };
            let _ = writeln!(
                text,
                "\n{}: {}% reads, {}% updates",
                workload,
                first.read_percent,
                100 - first.read_percent
            );
            let table = Table::new("  ", &CELL_COLUMNS);
            table.row(
                &mut text,
                &[
                    "config",
                    "ops/s",
                    "× off",
                    "× off (s)",
                    "runs × off",
                    "upd p50",
                    "upd p99",
                    "upd p99.9",
                    "cover max",
                    "cover p99",
                    "drain",
                    "cov/P",
                    "drain/P",
                    "others",
                ],
            );
            for row in rows {
                let ms = |v: Option<f64>| v.map_or(String::new(), whole_millis);
                let x = |v: Option<f64>| decimals(v, 2, "");
                let spread = match row.runs_ratio_to_off.len() {
                    0 | 1 => String::new(),
                    _ => {
                        let low = row
                            .runs_ratio_to_off
                            .iter()
                            .copied()
                            .fold(f64::INFINITY, f64::min);
                        let high = row.runs_ratio_to_off.iter().copied().fold(0.0, f64::max);
                        format!("{low:.2}–{high:.2}")
                    }
                };
                let others = row
                    .runs
                    .iter()
                    .filter_map(|run| run.other_cpu_percent)
                    .fold(None, |max: Option<f64>, p| {
                        Some(max.map_or(p, |m| m.max(p)))
                    })
                    .map_or(String::new(), |p| format!("{p:.0}%"));
                let drain = match (row.coverage_max_ms, row.drain_ms) {
                    (Some(_), None) => "not yet".to_string(),
                    (_, drain) => ms(drain),
                };
                table.row(
                    &mut text,
                    &[
                        &row.configuration,
                        &thousands(row.ops_per_sec),
                        &format!("{:.3}", row.ratio_to_off),
                        &format!("{:.3}", row.median_second_ratio_to_off),
                        &spread,
                        &micros(row.update_p50_us),
                        &micros(row.update_p99_us),
                        &micros(row.update_p999_us),
                        &ms(row.coverage_max_ms),
                        &ms(row.coverage_p99_ms),
                        &drain,
                        &x(row.coverage_max_over_period),
                        &x(row.drain_over_period),
                        &others,
                    ],
                );
            }
        }
        if !self.paired.is_empty() {
            let _ = writeln!(
                text,
                "\npaired: off and the configuration on two stores side by side, taking turns \
                 in slices (off, lazy, lazy, off, ...);\n× off: the median over quads (two pairs, \
                 ABBA) of the configuration's operations over off's; total: all its operations over all of \
                 off's.\nThe lazy store's background pass falls in either store's slices: \
                 this measures the foreground's cost (module docs)."
            );
            let table = Table::new("  ", &PAIRED_COLUMNS);
            table.row(
                &mut text,
                &[
                    "config",
                    "workload",
                    "slice",
                    "pairs",
                    "× off",
                    "total",
                    "pairs × off",
                ],
            );
            for p in &self.paired {
                table.row(
                    &mut text,
                    &[
                        &p.configuration,
                        p.workload,
                        &whole_millis(p.slice_ms),
                        &p.pairs.len().to_string(),
                        &format!("{:.3}", p.median_ratio),
                        &format!("{:.3}", p.total_ratio),
                        &format!("{:.2}–{:.2}", p.worst_ratio, p.best_ratio),
                    ],
                );
            }
        }
        let s = &self.scrub;
        if let Some(gb_per_sec) = s.gb_per_sec {
            let pages: Vec<f64> = s
                .measurements
                .iter()
                .map(|m| m.pages_checked as f64)
                .collect();
            let seconds: Vec<f64> = s.measurements.iter().map(|m| m.seconds).collect();
            let _ = writeln!(
                text,
                "\nscrub_now after a refresh: {gb_per_sec:.2} GB/s (median of {} scrubs, \
                 {} pages = {:.0} MB in {} each, median)",
                s.measurements.len(),
                thousands(median(&pages).unwrap_or(0.0)),
                median(&pages).unwrap_or(0.0) * PAGE_BYTES as f64 / 1e6,
                whole_millis(median(&seconds).unwrap_or(0.0) * 1e3)
            );
        }
        if let Some(b) = &s.background {
            let _ = writeln!(
                text,
                "background scrubber ({}, idle, limit {:.1} MB/s, watched {:.1} s): {:.1} MB/s \
                 verified, {:.2} GB/s while working (scrub_bytes_per_sec_measured), {} sweep(s) \
                 of {} pages",
                b.configuration,
                b.limit_bytes_per_sec as f64 / 1e6,
                b.seconds,
                b.effective_bytes_per_sec / 1e6,
                b.measured_bytes_per_sec as f64 / 1e9,
                b.sweeps,
                thousands(b.pages_covered as f64)
            );
        }
        let busiest = self
            .results
            .iter()
            .flat_map(|r| r.runs.iter().map(move |run| (r, run)))
            .filter_map(|(r, run)| run.other_cpu_percent.map(|p| (p, r, run.run)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((percent, result, run)) = busiest {
            let _ = writeln!(
                text,
                "other processes used up to {percent:.0}% of the machine's CPU during a timed run \
                 ({} {} run {run}; other_cpu_percent in the JSON)",
                result.configuration, result.workload
            );
        }
        let corruptions: u64 = self
            .results
            .iter()
            .flat_map(|r| &r.runs)
            .filter_map(|run| run.coverage.as_ref())
            .map(|c| c.corruptions_found)
            .sum::<u64>()
            + s.measurements.iter().map(|m| m.corrupt_pages).sum::<u64>();
        if corruptions > 0 {
            let _ = writeln!(
                text,
                "WARNING: the integrity layer reported {corruptions} corruption(s) in stores \
                 nothing wrote behind: a bug (see the JSON's coverage and scrub entries)."
            );
        }
        trim_line_ends(&text)
    }
}

/// The median of `values` (the upper one of an even count), ignoring NaN.
fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    Some(sorted[sorted.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_ignore_nan() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[f64::NAN]), None);
    }
}
