//! MIGRATE between Engram and a real redis-server 7.0.15 (on PATH), both
//! ways, and between two Engram servers: every type with its expiry, COPY,
//! REPLACE, KEYS, AUTH and AUTH2; then the error paths (a closed port, a
//! target that never answers, the target's BUSYKEY, NOAUTH and WRONGPASS,
//! bad arguments), whose replies are held to Redis's own MIGRATE's. And
//! Engram's rule for a key written while MIGRATE waits for its target: it
//! is kept, never deleted (see `commands/migrate.rs`), checked with fake
//! targets that let a write in before they answer, and with another client
//! racing MIGRATE round after round.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use common::{bytes, redis_con, snapshot, start, start_with, Client, RedisServer};
use redis::{Connection, Value};

fn q(con: &mut Connection, words: &[&str]) -> Value {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    cmd.query(con).unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

fn pttl(con: &mut Connection, key: &str) -> i64 {
    match q(con, &["PTTL", key]) {
        Value::Int(n) => n,
        other => panic!("PTTL replied {other:?}"),
    }
}

/// One key of every type (two with an expiry), made on `con`.
const KEYS: &[&str] = &[
    "str", "int", "big", "hash", "list", "set", "zset", "ttl", "zttl",
];

fn fill(con: &mut Connection) {
    q(con, &["SET", "str", "hello world"]);
    q(con, &["SET", "int", "-12345"]);
    q(con, &["SET", "big", &"abc".repeat(30_000)]);
    q(con, &["HSET", "hash", "f1", "v1", "f2", "2", "f3", ""]);
    q(con, &["RPUSH", "list", "a", "b", "c", "12", ""]);
    q(con, &["SADD", "set", "x", "y", "7"]);
    q(con, &["ZADD", "zset", "1.5", "a", "-2", "b", "inf", "c"]);
    q(con, &["SET", "ttl", "expiring", "PX", "600000"]);
    q(con, &["ZADD", "zttl", "1", "m"]);
    q(con, &["PEXPIRE", "zttl", "500000"]);
}

/// Fills `source`, migrates every key one by one with MIGRATE sent to
/// `source`, and checks the target holds what the source held (expiry
/// too), and the source nothing.
fn migrate_every_type(source: SocketAddr, target: SocketAddr) {
    let (mut src, mut dst) = (redis_con(source), redis_con(target));
    fill(&mut src);
    let before: Vec<_> = KEYS
        .iter()
        .map(|k| snapshot(&mut src, k.as_bytes()))
        .collect();
    for key in KEYS {
        let reply = q(
            &mut src,
            &[
                "MIGRATE",
                &target.ip().to_string(),
                &target.port().to_string(),
                key,
                "0",
                "5000",
            ],
        );
        assert_eq!(reply, Value::Okay, "MIGRATE {key}");
    }
    for (key, want) in KEYS.iter().zip(&before) {
        assert_eq!(
            &snapshot(&mut dst, key.as_bytes()),
            want,
            "{key} on the target"
        );
        assert_eq!(q(&mut src, &["EXISTS", key]), Value::Int(0), "{key} left");
    }
    assert_eq!(pttl(&mut dst, "str"), -1);
    let ttl = pttl(&mut dst, "ttl");
    assert!(ttl > 500_000 && ttl <= 600_000, "ttl's PTTL {ttl}");
    let zttl = pttl(&mut dst, "zttl");
    assert!(zttl > 400_000 && zttl <= 500_000, "zttl's PTTL {zttl}");
}

#[test]
fn engram_to_redis_every_type() {
    let (engram, _dir) = start();
    let redis = RedisServer::start();
    migrate_every_type(engram.addr, redis.addr);
}

#[test]
fn redis_to_engram_every_type() {
    let (engram, _dir) = start();
    let redis = RedisServer::start();
    migrate_every_type(redis.addr, engram.addr);
}

#[test]
fn engram_to_engram_keys_copy_and_db() {
    let (source, _d1) = start();
    let (target, _d2) = start();
    let mut src = Client::connect(&source);
    let mut dst = Client::connect(&target);
    let (host, port) = (target.addr.ip().to_string(), target.addr.port());
    src.script(&[("MSET a 1 b 2 c 3", "OK"), ("RPUSH l x y", "(integer) 2")]);
    // KEYS: only the keys that exist go; COPY keeps them here.
    src.script(&[
        (
            &format!("MIGRATE {host} {port} \"\" 3 5000 COPY KEYS a missing l"),
            "OK",
        ),
        ("EXISTS a l", "(integer) 2"),
    ]);
    dst.script(&[
        ("SELECT 3", "OK"),
        ("GET a", "\"1\""),
        ("LRANGE l 0 -1", "[\"x\", \"y\"]"),
        ("EXISTS missing b", "(integer) 0"),
        ("SELECT 0", "OK"),
        ("DBSIZE", "(integer) 0"),
    ]);
    // Without COPY the keys move; none of them existing is NOKEY.
    src.script(&[
        (
            &format!("MIGRATE {host} {port} \"\" 3 5000 REPLACE KEYS b c"),
            "OK",
        ),
        ("EXISTS b c", "(integer) 0"),
        (
            &format!("MIGRATE {host} {port} \"\" 3 5000 KEYS b c"),
            "NOKEY",
        ),
        (&format!("MIGRATE {host} {port} nothing 3 5000"), "NOKEY"),
    ]);
    dst.script(&[("SELECT 3", "OK"), ("MGET b c", "[\"2\", \"3\"]")]);
}

/// Runs each command on both sources and holds Engram's reply to
/// Redis's. `TO` in a command stands for the source's own target (two
/// targets in the same state).
fn same_on_both(
    (engram, engram_to): (&mut Client, SocketAddr),
    (redis, redis_to): (&mut Client, SocketAddr),
    commands: &[String],
) {
    let to = |addr: SocketAddr| format!("{} {}", addr.ip(), addr.port());
    for command in commands {
        let want = redis.call(&command.replace("TO", &to(redis_to)));
        let got = engram.call(&command.replace("TO", &to(engram_to)));
        assert_eq!(got, want, "reply to `{command}`");
    }
}

#[test]
fn replace_and_busykey_like_redis() {
    // Engram → target A and Redis → target B, targets alike.
    let (engram, _dir) = start();
    let redis = RedisServer::start();
    let (target_a, target_b) = (RedisServer::start(), RedisServer::start());
    let mut e = Client::connect(&engram);
    let mut r = redis.client();
    for (client, target) in [(&mut e, &target_a), (&mut r, &target_b)] {
        client.script(&[("SET k mine", "OK"), ("SET other x", "OK")]);
        target.client().script(&[("SET k theirs", "OK")]);
        let to = format!("{} {}", target.addr.ip(), target.addr.port());
        let replies: Vec<String> = [
            format!("MIGRATE {to} k 0 5000"),
            "GET k".into(),
            // BUSYKEY for k; other was taken and goes.
            format!("MIGRATE {to} \"\" 0 5000 KEYS other k"),
            "EXISTS other k".into(),
            format!("MIGRATE {to} k 0 5000 REPLACE"),
            "EXISTS k".into(),
        ]
        .iter()
        .map(|c| client.call(c))
        .collect();
        assert_eq!(
            replies,
            [
                "(error) ERR Target instance replied with error: BUSYKEY Target key name \
                 already exists.",
                "\"mine\"",
                "(error) ERR Target instance replied with error: BUSYKEY Target key name \
                 already exists.",
                "(integer) 1",
                "OK",
                "(integer) 0",
            ],
            "replies of {}",
            if target.addr == target_a.addr {
                "Engram"
            } else {
                "Redis"
            }
        );
        let mut t = target.client();
        t.script(&[("GET k", "\"mine\""), ("GET other", "\"x\"")]);
    }
}

#[test]
fn auth_and_auth2_like_redis() {
    let (engram, _dir) = start();
    let redis = RedisServer::start();
    let targets = [RedisServer::start(), RedisServer::start()];
    let mut e = Client::connect(&engram);
    let mut r = redis.client();
    for (client, target) in [(&mut e, &targets[0]), (&mut r, &targets[1])] {
        target
            .client()
            .script(&[("CONFIG SET requirepass s3cret", "OK")]);
        let to = format!("{} {}", target.addr.ip(), target.addr.port());
        client.script(&[("RPUSH l a b c", "(integer) 3"), ("SET s v", "OK")]);
        client.script(&[
            (
                &format!("MIGRATE {to} l 0 5000"),
                "(error) ERR Target instance replied with error: NOAUTH Authentication required.",
            ),
            (
                &format!("MIGRATE {to} l 0 5000 AUTH wrong"),
                "(error) ERR Target instance replied with error: WRONGPASS invalid \
                 username-password pair or user is disabled.",
            ),
            ("EXISTS l", "(integer) 1"),
            (&format!("MIGRATE {to} l 0 5000 AUTH s3cret"), "OK"),
            (&format!("MIGRATE {to} s 0 5000 AUTH2 default s3cret"), "OK"),
            ("EXISTS l s", "(integer) 0"),
            // On the cached, authenticated connection a wrong password
            // fails AUTH but not the RESTORE after it: the target has t,
            // and t stays here (MIGRATE failed).
            ("SET t v", "OK"),
            (
                &format!("MIGRATE {to} t 0 5000 AUTH wrong"),
                "(error) ERR Target instance replied with error: WRONGPASS invalid \
                 username-password pair or user is disabled.",
            ),
            ("EXISTS t", "(integer) 1"),
        ]);
        let mut t = target.client();
        t.script(&[
            ("AUTH s3cret", "OK"),
            ("LRANGE l 0 -1", "[\"a\", \"b\", \"c\"]"),
            ("GET s", "\"v\""),
            ("GET t", "\"v\""),
        ]);
    }
    // An Engram target with requirepass, from Engram: AUTH and AUTH2.
    let (protected, _d) = start_with(engram_server::Config {
        requirepass: Some("pw".into()),
        ..engram_server::Config::default()
    });
    let to = format!("{} {}", protected.addr.ip(), protected.addr.port());
    e.script(&[
        ("MSET s2 v2 s3 v3", "OK"),
        (&format!("MIGRATE {to} s2 1 5000 AUTH pw"), "OK"),
        (
            &format!("MIGRATE {to} s3 1 5000 AUTH2 default nope"),
            "(error) ERR Target instance replied with error: WRONGPASS invalid \
             username-password pair or user is disabled.",
        ),
        // The cached connection was authenticated by the first MIGRATE
        // and a failed AUTH does not undo that: the target took s3 (as
        // Redis's would), but MIGRATE failed, so s3 stays here too.
        ("EXISTS s3", "(integer) 1"),
        (
            &format!("MIGRATE {to} s3 1 5000 AUTH2 default pw REPLACE"),
            "OK",
        ),
        ("EXISTS s2 s3", "(integer) 0"),
    ]);
    Client::connect(&protected).script(&[
        ("AUTH pw", "OK"),
        ("SELECT 1", "OK"),
        ("MGET s2 s3", "[\"v2\", \"v3\"]"),
    ]);
}

/// A port nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn argument_errors_and_a_closed_port_like_redis() {
    let (engram, _dir) = start();
    let redis = RedisServer::start();
    let targets = [RedisServer::start(), RedisServer::start()];
    let mut e = Client::connect(&engram);
    let mut r = redis.client();
    for client in [&mut e, &mut r] {
        client.script(&[("SET k v", "OK")]);
    }
    let closed = closed_port();
    // Each source's own target (see same_on_both).
    let to = "TO";
    let commands: Vec<String> = [
        "MIGRATE".to_string(),
        format!("MIGRATE {to} k 0"),
        format!("MIGRATE 127.0.0.1 {closed} k 0 1000"),
        format!("MIGRATE 127.0.0.1 {closed} k 0 -5"),
        format!("MIGRATE 127.0.0.1 {closed} nokey 0 1000"),
        "MIGRATE 127.0.0.1 notaport k 0 1000".to_string(),
        "MIGRATE 127.0.0.1 70000 k 0 1000".to_string(),
        "MIGRATE no-such-host.invalid 6379 k 0 1000".to_string(),
        format!("MIGRATE {to} k 0 1.5"),
        format!("MIGRATE {to} k 0 abc"),
        format!("MIGRATE {to} k x 1000"),
        format!("MIGRATE {to} k 0.5 1000"),
        format!("MIGRATE {to} k -1 1000"),
        format!("MIGRATE {to} k 99 1000"),
        format!("MIGRATE {to} k 0 1000 KEYS a b"),
        format!("MIGRATE {to} k 0 1000 BOGUS"),
        format!("MIGRATE {to} k 0 1000 AUTH"),
        format!("MIGRATE {to} k 0 1000 AUTH2 user"),
        // Options are checked before the numbers.
        format!("MIGRATE {to} k x 1000 BOGUS"),
        format!("MIGRATE {to} \"\" 0 1000 KEYS"),
        "EXISTS k".into(),
        "GET k".into(),
    ]
    .into_iter()
    .collect();
    same_on_both(
        (&mut e, targets[0].addr),
        (&mut r, targets[1].addr),
        &commands,
    );
    // And the texts themselves.
    e.script(&[("SET k v", "OK")]);
    let to = format!("{} {}", targets[0].addr.ip(), targets[0].addr.port());
    e.script(&[
        ("MIGRATE", &common::arity("migrate")),
        // Redis's connect does not wait for a refusal: it shows when
        // writing.
        (
            &format!("MIGRATE 127.0.0.1 {closed} k 0 1000"),
            "(error) IOERR error or timeout writing to target instance",
        ),
        (
            "MIGRATE no-such-host.invalid 6379 k 0 1000",
            "(error) IOERR error or timeout connecting to the client",
        ),
        (&format!("MIGRATE {to} k 0 abc"), common::NOT_INT),
        (&format!("MIGRATE {to} k x 1000"), common::NOT_INT),
        (
            &format!("MIGRATE {to} k 0 1000 KEYS a b"),
            "(error) ERR When using MIGRATE KEYS option, the key argument must be set to \
             the empty string",
        ),
        (&format!("MIGRATE {to} k 0 1000 BOGUS"), common::SYNTAX),
        // A cached connection has a database selected: -1 is sent.
        (&format!("MIGRATE {to} k 2 1000 COPY"), "OK"),
        (
            &format!("MIGRATE {to} k -1 1000"),
            "(error) ERR Target instance replied with error: ERR DB index is out of range",
        ),
        ("GET k", "\"v\""),
    ]);
}

