//! A write context: the stripes of the keys it may touch are locked for its
//! whole life. Direct transactions send each write to the engine at once;
//! atomic ones buffer writes (reads see them) and apply them at `commit` as
//! one crash-atomic batch.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;

use super::stripe::{apply_delete, apply_meta, apply_put, swap_word, touch, Stripe};
use super::value::{decode, encode_int, Meta, StringValue, META_BYTES};
use super::{ekey, EKey, Error, Keyspace, Result};

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

    pub fn payload(&self) -> &[u8] {
        &self.value[META_BYTES..]
    }

    /// The engine value (meta word and payload).
    pub fn raw(&self) -> &[u8] {
        &self.value
    }

    pub fn string(&self) -> StringValue<'_> {
        StringValue::from_payload(self.meta, self.payload())
    }
}

pub struct Txn<'a> {
    ks: &'a Keyspace,
    /// Held stripes, ascending by index.
    guards: Vec<(usize, MutexGuard<'a, Stripe>)>,
    /// Buffered writes of an atomic transaction (None: a delete).
    batch: Option<BTreeMap<EKey, Option<Vec<u8>>>>,
    wrote: bool,
    scratch: Vec<u8>,
}

impl<'a> Txn<'a> {
    pub(super) fn new(
        ks: &'a Keyspace,
        guards: Vec<(usize, MutexGuard<'a, Stripe>)>,
        atomic: bool,
    ) -> Txn<'a> {
        Txn {
            ks,
            guards,
            batch: atomic.then(BTreeMap::new),
            wrote: false,
            scratch: Vec::new(),
        }
    }

    /// Whether anything was written (the reply must wait for durability).
    pub fn wrote(&self) -> bool {
        self.wrote
    }

    fn stripe(&mut self, ekey: &[u8]) -> Result<(usize, &mut Stripe)> {
        stripe_of(&mut self.guards, ekey)
    }

    /// The live value of `key`, or None (absent or expired; an expired key
    /// is deleted on the way).
    pub fn get(&mut self, db: usize, key: &[u8], now_ms: u64) -> Result<Option<Stored>> {
        let ekey = ekey(db, key)?;
        self.get_ekey(&ekey, now_ms)
    }

    pub(crate) fn get_ekey(&mut self, ekey: &[u8], now_ms: u64) -> Result<Option<Stored>> {
        self.stripe(ekey)?;
        if let Some(batch) = &mut self.batch {
            if let Some(buffered) = batch.get(ekey) {
                let stored = buffered.clone().map(Stored::new).transpose()?;
                return Ok(stored.filter(|s| !s.meta.is_expired(now_ms)));
            }
        }
        let Some(value) = self.ks.store.get(ekey).map_err(Error::Engine)? else {
            return Ok(None);
        };
        let stored = Stored::new(value)?;
        if stored.meta.is_expired(now_ms) {
            let ks = self.ks;
            let (index, stripe) = stripe_of(&mut self.guards, ekey)?;
            apply_delete(&ks.store, &ks.stripes[index], stripe, ekey)?;
            self.ks.stats.expired_keys.fetch_add(1, Ordering::Relaxed);
            self.wrote = true;
            return Ok(None);
        }
        Ok(Some(stored))
    }

    /// Writes a whole engine value (meta word and payload).
    pub fn put(&mut self, db: usize, key: &[u8], value: &[u8]) -> Result<()> {
        let ekey = ekey(db, key)?;
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
        let ekey = ekey(db, key)?;
        match self.get_ekey(&ekey, now_ms) {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(false),
            Err(e) if e.is_damage() => {
                log::warn!("deleting damaged key {}: {e}", String::from_utf8_lossy(key));
            }
            Err(e) => return Err(e),
        }
        self.apply_raw(&ekey, None)?;
        Ok(true)
    }

    /// Replaces the meta word of a live key (EXPIRE, PERSIST): in place in
    /// a direct transaction.
    pub fn set_meta(&mut self, db: usize, key: &[u8], old: &Stored, new: Meta) -> Result<()> {
        let ekey = ekey(db, key)?;
        if self.batch.is_some() {
            let mut value = old.raw().to_vec();
            value[..META_BYTES].copy_from_slice(&new.0.to_le_bytes());
            return self.apply_raw(&ekey, Some(&value));
        }
        let ks = self.ks;
        let (index, stripe) = stripe_of(&mut self.guards, &ekey)?;
        apply_meta(&ks.store, &ks.stripes[index], stripe, &ekey, old.meta, new)?;
        self.wrote = true;
        Ok(())
    }

