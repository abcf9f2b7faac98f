//! Malformed input: data files that are empty, foreign, damaged, too new or
//! cut short; a directory already in use; keys, values and options out of
//! bounds.
//!
//! Opening a bad file must return the error that names the problem (with
//! the file's path in its message), must not panic, and must not change a
//! byte of the file; putting the good bytes back must give a store that
//! opens with all its data.

mod common;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Duration;

use common::{data_file, pattern, small_options};
use engram_engine::{
    CompactionOptions, Error, Options, Store, SyncPolicy, MAX_KEY_BYTES, MAX_VALUE_BYTES,
};

const BLOCK_BYTES: u64 = 64 << 10;
const SLOT_A: usize = 64;
const SLOT_B: usize = 128;

/// Creates a store with enough data to span many blocks (and an extent),
/// closes it, and returns its contents.
fn make_store(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let store = Store::open(dir, small_options()).unwrap();
    let mut contents = BTreeMap::new();
    for i in 0..400u64 {
        let key = format!("key-{i}").into_bytes();
        let value = pattern(i, 100 + (i as usize * 37) % 3000);
        store.put(&key, &value).unwrap();
        contents.insert(key, value);
    }
    let big = pattern(99, 200 << 10);
    store.put(b"big", &big).unwrap();
    contents.insert(b"big".to_vec(), big);
    store.close().unwrap();
    contents
}

fn assert_contents(store: &Store, contents: &BTreeMap<Vec<u8>, Vec<u8>>) {
    assert_eq!(store.len(), contents.len() as u64);
    for (key, value) in contents {
        assert_eq!(
            store.get(key).unwrap().as_ref(),
            Some(value),
            "key {:?}",
            String::from_utf8_lossy(key)
        );
    }
}

/// Opens `dir`, which must fail; checks that it did not panic, that the
/// error names the data file, and that the file is unchanged.
fn open_must_fail(dir: &Path) -> Error {
    let path = data_file(dir);
    let before = std::fs::read(&path).unwrap();
    let result = catch_unwind(AssertUnwindSafe(|| Store::open(dir, small_options())));
    let error = match result {
        Err(_) => panic!("opening a bad file panicked"),
        Ok(Ok(_)) => panic!("a bad file opened as a store"),
        Ok(Err(error)) => error,
    };
    let message = error.to_string();
    assert!(
        message.contains(&path.display().to_string()),
        "the message does not name {}: {message}",
        path.display()
    );
    let after = std::fs::read(&path).unwrap();
    assert_eq!(
        after.len(),
        before.len(),
        "the failed open resized the file"
    );
    assert!(after == before, "the failed open changed the file");
    assert!(
        !dir.join("values.pmem.tmp").exists(),
        "the failed open left a temporary file"
    );
    error
}

fn write_file(dir: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(data_file(dir), bytes).unwrap();
}

/// Changes the store's file with `damage`, checks the open fails with
/// `expected`, then restores the file and checks everything is there.
fn damage_and_restore(damage: impl FnOnce(&mut Vec<u8>), expected: impl FnOnce(&Error) -> bool) {
    let dir = tempfile::tempdir().unwrap();
    let contents = make_store(dir.path());
    let path = data_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    let mut bad = good.clone();
    damage(&mut bad);
    assert!(bad != good, "the damage changed nothing");
    std::fs::write(&path, &bad).unwrap();
    let error = open_must_fail(dir.path());
    assert!(expected(&error), "unexpected error: {error:?}");
    // Twice: the failed attempt released the lock and left nothing behind.
    let again = open_must_fail(dir.path());
    assert_eq!(again.to_string(), error.to_string());
    std::fs::write(&path, &good).unwrap();
    let store = Store::open(dir.path(), small_options()).expect("the restored file opens");
    assert_contents(&store, &contents);
}

fn header_crc(bytes: &[u8]) -> [u8; 4] {
    crc32c::crc32c(&bytes[0..40]).to_le_bytes()
}

fn slot_seq(bytes: &[u8], slot: usize) -> u64 {
    u64::from_le_bytes(bytes[slot..slot + 8].try_into().unwrap())
}

#[test]
fn empty_file_is_not_an_engram_file() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), b"");
    let error = open_must_fail(dir.path());
    assert!(matches!(error, Error::NotAnEngramFile { .. }), "{error:?}");
}

