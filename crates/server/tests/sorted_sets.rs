//! Sorted-set commands over real TCP, reply by reply, as Redis 7.0 answers
//! (RESP2 and RESP3), plus a randomized comparison against a model through
//! the `redis` crate, persistence across a restart, and MULTI/EXEC.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::{arity, start, Client, NOT_FLOAT, NOT_INT, SYNTAX, WRONGTYPE};
use engram_server::Server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const NOT_FLOAT_RANGE: &str = "(error) ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "(error) ERR min or max not valid string range item";

#[test]
fn zadd_options_and_point_reads() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZADD z 1 a 2 b 3 c", "(integer) 3"),
        ("ZADD z 1 a", "(integer) 0"),
        ("ZADD z CH 5 a", "(integer) 1"),
        ("ZSCORE z a", "\"5\""),
        ("ZADD z NX 10 a 4 d", "(integer) 1"),
        ("ZSCORE z a", "\"5\""),
        ("ZSCORE z d", "\"4\""),
        ("ZADD z XX 10 a 7 e", "(integer) 0"),
        ("ZSCORE z a", "\"10\""),
        ("ZSCORE z e", "(nil)"),
        ("ZADD z XX CH 11 a 7 e", "(integer) 1"),
        ("ZADD z GT 1 a", "(integer) 0"),
        ("ZSCORE z a", "\"11\""),
        ("ZADD z GT CH 12 a", "(integer) 1"),
        ("ZADD z LT CH 13 a", "(integer) 0"),
        ("ZADD z LT CH 2 a", "(integer) 1"),
        ("ZSCORE z a", "\"2\""),
        // GT and LT only hold back updates: new members are added.
        ("ZADD z GT 5 new", "(integer) 1"),
        ("ZADD z XX GT CH 6 new 1 b", "(integer) 1"),
        ("ZSCORE z new", "\"6\""),
        ("ZSCORE z b", "\"2\""),
        // INCR, and INCR held back by NX / XX / GT / LT.
        ("ZADD z INCR 3 a", "\"5\""),
        ("ZADD z INCR NX 3 a", "(nil)"),
        ("ZADD z INCR XX 1 absent", "(nil)"),
        ("ZSCORE z absent", "(nil)"),
        ("ZADD z INCR GT -1 a", "(nil)"),
        ("ZADD z INCR LT -1 a", "\"4\""),
        ("ZADD z INCR 0 a", "\"4\""),
        ("ZADD z incr nx 7 fresh", "\"7\""),
        // A member given twice: pairs apply in order.
        ("ZADD z 1 x 2 x", "(integer) 1"),
        ("ZSCORE z x", "\"2\""),
        ("ZADD z CH 3 x 3 x", "(integer) 1"),
        ("ZADD z CH 9 y 8 y", "(integer) 2"),
        ("ZSCORE z y", "\"8\""),
        // Option errors, in Redis's order of checks.
        (
            "ZADD z XX NX 1 a",
            "(error) ERR XX and NX options at the same time are not compatible",
        ),
        (
            "ZADD z GT LT 1 a",
            "(error) ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            "ZADD z NX GT 1 a",
            "(error) ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            "ZADD z INCR 1 a 2 b",
            "(error) ERR INCR option supports a single increment-element pair",
        ),
        ("ZADD z 1 a 2", SYNTAX),
        ("ZADD z NX XX", SYNTAX),
        ("ZADD z NX 1 a foo", SYNTAX),
        ("ZADD z 1", &arity("zadd")),
        ("ZADD z abc a", NOT_FLOAT),
        ("ZADD z nan a", NOT_FLOAT),
        ("ZADD z 1e400 a", NOT_FLOAT),
        ("ZADD z 1e-400 a", NOT_FLOAT),
        ("ZADD z \\s1 a", NOT_FLOAT),
        ("ZADD z 1\\s a", NOT_FLOAT),
        ("ZADD z \"\" a", NOT_FLOAT),
        // A bad score anywhere: nothing is added.
        ("ZADD z 1 ok 2 ok2 x bad", NOT_FLOAT),
        ("ZSCORE z ok", "(nil)"),
        (
            "ZADD z inf big -inf small +inf big2 -Infinity small2",
            "(integer) 4",
        ),
        ("ZSCORE z big", "\"inf\""),
        ("ZSCORE z small2", "\"-inf\""),
        (
            "ZADD z INCR -inf big",
            "(error) ERR resulting score is not a number (NaN)",
        ),
        ("ZSCORE z big", "\"inf\""),
        ("ZADD nokey XX 1 a", "(integer) 0"),
        ("ZADD nokey XX INCR 1 a", "(nil)"),
        ("EXISTS nokey", "(integer) 0"),
        // ZINCRBY.
        ("ZINCRBY z 2.5 a", "\"6.5\""),
        ("ZINCRBY z 1 brand-new", "\"1\""),
        ("ZINCRBY z inf big", "\"inf\""),
        (
            "ZINCRBY z -inf big",
            "(error) ERR resulting score is not a number (NaN)",
        ),
        ("ZINCRBY z x a", NOT_FLOAT),
        ("ZINCRBY z 1", &arity("zincrby")),
        // As in Redis, ZINCRBY shares ZADD's parser: an option word in the
        // increment's place leaves an odd number of arguments.
        ("ZINCRBY z nx a", SYNTAX),
        // ZCARD, ZMSCORE.
        ("ZCARD z", "(integer) 13"),
        ("ZCARD nokey", "(integer) 0"),
        ("ZCARD", &arity("zcard")),
        ("ZMSCORE z a nope d", "[\"6.5\", (nil), \"4\"]"),
        ("ZMSCORE nokey a b", "[(nil), (nil)]"),
        ("ZMSCORE z", &arity("zmscore")),
        ("ZSCORE nokey a", "(nil)"),
        ("ZSCORE z", &arity("zscore")),
        ("ZSCORE z a b", &arity("zscore")),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn scores_are_formatted_like_redis() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    // Expected texts: Redis 7.0.15's replies (C's %.17g).
    let cases = [
        ("0.1", "0.10000000000000001"),
        ("1e300", "1.0000000000000001e+300"),
        ("1.5e-5", "1.5e-05"),
        ("1e17", "1e+17"),
        ("4611686018427387904", "4.6116860184273879e+18"),
        ("9223372036854775808", "9.2233720368547758e+18"),
        ("1.2345678901234568e23", "1.2345678901234569e+23"),
        ("1e-7", "9.9999999999999995e-08"),
        ("0.000001", "9.9999999999999995e-07"),
        ("5e-324", "4.9406564584124654e-324"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("7.2115e20", "7.2115000000000007e+20"),
        ("8.5561e30", "8.5561000000000006e+30"),
        ("3.4831237295068082e-193", "3.4831237295068082e-193"),
        ("1.234567e-5", "1.2345670000000001e-05"),
        ("1e21", "1e+21"),
        ("-2.5", "-2.5"),
        ("123.456", "123.456"),
        ("3.0", "3"),
        ("-17", "-17"),
        ("+inf", "inf"),
        ("-inf", "-inf"),
    ];
    for (i, (input, expected)) in cases.iter().enumerate() {
        c.script(&[
            (&format!("ZADD f {input} m{i}"), "(integer) 1"),
            (&format!("ZSCORE f m{i}"), &format!("\"{expected}\"")),
        ]);
    }
    c.script(&[
        ("ZINCRBY f 0.1 sum", "\"0.10000000000000001\""),
        ("ZINCRBY f 0.2 sum", "\"0.30000000000000004\""),
    ]);
    c.call("HELLO 3");
    c.script(&[
        ("ZSCORE f m0", "(double) 0.10000000000000001"),
        ("ZSCORE f m1", "(double) 1.0000000000000001e+300"),
        ("ZSCORE f m20", "(double) inf"),
        ("ZSCORE f m21", "(double) -inf"),
        ("ZINCRBY f 0.1 sum", "(double) 0.40000000000000002"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn ranks() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZADD r 1 a 2 b 3 c", "(integer) 3"),
        ("ZRANK r a", "(integer) 0"),
        ("ZRANK r c", "(integer) 2"),
        ("ZREVRANK r a", "(integer) 2"),
        ("ZREVRANK r c", "(integer) 0"),
        ("ZRANK r x", "(nil)"),
        ("ZRANK nokey a", "(nil)"),
        ("ZRANK r b WITHSCORE", "[(integer) 1, \"2\"]"),
        ("ZREVRANK r c withscore", "[(integer) 0, \"3\"]"),
        ("ZRANK r x WITHSCORE", "(nil array)"),
        ("ZREVRANK nokey x WITHSCORE", "(nil array)"),
        ("ZRANK r a foo", SYNTAX),
        ("ZRANK r a WITHSCORE x", &arity("zrank")),
        ("ZREVRANK r a WITHSCORE x", &arity("zrevrank")),
        ("ZRANK r", &arity("zrank")),
        // Ties are ordered by member bytes.
        ("ZADD t 1 b 1 a 1 c 0 z", "(integer) 4"),
        ("ZRANK t a", "(integer) 1"),
        ("ZRANK t c", "(integer) 3"),
        ("ZREVRANK t z", "(integer) 3"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn ranges_by_rank_and_score() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZADD s 1 a 2 b 3 c 4 d 5 e", "(integer) 5"),
        ("ZRANGE s 0 -1", "[\"a\", \"b\", \"c\", \"d\", \"e\"]"),
        ("ZRANGE s 1 2 WITHSCORES", "[\"b\", \"2\", \"c\", \"3\"]"),
        ("ZRANGE s -2 -1", "[\"d\", \"e\"]"),
        ("ZRANGE s 3 1", "[]"),
        ("ZRANGE s 10 20", "[]"),
        ("ZRANGE s -100 1", "[\"a\", \"b\"]"),
        ("ZRANGE s 0 100", "[\"a\", \"b\", \"c\", \"d\", \"e\"]"),
        ("ZRANGE s 0 -1 REV", "[\"e\", \"d\", \"c\", \"b\", \"a\"]"),
        ("ZRANGE s 0 1 REV WITHSCORES", "[\"e\", \"5\", \"d\", \"4\"]"),
        ("ZREVRANGE s 0 1", "[\"e\", \"d\"]"),
        (
            "ZREVRANGE s 1 -2 WITHSCORES",
            "[\"d\", \"4\", \"c\", \"3\", \"b\", \"2\"]",
        ),
        ("ZREVRANGE s -1 -1", "[\"a\"]"),
        ("ZREVRANGE s 5 9", "[]"),
        // BYSCORE.
        ("ZRANGE s 2 4 BYSCORE", "[\"b\", \"c\", \"d\"]"),
        ("ZRANGE s (2 4 BYSCORE", "[\"c\", \"d\"]"),
        ("ZRANGE s (2 (4 BYSCORE", "[\"c\"]"),
        ("ZRANGE s -inf +inf BYSCORE LIMIT 1 2", "[\"b\", \"c\"]"),
        ("ZRANGE s +inf -inf BYSCORE REV LIMIT 0 2", "[\"e\", \"d\"]"),
        ("ZRANGE s 4 2 BYSCORE REV", "[\"d\", \"c\", \"b\"]"),
        ("ZRANGE s 2 4 BYSCORE LIMIT 0 -1", "[\"b\", \"c\", \"d\"]"),
        ("ZRANGE s 2 4 BYSCORE LIMIT -1 2", "[]"),
        ("ZRANGE s 2 4 BYSCORE LIMIT 3 2", "[]"),
        ("ZRANGE s 2 4 BYSCORE LIMIT 2 0", "[]"),
        ("ZRANGE s 2 4 BYSCORE LIMIT 2 10", "[\"d\"]"),
        ("ZRANGE s 4 2 BYSCORE REV LIMIT 1 1", "[\"c\"]"),
        ("ZRANGEBYSCORE s 2 4 WITHSCORES LIMIT 1 1", "[\"c\", \"3\"]"),
        ("ZRANGEBYSCORE s -inf 2", "[\"a\", \"b\"]"),
        ("ZRANGEBYSCORE s 5 1", "[]"),
        ("ZRANGEBYSCORE s (1 (1", "[]"),
        ("ZRANGEBYSCORE s 1e400 +inf", "[]"),
        ("ZRANGEBYSCORE s \\s3 3", "[\"c\"]"),
        ("ZREVRANGEBYSCORE s 4 2", "[\"d\", \"c\", \"b\"]"),
        ("ZREVRANGEBYSCORE s +inf (4 WITHSCORES", "[\"e\", \"5\"]"),
        ("ZREVRANGEBYSCORE s 5 1 LIMIT 1 2", "[\"d\", \"c\"]"),
        // Errors: options first, then their conflicts, then the range.
        ("ZRANGEBYSCORE s a 1", NOT_FLOAT_RANGE),
        ("ZRANGEBYSCORE s 1 (x", NOT_FLOAT_RANGE),
        ("ZRANGEBYSCORE s nan 1", NOT_FLOAT_RANGE),
        ("ZRANGEBYSCORE s 1 2 REV", SYNTAX),
        ("ZRANGEBYSCORE s 1 2 LIMIT 1", SYNTAX),
        ("ZRANGEBYSCORE s 1 2 LIMIT a 1", NOT_INT),
        ("ZRANGEBYSCORE s x y LIMIT a 1", NOT_INT),
        (
            "ZRANGE s 0 1 LIMIT 0 1",
            "(error) ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ),
        (
            "ZREVRANGE s 0 1 LIMIT 0 1",
            "(error) ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ),
        // LIMIT o -1 is "no limit", which Redis does not count as a LIMIT.
        ("ZRANGE s 0 1 LIMIT 0 -1", "[\"a\", \"b\"]"),
        ("ZRANGE s a b", NOT_INT),
        (
            "ZRANGE s [a [c BYLEX WITHSCORES",
            "(error) ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ),
        ("ZRANGE s 0 1 BYSCORE BYLEX", SYNTAX),
        ("ZRANGE s 0 -1 foo", SYNTAX),
        ("ZREVRANGE s 0 1 REV", SYNTAX),
        ("ZRANGE s 0", &arity("zrange")),
        ("ZRANGE nokey 0 -1", "[]"),
        ("ZRANGE nokey 0 -1 BYSCORE", "[]"),
        // ZCOUNT.
        ("ZCOUNT s 2 4", "(integer) 3"),
        ("ZCOUNT s (2 4", "(integer) 2"),
        ("ZCOUNT s -inf +inf", "(integer) 5"),
        ("ZCOUNT s 4 2", "(integer) 0"),
        ("ZCOUNT nokey 0 1", "(integer) 0"),
        ("ZCOUNT s x 1", NOT_FLOAT_RANGE),
        ("ZCOUNT s 1", &arity("zcount")),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn lex_ranges() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZADD l 0 a 0 b 0 c 0 d 0 e", "(integer) 5"),
        ("ZRANGE l [b [d BYLEX", "[\"b\", \"c\", \"d\"]"),
        ("ZRANGE l (b [d BYLEX", "[\"c\", \"d\"]"),
        ("ZRANGE l - + BYLEX LIMIT 1 2", "[\"b\", \"c\"]"),
        (
            "ZRANGE l + - BYLEX REV",
            "[\"e\", \"d\", \"c\", \"b\", \"a\"]",
        ),
        ("ZRANGE l [d (b BYLEX REV", "[\"d\", \"c\"]"),
        ("ZRANGEBYLEX l - (c", "[\"a\", \"b\"]"),
        ("ZRANGEBYLEX l [bb +", "[\"c\", \"d\", \"e\"]"),
        ("ZRANGEBYLEX l [ [a", "[\"a\"]"),
        ("ZRANGEBYLEX l + -", "[]"),
        ("ZREVRANGEBYLEX l + [c LIMIT 0 2", "[\"e\", \"d\"]"),
        ("ZRANGEBYLEX l b c", NOT_LEX_RANGE),
        ("ZRANGEBYLEX l [a +x", NOT_LEX_RANGE),
        ("ZRANGEBYLEX l \"\" +", NOT_LEX_RANGE),
        (
            "ZRANGEBYLEX l - + WITHSCORES",
            "(error) ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ),
        ("ZRANGEBYLEX nokey - +", "[]"),
        ("ZLEXCOUNT l - +", "(integer) 5"),
        ("ZLEXCOUNT l [b (d", "(integer) 2"),
        ("ZLEXCOUNT l [z +", "(integer) 0"),
        ("ZLEXCOUNT l a b", NOT_LEX_RANGE),
        ("ZLEXCOUNT nokey - +", "(integer) 0"),
        ("ZREMRANGEBYLEX l [b [c", "(integer) 2"),
        ("ZRANGE l 0 -1", "[\"a\", \"d\", \"e\"]"),
        ("ZREMRANGEBYLEX l x y", NOT_LEX_RANGE),
        ("ZREMRANGEBYLEX nokey - +", "(integer) 0"),
        ("ZREMRANGEBYLEX l - +", "(integer) 3"),
        ("EXISTS l", "(integer) 0"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn removals_and_pops() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZADD q 1 a 2 b 3 c 4 d 5 e 6 f", "(integer) 6"),
        ("ZREM q a x a", "(integer) 1"),
        ("ZREM q x", "(integer) 0"),
        ("ZREM nokey a", "(integer) 0"),
        ("ZREM q", &arity("zrem")),
        ("ZREMRANGEBYRANK q 0 0", "(integer) 1"),
        ("ZREMRANGEBYRANK q -1 -1", "(integer) 1"),
        ("ZREMRANGEBYRANK q 5 10", "(integer) 0"),
        ("ZREMRANGEBYRANK q 2 1", "(integer) 0"),
        ("ZREMRANGEBYRANK q x 1", NOT_INT),
        ("ZREMRANGEBYRANK nokey 0 -1", "(integer) 0"),
        ("ZRANGE q 0 -1", "[\"c\", \"d\", \"e\"]"),
        ("ZREMRANGEBYSCORE q (3 4", "(integer) 1"),
        ("ZREMRANGEBYSCORE q x 1", NOT_FLOAT_RANGE),
        ("ZREMRANGEBYSCORE nokey 0 1", "(integer) 0"),
        ("ZREMRANGEBYSCORE q 10 20", "(integer) 0"),
        ("ZRANGE q 0 -1 WITHSCORES", "[\"c\", \"3\", \"e\", \"5\"]"),
        ("ZREMRANGEBYSCORE q -inf +inf", "(integer) 2"),
        ("EXISTS q", "(integer) 0"),
        ("ZADD q 1 a", "(integer) 1"),
        ("ZREM q a", "(integer) 1"),
        ("EXISTS q", "(integer) 0"),
        ("ZADD q 1 a 2 b", "(integer) 2"),
        ("ZREMRANGEBYRANK q 0 -1", "(integer) 2"),
        ("EXISTS q", "(integer) 0"),
        // Pops.
        ("ZADD p 1 a 2 b 3 c 4 d", "(integer) 4"),
        ("ZPOPMIN p", "[\"a\", \"1\"]"),
        ("ZPOPMAX p", "[\"d\", \"4\"]"),
        ("ZPOPMIN p 0", "[]"),
        (
            "ZPOPMIN p -1",
            "(error) ERR value is out of range, must be positive",
        ),
        (
            "ZPOPMIN p x",
            "(error) ERR value is out of range, must be positive",
        ),
        ("ZPOPMIN p 1 2", SYNTAX),
        ("ZPOPMAX p 10", "[\"c\", \"3\", \"b\", \"2\"]"),
        ("EXISTS p", "(integer) 0"),
        ("ZPOPMIN p", "[]"),
        ("ZPOPMAX nokey 5", "[]"),
        ("ZADD p 1 a 2 b 3 c", "(integer) 3"),
        ("ZPOPMIN p 2", "[\"a\", \"1\", \"b\", \"2\"]"),
        ("ZPOPMIN p 9223372036854775807", "[\"c\", \"3\"]"),
        ("EXISTS p", "(integer) 0"),
        ("ZPOPMIN", &arity("zpopmin")),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn resp3_replies() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.call("HELLO 3");
    c.script(&[
        ("ZADD r3 1.5 a 2 b", "(integer) 2"),
        ("ZSCORE r3 a", "(double) 1.5"),
        ("ZMSCORE r3 a x", "[(double) 1.5, (nil)]"),
        ("ZINCRBY r3 1 b", "(double) 3"),
        ("ZADD r3 INCR 1 b", "(double) 4"),
        ("ZADD r3 INCR NX 1 b", "(nil)"),
        (
            "ZRANGE r3 0 -1 WITHSCORES",
            "[[\"a\", (double) 1.5], [\"b\", (double) 4]]",
        ),
        ("ZRANGE r3 0 -1", "[\"a\", \"b\"]"),
        (
            "ZRANGEBYSCORE r3 -inf +inf WITHSCORES LIMIT 1 1",
            "[[\"b\", (double) 4]]",
        ),
        ("ZREVRANGE r3 0 0 WITHSCORES", "[[\"b\", (double) 4]]"),
        (
            "ZREVRANGEBYSCORE r3 +inf -inf WITHSCORES",
            "[[\"b\", (double) 4], [\"a\", (double) 1.5]]",
        ),
        ("ZRANGE r3 5 9 WITHSCORES", "[]"),
        ("ZRANK r3 b WITHSCORE", "[(integer) 1, (double) 4]"),
        ("ZRANK r3 x WITHSCORE", "(nil)"),
        ("ZRANK r3 x", "(nil)"),
        (
            "ZRANDMEMBER r3 5 WITHSCORES",
            "[[\"a\", (double) 1.5], [\"b\", (double) 4]]",
        ),
        ("ZRANDMEMBER nokey 5", "[]"),
        ("ZRANDMEMBER nokey", "(nil)"),
        // ZSCAN sends scores as bulk strings in RESP3 too.
        ("ZSCAN r3 0", "[\"0\", [\"a\", \"1.5\", \"b\", \"4\"]]"),
        ("ZPOPMIN r3", "[\"a\", (double) 1.5]"),
        ("ZPOPMAX r3 1", "[[\"b\", (double) 4]]"),
        ("ZRANGE nokey 0 -1", "[]"),
        ("ZPOPMIN nokey", "[]"),
        ("ZSCORE nokey a", "(nil)"),
        ("ZADD r3 inf i -inf j", "(integer) 2"),
        ("ZSCORE r3 i", "(double) inf"),
        (
            "ZPOPMIN r3 5",
            "[[\"j\", (double) -inf], [\"i\", (double) inf]]",
        ),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn union_and_intersection_stores() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZADD u1 1 a 2 b 3 c", "(integer) 3"),
        ("ZADD u2 10 b 20 c 30 d", "(integer) 3"),
        ("ZUNIONSTORE out 2 u1 u2", "(integer) 4"),
        (
            "ZRANGE out 0 -1 WITHSCORES",
            "[\"a\", \"1\", \"b\", \"12\", \"c\", \"23\", \"d\", \"30\"]",
        ),
        ("ZUNIONSTORE out 2 u1 u2 WEIGHTS 2 0.5", "(integer) 4"),
        (
            "ZRANGE out 0 -1 WITHSCORES",
            "[\"a\", \"2\", \"b\", \"9\", \"d\", \"15\", \"c\", \"16\"]",
        ),
        ("ZUNIONSTORE out 2 u1 u2 AGGREGATE MIN", "(integer) 4"),
        (
            "ZRANGE out 0 -1 WITHSCORES",
            "[\"a\", \"1\", \"b\", \"2\", \"c\", \"3\", \"d\", \"30\"]",
        ),
        (
            "ZUNIONSTORE out 2 u1 u2 aggregate max WEIGHTS 1 -1",
            "(integer) 4",
        ),
        (
            "ZRANGE out 0 -1 WITHSCORES",
            "[\"d\", \"-30\", \"a\", \"1\", \"b\", \"2\", \"c\", \"3\"]",
        ),
        ("ZINTERSTORE out 2 u1 u2", "(integer) 2"),
        (
            "ZRANGE out 0 -1 WITHSCORES",
            "[\"b\", \"12\", \"c\", \"23\"]",
        ),
        ("ZINTERSTORE out 2 u1 u2 AGGREGATE MAX", "(integer) 2"),
        (
            "ZRANGE out 0 -1 WITHSCORES",
            "[\"b\", \"10\", \"c\", \"20\"]",
        ),
        (
            "ZINTERSTORE out 2 u1 u2 WEIGHTS 0 1 AGGREGATE MIN",
            "(integer) 2",
        ),
        ("ZRANGE out 0 -1 WITHSCORES", "[\"b\", \"0\", \"c\", \"0\"]"),
        ("ZINTERSTORE out 2 u1 u1", "(integer) 3"),
        (
            "ZRANGE out 0 -1 WITHSCORES",
            "[\"a\", \"2\", \"b\", \"4\", \"c\", \"6\"]",
        ),
        // An empty result deletes the destination.
        ("ZINTERSTORE out 2 u1 nokey", "(integer) 0"),
        ("EXISTS out", "(integer) 0"),
        ("ZUNIONSTORE out 1 nokey", "(integer) 0"),
        ("EXISTS out", "(integer) 0"),
        ("SET str v", "OK"),
        ("ZINTERSTORE str 1 nokey", "(integer) 0"),
        ("EXISTS str", "(integer) 0"),
        // The destination may hold any type; it may also be a source.
        ("SET str v", "OK"),
        ("EXPIRE u2 1000", "(integer) 1"),
        ("ZUNIONSTORE str 1 u2", "(integer) 3"),
        ("TYPE str", "zset"),
        ("TTL str", "(integer) -1"),
        ("ZUNIONSTORE u1 2 u1 u2", "(integer) 4"),
        ("ZSCORE u1 d", "\"30\""),
        // inf + -inf sums to 0; inf × 0 weighs 0.
        ("ZADD i1 inf a", "(integer) 1"),
        ("ZADD i2 -inf a", "(integer) 1"),
        ("ZUNIONSTORE out 2 i1 i2", "(integer) 1"),
        ("ZSCORE out a", "\"0\""),
        ("ZUNIONSTORE out 1 i1 WEIGHTS 0", "(integer) 1"),
        ("ZSCORE out a", "\"0\""),
        ("ZINTERSTORE out 2 i1 i2 AGGREGATE MIN", "(integer) 1"),
        ("ZSCORE out a", "\"-inf\""),
        // Errors.
        (
            "ZINTERSTORE out 0 u1",
            "(error) ERR at least 1 input key is needed for 'zinterstore' command",
        ),
        (
            "ZUNIONSTORE out -1 u1",
            "(error) ERR at least 1 input key is needed for 'zunionstore' command",
        ),
        ("ZUNIONSTORE out 3 u1 u2", SYNTAX),
        ("ZUNIONSTORE out x u1", NOT_INT),
        ("ZUNIONSTORE out 2 u1 u2 WEIGHTS 1", SYNTAX),
        (
            "ZUNIONSTORE out 2 u1 u2 WEIGHTS 1 x",
            "(error) ERR weight value is not a float",
        ),
        ("ZUNIONSTORE out 2 u1 u2 AGGREGATE avg", SYNTAX),
        ("ZUNIONSTORE out 2 u1 u2 AGGREGATE", SYNTAX),
        ("ZUNIONSTORE out 2 u1 u2 WITHSCORES", SYNTAX),
        ("SET s2 v", "OK"),
        ("ZUNIONSTORE out 1 s2", WRONGTYPE),
        // The type is checked before the options are parsed.
        ("ZUNIONSTORE out 2 u1 s2 WEIGHTS x y", WRONGTYPE),
        ("ZUNIONSTORE out 2", &arity("zunionstore")),
    ]);
    // Sets as sources score 1 (when the set family is there to make one).
    if c.call("SADD plain a x") == "(integer) 2" {
        c.script(&[
            ("DEL u1", "(integer) 1"),
            ("ZADD u1 5 a 7 b", "(integer) 2"),
            ("ZUNIONSTORE out 2 u1 plain", "(integer) 3"),
            (
                "ZRANGE out 0 -1 WITHSCORES",
                "[\"x\", \"1\", \"a\", \"6\", \"b\", \"7\"]",
            ),
            ("ZINTERSTORE out 2 plain u1 WEIGHTS 10 1", "(integer) 1"),
            ("ZRANGE out 0 -1 WITHSCORES", "[\"a\", \"15\"]"),
        ]);
    }
    server.shutdown().unwrap();
}

#[test]
fn range_store() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZADD src 1 a 2 b 3 c", "(integer) 3"),
        ("ZRANGESTORE dst src 0 1", "(integer) 2"),
        ("ZRANGE dst 0 -1 WITHSCORES", "[\"a\", \"1\", \"b\", \"2\"]"),
        ("ZRANGESTORE dst src 2 3 BYSCORE", "(integer) 2"),
        ("ZRANGE dst 0 -1", "[\"b\", \"c\"]"),
        ("ZRANGESTORE dst src 0 0 REV", "(integer) 1"),
        ("ZRANGE dst 0 -1", "[\"c\"]"),
        (
            "ZRANGESTORE dst src +inf -inf BYSCORE REV LIMIT 1 1",
            "(integer) 1",
        ),
        ("ZRANGE dst 0 -1", "[\"b\"]"),
        ("ZRANGESTORE dst src (3 +inf BYSCORE", "(integer) 0"),
        ("EXISTS dst", "(integer) 0"),
        ("ZRANGESTORE dst src 0 -1 WITHSCORES", SYNTAX),
        ("ZRANGESTORE dst nokey 0 -1", "(integer) 0"),
        ("SET str v", "OK"),
        ("ZRANGESTORE dst str 0 -1", WRONGTYPE),
        ("ZRANGESTORE str src 0 -1", "(integer) 3"),
        ("TYPE str", "zset"),
        ("ZRANGESTORE dst src 0", &arity("zrangestore")),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn random_members() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZRANDMEMBER nokey", "(nil)"),
        ("ZRANDMEMBER nokey 5", "[]"),
        ("ZRANDMEMBER nokey -5 WITHSCORES", "[]"),
        ("ZADD rm 1 a 2 b 3 c", "(integer) 3"),
        ("ZRANDMEMBER rm 0", "[]"),
        ("ZRANDMEMBER rm 10", "[\"a\", \"b\", \"c\"]"),
        (
            "ZRANDMEMBER rm 3 WITHSCORES",
            "[\"a\", \"1\", \"b\", \"2\", \"c\", \"3\"]",
        ),
        ("ZRANDMEMBER rm 1 2", SYNTAX),
        ("ZRANDMEMBER rm 1 WITHSCORES x", SYNTAX),
        ("ZRANDMEMBER rm x", NOT_INT),
        (
            "ZRANDMEMBER rm -9223372036854775808",
            "(error) ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ),
        (
            "ZRANDMEMBER rm 4611686018427387904 WITHSCORES",
            "(error) ERR value is out of range",
        ),
        // A count whose reply would not fit the bound is refused up front.
        (
            "ZRANDMEMBER rm -100000000000",
            "(error) ERR count is too large: the reply would exceed 512 MB",
        ),
        ("SET str v", "OK"),
        ("ZRANDMEMBER str", WRONGTYPE),
        ("ZRANDMEMBER str 1", WRONGTYPE),
    ]);
    let one = c.call("ZRANDMEMBER rm");
    assert!(["\"a\"", "\"b\"", "\"c\""].contains(&one.as_str()), "{one}");
    let many = c.call("ZRANDMEMBER rm -7");
    let items: Vec<&str> = many.trim_matches(['[', ']']).split(", ").collect();
    assert_eq!(items.len(), 7, "{many}");
    assert!(items
        .iter()
        .all(|m| ["\"a\"", "\"b\"", "\"c\""].contains(m)));
    let with = c.call("ZRANDMEMBER rm -4 WITHSCORES");
    let items: Vec<&str> = with.trim_matches(['[', ']']).split(", ").collect();
    assert_eq!(items.len(), 8, "{with}");
    for pair in items.chunks(2) {
        let expected = match pair[0] {
            "\"a\"" => "\"1\"",
            "\"b\"" => "\"2\"",
            _ => "\"3\"",
        };
        assert_eq!(pair[1], expected, "{with}");
    }
    // Distinct picks, both when most of the set is asked for and when a few.
    for i in 0..200 {
        c.call(&format!("ZADD big {i} m{i}"));
    }
    for count in [150, 20, 199, 1] {
        let reply = c.call(&format!("ZRANDMEMBER big {count}"));
        let items: HashSet<&str> = reply.trim_matches(['[', ']']).split(", ").collect();
        assert_eq!(items.len(), count, "{reply}");
    }
    server.shutdown().unwrap();
}

/// The members of a ZSCAN reply (`["cursor", [m, s, m, s...]]`) and its
/// cursor.
fn scan_step(c: &mut Client, command: &str) -> (String, Vec<(String, String)>) {
    let reply = c.call(command);
    let (cursor, rest) = reply[2..].split_once("\", [").expect("a scan reply");
    let body = rest.trim_end_matches("]]");
    let items: Vec<String> = if body.is_empty() {
        Vec::new()
    } else {
        body.split(", ")
            .map(|s| s.trim_matches('"').to_string())
            .collect()
    };
    let pairs = items
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    (cursor.to_string(), pairs)
}

#[test]
fn zscan_small_and_big_sets() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZSCAN nokey 0", "[\"0\", []]"),
        ("ZADD sc 3 c 1 a 2 b", "(integer) 3"),
        (
            "ZSCAN sc 0",
            "[\"0\", [\"a\", \"1\", \"b\", \"2\", \"c\", \"3\"]]",
        ),
        ("ZSCAN sc 0 MATCH b*", "[\"0\", [\"b\", \"2\"]]"),
        (
            "ZSCAN sc 0 MATCH * COUNT 1",
            "[\"0\", [\"a\", \"1\", \"b\", \"2\", \"c\", \"3\"]]",
        ),
        ("ZSCAN sc 0 COUNT 0", SYNTAX),
        ("ZSCAN sc 0 COUNT x", NOT_INT),
        ("ZSCAN sc 0 MATCH", SYNTAX),
        ("ZSCAN sc 0 FOO bar", SYNTAX),
        ("ZSCAN sc x", "(error) ERR invalid cursor"),
        ("ZSCAN sc \\s1", "(error) ERR invalid cursor"),
        (
            "ZSCAN sc 18446744073709551616",
            "(error) ERR invalid cursor",
        ),
        ("ZSCAN sc", &arity("zscan")),
        ("SET str v", "OK"),
        ("ZSCAN str 0", WRONGTYPE),
        // An absent key answers before the options are looked at.
        ("ZSCAN nokey 0 COUNT 0", "[\"0\", []]"),
    ]);
    // A big set, changing during the scan: every member present throughout
    // is returned, whatever happens to scores and other members meanwhile.
    for chunk in 0..10 {
        let mut line = String::from("ZADD big");
        for i in chunk * 100..chunk * 100 + 100 {
            line.push_str(&format!(" {i} m{i}"));
        }
        assert_eq!(c.call(&line), "(integer) 100");
    }
    let mut seen = HashSet::new();
    let mut cursor = "0".to_string();
    let mut steps = 0;
    let mut largest_batch = 0;
    loop {
        let (next, pairs) = scan_step(&mut c, &format!("ZSCAN big {cursor} COUNT 10"));
        largest_batch = largest_batch.max(pairs.len());
        for (member, _) in pairs {
            seen.insert(member);
        }
        steps += 1;
        // Meanwhile: scores move, some members go, new ones come.
        c.call(&format!("ZINCRBY big -5000 m{}", steps * 7 % 900));
        c.call(&format!("ZREM big m{}", 900 + steps));
        c.call(&format!("ZADD big 1 extra{steps}"));
        cursor = next;
        if cursor == "0" {
            break;
        }
        assert!(steps < 1000, "the scan does not end");
    }
    for i in 0..900 {
        assert!(seen.contains(&format!("m{i}")), "m{i} was not returned");
    }
    // Big sets go COUNT at a time (a step costs O(log n + COUNT)): about
    // 100 steps for 1,000 members and the extras that land ahead.
    assert!(largest_batch <= 10, "a step returned {largest_batch}");
    assert!((90..=250).contains(&steps), "{steps} steps");
    // MATCH filters a step's batch.
    let (_, pairs) = scan_step(&mut c, "ZSCAN big 0 MATCH m1?? COUNT 5000");
    assert!(!pairs.is_empty());
    assert!(pairs
        .iter()
        .all(|(m, _)| m.len() == 4 && m.starts_with("m1")));
    // COUNT larger than the set: one step does it.
    let (next, pairs) = scan_step(&mut c, "ZSCAN big 0 COUNT 100000");
    assert_eq!(next, "0");
    assert_eq!(
        pairs.len(),
        c.call("ZCARD big")[10..].parse::<usize>().unwrap()
    );
    let score_of_m0 = pairs.iter().find(|(m, _)| m == "m0").unwrap().1.clone();
    assert_eq!(format!("\"{score_of_m0}\""), c.call("ZSCORE big m0"));
    server.shutdown().unwrap();
}

#[test]
fn types_keyspace_and_wrong_types() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("ZADD k 1 a", "(integer) 1"),
        ("TYPE k", "zset"),
        ("OBJECT ENCODING k", "\"skiplist\""),
        ("EXPIRE k 100", "(integer) 1"),
        ("ZADD k 2 b", "(integer) 1"),
        ("ZINCRBY k 1 a", "\"2\""),
    ]);
    let ttl = c.call("TTL k");
    assert!(ttl == "(integer) 100" || ttl == "(integer) 99", "{ttl}");
    c.script(&[
        ("DEL k", "(integer) 1"),
        ("EXISTS k", "(integer) 0"),
        ("ZADD gone 1 a", "(integer) 1"),
        ("PEXPIRE gone 30", "(integer) 1"),
    ]);
    std::thread::sleep(Duration::from_millis(80));
    c.script(&[
        ("ZCARD gone", "(integer) 0"),
        ("EXISTS gone", "(integer) 0"),
        ("ZADD gone 5 b", "(integer) 1"),
        ("TTL gone", "(integer) -1"),
        ("SET str v", "OK"),
        ("ZADD str 1 a", WRONGTYPE),
        ("ZINCRBY str 1 a", WRONGTYPE),
        ("ZRANGE str 0 -1", WRONGTYPE),
        ("ZREVRANGE str 0 -1", WRONGTYPE),
        ("ZRANGEBYSCORE str 0 1", WRONGTYPE),
        ("ZRANGEBYLEX str - +", WRONGTYPE),
        ("ZSCORE str a", WRONGTYPE),
        ("ZMSCORE str a", WRONGTYPE),
        ("ZCARD str", WRONGTYPE),
        ("ZREM str a", WRONGTYPE),
        ("ZPOPMIN str", WRONGTYPE),
        ("ZPOPMAX str 2", WRONGTYPE),
        ("ZRANDMEMBER str", WRONGTYPE),
        ("ZSCAN str 0", WRONGTYPE),
        ("ZCOUNT str 0 1", WRONGTYPE),
        ("ZLEXCOUNT str - +", WRONGTYPE),
        ("ZRANK str a", WRONGTYPE),
        ("ZREVRANK str a", WRONGTYPE),
        ("ZREMRANGEBYRANK str 0 1", WRONGTYPE),
        ("ZREMRANGEBYSCORE str 0 1", WRONGTYPE),
        ("ZREMRANGEBYLEX str - +", WRONGTYPE),
        ("ZUNIONSTORE out 1 str", WRONGTYPE),
        ("ZINTERSTORE out 1 str", WRONGTYPE),
        ("GET str", "\"v\""),
        // Argument errors come before the type check, as in Redis.
        ("ZADD str x a", NOT_FLOAT),
        ("ZRANGE str a b", NOT_INT),
        ("ZCOUNT str x 1", NOT_FLOAT_RANGE),
        // String commands refuse a sorted set.
        ("ZADD zs 1 a", "(integer) 1"),
        ("GET zs", WRONGTYPE),
        ("APPEND zs x", WRONGTYPE),
        // SET replaces it.
        ("SET zs v", "OK"),
        ("GET zs", "\"v\""),
    ]);
    // Another collection kind, when its family is there to make one.
    for (make, key) in [
        ("HSET h f v", "h"),
        ("SADD st m", "st"),
        ("RPUSH li x", "li"),
    ] {
        if c.call(make) == "(integer) 1" {
            c.script(&[
                (&format!("ZADD {key} 1 a"), WRONGTYPE),
                (&format!("ZRANGE {key} 0 -1"), WRONGTYPE),
                (&format!("ZSCORE {key} a"), WRONGTYPE),
                (&format!("ZPOPMIN {key}"), WRONGTYPE),
            ]);
        }
    }
    server.shutdown().unwrap();
}

#[test]
fn multi_exec() {
    let (server, _dir) = start();
    let mut c = Client::connect(&server);
    c.script(&[
        ("MULTI", "OK"),
        ("ZADD m 1 a 2 b", "QUEUED"),
        ("ZINCRBY m 5 a", "QUEUED"),
        ("ZRANGE m 0 -1 WITHSCORES", "QUEUED"),
        ("ZSCORE m a", "QUEUED"),
        ("ZPOPMIN m", "QUEUED"),
        ("ZCARD m", "QUEUED"),
        ("ZUNIONSTORE m2 2 m nokey", "QUEUED"),
        ("ZADD m x a", "QUEUED"),
        ("ZREVRANGE m2 0 -1", "QUEUED"),
        (
            "EXEC",
            "[(integer) 2, \"6\", [\"b\", \"2\", \"a\", \"6\"], \"6\", [\"b\", \"2\"], \
             (integer) 1, (integer) 1, (error) ERR value is not a valid float, [\"a\"]]",
        ),
        ("ZRANGE m2 0 -1 WITHSCORES", "[\"a\", \"6\"]"),
        // A queued command with a wrong arity aborts the transaction.
        ("MULTI", "OK"),
        ("ZADD m 1 c", "QUEUED"),
        ("ZADD m", &arity("zadd")),
        (
            "EXEC",
            "(error) EXECABORT Transaction discarded because of previous errors.",
        ),
        ("ZSCORE m c", "(nil)"),
    ]);
    // WATCH sees a sorted-set write.
    let mut other = Client::connect(&server);
    c.script(&[("WATCH m", "OK"), ("MULTI", "OK"), ("ZADD m 1 w", "QUEUED")]);
    assert_eq!(other.call("ZINCRBY m 1 a"), "\"7\"");
    c.script(&[("EXEC", "(nil array)"), ("ZSCORE m w", "(nil)")]);
    server.shutdown().unwrap();
}

/// Every key's contents as ZRANGE WITHSCORES renders them.
fn dump(c: &mut Client, keys: &[&str]) -> Vec<String> {
    keys.iter()
        .map(|k| c.call(&format!("ZRANGE {k} 0 -1 WITHSCORES")))
        .collect()
}

#[test]
fn survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || common::config_in(dir.path());
    let keys = ["a", "b", "u", "emptied", "popped", "lex"];
    let before;
    {
        let server = Server::start(config()).unwrap();
        let mut c = Client::connect(&server);
        c.script(&[
            ("ZADD a 1 x 2.5 y -inf z 1e300 w", "(integer) 4"),
            ("ZINCRBY a 0.1 x", "\"1.1000000000000001\""),
            ("ZADD a GT CH 3 y 0 x", "(integer) 1"),
            ("ZADD b 5 p 6 q 7 r", "(integer) 3"),
            ("ZREM b q", "(integer) 1"),
            ("ZUNIONSTORE u 2 a b WEIGHTS 2 1", "(integer) 6"),
            ("ZADD emptied 1 a 2 b", "(integer) 2"),
            ("ZREMRANGEBYSCORE emptied -inf +inf", "(integer) 2"),
            ("ZADD popped 1 a 2 b 3 c", "(integer) 3"),
            ("ZPOPMAX popped", "[\"c\", \"3\"]"),
            ("ZADD lex 0 a 0 b 0 c 0 d", "(integer) 4"),
            ("ZREMRANGEBYLEX lex (a [c", "(integer) 2"),
            ("EXPIRE b 1000", "(integer) 1"),
        ]);
        before = dump(&mut c, &keys);
        assert_eq!(
            before[0],
            "[\"z\", \"-inf\", \"x\", \"1.1000000000000001\", \"y\", \"3\", \"w\", \"1.0000000000000001e+300\"]"
        );
        server.shutdown().unwrap();
    }
    let server = Server::start(config()).unwrap();
    let mut c = Client::connect(&server);
    assert_eq!(dump(&mut c, &keys), before);
    c.script(&[
        ("EXISTS emptied", "(integer) 0"),
        ("ZCARD popped", "(integer) 2"),
        ("ZRANGE lex 0 -1", "[\"a\", \"d\"]"),
        ("TYPE u", "zset"),
        ("ZSCORE u x", "\"2.2000000000000002\""),
    ]);
    let ttl = c.call("TTL b");
    assert!(
        ttl.starts_with("(integer) 99") || ttl == "(integer) 1000",
        "{ttl}"
    );
    server.shutdown().unwrap();
}

