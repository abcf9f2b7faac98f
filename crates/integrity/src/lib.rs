//! # engram-integrity: lazy redundancy over a persistent region
//!
//! Per-page CRC32C checksums and per-stripe XOR parity for a data region,
//! kept up to date lazily by a background pass (Kateja, Pavlo, Ganger, "Lazy
//! Redundancy for NVM Storage", CMU-PDL-19-101, sections 3 and 4), plus a
//! scrubber that verifies clean pages and rebuilds a single bad page per
//! stripe from parity.
//!
//! How it differs from the paper: stale pages are found by software marks
//! set in the store path (every store to the data region goes through
//! `engram_pmem::Region`, which calls our [`StoreTracker`] first), not by
//! repurposed page-table dirty bits, which need a kernel module and
//! battery-backed caches. A mark is persisted before the first store to a
//! page in an epoch, so marks survive power failure on real persistent
//! memory; later stores to the page cost a bit test. The refresh follows
//! Algorithm 1 with its shadow copy of the marks; a writer gate (`gate.rs`)
//! replaces the hardware's atomic dirty-bit clear.
//!
//! Start at [`Integrity::open`]. The file format is in [`layout`].
//!
//! [`StoreTracker`]: engram_pmem::StoreTracker

#![forbid(unsafe_code)]

/// Asserts an invariant too costly to check in every debug build (one of
/// ARCHITECTURE.md's numbered invariants, named in the message): checked
/// with the `verify` feature, which the tests turn on. Without it the
/// condition is never evaluated and the dead branch is compiled away, so a
/// release build pays nothing. Cheap checks use `debug_assert!`.
macro_rules! verify {
    ($($assertion:tt)+) => {
        if cfg!(feature = "verify") {
            assert!($($assertion)+);
        }
    };
}

mod error;
mod gate;
pub mod layout;
mod options;
mod redundancy;
mod scrub;
mod stats;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engram_pmem::{Mode, ModeChoice, PersistObserver, PmemOffset, Region, RegionOptions};
use parking_lot::{Condvar, Mutex};

pub use error::{Error, Result};
#[cfg(feature = "fault-injection")]
pub use options::IntegrityFaults;
pub use options::{
    IntegrityMode, IntegrityOptions, DEFAULT_PERIOD, DEFAULT_SCRUB_BYTES_PER_SEC,
    DEFAULT_SCRUB_PERIOD, DEFAULT_STRIPE_PAGES, MAX_PERIOD, MAX_SCRUB_PERIOD,
};
pub use scrub::ScrubOutcome;

pub use stats::IntegrityStats;

use layout::{Geometry, PAGE_BYTES, SESSION_OFFSET, SHADOW_GROUP_OFFSET, SHADOW_MARKS_OFFSET};
use redundancy::Redundancy;

/// The integrity file inside a store's directory.
pub const FILE_NAME: &str = "integrity.pmem";
/// How often the background scrubber wakes to spend its byte budget.
const SCRUB_TICK: Duration = Duration::from_millis(100);
/// Stripes scrubbed per hold of the work lock, so a refresh or an inline
/// writer never waits long behind the scrubber.
const SCRUB_STRIPES_PER_STEP: u64 = 16;

/// What [`Integrity::check_range`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeHealth {
    /// Every page matches its checksum: unparsable bytes there were
    /// written that way (or torn before the last refresh).
    Clean,
    /// Corruption was found and rebuilt from parity: read again.
    Repaired,
    /// A page of the range was written since its last refresh: nothing to
    /// verify against (a torn write looks like this).
    Stale,
    /// Corrupt, and parity could not rebuild it.
    Unrepairable,
}

/// What opening found.
#[derive(Clone, Debug, Default)]
pub struct OpenReport {
    /// The file did not exist: every page starts stale.
    pub created: bool,
    /// The last session did not close cleanly.
    pub unclean: bool,
    /// A crash cut a refresh short; its shadow marks were restored.
    pub shadow_restored: bool,
    /// Emulated memory after a power failure or OS crash: the kernel may
    /// have written data pages back before their marks, so every page was
    /// treated as stale (refreshed, not verified).
    pub marks_distrusted: bool,
    pub stale_pages: u64,
}

