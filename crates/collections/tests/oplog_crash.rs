//! The operation log's commit rule, explored on the persistent-memory model
//! of `engram_pmem::crashsim` (see crates/engine/tests/crash_explorer.rs for
//! the pattern).
//!
//! A seeded single-threaded workload appends records of random sizes (small
//! segments, so records cross into fresh and reused segments, and now and
//! then one too large for a segment takes a run of them), and now and
//! then cuts the log and releases the archive as a checkpoint would, moving
//! the checkpointed-through mark. At crash points (every fence, and the end
//! of every append) images a power failure could leave are recovered, and
//! the records read back must be exactly the acknowledged records above the
//! mark, plus possibly the one in flight, whole. Nothing torn, nothing from
//! a segment's previous life, nothing twice.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use engram_collections::oplog::{OpLog, OpLogOptions, Position};
use engram_collections::OwnSequencer;
use engram_pmem::{CrashPoint, CrashSim, ModeChoice, PersistObserver, RegionOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEGMENT_BYTES: u64 = 64 << 10;
const SEEDS: u64 = 6;
const APPENDS_PER_SEED: usize = 150;
const EXHAUSTIVE_LIMIT: u128 = 32;
const SAMPLES_PER_POINT: usize = 4;

fn options(observer: Option<Arc<CrashSim>>, lanes: usize) -> OpLogOptions {
    OpLogOptions {
        segment_bytes: SEGMENT_BYTES,
        lanes,
        // No reserve thread runs beside a bare log: each growth happens on
        // the write path, in the order the simulator replays.
        reserve_segments: 0,
        region: RegionOptions {
            mode: ModeChoice::Emulated,
            populate: false,
            reserve_bytes: 64 << 20,
            observer: observer.map(|sim| sim as Arc<dyn PersistObserver>),
            ..RegionOptions::default()
        },
    }
}

/// What an image may recover to: the acknowledged payloads above the mark,
/// optionally followed by the one in flight.
#[derive(Clone, Default)]
struct Expect {
    mark: u64,
    acknowledged: Vec<(u64, Vec<u8>)>,
    in_flight: Option<Vec<u8>>,
}

struct Shared {
    expect: Expect,
    rng: StdRng,
    scratch: PathBuf,
    images: u64,
    violations: Vec<String>,
    seed: u64,
}

fn check(scratch: &Path, image: &[u8], expect: &Expect) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).unwrap();
    std::fs::write(scratch.join("oplog.pmem"), image).unwrap();
    let recovered = OpLog::open(scratch, options(None, 1), expect.mark)
        .map_err(|e| format!("recovery failed: {e}"))?;
    let found: Vec<&[u8]> = recovered
        .records
        .iter()
        .map(|r| r.payload.as_slice())
        .collect();
    let acknowledged: Vec<&[u8]> = expect
        .acknowledged
        .iter()
        .filter(|(seq, _)| *seq > expect.mark)
        .map(|(_, p)| p.as_slice())
        .collect();
    let seqs_rise = recovered.records.windows(2).all(|w| w[0].seq < w[1].seq);
    if !seqs_rise {
        return Err("records out of sequence order".into());
    }
    if found == acknowledged {
        return Ok(());
    }
    if let Some(flight) = &expect.in_flight {
        if found.len() == acknowledged.len() + 1
            && found[..acknowledged.len()] == acknowledged[..]
            && found[acknowledged.len()] == flight.as_slice()
        {
            return Ok(());
        }
    }
    Err(format!(
        "recovered {} records, expected the {} acknowledged above mark {} (in flight: {})",
        found.len(),
        acknowledged.len(),
        expect.mark,
        expect.in_flight.is_some()
    ))
}