#[test]
fn short_garbage_is_not_an_engram_file() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), b"hello");
    let error = open_must_fail(dir.path());
    assert!(matches!(error, Error::NotAnEngramFile { .. }), "{error:?}");
}

#[test]
fn first_seven_bytes_of_the_magic_are_not_an_engram_file() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), &engram_engine::superblock::MAGIC[..7]);
    let error = open_must_fail(dir.path());
    assert!(matches!(error, Error::NotAnEngramFile { .. }), "{error:?}");
}

#[test]
fn text_file_is_not_an_engram_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = "# not a store\nmaxmemory 100mb\n".repeat(4000);
    write_file(dir.path(), text.as_bytes());
    let error = open_must_fail(dir.path());
    assert!(matches!(error, Error::NotAnEngramFile { .. }), "{error:?}");
}

#[test]
fn random_megabyte_is_not_an_engram_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = pattern(0x5EED, 1 << 20);
    bytes[0] = 0x89; // even with the magic's first byte
    write_file(dir.path(), &bytes);
    let error = open_must_fail(dir.path());
    assert!(matches!(error, Error::NotAnEngramFile { .. }), "{error:?}");
}

#[test]
fn wrong_magic_is_not_an_engram_file() {
    damage_and_restore(
        |bytes| bytes[1] = b'F',
        |e| matches!(e, Error::NotAnEngramFile { .. }),
    );
}

/// A well-formed file from a future version (checksum and all).
#[test]
fn future_version_is_unsupported() {
    damage_and_restore(
        |bytes| {
            bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
            let crc = header_crc(bytes);
            bytes[40..44].copy_from_slice(&crc);
        },
        |e| {
            matches!(
                e,
                Error::UnsupportedVersion {
                    found: 3,
                    supported: 2,
                    ..
                }
            )
        },
    );
}

#[test]
fn flipped_bit_in_the_store_id_fails_the_header_checksum() {
    damage_and_restore(
        |bytes| bytes[35] ^= 0x10,
        |e| matches!(e, Error::CorruptSuperblock { .. }),
    );
}

#[test]
fn flipped_bit_in_the_block_size_fails_the_header_checksum() {
    damage_and_restore(
        |bytes| bytes[18] ^= 0x02,
        |e| matches!(e, Error::CorruptSuperblock { .. }),
    );
}

#[test]
fn damaged_header_checksum_is_corrupt() {
    damage_and_restore(
        |bytes| bytes[41] ^= 0x80,
        |e| matches!(e, Error::CorruptSuperblock { .. }),
    );
}

/// A block size that is not a valid one, under a matching checksum.
#[test]
fn impossible_block_size_is_corrupt() {
    damage_and_restore(
        |bytes| {
            bytes[16..24].copy_from_slice(&1000u64.to_le_bytes());
            let crc = header_crc(bytes);
            bytes[40..44].copy_from_slice(&crc);
        },
        |e| matches!(e, Error::CorruptSuperblock { .. }),
    );
}

#[test]
fn both_size_slots_damaged_is_corrupt() {
    damage_and_restore(
        |bytes| {
            bytes[SLOT_A + 9] ^= 0x01;
            bytes[SLOT_B + 9] ^= 0x01;
        },
        |e| matches!(e, Error::CorruptSuperblock { .. }),
    );
}

/// One damaged size slot is what a torn slot update leaves: the other slot
/// still describes the file, and the store opens with everything in it.
#[test]
fn one_damaged_size_slot_is_tolerated() {
    for newer in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let contents = make_store(dir.path());
        let path = data_file(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        let (a, b) = (slot_seq(&bytes, SLOT_A), slot_seq(&bytes, SLOT_B));
        assert!(a > 0 && b > 0, "the store grew, so both slots were written");
        let target = if (a > b) == newer { SLOT_A } else { SLOT_B };
        bytes[target + 17] ^= 0x04; // inside the slot's checksum
        std::fs::write(&path, &bytes).unwrap();
        let store = Store::open(dir.path(), small_options()).unwrap_or_else(|e| {
            panic!(
                "damaging the {} slot: {e}",
                if newer { "newer" } else { "older" }
            )
        });
        assert_contents(&store, &contents);
        // And it keeps working: growth writes the slots again.
        for i in 0..300u64 {
            store.put(&i.to_le_bytes(), &pattern(i, 2000)).unwrap();
        }
        store.crash();
        let store = Store::open(dir.path(), small_options()).unwrap();
        assert_eq!(store.len(), contents.len() as u64 + 300);
    }
}

