//! `Store::update_word_with`: a value read and one of its words changed in
//! one lookup, in both of the engine's ways of changing a word: in place
//! (eager retirement, real persistent memory's way) and by appending a new
//! version (lazy retirement, emulated memory's way).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::small_options;
use engram_engine::{Error, Options, Store, WordUpdate};

/// The engine's two ways of changing a word.
fn both_ways() -> [(&'static str, Options); 2] {
    [
        ("in place", small_options()),
        (
            "by append",
            Options {
                lazy_retirement: true,
                // No round within a test: only what the write itself made
                // durable survives the crash below.
                retirement_interval: Duration::from_secs(3600),
                ..small_options()
            },
        ),
    ]
}

fn word(value: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(value[at..at + 8].try_into().unwrap())
}

/// A 16-byte value: a tag word, then a counter word.
fn tagged(tag: u64, count: u64) -> Vec<u8> {
    let mut value = tag.to_le_bytes().to_vec();
    value.extend_from_slice(&count.to_le_bytes());
    value
}

#[test]
fn decide_sees_the_value_and_its_choice_is_what_happens() {
    for (way, options) in both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), options.clone()).unwrap();
        store.put(b"counter", &tagged(7, 40)).unwrap();

        // Set: the whole value is shown (the tag word too), the new word
        // stored, the old one returned.
        let found = store
            .update_word_with(
                b"counter",
                8,
                |access| access,
                |value| {
                    assert_eq!(value.len(), 16, "{way}");
                    if word(value, 0) == 7 {
                        WordUpdate::Set(word(value, 8) + 2)
                    } else {
                        WordUpdate::Decline
                    }
                },
            )
            .unwrap();
        assert_eq!(found, Some(40), "{way}");
        assert_eq!(
            store.get(b"counter").unwrap().unwrap(),
            tagged(7, 42),
            "{way}"
        );

        // Keep: the word found; Decline: None. Nothing changed either way.
        for (decision, expected) in [(WordUpdate::Keep, Some(42)), (WordUpdate::Decline, None)] {
            let found = store
                .update_word_with(b"counter", 8, |a| a, |_| decision)
                .unwrap();
            assert_eq!(found, expected, "{way}, {decision:?}");
            assert_eq!(
                store.get(b"counter").unwrap().unwrap(),
                tagged(7, 42),
                "{way}, {decision:?}"
            );
        }

        // An absent key: None, and nobody is asked.
        let found = store
            .update_word_with(b"absent", 8, |a| a, |_| panic!("asked about an absent key"))
            .unwrap();
        assert_eq!(found, None, "{way}");

        // A field that is not an aligned word inside the value is an
        // error before anybody is asked, whatever they would say.
        for field in [3, 16, u64::MAX - 3] {
            let result = store.update_word_with(
                b"counter",
                field,
                |a| a,
                |_| panic!("asked about a field out of range"),
            );
            assert!(
                matches!(result, Err(Error::FieldOutOfRange { .. })),
                "{way}, field {field}: {result:?}"
            );
        }

        // The stored word survives a crash.
        store.crash();
        let store = Store::open(dir.path(), options).unwrap();
        assert_eq!(
            store.get(b"counter").unwrap().unwrap(),
            tagged(7, 42),
            "{way}"
        );
    }
}

#[test]
fn the_access_field_is_touched_unless_the_value_is_declined() {
    for (way, options) in both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), options).unwrap();
        store.put(b"counter", &tagged(1, 0)).unwrap();
        let before = store.access(b"counter").unwrap();

        store
            .update_word_with(b"counter", 8, |old| old + 5, |_| WordUpdate::Decline)
            .unwrap();
        assert_eq!(store.access(b"counter"), Some(before), "{way}: declined");

        store
            .update_word_with(b"counter", 8, |old| old + 5, |_| WordUpdate::Keep)
            .unwrap();
        assert_eq!(store.access(b"counter"), Some(before + 5), "{way}: kept");

        store
            .update_word_with(
                b"counter",
                8,
                |old| old + 5,
                |value| WordUpdate::Set(word(value, 8) + 1),
            )
            .unwrap();
        assert_eq!(
            store.access(b"counter"),
            Some(before + 10),
            "{way}: set (a new version keeps the touched field)"
        );
    }
}

/// Two threads adding to one word: an update that lost the race is decided
/// again on the value the other left, so none is lost.
#[test]
fn concurrent_updates_lose_nothing() {
    for (way, options) in both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), options).unwrap());
        store.put(b"shared", &tagged(9, 0)).unwrap();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let found = store
                            .update_word_with(
                                b"shared",
                                8,
                                |a| a,
                                |value| WordUpdate::Set(word(value, 8) + 1),
                            )
                            .unwrap();
                        assert!(found.is_some());
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(
            store.get(b"shared").unwrap().unwrap(),
            tagged(9, 4000),
            "{way}"
        );
    }
}
