//! Space: which blocks exist, which are free, and growing the file.
//!
//! Free blocks sit in one ordered set under a mutex. Taking the lowest free
//! block first keeps data packed towards the start of the file. The mutex is
//! taken once per block (a block holds thousands of small records), so it is
//! off the per-record path.
//!
//! Growing the file (allocate, map, pre-fault: tens of milliseconds for a
//! 64 MiB step) never happens under that mutex: one grower at a time holds
//! `grow`, extends the region, and only then takes `free` to add the new
//! blocks. Most growth happens a step ahead of need on the reserve thread
//! ([`Space::run_provisioner`]), in pieces of a sixteenth of a step, each
//! handed out as soon as it is mapped; a writer that finds nothing free
//! grows by one such piece itself and leaves the step to the reserve. A
//! writer waiting for a growth thus waits a few milliseconds, not for a
//! whole step.
//!
//! Freed blocks return to the set only after an epoch has passed
//! (crossbeam-epoch), so a reader that found an offset just before its record
//! was retired finishes copying before the space can be written again. The
//! deferred function only queues the block (lock-free): crossbeam runs it on
//! whichever thread next advances the epoch, possibly one holding this
//! store's locks, so the release itself (FREE headers, the free set) happens
//! when an allocator drains the queue.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;
use engram_integrity::Integrity;
use engram_pmem::{PmemOffset, Region};
use parking_lot::{Mutex, MutexGuard, RwLock};

use crate::block::{state, BlockHeader, BlockKind, BlockMeta, BlockTable, BLOCK_HEADER_BYTES};
use crate::refill::RefillSignal;
use crate::retirement::{Bit, Blocks, Retirement};
use crate::superblock::Superblock;
use crate::{Error, Result};
use engram_threads::StripedCounter;

/// How long a writer that found no space waits for dead blocks to clear
/// their epoch before reporting the disk full.
const SETTLE_BEFORE_NO_SPACE: Duration = Duration::from_millis(100);

pub struct Space {
    /// Shared with the integrity layer, which reads pages to checksum them.
    pub region: Arc<Region>,
    /// Checksums and parity over the region (`None` when off).
    pub integrity: Option<Arc<Integrity>>,
    pub block_bytes: u64,
    pub metas: BlockTable,
    free: Mutex<FreeBlocks>,
    free_count: AtomicU64,
    block_count: AtomicU64,
    grow_blocks: u64,
    /// What a writer that found no free block grows the file by itself
    /// (a whole step when no reserve thread runs).
    urgent_blocks: u64,
    /// One growth at a time; taken before `free`, never after it.
    grow: Mutex<()>,
    /// A claim that leaves fewer free blocks than this (where there were
    /// this many before) asks the reserve thread ([`Space::run_provisioner`])
    /// to grow the file by a step, so that writers find blocks ready
    /// instead of growing it themselves. Asking once per crossing, not per
    /// claim, keeps a reserve that declines (at the space budget) from
    /// being woken for every block.
    low_water: u64,
    refill: RefillSignal,
    /// Set by a writer that had to grow the file: the reserve's next step
    /// goes ahead even past the space budget. Compaction has not kept the
    /// file within it, so the writers would grow the file anyway; better
    /// on the reserve thread than under their feet.
    overdue: AtomicBool,
    /// Sum of `live_bytes` over all blocks.
    live_bytes: StripedCounter,
    /// Next block generation (see `block`).
    next_generation: AtomicU32,
    /// Set (under the write lock) when the store crashes or closes: deferred
    /// releases that run later must not touch a region that may already be
    /// reopened by another handle.
    closed: RwLock<bool>,
    pub blocks_freed: AtomicU64,
    /// Dead blocks whose epoch has passed, waiting to be released.
    ready: SegQueue<u32>,
    /// Dead blocks still waiting for their epoch (or, under lazy
    /// retirement, for their two rounds).
    pending_frees: AtomicU64,
    /// Lazy retirement (`retirement.rs`); `None`: retire in place.
    pub retirement: Option<Retirement>,
}

