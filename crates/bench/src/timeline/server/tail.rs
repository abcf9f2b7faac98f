//! The tail part against the server: the embedded part's run
//! ([`crate::timeline::tail`]) with commands over TCP.
//!
//! A fresh server; the records prefilled (an HSET of every field per
//! record, pipelined), then `SAVE` folds them into images, as
//! `checkpoint_now` does in the embedded part, so the timed run starts
//! from an empty log. In the timed run each client does what the embedded
//! client does, in the same sequence (`tail::Mix`): `HGET key fieldN` (the
//! reply must be the field's bytes) or `HSET key fieldN value`, one request
//! in flight. The sampler reads `INFO collections` every millisecond for
//! the checkpoint spans, and sends BGSAVE when the log calls for a
//! checkpoint ([`super::Watcher`]).
//!
//! The Redis peer ([`measure_peer`]) gets the same prefill and the same
//! clients; `BGREWRITEAOF` takes the place of `SAVE` ([`super::peer`]), and
//! nothing samples it during the run.

use std::time::{Duration, Instant};

use redis::Connection;

use super::endpoint::Endpoint;
use super::peer::{PeerMeasured, RedisPeer, RedisServer};
use super::{record_command, Info, Instance, Target, Watcher};
use crate::progress::progress_bar;
use crate::server::System;
use crate::timeline::error::{Result, TimelineError};
use crate::timeline::records;
use crate::timeline::series::Span;
use crate::timeline::tail::{run_with_spans, Configuration, Mix, Sample, Step, TailMeasured};
use crate::timeline::timed::{self, Kind, Measured, SAMPLE_EVERY};
use crate::timeline::Config;
use crate::workload::ValuePool;

/// Runs `configuration` (background: the only one the server has) on a
/// server in `config.dir/server-tail-<name>`.
pub fn measure(
    config: &Config,
    values: &ValuePool,
    configuration: Configuration,
) -> Result<TailMeasured> {
    if configuration != Configuration::Background {
        return Err(TimelineError::flag(
            "configurations",
            format!("{configuration}: {}", super::ONLY_BACKGROUND),
        ));
    }
    let dir = config
        .dir
        .join(format!("server-tail-{}", configuration.name()));
    let instance = Instance::start(&dir, &config.background_cpus)?;
    let label = format!("server tail {configuration}");
    let prefill = prefill(config, values, instance.endpoint(), &label)?;
    let mut control = instance.endpoint().connect()?;
    let spinner = progress_bar(config.progress, None, &format!("{label} SAVE"));
    let saved = redis::cmd("SAVE").query::<()>(&mut control);
    spinner.finish_and_clear();
    saved?;
    let before = Info::read(&mut control)?;
    let mut watcher = Watcher::new(control, Some(config.checkpoint_log_bytes), SAMPLE_EVERY);
    let (timed, spans) = timed_run(
        config,
        values,
        instance.endpoint(),
        &label,
        before.checkpoints(),
        || {
            let (at, info) = watcher.poll()?;
            Some(Sample {
                at,
                running: info.get("checkpoint_in_progress") != 0,
                checkpoints: info.checkpoints(),
                last_duration: Some(Duration::from_millis(
                    info.get("last_checkpoint_duration_ms"),
                )),
            })
        },
    )?;
    let (after, counters) = instance.counters(watcher)?;
    instance.stop()?;
    Ok(TailMeasured {
        configuration,
        target: Target::Server,
        prefill,
        timed,
        spans,
        checkpoints: after.since(&before, "checkpoints"),
        backpressure_waits: after.since(&before, "backpressure_waits"),
        backpressure_wait: Duration::from_millis(after.since(&before, "backpressure_wait_ms")),
        log_bytes_pending: after.get("oplog_bytes_since_checkpoint"),
        // INFO says what the last checkpoint took but not the bytes it
        // wrote: its fields are in `server.info_at_end`.
        last_checkpoint: None,
        server: Some(counters),
    })
}

/// Runs `configuration` as [`measure`] does, on a fresh Redis in
/// `config.dir/redis-tail-<name>`.
pub fn measure_peer(
    config: &Config,
    values: &ValuePool,
    configuration: Configuration,
    redis: &RedisServer,
) -> Result<PeerMeasured> {
    let dir = config
        .dir
        .join(format!("redis-tail-{}", configuration.name()));
    let peer = RedisPeer::start(redis, &dir)?;
    let label = format!("redis tail {configuration}");
    let prefill = prefill(config, values, peer.endpoint(), &label)?;
    peer.rewrite_aof(config.progress, &label)?;
    let before = peer.mark()?;
    let (mut timed, _) = timed_run(config, values, peer.endpoint(), &label, 0, || None)?;
    let redis = peer.stop(&before, &mut timed)?;
    Ok(PeerMeasured {
        prefill,
        timed,
        inserted: 0,
        redis,
    })
}

/// The records, an HSET of every field each, pipelined into `endpoint`.
fn prefill(
    config: &Config,
    values: &ValuePool,
    endpoint: &Endpoint,
    label: &str,
) -> Result<Duration> {
    let shape = config.shape;
    let names = records::field_names(shape.fields);
    endpoint.prefill(
        config,
        label,
        &|id, pipeline| record_command(pipeline, &names, values, &shape, id),
        0,
    )
}

/// The timed run against `endpoint`, with `sample` as
/// [`run_with_spans`] takes it.
fn timed_run(
    config: &Config,
    values: &ValuePool,
    endpoint: &Endpoint,
    label: &str,
    checkpoints: u64,
    sample: impl FnMut() -> Option<Sample> + Send,
) -> Result<(Measured, Vec<Span>)> {
    let connections = endpoint.connect_all(config.threads)?;
    let system = endpoint.system;
    run_with_spans(
        config,
        label,
        checkpoints,
        |thread| {
            let mix = Mix::new(config, thread);
            client(mix, values, connections.take(thread), system)
        },
        sample,
    )
}

/// One client: HGET or HSET of one field, as the embedded client.
fn client<'a>(
    mut mix: Mix,
    values: &'a ValuePool,
    mut connection: Connection,
    system: System,
) -> impl FnMut() -> Result<(Kind, Instant)> + 'a {
    move || match mix.next() {
        Step::Read { id, field } => {
            let mut command = redis::cmd("HGET");
            command.arg(&mix.key()[..]).arg(mix.name(field));
            let began = Instant::now();
            let found: Option<Vec<u8>> = command.query(&mut connection)?;
            let found = found.map(|value| value.len());
            if found != Some(mix.shape.field_bytes) {
                return Err(timed::lost(
                    system.name(),
                    format!("HGET {id} field{field} found {found:?} bytes"),
                ));
            }
            Ok((Kind::Read, began))
        }
        Step::Write { id, field, version } => {
            let mut command = redis::cmd("HSET");
            command
                .arg(&mix.key()[..])
                .arg(mix.name(field))
                .arg(records::field_value(values, &mix.shape, id, field, version));
            let began = Instant::now();
            command.query::<()>(&mut connection)?;
            Ok((Kind::Update, began))
        }
    }
}
