//! A replicated node's whole state as one byte string: what a leader
//! sends a follower that its Raft log can no longer catch up (one that
//! lagged past a compaction, or rejoined with an empty directory).
//!
//! A logical snapshot, as Redis's full resynchronization sends an RDB
//! file: every key of every database as its DUMP payload (Redis's own
//! serialization, CRC-64 sealed, the same bytes DUMP, MIGRATE and
//! `engram import` use) with its expiry, and the FUNCTION libraries. It is
//! built on the apply thread between entries, so it is the state at
//! exactly the last applied index, and loaded there too. A physical copy
//! of the stores (the engine's log and the collections' images) would
//! carry each store's garbage and layout version to the follower; this
//! carries only live data.
//!
//! Layout: `ENGSTATE` magic, the functions payload (`[len u32][bytes]`,
//! empty when there are none), then one record per key (`[1][db u8][key
//! len u32][key][expire-at ms u64, 0 for none][payload len u32][payload]`),
//! then `[0][key count u64]`. The Raft layer wraps it with its own
//! checksum (`DIR/raft/snapshot`).

use bytes::Buf;

use crate::commands::dump;
use crate::keyspace::Keyspace;
use crate::rdb::payload;
use crate::scripting::library::RestorePolicy;
use crate::shared::Shared;

const MAGIC: &[u8; 8] = b"ENGSTATE";
const KEY: u8 = 1;
const END: u8 = 0;
/// Keys scanned per step (a step walks a whole index shard).
const SCAN_STEP: usize = 8192;
/// Keys written per transaction while loading.
const LOAD_CHUNK: usize = 512;

/// The state now: every key of every database, and the libraries.
pub fn build(shared: &Shared, keyspace: &Keyspace) -> Result<Vec<u8>, String> {
    // About what the keys take in DRAM and on the log: fewer regrowths of
    // a buffer that can reach gigabytes.
    let mut out = Vec::with_capacity(estimate(keyspace));
    out.extend_from_slice(MAGIC);
    let functions = shared.scripting.functions.lock().dump();
    put_bytes(&mut out, &functions);
    let mut keys = 0u64;
    let mut cursor = 0;
    loop {
        // At time 0 nothing counts as expired: a key the entries have not
        // deleted is part of the state, with its expiry.
        let (next, found) = keyspace
            .scan_all(cursor, SCAN_STEP, 0)
            .map_err(|e| e.to_string())?;
        for (db, key, meta) in found {
            let body = if meta.is_collection() {
                let kind = dump::collection_kind(meta.kind());
                keyspace
                    .read_collection(db, &key, kind, 0, |object| object.map(dump::object_body))
                    .map_err(|e| e.to_string())?
            } else {
                keyspace
                    .read(db, &key, 0, dump::string_body)
                    .map_err(|e| e.to_string())?
            };
            // Only the apply thread writes, and it is here: the key
            // cannot have gone since the scan.
            let Some(mut body) = body else {
                return Err(format!("key {:?} vanished while a snapshot was built", key));
            };
            payload::seal(&mut body);
            out.push(KEY);
            out.push(db as u8);
            put_bytes(&mut out, &key);
            out.extend_from_slice(&meta.expire_at().unwrap_or(0).to_le_bytes());
            put_bytes(&mut out, &body);
            keys += 1;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    out.push(END);
    out.extend_from_slice(&keys.to_le_bytes());
    Ok(out)
}

/// A first size for the snapshot's buffer: 64 bytes a key, at least 1 MiB.
fn estimate(keyspace: &Keyspace) -> usize {
    let keys: u64 = (0..keyspace.databases())
        .map(|db| keyspace.dbsize(db))
        .sum();
    (keys as usize).saturating_mul(64).max(1 << 20)
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn take_bytes<'a>(r: &mut &'a [u8]) -> Result<&'a [u8], String> {
    let len = r.try_get_u32_le().map_err(|_| truncated())? as usize;
    if r.len() < len {
        return Err(truncated());
    }
    let (head, rest) = r.split_at(len);
    *r = rest;
    Ok(head)
}

fn truncated() -> String {
    "the snapshot is truncated".into()
}

/// One key of a snapshot.
struct Record<'a> {
    db: usize,
    key: &'a [u8],
    expire_at: Option<u64>,
    payload: &'a [u8],
}

/// The next key of `r`, None at the end mark.
fn next_record<'a>(r: &mut &'a [u8]) -> Result<Option<Record<'a>>, String> {
    if r.try_get_u8().map_err(|_| truncated())? == END {
        return Ok(None);
    }
    let db = r.try_get_u8().map_err(|_| truncated())? as usize;
    let key = take_bytes(r)?;
    let expire_at = r.try_get_u64_le().map_err(|_| truncated())?;
    let payload = take_bytes(r)?;
    Ok(Some(Record {
        db,
        key,
        expire_at: (expire_at != 0).then_some(expire_at),
        payload,
    }))
}

