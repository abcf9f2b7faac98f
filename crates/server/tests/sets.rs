//! The set commands over real TCP, as Redis 7.0 answers them: SADD SREM
//! SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SMOVE SINTER
//! SINTERCARD SUNION SDIFF SINTERSTORE SUNIONSTORE SDIFFSTORE SSCAN, their
//! errors, RESP3 replies, MULTI/EXEC, persistence across a restart, and a
//! randomized comparison against a model through the `redis` crate.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::time::Duration;

use common::{arity, start, Client, NOT_INT, SYNTAX, WRONGTYPE};
use engram_server::Server;
use rand::{Rng, SeedableRng};

/// The members of a flat array reply, sorted (set replies come in hash
/// order).
fn members(c: &mut Client, command: &str) -> Vec<String> {
    let reply = c.call(command);
    parse_list(&reply).unwrap_or_else(|| panic!("`{command}` replied {reply}"))
}

fn parse_list(reply: &str) -> Option<Vec<String>> {
    let inner = reply.strip_prefix('[')?.strip_suffix(']')?;
    if inner.is_empty() {
        return Some(Vec::new());
    }
    let mut items: Vec<String> = inner
        .split(", ")
        .map(|item| item.trim_matches('"').to_string())
        .collect();
    items.sort();
    Some(items)
}

fn strings(items: &[&str]) -> Vec<String> {
    let mut items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
    items.sort();
    items
}

/// Sends a command and returns the raw first line of its reply plus the
/// rendered elements of an aggregate (for checking RESP3 types).
fn raw(c: &mut Client, command: &str) -> (String, Vec<String>) {
    let words: Vec<&str> = command.split(' ').collect();
    let mut request = format!("*{}\r\n", words.len());
    for word in &words {
        request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
    }
    c.writer.write_all(request.as_bytes()).unwrap();
    let head = c.line();
    let n = match head.as_bytes()[0] {
        b'*' | b'~' => head[1..].parse::<i64>().unwrap().max(0) as usize,
        _ => 0,
    };
    let rest = (0..n).map(|_| c.reply()).collect();
    (head, rest)
}

