//! A three-node group under faults, checked for linearizability (issue 26):
//! clients run SET, GET and INCR on a few string keys and HSET, HGET and
//! HINCRBY on a few hashes against whichever node
//! leads (following MOVED), recording when each call started and ended and
//! what it returned; meanwhile the leader is SIGKILLed and restarted,
//! nodes are frozen with SIGSTOP and thawed, and a follower loses its
//! directory and rejoins empty (the logs compact every 64 KiB, so it
//! catches up by a snapshot once the log has moved past what it had). After the faults every key is
//! read once more, then `tools/lincheck` (porcupine, in Go) checks the
//! whole history: a lost acknowledged write or a stale read is a
//! violation.
//!
//! A second test runs each node in a network namespace of its own, joined
//! by a bridge (`common::netns`), and partitions the network: the leader
//! alone, a follower alone, a link flapping, every link slowed to 2 Mbit/s
//! with drops, then a SIGKILL of the leader.
//!
//! One run of each of a few seconds here; `ENGRAM_FAULT_RUNS=200 cargo
//! test -p engram-e2e --test raft_faults -- --nocapture` is the long run
//! (TESTING.md).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::netns::Netns;
use common::{free_port, Served};
use rand::Rng;

const CLIENTS: usize = 4;
/// Strings (GET, SET, INCR) and hashes (HGET, HSET, HINCRBY of field
/// `f`): both stores, and both copies of the applied index.
const KEYS: [&str; 5] = ["k0", "k1", "k2", "h0", "h1"];

/// The command for an operation of the register model on `key`.
fn command_for(op: &str, key: &str, value: Option<i64>) -> redis::Cmd {
    let hash = key.starts_with('h');
    let name = match (op, hash) {
        ("get", false) => "GET",
        ("set", false) => "SET",
        ("incr", false) => "INCR",
        ("get", true) => "HGET",
        ("set", true) => "HSET",
        _ => "HINCRBY",
    };
    let mut command = redis::cmd(name);
    command.arg(key);
    if hash {
        command.arg("f");
    }
    if let Some(v) = value {
        command.arg(v);
    }
    if name == "HINCRBY" {
        command.arg(1);
    }
    command
}
/// A fault and its repair.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGKILL the leader, restart it from its directory.
    KillLeader,
    /// SIGSTOP a node for 400 ms.
    Freeze,
    /// A follower loses its directory and restarts empty.
    WipeFollower,
    /// The leader's link goes down for 600 ms (it is alone).
    IsolateLeader,
    /// A follower's link goes down for 600 ms (a minority).
    IsolateFollower,
    /// A node's link goes down and up five times, 80 ms each.
    Flap,
    /// Every link slowed to 2 Mbit/s with drops for a second.
    SlowLinks,
}

const LOOPBACK_FAULTS: [Fault; 6] = [
    Fault::KillLeader,
    Fault::Freeze,
    Fault::WipeFollower,
    Fault::KillLeader,
    Fault::Freeze,
    Fault::WipeFollower,
];

const NETWORK_FAULTS: [Fault; 6] = [
    Fault::IsolateLeader,
    Fault::IsolateFollower,
    Fault::Flap,
    Fault::SlowLinks,
    Fault::KillLeader,
    Fault::IsolateLeader,
];

#[derive(serde::Serialize, Clone)]
struct Op {
    client: usize,
    key: String,
    op: &'static str,
    value: Option<i64>,
    output: Option<i64>,
    call: u64,
    #[serde(rename = "return")]
    ret: u64,
    ok: bool,
}

struct Group {
    dirs: Vec<tempfile::TempDir>,
    peers: String,
    nodes: Vec<Option<Served>>,
    /// Each node's address and client port (kept across restarts).
    addrs: Vec<(String, u16)>,
    /// The nodes' namespaces, when they have them.
    net: Option<Netns>,
}

