//! Hash commands over real TCP, reply by reply, as Redis 7.0 answers
//! (RESP2 and RESP3), plus transactions, expiry, persistence across a
//! restart, and a randomized comparison against a model through the
//! `redis` crate.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use common::{arity, start, Client, NOT_FLOAT, NOT_INT, SYNTAX, WRONGTYPE};
use engram_server::Server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The elements of a rendered array reply `[a, b, ...]` (elements without
/// commas or brackets).
fn items(reply: &str) -> Vec<String> {
    let inner = reply
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or_else(|| panic!("not an array: {reply}"));
    if inner.is_empty() {
        return Vec::new();
    }
    inner.split(", ").map(str::to_string).collect()
}

#[test]
fn set_get_and_friends() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("HGET h f", "(nil)"),
        ("HLEN h", "(integer) 0"),
        ("HEXISTS h f", "(integer) 0"),
        ("HSTRLEN h f", "(integer) 0"),
        ("HGETALL h", "[]"),
        ("HKEYS h", "[]"),
        ("HVALS h", "[]"),
        ("HMGET h a b", "[(nil), (nil)]"),
        ("HDEL h f", "(integer) 0"),
        ("EXISTS h", "(integer) 0"),
        ("HSET h f v", "(integer) 1"),
        ("HSET h f v2", "(integer) 0"),
        ("HSET h f v2", "(integer) 0"),
        ("HSET h a 1 b 2 a 3", "(integer) 2"),
        ("HGET h a", "\"3\""),
        ("HGET h f", "\"v2\""),
        ("HGET h nope", "(nil)"),
        ("HLEN h", "(integer) 3"),
        ("HSET h", &arity("hset")),
        ("HSET h f", &arity("hset")),
        ("HSET h f v g", &arity("hset")),
        ("HMSET h f", &arity("hmset")),
        ("HMSET h x 10 y 20", "OK"),
        ("HMSET h x 11 y 20 z 30 x 12", "OK"),
        ("HMGET h x y z nope", "[\"12\", \"20\", \"30\", (nil)]"),
        ("HMGET h", &arity("hmget")),
        ("HLEN h", "(integer) 6"),
        ("HSETNX h f other", "(integer) 0"),
        ("HGET h f", "\"v2\""),
        ("HSETNX h g gv", "(integer) 1"),
        ("HGET h g", "\"gv\""),
        ("HSETNX fresh f v", "(integer) 1"),
        ("HGETALL fresh", "[\"f\", \"v\"]"),
        ("HSETNX h g", &arity("hsetnx")),
        ("HEXISTS h g", "(integer) 1"),
        ("HEXISTS h nope", "(integer) 0"),
        ("HEXISTS h", &arity("hexists")),
        ("HSTRLEN h f", "(integer) 2"),
        ("HSTRLEN h nope", "(integer) 0"),
        ("HSET h empty \"\"", "(integer) 1"),
        ("HSTRLEN h empty", "(integer) 0"),
        ("HGET h empty", "\"\""),
        ("HSET h \"\" emptyfield", "(integer) 1"),
        ("HGET h \"\"", "\"emptyfield\""),
        ("HDEL h \"\" empty", "(integer) 2"),
        ("HDEL h x x y nope", "(integer) 2"),
        ("HDEL h x", "(integer) 0"),
        ("HDEL h", &arity("hdel")),
        ("HGET h", &arity("hget")),
        ("HGETALL", &arity("hgetall")),
        ("HGETALL h x", &arity("hgetall")),
        ("HKEYS", &arity("hkeys")),
        ("HVALS h x", &arity("hvals")),
        ("HLEN", &arity("hlen")),
        ("HSTRLEN h", &arity("hstrlen")),
        ("HLEN h", "(integer) 5"),
        ("TYPE h", "hash"),
        ("OBJECT ENCODING h", "\"hashtable\""),
    ]);
    // HGETALL, HKEYS, HVALS agree with each other and hold every field.
    let all = items(&c.call("HGETALL h"));
    let keys = items(&c.call("HKEYS h"));
    let vals = items(&c.call("HVALS h"));
    assert_eq!(all.len(), 10);
    let pairs: BTreeMap<String, String> = all
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    let expected: BTreeMap<String, String> = [
        ("f", "v2"),
        ("a", "3"),
        ("b", "2"),
        ("z", "30"),
        ("g", "gv"),
    ]
    .iter()
    .map(|(k, v)| (format!("{k:?}"), format!("{v:?}")))
    .collect();
    assert_eq!(pairs, expected);
    assert_eq!(keys, all.iter().step_by(2).cloned().collect::<Vec<_>>());
    assert_eq!(
        vals,
        all.iter().skip(1).step_by(2).cloned().collect::<Vec<_>>()
    );
    // Deleting every field deletes the key.
    c.script(&[
        ("HDEL h f a b z g", "(integer) 5"),
        ("EXISTS h", "(integer) 0"),
        ("TYPE h", "none"),
        ("HLEN h", "(integer) 0"),
        ("HSET h f v", "(integer) 1"),
        ("HDEL h f", "(integer) 1"),
        ("EXISTS h", "(integer) 0"),
        ("DBSIZE", "(integer) 1"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn increments() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("HINCRBY h n 5", "(integer) 5"),
        ("HINCRBY h n -7", "(integer) -2"),
        ("HGET h n", "\"-2\""),
        ("HINCRBY h n x", NOT_INT),
        ("HINCRBY h n 1.5", NOT_INT),
        ("HINCRBY h n", &arity("hincrby")),
        ("HSET h s hello", "(integer) 1"),
        ("HINCRBY h s 1", "(error) ERR hash value is not an integer"),
        ("HSET h sp \\s1", "(integer) 1"),
        ("HINCRBY h sp 1", "(error) ERR hash value is not an integer"),
        ("HSET h big 9223372036854775807", "(integer) 1"),
        (
            "HINCRBY h big 1",
            "(error) ERR increment or decrement would overflow",
        ),
        ("HINCRBY h big -1", "(integer) 9223372036854775806"),
        ("HSET h small -9223372036854775484", "(integer) 1"),
        ("HINCRBY h small -1", "(integer) -9223372036854775485"),
        (
            "HINCRBY h small -10000",
            "(error) ERR increment or decrement would overflow",
        ),
        ("HGET h small", "\"-9223372036854775485\""),
        ("HINCRBY h zero 0", "(integer) 0"),
        ("HEXISTS h zero", "(integer) 1"),
        ("HINCRBYFLOAT h fl 2.5", "\"2.5\""),
        ("HINCRBYFLOAT h fl 0.1", "\"2.6\""),
        ("HINCRBYFLOAT h fl -2.6", "\"0\""),
        ("HINCRBYFLOAT h n 1.5", "\"-0.5\""),
        ("HINCRBYFLOAT h n 0.5", "\"0\""),
        ("HGET h n", "\"0\""),
        ("HINCRBY h n 3", "(integer) 3"),
        ("HINCRBYFLOAT h e 5.0e3", "\"5000\""),
        ("HINCRBYFLOAT h fl abc", NOT_FLOAT),
        ("HINCRBYFLOAT h fl nan", NOT_FLOAT),
        ("HINCRBYFLOAT h fl \"\"", NOT_FLOAT),
        ("HINCRBYFLOAT h fl \\s1", NOT_FLOAT),
        ("HINCRBYFLOAT h fl 1\\s", NOT_FLOAT),
        (
            "HINCRBYFLOAT h fl inf",
            "(error) ERR value is NaN or Infinity",
        ),
        (
            "HINCRBYFLOAT h fl -inf",
            "(error) ERR value is NaN or Infinity",
        ),
        (
            "HINCRBYFLOAT h s 1",
            "(error) ERR hash value is not a float",
        ),
        (
            "HINCRBYFLOAT h sp 1",
            "(error) ERR hash value is not a float",
        ),
        ("HSET h huge 1e308", "(integer) 1"),
        (
            "HINCRBYFLOAT h huge 1e308",
            "(error) ERR increment would produce NaN or Infinity",
        ),
        ("HGET h huge", "\"1e308\""),
        ("HINCRBYFLOAT h fl", &arity("hincrbyfloat")),
        ("HINCRBYFLOAT fresh f 1", "\"1\""),
        ("HGETALL fresh", "[\"f\", \"1\"]"),
    ]);
    // Failed increments create nothing.
    c.script(&[
        ("HINCRBY nokey f x", NOT_INT),
        ("HINCRBYFLOAT nokey f x", NOT_FLOAT),
        ("EXISTS nokey", "(integer) 0"),
    ]);
    server.shutdown().unwrap();
}

