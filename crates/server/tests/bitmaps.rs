//! The bitmap commands over real TCP: SETBIT GETBIT BITCOUNT BITPOS BITOP
//! BITFIELD BITFIELD_RO. Every scripted reply is checked against a real
//! redis-server 7.0 in the same test, and randomized inputs are run on
//! both servers with the replies and resulting values compared.

mod common;

use common::{arity, redis_con, script_both, start, SYNTAX, WRONGTYPE};
use rand::{Rng, SeedableRng};

const OFFSET: &str = "(error) ERR bit offset is not an integer or out of range";
const BIT: &str = "(error) ERR bit is not an integer or out of range";
const BAD_TYPE: &str = "(error) ERR Invalid bitfield type. Use something like i16 u8. Note that \
                        u64 is not supported but i64 is.";

#[test]
fn setbit_getbit_and_their_errors() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    script_both(
        &mut e,
        &mut r,
        &[
            ("SETBIT b 7 1", "(integer) 0"),
            ("SETBIT b 7 1", "(integer) 1"),
            ("GET b", "\"\\u{1}\""),
            ("SETBIT b 100 1", "(integer) 0"),
            ("STRLEN b", "(integer) 13"),
            ("GETBIT b 100", "(integer) 1"),
            ("GETBIT b 101", "(integer) 0"),
            ("GETBIT b 999999", "(integer) 0"),
            ("GETBIT nokey 3", "(integer) 0"),
            ("SETBIT b 7 0", "(integer) 1"),
            // Offsets: not negative, their byte below 512 MB.
            ("SETBIT b 4294967296 1", OFFSET),
            ("SETBIT b -1 1", OFFSET),
            ("SETBIT b x 1", OFFSET),
            ("GETBIT b 4294967296", OFFSET),
            ("GETBIT b -1", OFFSET),
            ("SETBIT b 0 2", BIT),
            ("SETBIT b 0 -1", BIT),
            ("SETBIT b 0 x", BIT),
            ("SETBIT b 0", &arity("setbit")),
            ("GETBIT b", &arity("getbit")),
            // An integer-encoded string is its digits.
            ("SET n 1", "OK"),
            ("GETBIT n 2", "(integer) 1"),
            ("SETBIT n 6 1", "(integer) 0"),
            ("GET n", "\"3\""),
            // Bits that spell an integer stay usable as one, and the
            // reverse.
            ("SETBIT z 2 1", "(integer) 0"),
            ("SETBIT z 3 1", "(integer) 0"),
            ("GET z", "\"0\""),
            ("INCR z", "(integer) 1"),
            ("SETBIT z 7 0", "(integer) 1"),
            ("GET z", "\"0\""),
            ("LPUSH list a", "(integer) 1"),
            ("SETBIT list 0 1", WRONGTYPE),
            ("GETBIT list 0", WRONGTYPE),
        ],
    );
}

#[test]
fn setbit_keeps_the_ttl_and_works_in_multi() {
    let (server, _dir) = start();
    let mut c = common::Client::connect(&server);
    c.script(&[
        ("SET k \"\"", "OK"),
        ("EXPIRE k 100", "(integer) 1"),
        ("SETBIT k 3 1", "(integer) 0"),
        ("TTL k", "(integer) 100"),
        ("MULTI", "OK"),
        ("SETBIT k 4 1", "QUEUED"),
        ("GETBIT k 4", "QUEUED"),
        ("BITCOUNT k", "QUEUED"),
        ("EXEC", "[(integer) 0, (integer) 1, (integer) 2]"),
    ]);
}

