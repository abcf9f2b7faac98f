//! Logical operations: what one log record says (DIPPER's "operation and
//! its parameters", never whole structures when avoidable).
//!
//! Operations are effects, resolved by the caller before logging: whatever
//! depended on randomness, the clock or a read (SPOP's choice, HINCRBY's
//! sum, ZADD GT's comparison, LINSERT's pivot) is already decided, so
//! applying a record is deterministic and replay reaches the same state.
//! One record carries a batch: the operations of one command, or of one
//! MULTI/EXEC, applied together.
//!
//! ## Encoding (a record's payload)
//!
//! ```text
//! batch   = varint count, then count operations
//! op      = tag (1 byte), then its fields in declaration order:
//!           bytes  = varint length ++ the bytes
//!           list   = varint count ++ elements
//!           u64/i64 = varint (i64 zigzag), f64 = 8 bytes little-endian,
//!           bool   = 1 byte (0 or 1), object = bytes holding its image
//! ```

use std::collections::VecDeque;
use std::ops::Deref;

use crate::types::{Object, StreamId};

pub type Bytes = Box<[u8]>;

/// The byte strings an [`Op`] carries: [`Bytes`], owned (what the frontend
/// builds and logs, and what [`decode_batch`] returns), or `&[u8]`,
/// borrowed from the record they were decoded from
/// ([`decode_batch_borrowed`]): the checkpointer's replay, which reads
/// most of them only (a key to look up, a field that already exists) and
/// so need not copy them. [`crate::apply::apply`] takes either and copies
/// a borrowed string only to store it.
pub trait OpBytes: Deref<Target = [u8]> + Into<Bytes> {
    /// Whether `into()` is free (the bytes are already owned): then a
    /// store takes them whole instead of looking before it copies.
    const OWNED: bool;
}

impl OpBytes for Bytes {
    const OWNED: bool = true;
}

impl OpBytes for &[u8] {
    const OWNED: bool = false;
}

/// How decoding makes an operation's byte strings out of the record's.
trait FromPayload<'a>: OpBytes {
    fn from_payload(bytes: &'a [u8]) -> Self;
}

impl<'a> FromPayload<'a> for Bytes {
    fn from_payload(bytes: &'a [u8]) -> Self {
        bytes.into()
    }
}

