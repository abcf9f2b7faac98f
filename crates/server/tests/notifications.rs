//! Keyspace notifications (`notify-keyspace-events`) against a
//! redis-server 7.0 beside Engram: the same commands on both, a pattern
//! subscriber on each, and the two streams of events held equal, message
//! for message; then the classes' masks, CONFIG's rendering of the flags,
//! expiry (background and on access) and eviction.

mod common;

use std::time::{Duration, Instant};

use common::{beside_redis, same, Client};

/// Subscribes `client` to every channel and reads the confirmation.
fn subscribe_all(client: &mut Client) {
    assert_eq!(
        client.call("PSUBSCRIBE *"),
        "[\"psubscribe\", \"*\", (integer) 1]"
    );
}

/// The messages `subscriber` got until the marker `publisher` sends now.
fn events_until_marker(publisher: &mut Client, subscriber: &mut Client) -> Vec<String> {
    assert_eq!(publisher.call("PUBLISH zz-end-marker x"), "(integer) 1");
    let mut events = Vec::new();
    loop {
        let message = subscriber.reply();
        if message.contains("zz-end-marker") {
            return events;
        }
        events.push(message);
    }
}

/// Runs `commands` on both servers (replies compared) with `flags` set
/// and a subscriber on each; returns Engram's events after checking them
/// against Redis's.
fn events_of(flags: &str, setup: &[&str], commands: &[&str]) -> Vec<String> {
    let (server, _dir, redis, mut engram, mut reference) = beside_redis();
    same(&mut engram, &mut reference, setup);
    let config = format!("CONFIG SET notify-keyspace-events {flags}");
    same(&mut engram, &mut reference, &[&config]);
    let mut engram_events = Client::connect(&server);
    let mut redis_events = redis.client();
    subscribe_all(&mut engram_events);
    subscribe_all(&mut redis_events);
    same(&mut engram, &mut reference, commands);
    let expected = events_until_marker(&mut reference, &mut redis_events);
    let got = events_until_marker(&mut engram, &mut engram_events);
    assert_eq!(got, expected, "events (left: Engram, right: Redis)");
    got
}

#[test]
fn every_write_family_sends_redis_events() {
    let events = events_of(
        "KEA",
        &[],
        &[
            // strings
            "SET s v",
            "SET s v EX 100",
            "SET s v NX",
            "SETNX s2 v",
            "SETNX s2 v",
            "SETEX s3 100 v",
            "MSET m1 a m2 b",
            "MSETNX m1 a m3 c",
            "INCR n",
            "DECRBY n 5",
            "INCRBYFLOAT f 1.5",
            "APPEND s x",
            "SETRANGE s 1 yy",
            "SETRANGE s 1 \"\"",
            "GETSET s w",
            "GETEX s EX 100",
            "GETEX s PERSIST",
            "GETEX s PERSIST",
            "GETDEL s3",
            "GETDEL s3",
            // generic
            "DEL m1 nosuch m2",
            "EXPIRE s2 100",
            "EXPIRE s2 100 NX",
            "PERSIST s2",
            "PEXPIRE n 0",
            "RENAME s2 r",
            "RENAMENX r f",
            "COPY r c",
            "MOVE c 1",
            // lists
            "RPUSH l a b c d e",
            "LPUSH l z",
            "LPUSHX nolist a",
            "LPOP l",
            "RPOP l 2",
            "LSET l 0 q",
            "LINSERT l BEFORE q p",
            "LINSERT l BEFORE nothere p",
            "LREM l 1 p",
            "LTRIM l 0 -1",
            "LMOVE l l2 LEFT RIGHT",
            "RPOPLPUSH l2 l",
            "LMPOP 2 nolist l RIGHT COUNT 10",
            "RPUSH l x",
            "BLPOP l 1",
            // sets
            "SADD st a b c",
            "SADD st a",
            "SREM st a zz",
            "SMOVE st st2 b",
            "SINTERSTORE st3 st st2",
            "SUNIONSTORE st4 st st2",
            "SINTERSTORE st4 st nosuch",
            "SPOP st",
            "SPOP st2 5",
            // hashes
            "HSET h a 1 b 2",
            "HMSET h c 3",
            "HSETNX h a 9",
            "HSETNX h d 4",
            "HINCRBY h a 10",
            "HINCRBYFLOAT h a 0.5",
            "HDEL h a zz",
            "HDEL h b c d",
            // sorted sets
            "ZADD z 1 a 2 b 3 c 4 d",
            "ZADD z XX 1 a",
            "ZADD z INCR 5 a",
            "ZINCRBY z 1 b",
            "ZREM z zz",
            "ZREM z c",
            "ZREMRANGEBYSCORE z 0 0",
            "ZREMRANGEBYRANK z 0 0",
            "ZPOPMIN z",
            "ZADD z 1 x 2 y",
            "ZPOPMAX z 1",
            "ZUNIONSTORE zu 1 z",
            "ZRANGESTORE zr z 0 0",
            "ZINTERSTORE zu 2 z nosuch",
            "ZMPOP 1 z MIN COUNT 10",
            "GEOADD g 13.361389 38.115556 Palermo",
            "GEOSEARCHSTORE gs g FROMLONLAT 15 37 BYRADIUS 200 km",
            // bits, HyperLogLog, sort
            "SETBIT b 7 1",
            "SETBIT b 7 1",
            "BITOP NOT b2 b",
            "BITFIELD b SET u8 0 255",
            "PFADD hll a b",
            "PFADD hll a",
            "PFMERGE hll2 hll",
            "RPUSH sl 3 1 2",
            "SORT sl STORE sl2",
            "SORT nosuch STORE sl2",
            // no events
            "GET nosuch",
            "FLUSHDB",
        ],
    );
    // The comparison above is the test; this guards against two servers
    // that both sent nothing.
    assert!(events.len() > 150, "only {} events", events.len());
    assert!(events.iter().any(|e| e.contains("\"rename_to\"")));
}

