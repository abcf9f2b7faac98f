//! Staged regions: on emulated memory, stores land in the process's own
//! copy of the file's pages and reach the file by `pwrite` at a sync
//! (`RegionOptions::staged`).
//!
//! Why: a page of a *shared* writable mapping that the kernel writes back
//! is write-protected again first, and while another thread of the
//! process runs on another core that costs an inter-processor TLB flush
//! per page, on every writeback, whoever starts it (`msync`, the kernel's
//! flusher). Under `always` a server syncs thousands of times a second
//! and those flushes were a fifth of its samples (BENCHMARKS, issue 25).
//! A private mapping is never written back: its pages are anonymous
//! memory once stored to, and a sync copies the pages stored to since the
//! last one into the file (`pwrite`) and `fdatasync`s it, as Redis writes
//! its AOF.
//!
//! The price: a store is in no file until the next sync, so a process
//! crash loses what was stored since, as a power failure would. Only an
//! owner whose every acknowledged write waits for a sync (`always`) may
//! stage a region.
//!
//! [`DirtyPages`] says which pages to copy: one bit a page, set by every
//! store *after* it is made, taken (swapped to 0) by a sync *before* it
//! copies. So a sync copies every store whose bit it took, and a store
//! whose bit it missed leaves its bit for the next sync.
//!
//! Syncs take and copy one at a time ([`DirtyPages::lock_copying`]), and
//! each `fdatasync`s after its turn: a sync that finds a page's bit taken
//! by another has waited for that one's copy, so its own `fdatasync`
//! covers the page. (Without the turn, a group commit could return while
//! a retirement round it raced still held the page uncopied.) A failed
//! copy or `fdatasync` puts the bits it took back ([`DirtyPages::mark_runs`]):
//! the next sync writes those pages again, whatever the kernel did with
//! the ones that failed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use parking_lot::{Mutex, MutexGuard};

use crate::region::OS_PAGE_BYTES;

/// Pages a chunk of the bitmap covers (1 GiB of file in 32 KiB of bits):
/// chunks are made as the region grows into them, so a large address
/// reservation costs only its table of chunks.
const CHUNK_PAGES: u64 = 1 << 18;
const WORDS_PER_CHUNK: usize = (CHUNK_PAGES / 64) as usize;

/// One bit per page of a region: stored to since the last sync took it.
pub struct DirtyPages {
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
    copying: Mutex<()>,
}

impl DirtyPages {
    /// A bitmap for a region that may grow to `reserve_bytes`.
    pub fn new(reserve_bytes: u64) -> DirtyPages {
        let pages = reserve_bytes.div_ceil(OS_PAGE_BYTES);
        let chunks = pages.div_ceil(CHUNK_PAGES) as usize;
        DirtyPages {
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
            copying: Mutex::new(()),
        }
    }

