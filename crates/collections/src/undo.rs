//! Taking applied operations back: for a transaction that changes the
//! frontend before its record is logged (MULTI/EXEC applies each command
//! at once, because later commands read what earlier ones wrote), and must
//! put everything back if the record then cannot be written.
//!
//! Before an operation is applied, [`Undo::apply`] records its inverse,
//! read from the state it is about to change: the prior values of the
//! fields, members or scores it writes, the elements it pops, the expiry it
//! replaces. The record costs what the operation changes, not the size of
//! the collection: one ZINCRBY on a sorted set of a million members keeps
//! one score. Where an operation takes a whole entry away (DEL, a rename's
//! overwritten target, the last member removed) the entry itself is kept,
//! moved rather than copied. Only operations that rearrange the middle of a
//! list (LINSERT, LREM, LTRIM) keep a copy of the list, as every operation
//! did before this module; so do the stream operations that remove entries,
//! a group or a consumer (XDEL, XTRIM, a trimming XADD, XGROUP DESTROY and
//! DELCONSUMER). Appends, counters, group IDs, consumers' seen times and
//! pending entries keep only what they change.
//!
//! [`Undo::undo`] applies the inverses newest first, so each meets the
//! state its operation left.

use std::collections::HashSet;

use crate::apply::apply;
use crate::op::{encode_batch, Bytes, Op};
use crate::state::{Entry, Keys};
use crate::types::stream::Group;
use crate::types::{Object, Stream, StreamId};

/// Inverse steps of the operations applied so far, oldest first.
#[derive(Default)]
pub struct Undo {
    steps: Vec<Step>,
}

enum Step {
    /// Put the key back as it was: this entry, or absent.
    Entry { key: Bytes, prior: Option<Entry> },
    /// Apply this operation: the inverse of a change within a key.
    Op(Op),
}

impl Undo {
    pub fn new() -> Undo {
        Undo::default()
    }

    /// Roughly the bytes the record holds (entries it keeps, the encoded
    /// size of its inverse operations): for tests and diagnostics.
    pub fn held_bytes(&self) -> usize {
        self.steps
            .iter()
            .map(|step| match step {
                Step::Entry { key, prior } => {
                    key.len() + prior.as_ref().map_or(0, |e| e.object.approx_heap_bytes())
                }
                Step::Op(op) => encode_batch(std::slice::from_ref(op)).len(),
            })
            .sum()
    }

    /// Applies `op` to `keys`, first recording how to take it back.
    pub fn apply(&mut self, keys: &mut impl Keys, op: Op) -> usize {
        let mark = self.steps.len();
        let op = self.record(keys, op);
        // Steps of one operation are undone newest first too: recorded in
        // the order they are to run, so reverse them.
        self.steps[mark..].reverse();
        match op {
            Some(op) => apply(keys, op),
            None => 0,
        }
    }

    /// Puts `keys` back as they were before the first recorded operation.
    pub fn undo(self, keys: &mut impl Keys) {
        for step in self.steps.into_iter().rev() {
            match step {
                Step::Entry { key, prior } => match prior {
                    Some(entry) => keys.put(&key, entry),
                    None => {
                        keys.take(&key);
                    }
                },
                Step::Op(op) => {
                    apply(keys, op);
                }
            }
        }
    }