/// Every hash command against `key`, which holds something else.
fn wrong_type_cases(key: &str) -> Vec<(String, String)> {
    [
        "HSET {} f v",
        "HMSET {} f v",
        "HSETNX {} f v",
        "HGET {} f",
        "HMGET {} f g",
        "HDEL {} f",
        "HGETALL {}",
        "HKEYS {}",
        "HVALS {}",
        "HLEN {}",
        "HEXISTS {} f",
        "HSTRLEN {} f",
        "HINCRBY {} f 1",
        "HINCRBYFLOAT {} f 1",
        "HSCAN {} 0",
        "HSCAN {} 0 BADOPTION",
        "HRANDFIELD {}",
        "HRANDFIELD {} 0",
        "HRANDFIELD {} 3 WITHVALUES",
        "HRANDFIELD {} -3",
    ]
    .iter()
    .map(|t| (t.replace("{}", key), WRONGTYPE.to_string()))
    .collect()
}

fn run(c: &mut Client, cases: &[(String, String)]) {
    for (command, expected) in cases {
        assert_eq!(&c.call(command), expected, "reply to `{command}`");
    }
}

#[test]
fn wrong_type() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SADD s m", "(integer) 1"),
        ("RPUSH l x", "(integer) 1"),
        ("ZADD z 1 m", "(integer) 1"),
    ]);
    c.script(&[
        ("TYPE s", "set"),
        ("TYPE l", "list"),
        ("TYPE z", "zset"),
        ("SET str v", "OK"),
    ]);
    for key in ["str", "s", "l", "z"] {
        run(&mut c, &wrong_type_cases(key));
    }
    // The other values are untouched.
    c.script(&[
        ("GET str", "\"v\""),
        ("TYPE s", "set"),
        ("TYPE l", "list"),
        ("TYPE z", "zset"),
        ("DBSIZE", "(integer) 4"),
        // And a hash is the wrong type for string commands.
        ("HSET h f v", "(integer) 1"),
        ("GET h", WRONGTYPE),
        ("INCR h", WRONGTYPE),
        ("SET h x", "OK"),
        ("TYPE h", "string"),
        ("HGET h f", WRONGTYPE),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn del_expire_and_type() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("HSET h a 1 b 2", "(integer) 2"),
        ("EXISTS h", "(integer) 1"),
        ("DEL h", "(integer) 1"),
        ("EXISTS h", "(integer) 0"),
        ("HGET h a", "(nil)"),
        ("HSET h a 1 b 2", "(integer) 2"),
        ("EXPIRE h 100", "(integer) 1"),
        ("TTL h", "(integer) 100"),
        // Writes keep the TTL, as in Redis.
        ("HSET h c 3", "(integer) 1"),
        ("HINCRBY h a 1", "(integer) 2"),
        ("HDEL h b", "(integer) 1"),
        ("TTL h", "(integer) 100"),
        ("PERSIST h", "(integer) 1"),
        ("TTL h", "(integer) -1"),
        ("PEXPIRE h 50", "(integer) 1"),
    ]);
    std::thread::sleep(Duration::from_millis(200));
    c.script(&[
        ("HGET h a", "(nil)"),
        ("HLEN h", "(integer) 0"),
        ("EXISTS h", "(integer) 0"),
        // A write to an expired hash starts a new one.
        ("HSET h z 26", "(integer) 1"),
        ("HGETALL h", "[\"z\", \"26\"]"),
        ("TTL h", "(integer) -1"),
        ("RENAME h h2", "OK"),
        ("HGET h2 z", "\"26\""),
        ("HGET h z", "(nil)"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn hscan() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("HSCAN nokey 0", "[\"0\", []]"),
        // Options are only looked at for a hash, as in Redis.
        ("HSCAN nokey 0 BADOPTION", "[\"0\", []]"),
        ("HSCAN nokey x", "(error) ERR invalid cursor"),
        ("HSCAN nokey \\s1", "(error) ERR invalid cursor"),
        ("HSCAN nokey 1x", "(error) ERR invalid cursor"),
        ("HSCAN nokey", &arity("hscan")),
        ("HSET small a 1", "(integer) 1"),
        ("HSCAN small 0", "[\"0\", [\"a\", \"1\"]]"),
        ("HSCAN small 0 NOVALUES", "[\"0\", [\"a\"]]"),
        ("HSCAN small 0 MATCH b*", "[\"0\", []]"),
        ("HSCAN small 0 MATCH * COUNT 5", "[\"0\", [\"a\", \"1\"]]"),
        ("HSCAN small 0 COUNT 0", SYNTAX),
        ("HSCAN small 0 COUNT -1", SYNTAX),
        ("HSCAN small 0 COUNT x", NOT_INT),
        ("HSCAN small 0 COUNT", SYNTAX),
        ("HSCAN small 0 MATCH", SYNTAX),
        ("HSCAN small 0 TYPE hash", SYNTAX),
        ("HSCAN small 0 FOO bar", SYNTAX),
        ("HSCAN small 18446744073709551615", "[\"0\", []]"),
        (
            "HSCAN small 18446744073709551616",
            "(error) ERR invalid cursor",
        ),
    ]);
    let mut model = BTreeMap::new();
    let mut args = vec!["HSET".to_string(), "big".to_string()];
    for i in 0..500 {
        let (field, value) = (format!("field:{i}"), format!("value:{}", i * 7));
        args.push(field.clone());
        args.push(value.clone());
        model.insert(field, value);
    }
    assert_eq!(c.call(&args.join(" ")), "(integer) 500");
    for (count, pattern, values) in [
        (7, None, true),
        (100, None, false),
        (10, Some("field:1*"), true),
    ] {
        let mut seen = BTreeMap::new();
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let mut command = format!("HSCAN big {cursor} COUNT {count}");
            if let Some(p) = pattern {
                command.push_str(&format!(" MATCH {p}"));
            }
            if !values {
                command.push_str(" NOVALUES");
            }
            let reply = c.call(&command);
            let (head, body) = reply[1..reply.len() - 1].split_once(", ").unwrap();
            let body = items(body);
            calls += 1;
            if values {
                assert_eq!(body.len() % 2, 0);
                for pair in body.chunks(2) {
                    let field: String = serde_unquote(&pair[0]);
                    assert!(seen.insert(field, serde_unquote(&pair[1])).is_none());
                }
            } else {
                for field in body {
                    assert!(seen.insert(serde_unquote(&field), String::new()).is_none());
                }
            }
            cursor = serde_unquote(head);
            if cursor == "0" {
                break;
            }
        }
        let expected: BTreeMap<String, String> = model
            .iter()
            .filter(|(f, _)| pattern.is_none_or(|_| f.starts_with("field:1")))
            .map(|(f, v)| (f.clone(), if values { v.clone() } else { String::new() }))
            .collect();
        assert_eq!(seen, expected, "count {count}, pattern {pattern:?}");
        assert!(calls >= 500 / count, "{calls} calls for count {count}");
    }
    server.shutdown().unwrap();
}

