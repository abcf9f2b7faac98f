//! `engram-bench server` without servers: parsing redis-benchmark's CSV,
//! the flags' defaults, and the report's table and JSON contract.

use clap::Parser;
use engram_bench::server::report::{Pairing, PipelineRequests, ReportConfig};
use engram_bench::server::{
    parse_csv, CsvRow, Durability, Report, ServerBenchArgs, ServerBenchError, System,
};
use engram_bench::Machine;

/// What redis-benchmark 7.0.15 prints for `-t set,get,incr,mset --csv -q`.
const REDIS_7_CSV: &str = r#""test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","327868.84","2.107","0.560","1.927","3.647","4.143","5.263"
"GET","769230.75","0.867","0.344","0.847","1.343","1.503","1.639"
"INCR","350877.19","2.066","0.816","2.071","3.087","3.951","4.263"
"MSET (10 keys)","49140.05","9.924","1.928","9.463","16.295","18.479","19.135"
"#;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ServerBenchArgs,
}

fn args(words: &[&str]) -> ServerBenchArgs {
    Cli::parse_from(std::iter::once("bench-server").chain(words.iter().copied())).args
}

#[test]
fn csv_rows_carry_throughput_and_percentiles() {
    let rows = parse_csv(REDIS_7_CSV).unwrap();
    let tests: Vec<&str> = rows.iter().map(|row| row.test.as_str()).collect();
    assert_eq!(tests, ["SET", "GET", "INCR", "MSET"]);
    assert_eq!(rows[3].label, "MSET (10 keys)");
    let set = &rows[0];
    assert_eq!(set.ops_per_sec, 327868.84);
    assert_eq!(set.avg_ms, 2.107);
    assert_eq!(set.min_ms, 0.560);
    assert_eq!(set.p50_ms, 1.927);
    assert_eq!(set.p95_ms, 3.647);
    assert_eq!(set.p99_ms, 4.143);
    assert_eq!(set.max_ms, 5.263);
}

#[test]
fn csv_columns_are_found_by_name_and_blank_lines_skipped() {
    let text = "\n\"p99_latency_ms\",\"test\",\"max_latency_ms\",\"rps\",\"p50_latency_ms\",\
                \"avg_latency_ms\",\"min_latency_ms\",\"p95_latency_ms\",\"extra\"\r\n\
                \n\"4.1\",\"SET\",\"5\",\"1000\",\"1.5\",\"2\",\"0.5\",\"3\",\"x\"\r\n";
    let rows = parse_csv(text).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].test, "SET");
    assert_eq!(rows[0].ops_per_sec, 1000.0);
    assert_eq!(rows[0].p50_ms, 1.5);
    assert_eq!(rows[0].p99_ms, 4.1);
    assert!(parse_csv("").unwrap().is_empty());
}

