//! What can go wrong in a benchmark run, by what went wrong: a bad flag, a
//! peer this binary was built without, a system that failed or lost a
//! write, or the file system ([`IoError`], shared by every benchmark).

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

    #[error(transparent)]
    Io(#[from] IoError),

    #[error("engram failed")]
    Engram(#[from] engram_engine::Error),

    #[cfg(feature = "peers")]
    #[error("rocksdb failed")]
    RocksDb(#[from] rocksdb::Error),

    #[cfg(feature = "peers")]
    #[error("lmdb failed")]
    Lmdb(#[from] heed::Error),
}

/// A file-system operation that failed: what was being done, to what, and
/// the system's error. Every benchmark's error type holds one as its `Io`
/// case, so the helpers all commands share ([`crate::command`]) can fail
/// the same way in each.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}", path.display())]
pub struct IoError {
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl IoError {
    pub fn new(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        IoError {
            action,
            path: path.into(),
            source,
        }
    }
}

impl BenchError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        IoError::new(action, path, source).into()
    }
}

/// `--flag` must be at least `min`.
pub(crate) fn at_least(flag: &'static str, got: u64, min: u64) -> Result<()> {
    if got < min {
        return Err(BenchError::BelowMinimum { flag, min, got });
    }
    Ok(())
}

/// `--flag` may be at most `max`, for the reason `why`.
pub(crate) fn at_most(flag: &'static str, got: u64, max: u64, why: &'static str) -> Result<()> {
    if got > max {
        return Err(BenchError::AboveMaximum {
            flag,
            max,
            got,
            why,
        });
    }
    Ok(())
}
