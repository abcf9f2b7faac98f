//! What other clients see of the script running: whether one runs, for
//! how long, whether it wrote (SCRIPT KILL refuses then), and the kill
//! request the script's instruction hook polls.
//!
//! Written only by the client running the script (`begin`, `wrote`,
//! `end`) and by SCRIPT/FUNCTION KILL (`kill`); read by every client
//! before its command runs. At most one script runs at a time (each
//! excludes every other writer), so the fields never describe two scripts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

#[derive(Default)]
pub struct Running {
    /// A script runs (Release when set, Acquire when read: the other
    /// fields were written before).
    active: AtomicBool,
    started: Mutex<Option<Instant>>,
    /// It is an EVAL script (else a function).
    eval: AtomicBool,
    wrote: AtomicBool,
    /// It runs a group's committed entry (`Session::applying`): killing it
    /// on one member would leave that member without the writes every
    /// other member makes, so it runs to its end wherever it runs.
    replicated: AtomicBool,
    killed: AtomicBool,
    /// The name FUNCTION STATS shows and the command that ran it.
    description: Mutex<(String, Vec<Vec<u8>>)>,
    /// When (ms into the run) the run's network worker hands its other
    /// tasks on next (`run::hand_off_if_long`); 0: never.
    pub hand_off_at_ms: AtomicU64,
    /// Notified when a script ends: clients waiting for it go on at once
    /// (`connection::wait_for_script`).
    pub ended: tokio::sync::Notify,
}

/// What SCRIPT KILL or FUNCTION KILL can do.
pub enum KillOutcome {
    Killed,
    NotBusy,
    Unkillable,
    /// It runs a group's committed entry (`Running::replicated`).
    Replicated,
    /// SCRIPT KILL of a function, or FUNCTION KILL of a script.
    WrongKind,
}

impl Running {
    pub fn begin(&self, eval: bool, replicated: bool, name: &str, command: Vec<Vec<u8>>) {
        *self.started.lock() = Some(Instant::now());
        {
            // The name's buffer is kept from run to run.
            let mut description = self.description.lock();
            description.0.clear();
            description.0.push_str(name);
            description.1 = command;
        }
        self.eval.store(eval, Ordering::Relaxed);
        self.wrote.store(false, Ordering::Relaxed);
        self.replicated.store(replicated, Ordering::Relaxed);
        self.killed.store(false, Ordering::Relaxed);
        self.active.store(true, Ordering::Release);
    }

    pub fn end(&self) {
        self.active.store(false, Ordering::Release);
        self.ended.notify_waiters();
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    pub fn is_eval(&self) -> bool {
        self.eval.load(Ordering::Relaxed)
    }

    /// How long the running script has run, if one runs.
    pub fn elapsed_ms(&self) -> Option<u64> {
        if !self.is_active() {
            return None;
        }
        self.started
            .lock()
            .map(|started| started.elapsed().as_millis() as u64)
    }

    pub fn set_wrote(&self) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// The running script's name and command line (FUNCTION STATS).
    pub fn description(&self) -> Option<(String, Vec<Vec<u8>>)> {
        if !self.is_active() {
            return None;
        }
        Some(self.description.lock().clone())
    }

    pub fn kill(&self, eval: bool) -> KillOutcome {
        if !self.is_active() {
            return KillOutcome::NotBusy;
        }
        if self.replicated.load(Ordering::Relaxed) {
            return KillOutcome::Replicated;
        }
        if self.wrote.load(Ordering::Relaxed) {
            return KillOutcome::Unkillable;
        }
        if self.is_eval() != eval {
            return KillOutcome::WrongKind;
        }
        self.killed.store(true, Ordering::Relaxed);
        KillOutcome::Killed
    }
}
