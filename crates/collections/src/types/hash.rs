//! `Hash`: the value of a Redis hash key, field -> value.
//!
//! Entries live in a [`HashedMap`] in `(hash(field), field)` order (see
//! [`hashed`] for why hash order): lookups probe from the field's home slot,
//! HRANDFIELD picks random slots, and HSCAN walks hash order with the hash
//! as its cursor.

use super::hashed::{self, HashedKey};
use super::hashed_map::HashedMap;

/// A borrowed field and its value.
pub type FieldValue<'a> = (&'a [u8], &'a [u8]);

/// A Redis hash: a map from field to value, both byte strings.
///
/// Iteration order (and SCAN order, and checkpoint image order) is the order
/// of `(hash(field), field)`: arbitrary to a user, as in Redis, and the same
/// for the same fields within one process.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Hash {
    entries: HashedMap<Box<[u8]>>,
    /// Sum of field and value lengths, kept so memory accounting is O(1).
    payload_bytes: usize,
}

/// What [`Hash::prefetch_field`] starts loading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldWarm {
    Slot,
    Value,
}

/// How many operations ahead of an HSET a replay that knows its next
/// ones (the checkpointer, a replicated node's apply) warms the field's
/// slot, then, with the slot loaded by then, its value: a hot hash's
/// replay missed on both for nearly every HSET. The slot's distance comes
/// first and is the farthest.
pub const WARM_FIELD_AHEAD: [(usize, FieldWarm); 2] = [(8, FieldWarm::Slot), (4, FieldWarm::Value)];

impl Hash {
    /// An empty hash.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a hash from entries already in [`Hash::iter`] order, in O(n).
    /// The caller (the image decoder) must have checked the order: strictly
    /// increasing `(hash(field), field)` under this process's seed.
    pub(crate) fn from_sorted(entries: Vec<(HashedKey, Box<[u8]>)>) -> Self {
        let payload_bytes = entries
            .iter()
            .map(|((_, field), value)| field.len() + value.len())
            .sum();
        Hash {
            entries: HashedMap::from_sorted(
                entries
                    .into_iter()
                    .map(|((hash, field), value)| (hash, field, value)),
            ),
            payload_bytes,
        }
    }

