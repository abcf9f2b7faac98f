//! Scrubbing: verifying clean pages against their checksums, stripes
//! against their parity, and rebuilding what one bad page per stripe lost.
//!
//! A page is verified only when no page of its stripe is stale: a stale
//! page's checksum is out of date by design, and its stripe's parity with
//! it. Verification copies pages without stopping writers; a writer marks a
//! page before storing to it, so a mismatch is confirmed (gate drained, mark
//! checked, page copied again) before it counts as corruption.
//!
//! Repairs put words back with a compare-and-swap from the corrupt value to
//! the rebuilt one (`Region::repair_u64`), so a store that lands meanwhile
//! is never undone, and they do not mark the page: the rebuilt page is what
//! its checksum already describes.

use std::sync::atomic::Ordering;

use engram_pmem::{PmemOffset, Region};

use crate::layout::{self, PAGE_BYTES};
use crate::redundancy::{xor_pages, Redundancy};

/// What one scrub found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubOutcome {
    pub pages_checked: u64,
    /// Pages skipped because they (or a page of their stripe) are stale.
    pub pages_stale: u64,
    /// Data pages found corrupt (page numbers), repaired or not.
    pub corrupt: Vec<u64>,
    pub repaired: Vec<u64>,
    pub unrepairable: Vec<u64>,
    /// Stripes whose parity page was wrong and was rewritten.
    pub parity_rewritten: u64,
    /// Groups whose checksum page was damaged and rebuilt from the data.
    pub metadata_rebuilt: u64,
}

impl ScrubOutcome {
    pub fn merge(&mut self, other: ScrubOutcome) {
        self.pages_checked += other.pages_checked;
        self.pages_stale += other.pages_stale;
        self.corrupt.extend(other.corrupt);
        self.repaired.extend(other.repaired);
        self.unrepairable.extend(other.unrepairable);
        self.parity_rewritten += other.parity_rewritten;
        self.metadata_rebuilt += other.metadata_rebuilt;
    }
}

