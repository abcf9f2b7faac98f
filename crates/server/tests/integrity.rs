//! The integrity layer through the server, over real TCP: its settings
//! (config, CONFIG GET/SET, start-up checks), `INFO integrity`,
//! `ENGRAM.SCRUB`, and what clients see when the data file is damaged
//! while the server runs.
//!
//! Damage is made as media would make it: bytes of `values.pmem` are
//! flipped with a positioned write to the file, behind the server's back.
//! The page cache is shared with the server's mapping, so the server reads
//! the flipped bytes at once, and the integrity layer, which only learns of
//! stores made through the mapping, does not know they changed.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use engram_engine::{IntegrityMode, IntegrityOptions};
use engram_server::{Config, Server};

const PAGE: usize = 4096;
const STRIPE_PAGES: usize = 4;

fn start(integrity: IntegrityOptions) -> (Server, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(Config {
        port: 0,
        dir: data.clone(),
        integrity,
        ..Config::default()
    })
    .unwrap();
    (server, dir, data)
}

/// Background scrubbing off, so damage stays until a test scrubs.
fn no_background_scrub() -> IntegrityOptions {
    IntegrityOptions {
        scrub_bytes_per_sec: 0,
        ..IntegrityOptions::default()
    }
}

fn connect(server: &Server, resp3: bool) -> redis::Connection {
    let url = format!(
        "redis://{}/{}",
        server.addr,
        if resp3 { "?protocol=resp3" } else { "" }
    );
    let con = redis::Client::open(url)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    con
}

/// `INFO <section>` as field → value.
fn info(con: &mut redis::Connection, section: &str) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    text.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn info_u64(info: &HashMap<String, String>, field: &str) -> u64 {
    info.get(field)
        .unwrap_or_else(|| panic!("INFO lacks {field}: {info:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{field} is not an integer: {info:?}"))
}

/// ENGRAM.SCRUB's reply, whichever protocol carried it.
#[derive(Debug)]
struct Scrub {
    numbers: HashMap<String, i64>,
    affected_keys: Vec<String>,
}

impl Scrub {
    fn get(&self, field: &str) -> i64 {
        *self
            .numbers
            .get(field)
            .unwrap_or_else(|| panic!("no {field} in {self:?}"))
    }
}

fn text(value: &redis::Value) -> String {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn scrub(con: &mut redis::Connection) -> Scrub {
    let reply: redis::Value = redis::cmd("ENGRAM.SCRUB").query(con).unwrap();
    let pairs: Vec<(redis::Value, redis::Value)> = match reply {
        redis::Value::Map(pairs) => pairs,
        redis::Value::Array(items) => {
            assert_eq!(items.len() % 2, 0, "{items:?}");
            let mut items = items.into_iter();
            std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
        }
        other => panic!("ENGRAM.SCRUB replied {other:?}"),
    };
    let mut scrub = Scrub {
        numbers: HashMap::new(),
        affected_keys: Vec::new(),
    };
    let names: Vec<String> = pairs.iter().map(|(name, _)| text(name)).collect();
    assert_eq!(
        names,
        [
            "pages_checked",
            "pages_stale",
            "corrupt_pages",
            "repaired_pages",
            "unrepairable_pages",
            "parity_rewritten",
            "metadata_rebuilt",
            "affected_keys",
            "duration_ms"
        ]
    );
    for (name, value) in pairs {
        match value {
            redis::Value::Int(n) => {
                scrub.numbers.insert(text(&name), n);
            }
            redis::Value::Array(keys) => scrub.affected_keys = keys.iter().map(text).collect(),
            other => panic!("{} is {other:?}", text(&name)),
        }
    }
    scrub
}

fn get(con: &mut redis::Connection, key: &str) -> redis::RedisResult<Option<Vec<u8>>> {
    redis::cmd("GET").arg(key).query(con)
}

/// Flips every bit of the byte at `offset` of `file`, as a positioned write
/// (not through the server's mapping); returns the byte that was there.
fn flip(file: &Path, offset: usize) -> u8 {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset as u64).unwrap();
    file.write_all_at(&[!byte[0]], offset as u64).unwrap();
    byte[0]
}

