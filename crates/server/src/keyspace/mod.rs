//! The Redis keyspace over the engine: logical databases, value types,
//! expiry, per-key write locks, WATCH, and atomic multi-key writes.
//!
//! An engine key is the database number (one byte) followed by the client's
//! key; an engine value is a meta word (type, encoding, expiry) followed by
//! the payload (see `value`). Everything Redis keeps in memory beside the
//! data (key counts, which keys expire, who watches what) is rebuilt from
//! the engine at startup by one scan.

mod journal;
mod stripe;
mod txn;
pub mod value;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crossbeam_utils::CachePadded;
use engram_engine::{Store, MAX_KEY_BYTES};
use smallvec::SmallVec;

pub use stripe::STRIPES;
use stripe::{apply_delete, StripeSlot, Watcher};
pub use txn::{Stored, Txn};
use value::{decode, Malformed, Meta};

/// Waits until everything written so far is durable (see
/// `Keyspace::set_intent_barrier`).
pub type IntentBarrier = Box<dyn Fn() + Send + Sync>;

/// An engine key: the database byte, then the client's key.
pub type EKey = SmallVec<[u8; 64]>;

/// Damaged keys named one by one in the startup log; the rest are counted.
const DAMAGED_KEYS_LOGGED: u64 = 20;

/// The longest key a client may use (the engine's limit less the db byte).
pub const MAX_KEY_LEN: usize = MAX_KEY_BYTES - 1;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Engine(engram_engine::Error),
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR {0}")]
    Malformed(Malformed),
    #[error("ERR key too long ({0} bytes; Engram's limit is {MAX_KEY_LEN})")]
    KeyTooLong(usize),
    #[error("ERR internal error: {0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The key's stored bytes are damaged (a failed checksum, a page the
    /// integrity layer could not rebuild, a meta word that does not
    /// decode): an error for reads of that key only. Deleting or
    /// overwriting the key still works, and key enumeration lists it.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            Error::Engine(
                engram_engine::Error::Unrepairable { .. }
                    | engram_engine::Error::CorruptRecord { .. }
            ) | Error::Malformed(_)
        )
    }
}

/// Counters for INFO stats.
#[derive(Default)]
pub struct KeyspaceStats {
    pub hits: CachePadded<AtomicU64>,
    pub misses: CachePadded<AtomicU64>,
    pub expired_keys: AtomicU64,
    /// Batches replayed from their intent at the last startup.
    pub batches_replayed: AtomicU64,
    /// Keys found in databases beyond `databases` (hidden, kept).
    pub keys_in_hidden_dbs: AtomicU64,
}

pub struct Keyspace {
    store: Store,
    stripes: Box<[CachePadded<StripeSlot>]>,
    databases: usize,
    journal_seq: AtomicU64,
    /// Persist a batch's intent before applying it (emulated memory with
    /// `always` durability: page write-back order is otherwise undefined).
    sync_intents: AtomicBool,
    /// How to persist it: the server's group commit, shared with other
    /// writers (`None`: an `msync` of our own).
    intent_barrier: OnceLock<IntentBarrier>,
    expire_cursor: AtomicUsize,
    pub stats: KeyspaceStats,
}

