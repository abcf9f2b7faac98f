//! Model-based tests of durability: random batches of operations on every
//! type go through `Collections` and, independently, through a model built
//! from std collections. At random moments the store checkpoints, crashes
//! (abandoned like a killed process: everything stored survives, nothing
//! else runs), crashes at a chosen step of a checkpoint, or crashes in the
//! middle of its own recovery; after every recovery the state must equal
//! the model exactly.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use engram_collections::checkpoint::Step;
use engram_collections::types::Object;
use engram_collections::{
    CheckpointMode, Collections, CollectionsOptions, Error, Faults, Op, OpLogOptions,
};
use engram_engine::{IntegrityOptions, ModeChoice};
mod common;

use common::{b, random_op};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Debug, PartialEq)]
enum MObj {
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Set(BTreeSet<Vec<u8>>),
    ZSet(BTreeMap<Vec<u8>, u64>), // score bits (scores here are never -0.0 or NaN)
    List(VecDeque<Vec<u8>>),
}

impl MObj {
    fn is_empty(&self) -> bool {
        match self {
            MObj::Hash(h) => h.is_empty(),
            MObj::Set(s) => s.is_empty(),
            MObj::ZSet(z) => z.is_empty(),
            MObj::List(l) => l.is_empty(),
        }
    }
    fn same_kind(&self, other: &MObj) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

type Model = BTreeMap<Vec<u8>, (MObj, u64)>;

thread_local! {
    /// `splice_list_bytes` and `list_piece_bytes` for the stores this
    /// thread opens: `run_seed` sets (0, 256) for half the seeds, so that
    /// their lists, small as they are, are checkpointed by splicing, in
    /// pieces of a few elements (runs kept, shortened, copied and dropped),
    /// whenever their operations allow.
    static LIST_OPTIONS: std::cell::Cell<(usize, usize)> = std::cell::Cell::new((
        CollectionsOptions::default().splice_list_bytes,
        CollectionsOptions::default().list_piece_bytes,
    ));
}

fn options(faults: Faults) -> CollectionsOptions {
    CollectionsOptions {
        splice_list_bytes: LIST_OPTIONS.with(|options| options.get().0),
        list_piece_bytes: LIST_OPTIONS.with(|options| options.get().1),
        oplog: OpLogOptions {
            segment_bytes: 64 << 10,
            lanes: 2,
            reserve_segments: 2,
            region: engram_pmem::RegionOptions {
                mode: ModeChoice::Emulated,
                populate: false,
                reserve_bytes: 256 << 20,
                ..Default::default()
            },
        },
        images: engram_engine::Options {
            mode: ModeChoice::Emulated,
            block_size_bytes: 64 << 10,
            grow_bytes: 256 << 10,
            reserve_bytes: 256 << 20,
            populate: false,
            recovery_threads: 1,
            integrity: IntegrityOptions::off(),
            ..Default::default()
        },
        checkpoints: CheckpointMode::Manual,
        recovery_threads: 2,
        faults,
        ..Default::default()
    }
}

fn to_model(object: &Object) -> MObj {
    match object {
        Object::Hash(h) => MObj::Hash(h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect()),
        Object::Set(s) => MObj::Set(s.iter().map(|m| m.to_vec()).collect()),
        Object::SortedSet(z) => {
            MObj::ZSet(z.iter().map(|(m, s)| (m.to_vec(), s.to_bits())).collect())
        }
        Object::List(l) => MObj::List(l.iter().map(|v| v.to_vec()).collect()),
        Object::Stream(_) => unreachable!("this model writes no streams (stream_recovery.rs)"),
    }
}

fn dump(collections: &Collections) -> Model {
    let mut model = Model::new();
    for shard in 0..engram_collections::state::SHARDS {
        collections.for_each_in_shard(shard, |key, entry| {
            model.insert(key.to_vec(), (to_model(&entry.object), entry.expire_at_ms));
        });
    }
    assert_eq!(collections.len(), model.len() as u64);
    model
}

/// The model's semantics, written independently of `apply`.
fn model_apply(model: &mut Model, op: &Op) {
    fn update(model: &mut Model, key: &[u8], create: Option<MObj>, f: impl FnOnce(&mut MObj)) {
        match model.get_mut(key) {
            Some((object, _)) => {
                if create.as_ref().is_some_and(|c| !c.same_kind(object)) {
                    return;
                }
                f(object);
                if object.is_empty() {
                    model.remove(key);
                }
            }
            None => {
                if let Some(mut object) = create {
                    f(&mut object);
                    if !object.is_empty() {
                        model.insert(key.to_vec(), (object, 0));
                    }
                }
            }
        }
    }
    match op {
        Op::Delete { key } => {
            model.remove(&key[..]);
        }
        Op::Expire { key, at_ms } => {
            if let Some(entry) = model.get_mut(&key[..]) {
                entry.1 = *at_ms;
            }
        }
        Op::Rename { from, to } => {
            if from != to {
                if let Some(entry) = model.remove(&from[..]) {
                    model.insert(to.to_vec(), entry);
                }
            }
        }
        Op::Copy { from, to } => {
            if from != to {
                if let Some(entry) = model.get(&from[..]).cloned() {
                    model.insert(to.to_vec(), entry);
                }
            }
        }
        Op::Replace { .. } => unreachable!("not generated"),
        Op::HashSet { key, pairs } => update(model, key, Some(MObj::Hash(BTreeMap::new())), |o| {
            if let MObj::Hash(h) = o {
                for (f, v) in pairs {
                    h.insert(f.to_vec(), v.to_vec());
                }
            }
        }),
        Op::HashDelete { key, fields } => {
            update(model, key, Some(MObj::Hash(BTreeMap::new())), |o| {
                if let MObj::Hash(h) = o {
                    for f in fields {
                        h.remove(&f[..]);
                    }
                }
            })
        }
        Op::SetAdd { key, members } => update(model, key, Some(MObj::Set(BTreeSet::new())), |o| {
            if let MObj::Set(s) = o {
                s.extend(members.iter().map(|m| m.to_vec()));
            }
        }),
        Op::SetRemove { key, members } => {
            update(model, key, Some(MObj::Set(BTreeSet::new())), |o| {
                if let MObj::Set(s) = o {
                    for m in members {
                        s.remove(&m[..]);
                    }
                }
            })
        }
        Op::SortedSetAdd { key, pairs } => {
            update(model, key, Some(MObj::ZSet(BTreeMap::new())), |o| {
                if let MObj::ZSet(z) = o {
                    for (score, m) in pairs {
                        z.insert(m.to_vec(), (score + 0.0).to_bits());
                    }
                }
            })
        }
        Op::SortedSetRemove { key, members } => {
            update(model, key, Some(MObj::ZSet(BTreeMap::new())), |o| {
                if let MObj::ZSet(z) = o {
                    for m in members {
                        z.remove(&m[..]);
                    }
                }
            })
        }
        Op::ListPush { key, front, values } => {
            update(model, key, Some(MObj::List(VecDeque::new())), |o| {
                if let MObj::List(l) = o {
                    for v in values {
                        if *front {
                            l.push_front(v.to_vec())
                        } else {
                            l.push_back(v.to_vec())
                        }
                    }
                }
            })
        }
        Op::ListPop { key, front, count } => update(model, key, None, |o| {
            if let MObj::List(l) = o {
                for _ in 0..*count {
                    if *front {
                        l.pop_front();
                    } else {
                        l.pop_back();
                    }
                }
            }
        }),
        Op::ListSet { key, index, value } => update(model, key, None, |o| {
            if let MObj::List(l) = o {
                if (*index as usize) < l.len() {
                    l[*index as usize] = value.to_vec();
                }
            }
        }),
        Op::ListInsert {
            key,
            before,
            pivot,
            value,
        } => update(model, key, None, |o| {
            if let MObj::List(l) = o {
                if let Some(at) = l.iter().position(|x| x[..] == pivot[..]) {
                    l.insert(if *before { at } else { at + 1 }, value.to_vec());
                }
            }
        }),
        Op::ListRemove { key, count, value } => update(model, key, None, |o| {
            if let MObj::List(l) = o {
                let v: Vec<Vec<u8>> = l.iter().cloned().collect();
                let positions: Vec<usize> = if *count >= 0 {
                    v.iter()
                        .enumerate()
                        .filter(|(_, x)| x[..] == value[..])
                        .map(|(i, _)| i)
                        .collect()
                } else {
                    v.iter()
                        .enumerate()
                        .rev()
                        .filter(|(_, x)| x[..] == value[..])
                        .map(|(i, _)| i)
                        .collect()
                };
                let limit = if *count == 0 {
                    usize::MAX
                } else {
                    count.unsigned_abs() as usize
                };
                let doomed: BTreeSet<usize> = positions.into_iter().take(limit).collect();
                *l = v
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| !doomed.contains(i))
                    .map(|(_, x)| x)
                    .collect();
            }
        }),
        Op::ListTrim { key, start, stop } => update(model, key, None, |o| {
            if let MObj::List(l) = o {
                let len = l.len() as i64;
                let start = if *start < 0 {
                    (len + start).max(0)
                } else {
                    *start
                };
                let stop = if *stop < 0 {
                    len + stop
                } else {
                    (*stop).min(len - 1)
                };
                if start > stop || start >= len {
                    l.clear();
                } else {
                    *l = l
                        .iter()
                        .skip(start as usize)
                        .take((stop - start + 1) as usize)
                        .cloned()
                        .collect();
                }
            }
        }),
        Op::ListMove {
            from,
            to,
            from_front,
            to_front,
        } => {
            let destination_ok = match model.get(&to[..]) {
                None => true,
                Some((o, _)) => matches!(o, MObj::List(_)),
            };
            if !destination_ok {
                return;
            }
            if from == to {
                // Rotates in place: the key (and its expiry) stays.
                if let Some((MObj::List(l), _)) = model.get_mut(&from[..]) {
                    if let Some(value) = if *from_front {
                        l.pop_front()
                    } else {
                        l.pop_back()
                    } {
                        if *to_front {
                            l.push_front(value)
                        } else {
                            l.push_back(value)
                        }
                    }
                }
                return;
            }
            let mut moved = None;
            update(model, from, None, |o| {
                if let MObj::List(l) = o {
                    moved = if *from_front {
                        l.pop_front()
                    } else {
                        l.pop_back()
                    };
                }
            });
            if let Some(value) = moved {
                update(model, to, Some(MObj::List(VecDeque::new())), |o| {
                    if let MObj::List(l) = o {
                        if *to_front {
                            l.push_front(value)
                        } else {
                            l.push_back(value)
                        }
                    }
                });
            }
        }
        other => unreachable!("this model writes no streams (stream_recovery.rs): {other:?}"),
    }
}

