//! Bitmap commands over string values: SETBIT GETBIT BITCOUNT BITPOS
//! BITOP BITFIELD BITFIELD_RO, with Redis 7.0's replies and errors.
//!
//! Reads (GETBIT, BITCOUNT, BITPOS, BITFIELD_RO) work on the stored value
//! in place, never a copy. Writes compute a [`Patch`] from the current
//! bytes and hand it to `write_patch`, the one place that stores it.

use std::sync::atomic::Ordering;

use super::string_patch::{write_patch, Patch};
use super::{
    err, int_arg, is, CmdError, CmdResult, CommandSpec, Ctx, Group, FAST, READONLY, SYNTAX, WRITE,
    WRONGTYPE,
};
use crate::bits::{self, FieldType, Overflow};
use crate::keyspace::value::{Kind, Meta, StringValue};
use crate::notify;
use crate::resp::{parse_int, Args};

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("bitmap");
    let one = (1, 1, 1);
    vec![
        g.command(
            "setbit",
            4,
            WRITE,
            one,
            setbit,
            "Sets or clears the bit at offset of the string value.",
        ),
        g.command(
            "getbit",
            3,
            READONLY | FAST,
            one,
            getbit,
            "Returns a bit value by offset.",
        ),
        g.command(
            "bitcount",
            -2,
            READONLY,
            one,
            bitcount,
            "Counts the number of set bits (population counting) in a string.",
        ),
        g.command(
            "bitpos",
            -3,
            READONLY,
            one,
            bitpos,
            "Finds the first set (1) or clear (0) bit in a string.",
        ),
        g.command(
            "bitop",
            -4,
            WRITE,
            (2, -1, 1),
            bitop,
            "Performs bitwise operations on multiple strings, and stores the result.",
        ),
        g.command(
            "bitfield",
            -2,
            WRITE,
            one,
            bitfield,
            "Performs arbitrary bitfield integer operations on strings.",
        ),
        g.command(
            "bitfield_ro",
            -2,
            READONLY | FAST,
            one,
            bitfield_ro,
            "Performs arbitrary read-only bitfield integer operations on strings.",
        ),
    ]
}

