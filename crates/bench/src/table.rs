//! The text tables of every benchmark's report, and the number formats
//! their cells share: one layout type ([`Table`]: an indent, a gap between
//! cells, and columns that keep left or right), thousands separators,
//! durations that pick their own unit, and ratios.

use std::fmt::Write as _;

/// A column of a text table: its width, and which side its cells keep to.
/// A cell wider than its column is written whole and pushes the rest of
/// its row to the right.
#[derive(Clone, Copy, Debug)]
pub enum Column {
    Left(usize),
    Right(usize),
}

/// How a table's rows are laid out.
#[derive(Clone, Copy, Debug)]
pub struct Table<'a> {
    indent: &'a str,
    gap: &'a str,
    columns: &'a [Column],
}

impl<'a> Table<'a> {
    /// Rows start with `indent`, cells follow each other directly.
    pub const fn new(indent: &'a str, columns: &'a [Column]) -> Table<'a> {
        Table {
            indent,
            gap: "",
            columns,
        }
    }

    /// Cells separated by `gap`.
    pub const fn gap(self, gap: &'a str) -> Table<'a> {
        Table { gap, ..self }
    }

    /// One row and its newline: the indent, then each cell padded to its
    /// column. A row with fewer cells than columns ends after its last.
    pub fn row(&self, text: &mut String, cells: &[&str]) {
        text.push_str(self.indent);
        for (i, (column, cell)) in self.columns.iter().zip(cells).enumerate() {
            if i > 0 {
                text.push_str(self.gap);
            }
            let _ = match *column {
                Column::Left(width) => write!(text, "{cell:<width$}"),
                Column::Right(width) => write!(text, "{cell:>width$}"),
            };
        }
        text.push('\n');
    }
}

/// The width of a column of labels: the longest of their `lengths` and
/// `space` more, and at least `min`.
pub fn width_to_fit(lengths: impl IntoIterator<Item = usize>, space: usize, min: usize) -> usize {
    lengths
        .into_iter()
        .map(|length| length + space)
        .max()
        .unwrap_or(0)
        .max(min)
}

/// `text` without blanks at the ends of its lines (which empty cells at the
/// end of a row leave).
pub fn trim_line_ends(text: &str) -> String {
    text.lines().fold(String::new(), |mut out, line| {
        out.push_str(line.trim_end());
        out.push('\n');
        out
    })
}

/// 1234567.8 -> "1,234,568".
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `value` with `places` decimals, or `missing` when there is none.
pub fn decimals(value: Option<f64>, places: usize, missing: &str) -> String {
    value.map_or_else(|| missing.to_string(), |v| format!("{v:.places$}"))
}

/// A ratio with two significant digits below 10 (0.0042, 0.53, 2.6) and one
/// decimal above; "-" when it has no value.
pub fn significant(value: f64) -> String {
    if !value.is_finite() {
        return "-".into();
    }
    if value >= 10.0 {
        return format!("{value:.1}");
    }
    let places = if value > 0.0 {
        (1.0 - value.log10().floor()).clamp(1.0, 6.0) as usize
    } else {
        1
    };
    format!("{value:.places$}")
}

/// Nanoseconds in the unit that suits them: 850 ns, 2.5 µs, 3.0 ms, 1.20 s.
pub fn nanos(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// Microseconds: 1.2 µs, 13 µs, 2.5 ms.
pub fn micros(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.1} ms", us / 1e3)
    } else if us >= 10.0 {
        format!("{us:.0} µs")
    } else {
        format!("{us:.1} µs")
    }
}

/// Milliseconds: 2.5 ms, 850 ms, 1.02 s.
pub fn millis(ms: f64) -> String {
    if ms >= 10.0 {
        whole_millis(ms)
    } else {
        format!("{ms:.1} ms")
    }
}

/// Milliseconds without a decimal below a second: 2 ms, 850 ms, 1.02 s.
pub fn whole_millis(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1e3)
    } else {
        format!("{ms:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_pad_each_cell_to_its_column() {
        let columns = [Column::Left(6), Column::Right(5), Column::Right(4)];
        let mut text = String::new();
        Table::new("  ", &columns).row(&mut text, &["get", "12", "x"]);
        Table::new("", &columns)
            .gap("|")
            .row(&mut text, &["toolong", "1"]);
        assert_eq!(text, "  get      12   x\ntoolong|    1\n");
        assert_eq!(trim_line_ends("a  \nb\n"), "a\nb\n");
        assert_eq!(width_to_fit([3, 7], 2, 5), 9);
        assert_eq!(width_to_fit([], 2, 5), 5);
    }

    #[test]
    fn numbers() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(decimals(Some(0.5), 2, "-"), "0.50");
        assert_eq!(decimals(None, 2, "–"), "–");
        assert_eq!(significant(0.0042), "0.0042");
        assert_eq!(significant(0.5), "0.50");
        assert_eq!(significant(2.61), "2.6");
        assert_eq!(significant(29.15), "29.1");
        assert_eq!(significant(f64::INFINITY), "-");
    }

    #[test]
    fn durations() {
        assert_eq!(nanos(850), "850 ns");
        assert_eq!(nanos(2_500), "2.5 µs");
        assert_eq!(nanos(3_000_000), "3.0 ms");
        assert_eq!(nanos(1_200_000_000), "1.20 s");
        assert_eq!(micros(1.25), "1.2 µs");
        assert_eq!(micros(13.4), "13 µs");
        assert_eq!(micros(2500.0), "2.5 ms");
        assert_eq!(millis(2.5), "2.5 ms");
        assert_eq!(millis(850.0), "850 ms");
        assert_eq!(millis(1020.0), "1.02 s");
        assert_eq!(whole_millis(2.4), "2 ms");
        assert_eq!(whole_millis(1020.0), "1.02 s");
    }
}