    /// Records the inverse of `op` against the state it meets; returns the
    /// operation still to apply (None when recording it already did its
    /// work, by taking away the entry it removes).
    fn record(&mut self, keys: &mut impl Keys, op: Op) -> Option<Op> {
        match &op {
            Op::Delete { key } => {
                let prior = keys.take(key);
                self.entry(key, prior);
                return None;
            }
            Op::Expire { key, .. } => {
                if let Some(entry) = keys.get(key) {
                    let at_ms = entry.expire_at_ms;
                    self.op(Op::Expire {
                        key: key.clone(),
                        at_ms,
                    });
                }
            }
            Op::Rename { from, to } => {
                if from != to && keys.get(from).is_some() {
                    // Moved back first, then what `to` held is returned.
                    self.op(Op::Rename {
                        from: to.clone(),
                        to: from.clone(),
                    });
                    let prior = keys.take(to);
                    self.entry(to, prior);
                }
            }
            Op::Copy { from, to } => {
                if from != to && keys.get(from).is_some() {
                    let prior = keys.take(to);
                    self.entry(to, prior);
                }
            }
            Op::Replace { key, .. } => {
                let prior = keys.take(key);
                self.entry(key, prior);
            }
            Op::HashSet { key, pairs } => match keys.get(key).map(|e| &e.object) {
                None => self.entry(key, None),
                Some(Object::Hash(hash)) => {
                    let (restore, added) = split_by_prior(pairs.iter().map(|(f, _)| f), |f| {
                        hash.get(f).map(Bytes::from)
                    });
                    // The hash keeps at least the fields it had, so
                    // deleting the new ones never removes the key.
                    self.op(Op::HashDelete {
                        key: key.clone(),
                        fields: added,
                    });
                    self.op(Op::HashSet {
                        key: key.clone(),
                        pairs: restore,
                    });
                }
                Some(_) => {}
            },
            Op::HashDelete { key, fields } => {
                if let Some(Object::Hash(hash)) = keys.get(key).map(|e| &e.object) {
                    let removed = removed(fields, |f| hash.get(f).map(Bytes::from));
                    if removed.len() == hash.len() {
                        return self.take_whole(keys, key);
                    }
                    self.op(Op::HashSet {
                        key: key.clone(),
                        pairs: removed,
                    });
                }
            }
            Op::SetAdd { key, members } => match keys.get(key).map(|e| &e.object) {
                None => self.entry(key, None),
                Some(Object::Set(set)) => {
                    let (_, added) =
                        split_by_prior(members.iter(), |m| set.contains(m).then_some(()));
                    self.op(Op::SetRemove {
                        key: key.clone(),
                        members: added,
                    });
                }
                Some(_) => {}
            },
            Op::SetRemove { key, members } => {
                if let Some(Object::Set(set)) = keys.get(key).map(|e| &e.object) {
                    let removed = removed(members, |m| set.contains(m).then_some(()));
                    if removed.len() == set.len() {
                        return self.take_whole(keys, key);
                    }
                    self.op(Op::SetAdd {
                        key: key.clone(),
                        members: removed.into_iter().map(|(m, ())| m).collect(),
                    });
                }
            }
            Op::SortedSetAdd { key, pairs } => match keys.get(key).map(|e| &e.object) {
                None => self.entry(key, None),
                Some(Object::SortedSet(zset)) => {
                    let (restore, added) =
                        split_by_prior(pairs.iter().map(|(_, m)| m), |m| zset.score(m));
                    self.op(Op::SortedSetRemove {
                        key: key.clone(),
                        members: added,
                    });
                    self.op(Op::SortedSetAdd {
                        key: key.clone(),
                        pairs: restore.into_iter().map(|(m, score)| (score, m)).collect(),
                    });
                }
                Some(_) => {}
            },
            Op::SortedSetRemove { key, members } => {
                if let Some(Object::SortedSet(zset)) = keys.get(key).map(|e| &e.object) {
                    let removed = removed(members, |m| zset.score(m));
                    if removed.len() == zset.len() {
                        return self.take_whole(keys, key);
                    }
                    self.op(Op::SortedSetAdd {
                        key: key.clone(),
                        pairs: removed.into_iter().map(|(m, score)| (score, m)).collect(),
                    });
                }
            }
            Op::ListPush { key, front, values } => match keys.get(key).map(|e| &e.object) {
                None => self.entry(key, None),
                Some(Object::List(_)) => self.op(Op::ListPop {
                    key: key.clone(),
                    front: *front,
                    count: values.len() as u64,
                }),
                Some(_) => {}
            },
            Op::ListPop { key, front, count } => {
                if let Some(Object::List(list)) = keys.get(key).map(|e| &e.object) {
                    let n = usize::try_from(*count)
                        .unwrap_or(usize::MAX)
                        .min(list.len());
                    if n == list.len() {
                        return self.take_whole(keys, key);
                    }
                    if n == 0 {
                        return Some(op);
                    }
                    // Pushed back one by one: the head's popped elements
                    // nearest the head last, the tail's in order.
                    let values: Vec<Bytes> = if *front {
                        let mut values: Vec<Bytes> =
                            list.range(0, n as i64 - 1).map(Into::into).collect();
                        values.reverse();
                        values
                    } else {
                        let len = list.len() as i64;
                        list.range(len - n as i64, len - 1)
                            .map(Into::into)
                            .collect()
                    };
                    self.op(Op::ListPush {
                        key: key.clone(),
                        front: *front,
                        values,
                    });
                }
            }
            Op::ListSet { key, index, .. } => {
                if let Some(Object::List(list)) = keys.get(key).map(|e| &e.object) {
                    if let Some(prior) = i64::try_from(*index).ok().and_then(|i| list.get(i)) {
                        self.op(Op::ListSet {
                            key: key.clone(),
                            index: *index,
                            value: prior.into(),
                        });
                    }
                }
            }
            Op::ListInsert { key, .. } | Op::ListRemove { key, .. } | Op::ListTrim { key, .. } => {
                let prior = keys.get(key).cloned();
                self.entry(key, prior);
            }
            Op::ListMove {
                from,
                to,
                from_front,
                to_front,
            } => self.record_move(keys, from, to, *from_front, *to_front),
            Op::StreamAdd { key, id, .. } => match keys.get(key).map(|e| &e.object) {
                None => self.entry(key, None),
                Some(Object::Stream(stream)) if *id > stream.last_id() => {
                    let meta = meta_of(key, stream);
                    self.op(Op::StreamDelete {
                        key: key.clone(),
                        ids: vec![*id],
                    });
                    self.op(meta);
                }
                Some(_) => {}
            },
            // Entries and groups that go: the stream is kept whole (as
            // LTRIM keeps its list).
            Op::StreamTrim { key, .. }
            | Op::StreamDelete { key, .. }
            | Op::GroupDestroy { key, .. }
            | Op::ConsumerDelete { key, .. } => {
                let prior = keys.get(key).cloned();
                self.entry(key, prior);
            }
            Op::StreamSetMeta { key, .. } => {
                if let Some(Object::Stream(stream)) = keys.get(key).map(|e| &e.object) {
                    let meta = meta_of(key, stream);
                    self.op(meta);
                }
            }
            Op::GroupCreate { key, group, .. } => match keys.get(key).map(|e| &e.object) {
                None => self.entry(key, None),
                Some(Object::Stream(stream)) if stream.group(group).is_none() => {
                    self.op(Op::GroupDestroy {
                        key: key.clone(),
                        group: group.clone(),
                    })
                }
                Some(_) => {}
            },
            Op::GroupSetId { key, group, .. } => {
                if let Some(prior) = group_of(keys, key, group) {
                    let op = Op::GroupSetId {
                        key: key.clone(),
                        group: group.clone(),
                        last_id: prior.last_id,
                        entries_read: prior.entries_read,
                    };
                    self.op(op);
                }
            }
            Op::ConsumerTouch {
                key,
                group,
                consumer,
                ..
            } => {
                if let Some(prior) = group_of(keys, key, group) {
                    let op = match prior.consumer(consumer) {
                        Some(prior) => Op::ConsumerTouch {
                            key: key.clone(),
                            group: group.clone(),
                            consumer: consumer.clone(),
                            seen_ms: prior.seen_ms,
                        },
                        None => Op::ConsumerDelete {
                            key: key.clone(),
                            group: group.clone(),
                            consumer: consumer.clone(),
                        },
                    };
                    self.op(op);
                }
            }
            Op::PendingClaim {
                key,
                group,
                consumer,
                entries,
            } => {
                if let Some(prior) = group_of(keys, key, group) {
                    let created = prior.consumer(consumer).is_none();
                    let ids = entries.iter().map(|(id, _, _)| *id);
                    let mut steps = restore_pending(key, group, prior, ids);
                    if created {
                        steps.push(Op::ConsumerDelete {
                            key: key.clone(),
                            group: group.clone(),
                            consumer: consumer.clone(),
                        });
                    }
                    for step in steps {
                        self.op(step);
                    }
                }
            }
            Op::PendingAck { key, group, ids } => {
                if let Some(prior) = group_of(keys, key, group) {
                    for step in restore_pending(key, group, prior, ids.iter().copied()) {
                        self.op(step);
                    }
                }
            }
        }
        Some(op)
    }

