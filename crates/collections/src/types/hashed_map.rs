//! `HashedMap`: byte-string keys found by their hash in one or two cache
//! lines, and kept in hash order.
//!
//! The table behind [`Hash`](super::Hash), [`Set`](super::Set) and a
//! [`SortedSet`](super::SortedSet)'s member index. It is open addressing
//! with linear probing where a key's home slot is the *top* bits of its
//! hash, and every run of occupied slots is kept sorted by `(hash, key)`
//! (an ordered variant of Robin Hood hashing). Two things follow:
//!
//! - The occupied slots, read left to right, are all entries in `(hash,
//!   key)` order: iteration, SCAN with a hash as its cursor and images need
//!   no second structure. A resize keeps the order, so a SCAN cursor stays
//!   valid across it.
//! - A lookup starts at its home and stops at the first slot that sorts
//!   after it, so a miss costs as little as a hit.
//!
//! The tree this replaced (a B-tree ordered the same way) cost ~500 ns a
//! lookup in a 100,000-member set, one cache miss per level; this table
//! costs about one miss.
//!
//! Invariants (checked by [`HashedMap::check_invariants`]): occupied slots
//! are strictly increasing in `(hash, key)`; an entry never sits before its
//! home; between its home and its slot there is no empty slot (a lookup
//! stops at the first empty one). Insertion finds the entry's place and
//! shifts the rest of the run one slot right into the run's first empty
//! slot; removal shifts the displaced entries after it one slot left.
//!
//! The hash is seeded per process ([`hashed::hash_of`]), so a client
//! cannot choose members that share a home and turn lookups linear.

use super::hashed;
use super::inline_key::Key;

/// The fewest home slots a non-empty table has.
const MIN_HOMES: usize = 4;

/// Slots per block of the occupancy counts (at most 255, to fit a `u8`).
const BLOCK: usize = 128;

/// One entry: its key's hash (kept: resizes and probes compare it without
/// rehashing), the key (in the slot when short), and the value.
#[derive(Clone)]
struct Slot<V> {
    hash: u64,
    key: Key,
    value: V,
}

impl<V> Slot<V> {
    fn sorts_before(&self, hash: u64, key: &[u8]) -> std::cmp::Ordering {
        self.hash.cmp(&hash).then_with(|| (*self.key).cmp(key))
    }
}

/// A map from byte strings to `V`, in `(hash, key)` order. See the module
/// documentation.
#[derive(Clone)]
pub(crate) struct HashedMap<V> {
    /// `homes` home slots, then a few overflow slots that only the last
    /// homes' runs reach.
    slots: Box<[Option<Slot<V>>]>,
    /// `home(hash) = hash >> shift`; `homes = 2^(64 - shift)`.
    shift: u32,
    len: usize,
    /// How many keys have an allocation of their own (longer than
    /// `inline_key::INLINE`), and the bytes of those that do not.
    heap_keys: usize,
    inline_key_bytes: usize,
    /// Occupied slots per block of [`BLOCK`] slots: [`HashedMap::select`]
    /// finds a rank by these instead of by every slot.
    counts: Box<[u8]>,
}

impl<V> Default for HashedMap<V> {
    fn default() -> Self {
        HashedMap {
            slots: Box::new([]),
            shift: 64,
            len: 0,
            heap_keys: 0,
            inline_key_bytes: 0,
            counts: Box::new([]),
        }
    }
}

/// Overflow slots after `homes` home slots: enough for the runs of the
/// last homes at three quarters' load (a run longer than that makes the
/// insert grow the table instead).
fn overflow_for(homes: usize) -> usize {
    8 + homes / 64
}

/// The number of home slots for `len` entries at most three quarters full.
fn homes_for(len: usize) -> usize {
    (len.saturating_mul(4) / 3 + 1)
        .next_power_of_two()
        .max(MIN_HOMES)
}

