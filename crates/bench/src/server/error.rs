//! What can go wrong in `engram-bench server`, by what went wrong: a bad
//! flag, Redis's tools not installed, a server that did not
//! start or died, redis-benchmark failing or printing something unparsable,
//! or the file system. Errors that concern a server carry the end of its log,
//! so the cause is on screen without opening the file.

use std::path::PathBuf;

use crate::error::IoError;

pub type Result<T, E = ServerBenchError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum ServerBenchError {
    #[error("--{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },

    /// Redis's tools are not on PATH (the message says how to install them).
    #[error("{0}")]
    NotInstalled(String),

    #[error("cannot start {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{system} on port {port} did not answer PING with +PONG within {seconds} s \
         (last: {last}); log {}:\n{tail}",
        log.display()
    )]
    NotReady {
        system: &'static str,
        port: u16,
        seconds: u64,
        last: String,
        log: PathBuf,
        tail: String,
    },

    #[error("{system} exited ({status}) {when}; log {}:\n{tail}", log.display())]
    Exited {
        system: &'static str,
        status: String,
        when: &'static str,
        log: PathBuf,
        tail: String,
    },

    #[error("redis-benchmark against {system} failed ({status}): {command}\n{stderr}")]
    Benchmark {
        system: &'static str,
        status: String,
        command: String,
        stderr: String,
    },

    #[error(
        "redis-benchmark against {system} took longer than --timeout {seconds} s; \
         killed it: {command}"
    )]
    BenchmarkTimeout {
        system: &'static str,
        seconds: u64,
        command: String,
    },

    #[error("redis-benchmark --csv output, line {line}: {reason}")]
    Csv { line: usize, reason: String },

    #[error(transparent)]
    Io(#[from] IoError),
}

impl ServerBenchError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        IoError::new(action, path, source).into()
    }

    pub(crate) fn flag(flag: &'static str, reason: impl Into<String>) -> Self {
        ServerBenchError::Flag {
            flag,
            reason: reason.into(),
        }
    }
}
