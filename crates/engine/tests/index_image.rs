//! Index images: recovery from an image plus the blocks claimed after it
//! must find exactly what a full scan finds, whatever happened after the
//! image (overwrites, deletes, in-place updates, compaction, writers racing
//! the image), and an image that is torn, damaged or foreign must never be
//! used.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{pattern, scan_all, small_options};
use engram_engine::{
    Error, IndexImageOptions, Options, RecoveredKey, RecoveryVisitor, Store, Visitor,
    INDEX_IMAGE_FILES,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn key(i: u64) -> Vec<u8> {
    format!("image-key-{i:07}").into_bytes()
}

fn value(i: u64, version: u64) -> Vec<u8> {
    let mut value = version.to_le_bytes().to_vec();
    value.extend(pattern(
        i << 20 | version,
        40 + (i as usize * 7 + version as usize) % 200,
    ));
    value
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Puts version `version` of every key in `keys`, into the store and the
/// model alike.
fn put_range(store: &Store, model: &mut Model, keys: std::ops::Range<u64>, version: u64) {
    for i in keys {
        store.put(&key(i), &value(i, version)).unwrap();
        model.insert(key(i), value(i, version));
    }
}

fn without_images() -> Options {
    Options {
        index_image: IndexImageOptions {
            enabled: false,
            ..IndexImageOptions::default()
        },
        ..small_options()
    }
}

/// Recovery scanned every block, and each image file present was refused
/// for a reason containing `why`.
fn assert_refused(store: &Store, why: &str) {
    let report = store.recovery_report();
    assert_eq!(report.index_image.image, None, "{report:?}");
    assert!(!report.index_image.rejected.is_empty(), "{report:?}");
    assert!(
        report.index_image.rejected.iter().all(|r| r.contains(why)),
        "expected every image refused for {why:?}: {report:?}"
    );
}

/// Every key of the model has its value, nothing else is there.
fn assert_matches(store: &Store, model: &Model, what: &str) {
    for (k, v) in model {
        let found = store.get(k).unwrap();
        assert_eq!(
            found.as_deref(),
            Some(v.as_slice()),
            "{what}: {}",
            String::from_utf8_lossy(k)
        );
    }
    assert_eq!(store.len(), model.len() as u64, "{what}: len");
    let (scanned, _) = scan_all(store, 1000);
    assert!(
        scanned.iter().eq(model.keys()),
        "{what}: scan found {} keys, the model has {}",
        scanned.len(),
        model.len()
    );
}

/// A recovery visitor that keeps every indexed key with its value's
/// first 8 bytes (the word it gave the record).
#[derive(Default)]
struct Census {
    indexed: Mutex<BTreeMap<Vec<u8>, u64>>,
}

impl RecoveryVisitor for Census {
    fn summarize(&self, _key: &[u8], value: Option<&[u8]>) -> u64 {
        u64::from_le_bytes(value.expect("no damage here")[..8].try_into().unwrap())
    }

    fn indexed(&self, _hash: u64, summary: u64, key: RecoveredKey<'_>) {
        let previous = self
            .indexed
            .lock()
            .unwrap()
            .insert(key.bytes().to_vec(), summary);
        assert!(previous.is_none(), "a key was indexed twice");
    }
}

/// Opens with a census; the census matches the model's first words.
fn open_counting(dir: &Path, options: Options, model: &Model, what: &str) -> Store {
    let census = std::sync::Arc::new(Census::default());
    let store = Store::open(
        dir,
        Options {
            recovery_visitor: Some(Visitor(census.clone())),
            ..options
        },
    )
    .unwrap();
    let expected: BTreeMap<Vec<u8>, u64> = model
        .iter()
        .map(|(k, v)| (k.clone(), u64::from_le_bytes(v[..8].try_into().unwrap())))
        .collect();
    assert!(
        *census.indexed.lock().unwrap() == expected,
        "{what}: the recovery visitor was told of other keys or values"
    );
    store
}

#[test]
fn recovery_reads_the_image_and_scans_only_the_blocks_claimed_since() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let store = Store::open(dir.path(), small_options()).unwrap();
    put_range(&store, &mut model, 0..20_000, 1);
    let image = store.write_index_image().unwrap();
    assert_eq!(image.entries, 20_000);
    let blocks_at_image = store.stats().blocks_total;
    // After the image: overwrites, deletes, new keys, in-place updates of
    // records the image names, and whatever compaction moves meanwhile.
    let mut rng = StdRng::seed_from_u64(7);
    for step in 0..3_000u64 {
        let i = rng.random_range(0..21_000);
        match step % 4 {
            0 | 1 => {
                store.put(&key(i), &value(i, 2 + step)).unwrap();
                model.insert(key(i), value(i, 2 + step));
            }
            2 => {
                store.delete(&key(i)).unwrap();
                model.remove(&key(i));
            }
            _ => {
                if let Some(v) = model.get_mut(&key(i)) {
                    let counter = store.incr_by(&key(i), 0, 5).unwrap();
                    v[..8].copy_from_slice(&counter.to_le_bytes());
                }
            }
        }
    }
    store.compact_now().unwrap();
    store.crash();

    let store = open_counting(dir.path(), small_options(), &model, "from the image");
    let report = store.recovery_report();
    assert_eq!(report.index_image.image, Some(image.number), "{report:?}");
    assert_eq!(report.index_image.named, 20_000);
    assert!(report.index_image.rejected.is_empty(), "{report:?}");
    assert_eq!(report.blocks_scanned, report.index_image.tail_blocks);
    assert!(
        report.index_image.tail_blocks < blocks_at_image / 2,
        "scanned {} blocks of {blocks_at_image}",
        report.index_image.tail_blocks
    );
    assert_matches(&store, &model, "from the image");
    // The store goes on as usual: writes, compaction, another crash.
    put_range(&store, &mut model, 0..500, 99);
    store.crash();

    // The same blocks, recovered by scanning all of them: the same store.
    let store = open_counting(dir.path(), without_images(), &model, "from a full scan");
    let report = store.recovery_report();
    assert_eq!(report.index_image.image, None);
    assert_matches(&store, &model, "from a full scan");
}

#[test]
fn a_torn_or_damaged_image_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let store = Store::open(dir.path(), small_options()).unwrap();
    put_range(&store, &mut model, 0..5_000, 1);
    let first = store.write_index_image().unwrap();
    store.crash();

    // A second image cut short before its header.
    let torn = Options {
        faults: engram_engine::FaultInjection {
            skip_index_image_header: true,
            ..Default::default()
        },
        ..small_options()
    };
    let store = Store::open(dir.path(), torn).unwrap();
    put_range(&store, &mut model, 2_500..7_500, 2);
    store.write_index_image().unwrap();
    store.crash();

    let store = Store::open(dir.path(), small_options()).unwrap();
    let report = store.recovery_report();
    assert_eq!(report.index_image.image, Some(first.number), "{report:?}");
    assert!(
        report.index_image.rejected[0].contains("never completed"),
        "{report:?}"
    );
    assert_matches(&store, &model, "past a torn image");
    store.crash();

    // Damage the only complete image: its checksum refuses it.
    let path = dir.path().join(INDEX_IMAGE_FILES[0]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4096 + 16 * 1234 + 3] ^= 0x10;
    std::fs::write(&path, bytes).unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    let report = store.recovery_report();
    assert_eq!(report.index_image.image, None, "{report:?}");
    assert_eq!(report.index_image.rejected.len(), 2, "{report:?}");
    assert!(
        report.index_image.rejected[0].contains("checksum"),
        "{report:?}"
    );
    assert!(
        report.index_image.rejected[1].contains("never completed"),
        "{report:?}"
    );
    assert_matches(&store, &model, "past a damaged image");
}