fn open(dir: &Path, faults: Faults) -> Collections {
    Collections::open(dir, options(faults)).unwrap()
}

const STEPS: [Step; 5] = [
    Step::AfterCut,
    Step::MidImages,
    Step::BeforeRoot,
    Step::AfterRoot,
    Step::BeforeTombstones,
];

fn run_seed(seed: u64, random_op: fn(&mut StdRng) -> Op) {
    let default = CollectionsOptions::default();
    LIST_OPTIONS.with(|options| {
        options.set(if seed % 2 == 1 {
            (0, 256)
        } else {
            (default.splice_list_bytes, default.list_piece_bytes)
        })
    });
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    let mut store = open(dir.path(), Faults::default());
    for step in 0..400 {
        let ops: Vec<Op> = (0..rng.random_range(1..4))
            .map(|_| random_op(&mut rng))
            .collect();
        for op in &ops {
            model_apply(&mut model, op);
        }
        store.write(ops).unwrap();
        match rng.random_range(0..100) {
            0..=7 => {
                store.checkpoint_now().unwrap();
            }
            8..=10 => {
                store.crash();
                store = open(dir.path(), Faults::default());
                assert_eq!(
                    dump(&store),
                    model,
                    "seed {seed} step {step}: after a crash"
                );
            }
            11..=14 => {
                // A crash at a chosen step of a checkpoint.
                let at = STEPS[rng.random_range(0..STEPS.len())];
                store.crash();
                store = open(
                    dir.path(),
                    Faults {
                        checkpoint_crash_at: Some(at),
                        ..Faults::default()
                    },
                );
                let extra = random_op(&mut rng);
                model_apply(&mut model, &extra);
                store.write(vec![extra]).unwrap();
                // There is always a record to fold, so every step is reached.
                match store.checkpoint_now() {
                    Err(Error::InjectedCrash(_)) => {}
                    Ok(report) => {
                        panic!("seed {seed} step {step}: checkpoint ran past {at:?}: {report:?}")
                    }
                    Err(other) => panic!("seed {seed}: {other}"),
                }
                store.crash();
                store = open(dir.path(), Faults::default());
                assert_eq!(
                    dump(&store),
                    model,
                    "seed {seed} step {step}: after a crash at {at:?}"
                );
            }
            15 => {
                // A crash in the middle of recovery, then recovery again.
                store.crash();
                let after = rng.random_range(0..3);
                match Collections::open(
                    dir.path(),
                    options(Faults {
                        recovery_crash_after_deletes: Some(after),
                        ..Faults::default()
                    }),
                ) {
                    Ok(recovered) => recovered.crash(),
                    Err(Error::InjectedCrash(_)) => {}
                    Err(other) => panic!("seed {seed}: {other}"),
                }
                store = open(dir.path(), Faults::default());
                assert_eq!(
                    dump(&store),
                    model,
                    "seed {seed} step {step}: after a crash during recovery"
                );
            }
            _ => {}
        }
    }
    assert_eq!(dump(&store), model, "seed {seed}: end");
    store.close().unwrap();
    let store = open(dir.path(), Faults::default());
    assert_eq!(dump(&store), model, "seed {seed}: after a clean close");
}

