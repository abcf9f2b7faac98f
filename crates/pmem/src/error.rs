use std::path::PathBuf;

/// Errors of the persistent-region layer. Each names the file and the thing
/// that went wrong so that a user can act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no space left to grow {path} from {have_bytes} to {needed_bytes} bytes")]
    NoSpace {
        path: PathBuf,
        needed_bytes: u64,
        have_bytes: u64,
    },
    #[error(
        "region {path} would exceed its reserved address space of {reserved_bytes} bytes \
         (asked for {needed_bytes}); raise the maximum region size"
    )]
    ReservationExhausted {
        path: PathBuf,
        needed_bytes: u64,
        reserved_bytes: u64,
    },
    #[error(
        "DAX mapping (MAP_SYNC) was requested for {path} but the file system refused it: {source}"
    )]
    DaxUnavailable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("flush instruction {instruction} is not supported by this CPU")]
    FlushUnsupported { instruction: &'static str },
    #[error("region size {bytes} is not a multiple of the {page_bytes}-byte OS page")]
    Unaligned { bytes: u64, page_bytes: u64 },
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
}
