//! Reading `Collections::stats()` under a watchdog.
//!
//! `stats()` waits for a running checkpoint to end (it reads the
//! checkpointer's state under the lock a checkpoint holds), so a call may
//! block for a whole checkpoint; that is expected, and the span recorder
//! allows for it. It must not block for ever: in the collections crate as
//! of this writing, `stats()` holds the `last_checkpoint` lock (a temporary
//! of the struct literal lives to the end of the statement) while it waits
//! for the checkpoint's lock, and the checkpoint takes `last_checkpoint`
//! before it lets its own lock go: a deadlock whenever a checkpoint that
//! wrote something ends during a `stats()` call. A benchmark that hangs
//! silently for ever is worse than one that stops, so every call goes
//! through [`stats`]: a watchdog thread ends the process with a message
//! naming the cause when one call has waited longer than [`STALL_LIMIT`].

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use engram_collections::{Collections, CollectionsStats};

/// No checkpoint of a benchmark's size takes this long (the tests' toy
/// checkpoints take milliseconds).
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
                "error: Collections::stats() has waited {} s for a checkpoint (the limit is {} s): \
                 the collections crate's stats()/checkpoint lock-order deadlock (stats() holds \
                 `last_checkpoint` while it waits for the checkpoint's lock, which a finishing \
                 checkpoint holds while it takes `last_checkpoint`). Stopping the benchmark.",
                waited.as_secs(),
                STALL_LIMIT.as_secs()
            );
            std::process::exit(STALLED_EXIT_STATUS);
        }
    }
}
