//! `Set`: the value of a Redis set key.
//!
//! Members live in a [`HashedMap`] in `(hash(member), member)` order,
//! exactly as [`Hash`](super::Hash) fields do (see [`hashed`]): SRANDMEMBER
//! and SPOP pick random slots, SSCAN uses the hash as its cursor. Set
//! algebra (SINTER, SUNION, SDIFF) is the server's, built on `contains` and
//! `iter`.

use super::hashed::{self, HashedKey};
use super::hashed_map::HashedMap;

/// A Redis set of byte-string members.
///
/// Iteration, SCAN and image order is the order of `(hash(member),
/// member)`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Set {
    members: HashedMap<()>,
    /// Sum of member lengths, kept so memory accounting is O(1).
    payload_bytes: usize,
}

impl Set {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a set from members already in [`Set::iter`] order, with their
    /// hashes, in O(n). The caller (the image decoder) must have checked the
    /// order.
    pub(crate) fn from_sorted<I>(members: I) -> Self
    where
        I: IntoIterator<Item = HashedKey>,
        I::IntoIter: ExactSizeIterator,
    {
        let mut payload_bytes = 0;
        let members = HashedMap::from_sorted(members.into_iter().map(|(hash, member)| {
            payload_bytes += member.len();
            (hash, member, ())
        }));
        Set {
            members,
            payload_bytes,
        }
    }

    /// Number of members (SCARD).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the set has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Adds `member` (SADD); true when it was not already present.
    pub fn insert(&mut self, member: Box<[u8]>) -> bool {
        let member_len = member.len();
        let added = self.members.insert(member, ()).is_none();
        if added {
            self.payload_bytes += member_len;
        }
        added
    }

    /// Removes `member` (SREM); true when it was present.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        let removed = self.members.remove(member).is_some();
        if removed {
            self.payload_bytes -= member.len();
        }
        removed
    }

    /// Whether `member` is present (SISMEMBER).
    pub fn contains(&self, member: &[u8]) -> bool {
        self.members.contains_key(member)
    }

    /// `count` distinct members chosen uniformly at random (all of them
    /// when `count >= len`), for SRANDMEMBER with a positive count.
    pub fn sample<R: rand::Rng + ?Sized>(&self, count: usize, rng: &mut R) -> Vec<&[u8]> {
        self.members
            .sample(count, rng)
            .into_iter()
            .map(|(member, ())| member)
            .collect()
    }

    /// `count` distinct members chosen uniformly at random by rank, in
    /// iteration order: the same members for the same contents and random
    /// numbers, whatever the table's history (a replicated node's SPOP must
    /// pick what its peers pick). O(n).
    pub fn sample_by_rank<R: rand::Rng + ?Sized>(&self, count: usize, rng: &mut R) -> Vec<&[u8]> {
        self.members
            .sample_by_rank(count, rng)
            .into_iter()
            .map(|(member, ())| member)
            .collect()
    }

    /// A uniformly random member chosen by rank, with the determinism of
    /// [`Set::sample_by_rank`]. O(n / 128).
    pub fn random_by_rank<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Option<&[u8]> {
        let rank = hashed::random_rank(self.len(), rng)?;
        self.members.select(rank).map(|(member, ())| member)
    }

    /// A uniformly random member (SRANDMEMBER).
    pub fn random<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Option<&[u8]> {
        self.members.random(rng).map(|(member, ())| member)
    }

    /// Removes and returns a uniformly random member (SPOP).
    pub fn pop_random<R: rand::Rng + ?Sized>(&mut self, rng: &mut R) -> Option<Box<[u8]>> {
        let (member, ()) = self.members.remove_random(rng)?;
        self.payload_bytes -= member.len();
        Some(member)
    }

    /// One step of SSCAN, with the contract of [`Hash::scan`](super::Hash::scan):
    /// members with hash `>= cursor` in hash order, at least `count` (min 1)
    /// unless the set runs out, never splitting equal hashes; next cursor is
    /// the last hash + 1, or 0 when done.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<&[u8]>) {
        let (next, batch) = self.members.scan(cursor, count);
        (next, batch.into_iter().map(|(member, ())| member).collect())
    }

    /// All members in hash order (SMEMBERS, and the image encoder).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.members.iter().map(|(_, member, ())| member)
    }

    /// Estimated heap bytes owned by this set, for memory accounting: the
    /// table, and the bytes of the members too long for their slots plus a
    /// per-allocation allowance for each. O(1).
    pub fn approx_heap_bytes(&self) -> usize {
        self.payload_bytes - self.members.inline_key_bytes()
            + hashed::ALLOCATION_OVERHEAD_BYTES * self.members.heap_keys()
            + self.members.table_bytes()
    }
}

