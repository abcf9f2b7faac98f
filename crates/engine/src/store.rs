//! The public store handle (skeleton: API fixed, bodies being written).
use std::path::Path;
use std::time::Duration;

use crate::{Options, Result};

/// An open store. Cheap to share between threads (`Store: Send + Sync`).
pub struct Store {
    _private: (),
}

/// A value read in place: valid while it lives, and while it lives the space
/// it sits in is not reclaimed. Keep it short-lived.
pub struct ValueRef<'a> {
    bytes: &'a [u8],
}

impl std::ops::Deref for ValueRef<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

/// What the last open found and how long it took.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub records: u64,
    pub blocks_scanned: u64,
    pub threads: usize,
    pub duration: Duration,
    /// Records that lost to a newer version of their key and were retired.
    pub superseded: u64,
    /// Blocks whose scan stopped at a torn or corrupt record.
    pub torn_tails: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub keys: u64,
    pub file_bytes: u64,
    pub live_bytes: u64,
    pub block_bytes: u64,
    pub blocks_total: u64,
    pub blocks_free: u64,
    pub compactions: u64,
    pub records_moved: u64,
    pub syncs: u64,
    pub mode: &'static str,
    pub flush: &'static str,
}

impl Store {
    /// Opens the store in `dir`, creating it if the directory holds none.
    pub fn open(_dir: impl AsRef<Path>, _options: Options) -> Result<Store> {
        todo!()
    }
    /// Inserts or replaces; `Ok(true)` when the key is new.
    pub fn put(&self, _key: &[u8], _value: &[u8]) -> Result<bool> {
        todo!()
    }
    pub fn get(&self, _key: &[u8]) -> Result<Option<Vec<u8>>> {
        todo!()
    }
    pub fn get_ref(&self, _key: &[u8]) -> Result<Option<ValueRef<'_>>> {
        todo!()
    }
    /// `Ok(true)` when the key existed.
    pub fn delete(&self, _key: &[u8]) -> Result<bool> {
        todo!()
    }
    /// Atomically adds `delta` (wrapping) to the little-endian u64 at
    /// `field_offset` of the key's value, in place; returns the new value.
    pub fn incr_by(&self, _key: &[u8], _field_offset: u64, _delta: i64) -> Result<u64> {
        todo!()
    }
    /// Atomically replaces the u64 at `field_offset` with `new` if it equals
    /// `expected`; returns the value found (equal to `expected` on success).
    pub fn compare_and_swap(&self, _key: &[u8], _field_offset: u64, _expected: u64, _new: u64) -> Result<u64> {
        todo!()
    }
    pub fn len(&self) -> u64 {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// One step of a cursor scan: keys from `cursor` on, about `count` of
    /// them, and the cursor to continue from (0 when done). Every key present
    /// for the whole scan is returned at least once.
    pub fn scan(&self, _cursor: u64, _count: usize) -> (u64, Vec<Vec<u8>>) {
        todo!()
    }
    pub fn stats(&self) -> Stats {
        todo!()
    }
    pub fn recovery_report(&self) -> RecoveryReport {
        todo!()
    }
    /// Runs compaction now, until no block qualifies.
    pub fn compact_now(&self) -> Result<u64> {
        todo!()
    }
    /// Makes everything written so far durable against power loss.
    pub fn sync(&self) -> Result<()> {
        todo!()
    }
    /// Lifts or sets the data-file quota at run time (tests of the full-disk path).
    pub fn set_file_limit(&self, _limit_bytes: Option<u64>) {
        todo!()
    }
    /// Clean shutdown: stops background work and syncs.
    pub fn close(self) -> Result<()> {
        todo!()
    }
    /// Abandons the store as a process crash would: background threads are
    /// stopped and nothing is synced or cleaned up. For tests and benchmarks.
    #[doc(hidden)]
    pub fn crash(self) {
        todo!()
    }
}
