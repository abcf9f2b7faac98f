//! The HyperLogLog commands over real TCP: PFADD PFCOUNT PFMERGE PFDEBUG,
//! their errors against Redis's, and interoperability with a real
//! redis-server 7.0: a value one writes, the other reads (carried with GET
//! and SET), and the same additions give the same bytes on both.

mod common;

use common::{arity, redis_con, script_both, start, RedisServer, WRONGTYPE};
use rand::{Rng, SeedableRng};

const NOT_HLL: &str = "(error) WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "(error) INVALIDOBJ Corrupted HLL object detected";

fn get(con: &mut redis::Connection, key: &str) -> Vec<u8> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn set(con: &mut redis::Connection, key: &str, value: &[u8]) {
    redis::cmd("SET").arg(key).arg(value).exec(con).unwrap();
}

fn pfadd(con: &mut redis::Connection, key: &str, elements: &[String]) -> i64 {
    redis::cmd("PFADD")
        .arg(key)
        .arg(elements)
        .query(con)
        .unwrap()
}

fn pfcount(con: &mut redis::Connection, keys: &[&str]) -> i64 {
    redis::cmd("PFCOUNT").arg(keys).query(con).unwrap()
}

#[test]
fn replies_and_errors_match_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    script_both(
        &mut e,
        &mut r,
        &[
            ("PFADD h", "(integer) 1"),
            ("PFADD h", "(integer) 0"),
            ("PFCOUNT h", "(integer) 0"),
            ("PFADD h a b c", "(integer) 1"),
            ("PFADD h a b c", "(integer) 0"),
            ("PFCOUNT h", "(integer) 3"),
            ("PFCOUNT h nokey", "(integer) 3"),
            ("PFCOUNT nokey", "(integer) 0"),
            ("PFADD h2 c d e", "(integer) 1"),
            ("PFCOUNT h h2", "(integer) 5"),
            ("PFMERGE m h h2 nokey", "OK"),
            ("PFCOUNT m", "(integer) 5"),
            ("PFMERGE empty", "OK"),
            ("PFCOUNT empty", "(integer) 0"),
            ("PFDEBUG ENCODING h", "sparse"),
            (
                "PFDEBUG DECODE h",
                "\"Z:8436 v:1,1 Z:4274 v:2,1 Z:3068 v:1,1 Z:603\"",
            ),
            ("PFDEBUG TODENSE h", "(integer) 1"),
            ("PFDEBUG TODENSE h", "(integer) 0"),
            ("PFDEBUG ENCODING h", "dense"),
            ("PFDEBUG DECODE h", "(error) ERR HLL encoding is not sparse"),
            ("PFCOUNT h", "(integer) 3"),
            (
                "PFDEBUG ENCODING nokey",
                "(error) ERR The specified key does not exist",
            ),
            (
                "PFDEBUG FROB h",
                "(error) ERR Unknown PFDEBUG subcommand 'FROB'",
            ),
            ("PFDEBUG ENCODING h extra", &arity("pfdebug")),
            ("PFDEBUG ENCODING", &arity("pfdebug")),
            ("PFADD", &arity("pfadd")),
            ("PFCOUNT", &arity("pfcount")),
            ("PFMERGE", &arity("pfmerge")),
            // Other types, and strings that are not HyperLogLogs.
            ("LPUSH list a", "(integer) 1"),
            ("PFADD list a", WRONGTYPE),
            ("PFCOUNT list", WRONGTYPE),
            ("PFCOUNT h list", WRONGTYPE),
            ("PFMERGE h list", WRONGTYPE),
            ("PFMERGE list h", WRONGTYPE),
            ("SET s notanhll", "OK"),
            ("PFADD s a", NOT_HLL),
            ("PFCOUNT s", NOT_HLL),
            ("PFMERGE h s", NOT_HLL),
            ("SET n 12345", "OK"),
            ("PFCOUNT n", NOT_HLL),
            ("SET short HYLL", "OK"),
            ("PFCOUNT short", NOT_HLL),
            // Corruption: trailing bytes after the sparse registers, a
            // broken magic, an unknown encoding, a dense value of the
            // wrong length.
            ("DEL c", "(integer) 0"),
            ("PFADD c a b c", "(integer) 1"),
            ("APPEND c hello", "(integer) 32"),
            ("PFCOUNT c", CORRUPT),
            // Registers found before the damage can still be set.
            ("PFADD c x y z", "(integer) 1"),
            ("PFCOUNT c h", CORRUPT),
            ("PFMERGE h c", CORRUPT),
            ("DEL c", "(integer) 1"),
            ("PFADD c a b c", "(integer) 1"),
            ("SETRANGE c 0 0123", "(integer) 27"),
            ("PFCOUNT c", NOT_HLL),
            ("DEL c", "(integer) 1"),
            ("PFADD c a b c", "(integer) 1"),
            ("SETRANGE c 4 x", "(integer) 27"),
            ("PFCOUNT c", NOT_HLL),
            ("DEL c", "(integer) 1"),
            ("PFADD c a b c", "(integer) 1"),
            ("PFDEBUG TODENSE c", "(integer) 1"),
            ("APPEND c x", "(integer) 12305"),
            ("PFCOUNT c", NOT_HLL),
        ],
    );
}

