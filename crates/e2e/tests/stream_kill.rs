//! `engram serve --durability always` killed with SIGKILL at least 30
//! times while producers XADD to a stream and consumers in two groups
//! XREADGROUP and XACK: after each restart every acknowledged XADD is there
//! with its ID and fields, IDs never go backwards, every acknowledged XACK
//! stays acknowledged, every entry delivered and not acknowledged is still
//! pending for its group (nothing lost), and no entry is delivered to a
//! group twice (nothing duplicated).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{connect, serve};

const KILLS: usize = 30;
const PRODUCERS: usize = 2;
const GROUPS: [&str; 2] = ["g1", "g2"];
const KEY: &str = "events";

/// A stream ID, ordered.
type Id = (u64, u64);

fn parse_id(text: &str) -> Id {
    let (ms, seq) = text.split_once('-').expect("an ID");
    (ms.parse().unwrap(), seq.parse().unwrap())
}

/// What a producer had acknowledged: each entry's ID and payload.
#[derive(Clone, Default)]
struct Produced {
    acked: Vec<(Id, u64)>,
    next: u64,
}

/// What a consumer (one per group) knows of its group.
#[derive(Clone, Default)]
struct Consumed {
    /// Every ID the group delivered (to this consumer: the only one).
    delivered: BTreeSet<Id>,
    /// IDs whose XACK was acknowledged.
    acked: BTreeSet<Id>,
    /// IDs of an XACK sent whose reply never came (applied or not).
    acking: Vec<Id>,
}

fn producer(
    port: u16,
    n: usize,
    start: &Produced,
    stop: &AtomicBool,
    count: &AtomicU64,
) -> Produced {
    let mut con = connect(port);
    let mut state = start.clone();
    while !stop.load(Ordering::Relaxed) {
        let payload = state.next;
        state.next += 1;
        let reply: redis::RedisResult<String> = redis::cmd("XADD")
            .arg(KEY)
            .arg("*")
            .arg("producer")
            .arg(n)
            .arg("n")
            .arg(payload)
            .query(&mut con);
        let Ok(id) = reply else { break };
        let id = parse_id(&id);
        if let Some(&(last, _)) = state.acked.last() {
            assert!(id > last, "producer {n}: ID {id:?} after {last:?}");
        }
        state.acked.push((id, payload));
        count.fetch_add(1, Ordering::Relaxed);
    }
    state
}

fn consumer(
    port: u16,
    group: &str,
    start: &Consumed,
    stop: &AtomicBool,
    count: &AtomicU64,
) -> Consumed {
    let mut con = connect(port);
    let mut state = start.clone();
    while !stop.load(Ordering::Relaxed) {
        let reply: redis::RedisResult<redis::Value> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(group)
            .arg("c")
            .arg("COUNT")
            .arg(7)
            .arg("BLOCK")
            .arg(100)
            .arg("STREAMS")
            .arg(KEY)
            .arg(">")
            .query(&mut con);
        let Ok(value) = reply else { break };
        let ids = delivered_ids(value);
        for id in &ids {
            assert!(
                state.delivered.insert(*id),
                "{group}: {id:?} delivered twice"
            );
        }
        // Acknowledge all but every third.
        let to_ack: Vec<Id> = ids.iter().copied().filter(|id| id.1 % 3 != 1).collect();
        if to_ack.is_empty() {
            continue;
        }
        let mut cmd = redis::cmd("XACK");
        cmd.arg(KEY).arg(group);
        for id in &to_ack {
            cmd.arg(format!("{}-{}", id.0, id.1));
        }
        state.acking = to_ack.clone();
        let acked: redis::RedisResult<i64> = cmd.query(&mut con);
        let Ok(n) = acked else { break };
        assert_eq!(n as usize, to_ack.len(), "{group}: XACK of fresh entries");
        state.acking.clear();
        state.acked.extend(to_ack);
        count.fetch_add(1, Ordering::Relaxed);
    }
    state
}

/// The IDs of an XREADGROUP reply (RESP2: [[key, [[id, fields]...]]]).
fn delivered_ids(value: redis::Value) -> Vec<Id> {
    use redis::Value;
    let Value::Array(streams) = value else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    for stream in streams {
        let Value::Array(parts) = stream else {
            panic!()
        };
        let Value::Array(entries) = &parts[1] else {
            panic!()
        };
        for entry in entries {
            let Value::Array(entry) = entry else { panic!() };
            let Value::BulkString(id) = &entry[0] else {
                panic!()
            };
            ids.push(parse_id(std::str::from_utf8(id).unwrap()));
        }
    }
    ids
}

/// The group's PEL as IDs.
fn pending(con: &mut redis::Connection, group: &str) -> BTreeSet<Id> {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(KEY)
        .arg(group)
        .arg("-")
        .arg("+")
        .arg(1_000_000)
        .query(con)
        .unwrap();
    rows.iter().map(|(id, ..)| parse_id(id)).collect()
}

