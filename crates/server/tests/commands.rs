//! Every command family over real TCP, reply by reply, as Redis 7 answers.
//!
//! Each case is a command line and the reply rendered the way redis-cli
//! prints it: `OK`, `(integer) 1`, `"bar"`, `(nil)`, `(error) ERR ...`,
//! `[a, b]` for arrays. The scripts run in order on one connection, so they
//! read like a redis-cli session.

mod common;

use std::io::Read;
use std::time::Duration;

use common::{info_number, start, start_with, Client, NOT_INT, SYNTAX};
use engram_server::{Config, Server};

const WRONG_ARGS_GET: &str = "(error) ERR wrong number of arguments for 'get' command";

#[test]
fn strings() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("GET k", "(nil)"),
        ("SET k v", "OK"),
        ("GET k", "\"v\""),
        ("GET", WRONG_ARGS_GET),
        ("GET a b", WRONG_ARGS_GET),
        ("SET k v2 NX", "(nil)"),
        ("SET k v2 XX", "OK"),
        ("SET new v XX", "(nil)"),
        ("SET k v3 GET", "\"v2\""),
        ("SET k v NX XX", SYNTAX),
        ("SET k v EX 10 PX 100", SYNTAX),
        (
            "SET k v EX 0",
            "(error) ERR invalid expire time in 'set' command",
        ),
        (
            "SET k v EX -5",
            "(error) ERR invalid expire time in 'set' command",
        ),
        ("SET k v EX ten", NOT_INT),
        ("SET k v FOO", SYNTAX),
        ("SET k v EX 100", "OK"),
        ("SET k v2 KEEPTTL", "OK"),
        ("GET k", "\"v2\""),
        ("SETNX k x", "(integer) 0"),
        ("SETNX fresh x", "(integer) 1"),
        ("SETEX se 100 val", "OK"),
        (
            "SETEX se 0 val",
            "(error) ERR invalid expire time in 'setex' command",
        ),
        ("PSETEX pse 100000 val", "OK"),
        ("MSET a 1 b 2 c 3", "OK"),
        (
            "MSET a 1 b",
            "(error) ERR wrong number of arguments for 'mset' command",
        ),
        ("MGET a b nope c", "[\"1\", \"2\", (nil), \"3\"]"),
        ("MSETNX a 9 z 9", "(integer) 0"),
        ("GET z", "(nil)"),
        ("MSETNX y 8 z 9", "(integer) 1"),
        ("MGET y z", "[\"8\", \"9\"]"),
        ("INCR counter", "(integer) 1"),
        ("INCRBY counter 41", "(integer) 42"),
        ("DECR counter", "(integer) 41"),
        ("DECRBY counter 40", "(integer) 1"),
        ("GET counter", "\"1\""),
        ("INCR k", NOT_INT),
        ("INCRBY counter x", NOT_INT),
        ("SET big 9223372036854775807", "OK"),
        (
            "INCR big",
            "(error) ERR increment or decrement would overflow",
        ),
        (
            "DECRBY counter -9223372036854775808",
            "(error) ERR decrement would overflow",
        ),
        ("SET f 10.50", "OK"),
        ("INCRBYFLOAT f 0.1", "\"10.6\""),
        ("INCRBYFLOAT f -5", "\"5.6\""),
        (
            "INCRBYFLOAT f abc",
            "(error) ERR value is not a valid float",
        ),
        ("INCRBYFLOAT k 1", "(error) ERR value is not a valid float"),
        ("SET e 5.0e3", "OK"),
        ("INCRBYFLOAT e 2.0e2", "\"5200\""),
        ("APPEND s Hello", "(integer) 5"),
        ("APPEND s \\sWorld", "(integer) 11"),
        ("GET s", "\"Hello World\""),
        ("STRLEN s", "(integer) 11"),
        ("STRLEN nope", "(integer) 0"),
        ("GETRANGE s 0 4", "\"Hello\""),
        ("GETRANGE s -5 -1", "\"World\""),
        ("GETRANGE s 5 1", "\"\""),
        ("SUBSTR s 0 0", "\"H\""),
        ("SETRANGE s 6 Redis", "(integer) 11"),
        ("GET s", "\"Hello Redis\""),
        ("SETRANGE pad 3 x", "(integer) 4"),
        ("GET pad", "\"\\0\\0\\0x\""),
        ("SETRANGE s -1 x", "(error) ERR offset is out of range"),
        ("SETRANGE empty 5 \"\"", "(integer) 0"),
        ("GETSET s new", "\"Hello Redis\""),
        ("GETSET nope x", "(nil)"),
        ("GETDEL nope2", "(nil)"),
        ("GETDEL s", "\"new\""),
        ("EXISTS s", "(integer) 0"),
        ("SET g v", "OK"),
        ("GETEX g EX 100", "\"v\""),
        ("TTL g", "(integer) 100"),
        ("GETEX g PERSIST", "\"v\""),
        ("TTL g", "(integer) -1"),
        ("GETEX g EX", SYNTAX),
        ("GETEX nope3", "(nil)"),
        ("OBJECT ENCODING counter", "\"int\""),
        ("OBJECT ENCODING g", "\"embstr\""),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn keys_and_expiry() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("MSET user:1 a user:2 b other c", "OK"),
        ("KEYS user:1", "[\"user:1\"]"),
        ("KEYS nomatch*", "[]"),
        ("EXISTS user:1 user:1 nope", "(integer) 2"),
        ("TOUCH user:1 nope", "(integer) 1"),
        ("TYPE user:1", "string"),
        ("TYPE nope", "none"),
        ("KEYS user:[2]", "[\"user:2\"]"),
        ("DBSIZE", "(integer) 3"),
        ("DEL user:1 nope", "(integer) 1"),
        ("UNLINK user:2", "(integer) 1"),
        ("RENAME nope x", "(error) ERR no such key"),
        ("SET src v", "OK"),
        ("EXPIRE src 100", "(integer) 1"),
        ("RENAME src dst", "OK"),
        ("GET src", "(nil)"),
        ("TTL dst", "(integer) 100"),
        ("SET taken t", "OK"),
        ("RENAMENX dst taken", "(integer) 0"),
        ("RENAMENX dst free", "(integer) 1"),
        ("COPY free c1", "(integer) 1"),
        ("COPY free c1", "(integer) 0"),
        ("COPY free c1 REPLACE", "(integer) 1"),
        (
            "COPY free free",
            "(error) ERR source and destination objects are the same",
        ),
        ("COPY free c9 DB 16", "(error) ERR DB index is out of range"),
        ("COPY free inone DB 1", "(integer) 1"),
        ("PERSIST free", "(integer) 1"),
        ("PERSIST free", "(integer) 0"),
        ("TTL free", "(integer) -1"),
        ("TTL nope", "(integer) -2"),
        ("PTTL nope", "(integer) -2"),
        ("EXPIRE free 100 XX", "(integer) 0"),
        ("EXPIRE free 100 NX", "(integer) 1"),
        ("EXPIRE free 50 GT", "(integer) 0"),
        ("EXPIRE free 200 GT", "(integer) 1"),
        ("EXPIRE free 300 LT", "(integer) 0"),
        (
            "EXPIRE free 10 NX XX",
            "(error) ERR NX and XX, GT or LT options at the same time are not compatible",
        ),
        (
            "EXPIRE free 10 GT LT",
            "(error) ERR GT and LT options at the same time are not compatible",
        ),
        ("EXPIRE free ten", NOT_INT),
        ("EXPIREAT free 4102444800", "(integer) 1"),
        ("EXPIRETIME free", "(integer) 4102444800"),
        ("PEXPIRETIME free", "(integer) 4102444800000"),
        ("PEXPIREAT free 4102444800123", "(integer) 1"),
        ("PEXPIRETIME free", "(integer) 4102444800123"),
        ("EXPIRETIME other", "(integer) -1"),
        ("EXPIRETIME nope", "(integer) -2"),
        ("EXPIRE other -1", "(integer) 1"),
        ("EXISTS other", "(integer) 0"),
        ("PEXPIRE taken 100000", "(integer) 1"),
        ("SCAN x", "(error) ERR invalid cursor"),
        ("SCAN 0 COUNT 0", SYNTAX),
        ("SCAN 0 FOO bar", SYNTAX),
        ("FLUSHDB", "OK"),
        ("DBSIZE", "(integer) 0"),
        ("RANDOMKEY", "(nil)"),
        ("SET only one", "OK"),
        ("RANDOMKEY", "\"only\""),
    ]);
    // SCAN returns every key exactly once over a full iteration here
    // (nothing changes meanwhile), with MATCH and TYPE filters.
    for i in 0..300 {
        c.call(&format!("SET scan:{i} v"));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let reply = c.call(&format!("SCAN {cursor} MATCH scan:* COUNT 37 TYPE string"));
        let inner = reply.trim_start_matches('[').trim_end_matches(']');
        let (next, keys) = inner.split_once(", ").unwrap();
        cursor = next.trim_matches('"').to_string();
        for key in keys
            .trim_start_matches('[')
            .split(", ")
            .filter(|k| !k.is_empty())
        {
            let key = key.trim_matches(|c| c == '"' || c == ']');
            if !key.is_empty() {
                seen.insert(key.to_string());
            }
        }
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 300);
    assert!(seen.iter().all(|k| k.starts_with("scan:")));
    assert_eq!(c.call("SCAN 0 TYPE hash COUNT 1000"), "[\"0\", []]");
    server.shutdown().unwrap();
}