#[test]
fn state_survives_crashes_anywhere_in_writes_checkpoints_and_recovery() {
    for seed in 0..12 {
        run_seed(seed, random_op);
    }
}

/// Mostly pushes, pops and trims of the lists, so that they are spliced
/// checkpoint after checkpoint (odd seeds: in pieces of a few elements,
/// runs kept, shortened, copied and dropped); now and then any operation,
/// which materializes a list, deletes or renames it.
fn random_queue_op(rng: &mut StdRng) -> Op {
    if rng.random_ratio(1, 12) {
        return random_op(rng);
    }
    let key = b(if rng.random() { b"l1" } else { b"l2" });
    match rng.random_range(0..10) {
        0..=5 => Op::ListPush {
            key,
            front: rng.random(),
            values: (0..rng.random_range(1..6))
                .map(|_| b(format!("e{}", rng.random_range(0..1000)).as_bytes()))
                .collect(),
        },
        6..=8 => Op::ListPop {
            key,
            front: rng.random(),
            count: rng.random_range(1..5),
        },
        _ => Op::ListTrim {
            key,
            start: rng.random_range(0..3),
            stop: rng.random_range(-3..40),
        },
    }
}

#[test]
fn lists_in_pieces_survive_crashes_anywhere() {
    for seed in 100..112 {
        run_seed(seed, random_queue_op);
    }
}

