//! `Store::put_parts`: a value given in parts is stored as their
//! concatenation, whichever path it takes (a log block when it fits, an
//! extent written part by part when not), survives reopening (recovery
//! checks the record's checksum over the whole value), and may take a part
//! from the store's own values.

mod common;

use common::{largest_log_value, pattern, small_options};
use engram_engine::{Error, Store};

#[test]
fn parts_are_stored_as_their_concatenation() {
    let dir = tempfile::tempdir().unwrap();
    let big_middle = pattern(1, 300_000);
    let cases: Vec<(&[u8], Vec<Vec<u8>>)> = vec![
        // Fits a log block: joined and put as usual.
        (b"small", vec![b"ab".to_vec(), vec![], b"cde".to_vec()]),
        // An extent, three parts, none aligned.
        (
            b"large",
            vec![pattern(2, 7), big_middle.clone(), pattern(3, 1001)],
        ),
        // Exactly one byte past what a log block holds.
        (
            b"edge",
            vec![pattern(4, largest_log_value(4)), b"x".to_vec()],
        ),
    ];
    {
        let store = Store::open(dir.path(), small_options()).unwrap();
        for (key, parts) in &cases {
            let parts: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
            assert!(store.put_parts(key, &parts).unwrap(), "new key");
            assert_eq!(store.get(key).unwrap().unwrap(), parts.concat());
        }
        // A part borrowed from the store's own value, replacing it.
        let own = store.get_ref(b"large").unwrap().unwrap();
        let mut expected = b"head".to_vec();
        expected.extend_from_slice(&own[7..300_007]);
        assert!(!store
            .put_parts(b"large", &[b"head", &own[7..300_007]])
            .unwrap());
        drop(own);
        assert_eq!(store.get(b"large").unwrap().unwrap(), expected);
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), small_options()).unwrap();
    assert_eq!(store.get(b"small").unwrap().unwrap(), b"abcde".to_vec());
    let mut large = b"head".to_vec();
    large.extend_from_slice(&big_middle);
    assert_eq!(store.get(b"large").unwrap().unwrap(), large);
    assert_eq!(
        store.get(b"edge").unwrap().unwrap().len(),
        largest_log_value(4) + 1
    );
}

#[test]
fn parts_too_large_together_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    let half = vec![0u8; (512 << 20) / 2 + 1];
    match store.put_parts(b"k", &[&half, &half]) {
        Err(Error::ValueTooLarge { len, .. }) => assert_eq!(len, 2 * half.len()),
        other => panic!("{other:?}"),
    }
    assert!(store.get(b"k").unwrap().is_none());
}
