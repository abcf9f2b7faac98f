//! A data directory written by a later Engram (a file's format version this
//! build does not know) is refused by name, as a user would meet it: `engram
//! serve` on a directory written through the server, one version field
//! bumped in place while it was stopped.
//!
//! Every versioned file keeps its version as a little-endian u32 at byte 8
//! (docs/FORMAT.md). For each file the server must refuse to start with a
//! message naming the file's path and the version, leave the file as it
//! was, and, once the version is put back, start with every key intact.
//! Index images are the exception by design (an image only saves time): an
//! image of an unknown version is passed over, the recovery report says
//! which file and why, and the full scan loses nothing.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{connect, serve};

/// Where every versioned file keeps its version (docs/FORMAT.md).
const VERSION_AT: u64 = 8;
/// A version no build has written yet.
const FUTURE: u32 = 9;

/// What a key must read back as.
#[derive(Debug, PartialEq)]
enum Value {
    String(Vec<u8>),
    Hash(BTreeMap<String, String>),
    Set(BTreeSet<String>),
    SortedSet(Vec<(String, f64)>),
    List(Vec<String>),
}

/// Every key written, and what it holds at shutdown.
type Expected = BTreeMap<String, Value>;

/// A value of `len` bytes no other value shares.
fn bytes_of(i: usize, len: usize) -> Vec<u8> {
    format!("[{i}]").bytes().cycle().take(len).collect()
}

/// Starts `engram serve` on a new directory, writes strings (small, empty,
/// an extent's worth, an integer, one with a TTL, an MSET), hashes, sets,
/// sorted sets and lists, checkpoints them (SAVE: images in
/// `collections/images`), writes more after the checkpoint (so the
/// operation log holds records too, one of them a MULTI mixing both
/// stores), and shuts down cleanly.
fn populate(data: &Path) -> Expected {
    let served = serve(data, &[]);
    let mut con = connect(served.port);
    let mut expected = Expected::new();
    for (i, len) in [0usize, 1, 7, 100, 4000, 300 << 10].into_iter().enumerate() {
        let key = format!("s{i}");
        let value = bytes_of(i, len);
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query(&mut con)
            .unwrap();
        expected.insert(key, Value::String(value));
    }
    let _: i64 = redis::cmd("INCRBY")
        .arg("counter")
        .arg(41)
        .query(&mut con)
        .unwrap();
    expected.insert("counter".into(), Value::String(b"41".to_vec()));
    let _: () = redis::cmd("SET")
        .arg("ttl")
        .arg("expires in an hour")
        .arg("PX")
        .arg(3_600_000)
        .query(&mut con)
        .unwrap();
    expected.insert("ttl".into(), Value::String(b"expires in an hour".to_vec()));
    let _: () = redis::cmd("MSET")
        .arg(&["m1", "one", "m2", "two"])
        .query(&mut con)
        .unwrap();
    expected.insert("m1".into(), Value::String(b"one".to_vec()));
    expected.insert("m2".into(), Value::String(b"two".to_vec()));

    for c in 0..20usize {
        let hash: BTreeMap<String, String> = (0..5)
            .map(|f| (format!("f{f}"), format!("{c}:{f}")))
            .collect();
        let mut cmd = redis::cmd("HSET");
        cmd.arg(format!("h{c}"));
        for (field, value) in &hash {
            cmd.arg(field).arg(value);
        }
        let _: i64 = cmd.query(&mut con).unwrap();
        expected.insert(format!("h{c}"), Value::Hash(hash));

        let set: BTreeSet<String> = (0..8).map(|m| format!("{c}-{m}")).collect();
        let _: i64 = redis::cmd("SADD")
            .arg(format!("set{c}"))
            .arg(set.iter().collect::<Vec<_>>())
            .query(&mut con)
            .unwrap();
        expected.insert(format!("set{c}"), Value::Set(set));

        let zset: Vec<(String, f64)> = (0..6)
            .map(|m| (format!("z{c}-{m}"), m as f64 * 1.5 - c as f64))
            .collect();
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(format!("z{c}"));
        for (member, score) in &zset {
            cmd.arg(score).arg(member);
        }
        let _: i64 = cmd.query(&mut con).unwrap();
        expected.insert(format!("z{c}"), Value::SortedSet(zset));

        let list: Vec<String> = (0..7).map(|e| format!("{c}/{e}")).collect();
        let _: i64 = redis::cmd("RPUSH")
            .arg(format!("l{c}"))
            .arg(&list)
            .query(&mut con)
            .unwrap();
        expected.insert(format!("l{c}"), Value::List(list));
    }
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();

    // After the checkpoint: these live in the operation log only.
    let _: i64 = redis::cmd("HSET")
        .arg("h0")
        .arg("late")
        .arg("after SAVE")
        .query(&mut con)
        .unwrap();
    if let Some(Value::Hash(hash)) = expected.get_mut("h0") {
        hash.insert("late".into(), "after SAVE".into());
    }
    let _: i64 = redis::cmd("LPUSH")
        .arg("l1")
        .arg("head")
        .query(&mut con)
        .unwrap();
    if let Some(Value::List(list)) = expected.get_mut("l1") {
        list.insert(0, "head".into());
    }
    let _: () = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("mixed")
        .arg("string half")
        .ignore()
        .cmd("SADD")
        .arg("mixed-set")
        .arg("set half")
        .ignore()
        .query(&mut con)
        .unwrap();
    expected.insert("mixed".into(), Value::String(b"string half".to_vec()));
    expected.insert(
        "mixed-set".into(),
        Value::Set(BTreeSet::from(["set half".to_string()])),
    );
    drop(con);
    shutdown(served);
    expected
}

