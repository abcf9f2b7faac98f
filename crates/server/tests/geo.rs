//! GEO commands over real TCP, compared reply by reply with a real
//! redis-server 7.0.15 (same data, same queries): positions, hashes,
//! distances, radius and box searches with every option, STORE and
//! STOREDIST, RESP3, and the errors for bad input.

mod common;

use common::same;
use common::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Random points: a dense cluster (Sicily), a sparse world-wide spread,
/// and points at the limits (poles' cut-off, antimeridian).
fn points(rng: &mut StdRng) -> Vec<(f64, f64, String)> {
    let mut points = Vec::new();
    for i in 0..200 {
        let lon = rng.random_range(12.0..16.0);
        let lat = rng.random_range(36.5..38.5);
        points.push((lon, lat, format!("s{i}")));
    }
    for i in 0..100 {
        let lon = rng.random_range(-180.0..=180.0);
        let lat = rng.random_range(-85.05112878..=85.05112878);
        points.push((lon, lat, format!("w{i}")));
    }
    for (i, (lon, lat)) in [
        (180.0, 85.05112878),
        (-180.0, -85.05112878),
        (179.9999, 0.0),
        (-179.9999, 0.0001),
        (0.0, 0.0),
        (-0.0001, -0.0001),
    ]
    .into_iter()
    .enumerate()
    {
        points.push((lon, lat, format!("edge{i}")));
    }
    points
}

fn load(engram: &mut Client, redis: &mut Client, key: &str, points: &[(f64, f64, String)]) {
    for chunk in points.chunks(25) {
        let mut command = format!("GEOADD {key}");
        for (lon, lat, member) in chunk {
            command.push_str(&format!(" {lon} {lat} {member}"));
        }
        same(engram, redis, &[&command]);
    }
}

#[test]
fn positions_hashes_and_distances_match_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    let mut rng = StdRng::seed_from_u64(7);
    let points = points(&mut rng);
    load(&mut e, &mut r, "g", &points);
    // The stored scores are the same geohashes.
    same(&mut e, &mut r, &["ZRANGE g 0 -1 WITHSCORES", "ZCARD g"]);
    let members: Vec<&str> = points.iter().map(|p| p.2.as_str()).collect();
    for chunk in members.chunks(20) {
        let list = chunk.join(" ");
        same(
            &mut e,
            &mut r,
            &[
                &format!("GEOPOS g {list} missing"),
                &format!("GEOHASH g {list} missing"),
            ],
        );
    }
    for _ in 0..300 {
        let a = members[rng.random_range(0..members.len())];
        let b = members[rng.random_range(0..members.len())];
        let unit = ["", " m", " km", " ft", " mi", " KM"][rng.random_range(0..6)];
        same(&mut e, &mut r, &[&format!("GEODIST g {a} {b}{unit}")]);
    }
    same(
        &mut e,
        &mut r,
        &[
            "GEODIST g s1 missing",
            "GEODIST nokey a b",
            "GEOPOS nokey a b",
            "GEOHASH nokey a",
            "GEOPOS g",
            "GEOHASH g",
        ],
    );
    // RESP3: coordinates as doubles.
    e.call("HELLO 3");
    r.call("HELLO 3");
    same(
        &mut e,
        &mut r,
        &["GEOPOS g s1 edge0 edge1 missing", "GEODIST g s1 s2 km"],
    );
}

/// A random search, in any of the command forms.
fn random_search(rng: &mut StdRng, members: &[&str]) -> String {
    let (lon, lat) = if rng.random_bool(0.7) {
        (rng.random_range(12.0..16.0), rng.random_range(36.5..38.5))
    } else {
        (
            rng.random_range(-180.0..=180.0),
            rng.random_range(-85.0..=85.0),
        )
    };
    let unit = ["m", "km", "ft", "mi"][rng.random_range(0..4)];
    let scale = match unit {
        "m" => 1000.0,
        "ft" => 3000.0,
        _ => 1.0,
    };
    let radius = rng.random_range(0.0..400.0) * scale;
    let member = members[rng.random_range(0..members.len())];
    let mut options = String::new();
    for option in ["WITHDIST", "WITHCOORD", "WITHHASH"] {
        if rng.random_bool(0.4) {
            options.push(' ');
            options.push_str(option);
        }
    }
    match rng.random_range(0..4) {
        0 => options.push_str(" ASC"),
        1 => options.push_str(" DESC"),
        _ => {}
    }
    if rng.random_bool(0.4) {
        options.push_str(&format!(" COUNT {}", rng.random_range(1..30)));
        if rng.random_bool(0.3) {
            options.push_str(" ANY");
        }
    }
    match rng.random_range(0..6) {
        0 => format!("GEORADIUS g {lon} {lat} {radius} {unit}{options}"),
        1 => format!("GEORADIUS_RO g {lon} {lat} {radius} {unit}{options}"),
        2 => format!("GEORADIUSBYMEMBER g {member} {radius} {unit}{options}"),
        3 => format!("GEOSEARCH g FROMLONLAT {lon} {lat} BYRADIUS {radius} {unit}{options}"),
        4 => format!(
            "GEOSEARCH g FROMMEMBER {member} BYBOX {} {} {unit}{options}",
            radius * rng.random_range(0.2..2.0),
            radius * rng.random_range(0.2..2.0)
        ),
        _ => format!(
            "GEOSEARCH g FROMLONLAT {lon} {lat} BYBOX {} {} {unit}{options}",
            radius * 2.0,
            radius
        ),
    }
}

