//! Blizzard's three applications (Blizzard, section 8) as workloads
//! through the server with real clients, checked against models and again
//! after a restart:
//! - a key-value map with point queries (8.2);
//! - a graph kept as adjacency sets, each edge in both endpoints' sets,
//!   updated atomically so readers never see half an edge (8.3);
//! - Lobsters' votes: a sorted set of articles by votes, up- and
//!   down-votes from a zipfian generator, top-K reads (8.4).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::thread;

use engram_server::{Config, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const THREADS: usize = 3;

fn start_in(dir: &Path) -> Server {
    Server::start(Config {
        port: 0,
        dir: dir.to_path_buf(),
        ..Config::default()
    })
    .unwrap()
}

fn con(server: &Server) -> redis::Connection {
    redis::Client::open(format!("redis://{}", server.addr))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Point writes and reads of arbitrary bytes; each thread owns its keys,
/// so its model is exact, and reads must return its own latest writes.
#[test]
fn key_value_map_with_point_queries() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_in(dir.path());
    let models: Vec<HashMap<Vec<u8>, Vec<u8>>> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let server = &server;
                s.spawn(move || {
                    let mut c = con(server);
                    let mut rng = StdRng::seed_from_u64(t as u64);
                    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
                    for _ in 0..3000 {
                        let mut key = vec![b'0' + t as u8, b':'];
                        key.extend((0..rng.random_range(1..4)).map(|_| rng.random::<u8>() % 16));
                        if rng.random_bool(0.5) {
                            let value: Vec<u8> = (0..rng.random_range(0..300))
                                .map(|_| rng.random())
                                .collect();
                            let _: () = redis::cmd("SET")
                                .arg(&key)
                                .arg(&value)
                                .query(&mut c)
                                .unwrap();
                            model.insert(key, value);
                        } else {
                            let got: Option<Vec<u8>> =
                                redis::cmd("GET").arg(&key).query(&mut c).unwrap();
                            assert_eq!(got.as_ref(), model.get(&key), "read your own writes");
                        }
                    }
                    model
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    server.shutdown().unwrap();
    let server = start_in(dir.path());
    let mut c = con(&server);
    let total: usize = models.iter().map(|m| m.len()).sum();
    let size: usize = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, total);
    for model in &models {
        for (key, value) in model {
            let got: Vec<u8> = redis::cmd("GET").arg(key).query(&mut c).unwrap();
            assert_eq!(&got, value);
        }
    }
}

const VERTICES: u32 = 60;

/// Edges (u, v) live in `out:u` and `in:v`; adding or removing one is a
/// MULTI over both sets, so a reader's MULTI sees both halves or neither.
#[test]
fn graph_as_adjacency_sets_never_shows_half_an_edge() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_in(dir.path());
    let writers: Vec<BTreeSet<(u32, u32)>> = thread::scope(|s| {
        let reader = {
            let server = &server;
            s.spawn(move || {
                let mut c = con(server);
                let mut rng = StdRng::seed_from_u64(99);
                let mut both = 0;
                for _ in 0..1500 {
                    let (u, v) = (rng.random_range(0..VERTICES), rng.random_range(0..VERTICES));
                    let (out, inn): (bool, bool) = redis::pipe()
                        .atomic()
                        .cmd("SISMEMBER")
                        .arg(format!("out:{u}"))
                        .arg(v)
                        .cmd("SISMEMBER")
                        .arg(format!("in:{v}"))
                        .arg(u)
                        .query(&mut c)
                        .unwrap();
                    assert_eq!(out, inn, "edge ({u}, {v}) half present");
                    both += out as u32;
                }
                both
            })
        };
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let server = &server;
                s.spawn(move || {
                    let mut c = con(server);
                    let mut rng = StdRng::seed_from_u64(t as u64 + 10);
                    // Each writer owns the edges whose source is its own
                    // (u % THREADS == t): its model is exact.
                    let mut edges = BTreeSet::new();
                    for _ in 0..1500 {
                        let u = rng.random_range(0..VERTICES / THREADS as u32) * THREADS as u32
                            + t as u32;
                        let v = rng.random_range(0..VERTICES);
                        let add = rng.random_bool(0.7);
                        let verb = if add { "SADD" } else { "SREM" };
                        let _: () = redis::pipe()
                            .atomic()
                            .cmd(verb)
                            .arg(format!("out:{u}"))
                            .arg(v)
                            .ignore()
                            .cmd(verb)
                            .arg(format!("in:{v}"))
                            .arg(u)
                            .ignore()
                            .query(&mut c)
                            .unwrap();
                        if add {
                            edges.insert((u, v));
                        } else {
                            edges.remove(&(u, v));
                        }
                        if rng.random_ratio(1, 20) {
                            // The out-degree read of the paper's workload.
                            let degree: usize = redis::cmd("SCARD")
                                .arg(format!("out:{u}"))
                                .query(&mut c)
                                .unwrap();
                            let expected = edges.iter().filter(|(a, _)| *a == u).count();
                            assert_eq!(degree, expected);
                        }
                    }
                    edges
                })
            })
            .collect();
        let writers = handles.into_iter().map(|h| h.join().unwrap()).collect();
        reader.join().unwrap();
        writers
    });
    let edges: BTreeSet<(u32, u32)> = writers.into_iter().flatten().collect();
    server.shutdown().unwrap();

    let server = start_in(dir.path());
    let mut c = con(&server);
    for u in 0..VERTICES {
        let out: BTreeSet<u32> = redis::cmd("SMEMBERS")
            .arg(format!("out:{u}"))
            .query(&mut c)
            .unwrap();
        let expected: BTreeSet<u32> = edges
            .iter()
            .filter(|(a, _)| *a == u)
            .map(|(_, b)| *b)
            .collect();
        assert_eq!(out, expected, "out:{u}");
        let inn: BTreeSet<u32> = redis::cmd("SMEMBERS")
            .arg(format!("in:{u}"))
            .query(&mut c)
            .unwrap();
        let expected: BTreeSet<u32> = edges
            .iter()
            .filter(|(_, b)| *b == u)
            .map(|(a, _)| *a)
            .collect();
        assert_eq!(inn, expected, "in:{u}");
    }
    // Two-hop neighbourhood, as a traversal would ask it.
    let union: BTreeSet<u32> = redis::cmd("SUNION")
        .arg("out:0")
        .arg("out:3")
        .query(&mut c)
        .unwrap();
    let expected: BTreeSet<u32> = edges
        .iter()
        .filter(|(a, _)| *a == 0 || *a == 3)
        .map(|(_, b)| *b)
        .collect();
    assert_eq!(union, expected);
}

