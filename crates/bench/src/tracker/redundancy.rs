//! The kernel tracker's collection pass: the same checksum and parity work
//! as `engram_integrity`'s refresh (Algorithm 1's lines 6-17), over the
//! pages `PAGEMAP_SCAN` reported, into a file of `engram_integrity`'s
//! layout ([`engram_integrity::layout`]): per page a CRC32C, per stripe of
//! `stripe_pages` pages an XOR parity page, per group a checksum of its
//! checksums.
//!
//! Like for like with `Redundancy::recompute`: every page of a stripe with
//! a written page is copied (racy copy); the written pages get new
//! checksums (clean neighbours are not verified, as the integrity crate no
//! longer does: the scrubber does that); the stripe's parity is recomputed
//! and written; then each touched group's meta checksum. What it leaves
//! out is what the kernel does instead: the marks, their shadow copy and
//! the writer gate.

use std::io;
use std::ops::Range;
use std::path::Path;

use engram_integrity::layout::{self, Geometry};
use engram_pmem::{PmemOffset, Region};

use super::memory::{MapOptions, Mapping, PAGE_BYTES};

/// Where the pass reads data pages from: a plain mapping, or Engram's
/// Region (both copy with volatile word loads while writers store).
pub trait PageSource {
    fn pages(&self) -> u64;
    fn copy_racy(&self, offset: u64, buffer: &mut [u8]);
}

impl PageSource for Mapping {
    fn pages(&self) -> u64 {
        Mapping::pages(self)
    }
    fn copy_racy(&self, offset: u64, buffer: &mut [u8]) {
        Mapping::copy_racy(self, offset, buffer);
    }
}

impl PageSource for Region {
    fn pages(&self) -> u64 {
        self.len() / PAGE_BYTES
    }
    fn copy_racy(&self, offset: u64, buffer: &mut [u8]) {
        Region::copy_racy(self, PmemOffset(offset), buffer);
    }
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Refreshed {
    /// Pages whose checksum was rewritten (the written ones).
    pub pages: u64,
    /// Stripes whose parity was rewritten.
    pub stripes: u64,
}

pub struct PageRedundancy {
    geometry: Geometry,
    meta: Mapping,
    data_pages: u64,
    /// One bit per data page: written in the pass under way.
    written: Vec<u64>,
    stripe: Vec<u8>,
    parity: Vec<u8>,
    checksums_page: Vec<u8>,
    groups: Vec<u64>,
}

impl PageRedundancy {
    /// Creates the redundancy file at `path` for `data_pages` pages, all
    /// zero: right for all-zero data (as `integrity.pmem` is).
    pub fn create(path: &Path, data_pages: u64, stripe_pages: u32) -> io::Result<PageRedundancy> {
        let geometry = Geometry::new(stripe_pages);
        let groups = geometry.groups_for_pages(data_pages);
        let meta = Mapping::create_file(path, geometry.file_bytes(groups), MapOptions::LAZY)?;
        let page_bytes = PAGE_BYTES as usize;
        Ok(PageRedundancy {
            geometry,
            meta,
            data_pages,
            written: vec![0; data_pages.div_ceil(64) as usize],
            stripe: vec![0; geometry.stripe_pages as usize * page_bytes],
            parity: vec![0; page_bytes],
            checksums_page: vec![0; page_bytes],
            groups: Vec::new(),
        })
    }

    /// Refreshes every page (a new file, or after a crash: the cost the
    /// kernel tracker pays at open, having no record of what changed).
    pub fn refresh_all<D: PageSource + ?Sized>(&mut self, data: &D) -> Refreshed {
        let every_page = 0..self.data_pages;
        self.refresh(data, std::slice::from_ref(&every_page))
    }

    /// Refreshes the checksums of `written` (ascending page ranges) and the
    /// parity of their stripes, then the touched groups' meta checksums.
    pub fn refresh<D: PageSource + ?Sized>(
        &mut self,
        data: &D,
        written: &[Range<u64>],
    ) -> Refreshed {
        debug_assert_eq!(data.pages(), self.data_pages);
        let g = self.geometry;
        let page_bytes = PAGE_BYTES as usize;
        let mut done = Refreshed::default();
        for range in written {
            for page in range.clone() {
                self.written[(page / 64) as usize] |= 1 << (page % 64);
            }
        }
        self.groups.clear();
        let mut last_stripe = None;
        for range in written.iter().filter(|range| !range.is_empty()) {
            let first_stripe = range.start / g.stripe_pages;
            let last = (range.end - 1) / g.stripe_pages;
            for stripe in first_stripe..=last {
                if last_stripe == Some(stripe) {
                    continue;
                }
                last_stripe = Some(stripe);
                let first_page = stripe * g.stripe_pages;
                for (k, buffer) in self.stripe.chunks_exact_mut(page_bytes).enumerate() {
                    let page = first_page + k as u64;
                    if page < self.data_pages {
                        data.copy_racy(page * PAGE_BYTES, buffer);
                    } else {
                        buffer.fill(0);
                    }
                }
                for (k, buffer) in self.stripe.chunks_exact(page_bytes).enumerate() {
                    let page = first_page + k as u64;
                    let is_written = page < self.data_pages
                        && self.written[(page / 64) as usize] & (1 << (page % 64)) != 0;
                    if is_written {
                        let computed = layout::stored_checksum(buffer);
                        self.meta
                            .write(g.checksum_offset(page).0, &computed.to_le_bytes());
                        done.pages += 1;
                    }
                }
                xor_pages(&self.stripe, &mut self.parity);
                self.meta.write(g.parity_offset(first_page).0, &self.parity);
                done.stripes += 1;
                let group = first_page / g.group_pages;
                if self.groups.last() != Some(&group) {
                    self.groups.push(group);
                }
            }
        }
        for index in 0..self.groups.len() {
            let group = self.groups[index];
            self.meta
                .copy_racy(g.checksums_offset(group).0, &mut self.checksums_page);
            let meta = layout::stored_checksum(&self.checksums_page);
            self.meta.write(g.meta_offset(group).0, &meta.to_le_bytes());
        }
        for range in written {
            for page in range.clone() {
                self.written[(page / 64) as usize] &= !(1 << (page % 64));
            }
        }
        done
    }
}

/// XOR of the pages in `pages` into `parity`, a word at a time (the same
/// loop shape as the integrity crate's, which the compiler vectorises).
fn xor_pages(pages: &[u8], parity: &mut [u8]) {
    parity.fill(0);
    for page in pages.chunks_exact(parity.len()) {
        for (out, word) in parity.chunks_exact_mut(8).zip(page.chunks_exact(8)) {
            let value = u64::from_ne_bytes((&*out).try_into().expect("8 bytes"))
                ^ u64::from_ne_bytes(word.try_into().expect("8 bytes"));
            out.copy_from_slice(&value.to_ne_bytes());
        }
    }
}