impl Redundancy {
    /// Scrubs stripes `[first_stripe, end_stripe)` of `group`. Takes `work`.
    pub fn scrub_group(
        &self,
        data: &Region,
        group: u64,
        first_stripe: u64,
        end_stripe: u64,
    ) -> ScrubOutcome {
        let _work = self.work.lock();
        let g = self.geometry;
        let mut out = ScrubOutcome::default();
        let data_pages = data.len() / PAGE_BYTES;
        let first_page = group * g.group_pages;
        if first_page >= data_pages {
            return out;
        }
        if first_stripe == 0 && self.expected_meta(group) != self.stored_meta(group) {
            self.rebuild_checksums(data, group);
            out.metadata_rebuilt += 1;
            return out;
        }
        let width = g.stripe_pages as usize;
        let page_bytes = PAGE_BYTES as usize;
        let mut pages = vec![0u8; width * page_bytes];
        let mut parity = vec![0u8; page_bytes];
        for stripe in first_stripe..end_stripe.min(g.group_pages / g.stripe_pages) {
            let stripe_first = first_page + stripe * g.stripe_pages;
            if stripe_first >= data_pages {
                break;
            }
            let members = stripe_first..stripe_first + g.stripe_pages;
            let existing = members.clone().filter(|&p| p < data_pages).count() as u64;
            if members.clone().any(|p| self.is_stale(p)) {
                out.pages_stale += existing;
                continue;
            }
            for (k, buffer) in pages.chunks_exact_mut(page_bytes).enumerate() {
                self.copy_page(data, stripe_first + k as u64, data_pages, buffer);
            }
            let bad: Vec<usize> = pages
                .chunks_exact(page_bytes)
                .enumerate()
                .filter(|(k, buffer)| {
                    let page = stripe_first + *k as u64;
                    layout::stored_checksum(buffer) != self.read_checksum(page)
                })
                .map(|(k, _)| k)
                .filter(|&k| self.confirm_corrupt(data, stripe_first + k as u64, data_pages))
                .collect();
            out.pages_checked += existing;
            self.counters
                .pages_scrubbed
                .fetch_add(existing, Ordering::Relaxed);
            let parity_at = g.parity_offset(stripe_first);
            match bad.as_slice() {
                [] => {
                    xor_pages(&pages, &mut parity);
                    if parity != self.meta.read(parity_at, PAGE_BYTES)
                        && !members.clone().any(|p| self.is_stale(p))
                    {
                        log::warn!("integrity: parity of the stripe at data page {stripe_first} was corrupt; rewritten");
                        self.meta.write(parity_at, &parity);
                        self.meta.persist(parity_at, PAGE_BYTES);
                        out.parity_rewritten += 1;
                        self.counters
                            .corruptions_found
                            .fetch_add(1, Ordering::Relaxed);
                        self.counters.repaired.fetch_add(1, Ordering::Relaxed);
                    }
                }
                &[k] => {
                    let page = stripe_first + k as u64;
                    out.corrupt.push(page);
                    if self.rebuild_page(data, stripe_first, k, &mut pages, &mut parity) {
                        out.repaired.push(page);
                        self.note_repaired(page);
                        self.counters
                            .corruptions_found
                            .fetch_add(1, Ordering::Relaxed);
                        self.counters.repaired.fetch_add(1, Ordering::Relaxed);
                    } else if !members.clone().any(|p| self.is_stale(p)) {
                        out.unrepairable.push(page);
                        if self.report_bad(page, "its stripe's parity does not rebuild it") {
                            self.counters
                                .corruptions_found
                                .fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                several => {
                    for &k in several {
                        let page = stripe_first + k as u64;
                        out.corrupt.push(page);
                        out.unrepairable.push(page);
                        if self.report_bad(page, "another page of its stripe is corrupt too") {
                            self.counters
                                .corruptions_found
                                .fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        out
    }

    fn copy_page(&self, data: &Region, page: u64, data_pages: u64, buffer: &mut [u8]) {
        if page < data_pages {
            data.copy_racy(PmemOffset(page * PAGE_BYTES), buffer);
        } else {
            buffer.fill(0);
        }
    }

    /// A mismatch counts only if it survives a drained gate and a second
    /// copy while the page is still unmarked.
    fn confirm_corrupt(&self, data: &Region, page: u64, data_pages: u64) -> bool {
        self.gate.drain();
        if self.is_stale(page) {
            return false;
        }
        let mut buffer = vec![0u8; PAGE_BYTES as usize];
        self.copy_page(data, page, data_pages, &mut buffer);
        layout::stored_checksum(&buffer) != self.read_checksum(page) && !self.is_stale(page)
    }

    /// Rebuilds page `k` of the stripe from parity and the other pages
    /// (all in `pages`), checks it against the stored checksum, writes it
    /// back word by word and persists it.
    fn rebuild_page(
        &self,
        data: &Region,
        stripe_first: u64,
        k: usize,
        pages: &mut [u8],
        scratch: &mut [u8],
    ) -> bool {
        let g = self.geometry;
        let page_bytes = PAGE_BYTES as usize;
        let page = stripe_first + k as u64;
        let stored_parity = self.meta.read(g.parity_offset(stripe_first), PAGE_BYTES);
        // XOR of every page but k, plus the parity, is page k.
        let corrupt = pages[k * page_bytes..(k + 1) * page_bytes].to_vec();
        pages[k * page_bytes..(k + 1) * page_bytes].copy_from_slice(stored_parity);
        xor_pages(pages, scratch);
        let rebuilt = scratch.to_vec();
        pages[k * page_bytes..(k + 1) * page_bytes].copy_from_slice(&corrupt);
        if layout::stored_checksum(&rebuilt) != self.read_checksum(page) {
            return false;
        }
        let at = page * PAGE_BYTES;
        for (word, (old, new)) in corrupt
            .chunks_exact(8)
            .zip(rebuilt.chunks_exact(8))
            .enumerate()
        {
            if old != new {
                let old = u64::from_ne_bytes(old.try_into().unwrap());
                let new = u64::from_ne_bytes(new.try_into().unwrap());
                // A failed swap means a writer stored here: the page is
                // stale now and the next refresh owns it.
                data.repair_u64(PmemOffset(at + word as u64 * 8), old, new);
            }
        }
        data.persist(PmemOffset(at), PAGE_BYTES);
        log::warn!("integrity: data page {page} (offset {at:#x}) was corrupt; rebuilt from parity");
        true
    }

    /// The group's checksum page is damaged: recompute the checksums of its
    /// clean pages from the data (which cannot be verified this once) and
    /// its meta checksum. Stale pages are refreshed by the next pass anyway.
    fn rebuild_checksums(&self, data: &Region, group: u64) {
        let g = self.geometry;
        let data_pages = data.len() / PAGE_BYTES;
        let mut buffer = vec![0u8; PAGE_BYTES as usize];
        log::warn!("integrity: checksum page of group {group} was corrupt; rebuilt from the data");
        for page in group * g.group_pages..(group + 1) * g.group_pages {
            if self.is_stale(page) {
                continue;
            }
            self.copy_page(data, page, data_pages, &mut buffer);
            self.meta.write(
                g.checksum_offset(page),
                &layout::stored_checksum(&buffer).to_le_bytes(),
            );
        }
        self.meta
            .flush(g.checksums_offset(group), g.group_pages * 4);
        self.write_meta_checksum(group);
        self.meta.fence();
        self.counters
            .corruptions_found
            .fetch_add(1, Ordering::Relaxed);
        self.counters
            .metadata_rebuilt
            .fetch_add(1, Ordering::Relaxed);
    }
}
