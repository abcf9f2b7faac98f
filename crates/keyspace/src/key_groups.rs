//! Key groups: the per-key write locks, and what must change together
//! with a key under its lock (key counts, the expiry index, WATCH flags).
//!
//! Every write to a key holds its key group's mutex from the read it depends
//! on to the engine call that publishes it, so read-modify-write commands
//! (INCR, APPEND, SET ... GET) never lose an update, and a multi-key
//! command locks all its key groups in ascending order (no deadlock). Reads of
//! single keys take no lock at all: the engine publishes whole values.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use engram_engine::Store;
use parking_lot::Mutex;

use super::access::AccessTracking;
use super::value::{decode, Meta};
use super::{Error, Result};

/// Number of key groups: enough that two cores' worth of clients rarely meet
/// on one, few enough that locking all of them (FLUSHDB) is quick.
pub const KEY_GROUPS: usize = 1024;

pub struct KeyGroup {
    pub lock: Mutex<GroupState>,
    /// Live keys per database whose key hashes here (read without the lock
    /// by DBSIZE; written only under it).
    pub counts: Box<[AtomicI64]>,
    /// Keys with an expiry time, per database.
    pub expiring: Box<[AtomicI64]>,
    /// No key of this key group expires before this time (ms): the active
    /// expiry cycle skips the key group without locking it until then.
    pub next_due: AtomicU64,
}

#[derive(Default)]
pub struct GroupState {
    /// Engine key → expiry time (ms), for every key of the key group that has one.
    pub expires: HashMap<Box<[u8]>, u64>,
    /// Clients watching keys of this key group.
    pub watchers: Vec<Watcher>,
}

/// One client's WATCH on one key: the flag is the client's (shared by all
/// its watches) and is raised when the key is written.
pub struct Watcher {
    pub key: Box<[u8]>,
    pub flag: Arc<AtomicBool>,
}

impl KeyGroup {
    pub fn new(databases: usize) -> KeyGroup {
        KeyGroup {
            lock: Mutex::new(GroupState::default()),
            counts: (0..databases).map(|_| AtomicI64::new(0)).collect(),
            expiring: (0..databases).map(|_| AtomicI64::new(0)).collect(),
            next_due: AtomicU64::new(u64::MAX),
        }
    }
}

/// The database an engine key belongs to (its first byte).
pub fn db_of(ekey: &[u8]) -> usize {
    ekey[0] as usize
}

/// Writes `value` under `ekey` and brings the key group's books up to date.
pub fn apply_put(
    store: &Store,
    access: &AccessTracking,
    slot: &KeyGroup,
    group: &mut GroupState,
    ekey: &[u8],
    value: &[u8],
) -> Result<()> {
    let created = store
        .put_with_access(ekey, value, |old| access.on_write(old))
        .map_err(Error::Engine)?;
    put_books(slot, group, ekey, value, created)
}

/// The key group's books after `value` was written under `ekey`
/// (`created`: the key is new to the engine).
pub fn put_books(
    slot: &KeyGroup,
    group: &mut GroupState,
    ekey: &[u8],
    value: &[u8],
    created: bool,
) -> Result<()> {
    if created {
        slot.counts[db_of(ekey)].fetch_add(1, Ordering::Relaxed);
    }
    let expire_at = decode(value).map_err(Error::Malformed)?.0.expire_at();
    set_expiry(slot, group, ekey, expire_at);
    touch(group, ekey);
    Ok(())
}

/// Deletes `ekey`; true if it existed in the engine.
pub fn apply_delete(
    store: &Store,
    slot: &KeyGroup,
    group: &mut GroupState,
    ekey: &[u8],
) -> Result<bool> {
    let existed = store.delete(ekey).map_err(Error::Engine)?;
    delete_books(slot, group, ekey, existed);
    Ok(existed)
}

/// The key group's books after `ekey` was deleted (`existed`: it was
/// there to delete).
pub fn delete_books(slot: &KeyGroup, group: &mut GroupState, ekey: &[u8], existed: bool) {
    if existed {
        slot.counts[db_of(ekey)].fetch_sub(1, Ordering::Relaxed);
        set_expiry(slot, group, ekey, None);
        touch(group, ekey);
    }
}

/// Replaces the meta word in place (EXPIRE, PERSIST): one atomic 8-byte
/// store in the engine, no new record.
pub fn apply_meta(
    store: &Store,
    slot: &KeyGroup,
    group: &mut GroupState,
    ekey: &[u8],
    old: Meta,
    new: Meta,
) -> Result<()> {
    swap_word(store, ekey, 0, old.0, new.0)?;
    set_expiry(slot, group, ekey, new.expire_at());
    touch(group, ekey);
    Ok(())
}

/// Replaces the 8-byte word at `offset` of the value, which must hold `old`.
pub fn swap_word(store: &Store, ekey: &[u8], offset: u64, old: u64, new: u64) -> Result<()> {
    let found = store
        .compare_and_swap(ekey, offset, old, new)
        .map_err(Error::Engine)?;
    if found != old {
        // Every writer of the key holds its key group lock, so this means a
        // write bypassed the lock: a bug, reported rather than ignored.
        return Err(Error::Internal(format!(
            "in-place update raced: expected {old:#x}, found {found:#x}"
        )));
    }
    Ok(())
}

/// Records (or forgets) the key's expiry time in the key group's index.
pub fn set_expiry(slot: &KeyGroup, group: &mut GroupState, ekey: &[u8], expire_at: Option<u64>) {
    let db = db_of(ekey);
    match expire_at {
        Some(at) => {
            if group.expires.insert(ekey.into(), at).is_none() {
                slot.expiring[db].fetch_add(1, Ordering::Relaxed);
            }
            slot.next_due.fetch_min(at, Ordering::Relaxed);
        }
        None => {
            if !group.expires.is_empty() && group.expires.remove(ekey).is_some() {
                slot.expiring[db].fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// Raises the flag of every client watching `ekey`.
pub fn touch(group: &GroupState, ekey: &[u8]) {
    crate::modified::note(ekey);
    for watcher in &group.watchers {
        if &*watcher.key == ekey {
            watcher.flag.store(true, Ordering::Release);
        }
    }
}
