//! The network loops: one tokio runtime of one worker per core, and how
//! many of them serve clients right now.
//!
//! Redis serves every client from one event loop. A tokio runtime with a
//! worker per core instead spreads the clients' tasks over every core and
//! wakes an idle worker whenever work is queued: with many clients each
//! sending one command at a time, and the clients on the same machine, the
//! second worker takes the clients' core and each request pays the
//! wake-ups (the sixteenth session's `--threads 1` figures: one worker won
//! every `-P 1` cell by 4–19% with 6–13% less CPU per request). With
//! pipelined clients the server needs more than a core, and a second
//! worker wins by 35–60%. Neither is right everywhere, so the number of
//! loops in use follows the load:
//!
//! - Every loop is a multi-threaded runtime of one worker (so that
//!   `block_in_place` hands a long script's other tasks on, as before).
//!   A connection has a rank, given at accept; its home is loop `rank mod
//!   active`. Between two reads (nothing pending, nothing buffered to
//!   send) a plain-TCP connection not at home moves there: its socket
//!   leaves this loop's reactor and joins the other's (`Stream::detach`).
//!   TLS connections stay where they were accepted.
//! - `Controller` (its own thread, every [`TICK`]) measures each loop's
//!   busy share (the workers' park and unpark hooks) and the commands
//!   served. When the loops in use are busy, it *tries* one more: it
//!   compares the commands served per second before and after and keeps
//!   the change only if it served [`GAIN`] more; likewise one fewer, kept
//!   unless it serves less. A trial that lost is not repeated for a while
//!   (doubling, up to [`MAX_BACKOFF`]), unless the load changes.
//!
//! As in Redis, a slow command delays the other clients of its loop (a
//! script hands them to a fresh thread after 2 ms, `run::hand_off_if_long`);
//! a runtime of several workers let them steal the queued ones.
//!
//! `DEBUG NET-LOOPS <n>` fixes the count (0: adaptive again), for tests
//! and for measuring either setting.
//!
//! Not at `always`: there a writer's reply waits for the group commit's
//! `msync`, which the first waiting task runs on its own worker, and a
//! loop pinned to its clients would stall them all for it. A server
//! started at `always` has one runtime of a worker per core instead (one
//! "loop", `shared`), whose other workers take the stalled worker's
//! clients meanwhile (`SET -P 1` at `always`: 40–49K/s shared, 35–37K/s
//! in loops, one or two of them).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, Runtime};

/// How often the controller looks: often, since a benchmark's run (and
/// many a burst of real load) lasts well under a second.
const TICK: Duration = Duration::from_millis(10);
/// Ticks a change settles before it is measured, and ticks measured (also
/// the window the busy shares and the served rate are taken over).
const SETTLE_TICKS: u32 = 2;
const MEASURE_TICKS: u32 = 6;
/// The busy share of the loops in use above which one more is tried.
const BUSY: f64 = 0.85;
/// A trial of one more loop must serve this much more to be kept; a trial
/// of one fewer is kept unless it serves less than this share.
const GAIN: f64 = 1.08;
const KEEP_FEWER: f64 = 0.97;
/// First waits before a losing trial of one more (.0) or one fewer (.1)
/// loop is tried again (each loss doubles it), and the longest. Fewer is
/// tried less eagerly: a loaded server that needs its loops loses a
/// fifth or more of its throughput for the trial's length.
const FIRST_BACKOFF: [Duration; 2] = [Duration::from_millis(250), Duration::from_secs(1)];
const MAX_BACKOFF: Duration = Duration::from_secs(20);

