//! The keyspace through the facade, as an embedder uses it: strings and a
//! hash written in one atomic batch under `always`, acknowledged only after
//! the group commit's sync, and all of it there after a reopen.

use engram::collections::Op;
use engram::keyspace::{ckey, now_ms, CKind, Object};
use engram::{Durability, Keyspace, KeyspaceOptions};
use std::sync::atomic::Ordering;

fn options(durability: Durability) -> KeyspaceOptions {
    KeyspaceOptions {
        durability,
        ..KeyspaceOptions::default()
    }
}

fn string_of(ks: &Keyspace, key: &[u8]) -> Option<Vec<u8>> {
    ks.read(0, key, now_ms(), |meta, payload| {
        engram::keyspace::value::StringValue::from_payload(meta, payload).to_bytes()
    })
    .unwrap()
}

#[test]
fn an_atomic_batch_of_strings_and_a_hash_is_durable_when_commit_durable_returns() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ks = Keyspace::open_dir(dir.path(), &options(Durability::Always))
            .unwrap()
            .keyspace;
        let syncs_before = ks.commit().stats.syncs.load(Ordering::Relaxed);
        let mut txn = ks
            .lock([(0, &b"a"[..]), (0, &b"b"[..]), (0, &b"h"[..])], true)
            .unwrap();
        txn.put_string(0, b"a", b"1", None).unwrap();
        txn.put_string(0, b"b", b"2", None).unwrap();
        txn.log(vec![Op::HashSet {
            key: ckey(0, b"h").unwrap(),
            pairs: vec![(b"f".as_slice().into(), b"v".as_slice().into())],
        }])
        .unwrap();
        assert!(txn.commit_durable().unwrap(), "the batch wrote");
        assert!(
            ks.commit().stats.syncs.load(Ordering::Relaxed) > syncs_before,
            "under always, commit_durable returned only after a sync"
        );
        // One key, no intent: only commit_durable's own ticket syncs.
        let syncs_before = ks.commit().stats.syncs.load(Ordering::Relaxed);
        let mut txn = ks.lock([(0, &b"c"[..])], false).unwrap();
        txn.put_string(0, b"c", b"3", None).unwrap();
        assert!(txn.commit_durable().unwrap());
        assert!(ks.commit().stats.syncs.load(Ordering::Relaxed) > syncs_before);
        // A read-only transaction takes no ticket and waits for nothing.
        let txn = ks.lock([(0, &b"a"[..])], false).unwrap();
        assert!(!txn.commit_durable().unwrap());
        Keyspace::close(ks).unwrap();
    }
    let ks = Keyspace::open_dir(dir.path(), &options(Durability::Process))
        .unwrap()
        .keyspace;
    assert_eq!(string_of(&ks, b"a").as_deref(), Some(&b"1"[..]));
    assert_eq!(string_of(&ks, b"b").as_deref(), Some(&b"2"[..]));
    let field = ks
        .read_collection(0, b"h", CKind::Hash, now_ms(), |object| match object {
            Some(Object::Hash(hash)) => hash.get(b"f").map(|v| v.to_vec()),
            _ => None,
        })
        .unwrap();
    assert_eq!(field.as_deref(), Some(&b"v"[..]));
    assert_eq!(string_of(&ks, b"c").as_deref(), Some(&b"3"[..]));
    assert_eq!(ks.dbsize(0), 4);
    assert_eq!(ks.commit().durability(), Durability::Process);
    Keyspace::close(ks).unwrap();
}

/// Bad options are refused before anything is created.
#[test]
fn a_keyspace_with_no_databases_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let error = match Keyspace::open_dir(
        &dir.path().join("data"),
        &KeyspaceOptions {
            databases: 0,
            ..KeyspaceOptions::default()
        },
    ) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("0 databases accepted"),
    };
    assert!(
        error.contains("databases must be 1 to 255, got 0"),
        "{error}"
    );
    assert!(!dir.path().join("data").exists());
}