    /// LMOVE: the value goes back from where it was pushed to where it was
    /// popped.
    fn record_move(
        &mut self,
        keys: &mut impl Keys,
        from: &Bytes,
        to: &Bytes,
        from_front: bool,
        to_front: bool,
    ) {
        let source_len = match keys.get(from).map(|e| &e.object) {
            Some(Object::List(list)) => list.len(),
            _ => return,
        };
        let target = keys.get(to).map(|e| matches!(e.object, Object::List(_)));
        if target == Some(false) {
            return;
        }
        if from == to {
            // A rotation: rotate back.
            self.op(Op::ListMove {
                from: to.clone(),
                to: from.clone(),
                from_front: to_front,
                to_front: from_front,
            });
            return;
        }
        if source_len == 1 {
            // The source empties, expiry and all: keep it whole, it is one
            // element.
            let prior = keys.get(from).cloned();
            self.pop_or_remove(to, target.is_some(), to_front);
            self.entry(from, prior);
            return;
        }
        self.pop_or_remove(to, target.is_some(), to_front);
        let value = {
            let Some(Object::List(list)) = keys.get(from).map(|e| &e.object) else {
                unreachable!("checked above")
            };
            let at = if from_front { 0 } else { -1 };
            list.get(at).expect("the source is not empty").into()
        };
        self.op(Op::ListPush {
            key: from.clone(),
            front: from_front,
            values: vec![value],
        });
    }

