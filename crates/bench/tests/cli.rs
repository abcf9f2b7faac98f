//! The `engram-bench` binary, run as a user would.

use std::process::{Command, Output};

fn engram_bench(args: &[&str], dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engram-bench"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running the engram-bench binary")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn bench_engine_quick_prints_json_with_engram_and_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let output = engram_bench(
        &[
            "engine",
            "--quick",
            "--records",
            "20000",
            "--peers",
            "volatile",
            "--json",
            "-",
        ],
        dir.path(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let results = json["results"].as_array().unwrap();
    for system in ["engram", "volatile"] {
        for op in ["insert", "get", "update", "delete"] {
            let row = results
                .iter()
                .find(|r| r["system"] == system && r["op"] == op)
                .unwrap_or_else(|| panic!("no {system}/{op} row"));
            assert!(row["ops_per_sec"].as_f64().unwrap() > 0.0, "{row}");
            assert!(row["p50_ns"].as_u64().unwrap() <= row["p999_ns"].as_u64().unwrap());
        }
    }
    let recovery = json["recovery"].as_array().unwrap();
    for threads in [1, 2] {
        assert!(
            recovery.iter().any(|r| r["system"] == "engram"
                && r["threads"] == threads
                && r["records"] == 20000
                && r["seconds"].as_f64().unwrap() > 0.0),
            "no engram recovery with {threads} thread(s): {recovery:?}"
        );
    }
    assert_eq!(json["config"]["records"], 20000);
    assert_eq!(json["config"]["runs"], 1, "--quick means one run");
    assert_eq!(
        json["config"]["huge_pages"], false,
        "huge pages are off by default, as engram serve runs"
    );
    assert_eq!(
        json["config"]["ops"], 10000,
        "ops default to half the records"
    );
    assert!(
        stderr(&output).contains("engram ×"),
        "with --json -, the table goes to stderr"
    );
    // The temporary directory under the current one is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn json_to_a_file_keeps_the_table_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let output = engram_bench(
        &[
            "engine",
            "--records",
            "2000",
            "--runs",
            "1",
            "--threads",
            "1",
            "--distribution",
            "zipfian",
            "--peers",
            "volatile",
            "--json",
            "report.json",
        ],
        dir.path(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("engram ×"), "{table}");
    assert!(table.contains("zipfian"), "{table}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(json["config"]["distribution"], "zipfian");
    assert_eq!(json["results"].as_array().unwrap().len(), 2 * 5);
}

#[test]
fn unknown_peer_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = engram_bench(&["engine", "--peers", "mongodb"], dir.path());
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("unknown system 'mongodb'"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_bad_flag_value_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let output = engram_bench(&["engine", "--quick", "--key-bytes", "4"], dir.path());
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("--key-bytes must be at least 8"),
        "{}",
        stderr(&output)
    );
}

#[cfg(not(feature = "peers"))]
#[test]
fn peers_not_compiled_in_are_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let output = engram_bench(
        &[
            "engine",
            "--quick",
            "--records",
            "1000",
            "--peers",
            "rocksdb",
        ],
        dir.path(),
    );
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("rocksdb is not compiled"), "{message}");
    assert!(message.contains("--features peers"), "{message}");
}
