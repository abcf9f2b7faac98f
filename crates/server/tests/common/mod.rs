//! What the integration suites share: a server on a free port in a fresh
//! directory, a redis-cli-like client whose replies render as text, and
//! Redis's error replies as that client renders them.
#![allow(dead_code)]

pub const WRONGTYPE: &str =
    "(error) WRONGTYPE Operation against a key holding the wrong kind of value";
pub const SYNTAX: &str = "(error) ERR syntax error";
pub const NOT_INT: &str = "(error) ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "(error) ERR value is not a valid float";

/// Redis's wrong-arity error for `command` (lowercase, as Redis names it).
pub fn arity(command: &str) -> String {
    format!("(error) ERR wrong number of arguments for '{command}' command")
}

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[path = "../../../replication/tests/support/ports.rs"]
mod ports;
pub use ports::free_port;

use engram_server::{Config, Server};

pub struct Client {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

impl Client {
    pub fn connect(server: &Server) -> Client {
        let stream = TcpStream::connect(server.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// Sends one command (words split on spaces; `\s` stands for a space
    /// inside a word, `""` for an empty word) and renders the reply.
    pub fn call(&mut self, line: &str) -> String {
        self.send(line);
        self.reply()
    }

    /// Sends one command (words as for `call`) without reading its reply:
    /// to read it raw, or to leave a blocking command waiting.
    pub fn send(&mut self, line: &str) {
        self.writer.write_all(encode(line).as_bytes()).unwrap();
    }

    /// Sends `lines` (words as for `call`) in one write, so that the
    /// server finds them in one read, and renders their replies.
    pub fn pipeline(&mut self, lines: &[&str]) -> Vec<String> {
        let request: String = lines.iter().map(|line| encode(line)).collect();
        self.writer.write_all(request.as_bytes()).unwrap();
        lines.iter().map(|_| self.reply()).collect()
    }

    pub fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        assert!(line.ends_with("\r\n"), "truncated reply line {line:?}");
        line.truncate(line.len() - 2);
        line
    }

    pub fn reply(&mut self) -> String {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => rest.to_string(),
            "-" => format!("(error) {rest}"),
            ":" => format!("(integer) {rest}"),
            "," => format!("(double) {rest}"),
            "#" => format!("(boolean) {rest}"),
            "(" => format!("(big number) {rest}"),
            "|" => {
                // Attributes, then the reply they describe.
                let n: usize = rest.parse().unwrap();
                let attributes: Vec<String> = (0..2 * n).map(|_| self.reply()).collect();
                format!("(attributes [{}]) {}", attributes.join(", "), self.reply())
            }
            ">" => {
                let n: usize = rest.parse().unwrap();
                let items: Vec<String> = (0..n).map(|_| self.reply()).collect();
                format!("(push) [{}]", items.join(", "))
            }
            "_" => "(nil)".into(),
            "$" | "=" if rest == "-1" => "(nil)".into(),
            "$" | "=" => {
                let len: usize = rest.parse().unwrap();
                let mut body = vec![0; len + 2];
                self.reader.read_exact(&mut body).unwrap();
                body.truncate(len);
                format!("{:?}", String::from_utf8_lossy(&body))
            }
            "*" if rest == "-1" => "(nil array)".into(),
            "*" | "~" | "%" => {
                let n: usize = rest.parse().unwrap();
                let n = if kind == "%" { 2 * n } else { n };
                let items: Vec<String> = (0..n).map(|_| self.reply()).collect();
                format!("[{}]", items.join(", "))
            }
            _ => panic!("unexpected reply line {line:?}"),
        }
    }

