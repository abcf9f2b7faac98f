//! A write context: the key groups of the keys it may touch are locked for its
//! whole life (and, once it touches a collection, the collections' shards
//! of those keys too: key groups first, then shards, always). Direct
//! transactions send each write to its store at once; atomic ones buffer
//! engine writes (reads see them) and apply them at `commit` as one
//! crash-atomic batch.
//!
//! ## Collections
//!
//! A direct transaction logs each `log` call's operations as one record of
//! the collections' operation log, then applies them. An atomic one
//! applies them to DRAM at once (recording their inverses in an
//! [`Undo`], which costs what they change, to take them back if the commit
//! fails) and logs them all as one record at commit, so a MULTI's
//! collection writes are one record.
//!
//! ## Type changes and crashes
//!
//! A key lives in one store. When a write moves it across (SET over a hash,
//! RENAME of a list onto a string key), the two writes are ordered so that a
//! crash between them leaves the key in both stores exactly when keeping
//! the collection is right, which is what startup does:
//! - string over collection: the engine write first, then the collection's
//!   Delete (a crash between: the collection stays, the write never happened);
//! - collection over string: the collection's record first, then the engine
//!   delete (a crash between: the collection stays, the write happened).
//!
//! An atomic batch with engine writes beyond such deletes *and* collection
//! writes goes through an intent record (see `journal`) naming both parts,
//! the collection part as whole key states, so a crash replays all of it.

use std::sync::atomic::Ordering;

use engram_collections::types::{FieldWarm, StreamId};
use engram_collections::{apply, op::Bytes, Entry, Op, Undo, Writer};
use engram_engine::WordUpdate;
use smallvec::SmallVec;

use super::db_map::DbMap;
use super::journal::{self, Write};
use super::key_groups::{
    apply_delete, apply_meta, apply_put, db_of, delete_books, put_books, set_expiry, touch,
    GroupState, Held,
};
use super::value::{decode, Kind, Meta, StringValue, META_BYTES};
use super::{ekey, CKind, EKey, EKeys, Error, Keyspace, Object, Result};

/// A value read inside a transaction: its meta word and payload, copied.
#[derive(Clone, Debug)]
pub struct Stored {
    pub meta: Meta,
    value: Vec<u8>,
}

impl Stored {
    fn new(value: Vec<u8>) -> Result<Stored> {
        let meta = decode(&value).map_err(Error::Malformed)?.0;
        Ok(Stored { meta, value })
    }

    /// A collection key: its kind and expiry, no payload.
    fn collection(meta: Meta) -> Stored {
        Stored {
            meta,
            value: meta.0.to_le_bytes().to_vec(),
        }
    }

    pub fn payload(&self) -> &[u8] {
        &self.value[META_BYTES..]
    }

    /// The engine value (meta word and payload); a collection has none
    /// (its meta word is made up).
    pub fn raw(&self) -> &[u8] {
        &self.value
    }

    pub fn string(&self) -> StringValue<'_> {
        StringValue::from_payload(self.meta, self.payload())
    }
}

/// The keys a batch of collection operations touches, noted before they
/// are applied (`Txn::touched_by`) and settled after (`Txn::settle`).
struct Touched {
    keys: SmallVec<[EKey; 2]>,
    /// Each key's expiry time before (None: no such collection).
    before: SmallVec<[Option<u64>; 2]>,
    /// Keys an empty Replace deletes, whatever type they hold.
    emptied: SmallVec<[EKey; 1]>,
    /// One operation that only adds to its key (`Op::only_grows`): after
    /// it the key is there with the expiry it had (none if new).
    grows_only: bool,
}

/// What [`Txn::add_in_place`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlaceAdd {
    /// The key held an integer string; it now holds this sum.
    Added(i64),
    /// The key holds an integer string and the sum would overflow:
    /// nothing changed.
    Overflow,
    /// Not a live integer string here: take the general path.
    Elsewhere,
}

/// An atomic transaction's engine writes, by key (a later write to a key
/// replaces the earlier), in no order: the engine's batch needs none. A
/// hash map, not the ordered map it was: a replicated node's apply runs
/// hundreds of commands in one transaction, and the ordered map's inserts
/// and lookups were a tenth of a member's CPU under INCR.
type WriteBuffer = hashbrown::HashMap<EKey, Option<Vec<u8>>>;

/// How many keys ahead a batch's books warm a key's group.
const BOOKS_AHEAD: usize = 4;

pub struct Txn<'a> {
    ks: &'a Keyspace,
    /// Held key groups (or the whole keyspace).
    guards: Held<'a>,
    /// The keys whose key groups it holds (None: every key group).
    ekeys: Option<EKeys>,
    /// Buffered writes of an atomic transaction (None: a delete).
    batch: Option<WriteBuffer>,
    /// The collections' shards of `ekeys`, taken at the first collection
    /// access.
    coll: Option<Writer<'a>>,
    /// Atomic transactions: collection operations applied but not logged,
    pending: Vec<Op>,
    /// how to take them back (while `rollback`),
    undo: Undo,
    /// and each key they touched, with its expiry before the first of them
    /// (None: the key held no collection).
    touched: Vec<(Bytes, Option<u64>)>,
    /// Whether a failed or abandoned commit takes the collection changes
    /// back (`forgo_rollback`).
    rollback: bool,
    /// A replicated node's apply: the Raft entry being applied
    /// (`begin_entry`).
    entry: Option<u64>,
    /// INCRs of live integers go to the engine at once, their old values
    /// noted in the undo journal (`allow_direct_adds`),
    direct_adds: bool,
    /// unless paused (`pause_direct_adds`).
    direct_adds_paused: bool,
    /// An atomic transaction's SWAPDBs, in order: their record is in the
    /// batch, the map in memory swapped already (see `settle_swaps`).
    swaps: Vec<(usize, usize)>,
    wrote: bool,
    /// The collection key a command last checked ([`Txn::collection`],
    /// [`Txn::collection_len`]) and what it found there (Some(expiry): a
    /// live collection; None: no key), until the transaction's next write:
    /// the write that usually follows (LPUSH after the length, SADD after
    /// the members) takes its "before" from here instead of looking the
    /// key up again. Compared with a fresh lookup under debug assertions.
    checked: Option<(EKey, Option<u64>)>,
    scratch: Vec<u8>,
}

