//! A replicated member's undo journal for the counters its apply adds to
//! directly (`Txn::allow_direct_adds`).
//!
//! A member applies a chunk of committed entries as one atomic batch that
//! also records the applied index (`applied_record`), so a crash leaves
//! all of the chunk or none of it and the node re-applies from the next
//! entry. Buffering every INCR in that batch (a read, a buffered copy, a
//! second lookup at commit) cost a member more than the whole INCR costs
//! a single node. So at `process` an INCR of a live integer goes to the
//! engine at once, as a single node's does, and its old value goes here
//! first with the index of the entry that adds. The chunk's commit
//! empties the journal. At startup a journal that is not empty belongs to
//! a chunk whose commit may not have happened: the old values noted by
//! entries past the applied index recorded are put back, newest first (a
//! counter added to twice gets the value it had after the last entry
//! recorded), and those entries are applied again from the log. An early
//! commit inside a chunk (a flush: `Txn::begin_entry`) records an
//! applied index within the chunk; entries up to it keep their adds.
//!
//! Only at `process`, whose promise is to outlive the process: the stores
//! land in the page cache in program order, so the old value is in the
//! journal before the new one is in the engine, and the journal is
//! emptied only after the commit. At `everysec` and `always` the kernel
//! may write the engine's page back before the journal's, and the apply
//! buffers as before.
//!
//! ```text
//! DIR/apply-undo.pmem
//! [magic u64][unused u64][entries u64][bytes used u64] ...  header, 64 bytes
//! [key len u64][old word u64][entry index u64][key, padded to 8] ...  entries
//! ```

use std::path::Path;

use engram_pmem::{ModeChoice, PmemOffset, Region, RegionOptions};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::value::META_BYTES;
use crate::{Error, Keyspace, Result};

/// The journal's file in a keyspace directory.
pub const FILE: &str = "apply-undo.pmem";

const MAGIC: u64 = u64::from_le_bytes(*b"EGUNDO01");
const HEADER_BYTES: u64 = 64;
const MAGIC_AT: PmemOffset = PmemOffset(0);
const ENTRIES_AT: PmemOffset = PmemOffset(16);
const USED_AT: PmemOffset = PmemOffset(24);
/// An entry's words before its key: key length, old word, entry index.
const ENTRY_HEADER: u64 = 24;
/// The file's size: a chunk commits every 512 writes, so a full journal
/// (an INCR past it takes the buffered path) takes keys of 500 bytes.
const FILE_BYTES: u64 = 256 * 1024;
/// Longer keys take the buffered path (a journal entry must stay small).
pub const MAX_KEY_BYTES: usize = 1024;

pub struct ApplyUndo {
    region: Mutex<Region>,
    /// The bytes of entries noted since the last `clear` (the region's
    /// count, mirrored so the apply can ask without the lock).
    used: AtomicU64,
    /// Notes refused because the journal was full (each such INCR took
    /// the buffered path): the apply ends its chunk before that happens
    /// (`half_full`), so this stays 0 unless keys are very long.
    refused: AtomicU64,
}

/// An entry of the journal: the Raft entry that changed `key`, and the
/// word it changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Noted {
    pub index: u64,
    pub key: Vec<u8>,
    pub old: u64,
}

