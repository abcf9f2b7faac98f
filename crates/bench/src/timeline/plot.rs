//! `--plot FILE.png`: the tail part's throughput over time, one line per
//! configuration (operations per second in each 10 ms window), and one for
//! Redis beside each configuration it ran beside (`--peers redis`). Checkpoint
//! spans: each configuration's as bars in a lane of its own above the
//! lines, in its colour, and the background configuration's (the one the
//! quiescence target is about) also shaded over the whole height.
//!
//! Drawn with plotters into a pixel buffer and encoded with `png`, so no
//! system library is needed. Text needs a TrueType font, which plotters'
//! `ab_glyph` backend takes as bytes: the first of [`FONT_PATHS`] that
//! exists (or the file `ENGRAM_PLOT_FONT` names) is read at run time. With
//! none, the chart is drawn without text, and a warning says so.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::FontStyle;

use super::error::{Result, TimelineError};
use super::peer_report::PeerTailResult;
use super::report::TailReport;
use super::tail::Configuration;

const WIDTH: u32 = 1600;
const HEIGHT: u32 = 900;
/// Where fonts usually are (Debian and Ubuntu, Fedora, Arch).
pub const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
const FONT_FAMILY: &str = "sans-serif";
/// Series colours, by configuration order.
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

/// Registers a font once; whether one was found.
fn font() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let named = std::env::var_os("ENGRAM_PLOT_FONT").map(std::path::PathBuf::from);
        let candidates = named
            .into_iter()
            .chain(FONT_PATHS.iter().map(std::path::PathBuf::from));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                // plotters keeps fonts for the process's life.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// Draws `tail`, and Redis's runs `peer` beside it, into `path`.
pub fn draw(path: &Path, tail: &TailReport, peer: &[PeerTailResult]) -> Result<()> {
    let with_text = font();
    if !with_text {
        eprintln!(
            "warning: no TrueType font found (tried {}; set ENGRAM_PLOT_FONT): the plot has \
             no text",
            FONT_PATHS.join(", ")
        );
    }
    let mut pixels = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
    render(&mut pixels, tail, peer, with_text).map_err(|e| TimelineError::Plot(e.to_string()))?;
    encode(path, &pixels)
}

/// One line of the chart.
struct Line<'a> {
    label: String,
    window_ms: f64,
    ops_by_window: &'a [u64],
}

impl Line<'_> {
    fn per_second(&self, ops: u64) -> f64 {
        ops as f64 / (self.window_ms / 1e3)
    }
}

fn render(
    pixels: &mut [u8],
    tail: &TailReport,
    peer: &[PeerTailResult],
    with_text: bool,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let area = BitMapBackend::with_buffer(pixels, (WIDTH, HEIGHT)).into_drawing_area();
    area.fill(&WHITE)?;
    let lines: Vec<Line> = tail
        .configurations
        .iter()
        .map(|r| Line {
            label: format!(
                "{}{} ({} checkpoints)",
                r.configuration,
                if r.server.is_some() { " (server)" } else { "" },
                r.checkpoints
            ),
            window_ms: r.window_ms,
            ops_by_window: &r.ops_by_window,
        })
        .chain(peer.iter().map(|r| Line {
            label: format!("{} (redis)", r.configuration),
            window_ms: r.window_ms,
            ops_by_window: &r.ops_by_window,
        }))
        .collect();
    let seconds = lines
        .iter()
        .map(|line| line.ops_by_window.len() as f64 * line.window_ms / 1e3)
        .fold(0.0, f64::max)
        .max(0.01);
    let highest = lines
        .iter()
        .flat_map(|line| {
            line.ops_by_window
                .iter()
                .map(move |&ops| line.per_second(ops))
        })
        .fold(0.0, f64::max)
        .max(1.0)
        / 1e6
        * 1.05;
    // One lane of span bars per configuration above the lines.
    let lane = highest * 0.04;
    let lanes = tail.configurations.len() as f64;
    let top = highest + lanes * lane * 1.5 + lane * 0.5;
    let mut builder = ChartBuilder::on(&area);
    builder.margin(20);
    if with_text {
        builder
            .caption(
                "Throughput per 10 ms window; bars: checkpoints running (shaded: background's)",
                (FONT_FAMILY, 28),
            )
            .x_label_area_size(50)
            .y_label_area_size(80);
    }
    let mut chart = builder.build_cartesian_2d(0.0..seconds, 0.0..top)?;
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE.mix(0.0));
    if with_text {
        mesh.x_desc("time (s)")
            .y_desc("million operations per second")
            .label_style((FONT_FAMILY, 18))
            .axis_desc_style((FONT_FAMILY, 20));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw()?;
    for (n, result) in tail.configurations.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        if result.configuration == Configuration::Background.name() {
            chart.draw_series(result.checkpoint_spans.iter().map(|span| {
                Rectangle::new(
                    [(span.begin_ms / 1e3, 0.0), (span.end_ms / 1e3, highest)],
                    colour.mix(0.10).filled(),
                )
            }))?;
        }
        let (low, high) = (
            highest + (n as f64 * 1.5 + 0.5) * lane,
            highest + (n as f64 * 1.5 + 1.5) * lane,
        );
        chart.draw_series(result.checkpoint_spans.iter().map(|span| {
            Rectangle::new(
                [(span.begin_ms / 1e3, low), (span.end_ms / 1e3, high)],
                colour.mix(0.8).filled(),
            )
        }))?;
    }
    for (n, line) in lines.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        let window_s = line.window_ms / 1e3;
        let points = line
            .ops_by_window
            .iter()
            .enumerate()
            .map(|(i, &ops)| ((i as f64 + 0.5) * window_s, line.per_second(ops) / 1e6));
        let series = chart.draw_series(LineSeries::new(points, colour.stroke_width(1)))?;
        if with_text {
            series.label(line.label.clone()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 4), (x + 24, y + 4)], colour.filled())
            });
        }
    }
    if with_text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT_FAMILY, 20))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    area.present()?;
    Ok(())
}

