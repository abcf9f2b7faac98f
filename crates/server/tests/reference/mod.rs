//! A real redis-server (7.0.15, from PATH) on a free port, to compare
//! replies with: started in a fresh directory without persistence, killed
//! when dropped.
#![allow(dead_code)]

use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Client;

pub struct Redis {
    child: Child,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        let dir = tempfile::tempdir().unwrap();
        // A free port: bind, read it, let it go (redis-server binds it next;
        // a race with another process is retried below).
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server 7.0.15 on PATH");
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break; // exited: the port was taken, try another
                }
                if TcpStream::connect(addr).is_ok() {
                    return Redis {
                        child,
                        addr,
                        _dir: dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start");
    }

    pub fn client(&self) -> Client {
        let stream = TcpStream::connect(self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs each command on both servers and asserts the same reply; returns
/// the replies.
pub fn same(engram: &mut Client, redis: &mut Client, commands: &[&str]) -> Vec<String> {
    commands
        .iter()
        .map(|command| {
            let expected = redis.call(command);
            let got = engram.call(command);
            assert_eq!(
                got, expected,
                "reply to `{command}` (left: Engram, right: Redis)"
            );
            got
        })
        .collect()
}