/// A fake target: accepts one connection, reads `commands` requests, runs
/// `between`, then writes `replies` and hangs up; returns what it read.
fn fake_target(
    commands: usize,
    replies: &'static str,
    between: impl FnOnce() + Send + 'static,
) -> (SocketAddr, std::thread::JoinHandle<Vec<Vec<Vec<u8>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let read: Vec<Vec<Vec<u8>>> = (0..commands).map(|_| read_command(&mut reader)).collect();
        between();
        (&stream).write_all(replies.as_bytes()).unwrap();
        // Then hangs up: Engram's cached connection to it is dead, which
        // only a later MIGRATE to it would find (and retry).
        read
    });
    (addr, handle)
}

fn read_command(reader: &mut impl BufRead) -> Vec<Vec<u8>> {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let n: usize = line.trim_end().strip_prefix('*').unwrap().parse().unwrap();
    (0..n)
        .map(|_| {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let len: usize = line.trim_end().strip_prefix('$').unwrap().parse().unwrap();
            let mut word = vec![0; len + 2];
            reader.read_exact(&mut word).unwrap();
            word.truncate(len);
            word
        })
        .collect()
}

#[test]
fn a_key_written_during_the_exchange_is_kept() {
    let (engram, _dir) = start();
    let addr = engram.addr;
    let mut c = Client::connect(&engram);
    c.script(&[
        ("SET k old", "OK"),
        ("SET same v", "OK"),
        ("SET gone v", "OK"),
        ("SET again v", "OK"),
    ]);
    // The target has read SELECT and four RESTOREs; before it answers,
    // another client overwrites k, deletes gone and sets again to the
    // value it had.
    let replies = "+OK\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n";
    let (target, requests) = fake_target(5, replies, move || {
        let mut other = Client::connect_addr(addr);
        other.script(&[
            ("SET k new", "OK"),
            ("DEL gone", "(integer) 1"),
            ("SET again v", "OK"),
        ]);
    });
    c.script(&[
        (
            &format!(
                "MIGRATE {} {} \"\" 2 5000 KEYS k same gone again",
                target.ip(),
                target.port()
            ),
            "OK",
        ),
        // k was written after it was sent: kept, with its new value; so is
        // again (written, if with the same value); the untouched key moved.
        ("GET k", "\"new\""),
        ("GET again", "\"v\""),
        ("EXISTS same gone", "(integer) 0"),
    ]);
    drop(c);
    let requests = requests.join().unwrap();
    assert_eq!(requests[0], [b"SELECT".to_vec(), b"2".to_vec()]);
    let restored: Vec<&[u8]> = requests[1..].iter().map(|r| r[1].as_slice()).collect();
    assert_eq!(restored, [&b"k"[..], b"same", b"gone", b"again"]);
    assert!(requests[1..]
        .iter()
        .all(|r| r[0] == b"RESTORE" && r[2] == b"0"));
}

