//! SLOWLOG, LATENCY and the per-command counters, as Redis 7.0 shows them.

mod common;

use std::io::BufRead;
use std::time::{Duration, Instant};

use common::{start_debuggable, Client};

#[test]
fn slowlog() {
    let (server, _dir, _conf) = start_debuggable();
    let mut c = Client::connect(&server);
    c.script(&[
        (
            "CONFIG GET slowlog-log-slower-than",
            "[\"slowlog-log-slower-than\", \"10000\"]",
        ),
        ("SLOWLOG LEN", "(integer) 0"),
        ("CONFIG SET slowlog-log-slower-than 100000", "OK"),
        ("PING", "PONG"),
        ("SLOWLOG LEN", "(integer) 0"),
        ("CLIENT SETNAME sleeper", "OK"),
        ("DEBUG SLEEP 0.2", "OK"),
        ("SLOWLOG LEN", "(integer) 1"),
    ]);
    let entry = c.call("SLOWLOG GET");
    assert!(
        entry.starts_with("[[(integer) 0, (integer) 1")
            && entry.contains("[\"DEBUG\", \"SLEEP\", \"0.2\"]")
            && entry.ends_with("\"sleeper\"]]"),
        "{entry}"
    );

    // Everything, at most 10, newest first.
    c.script(&[
        (
            "CONFIG SET slowlog-log-slower-than 0 slowlog-max-len 10",
            "OK",
        ),
        ("SLOWLOG RESET", "OK"),
    ]);
    for i in 0..100 {
        c.call(&format!("SET k{i} v"));
    }
    c.script(&[("SLOWLOG LEN", "(integer) 10")]);
    // (SLOWLOG LEN is slow too, under a threshold of 0: the newest.)
    let five = c.call("SLOWLOG GET 5");
    assert!(five.contains("[\"SLOWLOG\", \"LEN\"]"), "{five}");
    assert_eq!(five.matches("\"SET\"").count(), 4, "{five}");
    assert!(five.contains("\"k99\""), "{five}");
    c.script(&[
        (
            "SLOWLOG GET -2",
            "(error) ERR count should be greater than or equal to -1",
        ),
        (
            "SLOWLOG GET x",
            "(error) ERR value is not an integer or out of range",
        ),
        (
            "SLOWLOG LEN x",
            "(error) ERR wrong number of arguments for 'slowlog|len' command",
        ),
        (
            "SLOWLOG NOPE",
            "(error) ERR unknown subcommand 'NOPE'. Try SLOWLOG HELP.",
        ),
    ]);

    // Trimmed as Redis trims; passwords redacted; EXEC's commands logged
    // instead of EXEC.
    c.call("SLOWLOG RESET");
    let many: Vec<String> = (3..=33).map(|i| i.to_string()).collect();
    c.call(&format!("SADD set {}", many.join(" ")));
    let long = "A".repeat(129);
    c.call(&format!("SADD set foo {long}"));
    c.call("CONFIG SET requirepass secret");
    c.call("AUTH secret");
    c.call("CONFIG SET requirepass \"\"");
    c.script(&[
        ("MULTI", "OK"),
        ("DEBUG SLEEP 0", "QUEUED"),
        ("EXEC", "[OK]"),
    ]);
    let log = c.call("SLOWLOG GET -1");
    assert!(log.contains("\"31\", \"... (2 more arguments)\"]"), "{log}");
    assert!(
        log.contains(&format!("\"{}... (1 more bytes)\"", "A".repeat(128))),
        "{log}"
    );
    assert!(log.contains("\"requirepass\", \"(redacted)\""), "{log}");
    assert!(!log.contains("secret"), "{log}");
    assert!(
        !log.contains("\"AUTH\"") && !log.contains("\"EXEC\""),
        "{log}"
    );
    assert!(log.contains("\"DEBUG\", \"SLEEP\", \"0\""), "{log}");

    c.script(&[
        ("CONFIG SET slowlog-log-slower-than -1", "OK"),
        ("SLOWLOG RESET", "OK"),
        ("DEBUG SLEEP 0.01", "OK"),
        ("SLOWLOG LEN", "(integer) 0"),
        (
            "CONFIG SET slowlog-log-slower-than 0 slowlog-max-len 1",
            "OK",
        ),
        ("PING", "PONG"),
        ("ECHO last", "\"last\""),
        ("SLOWLOG LEN", "(integer) 1"),
    ]);
    server.shutdown().unwrap();
}