/// Runs `f` on a string value's bytes as a client sees them, borrowing the
/// stored payload (an integer-encoded value is spelled into a small
/// buffer); another type is WRONGTYPE.
fn with_bytes<R>(meta: Meta, payload: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<R, CmdError> {
    if meta.kind() != Kind::String {
        return Err(err(WRONGTYPE));
    }
    Ok(match StringValue::from_payload(meta, payload) {
        StringValue::Raw(bytes) => f(bytes),
        StringValue::Int(n) => f(itoa::Buffer::new().format(n).as_bytes()),
    })
}

/// A bit offset argument (Redis's `getBitOffsetFromArgument`): not
/// negative, and its byte below `proto-max-bulk-len`. `hash_bits`: the
/// BITFIELD form `#N` means field N of that width.
fn bit_offset(ctx: &Ctx, arg: &[u8], hash_bits: Option<u32>) -> Result<u64, CmdError> {
    let invalid = || err("ERR bit offset is not an integer or out of range");
    let (digits, multiplier) = match (arg.first(), hash_bits) {
        (Some(b'#'), Some(bits)) => (&arg[1..], i64::from(bits)),
        _ => (arg, 1),
    };
    // Redis multiplies in C, wrapping; a wrapped product is caught below
    // (or, like Redis, taken as the offset it wrapped to).
    let offset = parse_int(digits)
        .ok_or_else(invalid)?
        .wrapping_mul(multiplier);
    // A group's apply takes the default limit: every member must accept
    // or refuse an offset alike, whatever its own setting.
    let max_bulk = if ctx.session.applying() {
        crate::resp::parse::DEFAULT_MAX_BULK_BYTES as u64
    } else {
        ctx.shared
            .runtime
            .proto_max_bulk_len
            .load(Ordering::Relaxed) as u64
    };
    if offset < 0 || (offset >> 3) as u64 >= max_bulk {
        return Err(invalid());
    }
    Ok(offset as u64)
}

/// The change SETBIT makes to `current` (None: none at all), and the bit's
/// previous value. `exists`: the key is there (an absent key is always
/// created).
fn setbit_patch(current: &[u8], exists: bool, offset: u64, on: bool) -> (bool, Option<Patch>) {
    let byte = (offset / 8) as usize;
    let mask = 0x80u8 >> (offset % 8);
    let old_byte = current.get(byte).copied().unwrap_or(0);
    let old = old_byte & mask != 0;
    let grows = byte >= current.len();
    if exists && !grows && old == on {
        return (old, None);
    }
    let new_byte = if on {
        old_byte | mask
    } else {
        old_byte & !mask
    };
    let patch = Patch {
        offset: byte,
        bytes: vec![new_byte],
        min_len: byte + 1,
    };
    (old, Some(patch))
}

fn setbit(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let offset = bit_offset(ctx, args.get(2), None)?;
    let on = match parse_int(args.get(3)) {
        Some(0) => false,
        Some(1) => true,
        _ => return Err(err("ERR bit is not an integer or out of range")),
    };
    // The bit's old value, and whether the command changed the value.
    let (old, changed) = ctx.write(&[key], false, |txn, db, now| {
        // Within the value: the bit's byte read and changed where it lies,
        // one 8-byte store, however large the bitmap.
        let byte = (offset / 8) as usize;
        let in_place = txn.patch_in_place(db, key, now, byte, 1, |current| {
            match setbit_patch(current, true, offset % 8, on) {
                (old, Some(patch)) => ((old, true), Some(patch.bytes)),
                (old, None) => ((old, false), None),
            }
        })?;
        if let Some(outcome) = in_place {
            return Ok(outcome);
        }
        let stored = txn.get(db, key, now)?;
        let (old, patch) = match &stored {
            Some(s) => with_bytes(s.meta, s.payload(), |bytes| {
                setbit_patch(bytes, true, offset, on)
            })?,
            None => setbit_patch(&[], false, offset, on),
        };
        let changed = patch.is_some();
        if let Some(patch) = patch {
            write_patch(txn, db, key, stored.as_ref(), &patch)?;
        }
        Ok((old, changed))
    })?;
    // As Redis: only a SETBIT that created, grew or flipped.
    if changed {
        ctx.notify(notify::STRING, "setbit", key);
    }
    ctx.out.int(i64::from(old));
    Ok(())
}

fn getbit(ctx: &mut Ctx, args: Args) -> CmdResult {
    let offset = bit_offset(ctx, args.get(2), None)?;
    let bit = ctx.read(args.get(1), |meta, payload| {
        with_bytes(meta, payload, |bytes| {
            let byte = bytes.get((offset / 8) as usize).copied().unwrap_or(0);
            byte & (0x80 >> (offset % 8)) != 0
        })
    })?;
    ctx.out.int(i64::from(bit.unwrap_or(false)));
    Ok(())
}

/// BIT or BYTE (Redis's range unit); anything else is a syntax error.
fn bit_unit(arg: &[u8]) -> Result<bool, CmdError> {
    if is(arg, "bit") {
        Ok(true)
    } else if is(arg, "byte") {
        Ok(false)
    } else {
        Err(err(SYNTAX))
    }
}

/// A range normalised as Redis does for BITCOUNT and BITPOS: negative
/// indexes from the end, clamped to the string; in BIT units the byte
/// range plus masks of the first and last byte's bits outside it.
struct Range {
    start: i64,
    end: i64,
    /// Bits of the first byte before the range.
    first_mask: u8,
    /// Bits of the last byte after the range.
    last_mask: u8,
}

fn normalise(mut start: i64, mut end: i64, len: usize, bit_unit: bool) -> Range {
    let mut total = len as i64;
    if bit_unit {
        total <<= 3;
    }
    if start < 0 {
        start += total;
    }
    if end < 0 {
        end += total;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= total {
        end = total - 1;
    }
    let (mut first_mask, mut last_mask) = (0, 0);
    if bit_unit && start <= end {
        first_mask = !((1u32 << (8 - (start & 7))) - 1) as u8;
        last_mask = ((1u32 << (7 - (end & 7))) - 1) as u8;
        start >>= 3;
        end >>= 3;
    }
    Range {
        start,
        end,
        first_mask,
        last_mask,
    }
}

fn bitcount(ctx: &mut Ctx, args: Args) -> CmdResult {
    let count = ctx.read(args.get(1), |meta, payload| {
        with_bytes(meta, payload, |bytes| count_in(bytes, &args))?
    })?;
    ctx.out.int(count.unwrap_or(0));
    Ok(())
}

/// BITCOUNT of a live string (Redis parses the range only then).
fn count_in(bytes: &[u8], args: &Args) -> Result<i64, CmdError> {
    let range = match args.len() {
        2 => Range {
            start: 0,
            end: bytes.len() as i64 - 1,
            first_mask: 0,
            last_mask: 0,
        },
        4 | 5 => {
            let start = int_arg(args.get(2))?;
            let end = int_arg(args.get(3))?;
            if start < 0 && end < 0 && start > end {
                return Ok(0);
            }
            let bit_unit = args.len() == 5 && bit_unit(args.get(4))?;
            normalise(start, end, bytes.len(), bit_unit)
        }
        _ => return Err(err(SYNTAX)),
    };
    if range.start > range.end {
        return Ok(0);
    }
    let (start, end) = (range.start as usize, range.end as usize);
    let mut count = bits::popcount(&bytes[start..=end]);
    // Bits of the edge bytes outside a BIT range were counted: take them
    // back.
    count -= u64::from((bytes[start] & range.first_mask).count_ones());
    count -= u64::from((bytes[end] & range.last_mask).count_ones());
    Ok(count as i64)
}

fn bitpos(ctx: &mut Ctx, args: Args) -> CmdResult {
    let bit = match int_arg(args.get(2))? {
        0 => false,
        1 => true,
        _ => return Err(err("ERR The bit argument must be 1 or 0.")),
    };
    let pos = ctx.read(args.get(1), |meta, payload| {
        with_bytes(meta, payload, |bytes| position_in(bytes, bit, &args))?
    })?;
    // An absent key is an endless run of zeros.
    ctx.out.int(pos.unwrap_or(if bit { -1 } else { 0 }));
    Ok(())
}

/// BITPOS of a live string, in Redis's steps: a partial first byte, the
/// whole bytes, a partial last byte.
fn position_in(bytes: &[u8], bit: bool, args: &Args) -> Result<i64, CmdError> {
    let mut end_given = false;
    let range = match args.len() {
        3 => Range {
            start: 0,
            end: bytes.len() as i64 - 1,
            first_mask: 0,
            last_mask: 0,
        },
        4..=6 => {
            let start = int_arg(args.get(3))?;
            let bit_unit = args.len() == 6 && bit_unit(args.get(5))?;
            let end = if args.len() >= 5 {
                end_given = true;
                int_arg(args.get(4))?
            } else if bit_unit {
                ((bytes.len() as i64) << 3) + 7
            } else {
                bytes.len() as i64 - 1
            };
            normalise(start, end, bytes.len(), bit_unit)
        }
        _ => return Err(err(SYNTAX)),
    };
    if range.start > range.end {
        return Ok(-1);
    }
    let (first_mask, last_mask) = (range.first_mask, range.last_mask);
    // Masked edge bytes: the bits outside the range can never match.
    let masked = |byte: u8, mask: u8| if bit { byte & !mask } else { byte | mask };
    let end = range.end as usize;
    let mut start = range.start as usize;
    let mut len = end - start + 1;
    let pos = 'found: {
        if first_mask != 0 {
            let mut byte = masked(bytes[start], first_mask);
            if last_mask != 0 && len == 1 {
                byte = masked(byte, last_mask);
            }
            let pos = bits::first_bit(&[byte], bit);
            if len == 1 || (pos != -1 && pos != 8) {
                break 'found pos;
            }
            start += 1;
            len -= 1;
        }
        let whole = len - usize::from(last_mask != 0);
        if whole > 0 {
            let pos = bits::first_bit(&bytes[start..start + whole], bit);
            if len == whole || (pos != -1 && pos != (whole as i64) << 3) {
                break 'found pos;
            }
            start += whole;
            len -= whole;
        }
        bits::first_bit(&[masked(bytes[end], last_mask)], bit)
    };
    // Looking for a 0 within an explicit range: the bit after the range
    // does not count (without an end, the string is taken as zero-padded).
    if end_given && !bit && pos == (len as i64) << 3 {
        return Ok(-1);
    }
    Ok(if pos == -1 {
        -1
    } else {
        pos + ((start as i64) << 3)
    })
}

#[derive(Clone, Copy)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

fn bitop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let name = args.get(1);
    let op = if is(name, "and") {
        BitOp::And
    } else if is(name, "or") {
        BitOp::Or
    } else if is(name, "xor") {
        BitOp::Xor
    } else if is(name, "not") {
        BitOp::Not
    } else {
        return Err(err(SYNTAX));
    };
    if matches!(op, BitOp::Not) && args.len() != 4 {
        return Err(err(
            "ERR BITOP NOT must be called with a single source key.",
        ));
    }
    let dest = args.get(2);
    let keys: Vec<&[u8]> = args.iter().skip(2).collect();
    let len = ctx.write(&keys, false, |txn, db, now| {
        let mut sources = Vec::with_capacity(keys.len() - 1);
        for key in &keys[1..] {
            match txn.get(db, key, now)? {
                Some(stored) if stored.meta.kind() != Kind::String => return Err(err(WRONGTYPE)),
                Some(stored) => sources.push(stored.string().to_bytes()),
                None => sources.push(Vec::new()),
            }
        }
        let result = combine(op, &sources);
        let mut deleted = false;
        if result.is_empty() {
            deleted = txn.delete(db, dest, now)?;
        } else {
            super::strings::check_len(result.len())?;
            txn.put_string(db, dest, &result, None)?;
        }
        Ok((result.len(), deleted))
    })?;
    let (len, deleted) = len;
    if len > 0 {
        ctx.notify(notify::STRING, "set", dest);
    } else if deleted {
        ctx.notify(notify::GENERIC, "del", dest);
    }
    ctx.out.int(len as i64);
    Ok(())
}

