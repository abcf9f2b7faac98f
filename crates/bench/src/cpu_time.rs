//! CPU time from /proc, in the kernel's clock ticks: the whole machine's
//! and one process's. On a shared machine, what other processes used
//! during a run is the first thing to look at when a number surprises, so
//! every benchmark reports it.

/// Cumulative CPU time of the whole machine and of this process.
pub(crate) struct CpuTimes {
    pub machine_busy: u64,
    pub machine_total: u64,
    pub this_process: u64,
}

impl CpuTimes {
    pub fn now() -> Option<CpuTimes> {
        let (machine_busy, machine_total) = machine_ticks()?;
        Some(CpuTimes {
            machine_busy,
            machine_total,
            this_process: process_ticks("self")?,
        })
    }

    /// The share of the machine's time since `earlier` that other
    /// processes were running; `None` over too short a span.
    pub fn others_share_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.machine_total.checked_sub(earlier.machine_total)?;
        if total == 0 {
            return None;
        }
        let busy = self.machine_busy.saturating_sub(earlier.machine_busy);
        let ours = self.this_process.saturating_sub(earlier.this_process);
        Some(busy.saturating_sub(ours) as f64 / total as f64)
    }
}

/// The whole machine's busy and total CPU time so far (all cores).
pub(crate) fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    // cpu user nice system idle iowait irq softirq steal
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    let idle = ticks.get(3)? + ticks.get(4)?;
    let total: u64 = ticks.iter().sum();
    Some((total - idle, total))
}

/// The cores /proc/stat counts (all of the machine's, whatever this
/// process may use): what [`machine_ticks`] sums over.
pub(crate) fn machine_cores() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cores = stat
        .lines()
        .skip(1)
        .filter(|line| line.starts_with("cpu"))
        .count() as u64;
    Some(cores.max(1))
}

/// The user and system CPU time so far of process `pid` ("self" for this
/// one).
pub(crate) fn process_ticks(pid: &str) -> Option<u64> {
    let own = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (in parentheses, which may hold spaces):
    // utime and stime are fields 14 and 15.
    let fields: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn cpu_times_are_read_from_proc() {
        let before = CpuTimes::now().expect("Linux has /proc/stat and /proc/self/stat");
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(50) {
            std::hint::spin_loop();
        }
        let after = CpuTimes::now().unwrap();
        assert!(after.machine_total >= before.machine_total);
        assert!(
            after.this_process > before.this_process,
            "50 ms of spinning"
        );
        if let Some(share) = after.others_share_since(&before) {
            assert!((0.0..=1.0).contains(&share), "{share}");
        }
        assert!(machine_cores().unwrap() >= 1);
    }
}
