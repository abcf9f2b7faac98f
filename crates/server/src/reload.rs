//! The server's handle on its keyspace, and DEBUG RELOAD: the keyspace
//! closed and opened again from persistent memory while every client
//! stays connected (Redis's DEBUG RELOAD saves an RDB and loads it back;
//! here what is durable already is what a restart would find, so a
//! reload is that restart, without the process's).
//!
//! A command holds the keyspace for its run only: `execute` takes a guard
//! (no reference count touched on the way: `arc_swap`'s debt slots), and
//! anything that waits (a blocked command, a durability wait) holds no
//! keyspace across the wait. A reload therefore:
//!
//! 1. raises `reloading`: connections hold their next command (one
//!    relaxed load per command when no reload runs);
//! 2. empties the slot, which turns every guard still out into a counted
//!    reference, and waits until its own is the only one left (waking
//!    blocked clients so that they let go of theirs);
//! 3. closes the keyspace (both stores synced and closed, as at shutdown)
//!    and opens it again from the data directory, through recovery;
//! 4. fills the slot and lets the held commands run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::{ArcSwapOption, Guard};
use tokio::sync::Notify;

use crate::keyspace::Keyspace;
use crate::shared::Shared;

/// How long a reload waits for the commands running when it began.
const QUIESCE_PATIENCE: Duration = Duration::from_secs(10);

pub struct KeyspaceSlot {
    current: ArcSwapOption<Keyspace>,
    reloading: AtomicBool,
    reloaded: Notify,
}

/// The keyspace as a command holds it (see the module's notes).
pub type KeyspaceGuard = Guard<Option<Arc<Keyspace>>>;

impl KeyspaceSlot {
    pub fn new(keyspace: Arc<Keyspace>) -> KeyspaceSlot {
        KeyspaceSlot {
            current: ArcSwapOption::new(Some(keyspace)),
            reloading: AtomicBool::new(false),
            reloaded: Notify::new(),
        }
    }

    /// The keyspace, for the length of one command or one step of a
    /// background task. In the instant of a reload when there is none
    /// (only code the reload does not hold can get here then), waits.
    pub fn guard(&self) -> KeyspaceGuard {
        loop {
            let guard = self.current.load();
            if guard.is_some() {
                return guard;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The keyspace, or none while a reload has it closed: for code that
    /// runs outside commands and may skip a turn (or wait asynchronously).
    pub fn try_guard(&self) -> KeyspaceGuard {
        self.current.load()
    }

    /// The keyspace as a reference of its own (for a thread that keeps it
    /// a while, such as BGSAVE's sync).
    pub fn get(&self) -> Arc<Keyspace> {
        Arc::clone(self.guard().as_ref().expect("guard() waits for a keyspace"))
    }

    /// Whether a reload is under way: commands wait for it first.
    pub fn is_reloading(&self) -> bool {
        self.reloading.load(Ordering::Acquire)
    }

    /// Returns once no reload is under way.
    pub async fn wait_reloaded(&self) {
        loop {
            let reloaded = self.reloaded.notified();
            tokio::pin!(reloaded);
            reloaded.as_mut().enable();
            if !self.is_reloading() {
                return;
            }
            reloaded.await;
        }
    }

    /// Empties the slot for good (shutdown), handing back the keyspace.
    pub fn take(&self) -> Option<Arc<Keyspace>> {
        self.current.swap(None)
    }
}

/// DEBUG RELOAD (and LOADAOF): see the module's notes. Runs on the
/// requesting client's task once its command has returned, so that the
/// client holds no keyspace itself.
pub async fn reload(shared: &Shared) -> Result<(), String> {
    let slot = &shared.keyspace;
    if slot.reloading.swap(true, Ordering::AcqRel) {
        return Err("ERR a reload is already in progress".into());
    }
    let result = swap_in_fresh(shared).await;
    slot.reloading.store(false, Ordering::Release);
    slot.reloaded.notify_waiters();
    result
}

async fn swap_in_fresh(shared: &Shared) -> Result<(), String> {
    let slot = &shared.keyspace;
    let Some(old) = slot.current.swap(None) else {
        return Err("ERR the keyspace is closed (shutting down)".into());
    };
    let started = Instant::now();
    // Commands that were running finish; blocked clients are woken (more
    // than once: one may register its wait just after a wake) and, seeing
    // the reload, let go of the keyspace until it is back.
    while Arc::strong_count(&old) > 1 {
        if started.elapsed() > QUIESCE_PATIENCE {
            slot.current.store(Some(old));
            return Err("ERR reload abandoned: commands still running on the keyspace".into());
        }
        old.wake_all_blocked();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // WATCHes were made on the keyspace going away: as after a FLUSHALL,
    // their transactions fail.
    old.abort_all_watches();
    // The rule last asked for: a staged keyspace kept `always` in force
    // until this reopening.
    let durability = old.commit().requested();
    let mut options = crate::serve::keyspace_options(&shared.config);
    options.durability = durability;
    let dir = shared.config.dir.clone();
    // The slot is filled on the blocking thread itself: code that met the
    // empty slot waits in `guard` on a worker thread, and must not depend
    // on a worker being free for it to be filled.
    let fill = Arc::clone(slot);
    let reopened = tokio::task::spawn_blocking(move || {
        Keyspace::close(old).map_err(|e| format!("ERR reload: {e}"))?;
        let opened = Keyspace::open_dir(&dir, &options).map_err(|e| format!("ERR reload: {e}"))?;
        fill.current.store(Some(opened.keyspace));
        Ok::<_, String>(())
    })
    .await
    .map_err(|e| format!("ERR reload: {e}"))?;
    if let Err(e) = reopened {
        // Nothing to serve from: the server cannot go on honestly.
        log::error!("{e}; shutting down");
        shared.request_shutdown();
        return Err(e);
    }
    // What the parameters set on the keyspace (notifications' expired-key
    // notes, LFU counting) belongs to the new one too.
    shared.reapply_keyspace_params();
    // Clients' caches are invalidated whole, as after a FLUSHALL.
    shared.tracking.flushed(shared);
    log::info!(
        "DEBUG RELOAD: keyspace closed and recovered in {:.3} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
