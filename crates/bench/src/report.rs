//! The report: JSON for machines (`--json`), a table for people.
//!
//! JSON shape (field names are a contract; tests pin them):
//!
//! ```text
//! { "config":   { command, records, ops, threads, runs, key_bytes,
//!                 value_bytes, distribution, flush, systems, huge_pages,
//!                 machine: { cores, kernel, cpu } },
//!   "results":  [ { system, op, threads, ops_per_sec, p50_ns, p99_ns,
//!                   p999_ns, p9999_ns, max_ns, runs_ops_per_sec }, ... ],
//!   "recovery": [ { system, records, threads, seconds, runs_seconds }, ... ] }
//! ```
//!
//! `ops_per_sec` is the median over the runs, and the latencies are those of
//! the median run; `runs_*` list every run, to show the spread.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::engine::Config;
use crate::machine::Machine;
use crate::runner::Phase;
use crate::systems::SystemKind;
use crate::table::{nanos, significant, thousands, trim_line_ends, Column, Table};
use crate::workload::Op;

/// The table's columns: a name, throughput, three latencies, the multiple;
/// recovery uses the first four (a name, threads, time, the multiple).
const COLUMNS: [Column; 6] = [
    Column::Left(10),
    Column::Right(14),
    Column::Right(11),
    Column::Right(11),
    Column::Right(11),
    Column::Right(11),
];

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: ReportConfig,
    pub results: Vec<OpResult>,
    pub recovery: Vec<RecoveryResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReportConfig {
    pub command: String,
    pub records: u64,
    pub ops: u64,
    pub threads: usize,
    pub runs: usize,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub distribution: String,
    pub flush: String,
    pub systems: Vec<&'static str>,
    /// Whether this process could use transparent huge pages when the
    /// report was made (the kernel's `THP_enabled` for it; None where it
    /// does not say): `--huge-pages`, or off.
    pub huge_pages: Option<bool>,
    pub machine: Machine,
}

#[derive(Clone, Debug, Serialize)]
pub struct OpResult {
    pub system: &'static str,
    pub op: &'static str,
    pub threads: usize,
    pub ops_per_sec: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    pub max_ns: u64,
    pub runs_ops_per_sec: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RecoveryResult {
    pub system: &'static str,
    pub records: u64,
    pub threads: usize,
    /// Median over the runs.
    pub seconds: f64,
    pub runs_seconds: Vec<f64>,
}

/// What is kept of one phase of one run (the histogram itself is dropped).
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub ops_per_sec: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    pub max_ns: u64,
}

impl Sample {
    pub fn of(phase: &Phase) -> Sample {
        let latency = &phase.latency_ns;
        Sample {
            ops_per_sec: phase.ops_per_sec(),
            p50_ns: latency.value_at_quantile(0.50),
            p99_ns: latency.value_at_quantile(0.99),
            p999_ns: latency.value_at_quantile(0.999),
            p9999_ns: latency.value_at_quantile(0.9999),
            max_ns: latency.max(),
        }
    }
}

impl Report {
    pub fn new(config: &Config) -> Report {
        Report {
            config: ReportConfig {
                command: config.command.clone(),
                records: config.records,
                ops: config.ops,
                threads: config.threads,
                runs: config.runs,
                key_bytes: config.key_bytes,
                value_bytes: config.value_bytes,
                distribution: config.distribution.to_string(),
                flush: config.flush.name().to_string(),
                systems: config.systems().into_iter().map(SystemKind::name).collect(),
                huge_pages: engram_memory::huge_pages_allowed(),
                machine: Machine::this(),
            },
            results: Vec::new(),
            recovery: Vec::new(),
        }
    }

