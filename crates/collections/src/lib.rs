//! # engram-collections: durable collections (DIPPER)
//!
//! Hashes, sets, sorted sets and lists live in DRAM ([`types`], held in
//! [`state`]). Every change is first a small logical record in a persistent
//! operation log ([`oplog`]), committed by persisting its sequence number
//! last; then it is applied to DRAM ([`apply`]). Readers and writers touch
//! only DRAM and the log.
//!
//! Checkpoints ([`checkpoint`]) run in the background without pausing
//! anyone: they swap the active and archived logs, replay the archived log
//! onto the previous checkpoint's images of the keys it touched, write the
//! new images to an engine store ([`images`]), and commit them all at once
//! by replacing a root; then the archived log is reused. Recovery loads the
//! images and replays the log written since (redo only, idempotent: it
//! writes nothing that a second recovery would disagree with).
//!
//! This follows DIPPER (Chen et al., sections 3 and 4) with one change: the
//! persistent shadow is not a copy of the DRAM structures updated in place,
//! but per-key images written only for keys that changed, so a checkpoint
//! costs what changed and the images sit in an ordinary engine store.
//!
//! ```
//! use engram_collections::{Collections, CollectionsOptions, Op, types::Object};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let c = Collections::open(dir.path(), CollectionsOptions::default())?;
//! c.write(vec![Op::SetAdd { key: b"tags".as_slice().into(), members: vec![b"a".as_slice().into()] }])?;
//! // Read-modify-write, atomic per key: read under the key's lock, decide ops.
//! let added = c.update(&[b"tags"], |keys| {
//!     let present = keys.get(b"tags").is_some_and(|e| matches!(&e.object, Object::Set(s) if s.contains(b"b")));
//!     let ops = if present { vec![] } else { vec![Op::SetAdd { key: b"tags".as_slice().into(), members: vec![b"b".as_slice().into()] }] };
//!     Ok((ops, !present))
//! })?;
//! assert!(added);
//! c.read(b"tags", |entry| assert_eq!(entry.map(|e| e.object.len()), Some(2)));
//! c.checkpoint_now()?;
//! c.close()?;
//! # Ok::<(), engram_collections::Error>(())
//! ```

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

pub mod apply;
pub mod checkpoint;
mod error;
pub mod images;
pub mod lazy_free;
pub mod op;
pub mod oplog;
mod pieces;
mod replay;
mod splice;
pub mod state;
pub mod types;
pub mod undo;
mod working;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engram_threads::PerCpu;
use parking_lot::{Condvar, Mutex, RwLock};

pub use checkpoint::{CheckpointMode, CheckpointReport};
pub use error::{Error, Result};
pub use op::Op;
pub use oplog::{OpLogOptions, Sequencer};
pub use state::{Access, Entry, Keys};
pub use undo::Undo;

use op::Bytes;
use oplog::OpLog;
use state::ShardedMap;

/// The engine store holding checkpoint images, inside the store's directory.
pub const IMAGES_DIR: &str = "images";

#[derive(Clone, Debug)]
pub struct CollectionsOptions {
    pub oplog: OpLogOptions,
    /// Options of the engine store that holds the images.
    pub images: engram_engine::Options,
    /// A checkpoint starts when the log written since the last one reaches
    /// this many bytes, or, when the last checkpoint wrote more bytes of
    /// images than that, as many as it wrote (up to
    /// [`MAX_CHECKPOINT_PACING`] times this): see
    /// `CollectionsState::checkpoint_threshold`.
    pub checkpoint_log_bytes: u64,
    pub checkpoints: CheckpointMode,
    /// Writers are slowed, gradually, when the log not yet checkpointed
    /// passes this multiple of `checkpoint_log_bytes` (checkpoints are not
    /// keeping up); never stopped. Not applied with manual checkpoints.
    pub backpressure_factor: u64,
    /// Threads decoding images at recovery (0: one per core).
    pub recovery_threads: usize,
    /// A list whose image is at least this many bytes, and which the log
    /// touched only with pushes, pops and trims that leave it non-empty,
    /// is checkpointed by splicing its old image (`splice.rs`) instead of
    /// decoding it. Below it decoding is as cheap; 0 splices every list
    /// (the tests do, to exercise it on small lists).
    pub splice_list_bytes: usize,
    /// A spliced list is written in pieces of at most this many bytes
    /// (`pieces.rs`): a checkpoint writes new pieces for the elements pushed
    /// since the last one and copies at most a piece's worth of old ones at
    /// either end. Smaller pieces copy less and name more runs.
    pub list_piece_bytes: usize,
    /// Testing: stop at chosen points as a crash would.
    #[doc(hidden)]
    pub faults: Faults,
}

