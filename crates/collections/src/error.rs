use std::path::PathBuf;

/// Errors at the collections layer's boundary, each naming what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Region(#[from] engram_pmem::Error),
    #[error(transparent)]
    Engine(#[from] engram_engine::Error),
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    CorruptLog { path: PathBuf, what: String },
    #[error("operation of {bytes} bytes is larger than the operation log's limit of {max} bytes per operation")]
    OperationTooLarge { bytes: usize, max: usize },
    #[error("no space left for the operation log: {0}")]
    NoSpace(#[source] engram_pmem::Error),
    #[error("checkpoint image of key {key:?} is corrupt: {what}")]
    CorruptImage { key: String, what: String },
    #[error("operation record {seq} is corrupt: {what}")]
    CorruptOperation { seq: u64, what: String },
    #[error("injected crash point reached: {0}")]
    InjectedCrash(&'static str),
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

impl Error {
    /// [`Error::CorruptImage`] of the image of user key `key`.
    pub fn corrupt_image(key: &[u8], what: impl std::fmt::Display) -> Error {
        Error::CorruptImage {
            key: String::from_utf8_lossy(key).into_owned(),
            what: what.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
