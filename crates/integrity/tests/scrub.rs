//! Fault injection: bits flipped in the data file (closed, or under a
//! running store through the file, which the mapping shares but the tracker
//! never sees, like real media corruption) are all found, single bad pages
//! per stripe are rebuilt byte for byte, and what cannot be rebuilt is
//! reported and refused, page by page.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use engram_integrity::{Error, IntegrityMode, IntegrityOptions, FILE_NAME};
use engram_pmem::{PmemOffset, Region, RegionOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PAGES: u64 = 64;
const STRIPE: u64 = 4;

/// A fresh data file with redundancy built and closed cleanly.
fn protected_store(dir: &std::path::Path, seed: u64) -> Vec<u8> {
    drop(create_data(dir, PAGES, seed));
    let data = open_data(dir, None);
    let (integrity, report) = open_integrity(dir, &data, quiet_options(), None);
    assert!(report.created);
    assert_eq!(report.stale_pages, PAGES);
    integrity.close().unwrap();
    read_file(dir, "data")
}

/// At most one page per stripe, a few random bits each.
fn corrupt_some_stripes(dir: &std::path::Path, rng: &mut StdRng) -> BTreeSet<u64> {
    let mut pages = BTreeSet::new();
    for stripe in 0..PAGES / STRIPE {
        if rng.random_bool(0.5) {
            let page = stripe * STRIPE + rng.random_range(0..STRIPE);
            for _ in 0..rng.random_range(1..=8) {
                let offset = page * PAGE + rng.random_range(0..PAGE);
                corrupt_file(dir, "data", offset, 1 << rng.random_range(0..8));
            }
            pages.insert(page);
        }
    }
    pages
}

#[test]
fn single_page_corruptions_in_a_closed_store_are_found_and_rebuilt_byte_for_byte() {
    for seed in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let original = protected_store(dir.path(), seed);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut corrupted = corrupt_some_stripes(dir.path(), &mut rng);
        // Two flips that cancel out leave nothing to find.
        corrupted.retain(|&page| {
            let now = read_file(dir.path(), "data");
            let range = (page * PAGE) as usize..((page + 1) * PAGE) as usize;
            now[range.clone()] != original[range]
        });
        let data = open_data(dir.path(), None);
        let (integrity, report) = open_integrity(dir.path(), &data, quiet_options(), None);
        assert!(!report.unclean);
        assert_eq!(report.stale_pages, 0);
        let outcome = integrity.scrub_now();
        assert_eq!(
            outcome.corrupt.iter().copied().collect::<BTreeSet<_>>(),
            corrupted,
            "seed {seed}"
        );
        assert_eq!(
            outcome.repaired.iter().copied().collect::<BTreeSet<_>>(),
            corrupted,
            "seed {seed}"
        );
        assert!(outcome.unrepairable.is_empty());
        assert_eq!(outcome.pages_checked, PAGES);
        assert_eq!(
            data.read(PmemOffset(0), PAGES * PAGE),
            &original[..],
            "seed {seed}"
        );
        let stats = integrity.stats();
        assert_eq!(stats.corruptions_found, corrupted.len() as u64);
        assert_eq!(stats.repaired, corrupted.len() as u64);
        assert_eq!(stats.unrepairable, 0);
        integrity.close().unwrap();
        drop(data);
        assert_eq!(
            read_file(dir.path(), "data"),
            original,
            "seed {seed}: repair not on disk"
        );
    }
}

#[test]
fn corruption_under_a_running_store_is_found_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    drop(create_data(dir.path(), PAGES, 11));
    let data = open_data(dir.path(), None);
    let (integrity, _) = open_integrity(dir.path(), &data, quiet_options(), None);
    // Live writes first, so redundancy is being maintained, not just built.
    let mut rng = StdRng::seed_from_u64(5);
    for _ in 0..500 {
        let at = rng.random_range(0..PAGES * PAGE / 8) * 8;
        data.store_u64(PmemOffset(at), rng.random());
    }
    assert!(integrity.stats().pages_stale > 0);
    integrity.refresh_now();
    assert_eq!(integrity.stats().pages_stale, 0);
    let expected = data.read(PmemOffset(0), PAGES * PAGE).to_vec();
    for round in 0..6 {
        let corrupted = corrupt_some_stripes(dir.path(), &mut rng);
        let outcome = integrity.scrub_now();
        let found: BTreeSet<u64> = outcome.corrupt.iter().copied().collect();
        assert_eq!(found, corrupted, "round {round}");
        assert_eq!(outcome.repaired.len(), corrupted.len());
        assert_eq!(
            data.read(PmemOffset(0), PAGES * PAGE),
            &expected[..],
            "round {round}"
        );
    }
    integrity.close().unwrap();
}