#[test]
fn bitcount_bitpos_bitop_and_their_errors() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    script_both(
        &mut e,
        &mut r,
        &[
            ("SET s foobar", "OK"),
            ("BITCOUNT s", "(integer) 26"),
            ("BITCOUNT s 0 0", "(integer) 4"),
            ("BITCOUNT s 1 1", "(integer) 6"),
            ("BITCOUNT s 1 1 BYTE", "(integer) 6"),
            ("BITCOUNT s 5 30 BIT", "(integer) 17"),
            ("BITCOUNT s -2 -1", "(integer) 7"),
            ("BITCOUNT s -1 -2", "(integer) 0"),
            ("BITCOUNT s 100 200", "(integer) 0"),
            ("BITCOUNT nokey", "(integer) 0"),
            // An absent key is 0 before its arguments are looked at.
            ("BITCOUNT nokey x y", "(integer) 0"),
            ("BITCOUNT s 0", SYNTAX),
            ("BITCOUNT s 0 1 BITS", SYNTAX),
            ("BITCOUNT s 0 1 BIT x", SYNTAX),
            ("BITCOUNT s x 1", common::NOT_INT),
            ("BITCOUNT", &arity("bitcount")),
            ("SET q \"\"", "OK"),
            ("SETBIT q 12 1", "(integer) 0"),
            ("BITPOS q 1", "(integer) 12"),
            ("BITPOS q 0", "(integer) 0"),
            ("BITPOS q 1 2", "(integer) -1"),
            ("BITPOS q 0 1", "(integer) 8"),
            ("BITPOS q 1 1 1", "(integer) 12"),
            ("BITPOS q 1 7 15 BIT", "(integer) 12"),
            ("BITPOS q 1 13 15 BIT", "(integer) -1"),
            ("BITPOS q 0 12 12 BIT", "(integer) -1"),
            ("BITPOS nokey 1", "(integer) -1"),
            ("BITPOS nokey 0", "(integer) 0"),
            ("BITPOS q 2", "(error) ERR The bit argument must be 1 or 0."),
            ("BITPOS q x", common::NOT_INT),
            ("BITPOS q 1 0 1 BITS", SYNTAX),
            ("BITPOS q 1 0 1 BIT x", SYNTAX),
            ("BITPOS q 1 x", common::NOT_INT),
            ("SET a abc", "OK"),
            ("SET b ab", "OK"),
            ("BITOP AND d a b", "(integer) 3"),
            ("GET d", "\"ab\\0\""),
            ("BITOP OR d a b nokey", "(integer) 3"),
            ("GET d", "\"abc\""),
            ("BITOP XOR d a b", "(integer) 3"),
            ("GET d", "\"\\0\\0c\""),
            ("BITOP NOT d b", "(integer) 2"),
            (
                "BITOP NOT d a b",
                "(error) ERR BITOP NOT must be called with a single source key.",
            ),
            ("BITOP NAND d a b", SYNTAX),
            ("EXPIRE d 100", "(integer) 1"),
            // An empty result deletes the destination.
            ("BITOP AND d nokey other", "(integer) 0"),
            ("EXISTS d", "(integer) 0"),
            ("LPUSH list a", "(integer) 1"),
            ("BITOP AND d a list", WRONGTYPE),
            ("BITCOUNT list", WRONGTYPE),
            ("BITPOS list 1", WRONGTYPE),
            ("BITOP AND d", &arity("bitop")),
        ],
    );
}

