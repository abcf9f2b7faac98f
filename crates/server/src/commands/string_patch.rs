//! Partial writes of string values: the bit commands (SETBIT, BITFIELD)
//! and PFCOUNT's cache update describe a change as a [`Patch`], and
//! [`write_patch`] is the one place that stores it.
//!
//! A patch inside the value that fits one aligned 8-byte word (SETBIT, a
//! BITFIELD field of a few bits, a HyperLogLog register) is stored in
//! place, one atomic store (`Txn::patch_in_place`): O(1) persistent bytes
//! however long the value. Anything else (growth, a wider patch, inside
//! MULTI) rewrites the whole value, as SETRANGE does.

use super::strings::check_len;
use super::CmdError;
use crate::keyspace::value::{Encoding, Kind, Meta, StringValue, META_BYTES};
use crate::keyspace::{Stored, Txn};

/// A change to a string value: it grows to at least `min_len` bytes (the
/// new bytes zero), then `bytes` replace the bytes from `offset` on.
/// `offset + bytes.len() <= min_len`.
#[derive(Debug, PartialEq, Eq)]
pub struct Patch {
    pub offset: usize,
    pub bytes: Vec<u8>,
    pub min_len: usize,
}

impl Patch {
    /// Whether applying the patch to `current` (a live value's bytes)
    /// would leave them unchanged.
    pub fn is_noop(&self, current: &[u8]) -> bool {
        self.min_len <= current.len()
            && current[self.offset..self.offset + self.bytes.len()] == self.bytes[..]
    }
}

/// Stores `patch` on `key`, whose value before it is `old` (None: the key
/// is absent and the patch creates it). Keeps the key's expiry. The result
/// is stored raw even when its bytes spell an integer, as Redis leaves a
/// string SETBIT touched, so later patches always find the bytes
/// themselves in the payload.
pub fn write_patch(
    txn: &mut Txn,
    db: usize,
    key: &[u8],
    old: Option<&Stored>,
    patch: &Patch,
) -> Result<(), CmdError> {
    debug_assert!(patch.offset + patch.bytes.len() <= patch.min_len);
    let old_len = old.map_or(0, |stored| stored.string().len());
    if old.is_some() && patch.min_len <= old_len {
        // Inside the value and one aligned word: stored in place.
        let len = patch.bytes.len();
        // `old` was live when read under this lock: no expiry check (0).
        let stored_in_place = txn.patch_in_place(db, key, 0, patch.offset, len, |_| {
            ((), Some(patch.bytes.clone()))
        })?;
        if stored_in_place.is_some() {
            return Ok(());
        }
    }
    let expire_at = old.and_then(|stored| stored.meta.expire_at());
    let len = patch.min_len.max(old_len);
    check_len(len)?;
    // One buffer: meta word, then the text, then the patch over it.
    let mut value = Vec::with_capacity(META_BYTES + len);
    value.extend_from_slice(
        &Meta::new(Kind::String, Encoding::Raw, expire_at)
            .0
            .to_le_bytes(),
    );
    match old.map(Stored::string) {
        Some(StringValue::Raw(bytes)) => value.extend_from_slice(bytes),
        Some(StringValue::Int(n)) => {
            value.extend_from_slice(itoa::Buffer::new().format(n).as_bytes())
        }
        None => {}
    }
    value.resize(META_BYTES + len, 0);
    let at = META_BYTES + patch.offset;
    value[at..at + patch.bytes.len()].copy_from_slice(&patch.bytes);
    txn.put(db, key, &value)?;
    Ok(())
}