impl<V> HashedMap<V> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn homes(&self) -> usize {
        if self.shift == 64 {
            0
        } else {
            1 << (64 - self.shift)
        }
    }

    fn home(&self, hash: u64) -> usize {
        // `shift` is at most 62 whenever there are slots.
        (hash >> self.shift) as usize
    }

    /// `Ok(slot)` of `key`, or `Err(slot)` where it would be inserted (which
    /// may be one past the last slot).
    fn find(&self, hash: u64, key: &[u8]) -> Result<usize, usize> {
        if self.slots.is_empty() {
            return Err(0);
        }
        let mut at = self.home(hash);
        while let Some(Some(slot)) = self.slots.get(at) {
            match slot.sorts_before(hash, key) {
                std::cmp::Ordering::Less => at += 1,
                std::cmp::Ordering::Equal => return Ok(at),
                std::cmp::Ordering::Greater => return Err(at),
            }
        }
        Err(at)
    }

    /// Starts loading `key`'s home slot (see `engram_pmem::prefetch`): for
    /// a replay that knows its next keys.
    pub(crate) fn prefetch(&self, key: &[u8]) {
        if let Some(slot) = self.slots.get(self.home(hashed::hash_of(key))) {
            engram_pmem::prefetch(slot as *const Option<Slot<V>>);
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<&V> {
        let at = self.find(hashed::hash_of(key), key).ok()?;
        self.slots[at].as_ref().map(|slot| &slot.value)
    }

    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let at = self.find(hashed::hash_of(key), key).ok()?;
        self.slots[at].as_mut().map(|slot| &mut slot.value)
    }

    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        self.find(hashed::hash_of(key), key).is_ok()
    }

    /// Sets `key` to `value`; returns the previous value (the new `key` is
    /// then dropped and the stored one kept), `None` when `key` is new.
    pub(crate) fn insert(&mut self, key: Box<[u8]>, value: V) -> Option<V> {
        let hash = hashed::hash_of(&key);
        match self.find(hash, &key) {
            Ok(at) => {
                let slot = self.slots[at].as_mut().expect("found slot is occupied");
                Some(std::mem::replace(&mut slot.value, value))
            }
            Err(at) => {
                let key = Key::from_box(key);
                self.insert_new(at, Slot { hash, key, value });
                None
            }
        }
    }

    /// The value of `key` when present (nothing inserted); otherwise inserts
    /// a copy of `key` with `value` and returns `None`. One hash and one
    /// probe for what would be a lookup then an insert (ZADD's new member).
    pub(crate) fn try_insert(&mut self, key: &[u8], value: V) -> Option<&mut V> {
        let hash = hashed::hash_of(key);
        match self.find(hash, key) {
            Ok(at) => self.slots[at].as_mut().map(|slot| &mut slot.value),
            Err(at) => {
                let key = Key::new(key);
                self.insert_new(at, Slot { hash, key, value });
                None
            }
        }
    }

    /// Inserts an absent key at `at`, where [`HashedMap::find`] placed it.
    fn insert_new(&mut self, mut at: usize, slot: Slot<V>) {
        if self.len + 1 > self.homes() / 4 * 3 {
            self.resize(homes_for(self.len + 1));
            at = self.find(slot.hash, &slot.key).expect_err("key is absent");
        }
        loop {
            // The run from `at` moves one slot right into its first hole.
            let hole = self.slots.get(at..).and_then(|rest| {
                rest.iter()
                    .position(Option::is_none)
                    .map(|offset| at + offset)
            });
            if let Some(hole) = hole {
                self.count_key(&slot.key, true);
                self.slots[at..=hole].rotate_right(1);
                self.slots[at] = Some(slot);
                self.counts[hole / BLOCK] += 1;
                self.len += 1;
                return;
            }
            // The run reaches past the overflow slots: spread it out.
            self.resize(self.homes() * 2);
            at = self.find(slot.hash, &slot.key).expect_err("key is absent");
        }
    }

    /// Removes `key`; returns the stored key and its value.
    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<(Box<[u8]>, V)> {
        let at = self.find(hashed::hash_of(key), key).ok()?;
        Some(self.remove_at(at))
    }

    /// Removes the entry in occupied slot `at`.
    fn remove_at(&mut self, at: usize) -> (Box<[u8]>, V) {
        let slot = self.slots[at].take().expect("removing an occupied slot");
        self.count_key(&slot.key, false);
        // Entries after it that sit past their home move one slot left;
        // the first empty slot or entry at its home ends the shift.
        let mut end = at + 1;
        while let Some(Some(next)) = self.slots.get(end) {
            if self.home(next.hash) >= end {
                break;
            }
            end += 1;
        }
        self.slots[at..end].rotate_left(1);
        self.counts[(end - 1) / BLOCK] -= 1;
        self.len -= 1;
        if self.len < self.homes() / 8 && self.homes() > MIN_HOMES {
            self.resize(homes_for(self.len));
        }
        (slot.key.into_box(), slot.value)
    }

    /// Keeps `heap_keys` and `inline_key_bytes` as `key` comes or goes.
    fn count_key(&mut self, key: &Key, added: bool) {
        let (heap, inline) = if key.is_heap() {
            (1, 0)
        } else {
            (0, key.len())
        };
        if added {
            self.heap_keys += heap;
            self.inline_key_bytes += inline;
        } else {
            self.heap_keys -= heap;
            self.inline_key_bytes -= inline;
        }
    }

    /// Rebuilds the table with `homes` home slots, keeping the order.
    fn resize(&mut self, homes: usize) {
        let old = std::mem::take(&mut self.slots);
        let len = self.len;
        self.place_sorted(homes, old.into_vec().into_iter().flatten(), len);
    }

    /// Fills the table afresh with `len` entries given in strictly
    /// increasing `(hash, key)` order, each at its home or just after the
    /// previous one. When the last run would spill past the overflow slots
    /// (rare: only the last homes' runs reach them), starts again with
    /// twice the homes.
    fn place_sorted(
        &mut self,
        homes: usize,
        mut entries: impl Iterator<Item = Slot<V>>,
        len: usize,
    ) {
        let homes = homes.max(MIN_HOMES);
        let shift = 64 - homes.trailing_zeros();
        let total = homes + overflow_for(homes);
        let mut slots: Vec<Option<Slot<V>>> = Vec::with_capacity(total);
        slots.resize_with(total, || None);
        let mut counts = vec![0u8; total.div_ceil(BLOCK)];
        let mut next = 0usize;
        while let Some(slot) = entries.next() {
            let at = ((slot.hash >> shift) as usize).max(next);
            if at >= total {
                let placed = slots.into_iter().flatten();
                let all: Vec<Slot<V>> = placed.chain([slot]).chain(entries).collect();
                return self.place_sorted(homes * 2, all.into_iter(), len);
            }
            slots[at] = Some(slot);
            counts[at / BLOCK] += 1;
            next = at + 1;
        }
        self.slots = slots.into_boxed_slice();
        self.counts = counts.into_boxed_slice();
        self.shift = shift;
        self.len = len;
    }

    /// Builds a map from entries in strictly increasing `(hash, key)` order
    /// (the caller checks it), hashes given, in O(n).
    pub(crate) fn from_sorted<I>(entries: I) -> Self
    where
        I: IntoIterator<Item = (u64, Box<[u8]>, V)>,
        I::IntoIter: ExactSizeIterator,
    {
        let mut map = HashedMap::default();
        let entries = entries.into_iter();
        let len = entries.len();
        if len == 0 {
            return map;
        }
        let (mut heap_keys, mut inline_key_bytes) = (0, 0);
        let slots = entries.map(|(hash, key, value)| {
            let key = Key::from_box(key);
            if key.is_heap() {
                heap_keys += 1;
            } else {
                inline_key_bytes += key.len();
            }
            Slot { hash, key, value }
        });
        map.place_sorted(homes_for(len), slots, len);
        map.heap_keys = heap_keys;
        map.inline_key_bytes = inline_key_bytes;
        map
    }

    /// All entries as `(hash, key, value)` in `(hash, key)` order.
    pub(crate) fn iter(&self) -> Iter<'_, V> {
        Iter {
            slots: self.slots.iter(),
            remaining: self.len,
        }
    }

    /// One step of a hash-ordered scan: the entries whose hash is `>=
    /// cursor`, in order, at least `count` (at least one) unless they run
    /// out, but never ending between two entries of equal hash; and the next
    /// cursor: the last returned hash + 1, or 0 when nothing follows (or
    /// the last hash was `u64::MAX`). Cursor 0 starts a scan. See
    /// [`Hash::scan`](super::Hash::scan) for what this guarantees a client.
    pub(crate) fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<(&[u8], &V)>) {
        let count = count.max(1);
        if self.slots.is_empty() {
            return (0, Vec::new());
        }
        let mut entries = self.slots[self.home(cursor)..]
            .iter()
            .flatten()
            .skip_while(|slot| slot.hash < cursor)
            .peekable();
        let mut batch = Vec::with_capacity(count.min(self.len));
        let mut last_hash = None;
        while let Some(slot) = entries.next() {
            batch.push((&slot.key[..], &slot.value));
            last_hash = Some(slot.hash);
            // The next cursor is "last hash + 1": ending inside a run of
            // equal hashes would skip the rest of the run.
            let run_continues = matches!(entries.peek(), Some(next) if next.hash == slot.hash);
            if batch.len() >= count && !run_continues {
                break;
            }
        }
        let next_cursor = match (entries.peek(), last_hash) {
            (Some(_), Some(hash)) => hash.checked_add(1).unwrap_or(0),
            _ => 0,
        };
        (next_cursor, batch)
    }

    /// The entry at position `rank` of `(hash, key)` order: the same entry
    /// for the same contents whatever the table's history, so a replicated
    /// node's seeded picks (SPOP) agree with its peers'. O(n / 128).
    pub(crate) fn select(&self, rank: usize) -> Option<(&[u8], &V)> {
        if rank >= self.len {
            return None;
        }
        let mut before = 0;
        for (block, &count) in self.counts.iter().enumerate() {
            let count = usize::from(count);
            if before + count > rank {
                let start = block * BLOCK;
                let end = (start + BLOCK).min(self.slots.len());
                let slot = self.slots[start..end].iter().flatten().nth(rank - before)?;
                return Some((&slot.key[..], &slot.value));
            }
            before += count;
        }
        None
    }

    /// `count` distinct entries chosen uniformly at random by their ranks
    /// (all of them when `count >= len`), in order: like
    /// [`HashedMap::select`], the same for the same contents and random
    /// numbers on every node. O(n).
    pub(crate) fn sample_by_rank<R: rand::Rng + ?Sized>(
        &self,
        count: usize,
        rng: &mut R,
    ) -> Vec<(&[u8], &V)> {
        let count = count.min(self.len);
        let mut wanted = vec![false; self.len];
        for rank in rand::seq::index::sample(rng, self.len, count) {
            wanted[rank] = true;
        }
        self.iter()
            .zip(wanted)
            .filter_map(|((_, key, value), wanted)| wanted.then_some((key, value)))
            .collect()
    }

    /// A uniformly random occupied slot: a random slot, again until it is
    /// occupied (at least one slot in nine is, so a few tries on average).
    fn random_slot<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        loop {
            let at = rng.random_range(0..self.slots.len());
            if self.slots[at].is_some() {
                return Some(at);
            }
        }
    }

    /// A uniformly random entry.
    pub(crate) fn random<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Option<(&[u8], &V)> {
        let at = self.random_slot(rng)?;
        self.slots[at]
            .as_ref()
            .map(|slot| (&slot.key[..], &slot.value))
    }

    /// Removes a uniformly random entry.
    pub(crate) fn remove_random<R: rand::Rng + ?Sized>(
        &mut self,
        rng: &mut R,
    ) -> Option<(Box<[u8]>, V)> {
        let at = self.random_slot(rng)?;
        Some(self.remove_at(at))
    }

    /// `count` distinct entries chosen uniformly at random (all of them when
    /// `count >= len`), in `(hash, key)` order. A few are found by random
    /// slots; many by sampling ranks and walking the table once.
    pub(crate) fn sample<R: rand::Rng + ?Sized>(
        &self,
        count: usize,
        rng: &mut R,
    ) -> Vec<(&[u8], &V)> {
        let count = count.min(self.len);
        let mut picked: Vec<usize> = if count.saturating_mul(16) < self.len {
            let mut picked = std::collections::HashSet::with_capacity(count);
            while picked.len() < count {
                picked.insert(self.random_slot(rng).expect("not empty"));
            }
            picked.into_iter().collect()
        } else {
            return self.sample_by_rank(count, rng);
        };
        picked.sort_unstable();
        picked
            .into_iter()
            .filter_map(|at| self.slots[at].as_ref())
            .map(|slot| (&slot.key[..], &slot.value))
            .collect()
    }

    /// Heap bytes of the slot array (keys' and values' own allocations not
    /// included).
    pub(crate) fn table_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Option<Slot<V>>>()
    }

    /// How many keys have an allocation of their own (the rest are held in
    /// their slots).
    pub(crate) fn heap_keys(&self) -> usize {
        self.heap_keys
    }

    /// The bytes of the keys held in their slots (counted in
    /// [`HashedMap::table_bytes`] already).
    pub(crate) fn inline_key_bytes(&self) -> usize {
        self.inline_key_bytes
    }

    /// Checks the invariants in the module documentation, the length and
    /// that every hash is its key's. O(n); for tests.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let homes = self.homes();
        if self.slots.len()
            != if homes == 0 {
                0
            } else {
                homes + overflow_for(homes)
            }
        {
            return Err(format!("{} slots for {homes} homes", self.slots.len()));
        }
        let mut previous: Option<&Slot<V>> = None;
        let mut occupied = 0;
        let mut run_start = 0;
        for (at, slot) in self.slots.iter().enumerate() {
            let Some(slot) = slot else {
                run_start = at + 1;
                continue;
            };
            occupied += 1;
            let name = String::from_utf8_lossy(&slot.key);
            if slot.hash != hashed::hash_of(&slot.key) {
                return Err(format!("{name:?} is stored under a wrong hash"));
            }
            let home = self.home(slot.hash);
            if home > at {
                return Err(format!("{name:?} sits at {at}, before its home {home}"));
            }
            if home < run_start {
                return Err(format!(
                    "{name:?} at {at}: an empty slot since its home {home}"
                ));
            }
            let in_order = previous.is_none_or(|previous| {
                previous.sorts_before(slot.hash, &slot.key) == std::cmp::Ordering::Less
            });
            if !in_order {
                return Err(format!("{name:?} at {at} is out of order"));
            }
            previous = Some(slot);
        }
        if occupied != self.len {
            return Err(format!("{occupied} entries held, {} recorded", self.len));
        }
        let keys = self.slots.iter().flatten().map(|slot| &slot.key);
        let heap_keys = keys.clone().filter(|key| key.is_heap()).count();
        let inline_key_bytes: usize = keys.filter(|key| !key.is_heap()).map(|key| key.len()).sum();
        if (heap_keys, inline_key_bytes) != (self.heap_keys, self.inline_key_bytes) {
            return Err(format!(
                "{heap_keys} heap keys and {inline_key_bytes} inline key bytes held, {} and {} recorded",
                self.heap_keys, self.inline_key_bytes
            ));
        }
        let counts: Vec<u8> = self
            .slots
            .chunks(BLOCK)
            .map(|block| block.iter().flatten().count() as u8)
            .collect();
        if *counts != *self.counts {
            return Err("block counts differ from the slots".to_string());
        }
        if homes > 0 && self.len > homes / 4 * 3 {
            return Err(format!("{} entries in {homes} homes", self.len));
        }
        Ok(())
    }
}