    /// Number of fields (HLEN).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the hash has no fields. Redis deletes a key whose hash becomes
    /// empty; that is the caller's job.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `field` (HGET).
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.entries.get(field).map(|value| &value[..])
    }

    /// Starts loading what an HSET of `field` will miss on (see
    /// [`WARM_FIELD_AHEAD`]): the slot the field would be found in, or its
    /// value's first 256 bytes if the field is there (best once the slot
    /// is loaded). A hint: nothing changes.
    pub fn prefetch_field(&self, field: &[u8], what: FieldWarm) {
        match what {
            FieldWarm::Slot => self.entries.prefetch(field),
            FieldWarm::Value => {
                if let Some(value) = self.entries.get(field) {
                    for line in (0..value.len().min(256)).step_by(64) {
                        engram_pmem::prefetch(value[line..].as_ptr());
                    }
                }
            }
        }
    }

    /// Whether `field` is present (HEXISTS).
    pub fn contains(&self, field: &[u8]) -> bool {
        self.entries.contains_key(field)
    }

    /// Sets `field` to `value` (HSET); returns the previous value, `None`
    /// when the field is new. Takes the field owned so a new field costs one
    /// descent and no copy.
    pub fn insert(&mut self, field: Box<[u8]>, value: Box<[u8]>) -> Option<Box<[u8]>> {
        let field_len = field.len();
        let value_len = value.len();
        let old = self.entries.insert(field, value);
        match &old {
            Some(old) => self.payload_bytes = self.payload_bytes - old.len() + value_len,
            None => self.payload_bytes += field_len + value_len,
        }
        old
    }

    /// Replaces the value of an existing `field` and returns the old one, or
    /// gives `value` back when the field is absent; one descent, no field
    /// copy. For updating a value just read (HINCRBY, HINCRBYFLOAT) when the
    /// caller holds the field only borrowed.
    pub fn replace(&mut self, field: &[u8], value: Box<[u8]>) -> Result<Box<[u8]>, Box<[u8]>> {
        match self.entries.get_mut(field) {
            Some(slot) => {
                self.payload_bytes = self.payload_bytes - slot.len() + value.len();
                Ok(std::mem::replace(slot, value))
            }
            None => Err(value),
        }
    }

    /// Sets an existing `field` to a copy of `value`, in the value's own
    /// allocation when the lengths match; false (nothing done) when the
    /// field is absent. For replaying borrowed operations (a checkpoint):
    /// an overwrite of a value by one as long, the common case, then costs
    /// no allocation and no free.
    pub fn overwrite(&mut self, field: &[u8], value: &[u8]) -> bool {
        let Some(slot) = self.entries.get_mut(field) else {
            return false;
        };
        self.payload_bytes = self.payload_bytes - slot.len() + value.len();
        if slot.len() == value.len() {
            slot.copy_from_slice(value);
        } else {
            *slot = value.into();
        }
        true
    }

    /// Removes `field` (HDEL); returns its value if it was present.
    pub fn remove(&mut self, field: &[u8]) -> Option<Box<[u8]>> {
        let (_, value) = self.entries.remove(field)?;
        self.payload_bytes -= field.len() + value.len();
        Some(value)
    }

    /// `count` distinct fields with their values, chosen uniformly at
    /// random (all of them when `count >= len`), in iteration order
    /// (HRANDFIELD with a positive count).
    pub fn sample<R: rand::Rng + ?Sized>(&self, count: usize, rng: &mut R) -> Vec<FieldValue<'_>> {
        self.entries
            .sample(count, rng)
            .into_iter()
            .map(|(field, value)| (field, &value[..]))
            .collect()
    }

    /// `sample` by rank: the same fields for the same contents and random
    /// numbers, whatever the table's history (a replicated node's script
    /// must pick what its peers pick; see `Set::sample_by_rank`). O(n).
    pub fn sample_by_rank<R: rand::Rng + ?Sized>(
        &self,
        count: usize,
        rng: &mut R,
    ) -> Vec<FieldValue<'_>> {
        self.entries
            .sample_by_rank(count, rng)
            .into_iter()
            .map(|(field, value)| (field, &value[..]))
            .collect()
    }

    /// A uniformly random field and its value chosen by rank, with the
    /// determinism of [`Hash::sample_by_rank`]. O(n / 128).
    pub fn random_by_rank<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Option<(&[u8], &[u8])> {
        let rank = hashed::random_rank(self.len(), rng)?;
        self.entries
            .select(rank)
            .map(|(field, value)| (field, &value[..]))
    }

    /// A uniformly random field and its value (HRANDFIELD).
    pub fn random<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Option<(&[u8], &[u8])> {
        self.entries
            .random(rng)
            .map(|(field, value)| (field, &value[..]))
    }

    /// One step of HSCAN.
    ///
    /// Returns the entries whose field hash is `>= cursor`, in hash order,
    /// stopping after at least `count` entries (at least one) but never
    /// between two entries of equal hash; and the next cursor, which is the
    /// last returned hash + 1, or 0 when no entries remain after this batch
    /// (or the last hash was `u64::MAX`). Cursor 0 starts a scan.
    ///
    /// Guarantees, whatever inserts and removes happen between calls: a field
    /// present from the first call to the last is returned, and exactly once,
    /// because all fields of one hash value come back in the one batch whose
    /// range covers that value and the cursor then moves past it; a full scan
    /// ends, because the cursor strictly increases. A field added or removed
    /// during the scan may or may not be returned. Unlike Redis, no cursor
    /// bits are reversed: the tree needs no rehashing, so none is needed.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<FieldValue<'_>>) {
        let (next, batch) = self.entries.scan(cursor, count);
        (
            next,
            batch
                .into_iter()
                .map(|(field, value)| (field, &value[..]))
                .collect(),
        )
    }

    /// All fields and values in hash order (HGETALL, and the image encoder).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + '_ {
        self.entries
            .iter()
            .map(|(_, field, value)| (field, &value[..]))
    }

    /// Estimated heap bytes owned by this hash, for INFO memory and eviction
    /// accounting: the table, the values and the fields too long for their
    /// slots, with a per-allocation allowance for each. O(1).
    pub fn approx_heap_bytes(&self) -> usize {
        self.payload_bytes - self.entries.inline_key_bytes()
            + hashed::ALLOCATION_OVERHEAD_BYTES * (self.len() + self.entries.heap_keys())
            + self.entries.table_bytes()
    }
}