/// A Lobsters-style top-K: many ZINCRBY, then ZREVRANGE WITHSCORES of the
/// top 10, compared with a model.
#[test]
fn top_k_votes() {
    let (server, _dir) = start();
    let mut con = common::redis_con(server.addr);
    let mut rng = StdRng::seed_from_u64(7);
    let mut model: HashMap<String, i64> = HashMap::new();
    let mut pipe = redis::pipe();
    for _ in 0..20_000 {
        let story = format!("story:{}", rng.random_range(0..3000));
        let vote: i64 = if rng.random_bool(0.8) { 1 } else { -1 };
        *model.entry(story.clone()).or_default() += vote;
        pipe.cmd("ZINCRBY").arg("hot").arg(vote).arg(story).ignore();
    }
    pipe.query::<()>(&mut con).unwrap();
    let top: Vec<(String, String)> = redis::cmd("ZREVRANGE")
        .arg("hot")
        .arg(0)
        .arg(9)
        .arg("WITHSCORES")
        .query(&mut con)
        .unwrap();
    let mut expected: Vec<(&String, &i64)> = model.iter().collect();
    // Highest score first; ties by member bytes, highest first.
    expected.sort_by(|a, b| b.1.cmp(a.1).then(b.0.cmp(a.0)));
    let expected: Vec<(String, String)> = expected[..10]
        .iter()
        .map(|(m, s)| (m.to_string(), s.to_string()))
        .collect();
    assert_eq!(top, expected);
    let card: usize = redis::cmd("ZCARD").arg("hot").query(&mut con).unwrap();
    assert_eq!(card, model.len());
    server.shutdown().unwrap();
}

