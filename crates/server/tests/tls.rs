//! TLS (`tls-port`): a real server with a TLS port beside its plain one (or
//! alone), certificates made by each test (`common/certs.rs`), and real
//! clients: the `redis` crate over rustls, redis-cli built with OpenSSL,
//! rustls clients limited to one protocol version or without a
//! certificate, and raw TCP sockets that speak plain text or nothing.

#[path = "common/certs.rs"]
mod certs;
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use certs::{Identity, Pki};
use common::{free_port, info_number, Client};
use engram_server::tls::{AuthClients, Protocol, TlsSettings};
use engram_server::{Config, Server, StartError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{
    ClientConfig, ClientConnection, RootCertStore, StreamOwned, SupportedProtocolVersion,
};

const BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12, &rustls::version::TLS13];

/// The TLS settings of a server with the test's certificates, verifying
/// clients against its CA; the port is chosen at start.
fn settings(pki: &Pki) -> TlsSettings {
    TlsSettings {
        cert_file: Some(pki.server.cert.clone()),
        key_file: Some(pki.server.key.clone()),
        ca_cert_file: Some(pki.ca.clone()),
        ..TlsSettings::default()
    }
}

/// A server in a fresh directory with `tls` on a free port and, if
/// `plain`, a plain port too (without one: `port 0`, TLS only). A TLS port
/// cannot be left to the OS (`tls-port 0` is off, as in Redis), so free
/// ports are picked and the start is retried if another process took one
/// first; the server binds before it creates anything.
fn start(tls: TlsSettings, plain: bool) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for attempt in 1.. {
        let config = Config {
            port: if plain { free_port() } else { 0 },
            dir: dir.path().join("data"),
            tls: TlsSettings {
                port: free_port(),
                ..tls.clone()
            },
            ..Config::default()
        };
        match Server::start(config) {
            Ok(server) => return (server, dir),
            Err(StartError::Bind { .. }) if attempt < 10 => continue,
            Err(e) => panic!("the server did not start: {e}"),
        }
    }
    unreachable!()
}

fn tls_addr(server: &Server) -> SocketAddr {
    server.tls_addr.expect("a TLS port")
}

