//! Threads on shared keys, with compaction running alongside.
//!
//! - Reads return nothing or a value some thread really began writing for
//!   that key (each value encodes key, writer and version, and its bytes
//!   are regenerated and compared whole).
//! - `put`'s is-new answers and `delete`'s existed answers add up, per key,
//!   to whether the key is present at the end.
//! - In-place increments are never lost, whatever compaction moves.
//! - A scan returns every key present throughout, while others churn.
//! - Afterwards `len()` equals the number of keys `get` finds, and a crash
//!   and recovery changes nothing.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use common::{pattern, scan_all, seed_from_env, small_options, watchdog, StopOnDrop};
use engram_engine::{Options, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const VALUE_HEADER_BYTES: usize = 32;

fn options() -> Options {
    Options {
        write_lanes: 4,
        ..small_options()
    }
}

fn mix(a: u64, b: u64, c: u64) -> u64 {
    let mut z = a ^ b.rotate_left(21) ^ c.rotate_left(42) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn shared_key(key: usize) -> Vec<u8> {
    format!("shared-{key:04}").into_bytes()
}

/// The value `writer` writes as its `version`th put to `key`: one in 200 is
/// larger than a block (an extent).
fn encode(key: usize, writer: usize, version: u64) -> Vec<u8> {
    let h = mix(key as u64, writer as u64, version);
    let len = if h.is_multiple_of(200) {
        70_000 + (h >> 16) as usize % 50_000
    } else {
        VALUE_HEADER_BYTES + (h >> 16) as usize % 2000
    };
    let mut value = Vec::with_capacity(len);
    for word in [key as u64, writer as u64, version, len as u64] {
        value.extend_from_slice(&word.to_le_bytes());
    }
    value.extend_from_slice(&pattern(h, len - VALUE_HEADER_BYTES));
    value
}

fn word(value: &[u8], index: usize) -> u64 {
    u64::from_le_bytes(value[index * 8..index * 8 + 8].try_into().unwrap())
}

/// Checks that `value`, read for `key`, is a value some writer began.
fn check_written(key: usize, value: &[u8], begun: &[AtomicU64]) {
    assert!(
        value.len() >= VALUE_HEADER_BYTES,
        "key {key}: a {}-byte value nobody wrote",
        value.len()
    );
    let (found_key, writer, version) = (word(value, 0), word(value, 1) as usize, word(value, 2));
    assert_eq!(found_key, key as u64, "key {key}: read another key's value");
    assert!(writer < begun.len(), "key {key}: unknown writer {writer}");
    // Paired with the writer's Release store before it starts the put.
    let latest = begun[writer].load(Ordering::Acquire);
    assert!(
        version <= latest,
        "key {key}: version {version} of writer {writer}, which has begun only {latest}"
    );
    assert!(
        value == encode(key, writer, version),
        "key {key}: value of writer {writer} version {version} is damaged"
    );
}

#[test]
fn readers_see_only_values_that_were_written() {
    let _watchdog = watchdog(
        "readers_see_only_values_that_were_written",
        Duration::from_secs(120),
    );
    const WRITERS: usize = 4;
    const KEYS: usize = 64;
    const OPS_PER_WRITER: u64 = 50_000;
    let seed = seed_from_env("ENGRAM_CONCURRENCY_SEED");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    let begun: Vec<AtomicU64> = (0..WRITERS).map(|_| AtomicU64::new(0)).collect();
    let inserted: Vec<AtomicI64> = (0..KEYS).map(|_| AtomicI64::new(0)).collect();
    let removed: Vec<AtomicI64> = (0..KEYS).map(|_| AtomicI64::new(0)).collect();
    let writers_done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let stop_helpers = StopOnDrop(&writers_done);
        let mut writers = Vec::new();
        for writer in 0..WRITERS {
            let (store, begun, inserted, removed) = (&store, &begun, &inserted, &removed);
            writers.push(scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(mix(seed, writer as u64, 1));
                for version in 1..=OPS_PER_WRITER {
                    let key = rng.random_range(0..KEYS);
                    let name = shared_key(key);
                    match rng.random_range(0..10) {
                        0..=5 => {
                            begun[writer].store(version, Ordering::Release);
                            let value = encode(key, writer, version);
                            if store.put(&name, &value).unwrap() {
                                inserted[key].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        6 => {
                            if store.delete(&name).unwrap() {
                                removed[key].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ => {
                            if let Some(value) = store.get(&name).unwrap() {
                                check_written(key, &value, begun);
                            }
                        }
                    }
                }
            }));
        }
        // A reader that only reads, by copy and in place.
        {
            let (store, begun, writers_done, reads) = (&store, &begun, &writers_done, &reads);
            scope.spawn(move || {
                let mut key = 0;
                while !writers_done.load(Ordering::Acquire) {
                    key = (key + 7) % KEYS;
                    if let Some(value) = store.get_ref(&shared_key(key)).unwrap() {
                        check_written(key, &value, begun);
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Compaction on demand, on top of the background compactor.
        {
            let (store, writers_done) = (&store, &writers_done);
            scope.spawn(move || {
                while !writers_done.load(Ordering::Acquire) {
                    store.compact_now().unwrap();
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
        }
        for writer in writers {
            writer.join().unwrap();
        }
        drop(stop_helpers);
    });
    assert!(reads.load(Ordering::Relaxed) > 0, "the reader never ran");

    let check_final = |store: &Store, when: &str| {
        let mut present = BTreeSet::new();
        for key in 0..KEYS {
            let value = store.get(&shared_key(key)).unwrap();
            let balance =
                inserted[key].load(Ordering::Relaxed) - removed[key].load(Ordering::Relaxed);
            assert_eq!(
                balance,
                value.is_some() as i64,
                "{when}: key {key}: puts that created it minus deletes that removed it"
            );
            if let Some(value) = value {
                check_written(key, &value, &begun);
                present.insert(shared_key(key));
            }
        }
        assert_eq!(store.len(), present.len() as u64, "{when}: len()");
        let (scanned, _) = scan_all(store, 10);
        assert!(scanned == present, "{when}: scan differs from get");
        present
    };
    let before: Vec<_> = (0..KEYS)
        .map(|key| store.get(&shared_key(key)).unwrap())
        .collect();
    check_final(&store, "after the threads stopped");
    store.crash();
    let store = Store::open(dir.path(), options()).unwrap();
    check_final(&store, "after a crash");
    for (key, value) in before.iter().enumerate() {
        assert_eq!(
            &store.get(&shared_key(key)).unwrap(),
            value,
            "key {key} changed across the crash"
        );
    }
}

#[test]
fn concurrent_increments_are_exact_while_compaction_moves_them() {
    let _watchdog = watchdog(
        "concurrent_increments_are_exact_while_compaction_moves_them",
        Duration::from_secs(120),
    );
    const THREADS: usize = 4;
    const COUNTERS: usize = 8;
    const WORDS: usize = 8;
    const INCREMENTS_PER_THREAD: usize = 50_000;
    let seed = seed_from_env("ENGRAM_CONCURRENCY_SEED");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    let counter_key = |c: usize| format!("counter-{c}").into_bytes();
    let filler_key = |c: usize, i: usize| format!("filler-{c}-{i}").into_bytes();
    // Each counter shares its block with fillers that are overwritten all
    // the time, so compaction keeps moving the counters.
    for c in 0..COUNTERS {
        store.put(&counter_key(c), &[0u8; WORDS * 8]).unwrap();
        for i in 0..20 {
            store
                .put(&filler_key(c, i), &pattern(i as u64, 1500))
                .unwrap();
        }
    }
    let moved_before = store.stats().records_moved;
    let done = AtomicBool::new(false);
    let totals: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let stop_helpers = StopOnDrop(&done);
        // Overwrites the fillers.
        {
            let (store, done) = (&store, &done);
            scope.spawn(move || {
                let mut round = 0u64;
                while !done.load(Ordering::Acquire) {
                    round += 1;
                    for c in 0..COUNTERS {
                        for i in 0..20 {
                            store.put(&filler_key(c, i), &pattern(round, 1500)).unwrap();
                        }
                    }
                }
            });
        }
        {
            let (store, done) = (&store, &done);
            scope.spawn(move || {
                while !done.load(Ordering::Acquire) {
                    store.compact_now().unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
        // Every word only grows, as seen by one reader.
        {
            let (store, done) = (&store, &done);
            scope.spawn(move || {
                let mut last = vec![[0u64; WORDS]; COUNTERS];
                while !done.load(Ordering::Acquire) {
                    for (c, last) in last.iter_mut().enumerate() {
                        let value = store.get(&counter_key(c)).unwrap().expect("counter");
                        assert_eq!(value.len(), WORDS * 8);
                        for (w, last) in last.iter_mut().enumerate() {
                            let now = word(&value, w);
                            assert!(
                                now >= *last,
                                "counter {c} word {w} went from {last} to {now}"
                            );
                            *last = now;
                        }
                    }
                }
            });
        }
        let incrementers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let store = &store;
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(mix(seed, thread as u64, 2));
                    let mut sums = vec![0u64; COUNTERS * WORDS];
                    for _ in 0..INCREMENTS_PER_THREAD {
                        let c = rng.random_range(0..COUNTERS);
                        let w = rng.random_range(0..WORDS);
                        let delta = rng.random_range(1..=100u64);
                        let after = store
                            .incr_by(&counter_key(c), (w * 8) as u64, delta as i64)
                            .unwrap();
                        sums[c * WORDS + w] += delta;
                        assert!(
                            after >= sums[c * WORDS + w],
                            "incr_by returned less than this thread added"
                        );
                    }
                    sums
                })
            })
            .collect();
        let totals = incrementers
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        drop(stop_helpers);
        totals
    });
    let check = |store: &Store, when: &str| {
        for c in 0..COUNTERS {
            let value = store.get(&counter_key(c)).unwrap().expect("counter");
            for w in 0..WORDS {
                let expected: u64 = totals.iter().map(|sums| sums[c * WORDS + w]).sum();
                assert_eq!(word(&value, w), expected, "{when}: counter {c} word {w}");
            }
        }
    };
    check(&store, "after the threads stopped");
    let moved = store.stats().records_moved - moved_before;
    assert!(
        moved > 0,
        "compaction moved nothing: the test did not test it"
    );
    store.crash();
    let store = Store::open(dir.path(), options()).unwrap();
    check(&store, "after a crash");
    assert_eq!(store.len(), (COUNTERS * 21) as u64);
}

fn churn_key(thread: usize, i: usize) -> Vec<u8> {
    format!("churn-{thread}-{i:07}").into_bytes()
}

/// The churn key that step `i` deletes after inserting key `i`: three in
/// four keys are deleted again soon after, some of them twice.
fn churn_delete(i: usize) -> Option<usize> {
    (!i.is_multiple_of(4) && !(i / 2).is_multiple_of(4)).then_some(i / 2)
}

#[test]
fn scan_returns_every_stable_key_while_others_churn() {
    let _watchdog = watchdog(
        "scan_returns_every_stable_key_while_others_churn",
        Duration::from_secs(120),
    );
    const STABLE: usize = 3000;
    const CHURNERS: usize = 2;
    /// Churners run at least this many steps, and on until the scanner has
    /// finished `SCANS` full scans, so the scans overlap the churn.
    const CHURN_OPS: usize = 40_000;
    const SCANS: u64 = 3;
    const MAX_CHURN_OPS: usize = 2_000_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    let stable_key = |i: usize| format!("stable-{i:05}").into_bytes();
    let stable: BTreeSet<Vec<u8>> = (0..STABLE).map(stable_key).collect();
    for k in &stable {
        store.put(k, k).unwrap();
    }
    let done = AtomicBool::new(false);
    let scans_finished = AtomicU64::new(0);
    let steps: Vec<usize> = std::thread::scope(|scope| {
        let stop_scanner = StopOnDrop(&done);
        let scanner = {
            let (store, stable, done, scans_finished) = (&store, &stable, &done, &scans_finished);
            scope.spawn(move || {
                let mut count = 1;
                while !done.load(Ordering::Acquire) {
                    count = count % 97 + 1;
                    let (keys, _) = scan_all(store, count);
                    let missing: Vec<_> = stable.difference(&keys).take(5).collect();
                    let scan = scans_finished.load(Ordering::Relaxed);
                    assert!(
                        missing.is_empty(),
                        "scan {scan} (count {count}) missed stable keys, e.g. {missing:?}"
                    );
                    for k in &keys {
                        assert!(
                            stable.contains(k) || k.starts_with(b"churn-"),
                            "scan returned a key nobody wrote: {k:?}"
                        );
                    }
                    scans_finished.fetch_add(1, Ordering::Release);
                }
            })
        };
        let churners: Vec<_> = (0..CHURNERS)
            .map(|t| {
                let (store, scans_finished) = (&store, &scans_finished);
                scope.spawn(move || {
                    // Inserts many new keys (the index grows under the
                    // scan) and deletes most of them again.
                    let mut present = BTreeSet::new();
                    let mut i = 0;
                    while i < CHURN_OPS
                        || (scans_finished.load(Ordering::Acquire) < SCANS && i < MAX_CHURN_OPS)
                    {
                        assert!(store.put(&churn_key(t, i), &pattern(i as u64, 64)).unwrap());
                        present.insert(i);
                        if let Some(j) = churn_delete(i) {
                            let existed = store.delete(&churn_key(t, j)).unwrap();
                            assert_eq!(existed, present.remove(&j), "delete of churn key {t}-{j}");
                        }
                        i += 1;
                    }
                    i
                })
            })
            .collect();
        let steps = churners.into_iter().map(|c| c.join().unwrap()).collect();
        drop(stop_scanner);
        scanner.join().unwrap();
        steps
    });
    let scans = scans_finished.load(Ordering::Acquire);
    assert!(
        scans >= SCANS,
        "only {scans} scans finished during the churn"
    );
    let (keys, _) = scan_all(&store, 50);
    let found = keys
        .iter()
        .filter(|k| store.get(k).unwrap().is_some())
        .count();
    assert_eq!(
        found,
        keys.len(),
        "scan returned keys that get does not find"
    );
    assert_eq!(store.len(), keys.len() as u64);
    // Exactly the stable keys and the churn keys not deleted again.
    let mut expected = stable.clone();
    for (t, &n) in steps.iter().enumerate() {
        let mut present = BTreeSet::new();
        for i in 0..n {
            present.insert(i);
            if let Some(j) = churn_delete(i) {
                present.remove(&j);
            }
        }
        expected.extend(present.into_iter().map(|i| churn_key(t, i)));
    }
    assert_eq!(keys.len(), expected.len());
    assert!(
        keys == expected,
        "the final key set is not the expected one"
    );
}
