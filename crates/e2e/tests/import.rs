//! `engram import`, run as a user would: a real redis-server 7.0.15 (on
//! PATH) is filled with every type in several databases, some keys
//! expiring long after the import and some before it, and SAVEs; its
//! dump.rdb is imported into a fresh directory, `engram serve` starts on
//! it, and every key is compared with Redis through the redis crate: TYPE,
//! value, and expiry time (to the millisecond: both keep the same absolute
//! time). Then the refusals: a damaged file (nothing written, the offset
//! named), and a directory a running server holds.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{connect, serve, RedisServer};
use redis::{Connection, Value};

/// Keys per kind of value (the whole file holds about 20k keys).
const STRINGS: usize = 9_000;
const SMALL: usize = 1_500;
const LARGE: usize = 25;
/// Keys whose expiry passes between SAVE and the import.
const SHORT_LIVED: usize = 400;
const DATABASES: [u8; 3] = [0, 3, 12];

/// A redis-server that saves into `dir` (with DEBUG allowed: the
/// short-lived keys must still be in the file when it is saved, so the
/// test stops active expiry).
fn start_redis(dir: &Path) -> RedisServer {
    let dir = dir.to_str().expect("a UTF-8 temporary directory");
    let server = RedisServer::start(&[
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--enable-debug-command",
        "yes",
        "--dir",
        dir,
    ]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while redis_connect(&server).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not answer");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

fn redis_connect(server: &RedisServer) -> redis::RedisResult<Connection> {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port))?
        .get_connection_with_timeout(Duration::from_secs(5))?;
    redis::cmd("PING").query::<String>(&mut con)?;
    Ok(con)
}

