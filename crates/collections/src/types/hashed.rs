//! Keys ordered by hash, shared by [`Hash`](super::Hash),
//! [`Set`](super::Set) and a [`SortedSet`](super::SortedSet)'s members.
//!
//! All three keep their members in a [`HashedMap`](super::hashed_map), in
//! `(hash(bytes), bytes)` order. Ordering by hash first is what makes SCAN
//! work without a rehash table: a cursor is just a hash value, and "every
//! entry with hash >= cursor not yet returned" is a contiguous range of the
//! table whatever was inserted or removed since the last call. Ordering by
//! the bytes second keeps colliding members apart, at the cost of larger
//! SCAN batches.
//!
//! The hash is xxh3-64 seeded once per process at random, as Redis seeds
//! its dictionaries' SipHash: members a client chooses cannot be made to
//! share a home slot, and a SCAN cursor is meaningful only to the process
//! that issued it (as in Redis). A member of a replication group fixes the
//! seed at 0 ([`fix_seed`]) so that every member iterates alike (a script
//! replayed on each one reads SMEMBERS in the same order). Images are
//! written in this order; the decoder takes them in any order (an image
//! from another process is in that process's order) and builds in O(n)
//! when the order is already its own.

use std::sync::OnceLock;

/// This process's hash seed: random unless fixed before the first hash.
static SEED: OnceLock<u64> = OnceLock::new();

/// Fixes the hash seed before any member is hashed: the members of a
/// replication group must order (and so iterate, scan and pick by rank)
/// alike. True when the seed is `seed` afterwards.
pub fn fix_seed(seed: u64) -> bool {
    *SEED.get_or_init(|| seed) == seed
}

/// The hash that orders and finds a field or member.
pub(crate) fn hash_of(bytes: &[u8]) -> u64 {
    #[cfg(test)]
    if let Some(hash) = forced::hash(bytes) {
        return hash;
    }
    xxhash_rust::xxh3::xxh3_64_with_seed(bytes, *SEED.get_or_init(rand::random))
}

/// A field or member with its hash, as images are decoded and built.
pub(crate) type HashedKey = (u64, Box<[u8]>);

/// `bytes` with its hash.
pub(crate) fn key_of(bytes: Box<[u8]>) -> HashedKey {
    (hash_of(&bytes), bytes)
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

/// Tests choose the hash function, to make collisions and crowded homes
/// that xxh3 would never produce.
#[cfg(test)]
pub(crate) mod forced {
    use std::cell::Cell;

    type HashFn = fn(&[u8]) -> u64;

    thread_local! {
        static FORCED: Cell<Option<HashFn>> = const { Cell::new(None) };
    }

    pub(crate) fn hash(bytes: &[u8]) -> Option<u64> {
        FORCED.with(|forced| forced.get()).map(|hash| hash(bytes))
    }

    /// Runs `body` with `hash` as this thread's hash function.
    pub(crate) fn with<T>(hash: fn(&[u8]) -> u64, body: impl FnOnce() -> T) -> T {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                FORCED.with(|forced| forced.set(None));
            }
        }
        FORCED.with(|forced| forced.set(Some(hash)));
        let _reset = Reset;
        body()
    }
}