/// BITOP's result: shorter sources count as zero-padded to the longest.
fn combine(op: BitOp, sources: &[Vec<u8>]) -> Vec<u8> {
    let len = sources.iter().map(Vec::len).max().unwrap_or(0);
    let mut result = sources[0].clone();
    result.resize(len, 0);
    if let BitOp::Not = op {
        result.iter_mut().for_each(|byte| *byte = !*byte);
        return result;
    }
    for source in &sources[1..] {
        // Plain byte loops: the compiler vectorises them.
        match op {
            BitOp::And => {
                for (r, s) in result.iter_mut().zip(source) {
                    *r &= s;
                }
                // Past its end the source is zeros.
                result[source.len()..].fill(0);
            }
            BitOp::Or => {
                for (r, s) in result.iter_mut().zip(source) {
                    *r |= s;
                }
            }
            BitOp::Xor => {
                for (r, s) in result.iter_mut().zip(source) {
                    *r ^= s;
                }
            }
            BitOp::Not => unreachable!("handled above"),
        }
    }
    result
}

#[derive(Clone, Copy)]
enum FieldOp {
    Get,
    Set(i64),
    IncrBy(i64),
}

#[derive(Clone, Copy)]
struct FieldCommand {
    op: FieldOp,
    field: FieldType,
    offset: u64,
    overflow: Overflow,
}

