//! Model-based test: random operation sequences run against the store and
//! against a `BTreeMap`, with compactions, clean reopens and crashes in
//! between. Every answer the store gives is compared with the model's, and
//! after every reopen or crash the whole store is compared with the model.
//!
//! `ENGRAM_MODEL_CASES=N` runs N cases instead of the default 100.
//! Failures that proptest finds and shrinks are kept below as named tests.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::{largest_log_value, pattern, scan_all, small_options, watchdog};
use engram_engine::{Error, Options, Store, MAX_KEY_BYTES};
use proptest::prelude::*;

/// The keys a case draws from: few, so operations collide, and of very
/// different sizes (empty; a key of the largest allowed size, whose records
/// always need an extent).
fn key_space() -> Vec<Vec<u8>> {
    vec![
        Vec::new(),
        b"a".to_vec(),
        b"b".to_vec(),
        b"counter".to_vec(),
        b"a-key-of-some-length-0123456789".to_vec(),
        vec![0xFF; 200],
        pattern(7, 5000),
        vec![b'k'; MAX_KEY_BYTES],
    ]
}

#[derive(Clone, Copy, Debug)]
enum Len {
    Exact(usize),
    /// The largest value that fits a log block for this key, plus this
    /// (at least 0): both sides of the log-block / extent boundary.
    Boundary(i64),
}