/// Writes `pixels` (RGB, 8 bits each) as a PNG.
fn encode(path: &Path, pixels: &[u8]) -> Result<()> {
    let file =
        std::fs::File::create(path).map_err(|e| TimelineError::io("creating the plot", path, e))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), WIDTH, HEIGHT);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder
        .write_header()
        .map_err(|e| TimelineError::Plot(e.to_string()))?;
    writer
        .write_image_data(pixels)
        .map_err(|e| TimelineError::Plot(e.to_string()))?;
    writer
        .finish()
        .map_err(|e| TimelineError::Plot(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::report::{LatencySet, TailResult};
    use crate::timeline::series::{Quiescence, Span};

    fn result(configuration: &'static str, spans: Vec<Span>) -> TailResult {
        TailResult {
            configuration,
            target: "embedded",
            checkpoint_mode: "background",
            seconds: 0.05,
            ops: 10,
            reads: 5,
            writes: 5,
            ops_per_sec: 200.0,
            prefill_seconds: 0.0,
            checkpoints: spans.len() as u64,
            checkpoint_spans: spans,
            checkpoint_running_ms: 0.0,
            backpressure_waits: 0,
            backpressure_wait_ms: 0.0,
            log_bytes_pending: 0,
            last_checkpoint: None,
            latency_us: LatencySet {
                all: None,
                read: None,
                write: None,
            },
            corrected_latency_us: LatencySet {
                all: None,
                read: None,
                write: None,
            },
            quiescence: Quiescence {
                windows: 5,
                windows_during_checkpoints: 0,
                median_window_ops: 2.0,
                min_window_ops: 0,
                min_window_ops_during_checkpoints: None,
                ratio: None,
                windows_without_ops: 1,
                windows_without_writes: 1,
            },
            other_cpu_percent: None,
            window_ms: 10.0,
            ops_by_window: vec![3, 2, 0, 2, 3],
            writes_by_window: vec![1, 1, 0, 1, 2],
            server: None,
        }
    }

    /// With or without a font: the no-text path must not try to draw text.
    #[test]
    fn renders_with_and_without_text() {
        let tail = TailReport {
            configurations: vec![
                result(
                    "background",
                    vec![Span {
                        begin_ms: 12.0,
                        end_ms: 31.0,
                    }],
                ),
                result("off", Vec::new()),
            ],
            checks: Vec::new(),
            corrected_checks: Vec::new(),
        };
        let mut pixels = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
        render(&mut pixels, &tail, &[], false).unwrap();
        assert!(pixels.iter().any(|&p| p != 255), "nothing drawn");
        if font() {
            render(&mut pixels, &tail, &[], true).unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.png");
        encode(&path, &pixels).unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[..4], b"\x89PNG");
    }
}