#[test]
fn a_checkpoint_bounds_what_recovery_replays() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Faults::default());
    for i in 0..500u32 {
        store
            .write(vec![Op::SetAdd {
                key: b(format!("s{}", i % 50).as_bytes()),
                members: vec![b(&i.to_le_bytes())],
            }])
            .unwrap();
    }
    let report = store.checkpoint_now().unwrap();
    assert_eq!(report.records, 500);
    assert_eq!(report.keys_written, 50);
    for i in 0..7u32 {
        store
            .write(vec![Op::Delete {
                key: b(format!("s{i}").as_bytes()),
            }])
            .unwrap();
    }
    store.crash();
    let store = open(dir.path(), Faults::default());
    let recovery = store.recovery_report().clone();
    assert_eq!(recovery.images_loaded, 50);
    assert_eq!(
        recovery.records_replayed, 7,
        "only the tail after the checkpoint is replayed"
    );
    assert_eq!(store.len(), 43);
    // The deletions become tombstones, then nothing.
    let report = store.checkpoint_now().unwrap();
    assert_eq!(report.tombstones, 7);
    store.close().unwrap();
    let store = open(dir.path(), Faults::default());
    assert_eq!(store.recovery_report().images_loaded, 43);
    assert_eq!(store.recovery_report().records_replayed, 0);
    assert_eq!(
        store.recovery_report().garbage_images_removed,
        0,
        "tombstones were removed by the checkpoint"
    );
}

