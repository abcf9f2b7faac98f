//! Engram, embedded: `engram::Store::open(dir, engram::Options::default())`
//! for strings, `engram::collections::Collections` for hashes, sets, sorted
//! sets and lists.
//!
//! This crate is the facade over the layers and the home of the `engram`
//! binary. See README.md for the durability contract and ARCHITECTURE.md
//! for the map of the code.

#![forbid(unsafe_code)]

pub use engram_engine::*;

/// Durable collections (DIPPER): see [`engram_collections`].
pub use engram_collections as collections;
