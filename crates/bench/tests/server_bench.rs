//! `engram-bench server` without servers: parsing redis-benchmark's CSV,
//! the flags' defaults, and the report's table and JSON contract.

use clap::Parser;
use engram_bench::server::report::{Pairing, PipelineRequests, ReportConfig};
use engram_bench::server::{
    in_redis_benchmark_order, parse_csv, round_order, CsvRow, Durability, Report, Sample,
    ServerBenchArgs, ServerBenchError, System,
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

    let subset = args(&["--durability", "always,process", "--tests", "get,SET"])
        .config(String::new())
        .unwrap();
    assert_eq!(
        subset.durabilities,
        [Durability::Always, Durability::Process]
    );
    // In redis-benchmark's order, so GET reads what SET wrote.
    assert_eq!(subset.tests, ["set", "get"]);
}

#[test]
fn matrix_is_issue_25s_and_refuses_the_flags_it_sets() {
    let config = args(&["--matrix"]).config(String::new()).unwrap();
    assert_eq!(
        config.tests,
        ["set", "get", "incr", "lpush", "sadd", "hset", "zadd", "mset"]
    );
    let pipelines: Vec<u32> = config.requests.iter().map(|r| r.pipeline).collect();
    assert_eq!(pipelines, [1, 16]);
    assert_eq!(
        (config.clients, config.value_bytes, config.keyspace),
        (50, 200, 100_000)
    );
    assert_eq!(config.runs, 3);
    assert_eq!(config.durabilities, Durability::ALL);
    let five = args(&["--matrix", "--runs", "5", "--durability", "always"])
        .config(String::new())
        .unwrap();
    assert_eq!((five.runs, five.durabilities.len()), (5, 1));
    for flag in [
        "--tests=set",
        "--pipelines=1",
        "--clients=10",
        "--value-bytes=8",
        "--keyspace=10",
    ] {
        assert!(
            Cli::try_parse_from(["bench-server", "--matrix", flag]).is_err(),
            "{flag}"
        );
    }
}

#[test]
fn redis_without_fsync_runs_at_always_only_unless_skipped() {
    let config = args(&[]).config(String::new()).unwrap();
    assert_eq!(
        config.systems(Durability::Always),
        [System::Engram, System::Redis, System::RedisNoFsync]
    );
    assert_eq!(
        config.systems(Durability::Process),
        [System::Engram, System::Redis]
    );
    let skipped = args(&["--skip-redis-no-fsync"])
        .config(String::new())
        .unwrap();
    assert_eq!(
        skipped.systems(Durability::Always),
        [System::Engram, System::Redis]
    );
}

#[test]
fn rounds_alternate_which_system_goes_first() {
    let systems = [System::Engram, System::Redis, System::RedisNoFsync];
    assert_eq!(round_order(&systems, 1), systems);
    assert_eq!(
        round_order(&systems, 2),
        [System::RedisNoFsync, System::Redis, System::Engram]
    );
    assert_eq!(round_order(&systems, 3), systems);
    assert_eq!(
        round_order(&systems[..2], 4),
        [System::Redis, System::Engram]
    );
}

