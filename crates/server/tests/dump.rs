//! DUMP and RESTORE against a real redis-server 7.0.15 (on PATH): every
//! type, small (Redis's listpack and intset encodings) and large (its
//! hashtable, skiplist and multi-node quicklist encodings), with and
//! without expiry, both ways: DUMP on Redis then RESTORE on Engram, and
//! DUMP on Engram then RESTORE on Redis, each read back and compared.
//! Then malformed payloads and bad arguments, sent to both servers: the
//! replies must be the same, and the key must be left as it was.

mod common;

use common::{bytes, query_ok as ok, redis_con, snapshot, start, RedisServer};
use redis::{Connection, Value};

fn run(con: &mut Connection, args: &[&[u8]]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(con)
}

/// A reply as text: errors as the server wrote them (`CODE detail`).
fn render(reply: redis::RedisResult<Value>) -> String {
    match reply {
        Ok(value) => format!("{value:?}"),
        Err(e) => format!(
            "(error) {} {}",
            e.code().unwrap_or("?"),
            e.detail().unwrap_or("")
        ),
    }
}

/// Two snapshots are the same (on failure, names the first difference
/// rather than printing thousands of elements).
#[track_caller]
fn assert_same(got: &(String, Vec<Vec<u8>>), want: &(String, Vec<Vec<u8>>), what: &str) {
    assert_eq!(got.0, want.0, "{what}: type");
    assert_eq!(got.1.len(), want.1.len(), "{what}: number of items");
    if let Some(i) = (0..got.1.len()).find(|&i| got.1[i] != want.1[i]) {
        panic!(
            "{what}: item {i} is {:?}, expected {:?}",
            String::from_utf8_lossy(&got.1[i]),
            String::from_utf8_lossy(&want.1[i])
        );
    }
}

fn pttl(con: &mut Connection, key: &[u8]) -> i64 {
    match ok(con, &[b"PTTL", key]) {
        Value::Int(n) => n,
        other => panic!("PTTL replied {other:?}"),
    }
}

/// Commands that build one key (`K` stands for the key), small and large.
fn cases() -> Vec<(&'static str, Vec<Vec<Vec<u8>>>)> {
    fn cmd(words: &[&[u8]]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.to_vec()).collect()
    }
    fn many(command: &str, n: usize, each: impl Fn(usize) -> Vec<Vec<u8>>) -> Vec<Vec<Vec<u8>>> {
        // In chunks, so no single command is huge.
        (0..n)
            .collect::<Vec<_>>()
            .chunks(500)
            .map(|chunk| {
                let mut words = vec![command.as_bytes().to_vec(), b"K".to_vec()];
                for &i in chunk {
                    words.extend(each(i));
                }
                words
            })
            .collect()
    }
    let long = "x".repeat(100);
    vec![
        ("raw string", vec![cmd(&[b"SET", b"K", b"hello world"])]),
        ("int string", vec![cmd(&[b"SET", b"K", b"-1234567890123"])]),
        ("empty string", vec![cmd(&[b"SET", b"K", b""])]),
        (
            "binary string",
            vec![cmd(&[b"SET", b"K", b"\x00\xff\r\n\x80 binary"])],
        ),
        (
            // Redis compresses it with LZF.
            "compressible string",
            vec![cmd(&[b"SET", b"K", "abc".repeat(5000).as_bytes()])],
        ),
        (
            "small list",
            vec![cmd(&[
                b"RPUSH",
                b"K",
                b"a",
                b"12",
                b"-7",
                b"",
                long.as_bytes(),
            ])],
        ),
        (
            "large list",
            many("RPUSH", 5000, |i| {
                vec![format!("element-{i}-{}", "y".repeat(i % 50)).into_bytes()]
            }),
        ),
        (
            "intset",
            vec![cmd(&[b"SADD", b"K", b"1", b"-5", b"300", b"5000000000"])],
        ),
        (
            "small set",
            vec![cmd(&[b"SADD", b"K", b"a", b"b", b"", b"7"])],
        ),
        (
            "large set",
            many("SADD", 3000, |i| vec![format!("m{i}").into_bytes()]),
        ),
        (
            "large int set",
            many("SADD", 3000, |i| vec![(i * 7).to_string().into_bytes()]),
        ),
        (
            "small zset",
            vec![cmd(&[
                b"ZADD", b"K", b"1.5", b"a", b"-inf", b"b", b"inf", b"c", b"0", b"d", b"3", b"e",
            ])],
        ),
        (
            "large zset",
            many("ZADD", 3000, |i| {
                vec![
                    format!("{}", i as f64 / 7.0 - 100.0).into_bytes(),
                    format!("member{i}").into_bytes(),
                ]
            }),
        ),
        (
            "small hash",
            vec![cmd(&[
                b"HSET", b"K", b"f", b"v", b"n", b"42", b"", b"empty",
            ])],
        ),
        (
            "large hash",
            many("HSET", 3000, |i| {
                vec![
                    format!("field{i}").into_bytes(),
                    format!("value{i}").into_bytes(),
                ]
            }),
        ),
        (
            // One value past hash-max-listpack-value: a hashtable.
            "hash with a long value",
            vec![cmd(&[b"HSET", b"K", b"f", "v".repeat(200).as_bytes()])],
        ),
    ]
}

