//! The report of `engram-bench timeline`: JSON for machines, a table for
//! people.
//!
//! JSON shape (field names are a contract; the tests pin the main ones):
//!
//! ```text
//! { "config":   { command, parts, target, peers, threads, records, fields, field_bytes,
//!                 key_bytes, distribution, read_percent, configurations,
//!                 checkpoint_log_bytes, background_cpus, seconds, window_ms,
//!                 sample_every_ms,
//!                 ycsb_seconds, workloads, ycsb_distributions, ycsb_stores,
//!                 recovery_keys, recovery_members, recovery_member_bytes,
//!                 recovery_types, recovery_tail_percent, recovery_threads,
//!                 machine: { cores, kernel, cpu } },
//!   "skipped":  [ "..." ],
//!   "tail":     { configurations: [ { configuration, target, checkpoint_mode,
//!                   seconds, ops, reads, writes, ops_per_sec,
//!                   prefill_seconds, checkpoints, checkpoint_spans:
//!                   [ { begin_ms, end_ms } ], checkpoint_running_ms,
//!                   backpressure_waits, backpressure_wait_ms,
//!                   log_bytes_pending, last_checkpoint,
//!                   latency_us:           { all, read, write },
//!                   corrected_latency_us: { all, read, write },
//!                   quiescence: { windows, windows_during_checkpoints,
//!                     median_window_ops, min_window_ops,
//!                     min_window_ops_during_checkpoints, ratio,
//!                     windows_without_ops, windows_without_writes },
//!                   other_cpu_percent, window_ms, ops_by_window,
//!                   writes_by_window, server } ],
//!                 checks: [ { name, value, target, comparison, pass } ],
//!                 corrected_checks: [ ... ] },
//!   "ycsb":     { results: [ { store, target, workload, mix, distribution, seconds,
//!                   ops, ops_per_sec, prefill_seconds, checkpoints, inserted,
//!                   latency_us: { all, read, update, ... },
//!                   corrected_latency_us: { all }, other_cpu_percent,
//!                   window_ms, ops_by_window, server } ], skipped: [ "..." ] },
//!   "recovery": { keys, members, member_bytes, types, recovery_threads,
//!                 build_seconds, log_records, log_payload_bytes,
//!                 log_file_bytes, from_log: { open_seconds, ... },
//!                 checkpoint_seconds, checkpoint_keys_written,
//!                 checkpoint_image_bytes, tail_keys, tail_seconds,
//!                 from_images: { ... },
//!                 strings: { keys, value_bytes, build_seconds, data_file_bytes,
//!                   image_seconds, image_entries, tail_keys,
//!                   from_scan: { open_seconds, blocks_scanned, records,
//!                   keys_found, image, image_keys_named }, from_image: { ... },
//!                   speedup } | null, checks: [ ... ] },
//!   "peer":     { system: "redis", ..., tail: [ ... ], ycsb: [ ... ], ratios: [ ... ] } }
//! ```
//!
//! A latency is `{ count, mean, p50, p99, p999, p9999, max }` in
//! microseconds (`null` without operations). A window series counts the
//! operations completed in each whole `window_ms` of the run, from its
//! start. Parts not run are `null`. `target` is `embedded` or `server`;
//! `server` is `null` on the embedded target, and on the server target
//! `{ durability, checkpoints_requested, info_at_end: { checkpoints,
//! backpressure_waits, ... } }` (the numeric fields of `INFO collections`
//! when the timed run ended; `last_checkpoint` is then `null`: INFO has no
//! image bytes). `skipped` names what `--target` left out, and why.
//! `peers` is `redis` or `none` (always `none` on the embedded target);
//! `peer` is `null` without a peer, and otherwise holds Redis's rows and the
//! ratios Engram / Redis ([`super::peer_report`] has its shape): `tail` and
//! `ycsb` hold Engram's results only.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use engram_threads as background;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::peer_report::PeerReport;
use super::recovery::{Recovered, RecoveryMeasured};
use super::series::{self, Check, Quiescence, Span};
use super::server::{ServerCounters, Target};
use super::string_recovery::{StringRecovered, StringRecoveryMeasured};
use super::tail::{Configuration, TailMeasured};
use super::timed::{Kind, Measured, SAMPLE_EVERY, WINDOW};
use super::ycsb::{Workload, YcsbMeasured};
use super::{records, Config, Part};
use crate::machine::Machine;
use crate::table::{
    decimals, micros, millis, thousands, trim_line_ends, width_to_fit, Column, Table,
};

