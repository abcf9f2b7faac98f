//! Crash points inside the redundancy pass never produce a false
//! corruption report (the two orderings of the paper's Figure 4).
//!
//! One crash simulator observes both files, the data region at offsets
//! [0, D) and the integrity file after it, because one `sfence` orders the
//! flushes of both. A seeded workload stores to the data region (persisted
//! or not) and runs refresh passes; at every fence, images a power failure
//! could leave are built, reopened, refreshed and scrubbed: a scrub must
//! find nothing corrupt. Then the checks are checked: with the shadow copy
//! removed (Figure 4(b)) the explorer must find a false report, and with the
//! marks cleared after the refresh and no gate (Figure 4(a)) a concurrent
//! writer must produce one.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use engram_integrity::{IntegrityFaults, IntegrityOptions, FILE_NAME};
use engram_pmem::{CrashPoint, CrashSim, PersistObserver, PmemOffset};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DATA_PAGES: u64 = 32;

/// Forwards a region's events to a shared simulator at an offset.
struct Biased {
    sim: Arc<CrashSim>,
    bias: u64,
}

impl PersistObserver for Biased {
    fn on_store(&self, offset: u64, bytes: &[u8]) {
        self.sim.on_store(self.bias + offset, bytes);
    }
    fn on_flush(&self, offset: u64, len: u64) {
        self.sim.on_flush(self.bias + offset, len);
    }
    fn on_fence(&self) {
        self.sim.on_fence();
    }
    fn on_grow(&self, new_len: u64) {
        self.sim.on_grow(self.bias + new_len);
    }
}

struct Explorer {
    scratch: tempfile::TempDir,
    data_bytes: usize,
    rng: StdRng,
    images: u64,
    points: u64,
    violation: Option<String>,
}

impl Explorer {
    fn explore(&mut self, point: &CrashPoint<'_>) {
        if self.violation.is_some() {
            return;
        }
        self.points += 1;
        let choices = point.choices();
        let prefixes: Vec<Vec<usize>> = if point.image_count() <= 16 {
            point.all_prefixes()
        } else {
            let mut some = vec![
                vec![0; choices.len()],
                choices.iter().map(|n| n - 1).collect(),
            ];
            for _ in 0..4 {
                some.push(
                    choices
                        .iter()
                        .map(|&n| self.rng.random_range(0..n))
                        .collect(),
                );
            }
            some
        };
        for prefix in prefixes {
            self.images += 1;
            let image = point.image(&prefix);
            if let Err(problem) = check_image(self.scratch.path(), &image, self.data_bytes) {
                self.violation = Some(format!("{problem}\n{}", point.describe(&prefix)));
                return;
            }
        }
    }
}

/// Recovers from `image` and scrubs: nothing may look corrupt.
fn check_image(scratch: &Path, image: &[u8], data_bytes: usize) -> Result<(), String> {
    std::fs::write(scratch.join("data"), &image[..data_bytes]).unwrap();
    std::fs::write(scratch.join(FILE_NAME), &image[data_bytes..]).unwrap();
    let data = open_data(scratch, None);
    let (integrity, _) = engram_integrity::Integrity::open(
        scratch,
        Arc::clone(&data),
        DATA_ID,
        quiet_options(),
        None,
    )
    .map_err(|e| format!("reopen failed: {e}"))?;
    let outcome = integrity.scrub_now();
    integrity.abandon();
    if !outcome.corrupt.is_empty() || outcome.parity_rewritten != 0 || outcome.metadata_rebuilt != 0
    {
        return Err(format!(
            "false corruption report after a crash: {outcome:?}"
        ));
    }
    Ok(())
}

struct Run {
    images: u64,
    points: u64,
    violation: Option<String>,
}

