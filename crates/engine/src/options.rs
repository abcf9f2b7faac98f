use std::sync::Arc;
use std::time::Duration;

use engram_integrity::IntegrityOptions;
use engram_pmem::{FlushInstruction, ModeChoice, PersistObserver};

use crate::{Error, Result};

/// When writes reach power-fail durability on emulated persistent memory.
/// (On DAX every acknowledged write is power-fail durable regardless.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Durable against a process crash as soon as `put` returns; the kernel
    /// writes pages back on its own schedule. Redis's `appendfsync no`.
    #[default]
    Never,
    /// A background thread calls `msync` at this period. Redis's `everysec`.
    Periodic(Duration),
    /// `msync` before every write returns, with group commit: concurrent
    /// writers share one `msync`. Redis's `appendfsync always`.
    Always,
}

impl std::str::FromStr for SyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "never" => Ok(SyncPolicy::Never),
            "always" => Ok(SyncPolicy::Always),
            "everysec" => Ok(SyncPolicy::Periodic(Duration::from_secs(1))),
            other => match other.strip_prefix("periodic:").and_then(|ms| ms.parse::<u64>().ok()) {
                Some(ms) if ms > 0 => Ok(SyncPolicy::Periodic(Duration::from_millis(ms))),
                _ => Err(format!(
                    "unknown sync policy '{other}' (expected never, always, everysec or periodic:MS)"
                )),
            },
        }
    }
}

/// Background space reclamation (Viper 4.6).
#[derive(Clone, Debug)]
pub struct CompactionOptions {
    pub enabled: bool,
    /// How often the compactor looks for work when nobody wakes it.
    pub interval: Duration,
    /// A sealed block is a candidate once at most this fraction of it is live.
    pub max_live_ratio: f64,
    /// Writers grow the file only while it is smaller than this multiple of
    /// the live data; beyond it they first wait for (or help) compaction.
    pub max_space_amplification: f64,
}

impl Default for CompactionOptions {
    fn default() -> Self {
        CompactionOptions {
            enabled: true,
            interval: Duration::from_millis(50),
            max_live_ratio: 0.5,
            max_space_amplification: 2.0,
        }
    }
}

/// Index images: the DRAM index checkpointed to a file, so recovery reads
/// it and scans only the blocks claimed since (see `index_image.rs`).
#[derive(Clone, Debug)]
pub struct IndexImageOptions {
    /// Write images and recover from them. Off: recovery scans every block
    /// (image files already present are left alone, unused).
    pub enabled: bool,
    /// A new image is written in the background once the blocks claimed
    /// since the last one hold this many bytes, or half the live data if
    /// that is more: recovery then scans at most about that much beyond
    /// the image, and an image (16 bytes a key) costs little next to it.
    pub every_bytes: u64,
    /// Write one at a clean close when anything was written since the last.
    pub on_close: bool,
}

