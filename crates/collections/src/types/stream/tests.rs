use super::*;

fn id(ms: u64, seq: u64) -> StreamId {
    StreamId::new(ms, seq)
}

fn fields(n: u64) -> Vec<Vec<u8>> {
    // Most entries share the first's fields (packed against the master
    // fields); every seventh has its own.
    if n % 7 == 3 {
        vec![b"other".to_vec(), n.to_string().into_bytes()]
    } else {
        vec![
            b"a".to_vec(),
            n.to_string().into_bytes(),
            b"b".to_vec(),
            vec![0; (n % 5) as usize],
        ]
    }
}

/// A stream of `n` entries (several nodes) and its model.
/// The model: each entry's ID and fields.
type Model = Vec<(StreamId, Vec<Vec<u8>>)>;

fn stream(n: u64) -> (Stream, Model) {
    let mut stream = Stream::new();
    let mut model = Vec::new();
    for i in 1..=n {
        // IDs that share milliseconds, and ones that jump.
        let id = id(1000 + i / 3 + i / 50 * 1000, i % 3);
        let owned = fields(i);
        stream.append(id, &owned.iter().map(|f| f.as_slice()).collect::<Vec<_>>());
        model.push((id, owned));
    }
    (stream, model)
}

fn owned(entry: StreamEntry<'_>) -> (StreamId, Vec<Vec<u8>>) {
    (entry.id, entry.fields.iter().map(|f| f.to_vec()).collect())
}

#[test]
fn ranges_read_what_was_appended_across_nodes() {
    let (stream, model) = stream(1000);
    assert_eq!(stream.len(), 1000);
    assert!(stream.node_count() >= 10, "{} nodes", stream.node_count());
    assert_eq!(stream.iter().map(owned).collect::<Vec<_>>(), model);
    assert_eq!(stream.last_id(), model[999].0);
    assert_eq!(stream.first_id(), model[0].0);
    assert_eq!(stream.entries_added(), 1000);
    for (from, to) in [(0, 999), (5, 5), (99, 101), (100, 350), (998, 999)] {
        let (start, end) = (model[from].0, model[to].0);
        let expected: Vec<_> = model[from..=to].to_vec();
        assert_eq!(
            stream.range(start, end).map(owned).collect::<Vec<_>>(),
            expected
        );
        let mut reversed = expected.clone();
        reversed.reverse();
        assert_eq!(
            stream.rev_range(start, end).map(owned).collect::<Vec<_>>(),
            reversed
        );
        // Bounds between IDs.
        let inner: Vec<_> = stream
            .range(start.next().unwrap(), end.prev().unwrap())
            .map(|e| e.id)
            .collect();
        assert_eq!(inner.len(), (to - from + 1).saturating_sub(2));
    }
    // A range may start at any entry of a node (the entries before it are
    // skipped by ID only) or between two entries.
    for (i, (start, _)) in model.iter().enumerate() {
        let mut from_here = stream.range(*start, StreamId::MAX);
        assert_eq!(from_here.next().map(owned).as_ref(), Some(&model[i]));
        assert_eq!(from_here.next().map(owned).as_ref(), model.get(i + 1));
        let after = stream.range(start.next().unwrap(), StreamId::MAX).next();
        assert_eq!(after.map(owned).as_ref(), model.get(i + 1));
    }
    assert_eq!(stream.range(model[10].0, model[5].0).count(), 0);
    assert_eq!(stream.range(id(0, 0), id(1, 0)).count(), 0);
    assert!(stream.get(model[500].0).is_some());
    assert!(stream.get(id(1, 0)).is_none());
    assert!(stream.get(id(model[999].0.ms, 7)).is_none());
}

