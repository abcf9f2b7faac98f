//! Per-command and per-error counters: INFO's `commandstats` (calls,
//! time, rejected and failed calls of every command), `errorstats` (error
//! replies by their code, `ERR`, `WRONGTYPE`, ...) and the
//! `total_error_replies` of `stats`, counted as Redis 7.0 counts them: a
//! call rejected before it runs (wrong arity, NOAUTH) is `rejected`, one
//! whose handler returned an error is `failed` (and still a call).
//!
//! Commands that are containers of subcommands (CONFIG, CLIENT, ...) are
//! counted per subcommand (`cmdstat_config|get`), as Redis 7.0 counts
//! them. Every command also has a latency histogram for LATENCY
//! HISTOGRAM: power-of-two buckets of microseconds.
//!
//! Every call bumps its command's counters, so they are kept per CPU
//! (`engram_threads::PerCpu`): two network workers running GETs would
//! otherwise pass the GET counters' cache line between them on every call.
//! Readers (INFO, LATENCY HISTOGRAM) sum the CPUs' counters.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use engram_threads::PerCpu;
use parking_lot::Mutex;

use crate::commands::TABLE;
use crate::resp::Args;

/// Redis tracks at most this many distinct error codes; later ones are
/// counted in the total only (a client inventing codes cannot grow it).
const MAX_ERROR_CODES: usize = 128;

/// Histogram buckets: [2^k, 2^(k+1)) µs for k below this (the last one
/// takes everything longer).
const BUCKETS: usize = 40;

/// The commands counted per subcommand, as in Redis 7.0.
pub(crate) const CONTAINERS: &[&str] = &[
    "acl", "client", "cluster", "command", "config", "debug", "function", "latency", "memory",
    "module", "object", "pubsub", "script", "slowlog", "xgroup", "xinfo",
];

/// At most this many distinct `command|subcommand` entries (clients name
/// the subcommands; made-up ones past this are counted on the command).
const MAX_SUBCOMMANDS: usize = 512;

struct Counters {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    histogram: [AtomicU64; BUCKETS],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            calls: AtomicU64::new(0),
            usec: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            histogram: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Counters {
    fn reset(&self) {
        for counter in [&self.calls, &self.usec, &self.rejected, &self.failed]
            .into_iter()
            .chain(&self.histogram)
        {
            counter.store(0, Ordering::Relaxed);
        }
    }

    fn add_to(&self, totals: &mut Totals) {
        totals.calls += self.calls.load(Ordering::Relaxed);
        totals.usec += self.usec.load(Ordering::Relaxed);
        totals.rejected += self.rejected.load(Ordering::Relaxed);
        totals.failed += self.failed.load(Ordering::Relaxed);
        for (total, count) in totals.histogram.iter_mut().zip(&self.histogram) {
            *total += count.load(Ordering::Relaxed);
        }
    }
}

/// A command's counters as read: summed over the CPUs.
#[derive(Clone, Copy)]
struct Totals {
    calls: u64,
    usec: u64,
    rejected: u64,
    failed: u64,
    histogram: [u64; BUCKETS],
}

impl Default for Totals {
    fn default() -> Totals {
        Totals {
            calls: 0,
            usec: 0,
            rejected: 0,
            failed: 0,
            histogram: [0; BUCKETS],
        }
    }
}

impl Totals {
    fn is_used(&self) -> bool {
        self.calls > 0 || self.rejected > 0 || self.failed > 0
    }
}

pub struct CommandStats {
    /// Per CPU, one per command in `TABLE`'s order; a CPU's (some 80 KB)
    /// made when a command first runs there, so a big machine pays for
    /// the CPUs that serve clients only.
    commands: PerCpu<OnceLock<Box<[Counters]>>>,
    /// Whether each command of `TABLE` is one of the `CONTAINERS` (looked
    /// up once here, not on every call).
    is_container: Vec<bool>,
    /// `command|subcommand` of the containers.
    subcommands: Mutex<HashMap<String, Arc<Counters>>>,
    errors: Mutex<HashMap<String, u64>>,
    total_errors: AtomicU64,
}

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats {
            commands: PerCpu::default(),
            is_container: TABLE
                .iter()
                .map(|spec| CONTAINERS.contains(&spec.name))
                .collect(),
            subcommands: Mutex::new(HashMap::new()),
            errors: Mutex::new(HashMap::new()),
            total_errors: AtomicU64::new(0),
        }
    }
}

/// One command's latency histogram, for LATENCY HISTOGRAM: its calls and,
/// for each bucket that holds any, the bucket's upper bound in µs and the
/// calls at or below it.
pub struct Histogram {
    pub name: String,
    pub calls: u64,
    pub buckets: Vec<(u64, u64)>,
}

impl CommandStats {
    /// The counters of the CPU this thread runs on.
    fn local(&self) -> &[Counters] {
        self.commands
            .local()
            .get_or_init(|| (0..TABLE.len()).map(|_| Counters::default()).collect())
    }