fn byte_at(file: &Path, offset: usize) -> u8 {
    let mut byte = [0u8];
    std::fs::File::open(file)
        .unwrap()
        .read_exact_at(&mut byte, offset as u64)
        .unwrap();
    byte[0]
}

/// A value no other key's value contains: `<NNNN>` repeated.
fn value_of(i: usize) -> Vec<u8> {
    format!("<{i:04}>").repeat(150).into_bytes()
}

/// Where each key's value starts in the data file: one pass over the file
/// looking for the first `<NNNN>` of each value.
fn value_offsets(file: &Path, keys: usize) -> Vec<usize> {
    let data = std::fs::read(file).unwrap();
    let mut starts = vec![usize::MAX; keys];
    for at in 0..data.len().saturating_sub(6) {
        let token = &data[at..at + 6];
        if token[0] != b'<' || token[5] != b'>' || !token[1..5].iter().all(u8::is_ascii_digit) {
            continue;
        }
        let i: usize = std::str::from_utf8(&token[1..5]).unwrap().parse().unwrap();
        if i >= keys {
            continue;
        }
        if starts[i] == usize::MAX {
            starts[i] = at;
        } else {
            // A second copy (a compaction move) would make the test's
            // damage miss the record the server reads.
            assert!(
                at < starts[i] + value_of(i).len(),
                "value {i} is in the data file twice"
            );
        }
    }
    for (i, &start) in starts.iter().enumerate() {
        assert!(start != usize::MAX, "value {i} not found in the data file");
        let value = value_of(i);
        assert_eq!(&data[start..start + value.len()], &value[..], "value {i}");
    }
    starts
}

fn key(i: usize) -> String {
    format!("k{i}")
}

