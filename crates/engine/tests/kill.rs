//! Real process kills: a child process writes to the store and is killed
//! with SIGKILL at a random moment, over and over, in the same directory;
//! after every kill the store is reopened and checked against what the
//! child acknowledged.
//!
//! The child is this test binary itself, re-executed to run only
//! `kill_child_workload`, which works only when `ENGRAM_KILL_CHILD_DIR` is
//! set. It runs two writer threads on disjoint keys and prints a line
//! before each operation (`B ...`) and after it returns (`A ...`). Each key
//! belongs to one thread, so at most one operation per key is in flight at
//! the kill: a recovered key must be in the state its acknowledged
//! operations left it in, or in the state the in-flight one would leave it
//! in, and nothing else.
//!
//! `ENGRAM_KILL_CYCLES=N` sets the number of kills (default 200);
//! `ENGRAM_KILL_SEED=S` replays a run's random choices (kill timing and
//! operation mix; thread interleaving is up to the machine).

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use common::{count_from_env, pattern, scan_all, seed_from_env, small_options, watchdog};
use engram_engine::{Error, Options, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CHILD_TEST: &str = "kill_child_workload";
const CHILD_DIR_ENV: &str = "ENGRAM_KILL_CHILD_DIR";
const CHILD_CYCLE_ENV: &str = "ENGRAM_KILL_CHILD_CYCLE";
const CHILD_SEED_ENV: &str = "ENGRAM_KILL_CHILD_SEED";
/// Set for the children of the lazy retirement variant.
const CHILD_LAZY_ENV: &str = "ENGRAM_KILL_CHILD_LAZY";
const THREADS: usize = 2;
const KEYS_PER_THREAD: usize = 24;
const KEYS: usize = THREADS * KEYS_PER_THREAD;
/// Bytes before a value's padding: counter, version, key, length.
const VALUE_HEADER_BYTES: usize = 32;
/// A child that is never killed stops by itself after this long.
const CHILD_LIFETIME: Duration = Duration::from_secs(20);
/// How long the parent waits for the child to get going.
const CHILD_PROGRESS_TIMEOUT: Duration = Duration::from_secs(20);

/// `lazy`: lazy retirement, with rounds every few milliseconds so kills
/// land before, during and after them.
fn options(lazy: bool) -> Options {
    Options {
        lazy_retirement: lazy,
        retirement_interval: Duration::from_millis(3),
        write_lanes: 4,
        recovery_threads: 2,
        ..small_options()
    }
}

fn key_name(key: usize) -> Vec<u8> {
    format!("kill-key-{key:03}").into_bytes()
}

fn key_of_name(name: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(name).ok()?;
    let key: usize = text.strip_prefix("kill-key-")?.parse().ok()?;
    (key < KEYS && key_name(key) == name).then_some(key)
}

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.rotate_left(29) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Length of the value `version` of `key`: mostly small, one in 40 larger
/// than a block's payload (a multi-block extent).
fn value_len(key: usize, version: u64) -> usize {
    let h = mix(key as u64, version);
    if h.is_multiple_of(40) {
        66_000 + (h >> 8) as usize % 100_000
    } else {
        VALUE_HEADER_BYTES + (h >> 8) as usize % 1500
    }
}

/// The full bytes of version `version` of `key` with its counter at
/// `counter`: the parent regenerates and compares them whole.
fn value_bytes(key: usize, version: u64, counter: u64) -> Vec<u8> {
    let len = value_len(key, version);
    let mut value = Vec::with_capacity(len);
    value.extend_from_slice(&counter.to_le_bytes());
    value.extend_from_slice(&version.to_le_bytes());
    value.extend_from_slice(&(key as u64).to_le_bytes());
    value.extend_from_slice(&(len as u64).to_le_bytes());
    value.extend_from_slice(&pattern(
        mix(version, key as u64 + 1),
        len - VALUE_HEADER_BYTES,
    ));
    value
}

fn field(value: &[u8], index: usize) -> u64 {
    u64::from_le_bytes(value[index * 8..index * 8 + 8].try_into().unwrap())
}

// ---------------------------------------------------------------- child --

/// The child's workload; returns at once unless this process is the child.
#[test]
fn kill_child_workload() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let cycle: u64 = std::env::var(CHILD_CYCLE_ENV).unwrap().parse().unwrap();
    let seed: u64 = std::env::var(CHILD_SEED_ENV).unwrap().parse().unwrap();
    let lazy = std::env::var_os(CHILD_LAZY_ENV).is_some();
    let store = Store::open(&dir, options(lazy)).expect("child: opening the store");
    // On a line of its own: the test harness has printed "test ... " before.
    emit(&format!("\nREADY {cycle}\n"));
    let started = Instant::now();
    let writing = std::sync::atomic::AtomicUsize::new(THREADS);
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (store, writing) = (&store, &writing);
            scope.spawn(move || {
                child_writer(store, thread, cycle, seed, started);
                writing.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            });
        }
        // Index images while the writers run, so kills land before, during
        // and after them and recovery starts from one of them.
        let (store, writing) = (&store, &writing);
        scope.spawn(move || {
            while writing.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                store.write_index_image().expect("child: index image");
                std::thread::sleep(Duration::from_millis(2));
            }
        });
    });
    // Only reached if nobody killed us: the parent reports this.
    store.close().unwrap();
}

