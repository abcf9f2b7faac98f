//! The operation log (DIPPER 3.4): small logical records in a persistent
//! region, each committed by persisting its sequence number last.
//!
//! The log is a set of fixed-size segments (format in [`format`]). Writers
//! append through lanes, the engine's own ([`Lanes`], as for its value
//! log): a thread has a home lane, each lane fills one segment at a time,
//! so writers on different lanes never share a lock or a cache line and
//! operations on different keys do not serialise on one another. A record takes its sequence number
//! under its lane's lock; callers that hold a key's lock across append and
//! apply thereby log operations on that key in the order they apply them
//! (conflict order, DIPPER 3.7), which is all replay needs.
//!
//! A checkpoint starts with [`OpLog::cut`]: the swap of the active and the
//! archived log. It takes every lane for an instant, notes the last sequence
//! number handed out, and moves every segment written so far to the archive;
//! later records go to fresh segments. So the archive holds exactly the
//! records up to the cut. When the checkpoint that folds them into images is
//! durable, [`OpLog::release`] returns its segments for reuse.
//!
//! A record too large for one segment gets a run of consecutive segments of
//! its own ([`format`]), claimed from the free ones when enough of them lie
//! side by side and from the file's end otherwise; the writer holds a lane
//! while it writes, so a cut sees the run whole or not at all, and a
//! checkpoint releases it like any other archived segment.
//!
//! For replication, records carry a term and an index, appending never
//! applies anything, and [`OpLog::truncate_after`] voids an uncommitted
//! suffix by appending a truncation record (recovery drops the records it
//! voids: [`void_truncated`]).

pub mod format;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use engram_engine::lanes::Lanes;
use engram_engine::refill::RefillSignal;
use engram_pmem::{PmemOffset, Region, RegionOptions};
use engram_threads::StripedCounter;
use parking_lot::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use format::{Header, RecordHeader, KIND_OPERATION, KIND_TRUNCATE};

/// The file name of the operation log inside a store's directory.
pub const FILE_NAME: &str = "oplog.pmem";

/// Hands out store-wide sequence numbers. The engine's store implements it
/// so that strings and collections share one order.
pub trait Sequencer: Send + Sync {
    /// A new number, larger than every number handed out before.
    fn next_seq(&self) -> u64;
    /// The number the next call to `next_seq` will return (no side effect).
    fn peek_seq(&self) -> u64;
}

#[derive(Clone, Debug)]
pub struct OpLogOptions {
    /// Segment size for a new log (a power of two, 64 KiB ..= 1 GiB); an
    /// existing log keeps its own. An operation larger than a segment gets
    /// a run of segments of its own.
    pub segment_bytes: u64,
    /// Lanes (concurrent appenders that never wait for one another).
    pub lanes: usize,
    /// Free segments kept ready, so that a lane filling its segment claims
    /// a mapped one instead of growing the file on the write path. The
    /// reserve is refilled by [`OpLog::run_provisioner`] (the collections store
    /// runs it on a thread of its own); 0 turns it off.
    pub reserve_segments: usize,
    /// How the file is mapped (mode, flush instruction, crash observer).
    pub region: RegionOptions,
}

impl Default for OpLogOptions {
    fn default() -> Self {
        OpLogOptions {
            segment_bytes: 8 << 20,
            lanes: std::thread::available_parallelism().map_or(4, |n| n.get() * 2),
            reserve_segments: 4,
            region: RegionOptions::default(),
        }
    }
}

/// Where a record goes in a replicated log; `Position::default()` (zeros) on a
/// standalone store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Position {
    pub term: u64,
    pub index: u64,
}

/// A record read back from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub position: Position,
    pub kind: RecordKind,
    pub payload: Vec<u8>,
}

/// A valid record of an archived segment, located rather than copied: what
/// [`OpLog::locate`] returns, so that a checkpoint decodes each payload
/// straight from the log ([`OpLog::payload`]) instead of copying every
/// payload out first. Small (24 bytes), since a checkpoint sorts a few
/// hundred thousand; the rest of the record stays in the log
/// ([`OpLog::position`]). Only [`OpLog::locate`] makes one, so its offset
/// is always that of a validated record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located {
    pub seq: u64,
    /// The record's offset in the file, and its payload's length.
    at: u64,
    len: u32,
    pub kind: RecordKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// An operation for the layer above.
    Operation,
    /// Voids earlier operations with a larger index (payload: the index).
    Truncate,
}

