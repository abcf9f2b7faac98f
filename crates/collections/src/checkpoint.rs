//! Quiescent-free checkpoints (DIPPER 3.5), with per-key images.
//!
//! 1. **Cut** ([`OpLog::cut`]): the swap of the active and archived logs;
//!    every lane is held for an instant, nothing else waits.
//! 2. **Replay** the archived records onto a working set holding the
//!    previous images of just the keys they touch (the same [`apply`] the
//!    frontend ran, so each key passes through the states it did on the
//!    frontend). Each key's records are replayed in sequence order; records
//!    with no key in common commute, and are grouped by key for the CPU
//!    caches' sake (`replay`).
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

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hashbrown::HashMap;

use crate::apply::apply;
use crate::error::{Error, Result};
use crate::images::{
    decode_image, decode_image_header, encode_header_into, encode_image_into, image_key_into,
    object_image, piece_key_into, write_root,
};
use crate::op::{decode_batch_borrowed_into, Bytes, Op};
use crate::oplog::Located;
use crate::replay;
use crate::splice::{self, SplicedList};
use crate::state::Entry;
use crate::types::{FieldWarm, Object, PieceRun, WARM_FIELD_AHEAD};
use crate::working::{Slot, WorkingSet};
use crate::CollectionsState;

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

fn crash_point(shared: &CollectionsState, step: Step) -> Result<()> {
    if shared.options.faults.checkpoint_crash_at == Some(step) {
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
    scratch: Scratch,
}

impl State {
    pub fn new(root: u64, versions: HashMap<Bytes, u64>) -> State {
        State {
            root,
            versions,
            scratch: Scratch::default(),
        }
    }
}

/// What a checkpoint works in, kept for the next one. A checkpoint of
/// 64 MiB of log locates some 365,000 records and touches tens of
/// thousands of keys: allocated afresh each time, these tables and vectors
/// (some 30 MB) went back to the operating system in between and the next
/// checkpoint faulted them in again as zeroed pages (about 17,000 page
/// faults a checkpoint, 1,800 since). Kept, they are cleared, not freed,
/// and trimmed when far larger than the last checkpoint needed.
#[derive(Default)]
struct Scratch {
    /// The archived records, in sequence order.
    records: Vec<Located>,
    /// The order to replay them in (see `replay`).
    order: Vec<(u64, Located)>,
    working: WorkingSet,
    /// The image being written, and its key.
    image: Vec<u8>,
    image_key: Vec<u8>,
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
pub(crate) fn run(shared: &CollectionsState) {
    loop {
        {
            let mut stop = shared.wake.0.lock();
            if *stop {
                return;
            }
            if !due(shared) {
                shared
                    .wake
                    .1
                    .wait_for(&mut stop, Duration::from_millis(100));
            }
            if *stop {
                return;
            }
        }
        if due(shared) {
            if let Err(error) = checkpoint(shared) {
                log::error!("checkpoint failed (will retry): {error}");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

fn due(shared: &CollectionsState) -> bool {
    shared.requested.load(Ordering::Relaxed)
        || shared.log_bytes_since_cut.load(Ordering::Relaxed) >= shared.checkpoint_threshold()
}

pub(crate) fn checkpoint(shared: &CollectionsState) -> Result<CheckpointReport> {
    let mut state = shared.checkpoint.lock();
    shared.requested.store(false, Ordering::Relaxed);
    shared.checkpoint_running.store(true, Ordering::Relaxed);
    let _world =
        (shared.options.checkpoints == CheckpointMode::StopTheWorld).then(|| shared.world.write());
    let result = run_checkpoint(shared, &mut state);
    shared.checkpoint_running.store(false, Ordering::Relaxed);
    if let Ok(report) = &result {
        if report.records > 0 {
            shared.checkpoints.fetch_add(1, Ordering::Relaxed);
            shared
                .last_image_bytes
                .store(report.image_bytes, Ordering::Relaxed);
            *shared.last_checkpoint.lock() = Some(report.clone());
        }
    }
    result
}

fn run_checkpoint(shared: &CollectionsState, state: &mut State) -> Result<CheckpointReport> {
    let began = Instant::now();
    // 1. Cut.
    let pending = shared.log_bytes_since_cut.load(Ordering::Relaxed);
    let cut = shared.log.cut(&*shared.sequencer);
    shared
        .log_bytes_since_cut
        .fetch_sub(pending, Ordering::Relaxed);
    // The bytes still gathering on each CPU (`logged`) were logged before
    // the cut, but for the few a writer adds meanwhile (counted toward no
    // checkpoint: at most a batch each).
    let pending = pending + shared.drain_logged_shares();
    let segments = cut.segments.clone();
    crash_point(shared, Step::AfterCut)?;
    match fold(shared, state, cut.through_seq, &cut.segments) {
        Ok(mut report) => {
            // C4: freed only once a durable root covers what it holds.
            debug_assert!(
                report.records == 0 || state.root >= cut.through_seq,
                "C4: freeing the log through {} under root {}",
                cut.through_seq,
                state.root
            );
            // 5. The archived log is covered: reuse it.
            report.segments_freed = shared.log.release(segments);
            report.duration = began.elapsed();
            Ok(report)
        }
        Err(error) => {
            // The records are not covered: the next checkpoint takes them.
            shared.log.requeue(segments);
            shared
                .log_bytes_since_cut
                .fetch_add(pending, Ordering::Relaxed);
            Err(error)
        }
    }
}

/// Steps 2 to 4 (and the image clean-up after 4).
fn fold(
    shared: &CollectionsState,
    state: &mut State,
    version: u64,
    segments: &[u32],
) -> Result<CheckpointReport> {
    let State {
        root,
        versions,
        scratch,
    } = state;
    let result = fold_into(shared, root, versions, scratch, version, segments);
    // Free the working set's collections now, not at the next checkpoint;
    // keep the allocations for the next one, unless far larger than this
    // one needed (an empty checkpoint says nothing about the next).
    let (keys, records) = (scratch.working.len(), scratch.records.len());
    scratch.working.clear();
    scratch.records.clear();
    scratch.order.clear();
    if records > 0 {
        scratch.working.trim(keys);
        trim(&mut scratch.records, records);
        trim(&mut scratch.order, records);
    }
    // One large collection's image (a stream of a million entries is some
    // 20 MB) would otherwise stay allocated until the next checkpoint.
    if scratch.image.capacity() > RETAINED_IMAGE_BYTES {
        scratch.image = Vec::new();
    }
    result
}

/// Records whose tables a checkpoint keeps for the next one, at most
/// (under 2 MB: `records` and `order`). A checkpoint of a burst of small
/// writes locates millions of records; kept whole, its tables stayed in
/// DRAM until the next checkpoint as large (42 bytes a record of a million
/// XADDs, twice what Redis's stream takes). Beyond this the next large
/// checkpoint faults its tables in again, a small part of its work.
const RETAINED_RECORDS: usize = 32 * 1024;

/// The image buffer a checkpoint keeps for the next one, at most.
const RETAINED_IMAGE_BYTES: usize = 1 << 20;

/// Frees `buffer`'s allocation if it is far larger than `keep` items need,
/// and all of it beyond [`RETAINED_RECORDS`].
fn trim<T>(buffer: &mut Vec<T>, keep: usize) {
    let keep = keep.min(RETAINED_RECORDS);
    if buffer.capacity() > 4 * keep || buffer.capacity() > RETAINED_RECORDS {
        buffer.shrink_to(keep);
    }
}

/// [`fold`] on the parts of the state; leaves `scratch` for `fold` to
/// clear, whatever the result.
fn fold_into(
    shared: &CollectionsState,
    root: &mut u64,
    versions: &mut HashMap<Bytes, u64>,
    scratch: &mut Scratch,
    version: u64,
    segments: &[u32],
) -> Result<CheckpointReport> {
    let Scratch {
        records,
        order,
        working,
        image,
        image_key,
    } = scratch;
    shared.log.locate(segments, records);
    // C3: the cut archived no record numbered after it.
    debug_assert!(
        records.iter().all(|record| record.seq <= version),
        "C3: the archive of the cut through {version} holds a later record"
    );
    let mut report = CheckpointReport {
        version,
        records: replay::order(&shared.log, records, *root, order)?,
        ..CheckpointReport::default()
    };
    if report.records == 0 {
        return Ok(report);
    }
    // 2. Replay onto the touched keys' previous images, key by key (see
    // `replay`), decoding each record in place in the log. A large list
    // touched only at its ends is spliced, not decoded (`splice.rs`), for
    // as long as its operations allow; `lists` holds those.
    let mut lists: HashMap<&[u8], SplicedList<'_>> = HashMap::new();
    // The operations decoded a few ahead of the one applied, so that what
    // they will miss on starts loading meanwhile (`warm`).
    let look_ahead = WARM_FIELD_AHEAD[0].0;
    let mut ahead: VecDeque<Op<&[u8]>> = VecDeque::with_capacity(2 * look_ahead);
    let mut records = order.iter();
    loop {
        while ahead.len() <= look_ahead {
            let Some((_, record)) = records.next() else {
                break;
            };
            decode_batch_borrowed_into(shared.log.payload(record), &mut ahead).map_err(|e| {
                Error::CorruptOperation {
                    seq: record.seq,
                    what: e.0,
                }
            })?;
        }
        let Some(op) = ahead.pop_front() else {
            break;
        };
        for (distance, what) in WARM_FIELD_AHEAD {
            if let Some(later) = ahead.get(distance - 1) {
                warm(working, later, what);
            }
        }
        if let Some(key) = splice::target(&op) {
            working.touch(key, || {
                let (slot, list) = load_image(shared, versions, key, image_key, Load::MaySplice)?;
                if let Some(list) = list {
                    lists.insert(key, list);
                }
                Ok(slot)
            })?;
            if lists.get_mut(key).is_some_and(|list| list.apply(&op)) {
                continue;
            }
        }
        for key in op.keys().into_iter().flatten() {
            working.touch(key, || {
                Ok(load_image(shared, versions, key, image_key, Load::Decode)?.0)
            })?;
            if let Some(list) = lists.remove(key) {
                let entry = with_image(shared, key, list.version, image_key, |value| {
                    list.materialize(&shared.images, key, object_image(value))
                })?;
                working.materialized(key, entry);
            }
        }
        apply(working, op);
    }
    // 3. New images, durable before the root names them; the pieces the
    // old images named and the new ones do not, deleted after the commit.
    let dead = &mut Vec::new();
    let half = working.len() / 2;
    for (n, (key, slot)) in working.iter().enumerate() {
        if n == half {
            crash_point(shared, Step::MidImages)?;
        }
        if !slot.spliced {
            dead_pieces(key, &slot.pieces, &[], dead);
        }
        match (&slot.entry, slot.imaged) {
            (Some(entry), _) => encode_image_into(Some(entry), image),
            (None, _) if slot.spliced => {
                // In pieces: new ones for what was pushed, the old runs
                // kept where they lie (`pieces.rs`).
                let list = &lists[&key[..]];
                let written = with_image(shared, key, list.version, image_key, |old| {
                    list.write(
                        &shared.images,
                        key,
                        version,
                        shared.options.list_piece_bytes,
                        object_image(old),
                    )
                })?;
                dead_pieces(key, &slot.pieces, &written.directory.runs, dead);
                image.clear();
                encode_header_into(list.expire_at_ms(), image);
                written.directory.write(image);
                report.image_bytes += written.piece_bytes + image.len() as u64;
                report.keys_written += 1;
                image_key_into(version, key, image_key);
                shared.images.put(image_key, image)?;
                continue;
            }
            (None, Some(_)) => {
                report.tombstones += 1;
                encode_image_into(None, image);
            }
            // Never imaged, gone again: nothing to hide.
            (None, None) => continue,
        }
        report.image_bytes += image.len() as u64;
        report.keys_written += 1;
        image_key_into(version, key, image_key);
        shared.images.put(image_key, image)?;
    }
    order_images(shared)?;
    crash_point(shared, Step::BeforeRoot)?;
    // C4: every image the root is about to name is in the images store,
    // which was synced after the last of them.
    verify!(
        images_written(shared, working, version, image_key)?,
        "C4: the root would name checkpoint {version} before all its images are written"
    );
    debug_assert!(version > *root, "checkpoint {version} after root {root}");
    // 4. Commit.
    write_root(&shared.images, version)?;
    order_images(shared)?;
    *root = version;
    shared
        .checkpointed_through
        .store(version, Ordering::Relaxed);
    crash_point(shared, Step::AfterRoot)?;
    for (key, slot) in working.iter() {
        if slot.present() {
            match versions.get_mut(&key[..]) {
                Some(current) => *current = version,
                None => {
                    versions.insert(key.clone(), version);
                }
            }
        } else if slot.imaged.is_some() {
            versions.remove(&key[..]);
        }
    }
    // The commit point is passed: the checkpoint stands whatever follows.
    // Superseded images go, then tombstones (a tombstone must outlive the
    // image it hides); a crash or an error in between leaves garbage that
    // the next recovery removes.
    if let Err(error) = remove_garbage(shared, working, version, image_key, dead) {
        if matches!(error, Error::InjectedCrash(_)) {
            return Err(error);
        }
        log::warn!(
            "checkpoint {version}: removing superseded images failed ({error}); recovery will"
        );
    }
    Ok(report)
}

/// Syncs the images store, where writes are ordered against power loss
/// (`Collections::set_power_fail_ordering`): what the checkpoint wrote so
/// far reaches the medium before what it writes next.
fn order_images(shared: &CollectionsState) -> Result<()> {
    if shared.power_fail_ordering.load(Ordering::Relaxed) {
        shared.images.sync()?;
    }
    Ok(())
}

/// Whether the images store holds checkpoint `version`'s image (or
/// tombstone) of every key in `working` that gets one.
fn images_written(
    shared: &CollectionsState,
    working: &WorkingSet,
    version: u64,
    image_key: &mut Vec<u8>,
) -> Result<bool> {
    for (key, slot) in working.iter() {
        if !slot.present() && slot.imaged.is_none() {
            continue;
        }
        image_key_into(version, key, image_key);
        if shared.images.get_ref(image_key)?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Deletes the images `working`'s keys had before checkpoint `version`,
/// then the tombstones of the keys it removed.
fn remove_garbage(
    shared: &CollectionsState,
    working: &WorkingSet,
    version: u64,
    image_key: &mut Vec<u8>,
    dead_pieces: &[Vec<u8>],
) -> Result<()> {
    let mut tombstones = 0;
    for (key, slot) in working.iter() {
        if let Some(old) = slot.imaged {
            image_key_into(old, key, image_key);
            shared.images.delete(image_key)?;
            tombstones += usize::from(!slot.present());
        }
    }
    for piece_key in dead_pieces {
        shared.images.delete(piece_key)?;
    }
    crash_point(shared, Step::BeforeTombstones)?;
    if tombstones > 0 {
        order_images(shared)?;
        for (key, slot) in working.iter() {
            if !slot.present() && slot.imaged.is_some() {
                image_key_into(version, key, image_key);
                shared.images.delete(image_key)?;
            }
        }
    }
    Ok(())
}

/// The keys of the pieces in `old` (those `key`'s image named before this
/// checkpoint) that `runs` (its new image's) no longer name, onto `dead`.
fn dead_pieces(key: &[u8], old: &[(u64, u64)], runs: &[PieceRun], dead: &mut Vec<Vec<u8>>) {
    let mut old = old.to_vec();
    old.sort_unstable();
    old.dedup();
    for (version, seq) in old {
        if !runs.iter().any(|run| run.piece() == (version, seq)) {
            let mut piece_key = Vec::new();
            piece_key_into(version, seq, key, &mut piece_key);
            dead.push(piece_key);
        }
    }
}

/// How [`load_image`] may hold a list.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Decoded, as every other kind.
    Decode,
    /// Spliced when its image is large enough (`splice_list_bytes`).
    MaySplice,
}

/// Starts loading what applying `op` will read of a collection already
/// in the working set (HSET's fields, for now: the writes a hot hash
/// takes), without changing anything.
fn warm(working: &WorkingSet, op: &Op<&[u8]>, what: FieldWarm) {
    let Op::HashSet { key, pairs } = op else {
        return;
    };
    let Some(Entry {
        object: Object::Hash(hash),
        ..
    }) = working.peek(key)
    else {
        return;
    };
    for (field, _) in pairs.iter().take(4) {
        hash.prefetch_field(field, what);
    }
}

/// A key's entry as of the committed checkpoint: its image decoded straight
/// from the images store (no copy of the value), or, with
/// [`Load::MaySplice`], a large list spliced (the slot marked, the list
/// returned beside it); `image_key` a buffer.
fn load_image<'log>(
    shared: &CollectionsState,
    versions: &HashMap<Bytes, u64>,
    key: &[u8],
    image_key: &mut Vec<u8>,
    load: Load,
) -> Result<(Slot, Option<SplicedList<'log>>)> {
    let Some(&version) = versions.get(key) else {
        return Ok((Slot::new(None, None), None));
    };
    with_image(shared, key, version, image_key, |value| {
        if load == Load::MaySplice {
            if let Some(expire_at_ms) = decode_image_header(key, value)? {
                let list = SplicedList::read(version, expire_at_ms, object_image(value))
                    .map_err(|e| Error::corrupt_image(key, e))?;
                if let Some(list) = list.filter(|list| {
                    worth_splicing(list, value.len(), shared.options.splice_list_bytes)
                }) {
                    let slot = Slot {
                        entry: None,
                        imaged: Some(version),
                        spliced: true,
                        pieces: list.old_pieces().collect(),
                    };
                    return Ok((slot, Some(list)));
                }
            }
        }
        let mut pieces = Vec::new();
        let entry = decode_image(&shared.images, key, value, &mut pieces)?;
        let mut slot = Slot::new(entry, Some(version));
        slot.pieces = pieces;
        Ok((slot, None))
    })
}

/// Whether `list` (its image `image_bytes` long) is spliced rather than
/// decoded: a whole image from `splice_list_bytes` on; a list in pieces
/// unless it has shrunk below half of that (then it is decoded, and written
/// whole again: a few elements need not keep pieces alive).
fn worth_splicing(list: &SplicedList<'_>, image_bytes: usize, splice_list_bytes: usize) -> bool {
    match list.pieces_bytes() {
        None => image_bytes >= splice_list_bytes,
        Some(bytes) => bytes >= (splice_list_bytes / 2) as u64,
    }
}

/// Runs `read` on `key`'s image of `version`, in place in the images
/// store; a missing image is corruption (the versions table names it).
fn with_image<T>(
    shared: &CollectionsState,
    key: &[u8],
    version: u64,
    image_key: &mut Vec<u8>,
    read: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    image_key_into(version, key, image_key);
    match shared.images.get_ref(image_key)? {
        Some(value) => read(&value),
        None => Err(Error::corrupt_image(
            key,
            format!("image of version {version} is missing"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{trim, RETAINED_RECORDS};
    use crate::{Collections, CollectionsOptions, Op};

    /// Options for these tests: images on emulated memory.
    fn options() -> CollectionsOptions {
        CollectionsOptions {
            images: engram_engine::Options {
                mode: engram_engine::ModeChoice::Emulated,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A checkpoint syncs its images where writes are ordered against
    /// power loss, and not where the owner said they need not be.
    #[test]
    fn checkpoints_sync_their_images_only_when_ordered_against_power_loss() {
        let dir = tempfile::tempdir().unwrap();
        let collections = Collections::open(dir.path(), options()).unwrap();
        let push = |n: u64| Op::ListPush {
            key: b"queue".as_slice().into(),
            front: false,
            values: vec![n.to_string().into_bytes().into()],
        };
        let images_syncs = || collections.shared.images.stats().syncs;
        for (n, ordered) in [(1, true), (2, false), (3, true)] {
            collections.set_power_fail_ordering(ordered);
            collections.write(vec![push(n)]).unwrap();
            let before = images_syncs();
            let report = collections.checkpoint_now().unwrap();
            assert_eq!(report.records, 1);
            let synced = images_syncs() > before;
            assert_eq!(synced, ordered, "checkpoint {n}, ordered: {ordered}");
        }
        collections.close().unwrap();
        // What the unordered checkpoint wrote is there after a reopen.
        let reopened = Collections::open(dir.path(), options()).unwrap();
        let length = reopened.read(b"queue", |entry| match entry.map(|e| &e.object) {
            Some(crate::types::Object::List(list)) => list.len(),
            _ => 0,
        });
        assert_eq!(length, 3);
    }

    /// The replay runs a few operations ahead of the one it applies (to
    /// warm a hot hash's fields): every operation is still applied once,
    /// in order, to the end of the log, across records of one and of
    /// several operations, a delete of the hash among them.
    #[test]
    fn a_checkpoint_replaying_ahead_writes_what_the_log_says() {
        use crate::types::Object;
        let dir = tempfile::tempdir().unwrap();
        let hset = |key: &str, field: u32, value: u32| Op::HashSet {
            key: key.as_bytes().into(),
            pairs: vec![(
                format!("f{field}").into_bytes().into(),
                format!("v{value}").into_bytes().into(),
            )],
        };
        let fields_of = |collections: &Collections, key: &str| {
            collections.read(key.as_bytes(), |entry| match entry.map(|e| &e.object) {
                Some(Object::Hash(hash)) => {
                    let mut all: Vec<(Vec<u8>, Vec<u8>)> =
                        hash.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
                    all.sort();
                    all
                }
                _ => Vec::new(),
            })
        };
        let collections = Collections::open(dir.path(), options()).unwrap();
        for round in 0..3u32 {
            for i in 0..500u32 {
                collections
                    .write(vec![hset("hot", i % 97, i + round)])
                    .unwrap();
                if i % 50 == 0 {
                    // A record of several operations on two keys.
                    collections
                        .write(vec![hset("hot", 1000 + i, i), hset("other", i, i)])
                        .unwrap();
                }
            }
            collections.checkpoint_now().unwrap();
        }
        // The hash deleted and written again, the last operation last.
        collections
            .write(vec![Op::Delete {
                key: b"hot".as_slice().into(),
            }])
            .unwrap();
        for i in 0..20u32 {
            collections.write(vec![hset("hot", i % 7, i)]).unwrap();
        }
        collections.checkpoint_now().unwrap();
        let (hot, other) = (
            fields_of(&collections, "hot"),
            fields_of(&collections, "other"),
        );
        assert_eq!(hot.len(), 7);
        assert!(hot.contains(&(b"f6".to_vec(), b"v13".to_vec())), "{hot:?}");
        assert_eq!(other.len(), 10);
        collections.close().unwrap();
        let reopened = Collections::open(dir.path(), options()).unwrap();
        assert_eq!(reopened.recovery_report().records_replayed, 0);
        assert_eq!(fields_of(&reopened, "hot"), hot);
        assert_eq!(fields_of(&reopened, "other"), other);
    }

    #[test]
    fn scratch_is_kept_for_alike_checkpoints_but_never_beyond_the_bound() {
        // A checkpoint as large as the last keeps its table.
        let mut alike: Vec<u64> = Vec::with_capacity(1000);
        trim(&mut alike, 900);
        assert!(alike.capacity() >= 1000);
        // One far smaller than the table frees most of it.
        let mut smaller: Vec<u64> = Vec::with_capacity(10_000);
        trim(&mut smaller, 100);
        assert!(smaller.capacity() < 10_000);
        // A burst's table (a million records) is cut to the bound, even
        // when this checkpoint needed all of it.
        let mut burst: Vec<u64> = Vec::with_capacity(1_000_000);
        trim(&mut burst, 1_000_000);
        assert!(burst.capacity() <= RETAINED_RECORDS, "{}", burst.capacity());
        assert!(burst.capacity() >= RETAINED_RECORDS / 2);
    }
}