#[test]
fn add_remove_count_and_membership() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SCARD s", "(integer) 0"),
        ("SMEMBERS s", "[]"),
        ("SISMEMBER s a", "(integer) 0"),
        ("SMISMEMBER s a b", "[(integer) 0, (integer) 0]"),
        ("SADD s a", "(integer) 1"),
        ("SADD s a b c", "(integer) 2"),
        ("SADD s a b c", "(integer) 0"),
        ("SADD s d d d", "(integer) 1"),
        // More members than a scan dedupes: repeats counted once.
        ("SADD big 1 2 3 4 5 6 7 8 9 1 2 3 10 9", "(integer) 10"),
        ("SREM big 1 1 2 3 4 5 6 7 8 9 9 11", "(integer) 9"),
        ("SCARD big", "(integer) 1"),
        ("DEL big", "(integer) 1"),
        ("SADD s \"\"", "(integer) 1"),
        ("SCARD s", "(integer) 5"),
        ("SISMEMBER s a", "(integer) 1"),
        ("SISMEMBER s \"\"", "(integer) 1"),
        ("SISMEMBER s z", "(integer) 0"),
        (
            "SMISMEMBER s a z d",
            "[(integer) 1, (integer) 0, (integer) 1]",
        ),
        ("SREM s z", "(integer) 0"),
        ("SREM s a a b z", "(integer) 2"),
        ("SREM nope a", "(integer) 0"),
        ("TYPE s", "set"),
        ("OBJECT ENCODING s", "\"hashtable\""),
    ]);
    assert_eq!(members(&mut c, "SMEMBERS s"), strings(&["", "c", "d"]));
    c.script(&[
        ("SREM s c d \"\"", "(integer) 3"),
        ("EXISTS s", "(integer) 0"),
        ("TYPE s", "none"),
        ("SMEMBERS s", "[]"),
        ("SADD s x\\sy", "(integer) 1"),
        ("SISMEMBER s x\\sy", "(integer) 1"),
        ("DBSIZE", "(integer) 1"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn arity_syntax_and_wrongtype_errors() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SET str v", "OK"),
        ("HSET h f v", "(integer) 1"),
        ("SADD s a", "(integer) 1"),
    ]);
    for (command, name) in [
        ("SADD s", "sadd"),
        ("SREM s", "srem"),
        ("SMEMBERS", "smembers"),
        ("SMEMBERS s t", "smembers"),
        ("SISMEMBER s", "sismember"),
        ("SISMEMBER s a b", "sismember"),
        ("SMISMEMBER s", "smismember"),
        ("SCARD", "scard"),
        ("SCARD s t", "scard"),
        ("SPOP", "spop"),
        ("SRANDMEMBER", "srandmember"),
        ("SMOVE s t", "smove"),
        ("SMOVE s t a b", "smove"),
        ("SINTER", "sinter"),
        ("SINTERCARD 1", "sintercard"),
        ("SUNION", "sunion"),
        ("SDIFF", "sdiff"),
        ("SINTERSTORE d", "sinterstore"),
        ("SUNIONSTORE d", "sunionstore"),
        ("SDIFFSTORE d", "sdiffstore"),
        ("SSCAN s", "sscan"),
    ] {
        assert_eq!(c.call(command), arity(name), "reply to `{command}`");
    }
    for key in ["str", "h"] {
        for command in [
            format!("SADD {key} a"),
            format!("SREM {key} a"),
            format!("SMEMBERS {key}"),
            format!("SISMEMBER {key} a"),
            format!("SMISMEMBER {key} a"),
            format!("SCARD {key}"),
            format!("SPOP {key}"),
            format!("SPOP {key} 2"),
            format!("SPOP {key} 0"),
            format!("SRANDMEMBER {key}"),
            format!("SRANDMEMBER {key} 2"),
            format!("SRANDMEMBER {key} 0"),
            format!("SRANDMEMBER {key} -2"),
            format!("SMOVE {key} s a"),
            format!("SMOVE s {key} a"),
            // The destination's type is checked even if the member is not there.
            format!("SMOVE s {key} nope"),
            format!("SINTER s {key}"),
            // Every key's type is checked, even after a missing key.
            format!("SINTER nope {key}"),
            format!("SINTERCARD 2 nope {key}"),
            format!("SUNION s {key}"),
            format!("SDIFF s {key}"),
            format!("SDIFF nope {key}"),
            format!("SINTERSTORE d nope {key}"),
            format!("SUNIONSTORE d s {key}"),
            format!("SDIFFSTORE d s {key}"),
            format!("SSCAN {key} 0"),
        ] {
            assert_eq!(c.call(&command), WRONGTYPE, "reply to `{command}`");
        }
    }
    c.script(&[
        // A missing source answers 0 before the destination is looked at.
        ("SMOVE nope str a", "(integer) 0"),
        // Nothing changed on the failed commands.
        ("GET str", "\"v\""),
        ("HGET h f", "\"v\""),
        ("SMEMBERS s", "[\"a\"]"),
        ("EXISTS d", "(integer) 0"),
        ("SPOP s 1 2", SYNTAX),
        ("SRANDMEMBER s 1 2", SYNTAX),
        ("SPOP s x", NOT_INT),
        ("SPOP s 1.5", NOT_INT),
        (
            "SPOP s -1",
            "(error) ERR value is out of range, must be positive",
        ),
        // The count is checked before the key.
        (
            "SPOP str -1",
            "(error) ERR value is out of range, must be positive",
        ),
        ("SRANDMEMBER s x", NOT_INT),
        (
            "SRANDMEMBER s -9223372036854775808",
            "(error) ERR value is out of range, value must between -9223372036854775807 and \
             9223372036854775807",
        ),
        (
            "SINTERCARD 0 s",
            "(error) ERR numkeys should be greater than 0",
        ),
        (
            "SINTERCARD -1 s",
            "(error) ERR numkeys should be greater than 0",
        ),
        (
            "SINTERCARD x s",
            "(error) ERR numkeys should be greater than 0",
        ),
        (
            "SINTERCARD 3 s t",
            "(error) ERR Number of keys can't be greater than number of args",
        ),
        ("SINTERCARD 1 s LIMIT", SYNTAX),
        ("SINTERCARD 1 s FOO 1", SYNTAX),
        (
            "SINTERCARD 1 s LIMIT -1",
            "(error) ERR LIMIT can't be negative",
        ),
        (
            "SINTERCARD 1 s LIMIT x",
            "(error) ERR LIMIT can't be negative",
        ),
        ("SSCAN s x", "(error) ERR invalid cursor"),
        ("SSCAN s 1x", "(error) ERR invalid cursor"),
        ("SSCAN s \\s1", "(error) ERR invalid cursor"),
        ("SSCAN s -", "(error) ERR invalid cursor"),
        ("SSCAN s 18446744073709551616", "(error) ERR invalid cursor"),
        ("SSCAN str x", "(error) ERR invalid cursor"),
        ("SSCAN s 0 COUNT 0", SYNTAX),
        ("SSCAN s 0 COUNT -3", SYNTAX),
        ("SSCAN s 0 COUNT x", NOT_INT),
        ("SSCAN s 0 COUNT", SYNTAX),
        ("SSCAN s 0 MATCH", SYNTAX),
        ("SSCAN s 0 FOO bar", SYNTAX),
        // Redis answers a missing key before reading the options.
        ("SSCAN nope 0 COUNT 0", "[\"0\", []]"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn spop_and_srandmember() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    let all = strings(&["a", "b", "c", "d", "e"]);
    c.script(&[
        ("SPOP nope", "(nil)"),
        ("SPOP nope 3", "[]"),
        ("SPOP nope 0", "[]"),
        ("SRANDMEMBER nope", "(nil)"),
        ("SRANDMEMBER nope 3", "[]"),
        ("SRANDMEMBER nope -3", "[]"),
        // A huge negative count on a missing key is just an empty reply.
        ("SRANDMEMBER nope -9223372036854775807", "[]"),
        ("SADD s a b c d e", "(integer) 5"),
        ("SRANDMEMBER s 0", "[]"),
        ("SPOP s 0", "[]"),
        ("SCARD s", "(integer) 5"),
    ]);
    // SRANDMEMBER: one member, distinct members up to the set, or repeats.
    for _ in 0..20 {
        let one = c.call("SRANDMEMBER s");
        assert!(all.contains(&one.trim_matches('"').to_string()), "{one}");
        let three = members(&mut c, "SRANDMEMBER s 3");
        assert_eq!(three.len(), 3);
        assert_eq!(three.iter().collect::<HashSet<_>>().len(), 3, "{three:?}");
        assert!(three.iter().all(|m| all.contains(m)));
        assert_eq!(members(&mut c, "SRANDMEMBER s 5"), all);
        assert_eq!(members(&mut c, "SRANDMEMBER s 100"), all);
        let repeats = members(&mut c, "SRANDMEMBER s -20");
        assert_eq!(repeats.len(), 20);
        assert!(repeats.iter().all(|m| all.contains(m)));
    }
    // Negative counts do repeat members.
    let many = members(&mut c, "SRANDMEMBER s -200");
    assert!(many.iter().collect::<HashSet<_>>().len() < 200);
    c.script(&[
        ("SCARD s", "(integer) 5"),
        (
            "SRANDMEMBER s -9223372036854775807",
            "(error) ERR SRANDMEMBER count is too large: the reply would exceed 512 MB",
        ),
    ]);

    // SPOP removes what it returns.
    let mut left: BTreeSet<String> = all.iter().cloned().collect();
    let one = c.call("SPOP s");
    assert!(left.remove(one.trim_matches('"')), "{one}");
    let two = members(&mut c, "SPOP s 2");
    assert_eq!(two.len(), 2);
    for m in &two {
        assert!(left.remove(m), "{m} popped twice or never there");
    }
    assert_eq!(
        members(&mut c, "SMEMBERS s"),
        left.iter().cloned().collect::<Vec<_>>()
    );
    // A count of at least the size pops everything and deletes the key.
    assert_eq!(
        members(&mut c, "SPOP s 10"),
        left.iter().cloned().collect::<Vec<_>>()
    );
    c.script(&[
        ("EXISTS s", "(integer) 0"),
        ("SADD t x", "(integer) 1"),
        ("SPOP t", "\"x\""),
        ("EXISTS t", "(integer) 0"),
        ("SADD u x y", "(integer) 2"),
    ]);
    assert_eq!(members(&mut c, "SPOP u 2"), strings(&["x", "y"]));
    c.script(&[("EXISTS u", "(integer) 0"), ("DBSIZE", "(integer) 0")]);

    // Larger sets: many pops, no repeats, all accounted for.
    let big: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
    assert_eq!(
        c.call(&format!("SADD big {}", big.join(" "))),
        "(integer) 300"
    );
    let sample = members(&mut c, "SRANDMEMBER big 250");
    assert_eq!(sample.iter().collect::<HashSet<_>>().len(), 250);
    let mut popped: Vec<String> = members(&mut c, "SPOP big 120");
    popped.extend(members(&mut c, "SPOP big 179"));
    assert_eq!(c.call("SCARD big"), "(integer) 1");
    popped.push(c.call("SPOP big").trim_matches('"').to_string());
    popped.sort();
    let mut expected = big.clone();
    expected.sort();
    assert_eq!(popped, expected);
    c.script(&[("EXISTS big", "(integer) 0")]);
    server.shutdown().unwrap();
}

#[test]
fn smove() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SADD src a b", "(integer) 2"),
        ("SADD dst c", "(integer) 1"),
        ("SMOVE src dst a", "(integer) 1"),
        ("SMOVE src dst a", "(integer) 0"),
        ("SMOVE src dst zz", "(integer) 0"),
        ("SMOVE nope dst a", "(integer) 0"),
        ("SISMEMBER src a", "(integer) 0"),
        ("SISMEMBER dst a", "(integer) 1"),
        // Same source and destination: 1 if a member, nothing changes.
        ("SMOVE src src b", "(integer) 1"),
        ("SMOVE src src zz", "(integer) 0"),
        ("SMEMBERS src", "[\"b\"]"),
        // Moving a member the destination already holds only removes it.
        ("SADD dst b", "(integer) 1"),
        ("SMOVE src dst b", "(integer) 1"),
        ("EXISTS src", "(integer) 0"),
        ("SCARD dst", "(integer) 3"),
        // Creates the destination.
        ("SMOVE dst fresh c", "(integer) 1"),
        ("SMEMBERS fresh", "[\"c\"]"),
        ("TYPE fresh", "set"),
        ("EXPIRE dst 100", "(integer) 1"),
        ("SMOVE fresh dst c", "(integer) 1"),
        ("EXISTS fresh", "(integer) 0"),
        ("TTL dst", "(integer) 100"),
        ("SCARD dst", "(integer) 3"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn intersection_union_difference_and_stores() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SADD a 1 2 3 4 5", "(integer) 5"),
        ("SADD b 2 3 4 6", "(integer) 4"),
        ("SADD c 3 4 7", "(integer) 3"),
    ]);
    assert_eq!(members(&mut c, "SINTER a b c"), strings(&["3", "4"]));
    assert_eq!(members(&mut c, "SINTER a b"), strings(&["2", "3", "4"]));
    assert_eq!(
        members(&mut c, "SINTER a"),
        strings(&["1", "2", "3", "4", "5"])
    );
    assert_eq!(members(&mut c, "SINTER a a b b"), strings(&["2", "3", "4"]));
    assert_eq!(members(&mut c, "SINTER a b nope"), strings(&[]));
    assert_eq!(members(&mut c, "SINTER nope"), strings(&[]));
    assert_eq!(
        members(&mut c, "SUNION a b c"),
        strings(&["1", "2", "3", "4", "5", "6", "7"])
    );
    assert_eq!(
        members(&mut c, "SUNION nope c nope"),
        strings(&["3", "4", "7"])
    );
    assert_eq!(members(&mut c, "SUNION nope"), strings(&[]));
    assert_eq!(members(&mut c, "SDIFF a b"), strings(&["1", "5"]));
    assert_eq!(members(&mut c, "SDIFF a b c"), strings(&["1", "5"]));
    assert_eq!(members(&mut c, "SDIFF b a"), strings(&["6"]));
    assert_eq!(
        members(&mut c, "SDIFF a nope"),
        strings(&["1", "2", "3", "4", "5"])
    );
    assert_eq!(
        members(&mut c, "SDIFF a"),
        strings(&["1", "2", "3", "4", "5"])
    );
    assert_eq!(members(&mut c, "SDIFF nope a"), strings(&[]));
    assert_eq!(members(&mut c, "SDIFF a c a"), strings(&[]));
    c.script(&[
        ("SINTERCARD 3 a b c", "(integer) 2"),
        ("SINTERCARD 2 a b", "(integer) 3"),
        ("SINTERCARD 2 a b LIMIT 0", "(integer) 3"),
        ("SINTERCARD 2 a b LIMIT 2", "(integer) 2"),
        ("SINTERCARD 2 a b LIMIT 10", "(integer) 3"),
        ("SINTERCARD 2 a b LIMIT 1 limit 5", "(integer) 3"),
        ("SINTERCARD 2 a nope", "(integer) 0"),
        ("SINTERCARD 1 a", "(integer) 5"),
        // Stores: the reply is the result's size.
        ("SINTERSTORE d a b c", "(integer) 2"),
        ("TYPE d", "set"),
    ]);
    assert_eq!(members(&mut c, "SMEMBERS d"), strings(&["3", "4"]));
    c.script(&[
        ("SUNIONSTORE d a c", "(integer) 6"),
        ("SCARD d", "(integer) 6"),
        ("SDIFFSTORE d a b", "(integer) 2"),
    ]);
    assert_eq!(members(&mut c, "SMEMBERS d"), strings(&["1", "5"]));
    // The destination may be a source.
    c.script(&[("SUNIONSTORE d d c", "(integer) 5")]);
    assert_eq!(
        members(&mut c, "SMEMBERS d"),
        strings(&["1", "3", "4", "5", "7"])
    );
    c.script(&[("SINTERSTORE d d a", "(integer) 4")]);
    assert_eq!(
        members(&mut c, "SMEMBERS d"),
        strings(&["1", "3", "4", "5"])
    );
    c.script(&[("SDIFFSTORE d d c", "(integer) 2")]);
    assert_eq!(members(&mut c, "SMEMBERS d"), strings(&["1", "5"]));
    // An empty result deletes the destination, whatever it held.
    c.script(&[
        ("SINTERSTORE d a nope", "(integer) 0"),
        ("EXISTS d", "(integer) 0"),
        ("SADD d x", "(integer) 1"),
        ("SDIFFSTORE d a a", "(integer) 0"),
        ("EXISTS d", "(integer) 0"),
        ("SUNIONSTORE d nope", "(integer) 0"),
        ("EXISTS d", "(integer) 0"),
        ("SET d string", "OK"),
        ("SINTERSTORE d a nope", "(integer) 0"),
        ("EXISTS d", "(integer) 0"),
        ("GET d", "(nil)"),
        ("HSET d f v", "(integer) 1"),
        ("SDIFFSTORE d nope a", "(integer) 0"),
        ("EXISTS d", "(integer) 0"),
        // A result replaces a string, a hash, and any TTL.
        ("SET d string EX 100", "OK"),
        ("SUNIONSTORE d c", "(integer) 3"),
        ("TYPE d", "set"),
        ("TTL d", "(integer) -1"),
        ("HSET h f v", "(integer) 1"),
        ("SINTERSTORE h b c", "(integer) 2"),
        ("TYPE h", "set"),
        ("EXPIRE h 100", "(integer) 1"),
        ("SDIFFSTORE h a", "(integer) 5"),
        ("TTL h", "(integer) -1"),
        ("SCARD h", "(integer) 5"),
        ("DBSIZE", "(integer) 5"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn large_sets_across_chunks() {
    let (server, _dir) = start();
    let mut con = common::redis_con(server.addr);
    // a: 0..5000, b: even numbers below 8000, c: multiples of 3 below 3000.
    let a: BTreeSet<u32> = (0..5000).collect();
    let b: BTreeSet<u32> = (0..8000).filter(|n| n % 2 == 0).collect();
    let c: BTreeSet<u32> = (0..3000).filter(|n| n % 3 == 0).collect();
    for (key, set) in [("a", &a), ("b", &b), ("c", &c)] {
        let added: i64 = redis::cmd("SADD")
            .arg(key)
            .arg(set.iter().collect::<Vec<_>>())
            .query(&mut con)
            .unwrap();
        assert_eq!(added as usize, set.len());
    }
    let query = |con: &mut redis::Connection, args: &[&str]| -> BTreeSet<u32> {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let reply: Vec<String> = cmd.query(con).unwrap();
        let set: BTreeSet<u32> = reply.iter().map(|m| m.parse().unwrap()).collect();
        assert_eq!(set.len(), reply.len(), "duplicates in {args:?}");
        set
    };
    let abc: BTreeSet<u32> = a
        .intersection(&b)
        .filter(|n| c.contains(n))
        .copied()
        .collect();
    assert_eq!(query(&mut con, &["SINTER", "a", "b", "c"]), abc);
    assert_eq!(
        query(&mut con, &["SINTER", "b", "a"]),
        a.intersection(&b).copied().collect()
    );
    let ab_union: BTreeSet<u32> = a.union(&b).copied().collect();
    assert_eq!(query(&mut con, &["SUNION", "a", "b", "c"]), ab_union);
    // Both difference strategies: few small sets to subtract (walk the
    // first), and a first set small next to what is subtracted (copy it).
    let a_minus_c: BTreeSet<u32> = a.difference(&c).copied().collect();
    assert_eq!(query(&mut con, &["SDIFF", "a", "c"]), a_minus_c);
    let c_minus: BTreeSet<u32> = c
        .iter()
        .filter(|n| !a.contains(n) && !b.contains(n))
        .copied()
        .collect();
    assert_eq!(query(&mut con, &["SDIFF", "c", "a", "b"]), c_minus);
    let b_minus: BTreeSet<u32> = b
        .iter()
        .filter(|n| !a.contains(n) && !c.contains(n))
        .copied()
        .collect();
    assert_eq!(query(&mut con, &["SDIFF", "b", "c", "a"]), b_minus);
    let card: i64 = redis::cmd("SINTERCARD")
        .arg(3)
        .arg("a")
        .arg("b")
        .arg("c")
        .query(&mut con)
        .unwrap();
    assert_eq!(card as usize, abc.len());
    let card: i64 = redis::cmd("SINTERCARD")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("LIMIT")
        .arg(1500)
        .query(&mut con)
        .unwrap();
    assert_eq!(card, 1500);
    let stored: i64 = redis::cmd("SDIFFSTORE")
        .arg("d")
        .arg("b")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(stored as usize, b.difference(&a).count());
    assert_eq!(
        query(&mut con, &["SMEMBERS", "d"]),
        b.difference(&a).copied().collect()
    );
    let stored: i64 = redis::cmd("SINTERSTORE")
        .arg("d")
        .arg("a")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(stored as usize, a.intersection(&b).count());

    // SSCAN returns every member exactly once, whatever the COUNT.
    for count in [1usize, 7, 100, 10_000] {
        let mut seen = Vec::new();
        let mut cursor = "0".to_string();
        let mut steps = 0;
        loop {
            let (next, batch): (String, Vec<String>) = redis::cmd("SSCAN")
                .arg("a")
                .arg(&cursor)
                .arg("COUNT")
                .arg(count)
                .query(&mut con)
                .unwrap();
            assert!(batch.len() >= count.min(a.len() - seen.len()) || next == "0");
            seen.extend(batch.into_iter().map(|m| m.parse::<u32>().unwrap()));
            steps += 1;
            if next == "0" {
                break;
            }
            cursor = next;
        }
        assert_eq!(seen.len(), a.len(), "COUNT {count}");
        assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), a);
        assert!(steps >= a.len() / count.max(1) / 2);
    }
    // MATCH filters what a step examined.
    let mut matched = BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, batch): (String, Vec<String>) = redis::cmd("SSCAN")
            .arg("a")
            .arg(&cursor)
            .arg("MATCH")
            .arg("1*")
            .arg("COUNT")
            .arg(500)
            .query(&mut con)
            .unwrap();
        matched.extend(batch.into_iter().map(|m| m.parse::<u32>().unwrap()));
        if next == "0" {
            break;
        }
        cursor = next;
    }
    let expected: BTreeSet<u32> = a
        .iter()
        .filter(|n| n.to_string().starts_with('1'))
        .copied()
        .collect();
    assert_eq!(matched, expected);
    server.shutdown().unwrap();
}

#[test]
fn sscan_small() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SSCAN nope 0", "[\"0\", []]"),
        ("SADD s apple banana avocado", "(integer) 3"),
    ]);
    let reply = c.call("SSCAN s 0");
    assert!(reply.starts_with("[\"0\", ["), "{reply}");
    let reply = c.call("SSCAN s 0 MATCH a* COUNT 100");
    let inner = reply
        .strip_prefix("[\"0\", ")
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{reply}"))
        .to_string();
    assert_eq!(parse_list(&inner).unwrap(), strings(&["apple", "avocado"]));
    assert_eq!(c.call("SSCAN s 0 MATCH x*"), "[\"0\", []]");
    let reply = c.call("SSCAN s 0 match * count 1");
    assert!(reply.starts_with("[\""), "{reply}");
    // A cursor past every member's hash ends the scan (a member hashing to
    // exactly u64::MAX is not a worry); "-1" is that cursor too, as with
    // Redis's strtoul.
    c.script(&[
        ("SSCAN s 18446744073709551615 COUNT 5", "[\"0\", []]"),
        ("SSCAN s -1", "[\"0\", []]"),
    ]);
    let first = c.call("SSCAN s 0 COUNT 1");
    assert_eq!(c.call("SSCAN s +0 COUNT 1"), first);
    server.shutdown().unwrap();
}

