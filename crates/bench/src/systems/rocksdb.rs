//! RocksDB, configured as its tuning guide recommends for a small-value,
//! point-lookup workload, at the durability of Engram's default (survives a
//! process crash, not a power failure):
//!
//! - WAL on, `WriteOptions::sync = false` (the default): every write is in
//!   the OS page cache before it returns, no fsync.
//! - `increase_parallelism(cores)` and `optimize_level_style_compaction` with
//!   a 512 MiB memtable budget (the guide's "if in doubt" settings).
//! - Block-based table with a 10 bits/key Bloom filter and an LRU block cache
//!   of 4 GiB, enough to hold the data set: Engram keeps its data in memory
//!   too, so reads are compared from memory on both sides.
//! - LZ4 compression, the guide's default recommendation.
//!
//! Recovery: the database is dropped (RocksDB cannot be crashed in-process)
//! and reopened; the time includes replaying the WAL.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, DB};

use super::KvSystem;

pub struct RocksDbSystem {
    db: DB,
    dir: PathBuf,
}

fn options() -> Options {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as i32;
    let mut options = Options::default();
    options.create_if_missing(true);
    options.increase_parallelism(cores);
    options.optimize_level_style_compaction(512 << 20);
    options.set_compression_type(DBCompressionType::Lz4);
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    table.set_block_cache(&Cache::new_lru_cache(4 << 30));
    options.set_block_based_table_factory(&table);
    options
}

impl RocksDbSystem {
    pub fn open(dir: &Path) -> Result<RocksDbSystem> {
        let db = DB::open(&options(), dir)
            .with_context(|| format!("opening rocksdb in {}", dir.display()))?;
        Ok(RocksDbSystem {
            db,
            dir: dir.to_path_buf(),
        })
    }
}

impl KvSystem for RocksDbSystem {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put(key, value)?)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.db.delete(key)?)
    }

    fn crash_and_reopen(self: Box<Self>, _threads: usize) -> Result<(Box<dyn KvSystem>, Duration)> {
        let RocksDbSystem { db, dir } = *self;
        drop(db);
        let started = Instant::now();
        let reopened = RocksDbSystem::open(&dir)?;
        Ok((Box::new(reopened), started.elapsed()))
    }
}
