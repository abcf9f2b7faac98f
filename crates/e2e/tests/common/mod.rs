//! What the `engram serve` process suites share: start the binary on a
//! free port (or a TLS port) and learn the port from its log; connect a
//! redis client; a python3 with redis-py.
#![allow(dead_code)]

pub mod netns;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// A running `engram serve`, the port it listens on, and its log lines
/// (for failure messages).
pub struct Served {
    pub child: Child,
    pub port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Served {
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Whether the log holds `text` within a few seconds: a line the
    /// server wrote before answering reaches this process through a
    /// reader thread, which may not have it yet when the answer does.
    pub fn logged(&self, text: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if self.log_text().contains(text) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A test that fails (panics) while the server runs must not leave it
/// running: kill it (a no-op once it has exited and been waited for).
impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn serve(dir: &Path, extra: &[&str]) -> Served {
    try_serve(dir, extra).unwrap_or_else(|log| panic!("engram serve did not start:\n{log}"))
}

/// Starts `engram serve` with `extra` and learns its port from the ready
/// line (the plain port, or the TLS one when only TLS listens); its log
/// when it did not start.
pub fn try_serve(dir: &Path, extra: &[&str]) -> Result<Served, String> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_engram-e2e"));
    command
        .args(["serve", "--port", "0", "--dir"])
        .arg(dir)
        .args(extra);
    start_served(command)
}

/// Starts `command`, an `engram serve` with `--port 0`, however wrapped
/// (a wrapper must exec the server in its place, so that killing the
/// child kills the server), and learns its port from the ready line; its
/// log when it did not start.
pub fn start_served(mut command: Command) -> Result<Served, String> {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting engram serve");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (port_tx, port_rx) = mpsc::channel();
    let lines = log.clone();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let port = line.split(" ready on ").nth(1).map(|rest| {
                rest.split(':')
                    .nth(1)
                    .and_then(|p| p.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|p| p.parse::<u16>().ok())
            });
            // Logged before the port is handed over: the ready line is in
            // `log_text` once `serve` returns.
            lines.lock().unwrap().push(line);
            if let Some(port) = port {
                let _ = port_tx.send(port);
            }
        }
        // The server exited: no ready line is coming.
        let _ = port_tx.send(None);
    });
    let port = port_rx.recv_timeout(Duration::from_secs(60)).ok().flatten();
    let served = Served {
        child,
        port: port.unwrap_or(0),
        log,
    };
    match port {
        Some(_) => Ok(served),
        None => Err(served.log_text()),
    }
}

/// `engram serve --port 0 --tls-port P` with `extra` (the certificate
/// flags): TLS only, on a port free a moment before. `tls-port 0` means
/// no TLS, as in Redis, so the OS cannot choose it: if another process
/// takes the port first, the start is tried again on another.
pub fn serve_tls(dir: &Path, extra: &[&str]) -> Served {
    for _ in 0..10 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
            .to_string();
        let args: Vec<&str> = ["--tls-port", &port].iter().chain(extra).copied().collect();
        match try_serve(dir, &args) {
            Ok(served) => return served,
            Err(log) if log.contains("cannot listen on") => continue,
            Err(log) => panic!("engram serve did not start:\n{log}"),
        }
    }
    panic!("no free port for engram serve's TLS port in ten tries")
}

/// A `python3` command that can `import redis` (redis-py), for tests that
/// hold Engram to what redis-py users see; add the script (`-c`) and its
/// arguments. The first call in a test process checks `python3 -c "import
/// redis"` and, if that fails, installs redis-py with `python3 -m pip
/// install redis` (again with `--break-system-packages` when pip refuses
/// to touch a Python the system manages, PEP 668); later calls, from any
/// thread, reuse that outcome. Fails the test, with pip's words, when
/// redis-py cannot be had.
pub fn python_with_redis_py() -> Command {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(why) = READY.get_or_init(install_redis_py) {
        panic!("redis-py is needed and could not be installed: {why}");
    }
    Command::new("python3")
}

fn install_redis_py() -> Result<(), String> {
    let importable = || {
        Command::new("python3")
            .args(["-c", "import redis"])
            .output()
            .map(|output| output.status.success())
            .map_err(|e| format!("python3 cannot be run: {e}"))
    };
    if importable()? {
        return Ok(());
    }
    let pip = |extra: &[&str]| {
        let output = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(extra)
            .arg("redis")
            .output()
            .map_err(|e| format!("python3 -m pip cannot be run: {e}"))?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok::<_, String>((output.status.success(), said))
    };
    let (installed, said) = pip(&[])?;
    if !installed {
        if !said.contains("externally-managed-environment") {
            return Err(format!("python3 -m pip install redis failed:\n{said}"));
        }
        let (installed, said) = pip(&["--break-system-packages"])?;
        if !installed {
            return Err(format!(
                "python3 -m pip install --break-system-packages redis failed:\n{said}"
            ));
        }
    }
    if importable()? {
        Ok(())
    } else {
        Err("pip installed redis, but python3 still cannot import it".into())
    }
}

