//! Membership changes of a Raft group (issue 26): a fourth node started
//! with `--join` is added with ENGRAM.GROUP ADD, receives the leader's
//! state as a snapshot, is promoted to voter once caught up, and then
//! helps elect a leader; a node is removed with ENGRAM.GROUP REMOVE; a
//! node restarted with its old `--peers` knows the members from its last
//! change; wrong changes are refused with a reason.

mod common;

use std::time::{Duration, Instant};

use common::{connect, free_port, leader_among, serve, wait_replicated, Served};

fn start(dir: &std::path::Path, id: u64, peers: &str, join: bool) -> Served {
    let id = id.to_string();
    let mut args = vec!["--node-id", &id, "--peers", peers];
    if join {
        args.push("--join");
    }
    args.extend(common::PATIENT_ELECTIONS);
    serve(dir, &args)
}

/// ENGRAM.GROUP MEMBERS as (id, role) pairs.
fn members(port: u16) -> Vec<(u64, String)> {
    let mut con = connect(port);
    let rows: Vec<(u64, String, String)> = redis::cmd("ENGRAM.GROUP")
        .arg("MEMBERS")
        .query(&mut con)
        .unwrap();
    rows.into_iter().map(|(id, role, _)| (id, role)).collect()
}

fn group(port: u16, args: &[&str]) -> redis::RedisResult<String> {
    let mut con = connect(port);
    redis::cmd("ENGRAM.GROUP").arg(args).query(&mut con)
}

fn kill(node: &mut Option<Served>) {
    let mut node = node.take().unwrap();
    node.child.kill().unwrap();
    node.child.wait().unwrap();
}

#[test]
fn a_node_is_added_promoted_and_another_removed() {
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let bus: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let (three, four) = (common::group_peers(&bus[..3]), common::group_peers(&bus));
    let mut nodes: Vec<Option<Served>> = (0..3)
        .map(|i| Some(start(dirs[i].path(), i as u64 + 1, &three, false)))
        .collect();
    let mut ports: Vec<u16> = nodes.iter().map(|n| n.as_ref().unwrap().port).collect();
    let leader = leader_among(&ports);
    let mut con = connect(leader);
    let mut pipe = redis::pipe();
    for i in 0..200 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
    }
    pipe.cmd("HSET").arg("h").arg("f").arg("v").ignore();
    let _: () = pipe.query(&mut con).unwrap();
    assert_eq!(
        members(leader),
        vec![
            (1, role_of(1, &ports, leader)),
            (2, role_of(2, &ports, leader)),
            (3, role_of(3, &ports, leader)),
        ]
    );

    // Wrong changes are refused with a reason.
    let refused = |args: &[&str], want: &str| {
        let error = group(leader, args).unwrap_err().to_string();
        assert!(error.contains(want), "{args:?}: {error}");
    };
    refused(&["ADD", "2", "127.0.0.1:1"], "node 2 is already a member");
    refused(&["REMOVE", "9"], "node 9 is not a member");
    let leader_id = (ports.iter().position(|&p| p == leader).unwrap() + 1).to_string();
    refused(
        &["REMOVE", &leader_id],
        "hand leadership to another node first",
    );
    refused(&["ADD", "0", "127.0.0.1:1"], "above 0");
    refused(&["ADD", "5", "nowhere"], "HOST:PORT");
    refused(&["ADD", "5"], "wrong number of arguments");
    refused(&["FROB"], "unknown subcommand");
    let follower = *ports.iter().find(|&&p| p != leader).unwrap();
    assert!(
        group(follower, &["REMOVE", "3"]).is_err(),
        "a follower refuses"
    );

    // Node 4 joins: started empty with --join, then added on the leader.
    nodes.push(Some(start(dirs[3].path(), 4, &four, true)));
    ports.push(nodes[3].as_ref().unwrap().port);
    let bus4 = format!("127.0.0.1:{}", bus[3]);
    assert_eq!(group(leader, &["ADD", "4", &bus4]).unwrap(), "OK");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !members(leader).contains(&(4, "voter".to_string())) {
        assert!(
            Instant::now() < deadline,
            "node 4 was never promoted: {:?}",
            members(leader)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_replicated(ports[3], "k199", "199");
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("4")
        .query(&mut con)
        .unwrap();
    wait_replicated(ports[3], "after", "4");
    assert_eq!(members(ports[3]).len(), 4, "node 4 knows the members");

    // A follower other than node 4 is removed, then stopped.
    let removed = (0..3).find(|&i| ports[i] != leader).unwrap();
    let removed_id = (removed + 1).to_string();
    assert_eq!(group(leader, &["REMOVE", &removed_id]).unwrap(), "OK");
    let ids: Vec<u64> = members(leader).into_iter().map(|(id, _)| id).collect();
    assert!(
        !ids.contains(&(removed as u64 + 1)) && ids.len() == 3,
        "{ids:?}"
    );
    // The removed node, once it applied its removal, no longer serves
    // even stale reads: it sends clients to the leader.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refusal = loop {
        let mut con = connect(ports[removed]);
        let _: () = redis::cmd("READONLY").query(&mut con).unwrap();
        match redis::cmd("GET")
            .arg("after")
            .query::<Option<String>>(&mut con)
        {
            Err(e) => break e.to_string(),
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "the removed node still serves reads"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert!(
        refusal.contains(&format!("127.0.0.1:{leader}")) || refusal.contains("removed"),
        "{refusal}"
    );
    kill(&mut nodes[removed]);
    // The leader dies: the two voters left (one of them node 4) elect one.
    let leader_at = ports.iter().position(|&p| p == leader).unwrap();
    kill(&mut nodes[leader_at]);
    let survivors: Vec<u16> = (0..4)
        .filter(|&i| i != removed && i != leader_at)
        .map(|i| ports[i])
        .collect();
    let new_leader = leader_among(&survivors);
    let mut con = connect(new_leader);
    let n: i64 = redis::cmd("INCR").arg("k7").query(&mut con).unwrap();
    assert_eq!(n, 8);

    // The old leader restarts with the --peers it was first given: it
    // knows node 4 from its last change and catches up.
    nodes[leader_at] = Some(start(
        dirs[leader_at].path(),
        leader_at as u64 + 1,
        &three,
        false,
    ));
    ports[leader_at] = nodes[leader_at].as_ref().unwrap().port;
    wait_replicated(ports[leader_at], "k7", "8");
    let known: Vec<u64> = members(ports[leader_at])
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert!(known.contains(&4), "{known:?}");
}

/// The role ENGRAM.GROUP MEMBERS gives node `id`.
fn role_of(id: usize, ports: &[u16], leader: u16) -> String {
    if ports[id - 1] == leader {
        "leader".into()
    } else {
        "voter".into()
    }
}

#[test]
fn engram_group_on_a_single_node_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = serve(dir.path(), &[]);
    let error = group(node.port, &["MEMBERS"]).unwrap_err().to_string();
    assert!(
        error.contains("not a member of a replicated group"),
        "{error}"
    );
}