#[test]
fn bitfield_and_its_errors() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    script_both(
        &mut e,
        &mut r,
        &[
            (
                "BITFIELD f SET i8 0 -100 GET i8 0",
                "[(integer) 0, (integer) -100]",
            ),
            (
                "BITFIELD f SET u8 #1 255 GET u16 0",
                "[(integer) 0, (integer) 40191]",
            ),
            (
                "BITFIELD f INCRBY u2 100 1 OVERFLOW SAT INCRBY u2 102 1",
                "[(integer) 1, (integer) 1]",
            ),
            ("BITFIELD f OVERFLOW FAIL INCRBY u2 100 5", "[(nil)]"),
            (
                "BITFIELD f OVERFLOW WRAP INCRBY i64 200 9223372036854775807 INCRBY i64 200 1",
                "[(integer) 9223372036854775807, (integer) -9223372036854775808]",
            ),
            (
                "BITFIELD f OVERFLOW SAT SET u8 0 -1 GET u8 0",
                "[(integer) 156, (integer) 255]",
            ),
            ("BITFIELD f", "[]"),
            ("BITFIELD nokey GET u8 0", "[(integer) 0]"),
            ("EXISTS nokey", "(integer) 0"),
            // A write creates the key even when its one write fails.
            ("BITFIELD fresh OVERFLOW FAIL INCRBY u2 10 9", "[(nil)]"),
            ("STRLEN fresh", "(integer) 2"),
            (
                "BITFIELD_RO f GET u8 8 GET i4 #2",
                "[(integer) 255, (integer) -1]",
            ),
            ("BITFIELD_RO f", "[]"),
            ("BITFIELD f GET i65 0", BAD_TYPE),
            ("BITFIELD f GET u64 0", BAD_TYPE),
            ("BITFIELD f GET i0 0", BAD_TYPE),
            ("BITFIELD f GET x8 0", BAD_TYPE),
            ("BITFIELD f GET u8 -1", OFFSET),
            ("BITFIELD f GET u8 4294967296", OFFSET),
            ("BITFIELD f SET u8 #536870912 1", OFFSET),
            ("BITFIELD f SET u8 0 x", common::NOT_INT),
            (
                "BITFIELD f OVERFLOW MAYBE",
                "(error) ERR Invalid OVERFLOW type specified",
            ),
            ("BITFIELD f FOO", SYNTAX),
            ("BITFIELD f GET u8", SYNTAX),
            ("BITFIELD f SET u8 0", SYNTAX),
            (
                "BITFIELD_RO f SET u8 0 1",
                "(error) ERR BITFIELD_RO only supports the GET subcommand",
            ),
            (
                "BITFIELD_RO f INCRBY u8 0 1",
                "(error) ERR BITFIELD_RO only supports the GET subcommand",
            ),
            ("LPUSH list a", "(integer) 1"),
            ("BITFIELD list GET u8 0", WRONGTYPE),
            ("BITFIELD list SET u8 0 1", WRONGTYPE),
            ("BITFIELD_RO list GET u8 0", WRONGTYPE),
            ("BITFIELD", &arity("bitfield")),
        ],
    );
}

/// The same random commands on Engram and Redis: identical replies, and
/// identical values at the end.
#[test]
fn random_bit_commands_match_redis() {
    let (server, _dir, redis, mut e, mut r) = common::beside_redis();
    let (mut econ, mut rcon) = (redis_con(server.addr), redis.con());
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5e7b17);
    let keys = ["k0", "k1", "k2"];
    for round in 0..40 {
        // Fresh random bitmaps, some mostly ones or zeros so BITPOS has
        // long runs to skip.
        for key in keys {
            let len = rng.random_range(0..80);
            let fill: u8 = match rng.random_range(0..3) {
                0 => 0,
                1 => 0xff,
                _ => rng.random(),
            };
            let value: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.random_bool(0.1) {
                        rng.random()
                    } else {
                        fill
                    }
                })
                .collect();
            for con in [&mut econ, &mut rcon] {
                redis::cmd("SET").arg(key).arg(&value).exec(con).unwrap();
            }
        }
        for _ in 0..60 {
            let command = random_command(&mut rng, &keys);
            let (engram, reference) = (e.call(&command), r.call(&command));
            assert_eq!(engram, reference, "round {round}: `{command}`");
        }
        for key in keys {
            let get = |con: &mut redis::Connection| -> Option<Vec<u8>> {
                redis::cmd("GET").arg(key).query(con).unwrap()
            };
            assert_eq!(
                get(&mut econ),
                get(&mut rcon),
                "round {round}: value of {key}"
            );
        }
    }
}