impl ApplyUndo {
    /// Opens (creating if needed) the journal in `dir`.
    pub fn open(dir: &Path, mode: ModeChoice) -> Result<ApplyUndo> {
        let path = dir.join(FILE);
        let options = RegionOptions {
            mode,
            ..RegionOptions::default()
        };
        let region = if path.exists() {
            Region::open(&path, options)
        } else {
            Region::create(&path, FILE_BYTES, options)
        }
        .map_err(|e| Error::Internal(format!("the apply's undo journal: {e}")))?;
        if region.len() < FILE_BYTES {
            return Err(Error::Internal(format!(
                "the apply's undo journal {} is {} bytes, not {FILE_BYTES}",
                path.display(),
                region.len()
            )));
        }
        match region.load_u64(MAGIC_AT) {
            MAGIC => {}
            // A file created but never used.
            0 if region.load_u64(ENTRIES_AT) == 0 => region.store_u64(MAGIC_AT, MAGIC),
            other => {
                return Err(Error::Internal(format!(
                    "the apply's undo journal {} is damaged (magic {other:#x})",
                    path.display()
                )))
            }
        }
        let used = match region.load_u64(ENTRIES_AT) {
            0 => 0,
            _ => region.load_u64(USED_AT),
        };
        Ok(ApplyUndo {
            region: Mutex::new(region),
            used: AtomicU64::new(used),
            refused: AtomicU64::new(0),
        })
    }

    /// What a crash left, in the order it was noted.
    pub fn left(&self) -> Result<Vec<Noted>> {
        let region = self.region.lock();
        let entries = region.load_u64(ENTRIES_AT);
        if entries == 0 {
            return Ok(Vec::new());
        }
        let used = region.load_u64(USED_AT);
        if used > FILE_BYTES - HEADER_BYTES {
            return Err(Error::Internal(format!(
                "the apply's undo journal claims {used} bytes"
            )));
        }
        let mut at = HEADER_BYTES;
        let end = HEADER_BYTES + used;
        let mut found = Vec::with_capacity(entries as usize);
        for _ in 0..entries {
            if at + ENTRY_HEADER > end {
                return Err(Error::Internal("the apply's undo journal is short".into()));
            }
            let len = region.load_u64(PmemOffset(at));
            let old = region.load_u64(PmemOffset(at + 8));
            let index = region.load_u64(PmemOffset(at + 16));
            if len > MAX_KEY_BYTES as u64 || at + ENTRY_HEADER + len > end {
                return Err(Error::Internal(format!(
                    "an entry of the apply's undo journal is damaged (key of {len} bytes)"
                )));
            }
            let key = region.read(PmemOffset(at + ENTRY_HEADER), len).to_vec();
            found.push(Noted { index, key, old });
            at += ENTRY_HEADER + len.next_multiple_of(8);
        }
        Ok(found)
    }

