//! What the engine's recovery gathers for the keyspace: per stored prefix
//! and key group, how many string keys there are; every string's expiry
//! time; the intents a crash left. The engine reads every live record at
//! open anyway (in offset order, on every recovery thread), so the
//! keyspace's books are filled there ([`RecoveryVisitor`]) rather than by
//! a second pass that looks every key up and reads its value at random
//! (2.5 s for 5M keys, against 0.4 s for the engine's recovery).
//!
//! Filled concurrently by the recovery threads while the store opens,
//! then read once by `Keyspace::open` (the visibility of each prefix
//! depends on the database map, which is read only once the store is
//! open), and dropped.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use engram_engine::{RecoveredKey, RecoveryVisitor};
use parking_lot::Mutex;

use crate::journal;
use crate::key_groups::KEY_GROUPS;
use crate::value::decode;

/// Every prefix a stored key can have (its first byte).
const PREFIXES: usize = 256;

/// Copies of the counts, one per recovery thread (modulo): with one
/// shared copy, two threads counting keys of database 0 fight over its
/// 4 KiB of counters on every key (a cache line moved per increment).
const STRIPES: usize = 8;

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
}

/// The reserved prefix: intents, the format record, the database map.
const RESERVED_PREFIX: u8 = 0xFF;

/// Summary word bits: the expiry time (Unix ms, 0: none) in the meta
/// word's own bits, a flag for a value that cannot be read, the prefix.
const EXPIRY_MASK: u64 = (1 << 48) - 1;
const DAMAGED: u64 = 1 << 48;
const PREFIX_SHIFT: u32 = 56;

/// The strings of one key group that expire, each as its index hash
/// with the group's bits (known from the list it is in) replaced by the
/// key's prefix: [`expiring_entry`] packs, [`unpack_expiring`] unpacks.
/// The keys themselves are not read here: reading each would be a random
/// access per key in the engine's recovery (1.2 s for 5M keys), and the
/// keyspace's expiry index is filled from the hashes after the server is
/// ready (`Keyspace::index_expiries`).
pub type Expiring = Vec<u64>;

const GROUP_MASK: u64 = KEY_GROUPS as u64 - 1;
const _: () = assert!(KEY_GROUPS >= 256, "a prefix must fit in a group's bits");

fn expiring_entry(hash: u64, prefix: u8) -> u64 {
    (hash & !GROUP_MASK) | u64::from(prefix)
}

/// (index hash, prefix) of an [`Expiring`] entry of key group `group`.
pub fn unpack_expiring(group: usize, entry: u64) -> (u64, u8) {
    ((entry & !GROUP_MASK) | group as u64, entry as u8)
}

pub struct RecoveredBooks {
    /// String keys per (stripe, prefix): per key group, made when the
    /// first key of the prefix comes (most prefixes never do).
    counts: Box<[OnceLock<Box<[AtomicU32]>>]>,
    /// Per key group: every string that has an expiry (see [`Expiring`]).
    expiring: Box<[Mutex<Expiring>]>,
    /// Intent keys found (prefix 0xFF).
    intents: Mutex<Vec<Vec<u8>>>,
    /// Strings whose value is damaged (unreadable, or not a meta word a
    /// string may have): counted without an expiry, reads of them fail.
    damaged: AtomicU64,
    /// The first few of them, to be named in the log.
    damaged_named: Mutex<Vec<Vec<u8>>>,
}

impl Default for RecoveredBooks {
    fn default() -> Self {
        RecoveredBooks {
            counts: (0..STRIPES * PREFIXES).map(|_| OnceLock::new()).collect(),
            expiring: (0..KEY_GROUPS).map(|_| Mutex::new(Vec::new())).collect(),
            intents: Mutex::new(Vec::new()),
            damaged: AtomicU64::new(0),
            damaged_named: Mutex::new(Vec::new()),
        }
    }
}

/// What `Keyspace::open` takes from the books.
pub struct Books {
    /// String keys per (prefix, key group), `prefix * KEY_GROUPS + group`.
    pub counts: Vec<u32>,
    pub expiring: Vec<Expiring>,
    pub intents: Vec<Vec<u8>>,
    pub damaged: u64,
    pub damaged_named: Vec<Vec<u8>>,
}

