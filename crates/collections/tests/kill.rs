//! Real process kills with mixed collection traffic: a child process (this
//! test binary re-executed to run only `kill_child_workload`) writes to
//! hashes, sets, sorted sets and lists from two threads, with background
//! checkpoints triggered every few hundred kilobytes of log so that kills
//! land in checkpoints too, and is killed with SIGKILL at a random moment,
//! over and over, in the same directory.
//!
//! Every operation adds one element, so a key's state is a function of how
//! many operations it has had: its n-th operation adds element n (a list
//! gets `n` pushed on its tail, a set gets member `n`, a hash field `n`
//! with value `n*7`, a sorted set member `n` with score `-n`). The child
//! prints `A key n` when operation n on a key has returned. After a kill
//! the recovered key must hold exactly elements 1..=m, in order for a
//! list, where m is the last acknowledged n or that plus one (the
//! operation in flight), and nothing else.
//!
//! Every other child runs with checkpoints unordered against power loss
//! (`set_power_fail_ordering(false)`, what a server at `process` does): a
//! process kill must find the same state either way.
//!
//! `ENGRAM_KILL_CYCLES=N` sets the number of kills (default 40).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use engram_collections::types::Object;
use engram_collections::{CheckpointMode, Collections, CollectionsOptions, Op};
use engram_engine::ModeChoice;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CHILD_TEST: &str = "kill_child_workload";
const CHILD_DIR_ENV: &str = "ENGRAM_COLLECTIONS_KILL_DIR";
const CHILD_UNORDERED_ENV: &str = "ENGRAM_COLLECTIONS_KILL_UNORDERED";
const THREADS: usize = 2;
const KEYS_PER_THREAD: usize = 8;
const KEYS: usize = THREADS * KEYS_PER_THREAD;
const CHILD_LIFETIME: Duration = Duration::from_secs(20);

fn options() -> CollectionsOptions {
    CollectionsOptions {
        checkpoint_log_bytes: 256 << 10,
        checkpoints: CheckpointMode::Background,
        recovery_threads: 2,
        images: engram_engine::Options {
            mode: ModeChoice::Emulated,
            block_size_bytes: 64 << 10,
            grow_bytes: 1 << 20,
            reserve_bytes: 1 << 30,
            ..Default::default()
        },
        oplog: engram_collections::OpLogOptions {
            segment_bytes: 256 << 10,
            lanes: 4,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Key `k`'s type: k % 4 = list, set, hash, sorted set.
fn key_name(key: usize) -> Vec<u8> {
    format!("{}-{key:02}", ["list", "set", "hash", "zset"][key % 4]).into_bytes()
}

fn op_for(key: usize, n: u64) -> Op {
    let name: Box<[u8]> = key_name(key).into();
    let element: Box<[u8]> = n.to_string().into_bytes().into();
    match key % 4 {
        0 => Op::ListPush {
            key: name,
            front: false,
            values: vec![element],
        },
        1 => Op::SetAdd {
            key: name,
            members: vec![element],
        },
        2 => Op::HashSet {
            key: name,
            pairs: vec![(element, (n * 7).to_string().into_bytes().into())],
        },
        _ => Op::SortedSetAdd {
            key: name,
            pairs: vec![(-(n as f64), element)],
        },
    }
}

/// How many operations the recovered state of `key` reflects, or what is
/// wrong with it.
fn recovered_count(collections: &Collections, key: usize) -> Result<u64, String> {
    collections.read(&key_name(key), |entry| {
        let Some(entry) = entry else { return Ok(0) };
        let number = |bytes: &[u8]| -> Result<u64, String> {
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(format!("element {bytes:?}"))
        };
        match (&entry.object, key % 4) {
            (Object::List(list), 0) => {
                for (i, value) in list.iter().enumerate() {
                    if number(value)? != i as u64 + 1 {
                        return Err(format!("list element {i} is {value:?}"));
                    }
                }
                Ok(list.len() as u64)
            }
            (Object::Set(set), 1) => {
                let mut members: Vec<u64> = set.iter().map(number).collect::<Result<_, _>>()?;
                members.sort_unstable();
                if members != (1..=members.len() as u64).collect::<Vec<_>>() {
                    return Err(format!("set members {members:?}"));
                }
                Ok(members.len() as u64)
            }
            (Object::Hash(hash), 2) => {
                let mut fields = Vec::new();
                for (field, value) in hash.iter() {
                    let n = number(field)?;
                    if number(value)? != n * 7 {
                        return Err(format!("field {n} holds {value:?}"));
                    }
                    fields.push(n);
                }
                fields.sort_unstable();
                if fields != (1..=fields.len() as u64).collect::<Vec<_>>() {
                    return Err(format!("hash fields {fields:?}"));
                }
                Ok(fields.len() as u64)
            }
            (Object::SortedSet(zset), 3) => {
                // Ordered by score: -n, so the newest member comes first.
                let len = zset.len() as u64;
                for (rank, (member, score)) in zset.iter().enumerate() {
                    let n = number(member)?;
                    if n != len - rank as u64 || score != -(n as f64) {
                        return Err(format!("rank {rank}: member {n} score {score}"));
                    }
                }
                Ok(len)
            }
            (other, _) => Err(format!("wrong type {:?}", other.kind())),
        }
    })
}

#[test]
fn kill_child_workload() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let collections = Collections::open(&dir, options()).expect("child: opening");
    if std::env::var_os(CHILD_UNORDERED_ENV).is_some() {
        collections.set_power_fail_ordering(false);
    }
    // The harness printed "test ... " without a newline: start a fresh line.
    println!("\nREADY");
    let started = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let collections = &collections;
            scope.spawn(move || {
                let keys: Vec<usize> = (0..KEYS_PER_THREAD)
                    .map(|i| thread * KEYS_PER_THREAD + i)
                    .collect();
                let mut counts: Vec<u64> = keys
                    .iter()
                    .map(|&k| recovered_count(collections, k).expect("child: state"))
                    .collect();
                let mut rng = StdRng::seed_from_u64(thread as u64 ^ std::process::id() as u64);
                while started.elapsed() < CHILD_LIFETIME {
                    let slot = rng.random_range(0..keys.len());
                    counts[slot] += 1;
                    collections
                        .write(vec![op_for(keys[slot], counts[slot])])
                        .expect("child: write");
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "A {} {}", keys[slot], counts[slot]).unwrap();
                    out.flush().unwrap();
                }
            });
        }
    });
    collections.close().unwrap();
}

