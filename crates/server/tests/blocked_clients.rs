//! Blocked clients as other connections see and handle them, as Redis 7.0
//! does: INFO's `blocked_clients`, flag `b` (and `cmd=`) in CLIENT LIST,
//! and CLIENT UNBLOCK <id> [TIMEOUT|ERROR], over real TCP with `redis`
//! crate clients (and the raw client of `common` where the exact reply
//! shape matters: `*-1`, the -UNBLOCKED text).
//!
//! Waits are polls of INFO / CLIENT LIST with a deadline, never bare sleeps.

mod common;

use std::net::SocketAddr;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{arity, start, Client, NOT_INT};
use redis::{Connection, RedisResult, Value};

const BAD_REASON: &str = "(error) ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR";
const UNBLOCKED: &str = "(error) UNBLOCKED client unblocked via CLIENT UNBLOCK";

fn con(addr: SocketAddr) -> Connection {
    let con = redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    // A server that never answers a blocked client fails the test instead
    // of hanging it.
    con.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    con
}

fn id_of(con: &mut Connection) -> u64 {
    redis::cmd("CLIENT").arg("ID").query(con).unwrap()
}

/// INFO's `blocked_clients`.
fn blocked_clients(con: &mut Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("clients").query(con).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .unwrap_or_else(|| panic!("no blocked_clients in {info:?}"))
        .trim()
        .parse()
        .unwrap()
}

/// Client `id`'s line of CLIENT LIST (empty if it is gone).
fn client_line(con: &mut Connection, id: u64) -> String {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(id)
        .query(con)
        .unwrap();
    list.trim_end().to_string()
}

/// The value of `field=` in a CLIENT LIST line.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ')
        .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

/// Polls `done` until it holds (10 s at most).
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// Waits until client `id` waits in a blocking command (flag `b`).
fn wait_blocked(observer: &mut Connection, id: u64) {
    wait_for(&format!("client {id} to block"), || {
        let line = client_line(observer, id);
        !line.is_empty() && field(&line, "flags").contains('b')
    });
}

/// A command running on its own thread (it blocks), with its connection
/// (kept open: closing it would end the client).
struct Blocking(JoinHandle<(Connection, RedisResult<Value>)>);

impl Blocking {
    fn spawn(mut con: Connection, command: redis::Cmd) -> Blocking {
        Blocking(thread::spawn(move || {
            let reply = command.query::<Value>(&mut con);
            (con, reply)
        }))
    }

    /// The raw reply, and the connection to go on with.
    fn join(self) -> (Connection, RedisResult<Value>) {
        self.0.join().unwrap()
    }

    fn reply(self) -> RedisResult<Value> {
        self.join().1
    }
}

fn unblock(con: &mut Connection, id: u64, reason: Option<&str>) -> i64 {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("UNBLOCK").arg(id);
    if let Some(reason) = reason {
        cmd.arg(reason);
    }
    cmd.query(con).unwrap()
}

/// A fresh client that runs `command` and waits in it: its id, and the
/// command's thread.
fn block(addr: SocketAddr, observer: &mut Connection, command: redis::Cmd) -> (u64, Blocking) {
    let mut client = con(addr);
    let id = id_of(&mut client);
    let blocking = Blocking::spawn(client, command);
    wait_blocked(observer, id);
    (id, blocking)
}

fn blpop(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("BLPOP");
    cmd.arg(key).arg(0);
    cmd
}

fn llen(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("LLEN").arg(key).query(con).unwrap()
}

/// RPUSH `values` onto `key`; the list's length after.
fn rpush(con: &mut Connection, key: &str, values: &[&str]) -> i64 {
    redis::cmd("RPUSH").arg(key).arg(values).query(con).unwrap()
}

/// What BLPOP/BRPOP reply when they pop `value` from `key`.
fn popped(key: &str, value: &str) -> Value {
    Value::Array(vec![
        Value::BulkString(key.as_bytes().to_vec()),
        Value::BulkString(value.as_bytes().to_vec()),
    ])
}

