//! Stream commands over real TCP beside a real redis-server 7.0: every
//! reply (errors included) held to Redis's own; blocking XREAD and
//! XREADGROUP woken by XADD, in the order the clients blocked; MULTI with
//! stream commands; and the stream's state across a restart.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{beside_redis, config_in, same, Client};
use engram_server::Server;

/// Commands whose replies do not depend on the clock (explicit IDs), in
/// order, on both servers.
const TABLE: &[&str] = &[
    // XADD: explicit IDs, ms-*, options, errors.
    "XADD s 1-1 a 1 b 2",
    "XADD s 1-* a 3 b 4",
    "XADD s 1-* c 5",
    "XADD s 2 a 6",
    "XADD s 2-0 a 7",
    "XADD s 1-9 a 7",
    "XADD s 0-0 a 1",
    "XADD t 0-0 a 1",
    "XADD s 3-x a 1",
    "XADD s -1 a 1",
    "XADD s 3 a",
    "XADD s 3 a 1 b",
    "XADD s NOMKSTREAM 5 a 1",
    "XADD missing NOMKSTREAM 5 a 1",
    "EXISTS missing",
    "XADD s MAXLEN -1 6 a 1",
    "XADD s MAXLEN 1 MINID 1 6 a 1",
    "XADD s LIMIT 10 6 a 1",
    "XADD s MAXLEN 10 LIMIT 10 6 a 1",
    "XADD s MAXLEN abc 6 a 1",
    "XADD s 18446744073709551615-18446744073709551614 z 1",
    "XADD s 18446744073709551615-* z 2",
    "XADD s 18446744073709551615-* z 3",
    "XADD s * z 4",
    "XLEN s",
    "XRANGE s - +",
    "XRANGE s - + COUNT 2",
    "XRANGE s - + COUNT 0",
    "XRANGE s - + COUNT -5",
    "XRANGE s (1-1 +",
    "XRANGE s - (2-0",
    "XRANGE s 1 1",
    "XRANGE s 2 1",
    "XRANGE s (18446744073709551615-18446744073709551615 +",
    "XRANGE s - (0-0",
    "XRANGE s x +",
    "XRANGE s - + COUNT",
    "XRANGE s - + LIMIT 1",
    "XREVRANGE s + -",
    "XREVRANGE s + - COUNT 3",
    "XREVRANGE s 2 1-2",
    "XRANGE nokey - +",
    "XLEN nokey",
    // XDEL, XTRIM, XSETID.
    "XDEL s 1-2 1-2 9-9",
    "XDEL s abc",
    "XDEL nokey 1-1",
    "XLEN s",
    "XTRIM s MAXLEN 3",
    "XRANGE s - +",
    "XTRIM s MINID 2-0",
    "XTRIM s",
    "XTRIM s MAXLEN ~ 1",
    "XTRIM s MAXLEN = 1",
    "XTRIM s FOO 1",
    "XTRIM nokey MAXLEN 1",
    "XSETID s 1-1",
    "XSETID s 18446744073709551615-18446744073709551615 ENTRIESADDED 1",
    "XSETID s 18446744073709551615-18446744073709551615 ENTRIESADDED 100 MAXDELETEDID 3-3",
    "XSETID s 1-1 MAXDELETEDID 3-3",
    "XSETID nokey 1-1",
    "XSETID s 1-1 FOO",
    "XADD s * a 1",
    // Streams of small nodes, trimmed exactly and approximately.
    "XADD big MAXLEN 5 1 f v",
    "XADD big MAXLEN 5 2 f v",
    "XADD big MAXLEN 5 3 f v",
    "XADD big MAXLEN 5 4 f v",
    "XADD big MAXLEN 5 5 f v",
    "XADD big MAXLEN 5 6 f v",
    "XADD big MAXLEN 0 7 f v",
    "XLEN big",
    "XINFO STREAM big",
    "XADD big MINID 8 8 f v",
    "XADD big MINID 100 9 f v",
    "XRANGE big - +",
    "XINFO STREAM big",
    // Groups.
    "DEL g",
    "XGROUP CREATE g grp $",
    "XGROUP CREATE g grp $ MKSTREAM",
    "XGROUP CREATE g grp $ MKSTREAM",
    "TYPE g",
    "OBJECT ENCODING g",
    "XADD g 1-0 f 1",
    "XADD g 2-0 f 2",
    "XADD g 3-0 f 3",
    "XGROUP CREATE g old 0",
    "XGROUP CREATE g bad 1-x",
    "XGROUP CREATE g bad 0 ENTRIESREAD -5",
    "XGROUP CREATE g bad 0 FOO",
    "XGROUP SETID g nogroup 0",
    "XGROUP CREATECONSUMER g grp alice",
    "XGROUP CREATECONSUMER g grp alice",
    "XGROUP CREATECONSUMER g nogroup alice",
    "XGROUP FOO g grp",
    "XGROUP CREATE g",
    "XGROUP DESTROY g",
    "XGROUP CREATE nokey grp $",
    "XREADGROUP GROUP old alice COUNT 2 STREAMS g >",
    "XREADGROUP GROUP old bob STREAMS g >",
    "XREADGROUP GROUP old bob STREAMS g >",
    "XREADGROUP GROUP old alice STREAMS g 0",
    "XREADGROUP GROUP old alice STREAMS g 1-0",
    "XREADGROUP GROUP nogroup alice STREAMS g >",
    "XREADGROUP GROUP old alice STREAMS g $",
    "XREADGROUP GROUP old alice STREAMS g",
    "XREADGROUP GROUP old alice STREAMS nokey >",
    "XREAD GROUP old alice STREAMS g >",
    "XREAD STREAMS g >",
    "XREAD NOACK STREAMS g 0",
    "XREAD COUNT 1 STREAMS g 0",
    "XREAD STREAMS g nokey 0 0",
    "XREAD STREAMS g 3-0",
    "XREAD STREAMS g $",
    "XREADGROUP GROUP old alice",
    "XPENDING g old",
    "XPENDING g old - + 10 nobody",
    // Idle times are the clock's: a filter no entry passes.
    "XPENDING g old IDLE 100000000 - + 10",
    "XPENDING g nogroup",
    "XPENDING nokey old",
    "XPENDING g old - +",
    "XPENDING g old IDLE",
    "XACK g old 1-0 1-0 9-9",
    "XACK g old x",
    "XACK g nogroup 1-0",
    "XPENDING g old",
    "XCLAIM g old carol 0 2-0 JUSTID",
    "XCLAIM g old carol 0 3-0 RETRYCOUNT 7",
    "XCLAIM g old carol 0 9-9 FORCE",
    "XCLAIM g old carol 0 2-0 FOO",
    "XCLAIM g old carol abc 2-0",
    "XCLAIM g nogroup carol 0 2-0",
    "XCLAIM g old carol 0 1-0 FORCE JUSTID",
    "XDEL g 2-0",
    "XAUTOCLAIM g old dave 0 0 COUNT 10 JUSTID",
    "XAUTOCLAIM g old dave 0 0 COUNT 0",
    "XAUTOCLAIM g old dave 0 0 FOO",
    "XAUTOCLAIM g nogroup dave 0 0",
    "XAUTOCLAIM g old dave 0 0 COUNT 1",
    "XGROUP DELCONSUMER g old dave",
    "XGROUP DELCONSUMER g old nobody",
    "XPENDING g old",
    "XGROUP SETID g old 0 ENTRIESREAD 0",
    "XGROUP SETID g old $",
    "XGROUP DESTROY g grp",
    "XGROUP DESTROY g grp",
    "XINFO HELP",
    "XGROUP HELP",
    "XINFO STREAM nokey",
    "XINFO STREAM g FOO",
    "XINFO STREAM g FULL COUNT x",
    "XINFO GROUPS g",
    "XINFO FOO g",
    "XINFO CONSUMERS g nogroup",
    "XINFO STREAM g",
    // Wrong types.
    "SET str x",
    "XADD str * a 1",
    "XLEN str",
    "XRANGE str - +",
    "XREAD STREAMS str 0",
    "XGROUP CREATE str g $",
    "XINFO STREAM str",
    "XACK str g 1-1",
    "XPENDING str g",
    "LPUSH l x",
    "XADD l * a 1",
];

