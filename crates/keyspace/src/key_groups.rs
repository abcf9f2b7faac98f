//! Key groups: the per-key write locks, and what must change together
//! with a key under its lock (key counts, the expiry index, WATCH flags).
//!
//! Every write to a key holds its key group's mutex from the read it depends
//! on to the engine call that publishes it, so read-modify-write commands
//! (INCR, APPEND, SET ... GET) never lose an update, and a multi-key
//! command locks all its key groups in ascending order (no deadlock). Reads of
//! single keys take no lock at all: the engine publishes whole values.
//!
//! Whole-keyspace writers (scripts, FLUSHALL, SWAPDB) do not lock the
//! groups one by one: they exclude every other writer through the
//! keyspace's `exclusion`, which every holder of a key group enters first,
//! and then own every group.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use engram_engine::Store;
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use super::access::AccessTracking;
use super::exclusion::{Exclusion, Exclusive, Shared};
use super::value::{decode, Meta};
use super::{Error, Result};

/// Number of key groups: enough that two cores' worth of clients rarely meet
/// on one, few enough that locking all of them (FLUSHDB) is quick.
pub const KEY_GROUPS: usize = 1024;

pub struct KeyGroup {
    /// Locked only inside the keyspace's exclusion: through [`GroupLock`]
    /// or a transaction's [`Held`].
    lock: Mutex<GroupState>,
    /// Live keys per database whose key hashes here (read without the lock
    /// by DBSIZE; written only under it).
    pub counts: Box<[AtomicI64]>,
    /// Keys with an expiry time, per database.
    pub expiring: Box<[AtomicI64]>,
    /// No key of this key group expires before this time (ms): the active
    /// expiry cycle skips the key group without locking it until then.
    pub next_due: AtomicU64,
    /// The group's state holds `unindexed` expiries (set at open, cleared
    /// under the lock once they are indexed), so that what looks at the
    /// group without locking it knows (`expiring` lacks them meanwhile:
    /// `unindexed_counts` has them).
    pub unindexed: AtomicBool,
    /// Per database, how many keys `unindexed` holds (what `expiring`
    /// lacks until they are indexed).
    pub unindexed_counts: Box<[AtomicI64]>,
}

#[derive(Default)]
pub struct GroupState {
    /// Engine key → expiry time (ms), for every key of the key group that
    /// has one, but for those still `unindexed`.
    pub expires: HashMap<Box<[u8]>, u64>,
    /// Index hashes of strings that had an expiry when the store was
    /// recovered and are not in `expires` yet (`Keyspace::index_expiries`
    /// reads their current state and puts them there; none once it has
    /// run). `expires` and `KeyGroup::expiring` are exact for every other
    /// key meanwhile: a write of such a key records its new expiry (or
    /// none) as always, and indexing then finds the key done.
    pub unindexed: Vec<u64>,
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
    /// Starts loading the group's lock and the head of its state (what
    /// locking it and writing its books read first), for a caller that
    /// knows which keys come next.
    pub fn prefetch(&self) {
        engram_pmem::prefetch(&self.lock);
    }

