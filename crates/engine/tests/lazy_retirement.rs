//! Lazy retirement (`Options::lazy_retirement`, `retirement.rs`): what an
//! acknowledged write leaves on the media is the log's tail, and that is
//! enough. Each test checks it from outside, through what recovery finds:
//! records that lost by sequence number (nothing retired them in place),
//! tombstones that keep deleted keys deleted, dead blocks reused once the
//! background rounds have made the bits durable. The model test runs the
//! same random operations with lazy retirement on
//! (`model.rs`, `store_matches_model_with_lazy_retirement`).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{data_file, pattern, small_options};
use engram_engine::{Options, Store};

/// Lazy retirement, with rounds every `interval`.
fn lazy(interval: Duration) -> Options {
    Options {
        lazy_retirement: true,
        retirement_interval: interval,
        write_lanes: 2,
        recovery_threads: 2,
        ..small_options()
    }
}

/// Rounds that never come within a test: nothing but the tail reaches
/// the media, as after a power failure that lost every page the
/// acknowledgements did not wait for.
fn no_rounds() -> Options {
    lazy(Duration::from_secs(3600))
}

/// Writes `versions` versions of keys `k0`..`k{keys-1}`, in rounds: the
/// value of `key`'s version `v` is `pattern(key * 10 + v, 100)`.
fn put_versions(store: &Store, versions: u64, keys: u64) {
    for version in 0..versions {
        for key in 0..keys {
            store
                .put(
                    format!("k{key}").as_bytes(),
                    &pattern(key * 10 + version, 100),
                )
                .unwrap();
        }
    }
}

fn reopen_after_crash(store: Store, dir: &Path, options: Options) -> Store {
    store.crash();
    Store::open(dir, options).expect("reopening after a crash")
}

#[test]
fn overwritten_records_lose_by_sequence_number() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    put_versions(&store, 5, 100);
    let store = reopen_after_crash(store, dir.path(), no_rounds());
    // Nothing retired the four old versions of each key in place: recovery
    // found them valid and each lost to its key's newest record.
    assert_eq!(store.recovery_report().superseded, 400);
    assert_eq!(store.len(), 100);
    for key in 0..100u64 {
        assert_eq!(
            store.get(format!("k{key}").as_bytes()).unwrap(),
            Some(pattern(key * 10 + 4, 100))
        );
    }
}

/// An embedder asking for `SyncPolicy::Always` gets the server's
/// `always` write path: lazy retirement (overwrites leave the old records
/// to lose by sequence number), each acknowledgement covered by a sync of
/// the tail, and what was acknowledged is there after a crash.
#[test]
fn sync_always_implies_lazy_retirement() {
    let dir = tempfile::tempdir().unwrap();
    let always = || Options {
        sync: engram_engine::SyncPolicy::Always,
        lazy_retirement: false,
        retirement_interval: Duration::from_secs(3600),
        ..small_options()
    };
    let store = Store::open(dir.path(), always()).unwrap();
    put_versions(&store, 3, 50);
    assert!(store.stats().syncs >= 1, "always synced");
    let store = reopen_after_crash(store, dir.path(), always());
    assert_eq!(
        store.recovery_report().superseded,
        100,
        "no bit set in place"
    );
    for key in 0..50u64 {
        assert_eq!(
            store.get(format!("k{key}").as_bytes()).unwrap().unwrap(),
            pattern(key * 10 + 2, 100)
        );
    }
}

#[test]
fn deleted_keys_stay_deleted_without_any_retirement_bit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    for version in 0..3u64 {
        store.put(b"gone", &pattern(version, 50)).unwrap();
        store.put(b"kept", &pattern(version, 50)).unwrap();
    }
    assert!(store.delete(b"gone").unwrap());
    assert!(
        !store.delete(b"gone").unwrap(),
        "a second delete finds nothing"
    );
    assert!(!store.delete(b"never").unwrap());
    let store = reopen_after_crash(store, dir.path(), no_rounds());
    assert_eq!(store.get(b"gone").unwrap(), None);
    assert_eq!(store.get(b"kept").unwrap(), Some(pattern(2, 50)));
    assert_eq!(store.len(), 1);
    // Deleted again after a put: the newer tombstone outranks the put.
    store.put(b"gone", b"back").unwrap();
    assert_eq!(store.get(b"gone").unwrap().as_deref(), Some(&b"back"[..]));
    assert!(store.delete(b"gone").unwrap());
    let store = reopen_after_crash(store, dir.path(), no_rounds());
    assert_eq!(store.get(b"gone").unwrap(), None);
    assert_eq!(store.len(), 1);
}

