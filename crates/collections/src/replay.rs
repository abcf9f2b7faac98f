//! The order a checkpoint replays the archived records in.
//!
//! Sequence order reaches the right state, but it hops from key to key as
//! the clients did: with tens of thousands of keys in the working set,
//! nearly every operation misses the CPU caches several times over (the
//! working set's table, the key, the collection's tree, the field, the
//! value it replaces), and those misses were most of a checkpoint's replay.
//! Grouped as below, a checkpoint of the timeline benchmark's tail part
//! (64 MiB of log, zipfian keys) took about 15% less CPU, one of uniform
//! keys about 25% less, though reading the records out of sequence order
//! now misses the cache once per record instead.
//!
//! Only operations on the same key must keep their order (invariant C2):
//! `apply` reads and changes the entries of `Op::keys` and nothing else, so
//! records with no key in common commute. So the records are grouped by
//! key, each group in sequence order, and a key's operations run back to
//! back while its collection is in cache. The keys one record touches
//! together (RENAME, COPY, LMOVE, a MULTI/EXEC batch) are joined into one
//! group, so any two records that share a key keep their order. A group is
//! named by a hash of its key: keys whose hashes collide share a group,
//! which costs locality, never correctness. Every key ends in the state
//! sequence order gives it; only the interleaving of independent keys,
//! which nothing observes, differs.

use hashbrown::HashMap;

use crate::error::{Error, Result};
use crate::op;
use crate::oplog::{Located, OpLog};

/// Replaces `order`'s contents with (group, record) for each record above
/// `covered`, sorted: the order to replay them in. Returns how many there
/// are. (The records are copied, not indexed: jumping about `records` in
/// the replay would miss the cache once more per record.)
pub(crate) fn order(
    log: &OpLog,
    records: &[Located],
    covered: u64,
    order: &mut Vec<(u64, Located)>,
) -> Result<u64> {
    order.clear();
    // Room for every record at once: grown by doubling, a checkpoint of
    // 700,000 records copied its table some twenty times into pages the
    // kernel zeroed first (a checkpoint's scratch is not kept at that
    // size: `checkpoint.rs`).
    order.reserve(records.len());
    let mut joined = Groups::default();
    for record in records {
        if record.seq <= covered {
            // Recovered segments may hold records an earlier checkpoint
            // covered.
            continue;
        }
        let payload = log.payload(record);
        let group = match op::single_key(payload) {
            Some(key) => hash(key),
            // Rare: decode it all to see every key it touches.
            None => {
                let ops =
                    op::decode_batch_borrowed(payload).map_err(|e| Error::CorruptOperation {
                        seq: record.seq,
                        what: e.0,
                    })?;
                joined.join(ops.iter().flat_map(|op| op.keys()).flatten().map(hash))
            }
        };
        order.push((group, *record));
    }
    if !joined.is_empty() {
        for (group, _) in order.iter_mut() {
            *group = joined.find(*group);
        }
    }
    // Within a group, in sequence order.
    order.sort_unstable_by_key(|(group, record)| (*group, record.seq));
    Ok(order.len() as u64)
}