/// A record the image names fails its checksum (media damage while the
/// store was closed): the image is abandoned before anything changes, and
/// the full scan repairs the page from parity as it always would.
#[test]
fn an_image_naming_a_damaged_record_is_abandoned_for_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let store = Store::open(dir.path(), small_options()).unwrap();
    put_range(&store, &mut model, 0..3_000, 1);
    store.write_index_image().unwrap();
    store.refresh_redundancy_now();
    store.crash();
    let data = common::data_file(dir.path());
    let mut bytes = std::fs::read(&data).unwrap();
    let at = find(&bytes, &key(1500)).expect("key bytes in the data file") - 32;
    bytes[at + 16] ^= 0xff; // the record's sequence number
    std::fs::write(&data, bytes).unwrap();

    let store = Store::open(dir.path(), small_options()).unwrap();
    assert_refused(&store, "scanned every block");
    assert_eq!(store.recovery_report().repaired_pages.len(), 1);
    assert_matches(&store, &model, "after abandoning the image");
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn an_image_of_another_store_is_refused() {
    let one = tempfile::tempdir().unwrap();
    let two = tempfile::tempdir().unwrap();
    let store = Store::open(one.path(), small_options()).unwrap();
    for i in 0..1_000 {
        store.put(&key(i), &value(i, 1)).unwrap();
    }
    store.write_index_image().unwrap();
    store.close().unwrap();
    let mut model = BTreeMap::new();
    let store = Store::open(two.path(), without_images()).unwrap();
    put_range(&store, &mut model, 500..800, 3);
    store.close().unwrap();
    for name in INDEX_IMAGE_FILES {
        let from = one.path().join(name);
        if from.exists() {
            std::fs::copy(&from, two.path().join(name)).unwrap();
        }
    }
    let store = Store::open(two.path(), small_options()).unwrap();
    assert_refused(&store, "another store");
    assert_matches(&store, &model, "with a foreign image present");
}