    pub fn new(databases: usize) -> KeyGroup {
        KeyGroup {
            lock: Mutex::new(GroupState::default()),
            counts: (0..databases).map(|_| AtomicI64::new(0)).collect(),
            expiring: (0..databases).map(|_| AtomicI64::new(0)).collect(),
            next_due: AtomicU64::new(u64::MAX),
            unindexed: AtomicBool::new(false),
            unindexed_counts: (0..databases).map(|_| AtomicI64::new(0)).collect(),
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
    if crate::is_reserved(ekey) {
        // A keyspace record (the applied index): no database, no books.
        return Ok(());
    }
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
    if existed && !crate::is_reserved(ekey) {
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
fn swap_word(store: &Store, ekey: &[u8], offset: u64, old: u64, new: u64) -> Result<()> {
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

/// One key group locked outside a transaction (expiry, eviction, WATCH),
/// with the reader's presence that covers it (see `exclusion`).
pub struct GroupLock<'k> {
    // Field order: the group is unlocked before the presence ends.
    guard: MutexGuard<'k, GroupState>,
    _shared: Shared<'k>,
}

impl<'k> GroupLock<'k> {
    pub fn new(exclusion: &'k Exclusion, slot: &'k KeyGroup) -> GroupLock<'k> {
        let shared = exclusion.shared();
        GroupLock {
            guard: lock_spinning(&slot.lock),
            _shared: shared,
        }
    }
}

impl std::ops::Deref for GroupLock<'_> {
    type Target = GroupState;
    fn deref(&self) -> &GroupState {
        &self.guard
    }
}

impl std::ops::DerefMut for GroupLock<'_> {
    fn deref_mut(&mut self) -> &mut GroupState {
        &mut self.guard
    }
}

/// How a transaction holds the keyspace: as one writer among others, or
/// excluding all of them.
/// (Held for their drops: leaving the exclusion, or ending it.)
enum Scope<'k> {
    Shared { _presence: Shared<'k> },
    Exclusive { _whole: Exclusive<'k> },
}

/// The key groups a transaction holds. A shared transaction locked its
/// keys' groups up front (ascending); an exclusive one owns every group
/// and locks each the first time it touches it (no other writer can hold
/// one, so that never waits).
pub struct Held<'k> {
    groups: &'k [CachePadded<KeyGroup>],
    // Field order: the groups are unlocked before the scope ends.
    guards: SmallVec<[(usize, MutexGuard<'k, GroupState>); 2]>,
    scope: Scope<'k>,
}

impl<'k> Held<'k> {
    /// The groups `indexes` (ascending, no repeats) of `groups`, locked
    /// as one writer among others.
    pub fn shared(
        exclusion: &'k Exclusion,
        groups: &'k [CachePadded<KeyGroup>],
        indexes: impl IntoIterator<Item = usize>,
    ) -> Held<'k> {
        let shared = exclusion.shared();
        let guards = indexes
            .into_iter()
            .map(|i| (i, lock_spinning(&groups[i].lock)))
            .collect();
        Held {
            groups,
            guards,
            scope: Scope::Shared { _presence: shared },
        }
    }

    /// Every group, no group locked yet.
    pub fn exclusive(exclusive: Exclusive<'k>, groups: &'k [CachePadded<KeyGroup>]) -> Held<'k> {
        Held {
            groups,
            guards: SmallVec::new(),
            scope: Scope::Exclusive { _whole: exclusive },
        }
    }

    pub fn is_exclusive(&self) -> bool {
        matches!(self.scope, Scope::Exclusive { .. })
    }

    /// The group of `ekey` (its index and state), or an error if a shared
    /// transaction did not lock it (a command whose key list missed a key:
    /// a bug, not a crash).
    pub fn get(&mut self, ekey: &[u8]) -> Result<(usize, &mut GroupState)> {
        let index = slot_index(ekey);
        if self.guards.len() == KEY_GROUPS {
            // Every group is held, in index order (`every`).
            return Ok((index, &mut self.guards[index].1));
        }
        let at = match self.guards.binary_search_by_key(&index, |(i, _)| *i) {
            Ok(at) => at,
            Err(_) if self.is_exclusive() && self.guards.len() >= LOCK_ALL_AFTER => {
                self.every()?;
                index
            }
            Err(at) if self.is_exclusive() => {
                self.guards.insert(at, (index, self.lock_owned(index)));
                at
            }
            Err(_) => {
                return Err(Error::Internal(
                    "a command touched a key it did not lock".into(),
                ))
            }
        };
        Ok((index, &mut self.guards[at].1))
    }

    /// Locks every group not locked yet (FLUSHALL, SWAPDB); an error for
    /// a shared transaction.
    pub fn every(&mut self) -> Result<&mut [(usize, MutexGuard<'k, GroupState>)]> {
        if !self.is_exclusive() {
            return Err(Error::Internal(
                "a whole-keyspace write without the keyspace excluded".into(),
            ));
        }
        if self.guards.len() < KEY_GROUPS {
            let mut held = std::mem::take(&mut self.guards).into_iter().peekable();
            let mut all = SmallVec::with_capacity(KEY_GROUPS);
            for index in 0..KEY_GROUPS {
                match held.next_if(|(i, _)| *i == index) {
                    Some(guard) => all.push(guard),
                    None => all.push((index, self.lock_owned(index))),
                }
            }
            self.guards = all;
        }
        Ok(&mut self.guards)
    }

    /// The mutex of a group the exclusive scope owns: free, unless a
    /// writer took it without entering the exclusion (a bug).
    fn lock_owned(&self, index: usize) -> MutexGuard<'k, GroupState> {
        let lock = &self.groups[index].lock;
        match lock.try_lock() {
            Some(guard) => guard,
            None => {
                debug_assert!(false, "key group {index} held under exclusion");
                lock.lock()
            }
        }
    }
}

/// An exclusive transaction that has locked this many groups one by one
/// locks the rest at once (`Held::every`): a replicated node's apply
/// chunk touches hundreds of groups, and keeping them sorted moved half
/// the list at each new one (kilobytes a write), where holding them all
/// costs a thousand uncontended locks a chunk and finds a group by its
/// index.
const LOCK_ALL_AFTER: usize = 64;

/// Spins this many times (a `pause` each, about 24 ns on this project's
/// machine: ~100 us in all) for a held key group before parking. A write
/// holds its group for a microsecond or two, and on a hot key (every
/// client on one set or hash) the two network workers meet on its group
/// at almost every command: parking and waking the waiter costs two
/// context switches and a futex call each time, several times the wait.
/// Measured (redis-benchmark -P 16, 50 clients, one key, 3 rounds
/// interleaved): SADD 597K/s with parking_lot's own short spin, 687K with
/// 1,024 spins, 744K with 4,096 (CPU per op 1.89 / 1.82 / 1.58 s per
/// million); HSET, LPUSH and ZADD alike (BENCHMARKS, 2026-11-28).
const SPINS_BEFORE_PARKING: u32 = 4096;

fn lock_spinning(lock: &Mutex<GroupState>) -> MutexGuard<'_, GroupState> {
    if let Some(guard) = lock.try_lock() {
        return guard;
    }
    for _ in 0..SPINS_BEFORE_PARKING {
        std::hint::spin_loop();
        if !lock.is_locked() {
            if let Some(guard) = lock.try_lock() {
                return guard;
            }
        }
    }
    lock.lock()
}

