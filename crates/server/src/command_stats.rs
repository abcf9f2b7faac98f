//! Per-command and per-error counters: INFO's `commandstats` (calls,
//! time, rejected and failed calls of every command), `errorstats` (error
//! replies by their code, `ERR`, `WRONGTYPE`, ...) and the
//! `total_error_replies` of `stats`, counted as Redis 7.0 counts them: a
//! call rejected before it runs (wrong arity, NOAUTH) is `rejected`, one
//! whose handler returned an error is `failed` (and still a call).

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::commands::TABLE;

/// Redis tracks at most this many distinct error codes; later ones are
/// counted in the total only (a client inventing codes cannot grow it).
const MAX_ERROR_CODES: usize = 128;

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
}

pub struct CommandStats {
    /// One per command, in `TABLE`'s order.
    commands: Vec<Counters>,
    errors: Mutex<HashMap<String, u64>>,
    total_errors: AtomicU64,
}

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats {
            commands: (0..TABLE.len()).map(|_| Counters::default()).collect(),
            errors: Mutex::new(HashMap::new()),
            total_errors: AtomicU64::new(0),
        }
    }
}

impl CommandStats {
    /// Command `index` of `TABLE` ran for `usec` microseconds.
    pub fn called(&self, index: usize, usec: u64, failed: bool) {
        let c = &self.commands[index];
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.usec.fetch_add(usec, Ordering::Relaxed);
        if failed {
            c.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Command `index` was refused before it ran.
    pub fn rejected(&self, index: usize) {
        self.commands[index]
            .rejected
            .fetch_add(1, Ordering::Relaxed);
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
        for c in &self.commands {
            for counter in [&c.calls, &c.usec, &c.rejected, &c.failed] {
                counter.store(0, Ordering::Relaxed);
            }
        }
        self.errors.lock().clear();
        self.total_errors.store(0, Ordering::Relaxed);
    }

    /// `cmdstat_<name>:calls=..,usec=..,usec_per_call=..,rejected_calls=..,failed_calls=..`
    /// for every command used since the last reset.
    pub fn render_commands(&self, out: &mut String) {
        for (spec, c) in TABLE.iter().zip(&self.commands) {
            let calls = c.calls.load(Ordering::Relaxed);
            let rejected = c.rejected.load(Ordering::Relaxed);
            let failed = c.failed.load(Ordering::Relaxed);
            if calls == 0 && rejected == 0 && failed == 0 {
                continue;
            }
            let usec = c.usec.load(Ordering::Relaxed);
            let per_call = if calls == 0 {
                0.0
            } else {
                usec as f64 / calls as f64
            };
            let _ = write!(
                out,
                "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per_call:.2},\
                 rejected_calls={rejected},failed_calls={failed}\r\n",
                spec.name
            );
        }
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