/// The archived half of the log after a [`OpLog::cut`].
#[derive(Debug)]
pub struct Cut {
    /// Every record with a sequence number up to this one is in `segments`;
    /// every later record is not.
    pub through_seq: u64,
    pub segments: Vec<u32>,
}

/// Counters for INFO and benchmarks.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpLogStats {
    pub records: u64,
    pub payload_bytes: u64,
    pub segments_total: u64,
    pub segments_free: u64,
    pub segment_bytes: u64,
    pub file_bytes: u64,
    /// `msync`s of the log file since open (syncs with nothing appended
    /// since the last are skipped and not counted).
    pub syncs: u64,
}

#[derive(Default)]
struct Lane {
    segment: Option<u32>,
    generation: format::Generation,
    /// Next free byte, relative to the segment's start.
    used: u64,
}

struct Segments {
    /// Claimable segments (their records, if any, are covered by a
    /// checkpoint).
    free: Vec<u32>,
    /// Segments that filled up, or were found at recovery holding records
    /// not yet checkpointed: they go to the next cut.
    sealed: Vec<u32>,
    /// Segments in the file.
    count: u32,
    next_generation: u32,
    /// The runs among `sealed` (and those handed out by a cut), by head:
    /// their length in segments.
    runs: HashMap<u32, u32>,
}

impl Segments {
    /// A generation for a claim: never 0 (which marks a segment never
    /// claimed), different from the last one handed out.
    fn take_generation(&mut self) -> u32 {
        let generation = self.next_generation;
        self.next_generation = generation.wrapping_add(1).max(1);
        generation
    }
}

pub struct OpLog {
    region: Region,
    path: PathBuf,
    segment_bytes: u64,
    lanes: Lanes<Lane>,
    segments: Mutex<Segments>,
    /// One file growth at a time, held while the file grows and taken
    /// before `segments` (which is held only to read the count and to
    /// publish the new segments, never across the growth).
    grow: Mutex<()>,
    reserve_segments: usize,
    /// Requests to the thread running [`OpLog::run_provisioner`].
    provision: RefillSignal,
    /// Records and payload bytes appended: per CPU, as every collection
    /// write from every network worker bumps them.
    records: StripedCounter,
    /// `records` when the last sync began that covered them.
    synced_records: AtomicU64,
    syncs: AtomicU64,
    payload_bytes: StripedCounter,
}

/// What [`OpLog::open`] found.
pub struct Recovered {
    pub log: OpLog,
    /// Every valid record, in sequence order, truncations applied.
    pub records: Vec<Record>,
}

