//! The Redis peer of `--target server` (`--peers redis`, the default): a
//! real `redis-server` started fresh for each measured run and driven by
//! the same clients as Engram's server ([`super::endpoint`]).
//!
//! Redis is found on PATH (or at `--redis-server`) and started with the helpers
//! of `engram-bench server` ([`crate::server::peers`]): on 127.0.0.1 and a
//! free port, AOF on with `appendfsync` matching the in-process server's
//! default durability (`process`: `appendfsync no`), RDB snapshots off, and
//! Redis's defaults otherwise (its automatic AOF rewrite stays on, as its
//! users run it). Its data directory (with its log) is
//! `--dir/redis-<run>`, removed when it stops.
//!
//! After the prefill, Redis rewrites its AOF (`BGREWRITEAOF`, waited for):
//! Engram's server folds its prefill into images with `SAVE` before the
//! timed run, so that the run starts from an empty log; the rewrite is
//! Redis's counterpart (the run starts from an AOF whose base holds the
//! prefill), and a rewrite the prefill set off does not spill into the
//! run. Nothing watches Redis during the run (the checkpoint watcher is
//! Engram's); `INFO persistence` before and after says how many AOF
//! rewrites Redis did meanwhile ([`RedisCounters`]).
//!
//! Engram's server runs in this process, Redis in its own: so that "CPU
//! other processes used" means the same for both, Redis's CPU time during
//! the run is taken out of it (and reported on its own).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redis::Connection;
use serde::Serialize;

use super::endpoint::Endpoint;
use crate::command::remove_if_present;
use crate::cpu_time;
use crate::progress::progress_bar;
use crate::server::peers::{self, Peer, System};
use crate::server::Durability;
use crate::timeline::error::{Result, TimelineError};
use crate::timeline::timed::Measured;

/// The servers measured beside Engram's with `--target server`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Peers {
    /// A fresh redis-server per run.
    #[default]
    Redis,
    /// Engram's server alone.
    None,
}

impl Peers {
    pub fn name(self) -> &'static str {
        match self {
            Peers::Redis => "redis",
            Peers::None => "none",
        }
    }
}

/// How long Redis may take to rewrite its AOF after a prefill.
const REWRITE_TIMEOUT: Duration = Duration::from_secs(600);
/// How often `INFO persistence` is read while waiting for the rewrite.
const REWRITE_POLL: Duration = Duration::from_millis(10);

/// Redis's durability: the one the in-process server runs at by default.
pub fn durability() -> Durability {
    let engram = engram_server::Config::default().durability.name();
    engram
        .parse()
        .unwrap_or_else(|_| panic!("the server's durability {engram} has a Redis counterpart"))
}

/// The redis-server program, found once per benchmark.
#[derive(Clone, Debug)]
pub struct RedisServer {
    pub program: PathBuf,
    /// What `redis-server --version` says.
    pub version: String,
}

impl RedisServer {
    /// Finds `program` (`--redis-server`; the default on PATH), or says how
    /// to install it ([`peers::check_redis_programs`]).
    pub fn find(program: &Path) -> Result<RedisServer> {
        peers::check_redis_programs(&[(program, "redis-server")])
            .map_err(TimelineError::RedisMissing)?;
        let program = peers::find_program(program).unwrap_or_else(|| program.to_path_buf());
        Ok(RedisServer {
            version: peers::version(&program),
            program,
        })
    }

    /// The settings the report quotes (`redis-server` and its arguments
    /// but the port and the directory).
    pub fn settings() -> String {
        let args = peers::redis_args(0, Path::new("DIR"), durability());
        let settings: Vec<String> = args
            .chunks(2)
            .filter(|pair| !matches!(pair[0].as_str(), "--port" | "--dir" | "--bind"))
            .map(|pair| match pair[1].as_str() {
                "" => format!("{} \"\"", pair[0]),
                value => format!("{} {value}", pair[0]),
            })
            .collect();
        format!(
            "redis-server {} (Redis's defaults otherwise: automatic AOF rewrite on)",
            settings.join(" ")
        )
    }
}

/// A running redis-server with its data directory.
pub struct RedisPeer {
    peer: Peer,
    endpoint: Endpoint,
}