#[test]
fn two_bad_pages_in_a_stripe_are_reported_and_refused_page_by_page() {
    let dir = tempfile::tempdir().unwrap();
    protected_store(dir.path(), 2);
    corrupt_file(dir.path(), "data", 8 * PAGE + 100, 0x01);
    corrupt_file(dir.path(), "data", 9 * PAGE + 4000, 0x80);
    let data = open_data(dir.path(), None);
    let (integrity, _) = open_integrity(dir.path(), &data, quiet_options(), None);
    assert!(!integrity.overlaps_unrepairable(0, PAGES * PAGE));
    let outcome = integrity.scrub_now();
    assert_eq!(outcome.unrepairable, vec![8, 9]);
    assert!(outcome.repaired.is_empty());
    assert_eq!(integrity.unrepairable_offsets(), vec![8 * PAGE, 9 * PAGE]);
    assert!(integrity.overlaps_unrepairable(8 * PAGE + 10, 8));
    assert!(integrity.overlaps_unrepairable(7 * PAGE + 4090, 16));
    assert!(!integrity.overlaps_unrepairable(7 * PAGE, PAGE));
    assert!(!integrity.overlaps_unrepairable(10 * PAGE, 2 * PAGE));
    assert_eq!(integrity.stats().unrepairable, 2);
    // A store to a bad page does not make its bytes data again: the page
    // keeps the checksum of its good content and stays refused...
    data.write(PmemOffset(9 * PAGE + 16), b"new bits");
    integrity.refresh_now();
    assert_eq!(integrity.unrepairable_offsets(), vec![8 * PAGE, 9 * PAGE]);
    assert_eq!(integrity.scrub_now().unrepairable, vec![8, 9]);
    assert_eq!(
        integrity.stats().corruptions_found,
        2,
        "counted per page, not per sighting"
    );
    // ...until its owner reuses it: then its next refresh describes it.
    integrity.forget_unrepairable(9 * PAGE, PAGE);
    data.write(PmemOffset(9 * PAGE), &vec![7u8; PAGE as usize]);
    integrity.refresh_now();
    assert_eq!(integrity.unrepairable_offsets(), vec![8 * PAGE]);
    integrity.close().unwrap();
}

#[test]
fn damaged_parity_and_checksum_pages_are_rebuilt_without_touching_data() {
    let dir = tempfile::tempdir().unwrap();
    let original = protected_store(dir.path(), 4);
    let geometry = engram_integrity::layout::Geometry::new(4);
    corrupt_file(
        dir.path(),
        FILE_NAME,
        geometry.parity_offset(12).0 + 77,
        0x04,
    );
    let data = open_data(dir.path(), None);
    let (integrity, _) = open_integrity(dir.path(), &data, quiet_options(), None);
    let outcome = integrity.scrub_now();
    assert_eq!(outcome.parity_rewritten, 1);
    assert!(outcome.corrupt.is_empty());
    integrity.close().unwrap();
    drop((integrity, data));
    corrupt_file(dir.path(), FILE_NAME, geometry.checksum_offset(3).0, 0x10);
    let data = open_data(dir.path(), None);
    let (integrity, _) = open_integrity(dir.path(), &data, quiet_options(), None);
    let outcome = integrity.scrub_now();
    assert_eq!(outcome.metadata_rebuilt, 1);
    assert!(outcome.corrupt.is_empty());
    let outcome = integrity.scrub_now();
    assert_eq!(
        outcome,
        engram_integrity::ScrubOutcome {
            pages_checked: PAGES,
            ..Default::default()
        }
    );
    integrity.close().unwrap();
    drop(data);
    assert_eq!(read_file(dir.path(), "data"), original);
}