fn run_seed(seed: u64, faults: IntegrityFaults) -> Run {
    let dir = tempfile::tempdir().unwrap();
    drop(create_data(dir.path(), DATA_PAGES, seed));
    {
        let data = open_data(dir.path(), None);
        let (integrity, report) = open_integrity(dir.path(), &data, quiet_options(), None);
        assert!(report.created);
        integrity.close().unwrap();
    }
    let data_image = read_file(dir.path(), "data");
    let mut initial = data_image.clone();
    initial.extend(read_file(dir.path(), FILE_NAME));
    let sim = Arc::new(CrashSim::new(initial));
    let data_observer: Arc<dyn PersistObserver> = Arc::new(Biased {
        sim: sim.clone(),
        bias: 0,
    });
    let meta_observer: Arc<dyn PersistObserver> = Arc::new(Biased {
        sim: sim.clone(),
        bias: data_image.len() as u64,
    });
    let data = open_data(dir.path(), Some(data_observer));
    let options = IntegrityOptions {
        faults,
        ..quiet_options()
    };
    let (integrity, _) = open_integrity(dir.path(), &data, options, Some(meta_observer));
    let explorer = Arc::new(Mutex::new(Explorer {
        scratch: tempfile::tempdir().unwrap(),
        data_bytes: data_image.len(),
        rng: StdRng::seed_from_u64(seed ^ 0x5eed),
        images: 0,
        points: 0,
        violation: None,
    }));
    {
        let explorer = explorer.clone();
        sim.set_hook(move |point| explorer.lock().explore(point));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let data_len = DATA_PAGES * PAGE;
    for _ in 0..40 {
        if explorer.lock().violation.is_some() {
            break;
        }
        match rng.random_range(0..100) {
            0..45 => {
                let len = rng.random_range(1..=64u64) * 8;
                let at = rng.random_range(0..(data_len - len) / 8) * 8;
                let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                data.write(PmemOffset(at), &bytes);
                data.persist(PmemOffset(at), len);
            }
            45..60 => {
                let at = rng.random_range(0..data_len / 8) * 8;
                data.store_u64(PmemOffset(at), rng.random());
                data.persist(PmemOffset(at), 8);
            }
            // Not persisted: on the media or not, in any part, at a crash.
            60..70 => {
                let at = rng.random_range(0..data_len / 8) * 8;
                data.store_u64(PmemOffset(at), rng.random());
            }
            _ => {
                integrity.refresh_now();
            }
        }
    }
    sim.clear_hook();
    integrity.abandon();
    let explorer = explorer.lock();
    Run {
        images: explorer.images,
        points: explorer.points,
        violation: explorer.violation.clone(),
    }
}

#[test]
fn crash_points_inside_the_pass_never_produce_false_corruption() {
    let seeds: u64 = std::env::var("ENGRAM_INTEGRITY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let (mut images, mut points) = (0, 0);
    for seed in 0..seeds {
        let run = run_seed(seed, IntegrityFaults::default());
        if let Some(violation) = run.violation {
            panic!("seed {seed}: {violation}");
        }
        images += run.images;
        points += run.points;
    }
    println!("{seeds} seeds, {points} crash points, {images} images: no false corruption");
    assert!(points > 100, "too few crash points explored ({points})");
}

/// Figure 4(b): clearing the marks before the new checksums are durable,
/// with no shadow copy, must be caught.
#[test]
fn explorer_catches_marks_cleared_without_a_shadow() {
    let faults = IntegrityFaults {
        skip_shadow: true,
        ..IntegrityFaults::default()
    };
    let caught = (0..24).find_map(|seed| run_seed(seed, faults).violation);
    let violation = caught.expect("the explorer missed the Figure 4(b) ordering");
    assert!(violation.contains("false corruption"), "{violation}");
}

/// Figure 4(a) is a race, not a crash: a store lands between the checksum
/// and the clearing of its page's mark. A writer hammers a few pages while
/// passes run; afterwards every unmarked page must match its checksum.
fn concurrent_false_reports(faults: IntegrityFaults, budget: Duration) -> usize {
    let dir = tempfile::tempdir().unwrap();
    drop(create_data(dir.path(), 8, 3));
    let data = open_data(dir.path(), None);
    let options = IntegrityOptions {
        faults,
        ..quiet_options()
    };
    let (integrity, _) = open_integrity(dir.path(), &data, options, None);
    let integrity = Arc::new(integrity);
    let started = Instant::now();
    let mut false_reports = 0;
    while started.elapsed() < budget && false_reports == 0 {
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (data, stop) = (data.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut value = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    value += 1;
                    data.store_u64(PmemOffset((value % 4) * PAGE + 8 * (value % 7)), value);
                }
            })
        };
        for _ in 0..200 {
            integrity.refresh_now();
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        // No refresh first: an unmarked page must already be described.
        let outcome = integrity.scrub_without_refresh();
        false_reports += outcome.corrupt.len();
        integrity.refresh_now();
    }
    false_reports
}

#[test]
fn concurrent_stores_never_leave_an_unmarked_stale_page() {
    assert_eq!(
        concurrent_false_reports(IntegrityFaults::default(), Duration::from_secs(3)),
        0
    );
}

#[test]
fn the_race_test_catches_marks_cleared_after_the_refresh() {
    let faults = IntegrityFaults {
        clear_marks_after_refresh: true,
        ..IntegrityFaults::default()
    };
    assert!(
        concurrent_false_reports(faults, Duration::from_secs(60)) > 0,
        "the Figure 4(a) race went unnoticed"
    );
}
