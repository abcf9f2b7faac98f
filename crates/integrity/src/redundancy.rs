//! Marking stale pages and refreshing their redundancy (the paper's
//! Algorithm 1, with software marks in place of page-table dirty bits).
//!
//! ## Who touches what
//!
//! - Writer threads (any thread storing to the data region) run
//!   [`StoreTracker::before_store`]: inside the writer gate, a page whose
//!   DRAM mark is clear is marked, persistent mark first. A page's first
//!   store in an epoch pays one persist of one word; later ones a bit test.
//! - One refresh or scrub step at a time holds `work` (they share the
//!   shadow slot and are the only writers of checksums and parity).
//! - `mark_locks` (striped by group) order a writer's marking against the
//!   refresh clearing marks of the same group.
//!
//! Lock order: `work` -> a mark lock. Writers take only a mark lock.
//!
//! ## Refreshing a group (one batch of Algorithm 1)
//!
//! 1. Take the group's DRAM marks `D` (the pages to refresh).
//! 2. Persist `D` as the shadow, then the shadow's commit word.
//! 3. Clear `D` from the persistent marks (persisted), then from DRAM.
//! 4. Drain the writer gate: every store that saw a mark of `D` still set
//!    (and so did not mark again) has finished.
//! 5. Checksum each page of `D`, recompute the parity of each stripe with a
//!    page in `D`, persist both, and the group's meta checksum.
//! 6. Clear the shadow's commit word (persisted).
//!
//! A crash before 6 leaves `D` in the shadow (restored to the marks at the
//! next open); after 6 the redundancy describes every page of `D` as it was
//! at 4 or later, and any later store marked its page again.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use engram_pmem::{PmemOffset, Region, StoreTicket, StoreTracker};
use parking_lot::Mutex;

use crate::gate::Gate;
use crate::layout::{self, Geometry, PAGE_BYTES, SHADOW_GROUP_OFFSET, SHADOW_MARKS_OFFSET};
use crate::stats::Counters;
#[cfg(feature = "fault-injection")]
use crate::IntegrityFaults;
use crate::IntegrityMode;

const MARK_LOCKS: usize = 256;

pub(crate) struct Redundancy {
    pub meta: Region,
    pub geometry: Geometry,
    pub mode: IntegrityMode,
    /// The wrong orderings tests may switch on (`refresh_in_a_wrong_order`).
    #[cfg(feature = "fault-injection")]
    pub faults: IntegrityFaults,
    pub gate: Gate,
    /// DRAM mirror of the persistent marks, one bit per data page (page
    /// p is bit p % 64 of word p / 64: shifts only on the store path),
    /// sized for the data region's whole reservation and backed lazily.
    dirty: Box<[AtomicU64]>,
    /// Per group: when (ms on `clock`, never 0) its oldest stale page was
    /// marked, or 0 when it has none. Updated under the group's mark lock.
    oldest_mark_ms: Box<[AtomicU64]>,
    /// Per group: how many of its pages are stale. Updated under the
    /// group's mark lock, so a mark touches only its group's words (one
    /// store-wide counter was a cache line every writer fought over).
    stale_in_group: Box<[AtomicU64]>,
    mark_locks: Box<[Mutex<()>]>,
    pub work: Mutex<()>,
    /// Data pages the file has groups for.
    pub covered_pages: AtomicU64,
    clock: Instant,
    pub counters: Counters,
    /// Pages found corrupt that could not be rebuilt, by page number.
    bad_pages: Mutex<BTreeSet<u64>>,
    any_bad: AtomicBool,
    /// Pages rebuilt from parity since open (at most `REPAIRED_LOG_LIMIT`).
    repaired_log: Mutex<Vec<u64>>,
}

/// How many repaired pages the log keeps (the counter counts them all).
const REPAIRED_LOG_LIMIT: usize = 4096;

