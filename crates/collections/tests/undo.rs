//! Undo (a MULTI whose record cannot be written puts the frontend back):
//! from random states, random runs of operations applied through an
//! `Undo` and then undone must leave every key exactly as it was, object
//! and expiry; and what the undo keeps must be what the operations
//! changed, not the collections they changed.

mod common;

use hashbrown::HashMap;

use common::{b, random_op, KEYS};
use engram_collections::op::Bytes;
use engram_collections::types::Object;
use engram_collections::{apply, Entry, Op, Undo};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type State = HashMap<Bytes, Entry>;

/// A state reached by random operations, with random expiries.
fn random_state(rng: &mut StdRng) -> State {
    let mut state = State::new();
    for _ in 0..rng.random_range(0..80) {
        apply::apply(&mut state, random_op(rng));
    }
    for key in KEYS {
        if rng.random_ratio(1, 3) {
            apply::apply(
                &mut state,
                Op::Expire {
                    key: b(key),
                    at_ms: rng.random_range(1..5) * 1_000,
                },
            );
        }
    }
    state
}

#[test]
fn undoing_random_operations_restores_every_key() {
    for seed in 0..3_000 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut state = random_state(&mut rng);
        let before = state.clone();
        let mut undo = Undo::new();
        let ops: Vec<Op> = (0..rng.random_range(1..12))
            .map(|_| random_op(&mut rng))
            .collect();
        // The operations do through the undo what they do without it.
        let mut plain = state.clone();
        for op in &ops {
            undo.apply(&mut state, op.clone());
            apply::apply(&mut plain, op.clone());
        }
        assert_eq!(state, plain, "seed {seed}: {ops:?}");
        undo.undo(&mut state);
        assert_eq!(state, before, "seed {seed}: {ops:?}");
    }
}

/// One member added to a set of 100,000 and one score changed in a
/// sorted set of 100,000 are undone from a record of two steps that hold
/// one member each: nothing is copied whole (a copy would make this test
/// take seconds in a debug build, and the state would still compare
/// equal, so the size is checked through the record's own accounting).
#[test]
fn the_undo_of_a_small_change_to_a_large_collection_is_small() {
    let mut state = State::new();
    let members: Vec<Bytes> = (0..100_000u32).map(|i| b(&i.to_le_bytes())).collect();
    apply::apply(
        &mut state,
        Op::SetAdd {
            key: b(b"set"),
            members: members.clone(),
        },
    );
    apply::apply(
        &mut state,
        Op::SortedSetAdd {
            key: b(b"zset"),
            pairs: members.iter().map(|m| (1.0, m.clone())).collect(),
        },
    );
    let before = state.clone();
    let mut undo = Undo::new();
    undo.apply(
        &mut state,
        Op::SetAdd {
            key: b(b"set"),
            members: vec![b(b"new")],
        },
    );
    undo.apply(
        &mut state,
        Op::SortedSetAdd {
            key: b(b"zset"),
            pairs: vec![(2.0, members[7].clone())],
        },
    );
    assert!(
        undo.held_bytes() < 1_000,
        "the undo holds {} bytes",
        undo.held_bytes()
    );
    let Some(Object::SortedSet(zset)) = state.get(&b"zset"[..]).map(|e| &e.object) else {
        panic!("the sorted set is there");
    };
    assert_eq!(zset.score(&members[7]), Some(2.0));
    undo.undo(&mut state);
    assert_eq!(state, before);
}

/// Streams: random runs of stream operations (entries, counters, groups,
/// consumers, pending entries) undone from random stream states leave
/// each stream as it was, and every state reached encodes to an image
/// that decodes to an equal stream.
#[test]
fn undoing_random_stream_operations_restores_every_stream() {
    use common::random_stream_op;
    for seed in 0..2_000 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut clock = 1;
        let mut state = State::new();
        for _ in 0..rng.random_range(0..150) {
            apply::apply(&mut state, random_stream_op(&mut rng, &mut clock));
        }
        let before = state.clone();
        let ops: Vec<Op> = (0..rng.random_range(1..12))
            .map(|_| random_stream_op(&mut rng, &mut clock))
            .collect();
        let mut undo = Undo::new();
        let mut plain = state.clone();
        for op in &ops {
            undo.apply(&mut state, op.clone());
            apply::apply(&mut plain, op.clone());
        }
        assert_eq!(state, plain, "seed {seed}: {ops:?}");
        for entry in state.values() {
            let mut image = Vec::new();
            entry.object.encode(&mut image);
            assert_eq!(
                Object::decode(&image).as_ref(),
                Ok(&entry.object),
                "seed {seed}"
            );
        }
        undo.undo(&mut state);
        assert_eq!(state, before, "seed {seed}: {ops:?}");
    }
}
