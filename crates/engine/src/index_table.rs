//! One index shard's table: entries in buckets of four, a bucket to a cache
//! line, found by linear probing from the bucket the hash names.
//!
//! hashbrown (which the index used before) keeps its control bytes apart
//! from its entries, so a lookup took two dependent cache misses in the
//! table, after the one for the shard's lock and before the one for the
//! record: `perf annotate` of GET and INCR at -P 16 put a third of the
//! lookup's samples on each (BENCHMARKS.md). An entry already carries its
//! key's whole 64-bit hash, which is a better tag than a control byte, so
//! here a bucket holds the entries themselves and one miss finds them.
//!
//! A vacant slot is told by its entry's offset: no record lies at offset 0
//! or 1 (the superblock does), so offset 0 is a slot never used since the
//! table was last built and offset 1 a slot whose entry was removed (a
//! tombstone). An insert takes the first vacant slot of the first bucket
//! from the home bucket that has one, so a bucket with a never-used slot
//! ends every probe that reaches it: no insert went past it. Tombstones are
//! cleared when the table is rebuilt (it grows, or they fill a fifth of it).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::index::Entry;

/// Entries per bucket: 4 × 16 bytes, one cache line.
const SLOTS: usize = 4;
/// The word of a slot never used since the table was built.
const EMPTY: u64 = 0;
/// The word of a slot whose entry was removed.
const TOMBSTONE: u64 = 1;

#[repr(C, align(64))]
struct Bucket {
    slots: [Entry; SLOTS],
}

impl Bucket {
    fn empty() -> Bucket {
        Bucket {
            slots: std::array::from_fn(|_| vacant(EMPTY)),
        }
    }

    fn has_empty(&self) -> bool {
        self.slots.iter().any(|slot| word(slot) == EMPTY)
    }
}

fn vacant(marker: u64) -> Entry {
    Entry {
        hash: 0,
        word: AtomicU64::new(marker),
    }
}

#[inline]
fn word(slot: &Entry) -> u64 {
    slot.word.load(Ordering::Relaxed)
}

#[inline]
fn is_live(slot: &Entry) -> bool {
    word(slot) > TOMBSTONE
}

/// A shard's entries (see the module docs).
#[derive(Default)]
pub struct Table {
    buckets: Box<[Bucket]>,
    /// Live entries.
    len: usize,
    /// Slots holding a tombstone.
    tombstones: usize,
}

impl Table {
    pub fn new() -> Table {
        Table::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The entry with `hash` for which `eq` holds.
    #[inline]
    pub fn find(&self, hash: u64, eq: impl FnMut(&Entry) -> bool) -> Option<&Entry> {
        let (bucket, slot) = self.locate(hash, eq)?;
        Some(&self.buckets[bucket].slots[slot])
    }

    /// The entry with `hash` for which `eq` holds, to change or remove; or
    /// the place to insert one.
    pub fn find_entry(
        &mut self,
        hash: u64,
        eq: impl FnMut(&Entry) -> bool,
    ) -> Result<Occupied<'_>, Absent<'_>> {
        match self.locate(hash, eq) {
            Some((bucket, slot)) => Ok(Occupied {
                table: self,
                bucket,
                slot,
            }),
            None => Err(Absent { table: self }),
        }
    }

    /// Every entry with `hash` (usually one; more when keys collide).
    pub fn iter_hash(&self, hash: u64) -> impl Iterator<Item = &Entry> + '_ {
        let mut ended = false;
        self.probe(hash)
            .map_while(move |bucket| {
                // The bucket with a never-used slot is the probe's last.
                let bucket = (!ended).then(|| &self.buckets[bucket])?;
                ended = bucket.has_empty();
                Some(bucket)
            })
            .flat_map(|bucket| bucket.slots.iter())
            .filter(move |slot| is_live(slot) && slot.hash == hash)
    }

    /// Starts loading the line of `hash`'s home bucket, where a lookup of
    /// it begins (`engram_pmem::prefetch`).
    pub fn prefetch_home(&self, hash: u64) {
        if let Some(bucket) = self.home(hash) {
            engram_pmem::prefetch(bucket);
        }
    }

