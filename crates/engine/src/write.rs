//! The write path: append a record, publish it in the index, retire the old.
//!
//! A put (Viper 4.2, with the changes described in the crate docs):
//!
//! 1. take a lane, reserve space in its block (a new block when full),
//!    count the record as live, take a sequence number;
//! 2. write the record and persist it once (its checksums make it
//!    self-validating, so no second "commit" store is needed);
//! 3. release the lane; take the key's index shard lock; if a record with a
//!    larger sequence number was published meanwhile, ours is superseded and
//!    retired; otherwise point the index at ours and retire the old record,
//!    durably, before the lock is released;
//! 4. sync per policy and return.
//!
//! Retiring under the shard lock is what makes deletes safe: once a new
//! version is visible, the old one is durably dead, so deleting the new one
//! can never let the old one come back after a crash.

use std::sync::atomic::Ordering;

use engram_pmem::{PmemOffset, Region};

use crate::block::{state, BLOCK_HEADER_BYTES};
use crate::compaction;
use crate::index::{entry_hash, hash_key, shard_of, Entry};
use crate::lanes::Lane;
use crate::record::{self, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::store::Inner;
use crate::{Error, Result};

/// How many blocks a writer compacts itself, when the file is at its space
/// budget and no block is free, before it grows the file anyway.
const MAX_ASSISTS_PER_BLOCK: usize = 4;

/// Which lane an append uses.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    Application,
    Compaction,
}

