//! Opening a keyspace from a data directory: both stores with the options
//! the durability implies, decided here and nowhere else.
//!
//! ```text
//! DIR/values.pmem, DIR/integrity.pmem, DIR/index-*.pmem, DIR/LOCK   strings (the engine)
//! DIR/collections/oplog.pmem, DIR/collections/images/                 hashes, sets, sorted sets, lists
//! DIR/apply-undo.pmem                                                 a replicated member's undo journal
//! ```

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_collections::{CheckpointMode, Collections, CollectionsOptions, OpLogOptions};
use engram_engine::{IntegrityOptions, ModeChoice, Options, Store, SyncPolicy, Visitor};
use engram_pmem::RegionOptions;

use crate::recovered::RecoveredBooks;
use crate::{Durability, Keyspace};

/// Where the collections store lives inside the data directory.
pub const COLLECTIONS_DIR: &str = "collections";

/// Everything a keyspace needs to open a data directory.
#[derive(Clone, Debug)]
pub struct KeyspaceOptions {
    /// Persistent memory: detected, or forced to DAX or emulated.
    pub mode: ModeChoice,
    /// When writes are durable; changeable at run time through
    /// [`crate::Keyspace::set_durability`].
    pub durability: Durability,
    /// Logical databases (1 to 255).
    pub databases: usize,
    /// Checksums and parity over both stores' files.
    pub integrity: IntegrityOptions,
    /// A checkpoint of the collections starts every this many bytes of log.
    pub collections_checkpoint_bytes: u64,
    /// Collection writers slow down past this many checkpoints' worth of
    /// log not yet checkpointed.
    pub collections_backpressure_factor: u64,
    /// Background checkpoints (the default), or only when asked.
    pub checkpoints: CheckpointMode,
    /// Keep multi-key batches cheap at any durability: the engine's lazy
    /// retirement (implied by `always`) makes a batch that fits one log
    /// block atomic by itself, with no intent record. A replicated node
    /// applies every committed batch atomically, so it asks for it.
    pub atomic_batches: bool,
    /// Whether a read that finds a key expired deletes it (Redis's lazy
    /// expiry; the default). A replicated node turns it off: a deletion
    /// of its own, at its own clock, would take the key from under
    /// entries still to be applied at the leader's earlier time. Such a
    /// key is hidden from reads and deleted by the next write that meets
    /// it, at that write's time.
    pub expire_on_read: bool,
}

