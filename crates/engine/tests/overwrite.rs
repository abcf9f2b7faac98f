//! Overwrite-heavy load: compaction must keep the data file within a small
//! multiple of the live data, and every key must hold its latest value.

mod common;

use std::time::{Duration, Instant};

use common::{data_file, pattern, seed_from_env, small_options, watchdog};
use engram_engine::{CompactionOptions, Options, Store};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

const KEYS: u64 = 20_000;
const VALUE_BYTES: usize = 1024;
const ROUNDS: u64 = 20;
const THREADS: u64 = 2;

fn options() -> Options {
    Options {
        block_size_bytes: 64 << 10,
        grow_bytes: 256 << 10,
        write_lanes: 4,
        ..small_options()
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("overwrite-{k:08}").into_bytes()
}

fn value(k: u64, round: u64) -> Vec<u8> {
    let mut value = pattern(k << 8 | round, VALUE_BYTES);
    value[..8].copy_from_slice(&round.to_le_bytes());
    value
}

fn check_latest(store: &Store, when: &str) {
    for k in 0..KEYS {
        let found = store
            .get(&key(k))
            .unwrap()
            .unwrap_or_else(|| panic!("{when}: key {k} lost"));
        if found != value(k, ROUNDS - 1) {
            let round = u64::from_le_bytes(found[..8].try_into().unwrap());
            panic!("{when}: key {k} holds round {round}, not the last round");
        }
    }
    assert_eq!(store.len(), KEYS, "{when}: len()");
}

#[test]
fn overwrites_keep_the_file_near_the_live_size() {
    let _watchdog = watchdog(
        "overwrites_keep_the_file_near_the_live_size",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = data_file(dir.path());
    let store = Store::open(dir.path(), options()).unwrap();
    let live_bytes = KEYS * (key(0).len() + VALUE_BYTES) as u64;
    let seed = seed_from_env("ENGRAM_OVERWRITE_SEED");
    let started = Instant::now();
    let peak_file_bytes = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (store, path, peak) = (&store, &path, &peak_file_bytes);
            scope.spawn(move || {
                // A new random order every round, so that blocks die
                // piecemeal and compaction, not luck, keeps the file small.
                let mut rng = StdRng::seed_from_u64(seed ^ thread);
                let mut keys: Vec<u64> = (thread..KEYS).step_by(THREADS as usize).collect();
                for round in 0..ROUNDS {
                    keys.shuffle(&mut rng);
                    for &k in &keys {
                        store.put(&key(k), &value(k, round)).unwrap();
                    }
                    let file_bytes = std::fs::metadata(path).unwrap().len();
                    peak.fetch_max(file_bytes, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    let written = Instant::now();
    store.compact_now().unwrap();
    let file_bytes = std::fs::metadata(&path).unwrap().len();
    let stats = store.stats();
    eprintln!(
        "{} MiB written in {:.1?}, compacted in {:.1?}: file {} KiB (peak {} KiB), \
         {} KiB live data, {} compactions, {} records moved",
        (KEYS * ROUNDS * VALUE_BYTES as u64) >> 20,
        written - started,
        written.elapsed(),
        file_bytes >> 10,
        peak_file_bytes.into_inner() >> 10,
        live_bytes >> 10,
        stats.compactions,
        stats.records_moved
    );
    assert_eq!(stats.file_bytes, file_bytes);
    assert!(
        file_bytes * 2 < live_bytes * 5,
        "data file is {file_bytes} bytes for {live_bytes} bytes of live data (over 2.5x)"
    );
    check_latest(&store, "after the overwrites");
    store.crash();
    let store = Store::open(dir.path(), options()).unwrap();
    check_latest(&store, "after a crash");
    store.compact_now().unwrap();
    let file_bytes = std::fs::metadata(&path).unwrap().len();
    assert!(
        file_bytes * 2 < live_bytes * 5,
        "after recovery the data file is {file_bytes} bytes for {live_bytes} bytes of live data"
    );
}

/// A hot set overwritten at a steady pace: each sealed block loses its
/// records one by one and dies whole within a pass over the keys, so the
/// background compactor, which waits for a dying block while the file may
/// still grow, moves almost nothing. (Compacting every block as soon
/// as it was half dead moved about a third of all writes here: records
/// their next overwrite killed anyway.) Nor does it compact a block
/// whose last few records hold still for a round or two: reading a
/// whole block to move three records cost a Raft member 0.4 µs a write.
#[test]
fn a_hot_set_s_blocks_die_whole_without_being_compacted() {
    const HOT_KEYS: u64 = 400;
    const PASSES: u64 = 40;
    let _watchdog = watchdog(
        "a_hot_set_s_blocks_die_whole_without_being_compacted",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().unwrap();
    // Growth in steps of 256 KiB (four blocks): free blocks are often
    // short, but the file is far from its space budget, so the reserve
    // thread grows it rather than the compactor copying. The budget must
    // really be far: a block dies only when the next pass has overwritten
    // all its keys, so the file holds about two passes (twice the 430 KB
    // live) plus four open blocks and the free ones. At the default
    // budget (2x live, patient below 1.5x) the compactor's patience hung
    // on a free block or two being spare, which a loaded machine (the
    // other test in this binary writing 400 MB beside it) does not
    // guarantee: one CI run compacted 138 dying blocks of 266. At 6x the
    // compactor is patient below 4.5x (about 1.9 MB), whatever the timing.
    let store = Store::open(
        dir.path(),
        Options {
            compaction: CompactionOptions {
                max_space_amplification: 6.0,
                ..options().compaction
            },
            ..options()
        },
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(seed_from_env("ENGRAM_OVERWRITE_SEED"));
    let mut keys: Vec<u64> = (0..HOT_KEYS).collect();
    for pass in 0..PASSES {
        keys.shuffle(&mut rng);
        for (i, &k) in keys.iter().enumerate() {
            store.put(&key(k), &value(k, pass)).unwrap();
            if i % 10 == 0 {
                // ~40 ms a pass: the 5 ms compactor looks at every block
                // several times while it dies.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let stats = store.stats();
    let writes = HOT_KEYS * PASSES;
    eprintln!(
        "{writes} writes, {} blocks freed, {} compactions, {} records moved, \
         file {} KiB for {} KiB live",
        stats.blocks_freed,
        stats.compactions,
        stats.records_moved,
        stats.file_bytes >> 10,
        stats.live_bytes >> 10
    );
    // Patience is not a licence to grow: blocks freed whole are reused,
    // so the file stays near the two passes it needs, well inside the
    // share of the budget below which the compactor waits (4.5x).
    assert!(
        stats.file_bytes * 2 < stats.live_bytes * 9,
        "the file grew to {} bytes for {} live",
        stats.file_bytes,
        stats.live_bytes
    );
    assert!(
        stats.records_moved * 20 < writes,
        "{} of {writes} writes were moved by compaction",
        stats.records_moved
    );
    assert!(
        stats.blocks_freed > 100,
        "only {} blocks died: the test did not test it",
        stats.blocks_freed
    );
    assert!(
        stats.compactions * 10 < stats.blocks_freed,
        "{} of {} dead blocks were compacted first",
        stats.compactions,
        stats.blocks_freed
    );
    for k in 0..HOT_KEYS {
        let found = store.get(&key(k)).unwrap().expect("hot key lost");
        assert_eq!(found, value(k, PASSES - 1), "key {k}");
    }
}
