//! The durable Raft log: the entries raft-rs hands the node, appended to one
//! persistent region, and the node's hard state (term, vote, commit) and
//! membership, kept in two alternating slots of the region's first page.
//!
//! Layout of `DIR/raft/log`:
//! - page 0: the magic word, then two state slots (`[crc u32][len u32]`
//!   body); a write goes to the slot not holding the newest state, so a
//!   torn write leaves the other;
//! - from `RECORDS_START`, records back to back, each
//!   `[data_len u32][crc u32][term u64][index u64][type u32][ctx_len u32]`
//!   then data and context, padded to 8 bytes; after the last record, an
//!   all-zero header (the end).
//!
//! A conflicting append (raft-rs's "truncate the uncommitted suffix")
//! rewrites from the first conflicting record's offset. Recovery reads
//! records while each checks out (CRC, index one past the previous, term
//! not below it) and stops at the first that does not: a torn tail, the
//! end mark, or a stale record of a longer, truncated log. A stale record
//! that passes those checks has the term of the entry a leader wrote at
//! that index, so by Raft's log matching it is that entry.
//!
//! The DRAM side keeps 16 bytes per entry (its offset and term); `entries`
//! decodes records from the mapping when raft-rs asks (sending to a
//! follower that lags, applying after a restart).
//!
//! Compaction drops a prefix the state machine has applied: the log is
//! rewritten into `DIR/raft/log.compact` holding the entries kept, the
//! state slots carrying the compaction point (the index and term of the
//! last entry dropped, what raft-rs calls the snapshot's), then renamed
//! over `log`. A crash before the rename leaves the old log (the leftover
//! is removed at open); after it, the new one. Installing a snapshot from
//! the leader is the same rewrite with no entries kept.
//!
//! The file a compaction replaces is kept, mapped, as `log.spare`, and the
//! next compaction writes into it rather than into a new file: a new
//! file's every page was faulted in, zeroed and allocated again (about
//! two thirds of the Raft loop's time under a stream of writes, and the
//! old file's unmapping more), where the spare's pages are resident and
//! its blocks allocated. What it held before is the log of two
//! compactions ago: its state slots are cleared, and recovery stops
//! at the end mark after the records kept (a stale record beyond it
//! would fail the index check anyway). A spare is never used across a
//! restart: it may be a second name of `log` itself (a crash between the
//! link and the rename), so `open` removes it.
//!
//! Snapshots themselves are the state machine's (`Snapshots`): raft-rs asks
//! the log for one when a follower needs entries it no longer holds; the
//! first ask starts a build on the apply thread and answers "temporarily
//! unavailable", and raft-rs asks again at the next heartbeat.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Buf, Bytes};
use engram_pmem::{PmemOffset, Region, RegionOptions};
use raft::prelude::{ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

use crate::error::{Error, Result};
use crate::snapshots::Snapshots;

/// The file's first word.
const MAGIC: u64 = u64::from_le_bytes(*b"ENGRAFT1");
const SLOT_BYTES: u64 = 1024;
const SLOTS: [u64; 2] = [1024, 2048];
const RECORDS_START: u64 = 4096;
const RECORD_HEADER: u64 = 32;
/// The region grows by this much at a time (and starts at it). Growing
/// allocates and pre-faults the new part on the Raft loop's thread (about
/// 1 ms a MiB here; when synced it also writes zeros over it, a few ms a
/// MiB more, so that later syncs write no extent changes), so the step is
/// kept well under an election timeout.
const GROWTH: u64 = 8 << 20;
/// A compaction's new log, before its rename over `log`.
const COMPACTING: &str = "log.compact";
/// The log the last compaction replaced, for the next to write into.
const SPARE: &str = "log.spare";
/// Most voters plus learners a slot can name.
const MAX_MEMBERS: usize = 100;

/// When the log's records are synced (`LogSync` other than `Never`):
/// keep the page cache in single pages, so each `msync` writes back the
/// pages just written, not the 2 MiB folios around them
/// (`RegionOptions::fine_writeback`). When they are not, the default:
/// single pages cost a read fault and then a write fault per page of
/// every growth and every compaction's new file, on the Raft loop's
/// thread, for syncs that never come.
fn region_options(synced: bool) -> RegionOptions {
    RegionOptions {
        fine_writeback: synced,
        ..RegionOptions::default()
    }
}

/// What a state slot holds.
struct Slot {
    seq: u64,
    hard_state: HardState,
    conf_state: ConfState,
    snap_index: u64,
    snap_term: u64,
}

#[derive(Clone, Copy, Debug)]
struct Located {
    offset: u64,
    term: u64,
}

pub struct RaftLog {
    region: Region,
    dir: PathBuf,
    /// The compaction point: index and term of the last entry dropped
    /// (0, 0 before any), so `first_index` is `snap_index + 1`.
    snap_index: u64,
    snap_term: u64,
    /// Index of `entries[0]`.
    first_index: u64,
    entries: Vec<Located>,
    /// Where the next record goes.
    tail: u64,
    hard_state: HardState,
    conf_state: ConfState,
    /// Sequence of the newest state slot, and which slot holds it.
    state_seq: u64,
    state_slot: usize,
    /// The lowest offset written since the last `sync` (records), and
    /// whether a state slot was.
    unsynced_from: Option<u64>,
    unsynced_slot: Option<u64>,
    /// Syncs that wrote records back since open (`records_syncs`).
    records_syncs: u64,
    /// Whether `open` created the log (the node starts with no history).
    created: bool,
    /// Whether the log's records are synced (`LogSync` other than
    /// `Never`): its file then keeps single pages (`region_options`), and
    /// a compaction syncs its new file before the rename. When they are
    /// not, a write is promised to outlive the process only, which the
    /// page cache does: the rename alone switches files. Set at open, and
    /// by the node before a compaction writes the next file.
    pub(crate) synced: bool,
    /// The file the last compaction replaced, still mapped (`SPARE`).
    spare: Option<Region>,
    /// Where snapshots for lagging followers come from (none in tests
    /// of the log alone).
    snapshots: Option<Arc<Snapshots>>,
}

impl RaftLog {
    /// Opens the log in `dir` (created with `voters` as the first
    /// membership if there is none), its records synced every round.
    pub fn open(dir: &Path, voters: &[u64]) -> Result<RaftLog> {
        RaftLog::open_with(dir, voters, true)
    }

    /// As `open`; `synced` says whether records will be synced
    /// (`RaftLog::synced`).
    pub fn open_with(dir: &Path, voters: &[u64], synced: bool) -> Result<RaftLog> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
        let path = dir.join("log");
        // A compaction that did not reach its rename (the log is whole),
        // and the last one's spare (see the module's notes).
        for leftover in [dir.join(COMPACTING), dir.join(SPARE)] {
            if leftover.exists() {
                std::fs::remove_file(&leftover).map_err(|e| Error::io("removing", &leftover, e))?;
            }
        }
        if !path.exists() {
            let region = Region::create(&path, GROWTH, region_options(synced))?;
            region.store_u64(PmemOffset(0), MAGIC);
            let mut log = RaftLog::empty(region, dir, synced);
            log.created = true;
            log.conf_state.voters = voters.to_vec();
            log.write_state();
            log.write_end();
            log.sync(true)?;
            engram_pmem::sync_directory(dir).map_err(|e| Error::io("syncing", dir, e))?;
            return Ok(log);
        }
        let region = Region::open(&path, region_options(synced))?;
        if region.len() < RECORDS_START + RECORD_HEADER || region.load_u64(PmemOffset(0)) != MAGIC {
            return Err(Error::Corrupt(format!(
                "{}: not an Engram Raft log (bad magic)",
                path.display()
            )));
        }
        let mut log = RaftLog::empty(region, dir, synced);
        log.read_state(&path)?;
        log.first_index = log.snap_index + 1;
        log.read_records();
        Ok(log)
    }

    fn empty(region: Region, dir: &Path, synced: bool) -> RaftLog {
        RaftLog {
            region,
            dir: dir.to_path_buf(),
            snap_index: 0,
            snap_term: 0,
            first_index: 1,
            entries: Vec::new(),
            tail: RECORDS_START,
            hard_state: HardState::default(),
            conf_state: ConfState::default(),
            state_seq: 0,
            state_slot: 1,
            unsynced_from: None,
            records_syncs: 0,
            unsynced_slot: None,
            created: false,
            synced,
            spare: None,
            snapshots: None,
        }
    }

    /// Where `Storage::snapshot` gets snapshots from.
    pub(crate) fn set_snapshots(&mut self, snapshots: Arc<Snapshots>) {
        self.snapshots = Some(snapshots);
    }

    /// Whether `open` created the log: this node has no Raft history (a
    /// new node, or one that lost its directory).
    pub fn was_created(&self) -> bool {
        self.created
    }

    /// The compaction point: the index of the last entry dropped (0 if
    /// none ever was).
    pub fn compacted_to(&self) -> u64 {
        self.snap_index
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    pub fn last_index(&self) -> u64 {
        self.first_index + self.entries.len() as u64 - 1
    }

    /// Bytes of records in the log (for INFO).
    pub fn bytes(&self) -> u64 {
        self.tail - RECORDS_START
    }

    /// Appends entries raft-rs made ready; the first may overwrite the
    /// uncommitted suffix (a conflict), never a committed entry.
    pub fn append(&mut self, entries: &[Entry]) -> Result<()> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        if first.index < self.first_index || first.index > self.last_index() + 1 {
            return Err(Error::Internal(format!(
                "append at index {} to a log holding {}..={}",
                first.index,
                self.first_index,
                self.last_index()
            )));
        }
        if first.index <= self.hard_state.commit {
            return Err(Error::Internal(format!(
                "append at index {} would overwrite committed entries (commit {})",
                first.index, self.hard_state.commit
            )));
        }
        let keep = (first.index - self.first_index) as usize;
        if keep < self.entries.len() {
            self.tail = self.entries[keep].offset;
            self.entries.truncate(keep);
        }
        let start = self.tail;
        for entry in entries {
            self.write_record(entry)?;
        }
        self.write_end();
        self.unsynced_from = Some(self.unsynced_from.map_or(start, |from| from.min(start)));
        Ok(())
    }

    fn write_record(&mut self, entry: &Entry) -> Result<()> {
        let payload = entry.data.len() + entry.context.len();
        let len = RECORD_HEADER + (payload as u64).next_multiple_of(8);
        self.ensure_room(len + RECORD_HEADER)?;
        let mut record = Vec::with_capacity(len as usize);
        record.extend_from_slice(&(entry.data.len() as u32).to_le_bytes());
        record.extend_from_slice(&[0; 4]);
        record.extend_from_slice(&entry.term.to_le_bytes());
        record.extend_from_slice(&entry.index.to_le_bytes());
        record.extend_from_slice(&(entry.entry_type as u32).to_le_bytes());
        record.extend_from_slice(&(entry.context.len() as u32).to_le_bytes());
        record.extend_from_slice(&entry.data);
        record.extend_from_slice(&entry.context);
        record.resize(len as usize, 0);
        let crc = crc32c::crc32c(&record[8..]);
        record[4..8].copy_from_slice(&crc.to_le_bytes());
        self.region.write(PmemOffset(self.tail), &record);
        self.entries.push(Located {
            offset: self.tail,
            term: entry.term,
        });
        self.tail += len;
        Ok(())
    }

    /// The all-zero header after the last record.
    fn write_end(&mut self) {
        self.region
            .write(PmemOffset(self.tail), &[0; RECORD_HEADER as usize]);
    }

    fn ensure_room(&self, bytes: u64) -> Result<()> {
        let needed = self.tail + bytes;
        if needed > self.region.len() {
            self.region
                .grow_to(needed.next_multiple_of(GROWTH))
                .map_err(Error::Pmem)?;
        }
        Ok(())
    }

    /// Records raft-rs's hard state. Term and vote are written (the next
    /// `sync` makes them durable: a node must never vote twice in a term);
    /// a commit index alone is only kept in DRAM and written with the next
    /// state that must be, because a lost commit index is safe (Raft
    /// learns it again from the leader, and a restart starts from at least
    /// the applied index, see `Replica::start`). That saves a sync of the
    /// state slot on nearly every round of appends.
    pub fn set_hard_state(&mut self, hard_state: HardState) {
        let must_write =
            hard_state.term != self.hard_state.term || hard_state.vote != self.hard_state.vote;
        self.hard_state = hard_state;
        if must_write {
            self.write_state();
        }
    }

    /// Records a commit index (raft-rs's light ready, or the applied index
    /// at start); written with the next state write, and recovered as at
    /// least the applied index (see `Replica::start`).
    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    pub fn set_conf_state(&mut self, conf_state: ConfState) {
        self.conf_state = conf_state;
        self.write_state();
    }

    fn write_state(&mut self) {
        let hs = &self.hard_state;
        let cs = &self.conf_state;
        let mut body = Vec::with_capacity(128);
        body.extend_from_slice(&(self.state_seq + 1).to_le_bytes());
        body.extend_from_slice(&hs.term.to_le_bytes());
        body.extend_from_slice(&hs.vote.to_le_bytes());
        body.extend_from_slice(&hs.commit.to_le_bytes());
        for ids in [
            &cs.voters,
            &cs.learners,
            &cs.voters_outgoing,
            &cs.learners_next,
        ] {
            body.extend_from_slice(&(ids.len() as u32).to_le_bytes());
            for id in ids.iter().take(MAX_MEMBERS) {
                body.extend_from_slice(&id.to_le_bytes());
            }
        }
        body.push(cs.auto_leave as u8);
        body.extend_from_slice(&self.snap_index.to_le_bytes());
        body.extend_from_slice(&self.snap_term.to_le_bytes());
        let mut slot = Vec::with_capacity(body.len() + 8);
        slot.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        slot.extend_from_slice(&(body.len() as u32).to_le_bytes());
        slot.extend_from_slice(&body);
        assert!(
            slot.len() as u64 <= SLOT_BYTES,
            "membership too large for a slot"
        );
        let next = 1 - self.state_slot;
        self.region.write(PmemOffset(SLOTS[next]), &slot);
        self.state_slot = next;
        self.state_seq += 1;
        self.unsynced_slot = Some(SLOTS[next]);
    }

    fn read_state(&mut self, path: &Path) -> Result<()> {
        let mut best: Option<(usize, Slot)> = None;
        for (which, &at) in SLOTS.iter().enumerate() {
            let Some(slot) = self.decode_slot(at) else {
                continue;
            };
            if best.as_ref().is_none_or(|b| slot.seq > b.1.seq) {
                best = Some((which, slot));
            }
        }
        let Some((
            which,
            Slot {
                seq,
                hard_state: hs,
                conf_state: cs,
                snap_index,
                snap_term,
            },
        )) = best
        else {
            return Err(Error::Corrupt(format!(
                "{}: neither state slot is readable",
                path.display()
            )));
        };
        self.state_seq = seq;
        self.state_slot = which;
        self.hard_state = hs;
        self.conf_state = cs;
        self.snap_index = snap_index;
        self.snap_term = snap_term;
        Ok(())
    }

    fn decode_slot(&self, at: u64) -> Option<Slot> {
        let head = self.region.read(PmemOffset(at), 8);
        let crc = u32::from_le_bytes(head[0..4].try_into().unwrap());
        let len = u32::from_le_bytes(head[4..8].try_into().unwrap()) as u64;
        if !(49..=SLOT_BYTES - 8).contains(&len) {
            return None;
        }
        let body = self.region.read(PmemOffset(at + 8), len);
        if crc32c::crc32c(body) != crc {
            return None;
        }
        let mut reader = body;
        let seq = reader.try_get_u64_le().ok()?;
        let hs = HardState {
            term: reader.try_get_u64_le().ok()?,
            vote: reader.try_get_u64_le().ok()?,
            commit: reader.try_get_u64_le().ok()?,
            ..Default::default()
        };
        let mut cs = ConfState::default();
        for ids in [
            &mut cs.voters,
            &mut cs.learners,
            &mut cs.voters_outgoing,
            &mut cs.learners_next,
        ] {
            let n = reader.try_get_u32_le().ok()? as usize;
            for _ in 0..n.min(MAX_MEMBERS) {
                ids.push(reader.try_get_u64_le().ok()?);
            }
        }
        cs.auto_leave = reader.try_get_u8().ok()? != 0;
        // The compaction point (absent from a log never compacted by a
        // build before compaction existed).
        Some(Slot {
            seq,
            hard_state: hs,
            conf_state: cs,
            snap_index: reader.try_get_u64_le().unwrap_or(0),
            snap_term: reader.try_get_u64_le().unwrap_or(0),
        })
    }

    /// Reads records from the start while they check out.
    fn read_records(&mut self) {
        let mut at = RECORDS_START;
        let mut previous: Option<(u64, u64)> = None;
        while let Some((index, term, len)) = self.check_record(at) {
            if let Some((prev_index, prev_term)) = previous {
                if index != prev_index + 1 || term < prev_term {
                    break;
                }
            } else if index != self.first_index {
                break;
            }
            self.entries.push(Located { offset: at, term });
            previous = Some((index, term));
            at += len;
        }
        self.tail = at;
    }

    /// A record's index, term and length, if its header and CRC hold.
    fn check_record(&self, at: u64) -> Option<(u64, u64, u64)> {
        if at + RECORD_HEADER > self.region.len() {
            return None;
        }
        let head = self.region.read(PmemOffset(at), RECORD_HEADER);
        let data_len = u32::from_le_bytes(head[0..4].try_into().unwrap()) as u64;
        let crc = u32::from_le_bytes(head[4..8].try_into().unwrap());
        let term = u64::from_le_bytes(head[8..16].try_into().unwrap());
        let index = u64::from_le_bytes(head[16..24].try_into().unwrap());
        let ctx_len = u32::from_le_bytes(head[28..32].try_into().unwrap()) as u64;
        if index == 0 {
            return None;
        }
        let len = RECORD_HEADER + (data_len + ctx_len).next_multiple_of(8);
        if at + len > self.region.len() {
            return None;
        }
        let record = self.region.read(PmemOffset(at), len);
        (crc32c::crc32c(&record[8..]) == crc).then_some((index, term, len))
    }

    fn decode(&self, located: Located) -> Entry {
        let head = self.region.read(PmemOffset(located.offset), RECORD_HEADER);
        let data_len = u32::from_le_bytes(head[0..4].try_into().unwrap()) as u64;
        let ctx_len = u32::from_le_bytes(head[28..32].try_into().unwrap()) as u64;
        let kind = u32::from_le_bytes(head[24..28].try_into().unwrap());
        let payload = self.region.read(
            PmemOffset(located.offset + RECORD_HEADER),
            data_len + ctx_len,
        );
        Entry {
            term: located.term,
            index: u64::from_le_bytes(head[16..24].try_into().unwrap()),
            entry_type: match kind {
                1 => EntryType::EntryConfChange,
                2 => EntryType::EntryConfChangeV2,
                _ => EntryType::EntryNormal,
            },
            data: Bytes::copy_from_slice(&payload[..data_len as usize]),
            context: Bytes::copy_from_slice(&payload[data_len as usize..]),
            ..Default::default()
        }
    }

    /// Makes what was written since the last call durable: one persist
    /// (DAX) or `msync` (emulated) of the new records, one of the state
    /// slot. `records`: whether new records must be made durable now
    /// (the node's durability); they are whenever the state slot is (a
    /// new term or vote), so that no durable commit index ever points
    /// past the durable records.
    pub fn sync(&mut self, records: bool) -> Result<()> {
        if records || self.unsynced_slot.is_some() {
            self.sync_records()?;
        }
        if let Some(slot) = self.unsynced_slot.take() {
            self.region.persist(PmemOffset(slot), SLOT_BYTES);
            self.region.sync(PmemOffset(slot), SLOT_BYTES)?;
        }
        Ok(())
    }

    fn sync_records(&mut self) -> Result<()> {
        if let Some(from) = self.unsynced_from.take() {
            let len = self.tail + RECORD_HEADER - from;
            self.region.persist(PmemOffset(from), len);
            self.region.sync(PmemOffset(from), len)?;
            self.records_syncs += 1;
        }
        Ok(())
    }

    /// How many syncs wrote appended records back since the log opened
    /// (INFO's `raft_log_syncs`: how often `LogSync` asked, in effect).
    pub fn records_syncs(&self) -> u64 {
        self.records_syncs
    }

    /// Drops the entries up to `to` (which the state machine has applied
    /// durably): the log is rewritten with the entries after it. Returns
    /// whether anything was dropped.
    pub fn compact(&mut self, to: u64) -> Result<bool> {
        let to = to.min(self.hard_state.commit).min(self.last_index());
        if to < self.first_index {
            return Ok(false);
        }
        let term = self.entries[(to - self.first_index) as usize].term;
        let keep = (to + 1 - self.first_index) as usize;
        self.rewrite(to, term, keep)?;
        Ok(true)
    }

    /// Installs a snapshot's point (raft-rs's `Ready::snapshot`, once the
    /// state machine's copy of it is durable): every entry goes, the log
    /// starts after the snapshot, its membership is the snapshot's, and
    /// the commit index is at least its index.
    pub fn apply_snapshot(&mut self, metadata: &SnapshotMetadata) -> Result<()> {
        self.hard_state.commit = self.hard_state.commit.max(metadata.index);
        self.hard_state.term = self.hard_state.term.max(metadata.term);
        self.conf_state = metadata.get_conf_state().clone();
        let keep = self.entries.len();
        self.rewrite(metadata.index, metadata.term, keep)
    }

    /// Writes a new log file with the compaction point `(index, term)`,
    /// the state, and the entries from `entries[keep..]`, and renames it
    /// over the log.
    fn rewrite(&mut self, index: u64, term: u64, keep: usize) -> Result<()> {
        let kept = &self.entries[keep..];
        let bytes = kept.first().map_or(0, |l| self.tail - l.offset);
        let size = (RECORDS_START + bytes + RECORD_HEADER).next_multiple_of(GROWTH);
        let temporary = self.dir.join(COMPACTING);
        let spare_path = self.dir.join(SPARE);
        let _ = std::fs::remove_file(&temporary);
        let region = match self.spare.take() {
            Some(spare) if spare.keeps_single_pages() == self.synced => {
                std::fs::rename(&spare_path, &temporary)
                    .map_err(|e| Error::io("renaming", &spare_path, e))?;
                spare.grow_to(size).map_err(Error::Pmem)?;
                // Only the slot `write_state` fills below may hold a state.
                spare.write(PmemOffset(SLOTS[0]), &[0; 2 * SLOT_BYTES as usize]);
                spare
            }
            _ => {
                let _ = std::fs::remove_file(&spare_path);
                Region::create(&temporary, size, region_options(self.synced))?
            }
        };
        region.store_u64(PmemOffset(0), MAGIC);
        let mut next = RaftLog::empty(region, &self.dir, self.synced);
        next.snap_index = index;
        next.snap_term = term;
        next.first_index = index + 1;
        next.hard_state = self.hard_state.clone();
        next.conf_state = self.conf_state.clone();
        next.state_seq = self.state_seq;
        next.write_state();
        if let Some(first) = kept.first() {
            // The records kept lie back to back up to the tail: one copy,
            // every offset moved by the same distance.
            let from = first.offset;
            let records = self.region.read(PmemOffset(from), self.tail - from);
            next.region.write(PmemOffset(RECORDS_START), records);
            next.entries = kept
                .iter()
                .map(|l| Located {
                    offset: l.offset - from + RECORDS_START,
                    term: l.term,
                })
                .collect();
            next.tail = RECORDS_START + (self.tail - from);
        }
        next.write_end();
        next.region
            .persist(PmemOffset(0), next.tail + RECORD_HEADER);
        if self.synced {
            // Only what this rewrite wrote: a spare's other pages hold its
            // earlier life, which nothing reads.
            next.region.sync(PmemOffset(0), next.tail + RECORD_HEADER)?;
        }
        let path = self.dir.join("log");
        // The log replaced stays, under a second name, as the next spare.
        let spared = std::fs::hard_link(&path, &spare_path).is_ok();
        std::fs::rename(&temporary, &path).map_err(|e| Error::io("renaming", &temporary, e))?;
        if self.synced {
            engram_pmem::sync_directory(&self.dir)
                .map_err(|e| Error::io("syncing", &self.dir, e))?;
        }
        next.snapshots = self.snapshots.take();
        let replaced = std::mem::replace(self, next);
        if spared {
            self.spare = Some(replaced.region);
        }
        Ok(())
    }

    fn unavailable(&self, index: u64) -> raft::Error {
        if index < self.first_index {
            raft::Error::Store(StorageError::Compacted)
        } else {
            raft::Error::Store(StorageError::Unavailable)
        }
    }
}

