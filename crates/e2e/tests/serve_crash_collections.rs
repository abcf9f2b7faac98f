//! `engram serve` killed with SIGKILL while clients write lists, hashes,
//! sorted sets, MULTIs mixing strings and collections, and keys that flip
//! between string and list: after each restart every acknowledged write is
//! there, nothing half-applied is visible, and a flipping key holds exactly
//! the last acknowledged state or the one in flight.

mod common;

use common::{connect, kill_cycles, Progress};

const CLIENTS: usize = 3;
const KILL_CYCLES: usize = 3;
/// Sorted-set members ZINCRBY spreads its votes over.
const MEMBERS: u64 = 10;

/// What one client had acknowledged (and sent) when the server died.
#[derive(Clone, Default)]
struct Acked {
    /// `RPUSH c{n}:list i` and `HSET c{n}:hash f{i} i` for i < steps.
    steps: u64,
    /// `ZINCRBY c{n}:z 1 m{i % MEMBERS}`: acknowledged, and sent.
    votes_acked: u64,
    votes_sent: u64,
    /// MULTI { SET c{n}:s{m} m; SADD c{n}:set m; HSET c{n}:mh f{m} m }:
    /// sent so far, and the one whose reply never came.
    multis_sent: u64,
    multi_unacked: Option<u64>,
    /// Unacknowledged MULTIs found not applied (they stay absent).
    multis_absent: Vec<u64>,
    /// Flips of `c{n}:flip` to state k (even k: the string "k" set over
    /// the list; odd k: MULTI { DEL; RPUSH k }): acknowledged, and whether
    /// the next one was in flight.
    flips_acked: u64,
    flip_in_flight: bool,
}

fn writer(port: u16, n: usize, start: &Acked, progress: &Progress) -> Acked {
    let mut con = connect(port);
    let mut acked = start.clone();
    let key = |name: &str| format!("c{n}:{name}");
    while !progress.stopped() {
        let i = acked.steps;
        let pushed: redis::RedisResult<i64> =
            redis::cmd("RPUSH").arg(key("list")).arg(i).query(&mut con);
        let hashed: redis::RedisResult<i64> = match pushed {
            Ok(_) => redis::cmd("HSET")
                .arg(key("hash"))
                .arg(format!("f{i}"))
                .arg(i)
                .query(&mut con),
            Err(e) => Err(e),
        };
        if hashed.is_err() {
            break;
        }
        acked.steps += 1;
        progress.acked();

        acked.votes_sent += 1;
        let voted: redis::RedisResult<f64> = redis::cmd("ZINCRBY")
            .arg(key("z"))
            .arg(1)
            .arg(format!("m{}", i % MEMBERS))
            .query(&mut con);
        if voted.is_err() {
            break;
        }
        acked.votes_acked += 1;

        if i.is_multiple_of(4) {
            let m = acked.multis_sent;
            acked.multis_sent += 1;
            let done: redis::RedisResult<()> = redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(key(&format!("s{m}")))
                .arg(m)
                .ignore()
                .cmd("SADD")
                .arg(key("set"))
                .arg(m)
                .ignore()
                .cmd("HSET")
                .arg(key("mh"))
                .arg(format!("f{m}"))
                .arg(m)
                .ignore()
                .query(&mut con);
            if done.is_err() {
                acked.multi_unacked = Some(m);
                break;
            }
        }

        if i.is_multiple_of(3) {
            let k = acked.flips_acked;
            acked.flip_in_flight = true;
            let flipped: redis::RedisResult<()> = if k.is_multiple_of(2) {
                redis::cmd("SET").arg(key("flip")).arg(k).query(&mut con)
            } else {
                redis::pipe()
                    .atomic()
                    .cmd("DEL")
                    .arg(key("flip"))
                    .ignore()
                    .cmd("RPUSH")
                    .arg(key("flip"))
                    .arg(k)
                    .ignore()
                    .query(&mut con)
            };
            if flipped.is_err() {
                break;
            }
            acked.flips_acked += 1;
            acked.flip_in_flight = false;
        }
    }
    acked
}

