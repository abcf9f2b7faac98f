//! Presenting a report: a table for people, JSON for machines.

use std::fmt::Write as _;

use crate::engine::{Report, OPS};

impl Report {
    /// One block per operation: each system's throughput, latency
    /// percentiles, and Engram's throughput as a multiple of it.
    pub fn table(&self) -> String {
        let mut text = String::new();
        let c = &self.config;
        let _ = writeln!(
            text,
            "records {}  ops/phase {}  threads {}  runs {} (median shown)  key {} B  value {} B  {}  flush {}  cores {}  kernel {}",
            c.records, c.ops, c.threads, c.runs, c.key_bytes, c.value_bytes, c.distribution, c.flush, c.cores, c.kernel
        );
        for op in OPS {
            let rows: Vec<_> = self.results.iter().filter(|r| r.op == op).collect();
            let engram = rows
                .iter()
                .find(|r| r.system == "engram")
                .map(|r| r.ops_per_sec);
            let _ = writeln!(
                text,
                "\n{op:<8} {:<9} {:>13} {:>10} {:>10} {:>10} {:>12}",
                "system", "ops/s", "p50", "p99", "p99.9", "engram ÷ it"
            );
            for row in rows {
                let ratio =
                    engram.map_or("-".to_string(), |e| format!("{:.2}×", e / row.ops_per_sec));
                let _ = writeln!(
                    text,
                    "{:<8} {:<9} {:>13.0} {:>10} {:>10} {:>10} {:>12}",
                    "",
                    row.system,
                    row.ops_per_sec,
                    nanos(row.p50_ns),
                    nanos(row.p99_ns),
                    nanos(row.p999_ns),
                    ratio
                );
            }
        }
        if !self.recovery.is_empty() {
            let _ = writeln!(text, "\nrecovery (reopen after a crash)");
            for row in &self.recovery {
                let _ = writeln!(
                    text,
                    "         {:<9} {} records, {} thread(s): {:.3} s",
                    row.system, row.records, row.threads, row.seconds
                );
            }
        }
        text
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serialises")
    }
}

fn nanos(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}