/// `"abc"` -> `abc` (the test client quotes bulk strings with `{:?}`).
fn serde_unquote(text: &str) -> String {
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or_else(|| panic!("not a bulk string: {text}"))
        .to_string()
}

#[test]
fn hrandfield() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("HRANDFIELD nokey", "(nil)"),
        ("HRANDFIELD nokey 5", "[]"),
        ("HRANDFIELD nokey -5 WITHVALUES", "[]"),
        ("HRANDFIELD nokey 5 WITHVALUE", SYNTAX),
        ("HRANDFIELD nokey 5 WITHVALUES x", SYNTAX),
        ("HRANDFIELD nokey x", NOT_INT),
        ("HRANDFIELD", &arity("hrandfield")),
        ("HSET h a 1 b 2 c 3 d 4 e 5", "(integer) 5"),
        ("HRANDFIELD h 0", "[]"),
        ("HRANDFIELD h 0 WITHVALUES", "[]"),
        (
            "HRANDFIELD h -9223372036854770000 WITHVALUES",
            "(error) ERR value is out of range",
        ),
        (
            "HRANDFIELD h -9223372036854775808 WITHVALUES",
            "(error) ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ),
        (
            "HRANDFIELD h -9223372036854775808",
            "(error) ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ),
        (
            "HRANDFIELD h 9223372036854775807 WITHVALUES",
            "(error) ERR value is out of range",
        ),
    ]);
    let all: BTreeMap<String, String> = ["a", "b", "c", "d", "e"]
        .iter()
        .zip(1..)
        .map(|(f, v)| (format!("{f:?}"), format!("\"{v}\"")))
        .collect();
    let mut singles = BTreeSet::new();
    for _ in 0..200 {
        let field = c.call("HRANDFIELD h");
        assert!(all.contains_key(&field), "{field}");
        singles.insert(field);
    }
    assert_eq!(singles.len(), 5, "200 picks should reach all 5 fields");
    // Positive counts: distinct fields, at most the hash's size.
    for count in 1..=7 {
        let fields = items(&c.call(&format!("HRANDFIELD h {count}")));
        assert_eq!(fields.len(), count.min(5));
        let distinct: BTreeSet<&String> = fields.iter().collect();
        assert_eq!(distinct.len(), fields.len());
        assert!(fields.iter().all(|f| all.contains_key(f)));
        let pairs = items(&c.call(&format!("HRANDFIELD h {count} WITHVALUES")));
        assert_eq!(pairs.len(), 2 * count.min(5));
        for pair in pairs.chunks(2) {
            assert_eq!(all[&pair[0]], pair[1]);
        }
    }
    // Every subset size 1..4 should be random, not always the same fields.
    let mut subsets = BTreeSet::new();
    for _ in 0..50 {
        let mut fields = items(&c.call("HRANDFIELD h 2"));
        fields.sort();
        subsets.insert(fields);
    }
    assert!(subsets.len() > 3, "{subsets:?}");
    // Negative counts: exactly that many, repeats allowed.
    let fields = items(&c.call("HRANDFIELD h -50"));
    assert_eq!(fields.len(), 50);
    assert!(fields.iter().all(|f| all.contains_key(f)));
    let distinct: BTreeSet<&String> = fields.iter().collect();
    assert!(distinct.len() > 1);
    let pairs = items(&c.call("HRANDFIELD h -20 WITHVALUES"));
    assert_eq!(pairs.len(), 40);
    for pair in pairs.chunks(2) {
        assert_eq!(all[&pair[0]], pair[1]);
    }
    // A larger hash, to exercise sampling of distinct fields.
    let mut args = vec!["HSET".to_string(), "big".to_string()];
    for i in 0..300 {
        args.push(format!("f{i}"));
        args.push(format!("v{i}"));
    }
    assert_eq!(c.call(&args.join(" ")), "(integer) 300");
    for count in [1, 10, 99, 100, 150, 299, 300, 1000] {
        let pairs = items(&c.call(&format!("HRANDFIELD big {count} WITHVALUES")));
        assert_eq!(pairs.len(), 2 * count.min(300));
        let mut fields = BTreeSet::new();
        for pair in pairs.chunks(2) {
            let (f, v) = (serde_unquote(&pair[0]), serde_unquote(&pair[1]));
            assert_eq!(f[1..], v[1..]);
            assert!(fields.insert(f));
        }
    }
    server.shutdown().unwrap();
}

