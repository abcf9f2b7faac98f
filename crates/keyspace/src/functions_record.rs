//! The server's FUNCTION libraries, kept as data: one engine value under
//! a reserved key (`0xFF 'F'`: 0xFF is never a database), holding the
//! whole library set in the format the server chooses (Redis's FUNCTION
//! DUMP payload). The keyspace only stores it: written whole, by one
//! engine put, whenever the set changes (so a crash leaves the old set or
//! the new one), under the keyspace's exclusion, and covered by the group commit
//! like any write; read once at startup.

use crate::{Error, Keyspace, Result, Txn};

/// The reserved engine key of the record.
pub const KEY: [u8; 2] = [0xFF, b'F'];

pub fn is_functions_key(key: &[u8]) -> bool {
    key == KEY
}

impl Keyspace {
    /// The functions record, if one was ever written.
    pub fn functions_record(&self) -> Result<Option<Vec<u8>>> {
        self.store().get(&KEY).map_err(Error::Engine)
    }
}

impl Txn<'_> {
    /// Replaces the functions record. Needs the keyspace excluded
    /// (`Keyspace::lock_all`), so no other writer runs beside it; durable
    /// with the transaction's other writes (the reply waits on the group
    /// commit). Written at once: the server's library set changed at once,
    /// and a failed commit could not take that back. But for a transaction
    /// that forwent rollback (a replicated node's apply, which stops the
    /// process rather than go on from a failed commit): there it goes into
    /// the batch, to commit with the applied index, so that a restart does
    /// not find the libraries of entries it applies again.
    pub fn put_functions_record(&mut self, record: &[u8]) -> Result<()> {
        if !self.holds_every_group() {
            return Err(Error::Internal(
                "the functions record without every group locked".into(),
            ));
        }
        if self.is_atomic() && !self.rolls_back() {
            self.put_reserved(&KEY, record)?;
            self.mark_wrote();
            return Ok(());
        }
        self.keyspace()
            .store()
            .put(&KEY, record)
            .map_err(Error::Engine)?;
        self.mark_wrote();
        Ok(())
    }
}
