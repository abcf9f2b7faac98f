//! Pipelines of writes to one key (redis-benchmark's LPUSH, SADD, HSET
//! and ZADD, and any hot counter, queue or leaderboard): their replies are
//! Redis's, command by command, whatever comes between them (another key,
//! a read, an error, a wrong type, an expired key); and pipelines from many
//! clients on one key, beside blocked pops, WATCH/EXEC and scripts on that
//! key, lose no write and never deadlock (every client has a read timeout).

mod common;

use std::thread;

use common::{beside_redis, start, Client};

#[test]
fn a_pipeline_of_writes_to_one_key_answers_as_redis_does() {
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    let lines = [
        // A set's writes, a read of it between them.
        "SADD s a b c",
        "SADD s a",
        "SREM s b zz",
        "SADD s d",
        "SCARD s",
        "SADD s e",
        "SISMEMBER s e",
        // A hash's, with an error among them.
        "HSET h f 1 g 2",
        "HINCRBY h f 5",
        "HINCRBY h g notanumber",
        "HSETNX h f 9",
        "HDEL h g",
        "HINCRBYFLOAT h f 0.5",
        "HGETALL h",
        // A list's, emptied (the key deleted) and pushed to again.
        "LPUSH l 1 2",
        "RPUSH l 3",
        "LPOP l",
        "RPOP l 2",
        "LPOP l",
        "RPUSHX l 4",
        "LPUSH l 5",
        "LRANGE l 0 -1",
        // A counter's, with a wrong type and an overflow among them.
        "SET n 10",
        "INCR n",
        "INCRBY n 5",
        "SADD n x",
        "DECRBY n 2",
        "INCRBY n 9223372036854775807",
        "DECR n",
        "APPEND n x",
        "INCR n",
        "GET n",
        "SETNX n y",
        "INCRBYFLOAT f 1.5",
        "INCRBYFLOAT f 1",
        // A sorted set's.
        "ZADD z 1 a 2 b",
        "ZINCRBY z 5 a",
        "ZADD z XX CH 3 b 4 c",
        "ZREM z b",
        "ZRANGE z 0 -1 WITHSCORES",
        // Two keys interleaved.
        "SADD t1 x",
        "SADD t1 y",
        "SADD t2 x",
        "SADD t1 z",
        "SCARD t1",
        "SCARD t2",
    ];
    let expected = redis.pipeline(&lines);
    let got = engram.pipeline(&lines);
    for ((line, expected), got) in lines.iter().zip(&expected).zip(&got) {
        assert_eq!(
            got, expected,
            "reply to `{line}` (left: Engram, right: Redis)"
        );
    }
}

#[test]
fn a_pipeline_over_a_key_that_expired_sees_it_gone() {
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    for client in [&mut engram, &mut redis] {
        assert_eq!(client.call("SET n 5 PX 1"), "OK");
        assert_eq!(client.call("SADD s a"), "(integer) 1");
        assert_eq!(client.call("PEXPIRE s 1"), "(integer) 1");
    }
    thread::sleep(std::time::Duration::from_millis(20));
    let lines = [
        "INCR n", "INCR n", "SADD s b", "SADD s c", "SCARD s", "GET n",
    ];
    let expected = redis.pipeline(&lines);
    assert_eq!(
        expected,
        [
            "(integer) 1",
            "(integer) 2",
            "(integer) 1",
            "(integer) 1",
            "(integer) 2",
            "\"2\""
        ]
    );
    assert_eq!(engram.pipeline(&lines), expected);
}

/// Clients pipelining writes to one counter, one set and one list, beside a
/// client blocked popping that list, one retrying WATCH/MULTI/EXEC on the
/// counter and one calling a script that increments it: every increment
/// that was acknowledged is counted once.
#[test]
fn pipelines_from_many_clients_on_one_key_lose_nothing_and_never_deadlock() {
    const WRITERS: usize = 4;
    const ROUNDS: usize = 40;
    const BATCH: usize = 25;
    let (server, _dir) = start();
    let addr = server.addr;

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            thread::spawn(move || {
                let mut c = Client::connect_addr(addr);
                for round in 0..ROUNDS {
                    let members: Vec<String> = (0..BATCH)
                        .map(|i| format!("SADD s m{w}-{round}-{i}"))
                        .collect();
                    let mut lines: Vec<&str> = vec!["INCR n"; BATCH];
                    lines.extend(members.iter().map(String::as_str));
                    lines.extend(vec!["LPUSH l x"; BATCH]);
                    for reply in c.pipeline(&lines) {
                        assert!(reply.starts_with("(integer)"), "{reply}");
                    }
                }
            })
        })
        .collect();
    let popper = thread::spawn(move || {
        let mut c = Client::connect_addr(addr);
        let mut popped = 0;
        while popped < 200 {
            if c.call("BLPOP l 10") != "(nil array)" {
                popped += 1;
            }
        }
        popped
    });
    let watcher = thread::spawn(move || {
        let mut c = Client::connect_addr(addr);
        let mut committed = 0;
        for _ in 0..100 {
            assert_eq!(c.call("WATCH n"), "OK");
            c.call("GET n");
            assert_eq!(c.call("MULTI"), "OK");
            assert_eq!(c.call("INCR n"), "QUEUED");
            if c.call("EXEC") != "(nil array)" {
                committed += 1;
            }
        }
        committed
    });
    let scripter = thread::spawn(move || {
        let mut c = Client::connect_addr(addr);
        for _ in 0..100 {
            let reply = c.call("EVAL return\\sredis.call('INCR',KEYS[1]) 1 n");
            assert!(reply.starts_with("(integer)"), "{reply}");
        }
    });
    for writer in writers {
        writer.join().unwrap();
    }
    let popped = popper.join().unwrap();
    let committed = watcher.join().unwrap();
    scripter.join().unwrap();

    let mut c = Client::connect(&server);
    let increments = WRITERS * ROUNDS * BATCH + committed + 100;
    assert_eq!(c.call("GET n"), format!("\"{increments}\""));
    assert_eq!(
        c.call("SCARD s"),
        format!("(integer) {}", WRITERS * ROUNDS * BATCH)
    );
    assert_eq!(
        c.call("LLEN l"),
        format!("(integer) {}", WRITERS * ROUNDS * BATCH - popped)
    );
}
