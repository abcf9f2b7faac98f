//! `engram-bench timeline` end to end at toy sizes, about a second per
//! timed run: each part's JSON has its fields, the background
//! configuration checkpointed during its run, recovery found every key, the
//! plot is a PNG; and the flags' defaults and limits.

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use serde_json::Value;

use super::records::Shape;
use super::recovery::{DataSet, Types};
use super::tail::Configuration;
use super::ycsb::{StoreKind, Workload};
use super::*;
use crate::workload::Distribution;
use engram_threads::BackgroundCpus;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: TimelineBenchArgs,
}

/// A toy configuration of `parts` in `dir`.
fn toy(parts: &[Part], dir: &Path) -> Config {
    Config {
        parts: parts.to_vec(),
        target: Target::Embedded,
        peers: Peers::None,
        redis_server: "redis-server".into(),
        threads: 2,
        shape: Shape {
            records: 2_000,
            fields: 4,
            field_bytes: 32,
        },
        duration: Duration::from_millis(1000),
        distribution: Distribution::Zipfian,
        read_percent: 50,
        configurations: Configuration::ALL.to_vec(),
        // The smallest trigger: checkpoints every few thousand writes.
        checkpoint_log_bytes: 1 << 20,
        background_cpus: BackgroundCpus::Auto,
        ycsb_duration: Duration::from_millis(300),
        workloads: Workload::ALL.to_vec(),
        ycsb_distributions: vec![Distribution::Zipfian],
        ycsb_stores: StoreKind::ALL.to_vec(),
        recovery: DataSet {
            keys: 5_000,
            members: 50_000,
            member_bytes: 16,
            types: Types::Mixed,
        },
        recovery_tail_percent: 1.0,
        recovery_threads: 2,
        recovery_string_keys: 200_000,
        dir: dir.to_path_buf(),
        progress: false,
        command: "engram-bench timeline (test)".into(),
    }
}

fn parse(args: &[&str]) -> std::result::Result<TimelineBenchArgs, clap::Error> {
    let mut argv = vec!["timeline"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).map(|cli| cli.args)
}

/// The items of a JSON array, each by `item`.
fn items<'a, T>(array: &'a Value, item: impl Fn(&'a Value) -> Option<T>) -> Vec<T> {
    array
        .as_array()
        .unwrap_or_else(|| panic!("{array} is not an array"))
        .iter()
        .map(|value| item(value).unwrap_or_else(|| panic!("{value} in {array}")))
        .collect()
}

fn json(report: &Report) -> Value {
    serde_json::from_str(&report.json()).unwrap()
}