impl<'a> Txn<'a> {
    pub(super) fn new(
        ks: &'a Keyspace,
        guards: Held<'a>,
        ekeys: Option<EKeys>,
        atomic: bool,
    ) -> Txn<'a> {
        Txn {
            ks,
            guards,
            ekeys,
            batch: atomic.then(WriteBuffer::new),
            coll: None,
            pending: Vec::new(),
            undo: Undo::new(),
            touched: Vec::new(),
            rollback: true,
            entry: None,
            direct_adds: false,
            direct_adds_paused: false,
            swaps: Vec::new(),
            wrote: false,
            checked: None,
            scratch: Vec::new(),
        }
    }

    /// For a caller that never abandons the transaction and stops the
    /// process when its commit fails (a replicated node's apply thread:
    /// the restart applies the entries again from the Raft log): its
    /// collection operations are applied without recording how to take
    /// them back. That record looked up every field an HSET sets before
    /// the HSET did, a fifth of a member's time under HSET.
    pub fn forgo_rollback(&mut self) {
        self.rollback = false;
    }

    /// For a replicated node's apply, before each entry: its Raft index.
    /// An early commit inside the transaction (a FLUSHALL a script runs:
    /// `apply_buffered`) records the entry before it as applied with what
    /// it commits (without that, the chunk's earlier entries would be
    /// durable with no applied index, and a restart would apply them
    /// again), and a direct add (`allow_direct_adds`) is noted with it.
    pub fn begin_entry(&mut self, index: u64) {
        self.entry = Some(index);
    }

    /// A member's apply (an atomic transaction whose commit records the
    /// applied index) at `process`: [`Txn::add_in_place`] adds to a live
    /// integer in the engine at once, noting its old value and the
    /// entry's index (`begin_entry`) in the undo journal (`apply_undo`)
    /// first, instead of buffering a copy; the commit empties the journal.
    /// Not for a key the transaction already wrote (its value is in the
    /// buffer).
    pub fn allow_direct_adds(&mut self) {
        self.direct_adds = self.batch.is_some() && self.ks.apply_undo().is_some();
    }

    /// Holds direct adds back while `paused`: where another client must
    /// not see one write of a group before the rest (EXEC, scripts).
    pub fn pause_direct_adds(&mut self, paused: bool) {
        self.direct_adds_paused = paused;
    }

    /// The bytes of undo recorded so far (tests).
    #[cfg(test)]
    pub(crate) fn undo_held_bytes(&self) -> usize {
        self.undo.held_bytes()
    }

    /// Applies `op` to the held collections, recording its undo unless
    /// the transaction forwent rollback.
    fn apply_pending(&mut self, op: Op) -> usize {
        let writer = self.coll.as_mut().expect("held");
        if self.rollback {
            self.undo.apply(writer.keys_mut(), op)
        } else {
            apply::apply(writer.keys_mut(), op)
        }
    }

    /// How many writes an atomic transaction holds back for its commit
    /// (engine writes and collection operations): a writer applying a long
    /// run of commands commits every so often, so each batch stays one
    /// engine record run (see `Store::write_batch`).
    pub fn buffered_writes(&self) -> usize {
        self.batch.as_ref().map_or(0, WriteBuffer::len) + self.pending.len()
    }

    /// Makes room in an atomic transaction's buffer for `writes` more
    /// (a member's apply knows how many commands its chunk holds).
    pub fn reserve_writes(&mut self, writes: usize) {
        if let Some(batch) = self.batch.as_mut() {
            batch.reserve(writes);
        }
    }

    /// Whether the direct adds of this transaction fill half of the undo
    /// journal: a member's apply ends its chunk there (see
    /// `ApplyUndo::half_full`).
    pub fn undo_half_full(&self) -> bool {
        self.direct_adds && self.ks.apply_undo().is_some_and(|undo| undo.half_full())
    }

    /// Whether engine writes are buffered into one batch (EXEC, MSET...).
    pub fn is_atomic(&self) -> bool {
        self.batch.is_some()
    }

    /// DBSIZE of client database `db` as this transaction sees it: the
    /// books, which count its collection writes already (`rebook`), and
    /// its buffered engine writes, which the books count only at commit
    /// (`put_books`, `delete_books`: a put of a key the engine lacks adds
    /// one, a delete of a key it holds removes one, expired or not). A
    /// string that replaced a collection is one put: the collection's
    /// Delete was counted when it was applied. Nothing is applied early:
    /// a replicated node's apply must commit its buffered writes only with
    /// their applied index.
    pub fn dbsize(&self, db: usize) -> u64 {
        let ks = self.ks;
        let prefix = ks.db_map.physical(db);
        let mut total = ks.raw_dbsize(prefix);
        for (ekey, value) in self.batch.iter().flatten() {
            if crate::is_reserved(ekey) || db_of(ekey) != prefix {
                continue;
            }
            let stored = ks.store.access(ekey).is_some();
            match (value.is_some(), stored) {
                (true, false) => total += 1,
                (false, true) => total -= 1,
                _ => {}
            }
        }
        total.max(0) as u64
    }

    /// Whether a failed or abandoned commit takes the transaction's
    /// collection changes back (see `forgo_rollback`).
    pub(crate) fn rolls_back(&self) -> bool {
        self.rollback
    }

    pub(crate) fn holds_every_group(&self) -> bool {
        self.guards.is_exclusive()
    }

    pub(crate) fn keyspace(&self) -> &'a Keyspace {
        self.ks
    }

    pub(crate) fn mark_wrote(&mut self) {
        self.wrote = true;
    }

    /// Whether anything was written (the reply must wait for durability).
    pub fn wrote(&self) -> bool {
        self.wrote
    }

    fn group(&mut self, ekey: &[u8]) -> Result<(usize, &mut GroupState)> {
        self.guards.get(ekey)
    }

    /// The live value of `key`, or None (absent or expired; an expired key
    /// is deleted on the way).
    pub fn get(&mut self, db: usize, key: &[u8], now_ms: u64) -> Result<Option<Stored>> {
        let ekey = self.ks.physical_ekey(db, key)?;
        self.get_stored(&ekey, now_ms)
    }

    /// `get` of a key named as [`super::ekey`] names it (a client's
    /// database byte, then the key).
    pub fn get_ekey(&mut self, ekey: &[u8], now_ms: u64) -> Result<Option<Stored>> {
        let stored = self.ks.to_physical(ekey);
        self.get_stored(&stored, now_ms)
    }

    /// The live value of a stored key in either store (a collection as its
    /// kind and expiry only); an expired key is deleted on the way.
    fn get_stored(&mut self, ekey: &[u8], now_ms: u64) -> Result<Option<Stored>> {
        match self.engine_get(ekey, now_ms)? {
            Some(stored) => Ok(Some(stored)),
            None => self.collection_stored(ekey, now_ms),
        }
    }

    /// The live string at `ekey` (buffered writes first).
    fn engine_get(&mut self, ekey: &[u8], now_ms: u64) -> Result<Option<Stored>> {
        self.group(ekey)?;
        if let Some(batch) = &mut self.batch {
            if let Some(buffered) = batch.get(ekey) {
                let stored = buffered.clone().map(Stored::new).transpose()?;
                return Ok(stored.filter(|s| !s.meta.is_expired(now_ms)));
            }
        }
        self.ks.access.observe(now_ms);
        let access = &self.ks.access;
        let touched = self
            .ks
            .store
            .get_touching(ekey, |old| access.on_access(old));
        let Some(value) = touched.map_err(Error::Engine)? else {
            return Ok(None);
        };
        let stored = Stored::new(value)?;
        if stored.meta.is_expired(now_ms) {
            if self.ks.expiry_held() {
                return Ok(None);
            }
            let ks = self.ks;
            let (index, group) = self.guards.get(ekey)?;
            match &mut self.batch {
                // With the rest of an atomic transaction (a replicated
                // node's apply deletes what its entries meet, and must
                // not before its applied index says so). WATCH hears of
                // it now, as EXEC's check of the watched keys needs.
                Some(batch) => {
                    batch.insert(EKey::from_slice(ekey), None);
                    touch(group, ekey);
                }
                None => {
                    apply_delete(&ks.store, &ks.groups[index], group, ekey)?;
                }
            }
            self.ks.expired_one(ekey);
            self.wrote = true;
            return Ok(None);
        }
        Ok(Some(stored))
    }

    /// The live collection at `ekey` as a `Stored` (kind and expiry).
    fn collection_stored(&mut self, ekey: &[u8], now_ms: u64) -> Result<Option<Stored>> {
        Ok(self
            .collection_meta_with(ekey, now_ms, |_| ())?
            .map(|(meta, ())| Stored::collection(meta)))
    }

    /// The live collection at `ekey`'s meta word (kind and expiry), and
    /// what `look` reads from the entry in the same lookup.
    fn collection_meta_with<R>(
        &mut self,
        ekey: &[u8],
        now_ms: u64,
        look: impl FnOnce(&Entry) -> R,
    ) -> Result<Option<(Meta, R)>> {
        let access = &self.ks.access;
        let Some((kind, expire_at, seen)) = self.peek_collection(ekey, |e| {
            e.access.touch(|old| access.on_access(old));
            (e.object.kind(), e.expire_at_ms, look(e))
        }) else {
            return Ok(None);
        };
        if expire_at != 0 && expire_at <= now_ms {
            if self.ks.expiry_held() {
                return Ok(None);
            }
            self.log_stored(vec![Op::Delete { key: ekey.into() }])?;
            self.ks.expired_one(ekey);
            return Ok(None);
        }
        Ok(Some((Meta::collection(kind, expire_at), seen)))
    }

    /// Looks at the collection entry of `ekey` (through the held shards if
    /// they cover it, else under a read lock: no writer of ours holds it).
    fn peek_collection<R>(&self, ekey: &[u8], f: impl FnOnce(&Entry) -> R) -> Option<R> {
        match &self.coll {
            Some(writer) if writer.covers(ekey) => writer.keys().get(ekey).map(f),
            _ => self.ks.collections.read(ekey, |e| e.map(f)),
        }
    }

    /// The writer, covering `keys`' shards: a whole-keyspace transaction
    /// locks them now (it excludes every other writer, so in any order);
    /// another has locked its keys' shards already, and a key outside them
    /// is a command's bug.
    fn writer_covering(&mut self, keys: &[&[u8]]) -> Result<&mut Writer<'a>> {
        let writer = self.writer();
        if !writer.cover(keys) {
            return Err(Error::Internal(
                "a command touched a key it did not lock".into(),
            ));
        }
        Ok(writer)
    }

    fn writer(&mut self) -> &mut Writer<'a> {
        if self.coll.is_none() {
            let collections = &self.ks.collections;
            self.coll = Some(match &self.ekeys {
                Some(keys) => {
                    let keys: SmallVec<[&[u8]; 4]> = keys.iter().map(|k| k.as_slice()).collect();
                    collections.writer(&keys)
                }
                None => collections.writer_as_needed(),
            });
        }
        self.coll.as_mut().expect("just set")
    }

    /// How many elements (members, fields, entries) the collection of
    /// `kind` at `key` holds, as [`Txn::collection`] finds it (None when
    /// absent, WRONGTYPE for another type) but in one lookup of the key:
    /// LPUSH's reply is the length before the push plus what it pushed.
    pub fn collection_len(
        &mut self,
        db: usize,
        key: &[u8],
        kind: CKind,
        now_ms: u64,
    ) -> Result<Option<usize>> {
        self.checked_collection(db, key, kind, now_ms, |e| e.object.len())
    }

    /// The collection `key` holds, if it holds one of `kind`; None when it
    /// is absent (or expired, and deleted on the way). Another type is a
    /// `WrongType` error. Takes the keys' collection shards for writing.
    pub fn collection(
        &mut self,
        db: usize,
        key: &[u8],
        kind: CKind,
        now_ms: u64,
    ) -> Result<Option<&Object>> {
        if self
            .checked_collection(db, key, kind, now_ms, |_| ())?
            .is_none()
        {
            return Ok(None);
        }
        let (ekey, _) = self.checked.as_ref().expect("noted by the check");
        let writer = self.coll.as_ref().expect("taken above");
        Ok(writer.keys().get(ekey).map(|e| &e.object))
    }

    /// The checks of [`Txn::collection`] (the key's group and shard taken,
    /// an expired collection deleted, another type refused), and what
    /// `look` reads from the live entry in the same lookup; the key's
    /// stored name and what was found are noted in `checked`.
    fn checked_collection<R>(
        &mut self,
        db: usize,
        key: &[u8],
        kind: CKind,
        now_ms: u64,
        look: impl FnOnce(&Entry) -> R,
    ) -> Result<Option<R>> {
        let ekey = self.ks.physical_ekey(db, key)?;
        self.group(&ekey)?;
        self.writer_covering(&[&ekey])?;
        let found = match self.collection_meta_with(&ekey, now_ms, |e| (e.expire_at_ms, look(e)))? {
            Some((meta, _)) if meta.kind() != super::value::Kind::of_collection(kind) => {
                return Err(Error::WrongType)
            }
            Some((_, seen)) => Some(seen),
            // No collection: a live string there is the wrong type.
            None if self.engine_get(&ekey, now_ms)?.is_some() => return Err(Error::WrongType),
            None => None,
        };
        self.checked = Some((ekey, found.as_ref().map(|(at, _)| *at)));
        Ok(found.map(|(_, seen)| seen))
    }

    /// Logs and applies collection operations as one record (in an atomic
    /// transaction: applies them now and logs them with the rest at
    /// commit). Every key they name must be among the locked ones; keys
    /// are named as [`ckey`] names them (a client's database byte, then
    /// the key). Keeps key counts, the expiry index and WATCH up to date,
    /// and removes a string that a new collection replaces.
    pub fn log(&mut self, ops: Vec<Op>) -> Result<()> {
        self.log_counting(ops).map(drop)
    }

    /// `log`, returning how many hash fields the operations added (see
    /// `engram_collections::apply::apply`): HSET's reply without a lookup
    /// of each field before the write.
    pub fn log_counting(&mut self, mut ops: Vec<Op>) -> Result<usize> {
        for op in &mut ops {
            for key in op.keys_mut().into_iter().flatten() {
                self.ks.db_map.to_physical(key);
            }
        }
        self.log_stored(ops)
    }

    /// HSET's write, its fields and values borrowed from the request (see
    /// [`Txn::log_borrowed`]): a field that is there gets its new value in
    /// its old value's allocation when the lengths match, so an overwrite
    /// allocates and frees nothing. Returns how many fields were new.
    pub fn hash_set(&mut self, db: usize, key: &[u8], pairs: Vec<(&[u8], &[u8])>) -> Result<usize> {
        let ekey = self.ks.physical_ekey(db, key)?;
        self.log_borrowed(vec![Op::HashSet { key: &ekey, pairs }])
    }

    /// ZADD's write, its members borrowed from the request (see
    /// [`Txn::log_borrowed`]): a member that is there has its score moved
    /// without a copy of it being made and freed.
    pub fn sorted_set_add(
        &mut self,
        db: usize,
        key: &[u8],
        pairs: Vec<(f64, &[u8])>,
    ) -> Result<()> {
        let ekey = self.ks.physical_ekey(db, key)?;
        self.log_borrowed(vec![Op::SortedSetAdd { key: &ekey, pairs }])
            .map(drop)
    }

    /// LPUSH's and RPUSH's write, its values borrowed from the request
    /// (see [`Txn::log_borrowed`]): the list copies them into its nodes,
    /// so a push allocates nothing per element.
    pub fn list_push(
        &mut self,
        db: usize,
        key: &[u8],
        front: bool,
        values: Vec<&[u8]>,
    ) -> Result<()> {
        let ekey = self.ks.physical_ekey(db, key)?;
        self.log_borrowed(vec![Op::ListPush {
            key: &ekey,
            front,
            values,
        }])
        .map(drop)
    }

    /// XADD's write, its fields and values borrowed from the request (see
    /// [`Txn::log_borrowed`]): the stream packs them into its last node,
    /// and `trim` entries (a resolved MAXLEN or MINID, 0 for none) go from
    /// its front in the same write.
    pub fn stream_add(
        &mut self,
        db: usize,
        key: &[u8],
        id: StreamId,
        fields: Vec<&[u8]>,
        trim: u64,
    ) -> Result<()> {
        let ekey = self.ks.physical_ekey(db, key)?;
        let mut ops = vec![Op::StreamAdd {
            key: &ekey[..],
            id,
            fields,
        }];
        if trim > 0 {
            ops.push(Op::StreamTrim {
                key: &ekey[..],
                count: trim,
            });
        }
        self.log_borrowed(ops).map(drop)
    }

    /// Logs and applies `ops` (on a key's stored name, as `physical_ekey`
    /// gives it), their byte strings borrowed (from the request): in a direct
    /// transaction nothing is copied into an operation of its own; the log
    /// record is encoded from the borrowed bytes and the structure copies
    /// only what it keeps. On a hot key the two network workers take turns
    /// on its lock, and every allocation and free made under it is time the
    /// other one waits (HSET -P 16 to one hash: 3.9 -> 3.3 us of CPU a
    /// call). In an atomic transaction the operation is kept until the
    /// commit, so it is made owned (`Op::into_owned`).
    fn log_borrowed(&mut self, ops: Vec<Op<&[u8]>>) -> Result<usize> {
        if self.batch.is_none() {
            return self.log_direct(ops);
        }
        if self.rollback {
            let owned = ops.into_iter().map(Op::into_owned).collect();
            return self.log_atomic::<&[u8]>(None, owned);
        }
        // No undo to record: the borrowed operations are applied (the
        // structure copies only what it keeps), their owned copies kept.
        let owned = ops.iter().map(|op| op.clone().into_owned()).collect();
        self.log_atomic(Some(ops), owned)
    }

    /// `log_counting` of operations on stored keys.
    fn log_stored(&mut self, ops: Vec<Op>) -> Result<usize> {
        if self.batch.is_none() {
            return self.log_direct(ops);
        }
        self.log_atomic::<Bytes>(None, ops)
    }

    /// An atomic transaction's operations: applied to the held collections
    /// now (their undo recorded while `rollback`), and `owned` kept for
    /// the commit's record. `unrecorded`, when given (only without
    /// rollback), is the same operations to apply, their bytes borrowed.
    fn log_atomic<B: engram_collections::op::OpBytes>(
        &mut self,
        unrecorded: Option<Vec<Op<B>>>,
        owned: Vec<Op>,
    ) -> Result<usize> {
        debug_assert!(unrecorded.is_none() || !self.rollback);
        let Some(touched) = self.touched_by(&owned)? else {
            return Ok(0);
        };
        for (key, before) in touched.keys.iter().zip(&touched.before) {
            if !self.touched.iter().any(|(k, _)| k[..] == key[..]) {
                self.touched.push((Bytes::from(&key[..]), *before));
            }
        }
        let mut added = 0;
        match unrecorded {
            Some(ops) => {
                let writer = self.coll.as_mut().expect("held");
                for op in ops {
                    added += apply::apply(writer.keys_mut(), op);
                }
            }
            None => {
                for op in &owned {
                    added += self.apply_pending(op.clone());
                }
            }
        }
        self.pending.extend(owned);
        self.settle(touched)?;
        Ok(added)
    }

    /// `log_stored` in a direct transaction: logged, then applied, the
    /// operations' byte strings owned or borrowed.
    fn log_direct<B: engram_collections::op::OpBytes>(&mut self, ops: Vec<Op<B>>) -> Result<usize> {
        let Some(touched) = self.touched_by(&ops)? else {
            return Ok(0);
        };
        let writer = self.coll.as_mut().expect("held");
        writer.log(&ops).map_err(Error::Collections)?;
        let mut added = 0;
        for op in ops {
            added += apply::apply(writer.keys_mut(), op);
        }
        self.settle(touched)?;
        Ok(added)
    }

    /// What `ops` touch, before they are applied (None: no operations):
    /// their keys (each checked against the held groups), the keys' expiry
    /// times, and the keys an empty Replace deletes. Takes the keys'
    /// collection shards.
    fn touched_by<B: engram_collections::op::OpBytes>(
        &mut self,
        ops: &[Op<B>],
    ) -> Result<Option<Touched>> {
        if ops.is_empty() {
            return Ok(None);
        }
        // Copies held inline (no allocation for a key of up to 64 bytes):
        // `ops` is consumed by the apply that follows.
        let mut keys: SmallVec<[EKey; 2]> = SmallVec::new();
        for op in ops {
            for key in op.keys().into_iter().flatten() {
                self.guards.get(key)?;
                if !keys.iter().any(|k| &k[..] == key) {
                    keys.push(EKey::from_slice(key));
                }
            }
        }
        // An empty Replace (a *STORE with an empty result) deletes the key
        // of any type: a string there goes too, after the record.
        let emptied = ops
            .iter()
            .filter_map(|op| match op {
                Op::Replace { key, object } if object.is_empty() => Some(EKey::from_slice(key)),
                _ => None,
            })
            .collect();
        let checked = self.checked.take();
        let held: SmallVec<[&[u8]; 2]> = keys.iter().map(|k| &k[..]).collect();
        let writer = self.writer_covering(&held)?;
        let before = match checked {
            // The key the command checked just before, nothing written
            // since: as found then.
            Some((key, before)) if held.len() == 1 && key[..] == *held[0] => {
                debug_assert_eq!(
                    before,
                    writer.keys().get(&key).map(|e| e.expire_at_ms),
                    "the checked key changed before its write"
                );
                smallvec::smallvec![before]
            }
            _ => held
                .iter()
                .map(|k| writer.keys().get(k).map(|e| e.expire_at_ms))
                .collect(),
        };
        drop(held);
        Ok(Some(Touched {
            keys,
            before,
            emptied,
            grows_only: ops.len() == 1 && ops[0].only_grows(),
        }))
    }

    /// After `touched`'s operations are applied: counts, expiry index and
    /// WATCH brought up to date, and a string under an emptied key deleted.
    fn settle(&mut self, touched: Touched) -> Result<()> {
        self.wrote = true;
        for (key, before) in touched.keys.iter().zip(touched.before) {
            let after = if touched.grows_only {
                // Known without a second lookup of the key.
                let after = before.or(Some(0));
                debug_assert_eq!(after, self.peek_collection(key, |e| e.expire_at_ms));
                after
            } else {
                self.peek_collection(key, |e| e.expire_at_ms)
            };
            self.rebook(key, before, after)?;
        }
        for key in touched.emptied {
            if self.peek_collection(&key, |_| ()).is_none() && self.engine_has(&key)? {
                self.engine_write(&key, None)?;
            }
        }
        Ok(())
    }

    /// Brings counts, the expiry index and WATCH up to date after a
    /// collection key went from `before` to `after` (Some(expiry): present).
    fn rebook(&mut self, ekey: &[u8], before: Option<u64>, after: Option<u64>) -> Result<()> {
        let db = db_of(ekey);
        match (before, after) {
            (None, Some(_)) => {
                self.ks.groups[Keyspace::slot_index(ekey)].counts[db]
                    .fetch_add(1, Ordering::Relaxed);
                // A new collection replaces a string: its record is logged
                // (or pending) already, so the engine delete comes after.
                if self.engine_has(ekey)? {
                    self.engine_write(ekey, None)?;
                }
            }
            (Some(_), None) => {
                self.ks.groups[Keyspace::slot_index(ekey)].counts[db]
                    .fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        if before.is_none() && after.is_some() {
            // A new collection (or one a Replace rebuilt): a new key's
            // access field, as Redis's `createObject` gives.
            let fresh = self.ks.access.fresh();
            self.peek_collection(ekey, |e| e.access.touch(|_| fresh));
        }
        let ks = self.ks;
        let (index, group) = self.guards.get(ekey)?;
        let slot = &ks.groups[index];
        set_expiry(slot, group, ekey, after.filter(|&at| at != 0));
        touch(group, ekey);
        // A key that goes wakes its waiters too: XREADGROUP ends its wait
        // with an error when its stream is deleted (a list pop tries again
        // and waits on).
        if after.is_some() || before.is_some() {
            ks.signal_stored(ekey);
        }
        Ok(())
    }

    /// Starts loading what HSETs of `fields` on the hash at `key` in `db`
    /// will miss on (`Hash::prefetch_field`), the key looked up once.
    /// Nothing when the transaction does not hold the key's collections
    /// shard yet or the key holds no hash. For a replicated node's apply,
    /// which knows the commands it runs next.
    pub fn prefetch_hash_fields(&self, db: usize, key: &[u8], fields: &[(&[u8], FieldWarm)]) {
        let Some(writer) = &self.coll else {
            return;
        };
        let Ok(ekey) = self.ks.physical_ekey(db, key) else {
            return;
        };
        if let Some(Entry {
            object: engram_collections::types::Object::Hash(hash),
            ..
        }) = writer.peek(&ekey)
        {
            for &(field, what) in fields {
                hash.prefetch_field(field, what);
            }
        }
    }

    /// Whether the engine holds any value at `ekey` (expired or not),
    /// counting buffered writes.
    fn engine_has(&self, ekey: &[u8]) -> Result<bool> {
        if let Some(batch) = &self.batch {
            if let Some(buffered) = batch.get(ekey) {
                return Ok(buffered.is_some());
            }
        }
        Ok(self
            .ks
            .store
            .get_ref(ekey)
            .map_err(Error::Engine)?
            .is_some())
    }

    /// Startup: makes a collection key hold the state an interrupted
    /// batch's intent names for it.
    pub(super) fn restore_collection(
        &mut self,
        ekey: &[u8],
        state: Option<(u64, Vec<u8>)>,
    ) -> Result<()> {
        let ops = match state {
            None => vec![Op::Delete { key: ekey.into() }],
            Some((expire_at, image)) => {
                let object = Object::decode(&image).map_err(|e| {
                    Error::Internal(format!(
                        "a batch intent holds a damaged collection image: {e}"
                    ))
                })?;
                vec![
                    Op::Replace {
                        key: ekey.into(),
                        object,
                    },
                    Op::Expire {
                        key: ekey.into(),
                        at_ms: expire_at,
                    },
                ]
            }
        };
        self.log_stored(ops).map(drop)
    }

    /// Writes a whole engine value (meta word and payload).
    pub fn put(&mut self, db: usize, key: &[u8], value: &[u8]) -> Result<()> {
        let ekey = self.ks.physical_ekey(db, key)?;
        self.apply_raw(&ekey, Some(value))
    }

    /// Writes a string value.
    pub fn put_string(
        &mut self,
        db: usize,
        key: &[u8],
        text: &[u8],
        expire_at: Option<u64>,
    ) -> Result<()> {
        let mut value = std::mem::take(&mut self.scratch);
        super::value::encode_string(&mut value, text, expire_at);
        let result = self.put(db, key, &value);
        self.scratch = value;
        result
    }

    /// Deletes `key`; true if it was live. A key whose value is damaged
    /// (unreadable) counts as live and is deleted: that is how a client
    /// gets rid of it.
    pub fn delete(&mut self, db: usize, key: &[u8], now_ms: u64) -> Result<bool> {
        let ekey = self.ks.physical_ekey(db, key)?;
        match self.get_stored(&ekey, now_ms) {
            Ok(Some(stored)) if stored.meta.is_collection() => {
                self.log_stored(vec![Op::Delete {
                    key: ekey.as_slice().into(),
                }])?;
                return Ok(true);
            }
            Ok(Some(_)) => {}
            Ok(None) => return Ok(false),
            Err(e) if e.is_damage() => {
                log::warn!("deleting damaged key {}: {e}", String::from_utf8_lossy(key));
            }
            Err(e) => return Err(e),
        }
        self.engine_write(&ekey, None)?;
        Ok(true)
    }

    /// Replaces the meta word of a live key (EXPIRE, PERSIST): in place in
    /// a direct transaction.
    pub fn set_meta(&mut self, db: usize, key: &[u8], old: &Stored, new: Meta) -> Result<()> {
        let ekey = self.ks.physical_ekey(db, key)?;
        if old.meta.is_collection() {
            return self
                .log_stored(vec![Op::Expire {
                    key: ekey.as_slice().into(),
                    at_ms: new.expire_at().unwrap_or(0),
                }])
                .map(drop);
        }
        if self.batch.is_some() {
            let mut value = old.raw().to_vec();
            value[..META_BYTES].copy_from_slice(&new.0.to_le_bytes());
            return self.apply_raw(&ekey, Some(&value));
        }
        let ks = self.ks;
        let (index, group) = self.guards.get(&ekey)?;
        apply_meta(&ks.store, &ks.groups[index], group, &ekey, old.meta, new)?;
        self.wrote = true;
        Ok(())
    }

    /// INCRBY's common case in one engine lookup: a live integer string
    /// at the key gets `delta` added where it lies (the access field
    /// touched, as a read for a write touches it). Anything else — no key,
    /// an expired one, a raw string, a collection, an atomic transaction —
    /// is [`InPlaceAdd::Elsewhere`], for the caller's general path (a read,
    /// then a write). Reading the value and then swapping its word looked
    /// the key up twice and copied the value out in between.
    pub fn add_in_place(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
        delta: i64,
    ) -> Result<InPlaceAdd> {
        let ekey = self.ks.physical_ekey(db, key)?;
        // In an atomic transaction only as `allow_direct_adds` allows,
        // with the old value noted in the journal first.
        let direct = self
            .entry
            .filter(|_| self.direct_adds && !self.direct_adds_paused);
        let journal = match (&self.batch, direct) {
            (None, _) => None,
            (Some(batch), Some(index)) if !batch.contains_key(&ekey[..]) => {
                match self.ks.apply_undo() {
                    Some(undo) => Some((undo, index)),
                    None => return Ok(InPlaceAdd::Elsewhere),
                }
            }
            (Some(_), _) => return Ok(InPlaceAdd::Elsewhere),
        };
        self.group(&ekey)?;
        self.ks.access.observe(now_ms);
        let access = &self.ks.access;
        let mut outcome = InPlaceAdd::Elsewhere;
        let updated = self.ks.store.update_word_with(
            &ekey,
            META_BYTES as u64,
            |old| access.on_access(old),
            |value| {
                outcome = InPlaceAdd::Elsewhere;
                let Ok((meta, payload)) = decode(value) else {
                    return WordUpdate::Decline;
                };
                let StringValue::Int(current) = StringValue::from_payload(meta, payload) else {
                    return WordUpdate::Decline;
                };
                if meta.kind() != Kind::String || meta.is_expired(now_ms) {
                    return WordUpdate::Decline;
                }
                match current.checked_add(delta) {
                    Some(sum) => {
                        // (Noted again if the engine asks again: putting
                        // back the same old value twice is harmless.)
                        if let Some((undo, index)) = journal {
                            if !undo.note(index, &ekey, current as u64) {
                                return WordUpdate::Decline;
                            }
                        }
                        outcome = InPlaceAdd::Added(sum);
                        WordUpdate::Set(sum as u64)
                    }
                    None => {
                        outcome = InPlaceAdd::Overflow;
                        WordUpdate::Keep
                    }
                }
            },
        );
        match updated {
            Ok(Some(_)) => {}
            // Declined, or absent: the general path decides.
            Ok(None) | Err(engram_engine::Error::FieldOutOfRange { .. }) => {
                return Ok(InPlaceAdd::Elsewhere)
            }
            Err(e) => return Err(Error::Engine(e)),
        }
        if let InPlaceAdd::Added(_) = outcome {
            let (_, group) = self.group(&ekey)?;
            touch(group, &ekey);
            self.wrote = true;
        }
        Ok(outcome)
    }

    /// Changes a few bytes of a raw string in place, when that is one
    /// atomic 8-byte store: a direct transaction, a live raw string
    /// whose payload covers `offset..offset + len`, and those bytes inside
    /// one aligned word of the value. `f` sees the current bytes (read
    /// where they lie: the value is not copied) and returns its result
    /// and, if they change, the new bytes (`len` of them). Ok(None): not
    /// possible here (absent, expired, another type or encoding, past the
    /// end, across two words, an atomic transaction): the caller takes the
    /// general path (a whole new value). A damaged record is the engine's
    /// error, as a read of it would be.
    ///
    /// Costs O(1) persistent bytes whatever the value's size (SETBIT on a
    /// 100 MB bitmap); the record's value checksum stops applying from the
    /// first such store (the engine's IN_PLACE flag), the integrity
    /// layer's page checksums still do.
    pub fn patch_in_place<R>(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> (R, Option<Vec<u8>>),
    ) -> Result<Option<R>> {
        if self.batch.is_some() || len == 0 || len > 8 {
            return Ok(None);
        }
        let ekey = self.ks.physical_ekey(db, key)?;
        self.group(&ekey)?;
        let start = META_BYTES + offset;
        let word_at = start / 8 * 8;
        if (start + len - 1) / 8 * 8 != word_at {
            return Ok(None);
        }
        // One engine lookup: the value is shown where it lies, and the
        // word changes in the same look (`Store::update_word_with`).
        let mut f = Some(f);
        let (mut result, mut stored, mut raced) = (None, false, false);
        let found = self.ks.store.update_word_with(
            &ekey,
            word_at as u64,
            |access| access,
            |value| {
                let Ok((meta, _)) = decode(value) else {
                    return WordUpdate::Decline;
                };
                let raw =
                    meta.kind() == Kind::String && meta.encoding() != super::value::Encoding::Int;
                if !raw || meta.is_expired(now_ms) {
                    return WordUpdate::Decline;
                }
                let Some(f) = f.take() else {
                    // Asked again: the word moved under the key's lock.
                    raced = true;
                    return WordUpdate::Keep;
                };
                let (value_result, new) = f(&value[start..start + len]);
                result = Some(value_result);
                let Some(new) = new else {
                    return WordUpdate::Keep;
                };
                assert_eq!(
                    new.len(),
                    len,
                    "patch_in_place: f returned {} bytes",
                    new.len()
                );
                let mut word: [u8; 8] = value[word_at..word_at + 8].try_into().expect("8 bytes");
                word[start - word_at..start - word_at + len].copy_from_slice(&new);
                stored = true;
                WordUpdate::Set(u64::from_le_bytes(word))
            },
        );
        match found {
            Ok(Some(_)) => {}
            // Declined (not a live raw string), absent, or past the end.
            Ok(None) | Err(engram_engine::Error::FieldOutOfRange { .. }) => return Ok(None),
            Err(e) => return Err(Error::Engine(e)),
        }
        if raced {
            // Every writer of the key holds its key group lock, so this
            // means a write bypassed the lock: a bug, reported.
            return Err(Error::Internal(
                "in-place patch raced with another write of the key".into(),
            ));
        }
        let result = result.expect("decided once");
        if !stored {
            return Ok(Some(result));
        }
        let (_, group) = self.group(&ekey)?;
        touch(group, &ekey);
        self.wrote = true;
        Ok(Some(result))
    }

    /// A string write (a whole engine value) or an engine delete. A
    /// string replaces a collection at the key: the engine write comes
    /// first, the collection's Delete second (see the module docs).
    pub(super) fn apply_raw(&mut self, ekey: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.engine_write(ekey, value)?;
        if crate::is_reserved(ekey) {
            // A keyspace record, no string: the applied index keeps a copy
            // in each store by design (`applied_record`), and an intent's
            // engine copy must not delete the other as a string replacing
            // a collection would (that Delete's books named database 255).
            return Ok(());
        }
        let Some(value) = value else { return Ok(()) };
        if self.peek_collection(ekey, |_| ()).is_some() {
            self.log_stored(vec![Op::Delete { key: ekey.into() }])?;
            if self.batch.is_none() {
                // The Delete cleared the key's expiry; the string's stands.
                let expire_at = decode(value).map_err(Error::Malformed)?.0.expire_at();
                let ks = self.ks;
                let (index, group) = self.guards.get(ekey)?;
                set_expiry(&ks.groups[index], group, ekey, expire_at);
            }
        }
        Ok(())
    }

    /// Writes a keyspace record (a reserved key, no database) with this
    /// transaction's other writes: in its atomic batch when it has one.
    pub(crate) fn put_reserved(&mut self, ekey: &[u8], value: &[u8]) -> Result<()> {
        debug_assert!(crate::is_reserved(ekey));
        self.engine_write(ekey, Some(value))
    }

    /// An atomic transaction's buffered string writes to client database
    /// `db`, not yet applied, so not in what `Keyspace::scan` finds: each
    /// key with its meta word, None for a delete or a value already
    /// expired at `now_ms`. KEYS, SCAN and RANDOMKEY inside MULTI or a
    /// script lay these over what the stores hold (a transaction sees its
    /// own writes). Empty outside an atomic transaction.
    pub fn buffered_strings(&self, db: usize, now_ms: u64) -> Vec<(Vec<u8>, Option<Meta>)> {
        let Some(batch) = &self.batch else {
            return Vec::new();
        };
        batch
            .iter()
            .filter_map(|(ekey, value)| {
                let (key_db, key) = self.ks.client_key(ekey)?;
                if key_db != db || crate::is_reserved(ekey) {
                    return None;
                }
                let meta = match value {
                    Some(value) => decode(value).ok().map(|(meta, _)| meta),
                    // A string deleted for a collection written after it.
                    None => self.peek_collection(ekey, |e| {
                        Meta::collection(e.object.kind(), e.expire_at_ms)
                    }),
                };
                Some((key.to_vec(), meta.filter(|m| !m.is_expired(now_ms))))
            })
            .collect()
    }

    /// Whether an atomic transaction holds collection operations and no
    /// engine write (its commit is one operation-log record).
    pub(crate) fn buffered_collections_only(&self) -> bool {
        self.batch.as_ref().is_some_and(WriteBuffer::is_empty) && !self.pending.is_empty()
    }

    /// Adds an operation on a keyspace record held as a collection (a
    /// reserved key, no database) to an atomic transaction's pending
    /// operations: logged in the same record as the rest, taken back with
    /// them if the commit fails, and kept out of the books (no database
    /// counts it, no WATCH sees it).
    pub(crate) fn log_reserved(&mut self, op: Op) -> Result<()> {
        let keys: Vec<EKey> = op
            .keys()
            .into_iter()
            .flatten()
            .map(EKey::from_slice)
            .collect();
        debug_assert!(keys.iter().all(|k| crate::is_reserved(k)));
        if self.batch.is_none() {
            return Err(Error::Internal(
                "a reserved collection record outside an atomic transaction".into(),
            ));
        }
        for key in &keys {
            self.guards.get(key)?;
        }
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        self.writer_covering(&refs)?;
        self.apply_pending(op.clone());
        self.pending.push(op);
        self.wrote = true;
        Ok(())
    }

    /// A write to the engine alone: buffered or applied.
    fn engine_write(&mut self, ekey: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.checked = None;
        let ks = self.ks;
        let (index, group) = self.guards.get(ekey)?;
        if let Some(batch) = &mut self.batch {
            batch.insert(EKey::from_slice(ekey), value.map(<[u8]>::to_vec));
            return Ok(());
        }
        let slot = &ks.groups[index];
        match value {
            Some(value) => apply_put(&ks.store, &ks.access, slot, group, ekey, value)?,
            None => {
                apply_delete(&ks.store, slot, group, ekey)?;
            }
        }
        self.wrote = true;
        Ok(())
    }

    /// Applies the buffered writes now, as one atomic batch, and keeps
    /// buffering after (for FLUSHDB inside MULTI, which applies directly),
    /// with the entry before `begin_entry`'s as the applied index, if any.
    fn apply_buffered(&mut self) -> Result<()> {
        if self.batch.is_none() {
            return Ok(());
        }
        if let Some(index) = self.entry {
            self.put_applied_index(index.saturating_sub(1))?;
        }
        let result = self.commit_buffered();
        self.batch = Some(WriteBuffer::new());
        result
    }

    /// Commits an atomic transaction's buffered engine writes and pending
    /// collection operations (see the module docs for the order).
    fn commit_buffered(&mut self) -> Result<()> {
        let batch = self.batch.take().unwrap_or_default();
        if self.pending.is_empty() {
            self.undo = Undo::new();
            self.touched.clear();
            return self.apply_batch(batch, None);
        }
        let pending = std::mem::take(&mut self.pending);
        let undo = std::mem::take(&mut self.undo);
        let touched = std::mem::take(&mut self.touched);
        let writer = self
            .coll
            .as_ref()
            .expect("pending operations hold the shards");
        // Engine writes that the collections' record does not settle by
        // itself: anything but deleting a string a collection replaced.
        // Such a collection's shard is held; a whole-keyspace writer holds
        // only the shards it met, and `keys().get` stops on any other
        // (DEL of a string beside a collection write, in a script or a
        // replicated node's apply: the batch's order decided).
        let independent = batch
            .iter()
            .any(|(k, v)| v.is_some() || writer.peek(k).is_none());
        let intent = if independent {
            let mut ops: Vec<journal::Op> = batch
                .iter()
                .map(|(k, v)| (k.to_vec(), Write::Engine(v.clone())))
                .collect();
            for (key, _) in &touched {
                let state = writer.keys().get(key).map(|e| {
                    let mut image = Vec::new();
                    e.object.encode(&mut image);
                    (e.expire_at_ms, image)
                });
                ops.push((key.to_vec(), Write::Collection(state)));
            }
            match self.ks.write_intent(&ops) {
                Ok(key) => Some(key),
                Err(e) => {
                    self.undo_collections(undo, touched);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let writer = self.coll.as_ref().expect("held");
        if let Err(e) = writer.log(&pending) {
            self.undo_collections(undo, touched);
            if let Some(intent) = intent {
                self.ks.delete_intent(&intent)?;
            }
            return Err(Error::Collections(e));
        }
        // The intent's deletion (in the engine's file) must not become
        // durable before the collections' log record (in the operation
        // log): the two files are synced one after the other, and the
        // kernel writes pages back when it likes, so a power failure
        // between them would keep the strings and lose the collections
        // with nothing left to replay (found by the FUSE power-cut test,
        // `e2e/tests/power_cut.rs`). Under `always` the record is synced
        // first: a third sync round, for batches that mix the two only.
        if intent.is_some() && self.ks.commit().must_wait() {
            self.ks.commit().barrier();
        }
        self.wrote = true;
        let deleted: Vec<EKey> = batch
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        let result = self.apply_batch(batch, intent);
        // An engine delete clears the expiry index entry of a key that now
        // holds a collection: put the collection's back.
        for ekey in deleted {
            if let Some(at) = self.peek_collection(&ekey, |e| e.expire_at_ms) {
                let ks = self.ks;
                let (index, group) = self.guards.get(&ekey)?;
                set_expiry(&ks.groups[index], group, &ekey, (at != 0).then_some(at));
            }
        }
        result
    }

    /// Puts back the collection keys an uncommitted atomic transaction
    /// changed, and their books.
    fn undo_collections(&mut self, undo: Undo, touched: Vec<(Bytes, Option<u64>)>) {
        if !self.rollback {
            // Nothing was recorded (`forgo_rollback`): the caller stops
            // the process rather than go on from here.
            log::error!("a transaction that forwent rollback failed or was abandoned");
            return;
        }
        let Some(writer) = self.coll.as_mut() else {
            return;
        };
        let now: Vec<bool> = touched
            .iter()
            .map(|(key, _)| writer.keys().get(key).is_some())
            .collect();
        undo.undo(writer.keys_mut());
        for ((key, before), now) in touched.into_iter().zip(now) {
            let db = db_of(&key);
            let slot = &self.ks.groups[Keyspace::slot_index(&key)];
            match (now, before.is_some()) {
                (true, false) => slot.counts[db].fetch_sub(1, Ordering::Relaxed),
                (false, true) => slot.counts[db].fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
            // The key's expiry as it stands again: the collection's, or the
            // untouched string's.
            let expiry = match before {
                Some(at) => (at != 0).then_some(at),
                None => self
                    .ks
                    .raw_meta(&key)
                    .ok()
                    .flatten()
                    .and_then(|m| m.expire_at()),
            };
            if let Ok((_, group)) = self.guards.get(&key) {
                set_expiry(slot, group, &key, expiry);
            }
        }
    }

    fn apply_batch(&mut self, batch: WriteBuffer, intent: Option<Vec<u8>>) -> Result<()> {
        let ops: Vec<(EKey, Option<Vec<u8>>)> = batch.into_iter().collect();
        let intent = match (intent, ops.len()) {
            (Some(intent), _) => Some(intent),
            (None, 0) => return Ok(()),
            // One key: the engine makes it atomic by itself.
            (None, 1) => None,
            // Several: one record run of the engine's when it can (lazy
            // retirement, a batch that fits a log block), so no intent
            // and no extra sync round.
            (None, _) if self.engine_batch(&ops)? => return Ok(()),
            (None, _) => {
                let journal_ops: Vec<journal::Op> = ops
                    .iter()
                    .map(|(k, v)| (k.to_vec(), Write::Engine(v.clone())))
                    .collect();
                Some(self.ks.write_intent(&journal_ops)?)
            }
        };
        let mut failure = None;
        for (ekey, value) in &ops {
            if let Err(e) = self.engine_write(ekey, value.as_deref()) {
                failure = Some(e);
                break;
            }
        }
        if let Some(intent) = intent {
            // Even after a failure (a full disk) the intent goes: replaying
            // it at the next start would overwrite writes made after this
            // one. The client hears that the batch is partial.
            self.ks.delete_intent(&intent)?;
        }
        match failure {
            None => Ok(()),
            Some(e) => Err(Error::Internal(format!(
                "{e}; the multi-key write was applied only in part"
            ))),
        }
    }

    /// Writes `ops` as one atomic engine batch and brings the books up to
    /// date (each key's group warmed `BOOKS_AHEAD` keys before); false
    /// (nothing written) when the engine cannot.
    fn engine_batch(&mut self, ops: &[(EKey, Option<Vec<u8>>)]) -> Result<bool> {
        let ks = self.ks;
        let writes: Vec<(&[u8], Option<&[u8]>)> = ops
            .iter()
            .map(|(key, value)| (&key[..], value.as_deref()))
            .collect();
        let Some(outcomes) = ks
            .store
            .write_batch(&writes, |old| ks.access.on_write(old))
            .map_err(Error::Engine)?
        else {
            return Ok(false);
        };
        for (at, ((ekey, value), outcome)) in ops.iter().zip(outcomes).enumerate() {
            // A long batch's groups were locked long before (a member's
            // apply chunk: up to 512 commands back).
            if let Some((ahead, _)) = ops.get(at + BOOKS_AHEAD) {
                ks.groups[super::key_groups::slot_index(ahead)].prefetch();
            }
            let (index, group) = self.guards.get(ekey)?;
            let slot = &ks.groups[index];
            match value {
                Some(value) => put_books(slot, group, ekey, value, outcome)?,
                None => delete_books(slot, group, ekey, outcome),
            }
        }
        self.wrote = true;
        Ok(true)
    }

    /// Applies the buffered writes (atomic transactions) and releases the
    /// locks; returns whether anything was written.
    pub fn commit(mut self) -> Result<bool> {
        if self.batch.is_some() {
            self.commit_buffered()?;
        }
        if self.direct_adds {
            // The chunk's batch (with its applied index) is written: what
            // the journal would put back is part of it now.
            if let Some(undo) = self.ks.apply_undo() {
                undo.clear();
            }
        }
        Ok(self.wrote)
    }

    /// Commits, releases the keys, then waits until what was written is
    /// durable in the keyspace's durability mode (for embedders: the
    /// server awaits the group commit per pipelined batch instead). Under
    /// `always` the wait shares one `msync` with every writer waiting.
    pub fn commit_durable(self) -> Result<bool> {
        let ks = self.ks;
        let wrote = self.commit()?;
        if wrote {
            if let Some(ticket) = ks.commit().wrote() {
                ks.commit().block_until(ticket);
            }
        }
        Ok(wrote)
    }

    /// Deletes every key of `db` (or of every database): FLUSHDB/FLUSHALL.
    /// Needs the keyspace excluded (`Keyspace::lock_all`).
    pub fn flush(&mut self, db: Option<usize>) -> Result<u64> {
        self.checked = None;
        self.guards.every()?;
        self.apply_buffered()?;
        let ks = self.ks;
        let db = db.map(|db| ks.db_map.physical(db));
        let wanted = |first: u8| match db {
            Some(db) => first as usize == db,
            None => ks.is_visible(&[first]),
        };
        let mut deleted = 0;
        let mut cursor = 0;
        loop {
            let (next, keys) = self.ks.store.scan(cursor, 4096);
            for ekey in keys {
                let Some(&first) = ekey.first() else { continue };
                if wanted(first) && !super::is_reserved(&ekey) {
                    let ks = self.ks;
                    let (index, group) = self.guards.get(&ekey)?;
                    if apply_delete(&ks.store, &ks.groups[index], group, &ekey)? {
                        deleted += 1;
                        self.wrote = true;
                    }
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let writer = self.writer();
        if !writer.cover_all() {
            return Err(Error::Internal(
                "flush without every collection shard".into(),
            ));
        }
        let keys: Vec<Bytes> = writer
            .keys_in_shards()
            .into_iter()
            .filter(|k| k.first().is_some_and(|&first| wanted(first)))
            .collect();
        // Applied directly, like the engine deletes above, even in MULTI.
        let batch = self.batch.take();
        let mut result = Ok(());
        for chunk in keys.chunks(1024) {
            let ops = chunk
                .iter()
                .map(|k| Op::Delete { key: k.clone() })
                .collect();
            result = self.log_stored(ops).map(drop);
            if result.is_err() {
                break;
            }
            deleted += chunk.len() as u64;
        }
        self.batch = batch;
        result.map(|()| deleted)
    }
}

impl Txn<'_> {
    /// SWAPDB: exchanges logical databases `a` and `b` (one write of the
    /// database map, whatever they hold). Needs the keyspace excluded
    /// (`Keyspace::lock_all`). As in Redis, a client watching a key of
    /// either database has its transaction fail if the key exists in
    /// either (its value changes or appears); keys that only expired do
    /// not count. Watches and blocked clients stay with their database
    /// numbers; blocked clients are woken to look again.
    ///
    /// In an atomic transaction the map's record goes into the batch, to
    /// commit with the rest (a replicated node's apply: with its applied
    /// index), while the map in memory changes at once, for the
    /// transaction's later commands. Should the record not be written
    /// after all (the transaction dropped, its commit failed), the drop
    /// puts the map in memory back as the record has it (`Drop`).
    pub fn swap_databases(&mut self, a: usize, b: usize, now_ms: u64) -> Result<()> {
        self.checked = None;
        self.guards.every()?;
        if a == b {
            return Ok(());
        }
        let ks = self.ks;
        let map = &ks.db_map;
        let (pa, pb) = (map.physical(a) as u8, map.physical(b) as u8);
        let mut record = map.encode();
        record.swap(a, b);
        self.put_reserved(&super::db_map::KEY, &record)?;
        self.wrote = true;

        // The watches of both databases, out of their groups while keys
        // that merely expired are deleted (that changes nothing a client
        // can see, so it must not fail their transactions).
        let watchers = self.take_watchers(pa, pb)?;
        let mut names: Vec<&[u8]> = watchers.iter().map(|w| &w.key[1..]).collect();
        names.sort_unstable();
        names.dedup();
        let mut changed: Vec<Vec<u8>> = Vec::new();
        for name in names {
            let mut live = false;
            for prefix in [pa, pb] {
                let mut stored = EKey::with_capacity(name.len() + 1);
                stored.push(prefix);
                stored.extend_from_slice(name);
                live |= self.get_stored(&stored, now_ms)?.is_some();
            }
            if live {
                changed.push(name.to_vec());
            }
        }
        for watcher in &watchers {
            if changed
                .binary_search_by(|n| n[..].cmp(&watcher.key[1..]))
                .is_ok()
            {
                watcher.flag.store(true, Ordering::Release);
            }
        }
        if self.batch.is_some() {
            self.swaps.push((a, b));
        }
        self.exchange(a, b, watchers)
    }

    /// The watches of keys stored under prefix `pa` or `pb`, taken out of
    /// their groups.
    fn take_watchers(&mut self, pa: u8, pb: u8) -> Result<Vec<super::Watcher>> {
        let mut watchers = Vec::new();
        for (_, group) in self.guards.every()? {
            let (theirs, rest) = std::mem::take(&mut group.watchers)
                .into_iter()
                .partition(|w| w.key.first().is_some_and(|&p| p == pa || p == pb));
            group.watchers = rest;
            watchers.extend::<Vec<super::Watcher>>(theirs);
        }
        Ok(watchers)
    }

    /// Exchanges `a` and `b` in the map in memory; `watchers` (those of
    /// both databases, taken out of their groups) follow their database
    /// numbers to the other prefix, and blocked clients look again.
    fn exchange(&mut self, a: usize, b: usize, watchers: Vec<super::Watcher>) -> Result<()> {
        let ks = self.ks;
        let (pa, pb) = (ks.db_map.physical(a) as u8, ks.db_map.physical(b) as u8);
        ks.db_map.swap(a, b);
        for mut watcher in watchers {
            watcher.key[0] = if watcher.key[0] == pa { pb } else { pa };
            let (_, group) = self.guards.get(&watcher.key)?;
            group.watchers.push(watcher);
        }
        ks.wake_all_blocked();
        Ok(())
    }

    /// When dropped: an atomic transaction's swaps whose record was not
    /// written (no commit, or a failed one) are taken back in memory, so
    /// the map stays the one a restart would read. Whatever else the
    /// transaction did under the swapped map was not written either, but
    /// for what an early commit (`apply_buffered`) wrote: the record
    /// decides, written or not.
    fn settle_swaps(&mut self) {
        if self.swaps.is_empty() {
            return;
        }
        let ks = self.ks;
        let written = match ks.store.get(&super::db_map::KEY) {
            Ok(record) => record.unwrap_or_else(|| DbMap::identity().encode().to_vec()),
            Err(e) => {
                log::error!("the database map record cannot be read after SWAPDB: {e}");
                return;
            }
        };
        if written[..] == ks.db_map.encode()[..] {
            return;
        }
        for (a, b) in std::mem::take(&mut self.swaps).into_iter().rev() {
            let (pa, pb) = (ks.db_map.physical(a) as u8, ks.db_map.physical(b) as u8);
            let moved = self
                .take_watchers(pa, pb)
                .and_then(|watchers| self.exchange(a, b, watchers));
            if let Err(e) = moved {
                log::error!("taking back an uncommitted SWAPDB failed: {e}");
                return;
            }
        }
        if written[..] != ks.db_map.encode()[..] {
            log::error!("the database map in memory differs from its record after SWAPDB");
        }
    }
}

impl Drop for Txn<'_> {
    /// An atomic transaction dropped without its commit (a failed command,
    /// a failed EXEC) takes its collection changes and swaps back.
    fn drop(&mut self) {
        self.settle_swaps();
        if !self.pending.is_empty() {
            self.pending.clear();
            let undo = std::mem::take(&mut self.undo);
            let touched = std::mem::take(&mut self.touched);
            self.undo_collections(undo, touched);
        }
    }
}

/// The engine key of `key` in database `db`, as collection operations
/// name it.
pub fn ckey(db: usize, key: &[u8]) -> Result<Bytes> {
    Ok(ekey(db, key)?.as_slice().into())
}

#[cfg(test)]
mod tests {
    //! Atomic transactions: what they write reaches the stores with their
    //! commit, as one batch, and not before (a replicated node's apply
    //! commits a chunk of entries with its applied index, and a crash
    //! before that commit must leave nothing of the chunk), while the
    //! transaction itself sees it (DBSIZE, SWAPDB).

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use engram_collections::Op;

    use crate::value::StringValue;
    use crate::{ckey, journal, now_ms, Keyspace, KeyspaceOptions};

    fn open(dir: &std::path::Path) -> Arc<Keyspace> {
        Keyspace::open_dir(dir, &KeyspaceOptions::default())
            .unwrap()
            .keyspace
    }

    fn set(ks: &Keyspace, db: usize, key: &[u8], value: &[u8], expire_at: Option<u64>) {
        let mut txn = ks.lock([(db, key)], false).unwrap();
        txn.put_string(db, key, value, expire_at).unwrap();
        txn.commit().unwrap();
    }

    fn get(ks: &Keyspace, db: usize, key: &[u8]) -> Option<Vec<u8>> {
        ks.read(db, key, now_ms(), |meta, payload| {
            StringValue::from_payload(meta, payload).to_bytes()
        })
        .unwrap()
    }

    fn set_add(db: usize, key: &[u8]) -> Op {
        Op::SetAdd {
            key: ckey(db, key).unwrap(),
            members: vec![b"m".as_slice().into()],
        }
    }

    /// DBSIZE inside an atomic transaction counts what it wrote, buffered
    /// or not: new keys, overwrites, deletes, a string over a collection
    /// and a collection over a string, other databases apart. And it
    /// applies nothing: the strings reach the engine at the commit.
    #[test]
    fn dbsize_in_an_atomic_transaction_counts_its_buffered_writes() {
        let dir = tempfile::tempdir().unwrap();
        let ks = open(dir.path());
        set(&ks, 0, b"a", b"1", None);
        set(&ks, 0, b"b", b"1", None);
        set(&ks, 0, b"c", b"1", None);
        set(&ks, 0, b"gone", b"1", Some(now_ms() - 1000));
        let mut txn = ks.lock_all(false);
        txn.log(vec![set_add(0, b"s")]).unwrap();
        txn.commit().unwrap();
        assert_eq!(ks.dbsize(0), 5);

        let now = now_ms();
        let mut txn = ks.lock_all(true);
        assert_eq!(txn.dbsize(0), 5);
        txn.put_string(0, b"new", b"v", None).unwrap();
        assert_eq!(txn.dbsize(0), 6, "a new key");
        txn.put_string(0, b"a", b"2", None).unwrap();
        assert_eq!(txn.dbsize(0), 6, "an overwrite");
        assert!(txn.delete(0, b"b", now).unwrap());
        assert_eq!(txn.dbsize(0), 5, "a delete");
        assert!(!txn.delete(0, b"absent", now).unwrap());
        assert_eq!(txn.dbsize(0), 5, "a delete of nothing");
        txn.put_string(0, b"s", b"v", None).unwrap();
        assert_eq!(txn.dbsize(0), 5, "a string over a collection");
        txn.log(vec![set_add(0, b"c")]).unwrap();
        assert_eq!(txn.dbsize(0), 5, "a collection over a string");
        txn.log(vec![set_add(0, b"new")]).unwrap();
        assert_eq!(txn.dbsize(0), 5, "a collection over a buffered string");
        txn.put_string(0, b"brief", b"v", None).unwrap();
        assert!(txn.delete(0, b"brief", now).unwrap());
        assert_eq!(txn.dbsize(0), 5, "a new key deleted again");
        assert!(txn.get(0, b"gone", now).unwrap().is_none());
        assert_eq!(txn.dbsize(0), 4, "an expired key met");
        txn.put_string(1, b"other", b"v", None).unwrap();
        assert_eq!((txn.dbsize(0), txn.dbsize(1)), (4, 1), "another database");
        // Nothing reached the engine.
        let store = ks.store();
        assert!(store.get(b"\0a").unwrap().is_some());
        assert!(store.get(b"\0b").unwrap().is_some());
        assert!(store.get(b"\x01other").unwrap().is_none());
        assert!(store.get(b"\0brief").unwrap().is_none());
        txn.commit().unwrap();
        assert_eq!((ks.dbsize(0), ks.dbsize(1)), (4, 1), "as the commit counts");
        assert_eq!(get(&ks, 0, b"a"), Some(b"2".to_vec()));
    }

    /// An atomic transaction dropped without its commit (a crash of a
    /// replicated node's apply) leaves nothing behind, DBSIZE asked in it
    /// or not: it used to apply the buffered writes (with no applied
    /// index), and the restart applied them again.
    #[test]
    fn an_atomic_transaction_dropped_after_dbsize_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ks = open(dir.path());
            set(&ks, 0, b"counter", b"1", None);
            let mut txn = ks.lock_all(true);
            txn.forgo_rollback();
            txn.put_string(0, b"counter", b"2", None).unwrap();
            txn.put_string(0, b"new", b"v", None).unwrap();
            assert_eq!(txn.dbsize(0), 2);
            txn.put_string(0, b"after", b"v", None).unwrap();
            drop(txn);
            assert_eq!(ks.dbsize(0), 1);
            Keyspace::close(ks).unwrap();
        }
        let ks = open(dir.path());
        assert_eq!(get(&ks, 0, b"counter"), Some(b"1".to_vec()));
        assert_eq!(get(&ks, 0, b"new"), None);
        assert_eq!(ks.dbsize(0), 1);
    }

    /// SWAPDB in an atomic transaction: later reads in it see the swap;
    /// dropped without its commit, the map in memory is put back (and the
    /// watches with it) and the record was never written; committed, the
    /// record is there after a reopen.
    #[test]
    fn a_swap_in_an_atomic_transaction_is_written_with_its_batch() {
        let dir = tempfile::tempdir().unwrap();
        let now = now_ms();
        {
            let ks = open(dir.path());
            set(&ks, 0, b"k", b"zero", None);
            set(&ks, 1, b"k", b"one", None);
            let flag = Arc::new(AtomicBool::new(false));
            ks.watch(0, b"w", &flag).unwrap();
            let mut txn = ks.lock_all(true);
            txn.put_string(0, b"before", b"v", None).unwrap();
            txn.swap_databases(0, 1, now).unwrap();
            let seen = txn.get(0, b"k", now).unwrap().unwrap();
            assert_eq!(seen.string().to_bytes(), b"one");
            assert!(txn.get(1, b"before", now).unwrap().is_some());
            assert_eq!(txn.dbsize(1), 2);
            drop(txn);
            assert_eq!(get(&ks, 0, b"k"), Some(b"zero".to_vec()), "put back");
            assert!(!flag.load(Ordering::Acquire));
            set(&ks, 0, b"w", b"v", None);
            assert!(flag.load(Ordering::Acquire), "the watch is back in db 0");
            Keyspace::close(ks).unwrap();
        }
        {
            let ks = open(dir.path());
            assert_eq!(get(&ks, 0, b"k"), Some(b"zero".to_vec()));
            assert_eq!(get(&ks, 0, b"before"), None);
            let mut txn = ks.lock_all(true);
            txn.forgo_rollback();
            txn.swap_databases(0, 1, now).unwrap();
            txn.commit().unwrap();
            assert_eq!(get(&ks, 0, b"k"), Some(b"one".to_vec()));
            Keyspace::close(ks).unwrap();
        }
        let ks = open(dir.path());
        assert_eq!(get(&ks, 0, b"k"), Some(b"one".to_vec()));
        assert_eq!(get(&ks, 1, b"k"), Some(b"zero".to_vec()));
    }

    /// A batch that mixes strings and collections commits through an
    /// intent; one holding the database map's record that a crash left is
    /// replayed at the next start, and the map in memory is the record's
    /// (it was read before the replay).
    #[test]
    fn a_replayed_batch_holding_the_database_map_swaps_the_map_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ks = open(dir.path());
            set(&ks, 0, b"k", b"zero", None);
            set(&ks, 1, b"k", b"one", None);
            let mut record = ks.db_map.encode();
            record.swap(0, 1);
            let ops: Vec<journal::Op> = vec![(
                crate::db_map::KEY.to_vec(),
                journal::Write::Engine(Some(record.to_vec())),
            )];
            let intent = journal::encode(ops.iter().map(|(k, w)| (k.as_slice(), w)));
            ks.store().put(&journal::intent_key(0), &intent).unwrap();
            Keyspace::close(ks).unwrap();
        }
        let ks = open(dir.path());
        assert_eq!(ks.stats.batches_replayed.load(Ordering::Relaxed), 1);
        assert_eq!(get(&ks, 0, b"k"), Some(b"one".to_vec()));
        assert_eq!(get(&ks, 1, b"k"), Some(b"zero".to_vec()));
        assert_eq!((ks.dbsize(0), ks.dbsize(1)), (1, 1));
    }

    /// A live-looking expired key met in an atomic transaction is deleted
    /// with the transaction's batch, not at once; WATCH hears of it at
    /// once all the same.
    #[test]
    fn an_expired_key_met_in_an_atomic_transaction_goes_with_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ks = open(dir.path());
            set(&ks, 0, b"gone", b"v", Some(now_ms() - 1000));
            let flag = Arc::new(AtomicBool::new(false));
            ks.watch(0, b"gone", &flag).unwrap();
            let mut txn = ks.lock([(0, b"gone".as_slice())], true).unwrap();
            assert!(txn.get(0, b"gone", now_ms()).unwrap().is_none());
            assert!(flag.load(Ordering::Acquire), "WATCH heard of it");
            drop(txn);
            assert_eq!(ks.dbsize(0), 1);
            Keyspace::close(ks).unwrap();
        }
        let ks = open(dir.path());
        assert_eq!(ks.dbsize(0), 1, "still stored");
        let mut txn = ks.lock([(0, b"gone".as_slice())], true).unwrap();
        assert!(txn.get(0, b"gone", now_ms()).unwrap().is_none());
        txn.commit().unwrap();
        assert_eq!(ks.dbsize(0), 0);
    }

    /// The functions record of a transaction that forwent rollback (a
    /// replicated node's apply) goes with its batch; elsewhere it is
    /// written at once.
    #[test]
    fn the_functions_record_goes_with_the_batch_of_an_apply() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ks = open(dir.path());
            let mut txn = ks.lock_all(true);
            txn.forgo_rollback();
            txn.put_functions_record(b"applied").unwrap();
            drop(txn);
            assert_eq!(ks.functions_record().unwrap(), None);
            let mut txn = ks.lock_all(true);
            txn.put_functions_record(b"at once").unwrap();
            drop(txn);
            assert_eq!(ks.functions_record().unwrap(), Some(b"at once".to_vec()));
            let mut txn = ks.lock_all(true);
            txn.forgo_rollback();
            txn.put_functions_record(b"committed").unwrap();
            txn.put_applied_index(3).unwrap();
            txn.commit().unwrap();
            Keyspace::close(ks).unwrap();
        }
        let ks = open(dir.path());
        assert_eq!(ks.functions_record().unwrap(), Some(b"committed".to_vec()));
        assert_eq!(ks.applied_index().unwrap(), 3);
    }

    /// A whole-keyspace atomic transaction that deletes strings and
    /// writes collections commits, whatever shards the deleted strings'
    /// keys fall in (it looked for a collection at each deleted key in
    /// the shards it held, and stopped at one it did not hold, as often
    /// as the batch's order put such a delete first).
    #[test]
    fn deleting_strings_beside_collection_writes_commits() {
        let dir = tempfile::tempdir().unwrap();
        let ks = open(dir.path());
        for i in 0..50 {
            let key = format!("string{i}");
            set(&ks, 0, key.as_bytes(), b"v", None);
            let mut txn = ks.lock_all(true);
            assert!(txn.delete(0, key.as_bytes(), now_ms()).unwrap());
            txn.put_string(0, b"other", b"v", None).unwrap();
            txn.log(vec![set_add(0, format!("set{i}").as_bytes())])
                .unwrap();
            txn.commit().unwrap();
            assert_eq!(get(&ks, 0, key.as_bytes()), None);
        }
        assert_eq!(ks.dbsize(0), 51);
    }

    /// A flush commits what the transaction buffered first; in a
    /// replicated node's apply that commit records the index of the entry
    /// before the one running, so a restart does not apply the chunk's
    /// earlier entries again.
    #[test]
    fn an_early_commit_records_the_applied_index_before_the_entry() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ks = open(dir.path());
            let mut txn = ks.lock_all(true);
            txn.forgo_rollback();
            txn.begin_entry(5);
            txn.put_string(0, b"earlier", b"v", None).unwrap();
            txn.log(vec![set_add(0, b"s")]).unwrap();
            txn.begin_entry(6);
            txn.put_string(1, b"running", b"v", None).unwrap();
            txn.flush(Some(1)).unwrap();
            drop(txn);
            Keyspace::close(ks).unwrap();
        }
        let ks = open(dir.path());
        assert_eq!(ks.applied_index().unwrap(), 5);
        assert_eq!(get(&ks, 0, b"earlier"), Some(b"v".to_vec()));
        assert_eq!(ks.dbsize(0), 2);
        assert_eq!(ks.dbsize(1), 0);
    }
}
