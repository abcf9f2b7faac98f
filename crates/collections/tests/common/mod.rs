//! Random operations over a few keys of every type, shared by the model
//! tests (the small key and member spaces make operations meet: members
//! repeat, keys empty, renames land on keys of other types).

use engram_collections::Op;
use rand::rngs::StdRng;
use rand::Rng;

pub fn b(bytes: &[u8]) -> Box<[u8]> {
    bytes.into()
}

pub const KEYS: &[&[u8]] = &[b"h1", b"h2", b"s1", b"s2", b"z1", b"z2", b"l1", b"l2"];

pub fn random_op(rng: &mut StdRng) -> Op {
    let key = b(KEYS[rng.random_range(0..KEYS.len())]);
    let other = b(KEYS[rng.random_range(0..KEYS.len())]);
    let word = |rng: &mut StdRng| b(format!("m{}", rng.random_range(0..12)).as_bytes());
    match key[0] {
        _ if rng.random_ratio(1, 25) => Op::Delete { key },
        _ if rng.random_ratio(1, 25) => Op::Expire {
            key,
            at_ms: rng.random_range(0..3) * 1_000_000,
        },
        _ if rng.random_ratio(1, 30) => Op::Rename {
            from: key,
            to: other,
        },
        _ if rng.random_ratio(1, 30) => Op::Copy {
            from: key,
            to: other,
        },
        b'h' => match rng.random_range(0..3) {
            0 | 1 => Op::HashSet {
                key,
                pairs: (0..rng.random_range(1..4))
                    .map(|_| (word(rng), word(rng)))
                    .collect(),
            },
            _ => Op::HashDelete {
                key,
                fields: (0..rng.random_range(1..4)).map(|_| word(rng)).collect(),
            },
        },
        b's' => match rng.random_range(0..3) {
            0 | 1 => Op::SetAdd {
                key,
                members: (0..rng.random_range(1..4)).map(|_| word(rng)).collect(),
            },
            _ => Op::SetRemove {
                key,
                members: (0..rng.random_range(1..4)).map(|_| word(rng)).collect(),
            },
        },
        b'z' => match rng.random_range(0..3) {
            0 | 1 => Op::SortedSetAdd {
                key,
                pairs: (0..rng.random_range(1..4))
                    .map(|_| (rng.random_range(-5..5) as f64 * 0.5, word(rng)))
                    .collect(),
            },
            _ => Op::SortedSetRemove {
                key,
                members: (0..rng.random_range(1..4)).map(|_| word(rng)).collect(),
            },
        },
        _ => match rng.random_range(0..8) {
            0 | 1 => Op::ListPush {
                key,
                front: rng.random(),
                values: (0..rng.random_range(1..4)).map(|_| word(rng)).collect(),
            },
            2 => Op::ListPop {
                key,
                front: rng.random(),
                count: rng.random_range(1..3),
            },
            3 => Op::ListSet {
                key,
                index: rng.random_range(0..4),
                value: word(rng),
            },
            4 => Op::ListInsert {
                key,
                before: rng.random(),
                pivot: word(rng),
                value: word(rng),
            },
            5 => Op::ListRemove {
                key,
                count: rng.random_range(-2..3),
                value: word(rng),
            },
            6 => Op::ListTrim {
                key,
                start: rng.random_range(-4..3),
                stop: rng.random_range(-4..4),
            },
            _ => Op::ListMove {
                from: key,
                to: other,
                from_front: rng.random(),
                to_front: rng.random(),
            },
        },
    }
}

/// The stream keys `random_stream_op` works on.
#[allow(dead_code)]
pub const STREAM_KEYS: &[&[u8]] = &[b"x1", b"x2"];

#[allow(dead_code)]
/// A random stream operation on one of `STREAM_KEYS`. `clock` moves IDs
/// forward (some still land at or below a stream's last ID, which apply
/// ignores, as it must).
pub fn random_stream_op(rng: &mut StdRng, clock: &mut u64) -> Op {
    use engram_collections::types::StreamId;
    let key = b(STREAM_KEYS[rng.random_range(0..STREAM_KEYS.len())]);
    let group = b(format!("g{}", rng.random_range(0..2)).as_bytes());
    let consumer = b(format!("c{}", rng.random_range(0..3)).as_bytes());
    let near = |rng: &mut StdRng, clock: u64| {
        StreamId::new(
            clock.saturating_sub(rng.random_range(0..6)),
            rng.random_range(0..3),
        )
    };
    let word = |rng: &mut StdRng| b(format!("f{}", rng.random_range(0..3)).as_bytes());
    match rng.random_range(0..16) {
        0..=4 => {
            *clock += rng.random_range(0..2);
            let pairs = rng.random_range(1..3);
            Op::StreamAdd {
                key,
                id: StreamId::new(*clock, rng.random_range(0..3)),
                fields: (0..pairs * 2).map(|_| word(rng)).collect(),
            }
        }
        5 => Op::StreamTrim {
            key,
            count: rng.random_range(0..4),
        },
        6 => Op::StreamDelete {
            key,
            ids: (0..rng.random_range(1..3))
                .map(|_| near(rng, *clock))
                .collect(),
        },
        7 => Op::StreamSetMeta {
            key,
            last_id: StreamId::new(*clock + 1, 0),
            entries_added: rng.random_range(0..100),
            max_deleted_id: near(rng, *clock),
            first_id: near(rng, *clock),
        },
        8 => Op::GroupCreate {
            key,
            group,
            last_id: near(rng, *clock),
            entries_read: rng.random_range(-1..5),
        },
        9 => Op::GroupSetId {
            key,
            group,
            last_id: near(rng, *clock),
            entries_read: rng.random_range(-1..5),
        },
        10 if rng.random_ratio(1, 3) => Op::GroupDestroy { key, group },
        10 => Op::ConsumerDelete {
            key,
            group,
            consumer,
        },
        11 => Op::ConsumerTouch {
            key,
            group,
            consumer,
            seen_ms: rng.random_range(0..1000),
        },
        12 | 13 => Op::PendingClaim {
            key,
            group,
            consumer,
            entries: (0..rng.random_range(1..4))
                .map(|_| {
                    (
                        near(rng, *clock),
                        rng.random_range(0..1000),
                        rng.random_range(1..4),
                    )
                })
                .collect(),
        },
        14 => Op::PendingAck {
            key,
            group,
            ids: (0..rng.random_range(1..3))
                .map(|_| near(rng, *clock))
                .collect(),
        },
        _ if rng.random_ratio(1, 2) => Op::Delete { key },
        _ => Op::Rename {
            from: key,
            to: b(STREAM_KEYS[rng.random_range(0..STREAM_KEYS.len())]),
        },
    }
}