impl OpLog {
    /// Opens (or creates) `DIR/oplog.pmem` and reads every valid record.
    /// Segments holding no record after `checkpointed_through` are free at
    /// once; the others go to the next cut.
    pub fn open(dir: &Path, options: OpLogOptions, checkpointed_through: u64) -> Result<Recovered> {
        if !format::valid_segment_bytes(options.segment_bytes) {
            return Err(Error::InvalidOption(format!(
                "operation log segment size {} must be a power of two between {} and {}",
                options.segment_bytes,
                format::MIN_SEGMENT_BYTES,
                format::MAX_SEGMENT_BYTES
            )));
        }
        if options.lanes == 0 {
            return Err(Error::InvalidOption(
                "operation log lanes must be at least 1".into(),
            ));
        }
        let path = dir.join(FILE_NAME);
        let region = if path.exists() {
            Region::open(&path, options.region.clone())?
        } else {
            let region = Region::create(&path, format::SUPERBLOCK_BYTES, options.region.clone())
                .map_err(no_space)?;
            region.write(
                PmemOffset(0),
                &format::encode_superblock(options.segment_bytes),
            );
            region.persist(PmemOffset(0), format::SUPERBLOCK_BYTES);
            region.sync_all()?;
            engram_pmem::sync_directory(dir).map_err(|source| Error::Io {
                context: "syncing directory",
                path: dir.to_path_buf(),
                source,
            })?;
            region
        };
        if region.len() < format::SUPERBLOCK_BYTES {
            return Err(corrupt(&path, "file is shorter than its superblock"));
        }
        let (segment_bytes, version) = format::parse_superblock(region.read(PmemOffset(0), 20))
            .map_err(|what| corrupt(&path, &what))?;
        if version != format::VERSION {
            // Version 1 is version 2 without runs: say that runs may follow
            // (a build that reads only version 1 then refuses the file
            // instead of misreading a run's interior).
            region.write(PmemOffset(0), &format::encode_superblock(segment_bytes));
            region.persist(PmemOffset(0), format::SUPERBLOCK_BYTES);
            region.sync_all()?;
        }
        // A segment the file only partly holds was being added when the
        // process stopped: it was never claimed, so it is ignored (and
        // overwritten when the file grows again).
        let count = ((region.len() - format::SUPERBLOCK_BYTES) / segment_bytes) as u32;
        let mut log = OpLog {
            region,
            path,
            segment_bytes,
            lanes: Lanes::new(options.lanes),
            segments: Mutex::new(Segments {
                free: Vec::new(),
                sealed: Vec::new(),
                count,
                next_generation: 1,
                runs: HashMap::new(),
            }),
            grow: Mutex::new(()),
            reserve_segments: options.reserve_segments,
            provision: RefillSignal::new(),
            records: StripedCounter::new(),
            synced_records: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            payload_bytes: StripedCounter::new(),
        };
        let records = log.recover(count, checkpointed_through)?;
        Ok(Recovered { log, records })
    }

    fn recover(&mut self, count: u32, checkpointed_through: u64) -> Result<Vec<Record>> {
        let mut records = Vec::new();
        let mut max_generation = 0;
        let (mut free, mut sealed, mut runs) = (Vec::new(), Vec::new(), HashMap::new());
        let mut segment = 0;
        while segment < count {
            let Some(span) = self.span(segment)? else {
                free.push(segment);
                segment += 1;
                continue;
            };
            max_generation = max_generation.max(span.generation);
            let mut live = false;
            for parsed in span.records(&self.region) {
                if parsed.header.seq > checkpointed_through {
                    live = true;
                    records.push(to_record(&parsed));
                }
            }
            if live {
                sealed.push(segment);
                if span.length > 1 {
                    runs.insert(segment, span.length);
                }
            } else {
                // A covered run whose release did not finish.
                if span.length > 1 {
                    self.dissolve_run(segment, span.length);
                }
                free.extend(segment..segment + span.length);
            }
            segment += span.length;
        }
        let segments = self.segments.get_mut();
        segments.free = free;
        segments.sealed = sealed;
        segments.runs = runs;
        segments.next_generation = max_generation.wrapping_add(1).max(1);
        // Claim low segments first, so the file's tail stays cold.
        segments.free.sort_unstable_by(|a, b| b.cmp(a));
        records.sort_unstable_by_key(|r| r.seq);
        Ok(void_truncated(records))
    }

    /// What `segment` holds: `None` if it was never claimed (or is a run's
    /// interior, whose header word was cleared); an error if it heads a
    /// run that the file does not hold.
    fn span(&self, segment: u32) -> Result<Option<Span>> {
        let start = self.segment_start(segment);
        let (generation, length) =
            match format::parse_segment_header(self.region.load_u64(PmemOffset(start))) {
                None => return Ok(None),
                Some(Header::Segment(generation)) => (generation, 1),
                Some(Header::Run(generation)) => {
                    let length = self.region.load_u64(PmemOffset(start + 8));
                    let count = self.segments.lock().count;
                    if length < 2 || length > u64::from(count - segment) {
                        return Err(corrupt(
                            &self.path,
                            &format!(
                                "segment {segment} heads a run of {length} segments, \
                                 but the file holds {count}"
                            ),
                        ));
                    }
                    (generation, length as u32)
                }
            };
        Ok(Some(Span {
            start,
            end: start + u64::from(length) * self.segment_bytes,
            generation,
            length,
        }))
    }

