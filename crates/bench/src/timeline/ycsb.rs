//! Part 2: YCSB's core workloads A–F over collections (background
//! checkpoints) and over strings (the engine store), each on a fresh store
//! prefilled with the records of [`super::records`].
//!
//! ## The mapping
//!
//! | workload | mix | over collections | over strings |
//! |---|---|---|---|
//! | A | 50% read, 50% update | read: every field copied out (HGETALL); update: one field (HSET) | read: GET; update: SET of the whole record |
//! | B | 95% read, 5% update | as A | as A |
//! | C | 100% read | as A | as A |
//! | D | 95% read, 5% insert, reads of the latest | insert: a new record (HSET of every field) | insert: SET of a new key |
//! | E | 95% scan, 5% insert | scan: see below | skipped (strings keep no order) |
//! | F | 50% read, 50% read-modify-write | RMW: one `update` that reads every field and rewrites one from its old value (atomic) | RMW: GET then SET (not atomic) |
//!
//! YCSB reads all fields (`readallfields=true`) and updates one
//! (`writeallfields=false`), as here; over strings a record is one value,
//! so an update rewrites it whole.
//!
//! **Distributions.** `zipfian` (s = 0.99, hot records scattered over the
//! key space, [`KeyChooser`]) or `uniform` over the prefilled records. D's
//! reads under `zipfian` follow YCSB's `latest`: the record `rank` places
//! before the newest inserted one, rank zipfian over the prefilled count;
//! under `uniform` they are uniform over every record inserted so far.
//!
//! **Inserts** (D, E): thread `t` of `T` inserts records `N + t`, `N + t +
//! T`, ... (`N` prefilled), and publishes how many it has inserted; reads
//! choose among the records below `N + T × min(inserted)`, all of which
//! exist, so every read must find its record.
//!
//! **Scans (E).** Records are also indexed in sorted sets of
//! [`SCAN_BUCKET_RECORDS`] consecutive records each (`index` + bucket
//! number), member the record's key, score its number; an insert writes
//! the record and its index entry in one logged `update`. A scan picks a
//! start record (by the distribution) and a length uniform in
//! 1..=[`MAX_SCAN_LENGTH`] (YCSB's defaults), takes members with scores
//! from the start on (ZRANGEBYSCORE … LIMIT), continuing into the next
//! buckets, then reads every field of each record found, as YCSB's scan
//! returns them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use engram_collections::types::{Object, ScoreBound};
use engram_collections::{CheckpointMode, Collections, Entry, Op};
use engram_engine::Store;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution as _, Zipf};

use super::error::{Result, TimelineError};
use super::records::{self, Shape, KEY_BYTES};
use super::server::{ServerCounters, Target};
use super::stats;
use super::timed::{self, Kind, Measured};
use super::{tail, Config};
use crate::command::remove_if_present;
use crate::progress::progress_bar;
use crate::workload::{Distribution, KeyChooser, ValuePool, ZIPF_EXPONENT};

/// Records per sorted set of E's range index.
pub const SCAN_BUCKET_RECORDS: u64 = 1024;
/// YCSB's `maxscanlength`.
pub const MAX_SCAN_LENGTH: u64 = 100;
const INDEX_PREFIX: &[u8; 5] = b"index";
const KEY_CHOICE_SEED: u64 = 0xD1CE;
const MIX_SEED: u64 = 0xFACADE;

/// YCSB's core workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    A,
    B,
    C,
    D,
    E,
    F,
}