struct FreeBlocks {
    set: BTreeSet<u32>,
    superblock: Superblock,
}

impl Space {
    pub fn new(
        region: Arc<Region>,
        superblock: Superblock,
        grow_bytes: u64,
        grow_ahead: bool,
        integrity: Option<Arc<Integrity>>,
        lazy_retirement: bool,
    ) -> Space {
        let block_bytes = superblock.block_bytes;
        let max_blocks = region.reserve_bytes() / block_bytes;
        let grow_blocks = grow_bytes.div_ceil(block_bytes).max(1);
        Space {
            metas: BlockTable::new(max_blocks),
            block_count: AtomicU64::new(superblock.block_count),
            grow_blocks,
            // Without a reserve thread, writers grow by whole steps.
            urgent_blocks: if grow_ahead {
                (grow_blocks / 16).max(1)
            } else {
                grow_blocks
            },
            grow: Mutex::new(()),
            low_water: (grow_blocks / 4).max(1),
            refill: RefillSignal::new(),
            overdue: AtomicBool::new(false),
            free: Mutex::new(FreeBlocks {
                set: BTreeSet::new(),
                superblock,
            }),
            free_count: AtomicU64::new(0),
            live_bytes: StripedCounter::new(),
            next_generation: AtomicU32::new(1),
            closed: RwLock::new(false),
            blocks_freed: AtomicU64::new(0),
            ready: SegQueue::new(),
            pending_frees: AtomicU64::new(0),
            retirement: lazy_retirement.then(Retirement::default),
            block_bytes,
            region,
            integrity,
        }
    }

    pub fn block_count(&self) -> u64 {
        self.block_count.load(Ordering::Acquire)
    }

    pub fn free_blocks(&self) -> u64 {
        self.free_count.load(Ordering::Relaxed) + self.ready.len() as u64
    }

    /// Whether free blocks are well above the mark at which the file grows:
    /// writers will not need new space for a while.
    pub fn free_to_spare(&self) -> bool {
        self.free_blocks() >= 2 * self.low_water
    }

    pub fn live_bytes(&self) -> u64 {
        self.live_bytes.get()
    }

    /// Bytes of the data blocks (the file minus its superblock block).
    pub fn data_bytes(&self) -> u64 {
        self.block_count() * self.block_bytes
    }

    /// Largest record a log block takes; larger ones get an extent.
    pub fn log_payload_bytes(&self) -> u64 {
        self.block_bytes - BLOCK_HEADER_BYTES
    }

    pub fn block_offset(&self, id: u32) -> PmemOffset {
        PmemOffset((id as u64 + 1) * self.block_bytes)
    }

    /// The block holding `offset` (for a record in an extent: its head,
    /// because records start in their head block).
    pub fn block_of(&self, offset: u64) -> u32 {
        (offset / self.block_bytes - 1) as u32
    }

    pub fn meta(&self, id: u32) -> &BlockMeta {
        self.metas.get(id)
    }

    pub fn set_next_generation(&self, generation: u32) {
        // Invariant 11: generations never decrease.
        debug_assert!(generation >= self.peek_generation());
        self.next_generation.store(generation, Ordering::Relaxed);
    }

    /// The generation the next claimed block will get.
    pub fn peek_generation(&self) -> u32 {
        self.next_generation.load(Ordering::SeqCst)
    }

    fn new_generation(&self) -> u32 {
        self.next_generation.fetch_add(1, Ordering::Relaxed)
    }

    /// Recovery's hand-off: these blocks are free.
    pub fn add_free(&self, ids: impl IntoIterator<Item = u32>) {
        self.insert_free(ids, BlockMeta::set_state_in_recovery);
    }

