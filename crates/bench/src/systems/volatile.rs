//! The volatile baseline: Engram's DRAM index design with the values in DRAM
//! too and nothing persistent. It shows how close to the limit of this index
//! design the persistent store gets.
//!
//! Same sharding and hash as Engram's index (`engine::index`): 4096 shards,
//! each a `parking_lot::RwLock` around a hashbrown table padded to its own
//! cache line, the shard chosen by bits 20..32 of the key's xxh3-64 hash.
//! The table is hashbrown's `HashTable` holding (hash, key, value) rather
//! than a `HashMap<Box<[u8]>, Box<[u8]>>`: it hashes each key once, with
//! xxh3, as Engram's index does, instead of a second time with the map's
//! own hasher, and it never rehashes keys when it grows.

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use parking_lot::RwLock;

use super::KvSystem;
use crate::error::Result;

const SHARD_COUNT: usize = 4096;
const SHARD_SHIFT: u32 = 20;

struct Entry {
    hash: u64,
    key: Box<[u8]>,
    value: Box<[u8]>,
}

type Shard = RwLock<HashTable<Entry>>;

pub struct VolatileMap {
    shards: Box<[CachePadded<Shard>]>,
}

impl VolatileMap {
    pub fn new() -> VolatileMap {
        VolatileMap {
            shards: (0..SHARD_COUNT)
                .map(|_| CachePadded::new(RwLock::new(HashTable::new())))
                .collect(),
        }
    }

    fn shard(&self, hash: u64) -> &Shard {
        &self.shards[((hash >> SHARD_SHIFT) as usize) & (SHARD_COUNT - 1)]
    }
}

fn matches(hash: u64, key: &[u8]) -> impl Fn(&Entry) -> bool + '_ {
    move |entry| entry.hash == hash && *entry.key == *key
}

impl KvSystem for VolatileMap {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        let mut table = self.shard(hash).write();
        match table.find_mut(hash, matches(hash, key)) {
            Some(entry) => entry.value = value.into(),
            None => {
                let entry = Entry {
                    hash,
                    key: key.into(),
                    value: value.into(),
                };
                table.insert_unique(hash, entry, |e| e.hash);
            }
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        let table = self.shard(hash).read();
        Ok(table
            .find(hash, matches(hash, key))
            .map(|entry| entry.value.to_vec()))
    }

    fn delete(&self, key: &[u8]) -> Result<bool> {
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        let mut table = self.shard(hash).write();
        match table.find_entry(hash, matches(hash, key)) {
            Ok(entry) => {
                entry.remove();
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    fn key_count(&self) -> Result<Option<u64>> {
        Ok(Some(
            self.shards
                .iter()
                .map(|shard| shard.read().len() as u64)
                .sum(),
        ))
    }

    /// Nothing to leave behind: the baseline keeps nothing across a crash.
    fn crash(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