/// A rustls client trusting the test's CA, offering `versions`, with
/// `identity`'s certificate if given.
fn client_config(
    pki: &Pki,
    identity: Option<&Identity>,
    versions: &[&'static SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&pki.ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match identity {
        Some(identity) => {
            let chain = CertificateDer::pem_file_iter(&identity.cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(&identity.key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    })
}

/// Sends PING over TLS: the first reply line, or what went wrong (a
/// handshake the server refused, a connection it closed).
fn tls_ping(addr: SocketAddr, config: Arc<ClientConfig>) -> Result<String, String> {
    let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let connection = ClientConnection::new(config, name).unwrap();
    let mut tls = BufReader::new(StreamOwned::new(connection, tcp));
    tls.get_mut()
        .write_all(b"*1\r\n$4\r\nPING\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut line = String::new();
    match tls.read_line(&mut line) {
        Ok(0) => Err("closed".into()),
        Ok(_) => Ok(line.trim_end().to_string()),
        Err(e) => Err(format!("read: {e}")),
    }
}

fn read_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// A `redis` crate connection over TLS with the client certificate.
fn redis_tls(pki: &Pki, addr: SocketAddr) -> redis::Connection {
    let certificates = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: read_file(&pki.client.cert),
            client_key: read_file(&pki.client.key),
        }),
        root_cert: Some(pki.ca_pem()),
    };
    redis::Client::build_with_tls(format!("rediss://{addr}/"), certificates)
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Waits until INFO engram's `tls_handshake_failures` (read over the
/// plain port) reaches `count`: the server counts a failure after the
/// client may already have seen it.
fn wait_for_handshake_failures(plain: &mut Client, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = info_number(plain, "engram", "tls_handshake_failures");
        if seen == count {
            return;
        }
        assert!(
            seen < count && Instant::now() < deadline,
            "tls_handshake_failures is {seen}, expected {count}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_plain_and_tls_ports_serve_one_keyspace() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let (server, _dir) = start(settings(&pki), true);
    let mut secure = redis_tls(&pki, tls_addr(&server));
    let mut plain = common::redis_con(server.addr);

    let _: () = redis::cmd("SET")
        .arg("written-over")
        .arg("tls")
        .query(&mut secure)
        .unwrap();
    let read: String = redis::cmd("GET")
        .arg("written-over")
        .query(&mut plain)
        .unwrap();
    assert_eq!(read, "tls");
    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("field")
        .arg("plain")
        .query(&mut plain)
        .unwrap();
    let read: String = redis::cmd("HGET")
        .arg("h")
        .arg("field")
        .query(&mut secure)
        .unwrap();
    assert_eq!(read, "plain");

    // A reply larger than the socket's buffers arrives whole, in many
    // TLS records.
    let large: Vec<u8> = (0..8 << 20).map(|i| (i % 251) as u8).collect();
    let _: () = redis::cmd("SET")
        .arg("large")
        .arg(&large)
        .query(&mut plain)
        .unwrap();
    let read: Vec<u8> = redis::cmd("GET").arg("large").query(&mut secure).unwrap();
    assert!(read == large, "{} bytes read back", read.len());

    // CLIENT LIST shows the TLS client as any other, at the TLS port.
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut plain).unwrap();
    assert_eq!(list.lines().count(), 2, "{list}");
    let laddr = format!("laddr={}", tls_addr(&server));
    assert!(list.contains(&laddr), "{list}");

    // CONFIG GET answers; CONFIG SET refuses (read once, at startup).
    let port: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("tls-port")
        .query(&mut secure)
        .unwrap();
    assert_eq!(port, ["tls-port", &tls_addr(&server).port().to_string()]);
    let shown: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("tls-*")
        .query(&mut secure)
        .unwrap();
    let value = |name: &str| {
        let at = shown.iter().position(|n| n == name).unwrap();
        shown[at + 1].clone()
    };
    assert_eq!(value("tls-auth-clients"), "yes");
    assert_eq!(
        value("tls-cert-file"),
        pki.server.cert.display().to_string()
    );
    assert_eq!(value("tls-ca-cert-file"), pki.ca.display().to_string());
    assert_eq!(value("tls-protocols"), "");
    assert_eq!(value("tls-ciphers"), "");
    for (name, value) in [("tls-port", "0"), ("tls-auth-clients", "no")] {
        let refused = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query::<()>(&mut plain)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("the TLS settings are read once, at startup"),
            "{name}: {refused}"
        );
    }
    let port: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query(&mut plain)
        .unwrap();
    assert_eq!(port, ["port", &server.addr.port().to_string()]);
    drop((secure, plain));
    server.shutdown().unwrap();
}

#[test]
fn redis_cli_speaks_tls() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let (server, _dir) = start(settings(&pki), false);
    let port = tls_addr(&server).port().to_string();
    let cli = |args: &[&str], with_certificate: bool| {
        let mut command = Command::new("redis-cli");
        command
            .args(["-h", "127.0.0.1", "-p", &port, "--tls", "--cacert"])
            .arg(&pki.ca);
        if with_certificate {
            command
                .arg("--cert")
                .arg(&pki.client.cert)
                .arg("--key")
                .arg(&pki.client.key);
        }
        let output = command
            .args(args)
            .output()
            .expect("redis-cli (redis-tools, built with TLS) must be on PATH; .ci/run installs it");
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    assert_eq!(cli(&["SET", "greeting", "hello"], true).trim(), "OK");
    assert_eq!(cli(&["GET", "greeting"], true).trim(), "hello");
    // Without a client certificate the server ends the handshake.
    let refused = cli(&["GET", "greeting"], false);
    assert!(!refused.contains("hello"), "{refused}");
    server.shutdown().unwrap();
}