#[test]
fn info_integrity_config_and_a_clean_scrub() {
    let (server, _dir, _data) = start(IntegrityOptions::default());
    let mut con = connect(&server, false);

    let fields = info(&mut con, "integrity");
    assert_eq!(fields["integrity_mode"], "lazy");
    assert_eq!(info_u64(&fields, "integrity_period_ms"), 1000);
    assert_eq!(info_u64(&fields, "integrity_stripe_pages"), 4);
    assert_eq!(
        info_u64(&fields, "integrity_scrub_bytes_per_sec_limit"),
        64 << 20
    );
    assert_eq!(info_u64(&fields, "integrity_scrub_period_sec"), 600);
    assert!(info_u64(&fields, "integrity_pages_covered") > 0);
    for field in [
        "integrity_pages_stale",
        "integrity_oldest_stale_age_ms",
        "integrity_passes",
        "integrity_pages_refreshed",
        "integrity_scrub_sweeps",
        "integrity_pages_scrubbed",
        "integrity_scrub_bytes_per_sec",
        "integrity_corruptions_found",
        "integrity_repaired",
        "integrity_unrepairable",
        "integrity_metadata_rebuilt",
    ] {
        info_u64(&fields, field);
    }
    let last_pass: f64 = fields["integrity_last_pass_duration_ms"].parse().unwrap();
    assert!(last_pass >= 0.0);

    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(value_of(i))
            .query(&mut con)
            .unwrap();
    }
    let report = scrub(&mut con);
    let covered = info_u64(&info(&mut con, "integrity"), "integrity_pages_covered");
    assert!(report.get("pages_checked") > 0, "{report:?}");
    assert!(report.get("pages_checked") as u64 <= covered, "{report:?}");
    for field in [
        "pages_stale",
        "corrupt_pages",
        "repaired_pages",
        "unrepairable_pages",
        "metadata_rebuilt",
    ] {
        assert_eq!(report.get(field), 0, "{field}: {report:?}");
    }
    assert!(report.affected_keys.is_empty(), "{report:?}");
    assert!(report.get("duration_ms") >= 0);

    let after = info(&mut con, "integrity");
    assert!(info_u64(&after, "integrity_scrub_sweeps") >= 1, "{after:?}");
    assert!(
        info_u64(&after, "integrity_pages_scrubbed") >= report.get("pages_checked") as u64,
        "{after:?}"
    );
    // The scrub refreshed what the writes made stale.
    assert!(info_u64(&after, "integrity_passes") >= 1, "{after:?}");
    assert!(
        info_u64(&after, "integrity_pages_refreshed") >= 1,
        "{after:?}"
    );
    assert!(
        info_u64(&after, "integrity_scrub_bytes_per_sec") > 0,
        "{after:?}"
    );
    for field in [
        "integrity_corruptions_found",
        "integrity_repaired",
        "integrity_unrepairable",
    ] {
        assert_eq!(info_u64(&after, field), 0, "{field}: {after:?}");
    }

    // Plain INFO and INFO all include the section; other sections do not.
    for args in [&[][..], &["all"][..], &["everything"][..]] {
        let text: String = redis::cmd("INFO").arg(args).query(&mut con).unwrap();
        assert!(
            text.contains("# Integrity\r\nintegrity_mode:lazy\r\n"),
            "INFO {args:?}"
        );
    }
    let keyspace: String = redis::cmd("INFO").arg("keyspace").query(&mut con).unwrap();
    assert!(!keyspace.contains("integrity_"), "{keyspace}");

    // The settings: readable, fixed.
    let config: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("integrity*")
        .query(&mut con)
        .unwrap();
    let config: HashMap<_, _> = config
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect();
    assert_eq!(config["integrity"], "lazy");
    assert_eq!(config["integrity-period-ms"], "1000");
    assert_eq!(config["integrity-stripe-pages"], "4");
    assert_eq!(config["integrity-scrub-rate-mb"], "64");
    assert_eq!(config["integrity-scrub-period-sec"], "600");
    assert_eq!(config.len(), 5, "{config:?}");
    for (name, value) in [
        ("integrity", "off"),
        ("integrity-period-ms", "10"),
        ("integrity-stripe-pages", "8"),
        ("integrity-scrub-rate-mb", "0"),
        ("integrity-scrub-period-sec", "0"),
    ] {
        let err = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query::<()>(&mut con)
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("argument '{name}'"))
                && text.contains("can't set immutable config")
                && text.contains("fixed at startup"),
            "{text}"
        );
    }

    // Listed like any other command.
    let info_reply: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("engram.scrub")
        .query(&mut con)
        .unwrap();
    let redis::Value::Array(entries) = info_reply else {
        panic!("{info_reply:?}")
    };
    let redis::Value::Array(entry) = &entries[0] else {
        panic!("{entries:?}")
    };
    assert_eq!(text(&entry[0]), "engram.scrub");
    assert_eq!(entry[1], redis::Value::Int(1));
    let list: Vec<String> = redis::cmd("COMMAND").arg("LIST").query(&mut con).unwrap();
    assert!(list.iter().any(|name| name == "engram.scrub"));
    let docs: redis::Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("ENGRAM.SCRUB")
        .query(&mut con)
        .unwrap();
    let docs = format!("{docs:?}");
    assert!(
        docs.contains("summary") && docs.contains("parity"),
        "{docs}"
    );
    let err = redis::cmd("ENGRAM.SCRUB")
        .arg("now")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("wrong number of arguments for 'engram.scrub' command"),
        "{err}"
    );

    // Not inside a transaction (its locks would be held throughout).
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    let queued: String = redis::cmd("ENGRAM.SCRUB").query(&mut con).unwrap();
    assert_eq!(queued, "QUEUED");
    let exec = redis::cmd("EXEC").query::<redis::Value>(&mut con);
    assert!(
        format!("{exec:?}").contains("ENGRAM.SCRUB is not allowed inside MULTI/EXEC"),
        "{exec:?}"
    );

    // Over RESP3 the reply is a map.
    let mut resp3 = connect(&server, true);
    let reply: redis::Value = redis::cmd("ENGRAM.SCRUB").query(&mut resp3).unwrap();
    assert!(
        matches!(reply, redis::Value::Map(ref pairs) if pairs.len() == 9),
        "{reply:?}"
    );
    assert_eq!(scrub(&mut resp3).get("corrupt_pages"), 0);

    drop((con, resp3));
    server.shutdown().unwrap();
}

