//! LMDB (through heed), configured for Engram's default durability: each
//! put, update and delete is its own write transaction, committed before it
//! returns, with `MDB_NOSYNC` and `MDB_NOMETASYNC` (no fsync: the commit is
//! in the OS page cache, so it survives a process crash, not a power
//! failure). Readers open a read transaction per get, which LMDB makes cheap
//! (a reader-table slot, no lock). The map is sized far above the data set
//! (it is sparse), as LMDB's documentation advises.
//!
//! Recovery: LMDB has none to do; the time is that of reopening the
//! environment after it was dropped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};

use super::KvSystem;

const MAP_BYTES: usize = 64 << 30;

pub struct LmdbSystem {
    env: Env,
    db: Database<Bytes, Bytes>,
    dir: PathBuf,
}

impl LmdbSystem {
    pub fn open(dir: &Path) -> Result<LmdbSystem> {
        std::fs::create_dir_all(dir)?;
        let mut options = EnvOpenOptions::new();
        options.map_size(MAP_BYTES).max_dbs(1).max_readers(256);
        // SAFETY: the flags only relax durability (documented above); the
        // environment directory is ours alone for the benchmark's duration.
        unsafe { options.flags(EnvFlags::NO_SYNC | EnvFlags::NO_META_SYNC) };
        // SAFETY: LMDB requires that an environment is opened only once per
        // process; the benchmark opens each directory once at a time.
        let env = unsafe { options.open(dir) }
            .with_context(|| format!("opening lmdb in {}", dir.display()))?;
        let mut wtxn = env.write_txn()?;
        let db = env.create_database(&mut wtxn, None)?;
        wtxn.commit()?;
        Ok(LmdbSystem {
            env,
            db,
            dir: dir.to_path_buf(),
        })
    }
}

impl KvSystem for LmdbSystem {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut wtxn = self.env.write_txn()?;
        self.db.put(&mut wtxn, key, value)?;
        wtxn.commit()?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let rtxn = self.env.read_txn()?;
        Ok(self.db.get(&rtxn, key)?.map(<[u8]>::to_vec))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut wtxn = self.env.write_txn()?;
        self.db.delete(&mut wtxn, key)?;
        wtxn.commit()?;
        Ok(())
    }

    fn crash_and_reopen(self: Box<Self>, _threads: usize) -> Result<(Box<dyn KvSystem>, Duration)> {
        let LmdbSystem { env, dir, .. } = *self;
        let closing = env.prepare_for_closing();
        closing.wait();
        let started = Instant::now();
        let reopened = LmdbSystem::open(&dir)?;
        Ok((Box::new(reopened), started.elapsed()))
    }
}
