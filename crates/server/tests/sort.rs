//! SORT and SORT_RO over real TCP, compared reply by reply with a real
//! redis-server 7.0.15: lists, sets and sorted sets; numeric and ALPHA;
//! BY keys, hash fields and nosort; LIMIT; GET (#, keys, hash fields);
//! STORE; and the errors for bad input.

mod common;

use common::same;
use common::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The same data on both: a list, a set and a sorted set of ids, and
/// per id a weight string, a name string and a hash.
fn load(e: &mut Client, r: &mut Client, rng: &mut StdRng) {
    let n = 60;
    let mut used = std::collections::HashSet::new();
    for i in 0..n {
        // Distinct weights: equal ones would leave the order to the sort's
        // stability, which Redis does not promise.
        let weight = loop {
            let w = if rng.random_bool(0.5) {
                format!("{}", rng.random_range(-1000..1000))
            } else {
                format!("{:.3}", rng.random_range(-100.0..100.0))
            };
            if used.insert(w.clone()) {
                break w;
            }
        };
        let name = format!("n{:03}", rng.random_range(0..1000) * 1000 + i);
        same(
            e,
            r,
            &[
                &format!("RPUSH list {i}"),
                &format!("SADD set {i}"),
                &format!("ZADD zset {} {i}", rng.random_range(0..1000) * 100 + i),
                &format!("SET w_{i} {weight}"),
                &format!("SET name_{i} {name}"),
                &format!("HSET h_{i} weight {weight} name {name}"),
            ],
        );
    }
    // A few elements without weight keys, and words for ALPHA.
    same(
        e,
        r,
        &[
            "RPUSH list 1000 1001",
            "RPUSH words banana Apple cherry apple 10 9 ''",
            "SADD wordset banana Apple cherry apple 10 9",
        ],
    );
}

#[test]
fn sorts_match_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    let mut rng = StdRng::seed_from_u64(5);
    load(&mut e, &mut r, &mut rng);
    let mut commands: Vec<String> = vec![
        "SORT list".into(),
        "SORT list DESC".into(),
        "SORT set".into(),
        "SORT zset".into(),
        "SORT zset BY nosort".into(),
        "SORT zset BY nosort DESC LIMIT 3 5".into(),
        "SORT list BY nosort".into(),
        "SORT list BY nosort DESC LIMIT 2 4".into(),
        "SORT list BY nosort LIMIT 60 10".into(),
        "SORT words ALPHA".into(),
        "SORT words ALPHA DESC".into(),
        "SORT wordset ALPHA".into(),
        "SORT words".into(),
        "SORT list GET # GET w_* GET h_*->name GET nosuch GET h_*->nosuch".into(),
        "SORT set BY w_* GET # GET name_*".into(),
        "SORT set BY h_*->weight".into(),
        "SORT set BY name_* ALPHA".into(),
        "SORT set BY h_*->name ALPHA DESC".into(),
        "SORT list BY w_* LIMIT 5 10".into(),
        "SORT list LIMIT -5 3".into(),
        "SORT list LIMIT 3 -1".into(),
        "SORT list LIMIT 1000 3".into(),
        "SORT list LIMIT 0 0".into(),
        "SORT nokey".into(),
        "SORT nokey GET # GET w_*".into(),
        "SORT_RO list BY w_* GET #".into(),
        "SORT list BY w_* STORE out".into(),
        "LRANGE out 0 -1".into(),
        "SORT set BY nosort STORE out".into(),
        "LRANGE out 0 -1".into(),
        "SORT list GET name_* GET nosuch STORE out".into(),
        "LRANGE out 0 -1".into(),
        "SORT nokey STORE out".into(),
        "EXISTS out".into(),
        "TYPE out".into(),
    ];
    // Random combinations of the options.
    for _ in 0..150 {
        let source = ["list", "set", "zset"][rng.random_range(0..3)];
        let mut command = format!("SORT {source}");
        match rng.random_range(0..4) {
            0 => command.push_str(" BY w_*"),
            1 => command.push_str(" BY h_*->weight"),
            2 if source != "set" => command.push_str(" BY nosort"),
            _ => {}
        }
        if rng.random_bool(0.5) {
            command.push_str(&format!(
                " LIMIT {} {}",
                rng.random_range(-2..70),
                rng.random_range(-2..30)
            ));
        }
        for _ in 0..rng.random_range(0..3) {
            command.push_str(
                [" GET #", " GET w_*", " GET h_*->name", " GET name_*"][rng.random_range(0..4)],
            );
        }
        if rng.random_bool(0.5) {
            command.push_str(" DESC");
        }
        if rng.random_bool(0.3) {
            command.push_str(" ALPHA");
        }
        commands.push(command);
    }
    for command in &commands {
        same(&mut e, &mut r, &[command]);
    }
}