fn import(file: &Path, dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engram-e2e"))
        .arg("import")
        .arg(file)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("running engram import")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Fills Redis: returns how many keys were made short-lived.
fn fill(con: &mut Connection) -> usize {
    let mut short_lived = 0;
    for (d, &db) in DATABASES.iter().enumerate() {
        redis::cmd("SELECT").arg(db).query::<()>(con).unwrap();
        let mut pipe = redis::pipe();
        let strings = STRINGS / DATABASES.len();
        for i in 0..strings {
            let key = format!("s:{i}");
            match i % 3 {
                0 => pipe.cmd("SET").arg(&key).arg(i as i64 - 1000).ignore(),
                1 => pipe.cmd("SET").arg(&key).arg(format!("text {i}")).ignore(),
                // Compressible: Redis stores it LZF-compressed.
                _ => pipe
                    .cmd("SET")
                    .arg(&key)
                    .arg(format!("{i}{}", "abc".repeat(40)))
                    .ignore(),
            };
        }
        for i in 0..SMALL / DATABASES.len() {
            pipe.cmd("HSET")
                .arg(format!("h:{i}"))
                .arg(&[("f1", format!("{i}")), ("f2", "v".into())])
                .ignore();
            pipe.cmd("SADD")
                .arg(format!("si:{i}"))
                .arg(&[i as i64, -7, 1 << 40])
                .ignore();
            pipe.cmd("SADD")
                .arg(format!("ss:{i}"))
                .arg(&["a", "b", &format!("m{i}")])
                .ignore();
            pipe.cmd("RPUSH")
                .arg(format!("l:{i}"))
                .arg(&["x", "12", &format!("item{i}")])
                .ignore();
            pipe.cmd("ZADD")
                .arg(format!("z:{i}"))
                .arg(&[(1.5, "a"), (i as f64, "b"), (-3.25, "c")])
                .ignore();
        }
        for i in 0..LARGE {
            for chunk in 0..6 {
                let range = chunk * 100..(chunk + 1) * 100;
                let pairs: Vec<(String, String)> = range
                    .clone()
                    .map(|j| (format!("f{j}"), format!("value {j}")))
                    .collect();
                pipe.cmd("HSET").arg(format!("H:{i}")).arg(&pairs).ignore();
                let members: Vec<String> = range.clone().map(|j| format!("m{j}")).collect();
                pipe.cmd("SADD")
                    .arg(format!("S:{i}"))
                    .arg(&members)
                    .ignore();
                let items: Vec<String> = range
                    .clone()
                    .map(|j| format!("item {j} {}", "q".repeat(j % 40)))
                    .collect();
                pipe.cmd("RPUSH").arg(format!("L:{i}")).arg(&items).ignore();
                let scored: Vec<(f64, String)> =
                    range.map(|j| (j as f64 / 3.0, format!("m{j}"))).collect();
                pipe.cmd("ZADD").arg(format!("Z:{i}")).arg(&scored).ignore();
            }
        }
        pipe.query::<()>(con).unwrap();
        // Expiry: a tenth of each kind far in the future (as an absolute
        // time, so both servers report the same one), and the short-lived.
        let mut pipe = redis::pipe();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
        for (n, key) in keys.iter().enumerate() {
            if n % 10 == d {
                pipe.cmd("PEXPIREAT")
                    .arg(key)
                    .arg(4_000_000_000_000u64 + n as u64)
                    .ignore();
            } else if n % 37 == 5 && short_lived < SHORT_LIVED * (d + 1) / DATABASES.len() {
                pipe.cmd("PEXPIRE").arg(key).arg(1500).ignore();
                short_lived += 1;
            }
        }
        pipe.query::<()>(con).unwrap();
    }
    short_lived
}

fn items(value: Value) -> Vec<Vec<u8>> {
    match value {
        Value::Array(items) => items.into_iter().map(bytes).collect(),
        other => panic!("not an array: {other:?}"),
    }
}

fn bytes(value: Value) -> Vec<u8> {
    match value {
        Value::BulkString(bytes) => bytes,
        Value::SimpleString(text) => text.into_bytes(),
        Value::Int(n) => n.to_string().into_bytes(),
        Value::Double(d) => format!("{d:?}").into_bytes(),
        other => panic!("not a string: {other:?}"),
    }
}

/// A key's type, expiry time (PEXPIRETIME) and contents.
type KeyState = (String, i64, Vec<Vec<u8>>);

/// Every key of the selected database: type, expiry time, contents
/// (sets and hashes sorted, scores as numbers).
fn snapshot(con: &mut Connection) -> BTreeMap<Vec<u8>, KeyState> {
    let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(con)
            .unwrap();
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let keys: Vec<Vec<u8>> = keys.into_iter().collect();
    let mut out = BTreeMap::new();
    for chunk in keys.chunks(500) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("TYPE").arg(key).cmd("PEXPIRETIME").arg(key);
        }
        let meta: Vec<Value> = pipe.query(con).unwrap();
        let mut pipe = redis::pipe();
        let mut kinds = Vec::new();
        for (key, pair) in chunk.iter().zip(meta.chunks(2)) {
            let kind = String::from_utf8(bytes(pair[0].clone())).unwrap();
            let Value::Int(at) = pair[1] else {
                panic!("PEXPIRETIME: {:?}", pair[1])
            };
            match kind.as_str() {
                "string" => pipe.cmd("GET").arg(key),
                "list" => pipe.cmd("LRANGE").arg(key).arg(0).arg(-1),
                "set" => pipe.cmd("SMEMBERS").arg(key),
                "zset" => pipe.cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES"),
                "hash" => pipe.cmd("HGETALL").arg(key),
                other => panic!("type {other}"),
            };
            kinds.push((key.clone(), kind, at));
        }
        let values: Vec<Value> = pipe.query(con).unwrap();
        for ((key, kind, at), value) in kinds.into_iter().zip(values) {
            let mut contents = if kind == "string" {
                vec![bytes(value)]
            } else {
                items(value)
            };
            match kind.as_str() {
                "set" => contents.sort(),
                "hash" => {
                    let mut pairs: Vec<Vec<Vec<u8>>> =
                        contents.chunks(2).map(|p| p.to_vec()).collect();
                    pairs.sort();
                    contents = pairs.concat();
                }
                "zset" => {
                    for pair in contents.chunks_mut(2) {
                        let score: f64 = std::str::from_utf8(&pair[1]).unwrap().parse().unwrap();
                        pair[1] = format!("{score:?}").into_bytes();
                    }
                }
                _ => {}
            }
            out.insert(key, (kind, at, contents));
        }
    }
    out
}

