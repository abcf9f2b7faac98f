//! CLIENT PAUSE: holds clients' commands until a deadline or CLIENT
//! UNPAUSE. `ALL` holds every command; `WRITE` holds the commands that
//! may change data (or, in Redis, be replicated: PFCOUNT and PUBLISH too)
//! and EXEC of a transaction holding one. A held client counts as
//! blocked (INFO `blocked_clients`), as in Redis.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

#[derive(Default)]
pub struct Pause {
    /// Whether a pause may be in effect: read by every command, so that
    /// without one nothing else is (the lock below is not taken).
    active: AtomicBool,
    /// Until when, and whether every command (else only writes).
    state: Mutex<Option<(Instant, bool)>>,
    /// Woken by CLIENT UNPAUSE and by a new pause.
    pub changed: Notify,
    /// Clients held now.
    pub held: AtomicUsize,
}

impl Pause {
    /// Pauses until `until`. As in Redis, a pause in effect is only ever
    /// extended: the later deadline and the stricter mode win.
    pub fn pause(&self, until: Instant, all: bool) {
        let mut state = self.state.lock();
        *state = Some(match *state {
            Some((old_until, old_all)) if old_until > Instant::now() => {
                (old_until.max(until), old_all || all)
            }
            _ => (until, all),
        });
        self.active.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    pub fn unpause(&self) {
        *self.state.lock() = None;
        self.active.store(false, Ordering::Release);
        self.changed.notify_waiters();
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// The deadline a command must wait for, if the pause holds it. A
    /// pause found past its deadline is over: cleared here.
    pub fn holds(&self, may_write: bool) -> Option<Instant> {
        let mut state = self.state.lock();
        match *state {
            Some((until, _)) if until <= Instant::now() => {
                *state = None;
                self.active.store(false, Ordering::Release);
                None
            }
            Some((until, all)) if all || may_write => Some(until),
            _ => None,
        }
    }

    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}
