//! The network loops (`net_loops`): connections move between loops as the
//! number in use changes, and lose nothing on the way: pipelines, a
//! command split over two writes, WATCH and MULTI state, a client's
//! identity, a blocked client, a subscriber. The count is flipped with
//! `DEBUG NET-LOOPS` while clients run, and the controller is seen to give
//! a loop back when the server is idle.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{info_number, start_with, Client};
use engram_server::Config;

/// A server with two network loops, DEBUG allowed.
fn two_loops() -> (engram_server::Server, tempfile::TempDir, tempfile::TempDir) {
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("engram.conf");
    std::fs::write(&path, "enable-debug-command yes\n").unwrap();
    let config = Config {
        threads: 2,
        ..Config::from_file(&path).unwrap()
    };
    let (server, dir) = start_with(config);
    (server, dir, conf)
}

/// Flips the loops in use between one and two every few milliseconds
/// until `stop`.
fn flipper(
    server: &engram_server::Server,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<(u64, Client)> {
    let mut admin = Client::connect(server);
    thread::spawn(move || {
        let mut flips = 0;
        while !stop.load(Ordering::Relaxed) {
            let count = 1 + flips % 2;
            assert_eq!(
                admin.call(&format!("DEBUG NET-LOOPS {count}")),
                format!("(integer) {count}")
            );
            flips += 1;
            thread::sleep(Duration::from_millis(3));
        }
        (flips, admin)
    })
}

#[test]
fn clients_keep_their_state_and_writes_while_they_move() {
    let (server, _dir, _conf) = two_loops();
    let stop = Arc::new(AtomicBool::new(false));
    let flips = flipper(&server, stop.clone());
    let workers: Vec<_> = (0..6)
        .map(|n| {
            let mut c = Client::connect(&server);
            thread::spawn(move || {
                let id = c.call("CLIENT ID");
                c.call("SELECT 3");
                let key = format!("counter:{n}");
                let incr = format!("INCR {key}");
                for round in 1..=150u64 {
                    // A pipeline, then a command sent in two writes with a
                    // pause between (the first half is buffered across a
                    // move).
                    let replies = c.pipeline(&[incr.as_str(); 10]);
                    assert_eq!(
                        replies.last().unwrap(),
                        &format!("(integer) {}", round * 11 - 1)
                    );
                    let command = common::encode(&incr);
                    let (head, tail) = command.split_at(command.len() / 2);
                    std::io::Write::write_all(&mut c.writer, head.as_bytes()).unwrap();
                    thread::sleep(Duration::from_millis(1));
                    std::io::Write::write_all(&mut c.writer, tail.as_bytes()).unwrap();
                    assert_eq!(c.reply(), format!("(integer) {}", round * 11));
                    // A transaction queued over several reads.
                    if round % 10 == 0 {
                        assert_eq!(c.call("MULTI"), "OK");
                        assert_eq!(c.call(&format!("GET {key}")), "QUEUED");
                        thread::sleep(Duration::from_millis(2));
                        assert_eq!(c.call("EXEC"), format!("[\"{}\"]", round * 11));
                    }
                }
                // The same client, in the same database, all along.
                assert_eq!(c.call("CLIENT ID"), id);
                assert_eq!(c.call(&format!("GET {key}")), format!("\"{}\"", 150 * 11));
                c
            })
        })
        .collect();
    // Kept open to the end: each must still be one client.
    let _clients: Vec<Client> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let (flips, _admin) = flips.join().unwrap();
    assert!(flips > 10);
    let mut c = Client::connect(&server);
    assert!(
        info_number(&mut c, "server", "net_loop_moves") > 0,
        "no connection moved"
    );
    // Every client is still one client.
    let list = c.call("CLIENT LIST");
    assert_eq!(list.matches("id=").count(), 8, "{list}");
}

/// INFO's `net_loop_moves` once it reaches `at_least`. A connection
/// moves when its task next looks, after it wrote what woke it: a
/// subscriber's message can reach the client before the move is counted.
fn moves_reach(admin: &mut Client, at_least: u64, what: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let moves = info_number(admin, "server", "net_loop_moves");
        if moves >= at_least {
            return moves;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {moves} moves, not {at_least}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn watch_blocked_pops_and_subscribers_survive_moves() {
    let (server, _dir, _conf) = two_loops();
    // Ranks in accept order: the subscriber and the watcher are odd, so
    // at two loops their home is the second.
    let mut admin = Client::connect(&server);
    let mut subscriber = Client::connect(&server);
    let mut other = Client::connect(&server);
    let mut watcher = Client::connect(&server);
    let mut blocked = Client::connect(&server);
    assert_eq!(admin.call("DEBUG NET-LOOPS 1"), "(integer) 1");
    assert_eq!(watcher.call("WATCH w"), "OK");
    assert_eq!(
        subscriber.call("SUBSCRIBE news"),
        "[\"subscribe\", \"news\", (integer) 1]"
    );
    blocked.send("BLPOP queue 0");
    // Two loops, then one again: each connection moves at its next read.
    let moves = info_number(&mut admin, "server", "net_loop_moves");
    assert_eq!(admin.call("DEBUG NET-LOOPS 2"), "(integer) 2");
    for _ in 0..3 {
        assert_eq!(watcher.call("PING"), "PONG");
        assert_eq!(other.call("PING"), "PONG");
    }
    // A message wakes the subscriber, which then moves; the next one finds
    // it on its new loop, and so on back.
    assert_eq!(other.call("PUBLISH news one"), "(integer) 1");
    assert_eq!(subscriber.reply(), "[\"message\", \"news\", \"one\"]");
    let moved = moves_reach(
        &mut admin,
        moves + 2,
        "the watcher and the subscriber moved",
    );
    assert_eq!(admin.call("DEBUG NET-LOOPS 1"), "(integer) 1");
    assert_eq!(other.call("PUBLISH news two"), "(integer) 1");
    assert_eq!(subscriber.reply(), "[\"message\", \"news\", \"two\"]");
    assert_eq!(watcher.call("PING"), "PONG");
    moves_reach(
        &mut admin,
        moved + 2,
        "the watcher and the subscriber moved back",
    );
    // The watch moved with the client: another client's write aborts it.
    assert_eq!(other.call("SET w changed"), "OK");
    assert_eq!(watcher.call("MULTI"), "OK");
    assert_eq!(watcher.call("SET w mine"), "QUEUED");
    assert_eq!(watcher.call("EXEC"), "(nil array)");
    // The blocked client is served, and the subscriber hears.
    assert_eq!(other.call("RPUSH queue job"), "(integer) 1");
    assert_eq!(blocked.reply(), "[\"queue\", \"job\"]");
    assert_eq!(other.call("PUBLISH news hello"), "(integer) 1");
    assert_eq!(subscriber.reply(), "[\"message\", \"news\", \"hello\"]");
    assert_eq!(blocked.call("PING"), "PONG");
}

#[test]
fn net_loops_refuses_bad_counts_and_gives_a_loop_back_when_idle() {
    let (server, _dir, _conf) = two_loops();
    let mut c = Client::connect(&server);
    assert_eq!(info_number(&mut c, "server", "net_loops"), 2);
    assert_eq!(
        c.call("DEBUG NET-LOOPS -1"),
        "(error) ERR the count of network loops must be 0 or more"
    );
    assert_eq!(
        c.call("DEBUG NET-LOOPS x"),
        "(error) ERR value is not an integer or out of range"
    );
    assert!(c.call("DEBUG NET-LOOPS 2 3").starts_with("(error) ERR"));
    // More than there are: all of them.
    assert_eq!(c.call("DEBUG NET-LOOPS 9"), "(integer) 2");
    assert_eq!(info_number(&mut c, "server", "net_loops_active"), 2);
    // Fixed, the count stays while idle...
    thread::sleep(Duration::from_millis(800));
    assert_eq!(info_number(&mut c, "server", "net_loops_active"), 2);
    // ...and given back to the load, an idle server needs one loop.
    assert_eq!(c.call("DEBUG NET-LOOPS 0"), "(integer) 2");
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_number(&mut c, "server", "net_loops_active") != 1 {
        assert!(Instant::now() < deadline, "an idle server kept two loops");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn at_always_one_runtime_serves_every_client() {
    // A writer's reply waits for an msync run on a worker: the workers
    // share their clients instead of each keeping its own.
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("engram.conf");
    std::fs::write(&path, "enable-debug-command yes\nappendfsync always\n").unwrap();
    let (server, _dir) = start_with(Config {
        threads: 2,
        ..Config::from_file(&path).unwrap()
    });
    let mut c = Client::connect(&server);
    assert_eq!(info_number(&mut c, "server", "net_loops"), 1);
    assert_eq!(c.call("DEBUG NET-LOOPS 2"), "(integer) 1");
    assert_eq!(c.call("SET k v"), "OK");
    assert_eq!(c.call("GET k"), "\"v\"");
    assert_eq!(info_number(&mut c, "server", "net_loop_moves"), 0);
}

/// One loop serves its clients in the order their requests arrived, as
/// Redis's event loop does: a client that sends a command and then has
/// another client send one (Redis's suite does it with a deferring client,
/// a blocked XREADGROUP and a DEL) sees its own run first. tokio's LIFO
/// slot ran the last client the reactor woke first, so of two requests
/// that arrived together the second ran first (`net_loops.rs`).
#[test]
fn one_loop_serves_requests_in_the_order_they_arrived() {
    let (server, _dir, _conf) = two_loops();
    let mut admin = Client::connect(&server);
    assert_eq!(admin.call("DEBUG NET-LOOPS 1"), "(integer) 1");
    let mut first = Client::connect(&server);
    let mut second = Client::connect(&server);
    // Both at home on the one loop.
    assert_eq!(first.call("PING"), "PONG");
    assert_eq!(second.call("PING"), "PONG");
    let mut overtaken = 0;
    for round in 0..300 {
        first.send(&format!("SET k first{round}"));
        second.send(&format!("SET k second{round}"));
        assert_eq!(first.reply(), "OK");
        assert_eq!(second.reply(), "OK");
        if admin.call("GET k") != format!("\"second{round}\"") {
            overtaken += 1;
        }
    }
    assert_eq!(
        overtaken, 0,
        "of 300 rounds, the second request ran first in some"
    );
}
