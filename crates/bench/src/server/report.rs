//! The report of `engram-bench server`: JSON for machines (`--json`), a
//! table for people.
//!
//! JSON shape (field names are a contract; tests pin them):
//!
//! ```text
//! { "config":  { command, durabilities, pipelines, tests, clients,
//!                value_bytes, keyspace, runs, requests: [{pipeline, requests}],
//!                engram_binary, engram_version, redis_server_version,
//!                redis_benchmark_version, cpu_ticks_per_second,
//!                pairings: [{durability, engram, redis, redis_no_fsync}],
//!                machine: { cores, kernel, cpu } },
//!   "results": [ { system, durability, test, pipeline, requests, ops_per_sec,
//!                  p50_ms, p99_ms, avg_ms, p95_ms, max_ms,
//!                  runs_ops_per_sec, cpu_s_per_million_ops,
//!                  runs_cpu_s_per_million_ops }, ... ],
//!   "ratios":  [ { durability, test, pipeline, against, ops_per_sec_ratio,
//!                  p50_ratio, p99_ratio, cpu_ratio }, ... ],
//!   "keys":    [ { system, durability, run, keys }, ... ] }
//! ```
//!
//! One result per (system, durability, test, pipeline); `system` is
//! engram, redis or redis-no-fsync (Redis with `appendfsync no`, run beside
//! the other two at `always`; `pairings[].redis_no_fsync` is null where it
//! did not run). `ops_per_sec` is the median over the rounds and the
//! latencies are those of the median round; `runs_ops_per_sec` lists every
//! round, to show the spread. `cpu_s_per_million_ops` is the server's CPU
//! time (utime+stime from /proc/PID/stat, all its threads) over the
//! redis-benchmark run, per million operations, median over the rounds
//! (each round's in `runs_cpu_s_per_million_ops`; null where /proc could not
//! be read); its resolution is the kernel's clock tick
//! (`cpu_ticks_per_second`). With an even number of rounds the median is
//! the upper of the middle two.
//!
//! Each ratio is Engram's figure over that of the system named by `against`
//! (redis, or redis-no-fsync): above 1 Engram is faster in ops/s, below 1 it
//! answers sooner in p50/p99 and spends less CPU per operation. `keys` is
//! `DBSIZE` after each round (null if the server did not answer it): a
//! check that the writes landed.

use std::fmt::Write as _;

use serde::Serialize;

use super::peers::System;
use super::redis_benchmark::CsvRow;
use super::Durability;
use crate::machine::Machine;
use crate::table::{decimals, thousands, Column, Table};

/// The ops/s table's columns: test, pipeline depth, both systems' ops/s,
/// their ratio, both systems' p50/p99, their p99s' ratio.
const COLUMNS: [Column; 8] = [
    Column::Left(6),
    Column::Right(4),
    Column::Right(14),
    Column::Right(14),
    Column::Right(8),
    Column::Right(20),
    Column::Right(20),
    Column::Right(8),
];
/// Added where Redis without fsync ran: its ops/s, and Engram's over it.
const NO_FSYNC_COLUMNS: [Column; 2] = [Column::Right(22), Column::Right(18)];
/// The CPU table's columns: test, pipeline depth, both systems' CPU
/// seconds per million operations, their ratio.
const CPU_COLUMNS: [Column; 5] = [
    Column::Left(6),
    Column::Right(4),
    Column::Right(10),
    Column::Right(10),
    Column::Right(8),
];
/// Added to the CPU table where Redis without fsync ran.
const CPU_NO_FSYNC_COLUMNS: [Column; 2] = [Column::Right(16), Column::Right(18)];
/// Width of the summary's label column ("always vs no-fsync") and of each
/// test's column in it.
const SUMMARY_LABEL: Column = Column::Left(20);
const SUMMARY_CELL: Column = Column::Right(8);

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: ReportConfig,
    pub results: Vec<TestResult>,
    pub ratios: Vec<Ratio>,
    pub keys: Vec<KeyCount>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReportConfig {
    pub command: String,
    pub durabilities: Vec<&'static str>,
    pub pipelines: Vec<u32>,
    pub tests: Vec<String>,
    pub clients: u32,
    pub value_bytes: usize,
    pub keyspace: u64,
    /// Rounds per durability level (`--runs`).
    pub runs: usize,
    pub requests: Vec<PipelineRequests>,
    pub engram_binary: String,
    pub engram_version: String,
    pub redis_server_version: String,
    pub redis_benchmark_version: String,
    /// The unit of /proc's CPU times, so the CPU figures' resolution is
    /// known: a tick per run is 1e4 / requests seconds per million.
    pub cpu_ticks_per_second: u64,
    pub pairings: Vec<Pairing>,
    pub machine: Machine,
}

