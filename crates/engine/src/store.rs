//! The public store handle: opening, the read API, shutdown.
//!
//! ## Threads and ownership
//!
//! `Store` wraps an `Arc<Inner>` shared with two optional background threads:
//! the compactor (always, unless disabled) and the periodic syncer (with
//! `SyncPolicy::Periodic` on emulated memory). Application threads call the
//! API directly; no operation hands work to another thread and waits for it,
//! except `SyncPolicy::Always`, whose group commit lets one writer's `msync`
//! cover its neighbours.
//!
//! ## Lock order
//!
//! writer lane -> index shard -> compaction lane -> free set -> region growth.
//! Writers release their lane before publishing to the index; compaction and
//! in-place updates take a shard lock, then (compaction) its own lane.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engram_integrity::{Integrity, IntegrityMode, IntegrityStats};
use engram_pmem::{PmemOffset, Region, RegionOptions};
use parking_lot::{Condvar, Mutex};

use crate::counter::StripedCounter;
pub use crate::image_writer::IndexImageReport;
use crate::image_writer::{self, ImageState};
use crate::index::{hash_key, Index};
use crate::lanes::{Lane, Lanes};
use crate::lock::DirectoryLock;
use crate::record;
use crate::space::Space;
use crate::superblock::Superblock;
use crate::sync::Syncer;
use crate::{compaction, index_image, recovery, Error, Options, Result, SyncPolicy};

/// The data file inside a store's directory.
pub const DATA_FILE: &str = "values.pmem";
/// How long `compact_now` waits for freed blocks to clear their epoch.
const SETTLE_FREES_PATIENCE: Duration = Duration::from_secs(2);

/// An open store. Share it between threads by reference or `Arc`
/// (`Store: Send + Sync`); every method takes `&self`.
pub struct Store {
    inner: Arc<Inner>,
    background: Vec<JoinHandle<()>>,
    finished: bool,
    _lock: DirectoryLock,
}

pub(crate) struct Inner {
    pub space: Arc<Space>,
    pub index: Index,
    pub lanes: Lanes,
    pub compaction_lane: Mutex<Lane>,
    /// Next record sequence number.
    pub seq: AtomicU64,
    pub keys: StripedCounter,
    pub syncer: Syncer,
    pub options: Options,
    pub report: RecoveryReport,
    pub compactions: AtomicU64,
    pub records_moved: AtomicU64,
    pub shutdown: AtomicBool,
    /// Wakes background threads early (shutdown, or work to do).
    pub wake: (Mutex<()>, Condvar),
    /// The store's directory (index images are written there).
    pub dir: PathBuf,
    /// The superblock's store id, stamped on index images.
    pub store_id: u64,
    pub image: Mutex<ImageState>,
    pub image_region_options: RegionOptions,
    pub index_images: AtomicU64,
}

/// A value read in place, without copying. While it lives, the space it sits
/// in is not reclaimed, so keep it short-lived. Aligned 8-byte words of the
/// value may still change under it through `incr_by`/`compare_and_swap`.
pub struct ValueRef<'a> {
    bytes: &'a [u8],
    _guard: crossbeam_epoch::Guard,
}

impl std::ops::Deref for ValueRef<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

/// What the last open found and how long it took.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub records: u64,
    pub blocks_scanned: u64,
    pub threads: usize,
    pub duration: Duration,
    /// Records that lost to a newer version of their key and were retired.
    pub superseded: u64,
    /// Blocks whose log ended at a torn or damaged record.
    pub torn_tails: u64,
    /// Records on pages damaged beyond repair: indexed when their header
    /// survived (reads of them fail with `Error::Unrepairable`), skipped
    /// when it did not (their keys cannot be known).
    pub damaged_records: u64,
    /// Data-file offsets of pages the integrity layer rebuilt from parity
    /// while recovery read them.
    pub repaired_pages: Vec<u64>,
    /// What the integrity layer found at open (`None` when it is off).
    pub integrity: Option<engram_integrity::OpenReport>,
    /// Block headers that were neither valid nor blank (torn claims).
    pub damaged_headers: u64,
    /// Whether recovery started from an index image, and how it went.
    pub index_image: ImageRecovery,
}