#[test]
fn info_counts_clients_while_they_block() {
    let (server, _dir) = start();
    let mut observer = con(server.addr);
    assert_eq!(blocked_clients(&mut observer), 0);

    let mut first = con(server.addr);
    let first_id = id_of(&mut first);
    let first = Blocking::spawn(first, blpop("k"));
    wait_for("blocked_clients:1", || blocked_clients(&mut observer) == 1);

    let mut second = con(server.addr);
    let second_id = id_of(&mut second);
    let mut brpop = redis::cmd("BRPOP");
    brpop.arg("other").arg("k").arg(0);
    let second = Blocking::spawn(second, brpop);
    wait_for("blocked_clients:2", || blocked_clients(&mut observer) == 2);
    wait_blocked(&mut observer, first_id);
    wait_blocked(&mut observer, second_id);

    // One push serves the first to block; the other still waits.
    let pushed = rpush(&mut observer, "k", &["a"]);
    assert_eq!(pushed, 1);
    let (_first, reply) = first.join();
    assert_eq!(reply.unwrap(), popped("k", "a"));
    // A served client is no longer blocked by the time it has its reply.
    assert_eq!(blocked_clients(&mut observer), 1);
    assert_eq!(field(&client_line(&mut observer, first_id), "flags"), "N");
    assert_eq!(field(&client_line(&mut observer, second_id), "flags"), "b");

    let pushed = rpush(&mut observer, "k", &["b"]);
    assert_eq!(pushed, 1);
    assert_eq!(second.reply().unwrap(), popped("k", "b"));
    assert_eq!(blocked_clients(&mut observer), 0);

    // A wait that times out, and one whose client hangs up, end too.
    let mut raw = Client::connect(&server);
    assert_eq!(raw.call("BLPOP k 0.05"), "(nil array)");
    let (leaver_id, leaver) = block(server.addr, &mut observer, blpop("k"));
    assert_eq!(blocked_clients(&mut observer), 1);
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(leaver_id)
        .query::<i64>(&mut observer)
        .unwrap();
    assert!(leaver.reply().is_err(), "a killed client gets no reply");
    wait_for("the killed client to leave", || {
        client_line(&mut observer, leaver_id).is_empty()
    });
    assert_eq!(blocked_clients(&mut observer), 0);
    server.shutdown().unwrap();
}

#[test]
fn client_list_flags_only_the_blocked_client() {
    let (server, _dir) = start();
    let mut observer = con(server.addr);
    let observer_id = id_of(&mut observer);
    let mut idle = con(server.addr);
    let idle_id = id_of(&mut idle);
    let (waiter_id, waiter) = block(server.addr, &mut observer, blpop("k"));

    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut observer)
        .unwrap();
    let mut seen = 0;
    for line in list.lines() {
        let id: u64 = field(line, "id").parse().unwrap();
        let flags = field(line, "flags");
        if id == waiter_id {
            assert_eq!(flags, "b", "{line}");
            assert_eq!(field(line, "cmd"), "blpop", "{line}");
        } else {
            assert_eq!(flags, "N", "{line}");
            assert!(!flags.contains('b'), "{line}");
        }
        seen += 1;
    }
    assert_eq!(seen, 3, "{list}");
    assert_eq!(field(&client_line(&mut observer, idle_id), "flags"), "N");
    // CLIENT INFO: a client asking about itself is running, not blocked.
    let me: String = redis::cmd("CLIENT").arg("INFO").query(&mut idle).unwrap();
    assert_eq!(field(me.trim_end(), "flags"), "N", "{me}");
    assert_eq!(field(me.trim_end(), "id"), idle_id.to_string());

    // Inside MULTI Redis shows `x`.
    let mut raw = Client::connect(&server);
    raw.script(&[("MULTI", "OK")]);
    let info = raw.call("CLIENT INFO");
    assert_eq!(info, "QUEUED");
    let raw_id = {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut observer)
            .unwrap();
        list.lines()
            .map(|line| field(line, "id").parse::<u64>().unwrap())
            .find(|&id| ![observer_id, idle_id, waiter_id].contains(&id))
            .unwrap()
    };
    assert_eq!(field(&client_line(&mut observer, raw_id), "flags"), "x");
    raw.call("DISCARD");
    assert_eq!(field(&client_line(&mut observer, raw_id), "flags"), "N");

    assert_eq!(unblock(&mut observer, waiter_id, None), 1);
    let (mut waiter, reply) = waiter.join();
    assert_eq!(reply.unwrap(), Value::Nil);
    assert_eq!(field(&client_line(&mut observer, waiter_id), "flags"), "N");
    let pong: String = redis::cmd("PING").query(&mut waiter).unwrap();
    assert_eq!(pong, "PONG");
    server.shutdown().unwrap();
}