    /// The offset of the first live entry with `hash` in its home bucket:
    /// the record a lookup of it compares its key with first.
    pub fn home_offset(&self, hash: u64) -> Option<u64> {
        self.home(hash)?
            .slots
            .iter()
            .find(|slot| is_live(slot) && slot.hash == hash)
            .map(Entry::offset)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.buckets
            .iter()
            .flat_map(|bucket| bucket.slots.iter())
            .filter(|slot| is_live(slot))
    }

    /// Adds `entry`, whose key the table must not hold already.
    pub fn insert(&mut self, entry: Entry) {
        debug_assert!(is_live(&entry), "an entry at offset {}", entry.offset());
        self.reserve(1);
        let (bucket, slot) = self.vacant_slot(entry.hash);
        let slot = &mut self.buckets[bucket].slots[slot];
        if word(slot) == TOMBSTONE {
            self.tombstones -= 1;
        }
        *slot = entry;
        self.len += 1;
    }

    /// Makes room for `additional` more entries without a rebuild.
    pub fn reserve(&mut self, additional: usize) {
        let needed = self.len + self.tombstones + additional;
        if fits(needed, self.buckets.len()) {
            return;
        }
        // Rebuilt at the size the live entries need: one that also holds
        // the tombstones would keep them.
        let mut buckets = self.buckets.len().max(1);
        while !fits(self.len + additional, buckets) {
            buckets *= 2;
        }
        if !fits(self.len + additional + (self.len + additional) / 4, buckets) {
            // Nearly full of live entries: double, or the next few
            // inserts rebuild it again.
            buckets *= 2;
        }
        self.rebuild(buckets);
    }

    /// Moves every live entry into `buckets` fresh buckets.
    fn rebuild(&mut self, buckets: usize) {
        debug_assert!(buckets.is_power_of_two());
        let old = std::mem::replace(
            &mut self.buckets,
            (0..buckets).map(|_| Bucket::empty()).collect(),
        );
        self.len = 0;
        self.tombstones = 0;
        for bucket in old.into_vec() {
            for slot in bucket.slots {
                if is_live(&slot) {
                    self.place(slot);
                }
            }
        }
    }

    /// `insert` without the size check (rebuild has made room).
    fn place(&mut self, entry: Entry) {
        let (bucket, slot) = self.vacant_slot(entry.hash);
        self.buckets[bucket].slots[slot] = entry;
        self.len += 1;
    }

    /// Where an entry with `hash` goes: the first vacant slot (never used
    /// or removed) of the first bucket from its home that has one.
    fn vacant_slot(&self, hash: u64) -> (usize, usize) {
        self.probe(hash)
            .find_map(|bucket| {
                let slots = &self.buckets[bucket].slots;
                slots
                    .iter()
                    .position(|slot| !is_live(slot))
                    .map(|slot| (bucket, slot))
            })
            .expect("room was made for the entry")
    }

    /// Where the entry with `hash` for which `eq` holds lies. (The hot
    /// path of every read and write: a plain loop over the home bucket's
    /// line, hashes compared before anything else is.)
    #[inline]
    fn locate(&self, hash: u64, mut eq: impl FnMut(&Entry) -> bool) -> Option<(usize, usize)> {
        let count = self.buckets.len();
        if count == 0 {
            return None;
        }
        let mask = count - 1;
        let mut bucket = (hash as usize) & mask;
        for _ in 0..count {
            let slots = &self.buckets[bucket].slots;
            let mut ends = false;
            for (index, slot) in slots.iter().enumerate() {
                let word = word(slot);
                if slot.hash == hash && word > TOMBSTONE && eq(slot) {
                    return Some((bucket, index));
                }
                ends |= word == EMPTY;
            }
            if ends {
                return None;
            }
            bucket = (bucket + 1) & mask;
        }
        None
    }

    /// `hash`'s home bucket (none in an empty table).
    fn home(&self, hash: u64) -> Option<&Bucket> {
        self.buckets.get(self.probe(hash).next()?)
    }

    /// The buckets a probe for `hash` visits, home first, each at most once.
    fn probe(&self, hash: u64) -> impl Iterator<Item = usize> {
        let count = self.buckets.len();
        let home = if count == 0 {
            0
        } else {
            (hash as usize) & (count - 1)
        };
        (0..count).map(move |step| (home + step) & (count.max(1) - 1))
    }
}