impl Inner {
    pub fn region(&self) -> &Region {
        &self.space.region
    }

    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_sizes(key, value)?;
        let hash = hash_key(key);
        // Pinned from append to publish: an index image waits for every
        // write in flight to be published (`image_writer.rs`).
        let guard = crossbeam_epoch::pin();
        let (offset, seq) = self.append(key, value, None, Writer::Application)?;
        let is_new = self.publish(hash, key, offset, seq);
        drop(guard);
        self.syncer.after_write(self.region())?;
        Ok(is_new)
    }

    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let hash = hash_key(key);
        let region = self.region();
        let mut table = self.index.shard(hash).write();
        let Ok(occupied) = table.find_entry(hash, |e| {
            e.hash == hash && record::has_key(region, PmemOffset(e.offset), key)
        }) else {
            return Ok(false);
        };
        let (entry, _) = occupied.remove();
        self.keys.add(shard_of(hash), -1);
        self.retire(entry.offset);
        drop(table);
        self.syncer.after_write(region)?;
        Ok(true)
    }

    pub fn lookup(&self, key: &[u8]) -> Option<PmemOffset> {
        let region = self.region();
        self.index
            .get(hash_key(key), |offset| {
                record::has_key(region, PmemOffset(offset), key)
            })
            .map(PmemOffset)
    }

    /// The header of the indexed record at `at`, refused when the record
    /// lies on a page the integrity layer could not rebuild, or when its
    /// lengths run past the file (a damaged header: never read garbage).
    pub fn checked_header(&self, at: PmemOffset) -> Result<record::Header> {
        let integrity = self.space.integrity.as_ref();
        if integrity.is_some_and(|i| i.overlaps_unrepairable(at.0, record::HEADER_BYTES)) {
            return Err(Error::Unrepairable { offset: at.0 });
        }
        let header = record::read_header(self.region(), at);
        if !self.region().contains(at, header.encoded_bytes()) {
            return Err(Error::CorruptRecord {
                offset: at.0,
                what: "record lengths run past the end of the file",
            });
        }
        if integrity.is_some_and(|i| i.overlaps_unrepairable(at.0, header.encoded_bytes())) {
            return Err(Error::Unrepairable { offset: at.0 });
        }
        Ok(header)
    }

    /// Records (by offset, with their keys where the header is intact)
    /// that overlap any of the pages at `page_offsets`.
    pub fn records_on_pages(&self, page_offsets: &[u64]) -> Vec<crate::AffectedKey> {
        const PAGE: u64 = engram_integrity::layout::PAGE_BYTES;
        if page_offsets.is_empty() {
            return Vec::new();
        }
        let region = self.region();
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
            let (next, offsets) = self.index.scan(cursor, 4096);
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
                    affected.push(crate::AffectedKey { offset, key });
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        affected
    }

    /// A value failed its checksum: fine if an in-place update raced with the
    /// read (the flag is set before the first such update), else corruption.
    pub fn checked_after_mismatch(&self, at: PmemOffset) -> Result<()> {
        if record::read_header(self.region(), at).is_in_place() {
            Ok(())
        } else {
            Err(Error::CorruptRecord {
                offset: at.0,
                what: "value checksum mismatch",
            })
        }
    }

    /// Applies `update` to the aligned word at `field_offset` of `key`'s
    /// value, in place, under the shard's read lock (compaction, which moves
    /// records, takes the write lock), and persists it.
    pub fn update_word<R>(
        &self,
        key: &[u8],
        field_offset: u64,
        update: impl FnOnce(&Region, PmemOffset) -> R,
    ) -> Result<R> {
        let hash = hash_key(key);
        let region = self.region();
        let table = self.index.shard(hash).read();
        let entry = table
            .find(hash, |e| {
                e.hash == hash && record::has_key(region, PmemOffset(e.offset), key)
            })
            .ok_or(Error::KeyNotFound)?;
        let at = PmemOffset(entry.offset);
        let header = record::read_header(region, at);
        let value_len = header.value_len as u64;
        if field_offset % 8 != 0
            || field_offset
                .checked_add(8)
                .is_none_or(|end| end > value_len)
        {
            return Err(Error::FieldOutOfRange {
                field_offset,
                value_len,
            });
        }
        if !header.is_in_place() {
            // Durable before the value changes: recovery must know the value
            // checksum no longer applies.
            record::set_flags(region, at, record::IN_PLACE);
        }
        let word = at.add(header.value_offset() + field_offset);
        let result = update(region, word);
        region.persist(word, 8);
        drop(table);
        self.syncer.after_write(region)?;
        Ok(result)
    }

    /// Appends a record and persists it; returns its offset and sequence
    /// number. `seq` is given when compaction moves a record.
    pub fn append(
        &self,
        key: &[u8],
        value: &[u8],
        seq: Option<u64>,
        writer: Writer,
    ) -> Result<(u64, u64)> {
        let size = record::encoded_bytes(key.len(), value.len());
        if size > self.space.log_payload_bytes() {
            return self.append_extent(key, value, size, seq);
        }
        let mut lane = match writer {
            Writer::Application => self.lanes.acquire(),
            Writer::Compaction => self.compaction_lane.lock(),
        };
        if lane.block.is_none() || lane.used_bytes + size > self.space.block_bytes {
            self.seal(&mut lane);
            let id = match writer {
                Writer::Application => self.allocate_block()?,
                Writer::Compaction => self.space.take_free_or_grow()?,
            };
            lane.generation = self.space.start_log_block(id);
            lane.block = Some(id);
            lane.block_start = self.space.block_offset(id).0;
            lane.used_bytes = BLOCK_HEADER_BYTES;
        }
        let block = lane.block.expect("lane has a block");
        let at = PmemOffset(lane.block_start + lane.used_bytes);
        lane.used_bytes += size;
        self.space.add_live(block, size);
        let seq = seq.unwrap_or_else(|| self.seq.fetch_add(1, Ordering::Relaxed));
        let region = self.region();
        record::write(region, at, lane.generation, seq, key, value);
        if !self.options.faults.skip_record_persist {
            region.persist(at, size);
        }
        Ok((at.0, seq))
    }

    fn append_extent(
        &self,
        key: &[u8],
        value: &[u8],
        size: u64,
        seq: Option<u64>,
    ) -> Result<(u64, u64)> {
        let blocks = (BLOCK_HEADER_BYTES + size).div_ceil(self.space.block_bytes) as u32;
        let head = self.space.take_run(blocks)?;
        let generation = self.space.start_extent(head, blocks);
        let at = self.space.block_offset(head).add(BLOCK_HEADER_BYTES);
        self.space.add_live(head, size);
        let seq = seq.unwrap_or_else(|| self.seq.fetch_add(1, Ordering::Relaxed));
        let region = self.region();
        record::write(region, at, generation, seq, key, value);
        region.persist(at, size);
        Ok((at.0, seq))
    }

    /// A block for an application lane. When the file is at its space budget
    /// and nothing is free, the writer compacts a block or two itself before
    /// growing: an overwrite-heavy load then keeps the file bounded instead of
    /// outrunning the background compactor.
    fn allocate_block(&self) -> Result<u32> {
        let budget = self.options.compaction.max_space_amplification;
        for _ in 0..MAX_ASSISTS_PER_BLOCK {
            if let Some(id) = self.space.take_free() {
                return Ok(id);
            }
            if !self.options.compaction.enabled || self.space.may_grow(budget) {
                break;
            }
            if !compaction::compact_one(self) {
                break;
            }
            compaction::flush_epochs();
        }
        self.space.take_free_or_grow()
    }

    /// Hands the lane's block over to compaction (or frees it if all dead).
    pub fn seal(&self, lane: &mut Lane) {
        if let Some(id) = lane.block.take() {
            self.space
                .meta(id)
                .state
                .store(state::SEALED, Ordering::Release);
            self.space.free_if_dead(id);
        }
    }

    /// Makes `offset`'s record the indexed version of `key` unless a newer
    /// one is already there; retires whichever lost. Returns true for a new key.
    pub fn publish(&self, hash: u64, key: &[u8], offset: u64, seq: u64) -> bool {
        let region = self.region();
        let mut table = self.index.shard(hash).write();
        match table.find_entry(hash, |e| {
            e.hash == hash && record::has_key(region, PmemOffset(e.offset), key)
        }) {
            Ok(mut occupied) => {
                let old = occupied.get().offset;
                if record::read_header(region, PmemOffset(old)).seq > seq {
                    self.retire(offset);
                } else {
                    occupied.get_mut().offset = offset;
                    self.retire(old);
                }
                false
            }
            Err(absent) => {
                absent
                    .into_table()
                    .insert_unique(hash, Entry { hash, offset }, entry_hash);
                self.keys.add(shard_of(hash), 1);
                true
            }
        }
    }

    /// Marks a record deleted (durably) and gives its bytes back; frees its
    /// block once nothing in it is live. Idempotent.
    pub fn retire(&self, offset: u64) {
        let region = self.region();
        let at = PmemOffset(offset);
        let previous = record::set_flags(region, at, record::DELETED);
        if previous & record::DELETED != 0 {
            return;
        }
        let size = record::read_header(region, at).encoded_bytes();
        let block = self.space.block_of(offset);
        if self.space.sub_live(block, size) {
            self.space.free_if_dead(block);
        }
    }
}

pub fn check_sizes(key: &[u8], value: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_BYTES,
        });
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_BYTES,
        });
    }
    Ok(())
}

#[cfg(not(target_endian = "little"))]
compile_error!(
    "in-place counters are defined as little-endian words; big-endian targets are not supported"
);
