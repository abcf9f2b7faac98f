//! The read path: a key's record through the index, refused when the
//! integrity layer could not rebuild its pages or its header is damaged,
//! its value checked against its checksum.
//!
//! Pin an epoch, take the key's shard read lock only to find the offset
//! (fingerprint first, then the key bytes in the region), copy or lend the
//! value, unpin. Readers never wait for writers beyond a shard read lock
//! and never retry.

use engram_pmem::PmemOffset;

use crate::index::hash_key;
use crate::record;
use crate::store_state::StoreState;
use crate::{Error, Result};

/// A value read in place, without copying. While it lives, the space it sits
/// in is not reclaimed, so keep it short-lived. Aligned 8-byte words of the
/// value may still change under it through `incr_by`/`compare_and_swap`.
pub struct ValueRef<'a> {
    bytes: &'a [u8],
    _guard: crossbeam_epoch::Guard,
}

impl std::ops::Deref for ValueRef<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

/// The value of `key`, copied out, its checksum verified; its access
/// field becomes `touch(old)`.
pub fn get(
    store: &StoreState,
    key: &[u8],
    touch: impl FnOnce(u32) -> u32,
) -> Result<Option<Vec<u8>>> {
    let _guard = crossbeam_epoch::pin();
    let Some(at) = lookup_touching(store, key, touch) else {
        return Ok(None);
    };
    let header = checked_header(store, at)?;
    let value = record::value(store.region(), at, &header).to_vec();
    if header.is_in_place() || crc32c::crc32c(&value) == header.crc_value {
        return Ok(Some(value));
    }
    checked_after_mismatch(store, at).map(|()| Some(value))
}

/// The value of `key` in place, its checksum verified; its access field
/// becomes `touch(old)`.
pub fn get_ref<'s>(
    store: &'s StoreState,
    key: &[u8],
    touch: impl FnOnce(u32) -> u32,
) -> Result<Option<ValueRef<'s>>> {
    let guard = crossbeam_epoch::pin();
    let Some(at) = lookup_touching(store, key, touch) else {
        return Ok(None);
    };
    let region = store.region();
    let header = checked_header(store, at)?;
    let bytes = record::value(region, at, &header);
    if !record::value_checksum_ok(region, at, &header) {
        checked_after_mismatch(store, at)?;
    }
    Ok(Some(ValueRef {
        bytes,
        _guard: guard,
    }))
}

/// One step of a cursor scan (see [`crate::Store::scan`]).
pub fn scan(store: &StoreState, cursor: u64, count: usize) -> (u64, Vec<Vec<u8>>) {
    let _guard = crossbeam_epoch::pin();
    let (next, offsets) = store.index.scan(cursor, count);
    let region = store.region();
    // A record whose header no longer matches its checksum (damaged
    // media) cannot name its key: it is left out rather than returned
    // as garbage or read past the file.
    let keys = offsets
        .into_iter()
        .filter_map(|offset| {
            let at = PmemOffset(offset);
            let header = record::read_header(region, at);
            (region.contains(at, header.encoded_bytes())
                && record::header_intact(region, at, &header))
            .then(|| record::key(region, at, &header).to_vec())
        })
        .collect();
    (next, keys)
}

/// Where `key`'s indexed record lies, if it has one; its access field
/// becomes `touch(old)` on the way.
pub fn lookup_touching(
    store: &StoreState,
    key: &[u8],
    touch: impl FnOnce(u32) -> u32,
) -> Option<PmemOffset> {
    let region = store.region();
    store
        .index
        .get_with(
            hash_key(key),
            |offset| record::has_key(region, PmemOffset(offset), key),
            |entry| {
                entry.touch(touch);
                entry.offset()
            },
        )
        .map(PmemOffset)
}

/// `key`'s access field, if it is indexed.
pub fn access(store: &StoreState, key: &[u8]) -> Option<u32> {
    let region = store.region();
    store.index.get_with(
        hash_key(key),
        |offset| record::has_key(region, PmemOffset(offset), key),
        crate::index::Entry::access,
    )
}

/// The keys indexed under `hash` (the index's hash of a key: see
/// `index::hash_key`), each read from its record (a record whose header
/// cannot be trusted is left out, as `sample` does).
pub fn keys_with_hash(store: &StoreState, hash: u64) -> Vec<Vec<u8>> {
    let _guard = crossbeam_epoch::pin();
    let region = store.region();
    store
        .index
        .offsets_with_hash(hash)
        .into_iter()
        .filter_map(|offset| {
            let at = PmemOffset(offset);
            let header = checked_header(store, at).ok()?;
            record::header_intact(region, at, &header)
                .then(|| record::key(region, at, &header).to_vec())
        })
        .collect()
}

/// Up to `count` keys with their access fields, from a random place
/// `start` picks (see `Index::sample`).
pub fn sample(store: &StoreState, start: u64, count: usize) -> Vec<(Vec<u8>, u32)> {
    let _guard = crossbeam_epoch::pin();
    let region = store.region();
    store
        .index
        .sample(start, count, crate::index::SHARD_COUNT)
        .into_iter()
        .filter_map(|(offset, access)| {
            let at = PmemOffset(offset);
            let header = record::read_header(region, at);
            (region.contains(at, header.encoded_bytes())
                && record::header_intact(region, at, &header))
            .then(|| (record::key(region, at, &header).to_vec(), access))
        })
        .collect()
}

/// The header of the indexed record at `at`, refused when the record
/// lies on a page the integrity layer could not rebuild, or when its
/// lengths run past the file (a damaged header: never read garbage).
pub fn checked_header(store: &StoreState, at: PmemOffset) -> Result<record::Header> {
    let integrity = store.space.integrity.as_ref();
    if integrity.is_some_and(|i| i.overlaps_unrepairable(at.0, record::HEADER_BYTES)) {
        return Err(Error::Unrepairable { offset: at.0 });
    }
    let header = record::read_header(store.region(), at);
    if !store.region().contains(at, header.encoded_bytes()) {
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

/// A value failed its checksum: fine if an in-place update raced with the
/// read (the flag is set before the first such update), else corruption.
pub(crate) fn checked_after_mismatch(store: &StoreState, at: PmemOffset) -> Result<()> {
    if record::read_header(store.region(), at).is_in_place() {
        Ok(())
    } else {
        Err(Error::CorruptRecord {
            offset: at.0,
            what: "value checksum mismatch",
        })
    }
}
