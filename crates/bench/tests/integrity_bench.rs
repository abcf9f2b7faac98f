//! `engram-bench integrity` end to end at toy sizes: every configuration on
//! every workload measured, lazy stores refreshed within a few periods, the
//! scrubs timed, the stores removed; and the flags' defaults.

use std::time::Duration;

use clap::Parser;
use engram_bench::integrity::{self, Config, IntegrityBenchArgs, Workload};
use engram_bench::Distribution;
use engram_engine::FlushInstruction;

const PERIODS_MS: [u64; 2] = [200, 250];
/// Each timed run; longer than five periods, so a lazy store whose passes
/// never ran during its run would show a coverage above the bound.
const RUN: Duration = Duration::from_millis(1500);
/// Coverage may take the period, a pass, and a scheduler that gave the
/// integrity thread no core for a while: five periods is generous.
const COVERAGE_BOUND_PERIODS: f64 = 5.0;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: IntegrityBenchArgs,
}

/// Toy sizes: every configuration on every workload in seconds.
fn tiny_config(dir: &std::path::Path) -> Config {
    Config {
        records: 20_000,
        key_bytes: 16,
        value_bytes: 200,
        threads: 2,
        duration: RUN,
        runs: 1,
        distribution: Distribution::Zipfian,
        workloads: Workload::ALL.to_vec(),
        lazy_periods: PERIODS_MS
            .iter()
            .map(|&ms| Duration::from_millis(ms))
            .collect(),
        stripe_pages: 4,
        flush: FlushInstruction::None,
        background_scrub: Duration::from_millis(300),
        quiet_wait: Duration::ZERO,
        quiet_share: 0.1,
        dir: dir.to_path_buf(),
        progress: false,
        command: "engram-bench integrity (test)".into(),
        paired: None,
    }
}

#[test]
fn tiny_run_measures_every_configuration_on_every_workload() {
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_config(dir.path());
    let report = integrity::run(&config).unwrap();
    let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    let results = json["results"].as_array().unwrap();
    let configurations = ["off", "lazy-200ms", "lazy-250ms", "inline"];
    assert_eq!(
        json["config"]["configurations"],
        serde_json::json!(configurations)
    );
    assert_eq!(json["config"]["scrub_bytes_per_sec_during_runs"], 0);
    assert_eq!(results.len(), configurations.len() * Workload::ALL.len());
    for configuration in configurations {
        for workload in Workload::ALL {
            let result = results
                .iter()
                .find(|r| r["configuration"] == configuration && r["workload"] == workload.name())
                .unwrap_or_else(|| panic!("no result for {configuration} on {workload}"));
            let number = |field: &str| {
                result[field]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{configuration} {workload}: {field} not a number"))
            };
            assert!(number("ops_per_sec") > 0.0, "{result}");
            let ratio = number("ratio_to_off");
            assert!(ratio.is_finite() && ratio > 0.0, "{result}");
            let by_second = number("median_second_ratio_to_off");
            assert!(by_second.is_finite() && by_second > 0.0, "{result}");
            let run = &result["runs"][0];
            let seconds = run["ops_per_sec_by_second"].as_array().unwrap().len();
            assert!(seconds >= 1, "{result}");
            assert_eq!(
                run["compaction_moves_by_second"].as_array().unwrap().len(),
                seconds,
                "{result}"
            );
            assert!(number("update_p50_us") > 0.0, "{result}");
            assert!(
                number("update_p50_us") <= number("update_p99_us"),
                "{result}"
            );
            assert!(
                number("update_p99_us") <= number("update_p999_us"),
                "{result}"
            );
            assert_eq!(result["runs"].as_array().unwrap().len(), 1);
            match configuration {
                "off" => {
                    assert_eq!(ratio, 1.0);
                    assert_eq!(by_second, 1.0);
                    assert!(result["coverage_max_ms"].is_null(), "{result}");
                    assert!(result["drain_ms"].is_null(), "{result}");
                }
                "inline" => {
                    assert!(number("coverage_max_ms").is_finite(), "{result}");
                    assert!(result["coverage_max_over_period"].is_null(), "{result}");
                }
                _ => {
                    let period_ms = number("period_ms");
                    let coverage_max_ms = number("coverage_max_ms");
                    assert!(coverage_max_ms.is_finite(), "{result}");
                    assert!(
                        coverage_max_ms < COVERAGE_BOUND_PERIODS * period_ms,
                        "{configuration} {workload}: coverage {coverage_max_ms} ms"
                    );
                    assert!(number("coverage_p99_ms") <= coverage_max_ms, "{result}");
                    assert!(number("drain_ms").is_finite(), "{result}");
                    let coverage = &result["runs"][0]["coverage"];
                    assert!(coverage["passes"].as_u64().unwrap() >= 1, "{result}");
                    assert_eq!(coverage["corruptions_found"], 0, "{result}");
                }
            }
            if workload == Workload::WriteOnly {
                assert!(result["read_p50_us"].is_null(), "{result}");
            } else {
                assert!(number("read_p50_us") > 0.0, "{result}");
            }
        }
    }
    // One on-demand scrub per cell with integrity on, none corrupt.
    let scrub = &json["scrub"];
    let measurements = scrub["measurements"].as_array().unwrap();
    assert_eq!(measurements.len(), 3 * Workload::ALL.len());
    assert!(scrub["gb_per_sec"].as_f64().unwrap() > 0.0);
    for measurement in measurements {
        assert!(measurement["pages_checked"].as_u64().unwrap() > 0);
        assert_eq!(measurement["corrupt_pages"], 0, "{measurement}");
    }
    let background = &scrub["background"];
    assert!(
        background["pages_scrubbed"].as_u64().unwrap() > 0,
        "{background}"
    );
    assert!(background["effective_bytes_per_sec"].as_f64().unwrap() > 0.0);
    let table = report.table();
    for name in configurations
        .into_iter()
        .chain(["ycsb-a", "ycsb-b", "write-only"])
    {
        assert!(table.contains(name), "{name} missing from\n{table}");
    }
    assert!(table.contains("scrub_bytes_per_sec 0"), "{table}");
    assert!(!table.contains("WARNING"), "{table}");
    // Every store directory was removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn defaults_are_the_issue_s_experiment() {
    let args = Cli::parse_from(["bench-integrity"]).args;
    let config = args.config("engram-bench integrity".into()).unwrap();
    assert_eq!(config.records, 1_000_000);
    assert_eq!(config.value_bytes, 200);
    assert_eq!(config.threads, 2);
    assert_eq!(config.duration, Duration::from_secs(60));
    assert_eq!(config.runs, 1);
    assert_eq!(config.distribution, Distribution::Zipfian);
    assert_eq!(config.workloads(), Workload::ALL);
    let names: Vec<String> = config.configurations().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["off", "lazy-1s", "lazy-30s", "inline"]);

    let args = Cli::parse_from([
        "bench-integrity",
        "--workloads",
        "a,w,a",
        "--lazy-periods",
        "200ms,2s",
        "--seconds",
        "90s",
        "--distribution",
        "uniform",
    ])
    .args;
    let config = args.config(String::new()).unwrap();
    assert_eq!(config.workloads(), [Workload::YcsbA, Workload::WriteOnly]);
    assert_eq!(config.duration, Duration::from_secs(90));
    let names: Vec<String> = config.configurations().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["off", "lazy-200ms", "lazy-2s", "inline"]);

    for bad in [
        &["--lazy-periods", "0s"][..],
        &["--seconds", "-1"],
        &["--workloads", "c"],
    ] {
        let words = std::iter::once("bench-integrity").chain(bad.iter().copied());
        assert!(Cli::try_parse_from(words).is_err(), "{bad:?} accepted");
    }
    let refused = |args: &[&str]| {
        let words = std::iter::once("bench-integrity").chain(args.iter().copied());
        let args = Cli::parse_from(words).args;
        // The whole chain: a limit the engine checks is named by its cause.
        let error = args.config(String::new()).unwrap_err();
        let mut text = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    };
    assert!(refused(&["--stripe-pages", "1"]).contains("stripe_pages"));
    assert!(refused(&["--threads", "0"]).contains("--threads"));
    assert!(refused(&["--records", "0"]).contains("--records"));
    assert!(refused(&["--key-bytes", "4"]).contains("--key-bytes"));
}