impl Set {
    /// Checks the table's invariants and the payload byte count. O(n); for
    /// tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.members.check_invariants()?;
        let payload_bytes: usize = self.iter().map(<[u8]>::len).sum();
        if payload_bytes != self.payload_bytes {
            return Err(format!(
                "payload bytes {} recorded, {payload_bytes} held",
                self.payload_bytes
            ));
        }
        Ok(())
    }
}

impl FromIterator<Box<[u8]>> for Set {
    /// Builds a set from members in any order, duplicates allowed (the
    /// result of SINTERSTORE, SDIFFSTORE...): sorted into iteration order and
    /// built in one pass, O(n log n).
    fn from_iter<I: IntoIterator<Item = Box<[u8]>>>(members: I) -> Self {
        let mut keys: Vec<HashedKey> = members.into_iter().map(hashed::key_of).collect();
        keys.sort_unstable();
        keys.dedup();
        Set::from_sorted(keys)
    }
}

impl std::fmt::Debug for Set {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_set() {
        let mut set = Set::new();
        assert!(set.is_empty());
        assert!(!set.contains(b""));
        assert!(!set.remove(b"x"));
        assert_eq!(set.pop_random(&mut rand::rng()), None);
        assert_eq!(set.scan(0, 5), (0, vec![]));
    }

    #[test]
    fn insert_twice_counts_once() {
        let mut set = Set::new();
        assert!(set.insert(b"m".as_slice().into()));
        assert!(!set.insert(b"m".as_slice().into()));
        assert_eq!(set.len(), 1);
        assert_eq!(set.payload_bytes, 1);
        assert_eq!(set.sample(2, &mut rand::rng()), vec![&b"m"[..]]);
    }

    #[test]
    fn collecting_sorts_and_dedups() {
        let members = ["b", "a", "c", "a", "b"].map(|m| Box::<[u8]>::from(m.as_bytes()));
        let set: Set = members.into_iter().collect();
        assert_eq!(set.len(), 3);
        assert_eq!(set.payload_bytes, 3);
        set.check_invariants().unwrap();
        let mut inserted = Set::new();
        for m in ["c", "b", "a"] {
            inserted.insert(m.as_bytes().into());
        }
        assert_eq!(set, inserted);
        let empty: Set = std::iter::empty().collect();
        assert!(empty.is_empty());
    }

    #[test]
    fn the_estimate_charges_an_allocation_only_to_members_too_long_for_their_slots() {
        let mut set = Set::new();
        set.insert(b"short".as_slice().into());
        let table = set.members.table_bytes();
        assert_eq!(
            set.approx_heap_bytes(),
            table,
            "a short member lives in its slot"
        );
        let long = [b'x'; 40];
        set.insert(long.as_slice().into());
        assert_eq!(
            set.members.table_bytes(),
            table,
            "no resize for two members"
        );
        assert_eq!(
            set.approx_heap_bytes(),
            table + long.len() + hashed::ALLOCATION_OVERHEAD_BYTES
        );
        assert!(set.remove(&long));
        assert_eq!(set.approx_heap_bytes(), table);
    }

    #[test]
    fn pop_random_drains_every_member_once() {
        let mut set = Set::new();
        for i in 0..200u32 {
            set.insert(i.to_be_bytes().into());
        }
        let mut rng = rand::rng();
        let mut popped = Vec::new();
        while let Some(member) = set.pop_random(&mut rng) {
            popped.push(member);
        }
        popped.sort();
        popped.dedup();
        assert_eq!(popped.len(), 200);
        assert_eq!(set.payload_bytes, 0);
    }
}
