//! The Redis keyspace over two stores: logical databases, value types,
//! expiry, per-key write locks, WATCH, and atomic multi-key writes.
//!
//! Strings live in the engine: an engine key is the database number (one
//! byte) followed by the client's key; an engine value is a meta word
//! (type, encoding, expiry) followed by the payload (see `value`). Hashes,
//! sets, sorted sets and lists live in the collections store (DRAM plus an
//! operation log and checkpoints) under the same keys. A key lives in one
//! store at a time; a write that changes a key's type writes the new store
//! first where that makes a crash between the two writes recover to
//! exactly the old or the new state (see `txn`), and at startup a key found
//! in both keeps its collection.
//!
//! Everything Redis keeps in memory beside the data (key counts, which keys
//! expire, who watches what) is rebuilt at startup by one scan of each store.
//!
//! Every write is made durable through one group commit (`durability`),
//! whatever the writer: the server's connections, atomic batches' intents,
//! embedders. `Keyspace::open_dir` opens a data directory with the store
//! options the durability implies.

#![forbid(unsafe_code)]

pub mod access;
mod applied_record;
mod apply_undo;
pub mod clock;
mod db_map;
pub mod durability;
mod exclusion;
pub mod expired;
pub mod format;
mod functions_record;
mod journal;
mod key_groups;
pub mod modified;
mod open;
mod recovered;
mod txn;
pub mod value;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_utils::CachePadded;
use engram_collections::{Collections, Op};
use engram_engine::{Store, MAX_KEY_BYTES};
use engram_threads::StripedCounter;
use parking_lot::Mutex;
use smallvec::SmallVec;

pub use access::AccessTracking;
use db_map::DbMap;
pub use durability::{Durability, GroupCommit, SyncStats, Ticket};
pub use engram_collections::types::{FieldWarm, WARM_FIELD_AHEAD};
pub use engram_collections::types::{Kind as CKind, Object};
pub use engram_engine::{PrefetchStep, WARM_AHEAD};
use exclusion::Exclusion;
pub(crate) use key_groups::Watcher;
pub use key_groups::KEY_GROUPS;
use key_groups::{apply_delete, GroupLock, Held, KeyGroup};
pub use open::{
    open_stores_for_tests, open_stores_for_tests_with, KeyspaceOptions, OpenError, Opened,
    COLLECTIONS_DIR,
};
use recovered::RecoveredBooks;
pub use txn::{ckey, InPlaceAdd, Stored, Txn};
use value::{decode, Malformed, Meta};

/// A client's key and its meta word, as SCAN finds them.
pub type KeyMeta = (Vec<u8>, Meta);

/// An engine key: the database byte, then the client's key.
pub type EKey = SmallVec<[u8; EKEY_INLINE]>;

/// Bytes of an engine key kept inline, without an allocation.
const EKEY_INLINE: usize = 64;

/// The keys a transaction locks (one, most often: kept inline).
pub type EKeys = SmallVec<[EKey; 1]>;

/// Damaged keys named one by one in the startup log; the rest are counted.
const DAMAGED_KEYS_LOGGED: u64 = 20;

/// The longest key a client may use (the engine's limit less the db byte).
pub const MAX_KEY_LEN: usize = MAX_KEY_BYTES - 1;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Engine(engram_engine::Error),
    #[error("ERR {0}")]
    Collections(engram_collections::Error),
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR {0}")]
    Malformed(Malformed),
    #[error("ERR key too long ({0} bytes; Engram's limit is {MAX_KEY_LEN})")]
    KeyTooLong(usize),
    #[error("ERR internal error: {0}")]
    Internal(String),
    /// The store holds keyspace layouts of a version this build does not
    /// read (or a damaged format record): nothing was changed.
    #[error("{0}")]
    Format(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The key's stored bytes are damaged (a failed checksum, a page the
    /// integrity layer could not rebuild, a meta word that does not
    /// decode): an error for reads of that key only. Deleting or
    /// overwriting the key still works, and key enumeration lists it.
    pub fn is_damage(&self) -> bool {
        match self {
            Error::Engine(e) => is_engine_damage(e),
            Error::Malformed(_) => true,
            _ => false,
        }
    }
}

/// The engine's errors that mean damaged stored bytes (see
/// [`Error::is_damage`]).
fn is_engine_damage(e: &engram_engine::Error) -> bool {
    matches!(
        e,
        engram_engine::Error::Unrepairable { .. } | engram_engine::Error::CorruptRecord { .. }
    )
}

/// Counters for INFO stats.
#[derive(Default)]
pub struct KeyspaceStats {
    /// Per CPU: every read bumps one of them.
    pub hits: StripedCounter,
    pub misses: StripedCounter,
    pub expired_keys: AtomicU64,
    /// Batches replayed from their intent at the last startup.
    pub batches_replayed: AtomicU64,
    /// Keys found in databases beyond `databases` (hidden, kept).
    pub keys_in_hidden_dbs: AtomicU64,
}

pub struct Keyspace {
    store: Store,
    collections: Collections,
    groups: Box<[CachePadded<KeyGroup>]>,
    /// Entered by every holder of key groups; whole-keyspace writers
    /// exclude the rest through it instead of locking every group.
    exclusion: Exclusion,
    databases: usize,
    /// Client database numbers → stored prefixes (SWAPDB).
    db_map: DbMap,
    journal_seq: AtomicU64,
    /// When writes are durable: the one group commit every writer uses
    /// (shared with the sync thread).
    commit: Arc<GroupCommit>,
    /// The thread that runs the group commit's syncs (joined by `stop_syncing`).
    sync_thread: Mutex<Option<JoinHandle<()>>>,
    expire_cursor: AtomicUsize,
    /// CLIENT PAUSE: until this time (Unix ms; 0: none) expired keys are
    /// not deleted, neither by reads nor by the active cycle, so the data
    /// set stays as it is while writes are held (Redis 7.0); reads still
    /// find them gone.
    expiry_held_until: AtomicU64,
    /// See `KeyspaceOptions::expire_on_read`.
    pub(crate) expire_on_read: std::sync::atomic::AtomicBool,
    /// Wakes clients blocked on collection keys (BLPOP...) after writes.
    written: Box<[WrittenBucket]>,
    pub stats: KeyspaceStats,
    /// What the keys' access fields mean, and the clock they count by.
    pub access: AccessTracking,
    /// Keys expiry deleted, for the server's notifications (off unless asked).
    pub expired: expired::ExpiredKeys,
    /// A replicated member's undo journal (`apply_undo`), opened with
    /// `KeyspaceOptions::atomic_batches`.
    apply_undo: std::sync::OnceLock<apply_undo::ApplyUndo>,
}

/// A key eviction may take (see [`Keyspace::eviction_sample`]).
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The key as stored (its prefix from the database map, not a
    /// client's database number): what [`Keyspace::evict`] takes.
    pub ekey: Vec<u8>,
    /// Its access field (0 when the sample did not ask for it).
    pub access: u32,
    /// Its expiry time (Unix ms), if it has one and the sample knows it.
    pub expire_at: Option<u64>,
}

/// Clients waiting for a write to any collection key of this bucket.
#[derive(Default)]
struct WrittenBucket {
    waiters: AtomicUsize,
    notify: tokio::sync::Notify,
}

/// Buckets of `Keyspace::written`: waiters on different keys rarely share one.
const WRITTEN_BUCKETS: usize = 1024;

/// A blocked client's registration for wakeups on one key; holds the
/// bucket's waiter count up while it lives.
pub struct WrittenWaiter<'k> {
    bucket: &'k WrittenBucket,
}

impl<'k> WrittenWaiter<'k> {
    /// Resolves after a write to a collection key of the bucket that
    /// happened after the waiter was created (maybe to another key: a
    /// blocked command simply tries again).
    pub fn notified(&self) -> tokio::sync::futures::Notified<'k> {
        self.bucket.notify.notified()
    }
}