/// The stale-cache flag and the cached count are in the bytes too.
#[test]
fn cached_count_bytes_match_redis() {
    let (server, _dir) = start();
    let redis = RedisServer::start();
    let (mut e, mut r) = (redis_con(server.addr), redis.con());
    for con in [&mut e, &mut r] {
        pfadd(con, "h", &["a".into(), "b".into(), "c".into()]);
        assert_eq!(get(con, "h")[15], 0x80, "stale after PFADD");
        assert_eq!(pfcount(con, &["h"]), 3);
        assert_eq!(get(con, "h")[8..16], [3, 0, 0, 0, 0, 0, 0, 0]);
    }
    assert_eq!(get(&mut e, "h"), get(&mut r, "h"));
}

/// Redis's bytes read here and Engram's read there, sparse and dense, and
/// the same additions produce the same bytes on both at every step,
/// through the sparse-to-dense conversion.
#[test]
fn values_move_between_redis_and_engram() {
    let (server, _dir) = start();
    let redis = RedisServer::start();
    let (mut e, mut r) = (redis_con(server.addr), redis.con());
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x4871);
    let mut added = 0;
    let mut saw_sparse = false;
    while added < 30_000 {
        let batch: Vec<String> = (0..rng.random_range(1..400))
            .map(|_| format!("{}", rng.random::<u64>()))
            .collect();
        added += batch.len();
        assert_eq!(pfadd(&mut e, "same", &batch), pfadd(&mut r, "same", &batch));
        let ours = get(&mut e, "same");
        assert_eq!(ours, get(&mut r, "same"), "after {added} elements");
        saw_sparse |= ours[4] == 1;
        // Redis's value on Engram, Engram's on Redis.
        set(&mut e, "from-redis", &get(&mut r, "same"));
        set(&mut r, "from-engram", &ours);
        let expected = pfcount(&mut r, &["same"]);
        assert_eq!(pfcount(&mut e, &["same"]), expected);
        assert_eq!(pfcount(&mut e, &["from-redis"]), expected);
        assert_eq!(pfcount(&mut r, &["from-engram"]), expected);
        // The counts wrote their caches identically.
        assert_eq!(get(&mut e, "same"), get(&mut r, "same"));
    }
    assert!(saw_sparse);
    assert_eq!(get(&mut e, "same").len(), 16 + 12288, "dense by now");
}

/// PFMERGE and multi-key PFCOUNT agree with Redis, across encodings.
#[test]
fn merges_match_redis() {
    let (server, _dir) = start();
    let redis = RedisServer::start();
    let (mut e, mut r) = (redis_con(server.addr), redis.con());
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    for (key, n) in [("small", 50), ("mid", 700), ("large", 5000)] {
        let elements: Vec<String> = (0..n).map(|_| rng.random::<u32>().to_string()).collect();
        for con in [&mut e, &mut r] {
            pfadd(con, key, &elements);
        }
    }
    for sources in [
        &["small"][..],
        &["small", "mid"],
        &["mid", "small"],
        &["large", "small"],
        &["small", "mid", "large", "nokey"],
    ] {
        let expected = pfcount(&mut r, sources);
        assert_eq!(pfcount(&mut e, sources), expected, "{sources:?}");
        for con in [&mut e, &mut r] {
            redis::cmd("DEL").arg("dest").exec(con).unwrap();
            redis::cmd("PFMERGE")
                .arg("dest")
                .arg(sources)
                .exec(con)
                .unwrap();
        }
        assert_eq!(get(&mut e, "dest"), get(&mut r, "dest"), "{sources:?}");
    }
    // Merging into an existing sparse destination.
    for con in [&mut e, &mut r] {
        redis::cmd("PFMERGE")
            .arg("small")
            .arg("mid")
            .exec(con)
            .unwrap();
    }
    assert_eq!(get(&mut e, "small"), get(&mut r, "small"));
}

/// Randomly damaged values never crash the server: every reply is a count
/// or one of Redis's two errors, as Redis's reply is.
#[test]
fn damaged_values_give_errors_like_redis() {
    let (server, _dir) = start();
    let redis = RedisServer::start();
    let (mut e, mut r) = (redis_con(server.addr), redis.con());
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for round in 0..300 {
        let elements: Vec<String> = (0..rng.random_range(0..3000))
            .map(|_| rng.random::<u64>().to_string())
            .collect();
        pfadd(&mut r, "h", &elements);
        let mut value = get(&mut r, "h");
        for _ in 0..rng.random_range(1..5) {
            let at = rng.random_range(0..value.len());
            value[at] = rng.random();
        }
        set(&mut e, "h", &value);
        set(&mut r, "h", &value);
        let reply = |con: &mut redis::Connection| -> String {
            match redis::cmd("PFCOUNT").arg("h").query::<i64>(con) {
                Ok(n) => n.to_string(),
                Err(error) => error.to_string(),
            }
        };
        assert_eq!(reply(&mut e), reply(&mut r), "round {round}");
        redis::cmd("DEL").arg("h").exec(&mut r).unwrap();
    }
}

/// PFSELFTEST passes, and hll-sparse-max-bytes is a setting.
#[test]
fn self_test_and_sparse_limit() {
    let (server, _dir) = start();
    let mut c = common::Client::connect(&server);
    c.script(&[
        ("PFSELFTEST", "OK"),
        (
            "CONFIG GET hll-sparse-max-bytes",
            "[\"hll-sparse-max-bytes\", \"3000\"]",
        ),
        ("CONFIG SET hll-sparse-max-bytes 30", "OK"),
        ("PFADD h a b c d e f g h i j", "(integer) 1"),
        ("PFDEBUG ENCODING h", "dense"),
    ]);
}