fn number(value: &Value, field: &str) -> f64 {
    value[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {value}"))
}

fn check_latency(latency: &Value) {
    for field in ["p50", "p99", "p999", "p9999", "max"] {
        assert!(number(latency, field) > 0.0, "{latency}");
    }
    assert!(
        number(latency, "p50") <= number(latency, "p99"),
        "{latency}"
    );
    assert!(
        number(latency, "p99") <= number(latency, "p9999"),
        "{latency}"
    );
    assert!(
        number(latency, "p9999") <= number(latency, "max"),
        "{latency}"
    );
}

#[test]
fn tail_part_measures_three_configurations_and_plots_them() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(&toy(&[Part::Tail], dir.path())).unwrap();
    let value = json(&report);
    assert!(value["ycsb"].is_null());
    assert!(value["recovery"].is_null());
    assert_eq!(value["config"]["window_ms"], 10.0);
    let results = value["tail"]["configurations"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for (result, configuration) in results.iter().zip(Configuration::ALL) {
        assert_eq!(result["configuration"], configuration.name());
        assert!(number(result, "ops_per_sec") > 0.0, "{configuration}");
        assert!(result["reads"].as_u64().unwrap() > 0);
        assert!(result["writes"].as_u64().unwrap() > 0);
        for set in ["latency_us", "corrected_latency_us"] {
            for kind in ["all", "read", "write"] {
                check_latency(&result[set][kind]);
            }
        }
        let windows = result["ops_by_window"].as_array().unwrap();
        assert_eq!(windows.len(), 100, "{configuration}: 1 s of 10 ms windows");
        assert_eq!(result["writes_by_window"].as_array().unwrap().len(), 100);
        let in_windows: u64 = windows.iter().map(|w| w.as_u64().unwrap()).sum();
        assert!(in_windows > 0 && in_windows <= result["ops"].as_u64().unwrap());
        let quiescence = &result["quiescence"];
        assert_eq!(quiescence["windows"], 100);
        assert!(number(quiescence, "median_window_ops") >= 0.0);
        let checkpoints = result["checkpoints"].as_u64().unwrap();
        let spans = result["checkpoint_spans"].as_array().unwrap();
        match configuration {
            Configuration::Off => {
                assert_eq!(checkpoints, 0);
                assert!(spans.is_empty());
                assert!(quiescence["ratio"].is_null());
            }
            Configuration::Background | Configuration::StopTheWorld => {
                assert!(checkpoints > 0, "{configuration}: no checkpoint in the run");
                assert!(!spans.is_empty(), "{configuration}: no span");
                for span in spans {
                    let (begin, end) = (number(span, "begin_ms"), number(span, "end_ms"));
                    assert!(
                        0.0 <= begin && begin < end && end <= 1000.0 + 1e-6,
                        "{span}"
                    );
                }
                assert!(number(result, "checkpoint_running_ms") > 0.0);
                assert!(!result["last_checkpoint"].is_null());
            }
        }
        if configuration == Configuration::Background {
            let ratio = number(quiescence, "ratio");
            assert!((0.0..=1.5).contains(&ratio), "{ratio}");
        }
    }
    let checks = value["tail"]["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 3);
    assert_eq!(
        value["tail"]["corrected_checks"].as_array().unwrap().len(),
        2
    );
    for check in checks {
        assert!(check["value"].is_number(), "{check}");
        assert!(check["pass"].is_boolean(), "{check}");
    }
    let table = report.table();
    for text in [
        "background",
        "stop-the-world",
        "p99.99 background / p99.99 off",
    ] {
        assert!(table.contains(text), "{text} missing from\n{table}");
    }
    assert!(table.contains("PASS") || table.contains("FAIL"), "{table}");

    let png = dir.path().join("tail.png");
    plot::draw(&png, report.tail.as_ref().unwrap(), &[]).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // The stores are gone; the plot is what is left.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[test]
fn ycsb_part_runs_every_workload_over_both_stores() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = toy(&[Part::Ycsb], dir.path());
    let report = run(&config).unwrap();
    let value = json(&report);
    let results = value["ycsb"]["results"].as_array().unwrap();
    // E is skipped over strings.
    assert_eq!(results.len(), 11);
    assert_eq!(value["ycsb"]["skipped"].as_array().unwrap().len(), 1);
    for result in results {
        let (store, workload) = (
            result["store"].as_str().unwrap(),
            result["workload"].as_str().unwrap(),
        );
        assert!(number(result, "ops_per_sec") > 0.0, "{store} {workload}");
        check_latency(&result["latency_us"]["all"]);
        check_latency(&result["corrected_latency_us"]["all"]);
        assert_eq!(result["ops_by_window"].as_array().unwrap().len(), 30);
        let kinds: Vec<&String> = result["latency_us"].as_object().unwrap().keys().collect();
        match workload {
            "ycsb-d" | "ycsb-e" => {
                assert!(
                    result["inserted"].as_u64().unwrap() > 0,
                    "{store} {workload}"
                );
                assert!(kinds.iter().any(|k| *k == "insert"), "{kinds:?}");
            }
            "ycsb-f" => assert!(kinds.iter().any(|k| *k == "read-modify-write")),
            _ => assert_eq!(result["inserted"], 0),
        }
        match store {
            "collections" => assert!(result["checkpoints"].is_u64()),
            _ => assert!(result["checkpoints"].is_null()),
        }
    }
    assert!(report.table().contains("skipped: ycsb-e over strings"));
    // D and E choose differently under uniform.
    config.workloads = vec![Workload::D, Workload::E];
    config.ycsb_distributions = vec![Distribution::Uniform];
    config.ycsb_stores = vec![StoreKind::Collections];
    let value = json(&run(&config).unwrap());
    assert_eq!(value["ycsb"]["results"].as_array().unwrap().len(), 2);
}

#[test]
fn recovery_part_recovers_every_key_from_the_log_and_from_images() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(&toy(&[Part::Recovery], dir.path())).unwrap();
    let value = json(&report);
    let recovery = &value["recovery"];
    assert_eq!(recovery["keys"], 5_000);
    assert_eq!(recovery["log_records"], 5_000, "one record per key");
    let from_log = &recovery["from_log"];
    assert_eq!(from_log["images_loaded"], 0);
    assert_eq!(from_log["records_replayed"], 5_000);
    assert_eq!(from_log["keys_found"], 5_000);
    assert_eq!(recovery["checkpoint_keys_written"], 5_000);
    assert_eq!(recovery["tail_keys"], 50);
    let from_images = &recovery["from_images"];
    assert_eq!(from_images["images_loaded"], 5_000);
    assert_eq!(from_images["records_replayed"], 50);
    assert_eq!(from_images["keys_found"], 5_050);
    assert!(from_images["sampled_keys"].as_u64().unwrap() > 100);
    assert!(number(from_images, "open_seconds") > 0.0);
    // Strings: both recovery paths found every key; the image path
    // scanned only the tail's blocks.
    let strings = &recovery["strings"];
    assert_eq!(strings["keys"], 200_000);
    assert_eq!(strings["tail_keys"], 2_000);
    assert_eq!(strings["image_entries"], 200_000);
    for path in ["from_scan", "from_image"] {
        assert_eq!(strings[path]["keys_found"], 202_000, "{path}");
    }
    assert!(strings["from_scan"]["image"].is_null());
    assert!(
        number(&strings["from_image"], "blocks_scanned")
            < number(&strings["from_scan"], "blocks_scanned"),
        "{strings}"
    );
    let check = &recovery["checks"][0];
    assert_eq!(check["target"], 2.0);
    assert_eq!(check["pass"], true, "5,000 keys recover well within 2 s");
    assert!(report.table().contains("(a) images + tail"));
}

#[test]
fn flags_have_the_documented_defaults_and_limits() {
    let args = parse(&[]).unwrap();
    let config = args.config("test".into()).unwrap();
    assert_eq!(config.parts, [Part::Tail, Part::Ycsb, Part::Recovery]);
    assert_eq!(config.threads, 2);
    assert_eq!(config.duration, Duration::from_secs(60));
    assert_eq!(config.ycsb_duration, Duration::from_secs(10));
    assert_eq!(config.shape.records, 100_000);
    assert_eq!(config.shape.record_bytes(), 1000);
    assert_eq!(config.checkpoint_log_bytes, 64 << 20);
    assert_eq!(config.configurations, Configuration::ALL);
    assert_eq!(config.workloads, Workload::ALL);
    assert_eq!(config.recovery.keys, 1_000_000);
    assert_eq!(config.recovery.members, 10_000_000);
    assert_eq!(config.recovery_threads, 2);
    assert_eq!(config.recovery_string_keys, 10_000_000);
    assert_eq!(config.background_cpus, BackgroundCpus::Auto);
    let args = parse(&["--parts", "recovery,recovery", "--workloads", "ycsb-c,f"]).unwrap();
    let config = args.config("test".into()).unwrap();
    assert_eq!(config.parts, [Part::Recovery]);
    assert_eq!(config.workloads, [Workload::C, Workload::F]);
    // Flags that cannot be right.
    assert!(parse(&["--parts", "everything"]).is_err());
    assert!(parse(&["--configurations", "sometimes"]).is_err());
    assert!(parse(&["--recovery-types", "trees"]).is_err());
    assert!(parse(&["--background-cpus", "some"]).is_err());
    for bad in [
        &["--plot", "x.png", "--parts", "ycsb"][..],
        &["--threads", "0"],
        &["--records", "0"],
        &["--fields", "0"],
        &["--field-bytes", "0"],
        &["--fields", "1000", "--field-bytes", "100000"],
        &["--read-percent", "101"],
        &["--checkpoint-log-mib", "0"],
        &["--seconds", "5ms"],
        &["--recovery-member-bytes", "4"],
        &["--recovery-keys", "1", "--recovery-members", "1000000"],
        &["--recovery-tail-percent", "101"],
        &["--recovery-threads", "0"],
        // A core this process may not use.
        &["--background-cpus", "1000"],
    ] {
        let outcome = parse(bad)
            .map_err(|e| e.to_string())
            .and_then(|args| args.config("test".into()).map_err(|e| e.to_string()));
        assert!(outcome.is_err(), "{bad:?} was accepted");
    }
}

/// `--target server --peers none`: the tail part's background
/// configuration (the others and recovery skipped with a note) and YCSB
/// over both stores, against in-process servers over TCP, at toy sizes;
/// Redis is neither looked for nor run.
#[test]
fn server_target_measures_tail_and_ycsb_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = toy(&[Part::Tail, Part::Ycsb, Part::Recovery], dir.path());
    config.target = Target::Server;
    config.peers = Peers::None;
    // Were Redis looked for, this would fail the run.
    config.redis_server = dir.path().join("no-such-redis-server");
    config.workloads = vec![Workload::A, Workload::E, Workload::F];
    let report = run(&config).unwrap();
    let value = json(&report);
    assert_eq!(value["config"]["target"], "server");
    let auto =
        engram_threads::resolve(&BackgroundCpus::Auto, &engram_threads::allowed_cpus()).unwrap();
    assert_eq!(
        value["config"]["background_cpus"],
        engram_threads::describe(&auto)
    );
    assert_eq!(value["config"]["peers"], "none");
    assert!(value["peer"].is_null());
    assert!(value["recovery"].is_null());
    let skipped = items(&value["skipped"], Value::as_str);
    assert_eq!(skipped.len(), 3, "{skipped:?}");
    for part in ["tail off:", "tail stop-the-world:", "recovery:"] {
        assert!(
            skipped.iter().any(|note| note.starts_with(part)),
            "{skipped:?}"
        );
    }

    let results = value["tail"]["configurations"].as_array().unwrap();
    assert_eq!(results.len(), 1);
    let result = &results[0];
    assert_eq!(result["configuration"], "background");
    assert_eq!(result["target"], "server");
    assert!(number(result, "ops_per_sec") > 0.0);
    assert!(result["reads"].as_u64().unwrap() > 0);
    assert!(result["writes"].as_u64().unwrap() > 0);
    for set in ["latency_us", "corrected_latency_us"] {
        for kind in ["all", "read", "write"] {
            check_latency(&result[set][kind]);
        }
    }
    // A round trip over loopback: more than a microsecond, and (on a
    // machine shared with the test's other threads) well under a second.
    let measured = &result["latency_us"]["all"];
    assert!(number(measured, "p50") > 1.0, "{measured}");
    assert!(number(measured, "p99") < 1e6, "{measured}");
    let windows = items(&result["ops_by_window"], Value::as_u64);
    assert_eq!(windows.len(), 100, "1 s of 10 ms windows");
    let busy = windows.iter().filter(|&&ops| ops > 0).count();
    assert!(busy > 50, "{busy} of 100 windows completed an operation");
    assert!(windows.iter().sum::<u64>() <= result["ops"].as_u64().unwrap());
    let server = &result["server"];
    assert_eq!(server["durability"], "process");
    let info = &server["info_at_end"];
    for field in [
        "checkpoints",
        "backpressure_waits",
        "oplog_bytes_since_checkpoint",
    ] {
        assert!(info[field].is_u64(), "{field} missing from {info}");
    }
    // The SAVE after the prefill, and the run's own checkpoints.
    let checkpoints = result["checkpoints"].as_u64().unwrap();
    assert_eq!(info["checkpoints"].as_u64().unwrap(), 1 + checkpoints);
    assert!(result["last_checkpoint"].is_null());

    let results = value["ycsb"]["results"].as_array().unwrap();
    // E is skipped over strings.
    assert_eq!(results.len(), 5);
    for result in results {
        let (store, workload) = (
            result["store"].as_str().unwrap(),
            result["workload"].as_str().unwrap(),
        );
        assert_eq!(result["target"], "server");
        assert!(number(result, "ops_per_sec") > 0.0, "{store} {workload}");
        check_latency(&result["latency_us"]["all"]);
        check_latency(&result["corrected_latency_us"]["all"]);
        assert_eq!(result["ops_by_window"].as_array().unwrap().len(), 30);
        assert!(result["server"]["info_at_end"]["checkpoints"].is_u64());
        match store {
            "collections" => assert!(result["checkpoints"].is_u64()),
            _ => assert!(result["checkpoints"].is_null()),
        }
        if workload == "ycsb-e" {
            assert!(result["inserted"].as_u64().unwrap() > 0);
            check_latency(&result["latency_us"]["scan"]);
        }
    }
    let table = report.table();
    for text in [
        "target server:",
        "skipped: tail off:",
        "server INFO at the end of background: checkpoints",
        "server INFO at the end of collections ycsb-e zipfian",
    ] {
        assert!(table.contains(text), "{text} missing from\n{table}");
    }
    for text in ["redis", "engram / redis"] {
        assert!(!table.contains(text), "{text} in\n{table}");
    }
    // The servers are stopped and their directories gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // The flag.
    assert_eq!(parse(&[]).unwrap().target, Target::Embedded);
    let config = parse(&["--target", "server"])
        .unwrap()
        .config("t".into())
        .unwrap();
    assert_eq!(config.target, Target::Server);
    assert!(parse(&["--target", "cloud"]).is_err());
}