/// Redundancy for one data region: the tracker installed on it, the
/// background pass and scrubber, and the on-demand operations.
pub struct Integrity {
    shared: Arc<IntegrityState>,
    thread: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
}

/// What the [`Integrity`] handle shares with its background thread (the
/// pass and the scrubber).
struct IntegrityState {
    data: Arc<Region>,
    redundancy: Arc<Redundancy>,
    options: IntegrityOptions,
    shutdown: AtomicBool,
    wake: (Mutex<()>, Condvar),
    /// Where the background scrubber goes on: (group, stripe).
    scrub_cursor: Mutex<(u64, u64)>,
}

impl Integrity {
    /// Opens (or creates) `dir/integrity.pmem` for `data`, recovers from
    /// whatever the last session left, installs the tracker on `data` and
    /// starts the background thread. Call before the first store to `data`.
    /// `data_id` ties the file to its data file. `observer` watches the
    /// integrity file (the crash simulator).
    pub fn open(
        dir: &Path,
        data: Arc<Region>,
        data_id: u64,
        options: IntegrityOptions,
        observer: Option<Arc<dyn PersistObserver>>,
    ) -> Result<(Integrity, OpenReport)> {
        options.validate()?;
        if options.mode == IntegrityMode::Off {
            return Err(Error::InvalidOption(
                "Integrity::open needs mode lazy or inline".into(),
            ));
        }
        let path = dir.join(FILE_NAME);
        let mut report = OpenReport::default();
        let region_options = RegionOptions {
            mode: match data.mode() {
                Mode::Dax => ModeChoice::Dax,
                Mode::Emulated => ModeChoice::Emulated,
            },
            flush: Some(data.flush_instruction()),
            // Metadata is a quarter of the data (parity) plus a little.
            reserve_bytes: (data.reserve_bytes() / 2).max(16 << 20),
            populate: false,
            file_limit_bytes: None,
            observer,
            fine_writeback: false,
            staged: false,
        };
        if !path.exists() {
            create_file(dir, &path, Geometry::new(options.stripe_pages), data_id)?;
            report.created = true;
        }
        let meta = Region::open(&path, region_options)?;
        if meta.len() < PAGE_BYTES {
            return Err(Error::CorruptHeader {
                path,
                what: "file shorter than its header",
            });
        }
        let (geometry, found_id) = layout::decode_header(meta.read(PmemOffset(0), 64))
            .map_err(|problem| header_error(&path, problem))?;
        if found_id != data_id {
            return Err(Error::ForeignFile {
                path,
                expected_id: data_id,
                found_id,
            });
        }
        let data_pages = data.len() / PAGE_BYTES;
        let whole_groups = (meta.len() - PAGE_BYTES) / geometry.group_bytes();
        let redundancy = Arc::new(Redundancy::new(
            meta,
            geometry,
            options.mode,
            #[cfg(feature = "fault-injection")]
            options.faults,
            data.reserve_bytes().max(data.len()),
        ));
        redundancy
            .covered_pages
            .store(whole_groups * geometry.group_pages, Ordering::Release);
        let pages_with_groups = whole_groups * geometry.group_pages;
        redundancy.cover(data_pages)?;
        report.shadow_restored = restore_shadow(&redundancy);
        let session = redundancy.meta.load_u64(SESSION_OFFSET);
        let this_boot = boot_tag();
        // A staged data region (`engram_pmem::RegionOptions::staged`) loses
        // its unsynced stores to a process crash too, so a session it ran
        // is distrusted like one of another boot: its tag never matches.
        let this_session = if data.is_staged() {
            this_boot ^ STAGED_SESSION
        } else {
            this_boot
        };
        report.unclean = session != 0;
        redundancy.load_marks();
        if report.created {
            redundancy.mark_all(data_pages);
        } else if report.unclean && session != this_boot && data.mode() == Mode::Emulated {
            report.marks_distrusted = true;
            redundancy.mark_all(data_pages);
        } else if pages_with_groups < data_pages {
            // Groups missing from the file (it was cut short): nothing is
            // known of those pages.
            redundancy.mark_range(pages_with_groups, data_pages);
        }
        redundancy.meta.store_u64(SESSION_OFFSET, this_session);
        redundancy.meta.persist(SESSION_OFFSET, 8);
        // On emulated memory the open session must be on disk before any
        // data page can be written back: else a power failure could leave
        // "closed cleanly" beside pages whose marks never reached disk.
        redundancy.meta.sync(SESSION_OFFSET, 8)?;
        if options.mode == IntegrityMode::Inline {
            // No background pass in inline mode: cover what opening marked.
            redundancy.refresh_all(&data);
        }
        report.stale_pages = redundancy.stale_pages();
        if data.set_tracker(redundancy.clone()).is_err() {
            return Err(Error::InvalidOption(
                "the data region already has a store tracker".into(),
            ));
        }
        let shared = Arc::new(IntegrityState {
            data,
            redundancy,
            options,
            shutdown: AtomicBool::new(false),
            wake: (Mutex::new(()), Condvar::new()),
            scrub_cursor: Mutex::new((0, 0)),
        });
        let needs_thread =
            shared.options.mode == IntegrityMode::Lazy || shared.options.scrub_bytes_per_sec > 0;
        let thread = needs_thread.then(|| {
            let shared = Arc::clone(&shared);
            engram_threads::spawn("engram-integrity", move || background(&shared))
                .expect("spawning the integrity thread")
        });
        Ok((
            Integrity {
                shared,
                thread: Mutex::new(thread),
                closed: AtomicBool::new(false),
            },
            report,
        ))
    }