/// Whether `entries` (live and tombstones) stay within four fifths of the
/// slots of `buckets` buckets: probes stay short below that.
fn fits(entries: usize, buckets: usize) -> bool {
    entries * 5 <= buckets * SLOTS * 4
}

/// A found entry, to read, change or remove.
pub struct Occupied<'t> {
    table: &'t mut Table,
    bucket: usize,
    slot: usize,
}

impl Occupied<'_> {
    pub fn get(&self) -> &Entry {
        &self.table.buckets[self.bucket].slots[self.slot]
    }

    pub fn get_mut(&mut self) -> &mut Entry {
        &mut self.table.buckets[self.bucket].slots[self.slot]
    }

    /// Takes the entry out of the table.
    pub fn remove(self) -> Entry {
        let table = self.table;
        let bucket = &mut table.buckets[self.bucket];
        // A bucket with a never-used slot ends every probe that reaches
        // it, so no entry beyond it needs this slot marked: it can be
        // never-used again.
        let marker = if bucket.has_empty() {
            EMPTY
        } else {
            table.tombstones += 1;
            TOMBSTONE
        };
        table.len -= 1;
        std::mem::replace(&mut bucket.slots[self.slot], vacant(marker))
    }
}

/// The place for an entry the table does not hold.
pub struct Absent<'t> {
    table: &'t mut Table,
}