fn build(con: &mut Connection, key: &[u8], commands: &[Vec<Vec<u8>>]) {
    for words in commands {
        let args: Vec<&[u8]> = words
            .iter()
            .map(|w| if w == b"K" { key } else { w.as_slice() })
            .collect();
        ok(con, &args);
    }
}

#[test]
fn every_type_both_ways() {
    let redis_server = RedisServer::start();
    let mut redis = redis_con(redis_server.addr);
    let (engram_server, _dir) = start();
    let mut engram = redis_con(engram_server.addr);
    for (name, commands) in cases() {
        for expiring in [false, true] {
            let key = format!("{name}:{expiring}").into_bytes();
            build(&mut redis, &key, &commands);
            if expiring {
                ok(&mut redis, &[b"PEXPIRE", &key, b"100000"]);
            }
            let original = snapshot(&mut redis, &key);
            let ttl = if expiring {
                pttl(&mut redis, &key).to_string()
            } else {
                "0".to_string()
            };
            // Redis → Engram.
            let payload = bytes(ok(&mut redis, &[b"DUMP", &key]));
            let reply = ok(&mut engram, &[b"RESTORE", &key, ttl.as_bytes(), &payload]);
            assert_eq!(reply, Value::Okay, "{name}");
            assert_eq!(
                snapshot(&mut engram, &key),
                original,
                "{name}: Redis → Engram"
            );
            let engram_ttl = pttl(&mut engram, &key);
            if expiring {
                assert!(
                    (90_000..=100_000).contains(&engram_ttl),
                    "{name}: pttl {engram_ttl}"
                );
            } else {
                assert_eq!(engram_ttl, -1, "{name}");
            }
            // Engram → Redis, under another name.
            let back = format!("{name}:{expiring}:back").into_bytes();
            let payload = bytes(ok(&mut engram, &[b"DUMP", &key]));
            let ttl = if expiring {
                pttl(&mut engram, &key).to_string()
            } else {
                "0".to_string()
            };
            let reply = ok(&mut redis, &[b"RESTORE", &back, ttl.as_bytes(), &payload]);
            assert_eq!(reply, Value::Okay, "{name}");
            assert_eq!(
                snapshot(&mut redis, &back),
                original,
                "{name}: Engram → Redis"
            );
            let redis_ttl = pttl(&mut redis, &back);
            if expiring {
                assert!(
                    (90_000..=100_000).contains(&redis_ttl),
                    "{name}: pttl {redis_ttl}"
                );
            } else {
                assert_eq!(redis_ttl, -1, "{name}");
            }
        }
    }
    // Redis's compact encodings were among those exercised.
    let mut encodings: Vec<String> = Vec::new();
    for key in [
        "small list:false",
        "intset:false",
        "small zset:false",
        "small hash:false",
    ] {
        encodings.push(
            String::from_utf8(bytes(ok(
                &mut redis,
                &[b"OBJECT", b"ENCODING", key.as_bytes()],
            )))
            .unwrap(),
        );
    }
    assert_eq!(encodings, ["quicklist", "intset", "listpack", "listpack"]);
    for key in ["large set:false", "large zset:false", "large hash:false"] {
        let encoding = bytes(ok(&mut redis, &[b"OBJECT", b"ENCODING", key.as_bytes()]));
        assert!(encoding == b"hashtable" || encoding == b"skiplist", "{key}");
    }
}