impl Default for KeyspaceOptions {
    fn default() -> Self {
        let collections = CollectionsOptions::default();
        KeyspaceOptions {
            mode: ModeChoice::default(),
            durability: Durability::default(),
            databases: 16,
            integrity: IntegrityOptions::default(),
            collections_checkpoint_bytes: collections.checkpoint_log_bytes,
            collections_backpressure_factor: collections.backpressure_factor,
            checkpoints: collections.checkpoints,
            atomic_batches: false,
            expire_on_read: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open the data directory {dir}: {source}")]
    Store {
        dir: String,
        source: engram_engine::Error,
    },
    #[error("cannot open the collections in {dir}: {source}")]
    Collections {
        dir: String,
        source: engram_collections::Error,
    },
    #[error("cannot open the keyspace in {dir}: {source}")]
    Keyspace { dir: String, source: crate::Error },
    #[error("invalid keyspace options: {0}")]
    Options(String),
}

/// An opened keyspace and how long each step of its recovery took.
pub struct Opened {
    pub keyspace: Arc<Keyspace>,
    /// The engine's recovery of the strings store.
    pub engine_recovery: Duration,
    /// The collections' recovery and the keyspace's scan of both stores.
    pub keyspace_scan: Duration,
}

impl Keyspace {
    /// Opens (creating if needed) the keyspace in `dir`.
    pub fn open_dir(dir: &Path, options: &KeyspaceOptions) -> Result<Opened, OpenError> {
        if !(1..=255).contains(&options.databases) {
            return Err(OpenError::Options(format!(
                "databases must be 1 to 255, got {}",
                options.databases
            )));
        }
        // Frequent small syncs want single-page writeback; a sync a second
        // (or none) is cheaper with the kernel's large folios. Switching to
        // `always` at run time works, with more bytes written per sync
        // until the next open.
        let fine_writeback = options.durability == Durability::Always;
        // At `always` every acknowledgement waits for a sync, so the stores
        // may keep their writes in the process until it (`staged` in
        // engram-pmem): no mapped page is written back, and none costs a
        // TLB flush. They stay staged until the next open, and with them
        // the `always` rule (`Keyspace::set_durability`).
        let staged = options.durability == Durability::Always;
        let started = Instant::now();
        // The engine's recovery fills the keyspace's books as it reads
        // every record (`recovered.rs`), so nothing reads them again.
        let books = Arc::new(RecoveredBooks::default());
        let store = Store::open(
            dir,
            Options {
                recovery_visitor: Some(Visitor(books.clone())),
                // Under `always` an acknowledgement waits for the syncs of
                // what it wrote: then only the log's tail is written, and
                // retirement follows in the background (the engine's
                // `retirement.rs`). Collections' images keep the eager
                // path: the checkpointer syncs them whole anyway.
                lazy_retirement: fine_writeback || options.atomic_batches,
                ..store_options(options, fine_writeback, staged)
            },
        )
        .map_err(|source| OpenError::Store {
            dir: dir.display().to_string(),
            source,
        })?;
        let engine_recovery = started.elapsed();
        let scan_started = Instant::now();
        let collections_dir = dir.join(COLLECTIONS_DIR);
        let collections = Collections::open(
            &collections_dir,
            CollectionsOptions {
                oplog: OpLogOptions {
                    region: RegionOptions {
                        mode: options.mode,
                        fine_writeback,
                        staged,
                        ..RegionOptions::default()
                    },
                    ..OpLogOptions::default()
                },
                images: store_options(options, fine_writeback, staged),
                checkpoint_log_bytes: options.collections_checkpoint_bytes,
                backpressure_factor: options.collections_backpressure_factor,
                checkpoints: options.checkpoints,
                ..CollectionsOptions::default()
            },
        )
        .map_err(|source| OpenError::Collections {
            dir: collections_dir.display().to_string(),
            source,
        })?;
        let keyspace = Keyspace::open_with_books(
            store,
            collections,
            options.databases,
            options.durability,
            Some(&books),
        )
        .map_err(|source| OpenError::Keyspace {
            dir: dir.display().to_string(),
            source,
        })?;
        keyspace
            .expire_on_read
            .store(options.expire_on_read, Ordering::Relaxed);
        if options.atomic_batches {
            keyspace
                .open_apply_undo(dir, options.mode)
                .map_err(|source| OpenError::Keyspace {
                    dir: dir.display().to_string(),
                    source,
                })?;
        }
        Ok(Opened {
            keyspace,
            engine_recovery,
            keyspace_scan: scan_started.elapsed(),
        })
    }
}

fn store_options(options: &KeyspaceOptions, fine_writeback: bool, staged: bool) -> Options {
    Options {
        mode: options.mode,
        // The keyspace's group commit decides when to msync.
        sync: SyncPolicy::Never,
        fine_writeback,
        staged,
        integrity: options.integrity.clone(),
        ..Options::default()
    }
}

/// Both stores in `dir` with default options and manual checkpoints, for
/// unit tests here and in the server.
#[doc(hidden)]
pub fn open_stores_for_tests(dir: &Path) -> (Store, Collections) {
    open_stores_for_tests_with(dir, Options::default())
}

/// `open_stores_for_tests` with the strings store's options (an observer
/// counting what it stores, say).
#[doc(hidden)]
pub fn open_stores_for_tests_with(dir: &Path, options: Options) -> (Store, Collections) {
    let store = Store::open(dir, options).unwrap();
    let collections = Collections::open(
        dir.join(COLLECTIONS_DIR),
        CollectionsOptions {
            checkpoints: CheckpointMode::Manual,
            ..CollectionsOptions::default()
        },
    )
    .unwrap();
    (store, collections)
}

#[cfg(test)]
mod expire_on_read {
    use crate::{now_ms, Keyspace, KeyspaceOptions};

    #[test]
    fn without_expiry_on_read_an_expired_key_is_hidden_until_a_write_meets_it() {
        let dir = tempfile::tempdir().unwrap();
        let ks = Keyspace::open_dir(
            dir.path(),
            &KeyspaceOptions {
                expire_on_read: false,
                ..KeyspaceOptions::default()
            },
        )
        .unwrap()
        .keyspace;
        let past = now_ms() - 1000;
        let mut txn = ks.lock([(0, b"k".as_slice())], false).unwrap();
        txn.put_string(0, b"k", b"v", Some(past)).unwrap();
        txn.commit().unwrap();
        // Reads hide it and leave it (a member's clock is not the log's).
        assert!(ks.read(0, b"k", now_ms(), |_, _| ()).unwrap().is_none());
        assert_eq!(ks.dbsize(0), 1);
        // A write at a time past its expiry deletes it.
        let mut txn = ks.lock([(0, b"k".as_slice())], false).unwrap();
        assert!(txn.get(0, b"k", now_ms()).unwrap().is_none());
        txn.commit().unwrap();
        assert_eq!(ks.dbsize(0), 0);
        // The default deletes on read.
        let dir = tempfile::tempdir().unwrap();
        let ks = Keyspace::open_dir(dir.path(), &KeyspaceOptions::default())
            .unwrap()
            .keyspace;
        let mut txn = ks.lock([(0, b"k".as_slice())], false).unwrap();
        txn.put_string(0, b"k", b"v", Some(past)).unwrap();
        txn.commit().unwrap();
        assert!(ks.read(0, b"k", now_ms(), |_, _| ()).unwrap().is_none());
        assert_eq!(ks.dbsize(0), 0);
    }
}
