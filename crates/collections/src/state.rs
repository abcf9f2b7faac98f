//! The frontend: every collection in DRAM, in a sharded map.
//!
//! Readers take one shard's read lock; a write takes the write locks of the
//! shards of its keys (in ascending shard order, so two multi-key writes
//! cannot deadlock), logs its operations and applies them before letting
//! go. So operations on one key are logged in the order they are applied,
//! and operations on keys of different shards run in parallel.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

use hashbrown::HashMap;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use smallvec::SmallVec;

use crate::op::Bytes;
use crate::types::Object;

/// One key's collection and its expiry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub object: Object,
    /// Unix time in milliseconds at which the key expires; 0: never. The
    /// layer above decides when to act on it (it logs a Delete).
    pub expire_at_ms: u64,
    /// The key's access field (see [`Access`]).
    pub access: Access,
}

/// A per-key access field the layer above gives a meaning (the keyspace
/// keeps Redis's LRU clock or LFU counter in its low 24 bits), kept in
/// DRAM only: never logged, never in an image, zero after recovery, and
/// not part of a collection's state, so two entries compare equal
/// whatever their fields (replay and undo are checked by equality).
/// Atomic because readers touch it under a shard's read lock; stored only
/// when its value changes, so a hot key's cache line stays shared.
#[derive(Debug, Default)]
pub struct Access(AtomicU32);

impl Access {
    pub fn new(value: u32) -> Access {
        Access(AtomicU32::new(value))
    }

    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }

    /// Replaces the field with `touch(old)`, storing only a change.
    pub fn touch(&self, touch: impl FnOnce(u32) -> u32) -> u32 {
        let old = self.get();
        let new = touch(old);
        if new != old {
            self.0.store(new, Ordering::Relaxed);
        }
        new
    }
}

impl Clone for Access {
    fn clone(&self) -> Access {
        Access::new(self.get())
    }
}

impl PartialEq for Access {
    fn eq(&self, _: &Access) -> bool {
        true
    }
}

/// Access to the entries an operation touches, whether they live in the
/// frontend's locked shards or in a checkpoint's working set.
pub trait Keys {
    fn get(&self, key: &[u8]) -> Option<&Entry>;
    fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry>;
    fn take(&mut self, key: &[u8]) -> Option<Entry>;
    fn put(&mut self, key: &[u8], entry: Entry);
    /// Deletes `key` (DEL, UNLINK): by default its object is freed here.
    fn discard(&mut self, key: &[u8]) {
        self.take(key);
    }
}

pub const SHARDS: usize = 256;

pub struct ShardedMap {
    shards: Box<[RwLock<HashMap<Bytes, Entry>>]>,
    /// Keys in all shards, kept by every insert and removal (so counting
    /// them takes no lock).
    keys: AtomicI64,
}

pub fn shard_of(key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64(key) % SHARDS as u64) as usize
}

impl Default for ShardedMap {
    fn default() -> Self {
        ShardedMap {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            keys: AtomicI64::new(0),
        }
    }
}