fn explore(shared: &mut Shared, point: &CrashPoint<'_>) {
    if !shared.violations.is_empty() {
        return;
    }
    let choices = point.choices();
    let prefixes: Vec<Vec<usize>> = if point.image_count() <= EXHAUSTIVE_LIMIT {
        point.all_prefixes()
    } else {
        let mut list = vec![
            vec![0; choices.len()],
            choices.iter().map(|n| n - 1).collect(),
        ];
        for _ in 0..SAMPLES_PER_POINT {
            list.push(
                choices
                    .iter()
                    .map(|n| shared.rng.random_range(0..*n))
                    .collect(),
            );
        }
        list
    };
    for prefix in prefixes {
        shared.images += 1;
        if let Err(problem) = check(&shared.scratch, &point.image(&prefix), &shared.expect) {
            shared.violations.push(format!(
                "seed {}: {problem}\n{}",
                shared.seed,
                point.describe(&prefix)
            ));
            return;
        }
    }
}

fn run_seed(seed: u64, base: &Path) -> (u64, Vec<String>) {
    let dir = base.join(format!("seed-{seed}"));
    std::fs::create_dir_all(&dir).unwrap();
    // Create the file unobserved, then watch it from its persisted bytes.
    drop(OpLog::open(&dir, options(None, 1), 0).unwrap());
    let sim = Arc::new(CrashSim::new(
        std::fs::read(dir.join("oplog.pmem")).unwrap(),
    ));
    let log = OpLog::open(&dir, options(Some(Arc::clone(&sim)), 1), 0)
        .unwrap()
        .log;
    let counter = OwnSequencer::starting_at(1);
    let shared = Arc::new(Mutex::new(Shared {
        expect: Expect::default(),
        rng: StdRng::seed_from_u64(seed ^ 0x5eed),
        scratch: base.join(format!("scratch-{seed}")),
        images: 0,
        violations: Vec::new(),
        seed,
    }));
    {
        let shared = Arc::clone(&shared);
        sim.set_hook(move |point| explore(&mut shared.lock().unwrap(), point));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut archived: Vec<u32> = Vec::new();
    for i in 0..APPENDS_PER_SEED {
        // A checkpoint: cut, then (the images being durable) move the mark
        // and release what the previous cut archived.
        if rng.random_ratio(1, 20) {
            let cut = log.cut(&counter);
            log.release(std::mem::take(&mut archived));
            archived = cut.segments;
            shared.lock().unwrap().expect.mark = cut.through_seq;
        }
        let len = if rng.random_ratio(1, 30) {
            rng.random_range(70_000..200_000)
        } else if rng.random_ratio(1, 10) {
            rng.random_range(4000..9000)
        } else {
            rng.random_range(0..300)
        };
        let payload: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8 ^ seed as u8).collect();
        shared.lock().unwrap().expect.in_flight = Some(payload.clone());
        let seq = log.append(&counter, Position::default(), &payload).unwrap();
        {
            let mut shared = shared.lock().unwrap();
            shared.expect.in_flight = None;
            shared.expect.acknowledged.push((seq, payload));
        }
        sim.crash_now();
        if !shared.lock().unwrap().violations.is_empty() {
            break;
        }
    }
    sim.clear_hook();
    let shared = shared.lock().unwrap();
    (shared.images, shared.violations.clone())
}

#[test]
fn no_crash_image_replays_a_torn_stale_or_unacknowledged_record() {
    let base = tempfile::tempdir().unwrap();
    let mut images = 0;
    for seed in 0..SEEDS {
        let (explored, violations) = run_seed(seed, base.path());
        images += explored;
        assert!(violations.is_empty(), "{}", violations.join("\n\n"));
    }
    assert!(images > 1000, "explored only {images} images");
    eprintln!("explored {images} crash images");
}