#[path = "../../../replication/tests/support/ports.rs"]
mod ports;
pub use ports::free_port;

/// ROLE's first word on `port` (`master`, `slave`), if it answers within
/// 300 ms.
pub fn role(port: u16) -> Option<String> {
    role_at("127.0.0.1", port)
}

/// [`role`] of a server at `host`.
pub fn role_at(host: &str, port: u16) -> Option<String> {
    let client = redis::Client::open(format!("redis://{host}:{port}/")).ok()?;
    let mut con = client
        .get_connection_with_timeout(Duration::from_millis(300))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_millis(300)))
        .ok()?;
    match redis::cmd("ROLE").query(&mut con).ok()? {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::BulkString(role)) => Some(String::from_utf8_lossy(role).into()),
            _ => None,
        },
        _ => None,
    }
}

pub fn connect(port: u16) -> redis::Connection {
    connect_at("127.0.0.1", port)
}

pub fn connect_at(host: &str, port: u16) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{host}:{port}/")).unwrap();
    client
        .get_connection_with_timeout(Duration::from_secs(10))
        .expect("connecting to engram serve")
}

/// What a writer of [`kill_cycles`] shares with the loop during a cycle:
/// when to stop, and how many of its writes were acknowledged.
#[derive(Default)]
pub struct Progress {
    stop: AtomicBool,
    acked: AtomicU64,
}

impl Progress {
    /// Whether the writer should stop (the server has been killed).
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Counts one acknowledged write.
    pub fn acked(&self) {
        self.acked.fetch_add(1, Ordering::Relaxed);
    }
}

/// The kill loop both crash suites run: `cycles` times, start `engram
/// serve` on `data`, `check` what each client had acknowledged, run
/// `before_writes` (a hook: e.g. a SAVE), let one `writer` thread per client
/// write for a while, SIGKILL the server mid-stream and collect what each
/// acknowledged. Then a last start checks everything and shuts down
/// cleanly.
///
/// The kill waits until every writer has had a write acknowledged in the
/// cycle (counted through [`Progress::acked`]), however slow the machine:
/// a fixed sleep alone could let a starved writer through a cycle with
/// nothing written, and the cycle would test nothing for it.
pub fn kill_cycles<A: Send + 'static>(
    data: &Path,
    cycles: usize,
    mut acked: Vec<A>,
    writer: fn(u16, usize, &A, &Progress) -> A,
    check: fn(u16, usize, &mut A),
    before_writes: impl Fn(usize, u16),
) {
    for cycle in 0..cycles {
        let mut served = serve(data, &[]);
        // What survived the last kill is there before new writes start.
        for (client, a) in acked.iter_mut().enumerate() {
            check(served.port, client, a);
        }
        before_writes(cycle, served.port);
        let port = served.port;
        let progress: Vec<Arc<Progress>> = acked.iter().map(|_| Arc::default()).collect();
        let handles: Vec<_> = acked
            .into_iter()
            .zip(&progress)
            .enumerate()
            .map(|(client, (start, progress))| {
                let progress = progress.clone();
                thread::spawn(move || writer(port, client, &start, &progress))
            })
            .collect();
        // Let the writers get going (a later kill each cycle), and make
        // sure each has written, then kill the server mid-stream.
        thread::sleep(Duration::from_millis(700 + 300 * cycle as u64));
        let deadline = Instant::now() + Duration::from_secs(60);
        for (client, (progress, handle)) in progress.iter().zip(&handles).enumerate() {
            while progress.acked.load(Ordering::Relaxed) == 0 {
                assert!(
                    !handle.is_finished() && Instant::now() < deadline,
                    "client {client} had no write acknowledged in cycle {cycle}:\n{}",
                    served.log_text()
                );
                thread::sleep(Duration::from_millis(10));
            }
        }
        served.child.kill().expect("SIGKILL");
        served.child.wait().unwrap();
        for progress in &progress {
            progress.stop.store(true, Ordering::Relaxed);
        }
        acked = handles.into_iter().map(|h| h.join().unwrap()).collect();
    }
    let mut served = serve(data, &[]);
    for (client, a) in acked.iter_mut().enumerate() {
        check(served.port, client, a);
    }
    let mut con = connect(served.port);
    let _: () = redis::cmd("SHUTDOWN").query(&mut con).unwrap_or(());
    let status = served.child.wait().unwrap();
    assert!(
        status.success(),
        "clean shutdown after the checks:\n{}",
        served.log_text()
    );
}