impl Drop for WrittenWaiter<'_> {
    fn drop(&mut self) {
        self.bucket.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Keyspace {
    /// Wraps the opened stores: scans them once to rebuild key counts and
    /// the expiry index, re-applies any batch a crash interrupted, and
    /// starts the group commit's sync thread (which holds the keyspace
    /// weakly: dropping the last handle ends it).
    pub fn open(
        store: Store,
        collections: Collections,
        databases: usize,
        durability: Durability,
    ) -> Result<Arc<Keyspace>> {
        Keyspace::open_with_books(store, collections, databases, durability, None)
    }

    /// `open`, with what the engine's recovery gathered for the keyspace
    /// when the store was opened with `books` as its recovery visitor
    /// (`open_dir` does): the string keys then are not scanned again.
    pub(crate) fn open_with_books(
        store: Store,
        collections: Collections,
        databases: usize,
        durability: Durability,
        books: Option<&RecoveredBooks>,
    ) -> Result<Arc<Keyspace>> {
        assert!((1..=255).contains(&databases), "databases must be 1..=255");
        let dax = store.stats().mode == "dax";
        let db_map = load_db_map(&store)?;
        // Books per stored prefix: every prefix a visible database may be
        // stored under (after swaps, one past `databases` if the setting
        // shrank since).
        let prefixes = (0..databases)
            .map(|db| db_map.physical(db) + 1)
            .max()
            .unwrap_or(0)
            .max(databases);
        // Leading waiters sync through a weak handle, as the sync thread
        // does: neither keeps the stores open.
        let keyspace = Arc::new_cyclic(|me: &Weak<Keyspace>| Keyspace {
            store,
            collections,
            groups: (0..KEY_GROUPS)
                .map(|_| CachePadded::new(KeyGroup::new(prefixes)))
                .collect(),
            exclusion: Exclusion::default(),
            databases,
            db_map,
            journal_seq: AtomicU64::new(0),
            commit: Arc::new(GroupCommit::new(durability, dax, {
                let me = me.clone();
                Box::new(move || {
                    me.upgrade()
                        .map(|keyspace| keyspace.sync().map_err(|e| e.to_string()))
                })
            })),
            sync_thread: Mutex::new(None),
            expire_cursor: AtomicUsize::new(0),
            expiry_held_until: AtomicU64::new(0),
            expire_on_read: std::sync::atomic::AtomicBool::new(true),
            written: (0..WRITTEN_BUCKETS)
                .map(|_| WrittenBucket::default())
                .collect(),
            stats: KeyspaceStats::default(),
            access: AccessTracking::new(now_ms()),
            expired: expired::ExpiredKeys::default(),
            apply_undo: std::sync::OnceLock::new(),
        });
        // The stores' ordering against power loss follows the durability
        // (decided in one place).
        keyspace.set_durability(durability);
        let intents = keyspace.rebuild(books)?;
        keyspace.replay(intents)?;
        let (commit, weak) = (keyspace.commit.clone(), Arc::downgrade(&keyspace));
        let thread = std::thread::Builder::new()
            // Not a background thread in `engram_threads`'s sense:
            // with `always`, writers wait for its `msync`, so it may run on
            // any core rather than queue behind a checkpoint.
            .name("engram-sync".into())
            .spawn(move || run_sync_thread(commit, weak))
            .map_err(|e| Error::Internal(format!("cannot start the sync thread: {e}")))?;
        *keyspace.sync_thread.lock() = Some(thread);
        Ok(keyspace)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn collections(&self) -> &Collections {
        &self.collections
    }

    /// When writes are durable, and the tickets that wait for it.
    pub fn commit(&self) -> &GroupCommit {
        &self.commit
    }

    /// Whether the stores were opened staged (at `always`, `open.rs`):
    /// they keep their writes in the process until each sync.
    pub fn is_staged(&self) -> bool {
        self.store.is_staged()
    }

    /// Why `durability`, if set now, waits until the stores are opened
    /// again: staged stores keep an acknowledged write only through the
    /// `always` rule's sync, so they keep that rule (stronger than the one
    /// asked for) until a restart or DEBUG RELOAD opens them unstaged.
    pub fn defers_durability(&self, durability: Durability) -> Option<String> {
        (durability != Durability::Always && self.is_staged()).then(|| {
            format!(
                "durability {} takes effect at the next restart (or DEBUG RELOAD); until then \
                 it stays always: opened at always, the stores keep each write in the process \
                 until its sync",
                durability.name()
            )
        })
    }

    /// Changes when writes are durable (CONFIG SET appendfsync): the group
    /// commit's rule, and whether the strings store's lazy retirement and
    /// the collections' checkpoints order their writes against power loss
    /// (needless at `process`, which promises survival of a process crash
    /// only). A rule `defers_durability` names is only noted as asked for
    /// (`GroupCommit::requested`, which the next opening takes) and logged;
    /// `always` stays in force.
    ///
    /// Ordering goes on before a stronger rule takes effect (a write
    /// acknowledged under it must not be stored unordered, in place where
    /// no tail sync looks) and off only after `process` did.
    pub fn set_durability(&self, durability: Durability) {
        self.commit.request(durability);
        if let Some(reason) = self.defers_durability(durability) {
            log::warn!("{reason}");
            return;
        }
        let ordered = durability != Durability::Process;
        if ordered {
            self.store.set_power_fail_ordering(true);
            self.collections.set_power_fail_ordering(true);
        }
        self.commit.set_durability(durability);
        if !ordered {
            self.store.set_power_fail_ordering(false);
            self.collections.set_power_fail_ordering(false);
        }
    }

    /// The group commit as a handle of its own, for a wait that must not
    /// hold the keyspace (the server's DEBUG RELOAD closes it meanwhile).
    pub fn commit_handle(&self) -> Arc<GroupCommit> {
        Arc::clone(&self.commit)
    }

    /// Stops the sync thread after it has synced every pending ticket.
    /// Writes made after this are synced only by `sync` or `close`.
    pub fn stop_syncing(&self) {
        self.commit.stop();
        if let Some(thread) = self.sync_thread.lock().take() {
            let _ = thread.join();
        }
    }

    /// Clean shutdown: stops the sync thread, then closes both stores
    /// (each syncs what it holds). Fails, leaving the stores synced but
    /// open, when other handles to the keyspace are still alive.
    pub fn close(keyspace: Arc<Keyspace>) -> std::result::Result<(), String> {
        keyspace.stop_syncing();
        match Arc::try_unwrap(keyspace) {
            Ok(keyspace) => {
                keyspace
                    .collections
                    .close()
                    .map_err(|e| format!("closing the collections: {e}"))?;
                keyspace
                    .store
                    .close()
                    .map_err(|e| format!("closing the store: {e}"))
            }
            Err(keyspace) => {
                keyspace
                    .sync()
                    .map_err(|e| format!("syncing the store: {e}"))?;
                Err("store synced but left open: another handle to it is still alive".into())
            }
        }
    }

    /// Makes everything written so far durable in both stores (an msync
    /// each on emulated memory), and records the outcome in the sync stats.
    pub fn sync(&self) -> Result<()> {
        self.commit.sync_with(|| {
            self.store.sync().map_err(Error::Engine)?;
            self.collections.sync().map_err(Error::Collections)
        })
    }

    pub fn databases(&self) -> usize {
        self.databases
    }

    /// Refuses a store whose meta words or intents are of a version this
    /// build does not know; records the versions in a store without them,
    /// or whose record a damaged page made unreadable.
    fn check_format(&self) -> Result<()> {
        let file = engram_engine::DATA_FILE;
        match self.store.get(&format::KEY) {
            Ok(Some(record)) => format::check(&record, file),
            Ok(None) => self
                .store
                .put(&format::KEY, &format::encode())
                .map(|_| ())
                .map_err(Error::Engine),
            Err(e) if is_engine_damage(&e) => {
                // A page parity could not rebuild takes only its own keys
                // offline, never the whole keyspace: the record is written
                // again with this build's versions (every string's meta
                // word is still checked as it is read).
                log::error!(
                    "{file}: the keyspace format record lies on a damaged page ({e}); \
                     writing it again with this build's versions"
                );
                self.store
                    .put(&format::KEY, &format::encode())
                    .map(|_| ())
                    .map_err(Error::Engine)
            }
            Err(e) => Err(Error::Format(format!(
                "{file}: the keyspace format record cannot be read: {e}"
            ))),
        }
    }

    fn rebuild(&self, books: Option<&RecoveredBooks>) -> Result<Vec<Vec<u8>>> {
        self.check_format()?;
        let intents = match books {
            Some(books) => self.rebuild_from_books(books.take()),
            None => self.rebuild_strings()?,
        };
        self.rebuild_collections()?;
        Ok(intents)
    }

    /// The string keys' counts and expiry index from what the engine's
    /// recovery gathered (`recovered.rs`): no key is read again.
    fn rebuild_from_books(&self, books: recovered::Books) -> Vec<Vec<u8>> {
        for (prefix, counts) in books.counts.chunks(KEY_GROUPS).enumerate() {
            let keys: u64 = counts.iter().map(|&n| u64::from(n)).sum();
            if keys == 0 {
                continue;
            }
            if !self.is_visible(&[prefix as u8]) {
                self.stats
                    .keys_in_hidden_dbs
                    .fetch_add(keys, Ordering::Relaxed);
                continue;
            }
            for (group, &n) in counts.iter().enumerate() {
                self.groups[group].counts[prefix].fetch_add(i64::from(n), Ordering::Relaxed);
            }
        }
        // Expiring strings are only noted (their hashes): the expiry
        // index gets their keys after the server is ready
        // (`index_expiries`); until then each such group is marked, and
        // its expiry cycle due at once.
        for (group, noted) in books.expiring.into_iter().enumerate() {
            let slot = &self.groups[group];
            let mut unindexed = Vec::with_capacity(noted.len());
            for entry in noted {
                let (hash, prefix) = recovered::unpack_expiring(group, entry);
                if self.is_visible(&[prefix]) {
                    slot.unindexed_counts[prefix as usize].fetch_add(1, Ordering::Relaxed);
                    unindexed.push(hash);
                }
            }
            if unindexed.is_empty() {
                continue;
            }
            let mut state = self.lock_group(slot);
            state.unindexed = unindexed;
            slot.unindexed.store(true, Ordering::Release);
            slot.next_due.store(0, Ordering::Relaxed);
        }
        for key in &books.damaged_named {
            log::warn!(
                "key {} is damaged: its value cannot be read",
                String::from_utf8_lossy(&client_key_name(key))
            );
        }
        if books.damaged > DAMAGED_KEYS_LOGGED {
            log::warn!(
                "{} damaged keys in all ({} named above)",
                books.damaged,
                DAMAGED_KEYS_LOGGED
            );
        }
        books.intents
    }

    /// The string keys' counts and expiry index, by reading every key's
    /// meta word (a store opened without the keyspace's recovery visitor).
    fn rebuild_strings(&self) -> Result<Vec<Vec<u8>>> {
        let mut intents = Vec::new();
        let mut damaged = 0u64;
        let mut cursor = 0;
        loop {
            let (next, keys) = self.store.scan(cursor, 4096);
            for key in keys {
                if journal::is_intent_key(&key) {
                    intents.push(key);
                    continue;
                }
                if format::is_format_key(&key)
                    || db_map::is_map_key(&key)
                    || functions_record::is_functions_key(&key)
                    || applied_record::is_applied_key(&key)
                {
                    continue;
                }
                if !self.is_visible(&key) {
                    self.stats
                        .keys_in_hidden_dbs
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let meta = match self.raw_meta(&key) {
                    Ok(Some(meta)) => meta,
                    Ok(None) => continue,
                    Err(e) if e.is_damage() => {
                        // Counted without an expiry; reads of it fail
                        // until it is rewritten or deleted.
                        damaged += 1;
                        if damaged <= DAMAGED_KEYS_LOGGED {
                            log::warn!(
                                "key {} is damaged: {e}",
                                String::from_utf8_lossy(&client_key_name(&key))
                            );
                        }
                        Meta::new(value::Kind::String, value::Encoding::Raw, None)
                    }
                    Err(e) => return Err(e),
                };
                let slot = self.slot(&key);
                slot.counts[key_groups::db_of(&key)].fetch_add(1, Ordering::Relaxed);
                if meta.expire_at().is_some() {
                    let mut group = self.lock_group(slot);
                    key_groups::set_expiry(slot, &mut group, &key, meta.expire_at());
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        if damaged > DAMAGED_KEYS_LOGGED {
            log::warn!(
                "{} damaged keys in all ({} named above)",
                damaged,
                DAMAGED_KEYS_LOGGED
            );
        }
        Ok(intents)
    }

    /// Counts the collection keys and indexes their expiry. A key found in
    /// both stores is a type change that a crash cut between its two writes;
    /// every such change logs its collection side at the point that makes
    /// keeping the collection right (see `txn`), so the string goes.
    fn rebuild_collections(&self) -> Result<()> {
        let mut keys = Vec::with_capacity(self.collections.len() as usize);
        for shard in 0..engram_collections::state::SHARDS {
            self.collections.for_each_in_shard(shard, |key, entry| {
                keys.push((key.to_vec(), entry.expire_at_ms))
            });
        }
        let mut resolved = 0u64;
        for (ekey, expire_at) in keys {
            if is_reserved(&ekey) {
                // A keyspace record kept as a collection (the applied
                // index): no key of any database.
                continue;
            }
            if !self.is_visible(&ekey) {
                self.stats
                    .keys_in_hidden_dbs
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let slot = self.slot(&ekey);
            let mut group = self.lock_group(slot);
            if apply_delete(&self.store, slot, &mut group, &ekey)? {
                resolved += 1;
            }
            slot.counts[key_groups::db_of(&ekey)].fetch_add(1, Ordering::Relaxed);
            key_groups::set_expiry(
                slot,
                &mut group,
                &ekey,
                (expire_at != 0).then_some(expire_at),
            );
        }
        if resolved > 0 {
            log::warn!(
                "{resolved} keys were found both as strings and as collections (type changes \
                 interrupted by a crash); they keep their collections"
            );
        }
        Ok(())
    }

    fn replay(&self, intents: Vec<Vec<u8>>) -> Result<()> {
        let mut map_written = false;
        for intent in intents {
            let bytes = match self.store.get(&intent).map_err(Error::Engine) {
                Ok(Some(bytes)) => bytes,
                Ok(None) => continue,
                Err(e) if e.is_damage() => {
                    // Its batch cannot be known, so it cannot be finished;
                    // kept, it could only fail again at every start.
                    log::error!(
                        "an interrupted multi-key write cannot be re-applied: its intent \
                         record is damaged ({e}); its keys keep whatever part of it was \
                         applied before the crash"
                    );
                    self.store.delete(&intent).map_err(Error::Engine)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let ops = journal::decode(&bytes)?;
            let keys = ops.len();
            // Intents name stored keys.
            let mut txn =
                self.lock_stored(ops.iter().map(|(k, _)| k.clone().into()).collect(), false);
            for (key, write) in ops {
                map_written |= db_map::is_map_key(&key);
                match write {
                    journal::Write::Engine(value) => txn.apply_raw(&key, value.as_deref())?,
                    journal::Write::Collection(state) => txn.restore_collection(&key, state)?,
                }
            }
            txn.commit()?;
            self.store.delete(&intent).map_err(Error::Engine)?;
            self.stats.batches_replayed.fetch_add(1, Ordering::Relaxed);
            log::warn!("re-applied a multi-key write interrupted by a crash ({keys} keys)");
        }
        if map_written {
            self.reload_db_map()?;
        }
        Ok(())
    }

    /// The database map as its record has it after a replayed batch wrote
    /// the record (a SWAPDB in a transaction's batch): the map was read
    /// before the replay. The books were built with that map; they hold
    /// for the new one too, as a swap exchanges databases clients can
    /// select, so the same stored prefixes stay visible. Unless the
    /// `databases` setting shrank since the swap: the record is written,
    /// and the next start reads it before it builds the books.
    fn reload_db_map(&self) -> Result<()> {
        let map = load_db_map(&self.store)?;
        let visible = |map: &DbMap| {
            let mut prefixes: Vec<usize> = (0..self.databases).map(|db| map.physical(db)).collect();
            prefixes.sort_unstable();
            prefixes
        };
        if visible(&map) != visible(&self.db_map) {
            self.store.sync().map_err(Error::Engine)?;
            return Err(Error::Format(format!(
                "{}: a SWAPDB interrupted by a crash was applied again, and it swapped \
                 databases that are not all among the {} this start shows (`databases` \
                 shrank since); its map is written now: start again",
                engram_engine::DATA_FILE,
                self.databases
            )));
        }
        self.db_map.assign(&map);
        Ok(())
    }

    /// The meta word of an engine key, read without locks.
    fn raw_meta(&self, ekey: &[u8]) -> Result<Option<Meta>> {
        match self.store.get_ref(ekey).map_err(Error::Engine)? {
            None => Ok(None),
            Some(value) => Ok(Some(decode(&value).map_err(Error::Malformed)?.0)),
        }
    }

    /// The meta word of a key in either store, without locks (a
    /// collection's is made up from its kind and expiry).
    fn meta_any(&self, ekey: &[u8]) -> Result<Option<Meta>> {
        match self.raw_meta(ekey)? {
            Some(meta) => Ok(Some(meta)),
            None => Ok(self.collection_meta(ekey)),
        }
    }

    fn collection_meta(&self, ekey: &[u8]) -> Option<Meta> {
        self.collections.read(ekey, |e| {
            e.map(|e| Meta::collection(e.object.kind(), e.expire_at_ms))
        })
    }

    /// Whether a stored key belongs to a database clients can select.
    fn is_visible(&self, ekey: &[u8]) -> bool {
        ekey.first()
            .is_some_and(|&p| self.db_map.logical(p as usize) < self.databases)
    }

    /// The stored key of `key` in client database `db`. Stable only while
    /// a key group is held; lock-free readers check `DbMap::unchanged`.
    fn physical_ekey(&self, db: usize, key: &[u8]) -> Result<EKey> {
        let mut ekey = ekey(db, key)?;
        self.db_map.to_physical(&mut ekey);
        Ok(ekey)
    }

    /// The engine's hash of `key` in database `db`, for [`Keyspace::prefetch`]
    /// (None for a key no database can hold).
    pub fn prefetch_hash(&self, db: usize, key: &[u8]) -> Option<u64> {
        let ekey = self.physical_ekey(db, key).ok()?;
        Some(Store::key_hash(&ekey))
    }

    /// Starts loading one of the engine's lines for the key with `hash`
    /// (`engram_engine::Store::prefetch`): for a caller that knows the
    /// keys of the commands it will run next (a replicated node's apply,
    /// whose reads of random keys miss on every one).
    ///
    /// With the engine's lock, the key's group too: its hash is the same
    /// (`key_groups::slot_index`), and the apply locks it and writes its
    /// books for every key (a miss on each, a tenth of a member's apply
    /// under SET).
    pub fn prefetch(&self, hash: u64, step: PrefetchStep) {
        if step == PrefetchStep::Lock {
            self.groups[key_groups::slot_of_hash(hash)].prefetch();
        }
        self.store.prefetch(hash, step);
    }

    /// `ekey` (a client's database byte, then the key) as stored.
    fn to_physical(&self, ekey: &[u8]) -> EKey {
        let mut ekey = EKey::from_slice(ekey);
        self.db_map.to_physical(&mut ekey);
        ekey
    }

    /// How a client would name a stored key (see [`client_key_name`]),
    /// with the database number clients use after any SWAPDB.
    pub fn client_key_name(&self, stored: &[u8]) -> Vec<u8> {
        self.db_map.client_key_name(stored)
    }

    fn slot_index(ekey: &[u8]) -> usize {
        key_groups::slot_index(ekey)
    }

    /// Locks one key group (inside the exclusion, as every holder must).
    fn lock_group<'k>(&'k self, slot: &'k KeyGroup) -> GroupLock<'k> {
        GroupLock::new(&self.exclusion, slot)
    }

    fn slot(&self, ekey: &[u8]) -> &KeyGroup {
        &self.groups[Self::slot_index(ekey)]
    }

    /// Reads a key without locks: `f` sees its meta word and payload. An
    /// expired key reads as absent (and is deleted on the way).
    pub fn read<R>(
        &self,
        db: usize,
        key: &[u8],
        now_ms: u64,
        f: impl FnOnce(Meta, &[u8]) -> R,
    ) -> Result<Option<R>> {
        self.access.observe(now_ms);
        let (ekey, string, collection) = self.look_touching(db, key)?;
        let found = match (string, collection) {
            (Some(value), _) => {
                let (meta, payload) = decode(&value).map_err(Error::Malformed)?;
                if meta.is_expired(now_ms) {
                    None
                } else {
                    Some(f(meta, payload))
                }
            }
            (None, None) => {
                self.stats.misses.incr();
                return Ok(None);
            }
            (None, Some(meta)) if meta.is_expired(now_ms) => None,
            (None, Some(meta)) => Some(f(meta, &[])),
        };
        match found {
            Some(result) => {
                self.stats.hits.incr();
                Ok(Some(result))
            }
            None => {
                self.stats.misses.incr();
                self.expire_if_due(&ekey, now_ms)?;
                Ok(None)
            }
        }
    }

    /// `key`'s stored string, or else its collection's meta word (kind and
    /// expiry, no payload), expired or not, touching its access field; with
    /// the engine key they were found under.
    fn look_touching(
        &self,
        db: usize,
        key: &[u8],
    ) -> Result<(EKey, Option<engram_engine::ValueRef<'_>>, Option<Meta>)> {
        let touch = |old| self.access.on_access(old);
        // A SWAPDB between the translation and the reads would have read
        // the other database: read again.
        loop {
            let version = self.db_map.begin();
            let ekey = self.physical_ekey(db, key)?;
            let string = self
                .store
                .get_ref_touching(&ekey, touch)
                .map_err(Error::Engine)?;
            let collection = match string {
                Some(_) => None,
                None => self.collections.read(&ekey, |e| {
                    e.map(|e| {
                        e.access.touch(touch);
                        Meta::collection(e.object.kind(), e.expire_at_ms)
                    })
                }),
            };
            if self.db_map.unchanged(version) {
                return Ok((ekey, string, collection));
            }
        }
    }

    /// Whether `key` lives (any type, not expired), looked at without its
    /// key group, for a write command that may have nothing to do: a SET
    /// NX or SETNX of a key that exists. Touches the key's access field
    /// and counts no keyspace hit or miss, as Redis's lookup for a write
    /// does. An expired key is reported absent and left for the write
    /// (which takes the lock) to remove.
    pub fn exists_for_write(&self, db: usize, key: &[u8], now_ms: u64) -> Result<bool> {
        self.access.observe(now_ms);
        let (_, string, collection) = self.look_touching(db, key)?;
        let meta = match (string, collection) {
            (Some(value), _) => decode(&value).map_err(Error::Malformed)?.0,
            (None, Some(meta)) => meta,
            (None, None) => return Ok(false),
        };
        Ok(!meta.is_expired(now_ms))
    }

    /// Reads collection `key` without the key's write lock: `f` sees its
    /// object, or None when the key is absent (or expired). A key holding
    /// another type is a `WrongType` error. Counted as a keyspace hit or
    /// miss.
    pub fn read_collection<R>(
        &self,
        db: usize,
        key: &[u8],
        kind: CKind,
        now_ms: u64,
        f: impl FnOnce(Option<&Object>) -> R,
    ) -> Result<R> {
        self.look_at_collection(db, key, kind, now_ms, true, f)
    }

    /// [`Keyspace::read_collection`] for a write command that looks before
    /// it takes the key's lock (an SADD of members already there writes
    /// nothing): not a keyspace hit or miss, as Redis counts none for a
    /// write's lookup.
    pub fn read_collection_for_write<R>(
        &self,
        db: usize,
        key: &[u8],
        kind: CKind,
        now_ms: u64,
        f: impl FnOnce(Option<&Object>) -> R,
    ) -> Result<R> {
        self.look_at_collection(db, key, kind, now_ms, false, f)
    }

    fn look_at_collection<R>(
        &self,
        db: usize,
        key: &[u8],
        kind: CKind,
        now_ms: u64,
        counted: bool,
        f: impl FnOnce(Option<&Object>) -> R,
    ) -> Result<R> {
        enum Found<R> {
            Reply(R),
            Absent,
            Expired,
            OtherKind,
            /// A SWAPDB came between the translation and the read.
            Swapped,
        }
        self.access.observe(now_ms);
        let mut f = Some(f);
        loop {
            let version = self.db_map.begin();
            let ekey = self.physical_ekey(db, key)?;
            let found = self.collections.read(&ekey, |entry| {
                if !self.db_map.unchanged(version) {
                    return Found::Swapped;
                }
                match entry {
                    None => Found::Absent,
                    Some(e) if e.expire_at_ms != 0 && e.expire_at_ms <= now_ms => Found::Expired,
                    Some(e) if e.object.kind() != kind => Found::OtherKind,
                    Some(e) => {
                        e.access.touch(|old| self.access.on_access(old));
                        Found::Reply((f.take().expect("called once"))(Some(&e.object)))
                    }
                }
            });
            match found {
                Found::Swapped => continue,
                Found::Reply(result) => {
                    if counted {
                        self.stats.hits.incr();
                    }
                    return Ok(result);
                }
                Found::OtherKind => return Err(Error::WrongType),
                Found::Expired => {
                    self.expire_if_due(&ekey, now_ms)?;
                }
                Found::Absent => {
                    // Absent from the collections: a live string is the
                    // wrong type.
                    let string = self.store.get_ref(&ekey).map_err(Error::Engine)?;
                    if !self.db_map.unchanged(version) {
                        continue;
                    }
                    if let Some(value) = string {
                        let (meta, _) = decode(&value).map_err(Error::Malformed)?;
                        if !meta.is_expired(now_ms) {
                            return Err(Error::WrongType);
                        }
                    }
                }
            }
            if counted {
                self.stats.misses.incr();
            }
            return Ok((f.take().expect("not called yet"))(None));
        }
    }

    /// Holds the deletion of expired keys until `until_unix_ms` (CLIENT
    /// PAUSE; a later deadline wins), or releases it (`None`: CLIENT
    /// UNPAUSE).
    pub fn hold_expiry(&self, until_unix_ms: Option<u64>) {
        match until_unix_ms {
            Some(until) => {
                self.expiry_held_until.fetch_max(until, Ordering::Relaxed);
            }
            None => self.expiry_held_until.store(0, Ordering::Relaxed),
        }
    }

    pub(crate) fn expiry_held(&self) -> bool {
        // A replicated node (no lazy expiry of its own) deletes what its
        // log's entries meet, paused or not: a hold on one member only
        // would split the group's state. The leader holds its proposals.
        if !self.expire_on_read.load(Ordering::Relaxed) {
            return false;
        }
        let until = self.expiry_held_until.load(Ordering::Relaxed);
        until != 0 && now_ms() < until
    }

    /// Counts (and, when asked, notes) stored key `ekey`, just deleted
    /// because it expired.
    pub(crate) fn expired_one(&self, ekey: &[u8]) {
        self.stats.expired_keys.fetch_add(1, Ordering::Relaxed);
        if self.expired.is_recording() {
            if let Some((db, key)) = self.client_key(ekey) {
                self.expired.note(db, key);
            }
        }
    }

    /// The client database number and key of stored key `stored`; None
    /// for a key of a hidden database or a reserved record.
    pub fn client_key<'a>(&self, stored: &'a [u8]) -> Option<(usize, &'a [u8])> {
        let (&prefix, key) = stored.split_first()?;
        if journal::is_intent_key(stored)
            || format::is_format_key(stored)
            || db_map::is_map_key(stored)
        {
            return None;
        }
        let db = self.db_map.logical(prefix as usize);
        (db < self.databases).then_some((db, key))
    }

    /// Deletes `ekey` if it has expired by `now_ms`; true if it did.
    fn expire_if_due(&self, ekey: &[u8], now_ms: u64) -> Result<bool> {
        if self.expiry_held() || !self.expire_on_read.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let slot = self.slot(ekey);
        let mut group = self.lock_group(slot);
        match self.meta_any(ekey)? {
            Some(meta) if meta.is_expired(now_ms) => {
                self.delete_any(slot, &mut group, ekey)?;
                self.expired_one(ekey);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Deletes `ekey` from whichever store holds it (the caller holds its
    /// key group); true if it existed.
    fn delete_any(
        &self,
        slot: &KeyGroup,
        group: &mut key_groups::GroupState,
        ekey: &[u8],
    ) -> Result<bool> {
        if apply_delete(&self.store, slot, group, ekey)? {
            return Ok(true);
        }
        let mut writer = self.collections.writer(&[ekey]);
        if writer.keys().get(ekey).is_none() {
            return Ok(false);
        }
        let op: Op = Op::Delete { key: ekey.into() };
        writer
            .log(std::slice::from_ref(&op))
            .map_err(Error::Collections)?;
        engram_collections::apply::apply(writer.keys_mut(), op);
        drop(writer);
        slot.counts[key_groups::db_of(ekey)].fetch_sub(1, Ordering::Relaxed);
        key_groups::set_expiry(slot, group, ekey, None);
        key_groups::touch(group, ekey);
        Ok(true)
    }

    /// Locks the key groups of `keys` (database, key) for a write.
    /// `atomic`: the writes are buffered and applied as one crash-atomic
    /// batch at `commit`; otherwise each goes to the engine at once.
    pub fn lock<'k>(
        &self,
        keys: impl IntoIterator<Item = (usize, &'k [u8])>,
        atomic: bool,
    ) -> Result<Txn<'_>> {
        let ekeys = keys
            .into_iter()
            .map(|(db, key)| ekey(db, key))
            .collect::<Result<EKeys>>()?;
        Ok(self.lock_named(ekeys, atomic))
    }

    /// `lock` for keys named as [`ekey`] names them (a client's database
    /// byte, then the key).
    pub fn lock_ekeys<'k>(&self, ekeys: impl Iterator<Item = &'k [u8]>, atomic: bool) -> Txn<'_> {
        self.lock_named(ekeys.map(EKey::from_slice).collect(), atomic)
    }

    /// Locks keys named with clients' database numbers: translated in
    /// place to the stored prefixes, locked, and translated again if a
    /// SWAPDB came in between.
    fn lock_named(&self, mut ekeys: EKeys, atomic: bool) -> Txn<'_> {
        let names: SmallVec<[u8; 4]> = ekeys.iter().map(|k| k[0]).collect();
        loop {
            let version = self.db_map.begin();
            for (ekey, &db) in ekeys.iter_mut().zip(&names) {
                ekey[0] = self.db_map.physical(db as usize) as u8;
            }
            let guards = self.guards_of(&ekeys);
            // A swap excludes the keyspace: once ours are held none can
            // start, and if none ran since the translation it holds.
            if self.db_map.unchanged(version) {
                return Txn::new(self, guards, Some(ekeys), atomic);
            }
        }
    }

    /// Locks the key groups of stored (physical) keys.
    fn lock_stored(&self, ekeys: EKeys, atomic: bool) -> Txn<'_> {
        let guards = self.guards_of(&ekeys);
        Txn::new(self, guards, Some(ekeys), atomic)
    }

    /// The key groups of stored keys, locked in ascending order.
    fn guards_of(&self, ekeys: &[EKey]) -> Held<'_> {
        let mut indexes: SmallVec<[usize; 4]> = ekeys.iter().map(|k| Self::slot_index(k)).collect();
        indexes.sort_unstable();
        indexes.dedup();
        Held::shared(&self.exclusion, &self.groups, indexes)
    }

    /// Excludes every other writer from the whole keyspace (FLUSHDB,
    /// SWAPDB, scripts, transactions that read or write the whole
    /// keyspace), waiting for those inside to finish.
    pub fn lock_all(&self, atomic: bool) -> Txn<'_> {
        let held = Held::exclusive(self.exclusion.exclusive(), &self.groups);
        Txn::new(self, held, None, atomic)
    }

    /// `lock_all` if no other transaction excludes the keyspace and the
    /// writers inside it leave within `patience`, else None (nothing
    /// held): for a caller that must not block its thread for long (a
    /// network worker about to run a script inline).
    pub fn try_lock_all(&self, atomic: bool, patience: Duration) -> Option<Txn<'_>> {
        let held = Held::exclusive(self.exclusion.try_exclusive(patience)?, &self.groups);
        Some(Txn::new(self, held, None, atomic))
    }

    /// Keys in database `db`.
    pub fn dbsize(&self, db: usize) -> u64 {
        self.raw_dbsize(self.db_map.physical(db)).max(0) as u64
    }

    /// The books' count of keys stored under `prefix`: the sum of the key
    /// groups' counts, not clamped at 0 as `dbsize` clamps it.
    pub(crate) fn raw_dbsize(&self, prefix: usize) -> i64 {
        self.groups
            .iter()
            .map(|s| s.counts[prefix].load(Ordering::Relaxed))
            .sum()
    }

    /// Puts key group `slot`'s unindexed expiries (see
    /// `GroupState::unindexed`) in its expiry index, `state` being its
    /// locked state: each noted hash's keys as they are now.
    fn index_unindexed(&self, slot: &KeyGroup, state: &mut key_groups::GroupState) {
        if state.unindexed.is_empty() {
            return;
        }
        for hash in std::mem::take(&mut state.unindexed) {
            for key in self.store.keys_with_hash(hash) {
                if is_reserved(&key)
                    || !self.is_visible(&key)
                    || state.expires.contains_key(&key[..])
                {
                    continue;
                }
                // Gone, or damaged (counted and logged at open): no expiry.
                let expire_at = match self.store.get_ref(&key) {
                    Ok(Some(value)) => value::decode(&value)
                        .ok()
                        .and_then(|(meta, _)| meta.expire_at()),
                    _ => None,
                };
                if expire_at.is_some() {
                    key_groups::set_expiry(slot, state, &key, expire_at);
                }
            }
        }
        for count in slot.unindexed_counts.iter() {
            count.store(0, Ordering::Relaxed);
        }
        slot.unindexed.store(false, Ordering::Release);
    }

    /// Indexes the expiries that recovery only noted (`GroupState::
    /// unindexed`), group after group, until `deadline`; true while some
    /// are left. Reading each key is a random access (about 1.5 s of one
    /// core for 5M keys), so a restart does not wait for it: the server's
    /// expiry thread calls this until it is done; the expiry cycle and
    /// volatile eviction, which need a group's whole index, index that
    /// group first (the count of expiring keys adds what was noted).
    pub fn index_expiries(&self, deadline: Instant) -> bool {
        for slot in self.groups.iter() {
            if !slot.unindexed.load(Ordering::Acquire) {
                continue;
            }
            let mut state = self.lock_group(slot);
            self.index_unindexed(slot, &mut state);
            drop(state);
            if Instant::now() >= deadline {
                return self.expiries_unindexed();
            }
        }
        false
    }

    /// Whether some expiries recovery noted are not indexed yet.
    pub fn expiries_unindexed(&self) -> bool {
        self.groups
            .iter()
            .any(|slot| slot.unindexed.load(Ordering::Acquire))
    }

    /// Keys with an expiry time in database `db`. Never waits: for a
    /// group whose expiries a restart only noted, what recovery noted is
    /// counted (off by the noted keys rewritten or deleted since, until
    /// the group is indexed: the first seconds after a restart). Indexing
    /// here would hold INFO, and the network worker running it, for as
    /// long as the indexing takes.
    pub fn expiring(&self, db: usize) -> u64 {
        let db = self.db_map.physical(db);
        let total: i64 = self
            .groups
            .iter()
            .map(|slot| {
                slot.expiring[db].load(Ordering::Relaxed)
                    + slot.unindexed_counts[db].load(Ordering::Relaxed)
            })
            .sum();
        total.max(0) as u64
    }

    /// One step of a SCAN over database `db`: the keys found (with their
    /// meta words) and the cursor to continue from (0: done). Filters out
    /// other databases and expired keys, so a step may return fewer than
    /// `count` keys, or none, before the end, as Redis's may.
    ///
    /// Both stores walk one cursor space: the engine's step covers the
    /// ranks `cursor..next`, and the collections contribute their keys of
    /// the same range (up to `count`; if they have more, the cursor stops
    /// at the first one left, and the engine's keys past it may come again
    /// next step, which SCAN allows).
    pub fn scan(
        &self,
        db: usize,
        cursor: u64,
        count: usize,
        now_ms: u64,
    ) -> Result<(u64, Vec<KeyMeta>)> {
        // A step is the stored prefix's at the time; a SWAPDB between
        // steps continues in the database now under the number, as
        // Redis's SCAN does.
        let db = self.db_map.physical(db) as u8;
        let (next, found) = self.scan_prefixes(cursor, count, now_ms, |prefix| prefix == db)?;
        let keys = found
            .into_iter()
            .map(|(_, key, meta)| (key, meta))
            .collect();
        Ok((next, keys))
    }

    /// One step of a scan over every database at once (a replicated
    /// node's snapshot): `(database, key, meta)`, with the same cursor
    /// and expiry rules as [`Keyspace::scan`]. One pass over the stores
    /// instead of one per database.
    #[allow(clippy::type_complexity)]
    pub fn scan_all(
        &self,
        cursor: u64,
        count: usize,
        now_ms: u64,
    ) -> Result<(u64, Vec<(usize, Vec<u8>, Meta)>)> {
        let (next, found) =
            self.scan_prefixes(cursor, count, now_ms, |prefix| self.is_visible(&[prefix]))?;
        let keys = found
            .into_iter()
            .map(|(prefix, key, meta)| (self.db_map.logical(prefix as usize), key, meta))
            .collect();
        Ok((next, keys))
    }

    /// A scan step over the stored keys whose prefix (physical database)
    /// `wanted` accepts: `(prefix, key, meta)`.
    #[allow(clippy::type_complexity)]
    fn scan_prefixes(
        &self,
        cursor: u64,
        count: usize,
        now_ms: u64,
        wanted: impl Fn(u8) -> bool,
    ) -> Result<(u64, Vec<(u8, Vec<u8>, Meta)>)> {
        let (next, ekeys) = self.store.scan(cursor, count.max(1));
        let mut found = Vec::with_capacity(ekeys.len());
        for ekey in ekeys {
            let Some(&prefix) = ekey.first() else {
                continue;
            };
            if !wanted(prefix) || journal::is_intent_key(&ekey) {
                continue;
            }
            match self.raw_meta(&ekey) {
                Ok(Some(meta)) if !meta.is_expired(now_ms) => {
                    found.push((prefix, ekey[1..].to_vec(), meta))
                }
                Ok(_) => {}
                // Listed, so a client can find it and delete or rewrite it;
                // its reads fail with the damage.
                Err(e) if e.is_damage() => found.push((
                    prefix,
                    ekey[1..].to_vec(),
                    Meta::new(value::Kind::String, value::Encoding::Raw, None),
                )),
                Err(e) => return Err(e),
            }
        }
        let until = (next != 0).then_some(next);
        let (collections, resume) = self.collections.scan(cursor, until, count.max(1), |k| {
            k.first().is_some_and(|&p| wanted(p))
        });
        for c in collections {
            if c.expire_at_ms == 0 || c.expire_at_ms > now_ms {
                found.push((
                    c.key[0],
                    c.key[1..].to_vec(),
                    Meta::collection(c.kind, c.expire_at_ms),
                ));
            }
        }
        Ok((resume.unwrap_or(next), found))
    }

    /// A random live key of `db`, if it has any.
    pub fn random_key(&self, db: usize, now_ms: u64) -> Result<Option<Vec<u8>>> {
        if self.dbsize(db) == 0 {
            return Ok(None);
        }
        let stored = self.db_map.physical(db);
        // Collections, in proportion to their share of all keys.
        let collections = self.collections.len();
        if collections > 0
            && rand::random::<u64>() % (collections + self.store.len()).max(1) < collections
        {
            let in_db = |k: &[u8]| k.first() == Some(&(stored as u8));
            if let Some(ekey) = self.collections.random_key(in_db) {
                return Ok(Some(ekey[1..].to_vec()));
            }
        }
        // Start anywhere in hash order (the cursor's top bits pick the
        // index shard, so the whole range must be random) and take one of
        // the keys of this database found from there; wrap once.
        let mut cursor: u64 = rand::random();
        let mut wrapped = false;
        loop {
            let (next, mut keys) = self.scan(db, cursor, 16, now_ms)?;
            if !keys.is_empty() {
                let pick = rand::random_range(0..keys.len());
                return Ok(Some(keys.swap_remove(pick).0));
            }
            if next == 0 {
                if wrapped {
                    // The database holds only collections.
                    let in_db = |k: &[u8]| k.first() == Some(&(stored as u8));
                    return Ok(self.collections.random_key(in_db).map(|k| k[1..].to_vec()));
                }
                wrapped = true;
            }
            cursor = next;
        }
    }

    /// The access field of `key` (see `access`), read without touching it;
    /// None when there is no such key.
    pub fn access_of(&self, db: usize, key: &[u8], now_ms: u64) -> Result<Option<u32>> {
        self.access.observe(now_ms);
        loop {
            let version = self.db_map.begin();
            let ekey = self.physical_ekey(db, key)?;
            let field = match self.store.access(&ekey) {
                Some(field) => Some(field),
                None => self.collections.read(&ekey, |e| e.map(|e| e.access.get())),
            };
            if self.db_map.unchanged(version) {
                return Ok(field);
            }
        }
    }

    /// Sets the access field of `key` (RESTORE's IDLETIME and FREQ); false
    /// when there is no such key.
    pub fn set_access(&self, db: usize, key: &[u8], field: u32) -> Result<bool> {
        // Lock-free, as reads are (inside EXEC the caller holds the key's
        // group already): redone if a SWAPDB came between.
        loop {
            let version = self.db_map.begin();
            let ekey = self.physical_ekey(db, key)?;
            let found = self.store.touch(&ekey, |_| field)
                || self.collections.read(&ekey, |e| {
                    e.map(|e| {
                        e.access.touch(|_| field);
                    })
                    .is_some()
                });
            if self.db_map.unchanged(version) {
                return Ok(found);
            }
        }
    }

    /// About `count` keys eviction may choose from, taken at a random place:
    /// from every key of the visible databases (both stores, each in
    /// proportion to its share of the keys), or with `volatile` only from
    /// keys with an expiry time (their expiry always known). `fields`: also
    /// read each key's access field. As Redis's `evictionPoolPopulate`
    /// samples `maxmemory-samples` keys with `dictGetSomeKeys`.
    pub fn eviction_sample(&self, volatile: bool, count: usize, fields: bool) -> Vec<Candidate> {
        let start: u64 = rand::random();
        let visible = |ekey: &[u8]| {
            self.is_visible(ekey)
                && !journal::is_intent_key(ekey)
                && !format::is_format_key(ekey)
                && !db_map::is_map_key(ekey)
        };
        if volatile {
            let mut found = Vec::with_capacity(count);
            for step in 0..KEY_GROUPS {
                let group = &self.groups[(start as usize + step) % KEY_GROUPS];
                if !group.unindexed.load(Ordering::Acquire)
                    && group
                        .expiring
                        .iter()
                        .all(|n| n.load(Ordering::Relaxed) <= 0)
                {
                    continue;
                }
                let mut state = self.lock_group(group);
                self.index_unindexed(group, &mut state);
                let len = state.expires.len();
                if len == 0 {
                    continue;
                }
                let skip = (start >> 32) as usize % len;
                found.extend(
                    state
                        .expires
                        .iter()
                        .skip(skip)
                        .chain(state.expires.iter().take(skip))
                        .filter(|(k, _)| visible(k))
                        .take(count - found.len())
                        .map(|(k, &at)| Candidate {
                            ekey: k.to_vec(),
                            access: 0,
                            expire_at: Some(at),
                        }),
                );
                drop(state);
                if found.len() >= count {
                    break;
                }
            }
            if fields {
                for candidate in &mut found {
                    candidate.access = match self.store.access(&candidate.ekey) {
                        Some(field) => field,
                        None => self
                            .collections
                            .read(&candidate.ekey, |e| e.map_or(0, |e| e.access.get())),
                    };
                }
            }
            return found;
        }
        let collections = self.collections.len();
        let strings = self.store.len();
        if collections > 0 && start % (collections + strings).max(1) < collections {
            return self
                .collections
                .sample(start.rotate_left(17), count)
                .into_iter()
                .filter(|(k, _, _)| visible(k))
                .map(|(ekey, access, at)| Candidate {
                    ekey,
                    access,
                    expire_at: (at != 0).then_some(at),
                })
                .collect();
        }
        self.store
            .sample(start, count)
            .into_iter()
            .filter(|(k, _)| visible(k))
            .map(|(ekey, access)| Candidate {
                ekey,
                access,
                expire_at: None,
            })
            .collect()
    }

    /// Whether any key of the visible databases (with `volatile`: any with
    /// an expiry time) is left for eviction to take.
    pub fn has_evictable(&self, volatile: bool) -> bool {
        (0..self.databases).any(|db| {
            if volatile {
                self.expiring(db) > 0
            } else {
                self.dbsize(db) > 0
            }
        })
    }

    /// Deletes `ekey` for eviction: a normal delete under its key group's
    /// lock (WATCH flags raised, counts and expiry index kept), made
    /// durable by the caller's group-commit ticket like any write. False
    /// if it was gone already.
    pub fn evict(&self, ekey: &[u8]) -> Result<bool> {
        let slot = self.slot(ekey);
        let mut group = self.lock_group(slot);
        self.delete_any(slot, &mut group, ekey)
    }

    /// For blocking commands: registers for a wakeup after the next write
    /// to collection `key` of `db`. Register, *then* check the key, then
    /// await [`WrittenWaiter::notified`] (created before the check): a
    /// write in between is never missed.
    ///
    /// A SWAPDB wakes every blocked client (`wake_all_blocked`), so one
    /// registered under the stored key of before the swap tries again.
    pub fn wait_written(&self, db: usize, key: &[u8]) -> Result<WrittenWaiter<'_>> {
        let ekey = self.physical_ekey(db, key)?;
        let bucket = &self.written[(xxhash_rust::xxh3::xxh3_64(&ekey) as usize) % WRITTEN_BUCKETS];
        bucket.waiters.fetch_add(1, Ordering::SeqCst);
        Ok(WrittenWaiter { bucket })
    }

    /// Wakes the clients blocked on keys of the bucket of `ekey` (a
    /// client's database byte, then the key); cheap when there are none.
    pub fn signal_written(&self, ekey: &[u8]) {
        self.signal_stored(&self.to_physical(ekey));
    }

    /// `signal_written` for a stored key.
    pub(crate) fn signal_stored(&self, ekey: &[u8]) {
        let bucket = &self.written[(xxhash_rust::xxh3::xxh3_64(ekey) as usize) % WRITTEN_BUCKETS];
        if bucket.waiters.load(Ordering::SeqCst) > 0 {
            bucket.notify.notify_waiters();
        }
    }

    /// Wakes every blocked client: their keys may hold something else now
    /// (SWAPDB, FLUSHALL), or the keyspace is about to close under them
    /// (the server's DEBUG RELOAD).
    pub fn wake_all_blocked(&self) {
        for bucket in self.written.iter() {
            if bucket.waiters.load(Ordering::SeqCst) > 0 {
                bucket.notify.notify_waiters();
            }
        }
    }

    /// Starts watching `key` for `flag`'s client; returns the key as
    /// [`ekey`] names it, for `unwatch`.
    pub fn watch(&self, db: usize, key: &[u8], flag: &Arc<AtomicBool>) -> Result<EKey> {
        let name = ekey(db, key)?;
        loop {
            let version = self.db_map.begin();
            let stored = self.to_physical(&name);
            let mut group = self.lock_group(self.slot(&stored));
            if !self.db_map.unchanged(version) {
                continue;
            }
            group.watchers.push(Watcher {
                key: stored.as_slice().into(),
                flag: flag.clone(),
            });
            return Ok(name);
        }
    }

    /// Drops every watch of `flag`'s client on `ekeys` (as `watch`
    /// returned them: a SWAPDB since moved the watches with the keys'
    /// databases, and the translation now finds them there).
    pub fn unwatch(&self, ekeys: &[EKey], flag: &Arc<AtomicBool>) {
        for name in ekeys {
            loop {
                let version = self.db_map.begin();
                let stored = self.to_physical(name);
                let mut group = self.lock_group(self.slot(&stored));
                if !self.db_map.unchanged(version) {
                    continue;
                }
                group.watchers.retain(|w| !Arc::ptr_eq(&w.flag, flag));
                break;
            }
        }
    }

    /// Raises every watching client's flag: their transactions abort, as
    /// after a FLUSHALL (the server's DEBUG RELOAD, before it closes the
    /// keyspace the watches were made on).
    pub fn abort_all_watches(&self) {
        for group in self.groups.iter() {
            for watcher in &self.lock_group(group).watchers {
                watcher.flag.store(true, Ordering::Release);
            }
        }
    }

    /// Deletes expired keys until none is due or `deadline` passes, like
    /// Redis's active expiry cycle; returns how many it deleted. Stripes
    /// whose earliest expiry lies ahead are skipped without locking.
    pub fn expire_cycle(&self, now_ms: u64, deadline: Instant) -> Result<u64> {
        // The access clock moves even while no client calls.
        self.access.observe(now_ms);
        if self.expiry_held() {
            return Ok(0);
        }
        let mut deleted = 0;
        let start = self.expire_cursor.load(Ordering::Relaxed);
        for step in 0..KEY_GROUPS {
            let i = (start + step) % KEY_GROUPS;
            let slot = &self.groups[i];
            if slot.next_due.load(Ordering::Relaxed) > now_ms {
                continue;
            }
            let mut group = self.lock_group(slot);
            self.index_unindexed(slot, &mut group);
            let due: Vec<Box<[u8]>> = group
                .expires
                .iter()
                .filter(|(_, &at)| at <= now_ms)
                .map(|(k, _)| k.clone())
                .collect();
            for ekey in due {
                self.delete_any(slot, &mut group, &ekey)?;
                self.expired_one(&ekey);
                deleted += 1;
            }
            let next = group.expires.values().copied().min().unwrap_or(u64::MAX);
            slot.next_due.store(next, Ordering::Relaxed);
            drop(group);
            if Instant::now() >= deadline {
                self.expire_cursor.store(i + 1, Ordering::Relaxed);
                return Ok(deleted);
            }
        }
        Ok(deleted)
    }

    /// Up to `limit` keys that have expired by `now_ms`, as (database, key),
    /// left in place: a Raft group's leader proposes their deletion, so
    /// that every member deletes the same keys at the same point of the
    /// log (members run no expiry cycle of their own).
    pub fn due_keys(&self, now_ms: u64, limit: usize) -> Vec<(usize, Vec<u8>)> {
        let mut due = Vec::new();
        for slot in self.groups.iter() {
            if slot.next_due.load(Ordering::Relaxed) > now_ms {
                continue;
            }
            // A group whose expiries a restart only noted waits for the
            // expiry thread to index it (seconds): indexing it here would
            // hold the leader's runtime thread for as long.
            if slot.unindexed.load(Ordering::Acquire) {
                continue;
            }
            let group = self.lock_group(slot);
            let mut next = u64::MAX;
            for (ekey, &at) in group.expires.iter() {
                if at > now_ms {
                    next = next.min(at);
                } else if due.len() < limit {
                    if let Some((db, key)) = self.client_key(ekey) {
                        due.push((db, key.to_vec()));
                    }
                } else {
                    return due;
                }
            }
            // Every key of the group looked at: none is due before `next`
            // (those listed are due now, and stay so until deleted).
            if due.is_empty() {
                slot.next_due.store(next, Ordering::Relaxed);
            }
        }
        due
    }

    /// Writes a batch as one crash-atomic unit (see `journal`). The caller
    /// holds the key groups of every key in `ops`.
    fn write_intent(&self, ops: &[journal::Op]) -> Result<Vec<u8>> {
        let seq = self.journal_seq.fetch_add(1, Ordering::Relaxed);
        // Unique across restarts too: intents of the last run are gone
        // (replayed and deleted) before this one starts writing.
        let key = journal::intent_key(seq);
        let bytes = journal::encode(ops.iter().map(|(k, w)| (k.as_slice(), w)));
        if bytes.len() > engram_engine::MAX_VALUE_BYTES {
            return Err(Error::Internal(format!(
                "a transaction of {} bytes exceeds the largest atomic batch ({} bytes)",
                bytes.len(),
                engram_engine::MAX_VALUE_BYTES
            )));
        }
        self.store.put(&key, &bytes).map_err(Error::Engine)?;
        // On emulated memory with `always`, page write-back order is
        // undefined: the intent must be durable before the batch's writes
        // start, or a power failure could expose half of it.
        if self.commit.must_wait() {
            self.commit.barrier();
        }
        Ok(key)
    }

    fn delete_intent(&self, key: &[u8]) -> Result<()> {
        self.store.delete(key).map_err(Error::Engine)?;
        Ok(())
    }
}

/// The engine key of `key` in database `db`, as clients name it: the
/// keyspace stores it under the prefix its database map gives `db`.
pub fn ekey(db: usize, key: &[u8]) -> Result<EKey> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLong(key.len()));
    }
    // Assembled in a plain buffer: SmallVec's push and extend_from_slice
    // (a reserve, then an insert that may shift) cost about 140
    // instructions a key, and a collection write builds its key three
    // times.
    if key.len() < EKEY_INLINE {
        let mut buf = [0u8; EKEY_INLINE];
        buf[0] = db as u8;
        buf[1..=key.len()].copy_from_slice(key);
        return Ok(EKey::from_buf_and_len(buf, key.len() + 1));
    }
    let mut bytes = Vec::with_capacity(key.len() + 1);
    bytes.push(db as u8);
    bytes.extend_from_slice(key);
    Ok(EKey::from_vec(bytes))
}

