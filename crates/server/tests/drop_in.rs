//! What every Redis client and Redis's own test suite do first, and the
//! bugs a Redis user met, each as Redis 7.0.15 answers: FUNCTION FLUSH,
//! every Redis parameter in CONFIG GET/SET, INFO's sections, the version,
//! WATCH across databases, a no-op SMOVE, RANDOMKEY, far PEXPIREAT.
//!
//! Where a reply can be compared, a redis-server 7.0 (from PATH) runs
//! beside Engram and both get the same commands.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::{redis_con, start, Client, RedisServer};

/// The reply to `args` as text, error or not, for comparing two servers.
fn reply(con: &mut redis::Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    match cmd.query::<redis::Value>(con) {
        Ok(value) => format!("{value:?}"),
        Err(e) => format!("error: {}", e.detail().unwrap_or_default()),
    }
}

#[test]
fn suite_setup_commands() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("FUNCTION FLUSH", "OK"),
        ("FUNCTION FLUSH ASYNC", "OK"),
        ("FUNCTION FLUSH SYNC", "OK"),
        (
            "FUNCTION FLUSH LATER",
            "(error) ERR FUNCTION FLUSH only supports SYNC|ASYNC option",
        ),
        ("FUNCTION LIST", "[]"),
        ("FUNCTION LIST WITHCODE LIBRARYNAME x*", "[]"),
        ("FUNCTION LIST BOGUS", "(error) ERR Unknown argument BOGUS"),
        ("FUNCTION DELETE lib", "(error) ERR Library not found"),
        (
            "FUNCTION KILL",
            "(error) NOTBUSY No scripts in execution right now.",
        ),
        (
            "FUNCTION STATS",
            "[\"running_script\", (nil), \"engines\", [\"LUA\", [\"libraries_count\", (integer) 0, \"functions_count\", (integer) 0]]]",
        ),
        ("FUNCTION LOAD x", "(error) ERR Missing library metadata"),
        (
            "FUNCTION NOPE",
            "(error) ERR unknown subcommand 'NOPE'. Try FUNCTION HELP.",
        ),
        (
            "FUNCTION",
            "(error) ERR wrong number of arguments for 'function' command",
        ),
    ]);
    let hello = c.call("HELLO 3");
    assert!(hello.contains("\"version\", \"7.0.15\""), "{hello}");
    server.shutdown().unwrap();
}

/// Every parameter redis-server 7.0 lists is listed here too, and a
/// parameter without effect here is checked exactly as Redis checks it.
#[test]
fn config_parameters_match_redis() {
    let redis = RedisServer::start();
    let (server, _dir) = start();
    let mut ours = redis_con(server.addr);
    let mut theirs = redis_con(redis.addr);
    let names = |con: &mut redis::Connection| -> HashSet<String> {
        let pairs: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("*").query(con).unwrap();
        pairs.chunks(2).map(|pair| pair[0].clone()).collect()
    };
    let (ours_names, theirs_names) = (names(&mut ours), names(&mut theirs));
    let missing: Vec<_> = theirs_names.difference(&ours_names).collect();
    assert!(missing.is_empty(), "CONFIG GET * lacks {missing:?}");

    // Same replies, good values and bad, for parameters of every kind.
    for args in [
        &["CONFIG", "SET", "zset-max-ziplist-entries", "16"][..],
        &["CONFIG", "GET", "zset-max-listpack-entries"],
        &["CONFIG", "GET", "zset-max-ziplist-entries"],
        &["CONFIG", "SET", "list-compress-depth", "-1"],
        &["CONFIG", "SET", "list-compress-depth", "x"],
        &["CONFIG", "SET", "hash-max-listpack-value", "1kb"],
        &["CONFIG", "GET", "hash-max-listpack-value"],
        &["CONFIG", "SET", "hash-max-listpack-value", "lots"],
        &["CONFIG", "SET", "activedefrag", "maybe"],
        &["CONFIG", "SET", "lazyfree-lazy-user-del", "YES"],
        &["CONFIG", "GET", "lazyfree-lazy-user-del"],
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
        &["CONFIG", "GET", "maxmemory-policy"],
        &["CONFIG", "SET", "maxmemory-policy", "most-keys"],
        &["CONFIG", "SET", "daemonize", "yes"],
        &["CONFIG", "SET", "hz", "100", "hz", "50"],
        &[
            "CONFIG",
            "SET",
            "slowlog-max-len",
            "10",
            "set-max-intset-entries",
            "32",
        ],
        &["CONFIG", "GET", "slowlog-max-len", "set-max-intset-entries"],
        &["CONFIG", "SET", "save", "100 x"],
        &["CONFIG", "SET", "save", "100 10"],
        &["CONFIG", "GET", "save"],
        &["CONFIG", "SET", "notify-keyspace-events", "Q"],
        &[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "pubsub 32mb 8mb 60",
        ],
        &["CONFIG", "SET", "client-output-buffer-limit", "vip 1 1 1"],
    ] {
        if args[1] == "GET" {
            // Redis orders the pairs by its hash table: compare as maps.
            let map = |con: &mut redis::Connection| -> HashMap<String, String> {
                redis::cmd(args[0]).arg(&args[1..]).query(con).unwrap()
            };
            assert_eq!(map(&mut ours), map(&mut theirs), "{args:?}");
        } else {
            assert_eq!(reply(&mut ours, args), reply(&mut theirs, args), "{args:?}");
        }
    }
    // A refused pair changes nothing, even after a good one.
    let refused = reply(
        &mut ours,
        &["CONFIG", "SET", "hz", "20", "activedefrag", "maybe"],
    );
    assert!(
        refused.contains("argument must be 'yes' or 'no'"),
        "{refused}"
    );
    assert_eq!(
        reply(&mut ours, &["CONFIG", "GET", "hz"]),
        reply(&mut theirs, &["CONFIG", "GET", "hz"])
    );
    server.shutdown().unwrap();
}