#[test]
fn deletes_and_trims_keep_the_counters_as_redis_does() {
    let (mut stream, mut model) = stream(500);
    let last = stream.last_id();
    // XDEL of the first entry moves the recorded first ID; of a missing
    // one changes nothing.
    assert_eq!(stream.delete(&[model[0].0, id(1, 1)]), 1);
    model.remove(0);
    assert_eq!(stream.first_id(), model[0].0);
    assert_eq!(
        stream.max_deleted_id(),
        id(1000, 1).max(stream.max_deleted_id())
    );
    // A delete in the middle of a node.
    let middle = model.remove(150).0;
    assert_eq!(stream.delete(&[middle]), 1);
    assert_eq!(stream.max_deleted_id(), middle);
    assert_eq!(stream.iter().map(owned).collect::<Vec<_>>(), model);
    // Exact trims by count.
    assert_eq!(stream.trim_count(TrimStrategy::MaxLen(400), false, 0), 98);
    assert_eq!(stream.trim(98), 98);
    model.drain(..98);
    assert_eq!(stream.iter().map(owned).collect::<Vec<_>>(), model);
    assert_eq!(stream.first_id(), model[0].0);
    let min = model[10].0;
    assert_eq!(stream.trim_count(TrimStrategy::MinId(min), false, 0), 10);
    // Approximate trims remove whole nodes only.
    let approx = stream.trim_count(TrimStrategy::MaxLen(10), true, 0);
    assert!(approx < 390 && approx > 0, "{approx}");
    assert!(stream.trim_count(TrimStrategy::MaxLen(10), true, 5) <= 5);
    // Everything goes; the last ID and counters stay.
    assert_eq!(stream.trim(10_000), 400);
    assert_eq!(stream.len(), 0);
    assert_eq!(stream.last_id(), last);
    assert_eq!(stream.first_id(), StreamId::MIN);
    assert_eq!(stream.entries_added(), 500);
    // An ID at or below the last is refused.
    stream.append(last, &[b"f".as_slice(), b"v"]);
    assert_eq!(stream.len(), 0);
    stream.append(last.next().unwrap(), &[b"f".as_slice(), b"v"]);
    assert_eq!(stream.len(), 1);
    assert_eq!(stream.first_id(), last.next().unwrap());
}

#[test]
fn read_counters_follow_redis() {
    let (mut stream, model) = stream(10);
    assert_eq!(stream.estimate_entries_read(stream.last_id()), Some(10));
    assert_eq!(stream.estimate_entries_read(model[0].0), Some(1));
    assert_eq!(stream.estimate_entries_read(StreamId::MIN), Some(0));
    assert_eq!(stream.estimate_entries_read(model[4].0), None);
    assert_eq!(stream.estimate_entries_read(StreamId::MAX), None);
    assert_eq!(stream.entries_read_after(3, model[3].0), 4);
    stream.delete(&[model[5].0]);
    assert!(stream.has_tombstones_from(model[2].0));
    assert!(!stream.has_tombstones_from(model[6].0));
    assert_eq!(stream.entries_read_after(3, model[3].0), -1);
    let group = Group::new(model[9].0, 10);
    assert_eq!(stream.lag(&group), Some(0));
}

#[test]
fn packed_entries_cost_a_few_bytes_each() {
    let mut stream = Stream::new();
    for i in 0..10_000u64 {
        let value = i.to_string();
        stream.append(
            id(1_700_000_000_000 + i / 4, i % 4),
            &[
                b"name".as_slice(),
                value.as_bytes(),
                b"kind",
                b"x",
                b"n",
                b"1",
            ],
        );
    }
    let per_entry = stream.approx_heap_bytes() / 10_000;
    // Redis's listpacks take about 20 bytes an entry for these.
    assert!(per_entry <= 20, "{per_entry} bytes an entry");
}

#[test]
fn groups_keep_each_consumers_list_in_step() {
    let mut group = Group::new(StreamId::MIN, -1);
    group.touch(b"alice", 5);
    group.claim(id(1, 0), b"alice", 10, 1);
    group.claim(id(2, 0), b"alice", 10, 1);
    group.claim(id(1, 0), b"bob", 20, 2);
    assert_eq!(group.consumer(b"alice").unwrap().pending().len(), 1);
    assert_eq!(group.consumer(b"bob").unwrap().pending().len(), 1);
    assert_eq!(group.consumer(b"bob").unwrap().seen_ms, 0);
    assert_eq!(&*group.pel()[&id(1, 0)].consumer, b"bob");
    assert!(group.ack(id(2, 0)));
    assert!(!group.ack(id(2, 0)));
    assert!(group.consumer(b"alice").unwrap().pending().is_empty());
    assert_eq!(group.remove_consumer(b"bob").unwrap().pending().len(), 1);
    assert!(group.pel().is_empty());
}
