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

use engram_pmem::{PmemOffset, Region};

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
    append_record(store, lane, key, Some(value), seq, new_block)
}

/// Appends a tombstone for `key` (lazy retirement: `retirement.rs`) and
/// persists it; returns its offset and sequence number. Its bytes are
/// never counted live: nothing indexes it, and its block is reused only
/// after the versions it shadows are durably retired.
pub fn append_tombstone(
    store: &StoreState,
    lane: &mut Lane,
    key: &[u8],
    new_block: impl FnOnce() -> Result<u32>,
) -> Result<(u64, u64)> {
    if !fits_log_block(store, key, &[]) {
        return append_extent_record(store, key, None, None, true);
    }
    append_record(store, lane, key, None, None, new_block)
}

/// A record (`value`), or a tombstone (None), into the lane's block.
fn append_record(
    store: &StoreState,
    lane: &mut Lane,
    key: &[u8],
    value: Option<&[u8]>,
    seq: Option<u64>,
    new_block: impl FnOnce() -> Result<u32>,
) -> Result<(u64, u64)> {
    let value_bytes = value.unwrap_or(&[]);
    debug_assert!(fits_log_block(store, key, value_bytes));
    let size = record::encoded_bytes(key.len(), value_bytes.len());
    make_room(store, lane, size, new_block)?;
    let (at, seq) = place_record(store, lane, key, value, seq);
    #[cfg(feature = "fault-injection")]
    if store.options.faults.skip_record_persist {
        return Ok((at.0, seq));
    }
    store.region().persist(at, size);
    Ok((at.0, seq))
}

/// Appends one atomic batch to the lane's block: a batch header, then a
/// record (Some) or tombstone (None) per write, all in one block and
/// persisted once; returns each write's offset and sequence number. The
/// caller checked that the whole batch fits a log block.
pub fn append_batch(
    store: &StoreState,
    lane: &mut Lane,
    writes: &[(&[u8], Option<&[u8]>)],
    new_block: impl FnOnce() -> Result<u32>,
) -> Result<Vec<(u64, u64)>> {
    let size = batch_bytes(writes);
    debug_assert!(size <= store.space.log_payload_bytes());
    make_room(store, lane, size, new_block)?;
    let start = PmemOffset(lane.block_start + lane.used_bytes);
    lane.used_bytes += record::BATCH_HEADER_BYTES;
    store.appended_bytes.add(record::BATCH_HEADER_BYTES as i64);
    let seq = store.seq.fetch_add(1, Ordering::Relaxed);
    let region = store.region();
    record::write_batch_header(region, start, lane.generation, seq, writes.len() as u64);
    let placed = writes
        .iter()
        .map(|&(key, value)| {
            let (at, seq) = place_record(store, lane, key, value, None);
            (at.0, seq)
        })
        .collect();
    region.persist(start, size);
    Ok(placed)
}

/// Bytes a batch of these writes occupies in a block, header included.
pub fn batch_bytes(writes: &[(&[u8], Option<&[u8]>)]) -> u64 {
    record::BATCH_HEADER_BYTES
        + writes
            .iter()
            .map(|(key, value)| record::encoded_bytes(key.len(), value.map_or(0, <[u8]>::len)))
            .sum::<u64>()
}

/// Moves the lane to a fresh block unless `size` more bytes fit its own.
fn make_room(
    store: &StoreState,
    lane: &mut Lane,
    size: u64,
    new_block: impl FnOnce() -> Result<u32>,
) -> Result<()> {
    if lane.block.is_none() || lane.used_bytes + size > store.space.block_bytes {
        leave_tail(store, lane);
        seal(store, lane);
        let id = new_block()?;
        lane.generation = store.space.start_log_block(id);
        lane.block = Some(id);
        lane.block_start = store.space.block_offset(id).0;
        lane.used_bytes = BLOCK_HEADER_BYTES;
        // The header is part of what the next tail sync writes back.
        lane.synced_to = lane.block_start;
    }
    Ok(())
}

/// Writes a record (or tombstone) at the lane's next free byte, which
/// `make_room` made sure of; not persisted (the caller persists what it
/// placed at once). Counts a record's bytes live, never a tombstone's.
fn place_record(
    store: &StoreState,
    lane: &mut Lane,
    key: &[u8],
    value: Option<&[u8]>,
    seq: Option<u64>,
) -> (PmemOffset, u64) {
    let size = record::encoded_bytes(key.len(), value.map_or(0, <[u8]>::len));
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
    match value {
        Some(_) => store.space.add_live(block, size),
        None => store.space.note_tombstone(block),
    }
    store.appended_bytes.add(size as i64);
    let seq = seq.unwrap_or_else(|| store.seq.fetch_add(1, Ordering::Relaxed));
    let region = store.region();
    match value {
        Some(value) => record::write(region, at, lane.generation, seq, key, value),
        None => record::write_tombstone(region, at, lane.generation, seq, key),
    };
    (at, seq)
}

/// Appends a record too large for a log block to an extent of its own and
/// persists it; returns its offset and sequence number.
/// `tail`: an application write, which the next tail sync must cover
/// (compaction's copies are left to the retirement rounds).
pub fn append_extent(
    store: &StoreState,
    key: &[u8],
    value: &[u8],
    seq: Option<u64>,
    tail: bool,
) -> Result<(u64, u64)> {
    append_extent_record(store, key, Some(value), seq, tail)
}

