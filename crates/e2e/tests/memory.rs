//! INFO memory and maxmemory as the `engram` binary reports them, with its
//! counting allocator installed: `used_memory` follows what the dataset
//! holds (it falls as soon as a collection is deleted, where the resident
//! size lags behind), and `maxmemory` (noeviction) refuses growing writes
//! once it is crossed, and accepts them again when memory is freed.

mod common;

use std::time::{Duration, Instant};

use common::{connect, serve};

fn field(info: &str, name: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("INFO memory has no {name}: {info}"))
        .trim()
        .parse()
        .unwrap()
}

fn memory(con: &mut redis::Connection) -> String {
    redis::cmd("INFO").arg("memory").query(con).unwrap()
}

#[test]
fn used_memory_follows_the_data_and_maxmemory_bounds_it() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("data"), &[]);
    let mut con = connect(served.port);
    let before = field(&memory(&mut con), "used_memory");

    let members: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    let _: i64 = redis::cmd("SADD")
        .arg("myset")
        .arg(&members)
        .query(&mut con)
        .unwrap();
    let peak = field(&memory(&mut con), "used_memory");
    assert!(peak > before + 1_000_000, "{before} -> {peak}");

    // UNLINK frees the set on the lazy-free thread: soon, not at once.
    let _: i64 = redis::cmd("UNLINK").arg("myset").query(&mut con).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let after = loop {
        let now = field(&memory(&mut con), "used_memory");
        if now < peak - 1_000_000 || std::time::Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(after < peak - 1_000_000, "{before} -> {peak} -> {after}");

    // A limit below what is used: growing writes refused, others served.
    let limit = after / 2;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(limit)
        .query(&mut con)
        .unwrap();
    let refused = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut con)
        .unwrap_err();
    assert_eq!(refused.code(), Some("OOM"), "{refused}");
    let _: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    // Raised above what is used (a fresh sample is taken): accepted again.
    let limit = after * 4;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(limit)
        .query(&mut con)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match redis::cmd("SET").arg("k").arg("v").query::<()>(&mut con) {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "still refused: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let info = memory(&mut con);
    assert_eq!(field(&info, "maxmemory"), limit);
    assert!(field(&info, "used_memory_rss") > 0);
    drop(served);
}