#[test]
fn concurrent_appenders_recover_in_sequence_order_and_cut_splits_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(OpLog::open(dir.path(), options(None, 4), 0).unwrap().log);
    let counter = Arc::new(OwnSequencer::starting_at(1));
    let mut cut_at = 0;
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let (log, counter) = (Arc::clone(&log), Arc::clone(&counter));
            scope.spawn(move || {
                for i in 0..2000u32 {
                    let mut payload = vec![t];
                    payload.extend_from_slice(&i.to_le_bytes());
                    log.append(&*counter, Position::default(), &payload)
                        .unwrap();
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        let cut = log.cut(&*counter);
        cut_at = cut.through_seq;
        // Everything in the archive is at or below the cut.
        let archived = log.read(&cut.segments);
        assert!(archived.iter().all(|r| r.seq <= cut.through_seq));
        assert_eq!(
            archived.len() as u64,
            cut.through_seq,
            "every record up to the cut is archived"
        );
    });
    drop(Arc::try_unwrap(log).ok().unwrap());
    let recovered = OpLog::open(dir.path(), options(None, 4), 0).unwrap();
    assert_eq!(recovered.records.len(), 8000);
    // Per appender, records come back in the order they were appended.
    for t in 0..4u8 {
        let mine: Vec<u32> = recovered
            .records
            .iter()
            .filter(|r| r.payload[0] == t)
            .map(|r| u32::from_le_bytes(r.payload[1..5].try_into().unwrap()))
            .collect();
        assert_eq!(mine, (0..2000).collect::<Vec<_>>());
    }
    let above = OpLog::open(dir.path(), options(None, 4), cut_at).unwrap();
    assert_eq!(above.records.len() as u64, 8000 - cut_at);
}

#[test]
fn truncation_voids_the_uncommitted_suffix_only() {
    let dir = tempfile::tempdir().unwrap();
    let counter = OwnSequencer::starting_at(1);
    {
        let log = OpLog::open(dir.path(), options(None, 1), 0).unwrap().log;
        for index in 1..=5 {
            log.append(
                &counter,
                Position { term: 1, index },
                format!("t1-{index}").as_bytes(),
            )
            .unwrap();
        }
        // A new leader in term 2 keeps entries up to 3 and overwrites 4..
        log.truncate_after(&counter, 2, 3).unwrap();
        for index in 4..=6 {
            log.append(
                &counter,
                Position { term: 2, index },
                format!("t2-{index}").as_bytes(),
            )
            .unwrap();
        }
        // A checkpoint reads the same records out of the archive as
        // recovery does below, and locates them in place alike.
        let cut = log.cut(&counter);
        let read = log.read(&cut.segments);
        let found: Vec<(String, Position)> = read
            .iter()
            .map(|r| (String::from_utf8(r.payload.clone()).unwrap(), r.position))
            .collect();
        let expected: Vec<(String, Position)> = [(1, 1), (1, 2), (1, 3), (2, 4), (2, 5), (2, 6)]
            .into_iter()
            .map(|(term, index)| (format!("t{term}-{index}"), Position { term, index }))
            .collect();
        assert_eq!(found, expected);
        let mut located = Vec::new();
        log.locate(&cut.segments, &mut located);
        assert_eq!(located.len(), read.len());
        for (place, record) in located.iter().zip(&read) {
            assert_eq!(place.seq, record.seq);
            assert_eq!(log.payload(place), &record.payload[..]);
            assert_eq!(log.position(place), record.position);
        }
    }
    let recovered = OpLog::open(dir.path(), options(None, 1), 0).unwrap();
    let found: Vec<String> = recovered
        .records
        .iter()
        .map(|r| String::from_utf8(r.payload.clone()).unwrap())
        .collect();
    assert_eq!(found, ["t1-1", "t1-2", "t1-3", "t2-4", "t2-5", "t2-6"]);
    assert!(recovered.records.iter().all(|r| r.position.index != 0));
}

#[test]
fn bad_files_and_options_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = options(None, 1);
    bad.segment_bytes = 1000;
    let error = OpLog::open(dir.path(), bad, 0).err().unwrap().to_string();
    assert!(error.contains("power of two"), "{error}");

    std::fs::write(dir.path().join("oplog.pmem"), vec![7u8; 8192]).unwrap();
    let error = OpLog::open(dir.path(), options(None, 1), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("bad magic"), "{error}");

    let dir = tempfile::tempdir().unwrap();
    let log = OpLog::open(dir.path(), options(None, 1), 0).unwrap().log;
    let counter = OwnSequencer::starting_at(1);
    // Beyond what a record's length field holds (the pages of this
    // allocation are never touched: the size is refused first).
    let too_big = vec![0u8; log.max_payload() + 1];
    let error = log
        .append(&counter, Position::default(), &too_big)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("larger than the operation log's limit"),
        "{error}"
    );
    drop(too_big);
    let first = vec![3u8; log.segment_payload() + 1];
    log.append(&counter, Position::default(), &first).unwrap();

    // A full disk: the append fails cleanly and what was logged survives.
    log.set_file_limit(Some(log.stats().file_bytes));
    let mut failed = false;
    for _ in 0..100 {
        if log
            .append(&counter, Position::default(), &[1u8; 5000])
            .is_err()
        {
            failed = true;
            break;
        }
    }
    assert!(failed, "the quota was never hit");
    drop(log);
    let recovered = OpLog::open(dir.path(), options(None, 1), 0).unwrap();
    assert!(!recovered.records.is_empty());
    assert_eq!(recovered.records[0].payload, first);
}

