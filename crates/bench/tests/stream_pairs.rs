//! `engram-bench stream-pairs` against a real server (an `engram_server`
//! in this process, on a port of its own): every pair acknowledges the
//! entry its read delivered, and a stream with too few entries is an
//! error, not a fast run.

use engram_bench::stream_pairs::{run, StreamPairsArgs};
use engram_server::{Config, LogLevel, Server};

/// A server in `dir` whose stream `bench` holds `entries` entries and a
/// group `g` that has read none, its port, and a connection to it.
fn filled_server(dir: &std::path::Path, entries: usize) -> (Server, u16, redis::Connection) {
    let server = Server::start(Config {
        bind: "127.0.0.1".into(),
        port: 0,
        dir: dir.to_path_buf(),
        loglevel: LogLevel::Warning,
        ..Config::default()
    })
    .expect("server starts");
    let port = server.addr.port();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut con = client.get_connection().unwrap();
    fill(&mut con, entries);
    (server, port, con)
}

fn fill(con: &mut redis::Connection, entries: usize) {
    let mut pipe = redis::pipe();
    for i in 0..entries {
        pipe.cmd("XADD")
            .arg("bench")
            .arg("*")
            .arg("f")
            .arg(i)
            .ignore();
    }
    pipe.query::<()>(con).unwrap();
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("bench")
        .arg("g")
        .arg("0")
        .query::<()>(con)
        .unwrap();
}

fn args(port: u16, clients: usize, pairs: u64) -> StreamPairsArgs {
    StreamPairsArgs {
        host: "127.0.0.1".into(),
        port,
        clients,
        pairs,
        stream: "bench".into(),
        group: "g".into(),
    }
}

#[test]
fn every_pair_acknowledges_what_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port, mut con) = filled_server(dir.path(), 1000);
    // 7 connections do not divide 500: the remainder is shared out too.
    let result = run(&args(port, 7, 500)).unwrap();
    assert_eq!(result.pairs, 500);
    assert!(result.pairs_per_second() > 0.0);
    // XPENDING's summary: nothing pending (every delivered entry acked),
    // and the group's last delivered entry is the 500th.
    let summary: redis::Value = redis::cmd("XPENDING")
        .arg("bench")
        .arg("g")
        .query(&mut con)
        .unwrap();
    let redis::Value::Array(fields) = summary else {
        panic!("XPENDING summary is not an array: {summary:?}");
    };
    assert_eq!(fields[0], redis::Value::Int(0));
    let ids: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("bench")
        .arg("-")
        .arg("+")
        .query(&mut con)
        .unwrap();
    let groups: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("bench")
        .query(&mut con)
        .unwrap();
    let info = format!("{groups:?}");
    assert!(
        info.contains(&ids[499].0),
        "last delivered is not the 500th entry: {info}"
    );
    server.shutdown().unwrap();
}

#[test]
fn a_stream_that_runs_dry_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port, _con) = filled_server(dir.path(), 10);
    let error = run(&args(port, 2, 20)).unwrap_err();
    assert!(
        format!("{error:#}").contains("delivered no entry"),
        "{error:#}"
    );
    // No group at all: the server's NOGROUP error stops the run too.
    let error = run(&StreamPairsArgs {
        group: "missing".into(),
        ..args(port, 1, 1)
    })
    .unwrap_err();
    assert!(format!("{error:#}").contains("NOGROUP"), "{error:#}");
    server.shutdown().unwrap();
}