#[test]
fn a_new_ttl_during_the_exchange_keeps_the_key() {
    let (engram, _dir) = start();
    let addr = engram.addr;
    let mut c = Client::connect(&engram);
    c.script(&[("RPUSH l a", "(integer) 1")]);
    let (target, _requests) = fake_target(2, "+OK\r\n+OK\r\n", move || {
        Client::connect_addr(addr).script(&[("EXPIRE l 1000", "(integer) 1")]);
    });
    c.script(&[
        (
            &format!("MIGRATE {} {} l 0 5000", target.ip(), target.port()),
            "OK",
        ),
        ("LRANGE l 0 -1", "[\"a\"]"),
    ]);
}

#[test]
fn migrating_to_this_very_server() {
    let (engram, _dir) = start();
    let mut c = Client::connect(&engram);
    let to = format!("{} {}", engram.addr.ip(), engram.addr.port());
    c.script(&[
        ("SET k v", "OK"),
        // Same database: BUSYKEY; with REPLACE the RESTORE rewrites k,
        // which MIGRATE then sees as written, and keeps.
        (
            &format!("MIGRATE {to} k 0 5000"),
            "(error) ERR Target instance replied with error: BUSYKEY Target key name \
             already exists.",
        ),
        (&format!("MIGRATE {to} k 0 5000 REPLACE"), "OK"),
        ("GET k", "\"v\""),
        // Another database: a move.
        (&format!("MIGRATE {to} k 4 5000"), "OK"),
        ("EXISTS k", "(integer) 0"),
        ("SELECT 4", "OK"),
        ("GET k", "\"v\""),
    ]);
}