/// On a nearly full disk the reserve thread's growth fails; a lane that
/// needs a segment still grows the file by the one that fits, and only
/// when none fits does an append fail, cleanly.
#[test]
fn a_full_disk_stops_the_reserve_before_the_writers() {
    let dir = tempfile::tempdir().unwrap();
    let options = OpLogOptions {
        reserve_segments: 3,
        ..options(None, 1)
    };
    let log = Arc::new(OpLog::open(dir.path(), options.clone(), 0).unwrap().log);
    let counter = OwnSequencer::starting_at(1);
    log.append(&counter, Position::default(), b"first").unwrap();
    // Room for one more segment, not for the reserve of three.
    log.set_file_limit(Some(log.stats().file_bytes + SEGMENT_BYTES));
    let provisioner = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || log.run_provisioner())
    };
    let record = [7u8; 4000];
    let mut appended = 1;
    let error = loop {
        match log.append(&counter, Position::default(), &record) {
            Ok(_) => appended += 1,
            Err(error) => break error.to_string(),
        }
        assert!(appended < 1000, "the quota was never hit");
    };
    let stats = log.stats();
    assert_eq!(
        stats.segments_total, 2,
        "the second segment came from the write path: {stats:?}"
    );
    assert!(
        appended as u64 * 4000 > SEGMENT_BYTES,
        "records went into the segment that fit ({appended} appended)"
    );
    assert!(
        error.contains("space") || error.contains("quota"),
        "{error}"
    );
    log.stop_provisioner();
    provisioner.join().unwrap();
    drop(log);
    let recovered = OpLog::open(dir.path(), options, 0).unwrap();
    assert_eq!(recovered.records.len(), appended);
}

/// A payload that needs a run of `segments` segments, with a header word
/// and a committed record (sequence number huge) planted where each
/// interior segment starts: what a run's interior would replay if it were
/// ever read as segments of its own.
fn jumbo_with_planted_records(segments: u64) -> Vec<u8> {
    use engram_collections::oplog::format;
    let len = ((segments - 1) * SEGMENT_BYTES) as usize;
    let mut payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
    // The record's payload starts after the run's header and its own.
    let payload_start = format::SEGMENT_HEADER_BYTES + format::RECORD_HEADER_BYTES;
    for interior in 1.. {
        let at = (interior * SEGMENT_BYTES - payload_start) as usize;
        let fake = b"planted";
        let header = format::RecordHeader {
            seq: u64::MAX / 2,
            term: 0,
            index: 0,
            kind: format::KIND_OPERATION,
        };
        let record_at = at + format::SEGMENT_HEADER_BYTES as usize;
        if record_at + 48 + fake.len() > payload.len() {
            break;
        }
        payload[at..at + 8].copy_from_slice(&format::segment_header_word(9).to_le_bytes());
        payload[record_at..record_at + 8].copy_from_slice(&header.seq.to_le_bytes());
        payload[record_at + 8..record_at + 48].copy_from_slice(&format::encode_header_with_crc(
            &header,
            format::Generation::new(9),
            fake,
        ));
        payload[record_at + 48..record_at + 48 + fake.len()].copy_from_slice(fake);
    }
    payload
}

