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
    // utime and stime are fields 14 and 15.
    stat_fields_sum(pid, &[14, 15])
}

/// [`process_ticks`] plus the time of the children it has reaped
/// (cutime and cstime, fields 16 and 17).
fn process_and_children_ticks(pid: &str) -> Option<u64> {
    stat_fields_sum(pid, &[14, 15, 16, 17])
}

/// The sum of the numeric fields `numbers` (counted from 1, as proc(5)
/// does) of `/proc/PID/stat`.
fn stat_fields_sum(pid: &str, numbers: &[usize]) -> Option<u64> {
    let own = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (in parentheses, which may hold spaces),
    // the first field is field 3.
    let fields: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
    numbers
        .iter()
        .map(|&n| fields.get(n - 3)?.parse::<u64>().ok())
        .sum()
}

/// The kernel's clock ticks per second (`USER_HZ`), the unit of
/// [`process_ticks`]: the `AT_CLKTCK` entry of this process's auxiliary
/// vector, where C's `sysconf(_SC_CLK_TCK)` reads it too (a file to read,
/// where calling sysconf would need `unsafe`, which the crate root denies
/// here). 100 if it cannot be read: USER_HZ is 100 on every architecture
/// but Alpha.
pub(crate) fn ticks_per_second() -> u64 {
    const AT_CLKTCK: usize = 17;
    const FALLBACK: u64 = 100;
    let Ok(auxv) = std::fs::read("/proc/self/auxv") else {
        return FALLBACK;
    };
    // (type, value) pairs of native words, ending with type 0.
    const WORD: usize = std::mem::size_of::<usize>();
    let words: Vec<usize> = auxv
        .chunks_exact(WORD)
        .filter_map(|bytes| <[u8; WORD]>::try_from(bytes).ok())
        .map(usize::from_ne_bytes)
        .collect();
    words
        .chunks_exact(2)
        .find(|pair| pair[0] == AT_CLKTCK)
        .map(|pair| pair[1] as u64)
        .filter(|&hz| hz > 0)
        .unwrap_or(FALLBACK)
}

/// A server's CPU time, in seconds: its own, all threads, and that of the
/// children it has reaped. Redis forks for its AOF rewrites and RDB saves:
/// that work is the server's as much as Engram's checkpointer thread is
/// Engram's, and leaving it out would flatter Redis's CPU per operation.
/// (A child still running when this is read is not counted yet.)
pub(crate) fn server_seconds(pid: u32) -> Option<f64> {
    Some(process_and_children_ticks(&pid.to_string())? as f64 / ticks_per_second() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// This process's own CPU time (all threads, not its children), in
    /// seconds.
    fn process_seconds(pid: u32) -> Option<f64> {
        Some(process_ticks(&pid.to_string())? as f64 / ticks_per_second() as f64)
    }

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

    #[test]
    fn the_clock_tick_rate_is_read_from_auxv() {
        // USER_HZ is 100 on x86 and ARM, the machines this runs on.
        assert_eq!(ticks_per_second(), 100);
        let seconds = process_seconds(std::process::id()).expect("this process's /proc stat");
        assert!(seconds >= 0.0);
    }

    #[test]
    fn a_server_s_time_counts_the_children_it_reaped() {
        let me = std::process::id();
        let before = server_seconds(me).unwrap() - process_seconds(me).unwrap();
        // A child that does a fixed amount of work (about 0.4 s of CPU
        // here, however loaded the machine), waited for (reaped).
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
            .status()
            .unwrap();
        assert!(status.success());
        let after = server_seconds(me).unwrap() - process_seconds(me).unwrap();
        assert!(
            after - before >= 0.05,
            "the reaped child's CPU was not counted: {before} -> {after} s"
        );
    }
}
