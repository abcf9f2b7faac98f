//! Part 1: tail latency and quiescent freedom (DIPPER 5.3 and 5.4).
//!
//! One configuration on a fresh store: open with its checkpoint mode,
//! prefill the records (one HSET of every field per record), then — for
//! the two configurations that checkpoint — fold the prefill into images
//! with `checkpoint_now`, so the timed run starts from an empty log; the
//! `off` store (`CheckpointMode::Manual`) is never checkpointed. Then the
//! timed run ([`super::timed`]): each client picks a record (zipfian or
//! uniform) and a field (uniform), and reads it (`read` + `Hash::get`,
//! the value copied out: HGET) or writes it with a new value (`update` of
//! one HSET: the field of a YCSB update), by the read percentage. The
//! sampler polls `stats()` every millisecond for checkpoint spans
//! ([`super::series`]). The store is then abandoned (`crash`) and removed.

use std::time::{Duration, Instant};

use engram_collections::{CheckpointMode, Collections, CollectionsOptions, Op};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::error::Result;
use super::records::{self, Shape};
use super::series::{Span, SpanRecorder};
use super::server::{ServerCounters, Target};
use super::stats;
use super::timed::{self, Kind, Measured};
use super::Config;
use crate::command::remove_if_present;
use crate::progress::progress_bar;
use crate::workload::{KeyChooser, ValuePool};

/// Seeds of the record choice and of the read/write and field coins; each
/// thread adds its number, so runs are repeatable.
const KEY_CHOICE_SEED: u64 = 0x5EED;
const MIX_SEED: u64 = 0xC0FFEE;

/// A checkpoint configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Configuration {
    /// DIPPER's quiescent-free checkpoints.
    Background,
    /// No checkpoint at all (`CheckpointMode::Manual`, never called): the
    /// cost of logging alone.
    Off,
    /// Writers wait for the whole checkpoint: the paper's cached system.
    StopTheWorld,
}

impl Configuration {
    pub const ALL: [Configuration; 3] = [
        Configuration::Background,
        Configuration::Off,
        Configuration::StopTheWorld,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Configuration::Background => "background",
            Configuration::Off => "off",
            Configuration::StopTheWorld => "stop-the-world",
        }
    }

    pub fn mode(self) -> CheckpointMode {
        match self {
            Configuration::Background => CheckpointMode::Background,
            Configuration::Off => CheckpointMode::Manual,
            Configuration::StopTheWorld => CheckpointMode::StopTheWorld,
        }
    }
}

impl std::fmt::Display for Configuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Configuration {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "background" | "bg" => Ok(Configuration::Background),
            "off" | "manual" => Ok(Configuration::Off),
            "stop-the-world" | "stw" => Ok(Configuration::StopTheWorld),
            _ => Err(format!(
                "unknown configuration '{s}' (expected background, off or stop-the-world)"
            )),
        }
    }
}

/// What one configuration measured.
pub struct TailMeasured {
    pub configuration: Configuration,
    pub target: Target,
    pub prefill: Duration,
    pub timed: Measured,
    pub spans: Vec<Span>,
    /// Checkpoints completed during the timed run (the store's counter).
    pub checkpoints: u64,
    pub backpressure_waits: u64,
    pub backpressure_wait: Duration,
    /// Log bytes not yet checkpointed when the run ended.
    pub log_bytes_pending: u64,
    /// The last checkpoint of the run, if any: how much it wrote.
    pub last_checkpoint: Option<engram_collections::CheckpointReport>,
    /// The server target: what its INFO said.
    pub server: Option<ServerCounters>,
}

/// The options every collections store of the timed parts opens with.
pub fn options(config: &Config, mode: CheckpointMode) -> CollectionsOptions {
    let defaults = CollectionsOptions::default();
    CollectionsOptions {
        checkpoint_log_bytes: config.checkpoint_log_bytes,
        checkpoints: mode,
        // Writers are slowed when the log not yet checkpointed passes a
        // multiple of the trigger; without checkpoints it only grows, so
        // `off` would measure the brake, not the log: no backpressure there.
        backpressure_factor: match mode {
            CheckpointMode::Manual => u64::MAX / config.checkpoint_log_bytes.max(1),
            CheckpointMode::Background | CheckpointMode::StopTheWorld => {
                defaults.backpressure_factor
            }
        },
        ..defaults
    }
}

/// Runs `configuration` in `config.dir/tail-<name>`.
pub fn measure(
    config: &Config,
    values: &ValuePool,
    configuration: Configuration,
) -> Result<TailMeasured> {
    let dir = config.dir.join(format!("tail-{}", configuration.name()));
    remove_if_present(&dir)?;
    let collections = Collections::open(&dir, options(config, configuration.mode()))?;
    let shape = config.shape;
    let label = format!("tail {configuration}");
    let bar = progress_bar(
        config.progress,
        Some(shape.records),
        &format!("{label} prefill"),
    );
    let prefill = records::prefill_collections(
        &collections,
        &shape,
        values,
        config.threads,
        &bar,
        &|_| Vec::new(),
        0,
    );
    bar.finish_and_clear();
    let prefill = prefill?;
    if configuration != Configuration::Off {
        let spinner = progress_bar(config.progress, None, &format!("{label} checkpoint"));
        let folded = collections.checkpoint_now();
        spinner.finish_and_clear();
        folded?;
    }
    let before = stats::stats(&collections);
    let (timed, spans) = run_with_spans(
        config,
        &label,
        before.checkpoints,
        |thread| client(Mix::new(config, thread), values, &collections),
        || {
            let at = Instant::now();
            let stats = stats::stats(&collections);
            Some(Sample {
                at,
                running: stats.checkpoint_running,
                checkpoints: stats.checkpoints,
                last_duration: stats.last_checkpoint.map(|c| c.duration),
            })
        },
    )?;
    let after = stats::stats(&collections);
    // The directory goes next: a clean close would only sync what is about
    // to be deleted.
    collections.crash();
    remove_if_present(&dir)?;
    Ok(TailMeasured {
        configuration,
        target: Target::Embedded,
        prefill,
        timed,
        spans,
        checkpoints: after.checkpoints - before.checkpoints,
        backpressure_waits: after.backpressure_waits - before.backpressure_waits,
        backpressure_wait: after
            .backpressure_wait_time
            .saturating_sub(before.backpressure_wait_time),
        log_bytes_pending: after.log_bytes_since_checkpoint,
        last_checkpoint: after
            .last_checkpoint
            .filter(|_| after.checkpoints > before.checkpoints),
        server: None,
    })
}

