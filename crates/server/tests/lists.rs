//! List commands over real TCP, reply by reply, as Redis 7.0 answers; a
//! randomized model test through the `redis` crate; persistence; and the
//! blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP) with
//! several connections.

mod common;

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, Write};
use std::thread;
use std::time::{Duration, Instant};

use common::{arity, start, Client, NOT_INT, SYNTAX, WRONGTYPE};
use engram_server::{Config, Server};
use rand::{Rng, SeedableRng};

fn client_id(c: &mut Client) -> u64 {
    let reply = c.call("CLIENT ID");
    reply
        .strip_prefix("(integer) ")
        .unwrap_or_else(|| panic!("CLIENT ID replied {reply}"))
        .parse()
        .unwrap()
}

/// Waits until client `id` is blocked in `command`: CLIENT LIST shows it
/// as its last command and flag `b` (it waits for a key).
fn wait_blocked(observer: &mut Client, id: u64, command: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = observer.call(&format!("CLIENT LIST ID {id}"));
        // Flag `b`: the connection is waiting, so a push now wakes it.
        let waiting = list
            .split(' ')
            .find_map(|word| word.strip_prefix("flags="))
            .is_some_and(|flags| flags.contains('b'));
        if waiting && list.contains(&format!("cmd={command}")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "client {id} never blocked in {command}: {list}"
        );
        thread::sleep(Duration::from_millis(2));
    }
}

/// Asserts that nothing arrives on `c` for `wait`.
fn assert_silent(c: &mut Client, wait: Duration) {
    c.writer.set_read_timeout(Some(wait)).unwrap();
    let result = c.reader.fill_buf().map(|buf| buf.to_vec());
    c.writer
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    match result {
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
        Ok(bytes) => panic!(
            "expected no reply, got {:?}",
            String::from_utf8_lossy(&bytes)
        ),
    }
}

