use std::path::PathBuf;

/// Errors of the integrity layer, each naming the file and the problem.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Region(#[from] engram_pmem::Error),
    #[error("{path} is not an Engram integrity file (bad magic number)")]
    NotAnIntegrityFile { path: PathBuf },
    #[error("{path} has integrity format version {found}; this build reads version {supported}")]
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("{path}: integrity header is corrupt ({what}); delete the file to rebuild redundancy")]
    CorruptHeader { path: PathBuf, what: &'static str },
    #[error(
        "{path} protects another data file (store id {found_id:#x}, expected {expected_id:#x}); \
         delete it to rebuild redundancy for this one"
    )]
    ForeignFile {
        path: PathBuf,
        expected_id: u64,
        found_id: u64,
    },
    #[error("invalid integrity option: {0}")]
    InvalidOption(String),
}

pub type Result<T> = std::result::Result<T, Error>;
