//! `maxmemory`: the limit, its policy, and what "used memory" is. Once the
//! server uses more memory than the limit, every command first evicts
//! keys as the policy says (`eviction`); when nothing can be evicted
//! (`noeviction`, or a `volatile-*` policy with no key that expires), the
//! commands that may grow the data (Redis's "denyoom" commands: SET,
//! LPUSH, SADD, ...) are refused with Redis's OOM error, and reads and
//! deletions go on.
//!
//! "Used memory" ([`usage`]) is what the dataset costs on both sides of
//! Engram's split: the DRAM the allocator holds (`engram_memory`; the
//! resident size where that is not installed) plus the live persistent
//! data. It is measured before every command when the counting allocator
//! is installed (`used_now` is then one atomic load and a sum of striped
//! counters), as Redis reads its allocator's count: a command right after
//! one that went over the limit evicts (and a tracking client hears of the
//! eviction before that command's reply). Without the counting allocator
//! it is sampled at most every 100 ms (the resident size is read from
//! /proc). Not at all while there is no limit.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// How long a sample of used memory stands: see the module docs.
fn sample_every() -> Duration {
    if engram_memory::allocated().is_some() {
        Duration::ZERO
    } else {
        Duration::from_millis(100)
    }
}

/// `maxmemory-policy`: which keys go when memory runs over the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    NoEviction,
    AllKeysLru,
    AllKeysLfu,
    AllKeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
}

impl Policy {
    pub const ALL: [Policy; 8] = [
        Policy::NoEviction,
        Policy::AllKeysLru,
        Policy::AllKeysLfu,
        Policy::AllKeysRandom,
        Policy::VolatileLru,
        Policy::VolatileLfu,
        Policy::VolatileRandom,
        Policy::VolatileTtl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::NoEviction => "noeviction",
            Policy::AllKeysLru => "allkeys-lru",
            Policy::AllKeysLfu => "allkeys-lfu",
            Policy::AllKeysRandom => "allkeys-random",
            Policy::VolatileLru => "volatile-lru",
            Policy::VolatileLfu => "volatile-lfu",
            Policy::VolatileRandom => "volatile-random",
            Policy::VolatileTtl => "volatile-ttl",
        }
    }

    pub fn parse(name: &str) -> Option<Policy> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Only keys with an expiry time may go.
    pub fn is_volatile(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }

    /// The keys' access fields hold LFU counters (else LRU clocks).
    pub fn is_lfu(self) -> bool {
        matches!(self, Policy::AllKeysLfu | Policy::VolatileLfu)
    }

    pub fn is_random(self) -> bool {
        matches!(self, Policy::AllKeysRandom | Policy::VolatileRandom)
    }
}

pub struct MemoryLimit {
    /// Bytes; 0: no limit.
    pub limit: AtomicU64,
    used: AtomicU64,
    /// When `used` was sampled, in ms since `epoch`.
    sampled_at_ms: AtomicU64,
    epoch: Instant,
    /// `Policy::ALL`'s index of the policy in force.
    policy: AtomicU8,
    /// `maxmemory-samples`.
    pub samples: AtomicU32,
    /// `maxmemory-eviction-tenacity` (0..=100).
    pub tenacity: AtomicU32,
}

impl Default for MemoryLimit {
    fn default() -> Self {
        MemoryLimit {
            limit: AtomicU64::new(0),
            used: AtomicU64::new(0),
            sampled_at_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            policy: AtomicU8::new(0),
            samples: AtomicU32::new(5),
            tenacity: AtomicU32::new(10),
        }
    }
}

impl MemoryLimit {
    /// Whether a limit is set: the one check on every command while
    /// there is none.
    pub fn is_set(&self) -> bool {
        self.limit.load(Ordering::Relaxed) != 0
    }

    /// Whether a command that may grow the data must be refused now;
    /// `sample` measures the used memory when the last sample is stale.
    pub fn over(&self, sample: impl FnOnce() -> u64) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        if limit == 0 {
            return false;
        }
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.sampled_at_ms.load(Ordering::Relaxed);
        let stale = now.saturating_sub(last) >= sample_every().as_millis() as u64 || last == 0;
        // One caller resamples; the others use the sample they find.
        if stale
            && self
                .sampled_at_ms
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.used.store(sample(), Ordering::Relaxed);
        }
        self.used.load(Ordering::Relaxed) > limit
    }

    /// A new limit takes effect with a fresh sample.
    pub fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Relaxed);
        self.sampled_at_ms.store(0, Ordering::Relaxed);
    }

    /// Records a measurement taken meanwhile (after evicting), so the next
    /// check does not act on a sample the eviction made stale.
    pub fn record(&self, used: u64) {
        self.used.store(used, Ordering::Relaxed);
        let now = self.epoch.elapsed().as_millis() as u64;
        self.sampled_at_ms.store(now.max(1), Ordering::Relaxed);
    }

    pub fn policy(&self) -> Policy {
        Policy::ALL[self.policy.load(Ordering::Relaxed) as usize]
    }

    pub fn set_policy(&self, policy: Policy) {
        let index = Policy::ALL
            .iter()
            .position(|p| *p == policy)
            .expect("listed");
        self.policy.store(index as u8, Ordering::Relaxed);
    }
}

/// The memory the dataset uses, in parts.
pub struct Usage {
    /// Held through the allocator (or resident, without the counter).
    pub dram: u64,
    /// Live records in the persistent data file.
    pub persistent_live: u64,
    /// The process's resident size.
    pub rss: u64,
}

impl Usage {
    pub fn used(&self) -> u64 {
        self.dram + self.persistent_live
    }
}

pub fn usage(keyspace: &crate::keyspace::Keyspace) -> Usage {
    let rss = resident_bytes();
    Usage {
        dram: engram_memory::allocated().unwrap_or(rss),
        persistent_live: keyspace.store().live_bytes(),
        rss,
    }
}

/// `usage(keyspace).used()` without reading the resident size when the
/// allocator counts (eviction measures after every key it deletes).
pub fn used_now(keyspace: &crate::keyspace::Keyspace) -> u64 {
    let dram = engram_memory::allocated().unwrap_or_else(resident_bytes);
    dram + keyspace.store().live_bytes()
}

/// Resident memory of this process, from /proc/self/statm.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}
