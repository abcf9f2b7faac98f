//! Pub/sub, MONITOR and client-output-buffer-limit through real clients:
//! raw RESP for exact bytes (RESP2's subscribed mode, RESP3 pushes mixed
//! with replies), each compared with a redis-server 7.0 beside Engram; the
//! `redis` crate's PubSub for delivery order; redis-py's PubSub in a
//! thread; a subscriber that never reads.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, Read, Write};
use std::time::{Duration, Instant};

use common::{beside_redis, redis_con, start, Client};

/// One whole reply, its bytes as they came.
fn raw(client: &mut Client) -> Vec<u8> {
    let mut line = Vec::new();
    client.reader.read_until(b'\n', &mut line).unwrap();
    assert!(line.ends_with(b"\r\n"), "truncated reply {line:?}");
    let n: i64 = std::str::from_utf8(&line[1..line.len() - 2])
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    match line[0] {
        b'$' | b'=' if n >= 0 => {
            let mut body = vec![0; n as usize + 2];
            client.reader.read_exact(&mut body).unwrap();
            line.extend(body);
        }
        b'*' | b'>' | b'~' => (0..n).for_each(|_| line.extend(raw(client))),
        b'%' | b'|' => (0..2 * n).for_each(|_| line.extend(raw(client))),
        _ => {}
    }
    line
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sends `command` to both and reads `replies` replies from each; Engram's
/// bytes must be Redis's. Returns them.
fn same_raw(engram: &mut Client, redis: &mut Client, command: &str, replies: usize) -> Vec<String> {
    engram.send(command);
    redis.send(command);
    (0..replies)
        .map(|_| {
            let (mine, theirs) = (text(&raw(engram)), text(&raw(redis)));
            assert_eq!(
                mine, theirs,
                "reply to `{command}` (left: Engram, right: Redis)"
            );
            mine
        })
        .collect()
}

/// Reads one more reply (a message) from each; they must be the same.
fn same_next(engram: &mut Client, redis: &mut Client) -> String {
    let (mine, theirs) = (text(&raw(engram)), text(&raw(redis)));
    assert_eq!(mine, theirs, "left: Engram, right: Redis");
    mine
}

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

/// `*3` message frame (`>3` with `push`).
fn message(push: bool, parts: &[&str]) -> String {
    let mut frame = format!("{}{}\r\n", if push { '>' } else { '*' }, parts.len());
    for part in parts {
        frame.push_str(&bulk(part));
    }
    frame
}

const REFUSED: &str = "only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed \
                       in this context";

#[test]
fn resp2_subscribed_mode_replies_byte_for_byte_as_redis() {
    let (server, _dir, redis, mut e, mut r) = beside_redis();
    let (mut es, mut rs) = (Client::connect(&server), redis.client());

    let confirmations = same_raw(&mut es, &mut rs, "SUBSCRIBE chan1 chan2", 2);
    assert_eq!(
        confirmations[1],
        message(false, &["subscribe", "chan2"]).replace("*2", "*3") + ":2\r\n"
    );
    assert_eq!(
        same_raw(&mut e, &mut r, "PUBLISH chan1 hello", 1),
        [":1\r\n"]
    );
    assert_eq!(
        same_next(&mut es, &mut rs),
        message(false, &["message", "chan1", "hello"])
    );

    // Patterns count with channels; a client matched both ways gets both.
    same_raw(&mut es, &mut rs, "PSUBSCRIBE ch*", 1);
    assert_eq!(same_raw(&mut e, &mut r, "PUBLISH chan2 x", 1), [":2\r\n"]);
    same_next(&mut es, &mut rs);
    assert_eq!(
        same_next(&mut es, &mut rs),
        message(false, &["pmessage", "ch*", "chan2", "x"])
    );
    assert_eq!(same_raw(&mut e, &mut r, "PUBLISH other x", 1), [":0\r\n"]);

    // Subscribed mode: PING's own reply, everything else refused.
    assert_eq!(
        same_raw(&mut es, &mut rs, "PING", 1),
        ["*2\r\n$4\r\npong\r\n$0\r\n\r\n"]
    );
    same_raw(&mut es, &mut rs, "PING hi", 1);
    let refused = same_raw(&mut es, &mut rs, "GET k", 1);
    assert_eq!(
        refused,
        [format!("-ERR Can't execute 'get': {REFUSED}\r\n")]
    );
    same_raw(&mut es, &mut rs, "CLIENT LIST", 1);
    same_raw(&mut es, &mut rs, "PING a b", 1);
    same_raw(&mut es, &mut rs, "SUBSCRIBE", 1);

    // UNSUBSCRIBE without arguments: one reply per channel, in any order.
    es.send("UNSUBSCRIBE");
    rs.send("UNSUBSCRIBE");
    let mut seen = [BTreeSet::new(), BTreeSet::new()];
    let mut counts = [Vec::new(), Vec::new()];
    for (i, client) in [&mut es, &mut rs].into_iter().enumerate() {
        for _ in 0..2 {
            let reply = text(&raw(client));
            let lines: Vec<&str> = reply.split("\r\n").collect();
            assert_eq!(lines[2], "unsubscribe", "{reply:?}");
            seen[i].insert(lines[4].to_string());
            counts[i].push(lines[5].to_string());
        }
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(counts[0], [":2", ":1"]);
    assert_eq!(counts[0], counts[1]);
    assert_eq!(
        same_raw(&mut es, &mut rs, "PUNSUBSCRIBE", 1),
        ["*3\r\n$12\r\npunsubscribe\r\n$3\r\nch*\r\n:0\r\n"]
    );
    // Subscribed to nothing: still one reply each, with a null name.
    assert_eq!(
        same_raw(&mut es, &mut rs, "UNSUBSCRIBE", 1),
        ["*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"]
    );
    same_raw(&mut es, &mut rs, "PUNSUBSCRIBE", 1);
    same_raw(&mut es, &mut rs, "SUNSUBSCRIBE", 1);
    same_raw(&mut es, &mut rs, "UNSUBSCRIBE foo bar", 2);
    same_raw(&mut es, &mut rs, "PUNSUBSCRIBE foo.*", 1);
    // Out of subscribed mode.
    assert_eq!(same_raw(&mut es, &mut rs, "PING", 1), ["+PONG\r\n"]);
    assert_eq!(same_raw(&mut es, &mut rs, "GET k", 1), ["$-1\r\n"]);
    same_raw(&mut es, &mut rs, "SUBSCRIBE a a a", 3);
    same_raw(&mut e, &mut r, "PUBLISH a 1", 1);
    same_next(&mut es, &mut rs);
}

#[test]
fn resp3_pushes_mix_with_replies_as_in_redis() {
    let (server, _dir, redis, mut e, mut r) = beside_redis();
    let (mut es, mut rs) = (Client::connect(&server), redis.client());
    es.send("HELLO 3");
    rs.send("HELLO 3");
    raw(&mut es);
    raw(&mut rs);

    assert_eq!(
        same_raw(&mut es, &mut rs, "SUBSCRIBE ch", 1),
        [message(true, &["subscribe", "ch"]).replace(">2", ">3") + ":1\r\n"]
    );
    // Any command runs while subscribed in RESP3.
    assert_eq!(same_raw(&mut es, &mut rs, "SET k v", 1), ["+OK\r\n"]);
    assert_eq!(same_raw(&mut es, &mut rs, "PING", 1), ["+PONG\r\n"]);
    same_raw(&mut e, &mut r, "PUBLISH ch m1", 1);
    assert_eq!(
        same_next(&mut es, &mut rs),
        message(true, &["message", "ch", "m1"])
    );
    assert_eq!(same_raw(&mut es, &mut rs, "GET k", 1), ["$1\r\nv\r\n"]);
    // Publishing to itself: the push comes before the reply.
    same_raw(&mut es, &mut rs, "PUBLISH ch m2", 2);
    same_raw(&mut es, &mut rs, "SSUBSCRIBE s1", 1);
    assert_eq!(same_raw(&mut e, &mut r, "SPUBLISH s1 m3", 1), [":1\r\n"]);
    assert_eq!(
        same_next(&mut es, &mut rs),
        message(true, &["smessage", "s1", "m3"])
    );
    same_raw(&mut es, &mut rs, "SUNSUBSCRIBE", 1);
    same_raw(&mut es, &mut rs, "UNSUBSCRIBE", 1);
    assert_eq!(
        same_raw(&mut es, &mut rs, "UNSUBSCRIBE", 1),
        [">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n"]
    );

    // CLIENT REPLY OFF silences replies, not confirmations or messages.
    same_raw(&mut es, &mut rs, "CLIENT REPLY OFF", 0);
    same_raw(&mut es, &mut rs, "SUBSCRIBE quiet", 1);
    same_raw(&mut es, &mut rs, "PING", 0);
    same_raw(&mut e, &mut r, "PUBLISH quiet m4", 1);
    assert_eq!(
        same_next(&mut es, &mut rs),
        message(true, &["message", "quiet", "m4"])
    );
    same_raw(&mut es, &mut rs, "CLIENT REPLY ON", 1);
}

#[test]
fn pubsub_introspection_with_patterns_matches_redis() {
    let (server, _dir, redis, mut e, mut r) = beside_redis();
    let mut subscribers: Vec<(Client, Client)> = (0..3)
        .map(|_| (Client::connect(&server), redis.client()))
        .collect();
    let ids: Vec<String> = subscribers
        .iter_mut()
        .map(|(es, _)| es.call("CLIENT ID").replace("(integer) ", ""))
        .collect();
    let plan = [
        "SUBSCRIBE news.tech news.sport",
        "SUBSCRIBE news.tech",
        "PSUBSCRIBE news.* n?ws*",
    ];
    for ((es, rs), command) in subscribers.iter_mut().zip(plan) {
        let n = command.split(' ').count() - 1;
        same_raw(es, rs, command, n);
    }
    {
        let (es, rs) = &mut subscribers[1];
        same_raw(es, rs, "PSUBSCRIBE news.*", 1);
        same_raw(es, rs, "SSUBSCRIBE shard.a", 1);
    }
    assert_eq!(
        same_raw(&mut e, &mut r, "PUBSUB NUMSUB news.tech news.sport none", 1),
        ["*6\r\n$9\r\nnews.tech\r\n:2\r\n$10\r\nnews.sport\r\n:1\r\n$4\r\nnone\r\n:0\r\n"]
    );
    assert_eq!(same_raw(&mut e, &mut r, "PUBSUB NUMPAT", 1), [":2\r\n"]);
    for command in [
        "PUBSUB NUMSUB",
        "PUBSUB SHARDNUMSUB shard.a news.tech",
        "PUBSUB SHARDCHANNELS",
    ] {
        same_raw(&mut e, &mut r, command, 1);
    }
    // Channel lists come in any order: compare them as sets.
    for (command, expected) in [
        ("PUBSUB CHANNELS", vec!["news.sport", "news.tech"]),
        ("PUBSUB CHANNELS news.t*", vec!["news.tech"]),
        ("PUBSUB CHANNELS x*", vec![]),
    ] {
        let mut mine = e.call(command);
        let mut theirs = r.call(command);
        for list in [&mut mine, &mut theirs] {
            let mut names: Vec<&str> = list
                .trim_matches(['[', ']'])
                .split(", ")
                .filter(|s| !s.is_empty())
                .collect();
            names.sort();
            *list = names.join(",");
        }
        assert_eq!(mine, theirs, "{command}");
        assert_eq!(
            mine,
            expected
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    // 2 channel subscribers + news.* twice + n?ws* once.
    assert_eq!(
        same_raw(&mut e, &mut r, "PUBLISH news.tech hi", 1),
        [":5\r\n"]
    );
    // PUBSUB's errors.
    for command in [
        "PUBSUB",
        "PUBSUB NUMPAT x",
        "PUBSUB CHANNELS a b",
        "PUBSUB FOO",
        "PUBSUB HELP x",
    ] {
        same_raw(&mut e, &mut r, command, 1);
    }
    same_raw(&mut e, &mut r, "PUBSUB HELP", 1);
    let stats = |c: &mut Client| {
        let info = c.call("INFO stats");
        ["pubsub_channels", "pubsub_patterns", "pubsubshard_channels"].map(|f| {
            info.split("\\r\\n")
                .find(|l| l.starts_with(f))
                .unwrap()
                .to_string()
        })
    };
    assert_eq!(
        stats(&mut e),
        [
            "pubsub_channels:2",
            "pubsub_patterns:2",
            "pubsubshard_channels:1"
        ]
    );
    assert_eq!(stats(&mut e), stats(&mut r));

    // CLIENT LIST: counts and flag P; TYPE pubsub selects subscribers.
    let line = e.call(&format!("CLIENT LIST ID {}", ids[1]));
    assert!(line.contains(" flags=P "), "{line}");
    assert!(line.contains(" sub=1 psub=1 ssub=1 "), "{line}");
    let listed = e.call("CLIENT LIST TYPE pubsub");
    assert_eq!(listed.matches("id=").count(), 3, "{listed}");
    assert!(e.call("CLIENT LIST TYPE normal").contains(" flags=N "));

    // Clients that leave take their subscriptions with them.
    drop(subscribers);
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.call("PUBSUB NUMPAT") != "(integer) 0" || e.call("PUBSUB CHANNELS") != "[]" {
        assert!(Instant::now() < deadline, "subscriptions left behind");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        stats(&mut e),
        [
            "pubsub_channels:0",
            "pubsub_patterns:0",
            "pubsubshard_channels:0"
        ]
    );
}

#[test]
fn ten_thousand_messages_arrive_in_order_at_every_subscriber() {
    const MESSAGES: usize = 10_000;
    let (server, _dir) = start();
    let addr = server.addr;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut threads = Vec::new();
    // Three redis-crate subscribers: two on the channel, one on a pattern.
    for pattern in [false, false, true] {
        let ready = ready_tx.clone();
        threads.push(std::thread::spawn(move || {
            let mut con = redis_con(addr);
            let mut pubsub = con.as_pubsub();
            pubsub
                .set_read_timeout(Some(Duration::from_secs(60)))
                .unwrap();
            if pattern {
                pubsub.psubscribe("orders.*").unwrap();
            } else {
                pubsub.subscribe("orders.eu").unwrap();
            }
            ready.send(()).unwrap();
            for i in 0..MESSAGES {
                let msg = pubsub.get_message().unwrap();
                assert_eq!(msg.get_channel_name(), "orders.eu");
                assert_eq!(
                    msg.get_payload::<String>().unwrap(),
                    i.to_string(),
                    "out of order"
                );
                if pattern {
                    assert_eq!(msg.get_pattern::<String>().unwrap(), "orders.*");
                }
            }
        }));
    }
    // And a RESP3 client reading push frames off the socket.
    let ready = ready_tx.clone();
    threads.push(std::thread::spawn(move || {
        let mut client = Client::connect_addr(addr);
        client.send("HELLO 3");
        raw(&mut client);
        client.send("SUBSCRIBE orders.eu");
        raw(&mut client);
        ready.send(()).unwrap();
        for i in 0..MESSAGES {
            assert_eq!(
                text(&raw(&mut client)),
                message(true, &["message", "orders.eu", &i.to_string()])
            );
        }
    }));
    for _ in 0..threads.len() {
        ready_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    let mut publisher = redis_con(addr);
    for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(500) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("PUBLISH").arg("orders.eu").arg(i.to_string());
        }
        let receivers: Vec<i64> = pipe.query(&mut publisher).unwrap();
        assert!(receivers.iter().all(|&n| n == 4), "{receivers:?}");
    }
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn reset_leaves_subscribed_and_monitor_mode() {
    let (server, _dir, redis, mut e, mut r) = beside_redis();
    let (mut es, mut rs) = (Client::connect(&server), redis.client());
    same_raw(&mut es, &mut rs, "SUBSCRIBE c1", 1);
    same_raw(&mut es, &mut rs, "PSUBSCRIBE p*", 1);
    assert_eq!(same_raw(&mut es, &mut rs, "RESET", 1), ["+RESET\r\n"]);
    assert_eq!(same_raw(&mut es, &mut rs, "SET key val", 1), ["+OK\r\n"]);
    assert_eq!(same_raw(&mut e, &mut r, "PUBLISH c1 x", 1), [":0\r\n"]);
    assert_eq!(e.call("PUBSUB NUMPAT"), "(integer) 0");

    same_raw(&mut es, &mut rs, "MONITOR", 1);
    // A second MONITOR is ignored without a reply.
    same_raw(&mut es, &mut rs, "MONITOR", 0);
    assert!(e.call("CLIENT LIST").contains(" flags=O "));
    assert_eq!(same_raw(&mut es, &mut rs, "RESET", 1), ["+RESET\r\n"]);
    assert!(!e.call("CLIENT LIST").contains("flags=O"));
    e.call("SET other 1");
    assert_eq!(same_raw(&mut es, &mut rs, "PING", 1), ["+PONG\r\n"]);
}

/// A MONITOR line without its time stamp, the client's port made `P`.
fn monitor_line(client: &mut Client) -> String {
    let line = text(&raw(client));
    assert!(line.starts_with('+') && line.ends_with("\r\n"), "{line:?}");
    let (stamp, rest) = line[1..].split_once(' ').unwrap();
    let (secs, micros) = stamp.split_once('.').unwrap();
    assert!(secs.parse::<u64>().is_ok() && micros.len() == 6, "{stamp}");
    let (addr, rest) = rest.split_once("] ").unwrap();
    let (db, peer) = addr.trim_start_matches('[').split_once(' ').unwrap();
    let host = peer.rsplit_once(':').unwrap().0;
    format!("[{db} {host}:P] {rest}")
}

#[test]
fn monitor_lines_match_redis() {
    let (server, _dir, redis, mut e, mut r) = beside_redis();
    let (mut em, mut rm) = (Client::connect(&server), redis.client());
    same_raw(&mut em, &mut rm, "MONITOR", 1);
    let commands = [
        "SET foo bar",
        "GET foo",
        "SET k a\"b\\c\td",
        "SELECT 3",
        "GET foo",
        "SELECT 0",
        "MULTI",
        "SET foo baz",
        "EXEC",
        "MULTI",
        "NOSUCHCOMMAND",
        "EXEC",
        "AUTH not-real",
        "AUTH not-real not-a-password",
        "HELLO 2 AUTH not-real not-a-password",
        "LPUSH",
        "CONFIG GET maxmemory",
        "PUBLISH ch msg",
        "PING",
    ];
    for command in commands {
        assert_eq!(e.call(command), r.call(command), "{command}");
    }
    // Binary arguments, as sdscatrepr writes them.
    for client in [&mut e, &mut r] {
        client
            .writer
            .write_all(b"*3\r\n$3\r\nSET\r\n$3\r\n\x00\xff\n\r\n$2\r\n\r\n\r\n")
            .unwrap();
        assert_eq!(client.reply(), "OK");
    }
    // Refused commands (unknown, wrong arity) and admin ones (CONFIG) are
    // not shown; EXEC's commands are, before EXEC.
    let expected = 17;
    let mine: Vec<String> = (0..expected).map(|_| monitor_line(&mut em)).collect();
    let theirs: Vec<String> = (0..expected).map(|_| monitor_line(&mut rm)).collect();
    assert_eq!(mine, theirs);
    assert_eq!(
        mine[2],
        "[0 127.0.0.1:P] \"SET\" \"k\" \"a\\\"b\\\\c\\td\"\r\n"
    );
    assert_eq!(mine[4], "[3 127.0.0.1:P] \"GET\" \"foo\"\r\n");
    assert_eq!(mine[7], "[0 127.0.0.1:P] \"SET\" \"foo\" \"baz\"\r\n");
    assert_eq!(mine[8], "[0 127.0.0.1:P] \"EXEC\"\r\n");
    assert_eq!(mine[11], "[0 127.0.0.1:P] \"AUTH\" \"(redacted)\"\r\n");
    assert_eq!(mine[14], "[0 127.0.0.1:P] \"PUBLISH\" \"ch\" \"msg\"\r\n");
    assert_eq!(
        mine[16],
        "[0 127.0.0.1:P] \"SET\" \"\\x00\\xff\\n\" \"\\r\\n\"\r\n"
    );
    // Nothing else was sent: the next line is the next command.
    for client in [&mut e, &mut r] {
        client.call("ECHO last");
    }
    assert_eq!(
        monitor_line(&mut em),
        "[0 127.0.0.1:P] \"ECHO\" \"last\"\r\n"
    );
    monitor_line(&mut rm);
}

#[test]
fn output_buffer_limit_config_matches_redis() {
    let (_server, _dir, _redis, mut e, mut r) = beside_redis();
    for command in [
        "CONFIG GET client-output-buffer-limit",
        "CONFIG SET client-output-buffer-limit pubsub\\s1mb\\s512kb\\s5",
        "CONFIG GET client-output-buffer-limit",
        "CONFIG SET client-output-buffer-limit replica\\s1\\s2\\s3\\snormal\\s4gb\\s0\\s0",
        "CONFIG GET client-output-buffer-limit",
        "CONFIG SET client-output-buffer-limit master\\s1\\s2\\s3",
        "CONFIG SET client-output-buffer-limit normal\\s1\\s2",
        "CONFIG SET client-output-buffer-limit normal\\sx\\s2\\s3",
        "CONFIG GET client-output-buffer-limit",
    ] {
        assert_eq!(e.call(command), r.call(command), "{command}");
    }
}

/// A subscriber that never reads, with a small pubsub limit: it is
/// disconnected, the publisher sees no error, other subscribers get every
/// message. (`crates/e2e/tests/slow_subscriber.rs` measures the server's
/// memory with the default limit.)
#[test]
fn a_subscriber_that_does_not_read_is_disconnected_at_its_limit() {
    let (server, _dir) = start();
    let mut admin = Client::connect(&server);
    assert_eq!(
        admin.call("CONFIG SET client-output-buffer-limit pubsub\\s1mb\\s256kb\\s1"),
        "OK"
    );
    let mut stalled = Client::connect(&server);
    stalled.call("SUBSCRIBE feed");
    let stalled_id = admin
        .call("CLIENT LIST TYPE pubsub")
        .split(' ')
        .next()
        .unwrap()
        .trim_start_matches("\"id=")
        .to_string();
    let mut reader = redis_con(server.addr);
    let mut pubsub = reader.as_pubsub();
    pubsub.subscribe("feed").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();

    let payload = "x".repeat(16 * 1024);
    let mut publisher = redis_con(server.addr);
    let mut receivers = Vec::new();
    // 32 MiB in all, far past the stalled client's socket buffers and limit.
    for _ in 0..2048 {
        let n: i64 = redis::cmd("PUBLISH")
            .arg("feed")
            .arg(&payload)
            .query(&mut publisher)
            .unwrap();
        receivers.push(n);
        let message = pubsub.get_message().unwrap();
        assert_eq!(message.get_payload_bytes().len(), payload.len());
    }
    assert_eq!(receivers[0], 2);
    assert_eq!(*receivers.last().unwrap(), 1, "the stalled client is gone");
    let listed = admin.call("CLIENT LIST");
    assert!(!listed.contains(&format!("id={stalled_id} ")), "{listed}");
    // Its connection was closed.
    stalled
        .writer
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sink = Vec::new();
    stalled
        .reader
        .read_to_end(&mut sink)
        .expect("the server closed the connection");
    assert!(sink.len() < 32 << 20);
}

/// redis-py's PubSub, in a thread of its own as applications run it,
/// receives every message in order. redis-py is installed for the test
/// (`pip install --target` into the build directory) if Python lacks it.
#[test]
fn redis_py_pubsub_thread_receives_every_message_in_order() {
    let (server, _dir) = start();
    let packages = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("redis-py");
    let has = |path: &std::path::Path| {
        std::process::Command::new("python3")
            .args(["-c", "import redis"])
            .env("PYTHONPATH", path)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has(&packages) {
        let status = std::process::Command::new("python3")
            .args(["-m", "pip", "install", "-q", "--target"])
            .arg(&packages)
            .arg("redis>=5")
            .status()
            .expect("python3 with pip");
        assert!(status.success(), "pip install redis failed");
    }
    let script = r#"
import sys, threading, redis
port = int(sys.argv[1])
r = redis.Redis(port=port)
p = r.pubsub()
got, patterned = [], []
done = threading.Event()
def on_message(m):
    if m["type"] == "message":
        got.append(int(m["data"]))
    elif m["type"] == "pmessage":
        patterned.append(int(m["data"]))
    if len(got) == 2000 and len(patterned) == 2000:
        done.set()
p.subscribe(jobs=on_message)
p.psubscribe(**{"job*": on_message})
worker = p.run_in_thread(sleep_time=0.01)
while r.pubsub_numsub("jobs")[0][1] != 1 or r.pubsub_numpat() != 1:
    pass
for i in range(2000):
    assert r.publish("jobs", str(i)) == 2
assert done.wait(60), (len(got), len(patterned))
worker.stop()
assert got == list(range(2000)), "channel messages out of order"
assert patterned == list(range(2000)), "pattern messages out of order"
print("ok")
"#;
    let output = std::process::Command::new("python3")
        .args(["-c", script, &server.addr.port().to_string()])
        .env("PYTHONPATH", &packages)
        .output()
        .unwrap();
    assert!(
        output.status.success() && String::from_utf8_lossy(&output.stdout).trim() == "ok",
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// MONITOR and scripts: EVAL and FCALL are shown before the commands they
/// call, which are shown as `[db lua]`, as Redis shows them.
#[test]
fn monitor_shows_the_commands_scripts_call_like_redis() {
    let (server, _dir, redis, mut e, mut r) = beside_redis();
    let (mut em, mut rm) = (Client::connect(&server), redis.client());
    same_raw(&mut em, &mut rm, "MONITOR", 1);
    for client in [&mut e, &mut r] {
        client
            .writer
            .write_all(
                b"*5\r\n$4\r\nEVAL\r\n$29\r\nredis.call('set',KEYS[1],'v')\r\n$1\r\n1\r\n$3\r\nfoo\r\n$3\r\nbar\r\n",
            )
            .unwrap();
        assert_eq!(client.reply(), "(nil)");
    }
    // The stamp dropped and a client's port made `P`.
    let normal = |client: &mut Client| {
        let line = text(&raw(client));
        let rest = line.split_once(' ').unwrap().1.to_string();
        match rest.split_once("] ") {
            Some((origin, command)) if origin.contains(':') => {
                format!("{}:P] {command}", origin.rsplit_once(':').unwrap().0)
            }
            _ => rest,
        }
    };
    let mine: Vec<String> = (0..2).map(|_| normal(&mut em)).collect();
    let theirs: Vec<String> = (0..2).map(|_| normal(&mut rm)).collect();
    assert_eq!(mine, theirs);
    assert_eq!(mine[1], "[0 lua] \"set\" \"foo\" \"v\"\r\n");
}
