//! Protected mode from another host: the test makes a network namespace
//! joined to this one by a veth pair (traffic goes only between the two
//! ends), starts `engram serve --bind 0.0.0.0` and a redis-server 7.0 the
//! same way, and connects to both from inside the namespace. With no
//! password both refuse with the same DENIED reply and close; loopback
//! clients are served; a password or `protected-mode no` opens the server
//! to the namespace. The namespace and the veth pair are removed at the
//! end, also when the test fails.

mod common;

use std::process::Command;

use common::{connect, serve, RedisServer};

/// A namespace and the veth pair joining it to this one, removed on drop.
struct Namespace {
    name: String,
    host_if: String,
    /// This namespace's end of the pair (what clients inside connect to).
    host_ip: String,
}

fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Namespace {
    /// `test`: a number per test, so tests running at once (in this
    /// process, or other runs' processes) use names and subnets of their own.
    fn create(test: u32) -> Namespace {
        let id = (std::process::id() % 1_000) * 10 + test;
        let subnet = 1 + (std::process::id() * 3 + test) % 250;
        let ns = Namespace {
            name: format!("engram-pm-{id}"),
            host_if: format!("epm{id}h"),
            host_ip: format!("10.213.{subnet}.1"),
        };
        let inner_if = format!("epm{id}n");
        let inner_ip = format!("10.213.{subnet}.2");
        ns.remove();
        ip(&["netns", "add", &ns.name]);
        ip(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &inner_if,
        ]);
        ip(&["link", "set", &inner_if, "netns", &ns.name]);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", ns.host_ip),
            "dev",
            &ns.host_if,
        ]);
        ip(&["link", "set", &ns.host_if, "up"]);
        let inside = ["netns", "exec", &ns.name, "ip"];
        let run_inside = |rest: &[&str]| {
            let args: Vec<&str> = inside.iter().chain(rest).copied().collect();
            ip(&args);
        };
        run_inside(&["addr", "add", &format!("{inner_ip}/30"), "dev", &inner_if]);
        run_inside(&["link", "set", &inner_if, "up"]);
        run_inside(&["link", "set", "lo", "up"]);
        ns
    }

    fn remove(&self) {
        // Deleting one end of a veth pair deletes both.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }

    /// Sends PING from inside the namespace to `port` on this side: the
    /// first reply line, and whether the server then closed the connection.
    fn ping(&self, port: u16) -> (String, bool) {
        const CLIENT: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(b"*1\r\n$4\r\nPING\r\n")
data = b""
while b"\r\n" not in data:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
s.settimeout(2)
try:
    closed = s.recv(1) == b""
except socket.timeout:
    closed = False
except ConnectionResetError:
    # Closed with the PING unread: a reset instead of an end of stream.
    closed = True
sys.stdout.write(data.split(b"\r\n")[0].decode() + "\n" + ("closed" if closed else "open"))
"#;
        let output = Command::new("ip")
            .args(["netns", "exec", &self.name, "python3", "-c", CLIENT])
            .arg(&self.host_ip)
            .arg(port.to_string())
            .output()
            .expect("running python3 in the namespace");
        assert!(
            output.status.success(),
            "client in the namespace: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8(output.stdout).unwrap();
        let (line, state) = text.rsplit_once('\n').unwrap();
        (line.to_string(), state == "closed")
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.remove();
    }
}

#[test]
fn clients_from_another_host_are_refused_until_a_password_or_the_mode_allows_them() {
    let ns = Namespace::create(0);
    // With its defaults: protected mode on, no password.
    let redis = RedisServer::start(&["--bind", "0.0.0.0", "--save", "", "--appendonly", "no"]);
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("data"), &["--bind", "0.0.0.0"]);
    assert!(
        served
            .log_text()
            .contains("protected mode is on and no password is set"),
        "no startup warning:\n{}",
        served.log_text()
    );

    // Refused from the namespace, with Redis's own reply, and closed.
    let (redis_reply, redis_closed) = ns.ping(redis.port);
    assert!(redis_reply.starts_with("-DENIED"), "{redis_reply}");
    assert!(redis_closed);
    let (reply, closed) = ns.ping(served.port);
    assert_eq!(reply, redis_reply);
    assert!(closed, "the refused connection stays open");
    assert!(served.log_text().contains("refused 10.213."));

    // Served over loopback meanwhile.
    let mut admin = connect(served.port);
    let pong: String = redis::cmd("PING").query(&mut admin).unwrap();
    assert_eq!(pong, "PONG");
    let info: String = redis::cmd("INFO").arg("stats").query(&mut admin).unwrap();
    assert!(info.contains("rejected_connections:1"), "{info}");

    // A password opens the server: the client is served (and must AUTH).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret")
        .query(&mut admin)
        .unwrap();
    let (reply, closed) = ns.ping(served.port);
    assert_eq!(reply, "-NOAUTH Authentication required.");
    assert!(!closed);
    let _: () = redis::cmd("AUTH").arg("s3cret").query(&mut admin).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("")
        .query(&mut admin)
        .unwrap();
    assert!(ns.ping(served.port).0.starts_with("-DENIED"));

    // So does turning the mode off.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("protected-mode")
        .arg("no")
        .query(&mut admin)
        .unwrap();
    assert_eq!(ns.ping(served.port), ("+PONG".to_string(), false));
}

#[test]
fn the_mode_can_be_turned_off_at_startup() {
    let ns = Namespace::create(1);
    let dir = tempfile::tempdir().unwrap();
    let served = serve(
        &dir.path().join("data"),
        &["--bind", "0.0.0.0", "--protected-mode", "no"],
    );
    assert!(!served.log_text().contains("protected mode is on"));
    assert_eq!(ns.ping(served.port), ("+PONG".to_string(), false));
}