/// How a client would name an engine key with a client's database byte
/// (`Keyspace::client_key_name` translates a stored one): the key itself in database 0,
/// `db<N>:<key>` in database N > 0 (hidden databases included), and
/// `(multi-key write intent <seq>)` for the journal's intent records.
/// For reports (ENGRAM.SCRUB, `engram scrub`), not for parsing back.
pub fn client_key_name(ekey: &[u8]) -> Vec<u8> {
    if format::is_format_key(ekey) {
        return b"(keyspace format record)".to_vec();
    }
    if db_map::is_map_key(ekey) {
        return b"(database map record)".to_vec();
    }
    if journal::is_intent_key(ekey) {
        let seq = u64::from_be_bytes(ekey[2..].try_into().expect("8 bytes"));
        return format!("(multi-key write intent {seq})").into_bytes();
    }
    match ekey.split_first() {
        None => b"(empty engine key)".to_vec(),
        Some((0, key)) => key.to_vec(),
        Some((db, key)) => {
            let mut name = format!("db{db}:").into_bytes();
            name.extend_from_slice(key);
            name
        }
    }
}

/// Keys the keyspace keeps for itself (records and intents, no database).
pub(crate) fn is_reserved(ekey: &[u8]) -> bool {
    ekey.is_empty()
        || format::is_format_key(ekey)
        || db_map::is_map_key(ekey)
        || functions_record::is_functions_key(ekey)
        || applied_record::is_applied_key(ekey)
        || journal::is_intent_key(ekey)
}