#[test]
fn a_silent_target_times_out_and_the_key_stays() {
    let (engram, _dir) = start();
    let mut c = Client::connect(&engram);
    c.script(&[("SET k v", "OK")]);
    // Accepts, never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    let started = Instant::now();
    c.script(&[
        (
            &format!("MIGRATE {} {} k 0 300", target.ip(), target.port()),
            "(error) IOERR error or timeout reading to target instance",
        ),
        ("GET k", "\"v\""),
    ]);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "gave up after {took:?}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // Counted and timed whole, as Redis times it: a failed call of at
    // least 300 ms, in the slow log with its password redacted.
    c.script(&[("CONFIG SET slowlog-log-slower-than 200000", "OK")]);
    c.script(&[(
        &format!(
            "MIGRATE {} {} k 0 300 AUTH secret",
            target.ip(),
            target.port()
        ),
        "(error) IOERR error or timeout reading to target instance",
    )]);
    let slowlog = c.call("SLOWLOG GET 1");
    assert!(
        slowlog.contains("\"MIGRATE\"") && slowlog.contains("\"(redacted)\""),
        "{slowlog}"
    );
    assert!(!slowlog.contains("secret"), "{slowlog}");
    let stats = c.call("INFO commandstats");
    let line = stats
        .split("\\r\\n")
        .find(|l| l.starts_with("cmdstat_migrate:"))
        .unwrap_or_else(|| panic!("no cmdstat_migrate in {stats}"));
    assert!(
        line.contains("calls=2,") && line.contains("failed_calls=2"),
        "{line}"
    );
    let usec: u64 = line
        .split("usec=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(usec >= 600_000, "{line}");
    // The same, Redis as the source.
    let redis = RedisServer::start();
    let mut r = redis.client();
    r.script(&[
        ("SET k v", "OK"),
        (
            &format!("MIGRATE {} {} k 0 300", target.ip(), target.port()),
            "(error) IOERR error or timeout reading to target instance",
        ),
    ]);
    drop(listener);
}

#[test]
fn a_target_that_hangs_up_mid_way() {
    let (engram, _dir) = start();
    let mut c = Client::connect(&engram);
    c.script(&[("MSET a 1 b 2", "OK")]);
    // SELECT and the first RESTORE answered, then the connection closes.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        for _ in 0..3 {
            read_command(&mut reader);
        }
        (&stream).write_all(b"+OK\r\n+OK\r\n").unwrap();
        stream.shutdown(std::net::Shutdown::Both).unwrap();
    });
    c.script(&[
        (
            &format!(
                "MIGRATE {} {} \"\" 0 5000 KEYS a b",
                target.ip(),
                target.port()
            ),
            "(error) IOERR error or timeout reading to target instance",
        ),
        // a was acknowledged, so it moved; b stays.
        ("EXISTS a", "(integer) 0"),
        ("GET b", "\"2\""),
    ]);
    fake.join().unwrap();
}

