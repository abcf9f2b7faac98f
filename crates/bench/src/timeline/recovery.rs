//! Part 3: recovery (DIPPER 5.5), from the log alone and from images plus
//! a short tail, on one store in `CheckpointMode::Manual` (so nothing is
//! checkpointed but what the part asks for):
//!
//! 1. **Build** `keys` collections holding `members` elements in all (the
//!    remainder spread over the first keys), one logged write per key
//!    holding all its elements, `threads` writers. Key `i` is a set, a
//!    hash, a sorted set or a list by `i mod 4` (`--recovery-types mixed`),
//!    or a set (`sets`). An element is `member_bytes` bytes (its number
//!    big-endian, then bytes mixed from the key's); a hash field's value is
//!    the field itself, a sorted-set member's score its number.
//! 2. `crash`, then **(b) recovery from the log alone**: time
//!    `Collections::open` (which replays every record), check the key count
//!    and a sample of keys.
//! 3. `checkpoint_now` (timed): every key becomes an image.
//! 4. **Tail**: `tail_percent` % more writes, each creating a new key of
//!    the same shape; `crash`.
//! 5. **(a) recovery from images and the tail**: time `open` with
//!    `recovery_threads` threads decoding images, check the key count (the
//!    keys plus the tail's) and the sample.
//!
//! The log of (b) holds every element (members × bytes and a 48-byte
//! header per record); the log and the images are ordinary files whose
//! mappings reserve 1 TiB of address space each by default
//! (`engram_pmem::DEFAULT_RESERVE_BYTES`), far more than this needs.
//! Recovery reads files that are still in the page cache, as after a
//! process crash.

use std::ops::Range;
use std::time::{Duration, Instant};

use engram_collections::types::Object;
use engram_collections::{CheckpointMode, Collections, CollectionsOptions, Op, RecoveryReport};
use indicatif::ProgressBar;

use super::error::{Result, TimelineError};
use super::stats;
use super::{records, tail, Config};
use crate::command::remove_if_present;
use crate::progress::progress_bar;

/// Keys checked element by element (or value by value) after each
/// recovery, spread evenly.
const SAMPLED_KEYS: u64 = 1000;

/// After a recovery of `store` (its name in errors): the key count must be
/// `expected`; returns the ids to check one by one (evenly spread, the
/// last included).
pub(super) fn check_count(
    store: &'static str,
    found: u64,
    expected: u64,
) -> Result<impl Iterator<Item = u64>> {
    if found != expected {
        return Err(TimelineError::WrongKeyCount {
            store,
            when: "after recovery",
            found,
            expected,
        });
    }
    let step = (expected / SAMPLED_KEYS).max(1);
    Ok((0..expected)
        .step_by(step as usize)
        .chain(expected.checked_sub(1)))
}
/// Elements carry their number in their first 8 bytes.
pub const MIN_MEMBER_BYTES: usize = 8;
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Which collection types the data set holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Types {
    /// Sets, hashes, sorted sets and lists in turn.
    Mixed,
    Sets,
}

impl Types {
    pub fn name(self) -> &'static str {
        match self {
            Types::Mixed => "mixed",
            Types::Sets => "sets",
        }
    }
}

impl std::fmt::Display for Types {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Types {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "mixed" => Ok(Types::Mixed),
            "sets" => Ok(Types::Sets),
            _ => Err(format!("unknown types '{s}' (expected mixed or sets)")),
        }
    }
}

/// The data set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSet {
    pub keys: u64,
    pub members: u64,
    pub member_bytes: usize,
    pub types: Types,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Set,
    Hash,
    SortedSet,
    List,
}

impl DataSet {
    /// The keys the tail creates.
    pub fn tail_keys(&self, tail_percent: f64) -> u64 {
        (self.keys as f64 * tail_percent / 100.0).ceil() as u64
    }

    fn kind(&self, id: u64) -> Type {
        match (self.types, id % 4) {
            (Types::Sets, _) | (Types::Mixed, 0) => Type::Set,
            (Types::Mixed, 1) => Type::Hash,
            (Types::Mixed, 2) => Type::SortedSet,
            _ => Type::List,
        }
    }

    /// Elements of key `id` (tail keys, numbered from `keys` on, have as
    /// many as the first keys).
    pub fn members_of(&self, id: u64) -> u64 {
        let id = id % self.keys;
        self.members / self.keys + u64::from(id < self.members % self.keys)
    }

    pub fn key(id: u64) -> Vec<u8> {
        format!("key:{id:010}").into_bytes()
    }