// ---------------------------------------------------------------------------
// A randomized comparison with a model, through the `redis` crate.

/// The model: member -> score per key.
type Model = HashMap<String, HashMap<String, f64>>;

fn fmt(score: f64) -> String {
    if score.is_infinite() {
        return if score > 0.0 { "inf" } else { "-inf" }.into();
    }
    if score == score.trunc() {
        format!("{}", score as i64)
    } else {
        format!("{score}")
    }
}

/// The key's entries ascending by (score, member).
fn sorted(model: &Model, key: &str) -> Vec<(String, f64)> {
    let mut entries: Vec<(String, f64)> = model
        .get(key)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), *v)).collect())
        .unwrap_or_default();
    entries.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    entries
}

fn flat(entries: &[(String, f64)], withscores: bool) -> Vec<String> {
    let mut out = Vec::new();
    for (member, score) in entries {
        out.push(member.clone());
        if withscores {
            out.push(fmt(*score));
        }
    }
    out
}

/// A half-integer in -4..4 as an argument.
fn half(rng: &mut StdRng) -> f64 {
    rng.random_range(-8..=8) as f64 / 2.0
}

#[derive(Clone, Copy)]
enum Bound {
    In(f64),
    Ex(f64),
}

impl Bound {
    fn arg(self) -> String {
        match self {
            Bound::In(v) => fmt(v),
            Bound::Ex(v) => format!("({}", fmt(v)),
        }
    }
    fn above_min(self, s: f64) -> bool {
        match self {
            Bound::In(v) => s >= v,
            Bound::Ex(v) => s > v,
        }
    }
    fn below_max(self, s: f64) -> bool {
        match self {
            Bound::In(v) => s <= v,
            Bound::Ex(v) => s < v,
        }
    }
}

