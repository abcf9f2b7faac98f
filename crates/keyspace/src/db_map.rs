//! Which stored database each client database number names: SWAPDB.
//!
//! Keys are stored under a one-byte database prefix (`ekey`). SWAPDB
//! exchanges two databases whole; moving every key would cost a write per
//! key and could not be atomic, so instead the keyspace keeps a
//! permutation from the database numbers clients use (logical) to the
//! prefixes keys are stored under (physical), and a swap exchanges two of
//! its entries: one small durable write, whatever the databases hold.
//!
//! The permutation is persisted as one engine value under a reserved key
//! (`0xFF 'D'`: 0xFF is never a database), 256 bytes, byte `l` = the
//! physical prefix of logical database `l`. A store without it has never
//! swapped (the identity); the record is written by the first swap. A
//! record that is not a permutation is refused at open, before anything
//! is read through it.
//!
//! Everything below the keyspace's public API works on physical keys; the
//! API translates on the way in. Writers translate, lock, then check that
//! no swap came in between (a swap runs under the keyspace's exclusion); lock-free
//! readers check the same after their read, seqlock-style, and retry. A
//! store that never swapped pays two loads of a read-mostly word per
//! operation.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, Ordering};

use crate::{Error, Result};

/// The reserved engine key of the permutation record.
pub const KEY: [u8; 2] = [0xFF, b'D'];
const RECORD_BYTES: usize = 256;

pub fn is_map_key(key: &[u8]) -> bool {
    key == KEY
}

pub struct DbMap {
    physical: [AtomicU8; RECORD_BYTES],
    /// The inverse permutation (startup asks it of every stored key).
    logical: [AtomicU8; RECORD_BYTES],
    /// Seqlock counter: odd while a swap changes `physical`.
    version: AtomicU64,
    /// Whether every entry is its own number (no translation needed).
    identity: AtomicBool,
}

impl DbMap {
    pub fn identity() -> DbMap {
        DbMap {
            physical: std::array::from_fn(|i| AtomicU8::new(i as u8)),
            logical: std::array::from_fn(|i| AtomicU8::new(i as u8)),
            version: AtomicU64::new(0),
            identity: AtomicBool::new(true),
        }
    }

