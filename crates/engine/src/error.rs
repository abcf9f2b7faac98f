use std::path::PathBuf;

/// Errors at the engine's boundary. Each variant names the thing that is
/// wrong so a user (or the server above) can act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Region(#[from] engram_pmem::Error),
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an Engram data file (bad magic number)")]
    NotAnEngramFile { path: PathBuf },
    #[error("{path} has format version {found}; this build reads versions 1 to {supported}")]
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("{path}: superblock is corrupt ({what})")]
    CorruptSuperblock { path: PathBuf, what: &'static str },
    #[error("{path} is truncated: it should hold at least {expected_bytes} bytes but has {actual_bytes}")]
    Truncated {
        path: PathBuf,
        expected_bytes: u64,
        actual_bytes: u64,
    },
    #[error("data directory {path} is in use by another process")]
    Locked { path: PathBuf },
    #[error("key of {len} bytes is larger than the maximum of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    #[error("value of {len} bytes is larger than the maximum of {max} bytes")]
    ValueTooLarge { len: usize, max: usize },
    #[error("no space left for the data file: {0}")]
    NoSpace(#[source] engram_pmem::Error),
    #[error("record at offset {offset:#x} is corrupt ({what})")]
    CorruptRecord { offset: u64, what: &'static str },
    #[error("key not found")]
    KeyNotFound,
    #[error("field at byte {field_offset} does not fit an aligned 8-byte word in a value of {value_len} bytes")]
    FieldOutOfRange { field_offset: u64, value_len: u64 },
    #[error(transparent)]
    Integrity(#[from] engram_integrity::Error),
    #[error(
        "record at offset {offset:#x} lies on a page that is corrupt and could not be rebuilt \
         from parity"
    )]
    Unrepairable { offset: u64 },
    #[error("index image not written: {0}")]
    IndexImage(String),
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(
        context: &'static str,
        path: &std::path::Path,
        source: std::io::Error,
    ) -> Self {
        Error::Io {
            context,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Growth failures that mean "the disk is full" become [`Error::NoSpace`];
    /// everything else stays a region error.
    pub(crate) fn from_growth(error: engram_pmem::Error) -> Self {
        match error {
            e @ (engram_pmem::Error::NoSpace { .. }
            | engram_pmem::Error::ReservationExhausted { .. }) => Error::NoSpace(e),
            other => Error::Region(other),
        }
    }
}
