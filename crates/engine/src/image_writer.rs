//! Taking index images while writers run, and the thread that takes them
//! when enough has been written. Why the three steps below are enough is
//! argued in `index_image.rs`; the file format is there too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::index_image::{self, ImageHeader};
use crate::space::flush_epochs;
use crate::store_state::StoreState;
use crate::{Error, Result};

/// How long an image waits for the writes in flight when it starts. Only a
/// thread pinned that long (a `ValueRef` held for seconds) can exhaust it.
const GRACE_PATIENCE: Duration = Duration::from_secs(10);
/// How often the background thread asks whether an image is due.
const CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// After a failed image, the background thread waits this long to retry.
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// What writing an index image did.
#[derive(Clone, Debug)]
pub struct IndexImageReport {
    pub number: u64,
    /// Keys named.
    pub entries: u64,
    /// Recovery from this image scans the blocks of this generation or later.
    pub floor_generation: u32,
    pub duration: Duration,
}

/// Writes an index image of the store as it is now, without stopping
/// writers (they wait only while every lane is taken to read the floor).
pub fn write_image(store: &StoreState) -> Result<IndexImageReport> {
    let started = Instant::now();
    let mut images = store.image.lock();
    // 1. No record is being appended to a lane block while the floor is
    //    read; every later append lands at or above it.
    let floor = {
        let lanes = store.lanes.lock_all();
        let compaction = store.compaction_lane.lock();
        let next = store.space.peek_generation();
        lanes
            .iter()
            .map(|lane| &**lane)
            .chain(std::iter::once(&*compaction))
            .filter(|lane| lane.block.is_some())
            .map(|lane| lane.generation)
            .fold(next, u32::min)
    };
    // 2. Every write begun before step 1 has published (or retired) its
    //    record: `put` is pinned from its append to its publish.
    if !wait_for_writes_in_flight(GRACE_PATIENCE) {
        return Err(Error::IndexImage(format!(
            "writes in flight did not finish within {GRACE_PATIENCE:?} (a thread pinned too long?)"
        )));
    }
    // 3. The copy; then the counters every named record is below.
    let mut entries = store
        .index
        .copy_entries(store.keys.sum().max(0) as usize + 1024);
    // 4. Under lazy retirement every record replaced before the copy is
    //    queued for its DELETED bit: set them, durably, before the image
    //    can be found. Recovery from this image scans only blocks at or
    //    above the floor, so an older version below it still lacking its
    //    bit would be seen by no recovery from the image (which then frees
    //    the block of a tombstone that outranked it) and would come back
    //    at the first full scan (invariant 14).
    if store.space.retirement.is_some() {
        store.space.retirement_round_settling(true)?;
        store.region().sync_all()?;
    }
    let header = ImageHeader {
        number: images.last_number + 1,
        store_id: store.store_id,
        floor_generation: floor,
        next_generation: store.space.peek_generation(),
        next_seq: store.seq.load(Ordering::SeqCst),
        entries: entries.len() as u64,
    };
    // Invariant 11: every block claimed from now on is at or above the
    // floor.
    debug_assert!(floor <= header.next_generation);
    // Recovery reads the named records in file order.
    entries.sort_unstable_by_key(|entry| entry.offset);
    #[cfg(feature = "fault-injection")]
    let write = if store.options.faults.skip_index_image_header {
        index_image::write_without_header
    } else {
        index_image::write
    };
    #[cfg(not(feature = "fault-injection"))]
    let write = index_image::write;
    let written = write(
        &store.dir,
        images.next_slot,
        &header,
        &entries,
        &store.image_region_options,
    );
    if let Err(error) = written {
        // Leave no half-written file behind (the other one still holds
        // the newest image); the next attempt uses the same slot.
        let _ = std::fs::remove_file(store.dir.join(index_image::FILE_NAMES[images.next_slot]));
        return Err(error);
    }
    images.last_number = header.number;
    images.next_slot = 1 - images.next_slot;
    images.floor = floor;
    images.next_seq = header.next_seq;
    store.index_images.fetch_add(1, Ordering::Relaxed);
    Ok(IndexImageReport {
        number: header.number,
        entries: header.entries,
        floor_generation: floor,
        duration: started.elapsed(),
    })
}

/// Whether the blocks claimed since the last image hold enough to make
/// a new one worth its cost (see `IndexImageOptions::every_bytes`).
fn due(store: &StoreState) -> bool {
    let floor = store.image.lock().floor;
    let claimed = store.space.peek_generation().saturating_sub(floor) as u64;
    let threshold = store
        .options
        .index_image
        .every_bytes
        .max(store.space.live_bytes() / 2);
    claimed.saturating_mul(store.space.block_bytes) >= threshold
}

/// Whether anything was written since the last image (or there is none).
pub fn written_since_last(store: &StoreState) -> bool {
    store.seq.load(Ordering::SeqCst) != store.image.lock().next_seq
}

/// The index image thread: writes an image whenever one is due.
pub fn run(store: &StoreState) {
    let mut pause = CHECK_INTERVAL;
    while store.sleep(pause) {
        pause = CHECK_INTERVAL;
        if due(store) {
            if let Err(error) = write_image(store) {
                log::warn!("index image failed (recovery scans more until one succeeds): {error}");
                pause = RETRY_AFTER;
            }
        }
    }
}

/// An epoch grace period: returns once every thread pinned when it began
/// has unpinned (false if that takes longer than `patience`).
fn wait_for_writes_in_flight(patience: Duration) -> bool {
    let passed = Arc::new(AtomicBool::new(false));
    {
        let guard = crossbeam_epoch::pin();
        let flag = Arc::clone(&passed);
        guard.defer(move || flag.store(true, Ordering::Release));
        guard.flush();
    }
    let deadline = Instant::now() + patience;
    while !passed.load(Ordering::Acquire) {
        if Instant::now() >= deadline {
            return false;
        }
        flush_epochs();
        std::thread::sleep(Duration::from_micros(100));
    }
    true
}
