//! Blizzard's replication microbenchmark (section 8.1 of its paper): a
//! no-op operation, 32 operations batched into one Raft entry, three
//! nodes, the reply as soon as the entry is committed (a majority holds it
//! durably) and applied (a no-op) on the leader.
//!
//!     cargo run --release -p engram-replication --example noop -- [SECONDS] [CLIENTS]
//!
//! Three nodes in this process over TCP on loopback, each with its Raft
//! log on a region in a temporary directory (synced, `msync`, before it
//! acknowledges). CLIENTS (default 64) tasks each propose one entry of 32
//! 16-byte operations at a time; prints operations per second and the
//! entries' commit latency (p50, p99).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_replication::{Committed, NodeConfig, Peer, Replica, StateMachine};

const BATCH: usize = 32;
const OP_BYTES: usize = 16;

/// Applies nothing; answers the proposer at once.
struct NoOp;

impl StateMachine for NoOp {
    fn apply(&mut self, entries: Vec<Committed>) {
        for entry in entries {
            if let Some(reply) = entry.reply {
                reply.send(Vec::new());
            }
        }
    }

    fn snapshot(&mut self) -> Result<Vec<u8>, String> {
        Ok(Vec::new())
    }

    fn restore(&mut self, _index: u64, _data: &[u8]) -> Result<(), String> {
        Ok(())
    }

    fn sync(&mut self) -> Result<(), String> {
        Ok(())
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let clients: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let peers: Vec<Peer> = (1..=3)
        .map(|id| Peer {
            id,
            bus: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        })
        .collect();
    let nodes: Vec<Arc<Replica>> = (0..3)
        .map(|i| {
            let config = NodeConfig::new(
                i as u64 + 1,
                peers.clone(),
                dirs[i].path().join("raft"),
                format!("127.0.0.1:{}", 7000 + i),
            );
            Arc::new(Replica::start(config, Box::new(NoOp)).unwrap())
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        if let Some(leader) = nodes.iter().find(|n| n.is_leader()) {
            break leader.clone();
        }
        assert!(Instant::now() < deadline, "no leader");
        std::thread::sleep(Duration::from_millis(10));
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let latencies = runtime.block_on(async {
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let (leader, stop) = (leader.clone(), stop.clone());
                tokio::spawn(async move {
                    let entry = vec![0xA5u8; BATCH * OP_BYTES];
                    let mut latencies = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let sent = Instant::now();
                        leader.propose(entry.clone()).await.expect("committed");
                        latencies.push(sent.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut latencies = latencies;
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "{} entries of {BATCH} no-op operations in {elapsed:.1} s, {clients} clients: \
         {:.0} operations/s ({:.0} entries/s); entry commit latency p50 {:?}, p99 {:?}",
        latencies.len(),
        (latencies.len() * BATCH) as f64 / elapsed,
        latencies.len() as f64 / elapsed,
        at(0.5),
        at(0.99),
    );
    let status = leader.status();
    println!(
        "leader: term {}, commit {}, log {} bytes",
        status.term, status.commit, status.log_bytes
    );
    std::process::exit(0);
}