#[test]
fn replies_match_redis() {
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    same(&mut engram, &mut redis, TABLE);
}

/// Several hundred entries over several nodes, trimmed approximately and
/// exactly, read in pages: the same as Redis at the same node size.
fn client_id(c: &mut Client) -> u64 {
    c.call("CLIENT ID")
        .strip_prefix("(integer) ")
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits until client `id` is blocked (CLIENT LIST flag `b`).
fn wait_blocked(observer: &mut Client, id: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = observer.call(&format!("CLIENT LIST ID {id}"));
        if list
            .split(' ')
            .find_map(|w| w.strip_prefix("flags="))
            .is_some_and(|f| f.contains('b'))
        {
            return;
        }
        assert!(Instant::now() < deadline, "never blocked: {list}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// XREAD BLOCK with `$` waits for the next entry, and every blocked
/// reader gets it; XREADGROUP BLOCK consumers are served in the order
/// they blocked, one entry each; a timeout is a null array.
#[test]
fn blocked_readers_are_woken_by_xadd_in_order() {
    let (server, _dir) = common::start();
    let mut producer = Client::connect(&server);
    producer.call("XADD s 1-0 f old");
    producer.call("XGROUP CREATE s grp $");

    let mut readers: Vec<Client> = (0..2).map(|_| Client::connect(&server)).collect();
    for reader in &mut readers {
        let id = client_id(reader);
        reader.send("XREAD BLOCK 0 STREAMS s $");
        wait_blocked(&mut producer, id);
    }
    let mut consumers: Vec<Client> = (0..3).map(|_| Client::connect(&server)).collect();
    for (n, consumer) in consumers.iter_mut().enumerate() {
        let id = client_id(consumer);
        consumer.send(&format!(
            "XREADGROUP GROUP grp c{n} COUNT 1 BLOCK 0 STREAMS s >"
        ));
        wait_blocked(&mut producer, id);
    }
    assert_eq!(producer.call("XADD s 2-0 f new"), "\"2-0\"");
    for reader in &mut readers {
        assert_eq!(reader.reply(), "[[\"s\", [[\"2-0\", [\"f\", \"new\"]]]]]");
    }
    assert_eq!(
        consumers[0].reply(),
        "[[\"s\", [[\"2-0\", [\"f\", \"new\"]]]]]"
    );
    assert_eq!(producer.call("XADD s 3-0 f newer"), "\"3-0\"");
    assert_eq!(
        consumers[1].reply(),
        "[[\"s\", [[\"3-0\", [\"f\", \"newer\"]]]]]"
    );
    // The third still waits; its group goes: an error ends the wait.
    producer.call("XGROUP DESTROY s grp");
    producer.call("XADD s 4-0 f last");
    assert_eq!(
        consumers[2].reply(),
        "(error) NOGROUP the consumer group this client was blocked on no longer exists"
    );
    assert_eq!(producer.call("XREAD BLOCK 50 STREAMS s 4-0"), "(nil array)");
    // The pending entries went to the consumers that got them.
    producer.call("XGROUP CREATE s g2 0");
    producer.call("XREADGROUP GROUP g2 a COUNT 2 STREAMS s >");
    assert_eq!(
        producer
            .call("XPENDING s g2 - + 10 a")
            .matches("\"a\"")
            .count(),
        2
    );
}

/// Stream commands inside MULTI run at EXEC, in order, and an XREAD BLOCK
/// in a transaction answers at once.
#[test]
fn multi_runs_stream_commands_in_order() {
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    same(
        &mut engram,
        &mut redis,
        &[
            "MULTI",
            "XADD m 1-0 a 1",
            "XGROUP CREATE m g 0",
            "XREADGROUP GROUP g c STREAMS m >",
            "XACK m g 1-0",
            "XADD m MAXLEN 0 2-0 a 2",
            "XREAD BLOCK 0 STREAMS m $",
            "XINFO GROUPS m",
            "EXEC",
            "XLEN m",
            "XINFO STREAM m",
        ],
    );
}

/// A stream, its last ID and its group's PEL come back after a restart.
#[test]
fn streams_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path());
    let before;
    {
        let server = Server::start(config.clone()).unwrap();
        let mut c = Client::connect(&server);
        c.call("XADD s 5-0 a 1");
        c.call("XADD s 6-0 a 2");
        c.call("XGROUP CREATE s g 0");
        c.call("XREADGROUP GROUP g c COUNT 1 STREAMS s >");
        c.call("XDEL s 6-0");
        before = (
            c.call("XINFO STREAM s"),
            c.call("XPENDING s g"),
            c.call("XINFO GROUPS s"),
        );
        server.shutdown().unwrap();
    }
    let server = Server::start(config).unwrap();
    let mut c = Client::connect(&server);
    assert_eq!(
        (
            c.call("XINFO STREAM s"),
            c.call("XPENDING s g"),
            c.call("XINFO GROUPS s"),
        ),
        before
    );
    assert_eq!(
        c.call("XADD s 6-0 a 3"),
        "(error) ERR The ID specified in XADD is equal or smaller than the target stream top item"
    );
}

/// A blocked XREADGROUP whose stream is deleted (or becomes a string)
/// ends with Redis's error; a blocked XREAD waits on through a delete and
/// a key of another type, and is served by the next stream entry.
#[test]
fn blocked_readers_see_their_stream_go() {
    let (server, _dir) = common::start();
    let mut other = Client::connect(&server);
    for change in ["DEL s", "SET s x"] {
        other.call("DEL s");
        other.call("XADD s 1-0 f v");
        other.call("XGROUP CREATE s g $");
        let mut waiter = Client::connect(&server);
        let id = client_id(&mut waiter);
        waiter.send("XREADGROUP GROUP g c BLOCK 0 STREAMS s >");
        wait_blocked(&mut other, id);
        other.call(change);
        assert_eq!(
            waiter.reply(),
            "(error) UNBLOCKED the stream key no longer exists",
            "{change}"
        );
    }
    other.call("DEL s");
    other.call("XADD s 1-0 f v");
    let mut reader = Client::connect(&server);
    let id = client_id(&mut reader);
    reader.send("XREAD BLOCK 0 STREAMS s $");
    wait_blocked(&mut other, id);
    other.call("DEL s");
    other.call("LPUSH s x");
    other.call("DEL s");
    other.call("XADD s 2-0 f new");
    assert_eq!(reader.reply(), "[[\"s\", [[\"2-0\", [\"f\", \"new\"]]]]]");
}

/// DUMP and RESTORE in Redis's RDB stream encoding, both ways: a stream
/// with deleted entries, a trimmed head, mixed field sets, two groups
/// with pending entries and consumers made on Redis is restored into
/// Engram, and one made on Engram into Redis; XINFO STREAM FULL (entries,
/// counters, groups, PELs with their delivery times and counts, consumers
/// with their seen times) is the same on both sides.
#[test]
fn dump_and_restore_streams_with_redis() {
    use common::query_ok;
    let (server, _dir, redis, mut engram, mut redis_text) = beside_redis();
    let build = [
        "XADD src 1-1 a 1 b 2",
        "XADD src 1-2 a 3 b 4",
        "XADD src 2-0 other 5",
        "XADD src 3-0 a 6 b 7",
        "XADD src 4-0 a 8 b 9",
        "XDEL src 1-2",
        "XGROUP CREATE src g1 0",
        "XGROUP CREATE src g2 $",
        "XREADGROUP GROUP g1 alice COUNT 2 STREAMS src >",
        "XREADGROUP GROUP g1 bob STREAMS src >",
        "XACK src g1 3-0",
        "XGROUP CREATECONSUMER src g2 carol",
        "XSETID src 9-9 ENTRIESADDED 20 MAXDELETEDID 5-5",
    ];
    for command in build {
        redis_text.call(command);
        engram.call(command);
    }
    let mut big = Vec::new();
    for i in 1..=250 {
        big.push(format!("XADD big {i}-0 f {i} n {}", i * 1000));
    }
    big.push("XTRIM big MAXLEN 120".to_string());
    for command in &big {
        redis_text.call(command);
        engram.call(command);
    }
    let mut engram_con = common::redis_con(server.addr);
    let mut redis_con = redis.con();
    for key in [b"src".as_slice(), b"big"] {
        // Redis -> Engram.
        let payload = common::bytes(query_ok(&mut redis_con, &[b"DUMP", key]));
        query_ok(
            &mut engram_con,
            &[b"RESTORE", b"from-redis", b"0", &payload, b"REPLACE"],
        );
        // Engram -> Redis.
        let payload = common::bytes(query_ok(&mut engram_con, &[b"DUMP", key]));
        query_ok(
            &mut redis_con,
            &[b"RESTORE", b"from-engram", b"0", &payload, b"REPLACE"],
        );
        // All but radix-tree-nodes, a count of Redis's tree (ours is a
        // B-tree: COMPATIBILITY.md).
        let full = |con: &mut redis::Connection, key: &[u8]| {
            let text = format!("{:?}", query_ok(con, &[b"XINFO", b"STREAM", key, b"FULL"]));
            let (head, tail) = text.split_once("radix-tree-nodes").unwrap();
            let tail = tail.split_once("last-generated-id").unwrap().1;
            format!("{head}{tail}")
        };
        // Each side's times are its own clock's: each copy is compared
        // with the stream it was dumped from.
        let on_redis = full(&mut redis_con, key);
        assert_eq!(full(&mut engram_con, b"from-redis"), on_redis);
        let on_engram = full(&mut engram_con, key);
        assert_eq!(full(&mut redis_con, b"from-engram"), on_engram);
        assert_eq!(
            engram.call("XRANGE from-redis - +"),
            redis_text.call(&format!("XRANGE {} - +", String::from_utf8_lossy(key)))
        );
    }
}

/// A blocked command is counted once in INFO commandstats, when its wait
/// ends: served after retries, failed, or timed out.
#[test]
fn a_blocked_read_is_counted_once() {
    let (server, _dir) = common::start();
    let mut other = Client::connect(&server);
    other.call("XGROUP CREATE s g $ MKSTREAM");
    let mut waiter = Client::connect(&server);
    let id = client_id(&mut waiter);
    waiter.send("XREADGROUP GROUP g c BLOCK 0 STREAMS s >");
    wait_blocked(&mut other, id);
    // A write that serves nothing (the group's entry is deleted at once)
    // makes the waiter retry and block again.
    other.call("MULTI");
    other.call("XADD s 1-0 f v");
    other.call("XDEL s 1-0");
    other.call("EXEC");
    other.call("XGROUP DESTROY s g");
    assert!(waiter.reply().starts_with("(error) NOGROUP"));
    assert_eq!(waiter.call("XREAD BLOCK 10 STREAMS s $"), "(nil array)");
    let stats = other.call("INFO commandstats");
    assert!(
        stats.contains("cmdstat_xreadgroup:calls=1,") && stats.contains("failed_calls=1"),
        "{stats}"
    );
    assert!(stats.contains("cmdstat_xread:calls=1,"), "{stats}");
}

/// MEMORY USAGE of a stream: a few bytes an entry (packed nodes), and
/// TYPE, OBJECT ENCODING, SCAN TYPE, COPY, RENAME of streams.
#[test]
fn generic_commands_know_streams() {
    let (server, _dir) = common::start();
    let mut c = Client::connect(&server);
    for i in 1..=10_000 {
        c.send(&format!("XADD s {i}-0 a {i} b x c y"));
    }
    for _ in 1..=10_000 {
        c.reply();
    }
    let usage: u64 = c
        .call("MEMORY USAGE s")
        .strip_prefix("(integer) ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(usage > 10_000 * 8 && usage < 10_000 * 30, "{usage}");
    c.script(&[
        ("TYPE s", "stream"),
        ("OBJECT ENCODING s", "\"stream\""),
        ("SCAN 0 TYPE stream", "[\"0\", [\"s\"]]"),
        ("COPY s t", "(integer) 1"),
        ("XLEN t", "(integer) 10000"),
        ("RENAME t u", "OK"),
        (
            "XRANGE u 5000 5000",
            "[[\"5000-0\", [\"a\", \"5000\", \"b\", \"x\", \"c\", \"y\"]]]",
        ),
        ("EXPIRE u 100", "(integer) 1"),
        ("TTL u", "(integer) 100"),
        ("DEL u", "(integer) 1"),
    ]);
}