/// Crash points for tests: the operation returns [`Error::InjectedCrash`]
/// at the chosen point, having done exactly what precedes it; the test then
/// abandons the store ([`Collections::crash`]) and recovers.
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct Faults {
    pub checkpoint_crash_at: Option<checkpoint::Step>,
    /// Recovery stops after deleting this many garbage images.
    pub recovery_crash_after_deletes: Option<usize>,
}

impl Default for CollectionsOptions {
    fn default() -> Self {
        CollectionsOptions {
            oplog: OpLogOptions::default(),
            images: engram_engine::Options::default(),
            checkpoint_log_bytes: 64 << 20,
            checkpoints: CheckpointMode::Background,
            backpressure_factor: 4,
            recovery_threads: 0,
            splice_list_bytes: 64 << 10,
            list_piece_bytes: 4 << 20,
            faults: Faults::default(),
        }
    }
}

/// A sequencer of its own, for a collections store not sharing one with
/// an engine store.
pub struct OwnSequencer(AtomicU64);

impl OwnSequencer {
    /// A sequencer whose first number is `first` (tests start logs of
    /// their own at 1).
    pub fn starting_at(first: u64) -> OwnSequencer {
        OwnSequencer(AtomicU64::new(first))
    }
}

impl Sequencer for OwnSequencer {
    fn next_seq(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
    fn peek_seq(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What recovery did.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub root: u64,
    pub images_loaded: u64,
    pub records_replayed: u64,
    pub garbage_images_removed: u64,
    /// Opening the images store (the engine's own recovery), part of
    /// `load_images`.
    pub images_store_open: Duration,
    /// The index image that store recovered from (`None`: a full scan).
    pub images_store_index_image: Option<u64>,
    pub load_images: Duration,
    pub replay: Duration,
    pub total: Duration,
}

/// A shared sequencer and how to advance it past recovered numbers.
pub type SharedSequencer<'a> = (Arc<dyn Sequencer>, &'a dyn Fn(u64));

/// Counters for INFO.
#[derive(Clone, Debug, Default)]
pub struct CollectionsStats {
    pub keys: u64,
    pub log: oplog::OpLogStats,
    pub log_bytes_since_checkpoint: u64,
    /// The log since the last checkpoint that starts the next one (see
    /// [`CollectionsOptions::checkpoint_log_bytes`]).
    pub checkpoint_threshold: u64,
    pub checkpoints: u64,
    pub checkpoint_running: bool,
    pub last_checkpoint: Option<CheckpointReport>,
    pub checkpointed_through: u64,
    pub backpressure_waits: u64,
    pub backpressure_wait_time: Duration,
}

/// What the [`Collections`] handle, its [`Writer`]s and its background
/// threads (checkpointer, log reserve) share.
pub(crate) struct CollectionsState {
    dir: PathBuf,
    log: OpLog,
    images: engram_engine::Store,
    map: ShardedMap,
    sequencer: Arc<dyn Sequencer>,
    options: CollectionsOptions,
    /// Stop-the-world mode only: writers hold it shared, a checkpoint
    /// exclusively.
    world: RwLock<()>,
    /// Held for a whole checkpoint: never taken by readers of stats.
    checkpoint: Mutex<checkpoint::State>,
    /// The committed checkpoint's version, for stats (a copy of the root).
    checkpointed_through: AtomicU64,
    log_bytes_since_cut: AtomicU64,
    /// Bytes logged on each CPU and not yet added to `log_bytes_since_cut`
    /// (see `logged`).
    logged_shares: PerCpu<AtomicU64>,
    /// Image bytes the last checkpoint that folded records wrote (pacing).
    last_image_bytes: AtomicU64,
    checkpoints: AtomicU64,
    checkpoint_running: AtomicBool,
    /// A checkpoint was asked for (BGSAVE).
    requested: AtomicBool,
    last_checkpoint: Mutex<Option<CheckpointReport>>,
    backpressure_waits: AtomicU64,
    backpressure_nanos: AtomicU64,
    wake: (Mutex<bool>, Condvar),
    /// Whether a checkpoint syncs its images before the root names them,
    /// and the root before the log is reused (see
    /// `set_power_fail_ordering`).
    power_fail_ordering: AtomicBool,
}

/// Durable collections in one directory. See the crate docs.
pub struct Collections {
    shared: Arc<CollectionsState>,
    threads: Threads,
    report: RecoveryReport,
}

/// The background threads; dropping this stops them. (A field of its own,
/// not `Drop` on `Collections`, so that `close` can take `shared` apart.)
struct Threads {
    shared: Arc<CollectionsState>,
    checkpointer: Option<JoinHandle<()>>,
    /// Keeps free log segments in reserve (`OpLog::run_provisioner`).
    provisioner: Option<JoinHandle<()>>,
}

impl Drop for Threads {
    fn drop(&mut self) {
        if let Some(handle) = self.checkpointer.take() {
            *self.shared.wake.0.lock() = true;
            self.shared.wake.1.notify_all();
            let _ = handle.join();
        }
        if let Some(handle) = self.provisioner.take() {
            self.shared.log.stop_provisioner();
            let _ = handle.join();
        }
    }
}

impl Collections {
    /// Opens (creating if need be) the collections in `dir` with a sequencer
    /// of their own.
    pub fn open(dir: impl AsRef<Path>, options: CollectionsOptions) -> Result<Collections> {
        Collections::open_with(dir, options, None)
    }

