//! What an open store's handle ([`crate::Store`]) shares with its
//! background threads, in one place.
//!
//! `StoreState` depends only on the modules below it (space, index, lanes,
//! sync, options, recovery's report, the images' bookkeeping) and has no
//! behaviour beyond a background thread's pause. The operations over it are
//! functions taking `&StoreState` in the modules above it: `read`,
//! `append` (records into blocks and out again), `write` (publish, delete,
//! in-place updates), `compaction`, `image_writer`, `scrub`. `store.rs`
//! opens the state, calls those functions and owns the threads, so the
//! modules' `use` lines form no cycle (ARCHITECTURE.md draws the layers).
//!
//! ## Threads
//!
//! Application threads reach it through `Store`; background threads (space
//! reserve, compactor, periodic syncer, index images) hold an `Arc` of it,
//! sleep through [`StoreState::sleep`] and end when `shutdown` is set.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_pmem::{Region, RegionOptions};
use parking_lot::{Condvar, Mutex};

use crate::index::Index;
use crate::index_image::ImageState;
use crate::lanes::{Lane, Lanes};
use crate::recovery::RecoveryReport;
use crate::space::Space;
use crate::sync::Syncer;
use crate::Options;
use engram_threads::StripedCounter;

pub(crate) struct StoreState {
    pub space: Arc<Space>,
    pub index: Index,
    pub lanes: Lanes<Lane>,
    pub compaction_lane: Mutex<Lane>,
    /// Next record sequence number.
    pub seq: AtomicU64,
    pub keys: StripedCounter,
    /// Record bytes appended since open (writes and compaction copies),
    /// and words updated in place: what the store has written, for
    /// measuring a write path (a partial update must not rewrite a value).
    pub appended_bytes: StripedCounter,
    pub in_place_updates: StripedCounter,
    pub syncer: Syncer,
    /// Under lazy retirement: ranges appended through application lanes
    /// that the next tail sync must write back (`append::sync_tail`), and
    /// the lock that keeps tail syncs one at a time (so a caller never
    /// returns while another's msync of its writes is still running).
    pub tail: Mutex<Vec<(u64, u64)>>,
    pub tail_sync: Mutex<()>,
    pub options: Options,
    pub report: RecoveryReport,
    pub compactions: AtomicU64,
    pub records_moved: AtomicU64,
    pub shutdown: AtomicBool,
    /// Wakes background threads early (shutdown, or work to do).
    pub wake: (Mutex<()>, Condvar),
    /// The store's directory (index images are written there).
    pub dir: PathBuf,
    /// The superblock's store id, stamped on index images.
    pub store_id: u64,
    pub image: Mutex<ImageState>,
    pub image_region_options: RegionOptions,
    pub index_images: AtomicU64,
}

impl StoreState {
    pub fn region(&self) -> &Region {
        &self.space.region
    }

    /// A background thread's pause: sleeps for `pause`, woken early only by
    /// shutdown. False when the store is shutting down (the thread ends).
    pub fn sleep(&self, pause: Duration) -> bool {
        let deadline = Instant::now() + pause;
        let mut guard = self.wake.0.lock();
        while !self.shutdown.load(Ordering::Acquire) {
            if self.wake.1.wait_until(&mut guard, deadline).timed_out() {
                return !self.shutdown.load(Ordering::Acquire);
            }
        }
        false
    }
}