/// Asserts that `recovered` holds exactly `expected`, in order, saying
/// only lengths and first bytes when it does not (payloads are large).
fn assert_payloads(
    recovered: &engram_collections::oplog::Recovered,
    expected: &[Vec<u8>],
    what: &str,
) {
    let summary = |payloads: &mut dyn Iterator<Item = &Vec<u8>>| -> Vec<(usize, Option<u8>)> {
        payloads.map(|p| (p.len(), p.first().copied())).collect()
    };
    let found: Vec<&Vec<u8>> = recovered.records.iter().map(|r| &r.payload).collect();
    assert!(
        found.iter().copied().eq(expected.iter()),
        "{what}: found (len, first byte) {:?}, expected {:?}",
        summary(&mut found.iter().copied()),
        summary(&mut expected.iter())
    );
}

/// A record larger than a segment takes a run of consecutive segments:
/// it is read back whole, archived by a cut like any segment, its release
/// frees the whole run for reuse (by another run without growing the
/// file), and its interior never reads as segments of its own, neither
/// while the run lives nor after its head is reused.
#[test]
fn records_larger_than_a_segment_take_a_run_of_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = OpLog::open(dir.path(), options(None, 1), 0).unwrap().log;
    let counter = OwnSequencer::starting_at(1);
    let small = b"small".to_vec();
    let jumbo = jumbo_with_planted_records(4);
    log.append(&counter, Position::default(), &small).unwrap();
    let jumbo_seq = log.append(&counter, Position::default(), &jumbo).unwrap();
    let after = b"after".to_vec();
    log.append(&counter, Position::default(), &after).unwrap();
    let stats = log.stats();
    assert_eq!(
        stats.segments_total,
        1 + 4,
        "one segment, then a run of 4: {stats:?}"
    );
    drop(log);

    // Recovery reads the run as one record and skips its interior.
    let recovered = OpLog::open(dir.path(), options(None, 1), 0).unwrap();
    assert_payloads(
        &recovered,
        &[small.clone(), jumbo.clone(), after.clone()],
        "reopened",
    );
    let log = recovered.log;

    // A cut archives the run; reading the archive finds the record whole.
    let cut = log.cut(&counter);
    let archived = log.read(&cut.segments);
    let archived_payloads: Vec<&Vec<u8>> = archived.iter().map(|r| &r.payload).collect();
    assert!(
        archived_payloads == [&small, &jumbo, &after],
        "the archive holds the three records"
    );
    assert_eq!(archived[1].seq, jumbo_seq);
    assert_eq!(
        log.release(cut.segments),
        5,
        "the run's four segments and the other one"
    );
    assert_eq!(log.stats().segments_free, 5);

    // Small records reuse freed segments; the old run's head is gone, so
    // nothing hides the planted headers but their clearing.
    let fillers: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 20_000]).collect();
    for filler in &fillers {
        log.append(&counter, Position::default(), filler).unwrap();
    }
    drop(log);
    let recovered = OpLog::open(dir.path(), options(None, 1), cut.through_seq).unwrap();
    assert_payloads(
        &recovered,
        &fillers,
        "nothing planted in the old run's interior is replayed",
    );

    // A new run fits in the three segments left free, side by side: the
    // file does not grow.
    let log = recovered.log;
    let second = vec![5u8; 2 * SEGMENT_BYTES as usize];
    log.append(&counter, Position::default(), &second).unwrap();
    assert_eq!(log.stats().segments_total, 5);
    drop(log);
    let recovered = OpLog::open(dir.path(), options(None, 1), cut.through_seq).unwrap();
    let mut expected = fillers;
    expected.push(second);
    assert_payloads(&recovered, &expected, "the second run after the fillers");
}

/// A checkpoint covered a run but the process stopped before releasing
/// it: recovery frees the run and clears its interior, so reusing its
/// head later replays nothing planted in it.
#[test]
fn a_covered_run_left_unreleased_is_freed_and_cleared_at_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let log = OpLog::open(dir.path(), options(None, 1), 0).unwrap().log;
    let counter = OwnSequencer::starting_at(1);
    let jumbo = jumbo_with_planted_records(3);
    let seq = log.append(&counter, Position::default(), &jumbo).unwrap();
    drop(log);
    let recovered = OpLog::open(dir.path(), options(None, 1), seq).unwrap();
    assert!(recovered.records.is_empty());
    assert_eq!(recovered.log.stats().segments_free, 3);
    let log = recovered.log;
    // Three fit in the old head: the interior after it stays as left.
    let fillers: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 20_000]).collect();
    for filler in &fillers {
        log.append(&counter, Position::default(), filler).unwrap();
    }
    drop(log);
    let recovered = OpLog::open(dir.path(), options(None, 1), seq).unwrap();
    assert_payloads(&recovered, &fillers, "nothing planted is replayed");
}