#[test]
fn integrity_off() {
    let (server, _dir, data) = start(IntegrityOptions::off());
    let mut con = connect(&server, false);
    let text: String = redis::cmd("INFO").arg("integrity").query(&mut con).unwrap();
    assert_eq!(text, "# Integrity\r\nintegrity_mode:off\r\n");
    let err = redis::cmd("ENGRAM.SCRUB")
        .query::<()>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("ERR"));
    assert!(
        err.to_string()
            .contains("integrity is off (start with --integrity lazy or inline)"),
        "{err}"
    );
    let mode: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("integrity")
        .query(&mut con)
        .unwrap();
    assert_eq!(mode, ["integrity", "off"]);
    assert!(!data.join("integrity.pmem").exists());
    drop(con);
    server.shutdown().unwrap();
}

#[test]
fn invalid_integrity_settings_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    for (integrity, expected) in [
        (
            IntegrityOptions {
                stripe_pages: 1,
                ..IntegrityOptions::default()
            },
            "integrity-stripe-pages must be 2 to 64, got 1",
        ),
        (
            IntegrityOptions {
                period: Duration::ZERO,
                ..IntegrityOptions::default()
            },
            "integrity-period-ms must be 1 to 86400000",
        ),
    ] {
        let err = Server::start(Config {
            port: 0,
            dir: dir.path().join("data"),
            integrity,
            ..Config::default()
        })
        .err()
        .expect("the server must refuse to start");
        assert!(err.to_string().contains(expected), "{err}");
    }
    assert!(
        !dir.path().join("data").exists(),
        "nothing is created on a refused start"
    );
}

/// Keys whose records (header, key and value) lie wholly outside `pages`.
fn clear_of(starts: &[usize], pages: &[usize]) -> Vec<usize> {
    (0..starts.len())
        .filter(|&i| {
            // The record header and key sit just before the value.
            let first = (starts[i] - 64) / PAGE;
            let last = (starts[i] + value_of(i).len() - 1) / PAGE;
            pages.iter().all(|p| !(first..=last).contains(p))
        })
        .collect()
}