impl RedisPeer {
    /// Starts `server` on a free port with a fresh data directory `dir`
    /// (its log `dir/redis-server.log`), and waits until it answers PING.
    pub fn start(server: &RedisServer, dir: &Path) -> Result<RedisPeer> {
        remove_if_present(dir)?;
        // Redis changes into its --dir: give it (and the messages) an
        // absolute one.
        let dir = std::path::absolute(dir)
            .map_err(|e| TimelineError::io("resolving the Redis directory", dir, e))?;
        let port = peers::free_port()?;
        let args = peers::redis_args(port, &dir, durability());
        let log = dir.join("redis-server.log");
        let peer = Peer::start(System::Redis, &server.program, &args, port, dir, log, false)?;
        Ok(RedisPeer {
            peer,
            endpoint: Endpoint::new(System::Redis, SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Rewrites the AOF (after the prefill: module docs) and waits until
    /// the rewrite is done, with a spinner labelled `label`.
    pub fn rewrite_aof(&self, progress: bool, label: &str) -> Result<()> {
        let spinner = progress_bar(progress, None, &format!("{label} BGREWRITEAOF"));
        let outcome = self.rewrite_aof_now();
        spinner.finish_and_clear();
        outcome
    }

    fn rewrite_aof_now(&self) -> Result<()> {
        let mut connection = self.endpoint.connect()?;
        let deadline = Instant::now() + REWRITE_TIMEOUT;
        let wait = |connection: &mut Connection, done: &dyn Fn(&Persistence) -> bool| loop {
            let now = Persistence::read(connection)?;
            if done(&now) {
                return Ok(now);
            }
            if Instant::now() >= deadline {
                return Err(TimelineError::PeerFailed(format!(
                    "its AOF rewrite did not end within {} s",
                    REWRITE_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(REWRITE_POLL);
        };
        // A rewrite the prefill set off refuses another: let it end first.
        let before = wait(&mut connection, &|p| !p.rewriting())?;
        redis::cmd("BGREWRITEAOF").query::<()>(&mut connection)?;
        let after = wait(&mut connection, &|p| {
            !p.rewriting() && p.get("aof_rewrites").unwrap_or(1) > before.rewrites()
        })?;
        if after.status != "ok" {
            return Err(TimelineError::PeerFailed(format!(
                "its AOF rewrite ended with aof_last_bgrewrite_status:{} (log {})",
                after.status,
                self.peer.log().display()
            )));
        }
        Ok(())
    }

    /// What [`RedisPeer::stop`] compares with: taken just before the
    /// timed run.
    pub fn mark(&self) -> Result<Mark> {
        Ok(Mark {
            persistence: Persistence::read(&mut self.endpoint.connect()?)?,
            cpu: self.cpu_ticks(),
        })
    }

    /// Redis's CPU time so far and the machine's, in clock ticks.
    fn cpu_ticks(&self) -> Option<(u64, u64)> {
        let redis = cpu_time::process_ticks(&self.peer.pid().to_string())?;
        Some((redis, cpu_time::machine_ticks()?.1))
    }

    /// After the timed run `timed` (`before` taken just before it): stops
    /// Redis (SIGTERM: it writes its AOF out and exits), removes its
    /// directory, and takes Redis's CPU time out of what `timed` says other
    /// processes used (module docs).
    pub fn stop(mut self, before: &Mark, timed: &mut Measured) -> Result<RedisCounters> {
        self.peer.check_alive("after the timed run")?;
        let cpu = self.cpu_ticks();
        let after = Persistence::read(&mut self.endpoint.connect()?)?;
        self.peer.stop()?;
        let share = before
            .cpu
            .zip(cpu)
            .and_then(|((redis0, total0), (redis, total))| {
                let total = total.checked_sub(total0).filter(|&t| t > 0)?;
                Some(redis.saturating_sub(redis0) as f64 / total as f64)
            });
        if let (Some(others), Some(share)) = (&mut timed.other_cpu, share) {
            *others = (*others - share).max(0.0);
        }
        let rewrites = |p: &Persistence| p.get("aof_rewrites");
        Ok(RedisCounters {
            appendfsync: durability().appendfsync(),
            cpu_percent: share.map(|share| share * 100.0),
            aof_rewrites_in_run: rewrites(&after)
                .zip(rewrites(&before.persistence))
                .map(|(after, before)| after.saturating_sub(before)),
            info_at_end: after.fields,
        })
    }
}

/// Redis's state just before a timed run.
pub struct Mark {
    persistence: Persistence,
    /// Redis's CPU time and the machine's ([`RedisPeer::cpu_ticks`]).
    cpu: Option<(u64, u64)>,
}

/// The numeric fields of Redis's `INFO persistence` (negative ones, -1 for
/// "never", left out) and its last AOF rewrite's status.
#[derive(Clone, Debug)]
pub struct Persistence {
    fields: BTreeMap<String, u64>,
    status: String,
}

impl Persistence {
    fn read(connection: &mut Connection) -> Result<Persistence> {
        let text: String = redis::cmd("INFO").arg("persistence").query(connection)?;
        let mut fields = BTreeMap::new();
        let mut status = String::new();
        for line in text.lines() {
            let Some((name, value)) = line.trim_end().split_once(':') else {
                continue;
            };
            if name == "aof_last_bgrewrite_status" {
                status = value.to_string();
            } else if let Ok(value) = value.parse() {
                fields.insert(name.to_string(), value);
            }
        }
        if !fields.contains_key("aof_rewrite_in_progress") {
            return Err(TimelineError::PeerFailed(
                "INFO persistence has no aof_rewrite_in_progress field".into(),
            ));
        }
        Ok(Persistence { fields, status })
    }

    fn get(&self, field: &str) -> Option<u64> {
        self.fields.get(field).copied()
    }

    /// Whether an AOF rewrite runs or waits to.
    fn rewriting(&self) -> bool {
        self.get("aof_rewrite_in_progress") != Some(0)
            || self.get("aof_rewrite_scheduled").is_some_and(|n| n != 0)
    }

    /// AOF rewrites since Redis started (Redis 7; 0 before).
    fn rewrites(&self) -> u64 {
        self.get("aof_rewrites").unwrap_or(0)
    }
}

/// What Redis said about its persistence during one timed run.
#[derive(Clone, Debug, Serialize)]
pub struct RedisCounters {
    /// Redis's fsync policy.
    pub appendfsync: &'static str,
    /// The share of the machine's CPU time redis-server used during the
    /// run, in percent (taken out of the run's `other_cpu_percent`).
    pub cpu_percent: Option<f64>,
    /// AOF rewrites during the timed run (`null` before Redis 7, whose INFO
    /// has no count).
    pub aof_rewrites_in_run: Option<u64>,
    /// The numeric fields of `INFO persistence` when the run ended.
    pub info_at_end: BTreeMap<String, u64>,
}

/// What one run measured on the peer.
pub struct PeerMeasured {
    pub prefill: Duration,
    pub timed: Measured,
    /// Records inserted during the run (YCSB D and E).
    pub inserted: u64,
    pub redis: RedisCounters,
}
