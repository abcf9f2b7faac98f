//! Doubles as Redis 7.2 writes them in replies (`d2string` over
//! `fpconv_dtoa`): ZSCORE, ZINCRBY, WITHSCORES and every RESP3 double.
//! Redis's digits come from Grisu2, which is not always the shortest
//! representation ryu would give, and its layout keeps plain digits much
//! longer than Rust's `{}`; clients compare these texts, so they are
//! reproduced exactly (compared, when written, with Redis's own `fpconv`
//! built from source over a million doubles; the unit test below keeps
//! the cases where Rust's formatting differs). INCRBYFLOAT-style replies use another Redis formatter
//! (`resp::format_double`).

/// A formatted score, on the stack (the longest is "-1.2345678901234567e-308").
pub struct ScoreText {
    buf: [u8; 40],
    len: usize,
}

impl ScoreText {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn push(&mut self, byte: u8) {
        self.buf[self.len] = byte;
        self.len += 1;
    }

    fn extend(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

/// `value` as Redis 7.2 writes a double (`d2string`): `nan`, `inf`, `-inf`,
/// `0` and `-0`; integral values within ±2^62 as integers; anything else as
/// Grisu2's digits (they read back to the value; almost always the
/// shortest such), laid out the way `fpconv_dtoa` does (plain digits with
/// up to 6 trailing zeros, plain decimals down to 1e-6, scientific
/// `1.5e+300` / `1e-7` beyond).
pub fn redis_double(value: f64) -> ScoreText {
    let mut text = ScoreText {
        buf: [0; 40],
        len: 0,
    };
    if value.is_nan() {
        text.extend(b"nan");
    } else if value.is_infinite() {
        text.extend(if value > 0.0 { b"inf" } else { b"-inf" });
    } else if value == 0.0 {
        text.extend(if value.is_sign_negative() {
            b"-0"
        } else {
            b"0"
        });
    } else if value.trunc() == value && value.abs() <= 4_611_686_018_427_387_904.0 {
        let mut digits = itoa::Buffer::new();
        text.extend(digits.format(value as i64).as_bytes());
    } else {
        fpconv_layout(value, &mut text);
    }
    text
}

/// Writes a finite, non-zero `value` as Redis's `fpconv_dtoa` does: Grisu2
/// digits, then plain digits with up to 6 trailing zeros, plain decimals
/// down to 1e-6 (or with an exponent under 4), scientific beyond.
fn fpconv_layout(value: f64, text: &mut ScoreText) {
    let mut digits = [0u8; 18];
    let (ndigits, k) = grisu::digits(value, &mut digits);
    let digits = &digits[..ndigits];
    let negative = value < 0.0;
    if negative {
        text.push(b'-');
    }
    let nd = ndigits as i32;
    let exp = (k + nd - 1).abs();
    if k >= 0 && exp < nd + 7 {
        // Plain integer: the digits and k zeros.
        text.extend(digits);
        for _ in 0..k {
            text.push(b'0');
        }
        return;
    }
    if k < 0 && (k > -7 || exp < 4) {
        let offset = nd + k;
        if offset <= 0 {
            text.extend(b"0.");
            for _ in 0..-offset {
                text.push(b'0');
            }
            text.extend(digits);
        } else {
            let offset = offset as usize;
            text.extend(&digits[..offset]);
            text.push(b'.');
            text.extend(&digits[offset..]);
        }
        return;
    }
    let digits = &digits[..digits.len().min(18 - negative as usize)];
    text.push(digits[0]);
    if digits.len() > 1 {
        text.push(b'.');
        text.extend(&digits[1..]);
    }
    text.push(b'e');
    text.push(if k + digits.len() as i32 - 1 < 0 {
        b'-'
    } else {
        b'+'
    });
    let mut itoa = itoa::Buffer::new();
    text.extend(itoa.format(exp).as_bytes());
}

/// Grisu2 (Florian Loitsch, "Printing Floating-Point Numbers Quickly and
/// Accurately with Integers", PLDI 2010), with the choices Redis's bundled
/// `fpconv` makes: which cached power is picked, how products round, and
/// how the last digit is nudged toward the value. Its digits are not
/// always the shortest (ryu's are), so matching Redis byte for byte needs
/// this very algorithm.
mod grisu {
    const FRACTION_MASK: u64 = 0x000F_FFFF_FFFF_FFFF;
    const HIDDEN_BIT: u64 = 0x0010_0000_0000_0000;
    const EXPONENT_BIAS: i32 = 1023 + 52;
    /// The cached powers bring the product's exponent into this window.
    const ALPHA: i32 = -60;
    const GAMMA: i32 = -32;
    const FIRST_POWER: i32 = -348;
    const POWER_STEP: i32 = 8;

    /// 10^k for k = -348, -340, ..., 340: the significand rounded to
    /// nearest to 64 bits (top bit set) and its binary exponent.
    const POWERS: [(u64, i32); 87] = [
        (0xfa8fd5a0081c0288, -1220),
        (0xbaaee17fa23ebf76, -1193),
        (0x8b16fb203055ac76, -1166),
        (0xcf42894a5dce35ea, -1140),
        (0x9a6bb0aa55653b2d, -1113),
        (0xe61acf033d1a45df, -1087),
        (0xab70fe17c79ac6ca, -1060),
        (0xff77b1fcbebcdc4f, -1034),
        (0xbe5691ef416bd60c, -1007),
        (0x8dd01fad907ffc3c, -980),
        (0xd3515c2831559a83, -954),
        (0x9d71ac8fada6c9b5, -927),
        (0xea9c227723ee8bcb, -901),
        (0xaecc49914078536d, -874),
        (0x823c12795db6ce57, -847),
        (0xc21094364dfb5637, -821),
        (0x9096ea6f3848984f, -794),
        (0xd77485cb25823ac7, -768),
        (0xa086cfcd97bf97f4, -741),
        (0xef340a98172aace5, -715),
        (0xb23867fb2a35b28e, -688),
        (0x84c8d4dfd2c63f3b, -661),
        (0xc5dd44271ad3cdba, -635),
        (0x936b9fcebb25c996, -608),
        (0xdbac6c247d62a584, -582),
        (0xa3ab66580d5fdaf6, -555),
        (0xf3e2f893dec3f126, -529),
        (0xb5b5ada8aaff80b8, -502),
        (0x87625f056c7c4a8b, -475),
        (0xc9bcff6034c13053, -449),
        (0x964e858c91ba2655, -422),
        (0xdff9772470297ebd, -396),
        (0xa6dfbd9fb8e5b88f, -369),
        (0xf8a95fcf88747d94, -343),
        (0xb94470938fa89bcf, -316),
        (0x8a08f0f8bf0f156b, -289),
        (0xcdb02555653131b6, -263),
        (0x993fe2c6d07b7fac, -236),
        (0xe45c10c42a2b3b06, -210),
        (0xaa242499697392d3, -183),
        (0xfd87b5f28300ca0e, -157),
        (0xbce5086492111aeb, -130),
        (0x8cbccc096f5088cc, -103),
        (0xd1b71758e219652c, -77),
        (0x9c40000000000000, -50),
        (0xe8d4a51000000000, -24),
        (0xad78ebc5ac620000, 3),
        (0x813f3978f8940984, 30),
        (0xc097ce7bc90715b3, 56),
        (0x8f7e32ce7bea5c70, 83),
        (0xd5d238a4abe98068, 109),
        (0x9f4f2726179a2245, 136),
        (0xed63a231d4c4fb27, 162),
        (0xb0de65388cc8ada8, 189),
        (0x83c7088e1aab65db, 216),
        (0xc45d1df942711d9a, 242),
        (0x924d692ca61be758, 269),
        (0xda01ee641a708dea, 295),
        (0xa26da3999aef774a, 322),
        (0xf209787bb47d6b85, 348),
        (0xb454e4a179dd1877, 375),
        (0x865b86925b9bc5c2, 402),
        (0xc83553c5c8965d3d, 428),
        (0x952ab45cfa97a0b3, 455),
        (0xde469fbd99a05fe3, 481),
        (0xa59bc234db398c25, 508),
        (0xf6c69a72a3989f5c, 534),
        (0xb7dcbf5354e9bece, 561),
        (0x88fcf317f22241e2, 588),
        (0xcc20ce9bd35c78a5, 614),
        (0x98165af37b2153df, 641),
        (0xe2a0b5dc971f303a, 667),
        (0xa8d9d1535ce3b396, 694),
        (0xfb9b7cd9a4a7443c, 720),
        (0xbb764c4ca7a44410, 747),
        (0x8bab8eefb6409c1a, 774),
        (0xd01fef10a657842c, 800),
        (0x9b10a4e5e9913129, 827),
        (0xe7109bfba19c0c9d, 853),
        (0xac2820d9623bf429, 880),
        (0x80444b5e7aa7cf85, 907),
        (0xbf21e44003acdd2d, 933),
        (0x8e679c2f5e44ff8f, 960),
        (0xd433179d9c8cb841, 986),
        (0x9e19db92b4e31ba9, 1013),
        (0xeb96bf6ebadf77d9, 1039),
        (0xaf87023b9bf0ee6b, 1066),
    ];

    /// A float as `f × 2^e` with a 64-bit significand.
    #[derive(Clone, Copy)]
    struct Fp {
        f: u64,
        e: i32,
    }

    impl Fp {
        /// The product, rounded to 64 bits (half up).
        fn times(self, other: Fp) -> Fp {
            let product = self.f as u128 * other.f as u128 + (1u128 << 63);
            Fp {
                f: (product >> 64) as u64,
                e: self.e + other.e + 64,
            }
        }
    }

    /// The cached power that brings a number with binary exponent `e` into
    /// [ALPHA, GAMMA], searched from the same first guess as fpconv's (two
    /// powers may fit; the guess decides which), and its decimal exponent.
    fn cached_power(e: i32) -> (Fp, i32) {
        let guess = (-(e + POWERS.len() as i32) as f64 * 0.301_029_995_663_981_14) as i32;
        let mut index = (guess - FIRST_POWER) / POWER_STEP;
        loop {
            let (f, power_e) = POWERS[index as usize];
            let current = e + power_e + 64;
            if current < ALPHA {
                index += 1;
            } else if current > GAMMA {
                index -= 1;
            } else {
                return (Fp { f, e: power_e }, FIRST_POWER + index * POWER_STEP);
            }
        }
    }

    /// Moves the last digit down while that brings the digits closer to
    /// the value and keeps them inside the boundaries.
    fn round_last(digits: &mut [u8], delta: u64, mut rest: u64, ten_kappa: u64, distance: u64) {
        let Some(last) = digits.last_mut() else {
            return;
        };
        while rest < distance
            && delta.wrapping_sub(rest) >= ten_kappa
            && (rest.wrapping_add(ten_kappa) < distance
                || distance.wrapping_sub(rest)
                    > rest.wrapping_add(ten_kappa).wrapping_sub(distance))
        {
            *last -= 1;
            rest = rest.wrapping_add(ten_kappa);
        }
    }

    /// The decimal digits (ASCII, into `digits`) and exponent `k` of a
    /// finite non-zero |value|: |value| ≈ digits × 10^k.
    pub(super) fn digits(value: f64, digits: &mut [u8; 18]) -> (usize, i32) {
        let bits = value.to_bits();
        let biased = ((bits >> 52) & 0x7FF) as i32;
        let mut w = if biased != 0 {
            Fp {
                f: (bits & FRACTION_MASK) + HIDDEN_BIT,
                e: biased - EXPONENT_BIAS,
            }
        } else {
            Fp {
                f: bits & FRACTION_MASK,
                e: 1 - EXPONENT_BIAS,
            }
        };
        // The boundaries halfway to the neighbouring doubles, normalised
        // (the lower one to the upper one's exponent).
        let mut upper = Fp {
            f: (w.f << 1) + 1,
            e: w.e - 1,
        };
        while upper.f & (HIDDEN_BIT << 1) == 0 {
            upper.f <<= 1;
            upper.e -= 1;
        }
        upper.f <<= 10;
        upper.e -= 10;
        let lower_shift = if w.f == HIDDEN_BIT { 2 } else { 1 };
        let mut lower = Fp {
            f: (w.f << lower_shift) - 1,
            e: w.e - lower_shift,
        };
        lower.f <<= lower.e - upper.e;
        lower.e = upper.e;
        while w.f & HIDDEN_BIT == 0 {
            w.f <<= 1;
            w.e -= 1;
        }
        w.f <<= 11;
        w.e -= 11;

        let (power, k) = cached_power(upper.e);
        let w = w.times(power);
        let mut upper = upper.times(power);
        let mut lower = lower.times(power);
        lower.f = lower.f.wrapping_add(1);
        upper.f = upper.f.wrapping_sub(1);
        let mut exponent = -k;

        // Digit generation: the integral part of `upper` first, then its
        // fraction, until what is left lies within the boundaries.
        let distance = upper.f.wrapping_sub(w.f);
        let mut delta = upper.f.wrapping_sub(lower.f);
        let shift = -upper.e;
        let one = 1u64 << shift;
        let mut integral = upper.f >> shift;
        let mut fraction = upper.f & (one - 1);
        let mut count = 0;
        let mut kappa = 10;
        let mut divisor = 1_000_000_000u64;
        while kappa > 0 {
            let digit = integral / divisor;
            if digit != 0 || count != 0 {
                digits[count] = b'0' + digit as u8;
                count += 1;
            }
            integral -= digit * divisor;
            kappa -= 1;
            let rest = (integral << shift).wrapping_add(fraction);
            if rest <= delta {
                exponent += kappa;
                round_last(
                    &mut digits[..count],
                    delta,
                    rest,
                    divisor << shift,
                    distance,
                );
                return (count, exponent);
            }
            divisor /= 10;
        }
        let mut unit = 10u64;
        loop {
            fraction = fraction.wrapping_mul(10);
            delta = delta.wrapping_mul(10);
            kappa -= 1;
            let digit = fraction >> shift;
            if digit != 0 || count != 0 {
                digits[count] = b'0' + digit as u8;
                count += 1;
            }
            fraction &= one - 1;
            if fraction < delta {
                exponent += kappa;
                round_last(
                    &mut digits[..count],
                    delta,
                    fraction,
                    one,
                    distance.wrapping_mul(unit),
                );
                return (count, exponent);
            }
            unit = unit.wrapping_mul(10);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::redis_double;

    /// Texts Redis 7.2 replies with (ZSCORE after ZADD of the value).
    #[test]
    fn doubles_read_as_redis_writes_them() {
        for (value, text) in [
            (1.5, "1.5"),
            (0.1, "0.1"),
            (-0.0, "-0"),
            (3.0, "3"),
            (1e17, "100000000000000000"),
            (1.5e-5, "0.000015"),
            (1e-7, "1e-7"),
            (7.2115e20, "721150000000000100000"),
            (1.2345678901234568e23, "123456789012345690000000"),
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