/// The key group of an engine key.
pub fn slot_index(ekey: &[u8]) -> usize {
    slot_of_hash(xxhash_rust::xxh3::xxh3_64(ekey))
}

/// The group of a key whose engine hash is `hash` (the engine hashes a
/// key the same way: `engram_engine::Store::key_hash`).
pub fn slot_of_hash(hash: u64) -> usize {
    (hash as usize) & (KEY_GROUPS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The group a key's engine hash names (what the apply warms ahead,
    /// `Keyspace::prefetch`) is the group its transaction locks.
    #[test]
    fn a_key_s_engine_hash_names_its_group() {
        for key in [
            &b"\0k"[..],
            b"\0counter:000123",
            b"\x05a longer key than most",
        ] {
            assert_eq!(
                slot_of_hash(engram_engine::Store::key_hash(key)),
                slot_index(key)
            );
        }
    }

    /// An exclusive transaction finds each key's group by binary search
    /// until it has locked `LOCK_ALL_AFTER` of them, then holds them all
    /// and finds a group by its index: the same group for a key either
    /// way (what was written to a group through one lookup is there
    /// through the next).
    #[test]
    fn an_exclusive_hold_takes_every_group_after_enough_and_finds_the_same_ones() {
        let exclusion = Exclusion::default();
        let groups: Vec<CachePadded<KeyGroup>> = (0..KEY_GROUPS)
            .map(|_| CachePadded::new(KeyGroup::new(16)))
            .collect();
        let mut held = Held::exclusive(exclusion.exclusive(), &groups);
        let key = |i: usize| format!("\0key{i}").into_bytes();
        let mut distinct = std::collections::BTreeSet::new();
        let mut i = 0;
        while distinct.len() < LOCK_ALL_AFTER {
            let (index, group) = held.get(&key(i)).unwrap();
            assert_eq!(index, slot_index(&key(i)));
            group.unindexed.push(i as u64);
            distinct.insert(index);
            i += 1;
        }
        assert_eq!(held.guards.len(), LOCK_ALL_AFTER);
        // The next new group takes them all.
        let mut j = i;
        while distinct.contains(&slot_index(&key(j))) {
            j += 1;
        }
        let (index, _) = held.get(&key(j)).unwrap();
        assert_eq!(index, slot_index(&key(j)));
        assert_eq!(held.guards.len(), KEY_GROUPS);
        for k in 0..i {
            let (index, group) = held.get(&key(k)).unwrap();
            assert_eq!(index, slot_index(&key(k)));
            assert!(
                group.unindexed.contains(&(k as u64)),
                "key {k}'s group changed"
            );
        }
        // Every group is locked, and each is free again once the hold ends.
        assert!(groups.iter().all(|g| g.lock.is_locked()));
        drop(held);
        assert!(groups.iter().all(|g| !g.lock.is_locked()));
    }
}