    /// The inverse of pushing one value onto `key`'s list: a pop, or the
    /// key's removal if the push created it.
    fn pop_or_remove(&mut self, key: &Bytes, existed: bool, front: bool) {
        if existed {
            self.op(Op::ListPop {
                key: key.clone(),
                front,
                count: 1,
            });
        } else {
            self.entry(key, None);
        }
    }

    /// For an operation that removes the whole key: moves the entry into
    /// the record instead of applying the operation.
    fn take_whole(&mut self, keys: &mut impl Keys, key: &Bytes) -> Option<Op> {
        let prior = keys.take(key);
        self.entry(key, prior);
        None
    }

    fn entry(&mut self, key: &Bytes, prior: Option<Entry>) {
        self.steps.push(Step::Entry {
            key: key.clone(),
            prior,
        });
    }

    fn op(&mut self, op: Op) {
        self.steps.push(Step::Op(op));
    }
}

/// The operation that sets `stream`'s counters back as they are.
fn meta_of(key: &Bytes, stream: &Stream) -> Op {
    Op::StreamSetMeta {
        key: key.clone(),
        last_id: stream.last_id(),
        entries_added: stream.entries_added(),
        max_deleted_id: stream.max_deleted_id(),
        first_id: stream.first_id(),
    }
}

/// The group `group` of the stream at `key`.
fn group_of<'k>(keys: &'k impl Keys, key: &[u8], group: &[u8]) -> Option<&'k Group> {
    match keys.get(key).map(|e| &e.object) {
        Some(Object::Stream(stream)) => stream.group(group),
        _ => None,
    }
}

/// Operations that put the PEL entries of `ids` back as `prior` has them:
/// each pending one claimed back by its owner with its delivery time and
/// count, each absent one acknowledged.
fn restore_pending(
    key: &Bytes,
    group: &Bytes,
    prior: &Group,
    ids: impl Iterator<Item = StreamId>,
) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut absent = Vec::new();
    for id in ids {
        match prior.pel().get(&id) {
            Some(pending) => ops.push(Op::PendingClaim {
                key: key.clone(),
                group: group.clone(),
                consumer: Bytes::from(&*pending.consumer),
                entries: vec![(id, pending.delivery_ms, pending.deliveries)],
            }),
            None => absent.push(id),
        }
    }
    if !absent.is_empty() {
        ops.push(Op::PendingAck {
            key: key.clone(),
            group: group.clone(),
            ids: absent,
        });
    }
    ops
}

/// The names an upsert writes (fields, members), split into those present
/// before, with what `prior` says they held, and those it adds.
fn split_by_prior<'n, T>(
    names: impl Iterator<Item = &'n Bytes>,
    prior: impl Fn(&[u8]) -> Option<T>,
) -> (Vec<(Bytes, T)>, Vec<Bytes>) {
    let mut present = Vec::new();
    let mut added = Vec::new();
    for name in names {
        match prior(name) {
            Some(held) => present.push((name.clone(), held)),
            None => added.push(name.clone()),
        }
    }
    (present, added)
}

/// What a removal of `names` takes away: each present name once (a name
/// may repeat), with what `prior` says it held.
fn removed<T>(names: &[Bytes], prior: impl Fn(&[u8]) -> Option<T>) -> Vec<(Bytes, T)> {
    let mut seen = HashSet::new();
    names
        .iter()
        .filter(|name| seen.insert(&name[..]))
        .filter_map(|name| Some((name.clone(), prior(name)?)))
        .collect()
}