    /// Replaces an integer-encoded value (INCR and friends): in place in a
    /// direct transaction, one atomic 8-byte store.
    pub fn set_int(&mut self, db: usize, key: &[u8], old: &Stored, new: i64) -> Result<()> {
        let ekey = ekey(db, key)?;
        let StringValue::Int(current) = old.string() else {
            return Err(Error::Internal(
                "set_int on a value that is not an integer".into(),
            ));
        };
        if self.batch.is_some() {
            let mut value = Vec::new();
            encode_int(&mut value, new, old.meta.expire_at());
            return self.apply_raw(&ekey, Some(&value));
        }
        swap_word(
            &self.ks.store,
            &ekey,
            META_BYTES as u64,
            current as u64,
            new as u64,
        )?;
        let (_, stripe) = self.stripe(&ekey)?;
        touch(stripe, &ekey);
        self.wrote = true;
        Ok(())
    }

    /// A write of a whole value or a delete: buffered or applied.
    pub(super) fn apply_raw(&mut self, ekey: &[u8], value: Option<&[u8]>) -> Result<()> {
        let ks = self.ks;
        let (index, stripe) = stripe_of(&mut self.guards, ekey)?;
        if let Some(batch) = &mut self.batch {
            batch.insert(EKey::from_slice(ekey), value.map(<[u8]>::to_vec));
            return Ok(());
        }
        let slot = &ks.stripes[index];
        match value {
            Some(value) => apply_put(&ks.store, slot, stripe, ekey, value)?,
            None => {
                apply_delete(&ks.store, slot, stripe, ekey)?;
            }
        }
        self.wrote = true;
        Ok(())
    }

    /// Applies the buffered writes now, as one atomic batch, and keeps
    /// buffering after (for FLUSHDB inside MULTI, which applies directly).
    pub fn apply_buffered(&mut self) -> Result<()> {
        let Some(batch) = self.batch.take() else {
            return Ok(());
        };
        let result = self.apply_batch(batch);
        self.batch = Some(BTreeMap::new());
        result
    }

    fn apply_batch(&mut self, batch: BTreeMap<EKey, Option<Vec<u8>>>) -> Result<()> {
        let ops: Vec<(EKey, Option<Vec<u8>>)> = batch.into_iter().collect();
        let intent = match ops.len() {
            0 => return Ok(()),
            // One key: the engine makes it atomic by itself.
            1 => None,
            _ => Some(self.ks.write_intent(&ops)?),
        };
        let mut failure = None;
        for (ekey, value) in &ops {
            if let Err(e) = self.apply_raw(ekey, value.as_deref()) {
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

    /// Applies the buffered writes (atomic transactions) and releases the
    /// locks; returns whether anything was written.
    pub fn commit(mut self) -> Result<bool> {
        if let Some(batch) = self.batch.take() {
            self.apply_batch(batch)?;
        }
        Ok(self.wrote)
    }

    /// Deletes every key of `db` (or of every database): FLUSHDB/FLUSHALL.
    /// Needs every stripe locked (`Keyspace::lock_all`).
    pub fn flush(&mut self, db: Option<usize>) -> Result<u64> {
        if self.guards.len() != super::STRIPES {
            return Err(Error::Internal("flush without every stripe locked".into()));
        }
        self.apply_buffered()?;
        let databases = self.ks.databases;
        let mut deleted = 0;
        let mut cursor = 0;
        loop {
            let (next, keys) = self.ks.store.scan(cursor, 4096);
            for ekey in keys {
                let Some(&first) = ekey.first() else { continue };
                let wanted = match db {
                    Some(db) => first as usize == db,
                    None => (first as usize) < databases,
                };
                if wanted && !super::journal::is_intent_key(&ekey) {
                    let ks = self.ks;
                    let (index, stripe) = stripe_of(&mut self.guards, &ekey)?;
                    if apply_delete(&ks.store, &ks.stripes[index], stripe, &ekey)? {
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
        Ok(deleted)
    }
}

/// The held stripe of `ekey`, or an error if the transaction did not lock
/// it (a command whose key list missed a key: a bug, not a crash).
fn stripe_of<'g>(
    guards: &'g mut [(usize, MutexGuard<'_, Stripe>)],
    ekey: &[u8],
) -> Result<(usize, &'g mut Stripe)> {
    let index = Keyspace::slot_index(ekey);
    match guards.binary_search_by_key(&index, |(i, _)| *i) {
        Ok(at) => Ok((index, &mut guards[at].1)),
        Err(_) => Err(Error::Internal(
            "a command touched a key it did not lock".into(),
        )),
    }
}
