//! A replicated node's applied index: the last Raft entry whose effects
//! the keyspace holds, under a reserved key (`0xFF 'R'`: 0xFF is never a
//! database) in whichever store the entries wrote to. It is written inside
//! the atomic batch of the entries it covers (`Txn::put_applied_index`),
//! so after a crash the keyspace holds an entry's effects exactly when the
//! record counts it, and the node re-applies from the next entry: exactly
//! once.
//!
//! Two copies, because a batch must stay in one store to stay cheap: a
//! batch with string writes carries an engine value (one engine record run
//! with the rest); a batch of collection writes only carries a hash field
//! in its operation-log record (mixing in an engine value would make the
//! batch an intent holding every touched collection whole). Batches commit
//! one after the other on one thread, so the larger of the two is the
//! applied index. The hash is a key of no database: like keys of hidden
//! databases, no count, scan, flush or eviction sees it.

use engram_collections::{op::Bytes, Op};

use crate::{Error, Keyspace, Result, Txn};

/// The hash field of the collections' copy.
const FIELD: &[u8] = b"applied";

/// The reserved engine key of the record.
pub const KEY: [u8; 2] = [0xFF, b'R'];

pub fn is_applied_key(key: &[u8]) -> bool {
    key == KEY
}

impl Keyspace {
    /// The applied index recorded, 0 if none ever was.
    pub fn applied_index(&self) -> Result<u64> {
        let (engine, collections) = self.applied_index_copies()?;
        Ok(engine.max(collections))
    }

    /// The two copies of the applied index: the engine's, the
    /// collections' (which of them the last batches wrote shows how a
    /// writer cut its batches: tests).
    #[doc(hidden)]
    pub fn applied_index_copies(&self) -> Result<(u64, u64)> {
        let decode = |value: &[u8]| {
            value
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .ok_or_else(|| Error::Internal("the applied-index record is short".into()))
        };
        let engine = match self.store().get(&KEY).map_err(Error::Engine)? {
            None => 0,
            Some(value) => decode(&value)?,
        };
        let collections: Option<Vec<u8>> =
            self.collections
                .read(&KEY, |entry| match entry.map(|e| &e.object) {
                    Some(engram_collections::types::Object::Hash(hash)) => {
                        hash.get(FIELD).map(<[u8]>::to_vec)
                    }
                    _ => None,
                });
        let collections = match collections {
            None => 0,
            Some(value) => decode(&value)?,
        };
        Ok((engine, collections))
    }
}

impl Txn<'_> {
    /// Records `index` as applied, in this transaction's atomic batch.
    /// Needs an atomic transaction that excludes the keyspace
    /// (`Keyspace::lock_all(true)`).
    pub fn put_applied_index(&mut self, index: u64) -> Result<()> {
        if !self.is_atomic() || !self.holds_every_group() {
            return Err(Error::Internal(
                "the applied index outside an atomic whole-keyspace transaction".into(),
            ));
        }
        if self.buffered_collections_only() {
            let op = Op::HashSet {
                key: Bytes::from(&KEY[..]),
                pairs: vec![(Bytes::from(FIELD), Bytes::from(&index.to_le_bytes()[..]))],
            };
            return self.log_reserved(op);
        }
        self.put_reserved(&KEY, &index.to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use crate::{now_ms, CKind, Keyspace, KeyspaceOptions};
    use engram_collections::Op;

    fn open(dir: &std::path::Path) -> std::sync::Arc<Keyspace> {
        Keyspace::open_dir(dir, &KeyspaceOptions::default())
            .unwrap()
            .keyspace
    }

    /// A collections-only batch (a member to set `s`) with the applied
    /// index `index`: the record goes to the reserved hash.
    fn add_to_set_at(ks: &Keyspace, index: u64) {
        let mut txn = ks.lock_all(true);
        txn.collection(0, b"s", CKind::Set, now_ms()).unwrap();
        txn.log(vec![Op::SetAdd {
            key: crate::ckey(0, b"s").unwrap(),
            members: vec![b"m".to_vec().into()],
        }])
        .unwrap();
        txn.put_applied_index(index).unwrap();
        txn.commit().unwrap();
    }

    #[test]
    fn the_applied_index_commits_with_its_batch_and_is_no_key() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ks = open(dir.path());
            assert_eq!(ks.applied_index().unwrap(), 0);
            // Strings only, then strings and a collection: both kinds of
            // atomic batch carry the record.
            let mut txn = ks.lock_all(true);
            txn.put_string(0, b"a", b"1", None).unwrap();
            txn.put_applied_index(7).unwrap();
            txn.commit().unwrap();
            assert_eq!(ks.applied_index().unwrap(), 7);
            add_to_set_at(&ks, 9);
            assert_eq!(ks.applied_index().unwrap(), 9);
            // The collections-only batch kept its record in its own store:
            // the engine's copy still says 7.
            let engine = ks.store().get(&super::KEY).unwrap().unwrap();
            assert_eq!(u64::from_le_bytes(engine[..8].try_into().unwrap()), 7);
            // Not a key of any database.
            assert_eq!(ks.dbsize(0), 2);
            assert_eq!((1..16).map(|db| ks.dbsize(db)).sum::<u64>(), 0);
            Keyspace::close(ks).unwrap();
        }
        let ks = open(dir.path());
        assert_eq!(ks.applied_index().unwrap(), 9);
        assert_eq!(ks.dbsize(0), 2);
        assert_eq!(
            ks.stats
                .keys_in_hidden_dbs
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
    }

    /// A member killed in a mixed batch's commit left its intent, whose
    /// engine writes include the applied index while the reserved hash
    /// holds the other copy: the replay at the next start writes the
    /// engine copy and leaves the hash (it used to take the record for a
    /// string replacing a collection, and panicked on its books; found by
    /// the fault suite's SIGKILLs).
    #[test]
    fn an_intent_holding_the_applied_index_replays_beside_its_hash_copy() {
        use crate::journal;
        let dir = tempfile::tempdir().unwrap();
        {
            let ks = open(dir.path());
            add_to_set_at(&ks, 9);
            let mut value = Vec::new();
            crate::value::encode_string(&mut value, b"v", None);
            let ops: Vec<journal::Op> = vec![
                (b"\0str".to_vec(), journal::Write::Engine(Some(value))),
                (
                    super::KEY.to_vec(),
                    journal::Write::Engine(Some(11u64.to_le_bytes().to_vec())),
                ),
            ];
            let intent = journal::encode(ops.iter().map(|(k, w)| (k.as_slice(), w)));
            ks.store().put(&journal::intent_key(0), &intent).unwrap();
            Keyspace::close(ks).unwrap();
        }
        let ks = open(dir.path());
        assert_eq!(
            ks.stats
                .batches_replayed
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert_eq!(ks.applied_index().unwrap(), 11);
        let hash_copy = ks.collections.read(&super::KEY, |e| e.is_some());
        assert!(hash_copy, "the reserved hash was deleted");
        assert_eq!(ks.dbsize(0), 2);
    }

    #[test]
    fn the_applied_index_needs_an_atomic_whole_keyspace_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let ks = open(dir.path());
        let mut direct = ks.lock_all(false);
        assert!(direct.put_applied_index(1).is_err());
        drop(direct);
        let mut keys = ks.lock([(0, b"k".as_slice())], true).unwrap();
        assert!(keys.put_applied_index(1).is_err());
        drop(keys);
        assert_eq!(ks.applied_index().unwrap(), 0);
    }
}