#[test]
fn databases_are_isolated() {
    let (server, _dir) = start();
    let mut a = Client::connect(&server);
    let mut b = Client::connect(&server);
    a.script(&[
        ("SET k zero", "OK"),
        ("SELECT 1", "OK"),
        ("GET k", "(nil)"),
        ("SET k one", "OK"),
        ("DBSIZE", "(integer) 1"),
        ("SELECT 16", "(error) ERR DB index is out of range"),
        ("SELECT x", NOT_INT),
    ]);
    b.script(&[
        ("GET k", "\"zero\""),
        ("SELECT 1", "OK"),
        ("GET k", "\"one\""),
        ("FLUSHDB", "OK"),
        ("SELECT 0", "OK"),
        ("GET k", "\"zero\""),
        ("FLUSHALL", "OK"),
        ("DBSIZE", "(integer) 0"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn connection_commands_and_resp3() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("PING", "PONG"),
        ("PING hi", "\"hi\""),
        ("ECHO hello", "\"hello\""),
        ("FOO a b", "(error) ERR unknown command 'FOO', with args beginning with: 'a' 'b' "),
        ("ACL WHOAMI", "\"default\""),
        ("HELLO 4", "(error) NOPROTO unsupported protocol version"),
        ("HELLO x", "(error) ERR Protocol version is not an integer or out of range"),
        ("CLIENT SETNAME my\\sname", "(error) ERR Client names cannot contain spaces, newlines or special characters."),
        ("CLIENT SETNAME worker", "OK"),
        ("CLIENT GETNAME", "\"worker\""),
        ("CLIENT SETINFO LIB-NAME mylib", "OK"),
        ("CLIENT SETINFO BAD x", "(error) ERR Unrecognized option 'BAD'"),
        ("CLIENT FOO", "(error) ERR unknown subcommand 'FOO'. Try CLIENT HELP."),
        ("CLIENT GETNAME x", "(error) ERR wrong number of arguments for 'client|getname' command"),
        ("AUTH pw", "(error) ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
    ]);
    let id = c.call("CLIENT ID");
    assert!(id.starts_with("(integer) "), "{id}");
    let info = c.call("CLIENT INFO");
    assert!(
        info.contains("name=worker") && info.contains("lib-name=mylib"),
        "{info}"
    );
    let list = c.call("CLIENT LIST");
    assert!(list.contains(&format!("id={}", &id[10..])), "{list}");

    // RESP3: HELLO answers with a map; nulls and doubles change shape.
    let hello = c.call("HELLO 3");
    assert!(
        hello
            .starts_with("[\"server\", \"redis\", \"version\", \"7.0.15\", \"proto\", (integer) 3"),
        "{hello}"
    );
    c.script(&[
        ("GET nope", "(nil)"),
        (
            "CONFIG GET port",
            &format!("[\"port\", \"{}\"]", server.addr.port()),
        ),
        ("HELLO 2", &hello.replace("(integer) 3", "(integer) 2")),
    ]);
    // CLIENT KILL by id, from another connection.
    let mut victim = Client::connect(&server);
    let victim_id = victim.call("CLIENT ID")[10..].to_string();
    assert_eq!(
        c.call(&format!("CLIENT KILL ID {victim_id}")),
        "(integer) 1"
    );
    let mut rest = Vec::new();
    victim.reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "a killed client gets no more replies");
    c.script(&[("QUIT", "OK")]);
    let mut rest = Vec::new();
    c.reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    server.shutdown().unwrap();
}

#[test]
fn authentication() {
    let (server, _dir) = start_with(Config {
        requirepass: Some("s3cret".into()),
        ..Config::default()
    });
    let mut c = Client::connect(&server);
    c.script(&[
        ("GET k", "(error) NOAUTH Authentication required."),
        ("GET", WRONG_ARGS_GET),
        (
            "AUTH wrong",
            "(error) WRONGPASS invalid username-password pair or user is disabled.",
        ),
        (
            "AUTH someone s3cret",
            "(error) WRONGPASS invalid username-password pair or user is disabled.",
        ),
        ("AUTH s3cret", "OK"),
        ("SET k v", "OK"),
        ("RESET", "RESET"),
        ("GET k", "(error) NOAUTH Authentication required."),
        ("AUTH default s3cret", "OK"),
        ("CONFIG SET requirepass \"\"", "OK"),
    ]);
    let mut fresh = Client::connect(&server);
    fresh.script(&[("GET k", "\"v\"")]);
    server.shutdown().unwrap();
}

/// Started at `always`, the stores are staged (their writes reach the
/// files only at each sync): CONFIG SET of a weaker rule is taken as the
/// rule the next opening uses, while `always` stays in force until then
/// (a DEBUG RELOAD here). Redis's own suite sets `appendfsync always`,
/// reloads, and sets its old value back.
#[test]
fn a_server_started_at_always_keeps_always_until_reopened() {
    let (server, _dir, _conf) =
        common::start_with_file("enable-debug-command yes\nappendfsync always\n");
    let mut c = Client::connect(&server);
    c.script(&[
        ("CONFIG GET appendfsync", "[\"appendfsync\", \"always\"]"),
        ("CONFIG SET appendfsync always", "OK"),
        // Taken as the rule the next opening uses (CONFIG GET and CONFIG
        // REWRITE show it), while `always` stays in force (INFO).
        ("CONFIG SET appendfsync everysec", "OK"),
        ("CONFIG GET appendfsync", "[\"appendfsync\", \"everysec\"]"),
        ("CONFIG SET durability process", "OK"),
        ("CONFIG GET durability", "[\"durability\", \"process\"]"),
        ("SET k v", "OK"),
        ("LPUSH l a", "(integer) 1"),
    ]);
    assert_eq!(
        common::info_field(&mut c, "persistence", "durability"),
        "always"
    );
    assert_eq!(
        common::info_field(&mut c, "persistence", "durability_requested"),
        "process"
    );
    // A reopening takes the rule asked for: the stores are no longer
    // staged, and the writes made before it are there.
    c.script(&[
        ("DEBUG RELOAD", "OK"),
        ("GET k", "\"v\""),
        ("LRANGE l 0 -1", "[\"a\"]"),
    ]);
    assert_eq!(
        common::info_field(&mut c, "persistence", "durability"),
        "process"
    );
    server.shutdown().unwrap();
}

#[test]
fn server_commands_and_config() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("CONFIG GET appendfsync", "[\"appendfsync\", \"no\"]"),
        ("CONFIG GET durability", "[\"durability\", \"process\"]"),
        ("CONFIG SET appendfsync always", "OK"),
        ("CONFIG GET durability", "[\"durability\", \"always\"]"),
        ("SET k v", "OK"),
        // A multi-key write under `always` waits for its intent's sync.
        ("MSET m1 1 m2 2", "OK"),
        ("DEL m1 m2", "(integer) 2"),
        ("CONFIG SET durability everysec", "OK"),
        ("CONFIG GET appendfsync", "[\"appendfsync\", \"everysec\"]"),
        ("CONFIG SET appendfsync sometimes", "(error) ERR CONFIG SET failed (possibly related to argument 'appendfsync') - invalid durability 'sometimes' (expected process, everysec or always; appendfsync's no, everysec, always also work)"),
        ("CONFIG SET port 1", "(error) ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config"),
        ("CONFIG SET nosuch 1", "(error) ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'"),
        ("CONFIG SET timeout x", "(error) ERR CONFIG SET failed (possibly related to argument 'timeout') - argument couldn't be parsed into an integer"),
        ("CONFIG SET maxclients 100 timeout 0", "OK"),
        ("CONFIG GET maxclients", "[\"maxclients\", \"100\"]"),
        ("CONFIG GET nosuch*", "[]"),
        ("CONFIG RESETSTAT", "OK"),
        ("CONFIG", "(error) ERR wrong number of arguments for 'config' command"),
        ("SAVE", "OK"),
        ("BGSAVE", "Background saving started"),
        ("DBSIZE", "(integer) 1"),
        ("FLUSHALL ASYNC", "OK"),
        ("FLUSHDB NOW", SYNTAX),
        ("COMMAND INFO get nosuch", "[[\"get\", (integer) 2, [readonly, fast], (integer) 1, (integer) 1, (integer) 1, [@read, @string, @fast], [], [[\"flags\", [RO, access], \"begin_search\", [\"type\", \"index\", \"spec\", [\"index\", (integer) 1]], \"find_keys\", [\"type\", \"range\", \"spec\", [\"lastkey\", (integer) 0, \"keystep\", (integer) 1, \"limit\", (integer) 0]]]], []], (nil array)]"),
    ]);
    let count = c.call("COMMAND COUNT");
    let n: usize = count[10..].parse().unwrap();
    assert!(n > 60, "{count}");
    let docs = c.call("COMMAND DOCS set");
    assert!(
        docs.contains("\"summary\"") && docs.contains("\"group\", \"string\""),
        "{docs}"
    );
    let time = c.call("TIME");
    assert!(
        time.starts_with("[\"17") || time.starts_with("[\"1"),
        "{time}"
    );
    let lastsave = c.call("LASTSAVE");
    assert!(lastsave.starts_with("(integer) 17"), "{lastsave}");
    let info = c.call("INFO");
    for section in [
        "# Server",
        "# Clients",
        "# Memory",
        "# Persistence",
        "# Stats",
        "# Replication",
        "# Keyspace",
        "# Engram",
    ] {
        assert!(info.contains(section), "INFO lacks {section}");
    }
    assert!(info.contains("mode:emulated") && info.contains("redis_version:7.0.15"));
    let only = c.call("INFO keyspace");
    assert!(
        only.contains("# Keyspace") && !only.contains("# Server"),
        "{only}"
    );
    server.shutdown().unwrap();
}