/// A redis-server from PATH on a free port with `args` after `--port`,
/// its output dropped; killed when dropped. Returned once it accepts
/// connections.
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    pub fn start(args: &[&str]) -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server 7.0.15 must be on PATH (.ci/run installs it)");
        let server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            thread::sleep(Duration::from_millis(20));
        }
        server
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `--peers` of a group on loopback whose node `i + 1` has bus port
/// `bus[i]`.
pub fn group_peers(bus: &[u16]) -> String {
    bus.iter()
        .enumerate()
        .map(|(i, port)| format!("{}@127.0.0.1:{port}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

/// Election timeouts for tests that do not measure failover: 300 to 600
/// ms instead of 60 to 120. A test binary runs its tests at once (a dozen
/// groups, three dozen servers on two cores), and a follower that waits
/// that long for the CPU would otherwise call an election in the middle
/// of a test that assumes one leader. A killed leader is still replaced
/// at once (its followers see its connection close).
pub const PATIENT_ELECTIONS: [&str; 2] = ["--raft-election-ticks", "30"];

/// Starts node `id` of a Raft group (`peers`: `1@HOST:BUSPORT,...`).
pub fn start_node(dir: &std::path::Path, id: u64, peers: &str) -> Served {
    start_node_with(dir, id, peers, &[])
}

/// `start_node` with more arguments.
pub fn start_node_with(dir: &std::path::Path, id: u64, peers: &str, extra: &[&str]) -> Served {
    let id = id.to_string();
    let mut args = vec!["--node-id", &id, "--peers", peers];
    args.extend(PATIENT_ELECTIONS);
    args.extend(extra);
    serve(dir, &args)
}

/// Three nodes of a group on loopback, each in a directory of its own,
/// with a leader elected; stopped when dropped.
pub struct Trio {
    pub dirs: Vec<tempfile::TempDir>,
    pub peers: String,
    pub nodes: Vec<Served>,
    pub ports: Vec<u16>,
    pub leader: u16,
}

impl Trio {
    pub fn start() -> Trio {
        Trio::start_with(&[])
    }

    /// `start` with more arguments for every node.
    pub fn start_with(extra: &[&str]) -> Trio {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let bus: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let peers = group_peers(&bus);
        let nodes: Vec<Served> = (0..3)
            .map(|i| start_node_with(dirs[i].path(), i as u64 + 1, &peers, extra))
            .collect();
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        let leader = leader_among(&ports);
        Trio {
            dirs,
            peers,
            nodes,
            ports,
            leader,
        }
    }

    /// Kills node `at` (an index into `ports`) and starts it again from
    /// its directory; it listens on a new port, and the leader is found
    /// anew.
    pub fn restart(&mut self, at: usize) {
        drop(self.nodes.remove(at));
        let node = start_node(self.dirs[at].path(), at as u64 + 1, &self.peers);
        self.nodes.insert(at, node);
        self.ports = self.nodes.iter().map(|n| n.port).collect();
        self.leader = leader_among(&self.ports);
    }
}

/// Waits until exactly one of `ports` is master and the others follow it.
pub fn leader_among(ports: &[u16]) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let roles: Vec<Option<String>> = ports.iter().map(|&p| role(p)).collect();
        let masters: Vec<u16> = ports
            .iter()
            .zip(&roles)
            .filter(|(_, r)| r.as_deref() == Some("master"))
            .map(|(&p, _)| p)
            .collect();
        if masters.len() == 1 && roles.iter().all(|r| r.is_some()) {
            let leader = masters[0];
            // The followers know where it is.
            let followers_know = ports.iter().filter(|&&p| p != leader).all(|&p| {
                let mut con = connect(p);
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut con)
                    .unwrap();
                info.contains(&format!("master_port:{leader}"))
            });
            if followers_know {
                return leader;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader among {ports:?}: {roles:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `write` on the leader among `ports` (all live), and again on the
/// leader found anew while the reply says leadership moved (MOVED,
/// TRYAGAIN, CLUSTERDOWN): on a loaded machine a follower can hear no
/// heartbeat for an election timeout, and a leader that cannot reach a
/// majority steps down (check-quorum) with the write answered TRYAGAIN,
/// applied or not. So `write` must be one that may be repeated (SETs of
/// fixed values, not INCR). `leader` is updated to the node that took it.
pub fn on_leader<T>(
    ports: &[u16],
    leader: &mut u16,
    mut write: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match write(&mut connect(*leader)) {
            Ok(done) => return done,
            Err(e) if e.is_cluster_error() && Instant::now() < deadline => {
                eprintln!("leadership moved during a write ({e}): finding the leader again");
                *leader = leader_among(ports);
            }
            Err(e) => panic!("a write to the leader on port {leader} failed: {e}"),
        }
    }
}

/// Polls a follower (READONLY) until `key` holds `want`.
pub fn wait_replicated(port: u16, key: &str, want: &str) {
    let mut con = connect(port);
    let _: () = redis::cmd("READONLY").query(&mut con).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got: Option<String> = redis::cmd("GET").arg(key).query(&mut con).unwrap();
        if got.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key} on :{port} is {got:?}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