/// Redis parameters in the configuration file: accepted and shown.
#[test]
fn redis_parameters_in_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redis.conf");
    std::fs::write(
        &path,
        "zset-max-ziplist-entries 64\nactivedefrag yes\nsave 900 1 300 10\nmaxmemory 0\n",
    )
    .unwrap();
    let config = engram_server::Config::from_file(&path).unwrap();
    let (server, _data) = common::start_with(config);
    let mut c = Client::connect(&server);
    c.script(&[
        (
            "CONFIG GET zset-max-listpack-entries",
            "[\"zset-max-listpack-entries\", \"64\"]",
        ),
        ("CONFIG GET activedefrag", "[\"activedefrag\", \"yes\"]"),
        ("CONFIG GET save", "[\"save\", \"900 1 300 10\"]"),
        ("CONFIG GET maxmemory", "[\"maxmemory\", \"0\"]"),
        ("CONFIG SET maxmemory-policy allkeys-lru", "OK"),
        // What Engram cannot do yet is refused, not silently ignored.
        (
            "CONFIG SET tls-ciphers HIGH",
            "(error) ERR CONFIG SET failed (possibly related to argument 'tls-ciphers') - \
             Engram's TLS (rustls) offers its own set of modern cipher suites and takes no \
             OpenSSL cipher list: tls-ciphers and tls-ciphersuites must be empty",
        ),
    ]);
    server.shutdown().unwrap();
    std::fs::write(&path, "port 7000\nmaxmemory-policy volatile-ttl\n").unwrap();
    engram_server::Config::from_file(&path).expect("every policy is accepted");
    std::fs::write(&path, "activedefrag perhaps\n").unwrap();
    let refused = engram_server::Config::from_file(&path).unwrap_err();
    assert!(
        refused.contains("redis.conf:1") && refused.contains("argument must be 'yes' or 'no'"),
        "{refused}"
    );
}

