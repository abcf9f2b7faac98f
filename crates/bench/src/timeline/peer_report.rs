//! The Redis peer's rows and the ratios Engram / Redis, on `--target
//! server` with `--peers redis` ([`super::server::peer`]).
//!
//! JSON: the report's `peer` field (`null` without a peer; the other
//! fields keep their meaning and hold Engram's results only):
//!
//! ```text
//! { system: "redis", program, version, durability, settings, before_timed_run,
//!   tail: [ { configuration, seconds, ops, reads, writes, ops_per_sec,
//!             prefill_seconds, latency_us: { all, read, write },
//!             corrected_latency_us: { all, read, write },
//!             windows: { windows, median_window_ops, min_window_ops,
//!               min_window_over_median, windows_without_ops,
//!               windows_without_writes },
//!             other_cpu_percent, window_ms, ops_by_window, writes_by_window,
//!             redis: { appendfsync, cpu_percent, aof_rewrites_in_run,
//!               info_at_end } } ],
//!   ycsb: [ { store, workload, mix, distribution, seconds, ops, ops_per_sec,
//!             prefill_seconds, inserted, latency_us: { all, read, ... },
//!             corrected_latency_us: { all }, other_cpu_percent, window_ms,
//!             ops_by_window, redis: { ... } } ],
//!   ratios: [ { part, run, ops_per_sec, p99_us, p9999_us, corrected_p99_us,
//!               corrected_p9999_us, min_window_over_median } ] }
//! ```
//!
//! A Redis row has no checkpoint fields: the checkpoint watcher is
//! Engram's. Each `ratios` entry pairs one of Engram's runs (`part` `tail`
//! or `ycsb`; `run` the tail configuration, or `<store> <workload>
//! <distribution>` as in `ycsb.results`) with Redis's, each figure as
//! `{ engram, redis, engram_over_redis }` (`null` when a side has none):
//! ops/s, and p99 and p99.99 of all operations in microseconds, as
//! measured and corrected for coordinated omission. For the tail part,
//! `min_window_over_median` is the smallest 10 ms window over the median
//! window of the whole run, for each (Engram's row reports the smallest
//! window during checkpoints instead); `null` in YCSB.
//!
//! `other_cpu_percent` is what processes other than the benchmark and the
//! server measured used, for Redis as for Engram (whose server runs in this
//! process): Redis's own share is `redis.cpu_percent`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::report::{ycsb_latencies, Latency, LatencySet, TailResult, YcsbResult};
use super::series::{median, ratio};
use super::server::peer::{self, PeerMeasured, RedisCounters, RedisServer};
use super::tail::Configuration;
use super::timed::{Kind, WINDOW};
use super::ycsb::Workload;
use crate::table::{decimals, thousands, width_to_fit, Column, Table};

/// What Redis did before each timed run.
pub const BEFORE_TIMED_RUN: &str = "the prefill, then BGREWRITEAOF, waited for (as SAVE folds \
     Engram's prefill into images)";

#[derive(Clone, Debug, Serialize)]
pub struct PeerReport {
    pub system: &'static str,
    pub program: String,
    /// What `redis-server --version` said.
    pub version: String,
    /// Engram's durability it matches.
    pub durability: &'static str,
    pub settings: String,
    pub before_timed_run: &'static str,
    pub tail: Vec<PeerTailResult>,
    pub ycsb: Vec<PeerYcsbResult>,
    pub ratios: Vec<PeerRatios>,
}

/// Operations per window over the whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Windows {
    pub windows: usize,
    pub median_window_ops: f64,
    pub min_window_ops: u64,
    /// `min_window_ops / median_window_ops`.
    pub min_window_over_median: Option<f64>,
    pub windows_without_ops: usize,
    pub windows_without_writes: usize,
}