#[test]
fn resp3_shapes() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.call("HELLO 3");
    c.script(&[
        ("HSET h a 1", "(integer) 1"),
        ("HGET h nope", "(nil)"),
        ("HRANDFIELD nokey", "(nil)"),
        ("HINCRBYFLOAT h x 1.5", "\"1.5\""),
        ("HMGET h a nope", "[\"1\", (nil)]"),
    ]);
    let raw = |c: &mut Client, words: &[&str]| -> String {
        c.send(&words.join(" "));
        c.line()
    };
    // HGETALL is a map in RESP3, even when empty.
    assert_eq!(raw(&mut c, &["HGETALL", "h"]), "%2");
    let rest: Vec<String> = (0..4).map(|_| c.reply()).collect();
    let mut pairs: Vec<(String, String)> = rest
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    pairs.sort();
    assert_eq!(
        pairs,
        vec![
            ("\"a\"".to_string(), "\"1\"".to_string()),
            ("\"x\"".to_string(), "\"1.5\"".to_string())
        ]
    );
    assert_eq!(raw(&mut c, &["HGETALL", "nokey"]), "%0");
    // HKEYS and HVALS stay arrays; the missing-key HRANDFIELD with a count
    // is an empty array; HGET's miss is a RESP3 null.
    assert_eq!(raw(&mut c, &["HKEYS", "nokey"]), "*0");
    assert_eq!(raw(&mut c, &["HVALS", "nokey"]), "*0");
    assert_eq!(raw(&mut c, &["HRANDFIELD", "nokey", "3"]), "*0");
    assert_eq!(raw(&mut c, &["HRANDFIELD", "h", "0"]), "*0");
    assert_eq!(raw(&mut c, &["HGET", "h", "nope"]), "_");
    assert_eq!(raw(&mut c, &["HRANDFIELD", "nokey"]), "_");
    // HRANDFIELD WITHVALUES: an array of [field, value] pairs in RESP3.
    for count in ["2", "-3"] {
        let n: usize = count.trim_start_matches('-').parse().unwrap();
        assert_eq!(
            raw(&mut c, &["HRANDFIELD", "h", count, "WITHVALUES"]),
            format!("*{n}")
        );
        for _ in 0..n {
            let pair = items(&c.reply());
            assert_eq!(pair.len(), 2);
            let expected = if pair[0] == "\"a\"" {
                "\"1\""
            } else {
                "\"1.5\""
            };
            assert_eq!(pair[1], expected);
        }
    }
    // HSCAN stays a flat array; HINCRBYFLOAT a bulk string.
    assert_eq!(raw(&mut c, &["HSCAN", "h", "0", "MATCH", "a"]), "*2");
    assert_eq!(c.reply(), "\"0\"");
    assert_eq!(c.reply(), "[\"a\", \"1\"]");
    assert_eq!(raw(&mut c, &["HINCRBYFLOAT", "h", "x", "1"]), "$3");
    assert_eq!(c.line(), "2.5");
    // The same in RESP2.
    c.call("HELLO 2");
    assert_eq!(raw(&mut c, &["HGETALL", "h"]), "*4");
    for _ in 0..4 {
        c.reply();
    }
    assert_eq!(raw(&mut c, &["HGETALL", "nokey"]), "*0");
    assert_eq!(raw(&mut c, &["HGET", "h", "nope"]), "$-1");
    assert_eq!(raw(&mut c, &["HRANDFIELD", "h", "-3", "WITHVALUES"]), "*6");
    for _ in 0..6 {
        assert!(c.reply().starts_with('"'));
    }
    server.shutdown().unwrap();
}