#[test]
fn a_redis_dump_imports_whole() {
    let work = tempfile::tempdir().unwrap();
    let redis_dir = work.path().join("redis");
    std::fs::create_dir(&redis_dir).unwrap();
    let redis_server = start_redis(&redis_dir);
    let mut redis = redis_connect(&redis_server).unwrap();
    redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query::<()>(&mut redis)
        .unwrap();
    let short_lived = fill(&mut redis);
    // A function library: Engram has no Lua, the import passes it over.
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=lib\nredis.register_function('one', function() return 1 end)")
        .query::<String>(&mut redis)
        .unwrap();
    redis::cmd("SAVE").query::<()>(&mut redis).unwrap();
    // Past the short-lived keys' expiry before the import starts.
    std::thread::sleep(Duration::from_millis(1600));
    let rdb = redis_dir.join("dump.rdb");

    // A damaged copy first: refused, the offset named, nothing created.
    let data = work.path().join("data");
    let mut damaged = std::fs::read(&rdb).unwrap();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x55;
    let damaged_file = work.path().join("damaged.rdb");
    std::fs::write(&damaged_file, &damaged).unwrap();
    let output = import(&damaged_file, &data);
    assert!(!output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("offset"), "{}", text(&output));
    let truncated_file = work.path().join("truncated.rdb");
    std::fs::write(&truncated_file, &damaged[..middle]).unwrap();
    let output = import(&truncated_file, &data);
    assert!(!output.status.success(), "{}", text(&output));
    assert!(!data.exists(), "a refused file created the directory");

    let started = Instant::now();
    let output = import(&rdb, &data);
    let took = started.elapsed();
    let report = text(&output);
    assert!(output.status.success(), "{report}");
    assert!(
        report.contains(&format!("skipped: {short_lived} already expired")),
        "{report}"
    );
    for db in DATABASES {
        assert!(report.contains(&format!("db{db}: ")), "{report}");
    }
    assert!(
        report.contains("1 function libraries not imported"),
        "{report}"
    );
    eprintln!("import took {took:.2?}:\n{report}");

    let served = serve(&data, &[]);
    let mut engram = connect(served.port);
    // A second import while the server holds the directory: refused.
    let output = import(&rdb, &data);
    assert!(!output.status.success());
    assert!(text(&output).contains("in use"), "{}", text(&output));

    let mut total = 0;
    for db in DATABASES {
        for con in [&mut redis, &mut engram] {
            redis::cmd("SELECT").arg(db).query::<()>(con).unwrap();
        }
        let want = snapshot(&mut redis);
        let got = snapshot(&mut engram);
        assert!(
            want.len() > 1000,
            "db{db}: only {} keys in Redis",
            want.len()
        );
        let missing: Vec<_> = want
            .keys()
            .filter(|k| !got.contains_key(*k))
            .take(5)
            .collect();
        let extra: Vec<_> = got
            .keys()
            .filter(|k| !want.contains_key(*k))
            .take(5)
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "db{db}: missing {missing:?}, extra {extra:?}"
        );
        for (key, want) in &want {
            assert_eq!(
                &got[key],
                want,
                "db{db} key {}",
                String::from_utf8_lossy(key)
            );
        }
        total += want.len();
    }
    assert!(
        report.contains(&format!("imported {total} keys")),
        "{report}"
    );

    // A stream (RDB_TYPE_STREAM_LISTPACKS_2, with a group) is imported too.
    redis::cmd("SELECT").arg(0).query::<()>(&mut redis).unwrap();
    redis::cmd("XADD")
        .arg("events")
        .arg("*")
        .arg("field")
        .arg("value")
        .query::<String>(&mut redis)
        .unwrap();
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("events")
        .arg("g")
        .arg("0")
        .query::<()>(&mut redis)
        .unwrap();
    redis::cmd("SAVE").query::<()>(&mut redis).unwrap();
    let elsewhere = work.path().join("elsewhere");
    let output = import(&rdb, &elsewhere);
    assert!(output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("stream: 1"), "{}", text(&output));
    eprintln!("{}", text(&output));
}
