//! Power-fail durability on emulated persistent memory: `msync` policies.
//!
//! With `SyncPolicy::Always` a write returns only after an `msync` that began
//! after the write was stored. Group commit (as in databases' log flushes):
//! the first waiter becomes the leader and syncs everything stored so far; the
//! writers that arrive meanwhile wait for the next round and share its
//! `msync`. The number of waiters is bounded by the number of writer threads.
//!
//! On DAX a persisted record is already durable, so every policy is free.

use std::sync::atomic::{AtomicU64, Ordering};

use engram_pmem::{Mode, Region};
use parking_lot::{Condvar, Mutex};

use crate::{Error, Result, SyncPolicy};

#[derive(Default)]
struct Rounds {
    /// Tickets handed out: one per write that needs a sync.
    requested: u64,
    /// Every ticket up to this one is durable.
    synced: u64,
    leader_active: bool,
    /// The last msync failed: waiters whose tickets it covered get the error.
    failed_up_to: u64,
}

pub struct Syncer {
    policy: SyncPolicy,
    rounds: Mutex<Rounds>,
    done: Condvar,
    pub syncs: AtomicU64,
}

impl Syncer {
    pub fn new(policy: SyncPolicy, mode: Mode) -> Syncer {
        Syncer {
            policy: if mode == Mode::Dax {
                SyncPolicy::Never
            } else {
                policy
            },
            rounds: Mutex::new(Rounds::default()),
            done: Condvar::new(),
            syncs: AtomicU64::new(0),
        }
    }

    pub fn policy(&self) -> SyncPolicy {
        self.policy
    }

    /// Called after a write is stored and before it is acknowledged;
    /// `sync` makes every write stored so far durable (the whole file, or
    /// under lazy retirement the log's tail: `append::sync_written`).
    #[inline]
    pub fn after_write(&self, region: &Region, sync: impl FnOnce() -> Result<()>) -> Result<()> {
        match self.policy {
            SyncPolicy::Always => self.group_commit(region, sync),
            SyncPolicy::Never | SyncPolicy::Periodic(_) => Ok(()),
        }
    }

    fn group_commit(&self, region: &Region, sync: impl FnOnce() -> Result<()>) -> Result<()> {
        let mut sync = Some(sync);
        let mut rounds = self.rounds.lock();
        rounds.requested += 1;
        let ticket = rounds.requested;
        loop {
            if rounds.synced >= ticket {
                return Ok(());
            }
            if rounds.failed_up_to >= ticket {
                return Err(Error::io(
                    "syncing",
                    region.path(),
                    std::io::Error::other("msync failed; the write may not survive power loss"),
                ));
            }
            if rounds.leader_active {
                self.done.wait(&mut rounds);
                continue;
            }
            rounds.leader_active = true;
            let target = rounds.requested;
            drop(rounds);
            // A thread leads at most once: after its round its ticket is
            // synced or failed, and the loop returns.
            let result = sync.take().expect("one round led per write")();
            rounds = self.rounds.lock();
            rounds.leader_active = false;
            match result {
                Ok(()) => rounds.synced = rounds.synced.max(target),
                Err(_) => rounds.failed_up_to = rounds.failed_up_to.max(target),
            }
            self.done.notify_all();
            result?;
        }
    }

    /// One `msync` of the whole mapped region.
    pub fn sync_now(&self, region: &Region) -> Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        region.sync_all().map_err(Error::Region)
    }
}
