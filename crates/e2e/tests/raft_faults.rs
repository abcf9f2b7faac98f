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
//! One run of a few seconds here; `ENGRAM_FAULT_RUNS=200 cargo test -p
//! engram-e2e --test raft_faults -- --nocapture` is the long run
//! (TESTING.md).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{free_port, role, Served};
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
const FAULTS: usize = 6;

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
    /// Each node's client port (kept across restarts: `--port` is fixed).
    ports: Vec<u16>,
}

impl Group {
    fn start() -> Group {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let peers = (1..=3)
            .map(|id| format!("{id}@127.0.0.1:{}", free_port()))
            .collect::<Vec<_>>()
            .join(",");
        let mut group = Group {
            dirs,
            peers,
            nodes: vec![None, None, None],
            ports: vec![0; 3],
        };
        for i in 0..3 {
            group.ports[i] = free_port();
            group.launch(i);
        }
        group
    }

    fn launch(&mut self, i: usize) {
        let port = self.ports[i].to_string();
        let id = (i + 1).to_string();
        let mut command = Command::new(env!("CARGO_BIN_EXE_engram-e2e"));
        command
            .args(["serve", "--port", &port, "--dir"])
            .arg(self.dirs[i].path())
            .args(["--node-id", &id, "--peers", &self.peers])
            .args(["--raft-compact-bytes", "64kb"]);
        let served = common::start_served(command)
            .unwrap_or_else(|log| panic!("node {id} did not start:\n{log}"));
        self.nodes[i] = Some(served);
    }

    fn leader(&self) -> Option<usize> {
        (0..3)
            .find(|&i| self.nodes[i].is_some() && role(self.ports[i]).as_deref() == Some("master"))
    }

    fn pid(&self, i: usize) -> Option<i32> {
        self.nodes[i].as_ref().map(|n| n.child.id() as i32)
    }
}

/// One client: random operations until told to stop.
fn client(
    id: usize,
    ports: Vec<u16>,
    clock: Instant,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Op>>>,
) {
    let mut rng = rand::rng();
    let mut target = ports[id % ports.len()];
    let mut con: Option<redis::Connection> = None;
    let mut next_value = (id as i64 + 1) * 1_000_000;
    let now = |clock: Instant| clock.elapsed().as_nanos() as u64;
    while !stop.load(Ordering::Relaxed) {
        if con.is_none() {
            con = redis::Client::open(format!("redis://127.0.0.1:{target}/"))
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
                    target = ports[rng.random_range(0..ports.len())];
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
                    if let Some(port) = text
                        .rsplit(':')
                        .next()
                        .and_then(|p| p.trim().split(|c: char| !c.is_ascii_digit()).next())
                        .and_then(|p| p.parse().ok())
                    {
                        target = port;
                    }
                    con = None;
                } else if text.contains("CLUSTERDOWN") || text.contains("ClusterDown") {
                    thread::sleep(Duration::from_millis(20));
                    target = ports[rng.random_range(0..ports.len())];
                    con = None;
                } else {
                    // A timeout, a lost connection, TRYAGAIN: the outcome
                    // is unknown. A read's does not matter.
                    if op != "get" {
                        record.ok = false;
                        history.lock().unwrap().push(record);
                    }
                    target = ports[rng.random_range(0..ports.len())];
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

fn one_run(run: usize, checker: &Path, work: &Path) {
    let mut group = Group::start();
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
            let (ports, stop, history) = (group.ports.clone(), stop.clone(), history.clone());
            thread::spawn(move || client(id, ports, clock, stop, history))
        })
        .collect();
    let mut rng = rand::rng();
    let (mut kills, mut wipes) = (0, 0);
    for fault in 0..FAULTS {
        thread::sleep(Duration::from_millis(300));
        if fault % 3 == 2 {
            // A follower loses its disk: killed, its directory emptied,
            // restarted with nothing.
            let leader = group.leader();
            let victim = (0..3).find(|&i| Some(i) != leader).unwrap();
            let mut node = group.nodes[victim].take().unwrap();
            node.child.kill().unwrap();
            node.child.wait().unwrap();
            wipes += 1;
            let dir = group.dirs[victim].path().to_path_buf();
            std::fs::remove_dir_all(&dir).unwrap();
            std::fs::create_dir(&dir).unwrap();
            thread::sleep(Duration::from_millis(300));
            group.launch(victim);
        } else if fault % 3 == 0 {
            // SIGKILL the leader (or a node, if none leads now), restart
            // it from its directory a moment later.
            let victim = group.leader().unwrap_or(rng.random_range(0..3));
            let mut node = group.nodes[victim].take().unwrap();
            node.child.kill().unwrap();
            node.child.wait().unwrap();
            kills += 1;
            thread::sleep(Duration::from_millis(300));
            group.launch(victim);
        } else {
            // Freeze a node (a partition of sorts: it hears nothing and
            // says nothing), then thaw it.
            let victim = rng.random_range(0..3);
            let pid = group.pid(victim).unwrap();
            signal(pid, libc::SIGSTOP);
            thread::sleep(Duration::from_millis(400));
            signal(pid, libc::SIGCONT);
        }
    }
    // Healed: let the clients run a little more, then stop them.
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    // A last read of every key on the leader: every acknowledged write
    // must be in it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        if let Some(leader) = group.leader() {
            break leader;
        }
        assert!(Instant::now() < deadline, "no leader after the faults");
        thread::sleep(Duration::from_millis(20));
    };
    let mut con = common::connect(group.ports[leader]);
    for key in KEYS {
        let call = clock.elapsed().as_nanos() as u64;
        let value: Option<i64> = command_for("get", key, None).query(&mut con).unwrap();
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
    }
    // How many rejoins went by snapshot (the rest replayed the log).
    let snapshots: u64 = (0..3)
        .map(|i| {
            let mut con = common::connect(group.ports[i]);
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
        "run {run}: {} operations ({acknowledged_writes} acknowledged writes), {kills} kills, \
         {wipes} lost directories ({snapshots} snapshots installed since the last start): {}",
        history.len(),
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

#[test]
fn a_group_under_kills_and_freezes_stays_linearizable() {
    let runs: usize = std::env::var("ENGRAM_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    // Histories that fail the check stay here (under target/) to be read.
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("raft_faults");
    std::fs::create_dir_all(&work).unwrap();
    let checker = lincheck(&work);
    for run in 0..runs {
        one_run(run, &checker, &work);
    }
}
