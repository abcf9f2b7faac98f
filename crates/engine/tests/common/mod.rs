//! Helpers shared by the engine's integration tests.
//!
//! Each test binary includes this module with `mod common;` and uses only
//! part of it, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use engram_engine::{CompactionOptions, ModeChoice, Options, Store};

/// Smallest blocks and growth steps, emulated memory, an eager compactor:
/// multi-block stores, extents and compaction happen with little data.
pub fn small_options() -> Options {
    Options {
        mode: ModeChoice::Emulated,
        block_size_bytes: 64 << 10,
        grow_bytes: 256 << 10,
        reserve_bytes: 4 << 30,
        populate: false,
        compaction: CompactionOptions {
            interval: Duration::from_millis(5),
            ..CompactionOptions::default()
        },
        ..Options::default()
    }
}

/// The largest value that still fits a 64 KiB log block with `key_len`:
/// anything longer goes into a multi-block extent.
pub fn largest_log_value(key_len: usize) -> usize {
    let block = 64 << 10;
    let block_header = 64;
    let record_header = 32;
    block - block_header - record_header - key_len.next_multiple_of(8)
}

pub fn data_file(dir: &Path) -> PathBuf {
    dir.join("values.pmem")
}

/// Deterministic bytes from a seed (splitmix64), so a value can be
/// regenerated and compared in full from a few numbers.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut state = seed;
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Every key a full cursor scan returns (duplicates collapsed), and the
/// number of keys returned including duplicates.
pub fn scan_all(store: &Store, count: usize) -> (BTreeSet<Vec<u8>>, usize) {
    let mut keys = BTreeSet::new();
    let mut returned = 0;
    let mut cursor = 0;
    let mut steps = 0u64;
    loop {
        let (next, batch) = store.scan(cursor, count);
        returned += batch.len();
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
        steps += 1;
        assert!(steps < 100_000_000, "scan does not terminate");
    }
    (keys, returned)
}

/// A seed from the environment variable `name`, or from the clock; printed
/// so that any failure can be replayed.
pub fn seed_from_env(name: &str) -> u64 {
    let seed = match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a u64")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    eprintln!("{name}={seed}");
    seed
}

/// A count from the environment variable `name`, or `default`.
pub fn count_from_env(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a number")),
        Err(_) => default,
    }
}

/// Sets the flag when dropped, also while unwinding: helper threads that
/// loop until the flag is set then stop even when the test panics, instead
/// of keeping `std::thread::scope` waiting forever.
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Aborts the whole test process, with a message, if it is still alive
/// `limit` after this was called: a hang (say, compaction that never
/// finishes) fails fast instead of eating the CI budget. Drop it to disarm.
pub struct Watchdog {
    finished: Arc<(Mutex<bool>, Condvar)>,
}

pub fn watchdog(what: &'static str, limit: Duration) -> Watchdog {
    let finished = Arc::new((Mutex::new(false), Condvar::new()));
    let shared = Arc::clone(&finished);
    std::thread::spawn(move || {
        let (lock, condvar) = &*shared;
        let deadline = Instant::now() + limit;
        let mut done = lock.lock().unwrap();
        while !*done {
            let now = Instant::now();
            if now >= deadline {
                eprintln!("WATCHDOG: {what} did not finish within {limit:?}; it hangs. Aborting.");
                std::process::abort();
            }
            done = condvar.wait_timeout(done, deadline - now).unwrap().0;
        }
    });
    Watchdog { finished }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, condvar) = &*self.finished;
        *lock.lock().unwrap() = true;
        condvar.notify_all();
    }
}
