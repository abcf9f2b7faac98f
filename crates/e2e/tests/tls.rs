//! `engram serve --tls-port` as a user runs it: TLS only (`--port 0`
//! beside a TLS port), spoken to by redis-py with `ssl=True` and client
//! certificates; and settings that stop the start, with the exit status
//! and the message a user sees.

#[path = "../../server/tests/common/certs.rs"]
mod certs;
mod common;

use std::process::Command;

use certs::Pki;
use common::{python_with_redis_py, serve_tls};

/// The certificate flags of a server trusting the test's CA.
fn tls_flags(pki: &Pki) -> Vec<String> {
    let mut flags = Vec::new();
    for (flag, path) in [
        ("--tls-cert-file", &pki.server.cert),
        ("--tls-key-file", &pki.server.key),
        ("--tls-ca-cert-file", &pki.ca),
    ] {
        flags.push(flag.to_string());
        flags.push(path.display().to_string());
    }
    flags
}

/// redis-py over TLS: with the client's certificate it writes and reads;
/// without one, and with another CA's, it is refused.
const REDIS_PY_CLIENT: &str = r#"
import sys, redis
port, ca, cert, key, stranger_cert, stranger_key = sys.argv[1:]
def client(certfile, keyfile):
    return redis.Redis(host="127.0.0.1", port=int(port), ssl=True, ssl_ca_certs=ca,
                       ssl_certfile=certfile, ssl_keyfile=keyfile,
                       socket_timeout=10, decode_responses=True)
r = client(cert, key)
print(r.ping())
print(r.set("greeting", "hello over tls"))
print(r.get("greeting"))
r.hset("user:1", mapping={"name": "alice", "visits": 3})
print(r.hincrby("user:1", "visits", 2))
print(r.config_get("tls-port")["tls-port"] == port)
for certfile, keyfile in [(None, None), (stranger_cert, stranger_key)]:
    try:
        client(certfile, keyfile).ping()
        print("served")
    except (redis.exceptions.ConnectionError, OSError) as e:
        print("refused")
"#;

#[test]
fn redis_py_speaks_tls_to_a_tls_only_server() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let flags = tls_flags(&pki);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let served = serve_tls(&dir.path().join("data"), &flags);
    assert!(
        served.log_text().contains("(TLS only)"),
        "{}",
        served.log_text()
    );

    let output = python_with_redis_py()
        .args(["-c", REDIS_PY_CLIENT])
        .arg(served.port.to_string())
        .args([&pki.ca, &pki.client.cert, &pki.client.key])
        .args([&pki.stranger.cert, &pki.stranger.key])
        .output()
        .expect("running python3");
    assert!(
        output.status.success(),
        "redis-py: {}\nserver log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        served.log_text()
    );
    let lines: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(
        lines,
        [
            "True",
            "True",
            "hello over tls",
            "5",
            "True",
            "refused",
            "refused"
        ]
    );
    // The refused handshakes are in the log, with the peer's address.
    assert!(
        served.logged("TLS handshake with 127.0.0.1:"),
        "{}",
        served.log_text()
    );
}

#[test]
fn bad_tls_settings_stop_engram_serve_with_their_names() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let missing = pki_dir.path().join("missing.pem");
    let missing_flag = missing.display().to_string();
    let key = pki.server.key.display().to_string();
    for (args, expected) in [
        (
            vec!["--tls-port", "6390"],
            "cannot set up TLS: tls-port 6390 is set, but tls-cert-file is not".to_string(),
        ),
        (
            vec![
                "--tls-port",
                "6390",
                "--tls-cert-file",
                &missing_flag,
                "--tls-key-file",
                &key,
            ],
            format!("cannot set up TLS: tls-cert-file {missing_flag}: I/O error: No such file"),
        ),
        (
            vec!["--tls-protocols", "TLSv1.2 SSLv3"],
            "unknown protocol 'SSLv3'".to_string(),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let output = Command::new(env!("CARGO_BIN_EXE_engram-e2e"))
            .args(["serve", "--port", "0", "--dir"])
            .arg(&data)
            .args(&args)
            .output()
            .expect("running engram serve");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started: {stderr}");
        assert!(stderr.contains(&expected), "{args:?}: {stderr}");
        assert!(!data.exists(), "{args:?} created the data directory");
    }
}
