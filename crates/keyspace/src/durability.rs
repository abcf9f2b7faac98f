//! When an acknowledged write is durable: the keyspace's one group commit.
//!
//! Every writer of the keyspace (the server's connections, atomic batches'
//! intents, embedders) goes through this module; nothing above it syncs on
//! its own. One vocabulary, [`Durability`]: `process` (a write in the shared
//! mapping survives a process crash as soon as it is applied), `everysec`
//! (the sync thread calls `msync` once a second when something was written)
//! and `always` (a writer takes a [`Ticket`] before acknowledging and waits
//! until a sync that started after its writes has finished). Redis's
//! `appendfsync` names are a protocol matter, mapped at the server's edge.
//!
//! The sync thread runs one `msync` of both stores for every ticket issued
//! before it starts (group commit), so a thousand clients waiting at once
//! cost one `msync`. Waiters either await (network tasks: they never block
//! a worker) or block on a condition variable (embedders, intents).
//!
//! On real persistent memory (DAX) every write is power-fail durable when
//! the engine returns, so tickets are never needed.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

/// How long the sync thread sleeps when nothing asks it to sync (it checks
/// for `everysec` work and for shutdown this often).
const IDLE_WAKE: Duration = Duration::from_millis(250);
const EVERYSEC: Duration = Duration::from_secs(1);
/// How long a ticket from `wrote_deferred` may wait for its worker to
/// park before the sync thread syncs anyway.
const DEFERRED_PATIENCE: Duration = Duration::from_micros(500);
/// After a failed msync, wait this long before trying again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(100);

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Durability {
    /// Survives a process crash as soon as it is applied; the kernel writes
    /// pages back in its own time.
    #[default]
    Process = 0,
    /// Power-fail durable within about a second.
    Everysec = 1,
    /// Power-fail durable before the acknowledgement, with group commit:
    /// one `msync` covers every writer waiting at the time.
    Always = 2,
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::Process => "process",
            Durability::Everysec => "everysec",
            Durability::Always => "always",
        }
    }

    fn from_u8(v: u8) -> Durability {
        match v {
            1 => Durability::Everysec,
            2 => Durability::Always,
            _ => Durability::Process,
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(text: &str) -> Result<Durability, String> {
        match text.to_ascii_lowercase().as_str() {
            "process" => Ok(Durability::Process),
            "everysec" => Ok(Durability::Everysec),
            "always" => Ok(Durability::Always),
            _ => Err(format!(
                "unknown durability '{text}' (expected process, everysec or always)"
            )),
        }
    }
}

/// A place in the group commit's order: durable once a sync that read
/// `issued` at or above it has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

/// Sync counters for INFO and LASTSAVE.
#[derive(Default)]
pub struct SyncStats {
    pub syncs: AtomicU64,
    pub sync_failures: AtomicU64,
    /// Unix seconds of the last successful sync.
    pub last_sync_unix: AtomicU64,
    /// Writes since the last successful sync (Redis's
    /// `rdb_changes_since_last_save`).
    pub changes_since_sync: AtomicU64,
    /// Writes since start (each a batch a writer applied: one command,
    /// or a connection's pipelined writes acknowledged together).
    pub writes: AtomicU64,
    /// Over the last whole second the sync thread saw: syncs, and writes
    /// made durable per sync (f64 bits; 0 without a sync). INFO shows
    /// them; `always` batches many writers into one sync.
    pub syncs_last_second: AtomicU64,
    pub writes_per_sync_bits: AtomicU64,
}

impl SyncStats {
    /// Writes made durable per sync over the last second.
    pub fn writes_per_sync(&self) -> f64 {
        f64::from_bits(self.writes_per_sync_bits.load(Ordering::Relaxed))
    }
}

/// The sync thread's one-second window for [`SyncStats`]' rates.
struct RateWindow {
    started: Instant,
    syncs: u64,
    writes: u64,
}

impl RateWindow {
    fn new(stats: &SyncStats) -> RateWindow {
        RateWindow {
            started: Instant::now(),
            syncs: stats.syncs.load(Ordering::Relaxed),
            writes: stats.writes.load(Ordering::Relaxed),
        }
    }

    /// Publishes the rates once a second has passed, and starts again.
    fn roll(&mut self, stats: &SyncStats) {
        let elapsed = self.started.elapsed();
        if elapsed < Duration::from_secs(1) {
            return;
        }
        let now = RateWindow::new(stats);
        let syncs = now.syncs - self.syncs;
        let writes = now.writes - self.writes;
        let per_second = (syncs as f64 / elapsed.as_secs_f64()).round() as u64;
        stats.syncs_last_second.store(per_second, Ordering::Relaxed);
        let per_sync = if syncs == 0 {
            0.0
        } else {
            writes as f64 / syncs as f64
        };
        stats
            .writes_per_sync_bits
            .store(per_sync.to_bits(), Ordering::Relaxed);
        *self = now;
    }
}

pub struct GroupCommit {
    durability: AtomicU8,
    /// Real persistent memory: every write is durable on return.
    dax: bool,
    /// Tickets issued: each is a batch of writes waiting for a sync.
    issued: AtomicU64,
    /// The highest ticket covered by a finished sync, for async waiters.
    synced: watch::Sender<u64>,
    /// The same, for blocking waiters.
    synced_blocking: (Mutex<u64>, Condvar),
    /// Written since the last sync (everysec).
    dirty: AtomicBool,
    /// Asks the sync thread to look now rather than at its next wake.
    wake: (Mutex<bool>, Condvar),
    /// Tickets were issued without waking the sync thread
    /// (`wrote_deferred`): the next `before_park` wakes it.
    deferred: AtomicBool,
    /// The sync thread is in its long idle wait (a deferred ticket must
    /// shorten it).
    idle: AtomicBool,
    stopping: AtomicBool,
    pub stats: SyncStats,
}

impl GroupCommit {
    pub fn new(durability: Durability, dax: bool) -> GroupCommit {
        GroupCommit {
            durability: AtomicU8::new(durability as u8),
            dax,
            issued: AtomicU64::new(0),
            synced: watch::Sender::new(0),
            synced_blocking: (Mutex::new(0), Condvar::new()),
            dirty: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            deferred: AtomicBool::new(false),
            idle: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            stats: SyncStats {
                last_sync_unix: AtomicU64::new(unix_now()),
                ..SyncStats::default()
            },
        }
    }

    pub fn durability(&self) -> Durability {
        Durability::from_u8(self.durability.load(Ordering::Relaxed))
    }

    /// Takes effect for writes acknowledged from now on.
    pub fn set_durability(&self, durability: Durability) {
        self.durability.store(durability as u8, Ordering::Relaxed);
    }

    pub fn is_dax(&self) -> bool {
        self.dax
    }

    /// Whether an acknowledgement must wait for a sync (`always` on
    /// emulated memory).
    pub fn must_wait(&self) -> bool {
        self.durability() == Durability::Always && !self.dax
    }

    /// Notes that a batch of writes was applied; returns the ticket to wait
    /// for before acknowledging it, when one is needed.
    pub fn wrote(&self) -> Option<Ticket> {
        self.count_write().then(|| self.ticket())
    }

    /// Counts a batch of writes; whether its acknowledgement must wait for
    /// a sync (if not, the periodic sync is told there is something to
    /// write).
    fn count_write(&self) -> bool {
        self.stats
            .changes_since_sync
            .fetch_add(1, Ordering::Relaxed);
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        if !self.must_wait() {
            self.dirty.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// As `wrote`, but the sync thread is not woken now: the network
    /// worker that ran the write calls `before_park` once it has run every
    /// connection that was ready, so one `msync` covers all of them, as
    /// Redis's one `fsync` before its event loop sleeps covers every client
    /// served in that pass. (Waking it at each ticket started a sync for
    /// the first writer of a pass and left the rest to the next one.) If
    /// the worker never parks, the sync thread looks every
    /// `DEFERRED_PATIENCE` while such tickets wait.
    pub fn wrote_deferred(&self) -> Option<Ticket> {
        if !self.count_write() {
            return None;
        }
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        self.deferred.store(true, Ordering::SeqCst);
        // Dekker with the sync thread's idle check (both SeqCst): it saw
        // the flag above, or we see it idle and cut its wait short (under
        // its lock: it checks the flag and starts waiting under it too, so
        // the notification cannot fall between the two).
        if self.idle.load(Ordering::SeqCst) {
            let _lock = self.wake.0.lock();
            self.wake.1.notify_one();
        }
        Some(Ticket(ticket))
    }

    /// A network worker is about to sleep: wakes the sync thread for the
    /// tickets `wrote_deferred` left (one relaxed load when there are none).
    pub fn before_park(&self) {
        if self.deferred.load(Ordering::Relaxed) && self.deferred.swap(false, Ordering::SeqCst) {
            self.nudge();
        }
    }

    /// A ticket for everything written so far; wakes the sync thread.
    pub fn ticket(&self) -> Ticket {
        // SeqCst: the ticket is ordered after the caller's writes, so a
        // sync that reads `issued` at or above it also covers them.
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        self.nudge();
        Ticket(ticket)
    }

    /// Resolves once a sync covering `ticket` has finished.
    pub async fn wait(&self, ticket: Ticket) {
        let mut synced = self.synced.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = synced.wait_for(|&done| done >= ticket.0).await;
    }

    /// Blocks until a sync covering `ticket` has finished.
    pub fn wait_blocking(&self, ticket: Ticket) {
        let (lock, done) = &self.synced_blocking;
        let mut synced = lock.lock();
        while *synced < ticket.0 {
            done.wait(&mut synced);
        }
    }

    /// Blocks until everything written so far is synced, sharing the
    /// `msync` with every other waiter (the ordering point of atomic
    /// batches under `always`). On a tokio worker the runtime moves the
    /// worker's other tasks elsewhere meanwhile.
    pub fn barrier(&self) {
        self.block_until(self.ticket());
    }

    /// Blocks the calling thread until `ticket` is covered; on a tokio
    /// worker the runtime moves the worker's other tasks elsewhere meanwhile.
    pub fn block_until(&self, ticket: Ticket) {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| self.wait_blocking(ticket))
            }
            _ => self.wait_blocking(ticket),
        }
    }

    /// Wakes the sync thread.
    pub fn nudge(&self) {
        let mut pending = self.wake.0.lock();
        *pending = true;
        self.wake.1.notify_one();
    }

    /// Runs `sync` (both stores' `msync`) and records the outcome.
    pub fn sync_with<E: std::fmt::Display>(
        &self,
        sync: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        self.dirty.store(false, Ordering::Relaxed);
        let result = sync();
        match &result {
            Ok(()) => {
                self.stats.syncs.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .last_sync_unix
                    .store(unix_now(), Ordering::Relaxed);
                self.stats.changes_since_sync.store(0, Ordering::Relaxed);
            }
            Err(e) => {
                self.dirty.store(true, Ordering::Relaxed);
                self.stats.sync_failures.fetch_add(1, Ordering::Relaxed);
                log::error!("msync of the data files failed: {e}; writes wait until it succeeds");
            }
        }
        result
    }

    fn publish_synced(&self, target: u64) {
        self.synced.send_replace(target);
        let (lock, done) = &self.synced_blocking;
        *lock.lock() = target;
        done.notify_all();
    }

    /// Asks the sync thread to finish: it syncs what tickets are pending,
    /// then returns.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.nudge();
    }

    /// The sync thread's loop: group commit for `always`, the one-second
    /// sync for `everysec`. `sync` returns `None`, and `alive` false, when
    /// the stores are gone. Ends then, or after [`GroupCommit::stop`] once
    /// no ticket is pending.
    pub(crate) fn run<E: std::fmt::Display>(
        &self,
        sync: impl Fn() -> Option<Result<(), E>>,
        alive: impl Fn() -> bool,
    ) {
        let mut last_periodic = Instant::now();
        let mut window = RateWindow::new(&self.stats);
        // Tickets came while the last sync ran: the next sync starts at
        // once (pipelined group commit); the wait for a worker's park is
        // only for the first writes after an idle moment.
        let mut again = false;
        loop {
            window.roll(&self.stats);
            if !alive() {
                return;
            }
            {
                let mut pending = self.wake.0.lock();
                if !*pending && !again {
                    self.idle.store(true, Ordering::SeqCst);
                    if !self.deferred.load(Ordering::SeqCst) {
                        self.wake.1.wait_for(&mut pending, IDLE_WAKE);
                    }
                    self.idle.store(false, Ordering::SeqCst);
                    // Deferred tickets: until a worker parks (`nudge`), or
                    // the patience runs out.
                    if !*pending && self.deferred.load(Ordering::SeqCst) {
                        self.wake.1.wait_for(&mut pending, DEFERRED_PATIENCE);
                    }
                }
                *pending = false;
            }
            again = false;
            // Before `issued` is read: a deferred ticket after this load
            // raises the flag again, and the next wait is short.
            self.deferred.store(false, Ordering::SeqCst);
            let target = self.issued.load(Ordering::SeqCst);
            if target > *self.synced.borrow() {
                match sync() {
                    None => return,
                    Some(Ok(())) => {
                        self.publish_synced(target);
                        again = self.issued.load(Ordering::SeqCst) > target;
                        continue;
                    }
                    Some(Err(_)) => {
                        if self.stopping.load(Ordering::Acquire) {
                            return;
                        }
                        std::thread::sleep(RETRY_AFTER_FAILURE);
                        self.nudge();
                        continue;
                    }
                }
            } else if self.durability() == Durability::Everysec
                && last_periodic.elapsed() >= EVERYSEC
                && self.dirty.load(Ordering::Relaxed)
            {
                last_periodic = Instant::now();
                if sync().is_none() {
                    return;
                }
            }
            if self.stopping.load(Ordering::Acquire)
                && self.issued.load(Ordering::SeqCst) <= *self.synced.borrow()
            {
                return;
            }
        }
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn durability_names_round_trip_and_redis_names_are_not_ours() {
        for d in [
            Durability::Process,
            Durability::Everysec,
            Durability::Always,
        ] {
            assert_eq!(d.name().parse::<Durability>(), Ok(d));
        }
        let error = "no".parse::<Durability>().unwrap_err();
        assert!(error.contains("unknown durability 'no'"), "{error}");
    }

    #[test]
    fn only_always_on_emulated_memory_takes_tickets() {
        let emulated = GroupCommit::new(Durability::Process, false);
        assert_eq!(emulated.wrote(), None);
        emulated.set_durability(Durability::Everysec);
        assert_eq!(emulated.wrote(), None);
        emulated.set_durability(Durability::Always);
        assert!(emulated.wrote().is_some());
        let dax = GroupCommit::new(Durability::Always, true);
        assert_eq!(dax.wrote(), None);
        assert_eq!(emulated.stats.changes_since_sync.load(Ordering::Relaxed), 3);
    }

    /// A sync thread for `commit` whose syncs take `takes` and are
    /// counted.
    fn sync_thread(
        commit: &Arc<GroupCommit>,
        takes: Duration,
    ) -> (Arc<AtomicU64>, std::thread::JoinHandle<()>) {
        let syncs = Arc::new(AtomicU64::new(0));
        let (commit, counted) = (commit.clone(), syncs.clone());
        let thread = std::thread::spawn(move || {
            commit.run(
                || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(takes);
                    Some(Ok::<(), String>(()))
                },
                || true,
            )
        });
        (syncs, thread)
    }

    /// Many blocking waiters are released by few syncs, and none before a
    /// sync that started after its ticket.
    #[test]
    fn one_sync_covers_every_ticket_issued_before_it() {
        let commit = Arc::new(GroupCommit::new(Durability::Always, false));
        let (syncs, thread) = sync_thread(&commit, Duration::from_millis(5));
        let waiters: Vec<_> = (0..32)
            .map(|_| {
                let commit = commit.clone();
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        commit.barrier();
                    }
                })
            })
            .collect();
        for waiter in waiters {
            waiter.join().unwrap();
        }
        let synced = syncs.load(Ordering::SeqCst);
        assert!(synced >= 10, "each waiter's barriers need their own syncs");
        assert!(synced < 320, "syncs were shared: {synced} for 320 barriers");
        commit.stop();
        thread.join().unwrap();
    }

    /// A failed sync releases nobody; the retry that succeeds does.
    #[test]
    fn a_failed_sync_is_retried_before_waiters_are_released() {
        let commit = Arc::new(GroupCommit::new(Durability::Always, false));
        let attempts = Arc::new(AtomicU64::new(0));
        let thread = {
            let (commit, attempts) = (commit.clone(), attempts.clone());
            std::thread::spawn(move || {
                commit.run(
                    || {
                        let n = attempts.fetch_add(1, Ordering::SeqCst);
                        Some(if n == 0 {
                            Err("disk".to_string())
                        } else {
                            Ok(())
                        })
                    },
                    || true,
                )
            })
        };
        let ticket = commit.ticket();
        commit.wait_blocking(ticket);
        assert!(attempts.load(Ordering::SeqCst) >= 2);
        commit.stop();
        thread.join().unwrap();
    }

    /// A deferred ticket does not wake the sync thread: `before_park`
    /// does, and without it the sync thread looks on its own within
    /// `DEFERRED_PATIENCE` (a worker that never parks still gets its
    /// writes synced). Tickets deferred together share one sync.
    #[test]
    fn deferred_tickets_are_synced_at_the_park_or_after_the_patience() {
        let commit = Arc::new(GroupCommit::new(Durability::Always, false));
        let (syncs, thread) = sync_thread(&commit, Duration::ZERO);
        // Let the sync thread settle into its idle wait.
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        let tickets: Vec<Ticket> = (0..8).map(|_| commit.wrote_deferred().unwrap()).collect();
        commit.before_park();
        commit.wait_blocking(tickets[7]);
        assert!(started.elapsed() < IDLE_WAKE / 2, "{:?}", started.elapsed());
        // One sync for the pass (two if this thread lost the CPU for the
        // patience between two tickets), not one each.
        let pass = syncs.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&pass),
            "{pass} syncs for 8 deferred tickets"
        );
        commit.before_park();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            syncs.load(Ordering::SeqCst),
            pass,
            "a park with nothing deferred syncs nothing"
        );

        // No park: the patience, not the idle wake (250 ms), bounds the wait.
        let started = Instant::now();
        let ticket = commit.wrote_deferred().unwrap();
        commit.wait_blocking(ticket);
        assert!(started.elapsed() < IDLE_WAKE / 2, "{:?}", started.elapsed());
        assert_eq!(syncs.load(Ordering::SeqCst), pass + 1);
        commit.stop();
        thread.join().unwrap();
    }
}