/// What one sample of the store said about checkpoints: at `at`, whether
/// one was running, how many had completed, how long the last one took.
pub(super) struct Sample {
    pub at: Instant,
    pub running: bool,
    pub checkpoints: u64,
    pub last_duration: Option<Duration>,
}

/// The timed run of a configuration, and the checkpoint spans from what
/// `sample()` says every [`timed::SAMPLE_EVERY`] (`None`: nothing this
/// time); `checkpoints` completed before the run.
pub(super) fn run_with_spans<C>(
    config: &Config,
    label: &str,
    checkpoints: u64,
    make_client: impl Fn(usize) -> C + Sync,
    mut sample: impl FnMut() -> Option<Sample> + Send,
) -> Result<(Measured, Vec<Span>)>
where
    C: FnMut() -> Result<(Kind, Instant)>,
{
    let mut recorder: Option<SpanRecorder> = None;
    let timed = timed::run(
        config.progress,
        label,
        config.threads,
        config.duration,
        make_client,
        &mut |origin| {
            let recorder = recorder.get_or_insert_with(|| SpanRecorder::new(origin, checkpoints));
            if let Some(seen) = sample() {
                recorder.observe(seen.at, seen.running, seen.checkpoints, seen.last_duration);
            }
        },
    )?;
    let end = timed.origin + timed.duration;
    let spans = recorder
        .unwrap_or_else(|| SpanRecorder::new(timed.origin, checkpoints))
        .finish(end);
    Ok((timed, spans))
}

/// What a client of the timed run does next (the same sequence for a
/// thread over either target): a record (zipfian or uniform) and a field
/// (uniform), read or written by the read percentage.
pub(super) struct Mix {
    pub shape: Shape,
    names: Vec<Box<[u8]>>,
    chooser: KeyChooser,
    coin: SmallRng,
    read_percent: u32,
    /// Version 0 is the prefill's; each write of this thread a new one.
    version: u64,
    key: [u8; records::KEY_BYTES],
}

/// One operation of the mix on record `id` ([`Mix::key`]).
pub(super) enum Step {
    Read { id: u64, field: usize },
    Write { id: u64, field: usize, version: u64 },
}

impl Mix {
    pub(super) fn new(config: &Config, thread: usize) -> Mix {
        Mix {
            shape: config.shape,
            names: records::field_names(config.shape.fields),
            chooser: KeyChooser::new(
                config.distribution,
                config.shape.records,
                KEY_CHOICE_SEED + thread as u64,
            ),
            coin: SmallRng::seed_from_u64(MIX_SEED + thread as u64),
            read_percent: config.read_percent,
            version: (thread as u64) << 40,
            key: [0u8; records::KEY_BYTES],
        }
    }

    pub(super) fn next(&mut self) -> Step {
        let id = self.chooser.next_id();
        records::fill_key(id, &mut self.key);
        let field = self.coin.random_range(0..self.shape.fields);
        if self.coin.random_range(0..100) < self.read_percent {
            Step::Read { id, field }
        } else {
            self.version += 1;
            Step::Write {
                id,
                field,
                version: self.version,
            }
        }
    }

    /// The key of the last step's record.
    pub(super) fn key(&self) -> &[u8; records::KEY_BYTES] {
        &self.key
    }

    /// Field `field`'s name.
    pub(super) fn name(&self, field: usize) -> &[u8] {
        &self.names[field]
    }

    /// What a write of `field` of `id` at `version` logs.
    pub(super) fn pair(
        &self,
        values: &ValuePool,
        id: u64,
        field: usize,
        version: u64,
    ) -> (Box<[u8]>, Box<[u8]>) {
        records::field_pair(&self.names, values, &self.shape, id, field, version)
    }
}

/// One client of the timed run: HGET or HSET of one field.
fn client<'a>(
    mut mix: Mix,
    values: &'a ValuePool,
    collections: &'a Collections,
) -> impl FnMut() -> Result<(Kind, Instant)> + 'a {
    let field_bytes = mix.shape.field_bytes;
    let mut copied = Vec::with_capacity(field_bytes);
    move || match mix.next() {
        Step::Read { id, field } => {
            let began = Instant::now();
            let found = collections.read(mix.key(), |entry| {
                records::copy_field(entry, mix.name(field), &mut copied)
            });
            if found != Some(field_bytes) {
                return Err(timed::lost(
                    "collections",
                    format!("HGET {} field{field} found {found:?}", id),
                ));
            }
            Ok((Kind::Read, began))
        }
        Step::Write { id, field, version } => {
            let key = *mix.key();
            let op = Op::HashSet {
                key: key.into(),
                pairs: vec![mix.pair(values, id, field, version)],
            };
            let began = Instant::now();
            collections.update(&[&key[..]], move |_| Ok((vec![op], ())))?;
            Ok((Kind::Update, began))
        }
    }
}
