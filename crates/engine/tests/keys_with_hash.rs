//! `Store::keys_with_hash`: a key reached by its index hash alone, as the
//! keyspace's expiry index is filled after a restart.

mod common;

use common::small_options;
use engram_engine::Store;

/// `keys_with_hash`: the keys indexed under a hash (the XXH3 of the key),
/// as they are now: none for a hash no key has, none once the key is
/// deleted, the key again once it is written again.
#[test]
fn keys_are_found_by_their_index_hash() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    for i in 0..100u32 {
        store.put(format!("key-{i}").as_bytes(), b"v").unwrap();
    }
    let hash = |key: &[u8]| xxhash_rust::xxh3::xxh3_64(key);
    assert_eq!(
        store.keys_with_hash(hash(b"key-7")),
        vec![b"key-7".to_vec()]
    );
    assert!(store.keys_with_hash(hash(b"absent")).is_empty());
    store.delete(b"key-7").unwrap();
    assert!(store.keys_with_hash(hash(b"key-7")).is_empty());
    store.put(b"key-7", b"again").unwrap();
    store.close().unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    assert_eq!(
        store.keys_with_hash(hash(b"key-7")),
        vec![b"key-7".to_vec()]
    );
}