#[test]
fn resp3_reply_types() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.call("HELLO 3");
    c.script(&[("SADD s a b", "(integer) 2"), ("SADD t b c", "(integer) 2")]);
    let (head, rest) = raw(&mut c, "SMEMBERS s");
    assert_eq!(head, "~2");
    assert_eq!(rest.len(), 2);
    assert_eq!(raw(&mut c, "SMEMBERS nope").0, "~0");
    assert_eq!(
        raw(&mut c, "SINTER s t"),
        ("~1".into(), vec!["\"b\"".into()])
    );
    assert_eq!(raw(&mut c, "SINTER s nope").0, "~0");
    assert_eq!(raw(&mut c, "SUNION s t").0, "~3");
    assert_eq!(
        raw(&mut c, "SDIFF s t"),
        ("~1".into(), vec!["\"a\"".into()])
    );
    assert_eq!(raw(&mut c, "SRANDMEMBER s 2").0, "*2");
    assert_eq!(raw(&mut c, "SRANDMEMBER s -3").0, "*3");
    assert_eq!(raw(&mut c, "SRANDMEMBER nope 2").0, "*0");
    assert_eq!(raw(&mut c, "SRANDMEMBER nope").0, "_");
    assert_eq!(raw(&mut c, "SPOP nope").0, "_");
    assert_eq!(raw(&mut c, "SPOP nope 2").0, "~0");
    assert_eq!(raw(&mut c, "SPOP t 0").0, "~0");
    assert_eq!(raw(&mut c, "SPOP t 1").0, "~1");
    assert_eq!(raw(&mut c, "SMISMEMBER s a z").0, "*2");
    assert_eq!(raw(&mut c, "SISMEMBER s a").0, ":1");
    assert_eq!(raw(&mut c, "SSCAN s 0").0, "*2");
    assert_eq!(raw(&mut c, "SINTERCARD 1 s").0, ":2");
    // And RESP2 spells sets as arrays and nulls as null bulks.
    c.call("HELLO 2");
    assert_eq!(raw(&mut c, "SMEMBERS s").0, "*2");
    assert_eq!(raw(&mut c, "SPOP nope").0, "$-1");
    assert_eq!(raw(&mut c, "SPOP nope 1").0, "*0");
    server.shutdown().unwrap();
}