#[test]
fn transactions() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("MULTI", "OK"),
        ("HSET h a 1 b 2", "QUEUED"),
        ("HGET h a", "QUEUED"),
        ("HINCRBY h a 10", "QUEUED"),
        ("HSTRLEN h a", "QUEUED"),
        ("HINCRBY h b x", "QUEUED"),
        ("HDEL h b", "QUEUED"),
        ("HLEN h", "QUEUED"),
        ("HSETNX h a 5", "QUEUED"),
        ("HINCRBYFLOAT h f 0.5", "QUEUED"),
        ("HMGET h a b f", "QUEUED"),
        (
            "EXEC",
            "[(integer) 2, \"1\", (integer) 11, (integer) 2, \
             (error) ERR value is not an integer or out of range, (integer) 1, (integer) 1, \
             (integer) 0, \"0.5\", [\"11\", (nil), \"0.5\"]]",
        ),
        ("HGET h a", "\"11\""),
        ("HLEN h", "(integer) 2"),
    ]);
    // HKEYS's order is the hash's: compare sorted.
    let mut fields = items(&c.call("HKEYS h"));
    fields.sort();
    assert_eq!(fields, vec!["\"a\"", "\"f\""]);
    // Emptying a hash inside a transaction removes it for later commands.
    c.script(&[
        ("MULTI", "OK"),
        ("HDEL h a f", "QUEUED"),
        ("EXISTS h", "QUEUED"),
        ("HGET h a", "QUEUED"),
        ("HSET h a again", "QUEUED"),
        ("EXEC", "[(integer) 2, (integer) 0, (nil), (integer) 1]"),
        ("HGETALL h", "[\"a\", \"again\"]"),
        // HSET's count inside a transaction: fields new to the hash as the
        // transaction left it, each counted once.
        ("MULTI", "OK"),
        ("HSET h a 1 z 1 z 2", "QUEUED"),
        ("HSET h z 3 y 1", "QUEUED"),
        ("EXEC", "[(integer) 1, (integer) 1]"),
        ("HMGET h a z y", "[\"1\", \"3\", \"1\"]"),
        ("HDEL h z y", "(integer) 2"),
        // A queued command with the wrong arity fails the transaction.
        ("MULTI", "OK"),
        ("HSET h b 2", "QUEUED"),
        ("HSET h b", &arity("hset")),
        (
            "EXEC",
            "(error) EXECABORT Transaction discarded because of previous errors.",
        ),
        ("HEXISTS h b", "(integer) 0"),
        // WRONGTYPE inside EXEC is that command's reply only.
        ("SET s v", "OK"),
        ("MULTI", "OK"),
        ("HSET s f v", "QUEUED"),
        ("HSET h b 2", "QUEUED"),
        ("EXEC", &format!("[{WRONGTYPE}, (integer) 1]")),
        ("HGET h b", "\"2\""),
    ]);
    // WATCH: a hash changed by another client aborts the transaction.
    let mut other = Client::connect(&server);
    c.script(&[("WATCH h", "OK"), ("MULTI", "OK"), ("HSET h c 3", "QUEUED")]);
    other.script(&[("HINCRBY h x 1", "(integer) 1")]);
    c.script(&[("EXEC", "(nil array)"), ("HEXISTS h c", "(integer) 0")]);
    // ... and an unchanged one does not (HDEL of an absent field changes nothing).
    c.script(&[("WATCH h", "OK"), ("MULTI", "OK"), ("HSET h c 3", "QUEUED")]);
    other.script(&[("HDEL h nope", "(integer) 0"), ("HGET h c", "(nil)")]);
    c.script(&[("EXEC", "[(integer) 1]"), ("HGET h c", "\"3\"")]);
    // HSET of the value already there still counts as a change (as in
    // Redis); HSETNX of a present field does not.
    c.script(&[("WATCH h", "OK"), ("MULTI", "OK"), ("HSET h d 4", "QUEUED")]);
    other.script(&[("HSETNX h c 9", "(integer) 0"), ("HGET h c", "\"3\"")]);
    c.script(&[("EXEC", "[(integer) 1]")]);
    c.script(&[("WATCH h", "OK"), ("MULTI", "OK"), ("HSET h e 5", "QUEUED")]);
    other.script(&[("HSET h c 3", "(integer) 0")]);
    c.script(&[("EXEC", "(nil array)"), ("HEXISTS h e", "(integer) 0")]);
    server.shutdown().unwrap();
}

