//! What can go wrong in `engram-bench timeline`, by what went wrong: a bad
//! flag, a store (or the server and its clients) that failed or lost a
//! write, the Redis peer missing or failing, a recovery that found a
//! different data set, the plot, or the file system.

use std::path::PathBuf;

use crate::error::{BenchError, IoError};
use crate::server::ServerBenchError;

pub type Result<T, E = TimelineError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    #[error("--{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },

    /// A read that did not find what the benchmark wrote: the store lost
    /// or invented a write.
    #[error("{store}: {what}")]
    LostWrite { store: &'static str, what: String },

    #[error("{store} holds {found} keys {when}, expected {expected}")]
    WrongKeyCount {
        store: &'static str,
        when: &'static str,
        found: u64,
        expected: u64,
    },

    #[error("drawing the plot: {0}")]
    Plot(String),

    #[error(transparent)]
    Io(#[from] IoError),

    #[error("collections failed")]
    Collections(#[from] engram_collections::Error),

    #[error("engram failed")]
    Engine(#[from] engram_engine::Error),

    /// `--target server`: the in-process server would not start, or
    /// answered what a Redis server would not.
    #[error("the server: {0}")]
    Server(String),

    #[error("the server did not start")]
    ServerStart(#[from] engram_server::StartError),

    #[error("a Redis client of the server")]
    Redis(#[from] redis::RedisError),

    /// `--peers redis`: redis-server is not there (the source says how to
    /// install it).
    #[error(
        "redis-server, which --target server measures beside Engram, was not found; \
         --peers none measures Engram alone"
    )]
    RedisMissing(#[source] ServerBenchError),

    /// `--peers redis`: Redis would not start or died.
    #[error("the Redis peer failed (--peers none measures Engram alone)")]
    Peer(#[from] ServerBenchError),

    /// `--peers redis`: Redis answered what the benchmark did not expect.
    #[error("the Redis peer: {0} (--peers none measures Engram alone)")]
    PeerFailed(String),

    #[error(transparent)]
    Bench(#[from] BenchError),
}

impl TimelineError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        IoError::new(action, path, source).into()
    }

    pub(crate) fn flag(flag: &'static str, reason: impl Into<String>) -> Self {
        TimelineError::Flag {
            flag,
            reason: reason.into(),
        }
    }
}