#[test]
fn del_expire_and_emptied_keys() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SADD s a b", "(integer) 2"),
        ("EXPIRE s 100", "(integer) 1"),
        ("TTL s", "(integer) 100"),
        ("SADD s c", "(integer) 1"),
        ("TTL s", "(integer) 100"),
        ("PERSIST s", "(integer) 1"),
        ("TTL s", "(integer) -1"),
        ("DEL s", "(integer) 1"),
        ("EXISTS s", "(integer) 0"),
        ("SCARD s", "(integer) 0"),
        ("SADD s a", "(integer) 1"),
        ("PEXPIRE s 30", "(integer) 1"),
    ]);
    std::thread::sleep(Duration::from_millis(80));
    c.script(&[
        ("SCARD s", "(integer) 0"),
        ("SISMEMBER s a", "(integer) 0"),
        ("EXISTS s", "(integer) 0"),
        ("SADD s b", "(integer) 1"),
        ("SMEMBERS s", "[\"b\"]"),
        ("TTL s", "(integer) -1"),
        ("SREM s b", "(integer) 1"),
        ("EXISTS s", "(integer) 0"),
        ("DBSIZE", "(integer) 0"),
        // SADD over a string is refused, SET over a set replaces it.
        ("SET str v", "OK"),
        ("SADD str a", WRONGTYPE),
        ("SADD s a", "(integer) 1"),
        ("SET s v", "OK"),
        ("GET s", "\"v\""),
        ("SADD s a", WRONGTYPE),
    ]);
    server.shutdown().unwrap();
}

