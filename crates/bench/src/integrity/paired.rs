//! `--paired SLICE`: `off` and a lazy configuration measured side by side,
//! in alternating slices of one run, instead of in runs minutes apart.
//!
//! ## Why
//!
//! On the development machine (two vCPUs of a shared host) throughput
//! switches between two levels some 40% apart for seconds to minutes at a
//! time, in every configuration, `off` included, with no other process
//! running (BENCHMARKS.md, integrity, fourth and fifth measurements). Runs
//! of one configuration after another then compare host modes more than
//! configurations. Slices of a second, alternated, put both
//! configurations in the same mode nearly always; the median of the
//! per-pair ratios ignores the few pairs that straddle a switch.
//!
//! ## How
//!
//! Two fresh stores open at once, one with integrity off and one lazy,
//! each prefilled and (the lazy one) refreshed. Then `duration / slice`
//! pairs: each pair runs the workload for one slice on each store (the
//! same clients, [`cell::timed_run`]), in the order off, lazy then lazy,
//! off (ABBA). The order matters: the first slice after a switch runs
//! slower (the other store's compaction and, for a short period, its pass
//! spill into it), by up to 13% for lazy 1 s, so single pairs lean one
//! way or the other by turns. Two consecutive pairs (a quad, ABBA) give
//! each store one slice in each position, and the reported ratio is the
//! median over quads of the lazy slices' operations over off's.
//!
//! ## What it does not see
//!
//! The lazy store's background pass runs on its own clock: with the stores
//! taking turns, about half of its passes fall in the off store's slices,
//! as does compaction spilling over a slice's end. Its cost is therefore
//! shared out, not charged to the lazy store alone: the pairs measure the
//! foreground's cost (marks, the writer gate) and understate the pass's.
//! For a 30 s period the pass is small (each page of the store refreshed
//! once a period); for 1 s the sequential cells are the fairer measure.

use std::path::PathBuf;
use std::time::Duration;

use engram_engine::Store;
use serde::Serialize;

use super::cell::{self, open, prefill, timed_run};
use super::{Config, Configuration, Workload};
use crate::command::remove_if_present;
use crate::error::Result;
use crate::progress::progress_bar;
use crate::workload::ValuePool;

/// One configuration paired with off on one workload.
#[derive(Clone, Debug, Serialize)]
pub struct PairedResult {
    pub configuration: String,
    pub workload: &'static str,
    pub slice_ms: f64,
    /// Per pair: (off's ops/s, the configuration's ops/s), in run order.
    pub pairs: Vec<(f64, f64)>,
    /// The median over quads (two consecutive pairs, ABBA) of the
    /// configuration's operations over off's.
    pub median_ratio: f64,
    /// All the configuration's operations over all of off's.
    pub total_ratio: f64,
    /// The lowest and highest per-pair ratios.
    pub worst_ratio: f64,
    pub best_ratio: f64,
}

/// Measures `configuration` against off on `workload` in pairs of slices.
pub fn measure(
    config: &Config,
    values: &ValuePool,
    configuration: Configuration,
    workload: Workload,
    slice: Duration,
) -> Result<PairedResult> {
    let label = format!("{} vs off {workload} (paired)", configuration.name());
    let fresh = |c: Configuration| -> Result<(PathBuf, Store)> {
        let dir = config.dir.join(format!("paired-{}-{workload}", c.name()));
        remove_if_present(&dir)?;
        let store = open(config, &dir, c, 0)?;
        prefill(config, values, &store, &label)?;
        // Start with nothing stale, and off the first pass's backlog.
        store.refresh_redundancy_now();
        Ok((dir, store))
    };
    let (off_dir, off) = fresh(Configuration::Off)?;
    let (lazy_dir, lazy) = fresh(configuration)?;
    cell::wait_for_quiet(config, &label);
    let sliced = Config {
        duration: slice,
        ..config.clone()
    };
    let count = (config.duration.as_secs_f64() / slice.as_secs_f64()).ceil() as usize;
    let bar = progress_bar(config.progress, Some(count as u64), &label);
    let mut pairs = Vec::with_capacity(count);
    let hidden = progress_bar(false, None, "");
    for pair in 0..count {
        // A different stretch of the key sequence each slice.
        let seed = pair as u64 + 1;
        let slice_of = |store: &Store| -> Result<f64> {
            let timed = timed_run(&sliced, values, workload, store, &hidden, seed)?;
            Ok((timed.reads + timed.updates) as f64 / timed.elapsed.as_secs_f64())
        };
        let (off_ops, lazy_ops) = if pair % 2 == 0 {
            let a = slice_of(&off)?;
            (a, slice_of(&lazy)?)
        } else {
            let b = slice_of(&lazy)?;
            (slice_of(&off)?, b)
        };
        pairs.push((off_ops, lazy_ops));
        bar.set_position(pair as u64 + 1);
    }
    bar.finish_and_clear();
    off.crash();
    lazy.crash();
    remove_if_present(&off_dir)?;
    remove_if_present(&lazy_dir)?;
    Ok(summarize(configuration, workload, slice, pairs))
}

fn summarize(
    configuration: Configuration,
    workload: Workload,
    slice: Duration,
    pairs: Vec<(f64, f64)>,
) -> PairedResult {
    let mut ratios: Vec<f64> = pairs.iter().map(|&(off, lazy)| lazy / off).collect();
    ratios.sort_by(f64::total_cmp);
    // A lone pair (a run of one slice each) stands for itself.
    let mut quads: Vec<f64> = if pairs.len() < 2 {
        ratios.clone()
    } else {
        pairs
            .chunks_exact(2)
            .map(|quad| (quad[0].1 + quad[1].1) / (quad[0].0 + quad[1].0))
            .collect()
    };
    quads.sort_by(f64::total_cmp);
    let (off_total, lazy_total) = pairs
        .iter()
        .fold((0.0, 0.0), |(a, b), &(off, lazy)| (a + off, b + lazy));
    PairedResult {
        configuration: configuration.name(),
        workload: workload.name(),
        slice_ms: slice.as_secs_f64() * 1e3,
        median_ratio: quads.get(quads.len() / 2).copied().unwrap_or(f64::NAN),
        total_ratio: lazy_total / off_total,
        worst_ratio: ratios.first().copied().unwrap_or(f64::NAN),
        best_ratio: ratios.last().copied().unwrap_or(f64::NAN),
        pairs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_summarize_by_median_and_total() {
        // Quads: (100 + 200, 90 + 196) = 0.9533..., (100 + 100, 99 + 101)
        // = 1.0, (100 + 100, 97 + 99) = 0.98: the median is 0.98.
        let pairs = vec![
            (100.0, 90.0),
            (200.0, 196.0),
            (100.0, 99.0),
            (100.0, 101.0),
            (100.0, 97.0),
            (100.0, 99.0),
        ];
        let result = summarize(
            Configuration::Lazy(Duration::from_secs(30)),
            Workload::YcsbA,
            Duration::from_secs(1),
            pairs,
        );
        assert_eq!(result.median_ratio, 0.98);
        assert_eq!(result.worst_ratio, 0.9);
        assert_eq!(result.best_ratio, 1.01);
        assert!((result.total_ratio - 682.0 / 700.0).abs() < 1e-12);
    }
}
