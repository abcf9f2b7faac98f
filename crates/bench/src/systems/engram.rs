//! Engram as a user gets it by default: emulated persistent memory (a
//! memory-mapped file) with sync policy `never`, so an acknowledged write
//! survives a process crash at once and a power failure once the kernel has
//! written it back, the same promise the peers are configured to make here.
//! The one setting the benchmark chooses is the flush instruction
//! (`--flush`): `none` by default, `clwb` to pay on emulated memory the
//! cache-line write-backs a DAX run pays.
//!
//! Recovery: `Store::crash` abandons the store as a process crash would
//! (nothing synced, no clean shutdown, background threads stopped), and
//! `Store::open` with `recovery_threads` set, a parallel scan of every block
//! that rebuilds the DRAM index, is timed.

use std::path::Path;

use engram_engine::{FlushInstruction, Options, Store};

use super::KvSystem;
use crate::error::Result;

/// Recovery threads for the first open of an empty store (0: one per core);
/// only the reopens after a crash are timed, with the counts asked for.
pub const RECOVERY_THREADS_AT_FIRST_OPEN: usize = 0;

pub struct EngramSystem {
    store: Store,
}

impl EngramSystem {
    pub fn open(dir: &Path, flush: FlushInstruction, recovery_threads: usize) -> Result<Self> {
        let options = Options {
            flush: Some(flush),
            recovery_threads,
            ..Options::default()
        };
        Ok(EngramSystem {
            store: Store::open(dir, options)?,
        })
    }
}

impl KvSystem for EngramSystem {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.store.put(key, value)?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(key)?)
    }

    fn delete(&self, key: &[u8]) -> Result<bool> {
        Ok(self.store.delete(key)?)
    }

    fn key_count(&self) -> Result<Option<u64>> {
        Ok(Some(self.store.len()))
    }

    fn crash(self: Box<Self>) -> Result<()> {
        self.store.crash();
        Ok(())
    }
}
