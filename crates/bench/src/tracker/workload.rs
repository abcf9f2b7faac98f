//! The three store patterns, and the stores they go through.
//!
//! Each writer thread owns one slice of the region (`len / threads` bytes,
//! in whole 256-byte slots) and stores only there, so 256-byte writes never
//! overlap (the pmem crate's one-writer-per-range contract).
//!
//! - `rand8`: an atomic 8-byte store at a uniformly random aligned word.
//! - `rand256`: a 256-byte write at a uniformly random 256-byte slot.
//! - `seq256`: 256-byte appends, slot after slot, wrapping at the slice end.
//!
//! Random positions come from xorshift64* (a few instructions, no memory),
//! mapped to a range by multiply-shift rather than a division.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use engram_pmem::{PmemOffset, Region};
use serde::Serialize;

use super::memory::Mapping;

/// The size of a `rand256` / `seq256` write.
pub const WRITE_BYTES: u64 = 256;
/// Stores between two looks at the stop flag.
const BATCH: u64 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Workload {
    #[serde(rename = "rand8")]
    Random8,
    #[serde(rename = "rand256")]
    Random256,
    #[serde(rename = "seq256")]
    Append256,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Random8, Workload::Random256, Workload::Append256];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Random8 => "rand8",
            Workload::Random256 => "rand256",
            Workload::Append256 => "seq256",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Workload::Random8 => "random 8-byte stores",
            Workload::Random256 => "random 256-byte writes",
            Workload::Append256 => "sequential 256-byte appends",
        }
    }
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(name: &str) -> Result<Self, String> {
        Workload::ALL
            .into_iter()
            .find(|workload| workload.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("unknown workload '{name}' (expected rand8, rand256 or seq256)"))
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the writers' stores go: a plain mapping, or Engram's Region (with
/// or without a tracker installed).
pub trait Stores: Sync {
    fn store_u64(&self, offset: u64, value: u64);
    fn write(&self, offset: u64, bytes: &[u8]);
}

impl Stores for Mapping {
    #[inline]
    fn store_u64(&self, offset: u64, value: u64) {
        Mapping::store_u64(self, offset, value);
    }
    #[inline]
    fn write(&self, offset: u64, bytes: &[u8]) {
        Mapping::write(self, offset, bytes);
    }
}

impl Stores for Region {
    #[inline]
    fn store_u64(&self, offset: u64, value: u64) {
        Region::store_u64(self, PmemOffset(offset), value);
    }
    #[inline]
    fn write(&self, offset: u64, bytes: &[u8]) {
        Region::write(self, PmemOffset(offset), bytes);
    }
}

/// The slice of `len` bytes that thread `thread` of `threads` owns.
pub fn slice(len: u64, threads: usize, thread: usize) -> Range<u64> {
    let slots = len / WRITE_BYTES;
    let per_thread = slots / threads as u64;
    let start = per_thread * thread as u64;
    start * WRITE_BYTES..(start + per_thread) * WRITE_BYTES
}

/// Runs `workload` over `slice` until `stop` is set; returns the stores made.
pub fn write_until_stopped<S: Stores + ?Sized>(
    stores: &S,
    workload: Workload,
    slice: Range<u64>,
    seed: u64,
    stop: &AtomicBool,
) -> u64 {
    let mut random = XorShift::new(seed);
    let mut ops = 0;
    let len = slice.end - slice.start;
    let mut buffer = [0xa5u8; WRITE_BYTES as usize];
    match workload {
        Workload::Random8 => {
            let words = len / 8;
            loop {
                for _ in 0..BATCH {
                    let value = random.next();
                    stores.store_u64(slice.start + below(value, words) * 8, value);
                }
                ops += BATCH;
                if stop.load(Ordering::Relaxed) {
                    return ops;
                }
            }
        }
        Workload::Random256 => {
            let slots = len / WRITE_BYTES;
            loop {
                for _ in 0..BATCH {
                    let value = random.next();
                    buffer[..8].copy_from_slice(&value.to_le_bytes());
                    stores.write(slice.start + below(value, slots) * WRITE_BYTES, &buffer);
                }
                ops += BATCH;
                if stop.load(Ordering::Relaxed) {
                    return ops;
                }
            }
        }
        Workload::Append256 => {
            let mut cursor = slice.start;
            loop {
                for _ in 0..BATCH {
                    buffer[..8].copy_from_slice(&ops.to_le_bytes());
                    stores.write(cursor, &buffer);
                    cursor += WRITE_BYTES;
                    if cursor + WRITE_BYTES > slice.end {
                        cursor = slice.start;
                    }
                }
                ops += BATCH;
                if stop.load(Ordering::Relaxed) {
                    return ops;
                }
            }
        }
    }
}

/// `value`'s high bits mapped onto `[0, n)` (multiply-shift).
#[inline]
fn below(value: u64, n: u64) -> u64 {
    ((value as u128 * n as u128) >> 64) as u64
}

/// xorshift64* (Vigna): enough randomness to scatter stores, and cheap.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    #[inline]
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_disjoint_whole_slots_inside_the_region() {
        let len = 64 << 20;
        for threads in 1..=5 {
            let slices: Vec<_> = (0..threads).map(|t| slice(len, threads, t)).collect();
            for pair in slices.windows(2) {
                assert!(pair[0].end <= pair[1].start);
            }
            for s in &slices {
                assert_eq!(s.start % WRITE_BYTES, 0);
                assert_eq!(s.end % WRITE_BYTES, 0);
                assert!(s.end <= len);
            }
        }
    }

    #[test]
    fn below_stays_below() {
        let mut random = XorShift::new(7);
        for _ in 0..10_000 {
            assert!(below(random.next(), 1000) < 1000);
        }
        assert_eq!(below(u64::MAX, 1), 0);
    }
}
