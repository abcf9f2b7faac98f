//! The keyspace's format record: which versions of its own layouts (the
//! meta word in front of every string, and the intent records of atomic
//! batches) the strings store holds.
//!
//! Both layouts live inside engine values, whose own format the engine
//! versions; this record versions what the keyspace puts in them. It is one
//! engine value under a reserved key (`0xFF 'V'`: 0xFF is never a
//! database), 16 bytes:
//!
//! ```text
//! 0..8    magic "EGKSPACE"
//! 8..12   meta word format version, u32 LE  (value.rs)
//! 12..16  intent format version, u32 LE     (journal.rs)
//! ```
//!
//! A store without the record was written before it existed, in version 1
//! of both layouts; opening it writes the record. A record naming a version
//! this build does not know is refused before anything is read or written.

use crate::{Error, Result};

/// The reserved engine key of the format record.
pub const KEY: [u8; 2] = [0xFF, b'V'];
const MAGIC: [u8; 8] = *b"EGKSPACE";
const RECORD_BYTES: usize = 16;

/// The meta word's layout (`value.rs`) this build reads and writes.
pub const META_WORD_VERSION: u32 = 1;
/// The intent records' layout (`journal.rs`) this build reads and writes.
pub const INTENT_VERSION: u32 = 1;

pub fn is_format_key(key: &[u8]) -> bool {
    key == KEY
}

/// The record this build writes.
pub fn encode() -> [u8; RECORD_BYTES] {
    let mut record = [0u8; RECORD_BYTES];
    record[..8].copy_from_slice(&MAGIC);
    record[8..12].copy_from_slice(&META_WORD_VERSION.to_le_bytes());
    record[12..16].copy_from_slice(&INTENT_VERSION.to_le_bytes());
    record
}

/// Checks a stored record; `file` names the store's data file in errors.
pub fn check(record: &[u8], file: &str) -> Result<()> {
    if record.len() != RECORD_BYTES || record[..8] != MAGIC {
        return Err(Error::Format(format!(
            "{file}: the keyspace format record (key 0xFF 'V') is damaged or foreign \
             ({} bytes)",
            record.len()
        )));
    }
    let word = |at: usize| u32::from_le_bytes(record[at..at + 4].try_into().expect("4 bytes"));
    for (what, found, known) in [
        ("meta word", word(8), META_WORD_VERSION),
        ("intent record", word(12), INTENT_VERSION),
    ] {
        if found != known {
            return Err(Error::Format(format!(
                "{file}: keyspace {what} format version {found} is not supported \
                 (this build reads version {known})"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_checks_and_unknown_versions_are_named() {
        assert!(check(&encode(), "D/values.pmem").is_ok());
        let mut future = encode();
        future[8..12].copy_from_slice(&2u32.to_le_bytes());
        let error = check(&future, "D/values.pmem").unwrap_err().to_string();
        assert!(
            error.contains("D/values.pmem: keyspace meta word format version 2 is not supported"),
            "{error}"
        );
        let mut future = encode();
        future[12..16].copy_from_slice(&7u32.to_le_bytes());
        let error = check(&future, "D/values.pmem").unwrap_err().to_string();
        assert!(
            error.contains("intent record format version 7 is not supported"),
            "{error}"
        );
        let error = check(b"short", "D/values.pmem").unwrap_err().to_string();
        assert!(error.contains("damaged or foreign"), "{error}");
    }
}
