//! INCR, DECR, INCRBY and DECRBY of an integer string are answered with
//! one engine lookup (`Txn::add_in_place`: the value read and its word
//! changed together); anything else takes the general path (a read, then
//! a write). Each check here holds Engram to a redis-server 7.0 beside it,
//! on both paths and at their border: overflow, expiry, TTLs, other types
//! and encodings, MULTI, WATCH, keyspace hits and the access field.

mod common;

use std::time::Duration;

use common::{beside_redis, lookups, object_freq, script_both, Client, WRONGTYPE};
use engram_server::Server;

const NOT_INT: &str = "(error) ERR value is not an integer or out of range";
const OVERFLOW: &str = "(error) ERR increment or decrement would overflow";

#[test]
fn counters_answer_as_redis_does_on_both_paths() {
    let (_server, _dir, _redis_server, mut engram, mut redis) = beside_redis();
    script_both(
        &mut engram,
        &mut redis,
        &[
            // A new key (general path), then an integer (one lookup).
            ("INCR c", "(integer) 1"),
            ("INCR c", "(integer) 2"),
            ("INCRBY c 40", "(integer) 42"),
            ("DECR c", "(integer) 41"),
            ("DECRBY c 50", "(integer) -9"),
            ("GET c", "\"-9\""),
            ("OBJECT ENCODING c", "\"int\""),
            ("STRLEN c", "(integer) 2"),
            // Overflow either way changes nothing.
            ("SET big 9223372036854775806", "OK"),
            ("INCR big", "(integer) 9223372036854775807"),
            ("INCR big", OVERFLOW),
            ("INCRBY big 9223372036854775807", OVERFLOW),
            ("GET big", "\"9223372036854775807\""),
            ("SET small -9223372036854775807", "OK"),
            ("DECR small", "(integer) -9223372036854775808"),
            ("DECR small", OVERFLOW),
            ("DECRBY small -1", "(integer) -9223372036854775807"),
            ("DECRBY small -9223372036854775808", "(error) ERR decrement would overflow"),
            ("GET small", "\"-9223372036854775807\""),
            // A TTL is kept by the in-place change.
            ("SET t 10 EX 1000", "OK"),
            ("INCRBY t 5", "(integer) 15"),
            ("TTL t", "(integer) 1000"),
            ("GET t", "\"15\""),
            // Raw strings: not integers, or integers Redis does not
            // encode as one (leading zeros are not a number to it).
            ("SET raw abc", "OK"),
            ("INCR raw", NOT_INT),
            ("SET z 007", "OK"),
            ("INCR z", NOT_INT),
            ("SET sp +5", "OK"),
            ("INCR sp", NOT_INT),
            ("SET short 1", "OK"),
            ("APPEND short 2", "(integer) 2"),
            ("INCR short", "(integer) 13"),
            ("SET long 12345678901234567890123", "OK"),
            ("INCR long", NOT_INT),
            ("GET raw", "\"abc\""),
            // Other types.
            ("RPUSH l a", "(integer) 1"),
            ("INCR l", WRONGTYPE),
            ("HSET h f 1", "(integer) 1"),
            ("DECRBY h 1", WRONGTYPE),
            // A counter that replaces a list, and a list that replaces a
            // counter.
            ("DEL l", "(integer) 1"),
            ("INCR l", "(integer) 1"),
            ("DEL c", "(integer) 1"),
            ("RPUSH c x", "(integer) 1"),
            ("INCR c", WRONGTYPE),
            // Inside MULTI the transaction answers.
            ("SET m 5", "OK"),
            ("MULTI", "OK"),
            ("INCR m", "QUEUED"),
            ("INCRBY m 10", "QUEUED"),
            ("GET m", "QUEUED"),
            ("INCR raw", "QUEUED"),
            (
                "EXEC",
                "[(integer) 6, (integer) 16, \"16\", (error) ERR value is not an integer or out of range]",
            ),
            ("GET m", "\"16\""),
        ],
    );

    // An expired counter is absent: INCR starts again from nothing.
    script_both(&mut engram, &mut redis, &[("SET gone 41 PX 1", "OK")]);
    std::thread::sleep(Duration::from_millis(20));
    script_both(
        &mut engram,
        &mut redis,
        &[("INCR gone", "(integer) 1"), ("TTL gone", "(integer) -1")],
    );

    // No keyspace hit or miss: Redis counts none for a write's lookup.
    let before = (lookups(&mut engram), lookups(&mut redis));
    script_both(
        &mut engram,
        &mut redis,
        &[("INCR m", "(integer) 17"), ("INCR fresh", "(integer) 1")],
    );
    assert_eq!((lookups(&mut engram), lookups(&mut redis)), before);
}

/// An in-place INCR is a modification: a client WATCHing the key has its
/// EXEC refused, on both servers.
#[test]
fn an_in_place_incr_breaks_a_watch() {
    let (server, _dir, redis_server, mut engram, mut redis) = beside_redis();
    script_both(&mut engram, &mut redis, &[("SET w 1", "OK")]);
    let mut watcher = Client::connect(&server);
    let mut redis_watcher = redis_server.client();
    for c in [&mut watcher, &mut redis_watcher] {
        c.script(&[("WATCH w", "OK"), ("MULTI", "OK"), ("GET w", "QUEUED")]);
    }
    script_both(&mut engram, &mut redis, &[("INCR w", "(integer) 2")]);
    for c in [&mut watcher, &mut redis_watcher] {
        c.script(&[("EXEC", "(nil array)")]);
    }
}

/// Redis's lookup for a write touches the key's access field: under an
/// LFU policy a counter that is only ever incremented stays hot. The
/// counter grows by chance (a step at 6 has odds 1 in 11), so the check is
/// that 300 increments raised it, on both servers.
#[test]
fn an_incr_counts_as_an_access() {
    let (_server, _dir, _redis_server, mut engram, mut redis) = beside_redis();
    for c in [&mut engram, &mut redis] {
        c.script(&[
            ("CONFIG SET maxmemory-policy allkeys-lfu", "OK"),
            ("SET hits 0", "OK"),
        ]);
        let before = object_freq(c, "hits");
        for n in 1..=300 {
            assert_eq!(c.call("INCR hits"), format!("(integer) {n}"));
        }
        assert!(object_freq(c, "hits") > before, "INCR touched nothing");
    }
}

/// Counters changed in place survive a restart with the rest.
#[test]
fn counters_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || common::config_in(dir.path());
    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    for i in 0..100 {
        assert_eq!(c.call(&format!("SET k{i} {i}")), "OK");
    }
    for _ in 0..10 {
        for i in 0..100 {
            c.call(&format!("INCRBY k{i} {i}"));
        }
    }
    drop(c);
    server.shutdown().unwrap();
    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    for i in 0..100 {
        assert_eq!(c.call(&format!("GET k{i}")), format!("\"{}\"", i * 11));
    }
    server.shutdown().unwrap();
}