/// [`append_extent`] of a value of `value_len` bytes that `write` writes
/// piece by piece (`write::put_written`).
pub fn append_extent_written(
    store: &StoreState,
    key: &[u8],
    value_len: usize,
    write: impl FnOnce(&mut record::ValueWriter<'_>),
) -> Result<(u64, u64)> {
    append_extent_with(
        store,
        key,
        Some(value_len),
        None,
        true,
        |region, at, generation, seq| {
            let mut writer = record::ValueWriter::in_record(region, at, key.len(), value_len);
            write(&mut writer);
            writer.into_record(at, generation, seq, key, value_len);
        },
    )
}

/// A record (`value`), or a tombstone (None), in an extent of its own.
fn append_extent_record(
    store: &StoreState,
    key: &[u8],
    value: Option<&[u8]>,
    seq: Option<u64>,
    tail: bool,
) -> Result<(u64, u64)> {
    append_extent_with(
        store,
        key,
        value.map(<[u8]>::len),
        seq,
        tail,
        |region, at, generation, seq| {
            match value {
                Some(value) => record::write(region, at, generation, seq, key, value),
                None => record::write_tombstone(region, at, generation, seq, key),
            };
        },
    )
}

/// An extent of its own for a record with a value of `value_len` bytes
/// (None: a tombstone), which `write` writes (not persisted) given the
/// region, its offset, the extent's generation and the record's sequence
/// number; persisted here. A tombstone's extent is dead from the start:
/// freed (two rounds later, under lazy retirement) like any extent whose
/// record was retired.
fn append_extent_with(
    store: &StoreState,
    key: &[u8],
    value_len: Option<usize>,
    seq: Option<u64>,
    tail: bool,
    write: impl FnOnce(&Region, PmemOffset, u32, u64),
) -> Result<(u64, u64)> {
    let size = record::encoded_bytes(key.len(), value_len.unwrap_or(0));
    let blocks = (BLOCK_HEADER_BYTES + size).div_ceil(store.space.block_bytes) as u32;
    let head = store.space.take_run(blocks)?;
    let generation = store.space.start_extent(head, blocks);
    let at = store.space.block_offset(head).add(BLOCK_HEADER_BYTES);
    match value_len {
        Some(_) => store.space.add_live(head, size),
        None => store.space.note_tombstone(head),
    }
    store.appended_bytes.add(size as i64);
    let seq = seq.unwrap_or_else(|| store.seq.fetch_add(1, Ordering::Relaxed));
    let region = store.region();
    write(region, at, generation, seq);
    region.persist(at, size);
    if tail && store.space.retirement.is_some() {
        let start = store.space.block_offset(head).0;
        store.tail.lock().push((start, at.0 + size));
    }
    if value_len.is_none() {
        store.space.free_if_dead(head);
    }
    Ok((at.0, seq))
}

/// Under lazy retirement, hands what an application lane wrote into its
/// block since the last tail sync to the next one, before the lane moves
/// to another block.
fn leave_tail(store: &StoreState, lane: &Lane) {
    if lane.compaction || store.space.retirement.is_none() || lane.block.is_none() {
        return;
    }
    let end = lane.block_start + lane.used_bytes;
    if end > lane.synced_to {
        store.tail.lock().push((lane.synced_to, end));
    }
}

/// Makes every write stored so far durable: under lazy retirement the
/// log's tail ([`sync_tail`]), otherwise the whole file. What
/// `Store::sync`, the group commit of `SyncPolicy::Always` and the
/// periodic syncer call.
pub fn sync_written(store: &StoreState) -> Result<()> {
    if store.space.retirement.is_some() {
        store.syncer.syncs.fetch_add(1, Ordering::Relaxed);
        return sync_tail(store);
    }
    store.syncer.sync_now(store.region())
}

/// Under lazy retirement, makes durable everything appended through the
/// application lanes (and their extents) since the last call: the ranges
/// lanes left behind and the words updated in place outside them, then
/// each lane's current block up to where it is.
/// One device flush for all the disjoint ranges (`Region::sync_ranges`);
/// the retirement rounds sync the rest.
pub fn sync_tail(store: &StoreState) -> Result<()> {
    let _one_at_a_time = store.tail_sync.lock();
    let mut ranges = std::mem::take(&mut *store.tail.lock());
    for lane in store.lanes.iter() {
        let mut lane = lane.lock();
        if lane.block.is_some() {
            let end = lane.block_start + lane.used_bytes;
            if end > lane.synced_to {
                ranges.push((lane.synced_to, end));
                lane.synced_to = end;
            }
        }
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            // Ranges that share a page are one msync.
            Some(last) if start <= last.1.next_multiple_of(4096) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let ranges: Vec<(PmemOffset, u64)> = merged
        .iter()
        .map(|&(start, end)| (PmemOffset(start), end - start))
        .collect();
    if let Err(error) = store.region().sync_ranges(&ranges) {
        // Not lost: the next sync tries these again.
        store.tail.lock().extend_from_slice(&merged);
        return Err(error.into());
    }
    Ok(())
}

/// Hands the lane's block over to compaction (or frees it if all dead).
pub fn seal(store: &StoreState, lane: &mut Lane) {
    if let Some(id) = lane.block.take() {
        store.space.meta(id).set_state(state::SEALED);
        store.space.free_if_dead(id);
    }
}

/// Marks a record deleted (durably; under lazy retirement, queued for
/// its bit) and gives its bytes back; frees its block once nothing in it
/// is live. Idempotent when retiring in place; under lazy retirement
/// called once per record (each caller retires what it just unindexed).
pub fn retire(store: &StoreState, offset: u64) {
    let region = store.region();
    let at = PmemOffset(offset);
    if let Some(retirement) = &store.space.retirement {
        retirement.queue(offset);
    } else {
        let previous = record::set_flags(region, at, record::DELETED);
        if previous & record::DELETED != 0 {
            return;
        }
    }
    let size = record::read_header(region, at).encoded_bytes();
    let block = store.space.block_of(offset);
    if store.space.sub_live(block, size) {
        store.space.free_if_dead(block);
    }
}