/// An index image names a key's record; the delete after it is a
/// tombstone in the tail, which recovery from the image must find.
#[test]
fn a_tombstone_in_the_tail_outranks_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    for key in 0..50u64 {
        store
            .put(format!("i{key}").as_bytes(), &pattern(key, 80))
            .unwrap();
    }
    store.write_index_image().unwrap();
    for key in (0..50u64).step_by(2) {
        assert!(store.delete(format!("i{key}").as_bytes()).unwrap());
    }
    store.put(b"i1", b"newer").unwrap();
    let store = reopen_after_crash(store, dir.path(), no_rounds());
    assert!(
        store.recovery_report().index_image.image.is_some(),
        "recovery used the image"
    );
    assert_eq!(store.len(), 25);
    for key in 0..50u64 {
        let found = store.get(format!("i{key}").as_bytes()).unwrap();
        match key {
            1 => assert_eq!(found.as_deref(), Some(&b"newer"[..])),
            _ if key % 2 == 0 => assert_eq!(found, None, "key i{key}"),
            _ => assert_eq!(found, Some(pattern(key, 80)), "key i{key}"),
        }
    }
}

/// An index image is only as good as the bits below its floor: recovery
/// from it never scans there, so a replaced record there must already be
/// retired. Writing an image under lazy retirement sets (and syncs) every
/// queued bit first; a full scan afterwards finds no loser left to
/// resolve. Without that, recovery from the image would free the block of
/// a tombstone that outranked such a record, and the next full scan would
/// bring the deleted key back (the kill test's lazy variant found it).
#[test]
fn an_index_image_retires_what_was_replaced_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    put_versions(&store, 2, 100);
    store.write_index_image().unwrap();
    store.crash();
    for name in ["index-0.pmem", "index-1.pmem"] {
        let _ = std::fs::remove_file(dir.path().join(name));
    }
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    assert!(
        store.recovery_report().index_image.image.is_none(),
        "a full scan"
    );
    assert_eq!(
        store.recovery_report().superseded,
        0,
        "the 100 replaced records were retired before the image was written"
    );
    assert_eq!(store.len(), 100);
}

#[test]
fn in_place_updates_append_new_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    store.put(b"counter", &[0u8; 16]).unwrap();
    let appended_before = store.stats().appended_bytes;
    for i in 1..=200u64 {
        assert_eq!(store.incr_by(b"counter", 8, 1).unwrap(), i);
    }
    assert_eq!(
        store.compare_and_swap(b"counter", 0, 1, 9).unwrap(),
        0,
        "a miss"
    );
    assert_eq!(
        store.compare_and_swap(b"counter", 0, 0, 9).unwrap(),
        0,
        "a hit"
    );
    let stats = store.stats();
    // 201 changes, each a new 72-byte version (32 header + 8 key + 16 value
    // + padding), none of them a store into an existing record.
    assert!(
        stats.appended_bytes - appended_before >= 201 * 56,
        "appended {} bytes",
        stats.appended_bytes - appended_before
    );
    let store = reopen_after_crash(store, dir.path(), no_rounds());
    let value = store.get(b"counter").unwrap().unwrap();
    assert_eq!(u64::from_le_bytes(value[0..8].try_into().unwrap()), 9);
    assert_eq!(u64::from_le_bytes(value[8..16].try_into().unwrap()), 200);
}

/// Where nothing is ordered against power loss (`process`: a Raft
/// member's store runs lazy retirement there), no sync waits for a random
/// page, and a small value's word is updated in place as without lazy
/// retirement (a new version cost a record, its checksums and its
/// predecessor's retirement, on every member); a process crash keeps it.
/// Turned back on, the switch syncs the file, and updates append again.
#[test]
fn without_power_fail_ordering_small_values_are_updated_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    store.set_power_fail_ordering(false);
    store.put(b"counter", &[0u8; 16]).unwrap();
    let before = store.stats();
    for i in 1..=200u64 {
        assert_eq!(store.incr_by(b"counter", 8, 1).unwrap(), i);
    }
    assert_eq!(
        store.stats().appended_bytes,
        before.appended_bytes,
        "no new version"
    );
    let store = reopen_after_crash(store, dir.path(), no_rounds());
    let value = store.get(b"counter").unwrap().unwrap();
    assert_eq!(u64::from_le_bytes(value[8..16].try_into().unwrap()), 200);

    store.set_power_fail_ordering(false);
    assert_eq!(store.incr_by(b"counter", 8, 1).unwrap(), 201);
    let syncs = store.stats().syncs;
    store.set_power_fail_ordering(true);
    let before = store.stats();
    assert!(before.syncs > syncs, "switched on without a sync");
    assert_eq!(store.incr_by(b"counter", 8, 1).unwrap(), 202);
    assert!(
        store.stats().appended_bytes > before.appended_bytes,
        "appended again"
    );
}