#[test]
fn csv_without_percentiles_or_with_garbage_is_an_error() {
    // redis-benchmark before Redis 6.2: no header, no latencies.
    let old = "\"SET\",\"327868.84\"\n\"GET\",\"769230.75\"\n";
    let error = parse_csv(old).unwrap_err();
    assert!(
        matches!(error, ServerBenchError::Csv { line: 1, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("6.2"), "{error}");

    let header = REDIS_7_CSV.lines().next().unwrap();
    let short = format!("{header}\n\"SET\",\"1\"\n");
    let error = parse_csv(&short).unwrap_err();
    assert!(
        matches!(error, ServerBenchError::Csv { line: 2, .. }),
        "{error}"
    );

    let not_a_number = format!("{header}\n\"SET\",\"fast\",\"1\",\"1\",\"1\",\"1\",\"1\",\"1\"\n");
    let error = parse_csv(&not_a_number).unwrap_err();
    assert!(error.to_string().contains("rps"), "{error}");

    let unterminated = format!("{header}\n\"SET,\"1\n");
    assert!(parse_csv(&unterminated).is_err());
}

#[test]
fn defaults_follow_the_issue_and_quick_shrinks_the_run() {
    let config = args(&[]).config("engram-bench server".into()).unwrap();
    assert_eq!(config.durabilities, Durability::ALL);
    assert_eq!(config.tests, ["set", "get", "incr", "mset"]);
    assert_eq!(config.clients, 50);
    assert_eq!(config.value_bytes, 200);
    assert_eq!(config.keyspace, 1_000_000);
    assert_eq!(config.runs, 1);
    let requests: Vec<(u32, u64)> = config
        .requests
        .iter()
        .map(|r| (r.pipeline, r.requests))
        .collect();
    assert_eq!(requests, [(1, 200_000), (16, 1_000_000)]);

    let quick = args(&["--quick"]).config(String::new()).unwrap();
    assert!(quick.requests.iter().all(|r| r.requests == 20_000));
    let fixed = args(&["--quick", "--requests", "5000", "--pipelines", "4,4,1"])
        .config(String::new())
        .unwrap();
    let requests: Vec<(u32, u64)> = fixed
        .requests
        .iter()
        .map(|r| (r.pipeline, r.requests))
        .collect();
    assert_eq!(requests, [(4, 5000), (1, 5000)]);

    let subset = args(&["--durability", "always,process", "--tests", "SET,get"])
        .config(String::new())
        .unwrap();
    assert_eq!(
        subset.durabilities,
        [Durability::Always, Durability::Process]
    );
    assert_eq!(subset.tests, ["set", "get"]);
}

#[test]
fn bad_flags_are_refused_before_anything_starts() {
    for words in [
        &["--pipelines", "0"][..],
        &["--clients", "0"],
        &["--runs", "0"],
        &["--requests", "0"],
        &["--keyspace", "0"],
        &["--tests", "set;get"],
    ] {
        let error = args(words).config(String::new()).unwrap_err();
        assert!(
            matches!(error, ServerBenchError::Flag { .. }),
            "{words:?}: {error}"
        );
    }
    assert!(Cli::try_parse_from(["bench-server", "--durability", "sometimes"]).is_err());
}

fn row(test: &str, ops_per_sec: f64, p50_ms: f64, p99_ms: f64) -> CsvRow {
    CsvRow {
        test: test.into(),
        label: test.into(),
        ops_per_sec,
        avg_ms: p50_ms,
        min_ms: p50_ms / 2.0,
        p50_ms,
        p95_ms: p99_ms,
        p99_ms,
        max_ms: p99_ms * 2.0,
    }
}

fn report() -> Report {
    let mut report = Report::new(ReportConfig {
        command: "engram-bench server --runs 3".into(),
        durabilities: vec!["process", "always"],
        pipelines: vec![1, 16],
        tests: vec!["set".into(), "get".into()],
        clients: 50,
        value_bytes: 200,
        keyspace: 1_000_000,
        runs: 3,
        requests: vec![
            PipelineRequests {
                pipeline: 1,
                requests: 200_000,
            },
            PipelineRequests {
                pipeline: 16,
                requests: 1_000_000,
            },
        ],
        engram_binary: "target/release/engram".into(),
        engram_version: "engram 0.1.0".into(),
        redis_server_version: "Redis server v=7.0.15".into(),
        redis_benchmark_version: "redis-benchmark 7.0.15".into(),
        pairings: vec![
            Pairing::of(Durability::Process),
            Pairing::of(Durability::Always),
        ],
        machine: Machine::this(),
    });
    let engram_runs = [
        row("SET", 300_000.0, 1.0, 9.0),
        row("SET", 100_000.0, 3.0, 30.0),
        row("SET", 200_000.0, 2.0, 4.0),
    ];
    report.add_result(
        System::Engram,
        Durability::Process,
        16,
        1_000_000,
        &engram_runs,
    );
    report.add_result(
        System::Redis,
        Durability::Process,
        16,
        1_000_000,
        &[row("SET", 100_000.0, 4.0, 8.0)],
    );
    report.add_result(
        System::Engram,
        Durability::Process,
        16,
        1_000_000,
        &[row("GET", 1_234_567.0, 0.5, 1.0)],
    );
    report.add_key_count(System::Engram, Durability::Process, 1, Some(632_120));
    report.add_key_count(System::Redis, Durability::Process, 1, None);
    report
}

#[test]
fn the_median_run_is_reported_and_the_ratio_added_once_both_are_in() {
    let report = report();
    let engram = report
        .find(System::Engram, "process", "SET", 16)
        .expect("engram's SET");
    assert_eq!(engram.ops_per_sec, 200_000.0);
    assert_eq!(engram.p99_ms, 4.0, "the latencies of the median run");
    assert_eq!(engram.runs_ops_per_sec, [300_000.0, 100_000.0, 200_000.0]);
    // GET has no Redis counterpart, so only SET has a ratio.
    assert_eq!(report.ratios.len(), 1);
    let ratio = &report.ratios[0];
    assert_eq!((ratio.test.as_str(), ratio.pipeline), ("SET", 16));
    assert_eq!(ratio.ops_per_sec_ratio, 2.0);
    assert_eq!(ratio.p50_ratio, 0.5);
    assert_eq!(ratio.p99_ratio, 0.5);
}

#[test]
fn json_has_the_documented_field_names() {
    let json: serde_json::Value = serde_json::from_str(&report().json()).unwrap();
    let keys = |value: &serde_json::Value| -> Vec<String> {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let sorted = |names: &[&str]| -> Vec<String> {
        let mut names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
        names.sort();
        names
    };
    assert_eq!(
        keys(&json),
        sorted(&["config", "results", "ratios", "keys"])
    );
    assert_eq!(
        keys(&json["results"][0]),
        sorted(&[
            "system",
            "durability",
            "test",
            "pipeline",
            "requests",
            "ops_per_sec",
            "p50_ms",
            "p99_ms",
            "avg_ms",
            "p95_ms",
            "max_ms",
            "runs_ops_per_sec",
        ])
    );
    let first = &json["results"][0];
    assert_eq!(first["system"], "engram");
    assert_eq!(first["durability"], "process");
    assert_eq!(first["test"], "SET");
    assert_eq!(first["pipeline"], 16);
    assert_eq!(json["results"][1]["system"], "redis");
    assert_eq!(
        keys(&json["ratios"][0]),
        sorted(&[
            "durability",
            "test",
            "pipeline",
            "ops_per_sec_ratio",
            "p50_ratio",
            "p99_ratio",
        ])
    );
    assert_eq!(json["keys"][1]["keys"], serde_json::Value::Null);
    let config = &json["config"];
    for field in [
        "command",
        "durabilities",
        "pipelines",
        "tests",
        "clients",
        "value_bytes",
        "keyspace",
        "runs",
        "requests",
        "engram_binary",
        "engram_version",
        "redis_server_version",
        "redis_benchmark_version",
        "pairings",
        "machine",
    ] {
        assert!(!config[field].is_null(), "config lacks {field}");
    }
    assert_eq!(
        config["pairings"][0]["redis"],
        "redis-server --appendonly yes --appendfsync no --save \"\""
    );
}

#[test]
fn the_table_shows_both_systems_and_the_ratios() {
    let table = report().table();
    assert!(table.contains("engram-bench server --runs 3"), "{table}");
    assert!(table.contains("redis-benchmark 7.0.15"), "{table}");
    assert!(table.contains("appendfsync no"), "{table}");
    // SET at -P 16: Engram's median 200,000 against Redis's 100,000.
    let set = table
        .lines()
        .find(|line| line.starts_with("SET"))
        .expect("a SET line");
    assert!(set.contains("200,000"), "{set}");
    assert!(set.contains("100,000"), "{set}");
    assert!(set.contains("2.00"), "{set}");
    assert!(set.contains("2.000/4.000"), "{set}");
    assert!(set.contains("4.000/8.000"), "{set}");
    assert!(set.trim_end().ends_with("0.50"), "{set}");
    // GET without a Redis result shows dashes rather than a ratio.
    let get = table
        .lines()
        .find(|line| line.starts_with("GET"))
        .expect("a GET line");
    assert!(get.contains("1,234,567") && get.contains('-'), "{get}");
    assert!(table.contains("engram run 1: 632,120"), "{table}");
    assert!(table.contains("redis run 1: -"), "{table}");
    // No results for `always`: no section for it.
    assert!(!table.contains("always:"), "{table}");
}

#[test]
fn engram_is_looked_for_beside_this_program_unless_named() {
    let config = args(&[]).config(String::new()).unwrap();
    let this = std::env::current_exe().unwrap();
    assert_eq!(config.engram_bin, this.with_file_name("engram"));
    let named = args(&["--engram-bin", "/opt/engram"])
        .config(String::new())
        .unwrap();
    assert_eq!(named.engram_bin, std::path::Path::new("/opt/engram"));
}