    /// Notes `old`, the word at `ekey` before Raft entry `index` changes
    /// it. False (nothing noted) when the journal is full or the key too
    /// long.
    pub fn note(&self, index: u64, ekey: &[u8], old: u64) -> bool {
        if ekey.len() > MAX_KEY_BYTES {
            return false;
        }
        let region = self.region.lock();
        let entries = region.load_u64(ENTRIES_AT);
        let used = if entries == 0 {
            0
        } else {
            region.load_u64(USED_AT)
        };
        let bytes = ENTRY_HEADER + (ekey.len() as u64).next_multiple_of(8);
        if HEADER_BYTES + used + bytes > FILE_BYTES {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let at = HEADER_BYTES + used;
        region.store_u64(PmemOffset(at), ekey.len() as u64);
        region.store_u64(PmemOffset(at + 8), old);
        region.store_u64(PmemOffset(at + 16), index);
        region.write(PmemOffset(at + ENTRY_HEADER), ekey);
        // The entry first, then the counts that take it in.
        region.store_u64(USED_AT, used + bytes);
        region.store_u64(ENTRIES_AT, entries + 1);
        self.used.store(used + bytes, Ordering::Relaxed);
        true
    }

    /// Whether the entries noted since the last `clear` fill half of the
    /// journal: the apply then ends its chunk (whose commit empties it),
    /// so that a long run of INCRs never finds it full. Direct adds hold
    /// nothing back for the commit, so the chunk's count of buffered
    /// writes alone never ended such a run: the journal filled and every
    /// INCR after that was buffered and written as a new record.
    pub fn half_full(&self) -> bool {
        HEADER_BYTES + 2 * self.used.load(Ordering::Relaxed) > FILE_BYTES
    }

    /// How many notes were refused for want of room since the open.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Empties the journal: its chunk committed (or was undone).
    pub fn clear(&self) {
        let region = self.region.lock();
        if region.load_u64(ENTRIES_AT) != 0 {
            region.store_u64(ENTRIES_AT, 0);
        }
        self.used.store(0, Ordering::Relaxed);
    }

    /// Writes the journal back (after a recovery put old values back, the
    /// emptied journal must not be durable before they are).
    pub fn sync(&self) -> Result<()> {
        self.region
            .lock()
            .sync_all()
            .map_err(|e| Error::Internal(format!("syncing the apply's undo journal: {e}")))
    }
}

impl Keyspace {
    /// Opens the undo journal of a member's apply in `dir` and puts back
    /// what entries not recorded as applied added directly (see the
    /// module docs). Once, at open.
    pub(crate) fn open_apply_undo(&self, dir: &Path, mode: ModeChoice) -> Result<()> {
        let undo = ApplyUndo::open(dir, mode)?;
        let left = undo.left()?;
        if !left.is_empty() {
            let applied = self.applied_index()?;
            let undone: Vec<&Noted> = left.iter().filter(|n| n.index > applied).collect();
            if !undone.is_empty() {
                for Noted { key: ekey, old, .. } in undone.iter().rev() {
                    let put_back = self.store.update_word_with(
                        ekey,
                        META_BYTES as u64,
                        |access| access,
                        |_| engram_engine::WordUpdate::Set(*old),
                    );
                    match put_back {
                        Ok(Some(_)) => {}
                        // Deleted by the chunk's own batch, which then
                        // committed nothing either: cannot happen; say so.
                        Ok(None) => log::warn!(
                            "the apply's undo journal names {}, which is not there",
                            crate::client_key_name(ekey).escape_ascii()
                        ),
                        Err(e) => return Err(Error::Engine(e)),
                    }
                }
                // The old values durable before the journal forgets them.
                self.sync()?;
                log::info!(
                    "put back {} direct adds of entries past the applied index {applied}: \
                     they are applied again from the log",
                    undone.len()
                );
            }
            undo.clear();
            undo.sync()?;
        }
        self.apply_undo
            .set(undo)
            .map_err(|_| Error::Internal("the apply's undo journal opened twice".into()))
    }

    pub(crate) fn apply_undo(&self) -> Option<&ApplyUndo> {
        self.apply_undo.get()
    }

