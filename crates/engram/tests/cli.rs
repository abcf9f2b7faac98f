//! The `engram` binary, run as a user would.

use std::process::Command;

fn engram() -> Command {
    Command::new(env!("CARGO_BIN_EXE_engram"))
}

#[test]
fn bench_engine_quick_prints_json_with_engram_and_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let output = engram()
        .args([
            "bench",
            "engine",
            "--quick",
            "--records",
            "20000",
            "--peers",
            "volatile",
            "--json",
            "-",
        ])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let results = json["results"].as_array().unwrap();
    for system in ["engram", "volatile"] {
        for op in ["insert", "get", "update", "delete"] {
            assert!(
                results.iter().any(|r| r["system"] == system
                    && r["op"] == op
                    && r["ops_per_sec"].as_f64() > Some(0.0)),
                "no {system}/{op} row"
            );
        }
    }
    assert!(json["recovery"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["system"] == "engram" && r["threads"] == 2));
    let table = String::from_utf8_lossy(&output.stderr);
    assert!(
        table.contains("engram ÷ it"),
        "the human table goes to stderr with --json -"
    );
}

#[test]
fn unknown_peer_is_a_clear_error() {
    let output = engram()
        .args(["bench", "engine", "--peers", "mongodb"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown system 'mongodb'"));
}

#[cfg(not(feature = "peers"))]
#[test]
fn peers_not_compiled_in_are_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let output = engram()
        .args([
            "bench",
            "engine",
            "--quick",
            "--records",
            "1000",
            "--peers",
            "rocksdb",
        ])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--features peers"));
}
