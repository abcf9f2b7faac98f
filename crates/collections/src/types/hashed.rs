//! Keys ordered by hash, shared by [`Hash`](super::Hash) and
//! [`Set`](super::Set).
//!
//! Both store their entries in a [`RankedMap`] keyed by `(xxh3-64(bytes),
//! bytes)`. Ordering by hash first is what makes SCAN work without a rehash
//! table: a cursor is just a hash value, and "every entry with hash >= cursor
//! not yet returned" is a contiguous range of the tree whatever was inserted
//! or removed since the last call. Ordering by the bytes second keeps lookups
//! O(log n) even if many fields share a hash, so colliding fields cost
//! nothing but larger SCAN batches.
//!
//! The hash is unseeded on purpose: checkpoint images store entries in this
//! order and the decoder checks it, so the order must be the same in every
//! process.

use super::ranked::RankedMap;

/// The tree key of a field or member.
pub(crate) type HashedKey = (u64, Box<[u8]>);

/// The hash that orders a field or member.
pub(crate) fn hash_of(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// The tree key for `bytes`, owning a copy.
pub(crate) fn key_of(bytes: Box<[u8]>) -> HashedKey {
    (hash_of(&bytes), bytes)
}

/// A batch of one SCAN step over `map`; see [`Hash::scan`](super::Hash::scan)
/// for the contract.
pub(crate) fn scan<V>(
    map: &RankedMap<HashedKey, V>,
    cursor: u64,
    count: usize,
) -> (u64, Vec<(&[u8], &V)>) {
    let count = count.max(1);
    let start = map.partition_rank(|(hash, _)| *hash < cursor);
    let mut entries = map.iter_from_rank(start).peekable();
    let mut batch = Vec::with_capacity(count.min(map.len() - start.min(map.len())));
    let mut last_hash = None;
    while let Some(((hash, bytes), val)) = entries.next() {
        batch.push((&bytes[..], val));
        last_hash = Some(*hash);
        // Never end a batch inside a run of equal hashes: the next cursor is
        // "last hash + 1", so the rest of the run would be skipped.
        let run_continues = matches!(entries.peek(), Some(((next, _), _)) if *next == *hash);
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

/// A uniformly random rank below `len`, or `None` when `len` is 0.
pub(crate) fn random_rank<R: rand::Rng + ?Sized>(len: usize, rng: &mut R) -> Option<usize> {
    (len > 0).then(|| rng.random_range(0..len))
}

/// Allowance for the allocator's header and rounding per boxed byte string:
/// glibc malloc on 64-bit adds an 8-byte header and rounds to 16 bytes, so
/// about 16 on average. An estimate, not a measurement (empty boxes allocate
/// nothing but are counted anyway).
pub(crate) const ALLOCATION_OVERHEAD_BYTES: usize = 16;

/// Heap bytes of the tree structure for `len` entries of `entry_bytes` inline
/// size each. Nodes are between half and completely full after splits and
/// merges (about 70 % on random inserts), and `Vec` capacity rounds up, so
/// the inline part is counted 1.5 times; each leaf (~22 entries) also costs
/// its parent a separator, a child slot and a count, about 5 bytes per entry
/// for small keys, which is within that margin.
pub(crate) fn tree_bytes(len: usize, entry_bytes: usize) -> usize {
    len * entry_bytes * 3 / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map with chosen hashes, since real xxh3 collisions are hard to find.
    fn map(keys: &[(u64, &str)]) -> RankedMap<HashedKey, ()> {
        keys.iter()
            .map(|(hash, bytes)| ((*hash, bytes.as_bytes().into()), ()))
            .collect()
    }

    fn names(batch: &[(&[u8], &())]) -> Vec<String> {
        batch
            .iter()
            .map(|(bytes, _)| String::from_utf8_lossy(bytes).into_owned())
            .collect()
    }

    #[test]
    fn a_batch_never_splits_equal_hashes() {
        let map = map(&[(3, "a"), (5, "b"), (5, "c"), (5, "d"), (9, "e")]);
        let (next, batch) = scan(&map, 0, 2);
        assert_eq!(names(&batch), vec!["a", "b", "c", "d"]);
        assert_eq!(next, 6);
        let (next, batch) = scan(&map, next, 2);
        assert_eq!(names(&batch), vec!["e"]);
        assert_eq!(next, 0);
    }

    #[test]
    fn a_cursor_between_hashes_starts_at_the_next_one() {
        let map = map(&[(3, "a"), (5, "b"), (9, "e")]);
        let (next, batch) = scan(&map, 4, 1);
        assert_eq!(names(&batch), vec!["b"]);
        assert_eq!(next, 6);
        assert_eq!(scan(&map, 10, 1), (0, vec![]));
    }

    #[test]
    fn the_largest_hash_ends_the_scan_instead_of_overflowing() {
        let map = map(&[(u64::MAX - 1, "a"), (u64::MAX, "b"), (u64::MAX, "c")]);
        let (next, batch) = scan(&map, u64::MAX - 1, 1);
        assert_eq!(names(&batch), vec!["a"]);
        assert_eq!(next, u64::MAX);
        let (next, batch) = scan(&map, next, 1);
        assert_eq!(names(&batch), vec!["b", "c"]);
        assert_eq!(next, 0);
    }

    #[test]
    fn count_zero_is_treated_as_one() {
        let map = map(&[(1, "a"), (2, "b")]);
        let (next, batch) = scan(&map, 0, 0);
        assert_eq!(names(&batch), vec!["a"]);
        assert_eq!(next, 2);
    }
}