    /// The map a record describes; `file` names the store in errors.
    pub fn decode(record: &[u8], file: &str) -> Result<DbMap> {
        let mut seen = [false; RECORD_BYTES];
        let valid = record.len() == RECORD_BYTES
            && record[RECORD_BYTES - 1] == 0xFF
            && record
                .iter()
                .all(|&p| !std::mem::replace(&mut seen[p as usize], true));
        if !valid {
            return Err(Error::Format(format!(
                "{file}: the database map record (key 0xFF 'D', written by SWAPDB) is damaged \
                 ({} bytes, not a permutation)",
                record.len()
            )));
        }
        let map = DbMap::identity();
        for (db, &p) in record.iter().enumerate() {
            map.physical[db].store(p, Ordering::Relaxed);
            map.logical[p as usize].store(db as u8, Ordering::Relaxed);
        }
        map.identity.store(map.is_identity(), Ordering::Relaxed);
        Ok(map)
    }

    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        std::array::from_fn(|i| self.physical[i].load(Ordering::Relaxed))
    }

    fn is_identity(&self) -> bool {
        self.physical
            .iter()
            .enumerate()
            .all(|(i, p)| p.load(Ordering::Relaxed) as usize == i)
    }

    /// The prefix logical database `db` is stored under.
    pub fn physical(&self, db: usize) -> usize {
        self.physical[db].load(Ordering::Relaxed) as usize
    }

    /// The logical database stored under prefix `physical`.
    pub fn logical(&self, physical: usize) -> usize {
        self.logical[physical].load(Ordering::Relaxed) as usize
    }

    /// How a client would name a stored key ([`crate::client_key_name`]
    /// of it with its database byte translated back).
    pub fn client_key_name(&self, stored: &[u8]) -> Vec<u8> {
        if crate::is_reserved(stored) {
            return crate::client_key_name(stored);
        }
        let mut ekey = stored.to_vec();
        ekey[0] = self.logical(ekey[0] as usize) as u8;
        crate::client_key_name(&ekey)
    }

    /// Rewrites the database byte of `key` from logical to physical.
    pub fn to_physical(&self, key: &mut [u8]) {
        if !self.identity.load(Ordering::Relaxed) {
            if let Some(db) = key.first_mut() {
                *db = self.physical(*db as usize) as u8;
            }
        }
    }

    /// Start of a read that must not straddle a swap: the version to hand
    /// to `unchanged` afterwards. Waits out a swap in progress (a few
    /// stores long).
    pub fn begin(&self) -> u64 {
        loop {
            let version = self.version.load(Ordering::Acquire);
            if version.is_multiple_of(2) {
                return version;
            }
            std::hint::spin_loop();
        }
    }

    /// Whether no swap happened since `begin` returned `version`.
    pub fn unchanged(&self, version: u64) -> bool {
        fence(Ordering::Acquire);
        self.version.load(Ordering::Relaxed) == version
    }

    /// Makes this map `other` (at startup, after a replayed batch wrote
    /// the record).
    pub fn assign(&self, other: &DbMap) {
        let version = self.version.load(Ordering::Relaxed);
        self.version.store(version + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        for i in 0..RECORD_BYTES {
            let (physical, logical) = (
                other.physical[i].load(Ordering::Relaxed),
                other.logical[i].load(Ordering::Relaxed),
            );
            self.physical[i].store(physical, Ordering::Relaxed);
            self.logical[i].store(logical, Ordering::Relaxed);
        }
        self.identity.store(self.is_identity(), Ordering::Relaxed);
        self.version.store(version + 2, Ordering::Release);
    }

    /// Exchanges logical databases `a` and `b`. The caller holds every key
    /// group, so no writer is between its translation and its check.
    pub fn swap(&self, a: usize, b: usize) {
        let version = self.version.load(Ordering::Relaxed);
        self.version.store(version + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let (pa, pb) = (self.physical(a), self.physical(b));
        self.physical[a].store(pb as u8, Ordering::Relaxed);
        self.physical[b].store(pa as u8, Ordering::Relaxed);
        self.logical[pb].store(a as u8, Ordering::Relaxed);
        self.logical[pa].store(b as u8, Ordering::Relaxed);
        self.identity.store(self.is_identity(), Ordering::Relaxed);
        self.version.store(version + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_translate_both_ways_and_round_trip_through_the_record() {
        let map = DbMap::identity();
        let mut key = [3u8, b'k'];
        map.to_physical(&mut key);
        assert_eq!(key, [3, b'k']);
        map.swap(3, 9);
        assert_eq!((map.physical(3), map.physical(9)), (9, 3));
        assert_eq!((map.logical(9), map.logical(3)), (3, 9));
        map.to_physical(&mut key);
        assert_eq!(key, [9, b'k']);
        let again = DbMap::decode(&map.encode(), "D").unwrap();
        assert_eq!(again.physical(3), 9);
        again.swap(9, 3);
        assert!(again.identity.load(Ordering::Relaxed));
    }

    #[test]
    fn a_version_taken_before_a_swap_is_stale_after_it() {
        let map = DbMap::identity();
        let version = map.begin();
        assert!(map.unchanged(version));
        map.swap(0, 1);
        assert!(!map.unchanged(version));
        assert!(map.unchanged(map.begin()));
    }

    #[test]
    fn a_record_that_is_not_a_permutation_is_refused() {
        let mut record = DbMap::identity().encode();
        record[4] = 5;
        let error = DbMap::decode(&record, "D/values.pmem").err().unwrap();
        assert!(error.to_string().contains("not a permutation"), "{error}");
        assert!(DbMap::decode(&record[..10], "D").is_err());
        let mut moved_reserved = DbMap::identity().encode();
        moved_reserved.swap(0, 255);
        assert!(DbMap::decode(&moved_reserved, "D").is_err());
    }
}