#[test]
fn info_sections_like_redis() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[("SET k v", "OK"), ("GET k", "\"v\"")]);
    c.call("INCR k");
    c.call("GET");
    for section in ["", "default", "all", "everything"] {
        let info = c.call(format!("INFO {section}").trim());
        for field in [
            "redis_version:7.0.15",
            "used_cpu_user:",
            "used_memory:",
            "role:master",
            "cluster_enabled:0",
            "# Modules",
            "# Errorstats",
            "errorstat_ERR:count=2",
            "total_error_replies:2",
        ] {
            assert!(info.contains(field), "INFO {section} lacks {field}");
        }
        let stats = info.contains("rejected_calls");
        assert_eq!(
            stats,
            section == "all" || section == "everything",
            "INFO {section}"
        );
    }
    let stats = c.call("INFO commandSTATS");
    assert!(!stats.contains("used_memory"), "{stats}");
    assert!(
        stats.contains("cmdstat_set:calls=1,") && stats.contains("cmdstat_incr:calls=1,"),
        "{stats}"
    );
    assert!(
        stats.contains("cmdstat_incr:calls=1,") && stats.contains("failed_calls=1"),
        "{stats}"
    );
    assert!(stats.contains("cmdstat_get:calls=1,") && stats.contains("rejected_calls=1"));
    let two = c.call("INFO cpu all");
    assert_eq!(two.matches("used_cpu_user_children").count(), 1, "{two}");
    let cpu = c.call("INFO cpu");
    assert!(cpu.contains("used_cpu_sys:") && !cpu.contains("used_memory"));
    c.script(&[("CONFIG RESETSTAT", "OK")]);
    let reset = c.call("INFO errorstats");
    assert!(!reset.contains("errorstat_ERR"), "{reset}");
    server.shutdown().unwrap();
}

/// A key watched in one database is not touched by a write to the same
/// name in another.
#[test]
fn watch_remembers_the_database() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SELECT 5", "OK"),
        ("SET x 30", "OK"),
        ("WATCH x", "OK"),
        ("SELECT 1", "OK"),
        ("SET x 10", "OK"),
        ("SELECT 5", "OK"),
        ("MULTI", "OK"),
        ("PING", "QUEUED"),
        ("EXEC", "[PONG]"),
        ("WATCH x", "OK"),
        ("SET x 31", "OK"),
        ("MULTI", "OK"),
        ("PING", "QUEUED"),
        ("EXEC", "(nil array)"),
    ]);
    server.shutdown().unwrap();
}

/// SMOVE of a member the destination already has changes the source only:
/// a WATCH on the destination stays untouched.
#[test]
fn smove_to_a_set_that_has_the_member_leaves_it_alone() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    let mut other = Client::connect(&server);
    c.script(&[
        ("SADD src a b", "(integer) 2"),
        ("SADD dst a", "(integer) 1"),
        ("WATCH dst", "OK"),
    ]);
    other.script(&[("SMOVE src dst a", "(integer) 1")]);
    c.script(&[
        ("MULTI", "OK"),
        ("PING", "QUEUED"),
        ("EXEC", "[PONG]"),
        ("SMEMBERS src", "[\"b\"]"),
        ("SMEMBERS dst", "[\"a\"]"),
        ("WATCH src", "OK"),
    ]);
    other.script(&[("SMOVE src dst b", "(integer) 1")]);
    c.script(&[("MULTI", "OK"), ("PING", "QUEUED"), ("EXEC", "(nil array)")]);
    server.shutdown().unwrap();
}

#[test]
fn randomkey_spreads_over_the_keys() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    for i in 0..100 {
        c.call(&format!("SET key{i} v"));
    }
    c.call("SADD aset m");
    let picked: HashSet<String> = (0..200).map(|_| c.call("RANDOMKEY")).collect();
    // 200 draws over 101 keys: far more than a handful of distinct ones
    // unless the draw is stuck.
    assert!(picked.len() > 40, "only {} distinct keys", picked.len());
    c.call("SELECT 3");
    assert_eq!(c.call("RANDOMKEY"), "(nil)");
    c.call("SET only here");
    for _ in 0..10 {
        assert_eq!(c.call("RANDOMKEY"), "\"only\"");
    }
    server.shutdown().unwrap();
}

/// Expiry times at the ends of Redis's range, compared with Redis.
#[test]
fn far_expiry_times_like_redis() {
    let redis = RedisServer::start();
    let (server, _dir) = start();
    let mut ours = redis_con(server.addr);
    let mut theirs = redis_con(redis.addr);
    for args in [
        &["SET", "foo", "bar"][..],
        &["PEXPIREAT", "foo", "9223372036854770000"],
        &["PERSIST", "foo"],
        &["EXPIRE", "foo", "9223370399119966"],
        &["EXPIRE", "foo", "9223372036854776"],
        &["EXPIRE", "foo", "-9223372036854776"],
        &["PEXPIRE", "foo", "9223372036854770000"],
        &["TTL", "foo"],
        &["PEXPIREAT", "foo", "-9223372036854770000"],
        &["TTL", "foo"],
        &["SET", "foo", "bar", "EX", "9223372036854776"],
    ] {
        assert_eq!(reply(&mut ours, args), reply(&mut theirs, args), "{args:?}");
    }
    // Accepted, and as good as never: far beyond any lifetime.
    reply(&mut ours, &["SET", "far", "v"]);
    let set: i64 = redis::cmd("PEXPIREAT")
        .arg("far")
        .arg("9223372036854770000")
        .query(&mut ours)
        .unwrap();
    assert_eq!(set, 1);
    let ttl: i64 = redis::cmd("TTL").arg("far").query(&mut ours).unwrap();
    assert!(ttl > 250_000_000_000, "{ttl}");
    server.shutdown().unwrap();
}

