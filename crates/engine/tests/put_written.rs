//! `Store::put_written`: a value written piece by piece is
//! stored as their concatenation, whichever path it takes (a log block
//! when it fits, an extent written as the pieces come when not), survives
//! reopening (recovery checks the record's checksum over the whole value),
//! and may take a piece from the store's own values; a writer that writes
//! more or less than it declared is stopped.

mod common;

use common::{largest_log_value, pattern, small_options};
use engram_engine::{Error, Store};

/// `put_written` of `parts` one after the other.
fn put_parts(store: &Store, key: &[u8], parts: &[&[u8]]) -> engram_engine::Result<bool> {
    let len = parts.iter().map(|part| part.len()).sum();
    store.put_written(key, len, |writer| {
        for part in parts {
            writer.write(part);
        }
    })
}

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
            assert!(put_parts(&store, key, &parts).unwrap(), "new key");
            assert_eq!(store.get(key).unwrap().unwrap(), parts.concat());
        }
        // A part borrowed from the store's own value, replacing it.
        let own = store.get_ref(b"large").unwrap().unwrap();
        let mut expected = b"head".to_vec();
        expected.extend_from_slice(&own[7..300_007]);
        assert!(!put_parts(&store, b"large", &[b"head", &own[7..300_007]]).unwrap());
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
    match put_parts(&store, b"k", &[&half, &half]) {
        Err(Error::ValueTooLarge { len, .. }) => assert_eq!(len, 2 * half.len()),
        other => panic!("{other:?}"),
    }
    assert!(store.get(b"k").unwrap().is_none());
}

#[test]
fn many_small_pieces_and_large_ones_make_one_value() {
    let dir = tempfile::tempdir().unwrap();
    // Pieces of every size around the writer's 64 KiB staging: small ones
    // gathered across several flushes, one larger than the staging.
    let pieces: Vec<Vec<u8>> = (0..3000u64)
        .map(|i| pattern(i, (i as usize * 37) % 301))
        .chain([pattern(9999, 200_000), b"end".to_vec()])
        .collect();
    let value = pieces.concat();
    {
        let store = Store::open(dir.path(), small_options()).unwrap();
        store
            .put_written(b"k", value.len(), |writer| {
                for piece in &pieces {
                    writer.write(piece);
                }
                assert_eq!(writer.left(), 0);
            })
            .unwrap();
        assert_eq!(store.get(b"k").unwrap().unwrap(), value);
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), small_options()).unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap(), value);
}

#[test]
#[should_panic(expected = "past its declared length")]
fn writing_past_the_declared_length_panics() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    let _ = store.put_written(b"k", 200_000, |writer| writer.write(&vec![1; 200_001]));
}

#[test]
#[should_panic(expected = "short of its declared")]
fn writing_short_of_the_declared_length_panics() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    let _ = store.put_written(b"k", 200_000, |writer| writer.write(&[1; 10]));
}