#[test]
fn searches_match_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    let mut rng = StdRng::seed_from_u64(11);
    let points = points(&mut rng);
    load(&mut e, &mut r, "g", &points);
    let members: Vec<&str> = points.iter().map(|p| p.2.as_str()).collect();
    for _ in 0..400 {
        let command = random_search(&mut rng, &members);
        same(&mut e, &mut r, &[&command]);
    }
    // Fixed cases: the documentation's example, zero radius, huge radius.
    same(
        &mut e,
        &mut r,
        &[
            "GEOADD Sicily 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
            "GEODIST Sicily Palermo Catania",
            "GEORADIUS Sicily 15 37 200 km WITHDIST WITHCOORD",
            "GEOSEARCH Sicily FROMLONLAT 15 37 BYBOX 400 400 km ASC WITHCOORD WITHDIST",
            "GEOSEARCH g FROMMEMBER s3 BYRADIUS 0 m WITHDIST",
            "GEOSEARCH g FROMLONLAT 0 0 BYRADIUS 30000 km COUNT 1000 DESC",
            "GEORADIUS nokey 0 0 10 km",
            "GEORADIUSBYMEMBER nokey x 10 km",
            "GEOSEARCH nokey FROMMEMBER x BYRADIUS 10 km",
        ],
    );
    e.call("HELLO 3");
    r.call("HELLO 3");
    same(
        &mut e,
        &mut r,
        &["GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 200 km WITHDIST WITHCOORD WITHHASH ASC"],
    );
}

#[test]
fn stores_match_redis() {
    let (server, _dir, redis, mut e, mut r) = common::beside_redis();
    let mut rng = StdRng::seed_from_u64(3);
    let points = points(&mut rng);
    load(&mut e, &mut r, "g", &points);
    for command in [
        "GEORADIUS g 14 37.5 100 km STORE dst",
        "GEORADIUS g 14 37.5 100 km STORE dst COUNT 5 DESC",
        "GEORADIUSBYMEMBER g s1 50 km STOREDIST dst",
        "GEOSEARCHSTORE dst g FROMLONLAT 14 37.5 BYBOX 100 80 km",
        "GEOSEARCHSTORE dst g FROMMEMBER s2 BYRADIUS 60 km STOREDIST",
        "GEOSEARCHSTORE dst g FROMMEMBER s2 BYRADIUS 60 km COUNT 3 ANY",
    ] {
        same(&mut e, &mut r, &[command, "ZRANGE dst 0 -1", "TYPE dst"]);
        // Scores (distances for STOREDIST) as numbers: Redis 7.0 prints
        // them with 17 digits, Engram with the shortest round trip.
        let mut ec = common::redis_con(server.addr);
        let mut rc = common::redis_con(redis.addr);
        let ours: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg("dst")
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut ec)
            .unwrap();
        let theirs: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg("dst")
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut rc)
            .unwrap();
        assert_eq!(ours, theirs, "{command}");
    }
    // Nothing found, or no source: the destination is deleted.
    same(
        &mut e,
        &mut r,
        &[
            "SET dst x",
            "GEOSEARCHSTORE dst g FROMLONLAT 0 -80 BYRADIUS 1 m",
            "EXISTS dst",
            "SET dst x",
            "GEORADIUS nokey 0 0 1 km STORE dst",
            "EXISTS dst",
        ],
    );
}

#[test]
fn geoadd_options_match_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            "GEOADD k 1 1 a 2 2 b",
            "GEOADD k 1 1 a",
            "GEOADD k CH 1.5 1 a",
            "GEOADD k NX 3 3 a 4 4 c",
            "GEOADD k XX 5 5 a 6 6 d",
            "GEOADD k XX CH 7 7 a 6 6 d",
            "GEOADD k CH NX 7 7 a 8 8 e",
            "GEOADD k 9 9 f 10 10 f",
            "ZRANGE k 0 -1 WITHSCORES",
        ],
    );
}