impl Windows {
    fn of(ops: &[u64], writes: &[u64]) -> Windows {
        let median_window_ops = median(ops).unwrap_or(0.0);
        let min_window_ops = ops.iter().copied().min().unwrap_or(0);
        Windows {
            windows: ops.len(),
            median_window_ops,
            min_window_ops,
            min_window_over_median: ratio(Some(min_window_ops as f64), Some(median_window_ops)),
            windows_without_ops: ops.iter().filter(|&&n| n == 0).count(),
            windows_without_writes: writes.iter().filter(|&&n| n == 0).count(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PeerTailResult {
    /// The Engram configuration it ran beside.
    pub configuration: &'static str,
    pub seconds: f64,
    pub ops: u64,
    pub reads: u64,
    pub writes: u64,
    pub ops_per_sec: f64,
    pub prefill_seconds: f64,
    pub latency_us: LatencySet,
    pub corrected_latency_us: LatencySet,
    pub windows: Windows,
    pub other_cpu_percent: Option<f64>,
    pub window_ms: f64,
    pub ops_by_window: Vec<u64>,
    pub writes_by_window: Vec<u64>,
    pub redis: RedisCounters,
}

#[derive(Clone, Debug, Serialize)]
pub struct PeerYcsbResult {
    pub store: &'static str,
    pub workload: &'static str,
    pub mix: String,
    pub distribution: String,
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub prefill_seconds: f64,
    pub inserted: u64,
    pub latency_us: BTreeMap<&'static str, Option<Latency>>,
    pub corrected_latency_us: BTreeMap<&'static str, Option<Latency>>,
    pub other_cpu_percent: Option<f64>,
    pub window_ms: f64,
    pub ops_by_window: Vec<u64>,
    pub redis: RedisCounters,
}

/// One figure of both systems.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Pair {
    pub engram: Option<f64>,
    pub redis: Option<f64>,
    pub engram_over_redis: Option<f64>,
}

impl Pair {
    fn of(engram: Option<f64>, redis: Option<f64>) -> Pair {
        Pair {
            engram,
            redis,
            engram_over_redis: ratio(engram, redis),
        }
    }

    /// `p(all latencies)` of each.
    fn latency(
        engram: Option<&Latency>,
        redis: Option<&Latency>,
        percentile: fn(&Latency) -> f64,
    ) -> Pair {
        Pair::of(engram.map(percentile), redis.map(percentile))
    }
}

/// Engram's run against Redis's (module docs).
#[derive(Clone, Debug, Serialize)]
pub struct PeerRatios {
    pub part: &'static str,
    pub run: String,
    pub ops_per_sec: Pair,
    pub p99_us: Pair,
    pub p9999_us: Pair,
    pub corrected_p99_us: Pair,
    pub corrected_p9999_us: Pair,
    pub min_window_over_median: Option<Pair>,
}

impl PeerRatios {
    /// `all` and `corrected` are each system's latencies of all operations.
    fn new(
        part: &'static str,
        run: String,
        ops_per_sec: Pair,
        all: [Option<&Latency>; 2],
        corrected: [Option<&Latency>; 2],
    ) -> PeerRatios {
        PeerRatios {
            part,
            run,
            ops_per_sec,
            p99_us: Pair::latency(all[0], all[1], |l| l.p99),
            p9999_us: Pair::latency(all[0], all[1], |l| l.p9999),
            corrected_p99_us: Pair::latency(corrected[0], corrected[1], |l| l.p99),
            corrected_p9999_us: Pair::latency(corrected[0], corrected[1], |l| l.p9999),
            min_window_over_median: None,
        }
    }
}

impl PeerReport {
    pub fn new(redis: &RedisServer) -> PeerReport {
        let durability = peer::durability();
        PeerReport {
            system: "redis",
            program: redis.program.display().to_string(),
            version: redis.version.clone(),
            durability: durability.name(),
            settings: RedisServer::settings(),
            before_timed_run: BEFORE_TIMED_RUN,
            tail: Vec::new(),
            ycsb: Vec::new(),
            ratios: Vec::new(),
        }
    }

    /// Redis's run of `configuration`, beside Engram's in `engram`.
    pub fn add_tail(
        &mut self,
        engram: &super::report::TailReport,
        configuration: Configuration,
        m: &PeerMeasured,
    ) {
        let timed = &m.timed;
        let ops_by_window = timed.ops_by_window();
        let writes_by_window = timed.writes_by_window();
        let result = PeerTailResult {
            configuration: configuration.name(),
            seconds: timed.elapsed.as_secs_f64(),
            ops: timed.ops(),
            reads: timed.counts[Kind::Read.index()],
            writes: Kind::ALL
                .iter()
                .filter(|k| k.writes())
                .map(|k| timed.counts[k.index()])
                .sum(),
            ops_per_sec: timed.ops_per_sec(),
            prefill_seconds: m.prefill.as_secs_f64(),
            latency_us: LatencySet::of(timed, false),
            corrected_latency_us: LatencySet::of(timed, true),
            windows: Windows::of(&ops_by_window, &writes_by_window),
            other_cpu_percent: timed.other_cpu.map(|share| share * 100.0),
            window_ms: WINDOW.as_secs_f64() * 1e3,
            ops_by_window,
            writes_by_window,
            redis: m.redis.clone(),
        };
        if let Some(engram) = engram
            .configurations
            .iter()
            .find(|r| r.configuration == configuration.name())
        {
            self.ratios.push(tail_ratios(engram, &result));
        }
        self.tail.push(result);
    }

    /// Redis's run of `workload`, beside Engram's `engram`.
    pub fn add_ycsb(&mut self, engram: &YcsbResult, workload: Workload, m: &PeerMeasured) {
        let timed = &m.timed;
        let (latency_us, corrected_latency_us) = ycsb_latencies(timed, workload);
        let result = PeerYcsbResult {
            store: engram.store,
            workload: workload.name(),
            mix: workload.mix_text(),
            distribution: engram.distribution.clone(),
            seconds: timed.elapsed.as_secs_f64(),
            ops: timed.ops(),
            ops_per_sec: timed.ops_per_sec(),
            prefill_seconds: m.prefill.as_secs_f64(),
            inserted: m.inserted,
            latency_us,
            corrected_latency_us,
            other_cpu_percent: timed.other_cpu.map(|share| share * 100.0),
            window_ms: WINDOW.as_secs_f64() * 1e3,
            ops_by_window: timed.ops_by_window(),
            redis: m.redis.clone(),
        };
        let all = |map: &BTreeMap<&'static str, Option<Latency>>| -> Option<Latency> {
            map.get("all").cloned().flatten()
        };
        let (engram_all, redis_all) = (all(&engram.latency_us), all(&result.latency_us));
        let (engram_corrected, redis_corrected) = (
            all(&engram.corrected_latency_us),
            all(&result.corrected_latency_us),
        );
        self.ratios.push(PeerRatios::new(
            "ycsb",
            ycsb_run(engram.store, engram.workload, &engram.distribution),
            Pair::of(Some(engram.ops_per_sec), Some(result.ops_per_sec)),
            [engram_all.as_ref(), redis_all.as_ref()],
            [engram_corrected.as_ref(), redis_corrected.as_ref()],
        ));
        self.ycsb.push(result);
    }

    /// Redis's tail row for `configuration`.
    pub fn tail_row(&self, configuration: &str) -> Option<&PeerTailResult> {
        self.tail.iter().find(|r| r.configuration == configuration)
    }

    /// Redis's YCSB row beside `engram`'s.
    pub fn ycsb_row(&self, engram: &YcsbResult) -> Option<&PeerYcsbResult> {
        self.ycsb.iter().find(|r| {
            r.store == engram.store
                && r.workload == engram.workload
                && r.distribution == engram.distribution
        })
    }

    /// The ratios of `part`, and Redis's counters, for the table.
    pub fn lines(&self, text: &mut String, part: &'static str) {
        let ratios: Vec<&PeerRatios> = self.ratios.iter().filter(|r| r.part == part).collect();
        if ratios.is_empty() {
            return;
        }
        let tail = part == "tail";
        let _ = writeln!(
            text,
            "  engram / redis, same clients and workload (ops/s above 1, latencies below 1: \
             engram ahead); all operations{}:",
            if tail {
                "; min win/median over the whole run"
            } else {
                ""
            }
        );
        let width = width_to_fit(ratios.iter().map(|r| r.run.len()), 2, 16);
        // The last two columns, each side's min win/med, are the tail part's
        // (only its ratios have them).
        let columns = [
            Column::Left(width),
            Column::Right(8),
            Column::Right(8),
            Column::Right(8),
            Column::Right(11),
            Column::Right(14),
            Column::Right(22),
            Column::Right(8),
        ];
        let table = Table::new("    ", &columns[..if tail { 8 } else { 6 }]);
        table.row(
            text,
            &[
                "run",
                "ops/s",
                "p99",
                "p99.99",
                "corr p99",
                "corr p99.99",
                "min win/med engram",
                "redis",
            ],
        );
        let value = |v: Option<f64>| decimals(v, 2, "–");
        for r in &ratios {
            let windows = r
                .min_window_over_median
                .map_or([String::new(), String::new()], |w| {
                    [value(w.engram), value(w.redis)]
                });
            table.row(
                text,
                &[
                    &r.run,
                    &value(r.ops_per_sec.engram_over_redis),
                    &value(r.p99_us.engram_over_redis),
                    &value(r.p9999_us.engram_over_redis),
                    &value(r.corrected_p99_us.engram_over_redis),
                    &value(r.corrected_p9999_us.engram_over_redis),
                    &windows[0],
                    &windows[1],
                ],
            );
        }
        let counters = self
            .tail
            .iter()
            .filter(|_| tail)
            .map(|r| (r.configuration.to_string(), &r.redis))
            .chain(
                self.ycsb
                    .iter()
                    .filter(|_| !tail)
                    .map(|r| (ycsb_run(r.store, r.workload, &r.distribution), &r.redis)),
            );
        for (run, redis) in counters {
            counters_line(text, &run, redis);
        }
    }
}

/// A YCSB run's name in `ratios`.
fn ycsb_run(store: &str, workload: &str, distribution: &str) -> String {
    format!("{store} {workload} {distribution}")
}

fn tail_ratios(engram: &TailResult, redis: &PeerTailResult) -> PeerRatios {
    let mut ratios = PeerRatios::new(
        "tail",
        engram.configuration.to_string(),
        Pair::of(Some(engram.ops_per_sec), Some(redis.ops_per_sec)),
        [
            engram.latency_us.all.as_ref(),
            redis.latency_us.all.as_ref(),
        ],
        [
            engram.corrected_latency_us.all.as_ref(),
            redis.corrected_latency_us.all.as_ref(),
        ],
    );
    let q = &engram.quiescence;
    let engram_windows = ratio(Some(q.min_window_ops as f64), Some(q.median_window_ops));
    ratios.min_window_over_median = Some(Pair::of(
        engram_windows,
        redis.windows.min_window_over_median,
    ));
    ratios
}

/// Redis's `INFO persistence` at the end of `run`.
fn counters_line(text: &mut String, run: &str, redis: &RedisCounters) {
    let info = |field: &str| redis.info_at_end.get(field).copied().unwrap_or(0);
    let _ = writeln!(
        text,
        "  redis at the end of {run}: {} of the machine's CPU in the run; INFO persistence: \
         AOF rewrites in the run {}, aof_current_size {}, aof_base_size {}, appendfsync {}",
        redis
            .cpu_percent
            .map_or("–".to_string(), |p| format!("{p:.0}%")),
        redis
            .aof_rewrites_in_run
            .map_or("–".to_string(), |n| n.to_string()),
        thousands(info("aof_current_size") as f64),
        thousands(info("aof_base_size") as f64),
        redis.appendfsync,
    );
}