impl Redundancy {
    pub fn new(
        meta: Region,
        geometry: Geometry,
        mode: IntegrityMode,
        #[cfg(feature = "fault-injection")] faults: IntegrityFaults,
        max_data_bytes: u64,
    ) -> Redundancy {
        let max_groups = geometry.groups_for_pages(max_data_bytes.div_ceil(PAGE_BYTES)) as usize;
        let max_pages = max_groups as u64 * geometry.group_pages;
        Redundancy {
            meta,
            geometry,
            mode,
            #[cfg(feature = "fault-injection")]
            faults,
            gate: Gate::new(),
            dirty: engram_pmem::zeroed_atomic_words(max_pages.div_ceil(64) as usize),
            oldest_mark_ms: engram_pmem::zeroed_atomic_words(max_groups),
            stale_in_group: engram_pmem::zeroed_atomic_words(max_groups),
            mark_locks: (0..MARK_LOCKS).map(|_| Mutex::new(())).collect(),
            work: Mutex::new(()),
            covered_pages: AtomicU64::new(0),
            clock: Instant::now(),
            counters: Counters::default(),
            bad_pages: Mutex::new(BTreeSet::new()),
            any_bad: AtomicBool::new(false),
            repaired_log: Mutex::new(Vec::new()),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64 + 1
    }

    #[inline]
    fn dirty_index(&self, page: u64) -> (usize, u64) {
        ((page / 64) as usize, 1u64 << (page % 64))
    }

    /// The DRAM marks of `group`, laid out as its persistent marks are
    /// (bit i of the result: page group * B + i).
    fn group_dirty(&self, group: u64) -> Vec<u64> {
        let g = self.geometry;
        let first = group * g.group_pages;
        if g.group_pages.is_multiple_of(64) {
            let base = (first / 64) as usize;
            return (0..g.mark_words() as usize)
                .map(|word| self.dirty[base + word].load(Ordering::SeqCst))
                .collect();
        }
        let mut words = vec![0u64; g.mark_words() as usize];
        for index in 0..g.group_pages {
            if self.is_stale(first + index) {
                words[(index / 64) as usize] |= 1 << (index % 64);
            }
        }
        words
    }

    /// Clears (DRAM) the pages of `group` set in `marks`; returns whether
    /// any page of the group is still stale.
    fn clear_group_dirty(&self, group: u64, marks: &[u64]) -> bool {
        let g = self.geometry;
        let first = group * g.group_pages;
        if g.group_pages.is_multiple_of(64) {
            let base = (first / 64) as usize;
            let mut left = 0;
            for (word, &bits) in marks.iter().enumerate() {
                left |= self.dirty[base + word].fetch_and(!bits, Ordering::SeqCst) & !bits;
            }
            return left != 0;
        }
        for (word, &bits) in marks.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let index = word as u64 * 64 + bits.trailing_zeros() as u64;
                let (at, bit) = self.dirty_index(first + index);
                self.dirty[at].fetch_and(!bit, Ordering::SeqCst);
                bits &= bits - 1;
            }
        }
        self.group_dirty(group).iter().any(|&w| w != 0)
    }

    #[inline]
    pub fn is_stale(&self, page: u64) -> bool {
        let (word, bit) = self.dirty_index(page);
        self.dirty[word].load(Ordering::SeqCst) & bit != 0
    }

    pub fn groups(&self) -> u64 {
        self.geometry
            .groups_for_pages(self.covered_pages.load(Ordering::Acquire))
    }

    /// Marks `page` stale: persistent mark first, then the DRAM mirror.
    /// The group's age and count change under its mark lock (plain loads
    /// and stores: the lock orders them), and the clock is read only for a
    /// group's first stale page.
    fn mark(&self, page: u64) {
        let group = (page / self.geometry.group_pages) as usize;
        let _lock = self.mark_locks[group % MARK_LOCKS].lock();
        if self.is_stale(page) {
            return;
        }
        let (word, bit) = self.geometry.mark_word(page);
        self.meta.fetch_or_u64(word, bit);
        self.meta.persist(word, 8);
        let (dirty_word, dirty_bit) = self.dirty_index(page);
        self.dirty[dirty_word].fetch_or(dirty_bit, Ordering::SeqCst);
        let stale = &self.stale_in_group[group];
        stale.store(stale.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let oldest = &self.oldest_mark_ms[group];
        if oldest.load(Ordering::Relaxed) == 0 {
            oldest.store(self.now_ms(), Ordering::Relaxed);
        }
    }

    /// Stale pages over the whole region (a sum over groups: for stats).
    pub fn stale_pages(&self) -> u64 {
        (0..self.groups() as usize)
            .map(|group| self.stale_in_group[group].load(Ordering::Relaxed))
            .sum()
    }

    /// Marks every page below `pages` stale (a new integrity file, or marks
    /// that cannot be trusted after a power failure on emulated memory).
    pub fn mark_all(&self, pages: u64) {
        self.mark_range(0, pages);
    }

    /// Marks the pages of `[first, end)` stale in bulk: per group, one
    /// hold of its mark lock, one flush per mark word that changes and one
    /// fence, where marking page by page pays a persist each. A writer
    /// about to fill a fresh log block asks for this ([`crate::Integrity::
    /// expect_writes`]), so its stores find their pages marked already.
    pub fn mark_range(&self, first: u64, end: u64) {
        let group_pages = self.geometry.group_pages;
        let mut page = first;
        while page < end {
            let group = page / group_pages;
            let group_end = ((group + 1) * group_pages).min(end);
            self.mark_in_group(group, page, group_end);
            page = group_end;
        }
    }

    /// [`Self::mark_range`] within one group.
    fn mark_in_group(&self, group: u64, first: u64, end: u64) {
        const WORDS: usize = (layout::MAX_GROUP_PAGES / 64) as usize;
        // Most multi-page stores land in a block marked when it was
        // started: like a single page's, their check takes no lock.
        if (first..end).all(|page| self.is_stale(page)) {
            return;
        }
        let g = self.geometry;
        let _lock = self.mark_locks[group as usize % MARK_LOCKS].lock();
        // The group's persistent mark words count pages from the group's
        // start, the DRAM bitmap from page 0: they line up only when
        // groups are whole multiples of 64 pages, so collect both.
        let mut persistent = [0u64; WORDS];
        let dram_base = first / 64;
        let mut dram = [0u64; WORDS + 1];
        let mut fresh = 0u64;
        for page in first..end {
            if self.is_stale(page) {
                continue;
            }
            let index = page % g.group_pages;
            persistent[(index / 64) as usize] |= 1 << (index % 64);
            dram[(page / 64 - dram_base) as usize] |= 1 << (page % 64);
            fresh += 1;
        }
        if fresh == 0 {
            return;
        }
        let marks = g.marks_offset(group);
        for (word, &bits) in persistent.iter().enumerate() {
            if bits != 0 {
                let at = PmemOffset(marks.0 + word as u64 * 8);
                self.meta.fetch_or_u64(at, bits);
                self.meta.flush(at, 8);
            }
        }
        // Every mark durable before any of the pages changes.
        self.meta.fence();
        for (word, &bits) in dram.iter().enumerate() {
            if bits != 0 {
                self.dirty[dram_base as usize + word].fetch_or(bits, Ordering::SeqCst);
            }
        }
        let stale = &self.stale_in_group[group as usize];
        stale.store(stale.load(Ordering::Relaxed) + fresh, Ordering::Relaxed);
        let oldest = &self.oldest_mark_ms[group as usize];
        if oldest.load(Ordering::Relaxed) == 0 {
            oldest.store(self.now_ms(), Ordering::Relaxed);
        }
    }

    /// Loads the persistent marks of every covered group into DRAM.
    pub fn load_marks(&self) {
        let now = self.now_ms();
        for group in 0..self.groups() {
            let marks = self.geometry.marks_offset(group);
            let first = group * self.geometry.group_pages;
            let mut stale = 0;
            for word in 0..self.geometry.mark_words() {
                let mut bits = self.meta.load_u64(PmemOffset(marks.0 + word * 8));
                stale += bits.count_ones() as u64;
                while bits != 0 {
                    let page = first + word * 64 + bits.trailing_zeros() as u64;
                    let (at, bit) = self.dirty_index(page);
                    self.dirty[at].fetch_or(bit, Ordering::SeqCst);
                    bits &= bits - 1;
                }
            }
            if stale > 0 {
                let _lock = self.mark_locks[group as usize % MARK_LOCKS].lock();
                let counted: u64 = self
                    .group_dirty(group)
                    .iter()
                    .map(|w| w.count_ones() as u64)
                    .sum();
                self.stale_in_group[group as usize].store(counted, Ordering::Relaxed);
                self.oldest_mark_ms[group as usize].store(now, Ordering::Relaxed);
            }
        }
    }

    /// Grows the file so that groups cover `data_pages` pages. The new
    /// groups are zeros: correct for the zero pages they describe.
    pub fn cover(&self, data_pages: u64) -> engram_pmem::Result<()> {
        let groups = self.geometry.groups_for_pages(data_pages);
        self.meta.grow_to(self.geometry.file_bytes(groups))?;
        self.covered_pages
            .fetch_max(groups * self.geometry.group_pages, Ordering::AcqRel);
        Ok(())
    }

    /// The age of the oldest stale page.
    pub fn oldest_stale_ms(&self) -> u64 {
        let now = self.now_ms();
        (0..self.groups() as usize)
            .map(|group| self.oldest_mark_ms[group].load(Ordering::Relaxed))
            .filter(|&ms| ms != 0)
            .min()
            .map_or(0, |oldest| now.saturating_sub(oldest))
    }

    /// Refreshes every group with stale pages; returns pages refreshed.
    pub fn refresh_all(&self, data: &Region) -> u64 {
        let started = Instant::now();
        let mut pages = 0;
        for group in 0..self.groups() {
            let _work = self.work.lock();
            pages += self.refresh_group(data, group, None);
        }
        self.counters.record_pass(started.elapsed(), pages);
        pages
    }

    /// Inline mode: refreshes the pages of one store.
    fn refresh_range(&self, data: &Region, offset: u64, len: u64) {
        let g = self.geometry;
        let first = offset / PAGE_BYTES;
        let last = (offset + len.max(1) - 1) / PAGE_BYTES;
        let _work = self.work.lock();
        let mut page = first;
        while page <= last {
            let group = page / g.group_pages;
            let group_end = ((group + 1) * g.group_pages - 1).min(last);
            let mut mask = vec![0u64; g.mark_words() as usize];
            for p in page..=group_end {
                let index = p % g.group_pages;
                mask[(index / 64) as usize] |= 1 << (index % 64);
            }
            self.refresh_group(data, group, Some(&mask));
            page = group_end + 1;
        }
    }

    /// One batch of Algorithm 1 over `group` (module docs). Call with
    /// `work` held. Returns the pages refreshed.
    pub fn refresh_group(&self, data: &Region, group: u64, mask: Option<&[u64]>) -> u64 {
        // I4: only the holder of `work` writes checksums, parity or the
        // shadow.
        debug_assert!(self.work.is_locked(), "I4: refresh without `work`");
        let snapshot_ms = self.now_ms();
        let marks: Vec<u64> = self
            .group_dirty(group)
            .into_iter()
            .enumerate()
            .map(|(word, bits)| bits & mask.map_or(u64::MAX, |m| m[word]))
            .collect();
        let count: u64 = marks.iter().map(|w| w.count_ones() as u64).sum();
        if count == 0 {
            return 0;
        }
        let full_pass = mask.is_none();
        #[cfg(feature = "fault-injection")]
        if self.refresh_in_a_wrong_order(data, group, &marks, snapshot_ms, full_pass) {
            return count;
        }
        let bytes: Vec<u8> = marks.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.meta.write(SHADOW_MARKS_OFFSET, &bytes);
        self.meta.persist(SHADOW_MARKS_OFFSET, bytes.len() as u64);
        self.meta.store_u64(SHADOW_GROUP_OFFSET, group + 1);
        self.meta.persist(SHADOW_GROUP_OFFSET, 8);
        self.clear_marks(group, &marks, snapshot_ms, full_pass);
        self.gate.drain();
        self.recompute(data, group, &marks);
        self.meta.store_u64(SHADOW_GROUP_OFFSET, 0);
        self.meta.persist(SHADOW_GROUP_OFFSET, 8);
        count
    }

    /// The orderings of the paper's Figure 4 that Algorithm 1 avoids, when
    /// a test switched one on (`IntegrityFaults`); false (nothing done) when
    /// none is on. No shadow either way: (a) refresh, then clear the marks
    /// (and no gate); (b) clear the marks, then refresh.
    #[cfg(feature = "fault-injection")]
    fn refresh_in_a_wrong_order(
        &self,
        data: &Region,
        group: u64,
        marks: &[u64],
        snapshot_ms: u64,
        full_pass: bool,
    ) -> bool {
        if self.faults.clear_marks_after_refresh {
            self.recompute(data, group, marks);
            self.clear_marks(group, marks, snapshot_ms, full_pass);
            return true;
        }
        if self.faults.skip_shadow {
            self.clear_marks(group, marks, snapshot_ms, full_pass);
            self.gate.drain();
            self.recompute(data, group, marks);
            return true;
        }
        false
    }

    /// Clears `marks` of `group`, persistent marks first (the shadow holds
    /// them meanwhile), then DRAM.
    fn clear_marks(&self, group: u64, marks: &[u64], snapshot_ms: u64, full_pass: bool) {
        // I2: the committed shadow holds every mark about to be cleared.
        verify!(
            self.in_wrong_order_on_purpose() || self.shadow_holds(group, marks),
            "I2: clearing marks of group {group} that its committed shadow does not hold"
        );
        let g = self.geometry;
        let _lock = self.mark_locks[group as usize % MARK_LOCKS].lock();
        let marks_at = g.marks_offset(group);
        for (word, &bits) in marks.iter().enumerate() {
            if bits != 0 {
                let at = PmemOffset(marks_at.0 + word as u64 * 8);
                self.meta.fetch_and_u64(at, !bits);
                self.meta.flush(at, 8);
            }
        }
        self.meta.fence();
        let still_stale = self.clear_group_dirty(group, marks);
        let cleared: u64 = marks.iter().map(|w| w.count_ones() as u64).sum();
        let stale = &self.stale_in_group[group as usize];
        stale.store(stale.load(Ordering::Relaxed) - cleared, Ordering::Relaxed);
        // In a full pass, pages still stale were marked after the snapshot,
        // so `snapshot_ms` bounds their age from above. An inline refresh
        // leaves other pages as they were.
        let oldest = &self.oldest_mark_ms[group as usize];
        if !still_stale {
            oldest.store(0, Ordering::Relaxed);
        } else if full_pass || oldest.load(Ordering::Relaxed) == 0 {
            oldest.store(snapshot_ms, Ordering::Relaxed);
        }
    }

    /// Whether the committed shadow names `group` and holds every bit of
    /// `marks` (I2, checked under `verify`).
    fn shadow_holds(&self, group: u64, marks: &[u64]) -> bool {
        self.meta.load_u64(SHADOW_GROUP_OFFSET) == group + 1
            && marks.iter().enumerate().all(|(word, &bits)| {
                let at = PmemOffset(SHADOW_MARKS_OFFSET.0 + word as u64 * 8);
                self.meta.load_u64(at) & bits == bits
            })
    }

    /// I1 as a store inside the writer gate sees it, after marking: `page`
    /// is marked on the media, or its mark was cleared by a refresh whose
    /// committed shadow still holds it (the shadow cannot be retired
    /// before the refresh drains the gate, so until this store leaves it).
    fn marked_or_shadowed(&self, page: u64) -> bool {
        let g = self.geometry;
        let (word, bit) = g.mark_word(page);
        if self.meta.load_u64(word) & bit != 0 {
            return true;
        }
        let index = page % g.group_pages;
        let shadow_word = PmemOffset(SHADOW_MARKS_OFFSET.0 + index / 64 * 8);
        self.meta.load_u64(SHADOW_GROUP_OFFSET) == page / g.group_pages + 1
            && self.meta.load_u64(shadow_word) & (1 << (index % 64)) != 0
    }

    /// Whether a test switched on one of Figure 4's wrong orderings: they
    /// break I1 and I2 on purpose, for the tests to find by themselves, so
    /// the checks of those stand aside.
    #[cfg(feature = "fault-injection")]
    fn in_wrong_order_on_purpose(&self) -> bool {
        self.faults.skip_shadow || self.faults.clear_marks_after_refresh
    }

    #[cfg(not(feature = "fault-injection"))]
    fn in_wrong_order_on_purpose(&self) -> bool {
        false
    }

    /// Step 5: checksums of the marked pages, parity of their stripes, the
    /// group's meta checksum; persisted with one fence.
    fn recompute(&self, data: &Region, group: u64, marks: &[u64]) {
        let g = self.geometry;
        let width = g.stripe_pages as usize;
        let page_bytes = PAGE_BYTES as usize;
        let data_pages = data.len() / PAGE_BYTES;
        let first_page = group * g.group_pages;
        let marked = |index: u64| marks[(index / 64) as usize] & (1 << (index % 64)) != 0;
        let mut pages = vec![0u8; width * page_bytes];
        let mut parity = vec![0u8; page_bytes];
        for stripe in 0..g.group_pages / g.stripe_pages {
            let first_index = stripe * g.stripe_pages;
            if !(first_index..first_index + g.stripe_pages).any(marked) {
                continue;
            }
            for (k, buffer) in pages.chunks_exact_mut(page_bytes).enumerate() {
                let page = first_page + first_index + k as u64;
                if page < data_pages {
                    let at = PmemOffset(page * PAGE_BYTES);
                    data.copy_racy(at, buffer);
                    if marked(first_index + k as u64) {
                        // The checksum must describe what the media holds:
                        // stores still in the CPU cache are written back
                        // before the fence that retires the shadow. (The
                        // paper assumes battery-backed caches; we do not.)
                        data.flush(at, PAGE_BYTES);
                    }
                } else {
                    buffer.fill(0);
                }
            }
            // Only the marked pages get new checksums. A clean neighbour is
            // not verified here: were it corrupt, the old parity could not
            // rebuild it anyway (it also held a page that has changed), and
            // the scrubber finds it just the same, at a quarter of the
            // checksum work on stripes with one page written.
            for (k, buffer) in pages.chunks_exact(page_bytes).enumerate() {
                let index = first_index + k as u64;
                let page = first_page + index;
                // A page known bad keeps the checksum of its good content,
                // so a store to it (a delete bit, an in-place counter) never
                // turns its corrupt bytes into data. It is forgotten when
                // its block is reclaimed.
                if marked(index) && !self.is_bad(page) {
                    let computed = layout::stored_checksum(buffer);
                    self.meta
                        .write(g.checksum_offset(page), &computed.to_le_bytes());
                }
            }
            xor_pages(&pages, &mut parity);
            let parity_at = g.parity_offset(first_page + first_index);
            self.meta.write(parity_at, &parity);
            self.meta.flush(parity_at, PAGE_BYTES);
        }
        self.meta
            .flush(g.checksums_offset(group), g.group_pages * 4);
        self.write_meta_checksum(group);
        self.meta.fence();
    }

    pub fn read_checksum(&self, page: u64) -> u32 {
        let at = self.geometry.checksum_offset(page);
        // Checksums change only under `work`, which every reader holds.
        u32::from_le_bytes(self.meta.read(at, 4).try_into().unwrap())
    }

    /// The meta checksum the group's checksums page should have.
    pub fn expected_meta(&self, group: u64) -> u32 {
        let page = self
            .meta
            .read(self.geometry.checksums_offset(group), PAGE_BYTES);
        layout::stored_checksum(page)
    }

    pub fn stored_meta(&self, group: u64) -> u32 {
        u32::from_le_bytes(
            self.meta
                .read(self.geometry.meta_offset(group), 4)
                .try_into()
                .unwrap(),
        )
    }

    /// Writes and flushes (no fence) the group's meta checksum.
    pub fn write_meta_checksum(&self, group: u64) {
        debug_assert!(self.work.is_locked(), "I4: meta checksum without `work`");
        let at = self.geometry.meta_offset(group);
        self.meta
            .write(at, &self.expected_meta(group).to_le_bytes());
        self.meta.flush(at, 4);
    }

    /// Records `page` as corrupt beyond repair; true when it was not known.
    pub fn report_bad(&self, page: u64, why: &str) -> bool {
        let mut bad = self.bad_pages.lock();
        let new = bad.insert(page);
        if new {
            log::error!(
                "integrity: data page {page} (offset {:#x}) is corrupt and cannot be rebuilt ({why})",
                page * PAGE_BYTES
            );
        }
        self.any_bad.store(true, Ordering::Release);
        new
    }

    fn is_bad(&self, page: u64) -> bool {
        self.any_bad.load(Ordering::Acquire) && self.bad_pages.lock().contains(&page)
    }

    /// The pages of `[offset, offset + len)` hold nothing anyone will read
    /// again (their block is being reused): they stop being bad, and their
    /// next refresh describes whatever is written there next. Call before
    /// the first store of the new use.
    pub fn forget_bad(&self, offset: u64, len: u64) {
        if self.any_bad.load(Ordering::Acquire) {
            let first = offset / PAGE_BYTES;
            let last = (offset + len.max(1) - 1) / PAGE_BYTES;
            let mut bad = self.bad_pages.lock();
            let forgotten: Vec<u64> = bad.range(first..=last).copied().collect();
            for page in forgotten {
                bad.remove(&page);
                // Its stored checksum is stale for the new content: make
                // sure the next refresh recomputes it.
                self.mark(page);
            }
            self.any_bad.store(!bad.is_empty(), Ordering::Release);
        }
    }

    /// Notes a page rebuilt from parity (a bounded log, for reports).
    pub fn note_repaired(&self, page: u64) {
        let mut log = self.repaired_log.lock();
        if log.len() < REPAIRED_LOG_LIMIT {
            log.push(page);
        }
    }

    pub fn repaired_pages(&self) -> Vec<u64> {
        self.repaired_log.lock().clone()
    }

    pub fn bad_pages(&self) -> Vec<u64> {
        self.bad_pages.lock().iter().copied().collect()
    }

    /// Whether any page of `[offset, offset + len)` is known unrepairable.
    #[inline]
    pub fn overlaps_bad(&self, offset: u64, len: u64) -> bool {
        if !self.any_bad.load(Ordering::Acquire) {
            return false;
        }
        let first = offset / PAGE_BYTES;
        let last = (offset + len.max(1) - 1) / PAGE_BYTES;
        self.bad_pages.lock().range(first..=last).next().is_some()
    }
}

