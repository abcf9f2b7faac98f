//! `engram scrub DIR`, run as a user would, on stores written through the
//! server and then damaged while stopped: bytes of `values.pmem` flipped
//! behind the store's back, as failing media would.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use engram_server::{Config, Server};

const PAGE: usize = 4096;

fn engram_scrub(dir: &Path, json: bool) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_engram-e2e"));
    command.arg("scrub").arg(dir);
    if json {
        command.arg("--json");
    }
    command.output().expect("running engram scrub")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn start(dir: &Path) -> Server {
    Server::start(Config {
        port: 0,
        dir: dir.to_path_buf(),
        ..Config::default()
    })
    .unwrap()
}

fn connect(server: &Server) -> redis::Connection {
    redis::Client::open(format!("redis://{}/", server.addr))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap()
}

/// Writes `keys` through a server, then stops it cleanly.
fn populate(dir: &Path, keys: &[(String, Vec<u8>)]) {
    let server = start(dir);
    let mut con = connect(&server);
    for (key, value) in keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut con)
            .unwrap();
    }
    drop(con);
    server.shutdown().unwrap();
}

/// A value no other key's value contains: `<NNNN>` repeated.
fn value_of(i: usize) -> Vec<u8> {
    format!("<{i:04}>").repeat(150).into_bytes()
}

/// A value longer than four pages, with no `<NNNN>` token in it.
fn big_value() -> Vec<u8> {
    b"(big hash value)".repeat(5 * PAGE / 16 + 3)
}

/// Where `value` starts in `file`, which must hold it exactly once.
fn find_once(file: &Path, value: &[u8]) -> usize {
    let data = std::fs::read(file).unwrap();
    let found: Vec<usize> = data
        .windows(value.len())
        .enumerate()
        .filter(|(_, window)| *window == value)
        .map(|(at, _)| at)
        .collect();
    assert_eq!(found.len(), 1, "the value is in {} once", file.display());
    found[0]
}

fn strings(n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n).map(|i| (format!("k{i}"), value_of(i))).collect()
}

/// Where each value of `strings(n)` starts in the data file (one pass:
/// the first `<NNNN>` of each); each must be there once.
fn value_offsets(file: &Path, n: usize) -> Vec<usize> {
    let data = std::fs::read(file).unwrap();
    let mut starts = vec![usize::MAX; n];
    for at in 0..data.len().saturating_sub(6) {
        let token = &data[at..at + 6];
        if token[0] != b'<' || token[5] != b'>' || !token[1..5].iter().all(u8::is_ascii_digit) {
            continue;
        }
        let i: usize = std::str::from_utf8(&token[1..5]).unwrap().parse().unwrap();
        if i >= n {
            continue;
        }
        if starts[i] == usize::MAX {
            starts[i] = at;
        } else {
            assert!(
                at < starts[i] + value_of(i).len(),
                "value {i} is in the file twice"
            );
        }
    }
    for (i, &start) in starts.iter().enumerate() {
        assert!(start != usize::MAX, "value {i} not found");
        assert_eq!(&data[start..start + value_of(i).len()], &value_of(i)[..]);
    }
    starts
}

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

fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    (dir, data)
}

#[test]
fn one_damaged_page_is_repaired_and_every_key_reads_back() {
    let (_dir, data) = data_dir();
    let keys = strings(300);
    populate(&data, &keys);
    let file = data.join("values.pmem");
    let at = value_offsets(&file, keys.len())[40] + 500;
    let original = flip(&file, at);

    let output = engram_scrub(&data, false);
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{report}{}", stderr(&output));
    assert!(report.contains("corrupt pages      1"), "{report}");
    // Opening the store met the damaged record and rebuilt its page.
    assert!(
        report.contains("repaired           1 (1 while opening the store"),
        "{report}"
    );
    assert!(report.contains("unrepairable       0"), "{report}");
    assert!(
        report.contains("result: clean: every corrupt page was rebuilt from parity"),
        "{report}"
    );
    assert_eq!(byte_at(&file, at), original, "the file itself is repaired");

    // Damage the store cannot trip over while opening (bytes in no record,
    // past the last one): found by the scrub proper, offset and all.
    let clean = std::fs::read(&file).unwrap();
    let last = clean.iter().rposition(|&b| b != 0).unwrap();
    let spare = (last / PAGE + 1) * PAGE + 100;
    flip(&file, spare);
    let output = engram_scrub(&data, true);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["ok"], true, "{json}");
    assert_eq!(json["corrupt_pages"], 1, "{json}");
    assert_eq!(json["repaired_at_open"], 0, "{json}");
    assert_eq!(
        json["repaired_pages"],
        serde_json::json!([spare / PAGE * PAGE]),
        "{json}"
    );
    assert_eq!(json["integrity_file_created"], false, "{json}");
    assert!(json["pages_checked"].as_u64().unwrap() > 0, "{json}");
    assert_eq!(byte_at(&file, spare), 0);

    // The server sees every key, the damaged one byte for byte.
    let server = start(&data);
    let mut con = connect(&server);
    let dbsize: usize = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, keys.len());
    for (key, value) in &keys {
        let got: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(&mut con).unwrap();
        assert_eq!(got.as_deref(), Some(&value[..]), "{key}");
    }
    drop(con);
    server.shutdown().unwrap();
}