    /// How many of the apply's direct adds found the undo journal full
    /// and were buffered instead (0 when it is not open).
    pub fn apply_undo_refused(&self) -> u64 {
        self.apply_undo().map_or(0, ApplyUndo::refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{encode_int, StringValue};
    use crate::{now_ms, InPlaceAdd, KeyspaceOptions};

    /// A member's keyspace (the undo journal is opened with atomic batches).
    fn member(dir: &Path) -> std::sync::Arc<Keyspace> {
        let options = KeyspaceOptions {
            atomic_batches: true,
            checkpoints: engram_collections::CheckpointMode::Manual,
            ..KeyspaceOptions::default()
        };
        Keyspace::open_dir(dir, &options).unwrap().keyspace
    }

    fn counter(ks: &Keyspace, key: &[u8]) -> i64 {
        ks.read(
            0,
            key,
            now_ms(),
            |meta, payload| match StringValue::from_payload(meta, payload) {
                StringValue::Int(n) => n,
                StringValue::Raw(_) => panic!("not an integer"),
            },
        )
        .unwrap()
        .expect("the counter is there")
    }

    /// Writes `value` at `key` with the applied index `index`, committed.
    fn set_at(ks: &Keyspace, key: &[u8], value: i64, index: u64) {
        let mut txn = ks.lock_all(true);
        let mut bytes = Vec::new();
        encode_int(&mut bytes, value, None);
        txn.put(0, key, &bytes).unwrap();
        txn.put_applied_index(index).unwrap();
        txn.commit().unwrap();
    }

    /// The apply's chunk adds to a counter directly; a crash before its
    /// commit (the transaction dropped, the process gone) leaves the
    /// journal, and the next open puts the value from before the chunk
    /// back, so the entries can be applied again exactly once. A chunk
    /// that commits keeps its adds, and a journal left after its commit
    /// puts nothing back.
    #[test]
    fn a_chunk_that_never_committed_has_its_direct_adds_put_back() {
        let dir = tempfile::tempdir().unwrap();
        let ks = member(dir.path());
        set_at(&ks, b"c", 10, 4);
        {
            let mut txn = ks.lock_all(true);
            txn.forgo_rollback();
            txn.begin_entry(5);
            txn.allow_direct_adds();
            assert_eq!(
                txn.add_in_place(0, b"c", now_ms(), 3).unwrap(),
                InPlaceAdd::Added(13)
            );
            assert_eq!(
                txn.add_in_place(0, b"c", now_ms(), 4).unwrap(),
                InPlaceAdd::Added(17)
            );
            // In the engine at once.
            assert_eq!(counter(&ks, b"c"), 17);
        }
        Keyspace::close(ks).unwrap();
        let ks = member(dir.path());
        assert_eq!(counter(&ks, b"c"), 10);
        assert_eq!(ks.applied_index().unwrap(), 4);

        let mut txn = ks.lock_all(true);
        txn.begin_entry(5);
        txn.allow_direct_adds();
        assert_eq!(
            txn.add_in_place(0, b"c", now_ms(), 5).unwrap(),
            InPlaceAdd::Added(15)
        );
        txn.put_applied_index(5).unwrap();
        txn.commit().unwrap();
        assert!(
            ks.apply_undo().unwrap().left().unwrap().is_empty(),
            "the commit empties it"
        );
        // A crash between the commit and the journal's emptying.
        let ekey = ks.physical_ekey(0, b"c").unwrap();
        assert!(ks.apply_undo().unwrap().note(5, &ekey, 10));
        Keyspace::close(ks).unwrap();
        let ks = member(dir.path());
        assert_eq!(counter(&ks, b"c"), 15);
        assert!(ks.apply_undo().unwrap().left().unwrap().is_empty());

        // Entries 6 and 7 add; an early commit records 6 as applied (a
        // flush's, `Txn::begin_entry`), then the process dies: only
        // entry 7's add is put back.
        {
            let mut txn = ks.lock_all(true);
            txn.forgo_rollback();
            txn.begin_entry(6);
            txn.allow_direct_adds();
            assert_eq!(
                txn.add_in_place(0, b"c", now_ms(), 1).unwrap(),
                InPlaceAdd::Added(16)
            );
            txn.begin_entry(7);
            assert_eq!(
                txn.add_in_place(0, b"c", now_ms(), 1).unwrap(),
                InPlaceAdd::Added(17)
            );
        }
        let mut early = ks.lock_all(true);
        early.put_applied_index(6).unwrap();
        early.commit().unwrap();
        Keyspace::close(ks).unwrap();
        let ks = member(dir.path());
        assert_eq!(counter(&ks, b"c"), 16);
    }

    /// Where a direct add is not allowed, the caller's general path runs
    /// (the write is buffered with the rest): without `allow_direct_adds`,
    /// while paused (EXEC, scripts), for a key the transaction already
    /// wrote, and on a keyspace that is no member's.
    #[test]
    fn direct_adds_only_where_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let ks = member(dir.path());
        set_at(&ks, b"c", 1, 1);
        let elsewhere = |txn: &mut crate::Txn<'_>, key: &[u8]| {
            assert_eq!(
                txn.add_in_place(0, key, now_ms(), 1).unwrap(),
                InPlaceAdd::Elsewhere
            );
        };
        let mut txn = ks.lock_all(true);
        elsewhere(&mut txn, b"c");
        txn.begin_entry(2);
        txn.allow_direct_adds();
        txn.pause_direct_adds(true);
        elsewhere(&mut txn, b"c");
        txn.pause_direct_adds(false);
        let mut bytes = Vec::new();
        encode_int(&mut bytes, 7, None);
        txn.put(0, b"d", &bytes).unwrap();
        elsewhere(&mut txn, b"d");
        assert_eq!(
            txn.add_in_place(0, b"c", now_ms(), 1).unwrap(),
            InPlaceAdd::Added(2)
        );
        txn.commit().unwrap();
        drop(ks);

        let dir = tempfile::tempdir().unwrap();
        let single = Keyspace::open_dir(dir.path(), &KeyspaceOptions::default())
            .unwrap()
            .keyspace;
        assert!(!dir.path().join(FILE).exists());
        set_at(&single, b"c", 1, 1);
        let mut txn = single.lock_all(true);
        txn.begin_entry(2);
        txn.allow_direct_adds();
        elsewhere(&mut txn, b"c");
    }