/// A value larger than a log block (an extent) is not rewritten per
/// update: its word is updated in place even under lazy retirement (the
/// word's page joins the next tail sync; the FUSE power-cut test's SETBITs
/// on a 2 MiB bitmap prove that part), and the update survives a crash.
#[test]
fn updates_of_a_value_larger_than_a_log_block_stay_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    let large = pattern(7, 200 << 10);
    store.put(b"bitmap", &large).unwrap();
    let field = 100 << 10;
    let base = u64::from_le_bytes(large[field..field + 8].try_into().unwrap());
    let before = store.stats();
    for i in 1..=50u64 {
        assert_eq!(
            store.incr_by(b"bitmap", field as u64, 1).unwrap(),
            base.wrapping_add(i)
        );
    }
    store.sync().unwrap();
    let after = store.stats();
    assert_eq!(after.in_place_updates - before.in_place_updates, 50);
    assert!(
        after.appended_bytes - before.appended_bytes < 4096,
        "50 updates of a 200 KiB value appended {} bytes",
        after.appended_bytes - before.appended_bytes
    );
    let store = reopen_after_crash(store, dir.path(), no_rounds());
    let value = store.get(b"bitmap").unwrap().unwrap();
    let mut expected = large;
    expected[field..field + 8].copy_from_slice(&base.wrapping_add(50).to_le_bytes());
    assert!(value == expected, "the updated value after the crash");
}

/// Updates of one word from two threads: each new version is published
/// only over the version it was made from, so none is lost.
#[test]
fn concurrent_appended_updates_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), lazy(Duration::from_millis(2))).unwrap());
    store.put(b"shared", &[0u8; 8]).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for _ in 0..2000 {
                    store.incr_by(b"shared", 0, 1).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let value = store.get(b"shared").unwrap().unwrap();
    assert_eq!(u64::from_le_bytes(value.try_into().unwrap()), 4000);
}

/// Writes keys `r0`..`r99` `rounds` times over: round `n`'s value is
/// `pattern(n, value_bytes)` (20 MB over 100 KB of live data for 200
/// rounds of 1,000 bytes).
fn overwrite_rounds(store: &Store, rounds: u64, value_bytes: usize) {
    for round in 0..rounds {
        for key in 0..100u64 {
            store
                .put(format!("r{key}").as_bytes(), &pattern(round, value_bytes))
                .unwrap();
        }
    }
}

/// Overwrites keep making blocks dead; the rounds set their bits and give
/// the blocks back, so the file stays near the live data instead of
/// growing with every write.
#[test]
fn dead_blocks_are_reused_after_the_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), lazy(Duration::from_millis(2))).unwrap();
    let value_bytes = 1000;
    overwrite_rounds(&store, 200, value_bytes);
    // 20 MB written over 100 KB of live data.
    let file_bytes = std::fs::metadata(data_file(dir.path())).unwrap().len();
    assert!(
        file_bytes < 8 << 20,
        "the data file grew to {file_bytes} bytes: dead blocks were not reused"
    );
    let stats = store.stats();
    assert!(
        stats.blocks_freed > 100,
        "{} blocks freed",
        stats.blocks_freed
    );
    let store = reopen_after_crash(store, dir.path(), lazy(Duration::from_millis(2)));
    for key in 0..100u64 {
        assert_eq!(
            store.get(format!("r{key}").as_bytes()).unwrap(),
            Some(pattern(199, value_bytes))
        );
    }
    store.close().unwrap();
}

/// Without power-fail ordering (a store whose owner promises survival of
/// a process crash only) the rounds sync nothing, and still set their bits
/// and give dead blocks back; a process crash loses nothing. Turned back
/// on, the next round syncs.
#[test]
fn rounds_without_power_fail_ordering_sync_nothing_and_still_reuse_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), lazy(Duration::from_millis(2))).unwrap();
    store.set_power_fail_ordering(false);
    let value_bytes = 1000;
    overwrite_rounds(&store, 200, value_bytes);
    let stats = store.stats();
    assert!(stats.retirement_rounds > 0, "no round ran");
    assert_eq!(stats.retirement_syncs, 0, "a round synced");
    assert!(
        stats.blocks_freed > 100,
        "{} blocks freed",
        stats.blocks_freed
    );
    let file_bytes = std::fs::metadata(data_file(dir.path())).unwrap().len();
    assert!(
        file_bytes < 8 << 20,
        "the data file grew to {file_bytes} bytes"
    );

    store.set_power_fail_ordering(true);
    store.delete(b"r0").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.stats().retirement_syncs == 0 {
        assert!(std::time::Instant::now() < deadline, "no round synced");
        std::thread::sleep(Duration::from_millis(2));
    }

    let store = reopen_after_crash(store, dir.path(), lazy(Duration::from_millis(2)));
    assert_eq!(store.get(b"r0").unwrap(), None);
    for key in 1..100u64 {
        assert_eq!(
            store.get(format!("r{key}").as_bytes()).unwrap(),
            Some(pattern(199, value_bytes))
        );
    }
    store.close().unwrap();
}

