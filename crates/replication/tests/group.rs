//! Three nodes in one process, over real TCP on loopback: an election, a
//! proposal's reply coming from its own apply, followers applying the same
//! entries in the same order, a follower refusing, read barriers, and a
//! leadership transfer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_replication::{Change, Committed, NodeConfig, Peer, Refused, Replica, StateMachine};
use parking_lot::Mutex;

/// Records every non-empty entry it applies; replies with the entry's
/// index and how many entries it holds.
type Applied = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

struct Recorder(Applied);

impl StateMachine for Recorder {
    fn apply(&mut self, entries: Vec<Committed>) {
        let mut seen = self.0.lock();
        for entry in entries {
            if entry.data.is_empty() {
                continue;
            }
            seen.push((entry.index, entry.data.to_vec()));
            if let Some(reply) = entry.reply {
                reply.send(format!("{}:{}", entry.index, seen.len()).into_bytes());
            }
        }
    }

    /// Every entry held: `[index u64][len u32][data]`...
    fn snapshot(&mut self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        for (index, data) in self.0.lock().iter() {
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
        Ok(out)
    }

    fn restore(&mut self, _index: u64, mut data: &[u8]) -> Result<(), String> {
        let mut seen = Vec::new();
        while !data.is_empty() {
            let index = u64::from_le_bytes(data[..8].try_into().unwrap());
            let len = u32::from_le_bytes(data[8..12].try_into().unwrap()) as usize;
            seen.push((index, data[12..12 + len].to_vec()));
            data = &data[12 + len..];
        }
        *self.0.lock() = seen;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), String> {
        Ok(())
    }
}

#[path = "support/ports.rs"]
mod ports;
use ports::free_port;

/// Elections after 300 to 600 ms of silence instead of 60 to 120: these
/// tests assume one leader throughout (transfers aside), and on a loaded
/// host a node can wait longer than 60 ms for the CPU.
const PATIENT_ELECTION_TICKS: usize = 30;

struct Group {
    nodes: Vec<Replica>,
    applied: Vec<Applied>,
    peers: Vec<Peer>,
    compact_bytes: u64,
    _dirs: Vec<tempfile::TempDir>,
}

fn start_group() -> Group {
    start_nodes(&[1, 2, 3], 64 << 20)
}

/// Nodes 1 to `n` with free loopback bus ports.
fn loopback_peers(n: u64) -> Vec<Peer> {
    (1..=n)
        .map(|id| Peer {
            id,
            bus: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        })
        .collect()
}

/// Starts the nodes `ids` of a group of three (the others can join later
/// through `join`), compacting their logs at `compact_bytes`.
fn start_nodes(ids: &[u64], compact_bytes: u64) -> Group {
    let peers = loopback_peers(3);
    let mut group = Group {
        nodes: Vec::new(),
        applied: Vec::new(),
        peers,
        compact_bytes,
        _dirs: Vec::new(),
    };
    for &id in ids {
        group.join(id);
    }
    group
}

impl Group {
    /// Starts node `id` with an empty directory.
    fn join(&mut self, id: u64) {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut config = NodeConfig::new(
            id,
            self.peers.clone(),
            dir.path().join("raft"),
            format!("127.0.0.1:{}", 7000 + id),
        );
        config.compact_bytes = self.compact_bytes;
        config.election_ticks = PATIENT_ELECTION_TICKS;
        let node = Replica::start(config, Box::new(Recorder(seen.clone()))).unwrap();
        self.nodes.push(node);
        self.applied.push(seen);
        self._dirs.push(dir);
    }
}

impl Group {
    /// Proposes `data` until a leader acknowledges it, through whichever
    /// node leads at each try, and returns that node. A leader that steps
    /// down meanwhile (an election on a loaded machine) leaves the outcome
    /// unknown: the entry may then be applied twice, as a retrying
    /// client's would.
    async fn propose_until_acknowledged(&self, data: Vec<u8>) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(leader) = (0..self.nodes.len()).find(|&i| self.nodes[i].is_leader()) {
                match self.nodes[leader].propose(data.clone()).await {
                    Ok(_) => return leader,
                    Err(Refused::Unknown | Refused::NotLeader(_)) => {}
                    Err(e) => panic!("{e:?}"),
                }
            }
            assert!(
                Instant::now() < deadline,
                "no leader acknowledged {:?}",
                String::from_utf8_lossy(&data)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn wait_for_leader(group: &Group) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let leaders: Vec<usize> = (0..3).filter(|&i| group.nodes[i].is_leader()).collect();
        if leaders.len() == 1 {
            let leader = leaders[0];
            // Every node knows it.
            if group
                .nodes
                .iter()
                .all(|n| n.leader() == group.nodes[leader].id())
            {
                return leader;
            }
        }
        assert!(Instant::now() < deadline, "no leader elected");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_group_elects_a_leader_and_replicates_in_order() {
    let group = start_group();
    let leader = wait_for_leader(&group);
    let follower = (leader + 1) % 3;

    // A follower refuses and names the leader.
    let refused = group.nodes[follower].propose(b"nope".to_vec()).await;
    assert_eq!(
        refused,
        Err(Refused::NotLeader(Some(group.nodes[leader].id())))
    );
    assert!(matches!(
        group.nodes[follower].read_barrier().await,
        Err(Refused::NotLeader(_))
    ));

    // Proposals, some concurrent: each reply comes from its own apply.
    let node = &group.nodes[leader];
    let mut replies = Vec::new();
    for round in 0..20 {
        let batch: Vec<_> = (0..5)
            .map(|i| node.propose(format!("w{round}-{i}").into_bytes()))
            .collect();
        for reply in futures_join(batch).await {
            let applied = reply.unwrap();
            let text = String::from_utf8(applied.reply).unwrap();
            // The reply names the entry's index, which the proposer hears.
            assert!(text.starts_with(&format!("{}:", applied.index)), "{text}");
            replies.push(text);
        }
    }
    assert_eq!(replies.len(), 100);
    let counts: Vec<usize> = replies
        .iter()
        .map(|r| r.split(':').nth(1).unwrap().parse().unwrap())
        .collect();
    let mut sorted = counts.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (1..=100).collect::<Vec<_>>(),
        "each write applied once"
    );

    // A read barrier on the leader returns after everything acknowledged
    // is applied there.
    node.read_barrier().await.unwrap();
    assert_eq!(group.applied[leader].lock().len(), 100);

    // Every follower applies the same entries in the same order.
    let deadline = Instant::now() + Duration::from_secs(10);
    while group.applied.iter().any(|a| a.lock().len() < 100) {
        assert!(Instant::now() < deadline, "followers did not catch up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reference = group.applied[leader].lock().clone();
    for applied in &group.applied {
        assert_eq!(*applied.lock(), reference);
    }
    // Every node learned every other's client address from the bus.
    let everyone_known = || {
        group.nodes.iter().all(|n| {
            (1..=3).all(|id| n.client_addr(id) == Some(format!("127.0.0.1:{}", 7000 + id)))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !everyone_known() {
        assert!(Instant::now() < deadline, "client addresses not learned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A connection that says it is no member, or a member that sends
    // garbage, is cut off; the node goes on.
    let hello = |id: u64| {
        let address = format!("127.0.0.1:{}", 7000 + id);
        let body = [&id.to_le_bytes()[..], &[0], address.as_bytes()].concat();
        [&(body.len() as u32).to_le_bytes()[..], &body].concat()
    };
    let member = group.nodes[leader].id();
    for garbage in [
        hello(9),
        // A frame announcing more than any frame may hold.
        [hello(member), u32::MAX.to_le_bytes().to_vec()].concat(),
        // A frame that is no Raft message.
        [hello(member), 3u32.to_le_bytes().to_vec(), vec![0xFF; 3]].concat(),
    ] {
        use std::io::{Read, Write};
        let mut peer = std::net::TcpStream::connect(group.nodes[follower].bus_addr).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        peer.write_all(&garbage).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(
            peer.read(&mut buf).unwrap(),
            0,
            "the bus closes the connection"
        );
    }
    assert_eq!(group.nodes[follower].client_addr(9), None);
    let applied = node.propose(b"after garbage".to_vec()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while group.applied[follower].lock().len() < 101 {
        assert!(Instant::now() < deadline, "the follower stopped applying");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        group.applied[follower].lock().last().unwrap().0,
        applied.index
    );

    // Leadership moves where it is asked to.
    let target = group.nodes[follower].id();
    node.transfer_leader(target);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !group.nodes[follower].is_leader() {
        assert!(Instant::now() < deadline, "transfer did not happen");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let applied = group.nodes[follower]
        .propose(b"after".to_vec())
        .await
        .unwrap();
    assert!(String::from_utf8(applied.reply).unwrap().ends_with(":102"));
    // Both followers hold it once the new leader has heard back.
    let deadline = Instant::now() + Duration::from_secs(10);
    while group.nodes[follower].followers_holding(applied.index) < 2 {
        assert!(Instant::now() < deadline, "followers never caught up");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        group.nodes[leader].followers_holding(1),
        0,
        "not the leader"
    );
    let status = group.nodes[follower].status();
    assert_eq!(status.role, "leader");
    assert_eq!(status.progress.len(), 2);
}

/// Proposals that reach the leader together go to each follower in few
/// appends (raft-rs's `batch_append`), not one append per entry: a
/// follower steps, logs and answers once per batch.
#[tokio::test(flavor = "current_thread")]
async fn proposals_made_together_reach_each_follower_in_few_appends() {
    let group = start_group();
    let leader = wait_for_leader(&group);
    let node = &group.nodes[leader];
    // A few alone first, so that both followers' progress replicates
    // (while probing, raft-rs sends one append at a time anyway).
    for i in 0..5 {
        node.propose(format!("warm-{i}").into_bytes())
            .await
            .unwrap();
    }
    let sent = |node: &Replica| {
        let status = node.status();
        (status.appends_sent, status.entries_sent)
    };
    let (appends_before, entries_before) = sent(node);
    const TOGETHER: usize = 400;
    let proposals: Vec<_> = (0..TOGETHER)
        .map(|i| node.propose(format!("together-{i}").into_bytes()))
        .collect();
    for applied in futures_join(proposals).await {
        applied.unwrap();
    }
    // Every entry went to both followers (the status is published by the
    // Raft loop after each pass).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (appends, entries) = loop {
        let (appends, entries) = sent(node);
        let entries = entries - entries_before;
        if entries >= 2 * TOGETHER as u64 {
            break (appends - appends_before, entries);
        }
        assert!(Instant::now() < deadline, "only {entries} entries sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        appends * 4 <= entries,
        "{appends} appends carried {entries} entries: proposals were not batched"
    );
}

/// Awaits every future, in order (no extra dependency for join_all).
async fn futures_join<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut handles = Vec::new();
    for f in futures {
        handles.push(Box::pin(f));
    }
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await);
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn a_node_that_joins_after_compaction_is_sent_a_snapshot() {
    let _ = env_logger::builder().is_test(true).try_init();
    // Two of three nodes are a majority: they commit, and compact their
    // logs every 16 KiB.
    let mut group = start_nodes(&[1, 2], 16 << 10);
    // Through whichever node leads: on a loaded machine a missed heartbeat
    // can move the leadership (check-quorum), and nothing here depends on
    // which node leads.
    let mut leader = 0;
    for i in 0..600 {
        let data = format!("entry {i:04} {}", "x".repeat(100)).into_bytes();
        leader = group.propose_until_acknowledged(data).await;
    }
    let status = group.nodes[leader].status();
    assert!(
        status.compacted > 0,
        "the leader's log was never compacted: {status:?}"
    );
    // The third node starts empty: the entries it lacks are gone from
    // every log, so only a snapshot brings it up to date.
    group.join(3);
    let newcomer = 2;
    let deadline = Instant::now() + Duration::from_secs(20);
    while group.nodes[newcomer].applied() < group.nodes[leader].applied() {
        assert!(
            Instant::now() < deadline,
            "the new node never caught up: {:?}",
            group.nodes[newcomer].status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(group.nodes[newcomer].status().snapshots_installed >= 1);
    let built: u64 = (0..2)
        .map(|i| group.nodes[i].status().snapshots_built)
        .sum();
    assert!(built >= 1, "no snapshot was built");
    // Its state is the leader's, and it goes on applying what follows.
    let leader = group.propose_until_acknowledged(b"after".to_vec()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (a, b) = (
            group.applied[leader].lock().clone(),
            group.applied[newcomer].lock().clone(),
        );
        if a == b && a.last().is_some_and(|(_, d)| d == b"after") {
            // A proposal retried after a change of leader may be there
            // twice; every one is there.
            let distinct: std::collections::BTreeSet<&Vec<u8>> = a.iter().map(|(_, d)| d).collect();
            assert_eq!(distinct.len(), 601);
            break;
        }
        assert!(Instant::now() < deadline, "the new node's state differs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_joining_node_gets_a_snapshot_then_votes() {
    let _ = env_logger::builder().is_test(true).try_init();
    let peers = loopback_peers(4);
    let mut group = Group {
        nodes: Vec::new(),
        applied: Vec::new(),
        peers: peers[..3].to_vec(),
        compact_bytes: 64 << 20,
        _dirs: Vec::new(),
    };
    for id in 1..=3 {
        group.join(id);
    }
    let leader = wait_for_leader(&group);
    for i in 0..50 {
        group.nodes[leader]
            .propose(format!("before {i}").into_bytes())
            .await
            .unwrap();
    }
    // Node 4 starts with no membership and waits for the leader.
    group.peers = peers.clone();
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut config = NodeConfig::new(
        4,
        peers.clone(),
        dir.path().join("raft"),
        "127.0.0.1:7004".into(),
    );
    config.join = true;
    config.election_ticks = PATIENT_ELECTION_TICKS;
    let node4 = Replica::start(config, Box::new(Recorder(seen.clone()))).unwrap();
    assert!(node4.members().is_empty());
    let applied = group.nodes[leader]
        .change_members(Change::Add {
            id: 4,
            bus: peers[3].bus,
        })
        .await
        .unwrap();
    assert!(applied.index > 50);
    // A second change while the first (the promotion) may be pending, or
    // a duplicate, is refused with a reason.
    let again = group.nodes[leader]
        .change_members(Change::Add {
            id: 4,
            bus: peers[3].bus,
        })
        .await;
    assert!(matches!(again, Err(Refused::Invalid(_))), "{again:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = group.nodes[leader].status();
        if status.learners.is_empty() && group.nodes[leader].members() == vec![1, 2, 3, 4] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 4 never became a voter: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        node4.status().snapshots_installed,
        1,
        "{:?}",
        node4.status()
    );
    assert_eq!(node4.members(), vec![1, 2, 3, 4]);
    // Its state is the others': what the snapshot held, then the log.
    group.nodes[leader]
        .propose(b"after".to_vec())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.lock().last().map(|(_, d)| d.clone()) != Some(b"after".to_vec()) {
        assert!(Instant::now() < deadline, "node 4 does not apply");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*seen.lock(), *group.applied[leader].lock());

    // A follower is removed; the rest go on.
    let removed = (0..3).find(|&i| i != leader).unwrap();
    let removed_id = group.nodes[removed].id();
    group.nodes[leader]
        .change_members(Change::Remove { id: removed_id })
        .await
        .unwrap();
    assert!(!group.nodes[leader].members().contains(&removed_id));
    let refused = group.nodes[leader]
        .change_members(Change::Remove {
            id: group.nodes[leader].id(),
        })
        .await;
    assert!(matches!(refused, Err(Refused::Invalid(ref why)) if why.contains("leadership")));
    group.nodes[leader].propose(b"last".to_vec()).await.unwrap();
}