/// Recovery's use of an index image.
#[derive(Clone, Debug, Default)]
pub struct ImageRecovery {
    /// The number of the image recovery started from (`None`: it scanned
    /// every block).
    pub image: Option<u64>,
    /// Keys the image named, and how many of them were still live.
    pub named: u64,
    pub live: u64,
    /// Blocks claimed since the image, which recovery scanned.
    pub tail_blocks: u64,
    /// Why image files present were not used.
    pub rejected: Vec<String>,
}

/// What [`Store::scrub_now`] found.
#[derive(Clone, Debug, Default)]
pub struct ScrubReport {
    pub pages_checked: u64,
    /// Pages skipped because they were written during the scrub.
    pub pages_stale: u64,
    pub corrupt_pages: u64,
    /// Data-file offsets of pages rebuilt from parity.
    pub repaired_pages: Vec<u64>,
    /// Data-file offsets of pages that could not be rebuilt.
    pub unrepairable_pages: Vec<u64>,
    pub parity_rewritten: u64,
    pub metadata_rebuilt: u64,
    /// Keys with a record on an unrepairable page. A record whose header
    /// is itself damaged is named by its offset (`AffectedKey::key` None).
    pub affected_keys: Vec<AffectedKey>,
    pub duration: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AffectedKey {
    pub offset: u64,
    pub key: Option<Vec<u8>>,
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub keys: u64,
    pub file_bytes: u64,
    pub live_bytes: u64,
    pub block_bytes: u64,
    pub blocks_total: u64,
    pub blocks_free: u64,
    pub blocks_freed: u64,
    pub compactions: u64,
    pub records_moved: u64,
    pub syncs: u64,
    pub mode: &'static str,
    pub flush: &'static str,
    /// Index images written since open.
    pub index_images: u64,
}

impl Store {
    /// Opens the store in `dir`, creating the directory and an empty store if
    /// it holds none. Recovery (after a clean shutdown or a crash alike)
    /// loads the newest index image, if any, scans the blocks claimed since
    /// (all of them without an image) in parallel, and rebuilds the index.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Store> {
        options.validate()?;
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| Error::io("creating data directory", dir, e))?;
        let lock = DirectoryLock::acquire(dir)?;
        let path = dir.join(DATA_FILE);
        let integrity_path = dir.join(engram_integrity::FILE_NAME);
        if !path.exists() {
            create_data_file(dir, &path, &options)?;
            // Redundancy left by an earlier store here protects nothing now.
            remove_if_present(&integrity_path)?;
        }
        let region = Arc::new(Region::open(&path, region_options(&options))?);
        let superblock = Superblock::read(&region)?;
        let store_id = superblock.store_id;
        // The tracker goes on before recovery, whose writes it must see.
        let (integrity, integrity_report) = match options.integrity.mode {
            IntegrityMode::Off => {
                // Writes from now on are untracked: old redundancy would
                // call them corruption at the next open with it on.
                remove_if_present(&integrity_path)?;
                (None, None)
            }
            _ => {
                let (integrity, report) = Integrity::open(
                    dir,
                    Arc::clone(&region),
                    superblock.store_id,
                    options.integrity.clone(),
                    None,
                )?;
                (Some(Arc::new(integrity)), Some(report))
            }
        };
        let space = Arc::new(Space::new(
            region,
            superblock,
            options.grow_bytes,
            options.grow_ahead,
            integrity.clone(),
        ));
        let index = Index::new();
        let threads = Options::threads_or_cores(options.recovery_threads, 1);
        let image_region_options = region_options(&options);
        let (image, rejected) = if options.index_image.enabled {
            index_image::load_newest(dir, store_id, &image_region_options)
        } else {
            (None, Vec::new())
        };
        let mut recovered = recovery::recover(
            &space,
            &index,
            threads,
            integrity.as_deref(),
            image.as_ref(),
            ImageRecovery {
                rejected,
                ..ImageRecovery::default()
            },
        )?;
        let image_state = image_state_after_recovery(image.as_ref(), &recovered.report);
        drop(image);
        recovered.report.integrity = integrity_report;
        recovered.report.repaired_pages = integrity
            .as_ref()
            .map_or_else(Vec::new, |i| i.repaired_offsets());
        let inner = Arc::new(Inner {
            syncer: Syncer::new(options.sync, space.region.mode()),
            lanes: Lanes::new(Options::threads_or_cores(options.write_lanes, 2)),
            compaction_lane: Mutex::new(Lane::default()),
            seq: AtomicU64::new(recovered.next_seq),
            keys: {
                let keys = StripedCounter::new();
                keys.add(0, recovered.keys as i64);
                keys
            },
            report: recovered.report,
            compactions: AtomicU64::new(0),
            records_moved: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            wake: (Mutex::new(()), Condvar::new()),
            dir: dir.to_path_buf(),
            store_id,
            image: Mutex::new(image_state),
            image_region_options,
            index_images: AtomicU64::new(0),
            options,
            index,
            space,
        });
        let mut background = Vec::new();
        if inner.options.grow_ahead {
            let inner = Arc::clone(&inner);
            background.push(spawn("engram-space-reserve", move || {
                let compaction = &inner.options.compaction;
                inner.space.run_provisioner(|space| {
                    !compaction.enabled || space.may_grow(compaction.max_space_amplification)
                })
            }));
        }
        if inner.options.compaction.enabled {
            let inner = Arc::clone(&inner);
            background.push(spawn("engram-compact", move || compaction::run(&inner)));
        }
        if let SyncPolicy::Periodic(period) = inner.syncer.policy() {
            let inner = Arc::clone(&inner);
            background.push(spawn("engram-sync", move || periodic_sync(&inner, period)));
        }
        if inner.options.index_image.enabled {
            let inner = Arc::clone(&inner);
            background.push(spawn("engram-index-image", move || {
                image_writer::run(&inner)
            }));
        }
        Ok(Store {
            inner,
            background,
            finished: false,
            _lock: lock,
        })
    }

    /// Inserts or replaces; `Ok(true)` when the key is new. On return the
    /// write is durable in the configured mode.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.inner.put(key, value)
    }

    /// The value of `key`, copied out. Verifies the record's checksum.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let _guard = crossbeam_epoch::pin();
        let Some(at) = self.inner.lookup(key) else {
            return Ok(None);
        };
        let region = &self.inner.space.region;
        let header = self.inner.checked_header(at)?;
        let value = record::value(region, at, &header).to_vec();
        if header.is_in_place() || crc32c::crc32c(&value) == header.crc_value {
            return Ok(Some(value));
        }
        self.inner.checked_after_mismatch(at).map(|()| Some(value))
    }

    /// The value of `key` in place, without copying. Verifies the checksum.
    pub fn get_ref(&self, key: &[u8]) -> Result<Option<ValueRef<'_>>> {
        let guard = crossbeam_epoch::pin();
        let Some(at) = self.inner.lookup(key) else {
            return Ok(None);
        };
        let region = &self.inner.space.region;
        let header = self.inner.checked_header(at)?;
        let bytes = record::value(region, at, &header);
        if !record::value_checksum_ok(region, at, &header) {
            self.inner.checked_after_mismatch(at)?;
        }
        Ok(Some(ValueRef {
            bytes,
            _guard: guard,
        }))
    }

    /// Removes `key`; `Ok(true)` when it existed. Durable on return.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.inner.delete(key)
    }

    /// Atomically adds `delta` (wrapping) to the little-endian u64 at
    /// `field_offset` of the key's value, in place; returns the new value.
    pub fn incr_by(&self, key: &[u8], field_offset: u64, delta: i64) -> Result<u64> {
        let delta = delta as u64;
        self.inner.update_word(key, field_offset, |region, word| {
            region.fetch_add_u64(word, delta).wrapping_add(delta)
        })
    }

    /// Atomically replaces the u64 at `field_offset` with `new` if it equals
    /// `expected`; returns the value found (equal to `expected` on success).
    pub fn compare_and_swap(
        &self,
        key: &[u8],
        field_offset: u64,
        expected: u64,
        new: u64,
    ) -> Result<u64> {
        self.inner.update_word(key, field_offset, |region, word| {
            match region.compare_exchange_u64(word, expected, new) {
                Ok(found) | Err(found) => found,
            }
        })
    }

    pub fn len(&self) -> u64 {
        self.inner.keys.sum().max(0) as u64
    }

    /// Takes a store-wide sequence number, for a layer that keeps records
    /// of its own (the collections' operation log) in one order with this
    /// store's writes.
    pub fn next_seq(&self) -> u64 {
        self.inner.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// The sequence number the next write will take.
    pub fn peek_seq(&self) -> u64 {
        self.inner.seq.load(Ordering::Relaxed)
    }

    /// Makes every later sequence number at least `at_least` (after a layer
    /// above recovered records numbered from this store's sequence).
    pub fn advance_seq(&self, at_least: u64) {
        self.inner.seq.fetch_max(at_least, Ordering::Relaxed);
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One step of a cursor scan: keys from `cursor` on, about `count` of
    /// them, and the cursor to continue from (0 when done). Every key present
    /// for the whole scan is returned at least once; a key may be returned
    /// more than once only if it is deleted and written again meanwhile.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<Vec<u8>>) {
        let _guard = crossbeam_epoch::pin();
        let (next, offsets) = self.inner.index.scan(cursor, count);
        let region = &self.inner.space.region;
        // A record whose header no longer matches its checksum (damaged
        // media) cannot name its key: it is left out rather than returned
        // as garbage or read past the file.
        let keys = offsets
            .into_iter()
            .filter_map(|offset| {
                let at = PmemOffset(offset);
                let header = record::read_header(region, at);
                (region.contains(at, header.encoded_bytes())
                    && record::header_intact(region, at, &header))
                .then(|| record::key(region, at, &header).to_vec())
            })
            .collect();
        (next, keys)
    }

    pub fn stats(&self) -> Stats {
        let space = &self.inner.space;
        Stats {
            keys: self.len(),
            file_bytes: space.region.len(),
            live_bytes: space.live_bytes(),
            block_bytes: space.block_bytes,
            blocks_total: space.block_count(),
            blocks_free: space.free_blocks(),
            blocks_freed: space.blocks_freed.load(Ordering::Relaxed),
            compactions: self.inner.compactions.load(Ordering::Relaxed),
            records_moved: self.inner.records_moved.load(Ordering::Relaxed),
            syncs: self.inner.syncer.syncs.load(Ordering::Relaxed),
            mode: match space.region.mode() {
                engram_pmem::Mode::Dax => "dax",
                engram_pmem::Mode::Emulated => "emulated",
            },
            flush: space.region.flush_instruction().name(),
            index_images: self.inner.index_images.load(Ordering::Relaxed),
        }
    }

    /// The integrity layer's counters (`None` when it is off).
    pub fn integrity_stats(&self) -> Option<IntegrityStats> {
        self.inner.space.integrity.as_ref().map(|i| i.stats())
    }

    /// Refreshes the checksums and parity of every stale page now; returns
    /// how many (0 when integrity is off).
    pub fn refresh_redundancy_now(&self) -> u64 {
        self.inner
            .space
            .integrity
            .as_ref()
            .map_or(0, |i| i.refresh_now())
    }

    /// Brings redundancy up to date, verifies every page and stripe,
    /// rebuilds what parity can rebuild, and names the keys whose records
    /// lie on pages that could not be rebuilt (reads of those keys fail
    /// with [`Error::Unrepairable`]; everything else stays readable).
    pub fn scrub_now(&self) -> Result<ScrubReport> {
        let Some(integrity) = &self.inner.space.integrity else {
            return Err(Error::InvalidOption(
                "scrubbing needs integrity lazy or inline (it is off)".into(),
            ));
        };
        let started = Instant::now();
        let outcome = integrity.scrub_now();
        let bad = integrity.unrepairable_offsets();
        let affected = self.inner.records_on_pages(&bad);
        Ok(ScrubReport {
            pages_checked: outcome.pages_checked,
            pages_stale: outcome.pages_stale,
            corrupt_pages: outcome.corrupt.len() as u64,
            repaired_pages: outcome
                .repaired
                .iter()
                .map(|p| p * engram_integrity::layout::PAGE_BYTES)
                .collect(),
            unrepairable_pages: bad,
            parity_rewritten: outcome.parity_rewritten,
            metadata_rebuilt: outcome.metadata_rebuilt,
            affected_keys: affected,
            duration: started.elapsed(),
        })
    }

    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner.report.clone()
    }

    /// Runs compaction now until no block qualifies, and waits for the
    /// freed blocks to return to the free set. Returns blocks compacted.
    pub fn compact_now(&self) -> Result<u64> {
        let mut total = 0;
        loop {
            let compacted = compaction::round(&self.inner, usize::MAX);
            total += compacted as u64;
            if compacted == 0 {
                break;
            }
        }
        self.inner.space.settle_frees(SETTLE_FREES_PATIENCE);
        Ok(total)
    }

    /// Writes an index image now (normally the background thread does,
    /// as set by [`crate::IndexImageOptions`]), so that recovery reads it and
    /// scans only the blocks claimed after. Writers keep running.
    pub fn write_index_image(&self) -> Result<IndexImageReport> {
        if !self.inner.options.index_image.enabled {
            return Err(Error::InvalidOption(
                "index images are disabled (index_image.enabled is false)".into(),
            ));
        }
        self.inner.write_index_image()
    }

    /// Makes everything written so far durable against power loss.
    pub fn sync(&self) -> Result<()> {
        self.inner.syncer.sync_now(&self.inner.space.region)
    }

    /// Sets or lifts the data-file quota (tests of the full-disk path).
    pub fn set_file_limit(&self, limit_bytes: Option<u64>) {
        self.inner.space.region.set_file_limit(limit_bytes);
    }

    /// Clean shutdown: stops background work, syncs everything, and writes
    /// an index image if anything changed since the last (so the next open
    /// scans almost nothing; a failure there only costs that open time).
    pub fn close(mut self) -> Result<()> {
        self.stop_background();
        // Data first: the integrity file's clean close vouches for it.
        let result = self.sync();
        let images = &self.inner.options.index_image;
        if result.is_ok()
            && images.enabled
            && images.on_close
            && self.inner.written_since_index_image()
        {
            if let Err(error) = self.inner.write_index_image() {
                log::warn!(
                    "index image at close failed (the next open scans every block): {error}"
                );
            }
        }
        let integrity = self
            .inner
            .space
            .integrity
            .as_ref()
            .map_or(Ok(()), |i| i.close());
        self.finish();
        result.and(integrity.map_err(Error::from))
    }

    /// Abandons the store as a process crash would: background threads are
    /// stopped and nothing is synced or cleaned up. For tests and benchmarks.
    #[doc(hidden)]
    pub fn crash(mut self) {
        self.stop_background();
        if let Some(integrity) = &self.inner.space.integrity {
            integrity.abandon();
        }
        self.finish();
    }

    fn stop_background(&mut self) {
        self.inner.shutdown.store(true, Ordering::Release);
        {
            let _guard = self.inner.wake.0.lock();
            self.inner.wake.1.notify_all();
        }
        self.inner.space.stop_provisioner();
        for handle in self.background.drain(..) {
            let _ = handle.join();
        }
    }

    fn finish(&mut self) {
        self.inner.space.close();
        self.finished = true;
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.stop_background();
        if self.inner.syncer.policy() != SyncPolicy::Never {
            let _ = self.sync();
        }
        if let Some(integrity) = &self.inner.space.integrity {
            // Without a data sync (policy never) the session stays open, as
            // after a crash: the marks, not a clean close, are then trusted.
            if self.inner.syncer.policy() != SyncPolicy::Never {
                let _ = integrity.close();
            } else {
                integrity.abandon();
            }
        }
        self.finish();
    }
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("removing stale integrity file", path, e))
        }
        _ => Ok(()),
    }
}