impl Workload {
    pub const ALL: [Workload; 6] = [
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::D,
        Workload::E,
        Workload::F,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::A => "ycsb-a",
            Workload::B => "ycsb-b",
            Workload::C => "ycsb-c",
            Workload::D => "ycsb-d",
            Workload::E => "ycsb-e",
            Workload::F => "ycsb-f",
        }
    }

    /// The mix: percentages of the kinds that add up to 100.
    pub fn mix(self) -> &'static [(Kind, u32)] {
        match self {
            Workload::A => &[(Kind::Read, 50), (Kind::Update, 50)],
            Workload::B => &[(Kind::Read, 95), (Kind::Update, 5)],
            Workload::C => &[(Kind::Read, 100)],
            Workload::D => &[(Kind::Read, 95), (Kind::Insert, 5)],
            Workload::E => &[(Kind::Scan, 95), (Kind::Insert, 5)],
            Workload::F => &[(Kind::Read, 50), (Kind::ReadModifyWrite, 50)],
        }
    }

    /// "50% read, 50% update".
    pub fn mix_text(self) -> String {
        self.mix()
            .iter()
            .map(|(kind, percent)| format!("{percent}% {}", kind.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn pick(self, percent: u32) -> Kind {
        let mut below = 0;
        for &(kind, share) in self.mix() {
            below += share;
            if percent < below {
                return kind;
            }
        }
        unreachable!("a mix adds up to 100")
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let name = s.to_ascii_lowercase();
        let letter = name
            .strip_prefix("ycsb-")
            .or_else(|| name.strip_prefix("ycsb"))
            .unwrap_or(&name);
        match letter {
            "a" => Ok(Workload::A),
            "b" => Ok(Workload::B),
            "c" => Ok(Workload::C),
            "d" => Ok(Workload::D),
            "e" => Ok(Workload::E),
            "f" => Ok(Workload::F),
            _ => Err(format!(
                "unknown workload '{s}' (expected a to f, or ycsb-a ...)"
            )),
        }
    }
}

/// What the workloads run over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    Collections,
    Strings,
}

impl StoreKind {
    pub const ALL: [StoreKind; 2] = [StoreKind::Collections, StoreKind::Strings];

    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Collections => "collections",
            StoreKind::Strings => "strings",
        }
    }

    /// Whether the store runs `workload` (strings have no scans).
    pub fn runs(self, workload: Workload) -> bool {
        !(self == StoreKind::Strings && workload == Workload::E)
    }
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for StoreKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "collections" | "hashes" => Ok(StoreKind::Collections),
            "strings" | "engine" => Ok(StoreKind::Strings),
            _ => Err(format!(
                "unknown store '{s}' (expected collections or strings)"
            )),
        }
    }
}

/// What one (store, workload, distribution) run measured.
pub struct YcsbMeasured {
    pub store: StoreKind,
    pub workload: Workload,
    pub distribution: Distribution,
    pub prefill: Duration,
    pub timed: Measured,
    /// Collections: checkpoints completed during the run.
    pub checkpoints: Option<u64>,
    /// Records inserted during the run (D, E).
    pub inserted: u64,
    pub target: Target,
    /// The server target: what its INFO said.
    pub server: Option<ServerCounters>,
}

/// Which records exist while inserts go on (module docs).
pub(super) struct Inserts {
    prefilled: u64,
    per_thread: Vec<CachePadded<AtomicU64>>,
}

impl Inserts {
    pub(super) fn new(prefilled: u64, threads: usize) -> Inserts {
        Inserts {
            prefilled,
            per_thread: (0..threads)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// The record thread `thread` inserts as its `n`th (from 0).
    fn id(&self, thread: usize, n: u64) -> u64 {
        self.prefilled + thread as u64 + n * self.per_thread.len() as u64
    }

    fn published(&self, thread: usize, count: u64) {
        self.per_thread[thread].store(count, Ordering::Release);
    }

    /// Every record below this one exists.
    fn existing(&self) -> u64 {
        let fewest = self
            .per_thread
            .iter()
            .map(|count| count.load(Ordering::Acquire))
            .min()
            .unwrap_or(0);
        self.prefilled + fewest * self.per_thread.len() as u64
    }

    pub(super) fn total(&self) -> u64 {
        self.per_thread
            .iter()
            .map(|count| count.load(Ordering::Relaxed))
            .sum()
    }
}

/// Chooses the records reads, updates and scans touch.
struct Chooser {
    workload: Workload,
    distribution: Distribution,
    prefilled: KeyChooser,
    /// D under zipfian: ranks back from the newest record.
    latest: Option<Zipf<f64>>,
    rng: SmallRng,
}

impl Chooser {
    fn new(workload: Workload, distribution: Distribution, records: u64, seed: u64) -> Chooser {
        Chooser {
            workload,
            distribution,
            prefilled: KeyChooser::new(distribution, records, seed),
            latest: (workload == Workload::D && distribution == Distribution::Zipfian)
                .then(|| Zipf::new(records as f64, ZIPF_EXPONENT).expect("records > 0, s > 0")),
            rng: SmallRng::seed_from_u64(seed ^ 0x1A7E57),
        }
    }

    /// A record that exists: `existing` records do.
    fn next(&mut self, existing: u64) -> u64 {
        if self.workload != Workload::D {
            return self.prefilled.next_id();
        }
        match &self.latest {
            Some(zipf) => {
                let rank = zipf.sample(&mut self.rng) as u64 - 1;
                existing - 1 - rank.min(existing - 1)
            }
            None => {
                debug_assert_eq!(self.distribution, Distribution::Uniform);
                self.rng.random_range(0..existing)
            }
        }
    }
}

/// One client's choices, the same sequence for a thread over every store
/// and target: the kind of each operation, its record, field and version,
/// a scan's length, and the records it inserts.
pub(super) struct Choices<'a> {
    workload: Workload,
    chooser: Chooser,
    coin: SmallRng,
    inserts: &'a Inserts,
    thread: usize,
    version: u64,
    inserted: u64,
}

impl<'a> Choices<'a> {
    pub(super) fn new(
        config: &Config,
        inserts: &'a Inserts,
        workload: Workload,
        distribution: Distribution,
        thread: usize,
    ) -> Choices<'a> {
        let seed = KEY_CHOICE_SEED + thread as u64;
        Choices {
            workload,
            chooser: Chooser::new(workload, distribution, config.shape.records, seed),
            coin: SmallRng::seed_from_u64(MIX_SEED + thread as u64),
            inserts,
            thread,
            version: (thread as u64) << 40,
            inserted: 0,
        }
    }