/// A run that needs more than the disk has fails cleanly, and what was
/// logged before survives.
#[test]
fn a_run_on_a_full_disk_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let log = OpLog::open(dir.path(), options(None, 1), 0).unwrap().log;
    let counter = OwnSequencer::starting_at(1);
    log.append(&counter, Position::default(), b"kept").unwrap();
    log.set_file_limit(Some(log.stats().file_bytes + 2 * SEGMENT_BYTES));
    let error = log
        .append(
            &counter,
            Position::default(),
            &vec![1u8; 3 * SEGMENT_BYTES as usize],
        )
        .unwrap_err();
    assert!(
        matches!(error, engram_collections::Error::NoSpace(_)),
        "{error}"
    );
    // What fits still goes in.
    let fits = vec![2u8; SEGMENT_BYTES as usize];
    log.append(&counter, Position::default(), &fits).unwrap();
    drop(log);
    let recovered = OpLog::open(dir.path(), options(None, 1), 0).unwrap();
    assert_payloads(
        &recovered,
        &[b"kept".to_vec(), fits],
        "after the failed run",
    );
}

/// A version 1 file (no runs) opens and is marked version 2; a run whose
/// length runs past the file's end is a clear error.
#[test]
fn version_one_files_are_upgraded_and_impossible_runs_refused() {
    use engram_collections::oplog::format;
    let dir = tempfile::tempdir().unwrap();
    let log = OpLog::open(dir.path(), options(None, 1), 0).unwrap().log;
    let counter = OwnSequencer::starting_at(1);
    log.append(&counter, Position::default(), b"old").unwrap();
    drop(log);
    let path = dir.path().join("oplog.pmem");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[0..16]);
    bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(
        format::parse_superblock(&bytes[..20]),
        Ok((SEGMENT_BYTES, 1))
    );

    let recovered = OpLog::open(dir.path(), options(None, 1), 0).unwrap();
    assert_payloads(&recovered, &[b"old".to_vec()], "a version 1 file");
    drop(recovered);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(
        format::parse_superblock(&bytes[..20]),
        Ok((SEGMENT_BYTES, format::VERSION))
    );

    // Segment 0 made the head of a run of 1000 segments in a file of one.
    let mut bytes = bytes;
    let start = format::SUPERBLOCK_BYTES as usize;
    bytes[start..start + 8].copy_from_slice(&format::run_header_word(1).to_le_bytes());
    bytes[start + 8..start + 16].copy_from_slice(&1000u64.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let error = OpLog::open(dir.path(), options(None, 1), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("heads a run of 1000 segments"), "{error}");
}

/// A sync with no record appended since the last one costs nothing (under
/// `always` a round of string writes would otherwise flush an untouched
/// log); one with a record appended syncs.
#[test]
fn a_sync_with_nothing_appended_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let log = OpLog::open(dir.path(), options(None, 1), 0).unwrap().log;
    let counter = OwnSequencer::starting_at(1);
    log.sync().unwrap();
    assert_eq!(log.stats().syncs, 0, "nothing appended yet");
    log.append(&counter, Position::default(), b"one").unwrap();
    log.sync().unwrap();
    assert_eq!(log.stats().syncs, 1);
    log.sync().unwrap();
    assert_eq!(log.stats().syncs, 1, "nothing appended since");
    log.append(&counter, Position::default(), b"two").unwrap();
    log.sync().unwrap();
    assert_eq!(log.stats().syncs, 2);
    log.sync_all().unwrap();
    assert_eq!(log.stats().syncs, 3, "sync_all always syncs");
}
