//! `engram import FILE --dir DIR`: loads a Redis RDB file into a data
//! directory, as Redis loads one at startup.
//!
//! The file is read twice, a window at a time (see `file`): first checked
//! (its checksum, then every record decoded once), so a damaged or
//! unsupported file is refused before anything is written. Then the keys go in through the keyspace,
//! the same write paths the server's commands use, in batches: a batch's
//! strings are engine writes and its collections one operation-log record
//! (each collection with its expiry). Keys whose expiry has passed are
//! skipped, as Redis skips them when it loads a file; so are empty
//! collections (Redis skips them too) and keys longer than Engram's limit.
//! A key that the directory already holds is replaced.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use engram_collections::Op;

use crate::keyspace::{ckey, now_ms, Keyspace, OpenError, MAX_KEY_LEN};
use crate::rdb::file::{FileReader, Record};
use crate::rdb::value::Stored;
use crate::rdb::Error;

/// Keys written per keyspace transaction (one lock round, and one
/// operation-log record for the batch's collections).
const BATCH: usize = 1024;
/// Engram's databases: 0 to 254.
const MAX_DATABASES: u64 = 255;

/// What an import did.
#[derive(Debug, Default)]
pub struct Summary {
    pub rdb_version: u32,
    /// Keys imported, per database.
    pub per_db: BTreeMap<u64, u64>,
    /// Keys imported, per type name (TYPE's).
    pub per_type: BTreeMap<&'static str, u64>,
    /// Of those, keys with an expiry.
    pub with_expiry: u64,
    pub skipped_expired: u64,
    pub skipped_empty: u64,
    pub skipped_long_key: u64,
    /// Function libraries in the file (Engram has no Lua: not imported).
    pub functions_skipped: u64,
    /// Keys the directory held before.
    pub keys_before: u64,
    /// Databases the server must be started with to see every key.
    pub databases_needed: u64,
    pub check_time: Duration,
    pub write_time: Duration,
}

impl Summary {
    pub fn imported(&self) -> u64 {
        self.per_db.values().sum()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "imported {} keys from an RDB version {} file (checked in {:.2?}, written in {:.2?})",
            self.imported(),
            self.rdb_version,
            self.check_time,
            self.write_time
        )?;
        for (db, keys) in &self.per_db {
            writeln!(f, "  db{db}: {keys} keys")?;
        }
        for (name, keys) in &self.per_type {
            writeln!(f, "  {name}: {keys}")?;
        }
        writeln!(f, "  with an expiry: {}", self.with_expiry)?;
        writeln!(
            f,
            "skipped: {} already expired, {} empty collections, {} keys longer than {MAX_KEY_LEN} bytes",
            self.skipped_expired, self.skipped_empty, self.skipped_long_key
        )?;
        if self.functions_skipped > 0 {
            writeln!(
                f,
                "note: {} function libraries not imported (Engram has no Lua engine)",
                self.functions_skipped
            )?;
        }
        if self.keys_before > 0 {
            writeln!(
                f,
                "note: the directory already held {} keys; imported keys replaced those of the same name",
                self.keys_before
            )?;
        }
        if self.databases_needed > 16 {
            writeln!(
                f,
                "note: keys in databases beyond 15: start the server with --databases {}",
                self.databases_needed
            )?;
        }
        Ok(())
    }
}

/// Imports `file` into the data directory `dir` (created if missing).
/// Errors are whole sentences for the operator; a damaged file's names the
/// byte offset.
pub fn import(file: &Path, dir: &Path) -> Result<Summary, String> {
    let started = Instant::now();
    let corrupt = |e: Error| {
        let what = if e.unsupported {
            "cannot import"
        } else {
            "corrupt RDB file"
        };
        format!("{}: {what}: {e}", file.display())
    };
    let mut summary = check(file).map_err(corrupt)?;
    summary.check_time = started.elapsed();

    let written = Instant::now();
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let options = crate::serve::keyspace_options(&crate::Config {
        databases: summary.databases_needed.max(16) as usize,
        ..crate::Config::default()
    });
    let opened = Keyspace::open_dir(dir, &options).map_err(|e| match e {
        OpenError::Store {
            source: engram_engine::Error::Locked { .. },
            ..
        } => format!(
            "{} is in use: a running server (engram serve) or another process has it open. \
             Stop it first, or load keys into a running server with RESTORE",
            dir.display()
        ),
        other => other.to_string(),
    })?;
    let keyspace = opened.keyspace;
    summary.keys_before = (0..keyspace.databases())
        .map(|db| keyspace.dbsize(db))
        .sum();
    let result = write(&keyspace, file, &mut summary);
    let closed = Keyspace::close(keyspace);
    result.map_err(|e| {
        format!(
            "{}: import stopped, keys before it were written: {e}",
            file.display()
        )
    })?;
    closed.map_err(|e| format!("closing {}: {e}", dir.display()))?;
    summary.write_time = written.elapsed();
    Ok(summary)
}