    pub(super) fn kind(&mut self) -> Kind {
        self.workload.pick(self.coin.random_range(0..100))
    }

    /// A record that exists, by the distribution; its key into `key`.
    pub(super) fn record(&mut self, key: &mut [u8; KEY_BYTES]) -> u64 {
        let id = self.chooser.next(self.inserts.existing());
        records::fill_key(id, key);
        id
    }

    pub(super) fn field(&mut self, fields: usize) -> usize {
        self.coin.random_range(0..fields)
    }

    /// The version an update writes: a new one each time.
    pub(super) fn version(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    pub(super) fn scan_length(&mut self) -> u64 {
        self.coin.random_range(1..=MAX_SCAN_LENGTH)
    }

    /// The record this client inserts next.
    pub(super) fn new_record(&self) -> u64 {
        self.inserts.id(self.thread, self.inserted)
    }

    /// [`Self::new_record`] is written: readers may choose it.
    pub(super) fn inserted(&mut self) {
        self.inserted += 1;
        self.inserts.published(self.thread, self.inserted);
    }
}

/// The sorted sets of E's range index over `records` records (none when
/// not `indexed`).
pub(super) fn index_buckets(indexed: bool, records: u64) -> u64 {
    if indexed {
        records.div_ceil(SCAN_BUCKET_RECORDS)
    } else {
        0
    }
}

pub(super) fn index_key(bucket: u64) -> Vec<u8> {
    let mut key = INDEX_PREFIX.to_vec();
    key.extend_from_slice(format!("{bucket:012}").as_bytes());
    key
}

/// E's index entry for record `id`.
fn index_op(id: u64) -> Op {
    Op::SortedSetAdd {
        key: index_key(id / SCAN_BUCKET_RECORDS).into(),
        pairs: vec![(id as f64, records::key(id).into())],
    }
}

/// One YCSB measurement: a workload over a store with a key distribution,
/// the values its records are made of, and the run's configuration. Each
/// target (embedded, server, the server's Redis peer) measures the same
/// case.
#[derive(Clone, Copy)]
pub struct Case<'a> {
    pub config: &'a Config,
    pub field_values: &'a ValuePool,
    pub record_values: &'a ValuePool,
    pub store: StoreKind,
    pub workload: Workload,
    pub distribution: Distribution,
}

impl Case<'_> {
    /// `<store>-<workload>-<distribution>` after `prefix`, under the
    /// configuration's directory: where this case's store goes.
    pub fn dir(&self, prefix: &str) -> PathBuf {
        let Case {
            store,
            workload,
            distribution,
            ..
        } = self;
        self.config
            .dir
            .join(format!("{prefix}-{store}-{workload}-{distribution}"))
    }
}

