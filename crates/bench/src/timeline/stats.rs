//! Reading `Collections::stats()` under a watchdog.
//!
//! `stats()` takes a few short locks and never waits for a checkpoint in
//! progress (since the collections fix of commit 591c4c2; before it,
//! `stats()` held `last_checkpoint` while it waited for the lock a
//! checkpoint holds throughout, and a finishing checkpoint took
//! `last_checkpoint`: a deadlock the first version of this benchmark found).
//! A sampler that polls it a thousand times a second must not hang silently
//! if such a regression comes back, so every call goes through [`stats`]:
//! a watchdog thread ends the process with a message when one call has
//! waited longer than [`STALL_LIMIT`].

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use engram_collections::{Collections, CollectionsStats};

/// Far longer than any checkpoint of a benchmark's size, so even a
/// `stats()` that waited for a checkpoint again would not trip it (the
/// tests' toy checkpoints take milliseconds).
#[cfg(not(test))]
pub const STALL_LIMIT: Duration = Duration::from_secs(120);
#[cfg(test)]
pub const STALL_LIMIT: Duration = Duration::from_secs(20);
const WATCH_EVERY: Duration = Duration::from_millis(500);
/// Exit status of a process the watchdog ends.
pub const STALLED_EXIT_STATUS: i32 = 3;

/// The process's reference instant, and when the oldest call still in
/// `stats()` began (nanoseconds after it, plus one; 0: none in progress).
static EPOCH: OnceLock<Instant> = OnceLock::new();
static CALL_BEGAN: AtomicU64 = AtomicU64::new(0);
static WATCHDOG: OnceLock<()> = OnceLock::new();

/// `collections.stats()`, watched.
pub fn stats(collections: &Collections) -> CollectionsStats {
    let epoch = *EPOCH.get_or_init(Instant::now);
    WATCHDOG.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("timeline-watchdog".into())
            .spawn(move || watch(epoch));
        if let Err(error) = spawned {
            log::warn!("no watchdog for Collections::stats(): {error}");
        }
    });
    let began = epoch.elapsed().as_nanos() as u64 + 1;
    // Concurrent callers: the watchdog sees the earliest that is still in.
    let previous = CALL_BEGAN.compare_exchange(0, began, Ordering::Relaxed, Ordering::Relaxed);
    let stats = collections.stats();
    if previous.is_ok() {
        CALL_BEGAN.store(0, Ordering::Relaxed);
    }
    stats
}

fn watch(epoch: Instant) {
    loop {
        std::thread::sleep(WATCH_EVERY);
        let began = CALL_BEGAN.load(Ordering::Relaxed);
        if began == 0 {
            continue;
        }
        let waited = epoch
            .elapsed()
            .saturating_sub(Duration::from_nanos(began - 1));
        if waited > STALL_LIMIT {
            // Straight to the stream: a test harness would swallow
            // `eprintln!`'s output with the process.
            let _ = writeln!(
                std::io::stderr().lock(),
                "error: Collections::stats() has not returned for {} s (the limit is {} s): a \
                 deadlock in the collections crate (as once between stats() and a finishing \
                 checkpoint). Stopping the benchmark.",
                waited.as_secs(),
                STALL_LIMIT.as_secs()
            );
            std::process::exit(STALLED_EXIT_STATUS);
        }
    }
}