/// Targets of the tail part (DIPPER's claims, as the issue states them).
pub const QUIESCENCE_TARGET: f64 = 0.5;
pub const OVER_OFF_TARGET: f64 = 2.0;
pub const OVER_STOP_THE_WORLD_TARGET: f64 = 0.25;
/// Recovery from images and a short tail, with 2 threads.
pub const RECOVERY_TARGET_SECONDS: f64 = 2.0;

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: ReportConfig,
    /// What `--target` left out, and why.
    pub skipped: Vec<String>,
    pub tail: Option<TailReport>,
    pub ycsb: Option<YcsbReport>,
    pub recovery: Option<RecoveryReport>,
    /// `--target server --peers redis`: Redis's rows and the ratios.
    pub peer: Option<PeerReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReportConfig {
    pub command: String,
    pub parts: Vec<&'static str>,
    pub target: &'static str,
    pub peers: &'static str,
    pub threads: usize,
    pub records: u64,
    pub fields: usize,
    pub field_bytes: usize,
    pub key_bytes: usize,
    pub distribution: String,
    pub read_percent: u32,
    pub configurations: Vec<&'static str>,
    pub checkpoint_log_bytes: u64,
    /// The cores background threads were kept to: `all` or a CPU list.
    pub background_cpus: String,
    pub seconds: f64,
    pub window_ms: f64,
    pub sample_every_ms: f64,
    pub ycsb_seconds: f64,
    pub workloads: Vec<&'static str>,
    pub ycsb_distributions: Vec<String>,
    pub ycsb_stores: Vec<&'static str>,
    pub recovery_keys: u64,
    pub recovery_members: u64,
    pub recovery_member_bytes: usize,
    pub recovery_types: &'static str,
    pub recovery_tail_percent: f64,
    pub recovery_threads: usize,
    pub machine: Machine,
}

/// Percentiles of one histogram, in microseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