/// Runs `case` in `config.dir/ycsb-<store>-<workload>-<distribution>`.
pub fn measure(case: &Case) -> Result<YcsbMeasured> {
    let Case {
        config,
        field_values,
        record_values,
        store,
        workload,
        distribution,
    } = *case;
    let dir = case.dir("ycsb");
    remove_if_present(&dir)?;
    let label = format!("{store} {workload} {distribution}");
    let shape = config.shape;
    let bar = progress_bar(
        config.progress,
        Some(shape.records),
        &format!("{label} prefill"),
    );
    let inserts = Inserts::new(shape.records, config.threads);
    let measured = match store {
        StoreKind::Collections => {
            let collections =
                Collections::open(&dir, tail::options(config, CheckpointMode::Background))?;
            let indexed = workload == Workload::E;
            let extra = move |id| {
                if indexed {
                    vec![index_op(id)]
                } else {
                    Vec::new()
                }
            };
            let buckets = index_buckets(indexed, shape.records);
            let prefill = records::prefill_collections(
                &collections,
                &shape,
                field_values,
                config.threads,
                &bar,
                &extra,
                buckets,
            );
            bar.finish_and_clear();
            let prefill = prefill?;
            let before = stats::stats(&collections).checkpoints;
            let timed = timed::run(
                config.progress,
                &label,
                config.threads,
                config.ycsb_duration,
                |thread| {
                    collections_client(
                        config,
                        field_values,
                        &collections,
                        &inserts,
                        workload,
                        distribution,
                        thread,
                    )
                },
                &mut |_| {},
            )?;
            let checkpoints = stats::stats(&collections).checkpoints - before;
            collections.crash();
            (prefill, timed, Some(checkpoints))
        }
        StoreKind::Strings => {
            assert!(store.runs(workload), "strings run no scans");
            let engine = Store::open(&dir, engram_engine::Options::default())?;
            let prefill =
                records::prefill_strings(&engine, &shape, record_values, config.threads, &bar);
            bar.finish_and_clear();
            let prefill = prefill?;
            let timed = timed::run(
                config.progress,
                &label,
                config.threads,
                config.ycsb_duration,
                |thread| {
                    strings_client(
                        config,
                        record_values,
                        &engine,
                        &inserts,
                        workload,
                        distribution,
                        thread,
                    )
                },
                &mut |_| {},
            )?;
            engine.crash();
            (prefill, timed, None)
        }
    };
    remove_if_present(&dir)?;
    let (prefill, timed, checkpoints) = measured;
    Ok(YcsbMeasured {
        store,
        workload,
        distribution,
        prefill,
        timed,
        checkpoints,
        inserted: inserts.total(),
        target: Target::Embedded,
        server: None,
    })
}

/// One client over collections.
fn collections_client<'a>(
    config: &'a Config,
    values: &'a ValuePool,
    collections: &'a Collections,
    inserts: &'a Inserts,
    workload: Workload,
    distribution: Distribution,
    thread: usize,
) -> impl FnMut() -> Result<(Kind, Instant)> + 'a {
    let shape: Shape = config.shape;
    let names = records::field_names(shape.fields);
    let mut choices = Choices::new(config, inserts, workload, distribution, thread);
    let mut key = [0u8; KEY_BYTES];
    let mut copied = Vec::with_capacity(shape.record_bytes() * 2);
    let mut members: Vec<Vec<u8>> = Vec::with_capacity(MAX_SCAN_LENGTH as usize);
    move || {
        let kind = choices.kind();
        match kind {
            Kind::Read => {
                let id = choices.record(&mut key);
                let began = Instant::now();
                let fields =
                    collections.read(&key, |entry| records::copy_all_fields(entry, &mut copied));
                if fields != Some(shape.fields) {
                    return Err(timed::lost(
                        "collections",
                        format!("{workload} read of record {id} found {fields:?} fields"),
                    ));
                }
                Ok((kind, began))
            }
            Kind::Update => {
                let id = choices.record(&mut key);
                let field = choices.field(shape.fields);
                let version = choices.version();
                let op = Op::HashSet {
                    key: key.into(),
                    pairs: vec![records::field_pair(
                        &names, values, &shape, id, field, version,
                    )],
                };
                let began = Instant::now();
                collections.update(&[&key[..]], move |_| Ok((vec![op], ())))?;
                Ok((kind, began))
            }
            Kind::Insert => {
                let id = choices.new_record();
                let mut ops = vec![records::record_op(&names, values, &shape, id)];
                let mut keys = vec![records::key(id).to_vec()];
                if workload == Workload::E {
                    ops.push(index_op(id));
                    keys.push(index_key(id / SCAN_BUCKET_RECORDS));
                }
                let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
                let began = Instant::now();
                collections.update(&keys, move |_| Ok((ops, ())))?;
                choices.inserted();
                Ok((kind, began))
            }
            Kind::Scan => {
                let start = choices.record(&mut key);
                let length = choices.scan_length();
                let began = Instant::now();
                scan(collections, start, length, &mut members);
                for member in &members {
                    let fields = collections
                        .read(member, |entry| records::copy_all_fields(entry, &mut copied));
                    if fields != Some(shape.fields) {
                        return Err(timed::lost(
                            "collections",
                            format!(
                                "scan from record {start} found {} in the index, but its \
                                 record has {fields:?} fields",
                                String::from_utf8_lossy(member)
                            ),
                        ));
                    }
                }
                if members.is_empty() {
                    return Err(timed::lost(
                        "collections",
                        format!("scan from record {start} found nothing in the index"),
                    ));
                }
                Ok((kind, began))
            }
            Kind::ReadModifyWrite => {
                let id = choices.record(&mut key);
                let field = choices.field(shape.fields);
                let name = names[field].clone();
                let record_key: Box<[u8]> = key.into();
                let copied = &mut copied;
                let began = Instant::now();
                let found = collections.update(&[&key[..]], move |keys| {
                    let entry = keys.get(&record_key);
                    let fields = records::copy_all_fields(entry, copied);
                    let old = match entry {
                        Some(Entry {
                            object: Object::Hash(hash),
                            ..
                        }) => hash.get(&name),
                        _ => None,
                    };
                    let Some(old) = old.filter(|_| fields == Some(shape.fields)) else {
                        return Ok((Vec::new(), false));
                    };
                    let value = modified(old);
                    Ok((
                        vec![Op::HashSet {
                            key: record_key.clone(),
                            pairs: vec![(name, value)],
                        }],
                        true,
                    ))
                })?;
                if !found {
                    return Err(timed::lost(
                        "collections",
                        format!("{workload} read-modify-write of record {id} found it incomplete"),
                    ));
                }
                Ok((kind, began))
            }
        }
    }
}

