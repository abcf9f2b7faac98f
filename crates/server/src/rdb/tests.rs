//! The codec against payloads redis-server 7.0.15 wrote (DUMP, hex below),
//! its own output, and random and damaged input (which must give errors,
//! never panics or huge allocations).

use proptest::prelude::*;

use super::file::FileReader;
use super::payload::{self, PayloadError};
use super::value::Value;
use super::{crc64, writer};

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn strings(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn sealed(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    writer::put_value(&mut out, value);
    payload::seal(&mut out);
    out
}

#[test]
fn crc64_is_redis_jones() {
    // Redis's crc64.c self-test value.
    assert_eq!(crc64(b"123456789"), 0xe9c6d914c4b8d9ca);
}

#[test]
fn payloads_redis_wrote() {
    // RPUSH l a 1 -5 300 70000 <78 letters>: quicklist 2, one listpack
    // node, LZF-compressed.
    let list = payload::open(&hex(
        "120102c33a40681f6800000006008161020101dffb02c12c02f270110104e04e61626364656667681169\
         6a6b6c6d6e6f707172737475767778797ae02b190150ff0a00bee0b7cbf47742d4",
    ))
    .unwrap();
    let alphabet = "abcdefghijklmnopqrstuvwxyz".repeat(3);
    assert_eq!(
        list,
        Value::List(strings(&["a", "1", "-5", "300", "70000", &alphabet]))
    );
    // SADD si 1 2 -300 100000 5000000000: an intset of 8-byte integers, LZF.
    let intset = payload::open(&hex(
        "0bc32730040800000005200302d4feff60000001200b400000024004200001a086a01102f2052a2009\
         00000a0086ef37d0fc7a47b6",
    ))
    .unwrap();
    assert_eq!(
        intset,
        Value::Set(strings(&["-300", "1", "2", "100000", "5000000000"]))
    );
    // SADD ss a b c: a plain set.
    let set = payload::open(&hex("02030163016201610a005ea67e5623750bab")).unwrap();
    assert_eq!(set, Value::Set(strings(&["c", "b", "a"])));
    // ZADD z 1.5 a 2 b -inf c: a listpack, scores as text and integers.
    let zset = payload::open(&hex(
        "111d1d0000000600816302842d696e660581610283312e35048162020201ff0a0017dce91ab8436c89",
    ))
    .unwrap();
    assert_eq!(
        zset,
        Value::SortedSet(vec![
            (b"c".to_vec(), f64::NEG_INFINITY),
            (b"a".to_vec(), 1.5),
            (b"b".to_vec(), 2.0)
        ])
    );
    // HSET h f1 v1 f2 22: a listpack.
    let hash = payload::open(&hex(
        "10151500000004008266310382763103826632031601ff0a00794ee62e9c48a90c",
    ))
    .unwrap();
    assert_eq!(
        hash,
        Value::Hash(vec![
            (b"f1".to_vec(), b"v1".to_vec()),
            (b"f2".to_vec(), b"22".to_vec())
        ])
    );
    // SET s 12345: an integer-encoded string.
    let int = payload::open(&hex("00c139300a009d94ea2793fc08b9")).unwrap();
    assert_eq!(int, Value::String(b"12345".to_vec()));
    // SET big <102 a's>: LZF.
    let lzf = payload::open(&hex("00c3094066016161e059000161610a00f800a0809191795c")).unwrap();
    assert_eq!(lzf, Value::String(vec![b'a'; 102]));
}

#[test]
fn own_payloads_read_back() {
    let long: Vec<Vec<u8>> = (0..20_000).map(|i| format!("m{i}").into_bytes()).collect();
    let values = [
        Value::String(Vec::new()),
        Value::String(vec![7; 70_000]),
        Value::List(strings(&["", "x", "yy"])),
        Value::List(long.clone()),
        Value::Set(long.clone()),
        Value::SortedSet(vec![
            (b"a".to_vec(), 1.5),
            (b"b".to_vec(), f64::INFINITY),
            (b"c".to_vec(), -0.25),
        ]),
        Value::Hash(long.iter().map(|m| (m.clone(), m.repeat(2))).collect()),
    ];
    for value in values {
        assert_eq!(payload::open(&sealed(&value)).unwrap(), value);
    }
}

#[test]
fn footer_errors_are_version_or_checksum() {
    let mut good = sealed(&Value::String(b"hello".to_vec()));
    assert!(matches!(
        payload::open(&good[..9]),
        Err(PayloadError::VersionOrChecksum)
    ));
    let last = good.len() - 1;
    good[last] ^= 1;
    assert!(matches!(
        payload::open(&good),
        Err(PayloadError::VersionOrChecksum)
    ));
    // Version 11 (Redis 7.2), correctly checksummed: refused.
    let mut newer = vec![0, 1, b'x'];
    newer.extend_from_slice(&11u16.to_le_bytes());
    let crc = crc64(&newer);
    newer.extend_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        payload::open(&newer),
        Err(PayloadError::VersionOrChecksum)
    ));
}