#[test]
fn peers_default_to_redis_on_the_server_target_only() {
    let config = |args: &[&str]| parse(args).unwrap().config("t".into()).unwrap();
    assert_eq!(config(&["--target", "server"]).peers, Peers::Redis);
    assert_eq!(
        config(&["--target", "server", "--peers", "none"]).peers,
        Peers::None
    );
    assert_eq!(
        config(&["--target", "server", "--peers", "redis"]).peers,
        Peers::Redis
    );
    // Ignored when embedded.
    assert_eq!(config(&[]).peers, Peers::None);
    assert_eq!(config(&["--peers", "redis"]).peers, Peers::None);
    assert_eq!(
        config(&["--redis-server", "/opt/redis/bin/redis-server"]).redis_server,
        Path::new("/opt/redis/bin/redis-server")
    );
    assert!(parse(&["--peers", "memcached"]).is_err());
}

/// A redis-server that is not there fails the run before anything is
/// measured, with an error that says how to go without it.
#[test]
fn a_missing_redis_server_names_peers_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = toy(&[Part::Tail], dir.path());
    config.target = Target::Server;
    config.peers = Peers::Redis;
    config.redis_server = dir.path().join("no-such-redis-server");
    let error = run(&config).unwrap_err();
    assert!(matches!(error, TimelineError::RedisMissing(_)), "{error:?}");
    assert!(error.to_string().contains("--peers none"), "{error}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// The numbers a comparison pairs: both present, positive and finite, and
/// the ratio theirs.
fn check_pair(pair: &Value) {
    let (engram, redis) = (number(pair, "engram"), number(pair, "redis"));
    let ratio = number(pair, "engram_over_redis");
    for value in [engram, redis, ratio] {
        assert!(value.is_finite() && value > 0.0, "{pair}");
    }
    assert!((ratio - engram / redis).abs() <= 1e-9 * ratio, "{pair}");
}

/// `--target server --peers redis`: every run measured against Engram's
/// server is measured against a fresh redis-server too (from PATH: CI's
/// .ci/run installs it), and the report pairs them.
#[test]
fn server_target_measures_redis_beside_engram() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = toy(&[Part::Tail, Part::Ycsb], dir.path());
    config.target = Target::Server;
    config.peers = Peers::Redis;
    config.shape.records = 300;
    config.duration = Duration::from_millis(300);
    config.ycsb_duration = Duration::from_millis(300);
    config.workloads = vec![Workload::A, Workload::E];
    let report = run(&config).unwrap();
    let value = json(&report);
    assert_eq!(value["config"]["peers"], "redis");
    // Engram's results are where they were, and only Engram's.
    let engram_tail = &value["tail"]["configurations"];
    assert_eq!(engram_tail.as_array().unwrap().len(), 1);
    assert_eq!(engram_tail[0]["target"], "server");
    assert_eq!(value["ycsb"]["results"].as_array().unwrap().len(), 3);

    let peer = &value["peer"];
    assert_eq!(peer["system"], "redis");
    assert_eq!(peer["durability"], "process");
    let settings = peer["settings"].as_str().unwrap();
    assert!(
        settings.contains("--appendonly yes --appendfsync no"),
        "{settings}"
    );
    assert!(peer["version"].as_str().unwrap().contains("v="), "{peer}");

    let tail = peer["tail"].as_array().unwrap();
    assert_eq!(tail.len(), 1);
    let redis = &tail[0];
    assert_eq!(redis["configuration"], "background");
    assert!(number(redis, "ops_per_sec") > 0.0);
    assert!(redis["reads"].as_u64().unwrap() > 0);
    assert!(redis["writes"].as_u64().unwrap() > 0);
    for set in ["latency_us", "corrected_latency_us"] {
        for kind in ["all", "read", "write"] {
            check_latency(&redis[set][kind]);
        }
    }
    assert_eq!(items(&redis["ops_by_window"], Value::as_u64).len(), 30);
    assert_eq!(redis["windows"]["windows"], 30);
    assert!(redis.get("checkpoints").is_none(), "{redis}");
    assert_eq!(redis["redis"]["appendfsync"], "no");
    let info = &redis["redis"]["info_at_end"];
    // The prefill's rewrite made the base; the run's writes went after it.
    assert!(info["aof_base_size"].as_u64().unwrap() > 0, "{info}");
    assert!(redis["redis"]["aof_rewrites_in_run"].is_u64(), "{redis}");
    // Redis served the clients: it used CPU, which is not counted as other
    // processes'.
    let cpu = number(&redis["redis"], "cpu_percent");
    assert!(cpu > 0.0 && cpu <= 100.0, "{redis}");

    let ycsb = peer["ycsb"].as_array().unwrap();
    assert_eq!(ycsb.len(), 3, "A and E over collections, A over strings");
    for result in ycsb {
        assert!(number(result, "ops_per_sec") > 0.0, "{result}");
        check_latency(&result["latency_us"]["all"]);
        check_latency(&result["corrected_latency_us"]["all"]);
        if result["workload"] == "ycsb-e" {
            assert_eq!(result["store"], "collections");
            assert!(result["inserted"].as_u64().unwrap() > 0);
            check_latency(&result["latency_us"]["scan"]);
        }
    }

    let ratios = peer["ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 4, "{ratios:?}");
    for ratio in ratios {
        for figure in [
            "ops_per_sec",
            "p99_us",
            "p9999_us",
            "corrected_p99_us",
            "corrected_p9999_us",
        ] {
            check_pair(&ratio[figure]);
        }
    }
    let tail_ratio = &ratios[0];
    assert_eq!(tail_ratio["part"], "tail");
    assert_eq!(tail_ratio["run"], "background");
    assert_eq!(
        tail_ratio["ops_per_sec"]["engram"],
        engram_tail[0]["ops_per_sec"]
    );
    assert_eq!(tail_ratio["ops_per_sec"]["redis"], redis["ops_per_sec"]);
    let windows = &tail_ratio["min_window_over_median"];
    for side in ["engram", "redis"] {
        let share = number(windows, side);
        assert!((0.0..=1.0).contains(&share), "{windows}");
    }
    let runs: Vec<&str> = ratios[1..]
        .iter()
        .map(|r| {
            assert_eq!(r["part"], "ycsb");
            assert!(r["min_window_over_median"].is_null());
            r["run"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        runs,
        [
            "collections ycsb-a zipfian",
            "collections ycsb-e zipfian",
            "strings ycsb-a zipfian"
        ]
    );

    let table = report.table();
    let line = |start: &str| {
        table
            .lines()
            .find(|line| line.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line for {start} in\n{table}"))
    };
    assert!(line("background engram").contains("background engram"));
    // Redis's row has no checkpoint columns.
    assert!(line("background redis").contains('–'), "{table}");
    line("collections redis");
    line("strings redis");
    for text in [
        "peer: redis (",
        "engram / redis",
        "redis at the end of background: ",
        "redis at the end of collections ycsb-e zipfian: ",
    ] {
        assert!(table.contains(text), "{text} missing from\n{table}");
    }
    // Both servers are stopped and their directories gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // The plot draws Redis's line beside Engram's.
    let png = dir.path().join("tail.png");
    let peer = report.peer.as_ref().unwrap();
    plot::draw(&png, report.tail.as_ref().unwrap(), &peer.tail).unwrap();
    assert_eq!(&std::fs::read(&png).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
}
