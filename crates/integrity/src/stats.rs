use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::IntegrityMode;

/// Cumulative counters, updated by whoever does the work.
#[derive(Default)]
pub(crate) struct Counters {
    pub passes: AtomicU64,
    pub last_pass_us: AtomicU64,
    pub pages_refreshed: AtomicU64,
    pub scrub_sweeps: AtomicU64,
    pub pages_scrubbed: AtomicU64,
    pub scrub_busy_us: AtomicU64,
    pub corruptions_found: AtomicU64,
    pub repaired: AtomicU64,
    pub metadata_rebuilt: AtomicU64,
}

impl Counters {
    pub fn record_pass(&self, took: Duration, pages: u64) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.last_pass_us
            .store(took.as_micros() as u64, Ordering::Relaxed);
        self.pages_refreshed.fetch_add(pages, Ordering::Relaxed);
    }
}

/// What `INFO integrity` shows.
#[derive(Clone, Debug, Default)]
pub struct IntegrityStats {
    pub mode: IntegrityMode,
    pub period: Duration,
    pub stripe_pages: u32,
    /// Data pages with redundancy (current or stale).
    pub pages_covered: u64,
    /// Pages whose redundancy is out of date (marked since the last pass).
    pub pages_stale: u64,
    pub oldest_stale_age: Duration,
    pub passes: u64,
    pub last_pass_duration: Duration,
    pub pages_refreshed: u64,
    /// Complete sweeps of the background (or on-demand) scrubber.
    pub scrub_sweeps: u64,
    pub pages_scrubbed: u64,
    /// Scrub speed while scrubbing (pages verified per second of scrub work).
    pub scrub_bytes_per_sec_measured: u64,
    pub scrub_bytes_per_sec_limit: u64,
    /// The shortest time a background sweep of the region takes (zero: no
    /// pacing but the limit).
    pub scrub_period: Duration,
    pub corruptions_found: u64,
    pub repaired: u64,
    /// Pages known corrupt that could not be rebuilt.
    pub unrepairable: u64,
    /// Groups whose checksum page itself was damaged and rebuilt from data.
    pub metadata_rebuilt: u64,
}