impl Latency {
    pub fn of(histogram: &Histogram<u64>) -> Option<Latency> {
        if histogram.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Some(Latency {
            count: histogram.len(),
            mean: histogram.mean() / 1e3,
            p50: us(histogram.value_at_quantile(0.50)),
            p99: us(histogram.value_at_quantile(0.99)),
            p999: us(histogram.value_at_quantile(0.999)),
            p9999: us(histogram.value_at_quantile(0.9999)),
            max: us(histogram.max()),
        })
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct LatencySet {
    pub all: Option<Latency>,
    pub read: Option<Latency>,
    pub write: Option<Latency>,
}

impl LatencySet {
    pub(super) fn of(timed: &Measured, corrected: bool) -> LatencySet {
        let kinds = if corrected {
            &timed.corrected_ns
        } else {
            &timed.latency_ns
        };
        LatencySet {
            all: Latency::of(&timed.all(corrected)),
            read: Latency::of(&kinds[Kind::Read.index()]),
            write: Latency::of(&timed.writes(corrected)),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TailReport {
    pub configurations: Vec<TailResult>,
    /// The targets, on the latencies as measured.
    pub checks: Vec<Check>,
    /// The latency targets on the latencies corrected for coordinated
    /// omission.
    pub corrected_checks: Vec<Check>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LastCheckpoint {
    pub records: u64,
    pub keys_written: u64,
    pub image_bytes: u64,
    pub duration_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TailResult {
    pub configuration: &'static str,
    pub target: &'static str,
    pub checkpoint_mode: &'static str,
    pub seconds: f64,
    pub ops: u64,
    pub reads: u64,
    pub writes: u64,
    pub ops_per_sec: f64,
    pub prefill_seconds: f64,
    /// Completed during the timed run (the store's counter).
    pub checkpoints: u64,
    pub checkpoint_spans: Vec<Span>,
    /// The spans' total length.
    pub checkpoint_running_ms: f64,
    pub backpressure_waits: u64,
    pub backpressure_wait_ms: f64,
    pub log_bytes_pending: u64,
    pub last_checkpoint: Option<LastCheckpoint>,
    pub latency_us: LatencySet,
    pub corrected_latency_us: LatencySet,
    pub quiescence: Quiescence,
    pub other_cpu_percent: Option<f64>,
    pub window_ms: f64,
    pub ops_by_window: Vec<u64>,
    pub writes_by_window: Vec<u64>,
    pub server: Option<ServerCounters>,
}

impl TailReport {
    pub fn new(measured: &[TailMeasured]) -> TailReport {
        let configurations: Vec<TailResult> = measured.iter().map(TailResult::new).collect();
        let find = |configuration: Configuration| {
            configurations
                .iter()
                .find(|r| r.configuration == configuration.name())
        };
        let (background, off, stop) = (
            find(Configuration::Background),
            find(Configuration::Off),
            find(Configuration::StopTheWorld),
        );
        let p9999 = |result: Option<&TailResult>, corrected: bool| {
            result.and_then(|r| {
                let set = if corrected {
                    &r.corrected_latency_us
                } else {
                    &r.latency_us
                };
                set.all.as_ref().map(|l| l.p9999)
            })
        };
        let latency_checks = |corrected: bool| {
            vec![
                Check::at_most(
                    "p99.99 background / p99.99 off",
                    series::ratio(p9999(background, corrected), p9999(off, corrected)),
                    OVER_OFF_TARGET,
                ),
                Check::at_most(
                    "p99.99 background / p99.99 stop-the-world",
                    series::ratio(p9999(background, corrected), p9999(stop, corrected)),
                    OVER_STOP_THE_WORLD_TARGET,
                ),
            ]
        };
        let mut checks = vec![Check::at_least(
            "min 10 ms window during checkpoints / median window (background)",
            background.and_then(|r| r.quiescence.ratio),
            QUIESCENCE_TARGET,
        )];
        checks.extend(latency_checks(false));
        TailReport {
            checks,
            corrected_checks: latency_checks(true),
            configurations,
        }
    }
}

impl TailResult {
    fn new(m: &TailMeasured) -> TailResult {
        let timed = &m.timed;
        let ops_by_window = timed.ops_by_window();
        let writes_by_window = timed.writes_by_window();
        let writes: u64 = Kind::ALL
            .iter()
            .filter(|k| k.writes())
            .map(|k| timed.counts[k.index()])
            .sum();
        TailResult {
            configuration: m.configuration.name(),
            target: m.target.name(),
            checkpoint_mode: m.configuration.mode().name(),
            seconds: timed.elapsed.as_secs_f64(),
            ops: timed.ops(),
            reads: timed.counts[Kind::Read.index()],
            writes,
            ops_per_sec: timed.ops_per_sec(),
            prefill_seconds: m.prefill.as_secs_f64(),
            checkpoints: m.checkpoints,
            checkpoint_running_ms: m.spans.iter().map(Span::length_ms).fold(0.0, |a, b| a + b),
            quiescence: series::quiescence(&ops_by_window, &writes_by_window, &m.spans, WINDOW),
            checkpoint_spans: m.spans.clone(),
            backpressure_waits: m.backpressure_waits,
            backpressure_wait_ms: m.backpressure_wait.as_secs_f64() * 1e3,
            log_bytes_pending: m.log_bytes_pending,
            last_checkpoint: m.last_checkpoint.as_ref().map(|c| LastCheckpoint {
                records: c.records,
                keys_written: c.keys_written,
                image_bytes: c.image_bytes,
                duration_ms: c.duration.as_secs_f64() * 1e3,
            }),
            latency_us: LatencySet::of(timed, false),
            corrected_latency_us: LatencySet::of(timed, true),
            other_cpu_percent: timed.other_cpu.map(|share| share * 100.0),
            window_ms: WINDOW.as_secs_f64() * 1e3,
            ops_by_window,
            writes_by_window,
            server: m.server.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct YcsbReport {
    pub results: Vec<YcsbResult>,
    /// Combinations not run, and why.
    pub skipped: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct YcsbResult {
    pub store: &'static str,
    pub target: &'static str,
    pub workload: &'static str,
    pub mix: String,
    pub distribution: String,
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub prefill_seconds: f64,
    pub checkpoints: Option<u64>,
    pub inserted: u64,
    /// `all` and one entry per kind of operation the workload has.
    pub latency_us: BTreeMap<&'static str, Option<Latency>>,
    pub corrected_latency_us: BTreeMap<&'static str, Option<Latency>>,
    pub other_cpu_percent: Option<f64>,
    pub window_ms: f64,
    pub ops_by_window: Vec<u64>,
    pub server: Option<ServerCounters>,
}

impl YcsbReport {
    pub fn add(&mut self, m: &YcsbMeasured) {
        let timed = &m.timed;
        let (latency_us, corrected_latency_us) = ycsb_latencies(timed, m.workload);
        self.results.push(YcsbResult {
            store: m.store.name(),
            target: m.target.name(),
            workload: m.workload.name(),
            mix: m.workload.mix_text(),
            distribution: m.distribution.to_string(),
            seconds: timed.elapsed.as_secs_f64(),
            ops: timed.ops(),
            ops_per_sec: timed.ops_per_sec(),
            prefill_seconds: m.prefill.as_secs_f64(),
            checkpoints: m.checkpoints,
            inserted: m.inserted,
            latency_us,
            corrected_latency_us,
            other_cpu_percent: timed.other_cpu.map(|share| share * 100.0),
            window_ms: WINDOW.as_secs_f64() * 1e3,
            ops_by_window: timed.ops_by_window(),
            server: m.server.clone(),
        });
    }
}

/// A YCSB run's latencies: `all` and one entry per kind of operation
/// `workload` has; corrected, `all`.
pub(super) type Latencies = BTreeMap<&'static str, Option<Latency>>;

pub(super) fn ycsb_latencies(timed: &Measured, workload: Workload) -> (Latencies, Latencies) {
    let mut latency_us = BTreeMap::new();
    latency_us.insert("all", Latency::of(&timed.all(false)));
    for &(kind, _) in workload.mix() {
        latency_us.insert(kind.name(), Latency::of(&timed.latency_ns[kind.index()]));
    }
    let mut corrected_latency_us = BTreeMap::new();
    corrected_latency_us.insert("all", Latency::of(&timed.all(true)));
    (latency_us, corrected_latency_us)
}

#[derive(Clone, Debug, Serialize)]
pub struct RecoveredResult {
    /// `Collections::open`, wall time.
    pub open_seconds: f64,
    /// The store's own recovery report.
    pub recovery_total_seconds: f64,
    pub load_images_seconds: f64,
    /// The images engine store's own recovery, part of load_images.
    pub images_store_open_seconds: f64,
    pub images_store_index_image: Option<u64>,
    pub replay_seconds: f64,
    pub images_loaded: u64,
    pub records_replayed: u64,
    pub garbage_images_removed: u64,
    pub keys_found: u64,
    pub keys_expected: u64,
    pub sampled_keys: u64,
}

impl RecoveredResult {
    fn new(r: &Recovered) -> RecoveredResult {
        RecoveredResult {
            open_seconds: r.open.as_secs_f64(),
            recovery_total_seconds: r.report.total.as_secs_f64(),
            load_images_seconds: r.report.load_images.as_secs_f64(),
            images_store_open_seconds: r.report.images_store_open.as_secs_f64(),
            images_store_index_image: r.report.images_store_index_image,
            replay_seconds: r.report.replay.as_secs_f64(),
            images_loaded: r.report.images_loaded,
            records_replayed: r.report.records_replayed,
            garbage_images_removed: r.report.garbage_images_removed,
            keys_found: r.keys_found,
            keys_expected: r.keys_expected,
            sampled_keys: r.sampled_keys,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RecoveryReport {
    pub keys: u64,
    pub members: u64,
    pub member_bytes: usize,
    pub types: &'static str,
    pub recovery_threads: usize,
    pub build_seconds: f64,
    pub log_records: u64,
    pub log_payload_bytes: u64,
    pub log_file_bytes: u64,
    pub from_log: RecoveredResult,
    pub checkpoint_seconds: f64,
    pub checkpoint_keys_written: u64,
    pub checkpoint_image_bytes: u64,
    pub tail_keys: u64,
    pub tail_seconds: f64,
    pub from_images: RecoveredResult,
    pub strings: Option<StringRecoveryReport>,
    pub checks: Vec<Check>,
}

/// One engine recovery of the strings store.
#[derive(Clone, Debug, Serialize)]
pub struct StringRecoveredResult {
    /// `Store::open`, wall time.
    pub open_seconds: f64,
    pub blocks_scanned: u64,
    pub records: u64,
    pub keys_found: u64,
    /// The index image it started from (null: a full scan).
    pub image: Option<u64>,
    pub image_keys_named: u64,
}

impl StringRecoveredResult {
    fn new(r: &StringRecovered) -> StringRecoveredResult {
        StringRecoveredResult {
            open_seconds: r.open.as_secs_f64(),
            blocks_scanned: r.report.blocks_scanned,
            records: r.report.records,
            keys_found: r.keys_found,
            image: r.report.index_image.image,
            image_keys_named: r.report.index_image.named,
        }
    }
}

/// The strings store recovered by a full scan and from an index image.
#[derive(Clone, Debug, Serialize)]
pub struct StringRecoveryReport {
    pub keys: u64,
    pub value_bytes: usize,
    pub build_seconds: f64,
    pub data_file_bytes: u64,
    pub image_seconds: f64,
    pub image_entries: u64,
    pub tail_keys: u64,
    pub from_scan: StringRecoveredResult,
    pub from_image: StringRecoveredResult,
    /// from_scan's open time over from_image's.
    pub speedup: f64,
}

impl StringRecoveryReport {
    fn new(m: &StringRecoveryMeasured) -> StringRecoveryReport {
        StringRecoveryReport {
            keys: m.keys,
            value_bytes: m.value_bytes,
            build_seconds: m.build.as_secs_f64(),
            data_file_bytes: m.data_file_bytes,
            image_seconds: m.image.as_secs_f64(),
            image_entries: m.image_entries,
            tail_keys: m.tail_keys,
            from_scan: StringRecoveredResult::new(&m.from_scan),
            from_image: StringRecoveredResult::new(&m.from_image),
            speedup: m.from_scan.open.as_secs_f64() / m.from_image.open.as_secs_f64().max(1e-9),
        }
    }
}

impl RecoveryReport {
    pub fn new(m: &RecoveryMeasured) -> RecoveryReport {
        let from_images = RecoveredResult::new(&m.from_images);
        RecoveryReport {
            keys: m.data.keys,
            members: m.data.members,
            member_bytes: m.data.member_bytes,
            types: m.data.types.name(),
            recovery_threads: m.recovery_threads,
            build_seconds: m.build.as_secs_f64(),
            log_records: m.log_records,
            log_payload_bytes: m.log_payload_bytes,
            log_file_bytes: m.log_file_bytes,
            from_log: RecoveredResult::new(&m.from_log),
            checkpoint_seconds: m.checkpoint.as_secs_f64(),
            checkpoint_keys_written: m.checkpoint_report.keys_written,
            checkpoint_image_bytes: m.checkpoint_report.image_bytes,
            tail_keys: m.tail_keys,
            tail_seconds: m.tail.as_secs_f64(),
            strings: m.strings.as_ref().map(StringRecoveryReport::new),
            checks: vec![Check::at_most(
                format!(
                    "recovery from images + tail, {} threads (s)",
                    m.recovery_threads
                ),
                Some(from_images.open_seconds),
                RECOVERY_TARGET_SECONDS,
            )],
            from_images,
        }
    }
}

impl Report {
    pub fn new(config: &Config, machine: Machine) -> Report {
        let data = &config.recovery;
        Report {
            config: ReportConfig {
                command: config.command.clone(),
                parts: config.parts.iter().map(|p| p.name()).collect(),
                target: config.target.name(),
                peers: config.peers.name(),
                threads: config.threads,
                records: config.shape.records,
                fields: config.shape.fields,
                field_bytes: config.shape.field_bytes,
                key_bytes: records::KEY_BYTES,
                distribution: config.distribution.to_string(),
                read_percent: config.read_percent,
                configurations: config.configurations.iter().map(|c| c.name()).collect(),
                checkpoint_log_bytes: config.checkpoint_log_bytes,
                // As `run` applies it (validated already).
                background_cpus: background::describe(
                    &background::resolve(&config.background_cpus, &background::allowed_cpus())
                        .unwrap_or(None),
                ),
                seconds: config.duration.as_secs_f64(),
                window_ms: WINDOW.as_secs_f64() * 1e3,
                sample_every_ms: SAMPLE_EVERY.as_secs_f64() * 1e3,
                ycsb_seconds: config.ycsb_duration.as_secs_f64(),
                workloads: config.workloads.iter().map(|w| w.name()).collect(),
                ycsb_distributions: config
                    .ycsb_distributions
                    .iter()
                    .map(|d| d.to_string())
                    .collect(),
                ycsb_stores: config.ycsb_stores.iter().map(|s| s.name()).collect(),
                recovery_keys: data.keys,
                recovery_members: data.members,
                recovery_member_bytes: data.member_bytes,
                recovery_types: data.types.name(),
                recovery_tail_percent: config.recovery_tail_percent,
                recovery_threads: config.recovery_threads,
                machine,
            },
            skipped: Vec::new(),
            tail: None,
            ycsb: None,
            recovery: None,
            peer: None,
        }
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain data")
    }

    pub fn table(&self) -> String {
        let mut text = String::new();
        let c = &self.config;
        let _ = writeln!(text, "{}", c.command);
        let _ = writeln!(text, "{}", c.machine);
        if c.target == Target::Server.name() {
            let _ = writeln!(text, "{SERVER_TARGET}");
        }
        if let Some(peer) = &self.peer {
            let _ = writeln!(
                text,
                "peer: {} ({}) per run on 127.0.0.1, matching durability {}: {}; before each \
                 timed run {}; no checkpoint watcher (its checkpoint columns: –)",
                peer.system, peer.version, peer.durability, peer.settings, peer.before_timed_run
            );
        }
        for note in &self.skipped {
            let _ = writeln!(text, "skipped: {note}");
        }
        if let Some(tail) = &self.tail {
            self.tail_table(tail, &mut text);
        }
        if let Some(ycsb) = &self.ycsb {
            self.ycsb_table(ycsb, &mut text);
        }
        if let Some(recovery) = &self.recovery {
            recovery_table(recovery, &mut text);
        }
        trim_line_ends(&text)
    }

    /// A table row's first cell: `name`, and with a peer in the report,
    /// whose row it is (`system`).
    fn row_label(&self, name: &str, system: &str) -> String {
        match self.peer {
            Some(_) => format!("{name} {system}"),
            None => name.to_string(),
        }
    }

    fn tail_table(&self, tail: &TailReport, text: &mut String) {
        let c = &self.config;
        let _ = writeln!(
            text,
            "\n{}: {} records × {} fields × {} B, {}, {}% reads (HGET) / {}% writes (HSET of one \
             field), {} threads, {} s per configuration; a checkpoint every {} MiB of log; \
             background threads on CPUs {}",
            Part::Tail.name(),
            thousands(c.records as f64),
            c.fields,
            c.field_bytes,
            c.distribution,
            c.read_percent,
            100 - c.read_percent,
            c.threads,
            c.seconds,
            c.checkpoint_log_bytes >> 20,
            c.background_cpus
        );
        let _ = writeln!(
            text,
            "ckpt: checkpoints completed, and the time they ran. win min/med: the smallest {} ms \
             window during checkpoints over the\nmedian window. quiesced: windows without a \
             completed write. Latencies as measured; \"corrected\": corrected for\ncoordinated \
             omission (what requests arriving at the clients' mean rate would have waited). \
             others: CPU other\nprocesses used during the run.",
            c.window_ms
        );
        let peer = self.peer.as_ref();
        let label = |configuration: &str, system: &str| self.row_label(configuration, system);
        let width = width_to_fit(
            tail.configurations
                .iter()
                .map(|r| label(r.configuration, "engram").len()),
            2,
            15,
        );
        let columns = [
            Column::Left(width),
            Column::Right(11),
            Column::Right(6),
            Column::Right(10),
            Column::Right(9),
            Column::Right(8),
            Column::Right(11),
            Column::Right(11),
            Column::Right(11),
            Column::Right(11),
            Column::Right(11),
            Column::Right(11),
            Column::Right(11),
            Column::Right(7),
        ];
        let table = Table::new("  ", &columns);
        table.row(
            text,
            &[
                "config",
                "ops/s",
                "ckpt",
                "ckpt time",
                "win min",
                "quiesc",
                "read p99",
                "rd p99.99",
                "write p99",
                "wr p99.99",
                "all p99.9",
                "all p99.99",
                "all max",
                "others",
            ],
        );
        let p = |l: &Option<Latency>, f| latency_cell(l.as_ref(), f);
        let others = |share: Option<f64>| share.map_or(String::new(), |p| format!("{p:.0}%"));
        // The cells of a row from a latency set on.
        let latencies = |set: &LatencySet| {
            [
                p(&set.read, |l| l.p99),
                p(&set.read, |l| l.p9999),
                p(&set.write, |l| l.p99),
                p(&set.write, |l| l.p9999),
                p(&set.all, |l| l.p999),
                p(&set.all, |l| l.p9999),
                p(&set.all, |l| l.max),
            ]
        };
        let none = "–".to_string();
        for r in &tail.configurations {
            let q = &r.quiescence;
            let l = latencies(&r.latency_us);
            table.row(
                text,
                &[
                    &label(r.configuration, "engram"),
                    &thousands(r.ops_per_sec),
                    &r.checkpoints.to_string(),
                    &millis(r.checkpoint_running_ms),
                    &decimals(q.ratio, 2, &none),
                    &q.windows_without_writes.to_string(),
                    &l[0],
                    &l[1],
                    &l[2],
                    &l[3],
                    &l[4],
                    &l[5],
                    &l[6],
                    &others(r.other_cpu_percent),
                ],
            );
            if let Some(redis) = peer.and_then(|peer| peer.tail_row(r.configuration)) {
                let l = latencies(&redis.latency_us);
                table.row(
                    text,
                    &[
                        &label(r.configuration, "redis"),
                        &thousands(redis.ops_per_sec),
                        &none,
                        &none,
                        &none,
                        &redis.windows.windows_without_writes.to_string(),
                        &l[0],
                        &l[1],
                        &l[2],
                        &l[3],
                        &l[4],
                        &l[5],
                        &l[6],
                        &others(redis.other_cpu_percent),
                    ],
                );
            }
        }
        // The corrected latencies of all operations, right-aligned with the
        // table's last columns.
        let corrected_columns = [
            Column::Left(width),
            Column::Right(44),
            Column::Right(11),
            Column::Right(11),
            Column::Right(11),
        ];
        let corrected_table = Table::new("  ", &corrected_columns);
        let corrected = |text: &mut String, name: &str, set: &LatencySet| {
            corrected_table.row(
                text,
                &[
                    name,
                    &p(&set.all, |l| l.p99),
                    &p(&set.all, |l| l.p999),
                    &p(&set.all, |l| l.p9999),
                    &p(&set.all, |l| l.max),
                ],
            );
        };
        corrected_table.row(
            text,
            &[
                "corrected:",
                "all p99",
                "all p99.9",
                "all p99.99",
                "all max",
            ],
        );
        for r in &tail.configurations {
            corrected(
                text,
                &label(r.configuration, "engram"),
                &r.corrected_latency_us,
            );
            if let Some(redis) = peer.and_then(|peer| peer.tail_row(r.configuration)) {
                corrected(
                    text,
                    &label(r.configuration, "redis"),
                    &redis.corrected_latency_us,
                );
            }
        }
        for r in &tail.configurations {
            server_line(text, r.configuration, r.server.as_ref());
        }
        if let Some(peer) = peer {
            peer.lines(text, Part::Tail.name());
        }
        check_lines(text, "targets", &tail.checks);
        check_lines(
            text,
            "latency targets, corrected for coordinated omission",
            &tail.corrected_checks,
        );
    }

    fn ycsb_table(&self, ycsb: &YcsbReport, text: &mut String) {
        let c = &self.config;
        let _ = writeln!(
            text,
            "\n{}: {} records × {} fields × {} B ({} B per record over strings), {} threads, {} s \
             per run; collections with background checkpoints every {} MiB of log, strings with \
             the engine's defaults",
            Part::Ycsb.name(),
            thousands(c.records as f64),
            c.fields,
            c.field_bytes,
            c.fields * c.field_bytes,
            c.threads,
            c.ycsb_seconds,
            c.checkpoint_log_bytes >> 20
        );
        let peer = self.peer.as_ref();
        let label = |store: &str, system: &str| self.row_label(store, system);
        let width = width_to_fit(
            ycsb.results.iter().map(|r| label(r.store, "engram").len()),
            1,
            12,
        );
        let columns = [
            Column::Left(width),
            Column::Left(8),
            Column::Left(9),
            Column::Left(31),
            Column::Right(11),
            Column::Right(10),
            Column::Right(10),
            Column::Right(11),
            Column::Right(13),
            Column::Right(6),
        ];
        let table = Table::new("  ", &columns);
        table.row(
            text,
            &[
                "store",
                "ycsb",
                "dist",
                "mix",
                "ops/s",
                "p50",
                "p99",
                "p99.99",
                "corr p99.99",
                "ckpt",
            ],
        );
        fn all(map: &Latencies) -> Option<&Latency> {
            map.get("all").and_then(|l| l.as_ref())
        }
        for r in &ycsb.results {
            let workload = r.workload.trim_start_matches("ycsb-").to_uppercase();
            let (measured, corrected) = (all(&r.latency_us), all(&r.corrected_latency_us));
            table.row(
                text,
                &[
                    &label(r.store, "engram"),
                    &workload,
                    &r.distribution,
                    &r.mix,
                    &thousands(r.ops_per_sec),
                    &latency_cell(measured, |l| l.p50),
                    &latency_cell(measured, |l| l.p99),
                    &latency_cell(measured, |l| l.p9999),
                    &latency_cell(corrected, |l| l.p9999),
                    &r.checkpoints.map_or("–".to_string(), |n| n.to_string()),
                ],
            );
            if let Some(redis) = peer.and_then(|peer| peer.ycsb_row(r)) {
                let (measured, corrected) =
                    (all(&redis.latency_us), all(&redis.corrected_latency_us));
                table.row(
                    text,
                    &[
                        &label(r.store, "redis"),
                        &workload,
                        &redis.distribution,
                        &redis.mix,
                        &thousands(redis.ops_per_sec),
                        &latency_cell(measured, |l| l.p50),
                        &latency_cell(measured, |l| l.p99),
                        &latency_cell(measured, |l| l.p9999),
                        &latency_cell(corrected, |l| l.p9999),
                        "–",
                    ],
                );
            }
        }
        for r in &ycsb.results {
            let name = format!("{} {} {}", r.store, r.workload, r.distribution);
            server_line(text, &name, r.server.as_ref());
        }
        if let Some(peer) = peer {
            peer.lines(text, Part::Ycsb.name());
        }
        for note in &ycsb.skipped {
            let _ = writeln!(text, "  skipped: {note}");
        }
    }
}

fn recovery_table(r: &RecoveryReport, text: &mut String) {
    let _ = writeln!(
        text,
        "\n{}: {} keys ({}), {} elements of {} B; built in {:.2} s with {} log records ({} MB \
         of payload, log file {} MB)",
        Part::Recovery.name(),
        thousands(r.keys as f64),
        r.types,
        thousands(r.members as f64),
        r.member_bytes,
        r.build_seconds,
        thousands(r.log_records as f64),
        r.log_payload_bytes / 1_000_000,
        r.log_file_bytes / 1_000_000
    );
    let line = |text: &mut String, name: &str, x: &RecoveredResult| {
        let _ = writeln!(
            text,
            "  {name:<26} open {:>8}: {} images loaded in {}, {} records replayed in {}; {} of {} \
             keys found, {} sampled keys checked",
            millis(x.open_seconds * 1e3),
            thousands(x.images_loaded as f64),
            millis(x.load_images_seconds * 1e3),
            thousands(x.records_replayed as f64),
            millis(x.replay_seconds * 1e3),
            thousands(x.keys_found as f64),
            thousands(x.keys_expected as f64),
            x.sampled_keys
        );
    };
    line(text, "(b) from the log alone", &r.from_log);
    let _ = writeln!(
        text,
        "  {:<26} {} ({} images, {} MB); then a tail of {} new keys in {}",
        "checkpoint_now",
        millis(r.checkpoint_seconds * 1e3),
        thousands(r.checkpoint_keys_written as f64),
        r.checkpoint_image_bytes / 1_000_000,
        thousands(r.tail_keys as f64),
        millis(r.tail_seconds * 1e3)
    );
    line(
        text,
        &format!("(a) images + tail, {} thr", r.recovery_threads),
        &r.from_images,
    );
    let store_open = |x: &RecoveredResult| {
        format!(
            "{} ({})",
            millis(x.images_store_open_seconds * 1e3),
            x.images_store_index_image
                .map_or("full scan".to_string(), |n| format!("index image {n}"))
        )
    };
    let _ = writeln!(
        text,
        "  {:<26} (b) {}, (a) {}",
        "images store's own open",
        store_open(&r.from_log),
        store_open(&r.from_images)
    );
    if let Some(s) = &r.strings {
        strings_lines(s, r.recovery_threads, text);
    }
    check_lines(text, "targets", &r.checks);
}

fn strings_lines(s: &StringRecoveryReport, threads: usize, text: &mut String) {
    let _ = writeln!(
        text,
        "\n{} strings: {} keys, {} B values ({} MB data file); built in {:.2} s; index image of {} \
         keys in {}, then a tail of {} new keys",
        Part::Recovery.name(),
        thousands(s.keys as f64),
        s.value_bytes,
        s.data_file_bytes / 1_000_000,
        s.build_seconds,
        thousands(s.image_entries as f64),
        millis(s.image_seconds * 1e3),
        thousands(s.tail_keys as f64),
    );
    let line = |text: &mut String, name: &str, x: &StringRecoveredResult| {
        let _ = writeln!(
            text,
            "  {name:<26} open {:>8}: {} blocks scanned, {} records; {} keys found",
            millis(x.open_seconds * 1e3),
            thousands(x.blocks_scanned as f64),
            thousands(x.records as f64),
            thousands(x.keys_found as f64),
        );
    };
    line(text, "(b) full scan", &s.from_scan);
    line(
        text,
        &format!("(a) image + tail, {threads} thr"),
        &s.from_image,
    );
    let _ = writeln!(
        text,
        "  {:<26} {:.2}x",
        "full scan / image + tail", s.speedup
    );
}

/// What the table says of the server target once.
const SERVER_TARGET: &str = "target server: an engram server in this process per run, over TCP on \
     127.0.0.1, one Redis connection per client thread, one request in flight; checkpoints in \
     the background, started with BGSAVE at the log volume below";

/// A run's `INFO collections` counters, on the server target.
fn server_line(text: &mut String, name: &str, server: Option<&ServerCounters>) {
    let Some(server) = server else {
        return;
    };
    let info = |field: &str| server.info_at_end.get(field).copied().unwrap_or(0);
    let _ = writeln!(
        text,
        "  server INFO at the end of {name}: checkpoints {} since it started ({} BGSAVE sent by \
         the benchmark in the run), backpressure_waits {} ({} ms), oplog_bytes_since_checkpoint \
         {}, durability {}",
        info("checkpoints"),
        server.checkpoints_requested,
        info("backpressure_waits"),
        info("backpressure_wait_ms"),
        thousands(info("oplog_bytes_since_checkpoint") as f64),
        server.durability,
    );
}

fn check_lines(text: &mut String, title: &str, checks: &[Check]) {
    let _ = writeln!(text, "  {title}:");
    for check in checks {
        let _ = writeln!(
            text,
            "    {:<68}{:>9} {} {:<6}{}",
            check.name,
            check.value.map_or("–".to_string(), |v| format!("{v:.3}")),
            check.comparison,
            check.target,
            check.verdict()
        );
    }
}

/// A latency cell: `percentile` of `latency` in microseconds, empty
/// without operations.
pub(super) fn latency_cell(latency: Option<&Latency>, percentile: fn(&Latency) -> f64) -> String {
    latency.map_or(String::new(), |l| micros(percentile(l)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_in_microseconds() {
        let mut histogram = crate::runner::new_histogram();
        assert!(Latency::of(&histogram).is_none());
        for ns in 1..=10_000u64 {
            histogram.record(ns * 100).unwrap();
        }
        let latency = Latency::of(&histogram).unwrap();
        assert_eq!(latency.count, 10_000);
        assert!((latency.p50 - 500.0).abs() / 500.0 < 0.01, "{latency:?}");
        assert!((latency.p99 - 990.0).abs() / 990.0 < 0.01, "{latency:?}");
        assert!(latency.p9999 <= latency.max);
    }
}
