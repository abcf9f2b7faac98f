//! Bad and heavy clients next to good ones: protocol errors close only the
//! offending connection, thousands of connections are served, pipelines
//! come back in order, and the data is untouched.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use engram_server::{Config, Server};
use rand::{Rng, SeedableRng};

fn start() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(Config {
        port: 0,
        dir: dir.path().join("data"),
        ..Config::default()
    })
    .unwrap();
    (server, dir)
}

fn raw(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Everything the server sends until it closes the connection.
fn read_to_close(stream: &mut TcpStream) -> String {
    let mut reply = Vec::new();
    stream
        .read_to_end(&mut reply)
        .expect("the server closes the connection");
    String::from_utf8_lossy(&reply).into_owned()
}

fn redis_con(addr: SocketAddr) -> redis::Connection {
    redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn protocol_errors_get_redis_texts_and_close_the_connection() {
    let (server, _dir) = start();
    let cases: &[(&[u8], &str)] = &[
        (
            b"*x\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n+PING\r\n",
            "-ERR Protocol error: expected '$', got '+'\r\n",
        ),
        (
            b"*1\r\n$-3\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        // Past proto-max-bulk-len (512 MB).
        (
            b"*1\r\n$600000000\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"SET k \"unterminated\r\n",
            "-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
    ];
    for (input, expected) in cases {
        let mut stream = raw(server.addr);
        stream.write_all(input).unwrap();
        assert_eq!(
            read_to_close(&mut stream),
            *expected,
            "for {:?}",
            String::from_utf8_lossy(input)
        );
    }
    // Commands before the bad bytes in the same packet are answered first.
    let mut stream = raw(server.addr);
    stream
        .write_all(b"PING\r\n*1\r\n$4\r\nPING\r\n*z\r\n")
        .unwrap();
    assert_eq!(
        read_to_close(&mut stream),
        "+PONG\r\n+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n"
    );
    server.shutdown().unwrap();
}

#[test]
fn oversized_requests_are_refused_by_the_query_buffer_limit() {
    let (server, _dir) = start();
    let mut con = redis_con(server.addr);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-query-buffer-limit")
        .arg("1mb")
        .query(&mut con)
        .unwrap();
    let mut stream = raw(server.addr);
    // A 2 MB bulk is announced: refused before it is buffered.
    stream
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n")
        .unwrap();
    let reply = read_to_close(&mut stream);
    assert!(
        reply.starts_with("-ERR Protocol error:") && reply.contains("client-query-buffer-limit"),
        "{reply}"
    );
    // An inline command without a newline cannot grow past 64 KiB either.
    let mut stream = raw(server.addr);
    let _ = stream.write_all(&vec![b'a'; 70 * 1024]);
    assert_eq!(
        read_to_close(&mut stream),
        "-ERR Protocol error: too big inline request\r\n"
    );
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v, None);
    server.shutdown().unwrap();
}

#[test]
fn garbage_clients_do_not_disturb_a_good_one() {
    let (server, _dir) = start();
    let addr = server.addr;
    let good = std::thread::spawn(move || {
        let mut con = redis_con(addr);
        for i in 0..2000 {
            let _: () = redis::cmd("SET")
                .arg(format!("k{i}"))
                .arg(i)
                .query(&mut con)
                .unwrap();
        }
        con
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for round in 0..40 {
        let mut stream = raw(addr);
        let len = rng.random_range(1..4096);
        let mut garbage: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        // Half the time start like a real command, then go wrong.
        if round % 2 == 0 {
            garbage.splice(0..0, b"*2\r\n$3\r\nGET\r\n".iter().copied());
        }
        garbage.extend_from_slice(b"\r\n*-\r\n");
        let _ = stream.write_all(&garbage);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        // Whatever it said, the server must end the conversation.
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
    }
    let mut con = good.join().unwrap();
    for i in 0..2000 {
        let v: i64 = redis::cmd("GET")
            .arg(format!("k{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(v, i);
    }
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(
        dbsize, 2000,
        "garbage must not have created or removed keys"
    );
    server.shutdown().unwrap();
}

#[test]
fn a_deep_pipeline_is_answered_in_order() {
    let (server, _dir) = start();
    let mut stream = raw(server.addr);
    let mut batch = Vec::new();
    for i in 0..10_000 {
        batch.extend_from_slice(
            format!(
                "*3\r\n$3\r\nSET\r\n$5\r\nkey{:02}\r\n${}\r\n{i}\r\n",
                i % 100,
                i.to_string().len()
            )
            .as_bytes(),
        );
        batch.extend_from_slice(
            format!("*2\r\n$3\r\nGET\r\n$5\r\nkey{:02}\r\n", i % 100).as_bytes(),
        );
    }
    batch.extend_from_slice(b"QUIT\r\n");
    stream.write_all(&batch).unwrap();
    let reply = read_to_close(&mut stream);
    let mut expected = String::new();
    for i in 0..10_000 {
        expected.push_str(&format!("+OK\r\n${}\r\n{i}\r\n", i.to_string().len()));
    }
    expected.push_str("+OK\r\n");
    assert_eq!(reply.len(), expected.len());
    assert!(reply == expected, "replies out of order or wrong");
    server.shutdown().unwrap();
}

#[test]
fn thousands_of_simultaneous_connections() {
    const CONNECTIONS: usize = 3000;
    // Both ends live in this process: two descriptors per connection.
    let limit = rlimit::increase_nofile_limit(2 * CONNECTIONS as u64 + 256).unwrap();
    assert!(
        limit >= 2 * CONNECTIONS as u64 + 256,
        "open-file limit {limit} too low for the test"
    );
    let (server, _dir) = start();
    let mut streams: Vec<TcpStream> = (0..CONNECTIONS).map(|_| raw(server.addr)).collect();
    for (i, stream) in streams.iter_mut().enumerate() {
        stream
            .write_all(format!("*3\r\n$3\r\nSET\r\n$6\r\nc{i:05}\r\n$1\r\n1\r\n").as_bytes())
            .unwrap();
    }
    for stream in &mut streams {
        let mut reply = [0u8; 5];
        stream.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"+OK\r\n");
    }
    let mut con = redis_con(server.addr);
    let info: String = redis::cmd("INFO").arg("clients").query(&mut con).unwrap();
    let connected: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(connected > CONNECTIONS, "INFO shows {connected} clients");
    let dbsize: usize = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, CONNECTIONS);
    drop(streams);
    server.shutdown().unwrap();
}

#[test]
fn maxclients_refuses_with_an_error_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(Config {
        port: 0,
        dir: dir.path().join("data"),
        maxclients: 2,
        ..Config::default()
    })
    .unwrap();
    let mut first = redis_con(server.addr);
    let _second = redis_con(server.addr);
    let mut third = raw(server.addr);
    assert_eq!(
        read_to_close(&mut third),
        "-ERR max number of clients reached\r\n"
    );
    let pong: String = redis::cmd("PING").query(&mut first).unwrap();
    assert_eq!(pong, "PONG");
    server.shutdown().unwrap();
}
