//! Snapshots: the state machine's whole state at an applied index, for a
//! follower that needs entries the log has compacted away.
//!
//! On the sending side (`Snapshots`), the log's `Storage::snapshot` asks
//! for one; the apply thread builds it between batches (so it is the state
//! at exactly the last applied index) and publishes it; raft-rs picks it
//! up at its next attempt. The newest one is kept in memory for the next
//! follower that needs one.
//!
//! On the receiving side (`SnapshotFile`), the snapshot is written to
//! `DIR/raft/snapshot` and synced before the log is reset to start after
//! it, and stays there until the state machine holds it: a restart that
//! finds the file ahead of the state machine's applied index loads it
//! again (a crash during a load leaves a half-loaded keyspace, which the
//! load replaces whole).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::Mutex;

use crate::error::{replace_file, Error, Result};

pub(crate) struct Snapshots {
    /// The newest snapshot built: its index and data.
    ready: Mutex<Option<(u64, Bytes)>>,
    building: AtomicBool,
    wake: Sender<u64>,
}

impl Snapshots {
    /// The shared slot, and what wakes the apply thread to build.
    pub fn new() -> (std::sync::Arc<Snapshots>, Receiver<u64>) {
        let (wake, woken) = unbounded();
        let snapshots = Snapshots {
            ready: Mutex::new(None),
            building: AtomicBool::new(false),
            wake,
        };
        (std::sync::Arc::new(snapshots), woken)
    }

    /// The snapshot built, if its index is at least `floor`.
    pub fn ready_at_least(&self, floor: u64) -> Option<(u64, Bytes)> {
        self.ready
            .lock()
            .as_ref()
            .filter(|(index, _)| *index >= floor)
            .cloned()
    }

    /// Asks the apply thread for a snapshot at `floor` or later (once
    /// until it has one).
    pub fn request(&self, floor: u64) {
        if !self.building.swap(true, Ordering::AcqRel) {
            let _ = self.wake.send(floor);
        }
    }

    /// A build that failed: the next request starts another.
    pub fn publish_failed(&self) {
        self.building.store(false, Ordering::Release);
    }

    pub fn publish(&self, index: u64, data: Bytes) {
        *self.ready.lock() = Some((index, data));
        self.building.store(false, Ordering::Release);
    }
}

/// `DIR/raft/snapshot`: `[magic][index u64][term u64][len u64][crc u32]`
/// then the data.
pub(crate) struct SnapshotFile {
    path: PathBuf,
}

const MAGIC: &[u8; 8] = b"ENGSNAP1";
const HEADER: usize = 8 + 8 + 8 + 8 + 4;

impl SnapshotFile {
    pub fn new(dir: &Path) -> SnapshotFile {
        SnapshotFile {
            path: dir.join("snapshot"),
        }
    }

    /// Writes the snapshot durably (a temporary file synced, renamed over
    /// the old one, the directory synced).
    pub fn write(&self, index: u64, term: u64, data: &[u8]) -> Result<()> {
        let mut header = Vec::with_capacity(HEADER);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&index.to_le_bytes());
        header.extend_from_slice(&term.to_le_bytes());
        header.extend_from_slice(&(data.len() as u64).to_le_bytes());
        header.extend_from_slice(&crc32c::crc32c(data).to_le_bytes());
        replace_file(&self.path, &[&header, data])
    }

    /// The snapshot kept, if there is one: (index, term, data). A file
    /// that does not check out is an error (it was synced whole before
    /// the log depended on it).
    pub fn read(&self) -> Result<Option<(u64, u64, Bytes)>> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("reading", &self.path, e)),
        };
        let corrupt = |why: &str| Error::Corrupt(format!("{}: {why}", self.path.display()));
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(corrupt("not an Engram snapshot"));
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let (index, term, len) = (word(8), word(16), word(24));
        let crc = u32::from_le_bytes(bytes[32..36].try_into().unwrap());
        let data = &bytes[HEADER..];
        if data.len() as u64 != len {
            return Err(corrupt("its length does not match its header"));
        }
        if crc32c::crc32c(data) != crc {
            return Err(corrupt("its checksum does not match"));
        }
        let data = Bytes::from(bytes).slice(HEADER..);
        Ok(Some((index, term, data)))
    }

    /// Removes the file if it holds the snapshot at `index` (the one the
    /// state machine now holds durably; a newer one received meanwhile
    /// stays for its own load).
    pub fn remove_if_at(&self, index: u64) -> Result<()> {
        use std::io::Read;
        let mut header = [0u8; 16];
        let held = std::fs::File::open(&self.path).and_then(|mut f| f.read_exact(&mut header));
        match held {
            Ok(()) if u64::from_le_bytes(header[8..16].try_into().unwrap()) == index => {
                self.remove()
            }
            _ => Ok(()),
        }
    }

    /// Removes the file once the state machine holds its state durably.
    pub fn remove(&self) -> Result<()> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("removing", &self.path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_file_round_trips_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = SnapshotFile::new(dir.path());
        assert!(file.read().unwrap().is_none());
        file.write(42, 7, b"state bytes").unwrap();
        let (index, term, data) = file.read().unwrap().unwrap();
        assert_eq!((index, term, &data[..]), (42, 7, &b"state bytes"[..]));
        let path = dir.path().join("snapshot");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let error = file.read().expect_err("refused");
        assert!(error.to_string().contains("checksum"), "{error}");
        bytes.truncate(20);
        std::fs::write(&path, &bytes).unwrap();
        assert!(file.read().is_err());
        file.write(43, 7, b"newer").unwrap();
        file.remove_if_at(42).unwrap();
        assert_eq!(
            file.read().unwrap().unwrap().0,
            43,
            "a newer snapshot stays"
        );
        file.remove_if_at(43).unwrap();
        assert!(file.read().unwrap().is_none());
        file.remove_if_at(43).unwrap();
    }

    #[test]
    fn a_request_wakes_the_builder_once_until_published() {
        let (snapshots, woken) = Snapshots::new();
        snapshots.request(3);
        snapshots.request(4);
        assert_eq!(woken.try_iter().count(), 1);
        assert!(snapshots.ready_at_least(0).is_none());
        snapshots.publish(10, Bytes::from_static(b"s"));
        assert_eq!(snapshots.ready_at_least(10).unwrap().0, 10);
        assert!(snapshots.ready_at_least(11).is_none());
        snapshots.request(11);
        assert_eq!(woken.try_iter().count(), 1);
    }
}