#[test]
fn pages_written_before_a_crash_are_stale_not_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    protected_store(dir.path(), 6);
    let data = open_data(dir.path(), None);
    let (integrity, _) = open_integrity(dir.path(), &data, quiet_options(), None);
    for page in [1u64, 17, 40] {
        data.write(PmemOffset(page * PAGE + 8), b"changed!");
    }
    integrity.abandon();
    drop((integrity, data));
    let data = open_data(dir.path(), None);
    let (integrity, report) = open_integrity(dir.path(), &data, quiet_options(), None);
    assert!(report.unclean);
    assert!(!report.marks_distrusted, "same boot: the marks are trusted");
    assert_eq!(report.stale_pages, 3);
    let outcome = integrity.scrub_without_refresh();
    assert!(outcome.corrupt.is_empty());
    assert_eq!(
        outcome.pages_stale,
        3 * STRIPE,
        "stripes of stale pages are skipped"
    );
    let outcome = integrity.scrub_now();
    assert!(outcome.corrupt.is_empty());
    assert_eq!(outcome.pages_checked, PAGES);
    integrity.close().unwrap();
}

/// A staged data region (stores copied into its file only at a sync)
/// loses what it never synced to a process crash: pages whose checksums
/// were refreshed from its newer bytes then hold older ones. So after an
/// unclean close of a staged session the marks are distrusted even in the
/// same boot, whether the next open is staged or not, and the pages that
/// lost their stores are stale, not corrupt.
#[test]
fn an_unclean_staged_session_distrusts_the_marks_in_the_same_boot() {
    for reopen_staged in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        protected_store(dir.path(), 8);
        let staged = |staged| {
            Arc::new(
                Region::open(
                    &dir.path().join("data"),
                    RegionOptions {
                        staged,
                        ..region_options(None)
                    },
                )
                .unwrap(),
            )
        };
        let data = staged(true);
        let (integrity, _) = open_integrity(dir.path(), &data, quiet_options(), None);
        for page in [2u64, 30] {
            data.write(PmemOffset(page * PAGE + 8), b"unsynced");
        }
        // Checksums and parity of the new bytes, which never reach the file.
        let outcome = integrity.scrub_now();
        assert!(outcome.corrupt.is_empty());
        integrity.abandon();
        drop((integrity, data));
        let data = staged(reopen_staged);
        let (integrity, report) = open_integrity(dir.path(), &data, quiet_options(), None);
        assert!(report.unclean);
        assert!(report.marks_distrusted, "reopened staged: {reopen_staged}");
        assert_eq!(report.stale_pages, PAGES);
        let outcome = integrity.scrub_now();
        assert!(outcome.corrupt.is_empty(), "{outcome:?}");
        integrity.close().unwrap();
    }
}

#[test]
fn an_unclean_session_from_another_boot_distrusts_the_marks_on_emulated_memory() {
    let dir = tempfile::tempdir().unwrap();
    protected_store(dir.path(), 7);
    // As a power failure would leave it: the session of an earlier boot
    // still open, and a data page changed without its mark reaching disk.
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(FILE_NAME))
        .and_then(|file| {
            use std::os::unix::fs::FileExt;
            file.write_all_at(&0x1234_5679u64.to_le_bytes(), 64)
        })
        .unwrap();
    corrupt_file(dir.path(), "data", 5 * PAGE, 0xff);
    let data = open_data(dir.path(), None);
    let (integrity, report) = open_integrity(dir.path(), &data, quiet_options(), None);
    assert!(report.unclean);
    assert!(report.marks_distrusted);
    assert_eq!(report.stale_pages, PAGES);
    let outcome = integrity.scrub_now();
    assert!(
        outcome.corrupt.is_empty(),
        "a written-back page is not corruption"
    );
    integrity.close().unwrap();
}

#[test]
fn inline_mode_leaves_nothing_stale() {
    let dir = tempfile::tempdir().unwrap();
    protected_store(dir.path(), 8);
    let data = open_data(dir.path(), None);
    let options = IntegrityOptions {
        mode: IntegrityMode::Inline,
        ..quiet_options()
    };
    let (integrity, _) = open_integrity(dir.path(), &data, options, None);
    let mut rng = StdRng::seed_from_u64(8);
    for _ in 0..300 {
        let len = rng.random_range(1..=600u64) * 8;
        let at = rng.random_range(0..(PAGES * PAGE - len) / 8) * 8;
        data.write(PmemOffset(at), &vec![rng.random::<u8>(); len as usize]);
        assert_eq!(integrity.stats().pages_stale, 0);
    }
    let outcome = integrity.scrub_without_refresh();
    assert_eq!(outcome.pages_checked, PAGES);
    assert!(outcome.corrupt.is_empty());
    integrity.close().unwrap();
}