thread_local! {
    /// The loop this thread works for (set when a loop's thread starts,
    /// `block_in_place`'s fresh threads included).
    static CURRENT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Nanoseconds since the first call, plus one (a clock the meters share;
/// never 0, which `Meter::awake_since` keeps for "parked").
fn now_ns() -> u64 {
    static BASE: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);
    BASE.elapsed().as_nanos() as u64 + 1
}

/// One loop's busy time, from its worker's park and unpark hooks. (A loop
/// whose worker is inside `block_in_place` has a second thread for a
/// while; the meter then follows whichever woke last.)
#[derive(Default)]
struct Meter {
    busy_ns: AtomicU64,
    /// When the worker last woke (0: parked).
    awake_since: AtomicU64,
}

impl Meter {
    fn unparked(&self) {
        self.awake_since.store(now_ns(), Ordering::Relaxed);
    }

    fn parked(&self) {
        let since = self.awake_since.swap(0, Ordering::Relaxed);
        if since > 0 {
            self.busy_ns
                .fetch_add(now_ns().saturating_sub(since), Ordering::Relaxed);
        }
    }

    /// Busy time so far, the current waking included.
    fn busy(&self, now: u64) -> u64 {
        let since = self.awake_since.load(Ordering::Relaxed);
        let current = if since > 0 {
            now.saturating_sub(since)
        } else {
            0
        };
        self.busy_ns.load(Ordering::Relaxed) + current
    }
}

pub struct NetLoops {
    runtimes: parking_lot::Mutex<Vec<Runtime>>,
    handles: Vec<Handle>,
    meters: Vec<Arc<Meter>>,
    /// How many loops serve clients (1..=handles.len()).
    active: AtomicUsize,
    /// Set by `DEBUG NET-LOOPS`: the controller leaves `active` alone.
    fixed: AtomicBool,
    next_rank: AtomicUsize,
    /// Connections moved from one loop to another (INFO).
    pub moves: AtomicU64,
    stopping: AtomicBool,
}

impl NetLoops {
    /// `count` loops (at least one), their threads named `engram-net`;
    /// or, `shared`, one runtime of `count` workers.
    pub fn new(count: usize, shared: bool) -> std::io::Result<Arc<NetLoops>> {
        let (loops, workers) = if shared {
            (1, count.max(1))
        } else {
            (count.max(1), 1)
        };
        let mut runtimes = Vec::with_capacity(loops);
        let mut meters = Vec::with_capacity(loops);
        for index in 0..loops {
            let meter = Arc::new(Meter::default());
            let (parked, unparked) = (meter.clone(), meter.clone());
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            // Without the LIFO slot, the tasks the reactor wakes run in the
            // order their sockets became ready. With it, the last one woken
            // runs first: of two requests that arrive together, the second
            // ran first (297 of 300 such pairs in
            // `one_loop_serves_requests_in_the_order_they_arrived`), where
            // Redis takes them in arrival order. No cost measured at -P 1
            // or -P 16 (the slot speeds up tasks that wake each other; a
            // connection's task is woken by its socket).
            #[cfg(tokio_unstable)]
            builder.disable_lifo_slot();
            let runtime = builder
                .worker_threads(workers)
                .thread_name("engram-net")
                .on_thread_start(move || CURRENT.with(|current| current.set(Some(index))))
                .on_thread_unpark(move || unparked.unparked())
                .on_thread_park(move || parked.parked())
                .enable_all()
                .build()?;
            runtimes.push(runtime);
            meters.push(meter);
        }
        let handles = runtimes.iter().map(|r| r.handle().clone()).collect();
        Ok(Arc::new(NetLoops {
            runtimes: parking_lot::Mutex::new(runtimes),
            handles,
            meters,
            // One loop until the load asks for more.
            active: AtomicUsize::new(1),
            fixed: AtomicBool::new(false),
            next_rank: AtomicUsize::new(0),
            moves: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
        }))
    }

    pub fn count(&self) -> usize {
        self.handles.len()
    }

    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// The first loop: where the server's own tasks run.
    pub fn main(&self) -> &Handle {
        &self.handles[0]
    }

    /// A rank for a new connection.
    pub fn rank(&self) -> usize {
        self.next_rank.fetch_add(1, Ordering::Relaxed)
    }

    /// The loop a connection of `rank` belongs to now.
    pub fn home(&self, rank: usize) -> usize {
        rank % self.active().max(1)
    }

    /// Runs `task` on the home loop of `rank`.
    pub fn spawn<F>(&self, rank: usize, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn_on(self.home(rank), task);
    }

    pub fn spawn_on<F>(&self, index: usize, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.handles[index].spawn(task);
    }

    /// Where a connection of `rank` running on this thread should move, if
    /// it is not at home.
    pub fn relocation(&self, rank: usize) -> Option<usize> {
        let here = CURRENT.with(|current| current.get())?;
        let home = self.home(rank);
        (home != here).then_some(home)
    }

    /// `DEBUG NET-LOOPS n`: n loops from now on (0: as the load asks).
    /// Returns the count in use.
    pub fn fix(&self, count: usize) -> usize {
        if count == 0 {
            self.fixed.store(false, Ordering::Relaxed);
        } else {
            self.fixed.store(true, Ordering::Relaxed);
            self.active
                .store(count.min(self.count()), Ordering::Relaxed);
        }
        self.active()
    }

    /// Runs `future` to its end on the first loop, from a thread of its
    /// own (the accept loop).
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handles[0].block_on(future)
    }

    /// Stops every loop, waiting up to `patience` for each.
    pub fn shutdown(&self, patience: Duration) {
        self.stopping.store(true, Ordering::Relaxed);
        let runtimes = std::mem::take(&mut *self.runtimes.lock());
        for runtime in runtimes {
            runtime.shutdown_timeout(patience);
        }
    }

    /// Starts the controller; it ends when the loops shut down.
    pub fn start_controller(self: &Arc<Self>, served: impl Fn() -> u64 + Send + 'static) {
        if self.count() < 2 {
            return;
        }
        let loops = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("engram-loops".into())
            .spawn(move || Controller::new(loops, served).run());
        if let Err(e) = spawned {
            log::warn!("cannot start the network loops' controller ({e}): one loop serves");
        }
    }
}

