//! `engram serve` killed with SIGKILL while several clients write: after a
//! restart every acknowledged write is there, and multi-key writes are
//! all-or-nothing.

mod common;

use common::{connect, kill_cycles, Progress};

const CLIENTS: usize = 4;
const KILL_CYCLES: usize = 3;

/// What one client had acknowledged when the server died.
#[derive(Default)]
struct Acked {
    /// Keys `c{client}:{i}` set with value `v{i}` for i < sets.
    sets: u64,
    /// INCRs acknowledged on `c{client}:counter`, and sent.
    incrs_acked: u64,
    incrs_sent: u64,
    /// MSETs of `c{client}:m{i}:a` and `:b`, both `{i}`, sent so far,
    /// and those whose reply never came (each may be applied or not).
    msets_sent: u64,
    msets_unacked: Vec<u64>,
}

/// Writes until the connection fails (the server was killed).
fn writer(port: u16, client: usize, start: &Acked, progress: &Progress) -> Acked {
    let mut con = connect(port);
    let mut acked = Acked {
        sets: start.sets,
        incrs_acked: start.incrs_acked,
        incrs_sent: start.incrs_sent,
        msets_sent: start.msets_sent,
        msets_unacked: start.msets_unacked.clone(),
    };
    let counter = format!("c{client}:counter");
    while !progress.stopped() {
        let i = acked.sets;
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("c{client}:{i}"))
            .arg(format!("v{i}"))
            .query(&mut con);
        if set.is_err() {
            break;
        }
        acked.sets += 1;
        progress.acked();
        if i.is_multiple_of(3) {
            acked.incrs_sent += 1;
            if redis::cmd("INCR")
                .arg(&counter)
                .query::<i64>(&mut con)
                .is_err()
            {
                break;
            }
            acked.incrs_acked += 1;
        }
        if i.is_multiple_of(5) {
            let m = acked.msets_sent;
            acked.msets_sent += 1;
            let mset: redis::RedisResult<()> = redis::cmd("MSET")
                .arg(format!("c{client}:m{m}:a"))
                .arg(m)
                .arg(format!("c{client}:m{m}:b"))
                .arg(m)
                .query(&mut con);
            if mset.is_err() {
                acked.msets_unacked.push(m);
                break;
            }
        }
    }
    acked
}

/// Checks what survived, then settles the counter (INCRs in flight at the
/// kill may or may not have been applied), so the next cycle counts from
/// what is really there.
fn check(port: u16, client: usize, acked: &mut Acked) {
    let mut con = connect(port);
    // In MGETs of 1,000 keys: one round trip each, not one per key.
    for first in (0..acked.sets).step_by(1000) {
        let keys: Vec<u64> = (first..acked.sets.min(first + 1000)).collect();
        let values: Vec<Option<String>> = redis::cmd("MGET")
            .arg(
                keys.iter()
                    .map(|i| format!("c{client}:{i}"))
                    .collect::<Vec<_>>(),
            )
            .query(&mut con)
            .unwrap();
        for (i, value) in keys.iter().zip(values) {
            assert_eq!(
                value.as_deref(),
                Some(format!("v{i}").as_str()),
                "client {client} key {i}"
            );
        }
    }
    let counter: Option<u64> = redis::cmd("GET")
        .arg(format!("c{client}:counter"))
        .query(&mut con)
        .unwrap();
    let counter = counter.unwrap_or(0);
    assert!(
        (acked.incrs_acked..=acked.incrs_sent).contains(&counter),
        "client {client}: counter {counter}, acknowledged {}, sent {}",
        acked.incrs_acked,
        acked.incrs_sent
    );
    for m in 0..acked.msets_sent {
        let pair: (Option<u64>, Option<u64>) = redis::cmd("MGET")
            .arg(format!("c{client}:m{m}:a"))
            .arg(format!("c{client}:m{m}:b"))
            .query(&mut con)
            .unwrap();
        match pair {
            (Some(a), Some(b)) => assert!(a == m && b == m, "client {client} mset {m}: {pair:?}"),
            (None, None) => assert!(
                acked.msets_unacked.contains(&m),
                "client {client}: acknowledged MSET {m} lost"
            ),
            torn => panic!("client {client}: MSET {m} half applied: {torn:?}"),
        }
    }
    acked.incrs_acked = counter;
    acked.incrs_sent = counter;
}

#[test]
fn sigkill_during_writes_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let acked = (0..CLIENTS).map(|_| Acked::default()).collect();
    kill_cycles(
        &dir.path().join("data"),
        KILL_CYCLES,
        acked,
        writer,
        check,
        |_, _| {},
    );
}