#[test]
fn latency_monitor_and_histograms() {
    let (server, _dir, _conf) = start_debuggable();
    let mut c = Client::connect(&server);
    c.script(&[
        ("LATENCY LATEST", "[]"),
        ("DEBUG SLEEP 0.12", "OK"),
        // Off by default: nothing recorded.
        ("LATENCY LATEST", "[]"),
        ("CONFIG SET latency-monitor-threshold 100", "OK"),
        ("DEBUG SLEEP 0.12", "OK"),
        ("PING", "PONG"),
    ]);
    let latest = c.call("LATENCY LATEST");
    assert!(latest.starts_with("[[\"command\", (integer) 1"), "{latest}");
    let history = c.call("LATENCY HISTORY command");
    assert!(history.starts_with("[[(integer) 1"), "{history}");
    let ms: u64 = history
        .trim_end_matches("]]")
        .rsplit("(integer) ")
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((120..2000).contains(&ms), "{history}");
    let graph = c.call("LATENCY GRAPH command");
    assert!(graph.contains("command - high"), "{graph}");
    let doctor = c.call("LATENCY DOCTOR");
    assert!(doctor.contains("command: 1 samples"), "{doctor}");
    c.script(&[
        ("LATENCY HISTORY blabla", "[]"),
        ("LATENCY RESET blabla", "(integer) 0"),
        (
            "LATENCY GRAPH blabla",
            "(error) ERR No samples available for event 'blabla'",
        ),
        ("LATENCY RESET", "(integer) 1"),
        ("LATENCY LATEST", "[]"),
        (
            "LATENCY HELP xxx",
            "(error) ERR wrong number of arguments for 'latency|help' command",
        ),
    ]);

    c.script(&[("CONFIG RESETSTAT", "OK")]);
    let only_reset = c.call("LATENCY HISTOGRAM");
    assert!(
        only_reset.starts_with(
            "[\"config|resetstat\", [\"calls\", (integer) 1, \"histogram_usec\", [(integer) "
        ) && only_reset.matches("\"calls\"").count() == 1,
        "{only_reset}"
    );
    c.call("CONFIG RESETSTAT");
    c.call("SET a b");
    c.call("SET c d");
    c.call("GET a");
    c.call("CLIENT ID");
    let some = c.call("LATENCY HISTOGRAM set blabla client");
    assert!(
        some.contains("\"set\", [\"calls\", (integer) 2, \"histogram_usec\""),
        "{some}"
    );
    assert!(
        some.contains("\"client|id\", [\"calls\", (integer) 1"),
        "{some}"
    );
    assert!(!some.contains("\"get\""), "{some}");
    c.script(&[("LATENCY HISTOGRAM blabla", "[]")]);
    let stats = c.call("INFO commandstats");
    assert!(stats.contains("cmdstat_client|id:calls=1,"), "{stats}");
    assert!(
        stats.contains("cmdstat_latency|histogram:calls="),
        "{stats}"
    );
    server.shutdown().unwrap();
}

/// MEMORY USAGE grows with what a key holds, on both sides of the split.
#[test]
fn memory_usage_and_stats() {
    let (server, _dir) = common::start();
    let mut c = Client::connect(&server);
    let usage = |c: &mut Client, key: &str| -> i64 {
        let reply = c.call(&format!("MEMORY USAGE {key}"));
        reply
            .strip_prefix("(integer) ")
            .unwrap_or_else(|| panic!("{reply}"))
            .parse()
            .unwrap()
    };
    c.call("SET small v");
    c.call(&format!("SET big {}", "x".repeat(10_000)));
    let (small, big) = (usage(&mut c, "small"), usage(&mut c, "big"));
    assert!(small > 1 && big > small + 9_900, "{small} {big}");
    c.call("HSET h f v");
    let one = usage(&mut c, "h");
    for i in 0..1000 {
        c.call(&format!("HSET h field{i} value{i}"));
    }
    let many = usage(&mut c, "h");
    assert!(many > one + 1000 * 10, "{one} {many}");
    c.script(&[
        ("MEMORY USAGE nokey", "(nil)"),
        ("MEMORY USAGE h SAMPLES 0", &format!("(integer) {many}")),
        (
            "MEMORY USAGE h SAMPLES x",
            "(error) ERR value is not an integer or out of range",
        ),
        ("MEMORY USAGE h BOGUS 1", "(error) ERR syntax error"),
        ("MEMORY PURGE", "OK"),
        (
            "MEMORY NOPE",
            "(error) ERR unknown subcommand 'NOPE'. Try MEMORY HELP.",
        ),
        (
            "MEMORY STATS x",
            "(error) ERR wrong number of arguments for 'memory|stats' command",
        ),
    ]);
    let stats = c.call("MEMORY STATS");
    assert!(stats.contains("\"keys.count\", (integer) 3"), "{stats}");
    assert!(c.call("MEMORY DOCTOR").contains("persistent data file"));
    server.shutdown().unwrap();
}

