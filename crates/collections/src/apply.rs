//! Applying an operation: the one function the frontend, the checkpointer
//! and recovery all use, so the three reach the same state (DIPPER's
//! determinism: the shadow goes through the states the frontend went
//! through).
//!
//! Operations are total: one that does not fit the state it meets (a hash
//! operation on a set, a pop from nothing) changes nothing. The layer above
//! checks types before it logs, so on the frontend this never happens; on
//! replay the state is the same, so it does not happen there either, and if
//! a bug ever made it happen, replay would still agree with the frontend.
//!
//! An operation reads and changes the entries of its [`Op::keys`] and no
//! others (the frontend's locked shards panic on any other key), so
//! operations with no key in common commute: the checkpointer's replay
//! order relies on it (`replay`).

use crate::op::{Bytes, Op, OpBytes};
use crate::state::{Access, Entry, Keys};
use crate::types::stream::Group;
use crate::types::{Hash, InsertPosition, Kind, List, Object, Score, Set, Stream};

/// Applies `op`, whether its byte strings are owned or borrowed from a log
/// record (see [`OpBytes`]): the same changes either way, a borrowed
/// string being copied only when it is stored.
///
/// Returns how many fields an [`Op::HashSet`] added (the rest replaced
/// values), so HSET's reply needs no lookup of its own before the write;
/// 0 for every other operation.
pub fn apply<B: OpBytes>(keys: &mut impl Keys, op: Op<B>) -> usize {
    let mut added = 0;
    match op {
        Op::Delete { key } => keys.discard(&key),
        Op::Expire { key, at_ms } => {
            if let Some(entry) = keys.get_mut(&key) {
                entry.expire_at_ms = at_ms;
            }
        }
        Op::Rename { from, to } => {
            if *from != *to {
                if let Some(entry) = keys.take(&from) {
                    keys.put(&to, entry);
                }
            }
        }
        Op::Copy { from, to } => {
            if *from != *to {
                if let Some(entry) = keys.get(&from).cloned() {
                    keys.put(&to, entry);
                }
            }
        }
        Op::Replace { key, object } => {
            if object.is_empty() {
                keys.take(&key);
            } else {
                keys.put(
                    &key,
                    Entry {
                        object,
                        expire_at_ms: 0,
                        access: Access::default(),
                    },
                );
            }
        }
        Op::HashSet { key, pairs } => update(keys, &key, Kind::Hash, |object| {
            if let Object::Hash(hash) = object {
                for (field, value) in pairs {
                    added += usize::from(set_field(hash, field, value));
                }
            }
        }),
        Op::HashDelete { key, fields } => update(keys, &key, Kind::Hash, |object| {
            if let Object::Hash(hash) = object {
                for field in fields {
                    hash.remove(&field);
                }
            }
        }),
        Op::SetAdd { key, members } => update(keys, &key, Kind::Set, |object| {
            if let Object::Set(set) = object {
                for member in members {
                    add_member(set, member);
                }
            }
        }),
        Op::SetRemove { key, members } => update(keys, &key, Kind::Set, |object| {
            if let Object::Set(set) = object {
                for member in members {
                    set.remove(&member);
                }
            }
        }),
        Op::SortedSetAdd { key, pairs } => update(keys, &key, Kind::SortedSet, |object| {
            if let Object::SortedSet(zset) = object {
                for (score, member) in pairs {
                    if let Some(score) = Score::new(score) {
                        zset.insert(&member, score);
                    }
                }
            }
        }),
        Op::SortedSetRemove { key, members } => update(keys, &key, Kind::SortedSet, |object| {
            if let Object::SortedSet(zset) = object {
                for member in members {
                    zset.remove(&member);
                }
            }
        }),
        Op::ListPush { key, front, values } => update(keys, &key, Kind::List, |object| {
            if let Object::List(list) = object {
                // The bytes are copied into the list's nodes, borrowed or not.
                let values = values.iter().map(|value| &value[..]);
                if front {
                    list.push_front(values);
                } else {
                    list.push_back(values);
                }
            }
        }),
        Op::ListPop { key, front, count } => update_existing(keys, &key, |object| {
            if let Object::List(list) = object {
                let count = usize::try_from(count).unwrap_or(usize::MAX);
                if front {
                    list.drop_front(count);
                } else {
                    list.drop_back(count);
                }
            }
        }),
        Op::ListSet { key, index, value } => update_existing(keys, &key, |object| {
            if let (Object::List(list), Ok(index)) = (object, i64::try_from(index)) {
                list.set(index, &value);
            }
        }),
        Op::ListInsert {
            key,
            before,
            pivot,
            value,
        } => update_existing(keys, &key, |object| {
            if let Object::List(list) = object {
                let position = if before {
                    InsertPosition::Before
                } else {
                    InsertPosition::After
                };
                list.insert(position, &pivot, &value);
            }
        }),
        Op::ListRemove { key, count, value } => update_existing(keys, &key, |object| {
            if let Object::List(list) = object {
                list.remove(count, &value);
            }
        }),
        Op::ListTrim { key, start, stop } => update_existing(keys, &key, |object| {
            if let Object::List(list) = object {
                list.trim(start, stop);
            }
        }),
        Op::ListMove {
            from,
            to,
            from_front,
            to_front,
        } => {
            let destination_ok = match keys.get(&to) {
                None => true,
                Some(entry) => entry.object.kind() == Kind::List,
            };
            if !destination_ok {
                return 0;
            }
            if *from == *to {
                // A rotation: the list never empties on the way, so the key
                // keeps its expiry even with one element (Redis pushes
                // before it checks the source for emptiness).
                if let Some(Object::List(list)) = keys.get_mut(&from).map(|e| &mut e.object) {
                    if let Some(value) = pop(list, from_front) {
                        push(list, to_front, &value);
                    }
                }
                return 0;
            }
            let mut moved = None;
            update_existing(keys, &from, |object| {
                if let Object::List(list) = object {
                    moved = pop(list, from_front);
                }
            });
            if let Some(value) = moved {
                update(keys, &to, Kind::List, |object| {
                    if let Object::List(list) = object {
                        push(list, to_front, &value);
                    }
                });
            }
        }
        Op::StreamAdd { key, id, fields } => update(keys, &key, Kind::Stream, |object| {
            if let Object::Stream(stream) = object {
                stream.append(id, &fields);
            }
        }),
        Op::StreamTrim { key, count } => with_stream(keys, &key, |stream| {
            stream.trim(count);
        }),
        Op::StreamDelete { key, ids } => with_stream(keys, &key, |stream| {
            stream.delete(&ids);
        }),
        Op::StreamSetMeta {
            key,
            last_id,
            entries_added,
            max_deleted_id,
            first_id,
        } => with_stream(keys, &key, |stream| {
            stream.set_meta(last_id, entries_added, max_deleted_id, first_id)
        }),
        Op::GroupCreate {
            key,
            group,
            last_id,
            entries_read,
        } => update(keys, &key, Kind::Stream, |object| {
            if let Object::Stream(stream) = object {
                stream
                    .groups_mut()
                    .entry(group.into())
                    .or_insert_with(|| Group::new(last_id, entries_read));
            }
        }),
        Op::GroupSetId {
            key,
            group,
            last_id,
            entries_read,
        } => with_group(keys, &key, &group, |group| {
            group.last_id = last_id;
            group.entries_read = entries_read;
        }),
        Op::GroupDestroy { key, group } => with_stream(keys, &key, |stream| {
            stream.groups_mut().remove(&*group);
        }),
        Op::ConsumerTouch {
            key,
            group,
            consumer,
            seen_ms,
        } => with_group(keys, &key, &group, |group| group.touch(&consumer, seen_ms)),
        Op::ConsumerDelete {
            key,
            group,
            consumer,
        } => with_group(keys, &key, &group, |group| {
            group.remove_consumer(&consumer);
        }),
        Op::PendingClaim {
            key,
            group,
            consumer,
            entries,
        } => with_group(keys, &key, &group, |group| {
            for (id, delivery_ms, deliveries) in entries {
                group.claim(id, &consumer, delivery_ms, deliveries);
            }
        }),
        Op::PendingAck { key, group, ids } => with_group(keys, &key, &group, |group| {
            for id in ids {
                group.ack(id);
            }
        }),
    }
    added
}

