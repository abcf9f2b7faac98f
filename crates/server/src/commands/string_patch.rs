//! Partial writes of string values: the bit commands (SETBIT, BITFIELD)
//! and PFCOUNT's cache update describe a change as a [`Patch`], and
//! [`write_patch`] is the one place that stores it.
//!
//! Today `write_patch` rewrites the whole value, as SETRANGE does. An
//! engine path that updates a record's bytes in place would replace only
//! its body; the commands that produce patches stay as they are.

use super::strings::check_len;
use super::CmdError;
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
/// is absent and the patch creates it). Keeps the key's expiry.
pub fn write_patch(
    txn: &mut Txn,
    db: usize,
    key: &[u8],
    old: Option<&Stored>,
    patch: &Patch,
) -> Result<(), CmdError> {
    debug_assert!(patch.offset + patch.bytes.len() <= patch.min_len);
    let (mut text, expire_at) = match old {
        Some(stored) => (stored.string().to_bytes(), stored.meta.expire_at()),
        None => (Vec::new(), None),
    };
    check_len(patch.min_len.max(text.len()))?;
    if text.len() < patch.min_len {
        text.resize(patch.min_len, 0);
    }
    text[patch.offset..patch.offset + patch.bytes.len()].copy_from_slice(&patch.bytes);
    txn.put_string(db, key, &text, expire_at)?;
    Ok(())
}