/// An SADD whose members are all there already is answered by a read
/// (no key group taken): 0, as Redis, and nothing else changes either:
/// a WATCH on the set survives it; a string is still WRONGTYPE, an
/// expired set is absent, a new member among old ones is added, and
/// inside MULTI the transaction answers. Each reply held to Redis's.
#[test]
fn an_sadd_of_members_already_there_changes_nothing() {
    let (server, _dir, redis_server, mut engram, mut redis) = common::beside_redis();
    let mut watcher = Client::connect(&server);
    let mut redis_watcher = redis_server.client();
    common::script_both(
        &mut engram,
        &mut redis,
        &[
            ("SADD s a b", "(integer) 2"),
            ("SADD s a b", "(integer) 0"),
            ("SADD s b", "(integer) 0"),
            ("SADD s a c", "(integer) 1"),
            ("SCARD s", "(integer) 3"),
            ("SET str x", "OK"),
            ("SADD str a", WRONGTYPE),
        ],
    );
    for c in [&mut watcher, &mut redis_watcher] {
        c.script(&[("WATCH s", "OK"), ("MULTI", "OK"), ("SCARD s", "QUEUED")]);
    }
    // Nor is its look a keyspace hit (Redis counts none for writes).
    let hits = |c: &mut Client| {
        let info = c.call("INFO stats");
        let at = info
            .find("keyspace_hits:")
            .expect("INFO stats names keyspace_hits")
            + 14;
        info[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
    };
    let (engram_hits, redis_hits) = (hits(&mut engram), hits(&mut redis));
    common::script_both(&mut engram, &mut redis, &[("SADD s a b c", "(integer) 0")]);
    assert_eq!(
        (hits(&mut engram), hits(&mut redis)),
        (engram_hits, redis_hits)
    );
    for c in [&mut watcher, &mut redis_watcher] {
        c.script(&[("EXEC", "[(integer) 3]")]);
    }
    common::script_both(
        &mut engram,
        &mut redis,
        &[
            ("MULTI", "OK"),
            ("SADD s a", "QUEUED"),
            ("SADD s d", "QUEUED"),
            ("EXEC", "[(integer) 0, (integer) 1]"),
            ("PEXPIRE s 1", "(integer) 1"),
        ],
    );
    std::thread::sleep(Duration::from_millis(20));
    common::script_both(
        &mut engram,
        &mut redis,
        &[
            ("SADD s a", "(integer) 1"),
            ("SCARD s", "(integer) 1"),
            ("TTL s", "(integer) -1"),
        ],
    );
}

#[test]
fn multi_exec() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SADD other x y", "(integer) 2"),
        ("MULTI", "OK"),
        ("SADD s a b c", "QUEUED"),
        ("SREM s c", "QUEUED"),
        ("SCARD s", "QUEUED"),
        ("SISMEMBER s b", "QUEUED"),
        ("SMOVE other s x", "QUEUED"),
        ("SINTERSTORE d s other", "QUEUED"),
        ("SUNIONSTORE u s other", "QUEUED"),
        ("SINTERCARD 2 s u", "QUEUED"),
        ("SPOP other", "QUEUED"),
        ("EXISTS other", "QUEUED"),
        (
            "EXEC",
            "[(integer) 3, (integer) 1, (integer) 2, (integer) 1, (integer) 1, (integer) 0, \
             (integer) 4, (integer) 3, \"y\", (integer) 0]",
        ),
        ("EXISTS d", "(integer) 0"),
    ]);
    assert_eq!(members(&mut c, "SMEMBERS s"), strings(&["a", "b", "x"]));
    assert_eq!(
        members(&mut c, "SMEMBERS u"),
        strings(&["a", "b", "x", "y"])
    );
    // A read after a write of the same key, in one EXEC.
    c.script(&[
        ("MULTI", "OK"),
        ("SADD t 1 2", "QUEUED"),
        ("SMEMBERS t", "QUEUED"),
    ]);
    let reply = c.call("EXEC");
    assert!(
        reply == "[(integer) 2, [\"1\", \"2\"]]" || reply == "[(integer) 2, [\"2\", \"1\"]]",
        "{reply}"
    );
    c.script(&[
        ("MULTI", "OK"),
        ("SUNION s t", "QUEUED"),
        ("SADD str x", "QUEUED"),
        ("SET str v", "QUEUED"),
        ("SADD str x", "QUEUED"),
        ("SPOP t 5", "QUEUED"),
        ("SCARD t", "QUEUED"),
    ]);
    let reply = c.call("EXEC");
    assert!(
        reply.contains(&format!("(integer) 1, OK, {}", WRONGTYPE)),
        "{reply}"
    );
    assert!(reply.ends_with("(integer) 0]"), "{reply}");
    // WATCH sees a set change.
    let mut other = Client::connect(&server);
    c.script(&[("WATCH s", "OK"), ("MULTI", "OK"), ("SCARD s", "QUEUED")]);
    other.script(&[("SADD s new", "(integer) 1")]);
    c.script(&[("EXEC", "(nil array)")]);
    server.shutdown().unwrap();
}

