//! # engram-bench: benchmarks as experiments
//!
//! [`engine`] runs Viper's micro-benchmarks (VLDB 2021, section 5.3.1):
//! prefill N records, then measure insert (fresh keys), get (value copied
//! out), update (re-put of existing keys) and delete, each operation timed
//! into an HdrHistogram, and then recovery after a crash. Every system runs
//! the same workload in the same process invocation, one after another, and
//! the report gives Engram's throughput as a multiple of each peer's.
//!
//! Systems: Engram, a volatile baseline (always), RocksDB and LMDB (with the
//! `peers` feature). They sit behind one trait in [`systems`]; the workload
//! (keys, values, key choice) is in [`workload`], the timed threads in
//! [`runner`], the JSON and the table in [`report`]. Each timed recovery
//! starts from its own copy of the crash image (`crash_image`).
//!
//! [`tracker`] (`engram-bench tracker`) measures dirty-page tracking:
//! Engram's software marks against the kernel's (userfaultfd async write
//! protection collected with `PAGEMAP_SCAN`), and what each costs after a
//! crash.
//!
//! [`integrity`] (`engram-bench integrity`) measures the integrity layer:
//! YCSB A, B and write-only over the embedded store with integrity off,
//! lazy (1 s, 30 s) and inline, time to coverage, and scrub speed.
//!
//! [`timeline`] (`engram-bench timeline`) measures the collections layer
//! (DIPPER, `engram-collections`) over time: throughput per 10 ms window
//! and tail latency with background, no and stop-the-world checkpoints
//! (quiescent freedom), YCSB A–F over collections and strings, and
//! recovery from the log alone and from checkpoint images.
//!
//! [`server`] (`engram-bench server`) runs redis-benchmark against
//! `engram serve` and redis-server; it starts the `engram` binary found
//! beside `engram-bench`.
//!
//! [`stream_pairs`] (`engram-bench stream-pairs`) is the consumer loop
//! redis-benchmark cannot run: XREADGROUP one entry, XACK the ID it
//! returned; `scripts/streams_bench.py` runs it against both servers.
//!
//! The command line is the `engram-bench` binary (`src/main.rs`), separate
//! from `engram` so that the server links none of this crate.

// Unsafe code is allowed in two places, each saying why it is sound: heed's
// (opening an LMDB environment and setting its flags are `unsafe fn`s), and
// the tracker benchmark's kernel interfaces and raw mappings
// (`tracker::kernel`, `tracker::memory`).
#![deny(unsafe_code)]

pub mod command;
mod cpu_time;
mod crash_image;
pub mod engine;
mod error;
pub mod integrity;
mod machine;
mod progress;
pub mod report;
pub mod runner;
pub mod server;
pub mod stream_pairs;
pub mod systems;
pub mod table;
pub mod timeline;
pub mod tracker;
pub mod workload;

pub use engine::{run, Config};
pub use error::{BenchError, IoError, Result};
pub use machine::Machine;
pub use report::Report;
pub use systems::SystemKind;
pub use workload::{Distribution, Op};
