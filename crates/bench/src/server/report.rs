//! The report of `engram-bench server`: JSON for machines (`--json`), a
//! table for people.
//!
//! JSON shape (field names are a contract; tests pin them):
//!
//! ```text
//! { "config":  { command, durabilities, pipelines, tests, clients,
//!                value_bytes, keyspace, runs, requests: [{pipeline, requests}],
//!                engram_binary, engram_version, redis_server_version,
//!                redis_benchmark_version, pairings: [{durability, engram, redis}],
//!                machine: { cores, kernel, cpu } },
//!   "results": [ { system, durability, test, pipeline, requests, ops_per_sec,
//!                  p50_ms, p99_ms, avg_ms, p95_ms, max_ms,
//!                  runs_ops_per_sec }, ... ],
//!   "ratios":  [ { durability, test, pipeline, ops_per_sec_ratio,
//!                  p50_ratio, p99_ratio }, ... ],
//!   "keys":    [ { system, durability, run, keys }, ... ] }
//! ```
//!
//! One result per (system, durability, test, pipeline). `ops_per_sec` is the
//! median over the runs and the latencies are those of the median run;
//! `runs_ops_per_sec` lists every run, to show the spread. Each ratio is
//! Engram's figure over Redis's: above 1 Engram is faster in ops/s, below 1
//! it answers sooner in p50/p99. `keys` is `DBSIZE` after each run (null if
//! the server did not answer it): a check that the writes landed.

use std::fmt::Write as _;

use serde::Serialize;

use super::peers::System;
use super::redis_benchmark::CsvRow;
use super::Durability;
use crate::machine::Machine;
use crate::table::{decimals, thousands, Column, Table};

/// The table's columns: test, pipeline depth, both systems' ops/s, their
/// ratio, both systems' p50/p99, their p99s' ratio.
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
    pub runs: usize,
    pub requests: Vec<PipelineRequests>,
    pub engram_binary: String,
    pub engram_version: String,
    pub redis_server_version: String,
    pub redis_benchmark_version: String,
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
}

impl Pairing {
    pub fn of(durability: Durability) -> Pairing {
        Pairing {
            durability: durability.name(),
            engram: format!("engram serve --durability {}", durability.name()),
            redis: format!(
                "redis-server --appendonly yes --appendfsync {} --save \"\"",
                durability.appendfsync()
            ),
        }
    }
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
}

/// Engram's figures over Redis's for one (durability, test, pipeline).
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub durability: &'static str,
    pub test: String,
    pub pipeline: u32,
    /// Above 1: Engram serves more operations per second.
    pub ops_per_sec_ratio: f64,
    /// Below 1: Engram's median latency is lower.
    pub p50_ratio: f64,
    /// Below 1: Engram's 99th percentile is lower.
    pub p99_ratio: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct KeyCount {
    pub system: &'static str,
    pub durability: &'static str,
    /// From 1.
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

    /// Adds one (system, durability, test, pipeline) over its runs: the
    /// median run by ops/s. Once both systems are in for the same
    /// (durability, test, pipeline), their ratio is added too.
    pub fn add_result(
        &mut self,
        system: System,
        durability: Durability,
        pipeline: u32,
        requests: u64,
        runs: &[CsvRow],
    ) {
        assert!(!runs.is_empty(), "a result needs at least one run");
        let mut sorted = runs.to_vec();
        sorted.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        let median = &sorted[sorted.len() / 2];
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
            runs_ops_per_sec: runs.iter().map(|run| run.ops_per_sec).collect(),
        };
        let other = match system {
            System::Engram => System::Redis,
            System::Redis => System::Engram,
        };
        if let Some(counterpart) = self.find(other, durability.name(), &result.test, pipeline) {
            let (engram, redis) = match system {
                System::Engram => (&result, counterpart),
                System::Redis => (counterpart, &result),
            };
            self.ratios.push(Ratio {
                durability: durability.name(),
                test: result.test.clone(),
                pipeline,
                ops_per_sec_ratio: engram.ops_per_sec / redis.ops_per_sec,
                p50_ratio: engram.p50_ms / redis.p50_ms,
                p99_ratio: engram.p99_ms / redis.p99_ms,
            });
        }
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

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain data")
    }

    /// Per durability level, a line per (test, pipeline): both systems'
    /// ops/s and p50/p99, and Engram's figures over Redis's.
    pub fn table(&self) -> String {
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
            "redis-benchmark -c {} -d {} -r {} -t {}; {}; {} run(s) (median shown)",
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
        for pairing in &c.pairings {
            let durability = pairing.durability;
            let engram_rows: Vec<&TestResult> = self
                .results
                .iter()
                .filter(|r| r.durability == durability && r.system == System::Engram.name())
                .collect();
            if engram_rows.is_empty() {
                continue;
            }
            let _ = writeln!(
                text,
                "\n{durability}: {} vs {}",
                pairing.engram, pairing.redis
            );
            let table = Table::new("", &COLUMNS);
            table.row(
                &mut text,
                &[
                    "test",
                    "-P",
                    "engram ops/s",
                    "redis ops/s",
                    "ops ×",
                    "engram p50/p99 ms",
                    "redis p50/p99 ms",
                    "p99 ×",
                ],
            );
            for engram in engram_rows {
                let redis = self.find(System::Redis, durability, &engram.test, engram.pipeline);
                let (redis_ops, redis_latency, ops_ratio, p99_ratio) = match redis {
                    Some(redis) => (
                        thousands(redis.ops_per_sec),
                        latencies(redis),
                        multiple(engram.ops_per_sec / redis.ops_per_sec),
                        multiple(engram.p99_ms / redis.p99_ms),
                    ),
                    None => ("-".into(), "-".into(), "-".into(), "-".into()),
                };
                table.row(
                    &mut text,
                    &[
                        &engram.test,
                        &engram.pipeline.to_string(),
                        &thousands(engram.ops_per_sec),
                        &redis_ops,
                        &ops_ratio,
                        &latencies(engram),
                        &redis_latency,
                        &p99_ratio,
                    ],
                );
            }
            let counts: Vec<String> = self
                .keys
                .iter()
                .filter(|k| k.durability == durability)
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
        text
    }
}

fn latencies(result: &TestResult) -> String {
    format!("{:.3}/{:.3}", result.p50_ms, result.p99_ms)
}

/// A ratio with two decimals, or "-" when it has no value (a zero latency).
fn multiple(value: f64) -> String {
    decimals(Some(value).filter(|v| v.is_finite()), 2, "-")
}