    /// Adds the result of `op` on `system` over its runs: the median run.
    pub fn add_result(&mut self, system: SystemKind, op: Op, threads: usize, runs: &[Sample]) {
        assert!(!runs.is_empty(), "a result needs at least one run");
        let mut sorted = runs.to_vec();
        sorted.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        let median = sorted[sorted.len() / 2];
        self.results.push(OpResult {
            system: system.name(),
            op: op.name(),
            threads,
            ops_per_sec: median.ops_per_sec,
            p50_ns: median.p50_ns,
            p99_ns: median.p99_ns,
            p999_ns: median.p999_ns,
            p9999_ns: median.p9999_ns,
            max_ns: median.max_ns,
            runs_ops_per_sec: runs.iter().map(|run| run.ops_per_sec).collect(),
        });
    }

    pub fn add_recovery(
        &mut self,
        system: SystemKind,
        records: u64,
        threads: usize,
        runs: &[Duration],
    ) {
        assert!(!runs.is_empty(), "a recovery result needs at least one run");
        let runs_seconds: Vec<f64> = runs.iter().map(Duration::as_secs_f64).collect();
        let mut sorted = runs_seconds.clone();
        sorted.sort_by(f64::total_cmp);
        self.recovery.push(RecoveryResult {
            system: system.name(),
            records,
            threads,
            seconds: sorted[sorted.len() / 2],
            runs_seconds,
        });
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain data")
    }