/// DEBUG is refused unless the configuration allows it, as in Redis; then
/// the subcommands Redis's test helpers use work.
#[test]
fn debug_subcommands() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    let refused = c.call("DEBUG SLEEP 0");
    assert!(
        refused.starts_with("(error) ERR DEBUG command not allowed."),
        "{refused}"
    );
    server.shutdown().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("engram.conf");
    std::fs::write(&path, "enable-debug-command local\n").unwrap();
    let config = engram_server::Config::from_file(&path).unwrap();
    let (server, _data) = common::start_with(config);
    let mut c = Client::connect(&server);
    c.script(&[
        ("CONFIG SET enable-debug-command yes", "(error) ERR CONFIG SET failed (possibly related to argument 'enable-debug-command') - can't set immutable config"),
        ("DEBUG LOG hello", "OK"),
        ("DEBUG QUICKLIST-PACKED-THRESHOLD 1b", "OK"),
        ("DEBUG QUICKLIST-PACKED-THRESHOLD lots", "(error) ERR invalid size 'lots'"),
        ("DEBUG SLEEP x", "(error) ERR value is not a valid float"),
        ("DEBUG SLEEP", "(error) ERR wrong number of arguments for 'debug|sleep' command"),
        ("DEBUG NOPE", "(error) ERR unknown subcommand 'NOPE'. Try DEBUG HELP."),
        ("DEBUG OBJECT nokey", "(error) ERR no such key"),
        ("SET k 12", "OK"),
    ]);
    c.script(&[
        ("DEBUG PROTOCOL bignum", "\"1234567999999999999999999999999999999\""),
        ("DEBUG PROTOCOL attrib", "\"Some real reply following the attribute\""),
        ("DEBUG PROTOCOL true", "(integer) 1"),
        ("DEBUG PROTOCOL double", "\"3.141\""),
        ("DEBUG PROTOCOL map", "[(integer) 0, (integer) 0, (integer) 1, (integer) 1, (integer) 2, (integer) 0]"),
        ("DEBUG PROTOCOL push", "(error) ERR RESP2 is not supported by this command"),
        ("DEBUG PROTOCOL nope", "(error) ERR Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false"),
    ]);
    c.call("HELLO 3");
    c.script(&[
        ("DEBUG PROTOCOL bignum", "(big number) 1234567999999999999999999999999999999"),
        ("DEBUG PROTOCOL attrib", "(attributes [\"key-popularity\", [\"key:123\", (integer) 90]]) \"Some real reply following the attribute\""),
        ("DEBUG PROTOCOL true", "(boolean) t"),
        ("DEBUG PROTOCOL set", "[(integer) 0, (integer) 1, (integer) 2]"),
        ("DEBUG PROTOCOL map", "[(integer) 0, (boolean) f, (integer) 1, (boolean) t, (integer) 2, (boolean) f]"),
        ("DEBUG PROTOCOL push", "(push) [\"server-cpu-usage\", (integer) 42]"),
    ]);
    assert_eq!(c.reply(), "\"Some real reply following the push reply\"");
    c.script(&[
        (
            "DEBUG PROTOCOL verbatim",
            "\"txt:This is a verbatim\\nstring\"",
        ),
        ("PING", "PONG"),
    ]);
    c.call("HELLO 2");
    let object = c.call("DEBUG OBJECT k");
    assert!(object.contains("encoding:int"), "{object}");
    let started = Instant::now();
    c.script(&[("DEBUG SLEEP 0.3", "OK")]);
    assert!(started.elapsed() >= Duration::from_millis(300));

    // With active expiry off an expired key waits in the keyspace (counted
    // by DBSIZE, invisible to reads) until it is on again.
    c.script(&[
        ("FLUSHALL", "OK"),
        ("DEBUG SET-ACTIVE-EXPIRE 0", "OK"),
        ("SET gone v PX 20", "OK"),
    ]);
    std::thread::sleep(Duration::from_millis(600));
    c.script(&[
        ("DBSIZE", "(integer) 1"),
        ("DEBUG SET-ACTIVE-EXPIRE 1", "OK"),
    ]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.call("DBSIZE") != "(integer) 0" {
        assert!(
            Instant::now() < deadline,
            "the expired key was never deleted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server.shutdown().unwrap();
}

/// MOVE, compared with Redis reply by reply, then across a restart.
#[test]
fn move_between_databases() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let server = engram_server::Server::start(common::config_in(dir.path())).unwrap();
    let mut ours = redis_con(server.addr);
    let mut theirs = redis_con(redis.addr);
    let script: &[&[&str]] = &[
        &["SET", "s", "v", "EX", "1000"],
        &["HSET", "h", "f", "v"],
        &["EXPIRE", "h", "2000"],
        &["RPUSH", "l", "a", "b"],
        &["SET", "both", "here"],
        &["MOVE", "s", "3"],
        &["MOVE", "h", "3"],
        &["MOVE", "l", "3"],
        &["MOVE", "missing", "3"],
        &["MOVE", "both", "0"],
        &["MOVE", "both", "notanumber"],
        &["MOVE", "both", "99"],
        &["MOVE", "both", "-1"],
        &["SELECT", "3"],
        &["SET", "both", "there"],
        &["SELECT", "0"],
        &["MOVE", "both", "3"],
        &["EXISTS", "s", "h", "l", "both"],
        &["DBSIZE"],
        &["SELECT", "3"],
        &["DBSIZE"],
        &["GET", "s"],
        &["HGETALL", "h"],
        &["LRANGE", "l", "0", "-1"],
        &["GET", "both"],
        &["PERSIST", "l"],
        &["SELECT", "0"],
    ];
    for args in script {
        assert_eq!(reply(&mut ours, args), reply(&mut theirs, args), "{args:?}");
    }
    // TTLs travel with the keys.
    let ttl = |con: &mut redis::Connection, key: &str| -> i64 {
        redis::pipe()
            .cmd("SELECT")
            .arg(3)
            .ignore()
            .cmd("TTL")
            .arg(key)
            .query::<(i64,)>(con)
            .unwrap()
            .0
    };
    assert!((990..=1000).contains(&ttl(&mut ours, "s")));
    assert!((1990..=2000).contains(&ttl(&mut ours, "h")));
    server.shutdown().unwrap();

    let server = engram_server::Server::start(common::config_in(dir.path())).unwrap();
    let mut c = Client::connect(&server);
    c.script(&[
        ("DBSIZE", "(integer) 1"),
        ("SELECT 3", "OK"),
        ("DBSIZE", "(integer) 4"),
        ("GET s", "\"v\""),
        ("HGET h f", "\"v\""),
        ("LRANGE l 0 -1", "[\"a\", \"b\"]"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn object_subcommands() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SET k 1", "OK"),
        ("OBJECT REFCOUNT k", "(integer) 1"),
        ("OBJECT REFCOUNT nokey", "(nil)"),
        ("OBJECT ENCODING k", "\"int\""),
        (
            "OBJECT FREQ k",
            "(error) ERR An LFU maxmemory policy is not selected, access frequency not tracked. \
             Please note that when switching between policies at runtime LRU and LFU data will \
             take some time to adjust.",
        ),
        (
            "OBJECT REFCOUNT",
            "(error) ERR wrong number of arguments for 'object|refcount' command",
        ),
        (
            "OBJECT NOPE k",
            "(error) ERR unknown subcommand 'NOPE'. Try OBJECT HELP.",
        ),
    ]);
    assert!(c.call("OBJECT HELP").contains("REFCOUNT <key>"));
    server.shutdown().unwrap();
}

/// CLIENT PAUSE holds writes (or everything) until UNPAUSE or the
/// deadline; held clients count as blocked.
#[test]
fn client_pause_and_unpause() {
    let (server, _dir) = start();
    let mut admin = Client::connect(&server);
    let mut writer = Client::connect(&server);
    let mut reader = Client::connect(&server);
    let blocked = |c: &mut Client| -> String {
        let info = c.call("INFO clients");
        info.split("\\r\\n")
            .find(|l| l.starts_with("blocked_clients:"))
            .unwrap_or_default()
            .to_string()
    };
    admin.script(&[
        ("SET k v", "OK"),
        ("CLIENT PAUSE 60000 WRITE", "OK"),
        (
            "CLIENT PAUSE 100 SOME",
            "(error) ERR CLIENT PAUSE mode must be WRITE or ALL",
        ),
        ("CLIENT PAUSE -1", "(error) ERR timeout is negative"),
    ]);
    // Reads and read-only transactions go through.
    reader.script(&[
        ("GET k", "\"v\""),
        ("MULTI", "OK"),
        ("GET k", "QUEUED"),
        ("EXEC", "[\"v\"]"),
    ]);
    writer.send("SET k w");
    let deadline = Instant::now() + Duration::from_secs(20);
    while blocked(&mut admin) != "blocked_clients:1" {
        assert!(Instant::now() < deadline, "the write was not held");
        std::thread::sleep(Duration::from_millis(20));
    }
    admin.script(&[("GET k", "\"v\""), ("CLIENT UNPAUSE", "OK")]);
    assert_eq!(writer.reply(), "OK");
    admin.script(&[("GET k", "\"w\"")]);
    assert_eq!(blocked(&mut admin), "blocked_clients:0");

    // A container's writing subcommand is a write (Redis flags XGROUP
    // CREATE, not XGROUP); its reading ones are not.
    admin.script(&[
        ("XADD s 1-1 f v", "\"1-1\""),
        ("CLIENT PAUSE 60000 WRITE", "OK"),
    ]);
    reader.script(&[("XLEN s", "(integer) 1")]);
    writer.send("XGROUP CREATE s g 0");
    let deadline = Instant::now() + Duration::from_secs(20);
    while blocked(&mut admin) != "blocked_clients:1" {
        assert!(Instant::now() < deadline, "XGROUP CREATE was not held");
        std::thread::sleep(Duration::from_millis(20));
    }
    admin.script(&[("XINFO GROUPS s", "[]"), ("CLIENT UNPAUSE", "OK")]);
    assert_eq!(writer.reply(), "OK");

    // ALL holds reads too, until the deadline passes by itself.
    admin.script(&[("CLIENT PAUSE 300 ALL", "OK")]);
    let started = Instant::now();
    reader.script(&[("GET k", "\"w\"")]);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    server.shutdown().unwrap();
}

#[test]
fn client_reply_modes() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.send("CLIENT REPLY OFF");
    c.send("SET a 1");
    c.send("GET a");
    c.send("CLIENT REPLY SKIP");
    c.send("CLIENT REPLY ON");
    assert_eq!(c.reply(), "OK");
    c.send("CLIENT REPLY SKIP");
    c.send("SET b 2");
    c.script(&[
        ("GET b", "\"2\""),
        ("CLIENT REPLY MAYBE", "(error) ERR syntax error"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn role_lolwut_module_bgrewriteaof() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ROLE", "[\"master\", (integer) 0, []]"),
        ("MODULE LIST", "[]"),
        (
            "MODULE LOAD /tmp/x.so",
            "(error) ERR Error loading the extension. Engram does not load Redis modules.",
        ),
        (
            "MODULE NOPE",
            "(error) ERR unknown subcommand 'NOPE'. Try MODULE HELP.",
        ),
        (
            "LOLWUT VERSION x",
            "(error) ERR value is not an integer or out of range",
        ),
        ("HSET h f v", "(integer) 1"),
        (
            "BGREWRITEAOF",
            "Background append only file rewriting started",
        ),
    ]);
    assert!(c.call("LOLWUT").contains("Redis ver. 7.0.15"));
    // The checkpoint it asked for happens.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = c.call("INFO collections");
        if !info.contains("checkpoints:0") {
            break;
        }
        assert!(Instant::now() < deadline, "no checkpoint: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
    server.shutdown().unwrap();
}

/// Over `maxmemory` (noeviction), writes that may grow the data are refused
/// with Redis's OOM error, at queue time inside MULTI too; reads and
/// deletions go on. Compared with Redis.
#[test]
fn maxmemory_noeviction_like_redis() {
    let redis = RedisServer::start();
    let (server, _dir) = start();
    let mut ours = redis_con(server.addr);
    let mut theirs = redis_con(redis.addr);
    let script: &[&[&str]] = &[
        &["SET", "k", "v"],
        &["RPUSH", "l", "a"],
        &["CONFIG", "SET", "maxmemory", "1"],
        &["SET", "k", "w"],
        &["LPUSH", "l", "b"],
        &["GET", "k"],
        &["LPOP", "l"],
        &["DEL", "k"],
        &["MULTI"],
        &["GET", "k"],
        &["EXEC"],
        &["MULTI"],
        &["SET", "a", "1"],
        &["EXEC"],
        &["CONFIG", "SET", "maxmemory", "0"],
        &["SET", "k", "again"],
        &["GET", "k"],
    ];
    for args in script {
        assert_eq!(reply(&mut ours, args), reply(&mut theirs, args), "{args:?}");
    }
    // Over the limit only after queueing (another client lowers it): EXEC
    // itself is refused, and the transaction discarded.
    let mut admin = (redis_con(server.addr), redis_con(redis.addr));
    for args in [&["MULTI"][..], &["SET", "b", "1"]] {
        assert_eq!(reply(&mut ours, args), reply(&mut theirs, args), "{args:?}");
    }
    for con in [&mut admin.0, &mut admin.1] {
        reply(con, &["CONFIG", "SET", "maxmemory", "1"]);
    }
    let aborted = reply(&mut ours, &["EXEC"]);
    assert_eq!(aborted, reply(&mut theirs, &["EXEC"]));
    assert!(
        aborted.contains("Transaction discarded because of: OOM"),
        "{aborted}"
    );
    for args in [&["PING"][..], &["EXISTS", "b"]] {
        assert_eq!(reply(&mut ours, args), reply(&mut theirs, args), "{args:?}");
    }
    for con in [&mut admin.0, &mut admin.1] {
        reply(con, &["CONFIG", "SET", "maxmemory", "0"]);
    }
    // The errors were counted as Redis counts them. (Not ERR: the client
    // library's CLIENT SETINFO on connect is 7.2's, unknown to Redis 7.0.)
    let (info, redis_info) = (
        reply(&mut ours, &["INFO", "errorstats"]),
        reply(&mut theirs, &["INFO", "errorstats"]),
    );
    for line in ["errorstat_OOM:count=4", "errorstat_EXECABORT:count=3"] {
        assert!(
            info.contains(line) && redis_info.contains(line),
            "{info} vs {redis_info}"
        );
    }
    server.shutdown().unwrap();
}

/// SAVE and SHUTDOWN inside MULTI are refused and abort the transaction,
/// as in Redis (Engram's SHUTDOWN used to run at once and stop the server).
#[test]
fn save_and_shutdown_refused_inside_multi() {
    let redis = RedisServer::start();
    let (server, _dir) = start();
    let mut ours = redis_con(server.addr);
    let mut theirs = redis_con(redis.addr);
    for command in ["SAVE", "SHUTDOWN"] {
        for args in [
            &["DEL", "foo"][..],
            &["MULTI"],
            &["SET", "foo", "bar"],
            &[command],
            &["EXEC"],
            &["GET", "foo"],
        ] {
            assert_eq!(reply(&mut ours, args), reply(&mut theirs, args), "{args:?}");
        }
    }
    server.shutdown().unwrap();
}

/// SWAPDB as Redis 7.0.15 answers it (errors included), then what it
/// means: data, counts and TTLs exchanged; WATCH fails only where a
/// watched key exists on either side; inside MULTI; persisted across a
/// restart.
#[test]
fn swapdb_exchanges_databases() {
    let (server, dir, _redis, mut ours, mut theirs) = common::beside_redis();
    common::script_both(
        &mut ours,
        &mut theirs,
        &[
            (
                "SWAPDB",
                "(error) ERR wrong number of arguments for 'swapdb' command",
            ),
            ("SWAPDB 0 x", "(error) ERR invalid second DB index"),
            ("SWAPDB x 0", "(error) ERR invalid first DB index"),
            ("SWAPDB 0 16", "(error) ERR DB index is out of range"),
            ("SWAPDB -1 0", "(error) ERR DB index is out of range"),
            (
                "SWAPDB 0 99999999999",
                "(error) ERR invalid second DB index",
            ),
            ("SET s zero", "OK"),
            ("RPUSH l a b", "(integer) 2"),
            ("EXPIRE l 1000", "(integer) 1"),
            ("SELECT 1", "OK"),
            ("SET s one", "OK"),
            ("SWAPDB 0 1", "OK"),
            ("GET s", "\"zero\""),
            ("DBSIZE", "(integer) 2"),
            ("LRANGE l 0 -1", "[\"a\", \"b\"]"),
            ("SELECT 0", "OK"),
            ("GET s", "\"one\""),
            ("EXISTS l", "(integer) 0"),
            ("SWAPDB 3 3", "OK"),
            // Watched keys: one that exists on a side fails the
            // transaction, one missing on both does not.
            ("WATCH s", "OK"),
            ("SWAPDB 0 1", "OK"),
            ("MULTI", "OK"),
            ("PING", "QUEUED"),
            ("EXEC", "(nil array)"),
            ("WATCH nowhere", "OK"),
            ("SWAPDB 0 1", "OK"),
            ("MULTI", "OK"),
            ("PING", "QUEUED"),
            ("EXEC", "[PONG]"),
            // Inside a transaction, later commands see the swap.
            ("MULTI", "OK"),
            ("SWAPDB 0 1", "QUEUED"),
            ("GET s", "QUEUED"),
            ("EXEC", "[OK, \"zero\"]"),
        ],
    );
    let ttl = ours.call("TTL l");
    let ttl: i64 = ttl.trim_start_matches("(integer) ").parse().unwrap();
    assert!((990..=1000).contains(&ttl), "the TTL moved with l: {ttl}");
    let info = ours.call("INFO keyspace");
    assert!(
        info.contains("db0:keys=2,expires=1") && info.contains("db1:keys=1,expires=0"),
        "{info}"
    );
    drop(ours);
    server.shutdown().unwrap();

    let server = engram_server::Server::start(common::config_in(dir.path())).unwrap();
    let mut c = Client::connect(&server);
    c.script(&[
        ("GET s", "\"zero\""),
        ("LRANGE l 0 -1", "[\"a\", \"b\"]"),
        ("SELECT 1", "OK"),
        ("GET s", "\"one\""),
    ]);
    server.shutdown().unwrap();
}

/// A client blocked on a list in database 9 is served when SWAPDB brings
/// a database holding that list under number 9 (Redis's "SWAPDB awakes
/// blocked client").
#[test]
fn swapdb_wakes_blocked_clients() {
    let (server, _dir) = start();
    let mut blocked = Client::connect(&server);
    blocked.call("SELECT 9");
    blocked.send("BLPOP k 10");
    let mut other = Client::connect(&server);
    other.script(&[("SELECT 1", "OK"), ("RPUSH k v", "(integer) 1")]);
    // Wait until the client is blocked before swapping.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !other.call("CLIENT LIST").contains("cmd=blpop") {
        assert!(Instant::now() < deadline, "BLPOP never blocked");
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    assert_eq!(other.call("SWAPDB 1 9"), "OK");
    assert_eq!(blocked.reply(), "[\"k\", \"v\"]");
    assert!(started.elapsed() < Duration::from_secs(5));
    other.script(&[("SELECT 9", "OK"), ("EXISTS k", "(integer) 0")]);
    server.shutdown().unwrap();
}

/// While CLIENT PAUSE holds writes, expired keys are not deleted (reads
/// find them gone, `expired_keys` does not move, the active cycle skips);
/// after CLIENT UNPAUSE a read deletes them: Redis 7.0's unit/pause test,
/// beside redis-server.
#[test]
fn expired_keys_stay_until_a_client_pause_ends_as_in_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    for c in [&mut e, &mut r] {
        assert_eq!(c.call("MULTI"), "OK");
        c.call("SET foo bar PX 10");
        c.call("SET bar foo PX 10");
        c.call("CLIENT PAUSE 50000 WRITE");
        c.call("EXEC");
    }
    // Past the expiry and past several active cycles.
    std::thread::sleep(std::time::Duration::from_millis(300));
    common::same(&mut e, &mut r, &["GET foo", "GET bar"]);
    for c in [&mut e, &mut r] {
        assert_eq!(common::info_number(c, "stats", "expired_keys"), 0);
    }
    common::same(&mut e, &mut r, &["CLIENT UNPAUSE", "GET foo", "GET bar"]);
    for c in [&mut e, &mut r] {
        assert_eq!(common::info_number(c, "stats", "expired_keys"), 2);
    }
}