#[test]
fn unblock_timeout_replies_nil_and_takes_nothing() {
    let (server, _dir) = start();
    let mut observer = con(server.addr);
    let (id, waiter) = block(server.addr, &mut observer, blpop("k"));
    assert_eq!(blocked_clients(&mut observer), 1);

    assert_eq!(unblock(&mut observer, id, None), 1);
    // The timeout reply (a null array: `*-1` in RESP2).
    let (mut waiter, reply) = waiter.join();
    assert_eq!(reply.unwrap(), Value::Nil);
    assert_eq!(blocked_clients(&mut observer), 0);
    // Not blocked any more: a second unblock does nothing.
    assert_eq!(unblock(&mut observer, id, None), 0);
    // What is pushed later stays in the list: nobody waits for it.
    let pushed = rpush(&mut observer, "k", &["a", "b"]);
    assert_eq!(pushed, 2);
    let items: Vec<String> = redis::cmd("LRANGE")
        .arg("k")
        .arg(0)
        .arg(-1)
        .query(&mut observer)
        .unwrap();
    assert_eq!(items, ["a", "b"]);
    // The unblocked connection works, and does not wait any more.
    let len: i64 = redis::cmd("LLEN").arg("k").query(&mut waiter).unwrap();
    assert_eq!(len, 2);

    // The exact reply, the explicit TIMEOUT (any case), a wait with a long
    // timeout ended early, and the pipeline behind the blocked command.
    let mut raw = Client::connect(&server);
    let raw_id: u64 = raw.call("CLIENT ID")[10..].parse().unwrap();
    raw.send("BLPOP empty 30");
    raw.send("PING");
    wait_blocked(&mut observer, raw_id);
    let started = Instant::now();
    assert_eq!(unblock(&mut observer, raw_id, Some("Timeout")), 1);
    assert_eq!(raw.reply(), "(nil array)");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(raw.reply(), "PONG");
    // BLMOVE too: Redis answers every list wait ended as a timeout with a
    // null array (blocked.c, replyToBlockedClientTimedOut).
    raw.send("BLMOVE src dst LEFT RIGHT 0");
    wait_blocked(&mut observer, raw_id);
    assert_eq!(unblock(&mut observer, raw_id, Some("TIMEOUT")), 1);
    assert_eq!(raw.reply(), "(nil array)");
    raw.script(&[("EXISTS src dst", "(integer) 0"), ("LLEN k", "(integer) 2")]);
    server.shutdown().unwrap();
}

