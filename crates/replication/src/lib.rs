//! Replication: a shard is a Raft group (DESIGN.md, "replication";
//! Blizzard's coupled log, TH-DPMS's fast failover).
//!
//! Consensus is TiKV's raft-rs; Engram writes none of its own. This crate
//! gives it what it needs and nothing Redis-shaped:
//! - `raft_log`: the durable Raft log and hard state on a persistent region,
//!   reached through the `pmem` helpers like every other persistent byte;
//! - `bus`: Raft messages between the nodes over TCP, batched per peer;
//! - `node`: the Raft loop, the apply thread, and `Replica`, the handle
//!   the server holds (propose, read barrier, leadership, status).
//!
//! What an entry means is the state machine's business (the server
//! replicates client commands and applies them to its keyspace).

#![forbid(unsafe_code)]

mod bus;
mod error;
mod membership;
mod node;
mod raft_log;
mod snapshots;

pub use error::{Error, Result};
pub use membership::Change;
pub use node::{
    parse_peers, Applied, Committed, LogSync, LogSyncPolicy, NodeConfig, Peer, Refused, Replica,
    Reply, StateMachine, Status,
};
pub use raft_log::RaftLog;