#[test]
fn bad_input_errors_match_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            "RPUSH l 3 1 2 x",
            "SET s str",
            "HSET h f v",
            "RPUSH nums 3 1 2",
            "SET w_1 abc",
        ],
    );
    let errors = [
        ("SORT s", common::WRONGTYPE),
        ("SORT h", common::WRONGTYPE),
        ("SORT_RO s", common::WRONGTYPE),
        ("SORT", &common::arity("sort")),
        ("SORT l BOGUS", common::SYNTAX),
        ("SORT l LIMIT 1", common::SYNTAX),
        ("SORT l BY", common::SYNTAX),
        ("SORT l GET", common::SYNTAX),
        ("SORT_RO l STORE out", common::SYNTAX),
        // Options are checked before the key's type.
        ("SORT s BOGUS", common::SYNTAX),
        ("SORT l LIMIT x 1", common::NOT_INT),
        ("SORT l LIMIT 0 99999999999999999999", common::NOT_INT),
        (
            "SORT l",
            "(error) ERR One or more scores can't be converted into double",
        ),
        (
            "SORT nums BY w_*",
            "(error) ERR One or more scores can't be converted into double",
        ),
    ];
    for (command, expected) in errors {
        let replies = same(&mut e, &mut r, &[command]);
        assert_eq!(replies[0], expected, "{command}");
    }
    // A STORE that fails leaves the destination alone.
    same(
        &mut e,
        &mut r,
        &["SET out keep", "SORT l STORE out", "GET out"],
    );
}

#[test]
fn command_getkeys_matches_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    for command in [
        "COMMAND GETKEYS sort abc store def",
        "COMMAND GETKEYS sort abc store invalid store stillbad store def",
        "COMMAND GETKEYS sort abc limit 0 1 by store get store store x",
        "COMMAND GETKEYS sort abc",
        "COMMAND GETKEYS sort_ro abc",
        "COMMAND GETKEYS zunionstore dst 2 a b WEIGHTS 1 2",
        "COMMAND GETKEYS zunion 2 a b WITHSCORES",
        "COMMAND GETKEYS zintercard 3 a b c LIMIT 1",
        "COMMAND GETKEYS zdiffstore dst 1 a",
        "COMMAND GETKEYS zmpop 2 a b MIN",
        "COMMAND GETKEYS bzmpop 0 2 a b MAX COUNT 2",
        "COMMAND GETKEYS bzpopmin a b 0",
        "COMMAND GETKEYS georadius g 1 1 1 km STORE s",
        "COMMAND GETKEYS georadius g 1 1 1 km STORE s STOREDIST t",
        "COMMAND GETKEYS georadiusbymember g m 1 km",
        "COMMAND GETKEYS geosearchstore dst src FROMMEMBER m BYRADIUS 1 km",
        "COMMAND GETKEYS get k",
        "COMMAND GETKEYS nosuchcommand k",
        "COMMAND GETKEYS ping",
        "COMMAND GETKEYS ping x",
        "COMMAND GETKEYS set k",
        "COMMAND GETKEYS get",
        "COMMAND GETKEYS zunion 5 a b",
    ] {
        same(&mut e, &mut r, &[command]);
    }
}

#[test]
fn inside_exec_sort_reads_pattern_keys_and_stores() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            "RPUSH l 1 2 3",
            "MSET w_1 30 w_2 10 w_3 20 n_1 a n_2 b n_3 c",
            "MULTI",
            "SORT l BY w_* GET n_* GET #",
            "SORT l BY w_* GET n_* STORE x STORE out",
            "LRANGE out 0 -1",
            "SORT_RO l BY nosort DESC",
            "EXEC",
        ],
    );
}
