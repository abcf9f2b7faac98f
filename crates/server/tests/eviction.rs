//! `maxmemory` with every `maxmemory-policy`, per-key access tracking
//! (OBJECT IDLETIME and FREQ, CLIENT NO-TOUCH, RESTORE's IDLETIME and
//! FREQ), through a real client; error texts compared with redis-server's.
//!
//! Used memory counts the allocator's bytes, so this test binary installs
//! the counting allocator the `engram` binary installs, and the tests run
//! one at a time (`SERIAL`): every server of the binary shares the count.

mod common;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use common::{beside_redis, config_in, redis_con, start, Client};
use engram_server::Server;
use redis::Connection;

#[global_allocator]
static ALLOCATOR: engram_memory::Counting<std::alloc::System> =
    engram_memory::Counting(std::alloc::System);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn info_field(con: &mut Connection, section: &str, name: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("INFO {section} has no {name}: {info}"))
        .trim()
        .to_string()
}

fn used(con: &mut Connection) -> u64 {
    info_field(con, "memory", "used_memory").parse().unwrap()
}

fn evicted(con: &mut Connection) -> u64 {
    info_field(con, "stats", "evicted_keys").parse().unwrap()
}

fn config_set(con: &mut Connection, name: &str, value: impl ToString) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value.to_string())
        .query(con)
        .unwrap();
}

const VALUE: usize = 1000;

/// Writes `keys` (1 KB values, an expiry of `ttl` seconds each if given)
/// in pipelines of 100.
fn fill(con: &mut Connection, keys: &[String], ttl: Option<u64>) {
    let value = "x".repeat(VALUE);
    for chunk in keys.chunks(100) {
        let mut pipe = redis::pipe();
        for key in chunk {
            match ttl {
                Some(ttl) => pipe.cmd("SET").arg(key).arg(&value).arg("EX").arg(ttl),
                None => pipe.cmd("SET").arg(key).arg(&value),
            };
        }
        let _: () = pipe.query(con).unwrap();
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i}")).collect()
}

fn surviving(con: &mut Connection, keys: &[String]) -> usize {
    let found: Vec<bool> = keys
        .chunks(500)
        .flat_map(|chunk| {
            let mut pipe = redis::pipe();
            for key in chunk {
                pipe.cmd("EXISTS").arg(key);
            }
            pipe.query::<Vec<bool>>(con).unwrap()
        })
        .collect();
    found.into_iter().filter(|b| *b).count()
}

/// Lifts the limit, so that counting what survived evicts nothing more
/// (every command evicts first while memory is over).
fn lift_limit(con: &mut Connection) {
    config_set(con, "maxmemory", 0);
}

/// Sets the limit `headroom` bytes above what is used now.
fn limit_above_now(con: &mut Connection, headroom: u64) -> u64 {
    let limit = used(con) + headroom;
    config_set(con, "maxmemory", limit);
    limit
}

fn read_all(con: &mut Connection, keys: &[String], times: usize) {
    for _ in 0..times {
        for chunk in keys.chunks(500) {
            let mut pipe = redis::pipe();
            for key in chunk {
                pipe.cmd("GET").arg(key);
            }
            let _: Vec<Option<String>> = pipe.query(con).unwrap();
        }
    }
}

/// LRU: keys read after the others were written survive a fill that
/// evicts most of the idle ones; used memory ends under the limit.
#[test]
fn allkeys_lru_keeps_the_recently_read_keys() {
    let _serial = serial();
    let (server, _dir) = start();
    let mut con = redis_con(server.addr);
    config_set(&mut con, "maxmemory-policy", "allkeys-lru");
    let (hot, cold) = (names("hot", 200), names("cold", 2000));
    fill(&mut con, &hot, None);
    fill(&mut con, &cold, None);
    // The clock has one-second resolution: the cold keys must be older.
    std::thread::sleep(Duration::from_millis(2100));
    read_all(&mut con, &hot, 1);
    let limit = limit_above_now(&mut con, 200_000);
    fill(&mut con, &names("new", 1200), None);
    let near_limit = used(&mut con);
    lift_limit(&mut con);
    let (hot_left, cold_left) = (surviving(&mut con, &hot), surviving(&mut con, &cold));
    let gone = evicted(&mut con);
    assert!(gone >= 800, "{gone} evicted");
    assert!(cold_left <= 2000 - 800, "{cold_left} cold keys left");
    assert!(hot_left >= 190, "{hot_left} of 200 recently read keys left");
    // A millisecond's writes may run ahead of eviction.
    assert!(
        near_limit <= limit + 150_000,
        "{near_limit} against {limit}"
    );
    server.shutdown().unwrap();
}