    /// Puts blocks into the free set, moving each to FREE with `set_state`
    /// (recovery's moves, or the running store's).
    fn insert_free(&self, ids: impl IntoIterator<Item = u32>, set_state: fn(&BlockMeta, u8)) {
        let mut free = self.free.lock();
        for id in ids {
            set_state(self.meta(id), state::FREE);
            if free.set.insert(id) {
                self.free_count.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A tombstone was placed in block `id` (see `BlockMeta::holds_tombstone`).
    pub fn note_tombstone(&self, id: u32) {
        self.meta(id).holds_tombstone.store(true, Ordering::Release);
    }

    pub fn add_live(&self, id: u32, bytes: u64) {
        self.meta(id).live_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.live_bytes.add(bytes as i64);
    }

    /// Subtracts retired bytes; returns true when the block's live bytes
    /// reached zero.
    pub fn sub_live(&self, id: u32, bytes: u64) -> bool {
        self.live_bytes.add(-(bytes as i64));
        let before = self.meta(id).live_bytes.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(before >= bytes, "block {id} live bytes would go negative");
        before == bytes
    }

    /// Whether growing the file keeps it within `max_amplification` times the
    /// live data (with one growth step of slack so small stores can start).
    pub fn may_grow(&self, max_amplification: f64) -> bool {
        let budget = self.live_bytes() as f64 * max_amplification;
        ((self.data_bytes() + self.grow_blocks * self.block_bytes) as f64) <= budget
            || self.data_bytes() < 4 * self.grow_blocks * self.block_bytes
    }

    /// Takes the lowest free block, if any.
    pub fn take_free(&self) -> Option<u32> {
        self.release_ready();
        let mut free = self.free.lock();
        let id = free.set.pop_first()?;
        self.claimed(&free, 1);
        Some(id)
    }

    /// Books `n` blocks just taken from `free`, and asks for growth ahead
    /// of need when that takes the free blocks below the low-water mark.
    fn claimed(&self, free: &FreeBlocks, n: u64) {
        self.free_count.fetch_sub(n, Ordering::Relaxed);
        let left = free.set.len() as u64;
        if left < self.low_water && left + n >= self.low_water {
            self.refill.request();
        }
    }

    /// Takes a free block, growing the file when there is none. A full disk
    /// is reported only after blocks already dead have cleared their epoch.
    pub fn take_free_or_grow(&self) -> Result<u32> {
        self.unless_frees_pending(|space| space.try_take_free_or_grow())
    }

    /// Runs `take`; if it finds no space while dead blocks are still waiting
    /// for their epoch, lets them settle and tries once more.
    fn unless_frees_pending<T>(&self, take: impl Fn(&Space) -> Result<T>) -> Result<T> {
        match take(self) {
            Err(Error::NoSpace(_)) if self.pending_frees.load(Ordering::Acquire) > 0 => {
                self.settle_frees(SETTLE_BEFORE_NO_SPACE);
                take(self)
            }
            other => other,
        }
    }

    fn try_take_free_or_grow(&self) -> Result<u32> {
        self.release_ready();
        let mut free = self.free.lock();
        if free.set.is_empty() {
            // The reserve ran dry.
            free = self.make_room(free, |free| !free.set.is_empty(), 1)?;
        }
        let id = free.set.pop_first().expect("growth added blocks");
        self.claimed(&free, 1);
        Ok(id)
    }

    /// Keeps at least `low_water` blocks free by growing the file a step at
    /// a time whenever a claim asks and `may_grow` agrees (the store's space
    /// budget: at it, writers compact before they grow) or a writer had to
    /// grow the file itself (see `overdue`), until
    /// [`Space::stop_provisioner`]. For a thread of its own. A failed growth
    /// (a full disk) is left for the write path to meet and report.
    pub fn run_provisioner(&self, may_grow: impl Fn(&Space) -> bool) {
        while self.refill.wait() {
            if self.overdue.swap(false, Ordering::AcqRel) || may_grow(self) {
                let _ = self.grow_ahead();
            }
        }
    }

    /// Ends [`Space::run_provisioner`] (at once, or after its growth).
    pub fn stop_provisioner(&self) {
        self.refill.stop();
    }

    /// One growth step if fewer than `low_water` blocks are free, in
    /// pieces of the urgent step, each handed to the writers as it is
    /// ready: a writer that runs dry meanwhile waits for one piece (a few
    /// milliseconds), not for the step (tens of them).
    fn grow_ahead(&self) -> Result<()> {
        if self.free_count.load(Ordering::Relaxed) >= self.low_water {
            return Ok(());
        }
        let mut grown = 0;
        while grown < self.grow_blocks {
            let piece = self.urgent_blocks.min(self.grow_blocks - grown);
            let _one_grower = self.grow.lock();
            drop(self.grow_by(piece)?);
            grown += piece;
        }
        Ok(())
    }

    /// Takes `n` contiguous free blocks (an extent), growing if no run fits.
    pub fn take_run(&self, n: u32) -> Result<u32> {
        self.unless_frees_pending(|space| space.try_take_run(n))
    }

    fn try_take_run(&self, n: u32) -> Result<u32> {
        self.release_ready();
        let mut free = self.free.lock();
        let head = match find_run(&free.set, n) {
            Some(head) => head,
            None => {
                free = self.make_room(free, |free| find_run(&free.set, n).is_some(), n.into())?;
                // Growth's new blocks alone are such a run.
                find_run(&free.set, n).expect("room was made for the run")
            }
        };
        for id in head..head + n {
            free.set.remove(&id);
        }
        self.claimed(&free, n as u64);
        Ok(head)
    }

    /// For a writer that found no room in `free` (`fits` false): waits for
    /// any growth under way, which may have made room, and grows the file
    /// itself (by at least `min_blocks`, see [`Space::grow_urgently`]) if
    /// there still is none. Returns `free` locked again, with room in it.
    fn make_room<'s>(
        &'s self,
        free: MutexGuard<'s, FreeBlocks>,
        fits: impl Fn(&FreeBlocks) -> bool,
        min_blocks: u64,
    ) -> Result<MutexGuard<'s, FreeBlocks>> {
        drop(free);
        let _one_grower = self.grow.lock();
        let free = self.free.lock();
        if fits(&free) {
            return Ok(free);
        }
        drop(free);
        self.grow_urgently(min_blocks)
    }

    /// Grows the file on the write path by the urgent step (at least
    /// `min_blocks`), and asks the reserve for a full step past the space
    /// budget (see `overdue`). The caller holds `grow`, not `free`: other
    /// writers keep claiming blocks that compaction frees meanwhile.
    /// Returns `free` locked, with the new blocks in it.
    fn grow_urgently(&self, min_blocks: u64) -> Result<MutexGuard<'_, FreeBlocks>> {
        let free = self.grow_by(self.urgent_blocks.max(min_blocks))?;
        self.overdue.store(true, Ordering::Release);
        self.refill.request();
        Ok(free)
    }

