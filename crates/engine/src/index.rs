//! The DRAM index: key -> offset of its live record (Viper's Offset Map).
//!
//! Keys are not copied into DRAM. An entry is 16 bytes, the key's 64-bit hash
//! (its fingerprint) and a word holding the record's offset and the key's
//! access field, whatever the key's size; a
//! lookup compares fingerprints first and reads the key from the region only
//! when they match. No map crate stores only a fingerprint and compares keys
//! it does not own, so the index is a table of its own (`index_table.rs`:
//! the caller gives the hash and the equality test, and an entry's bucket
//! is one cache line) split into 1024 shards, each under a
//! `parking_lot::RwLock` and padded to its own cache line. (With 4096, the
//! shards' lock lines alone were 512 KiB, half a core's L2, and a lookup's
//! read lock missed in cache for a fifth of its time; with 1024 they take
//! 128 KiB, and two writers still meet on a shard once in a thousand
//! writes. GET, INCR and SET at -P 16 each spent 0.05–0.15 µs less server
//! CPU a call in alternating pairs.)
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
//! ## The access field
//!
//! Offsets are below 2^40 (`MAX_OFFSET`: a region reserves at most 1 TiB,
//! checked at open), so the offset word's top 24 bits are free. They hold
//! an opaque per-key access field (`ACCESS_BITS`), which the layer above
//! gives a meaning (the keyspace keeps Redis's LRU clock or LFU counter
//! there) at no DRAM cost. The engine only keeps it: a new key's comes
//! from its writer, an overwrite, a compaction move or a recovery keeps or
//! zeroes it, and it is never persisted (index images strip it).
//!
//! A touch changes it under the shard's *read* lock, so the word is an
//! atomic: the offset bits cannot change under a read lock (only writers
//! holding the write lock move a record), and two readers touching at once
//! store the same offset with either's access value, both acceptable. The
//! word is stored only when the field's value changes, so a hot key read
//! from several cores keeps its cache line shared.
//!
//! ## Scan order
//!
//! The shard is chosen by hash bits 20..30, a shard's table by the low bits,
//! so neither disturbs the other below a million buckets a shard. A scan
//! walks keys in the order of `hash.rotate_left(34)`, whose top 10 bits are
//! the shard: a cursor is simply the next rank to visit. Ranks do not
//! change while a key lives, so every key present for a whole scan is
//! returned at least once, however the tables grow or shrink meanwhile (the
//! guarantee Redis's reverse-binary cursor gives).

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::RwLock;

pub use crate::index_table::Table;

pub const SHARD_BITS: u32 = 10;
pub const SHARD_COUNT: usize = 1 << SHARD_BITS;
const SHARD_SHIFT: u32 = 20;

/// Offsets lie below this (the largest region a store maps).
pub const MAX_OFFSET: u64 = 1 << OFFSET_BITS;
const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = MAX_OFFSET - 1;
/// Width of the access field kept beside each offset.
pub const ACCESS_BITS: u32 = 64 - OFFSET_BITS;
/// The largest access field value.
pub const ACCESS_MAX: u32 = (1 << ACCESS_BITS) - 1;

/// One indexed key: its hash and (offset, access field) in one word.
#[derive(Debug)]
pub struct Entry {
    pub hash: u64,
    /// Offset and access field (`pack`); a vacant slot of a table holds
    /// offset 0 or 1 here (`index_table.rs`).
    pub(crate) word: AtomicU64,
}

impl Entry {
    pub fn new(hash: u64, offset: u64, access: u32) -> Entry {
        Entry {
            hash,
            word: AtomicU64::new(pack(offset, access)),
        }
    }

    pub fn offset(&self) -> u64 {
        self.word.load(Ordering::Relaxed) & OFFSET_MASK
    }

    pub fn access(&self) -> u32 {
        (self.word.load(Ordering::Relaxed) >> OFFSET_BITS) as u32
    }

    /// Points the entry at a moved or newer record (under the shard's
    /// write lock), keeping its access field.
    pub fn set_offset(&mut self, offset: u64) {
        let word = self.word.get_mut();
        *word = pack(offset, (*word >> OFFSET_BITS) as u32);
    }