/// LFU: keys read often survive keys read once; OBJECT FREQ shows it.
#[test]
fn allkeys_lfu_keeps_the_frequently_read_keys() {
    let _serial = serial();
    let (server, _dir) = start();
    let mut con = redis_con(server.addr);
    config_set(&mut con, "maxmemory-policy", "allkeys-lfu");
    let (hot, cold) = (names("hot", 200), names("cold", 2000));
    fill(&mut con, &hot, None);
    fill(&mut con, &cold, None);
    // The counter grows by chance (1 in 11 past its first step at the
    // default lfu-log-factor): 30 reads left it at 6 one run in 16; after
    // 100 it is past 6 but about once in 12,000 runs.
    read_all(&mut con, &hot, 100);
    let freq: i64 = redis::cmd("OBJECT")
        .arg("FREQ")
        .arg(&hot[0])
        .query(&mut con)
        .unwrap();
    let cold_freq: i64 = redis::cmd("OBJECT")
        .arg("FREQ")
        .arg(&cold[0])
        .query(&mut con)
        .unwrap();
    assert!(freq > 6 && cold_freq <= 6, "hot {freq}, cold {cold_freq}");
    limit_above_now(&mut con, 200_000);
    fill(&mut con, &names("new", 1200), None);
    lift_limit(&mut con);
    let hot_left = surviving(&mut con, &hot);
    assert!(evicted(&mut con) >= 800);
    assert!(hot_left >= 190, "{hot_left} of 200 often read keys left");
    server.shutdown().unwrap();
}

/// volatile-lru, -lfu and -random take only keys with an expiry time;
/// once none is left, growing writes get Redis's OOM error.
#[test]
fn volatile_policies_never_evict_keys_without_ttl() {
    let _serial = serial();
    for policy in ["volatile-lru", "volatile-lfu", "volatile-random"] {
        let (server, _dir) = start();
        let mut con = redis_con(server.addr);
        config_set(&mut con, "maxmemory-policy", policy);
        let (lasting, expiring) = (names("keep", 1000), names("ttl", 1000));
        fill(&mut con, &lasting, None);
        fill(&mut con, &expiring, Some(3600));
        limit_above_now(&mut con, 200_000);
        fill(&mut con, &names("new", 600), Some(3600));
        assert_eq!(surviving(&mut con, &lasting), 1000, "{policy}");
        let gone = evicted(&mut con);
        assert!(gone >= 400, "{policy}: {gone} evicted");
        // Only keys without expiry left to take: nothing can be evicted
        // (some of these writes are refused already).
        let value = "x".repeat(VALUE);
        let mut refusals = Vec::new();
        for key in names("more", 3000) {
            if let Err(e) = redis::cmd("SET").arg(key).arg(&value).query::<()>(&mut con) {
                refusals.push(e);
            }
        }
        assert!(
            refusals.len() >= 1000,
            "{policy}: {} refused",
            refusals.len()
        );
        for refused in refusals {
            assert_eq!(refused.code(), Some("OOM"), "{policy}: {refused}");
        }
        assert_eq!(surviving(&mut con, &lasting), 1000, "{policy}");
        // Reads and deletions go on.
        let _: Option<String> = redis::cmd("GET").arg(&lasting[0]).query(&mut con).unwrap();
        server.shutdown().unwrap();
    }
}

/// volatile-ttl: the keys that expire soonest go first.
#[test]
fn volatile_ttl_evicts_the_nearest_expiry_first() {
    let _serial = serial();
    let (server, _dir) = start();
    let mut con = redis_con(server.addr);
    config_set(&mut con, "maxmemory-policy", "volatile-ttl");
    config_set(&mut con, "maxmemory-samples", 10);
    let keys = names("ttl", 2000);
    let value = "x".repeat(VALUE);
    for (i, chunk) in keys.chunks(100).enumerate() {
        let mut pipe = redis::pipe();
        for (j, key) in chunk.iter().enumerate() {
            let ttl = 10_000 + 100 * i + j;
            pipe.cmd("SET").arg(key).arg(&value).arg("EX").arg(ttl);
        }
        let _: () = pipe.query(&mut con).unwrap();
    }
    limit_above_now(&mut con, 200_000);
    fill(&mut con, &names("new", 600), Some(100_000));
    lift_limit(&mut con);
    let near = 1000 - surviving(&mut con, &keys[..1000]);
    let far = 1000 - surviving(&mut con, &keys[1000..]);
    assert!(near >= 400, "{near} of the nearest half evicted");
    assert!(far * 10 <= near, "near {near}, far {far}");
    server.shutdown().unwrap();
}