impl<'a> FromPayload<'a> for &'a [u8] {
    fn from_payload(bytes: &'a [u8]) -> Self {
        bytes
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op<B = Bytes> {
    /// Removes a key of any type (absent: nothing).
    Delete {
        key: B,
    },
    /// Sets (or with 0 clears) the expiry time of an existing key.
    Expire {
        key: B,
        at_ms: u64,
    },
    /// Moves `from` (object and expiry) to `to`, replacing what `to` held.
    Rename {
        from: B,
        to: B,
    },
    /// Copies `from` to `to`, replacing what `to` held.
    Copy {
        from: B,
        to: B,
    },
    /// Makes `key` hold `object` (no expiry), replacing what it held. For
    /// results computed from several keys (SUNIONSTORE, ZINTERSTORE...).
    Replace {
        key: B,
        object: Object,
    },
    /// Sets fields (creates the hash).
    HashSet {
        key: B,
        pairs: Vec<(B, B)>,
    },
    /// Removes fields (removes the hash when it empties).
    HashDelete {
        key: B,
        fields: Vec<B>,
    },
    SetAdd {
        key: B,
        members: Vec<B>,
    },
    SetRemove {
        key: B,
        members: Vec<B>,
    },
    /// Sets members' scores (creates the sorted set).
    SortedSetAdd {
        key: B,
        pairs: Vec<(f64, B)>,
    },
    SortedSetRemove {
        key: B,
        members: Vec<B>,
    },
    /// Pushes values one by one at the head (`front`) or tail.
    ListPush {
        key: B,
        front: bool,
        values: Vec<B>,
    },
    /// Pops up to `count` values from the head or tail.
    ListPop {
        key: B,
        front: bool,
        count: u64,
    },
    /// Replaces the value at a resolved (non-negative, in range) index.
    ListSet {
        key: B,
        index: u64,
        value: B,
    },
    /// LINSERT: inserts `value` before (or after) the first `pivot` from
    /// the head; nothing when there is none.
    ListInsert {
        key: B,
        before: bool,
        pivot: B,
        value: B,
    },
    /// LREM: removes `count` occurrences from the head (>0), tail (<0), or all (0).
    ListRemove {
        key: B,
        count: i64,
        value: B,
    },
    /// LTRIM, Redis semantics: keeps `start..=stop` (negative: from the tail).
    ListTrim {
        key: B,
        start: i64,
        stop: i64,
    },
    /// LMOVE: pops one value from `from` and pushes it onto `to`.
    ListMove {
        from: B,
        to: B,
        from_front: bool,
        to_front: bool,
    },
    /// XADD: appends an entry above the last ID (creates the stream).
    /// `fields`: field, value, field, value...
    StreamAdd {
        key: B,
        id: StreamId,
        fields: Vec<B>,
    },
    /// A resolved trim (XTRIM, XADD's MAXLEN/MINID): removes the first
    /// `count` entries.
    StreamTrim {
        key: B,
        count: u64,
    },
    /// XDEL: removes the entries with these IDs.
    StreamDelete {
        key: B,
        ids: Vec<StreamId>,
    },
    /// XSETID (and undo): sets a stream's counters.
    StreamSetMeta {
        key: B,
        last_id: StreamId,
        entries_added: u64,
        max_deleted_id: StreamId,
        first_id: StreamId,
    },
    /// XGROUP CREATE (creates an empty stream when absent: MKSTREAM).
    GroupCreate {
        key: B,
        group: B,
        last_id: StreamId,
        entries_read: i64,
    },
    /// Sets a group's last delivered ID and read counter (XGROUP SETID,
    /// XREADGROUP's new deliveries, XCLAIM's LASTID).
    GroupSetId {
        key: B,
        group: B,
        last_id: StreamId,
        entries_read: i64,
    },
    /// XGROUP DESTROY.
    GroupDestroy {
        key: B,
        group: B,
    },
    /// Creates a consumer if absent and sets its seen time.
    ConsumerTouch {
        key: B,
        group: B,
        consumer: B,
        seen_ms: u64,
    },
    /// XGROUP DELCONSUMER: the consumer and its pending entries go.
    ConsumerDelete {
        key: B,
        group: B,
        consumer: B,
    },
    /// Makes entries pending for `consumer` with these delivery times and
    /// counts (XREADGROUP, XCLAIM, XAUTOCLAIM): `(id, delivery_ms,
    /// deliveries)`.
    PendingClaim {
        key: B,
        group: B,
        consumer: B,
        entries: Vec<(StreamId, u64, u64)>,
    },
    /// XACK (and the PEL entries XCLAIM/XAUTOCLAIM find deleted).
    PendingAck {
        key: B,
        group: B,
        ids: Vec<StreamId>,
    },
}

/// The key fields of an operation, by shared or mutable reference
/// (whichever `$op` is): one list of which fields are keys.
macro_rules! key_fields {
    ($op:expr) => {{
        use Op::*;
        match $op {
            Rename { from, to } | Copy { from, to } | ListMove { from, to, .. } => {
                [Some(from), Some(to)]
            }
            Delete { key }
            | Expire { key, .. }
            | Replace { key, .. }
            | HashSet { key, .. }
            | HashDelete { key, .. }
            | SetAdd { key, .. }
            | SetRemove { key, .. }
            | SortedSetAdd { key, .. }
            | SortedSetRemove { key, .. }
            | ListPush { key, .. }
            | ListPop { key, .. }
            | ListSet { key, .. }
            | ListInsert { key, .. }
            | ListRemove { key, .. }
            | ListTrim { key, .. }
            | StreamAdd { key, .. }
            | StreamTrim { key, .. }
            | StreamDelete { key, .. }
            | StreamSetMeta { key, .. }
            | GroupCreate { key, .. }
            | GroupSetId { key, .. }
            | GroupDestroy { key, .. }
            | ConsumerTouch { key, .. }
            | ConsumerDelete { key, .. }
            | PendingClaim { key, .. }
            | PendingAck { key, .. } => [Some(key), None],
        }
    }};
}

impl<B: OpBytes> Op<B> {
    /// The keys the operation touches (the checkpointer loads their images).
    pub fn keys(&self) -> [Option<&[u8]>; 2] {
        key_fields!(self).map(|key| key.map(|k| &**k))
    }

    /// Whether applying the operation leaves its key present with the
    /// expiry it had: it only adds to a collection (at least one element),
    /// creating it without an expiry if absent, and a key of another type
    /// is left as it is. The keyspace's books then need no second look at
    /// the key after the write.
    pub fn only_grows(&self) -> bool {
        match self {
            Op::ListPush { values, .. } => !values.is_empty(),
            Op::HashSet { pairs, .. } => !pairs.is_empty(),
            Op::SetAdd { members, .. } => !members.is_empty(),
            Op::SortedSetAdd { pairs, .. } => !pairs.is_empty(),
            // A stream keeps its key even when trimmed to nothing; an
            // entry is never empty (XADD needs a field and a value).
            Op::StreamAdd { .. } => true,
            _ => false,
        }
    }
}

impl<B: OpBytes> Op<B> {
    /// The same operation owning its byte strings (each borrowed one
    /// copied once): what an atomic transaction keeps for its commit's
    /// record, made without encoding and decoding it.
    pub fn into_owned(self) -> Op {
        fn list<B: OpBytes>(items: Vec<B>) -> Vec<Bytes> {
            items.into_iter().map(Into::into).collect()
        }
        use Op::*;
        match self {
            Delete { key } => Delete { key: key.into() },
            Expire { key, at_ms } => Expire {
                key: key.into(),
                at_ms,
            },
            Rename { from, to } => Rename {
                from: from.into(),
                to: to.into(),
            },
            Copy { from, to } => Copy {
                from: from.into(),
                to: to.into(),
            },
            Replace { key, object } => Replace {
                key: key.into(),
                object,
            },
            HashSet { key, pairs } => HashSet {
                key: key.into(),
                pairs: pairs
                    .into_iter()
                    .map(|(field, value)| (field.into(), value.into()))
                    .collect(),
            },
            HashDelete { key, fields } => HashDelete {
                key: key.into(),
                fields: list(fields),
            },
            SetAdd { key, members } => SetAdd {
                key: key.into(),
                members: list(members),
            },
            SetRemove { key, members } => SetRemove {
                key: key.into(),
                members: list(members),
            },
            SortedSetAdd { key, pairs } => SortedSetAdd {
                key: key.into(),
                pairs: pairs
                    .into_iter()
                    .map(|(score, member)| (score, member.into()))
                    .collect(),
            },
            SortedSetRemove { key, members } => SortedSetRemove {
                key: key.into(),
                members: list(members),
            },
            ListPush { key, front, values } => ListPush {
                key: key.into(),
                front,
                values: list(values),
            },
            ListPop { key, front, count } => ListPop {
                key: key.into(),
                front,
                count,
            },
            ListSet { key, index, value } => ListSet {
                key: key.into(),
                index,
                value: value.into(),
            },
            ListInsert {
                key,
                before,
                pivot,
                value,
            } => ListInsert {
                key: key.into(),
                before,
                pivot: pivot.into(),
                value: value.into(),
            },
            ListRemove { key, count, value } => ListRemove {
                key: key.into(),
                count,
                value: value.into(),
            },
            ListTrim { key, start, stop } => ListTrim {
                key: key.into(),
                start,
                stop,
            },
            ListMove {
                from,
                to,
                from_front,
                to_front,
            } => ListMove {
                from: from.into(),
                to: to.into(),
                from_front,
                to_front,
            },
            StreamAdd { key, id, fields } => StreamAdd {
                key: key.into(),
                id,
                fields: list(fields),
            },
            StreamTrim { key, count } => StreamTrim {
                key: key.into(),
                count,
            },
            StreamDelete { key, ids } => StreamDelete {
                key: key.into(),
                ids,
            },
            StreamSetMeta {
                key,
                last_id,
                entries_added,
                max_deleted_id,
                first_id,
            } => StreamSetMeta {
                key: key.into(),
                last_id,
                entries_added,
                max_deleted_id,
                first_id,
            },
            GroupCreate {
                key,
                group,
                last_id,
                entries_read,
            } => GroupCreate {
                key: key.into(),
                group: group.into(),
                last_id,
                entries_read,
            },
            GroupSetId {
                key,
                group,
                last_id,
                entries_read,
            } => GroupSetId {
                key: key.into(),
                group: group.into(),
                last_id,
                entries_read,
            },
            GroupDestroy { key, group } => GroupDestroy {
                key: key.into(),
                group: group.into(),
            },
            ConsumerTouch {
                key,
                group,
                consumer,
                seen_ms,
            } => ConsumerTouch {
                key: key.into(),
                group: group.into(),
                consumer: consumer.into(),
                seen_ms,
            },
            ConsumerDelete {
                key,
                group,
                consumer,
            } => ConsumerDelete {
                key: key.into(),
                group: group.into(),
                consumer: consumer.into(),
            },
            PendingClaim {
                key,
                group,
                consumer,
                entries,
            } => PendingClaim {
                key: key.into(),
                group: group.into(),
                consumer: consumer.into(),
                entries,
            },
            PendingAck { key, group, ids } => PendingAck {
                key: key.into(),
                group: group.into(),
                ids,
            },
        }
    }
}

impl Op<Bytes> {
    /// The keys, to rewrite in place (the keyspace translates database
    /// numbers to the prefixes they are stored under).
    pub fn keys_mut(&mut self) -> [Option<&mut [u8]>; 2] {
        key_fields!(self).map(|key| key.map(|k| &mut **k))
    }
}

/// Why a payload is not a batch of operations.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

pub fn encode_batch(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    encode_batch_into(ops, &mut out);
    out
}

/// `encode_batch` appended to `out` (a buffer kept between calls), of
/// operations owning their byte strings or borrowing them (the same bytes
/// either way).
pub fn encode_batch_into<B: OpBytes>(ops: &[Op<B>], out: &mut Vec<u8>) {
    put_varint(out, ops.len() as u64);
    for op in ops {
        encode_op(op, out);
    }
}

pub fn decode_batch(bytes: &[u8]) -> Result<Vec<Op>, DecodeError> {
    decode(bytes)
}

/// [`decode_batch`] with the operations' byte strings borrowed from
/// `bytes` rather than copied (see [`OpBytes`]).
pub fn decode_batch_borrowed(bytes: &[u8]) -> Result<Vec<Op<&[u8]>>, DecodeError> {
    decode(bytes)
}

/// The key of a batch that is one operation on one key (nearly every
/// record), read without decoding the rest; `None` for anything else:
/// several operations, an operation on two keys, or bytes that do not
/// start like a batch (decoding it in full says what is wrong). Agrees
/// with [`Op::keys`] (a test checks every operation).
pub fn single_key(bytes: &[u8]) -> Option<&[u8]> {
    let mut reader = Reader { bytes, at: 0 };
    if reader.varint().ok()? != 1 {
        return None;
    }
    match reader.byte().ok()? {
        DELETE | EXPIRE | REPLACE | HASH_SET | HASH_DELETE | SET_ADD | SET_REMOVE | ZSET_ADD
        | ZSET_REMOVE | LIST_PUSH | LIST_POP | LIST_SET | LIST_INSERT | LIST_REMOVE | LIST_TRIM
        | STREAM_ADD | STREAM_TRIM | STREAM_DELETE | STREAM_SET_META | GROUP_CREATE
        | GROUP_SET_ID | GROUP_DESTROY | CONSUMER_TOUCH | CONSUMER_DELETE | PENDING_CLAIM
        | PENDING_ACK => reader.bytes().ok(),
        _ => None,
    }
}

/// [`decode_batch_borrowed`] onto the back of `out`, with no vector of
/// its own: the checkpointer decodes every record of a checkpoint into
/// its look-ahead queue. On an error `out` may hold some of the batch's
/// operations.
pub fn decode_batch_borrowed_into<'a>(
    bytes: &'a [u8],
    out: &mut VecDeque<Op<&'a [u8]>>,
) -> Result<(), DecodeError> {
    decode_with(bytes, out)
}