/// Asserts that the server closed the connection.
fn assert_closed(c: &mut Client) {
    let mut rest = String::new();
    match c.reader.read_line(&mut rest) {
        Ok(0) => {}
        Ok(_) => panic!("expected the connection closed, got {rest:?}"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
}

#[test]
fn push_pop_and_read() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("LPUSH l a b c", "(integer) 3"),
        ("RPUSH l d e", "(integer) 5"),
        ("LRANGE l 0 -1", "[\"c\", \"b\", \"a\", \"d\", \"e\"]"),
        ("LLEN l", "(integer) 5"),
        ("LLEN nope", "(integer) 0"),
        ("LINDEX l 0", "\"c\""),
        ("LINDEX l -1", "\"e\""),
        ("LINDEX l -5", "\"c\""),
        ("LINDEX l 5", "(nil)"),
        ("LINDEX l -6", "(nil)"),
        ("LINDEX nope 0", "(nil)"),
        ("LINDEX nope x", "(nil)"),
        ("LINDEX l x", NOT_INT),
        ("LPUSHX nope x", "(integer) 0"),
        ("RPUSHX nope x y", "(integer) 0"),
        ("EXISTS nope", "(integer) 0"),
        ("RPUSHX l f", "(integer) 6"),
        ("LPUSHX l z y", "(integer) 8"),
        ("LPOP l", "\"y\""),
        ("RPOP l", "\"f\""),
        ("LPOP l 2", "[\"z\", \"c\"]"),
        ("RPOP l 2", "[\"e\", \"d\"]"),
        ("LRANGE l 0 -1", "[\"b\", \"a\"]"),
        ("LPOP l 0", "[]"),
        ("RPOP l 0", "[]"),
        ("LPOP nope", "(nil)"),
        ("RPOP nope", "(nil)"),
        ("LPOP nope 0", "(nil array)"),
        ("RPOP nope 3", "(nil array)"),
        (
            "LPOP l -1",
            "(error) ERR value is out of range, must be positive",
        ),
        (
            "RPOP l x",
            "(error) ERR value is out of range, must be positive",
        ),
        ("LPOP l 1 2", &arity("lpop")),
        ("RPOP l 1 2", &arity("rpop")),
        ("LPOP l 9223372036854775807", "[\"b\", \"a\"]"),
        ("EXISTS l", "(integer) 0"),
        ("RPUSH r 1 2 3 4 5", "(integer) 5"),
        ("LRANGE r 1 -2", "[\"2\", \"3\", \"4\"]"),
        ("LRANGE r -100 100", "[\"1\", \"2\", \"3\", \"4\", \"5\"]"),
        ("LRANGE r -2 -1", "[\"4\", \"5\"]"),
        ("LRANGE r 3 1", "[]"),
        ("LRANGE r 5 10", "[]"),
        ("LRANGE r 0 -6", "[]"),
        (
            "LRANGE r -9223372036854775808 9223372036854775807",
            "[\"1\", \"2\", \"3\", \"4\", \"5\"]",
        ),
        ("LRANGE nope 0 -1", "[]"),
        ("LRANGE r a 1", NOT_INT),
        ("LRANGE r 0 b", NOT_INT),
        ("LRANGE nope a 1", NOT_INT),
        ("RPOP r 3", "[\"5\", \"4\", \"3\"]"),
        ("LPUSH r \"\"", "(integer) 3"),
        ("LRANGE r 0 -1", "[\"\", \"1\", \"2\"]"),
        ("RPUSH bin a\\sb", "(integer) 1"),
        ("LPOP bin", "\"a b\""),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn lset_linsert_lrem_ltrim() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("RPUSH r 1 2 3 4 5", "(integer) 5"),
        ("LSET r 0 x", "OK"),
        ("LSET r -1 y", "OK"),
        ("LRANGE r 0 -1", "[\"x\", \"2\", \"3\", \"4\", \"y\"]"),
        ("LSET r 5 z", "(error) ERR index out of range"),
        ("LSET r -6 z", "(error) ERR index out of range"),
        ("LSET nope 0 x", "(error) ERR no such key"),
        ("LSET nope x v", "(error) ERR no such key"),
        ("LSET r x v", NOT_INT),
        ("LINSERT r BEFORE 3 b3", "(integer) 6"),
        ("LINSERT r after y end", "(integer) 7"),
        ("LINSERT r AFTER none v", "(integer) -1"),
        ("LINSERT nope BEFORE a b", "(integer) 0"),
        ("LINSERT r MIDDLE 3 v", SYNTAX),
        ("LINSERT nope MIDDLE 3 v", SYNTAX),
        ("EXISTS nope", "(integer) 0"),
        (
            "LRANGE r 0 -1",
            "[\"x\", \"2\", \"b3\", \"3\", \"4\", \"y\", \"end\"]",
        ),
        // The first pivot from the head.
        ("RPUSH p a x a", "(integer) 3"),
        ("LINSERT p AFTER a new", "(integer) 4"),
        ("LRANGE p 0 -1", "[\"a\", \"new\", \"x\", \"a\"]"),
        ("RPUSH m a b a c a", "(integer) 5"),
        ("LREM m 2 a", "(integer) 2"),
        ("LRANGE m 0 -1", "[\"b\", \"c\", \"a\"]"),
        ("RPUSH m a", "(integer) 4"),
        ("LPUSH m a", "(integer) 5"),
        ("LREM m -1 a", "(integer) 1"),
        ("LRANGE m 0 -1", "[\"a\", \"b\", \"c\", \"a\"]"),
        ("LREM m -5 a", "(integer) 2"),
        ("LREM m 0 zz", "(integer) 0"),
        ("LREM nope 0 a", "(integer) 0"),
        ("LREM m x a", NOT_INT),
        ("LREM m 0 b", "(integer) 1"),
        ("LREM m 0 c", "(integer) 1"),
        ("EXISTS m", "(integer) 0"),
        ("RPUSH t 1 2 3 4 5", "(integer) 5"),
        ("LTRIM t 1 -2", "OK"),
        ("LRANGE t 0 -1", "[\"2\", \"3\", \"4\"]"),
        ("LTRIM t 0 100", "OK"),
        ("LLEN t", "(integer) 3"),
        ("LTRIM t -1 -1", "OK"),
        ("LRANGE t 0 -1", "[\"4\"]"),
        ("LTRIM t 5 10", "OK"),
        ("EXISTS t", "(integer) 0"),
        ("LTRIM nope 0 1", "OK"),
        ("EXISTS nope", "(integer) 0"),
        ("LTRIM t a 1", NOT_INT),
        ("RPUSH t 1 2", "(integer) 2"),
        ("LTRIM t 1 0", "OK"),
        ("EXISTS t", "(integer) 0"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn lpos() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("RPUSH p a b c 1 2 3 c c", "(integer) 8"),
        ("LPOS p c", "(integer) 2"),
        ("LPOS p c RANK 2", "(integer) 6"),
        ("LPOS p c RANK -1", "(integer) 7"),
        ("LPOS p c RANK -3", "(integer) 2"),
        ("LPOS p c RANK 4", "(nil)"),
        ("LPOS p c COUNT 2", "[(integer) 2, (integer) 6]"),
        ("LPOS p c COUNT 0", "[(integer) 2, (integer) 6, (integer) 7]"),
        ("LPOS p c RANK -1 COUNT 2", "[(integer) 7, (integer) 6]"),
        ("LPOS p c RANK 2 COUNT 0", "[(integer) 6, (integer) 7]"),
        ("LPOS p c COUNT 0 MAXLEN 3", "[(integer) 2]"),
        ("LPOS p c MAXLEN 2", "(nil)"),
        ("LPOS p c RANK -1 MAXLEN 2 COUNT 0", "[(integer) 7, (integer) 6]"),
        ("LPOS p zz", "(nil)"),
        ("LPOS p zz COUNT 1", "[]"),
        ("LPOS nope a", "(nil)"),
        ("LPOS nope a COUNT 1", "[]"),
        (
            "LPOS p c RANK 0",
            "(error) ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
             second ... or use negative to start from the end of the list",
        ),
        (
            "LPOS p c RANK -9223372036854775808",
            "(error) ERR value is out of range, value must between -9223372036854775807 and \
             9223372036854775807",
        ),
        (
            "LPOS p c RANK 9223372036854775807",
            "(nil)",
        ),
        ("LPOS p c COUNT -1", "(error) ERR COUNT can't be negative"),
        ("LPOS p c COUNT x", "(error) ERR COUNT can't be negative"),
        ("LPOS p c MAXLEN -1", "(error) ERR MAXLEN can't be negative"),
        ("LPOS p c RANK x", NOT_INT),
        ("LPOS p c RANK", SYNTAX),
        ("LPOS p c FOO 1", SYNTAX),
        ("LPOS nope c RANK 0", "(error) ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"),
        ("LPOS p", &arity("lpos")),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn lmove_rpoplpush_and_lmpop() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("RPUSH s 1 2 3", "(integer) 3"),
        ("LMOVE s d RIGHT LEFT", "\"3\""),
        ("LMOVE s d left right", "\"1\""),
        ("LRANGE d 0 -1", "[\"3\", \"1\"]"),
        ("LRANGE s 0 -1", "[\"2\"]"),
        ("LMOVE s d LEFT LEFT", "\"2\""),
        ("EXISTS s", "(integer) 0"),
        ("LMOVE s d LEFT LEFT", "(nil)"),
        ("LRANGE d 0 -1", "[\"2\", \"3\", \"1\"]"),
        // The same list: a rotation.
        ("LMOVE d d LEFT RIGHT", "\"2\""),
        ("LRANGE d 0 -1", "[\"3\", \"1\", \"2\"]"),
        ("RPOPLPUSH d d", "\"2\""),
        ("LRANGE d 0 -1", "[\"2\", \"3\", \"1\"]"),
        ("RPOPLPUSH d e", "\"1\""),
        ("RPOPLPUSH d e", "\"3\""),
        ("LRANGE e 0 -1", "[\"3\", \"1\"]"),
        ("RPOPLPUSH nope e", "(nil)"),
        ("LMOVE d d UP LEFT", SYNTAX),
        ("LMOVE d d LEFT DOWN", SYNTAX),
        ("LMOVE nope d UP LEFT", SYNTAX),
        ("SET str x", "OK"),
        // A destination of another type: nothing moves.
        ("LMOVE d str LEFT LEFT", WRONGTYPE),
        ("RPOPLPUSH d str", WRONGTYPE),
        ("LRANGE d 0 -1", "[\"2\"]"),
        ("LMOVE str d LEFT LEFT", WRONGTYPE),
        // An absent source answers nil before the destination is looked at.
        ("LMOVE nope str LEFT LEFT", "(nil)"),
        ("GET str", "\"x\""),
        // A one-element rotation keeps the key and its expiry.
        ("RPUSH one x", "(integer) 1"),
        ("EXPIRE one 100", "(integer) 1"),
        ("LMOVE one one LEFT RIGHT", "\"x\""),
        ("LRANGE one 0 -1", "[\"x\"]"),
        ("TTL one", "(integer) 100"),
        ("RPOPLPUSH one one", "\"x\""),
        ("TTL one", "(integer) 100"),
        ("RPUSH two a b", "(integer) 2"),
        ("EXPIRE two 100", "(integer) 1"),
        ("LMOVE two two LEFT RIGHT", "\"a\""),
        ("LRANGE two 0 -1", "[\"b\", \"a\"]"),
        ("LMOVE two dst2 LEFT RIGHT", "\"b\""),
        ("LMOVE two dst2 LEFT RIGHT", "\"a\""),
        ("EXISTS two", "(integer) 0"),
        ("TTL dst2", "(integer) -1"),
        ("LMOVE a b LEFT", &arity("lmove")),
        ("RPOPLPUSH a", &arity("rpoplpush")),
        // LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]
        ("RPUSH m1 a b c", "(integer) 3"),
        ("LMPOP 2 nope m1 LEFT", "[\"m1\", [\"a\"]]"),
        ("LMPOP 2 nope m1 RIGHT COUNT 5", "[\"m1\", [\"c\", \"b\"]]"),
        ("EXISTS m1", "(integer) 0"),
        ("LMPOP 1 nope LEFT", "(nil array)"),
        (
            "LMPOP 0 k LEFT",
            "(error) ERR numkeys should be greater than 0",
        ),
        (
            "LMPOP x k LEFT",
            "(error) ERR numkeys should be greater than 0",
        ),
        ("LMPOP 2 k LEFT", SYNTAX),
        ("LMPOP 9223372036854775807 k LEFT", SYNTAX),
        ("LMPOP 1 k MIDDLE", SYNTAX),
        (
            "LMPOP 1 k LEFT COUNT 0",
            "(error) ERR count should be greater than 0",
        ),
        (
            "LMPOP 1 k LEFT COUNT x",
            "(error) ERR count should be greater than 0",
        ),
        ("LMPOP 1 k LEFT COUNT 1 COUNT 2", SYNTAX),
        ("LMPOP 1 k LEFT FOO", SYNTAX),
        ("LMPOP 1 k LEFT COUNT", SYNTAX),
        ("LMPOP 1 str LEFT", WRONGTYPE),
        ("LMPOP 1 k", &arity("lmpop")),
    ]);
    let ttl = c.call("TTL one");
    let secs: i64 = ttl.strip_prefix("(integer) ").unwrap().parse().unwrap();
    assert!(
        (90..=100).contains(&secs),
        "TTL one after a rotation: {ttl}"
    );
    server.shutdown().unwrap();
}

