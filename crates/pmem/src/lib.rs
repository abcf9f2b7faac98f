//! # engram-pmem: persistent regions
//!
//! The only crate in Engram that maps files and issues flush and fence
//! instructions. Everything persistent is reached through a [`Region`]'s
//! helpers, so that a crash-simulation observer ([`PersistObserver`]) can see
//! every store, flush and fence, and the integrity layer's [`StoreTracker`]
//! can mark a page stale before any store changes it.
//!
//! ## What we assume of the media
//!
//! These are the assumptions every persistent format in Engram is written
//! against, and exactly what the crash simulator models:
//!
//! 1. An aligned 8-byte store is atomic: after a power failure the word holds
//!    either its old or its new value, never a mix.
//! 2. On real persistent memory (`Mode::Dax`), only cache lines that were
//!    flushed (`clwb`/`clflushopt`) and then fenced (`sfence`) are guaranteed
//!    to survive a power failure. A line that was not flushed and fenced may
//!    hold any prefix, in program order, of the stores made to it since it was
//!    last persisted.
//! 3. In the emulated mode (`Mode::Emulated`, a shared mapping of a regular
//!    file) a store survives a process crash as soon as it is made (it is in
//!    the page cache), and survives a power failure only after [`Region::sync`]
//!    (`msync`) has returned. The kernel may write any dirty page back earlier
//!    and in any order.
//!    A *staged* region (`RegionOptions::staged`, emulated only: a private
//!    mapping, `staged.rs`) keeps its stores in the process until a sync
//!    writes them to the file: a process crash loses them as a power
//!    failure would.
//! 4. Nothing else is atomic: a multi-line record can be torn anywhere, so every
//!    persistent record carries a checksum or a commit word written last.
//!
//! ## Ownership and threads
//!
//! A `Region` is shared (`&Region`) by many threads. It does not arbitrate who
//! writes where: the layer above guarantees that a byte range has one writer at
//! a time and is not read while it is being written, except for aligned 8-byte
//! words that are accessed only through the atomic helpers
//! ([`Region::load_u64`], [`Region::fetch_or_u64`], ...). Growth takes an
//! internal lock; the mapped length only increases and the base address never
//! moves, so offsets and slices handed out stay valid for the region's life.

pub mod barrier;
pub mod crashsim;
mod error;
mod flush;
mod mode;
mod observer;
mod offset;
mod region;
mod staged;
mod tracker;

pub use crashsim::{CrashPoint, CrashSim};
pub use error::{Error, Result};
pub use flush::{cpu_supports, prefetch, FlushInstruction};
pub use mode::{Mode, ModeChoice};
pub use observer::PersistObserver;
pub use offset::PmemOffset;
pub use region::{
    sync_directory, Region, RegionOptions, CACHE_LINE_BYTES, DEFAULT_RESERVE_BYTES, OS_PAGE_BYTES,
};
pub use tracker::{zeroed_atomic_words, StoreTicket, StoreTracker};