/// Starts one of the store's background threads, on the background cores
/// ([`engram_threads`]).
fn spawn(name: &str, work: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    engram_threads::spawn(name, work).expect("spawning a background thread")
}

fn periodic_sync(inner: &Inner, period: Duration) {
    while inner.sleep(period) {
        // A failure is retried next period; writers are not blocked by it.
        let _ = inner.syncer.sync_now(&inner.space.region);
    }
}

impl Inner {
    /// A background thread's pause: sleeps for `pause`, woken early only by
    /// shutdown. False when the store is shutting down (the thread ends).
    pub fn sleep(&self, pause: Duration) -> bool {
        let deadline = Instant::now() + pause;
        let mut guard = self.wake.0.lock();
        while !self.shutdown.load(Ordering::Acquire) {
            if self.wake.1.wait_until(&mut guard, deadline).timed_out() {
                return !self.shutdown.load(Ordering::Acquire);
            }
        }
        false
    }
}

/// Where the images stand after recovery: the next image replaces the file
/// recovery did not use (an older or unusable image), and numbers go on
/// from the largest seen.
fn image_state_after_recovery(
    image: Option<&index_image::LoadedImage>,
    report: &RecoveryReport,
) -> ImageState {
    match image {
        Some(image) if report.index_image.image.is_some() => ImageState {
            next_slot: 1 - image.slot,
            last_number: image.header.number,
            floor: image.header.floor_generation,
            next_seq: image.header.next_seq,
        },
        // Unusable against these blocks: overwrite it first.
        Some(image) => ImageState {
            next_slot: image.slot,
            last_number: image.header.number,
            ..ImageState::default()
        },
        None => ImageState::default(),
    }
}