/// allkeys-random takes strings and collections alike; evicted keys stay
/// evicted across a restart (they are durable deletes).
#[test]
fn allkeys_random_evicts_both_stores_and_evicted_keys_stay_gone() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(config_in(dir.path())).unwrap();
    let mut con = redis_con(server.addr);
    config_set(&mut con, "maxmemory-policy", "allkeys-random");
    let strings = names("s", 1500);
    fill(&mut con, &strings, None);
    let sets = names("set", 300);
    for set in &sets {
        let members: Vec<String> = (0..20).map(|i| format!("member-{i:04}")).collect();
        let _: i64 = redis::cmd("SADD")
            .arg(set)
            .arg(members)
            .query(&mut con)
            .unwrap();
    }
    let before: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    limit_above_now(&mut con, 100_000);
    fill(&mut con, &names("new", 1000), None);
    lift_limit(&mut con);
    let gone = evicted(&mut con);
    let after: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert!(gone >= 600, "{gone} evicted");
    assert_eq!(after, before + 1000 - gone as i64);
    let sets_left = surviving(&mut con, &sets);
    assert!(sets_left < 300, "collections are evicted too");
    let mut all = strings.clone();
    all.extend(sets.iter().cloned());
    all.extend(names("new", 1000));
    let present = |con: &mut Connection| -> HashSet<String> {
        all.iter()
            .filter(|k| redis::cmd("EXISTS").arg(k).query::<bool>(con).unwrap())
            .cloned()
            .collect()
    };
    let left = present(&mut con);
    drop(con);
    server.shutdown().unwrap();
    let server = Server::start(config_in(dir.path())).unwrap();
    let mut con = redis_con(server.addr);
    assert_eq!(present(&mut con), left, "the same keys after a restart");
    server.shutdown().unwrap();
}

/// Under noeviction, and with a limit every policy can meet, the replies
/// and INFO fields are Redis's.
#[test]
fn noeviction_refuses_with_redis_s_error_and_info_shows_the_policy() {
    let _serial = serial();
    let (server, _dir, redis, mut ours, mut theirs) = beside_redis();
    for c in [&mut ours, &mut theirs] {
        c.call("SET k v");
        assert_eq!(c.call("CONFIG SET maxmemory 1"), "OK");
    }
    for command in ["SET k2 v", "GET k", "DEL k", "CONFIG SET maxmemory 0"] {
        assert_eq!(ours.call(command), theirs.call(command), "{command}");
    }
    let mut con = redis_con(server.addr);
    for policy in [
        "noeviction",
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    ] {
        config_set(&mut con, "maxmemory-policy", policy);
        assert_eq!(info_field(&mut con, "memory", "maxmemory_policy"), policy);
    }
    assert_eq!(
        info_field(&mut con, "memory", "mem_not_counted_for_evict"),
        "0"
    );
    assert_eq!(info_field(&mut con, "stats", "evicted_keys"), "0");
    info_field(&mut con, "stats", "total_eviction_exceeded_time");
    drop(redis);
    server.shutdown().unwrap();
}

fn idletime(c: &mut Client, key: &str) -> u64 {
    let reply = c.call(&format!("OBJECT IDLETIME {key}"));
    reply
        .strip_prefix("(integer) ")
        .unwrap_or_else(|| panic!("{reply}"))
        .parse()
        .unwrap()
}

