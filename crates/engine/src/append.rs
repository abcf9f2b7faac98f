//! Records into blocks and out again: appending a record to a lane's log
//! block (or to an extent of its own when too large for one), handing a
//! full block over to compaction, and retiring a record.
//!
//! Both writers use it: application writers through their lanes (`write.rs`)
//! and the compactor through its own lane (`compaction.rs`). Where a lane's
//! next block comes from is the caller's to say, because that is where the
//! two differ: an application writer at the space budget compacts a block
//! or two before it grows the file, and the compactor never does.

use std::sync::atomic::Ordering;

use engram_pmem::PmemOffset;

use crate::block::{state, BlockHeader, BlockKind, BLOCK_HEADER_BYTES};
use crate::lanes::Lane;
use crate::record;
use crate::store_state::StoreState;
use crate::Result;

/// Whether a record of `key` and `value` fits in a log block (else it
/// needs an extent: [`append_extent`]).
pub fn fits_log_block(store: &StoreState, key: &[u8], value: &[u8]) -> bool {
    record::encoded_bytes(key.len(), value.len()) <= store.space.log_payload_bytes()
}

/// Appends a record to `lane`'s log block and persists it; returns its
/// offset and sequence number. A full (or absent) block is sealed and
/// replaced by the one `new_block` claims. `seq` is given when compaction
/// moves a record; otherwise the record takes the next one.
pub fn append_to_lane(
    store: &StoreState,
    lane: &mut Lane,
    key: &[u8],
    value: &[u8],
    seq: Option<u64>,
    new_block: impl FnOnce() -> Result<u32>,
) -> Result<(u64, u64)> {
    debug_assert!(fits_log_block(store, key, value));
    let size = record::encoded_bytes(key.len(), value.len());
    if lane.block.is_none() || lane.used_bytes + size > store.space.block_bytes {
        seal(store, lane);
        let id = new_block()?;
        lane.generation = store.space.start_log_block(id);
        lane.block = Some(id);
        lane.block_start = store.space.block_offset(id).0;
        lane.used_bytes = BLOCK_HEADER_BYTES;
    }
    let block = lane.block.expect("lane has a block");
    // Invariant 1: the record repeats its block's generation, whose header
    // went to the media before the block's first record.
    debug_assert_eq!(
        lane.generation,
        store.space.meta(block).generation.load(Ordering::Relaxed)
    );
    verify!(
        BlockHeader::read(store.region(), PmemOffset(lane.block_start)).is_some_and(
            |header| header.kind == BlockKind::Log && header.generation == lane.generation
        ),
        "invariant 1: appending to block {block} before its header (generation {})",
        lane.generation
    );
    let at = PmemOffset(lane.block_start + lane.used_bytes);
    lane.used_bytes += size;
    debug_assert!(lane.used_bytes <= store.space.block_bytes);
    store.space.add_live(block, size);
    store.appended_bytes.add(block as usize, size as i64);
    let seq = seq.unwrap_or_else(|| store.seq.fetch_add(1, Ordering::Relaxed));
    let region = store.region();
    record::write(region, at, lane.generation, seq, key, value);
    #[cfg(feature = "fault-injection")]
    if store.options.faults.skip_record_persist {
        return Ok((at.0, seq));
    }
    region.persist(at, size);
    Ok((at.0, seq))
}

/// Appends a record too large for a log block to an extent of its own and
/// persists it; returns its offset and sequence number.
pub fn append_extent(
    store: &StoreState,
    key: &[u8],
    value: &[u8],
    seq: Option<u64>,
) -> Result<(u64, u64)> {
    let size = record::encoded_bytes(key.len(), value.len());
    let blocks = (BLOCK_HEADER_BYTES + size).div_ceil(store.space.block_bytes) as u32;
    let head = store.space.take_run(blocks)?;
    let generation = store.space.start_extent(head, blocks);
    let at = store.space.block_offset(head).add(BLOCK_HEADER_BYTES);
    store.space.add_live(head, size);
    store.appended_bytes.add(head as usize, size as i64);
    let seq = seq.unwrap_or_else(|| store.seq.fetch_add(1, Ordering::Relaxed));
    let region = store.region();
    record::write(region, at, generation, seq, key, value);
    region.persist(at, size);
    Ok((at.0, seq))
}

/// Hands the lane's block over to compaction (or frees it if all dead).
pub fn seal(store: &StoreState, lane: &mut Lane) {
    if let Some(id) = lane.block.take() {
        store.space.meta(id).set_state(state::SEALED);
        store.space.free_if_dead(id);
    }
}

/// Marks a record deleted (durably) and gives its bytes back; frees its
/// block once nothing in it is live. Idempotent.
pub fn retire(store: &StoreState, offset: u64) {
    let region = store.region();
    let at = PmemOffset(offset);
    let previous = record::set_flags(region, at, record::DELETED);
    if previous & record::DELETED != 0 {
        return;
    }
    let size = record::read_header(region, at).encoded_bytes();
    let block = store.space.block_of(offset);
    if store.space.sub_live(block, size) {
        store.space.free_if_dead(block);
    }
}