fn region_options(options: &Options) -> RegionOptions {
    RegionOptions {
        mode: options.mode,
        flush: options.flush,
        reserve_bytes: options.reserve_bytes,
        populate: options.populate,
        file_limit_bytes: options.file_limit_bytes,
        observer: options.observer.as_ref().map(|observer| observer.0.clone()),
        fine_writeback: options.fine_writeback || options.sync == SyncPolicy::Always,
    }
}

/// Creates an empty store: written under a temporary name, synced, then
/// renamed into place, so a crash during creation never leaves a half-made
/// data file behind the real name.
fn create_data_file(dir: &Path, path: &Path, options: &Options) -> Result<()> {
    let temporary: PathBuf = dir.join(format!("{DATA_FILE}.tmp"));
    if temporary.exists() {
        std::fs::remove_file(&temporary).map_err(|e| Error::io("removing stale", &temporary, e))?;
    }
    let block_bytes = options.block_size_bytes;
    let initial_blocks = options.grow_bytes.div_ceil(block_bytes).max(1);
    {
        let region = Region::create(
            &temporary,
            (initial_blocks + 1) * block_bytes,
            // A new file is made durable by msync and rename, not by the
            // flush discipline; an observer watches the file once it exists.
            RegionOptions {
                observer: None,
                ..region_options(options)
            },
        )
        .map_err(Error::from_growth)?;
        let store_id = hash_key(
            format!(
                "{:?}{}{:?}",
                std::time::SystemTime::now(),
                std::process::id(),
                dir
            )
            .as_bytes(),
        );
        Superblock::format(&region, block_bytes, initial_blocks, store_id);
        region.sync_all()?;
    }
    std::fs::rename(&temporary, path)
        .map_err(|e| Error::io("renaming new data file to", path, e))?;
    engram_pmem::sync_directory(dir).map_err(|e| Error::io("syncing data directory", dir, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CompactionOptions, ModeChoice};

    fn small() -> Options {
        Options {
            mode: ModeChoice::Emulated,
            block_size_bytes: 64 << 10,
            grow_bytes: 256 << 10,
            reserve_bytes: 1 << 32,
            populate: false,
            compaction: CompactionOptions {
                interval: Duration::from_millis(5),
                ..CompactionOptions::default()
            },
            ..Options::default()
        }
    }

    #[test]
    fn put_get_delete_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), small()).unwrap();
        assert!(store.put(b"a", b"1").unwrap());
        assert!(!store.put(b"a", b"2").unwrap());
        assert!(store.put(b"", b"").unwrap());
        assert_eq!(store.get(b"a").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(store.get(b"").unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(&*store.get_ref(b"a").unwrap().unwrap(), b"2");
        assert_eq!(store.get(b"missing").unwrap(), None);
        assert_eq!(store.len(), 2);
        assert!(store.delete(b"").unwrap());
        assert!(!store.delete(b"").unwrap());
        store.close().unwrap();
        let store = Store::open(dir.path(), small()).unwrap();
        assert_eq!(store.len(), 1);
        assert_eq!(store.get(b"a").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(store.get(b"").unwrap(), None);
        assert_eq!(store.recovery_report().records, 1);
    }

    #[test]
    fn many_blocks_extents_and_crash_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), small()).unwrap();
        let big = vec![7u8; 300 << 10];
        for i in 0..5000u32 {
            store
                .put(&i.to_le_bytes(), &i.to_be_bytes().repeat(20))
                .unwrap();
        }
        store.put(b"big", &big).unwrap();
        store.put(b"big2", &big[..100 << 10]).unwrap();
        store.put(b"big2", b"small now").unwrap();
        for i in 0..5000u32 {
            if i % 3 == 0 {
                store.delete(&i.to_le_bytes()).unwrap();
            }
        }
        store.crash();
        let store = Store::open(dir.path(), small()).unwrap();
        assert_eq!(store.get(b"big").unwrap().unwrap(), big);
        assert_eq!(store.get(b"big2").unwrap().unwrap(), b"small now");
        for i in 0..5000u32 {
            let expected = (i % 3 != 0).then(|| i.to_be_bytes().repeat(20));
            assert_eq!(store.get(&i.to_le_bytes()).unwrap(), expected, "key {i}");
        }
        assert_eq!(store.len(), 5000 - 1667 + 2);
    }

    #[test]
    fn counters_update_in_place_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), small()).unwrap();
        store.put(b"c", &[0u8; 16]).unwrap();
        assert_eq!(store.incr_by(b"c", 8, 5).unwrap(), 5);
        assert_eq!(store.incr_by(b"c", 8, -2).unwrap(), 3);
        assert_eq!(store.compare_and_swap(b"c", 0, 0, 9).unwrap(), 0);
        assert_eq!(store.compare_and_swap(b"c", 0, 0, 10).unwrap(), 9);
        assert!(matches!(
            store.incr_by(b"c", 12, 1),
            Err(Error::FieldOutOfRange { .. })
        ));
        assert!(matches!(
            store.incr_by(b"c", 16, 1),
            Err(Error::FieldOutOfRange { .. })
        ));
        assert!(matches!(
            store.incr_by(b"nope", 0, 1),
            Err(Error::KeyNotFound)
        ));
        assert_eq!(store.get(b"c").unwrap().unwrap()[8..], 3u64.to_le_bytes());
        store.crash();
        let store = Store::open(dir.path(), small()).unwrap();
        let value = store.get(b"c").unwrap().unwrap();
        assert_eq!(value[..8], 9u64.to_le_bytes());
        assert_eq!(value[8..], 3u64.to_le_bytes());
    }

    #[test]
    fn overwrites_are_compacted_and_the_file_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), small()).unwrap();
        let value = vec![1u8; 1000];
        for round in 0..20u8 {
            for key in 0..2000u32 {
                let mut v = value.clone();
                v[0] = round;
                store.put(&key.to_le_bytes(), &v).unwrap();
            }
        }
        store.compact_now().unwrap();
        let stats = store.stats();
        let live = 2000 * (4 + 1000) as u64;
        assert!(
            stats.file_bytes < live * 5 / 2,
            "file {} live {live}",
            stats.file_bytes
        );
        for key in 0..2000u32 {
            assert_eq!(store.get(&key.to_le_bytes()).unwrap().unwrap()[0], 19);
        }
        store.crash();
        let store = Store::open(dir.path(), small()).unwrap();
        assert_eq!(store.len(), 2000);
        for key in 0..2000u32 {
            assert_eq!(store.get(&key.to_le_bytes()).unwrap().unwrap()[0], 19);
        }
    }

    #[test]
    fn scan_visits_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), small()).unwrap();
        for i in 0..3000u32 {
            store.put(&i.to_le_bytes(), b"v").unwrap();
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        loop {
            let (next, keys) = store.scan(cursor, 10);
            seen.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        assert_eq!(seen.len(), 3000);
    }

    #[test]
    fn second_open_of_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _store = Store::open(dir.path(), small()).unwrap();
        assert!(matches!(
            Store::open(dir.path(), small()),
            Err(Error::Locked { .. })
        ));
    }

    /// A crash between writing a new version and publishing it (so the old
    /// one is still live too): recovery keeps the one with the larger seq.
    #[test]
    fn two_live_versions_resolve_to_the_newer_write() {
        use crate::write::Writer;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), small()).unwrap();
        store.put(b"newer-unpublished", b"old").unwrap();
        store.put(b"older-unpublished", b"current").unwrap();
        // A newer version written but not yet published when the crash hits.
        store
            .inner
            .append(b"newer-unpublished", b"new", None, Writer::Application)
            .unwrap();
        // A stale version (smaller seq) that lost a race and was not yet retired.
        store
            .inner
            .append(b"older-unpublished", b"stale", Some(0), Writer::Application)
            .unwrap();
        assert_eq!(store.get(b"newer-unpublished").unwrap().unwrap(), b"old");
        store.crash();
        let store = Store::open(dir.path(), small()).unwrap();
        assert_eq!(store.get(b"newer-unpublished").unwrap().unwrap(), b"new");
        assert_eq!(
            store.get(b"older-unpublished").unwrap().unwrap(),
            b"current"
        );
        assert_eq!(store.recovery_report().superseded, 2);
        assert_eq!(store.len(), 2);
        // Recovery retired the losers durably: a second recovery finds none.
        store.crash();
        let store = Store::open(dir.path(), small()).unwrap();
        assert_eq!(store.recovery_report().superseded, 0);
        assert_eq!(store.get(b"newer-unpublished").unwrap().unwrap(), b"new");
    }

    #[test]
    fn always_sync_shares_msyncs_between_concurrent_writers() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            sync: SyncPolicy::Always,
            ..small()
        };
        let store = Store::open(dir.path(), options).unwrap();
        let puts_per_thread = 200u32;
        std::thread::scope(|scope| {
            for thread in 0..4u32 {
                let store = &store;
                scope.spawn(move || {
                    for i in 0..puts_per_thread {
                        store
                            .put(&(thread * 1000 + i).to_le_bytes(), b"durable")
                            .unwrap();
                    }
                });
            }
        });
        let syncs = store.stats().syncs;
        assert!(syncs >= 1, "always must msync");
        assert!(
            syncs <= 4 * puts_per_thread as u64,
            "at most one msync per write"
        );
        assert_eq!(store.len(), 800);
    }

    #[test]
    fn periodic_sync_runs_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            sync: SyncPolicy::Periodic(Duration::from_millis(5)),
            ..small()
        };
        let store = Store::open(dir.path(), options).unwrap();
        store.put(b"k", b"v").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.stats().syncs < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(store.stats().syncs >= 2, "periodic syncer did not run");
        let never = tempfile::tempdir().unwrap();
        let store = Store::open(never.path(), small()).unwrap();
        store.put(b"k", b"v").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(store.stats().syncs, 0, "never must not msync on its own");
    }

    #[test]
    fn sync_policy_names_parse() {
        assert_eq!("never".parse::<SyncPolicy>().unwrap(), SyncPolicy::Never);
        assert_eq!("always".parse::<SyncPolicy>().unwrap(), SyncPolicy::Always);
        assert_eq!(
            "periodic:250".parse::<SyncPolicy>().unwrap(),
            SyncPolicy::Periodic(Duration::from_millis(250))
        );
        assert!("periodic:0".parse::<SyncPolicy>().is_err());
        assert!("sometimes".parse::<SyncPolicy>().is_err());
    }

    /// Found by the disk-full tests: with another thread constantly pinned
    /// in reads, freed blocks used to stay pending after `compact_now`, and
    /// a store at its quota refused puts though half its blocks were dead.
    #[test]
    fn space_freed_by_deletes_is_usable_at_the_quota_despite_busy_readers() {
        let other_dir = tempfile::tempdir().unwrap();
        let other = Store::open(other_dir.path(), small()).unwrap();
        other.put(b"x", b"y").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            file_limit_bytes: Some(4 << 20),
            write_lanes: 2,
            ..small()
        };
        let store = Store::open(dir.path(), options).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    other.get(b"x").unwrap();
                }
            });
            let mut keys = 0u32;
            while store.put(&keys.to_le_bytes(), &[7u8; 1000]).is_ok() {
                keys += 1;
            }
            for key in 0..keys / 2 {
                store.delete(&key.to_le_bytes()).unwrap();
            }
            store.compact_now().unwrap();
            for key in 0..keys / 4 {
                store
                    .put(&key.to_le_bytes(), &[8u8; 1000])
                    .expect("space freed by deletes is reused");
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
}