/// COMMAND GETKEYS finds keys where Redis does, movable ones included.
#[test]
fn command_getkeys_and_list() {
    let (server, _dir) = common::start();
    let mut c = Client::connect(&server);
    let many: Vec<String> = (1..=300).map(|i| format!("key{i}")).collect();
    c.script(&[
        ("COMMAND GETKEYS get key", "[\"key\"]"),
        ("COMMAND GETKEYS mset a 1 b 2", "[\"a\", \"b\"]"),
        (
            "COMMAND GETKEYS zunionstore dst 2 a b WEIGHTS 1 2",
            "[\"dst\", \"a\", \"b\"]",
        ),
        (
            "COMMAND GETKEYS zunionstore dst 3 a b",
            "(error) ERR Invalid arguments specified for command",
        ),
        ("COMMAND GETKEYS lmpop 2 l1 l2 LEFT", "[\"l1\", \"l2\"]"),
        ("COMMAND GETKEYS blmpop 0 1 l1 LEFT COUNT 2", "[\"l1\"]"),
        ("COMMAND GETKEYS sintercard 2 a b LIMIT 1", "[\"a\", \"b\"]"),
        ("COMMAND GETKEYS memory usage key", "[\"key\"]"),
        // COMMAND GETKEYS itself takes a command and an argument at least
        // (Redis 7.0's arity -4).
        (
            "COMMAND GETKEYS ping",
            "(error) ERR wrong number of arguments for 'command|getkeys' command",
        ),
        (
            "COMMAND GETKEYS ping x",
            "(error) ERR The command has no key arguments",
        ),
        (
            "COMMAND GETKEYS nosuch a",
            "(error) ERR Invalid command specified",
        ),
        (
            "COMMAND GETKEYS get a b",
            "(error) ERR Invalid number of arguments specified for command",
        ),
        ("COMMAND GETKEYSANDFLAGS get k1", "[[\"k1\", [RO, access]]]"),
        (
            "COMMAND LIST FILTERBY PATTERN hset*",
            "[\"hset\", \"hsetnx\"]",
        ),
        ("COMMAND LIST FILTERBY MODULE nosuch", "[]"),
        ("COMMAND LIST FILTERBY ACLCAT nosuch", "[]"),
        ("COMMAND LIST bad_arg", "(error) ERR syntax error"),
    ]);
    let getkeys = c.call(&format!(
        "COMMAND GETKEYS zunionstore target {} {}",
        many.len(),
        many.join(" ")
    ));
    assert_eq!(getkeys.matches("\"key").count(), 300, "{getkeys}");
    let info = c.call("COMMAND INFO zunionstore");
    assert!(info.contains("movablekeys"), "{info}");
    let hashes = c.call("COMMAND LIST FILTERBY ACLCAT hash");
    assert!(
        hashes.contains("\"hget\"") && !hashes.contains("\"get\""),
        "{hashes}"
    );
    server.shutdown().unwrap();
}