impl Default for IndexImageOptions {
    fn default() -> Self {
        IndexImageOptions {
            enabled: true,
            every_bytes: 1 << 30,
            on_close: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    /// DAX, emulated, or detect.
    pub mode: ModeChoice,
    /// `None`: the mode's default (clwb on DAX, none on emulated memory).
    pub flush: Option<FlushInstruction>,
    pub sync: SyncPolicy,
    /// Block size for a new store (a power of two, 64 KiB to 64 MiB). An
    /// existing store keeps the size it was created with.
    pub block_size_bytes: u64,
    /// How much the data file grows at a time (rounded up to whole blocks).
    pub grow_bytes: u64,
    /// Grow the data file a step ahead of need, on a thread of its own
    /// (`engram-space-reserve`), when a claim leaves fewer than a quarter
    /// step of blocks free: writers then rarely grow (allocate, map,
    /// pre-fault) the file themselves. One that finds no free block grows
    /// it by a sixteenth of a step and leaves the step to the thread, which
    /// then grows even past the space budget (compaction has not kept up).
    /// Off: a writer that finds no free block grows the file by a step (the
    /// crash explorer turns it off, so that growth happens in operation
    /// order).
    pub grow_ahead: bool,
    /// Address space reserved for the data file: its maximum size.
    pub reserve_bytes: u64,
    /// Threads used by recovery; 0 means one per available core.
    pub recovery_threads: usize,
    /// Independent write locations; 0 means two per available core.
    pub write_lanes: usize,
    pub compaction: CompactionOptions,
    /// Index images for fast recovery (on by default).
    pub index_image: IndexImageOptions,
    /// Page checksums, parity, scrubbing (lazy by default).
    pub integrity: IntegrityOptions,
    /// A quota on the data file, to test the out-of-space path.
    pub file_limit_bytes: Option<u64>,
    /// Pre-fault new parts of the mapping for writing.
    pub populate: bool,
    /// Emulated memory: keep the page cache in single pages so each sync
    /// writes back only what was written (see
    /// `engram_pmem::RegionOptions::fine_writeback`). Implied by
    /// `SyncPolicy::Always`; servers that group-commit set it themselves.
    pub fine_writeback: bool,
    /// Emulated memory: acknowledged writes dirty only the log's tail.
    /// An overwrite or a move leaves the old record to lose by sequence
    /// number, a delete appends a tombstone, an in-place update appends a
    /// new version, and `Store::sync` writes back only the log written
    /// since the last; the DELETED bits follow on the `engram-retirement`
    /// thread, after a full `msync`, and dead blocks are reused only once
    /// those bits are durable (`retirement.rs`). Implied by
    /// `SyncPolicy::Always`. Ignored on DAX (a bit there costs a cache
    /// line) and for stores of format 1.
    pub lazy_retirement: bool,
    /// Emulated memory: stage the data file's stores in the process's own
    /// pages and copy them into the file at each sync (`pwrite` +
    /// `fdatasync`) instead of `msync`ing a shared mapping
    /// (`engram_pmem::RegionOptions::staged`): no writeback of a mapped
    /// page, so none of the TLB flushes each cost. A store then survives
    /// neither a power failure nor a process crash until the next sync,
    /// so only an owner that syncs before every acknowledgement may ask
    /// (the keyspace at `always`). Implied by `SyncPolicy::Always`.
    /// Ignored on DAX.
    pub staged: bool,
    /// How often the retirement thread syncs the whole file, sets the
    /// DELETED bits queued since, and releases dead blocks (each dead
    /// block is reused two such rounds after it died).
    pub retirement_interval: Duration,
    /// Sees every store, flush and fence made to the data file: the hook of
    /// the crash simulator (`engram_pmem::CrashSim`). `None` in normal use.
    pub observer: Option<Observer>,
    /// Rides along with recovery at open, to learn what the layer above
    /// needs of every live record while recovery reads it (the keyspace's
    /// key counts and expiry index). Dropped once the store is open.
    pub recovery_visitor: Option<Visitor>,
    /// Deliberate defects, for tests that check the checkers (only with
    /// the `fault-injection` feature, which the crate's tests turn on).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub faults: FaultInjection,
}

/// A persistence observer, wrapped so `Options` stays `Clone + Debug`.
#[derive(Clone)]
pub struct Observer(pub Arc<dyn PersistObserver>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// A recovery visitor, wrapped so `Options` stays `Clone + Debug`.
#[derive(Clone)]
pub struct Visitor(pub Arc<dyn crate::RecoveryVisitor>);

impl std::fmt::Debug for Visitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Visitor")
    }
}

/// Defects a test can switch on to prove that its checks catch them.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct FaultInjection {
    /// Skip the persist of each new record (the mutation of issue 6: the
    /// crash explorer must catch it).
    pub skip_record_persist: bool,
    /// Leave every index image without its header, as a crash just before
    /// the header was written would.
    pub skip_index_image_header: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mode: ModeChoice::Auto,
            flush: None,
            sync: SyncPolicy::Never,
            block_size_bytes: 1 << 20,
            grow_bytes: 64 << 20,
            grow_ahead: true,
            reserve_bytes: engram_pmem::DEFAULT_RESERVE_BYTES,
            recovery_threads: 0,
            write_lanes: 0,
            compaction: CompactionOptions::default(),
            index_image: IndexImageOptions::default(),
            integrity: IntegrityOptions::default(),
            file_limit_bytes: None,
            populate: true,
            fine_writeback: false,
            lazy_retirement: false,
            staged: false,
            retirement_interval: Duration::from_millis(500),
            observer: None,
            recovery_visitor: None,
            #[cfg(feature = "fault-injection")]
            faults: FaultInjection::default(),
        }
    }
}

impl Options {
    pub(crate) fn validate(&self) -> Result<()> {
        let block = self.block_size_bytes;
        if !block.is_power_of_two() || !(64 << 10..=64 << 20).contains(&block) {
            return Err(Error::InvalidOption(format!(
                "block_size_bytes must be a power of two from 64 KiB to 64 MiB, got {block}"
            )));
        }
        if !(self.compaction.max_live_ratio > 0.0 && self.compaction.max_live_ratio < 1.0) {
            return Err(Error::InvalidOption(format!(
                "compaction.max_live_ratio must be between 0 and 1, got {}",
                self.compaction.max_live_ratio
            )));
        }
        if self.compaction.max_space_amplification < 1.2 {
            return Err(Error::InvalidOption(format!(
                "compaction.max_space_amplification must be at least 1.2, got {}",
                self.compaction.max_space_amplification
            )));
        }
        if self.reserve_bytes > crate::index::MAX_OFFSET {
            // The index keeps each key's access field in the offset
            // word's bits above 2^40 (`index.rs`).
            return Err(Error::InvalidOption(format!(
                "reserve_bytes must be at most 1 TiB (2^40), got {}",
                self.reserve_bytes
            )));
        }
        if self.index_image.every_bytes == 0 {
            return Err(Error::InvalidOption(
                "index_image.every_bytes must be above zero".into(),
            ));
        }
        self.integrity.validate()?;
        if self.retirement_interval.is_zero() {
            return Err(Error::InvalidOption(
                "retirement_interval must be above zero".into(),
            ));
        }
        if let SyncPolicy::Periodic(period) = self.sync {
            if period.is_zero() {
                return Err(Error::InvalidOption(
                    "periodic sync needs a period above zero".into(),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn threads_or_cores(requested: usize, per_core: usize) -> usize {
        if requested > 0 {
            return requested;
        }
        std::thread::available_parallelism().map_or(2, |n| n.get()) * per_core
    }
}
