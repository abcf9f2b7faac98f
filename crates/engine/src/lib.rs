//! # engram-engine: the embedded store
//!
//! A key-value store whose values live in a persistent region and whose index
//! lives in DRAM (Viper, VLDB 2021, sections 3 and 4), with these changes:
//!
//! - records carry a global sequence number and CRC32C checksums, so recovery
//!   resolves two live versions of a key to the newer one (Viper breaks the
//!   tie by offset) and never mistakes a torn record for data;
//! - blocks carry a generation so that records left in a reused block are
//!   never resurrected;
//! - reads are protected by epochs (crossbeam-epoch) rather than page version
//!   locks, so readers never retry and never block writers;
//! - large values span contiguous blocks (extents) instead of overflow pages.
//!
//! Start at [`Store`]. The on-media formats are documented in [`superblock`],
//! [`block`] and [`record`]; ARCHITECTURE.md has the map and the invariants.

#![forbid(unsafe_code)]

/// Asserts an invariant too costly to check in every debug build (one of
/// ARCHITECTURE.md's numbered invariants, named in the message): checked
/// with the `verify` feature, which the tests turn on. Without it the
/// condition is never evaluated and the dead branch is compiled away, so a
/// release build pays nothing. Cheap checks use `debug_assert!`.
macro_rules! verify {
    ($($assertion:tt)+) => {
        if cfg!(feature = "verify") {
            assert!($($assertion)+);
        }
    };
}

mod append;
pub mod block;
mod compaction;
mod error;
mod image_writer;
mod index;
mod index_image;
mod index_table;
pub mod lanes;
mod lock;
mod options;
mod read;
pub mod record;
mod recovery;
pub mod refill;
mod retirement;
mod scrub;
mod space;
mod store;
mod store_state;
pub mod superblock;
mod sync;
mod write;

pub use engram_integrity::{
    IntegrityMode, IntegrityOptions, IntegrityStats, OpenReport as IntegrityOpenReport, RangeHealth,
};
pub use engram_pmem::{CrashPoint, CrashSim, FlushInstruction, Mode, ModeChoice, PersistObserver};
pub use error::{Error, Result};
pub use image_writer::IndexImageReport;
pub use index::{PrefetchStep, ACCESS_BITS, ACCESS_MAX, WARM_AHEAD};
pub use index_image::FILE_NAMES as INDEX_IMAGE_FILES;
#[cfg(feature = "fault-injection")]
pub use options::FaultInjection;
pub use options::{CompactionOptions, IndexImageOptions, Observer, Options, SyncPolicy, Visitor};
pub use read::ValueRef;
pub use record::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use recovery::{ImageRecovery, RecoveredKey, RecoveryReport, RecoveryVisitor};
pub use scrub::{AffectedKey, ScrubReport};
pub use store::{Stats, Store, DATA_FILE};
pub use write::WordUpdate;
