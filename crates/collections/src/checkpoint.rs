//! Quiescent-free checkpoints (DIPPER 3.5), with per-key images.
//!
//! 1. **Cut** ([`OpLog::cut`]): the swap of the active and archived logs;
//!    every lane is held for an instant, nothing else waits.
//! 2. **Replay** the archived records, in sequence order, onto a working
//!    set holding the previous images of just the keys they touch (the
//!    same [`apply`] the frontend ran, so the working set passes through
//!    the states the frontend did).
//! 3. **Write** one image per touched key under the new version (a
//!    tombstone for a key that is gone), and make them durable.
//! 4. **Commit**: replace the root with the new version, durably.
//! 5. **Free** the archived segments; then delete the superseded images
//!    (their tombstones last).
//!
//! A crash before 4 leaves the old root: recovery ignores the new images
//! and replays both logs. A crash after 4 leaves the new root: the old
//! images are garbage recovery removes, and the archived records are
//! covered (recovery skips records at or below the root). The frontend's
//! DRAM state is never read or locked, so writers and readers go on
//! throughout; only [`CheckpointMode::StopTheWorld`], kept as the baseline
//! the benchmark compares against, makes writers wait for the whole
//! checkpoint.
//!
//! [`OpLog::cut`]: crate::oplog::OpLog::cut
//! [`apply`]: crate::apply::apply

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hashbrown::{HashMap, HashSet};

use crate::apply::apply;
use crate::error::{Error, Result};
use crate::images::{decode_image, encode_image, image_key, write_root};
use crate::op::{decode_batch, Bytes};
use crate::state::Entry;
use crate::Inner;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Checkpoints run on a background thread while writers go on.
    #[default]
    Background,
    /// Only [`crate::Collections::checkpoint_now`] checkpoints.
    Manual,
    /// Background, but writers wait for the whole checkpoint: the
    /// "cached system" baseline of the DIPPER paper, for benchmarks.
    StopTheWorld,
}

impl CheckpointMode {
    pub fn parse(text: &str) -> Option<CheckpointMode> {
        match text {
            "background" | "on" => Some(CheckpointMode::Background),
            "manual" | "off" => Some(CheckpointMode::Manual),
            "stop-the-world" | "stw" => Some(CheckpointMode::StopTheWorld),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CheckpointMode::Background => "background",
            CheckpointMode::Manual => "manual",
            CheckpointMode::StopTheWorld => "stop-the-world",
        }
    }
}

/// Points of a checkpoint a test can crash at (see `Faults`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The logs are swapped; nothing else done.
    AfterCut,
    /// Half of the new images are written.
    MidImages,
    /// All new images are written and durable; the root is the old one.
    BeforeRoot,
    /// The root names the new checkpoint; the archive is not yet freed.
    AfterRoot,
    /// Superseded images are deleted; tombstones are not.
    BeforeTombstones,
}

fn crash_point(inner: &Inner, step: Step) -> Result<()> {
    if inner.options.faults.checkpoint_crash_at == Some(step) {
        return Err(Error::InjectedCrash("checkpoint"));
    }
    Ok(())
}

/// The checkpointer's own state, behind a mutex that serialises checkpoints.
pub(crate) struct State {
    /// The version of the committed checkpoint.
    pub root: u64,
    /// Each live key's current image version.
    pub versions: HashMap<Bytes, u64>,
}

/// What one checkpoint did.
#[derive(Clone, Debug, Default)]
pub struct CheckpointReport {
    /// The checkpoint's version: it covers every record up to this one.
    pub version: u64,
    pub records: u64,
    pub keys_written: u64,
    pub tombstones: u64,
    pub segments_freed: u64,
    pub image_bytes: u64,
    pub duration: Duration,
}