    /// Turns a covered run back into unclaimed segments before any of them
    /// is reused: first the interior's header words are zeroed (they hold
    /// record bytes that could read as headers once no head hides them),
    /// then the head's (a head left valid would hide the records of a
    /// reused interior segment). Each store persisted in that order, so a
    /// crash between leaves a head over a cleared interior, which recovery
    /// dissolves again.
    fn dissolve_run(&self, head: u32, length: u32) {
        for segment in (head + 1..head + length).chain([head]) {
            let start = self.segment_start(segment);
            self.region.store_u64(PmemOffset(start), 0);
            self.region.persist(PmemOffset(start), 8);
        }
    }

    /// Appends one operation and makes it durable (on DAX: persisted; on
    /// emulated memory: in the page cache, durable against a process crash,
    /// and against power loss after [`OpLog::sync`]). Returns its sequence
    /// number, drawn from `sequencer` under the lane lock.
    pub fn append(
        &self,
        sequencer: &dyn Sequencer,
        position: Position,
        payload: &[u8],
    ) -> Result<u64> {
        self.append_kind(sequencer, position, KIND_OPERATION, payload)
    }

    /// Voids every record with a replication index above `index` written
    /// before this call (a leader's uncommitted suffix that a new leader
    /// overwrote). Applies to what recovery and later cuts read, not to
    /// what callers already applied.
    pub fn truncate_after(&self, sequencer: &dyn Sequencer, term: u64, index: u64) -> Result<u64> {
        self.append_kind(
            sequencer,
            Position { term, index },
            KIND_TRUNCATE,
            &index.to_le_bytes(),
        )
    }

    /// The largest payload one record can carry (in a run of segments if
    /// it does not fit in one).
    pub fn max_payload(&self) -> usize {
        format::MAX_PAYLOAD_BYTES
    }

    /// The largest payload that fits in one segment; larger ones get a run.
    pub fn segment_payload(&self) -> usize {
        (self.segment_bytes - format::SEGMENT_HEADER_BYTES - format::RECORD_HEADER_BYTES) as usize
    }

    fn append_kind(
        &self,
        sequencer: &dyn Sequencer,
        position: Position,
        kind: u8,
        payload: &[u8],
    ) -> Result<u64> {
        if payload.len() > self.max_payload() {
            return Err(Error::OperationTooLarge {
                bytes: payload.len(),
                max: self.max_payload(),
            });
        }
        if payload.len() > self.segment_payload() {
            return self.append_run(sequencer, position, kind, payload);
        }
        let needed = format::record_bytes(payload.len());
        let mut lane = self.lanes.acquire();
        if lane.segment.is_none() || lane.used + needed > self.segment_bytes {
            self.claim_segment(&mut lane)?;
        }
        let segment = lane.segment.expect("claimed above");
        let at = self.segment_start(segment) + lane.used;
        let seq = self.write_record(at, lane.generation, sequencer, position, kind, payload);
        lane.used += needed;
        drop(lane);
        self.count_record(payload);
        Ok(seq)
    }

    /// Writes and commits one record at `at`, numbered from `sequencer`
    /// (the caller holds a lane: see [`OpLog::cut`]).
    fn write_record(
        &self,
        at: u64,
        generation: format::Generation,
        sequencer: &dyn Sequencer,
        position: Position,
        kind: u8,
        payload: &[u8],
    ) -> u64 {
        let seq = sequencer.next_seq();
        let header = RecordHeader {
            seq,
            term: position.term,
            index: position.index,
            kind,
        };
        // Body first, persisted; then the commit word (DIPPER 3.4). The
        // checksum is taken over the header's tail and the payload as they
        // lie in the segment, side by side: one `crc32c` call.
        self.region.write(
            PmemOffset(at + 8),
            &format::encode_header(&header, payload.len()),
        );
        self.region
            .write(PmemOffset(at + format::RECORD_HEADER_BYTES), payload);
        let covered = self.region.read(
            PmemOffset(at + 12),
            format::RECORD_HEADER_BYTES - 12 + payload.len() as u64,
        );
        let crc = format::record_crc(generation, covered);
        self.region.write(PmemOffset(at + 8), &crc.to_le_bytes());
        self.region.persist(
            PmemOffset(at + 8),
            format::RECORD_HEADER_BYTES - 8 + payload.len() as u64,
        );
        // C1: the body is down and the record not yet committed (a word
        // left from the segment's previous life holds a smaller seq).
        verify!(
            self.region.load_u64(PmemOffset(at)) != seq,
            "C1: record {seq} at {at:#x} committed before its body was written"
        );
        self.region.store_u64(PmemOffset(at), seq);
        self.region.persist(PmemOffset(at), 8);
        // C1: committed, it is valid under the commit rule: commit word ==
        // seq, checksum over the segment's generation, the payload intact.
        verify!(
            format::parse_record(
                &self.region,
                at,
                at + format::record_bytes(payload.len()),
                generation
            )
            .is_some_and(|parsed| parsed.header.seq == seq && parsed.payload == payload),
            "C1: record {seq} at {at:#x} does not read back as committed"
        );
        seq
    }

