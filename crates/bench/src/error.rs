//! What can go wrong in a benchmark run, by what went wrong: a bad flag, a
//! peer this binary was built without, a system that failed or lost a
//! write, or the file system.

use std::path::PathBuf;

use crate::workload::Op;

pub type Result<T, E = BenchError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("unknown {what} '{name}' (expected {expected})")]
    UnknownName {
        what: &'static str,
        name: String,
        expected: &'static str,
    },

    #[error(
        "{system} is not compiled into this binary; rebuild with \
         `cargo build --release -p engram-bench --features peers`"
    )]
    PeerNotCompiled { system: &'static str },

    #[error("--{flag} must be at least {min}, got {got}")]
    BelowMinimum {
        flag: &'static str,
        min: u64,
        got: u64,
    },

    #[error("--{flag} may be at most {max} ({why}), got {got}")]
    AboveMaximum {
        flag: &'static str,
        max: u64,
        got: u64,
        why: &'static str,
    },

    /// A get that found nothing (or a value of the wrong size), or a delete
    /// of a key that was not there: the system lost or invented a write.
    #[error("{system}: {op} of record {record} did not find it as written")]
    LostWrite {
        system: &'static str,
        op: Op,
        record: u64,
    },

    #[error("{system} holds {found} keys {when}, expected {expected}")]
    WrongKeyCount {
        system: &'static str,
        when: &'static str,
        found: u64,
        expected: u64,
    },

    #[error("{system} keeps nothing across a crash, so it has no recovery to time")]
    NoRecovery { system: &'static str },

    #[error("{action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("engram failed")]
    Engram(#[from] engram_engine::Error),

    #[cfg(feature = "peers")]
    #[error("rocksdb failed")]
    RocksDb(#[from] rocksdb::Error),

    #[cfg(feature = "peers")]
    #[error("lmdb failed")]
    Lmdb(#[from] heed::Error),
}

impl BenchError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        BenchError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