fn random_command(rng: &mut impl Rng, keys: &[&str]) -> String {
    let key = keys[rng.random_range(0..keys.len())];
    let index = |rng: &mut dyn rand::RngCore| -> i64 {
        match rng.random_range(0..4) {
            0 => rng.random_range(-700..-1),
            1 => rng.random_range(0..700),
            2 => rng.random_range(-100..100),
            _ => rng.random_range(0..10),
        }
    };
    let unit = |rng: &mut dyn rand::RngCore| match rng.random_range(0..3) {
        0 => "",
        1 => " BYTE",
        _ => " BIT",
    };
    match rng.random_range(0..8) {
        0 => format!(
            "SETBIT {key} {} {}",
            rng.random_range(0..700),
            rng.random_range(0..2)
        ),
        1 => format!("GETBIT {key} {}", rng.random_range(0..700)),
        2 => match rng.random_range(0..2) {
            0 => format!("BITCOUNT {key}"),
            _ => format!("BITCOUNT {key} {} {}{}", index(rng), index(rng), unit(rng)),
        },
        3 | 4 => {
            let bit = rng.random_range(0..2);
            match rng.random_range(0..4) {
                0 => format!("BITPOS {key} {bit}"),
                1 => format!("BITPOS {key} {bit} {}", index(rng)),
                2 => format!("BITPOS {key} {bit} {} {}", index(rng), index(rng)),
                _ => format!(
                    "BITPOS {key} {bit} {} {}{}",
                    index(rng),
                    index(rng),
                    unit(rng)
                ),
            }
        }
        5 => {
            let op = ["AND", "OR", "XOR", "NOT"][rng.random_range(0..4)];
            let sources = if op == "NOT" {
                1
            } else {
                rng.random_range(1..4)
            };
            let mut command = format!("BITOP {op} {}", keys[rng.random_range(0..keys.len())]);
            for _ in 0..sources {
                command.push(' ');
                command.push_str(keys[rng.random_range(0..keys.len())]);
            }
            command
        }
        _ => {
            let mut command = format!(
                "{} {key}",
                if rng.random_bool(0.2) {
                    "BITFIELD_RO"
                } else {
                    "BITFIELD"
                }
            );
            for _ in 0..rng.random_range(1..5) {
                let signed = rng.random_bool(0.5);
                let bits = if signed {
                    rng.random_range(1..=64)
                } else {
                    rng.random_range(1..=63)
                };
                let ty = format!("{}{bits}", if signed { 'i' } else { 'u' });
                let offset = if rng.random_bool(0.2) {
                    format!("#{}", rng.random_range(0..20))
                } else {
                    rng.random_range(0..700).to_string()
                };
                let value: i64 = match rng.random_range(0..3) {
                    0 => rng.random_range(-300..300),
                    1 => rng.random(),
                    _ => 1i64 << rng.random_range(0..63),
                };
                let part = match rng.random_range(0..4) {
                    0 => format!(" GET {ty} {offset}"),
                    1 => format!(" SET {ty} {offset} {value}"),
                    2 => format!(" INCRBY {ty} {offset} {value}"),
                    _ => format!(
                        " OVERFLOW {}",
                        ["WRAP", "SAT", "FAIL"][rng.random_range(0..3)]
                    ),
                };
                command.push_str(&part);
            }
            command
        }
    }
}

/// A large value is counted in place (no copy): 32 MB, several ranges.
#[test]
fn bitcount_and_bitpos_on_a_large_value() {
    let (server, _dir) = start();
    let mut con = redis_con(server.addr);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut value = vec![0u8; 32 << 20];
    rng.fill(&mut value[..]);
    let expected: u64 = value.iter().map(|b| u64::from(b.count_ones())).sum();
    redis::cmd("SET")
        .arg("big")
        .arg(&value)
        .exec(&mut con)
        .unwrap();
    let count: u64 = redis::cmd("BITCOUNT").arg("big").query(&mut con).unwrap();
    assert_eq!(count, expected);
    let tail: u64 = redis::cmd("BITCOUNT")
        .arg("big")
        .arg(-1000)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    let expected_tail: u64 = value[value.len() - 1000..]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    assert_eq!(tail, expected_tail);
    // A run of zeros to skip, then one set bit near the end.
    let mut zeros = vec![0u8; 32 << 20];
    zeros[(32 << 20) - 3] = 0x08;
    redis::cmd("SET")
        .arg("zeros")
        .arg(&zeros)
        .exec(&mut con)
        .unwrap();
    let pos: i64 = redis::cmd("BITPOS")
        .arg("zeros")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(pos, ((32i64 << 20) - 3) * 8 + 4);
}