#[test]
fn stream_commands_send_redis_events() {
    events_of(
        "KEA",
        &[],
        &[
            "XGROUP CREATE s g $ MKSTREAM",
            "XGROUP CREATE s g $",
            "XADD s 1-1 f v",
            "XADD s MAXLEN 1 2-1 f v",
            "XADD s NOMKSTREAM 3-1 f v",
            "XADD nosuch NOMKSTREAM * f v",
            "XTRIM s MAXLEN 5",
            "XTRIM s MAXLEN 0",
            "XADD s 4-1 f v",
            "XDEL s 9-9",
            "XDEL s 4-1",
            "XSETID s 10-0",
            "XGROUP SETID s g 0",
            "XGROUP CREATECONSUMER s g bob",
            "XGROUP CREATECONSUMER s g bob",
            "XGROUP DELCONSUMER s g lee",
            "XGROUP DELCONSUMER s g bob",
            "XGROUP DESTROY s g",
            "XGROUP DESTROY s g",
        ],
    );
}

#[test]
fn consumers_created_by_reads_and_claims_are_announced_as_in_redis() {
    // Redis's own pubsub test of stream events: XREADGROUP, XCLAIM and
    // XAUTOCLAIM create a missing consumer when they deliver or claim,
    // and say so; reading nothing new or claiming nothing creates none.
    let events = events_of(
        "Kt",
        &[],
        &[
            "XGROUP CREATE s g $ MKSTREAM",
            "XGROUP CREATECONSUMER s g bob",
            "XREADGROUP GROUP g idle STREAMS s >",
            "XADD s 1-1 f a",
            "XADD s 2-1 f b",
            "XREADGROUP GROUP g alice COUNT 1 STREAMS s >",
            "XREADGROUP GROUP g alice STREAMS s 0",
            "XREADGROUP GROUP g history STREAMS s 0",
            "XCLAIM s g mike 0 1-1 FORCE",
            "XCLAIM s g nobody 3600000 1-1",
            "XAUTOCLAIM s g bob 0 0",
            "XAUTOCLAIM s g carol 0 0",
            "XAUTOCLAIM s g dave 3600000 0",
            "XGROUP DELCONSUMER s g lee",
            "XGROUP DELCONSUMER s g bob",
        ],
    );
    let created = events
        .iter()
        .filter(|e| e.contains("xgroup-createconsumer"))
        .count();
    assert!(created >= 5, "{events:?}");
}

#[test]
fn transactions_send_the_events_of_their_commands() {
    events_of(
        "KEA",
        &[],
        &[
            "MULTI",
            "SET a 1",
            "INCR a",
            "LPUSH l x",
            "DEL a l nosuch",
            "EXEC",
            "SET w 1",
            "WATCH w",
            "MULTI",
            "SET w 2",
            "DISCARD",
        ],
    );
}

/// The suite's masking tests, with more classes: only the classes asked
/// for are sent, each on the channel kinds asked for.
#[test]
fn classes_and_channel_kinds_are_masked_as_in_redis() {
    let commands = [
        "SET foo bar",
        "LPUSH mylist a",
        "SADD myset a",
        "ZADD myzset 1 a",
        "HSET myhash a 1",
        "EXPIRE foo 100",
        "DEL foo",
    ];
    for flags in [
        "KEl", "Ks", "Kz", "Kh", "E$", "Eg", "KA", "EA", "A", "K", "gls",
    ] {
        let events = events_of(flags, &[], &commands);
        match flags {
            "A" | "K" | "gls" => assert!(events.is_empty(), "{flags}: {events:?}"),
            _ => assert!(!events.is_empty(), "{flags}"),
        }
    }
}