/// Runs `change` on the stream at `key`, if it holds one.
fn with_stream(keys: &mut impl Keys, key: &[u8], change: impl FnOnce(&mut Stream)) {
    if let Some(Object::Stream(stream)) = keys.get_mut(key).map(|e| &mut e.object) {
        change(stream);
    }
}

/// Runs `change` on a group of the stream at `key`, if both exist.
fn with_group(keys: &mut impl Keys, key: &[u8], group: &[u8], change: impl FnOnce(&mut Group)) {
    with_stream(keys, key, |stream| {
        if let Some(group) = stream.group_mut(group) {
            change(group);
        }
    });
}

/// HSET of one field: takes an owned field whole (one descent); looks a
/// borrowed one up first, overwrites the value in place when it is there
/// (see `Hash::overwrite`) and copies the field only when it is new. True
/// if the field is new.
fn set_field<B: OpBytes>(hash: &mut Hash, field: B, value: B) -> bool {
    if B::OWNED {
        hash.insert(field.into(), value.into()).is_none()
    } else if hash.overwrite(&field, &value) {
        false
    } else {
        hash.insert(field.into(), value.into());
        true
    }
}

/// SADD of one member, copying a borrowed member only when it is new.
fn add_member<B: OpBytes>(set: &mut Set, member: B) {
    if B::OWNED || !set.contains(&member) {
        set.insert(member.into());
    }
}

