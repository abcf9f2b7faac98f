//! Streams through the operation log and checkpoint images: random stream
//! operations (entries, trims, deletes, counters, groups, consumers and
//! their pending entries), with checkpoints and crashes in between; after
//! every reopen each stream is exactly what the frontend had, last ID,
//! counters and every group's PEL included.

#[allow(dead_code)]
mod common;

use common::random_stream_op;
use engram_collections::op::Bytes;
use engram_collections::types::{Object, StreamId};
use engram_collections::{apply, CheckpointMode, Collections, CollectionsOptions, Entry, Op};
use hashbrown::HashMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type State = HashMap<Bytes, Entry>;

fn options() -> CollectionsOptions {
    CollectionsOptions {
        checkpoints: CheckpointMode::Manual,
        ..CollectionsOptions::default()
    }
}

fn dump(collections: &Collections) -> State {
    let mut state = State::new();
    for shard in 0..engram_collections::state::SHARDS {
        collections.for_each_in_shard(shard, |key, entry| {
            state.insert(key.into(), entry.clone());
        });
    }
    state
}

#[test]
fn streams_survive_crashes_and_checkpoints_exactly() {
    for seed in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut clock = 1;
        let mut expected = State::new();
        let mut store = Collections::open(dir.path(), options()).unwrap();
        for step in 0..300 {
            let ops: Vec<Op> = (0..rng.random_range(1..4))
                .map(|_| random_stream_op(&mut rng, &mut clock))
                .collect();
            for op in &ops {
                apply::apply(&mut expected, op.clone());
            }
            store.write(ops).unwrap();
            match rng.random_range(0..100) {
                0..=9 => {
                    store.checkpoint_now().unwrap();
                }
                10..=14 => {
                    store.crash();
                    store = Collections::open(dir.path(), options()).unwrap();
                    assert_eq!(dump(&store), expected, "seed {seed} step {step}");
                }
                _ => {}
            }
        }
        store.crash();
        let store = Collections::open(dir.path(), options()).unwrap();
        assert_eq!(dump(&store), expected, "seed {seed}: end");
    }
}

/// The last ID outlives the entries that carried it: XDEL and a trim of
/// every entry, a crash, and the stream still refuses nothing above it
/// and keeps its counters and its group's pending entry.
#[test]
fn the_last_id_survives_deleting_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let key: Bytes = b"s".as_slice().into();
    let id = |ms| StreamId::new(ms, 0);
    {
        let store = Collections::open(dir.path(), options()).unwrap();
        let mut ops = Vec::new();
        for ms in 1..=300 {
            ops.push(Op::StreamAdd {
                key: key.clone(),
                id: id(ms),
                fields: vec![b"f".as_slice().into(), b"v".as_slice().into()],
            });
        }
        ops.push(Op::GroupCreate {
            key: key.clone(),
            group: b"g".as_slice().into(),
            last_id: StreamId::MIN,
            entries_read: -1,
        });
        ops.push(Op::PendingClaim {
            key: key.clone(),
            group: b"g".as_slice().into(),
            consumer: b"c".as_slice().into(),
            entries: vec![(id(300), 1234, 2)],
        });
        store.write(ops).unwrap();
        store.checkpoint_now().unwrap();
        store
            .write(vec![
                Op::StreamDelete {
                    key: key.clone(),
                    ids: vec![id(300)],
                },
                Op::StreamTrim {
                    key: key.clone(),
                    count: 299,
                },
            ])
            .unwrap();
        store.crash();
    }
    let store = Collections::open(dir.path(), options()).unwrap();
    store.read(&key, |entry| {
        let Some(Object::Stream(stream)) = entry.map(|e| &e.object) else {
            panic!("the stream is gone: {entry:?}");
        };
        assert_eq!(stream.len(), 0);
        assert_eq!(stream.last_id(), id(300));
        assert_eq!(stream.entries_added(), 300);
        assert_eq!(stream.max_deleted_id(), id(300));
        assert_eq!(stream.first_id(), StreamId::MIN);
        let group = stream.group(b"g").expect("the group");
        let pending = &group.pel()[&id(300)];
        assert_eq!(&*pending.consumer, b"c");
        assert_eq!((pending.delivery_ms, pending.deliveries), (1234, 2));
        assert!(group.consumer(b"c").unwrap().pending().contains(&id(300)));
    });
}