#[test]
fn bad_input_errors_match_redis() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
            "SET str x",
            "LPUSH list x",
        ],
    );
    let errors = [
        // Wrong types.
        ("GEOADD str 1 1 a", common::WRONGTYPE),
        ("GEOPOS str a", common::WRONGTYPE),
        ("GEOHASH list a", common::WRONGTYPE),
        ("GEODIST str a b", common::WRONGTYPE),
        ("GEORADIUS str 1 1 1 km", common::WRONGTYPE),
        (
            "GEOSEARCH list FROMLONLAT 1 1 BYRADIUS 1 km",
            common::WRONGTYPE,
        ),
        (
            "GEOSEARCHSTORE dst str FROMLONLAT 1 1 BYRADIUS 1 km",
            common::WRONGTYPE,
        ),
        // Syntax and arity.
        ("GEOADD g 1 1", &common::arity("geoadd")),
        ("GEOADD g 1 1 a 2", common::SYNTAX),
        ("GEOADD g NX XX 1 1 a", common::SYNTAX),
        ("GEOADD g GT 1 1 a", common::SYNTAX),
        ("GEODIST g a b km extra", common::SYNTAX),
        ("GEORADIUS g 15 37 200 km BOGUS", common::SYNTAX),
        ("GEORADIUS_RO g 15 37 200 km STORE dst", common::SYNTAX),
        (
            "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 1 km STORE dst",
            common::SYNTAX,
        ),
        (
            "GEOSEARCH g FROMLONLAT 15 37 FROMMEMBER Palermo BYRADIUS 1 km",
            common::SYNTAX,
        ),
        (
            "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 1 km BYBOX 1 1 km",
            common::SYNTAX,
        ),
        // Numbers out of range or not numbers.
        (
            "GEOADD g 181 10 a",
            "(error) ERR invalid longitude,latitude pair 181.000000,10.000000",
        ),
        (
            "GEOADD g 10 85.06 a",
            "(error) ERR invalid longitude,latitude pair 10.000000,85.060000",
        ),
        ("GEOADD g abc 10 a", common::NOT_FLOAT),
        ("GEOADD g 10 nan a", common::NOT_FLOAT),
        (
            "GEORADIUS g 200 0 1 km",
            "(error) ERR invalid longitude,latitude pair 200.000000,0.000000",
        ),
        (
            "GEORADIUS g 15 37 abc km",
            "(error) ERR need numeric radius",
        ),
        (
            "GEORADIUS g 15 37 -1 km",
            "(error) ERR radius cannot be negative",
        ),
        (
            "GEORADIUS g 15 37 1 parsec",
            "(error) ERR unsupported unit provided. please use M, KM, FT, MI",
        ),
        (
            "GEODIST g Palermo Catania parsec",
            "(error) ERR unsupported unit provided. please use M, KM, FT, MI",
        ),
        (
            "GEORADIUS g 15 37 1 km COUNT 0",
            "(error) ERR COUNT must be > 0",
        ),
        ("GEORADIUS g 15 37 1 km COUNT x", common::NOT_INT),
        (
            "GEORADIUS g 15 37 1 km ANY",
            "(error) ERR the ANY argument requires COUNT argument",
        ),
        (
            "GEORADIUS g 15 37 1 km WITHDIST STORE dst",
            "(error) ERR STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH \
             and WITHCOORD options",
        ),
        (
            "GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 1 km WITHCOORD",
            "(error) ERR GEOSEARCHSTORE is not compatible with WITHDIST, WITHHASH and \
             WITHCOORD options",
        ),
        (
            "GEORADIUSBYMEMBER g nobody 1 km",
            "(error) ERR could not decode requested zset member",
        ),
        (
            "GEOSEARCH g FROMMEMBER nobody BYRADIUS 1 km",
            "(error) ERR could not decode requested zset member",
        ),
        (
            "GEOSEARCH g BYRADIUS 1 km ASC WITHDIST",
            "(error) ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for GEOSEARCH",
        ),
        (
            "geosearch g FROMLONLAT 1 1 ASC WITHDIST",
            "(error) ERR exactly one of BYRADIUS and BYBOX can be specified for geosearch",
        ),
        (
            "GEOSEARCH g FROMLONLAT 1 1 BYBOX -1 1 km",
            "(error) ERR height or width cannot be negative",
        ),
        (
            "GEOSEARCH g FROMLONLAT 1 1 BYBOX x 1 km",
            "(error) ERR need numeric width",
        ),
        (
            "GEOSEARCH g FROMLONLAT 1 1 BYBOX 1 y km",
            "(error) ERR need numeric height",
        ),
    ];
    for (command, expected) in errors {
        let replies = same(&mut e, &mut r, &[command]);
        assert_eq!(replies[0], expected, "{command}");
    }
}

#[test]
fn inside_exec_searches_store() {
    let (_server, _dir, _redis, mut e, mut r) = common::beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            "GEOADD Sicily 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
            "MULTI",
            "GEORADIUS Sicily 15 37 200 km STORE a STORE b",
            "GEORADIUSBYMEMBER Sicily Palermo 200 km STOREDIST c",
            "GEOSEARCHSTORE d Sicily FROMMEMBER Catania BYRADIUS 10 km",
            "ZRANGE b 0 -1",
            "EXISTS a",
            "ZRANGE d 0 -1",
            "EXEC",
        ],
    );
}
