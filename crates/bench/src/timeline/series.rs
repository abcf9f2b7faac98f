//! Checkpoint spans and what the window series say about them.
//!
//! ## Spans from sampled stats
//!
//! `Collections::stats()` is the only window onto the checkpointer: it
//! says whether a checkpoint is running, how many completed, and how long
//! the last one took. The sampler calls it every millisecond and feeds
//! each answer, with the instant the call began, to a [`SpanRecorder`]: a
//! span opens at the first sample that sees a checkpoint running and
//! closes at the first that does not, so a span is right to within a
//! sampling period at each end; when the count says the checkpoint that
//! ended took longer than the span seen, the span begins that much before
//! its end instead. (Should a `stats()` call wait for a running checkpoint,
//! as it once did, the next sample comes after the checkpoint ended and
//! the span still errs long, never short.) A checkpoint that began and ended between two samples shows only as a
//! higher count; its span is the last checkpoint's duration, ending at the
//! sample that saw the count. Spans that overlap or touch (one checkpoint
//! starting as the last ended) are merged: a span is a time during which
//! some checkpoint ran, and the store's counter says how many did.
//!
//! ## Quiescence
//!
//! The run is cut into 10 ms windows. A window is *during a checkpoint*
//! when any part of it overlaps a span (so partly overlapping windows
//! count, which can only lower the minimum). The quiescence ratio is the
//! smallest window's operations during checkpoints over the median
//! window's operations over the whole run: 1 when checkpoints cost
//! nothing, 0 when some window during a checkpoint completed nothing.

use std::time::{Duration, Instant};

use serde::Serialize;

/// A checkpoint's time, in milliseconds since the run's origin.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Span {
    pub begin_ms: f64,
    pub end_ms: f64,
}

impl Span {
    pub fn length_ms(&self) -> f64 {
        self.end_ms - self.begin_ms
    }
}

/// Builds spans from sampled stats (module docs).
pub struct SpanRecorder {
    origin: Instant,
    open: Option<Instant>,
    checkpoints: u64,
    spans: Vec<(Instant, Instant)>,
}

impl SpanRecorder {
    /// `checkpoints`: the completed count before the run.
    pub fn new(origin: Instant, checkpoints: u64) -> SpanRecorder {
        SpanRecorder {
            origin,
            open: None,
            checkpoints,
            spans: Vec::new(),
        }
    }

    /// One sample: the call to `stats()` began at `at` and said `running`,
    /// `checkpoints` completed, the last taking `last_duration`.
    pub fn observe(
        &mut self,
        at: Instant,
        running: bool,
        checkpoints: u64,
        last_duration: Option<Duration>,
    ) {
        let completed = checkpoints > self.checkpoints;
        self.checkpoints = self.checkpoints.max(checkpoints);
        let measured_begin = |end: Instant| {
            last_duration
                .filter(|_| completed)
                .and_then(|duration| end.checked_sub(duration))
        };
        match (self.open, running) {
            (None, true) => self.open = Some(at),
            (Some(begin), false) => {
                let begin = measured_begin(at).map_or(begin, |measured| measured.min(begin));
                self.spans.push((begin, at));
                self.open = None;
            }
            // One ended and the next began between two samples: the gap
            // was shorter than a sample period.
            (Some(begin), true) if completed => {
                self.spans.push((begin, at));
                self.open = Some(at);
            }
            (Some(_), true) => {}
            (None, false) => {
                if let Some(begin) = measured_begin(at) {
                    self.spans.push((begin.max(self.origin), at));
                }
            }
        }
    }

