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
//! One `msync` of both stores covers every ticket issued before it starts
//! (group commit), so a thousand clients waiting at once cost one `msync`.
//! Two kinds of waiter share it:
//!
//! - A network task (`wait`) leads: it lets its worker run every other
//!   ready task first, then, unless a sync already covers it, runs the
//!   `msync` itself on its worker (Redis's `fsync` in `beforeSleep`, on
//!   the thread that served the writes) and wakes the others. No thread
//!   hand-off and no cross-thread wake-up per sync. Before it syncs it
//!   gathers: it waits, for part of a sync's length, until the writers
//!   the last sync released have written again, so that clients waiting
//!   for their replies share one sync instead of taking turns.
//! - A blocking waiter (embedders, intents) asks the sync thread, which
//!   also runs `everysec`'s periodic sync.
//!
//! `sync_lock` makes the syncs one at a time, whoever runs them.
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
/// After a failed msync, wait this long before trying again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(100);
/// A leader gathers its group for at most half the last sync's length,
/// and never longer than this; below `MIN_GATHER` it does not wait.
const MAX_GATHER: Duration = Duration::from_millis(2);
const MIN_GATHER: Duration = Duration::from_micros(10);
/// `gather_goal` while no leader gathers: no ticket reaches it.
const NOBODY_GATHERS: u64 = u64::MAX;

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

/// What syncs both stores, for a leading waiter or the sync thread:
/// `None` once the stores are gone (the keyspace holds itself weakly
/// here).
pub type SyncFn = Box<dyn Fn() -> Option<Result<(), String>> + Send + Sync>;

pub struct GroupCommit {
    /// The rule in force.
    durability: AtomicU8,
    /// The rule last asked for (the configuration, CONFIG SET): the one in
    /// force unless the stores cannot follow it until they are opened
    /// again (`Keyspace::set_durability`); a reopening takes it.
    requested: AtomicU8,
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
    /// Held for the length of every sync, by the sync thread or a leading
    /// waiter: syncs never overlap, and `synced` only grows.
    sync_lock: Mutex<()>,
    /// How both stores are synced, by a leading waiter or the sync thread.
    sync: SyncFn,
    /// The gathering leader sleeps here until the ticket `gather_goal`
    /// is issued ([`GroupCommit::gather`]).
    gather: (Mutex<()>, Condvar),
    gather_goal: AtomicU64,
    /// Writers one sync should cover: the last sync covered some and
    /// others took tickets while it ran; with clients that wait for each
    /// reply, both come back for the next.
    group_size: AtomicU64,
    /// How long the last sync took (nanoseconds): waiting for the whole
    /// group may cost at most half of it.
    last_sync_nanos: AtomicU64,
    stopping: AtomicBool,
    pub stats: SyncStats,
}