/// OBJECT IDLETIME grows while a key is idle; TTL, TYPE, EXISTS, OBJECT
/// and a NO-TOUCH client's reads leave it; GET and TOUCH reset it.
#[test]
fn idle_time_grows_and_only_touching_commands_reset_it() {
    let _serial = serial();
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("engram.conf");
    std::fs::write(&path, "enable-debug-command yes\n").unwrap();
    let (server, _dir) = common::start_with(engram_server::Config::from_file(&path).unwrap());
    let mut c = Client::connect(&server);
    c.call("SET foo bar");
    c.call("HSET h f v");
    std::thread::sleep(Duration::from_millis(2100));
    for command in [
        "TTL foo",
        "PTTL foo",
        "TYPE foo",
        "EXISTS foo",
        "TYPE h",
        "EXISTS h",
    ] {
        c.call(command);
    }
    assert!(idletime(&mut c, "foo") >= 2);
    assert!(idletime(&mut c, "h") >= 2);
    assert_eq!(c.call("CLIENT NO-TOUCH ON"), "OK");
    c.call("GET foo");
    c.call("HGET h f");
    assert!(idletime(&mut c, "foo") >= 2, "a NO-TOUCH client's read");
    assert!(idletime(&mut c, "h") >= 2);
    assert_eq!(c.call("TOUCH foo h"), "(integer) 2");
    assert!(idletime(&mut c, "foo") < 2, "TOUCH touches even so");
    assert!(idletime(&mut c, "h") < 2);
    assert_eq!(c.call("CLIENT NO-TOUCH OFF"), "OK");
    c.call("SET bar baz");
    std::thread::sleep(Duration::from_millis(2100));
    c.call("GET bar");
    assert!(idletime(&mut c, "bar") < 2, "GET resets it");
    let debug = c.call("DEBUG OBJECT foo");
    assert!(
        debug.contains(" lru:") && debug.contains("lru_seconds_idle:"),
        "{debug}"
    );
    assert_eq!(c.call("OBJECT IDLETIME nosuchkey"), "(nil)");
    assert_eq!(
        c.call("CLIENT NO-TOUCH maybe").split(' ').next(),
        Some("(error)")
    );
    server.shutdown().unwrap();
}

/// OBJECT FREQ and IDLETIME under the wrong policy family, and RESTORE's
/// IDLETIME and FREQ, as redis-server answers.
#[test]
fn object_freq_and_idletime_errors_and_restore_match_redis() {
    let _serial = serial();
    let (server, _dir, redis, mut ours, mut theirs) = beside_redis();
    common::script_both(
        &mut ours,
        &mut theirs,
        &[
            ("SET foo bar", "OK"),
            (
                "OBJECT FREQ foo",
                "(error) ERR An LFU maxmemory policy is not selected, access frequency not \
                 tracked. Please note that when switching between policies at runtime LRU and \
                 LFU data will take some time to adjust.",
            ),
            ("CONFIG SET maxmemory-policy allkeys-lfu", "OK"),
            (
                "OBJECT IDLETIME foo",
                "(error) ERR An LFU maxmemory policy is selected, idle time not tracked. \
                 Please note that when switching between policies at runtime LRU and LFU data \
                 will take some time to adjust.",
            ),
            ("OBJECT FREQ nokey", "(nil)"),
            ("DEL foo", "(integer) 1"),
            ("SET foo bar", "OK"),
            ("OBJECT FREQ foo", "(integer) 5"),
        ],
    );
    let dump =
        |con: &mut Connection| -> Vec<u8> { redis::cmd("DUMP").arg("foo").query(con).unwrap() };
    let (mut our_con, mut their_con) = (redis_con(server.addr), redis.con());
    let payload = dump(&mut their_con);
    for con in [&mut our_con, &mut their_con] {
        let _: () = redis::cmd("RESTORE")
            .arg("r")
            .arg(0)
            .arg(&payload)
            .arg("FREQ")
            .arg(100)
            .query(con)
            .unwrap();
        let freq: i64 = redis::cmd("OBJECT")
            .arg("FREQ")
            .arg("r")
            .query(con)
            .unwrap();
        assert_eq!(freq, 100);
        config_set(con, "maxmemory-policy", "allkeys-lru");
        let _: () = redis::cmd("RESTORE")
            .arg("i")
            .arg(0)
            .arg(&payload)
            .arg("IDLETIME")
            .arg(1000)
            .query(con)
            .unwrap();
        let idle: i64 = redis::cmd("OBJECT")
            .arg("IDLETIME")
            .arg("i")
            .query(con)
            .unwrap();
        assert!((1000..=1010).contains(&idle), "{idle}");
    }
    // Reads raise the counter under LFU.
    config_set(&mut our_con, "maxmemory-policy", "allkeys-lfu");
    config_set(&mut our_con, "lfu-log-factor", 0);
    let _: () = redis::cmd("SET")
        .arg("c")
        .arg("v")
        .query(&mut our_con)
        .unwrap();
    read_all(&mut our_con, &["c".to_string()], 20);
    let freq: i64 = redis::cmd("OBJECT")
        .arg("FREQ")
        .arg("c")
        .query(&mut our_con)
        .unwrap();
    assert_eq!(freq, 25, "log factor 0: every read counts");
    drop(redis);
    server.shutdown().unwrap();
}