/// A server with a hash `h` (for WRONGTYPE cases).
fn start_with_hash() -> (Server, tempfile::TempDir) {
    let (server, dir) = start();
    Client::connect(&server).script(&[("HSET h f v", "(integer) 1")]);
    (server, dir)
}

#[test]
fn errors_and_wrong_types() {
    let (server, _dir) = start_with_hash();
    let mut c = Client::connect(&server);
    c.script(&[
        ("TYPE h", "hash"),
        ("SET s v", "OK"),
        ("RPUSH l a", "(integer) 1"),
        ("GET l", WRONGTYPE),
        // A push onto another type changes nothing.
        ("LPUSH s x", WRONGTYPE),
        ("RPUSHX s x", WRONGTYPE),
        ("RPUSH h x", WRONGTYPE),
        ("LPUSHX h x", WRONGTYPE),
        ("GET s", "\"v\""),
        ("TYPE h", "hash"),
        ("LPUSH", &arity("lpush")),
        ("LPUSH k", &arity("lpush")),
        ("RPUSH k", &arity("rpush")),
        ("LPUSHX k", &arity("lpushx")),
        ("RPUSHX k", &arity("rpushx")),
        ("LPOP", &arity("lpop")),
        ("LLEN", &arity("llen")),
        ("LLEN a b", &arity("llen")),
        ("LINDEX k", &arity("lindex")),
        ("LSET k 0", &arity("lset")),
        ("LRANGE k 0", &arity("lrange")),
        ("LINSERT k BEFORE a", &arity("linsert")),
        ("LREM k 0", &arity("lrem")),
        ("LTRIM k 0", &arity("ltrim")),
        ("BLPOP k", &arity("blpop")),
        ("BRPOP k", &arity("brpop")),
        ("BLMOVE a b LEFT RIGHT", &arity("blmove")),
        ("BRPOPLPUSH a b", &arity("brpoplpush")),
        ("BLMPOP 0 1 k", &arity("blmpop")),
        ("BLPOP k -1", "(error) ERR timeout is negative"),
        (
            "BLPOP k abc",
            "(error) ERR timeout is not a float or out of range",
        ),
        (
            "BLPOP k nan",
            "(error) ERR timeout is not a float or out of range",
        ),
        ("BLPOP k 1e300", "(error) ERR timeout is negative"),
        (
            "BRPOP k \"\"",
            "(error) ERR timeout is not a float or out of range",
        ),
        (
            "BLMOVE a b LEFT RIGHT abc",
            "(error) ERR timeout is not a float or out of range",
        ),
        ("BLMOVE a b UP RIGHT abc", SYNTAX),
        ("BRPOPLPUSH a b -0.5", "(error) ERR timeout is negative"),
        (
            "BLMPOP abc 1 k LEFT",
            "(error) ERR timeout is not a float or out of range",
        ),
        ("BLMPOP 0 1 k UP", SYNTAX),
        (
            "BLMPOP 0 0 k LEFT",
            "(error) ERR numkeys should be greater than 0",
        ),
    ]);
    for key in ["s", "h"] {
        let cases = [
            format!("LPUSH {key} x"),
            format!("RPUSH {key} x"),
            format!("LPUSHX {key} x"),
            format!("RPUSHX {key} x"),
            format!("LPOP {key}"),
            format!("RPOP {key} 0"),
            format!("LRANGE {key} 0 -1"),
            format!("LLEN {key}"),
            format!("LINDEX {key} 0"),
            format!("LINDEX {key} x"),
            format!("LSET {key} 0 v"),
            format!("LSET {key} x v"),
            format!("LINSERT {key} BEFORE a b"),
            format!("LREM {key} 0 a"),
            format!("LTRIM {key} 0 1"),
            format!("LPOS {key} a"),
            format!("LMOVE {key} d LEFT LEFT"),
            format!("LMOVE l {key} LEFT LEFT"),
            format!("RPOPLPUSH {key} d"),
            format!("RPOPLPUSH l {key}"),
            format!("LMPOP 2 nope {key} LEFT"),
            format!("BLPOP {key} 0"),
            format!("BRPOP nope {key} 0.1"),
            format!("BLMOVE {key} d LEFT LEFT 0"),
            format!("BLMOVE l {key} LEFT LEFT 0"),
            format!("BRPOPLPUSH {key} d 0"),
            format!("BLMPOP 0 1 {key} LEFT"),
        ];
        for case in &cases {
            assert_eq!(c.call(case), WRONGTYPE, "reply to `{case}`");
        }
    }
    // Nothing changed on the way.
    c.script(&[
        ("GET s", "\"v\""),
        ("TYPE h", "hash"),
        ("LRANGE l 0 -1", "[\"a\"]"),
        ("EXISTS d", "(integer) 0"),
        // A key before a list that can serve: Redis takes from the list.
        ("BLPOP nope l 0", "[\"l\", \"a\"]"),
        ("RPUSH l a", "(integer) 1"),
        ("BLPOP l s 0", "[\"l\", \"a\"]"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn type_encoding_expiry_and_deletion() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("RPUSH l a b", "(integer) 2"),
        ("TYPE l", "list"),
        ("OBJECT ENCODING l", "\"quicklist\""),
        ("EXISTS l", "(integer) 1"),
        ("EXPIRE l 100", "(integer) 1"),
        ("TTL l", "(integer) 100"),
        ("RPUSH l c", "(integer) 3"),
        ("TTL l", "(integer) 100"),
        ("DEL l", "(integer) 1"),
        ("EXISTS l", "(integer) 0"),
        ("TYPE l", "none"),
        ("RPUSH l a", "(integer) 1"),
        ("PEXPIRE l 50", "(integer) 1"),
        ("RPUSH m a b", "(integer) 2"),
        ("PEXPIRE m 50", "(integer) 1"),
        ("RPUSH n a", "(integer) 1"),
        ("PEXPIRE n 50", "(integer) 1"),
    ]);
    thread::sleep(Duration::from_millis(120));
    c.script(&[
        ("LLEN l", "(integer) 0"),
        ("EXISTS l", "(integer) 0"),
        ("LPUSHX l x", "(integer) 0"),
        // A push is the first to meet an expired list: a new one, no TTL.
        ("LPUSH m y", "(integer) 1"),
        ("LRANGE m 0 -1", "[\"y\"]"),
        ("TTL m", "(integer) -1"),
        ("RPUSHX n y", "(integer) 0"),
        ("EXISTS n", "(integer) 0"),
        ("DEL m", "(integer) 1"),
        // Emptied by each kind of removal: the key goes.
        ("RPUSH a x", "(integer) 1"),
        ("RPOP a", "\"x\""),
        ("EXISTS a", "(integer) 0"),
        ("RPUSH a x", "(integer) 1"),
        ("LREM a 0 x", "(integer) 1"),
        ("EXISTS a", "(integer) 0"),
        ("RPUSH a x", "(integer) 1"),
        ("LMOVE a b LEFT LEFT", "\"x\""),
        ("EXISTS a", "(integer) 0"),
        ("LMPOP 1 b LEFT", "[\"b\", [\"x\"]]"),
        ("EXISTS b", "(integer) 0"),
        ("DBSIZE", "(integer) 0"),
        // A list over a string key and back.
        ("SET k v", "OK"),
        ("DEL k", "(integer) 1"),
        ("RPUSH k a", "(integer) 1"),
        ("SET k v", "OK"),
        ("TYPE k", "string"),
        ("LLEN k", WRONGTYPE),
        ("RENAME k k2", "OK"),
        ("RPUSH l2 x y", "(integer) 2"),
        ("RENAME l2 k2", "OK"),
        ("LRANGE k2 0 -1", "[\"x\", \"y\"]"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn resp3_replies() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    let hello = c.call("HELLO 3");
    assert!(hello.starts_with('['), "{hello}");
    c.script(&[
        ("LPOP nope", "(nil)"),
        ("LPOP nope 1", "(nil)"),
        ("LINDEX nope 0", "(nil)"),
        ("LPOS nope a", "(nil)"),
        ("LMPOP 1 nope LEFT", "(nil)"),
        ("BLPOP nope 0.01", "(nil)"),
        ("BLMOVE nope d LEFT LEFT 0.01", "(nil)"),
        ("RPUSH l a b", "(integer) 2"),
        ("LRANGE l 0 -1", "[\"a\", \"b\"]"),
        ("BLPOP l 0", "[\"l\", \"a\"]"),
    ]);
    // The wire form: RESP3 nulls.
    c.send("LPOP nope 1");
    assert_eq!(c.line(), "_");
    c.send("BRPOP nope 0.01");
    assert_eq!(c.line(), "_");
    server.shutdown().unwrap();
}

#[test]
fn multi_exec() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("MULTI", "OK"),
        ("RPUSH x a b", "QUEUED"),
        ("LPOP x", "QUEUED"),
        ("LRANGE x 0 -1", "QUEUED"),
        ("LLEN x", "QUEUED"),
        // Blocking commands answer at once inside a transaction.
        ("BLPOP empty 0", "QUEUED"),
        ("BLMOVE empty x LEFT LEFT 0", "QUEUED"),
        ("BRPOPLPUSH empty x 0", "QUEUED"),
        ("BLMPOP 0 1 empty LEFT", "QUEUED"),
        ("BRPOPLPUSH x x 0", "QUEUED"),
        ("BLPOP x 0", "QUEUED"),
        ("EXISTS x", "QUEUED"),
        (
            "EXEC",
            "[(integer) 2, \"a\", [\"b\"], (integer) 1, (nil array), (nil), (nil), (nil array), \
             \"b\", [\"x\", \"b\"], (integer) 0]",
        ),
        ("MULTI", "OK"),
        ("RPUSH y 1 2 3", "QUEUED"),
        ("LMOVE y z RIGHT LEFT", "QUEUED"),
        ("LSET y 0 one", "QUEUED"),
        ("LSET y 9 nine", "QUEUED"),
        ("LINSERT y AFTER one half", "QUEUED"),
        ("LRANGE y 0 -1", "QUEUED"),
        ("LRANGE z 0 -1", "QUEUED"),
        (
            "EXEC",
            "[(integer) 3, \"3\", OK, (error) ERR index out of range, (integer) 3, \
             [\"one\", \"half\", \"2\"], [\"3\"]]",
        ),
        ("LRANGE y 0 -1", "[\"one\", \"half\", \"2\"]"),
        // WATCH sees list writes.
        ("WATCH y", "OK"),
    ]);
    let mut other = Client::connect(&server);
    other.script(&[("RPUSH y more", "(integer) 4")]);
    c.script(&[
        ("MULTI", "OK"),
        ("LLEN y", "QUEUED"),
        ("EXEC", "(nil array)"),
        ("WATCH y", "OK"),
        ("MULTI", "OK"),
        ("LLEN y", "QUEUED"),
        ("EXEC", "[(integer) 4]"),
        ("MULTI", "OK"),
        ("LPUSH", &arity("lpush")),
        (
            "EXEC",
            "(error) EXECABORT Transaction discarded because of previous errors.",
        ),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn lists_survive_a_restart() {
    let (server, dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("RPUSH a 1 2 3 4 5 6", "(integer) 6"),
        ("LPUSH a 0", "(integer) 7"),
        ("LSET a 3 three", "OK"),
        ("LINSERT a BEFORE 5 4.5", "(integer) 8"),
        ("LREM a 1 1", "(integer) 1"),
        ("LTRIM a 0 -2", "OK"),
        ("LMOVE a b RIGHT LEFT", "\"5\""),
        ("RPOPLPUSH a a", "\"4.5\""),
        ("LPOP a", "\"4.5\""),
        ("RPUSH gone x", "(integer) 1"),
        ("RPOP gone", "\"x\""),
        ("RPUSH ttl x", "(integer) 1"),
        ("EXPIRE ttl 1000", "(integer) 1"),
        ("SELECT 3", "OK"),
        ("RPUSH other db3", "(integer) 1"),
    ]);
    // Databases are apart.
    c.script(&[("LRANGE a 0 -1", "[]")]);
    c.script(&[("SELECT 0", "OK")]);
    let before = c.call("LRANGE a 0 -1");
    assert_eq!(before, "[\"0\", \"2\", \"three\", \"4\"]");
    drop(c);
    server.shutdown().unwrap();

    let server = Server::start(Config {
        port: 0,
        dir: dir.path().join("data"),
        ..Config::default()
    })
    .unwrap();
    let mut c = Client::connect(&server);
    c.script(&[
        ("LRANGE a 0 -1", &before),
        ("LRANGE b 0 -1", "[\"5\"]"),
        ("EXISTS gone", "(integer) 0"),
        ("TYPE ttl", "list"),
        ("DBSIZE", "(integer) 3"),
        ("SELECT 3", "OK"),
        ("LRANGE other 0 -1", "[\"db3\"]"),
    ]);
    let ttl = c.call("SELECT 0");
    assert_eq!(ttl, "OK");
    let ttl = c.call("TTL ttl");
    let secs: i64 = ttl.strip_prefix("(integer) ").unwrap().parse().unwrap();
    assert!((990..=1000).contains(&secs), "{ttl}");
    server.shutdown().unwrap();
}

// ---- the randomized model test (the `redis` crate as the client) ----

type Model = HashMap<String, VecDeque<String>>;

fn bulk(s: &str) -> redis::Value {
    redis::Value::BulkString(s.as_bytes().to_vec())
}

fn bulks<'a>(items: impl Iterator<Item = &'a String>) -> redis::Value {
    redis::Value::Array(items.map(|s| bulk(s)).collect())
}

/// Redis's inclusive index range over `len` elements.
fn range(start: i64, stop: i64, len: usize) -> std::ops::Range<usize> {
    let len = len as i64;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 { stop + len } else { stop };
    if start > stop || start >= len {
        return 0..0;
    }
    start as usize..(stop.min(len - 1) + 1) as usize
}

fn index(i: i64, len: usize) -> Option<usize> {
    let i = if i < 0 { i + len as i64 } else { i };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// One random command and the reply the model expects.
fn random_command(
    rng: &mut impl Rng,
    model: &mut Model,
) -> (Vec<String>, Result<redis::Value, String>) {
    use redis::Value::{Array, Int, Nil, Okay};
    let keys = ["k0", "k1", "k2"];
    let values = ["a", "b", "c", "d"];
    let key = keys[rng.random_range(0..keys.len())].to_string();
    let value = |rng: &mut dyn rand::RngCore| values[rng.random_range(0..values.len())].to_string();
    let small = |rng: &mut dyn rand::RngCore| rng.random_range(-5i64..6);
    let list = model.get(&key).cloned().unwrap_or_default();
    let len = list.len();
    let store = |model: &mut Model, key: &str, list: VecDeque<String>| {
        if list.is_empty() {
            model.remove(key);
        } else {
            model.insert(key.to_string(), list);
        }
    };
    let mut list = list;
    let words = |parts: &[&str]| parts.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match rng.random_range(0..16) {
        0 | 1 => {
            let front = rng.random_bool(0.5);
            let only_existing = rng.random_bool(0.2);
            let n = rng.random_range(1..4);
            let pushed: Vec<String> = (0..n).map(|_| value(rng)).collect();
            let name = match (front, only_existing) {
                (true, false) => "LPUSH",
                (false, false) => "RPUSH",
                (true, true) => "LPUSHX",
                (false, true) => "RPUSHX",
            };
            let mut cmd = words(&[name, &key]);
            cmd.extend(pushed.iter().cloned());
            if only_existing && len == 0 {
                return (cmd, Ok(Int(0)));
            }
            for v in pushed {
                if front {
                    list.push_front(v);
                } else {
                    list.push_back(v);
                }
            }
            let n = list.len() as i64;
            store(model, &key, list);
            (cmd, Ok(Int(n)))
        }
        2 | 3 => {
            let front = rng.random_bool(0.5);
            let name = if front { "LPOP" } else { "RPOP" };
            let count = rng.random_bool(0.5).then(|| rng.random_range(0..4usize));
            let mut cmd = words(&[name, &key]);
            if let Some(count) = count {
                cmd.push(count.to_string());
            }
            if len == 0 {
                return (cmd, Ok(Nil));
            }
            let n = count.unwrap_or(1).min(len);
            let popped: Vec<String> = (0..n)
                .map(|_| {
                    if front {
                        list.pop_front()
                    } else {
                        list.pop_back()
                    }
                    .unwrap()
                })
                .collect();
            store(model, &key, list);
            let reply = match count {
                None => bulk(&popped[0]),
                Some(_) => bulks(popped.iter()),
            };
            (cmd, Ok(reply))
        }
        4 => {
            let (start, stop) = (small(rng), small(rng));
            let cmd = words(&["LRANGE", &key, &start.to_string(), &stop.to_string()]);
            let r = range(start, stop, len);
            (cmd, Ok(bulks(list.range(r))))
        }
        5 => (words(&["LLEN", &key]), Ok(Int(len as i64))),
        6 => {
            let i = small(rng);
            let reply = index(i, len).map_or(Nil, |at| bulk(&list[at]));
            (words(&["LINDEX", &key, &i.to_string()]), Ok(reply))
        }
        7 => {
            let i = small(rng);
            let v = value(rng);
            let cmd = words(&["LSET", &key, &i.to_string(), &v]);
            if len == 0 {
                return (cmd, Err("ERR no such key".into()));
            }
            match index(i, len) {
                None => (cmd, Err("ERR index out of range".into())),
                Some(at) => {
                    list[at] = v;
                    store(model, &key, list);
                    (cmd, Ok(Okay))
                }
            }
        }
        8 => {
            let before = rng.random_bool(0.5);
            let (pivot, v) = (value(rng), value(rng));
            let cmd = words(&[
                "LINSERT",
                &key,
                if before { "BEFORE" } else { "AFTER" },
                &pivot,
                &v,
            ]);
            if len == 0 {
                return (cmd, Ok(Int(0)));
            }
            match list.iter().position(|x| *x == pivot) {
                None => (cmd, Ok(Int(-1))),
                Some(at) => {
                    list.insert(if before { at } else { at + 1 }, v);
                    let n = list.len() as i64;
                    store(model, &key, list);
                    (cmd, Ok(Int(n)))
                }
            }
        }
        9 => {
            let count = rng.random_range(-2i64..3);
            let v = value(rng);
            let cmd = words(&["LREM", &key, &count.to_string(), &v]);
            let limit = if count == 0 {
                usize::MAX
            } else {
                count.unsigned_abs() as usize
            };
            let mut removed = 0;
            let positions: Vec<usize> = if count < 0 {
                (0..len).rev().collect()
            } else {
                (0..len).collect()
            };
            let mut drop = vec![false; len];
            for at in positions {
                if removed < limit && list[at] == v {
                    drop[at] = true;
                    removed += 1;
                }
            }
            let kept: VecDeque<String> = list
                .into_iter()
                .enumerate()
                .filter(|(at, _)| !drop[*at])
                .map(|(_, x)| x)
                .collect();
            store(model, &key, kept);
            (cmd, Ok(Int(removed as i64)))
        }
        10 => {
            let (start, stop) = (small(rng), small(rng));
            let cmd = words(&["LTRIM", &key, &start.to_string(), &stop.to_string()]);
            let r = range(start, stop, len);
            let kept: VecDeque<String> = list.range(r).cloned().collect();
            store(model, &key, kept);
            (cmd, Ok(Okay))
        }
        11 => {
            let v = value(rng);
            let rank = [1i64, 2, -1, -2][rng.random_range(0..4)];
            let count = rng.random_bool(0.5).then(|| rng.random_range(0..3usize));
            let mut cmd = words(&["LPOS", &key, &v, "RANK", &rank.to_string()]);
            if let Some(count) = count {
                cmd.push("COUNT".into());
                cmd.push(count.to_string());
            }
            let mut matches: Vec<usize> = (0..len).filter(|&at| list[at] == v).collect();
            if rank < 0 {
                matches.reverse();
            }
            let matches: Vec<usize> = matches
                .into_iter()
                .skip(rank.unsigned_abs() as usize - 1)
                .collect();
            let reply = match count {
                None => matches.first().map_or(Nil, |&at| Int(at as i64)),
                Some(count) => {
                    let take = if count == 0 { usize::MAX } else { count };
                    Array(
                        matches
                            .iter()
                            .take(take)
                            .map(|&at| Int(at as i64))
                            .collect(),
                    )
                }
            };
            (cmd, Ok(reply))
        }
        _ => {
            let to = keys[rng.random_range(0..keys.len())].to_string();
            let (from_front, to_front) = if rng.random_bool(0.3) {
                (false, true)
            } else {
                (rng.random_bool(0.5), rng.random_bool(0.5))
            };
            let side = |front: bool| if front { "LEFT" } else { "RIGHT" };
            let cmd = if !from_front && to_front && rng.random_bool(0.5) {
                words(&["RPOPLPUSH", &key, &to])
            } else {
                words(&["LMOVE", &key, &to, side(from_front), side(to_front)])
            };
            if len == 0 {
                return (cmd, Ok(Nil));
            }
            let v = if from_front {
                list.pop_front()
            } else {
                list.pop_back()
            }
            .unwrap();
            store(model, &key, list);
            let mut dest = model.get(&to).cloned().unwrap_or_default();
            if to_front {
                dest.push_front(v.clone());
            } else {
                dest.push_back(v.clone());
            }
            store(model, &to, dest);
            (cmd, Ok(bulk(&v)))
        }
    }
}

#[test]
fn random_commands_match_a_model() {
    let (server, _dir) = start();
    let mut con = common::redis_con(server.addr);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x1157);
    let mut model = Model::new();
    for step in 0..600 {
        let (cmd, expected) = random_command(&mut rng, &mut model);
        let mut request = redis::cmd(&cmd[0]);
        for arg in &cmd[1..] {
            request.arg(arg);
        }
        let got = request
            .query::<redis::Value>(&mut con)
            .map_err(|e| format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")));
        assert_eq!(got, expected, "step {step}: {cmd:?}");
        // Every few steps, the whole state.
        if step % 50 == 0 {
            for key in ["k0", "k1", "k2"] {
                let got: Vec<String> = redis::cmd("LRANGE")
                    .arg(key)
                    .arg(0)
                    .arg(-1)
                    .query(&mut con)
                    .unwrap();
                let want: Vec<String> = model
                    .get(key)
                    .map_or(Vec::new(), |l| l.iter().cloned().collect());
                assert_eq!(got, want, "step {step}: {key}");
                let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut con).unwrap();
                assert_eq!(exists, model.contains_key(key) as i64);
            }
        }
    }
    server.shutdown().unwrap();
}

// ---- blocking ----

#[test]
fn blpop_waits_for_a_push_and_serves_clients_in_order() {
    let (server, _dir) = start();
    let mut observer = Client::connect(&server);
    let mut first = Client::connect(&server);
    let mut second = Client::connect(&server);
    let first_id = client_id(&mut first);
    let second_id = client_id(&mut second);

    let started = Instant::now();
    first.send("BLPOP k 0");
    wait_blocked(&mut observer, first_id, "blpop");
    second.send("BLPOP other k 0");
    wait_blocked(&mut observer, second_id, "blpop");
    assert_silent(&mut first, Duration::from_millis(50));

    // A push from a third connection, on another thread.
    let addr = server.addr;
    let pusher = thread::spawn(move || {
        let mut con = common::redis_con(addr);
        redis::cmd("RPUSH")
            .arg("k")
            .arg("one")
            .query::<i64>(&mut con)
            .unwrap()
    });
    // The push's reply counts the element: it was pushed, then popped.
    assert_eq!(pusher.join().unwrap(), 1);
    assert_eq!(first.reply(), "[\"k\", \"one\"]");
    // It waited: it was silent for 50 ms before the push.
    assert!(started.elapsed() >= Duration::from_millis(50));
    // The second client is still waiting; the next push is its.
    assert_silent(&mut second, Duration::from_millis(100));
    observer.script(&[
        ("EXISTS k", "(integer) 0"),
        ("RPUSH k two three", "(integer) 2"),
    ]);
    assert_eq!(second.reply(), "[\"k\", \"two\"]");
    observer.script(&[("LRANGE k 0 -1", "[\"three\"]")]);

    // Both wait again on one key; one push of two elements serves both, in
    // the order they blocked.
    observer.script(&[("DEL k", "(integer) 1")]);
    second.send("BRPOP k 0");
    wait_blocked(&mut observer, second_id, "brpop");
    first.send("BLPOP k 0");
    wait_blocked(&mut observer, first_id, "blpop");
    observer.script(&[("RPUSH k a b", "(integer) 2")]);
    assert_eq!(second.reply(), "[\"k\", \"b\"]");
    assert_eq!(first.reply(), "[\"k\", \"a\"]");
    observer.script(&[("EXISTS k", "(integer) 0")]);

    // Both connections work normally after.
    first.script(&[("PING", "PONG")]);
    second.script(&[("PING", "PONG")]);
    server.shutdown().unwrap();
}

#[test]
fn blocking_commands_time_out() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    for (command, reply, secs) in [
        ("BLPOP k 0.3", "(nil array)", 0.3),
        ("BRPOP k j 0.2", "(nil array)", 0.2),
        // Redis answers a timed-out BLMOVE with a null array too.
        ("BLMOVE k d LEFT RIGHT 0.2", "(nil array)", 0.2),
        ("BRPOPLPUSH k d 0.2", "(nil array)", 0.2),
        ("BLMPOP 0.2 2 k j LEFT COUNT 3", "(nil array)", 0.2),
        ("BLPOP k 0.001", "(nil array)", 0.001),
    ] {
        let started = Instant::now();
        assert_eq!(c.call(command), reply, "{command}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs_f64(secs),
            "{command}: {waited:?}"
        );
        assert!(waited < Duration::from_secs(5), "{command}: {waited:?}");
    }
    c.script(&[("EXISTS d", "(integer) 0"), ("PING", "PONG")]);
    server.shutdown().unwrap();
}

#[test]
fn blmove_moves_atomically_when_woken() {
    let (server, _dir) = start();
    let mut observer = Client::connect(&server);
    let mut waiter = Client::connect(&server);
    let id = client_id(&mut waiter);
    observer.script(&[("RPUSH dst old", "(integer) 1")]);
    waiter.send("BLMOVE src dst RIGHT LEFT 0");
    wait_blocked(&mut observer, id, "blmove");
    observer.script(&[("RPUSH src x y", "(integer) 2")]);
    assert_eq!(waiter.reply(), "\"y\"");
    observer.script(&[
        ("LRANGE src 0 -1", "[\"x\"]"),
        ("LRANGE dst 0 -1", "[\"y\", \"old\"]"),
    ]);

    // BRPOPLPUSH, and BLMPOP with a count.
    waiter.send("BRPOPLPUSH empty dst 0");
    wait_blocked(&mut observer, id, "brpoplpush");
    observer.script(&[("LPUSH empty z", "(integer) 1")]);
    assert_eq!(waiter.reply(), "\"z\"");
    observer.script(&[
        ("LRANGE dst 0 -1", "[\"z\", \"y\", \"old\"]"),
        ("EXISTS empty", "(integer) 0"),
    ]);
    waiter.send("BLMPOP 0 2 m1 m2 RIGHT COUNT 2");
    wait_blocked(&mut observer, id, "blmpop");
    observer.script(&[("RPUSH m2 1 2 3", "(integer) 3")]);
    assert_eq!(waiter.reply(), "[\"m2\", [\"3\", \"2\"]]");

    // Many moves racing pushes: every element lands exactly once.
    let addr = server.addr;
    let movers: Vec<_> = (0..3)
        .map(|_| {
            thread::spawn(move || {
                let mut con = common::redis_con(addr);
                let mut got = Vec::new();
                for _ in 0..20 {
                    let v: String = redis::cmd("BLMOVE")
                        .arg("q")
                        .arg("done")
                        .arg("LEFT")
                        .arg("RIGHT")
                        .arg(10)
                        .query(&mut con)
                        .unwrap();
                    got.push(v);
                }
                got
            })
        })
        .collect();
    let mut con = common::redis_con(addr);
    for i in 0..60 {
        redis::cmd("RPUSH")
            .arg("q")
            .arg(i.to_string())
            .query::<i64>(&mut con)
            .unwrap();
        if i % 7 == 0 {
            thread::sleep(Duration::from_millis(2));
        }
    }
    let mut moved: Vec<i64> = movers
        .into_iter()
        .flat_map(|m| m.join().unwrap())
        .map(|v| v.parse().unwrap())
        .collect();
    moved.sort();
    assert_eq!(moved, (0..60).collect::<Vec<_>>());
    let done: Vec<String> = redis::cmd("LRANGE")
        .arg("done")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(done.len(), 60);
    let q: i64 = redis::cmd("EXISTS").arg("q").query(&mut con).unwrap();
    assert_eq!(q, 0);
    server.shutdown().unwrap();
}

#[test]
fn a_pipeline_waits_behind_a_blocked_command() {
    let (server, _dir) = start();
    let mut observer = Client::connect(&server);
    let mut c = Client::connect(&server);
    let id = client_id(&mut c);
    c.writer
        .write_all(b"*2\r\n$4\r\nPING\r\n$1\r\n1\r\n*3\r\n$5\r\nBLPOP\r\n$1\r\nk\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n")
        .unwrap();
    // The reply before the blocked command is sent at once.
    assert_eq!(c.reply(), "\"1\"");
    wait_blocked(&mut observer, id, "blpop");
    assert_silent(&mut c, Duration::from_millis(200));
    // Commands sent while blocked wait too.
    c.send("ECHO later");
    assert_silent(&mut c, Duration::from_millis(100));
    observer.script(&[("LPUSH k v", "(integer) 1")]);
    assert_eq!(c.reply(), "[\"k\", \"v\"]");
    assert_eq!(c.reply(), "PONG");
    assert_eq!(c.reply(), "\"later\"");
    server.shutdown().unwrap();
}

#[test]
fn a_key_of_another_type_keeps_a_client_waiting() {
    let (server, _dir) = start();
    let mut observer = Client::connect(&server);
    let mut c = Client::connect(&server);
    let id = client_id(&mut c);
    c.send("BLPOP k 0");
    wait_blocked(&mut observer, id, "blpop");
    // Redis serves a blocked client only from a list.
    observer.script(&[("SET k string", "OK")]);
    assert_silent(&mut c, Duration::from_millis(150));
    observer.script(&[("DEL k", "(integer) 1"), ("RPUSH k v", "(integer) 1")]);
    assert_eq!(c.reply(), "[\"k\", \"v\"]");

    // A list after a key that turned into a string: Redis runs the command
    // again, which fails on the string.
    c.send("BLPOP a b 0");
    wait_blocked(&mut observer, id, "blpop");
    observer.script(&[("SET a string", "OK"), ("RPUSH b v", "(integer) 1")]);
    assert_eq!(c.reply(), WRONGTYPE);
    observer.script(&[("LRANGE b 0 -1", "[\"v\"]")]);

    // A string destination fails BLMOVE when its source fills.
    c.send("BLMOVE src a LEFT LEFT 0");
    wait_blocked(&mut observer, id, "blmove");
    observer.script(&[("RPUSH src x", "(integer) 1")]);
    assert_eq!(c.reply(), WRONGTYPE);
    observer.script(&[("LRANGE src 0 -1", "[\"x\"]"), ("GET a", "\"string\"")]);
    server.shutdown().unwrap();
}

#[test]
fn client_kill_ends_a_wait() {
    let (server, _dir) = start();
    let mut observer = Client::connect(&server);
    let mut c = Client::connect(&server);
    let id = client_id(&mut c);
    c.send("BLPOP k 0");
    wait_blocked(&mut observer, id, "blpop");
    observer.script(&[(&format!("CLIENT KILL ID {id}"), "(integer) 1")]);
    assert_closed(&mut c);
    // The killed client left the line: the next one gets the element.
    let mut next = Client::connect(&server);
    let next_id = client_id(&mut next);
    next.send("BLPOP k 0");
    wait_blocked(&mut observer, next_id, "blpop");
    observer.script(&[("RPUSH k v", "(integer) 1")]);
    assert_eq!(next.reply(), "[\"k\", \"v\"]");

    // A client that hangs up while blocked is gone too.
    let mut leaver = Client::connect(&server);
    let leaver_id = client_id(&mut leaver);
    leaver.send("BLPOP k 0");
    wait_blocked(&mut observer, leaver_id, "blpop");
    drop(leaver);
    let deadline = Instant::now() + Duration::from_secs(10);
    while observer.call(&format!("CLIENT LIST ID {leaver_id}")) != "\"\"" {
        assert!(
            Instant::now() < deadline,
            "the client that hung up is still listed"
        );
        thread::sleep(Duration::from_millis(10));
    }
    observer.script(&[("RPUSH k w", "(integer) 1"), ("LLEN k", "(integer) 1")]);
    server.shutdown().unwrap();
}

#[test]
fn shutdown_ends_a_wait() {
    let (server, _dir) = start();
    let mut observer = Client::connect(&server);
    let mut c = Client::connect(&server);
    let id = client_id(&mut c);
    c.send("BLPOP k 0");
    wait_blocked(&mut observer, id, "blpop");
    let started = Instant::now();
    server.shutdown().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_closed(&mut c);
}