    /// Runs `(command, expected reply)` pairs in order.
    pub fn script(&mut self, cases: &[(&str, &str)]) {
        for (command, expected) in cases {
            assert_eq!(self.call(command), *expected, "reply to `{command}`");
        }
    }
}

/// One command in RESP: words split on spaces, `\s` a space inside a
/// word, `""` an empty word.
pub fn encode(line: &str) -> String {
    let words: Vec<String> = line
        .split(' ')
        .map(|w| {
            if w == "\"\"" {
                String::new()
            } else {
                w.replace("\\s", " ")
            }
        })
        .collect();
    let mut request = format!("*{}\r\n", words.len());
    for word in &words {
        request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
    }
    request
}

/// The configuration of a server on a free port keeping its data under
/// `dir`: starting it again with the same `dir` is a restart.
pub fn config_in(dir: &std::path::Path) -> Config {
    Config {
        port: 0,
        dir: dir.join("data"),
        ..Config::default()
    }
}

/// A `redis` crate connection to the server at `addr`.
pub fn redis_con(addr: std::net::SocketAddr) -> redis::Connection {
    redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

pub fn start() -> (Server, tempfile::TempDir) {
    start_with(Config::default())
}

/// The text INFO `section` shows for `field` (up to the end of its line).
pub fn info_field(c: &mut Client, section: &str, field: &str) -> String {
    let info = c.call(&format!("INFO {section}"));
    let at = info
        .find(&format!("\\n{field}:"))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {info}"))
        + field.len()
        + 3;
    // The reply shows its line ends escaped (`\r\n`).
    info[at..].split('\\').next().unwrap().to_string()
}

/// The number INFO `section` shows for `field`.
pub fn info_number(c: &mut Client, section: &str, field: &str) -> u64 {
    let text = info_field(c, section, field);
    text.split(|ch: char| !ch.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("INFO {section}'s {field} is not a number: {text}"))
}

/// INFO's keyspace_hits and keyspace_misses.
pub fn lookups(c: &mut Client) -> (u64, u64) {
    (
        info_number(c, "stats", "keyspace_hits"),
        info_number(c, "stats", "keyspace_misses"),
    )
}

/// `key`'s LFU counter (OBJECT FREQ, under an LFU policy).
pub fn object_freq(c: &mut Client, key: &str) -> u64 {
    let reply = c.call(&format!("OBJECT FREQ {key}"));
    reply
        .trim_start_matches("(integer) ")
        .parse()
        .unwrap_or_else(|_| panic!("OBJECT FREQ {key}: {reply}"))
}

/// A server whose configuration file allows DEBUG (`enable-debug-command
/// yes`, a setting of the file only); the second directory holds the file.
pub fn start_debuggable() -> (Server, tempfile::TempDir, tempfile::TempDir) {
    start_with_file("enable-debug-command yes\n")
}

/// A server started from a configuration file of `text`; the second
/// directory holds the file.
pub fn start_with_file(text: &str) -> (Server, tempfile::TempDir, tempfile::TempDir) {
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("engram.conf");
    std::fs::write(&path, text).unwrap();
    let (server, dir) = start_with(Config::from_file(&path).unwrap());
    (server, dir, conf)
}

pub fn start_with(config: Config) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(Config {
        port: 0,
        dir: dir.path().join("data"),
        ..config
    })
    .unwrap();
    (server, dir)
}

impl Client {
    /// A client of any server at `addr` (a reference redis-server too).
    pub fn connect_addr(addr: std::net::SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }
}

/// A real redis-server from PATH (.ci/run installs it) on a free port,
/// persistence off, in a directory of its own; killed when dropped. The
/// interoperability tests hold Engram's replies and bytes against it.
pub struct RedisServer {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with_args(&[])
    }

    /// With more command-line arguments (`--aclfile`, ...); the server's
    /// directory is `dir()`.
    pub fn start_with_args(extra: &[&str]) -> RedisServer {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
                // For the tests that compare DEBUG's answers (DUMP payloads
                // of Redis's plain encodings, for one).
                "--enable-debug-command",
                "yes",
            ])
            .args(extra)
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server must be on PATH (.ci/run installs it)");
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut server = RedisServer {
            child,
            addr,
            _dir: dir,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if answers_ping(addr) {
                return server;
            }
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("redis-server exited at start: {status}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not answer on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn client(&self) -> Client {
        Client::connect_addr(self.addr)
    }

    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    pub fn con(&self) -> redis::Connection {
        redis_con(self.addr)
    }
}