/// A payload with a correct footer around `body`: the decoder must judge
/// the value itself.
fn with_footer(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    payload::seal(&mut out);
    out
}

#[test]
fn huge_lengths_are_refused_without_allocating() {
    // A list of 2^63 elements, a 4 GiB string, an LZF string claiming
    // 2^40 bytes from 3, a quicklist of 2^32 nodes.
    let bodies: [&[u8]; 4] = [
        b"\x01\x81\x80\x00\x00\x00\x00\x00\x00\x00\x01a",
        b"\x00\x80\xff\xff\xff\xffabc",
        b"\x00\xc3\x03\x81\x00\x00\x01\x00\x00\x00\x00\x00\x00ab",
        b"\x12\x80\xff\xff\xff\xff\x02\x00",
    ];
    for body in bodies {
        match payload::open(&with_footer(body)) {
            Err(PayloadError::BadFormat(e)) => assert!(!e.message.is_empty()),
            other => panic!("{body:?}: {other:?}"),
        }
    }
}

#[test]
fn modules_are_named_and_cut_streams_refused() {
    // A stream of no nodes whose counters are cut off.
    let Err(PayloadError::BadFormat(e)) = payload::open(&with_footer(b"\x13\x00")) else {
        panic!("a cut stream payload decoded");
    };
    assert!(!e.unsupported && e.message.contains("ends early"), "{e}");
    let Err(PayloadError::BadFormat(e)) = payload::open(&with_footer(b"\x07\x05")) else {
        panic!("a module payload decoded");
    };
    assert!(e.message.contains("module"), "{e}");
}

/// An RDB file of version 9 written by hand with the encodings of Redis
/// before 7.0: ziplist-based quicklist, hash and sorted set ziplists, a
/// zipmap, seconds and milliseconds expiry, two databases, AUX fields.
fn version9_file() -> Vec<u8> {
    fn ziplist(entries: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        let (mut prev, mut tail) = (0usize, 10usize);
        for entry in entries {
            tail = 10 + body.len();
            let start = body.len();
            body.push(prev as u8);
            body.push(entry.len() as u8); // a 6-bit string
            body.extend_from_slice(entry);
            prev = body.len() - start;
        }
        let mut out = ((10 + body.len() + 1) as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&(tail as u32).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&body);
        out.push(0xff);
        out
    }
    let mut f = b"REDIS0009".to_vec();
    f.push(250);
    writer::put_string(&mut f, b"redis-ver");
    writer::put_string(&mut f, b"6.2.0");
    f.extend_from_slice(&[254, 0, 251, 4, 1]);
    // A quicklist of two ziplist nodes.
    f.push(14);
    writer::put_string(&mut f, b"list");
    f.push(2);
    writer::put_string(&mut f, &ziplist(&[b"a", b"b"]));
    writer::put_string(&mut f, &ziplist(&[b"c"]));
    // A hash ziplist, expiring in the far future (milliseconds).
    f.push(252);
    f.extend_from_slice(&4_000_000_000_000i64.to_le_bytes());
    f.push(13);
    writer::put_string(&mut f, b"hash");
    writer::put_string(&mut f, &ziplist(&[b"f", b"v"]));
    // A sorted set ziplist, expired long ago (seconds).
    f.push(253);
    f.extend_from_slice(&1000i32.to_le_bytes());
    f.push(12);
    writer::put_string(&mut f, b"zset");
    writer::put_string(&mut f, &ziplist(&[b"m", b"2.5"]));
    f.extend_from_slice(&[254, 3]);
    // A zipmap.
    f.push(9);
    writer::put_string(&mut f, b"old");
    writer::put_string(&mut f, b"\x01\x01k\x01\x00v\xff");
    // A plain string and an old-style sorted set with text scores.
    f.push(0);
    writer::put_string(&mut f, b"s");
    writer::put_string(&mut f, b"text");
    f.push(3);
    writer::put_string(&mut f, b"z1");
    f.push(1);
    writer::put_string(&mut f, b"x");
    f.extend_from_slice(b"\x03-.5");
    f.push(255);
    let crc = crc64(&f);
    f.extend_from_slice(&crc.to_le_bytes());
    f
}

