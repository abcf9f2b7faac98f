//! `--target server`: the tail and YCSB parts against the server, over
//! TCP, with real Redis clients, and the same clients against Redis.
//!
//! ## The servers
//!
//! Each configuration (a tail configuration, a YCSB store × workload ×
//! distribution) starts an [`engram_server::Server`] in this process, on
//! 127.0.0.1 and a port the system picks, with a fresh data directory
//! under `--dir` (the collections in its `collections` subdirectory) and
//! the server's defaults otherwise: durability `process`, a worker thread
//! per core, log level `warning` (for the whole process from then on: the
//! server sets it). It is shut down (which syncs) and its directory removed
//! once measured.
//!
//! With `--peers redis` (the default on this target) the same run is then
//! measured against a fresh `redis-server` ([`peer`]: AOF on, `appendfsync
//! no` to match `process`, Redis's defaults otherwise): the same prefill,
//! the same client threads with the same seeds, the same commands, the same
//! duration. The file systems are synced before each of the two runs, so
//! that neither pays for the other's write-back. `--peers none` measures
//! Engram alone.
//!
//! ## The clients
//!
//! Every client thread of the timed run has a connection of its own (the
//! `redis` crate, sync API), opened before the run, and sends one request
//! at a time: each operation is one round trip, its latency the time from
//! sending the request to having the reply decoded, and the command is
//! built before the clock starts (as the embedded part builds its
//! operation). The operations are the embedded part's, as commands: see
//! [`tail`] and [`ycsb`]. The prefill pipelines (a pipeline per 1024
//! records and connection) and then checks `DBSIZE`. The clients know a
//! server only by its address ([`endpoint`]): Engram's and Redis's get the
//! same code.
//!
//! ## Checkpoints
//!
//! The server checkpoints its collections in the background only (DIPPER's
//! mode): the tail part's `off` and `stop-the-world` configurations do not
//! apply and are skipped with a note in the report. Its own trigger is 64
//! MiB of log, which no flag changes; so that both targets checkpoint at
//! the same log volume, a watcher thread reads `INFO collections` (every
//! millisecond in the tail part, where it also records the checkpoint spans
//! as the embedded sampler does from `stats()`; every 10 ms in YCSB over
//! collections) and sends `BGSAVE` when `oplog_bytes_since_checkpoint` has
//! reached `--checkpoint-log-mib` and no checkpoint runs: the server's
//! checkpointer then runs one, as its own trigger would (BGSAVE also syncs
//! the stores, which costs an msync of what was written since). With
//! `--checkpoint-log-mib` 64 or more, the server's own trigger comes first.
//! Backpressure follows the server's settings (writes slow down past 4 ×
//! 64 MiB of log not yet checkpointed). The watcher is Engram's: Redis
//! runs without one, and rewrites its AOF when its own rule says.
//!
//! ## Reported
//!
//! The embedded part's numbers, labelled `target: server`, and the server's
//! `INFO collections` counters at the end of each timed run (checkpoints,
//! backpressure waits, ...) with the BGSAVEs the watcher sent
//! ([`ServerCounters`]). Redis's rows sit beside Engram's, without the
//! checkpoint columns, with its `INFO persistence` counters
//! ([`peer::RedisCounters`]) and the ratios Engram / Redis
//! ([`crate::timeline::peer_report`]).

pub mod endpoint;
pub mod peer;
pub mod tail;
pub mod ycsb;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use engram_server::{Config as ServerConfig, LogLevel, Server};
use engram_threads::BackgroundCpus;
use redis::{Connection, Pipeline};
use serde::Serialize;

use super::error::{Result, TimelineError};
use super::records::{self, Shape};
use crate::command::remove_if_present;
use crate::server::System;
use crate::workload::ValuePool;
use endpoint::Endpoint;

/// What the timed parts measure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Target {
    /// The collections (and engine) stores in this process.
    #[default]
    Embedded,
    /// The server, over TCP (module docs).
    Server,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Embedded => "embedded",
            Target::Server => "server",
        }
    }
}

/// Why the tail part's `off` and `stop-the-world` skip the server.
pub const ONLY_BACKGROUND: &str =
    "not applicable to the server target (the server checkpoints in the background only)";
/// Why the recovery part skips the server.
pub const NO_RECOVERY: &str =
    "not applicable to the server target (it measures Collections::open in this process)";
/// How often the watcher reads INFO during YCSB (the tail part: every
/// sample, [`super::timed::SAMPLE_EVERY`]).
pub const YCSB_WATCH_EVERY: Duration = Duration::from_millis(10);
/// A BGSAVE that no checkpoint followed within this is sent again.
const BGSAVE_PATIENCE: Duration = Duration::from_secs(1);
/// The fields of `INFO collections` the benchmark reads.
pub const INFO_FIELDS: [&str; 6] = [
    "checkpoints",
    "checkpoint_in_progress",
    "last_checkpoint_duration_ms",
    "oplog_bytes_since_checkpoint",
    "backpressure_waits",
    "backpressure_wait_ms",
];

/// What the server said about its collections during one timed run.
#[derive(Clone, Debug, Serialize)]
pub struct ServerCounters {
    /// The server's durability setting.
    pub durability: &'static str,
    /// BGSAVEs the watcher sent (module docs).
    pub checkpoints_requested: u64,
    /// Every numeric field of `INFO collections` when the run ended.
    pub info_at_end: BTreeMap<String, u64>,
}

/// A running server with its data directory.
pub struct Instance {
    server: Option<Server>,
    dir: PathBuf,
    endpoint: Endpoint,
    durability: &'static str,
}