#[test]
fn paired_slices_measure_each_lazy_period_against_off() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        duration: Duration::from_millis(1000),
        workloads: vec![Workload::YcsbA],
        lazy_periods: vec![Duration::from_millis(200), Duration::from_secs(30)],
        background_scrub: Duration::ZERO,
        command: "engram-bench integrity --paired 250ms (test)".into(),
        paired: Some(Duration::from_millis(250)),
        ..tiny_config(dir.path())
    };
    let report = integrity::run(&config).unwrap();
    let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    assert!(json["results"].as_array().unwrap().is_empty(), "{json}");
    let paired = json["paired"].as_array().unwrap();
    let names: Vec<&str> = paired
        .iter()
        .map(|p| p["configuration"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lazy-200ms", "lazy-30s"], "{json}");
    for p in paired {
        // 1 s in slices of 250 ms: four pairs, each with both sides run.
        let pairs = p["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), 4, "{p}");
        for pair in pairs {
            assert!(pair[0].as_f64().unwrap() > 0.0 && pair[1].as_f64().unwrap() > 0.0);
        }
        let median = p["median_ratio"].as_f64().unwrap();
        assert!(median.is_finite() && median > 0.0, "{p}");
        assert!(p["worst_ratio"].as_f64().unwrap() <= median, "{p}");
        assert!(median <= p["best_ratio"].as_f64().unwrap(), "{p}");
    }
    let table = report.table();
    assert!(
        table.contains("paired: off and the configuration"),
        "{table}"
    );
    assert!(table.contains("lazy-30s"), "{table}");
    // The stores are gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_paired_slice_longer_than_the_run_is_refused() {
    let cli = Cli::try_parse_from(["bench", "--seconds", "1", "--paired", "2s"]).unwrap();
    let error = cli.args.config("test".into()).unwrap_err().to_string();
    assert!(error.contains("paired"), "{error}");
}