fn decode<'a, B: FromPayload<'a>>(bytes: &'a [u8]) -> Result<Vec<Op<B>>, DecodeError> {
    let mut ops = Vec::new();
    decode_with(bytes, &mut ops)?;
    Ok(ops)
}

/// Where [`decode_with`] puts a batch's operations.
trait OpSink<B> {
    fn reserve(&mut self, count: usize);
    fn push(&mut self, op: Op<B>);
}

impl<B> OpSink<B> for Vec<Op<B>> {
    fn reserve(&mut self, count: usize) {
        self.reserve_exact(count);
    }
    fn push(&mut self, op: Op<B>) {
        Vec::push(self, op);
    }
}

impl<B> OpSink<B> for VecDeque<Op<B>> {
    fn reserve(&mut self, count: usize) {
        VecDeque::reserve(self, count);
    }
    fn push(&mut self, op: Op<B>) {
        self.push_back(op);
    }
}

/// Decodes a batch into `out`, reserving room for as many operations as
/// it claims once that is checked against its length.
fn decode_with<'a, B: FromPayload<'a>>(
    bytes: &'a [u8],
    out: &mut impl OpSink<B>,
) -> Result<(), DecodeError> {
    let mut reader = Reader { bytes, at: 0 };
    let count = reader.varint()?;
    // Every operation takes at least two bytes: a bound before allocating.
    if count > bytes.len() as u64 {
        return Err(DecodeError(format!(
            "batch claims {count} operations in {} bytes",
            bytes.len()
        )));
    }
    out.reserve(count as usize);
    for _ in 0..count {
        out.push(reader.op()?);
    }
    if reader.at != bytes.len() {
        return Err(DecodeError(format!(
            "{} trailing bytes",
            bytes.len() - reader.at
        )));
    }
    Ok(())
}

