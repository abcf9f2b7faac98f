//! # engram-threads: background threads, and the cores they may run on
//!
//! Process policy, not persistent memory: every layer starts its
//! maintenance threads through [`spawn`], so one choice of cores holds for
//! the whole process.
//!
//! Maintenance work — checkpoints of the collections, compaction, the
//! integrity pass, growing the log and the file ahead of need, index
//! images, expiry — runs on threads of its own so that no foreground
//! operation waits for it. Threads of their own are not enough on a machine
//! with few cores: the kernel shares each core fairly among whatever is
//! runnable and balances the cores lazily, so two maintenance threads that
//! happen to run at once can hold both cores of a two-core machine while
//! every client waits in a run queue, and a client preempted while it
//! holds a shard's lock (a tick is 4 ms at `HZ=250`) leaves the other
//! clients blocked behind it. Traced in BENCHMARKS (issue 4, seventh run),
//! that was most of the 10 ms windows below half the median throughput.
//!
//! So background threads start on a subset of the cores, and foreground
//! threads may run anywhere: the setup of the DIPPER paper, whose
//! checkpointer has cores of its own, and what Redis offers as
//! `bgsave_cpulist` and `bio_cpulist`. The choice is process-wide (cores
//! are): [`configure`] it before opening stores; threads started earlier
//! keep the cores they started with.
//!
//! The default, [`BackgroundCpus::Auto`], is the last quarter of the cores
//! this process may use (at least one), and no restriction when it may use
//! only one. The last, because the kernel and most daemons favour the first
//! (interrupts default to CPU 0). Placement is best effort: if the kernel refuses it, the thread
//! runs anywhere and a warning is logged.

use std::fmt;
use std::str::FromStr;
use std::thread::JoinHandle;

use parking_lot::Mutex;

mod per_cpu;
pub use per_cpu::{PerCpu, StripedCounter};

/// Which cores background threads may run on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackgroundCpus {
    /// The last quarter of the cores this process may use, at least one;
    /// anywhere if it may use only one.
    #[default]
    Auto,
    /// Anywhere (no placement).
    All,
    /// These cores (Linux CPU numbers).
    List(Vec<usize>),
}

impl FromStr for BackgroundCpus {
    type Err = PlacementError;

    /// `auto`, `all`, or a CPU list in the kernel's format: `3`, `2-3`,
    /// `0,4-7`.
    fn from_str(text: &str) -> Result<Self, PlacementError> {
        let text = text.trim();
        match text.to_ascii_lowercase().as_str() {
            "auto" => return Ok(BackgroundCpus::Auto),
            "all" => return Ok(BackgroundCpus::All),
            _ => {}
        }
        let bad = || PlacementError::Syntax(text.to_string());
        let mut cpus = Vec::new();
        for part in text.split(',') {
            let (first, last) = match part.split_once('-') {
                Some((first, last)) => (first.trim(), last.trim()),
                None => (part.trim(), part.trim()),
            };
            let first: usize = first.parse().map_err(|_| bad())?;
            let last: usize = last.parse().map_err(|_| bad())?;
            if first > last || last >= MAX_CPUS {
                return Err(bad());
            }
            cpus.extend(first..=last);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(BackgroundCpus::List(cpus))
    }
}

impl fmt::Display for BackgroundCpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackgroundCpus::Auto => f.write_str("auto"),
            BackgroundCpus::All => f.write_str("all"),
            BackgroundCpus::List(cpus) => f.write_str(&cpu_list(cpus)),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    #[error(
        "invalid background CPUs '{0}' (expected auto, all, or a CPU list such as 3, 2-3 \
         or 0,4-7)"
    )]
    Syntax(String),
    #[error(
        "background CPUs {asked}: CPU {cpu} is not among the CPUs this process may use ({allowed})"
    )]
    NotAllowed {
        asked: String,
        cpu: usize,
        allowed: String,
    },
}

/// Where background threads go: `None` anywhere, else these cores.
pub type Placement = Option<Vec<usize>>;

/// The most CPUs a `cpu_set_t` describes.
const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// The resolved process-wide choice; `None` until first needed.
static CHOSEN: Mutex<Option<Placement>> = Mutex::new(None);

/// Sets where background threads started from now on may run, checked
/// against the cores this process may use. Returns the resolved placement.
pub fn configure(choice: &BackgroundCpus) -> Result<Placement, PlacementError> {
    let placement = resolve(choice, &allowed_cpus())?;
    *CHOSEN.lock() = Some(placement.clone());
    Ok(placement)
}

/// Where background threads go now: the configured choice, or
/// [`BackgroundCpus::Auto`].
pub fn placement() -> Placement {
    CHOSEN
        .lock()
        .get_or_insert_with(|| {
            resolve(&BackgroundCpus::Auto, &allowed_cpus()).expect("auto always resolves")
        })
        .clone()
}