/// The background thread: checkpoints when enough log has accumulated or
/// one was requested, until told to stop.
pub(crate) fn run(inner: &Inner) {
    loop {
        {
            let mut stop = inner.wake.0.lock();
            if *stop {
                return;
            }
            if !due(inner) {
                inner.wake.1.wait_for(&mut stop, Duration::from_millis(100));
            }
            if *stop {
                return;
            }
        }
        if due(inner) {
            if let Err(error) = checkpoint(inner) {
                log::error!("checkpoint failed (will retry): {error}");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

fn due(inner: &Inner) -> bool {
    inner.requested.load(Ordering::Relaxed)
        || inner.log_bytes_since_cut.load(Ordering::Relaxed) >= inner.options.checkpoint_log_bytes
}

pub(crate) fn checkpoint(inner: &Inner) -> Result<CheckpointReport> {
    let mut state = inner.checkpoint.lock();
    inner.requested.store(false, Ordering::Relaxed);
    inner.checkpoint_running.store(true, Ordering::Relaxed);
    let _world =
        (inner.options.checkpoints == CheckpointMode::StopTheWorld).then(|| inner.world.write());
    let result = run_checkpoint(inner, &mut state);
    inner.checkpoint_running.store(false, Ordering::Relaxed);
    if let Ok(report) = &result {
        if report.records > 0 {
            inner.checkpoints.fetch_add(1, Ordering::Relaxed);
            *inner.last_checkpoint.lock() = Some(report.clone());
        }
    }
    result
}

fn run_checkpoint(inner: &Inner, state: &mut State) -> Result<CheckpointReport> {
    let began = Instant::now();
    // 1. Cut.
    let pending = inner.log_bytes_since_cut.load(Ordering::Relaxed);
    let cut = inner.log.cut(&*inner.sequencer);
    inner
        .log_bytes_since_cut
        .fetch_sub(pending, Ordering::Relaxed);
    let segments = cut.segments.clone();
    crash_point(inner, Step::AfterCut)?;
    match fold(inner, state, cut.through_seq, &cut.segments) {
        Ok(mut report) => {
            // 5. The archived log is covered: reuse it.
            report.segments_freed = segments.len() as u64;
            inner.log.release(segments);
            report.duration = began.elapsed();
            Ok(report)
        }
        Err(error) => {
            // The records are not covered: the next checkpoint takes them.
            inner.log.requeue(segments);
            inner
                .log_bytes_since_cut
                .fetch_add(pending, Ordering::Relaxed);
            Err(error)
        }
    }
}

/// Steps 2 to 4 (and the image clean-up after 4).
fn fold(
    inner: &Inner,
    state: &mut State,
    version: u64,
    segments: &[u32],
) -> Result<CheckpointReport> {
    let mut records = inner.log.read(segments);
    // Recovered segments may also hold records an earlier checkpoint covered.
    records.retain(|record| record.seq > state.root);
    let mut report = CheckpointReport {
        version,
        records: records.len() as u64,
        ..CheckpointReport::default()
    };
    if records.is_empty() {
        return Ok(report);
    }
    // 2. Replay onto the touched keys' previous images.
    let mut working: HashMap<Bytes, Entry> = HashMap::new();
    let mut touched: HashSet<Bytes> = HashSet::new();
    for record in records {
        let ops = decode_batch(&record.payload).map_err(|e| Error::CorruptOperation {
            seq: record.seq,
            what: e.0,
        })?;
        for op in ops {
            for key in op.keys().into_iter().flatten() {
                if touched.insert(key.into()) {
                    if let Some(entry) = load_image(inner, state, key)? {
                        working.insert(key.into(), entry);
                    }
                }
            }
            apply(&mut working, op);
        }
    }
    // 3. New images, durable before the root names them.
    let half = touched.len() / 2;
    for (n, key) in touched.iter().enumerate() {
        if n == half {
            crash_point(inner, Step::MidImages)?;
        }
        let image = match working.get(key) {
            Some(entry) => encode_image(Some(entry)),
            None if state.versions.contains_key(key) => {
                report.tombstones += 1;
                encode_image(None)
            }
            // Never imaged, gone again: nothing to hide.
            None => continue,
        };
        report.image_bytes += image.len() as u64;
        report.keys_written += 1;
        inner.images.put(&image_key(version, key), &image)?;
    }
    inner.images.sync()?;
    crash_point(inner, Step::BeforeRoot)?;
    // 4. Commit.
    write_root(&inner.images, version)?;
    inner.images.sync()?;
    state.root = version;
    inner.checkpointed_through.store(version, Ordering::Relaxed);
    crash_point(inner, Step::AfterRoot)?;
    // The commit point is passed: the checkpoint stands whatever follows.
    // Superseded images go, then tombstones (a tombstone must outlive the
    // image it hides); a crash or an error in between leaves garbage that
    // the next recovery removes.
    let mut superseded = Vec::new();
    let mut tombstones = Vec::new();
    for key in touched {
        if let Some(old) = state.versions.remove(&key) {
            superseded.push(image_key(old, &key));
            if !working.contains_key(&key) {
                tombstones.push(image_key(version, &key));
            }
        }
        if working.contains_key(&key) {
            state.versions.insert(key, version);
        }
    }
    if let Err(error) = remove_garbage(inner, &superseded, &tombstones) {
        if matches!(error, Error::InjectedCrash(_)) {
            return Err(error);
        }
        log::warn!(
            "checkpoint {version}: removing superseded images failed ({error}); recovery will"
        );
    }
    Ok(report)
}

fn remove_garbage(inner: &Inner, superseded: &[Vec<u8>], tombstones: &[Vec<u8>]) -> Result<()> {
    for key in superseded {
        inner.images.delete(key)?;
    }
    crash_point(inner, Step::BeforeTombstones)?;
    if !tombstones.is_empty() {
        inner.images.sync()?;
        for key in tombstones {
            inner.images.delete(key)?;
        }
    }
    Ok(())
}

fn load_image(inner: &Inner, state: &State, key: &[u8]) -> Result<Option<Entry>> {
    let Some(&version) = state.versions.get(key) else {
        return Ok(None);
    };
    match inner.images.get(&image_key(version, key))? {
        Some(value) => decode_image(key, &value),
        None => Err(Error::CorruptImage {
            key: String::from_utf8_lossy(key).into_owned(),
            what: format!("image of version {version} is missing"),
        }),
    }
}