fn cached_sockets(client: &mut Client) -> String {
    let info = client.call("INFO stats");
    info.split("\\r\\n")
        .find_map(|line| line.strip_prefix("migrate_cached_sockets:"))
        .unwrap_or_else(|| panic!("no migrate_cached_sockets in {info}"))
        .to_string()
}

#[test]
fn connections_are_cached_reused_and_released() {
    let (engram, _dir) = start();
    let target = RedisServer::start();
    let mut c = Client::connect(&engram);
    let mut t = target.client();
    let to = format!("{} {}", target.addr.ip(), target.addr.port());
    assert_eq!(cached_sockets(&mut c), "0");
    c.script(&[
        ("MSET a 1 b 2 c 3", "OK"),
        (&format!("MIGRATE {to} a 5 5000"), "OK"),
    ]);
    assert_eq!(cached_sockets(&mut c), "1");
    // The next MIGRATE to that target uses the same connection (and, same
    // database, sends no SELECT: b lands in 5).
    let clients_before = t.call("INFO clients");
    c.script(&[(&format!("MIGRATE {to} b 5 5000"), "OK")]);
    assert_eq!(t.call("INFO clients"), clients_before);
    // The target drops it: the next MIGRATE retries on a new one.
    t.script(&[("CLIENT KILL TYPE normal SKIPME yes", "(integer) 1")]);
    c.script(&[(&format!("MIGRATE {to} c 5 5000"), "OK")]);
    t.script(&[("SELECT 5", "OK"), ("MGET a b c", "[\"1\", \"2\", \"3\"]")]);
    // Released after 10 s unused (not before 8 s; waited for up to 30 s,
    // so a loaded machine does not fail it).
    let last_use = Instant::now();
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(cached_sockets(&mut c), "1");
    while cached_sockets(&mut c) != "0" {
        assert!(
            last_use.elapsed() < Duration::from_secs(30),
            "still cached after 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn migrate_inside_multi_is_refused() {
    let (engram, _dir) = start();
    let mut c = Client::connect(&engram);
    c.script(&[
        ("SET k v", "OK"),
        ("MULTI", "OK"),
        (
            "MIGRATE 127.0.0.1 1 k 0 1000",
            "(error) ERR Command not allowed inside a transaction",
        ),
        (
            "EXEC",
            "(error) EXECABORT Transaction discarded because of previous errors.",
        ),
        ("GET k", "\"v\""),
    ]);
}

#[test]
fn migrate_keys_for_command_getkeys_like_redis() {
    let (engram, _dir) = start();
    let redis = RedisServer::start();
    let (mut e, mut r) = (Client::connect(&engram), redis.client());
    let commands: Vec<String> = [
        "COMMAND GETKEYS MIGRATE h 1 k 0 100",
        "COMMAND GETKEYS MIGRATE h 1 \"\" 0 100 KEYS a b",
        "COMMAND GETKEYS MIGRATE h 1 \"\" 0 100 COPY AUTH keys KEYS a b",
        "COMMAND GETKEYS MIGRATE h 1 \"\" 0 100 AUTH2 keys keys KEYS a",
        "COMMAND GETKEYS MIGRATE h 1 k 0 100 KEYS a",
        "COMMAND GETKEYS MIGRATE h 1 k",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    same_on_both((&mut e, engram.addr), (&mut r, redis.addr), &commands);
    let info = e.call("COMMAND INFO migrate");
    assert!(info.contains("movablekeys"), "{info}");
}

/// MIGRATE while another client writes the same keys, round after round:
/// in each round the writer sets every key to the round's number while one
/// MIGRATE moves them all. No acknowledged write is ever lost: each key
/// holds the round's value on the source, or, if the source no longer has
/// it, on the target (a key is deleted only if nothing wrote it after it
/// was sent; without that check this fails within a few hundred rounds).
#[test]
fn concurrent_writes_are_never_lost() {
    const ROUNDS: usize = 400;
    let (engram, _dir) = start();
    let target = RedisServer::start();
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let writer = {
        let (addr, keys, barrier) = (engram.addr, keys.clone(), barrier.clone());
        std::thread::spawn(move || {
            let mut con = redis_con(addr);
            for round in 0..ROUNDS {
                barrier.wait();
                for key in &keys {
                    q(&mut con, &["SET", key, &round.to_string()]);
                }
                barrier.wait();
            }
        })
    };
    let mut src = redis_con(engram.addr);
    let mut dst = target.con();
    let (host, port) = (target.addr.ip().to_string(), target.addr.port().to_string());
    let mut words = vec!["MIGRATE", &host, &port, "", "0", "5000", "REPLACE", "KEYS"];
    words.extend(keys.iter().map(String::as_str));
    let (mut kept, mut moved) = (0, 0);
    for round in 0..ROUNDS {
        barrier.wait();
        let reply = q(&mut src, &words);
        assert!(
            matches!(&reply, Value::Okay)
                || matches!(&reply, Value::SimpleString(s) if s == "NOKEY"),
            "{reply:?}"
        );
        barrier.wait();
        let value = round.to_string();
        for key in &keys {
            match q(&mut src, &["GET", key]) {
                Value::Nil => {
                    assert_eq!(
                        bytes(q(&mut dst, &["GET", key])),
                        value.as_bytes(),
                        "round {round}: {key} left the source; the target must hold its last write"
                    );
                    moved += 1;
                }
                here => {
                    assert_eq!(bytes(here), value.as_bytes(), "round {round}: {key}");
                    kept += 1;
                }
            }
        }
    }
    writer.join().unwrap();
    // Both outcomes happened: the race is real, not avoided.
    assert!(moved > 0 && kept > 0, "moved {moved}, kept {kept}");
}