fn check(port: u16, produced: &[Produced], consumed: &mut [Consumed]) {
    let mut con = connect(port);
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(KEY)
        .arg("-")
        .arg("+")
        .query(&mut con)
        .unwrap();
    let stored: BTreeMap<Id, Vec<String>> = entries
        .into_iter()
        .map(|(id, fields)| (parse_id(&id), fields))
        .collect();
    for (n, p) in produced.iter().enumerate() {
        for (id, payload) in &p.acked {
            let fields = stored
                .get(id)
                .unwrap_or_else(|| panic!("producer {n}: acknowledged {id:?} lost"));
            assert_eq!(
                fields,
                &vec![
                    "producer".to_string(),
                    n.to_string(),
                    "n".to_string(),
                    payload.to_string()
                ],
                "{id:?}"
            );
        }
    }
    let last: String = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(KEY)
        .query::<redis::Value>(&mut con)
        .map(|v| {
            let redis::Value::Array(items) = v else {
                panic!()
            };
            let at = items
                .iter()
                .position(|i| matches!(i, redis::Value::BulkString(b) if b == b"last-generated-id"))
                .unwrap();
            let redis::Value::BulkString(id) = &items[at + 1] else {
                panic!()
            };
            String::from_utf8(id.clone()).unwrap()
        })
        .unwrap();
    let last = parse_id(&last);
    for p in produced {
        if let Some(&(id, _)) = p.acked.last() {
            assert!(last >= id, "last ID {last:?} went back below {id:?}");
        }
    }
    for (group, state) in GROUPS.iter().zip(consumed.iter_mut()) {
        let pel = pending(&mut con, group);
        // An XACK in flight at the kill took effect or did not.
        for id in std::mem::take(&mut state.acking) {
            if !pel.contains(&id) {
                state.acked.insert(id);
            }
        }
        for id in &state.acked {
            assert!(
                !pel.contains(id),
                "{group}: acknowledged {id:?} pending again"
            );
        }
        for id in state.delivered.difference(&state.acked) {
            assert!(
                pel.contains(id),
                "{group}: delivered {id:?} lost from the PEL"
            );
        }
        // Entries delivered by a read whose reply never came are pending:
        // they count as delivered (a later `>` must not repeat them).
        for id in &pel {
            if !state.delivered.contains(id) {
                state.delivered.insert(*id);
            }
        }
    }
}

#[test]
fn acknowledged_stream_writes_and_acks_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = ["--durability", "always"];
    {
        let mut served = serve(&data, &args);
        let mut con = connect(served.port);
        for group in GROUPS {
            let _: () = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(KEY)
                .arg(group)
                .arg("$")
                .arg("MKSTREAM")
                .query(&mut con)
                .unwrap();
        }
        served.child.kill().unwrap();
        served.child.wait().unwrap();
    }
    let mut produced = vec![Produced::default(); PRODUCERS];
    let mut consumed = vec![Consumed::default(); GROUPS.len()];
    for cycle in 0..KILLS {
        let mut served = serve(&data, &args);
        let port = served.port;
        check(port, &produced, &mut consumed);
        let stop = Arc::new(AtomicBool::new(false));
        let counts: Vec<Arc<AtomicU64>> = (0..PRODUCERS + GROUPS.len())
            .map(|_| Arc::default())
            .collect();
        let producers: Vec<_> = produced
            .iter()
            .cloned()
            .enumerate()
            .map(|(n, start)| {
                let (stop, count) = (stop.clone(), counts[n].clone());
                thread::spawn(move || producer(port, n, &start, &stop, &count))
            })
            .collect();
        let consumers: Vec<_> = consumed
            .iter()
            .cloned()
            .enumerate()
            .map(|(g, start)| {
                let (stop, count) = (stop.clone(), counts[PRODUCERS + g].clone());
                thread::spawn(move || consumer(port, GROUPS[g], &start, &stop, &count))
            })
            .collect();
        thread::sleep(Duration::from_millis(150 + 10 * cycle as u64));
        // Every client got something acknowledged in this cycle.
        let deadline = Instant::now() + Duration::from_secs(60);
        for count in &counts {
            while count.load(Ordering::Relaxed) == 0 {
                assert!(
                    Instant::now() < deadline,
                    "cycle {cycle}: a client made no progress:\n{}",
                    served.log_text()
                );
                thread::sleep(Duration::from_millis(5));
            }
        }
        served.child.kill().expect("SIGKILL");
        served.child.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        produced = producers.into_iter().map(|h| h.join().unwrap()).collect();
        consumed = consumers.into_iter().map(|h| h.join().unwrap()).collect();
    }
    let mut served = serve(&data, &args);
    check(served.port, &produced, &mut consumed);
    let total: usize = produced.iter().map(|p| p.acked.len()).sum();
    let acks: usize = consumed.iter().map(|c| c.acked.len()).sum();
    assert!(total > 100 && acks > 50, "{total} entries, {acks} acks");
    let mut con = connect(served.port);
    let _: () = redis::cmd("SHUTDOWN").query(&mut con).unwrap_or(());
    assert!(served.child.wait().unwrap().success());
}
