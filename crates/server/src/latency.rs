//! The latency monitor (LATENCY LATEST/HISTORY/RESET/DOCTOR/GRAPH): events
//! that took at least `latency-monitor-threshold` milliseconds (0: off),
//! by kind — `command` (a slow command), `fast-command` (a slow command
//! Redis flags fast), `expire-cycle` (a pass of the background expiry) —
//! each with its last 160 samples, one per second (the worst of that
//! second), as Redis keeps them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Samples kept per event.
const HISTORY: usize = 160;

#[derive(Clone, Copy)]
pub struct Sample {
    pub unix_time: u64,
    pub ms: u64,
}

#[derive(Default)]
struct Series {
    samples: VecDeque<Sample>,
    max_ms: u64,
}

#[derive(Default)]
pub struct LatencyMonitor {
    /// `latency-monitor-threshold`, ms.
    pub threshold_ms: AtomicU64,
    events: Mutex<BTreeMap<&'static str, Series>>,
}

impl LatencyMonitor {
    /// Records `event` if it took at least the threshold.
    pub fn observe(&self, event: &'static str, ms: u64) {
        let threshold = self.threshold_ms.load(Ordering::Relaxed);
        if threshold == 0 || ms < threshold {
            return;
        }
        let now = crate::keyspace::durability::unix_now();
        let mut events = self.events.lock();
        let series = events.entry(event).or_default();
        series.max_ms = series.max_ms.max(ms);
        match series.samples.back_mut() {
            Some(last) if last.unix_time == now => last.ms = last.ms.max(ms),
            _ => {
                series.samples.push_back(Sample { unix_time: now, ms });
                if series.samples.len() > HISTORY {
                    series.samples.pop_front();
                }
            }
        }
    }

    /// Each event: its name, its latest sample, and its all-time worst.
    pub fn latest(&self) -> Vec<(&'static str, Sample, u64)> {
        let events = self.events.lock();
        events
            .iter()
            .filter_map(|(name, s)| s.samples.back().map(|last| (*name, *last, s.max_ms)))
            .collect()
    }

    pub fn history(&self, event: &str) -> Vec<Sample> {
        let events = self.events.lock();
        events
            .get(event)
            .map(|s| s.samples.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Forgets the named events (all for none); returns how many existed.
    pub fn reset(&self, names: &[String]) -> usize {
        let mut events = self.events.lock();
        if names.is_empty() {
            let n = events.len();
            events.clear();
            return n;
        }
        names
            .iter()
            .filter(|name| events.remove(name.as_str()).is_some())
            .count()
    }
}
