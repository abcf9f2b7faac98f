//! The codec's one error type: what is wrong and the byte offset where the
//! reader found it (in the DUMP payload, or in the RDB file).

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// Offset of the byte the reader was at, from the start of the input.
    pub offset: u64,
    pub message: String,
    /// A value or section Engram does not take (streams, modules): the
    /// input may well be sound.
    pub unsupported: bool,
    /// The input ended where more bytes were needed: with more of the
    /// file the same bytes may read fine (see `file`).
    pub truncated: bool,
}

impl Error {
    pub fn at(offset: u64, message: impl Into<String>) -> Error {
        Error {
            offset,
            message: message.into(),
            unsupported: false,
            truncated: false,
        }
    }

    pub fn unsupported(offset: u64, message: impl Into<String>) -> Error {
        Error {
            unsupported: true,
            ..Error::at(offset, message)
        }
    }

    pub fn truncated(offset: u64, message: impl Into<String>) -> Error {
        Error {
            truncated: true,
            ..Error::at(offset, message)
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte offset {})", self.message, self.offset)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
