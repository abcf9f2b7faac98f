use std::path::Path;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Pmem(#[from] engram_pmem::Error),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("corrupt Raft log: {0}")]
    Corrupt(String),
    #[error("replication: {0}")]
    Internal(String),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("bad peer list: {0}")]
    Peers(String),
}

impl Error {
    pub fn io(what: &'static str, path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            what,
            path: path.display().to_string(),
            source,
        }
    }
}