/// Names stored keys as clients know them, for tools that open a stopped
/// strings store by itself (`engram scrub`): the database map it holds,
/// or the identity if it has none or cannot be read (names only).
pub fn key_namer(store: &Store) -> impl Fn(&[u8]) -> Vec<u8> {
    let map = load_db_map(store).unwrap_or_else(|_| DbMap::identity());
    move |stored: &[u8]| map.client_key_name(stored)
}

/// The database map a store holds (the identity if it never swapped).
fn load_db_map(store: &Store) -> Result<DbMap> {
    let file = engram_engine::DATA_FILE;
    match store.get(&db_map::KEY) {
        Ok(None) => Ok(DbMap::identity()),
        Ok(Some(record)) => DbMap::decode(&record, file),
        // Unlike the format record, the map cannot be written again from
        // what this build knows: which database is which would be lost.
        Err(e) => Err(Error::Format(format!(
            "{file}: the database map record (written by SWAPDB) cannot be read: {e};              repair the store (engram scrub) before starting"
        ))),
    }
}

/// The wall clock in Unix milliseconds, as expiry times are kept.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The group commit's sync thread: syncs both stores when asked. It holds
/// the keyspace weakly (a strong handle only for the length of a sync), so
/// dropping the last handle closes the stores at once and ends the thread
/// within its idle wake.
fn run_sync_thread(commit: Arc<GroupCommit>, keyspace: Weak<Keyspace>) {
    commit.run(|| keyspace.strong_count() > 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine key is the database byte and then the key, whether it
    /// fits inline or not; a key over the limit is refused, not cut.
    #[test]
    fn an_engine_key_is_the_database_byte_then_the_key() {
        for len in [
            0,
            1,
            7,
            EKEY_INLINE - 2,
            EKEY_INLINE - 1,
            EKEY_INLINE,
            1000,
            MAX_KEY_LEN,
        ] {
            let key: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let built = ekey(3, &key).unwrap();
            assert_eq!(built.len(), len + 1, "key of {len} bytes");
            assert_eq!(built[0], 3);
            assert_eq!(&built[1..], &key[..], "key of {len} bytes");
            assert_eq!(built.spilled(), len + 1 > EKEY_INLINE);
        }
        assert!(matches!(
            ekey(0, &vec![b'k'; MAX_KEY_LEN + 1]),
            Err(Error::KeyTooLong(n)) if n == MAX_KEY_LEN + 1
        ));
    }

    #[test]
    fn engine_keys_are_named_as_clients_see_them() {
        assert_eq!(client_key_name(b"\0user:1"), b"user:1");
        assert_eq!(client_key_name(b"\x03k"), b"db3:k");
        assert_eq!(client_key_name(&ekey(200, b"x").unwrap()), b"db200:x");
        assert_eq!(
            client_key_name(&journal::intent_key(7)),
            b"(multi-key write intent 7)"
        );
        assert_eq!(client_key_name(b""), b"(empty engine key)");
    }

    use std::collections::BTreeMap;
    use value::{encode_int, encode_string, Kind};

    fn set_of(members: &[&str]) -> Object {
        let mut set = engram_collections::types::Set::default();
        for m in members {
            set.insert(m.as_bytes().into());
        }
        Object::Set(set)
    }

    fn kind_of(ks: &Keyspace, key: &[u8]) -> Option<Kind> {
        ks.read(0, key, now_ms(), |meta, _| meta.kind()).unwrap()
    }

    /// Every kind of stored key startup must account for, written to the
    /// raw stores: strings with and without expiry (some already expired),
    /// overwritten and deleted ones, integers, a hidden database, a
    /// collection with an expiry, a key in both stores, an interrupted
    /// batch's intent, the functions record, a malformed value. Returns
    /// what the keyspace must find: per database, key → expiry.
    fn write_every_kind(
        store: &Store,
        collections: &Collections,
        now: u64,
    ) -> BTreeMap<usize, BTreeMap<Vec<u8>, Option<u64>>> {
        let mut model: BTreeMap<usize, BTreeMap<Vec<u8>, Option<u64>>> = BTreeMap::new();
        let (soon, later) = (now - 1_000, now + 3_600_000);
        type Model = BTreeMap<usize, BTreeMap<Vec<u8>, Option<u64>>>;
        let put = |model: &mut Model, db: u8, key: &[u8], expiry: Option<u64>, int: bool| {
            let mut value = Vec::new();
            if int {
                encode_int(&mut value, 42, expiry);
            } else {
                encode_string(&mut value, b"value", expiry);
            }
            store.put(&[&[db], key].concat(), &value).unwrap();
            model
                .entry(db as usize)
                .or_default()
                .insert(key.to_vec(), expiry);
        };
        for i in 0..300 {
            let expiry = match i {
                _ if i % 10 == 1 => Some(soon),
                _ if i % 3 == 0 => Some(later),
                _ => None,
            };
            put(&mut model, 0, format!("s{i}").as_bytes(), expiry, false);
        }
        for i in 0..50 {
            put(
                &mut model,
                0,
                format!("s{i}").as_bytes(),
                (i % 2 == 0).then_some(later),
                false,
            );
        }
        for i in 250..260 {
            store.delete(format!("\0s{i}").as_bytes()).unwrap();
            model
                .get_mut(&0)
                .unwrap()
                .remove(format!("s{i}").as_bytes());
        }
        for i in 0..20 {
            put(
                &mut model,
                3,
                format!("n{i}").as_bytes(),
                (i % 2 == 0).then_some(later),
                true,
            );
        }
        for i in 0..5 {
            put(
                &mut model,
                20,
                format!("h{i}").as_bytes(),
                Some(later),
                false,
            );
        }
        // A key in both stores keeps its collection (no expiry).
        put(&mut model, 0, b"both", Some(later), false);
        *model
            .get_mut(&0)
            .unwrap()
            .get_mut(b"both".as_slice())
            .unwrap() = None;
        collections
            .write(vec![
                Op::Replace {
                    key: b"\0both".as_slice().into(),
                    object: set_of(&["a"]),
                },
                Op::Replace {
                    key: b"\x05set".as_slice().into(),
                    object: set_of(&["a", "b"]),
                },
                Op::Expire {
                    key: b"\x05set".as_slice().into(),
                    at_ms: later,
                },
            ])
            .unwrap();
        model
            .entry(5)
            .or_default()
            .insert(b"set".to_vec(), Some(later));
        // An interrupted batch: its string appears when it is replayed.
        let mut value = Vec::new();
        encode_string(&mut value, b"v", Some(later));
        let ops: Vec<journal::Op> =
            vec![(b"\x02batch".to_vec(), journal::Write::Engine(Some(value)))];
        let intent = journal::encode(ops.iter().map(|(k, w)| (k.as_slice(), w)));
        store.put(&journal::intent_key(0), &intent).unwrap();
        model
            .entry(2)
            .or_default()
            .insert(b"batch".to_vec(), Some(later));
        store.put(&functions_record::KEY, b"libraries").unwrap();
        // Not a value a string may have: counted, without an expiry.
        store.put(b"\x04bad", b"xx").unwrap();
        model.entry(4).or_default().insert(b"bad".to_vec(), None);
        model
    }

    fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    /// The books as a client sees them (after an active expiry cycle).
    fn census(ks: &Keyspace) -> Vec<(usize, u64, u64, Vec<Vec<u8>>)> {
        (0..ks.databases())
            .map(|db| {
                let mut keys = Vec::new();
                if db != 4 {
                    let mut cursor = 0;
                    loop {
                        let (next, batch) = ks.scan(db, cursor, 100, now_ms()).unwrap();
                        keys.extend(batch.into_iter().map(|(k, _)| k));
                        if next == 0 {
                            break;
                        }
                        cursor = next;
                    }
                    keys.sort();
                }
                (db, ks.dbsize(db), ks.expiring(db), keys)
            })
            .collect()
    }

    /// Startup's books from the engine's recovery (`recovered.rs`, through
    /// `open_dir`) are those of a scan that reads every key (`open` over
    /// stores opened without the visitor), and the model's: after a clean
    /// close (recovery from an index image), after a crash (a scan of
    /// every block), and after a crash that followed an image (both).
    #[test]
    fn startup_books_from_recovery_match_a_scan_of_every_key() {
        for ending in ["close", "crash", "image then crash"] {
            let dir = tempfile::tempdir().unwrap();
            let now = now_ms();
            let mut model = {
                let (store, collections) = open_stores_for_tests(dir.path());
                let model = write_every_kind(&store, &collections, now);
                if ending == "close" {
                    collections.close().unwrap();
                    store.close().unwrap();
                } else {
                    collections.crash();
                    store.crash();
                }
                model
            };
            if ending == "image then crash" {
                let (store, collections) = open_stores_for_tests(dir.path());
                store.write_index_image().unwrap();
                let mut value = Vec::new();
                encode_string(&mut value, b"again", Some(now - 5));
                for i in 100..120 {
                    store.put(format!("\0s{i}").as_bytes(), &value).unwrap();
                    model
                        .get_mut(&0)
                        .unwrap()
                        .insert(format!("s{i}").into_bytes(), Some(now - 5));
                }
                store.delete(b"\0s121").unwrap();
                model.get_mut(&0).unwrap().remove(b"s121".as_slice());
                collections.crash();
                store.crash();
            }
            let copies = tempfile::tempdir().unwrap();
            let (scanned, recovered) = (
                copies.path().join("scanned"),
                copies.path().join("recovered"),
            );
            for copy in [&scanned, &recovered] {
                copy_dir(dir.path(), copy);
            }
            let (store, collections) = open_stores_for_tests(&scanned);
            let by_scan = Keyspace::open(store, collections, 16, Durability::Process).unwrap();
            let opened = Keyspace::open_dir(
                &recovered,
                &KeyspaceOptions {
                    checkpoints: engram_collections::CheckpointMode::Manual,
                    ..KeyspaceOptions::default()
                },
            )
            .unwrap();
            let by_recovery = opened.keyspace;
            if ending != "crash" {
                assert!(
                    by_recovery
                        .store()
                        .recovery_report()
                        .index_image
                        .image
                        .is_some(),
                    "{ending}: recovered from an image"
                );
            }
            let due: u64 = model
                .iter()
                .filter(|(db, _)| **db < 16)
                .flat_map(|(_, keys)| keys.values())
                .filter(|e| e.is_some_and(|at| at <= now))
                .count() as u64;
            for ks in [&by_scan, &by_recovery] {
                assert_eq!(
                    ks.stats.keys_in_hidden_dbs.load(Ordering::Relaxed),
                    5,
                    "{ending}"
                );
                assert_eq!(
                    ks.stats.batches_replayed.load(Ordering::Relaxed),
                    1,
                    "{ending}"
                );
                let far = Instant::now() + std::time::Duration::from_secs(60);
                assert_eq!(
                    ks.expire_cycle(now_ms(), far).unwrap(),
                    due,
                    "{ending}: expired"
                );
            }
            let expected: Vec<(usize, u64, u64, Vec<Vec<u8>>)> = (0..16)
                .map(|db| {
                    let live: BTreeMap<&Vec<u8>, &Option<u64>> = model
                        .get(&db)
                        .into_iter()
                        .flatten()
                        .filter(|(_, e)| !e.is_some_and(|at| at <= now))
                        .collect();
                    let expiring = live.values().filter(|e| e.is_some()).count() as u64;
                    let keys = if db == 4 {
                        Vec::new()
                    } else {
                        live.keys().map(|k| k.to_vec()).collect()
                    };
                    (db, live.len() as u64, expiring, keys)
                })
                .collect();
            assert_eq!(
                census(&by_scan),
                expected,
                "{ending}: by a scan of every key"
            );
            assert_eq!(census(&by_recovery), expected, "{ending}: from recovery");
        }
    }

    /// A crash between the two writes of a type change leaves the key in
    /// both stores; startup keeps the collection and counts the key once.
    #[test]
    fn a_key_in_both_stores_keeps_its_collection() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, collections) = open_stores_for_tests(dir.path());
            let mut value = Vec::new();
            encode_string(&mut value, b"text", None);
            store.put(b"\0k", &value).unwrap();
            store.put(b"\0s", &value).unwrap();
            collections
                .write(vec![Op::Replace {
                    key: b"\0k".as_slice().into(),
                    object: set_of(&["a"]),
                }])
                .unwrap();
            collections.close().unwrap();
            store.close().unwrap();
        }
        let (store, collections) = open_stores_for_tests(dir.path());
        let ks = Keyspace::open(store, collections, 16, Durability::Process).unwrap();
        assert_eq!(kind_of(&ks, b"k"), Some(Kind::Set));
        assert_eq!(kind_of(&ks, b"s"), Some(Kind::String));
        assert!(ks.store().get(b"\0k").unwrap().is_none(), "the string went");
        assert_eq!(ks.dbsize(0), 2);
    }

    /// An intent naming engine writes and collection states is replayed
    /// whole at startup, whatever part of it was applied.
    #[test]
    fn an_interrupted_mixed_batch_is_replayed_from_its_intent() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, collections) = open_stores_for_tests(dir.path());
            // Before the crash: "h" was a set, "gone" a set, "str" a string.
            collections
                .write(vec![
                    Op::Replace {
                        key: b"\0h".as_slice().into(),
                        object: set_of(&["old"]),
                    },
                    Op::Replace {
                        key: b"\0gone".as_slice().into(),
                        object: set_of(&["x"]),
                    },
                ])
                .unwrap();
            let mut value = Vec::new();
            encode_string(&mut value, b"v", None);
            let mut image = Vec::new();
            set_of(&["new1", "new2"]).encode(&mut image);
            let ops: Vec<journal::Op> = vec![
                (b"\0str".to_vec(), journal::Write::Engine(Some(value))),
                (
                    b"\0h".to_vec(),
                    journal::Write::Collection(Some((u64::MAX >> 20, image))),
                ),
                (b"\0gone".to_vec(), journal::Write::Collection(None)),
            ];
            let intent = journal::encode(ops.iter().map(|(k, w)| (k.as_slice(), w)));
            store.put(&journal::intent_key(0), &intent).unwrap();
            collections.close().unwrap();
            store.close().unwrap();
        }
        let (store, collections) = open_stores_for_tests(dir.path());
        let ks = Keyspace::open(store, collections, 16, Durability::Process).unwrap();
        assert_eq!(ks.stats.batches_replayed.load(Ordering::Relaxed), 1);
        assert_eq!(kind_of(&ks, b"str"), Some(Kind::String));
        assert_eq!(kind_of(&ks, b"gone"), None);
        let members = ks
            .read_collection(0, b"h", CKind::Set, now_ms(), |o| o.map(|o| o.len()))
            .unwrap();
        assert_eq!(members, Some(2));
        assert_eq!(
            ks.read(0, b"h", now_ms(), |meta, _| meta.expire_at())
                .unwrap(),
            Some(Some(u64::MAX >> 20)),
            "the state's expiry came back too"
        );
        assert_eq!(ks.dbsize(0), 2);
        assert_eq!(ks.expiring(0), 1);
        // The intent is gone: a second start replays nothing.
        Keyspace::close(ks).unwrap();
        let (store, collections) = open_stores_for_tests(dir.path());
        let ks = Keyspace::open(store, collections, 16, Durability::Process).unwrap();
        assert_eq!(ks.stats.batches_replayed.load(Ordering::Relaxed), 0);
        assert_eq!(ks.dbsize(0), 2);
    }

    /// Collection changes of an atomic transaction that is dropped without
    /// its commit (a failed command inside it) are taken back, books too.
    #[test]
    fn an_uncommitted_atomic_transaction_leaves_no_trace() {
        let dir = tempfile::tempdir().unwrap();
        let (store, collections) = open_stores_for_tests(dir.path());
        let ks = Keyspace::open(store, collections, 16, Durability::Process).unwrap();
        let key = ckey(0, b"s").unwrap();
        {
            let mut txn = ks.lock([(0, b"s".as_slice())], true).unwrap();
            txn.log(vec![Op::SetAdd {
                key: key.clone(),
                members: vec![b"a".as_slice().into()],
            }])
            .unwrap();
            // Read-your-writes inside the transaction.
            assert_eq!(
                txn.collection(0, b"s", CKind::Set, now_ms())
                    .unwrap()
                    .map(|o| o.len()),
                Some(1)
            );
            assert_eq!(ks.dbsize(0), 1);
        }
        assert_eq!(kind_of(&ks, b"s"), None);
        assert_eq!(ks.dbsize(0), 0);
        assert_eq!(
            ks.collections().stats().log.records,
            0,
            "nothing was logged"
        );

        // Committed, the same transaction is one record.
        let mut txn = ks
            .lock([(0, b"s".as_slice()), (0, b"t".as_slice())], true)
            .unwrap();
        txn.log(vec![Op::SetAdd {
            key: key.clone(),
            members: vec![b"a".as_slice().into()],
        }])
        .unwrap();
        txn.put_string(0, b"t", b"string", None).unwrap();
        txn.log(vec![Op::SetAdd {
            key,
            members: vec![b"b".as_slice().into()],
        }])
        .unwrap();
        assert!(txn.commit().unwrap());
        assert_eq!(ks.collections().stats().log.records, 1);
        assert_eq!(kind_of(&ks, b"t"), Some(Kind::String));
        assert_eq!(ks.dbsize(0), 2);
    }

    /// A transaction that forwent rollback (a replicated node's apply)
    /// records no undo for its collection operations, and its commit logs
    /// them as any atomic transaction's: one record, the fields there
    /// after a reopen.
    #[test]
    fn a_transaction_without_rollback_records_no_undo_and_commits_whole() {
        let dir = tempfile::tempdir().unwrap();
        let pair = |f: &'static [u8], v: &'static [u8]| (f, v);
        {
            let ks = open_keyspace(dir.path());
            let mut txn = ks.lock_all(true);
            txn.hash_set(0, b"h", vec![pair(b"f1", b"a")]).unwrap();
            assert!(txn.undo_held_bytes() > 0, "an ordinary one records it");
            assert!(txn.commit().unwrap());
            let mut txn = ks.lock_all(true);
            txn.forgo_rollback();
            txn.hash_set(0, b"h", vec![pair(b"f1", b"b"), pair(b"f2", b"c")])
                .unwrap();
            txn.put_string(0, b"s", b"v", None).unwrap();
            assert_eq!(txn.undo_held_bytes(), 0);
            // Read-your-writes still.
            let fields = txn
                .collection(0, b"h", CKind::Hash, now_ms())
                .unwrap()
                .map(|o| o.len());
            assert_eq!(fields, Some(2));
            assert!(txn.commit().unwrap());
            assert_eq!(ks.collections().stats().log.records, 2);
        }
        let ks = open_keyspace(dir.path());
        let mut txn = ks.lock_all(true);
        match txn.collection(0, b"h", CKind::Hash, now_ms()).unwrap() {
            Some(Object::Hash(hash)) => {
                assert_eq!(hash.get(b"f1"), Some(&b"b"[..]));
                assert_eq!(hash.get(b"f2"), Some(&b"c"[..]));
            }
            _ => panic!("the hash did not survive the reopen"),
        }
        assert_eq!(ks.dbsize(0), 2);
    }

    /// Warming an HSET's field ahead looks only where the transaction has
    /// reached: a key whose collections shard it has not locked yet (or
    /// one that holds no hash) is passed over, not a stop, and the warmed
    /// fields are written as usual.
    #[test]
    fn warming_a_hash_field_ahead_passes_over_keys_not_reached() {
        let dir = tempfile::tempdir().unwrap();
        let ks = open_keyspace(dir.path());
        let mut txn = ks.lock_all(true);
        txn.forgo_rollback();
        // Before any collection access: nothing held, nothing looked at.
        txn.prefetch_hash_fields(0, b"h0", &[(b"f", FieldWarm::Slot)]);
        txn.hash_set(0, b"h0", vec![(&b"f"[..], &b"a"[..])])
            .unwrap();
        // Keys in every other shard, not reached yet, and a string.
        for i in 1..200u32 {
            let key = format!("h{i}");
            txn.prefetch_hash_fields(0, key.as_bytes(), &[(b"f", FieldWarm::Slot)]);
            txn.prefetch_hash_fields(0, key.as_bytes(), &[(b"f", FieldWarm::Value)]);
        }
        txn.put_string(0, b"s", b"v", None).unwrap();
        txn.prefetch_hash_fields(0, b"s", &[(b"f", FieldWarm::Value)]);
        txn.prefetch_hash_fields(
            0,
            b"h0",
            &[(b"g", FieldWarm::Slot), (b"f", FieldWarm::Value)],
        );
        txn.hash_set(0, b"h0", vec![(&b"f"[..], &b"b"[..])])
            .unwrap();
        txn.hash_set(0, b"h7", vec![(&b"f"[..], &b"c"[..])])
            .unwrap();
        assert!(txn.commit().unwrap());
        let mut txn = ks.lock_all(true);
        for (key, value) in [(&b"h0"[..], &b"b"[..]), (b"h7", b"c")] {
            match txn.collection(0, key, CKind::Hash, now_ms()).unwrap() {
                Some(Object::Hash(hash)) => assert_eq!(hash.get(b"f"), Some(value)),
                _ => panic!("{key:?} is not a hash"),
            }
        }
    }

    /// Existing keys changed by an atomic transaction dropped without its
    /// commit come back as they were: members, fields, elements, names,
    /// expiry, and the key counts.
    #[test]
    fn an_uncommitted_atomic_transaction_puts_existing_keys_back() {
        let dir = tempfile::tempdir().unwrap();
        let (store, collections) = open_stores_for_tests(dir.path());
        let ks = Keyspace::open(store, collections, 16, Durability::Process).unwrap();
        let far = now_ms() + 3_600_000;
        let k = |name: &[u8]| ckey(0, name).unwrap();
        let b = |bytes: &[u8]| -> engram_collections::op::Bytes { bytes.into() };
        let names: [&[u8]; 4] = [b"s", b"h", b"l", b"n"];
        let mut txn = ks.lock(names.iter().map(|n| (0, *n)), false).unwrap();
        txn.log(vec![
            Op::SetAdd {
                key: k(b"s"),
                members: vec![b(b"a"), b(b"b")],
            },
            Op::Expire {
                key: k(b"s"),
                at_ms: far,
            },
            Op::HashSet {
                key: k(b"h"),
                pairs: vec![(b(b"f"), b(b"1"))],
            },
            Op::ListPush {
                key: k(b"l"),
                front: false,
                values: vec![b(b"x"), b(b"y"), b(b"z")],
            },
        ])
        .unwrap();
        txn.commit().unwrap();
        let entries = || -> Vec<Option<engram_collections::Entry>> {
            names
                .iter()
                .map(|n| {
                    let key = k(n);
                    let writer = ks.collections().writer(&[&key]);
                    writer.keys().get(&key).cloned()
                })
                .collect()
        };
        let before = entries();
        assert_eq!((ks.dbsize(0), ks.expiring(0)), (3, 1));
        {
            let mut txn = ks.lock(names.iter().map(|n| (0, *n)), true).unwrap();
            txn.log(vec![
                Op::SetAdd {
                    key: k(b"s"),
                    members: vec![b(b"c")],
                },
                // Empties the set: the key goes, with its expiry.
                Op::SetRemove {
                    key: k(b"s"),
                    members: vec![b(b"a"), b(b"b"), b(b"c")],
                },
                Op::HashSet {
                    key: k(b"h"),
                    pairs: vec![(b(b"f"), b(b"2")), (b(b"g"), b(b"3"))],
                },
                Op::ListPop {
                    key: k(b"l"),
                    front: true,
                    count: 2,
                },
                Op::Rename {
                    from: k(b"l"),
                    to: k(b"n"),
                },
            ])
            .unwrap();
            assert_eq!((ks.dbsize(0), ks.expiring(0)), (2, 0));
        }
        assert_eq!(entries(), before);
        assert_eq!((ks.dbsize(0), ks.expiring(0)), (3, 1));
        assert_eq!(
            ks.read(0, b"s", now_ms(), |meta, _| meta.expire_at())
                .unwrap(),
            Some(Some(far))
        );
    }

    /// A string written over a collection replaces it (and its expiry), and
    /// a collection renamed over a string replaces that.
    #[test]
    fn type_changes_keep_one_store_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let (store, collections) = open_stores_for_tests(dir.path());
        let ks = Keyspace::open(store, collections, 16, Durability::Process).unwrap();
        let far = now_ms() + 3_600_000;
        let mut txn = ks.lock([(0, b"k".as_slice())], false).unwrap();
        txn.log(vec![
            Op::Replace {
                key: ckey(0, b"k").unwrap(),
                object: set_of(&["a"]),
            },
            Op::Expire {
                key: ckey(0, b"k").unwrap(),
                at_ms: far,
            },
        ])
        .unwrap();
        assert_eq!(ks.expiring(0), 1);
        txn.put_string(0, b"k", b"v", None).unwrap();
        txn.commit().unwrap();
        assert_eq!(kind_of(&ks, b"k"), Some(Kind::String));
        assert!(ks.collections().is_empty());
        assert_eq!((ks.dbsize(0), ks.expiring(0)), (1, 0));

        let mut txn = ks
            .lock([(0, b"src".as_slice()), (0, b"k".as_slice())], false)
            .unwrap();
        txn.log(vec![Op::Replace {
            key: ckey(0, b"src").unwrap(),
            object: set_of(&["x", "y"]),
        }])
        .unwrap();
        txn.log(vec![Op::Rename {
            from: ckey(0, b"src").unwrap(),
            to: ckey(0, b"k").unwrap(),
        }])
        .unwrap();
        txn.commit().unwrap();
        assert_eq!(kind_of(&ks, b"k"), Some(Kind::Set));
        assert_eq!(kind_of(&ks, b"src"), None);
        assert!(ks.store().get(b"\0k").unwrap().is_none());
        assert_eq!(ks.dbsize(0), 1);
        assert!(matches!(
            ks.read_collection(0, b"k", CKind::Hash, now_ms(), |_| ()),
            Err(Error::WrongType)
        ));
    }
    /// A store without the format record gets one; a record of another
    /// version is refused by name, and the store is left as it was.
    #[test]
    fn keyspace_format_versions_are_recorded_and_unknown_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, collections) = open_stores_for_tests(dir.path());
            let mut value = Vec::new();
            encode_string(&mut value, b"v", None);
            store.put(b"\0k", &value).unwrap();
            let ks = Keyspace::open(store, collections, 16, Durability::Process).unwrap();
            assert_eq!(
                ks.store().get(&format::KEY).unwrap().as_deref(),
                Some(&format::encode()[..]),
                "a store from before the record gets it"
            );
            assert_eq!(ks.dbsize(0), 1, "the record is not a key");
            let mut future = format::encode();
            future[12..16].copy_from_slice(&9u32.to_le_bytes());
            ks.store().put(&format::KEY, &future).unwrap();
            Keyspace::close(ks).unwrap();
        }
        let (store, collections) = open_stores_for_tests(dir.path());
        let error = match Keyspace::open(store, collections, 16, Durability::Process) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("an unknown intent version was accepted"),
        };
        assert!(
            error.contains("values.pmem: keyspace intent record format version 9 is not supported"),
            "{error}"
        );
        let (store, _collections) = open_stores_for_tests(dir.path());
        let mut future = format::encode();
        future[12..16].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(
            store.get(&format::KEY).unwrap().as_deref(),
            Some(&future[..]),
            "the refused record was left alone"
        );
        assert!(store.get(b"\0k").unwrap().is_some());
    }
    /// A format record on a page parity cannot rebuild takes only itself
    /// offline: the keyspace opens and writes the record again.
    #[test]
    fn a_format_record_on_an_unrepairable_page_is_written_again() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, collections) = open_stores_for_tests(dir.path());
            let ks = Keyspace::open(store, collections, 16, Durability::Process).unwrap();
            Keyspace::close(ks).unwrap();
        }
        // Damage the record's page and another page of its stripe, so
        // parity cannot rebuild either.
        let path = dir.path().join(engram_engine::DATA_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes
            .windows(8)
            .position(|w| w == b"EGKSPACE")
            .expect("the format record is in the data file");
        let page = at / 4096;
        let other = if page % 4 == 0 { page + 1 } else { page - 1 };
        bytes[at] ^= 0xFF;
        bytes[other * 4096 + 100] ^= 0xFF;
        std::fs::write(&path, &bytes).unwrap();

        let (store, collections) = open_stores_for_tests(dir.path());
        assert!(
            store
                .get(&format::KEY)
                .unwrap_err()
                .to_string()
                .contains("could not be rebuilt"),
            "the damage is unrepairable"
        );
        let ks = Keyspace::open(store, collections, 16, Durability::Process)
            .expect("a damaged format record does not take the keyspace down");
        assert_eq!(
            ks.store().get(&format::KEY).unwrap().as_deref(),
            Some(&format::encode()[..])
        );
    }

    /// CONFIG SET durability switches the engine's ordering against
    /// power loss both ways: at `process` a counter's word is updated in
    /// place (nothing appended), at `always` each update appends a new
    /// version (an in-place store there would dirty a page no tail sync
    /// covers). Lazy retirement, where the two differ, is what `always`
    /// and replicated nodes open with.
    #[test]
    fn a_durability_switch_turns_the_engine_s_ordering_with_it() {
        let dir = tempfile::tempdir().unwrap();
        // Opened at `process` (at `always` the stores would be staged, and
        // stay at `always`: next test), with lazy retirement as a
        // replicated node's atomic batches ask for it.
        let options = KeyspaceOptions {
            durability: Durability::Process,
            atomic_batches: true,
            checkpoints: engram_collections::CheckpointMode::Manual,
            ..KeyspaceOptions::default()
        };
        let ks = Keyspace::open_dir(dir.path(), &options).unwrap().keyspace;
        assert!(!ks.is_staged());
        let store = ks.store();
        store.put(b"counter", &[0u8; 16]).unwrap();
        let appends = |update: u64| {
            let before = store.stats().appended_bytes;
            assert_eq!(store.incr_by(b"counter", 8, 1).unwrap(), update);
            store.stats().appended_bytes > before
        };
        assert!(!appends(1), "at process an update is made in place");
        ks.set_durability(Durability::Always);
        assert!(appends(2), "at always it appends");
        ks.set_durability(Durability::Process);
        assert!(!appends(3), "back at process it is made in place again");
        Keyspace::close(ks).unwrap();
    }

    /// Opened at `always`, the stores are staged (their writes reach the
    /// files only at each sync), so no weaker rule takes effect until they
    /// are opened again: `set_durability` notes it as asked for (the rule
    /// the next opening takes) and keeps `always` in force. Opened again at
    /// `process`, they are not staged.
    #[test]
    fn stores_opened_at_always_are_staged_and_keep_always() {
        let dir = tempfile::tempdir().unwrap();
        let open = |durability| {
            let options = KeyspaceOptions {
                durability,
                checkpoints: engram_collections::CheckpointMode::Manual,
                ..KeyspaceOptions::default()
            };
            Keyspace::open_dir(dir.path(), &options).unwrap().keyspace
        };
        let ks = open(Durability::Always);
        assert!(ks.is_staged());
        assert_eq!(ks.defers_durability(Durability::Always), None);
        for weaker in [Durability::Everysec, Durability::Process] {
            let reason = ks.defers_durability(weaker).expect("deferred");
            assert!(reason.contains("next restart"), "{reason}");
            ks.set_durability(weaker);
            assert_eq!(ks.commit().durability(), Durability::Always);
            assert_eq!(ks.commit().requested(), weaker);
        }
        ks.set_durability(Durability::Always);
        assert_eq!(ks.commit().requested(), Durability::Always);
        ks.store().put(b"k", b"v").unwrap();
        Keyspace::close(ks).unwrap();
        let ks = open(Durability::Process);
        assert!(!ks.is_staged());
        assert_eq!(ks.defers_durability(Durability::Process), None);
        assert_eq!(ks.store().get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        Keyspace::close(ks).unwrap();
    }

    /// After a restart the expiries recovery only noted (by hash) are
    /// indexed from the keys as they are when indexing runs: a key
    /// rewritten without an expiry before then is not expired by its old
    /// time, one given a new time expires by it, a deleted one is not
    /// counted. Whether the indexing runs by itself first (the server's
    /// expiry thread) or the expiry cycle meets the groups unindexed.
    #[test]
    fn noted_expiries_are_indexed_from_the_keys_as_they_are_then() {
        for index_first in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let options = KeyspaceOptions {
                checkpoints: engram_collections::CheckpointMode::Manual,
                ..KeyspaceOptions::default()
            };
            let now = now_ms();
            let soon = now + 300;
            let far = now + 3_600_000;
            let ks = Keyspace::open_dir(dir.path(), &options).unwrap().keyspace;
            for (key, at) in [
                (b"persisted".as_slice(), Some(soon)),
                (b"renewed", Some(far)),
                (b"deleted", Some(far)),
                (b"due", Some(soon)),
                (b"kept", Some(far)),
                (b"plain", None),
            ] {
                put_string(&ks, key, at);
            }
            Keyspace::close(ks).unwrap();
            let ks = Keyspace::open_dir(dir.path(), &options).unwrap().keyspace;
            assert!(ks.expiries_unindexed());
            put_string(&ks, b"persisted", None);
            put_string(&ks, b"renewed", Some(soon));
            let mut txn = ks.lock([(0, b"deleted".as_slice())], false).unwrap();
            assert!(txn.delete(0, b"deleted", now_ms()).unwrap());
            txn.commit().unwrap();
            assert!(ks.expiries_unindexed(), "writes index nothing");
            if index_first {
                assert!(!ks.index_expiries(Instant::now() + Duration::from_secs(60)));
                assert!(!ks.expiries_unindexed());
                assert_eq!(ks.expiring(0), 3, "renewed, due, kept");
            }
            std::thread::sleep(Duration::from_millis(soon + 100 - now_ms().min(soon)));
            let deadline = Instant::now() + Duration::from_secs(60);
            assert_eq!(
                ks.expire_cycle(now_ms(), deadline).unwrap(),
                2,
                "{index_first}"
            );
            assert!(!ks.expiries_unindexed());
            assert_eq!((ks.dbsize(0), ks.expiring(0)), (3, 1), "{index_first}");
            for (key, expires) in [
                (b"persisted".as_slice(), false),
                (b"kept", true),
                (b"plain", false),
            ] {
                let meta = ks.read(0, key, now_ms(), |meta, _| meta).unwrap();
                assert_eq!(
                    meta.map(|meta| meta.expire_at().is_some()),
                    Some(expires),
                    "{key:?}"
                );
            }
        }
    }

    /// The count of expiring keys right after a restart, before anything
    /// indexed them, is what recovery noted, taken without waiting (here
    /// under the whole keyspace's exclusion, as a script's INFO is), and
    /// the same once they are indexed.
    #[test]
    fn expiring_keys_are_counted_before_they_are_indexed() {
        let dir = tempfile::tempdir().unwrap();
        let options = KeyspaceOptions {
            checkpoints: engram_collections::CheckpointMode::Manual,
            ..KeyspaceOptions::default()
        };
        let far = now_ms() + 3_600_000;
        let ks = Keyspace::open_dir(dir.path(), &options).unwrap().keyspace;
        for i in 0..50 {
            put_string(&ks, format!("k{i}").as_bytes(), (i % 2 == 0).then_some(far));
        }
        Keyspace::close(ks).unwrap();
        let ks = Keyspace::open_dir(dir.path(), &options).unwrap().keyspace;
        assert!(ks.expiries_unindexed());
        {
            let _whole = ks.exclusion.exclusive();
            assert_eq!(ks.expiring(0), 25);
        }
        assert!(ks.expiries_unindexed(), "counting indexes nothing");
        assert!(!ks.index_expiries(Instant::now() + Duration::from_secs(60)));
        assert_eq!(ks.expiring(0), 25);
    }

    /// A write that follows a check of its key (LPUSH after the length,
    /// SADD after the members) books the key as the check found it: a new
    /// key counted once, a key that was there not counted again, its
    /// expiry kept in the index; and a check followed by another write
    /// to the key is not taken for what the key holds.
    #[test]
    fn a_write_after_a_check_books_the_key_as_found() {
        let dir = tempfile::tempdir().unwrap();
        let ks = open_keyspace(dir.path());
        let far = now_ms() + 3_600_000;
        let push = |txn: &mut Txn<'_>| txn.list_push(0, b"l", false, vec![b"x".as_slice()]);
        let len = |txn: &mut Txn<'_>| txn.collection_len(0, b"l", CKind::List, now_ms()).unwrap();
        let mut txn = ks.lock([(0, b"l".as_slice())], false).unwrap();
        assert_eq!(len(&mut txn), None);
        push(&mut txn).unwrap();
        assert_eq!(len(&mut txn), Some(1));
        push(&mut txn).unwrap();
        txn.log(vec![Op::Expire {
            key: ckey(0, b"l").unwrap(),
            at_ms: far,
        }])
        .unwrap();
        assert_eq!(len(&mut txn), Some(2));
        push(&mut txn).unwrap();
        txn.commit().unwrap();
        assert_eq!((ks.dbsize(0), ks.expiring(0)), (1, 1));

        // Checked, then deleted, then pushed: a new key again.
        let mut txn = ks.lock([(0, b"l".as_slice())], false).unwrap();
        assert_eq!(len(&mut txn), Some(3));
        txn.log(vec![Op::Delete {
            key: ckey(0, b"l").unwrap(),
        }])
        .unwrap();
        push(&mut txn).unwrap();
        txn.commit().unwrap();
        assert_eq!((ks.dbsize(0), ks.expiring(0)), (1, 0));

        // Checked, then a string written over it, then pushed: the string
        // goes and the list is counted once.
        let mut txn = ks.lock([(0, b"l".as_slice())], false).unwrap();
        assert_eq!(len(&mut txn), Some(1));
        txn.put_string(0, b"l", b"v", None).unwrap();
        push(&mut txn).unwrap();
        txn.commit().unwrap();
        assert_eq!(kind_of(&ks, b"l"), Some(Kind::List));
        assert_eq!(ks.dbsize(0), 1);
    }

    fn open_keyspace(dir: &std::path::Path) -> Arc<Keyspace> {
        let (store, collections) = open_stores_for_tests(dir);
        Keyspace::open(store, collections, 16, Durability::Process).unwrap()
    }

    fn put_string(ks: &Keyspace, key: &[u8], expire_at: Option<u64>) {
        let mut txn = ks.lock([(0, key)], false).unwrap();
        txn.put_string(0, key, b"v", expire_at).unwrap();
        txn.commit().unwrap();
    }

    fn put_set(ks: &Keyspace, key: &[u8]) {
        let mut txn = ks.lock([(0, key)], false).unwrap();
        txn.log(vec![Op::Replace {
            key: ckey(0, key).unwrap(),
            object: set_of(&["m"]),
        }])
        .unwrap();
        txn.commit().unwrap();
    }

    /// Reads touch both stores' fields (strings in the engine's index,
    /// collections in their entries); reads inside `without_touching` and
    /// `access_of` do not; RESTORE's `set_access` sets them.
    #[test]
    fn reads_touch_access_fields_in_both_stores_unless_told_not_to() {
        let dir = tempfile::tempdir().unwrap();
        let ks = open_keyspace(dir.path());
        let t0 = now_ms();
        put_string(&ks, b"s", None);
        put_set(&ks, b"c");
        for key in [b"s".as_slice(), b"c"] {
            assert!(ks.set_access(0, key, 3).unwrap());
            // A read 10 s later (the clock follows the time commands see).
            let later = t0 + 10_000;
            access::without_touching(true, || {
                ks.read(0, key, later, |_, _| ()).unwrap();
            });
            assert_eq!(ks.access_of(0, key, later).unwrap(), Some(3));
            ks.read(0, key, later, |_, _| ()).unwrap();
            let field = ks.access_of(0, key, later).unwrap().unwrap();
            assert_eq!(field, ks.access.lru_clock());
            assert!(ks.access.idle_ms(field) < 1000);
        }
        assert!(!ks.set_access(0, b"absent", 3).unwrap());
        assert_eq!(ks.access_of(0, b"absent", t0).unwrap(), None);
    }

    /// A volatile sample holds only keys with an expiry; an all-keys
    /// sample draws from both stores; eviction is a counted, watched delete.
    #[test]
    fn eviction_samples_and_deletes_through_the_keyspace() {
        let dir = tempfile::tempdir().unwrap();
        let ks = open_keyspace(dir.path());
        let far = now_ms() + 3_600_000;
        for i in 0..200u32 {
            let key = format!("k{i}");
            put_string(
                &ks,
                key.as_bytes(),
                (i % 10 == 0).then_some(far + u64::from(i)),
            );
        }
        for i in 0..200u32 {
            put_set(&ks, format!("c{i}").as_bytes());
        }
        let (mut strings, mut sets) = (0, 0);
        for _ in 0..100 {
            let sample = ks.eviction_sample(true, 5, true);
            assert_eq!(sample.len(), 5);
            for c in &sample {
                assert!(c.expire_at.is_some());
                let n: u32 = std::str::from_utf8(&c.ekey[2..]).unwrap().parse().unwrap();
                assert_eq!((c.ekey[1], n % 10), (b'k', 0), "{:?}", c.ekey);
            }
            for c in ks.eviction_sample(false, 5, true) {
                match c.ekey[1] {
                    b'k' => strings += 1,
                    b'c' => sets += 1,
                    other => panic!("not a client key: {other}"),
                }
            }
        }
        assert!(strings > 50 && sets > 50, "{strings} strings, {sets} sets");
        let flag = Arc::new(AtomicBool::new(false));
        ks.watch(0, b"c7", &flag).unwrap();
        assert!(ks.evict(&ekey(0, b"c7").unwrap()).unwrap());
        assert!(ks.evict(&ekey(0, b"k10").unwrap()).unwrap());
        assert!(!ks.evict(&ekey(0, b"k10").unwrap()).unwrap());
        assert!(flag.load(Ordering::Acquire), "WATCH sees an eviction");
        assert_eq!(ks.dbsize(0), 398);
        assert_eq!(ks.expiring(0), 19);
    }
}
