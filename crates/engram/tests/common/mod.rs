//! What the `engram serve` process suites share: start the binary on a
//! free port and learn the port from its log; connect a redis client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(["serve", "--port", "0", "--dir"])
        .arg(dir)
        .args(extra)
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
            if let Some(rest) = line.split(" ready on ").nth(1) {
                let port = rest
                    .split(':')
                    .nth(1)
                    .and_then(|p| p.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|p| p.parse::<u16>().ok());
                let _ = port_tx.send(port);
            }
            lines.lock().unwrap().push(line);
        }
    });
    let port = port_rx
        .recv_timeout(Duration::from_secs(60))
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            panic!(
                "engram serve did not start:\n{}",
                log.lock().unwrap().join("\n")
            )
        });
    Served { child, port, log }
}

pub fn connect(port: u16) -> redis::Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    client
        .get_connection_with_timeout(Duration::from_secs(10))
        .expect("connecting to engram serve")
}

/// The kill loop both crash suites run: `cycles` times, start `engram
/// serve` on `data`, `check` what each client had acknowledged, run
/// `before_writes` (a hook: e.g. a SAVE), let one `writer` thread per client
/// write for a while, SIGKILL the server mid-stream and collect what each
/// acknowledged (`wrote` must hold for each: the cycle did work). Then a
/// last start checks everything and shuts down cleanly.
pub fn kill_cycles<A: Send + 'static>(
    data: &Path,
    cycles: usize,
    mut acked: Vec<A>,
    writer: fn(u16, usize, &A, &AtomicBool) -> A,
    check: fn(u16, usize, &mut A),
    wrote: fn(&A) -> bool,
    before_writes: impl Fn(usize, u16),
) {
    for cycle in 0..cycles {
        let mut served = serve(data, &[]);
        // What survived the last kill is there before new writes start.
        for (client, a) in acked.iter_mut().enumerate() {
            check(served.port, client, a);
        }
        before_writes(cycle, served.port);
        let stop = Arc::new(AtomicBool::new(false));
        let port = served.port;
        let handles: Vec<_> = acked
            .into_iter()
            .enumerate()
            .map(|(client, start)| {
                let stop = stop.clone();
                thread::spawn(move || writer(port, client, &start, &stop))
            })
            .collect();
        // Let the writers get going, then kill the server mid-stream.
        thread::sleep(Duration::from_millis(700 + 300 * cycle as u64));
        served.child.kill().expect("SIGKILL");
        served.child.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        acked = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(
            acked.iter().all(wrote),
            "every client wrote something in cycle {cycle}:\n{}",
            served.log_text()
        );
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
