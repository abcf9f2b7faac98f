//! Progress on standard error while a benchmark runs: a bar over a known
//! number of steps, or a spinner. Standard output stays for the report.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar over `total` steps, or a spinner without one; hidden unless
/// `enabled` (indicatif also hides it when standard error is no terminal).
pub(crate) fn progress_bar(enabled: bool, total: Option<u64>, label: &str) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
    let template = match total {
        // Under 80 columns, so the bar never wraps.
        Some(_) => "{msg:<34} [{bar:25}] {percent:>3}% eta {eta}",
        None => "{msg:<34} {spinner} {elapsed}",
    };
    bar.set_style(
        ProgressStyle::with_template(template)
            .expect("constant progress template is valid")
            .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    if total.is_none() {
        bar.enable_steady_tick(Duration::from_millis(100));
    }
    bar
}
