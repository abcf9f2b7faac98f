//! The generic commands across every type: TYPE, EXISTS, DEL, EXPIRE and
//! friends, RENAME, COPY, OBJECT ENCODING, SCAN/KEYS/RANDOMKEY/DBSIZE,
//! FLUSHDB, WRONGTYPE between strings and collections, type changes, MULTI
//! mixing strings and collections, WATCH on a collection, INFO and SAVE,
//! and all of it across a restart.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{start, start_with, Client, WRONGTYPE};
use engram_server::{Config, Server};

/// One key of each type: str, h, s, z, l.
fn fill(c: &mut Client) {
    c.script(&[
        ("SET str v", "OK"),
        ("HSET h f v", "(integer) 1"),
        ("SADD s a b", "(integer) 2"),
        ("ZADD z 1 a", "(integer) 1"),
        ("RPUSH l x y", "(integer) 2"),
    ]);
}

#[test]
fn type_exists_del_and_object_encoding_cover_every_type() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    fill(&mut c);
    c.script(&[
        ("TYPE str", "string"),
        ("TYPE h", "hash"),
        ("TYPE s", "set"),
        ("TYPE z", "zset"),
        ("TYPE l", "list"),
        ("TYPE nope", "none"),
        ("EXISTS str h s z l nope", "(integer) 5"),
        ("DBSIZE", "(integer) 5"),
        ("OBJECT ENCODING h", "\"hashtable\""),
        ("OBJECT ENCODING s", "\"hashtable\""),
        ("OBJECT ENCODING z", "\"skiplist\""),
        ("OBJECT ENCODING l", "\"quicklist\""),
        ("DEL h s nope", "(integer) 2"),
        ("EXISTS h s", "(integer) 0"),
        ("HGET h f", "(nil)"),
        ("DBSIZE", "(integer) 3"),
    ]);
}

#[test]
fn wrongtype_between_strings_and_collections() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    fill(&mut c);
    c.script(&[
        ("GET h", WRONGTYPE),
        ("APPEND l x", WRONGTYPE),
        ("INCR s", WRONGTYPE),
        ("STRLEN z", WRONGTYPE),
        ("GETSET h x", WRONGTYPE),
        ("SET h x GET", WRONGTYPE),
        ("HGET str f", WRONGTYPE),
        ("SADD h m", WRONGTYPE),
        ("RPUSH s x", WRONGTYPE),
        ("ZADD l 1 m", WRONGTYPE),
        ("MGET str h", "[\"v\", (nil)]"),
        ("SETNX h x", "(integer) 0"),
        ("SET l x NX", "(nil)"),
        // Nothing above changed a type.
        ("TYPE h", "hash"),
        ("TYPE l", "list"),
        // SET replaces a key of any type.
        ("SET h now-a-string", "OK"),
        ("TYPE h", "string"),
        ("GET h", "\"now-a-string\""),
        ("HGET h f", WRONGTYPE),
        ("MSET s 1 z 2", "OK"),
        ("TYPE s", "string"),
        ("TYPE z", "string"),
        ("DBSIZE", "(integer) 5"),
    ]);
}

#[test]
fn expiry_of_collections_is_lazy_active_and_persistable() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    fill(&mut c);
    c.script(&[
        ("EXPIRE h 100", "(integer) 1"),
        ("TTL h", "(integer) 100"),
        ("PERSIST h", "(integer) 1"),
        ("TTL h", "(integer) -1"),
        ("PEXPIRE s 50", "(integer) 1"),
        ("PEXPIRE l 50", "(integer) 1"),
        ("EXPIRE z 0", "(integer) 1"),
        ("EXISTS z", "(integer) 0"),
    ]);
    std::thread::sleep(Duration::from_millis(120));
    // Lazily: a read finds "s" expired.
    c.script(&[("SISMEMBER s a", "(integer) 0"), ("TYPE s", "none")]);
    // Actively: the expiry cycle deletes "l" without anyone touching it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while c.call("DBSIZE") != "(integer) 2" {
        assert!(std::time::Instant::now() < deadline, "l never expired");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.script(&[("EXISTS l", "(integer) 0"), ("TYPE h", "hash")]);
    // SET over an expiring collection drops its TTL with it.
    c.script(&[
        ("EXPIRE h 100", "(integer) 1"),
        ("SET h s", "OK"),
        ("TTL h", "(integer) -1"),
    ]);
}

