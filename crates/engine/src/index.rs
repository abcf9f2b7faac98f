//! The DRAM index: key -> offset of its live record (Viper's Offset Map).
//!
//! Keys are not copied into DRAM. An entry is 16 bytes, the key's 64-bit hash
//! (its fingerprint) and the record's offset, whatever the key's size; a
//! lookup compares fingerprints first and reads the key from the region only
//! when they match. No map crate stores only a fingerprint and compares keys
//! it does not own, so the index is `hashbrown::HashTable` (which takes the
//! hash and the equality test from the caller) split into 4096 shards, each
//! under a `parking_lot::RwLock` and padded to its own cache line.
//!
//! ## Who takes the locks
//!
//! Readers take a shard's read lock only to find the offset, then copy the
//! value outside it (epochs keep the space alive). Publishing a new version,
//! deleting, moving a record during compaction, and in-place updates hold the
//! shard lock (write, write, write, read) around exactly the step that must be
//! atomic with the index change: retiring the old record durably before the
//! new one is visible to anyone else.
//!
//! ## Scan order
//!
//! The shard is chosen by hash bits 20..32, hashbrown uses the low bits and the
//! top seven, so neither disturbs the other. A scan walks keys in the order of
//! `hash.rotate_left(32)`, whose top 12 bits are the shard: a cursor is simply
//! the next rank to visit. Ranks do not change while a key lives, so every key
//! present for a whole scan is returned at least once, however the tables
//! grow or shrink meanwhile (the guarantee Redis's reverse-binary cursor gives).

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use parking_lot::RwLock;

pub const SHARD_BITS: u32 = 12;
pub const SHARD_COUNT: usize = 1 << SHARD_BITS;
const SHARD_SHIFT: u32 = 20;

#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub hash: u64,
    pub offset: u64,
}

pub type Shard = RwLock<HashTable<Entry>>;

pub struct Index {
    shards: Box<[CachePadded<Shard>]>,
}

pub fn hash_key(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

pub fn shard_of(hash: u64) -> usize {
    ((hash >> SHARD_SHIFT) as usize) & (SHARD_COUNT - 1)
}

/// Position of a hash in scan order; its top bits are the shard number.
pub fn scan_rank(hash: u64) -> u64 {
    hash.rotate_left(64 - SHARD_BITS - SHARD_SHIFT)
}

/// The first rank of a shard.
pub fn shard_start(shard: usize) -> u64 {
    (shard as u64) << (64 - SHARD_BITS)
}

/// What hashbrown calls to re-hash an entry when a table grows.
pub fn entry_hash(entry: &Entry) -> u64 {
    entry.hash
}

const _: () = assert!(
    SHARD_SHIFT + SHARD_BITS <= 57,
    "shard bits must not overlap hashbrown's top 7"
);

impl Index {
    pub fn new() -> Index {
        Index {
            shards: (0..SHARD_COUNT)
                .map(|_| CachePadded::new(RwLock::new(HashTable::new())))
                .collect(),
        }
    }

    pub fn shard(&self, hash: u64) -> &Shard {
        &self.shards[shard_of(hash)]
    }

    /// The offset of `key`'s record, if indexed. `is_key(offset)` compares the
    /// key stored at an offset with the one looked up.
    pub fn get(&self, hash: u64, is_key: impl Fn(u64) -> bool) -> Option<u64> {
        let table = self.shard(hash).read();
        table
            .find(hash, |entry| entry.hash == hash && is_key(entry.offset))
            .map(|entry| entry.offset)
    }

    /// Every entry, one shard at a time (each under its read lock only while
    /// it is copied).
    pub fn copy_entries(&self, capacity: usize) -> Vec<Entry> {
        let mut entries = Vec::with_capacity(capacity);
        for shard in self.shards.iter() {
            entries.extend(shard.read().iter().copied());
        }
        entries
    }

    /// One scan step: entries with rank >= `cursor`, about `count` of them (more
    /// when several share the boundary rank), and the cursor to go on from
    /// (0 when the scan is complete).
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<u64>) {
        let count = count.max(1);
        let mut offsets = Vec::new();
        let mut cursor = cursor;
        loop {
            let shard = (cursor >> (64 - SHARD_BITS)) as usize;
            let mut ranked: Vec<(u64, u64)> = self.shards[shard]
                .read()
                .iter()
                .map(|entry| (scan_rank(entry.hash), entry.offset))
                .filter(|(rank, _)| *rank >= cursor)
                .collect();
            let wanted = count.saturating_sub(offsets.len()).max(1);
            if ranked.len() > wanted {
                ranked.select_nth_unstable(wanted - 1);
                let boundary = ranked[wanted - 1].0;
                offsets.extend(
                    ranked
                        .iter()
                        .filter(|(rank, _)| *rank <= boundary)
                        .map(|(_, offset)| *offset),
                );
                // `boundary + 1` wraps to 0 only after the very last rank.
                return (boundary.wrapping_add(1), offsets);
            }
            offsets.extend(ranked.iter().map(|(_, offset)| *offset));
            if shard + 1 == SHARD_COUNT {
                return (0, offsets);
            }
            cursor = shard_start(shard + 1);
            if offsets.len() >= count {
                return (cursor, offsets);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_top_bits_are_the_shard() {
        for hash in [0u64, 1, u64::MAX, 0x1234_5678_9abc_def0, 0xfff << 20] {
            assert_eq!(
                (scan_rank(hash) >> (64 - SHARD_BITS)) as usize,
                shard_of(hash)
            );
        }
    }

    fn insert(index: &Index, hash: u64, offset: u64) {
        index
            .shard(hash)
            .write()
            .insert_unique(hash, Entry { hash, offset }, entry_hash);
    }

    #[test]
    fn scan_returns_every_entry_once_with_small_counts() {
        let index = Index::new();
        let hashes: Vec<u64> = (0..5000u64).map(|i| hash_key(&i.to_le_bytes())).collect();
        for (i, hash) in hashes.iter().enumerate() {
            insert(&index, *hash, i as u64);
        }
        for count in [1, 7, 100, 10_000] {
            let mut seen = vec![0u32; hashes.len()];
            let mut cursor = 0;
            loop {
                let (next, offsets) = index.scan(cursor, count);
                for offset in offsets {
                    seen[offset as usize] += 1;
                }
                if next == 0 {
                    break;
                }
                assert!(next > cursor, "cursor must advance");
                cursor = next;
            }
            assert!(
                seen.iter().all(|n| *n == 1),
                "count {count}: {:?}",
                seen.iter().filter(|n| **n != 1).count()
            );
        }
    }

    #[test]
    fn entries_sharing_a_boundary_rank_are_returned_together() {
        let index = Index::new();
        for offset in 0..5 {
            insert(&index, 42, offset);
        }
        insert(&index, 43, 5);
        let (next, offsets) = index.scan(0, 1);
        assert_eq!(offsets.len(), 5);
        assert_eq!(next, scan_rank(42) + 1);
        let (_, rest) = index.scan(next, 10);
        assert!(rest.contains(&5));
    }
}
