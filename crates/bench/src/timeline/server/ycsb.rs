//! YCSB against the server: the embedded part's workloads
//! ([`crate::timeline::ycsb`]) as commands, one request in flight per
//! client; the same choices in the same sequence per thread (`ycsb::Choices`).
//!
//! | operation | over collections | over strings |
//! |---|---|---|
//! | read | HGETALL (every field must come back) | GET (the whole record) |
//! | update | HSET of one field | SET of the whole record |
//! | insert | HSET of every field; in E, with the index entry's ZADD in one MULTI/EXEC (one round trip, atomic as the embedded insert) | SET |
//! | scan (E) | ZRANGEBYSCORE `index<bucket>` from the start record on, LIMIT what is still wanted, bucket after bucket; then an HGETALL per record found, one after another (as YCSB's Redis binding reads them) | skipped |
//! | read-modify-write (F) | HGETALL, then HSET of one field from its old value: two round trips, not atomic (YCSB's own RMW is not either) | GET then SET |
//!
//! A timed run over collections has the watcher read `INFO collections`
//! every [`super::YCSB_WATCH_EVERY`] and send BGSAVE at
//! `--checkpoint-log-mib` ([`super::Watcher`]). The embedded store also
//! checkpoints during its prefill; the server does not before 64 MiB, so a
//! prefill that left `--checkpoint-log-mib` of log or more is folded with
//! `SAVE` before the timed run.
//!
//! The Redis peer ([`measure_peer`]) gets the same prefill and the same
//! clients (collections are Redis hashes, E's index Redis sorted sets),
//! its AOF rewritten after the prefill ([`super::peer`]), and no watcher.

use std::time::{Duration, Instant};

use redis::{Connection, Pipeline};

use super::endpoint::Endpoint;
use super::peer::{PeerMeasured, RedisPeer, RedisServer};
use super::{record_command, Info, Instance, Target, Watcher, YCSB_WATCH_EVERY};
use crate::server::System;
use crate::timeline::error::Result;
use crate::timeline::records::{self, Shape, KEY_BYTES};
use crate::timeline::timed::{self, Kind, Measured};
use crate::timeline::ycsb::{
    index_buckets, index_key, modified, Case, Choices, Inserts, StoreKind, Workload, YcsbMeasured,
    MAX_SCAN_LENGTH, SCAN_BUCKET_RECORDS,
};
use crate::workload::ValuePool;

/// Runs `case` on a server in
/// `config.dir/server-ycsb-<store>-<workload>-<distribution>`.
pub fn measure(case: &Case) -> Result<YcsbMeasured> {
    let Case {
        config,
        store,
        workload,
        distribution,
        ..
    } = *case;
    let run = Run::new(case, "server");
    let dir = case.dir("server-ycsb");
    let instance = Instance::start(&dir, &config.background_cpus)?;
    let prefill = run.prefill(instance.endpoint())?;
    let mut control = instance.endpoint().connect()?;
    let collections = store == StoreKind::Collections;
    let pending = Info::read(&mut control)?.get("oplog_bytes_since_checkpoint");
    if collections && pending >= config.checkpoint_log_bytes {
        // The embedded store checkpoints during its prefill at this log
        // volume, the server only at its own 64 MiB: catch up before the
        // run rather than in its first milliseconds.
        redis::cmd("SAVE").query::<()>(&mut control)?;
    }
    let before = Info::read(&mut control)?;
    let mut watcher = Watcher::new(
        control,
        collections.then_some(config.checkpoint_log_bytes),
        YCSB_WATCH_EVERY,
    );
    let (timed, inserted) = run.timed(instance.endpoint(), &mut |_| {
        if collections {
            watcher.poll();
        }
    })?;
    let (after, counters) = instance.counters(watcher)?;
    instance.stop()?;
    Ok(YcsbMeasured {
        store,
        workload,
        distribution,
        prefill,
        timed,
        checkpoints: collections.then(|| after.since(&before, "checkpoints")),
        inserted,
        target: Target::Server,
        server: Some(counters),
    })
}

/// Runs `case` as [`measure`] does, on a fresh Redis in
/// `config.dir/redis-ycsb-<store>-<workload>-<distribution>`.
pub fn measure_peer(case: &Case, redis: &RedisServer) -> Result<PeerMeasured> {
    let run = Run::new(case, "redis");
    let peer = RedisPeer::start(redis, &case.dir("redis-ycsb"))?;
    let prefill = run.prefill(peer.endpoint())?;
    peer.rewrite_aof(case.config.progress, &run.label)?;
    let before = peer.mark()?;
    let (mut timed, inserted) = run.timed(peer.endpoint(), &mut |_| {})?;
    let redis = peer.stop(&before, &mut timed)?;
    Ok(PeerMeasured {
        prefill,
        timed,
        inserted,
        redis,
    })
}

/// One case against either server.
struct Run<'a> {
    case: Case<'a>,
    label: String,
    names: Vec<Box<[u8]>>,
}