    /// Opens with `sequencer` (shared with an engine store so strings and
    /// collections share one order), which recovery advances past every
    /// number it finds via `advance`.
    pub fn open_with(
        dir: impl AsRef<Path>,
        options: CollectionsOptions,
        sequencer: Option<SharedSequencer<'_>>,
    ) -> Result<Collections> {
        let began = Instant::now();
        let dir = dir.as_ref().to_path_buf();
        if options.checkpoint_log_bytes == 0 {
            return Err(Error::InvalidOption(
                "checkpoint_log_bytes must be positive".into(),
            ));
        }
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            context: "creating directory",
            path: dir.clone(),
            source,
        })?;
        let threads = if options.recovery_threads == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        } else {
            options.recovery_threads
        };
        let images = engram_engine::Store::open(dir.join(IMAGES_DIR), options.images.clone())?;
        let images_store_open = began.elapsed();
        let loaded = images::load(&images, threads)?;
        let mut report = RecoveryReport {
            images_store_open,
            images_store_index_image: images.recovery_report().index_image.image,
            root: loaded.root,
            images_loaded: loaded.entries.len() as u64,
            garbage_images_removed: (loaded.garbage.len() + loaded.tombstones.len()) as u64,
            ..RecoveryReport::default()
        };
        // Garbage goes before anything new is written: a later checkpoint
        // may reuse an uncommitted checkpoint's version. Tombstones go last,
        // after the images they hide are durably gone.
        let mut deletes = 0;
        let mut delete = |key: &[u8]| -> Result<()> {
            if options.faults.recovery_crash_after_deletes == Some(deletes) {
                return Err(Error::InjectedCrash("recovery, deleting garbage images"));
            }
            deletes += 1;
            images.delete(key)?;
            Ok(())
        };
        for key in &loaded.garbage {
            delete(key)?;
        }
        images.sync()?;
        for key in &loaded.tombstones {
            delete(key)?;
        }
        images.sync()?;
        let map = ShardedMap::default();
        for (key, entry) in loaded.entries {
            map.insert_unlogged(key, entry);
        }
        report.load_images = began.elapsed();

        let replay_began = Instant::now();
        let recovered = OpLog::open(&dir, options.oplog.clone(), loaded.root)?;
        let max_seq = recovered
            .records
            .last()
            .map_or(loaded.root, |r| r.seq.max(loaded.root));
        let sequencer: Arc<dyn Sequencer> = match sequencer {
            Some((sequencer, advance)) => {
                advance(max_seq + 1);
                sequencer
            }
            None => Arc::new(OwnSequencer::starting_at(max_seq + 1)),
        };
        let mut log_bytes = 0;
        for record in recovered.records {
            let ops = op::decode_batch(&record.payload).map_err(|e| Error::CorruptOperation {
                seq: record.seq,
                what: e.0,
            })?;
            log_bytes += oplog::format::record_bytes(record.payload.len());
            for op in ops {
                let keys: Vec<&[u8]> = op.keys().into_iter().flatten().collect();
                let mut locked = map.lock(&keys);
                drop(keys);
                apply::apply(&mut locked, op);
            }
            report.records_replayed += 1;
        }
        report.replay = replay_began.elapsed();
        report.total = began.elapsed();

        let shared = Arc::new(CollectionsState {
            dir,
            log: recovered.log,
            images,
            map,
            sequencer,
            world: RwLock::new(()),
            checkpoint: Mutex::new(checkpoint::State::new(loaded.root, loaded.versions)),
            checkpointed_through: AtomicU64::new(loaded.root),
            log_bytes_since_cut: AtomicU64::new(log_bytes),
            logged_shares: PerCpu::default(),
            last_image_bytes: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            checkpoint_running: AtomicBool::new(false),
            requested: AtomicBool::new(false),
            last_checkpoint: Mutex::new(None),
            backpressure_waits: AtomicU64::new(0),
            backpressure_nanos: AtomicU64::new(0),
            wake: (Mutex::new(false), Condvar::new()),
            power_fail_ordering: AtomicBool::new(true),
            options,
        });
        let checkpointer = match shared.options.checkpoints {
            CheckpointMode::Manual => None,
            CheckpointMode::Background | CheckpointMode::StopTheWorld => {
                let shared = Arc::clone(&shared);
                Some(
                    engram_threads::spawn("engram-checkpoint", move || checkpoint::run(&shared))
                        .map_err(|source| Error::Io {
                            context: "starting the checkpoint thread in",
                            path: PathBuf::new(),
                            source,
                        })?,
                )
            }
        };
        let provisioner = if shared.options.oplog.reserve_segments == 0 {
            None
        } else {
            let shared = Arc::clone(&shared);
            Some(
                engram_threads::spawn("engram-oplog-reserve", move || shared.log.run_provisioner())
                    .map_err(|source| Error::Io {
                        context: "starting the log reserve thread in",
                        path: PathBuf::new(),
                        source,
                    })?,
            )
        };
        Ok(Collections {
            threads: Threads {
                shared: Arc::clone(&shared),
                checkpointer,
                provisioner,
            },
            shared,
            report,
        })
    }

    /// Reads `key`'s entry (or its absence) under its shard's read lock.
    pub fn read<R>(&self, key: &[u8], f: impl FnOnce(Option<&Entry>) -> R) -> R {
        let shard = self.shared.map.read(key);
        f(shard.get(key))
    }

    /// The atomic read-modify-write: locks the shards of `keys`, lets `f`
    /// read them and decide the operations (which may touch only `keys`),
    /// logs them as one record, applies them, and returns `f`'s result.
    /// When `f` returns no operations nothing is logged. On an error from
    /// the log (a full disk) nothing is applied.
    pub fn update<R>(
        &self,
        keys: &[&[u8]],
        f: impl FnOnce(&dyn Keys) -> Result<(Vec<Op>, R)>,
    ) -> Result<R> {
        let mut writer = self.writer(keys);
        let (ops, result) = f(writer.keys())?;
        if ops.is_empty() {
            return Ok(result);
        }
        for op in &ops {
            for key in op.keys().into_iter().flatten() {
                if !writer.covers(key) {
                    return Err(Error::InvalidOption(format!(
                        "operation touches key {:?} outside the update's keys",
                        String::from_utf8_lossy(key)
                    )));
                }
            }
        }
        writer.log(&ops)?;
        for op in ops {
            apply::apply(writer.keys_mut(), op);
        }
        Ok(result)
    }

    /// Locks the shards of `keys` for a write that the caller drives step
    /// by step (the server's transactions): read and change entries through
    /// [`Writer::keys_mut`] (with [`apply::apply`]), and [`Writer::log`] the
    /// operations before the locks go. Applying before logging is the
    /// caller's choice to make; it must then undo the changes if logging
    /// fails, since no reader sees them until the writer is dropped.
    /// May pause briefly first (backpressure).
    pub fn writer(&self, keys: &[&[u8]]) -> Writer<'_> {
        self.writer_locking(|map| map.lock(keys))
    }

    /// A writer that locks each shard the first time it covers one of its
    /// keys ([`Writer::cover`]): for a caller that excludes every other
    /// writer (the keyspace's whole-keyspace transactions: scripts,
    /// FLUSHALL, SWAPDB), which may touch any key.
    pub fn writer_as_needed(&self) -> Writer<'_> {
        self.writer_locking(ShardedMap::lock_as_needed)
    }

    /// Backpressure, then the stop-the-world guard, then the shards `lock`
    /// takes (in that order: a stop-the-world checkpoint holds the guard
    /// exclusively and takes no shard).
    fn writer_locking<'c>(
        &'c self,
        lock: impl FnOnce(&'c ShardedMap) -> state::Locked<'c>,
    ) -> Writer<'c> {
        self.shared.backpressure();
        let world = self.shared.world.read();
        let locked = lock(&self.shared.map);
        Writer {
            shared: &self.shared,
            locked,
            _world: world,
        }
    }

    /// Logs and applies `ops` (keys taken from the operations).
    pub fn write(&self, ops: Vec<Op>) -> Result<()> {
        let keys: Vec<Vec<u8>> = ops
            .iter()
            .flat_map(|op| op.keys().into_iter().flatten().map(|k| k.to_vec()))
            .collect();
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        self.update(&keys, |_| Ok((ops, ())))
    }

    /// Runs a checkpoint now (waiting for one in progress first).
    pub fn checkpoint_now(&self) -> Result<CheckpointReport> {
        checkpoint::checkpoint(&self.shared)
    }

    /// Asks the background checkpointer for a checkpoint (BGSAVE).
    pub fn request_checkpoint(&self) {
        self.shared.requested.store(true, Ordering::Relaxed);
        self.shared.wake_checkpointer();
    }

    /// Whether checkpoints order their writes against power loss (on by
    /// default): images synced before the root names them, the root
    /// before the log they cover is reused. The owner turns it off while
    /// its writes are not promised to survive power loss (`process`): a
    /// process crash keeps the page cache whole, and the order the
    /// checkpoint wrote in is the order recovery reads in. (The engine's
    /// lazy retirement skips its ordering syncs by the same rule.)
    pub fn set_power_fail_ordering(&self, on: bool) {
        self.shared.power_fail_ordering.store(on, Ordering::Relaxed);
    }

    /// Makes every logged operation durable against power loss (on
    /// emulated memory, an msync of the log; nothing on DAX).
    pub fn sync(&self) -> Result<()> {
        self.shared.log.sync()
    }

    pub fn len(&self) -> u64 {
        self.shared.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` for each key of shard `shard` (0..[`state::SHARDS`]) under
    /// its read lock: for SCAN-like walks that resume by shard.
    pub fn for_each_in_shard(&self, shard: usize, mut f: impl FnMut(&[u8], &Entry)) {
        for (key, entry) in self.shared.map.shard(shard).read().iter() {
            f(key, entry);
        }
    }

    /// One step of a cursor walk in *scan rank* order ([`scan_rank`]):
    /// the keys accepted by `wanted` whose rank lies in `from..until`
    /// (`None`: to the end), at most `count` of them by ascending rank,
    /// each with its kind and expiry; and, when more remain in the range,
    /// the rank to continue from. Every key present for the whole walk is
    /// returned once. Costs a pass over the shards the range spans.
    pub fn scan(
        &self,
        from: u64,
        until: Option<u64>,
        count: usize,
        wanted: impl Fn(&[u8]) -> bool,
    ) -> (Vec<Scanned>, Option<u64>) {
        let count = count.max(1);
        let last = until.map_or(u64::MAX, |u| u.saturating_sub(1));
        if until.is_some_and(|u| u <= from) {
            return (Vec::new(), None);
        }
        let mut found: Vec<Scanned> = Vec::new();
        for shard in (from >> SCAN_SHARD_SHIFT) as usize..=(last >> SCAN_SHARD_SHIFT) as usize {
            for (key, entry) in self.shared.map.shard(shard).read().iter() {
                let rank = scan_rank(key);
                if rank >= from && rank <= last && wanted(key) {
                    found.push(Scanned {
                        rank,
                        key: key.to_vec(),
                        kind: entry.object.kind(),
                        expire_at_ms: entry.expire_at_ms,
                    });
                }
            }
            if found.len() > count {
                break;
            }
        }
        if found.len() <= count {
            found.sort_unstable_by_key(|s| s.rank);
            return (found, None);
        }
        found.select_nth_unstable_by_key(count, |s| s.rank);
        let resume = found[count].rank;
        // Keys sharing the boundary rank (a 64-bit collision) go together.
        found.retain(|s| s.rank < resume);
        found.sort_unstable_by_key(|s| s.rank);
        (found, Some(resume))
    }

    /// A key chosen at random (None when there are none), among those
    /// `wanted` accepts; tries a few random shards first, then walks all.
    pub fn random_key(&self, wanted: impl Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
        let start = rand::random::<u64>() as usize;
        for step in 0..state::SHARDS {
            let shard = self.shared.map.shard((start + step) % state::SHARDS).read();
            let candidates: Vec<&Bytes> = shard.keys().filter(|k| wanted(k)).collect();
            if !candidates.is_empty() {
                let pick = rand::random::<u64>() as usize % candidates.len();
                return Some(candidates[pick].to_vec());
            }
        }
        None
    }

    /// Up to `count` keys with their access fields and expiry times, from
    /// the shard `start` picks (or the next non-empty ones), from a place
    /// in it `start` also picks: for sampled eviction, as cheap as one
    /// shard's read lock when keys are plentiful.
    pub fn sample(&self, start: u64, count: usize) -> Vec<(Vec<u8>, u32, u64)> {
        let first = (start >> 32) as usize;
        let mut found = Vec::with_capacity(count);
        for step in 0..state::SHARDS {
            let shard = self.shared.map.shard((first + step) % state::SHARDS).read();
            if shard.is_empty() {
                continue;
            }
            let skip = start as usize % shard.len();
            let wanted = count - found.len();
            found.extend(
                shard
                    .iter()
                    .skip(skip)
                    .chain(shard.iter().take(skip))
                    .take(wanted)
                    .map(|(key, entry)| (key.to_vec(), entry.access.get(), entry.expire_at_ms)),
            );
            if found.len() >= count {
                break;
            }
        }
        found
    }

    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// Never waits for a checkpoint in progress (each lock below is taken
    /// and released on its own).
    pub fn stats(&self) -> CollectionsStats {
        let shared = &self.shared;
        let last_checkpoint = shared.last_checkpoint.lock().clone();
        CollectionsStats {
            keys: shared.map.len(),
            log: shared.log.stats(),
            log_bytes_since_checkpoint: shared.log_bytes_since_cut.load(Ordering::Relaxed)
                + shared.logged_shares_with(|share| share.load(Ordering::Relaxed)),
            checkpoint_threshold: shared.checkpoint_threshold(),
            checkpoints: shared.checkpoints.load(Ordering::Relaxed),
            checkpoint_running: shared.checkpoint_running.load(Ordering::Relaxed),
            last_checkpoint,
            checkpointed_through: shared.checkpointed_through.load(Ordering::Relaxed),
            backpressure_waits: shared.backpressure_waits.load(Ordering::Relaxed),
            backpressure_wait_time: Duration::from_nanos(
                shared.backpressure_nanos.load(Ordering::Relaxed),
            ),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Stops the background threads, makes the log durable and closes the
    /// images store cleanly (its redundancy refreshed, its session closed:
    /// a store only dropped, with sync `never`, is left as after a crash,
    /// and the next scrub could not verify the pages written last).
    pub fn close(self) -> Result<()> {
        let Collections {
            shared, threads, ..
        } = self;
        drop(threads);
        // The images (and the root) before the log: at `process` the last
        // checkpoint left them unsynced, and the log it covered may have
        // been reused since.
        shared.images.sync()?;
        shared.log.sync_all()?;
        match Arc::try_unwrap(shared) {
            Ok(shared) => shared.images.close()?,
            // Not reached: the threads' handles were the only other owners.
            Err(shared) => shared.images.sync()?,
        }
        Ok(())
    }

    /// Testing: stops like a killed process would (no sync, no checkpoint).
    #[doc(hidden)]
    pub fn crash(self) {
        drop(self.threads);
    }
}

/// Bits of a scan rank below its shard number.
const SCAN_SHARD_SHIFT: u32 = 64 - 8;
const _: () = assert!(
    state::SHARDS == 1 << 8,
    "scan ranks put the shard in the top 8 bits"
);

/// A key's place in [`Collections::scan`] order: its shard in the top
/// bits, so a range of ranks spans few shards.
pub fn scan_rank(key: &[u8]) -> u64 {
    // shard_of takes the low 8 bits of the hash: rotate them to the top.
    // Never 0, so a walk from cursor 0 sees every key and 0 can mean "done".
    xxhash_rust::xxh3::xxh3_64(key).rotate_right(8).max(1)
}

/// A key found by [`Collections::scan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scanned {
    pub rank: u64,
    pub key: Vec<u8>,
    pub kind: types::Kind,
    /// 0: no expiry.
    pub expire_at_ms: u64,
}

/// The write-locked shards of a step-by-step write (see
/// [`Collections::writer`]).
pub struct Writer<'c> {
    shared: &'c CollectionsState,
    // Field order: the shard locks go before the stop-the-world guard.
    locked: state::Locked<'c>,
    _world: parking_lot::RwLockReadGuard<'c, ()>,
}