/// Payloads Redis made with its small encodings turned off altogether
/// (every hash, set and sorted set a hashtable or skiplist).
#[test]
fn without_compact_encodings() {
    let redis_server = RedisServer::start();
    let mut redis = redis_con(redis_server.addr);
    for (name, value) in [
        ("hash-max-listpack-entries", "0"),
        ("zset-max-listpack-entries", "0"),
        ("set-max-intset-entries", "0"),
        ("list-max-listpack-size", "1"),
    ] {
        ok(
            &mut redis,
            &[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()],
        );
    }
    let (engram_server, _dir) = start();
    let mut engram = redis_con(engram_server.addr);
    for (name, commands) in cases() {
        let key = name.as_bytes();
        build(&mut redis, key, &commands);
        let original = snapshot(&mut redis, key);
        let payload = bytes(ok(&mut redis, &[b"DUMP", key]));
        ok(&mut engram, &[b"RESTORE", key, b"0", &payload]);
        assert_same(&snapshot(&mut engram, key), &original, name);
    }
}

/// Quicklist nodes holding one large element as is (PLAIN containers):
/// Redis makes them for elements past its packed threshold, which DEBUG
/// lowers here from 1 GB.
#[test]
fn plain_quicklist_nodes() {
    let redis_server = RedisServer::start();
    let mut redis = redis_con(redis_server.addr);
    ok(
        &mut redis,
        &[b"DEBUG", b"QUICKLIST-PACKED-THRESHOLD", b"100"],
    );
    let big = "p".repeat(500);
    ok(
        &mut redis,
        &[
            b"RPUSH",
            b"l",
            b"small",
            big.as_bytes(),
            b"tail",
            big.as_bytes(),
        ],
    );
    let payload = bytes(ok(&mut redis, &[b"DUMP", b"l"]));
    // Type 18 (quicklist 2) with a node of container 1 (plain).
    assert_eq!(payload[0], 18);
    let (engram_server, _dir) = start();
    let mut engram = redis_con(engram_server.addr);
    ok(&mut engram, &[b"RESTORE", b"l", b"0", &payload]);
    assert_same(
        &snapshot(&mut engram, b"l"),
        &snapshot(&mut redis, b"l"),
        "plain nodes",
    );
}

#[test]
fn malformed_payloads_and_arguments_like_redis() {
    let redis_server = RedisServer::start();
    let mut redis = redis_con(redis_server.addr);
    let (engram_server, _dir) = start();
    let mut engram = redis_con(engram_server.addr);
    for con in [&mut redis, &mut engram] {
        ok(con, &[b"RPUSH", b"src", b"a", b"b", b"c"]);
        ok(con, &[b"SET", b"victim", b"original"]);
        ok(con, &[b"SADD", b"set", b"x"]);
    }
    let good = bytes(ok(&mut redis, &[b"DUMP", b"src"]));
    let footer = good.len() - 10;
    let mut flipped_crc = good.clone();
    *flipped_crc.last_mut().unwrap() ^= 1;
    let mut flipped_body = good.clone();
    flipped_body[3] ^= 0x40;
    let mut newer = good.clone();
    newer[footer] = 11;
    // Nonsense values behind a correct checksum: a list whose length
    // prefix is unknown, a list of 2^63 elements, a stream, an empty set, a
    // set with a member twice.
    let mut bad_value = vec![1u8, 0x85, 0xff];
    seal(&mut bad_value);
    let mut huge_list = b"\x01\x81\x7f\xff\xff\xff\xff\xff\xff\xffa".to_vec();
    seal(&mut huge_list);
    let mut stream = b"\x0f\x00".to_vec();
    seal(&mut stream);
    let mut empty_set = b"\x02\x00".to_vec();
    seal(&mut empty_set);
    let mut dup_set = b"\x02\x02\x01a\x01a".to_vec();
    seal(&mut dup_set);
    let truncated = &good[..good.len() / 2];
    let cases: Vec<Vec<&[u8]>> = vec![
        vec![b"RESTORE", b"victim", b"0", &good],
        vec![b"RESTORE", b"victim", b"0", b"...", b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", truncated, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", &flipped_crc, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", &flipped_body, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", &newer, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", &bad_value, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", &huge_list, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", &stream, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", &empty_set, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", &dup_set, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"-1", &good, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"abc", &good, b"REPLACE"],
        vec![b"RESTORE", b"victim", b"0", &good, b"BOGUS"],
        vec![b"RESTORE", b"victim", b"0", &good, b"IDLETIME", b"-1"],
        vec![b"RESTORE", b"victim", b"0", &good, b"IDLETIME", b"x"],
        vec![b"RESTORE", b"victim", b"0", &good, b"FREQ", b"256"],
        vec![
            b"RESTORE",
            b"victim",
            b"0",
            &good,
            b"IDLETIME",
            b"1",
            b"FREQ",
            b"1",
        ],
        vec![b"RESTORE", b"victim", b"0", &good, b"IDLETIME"],
        vec![b"RESTORE", b"victim", b"0"],
        vec![b"RESTORE", b"set", b"0", &good],
        vec![b"DUMP", b"nosuchkey"],
        vec![b"DUMP"],
    ];
    for args in cases {
        let from_redis = render(run(&mut redis, &args));
        let from_engram = render(run(&mut engram, &args));
        let shown: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(&a[..a.len().min(12)]).into_owned())
            .collect();
        assert_eq!(from_engram, from_redis, "{shown:?}");
        for con in [&mut redis, &mut engram] {
            assert_eq!(
                snapshot(con, b"victim"),
                ("string".into(), vec![b"original".to_vec()]),
                "{shown:?} changed the key"
            );
        }
    }
    // The replies Redis 7.0.15 gives, spelled out.
    assert_eq!(
        render(run(&mut engram, &[b"RESTORE", b"victim", b"0", &good])),
        "(error) BUSYKEY Target key name already exists."
    );
    assert_eq!(
        render(run(
            &mut engram,
            &[b"RESTORE", b"victim", b"0", &flipped_crc, b"REPLACE"]
        )),
        "(error) ERR DUMP payload version or checksum are wrong"
    );
    assert_eq!(
        render(run(
            &mut engram,
            &[b"RESTORE", b"victim", b"0", &bad_value, b"REPLACE"]
        )),
        "(error) ERR Bad data format"
    );
    assert_eq!(
        render(run(
            &mut engram,
            &[b"RESTORE", b"victim", b"-1", &good, b"REPLACE"]
        )),
        "(error) ERR Invalid TTL value, must be >= 0"
    );
}

