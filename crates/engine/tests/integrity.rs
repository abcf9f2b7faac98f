//! The integrity layer under the engine: a corrupted page under a value is
//! rebuilt and the value reads back intact; a stripe damaged beyond repair
//! turns reads of the keys on it (and only those) into errors; switching
//! integrity off and on again never reports the untracked writes as damage.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::small_options;
use engram_engine::{Error, IntegrityMode, IntegrityOptions, Options, Store};

const PAGE: u64 = 4096;

fn options() -> Options {
    Options {
        integrity: IntegrityOptions {
            period: Duration::from_secs(3600),
            scrub_bytes_per_sec: 0,
            ..IntegrityOptions::default()
        },
        ..small_options()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("integrity-key-{i:05}").into_bytes()
}

/// A value that says whose it is, so its bytes can be found in the file.
fn value(i: usize) -> Vec<u8> {
    let mut value = format!("<value of {i:05}>").into_bytes();
    value.resize(700, b'a' + (i % 26) as u8);
    value
}

const KEYS: usize = 3000;

fn filled(dir: &Path) -> Store {
    let store = Store::open(dir, options()).unwrap();
    for i in 0..KEYS {
        store.put(&key(i), &value(i)).unwrap();
    }
    store
}

fn find(haystack: &[u8], needle: &[u8]) -> u64 {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("value not found in the data file") as u64
}

fn flip(dir: &Path, offset: u64, mask: u8) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("values.pmem"))
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    file.write_all_at(&[byte[0] ^ mask], offset).unwrap();
}

#[test]
fn a_corrupted_value_page_is_rebuilt_while_the_store_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = filled(dir.path());
    let clean = store.scrub_now().unwrap();
    assert_eq!(clean.corrupt_pages, 0);
    assert!(clean.pages_checked > 0);
    let file = std::fs::read(dir.path().join("values.pmem")).unwrap();
    let at = find(&file, b"<value of 01234>");
    flip(dir.path(), at + 40, 0x08);
    // The record's own checksum catches it on read before any scrub.
    assert!(matches!(
        store.get(&key(1234)),
        Err(Error::CorruptRecord { .. })
    ));
    let report = store.scrub_now().unwrap();
    assert_eq!(report.corrupt_pages, 1);
    assert_eq!(report.repaired_pages, vec![(at + 40) / PAGE * PAGE]);
    assert!(report.unrepairable_pages.is_empty() && report.affected_keys.is_empty());
    assert_eq!(store.get(&key(1234)).unwrap(), Some(value(1234)));
    let stats = store.integrity_stats().unwrap();
    assert_eq!(
        (stats.corruptions_found, stats.repaired, stats.unrepairable),
        (1, 1, 0)
    );
    store.close().unwrap();
}

/// Where each key's record starts in the data file, found in one pass.
fn record_offsets(file: &[u8]) -> Vec<u64> {
    let mut offsets = vec![u64::MAX; KEYS];
    let prefix = b"integrity-key-";
    let mut at = 0;
    while let Some(found) = file[at..].windows(prefix.len()).position(|w| w == prefix) {
        let key_at = at + found;
        let digits = &file[key_at + prefix.len()..key_at + prefix.len() + 5];
        if let Some(i) = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<usize>().ok())
        {
            if i < KEYS {
                offsets[i] = key_at as u64 - 32;
            }
        }
        at = key_at + 1;
    }
    assert!(
        offsets.iter().all(|&o| o != u64::MAX),
        "a record was not found"
    );
    offsets
}

/// Bytes a record of this test occupies (header, padded key, value).
const RECORD_BYTES: u64 = 32 + 24 + 704;
/// The value's filler starts this far into a record.
const FILLER_IN_RECORD: u64 = 32 + 24 + 100;

/// Offsets (in the data file) of a filler byte of two values that sit on
/// pages `p` and `p + 1` of one 4-page stripe.
fn two_values_in_one_stripe(file: &[u8]) -> (u64, u64) {
    let by_page: std::collections::BTreeMap<u64, u64> = record_offsets(file)
        .into_iter()
        .map(|record| record + FILLER_IN_RECORD)
        .map(|at| (at / PAGE, at))
        .collect();
    by_page
        .iter()
        .find_map(|(&page, &at)| {
            (page % 4 == 0)
                .then(|| by_page.get(&(page + 1)).map(|&next| (at, next)))
                .flatten()
        })
        .expect("no stripe with values on two adjacent pages")
}