/// The recovered counts, and how many images recovery loaded.
fn check(dir: &Path, acknowledged: &[u64], cycle: u64) -> (Vec<u64>, u64) {
    let collections = Collections::open(dir, options())
        .unwrap_or_else(|e| panic!("cycle {cycle}: recovery failed: {e}"));
    assert_eq!(acknowledged.len(), KEYS);
    let mut counts = Vec::with_capacity(KEYS);
    for (key, &ack) in acknowledged.iter().enumerate() {
        let found = recovered_count(&collections, key)
            .unwrap_or_else(|e| panic!("cycle {cycle}, key {key}: {e}"));
        assert!(
            found == ack || found == ack + 1,
            "cycle {cycle}, key {key}: recovered {found} operations, {ack} were acknowledged"
        );
        counts.push(found);
    }
    let images = collections.recovery_report().images_loaded;
    collections.close().unwrap();
    (counts, images)
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_operation() {
    let cycles: u64 = std::env::var("ENGRAM_KILL_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut acknowledged = vec![0u64; KEYS];
    let mut recoveries_from_images = 0;
    for cycle in 0..cycles {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if cycle % 2 == 1 {
            command.env(CHILD_UNORDERED_ENV, "1");
        }
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        // Let it run until it has acknowledged a random number of operations.
        let target = rng.random_range(50..3000);
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen < target && Instant::now() < deadline {
            match receiver.recv_timeout(Duration::from_secs(5)) {
                Ok(line) => {
                    let words: Vec<&str> = line.split_whitespace().collect();
                    if let ["A", key, n] = words.as_slice() {
                        let (key, n): (usize, u64) = (key.parse().unwrap(), n.parse().unwrap());
                        assert_eq!(
                            n,
                            acknowledged[key] + 1,
                            "cycle {cycle}: key {key} skipped an operation"
                        );
                        acknowledged[key] = n;
                        seen += 1;
                    }
                }
                Err(_) => break,
            }
        }
        assert!(seen > 0, "cycle {cycle}: the child acknowledged nothing");
        child.kill().unwrap();
        child.wait().unwrap();
        // Acknowledgements already printed before the kill count too.
        reader.join().unwrap();
        while let Ok(line) = receiver.try_recv() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if let ["A", key, n] = words.as_slice() {
                let (key, n): (usize, u64) = (key.parse().unwrap(), n.parse().unwrap());
                acknowledged[key] = n;
            }
        }
        let (recovered, images) = check(dir.path(), &acknowledged, cycle);
        // The in-flight operation may have made it: that is the new truth.
        acknowledged = recovered;
        if images > 0 {
            recoveries_from_images += 1;
        }
    }
    assert!(
        recoveries_from_images > 0,
        "no checkpoint ever committed before a kill"
    );
    // Enough traffic went through for checkpoints to have run repeatedly.
    let total: u64 = acknowledged.iter().sum();
    assert!(
        total > cycles * 20,
        "only {total} operations in {cycles} cycles"
    );
}