const DELETE: u8 = 1;
const EXPIRE: u8 = 2;
const RENAME: u8 = 3;
const COPY: u8 = 4;
const REPLACE: u8 = 5;
const HASH_SET: u8 = 10;
const HASH_DELETE: u8 = 11;
const SET_ADD: u8 = 20;
const SET_REMOVE: u8 = 21;
const ZSET_ADD: u8 = 30;
const ZSET_REMOVE: u8 = 31;
const LIST_PUSH: u8 = 40;
const LIST_POP: u8 = 41;
const LIST_SET: u8 = 42;
const LIST_INSERT: u8 = 43;
const LIST_REMOVE: u8 = 44;
const LIST_TRIM: u8 = 45;
const LIST_MOVE: u8 = 46;
const STREAM_ADD: u8 = 50;
const STREAM_TRIM: u8 = 51;
const STREAM_DELETE: u8 = 52;
const STREAM_SET_META: u8 = 53;
const GROUP_CREATE: u8 = 54;
const GROUP_SET_ID: u8 = 55;
const GROUP_DESTROY: u8 = 56;
const CONSUMER_TOUCH: u8 = 57;
const CONSUMER_DELETE: u8 = 58;
const PENDING_CLAIM: u8 = 59;
const PENDING_ACK: u8 = 60;