#[test]
fn rename_and_copy_move_collections_across_types_and_databases() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    fill(&mut c);
    c.script(&[
        ("EXPIRE h 100", "(integer) 1"),
        ("RENAME h h2", "OK"),
        ("TTL h2", "(integer) 100"),
        ("HGET h2 f", "\"v\""),
        ("EXISTS h", "(integer) 0"),
        // A collection renamed over a string, and a string over a list.
        ("RENAME s str", "OK"),
        ("TYPE str", "set"),
        ("SET plain text", "OK"),
        ("RENAME plain l", "OK"),
        ("TYPE l", "string"),
        ("GET l", "\"text\""),
        ("RENAMENX z h2", "(integer) 0"),
        ("RENAMENX z z2", "(integer) 1"),
        ("RENAME nope x", "(error) ERR no such key"),
        // COPY: independent copies, REPLACE and DB.
        ("COPY str s3", "(integer) 1"),
        ("SADD s3 c", "(integer) 1"),
        ("SCARD str", "(integer) 2"),
        ("SCARD s3", "(integer) 3"),
        ("COPY z2 h2", "(integer) 0"),
        ("COPY z2 h2 REPLACE", "(integer) 1"),
        ("TYPE h2", "zset"),
        ("COPY s3 s3 DB 1", "(integer) 1"),
        ("SELECT 1", "OK"),
        ("SCARD s3", "(integer) 3"),
        ("DBSIZE", "(integer) 1"),
        ("SELECT 0", "OK"),
    ]);
}

#[test]
fn scan_keys_randomkey_and_flushdb_see_both_stores() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    for i in 0..150 {
        c.call(&format!("SET str{i} v"));
        c.call(&format!("HSET hash{i} f v"));
        c.call(&format!("RPUSH list{i} x"));
    }
    c.call("SELECT 2");
    c.call("SADD elsewhere m");
    c.call("SELECT 0");
    assert_eq!(c.call("DBSIZE"), "(integer) 450");

    let mut seen = BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let reply = c.call(&format!("SCAN {cursor} COUNT 17"));
        let (next, keys) = parse_scan(&reply);
        seen.extend(keys);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 450, "every key once at least, none from db 2");
    assert!(seen.contains("hash7") && seen.contains("list149") && seen.contains("str0"));

    let mut hashes = BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, keys) = parse_scan(&c.call(&format!("SCAN {cursor} TYPE hash")));
        hashes.extend(keys);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(hashes.len(), 150);
    assert!(hashes.iter().all(|k| k.starts_with("hash")));

    let listed = c.call("KEYS list1*");
    assert_eq!(
        listed.matches("list1").count(),
        61,
        "list1, list10-19, list100-149"
    );

    let random = c.call("RANDOMKEY");
    assert!(
        ["str", "hash", "list"]
            .iter()
            .any(|p| random.starts_with(&format!("\"{p}"))),
        "{random}"
    );

    c.script(&[
        ("FLUSHDB", "OK"),
        ("DBSIZE", "(integer) 0"),
        ("HGET hash1 f", "(nil)"),
        ("RANDOMKEY", "(nil)"),
        ("SELECT 2", "OK"),
        ("SISMEMBER elsewhere m", "(integer) 1"),
        ("FLUSHALL", "OK"),
        ("DBSIZE", "(integer) 0"),
    ]);
}

fn parse_scan(reply: &str) -> (String, Vec<String>) {
    // [\"cursor\", [\"k1\", \"k2\"]]
    let inner = reply.trim_start_matches('[').trim_end_matches(']');
    let (cursor, rest) = inner.split_once(", ").unwrap();
    let keys = rest
        .trim_start_matches('[')
        .split(", ")
        .filter(|k| !k.is_empty())
        .map(|k| k.trim_matches('"').to_string())
        .collect();
    (cursor.trim_matches('"').to_string(), keys)
}

