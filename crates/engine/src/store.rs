//! The public store handle: opening, the API, shutdown.
//!
//! ## Threads and ownership
//!
//! `Store` wraps an `Arc<StoreState>` (`store_state.rs`) shared with its
//! background threads: the space reserve (with `grow_ahead`), the compactor
//! (unless disabled), the periodic syncer (with `SyncPolicy::Periodic` on
//! emulated memory) and the index image writer (unless disabled).
//! Application threads call the API directly; no operation hands work to
//! another thread and waits for it, except `SyncPolicy::Always`, whose group
//! commit lets one writer's `msync` cover its neighbours. The API calls the
//! functions of `read`, `write`, `compaction`, `image_writer` and `scrub`.
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
use std::time::Duration;

use engram_integrity::{Integrity, IntegrityMode, IntegrityStats};
use engram_pmem::{Mode, Region, RegionOptions};
use parking_lot::{Condvar, Mutex};

use crate::image_writer::{self, IndexImageReport};
use crate::index::{hash_key, Index, PrefetchStep};
use crate::index_image::{self, ImageState};
use crate::lanes::{Lane, Lanes};
use crate::lock::DirectoryLock;
use crate::read::{self, ValueRef};
use crate::recovery::{self, ImageRecovery, RecoveryReport};
use crate::retirement::Retirement;
use crate::scrub::{self, ScrubReport};
use crate::space::Space;
use crate::store_state::StoreState;
use crate::superblock::Superblock;
use crate::sync::Syncer;
use crate::write::WordUpdate;
use crate::{append, compaction, write, Error, Options, Result, SyncPolicy};
use engram_threads::StripedCounter;

/// The data file inside a store's directory.
pub const DATA_FILE: &str = "values.pmem";
/// How long `compact_now` waits for freed blocks to clear their epoch.
const SETTLE_FREES_PATIENCE: Duration = Duration::from_secs(2);

/// An open store. Share it between threads by reference or `Arc`
/// (`Store: Send + Sync`); every method takes `&self`.
pub struct Store {
    state: Arc<StoreState>,
    background: Vec<JoinHandle<()>>,
    finished: bool,
    _lock: DirectoryLock,
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
    /// Record bytes appended since open (writes and compaction copies).
    pub appended_bytes: u64,
    /// Value words updated in place since open (counters, SETBIT).
    pub in_place_updates: u64,
    pub syncs: u64,
    pub mode: &'static str,
    pub flush: &'static str,
    /// Index images written since open.
    pub index_images: u64,
    /// Lazy retirement's rounds since open, and those that synced the
    /// whole file (`retirement.rs`; both 0 without lazy retirement).
    pub retirement_rounds: u64,
    pub retirement_syncs: u64,
    /// Retired records given their DELETED bit by a round, and those a
    /// round spared it (their dead block's FREE header made them dead).
    pub retirement_bits_set: u64,
    pub retirement_bits_spared: u64,
}