    /// Grows the file by `blocks` (allocation, mapping, pre-faulting)
    /// without `free` locked, then adds them to the free set. The caller
    /// holds `grow`. Returns `free` locked, with the new blocks in it.
    fn grow_by(&self, blocks: u64) -> Result<MutexGuard<'_, FreeBlocks>> {
        // Only the holder of `grow` changes the block count.
        let old_count = self.block_count();
        let new_count = old_count + blocks;
        self.region
            .grow_to((new_count + 1) * self.block_bytes)
            .map_err(Error::from_growth)?;
        let mut free = self.free.lock();
        self.add_blocks(&mut free, old_count, new_count);
        Ok(free)
    }

    /// Records a growth from `old_count` to `new_count` blocks: the
    /// superblock's count, then the new blocks as free.
    fn add_blocks(&self, free: &mut FreeBlocks, old_count: u64, new_count: u64) {
        free.superblock.record_block_count(&self.region, new_count);
        for id in old_count..new_count {
            free.set.insert(id as u32);
        }
        self.free_count
            .fetch_add(new_count - old_count, Ordering::Relaxed);
        self.block_count.store(new_count, Ordering::Release);
    }

    /// Blocks being reused hold nothing anyone will read again: pages of
    /// them the integrity layer found corrupt beyond repair stop being so.
    fn forget_damage(&self, first: u32, blocks: u32) {
        if let Some(integrity) = &self.integrity {
            integrity
                .forget_unrepairable(self.block_offset(first).0, blocks as u64 * self.block_bytes);
        }
    }

    /// Claims block `id` as a log block: new generation, header persisted
    /// before any record goes in. Returns the generation.
    pub fn start_log_block(&self, id: u32) -> u32 {
        self.forget_damage(id, 1);
        if let Some(integrity) = &self.integrity {
            // The block is about to be filled page after page: mark its
            // pages stale in one go rather than one persisted mark each.
            integrity.expect_writes(self.block_offset(id).0, self.block_bytes);
        }
        let generation = self.new_generation();
        BlockHeader {
            kind: BlockKind::Log,
            generation,
            extent_blocks: 1,
        }
        .write(&self.region, self.block_offset(id));
        let meta = self.meta(id);
        meta.generation.store(generation, Ordering::Relaxed);
        meta.extent_blocks.store(1, Ordering::Relaxed);
        meta.live_bytes.store(0, Ordering::Relaxed);
        meta.holds_tombstone.store(false, Ordering::Relaxed);
        meta.freed_on_media.store(false, Ordering::Release);
        meta.set_state(state::OWNED);
        generation
    }

    /// Claims `n` blocks starting at `head` as an extent. Returns the generation.
    pub fn start_extent(&self, head: u32, n: u32) -> u32 {
        self.forget_damage(head, n);
        let generation = self.new_generation();
        BlockHeader {
            kind: BlockKind::Extent,
            generation,
            extent_blocks: n,
        }
        .write(&self.region, self.block_offset(head));
        self.meta(head).live_bytes.store(0, Ordering::Relaxed);
        self.mark_extent(head, n, generation);
        generation
    }

    /// DRAM state of a live extent: its head and its tails.
    pub fn mark_extent(&self, head: u32, n: u32, generation: u32) {
        for id in head + 1..head + n {
            let meta = self.meta(id);
            meta.generation.store(generation, Ordering::Relaxed);
            meta.set_state(state::EXTENT_TAIL);
        }
        let meta = self.meta(head);
        meta.generation.store(generation, Ordering::Relaxed);
        meta.extent_blocks.store(n, Ordering::Relaxed);
        meta.holds_tombstone.store(false, Ordering::Relaxed);
        meta.freed_on_media.store(false, Ordering::Release);
        meta.set_state(state::EXTENT_HEAD);
    }

    /// Frees a block (or extent) whose live bytes reached zero, once no
    /// reader can still be looking at it. Exactly one caller wins the state
    /// change, so a block is never freed twice.
    pub fn free_if_dead(self: &Arc<Self>, id: u32) {
        let meta = self.meta(id);
        if meta.live_bytes.load(Ordering::Acquire) != 0 {
            return;
        }
        let current = meta.state();
        if !matches!(
            current,
            state::SEALED | state::COMPACTING | state::EXTENT_HEAD
        ) {
            return;
        }
        if !meta.change_state(current, state::FREEING) {
            return;
        }
        // Weak: a store that is closed meanwhile is unmapped at once rather
        // than kept alive by frees that no longer matter.
        let space = Arc::downgrade(self);
        self.pending_frees.fetch_add(1, Ordering::AcqRel);
        let guard = crossbeam_epoch::pin();
        guard.defer(move || {
            if let Some(space) = space.upgrade() {
                match &space.retirement {
                    // Still pending: released by a later round.
                    Some(retirement) => retirement.block_died(id),
                    None => {
                        space.ready.push(id);
                        space.pending_frees.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            }
        });
        guard.flush();
    }

    /// Waits (up to `patience`) until every dead block has cleared its epoch
    /// and is back in the free set. The epoch advances only when no thread in
    /// the process is pinned, so this pushes it along and polls. Returns
    /// whether everything settled.
    pub fn settle_frees(&self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        loop {
            flush_epochs();
            if self.retirement.is_some() {
                if let Err(error) = self.retirement_round() {
                    log::warn!("retirement round while settling frees: {error}");
                }
            }
            self.release_ready();
            if self.pending_frees.load(Ordering::Acquire) == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One round of lazy retirement (`retirement.rs`): the whole file
    /// synced, dead log blocks' FREE headers written, the DELETED bits
    /// owed set, the blocks of the round before released. Nothing without
    /// lazy retirement.
    pub fn retirement_round(&self) -> Result<()> {
        self.retirement_round_settling(false)
    }

    /// A round that also sets every deferred bit (`retirement.rs`): for
    /// an index image, below whose floor recovery never looks.
    pub fn retirement_round_settling(&self, every_bit: bool) -> Result<()> {
        let Some(retirement) = &self.retirement else {
            return Ok(());
        };
        retirement.round(&self.region, self, every_bit)?;
        self.release_ready();
        Ok(())
    }

    /// Releases every block whose epoch has passed. Called by allocators,
    /// before they take the free-set lock.
    pub fn release_ready(&self) {
        while let Some(id) = self.ready.pop() {
            self.release(id);
        }
    }

    /// Returns a dead block or extent to the free set. An extent's blocks get
    /// FREE headers (tails first, head last): once its head no longer covers
    /// them, a tail block's stale value bytes must never be read as a header.
    fn release(&self, id: u32) {
        let closed = self.closed.read();
        if *closed {
            return;
        }
        let meta = self.meta(id);
        // Invariant 5: only a block with nothing live was queued, after
        // its epoch.
        debug_assert_eq!(meta.state(), state::FREEING, "block {id} released");
        debug_assert_eq!(
            meta.live_bytes.load(Ordering::Relaxed),
            0,
            "invariant 5: block {id} is reused with live bytes"
        );
        let n = meta.extent_blocks.load(Ordering::Relaxed).max(1);
        // Extents always span two blocks or more: a record that fits one
        // block goes into a log block.
        if n > 1 {
            self.write_free_headers(id, n, meta.generation.load(Ordering::Relaxed));
            if self.retirement.is_some() {
                // Under lazy retirement nothing else syncs them before a
                // lane reuses one of these blocks and syncs only its own
                // range: the other blocks' FREE headers must be durable
                // first (invariant 7), or a tail's stale value bytes
                // could be read as a header after a power failure.
                let extent = self.block_offset(id);
                if let Err(error) = self.region.sync(extent, n as u64 * self.block_bytes) {
                    log::error!("syncing the FREE headers of a dead extent failed: {error}; the extent is kept");
                    return;
                }
            }
        }
        for block in id..id + n {
            let meta = self.meta(block);
            meta.extent_blocks.store(1, Ordering::Relaxed);
            meta.live_bytes.store(0, Ordering::Relaxed);
        }
        self.insert_free(id..id + n, BlockMeta::set_state);
        self.blocks_freed.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Writes FREE headers over a dead extent found by recovery (the same
    /// discipline as `release`, run before its blocks are handed out).
    pub fn free_dead_extent(&self, head: u32, n: u32, generation: u32) {
        self.write_free_headers(head, n, generation);
        self.add_free(head..head + n);
    }

    /// FREE headers over an extent's blocks, tails first and head last: until
    /// the head changes, recovery still steps over the whole extent.
    fn write_free_headers(&self, head: u32, n: u32, generation: u32) {
        for block in (head..head + n).rev() {
            BlockHeader {
                kind: BlockKind::Free,
                generation,
                extent_blocks: 1,
            }
            .write(&self.region, self.block_offset(block));
        }
        // Invariant 7: every block of the extent reads as FREE before any
        // of them leaves it.
        verify!(
            (head..head + n).all(|block| {
                BlockHeader::read(&self.region, self.block_offset(block))
                    .is_some_and(|header| header.kind == BlockKind::Free)
            }),
            "invariant 7: extent at block {head} ({n} blocks) left without FREE headers"
        );
    }

    /// Stops all further deferred work on this region.
    pub fn close(&self) {
        *self.closed.write() = true;
    }
}

impl Blocks for Space {
    fn bit_for(&self, offset: u64, generation: u32) -> Bit {
        let meta = self.meta(self.block_of(offset));
        // The flag first: a claim clears it (Release) after storing the
        // new generation, so a cleared flag read here comes with the new
        // generation. Neither changes after this check unless a round
        // marks the block, and rounds are one at a time.
        if meta.freed_on_media.load(Ordering::Acquire)
            || meta.generation.load(Ordering::Acquire) != generation
        {
            // Dead with its FREE header written, or reused.
            return Bit::Spared;
        }
        // Only a log block's records wait: an extent is released (its FREE
        // headers written then) without a round marking it first, so a
        // bit set after its release could land in its next life.
        if meta.extent_blocks.load(Ordering::Relaxed) == 1 {
            Bit::MayWait
        } else {
            Bit::Now
        }
    }

    fn generation_of(&self, offset: u64) -> u32 {
        self.meta(self.block_of(offset))
            .generation
            .load(Ordering::Acquire)
    }

    fn holds_tombstone(&self, id: u32) -> bool {
        self.meta(id).holds_tombstone.load(Ordering::Acquire)
    }

    fn mark_freed(&self, id: u32) {
        let meta = self.meta(id);
        // A tombstone must outlive (durably) every version it outranks:
        // its block keeps its header until reuse, a round after those
        // versions were settled. Other records may go early: each was
        // outranked by a record this round's sync made durable.
        if meta.extent_blocks.load(Ordering::Relaxed) != 1
            || meta.holds_tombstone.load(Ordering::Acquire)
        {
            return;
        }
        BlockHeader {
            kind: BlockKind::Free,
            generation: meta.generation.load(Ordering::Relaxed),
            extent_blocks: 1,
        }
        .write(&self.region, self.block_offset(id));
        meta.freed_on_media.store(true, Ordering::Release);
    }

    fn release(&self, blocks: Vec<u32>) {
        for id in blocks {
            self.ready.push(id);
            self.pending_frees.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Lets deferred frees run: pinning and flushing a few times advances the
/// epoch past every guard taken before (when no reader is pinned meanwhile).
pub fn flush_epochs() {
    for _ in 0..4 {
        crossbeam_epoch::pin().flush();
    }
}

/// The first run of `n` consecutive ids in `set`.
fn find_run(set: &BTreeSet<u32>, n: u32) -> Option<u32> {
    let mut run_start = None;
    let mut previous = None;
    for &id in set {
        match previous {
            Some(p) if p + 1 == id => {}
            _ => run_start = Some(id),
        }
        previous = Some(id);
        let start = run_start.unwrap();
        if id - start + 1 >= n {
            return Some(start);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::find_run;
    use std::collections::BTreeSet;

    #[test]
    fn finds_first_run_long_enough() {
        let set: BTreeSet<u32> = [1, 2, 4, 5, 6, 9].into_iter().collect();
        assert_eq!(find_run(&set, 1), Some(1));
        assert_eq!(find_run(&set, 2), Some(1));
        assert_eq!(find_run(&set, 3), Some(4));
        assert_eq!(find_run(&set, 4), None);
    }
}