    /// Appends a record too large for a segment in a run of its own. A
    /// lane is held throughout, so that a cut cannot fall between the
    /// record's number and the run's sealing: the cut then either archives
    /// the run or numbers itself before the record.
    fn append_run(
        &self,
        sequencer: &dyn Sequencer,
        position: Position,
        kind: u8,
        payload: &[u8],
    ) -> Result<u64> {
        let needed = format::SEGMENT_HEADER_BYTES + format::record_bytes(payload.len());
        let length = needed.div_ceil(self.segment_bytes) as u32;
        let lane = self.lanes.acquire();
        let (head, generation) = self.claim_run(length)?;
        let start = self.segment_start(head);
        // The length first: whenever the header word says "run", the length
        // beside it is this run's.
        self.region
            .store_u64(PmemOffset(start + 8), u64::from(length));
        self.region.persist(PmemOffset(start + 8), 8);
        self.region
            .store_u64(PmemOffset(start), format::run_header_word(generation));
        self.region.persist(PmemOffset(start), 8);
        let at = start + format::SEGMENT_HEADER_BYTES;
        let seq = self.write_record(
            at,
            format::Generation::new(generation),
            sequencer,
            position,
            kind,
            payload,
        );
        {
            let mut segments = self.segments.lock();
            segments.sealed.push(head);
            segments.runs.insert(head, length);
        }
        drop(lane);
        self.count_record(payload);
        Ok(seq)
    }

    /// `length` consecutive segments and a generation for them: free ones
    /// if enough lie side by side, else new ones at the file's end.
    fn claim_run(&self, length: u32) -> Result<(u32, u32)> {
        let mut segments = self.segments.lock();
        let head = match take_consecutive(&mut segments.free, length) {
            Some(head) => head,
            None => {
                drop(segments);
                let _one_grower = self.grow.lock();
                let (first, grown) = self.grow_segments(length)?;
                segments = grown;
                first
            }
        };
        Ok((head, segments.take_generation()))
    }

    fn count_record(&self, payload: &[u8]) {
        self.records.incr();
        self.payload_bytes.add(payload.len() as i64);
    }

    /// Gives `lane` a fresh segment (sealing its full one), its header
    /// persisted before any record goes in. Takes a free one when there is
    /// one (and asks for the reserve to be refilled when it runs low);
    /// grows the file itself only when none is free.
    fn claim_segment(&self, lane: &mut Lane) -> Result<()> {
        let (segment, mut segments) = loop {
            let mut segments = self.segments.lock();
            if let Some(segment) = segments.free.pop() {
                if segments.free.len() < self.reserve_segments {
                    self.provision.request();
                }
                break (segment, segments);
            }
            drop(segments);
            self.ensure_free(1)?;
        };
        let generation = segments.take_generation();
        if let Some(full) = lane.segment.replace(segment) {
            segments.sealed.push(full);
        }
        drop(segments);
        let start = self.segment_start(segment);
        self.region
            .store_u64(PmemOffset(start), format::segment_header_word(generation));
        self.region.persist(PmemOffset(start), 8);
        lane.generation = format::Generation::new(generation);
        lane.used = format::SEGMENT_HEADER_BYTES;
        Ok(())
    }