impl Absent<'_> {
    pub fn insert(self, entry: Entry) {
        self.table.insert(entry);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn entry(hash: u64, offset: u64) -> Entry {
        Entry::new(hash, offset, 0)
    }

    #[test]
    fn a_bucket_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
    }

    #[test]
    fn an_empty_table_finds_nothing_and_allocates_nothing() {
        let mut table = Table::new();
        assert!(table.find(7, |_| true).is_none());
        assert!(table.find_entry(7, |_| true).is_err());
        assert_eq!(table.iter_hash(7).count(), 0);
        assert_eq!(table.iter().count(), 0);
        assert_eq!(table.buckets.len(), 0);
    }

    /// Keys that share a hash (and so a home bucket) are told apart by
    /// `eq`, across buckets, and removing one leaves the others findable.
    #[test]
    fn colliding_hashes_spill_into_later_buckets_and_stay_findable() {
        let mut table = Table::new();
        for offset in (8..8 + 8 * 40).step_by(8) {
            table.insert(entry(42, offset));
        }
        table.insert(entry(43, 4096));
        assert_eq!(table.iter_hash(42).count(), 40);
        for offset in (8..8 + 8 * 40).step_by(8) {
            let found = table.find(42, |e| e.offset() == offset).unwrap();
            assert_eq!(found.offset(), offset);
        }
        for offset in (8..8 + 8 * 40).step_by(16) {
            let removed = table.find_entry(42, |e| e.offset() == offset).ok().unwrap();
            assert_eq!(removed.remove().offset(), offset);
        }
        assert_eq!(table.len(), 21);
        for offset in (8..8 + 8 * 40).step_by(8) {
            let removed = (offset - 8) % 16 == 0;
            assert_eq!(
                table.find(42, |e| e.offset() == offset).is_none(),
                removed,
                "offset {offset}"
            );
        }
        assert_eq!(table.find(43, |_| true).unwrap().offset(), 4096);
    }

    /// What a batch prefetches: the first live entry of a hash in its home
    /// bucket (none for an absent hash, a removed entry, or an empty
    /// table); prefetching changes nothing.
    #[test]
    fn the_home_offset_names_the_first_live_entry_of_a_hash() {
        let mut table = Table::new();
        assert_eq!(table.home_offset(42), None);
        table.prefetch_home(42);
        table.insert(entry(42, 64));
        table.insert(entry(42, 128));
        table.insert(entry(7, 256));
        table.prefetch_home(42);
        assert_eq!(table.home_offset(42), Some(64));
        assert_eq!(table.home_offset(7), Some(256));
        assert_eq!(table.home_offset(8), None);
        table
            .find_entry(42, |e| e.offset() == 64)
            .ok()
            .unwrap()
            .remove();
        assert_eq!(table.home_offset(42), Some(128));
        assert_eq!(table.iter().count(), 2);
    }

    /// Inserts and removes that keep the size steady do not let the
    /// tombstones grow the table without bound.
    #[test]
    fn churn_does_not_grow_the_table() {
        let mut table = Table::new();
        for i in 0..100u64 {
            table.insert(entry(crate::index::hash_key(&i.to_le_bytes()), 8 + i * 8));
        }
        let size = table.buckets.len();
        for i in 100..100_000u64 {
            let gone = i - 100;
            let gone_hash = crate::index::hash_key(&gone.to_le_bytes());
            let found = table.find_entry(gone_hash, |e| e.offset() == 8 + gone * 8);
            found.ok().expect("present").remove();
            table.insert(entry(crate::index::hash_key(&i.to_le_bytes()), 8 + i * 8));
        }
        assert_eq!(table.len(), 100);
        assert!(
            table.buckets.len() <= size * 2,
            "{} buckets",
            table.buckets.len()
        );
        assert!(table.tombstones <= table.buckets.len() * SLOTS);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Insert(u16),
        Remove(u16),
        Retarget(u16, u16),
        Reserve(u8),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        // Few distinct hashes (keys 0..512 into 64 hashes) so that keys
        // collide and chains cross buckets.
        let step = prop_oneof![
            4 => any::<u16>().prop_map(|k| Step::Insert(k % 512)),
            3 => any::<u16>().prop_map(|k| Step::Remove(k % 512)),
            1 => (any::<u16>(), any::<u16>()).prop_map(|(k, g)| Step::Retarget(k % 512, g)),
            1 => any::<u8>().prop_map(Step::Reserve),
        ];
        proptest::collection::vec(step, 1..600)
    }

    proptest! {
        /// The table against a map from key to offset: the same keys,
        /// found by the same hash and test, after any mix of operations.
        #[test]
        fn agrees_with_a_map(steps in steps()) {
            let hash_of = |key: u16| u64::from(key % 64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            // A key's entries are told apart by offset: offset / 8 - 1 is
            // the key in the low 16 bits, the rest a generation.
            let key_of = |e: &Entry| ((e.offset() / 8 - 1) & 0xffff) as u16;
            let mut table = Table::new();
            let mut model: HashMap<u16, u64> = HashMap::new();
            for step in steps {
                match step {
                    Step::Insert(key) => {
                        if let std::collections::hash_map::Entry::Vacant(slot) = model.entry(key) {
                            let offset = (u64::from(key) + 1) * 8;
                            table.insert(entry(hash_of(key), offset));
                            slot.insert(offset);
                        }
                    }
                    Step::Remove(key) => {
                        let found = table.find_entry(hash_of(key), |e| key_of(e) == key);
                        match (found, model.remove(&key)) {
                            (Ok(occupied), Some(offset)) => {
                                prop_assert_eq!(occupied.remove().offset(), offset)
                            }
                            (Err(_), None) => {}
                            (found, expected) => prop_assert!(
                                false,
                                "remove {}: found {} expected {:?}",
                                key,
                                found.is_ok(),
                                expected
                            ),
                        }
                    }
                    Step::Retarget(key, generation) => {
                        let offset = ((u64::from(generation) << 16 | u64::from(key)) + 1) * 8;
                        if let Ok(mut occupied) = table.find_entry(hash_of(key), |e| key_of(e) == key) {
                            occupied.get_mut().set_offset(offset);
                            model.insert(key, offset);
                        }
                    }
                    Step::Reserve(n) => table.reserve(usize::from(n)),
                }
                prop_assert_eq!(table.len(), model.len());
            }
            for key in 0..512u16 {
                let found = table.find(hash_of(key), |e| key_of(e) == key).map(Entry::offset);
                prop_assert_eq!(found, model.get(&key).copied(), "key {}", key);
            }
            let mut all: Vec<u64> = table.iter().map(Entry::offset).collect();
            let mut expected: Vec<u64> = model.values().copied().collect();
            all.sort_unstable();
            expected.sort_unstable();
            prop_assert_eq!(all, expected);
            for hash in 0..64u16 {
                let hash = hash_of(hash);
                let with_hash = table.iter_hash(hash).count();
                let expected = model.keys().filter(|&&k| hash_of(k) == hash).count();
                prop_assert_eq!(with_hash, expected);
            }
        }
    }
}
