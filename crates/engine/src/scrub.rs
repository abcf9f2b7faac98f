//! Scrubbing a running store: the integrity layer verifies and repairs
//! pages; what it cannot repair is mapped back to keys through the index.

use std::time::{Duration, Instant};

use engram_pmem::PmemOffset;

use crate::record;
use crate::store_state::StoreState;
use crate::{Error, Result};

/// What [`crate::Store::scrub_now`] found.
#[derive(Clone, Debug, Default)]
pub struct ScrubReport {
    pub pages_checked: u64,
    /// Pages skipped because they were written during the scrub.
    pub pages_stale: u64,
    pub corrupt_pages: u64,
    /// Data-file offsets of pages rebuilt from parity.
    pub repaired_pages: Vec<u64>,
    /// Data-file offsets of pages that could not be rebuilt.
    pub unrepairable_pages: Vec<u64>,
    pub parity_rewritten: u64,
    pub metadata_rebuilt: u64,
    /// Keys with a record on an unrepairable page. A record whose header
    /// is itself damaged is named by its offset (`AffectedKey::key` None).
    pub affected_keys: Vec<AffectedKey>,
    pub duration: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AffectedKey {
    pub offset: u64,
    pub key: Option<Vec<u8>>,
}

/// Brings redundancy up to date, verifies every page and stripe, rebuilds
/// what parity can rebuild, and names the keys on pages it could not.
pub fn scrub(store: &StoreState) -> Result<ScrubReport> {
    let Some(integrity) = &store.space.integrity else {
        return Err(Error::InvalidOption(
            "scrubbing needs integrity lazy or inline (it is off)".into(),
        ));
    };
    let started = Instant::now();
    let outcome = integrity.scrub_now();
    let bad = integrity.unrepairable_offsets();
    let affected = records_on_pages(store, &bad);
    Ok(ScrubReport {
        pages_checked: outcome.pages_checked,
        pages_stale: outcome.pages_stale,
        corrupt_pages: outcome.corrupt.len() as u64,
        repaired_pages: outcome
            .repaired
            .iter()
            .map(|p| p * engram_integrity::layout::PAGE_BYTES)
            .collect(),
        unrepairable_pages: bad,
        parity_rewritten: outcome.parity_rewritten,
        metadata_rebuilt: outcome.metadata_rebuilt,
        affected_keys: affected,
        duration: started.elapsed(),
    })
}

/// Records (by offset, with their keys where the header is intact)
/// that overlap any of the pages at `page_offsets`.
fn records_on_pages(store: &StoreState, page_offsets: &[u64]) -> Vec<AffectedKey> {
    const PAGE: u64 = engram_integrity::layout::PAGE_BYTES;
    if page_offsets.is_empty() {
        return Vec::new();
    }
    let region = store.region();
    let on_bad_page = |start: u64, len: u64| {
        let first = start / PAGE * PAGE;
        let last = (start + len.max(1) - 1) / PAGE * PAGE;
        page_offsets
            .iter()
            .any(|&page| (first..=last).contains(&page))
    };
    let _guard = crossbeam_epoch::pin();
    let mut affected = Vec::new();
    let mut cursor = 0;
    loop {
        let (next, offsets) = store.index.scan(cursor, 4096);
        for offset in offsets {
            let at = PmemOffset(offset);
            let header = record::read_header(region, at);
            let len = if region.contains(at, header.encoded_bytes()) {
                header.encoded_bytes()
            } else {
                record::HEADER_BYTES
            };
            if on_bad_page(offset, len) {
                let key = (len > record::HEADER_BYTES
                    && record::header_intact(region, at, &header))
                .then(|| record::key(region, at, &header).to_vec());
                affected.push(AffectedKey { offset, key });
            }
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    affected
}
