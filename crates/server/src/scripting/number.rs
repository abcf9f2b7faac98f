//! C's `%.<precision>g`, which Redis uses to turn Lua numbers into text:
//! `%.17g` for command arguments (`redis.call('set', k, 0.1)`), `%.14g` in
//! cjson (Lua's own `tostring`).

/// `value` as `printf("%.<precision>g", value)` prints it.
pub fn format_g(value: f64, precision: usize) -> String {
    if value.is_nan() {
        return if value.is_sign_negative() {
            "-nan"
        } else {
            "nan"
        }
        .to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let precision = precision.max(1);
    // The exponent after rounding to `precision` significant digits
    // decides the style, as in C.
    let scientific = format!("{:.*e}", precision - 1, value);
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` always writes an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    if exponent < -4 || exponent >= precision as i32 {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{}e{sign}{:02}",
            strip_zeros(mantissa),
            exponent.unsigned_abs()
        )
    } else {
        let decimals = (precision as i32 - 1 - exponent).max(0) as usize;
        strip_zeros(&format!("{value:.decimals$}")).to_string()
    }
}

/// `%g` drops trailing zeros of the fraction, and the point if nothing
/// is left after it.
fn strip_zeros(text: &str) -> &str {
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::format_g;

    #[test]
    fn like_printf() {
        assert_eq!(format_g(5.0, 17), "5");
        assert_eq!(format_g(-12.0, 17), "-12");
        assert_eq!(format_g(0.1, 17), "0.10000000000000001");
        assert_eq!(format_g(0.1, 14), "0.1");
        assert_eq!(format_g(1e20, 17), "1e+20");
        assert_eq!(format_g(123456789012345678.0, 17), "1.2345678901234568e+17");
        assert_eq!(format_g(0.0001, 14), "0.0001");
        assert_eq!(format_g(0.00001, 14), "1e-05");
        assert_eq!(format_g(3.5, 14), "3.5");
        assert_eq!(format_g(1099511627776.0, 17), "1099511627776");
        assert_eq!(format_g(f64::INFINITY, 17), "inf");
    }
}