fn bound(rng: &mut StdRng) -> Bound {
    match rng.random_range(0..10) {
        0 => Bound::In(f64::NEG_INFINITY),
        1 => Bound::In(f64::INFINITY),
        2..=5 => Bound::In(half(rng)),
        _ => Bound::Ex(half(rng)),
    }
}

fn lex_bound(rng: &mut StdRng, members: &[&str]) -> (String, Option<(String, bool)>, i8) {
    // (argument, bound as (member, inclusive), or -1/+1 for -/+)
    match rng.random_range(0..6) {
        0 => ("-".into(), None, -1),
        1 => ("+".into(), None, 1),
        n => {
            let m = members[rng.random_range(0..members.len())].to_string();
            if n % 2 == 0 {
                (format!("[{m}"), Some((m, true)), 0)
            } else {
                (format!("({m}"), Some((m, false)), 0)
            }
        }
    }
}

fn lex_above_min(member: &str, b: &(String, Option<(String, bool)>, i8)) -> bool {
    match (&b.1, b.2) {
        (_, -1) => true,
        (_, 1) => false,
        (Some((m, true)), _) => member >= m.as_str(),
        (Some((m, false)), _) => member > m.as_str(),
        _ => unreachable!(),
    }
}

fn lex_below_max(member: &str, b: &(String, Option<(String, bool)>, i8)) -> bool {
    match (&b.1, b.2) {
        (_, -1) => false,
        (_, 1) => true,
        (Some((m, true)), _) => member <= m.as_str(),
        (Some((m, false)), _) => member < m.as_str(),
        _ => unreachable!(),
    }
}

