//! Engram, embedded: `engram::Store::open(dir, engram::Options::default())`.
//!
//! This crate is the facade over the layers (today the engine) and the home
//! of the `engram` binary. See README.md for the durability contract and
//! ARCHITECTURE.md for the map of the code.

#![forbid(unsafe_code)]

pub use engram_engine::*;