/// Writers on disjoint keys put and delete while another thread takes
/// image after image and compaction moves records; after a crash the store
/// recovered from the newest image holds exactly what was acknowledged.
#[test]
fn images_taken_while_writers_run_lose_nothing() {
    const WRITERS: u64 = 3;
    const KEYS_PER_WRITER: u64 = 400;
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        write_lanes: 2,
        ..small_options()
    };
    let model: Vec<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>> =
        (0..WRITERS).map(|_| Mutex::new(BTreeMap::new())).collect();
    let mut images_used = 0;
    for round in 0..6u64 {
        let store = Store::open(dir.path(), options.clone()).unwrap();
        if round > 0 {
            let report = store.recovery_report();
            images_used += report.index_image.image.is_some() as u32;
            eprintln!("round {round}: {:?}", report.index_image);
            let all: BTreeMap<_, _> = model
                .iter()
                .flat_map(|m| m.lock().unwrap().clone())
                .collect();
            assert_matches(&store, &all, &format!("round {round}"));
        }
        let stop = AtomicBool::new(false);
        let images = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|scope| {
            for writer in 0..WRITERS {
                let (store, model, stop) = (&store, &model[writer as usize], &stop);
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(round << 8 | writer);
                    let mut version = round << 32;
                    while !stop.load(Ordering::Relaxed) {
                        version += 1;
                        let i = writer * KEYS_PER_WRITER + rng.random_range(0..KEYS_PER_WRITER);
                        if rng.random_range(0..5) == 0 {
                            store.delete(&key(i)).unwrap();
                            model.lock().unwrap().remove(&key(i));
                        } else {
                            let v = value(i, version);
                            store.put(&key(i), &v).unwrap();
                            model.lock().unwrap().insert(key(i), v);
                        }
                    }
                });
            }
            let (store, stop, images) = (&store, &stop, &images);
            scope.spawn(move || {
                let deadline = Instant::now() + Duration::from_millis(600);
                while Instant::now() < deadline {
                    store.write_index_image().unwrap();
                    images.fetch_add(1, Ordering::Relaxed);
                }
                stop.store(true, Ordering::Relaxed);
            });
        });
        assert!(images.load(Ordering::Relaxed) > 0);
        store.crash();
    }
    let store = Store::open(dir.path(), options).unwrap();
    let all: BTreeMap<_, _> = model
        .iter()
        .flat_map(|m| m.lock().unwrap().clone())
        .collect();
    assert_matches(&store, &all, "last round");
    assert!(
        store.recovery_report().index_image.image.is_some(),
        "recovery did not use the newest image"
    );
    assert!(
        images_used >= 5,
        "only {images_used} recoveries used an image"
    );
}

#[test]
fn images_are_written_in_the_background_and_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        index_image: IndexImageOptions {
            every_bytes: 256 << 10,
            ..IndexImageOptions::default()
        },
        ..small_options()
    };
    let store = Store::open(dir.path(), options.clone()).unwrap();
    let mut model = BTreeMap::new();
    put_range(&store, &mut model, 0..15_000, 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.stats().index_images == 0 {
        assert!(Instant::now() < deadline, "no image in the background");
        std::thread::sleep(Duration::from_millis(20));
    }
    put_range(&store, &mut model, 0..1_000, 2);
    let blocks = store.stats().blocks_total;
    store.close().unwrap();

    // The image written at close leaves only the lanes' open blocks to scan.
    let store = Store::open(dir.path(), options.clone()).unwrap();
    let report = store.recovery_report();
    assert!(report.index_image.image.is_some(), "{report:?}");
    assert!(
        report.index_image.tail_blocks <= 8,
        "scanned {} of {blocks} blocks after a clean close",
        report.index_image.tail_blocks
    );
    assert_matches(&store, &model, "after a clean close");
    // Nothing written: closing again writes no image.
    store.close().unwrap();
    let before = image_numbers(dir.path());
    let store = Store::open(dir.path(), options).unwrap();
    store.close().unwrap();
    assert_eq!(image_numbers(dir.path()), before);
}

fn image_numbers(dir: &Path) -> Vec<Option<std::time::SystemTime>> {
    INDEX_IMAGE_FILES
        .iter()
        .map(|name| {
            std::fs::metadata(dir.join(name))
                .ok()
                .map(|m| m.modified().unwrap())
        })
        .collect()
}

#[test]
fn disabled_images_are_neither_written_nor_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), without_images()).unwrap();
    store.put(b"k", b"v").unwrap();
    match store.write_index_image() {
        Err(Error::InvalidOption(message)) => assert!(message.contains("disabled"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    store.close().unwrap();
    for name in INDEX_IMAGE_FILES {
        assert!(!dir.path().join(name).exists(), "{name} written");
    }
    let bad = Options {
        index_image: IndexImageOptions {
            every_bytes: 0,
            ..IndexImageOptions::default()
        },
        ..small_options()
    };
    match Store::open(dir.path(), bad) {
        Err(Error::InvalidOption(message)) => assert!(message.contains("every_bytes"), "{message}"),
        Err(other) => panic!("expected an option error, got {other}"),
        Ok(_) => panic!("every_bytes 0 accepted"),
    }
}