#[test]
fn damage_is_repaired_from_parity_or_named_and_refused() {
    const KEYS: usize = 400;
    let (server, _dir, data) = start(no_background_scrub());
    let file = data.join("values.pmem");
    let mut con = connect(&server, false);
    for i in 0..KEYS {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(value_of(i))
            .query(&mut con)
            .unwrap();
    }
    // Redundancy now covers every page as written.
    assert_eq!(scrub(&mut con).get("corrupt_pages"), 0);
    let starts = value_offsets(&file, KEYS);

    // One flipped byte: the read refuses it, the scrub rebuilds the page.
    let victim = 7;
    let at = starts[victim] + 300;
    let original = flip(&file, at);
    let err = get(&mut con, &key(victim)).unwrap_err();
    assert!(
        err.to_string().contains("data for this key is corrupt"),
        "{err}"
    );
    assert_eq!(
        get(&mut con, &key(victim + 100)).unwrap(),
        Some(value_of(victim + 100)),
        "other keys are untouched"
    );
    let report = scrub(&mut con);
    assert_eq!(report.get("corrupt_pages"), 1, "{report:?}");
    assert_eq!(report.get("repaired_pages"), 1, "{report:?}");
    assert_eq!(report.get("unrepairable_pages"), 0, "{report:?}");
    assert!(report.affected_keys.is_empty(), "{report:?}");
    assert_eq!(get(&mut con, &key(victim)).unwrap(), Some(value_of(victim)));
    assert_eq!(byte_at(&file, at), original, "the file itself is repaired");
    let fields = info(&mut con, "integrity");
    assert_eq!(info_u64(&fields, "integrity_corruptions_found"), 1);
    assert_eq!(info_u64(&fields, "integrity_repaired"), 1);
    assert_eq!(info_u64(&fields, "integrity_unrepairable"), 0);

    // Two damaged pages of one stripe: parity cannot rebuild either. Find
    // pages p and p^1 of an aligned stripe holding values of different keys.
    let value_on = |page: usize| {
        (0..KEYS).find_map(|i| {
            let (start, end) = (starts[i], starts[i] + value_of(i).len());
            let (lo, hi) = (start.max(page * PAGE), end.min((page + 1) * PAGE));
            // A byte well inside both the value and the page.
            (hi > lo + 16).then(|| (i, lo + (hi - lo) / 2))
        })
    };
    let last_page = starts.iter().max().unwrap() / PAGE;
    let (first, second) = (starts[50] / PAGE..last_page)
        .filter(|page| page % 2 == 0)
        .find_map(|page| {
            let (a, at_a) = value_on(page)?;
            let (b, at_b) = value_on(page ^ 1)?;
            (a != b).then_some(((a, at_a), (b, at_b)))
        })
        .expect("two value-bearing pages in one stripe");
    let bad_pages = [first.1 / PAGE, second.1 / PAGE];
    assert_eq!(bad_pages[0] / STRIPE_PAGES, bad_pages[1] / STRIPE_PAGES);
    flip(&file, first.1);
    flip(&file, second.1);
    let report = scrub(&mut con);
    assert_eq!(report.get("corrupt_pages"), 2, "{report:?}");
    assert_eq!(report.get("repaired_pages"), 0, "{report:?}");
    assert_eq!(report.get("unrepairable_pages"), 2, "{report:?}");
    for damaged in [first.0, second.0] {
        assert!(
            report.affected_keys.contains(&key(damaged)),
            "{} not named: {report:?}",
            key(damaged)
        );
    }
    // Only keys with bytes on the two pages are named.
    let clear = clear_of(&starts, &bad_pages);
    for name in &report.affected_keys {
        let i: usize = name.strip_prefix('k').unwrap().parse().unwrap();
        assert!(
            !clear.contains(&i),
            "{name} is not on a bad page: {report:?}"
        );
    }
    let fields = info(&mut con, "integrity");
    assert_eq!(info_u64(&fields, "integrity_unrepairable"), 2, "{fields:?}");

    // Reads of the damaged keys are refused with an error; the connection
    // and every other key keep working.
    for damaged in [first.0, second.0] {
        let err = get(&mut con, &key(damaged)).unwrap_err();
        assert_eq!(err.code(), Some("ERR"), "{err}");
        assert!(
            err.to_string()
                .contains("data for this key is corrupt and could not be repaired from parity"),
            "{err}"
        );
        let err = redis::cmd("STRLEN")
            .arg(key(damaged))
            .query::<i64>(&mut con)
            .unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
    }
    for &i in clear.iter().take(20) {
        assert_eq!(
            get(&mut con, &key(i)).unwrap(),
            Some(value_of(i)),
            "{}",
            key(i)
        );
    }
    // Enumeration still lists every key, damaged ones included.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys.len(), KEYS);
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, KEYS as i64);

    // A damaged key can be deleted, and written again.
    let deleted: i64 = redis::cmd("DEL").arg(key(first.0)).query(&mut con).unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(get(&mut con, &key(first.0)).unwrap(), None);
    let _: () = redis::cmd("SET")
        .arg(key(second.0))
        .arg("rewritten")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        get(&mut con, &key(second.0)).unwrap(),
        Some(b"rewritten".to_vec())
    );
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, KEYS as i64 - 1);
    drop(con);
    server.shutdown().unwrap();
}

#[test]
fn the_background_scrubber_repairs_without_being_asked() {
    const KEYS: usize = 50;
    let (server, _dir, data) = start(IntegrityOptions {
        mode: IntegrityMode::Lazy,
        ..IntegrityOptions::default()
    });
    let file = data.join("values.pmem");
    let mut con = connect(&server, false);
    for i in 0..KEYS {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(value_of(i))
            .query(&mut con)
            .unwrap();
    }
    assert_eq!(scrub(&mut con).get("corrupt_pages"), 0);
    let starts = value_offsets(&file, KEYS);
    let at = starts[20] + 10;
    let original = flip(&file, at);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let fields = info(&mut con, "integrity");
        if info_u64(&fields, "integrity_repaired") >= 1 {
            assert_eq!(info_u64(&fields, "integrity_corruptions_found"), 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the background scrubber did not repair the page: {fields:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(byte_at(&file, at), original);
    assert_eq!(get(&mut con, &key(20)).unwrap(), Some(value_of(20)));
    drop(con);
    server.shutdown().unwrap();
}
