//! Per-key access tracking with Redis's semantics: what OBJECT IDLETIME
//! and OBJECT FREQ report and what the LRU and LFU eviction policies rank
//! keys by.
//!
//! Each key has a 24-bit field, as Redis's `robj.lru`: the engine keeps it
//! in its index entry's spare offset bits, the collections in their
//! `Entry` (see `engram_engine::index` and `engram_collections::state`).
//! Neither store persists it; a key recovered at startup has field 0.
//! Its meaning depends on the policy in force, as in Redis (switching
//! policies reinterprets the fields, which Redis warns "will take some
//! time to adjust"):
//!
//! * LRU (every non-LFU policy): the LRU clock when the key was last
//!   accessed, in seconds, wrapping at 2^24 (about 194 days).
//! * LFU: 16 bits of minutes when the counter was last decayed, then an
//!   8-bit logarithmic access counter that starts at `LFU_INIT_VAL` (5),
//!   grows with probability `1 / ((counter - 5) * lfu-log-factor + 1)` per
//!   access, and loses one per `lfu-decay-time` minutes without access.
//!
//! Both clocks count from the keyspace's opening rather than from the Unix
//! epoch, so that field 0 (a recovered key) means "accessed when the store
//! opened", as Redis's keys loaded from an RDB file are "accessed at load".
//! For the same reason the LFU counter is stored XORed with
//! `LFU_INIT_VAL`: a zero field reads as a new key's counter.
//!
//! The clock is not read on the request path: the keyspace calls
//! `observe(now_ms)` with the time each command already took, and the
//! cached second (Redis's clock ticks once a second too) changes a shared
//! word once a second at most. A touch stores the key's field only when
//! its value changes (see the stores' touch functions), so a hot key read
//! from two cores under LRU writes its cache line once a second.
//!
//! Commands Redis runs with `LOOKUP_NOTOUCH` (TYPE, TTL, EXISTS, OBJECT...)
//! and clients in CLIENT NO-TOUCH mode read without touching: the server
//! runs them inside [`without_touching`], a flag on the thread that runs
//! the command (handlers run synchronously), so every lookup the command
//! makes, however deep, sees it without a parameter through every layer.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// A new key's LFU counter (Redis's `LFU_INIT_VAL`).
pub const LFU_INIT_VAL: u8 = 5;
/// The LRU clock's largest value (it wraps to 0 after it).
pub const LRU_CLOCK_MAX: u32 = (1 << 24) - 1;