/// The value a read-modify-write writes: the old one with its first 8
/// bytes taken as a counter and incremented (so the write depends on the
/// read).
pub(super) fn modified(old: &[u8]) -> Box<[u8]> {
    let mut value = old.to_vec();
    let mut counter = [0u8; 8];
    let n = value.len().min(8);
    counter[..n].copy_from_slice(&value[..n]);
    let next = u64::from_le_bytes(counter).wrapping_add(1).to_le_bytes();
    value[..n].copy_from_slice(&next[..n]);
    value.into_boxed_slice()
}

/// Up to `length` record keys from record `start` on, in record order,
/// from E's range index, into `members`.
fn scan(collections: &Collections, start: u64, length: u64, members: &mut Vec<Vec<u8>>) {
    members.clear();
    let mut bucket = start / SCAN_BUCKET_RECORDS;
    let mut from = start as f64;
    while (members.len() as u64) < length {
        let wanted = length as usize - members.len();
        let found = collections.read(&index_key(bucket), |entry| match entry {
            Some(Entry {
                object: Object::SortedSet(index),
                ..
            }) => {
                let ranks = index.score_range_ranks(
                    ScoreBound::Inclusive(from),
                    ScoreBound::Inclusive(f64::INFINITY),
                );
                for (member, _) in index.range(ranks).take(wanted) {
                    members.push(member.to_vec());
                }
                true
            }
            _ => false,
        });
        if !found {
            break;
        }
        bucket += 1;
        from = (bucket * SCAN_BUCKET_RECORDS) as f64;
    }
}