    /// Replaces the access field with `touch(old)`; stores only when it
    /// changes (see the module docs for why this is safe under a read lock).
    pub fn touch(&self, touch: impl FnOnce(u32) -> u32) -> u32 {
        let word = self.word.load(Ordering::Relaxed);
        let old = (word >> OFFSET_BITS) as u32;
        let new = touch(old) & ACCESS_MAX;
        if new != old {
            self.word
                .store(pack(word & OFFSET_MASK, new), Ordering::Relaxed);
        }
        new
    }

    /// The entry as an index image records it (no access field).
    pub fn located(&self) -> Located {
        Located {
            hash: self.hash,
            offset: self.offset(),
        }
    }
}

fn pack(offset: u64, access: u32) -> u64 {
    debug_assert!(offset < MAX_OFFSET, "offset {offset:#x} past 2^40");
    (offset & OFFSET_MASK) | (u64::from(access & ACCESS_MAX) << OFFSET_BITS)
}

/// A key's hash and record offset, copied out of the index (index images).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located {
    pub hash: u64,
    pub offset: u64,
}

pub type Shard = RwLock<Table>;

/// What [`Index::prefetch`] warms: each needs the one before it in cache
/// to be cheap itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefetchStep {
    Lock,
    Bucket,
    Record,
}

/// How far ahead of the key it works on a loop warms each step for the
/// keys to come: the lock six keys ahead, the bucket four, the record
/// two, so that each step's line has arrived when the next one reads it.
pub const WARM_AHEAD: [(usize, PrefetchStep); 3] = [
    (6, PrefetchStep::Lock),
    (4, PrefetchStep::Bucket),
    (2, PrefetchStep::Record),
];

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

impl Index {
    pub fn new() -> Index {
        Index {
            shards: (0..SHARD_COUNT)
                .map(|_| CachePadded::new(RwLock::new(Table::new())))
                .collect(),
        }
    }

    pub fn shard(&self, hash: u64) -> &Shard {
        &self.shards[shard_of(hash)]
    }

    /// Warms the lines a write of `hash` will miss on, one step of three
    /// per call, so that a batch can issue them for writes a few places
    /// ahead of the one it publishes: the shard's lock, then the home
    /// bucket, then the record named there (`region`). A hint: a shard
    /// locked for writing is skipped, nothing waits.
    pub fn prefetch(&self, hash: u64, step: PrefetchStep, region: &engram_pmem::Region) {
        let shard = self.shard(hash);
        match step {
            PrefetchStep::Lock => engram_pmem::prefetch(shard),
            PrefetchStep::Bucket => {
                if let Some(table) = shard.try_read() {
                    table.prefetch_home(hash);
                }
            }
            PrefetchStep::Record => {
                if let Some(offset) = shard.try_read().and_then(|t| t.home_offset(hash)) {
                    region.prefetch(engram_pmem::PmemOffset(offset));
                }
            }
        }
    }

    /// `f` of `key`'s entry, under the shard's read lock, if indexed.
    /// `is_key(offset)` compares the key stored at an offset with the one
    /// looked up.
    pub fn get_with<R>(
        &self,
        hash: u64,
        is_key: impl Fn(u64) -> bool,
        f: impl FnOnce(&Entry) -> R,
    ) -> Option<R> {
        let table = self.shard(hash).read();
        table.find(hash, |entry| is_key(entry.offset())).map(f)
    }

    /// The offsets of the entries whose hash is `hash` (usually one key;
    /// more only when keys collide), under the shard's read lock.
    pub fn offsets_with_hash(&self, hash: u64) -> Vec<u64> {
        let table = self.shard(hash).read();
        table.iter_hash(hash).map(Entry::offset).collect()
    }

    /// Every entry's hash and offset, one shard at a time (each under its
    /// read lock only while it is copied).
    pub fn copy_entries(&self, capacity: usize) -> Vec<Located> {
        let mut entries = Vec::with_capacity(capacity);
        for shard in self.shards.iter() {
            entries.extend(shard.read().iter().map(Entry::located));
        }
        entries
    }

