//! What the `engram serve` process suites share: start the binary on a
//! free port and learn the port from its log; connect a redis client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
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