impl<'c> Writer<'c> {
    /// `key`'s entry if its shard is locked already (`Locked::peek`).
    pub fn peek(&self, key: &[u8]) -> Option<&Entry> {
        self.locked.peek(key)
    }

    /// Keys of every locked shard, for walks (FLUSHDB).
    pub fn keys_in_shards(&self) -> Vec<Bytes> {
        self.locked.all_keys()
    }

    pub fn keys(&self) -> &dyn Keys {
        &self.locked
    }

    pub fn keys_mut(&mut self) -> &mut state::Locked<'c> {
        &mut self.locked
    }

    /// Whether `key` lives in one of the locked shards.
    pub fn covers(&self, key: &[u8]) -> bool {
        self.locked.covers(key)
    }

    /// Covers `keys` (see [`state::Locked::cover`]); false if the writer
    /// does not and may not lock more.
    pub fn cover(&mut self, keys: &[&[u8]]) -> bool {
        self.locked.cover(keys)
    }

    /// Covers every shard (see [`state::Locked::cover_all`]).
    pub fn cover_all(&mut self) -> bool {
        self.locked.cover_all()
    }

    /// Appends `ops` as one record (one command, or one MULTI); returns
    /// once it is committed in the log (durable on DAX; after the next
    /// [`Collections::sync`] on emulated memory). Nothing is logged for no
    /// operations. The operations may borrow their byte strings (the
    /// record is the same).
    pub fn log<B: op::OpBytes>(&self, ops: &[Op<B>]) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        // Encoded into this thread's buffer: no allocation per write.
        let bytes = ENCODED.with_borrow_mut(|payload| {
            payload.clear();
            op::encode_batch_into(ops, payload);
            let appended = self.shared.log.append(
                &*self.shared.sequencer,
                oplog::Position::default(),
                payload,
            );
            let len = payload.len();
            if payload.capacity() > ENCODED_KEPT_BYTES {
                *payload = Vec::new();
            }
            appended.map(|_| len)
        });
        self.shared.logged(oplog::format::record_bytes(bytes?));
        Ok(())
    }
}

