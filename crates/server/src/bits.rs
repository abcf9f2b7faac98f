//! Bit-level arithmetic on Redis bitmaps, free of storage: counting and
//! finding bits, and reading and writing the integer fields of BITFIELD.
//!
//! Redis numbers bits from the most significant bit of the first byte, so
//! bit 0 is `0x80` of byte 0, and a bitfield is big-endian in that order
//! whatever its alignment.

/// Set bits in `bytes`. Whole 8-byte words go through `count_ones`, which
/// the compiler turns into a vectorised count: on a 100 MB value this is
/// several times faster than Redis's 32-bit table-free loop.
pub fn popcount(bytes: &[u8]) -> u64 {
    let (words, tail) = bytes.as_chunks::<8>();
    let mut total: u64 = words
        .iter()
        .map(|word| u64::from(u64::from_ne_bytes(*word).count_ones()))
        .sum();
    total += tail
        .iter()
        .map(|byte| u64::from(byte.count_ones()))
        .sum::<u64>();
    total
}

/// The position of the first bit equal to `bit` in `bytes` (Redis's
/// `redisBitpos`): looking for a 0 past the end finds the first bit after
/// it (the string counts as zero-padded), so a search for 0 never fails;
/// a search for 1 that finds none is -1.
pub fn first_bit(bytes: &[u8], bit: bool) -> i64 {
    // A byte with nothing to find: all zeros when looking for a 1, all
    // ones when looking for a 0.
    let skip: u8 = if bit { 0 } else { 0xff };
    let (words, _) = bytes.as_chunks::<8>();
    let skip_word = u64::from_ne_bytes([skip; 8]);
    let skipped_words = words
        .iter()
        .take_while(|word| u64::from_ne_bytes(**word) == skip_word)
        .count();
    let start = skipped_words * 8;
    match bytes[start..].iter().position(|&byte| byte != skip) {
        Some(i) => {
            let byte = bytes[start + i];
            let within = if bit {
                byte.leading_zeros()
            } else {
                (!byte).leading_zeros()
            };
            ((start + i) as i64) * 8 + i64::from(within)
        }
        None if bit => -1,
        None => bytes.len() as i64 * 8,
    }
}

/// A bitfield's integer type: `i1`..`i64` or `u1`..`u63`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldType {
    pub signed: bool,
    pub bits: u32,
}

impl FieldType {
    /// Parses `i16`, `u8`...; None for anything else (u64 included: its
    /// values could not all be replied as signed 64-bit integers).
    pub fn parse(arg: &[u8]) -> Option<FieldType> {
        let (&sign, digits) = arg.split_first()?;
        let signed = match sign {
            b'i' => true,
            b'u' => false,
            _ => return None,
        };
        let bits = crate::resp::parse_int(digits)?;
        let max = if signed { 64 } else { 63 };
        (1..=max).contains(&bits).then_some(FieldType {
            signed,
            bits: bits as u32,
        })
    }
}

/// The 9 bytes from `byte` on (fewer past the end read as zeros): enough
/// for any field of up to 64 bits starting in `byte`.
fn window(read: impl Fn(u64) -> u8, byte: u64) -> [u8; 9] {
    std::array::from_fn(|i| read(byte + i as u64))
}

/// Reads the unsigned field of `bits` bits at bit `offset`, the bytes
/// coming from `read` (which answers 0 past the end of the string).
pub fn get_unsigned(read: impl Fn(u64) -> u8, offset: u64, bits: u32) -> u64 {
    let bytes = window(read, offset / 8);
    // The 9 bytes as one big-endian 72-bit number; the field starts
    // `offset % 8` bits below its top.
    let wide = bytes
        .iter()
        .fold(0u128, |acc, &byte| acc << 8 | u128::from(byte));
    let shift = 72 - (offset % 8) as u32 - bits;
    ((wide >> shift) & ((1u128 << bits) - 1)) as u64
}

/// Reads a field as `field` says: signed fields are sign-extended.
pub fn get(read: impl Fn(u64) -> u8, offset: u64, field: FieldType) -> i64 {
    let raw = get_unsigned(read, offset, field.bits);
    if field.signed && field.bits < 64 && raw >> (field.bits - 1) & 1 == 1 {
        (raw | (u64::MAX << field.bits)) as i64
    } else {
        raw as i64
    }
}