    fn member(&self, id: u64, n: u64) -> Box<[u8]> {
        let mut member = vec![0u8; self.member_bytes];
        member[..8].copy_from_slice(&n.to_be_bytes());
        let mixed = id.wrapping_mul(GOLDEN_GAMMA).to_le_bytes();
        for (i, byte) in member[8..].iter_mut().enumerate() {
            *byte = mixed[i % 8];
        }
        member.into_boxed_slice()
    }

    /// The one write that creates key `id` with all its elements.
    pub fn op(&self, id: u64) -> Op {
        let key: Box<[u8]> = Self::key(id).into();
        let members = (0..self.members_of(id)).map(|n| (n, self.member(id, n)));
        match self.kind(id) {
            Type::Set => Op::SetAdd {
                key,
                members: members.map(|(_, m)| m).collect(),
            },
            Type::Hash => Op::HashSet {
                key,
                pairs: members.map(|(_, m)| (m.clone(), m)).collect(),
            },
            Type::SortedSet => Op::SortedSetAdd {
                key,
                pairs: members.map(|(n, m)| (n as f64, m)).collect(),
            },
            Type::List => Op::ListPush {
                key,
                front: false,
                values: members.map(|(_, m)| m).collect(),
            },
        }
    }

    /// Whether key `id` holds what [`DataSet::op`] wrote (its type, its
    /// length, its last element).
    fn holds(&self, collections: &Collections, id: u64) -> bool {
        let count = self.members_of(id) as usize;
        let last = (count > 0).then(|| self.member(id, count as u64 - 1));
        collections.read(&Self::key(id), |entry| {
            let Some(entry) = entry else {
                return count == 0;
            };
            let last = last.as_deref().unwrap_or_default();
            match (&entry.object, self.kind(id)) {
                (Object::Set(set), Type::Set) => set.len() == count && set.contains(last),
                (Object::Hash(hash), Type::Hash) => {
                    hash.len() == count && hash.get(last) == Some(last)
                }
                (Object::SortedSet(zset), Type::SortedSet) => {
                    zset.len() == count && zset.score(last) == Some((count - 1) as f64)
                }
                (Object::List(list), Type::List) => {
                    list.len() == count && list.get(-1) == Some(last)
                }
                _ => false,
            }
        })
    }
}

/// One timed recovery.
#[derive(Clone, Debug)]
pub struct Recovered {
    /// `Collections::open`, wall time.
    pub open: Duration,
    pub report: RecoveryReport,
    pub keys_found: u64,
    pub keys_expected: u64,
    pub sampled_keys: u64,
}

/// What the recovery part measured.
#[derive(Clone, Debug)]
pub struct RecoveryMeasured {
    pub data: DataSet,
    pub recovery_threads: usize,
    pub build: Duration,
    /// Log records and payload bytes the build wrote.
    pub log_records: u64,
    pub log_payload_bytes: u64,
    pub log_file_bytes: u64,
    pub from_log: Recovered,
    pub checkpoint: Duration,
    pub checkpoint_report: engram_collections::CheckpointReport,
    pub tail_keys: u64,
    pub tail: Duration,
    pub from_images: Recovered,
    /// The engine store's two recovery paths (`None`: skipped).
    pub strings: Option<super::string_recovery::StringRecoveryMeasured>,
}

/// Manual checkpoints, and so no backpressure (the build's log is far
/// larger than the backpressure limit, and nothing would ever fold it):
/// [`tail::options`].
fn options(config: &Config) -> CollectionsOptions {
    CollectionsOptions {
        recovery_threads: config.recovery_threads,
        ..tail::options(config, CheckpointMode::Manual)
    }
}