#[test]
fn randomized_against_a_model() {
    let (server, _dir) = start();
    let mut con = common::redis_con(server.addr);
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut model: Model = HashMap::new();
    let keys = ["k1", "k2", "k3"];
    let members = [
        "a", "b", "c", "d", "e", "f", "g", "h", "aa", "ab", "ba", "z",
    ];
    let mut checked = 0;
    for step in 0..1500 {
        let key = keys[rng.random_range(0..keys.len())];
        let member = members[rng.random_range(0..members.len())];
        let ctx = format!("step {step}");
        match rng.random_range(0..20) {
            0..=3 => {
                // ZADD with a valid combination of options.
                let (nx, xx) = match rng.random_range(0..4) {
                    0 => (true, false),
                    1 => (false, true),
                    _ => (false, false),
                };
                let (gt, lt) = if nx {
                    (false, false)
                } else {
                    match rng.random_range(0..4) {
                        0 => (true, false),
                        1 => (false, true),
                        _ => (false, false),
                    }
                };
                let ch = rng.random_bool(0.5);
                let mut cmd = redis::cmd("ZADD");
                cmd.arg(key);
                for (on, word) in [(nx, "NX"), (xx, "XX"), (gt, "GT"), (lt, "LT"), (ch, "CH")] {
                    if on {
                        cmd.arg(word);
                    }
                }
                let n = rng.random_range(1..4);
                let mut pairs = Vec::new();
                for _ in 0..n {
                    let s = half(&mut rng);
                    let m = members[rng.random_range(0..members.len())];
                    cmd.arg(fmt(s)).arg(m);
                    pairs.push((s, m));
                }
                let got: i64 = cmd.query(&mut con).unwrap();
                let (mut added, mut updated) = (0, 0);
                let set = model.entry(key.to_string()).or_default();
                let existed = !set.is_empty();
                if !xx || existed {
                    for (s, m) in pairs {
                        match set.get(m).copied() {
                            Some(cur) => {
                                if nx || (gt && s <= cur) || (lt && s >= cur) {
                                    continue;
                                }
                                if s != cur {
                                    updated += 1;
                                    set.insert(m.to_string(), s);
                                }
                            }
                            None => {
                                if xx {
                                    continue;
                                }
                                added += 1;
                                set.insert(m.to_string(), s);
                            }
                        }
                    }
                }
                if set.is_empty() {
                    model.remove(key);
                }
                assert_eq!(got, if ch { added + updated } else { added }, "{ctx}");
            }
            4..=5 => {
                let inc = half(&mut rng);
                let got: String = redis::cmd("ZINCRBY")
                    .arg(key)
                    .arg(fmt(inc))
                    .arg(member)
                    .query(&mut con)
                    .unwrap();
                let set = model.entry(key.to_string()).or_default();
                let new = set.get(member).copied().unwrap_or(0.0) + inc;
                set.insert(member.to_string(), new);
                assert_eq!(got, fmt(new), "{ctx}");
            }
            6 => {
                let other = members[rng.random_range(0..members.len())];
                let got: i64 = redis::cmd("ZREM")
                    .arg(key)
                    .arg(member)
                    .arg(other)
                    .query(&mut con)
                    .unwrap();
                let mut removed = 0;
                if let Some(set) = model.get_mut(key) {
                    removed += set.remove(member).is_some() as i64;
                    removed += set.remove(other).is_some() as i64;
                    if set.is_empty() {
                        model.remove(key);
                    }
                }
                assert_eq!(got, removed, "{ctx}");
            }
            7 => {
                let got: Option<String> = redis::cmd("ZSCORE")
                    .arg(key)
                    .arg(member)
                    .query(&mut con)
                    .unwrap();
                let want = model.get(key).and_then(|s| s.get(member)).map(|s| fmt(*s));
                assert_eq!(got, want, "{ctx}");
            }
            8 => {
                let rev = rng.random_bool(0.5);
                let got: Option<i64> = redis::cmd(if rev { "ZREVRANK" } else { "ZRANK" })
                    .arg(key)
                    .arg(member)
                    .query(&mut con)
                    .unwrap();
                let entries = sorted(&model, key);
                let want = entries.iter().position(|(m, _)| m == member).map(|r| {
                    if rev {
                        (entries.len() - 1 - r) as i64
                    } else {
                        r as i64
                    }
                });
                assert_eq!(got, want, "{ctx}");
            }
            9..=10 => {
                let start: i64 = rng.random_range(-8..8);
                let stop: i64 = rng.random_range(-8..8);
                let rev = rng.random_bool(0.5);
                let withscores = rng.random_bool(0.5);
                let mut cmd = redis::cmd(if rev { "ZREVRANGE" } else { "ZRANGE" });
                cmd.arg(key).arg(start).arg(stop);
                if withscores {
                    cmd.arg("WITHSCORES");
                }
                let got: Vec<String> = cmd.query(&mut con).unwrap();
                let mut entries = sorted(&model, key);
                if rev {
                    entries.reverse();
                }
                let len = entries.len() as i64;
                let s = if start < 0 { len + start } else { start }.max(0);
                let e = if stop < 0 { len + stop } else { stop }.min(len - 1);
                let want = if s > e || s >= len {
                    Vec::new()
                } else {
                    flat(&entries[s as usize..=e as usize], withscores)
                };
                assert_eq!(got, want, "{ctx}");
            }
            11..=12 => {
                let (min, max) = (bound(&mut rng), bound(&mut rng));
                let rev = rng.random_bool(0.5);
                let withscores = rng.random_bool(0.5);
                let limit = rng
                    .random_bool(0.5)
                    .then(|| (rng.random_range(-1..4i64), rng.random_range(-1..4i64)));
                let mut cmd = redis::cmd("ZRANGE");
                if rev {
                    cmd.arg(key)
                        .arg(max.arg())
                        .arg(min.arg())
                        .arg("BYSCORE")
                        .arg("REV");
                } else {
                    cmd.arg(key).arg(min.arg()).arg(max.arg()).arg("BYSCORE");
                }
                if let Some((o, n)) = limit {
                    cmd.arg("LIMIT").arg(o).arg(n);
                }
                if withscores {
                    cmd.arg("WITHSCORES");
                }
                let got: Vec<String> = cmd.query(&mut con).unwrap();
                let mut entries: Vec<(String, f64)> = sorted(&model, key)
                    .into_iter()
                    .filter(|(_, s)| min.above_min(*s) && max.below_max(*s))
                    .collect();
                if rev {
                    entries.reverse();
                }
                if let Some((o, n)) = limit {
                    if o < 0 {
                        entries.clear();
                    } else {
                        entries = entries.into_iter().skip(o as usize).collect();
                        if n >= 0 {
                            entries.truncate(n as usize);
                        }
                    }
                }
                assert_eq!(got, flat(&entries, withscores), "{ctx}");
                let count: i64 = redis::cmd("ZCOUNT")
                    .arg(key)
                    .arg(min.arg())
                    .arg(max.arg())
                    .query(&mut con)
                    .unwrap();
                let want = sorted(&model, key)
                    .iter()
                    .filter(|(_, s)| min.above_min(*s) && max.below_max(*s))
                    .count() as i64;
                assert_eq!(count, want, "{ctx} ZCOUNT");
            }
            13 => {
                // Lex queries on a key whose members all score 0.
                let add = members[rng.random_range(0..members.len())];
                let _: i64 = redis::cmd("ZADD")
                    .arg("lex")
                    .arg(0)
                    .arg(add)
                    .query(&mut con)
                    .unwrap();
                model
                    .entry("lex".into())
                    .or_default()
                    .insert(add.into(), 0.0);
                let (min, max) = (lex_bound(&mut rng, &members), lex_bound(&mut rng, &members));
                let rev = rng.random_bool(0.5);
                let mut cmd = redis::cmd(if rev { "ZREVRANGEBYLEX" } else { "ZRANGEBYLEX" });
                cmd.arg("lex");
                if rev {
                    cmd.arg(&max.0).arg(&min.0);
                } else {
                    cmd.arg(&min.0).arg(&max.0);
                }
                let got: Vec<String> = cmd.query(&mut con).unwrap();
                let mut want: Vec<String> = sorted(&model, "lex")
                    .into_iter()
                    .map(|(m, _)| m)
                    .filter(|m| lex_above_min(m, &min) && lex_below_max(m, &max))
                    .collect();
                if rev {
                    want.reverse();
                }
                assert_eq!(got, want, "{ctx}");
                let count: usize = redis::cmd("ZLEXCOUNT")
                    .arg("lex")
                    .arg(&min.0)
                    .arg(&max.0)
                    .query(&mut con)
                    .unwrap();
                assert_eq!(count, want.len(), "{ctx} ZLEXCOUNT");
                if rng.random_bool(0.3) {
                    let removed: usize = redis::cmd("ZREMRANGEBYLEX")
                        .arg("lex")
                        .arg(&min.0)
                        .arg(&max.0)
                        .query(&mut con)
                        .unwrap();
                    assert_eq!(removed, want.len(), "{ctx} ZREMRANGEBYLEX");
                    let set = model.get_mut("lex").unwrap();
                    for m in &want {
                        set.remove(m);
                    }
                    if set.is_empty() {
                        model.remove("lex");
                    }
                }
            }
            14 => {
                let (min, max) = (bound(&mut rng), bound(&mut rng));
                let got: i64 = redis::cmd("ZREMRANGEBYSCORE")
                    .arg(key)
                    .arg(min.arg())
                    .arg(max.arg())
                    .query(&mut con)
                    .unwrap();
                let mut removed = 0;
                if let Some(set) = model.get_mut(key) {
                    set.retain(|_, s| {
                        let gone = min.above_min(*s) && max.below_max(*s);
                        removed += gone as i64;
                        !gone
                    });
                    if set.is_empty() {
                        model.remove(key);
                    }
                }
                assert_eq!(got, removed, "{ctx}");
            }
            15 => {
                let start: i64 = rng.random_range(-6..6);
                let stop: i64 = rng.random_range(-6..6);
                let got: i64 = redis::cmd("ZREMRANGEBYRANK")
                    .arg(key)
                    .arg(start)
                    .arg(stop)
                    .query(&mut con)
                    .unwrap();
                let entries = sorted(&model, key);
                let len = entries.len() as i64;
                let s = if start < 0 { len + start } else { start }.max(0);
                let e = if stop < 0 { len + stop } else { stop }.min(len - 1);
                let mut removed = 0;
                if !(s > e || s >= len) {
                    let set = model.get_mut(key).unwrap();
                    for (m, _) in &entries[s as usize..=e as usize] {
                        set.remove(m);
                        removed += 1;
                    }
                    if set.is_empty() {
                        model.remove(key);
                    }
                }
                assert_eq!(got, removed, "{ctx}");
            }
            16 => {
                let max = rng.random_bool(0.5);
                let count = rng.random_range(0..4usize);
                let got: Vec<String> = redis::cmd(if max { "ZPOPMAX" } else { "ZPOPMIN" })
                    .arg(key)
                    .arg(count)
                    .query(&mut con)
                    .unwrap();
                let mut entries = sorted(&model, key);
                if max {
                    entries.reverse();
                }
                entries.truncate(count);
                if let Some(set) = model.get_mut(key) {
                    for (m, _) in &entries {
                        set.remove(m);
                    }
                    if set.is_empty() {
                        model.remove(key);
                    }
                }
                assert_eq!(got, flat(&entries, true), "{ctx}");
            }
            17 => {
                // ZUNIONSTORE / ZINTERSTORE of two keys into a third.
                let (a, b) = (keys[rng.random_range(0..3)], keys[rng.random_range(0..3)]);
                let dst = keys[rng.random_range(0..3)];
                let inter = rng.random_bool(0.5);
                let (wa, wb) = (
                    rng.random_range(-2..3) as f64,
                    rng.random_range(-2..3) as f64,
                );
                let agg = ["SUM", "MIN", "MAX"][rng.random_range(0..3)];
                let got: i64 = redis::cmd(if inter { "ZINTERSTORE" } else { "ZUNIONSTORE" })
                    .arg(dst)
                    .arg(2)
                    .arg(a)
                    .arg(b)
                    .arg("WEIGHTS")
                    .arg(fmt(wa))
                    .arg(fmt(wb))
                    .arg("AGGREGATE")
                    .arg(agg)
                    .query(&mut con)
                    .unwrap();
                let empty = HashMap::new();
                let (sa, sb) = (
                    model.get(a).unwrap_or(&empty).clone(),
                    model.get(b).unwrap_or(&empty).clone(),
                );
                let combine = |x: f64, y: f64| match agg {
                    "SUM" => x + y,
                    "MIN" => x.min(y),
                    _ => x.max(y),
                };
                let mut result: HashMap<String, f64> = HashMap::new();
                // Scores are half-integers, weights integers: every
                // order of aggregation gives the same exact result.
                for (m, s) in &sa {
                    match sb.get(m) {
                        Some(t) => {
                            result.insert(m.clone(), combine(s * wa, t * wb));
                        }
                        None if !inter => {
                            result.insert(m.clone(), s * wa);
                        }
                        None => {}
                    }
                }
                if !inter {
                    for (m, t) in &sb {
                        result.entry(m.clone()).or_insert(t * wb);
                    }
                }
                for v in result.values_mut() {
                    if *v == 0.0 {
                        *v = 0.0; // -0 is stored as 0
                    }
                }
                assert_eq!(got, result.len() as i64, "{ctx}");
                if result.is_empty() {
                    model.remove(dst);
                } else {
                    model.insert(dst.to_string(), result);
                }
            }
            _ => {
                let got: usize = redis::cmd("ZCARD").arg(key).query(&mut con).unwrap();
                assert_eq!(got, model.get(key).map_or(0, |s| s.len()), "{ctx}");
            }
        }
        // Every so often, compare whole keys.
        if step % 50 == 0 {
            for k in keys.iter().chain(["lex"].iter()) {
                let got: Vec<String> = redis::cmd("ZRANGE")
                    .arg(*k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(&mut con)
                    .unwrap();
                assert_eq!(got, flat(&sorted(&model, k), true), "step {step} key {k}");
                checked += 1;
            }
        }
    }
    assert!(checked > 0);
    // Keys the model holds empty do not exist.
    for k in keys {
        let exists: bool = redis::cmd("EXISTS").arg(k).query(&mut con).unwrap();
        assert_eq!(exists, model.contains_key(k), "{k}");
    }
    server.shutdown().unwrap();
}

// ---------------------------------------------------------------------------
// ZUNION ZINTER ZDIFF ZDIFFSTORE ZINTERCARD ZMPOP and the blocking pops,
// compared with a real redis-server 7.0.15 where replies can be compared.

use common::same;

fn algebra_data(e: &mut Client, r: &mut Client) {
    same(
        e,
        r,
        &[
            "ZADD a 1 x 2 y 3 z 1.5 w",
            "ZADD b 10 y 20 z 30 v -inf w",
            "ZADD c 0.1 z 0.2 y inf w",
            "SADD s x z q",
            "SET str v",
            "LPUSH list v",
        ],
    );
}

#[test]
fn set_algebra_matches_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    algebra_data(&mut e, &mut r);
    let commands = [
        "ZUNION 2 a b",
        "ZUNION 2 a b WITHSCORES",
        "ZUNION 3 a b c WITHSCORES",
        "ZUNION 3 a b s WEIGHTS 2 0.5 3 WITHSCORES",
        "ZUNION 2 a b AGGREGATE MIN WITHSCORES",
        "ZUNION 2 a b AGGREGATE MAX WITHSCORES weights 1 -1",
        "ZUNION 2 b c WITHSCORES",
        "ZUNION 2 nokey a",
        "ZUNION 1 nokey",
        "ZINTER 2 a b WITHSCORES",
        "ZINTER 3 a b c WITHSCORES",
        "ZINTER 2 a s WITHSCORES",
        "ZINTER 2 a b AGGREGATE MAX WEIGHTS 2 3 WITHSCORES",
        "ZINTER 2 a nokey",
        "ZINTER 2 a a WITHSCORES",
        "ZDIFF 1 a WITHSCORES",
        "ZDIFF 2 a b WITHSCORES",
        "ZDIFF 3 a b s",
        "ZDIFF 2 s a WITHSCORES",
        "ZDIFF 2 nokey a",
        "ZDIFFSTORE d 2 a b",
        "ZRANGE d 0 -1 WITHSCORES",
        "ZDIFFSTORE d 2 a a",
        "EXISTS d",
        "ZDIFFSTORE str 1 a",
        "TYPE str",
        "ZINTERCARD 2 a b",
        "ZINTERCARD 3 a b c",
        "ZINTERCARD 3 a b c LIMIT 1",
        "ZINTERCARD 3 a b c LIMIT 0",
        "ZINTERCARD 2 a s",
        "ZINTERCARD 2 a nokey",
        "ZUNIONSTORE u 2 a s WEIGHTS 1 2",
        "ZRANGE u 0 -1 WITHSCORES",
    ];
    for command in commands {
        same(&mut e, &mut r, &[command]);
    }
    // RESP3: [member, score] pairs.
    e.call("HELLO 3");
    r.call("HELLO 3");
    same(
        &mut e,
        &mut r,
        &[
            "ZUNION 2 a b WITHSCORES",
            "ZINTER 2 a b",
            "ZDIFF 2 a b WITHSCORES",
        ],
    );
}