#[test]
fn multi_mixing_strings_and_collections_and_watch_on_a_collection() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    let mut other = Client::connect(&server);
    c.script(&[
        ("MULTI", "OK"),
        ("SET counter 1", "QUEUED"),
        ("HSET h f 1", "QUEUED"),
        ("HGET h f", "QUEUED"),
        ("SADD s a", "QUEUED"),
        ("DEL s", "QUEUED"),
        ("RPUSH s x", "QUEUED"),
        ("TYPE s", "QUEUED"),
        (
            "EXEC",
            "[OK, (integer) 1, \"1\", (integer) 1, (integer) 1, (integer) 1, list]",
        ),
        ("DBSIZE", "(integer) 3"),
    ]);
    // A write to a watched hash by another client aborts the transaction.
    c.script(&[
        ("WATCH h", "OK"),
        ("MULTI", "OK"),
        ("SET counter 2", "QUEUED"),
    ]);
    other.script(&[("HSET h g 2", "(integer) 1")]);
    c.script(&[("EXEC", "(nil array)"), ("GET counter", "\"1\"")]);
    // An untouched watched collection lets it through.
    c.script(&[
        ("WATCH h", "OK"),
        ("MULTI", "OK"),
        ("HINCRBY h f 5", "QUEUED"),
        ("EXEC", "[(integer) 6]"),
    ]);
    // A failing command inside EXEC does not undo the others (Redis).
    c.script(&[
        ("MULTI", "OK"),
        ("HSET h x 1", "QUEUED"),
        ("INCR h", "QUEUED"),
        ("EXEC", &format!("[(integer) 1, {WRONGTYPE}]")),
        ("HGET h x", "\"1\""),
    ]);
}

#[test]
fn collections_survive_a_restart_with_and_without_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let config = || common::config_in(dir.path());
    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    fill(&mut c);
    c.script(&[("EXPIRE h 1000", "(integer) 1"), ("SAVE", "OK")]);
    let info = c.call("INFO collections");
    assert!(info.contains("checkpoints:1"), "{info}");
    assert!(info.contains("collections_keys:4"), "{info}");
    // Written after the checkpoint: replayed from the log.
    c.script(&[
        ("HSET h g w", "(integer) 1"),
        ("SREM s a", "(integer) 1"),
        ("RPUSH l z", "(integer) 3"),
        ("SET z now-a-string", "OK"),
    ]);
    drop(c);
    server.shutdown().unwrap();

    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    c.script(&[
        ("DBSIZE", "(integer) 5"),
        ("HGET h g", "\"w\""),
        ("HGET h f", "\"v\""),
        ("SISMEMBER s a", "(integer) 0"),
        ("SISMEMBER s b", "(integer) 1"),
        ("LRANGE l 0 -1", "[\"x\", \"y\", \"z\"]"),
        ("TYPE z", "string"),
        ("GET str", "\"v\""),
    ]);
    let ttl = c.call("TTL h");
    let secs: i64 = ttl.trim_start_matches("(integer) ").parse().unwrap();
    assert!((990..=1000).contains(&secs), "{ttl}");
    let info = c.call("INFO collections");
    assert!(info.contains("collections_images_loaded:4"), "{info}");
}

/// The collections' checkpoint settings come from the configuration: a
/// 1 MiB threshold checkpoints after 1 MiB of log; CONFIG GET shows both
/// settings and CONFIG SET refuses them.
#[test]
fn collections_checkpoint_settings_are_configurable_and_fixed() {
    let (server, _dir) = start_with(Config {
        collections_checkpoint_bytes: 1 << 20,
        collections_backpressure_factor: 8,
        ..Config::default()
    });
    let mut c = Client::connect(&server);
    c.script(&[(
        "CONFIG GET collections*",
        r#"["collections-checkpoint-bytes", "1048576", "collections-backpressure-factor", "8"]"#,
    )]);
    let refused = c.call("CONFIG SET collections-checkpoint-bytes 2mb");
    assert!(
        refused.contains("can't set immutable config") && refused.contains("fixed at startup"),
        "{refused}"
    );
    let value = "v".repeat(1000);
    for i in 0..2000 {
        assert_eq!(
            c.call(&format!("HSET h{} f {value}", i % 50)),
            if i < 50 { "(integer) 1" } else { "(integer) 0" }
        );
    }
    let info_field = |c: &mut Client, name: &str| -> u64 {
        // The bulk reply is rendered escaped: split on the literal "\r\n".
        let info = c.call("INFO collections");
        info.split(r"\r\n")
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {info}"))
            .trim()
            .parse()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while info_field(&mut c, "checkpoints") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "2 MB of log and no checkpoint at 1 MiB"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(info_field(&mut c, "collections_keys"), 50);
}