    /// Refreshes the redundancy of every stale page now; returns how many.
    pub fn refresh_now(&self) -> u64 {
        self.shared.redundancy.refresh_all(&self.shared.data)
    }

    /// Brings redundancy up to date, then verifies every page against its
    /// checksum and every stripe against its parity, repairing what can be
    /// repaired. Pages written meanwhile are skipped (counted as stale).
    pub fn scrub_now(&self) -> ScrubOutcome {
        self.refresh_now();
        self.scrub_without_refresh()
    }

    /// Verifies every page whose redundancy is current, without refreshing
    /// stale pages first (they are skipped and counted as stale).
    pub fn scrub_without_refresh(&self) -> ScrubOutcome {
        let shared = &self.shared;
        let started = Instant::now();
        let mut outcome = ScrubOutcome::default();
        for group in 0..shared.redundancy.groups() {
            outcome.merge(
                shared
                    .redundancy
                    .scrub_group(&shared.data, group, 0, u64::MAX),
            );
        }
        let counters = &shared.redundancy.counters;
        counters.scrub_sweeps.fetch_add(1, Ordering::Relaxed);
        counters
            .scrub_busy_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        outcome
    }

    /// Verifies the pages of `[offset, offset + len)` of the data region
    /// and rebuilds what parity can: for a reader (recovery) that found
    /// bytes it cannot parse and must tell damage from a torn write.
    pub fn check_range(&self, offset: u64, len: u64) -> RangeHealth {
        let shared = &self.shared;
        let r = &shared.redundancy;
        let g = r.geometry;
        let first = offset / PAGE_BYTES;
        let last = (offset + len.max(1) - 1) / PAGE_BYTES;
        if (first..=last).any(|page| r.is_stale(page)) {
            return RangeHealth::Stale;
        }
        let mut repaired = false;
        let mut page = first / g.stripe_pages * g.stripe_pages;
        while page <= last {
            let group = page / g.group_pages;
            let stripe = (page % g.group_pages) / g.stripe_pages;
            let outcome = r.scrub_group(&shared.data, group, stripe, stripe + 1);
            repaired |= !outcome.repaired.is_empty() || outcome.metadata_rebuilt > 0;
            page += g.stripe_pages;
        }
        if r.overlaps_bad(offset, len) {
            RangeHealth::Unrepairable
        } else if repaired {
            RangeHealth::Repaired
        } else {
            RangeHealth::Clean
        }
    }

    /// Whether any page of `[offset, offset + len)` of the data region is
    /// known corrupt beyond repair. One atomic load when none is.
    #[inline]
    pub fn overlaps_unrepairable(&self, offset: u64, len: u64) -> bool {
        self.shared.redundancy.overlaps_bad(offset, len)
    }