#[test]
fn set_algebra_errors_match_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    algebra_data(&mut e, &mut r);
    let errors: &[(&str, &str)] = &[
        ("ZUNION 2 a str", WRONGTYPE),
        ("ZINTER 2 list a", WRONGTYPE),
        ("ZDIFF 2 a str", WRONGTYPE),
        ("ZINTERCARD 2 a str", WRONGTYPE),
        ("ZDIFFSTORE d 2 a list", WRONGTYPE),
        // The type is checked before the options.
        ("ZUNION 2 a str BOGUS", WRONGTYPE),
        (
            "ZUNION 0 a",
            "(error) ERR at least 1 input key is needed for 'zunion' command",
        ),
        (
            "ZINTER -1 a",
            "(error) ERR at least 1 input key is needed for 'zinter' command",
        ),
        (
            "ZDIFF 0 a",
            "(error) ERR at least 1 input key is needed for 'zdiff' command",
        ),
        (
            "ZDIFFSTORE d 0 a",
            "(error) ERR at least 1 input key is needed for 'zdiffstore' command",
        ),
        (
            "ZINTERCARD 0 a",
            "(error) ERR at least 1 input key is needed for 'zintercard' command",
        ),
        ("ZUNION x a", NOT_INT),
        ("ZUNION 3 a b", SYNTAX),
        ("ZINTERCARD 3 a b", SYNTAX),
        ("ZUNION 2 a b WEIGHTS 1", SYNTAX),
        (
            "ZUNION 2 a b WEIGHTS 1 x",
            "(error) ERR weight value is not a float",
        ),
        ("ZUNION 2 a b AGGREGATE AVG", SYNTAX),
        ("ZDIFF 2 a b WEIGHTS 1 2", SYNTAX),
        ("ZDIFF 2 a b AGGREGATE SUM", SYNTAX),
        ("ZDIFFSTORE d 2 a b WITHSCORES", SYNTAX),
        ("ZUNIONSTORE d 2 a b WITHSCORES", SYNTAX),
        ("ZINTERCARD 2 a b WITHSCORES", SYNTAX),
        (
            "ZINTERCARD 2 a b LIMIT -1",
            "(error) ERR LIMIT can't be negative",
        ),
        (
            "ZINTERCARD 2 a b LIMIT x",
            "(error) ERR LIMIT can't be negative",
        ),
        ("ZINTERCARD 2 a b LIMIT", SYNTAX),
        ("ZUNION 1", &arity("zunion")),
        ("ZINTERCARD 1", &arity("zintercard")),
        ("ZDIFFSTORE d 1", &arity("zdiffstore")),
    ];
    for (command, expected) in errors {
        let replies = same(&mut e, &mut r, &[command]);
        assert_eq!(replies[0], *expected, "{command}");
    }
}