#[test]
fn by_default_clients_need_a_certificate_from_the_ca() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let (server, _dir) = start(settings(&pki), true);
    let addr = tls_addr(&server);
    let mut plain = Client::connect(&server);

    let ping = |identity: Option<&Identity>| tls_ping(addr, client_config(&pki, identity, BOTH));
    assert_eq!(ping(Some(&pki.client)), Ok("+PONG".into()));
    let without = ping(None);
    assert!(
        without.is_err(),
        "served without a certificate: {without:?}"
    );
    wait_for_handshake_failures(&mut plain, 1);
    let stranger = ping(Some(&pki.stranger));
    assert!(
        stranger.is_err(),
        "served another CA's client: {stranger:?}"
    );
    wait_for_handshake_failures(&mut plain, 2);
    // Still serving the good ones; no handshake failure is a refusal.
    assert_eq!(ping(Some(&pki.client)), Ok("+PONG".into()));
    assert_eq!(info_number(&mut plain, "stats", "rejected_connections"), 0);
    server.shutdown().unwrap();
}

#[test]
fn optional_client_certificates_are_checked_when_presented() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let tls = TlsSettings {
        auth_clients: AuthClients::Optional,
        ..settings(&pki)
    };
    let (server, _dir) = start(tls, true);
    let addr = tls_addr(&server);
    let mut plain = Client::connect(&server);
    let ping = |identity: Option<&Identity>| tls_ping(addr, client_config(&pki, identity, BOTH));

    assert_eq!(ping(None), Ok("+PONG".into()));
    assert_eq!(ping(Some(&pki.client)), Ok("+PONG".into()));
    let stranger = ping(Some(&pki.stranger));
    assert!(
        stranger.is_err(),
        "served another CA's client: {stranger:?}"
    );
    wait_for_handshake_failures(&mut plain, 1);
    assert_eq!(
        plain.call("CONFIG GET tls-auth-clients"),
        "[\"tls-auth-clients\", \"optional\"]"
    );
    server.shutdown().unwrap();
}

#[test]
fn without_client_authentication_no_certificate_is_asked_for() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    // Nor is a CA needed.
    let tls = TlsSettings {
        auth_clients: AuthClients::No,
        ca_cert_file: None,
        ..settings(&pki)
    };
    let (server, _dir) = start(tls, false);
    let ping = |identity: Option<&Identity>| {
        tls_ping(tls_addr(&server), client_config(&pki, identity, BOTH))
    };
    assert_eq!(ping(None), Ok("+PONG".into()));
    // A client certificate is not asked for, so not sent, so not refused.
    assert_eq!(ping(Some(&pki.stranger)), Ok("+PONG".into()));
    server.shutdown().unwrap();
}

#[test]
fn tls_protocols_limits_the_versions_offered() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let tls12_only = client_config(&pki, Some(&pki.client), &[&rustls::version::TLS12]);
    let tls13_only = client_config(&pki, Some(&pki.client), &[&rustls::version::TLS13]);

    // By default both are offered: the TLS 1.2 client itself works.
    let (server, _dir) = start(settings(&pki), false);
    assert_eq!(
        tls_ping(tls_addr(&server), tls12_only.clone()),
        Ok("+PONG".into())
    );
    assert_eq!(
        tls_ping(tls_addr(&server), tls13_only.clone()),
        Ok("+PONG".into())
    );
    server.shutdown().unwrap();

    let tls = TlsSettings {
        protocols: vec![Protocol::Tls13],
        ..settings(&pki)
    };
    let (server, _dir) = start(tls, true);
    let refused = tls_ping(tls_addr(&server), tls12_only);
    assert!(refused.is_err(), "a TLS 1.2 client was served: {refused:?}");
    assert_eq!(tls_ping(tls_addr(&server), tls13_only), Ok("+PONG".into()));
    let mut plain = Client::connect(&server);
    assert_eq!(
        plain.call("CONFIG GET tls-protocols"),
        "[\"tls-protocols\", \"TLSv1.3\"]"
    );
    wait_for_handshake_failures(&mut plain, 1);
    server.shutdown().unwrap();
}

