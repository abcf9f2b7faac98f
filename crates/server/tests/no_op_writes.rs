//! Writes that find nothing to do — SET NX and SETNX of a key that
//! exists, HSETNX of a field that is there — are answered by a look
//! before the key's lock (no key group taken). Redis writes nothing and
//! signals nothing for them; each check here holds Engram to a
//! redis-server 7.0 beside it: replies, keyspace hits, WATCH, the access
//! field, expired keys and MULTI. (Their keyspace events, none, are
//! compared in `notifications.rs`; SADD's look in `sets.rs`.)

mod common;

use std::time::Duration;

use common::{beside_redis, lookups, object_freq, script_both, Client, WRONGTYPE};

#[test]
fn set_nx_setnx_and_hsetnx_of_what_exists_change_nothing() {
    let (server, _dir, redis_server, mut engram, mut redis) = beside_redis();
    script_both(
        &mut engram,
        &mut redis,
        &[
            ("SET lock a NX", "OK"),
            ("SET lock b NX", "(nil)"),
            ("SET lock b NX PX 100", "(nil)"),
            ("SETNX lock c", "(integer) 0"),
            ("GET lock", "\"a\""),
            ("TTL lock", "(integer) -1"),
            // NX with GET still reads the old value through the lock.
            ("SET lock d NX GET", "\"a\""),
            // Any type counts as existing; the value stays what it was.
            ("RPUSH l x", "(integer) 1"),
            ("SET l v NX", "(nil)"),
            ("SETNX l v", "(integer) 0"),
            ("TYPE l", "list"),
            ("HSET h f 1", "(integer) 1"),
            ("HSETNX h f 2", "(integer) 0"),
            ("HGET h f", "\"1\""),
            ("HSETNX h g 2", "(integer) 1"),
            ("HSETNX lock f v", WRONGTYPE),
            ("HSETNX l f v", WRONGTYPE),
            // Syntax is checked before the look.
            ("SET lock v NX XX", common::SYNTAX),
            (
                "SET lock v NX EX 0",
                "(error) ERR invalid expire time in 'set' command",
            ),
        ],
    );

    // The looks are not keyspace hits or misses (Redis counts none for a
    // write's lookup).
    let before = (lookups(&mut engram), lookups(&mut redis));
    script_both(
        &mut engram,
        &mut redis,
        &[
            ("SET lock e NX", "(nil)"),
            ("SETNX lock e", "(integer) 0"),
            ("HSETNX h f 3", "(integer) 0"),
        ],
    );
    assert_eq!((lookups(&mut engram), lookups(&mut redis)), before);

    // A client WATCHing the key still commits: nothing was modified.
    let mut watcher = Client::connect(&server);
    let mut redis_watcher = redis_server.client();
    for c in [&mut watcher, &mut redis_watcher] {
        c.script(&[
            ("WATCH lock h", "OK"),
            ("MULTI", "OK"),
            ("GET lock", "QUEUED"),
        ]);
    }
    script_both(
        &mut engram,
        &mut redis,
        &[
            ("SET lock f NX", "(nil)"),
            ("SETNX lock f", "(integer) 0"),
            ("HSETNX h f 4", "(integer) 0"),
        ],
    );
    for c in [&mut watcher, &mut redis_watcher] {
        c.script(&[("EXEC", "[\"a\"]")]);
    }

    // Inside MULTI the transaction answers, the same way.
    script_both(
        &mut engram,
        &mut redis,
        &[
            ("MULTI", "OK"),
            ("SET lock g NX", "QUEUED"),
            ("SETNX lock g", "QUEUED"),
            ("HSETNX h f 5", "QUEUED"),
            ("HSETNX h k 5", "QUEUED"),
            ("EXEC", "[(nil), (integer) 0, (integer) 0, (integer) 1]"),
        ],
    );

    // An expired key or hash is absent: the write goes ahead.
    script_both(
        &mut engram,
        &mut redis,
        &[
            ("SET gone v PX 1", "OK"),
            ("SET gone2 v PX 1", "OK"),
            ("HSET goneh f 1", "(integer) 1"),
            ("PEXPIRE goneh 1", "(integer) 1"),
        ],
    );
    std::thread::sleep(Duration::from_millis(20));
    script_both(
        &mut engram,
        &mut redis,
        &[
            ("SET gone w NX", "OK"),
            ("GET gone", "\"w\""),
            ("TTL gone", "(integer) -1"),
            ("SETNX gone2 w", "(integer) 1"),
            ("GET gone2", "\"w\""),
            ("HSETNX goneh f 2", "(integer) 1"),
            ("HGETALL goneh", "[\"f\", \"2\"]"),
            ("TTL goneh", "(integer) -1"),
        ],
    );
}

/// Redis's lookup for a write touches the key's access field: under an
/// LFU policy a key that every contender of a lock retries stays hot.
/// The counter grows by chance (a step at 6 has odds 1 in 11), so the
/// check is that 300 looks raised it, on both servers.
#[test]
fn a_refused_set_nx_counts_as_an_access() {
    let (_server, _dir, _redis_server, mut engram, mut redis) = beside_redis();
    for c in [&mut engram, &mut redis] {
        c.script(&[
            ("CONFIG SET maxmemory-policy allkeys-lfu", "OK"),
            ("SET lock a", "OK"),
            ("HSET h f 1", "(integer) 1"),
        ]);
        let (lock_before, hash_before) = (object_freq(c, "lock"), object_freq(c, "h"));
        for _ in 0..300 {
            assert_eq!(c.call("SET lock b NX"), "(nil)");
            assert_eq!(c.call("HSETNX h f 2"), "(integer) 0");
        }
        assert!(
            object_freq(c, "lock") > lock_before,
            "SET NX touched nothing"
        );
        assert!(object_freq(c, "h") > hash_before, "HSETNX touched nothing");
    }
}