    /// Grows the file until at least `wanted` segments are free (no-op if
    /// they are). The growth (allocation, mapping, pre-faulting) runs
    /// without the segment list locked, so lanes that have a segment, or
    /// find a free one, never wait for it.
    fn ensure_free(&self, wanted: usize) -> Result<()> {
        let _one_grower = self.grow.lock();
        let missing = wanted.saturating_sub(self.segments.lock().free.len());
        if missing == 0 {
            return Ok(());
        }
        let missing = u32::try_from(missing).unwrap_or(u32::MAX);
        let (first, mut segments) = self.grow_segments(missing)?;
        // `free` is claimed from its end, lowest segment first: new
        // (higher) segments go to the front.
        segments.free.splice(0..0, (first..first + missing).rev());
        Ok(())
    }

    /// Adds `n` segments at the file's end and returns the first of them,
    /// with the segment list locked. The growth (allocation, mapping,
    /// pre-faulting) runs without the list locked. The caller holds
    /// `grow`: only its holder changes `count`.
    fn grow_segments(&self, n: u32) -> Result<(u32, MutexGuard<'_, Segments>)> {
        let first = self.segments.lock().count;
        let end = first
            .checked_add(n)
            .ok_or_else(|| Error::InvalidOption("operation log has too many segments".into()))?;
        self.region
            .grow_to(self.segment_start(end))
            .map_err(no_space)?;
        let mut segments = self.segments.lock();
        segments.count = end;
        Ok((first, segments))
    }

    /// Refills the reserve of free segments (see
    /// [`OpLogOptions::reserve_segments`]) whenever a claim asks, until
    /// [`OpLog::stop_provisioner`]. For a thread of its own. A failed
    /// growth (a full disk) is left for the write path to meet and report.
    pub fn run_provisioner(&self) {
        while self.provision.wait() {
            let _ = self.ensure_free(self.reserve_segments);
        }
    }

    /// Ends [`OpLog::run_provisioner`] (at once, or after its growth).
    pub fn stop_provisioner(&self) {
        self.provision.stop();
    }

    /// The swap of the active and archived logs: every record appended so
    /// far is in the returned segments, and no later one will be. Holds each
    /// lane for an instant (no record is half-written while it runs).
    pub fn cut(&self, sequencer: &dyn Sequencer) -> Cut {
        let mut lanes = self.lanes.lock_all();
        let mut segments = self.segments.lock();
        let through_seq = sequencer.peek_seq().saturating_sub(1);
        let mut archived = std::mem::take(&mut segments.sealed);
        for lane in lanes.iter_mut() {
            if let Some(segment) = lane.segment.take() {
                archived.push(segment);
            }
        }
        Cut {
            through_seq,
            segments: archived,
        }
    }

    /// The valid records of archived segments, in sequence order,
    /// truncations applied, payloads copied. Only for segments handed out
    /// by [`OpLog::cut`] (no one writes to them any more).
    pub fn read(&self, segments: &[u32]) -> Vec<Record> {
        let mut located = Vec::new();
        self.locate(segments, &mut located);
        located
            .iter()
            .map(|record| Record {
                seq: record.seq,
                position: self.position(record),
                kind: record.kind,
                payload: self.payload(record).to_vec(),
            })
            .collect()
    }

    /// What [`OpLog::read`] returns, without the payloads: replaces the
    /// contents of `out` (whose allocation a caller can keep from one
    /// checkpoint to the next) with the records' places, in sequence order,
    /// truncations applied. Read each payload with [`OpLog::payload`] while
    /// the segments are still archived (before [`OpLog::release`]).
    pub fn locate(&self, segments: &[u32], out: &mut Vec<Located>) {
        out.clear();
        for &segment in segments {
            // A cut hands out only segments this log claimed and checked.
            let Ok(Some(span)) = self.span(segment) else {
                continue;
            };
            out.extend(span.records(&self.region).map(|parsed| Located {
                seq: parsed.header.seq,
                at: parsed.at,
                len: parsed.payload.len() as u32,
                kind: kind_of(&parsed),
            }));
        }
        // Each segment is already in sequence order (one lane wrote it,
        // taking each number under its lock): a stable sort merges these
        // runs instead of sorting from scratch.
        out.sort_by_key(|record| record.seq);
        drop_truncated(
            out,
            |record| self.position(record).index,
            |record| {
                (record.kind == RecordKind::Truncate)
                    .then(|| truncation_index(self.payload(record)))
            },
        );
    }