#[test]
fn file_truncated_by_a_block_is_truncated() {
    let new_len = std::cell::Cell::new(0);
    damage_and_restore(
        |bytes| {
            new_len.set(bytes.len() as u64 - BLOCK_BYTES);
            bytes.truncate(new_len.get() as usize);
        },
        |e| match e {
            Error::Truncated {
                expected_bytes,
                actual_bytes,
                ..
            } => *actual_bytes == new_len.get() && *expected_bytes > new_len.get(),
            _ => false,
        },
    );
}

#[test]
fn file_cut_mid_block_is_truncated() {
    damage_and_restore(
        |bytes| bytes.truncate(bytes.len() - 100),
        |e| matches!(e, Error::Truncated { .. }),
    );
}

/// Cut inside the superblock's size slots, and inside its header.
#[test]
fn file_truncated_mid_header_is_truncated() {
    for len in [100, 30, 8] {
        damage_and_restore(
            |bytes| bytes.truncate(len),
            |e| matches!(e, Error::Truncated { actual_bytes, .. } if *actual_bytes == len as u64),
        );
    }
}

/// Shorter than the magic number: nothing says it is ours.
#[test]
fn file_truncated_inside_the_magic_is_not_an_engram_file() {
    damage_and_restore(
        |bytes| bytes.truncate(4),
        |e| matches!(e, Error::NotAnEngramFile { .. }),
    );
}

/// A size slot claiming more blocks than could ever exist, under a valid
/// checksum: an error, not an overflow or a huge allocation.
#[test]
fn absurd_block_count_is_refused() {
    damage_and_restore(
        |bytes| {
            for slot in [SLOT_A, SLOT_B] {
                bytes[slot + 8..slot + 16].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
                let crc = crc32c::crc32c(&bytes[slot..slot + 16]).to_le_bytes();
                bytes[slot + 16..slot + 20].copy_from_slice(&crc);
            }
        },
        |e| matches!(e, Error::CorruptSuperblock { .. } | Error::Truncated { .. }),
    );
}

#[test]
fn data_file_that_is_a_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(data_file(dir.path())).unwrap();
    let result = catch_unwind(AssertUnwindSafe(|| {
        Store::open(dir.path(), small_options())
    }));
    let error = match result {
        Err(_) => panic!("open panicked"),
        Ok(Ok(_)) => panic!("a directory opened as a store"),
        Ok(Err(error)) => error,
    };
    assert!(
        matches!(error, Error::Region(_) | Error::Io { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&data_file(dir.path()).display().to_string()),
        "{message}"
    );
}

#[test]
fn second_open_of_a_directory_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let first = Store::open(dir.path(), small_options()).unwrap();
    first.put(b"k", b"v").unwrap();
    let error = match Store::open(dir.path(), small_options()) {
        Ok(_) => panic!("a second handle opened the same directory"),
        Err(error) => error,
    };
    match &error {
        Error::Locked { path } => assert_eq!(path, dir.path()),
        other => panic!("expected Locked, got {other:?}"),
    }
    assert!(error
        .to_string()
        .contains(&dir.path().display().to_string()));
    // The refused open changed nothing for the first handle.
    assert_eq!(first.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    first.put(b"k2", b"v2").unwrap();
    first.close().unwrap();
    let second = Store::open(dir.path(), small_options()).expect("the lock is released");
    assert_eq!(second.len(), 2);
    // A crashed handle releases it too.
    second.crash();
    let third = Store::open(dir.path(), small_options()).expect("released by crash");
    assert_eq!(third.get(b"k2").unwrap().as_deref(), Some(&b"v2"[..]));
}

#[test]
fn oversized_key_is_refused_and_the_largest_key_works() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    let too_long = vec![b'k'; MAX_KEY_BYTES + 1];
    match store.put(&too_long, b"v") {
        Err(Error::KeyTooLarge { len, max }) => {
            assert_eq!(len, MAX_KEY_BYTES + 1);
            assert_eq!(max, MAX_KEY_BYTES);
        }
        other => panic!("expected KeyTooLarge, got {other:?}"),
    }
    assert_eq!(store.len(), 0);
    assert_eq!(store.get(&too_long).unwrap(), None);
    let longest = vec![b'k'; MAX_KEY_BYTES];
    assert!(store.put(&longest, b"largest key").unwrap());
    store.crash();
    let store = Store::open(dir.path(), small_options()).unwrap();
    assert_eq!(store.len(), 1);
    assert_eq!(
        store.get(&longest).unwrap().as_deref(),
        Some(&b"largest key"[..])
    );
}

