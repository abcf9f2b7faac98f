//! redis-py's `Lock` (the most used distributed lock in Python, built on
//! EVALSHA scripts) against `engram serve`: acquire, extend, release, a
//! release by someone who no longer holds it refused, and two processes
//! contending for one lock around a read-modify-write that loses updates
//! without it: every increment is there.

mod common;

use std::process::Stdio;

use common::{python_with_redis_py, serve};

/// The lock's own behaviour, from one process.
const SEMANTICS: &str = r#"
import sys, time, redis
from redis.exceptions import LockError, LockNotOwnedError
r = redis.Redis(port=int(sys.argv[1]))
lock = r.lock("sem", timeout=2)
assert lock.acquire(blocking=False), "first acquire"
other = r.lock("sem", timeout=2)
assert not other.acquire(blocking=False), "a held lock is refused"
assert lock.owned() and not other.owned()
before = r.pttl("sem")
assert lock.extend(5), "extend"
assert r.pttl("sem") > before + 3000, (before, r.pttl("sem"))
assert lock.reacquire(), "reacquire"
lock.release()
assert r.get("sem") is None, "released"
try:
    lock.release()
    raise SystemExit("a second release was accepted")
except LockError:
    pass
# Held by another token since: this one may neither extend nor release.
assert other.acquire(blocking=False)
lock.local.token = b"stale"
try:
    lock.extend(1)
    raise SystemExit("extend by a stale token was accepted")
except LockNotOwnedError:
    pass
try:
    lock.release()
    raise SystemExit("release by a stale token was accepted")
except LockNotOwnedError:
    pass
other.release()
# Expiry frees it for the next taker.
short = r.lock("short", timeout=0.2)
assert short.acquire()
time.sleep(0.4)
assert r.lock("short").acquire(blocking=False), "an expired lock is free"
print("ok")
"#;

/// One contender: `rounds` locked read-sleep-write increments.
const CONTENDER: &str = r#"
import sys, time, redis
r = redis.Redis(port=int(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    with r.lock("counter-lock", timeout=10, blocking_timeout=30, sleep=0.001):
        v = int(r.get("counter") or 0)
        time.sleep(0.002)
        r.set("counter", v + 1)
print("done")
"#;

#[test]
fn redis_py_lock_acquires_extends_releases_and_excludes() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("data"), &[]);
    let port = served.port.to_string();

    let output = python_with_redis_py()
        .args(["-c", SEMANTICS, &port])
        .output()
        .unwrap();
    assert!(
        output.status.success() && output.stdout == b"ok\n",
        "redis-py Lock semantics: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    const ROUNDS: u64 = 100;
    let contenders: Vec<_> = (0..2)
        .map(|_| {
            python_with_redis_py()
                .args(["-c", CONTENDER, &port, &ROUNDS.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in contenders {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "a contender failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut con = common::connect(served.port);
    let counter: u64 = redis::cmd("GET").arg("counter").query(&mut con).unwrap();
    assert_eq!(
        counter,
        2 * ROUNDS,
        "an increment was lost: the lock did not exclude"
    );
}