impl RecoveredBooks {
    /// Empties the books (recovery is over: no thread writes them).
    /// Every prefix's counts, visible or not: which are visible is the
    /// database map's to say.
    pub fn take(&self) -> Books {
        let damaged_named = std::mem::take(&mut *self.damaged_named.lock());
        Books {
            counts: {
                let mut counts = vec![0u32; PREFIXES * KEY_GROUPS];
                for (row, groups) in self.counts.iter().enumerate() {
                    let Some(groups) = groups.get() else { continue };
                    let prefix = row % PREFIXES;
                    for (group, n) in groups.iter().enumerate() {
                        counts[prefix * KEY_GROUPS + group] += n.swap(0, Ordering::Relaxed);
                    }
                }
                counts
            },
            expiring: self
                .expiring
                .iter()
                .map(|e| std::mem::take(&mut *e.lock()))
                .collect(),
            intents: std::mem::take(&mut *self.intents.lock()),
            damaged: self.damaged.swap(0, Ordering::Relaxed),
            damaged_named,
        }
    }
}

/// The key group of a stored key from the engine's index hash (the same
/// XXH3 of the stored key, `Keyspace::slot_index`).
pub fn group_of_hash(hash: u64) -> usize {
    (hash as usize) & (KEY_GROUPS - 1)
}

impl RecoveryVisitor for RecoveredBooks {
    fn summarize(&self, key: &[u8], value: Option<&[u8]>) -> u64 {
        let Some(&prefix) = key.first() else {
            // No stored key is empty; counted nowhere.
            return u64::from(RESERVED_PREFIX) << PREFIX_SHIFT;
        };
        let prefix = u64::from(prefix) << PREFIX_SHIFT;
        if key[0] == RESERVED_PREFIX {
            return prefix;
        }
        match value.map(decode) {
            Some(Ok((meta, _))) => prefix | (meta.expire_at().unwrap_or(0) & EXPIRY_MASK),
            // Counted without an expiry, as a read would refuse it.
            Some(Err(_)) | None => prefix | DAMAGED,
        }
    }

    fn indexed(&self, hash: u64, summary: u64, key: RecoveredKey<'_>) {
        let prefix = (summary >> PREFIX_SHIFT) as u8;
        if prefix == RESERVED_PREFIX {
            // The format record, the database map, the functions record:
            // not keys. Intents are replayed.
            let key = key.bytes();
            if journal::is_intent_key(key) {
                self.intents.lock().push(key.to_vec());
            }
            return;
        }
        let group = group_of_hash(hash);
        let stripe = STRIPE.with(|stripe| *stripe);
        self.counts[stripe * PREFIXES + prefix as usize]
            .get_or_init(|| (0..KEY_GROUPS).map(|_| AtomicU32::new(0)).collect())[group]
            .fetch_add(1, Ordering::Relaxed);
        if summary & DAMAGED != 0 {
            if self.damaged.fetch_add(1, Ordering::Relaxed) < crate::DAMAGED_KEYS_LOGGED {
                self.damaged_named.lock().push(key.bytes().to_vec());
            }
            return;
        }
        if summary & EXPIRY_MASK != 0 {
            self.expiring[group]
                .lock()
                .push(expiring_entry(hash, prefix));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::encode_string;

    #[test]
    fn a_summary_keeps_the_prefix_and_the_expiry() {
        let books = RecoveredBooks::default();
        let at = 1_900_000_000_000u64;
        let mut value = Vec::new();
        encode_string(&mut value, b"payload", Some(at));
        let summary = books.summarize(b"\x03key", Some(&value));
        assert_eq!(summary >> PREFIX_SHIFT, 3);
        assert_eq!(summary & EXPIRY_MASK, at);
        assert_eq!(summary & DAMAGED, 0);
        let summary = books.summarize(b"\x03key", None);
        assert_ne!(summary & DAMAGED, 0);
        let summary = books.summarize(b"\x03key", Some(b"short"));
        assert_ne!(summary & DAMAGED, 0, "no meta word: malformed");
    }

    #[test]
    fn an_expiring_entry_gives_back_its_hash_and_prefix() {
        for hash in [0u64, u64::MAX, 0x1234_5678_9abc_def0] {
            let group = group_of_hash(hash);
            for prefix in [0u8, 7, 0xfe] {
                let entry = expiring_entry(hash, prefix);
                assert_eq!(unpack_expiring(group, entry), (hash, prefix));
            }
        }
    }
}
