//! `engram serve`: a Redis-compatible server over the Engram engine.
//!
//! Layers, outside in: `accept` (the plain and TLS ports; `tls` for the
//! handshake) → `connection` (a tokio task per client: read, parse,
//! run, reply) → `resp` (the protocol) → `commands` (the command table and
//! handlers) → `keyspace` (databases, types, expiry, locks, atomic batches
//! over the engine) → the engine. The keyspace's group commit decides when a
//! reply may leave; `serve` starts and stops it all. `offline_scrub` is `engram scrub`,
//! the integrity check of a stopped store; `rdb` is Redis's serialization
//! format (DUMP/RESTORE payloads, `engram import`).

#![forbid(unsafe_code)]

mod accept;
mod acl;
mod bits;
mod clients;
mod command_stats;
mod commands;
pub mod config;
mod connection;
mod delivery;
mod eviction;
pub mod glob;
mod group;
mod hll;
mod info;
mod latency;
mod maxmemory;
mod migrate_target;
mod monitor;
mod net_loops;
mod notify;
/// The keyspace is a crate of its own (below the server, beside embedders).
pub use engram_keyspace as keyspace;
pub mod offline_scrub;
mod outbox;
mod output_limit;
mod pause;
mod protected_mode;
mod pubsub;
mod random;
pub mod rdb;
mod redis_params;
mod reload;
pub mod resp;
mod scripting;
mod serve;
mod session;
mod shared;
mod slowlog;
mod snapshot;
pub mod tls;
mod tracking;

pub use config::{Config, Durability, LogLevel};
pub use serve::{Server, StartError};

/// The Redis version Engram reports (HELLO, INFO): the one whose command
/// set and replies Engram follows, so clients that choose features by
/// this number call only commands that are here (COMPATIBILITY.md lists
/// the families still missing).
pub const REDIS_VERSION: &str = "7.0.15";