impl ShardedMap {
    pub fn read(&self, key: &[u8]) -> RwLockReadGuard<'_, HashMap<Bytes, Entry>> {
        self.shards[shard_of(key)].read()
    }

    pub fn shard(&self, index: usize) -> &RwLock<HashMap<Bytes, Entry>> {
        &self.shards[index]
    }

    /// Locks the shards of `keys` for writing (ascending, each once).
    pub fn lock<'m>(&'m self, keys: &[&[u8]]) -> Locked<'m> {
        let mut indexes: SmallVec<[usize; 4]> = keys.iter().map(|k| shard_of(k)).collect();
        indexes.sort_unstable();
        indexes.dedup();
        Locked {
            guards: indexes
                .into_iter()
                .map(|index| (index, self.shards[index].write()))
                .collect(),
            keys: &self.keys,
            more: None,
        }
    }

    /// Locks no shard yet: each is locked the first time the update
    /// covers one of its keys ([`Locked::cover`]), in whatever order. Only
    /// for a caller that excludes every other writer (the keyspace's
    /// whole-keyspace transactions): then no writer holds a shard while
    /// waiting for another, and locking all 256 up front is waste.
    pub fn lock_as_needed(&self) -> Locked<'_> {
        Locked {
            guards: SmallVec::new(),
            keys: &self.keys,
            more: Some(&self.shards),
        }
    }

    pub fn len(&self) -> u64 {
        self.keys.load(Ordering::Relaxed).max(0) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Inserts without logging (recovery, before the store is shared).
    pub fn insert_unlogged(&self, key: Bytes, entry: Entry) {
        if self.shards[shard_of(&key)]
            .write()
            .insert(key, entry)
            .is_none()
        {
            self.keys.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The write-locked shards of one update.
type ShardGuard<'m> = (usize, RwLockWriteGuard<'m, HashMap<Bytes, Entry>>);

pub struct Locked<'m> {
    guards: SmallVec<[ShardGuard<'m>; 2]>,
    keys: &'m AtomicI64,
    /// Every shard, for an update that locks them as it goes
    /// ([`ShardedMap::lock_as_needed`]).
    more: Option<&'m [RwLock<HashMap<Bytes, Entry>>]>,
}

impl Locked<'_> {
    /// `key`'s entry if this update has locked its shard already, None
    /// otherwise (nothing is locked to look): for warming ahead, where
    /// `Keys::get` would stop on a key the update has not reached.
    pub fn peek(&self, key: &[u8]) -> Option<&Entry> {
        self.held(key)?.get(key)
    }

    /// The shard of `key`, if this update has locked it.
    fn held(&self, key: &[u8]) -> Option<&HashMap<Bytes, Entry>> {
        let index = shard_of(key);
        self.guards
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, guard)| &**guard)
    }

    /// Whether every key this update may touch is in its one locked shard:
    /// it locked its keys' shards up front ([`ShardedMap::lock`]) and they
    /// came to one (any single-key command). Then a key's shard is known
    /// without hashing it again; the Keys methods are only given keys the
    /// update covers (a caller asks [`Locked::covers`] first when unsure).
    fn in_one_shard(&self) -> bool {
        self.more.is_none() && self.guards.len() == 1
    }

    fn shard(&self, key: &[u8]) -> &HashMap<Bytes, Entry> {
        if self.in_one_shard() {
            debug_assert_eq!(self.guards[0].0, shard_of(key), "key {key:?} not covered");
            return &self.guards[0].1;
        }
        self.held(key)
            .unwrap_or_else(|| panic!("key {key:?} is not among the update's keys"))
    }

    fn shard_mut(&mut self, key: &[u8]) -> &mut HashMap<Bytes, Entry> {
        if self.in_one_shard() {
            debug_assert_eq!(self.guards[0].0, shard_of(key), "key {key:?} not covered");
            return &mut self.guards[0].1;
        }
        let index = shard_of(key);
        &mut self
            .guards
            .iter_mut()
            .find(|(i, _)| *i == index)
            .unwrap_or_else(|| panic!("key {key:?} is not among the update's keys"))
            .1
    }

    /// Every key of the locked shards.
    pub fn all_keys(&self) -> Vec<Bytes> {
        self.guards
            .iter()
            .flat_map(|(_, g)| g.keys().cloned())
            .collect()
    }

    /// Whether `key` lives in one of the locked shards.
    pub fn covers(&self, key: &[u8]) -> bool {
        let index = shard_of(key);
        self.guards.iter().any(|(i, _)| *i == index)
    }

    /// Makes the update cover `keys`: an update locking as it goes locks
    /// their shards now; any other answers whether it covers them already.
    pub fn cover(&mut self, keys: &[&[u8]]) -> bool {
        for key in keys {
            let index = shard_of(key);
            if self.guards.iter().any(|(i, _)| *i == index) {
                continue;
            }
            match self.more {
                Some(shards) => self.guards.push((index, shards[index].write())),
                None => return false,
            }
        }
        true
    }

    /// `cover` of every shard (FLUSHALL's walk of all keys).
    pub fn cover_all(&mut self) -> bool {
        let Some(shards) = self.more else {
            return self.guards.len() == SHARDS;
        };
        for (index, shard) in shards.iter().enumerate() {
            if !self.guards.iter().any(|(i, _)| *i == index) {
                self.guards.push((index, shard.write()));
            }
        }
        true
    }
}

impl Keys for Locked<'_> {
    fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.shard(key).get(key)
    }

    fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.shard_mut(key).get_mut(key)
    }

    fn take(&mut self, key: &[u8]) -> Option<Entry> {
        let taken = self.shard_mut(key).remove(key);
        if taken.is_some() {
            self.keys.fetch_sub(1, Ordering::Relaxed);
        }
        taken
    }

    fn put(&mut self, key: &[u8], entry: Entry) {
        if self.shard_mut(key).insert(key.into(), entry).is_none() {
            self.keys.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The frontend's deletes free large objects in the background.
    fn discard(&mut self, key: &[u8]) {
        if let Some(entry) = self.take(key) {
            crate::lazy_free::dispose(entry.object);
        }
    }
}

/// A plain map is a `Keys` too (the checkpointer's working set, tests).
impl Keys for HashMap<Bytes, Entry> {
    fn get(&self, key: &[u8]) -> Option<&Entry> {
        HashMap::get(self, key)
    }

    fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        HashMap::get_mut(self, key)
    }

    fn take(&mut self, key: &[u8]) -> Option<Entry> {
        self.remove(key)
    }

    fn put(&mut self, key: &[u8], entry: Entry) {
        self.insert(key.into(), entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Kind;

    #[test]
    fn access_is_kept_by_clones_and_ignored_by_equality() {
        let entry = Entry {
            object: Object::new(Kind::Set),
            expire_at_ms: 0,
            access: Access::new(7),
        };
        let copy = entry.clone();
        assert_eq!(copy.access.get(), 7);
        copy.access.touch(|old| old + 1);
        assert_eq!((entry.access.get(), copy.access.get()), (7, 8));
        assert_eq!(entry, copy, "the field is not part of the state");
    }

    #[test]
    fn a_touch_returns_the_new_field() {
        let access = Access::default();
        assert_eq!(access.touch(|old| old), 0);
        assert_eq!(access.touch(|_| 0xff_ffff), 0xff_ffff);
        assert_eq!(access.get(), 0xff_ffff);
    }
}