/// One whole line per `write` call, so lines from the two threads never
/// interleave and a line is either in the pipe or not at all.
fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes())
        .expect("child: writing stdout");
    out.flush().expect("child: flushing stdout");
}

fn child_writer(store: &Store, thread: usize, cycle: u64, seed: u64, started: Instant) {
    let mut rng = StdRng::seed_from_u64(mix(seed, thread as u64));
    let keys: Vec<usize> = (0..KEYS_PER_THREAD)
        .map(|i| thread * KEYS_PER_THREAD + i)
        .collect();
    // What this thread believes, from reading the recovered store.
    let mut present: Vec<bool> = keys
        .iter()
        .map(|&key| store.get(&key_name(key)).unwrap().is_some())
        .collect();
    let mut op_number = 0u64;
    while started.elapsed() < CHILD_LIFETIME {
        op_number += 1;
        // Unique across keys, threads and cycles; larger in later cycles.
        let version = cycle << 32 | (thread as u64) << 28 | op_number;
        let slot = rng.random_range(0..keys.len());
        let key = keys[slot];
        let name = key_name(key);
        let roll = rng.random_range(0..100);
        if roll < 55 || (!present[slot] && roll < 90) {
            let value = value_bytes(key, version, 0);
            emit(&format!("B put {key} {version}\n"));
            let is_new = store.put(&name, &value).expect("child: put");
            emit(&format!("A put {key} {version} {}\n", is_new as u8));
            present[slot] = true;
        } else if roll < 65 {
            emit(&format!("B del {key} {version}\n"));
            let existed = store.delete(&name).expect("child: delete");
            emit(&format!("A del {key} {version} {}\n", existed as u8));
            present[slot] = false;
        } else {
            let delta = rng.random_range(1..=1000u64);
            emit(&format!("B incr {key} {version} {delta}\n"));
            let answer = match store.incr_by(&name, 0, delta as i64) {
                Ok(counter) => counter.to_string(),
                Err(Error::KeyNotFound) => "NF".to_string(),
                Err(other) => panic!("child: incr_by: {other}"),
            };
            emit(&format!("A incr {key} {version} {delta} {answer}\n"));
        }
    }
}

// --------------------------------------------------------------- parent --

/// A key's state: absent, or present with the version its value came from
/// and the counter at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Absent,
    Present { version: u64, counter: u64 },
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Put { version: u64 },
    Delete,
    Incr { delta: u64 },
}

impl Op {
    fn apply(self, state: State) -> State {
        match (self, state) {
            (Op::Put { version }, _) => State::Present {
                version,
                counter: 0,
            },
            (Op::Delete, _) => State::Absent,
            (Op::Incr { .. }, State::Absent) => State::Absent,
            (Op::Incr { delta }, State::Present { version, counter }) => State::Present {
                version,
                counter: counter.wrapping_add(delta),
            },
        }
    }
}

