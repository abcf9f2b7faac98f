//! The data file grows ahead of need: when claims leave fewer than a
//! quarter of a growth step of blocks free, the `engram-space-reserve`
//! thread grows it by a step, so writers find blocks ready instead of
//! allocating, mapping and pre-faulting the file themselves. A writer that
//! does find none grows it by a sixteenth of a step and leaves the step to
//! the reserve. Off, the file grows only when a writer finds no free block.

mod common;

use std::time::{Duration, Instant};

use engram_engine::{CompactionOptions, Options, Store};

const BLOCK: u64 = 64 << 10;
/// A growth step of 16 blocks: the reserve keeps at least 4 free.
const STEP: u64 = 16 * BLOCK;
const LOW_WATER: u64 = 4;

fn options(grow_ahead: bool) -> Options {
    Options {
        grow_bytes: STEP,
        grow_ahead,
        // One lane fills one block at a time: blocks used = values / 4.
        write_lanes: 1,
        compaction: CompactionOptions {
            enabled: false,
            ..CompactionOptions::default()
        },
        ..common::small_options()
    }
}

/// Values that fill a 64 KiB block four at a time.
const VALUE: usize = 16_000;

/// Writes distinct keys that fill `blocks` blocks.
fn fill(store: &Store, from: usize, blocks: u64) {
    let value = vec![7u8; VALUE];
    for i in from..from + 4 * blocks as usize {
        store.put(format!("key-{i}").as_bytes(), &value).unwrap();
    }
}

/// Like `fill`, a block at a time, each time waiting (up to 200 ms) for
/// the reserve to bring the free blocks back to the low-water mark, so
/// that a writer never outruns a growth the reserve would make.
fn fill_settled(store: &Store, from: usize, blocks: u64) {
    for block in 0..blocks as usize {
        fill(store, from + 4 * block, 1);
        let deadline = Instant::now() + Duration::from_millis(200);
        while store.stats().blocks_free < LOW_WATER && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn the_reserve_grows_the_file_before_writers_run_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(true)).unwrap();
    // Past the first step: claims go below the low-water mark again and
    // again, and each time the reserve thread adds a step.
    for round in 0..4 {
        fill(&store, round * 1000, 15);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stats = store.stats();
            if stats.blocks_free >= LOW_WATER {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: the reserve never refilled: {stats:?}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let stats = store.stats();
    assert!(stats.blocks_total >= 4 * 15, "{stats:?}");
    store.close().unwrap();
    // What was written before and after each growth is all there.
    let store = Store::open(dir.path(), options(true)).unwrap();
    assert_eq!(store.len(), 4 * 4 * 15);
    store.close().unwrap();
}

#[test]
fn without_the_reserve_the_file_grows_only_when_no_block_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(false)).unwrap();
    // 14 of the first 16 blocks written (and a 15th open): 1 free, below
    // the low-water mark, and nothing grows the file until it is used up.
    fill(&store, 0, 14);
    std::thread::sleep(Duration::from_millis(100));
    let stats = store.stats();
    assert!(stats.blocks_free < LOW_WATER, "{stats:?}");
    assert_eq!(stats.blocks_total, STEP / BLOCK, "{stats:?}");
    store.close().unwrap();
}

/// At the space budget (here: 1.2 times the live data, past the slack
/// of four steps) the reserve does not grow the file: writers compact
/// first there, and grow it themselves only when that frees nothing.
#[test]
fn the_reserve_does_not_grow_past_the_space_budget() {
    let dir = tempfile::tempdir().unwrap();
    let store = at_a_tight_budget(dir.path());
    // Within the slack of four steps the reserve grows the file step by
    // step; at four steps, 61 blocks written take the free blocks below
    // the low-water mark (3 left) past the slack, and the file stays as it
    // is.
    fill_settled(&store, 0, 4 * 16 - 3);
    std::thread::sleep(Duration::from_millis(100));
    let stats = store.stats();
    assert!(stats.blocks_free < LOW_WATER, "{stats:?}");
    assert_eq!(stats.blocks_total, 4 * STEP / BLOCK, "{stats:?}");
    store.close().unwrap();
}

/// Past the budget, a writer that finds no block (and nothing to compact)
/// grows the file by the urgent step only (a sixteenth of a step: one
/// block here), and the reserve then adds a whole step: the writers would
/// grow the file anyway, and this way the next ones find blocks ready.
#[test]
fn a_writer_that_runs_dry_grows_a_little_and_the_reserve_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = at_a_tight_budget(dir.path());
    // As above (3 free), then four blocks more: the writer takes the
    // last free ones, then grows the file itself.
    fill_settled(&store, 0, 4 * 16 - 3);
    fill(&store, 100_000, 4);
    let expected = 4 * STEP / BLOCK + 1 + STEP / BLOCK;
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.stats().blocks_total < expected {
        assert!(
            Instant::now() < deadline,
            "the reserve never added its step: {:?}",
            store.stats()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // Once: the step left enough free that nothing asks again.
    std::thread::sleep(Duration::from_millis(100));
    let stats = store.stats();
    assert_eq!(stats.blocks_total, expected, "{stats:?}");
    assert!(stats.blocks_free >= LOW_WATER, "{stats:?}");
    store.close().unwrap();
    let store = at_a_tight_budget(dir.path());
    assert_eq!(store.len(), 4 * (4 * 16 - 3 + 4));
    store.close().unwrap();
}

/// The reserve on, compaction on but idle, and a budget of 1.2 times the
/// live data.
fn at_a_tight_budget(dir: &std::path::Path) -> Store {
    Store::open(
        dir,
        Options {
            compaction: CompactionOptions {
                enabled: true,
                interval: Duration::from_secs(3600),
                max_space_amplification: 1.2,
                ..CompactionOptions::default()
            },
            ..options(true)
        },
    )
    .unwrap()
}