impl GroupCommit {
    pub fn new(durability: Durability, dax: bool, sync: SyncFn) -> GroupCommit {
        GroupCommit {
            durability: AtomicU8::new(durability as u8),
            requested: AtomicU8::new(durability as u8),
            dax,
            issued: AtomicU64::new(0),
            synced: watch::Sender::new(0),
            synced_blocking: (Mutex::new(0), Condvar::new()),
            dirty: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            sync_lock: Mutex::new(()),
            sync,
            gather: (Mutex::new(()), Condvar::new()),
            gather_goal: AtomicU64::new(NOBODY_GATHERS),
            group_size: AtomicU64::new(0),
            last_sync_nanos: AtomicU64::new(0),
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

    /// The rule last asked for, which the stores take when next opened
    /// (the one in force, [`GroupCommit::durability`], unless a staged
    /// keyspace keeps `always` until then).
    pub fn requested(&self) -> Durability {
        Durability::from_u8(self.requested.load(Ordering::Relaxed))
    }

    pub(crate) fn request(&self, durability: Durability) {
        self.requested.store(durability as u8, Ordering::Relaxed);
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

    /// As `wrote`, for a waiter that will `wait` (lead): the sync thread
    /// is not woken.
    pub fn wrote_leading(&self) -> Option<Ticket> {
        if !self.count_write() {
            return None;
        }
        // SeqCst: ordered after the caller's writes, as in `ticket`.
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        self.completes_group(ticket);
        Some(Ticket(ticket))
    }

    /// Wakes the gathering leader when `ticket` completes its group.
    fn completes_group(&self, ticket: u64) {
        // SeqCst, as the leader's store of the goal and load of `issued`:
        // either it sees this ticket, or this sees its goal.
        if ticket >= self.gather_goal.load(Ordering::SeqCst) {
            let _gathering = self.gather.0.lock();
            self.gather.1.notify_one();
        }
    }

    /// A ticket for everything written so far; wakes the sync thread.
    pub fn ticket(&self) -> Ticket {
        // SeqCst: the ticket is ordered after the caller's writes, so a
        // sync that reads `issued` at or above it also covers them.
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        self.completes_group(ticket);
        self.nudge();
        Ticket(ticket)
    }

    /// Resolves once a sync covering `ticket` has finished; this task runs
    /// that sync itself unless another sync covers it.
    ///
    /// First it yields: tokio wakes a yielded task only after its worker
    /// has run every other ready task and polled for new I/O, so the
    /// writes of every client this worker served in this pass have their
    /// tickets by then, and the first of their tasks to run syncs for all
    /// of them. The `msync` blocks this worker (the other may take its
    /// queued tasks meanwhile), as Redis's `fsync` blocks its event loop:
    /// a hand-off to another thread and back cost more CPU than the sync
    /// itself on a machine whose cores the clients share.
    pub async fn wait(&self, ticket: Ticket) {
        let mut synced = self.synced.subscribe();
        if *synced.borrow_and_update() >= ticket.0 {
            return;
        }
        tokio::task::yield_now().await;
        loop {
            if *synced.borrow_and_update() >= ticket.0 {
                return;
            }
            let led = match self.sync_lock.try_lock() {
                Some(_one_at_a_time) if !self.stopping.load(Ordering::Acquire) => {
                    self.gather();
                    Some(self.sync_and_publish())
                }
                _ => None,
            };
            match led {
                // Published: the loop's check sees it.
                Some(Some(Ok(()))) => continue,
                // The sync thread retries (after a pause, until it
                // succeeds) and publishes; so does a sync running now.
                // Stores closing: the sync thread's last sync publishes.
                Some(Some(Err(_))) => {
                    self.nudge();
                    let _ = synced.changed().await;
                }
                Some(None) | None => {
                    let _ = synced.changed().await;
                }
            }
        }
    }

    /// Under `sync_lock`, before a leader's sync: waits (blocking this
    /// worker, as the sync itself will) until the writers the last sync
    /// saw have all taken tickets again, for at most half the last sync's
    /// length.
    ///
    /// When the sync is the disk's flush, its length hardly depends on
    /// how many writes it covers, and clients that wait for each reply
    /// come back within a round trip. Syncing at once would cover only
    /// those that wrote during the last sync: the clients split into
    /// groups that take turns, each sync covering a part of them (issue
    /// 25: 22 writes per sync where Redis has 50, under 50 clients).
    /// Waiting part of a sync's length for the rest costs less than the
    /// extra sync. Redis's event loop gets the same shape by reading
    /// every ready client before its one `fsync`.
    ///
    /// Only with another worker to serve the clients meanwhile. An
    /// asynchronous wait that leaves this worker serving was tried and
    /// gathered smaller groups, measured on a loaded machine only
    /// (BENCHMARKS.md, 2026-11-29): worth measuring again.
    fn gather(&self) {
        let group = self.group_size.load(Ordering::Relaxed);
        let goal = *self.synced.borrow() + group;
        if group <= 1 || self.issued.load(Ordering::SeqCst) >= goal {
            return;
        }
        let patience = (Duration::from_nanos(self.last_sync_nanos.load(Ordering::Relaxed)) / 2)
            .min(MAX_GATHER);
        let other_worker = tokio::runtime::Handle::try_current()
            .is_ok_and(|handle| handle.metrics().num_workers() > 1);
        if patience < MIN_GATHER || !other_worker {
            return;
        }
        let deadline = Instant::now() + patience;
        let mut gathering = self.gather.0.lock();
        self.gather_goal.store(goal, Ordering::SeqCst);
        while self.issued.load(Ordering::SeqCst) < goal {
            if self
                .gather
                .1
                .wait_until(&mut gathering, deadline)
                .timed_out()
            {
                break;
            }
        }
        self.gather_goal.store(NOBODY_GATHERS, Ordering::SeqCst);
    }

    /// Under `sync_lock`: syncs what was issued so far and publishes it.
    /// `None` when the stores are gone.
    fn sync_and_publish(&self) -> Option<Result<(), String>> {
        let synced = *self.synced.borrow();
        let target = self.issued.load(Ordering::SeqCst);
        if target <= synced {
            return Some(Ok(()));
        }
        let started = Instant::now();
        let result = (self.sync)()?;
        if result.is_ok() {
            // Before the release: the writers it lets go do not count
            // twice when they write again.
            let during = self.issued.load(Ordering::SeqCst) - target;
            let took = started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            self.last_sync_nanos.store(took, Ordering::Relaxed);
            self.group_size
                .store(target - synced + during, Ordering::Relaxed);
            self.publish_synced(target);
        }
        Some(result)
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
        self.synced.send_if_modified(|synced| {
            let newer = target > *synced;
            if newer {
                *synced = target;
            }
            newer
        });
        let (lock, done) = &self.synced_blocking;
        let mut synced = lock.lock();
        *synced = (*synced).max(target);
        done.notify_all();
    }

    /// Asks the sync thread to finish: it syncs what tickets are pending,
    /// then returns. Leading waiters stop syncing: once this returns no
    /// sync of theirs is running, so the stores can close.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        drop(self.sync_lock.lock());
        self.nudge();
    }

    /// The sync thread's loop: group commit for blocking waiters and
    /// retries, the one-second sync for `everysec`. The sync returns
    /// `None`, and `alive` false, when the stores are gone. Ends then, or
    /// after [`GroupCommit::stop`] once no ticket is pending.
    pub(crate) fn run(&self, alive: impl Fn() -> bool) {
        let mut last_periodic = Instant::now();
        let mut window = RateWindow::new(&self.stats);
        loop {
            window.roll(&self.stats);
            if !alive() {
                return;
            }
            {
                let mut pending = self.wake.0.lock();
                if !*pending {
                    self.wake.1.wait_for(&mut pending, IDLE_WAKE);
                }
                *pending = false;
            }
            if self.issued.load(Ordering::SeqCst) > *self.synced.borrow() {
                let outcome = {
                    let _one_at_a_time = self.sync_lock.lock();
                    self.sync_and_publish()
                };
                match outcome {
                    None => return,
                    Some(Ok(())) => {}
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
                let _one_at_a_time = self.sync_lock.lock();
                if (self.sync)().is_none() {
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
        let emulated = GroupCommit::new(Durability::Process, false, Box::new(|| Some(Ok(()))));
        assert_eq!(emulated.wrote(), None);
        emulated.set_durability(Durability::Everysec);
        assert_eq!(emulated.wrote(), None);
        emulated.set_durability(Durability::Always);
        assert!(emulated.wrote().is_some());
        let dax = GroupCommit::new(Durability::Always, true, Box::new(|| Some(Ok(()))));
        assert_eq!(dax.wrote(), None);
        assert_eq!(emulated.stats.changes_since_sync.load(Ordering::Relaxed), 3);
    }

    /// Many blocking waiters are released by few syncs, and none before a
    /// sync that started after its ticket.
    #[test]
    fn one_sync_covers_every_ticket_issued_before_it() {
        let probe = Arc::new(Probe::default());
        let (commit, thread) = probe.commit(Duration::from_millis(5));
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
        let synced = probe.syncs.load(Ordering::SeqCst);
        assert!(synced >= 10, "each waiter's barriers need their own syncs");
        assert!(synced < 320, "syncs were shared: {synced} for 320 barriers");
        commit.stop();
        thread.join().unwrap();
    }

    /// A failed sync releases nobody; the retry that succeeds does.
    #[test]
    fn a_failed_sync_is_retried_before_waiters_are_released() {
        let probe = Arc::new(Probe::default());
        probe.failures_left.store(1, Ordering::SeqCst);
        let (commit, thread) = probe.commit(Duration::ZERO);
        probe.issued.fetch_add(1, Ordering::SeqCst);
        let ticket = commit.ticket();
        commit.wait_blocking(ticket);
        assert_eq!(probe.failures_left.load(Ordering::SeqCst), 0);
        assert!(
            probe.covered.load(Ordering::SeqCst) >= 1,
            "released before a sync covered it"
        );
        commit.stop();
        thread.join().unwrap();
    }

    const SYNC_THREAD: &str = "test-sync";

    fn start_sync_thread(commit: Arc<GroupCommit>) -> std::thread::JoinHandle<()> {
        std::thread::Builder::new()
            .name(SYNC_THREAD.into())
            .spawn(move || commit.run(|| true))
            .unwrap()
    }

    /// What a test's sync function saw: syncs run (and how many of them
    /// by leading waiters, not the sync thread), the tickets the test had
    /// issued when the last one started (so a waiter can check it was not
    /// released early), and whether two syncs ever overlapped.
    #[derive(Default)]
    struct Probe {
        syncs: AtomicU64,
        led: AtomicU64,
        issued: AtomicU64,
        covered: AtomicU64,
        running: AtomicBool,
        overlapped: AtomicBool,
        failures_left: AtomicU64,
    }

    impl Probe {
        /// A sync that takes `takes`, and fails while `failures_left` is
        /// above zero.
        fn sync(&self, takes: Duration) -> Option<Result<(), String>> {
            if self.running.swap(true, Ordering::SeqCst) {
                self.overlapped.store(true, Ordering::SeqCst);
            }
            let covers = self.issued.load(Ordering::SeqCst);
            std::thread::sleep(takes);
            self.running.store(false, Ordering::SeqCst);
            if self.failures_left.load(Ordering::SeqCst) > 0 {
                self.failures_left.fetch_sub(1, Ordering::SeqCst);
                return Some(Err("disk".to_string()));
            }
            self.syncs.fetch_add(1, Ordering::SeqCst);
            if std::thread::current().name() != Some(SYNC_THREAD) {
                self.led.fetch_add(1, Ordering::SeqCst);
            }
            self.covered.fetch_max(covers, Ordering::SeqCst);
            Some(Ok(()))
        }

        /// A group commit at `always` whose syncs (by leaders and by the
        /// sync thread returned beside it) take `takes` and are recorded
        /// here.
        fn commit(
            self: &Arc<Probe>,
            takes: Duration,
        ) -> (Arc<GroupCommit>, std::thread::JoinHandle<()>) {
            let commit = self.commit_alone(takes);
            (commit.clone(), start_sync_thread(commit))
        }

        /// As `commit`, with no sync thread yet.
        fn commit_alone(self: &Arc<Probe>, takes: Duration) -> Arc<GroupCommit> {
            let probe = self.clone();
            Arc::new(GroupCommit::new(
                Durability::Always,
                false,
                Box::new(move || probe.sync(takes)),
            ))
        }

        /// `writers` tasks on one worker, each writing once and waiting.
        fn writers_on_one_worker(self: &Arc<Probe>, commit: &Arc<GroupCommit>, writers: u64) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            self.writers_on(runtime, commit, writers, 1);
        }

        /// `writers` tasks on two workers, each writing and waiting
        /// `rounds` times, one write after the other (clients that wait
        /// for each reply).
        fn writers_on_two_workers(
            self: &Arc<Probe>,
            commit: &Arc<GroupCommit>,
            writers: u64,
            rounds: u64,
        ) {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            self.writers_on(runtime, commit, writers, rounds);
        }

        fn writers_on(
            self: &Arc<Probe>,
            runtime: tokio::runtime::Runtime,
            commit: &Arc<GroupCommit>,
            writers: u64,
            rounds: u64,
        ) {
            runtime.block_on(async {
                let tasks: Vec<_> = (0..writers)
                    .map(|_| {
                        let (commit, probe) = (commit.clone(), self.clone());
                        tokio::spawn(async move {
                            for _ in 0..rounds {
                                probe.write_and_wait(&commit).await;
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.unwrap();
                }
            });
        }

        /// A write and its wait, as a network task does them; checks that
        /// a sync started after the write finished before the release
        /// (counted before the ticket is taken: a sync that covers the
        /// ticket then sees the count).
        async fn write_and_wait(&self, commit: &GroupCommit) {
            let mine = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
            let ticket = commit.wrote_leading().expect("always takes tickets");
            commit.wait(ticket).await;
            assert!(
                self.covered.load(Ordering::SeqCst) >= mine,
                "released before a sync covered write {mine}"
            );
        }
    }

    /// Tasks that write in one pass of their worker share one sync, run
    /// by the first of them: no sync thread is involved.
    #[test]
    fn a_worker_s_writers_in_one_pass_share_the_sync_one_of_them_runs() {
        let probe = Arc::new(Probe::default());
        let (commit, thread) = probe.commit(Duration::from_millis(1));
        probe.writers_on_one_worker(&commit, 8);
        assert_eq!(probe.syncs.load(Ordering::SeqCst), 1, "one pass, one sync");
        assert_eq!(probe.led.load(Ordering::SeqCst), 1, "run by a writer");
        commit.stop();
        thread.join().unwrap();
    }

    /// Two workers' writers and a blocking waiter at once: every release
    /// follows a sync that covers it, syncs never overlap, and they are
    /// shared.
    #[test]
    fn leaders_and_the_sync_thread_never_overlap_and_release_nobody_early() {
        let probe = Arc::new(Probe::default());
        let (commit, thread) = probe.commit(Duration::from_micros(300));
        let blocking = {
            let commit = commit.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    commit.barrier();
                }
            })
        };
        probe.writers_on_two_workers(&commit, 32, 20);
        blocking.join().unwrap();
        assert!(
            !probe.overlapped.load(Ordering::SeqCst),
            "two syncs ran at once"
        );
        let syncs = probe.syncs.load(Ordering::SeqCst);
        assert!(
            syncs >= 20,
            "each task's writes follow one another: {syncs}"
        );
        assert!(syncs < 640, "syncs were shared: {syncs} for 640 writes");
        commit.stop();
        thread.join().unwrap();
    }

    /// Writers that each wait for their reply before writing again, on
    /// two workers, with a sync as slow as a disk's flush: a leader waits
    /// for the writers the last sync released to write again, so one sync
    /// covers them all rather than the groups taking turns (half of them
    /// each, a sync each).
    #[test]
    fn a_leader_gathers_every_writer_the_last_sync_released() {
        const WRITERS: u64 = 16;
        const ROUNDS: u64 = 12;
        let probe = Arc::new(Probe::default());
        let (commit, thread) = probe.commit(Duration::from_millis(4));
        probe.writers_on_two_workers(&commit, WRITERS, ROUNDS);
        let syncs = probe.syncs.load(Ordering::SeqCst);
        // Taking turns: two syncs a round. Gathered: one, and a few
        // more while the first syncs teach the leader the group's size.
        assert!(
            syncs <= ROUNDS + ROUNDS / 2,
            "{syncs} syncs for {ROUNDS} rounds of {WRITERS} writers"
        );
        assert!(!probe.overlapped.load(Ordering::SeqCst));
        commit.stop();
        thread.join().unwrap();
    }

    /// A leader whose sync fails releases nobody: it hands the retries to
    /// the sync thread, whose success (after a pause) releases them all;
    /// a failing disk is not retried in a loop by every waiter.
    #[test]
    fn a_leader_s_failed_sync_is_retried_before_anyone_is_released() {
        let probe = Arc::new(Probe::default());
        // More failures than waiters: each waiter leads at most one
        // attempt (then waits for a publish), so the sync thread meets a
        // failure too and pauses before the retry that succeeds.
        probe.failures_left.store(5, Ordering::SeqCst);
        let (commit, thread) = probe.commit(Duration::ZERO);
        let started = Instant::now();
        probe.writers_on_one_worker(&commit, 4);
        assert_eq!(probe.failures_left.load(Ordering::SeqCst), 0);
        assert_eq!(probe.syncs.load(Ordering::SeqCst), 1);
        assert!(
            started.elapsed() >= RETRY_AFTER_FAILURE,
            "{:?}",
            started.elapsed()
        );
        commit.stop();
        thread.join().unwrap();
    }

    /// Once `stop` has returned no leader syncs (the stores may close):
    /// the sync thread's last sync releases a waiter instead.
    #[test]
    fn after_stop_waiters_are_released_by_the_sync_thread_s_last_sync() {
        let probe = Arc::new(Probe::default());
        let commit = probe.commit_alone(Duration::ZERO);
        let ticket = commit.wrote_leading().unwrap();
        commit.stop();
        let thread = start_sync_thread(commit.clone());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(commit.wait(ticket));
        thread.join().unwrap();
        assert_eq!(
            probe.led.load(Ordering::SeqCst),
            0,
            "a leader synced after stop"
        );
        assert_eq!(probe.syncs.load(Ordering::SeqCst), 1);
    }
}