impl<V: PartialEq> PartialEq for HashedMap<V> {
    /// Equal entries: within one process the order is a function of the
    /// entries, whatever the two tables' sizes.
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self
                .iter()
                .zip(other.iter())
                .all(|((_, a, x), (_, b, y))| a == b && x == y)
    }
}

impl<V: Eq> Eq for HashedMap<V> {}

/// Iterator over a [`HashedMap`]'s entries in order.
pub(crate) struct Iter<'a, V> {
    slots: std::slice::Iter<'a, Option<Slot<V>>>,
    remaining: usize,
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (u64, &'a [u8], &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        let slot = self.slots.by_ref().flatten().next()?;
        self.remaining -= 1;
        Some((slot.hash, &slot.key[..], &slot.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<V> ExactSizeIterator for Iter<'_, V> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn key(n: u32) -> Box<[u8]> {
        format!("member:{n}").into_bytes().into()
    }

    #[test]
    fn inserts_finds_and_removes_across_resizes() {
        let mut map = HashedMap::default();
        for n in 0..5_000u32 {
            assert_eq!(map.insert(key(n), n), None);
            if n % 500 == 0 {
                map.check_invariants().unwrap();
            }
        }
        assert_eq!(map.len(), 5_000);
        assert_eq!(map.insert(key(7), 70), Some(7));
        assert_eq!(map.get(&key(7)), Some(&70));
        assert!(!map.contains_key(b"absent"));
        for n in (0..5_000u32).filter(|n| n % 7 != 0) {
            assert_eq!(map.remove(&key(n)).map(|(_, value)| value), Some(n));
        }
        map.check_invariants().unwrap();
        assert_eq!(map.len(), 715);
        assert_eq!(map.homes(), 2048, "the table shrank from 8192");
        assert!(map.iter().all(|(_, _, value)| value % 7 == 0));
    }

    #[test]
    fn iteration_is_in_hash_order_and_from_sorted_rebuilds_it() {
        let mut map = HashedMap::default();
        for n in 0..1_000u32 {
            map.insert(key(n), n);
        }
        let entries: Vec<(u64, Box<[u8]>, u32)> = map
            .iter()
            .map(|(hash, key, value)| (hash, key.into(), *value))
            .collect();
        assert!(entries
            .windows(2)
            .all(|w| (w[0].0, &w[0].1) < (w[1].0, &w[1].1)));
        let rebuilt = HashedMap::from_sorted(entries);
        rebuilt.check_invariants().unwrap();
        assert!(rebuilt == map);
        let mut other = rebuilt.clone();
        other.insert(key(5), 0);
        assert!(other != map);
    }

    #[test]
    fn a_scan_returns_every_entry_once_while_the_table_changes() {
        let mut map = HashedMap::default();
        for n in 0..2_000u32 {
            map.insert(key(n), n);
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        let mut extras: Vec<u32> = Vec::new();
        let (mut steps, mut grown, mut shrunk) = (0, false, false);
        loop {
            let (next, batch) = map.scan(cursor, 10);
            for (_, value) in batch {
                assert!(seen.insert(*value), "{value} returned twice");
            }
            // The table grows, then shrinks between steps, moving every
            // entry each time.
            let homes = map.homes();
            steps += 1;
            if steps <= 60 {
                for _ in 0..200 {
                    let n = 2_000 + extras.len() as u32;
                    map.insert(key(n), n);
                    extras.push(n);
                }
            } else {
                for n in extras.drain(extras.len().saturating_sub(400)..) {
                    map.remove(&key(n));
                }
            }
            grown |= map.homes() > homes;
            shrunk |= map.homes() < homes;
            if next == 0 {
                break;
            }
            cursor = next;
        }
        assert!(grown && shrunk, "grown {grown}, shrunk {shrunk}");
        assert!((0..2_000).all(|n| seen.contains(&n)));
    }

    #[test]
    fn random_entries_are_uniform_and_samples_distinct() {
        let mut map = HashedMap::default();
        for n in 0..40u32 {
            map.insert(key(n), n);
        }
        let mut rng = rand::rng();
        let mut counts = [0u32; 40];
        for _ in 0..40_000 {
            let (_, value) = map.random(&mut rng).unwrap();
            counts[*value as usize] += 1;
        }
        // 1,000 expected each; a deviation of 200 is over six sigma.
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        for count in [0, 1, 2, 20, 39, 40, 100] {
            let sample = map.sample(count, &mut rng);
            assert_eq!(sample.len(), count.min(40));
            let distinct: std::collections::HashSet<_> = sample.iter().map(|(k, _)| *k).collect();
            assert_eq!(distinct.len(), sample.len());
        }
        let (_, popped) = map.remove_random(&mut rng).unwrap();
        assert!(!map.iter().any(|(_, _, value)| *value == popped));
        map.check_invariants().unwrap();
    }

    #[test]
    fn select_finds_every_rank_whatever_the_table_s_history() {
        let mut grown = HashedMap::default();
        for n in 0..3_000u32 {
            grown.insert(key(n), n);
        }
        for n in 1_000..3_000u32 {
            grown.remove(&key(n));
        }
        let built = HashedMap::from_sorted(
            grown
                .iter()
                .map(|(hash, key, value)| (hash, key.into(), *value)),
        );
        assert_ne!(grown.homes(), built.homes(), "two layouts of one content");
        let in_order: Vec<u32> = grown.iter().map(|(_, _, value)| *value).collect();
        for (rank, value) in in_order.iter().enumerate() {
            assert_eq!(grown.select(rank).map(|(_, v)| v), Some(value));
            assert_eq!(built.select(rank).map(|(_, v)| v), Some(value));
        }
        assert_eq!(grown.select(1_000), None);
        use rand::SeedableRng;
        let picks = |map: &HashedMap<u32>| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(7);
            map.sample_by_rank(30, &mut rng)
                .into_iter()
                .map(|(_, value)| *value)
                .collect::<Vec<_>>()
        };
        assert_eq!(picks(&grown), picks(&built));
        assert_eq!(picks(&grown).len(), 30);
    }

    #[test]
    fn an_empty_map_answers_everything() {
        let mut map: HashedMap<()> = HashedMap::default();
        assert_eq!(map.get(b"a"), None);
        assert_eq!(map.remove(b"a"), None);
        assert_eq!(map.scan(0, 10), (0, vec![]));
        assert!(map.random(&mut rand::rng()).is_none());
        assert!(map.sample(3, &mut rand::rng()).is_empty());
        assert_eq!(map.iter().len(), 0);
        map.check_invariants().unwrap();
        map.insert(b"a".to_vec().into(), ());
        map.remove(b"a");
        map.check_invariants().unwrap();
    }

    /// The hash a test chooses: the number after a key's last ':' (so
    /// "a:5" and "b:5" collide), or 0.
    fn chosen(bytes: &[u8]) -> u64 {
        let text = std::str::from_utf8(bytes).unwrap();
        text.rsplit(':').next().unwrap().parse().unwrap_or(0)
    }

    fn scan_names(map: &HashedMap<()>, cursor: u64, count: usize) -> (u64, Vec<String>) {
        let (next, batch) = map.scan(cursor, count);
        let names = batch
            .iter()
            .map(|(key, ())| String::from_utf8_lossy(key).into_owned())
            .collect();
        (next, names)
    }

    fn map_of(keys: &[&str]) -> HashedMap<()> {
        let mut map = HashedMap::default();
        for key in keys {
            map.insert(key.as_bytes().into(), ());
        }
        map
    }

    #[test]
    fn a_scan_batch_never_splits_equal_hashes() {
        hashed::forced::with(chosen, || {
            let map = map_of(&["a:3", "b:5", "c:5", "d:5", "e:9"]);
            assert_eq!(
                scan_names(&map, 0, 2),
                (
                    6,
                    vec!["a:3".into(), "b:5".into(), "c:5".into(), "d:5".into()]
                )
            );
            assert_eq!(scan_names(&map, 6, 2), (0, vec!["e:9".into()]));
            // A cursor between hashes starts at the next one.
            assert_eq!(scan_names(&map, 4, 1).1, vec!["b:5", "c:5", "d:5"]);
            assert_eq!(scan_names(&map, 10, 1), (0, vec![]));
            // Count 0 is taken as 1.
            assert_eq!(scan_names(&map, 0, 0), (4, vec!["a:3".into()]));
        });
    }

    #[test]
    fn the_largest_hash_ends_a_scan_instead_of_overflowing() {
        hashed::forced::with(chosen, || {
            let top = u64::MAX;
            let map = map_of(&[
                &format!("a:{}", top - 1),
                &format!("b:{top}"),
                &format!("c:{top}"),
            ]);
            let (next, names) = scan_names(&map, top - 1, 1);
            assert_eq!((next, names.len()), (top, 1));
            assert_eq!(scan_names(&map, next, 1).0, 0);
            assert_eq!(scan_names(&map, next, 1).1.len(), 2);
        });
    }

    #[test]
    fn colliding_and_crowded_keys_are_kept_apart_in_order() {
        // Every key in one of three hashes, all at the table's top end, so
        // runs are long and spill into (and past) the overflow slots.
        hashed::forced::with(chosen, || {
            let hashes = [u64::MAX - 2, u64::MAX - 1, u64::MAX];
            let mut map = HashedMap::default();
            for n in 0..300u64 {
                let key = format!("k{n}:{}", hashes[n as usize % 3]);
                assert_eq!(map.insert(key.into_bytes().into(), n), None);
            }
            map.check_invariants().unwrap();
            for n in (0..300u64).step_by(2) {
                let key = format!("k{n}:{}", hashes[n as usize % 3]);
                assert_eq!(map.get(key.as_bytes()), Some(&n));
                assert_eq!(map.remove(key.as_bytes()).map(|(_, v)| v), Some(n));
                assert_eq!(map.get(key.as_bytes()), None);
            }
            map.check_invariants().unwrap();
            assert_eq!(map.len(), 150);
            let (_, all) = map.scan(0, 1);
            assert_eq!(all.len(), 50, "the first hash's run comes whole");
        });
    }

    #[derive(Debug, Clone)]
    enum Step {
        Insert(u16, u8),
        Remove(u16),
        PopRandom,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0..400u16, any::<u8>()).prop_map(|(k, v)| Step::Insert(k, v)),
            2 => (0..400u16).prop_map(Step::Remove),
            1 => Just(Step::PopRandom),
        ]
    }

    /// Keys of 1 to 29 bytes by `k`: held in the slot and on the heap.
    fn varied_key(k: u16) -> Vec<u8> {
        format!("{k}{}", "-".repeat(usize::from(k % 4) * 7)).into_bytes()
    }

    proptest! {
        /// Any sequence of inserts and removes leaves the table equal to a
        /// `BTreeMap` of the same operations, with its invariants intact.
        #[test]
        fn behaves_as_a_map(
            steps in proptest::collection::vec(step(), 1..600),
            seed in any::<u64>(),
        ) {
            use rand::SeedableRng;
            let mut map = HashedMap::default();
            let mut model = BTreeMap::new();
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            for step in steps {
                match step {
                    Step::Insert(k, v) => {
                        let key = varied_key(k);
                        prop_assert_eq!(map.insert(key.clone().into(), v), model.insert(key, v));
                    }
                    Step::Remove(k) => {
                        let key = varied_key(k);
                        prop_assert_eq!(
                            map.remove(&key).map(|(_, v)| v),
                            model.remove(&key)
                        );
                    }
                    Step::PopRandom => {
                        let popped = map.remove_random(&mut rng).map(|(k, v)| (k.into_vec(), v));
                        if let Some((key, value)) = popped {
                            prop_assert_eq!(model.remove(&key), Some(value));
                        } else {
                            prop_assert!(model.is_empty());
                        }
                    }
                }
            }
            map.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert_eq!(map.len(), model.len());
            for (key, value) in &model {
                prop_assert_eq!(map.get(key), Some(value));
            }
        }
    }
}