/// Writes the low `bits` bits of `value` at bit `offset` of `bytes`, which
/// must hold that range.
pub fn set(bytes: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let bit = value >> (u64::from(bits) - 1 - j) & 1;
        let at = offset + j;
        let byte = &mut bytes[(at / 8) as usize];
        let mask = 0x80u8 >> (at % 8);
        if bit == 1 {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

/// What BITFIELD does when a SET or INCRBY leaves the type's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Modular arithmetic (two's complement for signed types).
    Wrap,
    /// Clamp to the type's minimum or maximum.
    Sat,
    /// Leave the field alone and reply nil.
    Fail,
}

/// The outcome of adding `incr` to a field's value: its new value, or None
/// when it overflows under `Overflow::Fail`.
pub fn add_unsigned(value: u64, incr: i64, bits: u32, overflow: Overflow) -> Option<u64> {
    // Redis's checkUnsignedBitfieldOverflow, its C conversions spelled out.
    let max = (1u64 << bits) - 1;
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = value.wrapping_neg() as i64;
    let wrapped = || value.wrapping_add(incr as u64) & max;
    if value > max || (incr > 0 && incr > max_incr) {
        match overflow {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(max),
            Overflow::Fail => None,
        }
    } else if incr < 0 && incr < min_incr {
        match overflow {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(0),
            Overflow::Fail => None,
        }
    } else {
        Some(value.wrapping_add(incr as u64))
    }
}

/// `add_unsigned` for signed fields.
pub fn add_signed(value: i64, incr: i64, bits: u32, overflow: Overflow) -> Option<i64> {
    // Redis's checkSignedBitfieldOverflow; maxincr and minincr may wrap, but
    // are only looked at once `value` is known to be in range.
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wrapped = || {
        let sum = (value as u64).wrapping_add(incr as u64);
        if bits == 64 {
            return sum as i64;
        }
        let high = u64::MAX << bits;
        if sum >> (bits - 1) & 1 == 1 {
            (sum | high) as i64
        } else {
            (sum & !high) as i64
        }
    };
    let over = value > max
        || (bits != 64 && incr > max_incr)
        || (value >= 0 && incr > 0 && incr > max_incr);
    let under = value < min
        || (bits != 64 && incr < min_incr)
        || (value < 0 && incr < 0 && incr < min_incr);
    if over || under {
        match overflow {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(if over { max } else { min }),
            Overflow::Fail => None,
        }
    } else {
        Some(value.wrapping_add(incr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &[u8]) -> impl Fn(u64) -> u8 + '_ {
        |i| bytes.get(i as usize).copied().unwrap_or(0)
    }

    #[test]
    fn popcount_counts_every_length_and_alignment() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 37 % 256) as u8).collect();
        for start in 0..9 {
            for end in start..data.len() {
                let slice = &data[start..end];
                let slow: u64 = slice.iter().map(|b| u64::from(b.count_ones())).sum();
                assert_eq!(popcount(slice), slow, "{start}..{end}");
            }
        }
    }

    #[test]
    fn first_bit_like_redis() {
        assert_eq!(first_bit(b"", true), -1);
        assert_eq!(first_bit(b"", false), 0);
        assert_eq!(first_bit(&[0xff, 0xf0, 0x00], false), 12);
        assert_eq!(first_bit(&[0xff; 20], false), 160);
        assert_eq!(first_bit(&[0; 20], true), -1);
        let mut long = vec![0u8; 33];
        long[31] = 0x10;
        assert_eq!(first_bit(&long, true), 31 * 8 + 3);
        long.fill(0xff);
        long[17] = 0xfe;
        assert_eq!(first_bit(&long, false), 17 * 8 + 7);
    }

    #[test]
    fn fields_read_and_write_big_endian_bit_order() {
        // Redis's own illustration: u5 23 at bit offset 7 of zeros.
        let mut bytes = [0u8; 2];
        set(&mut bytes, 7, 5, 23);
        assert_eq!(bytes, [0b0000_0001, 0b0111_0000]);
        assert_eq!(get_unsigned(reader(&bytes), 7, 5), 23);
        let i5 = FieldType {
            signed: true,
            bits: 5,
        };
        set(&mut bytes, 0, 5, (-3i64) as u64);
        assert_eq!(get(reader(&bytes), 0, i5), -3);
        // A 64-bit field at an odd offset spans 9 bytes.
        let mut wide = [0u8; 10];
        set(&mut wide, 3, 64, 0x8123_4567_89ab_cdef);
        let i64t = FieldType {
            signed: true,
            bits: 64,
        };
        assert_eq!(get(reader(&wide), 3, i64t) as u64, 0x8123_4567_89ab_cdef);
        // Past the end reads as zeros.
        assert_eq!(get_unsigned(reader(&[0xff]), 4, 8), 0xf0);
    }

    #[test]
    fn field_types() {
        assert_eq!(
            FieldType::parse(b"i64"),
            Some(FieldType {
                signed: true,
                bits: 64
            })
        );
        assert_eq!(
            FieldType::parse(b"u63"),
            Some(FieldType {
                signed: false,
                bits: 63
            })
        );
        for bad in [&b"u64"[..], b"i65", b"i0", b"x8", b"", b"i", b"u-1", b"i08"] {
            assert_eq!(FieldType::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn overflow_semantics() {
        assert_eq!(add_unsigned(250, 10, 8, Overflow::Wrap), Some(4));
        assert_eq!(add_unsigned(250, 10, 8, Overflow::Sat), Some(255));
        assert_eq!(add_unsigned(250, 10, 8, Overflow::Fail), None);
        assert_eq!(add_unsigned(5, -10, 8, Overflow::Sat), Some(0));
        assert_eq!(add_unsigned(5, -10, 8, Overflow::Wrap), Some(251));
        assert_eq!(add_signed(120, 10, 8, Overflow::Wrap), Some(-126));
        assert_eq!(add_signed(120, 10, 8, Overflow::Sat), Some(127));
        assert_eq!(add_signed(-120, -10, 8, Overflow::Sat), Some(-128));
        assert_eq!(add_signed(-120, -10, 8, Overflow::Fail), None);
        assert_eq!(add_signed(i64::MAX, 1, 64, Overflow::Wrap), Some(i64::MIN));
        assert_eq!(add_signed(i64::MAX, 1, 64, Overflow::Sat), Some(i64::MAX));
        // SET checks the value itself (increment 0).
        assert_eq!(add_signed(200, 0, 8, Overflow::Wrap), Some(-56));
        assert_eq!(add_unsigned(-1i64 as u64, 0, 8, Overflow::Sat), Some(255));
    }
}
