//! The systems under test, behind one small trait.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

mod engram;
#[cfg(feature = "peers")]
mod lmdb;
#[cfg(feature = "peers")]
mod rocksdb;
mod volatile;

/// One key-value store as the benchmark drives it. `get` copies the value
/// out for every system, so the comparison charges each the same copy.
pub trait KvSystem: Send + Sync {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// Stops the system the way a process crash would (or as close as the
    /// system allows in-process), reopens it with `threads` recovery threads
    /// where it has such a knob, and returns the time the reopen took.
    fn crash_and_reopen(self: Box<Self>, threads: usize) -> Result<(Box<dyn KvSystem>, Duration)>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SystemKind {
    Engram,
    Volatile,
    RocksDb,
    Lmdb,
}

impl SystemKind {
    pub fn name(self) -> &'static str {
        match self {
            SystemKind::Engram => "engram",
            SystemKind::Volatile => "volatile",
            SystemKind::RocksDb => "rocksdb",
            SystemKind::Lmdb => "lmdb",
        }
    }

    /// Whether this build can run the system.
    pub fn compiled(self) -> bool {
        match self {
            SystemKind::Engram | SystemKind::Volatile => true,
            SystemKind::RocksDb | SystemKind::Lmdb => cfg!(feature = "peers"),
        }
    }

    /// The peers measured when the user names none.
    pub fn default_peers() -> Vec<SystemKind> {
        if cfg!(feature = "peers") {
            vec![SystemKind::RocksDb, SystemKind::Lmdb, SystemKind::Volatile]
        } else {
            vec![SystemKind::Volatile]
        }
    }
}

impl std::str::FromStr for SystemKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "engram" => Ok(SystemKind::Engram),
            "volatile" => Ok(SystemKind::Volatile),
            "rocksdb" => Ok(SystemKind::RocksDb),
            "lmdb" => Ok(SystemKind::Lmdb),
            other => Err(format!(
                "unknown system '{other}' (expected rocksdb, lmdb or volatile)"
            )),
        }
    }
}

/// What the Engram system is opened with.
#[derive(Clone, Debug)]
pub struct EngramSettings {
    pub flush: engram_engine::FlushInstruction,
}

/// Opens a fresh instance of `kind` in the empty directory `dir`.
pub fn open(kind: SystemKind, dir: &Path, engram: &EngramSettings) -> Result<Box<dyn KvSystem>> {
    match kind {
        SystemKind::Engram => Ok(Box::new(engram::EngramSystem::open(dir, engram.clone(), 0)?)),
        SystemKind::Volatile => Ok(Box::new(volatile::VolatileMap::new())),
        #[cfg(feature = "peers")]
        SystemKind::RocksDb => Ok(Box::new(rocksdb::RocksDbSystem::open(dir)?)),
        #[cfg(feature = "peers")]
        SystemKind::Lmdb => Ok(Box::new(lmdb::LmdbSystem::open(dir)?)),
        #[cfg(not(feature = "peers"))]
        SystemKind::RocksDb | SystemKind::Lmdb => anyhow::bail!(
            "{} is not compiled into this binary; rebuild with `cargo build --release -p engram --features peers`",
            kind.name()
        ),
    }
}