/// The counters every command bumps are kept per CPU (`PerCpu`): with
/// clients on both network workers at once, INFO still adds up exactly,
/// and CONFIG RESETSTAT clears every CPU's share.
#[test]
fn counters_bumped_from_every_worker_add_up_and_reset() {
    let (server, _dir) = common::start();
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 500;
    let mut c = Client::connect(&server);
    c.call("SET present v");
    c.call("CONFIG RESETSTAT");
    std::thread::scope(|scope| {
        for _ in 0..CLIENTS {
            scope.spawn(|| {
                let mut c = Client::connect(&server);
                for _ in 0..ROUNDS {
                    // One hit and one miss a round, in one pipeline.
                    let replies = c.pipeline(&["GET present", "GET absent"]);
                    assert_eq!(replies, ["\"v\"", "(nil)"]);
                }
            });
        }
    });
    let gets = (CLIENTS * ROUNDS) as u64;
    assert_eq!(common::info_number(&mut c, "stats", "keyspace_hits"), gets);
    assert_eq!(
        common::info_number(&mut c, "stats", "keyspace_misses"),
        gets
    );
    let commandstats = c.call("INFO commandstats");
    assert!(
        commandstats.contains(&format!("cmdstat_get:calls={},", 2 * gets)),
        "{commandstats}"
    );
    // The GETs and four more: as Redis counts them, CONFIG RESETSTAT
    // (after it ran) and the three INFOs before this one.
    let processed = common::info_number(&mut c, "stats", "total_commands_processed");
    assert_eq!(processed, 2 * gets + 4, "{processed}");
    assert!(common::info_number(&mut c, "stats", "total_net_input_bytes") > 2 * gets * 20);

    c.call("CONFIG RESETSTAT");
    assert_eq!(common::info_number(&mut c, "stats", "keyspace_hits"), 0);
    assert_eq!(common::info_number(&mut c, "stats", "keyspace_misses"), 0);
    // The three INFOs since (as Redis counts them: CONFIG RESETSTAT after
    // it ran, and an INFO not itself).
    assert_eq!(
        common::info_number(&mut c, "stats", "total_commands_processed"),
        3
    );
    assert!(!c.call("INFO commandstats").contains("cmdstat_get"));
}

/// `timeout N` closes a client that has sent nothing for N seconds since
/// its last command (Redis's `maxidletime`); a subscriber, which waits for
/// others' messages, is spared.
#[test]
fn an_idle_client_is_closed_after_timeout() {
    let (server, _dir, _conf) = start_debuggable();
    Client::connect(&server).script(&[("CONFIG SET timeout 1", "OK")]);
    let mut idle = Client::connect(&server);
    let mut subscriber = Client::connect(&server);
    idle.script(&[("PING", "PONG")]);
    let started = Instant::now();
    assert_eq!(
        subscriber.call("SUBSCRIBE ch"),
        "[\"subscribe\", \"ch\", (integer) 1]"
    );
    let mut rest = String::new();
    match idle.reader.read_line(&mut rest) {
        Ok(0) => {}
        Ok(_) => panic!("expected the idle connection closed, got {rest:?}"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "closed after {waited:?}"
    );
    // The subscriber, idle as long, still gets its messages.
    std::thread::sleep(Duration::from_millis(300));
    let mut publisher = Client::connect(&server);
    publisher.script(&[
        ("PUBLISH ch m", "(integer) 1"),
        ("CONFIG SET timeout 0", "OK"),
    ]);
    assert_eq!(subscriber.reply(), "[\"message\", \"ch\", \"m\"]");
}

/// The idle field of client `id`'s line in `list` (CLIENT LIST's reply).
fn idle_of(list: &str, id: &str) -> u64 {
    let line = list
        .split("id=")
        .find(|line| line.starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("client {id} not in {list}"));
    let idle = line.split(" idle=").nth(1).expect("an idle field");
    idle[..idle.find(' ').unwrap()].parse().unwrap()
}

#[test]
fn client_list_shows_idle_time_and_a_timeout_set_later_closes_an_idle_client() {
    let (server, _dir, _conf) = start_debuggable();
    let mut idle = Client::connect(&server);
    let id = idle.call("CLIENT ID").replace("(integer) ", "");
    std::thread::sleep(Duration::from_millis(2500));
    let mut admin = Client::connect(&server);
    let list = admin.call("CLIENT LIST");
    let seen = idle_of(&list, &id);
    assert!((1..=3).contains(&seen), "idle={seen} after 2.5 s: {list}");
    let own = admin.call("CLIENT ID").replace("(integer) ", "");
    assert_eq!(idle_of(&admin.call("CLIENT LIST"), &own), 0);
    // Idle for longer than the timeout before it was set: closed by the
    // next sweeps, without sending anything.
    let set = Instant::now();
    admin.script(&[("CONFIG SET timeout 1", "OK")]);
    let mut rest = String::new();
    match idle.reader.read_line(&mut rest) {
        Ok(0) => {}
        Ok(_) => panic!("expected the idle connection closed, got {rest:?}"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(
        set.elapsed() < Duration::from_secs(5),
        "{:?}",
        set.elapsed()
    );
    Client::connect(&server).script(&[("CONFIG SET timeout 0", "OK")]);
    server.shutdown().unwrap();
}