impl Len {
    fn resolve(self, key_len: usize) -> usize {
        match self {
            Len::Exact(n) => n,
            Len::Boundary(d) => {
                let largest = largest_log_value(0) as i64 - key_len.next_multiple_of(8) as i64;
                (largest + d).max(0) as usize
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Put {
        key: usize,
        len: Len,
        seed: u64,
    },
    Delete {
        key: usize,
    },
    Get {
        key: usize,
    },
    /// `field` picks an in-range word; `out_of_range` asks for a bad offset.
    Incr {
        key: usize,
        field: usize,
        delta: i64,
        out_of_range: bool,
    },
    Cas {
        key: usize,
        field: usize,
        hit: bool,
        new: u64,
    },
    CompactNow,
    Reopen,
    Crash,
    Scan {
        count: usize,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let keys = key_space().len();
    let key = 0..keys;
    let len = prop_oneof![
        1 => Just(Len::Exact(0)),
        1 => (1usize..8).prop_map(Len::Exact),
        6 => (8usize..400).prop_map(Len::Exact),
        3 => (400usize..20_000).prop_map(Len::Exact),
        1 => (-8i64..=8).prop_map(Len::Boundary),
        1 => (64usize << 10..200 << 10).prop_map(Len::Exact),
    ];
    let delta = prop_oneof![3 => -3i64..=3, 1 => any::<i64>()];
    prop_oneof![
        10 => (key.clone(), len, any::<u64>()).prop_map(|(key, len, seed)| Op::Put { key, len, seed }),
        3 => key.clone().prop_map(|key| Op::Delete { key }),
        3 => key.clone().prop_map(|key| Op::Get { key }),
        4 => (key.clone(), any::<usize>(), delta, prop::bool::weighted(0.1)).prop_map(
            |(key, field, delta, out_of_range)| Op::Incr { key, field, delta, out_of_range }
        ),
        1 => (key.clone(), any::<usize>(), any::<bool>(), any::<u64>())
            .prop_map(|(key, field, hit, new)| Op::Cas { key, field, hit, new }),
        1 => Just(Op::CompactNow),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => (1usize..20).prop_map(|count| Op::Scan { count }),
    ]
}

/// `lazy`: lazy retirement (tombstones, appended updates, DELETED bits in
/// background rounds every few milliseconds, so blocks are reused within
/// a case).
fn options(lazy: bool) -> Options {
    Options {
        write_lanes: 2,
        recovery_threads: 2,
        lazy_retirement: lazy,
        retirement_interval: Duration::from_millis(3),
        ..small_options()
    }
}

fn open(dir: &Path, lazy: bool) -> Store {
    Store::open(dir, options(lazy)).expect("opening the store")
}

fn word(value: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(value[offset..offset + 8].try_into().unwrap())
}

/// The whole store against the model: every key of the key space, `len()`,
/// and a full scan.
fn check_all(store: &Store, model: &BTreeMap<Vec<u8>, Vec<u8>>, keys: &[Vec<u8>], step: usize) {
    for (i, key) in keys.iter().enumerate() {
        let found = store.get(key).expect("get");
        assert_eq!(
            found.as_deref(),
            model.get(key).map(Vec::as_slice),
            "step {step}: key #{i} differs from the model"
        );
    }
    assert_eq!(store.len(), model.len() as u64, "step {step}: len()");
    let (scanned, _) = scan_all(store, 3);
    let expected: BTreeSet<Vec<u8>> = model.keys().cloned().collect();
    assert!(scanned == expected, "step {step}: scan returned other keys");
}

/// Runs `ops` on a fresh store and its model; panics on the first
/// difference.
fn run_ops(ops: &[Op]) {
    run_ops_with(ops, false);
}

fn run_ops_with(ops: &[Op], lazy: bool) {
    let _watchdog = watchdog("one model case", Duration::from_secs(60));
    let keys = key_space();
    let dir = tempfile::tempdir().unwrap();
    let open = |dir: &Path| open(dir, lazy);
    let mut store = Some(open(dir.path()));
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (step, op) in ops.iter().enumerate() {
        let s = store.as_ref().unwrap();
        match *op {
            Op::Put { key, len, seed } => {
                let k = &keys[key];
                let value = pattern(seed, len.resolve(k.len()));
                let is_new = s.put(k, &value).expect("put");
                assert_eq!(
                    is_new,
                    !model.contains_key(k),
                    "step {step}: put's is-new answer"
                );
                model.insert(k.clone(), value);
            }
            Op::Delete { key } => {
                let k = &keys[key];
                let existed = s.delete(k).expect("delete");
                assert_eq!(
                    existed,
                    model.remove(k).is_some(),
                    "step {step}: delete's existed answer"
                );
            }
            Op::Get { key } => {
                let k = &keys[key];
                let expected = model.get(k).map(Vec::as_slice);
                assert_eq!(s.get(k).expect("get").as_deref(), expected, "step {step}");
                let by_ref = s.get_ref(k).expect("get_ref");
                assert_eq!(by_ref.as_deref(), expected, "step {step}: get_ref");
            }
            Op::Incr {
                key,
                field,
                delta,
                out_of_range,
            } => {
                let k = &keys[key];
                let Some(value) = model.get_mut(k) else {
                    let result = s.incr_by(k, 0, delta);
                    assert!(
                        matches!(result, Err(Error::KeyNotFound)),
                        "step {step}: incr of an absent key gave {result:?}"
                    );
                    continue;
                };
                let words = value.len() / 8;
                if words == 0 || out_of_range {
                    // Past the end, or (when there are words) misaligned.
                    let offset = if words == 0 || field % 2 == 0 {
                        (value.len() as u64).next_multiple_of(8)
                    } else {
                        ((field % words) * 8 + 1 + field % 7) as u64
                    };
                    let result = s.incr_by(k, offset, delta);
                    assert!(
                        matches!(result, Err(Error::FieldOutOfRange { .. })),
                        "step {step}: incr at {offset} of a {}-byte value gave {result:?}",
                        value.len()
                    );
                    continue;
                }
                let offset = (field % words) * 8;
                let expected = word(value, offset).wrapping_add(delta as u64);
                let result = s.incr_by(k, offset as u64, delta).expect("incr_by");
                assert_eq!(result, expected, "step {step}: incr_by result");
                value[offset..offset + 8].copy_from_slice(&expected.to_le_bytes());
            }
            Op::Cas {
                key,
                field,
                hit,
                new,
            } => {
                let k = &keys[key];
                let Some(value) = model.get_mut(k) else {
                    let result = s.compare_and_swap(k, 0, 0, new);
                    assert!(
                        matches!(result, Err(Error::KeyNotFound)),
                        "step {step}: cas of an absent key gave {result:?}"
                    );
                    continue;
                };
                let words = value.len() / 8;
                if words == 0 {
                    let result = s.compare_and_swap(k, 0, 0, new);
                    assert!(
                        matches!(result, Err(Error::FieldOutOfRange { .. })),
                        "step {step}: cas in a {}-byte value gave {result:?}",
                        value.len()
                    );
                    continue;
                }
                let offset = (field % words) * 8;
                let current = word(value, offset);
                let expected = if hit { current } else { current ^ 1 };
                let found = s
                    .compare_and_swap(k, offset as u64, expected, new)
                    .expect("compare_and_swap");
                assert_eq!(found, current, "step {step}: cas returns the word found");
                if hit {
                    value[offset..offset + 8].copy_from_slice(&new.to_le_bytes());
                }
            }
            Op::CompactNow => {
                s.compact_now().expect("compact_now");
            }
            Op::Reopen => {
                store.take().unwrap().close().expect("close");
                let reopened = open(dir.path());
                check_all(&reopened, &model, &keys, step);
                store = Some(reopened);
            }
            Op::Crash => {
                store.take().unwrap().crash();
                let reopened = open(dir.path());
                check_all(&reopened, &model, &keys, step);
                store = Some(reopened);
            }
            Op::Scan { count } => {
                let (scanned, _) = scan_all(s, count);
                let expected: BTreeSet<Vec<u8>> = model.keys().cloned().collect();
                assert!(scanned == expected, "step {step}: scan returned other keys");
            }
        }
    }
    let s = store.take().unwrap();
    check_all(&s, &model, &keys, ops.len());
    s.crash();
    let reopened = open(dir.path());
    check_all(&reopened, &model, &keys, ops.len() + 1);
}

fn cases() -> u32 {
    common::count_from_env("ENGRAM_MODEL_CASES", 100) as u32
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 4096,
        ..ProptestConfig::default()
    })]

    #[test]
    fn store_matches_model(ops in prop::collection::vec(op_strategy(), 1..60)) {
        run_ops(&ops);
    }

    /// The same under lazy retirement: deletes are tombstones, in-place
    /// updates new versions, overwritten records lose by sequence number
    /// until a background round sets their bits.
    #[test]
    fn store_matches_model_with_lazy_retirement(ops in prop::collection::vec(op_strategy(), 1..60)) {
        run_ops_with(&ops, true);
    }
}

// Hand-picked sequences, and (as they are found) shrunk regressions.

/// A counter updated in place survives a crash, then is moved by
/// compaction with its updated value, then survives another crash.
#[test]
fn in_place_counter_survives_crash_and_compaction() {
    let mut ops = vec![Op::Put {
        key: 3,
        len: Len::Exact(16),
        seed: 1,
    }];
    for _ in 0..5 {
        ops.push(Op::Incr {
            key: 3,
            field: 1,
            delta: 7,
            out_of_range: false,
        });
    }
    ops.push(Op::Crash);
    // Fill and overwrite so the counter's block becomes mostly dead.
    for seed in 0..20 {
        ops.push(Op::Put {
            key: 1 + (seed as usize % 2),
            len: Len::Exact(15_000),
            seed,
        });
    }
    ops.extend([
        Op::CompactNow,
        Op::Incr {
            key: 3,
            field: 0,
            delta: -1,
            out_of_range: false,
        },
        Op::Crash,
        Op::Get { key: 3 },
        Op::Reopen,
    ]);
    run_ops(&ops);
}

/// Values either side of the log-block / extent boundary, for short and
/// long keys, overwritten by each other, across a crash.
#[test]
fn values_at_the_extent_boundary() {
    let mut ops = Vec::new();
    for key in [0, 4, 6] {
        for d in [-1, 0, 1, 8] {
            ops.push(Op::Put {
                key,
                len: Len::Boundary(d),
                seed: d as u64,
            });
            ops.push(Op::Get { key });
        }
    }
    ops.extend([Op::Crash, Op::CompactNow, Op::Reopen]);
    run_ops(&ops);
}

/// The largest key, with empty and large values, deleted and rewritten.
#[test]
fn largest_key_round_trips() {
    let ops = [
        Op::Put {
            key: 7,
            len: Len::Exact(0),
            seed: 0,
        },
        Op::Crash,
        Op::Put {
            key: 7,
            len: Len::Exact(100_000),
            seed: 2,
        },
        Op::Delete { key: 7 },
        Op::Crash,
        Op::Put {
            key: 7,
            len: Len::Exact(24),
            seed: 3,
        },
        Op::Incr {
            key: 7,
            field: 2,
            delta: 5,
            out_of_range: false,
        },
        Op::Reopen,
    ];
    run_ops(&ops);
}