#[test]
fn an_unrepairable_stripe_names_its_keys_and_exits_1() {
    let (_dir, data) = data_dir();
    let keys = strings(400);
    populate(&data, &keys);
    let file = data.join("values.pmem");
    let starts = value_offsets(&file, keys.len());
    // Pages p and p ^ 1 (one stripe of 4), each with value bytes of a
    // different key. Every page between the first value and the last is
    // searched, not just from key 0's: the server's writes may go through
    // more than one lane (tokio moves a connection between threads), so
    // key order need not be file order.
    let (keys, starts) = (&keys, &starts);
    let values_on = |page: usize| {
        (0..keys.len()).filter_map(move |i| {
            let (start, end) = (starts[i], starts[i] + keys[i].1.len());
            let (lo, hi) = (start.max(page * PAGE), end.min((page + 1) * PAGE));
            (hi > lo + 16).then(|| (i, lo + (hi - lo) / 2))
        })
    };
    let first_page = starts.iter().min().unwrap() / PAGE;
    let last_page = (0..keys.len())
        .map(|i| (starts[i] + keys[i].1.len()) / PAGE)
        .max()
        .unwrap();
    let ((a, at_a), (b, at_b)) = (first_page..=last_page)
        .filter(|page| page % 2 == 0)
        .find_map(|page| {
            values_on(page).find_map(|a| values_on(page ^ 1).find(|b| b.0 != a.0).map(|b| (a, b)))
        })
        .expect("values of two keys on two pages of one stripe");
    flip(&file, at_a);
    flip(&file, at_b);

    let output = engram_scrub(&data, true);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["ok"], false, "{json}");
    assert_eq!(json["corrupt_pages"], 2, "{json}");
    let mut expected = vec![(at_a / PAGE * PAGE) as u64, (at_b / PAGE * PAGE) as u64];
    expected.sort();
    let mut unrepairable: Vec<u64> = json["unrepairable_pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    unrepairable.sort();
    assert_eq!(unrepairable, expected, "{json}");
    let named: Vec<&str> = json["affected_keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["key"].as_str())
        .collect();
    for i in [a, b] {
        assert!(
            named.contains(&keys[i].0.as_str()),
            "{} not named: {json}",
            keys[i].0
        );
    }

    // Parity cannot undo it: the next scrub says the same, for people.
    let output = engram_scrub(&data, false);
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{report}{}", stderr(&output));
    assert!(report.contains("unrepairable       2"), "{report}");
    assert!(
        report.contains("keys with data on unrepairable pages"),
        "{report}"
    );
    for i in [a, b] {
        assert!(
            report.contains(&format!("    {} (record at ", keys[i].0)),
            "{report}"
        );
    }
    assert!(report.contains("result: DAMAGED: 2 pages"), "{report}");

    // The server refuses reads of those keys only. (Which error: the page
    // is known unrepairable, or, once a write to it has made its checksum
    // current again, the record's own checksum fails.)
    let server = start(&data);
    let mut con = connect(&server);
    for i in [a, b] {
        let err = redis::cmd("GET")
            .arg(&keys[i].0)
            .query::<Vec<u8>>(&mut con)
            .unwrap_err();
        assert!(
            err.to_string().contains("data for this key is corrupt"),
            "{err}"
        );
    }
    // A key well away from the damaged stripe, on either side: 400 values
    // span over 90 pages, so one lies more than 8 pages from any page.
    let far = (0..keys.len())
        .find(|&i| (starts[i] / PAGE).abs_diff(at_a / PAGE) > 8)
        .expect("a key more than 8 pages from the damage");
    let got: Vec<u8> = redis::cmd("GET").arg(&keys[far].0).query(&mut con).unwrap();
    assert_eq!(got, keys[far].1);
    drop(con);
    server.shutdown().unwrap();
}

#[test]
fn a_directory_in_use_by_a_server_is_refused_with_exit_2() {
    let (_dir, data) = data_dir();
    let server = start(&data);
    let output = engram_scrub(&data, false);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    let message = stderr(&output);
    assert!(
        message.contains("is locked") && message.contains("running server"),
        "{message}"
    );
    assert!(message.contains("ENGRAM.SCRUB"), "{message}");
    server.shutdown().unwrap();

    // Not a store at all: refused too, and nothing is created.
    let empty = data.join("nothing-here");
    let output = engram_scrub(&empty, true);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("holds no Engram store"),
        "{}",
        stderr(&output)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(json["error"].as_str().unwrap().contains("no Engram store"));
    assert!(!empty.exists());
}

#[test]
fn a_store_without_an_integrity_file_says_nothing_older_was_verified() {
    let (_dir, data) = data_dir();
    let server = Server::start(Config {
        port: 0,
        dir: data.clone(),
        integrity: engram_engine::IntegrityOptions::off(),
        ..Config::default()
    })
    .unwrap();
    let mut con = connect(&server);
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    drop(con);
    server.shutdown().unwrap();
    assert!(!data.join("integrity.pmem").exists());

    let output = engram_scrub(&data, false);
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{report}{}", stderr(&output));
    assert!(
        report.contains("redundancy was just built")
            && report.contains("nothing older could be verified"),
        "{report}"
    );
    let output = engram_scrub(&data, true);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json["integrity_file_created"], false,
        "the first scrub built it: {json}"
    );
}

