//! The systems under test, behind one small trait, and the factory that
//! opens each. Each peer's module says how it is configured and why.

use std::path::Path;

use crate::error::{BenchError, Result};

mod engram;
#[cfg(feature = "peers")]
mod lmdb;
#[cfg(feature = "peers")]
mod rocksdb;
mod volatile;

/// One key-value store as the benchmark drives it, shared by the benchmark
/// threads. `get` copies the value out for every system, so each is charged
/// the same copy (and the same allocation) per read.
pub trait KvSystem: Send + Sync {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Whether the key was there. A system whose delete is blind (it writes
    /// a tombstone without looking) answers `true`.
    fn delete(&self, key: &[u8]) -> Result<bool>;

    /// How many keys the system holds, where it can say exactly and cheaply;
    /// the benchmark checks it against what it wrote.
    fn key_count(&self) -> Result<Option<u64>>;

    /// Abandons the system as a process crash would, or as close as the
    /// system allows in-process, leaving its files as the crash would.
    fn crash(self: Box<Self>) -> Result<()>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

    /// Whether anything survives a crash, that is, whether there is a
    /// recovery to time.
    pub fn survives_crash(self) -> bool {
        self != SystemKind::Volatile
    }

    /// The longest key the system accepts, and whose limit it is; `None`
    /// when keys of any length are accepted.
    pub fn key_limit(self) -> Option<(u64, &'static str)> {
        match self {
            SystemKind::Engram => {
                Some((engram_engine::MAX_KEY_BYTES as u64, "Engram's longest key"))
            }
            // LMDB's compile-time MDB_MAXKEYSIZE default (heed does not
            // enable lmdb-master-sys's `longer-keys`).
            SystemKind::Lmdb => Some((511, "LMDB's longest key")),
            SystemKind::Volatile | SystemKind::RocksDb => None,
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

impl std::fmt::Display for SystemKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SystemKind {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "engram" => Ok(SystemKind::Engram),
            "volatile" => Ok(SystemKind::Volatile),
            "rocksdb" => Ok(SystemKind::RocksDb),
            "lmdb" => Ok(SystemKind::Lmdb),
            other => Err(BenchError::UnknownName {
                what: "system",
                name: other.into(),
                expected: "rocksdb, lmdb or volatile",
            }),
        }
    }
}

/// How every system is opened in one benchmark run.
#[derive(Clone, Debug)]
pub struct OpenSettings {
    /// The flush instruction Engram issues (`--flush`).
    pub flush: engram_engine::FlushInstruction,
    /// Benchmark threads that will use the system at once (LMDB sizes its
    /// reader table by it).
    pub threads: usize,
}

/// Opens a fresh instance of `kind` in the empty directory `dir`.
pub fn open(kind: SystemKind, dir: &Path, settings: &OpenSettings) -> Result<Box<dyn KvSystem>> {
    match kind {
        SystemKind::Engram => Ok(Box::new(engram::EngramSystem::open(
            dir,
            settings.flush,
            engram::RECOVERY_THREADS_AT_FIRST_OPEN,
        )?)),
        SystemKind::Volatile => Ok(Box::new(volatile::VolatileMap::new())),
        #[cfg(feature = "peers")]
        SystemKind::RocksDb => Ok(Box::new(rocksdb::RocksDbSystem::open(dir)?)),
        #[cfg(feature = "peers")]
        SystemKind::Lmdb => Ok(Box::new(lmdb::LmdbSystem::open(dir, settings.threads)?)),
        #[cfg(not(feature = "peers"))]
        SystemKind::RocksDb | SystemKind::Lmdb => Err(BenchError::PeerNotCompiled {
            system: kind.name(),
        }),
    }
}

/// Opens the store a crashed `kind` left in `dir`, recovering it with
/// `recovery_threads` where the system has such a knob.
pub fn reopen(
    kind: SystemKind,
    dir: &Path,
    settings: &OpenSettings,
    recovery_threads: usize,
) -> Result<Box<dyn KvSystem>> {
    match kind {
        SystemKind::Engram => Ok(Box::new(engram::EngramSystem::open(
            dir,
            settings.flush,
            recovery_threads,
        )?)),
        SystemKind::Volatile => Err(BenchError::NoRecovery {
            system: kind.name(),
        }),
        // Neither has a recovery-thread setting: RocksDB replays its WAL on
        // one thread, LMDB has nothing to replay.
        SystemKind::RocksDb | SystemKind::Lmdb => open(kind, dir, settings),
    }
}