struct Expectations {
    seed: u64,
    cycle: u64,
    /// The state every key was found in at the last recovery, moved on by
    /// the acknowledged operations of the current cycle.
    states: Vec<State>,
    /// Per key: the one operation begun but not acknowledged this cycle.
    pending: Vec<Option<Op>>,
    history: Vec<Vec<String>>,
}

impl Expectations {
    fn fail(&self, key: usize, message: &str) -> ! {
        let history = self.history[key]
            .iter()
            .rev()
            .take(60)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n    ");
        panic!(
            "cycle {} (ENGRAM_KILL_SEED={}), key {key}: {message}\n  history (latest last):\n    {history}",
            self.cycle, self.seed
        );
    }

    fn note(&mut self, key: usize, event: String) {
        let cycle = self.cycle;
        self.history[key].push(format!("[cycle {cycle}] {event}"));
    }

    /// Applies one line of the child's output.
    fn line(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (phase, op_name, key, version) = match words.as_slice() {
            [phase @ ("B" | "A"), op, key, version, ..] => (
                *phase,
                *op,
                key.parse::<usize>().unwrap(),
                version.parse::<u64>().unwrap(),
            ),
            _ => return, // the test harness's own output
        };
        assert!(key < KEYS, "child printed key {key}: {line}");
        let op = match op_name {
            "put" => Op::Put { version },
            "del" => Op::Delete,
            "incr" => Op::Incr {
                delta: words[4].parse().unwrap(),
            },
            other => panic!("unknown operation {other} in {line:?}"),
        };
        self.note(key, line.to_string());
        if phase == "B" {
            if self.pending[key].is_some() {
                self.fail(key, "a second operation began before the first returned");
            }
            self.pending[key] = Some(op);
            return;
        }
        if self.pending[key].take().is_none() {
            self.fail(key, "acknowledgement without a beginning");
        }
        // The answer the live store gave must agree with the expectations.
        let before = self.states[key];
        match op {
            Op::Put { .. } => {
                let is_new = words[4] == "1";
                if is_new != (before == State::Absent) {
                    self.fail(
                        key,
                        &format!("put said is_new={is_new} in state {before:?}"),
                    );
                }
            }
            Op::Delete => {
                let existed = words[4] == "1";
                if existed != (before != State::Absent) {
                    self.fail(
                        key,
                        &format!("delete said existed={existed} in state {before:?}"),
                    );
                }
            }
            Op::Incr { .. } => {
                let answer = words[5];
                let after = op.apply(before);
                let expected = match after {
                    State::Absent => "NF".to_string(),
                    State::Present { counter, .. } => counter.to_string(),
                };
                if answer != expected {
                    self.fail(
                        key,
                        &format!("incr_by answered {answer}, expected {expected} from {before:?}"),
                    );
                }
            }
        }
        self.states[key] = op.apply(before);
    }