/// A store of format 1 (written before tombstones existed) is run with
/// in-place retirement even when lazy retirement is asked for, so a build
/// that reads only format 1 can still open it.
#[test]
fn a_format_1_store_keeps_retiring_in_place() {
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), small_options())
        .unwrap()
        .close()
        .unwrap();
    set_format_version(&data_file(dir.path()), 1);
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    store.put(b"k", b"one").unwrap();
    store.put(b"k", b"two").unwrap();
    store.delete(b"k").unwrap();
    store.put(b"j", b"one").unwrap();
    let store = reopen_after_crash(store, dir.path(), no_rounds());
    // Retired in place: nothing was left for recovery to resolve.
    assert_eq!(store.recovery_report().superseded, 0);
    assert_eq!(store.get(b"k").unwrap(), None);
    assert_eq!(store.get(b"j").unwrap().as_deref(), Some(&b"one"[..]));
}

/// Rewrites the superblock's format version (bytes 8..12) and its header
/// checksum (CRC32C of bytes 0..40, at 40..44), as an older build wrote it.
fn set_format_version(path: &Path, version: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..40]);
    bytes[40..44].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_batch_is_applied_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    store.put(b"b", b"old b").unwrap();
    store.put(b"c", b"old c").unwrap();
    let outcomes = store
        .write_batch(
            &[
                (b"a", Some(b"new a")),
                (b"b", Some(b"new b")),
                (b"c", None),
                (b"d", None),
            ],
            |old| old.unwrap_or(0),
        )
        .unwrap()
        .expect("lazy retirement takes batches");
    assert_eq!(outcomes, [true, false, true, false]);
    assert_eq!(store.len(), 2);
    let store = reopen_after_crash(store, dir.path(), no_rounds());
    assert_eq!(store.get(b"a").unwrap().as_deref(), Some(&b"new a"[..]));
    assert_eq!(store.get(b"b").unwrap().as_deref(), Some(&b"new b"[..]));
    assert_eq!(store.get(b"c").unwrap(), None);
    assert_eq!(store.len(), 2);
}

/// A batch one of whose records never reached the media (here: its bytes
/// damaged on a page written since the last refresh, which recovery reads
/// as a write cut short) is dropped whole: no key of it changes.
#[test]
fn a_torn_batch_is_dropped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    store.put(b"before", b"kept").unwrap();
    store.put(b"x", b"x0").unwrap();
    let marker = pattern(42, 64);
    store
        .write_batch(
            &[
                (b"x", Some(b"x1")),
                (b"y", Some(&marker)),
                (b"z", Some(b"z1")),
            ],
            |old| old.unwrap_or(0),
        )
        .unwrap()
        .unwrap();
    store.crash();
    let path = data_file(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(marker.len())
        .position(|window| window == marker.as_slice())
        .expect("the batch's middle value is in the file");
    bytes[at + 3] ^= 0xFF;
    std::fs::write(&path, bytes).unwrap();
    let store = Store::open(dir.path(), no_rounds()).unwrap();
    assert_eq!(store.get(b"before").unwrap().as_deref(), Some(&b"kept"[..]));
    assert_eq!(
        store.get(b"x").unwrap().as_deref(),
        Some(&b"x0"[..]),
        "x kept its old value"
    );
    assert_eq!(store.get(b"y").unwrap(), None);
    assert_eq!(store.get(b"z").unwrap(), None);
}