impl<'a> Run<'a> {
    /// A run of `case` against `system`'s server (which its progress label
    /// names).
    fn new(case: &Case<'a>, system: &str) -> Run<'a> {
        assert!(case.store.runs(case.workload), "strings run no scans");
        let Case {
            store,
            workload,
            distribution,
            ..
        } = case;
        Run {
            case: *case,
            label: format!("{system} {store} {workload} {distribution}"),
            names: records::field_names(case.config.shape.fields),
        }
    }

    /// The records (and E's index over collections) into `endpoint`.
    fn prefill(&self, endpoint: &Endpoint) -> Result<Duration> {
        let shape = self.case.config.shape;
        let indexed =
            self.case.store == StoreKind::Collections && self.case.workload == Workload::E;
        let commands = |id: u64, pipeline: &mut Pipeline| match self.case.store {
            StoreKind::Collections => {
                record_command(pipeline, &self.names, self.case.field_values, &shape, id);
                if indexed {
                    index_command(pipeline, id).ignore();
                }
            }
            StoreKind::Strings => {
                pipeline
                    .cmd("SET")
                    .arg(&records::key(id)[..])
                    .arg(records::string_value(self.case.record_values, id, 0))
                    .ignore();
            }
        };
        let buckets = index_buckets(indexed, shape.records);
        endpoint.prefill(self.case.config, &self.label, &commands, buckets)
    }

    /// The timed run against `endpoint`, `sample` called as
    /// [`timed::run`] calls it: what it measured, and the records inserted.
    fn timed(
        &self,
        endpoint: &Endpoint,
        sample: &mut (dyn FnMut(Instant) + Send),
    ) -> Result<(Measured, u64)> {
        let config = self.case.config;
        let connections = endpoint.connect_all(config.threads)?;
        let inserts = Inserts::new(config.shape.records, config.threads);
        let timed = timed::run(
            config.progress,
            &self.label,
            config.threads,
            config.ycsb_duration,
            |thread| {
                let choices = Choices::new(
                    config,
                    &inserts,
                    self.case.workload,
                    self.case.distribution,
                    thread,
                );
                let client = Client {
                    connection: connections.take(thread),
                    system: endpoint.system,
                    shape: config.shape,
                    names: &self.names,
                    workload: self.case.workload,
                    key: [0u8; KEY_BYTES],
                };
                match self.case.store {
                    StoreKind::Collections => {
                        client.over_collections(choices, self.case.field_values)
                    }
                    StoreKind::Strings => client.over_strings(choices, self.case.record_values),
                }
            },
            sample,
        )?;
        Ok((timed, inserts.total()))
    }
}

/// E's index entry for record `id` (score its number, member its key),
/// added to `pipeline`.
fn index_command(pipeline: &mut Pipeline, id: u64) -> &mut Pipeline {
    pipeline
        .cmd("ZADD")
        .arg(index_key(id / SCAN_BUCKET_RECORDS))
        .arg(id)
        .arg(&records::key(id)[..])
}

/// What one client thread holds.
struct Client<'a> {
    connection: Connection,
    /// Named in the errors of reads that did not find what was written.
    system: System,
    shape: Shape,
    names: &'a [Box<[u8]>],
    workload: Workload,
    key: [u8; KEY_BYTES],
}

/// A client's operation, boxed: the two stores' closures differ in type.
type Operation<'a> = Box<dyn FnMut() -> Result<(Kind, Instant)> + 'a>;

impl<'a> Client<'a> {
    /// HGETALL of the record in `self.key`: every field must be there
    /// (`what` says what read it, when it is not).
    fn read_record(&mut self, what: impl FnOnce() -> String) -> Result<Vec<Vec<u8>>> {
        let all: Vec<Vec<u8>> = redis::cmd("HGETALL")
            .arg(&self.key[..])
            .query(&mut self.connection)?;
        if all.len() != 2 * self.shape.fields {
            return Err(timed::lost(
                self.system.name(),
                format!(
                    "collections: {} {} found {} fields",
                    self.workload,
                    what(),
                    all.len() / 2
                ),
            ));
        }
        Ok(all)
    }