    /// The counters of command `index` called with `args`: its
    /// subcommand's for a container.
    fn counters(&self, index: usize, args: &Args) -> Option<Arc<Counters>> {
        if args.len() < 2 || !self.is_container[index] {
            return None;
        }
        let name = TABLE[index].name;
        let sub = args.get(1);
        if sub.len() > 32 || !sub.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-') {
            return None;
        }
        let key = format!(
            "{name}|{}",
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        );
        let mut subs = self.subcommands.lock();
        if let Some(counters) = subs.get(&key) {
            return Some(counters.clone());
        }
        if subs.len() >= MAX_SUBCOMMANDS {
            return None;
        }
        Some(subs.entry(key).or_default().clone())
    }

    /// Command `index` of `TABLE` ran for `usec` microseconds.
    pub fn called(&self, index: usize, args: &Args, usec: u64, failed: bool) {
        let sub = self.counters(index, args);
        let c = sub.as_deref().unwrap_or_else(|| &self.local()[index]);
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.usec.fetch_add(usec, Ordering::Relaxed);
        if failed {
            c.failed.fetch_add(1, Ordering::Relaxed);
        }
        let bucket = (64 - usec.leading_zeros() as usize).min(BUCKETS - 1);
        c.histogram[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// Command `index` was refused before it ran.
    pub fn rejected(&self, index: usize, args: &Args) {
        let sub = self.counters(index, args);
        let c = sub.as_deref().unwrap_or_else(|| &self.local()[index]);
        c.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Every command and subcommand with counters, by name.
    fn each(&self, mut f: impl FnMut(&str, &Totals)) {
        for (index, spec) in TABLE.iter().enumerate() {
            let mut totals = Totals::default();
            for cpu in self.commands.iter().filter_map(OnceLock::get) {
                cpu[index].add_to(&mut totals);
            }
            f(spec.name, &totals);
        }
        let subs = self.subcommands.lock();
        let mut names: Vec<&String> = subs.keys().collect();
        names.sort();
        for name in names {
            let mut totals = Totals::default();
            subs[name].add_to(&mut totals);
            f(name, &totals);
        }
    }

    /// The histograms of the commands called since the last reset whose
    /// name is in `names` (a container's name takes its subcommands), or
    /// of all of them for an empty `names`.
    pub fn histograms(&self, names: &[String]) -> Vec<Histogram> {
        let mut out = Vec::new();
        self.each(|name, c| {
            let parent = name.split('|').next().unwrap_or(name);
            let wanted = names.is_empty() || names.iter().any(|n| n == name || n == parent);
            let calls = c.calls;
            if !wanted || calls == 0 {
                return;
            }
            let mut cumulative = 0;
            let mut buckets = Vec::new();
            for (k, &count) in c.histogram.iter().enumerate() {
                if count > 0 {
                    cumulative += count;
                    buckets.push((1u64 << k, cumulative));
                }
            }
            out.push(Histogram {
                name: name.to_string(),
                calls,
                buckets,
            });
        });
        out
    }

    /// An error reply was sent; `text` starts with its code.
    pub fn error_reply(&self, text: &str) {
        self.total_errors.fetch_add(1, Ordering::Relaxed);
        let code = text.split(' ').next().unwrap_or("ERR");
        let mut errors = self.errors.lock();
        if let Some(count) = errors.get_mut(code) {
            *count += 1;
        } else if errors.len() < MAX_ERROR_CODES {
            errors.insert(code.to_string(), 1);
        }
    }

    pub fn total_errors(&self) -> u64 {
        self.total_errors.load(Ordering::Relaxed)
    }

    pub fn reset(&self) {
        for c in self
            .commands
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|cpu| cpu.iter())
        {
            c.reset();
        }
        self.subcommands.lock().clear();
        self.errors.lock().clear();
        self.total_errors.store(0, Ordering::Relaxed);
    }

    /// `cmdstat_<name>:calls=..,usec=..,usec_per_call=..,rejected_calls=..,failed_calls=..`
    /// for every command used since the last reset.
    pub fn render_commands(&self, out: &mut String) {
        self.each(|name, c| {
            if !c.is_used() {
                return;
            }
            let Totals {
                calls,
                usec,
                rejected,
                failed,
                ..
            } = *c;
            let per_call = if calls == 0 {
                0.0
            } else {
                usec as f64 / calls as f64
            };
            let _ = write!(
                out,
                "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={per_call:.2},\
                 rejected_calls={rejected},failed_calls={failed}\r\n",
            );
        });
    }

    /// `errorstat_<CODE>:count=..`, codes in order.
    pub fn render_errors(&self, out: &mut String) {
        let errors = self.errors.lock();
        let mut codes: Vec<_> = errors.iter().collect();
        codes.sort();
        for (code, count) in codes {
            let _ = write!(out, "errorstat_{code}:count={count}\r\n");
        }
    }
}