    /// Per operation, each system's throughput and latency percentiles and
    /// how many times Engram's throughput it is; then recovery times.
    pub fn table(&self) -> String {
        let mut text = String::new();
        let c = &self.config;
        let _ = writeln!(text, "{}", c.command);
        let _ = writeln!(
            text,
            "{} records, {} ops per phase, {} threads, {} run(s) (median shown), \
             {} B keys, {} B values, {}, flush {}, huge pages {}",
            thousands(c.records as f64),
            thousands(c.ops as f64),
            c.threads,
            c.runs,
            c.key_bytes,
            c.value_bytes,
            c.distribution,
            c.flush,
            match c.huge_pages {
                Some(true) => "on",
                Some(false) => "off",
                None => "unknown",
            }
        );
        let _ = writeln!(text, "{}", c.machine);
        let _ = writeln!(
            text,
            "engram ×: Engram's throughput (recovery: speed) as a multiple of the peer's"
        );
        // A system's rows are indented under its operation's name.
        let table = Table::new("", &COLUMNS);
        for op in Op::ALL {
            let rows: Vec<&OpResult> = self.results.iter().filter(|r| r.op == op.name()).collect();
            if rows.is_empty() {
                continue;
            }
            let engram = rows
                .iter()
                .find(|r| r.system == SystemKind::Engram.name())
                .map(|r| r.ops_per_sec);
            text.push('\n');
            table.row(
                &mut text,
                &[op.name(), "ops/s", "p50", "p99", "p99.9", "engram ×"],
            );
            for row in rows {
                let multiple = match engram {
                    Some(engram) if row.system != SystemKind::Engram.name() => {
                        significant(engram / row.ops_per_sec)
                    }
                    _ => String::new(),
                };
                table.row(
                    &mut text,
                    &[
                        &format!("  {}", row.system),
                        &thousands(row.ops_per_sec),
                        &nanos(row.p50_ns),
                        &nanos(row.p99_ns),
                        &nanos(row.p999_ns),
                        &multiple,
                    ],
                );
            }
        }
        if !self.recovery.is_empty() {
            let records = self.recovery[0].records;
            let _ = writeln!(
                text,
                "\nrecovery: reopen after a crash, {} records",
                thousands(records as f64)
            );
            let recovery = Table::new("", &COLUMNS[..4]);
            recovery.row(&mut text, &["", "threads", "time", "engram ×"]);
            for row in &self.recovery {
                let engram = self
                    .recovery
                    .iter()
                    .find(|r| r.system == SystemKind::Engram.name() && r.threads == row.threads)
                    .map(|r| r.seconds);
                let multiple = match engram {
                    Some(engram) if row.system != SystemKind::Engram.name() => {
                        significant(row.seconds / engram)
                    }
                    _ => String::new(),
                };
                recovery.row(
                    &mut text,
                    &[
                        &format!("  {}", row.system),
                        &row.threads.to_string(),
                        &nanos((row.seconds * 1e9) as u64),
                        &multiple,
                    ],
                );
            }
        }
        // Empty ratio cells would leave trailing blanks.
        trim_line_ends(&text)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::workload::Distribution;

    fn report() -> Report {
        let config = Config {
            records: 1000,
            ops: 500,
            threads: 2,
            runs: 3,
            peers: vec![SystemKind::Volatile],
            flush: engram_engine::FlushInstruction::None,
            key_bytes: 16,
            value_bytes: 200,
            distribution: Distribution::Zipfian,
            dir: PathBuf::from("."),
            progress: false,
            command: "engram-bench engine --runs 3".into(),
        };
        let sample = |ops_per_sec| Sample {
            ops_per_sec,
            p50_ns: 100,
            p99_ns: 2_500,
            p999_ns: 3_000_000,
            p9999_ns: 4_000_000,
            max_ns: 5_000_000,
        };
        let mut report = Report::new(&config);
        let runs = [sample(3.0e6), sample(1.0e6), sample(2.0e6)];
        report.add_result(SystemKind::Engram, Op::Get, 2, &runs);
        report.add_result(SystemKind::Volatile, Op::Get, 2, &[sample(4.0e6)]);
        let durations = [Duration::from_millis(30), Duration::from_millis(10)];
        report.add_recovery(SystemKind::Engram, 1000, 1, &durations[..1]);
        report.add_recovery(SystemKind::Engram, 1000, 2, &durations);
        report
    }

    #[test]
    fn json_has_the_documented_field_names() {
        let json: serde_json::Value = serde_json::from_str(&report().json()).unwrap();
        let keys = |value: &serde_json::Value| -> Vec<String> {
            let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        let sorted = |names: &[&str]| -> Vec<String> {
            let mut names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
            names.sort();
            names
        };
        assert_eq!(keys(&json), sorted(&["config", "results", "recovery"]));
        assert_eq!(
            keys(&json["results"][0]),
            sorted(&[
                "system",
                "op",
                "threads",
                "ops_per_sec",
                "p50_ns",
                "p99_ns",
                "p999_ns",
                "p9999_ns",
                "max_ns",
                "runs_ops_per_sec",
            ])
        );
        assert_eq!(
            keys(&json["recovery"][0]),
            sorted(&["system", "records", "threads", "seconds", "runs_seconds"])
        );
        let config = &json["config"];
        for field in [
            "records",
            "threads",
            "runs",
            "key_bytes",
            "value_bytes",
            "distribution",
            "flush",
            "huge_pages",
        ] {
            assert!(!config[field].is_null(), "config lacks {field}");
        }
        assert!(config["machine"]["cores"].as_u64().unwrap() >= 1);
        assert!(config["machine"]["kernel"].is_string());
        assert_eq!(config["distribution"], "zipfian");
        assert_eq!(config["systems"], serde_json::json!(["engram", "volatile"]));
    }

    #[test]
    fn the_median_run_is_reported_with_every_run_listed() {
        let report = report();
        let engram = &report.results[0];
        assert_eq!(engram.ops_per_sec, 2.0e6);
        assert_eq!(engram.runs_ops_per_sec, [3.0e6, 1.0e6, 2.0e6]);
        assert_eq!(report.recovery[1].seconds, 0.030);
    }

    #[test]
    fn the_table_shows_throughput_latency_and_the_ratio() {
        let table = report().table();
        assert!(table.contains("2,000,000"), "{table}");
        assert!(table.contains("2.5 µs"), "{table}");
        assert!(table.contains("3.0 ms"), "{table}");
        // Engram at 2 M ops/s against the map's 4 M: 0.50.
        assert!(table.contains("0.50"), "{table}");
        assert!(table.contains("recovery"), "{table}");
    }
}