/// A trial under way: the count before it, and what was served per tick
/// then.
struct Trial {
    from: usize,
    before: f64,
    ticks: u32,
    served_at_start: u64,
}

struct Controller<F> {
    loops: Arc<NetLoops>,
    served: F,
    /// (time, commands served, each loop's busy time) at the last
    /// MEASURE_TICKS + 1 ticks: the window rates and shares are taken over.
    samples: std::collections::VecDeque<(u64, u64, Vec<u64>)>,
    trial: Option<Trial>,
    /// When one more (.0) or one fewer (.1) loop may be tried again, and
    /// the wait after the next loss.
    not_before: [(Instant, Duration); 2],
    /// The load when a trial was last lost (a change of it retries early).
    lost_at_rate: f64,
}

impl<F: Fn() -> u64> Controller<F> {
    fn new(loops: Arc<NetLoops>, served: F) -> Controller<F> {
        Controller {
            loops,
            served,
            samples: Default::default(),
            trial: None,
            not_before: fresh_backoff(),
            lost_at_rate: 0.0,
        }
    }

    fn run(mut self) {
        while !self.loops.stopping.load(Ordering::Relaxed) {
            std::thread::sleep(TICK);
            self.tick();
        }
    }

    fn tick(&mut self) {
        let now = now_ns();
        let served = (self.served)();
        let busy = self.loops.meters.iter().map(|m| m.busy(now)).collect();
        if self.samples.len() > MEASURE_TICKS as usize {
            self.samples.pop_front();
        }
        self.samples.push_back((now, served, busy));
        if self.loops.fixed.load(Ordering::Relaxed) {
            self.trial = None;
            return;
        }
        let active = self.loops.active();
        if let Some(trial) = &mut self.trial {
            trial.ticks += 1;
            if trial.ticks == SETTLE_TICKS {
                trial.served_at_start = served;
            }
            if trial.ticks < SETTLE_TICKS + MEASURE_TICKS {
                return;
            }
            let after = served.saturating_sub(trial.served_at_start) as f64 / MEASURE_TICKS as f64;
            let (from, before) = (trial.from, trial.before);
            self.trial = None;
            let more = active > from;
            let kept = if more {
                after >= before * GAIN
            } else {
                after >= before * KEEP_FEWER
            };
            let which = usize::from(!more);
            let slot = &mut self.not_before[which];
            if kept {
                slot.1 = FIRST_BACKOFF[which];
                if more {
                    // Not straight back: the gain was just measured.
                    let fewer = &mut self.not_before[1];
                    fewer.0 = fewer.0.max(Instant::now() + fewer.1);
                }
            } else {
                self.loops.active.store(from, Ordering::Relaxed);
                slot.0 = Instant::now() + slot.1;
                slot.1 = (slot.1 * 2).min(MAX_BACKOFF);
                self.lost_at_rate = before;
            }
            // The window measured the trial: start the next one afresh.
            self.samples.clear();
            log::debug!(
                "network loops: {from} -> {active} served {before:.0} -> {after:.0} a tick: {}",
                if kept { "kept" } else { "taken back" }
            );
            return;
        }
        if self.samples.len() <= MEASURE_TICKS as usize {
            return;
        }
        let (first, last) = (&self.samples[0], &self.samples[self.samples.len() - 1]);
        let span = last.0.saturating_sub(first.0).max(1) as f64;
        let rate = last.1.saturating_sub(first.1) as f64 / MEASURE_TICKS as f64;
        let saturated =
            (0..active).all(|i| last.2[i].saturating_sub(first.2[i]) as f64 / span >= BUSY);
        // A load unlike the one a trial lost under (half or twice it):
        // try again now.
        if self.lost_at_rate > 0.0 && !(0.5..=2.0).contains(&(rate / self.lost_at_rate)) {
            self.not_before = fresh_backoff();
            self.lost_at_rate = 0.0;
        }
        let at = Instant::now();
        let target = if saturated && active < self.loops.count() && at >= self.not_before[0].0 {
            active + 1
        } else if active > 1 && at >= self.not_before[1].0 {
            // Fewer loops serve as much if the load fits them (and cost
            // less): tried now and then.
            active - 1
        } else {
            return;
        };
        if target < active {
            self.not_before[1].0 = at + self.not_before[1].1;
        }
        self.trial = Some(Trial {
            from: active,
            before: rate,
            ticks: 0,
            served_at_start: served,
        });
        self.loops.active.store(target, Ordering::Relaxed);
    }
}