#[test]
fn collections_images_are_scrubbed_and_damage_there_names_the_collection() {
    let (_dir, data) = data_dir();
    let server = start(&data);
    let mut con = connect(&server);
    let n = 200;
    for i in 0..n {
        let _: () = redis::cmd("HSET")
            .arg(format!("h{i}"))
            .arg("field")
            .arg(value_of(i))
            .query(&mut con)
            .unwrap();
    }
    // One hash whose image spans more than four pages: wherever the
    // checkpoint puts it (images are written in the order of a hash map,
    // which varies run to run), its value covers two whole pages of one
    // stripe, an even page and the next.
    let big = big_value();
    let _: () = redis::cmd("HSET")
        .arg("hbig")
        .arg("field")
        .arg(&big)
        .query(&mut con)
        .unwrap();
    // A checkpoint: each hash gets its image in DIR/collections/images.
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    drop(con);
    server.shutdown().unwrap();
    let file = data.join("collections").join("images").join("values.pmem");
    let starts = value_offsets(&file, n);
    let big_start = find_once(&file, &big);

    // One bad page: rebuilt from parity; the strings store is clean.
    let at = starts[10] + 300;
    let original = flip(&file, at);
    let output = engram_scrub(&data, true);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["ok"], true, "{json}");
    assert_eq!(json["corrupt_pages"], 0, "{json}");
    let images = &json["collections_images"];
    assert_eq!(images["corrupt_pages"], 1, "{json}");
    assert!(images["pages_checked"].as_u64().unwrap() > 0, "{json}");
    assert_eq!(byte_at(&file, at), original, "the images file is repaired");

    // Two bad pages of one stripe, both inside hbig's value: the hash is
    // named as a client knows it, and the scrub exits 1. The first whole
    // even page of the value and the one after it lie inside it, since it
    // is longer than four pages (stripes are of four).
    let page = big_start.div_ceil(PAGE).next_multiple_of(2);
    assert!((page + 2) * PAGE <= big_start + big.len());
    let (at_a, at_b) = (page * PAGE + 100, (page + 1) * PAGE + 100);
    flip(&file, at_a);
    flip(&file, at_b);
    let output = engram_scrub(&data, false);
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{report}{}", stderr(&output));
    assert!(
        report.contains("    hbig (image of checkpoint "),
        "{report}"
    );
    assert!(report.contains("collections/images"), "{report}");
    assert!(report.contains("result: DAMAGED: 2 pages"), "{report}");
}