    /// The spans, one still open closing at `end`, clipped to the run;
    /// spans that overlap or touch (checkpoints back to back) merged.
    pub fn finish(mut self, end: Instant) -> Vec<Span> {
        if let Some(begin) = self.open.take() {
            self.spans.push((begin, end));
        }
        let ms = |at: Instant| at.saturating_duration_since(self.origin).as_secs_f64() * 1e3;
        let end_ms = ms(end);
        let mut spans: Vec<Span> = self
            .spans
            .iter()
            .map(|&(begin, end)| Span {
                begin_ms: ms(begin).min(end_ms),
                end_ms: ms(end).min(end_ms),
            })
            .filter(|span| span.end_ms > span.begin_ms)
            .collect();
        spans.sort_by(|a, b| a.begin_ms.total_cmp(&b.begin_ms));
        let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
        for span in spans {
            match merged.last_mut() {
                Some(last) if span.begin_ms <= last.end_ms => {
                    last.end_ms = last.end_ms.max(span.end_ms);
                }
                _ => merged.push(span),
            }
        }
        merged
    }
}

/// Which of `windows` windows of `window` overlap some span.
pub fn windows_during(spans: &[Span], window: Duration, windows: usize) -> Vec<bool> {
    let window_ms = window.as_secs_f64() * 1e3;
    let mut during = vec![false; windows];
    for span in spans {
        let first = (span.begin_ms / window_ms).floor().max(0.0) as usize;
        // A span ending exactly on a boundary does not reach the next window.
        let last = ((span.end_ms / window_ms).ceil() as usize).min(windows);
        for flag in during.iter_mut().take(last).skip(first) {
            *flag = true;
        }
    }
    during
}

/// The median of `values` (the mean of the middle two of an even count).
pub fn median(values: &[u64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[middle] as f64
    } else {
        (sorted[middle - 1] + sorted[middle]) as f64 / 2.0
    })
}

/// What the windows of one run say about checkpoints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Quiescence {
    pub windows: usize,
    pub windows_during_checkpoints: usize,
    /// Operations per window.
    pub median_window_ops: f64,
    pub min_window_ops: u64,
    pub min_window_ops_during_checkpoints: Option<u64>,
    /// The lowest window during checkpoints over the median window; `None`
    /// without checkpoints.
    pub ratio: Option<f64>,
    /// Windows in which no operation completed, and in which no write did
    /// (a writer quiesced).
    pub windows_without_ops: usize,
    pub windows_without_writes: usize,
}

/// `ops` and `writes` per window, `spans` of checkpoints.
pub fn quiescence(ops: &[u64], writes: &[u64], spans: &[Span], window: Duration) -> Quiescence {
    let during = windows_during(spans, window, ops.len());
    let median_window_ops = median(ops).unwrap_or(0.0);
    let min_during = ops
        .iter()
        .zip(&during)
        .filter(|(_, &during)| during)
        .map(|(&ops, _)| ops)
        .min();
    Quiescence {
        windows: ops.len(),
        windows_during_checkpoints: during.iter().filter(|&&d| d).count(),
        median_window_ops,
        min_window_ops: ops.iter().copied().min().unwrap_or(0),
        min_window_ops_during_checkpoints: min_during,
        ratio: min_during
            .filter(|_| median_window_ops > 0.0)
            .map(|min| min as f64 / median_window_ops),
        windows_without_ops: ops.iter().filter(|&&n| n == 0).count(),
        windows_without_writes: writes.iter().filter(|&&n| n == 0).count(),
    }
}

/// A target the report checks: PASS when `value` is at least (or at most)
/// `target`; no verdict without a value.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    pub name: String,
    pub value: Option<f64>,
    pub target: f64,
    /// `>=` or `<=`.
    pub comparison: &'static str,
    pub pass: Option<bool>,
}

impl Check {
    pub fn at_least(name: impl Into<String>, value: Option<f64>, target: f64) -> Check {
        Check {
            name: name.into(),
            pass: value.map(|v| v >= target),
            value,
            target,
            comparison: ">=",
        }
    }

    pub fn at_most(name: impl Into<String>, value: Option<f64>, target: f64) -> Check {
        Check {
            name: name.into(),
            pass: value.map(|v| v <= target),
            value,
            target,
            comparison: "<=",
        }
    }

    pub fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "n/a",
        }
    }
}