#[test]
fn config_shows_the_flags_as_redis_does() {
    let (_server, _dir, _redis, mut engram, mut reference) = beside_redis();
    for flags in [
        "gKE",
        "$lshzxeKE",
        "KA",
        "EA",
        "Km",
        "mK",
        "nE",
        "AmE",
        "\"\"",
    ] {
        same(
            &mut engram,
            &mut reference,
            &[
                &format!("CONFIG SET notify-keyspace-events {flags}"),
                "CONFIG GET notify-keyspace-events",
            ],
        );
    }
    same(
        &mut engram,
        &mut reference,
        &[
            "CONFIG SET notify-keyspace-events KEq",
            "CONFIG GET notify-keyspace-events",
        ],
    );
}

/// Reads messages until one contains `what`, for at most 5 seconds.
fn wait_for(subscriber: &mut Client, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let message = subscriber.reply();
        if message.contains(what) {
            return message;
        }
        assert!(Instant::now() < deadline, "no {what:?} event");
    }
}

#[test]
fn expired_keys_are_announced_by_the_background_cycle_and_on_access() {
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("engram.conf");
    std::fs::write(&path, "enable-debug-command yes\n").unwrap();
    let (server, _dir) = common::start_with(engram_server::Config::from_file(&path).unwrap());
    let mut client = Client::connect(&server);
    let mut subscriber = Client::connect(&server);
    assert_eq!(client.call("CONFIG SET notify-keyspace-events Ex"), "OK");
    subscribe_all(&mut subscriber);
    // Background: nobody touches the key.
    assert_eq!(client.call("PSETEX foo 100 1"), "OK");
    assert_eq!(
        wait_for(&mut subscriber, "expired"),
        "[\"pmessage\", \"*\", \"__keyevent@0__:expired\", \"foo\"]"
    );
    // On access, with the background cycle off: a read finds it.
    assert_eq!(client.call("DEBUG SET-ACTIVE-EXPIRE 0"), "OK");
    assert_eq!(client.call("SELECT 3"), "OK");
    assert_eq!(client.call("PSETEX bar 50 1"), "OK");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(client.call("GET bar"), "(nil)");
    assert_eq!(
        wait_for(&mut subscriber, "expired"),
        "[\"pmessage\", \"*\", \"__keyevent@3__:expired\", \"bar\"]"
    );
    // `x` off: expiry notes nothing, and nothing is sent for it.
    assert_eq!(client.call("CONFIG SET notify-keyspace-events E$"), "OK");
    assert_eq!(client.call("PSETEX baz 20 1"), "OK");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(client.call("GET baz"), "(nil)");
    assert_eq!(client.call("SET gone 1"), "OK");
    for key in ["baz", "gone"] {
        assert_eq!(
            subscriber.reply(),
            format!("[\"pmessage\", \"*\", \"__keyevent@3__:set\", \"{key}\"]")
        );
    }
}

#[test]
fn evicted_keys_are_announced_when_the_limit_drops() {
    let (server, _dir) = common::start();
    let mut client = Client::connect(&server);
    let mut subscriber = Client::connect(&server);
    for command in [
        "CONFIG SET notify-keyspace-events Ee",
        "CONFIG SET maxmemory-policy allkeys-lru",
        "SET foo bar",
    ] {
        assert_eq!(client.call(command), "OK", "{command}");
    }
    subscribe_all(&mut subscriber);
    // As in Redis, lowering the limit evicts at once.
    assert_eq!(client.call("CONFIG SET maxmemory 1"), "OK");
    assert_eq!(
        subscriber.reply(),
        "[\"pmessage\", \"*\", \"__keyevent@0__:evicted\", \"foo\"]"
    );
    assert_eq!(client.call("CONFIG SET maxmemory 0"), "OK");
}

#[test]
fn keys_created_are_announced_by_the_new_event_as_in_redis() {
    // Class `n` (not in `A`): Redis sends `new` when a key is added, not
    // when it is overwritten; before the command's own event.
    let events = events_of(
        "KEn",
        &[],
        &[
            "SET foo bar",
            "SET foo baz",
            "SET bar bar",
            "RPUSH l a",
            "RPUSH l b",
            "HSET h f v",
            "SADD s a",
            "ZADD z 1 a",
            "XADD x 1-1 f v",
            "MSET m1 1 m2 2 foo x",
            "RENAME foo foo2",
            "COPY bar bar2",
            "APPEND ap x",
            "INCR i",
            "SETNX foo2 y",
            "LMOVE l l2 LEFT LEFT",
            "SUNIONSTORE dst s",
            "MULTI",
            "SET t1 1",
            "SET bar 2",
            "EXEC",
            "EVAL redis.call('SET',\\sKEYS[1],\\s1)\\sreturn\\sredis.call('SET',\\s'undeclared',\\s1) 1 declared",
            "DEL foo2",
            "SET foo2 again",
        ],
    );
    assert!(
        events.iter().filter(|e| e.contains("\"new\"")).count() >= 15,
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e.contains("undeclared")),
        "{events:?}"
    );
}
