//! # engram-bench: benchmarks as experiments
//!
//! `engine` runs Viper's micro-benchmarks (VLDB 2021, 5.3.1): prefill N
//! records, then measure insert (fresh keys), get (copied out), update
//! (re-put of existing keys) and delete, each op timed into an HdrHistogram,
//! plus recovery after a crash. Every system runs the same workload in the
//! same process invocation, one after another, and the report gives the ratio
//! of Engram to each peer. Peers: a volatile baseline (always), RocksDB and
//! LMDB (with the `peers` feature).

pub mod engine;
mod report;
mod systems;
mod workload;

pub use engine::{run, Config, Report};
pub use systems::SystemKind;
pub use workload::Distribution;