fn check_reads(store: &Store, report: &engram_engine::ScrubReport) -> usize {
    let affected: Vec<Vec<u8>> = report
        .affected_keys
        .iter()
        .map(|k| k.key.clone().expect("headers are intact here"))
        .collect();
    assert!(affected.len() >= 2, "{report:?}");
    for i in 0..KEYS {
        let result = store.get(&key(i));
        if affected.contains(&key(i)) {
            assert!(
                matches!(result, Err(Error::Unrepairable { .. })),
                "key {i} is on a bad page but read {result:?}"
            );
        } else {
            assert_eq!(
                result.unwrap(),
                Some(value(i)),
                "key {i} is not on a bad page"
            );
        }
    }
    // Rewriting an affected key puts it somewhere sound again.
    store.put(&affected[0], b"rewritten").unwrap();
    assert_eq!(
        store.get(&affected[0]).unwrap().as_deref(),
        Some(&b"rewritten"[..])
    );
    affected.len()
}

/// Damages two values of one stripe while the store is closed, reopens it
/// (from the index image written at close, or by scanning every block),
/// and checks that scrubbing names both pages and reads fail on them only.
fn unrepairable_stripe_in_a_closed_store(from_image: bool) {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    let file = std::fs::read(dir.path().join("values.pmem")).unwrap();
    let (a, b) = two_values_in_one_stripe(&file);
    flip(dir.path(), a, 0x01);
    flip(dir.path(), b, 0x01);
    let mut reopen = options();
    reopen.index_image.enabled = from_image;
    let store = Store::open(dir.path(), reopen).unwrap();
    let recovery = store.recovery_report();
    assert_eq!(recovery.index_image.image.is_some(), from_image);
    // A full scan reads every value: it met the damage, tried parity, and
    // kept the records indexed. From an image only headers are read, so the
    // damage is first met by the scrub below (or by a read's checksum).
    assert_eq!(recovery.damaged_records, if from_image { 0 } else { 2 });
    assert_eq!(store.len(), KEYS as u64);
    let report = store.scrub_now().unwrap();
    assert_eq!(
        report.unrepairable_pages,
        vec![a / PAGE * PAGE, b / PAGE * PAGE]
    );
    check_reads(&store, &report);
    store.close().unwrap();
}

#[test]
fn an_unrepairable_stripe_in_a_closed_store_fails_reads_of_its_keys_only() {
    unrepairable_stripe_in_a_closed_store(false);
}

#[test]
fn an_unrepairable_stripe_found_after_recovery_from_an_image_fails_reads_of_its_keys_only() {
    unrepairable_stripe_in_a_closed_store(true);
}

#[test]
fn an_unrepairable_stripe_under_a_running_store_fails_reads_of_its_keys_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = filled(dir.path());
    store.refresh_redundancy_now();
    let file = std::fs::read(dir.path().join("values.pmem")).unwrap();
    let (a, b) = two_values_in_one_stripe(&file);
    flip(dir.path(), a, 0x01);
    flip(dir.path(), b, 0x01);
    let report = store.scrub_now().unwrap();
    assert_eq!(
        report.unrepairable_pages,
        vec![a / PAGE * PAGE, b / PAGE * PAGE]
    );
    assert_eq!(store.integrity_stats().unwrap().unrepairable, 2);
    check_reads(&store, &report);
    store.close().unwrap();
}

#[test]
fn a_repairable_page_under_a_record_header_is_fixed_during_recovery() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    let file = std::fs::read(dir.path().join("values.pmem")).unwrap();
    // The key bytes of a record in the middle of a block: without parity
    // every record after it in the block would be lost to the scan.
    let at = record_offsets(&file)[1500] + 32;
    flip(dir.path(), at + 3, 0x04);
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(store.len(), KEYS as u64);
    assert_eq!(store.recovery_report().damaged_records, 0);
    assert_eq!(store.integrity_stats().unwrap().repaired, 1);
    for i in 0..KEYS {
        assert_eq!(store.get(&key(i)).unwrap(), Some(value(i)), "key {i}");
    }
    store.close().unwrap();
}