#[test]
fn sets_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || common::config_in(dir.path());
    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SADD s a b c d e", "(integer) 5"),
        ("SREM s e", "(integer) 1"),
        ("SADD t c d x", "(integer) 3"),
        ("SMOVE t s x", "(integer) 1"),
        ("SINTERSTORE i s t", "(integer) 2"),
        ("SET str v", "OK"),
        ("SUNIONSTORE str s t", "(integer) 5"),
        ("SADD gone 1", "(integer) 1"),
        ("SPOP gone", "\"1\""),
        ("SADD p 1 2 3 4 5 6", "(integer) 6"),
        ("EXPIRE t 1000", "(integer) 1"),
        ("SAVE", "OK"),
        // After the checkpoint: replayed from the log.
        ("SADD s after", "(integer) 1"),
        ("SDIFFSTORE dd s t", "(integer) 4"),
    ]);
    let popped = members(&mut c, "SPOP p 4");
    let mut left: BTreeSet<String> = (1..=6).map(|i| i.to_string()).collect();
    for m in &popped {
        assert!(left.remove(m));
    }
    let before: Vec<Vec<String>> = ["s", "t", "i", "str", "p", "dd"]
        .iter()
        .map(|k| members(&mut c, &format!("SMEMBERS {k}")))
        .collect();
    drop(c);
    server.shutdown().unwrap();

    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    let after: Vec<Vec<String>> = ["s", "t", "i", "str", "p", "dd"]
        .iter()
        .map(|k| members(&mut c, &format!("SMEMBERS {k}")))
        .collect();
    assert_eq!(after, before);
    assert_eq!(after[4], left.into_iter().collect::<Vec<_>>());
    assert_eq!(after[0], strings(&["a", "after", "b", "c", "d", "x"]));
    c.script(&[
        ("EXISTS gone", "(integer) 0"),
        ("TYPE str", "set"),
        ("TTL s", "(integer) -1"),
        ("SCARD i", "(integer) 2"),
        ("DBSIZE", "(integer) 6"),
    ]);
    let ttl = c.call("TTL t");
    assert!(ttl == "(integer) 1000" || ttl == "(integer) 999", "{ttl}");
    server.shutdown().unwrap();
}

