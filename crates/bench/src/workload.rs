//! Keys, values and key choice. Nothing here allocates per operation.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution as _, Zipf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    Uniform,
    /// Zipfian with s = 0.99 (YCSB's constant), hot keys scattered.
    Zipfian,
}

impl std::str::FromStr for Distribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(Distribution::Uniform),
            "zipfian" => Ok(Distribution::Zipfian),
            other => Err(format!(
                "unknown distribution '{other}' (expected uniform or zipfian)"
            )),
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

/// Writes the key of record `id` into `key` (its length is the key size):
/// the id big-endian, then a mix of it, repeated to fill. Distinct ids give
/// distinct keys for any key size of 8 bytes or more.
#[inline]
pub fn fill_key(id: u64, key: &mut [u8]) {
    let mixed = id.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes();
    let head = id.to_be_bytes();
    let n = key.len().min(8);
    key[..n].copy_from_slice(&head[8 - n..]);
    for (i, byte) in key[n..].iter_mut().enumerate() {
        *byte = mixed[i % 8];
    }
}

/// A deterministic value whose first byte varies with `version`, so that an
/// update really changes the stored bytes.
pub fn value(value_bytes: usize, version: u8) -> Vec<u8> {
    (0..value_bytes)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(version))
        .collect()
}

/// Picks ids of existing records.
pub struct KeyChooser {
    rng: SmallRng,
    records: u64,
    zipf: Option<Zipf<f64>>,
}

impl KeyChooser {
    pub fn new(distribution: Distribution, records: u64, seed: u64) -> KeyChooser {
        KeyChooser {
            rng: SmallRng::seed_from_u64(seed),
            records,
            zipf: (distribution == Distribution::Zipfian)
                .then(|| Zipf::new(records as f64, 0.99).expect("zipf parameters")),
        }
    }

    #[inline]
    pub fn next_id(&mut self) -> u64 {
        match &self.zipf {
            None => self.rng.random_range(0..self.records),
            Some(zipf) => {
                // Rank 1 is the hottest; scatter ranks over the key space so
                // hot keys are not neighbours (YCSB's scrambled zipfian).
                let rank = zipf.sample(&mut self.rng) as u64 - 1;
                rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % self.records
            }
        }
    }
}

/// The ids thread `thread` of `threads` works on when each takes a disjoint,
/// consecutive slice of `[start, start + count)` (Viper's inserts).
pub fn slice(start: u64, count: u64, thread: usize, threads: usize) -> std::ops::Range<u64> {
    let per = count / threads as u64;
    let from = start + per * thread as u64;
    let to = if thread + 1 == threads {
        start + count
    } else {
        from + per
    };
    from..to
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_deterministic() {
        let mut seen = std::collections::HashSet::new();
        for id in 0..10_000 {
            let mut key = [0u8; 16];
            fill_key(id, &mut key);
            let mut again = [0u8; 16];
            fill_key(id, &mut again);
            assert_eq!(key, again);
            assert!(seen.insert(key));
        }
    }

    #[test]
    fn slices_are_disjoint_and_cover_the_range() {
        let mut covered = Vec::new();
        for thread in 0..3 {
            covered.extend(slice(100, 1000, thread, 3));
        }
        assert_eq!(covered, (100..1100).collect::<Vec<_>>());
    }

    #[test]
    fn zipfian_stays_in_range_and_is_skewed() {
        let mut chooser = KeyChooser::new(Distribution::Zipfian, 1000, 7);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[chooser.next_id() as usize] += 1;
        }
        counts.sort_unstable();
        assert!(
            counts[999] > 50 * counts[500].max(1),
            "hottest key should dominate the median one"
        );
    }
}