/// Either trial may start now; each waits its first backoff after a loss.
fn fresh_backoff() -> [(Instant, Duration); 2] {
    let now = Instant::now();
    [(now, FIRST_BACKOFF[0]), (now, FIRST_BACKOFF[1])]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A controller over two loops whose served count the test sets, the
    /// first loop marked busy since long ago.
    fn busy_controller() -> (Arc<NetLoops>, Arc<AtomicU64>, Controller<impl Fn() -> u64>) {
        let loops = NetLoops::new(2, false).unwrap();
        loops.meters[0].awake_since.store(1, Ordering::Relaxed);
        loops.meters[1].awake_since.store(1, Ordering::Relaxed);
        let served = Arc::new(AtomicU64::new(0));
        let count = served.clone();
        let controller = Controller::new(loops.clone(), move || count.load(Ordering::Relaxed));
        (loops, served, controller)
    }

    /// Ticks `n` times, `per_tick` commands served in each.
    fn ticks(
        controller: &mut Controller<impl Fn() -> u64>,
        served: &AtomicU64,
        n: u32,
        per_tick: u64,
    ) {
        for _ in 0..n {
            served.fetch_add(per_tick, Ordering::Relaxed);
            controller.tick();
        }
    }

    #[test]
    fn a_second_loop_is_kept_only_if_it_serves_more() {
        let (loops, served, mut controller) = busy_controller();
        // A window of a saturated loop, then a trial of two.
        ticks(&mut controller, &served, MEASURE_TICKS + 1, 100);
        assert_eq!(loops.active(), 2, "a saturated loop gets a trial of two");
        // Two serve no more: taken back, and not tried again at once.
        ticks(&mut controller, &served, SETTLE_TICKS + MEASURE_TICKS, 100);
        assert_eq!(
            loops.active(),
            1,
            "a trial that served no more is taken back"
        );
        ticks(&mut controller, &served, MEASURE_TICKS + 1, 100);
        assert_eq!(loops.active(), 1, "a lost trial waits its backoff");
        // The load doubles: tried again, and two serve 20% more: kept.
        ticks(&mut controller, &served, MEASURE_TICKS + 1, 250);
        assert_eq!(loops.active(), 2, "a changed load is tried again");
        ticks(&mut controller, &served, SETTLE_TICKS + MEASURE_TICKS, 300);
        assert_eq!(loops.active(), 2, "a trial that served more is kept");
        loops.shutdown(Duration::from_secs(1));
    }

    #[test]
    fn an_idle_server_gives_a_loop_back_and_a_fixed_count_stays() {
        let (loops, served, mut controller) = busy_controller();
        loops.meters[0].awake_since.store(0, Ordering::Relaxed);
        loops.meters[1].awake_since.store(0, Ordering::Relaxed);
        assert_eq!(loops.fix(2), 2);
        ticks(
            &mut controller,
            &served,
            3 * (MEASURE_TICKS + SETTLE_TICKS),
            0,
        );
        assert_eq!(loops.active(), 2, "DEBUG NET-LOOPS fixes the count");
        assert_eq!(loops.fix(0), 2);
        // Idle: the trial of one loop serves as much (nothing) and is kept.
        ticks(&mut controller, &served, MEASURE_TICKS + 1, 0);
        assert_eq!(loops.active(), 1);
        ticks(&mut controller, &served, SETTLE_TICKS + MEASURE_TICKS, 0);
        assert_eq!(loops.active(), 1, "one loop serves an idle server");
        loops.shutdown(Duration::from_secs(1));
    }

    #[test]
    fn connections_go_home_by_rank() {
        let loops = NetLoops::new(3, false).unwrap();
        assert_eq!(loops.count(), 3);
        assert_eq!(
            (0..4).map(|r| loops.home(r)).collect::<Vec<_>>(),
            [0, 0, 0, 0]
        );
        loops.fix(3);
        assert_eq!(
            (0..4).map(|r| loops.home(r)).collect::<Vec<_>>(),
            [0, 1, 2, 0]
        );
        // Off a loop's thread nothing moves.
        assert_eq!(loops.relocation(1), None);
        let on_first = loops.main().block_on(async { loops.relocation(1) });
        assert_eq!(on_first, None, "block_on runs on the caller's thread");
        let (sender, receiver) = std::sync::mpsc::channel();
        let handle = loops.clone();
        loops.spawn_on(0, async move {
            sender.send(handle.relocation(1)).unwrap();
        });
        assert_eq!(
            receiver.recv().unwrap(),
            Some(1),
            "rank 1 belongs on loop 1"
        );
        let shared = NetLoops::new(3, true).unwrap();
        assert_eq!(shared.count(), 1, "one runtime of three workers");
        assert_eq!(shared.fix(3), 1);
        loops.shutdown(Duration::from_secs(1));
        shared.shutdown(Duration::from_secs(1));
    }
}