/// One test holds the 512 MiB values: the one just too large is refused
/// before anything is written; the largest allowed round-trips a crash.
#[test]
fn oversized_value_is_refused_and_the_largest_value_works() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_options()).unwrap();
    let file_before = store.stats().file_bytes;
    {
        // Zeroed pages from the allocator: not touched unless copied.
        let too_big = vec![0u8; MAX_VALUE_BYTES + 1];
        match store.put(b"v", &too_big) {
            Err(Error::ValueTooLarge { len, max }) => {
                assert_eq!(len, MAX_VALUE_BYTES + 1);
                assert_eq!(max, MAX_VALUE_BYTES);
            }
            other => panic!("expected ValueTooLarge, got {other:?}"),
        }
    }
    assert_eq!(store.len(), 0);
    assert_eq!(
        store.stats().file_bytes,
        file_before,
        "the refused value grew the file"
    );
    let mut largest = vec![0u8; MAX_VALUE_BYTES];
    for (i, chunk) in largest.chunks_mut(1 << 20).enumerate() {
        chunk[..8].copy_from_slice(&(i as u64).to_le_bytes());
    }
    *largest.last_mut().unwrap() = 0xEE;
    store.put(b"v", &largest).unwrap();
    store.crash();
    let store = Store::open(dir.path(), small_options()).unwrap();
    let found = store
        .get(b"v")
        .unwrap()
        .expect("the largest value survives");
    assert!(found == largest, "the largest value came back different");
}

fn assert_invalid(options: Options, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    match Store::open(&store_dir, options) {
        Err(Error::InvalidOption(message)) => {
            assert!(!message.is_empty(), "{what}: empty message");
        }
        Err(other) => panic!("{what}: expected InvalidOption, got {other:?}"),
        Ok(_) => panic!("{what}: opened with an invalid option"),
    }
    assert!(
        !data_file(&store_dir).exists(),
        "{what}: an invalid option still created a data file"
    );
}

#[test]
fn invalid_options_are_refused() {
    let compaction = |f: fn(&mut CompactionOptions)| {
        let mut options = small_options();
        f(&mut options.compaction);
        options
    };
    assert_invalid(
        Options {
            block_size_bytes: 1000,
            ..small_options()
        },
        "block size 1000",
    );
    assert_invalid(
        Options {
            block_size_bytes: 32 << 10,
            ..small_options()
        },
        "block size 32 KiB",
    );
    assert_invalid(
        Options {
            block_size_bytes: 128 << 20,
            ..small_options()
        },
        "block size 128 MiB",
    );
    assert_invalid(compaction(|c| c.max_live_ratio = 1.0), "max_live_ratio 1.0");
    assert_invalid(compaction(|c| c.max_live_ratio = 0.0), "max_live_ratio 0");
    assert_invalid(
        compaction(|c| c.max_live_ratio = f64::NAN),
        "max_live_ratio NaN",
    );
    assert_invalid(
        compaction(|c| c.max_space_amplification = 1.0),
        "max_space_amplification 1.0",
    );
    assert_invalid(
        Options {
            sync: SyncPolicy::Periodic(Duration::ZERO),
            ..small_options()
        },
        "periodic sync with a zero period",
    );
    // The limits themselves are valid.
    for block in [64 << 10, 64 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            dir.path(),
            Options {
                block_size_bytes: block,
                grow_bytes: block,
                ..small_options()
            },
        )
        .unwrap_or_else(|e| panic!("block size {block}: {e}"));
        assert_eq!(store.stats().block_bytes, block);
    }
}

/// An existing store keeps the block size it was created with, whatever
/// the options now say.
#[test]
fn existing_store_keeps_its_block_size() {
    let dir = tempfile::tempdir().unwrap();
    let contents = make_store(dir.path());
    let store = Store::open(
        dir.path(),
        Options {
            block_size_bytes: 1 << 20,
            ..small_options()
        },
    )
    .unwrap();
    assert_eq!(store.stats().block_bytes, BLOCK_BYTES);
    assert_contents(&store, &contents);
}