const ARTICLES: usize = 2000;
const K: isize = 8;

/// Zipfian rank: article 0 is the most popular (s = 1, by inversion of the
/// harmonic sums; exactness does not matter, skew does).
fn zipf(rng: &mut StdRng, harmonic: &[f64]) -> usize {
    let x = rng.random::<f64>() * harmonic[harmonic.len() - 1];
    harmonic.partition_point(|&h| h < x).min(harmonic.len() - 1)
}

/// Lobsters' vote benchmark: 19 top-K reads per vote; votes go up or down
/// on zipfian articles; articles are hashes with a title.
#[test]
fn lobsters_votes_and_top_k() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_in(dir.path());
    {
        let mut c = con(&server);
        let mut pipe = redis::pipe();
        for a in 0..ARTICLES {
            pipe.cmd("HSET")
                .arg(format!("article:{a}"))
                .arg("title")
                .arg(format!("story {a}"))
                .ignore();
            pipe.cmd("ZADD").arg("votes").arg(0).arg(a).ignore();
        }
        let _: () = pipe.query(&mut c).unwrap();
    }
    let mut harmonic = Vec::with_capacity(ARTICLES);
    let mut sum = 0.0;
    for rank in 1..=ARTICLES {
        sum += 1.0 / rank as f64;
        harmonic.push(sum);
    }
    let tallies: Vec<BTreeMap<usize, i64>> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (server, harmonic) = (&server, &harmonic);
                s.spawn(move || {
                    let mut c = con(server);
                    let mut rng = StdRng::seed_from_u64(t as u64 + 100);
                    let mut tally = BTreeMap::new();
                    for op in 0..4000 {
                        if op % 20 == 0 {
                            let article = zipf(&mut rng, harmonic);
                            let delta = if rng.random_bool(0.8) { 1 } else { -1 };
                            let _: f64 = redis::cmd("ZINCRBY")
                                .arg("votes")
                                .arg(delta)
                                .arg(article)
                                .query(&mut c)
                                .unwrap();
                            *tally.entry(article).or_insert(0) += delta;
                        } else {
                            let top: Vec<(usize, f64)> = redis::cmd("ZREVRANGE")
                                .arg("votes")
                                .arg(0)
                                .arg(K - 1)
                                .arg("WITHSCORES")
                                .query(&mut c)
                                .unwrap();
                            assert_eq!(top.len(), K as usize);
                            assert!(
                                top.windows(2).all(|w| w[0].1 >= w[1].1),
                                "descending: {top:?}"
                            );
                        }
                    }
                    tally
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut votes = vec![0i64; ARTICLES];
    for tally in tallies {
        for (article, delta) in tally {
            votes[article] += delta;
        }
    }
    server.shutdown().unwrap();

    let server = start_in(dir.path());
    let mut c = con(&server);
    for (article, &expected) in votes.iter().enumerate() {
        let score: f64 = redis::cmd("ZSCORE")
            .arg("votes")
            .arg(article)
            .query(&mut c)
            .unwrap();
        assert_eq!(score as i64, expected, "article {article}");
    }
    // The top K after the restart is the model's (ties broken by member,
    // descending, as ZREVRANGE orders them).
    let mut ranked: Vec<(i64, String)> = votes
        .iter()
        .enumerate()
        .map(|(a, &v)| (v, a.to_string()))
        .collect();
    ranked.sort_by(|x, y| y.cmp(x));
    let top: Vec<(String, f64)> = redis::cmd("ZREVRANGE")
        .arg("votes")
        .arg(0)
        .arg(K - 1)
        .arg("WITHSCORES")
        .query(&mut c)
        .unwrap();
    let expected: Vec<(String, f64)> = ranked
        .iter()
        .take(K as usize)
        .map(|(v, a)| (a.clone(), *v as f64))
        .collect();
    assert_eq!(top, expected);
    let title: String = redis::cmd("HGET")
        .arg(format!("article:{}", top[0].0))
        .arg("title")
        .query(&mut c)
        .unwrap();
    assert_eq!(title, format!("story {}", top[0].0));
}