/// `numerator / denominator`, when both are measured and the denominator
/// is not zero.
pub fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(10);

    fn span(begin_ms: f64, end_ms: f64) -> Span {
        Span { begin_ms, end_ms }
    }

    #[test]
    fn spans_mark_every_window_they_touch() {
        let during = windows_during(&[span(15.0, 30.0), span(95.0, 200.0)], WINDOW, 10);
        assert_eq!(
            during,
            [false, true, true, false, false, false, false, false, false, true]
        );
        assert_eq!(windows_during(&[], WINDOW, 3), [false; 3]);
        assert_eq!(windows_during(&[span(0.0, 0.5)], WINDOW, 2), [true, false]);
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[5, 1, 3]), Some(3.0));
        assert_eq!(median(&[4, 1, 3, 2]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn quiescence_is_the_worst_window_during_checkpoints_over_the_median() {
        let ops = [100, 100, 40, 100, 0, 90, 100];
        let writes = [50, 50, 20, 50, 0, 45, 50];
        let q = quiescence(&ops, &writes, &[span(20.0, 30.0)], WINDOW);
        assert_eq!(q.windows, 7);
        assert_eq!(q.windows_during_checkpoints, 1);
        assert_eq!(q.median_window_ops, 100.0);
        assert_eq!(q.min_window_ops, 0);
        assert_eq!(q.min_window_ops_during_checkpoints, Some(40));
        assert_eq!(q.ratio, Some(0.4));
        assert_eq!(q.windows_without_ops, 1);
        assert_eq!(q.windows_without_writes, 1);
        // The stall at 40-50 ms is a checkpoint's too: the ratio drops to 0.
        let q = quiescence(&ops, &writes, &[span(20.0, 30.0), span(41.0, 42.0)], WINDOW);
        assert_eq!(q.ratio, Some(0.0));
        // No checkpoint, no ratio.
        let q = quiescence(&ops, &writes, &[], WINDOW);
        assert_eq!(q.ratio, None);
        assert_eq!(q.min_window_ops_during_checkpoints, None);
    }

    #[test]
    fn checks_and_ratios() {
        assert_eq!(Check::at_least("q", Some(0.6), 0.5).verdict(), "PASS");
        assert_eq!(Check::at_least("q", Some(0.4), 0.5).verdict(), "FAIL");
        assert_eq!(Check::at_most("t", Some(2.0), 2.0).verdict(), "PASS");
        assert_eq!(Check::at_most("t", Some(2.1), 2.0).verdict(), "FAIL");
        assert_eq!(Check::at_most("t", None, 2.0).verdict(), "n/a");
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(2.0)), None);
    }

    #[test]
    fn spans_from_samples() {
        let origin = Instant::now();
        let at = |ms: u64| origin + Duration::from_millis(ms);
        let mut recorder = SpanRecorder::new(origin, 5);
        recorder.observe(at(1), false, 5, None);
        // A checkpoint seen running at 2 and 3 ms; the sample at 40 sees it
        // done, having taken 36 ms (the span keeps the earlier begin).
        recorder.observe(at(2), true, 5, None);
        recorder.observe(at(3), true, 5, None);
        recorder.observe(at(40), false, 6, Some(Duration::from_millis(36)));
        // One that fell between two samples: only the count shows it.
        recorder.observe(at(50), false, 6, Some(Duration::from_millis(36)));
        recorder.observe(at(51), false, 7, Some(Duration::from_micros(500)));
        // Back to back: one ends and the next begins between samples.
        recorder.observe(at(60), true, 7, None);
        recorder.observe(at(70), true, 8, Some(Duration::from_millis(10)));
        // Still running when the run ends; back to back, the last two merge.
        let spans = recorder.finish(at(80));
        let expected = [(2.0, 40.0), (50.5, 51.0), (60.0, 80.0)];
        assert_eq!(spans.len(), expected.len(), "{spans:?}");
        for (span, (begin, end)) in spans.iter().zip(expected) {
            assert!((span.begin_ms - begin).abs() < 1e-6, "{spans:?}");
            assert!((span.end_ms - end).abs() < 1e-6, "{spans:?}");
        }
        assert!((spans[0].length_ms() - 38.0).abs() < 1e-6);
    }
}
