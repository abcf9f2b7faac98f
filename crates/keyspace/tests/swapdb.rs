//! SWAPDB through the keyspace's API: both stores, the books, WATCH,
//! restarts, and writers racing swaps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use engram_collections::Op;
use engram_keyspace::value::StringValue;
use engram_keyspace::{ckey, now_ms, open_stores_for_tests, Durability, Keyspace};

fn open(dir: &std::path::Path, databases: usize) -> Arc<Keyspace> {
    let (store, collections) = open_stores_for_tests(dir);
    Keyspace::open(store, collections, databases, Durability::Process).unwrap()
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

fn sadd(ks: &Keyspace, db: usize, key: &[u8], member: &[u8]) {
    let mut txn = ks.lock([(db, key)], false).unwrap();
    txn.log(vec![Op::SetAdd {
        key: ckey(db, key).unwrap(),
        members: vec![member.into()],
    }])
    .unwrap();
    txn.commit().unwrap();
}

fn members(ks: &Keyspace, db: usize, key: &[u8]) -> usize {
    ks.read_collection(db, key, engram_keyspace::CKind::Set, now_ms(), |o| {
        o.map_or(0, |o| o.len())
    })
    .unwrap()
}

fn swap(ks: &Keyspace, a: usize, b: usize) {
    let mut txn = ks.lock_all(false);
    txn.swap_databases(a, b, now_ms()).unwrap();
    txn.commit().unwrap();
}

fn scan_all(ks: &Keyspace, db: usize) -> Vec<Vec<u8>> {
    let (mut cursor, mut keys) = (0, Vec::new());
    loop {
        let (next, batch) = ks.scan(db, cursor, 100, now_ms()).unwrap();
        keys.extend(batch.into_iter().map(|(k, _)| k));
        if next == 0 {
            keys.sort();
            return keys;
        }
        cursor = next;
    }
}

#[test]
fn a_swap_exchanges_strings_collections_and_books_and_survives_restarts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ks = open(dir.path(), 16);
        set(&ks, 1, b"s", b"one", None);
        set(&ks, 1, b"t", b"ttl", Some(now_ms() + 3_600_000));
        sadd(&ks, 1, b"c", b"m");
        set(&ks, 3, b"s", b"three", None);
        swap(&ks, 1, 3);
        assert_eq!(get(&ks, 3, b"s").as_deref(), Some(&b"one"[..]));
        assert_eq!(get(&ks, 1, b"s").as_deref(), Some(&b"three"[..]));
        assert_eq!((members(&ks, 3, b"c"), members(&ks, 1, b"c")), (1, 0));
        assert_eq!((ks.dbsize(3), ks.dbsize(1)), (3, 1));
        assert_eq!((ks.expiring(3), ks.expiring(1)), (1, 0));
        assert_eq!(
            scan_all(&ks, 3),
            vec![b"c".to_vec(), b"s".to_vec(), b"t".to_vec()]
        );
        assert_eq!(scan_all(&ks, 1), vec![b"s".to_vec()]);
        assert_eq!(ks.random_key(1, now_ms()).unwrap(), Some(b"s".to_vec()));
        // Writes after the swap land in the database the number names now.
        set(&ks, 1, b"new", b"x", None);
        sadd(&ks, 3, b"c", b"n");
        Keyspace::close(ks).unwrap();
    }
    {
        let ks = open(dir.path(), 16);
        assert_eq!(get(&ks, 3, b"s").as_deref(), Some(&b"one"[..]));
        assert_eq!(get(&ks, 1, b"new").as_deref(), Some(&b"x"[..]));
        assert_eq!(members(&ks, 3, b"c"), 2);
        assert_eq!((ks.dbsize(3), ks.dbsize(1)), (3, 2));
        // FLUSHDB of a swapped number empties what the number names.
        let mut txn = ks.lock_all(false);
        assert_eq!(txn.flush(Some(1)).unwrap(), 2);
        txn.commit().unwrap();
        assert_eq!((ks.dbsize(3), ks.dbsize(1)), (3, 0));
        // Swapping back is the identity again, and a swap with itself is
        // nothing.
        swap(&ks, 3, 1);
        swap(&ks, 5, 5);
        assert_eq!(get(&ks, 1, b"s").as_deref(), Some(&b"one"[..]));
        Keyspace::close(ks).unwrap();
    }
}

