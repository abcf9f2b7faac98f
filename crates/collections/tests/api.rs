//! The step-by-step writer and the cursor walk the server builds on.

use std::collections::BTreeSet;

use engram_collections::{apply, CheckpointMode, Collections, CollectionsOptions, Op};

fn options() -> CollectionsOptions {
    CollectionsOptions {
        checkpoints: CheckpointMode::Manual,
        ..CollectionsOptions::default()
    }
}

fn add(key: &[u8], member: &[u8]) -> Op {
    Op::SetAdd {
        key: key.into(),
        members: vec![member.into()],
    }
}

#[test]
fn scan_returns_every_wanted_key_once_in_rank_order() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collections::open(dir.path(), options()).unwrap();
    let keys: Vec<Vec<u8>> = (0..2000)
        .map(|i| format!("{}k{i}", i % 2).into_bytes())
        .collect();
    c.write(keys.iter().map(|k| add(k, b"m")).collect())
        .unwrap();
    let wanted = |k: &[u8]| k.first() == Some(&b'0');
    let expected: BTreeSet<Vec<u8>> = keys.iter().filter(|k| wanted(k)).cloned().collect();

    let mut seen = Vec::new();
    let mut from = 0;
    let mut last_rank = None;
    loop {
        let (found, resume) = c.scan(from, None, 7, wanted);
        assert!(found.len() <= 7);
        for s in &found {
            assert!(last_rank.is_none_or(|r| s.rank > r), "ranks ascend");
            last_rank = Some(s.rank);
            assert_eq!(s.rank, engram_collections::scan_rank(&s.key));
            assert_eq!(s.kind, engram_collections::types::Kind::Set);
            seen.push(s.key.clone());
        }
        match resume {
            Some(at) => from = at,
            None => break,
        }
    }
    assert_eq!(seen.len(), expected.len(), "no key twice");
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), expected);

    // A bounded range returns only its own keys.
    let mid = 1u64 << 63;
    let (low, _) = c.scan(0, Some(mid), usize::MAX, |_| true);
    assert!(low.iter().all(|s| s.rank < mid));
    let (high, _) = c.scan(mid, None, usize::MAX, |_| true);
    assert_eq!(low.len() + high.len(), keys.len());
    assert!(c.scan(5, Some(5), 10, |_| true).0.is_empty());

    let picked = c.random_key(wanted).unwrap();
    assert!(expected.contains(&picked));
    assert_eq!(c.random_key(|_| false), None);
}

#[test]
fn a_writer_logs_what_it_applied_and_recovery_agrees() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = Collections::open(dir.path(), options()).unwrap();
        let writer = c.writer(&[b"a", b"b"]);
        assert!(writer.covers(b"a") && writer.covers(b"b"));
        let ops = vec![
            add(b"a", b"x"),
            add(b"b", b"y"),
            Op::Rename {
                from: b"a".as_slice().into(),
                to: b"c".as_slice().into(),
            },
        ];
        // "c" was not locked: an update naming it is refused...
        drop(writer);
        assert!(c.update(&[b"a"], |_| Ok((ops.clone(), ()))).is_err());
        // ...and a writer holding every key applies and logs them.
        let mut writer = c.writer(&[b"a", b"b", b"c"]);
        writer.log(&ops).unwrap();
        for op in ops {
            apply::apply(writer.keys_mut(), op);
        }
        assert!(writer.keys().get(b"c").is_some());
        assert!(writer.keys().get(b"a").is_none());
        drop(writer);
        c.close().unwrap();
    }
    let c = Collections::open(dir.path(), options()).unwrap();
    assert_eq!(c.len(), 2);
    c.read(b"c", |e| assert_eq!(e.map(|e| e.object.len()), Some(1)));
    c.read(b"a", |e| assert!(e.is_none()));
}

/// A lane that fills its segment claims one the reserve thread mapped
/// beforehand: the file grows off the write path, and only by the reserve.
#[test]
fn log_segments_are_kept_in_reserve_off_the_write_path() {
    let segment_bytes = 64 << 10;
    let open = |reserve_segments| {
        let dir = tempfile::tempdir().unwrap();
        let mut options = options();
        options.oplog.segment_bytes = segment_bytes;
        options.oplog.lanes = 1;
        options.oplog.reserve_segments = reserve_segments;
        let c = Collections::open(dir.path(), options).unwrap();
        (dir, c)
    };
    let wait_for = |c: &Collections, what: &dyn Fn(&Collections) -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !what(c) {
            assert!(
                std::time::Instant::now() < deadline,
                "reserve never filled: {:?}",
                c.stats().log
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };

    let (_dir, c) = open(3);
    assert_eq!(
        c.stats().log.segments_total,
        0,
        "nothing is reserved before the first write"
    );
    c.write(vec![add(b"k", b"m")]).unwrap();
    // The first claim grew the file itself (nothing was free) and asked
    // for the reserve: three more segments, free.
    wait_for(&c, &|c| c.stats().log.segments_free == 3);
    assert_eq!(c.stats().log.segments_total, 4);
    // Fill two segments' worth: each claim takes a reserved segment and
    // the thread tops the reserve up again.
    let member = vec![b'x'; 1000];
    for i in 0..(2 * segment_bytes as usize / 1000) {
        c.write(vec![add(format!("k{i}").as_bytes(), &member)])
            .unwrap();
    }
    wait_for(&c, &|c| c.stats().log.segments_free == 3);
    let stats = c.stats().log;
    assert!(stats.segments_total - stats.segments_free >= 3, "{stats:?}");
    drop(c); // joins the reserve thread

    // Reserve off: the file holds exactly the segments claimed.
    let (_dir, c) = open(0);
    c.write(vec![add(b"k", b"m")]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(c.stats().log.segments_total, 1);
    assert_eq!(c.stats().log.segments_free, 0);
}
