//! COMMAND's description of the commands against a real redis-server
//! 7.0.15 (on PATH): COMMAND INFO of every Engram command and subcommand
//! (arity, flags, key range, ACL categories, key specifications), COMMAND GETKEYSANDFLAGS's keys and
//! flags for calls of every shape of key spec, COMMAND LIST's subcommands
//! and its filters, and the subcommands' own COMMAND INFO.

mod common;

use common::{start, RedisServer};
use redis::{Connection, Value};

fn q(con: &mut Connection, words: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    cmd.query(con)
}

fn names(value: Value) -> Vec<String> {
    match value {
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::BulkString(bytes) => String::from_utf8(bytes).unwrap(),
                other => panic!("not a name: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

/// A reply without the "notes" entries of key specs (Redis's comments on
/// them, which Engram does not carry), flattened to text.
fn without_notes(value: &Value) -> String {
    match value {
        Value::Array(items) | Value::Set(items) => {
            let mut parts = Vec::new();
            let mut i = 0;
            while i < items.len() {
                if matches!(&items[i], Value::BulkString(b) if b == b"notes") {
                    i += 2;
                    continue;
                }
                parts.push(without_notes(&items[i]));
                i += 1;
            }
            format!("[{}]", parts.join(", "))
        }
        Value::Map(pairs) => {
            let parts: Vec<String> = pairs
                .iter()
                .filter(|(k, _)| !matches!(k, Value::BulkString(b) if b == b"notes"))
                .map(|(k, v)| format!("{}: {}", without_notes(k), without_notes(v)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        other => format!("{other:?}"),
    }
}

fn info(con: &mut Connection, name: &str) -> Vec<Value> {
    match q(con, &["COMMAND", "INFO", name]).unwrap() {
        Value::Array(mut items) => match items.remove(0) {
            Value::Array(fields) => fields,
            other => panic!("COMMAND INFO {name}: {other:?}"),
        },
        other => panic!("COMMAND INFO {name}: {other:?}"),
    }
}

#[test]
fn every_key_spec_is_redis_s() {
    let (engram, _dir) = start();
    let redis = RedisServer::start();
    let (mut e, mut r) = (common::redis_con(engram.addr), redis.con());
    let ours = names(q(&mut e, &["COMMAND", "LIST"]).unwrap());
    let theirs = names(q(&mut r, &["COMMAND", "LIST"]).unwrap());
    let mut compared = 0;
    for name in &ours {
        if !theirs.contains(name) {
            continue;
        }
        let (mine, redis_s) = (info(&mut e, name), info(&mut r, name));
        // Arity, flags, first key, last key, step, ACL categories, key
        // specs. (ZRANK and ZREVRANK take Redis 7.2's WITHSCORE here.)
        for field in 1..9 {
            if field == 1 && matches!(name.as_str(), "zrank" | "zrevrank") {
                assert_eq!(mine[1], Value::Int(-3), "arity of {name}");
                continue;
            }
            if field == 7 {
                continue; // tips: Engram gives none
            }
            assert_eq!(
                without_notes(&mine[field]),
                without_notes(&redis_s[field]),
                "field {field} of COMMAND INFO {name}"
            );
        }
        compared += 1;
    }
    // Every command but ENGRAM.SCRUB, and the subcommands.
    assert!(compared > 240, "compared only {compared}");
    let sub_count = ours.iter().filter(|n| n.contains('|')).count();
    assert!(sub_count > 50, "{sub_count} subcommands listed");
}

#[test]
fn getkeysandflags_like_redis() {
    let (engram, _dir) = start();
    let redis = RedisServer::start();
    let (mut e, mut r) = (common::redis_con(engram.addr), redis.con());
    let calls: &[&str] = &[
        // Redis's own suite's cases.
        "set k1 v1",
        "mset k1 v1 k2 v2",
        "LMOVE k1 k2 left right",
        "sort k1 store k2",
        // Variable flags, found by arguments.
        "set k v GET",
        "set k v EX 10",
        "bitfield k GET u8 0",
        "bitfield k GET u8 0 SET u8 0 1",
        "bitfield k INCRBY u8 0 1",
        "sort_ro k BY w*",
        "sort k LIMIT 0 1 GET g* STORE d",
        // Specs of every shape: keynum, keyword, ranges with steps.
        "zunionstore d 2 a b WEIGHTS 1 2",
        "zinter 2 a b",
        "lmpop 2 a b LEFT",
        "blmpop 0 2 a b LEFT",
        "georadius g 0 0 1 km STORE s",
        "georadius g 0 0 1 km STOREDIST s",
        "georadiusbymember g m 1 km STORE s",
        "geosearchstore d s FROMMEMBER m BYRADIUS 1 km",
        "blpop a b 0",
        "bitop AND d a b",
        "del a b",
        "rename a b",
        "copy a b",
        "smove a b m",
        "pfmerge d a b",
        "object encoding k",
        "memory usage k",
        "migrate h 1 k 0 100",
        "migrate h 1 \"\" 0 100 REPLACE KEYS a b",
        "restore k 0 payload",
        "getex k PERSIST",
        "msetnx a 1 b 2",
        "lcs a b",
        "expire k 10",
        "incr k",
        "hset h f v",
        "zrangestore d s 0 -1",
        "sintercard 2 a b",
        // Scripts name keys by count; none is an answer (no_mandatory_keys).
        "eval return 2 a b",
        "eval return 0",
        "fcall f 0",
        "evalsha_ro 0123 1 k",
        // Errors: no keys, wrong arity, keys named by no argument.
        "ping x",
        "get a b",
        "zunionstore d 3 a b",
        "memory stats",
        "memory nosuch k",
        "object nosuch k",
        "config get x",
    ];
    for call in calls {
        let mut words = vec!["COMMAND", "GETKEYSANDFLAGS"];
        words.extend(call.split(' ').map(|w| if w == "\"\"" { "" } else { w }));
        let render = |reply: redis::RedisResult<Value>| match reply {
            Ok(value) => without_notes(&value),
            Err(e) => format!("error {e}"),
        };
        let want = render(q(&mut r, &words));
        assert_eq!(render(q(&mut e, &words)), want, "GETKEYSANDFLAGS {call}");
        words[1] = "GETKEYS";
        let want = render(q(&mut r, &words));
        assert_eq!(render(q(&mut e, &words)), want, "GETKEYS {call}");
    }
}

#[test]
fn command_list_names_subcommands_like_redis() {
    let (engram, _dir) = start();
    let redis = RedisServer::start();
    let (mut e, mut r) = (common::redis_con(engram.addr), redis.con());
    let list = |con: &mut Connection, words: &[&str]| {
        let mut all = vec!["COMMAND", "LIST"];
        all.extend(words);
        let mut names = names(q(con, &all).unwrap());
        names.sort();
        names
    };
    let all = list(&mut e, &[]);
    for name in [
        "set",
        "client|list",
        "config|get",
        "memory|usage",
        "object|help",
        "client|tracking",
        "client|caching",
        "client|getredir",
        "client|trackinginfo",
    ] {
        assert!(
            all.contains(&name.to_string()),
            "{name} not in COMMAND LIST"
        );
    }
    // COUNT counts commands, not subcommands, as Redis's does.
    let count = q(&mut e, &["COMMAND", "COUNT"]).unwrap();
    let top = all.iter().filter(|n| !n.contains('|')).count();
    assert_eq!(count, Value::Int(top as i64));
    // Every name Engram lists that Redis has, Redis lists under the same
    // filters (patterns, categories, subcommands included).
    let theirs = list(&mut r, &[]);
    let filters: &[&[&str]] = &[
        &["FILTERBY", "PATTERN", "config*"],
        &["FILTERBY", "PATTERN", "config|*re*"],
        &["FILTERBY", "PATTERN", "CL*HELP"],
        &["FILTERBY", "PATTERN", "*|get*"],
        &["FILTERBY", "ACLCAT", "admin"],
        &["FILTERBY", "ACLCAT", "connection"],
        &["FILTERBY", "ACLCAT", "keyspace"],
        &["FILTERBY", "ACLCAT", "slow"],
        &["FILTERBY", "ACLCAT", "nosuch"],
        &["FILTERBY", "MODULE", "nosuch"],
    ];
    for filter in filters {
        let want: Vec<String> = list(&mut r, filter)
            .into_iter()
            .filter(|n| all.contains(n))
            .collect();
        let got: Vec<String> = list(&mut e, filter)
            .into_iter()
            .filter(|n| theirs.contains(n))
            .collect();
        assert_eq!(got, want, "COMMAND LIST {filter:?}");
    }
    assert_eq!(
        list(&mut e, &["FILTERBY", "PATTERN", "config|*re*"]),
        ["config|resetstat", "config|rewrite"]
    );
    // COMMAND INFO by a subcommand's name; unknown ones are null.
    let reply = q(
        &mut e,
        &["COMMAND", "INFO", "config|get", "get|key", "config|get|key"],
    )
    .unwrap();
    match reply {
        Value::Array(items) => {
            assert!(
                matches!(&items[0], Value::Array(f) if f[0] == Value::BulkString(b"config|get".to_vec()))
            );
            assert_eq!(items[1], Value::Nil);
            assert_eq!(items[2], Value::Nil);
        }
        other => panic!("{other:?}"),
    }
}