fn shutdown(mut served: common::Served) {
    let mut con = connect(served.port);
    let _: () = redis::cmd("SHUTDOWN").query(&mut con).unwrap_or(());
    let status = served.child.wait().unwrap();
    assert!(status.success(), "clean shutdown:\n{}", served.log_text());
}

/// Starts `engram serve` and checks that every key reads back as written
/// (and nothing else is there), then shuts it down cleanly.
fn serve_and_check(data: &Path, expected: &Expected) {
    let served = serve(data, &[]);
    let mut con = connect(served.port);
    let dbsize: usize = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, expected.len(), "{}", served.log_text());
    for (key, value) in expected {
        let got = match value {
            // Option: an absent key must not pass for an empty string.
            Value::String(_) => {
                let got: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(&mut con).unwrap();
                Value::String(got.unwrap_or_else(|| panic!("{key} is missing")))
            }
            Value::Hash(_) => Value::Hash(redis::cmd("HGETALL").arg(key).query(&mut con).unwrap()),
            Value::Set(_) => Value::Set(redis::cmd("SMEMBERS").arg(key).query(&mut con).unwrap()),
            Value::SortedSet(_) => Value::SortedSet(
                redis::cmd("ZRANGE")
                    .arg(key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(&mut con)
                    .unwrap(),
            ),
            Value::List(_) => Value::List(
                redis::cmd("LRANGE")
                    .arg(key)
                    .arg(0)
                    .arg(-1)
                    .query(&mut con)
                    .unwrap(),
            ),
        };
        assert_eq!(&got, value, "{key}");
    }
    let ttl: i64 = redis::cmd("PTTL").arg("ttl").query(&mut con).unwrap();
    assert!(ttl > 0, "the TTL survived: {ttl}");
    drop(con);
    shutdown(served);
}

/// Runs `engram serve` on `data`, which must refuse to start: its exit
/// status and everything it wrote to stderr.
fn serve_must_fail(data: &Path) -> (ExitStatus, String) {
    let log_path = data.with_extension("stderr");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_engram-e2e"))
        .args(["serve", "--port", "0", "--dir"])
        .arg(data)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting engram serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "engram serve kept running:\n{}",
                std::fs::read_to_string(&log_path).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, std::fs::read_to_string(&log_path).unwrap())
}