impl Group {
    fn start(net: Option<Netns>) -> Group {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let host = |i: usize| match &net {
            Some(net) => net.address(i),
            None => "127.0.0.1".to_string(),
        };
        let peers = (0..3)
            .map(|i| format!("{}@{}:{}", i + 1, host(i), free_port()))
            .collect::<Vec<_>>()
            .join(",");
        let addrs = (0..3).map(|i| (host(i), free_port())).collect();
        let mut group = Group {
            dirs,
            peers,
            nodes: vec![None, None, None],
            addrs,
            net,
        };
        for i in 0..3 {
            group.launch(i);
        }
        group
    }

    fn launch(&mut self, i: usize) {
        let (host, port) = self.addrs[i].clone();
        let id = (i + 1).to_string();
        let binary = env!("CARGO_BIN_EXE_engram-e2e");
        let mut command = match &self.net {
            Some(net) => {
                let prefix = net.exec(i);
                let mut command = Command::new(&prefix[0]);
                command.args(&prefix[1..]).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .args([
                "serve",
                "--bind",
                &host,
                "--port",
                &port.to_string(),
                "--dir",
            ])
            .arg(self.dirs[i].path())
            .args(["--node-id", &id, "--peers", &self.peers])
            .args(["--raft-compact-bytes", "64kb"])
            // Clients come from the bridge's address, not loopback.
            .args(["--protected-mode", "no"]);
        let served = common::start_served(command)
            .unwrap_or_else(|log| panic!("node {id} did not start:\n{log}"));
        self.nodes[i] = Some(served);
    }

    fn leader(&self) -> Option<usize> {
        (0..3).find(|&i| {
            let (host, port) = &self.addrs[i];
            self.nodes[i].is_some() && common::role_at(host, *port).as_deref() == Some("master")
        })
    }

    fn pid(&self, i: usize) -> Option<i32> {
        self.nodes[i].as_ref().map(|n| n.child.id() as i32)
    }

    fn kill(&mut self, i: usize) {
        let mut node = self.nodes[i].take().unwrap();
        node.child.kill().unwrap();
        node.child.wait().unwrap();
    }

    /// Runs `fault` and repairs it.
    fn inflict(&mut self, fault: Fault, tally: &mut Tally) {
        let mut rng = rand::rng();
        match fault {
            Fault::KillLeader => {
                // The leader (or a node, if none leads now), restarted
                // from its directory a moment later.
                let victim = self.leader().unwrap_or(rng.random_range(0..3));
                self.kill(victim);
                tally.kills += 1;
                thread::sleep(Duration::from_millis(300));
                self.launch(victim);
            }
            Fault::Freeze => {
                // It hears nothing and says nothing, then thaws.
                let victim = rng.random_range(0..3);
                let pid = self.pid(victim).unwrap();
                signal(pid, libc::SIGSTOP);
                thread::sleep(Duration::from_millis(400));
                signal(pid, libc::SIGCONT);
            }
            Fault::WipeFollower => {
                // A follower loses its disk: killed, its directory
                // emptied, restarted with nothing.
                let leader = self.leader();
                let victim = (0..3).find(|&i| Some(i) != leader).unwrap();
                self.kill(victim);
                tally.wipes += 1;
                let dir = self.dirs[victim].path().to_path_buf();
                std::fs::remove_dir_all(&dir).unwrap();
                std::fs::create_dir(&dir).unwrap();
                thread::sleep(Duration::from_millis(300));
                self.launch(victim);
            }
            Fault::IsolateLeader | Fault::IsolateFollower => {
                let leader = self.leader().unwrap_or(0);
                let victim = match fault {
                    Fault::IsolateLeader => leader,
                    _ => (leader + 1) % 3,
                };
                let net = self.net.as_ref().expect("a network to partition");
                net.cut(victim);
                tally.partitions += 1;
                thread::sleep(Duration::from_millis(600));
                net.heal(victim);
            }
            Fault::Flap => {
                let victim = rng.random_range(0..3);
                let net = self.net.as_ref().expect("a network to partition");
                for _ in 0..5 {
                    net.cut(victim);
                    thread::sleep(Duration::from_millis(80));
                    net.heal(victim);
                    thread::sleep(Duration::from_millis(80));
                }
                tally.partitions += 5;
            }
            Fault::SlowLinks => {
                let net = self.net.as_ref().expect("a network to slow");
                for i in 0..3 {
                    net.shape(i, true);
                }
                thread::sleep(Duration::from_secs(1));
                for i in 0..3 {
                    net.shape(i, false);
                }
            }
        }
    }
}

/// What a run's faults did.
#[derive(Default)]
struct Tally {
    kills: usize,
    wipes: usize,
    partitions: usize,
}

/// One client: random operations until told to stop.
fn client(
    id: usize,
    addrs: Vec<(String, u16)>,
    clock: Instant,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Op>>>,
) {
    let mut rng = rand::rng();
    let mut target = id % addrs.len();
    let mut con: Option<redis::Connection> = None;
    let mut next_value = (id as i64 + 1) * 1_000_000;
    let now = |clock: Instant| clock.elapsed().as_nanos() as u64;
    while !stop.load(Ordering::Relaxed) {
        if con.is_none() {
            let (host, port) = &addrs[target];
            con = redis::Client::open(format!("redis://{host}:{port}/"))
                .ok()
                .and_then(|c| {
                    c.get_connection_with_timeout(Duration::from_millis(500))
                        .ok()
                });
            match &mut con {
                Some(c) => {
                    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                    let _ = c.set_write_timeout(Some(Duration::from_secs(2)));
                }
                None => {
                    target = rng.random_range(0..addrs.len());
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
            }
        }
        let key = KEYS[rng.random_range(0..KEYS.len())];
        let (op, value) = match rng.random_range(0..10) {
            0..4 => ("get", None),
            4..7 => {
                next_value += 1;
                ("set", Some(next_value))
            }
            _ => ("incr", None),
        };
        let command = command_for(op, key, value);
        let call = now(clock);
        let result: redis::RedisResult<redis::Value> = command.query(con.as_mut().unwrap());
        let ret = now(clock);
        let mut record = Op {
            client: id,
            key: key.into(),
            op,
            value,
            output: None,
            call,
            ret,
            ok: true,
        };
        match result {
            Ok(reply) => {
                // HSET's reply counts new fields: not the register's value.
                let reply = if op == "set" {
                    redis::Value::Nil
                } else {
                    reply
                };
                record.output = match reply {
                    redis::Value::Int(n) => Some(n),
                    redis::Value::BulkString(b) => {
                        Some(String::from_utf8_lossy(&b).parse().expect("an integer"))
                    }
                    _ => None,
                };
                history.lock().unwrap().push(record);
            }
            Err(e) => {
                let text = e.to_string();
                if text.contains("MOVED") || text.contains("Moved") {
                    // Refused before it was proposed: it did nothing. Go
                    // where the refusal points.
                    let port: Option<u16> = text
                        .rsplit(':')
                        .next()
                        .and_then(|p| p.trim().split(|c: char| !c.is_ascii_digit()).next())
                        .and_then(|p| p.parse().ok());
                    if let Some(at) = addrs.iter().position(|a| Some(a.1) == port) {
                        target = at;
                    }
                    con = None;
                } else if text.contains("CLUSTERDOWN") || text.contains("ClusterDown") {
                    thread::sleep(Duration::from_millis(20));
                    target = rng.random_range(0..addrs.len());
                    con = None;
                } else {
                    // A timeout, a lost connection, TRYAGAIN: the outcome
                    // is unknown. A read's does not matter.
                    if op != "get" {
                        record.ok = false;
                        history.lock().unwrap().push(record);
                    }
                    target = rng.random_range(0..addrs.len());
                    con = None;
                }
            }
        }
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a child process id this test started.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Builds `tools/lincheck` once per test process.
fn lincheck(out_dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/lincheck");
    let binary = out_dir.join("lincheck");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(&source)
        .output()
        .expect("running go build (Go must be installed)");
    assert!(
        built.status.success(),
        "go build of tools/lincheck failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    binary
}

fn one_run(run: usize, checker: &Path, work: &Path, net: Option<Netns>, faults: &[Fault]) {
    let mut group = Group::start(net);
    let deadline = Instant::now() + Duration::from_secs(30);
    while group.leader().is_none() {
        assert!(Instant::now() < deadline, "no leader elected");
        thread::sleep(Duration::from_millis(20));
    }
    let clock = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (addrs, stop, history) = (group.addrs.clone(), stop.clone(), history.clone());
            thread::spawn(move || client(id, addrs, clock, stop, history))
        })
        .collect();
    let mut tally = Tally::default();
    for &fault in faults {
        thread::sleep(Duration::from_millis(300));
        group.inflict(fault, &mut tally);
    }
    // Healed: let the clients run a little more, then stop them.
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    // A last read of every key on the leader: every acknowledged write
    // must be in it. A healed partition can still move the leadership
    // (a node that was cut off comes back with a higher term), so a read
    // refused with MOVED or cut off is retried on whoever leads then; only
    // the attempt that answered enters the history.
    let deadline = Instant::now() + Duration::from_secs(30);
    for key in KEYS {
        loop {
            assert!(
                Instant::now() < deadline,
                "run {run}: no leader answered the final reads"
            );
            let Some(leader) = group.leader() else {
                thread::sleep(Duration::from_millis(20));
                continue;
            };
            let mut con = common::connect_at(&group.addrs[leader].0, group.addrs[leader].1);
            let call = clock.elapsed().as_nanos() as u64;
            match command_for("get", key, None).query::<Option<i64>>(&mut con) {
                Ok(value) => {
                    history.lock().unwrap().push(Op {
                        client: CLIENTS,
                        key: key.into(),
                        op: "get",
                        value: None,
                        output: value,
                        call,
                        ret: clock.elapsed().as_nanos() as u64,
                        ok: true,
                    });
                    break;
                }
                Err(e) => {
                    eprintln!("run {run}: final read of {key} retried: {e}");
                    thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    // How many rejoins went by snapshot (the rest replayed the log).
    let snapshots: u64 = (0..3)
        .map(|i| {
            let mut con = common::connect_at(&group.addrs[i].0, group.addrs[i].1);
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut con)
                .unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("raft_snapshots_installed:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum();
    let history = history.lock().unwrap().clone();
    let acknowledged_writes = history.iter().filter(|o| o.ok && o.op != "get").count();
    assert!(
        acknowledged_writes > 20,
        "run {run}: only {acknowledged_writes} writes were acknowledged"
    );
    let file = work.join(format!("history-{run}.json"));
    std::fs::write(&file, serde_json::to_vec(&history).unwrap()).unwrap();
    let checked = Command::new(checker).arg(&file).output().unwrap();
    let verdict = String::from_utf8_lossy(&checked.stdout).into_owned();
    eprintln!(
        "run {run}: {} operations ({acknowledged_writes} acknowledged writes), {} kills, {} lost \
         directories ({snapshots} snapshots installed since the last start), {} link cuts: {}",
        history.len(),
        tally.kills,
        tally.wipes,
        tally.partitions,
        verdict.trim()
    );
    assert!(
        checked.status.success(),
        "run {run}: {verdict}{}\nthe history is in {}",
        String::from_utf8_lossy(&checked.stderr),
        file.display()
    );
    std::fs::remove_file(&file).unwrap();
}

fn runs() -> usize {
    std::env::var("ENGRAM_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Where histories that fail the check stay (under target/) to be read,
/// and the checker built there.
fn work_dir(name: &str) -> (PathBuf, PathBuf) {
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&work).unwrap();
    let checker = lincheck(&work);
    (work, checker)
}

#[test]
fn a_group_under_kills_and_freezes_stays_linearizable() {
    let (work, checker) = work_dir("raft_faults");
    for run in 0..runs() {
        one_run(run, &checker, &work, None, &LOOPBACK_FAULTS);
    }
}

#[test]
fn a_group_under_partitions_stays_linearizable() {
    let (work, checker) = work_dir("raft_partitions");
    for run in 0..runs() {
        let net = Netns::create(3).unwrap_or_else(|e| {
            panic!("cannot make the test's network namespaces (root and iproute2 needed): {e}")
        });
        one_run(run, &checker, &work, Some(net), &NETWORK_FAULTS);
    }
}