#[test]
fn growth_is_covered_and_new_pages_are_protected() {
    let dir = tempfile::tempdir().unwrap();
    protected_store(dir.path(), 9);
    let data = open_data(dir.path(), None);
    let (integrity, _) = open_integrity(dir.path(), &data, quiet_options(), None);
    let grown = 3000 * PAGE; // beyond the first group of 1024 pages
    data.grow_to(grown).unwrap();
    data.write(PmemOffset(2500 * PAGE), b"far out!");
    integrity.refresh_now();
    corrupt_file(dir.path(), "data", 2500 * PAGE + 3, 0x20);
    let outcome = integrity.scrub_now();
    assert_eq!(outcome.repaired, vec![2500]);
    assert_eq!(outcome.pages_checked, 3000);
    assert_eq!(data.read(PmemOffset(2500 * PAGE), 8), b"far out!");
    integrity.close().unwrap();
}

#[test]
fn the_background_pass_covers_writes_and_the_scrubber_finds_corruption_alone() {
    let dir = tempfile::tempdir().unwrap();
    protected_store(dir.path(), 10);
    let data = open_data(dir.path(), None);
    let options = IntegrityOptions {
        period: Duration::from_millis(50),
        scrub_bytes_per_sec: 64 << 20,
        scrub_period: Duration::ZERO,
        ..quiet_options()
    };
    let (integrity, _) = open_integrity(dir.path(), &data, options, None);
    data.write(PmemOffset(33 * PAGE), b"to cover");
    // Not asserted stale here: a pass every 50 ms may already have covered
    // the write if this thread was preempted (a race on a loaded machine).
    // The rebuild below shows both the mark and the pass: had the write
    // not been marked, no pass would have covered it, and parity would
    // rebuild the page without it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while integrity.is_stale(33 * PAGE) {
        assert!(Instant::now() < deadline, "the background pass never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Damage to the page just covered: the scrubber rebuilds it with the
    // write (parity and checksum the pass made describe it), not without.
    corrupt_file(dir.path(), "data", 33 * PAGE + 3, 0x02);
    while integrity.stats().repaired == 0 {
        assert!(
            Instant::now() < deadline,
            "the background scrubber never found it"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(data.read(PmemOffset(33 * PAGE), 8), b"to cover");
    assert_eq!(integrity.stats().corruptions_found, 1);
    assert!(integrity.stats().scrub_sweeps >= 1 || integrity.stats().pages_scrubbed > 0);
    integrity.close().unwrap();
}

#[test]
fn a_background_sweep_takes_its_period_however_fast_the_rate_allows() {
    let dir = tempfile::tempdir().unwrap();
    protected_store(dir.path(), 11);
    let data = open_data(dir.path(), None);
    // 64 MiB/s would sweep these few MiB several times a second; the
    // period asks for one sweep every 2 s.
    let options = IntegrityOptions {
        scrub_bytes_per_sec: 64 << 20,
        scrub_period: Duration::from_secs(2),
        ..quiet_options()
    };
    let (integrity, _) = open_integrity(dir.path(), &data, options, None);
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let early = integrity.stats();
    let elapsed = started.elapsed().as_secs_f64();
    // A slow host only scrubs less; pacing is what bounds it from above
    // (a second's credit at most, plus a step's rounding).
    let paced = (PAGES as f64 * (elapsed + 1.0) / 2.0) as u64 + 64;
    assert!(
        early.pages_scrubbed <= paced,
        "{} pages scrubbed in {elapsed:.2} s (at most {paced} for a 2 s sweep of {PAGES})",
        early.pages_scrubbed
    );
    // And the sweep ends: a corrupt page is found without being asked.
    corrupt_file(dir.path(), "data", 7 * PAGE + 1, 0x10);
    let deadline = Instant::now() + Duration::from_secs(30);
    while integrity.stats().repaired == 0 {
        assert!(Instant::now() < deadline, "{:?}", integrity.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    integrity.close().unwrap();
}

#[test]
fn bad_integrity_files_get_errors_that_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    protected_store(dir.path(), 12);
    let data = open_data(dir.path(), None);
    let open = |id: u64| {
        engram_integrity::Integrity::open(dir.path(), data.clone(), id, quiet_options(), None)
            .map(|_| ())
    };
    let error = open(DATA_ID + 1).unwrap_err();
    assert!(matches!(error, Error::ForeignFile { .. }), "{error}");
    assert!(error.to_string().contains("delete it"), "{error}");
    let pristine = read_file(dir.path(), FILE_NAME);
    corrupt_file(dir.path(), FILE_NAME, 17, 0x01);
    assert!(matches!(
        open(DATA_ID).unwrap_err(),
        Error::CorruptHeader { .. }
    ));
    corrupt_file(dir.path(), FILE_NAME, 17, 0x01);
    corrupt_file(dir.path(), FILE_NAME, 0, 0x01);
    assert!(matches!(
        open(DATA_ID).unwrap_err(),
        Error::NotAnIntegrityFile { .. }
    ));
    std::fs::write(dir.path().join(FILE_NAME), &pristine[..100]).unwrap();
    assert!(matches!(
        open(DATA_ID).unwrap_err(),
        Error::CorruptHeader { .. }
    ));
    let bad_stripe = IntegrityOptions {
        stripe_pages: 1,
        ..quiet_options()
    };
    assert!(matches!(
        bad_stripe.validate(),
        Err(Error::InvalidOption(_))
    ));
    let bad_period = IntegrityOptions {
        period: Duration::ZERO,
        ..quiet_options()
    };
    assert!(matches!(
        bad_period.validate(),
        Err(Error::InvalidOption(_))
    ));
    let bad_sweep = IntegrityOptions {
        scrub_period: engram_integrity::MAX_SCRUB_PERIOD + Duration::from_secs(1),
        ..quiet_options()
    };
    match bad_sweep.validate() {
        Err(Error::InvalidOption(text)) => assert!(text.contains("scrub_period"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn expected_writes_are_marked_in_bulk_and_stay_stale_across_a_crash() {
    // Stripes of 3 make groups of 1023 pages, whose mark words do not line
    // up with the DRAM bitmap's: the bulk path must place both right.
    for stripe_pages in [3u32, 4] {
        let dir = tempfile::tempdir().unwrap();
        drop(create_data(dir.path(), 3000, 13));
        let options = IntegrityOptions {
            stripe_pages,
            ..quiet_options()
        };
        let data = open_data(dir.path(), None);
        let (integrity, _) = open_integrity(dir.path(), &data, options.clone(), None);
        integrity.refresh_now();
        assert_eq!(integrity.stats().pages_stale, 0);
        // Pages 1000 to 1100: across the first group's end either way.
        integrity.expect_writes(1000 * PAGE + 100, 100 * PAGE);
        let stale: Vec<u64> = (0..3000)
            .filter(|&page| integrity.is_stale(page * PAGE))
            .collect();
        assert_eq!(stale, (1000..=1100).collect::<Vec<u64>>());
        assert_eq!(integrity.stats().pages_stale, 101);
        // Marked again: nothing changes, nothing is counted twice.
        integrity.expect_writes(1050 * PAGE, 3 * PAGE);
        assert_eq!(integrity.stats().pages_stale, 101);
        // The writes come; then the process dies before any pass.
        data.write(PmemOffset(1023 * PAGE + 7), b"across a group edge");
        data.write(PmemOffset(1100 * PAGE), b"last");
        integrity.abandon();
        drop((integrity, data));
        let data = open_data(dir.path(), None);
        let (integrity, report) = open_integrity(dir.path(), &data, options, None);
        assert!(report.unclean);
        assert_eq!(report.stale_pages, 101, "stripe {stripe_pages}");
        let outcome = integrity.scrub_without_refresh();
        assert!(outcome.corrupt.is_empty(), "{:?}", outcome.corrupt);
        assert_eq!(integrity.refresh_now(), 101);
        let outcome = integrity.scrub_now();
        assert!(outcome.corrupt.is_empty());
        assert_eq!(outcome.pages_checked, 3000);
        integrity.close().unwrap();
    }
}
