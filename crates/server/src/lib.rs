//! `engram serve`: a Redis-compatible server over the Engram engine.
//!
//! Layers, outside in: `connection` (a tokio task per client: read, parse,
//! run, reply) → `resp` (the protocol) → `commands` (the command table and
//! handlers) → `keyspace` (databases, types, expiry, locks, atomic batches
//! over the engine) → the engine. The keyspace's group commit decides when a
//! reply may leave; `serve` starts and stops it all. `offline_scrub` is `engram scrub`,
//! the integrity check of a stopped store; `rdb` is Redis's serialization
//! format (DUMP/RESTORE payloads, `engram import`).

#![forbid(unsafe_code)]

mod clients;
mod commands;
pub mod config;
mod connection;
pub mod glob;
mod info;
/// The keyspace is a crate of its own (below the server, beside embedders).
pub use engram_keyspace as keyspace;
pub mod offline_scrub;
pub mod rdb;
pub mod resp;
mod serve;
mod session;
mod shared;

pub use config::{Config, Durability, LogLevel};
pub use serve::{Server, StartError};

/// The Redis version Engram reports (HELLO, INFO): the command set and
/// replies follow Redis 7.2, and clients choose features by this number.
pub const REDIS_VERSION: &str = "7.2.0";