impl Keyspace {
    /// Wraps an opened store: scans it once to rebuild key counts and the
    /// expiry index, and re-applies any batch a crash interrupted.
    pub fn open(store: Store, databases: usize) -> Result<Keyspace> {
        assert!((1..=255).contains(&databases), "databases must be 1..=255");
        let keyspace = Keyspace {
            store,
            stripes: (0..STRIPES)
                .map(|_| CachePadded::new(StripeSlot::new(databases)))
                .collect(),
            databases,
            journal_seq: AtomicU64::new(0),
            sync_intents: AtomicBool::new(false),
            intent_barrier: OnceLock::new(),
            expire_cursor: AtomicUsize::new(0),
            stats: KeyspaceStats::default(),
        };
        let intents = keyspace.rebuild()?;
        keyspace.replay(intents)?;
        Ok(keyspace)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Gives the store back (for a clean close).
    pub fn into_store(self) -> Store {
        self.store
    }

    pub fn databases(&self) -> usize {
        self.databases
    }

    pub fn set_sync_intents(&self, on: bool) {
        self.sync_intents.store(on, Ordering::Relaxed);
    }

    /// Lets intents be persisted by a shared group commit instead of an
    /// `msync` each (set once, by the server).
    pub fn set_intent_barrier(&self, barrier: IntentBarrier) {
        let _ = self.intent_barrier.set(barrier);
    }

    fn rebuild(&self) -> Result<Vec<Vec<u8>>> {
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
                if key.is_empty() || stripe::db_of(&key) >= self.databases {
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
                slot.counts[stripe::db_of(&key)].fetch_add(1, Ordering::Relaxed);
                if meta.expire_at().is_some() {
                    let mut stripe = slot.lock.lock();
                    stripe::set_expiry(slot, &mut stripe, &key, meta.expire_at());
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

    fn replay(&self, intents: Vec<Vec<u8>>) -> Result<()> {
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
            let mut txn = self.lock_ekeys(ops.iter().map(|(k, _)| k.as_slice()), false);
            for (key, value) in &ops {
                txn.apply_raw(key, value.as_deref())?;
            }
            drop(txn);
            self.store.delete(&intent).map_err(Error::Engine)?;
            self.stats.batches_replayed.fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "re-applied a multi-key write interrupted by a crash ({} keys)",
                ops.len()
            );
        }
        Ok(())
    }

    /// The meta word of an engine key, read without locks.
    fn raw_meta(&self, ekey: &[u8]) -> Result<Option<Meta>> {
        match self.store.get_ref(ekey).map_err(Error::Engine)? {
            None => Ok(None),
            Some(value) => Ok(Some(decode(&value).map_err(Error::Malformed)?.0)),
        }
    }

    fn slot_index(ekey: &[u8]) -> usize {
        (xxhash_rust::xxh3::xxh3_64(ekey) as usize) & (STRIPES - 1)
    }

    fn slot(&self, ekey: &[u8]) -> &StripeSlot {
        &self.stripes[Self::slot_index(ekey)]
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
        let ekey = ekey(db, key)?;
        let found = {
            let Some(value) = self.store.get_ref(&ekey).map_err(Error::Engine)? else {
                self.stats.misses.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            };
            let (meta, payload) = decode(&value).map_err(Error::Malformed)?;
            if meta.is_expired(now_ms) {
                None
            } else {
                Some(f(meta, payload))
            }
        };
        match found {
            Some(result) => {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                Ok(Some(result))
            }
            None => {
                self.stats.misses.fetch_add(1, Ordering::Relaxed);
                self.expire_if_due(&ekey, now_ms)?;
                Ok(None)
            }
        }
    }

    /// Deletes `ekey` if it has expired by `now_ms`; true if it did.
    fn expire_if_due(&self, ekey: &[u8], now_ms: u64) -> Result<bool> {
        let slot = self.slot(ekey);
        let mut stripe = slot.lock.lock();
        match self.raw_meta(ekey)? {
            Some(meta) if meta.is_expired(now_ms) => {
                apply_delete(&self.store, slot, &mut stripe, ekey)?;
                self.stats.expired_keys.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Locks the stripes of `keys` (database, key) for a write.
    /// `atomic`: the writes are buffered and applied as one crash-atomic
    /// batch at `commit`; otherwise each goes to the engine at once.
    pub fn lock<'k>(
        &self,
        keys: impl IntoIterator<Item = (usize, &'k [u8])>,
        atomic: bool,
    ) -> Result<Txn<'_>> {
        let mut ekeys: SmallVec<[EKey; 4]> = SmallVec::new();
        for (db, key) in keys {
            ekeys.push(ekey(db, key)?);
        }
        Ok(self.lock_ekeys(ekeys.iter().map(|k| k.as_slice()), atomic))
    }

    pub(crate) fn lock_ekeys<'k>(
        &self,
        ekeys: impl Iterator<Item = &'k [u8]>,
        atomic: bool,
    ) -> Txn<'_> {
        let mut indexes: SmallVec<[usize; 4]> = ekeys.map(Self::slot_index).collect();
        indexes.sort_unstable();
        indexes.dedup();
        let guards = indexes
            .into_iter()
            .map(|i| (i, self.stripes[i].lock.lock()))
            .collect();
        Txn::new(self, guards, atomic)
    }

    /// Locks every stripe (FLUSHDB, and transactions that read or write
    /// the whole keyspace).
    pub fn lock_all(&self, atomic: bool) -> Txn<'_> {
        let guards = (0..STRIPES)
            .map(|i| (i, self.stripes[i].lock.lock()))
            .collect();
        Txn::new(self, guards, atomic)
    }

    /// Keys in database `db`.
    pub fn dbsize(&self, db: usize) -> u64 {
        let total: i64 = self
            .stripes
            .iter()
            .map(|s| s.counts[db].load(Ordering::Relaxed))
            .sum();
        total.max(0) as u64
    }

    /// Keys with an expiry time in database `db`.
    pub fn expiring(&self, db: usize) -> u64 {
        let total: i64 = self
            .stripes
            .iter()
            .map(|s| s.expiring[db].load(Ordering::Relaxed))
            .sum();
        total.max(0) as u64
    }

    /// One step of a SCAN over database `db`: the keys found (with their
    /// meta words) and the cursor to continue from (0: done). Filters out
    /// other databases and expired keys, so a step may return fewer than
    /// `count` keys, or none, before the end, as Redis's may.
    pub fn scan(
        &self,
        db: usize,
        cursor: u64,
        count: usize,
        now_ms: u64,
    ) -> Result<(u64, Vec<(Vec<u8>, Meta)>)> {
        let (next, ekeys) = self.store.scan(cursor, count.max(1));
        let mut found = Vec::with_capacity(ekeys.len());
        for ekey in ekeys {
            if ekey.first() != Some(&(db as u8)) || journal::is_intent_key(&ekey) {
                continue;
            }
            match self.raw_meta(&ekey) {
                Ok(Some(meta)) if !meta.is_expired(now_ms) => {
                    found.push((ekey[1..].to_vec(), meta))
                }
                Ok(_) => {}
                // Listed, so a client can find it and delete or rewrite it;
                // its reads fail with the damage.
                Err(e) if e.is_damage() => found.push((
                    ekey[1..].to_vec(),
                    Meta::new(value::Kind::String, value::Encoding::Raw, None),
                )),
                Err(e) => return Err(e),
            }
        }
        Ok((next, found))
    }

    /// A random live key of `db`, if it has any.
    pub fn random_key(&self, db: usize, now_ms: u64) -> Result<Option<Vec<u8>>> {
        if self.dbsize(db) == 0 {
            return Ok(None);
        }
        // Start somewhere random in hash order and take the first key of
        // this database from there; wrap once.
        let start: u64 = rand::random::<u64>() >> 12;
        let mut cursor = start;
        let mut wrapped = false;
        loop {
            let (next, keys) = self.scan(db, cursor, 64, now_ms)?;
            if let Some((key, _)) = keys.into_iter().next() {
                return Ok(Some(key));
            }
            if next == 0 {
                if wrapped {
                    return Ok(None);
                }
                wrapped = true;
            }
            cursor = next;
        }
    }

    /// Starts watching `key` for `flag`'s client.
    pub fn watch(&self, db: usize, key: &[u8], flag: &Arc<AtomicBool>) -> Result<EKey> {
        let ekey = ekey(db, key)?;
        let mut stripe = self.slot(&ekey).lock.lock();
        stripe.watchers.push(Watcher {
            key: ekey.as_slice().into(),
            flag: flag.clone(),
        });
        Ok(ekey)
    }

    /// Drops every watch of `flag`'s client on `ekeys`.
    pub fn unwatch(&self, ekeys: &[EKey], flag: &Arc<AtomicBool>) {
        for ekey in ekeys {
            let mut stripe = self.slot(ekey).lock.lock();
            stripe.watchers.retain(|w| !Arc::ptr_eq(&w.flag, flag));
        }
    }

    /// Deletes expired keys until none is due or `deadline` passes, like
    /// Redis's active expiry cycle; returns how many it deleted. Stripes
    /// whose earliest expiry lies ahead are skipped without locking.
    pub fn expire_cycle(&self, now_ms: u64, deadline: Instant) -> Result<u64> {
        let mut deleted = 0;
        let start = self.expire_cursor.load(Ordering::Relaxed);
        for step in 0..STRIPES {
            let i = (start + step) % STRIPES;
            let slot = &self.stripes[i];
            if slot.next_due.load(Ordering::Relaxed) > now_ms {
                continue;
            }
            let mut stripe = slot.lock.lock();
            let due: Vec<Box<[u8]>> = stripe
                .expires
                .iter()
                .filter(|(_, &at)| at <= now_ms)
                .map(|(k, _)| k.clone())
                .collect();
            for ekey in due {
                apply_delete(&self.store, slot, &mut stripe, &ekey)?;
                self.stats.expired_keys.fetch_add(1, Ordering::Relaxed);
                deleted += 1;
            }
            let next = stripe.expires.values().copied().min().unwrap_or(u64::MAX);
            slot.next_due.store(next, Ordering::Relaxed);
            drop(stripe);
            if Instant::now() >= deadline {
                self.expire_cursor.store(i + 1, Ordering::Relaxed);
                return Ok(deleted);
            }
        }
        Ok(deleted)
    }

    /// Writes a batch as one crash-atomic unit (see `journal`). The caller
    /// holds the stripes of every key in `ops`.
    fn write_intent(&self, ops: &[(EKey, Option<Vec<u8>>)]) -> Result<Vec<u8>> {
        let seq = self.journal_seq.fetch_add(1, Ordering::Relaxed);
        // Unique across restarts too: intents of the last run are gone
        // (replayed and deleted) before this one starts writing.
        let key = journal::intent_key(seq);
        let bytes = journal::encode(ops.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
        if bytes.len() > engram_engine::MAX_VALUE_BYTES {
            return Err(Error::Internal(format!(
                "a transaction of {} bytes exceeds the largest atomic batch ({} bytes)",
                bytes.len(),
                engram_engine::MAX_VALUE_BYTES
            )));
        }
        self.store.put(&key, &bytes).map_err(Error::Engine)?;
        if self.sync_intents.load(Ordering::Relaxed) {
            match self.intent_barrier.get() {
                Some(barrier) => barrier(),
                None => self.store.sync().map_err(Error::Engine)?,
            }
        }
        Ok(key)
    }

    fn delete_intent(&self, key: &[u8]) -> Result<()> {
        self.store.delete(key).map_err(Error::Engine)?;
        Ok(())
    }
}

/// The engine key of `key` in database `db`.
pub fn ekey(db: usize, key: &[u8]) -> Result<EKey> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLong(key.len()));
    }
    let mut ekey = EKey::with_capacity(key.len() + 1);
    ekey.push(db as u8);
    ekey.extend_from_slice(key);
    Ok(ekey)
}

/// How a client would name an engine key: the key itself in database 0,
/// `db<N>:<key>` in database N > 0 (hidden databases included), and
/// `(multi-key write intent <seq>)` for the journal's intent records.
/// For reports (ENGRAM.SCRUB, `engram scrub`), not for parsing back.
pub fn client_key_name(ekey: &[u8]) -> Vec<u8> {
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

/// The wall clock in Unix milliseconds, as expiry times are kept.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