#[test]
fn unblock_error_fails_brpop_and_blmove() {
    let (server, _dir) = start();
    let mut observer = con(server.addr);

    let mut waiter = con(server.addr);
    let id = id_of(&mut waiter);
    let mut brpop = redis::cmd("BRPOP");
    brpop.arg("k").arg(0);
    let waiter = Blocking::spawn(waiter, brpop);
    wait_blocked(&mut observer, id);
    assert_eq!(unblock(&mut observer, id, Some("ERROR")), 1);
    let error = waiter.reply().unwrap_err();
    assert_eq!(error.code(), Some("UNBLOCKED"), "{error}");
    assert_eq!(
        error.detail(),
        Some("client unblocked via CLIENT UNBLOCK"),
        "{error}"
    );
    assert_eq!(blocked_clients(&mut observer), 0);

    // BLMOVE, with its source pushed after: nothing moves.
    let mut waiter = con(server.addr);
    let id = id_of(&mut waiter);
    let mut blmove = redis::cmd("BLMOVE");
    blmove.arg("src").arg("dst").arg("LEFT").arg("RIGHT").arg(0);
    let waiter = Blocking::spawn(waiter, blmove);
    wait_blocked(&mut observer, id);
    assert_eq!(unblock(&mut observer, id, Some("error")), 1);
    let error = waiter.reply().unwrap_err();
    assert_eq!(error.code(), Some("UNBLOCKED"), "{error}");
    let pushed = rpush(&mut observer, "src", &["x"]);
    assert_eq!(pushed, 1);
    assert_eq!(llen(&mut observer, "src"), 1);
    assert_eq!(llen(&mut observer, "dst"), 0);

    // The exact error line, and the connection carries on.
    let mut raw = Client::connect(&server);
    let raw_id: u64 = raw.call("CLIENT ID")[10..].parse().unwrap();
    raw.send("BLMPOP 0 1 empty LEFT");
    wait_blocked(&mut observer, raw_id);
    assert_eq!(unblock(&mut observer, raw_id, Some("ERROR")), 1);
    assert_eq!(raw.reply(), UNBLOCKED);
    raw.script(&[("PING", "PONG"), ("LLEN src", "(integer) 1")]);
    server.shutdown().unwrap();
}

#[test]
fn unblock_of_a_client_not_blocked_is_zero() {
    let (server, _dir) = start();
    let mut c = con(server.addr);
    let me = id_of(&mut c);
    let mut idle = con(server.addr);
    let idle_id = id_of(&mut idle);
    assert_eq!(unblock(&mut c, me, None), 0);
    assert_eq!(unblock(&mut c, idle_id, None), 0);
    assert_eq!(unblock(&mut c, idle_id, Some("ERROR")), 0);
    // The idle client was not disturbed.
    let pong: String = redis::cmd("PING").query(&mut idle).unwrap();
    assert_eq!(pong, "PONG");

    let mut raw = Client::connect(&server);
    raw.script(&[
        ("CLIENT UNBLOCK 999999", "(integer) 0"),
        ("CLIENT UNBLOCK 999999 ERROR", "(integer) 0"),
        ("CLIENT UNBLOCK 0", "(integer) 0"),
        ("CLIENT UNBLOCK -1", "(integer) 0"),
    ]);
    // A client that has gone is unknown too.
    let mut gone = con(server.addr);
    let gone_id = id_of(&mut gone);
    drop(gone);
    wait_for("the closed client to leave", || {
        client_line(&mut c, gone_id).is_empty()
    });
    assert_eq!(unblock(&mut c, gone_id, None), 0);
    server.shutdown().unwrap();
}

#[test]
fn unblock_argument_errors() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("CLIENT UNBLOCK 1 BOGUS", BAD_REASON),
        ("CLIENT UNBLOCK 1 \"\"", BAD_REASON),
        // Redis checks the reason before the id.
        ("CLIENT UNBLOCK abc BOGUS", BAD_REASON),
        ("CLIENT UNBLOCK abc", NOT_INT),
        ("CLIENT UNBLOCK 1.5 ERROR", NOT_INT),
        ("CLIENT UNBLOCK 99999999999999999999", NOT_INT),
        ("CLIENT UNBLOCK", &arity("client|unblock")),
        ("CLIENT UNBLOCK 1 TIMEOUT extra", &arity("client|unblock")),
        ("PING", "PONG"),
    ]);
    // Through the `redis` crate: an error, not a count.
    let mut con = con(server.addr);
    let error = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg("notanid")
        .query::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(error.code(), Some("ERR"), "{error}");
    assert_eq!(
        error.detail(),
        Some("value is not an integer or out of range")
    );
    server.shutdown().unwrap();
}

