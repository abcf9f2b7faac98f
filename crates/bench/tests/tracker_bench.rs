//! `engram-bench tracker` end to end on a tiny region: the software
//! tracker is always measured; the kernel tracker is measured where this
//! kernel supports uffd-wp async, and otherwise says why not. Nothing here
//! depends on the kernel's support.

use engram_bench::tracker::{self, MemoryKind, TrackerConfig, TrackerKind};

#[test]
fn tiny_run_measures_software_and_accounts_for_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let config = TrackerConfig::small(dir.path());
    let report = tracker::run(&config).unwrap();

    let software = report
        .runs
        .iter()
        .find(|r| r.tracker == TrackerKind::Software && r.memory == MemoryKind::File)
        .expect("a software-tracker result on file memory");
    assert!(software.unsupported.is_none(), "{:?}", software.unsupported);
    assert!(software.ops > 0);
    assert!(software.ops_per_sec > 0.0);
    assert!(software.ratio_to_baseline.is_some());

    let kernel: Vec<_> = report
        .runs
        .iter()
        .filter(|r| r.tracker == TrackerKind::Kernel)
        .collect();
    assert_eq!(kernel.len(), config.memory.len() * config.workloads.len());
    for run in kernel {
        match &run.unsupported {
            Some(why) => assert!(!why.is_empty(), "{run:?}"),
            None => {
                assert!(run.ops_per_sec > 0.0, "{run:?}");
                assert!(run.scan_ms_mean.is_some(), "{run:?}");
            }
        }
    }

    // Every memory kind was probed, and a refusal carries its reason.
    assert_eq!(report.support.len(), MemoryKind::ALL.len());
    for support in &report.support {
        assert!(support.supported || support.reason.is_some(), "{support:?}");
    }

    // The crash gap was measured; the table and the JSON name the trackers.
    let gap = report.crash_gap.as_ref().expect("crash gap measured");
    assert!(gap.full_recompute_warm_ms > 0.0);
    let table = report.table();
    assert!(table.contains("software"), "{table}");
    assert!(table.contains("kernel"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    assert_eq!(json["config"]["region_bytes"], 64u64 << 20);
    assert!(json["runs"].as_array().is_some_and(|runs| !runs.is_empty()));
    assert!(json["support"][0]["memory"].is_string());
}

#[test]
fn bad_configurations_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = TrackerConfig::small(dir.path());
    config.region_bytes = 1 << 20;
    assert!(tracker::run(&config).is_err());
    let mut config = TrackerConfig::small(dir.path());
    config.threads = 0;
    assert!(tracker::run(&config).is_err());
    let mut config = TrackerConfig::small(dir.path());
    config.workloads.clear();
    assert!(tracker::run(&config).is_err());
}