    /// About `count` entries (offset, access field) from a random place:
    /// the shard `start` picks (its top bits) or the next non-empty one, from
    /// a position in it `start` also picks, wrapping within the shard. For
    /// sampled eviction, as Redis's `dictGetSomeKeys`: cheap, and random
    /// enough because hashes are. Visits at most `max_shards` shards.
    pub fn sample(&self, start: u64, count: usize, max_shards: usize) -> Vec<(u64, u32)> {
        let first = (start >> (64 - SHARD_BITS)) as usize;
        let mut found = Vec::with_capacity(count);
        for step in 0..max_shards.min(SHARD_COUNT) {
            let table = self.shards[(first + step) % SHARD_COUNT].read();
            let len = table.len();
            if len == 0 {
                continue;
            }
            let skip = (start as usize) % len;
            let wanted = count - found.len();
            found.extend(
                table
                    .iter()
                    .skip(skip)
                    .chain(table.iter().take(skip))
                    .take(wanted)
                    .map(|entry| (entry.offset(), entry.access())),
            );
            if found.len() >= count {
                break;
            }
        }
        found
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
                .map(|entry| (scan_rank(entry.hash), entry.offset()))
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
            .insert(Entry::new(hash, offset, 0));
    }

    #[test]
    fn an_entry_is_sixteen_bytes_and_keeps_offset_and_access_apart() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        let top = MAX_OFFSET - 8;
        let mut entry = Entry::new(7, top, ACCESS_MAX);
        assert_eq!((entry.offset(), entry.access()), (top, ACCESS_MAX));
        assert_eq!(entry.touch(|old| old - 1), ACCESS_MAX - 1);
        assert_eq!(entry.offset(), top);
        // Bits past the field's 24 are dropped, never spilled into the offset.
        entry.touch(|_| u32::MAX);
        assert_eq!((entry.offset(), entry.access()), (top, ACCESS_MAX));
        entry.set_offset(4096);
        assert_eq!((entry.offset(), entry.access()), (4096, ACCESS_MAX));
        assert_eq!(
            entry.located(),
            Located {
                hash: 7,
                offset: 4096
            }
        );
    }

    #[test]
    fn a_touch_that_changes_nothing_stores_nothing() {
        let entry = Entry::new(1, 64, 5);
        let mut called = false;
        entry.touch(|old| {
            called = true;
            old
        });
        assert!(called);
        assert_eq!(entry.word.load(Ordering::Relaxed), pack(64, 5));
    }

    #[test]
    fn samples_come_from_anywhere_and_carry_the_access_field() {
        let index = Index::new();
        for i in 0..2000u64 {
            let hash = hash_key(&i.to_le_bytes());
            index
                .shard(hash)
                .write()
                .insert(Entry::new(hash, 8 + i * 8, (i % 7) as u32));
        }
        let mut seen = std::collections::HashSet::new();
        for start in 0..200u64 {
            let sample = index.sample(start.wrapping_mul(0x9e37_79b9_7f4a_7c15), 5, SHARD_COUNT);
            assert_eq!(sample.len(), 5);
            for (offset, access) in sample {
                assert_eq!(access, ((offset - 8) / 8 % 7) as u32);
                seen.insert(offset);
            }
        }
        assert!(
            seen.len() > 500,
            "samples spread over the keys: {}",
            seen.len()
        );
        assert!(Index::new().sample(0, 5, SHARD_COUNT).is_empty());
    }

    #[test]
    fn scan_returns_every_entry_once_with_small_counts() {
        let index = Index::new();
        let hashes: Vec<u64> = (0..5000u64).map(|i| hash_key(&i.to_le_bytes())).collect();
        for (i, hash) in hashes.iter().enumerate() {
            insert(&index, *hash, 8 + i as u64 * 8);
        }
        for count in [1, 7, 100, 10_000] {
            let mut seen = vec![0u32; hashes.len()];
            let mut cursor = 0;
            loop {
                let (next, offsets) = index.scan(cursor, count);
                for offset in offsets {
                    seen[(offset as usize - 8) / 8] += 1;
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
        for offset in 1..=5 {
            insert(&index, 42, offset * 8);
        }
        insert(&index, 43, 48);
        let (next, offsets) = index.scan(0, 1);
        assert_eq!(offsets.len(), 5);
        assert_eq!(next, scan_rank(42) + 1);
        let (_, rest) = index.scan(next, 10);
        assert!(rest.contains(&48));
    }
}
