//! A Raft group's logs compact, and a node the logs cannot catch up
//! rejoins from a snapshot (issue 26): three `engram serve` processes on
//! loopback compacting their logs every 64 KiB; a follower is killed, its
//! directory emptied (a lost disk), the group writes on until the leader's
//! log no longer holds what it missed; the node restarts empty, installs
//! the leader's snapshot, and then holds every key of every type, every
//! database, every expiry and the FUNCTION libraries exactly as the leader
//! does (each key's DUMP payload compared). It then leads the group after
//! the old leader's death.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{connect, free_port, leader_among, on_leader, serve, Served};

const COMPACT: &str = "64kb";

fn start(dir: &std::path::Path, id: usize, peers: &str) -> Served {
    serve(
        dir,
        &[
            "--node-id",
            &id.to_string(),
            "--peers",
            peers,
            "--raft-compact-bytes",
            COMPACT,
            common::PATIENT_ELECTIONS[0],
            common::PATIENT_ELECTIONS[1],
        ],
    )
}

/// A field of INFO replication, as a number.
fn info_number(port: u16, field: &str) -> u64 {
    section_number(port, "replication", field)
}

/// A field of an INFO section, as a number.
fn section_number(port: u16, section: &str, field: &str) -> u64 {
    let mut con = connect(port);
    let info: String = redis::cmd("INFO").arg(section).query(&mut con).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .trim()
        .parse()
        .unwrap()
}

/// Every key of databases 0 and 3 with its DUMP payload and PTTL (an
/// expiry shown as present or not: the milliseconds left move).
fn contents(port: u16) -> BTreeMap<(u8, Vec<u8>), (Vec<u8>, bool)> {
    let mut con = connect(port);
    let _: () = redis::cmd("READONLY").query(&mut con).unwrap_or(());
    let mut all = BTreeMap::new();
    for db in [0u8, 3] {
        let _: () = redis::cmd("SELECT").arg(db).query(&mut con).unwrap();
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        for key in keys {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut con).unwrap();
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
            all.insert((db, key), (dump, pttl > 0));
        }
    }
    all
}

fn libraries(port: u16) -> Vec<String> {
    let mut con = connect(port);
    let listed: redis::Value = redis::cmd("FUNCTION").arg("LIST").query(&mut con).unwrap();
    format!("{listed:?}")
        .split("library_name")
        .skip(1)
        .map(|s| s.chars().take(40).collect())
        .collect()
}

/// SETs `k{from}`..`k{to}` on the leader among `live` (which may move).
fn write_batch(live: &[u16], leader: &mut u16, from: usize, to: usize) {
    let mut pipe = redis::pipe();
    for i in from..to {
        pipe.cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("{i}-{}", "v".repeat(100)))
            .ignore();
    }
    on_leader(live, leader, |con| pipe.query::<()>(con));
}