#[test]
fn transactions_and_watch() {
    let (server, _dir) = start();
    let mut a = Client::connect(&server);
    let mut b = Client::connect(&server);
    a.script(&[
        ("EXEC", "(error) ERR EXEC without MULTI"),
        ("DISCARD", "(error) ERR DISCARD without MULTI"),
        ("MULTI", "OK"),
        ("MULTI", "(error) ERR MULTI calls can not be nested"),
        ("SET k 1", "QUEUED"),
        ("INCR k", "QUEUED"),
        ("INCR k", "QUEUED"),
        ("GET k", "QUEUED"),
        ("EXEC", "[OK, (integer) 2, (integer) 3, \"3\"]"),
        // A command rejected while queuing aborts the whole transaction.
        ("MULTI", "OK"),
        ("SET k 10", "QUEUED"),
        ("GET", WRONG_ARGS_GET),
        (
            "EXEC",
            "(error) EXECABORT Transaction discarded because of previous errors.",
        ),
        ("GET k", "\"3\""),
        // A runtime error does not stop the others.
        ("MULTI", "OK"),
        ("SET s text", "QUEUED"),
        ("INCR s", "QUEUED"),
        ("SET k 20", "QUEUED"),
        ("EXEC", &format!("[OK, {NOT_INT}, OK]")),
        ("GET k", "\"20\""),
        ("MULTI", "OK"),
        ("SET k 30", "QUEUED"),
        ("DISCARD", "OK"),
        ("GET k", "\"20\""),
        // SELECT inside MULTI moves the rest of the queue.
        ("MULTI", "OK"),
        ("SELECT 2", "QUEUED"),
        ("SET indb2 yes", "QUEUED"),
        ("EXEC", "[OK, OK]"),
        ("GET indb2", "\"yes\""),
        ("SELECT 0", "OK"),
        ("GET indb2", "(nil)"),
    ]);
    // WATCH: another client's write aborts the EXEC.
    a.script(&[
        ("WATCH k", "OK"),
        ("MULTI", "OK"),
        ("WATCH k", "(error) ERR WATCH inside MULTI is not allowed"),
    ]);
    b.script(&[("SET k changed", "OK")]);
    a.script(&[
        ("SET k mine", "QUEUED"),
        ("EXEC", "(nil array)"),
        ("GET k", "\"changed\""),
    ]);
    // A write to an unwatched key does not.
    a.script(&[("WATCH k", "OK"), ("MULTI", "OK")]);
    b.script(&[("SET other x", "OK")]);
    a.script(&[
        ("SET k mine", "QUEUED"),
        ("EXEC", "[OK]"),
        ("GET k", "\"mine\""),
    ]);
    // UNWATCH forgets.
    a.script(&[("WATCH k", "OK"), ("UNWATCH", "OK")]);
    b.script(&[("SET k again", "OK")]);
    a.script(&[("MULTI", "OK"), ("SET k final", "QUEUED"), ("EXEC", "[OK]")]);
    // UNWATCH queued inside MULTI runs within EXEC.
    a.script(&[
        ("WATCH k", "OK"),
        ("MULTI", "OK"),
        ("UNWATCH", "QUEUED"),
        ("SET k after", "QUEUED"),
        ("EXEC", "[OK, OK]"),
    ]);
    // A watched key that expires before EXEC counts as changed.
    a.script(&[("SET e v PX 50", "OK"), ("WATCH e", "OK")]);
    std::thread::sleep(Duration::from_millis(120));
    a.script(&[
        ("MULTI", "OK"),
        ("SET e new", "QUEUED"),
        ("EXEC", "(nil array)"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn mset_is_seen_whole_by_concurrent_readers() {
    let (server, _dir) = start();
    let mut writer = Client::connect(&server);
    let mut reader = Client::connect(&server);
    writer.call("MSET a 0 b 0");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        for i in 1..2000 {
            writer.call(&format!("MSET a {i} b {i}"));
        }
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let pair = reader.call("MGET a b");
        let values: Vec<&str> = pair
            .trim_matches(|c| c == '[' || c == ']')
            .split(", ")
            .collect();
        assert_eq!(values[0], values[1], "MGET saw half an MSET: {pair}");
    }
    handle.join().unwrap();
    server.shutdown().unwrap();
}

/// Waits (up to 10 s) until DBSIZE is `keys`, nobody reading the keys
/// meanwhile: only the background expiry cycle can get it there.
fn active_expiry_leaves(c: &mut Client, keys: i64, what: &str) {
    let expected = format!("(integer) {keys}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.call("DBSIZE") != expected {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} left {}",
            c.call("DBSIZE")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn expiry_is_lazy_active_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || common::config_in(dir.path());
    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    c.script(&[
        ("SET lazy v PX 30", "OK"),
        ("SET long v EX 1000", "OK"),
        ("SET forever v", "OK"),
    ]);
    for i in 0..50 {
        c.call(&format!("SET active:{i} v PX 30"));
    }
    std::thread::sleep(Duration::from_millis(60));
    c.script(&[("GET lazy", "(nil)"), ("TTL lazy", "(integer) -2")]);
    // Nobody reads the active:* keys: the background cycle removes them.
    active_expiry_leaves(&mut c, 2, "active expiry");
    server.shutdown().unwrap();

    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    let ttl = c.call("TTL long");
    let secs: i64 = ttl[10..].parse().unwrap();
    assert!((990..=1000).contains(&secs), "{ttl}");
    c.script(&[("TTL forever", "(integer) -1"), ("DBSIZE", "(integer) 2")]);
    let info = c.call("INFO keyspace");
    assert!(info.contains("db0:keys=2,expires=1"), "{info}");
    // Keys that expire across a restart: recovery only notes them, and
    // the expiry index they are found by is filled after the server is
    // ready; nobody reads them, and the active cycle still removes them.
    for i in 0..20 {
        c.call(&format!("SET soon:{i} v PX 300"));
    }
    server.shutdown().unwrap();
    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    active_expiry_leaves(&mut c, 2, "active expiry after a restart");
    let info = c.call("INFO keyspace");
    assert!(info.contains("db0:keys=2,expires=1"), "{info}");
    c.script(&[("TTL forever", "(integer) -1")]);
    server.shutdown().unwrap();
}

/// LCS and its options, each reply checked against a real redis-server
/// 7.0 in the same test.
#[test]
fn lcs() {
    let (server, _dir) = start();
    let redis = common::RedisServer::start();
    let (mut e, mut r) = (Client::connect(&server), redis.client());
    common::script_both(
        &mut e,
        &mut r,
        &[
            ("MSET key1 ohmytext key2 mynewtext", "OK"),
            ("LCS key1 key2", "\"mytext\""),
            ("LCS key1 key2 LEN", "(integer) 6"),
            (
                "LCS key1 key2 IDX",
                "[\"matches\", [[[(integer) 4, (integer) 7], [(integer) 5, (integer) 8]], \
                 [[(integer) 2, (integer) 3], [(integer) 0, (integer) 1]]], \"len\", (integer) 6]",
            ),
            (
                "LCS key1 key2 IDX MINMATCHLEN 4 WITHMATCHLEN",
                "[\"matches\", [[[(integer) 4, (integer) 7], [(integer) 5, (integer) 8], \
                 (integer) 4]], \"len\", (integer) 6]",
            ),
            ("LCS key1 key2 IDX MINMATCHLEN -5", "[\"matches\", [[[(integer) 4, (integer) 7], [(integer) 5, (integer) 8]], [[(integer) 2, (integer) 3], [(integer) 0, (integer) 1]]], \"len\", (integer) 6]"),
            ("LCS key1 nokey", "\"\""),
            ("LCS nokey nokey2 IDX", "[\"matches\", [], \"len\", (integer) 0]"),
            ("SET n 12345", "OK"),
            ("SET m 92349", "OK"),
            ("LCS n m", "\"234\""),
            (
                "LCS key1 key2 LEN IDX",
                "(error) ERR If you want both the length and indexes, please just use IDX.",
            ),
            ("LCS key1 key2 FOO", SYNTAX),
            ("LCS key1 key2 MINMATCHLEN", SYNTAX),
            ("LCS key1 key2 MINMATCHLEN x", NOT_INT),
            ("LPUSH list a", "(integer) 1"),
            (
                "LCS key1 list",
                "(error) ERR The specified keys must contain string values",
            ),
            (
                "LCS list key1 FOO",
                "(error) ERR The specified keys must contain string values",
            ),
            ("LCS key1", "(error) ERR wrong number of arguments for 'lcs' command"),
        ],
    );
}

/// INFO persistence's group-commit rates under `always`: writers waiting
/// together share a sync, so over a busy second there are syncs each
/// second and more than one write per sync; at rest both fall to 0.
#[test]
fn info_shows_syncs_per_second_and_writes_per_sync() {
    let (server, _dir) = start();
    let mut admin = Client::connect(&server);
    assert_eq!(admin.call("CONFIG SET durability always"), "OK");
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let mut c = Client::connect(&server);
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                let mut i = 0;
                while started.elapsed() < std::time::Duration::from_millis(2500) {
                    assert_eq!(c.call(&format!("SET w{w}:{i} v")), "OK");
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(2200));
    let info = admin.call("INFO persistence");
    let syncs_per_sec = info_number(&mut admin, "persistence", "syncs_per_sec");
    let at = info
        .find("writes_per_sync:")
        .unwrap_or_else(|| panic!("no writes_per_sync: {info}"))
        + "writes_per_sync:".len();
    let per_sync: f64 = info[at..]
        .split(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for w in writers {
        w.join().unwrap();
    }
    assert!(syncs_per_sec > 0, "{info}");
    assert!(per_sync >= 1.0, "{info}");
    // A quiet second later the window holds no sync.
    std::thread::sleep(std::time::Duration::from_millis(2600));
    assert_eq!(info_number(&mut admin, "persistence", "syncs_per_sec"), 0);
}