    #[test]
    fn entries_come_back_in_order_until_cleared_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let undo = ApplyUndo::open(dir.path(), ModeChoice::Emulated).unwrap();
        assert!(undo.left().unwrap().is_empty());
        assert!(undo.note(7, b"\x00counter", 41));
        assert!(undo.note(8, b"\x00other-key-of-17", u64::MAX));
        assert!(undo.note(9, b"\x00counter", 42));
        drop(undo);
        let undo = ApplyUndo::open(dir.path(), ModeChoice::Emulated).unwrap();
        let noted = |index, key: &[u8], old| Noted {
            index,
            key: key.to_vec(),
            old,
        };
        assert_eq!(
            undo.left().unwrap(),
            vec![
                noted(7, b"\x00counter", 41),
                noted(8, b"\x00other-key-of-17", u64::MAX),
                noted(9, b"\x00counter", 42),
            ]
        );
        undo.clear();
        assert!(undo.left().unwrap().is_empty());
        assert!(undo.note(20, b"\x00k", 1));
        assert_eq!(undo.left().unwrap(), vec![noted(20, b"\x00k", 1)]);
    }

    #[test]
    fn a_full_journal_or_a_long_key_notes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let undo = ApplyUndo::open(dir.path(), ModeChoice::Emulated).unwrap();
        assert!(!undo.note(1, &vec![b'k'; MAX_KEY_BYTES + 1], 0));
        let key = vec![b'k'; MAX_KEY_BYTES];
        let mut noted = 0;
        let mut half = None;
        while undo.note(1, &key, noted) {
            noted += 1;
            if half.is_none() && undo.half_full() {
                half = Some(noted);
            }
        }
        assert_eq!(undo.refused(), 1, "the note that found no room");
        let per_entry = ENTRY_HEADER + MAX_KEY_BYTES as u64;
        assert_eq!(
            half,
            Some((FILE_BYTES - HEADER_BYTES) / 2 / per_entry + 1),
            "half full once past half of the room"
        );
        assert_eq!(
            noted,
            (FILE_BYTES - HEADER_BYTES) / (ENTRY_HEADER + MAX_KEY_BYTES as u64)
        );
        assert_eq!(undo.left().unwrap().len() as u64, noted);
        undo.clear();
        assert!(!undo.half_full());
        // The count of bytes noted is read back from the file at open.
        for _ in 0..half.unwrap() {
            assert!(undo.note(2, &key, 0));
        }
        drop(undo);
        let undo = ApplyUndo::open(dir.path(), ModeChoice::Emulated).unwrap();
        assert!(undo.half_full());
    }

    #[test]
    fn a_damaged_journal_is_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        drop(ApplyUndo::open(dir.path(), ModeChoice::Emulated).unwrap());
        std::fs::write(dir.path().join(FILE), vec![0xAB; FILE_BYTES as usize]).unwrap();
        let refused = ApplyUndo::open(dir.path(), ModeChoice::Emulated)
            .err()
            .expect("a damaged journal opened");
        assert!(refused.to_string().contains("damaged"), "{refused}");
    }
}