/// Runs the part in `config.dir/recovery`.
pub fn measure(config: &Config) -> Result<RecoveryMeasured> {
    let data = config.recovery;
    let dir = config.dir.join("recovery");
    remove_if_present(&dir)?;
    let collections = Collections::open(&dir, options(config))?;
    let bar = progress_bar(config.progress, Some(data.keys), "recovery build");
    let began = Instant::now();
    let built = write_keys(&collections, &data, 0..data.keys, config.threads, &bar);
    bar.finish_and_clear();
    built?;
    let build = began.elapsed();
    let log = stats::stats(&collections).log;
    collections.crash();

    let (collections, from_log) = recover(config, &dir, "(b) log only", data.keys)?;

    let spinner = progress_bar(config.progress, None, "recovery checkpoint");
    let began = Instant::now();
    let checkpoint_report = collections.checkpoint_now();
    spinner.finish_and_clear();
    let checkpoint_report = checkpoint_report?;
    let checkpoint = began.elapsed();

    let tail_keys = data.tail_keys(config.recovery_tail_percent);
    let began = Instant::now();
    write_keys(
        &collections,
        &data,
        data.keys..data.keys + tail_keys,
        config.threads,
        &ProgressBar::hidden(),
    )?;
    let tail = began.elapsed();
    collections.crash();

    let (collections, from_images) =
        recover(config, &dir, "(a) images + tail", data.keys + tail_keys)?;
    collections.crash();
    remove_if_present(&dir)?;
    let strings = match config.recovery_string_keys {
        0 => None,
        keys => Some(super::string_recovery::measure(config, keys)?),
    };
    Ok(RecoveryMeasured {
        data,
        recovery_threads: config.recovery_threads,
        build,
        log_records: log.records,
        log_payload_bytes: log.payload_bytes,
        log_file_bytes: log.file_bytes,
        from_log,
        checkpoint,
        checkpoint_report,
        tail_keys,
        tail,
        from_images,
        strings,
    })
}

/// Opens the crashed store in `dir` (timed) and checks it holds `expected`
/// keys and that sampled keys hold what was written.
fn recover(
    config: &Config,
    dir: &std::path::Path,
    label: &'static str,
    expected: u64,
) -> Result<(Collections, Recovered)> {
    let spinner = progress_bar(config.progress, None, &format!("recovery {label}"));
    let began = Instant::now();
    let collections = Collections::open(dir, options(config));
    let open = began.elapsed();
    spinner.finish_and_clear();
    let collections = collections?;
    let found = collections.len();
    let ids = check_count("collections", found, expected)?;
    let data = config.recovery;
    let mut sampled = 0;
    for id in ids {
        if !data.holds(&collections, id) {
            return Err(TimelineError::LostWrite {
                store: "collections",
                what: format!(
                    "after recovery {label}, key {} does not hold its {} elements",
                    String::from_utf8_lossy(&DataSet::key(id)),
                    data.members_of(id)
                ),
            });
        }
        sampled += 1;
    }
    let report = collections.recovery_report().clone();
    Ok((
        collections,
        Recovered {
            open,
            report,
            keys_found: found,
            keys_expected: expected,
            sampled_keys: sampled,
        },
    ))
}

/// Writes keys `ids` with `threads` writers, each a consecutive slice.
fn write_keys(
    collections: &Collections,
    data: &DataSet,
    ids: Range<u64>,
    threads: usize,
    bar: &ProgressBar,
) -> Result<()> {
    records::write_each(ids.end - ids.start, threads, bar, |i| {
        collections.write(vec![data.op(ids.start + i)])?;
        Ok(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_spread_over_keys_and_types_take_turns() {
        let data = DataSet {
            keys: 4,
            members: 10,
            member_bytes: 16,
            types: Types::Mixed,
        };
        let counts: Vec<u64> = (0..4).map(|id| data.members_of(id)).collect();
        assert_eq!(counts, [3, 3, 2, 2]);
        assert_eq!(data.members_of(5), 3, "tail keys repeat the shape");
        assert_eq!(data.tail_keys(1.0), 1);
        assert!(matches!(data.op(0), Op::SetAdd { .. }));
        assert!(matches!(data.op(1), Op::HashSet { .. }));
        assert!(matches!(data.op(2), Op::SortedSetAdd { .. }));
        assert!(matches!(data.op(3), Op::ListPush { .. }));
        let sets = DataSet {
            types: Types::Sets,
            ..data
        };
        assert!(matches!(sets.op(3), Op::SetAdd { .. }));
        assert_ne!(data.member(0, 1), data.member(0, 2));
        assert_eq!(data.member(7, 1).len(), 16);
    }

    #[test]
    fn written_keys_hold_their_elements() {
        let dir = tempfile::tempdir().unwrap();
        let collections = Collections::open(
            dir.path(),
            CollectionsOptions {
                checkpoints: CheckpointMode::Manual,
                ..Default::default()
            },
        )
        .unwrap();
        let data = DataSet {
            keys: 8,
            members: 30,
            member_bytes: 12,
            types: Types::Mixed,
        };
        write_keys(&collections, &data, 0..8, 2, &ProgressBar::hidden()).unwrap();
        assert_eq!(collections.len(), 8);
        assert!((0..8).all(|id| data.holds(&collections, id)));
        assert!(!data.holds(&collections, 8), "key 8 was never written");
    }
}