thread_local! {
    static NO_TOUCH: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with touching switched off on this thread when `on` (and as
/// it was otherwise): its reads leave access fields as they are.
pub fn without_touching<R>(on: bool, f: impl FnOnce() -> R) -> R {
    if !on {
        return f();
    }
    let before = NO_TOUCH.with(|flag| flag.replace(true));
    let result = f();
    NO_TOUCH.with(|flag| flag.set(before));
    result
}

fn touching() -> bool {
    !NO_TOUCH.with(Cell::get)
}

/// The policy-dependent meaning of the fields, and the clock.
pub struct AccessTracking {
    /// Wall-clock time (Unix ms) the clocks count from.
    opened_ms: u64,
    /// Whole seconds since `opened_ms`, as last observed.
    seconds: AtomicU64,
    lfu: AtomicBool,
    lfu_log_factor: AtomicU32,
    /// Minutes per step of decay (0: never decay).
    lfu_decay_time: AtomicU32,
}

impl AccessTracking {
    pub fn new(opened_ms: u64) -> AccessTracking {
        AccessTracking {
            opened_ms,
            seconds: AtomicU64::new(0),
            lfu: AtomicBool::new(false),
            lfu_log_factor: AtomicU32::new(10),
            lfu_decay_time: AtomicU32::new(1),
        }
    }

    /// Moves the clock to `now_ms` (Unix ms) if a second has passed.
    /// Never back: a wall clock stepped back holds it still.
    pub fn observe(&self, now_ms: u64) {
        let seconds = now_ms.saturating_sub(self.opened_ms) / 1000;
        if seconds > self.seconds.load(Ordering::Relaxed) {
            self.seconds.fetch_max(seconds, Ordering::Relaxed);
        }
    }

    /// Redis's `LRU_CLOCK()`.
    pub fn lru_clock(&self) -> u32 {
        (self.seconds.load(Ordering::Relaxed) & u64::from(LRU_CLOCK_MAX)) as u32
    }

    /// Redis's `LFUGetTimeInMinutes()`.
    fn minutes(&self) -> u32 {
        ((self.seconds.load(Ordering::Relaxed) / 60) & 0xffff) as u32
    }

    /// Whether the fields hold LFU counters (an `*-lfu` policy is set).
    pub fn is_lfu(&self) -> bool {
        self.lfu.load(Ordering::Relaxed)
    }

    /// The policy's family and the LFU parameters (CONFIG SET).
    pub fn configure(&self, lfu: bool, log_factor: u32, decay_time: u32) {
        self.lfu.store(lfu, Ordering::Relaxed);
        self.lfu_log_factor.store(log_factor, Ordering::Relaxed);
        self.lfu_decay_time.store(decay_time, Ordering::Relaxed);
    }

    /// The field after a read or write of the key (Redis's `lookupKey`):
    /// unchanged inside [`without_touching`].
    pub fn on_access(&self, old: u32) -> u32 {
        if !touching() {
            return old;
        }
        if self.is_lfu() {
            let counter = log_increment(
                self.decayed(old),
                self.lfu_log_factor.load(Ordering::Relaxed),
            );
            self.lfu_field(counter)
        } else {
            self.lru_clock()
        }
    }

    /// A new key's field (Redis's `createObject`).
    pub fn fresh(&self) -> u32 {
        if self.is_lfu() {
            self.lfu_field(LFU_INIT_VAL)
        } else {
            self.lru_clock()
        }
    }

    /// The field after a key's value is replaced: under LFU the counter
    /// stays (Redis's `dbOverwrite`; the lookup before the write counted
    /// the access), under LRU the new value is as fresh as the clock.
    pub fn on_overwrite(&self, old: u32) -> u32 {
        if self.is_lfu() {
            old
        } else {
            self.lru_clock()
        }
    }

    /// The field for a write: a new key's, or `old` overwritten.
    pub fn on_write(&self, old: Option<u32>) -> u32 {
        match old {
            None => self.fresh(),
            Some(old) => self.on_overwrite(old),
        }
    }

    /// Milliseconds since the key's last access, read as an LRU field
    /// (Redis's `estimateObjectIdleTime`, the clock wrapping).
    pub fn idle_ms(&self, field: u32) -> u64 {
        u64::from(self.lru_clock().wrapping_sub(field) & LRU_CLOCK_MAX) * 1000
    }

    /// The key's LFU counter after decay, read as an LFU field, without
    /// changing it (Redis's `LFUDecrAndReturn`; OBJECT FREQ).
    pub fn frequency(&self, field: u32) -> u8 {
        self.decayed(field)
    }

    /// The field RESTORE ... IDLETIME `seconds` sets (LRU): accessed that
    /// long ago (wrapping, so any idle time below the clock's period can
    /// be expressed however young the clock).
    pub fn field_for_idle(&self, seconds: u64) -> u32 {
        let back = (seconds.min(u64::from(LRU_CLOCK_MAX))) as u32;
        self.lru_clock().wrapping_sub(back) & LRU_CLOCK_MAX
    }

    /// The field RESTORE ... FREQ `counter` sets (LFU), stamped now.
    pub fn field_for_frequency(&self, counter: u8) -> u32 {
        self.lfu_field(counter)
    }

    /// How eagerly a key should go under the LRU or LFU policies: larger
    /// goes first (Redis's eviction pool's `idle`).
    pub fn eviction_score(&self, field: u32) -> u64 {
        if self.is_lfu() {
            255 - u64::from(self.frequency(field))
        } else {
            self.idle_ms(field)
        }
    }

    fn lfu_field(&self, counter: u8) -> u32 {
        (self.minutes() << 8) | u32::from(counter ^ LFU_INIT_VAL)
    }

    fn decayed(&self, field: u32) -> u8 {
        let counter = (field as u8) ^ LFU_INIT_VAL;
        let stamped = (field >> 8) & 0xffff;
        let decay_time = self.lfu_decay_time.load(Ordering::Relaxed);
        if decay_time == 0 {
            return counter;
        }
        let elapsed = self.minutes().wrapping_sub(stamped) & 0xffff;
        let periods = elapsed / decay_time;
        counter.saturating_sub(periods.min(255) as u8)
    }
}

/// One access's increment of a logarithmic counter: certain near the
/// initial value, rarer as the counter grows (Redis's `LFULogIncr`).
fn log_increment(counter: u8, log_factor: u32) -> u8 {
    if counter == u8::MAX {
        return counter;
    }
    let base = f64::from(counter.saturating_sub(LFU_INIT_VAL));
    let chance = 1.0 / (base * f64::from(log_factor) + 1.0);
    if rand::random::<f64>() < chance {
        counter + 1
    } else {
        counter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENED: u64 = 1_700_000_000_000;

    fn at(tracking: &AccessTracking, seconds: u64) {
        tracking.observe(OPENED + seconds * 1000 + 999);
    }

    #[test]
    fn a_recovered_key_reads_as_accessed_at_opening() {
        let lru = AccessTracking::new(OPENED);
        at(&lru, 42);
        assert_eq!(lru.idle_ms(0), 42_000);
        let lfu = AccessTracking::new(OPENED);
        lfu.configure(true, 10, 1);
        assert_eq!(lfu.frequency(0), LFU_INIT_VAL);
        assert_eq!(lfu.fresh() & 0xff, 0, "a new key's counter is stored as 0");
    }

    #[test]
    fn the_lru_clock_ticks_by_seconds_never_back_and_wraps() {
        let tracking = AccessTracking::new(OPENED);
        at(&tracking, 10);
        let field = tracking.on_access(0);
        assert_eq!(field, 10);
        tracking.observe(OPENED);
        assert_eq!(tracking.lru_clock(), 10, "never back");
        at(&tracking, 13);
        assert_eq!(tracking.idle_ms(field), 3000);
        // Past the 24-bit period the clock wraps, and idle time with it.
        at(&tracking, u64::from(LRU_CLOCK_MAX) + 5);
        assert_eq!(tracking.lru_clock(), 4);
        assert_eq!(tracking.idle_ms(LRU_CLOCK_MAX - 1), 6000);
    }

    #[test]
    fn idle_times_set_by_restore_read_back_even_on_a_young_clock() {
        let tracking = AccessTracking::new(OPENED);
        at(&tracking, 5);
        let field = tracking.field_for_idle(1000);
        assert!(field <= LRU_CLOCK_MAX);
        assert_eq!(tracking.idle_ms(field), 1_000_000);
        at(&tracking, 7);
        assert_eq!(tracking.idle_ms(field), 1_002_000);
    }

    #[test]
    fn lfu_counters_grow_logarithmically_and_decay_by_minutes() {
        let tracking = AccessTracking::new(OPENED);
        tracking.configure(true, 10, 1);
        let mut field = tracking.fresh();
        assert_eq!(tracking.frequency(field), 5);
        for _ in 0..100 {
            field = tracking.on_access(field);
        }
        let after_100 = tracking.frequency(field);
        // The step from 5 is certain; from 5 + k it takes 10k + 1 reads on
        // average, so n steps take about 5n² reads. The bounds sit far out in
        // the tails of that sum of geometric draws (the CI once drew 60 after
        // 10,100 reads, where the mean is about 50): 21 would need ~1,300
        // reads on average, 80 about 28,000 (σ ≈ 3,700).
        assert!((6..=20).contains(&after_100), "{after_100}");
        for _ in 0..10_000 {
            field = tracking.on_access(field);
        }
        let after_10k = tracking.frequency(field);
        assert!(after_10k > after_100 && after_10k < 80, "{after_10k}");
        // Three minutes idle: three steps down, without a touch.
        at(&tracking, 180);
        assert_eq!(tracking.frequency(field), after_10k - 3);
        // Decay never goes below zero; a decay time of 0 never decays.
        at(&tracking, 180 + 60 * 300);
        assert_eq!(tracking.frequency(field), 0);
        tracking.configure(true, 10, 0);
        assert_eq!(tracking.frequency(field), after_10k);
        // A counter at 255 stays there.
        assert_eq!(log_increment(255, 0), 255);
    }

    #[test]
    fn restore_frequencies_read_back() {
        let tracking = AccessTracking::new(OPENED);
        tracking.configure(true, 10, 1);
        for counter in [0, 5, 100, 255] {
            assert_eq!(
                tracking.frequency(tracking.field_for_frequency(counter)),
                counter
            );
        }
    }

    #[test]
    fn without_touching_leaves_fields_alone_and_nests() {
        let tracking = AccessTracking::new(OPENED);
        at(&tracking, 9);
        without_touching(true, || {
            assert_eq!(tracking.on_access(3), 3);
            without_touching(false, || assert_eq!(tracking.on_access(3), 3));
        });
        assert_eq!(tracking.on_access(3), 9);
    }

    #[test]
    fn writes_keep_lfu_counters_and_refresh_lru_clocks() {
        let tracking = AccessTracking::new(OPENED);
        at(&tracking, 20);
        assert_eq!(tracking.on_write(Some(3)), 20);
        assert_eq!(tracking.on_write(None), 20);
        tracking.configure(true, 10, 1);
        let hot = tracking.field_for_frequency(200);
        assert_eq!(tracking.on_write(Some(hot)), hot);
        assert_eq!(tracking.frequency(tracking.on_write(None)), LFU_INIT_VAL);
        // LFU ranks the rarely used first; LRU the long idle.
        assert!(tracking.eviction_score(tracking.fresh()) > tracking.eviction_score(hot));
    }
}