/// Whether a server at `addr` answers PING now; false on any error (not
/// listening yet, or a connection reset while it starts).
fn answers_ping(addr: std::net::SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut line = String::new();
    let Ok(reader) = stream.try_clone() else {
        return false;
    };
    BufReader::new(reader).read_line(&mut line).is_ok() && line == "+PONG\r\n"
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `(command, expected reply)` pairs on Engram and on Redis, holding
/// both to the expected text: the expectation is Redis's own answer.
pub fn script_both(engram: &mut Client, redis: &mut Client, cases: &[(&str, &str)]) {
    for (command, expected) in cases {
        assert_eq!(
            redis.call(command),
            *expected,
            "Redis's reply to `{command}`"
        );
        assert_eq!(
            engram.call(command),
            *expected,
            "Engram's reply to `{command}`"
        );
    }
}

/// Runs each command on Engram and on Redis and holds Engram to Redis's
/// reply, whatever it is (for generated commands); returns the replies.
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

/// Engram and a redis-server 7.0 side by side, each with a text client:
/// what the comparison tests start with.
pub fn beside_redis() -> (Server, tempfile::TempDir, RedisServer, Client, Client) {
    let (server, dir) = start();
    let redis = RedisServer::start();
    let (engram_client, redis_client) = (Client::connect(&server), redis.client());
    (server, dir, redis, engram_client, redis_client)
}

/// A string-like reply's bytes (bulk, status or integer as text).
pub fn bytes(value: redis::Value) -> Vec<u8> {
    match value {
        redis::Value::BulkString(bytes) => bytes,
        redis::Value::SimpleString(text) => text.into_bytes(),
        redis::Value::Int(n) => n.to_string().into_bytes(),
        other => panic!("not a string: {other:?}"),
    }
}

/// An array (or RESP3 set) reply's items, each as [`bytes`].
pub fn items(value: redis::Value) -> Vec<Vec<u8>> {
    match value {
        redis::Value::Array(items) | redis::Value::Set(items) => {
            items.into_iter().map(bytes).collect()
        }
        other => panic!("not an array: {other:?}"),
    }
}

/// The reply to `args`; panics (naming the call) on an error reply.
pub fn query_ok(con: &mut redis::Connection, args: &[&[u8]]) -> redis::Value {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(con).unwrap_or_else(|e| {
        let call: Vec<_> = args.iter().map(|a| String::from_utf8_lossy(a)).collect();
        panic!("{call:?}: {e}")
    })
}

/// A key's type and contents in a comparable form (sets and hashes
/// sorted; sorted sets in rank order with their scores).
pub fn snapshot(con: &mut redis::Connection, key: &[u8]) -> (String, Vec<Vec<u8>>) {
    let kind = String::from_utf8(bytes(query_ok(con, &[b"TYPE", key]))).unwrap();
    let mut contents = match kind.as_str() {
        "none" => Vec::new(),
        "string" => vec![bytes(query_ok(con, &[b"GET", key]))],
        "list" => items(query_ok(con, &[b"LRANGE", key, b"0", b"-1"])),
        "set" => items(query_ok(con, &[b"SMEMBERS", key])),
        // Scores as numbers: Redis 7.0 prints 17 digits, 7.2 (and Engram)
        // the shortest that reads back the same.
        "zset" => items(query_ok(con, &[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"]))
            .chunks(2)
            .flat_map(|pair| {
                let score: f64 = std::str::from_utf8(&pair[1]).unwrap().parse().unwrap();
                [pair[0].clone(), format!("{score:?}").into_bytes()]
            })
            .collect(),
        "hash" => {
            let flat = items(query_ok(con, &[b"HGETALL", key]));
            let pairs: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = flat
                .chunks(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect();
            pairs.into_iter().flat_map(|(f, v)| [f, v]).collect()
        }
        other => panic!("unexpected type {other}"),
    };
    if kind == "set" {
        contents.sort();
    }
    (kind, contents)
}