    /// Checks the reopened store; the recovered states become the
    /// expectations for the next cycle.
    fn check_recovered(&mut self, store: &Store) {
        let mut present = BTreeSet::new();
        for key in 0..KEYS {
            let acknowledged = self.states[key];
            let in_flight = self.pending[key].take().map(|op| op.apply(acknowledged));
            let found = match store.get(&key_name(key)) {
                Ok(None) => State::Absent,
                Ok(Some(value)) => {
                    if value.len() < VALUE_HEADER_BYTES {
                        self.fail(key, &format!("recovered a {}-byte value", value.len()));
                    }
                    let (counter, version) = (field(&value, 0), field(&value, 1));
                    if field(&value, 2) != key as u64 {
                        self.fail(key, "recovered another key's value");
                    }
                    if value != value_bytes(key, version, counter) {
                        self.fail(
                            key,
                            &format!("value of version {version} (counter {counter}) is damaged"),
                        );
                    }
                    present.insert(key_name(key));
                    State::Present { version, counter }
                }
                Err(error) => self.fail(key, &format!("get after recovery: {error}")),
            };
            self.note(
                key,
                format!(
                    "recovered {found:?}; acknowledged {acknowledged:?}; in flight {in_flight:?}"
                ),
            );
            if found != acknowledged && Some(found) != in_flight {
                self.fail(
                    key,
                    &format!(
                        "recovered {found:?}, but the last acknowledged state is {acknowledged:?} \
                         and the operation in flight would give {in_flight:?}"
                    ),
                );
            }
            self.states[key] = found;
        }
        let len = store.len();
        if len != present.len() as u64 {
            panic!(
                "cycle {} (ENGRAM_KILL_SEED={}): len() is {len} but {} keys are present",
                self.cycle,
                self.seed,
                present.len()
            );
        }
        let (scanned, _) = scan_all(store, 16);
        if scanned != present {
            let extra: Vec<_> = scanned
                .difference(&present)
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            let missing: Vec<_> = present
                .difference(&scanned)
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            panic!(
                "cycle {} (ENGRAM_KILL_SEED={}): scan differs from get: extra {extra:?}, missing {missing:?}",
                self.cycle, self.seed
            );
        }
        assert!(
            scanned.iter().all(|name| key_of_name(name).is_some()),
            "a key nobody wrote"
        );
        // Pages the killed child was writing are stale (their marks were
        // persisted before the stores), never corrupt.
        if self.cycle.is_multiple_of(10) {
            let report = store.scrub_now().expect("scrub after a kill");
            assert_eq!(
                (
                    report.corrupt_pages,
                    report.parity_rewritten,
                    report.metadata_rebuilt
                ),
                (0, 0, 0),
                "cycle {} (ENGRAM_KILL_SEED={}): false corruption after a kill: {report:?}",
                self.cycle,
                self.seed
            );
        }
    }
}

fn spawn_child(dir: &Path, cycle: u64, seed: u64, lazy: bool) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if lazy {
        command.env(CHILD_LAZY_ENV, "1");
    }
    command
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir)
        .env(CHILD_CYCLE_ENV, cycle.to_string())
        .env(CHILD_SEED_ENV, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning the child")
}

/// When to kill the child.
#[derive(Debug)]
enum KillAt {
    /// This long after spawning, whatever it is doing (often: recovering).
    Early(Duration),
    /// This long after it reported the store open.
    AfterReady(Duration),
    /// After this many acknowledged operations.
    AfterAcks(u64),
}

/// Runs one child until `kill_at`, SIGKILLs it, and returns every complete
/// line it printed.
fn run_child(dir: &Path, cycle: u64, seed: u64, kill_at: &KillAt, lazy: bool) -> Vec<String> {
    let mut child = spawn_child(dir, cycle, seed, lazy);
    let spawned = Instant::now();
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            match stdout.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                // A line cut short by the kill was never fully written.
                Ok(_) if line.ends_with('\n') => {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
                Ok(_) => break,
            }
        }
    });
    let mut lines = Vec::new();
    let mut ready_at: Option<Instant> = None;
    let mut acks = 0u64;
    let mut exited_early = false;
    loop {
        let now = Instant::now();
        let deadline = match *kill_at {
            KillAt::Early(delay) => Some(spawned + delay),
            KillAt::AfterReady(delay) => ready_at.map(|at| at + delay),
            KillAt::AfterAcks(n) if acks >= n => Some(now),
            KillAt::AfterAcks(_) => None,
        };
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if now.duration_since(spawned) > CHILD_PROGRESS_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "cycle {cycle}: child made no progress in {CHILD_PROGRESS_TIMEOUT:?} \
                 (ready: {}, acks: {acks}, kill at {kill_at:?})",
                ready_at.is_some()
            );
        }
        let wait = deadline.map_or(Duration::from_millis(50), |d| d - now);
        match receiver.recv_timeout(wait) {
            Ok(line) => {
                if line.starts_with("READY") {
                    ready_at = Some(Instant::now());
                } else if line.starts_with("A ") {
                    acks += 1;
                }
                lines.push(line);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                exited_early = true;
                break;
            }
        }
    }
    // SIGKILL on Unix.
    let _ = child.kill();
    let status = child.wait().expect("waiting for the child");
    reader.join().expect("stdout reader");
    lines.extend(receiver.try_iter());
    if exited_early {
        panic!("cycle {cycle}: child exited before it was killed: {status}");
    }
    lines
}

