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