#[test]
fn tests_run_in_redis_benchmarks_order_unknown_ones_last() {
    let names = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(
        in_redis_benchmark_order(&names(&["mset", "xadd", "zadd", "get", "set", "foo"])),
        names(&["set", "get", "zadd", "mset", "xadd", "foo"])
    );
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

fn sample(row: CsvRow, cpu_s_per_million_ops: Option<f64>) -> Sample {
    Sample {
        row,
        cpu_s_per_million_ops,
    }
}

fn report() -> Report {
    let mut report = Report::new(ReportConfig {
        command: "engram-bench server --runs 3".into(),
        durabilities: vec!["process", "everysec", "always"],
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
        cpu_ticks_per_second: 100,
        pairings: vec![
            Pairing::of(Durability::Process, false),
            Pairing::of(Durability::Everysec, false),
            Pairing::of(Durability::Always, true),
        ],
        machine: Machine::this(),
    });
    let engram_runs = [
        sample(row("SET", 300_000.0, 1.0, 9.0), Some(3.0)),
        sample(row("SET", 100_000.0, 3.0, 30.0), None),
        sample(row("SET", 200_000.0, 2.0, 4.0), Some(1.0)),
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
        &[sample(row("SET", 100_000.0, 4.0, 8.0), Some(2.0))],
    );
    report.add_result(
        System::Engram,
        Durability::Process,
        16,
        1_000_000,
        &[sample(row("GET", 1_234_567.0, 0.5, 1.0), Some(1.5))],
    );
    // At `always`, Redis without fsync too; the Redis results come in
    // first, and Engram's ratios to both are added with it.
    report.add_result(
        System::Redis,
        Durability::Always,
        16,
        1_000_000,
        &[sample(row("SET", 400_000.0, 2.0, 4.0), Some(2.0))],
    );
    report.add_result(
        System::RedisNoFsync,
        Durability::Always,
        16,
        1_000_000,
        &[sample(row("SET", 500_000.0, 1.0, 2.0), Some(1.6))],
    );
    report.add_result(
        System::Engram,
        Durability::Always,
        16,
        1_000_000,
        &[sample(row("SET", 100_000.0, 8.0, 16.0), Some(4.0))],
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
    // The median CPU of the rounds that have one (the upper of two).
    assert_eq!(engram.cpu_s_per_million_ops, Some(3.0));
    assert_eq!(
        engram.runs_cpu_s_per_million_ops,
        [Some(3.0), None, Some(1.0)]
    );
    // GET has no Redis counterpart, so at `process` only SET has a ratio.
    let process: Vec<_> = report
        .ratios
        .iter()
        .filter(|r| r.durability == "process")
        .collect();
    assert_eq!(process.len(), 1);
    let ratio = process[0];
    assert_eq!((ratio.test.as_str(), ratio.pipeline), ("SET", 16));
    assert_eq!(ratio.against, "redis");
    assert_eq!(ratio.ops_per_sec_ratio, 2.0);
    assert_eq!(ratio.p50_ratio, 0.5);
    assert_eq!(ratio.p99_ratio, 0.5);
    assert_eq!(ratio.cpu_ratio, Some(1.5));
    // At `always`, Engram against both Redises.
    let redis = report
        .ratio("always", "SET", 16, System::Redis)
        .expect("against redis");
    assert_eq!(redis.ops_per_sec_ratio, 0.25);
    assert_eq!(redis.cpu_ratio, Some(2.0));
    let no_fsync = report
        .ratio("always", "SET", 16, System::RedisNoFsync)
        .expect("against redis-no-fsync");
    assert_eq!(no_fsync.ops_per_sec_ratio, 0.2);
    assert_eq!(no_fsync.cpu_ratio, Some(2.5));
    assert_eq!(report.ratios.len(), 3);
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
            "cpu_s_per_million_ops",
            "runs_cpu_s_per_million_ops",
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
            "against",
            "ops_per_sec_ratio",
            "p50_ratio",
            "p99_ratio",
            "cpu_ratio",
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
        "cpu_ticks_per_second",
        "pairings",
        "machine",
    ] {
        assert!(!config[field].is_null(), "config lacks {field}");
    }
    assert_eq!(
        config["pairings"][0]["redis"],
        "redis-server --appendonly yes --appendfsync no --save \"\""
    );
    assert_eq!(
        config["pairings"][0]["redis_no_fsync"],
        serde_json::Value::Null
    );
    assert_eq!(
        config["pairings"][2]["redis_no_fsync"],
        "redis-server --appendonly yes --appendfsync no --save \"\""
    );
    assert_eq!(first["cpu_s_per_million_ops"], 3.0);
    assert_eq!(
        first["runs_cpu_s_per_million_ops"][1],
        serde_json::Value::Null
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
    // No results for `everysec`: no section for it.
    assert!(!table.contains("everysec:"), "{table}");
}

/// The lines of `table` from the one starting with `heading` to the next
/// blank line.
fn section<'a>(table: &'a str, heading: &str) -> Vec<&'a str> {
    table
        .lines()
        .skip_while(|line| !line.starts_with(heading))
        .take_while(|line| !line.is_empty())
        .collect()
}

#[test]
fn the_cpu_table_follows_each_ops_table() {
    let table = report().table();
    let process = section(&table, "process:");
    let cpu = process
        .iter()
        .position(|line| line.starts_with("CPU seconds per million operations (process)"))
        .expect("a CPU table at process");
    // Engram's median 3.0 s against Redis's 2.0 s per million SETs.
    let set = process[cpu..]
        .iter()
        .find(|line| line.starts_with("SET"))
        .expect("a SET line in the CPU table");
    let cells: Vec<&str> = set.split_whitespace().collect();
    assert_eq!(cells, ["SET", "16", "3.00", "2.00", "1.50"], "{set}");
    let get = process[cpu..]
        .iter()
        .find(|line| line.starts_with("GET"))
        .expect("a GET line in the CPU table");
    assert_eq!(
        get.split_whitespace().collect::<Vec<_>>(),
        ["GET", "16", "1.50", "-", "-"]
    );
}

#[test]
fn at_always_redis_without_fsync_has_columns_of_its_own() {
    let table = report().table();
    let always = section(&table, "always:");
    assert!(always[0].contains("appendfsync always"), "{}", always[0]);
    assert!(always[0].contains("(redis-no-fsync)"), "{}", always[0]);
    assert!(always[1].contains("× redis-no-fsync"), "{}", always[1]);
    let set = always
        .iter()
        .find(|line| line.starts_with("SET"))
        .expect("a SET line");
    assert!(set.contains("500,000"), "{set}");
    assert!(set.trim_end().ends_with("0.20"), "{set}");
    // The process table has no such column.
    let process = section(&table, "process:");
    assert!(!process[1].contains("no-fsync"), "{}", process[1]);
    // The summary in issue 25's shape: a row per level and depth, and one
    // against Redis without fsync.
    let summary = section(&table, "Engram ÷ Redis, ops/s");
    let row = |label: &str| -> Vec<String> {
        let line = summary
            .iter()
            .find(|line| line.starts_with(label))
            .unwrap_or_else(|| panic!("no {label} row in {summary:?}"));
        line[label.len()..]
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    // Only tests with a ratio have a column: SET, not GET.
    assert_eq!(row("durability"), ["-P", "SET"]);
    assert_eq!(row("always vs no-fsync"), ["16", "0.20"]);
    assert_eq!(row("process"), ["16", "2.00"]);
    let cpu = section(&table, "Engram ÷ Redis, CPU");
    assert!(
        cpu.iter().any(|line| line.starts_with("always vs no-fsync")
            && line.split_whitespace().nth(4) == Some("2.50")),
        "{cpu:?}"
    );
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