#[test]
fn plain_text_on_the_tls_port_is_dropped_and_harms_no_one() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let (server, _dir) = start(settings(&pki), true);
    let addr = tls_addr(&server);
    let good = client_config(&pki, Some(&pki.client), BOTH);
    let mut secure = BufReader::new(StreamOwned::new(
        ClientConnection::new(good.clone(), ServerName::try_from("127.0.0.1").unwrap()).unwrap(),
        TcpStream::connect(addr).unwrap(),
    ));
    secure.get_mut().write_all(b"PING\r\n").unwrap();
    let mut line = String::new();
    secure.read_line(&mut line).unwrap();
    assert_eq!(line, "+PONG\r\n");

    // A RESP request where a TLS ClientHello belongs.
    let mut confused = TcpStream::connect(addr).unwrap();
    confused
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    confused.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut answer = Vec::new();
    // Closed by the server (at most a TLS alert first), not left hanging.
    let _ = confused.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("PONG"),
        "{answer:?}"
    );

    // The client connected before, and new ones, are served.
    secure.get_mut().write_all(b"PING\r\n").unwrap();
    line.clear();
    secure.read_line(&mut line).unwrap();
    assert_eq!(line, "+PONG\r\n");
    assert_eq!(tls_ping(addr, good), Ok("+PONG".into()));
    let mut plain = Client::connect(&server);
    assert_eq!(plain.call("PING"), "PONG");
    wait_for_handshake_failures(&mut plain, 1);
    server.shutdown().unwrap();
}

#[test]
fn a_client_that_never_starts_its_handshake_delays_no_one() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let (server, _dir) = start(settings(&pki), false);
    let addr = tls_addr(&server);
    let silent: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let good = client_config(&pki, Some(&pki.client), BOTH);
    for _ in 0..3 {
        assert_eq!(tls_ping(addr, good.clone()), Ok("+PONG".into()));
    }
    // The silent ones were waited for all along, not dropped to make room
    // (the handshake allows 10 s).
    for mut stream in silent {
        stream.set_nonblocking(true).unwrap();
        let mut byte = [0; 1];
        let still_open = matches!(
            stream.read(&mut byte),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
        );
        assert!(still_open, "a silent client was dropped early");
    }
    server.shutdown().unwrap();
}

#[test]
fn a_handshake_that_never_ends_is_dropped_after_its_timeout() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let timeout = Duration::from_millis(500);
    let tls = TlsSettings {
        handshake_timeout: timeout,
        ..settings(&pki)
    };
    let (server, _dir) = start(tls, true);
    let mut plain = Client::connect(&server);
    let started = Instant::now();
    let mut silent = TcpStream::connect(tls_addr(&server)).unwrap();
    // Registered at accept, as Redis registers it: it holds a client slot
    // while it handshakes.
    let deadline = Instant::now() + Duration::from_secs(20);
    while plain.call("CLIENT LIST").matches("id=").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "the handshaking client is not listed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    let read = silent.read_to_end(&mut rest);
    assert!(
        matches!(read, Ok(0)),
        "the server did not close it: {read:?}"
    );
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
    wait_for_handshake_failures(&mut plain, 1);
    assert_eq!(plain.call("CLIENT LIST").matches("id=").count(), 1);
    server.shutdown().unwrap();
}

#[test]
fn port_zero_beside_a_tls_port_serves_tls_only() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let (server, _dir) = start(settings(&pki), false);
    assert_eq!(server.addr, tls_addr(&server));
    let mut con = redis_tls(&pki, tls_addr(&server));
    let port: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query(&mut con)
        .unwrap();
    assert_eq!(port, ["port", "0"]);
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    assert!(info.contains("tcp_port:0\r\n"), "{info}");
    drop(con);
    server.shutdown().unwrap();
}

#[test]
fn a_key_in_sec1_form_is_read() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let sec1 = std::fs::read_to_string(&pki.server_key_sec1).unwrap();
    assert!(sec1.starts_with("-----BEGIN EC PRIVATE KEY-----"), "{sec1}");
    let tls = TlsSettings {
        key_file: Some(pki.server_key_sec1.clone()),
        ..settings(&pki)
    };
    let (server, _dir) = start(tls, false);
    let good = client_config(&pki, Some(&pki.client), BOTH);
    assert_eq!(tls_ping(tls_addr(&server), good), Ok("+PONG".into()));
    server.shutdown().unwrap();
}

