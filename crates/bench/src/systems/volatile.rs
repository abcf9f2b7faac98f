//! The volatile baseline: the same sharding and hash as Engram's DRAM index
//! (4096 `RwLock`ed hashbrown tables chosen by xxh3 bits 20..32), holding
//! keys and values in DRAM with nothing persistent. It shows how close to the
//! limit of this index design the persistent store gets.

use std::time::Duration;

use anyhow::Result;
use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use parking_lot::RwLock;

use super::KvSystem;

const SHARDS: usize = 4096;

type Entry = (u64, Box<[u8]>, Box<[u8]>);

pub struct VolatileMap {
    shards: Box<[CachePadded<RwLock<HashTable<Entry>>>]>,
}

impl VolatileMap {
    pub fn new() -> VolatileMap {
        VolatileMap {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(RwLock::new(HashTable::new())))
                .collect(),
        }
    }

    fn shard(&self, hash: u64) -> &RwLock<HashTable<Entry>> {
        &self.shards[((hash >> 20) as usize) & (SHARDS - 1)]
    }
}

impl KvSystem for VolatileMap {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        let mut table = self.shard(hash).write();
        match table.find_mut(hash, |e| e.0 == hash && *e.1 == *key) {
            Some(entry) => entry.2 = value.into(),
            None => {
                table.insert_unique(hash, (hash, key.into(), value.into()), |e| e.0);
            }
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        let table = self.shard(hash).read();
        Ok(table
            .find(hash, |e| e.0 == hash && *e.1 == *key)
            .map(|e| e.2.to_vec()))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        if let Ok(entry) = self
            .shard(hash)
            .write()
            .find_entry(hash, |e| e.0 == hash && *e.1 == *key)
        {
            entry.remove();
        }
        Ok(())
    }

    /// Nothing survives a crash: the baseline has no recovery to time.
    fn crash_and_reopen(self: Box<Self>, _threads: usize) -> Result<(Box<dyn KvSystem>, Duration)> {
        anyhow::bail!("the volatile baseline keeps nothing across a crash")
    }
}