/// Reads the whole file once: checksum, every record, the databases it
/// names. Counts nothing as imported yet.
fn check(file: &Path) -> Result<Summary, Error> {
    let mut reader = FileReader::open(file)?;
    let mut summary = Summary {
        rdb_version: reader.version,
        ..Summary::default()
    };
    while let Some(record) = reader.next_record()? {
        if record.db >= MAX_DATABASES {
            return Err(Error::unsupported(
                record.offset,
                format!(
                    "a key in database {}: Engram has databases 0 to {}",
                    record.db,
                    MAX_DATABASES - 1
                ),
            ));
        }
        summary.databases_needed = summary.databases_needed.max(record.db + 1);
    }
    summary.functions_skipped = reader.functions_skipped;
    Ok(summary)
}

/// One key ready to write.
struct Pending {
    db: usize,
    key: Vec<u8>,
    stored: Stored,
    expire_at: Option<u64>,
}

fn write(keyspace: &Keyspace, file: &Path, summary: &mut Summary) -> Result<(), String> {
    let mut reader = FileReader::open(file).map_err(|e| e.to_string())?;
    let now = now_ms();
    let mut batch: Vec<Pending> = Vec::with_capacity(BATCH);
    let mut in_batch: HashSet<(usize, Vec<u8>)> = HashSet::with_capacity(BATCH);
    while let Some(record) = reader.next_record().map_err(|e| e.to_string())? {
        let Record {
            db,
            key,
            value,
            expire_at_ms,
            offset,
        } = record;
        if matches!(expire_at_ms, Some(at) if at <= now as i64) {
            summary.skipped_expired += 1;
            continue;
        }
        if value.is_empty_collection() {
            summary.skipped_empty += 1;
            continue;
        }
        if key.len() > MAX_KEY_LEN {
            summary.skipped_long_key += 1;
            continue;
        }
        let type_name = value.type_name();
        let stored = value
            .into_stored()
            .map_err(|e| Error::at(offset, format!("{e} in the value of this key")).to_string())?;
        *summary.per_db.entry(db).or_default() += 1;
        *summary.per_type.entry(type_name).or_default() += 1;
        summary.with_expiry += u64::from(expire_at_ms.is_some());
        let db = db as usize;
        // A file names each key once; should one repeat, the later write
        // must come after the earlier, so it starts a batch of its own.
        if !in_batch.insert((db, key.clone())) {
            flush(keyspace, &mut batch)?;
            in_batch.clear();
            in_batch.insert((db, key.clone()));
        }
        batch.push(Pending {
            db,
            key,
            stored,
            expire_at: expire_at_ms.map(|at| at as u64),
        });
        if batch.len() == BATCH {
            flush(keyspace, &mut batch)?;
            in_batch.clear();
        }
    }
    flush(keyspace, &mut batch)?;
    keyspace.sync().map_err(|e| e.to_string())
}

/// Writes a batch: strings straight to the engine, collections (with
/// their expiry) as one operation-log record.
fn flush(keyspace: &Keyspace, batch: &mut Vec<Pending>) -> Result<(), String> {
    if batch.is_empty() {
        return Ok(());
    }
    let mut txn = keyspace
        .lock(batch.iter().map(|p| (p.db, p.key.as_slice())), false)
        .map_err(|e| e.to_string())?;
    let mut ops = Vec::new();
    for pending in batch.drain(..) {
        match pending.stored {
            Stored::String(text) => txn
                .put_string(pending.db, &pending.key, &text, pending.expire_at)
                .map_err(|e| e.to_string())?,
            Stored::Collection(object) => {
                let key = ckey(pending.db, &pending.key).map_err(|e| e.to_string())?;
                if let Some(at_ms) = pending.expire_at {
                    ops.push(Op::Replace {
                        key: key.clone(),
                        object,
                    });
                    ops.push(Op::Expire { key, at_ms });
                } else {
                    ops.push(Op::Replace { key, object });
                }
            }
        }
    }
    txn.log(ops).map_err(|e| e.to_string())?;
    txn.commit().map_err(|e| e.to_string())?;
    Ok(())
}
