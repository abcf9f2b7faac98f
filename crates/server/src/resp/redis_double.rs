//! Doubles as Redis 7.0 writes them in replies (`addReplyDouble`, C's
//! `%.17g`): ZSCORE, ZINCRBY, WITHSCORES and every RESP3 double. Clients
//! and Redis's own tests compare these texts, so `1.1` is written
//! `1.1000000000000001`, as Redis 7.0 writes it (7.2 changed to the
//! shortest digits). INCRBYFLOAT-style replies use another Redis formatter
//! (`resp::format_double`).

use std::io::Write;

/// A formatted score, on the stack (the longest is "-1.2345678901234567e-308").
pub struct ScoreText {
    buf: [u8; 40],
    len: usize,
}

impl ScoreText {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn extend(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

/// `value` as C's `printf("%.17g")` writes it: 17 significant digits,
/// trailing zeros dropped, scientific (`1e+20`, `1.0000000000000001e-05`)
/// when the exponent is below -4 or 17 and above; `inf`, `-inf`, `nan`,
/// `-0` as Redis writes them.
pub fn redis_double(value: f64) -> ScoreText {
    let mut text = ScoreText {
        buf: [0; 40],
        len: 0,
    };
    if value.is_nan() {
        text.extend(b"nan");
    } else if value.is_infinite() {
        text.extend(if value > 0.0 { b"inf" } else { b"-inf" });
    } else {
        percent_17g(value, &mut text);
    }
    text
}

fn percent_17g(value: f64, text: &mut ScoreText) {
    // Rust's `{:.16e}` rounds exactly, as glibc does: 17 significant
    // digits, and the exponent after rounding, which is what %g decides by.
    let mut sci = [0u8; 40];
    let mut cursor = &mut sci[..];
    write!(cursor, "{value:.16e}").expect("40 bytes hold any f64 in {:.16e}");
    let written = 40 - cursor.len();
    let sci = std::str::from_utf8(&sci[..written]).expect("ASCII");
    let (mantissa, exponent) = sci.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} exponent is an integer");
    if !(-4..17).contains(&exponent) {
        text.extend(trim_fraction(mantissa).as_bytes());
        text.extend(if exponent < 0 { b"e-" } else { b"e+" });
        let digits = exponent.unsigned_abs();
        if digits < 10 {
            text.extend(b"0");
        }
        let mut itoa = itoa::Buffer::new();
        text.extend(itoa.format(digits).as_bytes());
    } else {
        let decimals = (16 - exponent) as usize;
        let mut fixed = [0u8; 40];
        let mut cursor = &mut fixed[..];
        write!(cursor, "{value:.decimals$}").expect("at most 40 bytes");
        let written = 40 - cursor.len();
        let fixed = std::str::from_utf8(&fixed[..written]).expect("ASCII");
        text.extend(trim_fraction(fixed).as_bytes());
    }
}

/// Drops trailing zeros of a fraction, and its point if nothing is left.
fn trim_fraction(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

#[cfg(test)]
mod tests {
    use super::redis_double;

    /// Texts Redis 7.0.15 replies with (ZSCORE after ZADD of the value),
    /// which are C's `%.17g`.
    #[test]
    fn doubles_read_as_redis_writes_them() {
        for (value, text) in [
            (1.5, "1.5"),
            (1.1, "1.1000000000000001"),
            (0.1, "0.10000000000000001"),
            (-0.0, "-0"),
            (0.0, "0"),
            (3.0, "3"),
            (-3.0, "-3"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (1e-7, "9.9999999999999995e-08"),
            (7.2115e20, "7.2115000000000007e+20"),
            (123456789.25, "123456789.25"),
            (1e300, "1.0000000000000001e+300"),
            (5e-324, "4.9406564584124654e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(
                std::str::from_utf8(redis_double(value).as_bytes()).unwrap(),
                text,
                "{value:e}"
            );
        }
    }
}