#[test]
fn stats_never_wait_for_a_running_checkpoint() {
    // Regression: stats() once held one lock while waiting for the
    // checkpoint's, which a finishing checkpoint held while taking the first.
    let dir = tempfile::tempdir().unwrap();
    let store = Collections::open(
        dir.path(),
        CollectionsOptions {
            checkpoints: CheckpointMode::Background,
            checkpoint_log_bytes: 16 << 10,
            ..options(Faults::default())
        },
    )
    .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 0..20_000u32 {
                let key = b(format!("h{}", i % 300).as_bytes());
                store
                    .write(vec![Op::HashSet {
                        key,
                        pairs: vec![(b(&i.to_le_bytes()), b(b"v"))],
                    }])
                    .unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut slowest = std::time::Duration::ZERO;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let began = std::time::Instant::now();
            let _ = store.stats();
            slowest = slowest.max(began.elapsed());
        }
        assert!(
            slowest < std::time::Duration::from_secs(2),
            "stats() took {slowest:?}"
        );
    });
    assert!(
        store.stats().checkpoints > 0,
        "no background checkpoint ran"
    );
    assert!(store.stats().checkpointed_through > 0);
}

#[test]
fn backpressure_slows_writers_only_when_a_checkpointer_could_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    // Manual: nothing folds the log in the background, so no waits at all.
    let store = Collections::open(
        dir.path(),
        CollectionsOptions {
            checkpoint_log_bytes: 4 << 10,
            ..options(Faults::default())
        },
    )
    .unwrap();
    for i in 0..3000u32 {
        store
            .write(vec![Op::SetAdd {
                key: b(b"s"),
                members: vec![b(&i.to_le_bytes())],
            }])
            .unwrap();
    }
    assert_eq!(store.stats().backpressure_waits, 0);
    assert!(store.stats().log_bytes_since_checkpoint > 16 << 10);
    store.close().unwrap();
    // Stop-the-world: the log outruns the threshold between checkpoints, so
    // writers past the limit are slowed (and counted) but all complete.
    let dir = tempfile::tempdir().unwrap();
    let store = Collections::open(
        dir.path(),
        CollectionsOptions {
            checkpoint_log_bytes: 4 << 10,
            checkpoints: CheckpointMode::StopTheWorld,
            backpressure_factor: 1,
            ..options(Faults::default())
        },
    )
    .unwrap();
    for i in 0..3000u32 {
        store
            .write(vec![Op::SetAdd {
                key: b(b"s"),
                members: vec![b(&i.to_le_bytes())],
            }])
            .unwrap();
    }
    store.read(b"s", |entry| assert_eq!(entry.unwrap().object.len(), 3000));
}

/// Pushes one 100-byte value onto the list `big`.
fn push_to_big_list(store: &Collections, byte: u8) {
    store
        .write(vec![Op::ListPush {
            key: b(b"big"),
            front: true,
            values: vec![b(&[byte; 100])],
        }])
        .unwrap();
}

/// Makes `big` a list of 400 values (~40 KiB: its image is that large).
fn fill_big_list(store: &Collections) {
    for i in 0..400u32 {
        push_to_big_list(store, i as u8);
    }
}

