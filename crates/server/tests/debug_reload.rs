//! DEBUG RELOAD and DEBUG LOADAOF: the keyspace closed and opened again
//! from persistent memory (recovery included) while clients stay
//! connected. Every type comes back byte for byte (DUMP before and after),
//! expiries and FUNCTION libraries too; writes acknowledged around a
//! reload are all there; a client blocked across it is served after it; a
//! WATCH made before it aborts its transaction, as in Redis.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{info_number, redis_con, start_debuggable, Client, RedisServer};

/// Every key of databases 0 and 3 with its DUMP payload and TTL state.
fn state(c: &mut Client) -> Vec<String> {
    let mut all = Vec::new();
    for db in [0, 3] {
        c.call(&format!("SELECT {db}"));
        let keys = c.call("KEYS *");
        let mut names: Vec<String> = keys
            .trim_matches(|ch| ch == '[' || ch == ']')
            .split(", ")
            .filter(|k| !k.is_empty())
            .map(|k| k.trim_matches('"').to_string())
            .collect();
        names.sort();
        for name in names {
            let ttl = c.call(&format!("PTTL {name}")) != "(integer) -1";
            all.push(format!(
                "{db} {name} ttl={ttl} {}",
                c.call(&format!("DUMP {name}"))
            ));
        }
    }
    c.call("SELECT 0");
    all
}

/// INFO engram's `recovery_records`: what the last opening of the store
/// recovered.
fn recovered(c: &mut Client) -> u64 {
    info_number(c, "engram", "recovery_records")
}

#[test]
fn every_type_comes_back_and_connected_clients_go_on() {
    let (server, _dir, _conf) = start_debuggable();
    let mut a = Client::connect(&server);
    let mut b = Client::connect(&server);
    a.script(&[
        ("SET s hello", "OK"),
        ("SET counter 41", "OK"),
        ("RPUSH l x y z", "(integer) 3"),
        ("HSET h f1 v1 f2 v2", "(integer) 2"),
        ("SADD st m1 m2 3", "(integer) 3"),
        ("ZADD z 1 one 2.5 two", "(integer) 2"),
        ("SETBIT bits 1000 1", "(integer) 0"),
        ("PFADD hll a b c", "(integer) 1"),
        ("XADD st2 1-1 f v", "\"1-1\""),
        ("XADD st2 2-1 f w", "\"2-1\""),
        ("XGROUP CREATE st2 g 0", "OK"),
        ("SET volatile v PX 600000", "OK"),
        ("SELECT 3", "OK"),
        ("SET other-db here", "OK"),
        ("SELECT 0", "OK"),
    ]);
    let library: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=lib\nredis.register_function('one', function() return 1 end)")
        .query(&mut redis_con(server.addr))
        .unwrap();
    assert_eq!(library, "lib");
    // A pending entry: the group's PEL must come back too.
    assert!(a
        .call("XREADGROUP GROUP g alice COUNT 1 STREAMS st2 >")
        .contains("1-1"));
    let before = state(&mut a);
    assert_eq!(before.len(), 11, "{before:?}");
    let pending = a.call("XPENDING st2 g");

    // A fresh store recovered nothing at start; the reload's recovery
    // finds what was written since (the keyspace really was reopened).
    assert_eq!(recovered(&mut a), 0);
    a.script(&[("DEBUG RELOAD", "OK")]);
    assert!(recovered(&mut a) > 0, "the reload did not recover anything");
    assert_eq!(state(&mut a), before, "after DEBUG RELOAD");
    assert_eq!(a.call("XPENDING st2 g"), pending);
    // The client connected before the reload goes on, on the new keyspace.
    b.script(&[
        ("INCR counter", "(integer) 42"),
        ("FCALL one 0", "(integer) 1"),
        ("GET s", "\"hello\""),
    ]);
    let ttl: i64 = a.call("PTTL volatile")[10..].parse().unwrap();
    assert!(ttl > 500_000 && ttl <= 600_000, "PTTL {ttl}");

    let before = state(&mut a);
    a.script(&[
        ("DEBUG LOADAOF", "OK"),
        ("DEBUG RELOAD NOSAVE NOFLUSH MERGE", "OK"),
    ]);
    assert_eq!(state(&mut a), before, "after DEBUG LOADAOF");
    a.script(&[("DBSIZE", "(integer) 10")]);
    server.shutdown().unwrap();
}

#[test]
fn writes_acknowledged_around_reloads_are_all_kept() {
    let (server, _dir, _conf) = start_debuggable();
    let addr = server.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, acked) = (stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut con = redis_con(addr);
                while !stop.load(Ordering::Relaxed) {
                    let _: i64 = redis::cmd("INCR").arg("n").query(&mut con).unwrap();
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut c = Client::connect(&server);
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(50));
        c.script(&[("DEBUG RELOAD", "OK")]);
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    let count = acked.load(Ordering::Relaxed);
    assert!(count > 0);
    assert_eq!(c.call("GET n"), format!("\"{count}\""));
    server.shutdown().unwrap();
}

/// The same sequence on Redis and on Engram: a client blocked across the
/// reload is served by a push after it; a WATCHed key makes EXEC fail.
#[test]
fn blocked_clients_and_watches_across_a_reload_as_redis() {
    let (server, _dir, _conf) = start_debuggable();
    let redis = RedisServer::start();
    for (name, addr) in [("Redis", redis.addr), ("Engram", server.addr)] {
        let mut a = Client::connect_addr(addr);
        let mut watcher = Client::connect_addr(addr);
        let mut blocked = Client::connect_addr(addr);
        blocked.send("BLPOP q 0");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !a.call("INFO clients").contains("blocked_clients:1") {
            assert!(Instant::now() < deadline, "{name}: BLPOP never blocked");
            std::thread::sleep(Duration::from_millis(10));
        }
        watcher.script(&[("SET w 1", "OK"), ("WATCH w", "OK")]);
        a.script(&[("DEBUG RELOAD", "OK"), ("RPUSH q v", "(integer) 1")]);
        assert_eq!(
            blocked.reply(),
            "[\"q\", \"v\"]",
            "{name}: the blocked client"
        );
        watcher.script(&[
            ("MULTI", "OK"),
            ("SET w 2", "QUEUED"),
            ("EXEC", "(nil array)"),
            ("GET w", "\"1\""),
        ]);
        a.script(&[(
            "DEBUG RELOAD BOGUS",
            "(error) ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.",
        )]);
    }
    server.shutdown().unwrap();
}

#[test]
fn refused_inside_a_transaction() {
    let (server, _dir, _conf) = start_debuggable();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SET k v", "OK"),
        ("MULTI", "OK"),
        ("DEBUG RELOAD", "QUEUED"),
        ("GET k", "QUEUED"),
    ]);
    let exec = c.call("EXEC");
    assert!(
        exec.contains("ERR DEBUG RELOAD cannot run inside MULTI") && exec.ends_with("\"v\"]"),
        "{exec}"
    );
    c.script(&[("DEBUG RELOAD", "OK"), ("GET k", "\"v\"")]);
    server.shutdown().unwrap();
}
