//! Operations larger than a log segment (a hash field of a few hundred
//! kilobytes, a SADD of thousands of members) are logged in runs of
//! segments and come back whole: through the log after a crash, through a
//! checkpoint's images, and both at once.

use engram_collections::op::Bytes;
use engram_collections::{CheckpointMode, Collections, CollectionsOptions, Entry, Op};

const SEGMENT_BYTES: u64 = 64 << 10;

fn options() -> CollectionsOptions {
    let mut options = CollectionsOptions {
        checkpoints: CheckpointMode::Manual,
        ..CollectionsOptions::default()
    };
    options.oplog.segment_bytes = SEGMENT_BYTES;
    options
}

fn big_field(key: &str, field: &str, bytes: usize, fill: u8) -> Op {
    Op::HashSet {
        key: key.as_bytes().into(),
        pairs: vec![(field.as_bytes().into(), vec![fill; bytes].into())],
    }
}

fn many_members(key: &str, from: usize, count: usize) -> Op {
    Op::SetAdd {
        key: key.as_bytes().into(),
        members: (from..from + count)
            .map(|i| Bytes::from(format!("member-{i:026}").into_bytes()))
            .collect(),
    }
}

fn small(key: &str, member: &str) -> Op {
    Op::SetAdd {
        key: key.as_bytes().into(),
        members: vec![member.as_bytes().into()],
    }
}

const KEYS: [&str; 4] = ["h", "s", "t", "small"];

fn snapshot(c: &Collections) -> Vec<Option<Entry>> {
    KEYS.iter()
        .map(|key| c.read(key.as_bytes(), |entry| entry.cloned()))
        .collect()
}

#[test]
fn operations_larger_than_a_segment_survive_crashes_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collections::open(dir.path(), options()).unwrap();
    // Before a checkpoint: one hash field five segments long, a set whose
    // one SADD is about three, small operations around them.
    c.write(vec![small("small", "a")]).unwrap();
    c.write(vec![big_field("h", "f", 300_000, 1)]).unwrap();
    c.write(vec![many_members("s", 0, 5000)]).unwrap();
    c.write(vec![small("small", "b")]).unwrap();
    let log = c.stats().log;
    assert!(
        log.segments_total >= 9,
        "the large records took runs of segments: {log:?}"
    );
    c.checkpoint_now().unwrap();
    // After it: the hash field rewritten, the set grown, a new large set
    // written in the same record as a small change to another key.
    c.write(vec![big_field("h", "f", 250_000, 2)]).unwrap();
    c.write(vec![many_members("s", 5000, 3000)]).unwrap();
    c.write(vec![many_members("t", 0, 4000), small("small", "c")])
        .unwrap();
    let expected = snapshot(&c);
    assert!(expected.iter().all(Option::is_some));
    c.crash();

    // Recovery: the checkpoint's images, then the large records of the log.
    let c = Collections::open(dir.path(), options()).unwrap();
    assert!(snapshot(&c) == expected, "recovered from images and log");
    // A checkpoint folds the large records in, frees their runs, and the
    // freed segments take new large records without the file growing
    // past what it holds.
    c.checkpoint_now().unwrap();
    let total = c.stats().log.segments_total;
    c.write(vec![big_field("h", "g", 200_000, 3)]).unwrap();
    assert_eq!(
        c.stats().log.segments_total,
        total,
        "a freed run was reused"
    );
    let expected = snapshot(&c);
    c.crash();
    let c = Collections::open(dir.path(), options()).unwrap();
    assert!(snapshot(&c) == expected, "recovered after the run's reuse");
    c.close().unwrap();
}