/// redis-benchmark's `-n` at one pipeline depth.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PipelineRequests {
    pub pipeline: u32,
    pub requests: u64,
}

/// How each server is configured for one durability level.
#[derive(Clone, Debug, Serialize)]
pub struct Pairing {
    pub durability: &'static str,
    /// `engram serve ...` without the port and directory.
    pub engram: String,
    /// The redis-server settings that matter here.
    pub redis: String,
    /// Those of the Redis that never fsyncs, where it ran beside the other
    /// two.
    pub redis_no_fsync: Option<String>,
}

impl Pairing {
    /// The pairing at `durability`, with Redis without fsync beside it if
    /// `redis_no_fsync`.
    pub fn of(durability: Durability, redis_no_fsync: bool) -> Pairing {
        let redis = |appendfsync: &str| {
            format!("redis-server --appendonly yes --appendfsync {appendfsync} --save \"\"")
        };
        Pairing {
            durability: durability.name(),
            engram: format!("engram serve --durability {}", durability.name()),
            redis: redis(durability.appendfsync()),
            redis_no_fsync: redis_no_fsync.then(|| redis(Durability::Process.appendfsync())),
        }
    }
}

/// One round's measurement of one test at one pipeline depth against one
/// server.
#[derive(Clone, Debug)]
pub struct Sample {
    pub row: CsvRow,
    /// The server's CPU seconds (utime+stime) over the redis-benchmark run
    /// that measured `row`, per million of its operations; `None` if /proc
    /// could not be read.
    pub cpu_s_per_million_ops: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TestResult {
    pub system: &'static str,
    pub durability: &'static str,
    /// redis-benchmark's label up to its first space: SET, GET, INCR, MSET.
    pub test: String,
    pub pipeline: u32,
    pub requests: u64,
    pub ops_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub avg_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    pub runs_ops_per_sec: Vec<f64>,
    /// Median over the rounds that have one.
    pub cpu_s_per_million_ops: Option<f64>,
    pub runs_cpu_s_per_million_ops: Vec<Option<f64>>,
}

/// Engram's figures over another system's for one (durability, test,
/// pipeline).
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub durability: &'static str,
    pub test: String,
    pub pipeline: u32,
    /// The system divided by: "redis" or "redis-no-fsync".
    pub against: &'static str,
    /// Above 1: Engram serves more operations per second.
    pub ops_per_sec_ratio: f64,
    /// Below 1: Engram's median latency is lower.
    pub p50_ratio: f64,
    /// Below 1: Engram's 99th percentile is lower.
    pub p99_ratio: f64,
    /// Below 1: Engram spends less CPU per operation.
    pub cpu_ratio: Option<f64>,
}