/// A swap with the last database, then a restart with fewer databases:
/// database 0 is stored under prefix 15, which must still be counted and
/// read; what is stored under prefix 0 is now hidden, and kept.
#[test]
fn fewer_databases_after_a_swap_keep_every_key_reachable_or_hidden() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ks = open(dir.path(), 16);
        set(&ks, 0, b"zero", b"0", None);
        set(&ks, 15, b"last", b"15", None);
        swap(&ks, 0, 15);
        Keyspace::close(ks).unwrap();
    }
    let ks = open(dir.path(), 4);
    assert_eq!(get(&ks, 0, b"last").as_deref(), Some(&b"15"[..]));
    assert_eq!(ks.dbsize(0), 1);
    assert_eq!(ks.stats.keys_in_hidden_dbs.load(Ordering::Relaxed), 1);
    let mut txn = ks.lock_all(false);
    assert_eq!(txn.flush(None).unwrap(), 1, "FLUSHALL leaves hidden keys");
    txn.commit().unwrap();
    Keyspace::close(ks).unwrap();
    let ks = open(dir.path(), 16);
    assert_eq!(get(&ks, 15, b"zero").as_deref(), Some(&b"0"[..]));
    Keyspace::close(ks).unwrap();
}

#[test]
fn watches_fail_on_keys_that_exist_in_either_database_and_follow_their_number() {
    let dir = tempfile::tempdir().unwrap();
    let ks = open(dir.path(), 16);
    let watch = |db: usize, key: &[u8]| {
        let flag = Arc::new(AtomicBool::new(false));
        let name = ks.watch(db, key, &flag).unwrap();
        (flag, name)
    };
    set(&ks, 0, b"exists", b"v", None);
    set(&ks, 1, b"other-side", b"v", None);
    // Expired in both, or missing on one side and expired on the other:
    // nothing a client can see changes.
    let past = Some(now_ms() - 1);
    set(&ks, 0, b"stale", b"v", past);
    set(&ks, 1, b"stale", b"v", past);
    set(&ks, 1, b"stale-there", b"v", past);
    let (exists, _) = watch(0, b"exists");
    let (other_side, _) = watch(0, b"other-side");
    let (stale, _) = watch(0, b"stale");
    let (stale_there, _) = watch(0, b"stale-there");
    let (missing, missing_name) = watch(1, b"missing");
    let (elsewhere, _) = watch(2, b"exists");
    swap(&ks, 0, 1);
    assert!(exists.load(Ordering::Acquire));
    assert!(other_side.load(Ordering::Acquire));
    assert!(!stale.load(Ordering::Acquire));
    assert!(!stale_there.load(Ordering::Acquire));
    assert!(!missing.load(Ordering::Acquire));
    assert!(!elsewhere.load(Ordering::Acquire));
    // The watch on (1, "missing") now sees writes to what 1 names.
    set(&ks, 0, b"missing", b"v", None);
    assert!(
        !missing.load(Ordering::Acquire),
        "database 0 is another one"
    );
    set(&ks, 1, b"missing", b"v", None);
    assert!(missing.load(Ordering::Acquire));
    // And unwatching finds it where it moved.
    missing.store(false, Ordering::Release);
    ks.unwatch(&[missing_name], &missing);
    set(&ks, 1, b"missing", b"w", None);
    assert!(!missing.load(Ordering::Acquire));
}

/// Writers increment a counter in database 0 and in database 1 while the
/// two are swapped again and again: no read-modify-write is lost (each
/// holds its key's lock across the swap's translation), nothing deadlocks
/// (a swap takes every key group), and lock-free reads racing the swaps
/// always find a whole counter.
#[test]
fn writers_racing_swaps_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ks = open(dir.path(), 16);
    set(&ks, 0, b"n", b"0", None);
    set(&ks, 1, b"n", b"0", None);
    const EACH: u64 = 2000;
    let stop = AtomicBool::new(false);
    let swaps = std::thread::scope(|scope| {
        for db in [0usize, 1] {
            let ks = &ks;
            scope.spawn(move || {
                for _ in 0..EACH {
                    let mut txn = ks.lock([(db, &b"n"[..])], false).unwrap();
                    let old = txn.get(db, b"n", now_ms()).unwrap().unwrap();
                    let n: u64 = String::from_utf8(old.string().to_bytes())
                        .unwrap()
                        .parse()
                        .unwrap();
                    txn.put_string(db, b"n", (n + 1).to_string().as_bytes(), None)
                        .unwrap();
                    txn.commit().unwrap();
                }
            });
        }
        let swapper = scope.spawn(|| {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                swap(&ks, 0, 1);
                swaps += 1;
                // Lock-free reads see one database or the other, whole.
                let a = get(&ks, 0, b"n").unwrap();
                assert!(std::str::from_utf8(&a).unwrap().parse::<u64>().is_ok());
            }
            swaps
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap()
    });
    assert!(swaps > 0);
    let a: u64 = String::from_utf8(get(&ks, 0, b"n").unwrap())
        .unwrap()
        .parse()
        .unwrap();
    let b: u64 = String::from_utf8(get(&ks, 1, b"n").unwrap())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(a + b, 2 * EACH, "swaps: {swaps}");
}

