//! The workload: the operations, the keys, the values, and which key each
//! operation touches. Nothing here allocates per operation: keys are written
//! into a buffer the thread owns, values are slices of a pool built once.
//!
//! ## Which records each phase touches (Viper 5.3.1)
//!
//! Records are numbered. Prefill writes records `0..N`; insert writes the
//! fresh records `N..N+ops`, each thread a consecutive slice of its own; get
//! and update pick among the prefilled records `0..N` (uniform or zipfian);
//! delete removes the records insert wrote, each thread its own slice in a
//! scattered order, so every delete hits and the store ends where prefill
//! left it, with N records (which recovery is then checked against).

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use rand_distr::{Distribution as _, Zipf};

use crate::error::BenchError;

/// Keys carry the record number in their first 8 bytes, so shorter keys
/// could not tell every record apart.
pub const MIN_KEY_BYTES: usize = 8;
/// YCSB's zipfian constant, the skew the spec asks for.
pub const ZIPF_EXPONENT: f64 = 0.99;
/// The value pool holds at most this many distinct values...
const VALUE_POOL_MAX_VALUES: usize = 1024;
/// ...and at most this many bytes, so large values do not need a large pool.
const VALUE_POOL_MAX_BYTES: usize = 16 << 20;
/// Spreads record numbers over the 64-bit space (2^64 / golden ratio, odd,
/// so multiplying by it is a bijection).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A benchmark phase. `Prefill` loads the store; the other four are what
/// Viper measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Prefill,
    Insert,
    Get,
    Update,
    Delete,
}

impl Op {
    /// Every phase, in the order they run on one store (each needs the
    /// state the previous ones leave).
    pub const ALL: [Op; 5] = [Op::Prefill, Op::Insert, Op::Get, Op::Update, Op::Delete];

    pub fn name(self) -> &'static str {
        match self {
            Op::Prefill => "prefill",
            Op::Insert => "insert",
            Op::Get => "get",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    Uniform,
    /// Zipfian with s = 0.99, hot keys scattered over the key space.
    Zipfian,
}

impl std::str::FromStr for Distribution {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, BenchError> {
        match s {
            "uniform" => Ok(Distribution::Uniform),
            "zipfian" => Ok(Distribution::Zipfian),
            other => Err(BenchError::UnknownName {
                what: "distribution",
                name: other.into(),
                expected: "uniform or zipfian",
            }),
        }
    }
}

impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
        })
    }
}

/// Writes the key of record `id` into `key`, whose length is the key size:
/// the record number big-endian (so consecutive records have consecutive
/// keys, as in Viper's inserts), then bytes mixed from it to fill the rest.
#[inline]
pub fn fill_key(id: u64, key: &mut [u8]) {
    debug_assert!(key.len() >= MIN_KEY_BYTES);
    key[..8].copy_from_slice(&id.to_be_bytes());
    let mixed = id.wrapping_mul(GOLDEN_GAMMA).to_le_bytes();
    for (i, byte) in key[8..].iter_mut().enumerate() {
        *byte = mixed[i % 8];
    }
}

/// Values of one size: a pool of random (incompressible) values built once,
/// the value of a record chosen from it by record number and version. Within
/// any run of 1024 consecutive records no two share a value, so no store can
/// profit from duplicates a real data set would not have.
pub struct ValuePool {
    bytes: Vec<u8>,
    value_bytes: usize,
    count: u64,
}

impl ValuePool {
    pub fn new(value_bytes: usize, seed: u64) -> ValuePool {
        let count = (VALUE_POOL_MAX_BYTES / value_bytes.max(1)).clamp(1, VALUE_POOL_MAX_VALUES);
        let mut bytes = vec![0u8; count * value_bytes];
        SmallRng::seed_from_u64(seed).fill_bytes(&mut bytes);
        ValuePool {
            bytes,
            value_bytes,
            count: count as u64,
        }
    }

    /// The value of record `id` at `version` (prefill and insert write
    /// version 0, update version 1, so an update changes the stored bytes).
    #[inline]
    pub fn value(&self, id: u64, version: u64) -> &[u8] {
        let slot = (id.wrapping_add(version.wrapping_mul(GOLDEN_GAMMA)) % self.count) as usize;
        &self.bytes[slot * self.value_bytes..(slot + 1) * self.value_bytes]
    }

    pub fn value_bytes(&self) -> usize {
        self.value_bytes
    }
}

/// Picks records among `0..records` for get and update.
pub struct KeyChooser {
    rng: SmallRng,
    records: u64,
    zipf: Option<Zipf<f64>>,
}

impl KeyChooser {
    pub fn new(distribution: Distribution, records: u64, seed: u64) -> KeyChooser {
        assert!(records > 0, "choosing among no records");
        KeyChooser {
            rng: SmallRng::seed_from_u64(seed),
            records,
            zipf: (distribution == Distribution::Zipfian)
                .then(|| Zipf::new(records as f64, ZIPF_EXPONENT).expect("records > 0, s > 0")),
        }
    }

    #[inline]
    pub fn next_id(&mut self) -> u64 {
        match &self.zipf {
            None => self.rng.random_range(0..self.records),
            Some(zipf) => {
                // Rank 1 is the hottest. Scatter ranks over the records so
                // hot keys are not neighbours (YCSB's scrambled zipfian): in
                // a sorted store, neighbours would share blocks and caches.
                let rank = zipf.sample(&mut self.rng) as u64 - 1;
                rank.wrapping_mul(GOLDEN_GAMMA) % self.records
            }
        }
    }
}