#[test]
fn checkpoints_of_a_large_key_wait_for_as_much_log_as_its_image() {
    // A checkpoint rewrites a touched key's whole image: on a large hot key
    // the next one waits for as much log as the last wrote in images (at
    // most MAX_CHECKPOINT_PACING times the configured interval).
    let dir = tempfile::tempdir().unwrap();
    let base = 16u64 << 10;
    let store = Collections::open(
        dir.path(),
        CollectionsOptions {
            checkpoints: CheckpointMode::Background,
            checkpoint_log_bytes: base,
            ..options(Faults::default())
        },
    )
    .unwrap();
    assert_eq!(store.stats().checkpoint_threshold, base);
    // A list of ~40 KiB, then its checkpoint: an image of more than base.
    fill_big_list(&store);
    store.request_checkpoint();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while store.stats().log_bytes_since_checkpoint > 0 || store.stats().checkpoint_running {
        assert!(std::time::Instant::now() < deadline, "no checkpoint");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let image = store.stats().last_checkpoint.unwrap().image_bytes;
    assert!(image > 2 * base, "image {image}");
    assert_eq!(store.stats().checkpoint_threshold, image);
    // Log up to the paced threshold (more than base) starts no checkpoint.
    let checkpoints = store.stats().checkpoints;
    while store.stats().log_bytes_since_checkpoint < image - base / 2 {
        push_to_big_list(&store, 7);
    }
    assert!(store.stats().log_bytes_since_checkpoint > base);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        store.stats().checkpoints,
        checkpoints,
        "checkpointed before the paced threshold"
    );
    // Past it, one starts.
    while store.stats().checkpoints == checkpoints {
        assert!(std::time::Instant::now() < deadline, "no paced checkpoint");
        push_to_big_list(&store, 8);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    store.close().unwrap();

    // The pacing is bounded: an image far larger than MAX_CHECKPOINT_PACING
    // intervals waits for that many intervals' log only.
    let dir = tempfile::tempdir().unwrap();
    let store = Collections::open(
        dir.path(),
        CollectionsOptions {
            checkpoints: CheckpointMode::Manual,
            checkpoint_log_bytes: 1 << 10,
            ..options(Faults::default())
        },
    )
    .unwrap();
    fill_big_list(&store);
    let report = store.checkpoint_now().unwrap();
    assert!(report.image_bytes > engram_collections::MAX_CHECKPOINT_PACING << 10);
    assert_eq!(
        store.stats().checkpoint_threshold,
        engram_collections::MAX_CHECKPOINT_PACING << 10
    );
    store.close().unwrap();
}

/// How many list pieces the images store of the (closed) collections in
/// `dir` holds.
fn pieces_in(dir: &Path) -> usize {
    let images = engram_engine::Store::open(
        dir.join(engram_collections::IMAGES_DIR),
        options(Faults::default()).images,
    )
    .unwrap();
    let mut pieces = 0;
    let mut cursor = 0;
    loop {
        let (next, keys) = images.scan(cursor, 1024);
        pieces += keys
            .iter()
            .filter(|key| engram_collections::images::parse_piece_key(key).is_some())
            .count();
        if next == 0 {
            break;
        }
        cursor = next;
    }
    images.close().unwrap();
    pieces
}

/// The list `key` as the store holds it, head first.
fn list_of(store: &Collections, key: &[u8]) -> Vec<Vec<u8>> {
    store.read(key, |entry| match entry.map(|entry| &entry.object) {
        Some(Object::List(list)) => list.iter().map(<[u8]>::to_vec).collect(),
        None => Vec::new(),
        Some(other) => panic!("{key:?} holds a {:?}", other.kind()),
    })
}

/// Pushes `value` at the head of list `q`, in the store and in `expected`.
fn push_head(store: &Collections, expected: &mut VecDeque<Vec<u8>>, value: Vec<u8>) {
    expected.push_front(value.clone());
    store
        .write(vec![Op::ListPush {
            key: b(b"q"),
            front: true,
            values: vec![value.into()],
        }])
        .unwrap();
}

#[test]
fn a_queue_checkpointed_by_splicing_recovers_whole() {
    // A list far larger than an images block (its image goes to an extent
    // of its own), checkpointed, then used as a queue: pushes at the head,
    // pops and a trim at the tail. The next checkpoints splice it
    // (`splice.rs`, the default threshold) into pieces of 32 KiB
    // (`pieces.rs`): the runs at the tail are shortened and dropped, new
    // pieces go to the head. Recovery from them must give the queue back
    // element for element, and find no piece left over: each checkpoint
    // deleted exactly the pieces its image stopped naming.
    let default = CollectionsOptions::default();
    LIST_OPTIONS.with(|options| options.set((default.splice_list_bytes, 32 << 10)));
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), Faults::default());
    let mut expected: VecDeque<Vec<u8>> = VecDeque::new();
    let element = |i: u32| format!("{i:06}-{}", "x".repeat(93)).into_bytes();
    for i in 0..3000u32 {
        push_head(&store, &mut expected, element(i));
    }
    store.checkpoint_now().unwrap();
    let mut next = 3000u32;
    for round in 0..4 {
        for _ in 0..500 {
            push_head(&store, &mut expected, element(next));
            next += 1;
        }
        store
            .write(vec![Op::ListPop {
                key: b(b"q"),
                front: false,
                count: 300,
            }])
            .unwrap();
        expected.truncate(expected.len() - 300);
        if round == 2 {
            store
                .write(vec![Op::ListTrim {
                    key: b(b"q"),
                    start: 0,
                    stop: 1999,
                }])
                .unwrap();
            expected.truncate(2000);
        }
        let report = store.checkpoint_now().unwrap();
        // The first splice writes the list in pieces; later ones write the
        // 500 elements pushed (50 KB) and at most a short run copied, not
        // the list (some 300 KB).
        if round == 0 {
            assert!(report.image_bytes > 250_000, "{report:?}");
        } else {
            assert!(
                (50_000..160_000).contains(&report.image_bytes),
                "{report:?}"
            );
        }
        store.crash();
        store = open(dir.path(), Faults::default());
        assert_eq!(
            store.recovery_report().garbage_images_removed,
            0,
            "round {round}"
        );
        assert_eq!(
            list_of(&store, b"q"),
            Vec::from(expected.clone()),
            "round {round}"
        );
    }
    // A checkpoint that dies before its root: its new pieces and image are
    // garbage the next recovery removes (the pieces no winning image
    // names), and the one after finds none.
    for i in 0..500 {
        push_head(&store, &mut expected, element(next + i));
    }
    store.crash();
    store = open(
        dir.path(),
        Faults {
            checkpoint_crash_at: Some(Step::BeforeRoot),
            ..Faults::default()
        },
    );
    assert!(matches!(
        store.checkpoint_now(),
        Err(Error::InjectedCrash(_))
    ));
    store.crash();
    store = open(dir.path(), Faults::default());
    // The image and at least the piece of the 500 elements pushed.
    assert!(store.recovery_report().garbage_images_removed >= 2);
    assert_eq!(list_of(&store, b"q"), Vec::from(expected.clone()));
    store.crash();
    store = open(dir.path(), Faults::default());
    assert_eq!(store.recovery_report().garbage_images_removed, 0);
    // Drained to a few elements, the list stays in pieces for the
    // checkpoint that drains it; the next checkpoint finds it below half
    // the splice threshold, decodes it and writes it whole again, and its
    // last pieces go.
    let keep = 3;
    let popped = expected.len() as u64 - keep;
    store
        .write(vec![Op::ListPop {
            key: b(b"q"),
            front: false,
            count: popped,
        }])
        .unwrap();
    expected.truncate(keep as usize);
    store.checkpoint_now().unwrap();
    store.crash();
    assert!(
        pieces_in(dir.path()) > 0,
        "the drained list is still in pieces"
    );
    store = open(dir.path(), Faults::default());
    push_head(&store, &mut expected, element(0));
    store.checkpoint_now().unwrap();
    store.crash();
    assert_eq!(pieces_in(dir.path()), 0, "written whole, its pieces gone");
    store = open(dir.path(), Faults::default());
    assert_eq!(store.recovery_report().garbage_images_removed, 0);
    assert_eq!(list_of(&store, b"q"), Vec::from(expected));
}
