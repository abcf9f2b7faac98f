//! Making acknowledged writes durable in the configured mode.
//!
//! `process`: nothing to do; a write in the shared mapping survives a
//! process crash as soon as it is applied. `everysec`: the sync thread calls
//! `msync` once a second when something was written. `always`: a connection
//! that wrote takes a ticket before sending its replies and waits until a
//! sync that started after its writes has finished. The sync thread runs
//! one `msync` for all tickets issued before it starts (group commit), so
//! a thousand clients waiting at once cost one `msync`, and the connection
//! threads never block: they await on a watch channel.
//!
//! On real persistent memory (DAX) every write is power-fail durable when
//! the engine returns, so tickets are never needed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use crate::config::{Durability, Runtime};
use crate::keyspace::Keyspace;

const EVERYSEC: Duration = Duration::from_secs(1);
/// After a failed msync, wait this long before trying again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(100);

pub struct Durable {
    /// Tickets issued: each is a batch of writes waiting for a sync.
    issued: AtomicU64,
    /// The highest ticket covered by a finished sync.
    synced: watch::Sender<u64>,
    /// Written since the last sync (everysec).
    dirty: AtomicBool,
    wake: (Mutex<bool>, Condvar),
    pub syncs: AtomicU64,
    pub sync_failures: AtomicU64,
    /// Unix seconds of the last successful sync (LASTSAVE).
    pub last_sync_unix: AtomicU64,
    /// Writes since the last sync, as INFO's `rdb_changes_since_last_save`.
    pub changes_since_sync: AtomicU64,
}

impl Durable {
    pub fn new() -> Durable {
        Durable {
            issued: AtomicU64::new(0),
            synced: watch::Sender::new(0),
            dirty: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            syncs: AtomicU64::new(0),
            sync_failures: AtomicU64::new(0),
            last_sync_unix: AtomicU64::new(unix_now()),
            changes_since_sync: AtomicU64::new(0),
        }
    }

    /// Notes that a connection applied writes; returns the ticket to wait
    /// for when the reply must wait (`always` on emulated memory).
    pub fn wrote(&self, durability: Durability, dax: bool) -> Option<u64> {
        self.changes_since_sync.fetch_add(1, Ordering::Relaxed);
        if durability != Durability::Always || dax {
            self.dirty.store(true, Ordering::Relaxed);
            return None;
        }
        Some(self.ticket())
    }

    /// A ticket for everything written so far; wakes the sync thread.
    pub fn ticket(&self) -> u64 {
        // SeqCst: the ticket is ordered after the caller's writes, so a
        // sync that reads `issued` at or above it also covers them.
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        let mut pending = self.wake.0.lock();
        *pending = true;
        self.wake.1.notify_one();
        ticket
    }

    /// Blocks the calling network worker until everything written so far
    /// is synced, sharing the `msync` with every other waiter (the
    /// ordering barrier of multi-key batches under `always`). The runtime
    /// moves the worker's other tasks elsewhere meanwhile.
    pub fn barrier(&self) {
        let ticket = self.ticket();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(self.wait(ticket)))
            }
            _ => {
                let mut synced = self.synced.subscribe();
                while *synced.borrow_and_update() < ticket {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            }
        }
    }

    /// Resolves once a sync covering `ticket` has finished.
    pub async fn wait(&self, ticket: u64) {
        let mut synced = self.synced.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = synced.wait_for(|&done| done >= ticket).await;
    }

    /// Wakes the sync thread (shutdown).
    pub fn nudge(&self) {
        let mut pending = self.wake.0.lock();
        *pending = true;
        self.wake.1.notify_one();
    }
}

impl Default for Durable {
    fn default() -> Self {
        Durable::new()
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Syncs the data file and the collections' operation log now; records
/// the outcome.
pub fn sync_now(keyspace: &Keyspace, durable: &Durable) -> Result<(), crate::keyspace::Error> {
    durable.dirty.store(false, Ordering::Relaxed);
    let result = keyspace.sync();
    match &result {
        Ok(()) => {
            durable.syncs.fetch_add(1, Ordering::Relaxed);
            durable.last_sync_unix.store(unix_now(), Ordering::Relaxed);
            durable.changes_since_sync.store(0, Ordering::Relaxed);
        }
        Err(e) => {
            durable.dirty.store(true, Ordering::Relaxed);
            durable.sync_failures.fetch_add(1, Ordering::Relaxed);
            log::error!("msync of the data file failed: {e}; writes wait until it succeeds");
        }
    }
    result
}

/// The sync thread: group commit for `always`, the one-second sync for
/// `everysec`. Ends when `stop` is set (after a final sync of pending
/// tickets).
///
/// Not a background thread in [`engram_pmem::background`]'s sense: with
/// `always`, clients wait for its `msync`, so it may run on any core rather
/// than queue behind a checkpoint on the background ones.
pub fn spawn_sync_thread(
    keyspace: Arc<Keyspace>,
    durable: Arc<Durable>,
    runtime: Arc<Runtime>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("engram-sync".into())
        .spawn(move || {
            let mut last_periodic = Instant::now();
            loop {
                {
                    let mut pending = durable.wake.0.lock();
                    if !*pending {
                        durable.wake.1.wait_for(&mut pending, EVERYSEC / 4);
                    }
                    *pending = false;
                }
                let target = durable.issued.load(Ordering::SeqCst);
                if target > *durable.synced.borrow() {
                    match sync_now(&keyspace, &durable) {
                        Ok(()) => {
                            durable.synced.send_replace(target);
                        }
                        Err(_) => {
                            if stop.load(Ordering::Acquire) {
                                return;
                            }
                            std::thread::sleep(RETRY_AFTER_FAILURE);
                            durable.nudge();
                            continue;
                        }
                    }
                } else if runtime.durability() == Durability::Everysec
                    && last_periodic.elapsed() >= EVERYSEC
                    && durable.dirty.load(Ordering::Relaxed)
                {
                    last_periodic = Instant::now();
                    let _ = sync_now(&keyspace, &durable);
                }
                if stop.load(Ordering::Acquire)
                    && durable.issued.load(Ordering::SeqCst) <= *durable.synced.borrow()
                {
                    return;
                }
            }
        })
        .expect("spawning the sync thread")
}