#[test]
fn a_node_that_lost_its_disk_rejoins_from_a_snapshot() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let bus: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = common::group_peers(&bus);
    let mut nodes: Vec<Option<Served>> = (0..3)
        .map(|i| Some(start(dirs[i].path(), i + 1, &peers)))
        .collect();
    let mut ports: Vec<u16> = nodes.iter().map(|n| n.as_ref().unwrap().port).collect();
    let mut leader = leader_among(&ports);
    let at = |ports: &[u16], port: u16| ports.iter().position(|&p| p == port).unwrap();

    // Every kind of value, two databases, expiries, a library (with all
    // three nodes up: these writes cannot be repeated if leadership moves).
    write_batch(&ports, &mut leader, 0, 1000);
    let mut con = connect(leader);
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("h")
        .arg("f1")
        .arg("a")
        .arg("f2")
        .arg("b")
        .ignore()
        .cmd("RPUSH")
        .arg("l")
        .arg("x")
        .arg("y")
        .arg("z")
        .ignore()
        .cmd("SADD")
        .arg("s")
        .arg("m1")
        .arg("m2")
        .ignore()
        .cmd("ZADD")
        .arg("z")
        .arg(1.5)
        .arg("one")
        .arg(2)
        .arg("two")
        .ignore()
        .cmd("XADD")
        .arg("st")
        .arg("5-1")
        .arg("f")
        .arg("v")
        .ignore()
        .cmd("XGROUP")
        .arg("CREATE")
        .arg("st")
        .arg("g")
        .arg("0")
        .ignore()
        .cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("c")
        .arg("STREAMS")
        .arg("st")
        .arg(">")
        .ignore()
        .cmd("SET")
        .arg("ttl")
        .arg("t")
        .arg("PX")
        .arg(600_000)
        .ignore()
        .cmd("HSET")
        .arg("httl")
        .arg("f")
        .arg("v")
        .ignore()
        .cmd("PEXPIRE")
        .arg("httl")
        .arg(600_000)
        .ignore()
        .cmd("INCRBY")
        .arg("n")
        .arg(41)
        .ignore()
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=snaplib\nredis.register_function('snapf', function() return 7 end)")
        .query(&mut con)
        .unwrap();
    let mut db3 = connect(leader);
    let _: () = redis::cmd("SELECT").arg(3).query(&mut db3).unwrap();
    let _: () = redis::cmd("SET")
        .arg("in3")
        .arg("three")
        .query(&mut db3)
        .unwrap();

    // A follower loses its disk.
    let lost = (0..3).find(|&i| ports[i] != leader).unwrap();
    let mut dead = nodes[lost].take().unwrap();
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    drop(dead);
    for entry in std::fs::read_dir(dirs[lost].path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }

    // The group writes on until the leader's log starts after anything
    // the lost node ever held (past four times the compaction threshold,
    // the leader compacts without waiting for it).
    let live: Vec<u16> = (0..3).filter(|&i| i != lost).map(|i| ports[i]).collect();
    let mut next = 1000;
    let deadline = Instant::now() + Duration::from_secs(60);
    while info_number(leader, "raft_compacted_index") < info_number(leader, "raft_commit_index") / 2
        || next < 4000
    {
        write_batch(&live, &mut leader, next, next + 500);
        next += 500;
        assert!(
            Instant::now() < deadline,
            "the leader's log never compacted"
        );
    }
    on_leader(&live, &mut leader, |con| {
        redis::cmd("SET").arg("n").arg(42).query::<()>(con)
    });

    // The node restarts empty and is brought up to date by a snapshot.
    let rejoined = start(dirs[lost].path(), lost + 1, &peers);
    ports[lost] = rejoined.port;
    nodes[lost] = Some(rejoined);
    let deadline = Instant::now() + Duration::from_secs(60);
    while info_number(ports[lost], "raft_applied_index") < info_number(leader, "raft_commit_index")
    {
        assert!(
            Instant::now() < deadline,
            "the rejoined node never caught up:\n{}\nthe leader:\n{}",
            nodes[lost].as_ref().unwrap().log_text(),
            nodes[at(&ports, leader)].as_ref().unwrap().log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(info_number(ports[lost], "raft_snapshots_installed"), 1);
    assert!(info_number(leader, "raft_snapshots_built") >= 1);

    let expected = contents(leader);
    assert_eq!(expected.len(), next + 8 + 1, "keys on the leader");
    assert!(expected[&(0, b"ttl".to_vec())].1 && expected[&(0, b"httl".to_vec())].1);
    assert_eq!(contents(ports[lost]), expected);
    assert_eq!(libraries(ports[lost]), libraries(leader));
    assert!(libraries(leader)[0].contains("snaplib"));

    // It follows what comes next, and leads once the leader dies.
    on_leader(&ports, &mut leader, |con| {
        redis::cmd("SET").arg("after").arg(1).query::<()>(con)
    });
    let mut dead = nodes[at(&ports, leader)].take().unwrap();
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    drop(dead);
    let survivors: Vec<u16> = ports.iter().copied().filter(|&p| p != leader).collect();
    let mut new_leader = leader_among(&survivors);
    if new_leader != ports[lost] {
        let mut con = connect(ports[lost]);
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut con)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while new_leader != ports[lost] {
            assert!(
                Instant::now() < deadline,
                "the rejoined node never took over"
            );
            std::thread::sleep(Duration::from_millis(50));
            new_leader = leader_among(&survivors);
        }
    }
    let mut con = connect(new_leader);
    let n: i64 = redis::cmd("INCR").arg("n").query(&mut con).unwrap();
    assert_eq!(n, 43);
    let after: String = redis::cmd("GET").arg("after").query(&mut con).unwrap();
    assert_eq!(after, "1");
    let f: i64 = redis::cmd("FCALL")
        .arg("snapf")
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(f, 7);
    let pending: redis::Value = redis::cmd("XPENDING")
        .arg("st")
        .arg("g")
        .query(&mut con)
        .unwrap();
    assert!(format!("{pending:?}").contains("5-1"), "{pending:?}");
}

/// At `process` a node's log compacts without a sync of its keyspace
/// (what was applied is in the mapped files, which a crash of the process
/// leaves to the kernel): its `syncs` stay where they were while the log
/// compacts, and after a SIGKILL it comes back with every key and its
/// applied index, from its own files, with no snapshot.
#[test]
fn a_compaction_at_process_syncs_nothing_and_a_kill_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let peers = common::group_peers(&[free_port()]);
    let node = start(dir.path(), 1, &peers);
    let mut leader = leader_among(&[node.port]);
    let syncs = section_number(node.port, "persistence", "syncs");
    let mut next = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while info_number(node.port, "raft_compacted_index") == 0 {
        write_batch(&[node.port], &mut leader, next, next + 500);
        next += 500;
        assert!(Instant::now() < deadline, "the log never compacted");
    }
    assert_eq!(
        section_number(node.port, "persistence", "syncs"),
        syncs,
        "a compaction at process synced the keyspace"
    );
    let applied = info_number(node.port, "raft_applied_index");

    let mut node = node;
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    drop(node);
    let node = start(dir.path(), 1, &peers);
    let mut leader = leader_among(&[node.port]);
    assert!(info_number(node.port, "raft_applied_index") >= applied);
    assert_eq!(info_number(node.port, "raft_snapshots_installed"), 0);
    let mut con = connect(leader);
    let size: usize = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, next);
    for i in [0, next / 2, next - 1] {
        let value: String = redis::cmd("GET")
            .arg(format!("k{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(value, format!("{i}-{}", "v".repeat(100)));
    }
    // And it goes on writing.
    write_batch(&[node.port], &mut leader, next, next + 10);
}
