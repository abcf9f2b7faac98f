//! RocksDB, configured as its tuning guide ("Setup Options and Basic
//! Tuning") recommends for this workload, at the durability of Engram's
//! default: an acknowledged write survives a process crash, not a power
//! failure.
//!
//! - **WAL on, `sync = false`** (set explicitly in one `WriteOptions`): every
//!   write is in the WAL, in the OS page cache, before it returns; no fsync.
//! - **`increase_parallelism(cores)`**: background flushes and compactions
//!   may use every core, as the guide's first recommendation says.
//! - **`optimize_level_style_compaction(512 MiB)`**: the guide's starting
//!   point for level compaction (128 MiB memtables, L0 compacted early).
//! - **Block-based table, full Bloom filter of 10 bits per key, 4 GiB LRU
//!   block cache**: the guide's point-lookup settings; the cache holds the
//!   whole data set because Engram keeps its data in memory too, so reads
//!   are compared from memory on both sides. Index and filter blocks stay in
//!   the table readers (the default), never evicted.
//! - **`bytes_per_sync = 1 MiB`**: the guide's setting to write SST files
//!   back smoothly rather than in bursts (it does not fsync acknowledged
//!   writes).
//! - **No compression, on every level.** The guide recommends LZ4 to save
//!   space; here it would save none, because the values are random bytes
//!   (`workload::ValuePool`), and would only spend CPU in flushes and
//!   compactions. Engram does not compress either. It must be set per level:
//!   `optimize_level_style_compaction` turns on compression from L2 down.
//! - **One `ReadOptions` and one `WriteOptions`, made once**: the crate's
//!   convenience `get`/`put`/`delete` create (and free) a C options object
//!   on every call, a cost that is the binding's, not RocksDB's.
//!
//! Recovery: the handle is dropped (see `crash`), and the reopen, which
//! replays the WAL into a memtable and flushes it to a table file, is timed.
//! RocksDB has no recovery-thread setting (WAL replay runs on one thread), so
//! its entries for 1 and 2 recovery threads time the same job twice, each on
//! its own copy of the crash image.

use std::path::Path;

use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, Options, ReadOptions, WriteOptions, DB,
};

use super::KvSystem;
use crate::error::Result;

const MEMTABLE_BUDGET_BYTES: usize = 512 << 20;
const BLOCK_CACHE_BYTES: usize = 4 << 30;
const BLOOM_BITS_PER_KEY: f64 = 10.0;
const BYTES_PER_SYNC: u64 = 1 << 20;
/// RocksDB's default number of levels; every one gets `compression: none`.
const LEVELS: usize = 7;

pub struct RocksDbSystem {
    db: DB,
    read: ReadOptions,
    write: WriteOptions,
}

fn options() -> Options {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut options = Options::default();
    options.create_if_missing(true);
    options.increase_parallelism(i32::try_from(cores).unwrap_or(i32::MAX));
    options.optimize_level_style_compaction(MEMTABLE_BUDGET_BYTES);
    options.set_compression_type(DBCompressionType::None);
    options.set_compression_per_level(&[DBCompressionType::None; LEVELS]);
    options.set_bytes_per_sync(BYTES_PER_SYNC);
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
    table.set_block_cache(&Cache::new_lru_cache(BLOCK_CACHE_BYTES));
    options.set_block_based_table_factory(&table);
    options
}

impl RocksDbSystem {
    pub fn open(dir: &Path) -> Result<RocksDbSystem> {
        let mut write = WriteOptions::new();
        write.set_sync(false);
        write.disable_wal(false);
        Ok(RocksDbSystem {
            db: DB::open(&options(), dir)?,
            read: ReadOptions::default(),
            write,
        })
    }
}

impl KvSystem for RocksDbSystem {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put_opt(key, value, &self.write)?)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_opt(key, &self.read)?)
    }

    /// RocksDB's delete is blind: it writes a tombstone without looking the
    /// key up (cheaper than a delete that checks, which Engram's is).
    fn delete(&self, key: &[u8]) -> Result<bool> {
        self.db.delete_opt(key, &self.write)?;
        Ok(true)
    }

    /// RocksDB only estimates its key count; counting exactly means a scan.
    fn key_count(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// RocksDB cannot be crashed in-process (its lock is held until the
    /// handle is dropped), so the handle is dropped: with the WAL on, that
    /// flushes no memtable, and the files are those a killed process would
    /// leave once the OS has its page cache.
    fn crash(self: Box<Self>) -> Result<()> {
        drop(self);
        Ok(())
    }
}
