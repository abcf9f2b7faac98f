//! LMDB (through heed), configured as its documentation recommends, at the
//! durability of Engram's default: an acknowledged write survives a process
//! crash, not a power failure.
//!
//! - **One write transaction per put, update and delete, committed before
//!   the call returns**: the only way an LMDB write becomes visible and
//!   durable; batching several writes per commit would measure a different
//!   contract from the other systems'.
//! - **`MDB_NOSYNC` and `MDB_NOMETASYNC`**: a commit writes the pages into
//!   the OS page cache (so it survives a process crash) without fsync. The
//!   default `write()`-based commits are kept (no `MDB_WRITEMAP`, which the
//!   docs warn lets stray pointer writes corrupt the database).
//! - **A 64 GiB map**: LMDB's docs ask for a map size well above the data,
//!   and the map is sparse, so the size costs only address space.
//! - **One read transaction per get**, as an application serving independent
//!   requests would: in LMDB that claims a reader-table slot kept per thread,
//!   no lock, no syscall. The reader table has room for every benchmark
//!   thread.
//!
//! Recovery: LMDB has nothing to replay (a commit is a new root page), so the
//! time is that of opening the environment a closed one left.

// heed marks opening an environment and setting unsafe flags as `unsafe fn`;
// the two blocks below say why each call is sound.
#![allow(unsafe_code)]

use std::path::Path;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};

use super::KvSystem;
use crate::error::{BenchError, Result};

const MAP_BYTES: usize = 64 << 30;
/// LMDB's default reader-table size, kept unless there are more threads.
const DEFAULT_READERS: u32 = 126;
/// Reader slots beyond one per benchmark thread (the thread that counts keys
/// after a phase).
const SPARE_READERS: u32 = 2;

pub struct LmdbSystem {
    env: Env,
    db: Database<Bytes, Bytes>,
}

impl LmdbSystem {
    pub fn open(dir: &Path, threads: usize) -> Result<LmdbSystem> {
        std::fs::create_dir_all(dir)
            .map_err(|e| BenchError::io("creating lmdb directory", dir, e))?;
        let readers = u32::try_from(threads)
            .unwrap_or(u32::MAX)
            .saturating_add(SPARE_READERS)
            .max(DEFAULT_READERS);
        let mut options = EnvOpenOptions::new();
        options.map_size(MAP_BYTES).max_dbs(1).max_readers(readers);
        // heed calls NO_SYNC and NO_META_SYNC unsafe because a system crash
        // may then lose or (on a file system that reorders writes) damage the
        // last commits. The benchmark simulates process crashes only, and the
        // data is thrown away after the run.
        // SAFETY: the durability given up is exactly what every system here gives up.
        unsafe {
            options.flags(EnvFlags::NO_SYNC | EnvFlags::NO_META_SYNC);
        }
        // Opening maps the file, which is undefined behaviour only if the file
        // is modified behind LMDB's back. The directory is created for this
        // run and used by nothing else, and an environment is always closed
        // (`prepare_for_closing().wait()`) before it is opened again.
        // SAFETY: nothing else touches this environment's files while it is open.
        let env = unsafe { options.open(dir)? };
        let mut transaction = env.write_txn()?;
        let db = env.create_database(&mut transaction, None)?;
        transaction.commit()?;
        Ok(LmdbSystem { env, db })
    }
}

impl KvSystem for LmdbSystem {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut transaction = self.env.write_txn()?;
        self.db.put(&mut transaction, key, value)?;
        transaction.commit()?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let transaction = self.env.read_txn()?;
        Ok(self.db.get(&transaction, key)?.map(<[u8]>::to_vec))
    }

    fn delete(&self, key: &[u8]) -> Result<bool> {
        let mut transaction = self.env.write_txn()?;
        let existed = self.db.delete(&mut transaction, key)?;
        transaction.commit()?;
        Ok(existed)
    }

    fn key_count(&self) -> Result<Option<u64>> {
        let transaction = self.env.read_txn()?;
        Ok(Some(self.db.len(&transaction)?))
    }

    /// LMDB cannot be crashed in-process more faithfully than by closing
    /// it; with `MDB_NOSYNC`, closing syncs nothing, so the files are those
    /// a killed process would leave.
    fn crash(self: Box<Self>) -> Result<()> {
        self.env.prepare_for_closing().wait();
        Ok(())
    }
}