fn push(list: &mut List, front: bool, value: &[u8]) {
    if front {
        list.push_front([value]);
    } else {
        list.push_back([value]);
    }
}

fn pop(list: &mut List, front: bool) -> Option<Bytes> {
    let mut popped = if front {
        list.pop_front(1)
    } else {
        list.pop_back(1)
    };
    popped.pop()
}

/// Runs `change` on the key's object, creating an empty one of `kind` if the
/// key is absent; skips a key of another type; removes the key if the
/// object ends up empty.
fn update(keys: &mut impl Keys, key: &[u8], kind: Kind, change: impl FnOnce(&mut Object)) {
    match keys.get_mut(key) {
        Some(entry) if entry.object.kind() != kind => {}
        Some(entry) => {
            change(&mut entry.object);
            if entry.object.is_empty() {
                keys.take(key);
            }
        }
        None => {
            let mut object = Object::new(kind);
            change(&mut object);
            if !object.is_empty() {
                keys.put(
                    key,
                    Entry {
                        object,
                        expire_at_ms: 0,
                        access: Access::default(),
                    },
                );
            }
        }
    }
}

/// Like [`update`] for operations that never create a key.
fn update_existing(keys: &mut impl Keys, key: &[u8], change: impl FnOnce(&mut Object)) {
    if let Some(entry) = keys.get_mut(key) {
        change(&mut entry.object);
        if entry.object.is_empty() {
            keys.take(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::StreamId;
    use hashbrown::HashMap;

    fn b(s: &str) -> Bytes {
        s.as_bytes().into()
    }

    /// The operations `Op::only_grows` names, each adding to key "k".
    fn growing() -> Vec<Op> {
        vec![
            Op::ListPush {
                key: b("k"),
                front: true,
                values: vec![b("v")],
            },
            Op::HashSet {
                key: b("k"),
                pairs: vec![(b("f"), b("v"))],
            },
            Op::SetAdd {
                key: b("k"),
                members: vec![b("m")],
            },
            Op::SortedSetAdd {
                key: b("k"),
                pairs: vec![(1.5, b("m"))],
            },
            Op::StreamAdd {
                key: b("k"),
                id: StreamId::new(1, 1),
                fields: vec![b("f"), b("v")],
            },
        ]
    }

    /// The keyspace skips its second look at a key after an operation
    /// that only grows it: the key must then be there with the expiry it
    /// had (none when new), whatever the key held before.
    #[test]
    fn operations_that_only_grow_keep_their_key_and_expiry() {
        for op in growing() {
            assert!(op.only_grows(), "{op:?}");
            let mut keys: HashMap<Bytes, Entry> = HashMap::new();
            apply(&mut keys, op.clone());
            assert_eq!(
                keys.get(&b"k"[..]).map(|e| e.expire_at_ms),
                Some(0),
                "{op:?} on no key"
            );
            for existing in growing() {
                let mut keys: HashMap<Bytes, Entry> = HashMap::new();
                apply(&mut keys, existing.clone());
                keys.get_mut(&b"k"[..]).expect("created").expire_at_ms = 1234;
                apply(&mut keys, op.clone());
                assert_eq!(
                    keys.get(&b"k"[..]).map(|e| e.expire_at_ms),
                    Some(1234),
                    "{op:?} on the key {existing:?} made"
                );
            }
        }
        let empty = [
            Op::ListPush {
                key: b("k"),
                front: false,
                values: vec![],
            },
            Op::HashSet {
                key: b("k"),
                pairs: vec![],
            },
            Op::SetAdd {
                key: b("k"),
                members: vec![],
            },
            Op::SortedSetAdd {
                key: b("k"),
                pairs: vec![],
            },
            Op::ListPop {
                key: b("k"),
                front: true,
                count: 1,
            },
            Op::Delete { key: b("k") },
        ];
        for op in empty {
            assert!(!op.only_grows(), "{op:?}");
        }
    }
}