impl Ratio {
    fn of(engram: &TestResult, other: &TestResult) -> Ratio {
        Ratio {
            durability: engram.durability,
            test: engram.test.clone(),
            pipeline: engram.pipeline,
            against: other.system,
            ops_per_sec_ratio: engram.ops_per_sec / other.ops_per_sec,
            p50_ratio: engram.p50_ms / other.p50_ms,
            p99_ratio: engram.p99_ms / other.p99_ms,
            cpu_ratio: engram
                .cpu_s_per_million_ops
                .zip(other.cpu_s_per_million_ops)
                .map(|(engram, other)| engram / other)
                .filter(|ratio| ratio.is_finite()),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct KeyCount {
    pub system: &'static str,
    pub durability: &'static str,
    /// The round, from 1.
    pub run: usize,
    pub keys: Option<u64>,
}

impl Report {
    pub fn new(config: ReportConfig) -> Report {
        Report {
            config,
            results: Vec::new(),
            ratios: Vec::new(),
            keys: Vec::new(),
        }
    }

    /// Adds one (system, durability, test, pipeline) over its rounds: the
    /// median round by ops/s, and the median CPU per operation. Once Engram
    /// and another system are both in for the same (durability, test,
    /// pipeline), their ratio is added too.
    pub fn add_result(
        &mut self,
        system: System,
        durability: Durability,
        pipeline: u32,
        requests: u64,
        runs: &[Sample],
    ) {
        assert!(!runs.is_empty(), "a result needs at least one run");
        let mut sorted: Vec<&CsvRow> = runs.iter().map(|run| &run.row).collect();
        sorted.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        let median = sorted[sorted.len() / 2];
        let cpu: Vec<Option<f64>> = runs.iter().map(|run| run.cpu_s_per_million_ops).collect();
        let result = TestResult {
            system: system.name(),
            durability: durability.name(),
            test: median.test.clone(),
            pipeline,
            requests,
            ops_per_sec: median.ops_per_sec,
            p50_ms: median.p50_ms,
            p99_ms: median.p99_ms,
            avg_ms: median.avg_ms,
            p95_ms: median.p95_ms,
            max_ms: median.max_ms,
            runs_ops_per_sec: runs.iter().map(|run| run.row.ops_per_sec).collect(),
            cpu_s_per_million_ops: median_of(cpu.iter().flatten().copied()),
            runs_cpu_s_per_million_ops: cpu,
        };
        let find = |other| self.find(other, durability.name(), &result.test, pipeline);
        let ratios: Vec<Ratio> = match system {
            System::Engram => [System::Redis, System::RedisNoFsync]
                .into_iter()
                .filter_map(find)
                .map(|other| Ratio::of(&result, other))
                .collect(),
            _ => find(System::Engram)
                .map(|engram| Ratio::of(engram, &result))
                .into_iter()
                .collect(),
        };
        self.ratios.extend(ratios);
        self.results.push(result);
    }

    pub fn add_key_count(
        &mut self,
        system: System,
        durability: Durability,
        run: usize,
        keys: Option<u64>,
    ) {
        self.keys.push(KeyCount {
            system: system.name(),
            durability: durability.name(),
            run,
            keys,
        });
    }

    pub fn find(
        &self,
        system: System,
        durability: &str,
        test: &str,
        pipeline: u32,
    ) -> Option<&TestResult> {
        self.results.iter().find(|r| {
            r.system == system.name()
                && r.durability == durability
                && r.test == test
                && r.pipeline == pipeline
        })
    }

    /// Engram's figures over `against`'s for one (durability, test,
    /// pipeline).
    pub fn ratio(
        &self,
        durability: &str,
        test: &str,
        pipeline: u32,
        against: System,
    ) -> Option<&Ratio> {
        self.ratios.iter().find(|r| {
            r.durability == durability
                && r.test == test
                && r.pipeline == pipeline
                && r.against == against.name()
        })
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain data")
    }

    /// The whole report for people: what ran, then per durability level the
    /// ops/s table and the CPU table, then the ratios in issue 25's shape.
    pub fn table(&self) -> String {
        let mut text = self.preamble();
        for pairing in &self.config.pairings {
            let engram: Vec<&TestResult> = self
                .results
                .iter()
                .filter(|r| r.durability == pairing.durability && r.system == "engram")
                .collect();
            if engram.is_empty() {
                continue;
            }
            let mut title = format!(
                "\n{}: {} vs {}",
                pairing.durability, pairing.engram, pairing.redis
            );
            if let Some(no_fsync) = &pairing.redis_no_fsync {
                let _ = write!(title, " vs (redis-no-fsync) {no_fsync}");
            }
            let _ = writeln!(text, "{title}");
            self.ops_table(&mut text, pairing.durability, &engram);
            self.key_counts(&mut text, pairing.durability);
            self.cpu_table(&mut text, pairing.durability, &engram);
        }
        self.summary(&mut text, "ops/s", "above 1: Engram faster", |r| {
            Some(r.ops_per_sec_ratio)
        });
        self.summary(
            &mut text,
            "CPU s per million operations",
            "below 1: Engram cheaper",
            |r| r.cpu_ratio,
        );
        text
    }

    /// The command, the workload, the programs, the machine, and what the
    /// columns mean.
    fn preamble(&self) -> String {
        let mut text = String::new();
        let c = &self.config;
        let _ = writeln!(text, "{}", c.command);
        let requests: Vec<String> = c
            .requests
            .iter()
            .map(|r| format!("-n {} at -P {}", thousands(r.requests as f64), r.pipeline))
            .collect();
        let _ = writeln!(
            text,
            "redis-benchmark -c {} -d {} -r {} -t {} (one test per run); {}; {} round(s), \
             the order reversed every other round (median shown)",
            c.clients,
            c.value_bytes,
            c.keyspace,
            c.tests.join(","),
            requests.join(", "),
            c.runs
        );
        let _ = writeln!(text, "engram: {} ({})", c.engram_binary, c.engram_version);
        let _ = writeln!(
            text,
            "redis: {}; {}",
            c.redis_server_version, c.redis_benchmark_version
        );
        let _ = writeln!(text, "{}", c.machine);
        let _ = writeln!(
            text,
            "ops ×: Engram's ops/s over Redis's (above 1: Engram faster); \
             p99 ×: Engram's p99 over Redis's (below 1: Engram faster)"
        );
        let _ = writeln!(
            text,
            "CPU: the server's utime+stime (/proc/PID/stat, all threads) over each \
             redis-benchmark run, in seconds per million operations, to 1/{} s; \
             cpu ×: Engram's over Redis's (below 1: Engram cheaper)",
            c.cpu_ticks_per_second
        );
        text
    }

    /// A line per (test, pipeline): both systems' ops/s and p50/p99, and
    /// Engram's figures over Redis's; where Redis without fsync ran, its
    /// ops/s and Engram's over it.
    fn ops_table(&self, text: &mut String, durability: &str, engram: &[&TestResult]) {
        let no_fsync = self.has(System::RedisNoFsync, durability);
        let columns: Vec<Column> = if no_fsync {
            [&COLUMNS[..], &NO_FSYNC_COLUMNS[..]].concat()
        } else {
            COLUMNS.to_vec()
        };
        let table = Table::new("", &columns);
        // Without the last columns, their headings are left out too (a row
        // ends at its table's last column).
        table.row(
            text,
            &[
                "test",
                "-P",
                "engram ops/s",
                "redis ops/s",
                "ops ×",
                "engram p50/p99 ms",
                "redis p50/p99 ms",
                "p99 ×",
                "redis-no-fsync ops/s",
                "× redis-no-fsync",
            ],
        );
        for engram in engram {
            let against = |system| {
                let other = self.find(system, durability, &engram.test, engram.pipeline);
                let ratio = self.ratio(durability, &engram.test, engram.pipeline, system);
                (other, ratio)
            };
            let (redis, ratio) = against(System::Redis);
            let mut cells = vec![
                engram.test.clone(),
                engram.pipeline.to_string(),
                thousands(engram.ops_per_sec),
                redis.map_or("-".into(), |r| thousands(r.ops_per_sec)),
                ratio.map_or("-".into(), |r| multiple(r.ops_per_sec_ratio)),
                latencies(engram),
                redis.map_or("-".into(), latencies),
                ratio.map_or("-".into(), |r| multiple(r.p99_ratio)),
            ];
            if no_fsync {
                let (other, ratio) = against(System::RedisNoFsync);
                cells.push(other.map_or("-".into(), |r| thousands(r.ops_per_sec)));
                cells.push(ratio.map_or("-".into(), |r| multiple(r.ops_per_sec_ratio)));
            }
            table.row(text, &cells.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }

    /// `DBSIZE` after each round, round by round (the systems in name
    /// order, whatever order they ran in).
    fn key_counts(&self, text: &mut String, durability: &str) {
        let mut keys: Vec<&KeyCount> = self
            .keys
            .iter()
            .filter(|k| k.durability == durability)
            .collect();
        keys.sort_by_key(|k| (k.run, k.system));
        let counts: Vec<String> = keys
            .iter()
            .map(|k| {
                format!(
                    "{} run {}: {}",
                    k.system,
                    k.run,
                    k.keys.map_or("-".into(), |n| thousands(n as f64))
                )
            })
            .collect();
        if !counts.is_empty() {
            let _ = writeln!(text, "keys afterwards (DBSIZE): {}", counts.join(", "));
        }
    }

    /// A line per (test, pipeline): each system's CPU seconds per million
    /// operations and Engram's over the others'.
    fn cpu_table(&self, text: &mut String, durability: &str, engram: &[&TestResult]) {
        let no_fsync = self.has(System::RedisNoFsync, durability);
        let columns: Vec<Column> = if no_fsync {
            [&CPU_COLUMNS[..], &CPU_NO_FSYNC_COLUMNS[..]].concat()
        } else {
            CPU_COLUMNS.to_vec()
        };
        let _ = writeln!(text, "CPU seconds per million operations ({durability}):");
        let table = Table::new("", &columns);
        table.row(
            text,
            &[
                "test",
                "-P",
                "engram",
                "redis",
                "cpu ×",
                "redis-no-fsync",
                "× redis-no-fsync",
            ],
        );
        for engram in engram {
            let against = |system| {
                let other = self.find(system, durability, &engram.test, engram.pipeline);
                let ratio = self.ratio(durability, &engram.test, engram.pipeline, system);
                (
                    cpu(other.and_then(|r| r.cpu_s_per_million_ops)),
                    optional_multiple(ratio.and_then(|r| r.cpu_ratio)),
                )
            };
            let (redis, ratio) = against(System::Redis);
            let mut cells = vec![
                engram.test.clone(),
                engram.pipeline.to_string(),
                cpu(engram.cpu_s_per_million_ops),
                redis,
                ratio,
            ];
            if no_fsync {
                let (other, ratio) = against(System::RedisNoFsync);
                cells.extend([other, ratio]);
            }
            table.row(text, &cells.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }

    /// Engram over Redis for one figure (`value` of each ratio) in issue
    /// 25's shape: a row per (durability, pipeline), and one more per
    /// pipeline against Redis without fsync where it ran; a column per test.
    fn summary(
        &self,
        text: &mut String,
        figure: &str,
        meaning: &str,
        value: impl Fn(&Ratio) -> Option<f64>,
    ) {
        let tests = self.tests_in_order();
        if tests.is_empty() {
            return;
        }
        let _ = writeln!(text, "\nEngram ÷ Redis, {figure} ({meaning}):");
        let columns: Vec<Column> = [SUMMARY_LABEL, Column::Right(4)]
            .into_iter()
            .chain(tests.iter().map(|_| SUMMARY_CELL))
            .collect();
        let table = Table::new("", &columns);
        let header: Vec<&str> = ["durability", "-P"]
            .into_iter()
            .chain(tests.iter().map(String::as_str))
            .collect();
        table.row(text, &header);
        for pairing in &self.config.pairings {
            for against in [System::Redis, System::RedisNoFsync] {
                for &pipeline in &self.config.pipelines {
                    let cells: Vec<Option<f64>> = tests
                        .iter()
                        .map(|test| {
                            self.ratio(pairing.durability, test, pipeline, against)
                                .and_then(&value)
                        })
                        .collect();
                    if cells.iter().all(Option::is_none) {
                        continue;
                    }
                    let label = match against {
                        System::RedisNoFsync => format!("{} vs no-fsync", pairing.durability),
                        _ => pairing.durability.to_string(),
                    };
                    let row: Vec<String> = [label, pipeline.to_string()]
                        .into_iter()
                        .chain(cells.into_iter().map(optional_multiple))
                        .collect();
                    table.row(text, &row.iter().map(String::as_str).collect::<Vec<_>>());
                }
            }
        }
    }

    /// Whether `system` has any result at `durability`.
    fn has(&self, system: System, durability: &str) -> bool {
        self.results
            .iter()
            .any(|r| r.durability == durability && r.system == system.name())
    }

    /// The tests with a ratio, in the order first measured.
    fn tests_in_order(&self) -> Vec<String> {
        let mut tests: Vec<String> = Vec::new();
        for ratio in &self.ratios {
            if !tests.contains(&ratio.test) {
                tests.push(ratio.test.clone());
            }
        }
        tests
    }
}

/// The median of `values` (the upper of the middle two for an even count),
/// `None` for none.
fn median_of(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

fn latencies(result: &TestResult) -> String {
    format!("{:.3}/{:.3}", result.p50_ms, result.p99_ms)
}

/// A ratio with two decimals, or "-" when it has no value (a zero latency).
fn multiple(value: f64) -> String {
    decimals(Some(value).filter(|v| v.is_finite()), 2, "-")
}

/// A ratio that may be missing, as [`multiple`].
fn optional_multiple(value: Option<f64>) -> String {
    value.map_or("-".into(), multiple)
}

/// CPU seconds per million operations, to the hundredth; "-" if unknown.
fn cpu(value: Option<f64>) -> String {
    decimals(value, 2, "-")
}