    /// The payload of a record [`OpLog::locate`] found, in place in the log.
    pub fn payload(&self, record: &Located) -> &[u8] {
        self.region.read(
            PmemOffset(record.at + format::RECORD_HEADER_BYTES),
            u64::from(record.len),
        )
    }

    /// The term and index of a record [`OpLog::locate`] found.
    pub fn position(&self, record: &Located) -> Position {
        let (term, index) = format::record_position(&self.region, record.at);
        Position { term, index }
    }

    /// Returns archived segments for reuse: call only once what they hold
    /// is durable elsewhere (a checkpoint), since reuse destroys it.
    /// Returns how many segments that frees (a run counts all of its own).
    pub fn release(&self, archived: Vec<u32>) -> u64 {
        let mut segments = self.segments.lock();
        let mut freed = 0;
        for head in archived {
            let length = match segments.runs.remove(&head) {
                Some(length) => {
                    self.dissolve_run(head, length);
                    length
                }
                None => 1,
            };
            segments.free.extend(head..head + length);
            freed += u64::from(length);
        }
        freed
    }

    /// Gives back archived segments whose checkpoint failed: the next cut
    /// archives them again.
    pub fn requeue(&self, segments: Vec<u32>) {
        self.segments.lock().sealed.extend(segments);
    }

    /// Makes every appended record durable against power loss (`msync` on
    /// emulated memory; nothing to do on DAX). Nothing when no record was
    /// appended since the last sync: under `always` a round of string
    /// writes would otherwise pay an msync (a device cache flush) of a log
    /// it never touched. Callers that wrote records learn of it through
    /// the group commit's ticket, whose release orders the count's
    /// increment before this sum. (Each CPU's count only grows, so an
    /// unchanged sum means no record since.)
    pub fn sync(&self) -> Result<()> {
        let records = self.records.get();
        if records == self.synced_records.load(Ordering::Acquire) {
            return Ok(());
        }
        self.sync_all()?;
        self.synced_records.store(records, Ordering::Release);
        Ok(())
    }

    /// Makes everything written to the log file durable, records or not
    /// (segment headers of releases too): for a clean close.
    pub fn sync_all(&self) -> Result<()> {
        self.region.sync_all()?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub fn stats(&self) -> OpLogStats {
        let segments = self.segments.lock();
        OpLogStats {
            records: self.records.get(),
            payload_bytes: self.payload_bytes.get(),
            segments_total: segments.count as u64,
            segments_free: segments.free.len() as u64,
            segment_bytes: self.segment_bytes,
            file_bytes: self.region.len(),
            syncs: self.syncs.load(Ordering::Relaxed),
        }
    }

    /// Bytes of log written since the last cut (what the next checkpoint
    /// will replay), a bound from above: whole sealed segments plus each
    /// lane's fill.
    pub fn active_bytes(&self) -> u64 {
        let sealed = {
            let segments = self.segments.lock();
            let count: u64 = segments
                .sealed
                .iter()
                .map(|head| u64::from(segments.runs.get(head).copied().unwrap_or(1)))
                .sum();
            count * self.segment_bytes
        };
        let lanes: u64 = self
            .lanes
            .iter()
            .map(|lane| {
                let lane = lane.lock();
                lane.segment.map_or(0, |_| lane.used)
            })
            .sum();
        sealed + lanes
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn set_file_limit(&self, limit_bytes: Option<u64>) {
        self.region.set_file_limit(limit_bytes);
    }

    fn segment_start(&self, segment: u32) -> u64 {
        format::SUPERBLOCK_BYTES + segment as u64 * self.segment_bytes
    }
}

/// A claimed segment, or a run of them: where its records lie.
struct Span {
    start: u64,
    end: u64,
    generation: u32,
    /// Segments it covers (1 for a plain segment).
    length: u32,
}

impl Span {
    fn records<'r>(&self, region: &'r Region) -> SegmentRecords<'r> {
        SegmentRecords {
            region,
            at: self.start + format::SEGMENT_HEADER_BYTES,
            end: self.end,
            generation: format::Generation::new(self.generation),
        }
    }
}