fn encode_op<B: OpBytes>(op: &Op<B>, out: &mut Vec<u8>) {
    use Op::*;
    match op {
        Delete { key } => {
            out.push(DELETE);
            put_bytes(out, key);
        }
        Expire { key, at_ms } => {
            out.push(EXPIRE);
            put_bytes(out, key);
            put_varint(out, *at_ms);
        }
        Rename { from, to } => {
            out.push(RENAME);
            put_bytes(out, from);
            put_bytes(out, to);
        }
        Copy { from, to } => {
            out.push(COPY);
            put_bytes(out, from);
            put_bytes(out, to);
        }
        Replace { key, object } => {
            out.push(REPLACE);
            put_bytes(out, key);
            let mut image = Vec::new();
            object.encode(&mut image);
            put_bytes(out, &image);
        }
        HashSet { key, pairs } => {
            out.push(HASH_SET);
            put_bytes(out, key);
            put_varint(out, pairs.len() as u64);
            for (field, value) in pairs {
                put_bytes(out, field);
                put_bytes(out, value);
            }
        }
        HashDelete { key, fields } => {
            out.push(HASH_DELETE);
            put_bytes(out, key);
            put_list(out, fields);
        }
        SetAdd { key, members } => {
            out.push(SET_ADD);
            put_bytes(out, key);
            put_list(out, members);
        }
        SetRemove { key, members } => {
            out.push(SET_REMOVE);
            put_bytes(out, key);
            put_list(out, members);
        }
        SortedSetAdd { key, pairs } => {
            out.push(ZSET_ADD);
            put_bytes(out, key);
            put_varint(out, pairs.len() as u64);
            for (score, member) in pairs {
                out.extend_from_slice(&score.to_le_bytes());
                put_bytes(out, member);
            }
        }
        SortedSetRemove { key, members } => {
            out.push(ZSET_REMOVE);
            put_bytes(out, key);
            put_list(out, members);
        }
        ListPush { key, front, values } => {
            out.push(LIST_PUSH);
            put_bytes(out, key);
            out.push(*front as u8);
            put_list(out, values);
        }
        ListPop { key, front, count } => {
            out.push(LIST_POP);
            put_bytes(out, key);
            out.push(*front as u8);
            put_varint(out, *count);
        }
        ListSet { key, index, value } => {
            out.push(LIST_SET);
            put_bytes(out, key);
            put_varint(out, *index);
            put_bytes(out, value);
        }
        ListInsert {
            key,
            before,
            pivot,
            value,
        } => {
            out.push(LIST_INSERT);
            put_bytes(out, key);
            out.push(*before as u8);
            put_bytes(out, pivot);
            put_bytes(out, value);
        }
        ListRemove { key, count, value } => {
            out.push(LIST_REMOVE);
            put_bytes(out, key);
            put_varint(out, zigzag(*count));
            put_bytes(out, value);
        }
        ListTrim { key, start, stop } => {
            out.push(LIST_TRIM);
            put_bytes(out, key);
            put_varint(out, zigzag(*start));
            put_varint(out, zigzag(*stop));
        }
        ListMove {
            from,
            to,
            from_front,
            to_front,
        } => {
            out.push(LIST_MOVE);
            put_bytes(out, from);
            put_bytes(out, to);
            out.push(*from_front as u8);
            out.push(*to_front as u8);
        }
        StreamAdd { key, id, fields } => {
            out.push(STREAM_ADD);
            put_bytes(out, key);
            put_id(out, *id);
            put_list(out, fields);
        }
        StreamTrim { key, count } => {
            out.push(STREAM_TRIM);
            put_bytes(out, key);
            put_varint(out, *count);
        }
        StreamDelete { key, ids } => {
            out.push(STREAM_DELETE);
            put_bytes(out, key);
            put_ids(out, ids);
        }
        StreamSetMeta {
            key,
            last_id,
            entries_added,
            max_deleted_id,
            first_id,
        } => {
            out.push(STREAM_SET_META);
            put_bytes(out, key);
            put_id(out, *last_id);
            put_varint(out, *entries_added);
            put_id(out, *max_deleted_id);
            put_id(out, *first_id);
        }
        GroupCreate {
            key,
            group,
            last_id,
            entries_read,
        } => {
            out.push(GROUP_CREATE);
            put_bytes(out, key);
            put_bytes(out, group);
            put_id(out, *last_id);
            put_varint(out, zigzag(*entries_read));
        }
        GroupSetId {
            key,
            group,
            last_id,
            entries_read,
        } => {
            out.push(GROUP_SET_ID);
            put_bytes(out, key);
            put_bytes(out, group);
            put_id(out, *last_id);
            put_varint(out, zigzag(*entries_read));
        }
        GroupDestroy { key, group } => {
            out.push(GROUP_DESTROY);
            put_bytes(out, key);
            put_bytes(out, group);
        }
        ConsumerTouch {
            key,
            group,
            consumer,
            seen_ms,
        } => {
            out.push(CONSUMER_TOUCH);
            put_bytes(out, key);
            put_bytes(out, group);
            put_bytes(out, consumer);
            put_varint(out, *seen_ms);
        }
        ConsumerDelete {
            key,
            group,
            consumer,
        } => {
            out.push(CONSUMER_DELETE);
            put_bytes(out, key);
            put_bytes(out, group);
            put_bytes(out, consumer);
        }
        PendingClaim {
            key,
            group,
            consumer,
            entries,
        } => {
            out.push(PENDING_CLAIM);
            put_bytes(out, key);
            put_bytes(out, group);
            put_bytes(out, consumer);
            put_varint(out, entries.len() as u64);
            for (id, delivery_ms, deliveries) in entries {
                put_id(out, *id);
                put_varint(out, *delivery_ms);
                put_varint(out, *deliveries);
            }
        }
        PendingAck { key, group, ids } => {
            out.push(PENDING_ACK);
            put_bytes(out, key);
            put_bytes(out, group);
            put_ids(out, ids);
        }
    }
}

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    put_varint(out, id.ms);
    put_varint(out, id.seq);
}