/// A few hundred random set commands against a model, through the
/// `redis` crate client.
#[test]
fn randomized_against_a_model() {
    let (server, _dir) = start();
    let mut con = common::redis_con(server.addr);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5e75);
    let keys = ["k0", "k1", "k2", "k3"];
    let mut model: Vec<BTreeSet<String>> = vec![BTreeSet::new(); keys.len()];
    let member = |rng: &mut rand::rngs::StdRng| format!("m{}", rng.random_range(0..24));
    let as_set = |v: Vec<String>| -> BTreeSet<String> {
        let set: BTreeSet<String> = v.iter().cloned().collect();
        assert_eq!(set.len(), v.len(), "duplicate members in {v:?}");
        set
    };
    for step in 0..600 {
        let k = rng.random_range(0..keys.len());
        let key = keys[k];
        let picks: Vec<usize> = (0..rng.random_range(1..4))
            .map(|_| rng.random_range(0..keys.len()))
            .collect();
        let named: Vec<&str> = picks.iter().map(|&i| keys[i]).collect();
        let inter = || {
            let mut result = model[picks[0]].clone();
            for &i in &picks[1..] {
                result.retain(|m| model[i].contains(m));
            }
            result
        };
        let union = || {
            let mut result = BTreeSet::new();
            for &i in &picks {
                result.extend(model[i].iter().cloned());
            }
            result
        };
        let diff = || {
            let mut result = model[picks[0]].clone();
            for &i in &picks[1..] {
                result.retain(|m| !model[i].contains(m));
            }
            result
        };
        let what = rng.random_range(0..16);
        let context = format!("step {step}, op {what}, key {key}, picks {named:?}");
        match what {
            0 | 1 => {
                let ms: Vec<String> = (0..rng.random_range(1..5))
                    .map(|_| member(&mut rng))
                    .collect();
                let added: usize = redis::cmd("SADD")
                    .arg(key)
                    .arg(&ms)
                    .query(&mut con)
                    .unwrap();
                let expected = ms.iter().filter(|m| model[k].insert(m.to_string())).count();
                assert_eq!(added, expected, "{context}");
            }
            2 => {
                let ms: Vec<String> = (0..rng.random_range(1..5))
                    .map(|_| member(&mut rng))
                    .collect();
                let removed: usize = redis::cmd("SREM")
                    .arg(key)
                    .arg(&ms)
                    .query(&mut con)
                    .unwrap();
                let expected = ms.iter().filter(|m| model[k].remove(*m)).count();
                assert_eq!(removed, expected, "{context}");
            }
            3 => {
                let card: usize = redis::cmd("SCARD").arg(key).query(&mut con).unwrap();
                assert_eq!(card, model[k].len(), "{context}");
                let m = member(&mut rng);
                let is: bool = redis::cmd("SISMEMBER")
                    .arg(key)
                    .arg(&m)
                    .query(&mut con)
                    .unwrap();
                assert_eq!(is, model[k].contains(&m), "{context}");
                let ms: Vec<String> = (0..3).map(|_| member(&mut rng)).collect();
                let are: Vec<bool> = redis::cmd("SMISMEMBER")
                    .arg(key)
                    .arg(&ms)
                    .query(&mut con)
                    .unwrap();
                let expected: Vec<bool> = ms.iter().map(|m| model[k].contains(m)).collect();
                assert_eq!(are, expected, "{context}");
            }
            4 => {
                let all: Vec<String> = redis::cmd("SMEMBERS").arg(key).query(&mut con).unwrap();
                assert_eq!(as_set(all), model[k], "{context}");
            }
            5 => {
                if rng.random_bool(0.5) {
                    let popped: Option<String> =
                        redis::cmd("SPOP").arg(key).query(&mut con).unwrap();
                    match popped {
                        Some(m) => assert!(model[k].remove(&m), "{context}: popped {m}"),
                        None => assert!(model[k].is_empty(), "{context}"),
                    }
                } else {
                    let count = rng.random_range(0..6);
                    let popped: Vec<String> = redis::cmd("SPOP")
                        .arg(key)
                        .arg(count)
                        .query(&mut con)
                        .unwrap();
                    assert_eq!(popped.len(), count.min(model[k].len()), "{context}");
                    for m in as_set(popped) {
                        assert!(model[k].remove(&m), "{context}: popped {m}");
                    }
                }
            }
            6 => {
                let count: i64 = rng.random_range(-6..7);
                let picked: Vec<String> = redis::cmd("SRANDMEMBER")
                    .arg(key)
                    .arg(count)
                    .query(&mut con)
                    .unwrap();
                assert!(picked.iter().all(|m| model[k].contains(m)), "{context}");
                if model[k].is_empty() {
                    assert!(picked.is_empty(), "{context}");
                } else if count < 0 {
                    assert_eq!(picked.len() as i64, -count, "{context}");
                } else {
                    assert_eq!(
                        picked.len(),
                        (count as usize).min(model[k].len()),
                        "{context}"
                    );
                    as_set(picked);
                }
            }
            7 => {
                let to = picks[0];
                let m = if rng.random_bool(0.7) {
                    model[k]
                        .iter()
                        .next()
                        .cloned()
                        .unwrap_or_else(|| member(&mut rng))
                } else {
                    member(&mut rng)
                };
                let moved: bool = redis::cmd("SMOVE")
                    .arg(key)
                    .arg(keys[to])
                    .arg(&m)
                    .query(&mut con)
                    .unwrap();
                let expected = model[k].contains(&m);
                assert_eq!(moved, expected, "{context}: SMOVE {m}");
                if expected && to != k {
                    model[k].remove(&m);
                    model[to].insert(m);
                }
            }
            8 => {
                let got: Vec<String> = redis::cmd("SINTER").arg(&named).query(&mut con).unwrap();
                assert_eq!(as_set(got), inter(), "{context}");
            }
            9 => {
                let got: Vec<String> = redis::cmd("SUNION").arg(&named).query(&mut con).unwrap();
                assert_eq!(as_set(got), union(), "{context}");
            }
            10 => {
                let got: Vec<String> = redis::cmd("SDIFF").arg(&named).query(&mut con).unwrap();
                assert_eq!(as_set(got), diff(), "{context}");
            }
            11 => {
                let limit = rng.random_range(0..4);
                let got: usize = redis::cmd("SINTERCARD")
                    .arg(named.len())
                    .arg(&named)
                    .arg("LIMIT")
                    .arg(limit)
                    .query(&mut con)
                    .unwrap();
                let full = inter().len();
                let expected = if limit == 0 { full } else { full.min(limit) };
                assert_eq!(got, expected, "{context}");
            }
            12..=14 => {
                let (name, result) = match what {
                    12 => ("SINTERSTORE", inter()),
                    13 => ("SUNIONSTORE", union()),
                    _ => ("SDIFFSTORE", diff()),
                };
                let stored: usize = redis::cmd(name)
                    .arg(key)
                    .arg(&named)
                    .query(&mut con)
                    .unwrap();
                assert_eq!(stored, result.len(), "{context}: {name}");
                model[k] = result;
                let exists: bool = redis::cmd("EXISTS").arg(key).query(&mut con).unwrap();
                assert_eq!(exists, !model[k].is_empty(), "{context}");
            }
            _ => {
                let mut seen = Vec::new();
                let mut cursor = 0u64;
                loop {
                    let (next, batch): (u64, Vec<String>) = redis::cmd("SSCAN")
                        .arg(key)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(rng.random_range(1..5))
                        .query(&mut con)
                        .unwrap();
                    seen.extend(batch);
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
                assert_eq!(as_set(seen), model[k], "{context}");
            }
        }
    }
    // The final state, key by key, and the key count.
    for (k, key) in keys.iter().enumerate() {
        let all: Vec<String> = redis::cmd("SMEMBERS").arg(*key).query(&mut con).unwrap();
        assert_eq!(as_set(all), model[k]);
    }
    let dbsize: usize = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, model.iter().filter(|s| !s.is_empty()).count());
    server.shutdown().unwrap();
}