/// Removes `length` consecutive segments from `free` (kept in descending
/// order, claimed from its end) and returns the first; the lowest such
/// stretch, so the file's tail stays cold. `None` if there is none.
fn take_consecutive(free: &mut Vec<u32>, length: u32) -> Option<u32> {
    let mut ascending = free.clone();
    ascending.sort_unstable();
    let mut first = 0;
    for at in 0..ascending.len() {
        if at > 0 && ascending[at] != ascending[at - 1] + 1 {
            first = at;
        }
        if at + 1 - first == length as usize {
            let head = ascending[first];
            free.retain(|&segment| segment < head || segment >= head + length);
            return Some(head);
        }
    }
    None
}

/// The valid records of one segment (or run), in the order written; stops
/// at the first invalid one (the commit rule: nothing valid follows it).
struct SegmentRecords<'r> {
    region: &'r Region,
    at: u64,
    end: u64,
    generation: format::Generation,
}

impl<'r> Iterator for SegmentRecords<'r> {
    type Item = format::Parsed<'r>;

    fn next(&mut self) -> Option<Self::Item> {
        let parsed = format::parse_record(self.region, self.at, self.end, self.generation)?;
        self.at += parsed.bytes;
        Some(parsed)
    }
}

fn position_of(parsed: &format::Parsed<'_>) -> Position {
    Position {
        term: parsed.header.term,
        index: parsed.header.index,
    }
}

fn kind_of(parsed: &format::Parsed<'_>) -> RecordKind {
    if parsed.header.kind == KIND_TRUNCATE {
        RecordKind::Truncate
    } else {
        RecordKind::Operation
    }
}

fn to_record(parsed: &format::Parsed<'_>) -> Record {
    Record {
        seq: parsed.header.seq,
        position: position_of(parsed),
        kind: kind_of(parsed),
        payload: parsed.payload.to_vec(),
    }
}

/// The index a truncation record's payload names (a short payload voids
/// nothing).
fn truncation_index(payload: &[u8]) -> u64 {
    payload.get(..8).map_or(u64::MAX, |b| {
        u64::from_le_bytes(b.try_into().expect("8 bytes"))
    })
}

/// Applies truncation records to records in sequence order: a truncation
/// at index `i` voids the operations written before it whose index is above
/// `i`. Returns the operations left (truncation records are dropped).
pub fn void_truncated(mut records: Vec<Record>) -> Vec<Record> {
    drop_truncated(
        &mut records,
        |record| record.position.index,
        |record| (record.kind == RecordKind::Truncate).then(|| truncation_index(&record.payload)),
    );
    records
}

/// [`void_truncated`] in place, for records of either form: `index` gives
/// a record's replication index, `truncation` a truncation record's
/// payload index (`None` for an operation). Keeps the operations' order.
fn drop_truncated<T>(
    records: &mut Vec<T>,
    index: impl Fn(&T) -> u64,
    truncation: impl Fn(&T) -> Option<u64>,
) {
    // records[..kept] are the operations kept so far, in order.
    let mut kept = 0;
    for next in 0..records.len() {
        match truncation(&records[next]) {
            None => {
                records.swap(kept, next);
                kept += 1;
            }
            Some(limit) => {
                let mut still = 0;
                for at in 0..kept {
                    if index(&records[at]) <= limit {
                        records.swap(still, at);
                        still += 1;
                    }
                }
                kept = still;
            }
        }
    }
    records.truncate(kept);
}

fn no_space(error: engram_pmem::Error) -> Error {
    match error {
        engram_pmem::Error::NoSpace { .. } => Error::NoSpace(error),
        other => Error::Region(other),
    }
}

fn corrupt(path: &Path, what: &str) -> Error {
    Error::CorruptLog {
        path: path.to_path_buf(),
        what: what.to_string(),
    }
}

/// An engine store numbers the collections' records too, so strings and
/// collections share one order (the newer of a string and a collection
/// under one key is the one with the larger number).
impl Sequencer for engram_engine::Store {
    fn next_seq(&self) -> u64 {
        engram_engine::Store::next_seq(self)
    }
    fn peek_seq(&self) -> u64 {
        engram_engine::Store::peek_seq(self)
    }
}