/// The records thread `thread` of `threads` works on when each takes a
/// disjoint, consecutive slice of `start..start + count`.
pub fn slice(start: u64, count: u64, thread: usize, threads: usize) -> std::ops::Range<u64> {
    assert!(thread < threads);
    let per_thread = count / threads as u64;
    let from = start + per_thread * thread as u64;
    let to = if thread + 1 == threads {
        start + count
    } else {
        from + per_thread
    };
    from..to
}

/// Every record of `range` once, in a scattered order: steps of a stride
/// near `len / golden ratio` that shares no factor with `len`. Deletes use it
/// so they do not walk the key order (which would flatter sorted stores),
/// without a shuffled list that would cost 8 bytes per record.
#[derive(Clone, Debug)]
pub struct Scattered {
    start: u64,
    len: u64,
    stride: u64,
    position: u64,
    remaining: u64,
}

impl Scattered {
    pub fn new(range: std::ops::Range<u64>) -> Scattered {
        let len = range.end.saturating_sub(range.start);
        let mut stride = ((len as f64 / 1.618_033_988_749_895) as u64).max(1);
        while len > 1 && gcd(stride, len) != 1 {
            stride += 1;
        }
        Scattered {
            start: range.start,
            len,
            stride: if len > 0 { stride % len } else { 0 },
            position: 0,
            remaining: len,
        }
    }
}

impl Iterator for Scattered {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let id = self.start + self.position;
        // position and stride are below len, so the sum cannot overflow.
        self.position += self.stride;
        if self.position >= self.len {
            self.position -= self.len;
        }
        Some(id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let remaining = self.remaining as usize;
        (remaining, Some(remaining))
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn keys_are_deterministic_and_distinct() {
        let mut seen = HashSet::new();
        for id in 0..20_000 {
            let mut key = [0u8; 16];
            fill_key(id, &mut key);
            let mut again = [0xAAu8; 16];
            fill_key(id, &mut again);
            assert_eq!(key, again, "record {id}");
            assert!(seen.insert(key), "record {id} collides");
        }
        let mut short = [0u8; MIN_KEY_BYTES];
        fill_key(u64::MAX, &mut short);
        assert_eq!(short, u64::MAX.to_be_bytes());
    }

    #[test]
    fn thread_slices_are_disjoint_and_cover_the_range() {
        for threads in [1, 2, 3, 7] {
            let covered: Vec<u64> = (0..threads)
                .flat_map(|thread| slice(100, 1000, thread, threads))
                .collect();
            assert_eq!(
                covered,
                (100..1100).collect::<Vec<_>>(),
                "{threads} threads"
            );
        }
        // Keys of different threads never meet, whichever phase made them.
        let mut keys = HashSet::new();
        for thread in 0..4 {
            for id in slice(0, 4000, thread, 4) {
                let mut key = [0u8; 16];
                fill_key(id, &mut key);
                assert!(keys.insert(key));
            }
        }
    }

    #[test]
    fn scattered_order_visits_every_record_once() {
        for len in [0u64, 1, 2, 3, 10, 1000, 4096, 99_991] {
            let order: Vec<u64> = Scattered::new(500..500 + len).collect();
            assert_eq!(order.len() as u64, len);
            let distinct: HashSet<u64> = order.iter().copied().collect();
            assert_eq!(distinct.len() as u64, len, "len {len}");
            assert!(order.iter().all(|id| (500..500 + len).contains(id)));
            if len >= 10 {
                assert_ne!(order[1], order[0] + 1, "len {len} walks the key order");
            }
        }
    }

    #[test]
    fn zipfian_stays_in_range_and_is_skewed() {
        let records = 1000;
        let mut chooser = KeyChooser::new(Distribution::Zipfian, records, 7);
        let mut counts = vec![0u32; records as usize];
        for _ in 0..100_000 {
            let id = chooser.next_id();
            assert!(id < records, "{id} out of range");
            counts[id as usize] += 1;
        }
        counts.sort_unstable();
        assert!(
            counts[999] > 50 * counts[500].max(1),
            "the hottest key should dominate the median one"
        );
    }

    #[test]
    fn uniform_stays_in_range_and_covers_it() {
        let mut chooser = KeyChooser::new(Distribution::Uniform, 100, 1);
        let seen: HashSet<u64> = (0..10_000).map(|_| chooser.next_id()).collect();
        assert_eq!(seen.len(), 100);
        assert!(seen.iter().all(|id| *id < 100));
    }

    #[test]
    fn values_have_the_size_asked_and_updates_change_them() {
        for value_bytes in [1, 200, 4096, 1 << 20] {
            let pool = ValuePool::new(value_bytes, 3);
            assert_eq!(pool.value(12345, 0).len(), value_bytes);
            if pool.count > 1 {
                assert_ne!(pool.value(12345, 0), pool.value(12345, 1));
                assert_ne!(pool.value(1, 0), pool.value(2, 0));
            }
        }
        assert_eq!(
            ValuePool::new(200, 3).value(9, 0),
            ValuePool::new(200, 3).value(9, 0)
        );
    }
}
