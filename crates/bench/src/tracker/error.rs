//! What can go wrong in `engram-bench tracker`: a bad flag, the file system,
//! or Engram's region or integrity layer. A kernel interface that refuses
//! is not an error: it is a result, recorded in the report.

use std::path::PathBuf;

use crate::error::IoError;

pub type Result<T, E = TrackerBenchError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum TrackerBenchError {
    #[error("--{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },

    #[error(transparent)]
    Io(#[from] IoError),

    #[error("engram region")]
    Region(#[from] engram_pmem::Error),

    #[error("engram integrity")]
    Integrity(#[from] engram_integrity::Error),
}

impl TrackerBenchError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        IoError::new(action, path, source).into()
    }

    pub(crate) fn flag(flag: &'static str, reason: impl Into<String>) -> Self {
        TrackerBenchError::Flag {
            flag,
            reason: reason.into(),
        }
    }
}