impl Storage for RaftLog {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index() + 1 {
            return Err(self.unavailable(high));
        }
        let max_size = max_size.into().unwrap_or(u64::MAX);
        let mut out = Vec::with_capacity((high - low) as usize);
        let mut size = 0u64;
        for index in low..high {
            let entry = self.decode(self.entries[(index - self.first_index) as usize]);
            size += (entry.data.len() + entry.context.len()) as u64 + 16;
            // raft-rs's rule: at least one entry, whatever its size.
            if !out.is_empty() && size > max_size {
                break;
            }
            out.push(entry);
        }
        Ok(out)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index == self.snap_index {
            // The compaction point (0 before any: the log starts at 1).
            return Ok(self.snap_term);
        }
        if index < self.first_index || index > self.last_index() {
            return Err(self.unavailable(index));
        }
        Ok(self.entries[(index - self.first_index) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first_index)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(RaftLog::last_index(self))
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let unavailable = raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable);
        let Some(snapshots) = &self.snapshots else {
            return Err(unavailable);
        };
        // A snapshot older than the compaction point would leave the
        // follower short of entries again.
        let floor = request_index.max(self.snap_index);
        match snapshots.ready_at_least(floor) {
            Some((index, data)) if index <= RaftLog::last_index(self) => {
                let mut metadata = SnapshotMetadata {
                    index,
                    term: self.term(index)?,
                    ..Default::default()
                };
                metadata.set_conf_state(self.conf_state.clone());
                let mut snapshot = Snapshot {
                    data,
                    ..Default::default()
                };
                snapshot.set_metadata(metadata);
                Ok(snapshot)
            }
            _ => {
                snapshots.request(floor);
                Err(unavailable)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry {
            index,
            term,
            data: Bytes::copy_from_slice(data),
            ..Default::default()
        }
    }

    fn ctx() -> GetEntriesContext {
        GetEntriesContext::empty(false)
    }

    #[test]
    fn entries_and_state_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = RaftLog::open(dir.path(), &[1, 2, 3]).unwrap();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, b"bb"), entry(3, 2, b"")])
                .unwrap();
            log.set_hard_state(HardState {
                term: 2,
                vote: 3,
                commit: 2,
                ..Default::default()
            });
            log.sync(true).unwrap();
        }
        let log = RaftLog::open(dir.path(), &[9]).unwrap();
        assert_eq!(log.conf_state().voters, vec![1, 2, 3]);
        assert_eq!(
            (
                log.hard_state().term,
                log.hard_state().vote,
                log.hard_state().commit
            ),
            (2, 3, 2)
        );
        assert_eq!(RaftLog::last_index(&log), 3);
        let got = log.entries(1, 4, None, ctx()).unwrap();
        let data: Vec<&[u8]> = got.iter().map(|e| &e.data[..]).collect();
        assert_eq!(data, vec![&b"a"[..], b"bb", b""]);
        assert_eq!(log.term(3).unwrap(), 2);
        assert_eq!(log.term(0).unwrap(), 0);
        assert!(log.term(4).is_err());
    }

    #[test]
    fn a_conflicting_append_truncates_and_the_stale_tail_is_not_recovered() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = RaftLog::open(dir.path(), &[1]).unwrap();
            let long: Vec<Entry> = (1..=6).map(|i| entry(i, 1, b"old entry")).collect();
            log.append(&long).unwrap();
            // A new leader of term 2 replaces 3.. with one shorter entry.
            log.append(&[entry(3, 2, b"n")]).unwrap();
            log.sync(true).unwrap();
            assert_eq!(RaftLog::last_index(&log), 3);
        }
        let log = RaftLog::open(dir.path(), &[1]).unwrap();
        assert_eq!(RaftLog::last_index(&log), 3);
        assert_eq!(log.entries(3, 4, None, ctx()).unwrap()[0].data, &b"n"[..]);
        assert_eq!(log.term(3).unwrap(), 2);
    }

    #[test]
    fn a_torn_record_ends_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let offset;
        {
            let mut log = RaftLog::open(dir.path(), &[1]).unwrap();
            log.append(&[entry(1, 1, b"keep"), entry(2, 1, b"torn")])
                .unwrap();
            log.sync(true).unwrap();
            offset = log.entries[1].offset;
            // A byte of the second record's data flips.
            let at = PmemOffset(offset + RECORD_HEADER);
            log.region.write(at, b"X");
            log.region.sync_all().unwrap();
        }
        let log = RaftLog::open(dir.path(), &[1]).unwrap();
        assert_eq!(RaftLog::last_index(&log), 1);
        assert_eq!(log.tail, offset);
    }

    #[test]
    fn appending_over_committed_entries_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RaftLog::open(dir.path(), &[1]).unwrap();
        log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
        log.set_hard_state(HardState {
            commit: 2,
            ..Default::default()
        });
        assert!(log.append(&[entry(2, 2, b"x")]).is_err());
        assert!(log.append(&[entry(5, 2, b"gap")]).is_err());
        assert_eq!(RaftLog::last_index(&log), 2);
    }

    #[test]
    fn a_torn_state_slot_falls_back_to_the_other() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = RaftLog::open(dir.path(), &[1]).unwrap();
            let mut hs = HardState {
                term: 4,
                ..Default::default()
            };
            log.set_hard_state(hs.clone());
            log.sync(true).unwrap();
            hs.term = 5;
            log.set_hard_state(hs);
            log.sync(true).unwrap();
            // The newest slot is torn.
            let slot = SLOTS[log.state_slot];
            log.region.write(PmemOffset(slot + 12), &[0xAB]);
            log.region.sync_all().unwrap();
        }
        let log = RaftLog::open(dir.path(), &[1]).unwrap();
        assert_eq!(log.hard_state().term, 4);
    }

    #[test]
    fn a_commit_index_alone_is_not_written() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = RaftLog::open(dir.path(), &[1]).unwrap();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
            log.set_hard_state(HardState {
                term: 1,
                vote: 1,
                commit: 1,
                ..Default::default()
            });
            log.sync(true).unwrap();
            // Only the commit index moves: nothing to sync in the slots.
            log.set_hard_state(HardState {
                term: 1,
                vote: 1,
                commit: 2,
                ..Default::default()
            });
            assert!(log.unsynced_slot.is_none());
            assert_eq!(log.hard_state().commit, 2);
            log.sync(true).unwrap();
        }
        let log = RaftLog::open(dir.path(), &[1]).unwrap();
        assert_eq!((log.hard_state().term, log.hard_state().commit), (1, 1));
    }

    #[test]
    fn the_log_grows_past_its_first_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![0x5Au8; GROWTH as usize + 4096];
        {
            let mut log = RaftLog::open(dir.path(), &[1]).unwrap();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, &big), entry(3, 1, b"c")])
                .unwrap();
            log.sync(true).unwrap();
            assert!(log.region.len() > GROWTH);
        }
        let log = RaftLog::open(dir.path(), &[1]).unwrap();
        let got = log.entries(1, 4, None, ctx()).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].data.len(), big.len());
        assert_eq!(&got[2].data[..], b"c");
    }

    #[test]
    fn a_file_that_is_not_a_log_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("log"), vec![7u8; 8192]).unwrap();
        let error = RaftLog::open(dir.path(), &[1]).err().expect("refused");
        assert!(
            error.to_string().contains("not an Engram Raft log"),
            "{error}"
        );
    }

    /// Single pages only for a log whose records are synced; the next
    /// file of a compaction follows the choice of the moment.
    #[test]
    fn the_log_keeps_single_pages_only_when_its_records_are_synced() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RaftLog::open_with(dir.path(), &[1], false).unwrap();
        assert!(!log.region.keeps_single_pages());
        let entries: Vec<Entry> = (1..=4).map(|i| entry(i, 1, b"x")).collect();
        log.append(&entries).unwrap();
        log.set_commit(4);
        log.sync(false).unwrap();
        log.synced = true;
        assert!(log.compact(2).unwrap());
        assert!(log.region.keeps_single_pages());
        drop(log);
        let log = RaftLog::open_with(dir.path(), &[1], false).unwrap();
        assert!(!log.region.keeps_single_pages());
        assert_eq!((log.first_index, RaftLog::last_index(&log)), (3, 4));
        assert!(RaftLog::open(dir.path(), &[1])
            .unwrap()
            .region
            .keeps_single_pages());
    }

    /// The second compaction writes into the file the first replaced
    /// (the same inode comes back as `log`), stale records and state of
    /// its earlier life are not recovered, and a reopen drops the spare,
    /// even one that is a second name of the log (a crash between the
    /// link and the rename).
    #[test]
    fn a_compaction_writes_into_the_file_the_last_one_replaced() {
        for synced in [true, false] {
            compaction_reuses_the_spare(synced);
        }
    }

    fn compaction_reuses_the_spare(synced: bool) {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let inode = |name: &str| std::fs::metadata(dir.path().join(name)).unwrap().ino();
        let mut log = RaftLog::open_with(dir.path(), &[1], synced).unwrap();
        let first = inode("log");
        let entries: Vec<Entry> = (1..=30)
            .map(|i| entry(i, 1, format!("e{i}").repeat(50).as_bytes()))
            .collect();
        log.append(&entries).unwrap();
        log.set_commit(30);
        log.sync(synced).unwrap();
        assert!(log.compact(10).unwrap());
        assert_eq!(inode(SPARE), first);
        assert_ne!(inode("log"), first);
        assert!(log.compact(28).unwrap());
        assert_eq!(inode("log"), first, "the spare was not reused");
        log.append(&[entry(31, 2, b"e31")]).unwrap();
        log.set_hard_state(HardState {
            term: 2,
            vote: 1,
            commit: 31,
            ..Default::default()
        });
        log.sync(synced).unwrap();
        drop(log);
        // A crash that left the spare as a second name of the log.
        std::fs::remove_file(dir.path().join(SPARE)).unwrap();
        std::fs::hard_link(dir.path().join("log"), dir.path().join(SPARE)).unwrap();
        let log = RaftLog::open_with(dir.path(), &[1], synced).unwrap();
        assert!(!dir.path().join(SPARE).exists());
        assert_eq!((log.compacted_to(), log.first_index), (28, 29));
        assert_eq!(RaftLog::last_index(&log), 31);
        assert_eq!(log.hard_state().term, 2);
        let data: Vec<Vec<u8>> = log
            .entries(29, 32, None, ctx())
            .unwrap()
            .into_iter()
            .map(|e| e.data.to_vec())
            .collect();
        assert_eq!(
            data,
            vec![
                "e29".repeat(50).into_bytes(),
                "e30".repeat(50).into_bytes(),
                b"e31".to_vec()
            ]
        );
    }

    #[test]
    fn compaction_drops_a_prefix_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = RaftLog::open(dir.path(), &[1, 2]).unwrap();
            let entries: Vec<Entry> = (1..=10)
                .map(|i| entry(i, 1 + i / 5, format!("e{i}").as_bytes()))
                .collect();
            log.append(&entries).unwrap();
            log.set_hard_state(HardState {
                term: 3,
                vote: 1,
                commit: 8,
                ..Default::default()
            });
            log.sync(true).unwrap();
            // Never past the commit index.
            assert!(log.compact(9).unwrap());
            assert_eq!(log.compacted_to(), 8);
            assert_eq!(log.first_index, 9);
            assert_eq!(log.term(8).unwrap(), 2);
            assert_eq!(
                log.entries(7, 9, None, ctx()).err(),
                Some(raft::Error::Store(StorageError::Compacted))
            );
            assert_eq!(
                log.term(7).err(),
                Some(raft::Error::Store(StorageError::Compacted))
            );
            // Nothing more to drop below the point.
            assert!(!log.compact(5).unwrap());
            // Appends go on after it.
            log.append(&[entry(11, 3, b"e11")]).unwrap();
            log.sync(true).unwrap();
            assert!(!dir.path().join(COMPACTING).exists());
        }
        // A compaction's leftover (a crash before its rename) is ignored.
        std::fs::write(dir.path().join(COMPACTING), b"half a log").unwrap();
        let log = RaftLog::open(dir.path(), &[9]).unwrap();
        assert!(!dir.path().join(COMPACTING).exists());
        assert_eq!(log.conf_state().voters, vec![1, 2]);
        assert_eq!((log.compacted_to(), log.term(8).unwrap()), (8, 2));
        assert_eq!((log.first_index, RaftLog::last_index(&log)), (9, 11));
        let data: Vec<Vec<u8>> = log
            .entries(9, 12, None, ctx())
            .unwrap()
            .into_iter()
            .map(|e| e.data.to_vec())
            .collect();
        assert_eq!(data, vec![b"e9".to_vec(), b"e10".to_vec(), b"e11".to_vec()]);
        assert_eq!(log.hard_state().term, 3);
    }

    #[test]
    fn a_snapshot_replaces_the_whole_log() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = RaftLog::open(dir.path(), &[1, 2, 3]).unwrap();
            log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
            log.sync(true).unwrap();
            let mut metadata = SnapshotMetadata {
                index: 50,
                term: 4,
                ..Default::default()
            };
            metadata.set_conf_state(ConfState {
                voters: vec![1, 2, 3],
                ..Default::default()
            });
            log.apply_snapshot(&metadata).unwrap();
            assert_eq!((log.first_index, RaftLog::last_index(&log)), (51, 50));
            assert_eq!(log.hard_state().commit, 50);
            log.append(&[entry(51, 4, b"next")]).unwrap();
            log.sync(true).unwrap();
        }
        let log = RaftLog::open(dir.path(), &[1]).unwrap();
        assert_eq!((log.compacted_to(), log.term(50).unwrap()), (50, 4));
        assert_eq!(RaftLog::last_index(&log), 51);
        assert_eq!(
            log.entries(51, 52, None, ctx()).unwrap()[0].data,
            &b"next"[..]
        );
        assert_eq!(log.hard_state().commit, 50);
    }

    #[test]
    fn records_wait_for_their_sync_unless_the_state_slot_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RaftLog::open(dir.path(), &[1]).unwrap();
        log.sync(true).unwrap();
        log.append(&[entry(1, 1, b"a")]).unwrap();
        // At `process` nothing asks for the records.
        log.sync(false).unwrap();
        assert!(log.unsynced_from.is_some());
        // A new term or vote is synced, and the records with it, so no
        // durable state names entries that are not.
        log.set_hard_state(HardState {
            term: 2,
            vote: 1,
            commit: 1,
            ..Default::default()
        });
        log.sync(false).unwrap();
        assert!(log.unsynced_from.is_none() && log.unsynced_slot.is_none());
        log.append(&[entry(2, 2, b"b")]).unwrap();
        log.sync(true).unwrap();
        assert!(log.unsynced_from.is_none());
    }
}
