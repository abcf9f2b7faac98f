//! HyperLogLog, byte for byte in Redis's representation, so that a value
//! written by Redis reads correctly here and the reverse.
//!
//! A value is a 16-byte header and the registers:
//!
//! ```text
//! 0..4   "HYLL"
//! 4      encoding: 0 dense, 1 sparse
//! 5..8   zero
//! 8..16  cached cardinality, little-endian; bit 7 of byte 15 set: stale
//! 16..   registers
//! ```
//!
//! 16384 registers of 6 bits. Dense: packed from the least significant bit
//! of each byte up (register 0 is the low 6 bits of byte 0), 12288 bytes.
//! Sparse: run-length opcodes, `00xxxxxx` ZERO (1..64 zero registers),
//! `01xxxxxx yyyyyyyy` XZERO (1..16384 zero registers), `1vvvvvxx` VAL (1..4
//! registers of value 1..32). A new value is sparse; it turns dense, for
//! good, when a register needs a value over 32 or the sparse form would
//! outgrow `hll-sparse-max-bytes`. Editing the sparse form follows Redis's
//! steps exactly (split the opcode, then merge neighbouring VALs), because
//! the bytes, not just the registers, must match.
//!
//! The estimate is Ertl's improved estimator ("New cardinality estimation
//! algorithms for HyperLogLog sketches", arXiv:1702.01284), as Redis 7.0
//! computes it, so counts match Redis's to the unit.

/// Header bytes.
pub const HEADER: usize = 16;
/// Index bits: 2^14 registers.
const P: u32 = 14;
pub const REGISTERS: usize = 1 << P;
/// Hash bits left for the run of zeros.
const Q: usize = 64 - P as usize;
const REGISTER_MAX: u8 = 63;
pub const DENSE_SIZE: usize = HEADER + (REGISTERS * 6).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// Redis's `hll-sparse-max-bytes` default.
pub const DEFAULT_SPARSE_MAX_BYTES: usize = 3000;
/// Redis's hash seed for HyperLogLog elements.
const SEED: u64 = 0xadc8_3b19;

const SPARSE_VAL_MAX_VALUE: u8 = 32;
const SPARSE_VAL_MAX_LEN: usize = 4;
const SPARSE_ZERO_MAX_LEN: usize = 64;
const SPARSE_XZERO_MAX_LEN: usize = 16384;
/// 0.5 / ln 2, the estimator's constant for an infinite number of registers.
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

/// A value that is not a HyperLogLog at all (Redis answers WRONGTYPE).
#[derive(Debug, PartialEq, Eq)]
pub struct NotHll;

/// A HyperLogLog whose registers do not decode (Redis answers INVALIDOBJ).
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt;