    /// A sync's turn to take bits and copy their pages (see the module).
    pub fn lock_copying(&self) -> MutexGuard<'_, ()> {
        self.copying.lock()
    }

    /// Marks again the pages of `runs` (from [`DirtyPages::take`]) that a
    /// failed sync took.
    pub fn mark_runs(&self, runs: &[(u64, u64)]) {
        for &(start, end) in runs {
            self.mark(start, end - start);
        }
    }

    fn chunk(&self, index: usize) -> &[AtomicU64] {
        self.chunks[index].get_or_init(|| (0..WORDS_PER_CHUNK).map(|_| AtomicU64::new(0)).collect())
    }

    /// Notes a store to `[offset, offset + len)`, made before this call.
    /// (Release: a sync that takes the bit sees the store.)
    #[inline]
    pub fn mark(&self, offset: u64, len: u64) {
        let first = offset / OS_PAGE_BYTES;
        let last = (offset + len.max(1) - 1) / OS_PAGE_BYTES;
        for page in first..=last {
            let words = self.chunk((page / CHUNK_PAGES) as usize);
            let in_chunk = page % CHUNK_PAGES;
            // Always the read-modify-write, never a load first: a bit seen
            // set might be the one a sync is taking right now, before this
            // store is visible to its copy.
            words[(in_chunk / 64) as usize].fetch_or(1 << (in_chunk % 64), Ordering::Release);
        }
    }

    /// Takes the marks of the pages in file bytes `[from, to)` (page
    /// aligned) and returns them as runs of byte ranges `(start, end)`,
    /// in order. (Acquire: the stores behind every bit taken are visible.)
    pub fn take(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let (first, end) = (from / OS_PAGE_BYTES, to.div_ceil(OS_PAGE_BYTES));
        let mut page = first;
        while page < end {
            let chunk = (page / CHUNK_PAGES) as usize;
            let Some(words) = self.chunks.get(chunk).and_then(OnceLock::get) else {
                // Never stored to: skip the chunk.
                page = (chunk as u64 + 1) * CHUNK_PAGES;
                continue;
            };
            let in_chunk = page % CHUNK_PAGES;
            let word = &words[(in_chunk / 64) as usize];
            // The bits of this word inside [page, end).
            let low = in_chunk % 64;
            let high = (end - (page - low)).min(64);
            let mask = bits_between(low, high);
            let taken = if word.load(Ordering::Relaxed) & mask == 0 {
                0
            } else {
                word.fetch_and(!mask, Ordering::AcqRel) & mask
            };
            let word_base = (page - low) * OS_PAGE_BYTES;
            let mut bits = taken;
            while bits != 0 {
                let bit = u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                let start = word_base + bit * OS_PAGE_BYTES;
                match runs.last_mut() {
                    Some(run) if run.1 == start => run.1 += OS_PAGE_BYTES,
                    _ => runs.push((start, start + OS_PAGE_BYTES)),
                }
            }
            page = page - low + high;
        }
        runs
    }
}

/// A mask of bits `[low, high)` (high ≤ 64).
fn bits_between(low: u64, high: u64) -> u64 {
    let upto = if high >= 64 {
        u64::MAX
    } else {
        (1 << high) - 1
    };
    upto & !((1u64 << low) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = OS_PAGE_BYTES;

    #[test]
    fn marks_come_back_as_runs_once() {
        let dirty = DirtyPages::new(4 << 30);
        dirty.mark(10, 8);
        dirty.mark(P + 5, 2 * P); // pages 1..=3
        dirty.mark(70 * P, 1);
        dirty.mark((1 << 30) + 3 * P, 8); // second chunk
        assert_eq!(dirty.take(0, 2 * P), vec![(0, 2 * P)]);
        assert_eq!(
            dirty.take(0, 2 << 30),
            vec![
                (2 * P, 4 * P),
                (70 * P, 71 * P),
                ((1 << 30) + 3 * P, (1 << 30) + 4 * P)
            ]
        );
        assert_eq!(dirty.take(0, 4 << 30), vec![]);
    }

    #[test]
    fn runs_a_failed_sync_took_are_marked_again() {
        let dirty = DirtyPages::new(1 << 30);
        dirty.mark(3 * P, 2 * P + 1); // pages 3..=5
        dirty.mark(9 * P, 1);
        let taken = dirty.take(0, 1 << 30);
        assert_eq!(taken, vec![(3 * P, 6 * P), (9 * P, 10 * P)]);
        dirty.mark_runs(&taken);
        assert_eq!(dirty.take(0, 1 << 30), taken);
    }

    #[test]
    fn a_run_may_cross_words_and_a_range_may_start_mid_word() {
        let dirty = DirtyPages::new(1 << 30);
        dirty.mark(60 * P, 8 * P); // pages 60..=67
        assert_eq!(dirty.take(62 * P, 66 * P), vec![(62 * P, 66 * P)]);
        assert_eq!(
            dirty.take(0, 1 << 30),
            vec![(60 * P, 62 * P), (66 * P, 68 * P)]
        );
    }
}
