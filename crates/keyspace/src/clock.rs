//! The time a command runs at, read from the clock once.
//!
//! A command needs the wall clock (expiry times are Unix milliseconds) and
//! a monotonic start for its duration (INFO commandstats, the slow log,
//! LATENCY). Reading both clocks for every command was two of the three
//! clock reads a GET paid (~5% of a GET's CPU at -P 16, the vDSO's
//! `clock_gettime` and the conversions). [`now`] reads the monotonic clock
//! only and derives the wall time from a per-thread pair of readings of
//! both clocks, taken again every [`REBASE`]: a step of the wall clock
//! (NTP, an operator) shows within that time, and between two bases the
//! derived time strays from the wall clock only by the two clocks' rate
//! difference (microseconds over 10 ms).

use std::cell::Cell;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a thread derives the wall time from one pair of readings.
pub const REBASE: Duration = Duration::from_millis(10);

/// The monotonic instant and the wall time in Unix milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Now {
    pub instant: Instant,
    pub unix_ms: u64,
}

thread_local! {
    /// This thread's last pair: (monotonic instant, Unix nanoseconds).
    static BASE: Cell<Option<(Instant, u64)>> = const { Cell::new(None) };
}

/// Unix nanoseconds in a u64 (enough until 2554): the derivation then
/// needs no 128-bit division on every command.
fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The time now, from one read of the monotonic clock (and, once per
/// [`REBASE`] on each thread, one of the wall clock).
pub fn now() -> Now {
    let instant = Instant::now();
    let (at, unix_ns) = BASE.with(|base| match base.get() {
        Some((at, unix_ns)) if instant.saturating_duration_since(at) < REBASE => (at, unix_ns),
        _ => {
            let fresh = (instant, unix_nanos());
            base.set(Some(fresh));
            fresh
        }
    });
    // Under REBASE since the base: the nanoseconds fit a u64 easily.
    let unix_ns = unix_ns + instant.saturating_duration_since(at).as_nanos() as u64;
    Now {
        instant,
        unix_ms: unix_ns / 1_000_000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_wall_time_keeps_to_the_wall_clock() {
        for _ in 0..200 {
            let before = crate::now_ms();
            let now = now();
            let after = crate::now_ms();
            // Within the millisecond either side: the base pair's two
            // reads are tens of nanoseconds apart, which may cross a
            // millisecond's edge.
            assert!(
                before <= now.unix_ms + 1 && now.unix_ms <= after + 1,
                "{before} <= {} <= {after}",
                now.unix_ms
            );
            std::thread::sleep(Duration::from_micros(300));
        }
    }

    #[test]
    fn the_base_is_taken_again_after_rebase() {
        let first = now();
        std::thread::sleep(REBASE + Duration::from_millis(2));
        let second = now();
        let (at, _) = BASE.with(|base| base.get()).expect("set by now()");
        assert!(at > first.instant, "a new base after {REBASE:?}");
        assert_eq!(at, second.instant);
        assert!(second.unix_ms >= first.unix_ms + REBASE.as_millis() as u64);
    }
}