/// Checks what survived, then settles what was in flight at the kill, so
/// the next cycle continues from what is really there.
fn check(port: u16, n: usize, acked: &mut Acked) {
    let mut con = connect(port);
    let key = |name: &str| format!("c{n}:{name}");

    let list: Vec<u64> = redis::cmd("LRANGE")
        .arg(key("list"))
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert!(
        list.len() as u64 >= acked.steps && list.len() as u64 <= acked.steps + 1,
        "client {n}: list of {} after {} acknowledged pushes",
        list.len(),
        acked.steps
    );
    assert!(
        list.iter().enumerate().all(|(i, &v)| v == i as u64),
        "client {n}: list out of order"
    );
    let hash: std::collections::HashMap<String, u64> = redis::cmd("HGETALL")
        .arg(key("hash"))
        .query(&mut con)
        .unwrap();
    for i in 0..acked.steps {
        assert_eq!(
            hash.get(&format!("f{i}")),
            Some(&i),
            "client {n}: hash field {i}"
        );
    }
    // A push acknowledged without its HSET (killed between the two): the
    // next cycle pushes that step again, so settle the list to the hash.
    let steps = hash.len() as u64;
    assert!(steps == acked.steps || steps == acked.steps + 1);
    if list.len() as u64 > steps {
        let _: Vec<u64> = redis::cmd("RPOP")
            .arg(key("list"))
            .arg(1)
            .query(&mut con)
            .unwrap();
    }
    acked.steps = steps;

    let scores: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(key("z"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut con)
        .unwrap();
    let votes: f64 = scores.iter().map(|(_, s)| s).sum();
    assert!(
        votes >= acked.votes_acked as f64 && votes <= acked.votes_sent as f64,
        "client {n}: {votes} votes, {} acknowledged, {} sent",
        acked.votes_acked,
        acked.votes_sent
    );
    acked.votes_acked = votes as u64;
    acked.votes_sent = votes as u64;

    for m in 0..acked.multis_sent {
        let string: Option<u64> = redis::cmd("GET")
            .arg(key(&format!("s{m}")))
            .query(&mut con)
            .unwrap();
        let member: bool = redis::cmd("SISMEMBER")
            .arg(key("set"))
            .arg(m)
            .query(&mut con)
            .unwrap();
        let field: Option<u64> = redis::cmd("HGET")
            .arg(key("mh"))
            .arg(format!("f{m}"))
            .query(&mut con)
            .unwrap();
        match (string, member, field) {
            (Some(a), true, Some(b)) => assert!(a == m && b == m, "client {n} multi {m}"),
            (None, false, None) => {
                if acked.multi_unacked == Some(m) {
                    acked.multis_absent.push(m);
                }
                assert!(
                    acked.multis_absent.contains(&m),
                    "client {n}: acknowledged MULTI {m} lost"
                )
            }
            torn => panic!("client {n}: MULTI {m} half applied: {torn:?}"),
        }
    }
    acked.multi_unacked = None;

    if acked.flips_acked > 0 || acked.flip_in_flight {
        let kind: String = redis::cmd("TYPE").arg(key("flip")).query(&mut con).unwrap();
        if kind == "none" {
            assert_eq!(acked.flips_acked, 0, "client {n}: acknowledged flips lost");
            acked.flip_in_flight = false;
            return;
        }
        let k: u64 = match kind.as_str() {
            "string" => redis::cmd("GET").arg(key("flip")).query(&mut con).unwrap(),
            "list" => {
                let items: Vec<u64> = redis::cmd("LRANGE")
                    .arg(key("flip"))
                    .arg(0)
                    .arg(-1)
                    .query(&mut con)
                    .unwrap();
                assert_eq!(items.len(), 1, "client {n}: flip list {items:?}");
                items[0]
            }
            other => panic!("client {n}: flip key is {other:?}"),
        };
        assert_eq!(
            k.is_multiple_of(2),
            kind == "string",
            "client {n}: flip state {k} has the wrong type {kind}"
        );
        let last_acked = acked.flips_acked.checked_sub(1);
        let in_flight = acked.flip_in_flight.then_some(acked.flips_acked);
        assert!(
            Some(k) == last_acked || Some(k) == in_flight,
            "client {n}: flip state {k}; last acknowledged {last_acked:?}, in flight {in_flight:?}"
        );
        acked.flips_acked = k + 1;
        acked.flip_in_flight = false;
    }
}

#[test]
fn sigkill_during_collection_writes_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let acked = (0..CLIENTS).map(|_| Acked::default()).collect();
    kill_cycles(
        &dir.path().join("data"),
        KILL_CYCLES,
        acked,
        writer,
        check,
        |cycle, port| {
            if cycle == 1 {
                // A checkpoint folds the log so far; the rest replays on top.
                let _: () = redis::cmd("SAVE").query(&mut connect(port)).unwrap();
            }
        },
    );
}