fn hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Groups of key hashes joined by records that touch several keys (a
/// union-find); a hash never joined is a group of its own, and is not
/// stored.
#[derive(Default)]
struct Groups {
    parent: HashMap<u64, u64>,
}

impl Groups {
    fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// The group of `hash`: the root of its tree.
    fn find(&mut self, hash: u64) -> u64 {
        let mut root = hash;
        while let Some(&parent) = self.parent.get(&root) {
            if parent == root {
                break;
            }
            root = parent;
        }
        // Point the path at the root, so the next find is short.
        let mut at = hash;
        while at != root {
            let Some(parent) = self.parent.insert(at, root) else {
                break;
            };
            at = parent;
        }
        root
    }

    /// Joins the groups of `hashes` into one and names it (0 for none: a
    /// batch of no operations, which touches nothing).
    fn join(&mut self, hashes: impl Iterator<Item = u64>) -> u64 {
        let mut joined = None;
        for hash in hashes {
            let root = self.find(hash);
            match joined {
                None => {
                    self.parent.entry(root).or_insert(root);
                    joined = Some(root);
                }
                Some(first) if first != root => {
                    self.parent.insert(root, first);
                }
                Some(_) => {}
            }
        }
        joined.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::apply::apply;
    use crate::op::{encode_batch, Bytes, Op};
    use crate::oplog::{OpLogOptions, Position};
    use crate::state::Entry;
    use crate::OwnSequencer;

    /// A random operation on one of `keys` keys, touching two keys (and
    /// so joining their groups) `joins` times in a hundred.
    fn random_op(rng: &mut rand::rngs::StdRng, keys: u32, joins: u32) -> Op {
        let mut key = || -> Bytes {
            format!("k{}", rng.random_range(0..keys))
                .into_bytes()
                .into()
        };
        let (key, other) = (key(), key());
        let word: Bytes = format!("w{}", rng.random_range(0..8)).into_bytes().into();
        if rng.random_range(0..100) < joins {
            return match rng.random_range(0..3) {
                0 => Op::Rename {
                    from: key,
                    to: other,
                },
                1 => Op::Copy {
                    from: key,
                    to: other,
                },
                _ => Op::ListMove {
                    from: key,
                    to: other,
                    from_front: true,
                    to_front: false,
                },
            };
        }
        match rng.random_range(0..10) {
            0 => Op::Delete { key },
            1 => Op::ListPop {
                key,
                front: false,
                count: 1,
            },
            2 | 3 => Op::HashSet {
                key,
                pairs: vec![(word.clone(), word)],
            },
            4 | 5 => Op::SetAdd {
                key,
                members: vec![word],
            },
            _ => Op::ListPush {
                key,
                front: rng.random(),
                values: vec![word],
            },
        }
    }

    /// Replaying in `order`'s order reaches what sequence order reaches,
    /// with renames, copies and moves joining keys, and batches of several
    /// operations.
    #[test]
    fn grouped_replay_ends_where_sequence_order_does() {
        for seed in 0..20 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let dir = tempfile::tempdir().unwrap();
            let options = OpLogOptions {
                segment_bytes: 64 << 10,
                lanes: 2,
                reserve_segments: 0,
                ..OpLogOptions::default()
            };
            let log = OpLog::open(dir.path(), options, 0).unwrap().log;
            let counter = OwnSequencer::starting_at(1);
            // Single-key records mostly, as in practice, and a few that
            // join keys (few enough that most groups stay apart), or many
            // (then nearly everything is one group).
            let (keys, joins, batches) = if seed % 2 == 0 {
                (300, 1, 2)
            } else {
                (40, 20, 20)
            };
            for _ in 0..2000 {
                let len = if rng.random_range(0..100) < batches {
                    3
                } else {
                    1
                };
                let ops: Vec<Op> = (0..len).map(|_| random_op(&mut rng, keys, joins)).collect();
                log.append(&counter, Position::default(), &encode_batch(&ops))
                    .unwrap();
            }
            let cut = log.cut(&counter);
            let mut records = Vec::new();
            log.locate(&cut.segments, &mut records);
            // Some records are covered by an earlier checkpoint.
            let covered = 100;
            let mut sequence: HashMap<Bytes, Entry> = HashMap::new();
            for record in records.iter().filter(|r| r.seq > covered) {
                for op in op::decode_batch_borrowed(log.payload(record)).unwrap() {
                    apply(&mut sequence, op);
                }
            }
            let mut ordered = Vec::new();
            let count = order(&log, &records, covered, &mut ordered).unwrap();
            assert_eq!(count, records.len() as u64 - covered);
            if seed % 2 == 0 {
                assert!(
                    ordered.windows(2).any(|pair| pair[0].1.seq > pair[1].1.seq),
                    "seed {seed}: not reordered at all"
                );
            }
            let mut grouped: HashMap<Bytes, Entry> = HashMap::new();
            for (_, record) in &ordered {
                for op in op::decode_batch_borrowed(log.payload(record)).unwrap() {
                    apply(&mut grouped, op);
                }
            }
            assert_eq!(grouped, sequence, "seed {seed}");
        }
    }

    #[test]
    fn joined_hashes_share_a_group_and_others_stay_alone() {
        let mut groups = Groups::default();
        assert_eq!(groups.find(5), 5);
        assert!(groups.is_empty());
        let a = groups.join([1, 2].into_iter());
        let b = groups.join([3, 4].into_iter());
        assert_ne!(a, b);
        assert_eq!(groups.find(2), groups.find(1));
        assert_eq!(groups.find(4), groups.find(3));
        // A record touching 2 and 4 joins both groups, whichever it names.
        let c = groups.join([4, 2].into_iter());
        for hash in [1, 2, 3, 4] {
            assert_eq!(groups.find(hash), c);
        }
        assert_eq!(groups.find(6), 6);
        assert_eq!(groups.join(std::iter::empty()), 0);
    }

    #[test]
    fn long_chains_are_found_and_shortened() {
        let mut groups = Groups::default();
        for hash in 1..1000u64 {
            groups.join([hash + 1, hash].into_iter());
        }
        let root = groups.find(1);
        for hash in 1..=1000u64 {
            assert_eq!(groups.find(hash), root);
        }
        assert!(groups.parent.iter().all(|(_, &parent)| parent == root));
    }
}