#[test]
fn version9_file_reads() {
    let data = version9_file();
    let mut reader = FileReader::new(&data).unwrap();
    let mut records = Vec::new();
    let mut offsets = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        offsets.push(r.offset);
        records.push((r.db, r.key, r.value, r.expire_at_ms));
    }
    // Header 9, AUX 17, SELECTDB 2, RESIZEDB 3: the list's type byte at
    // 31; a record with an expiry starts at its expiry opcode.
    assert_eq!(offsets[0], 31);
    let first_bytes: Vec<u8> = offsets.iter().map(|&at| data[at as usize]).collect();
    assert_eq!(first_bytes, [14, 252, 253, 9, 0, 3]);
    assert_eq!(reader.version, 9);
    assert_eq!(reader.aux, vec![(b"redis-ver".to_vec(), b"6.2.0".to_vec())]);
    let expected = vec![
        (
            0,
            b"list".to_vec(),
            Value::List(strings(&["a", "b", "c"])),
            None,
        ),
        (
            0,
            b"hash".to_vec(),
            Value::Hash(vec![(b"f".to_vec(), b"v".to_vec())]),
            Some(4_000_000_000_000),
        ),
        (
            0,
            b"zset".to_vec(),
            Value::SortedSet(vec![(b"m".to_vec(), 2.5)]),
            Some(1_000_000),
        ),
        (
            3,
            b"old".to_vec(),
            Value::Hash(vec![(b"k".to_vec(), b"v".to_vec())]),
            None,
        ),
        (3, b"s".to_vec(), Value::String(b"text".to_vec()), None),
        (
            3,
            b"z1".to_vec(),
            Value::SortedSet(vec![(b"x".to_vec(), -0.5)]),
            None,
        ),
    ];
    assert_eq!(records, expected);
}

#[test]
fn damaged_files_name_an_offset() {
    let data = version9_file();
    let mut flipped = data.clone();
    flipped[40] ^= 0x20;
    let e = FileReader::new(&flipped)
        .err()
        .expect("a flipped byte passed");
    assert!(e.message.contains("checksum"), "{e}");
    for cut in [0, 5, 9, 20, data.len() - 1] {
        assert!(read_all(&data[..cut]).is_err(), "cut at {cut}");
    }
}

