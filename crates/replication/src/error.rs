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

/// Replaces `path` with `parts` written in order, durably: a temporary
/// file beside it is written and synced, renamed over it, and the
/// directory synced, so a crash leaves the old file or the new one.
pub(crate) fn replace_file(path: &Path, parts: &[&[u8]]) -> Result<()> {
    use std::io::Write;
    let temporary = path.with_extension("new");
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        for part in parts {
            file.write_all(part)?;
        }
        file.sync_all()
    })();
    written.map_err(|e| Error::io("writing", &temporary, e))?;
    std::fs::rename(&temporary, path).map_err(|e| Error::io("renaming", &temporary, e))?;
    let dir = path.parent().expect("the file is in a directory");
    engram_pmem::sync_directory(dir).map_err(|e| Error::io("syncing", dir, e))
}