fn version_of(file: &Path) -> u32 {
    let mut word = [0u8; 4];
    std::fs::File::open(file)
        .unwrap()
        .read_exact_at(&mut word, VERSION_AT)
        .unwrap();
    u32::from_le_bytes(word)
}

fn set_version(file: &Path, version: u32) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .write_all_at(&version.to_le_bytes(), VERSION_AT)
        .unwrap();
}

fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    (dir, data)
}

/// The whole check for one file that must be refused: bump its version,
/// see the start refused by name with the file untouched, put the version
/// back, see every key.
fn refused_by_name(file: &str, known: u32) {
    let (_dir, data) = data_dir();
    let expected = populate(&data);
    let path = data.join(file);
    assert_eq!(version_of(&path), known, "{}", path.display());
    let original = std::fs::read(&path).unwrap();
    set_version(&path, FUTURE);
    let bumped = std::fs::read(&path).unwrap();

    let (status, log) = serve_must_fail(&data);
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(&path.display().to_string()),
        "names the file:\n{log}"
    );
    assert!(
        log.contains(&format!("format version {FUTURE}")) && log.contains("this build reads"),
        "names the version as one this build does not read:\n{log}"
    );
    assert!(
        std::fs::read(&path).unwrap() == bumped,
        "{} changed while being refused",
        path.display()
    );

    set_version(&path, known);
    assert!(std::fs::read(&path).unwrap() == original);
    serve_and_check(&data, &expected);
}

#[test]
fn the_strings_data_file_of_an_unknown_version_is_refused_by_name() {
    refused_by_name("values.pmem", 2);
}

#[test]
fn the_strings_integrity_file_of_an_unknown_version_is_refused_by_name() {
    refused_by_name("integrity.pmem", 1);
}

#[test]
fn the_operation_log_of_an_unknown_version_is_refused_by_name() {
    refused_by_name("collections/oplog.pmem", 2);
}

#[test]
fn the_images_data_file_of_an_unknown_version_is_refused_by_name() {
    refused_by_name("collections/images/values.pmem", 2);
}

#[test]
fn the_images_integrity_file_of_an_unknown_version_is_refused_by_name() {
    refused_by_name("collections/images/integrity.pmem", 1);
}

/// Both stores' index images (written at the clean shutdown) bumped: each
/// store's recovery passes over them, says which file and why, and scans
/// every block instead; the server then starts as usual, nothing lost.
#[test]
fn index_images_of_an_unknown_version_are_passed_over_by_name_and_nothing_is_lost() {
    let (_dir, data) = data_dir();
    let expected = populate(&data);
    for store in [data.clone(), data.join("collections/images")] {
        let images: Vec<PathBuf> = ["index-0.pmem", "index-1.pmem"]
            .iter()
            .map(|name| store.join(name))
            .filter(|path| path.exists())
            .collect();
        assert!(
            !images.is_empty(),
            "a clean shutdown wrote an image in {}",
            store.display()
        );
        for image in &images {
            assert_eq!(version_of(image), 1, "{}", image.display());
            set_version(image, FUTURE);
        }
        let bumped: Vec<Vec<u8>> = images.iter().map(|p| std::fs::read(p).unwrap()).collect();

        // Opened directly: the server keeps the recovery report to itself
        // (it does not log why an image was passed over).
        let opened = engram::Store::open(&store, engram::Options::default()).unwrap();
        let report = opened.recovery_report();
        assert_eq!(report.index_image.image, None, "{report:?}");
        for image in &images {
            let reason = format!(
                "{}: format version {FUTURE} is not supported (this build reads 1)",
                image.display()
            );
            assert!(
                report.index_image.rejected.contains(&reason),
                "{reason:?} missing from {:?}",
                report.index_image.rejected
            );
        }
        assert!(report.blocks_scanned > 0, "{report:?}");
        // As a crash would leave it: no new image written over the bumped
        // ones, so the server meets them too.
        opened.crash();
        for (image, bytes) in images.iter().zip(&bumped) {
            assert!(
                &std::fs::read(image).unwrap() == bytes,
                "{} changed",
                image.display()
            );
        }
    }
    serve_and_check(&data, &expected);
}