/// Access fields and eviction follow the database map: OBJECT IDLETIME's
/// and RESTORE's fields are found under the number a key is in now, and
/// eviction samples only databases clients can select, deleting through
/// the stored key.
#[test]
fn access_fields_and_eviction_follow_swaps_and_skip_hidden_databases() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ks = open(dir.path(), 8);
        // After the swap, database 1's keys are stored under prefix 5 and
        // database 5's (hidden once reopened with 2) under prefix 1.
        set(&ks, 5, b"s", b"v", None);
        sadd(&ks, 5, b"c", b"m");
        set(&ks, 1, b"hidden", b"v", None);
        swap(&ks, 1, 5);
        assert!(ks.set_access(1, b"s", 7).unwrap());
        assert!(ks.set_access(1, b"c", 9).unwrap());
        assert!(!ks.set_access(5, b"s", 7).unwrap());
        let now = now_ms();
        assert_eq!(ks.access_of(1, b"s", now).unwrap(), Some(7));
        assert_eq!(ks.access_of(1, b"c", now).unwrap(), Some(9));
        assert_eq!(ks.access_of(5, b"s", now).unwrap(), None);
        Keyspace::close(ks).unwrap();
    }
    // Reopened with 2 databases: db 5's key is hidden and never sampled.
    let ks = open(dir.path(), 2);
    let mut evicted = 0;
    for _ in 0..100 {
        for candidate in ks.eviction_sample(false, 16, true) {
            assert_ne!(ks.client_key_name(&candidate.ekey), b"db5:hidden".to_vec());
            if ks.evict(&candidate.ekey).unwrap() {
                evicted += 1;
            }
        }
        if ks.dbsize(1) == 0 {
            break;
        }
    }
    assert_eq!(evicted, 2, "both keys of db 1, through their stored keys");
    assert_eq!(ks.dbsize(1), 0);
    assert_eq!(get(&ks, 1, b"s"), None);
    assert_eq!(members(&ks, 1, b"c"), 0);
}

#[test]
fn whole_keyspace_writes_are_refused_without_the_keyspace_excluded() {
    // FLUSHDB and SWAPDB own every key group only under the keyspace's
    // exclusion (`lock_all`); a transaction that locked one key's group
    // gets an error and changes nothing.
    let dir = tempfile::tempdir().unwrap();
    let ks = open(dir.path(), 4);
    set(&ks, 0, b"k", b"v", None);
    sadd(&ks, 1, b"s", b"m");
    let mut txn = ks.lock([(0, &b"k"[..])], false).unwrap();
    for refused in [
        txn.flush(None).map(drop),
        txn.swap_databases(0, 1, now_ms()),
    ] {
        let error = refused.expect_err("a whole-keyspace write under one key's lock");
        assert!(
            error.to_string().contains("without the keyspace excluded"),
            "{error}"
        );
    }
    drop(txn);
    assert_eq!(get(&ks, 0, b"k").as_deref(), Some(&b"v"[..]));
    assert_eq!(members(&ks, 1, b"s"), 1);
    // Under the exclusion both go through.
    swap(&ks, 0, 1);
    assert_eq!(get(&ks, 1, b"k").as_deref(), Some(&b"v"[..]));
    let mut txn = ks.lock_all(false);
    assert_eq!(txn.flush(None).unwrap(), 2);
    txn.commit().unwrap();
    assert_eq!(get(&ks, 1, b"k"), None);
    assert_eq!(members(&ks, 0, b"s"), 0);
}

/// `scan_all` lists every key of every database once, strings and
/// collections, under the database clients name it by after a SWAPDB,
/// expired keys only when asked at time 0, and no reserved key.
#[test]
fn scan_all_walks_every_database_once_by_its_client_number() {
    let dir = tempfile::tempdir().unwrap();
    let ks = open(dir.path(), 4);
    for i in 0..300 {
        set(&ks, i % 3, format!("k{i}").as_bytes(), b"v", None);
    }
    sadd(&ks, 2, b"set", b"m");
    set(&ks, 1, b"gone", b"v", Some(1));
    let mut txn = ks.lock_all(true);
    txn.put_applied_index(5).unwrap();
    txn.commit().unwrap();
    let mut txn = ks.lock_all(false);
    txn.swap_databases(0, 3, now_ms()).unwrap();
    txn.commit().unwrap();
    let walk = |now: u64| {
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = 0;
        loop {
            let (next, found) = ks.scan_all(cursor, 64, now).unwrap();
            for (db, key, _) in found {
                assert!(seen.insert((db, key)), "listed twice");
            }
            if next == 0 {
                return seen;
            }
            cursor = next;
        }
    };
    let live = walk(now_ms());
    assert_eq!(live.len(), 301);
    // Database 0's keys are now database 3's.
    assert!(live.contains(&(3, b"k0".to_vec())) && !live.contains(&(0, b"k0".to_vec())));
    assert!(live.contains(&(2, b"set".to_vec())));
    let everything = walk(0);
    assert_eq!(everything.len(), 302);
    assert!(everything.contains(&(1, b"gone".to_vec())));
}
