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
//!
//! Under lazy retirement (`retirement.rs`, emulated memory) the old record
//! is only queued for its bit: it loses to the new one by sequence number
//! until then; a delete appends a tombstone, which outranks every older
//! version the same way; and an in-place update appends a new version
//! ([`update_word`]) while writes are ordered against power loss. So an
//! acknowledged write dirties only the log.

use std::sync::atomic::Ordering;

use engram_pmem::{PmemOffset, Region};

use crate::append;
use crate::compaction;
use crate::index::{hash_key, Entry, WARM_AHEAD};
use crate::read;
use crate::record::{self, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::store_state::StoreState;
use crate::{Error, Result};

/// Inserts or replaces; true when the key is new. Durable in the
/// configured mode on return. `access` gives the key's access field from
/// its old one (None: a new key); it runs under the shard's write lock.
pub fn put(
    store: &StoreState,
    key: &[u8],
    value: &[u8],
    access: impl FnOnce(Option<u32>) -> u32,
) -> Result<bool> {
    check_sizes(key, value)?;
    put_appended(store, key, access, || append(store, key, value, None))
}

/// The rest of a put once `append_record` can append its record: publish
/// it, retire the old, sync per policy.
fn put_appended(
    store: &StoreState,
    key: &[u8],
    access: impl FnOnce(Option<u32>) -> u32,
    append_record: impl FnOnce() -> Result<(u64, u64)>,
) -> Result<bool> {
    let hash = hash_key(key);
    // Pinned from append to publish: an index image waits for every
    // write in flight to be published (`image_writer.rs`).
    let guard = crossbeam_epoch::pin();
    let (offset, seq) = append_record()?;
    let is_new = publish(store, hash, key, offset, seq, None, access)
        .expect("an unconditional publish always takes place");
    drop(guard);
    store
        .syncer
        .after_write(store.region(), || append::sync_written(store))?;
    Ok(is_new)
}

/// [`put`] of a value of `value_len` bytes that `write` writes piece by
/// piece, which the caller need not build: a large value goes to its
/// extent as it is written (the checkpointer's list pieces: elements
/// borrowed from the operation log, and runs of the old pieces read from
/// the store itself). A value that
/// fits a log block is gathered first and put as usual. `write` must write
/// exactly `value_len` bytes (else a panic: the caller's bug).
pub fn put_written(
    store: &StoreState,
    key: &[u8],
    value_len: usize,
    write: impl FnOnce(&mut record::ValueWriter<'_>),
) -> Result<bool> {
    if value_len > MAX_VALUE_BYTES {
        return Err(Error::ValueTooLarge {
            len: value_len,
            max: MAX_VALUE_BYTES,
        });
    }
    if record::encoded_bytes(key.len(), value_len) <= store.space.log_payload_bytes() {
        let mut writer = record::ValueWriter::in_memory(value_len);
        write(&mut writer);
        assert_eq!(
            writer.left(),
            0,
            "a value written short of its declared length"
        );
        return put(store, key, &writer.into_bytes(), |old| old.unwrap_or(0));
    }
    check_sizes(key, &[])?;
    put_appended(
        store,
        key,
        |old| old.unwrap_or(0),
        || append::append_extent_written(store, key, value_len, write),
    )
}

/// Finds `key`'s entry in its shard's table: the hash, then the key's
/// bytes in the record the entry points at.
fn is_key<'a>(region: &'a Region, hash: u64, key: &'a [u8]) -> impl Fn(&Entry) -> bool + 'a {
    move |e| e.hash == hash && record::has_key(region, PmemOffset(e.offset()), key)
}

/// Removes `key`; true when it existed. Durable on return.
pub fn delete(store: &StoreState, key: &[u8]) -> Result<bool> {
    if store.space.retirement.is_some() {
        return delete_by_tombstone(store, key);
    }
    let hash = hash_key(key);
    let region = store.region();
    let mut table = store.index.shard(hash).write();
    let Ok(occupied) = table.find_entry(hash, is_key(region, hash, key)) else {
        return Ok(false);
    };
    let entry = occupied.remove();
    store.keys.add(-1);
    append::retire(store, entry.offset());
    drop(table);
    store
        .syncer
        .after_write(region, || append::sync_written(store))?;
    Ok(true)
}

/// Lazy retirement's delete: a tombstone appended (and persisted) first,
/// then the key unindexed and its record queued for retirement. The
/// tombstone's larger sequence number is what keeps the key deleted after
/// a crash until the retired versions' bits are durable.
fn delete_by_tombstone(store: &StoreState, key: &[u8]) -> Result<bool> {
    if key.len() > MAX_KEY_BYTES {
        return Ok(false);
    }
    let hash = hash_key(key);
    let region = store.region();
    // No tombstone for a key that is not there (a delete racing a put of
    // it is ordered after the put by the tombstone's number).
    let indexed = store
        .index
        .shard(hash)
        .read()
        .find(hash, is_key(region, hash, key))
        .is_some();
    if !indexed {
        return Ok(false);
    }
    let guard = crossbeam_epoch::pin();
    let (_, seq) = {
        let mut lane = store.lanes.acquire();
        append::append_tombstone(store, &mut lane, key, || {
            compaction::block_for_writer(store)
        })?
    };
    let existed = unindex_before(store, hash, key, seq);
    drop(guard);
    store
        .syncer
        .after_write(region, || append::sync_written(store))?;
    Ok(existed)
}

/// Writes several keys as one atomic batch (a put for Some, a delete for
/// None): after a crash all of it or none of it is there. Each key's
/// outcome (new key for a put, existed for a delete), or None when the
/// store cannot do it in one record run (without lazy retirement, or a
/// batch larger than a log block): the caller then needs its own
/// atomicity (the keyspace's intents). `access` is `put_with_access`'s.
pub fn write_batch(
    store: &StoreState,
    writes: &[(&[u8], Option<&[u8]>)],
    access: impl Fn(Option<u32>) -> u32,
) -> Result<Option<Vec<bool>>> {
    if store.space.retirement.is_none()
        || append::batch_bytes(writes) > store.space.log_payload_bytes()
    {
        return Ok(None);
    }
    for (key, value) in writes {
        check_sizes(key, value.unwrap_or(&[]))?;
    }
    // Pinned from append to publish, as `put` is.
    let guard = crossbeam_epoch::pin();
    let placed = {
        let mut lane = store.lanes.acquire();
        append::append_batch(store, &mut lane, writes, || {
            compaction::block_for_writer(store)
        })?
    };
    let hashes: Vec<u64> = writes.iter().map(|(key, _)| hash_key(key)).collect();
    let outcomes = writes
        .iter()
        .zip(placed)
        .enumerate()
        .map(|(at, (&(key, value), (offset, seq)))| {
            warm_ahead(store, &hashes, at);
            let hash = hashes[at];
            match value {
                Some(_) => publish(store, hash, key, offset, seq, None, &access)
                    .expect("an unconditional publish always takes place"),
                None => unindex_before(store, hash, key, seq),
            }
        })
        .collect();
    drop(guard);
    store
        .syncer
        .after_write(store.region(), || append::sync_written(store))?;
    Ok(Some(outcomes))
}

/// Before a batch publishes its write `at`: the index lines and records
/// of the writes a few places ahead start loading, each publish's misses
/// (its shard's lock, its bucket, the record whose key it compares)
/// overlapping the work of those before it. On a replicated node's apply
/// thread, whose batches are hundreds of random keys, these misses were
/// half of the apply's engine time.
fn warm_ahead(store: &StoreState, hashes: &[u64], at: usize) {
    for (ahead, step) in WARM_AHEAD {
        if let Some(&hash) = hashes.get(at + ahead) {
            store.index.prefetch(hash, step, store.region());
        }
    }
}

/// A tombstone at `seq` was written for `key`: unindexes and retires the
/// key's record if it is older. Whether the key existed.
fn unindex_before(store: &StoreState, hash: u64, key: &[u8], seq: u64) -> bool {
    let region = store.region();
    let mut table = store.index.shard(hash).write();
    match table.find_entry(hash, is_key(region, hash, key)) {
        Ok(occupied) => {
            let offset = occupied.get().offset();
            if record::read_header(region, PmemOffset(offset)).seq < seq {
                occupied.remove();
                store.keys.add(-1);
                append::retire(store, offset);
            }
            // A put published after our number was taken outranks the
            // tombstone: the delete came first.
            true
        }
        Err(_) => false,
    }
}

/// What an [`update_word`] caller decides, shown the key's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WordUpdate {
    /// Not a value this caller updates: nothing is changed or touched.
    Decline,
    /// Leave the word as it is (the key's access field is touched).
    Keep,
    /// Store this word.
    Set(u64),
}

/// Reads `key`'s value and changes one aligned word of it, with one index
/// lookup: `decide` sees the whole value (its word at `field_offset`
/// included) and says what to do; the key's access field becomes
/// `touch(old)` unless it declines. Returns the word found, or None when
/// the key is absent or `decide` declined. A read followed by a
/// compare-and-swap looked the key up twice (and copied the value out): a
/// third of INCR's server time went to those lookups.
///
/// Atomic per key: concurrent updates of one word never lose one (`decide`
/// runs again on the value another update left).
///
/// In place under the shard's read lock (compaction, which moves records,
/// takes the write lock) with a compare-and-swap loop, persisted. Under
/// lazy retirement ordered against power loss (`everysec`, `always`) a
/// value that fits a log block gets a new version appended instead: a
/// few hundred bytes at the tail cost less than a random page in the next
/// sync. A larger value (a bitmap of megabytes) is still updated in
/// place, where rewriting it would cost its whole size per update: its
/// word's page joins the next tail sync, and the IN_PLACE flag is synced
/// before the first change. Where nothing is ordered against power loss
/// (`process`: a Raft member's store has lazy retirement there too) no
/// sync waits for the page, and every value is updated in place, as
/// without lazy retirement: a new version cost a record, its checksums,
/// and its predecessor's retirement and compaction, on every member.
pub fn update_word(
    store: &StoreState,
    key: &[u8],
    field_offset: u64,
    touch: impl FnOnce(u32) -> u32,
    mut decide: impl FnMut(&[u8]) -> WordUpdate,
) -> Result<Option<u64>> {
    let ordered = ordered_against_power_loss(store);
    let hash = hash_key(key);
    let region = store.region();
    let mut touch = Some(touch);
    loop {
        // Pinned from the read to the publish (by append): an index image
        // waits for writes in flight, and the version read must not be
        // reused.
        let guard = crossbeam_epoch::pin();
        let table = store.index.shard(hash).read();
        let Some(entry) = table.find(hash, is_key(region, hash, key)) else {
            return Ok(None);
        };
        let at = PmemOffset(entry.offset());
        let header = read::checked_header(store, at)?;
        check_field(field_offset, u64::from(header.value_len))?;
        let value = record::value(region, at, &header);
        if !record::value_checksum_ok(region, at, &header) {
            read::checked_after_mismatch(store, at)?;
        }
        let field = field_offset as usize..field_offset as usize + 8;
        if !(ordered
            && record::encoded_bytes(key.len(), header.value_len as usize)
                <= store.space.log_payload_bytes())
        {
            let (found, wrote) = update_in_place(store, entry, at, field, touch, decide)?;
            drop(table);
            drop(guard);
            if wrote {
                store
                    .syncer
                    .after_write(region, || append::sync_written(store))?;
            }
            return Ok(found);
        }
        // By append: the value copied with its word replaced, published
        // only if the version it was made from is still the indexed one;
        // otherwise ours is retired unseen and the update starts again
        // from the new one.
        let found = u64::from_le_bytes(value[field.clone()].try_into().expect("8 bytes"));
        let new = match decide(value) {
            WordUpdate::Decline => return Ok(None),
            WordUpdate::Keep => None,
            WordUpdate::Set(new) => Some(new).filter(|&new| new != found),
        };
        if let Some(touch) = touch.take() {
            entry.touch(touch);
        }
        let Some(new) = new else {
            return Ok(Some(found));
        };
        let mut value = value.to_vec();
        drop(table);
        value[field].copy_from_slice(&new.to_le_bytes());
        let (offset, seq) = append(store, key, &value, None)?;
        if publish(store, hash, key, offset, seq, Some(at.0), |old| {
            old.unwrap_or(0)
        })
        .is_some()
        {
            drop(guard);
            store.in_place_updates.incr();
            store
                .syncer
                .after_write(region, || append::sync_written(store))?;
            return Ok(Some(found));
        }
        append::retire(store, offset);
    }
}

/// [`update_word`] in place, the shard's read lock held by the caller
/// (through `entry`). Returns the word found (None: declined) and whether
/// it stored one (the caller syncs per policy once the lock is released).
fn update_in_place(
    store: &StoreState,
    entry: &Entry,
    at: PmemOffset,
    field: std::ops::Range<usize>,
    mut touch: Option<impl FnOnce(u32) -> u32>,
    mut decide: impl FnMut(&[u8]) -> WordUpdate,
) -> Result<(Option<u64>, bool)> {
    let region = store.region();
    let ordered = ordered_against_power_loss(store);
    let header = record::read_header(region, at);
    let word = at.add(header.value_offset() + field.start as u64);
    let mut first = true;
    loop {
        let found = region.load_u64(word);
        let decided = decide(record::value(region, at, &header));
        if std::mem::take(&mut first) && decided == WordUpdate::Decline {
            return Ok((None, false));
        }
        if let Some(touch) = touch.take() {
            entry.touch(touch);
        }
        let new = match decided {
            // On a second look (another update moved the word), a
            // decline keeps what the first look decided against: nothing.
            WordUpdate::Decline | WordUpdate::Keep => return Ok((Some(found), false)),
            WordUpdate::Set(new) if new == found => return Ok((Some(found), false)),
            WordUpdate::Set(new) => new,
        };
        if !record::read_header(region, at).is_in_place() {
            // Durable before the value changes: recovery must know the
            // value checksum no longer applies.
            record::set_flags(region, at, record::IN_PLACE);
            if ordered {
                // Persisted is not durable on emulated memory: an msync
                // of the word's page could otherwise reach the media
                // before the flag's (another page of an extent).
                region.sync(at, 8)?;
            }
        }
        // Invariant 6: the flag is set (and persisted) before the value changes.
        debug_assert!(record::read_header(region, at).is_in_place());
        if region.compare_exchange_u64(word, found, new).is_err() {
            continue;
        }
        region.persist(word, 8);
        if ordered {
            // Not in a lane's tail: named for the next tail sync (which
            // only ordered stores run: unordered, nothing would take the
            // range off the list).
            store.tail.lock().push((word.0, word.0 + 8));
        }
        store.in_place_updates.incr();
        return Ok((Some(found), true));
    }
}

/// Whether the store runs lazy retirement with its writes ordered
/// against power loss: its syncs cover the log's tail, and what is
/// written elsewhere must be named for them.
fn ordered_against_power_loss(store: &StoreState) -> bool {
    store
        .space
        .retirement
        .as_ref()
        .is_some_and(|retirement| retirement.power_fail_ordering())
}

/// Refuses a field that is not an aligned word inside the value.
fn check_field(field_offset: u64, value_len: u64) -> Result<()> {
    if !field_offset.is_multiple_of(8)
        || field_offset
            .checked_add(8)
            .is_none_or(|end| end > value_len)
    {
        return Err(Error::FieldOutOfRange {
            field_offset,
            value_len,
        });
    }
    Ok(())
}

/// Appends an application write's record (through the thread's lane, or
/// to an extent) and persists it; returns its offset and sequence number.
/// `seq` is for tests that forge an older version; writes take the next.
pub(crate) fn append(
    store: &StoreState,
    key: &[u8],
    value: &[u8],
    seq: Option<u64>,
) -> Result<(u64, u64)> {
    if !append::fits_log_block(store, key, value) {
        return append::append_extent(store, key, value, seq, true);
    }
    let mut lane = store.lanes.acquire();
    append::append_to_lane(store, &mut lane, key, value, seq, || {
        compaction::block_for_writer(store)
    })
}

/// Makes `offset`'s record the indexed version of `key` unless a newer
/// one is already there; retires whichever lost. Returns whether the key
/// is new, or None (nothing changed, nothing retired) when `expected` is
/// given and the indexed record is not at that offset any more.
fn publish(
    store: &StoreState,
    hash: u64,
    key: &[u8],
    offset: u64,
    seq: u64,
    expected: Option<u64>,
    access: impl FnOnce(Option<u32>) -> u32,
) -> Option<bool> {
    let region = store.region();
    // Invariant 2: what the index is about to name is a record recovery
    // would accept.
    verify!(
        record_is_valid(store, offset, key, seq),
        "invariant 2: the record published at {offset:#x} (seq {seq}) does not validate"
    );
    let mut table = store.index.shard(hash).write();
    match table.find_entry(hash, is_key(region, hash, key)) {
        Ok(mut occupied) => {
            let old = occupied.get().offset();
            if expected.is_some_and(|expected| expected != old) {
                return None;
            }
            let old_seq = record::read_header(region, PmemOffset(old)).seq;
            if old_seq > seq {
                append::retire(store, offset);
            } else {
                // Invariant 4: the version made visible outranks the one
                // it replaces (only compaction copies tie, and they are
                // not published here).
                verify!(
                    old_seq < seq,
                    "invariant 4: publishing seq {seq} over seq {old_seq} for the same key"
                );
                let entry = occupied.get_mut();
                entry.set_offset(offset);
                entry.touch(|old| access(Some(old)));
                append::retire(store, old);
                // Invariant 3: retired (durably: retire persists the bit)
                // before the shard lock lets anyone see the new version;
                // under lazy retirement, outranked by seq until its bit is.
                debug_assert!(
                    store.space.retirement.is_some()
                        || record::read_header(region, PmemOffset(old)).is_deleted(),
                    "invariant 3: the replaced record at {old:#x} is not retired"
                );
            }
            Some(false)
        }
        Err(_) if expected.is_some() => None,
        Err(absent) => {
            absent.insert(Entry::new(hash, offset, access(None)));
            store.keys.incr();
            Some(true)
        }
    }
}

/// Whether the record at `offset` validates as recovery would validate it
/// (its block's generation, both checksums) and holds `key` at `seq`.
fn record_is_valid(store: &StoreState, offset: u64, key: &[u8], seq: u64) -> bool {
    let space = &store.space;
    let block = space.block_of(offset);
    let meta = space.meta(block);
    let blocks = u64::from(meta.extent_blocks.load(Ordering::Relaxed).max(1));
    let end = space.block_offset(block).0 + blocks * space.block_bytes;
    let generation = meta.generation.load(Ordering::Relaxed);
    let at = PmemOffset(offset);
    record::parse(store.region(), at, end, generation)
        .is_ok_and(|header| header.seq == seq && record::key(store.region(), at, &header) == key)
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
