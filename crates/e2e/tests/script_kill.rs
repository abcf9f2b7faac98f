//! `engram serve` killed with SIGKILL while clients run Lua scripts and
//! functions that each write a string, a list, a hash, a sorted set and a
//! counter: after each restart every acknowledged script's writes are all
//! there, the one in flight is there whole or not at all, and the function
//! library loaded in the first cycle is still there (libraries are data).

mod common;

use common::{connect, kill_cycles, Progress};

const CLIENTS: usize = 3;
const KILL_CYCLES: usize = 3;

/// Step `i` of client `c`: five writes that must stay together.
const BODY: &str = "
    local p, i = KEYS[1], ARGV[1]
    redis.call('SET', p .. ':s:' .. i, i)
    redis.call('RPUSH', p .. ':list', i)
    redis.call('HSET', p .. ':hash', 'f' .. i, i)
    redis.call('ZADD', p .. ':z', i, 'm' .. i)
    return redis.call('INCR', p .. ':count')
";

fn library() -> String {
    format!("#!lua name=steps\nredis.register_function('step', function(KEYS, ARGV) {BODY} end)")
}

/// What one client had acknowledged when the server died.
#[derive(Clone, Default)]
struct Acked {
    steps: u64,
    /// A step sent whose reply never came: applied whole or not at all.
    in_flight: bool,
}

fn prefix(n: usize) -> String {
    format!("{{c{n}}}")
}

fn writer(port: u16, n: usize, start: &Acked, progress: &Progress) -> Acked {
    let mut con = connect(port);
    let mut acked = start.clone();
    while !progress.stopped() {
        let i = acked.steps;
        acked.in_flight = true;
        // Odd steps through the function, even ones through EVAL.
        let done: redis::RedisResult<u64> = if i % 2 == 1 {
            redis::cmd("FCALL")
                .arg("step")
                .arg(1)
                .arg(prefix(n))
                .arg(i)
                .query(&mut con)
        } else {
            redis::cmd("EVAL")
                .arg(BODY)
                .arg(1)
                .arg(prefix(n))
                .arg(i)
                .query(&mut con)
        };
        match done {
            Ok(count) => {
                assert_eq!(count, i + 1, "client {n}: the counter after step {i}");
                acked.steps += 1;
                acked.in_flight = false;
                progress.acked();
            }
            Err(_) => break,
        }
    }
    acked
}

/// Checks that the steps applied are exactly the acknowledged ones (plus
/// the one in flight, whole), then settles it for the next cycle.
fn check(port: u16, n: usize, acked: &mut Acked) {
    let mut con = connect(port);
    let p = prefix(n);
    let count: Option<u64> = redis::cmd("GET")
        .arg(format!("{p}:count"))
        .query(&mut con)
        .unwrap();
    let count = count.unwrap_or(0);
    let most = acked.steps + u64::from(acked.in_flight);
    assert!(
        (acked.steps..=most).contains(&count),
        "client {n}: {count} steps applied; {} acknowledged, in flight {}",
        acked.steps,
        acked.in_flight
    );
    let list: Vec<u64> = redis::cmd("LRANGE")
        .arg(format!("{p}:list"))
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(list, (0..count).collect::<Vec<_>>(), "client {n}: the list");
    let hlen: u64 = redis::cmd("HLEN")
        .arg(format!("{p}:hash"))
        .query(&mut con)
        .unwrap();
    let zcard: u64 = redis::cmd("ZCARD")
        .arg(format!("{p}:z"))
        .query(&mut con)
        .unwrap();
    assert_eq!((hlen, zcard), (count, count), "client {n}: hash and zset");
    for i in [count.checked_sub(1), Some(count)].into_iter().flatten() {
        let exists: u64 = redis::cmd("EXISTS")
            .arg(format!("{p}:s:{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(
            exists,
            u64::from(i < count),
            "client {n}: string of step {i}"
        );
    }
    // The library outlived the kill.
    let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("steps")
        .query(&mut con)
        .unwrap();
    if count > 1 {
        assert_eq!(libraries.len(), 1, "the function library after a kill");
    }
    acked.steps = count;
    acked.in_flight = false;
}

#[test]
fn sigkill_during_scripts_leaves_each_script_whole_or_absent() {
    let dir = tempfile::tempdir().unwrap();
    let acked = (0..CLIENTS).map(|_| Acked::default()).collect();
    kill_cycles(
        &dir.path().join("data"),
        KILL_CYCLES,
        acked,
        writer,
        check,
        |cycle, port| {
            if cycle == 0 {
                let _: String = redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg(library())
                    .query(&mut connect(port))
                    .unwrap();
            }
        },
    );
}