#[test]
fn an_unblocked_client_gives_way_to_the_next_in_line() {
    let (server, _dir) = start();
    let mut observer = con(server.addr);
    let (first_id, first) = block(server.addr, &mut observer, blpop("k"));
    let (_, second) = block(server.addr, &mut observer, blpop("k"));

    // The first in line leaves: the next push is the second's.
    assert_eq!(unblock(&mut observer, first_id, None), 1);
    assert_eq!(first.reply().unwrap(), Value::Nil);
    let pushed = rpush(&mut observer, "k", &["x"]);
    assert_eq!(pushed, 1);
    assert_eq!(second.reply().unwrap(), popped("k", "x"));
    assert_eq!(llen(&mut observer, "k"), 0);
    server.shutdown().unwrap();
}

#[test]
fn unblock_inside_exec_wins_over_the_push_before_it() {
    let (server, _dir) = start();
    let mut observer = con(server.addr);
    let (id, waiter) = block(server.addr, &mut observer, blpop("k"));

    // EXEC holds k's lock while it runs CLIENT UNBLOCK, so the waiter
    // cannot take the element first; the unblock must not wait for it
    // either (no deadlock).
    let mut raw = Client::connect(&server);
    raw.script(&[
        ("MULTI", "OK"),
        ("RPUSH k x", "QUEUED"),
        (&format!("CLIENT UNBLOCK {id}"), "QUEUED"),
        ("EXEC", "[(integer) 1, (integer) 1]"),
    ]);
    assert_eq!(waiter.reply().unwrap(), Value::Nil);
    raw.script(&[("LRANGE k 0 -1", "[\"x\"]")]);
    assert_eq!(blocked_clients(&mut observer), 0);
    server.shutdown().unwrap();
}

/// A push and an unblock racing: whichever wins, the element is either
/// the waiter's reply (and the unblock answered 0) or still in the list
/// (and the unblock answered 1). Never both, never neither. (The narrowest
/// case, CLIENT UNBLOCK landing while the waiter's retry holds the key's
/// lock, is played in a fixed order by the unit test in
/// `src/commands/lists.rs`.)
#[test]
fn unblock_racing_a_push_loses_no_element() {
    let (server, _dir) = start();
    let addr = server.addr;
    let mut observer = con(addr);
    let mut pusher = con(addr);
    let (mut served, mut unblocked) = (0, 0);
    for round in 0..150 {
        let mut waiter = con(addr);
        let id = id_of(&mut waiter);
        let waiter = Blocking::spawn(waiter, blpop("k"));
        wait_blocked(&mut observer, id);
        let element = format!("e{round}");
        let push = {
            let element = element.clone();
            let mut cmd = redis::cmd("RPUSH");
            cmd.arg("k").arg(element);
            thread::scope(|scope| {
                let push = scope.spawn(|| cmd.query::<i64>(&mut pusher).unwrap());
                let answer = unblock(&mut observer, id, None);
                (push.join().unwrap(), answer)
            })
        };
        let (pushed, answer) = push;
        assert_eq!(pushed, 1, "round {round}");
        let reply = waiter.reply().unwrap();
        let left = llen(&mut observer, "k");
        match answer {
            1 => {
                assert_eq!(reply, Value::Nil, "round {round}");
                assert_eq!(left, 1, "round {round}: the element was lost");
                let popped: String = redis::cmd("LPOP").arg("k").query(&mut observer).unwrap();
                assert_eq!(popped, element);
                unblocked += 1;
            }
            0 => {
                assert_eq!(
                    reply,
                    Value::Array(vec![
                        Value::BulkString(b"k".to_vec()),
                        Value::BulkString(element.into_bytes())
                    ]),
                    "round {round}"
                );
                assert_eq!(left, 0, "round {round}");
                served += 1;
            }
            other => panic!("CLIENT UNBLOCK answered {other}"),
        }
        assert_eq!(blocked_clients(&mut observer), 0, "round {round}");
    }
    assert_eq!(served + unblocked, 150);
    server.shutdown().unwrap();
}