#[test]
fn killed_writers_lose_no_acknowledged_write() {
    run_kills(false, 200);
}

/// The same under lazy retirement: kills between a write and the round
/// that sets its predecessor's bit, tombstones instead of bits, updates
/// appended as new versions.
#[test]
fn killed_writers_lose_no_acknowledged_write_with_lazy_retirement() {
    run_kills(true, 100);
}

fn run_kills(lazy: bool, default_cycles: u64) {
    let seed = seed_from_env("ENGRAM_KILL_SEED");
    let cycles = count_from_env("ENGRAM_KILL_CYCLES", default_cycles);
    let _watchdog = watchdog(
        "killed_writers_lose_no_acknowledged_write",
        Duration::from_secs(180).max(Duration::from_millis(cycles * 500)),
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let tempdir = tempfile::tempdir().unwrap();
    let dir: PathBuf = tempdir.path().join("store");
    let mut expectations = Expectations {
        seed,
        cycle: 0,
        states: vec![State::Absent; KEYS],
        pending: vec![None; KEYS],
        history: vec![Vec::new(); KEYS],
    };
    let started = Instant::now();
    let mut total_acks = 0usize;
    let mut killed_before_ready = 0;
    let mut from_images = 0;
    for cycle in 1..=cycles {
        expectations.cycle = cycle;
        let kill_at = match rng.random_range(0..10) {
            0 => KillAt::Early(Duration::from_micros(rng.random_range(0..4_000))),
            1..=5 => KillAt::AfterReady(Duration::from_micros(rng.random_range(0..40_000))),
            _ => KillAt::AfterAcks(rng.random_range(0..3000)),
        };
        let child_seed = rng.random();
        let lines = run_child(&dir, cycle, child_seed, &kill_at, lazy);
        if !lines.iter().any(|l| l.starts_with("READY")) {
            killed_before_ready += 1;
        }
        for line in &lines {
            expectations.line(line.trim_end());
        }
        total_acks += lines.iter().filter(|l| l.starts_with("A ")).count();
        if !dir.exists() {
            // Killed before the child even created the directory.
            continue;
        }
        let store = match Store::open(&dir, options(lazy)) {
            Ok(store) => store,
            Err(error) => panic!(
                "cycle {cycle} (ENGRAM_KILL_SEED={seed}, kill at {kill_at:?}): reopening failed: {error}"
            ),
        };
        from_images += store.recovery_report().index_image.image.is_some() as u64;
        expectations.check_recovered(&store);
        store.crash();
    }
    // Crashes must not leak space: after a compaction, the blocks in use
    // hold at most about twice the live data (blocks above half live are
    // kept; an extent may be half empty), plus the blocks lanes hold open.
    let store = Store::open(&dir, options(lazy)).unwrap();
    expectations.check_recovered(&store);
    store.compact_now().unwrap();
    let stats = store.stats();
    let used_bytes = (stats.blocks_total - stats.blocks_free) * stats.block_bytes;
    let allowance = 2 * stats.live_bytes + 16 * stats.block_bytes;
    eprintln!(
        "{cycles} kill cycles in {:.1?}: {total_acks} acknowledged operations, \
         {killed_before_ready} kills before the store was open, {from_images} recoveries \
         from an index image; file {} KiB, \
         {} KiB of blocks in use for {} KiB live",
        started.elapsed(),
        stats.file_bytes >> 10,
        used_bytes >> 10,
        stats.live_bytes >> 10
    );
    assert!(
        used_bytes <= allowance,
        "space leaked across crashes: {used_bytes} bytes of blocks in use for {} live bytes ({stats:?})",
        stats.live_bytes
    );
    assert!(total_acks > 0, "the children acknowledged nothing");
    assert!(
        from_images >= cycles / 4,
        "only {from_images} of {cycles} recoveries started from an index image"
    );
}