#[test]
fn replace_absttl_and_expired_restores() {
    let (engram_server, _dir) = start();
    let mut engram = redis_con(engram_server.addr);
    ok(&mut engram, &[b"HSET", b"h", b"f", b"v"]);
    ok(&mut engram, &[b"SET", b"s", b"text"]);
    let hash = bytes(ok(&mut engram, &[b"DUMP", b"h"]));
    let string = bytes(ok(&mut engram, &[b"DUMP", b"s"]));
    // A string replaced by a hash and back, each with its expiry.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = (now + 50_000).to_string();
    ok(
        &mut engram,
        &[
            b"RESTORE",
            b"s",
            at.as_bytes(),
            &hash,
            b"REPLACE",
            b"ABSTTL",
        ],
    );
    assert_eq!(
        snapshot(&mut engram, b"s"),
        ("hash".into(), vec![b"f".to_vec(), b"v".to_vec()])
    );
    assert!((40_000..=50_000).contains(&pttl(&mut engram, b"s")));
    ok(&mut engram, &[b"RESTORE", b"s", b"0", &string, b"REPLACE"]);
    assert_eq!(
        snapshot(&mut engram, b"s"),
        ("string".into(), vec![b"text".to_vec()])
    );
    assert_eq!(pttl(&mut engram, b"s"), -1);
    // An absolute expiry in the past: OK, and the key is gone (REPLACE) or
    // never made.
    let past = (now - 1000).to_string();
    assert_eq!(
        ok(
            &mut engram,
            &[
                b"RESTORE",
                b"s",
                past.as_bytes(),
                &hash,
                b"REPLACE",
                b"ABSTTL"
            ]
        ),
        Value::Okay
    );
    assert_eq!(snapshot(&mut engram, b"s").0, "none");
    ok(
        &mut engram,
        &[b"RESTORE", b"new", past.as_bytes(), &hash, b"ABSTTL"],
    );
    assert_eq!(snapshot(&mut engram, b"new").0, "none");
    // Inside MULTI, and surviving a restart.
    let dir = _dir.path().to_path_buf();
    ok(&mut engram, &[b"MULTI"]);
    run(&mut engram, &[b"RESTORE", b"m", b"0", &hash]).ok();
    run(&mut engram, &[b"RESTORE", b"n", b"100000", &string]).ok();
    ok(&mut engram, &[b"EXEC"]);
    drop(engram);
    engram_server.shutdown().unwrap();
    let restarted = engram_server::Server::start(common::config_in(&dir)).unwrap();
    let mut engram = redis_con(restarted.addr);
    assert_eq!(
        snapshot(&mut engram, b"m"),
        ("hash".into(), vec![b"f".to_vec(), b"v".to_vec()])
    );
    assert_eq!(
        snapshot(&mut engram, b"n"),
        ("string".into(), vec![b"text".to_vec()])
    );
    assert!(pttl(&mut engram, b"n") > 90_000);
}

/// Makes `body` a DUMP payload (version 10, CRC-64).
fn seal(body: &mut Vec<u8>) {
    engram_server::rdb::payload::seal(body);
}