fn read_all(data: &[u8]) -> Result<usize, super::Error> {
    let mut reader = FileReader::new(data)?;
    let mut n = 0;
    while reader.next_record()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// Valid payloads to mutate: Redis's and our own.
fn seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = [
        "120102c33a40681f6800000006008161020101dffb02c12c02f270110104e04e616263646566676811696a6b\
         6c6d6e6f707172737475767778797ae02b190150ff0a00bee0b7cbf47742d4",
        "0bc32730040800000005200302d4feff60000001200b400000024004200001a086a01102f2052a200900000a00\
         86ef37d0fc7a47b6",
        "111d1d0000000600816302842d696e660581610283312e35048162020201ff0a0017dce91ab8436c89",
        "10151500000004008266310382763103826632031601ff0a00794ee62e9c48a90c",
        "00c3094066016161e059000161610a00f800a0809191795c",
    ]
    .iter()
    .map(|h| hex(h))
    .collect();
    seeds.push(sealed(&Value::Hash(vec![(b"a".to_vec(), b"b".to_vec())])));
    seeds.push(sealed(&Value::SortedSet(vec![(b"a".to_vec(), 1.0)])));
    seeds
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_payloads_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = payload::open(&bytes);
        let _ = payload::open(&with_footer(&bytes));
        let mut file = b"REDIS0010".to_vec();
        file.extend_from_slice(&bytes);
        let _ = read_all(&file);
    }

    /// Damaged values behind a correct checksum: every byte of the value
    /// is up for change, insertion or deletion.
    #[test]
    fn mutated_payloads_never_panic(
        seed in 0usize..7,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let seed = &seeds()[seed];
        let mut body = seed[..seed.len() - 10].to_vec();
        for (at, byte, kind) in edits {
            let at = at % (body.len() + 1);
            match kind {
                0 if at < body.len() => body[at] = byte,
                1 => body.insert(at, byte),
                _ if at < body.len() => { body.remove(at); }
                _ => {}
            }
        }
        if let Ok(value) = payload::open(&with_footer(&body)) {
            let _ = value.into_stored();
        }
    }

    #[test]
    fn mutated_files_never_panic(at in any::<usize>(), byte in any::<u8>()) {
        let mut data = version9_file();
        let body_end = data.len() - 8;
        data[at % body_end] = byte;
        let crc = crc64(&data[..body_end]);
        data[body_end..].copy_from_slice(&crc.to_le_bytes());
        let _ = read_all(&data);
    }
}

#[test]
fn stored_objects_hold_the_value_and_refuse_repeats() {
    use super::value::Stored;
    let hash = Value::Hash(vec![
        (b"f".to_vec(), b"1".to_vec()),
        (b"g".to_vec(), b"2".to_vec()),
    ]);
    let Ok(Stored::Collection(object)) = hash.clone().into_stored() else {
        panic!("a hash is a collection");
    };
    let Value::Hash(mut back) = Value::from_object(&object) else {
        panic!("came back as another type");
    };
    back.sort();
    assert_eq!(Value::Hash(back), hash);
    let list = Value::List(strings(&["b", "a", "b"]));
    let Ok(Stored::Collection(object)) = list.clone().into_stored() else {
        panic!("a list is a collection");
    };
    assert_eq!(Value::from_object(&object), list, "order and repeats kept");
    for refused in [
        Value::Set(strings(&["a", "a"])),
        Value::Hash(vec![
            (b"f".to_vec(), b"1".to_vec()),
            (b"f".to_vec(), b"2".to_vec()),
        ]),
        Value::SortedSet(vec![(b"m".to_vec(), 1.0), (b"m".to_vec(), 2.0)]),
        Value::SortedSet(vec![(b"m".to_vec(), f64::NAN)]),
    ] {
        assert!(refused.clone().into_stored().is_err(), "{refused:?}");
    }
}

/// A file on disk through `FileReader::open` (its checksum in one pass,
/// then records through the window) reads as in memory.
#[test]
fn files_on_disk_read_like_in_memory() {
    let data = version9_file();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.rdb");
    std::fs::write(&path, &data).unwrap();
    let mut from_disk = FileReader::open(&path).unwrap();
    let mut in_memory = FileReader::new(&data).unwrap();
    loop {
        let (a, b) = (
            from_disk.next_record().unwrap(),
            in_memory.next_record().unwrap(),
        );
        match (a, b) {
            (Some(a), Some(b)) => {
                assert_eq!(
                    (a.db, a.key, a.value, a.expire_at_ms, a.offset),
                    (b.db, b.key, b.value, b.expire_at_ms, b.offset)
                );
            }
            (None, None) => break,
            _ => panic!("one reader ended before the other"),
        }
    }
    let mut damaged = data.clone();
    damaged[30] ^= 1;
    std::fs::write(&path, &damaged).unwrap();
    let e = FileReader::open(&path)
        .err()
        .expect("a damaged file opened");
    assert!(e.message.contains("checksum"), "{e}");
    std::fs::write(&path, &data[..data.len() - 3]).unwrap();
    assert!(FileReader::open(&path).is_err());
}