/// Parses BITFIELD's subcommands in order, failing at the first bad one as
/// Redis does.
fn parse_bitfield(ctx: &Ctx, args: &Args) -> Result<Vec<FieldCommand>, CmdError> {
    let mut commands = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let remaining = args.len() - j - 1;
        let name = args.get(j);
        let kind = if is(name, "get") && remaining >= 2 {
            0
        } else if is(name, "set") && remaining >= 3 {
            1
        } else if is(name, "incrby") && remaining >= 3 {
            2
        } else if is(name, "overflow") && remaining >= 1 {
            let mode = args.get(j + 1);
            overflow = if is(mode, "wrap") {
                Overflow::Wrap
            } else if is(mode, "sat") {
                Overflow::Sat
            } else if is(mode, "fail") {
                Overflow::Fail
            } else {
                return Err(err("ERR Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        } else {
            return Err(err(SYNTAX));
        };
        let field = FieldType::parse(args.get(j + 1)).ok_or_else(|| {
            err(
                "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not \
                 supported but i64 is.",
            )
        })?;
        let offset = bit_offset(ctx, args.get(j + 2), Some(field.bits))?;
        let op = match kind {
            0 => FieldOp::Get,
            1 => FieldOp::Set(int_arg(args.get(j + 3))?),
            _ => FieldOp::IncrBy(int_arg(args.get(j + 3))?),
        };
        commands.push(FieldCommand {
            op,
            field,
            offset,
            overflow,
        });
        j += if kind == 0 { 3 } else { 4 };
    }
    Ok(commands)
}

fn bitfield(ctx: &mut Ctx, args: Args) -> CmdResult {
    bitfield_generic(ctx, args, false)
}

fn bitfield_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    bitfield_generic(ctx, args, true)
}

fn bitfield_generic(ctx: &mut Ctx, args: Args, read_only: bool) -> CmdResult {
    let key = args.get(1);
    let commands = parse_bitfield(ctx, &args)?;
    let writes = commands.iter().any(|c| !matches!(c.op, FieldOp::Get));
    let replies = if !writes {
        let replies = ctx.read(key, |meta, payload| {
            with_bytes(meta, payload, |bytes| run_fields(bytes, true, &commands).0)
        })?;
        replies.unwrap_or_else(|| run_fields(&[], false, &commands).0)
    } else {
        if read_only {
            return Err(err("ERR BITFIELD_RO only supports the GET subcommand"));
        }
        ctx.write(&[key], false, |txn, db, now| {
            let stored = txn.get(db, key, now)?;
            let (replies, patch) = match &stored {
                Some(s) => with_bytes(s.meta, s.payload(), |bytes| {
                    run_fields(bytes, true, &commands)
                })?,
                None => run_fields(&[], false, &commands),
            };
            if let Some(patch) = patch {
                write_patch(txn, db, key, stored.as_ref(), &patch)?;
            }
            Ok(replies)
        })?
    };
    if writes {
        ctx.notify(notify::STRING, "setbit", key);
    }
    ctx.out.array(replies.len());
    for reply in replies {
        match reply {
            Some(n) => ctx.out.int(n),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

/// Runs BITFIELD's subcommands in order over `current` (the value's bytes;
/// `exists`: the key is there): the replies (None: an overflow under
/// FAIL), and the change to store, if any.
///
/// The written fields all lie in one byte window (from the lowest written
/// byte to the highest), which the subcommands edit in a copy; reads look
/// there first, then at `current`, then see zeros.
fn run_fields(
    current: &[u8],
    exists: bool,
    commands: &[FieldCommand],
) -> (Vec<Option<i64>>, Option<Patch>) {
    let written = commands.iter().filter(|c| !matches!(c.op, FieldOp::Get));
    let span = written.fold(None, |span: Option<(u64, u64)>, c| {
        let first = c.offset / 8;
        let last = (c.offset + u64::from(c.field.bits) - 1) / 8;
        Some(span.map_or((first, last), |(lo, hi)| (lo.min(first), hi.max(last))))
    });
    let (lo, hi) = span.unwrap_or((0, 0));
    let mut window: Vec<u8> = if span.is_some() {
        (lo..=hi)
            .map(|i| current.get(i as usize).copied().unwrap_or(0))
            .collect()
    } else {
        Vec::new()
    };
    let mut replies = Vec::with_capacity(commands.len());
    for command in commands {
        let read = |window: &[u8], i: u64| {
            if span.is_some() && (lo..=hi).contains(&i) {
                window[(i - lo) as usize]
            } else {
                current.get(i as usize).copied().unwrap_or(0)
            }
        };
        let FieldCommand {
            op,
            field,
            offset,
            overflow,
        } = *command;
        let old = bits::get(|i| read(&window, i), offset, field);
        let (reply, new) = match op {
            FieldOp::Get => {
                replies.push(Some(old));
                continue;
            }
            FieldOp::Set(value) => {
                let new = if field.signed {
                    bits::add_signed(value, 0, field.bits, overflow)
                } else {
                    bits::add_unsigned(value as u64, 0, field.bits, overflow).map(|n| n as i64)
                };
                (new.map(|_| old), new)
            }
            FieldOp::IncrBy(incr) => {
                let new = if field.signed {
                    bits::add_signed(old, incr, field.bits, overflow)
                } else {
                    bits::add_unsigned(old as u64, incr, field.bits, overflow).map(|n| n as i64)
                };
                (new, new)
            }
        };
        replies.push(reply);
        if let Some(new) = new {
            bits::set(&mut window, offset - lo * 8, field.bits, new as u64);
        }
    }
    let patch = span.map(|(lo, hi)| Patch {
        offset: lo as usize,
        bytes: window,
        min_len: current.len().max(hi as usize + 1),
    });
    (replies, patch.filter(|p| !exists || !p.is_noop(current)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setbit_patches_only_changes() {
        assert_eq!(setbit_patch(&[0x80], true, 0, true), (true, None));
        let (old, patch) = setbit_patch(&[0x80], true, 9, true);
        assert!(!old);
        assert_eq!(
            patch,
            Some(Patch {
                offset: 1,
                bytes: vec![0x40],
                min_len: 2
            })
        );
        // An absent key is created even by clearing a clear bit.
        assert!(setbit_patch(&[], false, 0, false).1.is_some());
    }

    #[test]
    fn bitop_pads_shorter_sources() {
        let a = vec![0xff, 0x0f];
        let b = vec![0xf0];
        assert_eq!(combine(BitOp::And, &[a.clone(), b.clone()]), vec![0xf0, 0]);
        assert_eq!(
            combine(BitOp::Or, &[a.clone(), b.clone()]),
            vec![0xff, 0x0f]
        );
        assert_eq!(combine(BitOp::Xor, &[a.clone(), b]), vec![0x0f, 0x0f]);
        assert_eq!(combine(BitOp::Not, &[a]), vec![0x00, 0xf0]);
    }

    #[test]
    fn bitfield_window_covers_the_written_fields() {
        let commands = [
            FieldCommand {
                op: FieldOp::Set(255),
                field: FieldType::parse(b"u8").unwrap(),
                offset: 4,
                overflow: Overflow::Wrap,
            },
            FieldCommand {
                op: FieldOp::Get,
                field: FieldType::parse(b"u16").unwrap(),
                offset: 0,
                overflow: Overflow::Wrap,
            },
        ];
        let (replies, patch) = run_fields(&[0xaa], true, &commands);
        assert_eq!(replies, vec![Some(0xa0), Some(0xaff0)]);
        assert_eq!(
            patch,
            Some(Patch {
                offset: 0,
                bytes: vec![0xaf, 0xf0],
                min_len: 2
            })
        );
    }
}