    /// Forgets that pages of `[offset, offset + len)` were corrupt beyond
    /// repair: for the engine reclaiming the block they are in, before its
    /// first store there. Until then they stay bad through any refresh.
    pub fn forget_unrepairable(&self, offset: u64, len: u64) {
        self.shared.redundancy.forget_bad(offset, len);
    }

    /// Marks the pages of `[offset, offset + len)` stale now, in bulk: for
    /// a writer about to fill them (a fresh log block), whose stores then
    /// find their pages marked instead of persisting a mark each. Marking
    /// early is always safe: a stale page is only left unverified, and a
    /// pass that refreshes it before the writes come clears the mark, so
    /// the first of them marks it again. Nothing to do in inline mode
    /// (each store refreshes its own pages).
    pub fn expect_writes(&self, offset: u64, len: u64) {
        if self.shared.options.mode == IntegrityMode::Lazy && len > 0 {
            let redundancy = &self.shared.redundancy;
            let end = (offset + len).div_ceil(PAGE_BYTES);
            let covered = redundancy.covered_pages.load(Ordering::Acquire);
            redundancy.mark_range(offset / PAGE_BYTES, end.min(covered));
        }
    }

    /// Data offsets of pages rebuilt from parity since open (the first
    /// 4096 of them), the ones recovery repaired included.
    pub fn repaired_offsets(&self) -> Vec<u64> {
        self.shared
            .redundancy
            .repaired_pages()
            .into_iter()
            .map(|page| page * PAGE_BYTES)
            .collect()
    }

    /// Data offsets of the pages known corrupt beyond repair.
    pub fn unrepairable_offsets(&self) -> Vec<u64> {
        self.shared
            .redundancy
            .bad_pages()
            .into_iter()
            .map(|page| page * PAGE_BYTES)
            .collect()
    }

    /// Whether the page holding `offset` has stale redundancy right now.
    pub fn is_stale(&self, offset: u64) -> bool {
        self.shared.redundancy.is_stale(offset / PAGE_BYTES)
    }

    pub fn stats(&self) -> IntegrityStats {
        let r = &self.shared.redundancy;
        let c = &r.counters;
        let scrubbed = c.pages_scrubbed.load(Ordering::Relaxed);
        let busy_us = c.scrub_busy_us.load(Ordering::Relaxed);
        IntegrityStats {
            mode: self.shared.options.mode,
            period: self.shared.options.period,
            stripe_pages: r.geometry.stripe_pages as u32,
            pages_covered: self.shared.data.len() / PAGE_BYTES,
            pages_stale: r.stale_pages(),
            oldest_stale_age: Duration::from_millis(r.oldest_stale_ms()),
            passes: c.passes.load(Ordering::Relaxed),
            last_pass_duration: Duration::from_micros(c.last_pass_us.load(Ordering::Relaxed)),
            pages_refreshed: c.pages_refreshed.load(Ordering::Relaxed),
            scrub_sweeps: c.scrub_sweeps.load(Ordering::Relaxed),
            pages_scrubbed: scrubbed,
            scrub_bytes_per_sec_measured: (scrubbed * PAGE_BYTES * 1_000_000)
                .checked_div(busy_us)
                .unwrap_or(0),
            scrub_bytes_per_sec_limit: self.shared.options.scrub_bytes_per_sec,
            scrub_period: self.shared.options.scrub_period,
            corruptions_found: c.corruptions_found.load(Ordering::Relaxed),
            repaired: c.repaired.load(Ordering::Relaxed),
            unrepairable: r.bad_pages().len() as u64,
            metadata_rebuilt: c.metadata_rebuilt.load(Ordering::Relaxed),
        }
    }

    /// Clean shutdown: stops the background thread, brings every page's
    /// redundancy up to date, syncs the file, then records the clean close.
    /// Call after the last store to the data region, once the data region
    /// is synced (the clean close vouches for checksums of synced data);
    /// later calls do nothing.
    pub fn close(&self) -> Result<()> {
        self.stop();
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let redundancy = &self.shared.redundancy;
        redundancy.refresh_all(&self.shared.data);
        // Everything the clean-close word vouches for is durable first.
        redundancy.meta.sync_all()?;
        redundancy.meta.store_u64(SESSION_OFFSET, 0);
        redundancy.meta.persist(SESSION_OFFSET, 8);
        redundancy.meta.sync(SESSION_OFFSET, 8)?;
        Ok(())
    }