#[test]
fn survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || common::config_in(dir.path());
    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    let mut args = vec!["HSET".to_string(), "big".to_string()];
    for i in 0..1000 {
        args.push(format!("f{i}"));
        args.push(format!("v{i}"));
    }
    assert_eq!(c.call(&args.join(" ")), "(integer) 1000");
    c.script(&[
        ("HSET h a 1 b 2 c 3", "(integer) 3"),
        ("HINCRBY h a 41", "(integer) 42"),
        ("HINCRBYFLOAT h f 1.25", "\"1.25\""),
        ("HDEL h b", "(integer) 1"),
        ("HSETNX h c 99", "(integer) 0"),
        ("HMSET h d 4", "OK"),
        ("HSET gone x 1", "(integer) 1"),
        ("HDEL gone x", "(integer) 1"),
        ("HSET ttl x 1", "(integer) 1"),
        ("EXPIRE ttl 1000", "(integer) 1"),
        ("SELECT 3", "OK"),
        ("HSET h other db", "(integer) 1"),
        ("SELECT 0", "OK"),
        ("HDEL big f0 f1 f2", "(integer) 3"),
    ]);
    let before_big = sorted_pairs(&c.call("HGETALL big"));
    let before_h = sorted_pairs(&c.call("HGETALL h"));
    assert_eq!(before_big.len(), 997);
    server.shutdown().unwrap();

    for round in 0..2 {
        let server = Server::start(config()).unwrap();
        let mut c = Client::connect(&server);
        assert_eq!(
            sorted_pairs(&c.call("HGETALL big")),
            before_big,
            "round {round}"
        );
        assert_eq!(
            sorted_pairs(&c.call("HGETALL h")),
            before_h,
            "round {round}"
        );
        c.script(&[
            ("HGET h a", "\"42\""),
            ("HGET h f", "\"1.25\""),
            ("HGET h c", "\"3\""),
            ("HEXISTS h b", "(integer) 0"),
            ("EXISTS gone", "(integer) 0"),
            ("TYPE big", "hash"),
            ("HLEN big", "(integer) 997"),
            ("HGET ttl x", "\"1\""),
            ("SELECT 3", "OK"),
            ("HGETALL h", "[\"other\", \"db\"]"),
            ("SELECT 0", "OK"),
            ("DBSIZE", "(integer) 3"),
        ]);
        let ttl: i64 = c.call("TTL ttl")[10..].parse().unwrap();
        assert!((990..=1000).contains(&ttl), "ttl {ttl}");
        // Take a checkpoint in the first round, so the second recovers from
        // an image as well as the log.
        if round == 0 {
            assert_eq!(c.call("SAVE"), "OK");
        }
        server.shutdown().unwrap();
    }
}