#[test]
fn a_header_destroyed_beyond_repair_costs_only_the_records_on_bad_pages() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    let file = std::fs::read(dir.path().join("values.pmem")).unwrap();
    let records = record_offsets(&file);
    // The key of one record, and a second page of its stripe.
    let victim = records[1500];
    let page = (victim + 32) / PAGE;
    let other = if page % 4 == 3 { page - 1 } else { page + 1 };
    flip(dir.path(), victim + 32 + 2, 0x01);
    flip(dir.path(), other * PAGE + 2000, 0x01);
    let bad = [page, other];
    let on_bad_page = |i: usize| {
        let (first, last) = (records[i] / PAGE, (records[i] + RECORD_BYTES - 1) / PAGE);
        bad.iter().any(|p| (first..=last).contains(p))
    };
    let store = Store::open(dir.path(), options()).unwrap();
    assert!(store.recovery_report().damaged_records >= 2);
    let mut lost_or_refused = 0;
    for i in 0..KEYS {
        match store.get(&key(i)) {
            Ok(Some(found)) => assert_eq!(found, value(i), "key {i}"),
            other => {
                assert!(
                    on_bad_page(i),
                    "key {i} is on no bad page but read {other:?}"
                );
                if let Err(error) = other {
                    assert!(matches!(error, Error::Unrepairable { .. }), "{error}");
                }
                lost_or_refused += 1;
            }
        }
    }
    assert!(lost_or_refused >= 2);
    // The victim's key is gone with its header; the records after it in
    // its block were found again.
    assert_eq!(store.get(&key(1500)).unwrap(), None);
    assert!((1501..KEYS)
        .filter(|&i| !on_bad_page(i))
        .all(|i| store.get(&key(i)).unwrap().is_some()));
    store.close().unwrap();
}

#[test]
fn turning_integrity_off_and_on_never_reports_untracked_writes_as_damage() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    assert!(dir.path().join("integrity.pmem").exists());
    let off = Options {
        integrity: IntegrityOptions::off(),
        ..options()
    };
    let store = Store::open(dir.path(), off).unwrap();
    assert!(
        !dir.path().join("integrity.pmem").exists(),
        "stale redundancy kept"
    );
    assert!(store.integrity_stats().is_none());
    assert!(matches!(store.scrub_now(), Err(Error::InvalidOption(_))));
    for i in 0..KEYS / 2 {
        store
            .put(&key(i), b"changed while integrity was off")
            .unwrap();
    }
    store.close().unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    let opened = store.recovery_report().integrity.unwrap();
    assert!(opened.created);
    let report = store.scrub_now().unwrap();
    assert_eq!(report.corrupt_pages, 0);
    store.close().unwrap();
}

#[test]
fn a_damaged_record_header_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let no_integrity = Options {
        integrity: IntegrityOptions::off(),
        ..options()
    };
    let store = Store::open(dir.path(), no_integrity.clone()).unwrap();
    store.put(b"victim", &value(1)).unwrap();
    store.put(b"bystander", &value(2)).unwrap();
    let file = std::fs::read(dir.path().join("values.pmem")).unwrap();
    let record = find(&file, b"victim") - 32;
    // value_len (bytes 28..32 of the header) now runs far past the file.
    flip(dir.path(), record + 31, 0x40);
    assert!(matches!(
        store.get(b"victim"),
        Err(Error::CorruptRecord { .. })
    ));
    assert!(store.get_ref(b"victim").is_err());
    // In-place updates check the header as reads do: a field inside the
    // damaged length but past the end of the file is an error, not a panic.
    assert!(matches!(
        store.incr_by(b"victim", 1 << 20, 1),
        Err(Error::CorruptRecord { .. })
    ));
    assert_eq!(store.get(b"bystander").unwrap(), Some(value(2)));
    store.close().unwrap();
}

/// INCR-like in-place updates of a record whose header lies on a page
/// damaged beyond repair are refused as its reads are, whatever the
/// damaged lengths say (they used to write there, or panic when the field
/// lay past the end of the file); records on sound pages still update.
#[test]
fn in_place_updates_of_a_record_on_an_unrepairable_page_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = filled(dir.path());
    store.refresh_redundancy_now();
    let file = std::fs::read(dir.path().join("values.pmem")).unwrap();
    let records = record_offsets(&file);
    let victim = records[1500];
    // value_len (bytes 28..32 of the header) now runs a GiB past the file,
    // and a second page of the stripe is damaged too: no repair.
    let page = (victim + 31) / PAGE;
    let other = if page % 4 == 3 { page - 1 } else { page + 1 };
    flip(dir.path(), victim + 31, 0x40);
    flip(dir.path(), other * PAGE + 2000, 0x01);
    let report = store.scrub_now().unwrap();
    assert!(
        report.unrepairable_pages.contains(&(page * PAGE)),
        "{report:?}"
    );
    let past_the_file = (file.len() as u64).next_multiple_of(8);
    assert!(matches!(
        store.incr_by(&key(1500), past_the_file, 1),
        Err(Error::Unrepairable { .. })
    ));
    assert!(matches!(
        store.incr_by(&key(1500), 0, 1),
        Err(Error::Unrepairable { .. })
    ));
    assert!(matches!(
        store.compare_and_swap(&key(1500), 0, 0, 1),
        Err(Error::Unrepairable { .. })
    ));
    let sound = (0..KEYS)
        .find(|&i| {
            let (first, last) = (records[i] / PAGE, (records[i] + RECORD_BYTES - 1) / PAGE);
            !(first..=last).any(|p| p == page || p == other)
        })
        .expect("a key on sound pages");
    let before = u64::from_le_bytes(value(sound)[8..16].try_into().unwrap());
    assert_eq!(
        store.incr_by(&key(sound), 8, 1).unwrap(),
        before.wrapping_add(1)
    );
    store.close().unwrap();
}