impl Store {
    /// Opens the store in `dir`, creating the directory and an empty store if
    /// it holds none. Recovery (after a clean shutdown or a crash alike)
    /// loads the newest index image, if any, scans the blocks claimed since
    /// (all of them without an image) in parallel, and rebuilds the index.
    pub fn open(dir: impl AsRef<Path>, mut options: Options) -> Result<Store> {
        options.validate()?;
        // Not kept past recovery: what it gathered belongs to its owner.
        let visitor = options.recovery_visitor.take();
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
        // Lazy retirement writes tombstones, which only format 2 has, and
        // saves nothing on DAX.
        // Implied by `SyncPolicy::Always`, where each acknowledgement waits
        // for a sync: an embedder gets the server's `always` write path.
        let wants_lazy = options.lazy_retirement || options.sync == SyncPolicy::Always;
        let lazy_retirement =
            wants_lazy && region.mode() == Mode::Emulated && superblock.format_version >= 2;
        if wants_lazy && !lazy_retirement && superblock.format_version < 2 {
            log::info!(
                "{}: format {} store, retiring records in place (lazy retirement needs format 2)",
                path.display(),
                superblock.format_version
            );
        }
        let space = Arc::new(Space::new(
            region,
            superblock,
            options.grow_bytes,
            options.grow_ahead,
            integrity.clone(),
            lazy_retirement,
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
            visitor.as_ref().map(|v| &*v.0),
        )?;
        // What recovery wrote (losers' DELETED bits, dead extents' FREE
        // headers) reaches the media before any block is reused: a block
        // handed out now may be written and synced by a lane at once, and
        // the tombstone or newer version it held must not vanish before
        // the versions it outranked are durably retired.
        space.region.sync_all()?;
        let image_state = ImageState::after_recovery(
            image.as_ref(),
            recovered.report.index_image.image.is_some(),
        );
        drop(image);
        recovered.report.integrity = integrity_report;
        recovered.report.repaired_pages = integrity
            .as_ref()
            .map_or_else(Vec::new, |i| i.repaired_offsets());
        let state = Arc::new(StoreState {
            syncer: Syncer::new(options.sync, space.region.mode()),
            lanes: Lanes::new(Options::threads_or_cores(options.write_lanes, 2)),
            compaction_lane: Mutex::new(Lane {
                compaction: true,
                ..Lane::default()
            }),
            tail: Mutex::new(Vec::new()),
            tail_sync: Mutex::new(()),
            seq: AtomicU64::new(recovered.next_seq),
            keys: {
                let keys = StripedCounter::new();
                keys.add(recovered.keys as i64);
                keys
            },
            appended_bytes: StripedCounter::new(),
            in_place_updates: StripedCounter::new(),
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
        if state.options.grow_ahead {
            let state = Arc::clone(&state);
            background.push(spawn("engram-space-reserve", move || {
                let compaction = &state.options.compaction;
                state.space.run_provisioner(|space| {
                    !compaction.enabled || space.may_grow(compaction.max_space_amplification)
                })
            }));
        }
        if state.options.compaction.enabled {
            let state = Arc::clone(&state);
            background.push(spawn("engram-compact", move || compaction::run(&state)));
        }
        if let SyncPolicy::Periodic(period) = state.syncer.policy() {
            let state = Arc::clone(&state);
            background.push(spawn("engram-sync", move || periodic_sync(&state, period)));
        }
        if state.space.retirement.is_some() {
            let state = Arc::clone(&state);
            background.push(spawn("engram-retirement", move || {
                retirement_rounds(&state)
            }));
        }
        if state.options.index_image.enabled {
            let state = Arc::clone(&state);
            background.push(spawn("engram-index-image", move || {
                image_writer::run(&state)
            }));
        }
        Ok(Store {
            state,
            background,
            finished: false,
            _lock: lock,
        })
    }

    /// Inserts or replaces; `Ok(true)` when the key is new. On return the
    /// write is durable in the configured mode.
    /// A new key's access field is 0; a replaced key keeps its own.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        write::put(&self.state, key, value, |old| old.unwrap_or(0))
    }

    /// `put` of a value of `value_len` bytes that `write` writes piece by
    /// piece, without the caller building it: a large value goes into the
    /// store as it is written (a piece may be borrowed from this store's
    /// own values). `write` must write exactly `value_len` bytes; more or
    /// fewer is a bug in the caller, and panics.
    pub fn put_written(
        &self,
        key: &[u8],
        value_len: usize,
        write: impl FnOnce(&mut crate::record::ValueWriter<'_>),
    ) -> Result<bool> {
        write::put_written(&self.state, key, value_len, write)
    }

    /// `put`, with the key's access field set to `access(old)` (old: None
    /// for a new key). The field is 24 bits (`ACCESS_BITS`) the engine
    /// keeps beside each key in DRAM, never persisted, for the layer above
    /// to give a meaning (the keyspace's LRU clock or LFU counter).
    pub fn put_with_access(
        &self,
        key: &[u8],
        value: &[u8],
        access: impl FnOnce(Option<u32>) -> u32,
    ) -> Result<bool> {
        write::put(&self.state, key, value, access)
    }

    /// The value of `key`, copied out. Verifies the record's checksum.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        read::get(&self.state, key, |old| old)
    }

    /// The keys whose index hash is `hash` (the XXH3 of the key, as
    /// [`crate::RecoveredKey`]'s visitor is told): usually one, more when
    /// keys collide, none when no such key is indexed now. For a layer
    /// that kept only a key's hash (the keyspace's expiry index, filled
    /// after a restart from what recovery saw).
    pub fn keys_with_hash(&self, hash: u64) -> Vec<Vec<u8>> {
        read::keys_with_hash(&self.state, hash)
    }

    /// The value of `key` in place, without copying. Verifies the checksum.
    pub fn get_ref(&self, key: &[u8]) -> Result<Option<ValueRef<'_>>> {
        read::get_ref(&self.state, key, |old| old)
    }

    /// `get`, changing the key's access field to `touch(old)` (stored only
    /// if it changes).
    pub fn get_touching(
        &self,
        key: &[u8],
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<Option<Vec<u8>>> {
        read::get(&self.state, key, touch)
    }

    /// `get_ref`, changing the key's access field to `touch(old)` (stored
    /// only if it changes).
    pub fn get_ref_touching(
        &self,
        key: &[u8],
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<Option<ValueRef<'_>>> {
        read::get_ref(&self.state, key, touch)
    }

    /// `key`'s access field (None: no such key), read without changing it.
    pub fn access(&self, key: &[u8]) -> Option<u32> {
        read::access(&self.state, key)
    }

    /// Sets `key`'s access field to `touch(old)`; false if there is no
    /// such key.
    pub fn touch(&self, key: &[u8], touch: impl FnOnce(u32) -> u32) -> bool {
        read::lookup_touching(&self.state, key, touch).is_some()
    }

    /// Up to `count` keys and their access fields from a random place in
    /// the index that `start` picks (for sampled eviction: pass a random
    /// number). Cheap: one or a few shards' read locks.
    pub fn sample(&self, start: u64, count: usize) -> Vec<(Vec<u8>, u32)> {
        read::sample(&self.state, start, count)
    }

    /// Bytes of live records (what `stats().live_bytes` reports), read
    /// without gathering the other statistics.
    pub fn live_bytes(&self) -> u64 {
        self.state.space.live_bytes()
    }

    /// Writes several keys (Some: put, None: delete) as one atomic batch:
    /// after a crash, all of it or none. Each key's outcome (a new key for
    /// a put, existed for a delete), or `Ok(None)` when this store cannot
    /// make the batch atomic by itself: only under lazy retirement
    /// (`Options::lazy_retirement`, emulated memory), and only a batch that
    /// fits a log block. `access` sets a put key's access field as in
    /// [`Store::put_with_access`].
    pub fn write_batch(
        &self,
        writes: &[(&[u8], Option<&[u8]>)],
        access: impl Fn(Option<u32>) -> u32,
    ) -> Result<Option<Vec<bool>>> {
        write::write_batch(&self.state, writes, access)
    }

    /// The index's hash of `key`, for [`Store::prefetch`].
    pub fn key_hash(key: &[u8]) -> u64 {
        hash_key(key)
    }

    /// Starts loading one of the lines a lookup of the key with `hash`
    /// ([`Store::key_hash`]) will miss on (`PrefetchStep`: its shard's
    /// lock, then its bucket, then its record, each needing the one
    /// before in cache to be cheap): for a caller that knows the keys it
    /// will read or write a little later.
    pub fn prefetch(&self, hash: u64, step: PrefetchStep) {
        let state = &self.state;
        state.index.prefetch(hash, step, state.region());
    }

    /// Removes `key`; `Ok(true)` when it existed. Durable on return.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        write::delete(&self.state, key)
    }

    /// Atomically adds `delta` (wrapping) to the little-endian u64 at
    /// `field_offset` of the key's value, in place; returns the new value.
    pub fn incr_by(&self, key: &[u8], field_offset: u64, delta: i64) -> Result<u64> {
        let delta = delta as u64;
        let found = self.update_word(key, field_offset, |word| Some(word.wrapping_add(delta)))?;
        Ok(found.wrapping_add(delta))
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
        self.update_word(key, field_offset, |word| (word == expected).then_some(new))
    }

    /// `update_word_with` of the word alone: `update(found)` gives the
    /// new word (None: leave it); the key's access field is not touched.
    /// Returns the word found; a missing key is an error.
    fn update_word(
        &self,
        key: &[u8],
        field_offset: u64,
        update: impl Fn(u64) -> Option<u64>,
    ) -> Result<u64> {
        let word = |value: &[u8]| {
            let field = field_offset as usize..field_offset as usize + 8;
            u64::from_le_bytes(value[field].try_into().expect("a checked field"))
        };
        let found = write::update_word(
            &self.state,
            key,
            field_offset,
            |access| access,
            |value| update(word(value)).map_or(WordUpdate::Keep, WordUpdate::Set),
        )?;
        found.ok_or(Error::KeyNotFound)
    }

    /// Reads `key`'s value and changes one aligned 8-byte word of it, in
    /// one lookup: `decide` sees the value in place (the word at
    /// `field_offset` included) and says whether to store a new word,
    /// keep it, or decline the value altogether; unless it declines, the
    /// key's access field becomes `touch(old)`. Atomic per key, as
    /// [`Store::compare_and_swap`]: `decide` runs again if another update
    /// changed the word meanwhile. Returns the word found, or None when
    /// the key is absent or `decide` declined. A field that is not an
    /// aligned word inside the value is an error, whatever `decide` says.
    pub fn update_word_with(
        &self,
        key: &[u8],
        field_offset: u64,
        touch: impl FnOnce(u32) -> u32,
        decide: impl FnMut(&[u8]) -> WordUpdate,
    ) -> Result<Option<u64>> {
        write::update_word(&self.state, key, field_offset, touch, decide)
    }

    pub fn len(&self) -> u64 {
        self.state.keys.get()
    }

    /// Takes a store-wide sequence number, for a layer that keeps records
    /// of its own (the collections' operation log) in one order with this
    /// store's writes.
    pub fn next_seq(&self) -> u64 {
        self.state.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// The sequence number the next write will take.
    pub fn peek_seq(&self) -> u64 {
        self.state.seq.load(Ordering::Relaxed)
    }

    /// Makes every later sequence number at least `at_least` (after a layer
    /// above recovered records numbered from this store's sequence).
    pub fn advance_seq(&self, at_least: u64) {
        self.state.seq.fetch_max(at_least, Ordering::Relaxed);
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One step of a cursor scan: keys from `cursor` on, about `count` of
    /// them, and the cursor to continue from (0 when done). Every key present
    /// for the whole scan is returned at least once; a key may be returned
    /// more than once only if it is deleted and written again meanwhile.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<Vec<u8>>) {
        read::scan(&self.state, cursor, count)
    }

    pub fn stats(&self) -> Stats {
        let space = &self.state.space;
        // A lazy retirement counter (0 without lazy retirement).
        let retirement = |counter: fn(&Retirement) -> &AtomicU64| {
            space
                .retirement
                .as_ref()
                .map_or(0, |r| counter(r).load(Ordering::Relaxed))
        };
        Stats {
            keys: self.len(),
            file_bytes: space.region.len(),
            live_bytes: space.live_bytes(),
            block_bytes: space.block_bytes,
            blocks_total: space.block_count(),
            blocks_free: space.free_blocks(),
            blocks_freed: space.blocks_freed.load(Ordering::Relaxed),
            compactions: self.state.compactions.load(Ordering::Relaxed),
            records_moved: self.state.records_moved.load(Ordering::Relaxed),
            appended_bytes: self.state.appended_bytes.get(),
            in_place_updates: self.state.in_place_updates.get(),
            syncs: self.state.syncer.syncs.load(Ordering::Relaxed),
            mode: match space.region.mode() {
                engram_pmem::Mode::Dax => "dax",
                engram_pmem::Mode::Emulated => "emulated",
            },
            flush: space.region.flush_instruction().name(),
            index_images: self.state.index_images.load(Ordering::Relaxed),
            retirement_rounds: retirement(|r| &r.rounds),
            retirement_syncs: retirement(|r| &r.syncs),
            retirement_bits_set: retirement(|r| &r.bits_set),
            retirement_bits_spared: retirement(|r| &r.bits_spared),
        }
    }

    /// The integrity layer's counters (`None` when it is off).
    pub fn integrity_stats(&self) -> Option<IntegrityStats> {
        self.state.space.integrity.as_ref().map(|i| i.stats())
    }

    /// Refreshes the checksums and parity of every stale page now; returns
    /// how many (0 when integrity is off).
    pub fn refresh_redundancy_now(&self) -> u64 {
        self.state
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
        scrub::scrub(&self.state)
    }

    pub fn recovery_report(&self) -> RecoveryReport {
        self.state.report.clone()
    }

    /// Runs compaction now until no block qualifies, and waits for the
    /// freed blocks to return to the free set. Returns blocks compacted.
    pub fn compact_now(&self) -> Result<u64> {
        let mut total = 0;
        loop {
            let compacted = compaction::round(&self.state, usize::MAX);
            total += compacted as u64;
            if compacted == 0 {
                break;
            }
        }
        self.state.space.settle_frees(SETTLE_FREES_PATIENCE);
        Ok(total)
    }

    /// Writes an index image now (normally the background thread does,
    /// as set by [`crate::IndexImageOptions`]), so that recovery reads it and
    /// scans only the blocks claimed after. Writers keep running.
    pub fn write_index_image(&self) -> Result<IndexImageReport> {
        if !self.state.options.index_image.enabled {
            return Err(Error::InvalidOption(
                "index images are disabled (index_image.enabled is false)".into(),
            ));
        }
        image_writer::write_image(&self.state)
    }

    /// Makes everything written so far durable against power loss.
    /// Under lazy retirement, that is the log written since the last sync
    /// (what recovery needs; the retirement rounds write the rest).
    pub fn sync(&self) -> Result<()> {
        append::sync_written(&self.state)
    }

    /// Whether the data file is staged (`Options::staged`): a write
    /// survives even a process crash only once a sync has copied it out.
    pub fn is_staged(&self) -> bool {
        self.state.space.region.is_staged()
    }

    /// Whether lazy retirement's rounds order their bits against power
    /// loss (a whole-file sync each round; on by default). The owner turns
    /// it off while its writes are not promised to survive power loss
    /// (`retirement.rs`). Nothing without lazy retirement.
    ///
    /// Turned on, the whole file is synced first: words updated in place
    /// while it was off named no range for the tail syncs
    /// (`write::update_word`), and a later in-place update of one of
    /// those records does not sync its IN_PLACE flag again. (Should that
    /// sync fail, the next retirement round's whole-file sync covers
    /// them.)
    pub fn set_power_fail_ordering(&self, on: bool) {
        if let Some(retirement) = &self.state.space.retirement {
            if on && !retirement.power_fail_ordering() {
                match self.state.space.region.sync_all() {
                    Ok(()) => {
                        self.state.syncer.syncs.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => log::warn!(
                        "syncing the data file as writes become ordered against power loss: {error}"
                    ),
                }
            }
            retirement.set_power_fail_ordering(on);
        }
    }

    /// Sets or lifts the data-file quota (tests of the full-disk path).
    pub fn set_file_limit(&self, limit_bytes: Option<u64>) {
        self.state.space.region.set_file_limit(limit_bytes);
    }

    /// Clean shutdown: stops background work, syncs everything, and writes
    /// an index image if anything changed since the last (so the next open
    /// scans almost nothing; a failure there only costs that open time).
    pub fn close(mut self) -> Result<()> {
        self.stop_background();
        // Data first: the integrity file's clean close vouches for it.
        let result = if self.state.space.retirement.is_some() {
            // Everything, not just the tail: the queued bits a last round
            // sets included, so the next open finds fewer losers.
            self.state
                .space
                .retirement_round()
                .and_then(|()| Ok(self.state.space.region.sync_all()?))
        } else {
            self.sync()
        };
        let images = &self.state.options.index_image;
        if result.is_ok()
            && images.enabled
            && images.on_close
            && image_writer::written_since_last(&self.state)
        {
            if let Err(error) = image_writer::write_image(&self.state) {
                log::warn!(
                    "index image at close failed (the next open scans every block): {error}"
                );
            }
        }
        let integrity = self
            .state
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
        if let Some(integrity) = &self.state.space.integrity {
            integrity.abandon();
        }
        self.finish();
    }

    fn stop_background(&mut self) {
        self.state.shutdown.store(true, Ordering::Release);
        {
            let _guard = self.state.wake.0.lock();
            self.state.wake.1.notify_all();
        }
        self.state.space.stop_provisioner();
        for handle in self.background.drain(..) {
            let _ = handle.join();
        }
    }

    fn finish(&mut self) {
        self.state.space.close();
        self.finished = true;
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.stop_background();
        if self.state.syncer.policy() != SyncPolicy::Never {
            let _ = self.sync();
        }
        if let Some(integrity) = &self.state.space.integrity {
            // Without a data sync (policy never) the session stays open, as
            // after a crash: the marks, not a clean close, are then trusted.
            if self.state.syncer.policy() != SyncPolicy::Never {
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

fn periodic_sync(store: &StoreState, period: Duration) {
    while store.sleep(period) {
        // A failure is retried next period; writers are not blocked by it.
        let _ = append::sync_written(store);
    }
}

/// The `engram-retirement` thread: a round of lazy retirement
/// (`retirement.rs`) every `retirement_interval` while there is work.
fn retirement_rounds(store: &StoreState) {
    while store.sleep(store.options.retirement_interval) {
        let has_work = store
            .space
            .retirement
            .as_ref()
            .is_some_and(|retirement| retirement.has_work());
        if has_work {
            if let Err(error) = store.space.retirement_round() {
                // Retried next round; only space reuse waits meanwhile.
                log::warn!("retirement round failed: {error}");
            }
        }
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
        staged: options.staged || options.sync == SyncPolicy::Always,
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
    use std::time::Instant;

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
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), small()).unwrap();
        store.put(b"newer-unpublished", b"old").unwrap();
        store.put(b"older-unpublished", b"current").unwrap();
        // A newer version written but not yet published when the crash hits.
        write::append(&store.state, b"newer-unpublished", b"new", None).unwrap();
        // A stale version (smaller seq) that lost a race and was not yet retired.
        write::append(&store.state, b"older-unpublished", b"stale", Some(0)).unwrap();
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