/// [`placement`] as text for logs and `INFO`: `all` or a CPU list.
pub fn describe(placement: &Placement) -> String {
    match placement {
        None => "all".to_string(),
        Some(cpus) => cpu_list(cpus),
    }
}

/// Starts a named background thread on the cores of [`placement`].
pub fn spawn<F, T>(name: &str, work: F) -> std::io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let placement = placement();
    let label = name.to_string();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            if let Some(cpus) = &placement {
                if let Err(error) = pin_this_thread(cpus) {
                    log::warn!(
                        "background thread {label}: could not keep it to CPUs {} ({error}); \
                         it runs anywhere",
                        cpu_list(cpus)
                    );
                }
            }
            work()
        })
}

/// The cores the calling thread may run on.
pub fn this_thread_cpus() -> std::io::Result<Vec<usize>> {
    cpus_of(0)
}

/// `choice` made concrete against the cores this process may use.
pub fn resolve(choice: &BackgroundCpus, allowed: &[usize]) -> Result<Placement, PlacementError> {
    match choice {
        BackgroundCpus::All => Ok(None),
        BackgroundCpus::Auto if allowed.len() < 2 => Ok(None),
        BackgroundCpus::Auto => {
            let keep = (allowed.len() / 4).max(1);
            Ok(Some(allowed[allowed.len() - keep..].to_vec()))
        }
        BackgroundCpus::List(cpus) => {
            if let Some(&cpu) = cpus.iter().find(|cpu| !allowed.contains(cpu)) {
                return Err(PlacementError::NotAllowed {
                    asked: cpu_list(cpus),
                    cpu,
                    allowed: cpu_list(allowed),
                });
            }
            Ok(Some(cpus.clone()))
        }
    }
}

/// The cores this process may use: its main thread's affinity (the calling
/// thread may be a background thread already placed). Falls back to every
/// online core if the kernel will not say.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: getpid has no preconditions.
    let main_thread = unsafe { libc::getpid() };
    cpus_of(main_thread).unwrap_or_else(|_| {
        (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
    })
}

fn cpus_of(tid: libc::pid_t) -> std::io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let status =
        unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if status != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET only reads `set`, and every index is below
    // CPU_SETSIZE.
    Ok((0..MAX_CPUS)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

fn pin_this_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `resolve` and `from_str` keep every CPU below
        // CPU_SETSIZE; CPU_SET writes only inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the
    // calling thread.
    let status =
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if status != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `cpus` (sorted) in the kernel's list format: `0,2-3`.
fn cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_in_the_kernels_format() {
        assert_eq!("auto".parse(), Ok(BackgroundCpus::Auto));
        assert_eq!("ALL".parse(), Ok(BackgroundCpus::All));
        assert_eq!("3".parse(), Ok(BackgroundCpus::List(vec![3])));
        assert_eq!(
            "4-6, 0,5".parse(),
            Ok(BackgroundCpus::List(vec![0, 4, 5, 6]))
        );
        for bad in ["", "x", "3-1", "1,,2", "-1", "1-", "99999", "0-99999"] {
            assert_eq!(
                bad.parse::<BackgroundCpus>(),
                Err(PlacementError::Syntax(bad.trim().to_string())),
                "{bad:?}"
            );
        }
        assert_eq!(
            BackgroundCpus::List(vec![0, 2, 3, 4, 7]).to_string(),
            "0,2-4,7"
        );
    }

    #[test]
    fn auto_takes_the_last_quarter_and_never_the_only_core() {
        let auto = |allowed: &[usize]| resolve(&BackgroundCpus::Auto, allowed).unwrap();
        assert_eq!(auto(&[0]), None);
        assert_eq!(auto(&[0, 1]), Some(vec![1]));
        assert_eq!(auto(&[0, 1, 2, 3]), Some(vec![3]));
        assert_eq!(
            auto(&(0..16).collect::<Vec<_>>()),
            Some(vec![12, 13, 14, 15])
        );
        // A cpuset that is not 0..n: the quarter is of what the process has.
        assert_eq!(auto(&[2, 5, 6, 9, 11, 12, 13, 14]), Some(vec![13, 14]));
        assert_eq!(resolve(&BackgroundCpus::All, &[0, 1]), Ok(None));
    }

    #[test]
    fn a_list_outside_the_allowed_cores_is_refused_by_name() {
        let error = resolve(&BackgroundCpus::List(vec![1, 7]), &[0, 1, 2, 3]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "background CPUs 1,7: CPU 7 is not among the CPUs this process may use (0-3)"
        );
        assert_eq!(
            resolve(&BackgroundCpus::List(vec![2, 3]), &[0, 1, 2, 3]),
            Ok(Some(vec![2, 3]))
        );
    }
}