    fn over_collections(
        mut self,
        mut choices: Choices<'a>,
        values: &'a ValuePool,
    ) -> Operation<'a> {
        let mut members: Vec<Vec<u8>> = Vec::with_capacity(MAX_SCAN_LENGTH as usize);
        Box::new(move || {
            let kind = choices.kind();
            let shape = self.shape;
            match kind {
                Kind::Read => {
                    let id = choices.record(&mut self.key);
                    let began = Instant::now();
                    self.read_record(|| format!("read of record {id}"))?;
                    Ok((kind, began))
                }
                Kind::Update => {
                    let id = choices.record(&mut self.key);
                    let field = choices.field(shape.fields);
                    let version = choices.version();
                    let mut command = redis::cmd("HSET");
                    command
                        .arg(&self.key[..])
                        .arg(&self.names[field][..])
                        .arg(records::field_value(values, &shape, id, field, version));
                    let began = Instant::now();
                    command.query::<()>(&mut self.connection)?;
                    Ok((kind, began))
                }
                Kind::Insert => {
                    let id = choices.new_record();
                    let mut pipeline = redis::pipe();
                    record_command(&mut pipeline, self.names, values, &shape, id);
                    if self.workload == Workload::E {
                        index_command(pipeline.atomic(), id).ignore();
                    }
                    let began = Instant::now();
                    pipeline.query::<()>(&mut self.connection)?;
                    choices.inserted();
                    Ok((kind, began))
                }
                Kind::Scan => {
                    let start = choices.record(&mut self.key);
                    let length = choices.scan_length();
                    let began = Instant::now();
                    self.scan(start, length, &mut members)?;
                    if members.is_empty() {
                        return Err(timed::lost(
                            self.system.name(),
                            format!(
                                "collections: scan from record {start} found nothing in the index"
                            ),
                        ));
                    }
                    for member in &members {
                        let what = || {
                            format!(
                                "scan from record {start}: {} in the index, its record",
                                member.escape_ascii()
                            )
                        };
                        if member.len() != KEY_BYTES {
                            let what = format!("collections: {}", what());
                            return Err(timed::lost(self.system.name(), what));
                        }
                        self.key.copy_from_slice(member);
                        self.read_record(what)?;
                    }
                    Ok((kind, began))
                }
                Kind::ReadModifyWrite => {
                    let id = choices.record(&mut self.key);
                    let field = choices.field(shape.fields);
                    let began = Instant::now();
                    let all = self.read_record(|| format!("read-modify-write of record {id}"))?;
                    let name = &self.names[field][..];
                    let old = all
                        .chunks_exact(2)
                        .find(|pair| pair[0] == name)
                        .map(|pair| modified(&pair[1]))
                        .ok_or_else(|| {
                            timed::lost(
                                self.system.name(),
                                format!(
                                    "collections: read-modify-write of record {id} found no \
                                     field{field}"
                                ),
                            )
                        })?;
                    redis::cmd("HSET")
                        .arg(&self.key[..])
                        .arg(name)
                        .arg(&old[..])
                        .query::<()>(&mut self.connection)?;
                    Ok((kind, began))
                }
            }
        })
    }

    /// Up to `length` record keys from record `start` on, in record order,
    /// from E's range index, into `members`.
    fn scan(&mut self, start: u64, length: u64, members: &mut Vec<Vec<u8>>) -> Result<()> {
        members.clear();
        let mut bucket = start / SCAN_BUCKET_RECORDS;
        let mut from = start;
        while (members.len() as u64) < length {
            let wanted = length as usize - members.len();
            let found: Vec<Vec<u8>> = redis::cmd("ZRANGEBYSCORE")
                .arg(index_key(bucket))
                .arg(from)
                .arg("+inf")
                .arg("LIMIT")
                .arg(0)
                .arg(wanted)
                .query(&mut self.connection)?;
            // No member from `from` on: the bucket does not exist, nor do
            // any after it (inserts fill buckets in order).
            if found.is_empty() {
                break;
            }
            members.extend(found);
            bucket += 1;
            from = bucket * SCAN_BUCKET_RECORDS;
        }
        Ok(())
    }

    fn over_strings(mut self, mut choices: Choices<'a>, values: &'a ValuePool) -> Operation<'a> {
        let record_bytes = self.shape.record_bytes();
        let workload = self.workload;
        let system = self.system.name();
        let lost = move |what: String| timed::lost(system, format!("strings: {what}"));
        Box::new(move || {
            let kind = choices.kind();
            let (id, value) = match kind {
                Kind::Read | Kind::ReadModifyWrite => (choices.record(&mut self.key), None),
                Kind::Update => {
                    let id = choices.record(&mut self.key);
                    (
                        id,
                        Some(records::string_value(values, id, choices.version())),
                    )
                }
                Kind::Insert => {
                    let id = choices.new_record();
                    records::fill_key(id, &mut self.key);
                    (id, Some(records::string_value(values, id, 0)))
                }
                Kind::Scan => unreachable!("strings run no scans (E is skipped over strings)"),
            };
            let mut command = redis::cmd(if value.is_some() { "SET" } else { "GET" });
            command.arg(&self.key[..]);
            if let Some(value) = value {
                command.arg(value);
            }
            let began = Instant::now();
            if value.is_some() {
                command.query::<()>(&mut self.connection)?;
            } else {
                let old: Option<Vec<u8>> = command.query(&mut self.connection)?;
                let old = old.filter(|v| v.len() == record_bytes).ok_or_else(|| {
                    lost(format!(
                        "{workload} {} of record {id} found no record",
                        kind.name()
                    ))
                })?;
                if kind == Kind::ReadModifyWrite {
                    redis::cmd("SET")
                        .arg(&self.key[..])
                        .arg(&modified(&old)[..])
                        .query::<()>(&mut self.connection)?;
                }
            }
            if kind == Kind::Insert {
                choices.inserted();
            }
            Ok((kind, began))
        })
    }
}