#[test]
fn multi_key_pops_match_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    same(
        &mut e,
        &mut r,
        &["ZADD z1 1 a 2 b 3 c 4 d", "ZADD z2 5 e 6 f", "SET str x"],
    );
    let commands = [
        "ZMPOP 1 z1 MIN",
        "ZMPOP 1 z1 MAX COUNT 2",
        "ZMPOP 2 nokey z2 min count 10",
        "EXISTS z2",
        "ZMPOP 2 nokey z2 MIN",
        "ZMPOP 2 z1 z2 MAX COUNT 1",
        "EXISTS z1",
        "ZADD z1 1 a 2 b",
        "BZMPOP 0 1 z1 MIN COUNT 5",
        "ZADD z1 1 a 2 b",
        "BZPOPMIN nokey z1 0",
        "BZPOPMAX z1 1",
        "EXISTS z1",
        // Errors, in Redis's order of checks.
        "ZMPOP 1 str MIN",
        "ZMPOP 2 nokey str MIN",
        "BZPOPMIN str 0",
        "BZMPOP 0 1 str MAX",
        "ZMPOP 0 z1 MIN",
        "ZMPOP -1 z1 MIN",
        "ZMPOP x z1 MIN",
        "ZMPOP 1 z1",
        "ZMPOP 2 z1 MIN",
        "ZMPOP 1 z1 LEFT",
        "ZMPOP 1 z1 MIN COUNT 0",
        "ZMPOP 1 z1 MIN COUNT -1",
        "ZMPOP 1 z1 MIN COUNT x",
        "ZMPOP 1 z1 MIN COUNT 1 COUNT 1",
        "ZMPOP 1 z1 MIN COUNT",
        "ZMPOP 1 z1 MIN EXTRA",
        "BZMPOP x 1 z1 MIN",
        "BZMPOP -1 1 z1 MIN",
        "BZMPOP 0 0 z1 MIN",
        "BZPOPMIN z1 x",
        "BZPOPMIN z1 -1",
        "BZPOPMAX z1 1e300",
        "ZMPOP 1",
        "BZPOPMIN z1",
        "BZMPOP 0 1 z1",
    ];
    for command in commands {
        same(&mut e, &mut r, &[command]);
    }
    e.call("HELLO 3");
    r.call("HELLO 3");
    same(
        &mut e,
        &mut r,
        &[
            "ZADD z3 1 a 2 b 3 c",
            "ZMPOP 1 z3 MIN COUNT 2",
            "BZPOPMAX z3 0",
            "ZMPOP 1 z3 MIN",
        ],
    );
}