/// Redis's MurmurHash64A (endian-neutral: words read little-endian).
pub fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let (words, tail) = data.as_chunks::<8>();
    for word in words {
        let mut k = u64::from_le_bytes(*word);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    if !tail.is_empty() {
        for (i, &byte) in tail.iter().enumerate() {
            h ^= u64::from(byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element goes to and the value it offers: one more
/// than the zeros below the lowest set bit of the hash above the index.
pub fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    // The sentinel bit caps the count at Q + 1.
    let rest = hash >> P | 1 << Q;
    (index, rest.trailing_zeros() as u8 + 1)
}

/// A new, empty HyperLogLog (sparse: one XZERO covering every register).
pub fn new_sparse() -> Vec<u8> {
    let mut hll = header(SPARSE);
    let mut left = REGISTERS;
    while left > 0 {
        let run = left.min(SPARSE_XZERO_MAX_LEN);
        hll.extend_from_slice(&xzero(run));
        left -= run;
    }
    hll
}

fn header(encoding: u8) -> Vec<u8> {
    let mut hll = Vec::with_capacity(DENSE_SIZE);
    hll.extend_from_slice(b"HYLL");
    hll.extend_from_slice(&[encoding, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    hll
}

/// Checks that a string value is a HyperLogLog (Redis's
/// `isHLLObjectOrReply`): a header, a known encoding, and the exact size
/// if dense. The sparse opcodes are checked as they are read.
pub fn validate(value: &[u8]) -> Result<(), NotHll> {
    if value.len() < HEADER || &value[..4] != b"HYLL" || value[4] > SPARSE {
        return Err(NotHll);
    }
    if value[4] == DENSE && value.len() != DENSE_SIZE {
        return Err(NotHll);
    }
    Ok(())
}

pub fn is_dense(hll: &[u8]) -> bool {
    hll[4] == DENSE
}

/// The cached cardinality, if it is still valid.
pub fn cached_count(hll: &[u8]) -> Option<u64> {
    let card = u64::from_le_bytes(hll[8..16].try_into().expect("8 bytes"));
    (card >> 63 == 0).then_some(card)
}

/// The header bytes that cache `count` (bytes 8..16).
pub fn cache_bytes(count: u64) -> [u8; 8] {
    count.to_le_bytes()
}

pub fn invalidate_cache(hll: &mut [u8]) {
    hll[15] |= 0x80;
}

// Sparse opcodes.
fn is_zero(op: u8) -> bool {
    op & 0xc0 == 0
}
fn is_xzero(op: u8) -> bool {
    op & 0xc0 == 0x40
}
fn is_val(op: u8) -> bool {
    op & 0x80 != 0
}
fn zero_len(op: u8) -> usize {
    usize::from(op & 0x3f) + 1
}
fn xzero_len(op: u8, next: u8) -> usize {
    (usize::from(op & 0x3f) << 8 | usize::from(next)) + 1
}
fn val_value(op: u8) -> u8 {
    (op >> 2 & 0x1f) + 1
}
fn val_len(op: u8) -> usize {
    usize::from(op & 0x3) + 1
}
fn val(value: u8, len: usize) -> u8 {
    (value - 1) << 2 | (len as u8 - 1) | 0x80
}
fn zero(len: usize) -> u8 {
    (len - 1) as u8
}
fn xzero(len: usize) -> [u8; 2] {
    let l = len - 1;
    [(l >> 8) as u8 | 0x40, (l & 0xff) as u8]
}

/// One sparse opcode at `p`: (registers covered, bytes, value if VAL). An
/// XZERO cut short by the end of the value reads its second byte as 0,
/// like Redis reading the string's terminator.
fn opcode(hll: &[u8], p: usize) -> (usize, usize, Option<u8>) {
    let op = hll[p];
    if is_zero(op) {
        (zero_len(op), 1, None)
    } else if is_xzero(op) {
        let next = hll.get(p + 1).copied().unwrap_or(0);
        (xzero_len(op, next), 2, None)
    } else {
        (val_len(op), 1, Some(val_value(op)))
    }
}

/// Register `index` of dense registers. The last register's neighbour
/// byte is past the array; its bits would be masked off anyway.
fn dense_get(registers: &[u8], index: usize) -> u8 {
    let byte = index * 6 / 8;
    let fb = (index * 6) & 7;
    let b0 = u32::from(registers[byte]);
    let b1 = u32::from(registers.get(byte + 1).copied().unwrap_or(0));
    ((b0 >> fb | b1 << (8 - fb)) & u32::from(REGISTER_MAX)) as u8
}

fn dense_put(registers: &mut [u8], index: usize, value: u8) {
    let byte = index * 6 / 8;
    let fb = (index * 6) & 7;
    let value = u32::from(value);
    let max = u32::from(REGISTER_MAX);
    registers[byte] &= !(max << fb) as u8;
    registers[byte] |= (value << fb) as u8;
    if let Some(next) = registers.get_mut(byte + 1) {
        *next &= !(max >> (8 - fb)) as u8;
        *next |= (value >> (8 - fb)) as u8;
    }
}

/// Raises dense register `index` to `count`; true if it grew.
fn dense_set(registers: &mut [u8], index: usize, count: u8) -> bool {
    if count > dense_get(registers, index) {
        dense_put(registers, index, count);
        true
    } else {
        false
    }
}

/// Adds an element; true if a register grew (the estimate may change).
pub fn add(hll: &mut Vec<u8>, element: &[u8], sparse_max: usize) -> Result<bool, Corrupt> {
    let (index, count) = pattern(element);
    set_register(hll, index, count, sparse_max)
}

/// Raises register `index` to `count` in either encoding; true if it grew.
pub fn set_register(
    hll: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max: usize,
) -> Result<bool, Corrupt> {
    match hll[4] {
        DENSE => Ok(dense_set(&mut hll[HEADER..], index, count)),
        SPARSE => sparse_set(hll, index, count, sparse_max),
        _ => Err(Corrupt),
    }
}

/// Redis's `hllSparseSet`: finds the opcode covering `index`, splits it
/// around the new VAL, merges equal neighbouring VALs, or turns the whole
/// value dense when the sparse form cannot hold the change.
fn sparse_set(
    hll: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max: usize,
) -> Result<bool, Corrupt> {
    if count > SPARSE_VAL_MAX_VALUE {
        return promote(hll, index, count);
    }
    // Step 1: the opcode covering `index`, the first register it covers,
    // and the opcode before it.
    let end = hll.len();
    let mut p = HEADER;
    let mut first = 0;
    let mut span = 0;
    let mut prev = None;
    while p < end {
        let (covers, bytes, _) = opcode(hll, p);
        span = covers;
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += bytes;
        first += span;
    }
    if span == 0 || p >= end {
        return Err(Corrupt);
    }
    let (runlen, oplen, value) = opcode(hll, p);
    if p + oplen > end {
        return Err(Corrupt);
    }
    // Step 2: the cases that need no split: a VAL already as high, a VAL
    // or ZERO of one register.
    if let Some(old) = value {
        if old >= count {
            return Ok(false);
        }
    }
    if runlen == 1 && (value.is_some() || is_zero(hll[p])) {
        hll[p] = val(count, 1);
        merge_neighbours(hll, prev);
        return Ok(true);
    }
    // The general case: the opcode becomes up to three (the worst, an
    // XZERO split in the middle: XZERO VAL XZERO, 5 bytes).
    let last = first + span - 1;
    let mut seq: smallvec::SmallVec<[u8; 5]> = smallvec::SmallVec::new();
    let zeros = |seq: &mut smallvec::SmallVec<[u8; 5]>, len: usize| {
        if len > SPARSE_ZERO_MAX_LEN {
            seq.extend_from_slice(&xzero(len));
        } else {
            seq.push(zero(len));
        }
    };
    match value {
        None => {
            if index != first {
                zeros(&mut seq, index - first);
            }
            seq.push(val(count, 1));
            if index != last {
                zeros(&mut seq, last - index);
            }
        }
        Some(current) => {
            if index != first {
                seq.push(val(current, index - first));
            }
            seq.push(val(count, 1));
            if index != last {
                seq.push(val(current, last - index));
            }
        }
    }
    // Step 3: put the new sequence in place of the old opcode, unless the
    // value would outgrow the sparse limit.
    if seq.len() > oplen && hll.len() + seq.len() - oplen > sparse_max {
        return promote(hll, index, count);
    }
    hll.splice(p..p + oplen, seq);
    merge_neighbours(hll, prev);
    Ok(true)
}

/// Step 4 of `sparse_set`: from the opcode before the change, looks at up
/// to 5 opcodes and merges adjacent VALs of equal value while their run
/// fits one opcode; then marks the cached count stale.
fn merge_neighbours(hll: &mut Vec<u8>, prev: Option<usize>) {
    let mut p = prev.unwrap_or(HEADER);
    let mut scan = 5;
    while p < hll.len() && scan > 0 {
        scan -= 1;
        let op = hll[p];
        if is_xzero(op) {
            p += 2;
            continue;
        }
        if is_zero(op) {
            p += 1;
            continue;
        }
        if let Some(&next) = hll.get(p + 1) {
            if is_val(next) && val_value(op) == val_value(next) {
                let len = val_len(op) + val_len(next);
                if len <= SPARSE_VAL_MAX_LEN {
                    hll[p + 1] = val(val_value(op), len);
                    hll.remove(p);
                    // Try the merged opcode against the one after it.
                    continue;
                }
            }
        }
        p += 1;
    }
    invalidate_cache(hll);
}

/// Turns the value dense, then sets the register (which must grow).
fn promote(hll: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    to_dense(hll)?;
    let grew = dense_set(&mut hll[HEADER..], index, count);
    debug_assert!(grew, "a register that forced a promotion must grow");
    Ok(grew)
}

/// Converts a sparse value to dense (the header, cached count included,
/// carries over); false if it was dense already.
pub fn to_dense(hll: &mut Vec<u8>) -> Result<bool, Corrupt> {
    if hll[4] == DENSE {
        return Ok(false);
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..HEADER].copy_from_slice(&hll[..HEADER]);
    dense[4] = DENSE;
    let registers = &mut dense[HEADER..];
    let mut idx = 0;
    let mut p = HEADER;
    while p < hll.len() {
        let (runlen, bytes, value) = opcode(hll, p);
        p += bytes;
        match value {
            None => idx += runlen,
            Some(value) => {
                if idx + runlen > REGISTERS {
                    break;
                }
                for _ in 0..runlen {
                    dense_put(registers, idx, value);
                    idx += 1;
                }
            }
        }
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    *hll = dense;
    Ok(true)
}

/// How many registers hold each value (0..64).
type Histogram = [u32; 64];

fn histogram(hll: &[u8]) -> Result<Histogram, Corrupt> {
    let mut histogram = [0u32; 64];
    let registers = &hll[HEADER..];
    if hll[4] == DENSE {
        // 4 registers in every 3 bytes.
        for bytes in registers.as_chunks::<3>().0 {
            let word = u32::from(bytes[0]) | u32::from(bytes[1]) << 8 | u32::from(bytes[2]) << 16;
            for shift in [0, 6, 12, 18] {
                histogram[(word >> shift & 63) as usize] += 1;
            }
        }
        return Ok(histogram);
    }
    let mut idx = 0;
    let mut p = HEADER;
    while p < hll.len() {
        let (runlen, bytes, value) = opcode(hll, p);
        p += bytes;
        idx += runlen;
        histogram[usize::from(value.unwrap_or(0))] += runlen as u32;
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    Ok(histogram)
}

/// The estimated cardinality of a HyperLogLog value (ignoring its cache).
pub fn count(hll: &[u8]) -> Result<u64, Corrupt> {
    Ok(estimate(&histogram(hll)?))
}

/// The estimated cardinality of plain registers (one byte each), such as
/// `merge` builds.
pub fn count_registers(registers: &[u8; REGISTERS]) -> u64 {
    let mut histogram = [0u32; 64];
    for &register in registers {
        histogram[usize::from(register & 63)] += 1;
    }
    estimate(&histogram)
}

/// Raises each of `max` to the matching register of `hll` (PFCOUNT of
/// several keys, PFMERGE).
pub fn merge(max: &mut [u8; REGISTERS], hll: &[u8]) -> Result<(), Corrupt> {
    if hll[4] == DENSE {
        let registers = &hll[HEADER..];
        for (i, slot) in max.iter_mut().enumerate() {
            *slot = (*slot).max(dense_get(registers, i));
        }
        return Ok(());
    }
    let mut i = 0;
    let mut p = HEADER;
    while p < hll.len() {
        let (runlen, bytes, value) = opcode(hll, p);
        p += bytes;
        match value {
            None => i += runlen,
            Some(value) => {
                if i + runlen > REGISTERS {
                    break;
                }
                for slot in &mut max[i..i + runlen] {
                    *slot = (*slot).max(value);
                }
                i += runlen;
            }
        }
    }
    if i != REGISTERS {
        return Err(Corrupt);
    }
    Ok(())
}

/// Every register's value (PFDEBUG GETREG), from a dense value.
pub fn dense_registers(hll: &[u8]) -> Vec<u8> {
    let registers = &hll[HEADER..];
    (0..REGISTERS).map(|i| dense_get(registers, i)).collect()
}

/// The sparse opcodes spelled out (PFDEBUG DECODE): `z:3 Z:100 v:2,1`.
pub fn decode_sparse(hll: &[u8]) -> String {
    let mut words = Vec::new();
    let mut p = HEADER;
    while p < hll.len() {
        let (runlen, bytes, value) = opcode(hll, p);
        words.push(match value {
            Some(value) => format!("v:{value},{runlen}"),
            None if bytes == 1 => format!("z:{runlen}"),
            None => format!("Z:{runlen}"),
        });
        p += bytes;
    }
    words.join(" ")
}

/// Ertl's sigma function.
fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if before == z {
            return z;
        }
    }
}

/// Ertl's tau function.
fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if before == z {
            return z / 3.0;
        }
    }
}

/// The improved estimator over a register histogram, in Redis's order of
/// floating-point operations.
fn estimate(histogram: &Histogram) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(histogram[Q + 1])) / m);
    for j in (1..=Q).rev() {
        z += f64::from(histogram[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// PFSELFTEST: dense registers keep what is stored and leave their
/// neighbours alone; sparse and dense agree; the error stays within six
/// standard errors up to ten million elements.
pub fn self_test(sparse_max: usize) -> Result<(), String> {
    use rand::Rng;
    let mut rng = rand::rng();
    let mut dense = header(DENSE);
    dense.resize(DENSE_SIZE, 0);
    let mut expected = vec![0u8; REGISTERS];
    for _ in 0..1000 {
        for (i, slot) in expected.iter_mut().enumerate() {
            *slot = rng.random::<u8>() & REGISTER_MAX;
            dense_put(&mut dense[HEADER..], i, *slot);
        }
        for (i, &want) in expected.iter().enumerate() {
            let got = dense_get(&dense[HEADER..], i);
            if got != want {
                return Err(format!(
                    "TESTFAILED Register {i} should be {want} but is {got}"
                ));
            }
        }
    }
    dense[HEADER..].fill(0);
    let mut sparse = new_sparse();
    let relative_error = 1.04 / (REGISTERS as f64).sqrt();
    let mut checkpoint: u64 = 1;
    let seed: u64 = rng.random();
    for j in 1..=10_000_000u64 {
        let element = (j ^ seed).to_ne_bytes();
        let (index, count) = pattern(&element);
        dense_set(&mut dense[HEADER..], index, count);
        set_register(&mut sparse, index, count, sparse_max)
            .map_err(|_| "TESTFAILED sparse HLL corrupted".to_string())?;
        if j != checkpoint {
            continue;
        }
        if (j as usize) < sparse_max / 2 && is_dense(&sparse) {
            return Err("TESTFAILED sparse encoding not used".into());
        }
        let dense_count = count_or_zero(&dense);
        if dense_count != count_or_zero(&sparse) {
            return Err("TESTFAILED dense/sparse disagree".into());
        }
        let error = checkpoint.abs_diff(dense_count);
        // Collisions make cardinality 10 now and then much further off.
        let max_error = if j == 10 {
            1
        } else {
            (relative_error * 6.0 * checkpoint as f64).ceil() as u64
        };
        if error > max_error {
            return Err(format!(
                "TESTFAILED Too big error. card:{checkpoint} abserr:{error}"
            ));
        }
        checkpoint *= 10;
    }
    Ok(())
}

fn count_or_zero(hll: &[u8]) -> u64 {
    count(hll).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: u64, sparse_max: usize) -> Vec<u8> {
        let mut hll = new_sparse();
        for i in 0..n {
            add(&mut hll, format!("element:{i}").as_bytes(), sparse_max).unwrap();
        }
        hll
    }

    #[test]
    fn hash_matches_redis() {
        // Registers and values Redis 7.0.15 gave these elements (PFADD into
        // an empty key, then PFDEBUG DECODE).
        assert_eq!(pattern(b"a"), (12711, 2));
        assert_eq!(pattern(b"hello"), (9216, 1));
        assert_eq!(pattern(b""), (5938, 2));
        assert_eq!(pattern(b"foobarbaz123"), (15302, 1));
        // And the bytes of PFADD x a b c.
        let mut hll = new_sparse();
        for element in [b"a", b"b", b"c"] {
            add(&mut hll, element, DEFAULT_SPARSE_MAX_BYTES).unwrap();
        }
        assert_eq!(
            hll,
            b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80\x60\xf3\x80\x50\xb1\x84\x4b\xfb\x80\x42\x5a"
        );
    }

    #[test]
    fn new_value_is_two_xzeros() {
        let hll = new_sparse();
        assert_eq!(&hll[..], b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff");
        assert_eq!(count(&hll), Ok(0));
        assert_eq!(decode_sparse(&hll), "Z:16384");
    }

    #[test]
    fn estimate_stays_within_error_bounds() {
        // The standard error is 0.81%; allow five of them.
        for n in [1u64, 10, 100, 1000, 10_000, 100_000, 1_000_000] {
            let hll = filled(n, DEFAULT_SPARSE_MAX_BYTES);
            let estimate = count(&hll).unwrap();
            let bound = (n as f64 * 0.0405).max(1.0);
            assert!(
                (estimate as f64 - n as f64).abs() <= bound,
                "n {n}: estimate {estimate}"
            );
        }
    }

    #[test]
    fn sparse_and_dense_agree_and_convert() {
        for n in [0u64, 1, 5, 50, 300, 2000] {
            // A huge sparse limit keeps it sparse throughout.
            let sparse = filled(n, usize::MAX);
            assert!(!is_dense(&sparse));
            let mut converted = sparse.clone();
            assert_eq!(to_dense(&mut converted), Ok(true));
            assert_eq!(converted.len(), DENSE_SIZE);
            let mut dense = header(DENSE);
            dense.resize(DENSE_SIZE, 0);
            for i in 0..n {
                add(&mut dense, format!("element:{i}").as_bytes(), 0).unwrap();
            }
            // The same registers either way (the headers differ only in
            // the stale cache flag).
            assert_eq!(converted[HEADER..], dense[HEADER..], "n {n}");
            assert_eq!(count(&sparse), count(&dense));
            let mut max = [0u8; REGISTERS];
            merge(&mut max, &sparse).unwrap();
            assert_eq!(count_registers(&max), count(&dense).unwrap());
        }
    }

    #[test]
    fn sparse_promotes_past_the_limit() {
        let mut hll = new_sparse();
        let mut promoted_at = None;
        for i in 0..5000u64 {
            add(&mut hll, &i.to_le_bytes(), DEFAULT_SPARSE_MAX_BYTES).unwrap();
            if is_dense(&hll) {
                promoted_at = Some(i);
                break;
            }
            assert!(hll.len() <= DEFAULT_SPARSE_MAX_BYTES);
        }
        assert!(promoted_at.is_some_and(|i| i > 500), "{promoted_at:?}");
        assert_eq!(hll.len(), DENSE_SIZE);
    }

    #[test]
    fn sparse_runs_merge_like_redis() {
        // Registers 0 and 1 set to the same value become one VAL of 2.
        let mut hll = new_sparse();
        set_register(&mut hll, 0, 3, 3000).unwrap();
        set_register(&mut hll, 1, 3, 3000).unwrap();
        assert_eq!(decode_sparse(&hll), "v:3,2 Z:16382");
        set_register(&mut hll, 100, 2, 3000).unwrap();
        assert_eq!(decode_sparse(&hll), "v:3,2 Z:98 v:2,1 Z:16283");
        set_register(&mut hll, 5, 40, 3000).unwrap();
        assert!(is_dense(&hll));
    }

    #[test]
    fn corrupt_values_are_detected() {
        let mut hll = filled(3, DEFAULT_SPARSE_MAX_BYTES);
        hll.extend_from_slice(b"hello");
        assert_eq!(count(&hll), Err(Corrupt));
        assert_eq!(validate(b"HYLL"), Err(NotHll));
        let mut bad = new_sparse();
        bad[4] = b'x';
        assert_eq!(validate(&bad), Err(NotHll));
        bad[4] = 0;
        assert_eq!(validate(&bad), Err(NotHll));
    }

    #[test]
    fn self_test_passes() {
        self_test(DEFAULT_SPARSE_MAX_BYTES).unwrap();
    }
}