/// One client over strings.
fn strings_client<'a>(
    config: &'a Config,
    values: &'a ValuePool,
    store: &'a Store,
    inserts: &'a Inserts,
    workload: Workload,
    distribution: Distribution,
    thread: usize,
) -> impl FnMut() -> Result<(Kind, Instant)> + 'a {
    let mut choices = Choices::new(config, inserts, workload, distribution, thread);
    let mut key = [0u8; KEY_BYTES];
    let record_bytes = config.shape.record_bytes();
    let lost = move |what: String| timed::lost("strings", what);
    move || {
        let kind = choices.kind();
        match kind {
            Kind::Read => {
                let id = choices.record(&mut key);
                let began = Instant::now();
                match store.get(&key)? {
                    Some(value) if value.len() == record_bytes => Ok((kind, began)),
                    other => Err(lost(format!(
                        "{workload} GET of record {id} found {:?} bytes",
                        other.map(|v| v.len())
                    ))),
                }
            }
            Kind::Update => {
                let id = choices.record(&mut key);
                let value = records::string_value(values, id, choices.version());
                let began = Instant::now();
                store.put(&key, value)?;
                Ok((kind, began))
            }
            Kind::Insert => {
                let id = choices.new_record();
                records::fill_key(id, &mut key);
                let value = records::string_value(values, id, 0);
                let began = Instant::now();
                store.put(&key, value)?;
                choices.inserted();
                Ok((kind, began))
            }
            Kind::ReadModifyWrite => {
                let id = choices.record(&mut key);
                let began = Instant::now();
                let Some(old) = store.get(&key)?.filter(|v| v.len() == record_bytes) else {
                    return Err(lost(format!(
                        "{workload} read-modify-write of record {id} found no record"
                    )));
                };
                store.put(&key, &modified(&old))?;
                Ok((kind, began))
            }
            Kind::Scan => Err(TimelineError::flag(
                "workloads",
                "strings run no scans (E is skipped over strings)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_parse_and_mix_to_a_hundred() {
        assert_eq!("a".parse::<Workload>().unwrap(), Workload::A);
        assert_eq!("YCSB-F".parse::<Workload>().unwrap(), Workload::F);
        assert_eq!("ycsbe".parse::<Workload>().unwrap(), Workload::E);
        assert!("g".parse::<Workload>().is_err());
        for workload in Workload::ALL {
            assert_eq!(
                workload.mix().iter().map(|(_, p)| p).sum::<u32>(),
                100,
                "{workload}"
            );
            for percent in 0..100 {
                workload.pick(percent);
            }
        }
        assert_eq!(Workload::B.pick(94), Kind::Read);
        assert_eq!(Workload::B.pick(95), Kind::Update);
        assert_eq!(Workload::A.mix_text(), "50% read, 50% update");
        assert!(!StoreKind::Strings.runs(Workload::E));
        assert!(StoreKind::Collections.runs(Workload::E));
    }

    #[test]
    fn inserts_expose_only_a_complete_prefix() {
        let inserts = Inserts::new(100, 2);
        assert_eq!(inserts.id(0, 0), 100);
        assert_eq!(inserts.id(1, 0), 101);
        assert_eq!(inserts.id(0, 1), 102);
        assert_eq!(inserts.existing(), 100);
        inserts.published(0, 3); // 100, 102, 104
        assert_eq!(inserts.existing(), 100);
        inserts.published(1, 1); // 101
        assert_eq!(inserts.existing(), 102);
        assert_eq!(inserts.total(), 4);
    }

    #[test]
    fn latest_reads_favour_the_newest_records() {
        let mut chooser = Chooser::new(Workload::D, Distribution::Zipfian, 1000, 1);
        let picks: Vec<u64> = (0..10_000).map(|_| chooser.next(1500)).collect();
        assert!(picks.iter().all(|&id| id < 1500));
        let newest = picks.iter().filter(|&&id| id >= 1490).count();
        assert!(newest > 3000, "{newest} of 10,000 among the newest ten");
        let mut chooser = Chooser::new(Workload::D, Distribution::Uniform, 1000, 1);
        assert!((0..1000).all(|_| chooser.next(1200) < 1200));
    }

    #[test]
    fn modified_values_count_up() {
        let old = [1u8, 0, 0, 0, 0, 0, 0, 0, 9, 9];
        let new = modified(&old);
        assert_eq!(&new[..], &[2, 0, 0, 0, 0, 0, 0, 0, 9, 9]);
        assert_eq!(&modified(&[255])[..], &[0]);
    }

    #[test]
    fn scans_cross_index_buckets_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let collections = Collections::open(
            dir.path(),
            engram_collections::CollectionsOptions {
                checkpoints: CheckpointMode::Manual,
                ..Default::default()
            },
        )
        .unwrap();
        let records = SCAN_BUCKET_RECORDS + 10;
        for id in 0..records {
            collections.write(vec![index_op(id)]).unwrap();
        }
        let mut members = Vec::new();
        scan(&collections, SCAN_BUCKET_RECORDS - 3, 8, &mut members);
        let expected: Vec<Vec<u8>> = (SCAN_BUCKET_RECORDS - 3..SCAN_BUCKET_RECORDS + 5)
            .map(|id| records::key(id).to_vec())
            .collect();
        assert_eq!(members, expected);
        // Past the end: what there is.
        scan(&collections, records - 2, 100, &mut members);
        assert_eq!(members.len(), 2);
    }
}