    /// Stops the background thread and leaves the file as a crash would
    /// (for tests and benchmarks that simulate one).
    pub fn abandon(&self) {
        self.stop();
        self.closed.store(true, Ordering::Release);
    }

    /// Syncs the integrity file (emulated memory: `msync`), for callers that
    /// sync the data region on a schedule.
    pub fn sync(&self) -> Result<()> {
        Ok(self.shared.redundancy.meta.sync_all()?)
    }

    fn stop(&self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _guard = self.shared.wake.0.lock();
            self.shared.wake.1.notify_all();
        }
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Integrity {
    /// Without `close` this is a crash as far as the file is concerned:
    /// nothing is refreshed and the session stays open.
    fn drop(&mut self) {
        self.stop();
    }
}

/// Puts a cut-short refresh's shadow marks back into the marks. Idempotent:
/// a crash in here leaves the shadow in place for the next open.
fn restore_shadow(redundancy: &Redundancy) -> bool {
    let shadow = redundancy.meta.load_u64(SHADOW_GROUP_OFFSET);
    if shadow == 0 {
        return false;
    }
    let group = shadow - 1;
    let g = redundancy.geometry;
    if group < g.groups_for_pages(redundancy.covered_pages.load(Ordering::Acquire)) {
        let marks = g.marks_offset(group);
        for word in 0..g.mark_words() {
            let bits = redundancy
                .meta
                .load_u64(PmemOffset(SHADOW_MARKS_OFFSET.0 + word * 8));
            if bits != 0 {
                let at = PmemOffset(marks.0 + word * 8);
                redundancy.meta.fetch_or_u64(at, bits);
                redundancy.meta.flush(at, 8);
            }
        }
        redundancy.meta.fence();
    }
    redundancy.meta.store_u64(SHADOW_GROUP_OFFSET, 0);
    redundancy.meta.persist(SHADOW_GROUP_OFFSET, 8);
    true
}

fn background(shared: &IntegrityState) {
    let lazy = shared.options.mode == IntegrityMode::Lazy;
    let scrub_rate = shared.options.scrub_bytes_per_sec;
    let mut next_pass = Instant::now() + shared.options.period;
    let mut last_scrub = Instant::now();
    let mut credit = 0f64;
    loop {
        let now = Instant::now();
        let mut wake_at = if lazy {
            next_pass
        } else {
            now + Duration::from_secs(3600)
        };
        if scrub_rate > 0 {
            wake_at = wake_at.min(last_scrub + SCRUB_TICK);
        }
        {
            let mut guard = shared.wake.0.lock();
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            if wake_at > now {
                shared.wake.1.wait_until(&mut guard, wake_at);
            }
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        if lazy && now >= next_pass {
            shared.redundancy.refresh_all(&shared.data);
            // Start to start; a pass longer than the period is followed at once.
            next_pass = (next_pass + shared.options.period).max(Instant::now());
        }
        if scrub_rate > 0 && now >= last_scrub + SCRUB_TICK {
            let elapsed = now - last_scrub;
            last_scrub = now;
            // A slow sweep earns less than a stripe a tick: the credit
            // carries over (at most a second's worth).
            let rate = sweep_rate(shared.data.len(), scrub_rate, shared.options.scrub_period);
            let stripe_bytes = (shared.redundancy.geometry.stripe_pages * PAGE_BYTES) as f64;
            credit = (credit + rate * elapsed.as_secs_f64().min(1.0)).min(rate.max(stripe_bytes));
            let stripes = (credit / stripe_bytes).floor();
            if stripes >= 1.0 {
                credit -= stripes * stripe_bytes;
                scrub_some(shared, (stripes * stripe_bytes) as u64);
            }
        }
    }
}

/// Bytes per second the background scrubber spends on a region of
/// `region_bytes`: enough to sweep it once per `period`, at most `limit`
/// (all of `limit` when the period is zero).
fn sweep_rate(region_bytes: u64, limit: u64, period: Duration) -> f64 {
    let limit = limit as f64;
    if period.is_zero() {
        return limit;
    }
    (region_bytes as f64 / period.as_secs_f64()).min(limit)
}

/// Background scrubbing: about `budget_bytes` of stripes from the cursor.
fn scrub_some(shared: &IntegrityState, budget_bytes: u64) {
    let redundancy = &shared.redundancy;
    let g = redundancy.geometry;
    let stripes_per_group = g.group_pages / g.stripe_pages;
    let stripe_bytes = g.stripe_pages * PAGE_BYTES;
    let mut stripes_left = budget_bytes.div_ceil(stripe_bytes);
    let started = Instant::now();
    let mut cursor = shared.scrub_cursor.lock();
    while stripes_left > 0 && !shared.shutdown.load(Ordering::Acquire) {
        let groups = redundancy.groups();
        // Past the region's last page (a group's tail beyond it has no
        // pages to verify, and must not cost a slow sweep its budget).
        let first_page = cursor.0 * g.group_pages + cursor.1 * g.stripe_pages;
        if cursor.0 >= groups || first_page >= shared.data.len() / PAGE_BYTES {
            *cursor = (0, 0);
            redundancy
                .counters
                .scrub_sweeps
                .fetch_add(1, Ordering::Relaxed);
            break;
        }
        let step = SCRUB_STRIPES_PER_STEP.min(stripes_left);
        let end = (cursor.1 + step).min(stripes_per_group);
        redundancy.scrub_group(&shared.data, cursor.0, cursor.1, end);
        stripes_left -= end - cursor.1;
        *cursor = if end == stripes_per_group {
            (cursor.0 + 1, 0)
        } else {
            (cursor.0, end)
        };
    }
    redundancy
        .counters
        .scrub_busy_us
        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
}

/// Creates the file under a temporary name, header written and synced,
/// then renames it into place: a crash never leaves a half-made file.
fn create_file(dir: &Path, path: &Path, geometry: Geometry, data_id: u64) -> Result<()> {
    let temporary: PathBuf = dir.join(format!("{FILE_NAME}.tmp"));
    let _ = std::fs::remove_file(&temporary);
    {
        let region = Region::create(
            &temporary,
            PAGE_BYTES,
            RegionOptions {
                mode: ModeChoice::Emulated,
                populate: false,
                reserve_bytes: PAGE_BYTES,
                ..RegionOptions::default()
            },
        )?;
        region.write(PmemOffset(0), &layout::encode_header(geometry, data_id));
        region.sync_all()?;
    }
    std::fs::rename(&temporary, path).map_err(|source| {
        Error::Region(engram_pmem::Error::Io {
            context: "renaming new integrity file to",
            path: path.to_path_buf(),
            source,
        })
    })?;
    engram_pmem::sync_directory(dir).map_err(|source| {
        Error::Region(engram_pmem::Error::Io {
            context: "syncing directory",
            path: dir.to_path_buf(),
            source,
        })
    })?;
    Ok(())
}

fn header_error(path: &Path, problem: layout::HeaderProblem) -> Error {
    let path = path.to_path_buf();
    match problem {
        layout::HeaderProblem::Magic => Error::NotAnIntegrityFile { path },
        layout::HeaderProblem::Version(found) => Error::UnsupportedVersion {
            path,
            found,
            supported: layout::VERSION,
        },
        layout::HeaderProblem::Checksum => Error::CorruptHeader {
            path,
            what: "header checksum mismatch",
        },
        layout::HeaderProblem::Geometry => Error::CorruptHeader {
            path,
            what: "impossible page or stripe size",
        },
    }
}

/// Flipped in a staged data region's session tag (boot tags have bit 0
/// set, so the tag stays non-zero: open).
const STAGED_SESSION: u64 = 0b10;

/// This boot's identity as a session word (never 0): the kernel's boot id
/// hashed, with the low bit set. A different tag at open means the machine
/// restarted since the file was last open.
fn boot_tag() -> u64 {
    let id = std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let crc = crc32c::crc32c(&id) as u64;
    let crc2 = crc32c::crc32c_append(0x9e37_79b9, &id) as u64;
    (crc << 32 | crc2) | 1
}