#[test]
fn bad_tls_settings_stop_the_start_with_the_parameter_and_file_named() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let missing = pki_dir.path().join("missing.pem");
    let good = TlsSettings {
        port: free_port(),
        ..settings(&pki)
    };
    let show = |path: &Path| path.display().to_string();
    let cases: Vec<(&str, TlsSettings, Vec<String>)> = vec![
        (
            "no certificate",
            TlsSettings {
                cert_file: None,
                ..good.clone()
            },
            vec!["is set, but tls-cert-file is not".into()],
        ),
        (
            "no key",
            TlsSettings {
                key_file: None,
                ..good.clone()
            },
            vec!["is set, but tls-key-file is not".into()],
        ),
        (
            "a certificate file that is not there",
            TlsSettings {
                cert_file: Some(missing.clone()),
                ..good.clone()
            },
            vec![
                format!("tls-cert-file {}", show(&missing)),
                "No such file or directory".into(),
            ],
        ),
        (
            "a certificate file that cannot be read",
            TlsSettings {
                cert_file: Some(pki_dir.path().to_path_buf()),
                ..good.clone()
            },
            vec![
                format!("tls-cert-file {}", show(pki_dir.path())),
                "Is a directory".into(),
            ],
        ),
        (
            "a key file that is not there",
            TlsSettings {
                key_file: Some(missing.clone()),
                ..good.clone()
            },
            vec![
                format!("tls-key-file {}", show(&missing)),
                "No such file or directory".into(),
            ],
        ),
        (
            "a key where the certificate belongs",
            TlsSettings {
                cert_file: Some(pki.server.key.clone()),
                ..good.clone()
            },
            vec![format!(
                "tls-cert-file {}: no certificate in it",
                show(&pki.server.key)
            )],
        ),
        (
            "a certificate where the key belongs",
            TlsSettings {
                key_file: Some(pki.server.cert.clone()),
                ..good.clone()
            },
            vec![format!(
                "tls-key-file {}: no private key in it",
                show(&pki.server.cert)
            )],
        ),
        (
            "a key that is not the certificate's",
            TlsSettings {
                key_file: Some(pki.client.key.clone()),
                ..good.clone()
            },
            vec![format!(
                "tls-key-file {} is not the key of the certificate in tls-cert-file {}",
                show(&pki.client.key),
                show(&pki.server.cert)
            )],
        ),
        (
            "client authentication without a CA",
            TlsSettings {
                ca_cert_file: None,
                ..good.clone()
            },
            vec!["tls-auth-clients yes needs tls-ca-cert-file".into()],
        ),
        (
            "optional client authentication without a CA",
            TlsSettings {
                ca_cert_file: None,
                auth_clients: AuthClients::Optional,
                ..good.clone()
            },
            vec!["tls-auth-clients optional needs tls-ca-cert-file".into()],
        ),
        (
            "a CA file that is not there",
            TlsSettings {
                ca_cert_file: Some(missing.clone()),
                ..good.clone()
            },
            vec![format!("tls-ca-cert-file {}", show(&missing))],
        ),
    ];
    for (case, tls, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let config = Config {
            port: 0,
            dir: data.clone(),
            tls,
            ..Config::default()
        };
        let error = match Server::start(config) {
            Ok(server) => {
                server.shutdown().unwrap();
                panic!("{case}: the server started");
            }
            Err(e) => e.to_string(),
        };
        assert!(error.starts_with("cannot set up TLS: "), "{case}: {error}");
        for part in expected {
            assert!(error.contains(&part), "{case}: {error} lacks {part:?}");
        }
        assert!(!data.exists(), "{case}: the data directory was created");
    }
    // The same settings, with nothing wrong, start.
    let (server, _dir) = start(settings(&pki), false);
    server.shutdown().unwrap();
}
