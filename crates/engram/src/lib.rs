//! Engram, embedded: `engram::Keyspace::open_dir(dir, &KeyspaceOptions)` for
//! the whole keyspace the server serves (strings and collections, atomic
//! multi-key batches, the server's durability choices through one group
//! commit); `engram::Store::open(dir, engram::Options::default())` for the
//! strings engine alone, `engram::collections::Collections` for hashes,
//! sets, sorted sets and lists alone.
//!
//! This crate is the facade over the layers and the home of the `engram`
//! binary. See README.md for the durability contract and ARCHITECTURE.md
//! for the map of the code.

#![forbid(unsafe_code)]

pub use engram_engine::*;

/// Durable collections (DIPPER): see [`engram_collections`].
pub use engram_collections as collections;

/// The keyspace over both stores: see [`engram_keyspace`].
pub use engram_keyspace as keyspace;
pub use engram_keyspace::{Durability, Keyspace, KeyspaceOptions};
