//! `Txn::patch_in_place`: a few bytes of a large string changed where they
//! lie. The persistent bytes each change stores are counted by an observer
//! on the engine's region (it sees every store the pmem layer makes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use engram_engine::{Observer, Options, PersistObserver};
use engram_keyspace::value::StringValue;
use engram_keyspace::{now_ms, open_stores_for_tests_with, Durability, Keyspace};

#[derive(Default)]
struct StoredBytes(AtomicU64);

impl PersistObserver for StoredBytes {
    fn on_store(&self, _offset: u64, bytes: &[u8]) {
        self.0.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }
    fn on_flush(&self, _offset: u64, _len: u64) {}
    fn on_fence(&self) {}
}

fn open(dir: &std::path::Path, counter: &Arc<StoredBytes>) -> Arc<Keyspace> {
    let options = Options {
        observer: Some(Observer(counter.clone())),
        ..Options::default()
    };
    let (store, collections) = open_stores_for_tests_with(dir, options);
    Keyspace::open(store, collections, 16, Durability::Process).unwrap()
}

fn flip(ks: &Keyspace, key: &[u8], at: usize, len: usize) -> Option<Vec<u8>> {
    let mut txn = ks.lock([(0, key)], false).unwrap();
    let old = txn
        .patch_in_place(0, key, now_ms(), at, len, |current| {
            let flipped = current.iter().map(|b| !b).collect();
            (current.to_vec(), Some(flipped))
        })
        .unwrap();
    txn.commit().unwrap();
    old
}

fn read(ks: &Keyspace, key: &[u8]) -> Vec<u8> {
    ks.read(0, key, now_ms(), |meta, payload| {
        StringValue::from_payload(meta, payload).to_bytes()
    })
    .unwrap()
    .unwrap()
}

const BIG: usize = 100 << 20;

#[test]
fn a_patch_of_a_100_mb_string_stores_a_word_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let counter = Arc::new(StoredBytes::default());
    {
        let ks = open(dir.path(), &counter);
        let mut txn = ks.lock([(0, &b"big"[..])], false).unwrap();
        txn.put_string(0, b"big", &vec![0u8; BIG], None).unwrap();
        txn.commit().unwrap();

        let before = counter.0.load(Ordering::Relaxed);
        assert_eq!(flip(&ks, b"big", 12_345_677, 1), Some(vec![0]));
        // The first patch also sets the record's IN_PLACE flag (a word).
        let first = counter.0.load(Ordering::Relaxed) - before;
        assert!(first <= 16, "the first patch stored {first} bytes");
        for at in [0, BIG / 2, BIG - 1] {
            let before = counter.0.load(Ordering::Relaxed);
            assert_eq!(flip(&ks, b"big", at, 1), Some(vec![0]));
            let stored = counter.0.load(Ordering::Relaxed) - before;
            assert_eq!(stored, 8, "a patch at {at} stored {stored} bytes");
        }
        // Two bytes of one word: in place; across two words: refused.
        assert_eq!(flip(&ks, b"big", 16, 2), Some(vec![0, 0]));
        assert_eq!(flip(&ks, b"big", 23, 2), None);
        Keyspace::close(ks).unwrap();
    }
    let ks = open(dir.path(), &Arc::new(StoredBytes::default()));
    let value = read(&ks, b"big");
    assert_eq!(value.len(), BIG);
    let set: Vec<usize> = value
        .iter()
        .enumerate()
        .filter(|(_, &b)| b != 0)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(set, vec![0, 16, 17, 12_345_677, BIG / 2, BIG - 1]);
    assert!(value[16] == 0xFF && value[BIG - 1] == 0xFF);
    Keyspace::close(ks).unwrap();
}

#[test]
fn where_a_patch_cannot_be_made_in_place_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let ks = open(dir.path(), &Arc::new(StoredBytes::default()));
    let mut txn = ks
        .lock([(0, &b"n"[..]), (0, &b"short"[..])], false)
        .unwrap();
    txn.put_string(0, b"n", b"12345678901", None).unwrap();
    txn.put_string(0, b"short", b"abc", None).unwrap();
    txn.commit().unwrap();
    // An integer-encoded value, a value too short for a whole word, a
    // missing key, past the end: the general path's business.
    assert_eq!(flip(&ks, b"n", 0, 1), None);
    assert_eq!(flip(&ks, b"short", 0, 1), None);
    assert_eq!(flip(&ks, b"missing", 0, 1), None);
    assert_eq!(flip(&ks, b"short", 40, 1), None);
    assert_eq!(read(&ks, b"n"), b"12345678901");
    assert_eq!(read(&ks, b"short"), b"abc");
    // Inside an atomic transaction (MULTI): refused too.
    let mut txn = ks.lock([(0, &b"short"[..])], true).unwrap();
    let refused = txn
        .patch_in_place(0, b"short", now_ms(), 0, 1, |_| ((), Some(vec![0])))
        .unwrap();
    assert!(refused.is_none());
    txn.commit().unwrap();
}