impl Hash {
    /// Checks the table's invariants and the payload byte count. O(n); for
    /// tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.entries.check_invariants()?;
        let payload_bytes: usize = self
            .iter()
            .map(|(field, value)| field.len() + value.len())
            .sum();
        if payload_bytes != self.payload_bytes {
            return Err(format!(
                "payload bytes {} recorded, {payload_bytes} held",
                self.payload_bytes
            ));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Hash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(field, value)| {
                (
                    String::from_utf8_lossy(field),
                    String::from_utf8_lossy(value),
                )
            }))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(bytes: &[u8]) -> Box<[u8]> {
        bytes.into()
    }

    #[test]
    fn overwrite_sets_existing_fields_only_and_keeps_the_accounting() {
        let mut hash = Hash::new();
        hash.insert(boxed(b"f"), boxed(b"abc"));
        let before = hash.approx_heap_bytes();
        assert!(
            !hash.overwrite(b"g", b"xyz"),
            "an absent field is left absent"
        );
        assert_eq!(hash.get(b"g"), None);
        assert!(hash.overwrite(b"f", b"xyz"));
        assert_eq!(hash.get(b"f"), Some(&b"xyz"[..]));
        assert_eq!(hash.approx_heap_bytes(), before);
        assert!(hash.overwrite(b"f", b"longer"));
        assert_eq!(hash.get(b"f"), Some(&b"longer"[..]));
        assert_eq!(hash.approx_heap_bytes(), before + 3);
        assert!(hash.overwrite(b"f", b""));
        assert_eq!(hash.get(b"f"), Some(&b""[..]));
        assert_eq!(hash.len(), 1);
    }

    /// Picks by rank depend on the contents and the random numbers only:
    /// a hash grown to thousands of fields and shrunk again picks what a
    /// fresh hash of the same fields picks (a Raft group's members must:
    /// one may have loaded the hash from a snapshot).
    #[test]
    fn picks_by_rank_are_the_same_for_the_same_fields_whatever_the_history() {
        use rand::SeedableRng;
        let fields: Vec<String> = (0..300).map(|i| format!("field{i}")).collect();
        let mut fresh = Hash::new();
        for f in &fields {
            fresh.insert(boxed(f.as_bytes()), boxed(b"v"));
        }
        let mut shrunk = Hash::new();
        for i in 0..5000 {
            shrunk.insert(boxed(format!("gone{i}").as_bytes()), boxed(b"x"));
        }
        for f in fields.iter().rev() {
            shrunk.insert(boxed(f.as_bytes()), boxed(b"v"));
        }
        for i in 0..5000 {
            shrunk.remove(format!("gone{i}").as_bytes());
        }
        assert_eq!(shrunk.len(), fresh.len());
        for seed in 0..20 {
            let rng = || rand::rngs::StdRng::seed_from_u64(seed);
            assert_eq!(
                fresh.random_by_rank(&mut rng()),
                shrunk.random_by_rank(&mut rng())
            );
            assert_eq!(
                fresh.sample_by_rank(7, &mut rng()),
                shrunk.sample_by_rank(7, &mut rng())
            );
        }
        // Every field can be picked.
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let picked: std::collections::HashSet<&[u8]> = (0..20_000)
            .filter_map(|_| fresh.random_by_rank(&mut rng).map(|(f, _)| f))
            .collect();
        assert_eq!(picked.len(), fields.len());
    }

    #[test]
    fn empty_hash() {
        let hash = Hash::new();
        assert!(hash.is_empty());
        assert_eq!(hash.get(b"a"), None);
        assert_eq!(hash.scan(0, 10), (0, vec![]));
        assert_eq!(hash.random(&mut rand::rng()), None);
        assert_eq!(hash.approx_heap_bytes(), 0);
    }

    #[test]
    fn insert_replace_remove_track_payload() {
        let mut hash = Hash::new();
        assert_eq!(hash.insert(boxed(b"f"), boxed(b"one")), None);
        assert_eq!(
            hash.insert(boxed(b"f"), boxed(b"three")),
            Some(boxed(b"one"))
        );
        assert_eq!(hash.payload_bytes, 6);
        assert_eq!(hash.replace(b"f", boxed(b"x")), Ok(boxed(b"three")));
        assert_eq!(hash.replace(b"g", boxed(b"x")), Err(boxed(b"x")));
        assert_eq!(hash.payload_bytes, 2);
        assert_eq!(hash.get(b"f"), Some(&b"x"[..]));
        assert_eq!(hash.remove(b"f"), Some(boxed(b"x")));
        assert_eq!(hash.payload_bytes, 0);
        assert!(hash.is_empty());
    }

    #[test]
    fn empty_field_and_value_are_ordinary() {
        let mut hash = Hash::new();
        hash.insert(boxed(b""), boxed(b""));
        assert!(hash.contains(b""));
        assert_eq!(hash.get(b""), Some(&b""[..]));
        assert_eq!(hash.scan(0, 1).1, vec![(&b""[..], &b""[..])]);
    }

    #[test]
    fn scan_in_small_batches_returns_everything_once() {
        let mut hash = Hash::new();
        for i in 0..1000u32 {
            hash.insert(i.to_le_bytes().into(), boxed(b"v"));
        }
        let mut seen = Vec::new();
        let mut cursor = 0;
        let mut calls = 0;
        loop {
            let (next, batch) = hash.scan(cursor, 7);
            calls += 1;
            seen.extend(batch.into_iter().map(|(field, _)| field.to_vec()));
            if next == 0 {
                break;
            }
            assert!(next > cursor);
            cursor = next;
        }
        assert_eq!(calls, 1000usize.div_ceil(7));
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 1000);
    }

    #[test]
    fn scan_from_a_cursor_past_every_hash_ends() {
        let mut hash = Hash::new();
        hash.insert(boxed(b"a"), boxed(b"1"));
        assert_eq!(hash.scan(u64::MAX, 10).0, 0);
    }
}
