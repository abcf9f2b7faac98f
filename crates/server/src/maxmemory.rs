//! `maxmemory` under the `noeviction` policy: once the server uses more
//! memory than the limit, the commands that may grow the data (Redis's
//! "denyoom" commands: SET, LPUSH, SADD, ...) are refused with Redis's OOM
//! error, and reads and deletions go on. Eviction (the LRU, LFU, random
//! and TTL policies) is still to come, so those policies are refused by
//! CONFIG (`redis_params`).
//!
//! "Used memory" ([`usage`]) is what the dataset costs on both sides of
//! Engram's split: the DRAM the allocator holds (`engram_memory`; the
//! resident size where that is not installed) plus the live persistent
//! data. It is sampled at most every `SAMPLE_EVERY` on the request path (a
//! limit is a threshold crossed over time, not per byte), and not at all
//! while there is no limit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Redis 7.0's commands flagged `denyoom`, as Engram names them.
pub const DENYOOM: &[&str] = &[
    "append",
    "bitfield",
    "bitop",
    "blmove",
    "brpoplpush",
    "copy",
    "decr",
    "decrby",
    "geoadd",
    "georadius",
    "georadiusbymember",
    "geosearchstore",
    "getset",
    "hincrby",
    "hincrbyfloat",
    "hmset",
    "hset",
    "hsetnx",
    "incr",
    "incrby",
    "incrbyfloat",
    "linsert",
    "lmove",
    "lpush",
    "lpushx",
    "lset",
    "mset",
    "msetnx",
    "pfadd",
    "pfdebug",
    "pfmerge",
    "psetex",
    "restore",
    "rpoplpush",
    "rpush",
    "rpushx",
    "sadd",
    "sdiffstore",
    "set",
    "setbit",
    "setex",
    "setnx",
    "setrange",
    "sinterstore",
    "sort",
    "sunionstore",
    "zadd",
    "zdiffstore",
    "zincrby",
    "zinterstore",
    "zrangestore",
    "zunionstore",
];

pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

const SAMPLE_EVERY: Duration = Duration::from_millis(100);

pub struct MemoryLimit {
    /// Bytes; 0: no limit.
    pub limit: AtomicU64,
    used: AtomicU64,
    /// When `used` was sampled, in ms since `epoch`.
    sampled_at_ms: AtomicU64,
    epoch: Instant,
}

impl Default for MemoryLimit {
    fn default() -> Self {
        MemoryLimit {
            limit: AtomicU64::new(0),
            used: AtomicU64::new(0),
            sampled_at_ms: AtomicU64::new(0),
            epoch: Instant::now(),
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
        let stale = now.saturating_sub(last) >= SAMPLE_EVERY.as_millis() as u64 || last == 0;
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

pub fn usage(shared: &crate::shared::Shared) -> Usage {
    let rss = resident_bytes();
    Usage {
        dram: engram_memory::allocated().unwrap_or(rss),
        persistent_live: shared.keyspace.store().stats().live_bytes,
        rss,
    }
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
