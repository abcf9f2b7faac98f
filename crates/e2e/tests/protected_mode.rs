//! Protected mode from another host: the test makes a network namespace
//! joined to this one by a veth pair (traffic goes only between the two
//! ends), starts `engram serve --bind 0.0.0.0` and a redis-server 7.0 the
//! same way, and connects to both from inside the namespace. With no
//! password both refuse with the same DENIED reply and close; loopback
//! clients are served; a password or `protected-mode no` opens the server
//! to the namespace. The same holds on the TLS port, where the DENIED
//! reply comes over TLS once the handshake is done. The namespace and the
//! veth pair are removed at the end, also when the test fails.

#[path = "../../server/tests/common/certs.rs"]
mod certs;
mod common;

use std::process::Command;

use certs::Pki;
use common::{connect, serve, serve_tls, RedisServer};

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
        self.ping_over(port, None)
    }

    /// `ping`, over TLS with the test's CA and client certificate when
    /// `pki` is given (the client does not check the name: the server's
    /// certificate names 127.0.0.1, the client dials the veth address).
    fn ping_over(&self, port: u16, pki: Option<&Pki>) -> (String, bool) {
        const CLIENT: &str = r#"
import socket, ssl, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
if len(sys.argv) > 3:
    context = ssl.create_default_context(cafile=sys.argv[3])
    context.check_hostname = False
    context.load_cert_chain(sys.argv[4], sys.argv[5])
    s = context.wrap_socket(s)
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
except (ConnectionResetError, ssl.SSLError):
    # Closed with the PING unread: a reset instead of an end of stream
    # (over TLS, an end without TLS's closing alert).
    closed = True
sys.stdout.write(data.split(b"\r\n")[0].decode() + "\n" + ("closed" if closed else "open"))
"#;
        let output = Command::new("ip")
            .args(["netns", "exec", &self.name, "python3", "-c", CLIENT])
            .arg(&self.host_ip)
            .arg(port.to_string())
            .args(pki.map_or(Vec::new(), |pki| {
                vec![&pki.ca, &pki.client.cert, &pki.client.key]
            }))
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
    assert!(served.logged("refused 10.213."));

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

#[test]
fn tls_clients_from_another_host_are_refused_too() {
    let ns = Namespace::create(2);
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("--tls-cert-file", &pki.server.cert),
        ("--tls-key-file", &pki.server.key),
        ("--tls-ca-cert-file", &pki.ca),
    ]
    .map(|(flag, path)| (flag, path.display().to_string()));
    let mut args = vec!["--bind", "0.0.0.0"];
    for (flag, path) in &files {
        args.extend([*flag, path.as_str()]);
    }
    let served = serve_tls(&dir.path().join("data"), &args);

    // Handshake done, then Redis's DENIED over TLS, then closed.
    let (reply, closed) = ns.ping_over(served.port, Some(&pki));
    assert!(reply.starts_with("-DENIED"), "{reply}");
    assert!(closed, "the refused connection stays open");
    assert!(served.logged("refused 10.213."));

    // Served over loopback meanwhile (redis-py, the TLS client at hand);
    // `protected-mode no` opens the TLS port to the namespace.
    const LOOPBACK: &str = r#"
import sys, redis
port, ca, cert, key = sys.argv[1:]
r = redis.Redis(host="127.0.0.1", port=int(port), ssl=True, ssl_ca_certs=ca,
                ssl_certfile=cert, ssl_keyfile=key, decode_responses=True)
print(r.info("stats")["rejected_connections"])
print(r.config_set("protected-mode", "no"))
"#;
    let output = common::python_with_redis_py()
        .args(["-c", LOOPBACK])
        .arg(served.port.to_string())
        .args([&pki.ca, &pki.client.cert, &pki.client.key])
        .output()
        .expect("running python3");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), "1\nTrue\n");
    assert_eq!(
        ns.ping_over(served.port, Some(&pki)),
        ("+PONG".to_string(), false)
    );
}