#[test]
fn without_lazy_retirement_a_batch_is_the_callers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    let outcome = store
        .write_batch(&[(b"a", Some(b"1")), (b"b", Some(b"2"))], |_| 0)
        .unwrap();
    assert_eq!(outcome, None);
    assert_eq!(store.get(b"a").unwrap(), None, "nothing was written");
    let lazy_store_dir = tempfile::tempdir().unwrap();
    let lazy_store = Store::open(lazy_store_dir.path(), no_rounds()).unwrap();
    let too_large = vec![7u8; 40 << 10];
    let outcome = lazy_store
        .write_batch(&[(b"a", Some(&too_large)), (b"b", Some(&too_large))], |_| 0)
        .unwrap();
    assert_eq!(
        outcome, None,
        "a batch larger than a log block is the caller's"
    );
}

/// A hot set overwritten pass after pass: its blocks die whole within a
/// few rounds, and a round that finds a retired record's block dead
/// writes that block's FREE header instead of the record's DELETED bit
/// (one page per block, not one per record). Nothing is lost in a crash.
#[test]
fn a_dying_block_s_records_are_spared_their_bits() {
    let dir = tempfile::tempdir().unwrap();
    let options = || lazy(Duration::from_millis(5));
    let store = Store::open(dir.path(), options()).unwrap();
    let (keys, passes, value_bytes) = (2000u64, 30u64, 100);
    for pass in 0..passes {
        for key in 0..keys {
            store
                .put(
                    format!("h{key}").as_bytes(),
                    &pattern(key * 100 + pass, value_bytes),
                )
                .unwrap();
            if key % 200 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let stats = store.stats();
    eprintln!(
        "{} rounds, {} bits set, {} spared",
        stats.retirement_rounds, stats.retirement_bits_set, stats.retirement_bits_spared
    );
    let retired = keys * (passes - 1);
    assert!(
        stats.retirement_bits_spared > retired / 2,
        "{} of {retired} retired records spared their bits",
        stats.retirement_bits_spared
    );
    assert!(
        stats.retirement_bits_set * 4 < stats.retirement_bits_spared,
        "{} bits set, {} spared",
        stats.retirement_bits_set,
        stats.retirement_bits_spared
    );
    let store = reopen_after_crash(store, dir.path(), options());
    assert_eq!(store.len(), keys);
    for key in 0..keys {
        assert_eq!(
            store.get(format!("h{key}").as_bytes()).unwrap(),
            Some(pattern(key * 100 + passes - 1, value_bytes)),
            "key h{key}"
        );
    }
}

/// Deleted keys whose older versions lie in blocks that never die (cold
/// keys beside them), while the tombstones' blocks die and are reused
/// under churn: the death of a block that holds a tombstone makes its
/// round set every deferred bit, so no older version is left valid
/// without its bit once the tombstone is gone. A full scan after a crash
/// finds no deleted key.
#[test]
fn a_tombstone_s_block_goes_only_after_every_version_it_outranks() {
    let dir = tempfile::tempdir().unwrap();
    let options = || Options {
        index_image: engram_engine::IndexImageOptions {
            enabled: false,
            ..engram_engine::IndexImageOptions::default()
        },
        // Rounds far enough apart that a deferred bit would still wait
        // (16 rounds) when the tombstones' blocks are reused.
        ..lazy(Duration::from_millis(20))
    };
    let store = Store::open(dir.path(), options()).unwrap();
    let churn = |store: &Store, round: u64| {
        for key in 0..100u64 {
            store
                .put(format!("churn{key}").as_bytes(), &pattern(round, 500))
                .unwrap();
        }
    };
    // Versions of the doomed keys, each beside a cold key that keeps its
    // block alive.
    for version in 0..3u64 {
        for key in 0..300u64 {
            store
                .put(
                    format!("d{key}").as_bytes(),
                    &pattern(key * 10 + version, 100),
                )
                .unwrap();
            store
                .put(
                    format!("cold{version}-{key}").as_bytes(),
                    &pattern(key, 100),
                )
                .unwrap();
        }
    }
    // Churn seals the cold keys' blocks; the tombstones go into blocks
    // of churn only, which die as the churn is overwritten, and are
    // reused.
    churn(&store, 0);
    churn(&store, 1);
    for key in 0..300u64 {
        assert!(store.delete(format!("d{key}").as_bytes()).unwrap());
    }
    // Six rounds (a deferred bit waits sixteen): the tombstones' blocks
    // die, are released a round later, and the churn reuses them.
    let rounds_before = store.stats().retirement_rounds;
    let mut round = 2;
    while store.stats().retirement_rounds < rounds_before + 6 {
        churn(&store, round);
        round += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    let store = reopen_after_crash(store, dir.path(), options());
    for key in 0..300u64 {
        assert_eq!(
            store.get(format!("d{key}").as_bytes()).unwrap(),
            None,
            "deleted key d{key} came back"
        );
    }
    assert_eq!(store.len(), 900 + 100);
}