#[test]
fn inline_integrity_keeps_every_page_covered() {
    let dir = tempfile::tempdir().unwrap();
    let inline = Options {
        integrity: IntegrityOptions {
            mode: IntegrityMode::Inline,
            ..options().integrity
        },
        ..options()
    };
    let store = Store::open(dir.path(), inline).unwrap();
    for i in 0..500 {
        store.put(&key(i), &value(i)).unwrap();
        store.incr_by(&key(i), 24, 1).unwrap();
    }
    // A page is stale from a store's start to the refresh that ends it.
    // The last put has returned, but a background thread (the space
    // reserve growing the file, on the background cores, where it may be
    // preempted mid-store) can still be between the two. Nothing else
    // refreshes pages here (no lazy pass, no scrub), so a page inline mode
    // failed to refresh would stay stale and fail this.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.integrity_stats().unwrap().pages_stale != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} pages stale 10 s after the last write",
            store.integrity_stats().unwrap().pages_stale
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = store.scrub_now().unwrap();
    assert_eq!(report.corrupt_pages, 0);
    store.close().unwrap();
}

#[test]
fn scans_skip_a_record_whose_header_is_damaged_instead_of_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let no_integrity = Options {
        integrity: IntegrityOptions::off(),
        ..options()
    };
    let store = Store::open(dir.path(), no_integrity).unwrap();
    for i in 0..50 {
        store.put(&key(i), &value(i)).unwrap();
    }
    let file = std::fs::read(dir.path().join("values.pmem")).unwrap();
    let record = record_offsets_of(&file, &key(7));
    // key_len (bytes 24..28) now runs past the end of the file.
    flip(dir.path(), record + 27, 0x7f);
    let mut keys = Vec::new();
    let mut cursor = 0;
    loop {
        let (next, batch) = store.scan(cursor, 16);
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(keys.len(), 49);
    assert!(!keys.contains(&key(7)));
    assert!(store.get(&key(7)).unwrap().is_none() || store.get(&key(7)).is_err());
    assert_eq!(store.get(&key(8)).unwrap(), Some(value(8)));
    store.close().unwrap();
}

fn record_offsets_of(file: &[u8], key: &[u8]) -> u64 {
    find(file, key) - 32
}

#[test]
fn a_page_damaged_beyond_repair_stays_refused_when_written_again_until_its_block_is_reused() {
    let dir = tempfile::tempdir().unwrap();
    let store = filled(dir.path());
    store.refresh_redundancy_now();
    let file = std::fs::read(dir.path().join("values.pmem")).unwrap();
    let (a, b) = two_values_in_one_stripe(&file);
    flip(dir.path(), a, 0x01);
    flip(dir.path(), b, 0x01);
    let report = store.scrub_now().unwrap();
    assert_eq!(report.unrepairable_pages.len(), 2);
    let victim = report.affected_keys[0].key.clone().unwrap();
    // Deleting a neighbour on the bad page writes its delete bit there:
    // the page is stale now, and the refresh must not bless its bytes.
    let neighbour = report.affected_keys[1].key.clone().unwrap();
    store.delete(&neighbour).unwrap();
    store.refresh_redundancy_now();
    assert!(matches!(
        store.get(&victim),
        Err(Error::Unrepairable { .. })
    ));
    let again = store.scrub_now().unwrap();
    assert_eq!(again.unrepairable_pages, report.unrepairable_pages);
    assert_eq!(
        store.integrity_stats().unwrap().corruptions_found,
        2,
        "counted per page"
    );
    store.close().unwrap();
}