/// XOR of the `pages.len() / PAGE_BYTES` pages into `parity`. Word-wise so
/// the compiler vectorises it.
pub fn xor_pages(pages: &[u8], parity: &mut [u8]) {
    let page_bytes = PAGE_BYTES as usize;
    parity.fill(0);
    for page in pages.chunks_exact(page_bytes) {
        for (out, chunk) in parity.chunks_exact_mut(8).zip(page.chunks_exact(8)) {
            let word = u64::from_ne_bytes(out.try_into().unwrap())
                ^ u64::from_ne_bytes(chunk.try_into().unwrap());
            out.copy_from_slice(&word.to_ne_bytes());
        }
    }
}

impl StoreTracker for Redundancy {
    #[inline]
    fn before_store(&self, offset: u64, len: u64) -> StoreTicket {
        let ticket = self.gate.enter();
        let first = offset / PAGE_BYTES;
        let last = (offset + len.max(1) - 1) / PAGE_BYTES;
        if first == last {
            if !self.is_stale(first) {
                self.mark(first);
            }
        } else {
            self.mark_range(first, last + 1);
        }
        verify!(
            self.in_wrong_order_on_purpose()
                || (first..=last).all(|page| self.marked_or_shadowed(page)),
            "I1: a store to pages {first}..={last} goes ahead with a page neither marked nor shadowed"
        );
        StoreTicket(ticket)
    }

    #[inline]
    fn after_store(&self, region: &Region, ticket: StoreTicket, offset: u64, len: u64) {
        self.gate.exit(ticket.0);
        if self.mode == IntegrityMode::Inline {
            self.refresh_range(region, offset, len);
        }
    }

    fn before_grow(&self, new_len: u64) -> engram_pmem::Result<()> {
        self.cover(new_len.div_ceil(PAGE_BYTES))
    }
}