#[test]
fn blocking_pops_wait_and_are_served_in_order() {
    let (server, _dir) = start();
    let mut first = Client::connect(&server);
    let mut second = Client::connect(&server);
    let mut writer = Client::connect(&server);
    first.send("BZPOPMIN z 0");
    std::thread::sleep(Duration::from_millis(100));
    second.send("BZMPOP 0 2 other z MAX COUNT 2");
    std::thread::sleep(Duration::from_millis(100));
    // Neither a string nor its deletion serves them.
    writer.script(&[
        ("SET z x", "OK"),
        ("DEL z", "(integer) 1"),
        ("ZADD z 1 a 2 b 3 c", "(integer) 3"),
    ]);
    assert_eq!(first.reply(), "[\"z\", \"a\", \"1\"]");
    assert_eq!(second.reply(), "[\"z\", [[\"c\", \"3\"], [\"b\", \"2\"]]]");
    writer.script(&[("EXISTS z", "(integer) 0")]);
    // Timeouts answer a null array.
    first.script(&[
        ("BZPOPMAX z 0.05", "(nil array)"),
        ("BZMPOP 0.05 1 z MIN", "(nil array)"),
    ]);
    // Inside MULTI nothing blocks.
    first.script(&[
        ("MULTI", "OK"),
        ("BZPOPMIN z 0", "QUEUED"),
        ("BZMPOP 0 1 z MIN", "QUEUED"),
        ("ZADD z 5 m", "QUEUED"),
        ("BZPOPMAX z 0", "QUEUED"),
        (
            "EXEC",
            "[(nil array), (nil array), (integer) 1, [\"z\", \"m\", \"5\"]]",
        ),
    ]);
}
