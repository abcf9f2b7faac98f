//! Lazy free: UNLINK of a large collection frees it on a background
//! thread and counts it in INFO memory's `lazyfreed_objects`; a small one,
//! or one DEL deletes, is freed at once, as Redis 7.0 decides (its free-effort threshold of
//! 64, a stream's effort being its nodes and its groups' pending entries).
//! Each step runs on redis-server too and the counters must agree.
//!
//! One test in this file: the counters are the process's.

mod common;

use std::time::{Duration, Instant};

use common::{beside_redis, info_number, Client};

/// Waits until nothing is pending, then returns `lazyfreed_objects`.
fn freed(c: &mut Client, name: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_number(c, "memory", "lazyfree_pending_objects") != 0 {
        assert!(
            Instant::now() < deadline,
            "{name}: lazy free never finished"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    info_number(c, "memory", "lazyfreed_objects")
}

#[test]
fn large_objects_are_freed_in_the_background_as_redis_counts_them() {
    let (server, _dir, _redis, mut engram, mut redis) = beside_redis();
    for (name, c) in [("Redis", &mut redis), ("Engram", &mut engram)] {
        c.script(&[
            ("CONFIG RESETSTAT", "OK"),
            ("CONFIG SET stream-node-max-entries 5", "OK"),
        ]);
        for i in 0..1000 {
            c.call(&format!("XADD stream * foo {i}"));
        }
        c.script(&[("XGROUP CREATE stream mygroup 0", "OK")]);
        assert!(c
            .call("XREADGROUP GROUP mygroup Alice COUNT 2 STREAMS stream >")
            .contains("foo"));
        c.script(&[("UNLINK stream", "(integer) 1")]);
        assert_eq!(freed(c, name), 1, "{name}: a 200-node stream");

        // A stream of one node whose group is gone: freed at once.
        c.script(&[("CONFIG RESETSTAT", "OK")]);
        c.call("XADD s * a b");
        c.script(&[
            ("XGROUP CREATE s bla $", "OK"),
            ("XGROUP DESTROY s bla", "(integer) 1"),
            ("UNLINK s", "(integer) 1"),
        ]);
        assert_eq!(freed(c, name), 0, "{name}: a one-node stream");

        // Sets: 65 members is over the threshold, 64 is not.
        let members = |n: usize| (0..n).map(|i| format!(" m{i}")).collect::<String>();
        c.call(&format!("SADD big{}", members(65)));
        c.call(&format!("SADD small{}", members(64)));
        c.script(&[("UNLINK small", "(integer) 1")]);
        assert_eq!(freed(c, name), 0, "{name}: a 64-member set");
        c.script(&[("UNLINK big", "(integer) 1")]);
        assert_eq!(freed(c, name), 1, "{name}: a 65-member set");
        // DEL frees at once (Redis's lazyfree-lazy-user-del is no).
        c.call(&format!("SADD big{}", members(65)));
        c.script(&[("DEL big", "(integer) 1")]);
        assert_eq!(freed(c, name), 1, "{name}: DEL of a 65-member set");
        c.script(&[("CONFIG RESETSTAT", "OK")]);
        assert_eq!(freed(c, name), 0, "{name}: after CONFIG RESETSTAT");
    }
    server.shutdown().unwrap();
}