impl Instance {
    /// Starts a server on a fresh `dir`, its background threads on
    /// `background_cpus` (the benchmark's choice, which the server applies
    /// again process-wide).
    pub fn start(dir: &Path, background_cpus: &BackgroundCpus) -> Result<Instance> {
        remove_if_present(dir)?;
        let config = ServerConfig {
            bind: "127.0.0.1".into(),
            port: 0,
            dir: dir.to_path_buf(),
            loglevel: LogLevel::Warning,
            background_cpus: background_cpus.clone(),
            ..ServerConfig::default()
        };
        let durability = config.durability.name();
        let server = Server::start(config)?;
        Ok(Instance {
            endpoint: Endpoint::new(System::Engram, server.addr),
            server: Some(server),
            dir: dir.to_path_buf(),
            durability,
        })
    }

    /// Where the clients connect.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Ends a timed run's watching: `INFO collections` now (on the
    /// watcher's connection), and the counters to report.
    pub fn counters(&self, watcher: Watcher) -> Result<(Info, ServerCounters)> {
        let (mut connection, checkpoints_requested) = watcher.finish()?;
        let info = Info::read(&mut connection)?;
        let counters = ServerCounters {
            durability: self.durability,
            checkpoints_requested,
            info_at_end: info.0.clone(),
        };
        Ok((info, counters))
    }

    /// Shuts the server down (it syncs and closes its stores) and removes
    /// its directory.
    pub fn stop(mut self) -> Result<()> {
        if let Some(server) = self.server.take() {
            server.shutdown().map_err(TimelineError::Server)?;
        }
        Ok(remove_if_present(&self.dir)?)
    }
}

impl Drop for Instance {
    /// On an error: the server stops all the same (the directory stays).
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = server.shutdown();
        }
    }
}

/// The numeric fields of `INFO collections`.
#[derive(Clone, Debug)]
pub struct Info(BTreeMap<String, u64>);

impl Info {
    pub fn read(connection: &mut Connection) -> Result<Info> {
        let text: String = redis::cmd("INFO").arg("collections").query(connection)?;
        let fields: BTreeMap<String, u64> = text
            .lines()
            .filter_map(|line| {
                let (name, value) = line.trim_end().split_once(':')?;
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect();
        if let Some(missing) = INFO_FIELDS.iter().find(|f| !fields.contains_key(**f)) {
            return Err(TimelineError::Server(format!(
                "INFO collections has no {missing} field"
            )));
        }
        Ok(Info(fields))
    }

    /// One of [`INFO_FIELDS`].
    pub fn get(&self, field: &str) -> u64 {
        debug_assert!(INFO_FIELDS.contains(&field), "{field} is not checked");
        self.0.get(field).copied().unwrap_or(0)
    }

    pub fn checkpoints(&self) -> u64 {
        self.get("checkpoints")
    }

    /// `self - before` for a counter.
    pub fn since(&self, before: &Info, field: &str) -> u64 {
        self.get(field).saturating_sub(before.get(field))
    }
}

/// Reads `INFO collections` on its own connection for the sampler of a
/// timed run, and sends BGSAVE when the log calls for a checkpoint
/// (module docs).
pub struct Watcher {
    connection: Connection,
    /// BGSAVE once this much log waits (`None`: never).
    trigger: Option<u64>,
    every: Duration,
    last: Option<Instant>,
    /// A BGSAVE sent, when, and the checkpoints completed then.
    pending: Option<(Instant, u64)>,
    requested: u64,
    /// The first failure; the watcher stops at it, and [`Watcher::finish`]
    /// returns it.
    failed: Option<TimelineError>,
}

impl Watcher {
    pub fn new(connection: Connection, trigger: Option<u64>, every: Duration) -> Watcher {
        Watcher {
            connection,
            trigger,
            every,
            last: None,
            pending: None,
            requested: 0,
            failed: None,
        }
    }

    /// Reads INFO if `every` has passed since the last read: the instant
    /// the request was sent and the answer.
    pub fn poll(&mut self) -> Option<(Instant, Info)> {
        let at = Instant::now();
        if self.failed.is_some() || self.last.is_some_and(|last| at - last < self.every) {
            return None;
        }
        self.last = Some(at);
        match self.observe() {
            Ok(info) => Some((at, info)),
            Err(error) => {
                self.failed = Some(error);
                None
            }
        }
    }

    fn observe(&mut self) -> Result<Info> {
        let info = Info::read(&mut self.connection)?;
        let checkpoints = info.checkpoints();
        if self.pending.is_some_and(|(sent, completed)| {
            checkpoints > completed || sent.elapsed() > BGSAVE_PATIENCE
        }) {
            self.pending = None;
        }
        let due = self.trigger.is_some_and(|trigger| {
            info.get("checkpoint_in_progress") == 0
                && info.get("oplog_bytes_since_checkpoint") >= trigger
        });
        if due && self.pending.is_none() {
            redis::cmd("BGSAVE").query::<()>(&mut self.connection)?;
            self.pending = Some((Instant::now(), checkpoints));
            self.requested += 1;
        }
        Ok(info)
    }

    /// The connection back and the BGSAVEs sent, or the first failure.
    pub fn finish(self) -> Result<(Connection, u64)> {
        match self.failed {
            Some(error) => Err(error),
            None => Ok((self.connection, self.requested)),
        }
    }
}

/// The HSET that creates record `id` (every field at version 0), added to
/// `pipeline`.
pub fn record_command(
    pipeline: &mut Pipeline,
    names: &[Box<[u8]>],
    values: &ValuePool,
    shape: &Shape,
    id: u64,
) {
    let command = pipeline.cmd("HSET").arg(&records::key(id)[..]);
    for (field, name) in names.iter().enumerate() {
        command
            .arg(&name[..])
            .arg(records::field_value(values, shape, id, field, 0));
    }
    command.ignore();
}