fn sorted_pairs(reply: &str) -> BTreeMap<String, String> {
    items(reply)
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

/// What the model expects a command to answer, in a form comparable to a
/// `redis::Value` (arrays whose order is the hash's are compared sorted).
#[derive(Debug, PartialEq)]
enum Reply {
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Ok,
    Array(Vec<Reply>),
    Error(String),
}

fn reply_of(result: redis::RedisResult<redis::Value>) -> Reply {
    match result {
        Err(e) => Reply::Error(format!(
            "{} {}",
            e.code().unwrap_or("?"),
            e.detail().unwrap_or("")
        )),
        Ok(value) => value_reply(value),
    }
}

fn value_reply(value: redis::Value) -> Reply {
    match value {
        redis::Value::Int(n) => Reply::Int(n),
        redis::Value::BulkString(b) => Reply::Bulk(b),
        redis::Value::Nil => Reply::Nil,
        redis::Value::Okay => Reply::Ok,
        redis::Value::Array(items) => Reply::Array(items.into_iter().map(value_reply).collect()),
        other => panic!("unexpected reply {other:?}"),
    }
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(text.as_bytes().to_vec())
}

#[test]
fn randomized_against_a_model() {
    let (server, _dir) = start();
    let mut con = common::redis_con(server.addr);
    let mut rng = StdRng::seed_from_u64(0x4a5b_6c7d);
    let mut model: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    let keys = ["h0", "h1", "h2"];
    let field = |rng: &mut StdRng| format!("f{}", rng.random_range(0..12));
    let value = |rng: &mut StdRng| -> String {
        match rng.random_range(0..4) {
            0 => rng.random_range(-100..100).to_string(),
            1 => format!("w{}", rng.random_range(0..50)),
            2 => String::new(),
            _ => rng.random_range(0..1_000_000).to_string(),
        }
    };
    for step in 0..1500 {
        let key = keys[rng.random_range(0..keys.len())].to_string();
        let hash = model.get(&key).cloned().unwrap_or_default();
        let mut args: Vec<String> = Vec::new();
        let expected: Reply;
        let sorted_compare;
        match rng.random_range(0..14) {
            0 | 1 => {
                let command = if rng.random_bool(0.8) {
                    "HSET"
                } else {
                    "HMSET"
                };
                args.push(command.into());
                args.push(key.clone());
                let mut new = BTreeSet::new();
                let entry = model.entry(key.clone()).or_default();
                for _ in 0..rng.random_range(1..4) {
                    let (f, v) = (field(&mut rng), value(&mut rng));
                    if !entry.contains_key(&f) {
                        new.insert(f.clone());
                    }
                    entry.insert(f.clone(), v.clone());
                    args.push(f);
                    args.push(v);
                }
                expected = if command == "HSET" {
                    Reply::Int(new.len() as i64)
                } else {
                    Reply::Ok
                };
                sorted_compare = false;
            }
            2 => {
                let (f, v) = (field(&mut rng), value(&mut rng));
                args = vec!["HSETNX".into(), key.clone(), f.clone(), v.clone()];
                expected = if hash.contains_key(&f) {
                    Reply::Int(0)
                } else {
                    model.entry(key.clone()).or_default().insert(f, v);
                    Reply::Int(1)
                };
                sorted_compare = false;
            }
            3 | 4 => {
                args = vec!["HDEL".into(), key.clone()];
                let mut deleted = 0;
                for _ in 0..rng.random_range(1..4) {
                    let f = field(&mut rng);
                    if let Some(h) = model.get_mut(&key) {
                        deleted += h.remove(&f).is_some() as i64;
                    }
                    args.push(f);
                }
                if model.get(&key).is_some_and(|h| h.is_empty()) {
                    model.remove(&key);
                }
                expected = Reply::Int(deleted);
                sorted_compare = false;
            }
            5 => {
                let f = field(&mut rng);
                args = vec!["HGET".into(), key.clone(), f.clone()];
                expected = hash.get(&f).map_or(Reply::Nil, |v| bulk(v));
                sorted_compare = false;
            }
            6 => {
                args = vec!["HMGET".into(), key.clone()];
                let mut replies = Vec::new();
                for _ in 0..rng.random_range(1..4) {
                    let f = field(&mut rng);
                    replies.push(hash.get(&f).map_or(Reply::Nil, |v| bulk(v)));
                    args.push(f);
                }
                expected = Reply::Array(replies);
                sorted_compare = false;
            }
            7 => {
                let f = field(&mut rng);
                match rng.random_range(0..3) {
                    0 => {
                        args = vec!["HLEN".into(), key.clone()];
                        expected = Reply::Int(hash.len() as i64);
                    }
                    1 => {
                        args = vec!["HEXISTS".into(), key.clone(), f.clone()];
                        expected = Reply::Int(hash.contains_key(&f) as i64);
                    }
                    _ => {
                        args = vec!["HSTRLEN".into(), key.clone(), f.clone()];
                        expected = Reply::Int(hash.get(&f).map_or(0, |v| v.len() as i64));
                    }
                }
                sorted_compare = false;
            }
            8 | 9 => {
                let f = field(&mut rng);
                let delta: i64 = rng.random_range(-1000..1000);
                args = vec!["HINCRBY".into(), key.clone(), f.clone(), delta.to_string()];
                // Redis's string2ll: no leading zeros, no '+', no "-0".
                let old = hash.get(&f).map_or(Some(0), |v| {
                    v.parse::<i64>().ok().filter(|n| n.to_string() == *v)
                });
                expected = match old {
                    Some(n) => {
                        let new = n + delta;
                        model
                            .entry(key.clone())
                            .or_default()
                            .insert(f, new.to_string());
                        Reply::Int(new)
                    }
                    None => Reply::Error("ERR hash value is not an integer".into()),
                };
                sorted_compare = false;
            }
            10 => {
                args = vec!["HGETALL".into(), key.clone()];
                let mut flat = Vec::new();
                for (f, v) in &hash {
                    flat.push(bulk(f));
                    flat.push(bulk(v));
                }
                expected = Reply::Array(flat);
                sorted_compare = true;
            }
            11 => {
                let keys_only = rng.random_bool(0.5);
                args = vec![
                    if keys_only { "HKEYS" } else { "HVALS" }.into(),
                    key.clone(),
                ];
                let list: Vec<Reply> = if keys_only {
                    hash.keys().map(|f| bulk(f)).collect()
                } else {
                    hash.values().map(|v| bulk(v)).collect()
                };
                expected = Reply::Array(list);
                sorted_compare = true;
            }
            12 => {
                // HRANDFIELD: checked against the model's contents.
                let count: i64 = rng.random_range(-15..15);
                let result = reply_of(
                    redis::cmd("HRANDFIELD")
                        .arg(&key)
                        .arg(count)
                        .arg("WITHVALUES")
                        .query(&mut con),
                );
                let Reply::Array(flat) = result else {
                    panic!("step {step}: HRANDFIELD replied {result:?}");
                };
                let want = if count < 0 {
                    if hash.is_empty() {
                        0
                    } else {
                        count.unsigned_abs() as usize
                    }
                } else {
                    (count as usize).min(hash.len())
                };
                assert_eq!(flat.len(), 2 * want, "step {step}");
                let mut seen = BTreeSet::new();
                for pair in flat.chunks(2) {
                    let (Reply::Bulk(f), Reply::Bulk(v)) = (&pair[0], &pair[1]) else {
                        panic!("step {step}: {pair:?}");
                    };
                    let f = String::from_utf8(f.clone()).unwrap();
                    assert_eq!(hash.get(&f).map(|v| v.as_bytes()), Some(&v[..]));
                    assert!(count < 0 || seen.insert(f), "step {step}: repeated field");
                }
                continue;
            }
            _ => {
                // A full HSCAN with a small COUNT.
                let mut cursor = "0".to_string();
                let mut seen = BTreeMap::new();
                loop {
                    let reply = reply_of(
                        redis::cmd("HSCAN")
                            .arg(&key)
                            .arg(&cursor)
                            .arg("COUNT")
                            .arg(3)
                            .query(&mut con),
                    );
                    let Reply::Array(mut parts) = reply else {
                        panic!("step {step}: HSCAN replied {reply:?}");
                    };
                    let Some(Reply::Array(flat)) = parts.pop() else {
                        panic!("step {step}");
                    };
                    let Some(Reply::Bulk(next)) = parts.pop() else {
                        panic!("step {step}");
                    };
                    for pair in flat.chunks(2) {
                        let (Reply::Bulk(f), Reply::Bulk(v)) = (&pair[0], &pair[1]) else {
                            panic!("step {step}: {pair:?}");
                        };
                        let f = String::from_utf8(f.clone()).unwrap();
                        let v = String::from_utf8(v.clone()).unwrap();
                        assert!(seen.insert(f, v).is_none(), "step {step}: repeated field");
                    }
                    cursor = String::from_utf8(next).unwrap();
                    if cursor == "0" {
                        break;
                    }
                }
                assert_eq!(seen, hash, "step {step}");
                continue;
            }
        }
        let mut cmd = redis::cmd(&args[0]);
        for arg in &args[1..] {
            cmd.arg(arg);
        }
        let mut got = reply_of(cmd.query(&mut con));
        let mut expected = expected;
        if sorted_compare {
            // The hash's order is its own: compare HGETALL as sorted pairs,
            // HKEYS and HVALS as sorted lists.
            let pairs = args[0] == "HGETALL";
            sort_reply(&mut got, pairs);
            sort_reply(&mut expected, pairs);
        }
        assert_eq!(got, expected, "step {step}: {args:?}");
        // Now and then, the whole key's state and its existence.
        if step % 50 == 0 {
            for key in keys {
                let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut con).unwrap();
                assert_eq!(exists == 1, model.contains_key(key), "step {step}: {key}");
                let len: i64 = redis::cmd("HLEN").arg(key).query(&mut con).unwrap();
                assert_eq!(len as usize, model.get(key).map_or(0, |h| h.len()));
            }
        }
    }
    // The final state, field by field.
    for key in keys {
        let got: BTreeMap<String, String> = redis::cmd("HGETALL").arg(key).query(&mut con).unwrap();
        assert_eq!(got, model.get(key).cloned().unwrap_or_default(), "{key}");
    }
    server.shutdown().unwrap();
}

fn sort_replies(items: &mut [Reply]) {
    items.sort_by_key(|r| format!("{r:?}"));
}

/// Sorts an array reply's items, or its (field, value) pairs.
fn sort_reply(reply: &mut Reply, pairs: bool) {
    let Reply::Array(items) = reply else {
        return;
    };
    if !pairs {
        sort_replies(items);
        return;
    }
    let mut chunks: Vec<Vec<Reply>> = Vec::new();
    let mut drain = std::mem::take(items).into_iter();
    while let (Some(f), Some(v)) = (drain.next(), drain.next()) {
        chunks.push(vec![f, v]);
    }
    chunks.sort_by_key(|p| format!("{p:?}"));
    *items = chunks.into_iter().flatten().collect();
}