fn put_ids(out: &mut Vec<u8>, ids: &[StreamId]) {
    put_varint(out, ids.len() as u64);
    for id in ids {
        put_id(out, *id);
    }
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn put_list<B: OpBytes>(out: &mut Vec<u8>, items: &[B]) {
    put_varint(out, items.len() as u64);
    for item in items {
        put_bytes(out, item);
    }
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    (value >> 1) as i64 ^ -((value & 1) as i64)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, DecodeError> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| DecodeError("truncated".into()))?;
        self.at += 1;
        Ok(byte)
    }

    fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError(format!("bad boolean {other}"))),
        }
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError("varint longer than 10 bytes".into()))
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(usize::try_from(len).map_err(|_| DecodeError("length overflows".into()))?)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| DecodeError(format!("length {len} runs past the end")))?;
        let bytes = &self.bytes[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn bytes<B: FromPayload<'a>>(&mut self) -> Result<B, DecodeError> {
        let len = self.varint()?;
        Ok(B::from_payload(self.take(len)?))
    }

    fn f64(&mut self) -> Result<f64, DecodeError> {
        let value = f64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        if value.is_nan() {
            return Err(DecodeError("NaN score".into()));
        }
        Ok(value)
    }

    /// A count of elements, each at least `min_bytes` long: bounded by what
    /// is left, so a corrupt count cannot make us allocate wildly.
    fn count(&mut self, min_bytes: usize) -> Result<usize, DecodeError> {
        let count = self.varint()?;
        let left = (self.bytes.len() - self.at) as u64;
        if count.saturating_mul(min_bytes as u64) > left {
            return Err(DecodeError(format!(
                "count {count} exceeds the {left} bytes left"
            )));
        }
        Ok(count as usize)
    }

    fn id(&mut self) -> Result<StreamId, DecodeError> {
        Ok(StreamId::new(self.varint()?, self.varint()?))
    }

    fn ids(&mut self) -> Result<Vec<StreamId>, DecodeError> {
        let count = self.count(2)?;
        (0..count).map(|_| self.id()).collect()
    }

    fn list<B: FromPayload<'a>>(&mut self) -> Result<Vec<B>, DecodeError> {
        let count = self.count(1)?;
        (0..count).map(|_| self.bytes()).collect()
    }

    fn op<B: FromPayload<'a>>(&mut self) -> Result<Op<B>, DecodeError> {
        use Op::*;
        Ok(match self.byte()? {
            DELETE => Delete { key: self.bytes()? },
            EXPIRE => Expire {
                key: self.bytes()?,
                at_ms: self.varint()?,
            },
            RENAME => Rename {
                from: self.bytes()?,
                to: self.bytes()?,
            },
            COPY => Copy {
                from: self.bytes()?,
                to: self.bytes()?,
            },
            REPLACE => {
                let key = self.bytes()?;
                let image: &[u8] = self.bytes()?;
                let object =
                    Object::decode(image).map_err(|e| DecodeError(format!("object: {e}")))?;
                Replace { key, object }
            }
            HASH_SET => {
                let key = self.bytes()?;
                let count = self.count(2)?;
                let pairs = (0..count)
                    .map(|_| Ok((self.bytes()?, self.bytes()?)))
                    .collect::<Result<_, DecodeError>>()?;
                HashSet { key, pairs }
            }
            HASH_DELETE => HashDelete {
                key: self.bytes()?,
                fields: self.list()?,
            },
            SET_ADD => SetAdd {
                key: self.bytes()?,
                members: self.list()?,
            },
            SET_REMOVE => SetRemove {
                key: self.bytes()?,
                members: self.list()?,
            },
            ZSET_ADD => {
                let key = self.bytes()?;
                let count = self.count(9)?;
                let pairs = (0..count)
                    .map(|_| Ok((self.f64()?, self.bytes()?)))
                    .collect::<Result<_, DecodeError>>()?;
                SortedSetAdd { key, pairs }
            }
            ZSET_REMOVE => SortedSetRemove {
                key: self.bytes()?,
                members: self.list()?,
            },
            LIST_PUSH => ListPush {
                key: self.bytes()?,
                front: self.bool()?,
                values: self.list()?,
            },
            LIST_POP => ListPop {
                key: self.bytes()?,
                front: self.bool()?,
                count: self.varint()?,
            },
            LIST_SET => ListSet {
                key: self.bytes()?,
                index: self.varint()?,
                value: self.bytes()?,
            },
            LIST_INSERT => ListInsert {
                key: self.bytes()?,
                before: self.bool()?,
                pivot: self.bytes()?,
                value: self.bytes()?,
            },
            LIST_REMOVE => ListRemove {
                key: self.bytes()?,
                count: unzigzag(self.varint()?),
                value: self.bytes()?,
            },
            LIST_TRIM => ListTrim {
                key: self.bytes()?,
                start: unzigzag(self.varint()?),
                stop: unzigzag(self.varint()?),
            },
            LIST_MOVE => ListMove {
                from: self.bytes()?,
                to: self.bytes()?,
                from_front: self.bool()?,
                to_front: self.bool()?,
            },
            STREAM_ADD => StreamAdd {
                key: self.bytes()?,
                id: self.id()?,
                fields: self.list()?,
            },
            STREAM_TRIM => StreamTrim {
                key: self.bytes()?,
                count: self.varint()?,
            },
            STREAM_DELETE => StreamDelete {
                key: self.bytes()?,
                ids: self.ids()?,
            },
            STREAM_SET_META => StreamSetMeta {
                key: self.bytes()?,
                last_id: self.id()?,
                entries_added: self.varint()?,
                max_deleted_id: self.id()?,
                first_id: self.id()?,
            },
            GROUP_CREATE => GroupCreate {
                key: self.bytes()?,
                group: self.bytes()?,
                last_id: self.id()?,
                entries_read: unzigzag(self.varint()?),
            },
            GROUP_SET_ID => GroupSetId {
                key: self.bytes()?,
                group: self.bytes()?,
                last_id: self.id()?,
                entries_read: unzigzag(self.varint()?),
            },
            GROUP_DESTROY => GroupDestroy {
                key: self.bytes()?,
                group: self.bytes()?,
            },
            CONSUMER_TOUCH => ConsumerTouch {
                key: self.bytes()?,
                group: self.bytes()?,
                consumer: self.bytes()?,
                seen_ms: self.varint()?,
            },
            CONSUMER_DELETE => ConsumerDelete {
                key: self.bytes()?,
                group: self.bytes()?,
                consumer: self.bytes()?,
            },
            PENDING_CLAIM => {
                let key = self.bytes()?;
                let group = self.bytes()?;
                let consumer = self.bytes()?;
                let count = self.count(4)?;
                let entries = (0..count)
                    .map(|_| Ok((self.id()?, self.varint()?, self.varint()?)))
                    .collect::<Result<_, DecodeError>>()?;
                PendingClaim {
                    key,
                    group,
                    consumer,
                    entries,
                }
            }
            PENDING_ACK => PendingAck {
                key: self.bytes()?,
                group: self.bytes()?,
                ids: self.ids()?,
            },
            tag => return Err(DecodeError(format!("unknown operation tag {tag}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        s.as_bytes().into()
    }

    #[test]
    fn every_operation_round_trips() {
        let ops = vec![
            Op::Delete { key: b("k") },
            Op::Replace {
                key: b("r"),
                object: Object::new(crate::types::Kind::Set),
            },
            Op::Expire {
                key: b("k"),
                at_ms: 1 << 40,
            },
            Op::Rename {
                from: b("a"),
                to: b("b"),
            },
            Op::Copy {
                from: b("a"),
                to: b("b"),
            },
            Op::HashSet {
                key: b("h"),
                pairs: vec![(b("f"), b("v")), (b(""), b(""))],
            },
            Op::HashDelete {
                key: b("h"),
                fields: vec![b("f")],
            },
            Op::SetAdd {
                key: b("s"),
                members: vec![b("m1"), b("m2")],
            },
            Op::SetRemove {
                key: b("s"),
                members: vec![b("m1")],
            },
            Op::SortedSetAdd {
                key: b("z"),
                pairs: vec![(1.5, b("a")), (f64::NEG_INFINITY, b("b"))],
            },
            Op::SortedSetRemove {
                key: b("z"),
                members: vec![b("a")],
            },
            Op::ListPush {
                key: b("l"),
                front: true,
                values: vec![b("x"), b("y")],
            },
            Op::ListPop {
                key: b("l"),
                front: false,
                count: 3,
            },
            Op::ListSet {
                key: b("l"),
                index: 2,
                value: b("v"),
            },
            Op::ListInsert {
                key: b("l"),
                before: false,
                pivot: b("p"),
                value: b("v"),
            },
            Op::ListRemove {
                key: b("l"),
                count: -2,
                value: b("v"),
            },
            Op::ListTrim {
                key: b("l"),
                start: 1,
                stop: -5,
            },
            Op::ListMove {
                from: b("l"),
                to: b("m"),
                from_front: false,
                to_front: true,
            },
            Op::StreamAdd {
                key: b("x"),
                id: StreamId::new(1 << 41, 7),
                fields: vec![b("f"), b("v")],
            },
            Op::StreamTrim {
                key: b("x"),
                count: 300,
            },
            Op::StreamDelete {
                key: b("x"),
                ids: vec![StreamId::new(1, 2), StreamId::MAX],
            },
            Op::StreamSetMeta {
                key: b("x"),
                last_id: StreamId::new(5, 5),
                entries_added: 9,
                max_deleted_id: StreamId::new(4, 0),
                first_id: StreamId::new(1, 1),
            },
            Op::GroupCreate {
                key: b("x"),
                group: b("g"),
                last_id: StreamId::MIN,
                entries_read: -1,
            },
            Op::GroupSetId {
                key: b("x"),
                group: b("g"),
                last_id: StreamId::new(3, 3),
                entries_read: 12,
            },
            Op::GroupDestroy {
                key: b("x"),
                group: b("g"),
            },
            Op::ConsumerTouch {
                key: b("x"),
                group: b("g"),
                consumer: b("c"),
                seen_ms: 1 << 40,
            },
            Op::ConsumerDelete {
                key: b("x"),
                group: b("g"),
                consumer: b("c"),
            },
            Op::PendingClaim {
                key: b("x"),
                group: b("g"),
                consumer: b("c"),
                entries: vec![(StreamId::new(1, 1), 1 << 40, 3)],
            },
            Op::PendingAck {
                key: b("x"),
                group: b("g"),
                ids: vec![StreamId::new(1, 1)],
            },
        ];
        let bytes = encode_batch(&ops);
        assert_eq!(decode_batch(&bytes).unwrap(), ops);
        let borrowed = decode_batch_borrowed(&bytes).unwrap();
        assert_eq!(borrowed.len(), ops.len());
        for (op, borrowed) in ops.iter().zip(&borrowed) {
            assert_eq!(op.keys(), borrowed.keys());
            // Owned again without a round trip through the encoding.
            assert_eq!(&borrowed.clone().into_owned(), op);
            assert_eq!(&op.clone().into_owned(), op);
            // One operation alone: its key, when it has exactly one.
            let alone = encode_batch(std::slice::from_ref(op));
            let expected = match op.keys() {
                [Some(key), None] => Some(key),
                _ => None,
            };
            assert_eq!(single_key(&alone), expected, "{op:?}");
        }
        assert_eq!(single_key(&bytes), None, "several operations");
        assert_eq!(single_key(&encode_batch(&[])), None);
        for cut in 0..bytes.len() {
            assert!(
                decode_batch(&bytes[..cut]).is_err(),
                "prefix of {cut} bytes decoded"
            );
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode_batch(&[1, 99])
            .unwrap_err()
            .0
            .contains("unknown operation"));
        assert!(decode_batch(&[0xff; 12]).is_err());
        assert!(decode_batch(&[1, ZSET_ADD, 1, b'k', 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
        let mut nan = vec![1, ZSET_ADD, 1, b'k', 1];
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        nan.extend_from_slice(&[1, b'm']);
        assert!(decode_batch(&nan).unwrap_err().0.contains("NaN"));
        assert_eq!(decode_batch(&[0, 0]).unwrap_err().0, "1 trailing bytes");
    }
}