thread_local! {
    /// A writer thread's encoding buffer for its log records.
    static ENCODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The encoding buffer a thread keeps between records, at most (a large
/// record's buffer is let go).
const ENCODED_KEPT_BYTES: usize = 64 * 1024;

/// How far the last checkpoint's image bytes may stretch the log a
/// checkpoint waits for, as a multiple of `checkpoint_log_bytes` (256 MiB
/// of log with the defaults). The bound is what a longer interval costs:
/// the log must hold it, recovery replays it, and a checkpoint's tables
/// of the records it folds (some 40 bytes a record, in DRAM while it
/// runs) grow with it.
pub const MAX_CHECKPOINT_PACING: u64 = 4;

impl CollectionsState {
    /// The log written since the last checkpoint that starts the next one.
    ///
    /// A checkpoint rewrites the whole image of every key the log touched
    /// since the last (DIPPER's images are per key), so on a large hot key
    /// (a list of a million 200-byte values, one hash every client writes)
    /// a checkpoint every 64 MiB of log rewrote hundreds of megabytes each
    /// time: more CPU in the checkpointer than in the writes it folded.
    /// Waiting for as much log as the last checkpoint wrote in images keeps
    /// the image bytes written per log byte at about one at most, whatever
    /// the keys' sizes; small keys keep the configured interval.
    fn checkpoint_threshold(&self) -> u64 {
        let base = self.options.checkpoint_log_bytes;
        let paced = self
            .last_image_bytes
            .load(Ordering::Relaxed)
            .min(base.saturating_mul(MAX_CHECKPOINT_PACING));
        base.max(paced)
    }

    /// Counts `bytes` just logged toward the next checkpoint, waking the
    /// checkpointer when they reach its threshold. Every collection write
    /// calls this, so the bytes gather on this CPU first and reach the
    /// shared total a batch at a time (as the kernel's `percpu_counter`):
    /// the total, which the writers' backpressure reads, then changes a
    /// few times per checkpoint instead of at every write. It lags by at
    /// most a batch per CPU, a sixty-fourth of the configured interval.
    fn logged(&self, bytes: u64) {
        let batch = (self.options.checkpoint_log_bytes / 64).clamp(1, 64 << 10);
        let share = self.logged_shares.local();
        if share.fetch_add(bytes, Ordering::Relaxed) + bytes < batch {
            return;
        }
        let bytes = share.swap(0, Ordering::Relaxed);
        let total = self.log_bytes_since_cut.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total >= self.checkpoint_threshold() && !self.checkpoint_running.load(Ordering::Relaxed)
        {
            self.wake_checkpointer();
        }
    }

    /// Takes every CPU's bytes not yet added to `log_bytes_since_cut`
    /// (at a cut, which covers them).
    fn drain_logged_shares(&self) -> u64 {
        self.logged_shares_with(|share| share.swap(0, Ordering::Relaxed))
    }

    /// The sum of `read` over every CPU's share of the logged bytes.
    fn logged_shares_with(&self, read: impl Fn(&AtomicU64) -> u64) -> u64 {
        self.logged_shares.iter().map(read).sum()
    }

    fn wake_checkpointer(&self) {
        self.wake.1.notify_all();
    }

    /// Gradual backpressure: past `backpressure_factor` checkpoints' worth
    /// of unfolded log, a writer sleeps a little, longer the further behind
    /// the checkpoints are (up to 1 ms); it never blocks outright.
    fn backpressure(&self) {
        // With manual checkpoints nothing folds the log in the background:
        // slowing writers would only make them slow.
        if self.options.checkpoints == CheckpointMode::Manual {
            return;
        }
        let threshold = self.checkpoint_threshold();
        let limit = threshold * self.options.backpressure_factor;
        let pending = self.log_bytes_since_cut.load(Ordering::Relaxed);
        if pending <= limit {
            return;
        }
        let over = (pending - limit) as f64 / threshold as f64;
        let pause = Duration::from_micros((50.0 * (1.0 + over)).min(1000.0) as u64);
        std::thread::sleep(pause);
        self.backpressure_waits.fetch_add(1, Ordering::Relaxed);
        self.backpressure_nanos
            .fetch_add(pause.as_nanos() as u64, Ordering::Relaxed);
    }
}