/// Replaces the keyspace's contents (every database) and the libraries
/// with the snapshot's, then records `index` as applied and makes it all
/// durable. The whole input is checked before anything is deleted (its
/// framing, databases and every payload's CRC-64; each value is decoded
/// once, as it is written); a crash during the load leaves the snapshot
/// file for the restart, which loads it again from the start.
pub fn load(shared: &Shared, keyspace: &Keyspace, index: u64, data: &[u8]) -> Result<(), String> {
    let (functions, mut records) = check(data, keyspace.databases())?;
    let mut txn = keyspace.lock_all(false);
    txn.flush(None).map_err(|e| e.to_string())?;
    txn.commit().map_err(|e| e.to_string())?;
    let mut done = false;
    while !done {
        let mut txn = keyspace.lock_all(false);
        for _ in 0..LOAD_CHUNK {
            let Some(record) = next_record(&mut records)? else {
                done = true;
                break;
            };
            let value = payload::open(record.payload)
                .map_err(|e| format!("key {:?}: {e:?}", record.key))?;
            let stored = value.into_stored()?;
            dump::put_stored(&mut txn, record.db, record.key, stored, record.expire_at)
                .map_err(|e| e.0)?;
        }
        txn.commit().map_err(|e| e.to_string())?;
    }
    let mut txn = keyspace.lock_all(true);
    {
        let mut engine = shared.scripting.functions.lock();
        engine.restore(functions, RestorePolicy::Flush)?;
        shared.scripting.note_counts(&engine);
        txn.put_functions_record(&engine.dump())
            .map_err(|e| e.to_string())?;
    }
    txn.put_applied_index(index).map_err(|e| e.to_string())?;
    txn.commit().map_err(|e| e.to_string())?;
    keyspace.sync().map_err(|e| e.to_string())
}

/// Walks the whole snapshot once (framing, every payload's CRC-64, every
/// database in range, the count at the end): the functions payload and
/// the records.
fn check(data: &[u8], databases: usize) -> Result<(&[u8], &[u8]), String> {
    let mut r = data;
    if r.len() < MAGIC.len() || &r[..MAGIC.len()] != MAGIC {
        return Err("not an Engram state snapshot".into());
    }
    r.advance(MAGIC.len());
    let functions = take_bytes(&mut r)?;
    let records = r;
    let mut keys = 0u64;
    while let Some(record) = next_record(&mut r)? {
        if record.db >= databases {
            return Err(format!(
                "the snapshot has keys in database {}; this node has {databases} databases \
                 (start it with --databases as the leader's)",
                record.db
            ));
        }
        payload::check(record.payload).map_err(|e| format!("key {:?}: {e:?}", record.key))?;
        keys += 1;
    }
    let count = r.try_get_u64_le().map_err(|_| truncated())?;
    if count != keys || !r.is_empty() {
        return Err(format!(
            "the snapshot's end says {count} keys, it holds {keys}"
        ));
    }
    Ok((functions, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot of `keys` (db, key, payload) as `build` lays it out.
    fn snapshot(keys: &[(u8, &[u8], Vec<u8>)], count: u64) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        put_bytes(&mut out, b"");
        for (db, key, payload) in keys {
            out.push(KEY);
            out.push(*db);
            put_bytes(&mut out, key);
            out.extend_from_slice(&0u64.to_le_bytes());
            put_bytes(&mut out, payload);
        }
        out.push(END);
        out.extend_from_slice(&count.to_le_bytes());
        out
    }

    fn string_payload(text: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        crate::rdb::writer::put_string_value(&mut body, text);
        payload::seal(&mut body);
        body
    }

    #[test]
    fn a_snapshot_is_checked_whole_and_its_records_read_back() {
        let good = snapshot(
            &[
                (0, b"a", string_payload(b"1")),
                (3, b"b", string_payload(b"2")),
            ],
            2,
        );
        let (functions, mut records) = check(&good, 16).unwrap();
        assert!(functions.is_empty());
        let first = next_record(&mut records).unwrap().unwrap();
        assert_eq!((first.db, first.key, first.expire_at), (0, &b"a"[..], None));
        assert_eq!(next_record(&mut records).unwrap().unwrap().db, 3);
        assert!(next_record(&mut records).unwrap().is_none());
    }

    #[test]
    fn bad_snapshots_are_refused_before_anything_is_written() {
        let mut damaged = string_payload(b"x");
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        let good = snapshot(&[(0, b"a", string_payload(b"1"))], 1);
        for (data, databases, want) in [
            (b"NOTSNAPSHOT".to_vec(), 16, "not an Engram state snapshot"),
            (good[..good.len() - 3].to_vec(), 16, "truncated"),
            (
                snapshot(&[(0, b"a", string_payload(b"1"))], 2),
                16,
                "end says 2 keys",
            ),
            (
                snapshot(&[(20, b"a", string_payload(b"1"))], 1),
                16,
                "database 20",
            ),
            (snapshot(&[(0, b"a", damaged)], 1), 16, "VersionOrChecksum"),
            ([good.clone(), vec![0]].concat(), 16, "end says"),
        ] {
            let error = check(&data, databases).expect_err(want);
            assert!(error.contains(want), "{want}: {error}");
        }
    }
}
