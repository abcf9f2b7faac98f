//! Sorted-set commands (Redis 7.0 semantics) over the collections'
//! [`SortedSet`]: a member -> score map plus an order-statistic tree by
//! `(score, member)`, so ZSCORE is O(1), ZINCRBY and ZRANK O(log n), and
//! every range (by rank, score or lex, either direction, with LIMIT) is
//! located in O(log n) and read in O(k).
//!
//! Writes are resolved here before they are logged (ZADD's NX/XX/GT/LT and
//! INCR against the current scores, ZPOP's and ZREMRANGEBY*'s members), so
//! the log holds effects: `SortedSetAdd` with final scores, `SortedSetRemove`
//! with the members removed, and `Replace` for the destination of *STORE.
//!
//! Scores are written as Redis 7.0 writes them (`%.17g`, see
//! `resp::redis_double`), as RESP3 doubles or RESP2 bulk strings.
//!
//! Scores are `Score`s, which store -0 as 0: where Redis answers `-0`
//! (ZADD z -0 m; ZSCORE z m) this answers `0`.

use std::collections::{HashMap, HashSet};

use engram_collections::types::{LexBound, Score, ScoreBound, SortedSet};
use engram_collections::Op;
use rand::Rng;

use super::{
    cursor_arg, err, int_arg, is, symmetric_int_arg, wrong_arity, CmdError, CmdResult, CommandSpec,
    Ctx, Group, FAST, NOT_FLOAT, READONLY, SYNTAX, WRITE,
};
use crate::keyspace::{ckey, CKind, Object, Txn};
use crate::notify;
use crate::resp::{redis_double, Args, ReplyWriter};

mod pops;
mod setops;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("sortedset");
    let one = (1, 1, 1);
    let mut table = vec![
        g.command(
            "zadd",
            -4,
            WRITE | FAST,
            one,
            zadd,
            "Adds members to a sorted set, or updates their scores.",
        ),
        g.command(
            "zincrby",
            4,
            WRITE | FAST,
            one,
            zincrby,
            "Increments the score of a member of a sorted set.",
        ),
        g.command(
            "zrem",
            -3,
            WRITE | FAST,
            one,
            zrem,
            "Removes members from a sorted set.",
        ),
        g.command(
            "zremrangebyrank",
            4,
            WRITE,
            one,
            zremrangebyrank,
            "Removes the members of a sorted set within a range of ranks.",
        ),
        g.command(
            "zremrangebyscore",
            4,
            WRITE,
            one,
            zremrangebyscore,
            "Removes the members of a sorted set within a range of scores.",
        ),
        g.command(
            "zremrangebylex",
            4,
            WRITE,
            one,
            zremrangebylex,
            "Removes the members of a sorted set within a lexicographical range.",
        ),
        g.command(
            "zrange",
            -4,
            READONLY,
            one,
            zrange,
            "Returns members of a sorted set within a range of ranks, scores or members.",
        ),
        g.command(
            "zrangestore",
            -5,
            WRITE,
            (1, 2, 1),
            zrangestore,
            "Stores a range of members of a sorted set in a key.",
        ),
        g.command(
            "zrevrange",
            -4,
            READONLY,
            one,
            zrevrange,
            "Returns members of a sorted set within a range of ranks, highest first.",
        ),
        g.command(
            "zrangebyscore",
            -4,
            READONLY,
            one,
            zrangebyscore,
            "Returns members of a sorted set within a range of scores.",
        ),
        g.command(
            "zrevrangebyscore",
            -4,
            READONLY,
            one,
            zrevrangebyscore,
            "Returns members of a sorted set within a range of scores, highest first.",
        ),
        g.command(
            "zrangebylex",
            -4,
            READONLY,
            one,
            zrangebylex,
            "Returns members of a sorted set within a lexicographical range.",
        ),
        g.command(
            "zrevrangebylex",
            -4,
            READONLY,
            one,
            zrevrangebylex,
            "Returns members of a sorted set within a lexicographical range, in reverse.",
        ),
        g.command(
            "zcount",
            4,
            READONLY | FAST,
            one,
            zcount,
            "Counts the members of a sorted set within a range of scores.",
        ),
        g.command(
            "zlexcount",
            4,
            READONLY | FAST,
            one,
            zlexcount,
            "Counts the members of a sorted set within a lexicographical range.",
        ),
        g.command(
            "zcard",
            2,
            READONLY | FAST,
            one,
            zcard,
            "Returns the number of members of a sorted set.",
        ),
        g.command(
            "zscore",
            3,
            READONLY | FAST,
            one,
            zscore,
            "Returns the score of a member of a sorted set.",
        ),
        g.command(
            "zmscore",
            -3,
            READONLY | FAST,
            one,
            zmscore,
            "Returns the scores of members of a sorted set.",
        ),
        g.command(
            "zrank",
            -3,
            READONLY | FAST,
            one,
            zrank,
            "Returns the rank of a member of a sorted set, lowest score first.",
        ),
        g.command(
            "zrevrank",
            -3,
            READONLY | FAST,
            one,
            zrevrank,
            "Returns the rank of a member of a sorted set, highest score first.",
        ),
        g.command(
            "zpopmin",
            -2,
            WRITE | FAST,
            one,
            zpopmin,
            "Removes and returns the members with the lowest scores.",
        ),
        g.command(
            "zpopmax",
            -2,
            WRITE | FAST,
            one,
            zpopmax,
            "Removes and returns the members with the highest scores.",
        ),
        g.command(
            "zrandmember",
            -2,
            READONLY,
            one,
            zrandmember,
            "Returns random members of a sorted set.",
        ),
        g.command(
            "zscan",
            -3,
            READONLY,
            one,
            zscan,
            "Iterates over the members and scores of a sorted set.",
        ),
    ];
    table.extend(setops::commands(&g));
    table.extend(pops::commands(&g));
    table
}

/// A score reply: a RESP3 double, or a RESP2 bulk string, as Redis writes it.
fn reply_score(out: &mut ReplyWriter, value: f64) {
    out.double(value);
}

// ---------------------------------------------------------------------------
// Parsing.

/// A score argument, as Redis's `string2d` reads it: the whole argument is
/// a decimal float or an infinity; no blanks, no NaN, no overflow to
/// infinity and no underflow to zero.
pub(super) fn parse_score(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    let first = *arg.first()?;
    if first.is_ascii_whitespace() || first == 0x0b {
        return None;
    }
    let value: f64 = match text.parse() {
        Ok(value) => value,
        // strtod also reads C99 hex floats (0x1p4, 0x10).
        Err(_) => {
            let (value, nonzero) = parse_hex_float(text)?;
            if value.is_infinite() || (value == 0.0 && nonzero) {
                return None; // ERANGE
            }
            return Some(value);
        }
    };
    if value.is_nan() {
        return None;
    }
    let unsigned = text.trim_start_matches(['+', '-']);
    if value.is_infinite()
        && !unsigned.eq_ignore_ascii_case("inf")
        && !unsigned.eq_ignore_ascii_case("infinity")
    {
        return None; // strtod's ERANGE on overflow
    }
    if value == 0.0 && mantissa_has_nonzero_digit(unsigned) {
        return None; // strtod's ERANGE on underflow to zero
    }
    Some(value)
}

/// A whole-string C99 hex float as `strtod` reads it: sign, `0x`, hex
/// digits with an optional point (at least one digit), an optional binary
/// exponent `p[+-]digits`. The value, and whether its mantissa is nonzero.
fn parse_hex_float(text: &str) -> Option<(f64, bool)> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let rest = rest
        .strip_prefix("0x")
        .or_else(|| rest.strip_prefix("0X"))?;
    let (mantissa_text, exponent_text) = match rest.find(['p', 'P']) {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    // Up to 16 significant hex digits kept exactly; later ones only scale
    // (enough for a double's 53 bits, rounding aside).
    let mut mantissa: u64 = 0;
    let mut exponent: i64 = 0;
    let mut digits = 0;
    let mut nonzero = false;
    let mut seen_point = false;
    for c in mantissa_text.chars() {
        if c == '.' && !seen_point {
            seen_point = true;
            continue;
        }
        let digit = c.to_digit(16)?;
        digits += 1;
        nonzero |= digit != 0;
        if mantissa >> 60 == 0 {
            mantissa = mantissa * 16 + u64::from(digit);
            if seen_point {
                exponent -= 4;
            }
        } else if !seen_point {
            exponent += 4;
        }
    }
    if digits == 0 {
        return None;
    }
    if let Some(exp) = exponent_text {
        let (sign, digits) = match exp.as_bytes().first()? {
            b'-' => (-1, &exp[1..]),
            b'+' => (1, &exp[1..]),
            _ => (1, exp),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let value: i64 = digits.parse().unwrap_or(i64::MAX / 2).min(100_000);
        exponent += sign * value;
    }
    let magnitude = (mantissa as f64) * 2f64.powi(exponent.clamp(-2000, 2000) as i32);
    // powi of a tiny power underflows before the product: redo in two steps.
    let magnitude = if magnitude == 0.0 && mantissa != 0 && exponent > -1200 {
        (mantissa as f64)
            * 2f64.powi((exponent / 2) as i32)
            * 2f64.powi((exponent - exponent / 2) as i32)
    } else {
        magnitude
    };
    Some((if negative { -magnitude } else { magnitude }, nonzero))
}

fn mantissa_has_nonzero_digit(text: &str) -> bool {
    text.bytes()
        .take_while(|&b| b != b'e' && b != b'E')
        .any(|b| (b'1'..=b'9').contains(&b))
}

fn score_arg(arg: &[u8]) -> Result<f64, CmdError> {
    parse_score(arg).ok_or_else(|| err(NOT_FLOAT))
}

/// The number in a range bound as `zslParseRange` reads it with `strtod`:
/// leading blanks allowed, overflow gives an infinity, and an empty string
/// is 0 (strtod converts nothing and stops at the end).
fn parse_bound_number(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        return Some(0.0);
    }
    let start = text
        .iter()
        .position(|&b| !(b.is_ascii_whitespace() || b == 0x0b))?;
    let value: f64 = std::str::from_utf8(&text[start..]).ok()?.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

/// One end of a score range: `1.5`, `(1.5`, `-inf`, `+inf`...
fn parse_score_bound(arg: &[u8]) -> Option<ScoreBound> {
    match arg.split_first() {
        Some((b'(', rest)) => parse_bound_number(rest).map(ScoreBound::Exclusive),
        _ => parse_bound_number(arg).map(ScoreBound::Inclusive),
    }
}

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

fn score_range(min: &[u8], max: &[u8]) -> Result<(ScoreBound, ScoreBound), CmdError> {
    match (parse_score_bound(min), parse_score_bound(max)) {
        (Some(min), Some(max)) => Ok((min, max)),
        _ => Err(err(NOT_FLOAT_RANGE)),
    }
}

/// One end of a lex range: `-`, `+`, `[member` or `(member`.
fn parse_lex_bound(arg: &[u8]) -> Option<LexBound> {
    match arg.split_first()? {
        (b'+', []) => Some(LexBound::Max),
        (b'-', []) => Some(LexBound::Min),
        (b'[', rest) => Some(LexBound::Inclusive(rest.into())),
        (b'(', rest) => Some(LexBound::Exclusive(rest.into())),
        _ => None,
    }
}

fn lex_range(min: &[u8], max: &[u8]) -> Result<(LexBound, LexBound), CmdError> {
    match (parse_lex_bound(min), parse_lex_bound(max)) {
        (Some(min), Some(max)) => Ok((min, max)),
        _ => Err(err(NOT_LEX_RANGE)),
    }
}

/// Redis's rank sanitising (ZRANGE, ZREMRANGEBYRANK): negative ranks count
/// from the end; the ranks `start..=end` clamped to the set, or None when
/// empty.
fn rank_range(start: i64, end: i64, len: usize) -> Option<std::ops::Range<usize>> {
    let len = len as i64;
    let start = if start < 0 { len + start } else { start }.max(0);
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    let end = end.min(len - 1);
    Some(start as usize..end as usize + 1)
}

pub(super) fn zset_of(object: Option<&Object>) -> Option<&SortedSet> {
    match object {
        Some(Object::SortedSet(zset)) => Some(zset),
        _ => None,
    }
}

/// The sorted set at `key` for writing (None: absent).
fn zset_in<'t>(
    txn: &'t mut Txn<'_>,
    db: usize,
    key: &[u8],
    now: u64,
) -> Result<Option<&'t SortedSet>, CmdError> {
    Ok(zset_of(txn.collection(db, key, CKind::SortedSet, now)?))
}

// ---------------------------------------------------------------------------
// ZADD, ZINCRBY, ZREM.

pub(super) fn zadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    zadd_generic(ctx, args, false)
}

fn zincrby(ctx: &mut Ctx, args: Args) -> CmdResult {
    zadd_generic(ctx, args, true)
}

/// What a ZADD did, for its reply.
#[derive(Default)]
struct Added {
    added: i64,
    updated: i64,
    processed: bool,
    score: f64,
}

fn zadd_generic(ctx: &mut Ctx, args: Args, mut incr: bool) -> CmdResult {
    let key = args.get(1);
    let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
    let mut at = 2;
    while at < args.len() {
        let arg = args.get(at);
        if is(arg, "nx") {
            nx = true;
        } else if is(arg, "xx") {
            xx = true;
        } else if is(arg, "ch") {
            ch = true;
        } else if is(arg, "incr") {
            incr = true;
        } else if is(arg, "gt") {
            gt = true;
        } else if is(arg, "lt") {
            lt = true;
        } else {
            break;
        }
        at += 1;
    }
    let rest = args.len() - at;
    if rest == 0 || !rest.is_multiple_of(2) {
        return Err(err(SYNTAX));
    }
    if nx && xx {
        return Err(err(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if ((gt || lt) && nx) || (gt && lt) {
        return Err(err(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if incr && rest > 2 {
        return Err(err(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let mut pairs = Vec::with_capacity(rest / 2);
    for i in (at..args.len()).step_by(2) {
        pairs.push((score_arg(args.get(i))?, args.get(i + 1)));
    }
    let result = ctx.write(&[key], false, |txn, db, now| {
        let zset = zset_in(txn, db, key, now)?;
        let mut result = Added::default();
        if zset.is_none() && xx {
            return Ok(result);
        }
        // The changes, in order (a repeated member: the last one wins on
        // replay too), and with several pairs the scores they set, which
        // later pairs of the same member compare against.
        let mut changes: Vec<(f64, &[u8])> = Vec::with_capacity(pairs.len().min(64));
        let mut overlay: Option<HashMap<&[u8], f64>> = (pairs.len() > 1).then(HashMap::new);
        for &(score, member) in &pairs {
            let current = match overlay.as_ref().and_then(|o| o.get(member)) {
                Some(&score) => Some(score),
                None => zset.and_then(|z| z.score(member)),
            };
            let new = match current {
                Some(current) => {
                    if nx {
                        continue;
                    }
                    let mut new = score;
                    if incr {
                        new += current;
                    }
                    let Some(new) = Score::new(new) else {
                        return Err(err("ERR resulting score is not a number (NaN)"));
                    };
                    let new = new.get();
                    if (lt && new >= current) || (gt && new <= current) {
                        continue;
                    }
                    if new != current {
                        result.updated += 1;
                    } else {
                        result.processed = true;
                        result.score = new;
                        continue;
                    }
                    new
                }
                None => {
                    if xx {
                        continue;
                    }
                    result.added += 1;
                    // Not NaN: parse_score refuses it.
                    Score::new(score).map_or(0.0, Score::get)
                }
            };
            result.processed = true;
            result.score = new;
            changes.push((new, member));
            if let Some(overlay) = &mut overlay {
                overlay.insert(member, new);
            }
        }
        if !changes.is_empty() {
            txn.sorted_set_add(db, key, changes)?;
        }
        Ok(result)
    })?;
    if result.added + result.updated > 0 {
        ctx.notify(notify::ZSET, if incr { "zincr" } else { "zadd" }, key);
    }
    if incr {
        if result.processed {
            reply_score(ctx.out, result.score);
        } else {
            ctx.out.null();
        }
    } else {
        ctx.out.int(if ch {
            result.added + result.updated
        } else {
            result.added
        });
    }
    Ok(())
}

fn zrem(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let removed = ctx.write(&[key], false, |txn, db, now| {
        let Some(zset) = zset_in(txn, db, key, now)? else {
            return Ok((0, false));
        };
        let mut seen = HashSet::new();
        let members: Vec<Box<[u8]>> = args
            .iter()
            .skip(2)
            .filter(|member| zset.contains(member) && seen.insert(*member))
            .map(Box::from)
            .collect();
        let count = members.len();
        let emptied = count == zset.len();
        if count > 0 {
            txn.log(vec![Op::SortedSetRemove {
                key: ckey(db, key)?,
                members,
            }])?;
        }
        Ok((count, emptied))
    })?;
    notify_removed(ctx, "zrem", key, removed);
    ctx.out.int(removed.0 as i64);
    Ok(())
}

/// A removal's events: `event` if it removed anything, and `del` when it
/// removed everything. `removed`: (count, whether the set emptied).
pub(super) fn notify_removed(
    ctx: &mut Ctx,
    event: &'static str,
    key: &[u8],
    (count, emptied): (usize, bool),
) {
    if count > 0 {
        ctx.notify(notify::ZSET, event, key);
        if emptied {
            ctx.notify(notify::GENERIC, "del", key);
        }
    }
}

/// A store's events: `event` on a destination that now holds the
/// result, `del` on one an empty result deleted.
pub(super) fn notify_stored(ctx: &mut Ctx, event: &'static str, dst: &[u8], stored: Stored) {
    if stored.len > 0 {
        ctx.notify(notify::ZSET, event, dst);
    } else if stored.deleted {
        ctx.notify(notify::GENERIC, "del", dst);
    }
}

// ---------------------------------------------------------------------------
// ZREMRANGEBY*, ZPOPMIN, ZPOPMAX.

/// Which members a ZREMRANGEBY* command removes.
enum RemoveRange {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound, LexBound),
}

impl RemoveRange {
    fn ranks(&self, zset: &SortedSet) -> std::ops::Range<usize> {
        match self {
            RemoveRange::Rank(start, end) => rank_range(*start, *end, zset.len()).unwrap_or(0..0),
            RemoveRange::Score(min, max) => zset.score_range_ranks(*min, *max),
            RemoveRange::Lex(min, max) => zset.lex_range_ranks(min, max),
        }
    }
}

fn zremrangebyrank(ctx: &mut Ctx, args: Args) -> CmdResult {
    let range = RemoveRange::Rank(int_arg(args.get(2))?, int_arg(args.get(3))?);
    zremrange(ctx, args.get(1), range, "zremrangebyrank")
}

fn zremrangebyscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (min, max) = score_range(args.get(2), args.get(3))?;
    zremrange(
        ctx,
        args.get(1),
        RemoveRange::Score(min, max),
        "zremrangebyscore",
    )
}

fn zremrangebylex(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (min, max) = lex_range(args.get(2), args.get(3))?;
    zremrange(
        ctx,
        args.get(1),
        RemoveRange::Lex(min, max),
        "zremrangebylex",
    )
}

fn zremrange(ctx: &mut Ctx, key: &[u8], range: RemoveRange, event: &'static str) -> CmdResult {
    let removed = ctx.write(&[key], false, |txn, db, now| {
        let Some(zset) = zset_in(txn, db, key, now)? else {
            return Ok((0, false));
        };
        let members: Vec<Box<[u8]>> = zset
            .range(range.ranks(zset))
            .map(|(member, _)| member.into())
            .collect();
        let count = members.len();
        let emptied = count == zset.len();
        if count > 0 {
            txn.log(vec![Op::SortedSetRemove {
                key: ckey(db, key)?,
                members,
            }])?;
        }
        Ok((count, emptied))
    })?;
    notify_removed(ctx, event, key, removed);
    ctx.out.int(removed.0 as i64);
    Ok(())
}

fn zpopmin(ctx: &mut Ctx, args: Args) -> CmdResult {
    zpop(ctx, args, false)
}

fn zpopmax(ctx: &mut Ctx, args: Args) -> CmdResult {
    zpop(ctx, args, true)
}

fn zpop(ctx: &mut Ctx, args: Args, max: bool) -> CmdResult {
    if args.len() > 3 {
        return Err(err(SYNTAX));
    }
    let key = args.get(1);
    let count = if args.len() == 3 {
        // Redis's getPositiveLongFromObjectOrReply: one message for a
        // negative count and for one that is not a number at all.
        match crate::resp::parse_int(args.get(2)) {
            Some(count) if count >= 0 => Some(count as u64),
            _ => return Err(err("ERR value is out of range, must be positive")),
        }
    } else {
        None
    };
    let popped = ctx.write(&[key], false, |txn, db, now| {
        let Some(zset) = zset_in(txn, db, key, now)? else {
            return Ok((Vec::new(), false));
        };
        let take = usize::try_from(count.unwrap_or(1)).unwrap_or(usize::MAX);
        let popped = pops::take(zset, max, take);
        let emptied = popped.len() == zset.len();
        if !popped.is_empty() {
            txn.log(vec![Op::SortedSetRemove {
                key: ckey(db, key)?,
                members: popped.iter().map(|(member, _)| member.clone()).collect(),
            }])?;
        }
        Ok((popped, emptied))
    })?;
    let (popped, emptied) = popped;
    let event = if max { "zpopmax" } else { "zpopmin" };
    notify_removed(ctx, event, key, (popped.len(), emptied));
    let out = &mut *ctx.out;
    // RESP3 with a count: [member, score] pairs; otherwise a flat array.
    let nested = out.is_resp3() && count.is_some();
    if nested {
        out.array(popped.len());
    } else {
        out.array(popped.len() * 2);
    }
    for (member, score) in &popped {
        if nested {
            out.array(2);
        }
        out.bulk(member);
        reply_score(out, *score);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Point reads.

fn zcard(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        out.int(zset_of(object).map_or(0, SortedSet::len) as i64);
        Ok(())
    })
}

fn zscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    let member = args.get(2);
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        match zset_of(object).and_then(|zset| zset.score(member)) {
            Some(score) => reply_score(out, score),
            None => out.null(),
        }
        Ok(())
    })
}

fn zmscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        let zset = zset_of(object);
        out.array(args.len() - 2);
        for member in args.iter().skip(2) {
            match zset.and_then(|zset| zset.score(member)) {
                Some(score) => reply_score(out, score),
                None => out.null(),
            }
        }
        Ok(())
    })
}

fn zrank(ctx: &mut Ctx, args: Args) -> CmdResult {
    zrank_generic(ctx, args, false, "zrank")
}

fn zrevrank(ctx: &mut Ctx, args: Args) -> CmdResult {
    zrank_generic(ctx, args, true, "zrevrank")
}

fn zrank_generic(ctx: &mut Ctx, args: Args, reverse: bool, name: &str) -> CmdResult {
    if args.len() > 4 {
        return Err(wrong_arity(name));
    }
    let withscore = if args.len() == 4 {
        if !is(args.get(3), "withscore") {
            return Err(err(SYNTAX));
        }
        true
    } else {
        false
    };
    let member = args.get(2);
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        let found = zset_of(object).and_then(|zset| {
            let rank = zset.rank(member)?;
            let rank = if reverse { zset.len() - 1 - rank } else { rank };
            Some((rank, zset.score(member).unwrap_or(0.0)))
        });
        match found {
            Some((rank, score)) if withscore => {
                out.array(2);
                out.int(rank as i64);
                reply_score(out, score);
            }
            Some((rank, _)) => out.int(rank as i64),
            None if withscore => out.null_array(),
            None => out.null(),
        }
        Ok(())
    })
}

fn zcount(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (min, max) = score_range(args.get(2), args.get(3))?;
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        out.int(zset_of(object).map_or(0, |z| z.count_in_score_range(min, max)) as i64);
        Ok(())
    })
}

fn zlexcount(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (min, max) = lex_range(args.get(2), args.get(3))?;
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        out.int(zset_of(object).map_or(0, |z| z.count_in_lex_range(&min, &max)) as i64);
        Ok(())
    })
}

// ---------------------------------------------------------------------------
// ZRANGE and friends.

#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeBy {
    Auto,
    Rank,
    Score,
    Lex,
}

/// A parsed range query: which members (as a rank range of the set, read
/// forward or backward) once the set is known.
enum RangeQuery {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound, LexBound),
}

struct Range {
    query: RangeQuery,
    reverse: bool,
    withscores: bool,
    offset: i64,
    /// Negative: no limit.
    limit: i64,
}

impl Range {
    /// Parses `<min> <max> [BYSCORE|BYLEX] [REV] [WITHSCORES] [LIMIT o c]`
    /// starting at `first` (the source key's position), as
    /// `zrangeGenericCommand` does: options first, then their conflicts,
    /// then the range itself. `by` / `reverse` are fixed by the older
    /// commands (their options cannot change them).
    fn parse(
        args: &Args,
        first: usize,
        store: bool,
        mut by: RangeBy,
        reverse: Option<bool>,
    ) -> Result<Range, CmdError> {
        let mut rev = reverse;
        let (mut withscores, mut offset, mut limit) = (false, 0, -1);
        let mut at = first + 3;
        while at < args.len() {
            let arg = args.get(at);
            let left = args.len() - at - 1;
            if !store && is(arg, "withscores") {
                withscores = true;
            } else if is(arg, "limit") && left >= 2 {
                offset = int_arg(args.get(at + 1))?;
                limit = int_arg(args.get(at + 2))?;
                at += 2;
            } else if reverse.is_none() && is(arg, "rev") {
                rev = Some(true);
            } else if by == RangeBy::Auto && is(arg, "bylex") {
                by = RangeBy::Lex;
            } else if by == RangeBy::Auto && is(arg, "byscore") {
                by = RangeBy::Score;
            } else {
                return Err(err(SYNTAX));
            }
            at += 1;
        }
        let reverse = rev.unwrap_or(false);
        if by == RangeBy::Auto {
            by = RangeBy::Rank;
        }
        if limit != -1 && by == RangeBy::Rank {
            return Err(err(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
            ));
        }
        if withscores && by == RangeBy::Lex {
            return Err(err(
                "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
            ));
        }
        let (mut min, mut max) = (args.get(first + 1), args.get(first + 2));
        if reverse && by != RangeBy::Rank {
            std::mem::swap(&mut min, &mut max);
        }
        let query = match by {
            RangeBy::Rank | RangeBy::Auto => RangeQuery::Rank(int_arg(min)?, int_arg(max)?),
            RangeBy::Score => {
                let (min, max) = score_range(min, max)?;
                RangeQuery::Score(min, max)
            }
            RangeBy::Lex => {
                let (min, max) = lex_range(min, max)?;
                RangeQuery::Lex(min, max)
            }
        };
        Ok(Range {
            query,
            reverse,
            withscores,
            offset,
            limit,
        })
    }

    /// The ranks selected in `zset` (to be read backward when `reverse`),
    /// LIMIT applied: O(log n).
    fn ranks(&self, zset: &SortedSet) -> std::ops::Range<usize> {
        let within = match &self.query {
            RangeQuery::Rank(start, end) => {
                return match rank_range(*start, *end, zset.len()) {
                    // Reversed, positions count from the top.
                    Some(r) if self.reverse => zset.len() - r.end..zset.len() - r.start,
                    Some(r) => r,
                    None => 0..0,
                };
            }
            RangeQuery::Score(min, max) => zset.score_range_ranks(*min, *max),
            RangeQuery::Lex(min, max) => zset.lex_range_ranks(min, max),
        };
        // A negative offset walks off the end in Redis: nothing.
        let Ok(offset) = usize::try_from(self.offset) else {
            return 0..0;
        };
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        if offset >= within.len() {
            return 0..0;
        }
        if self.reverse {
            let top = within.end - offset;
            top.saturating_sub(limit).max(within.start)..top
        } else {
            let bottom = within.start + offset;
            bottom..bottom.saturating_add(limit).min(within.end)
        }
    }
}

/// Writes members (and scores) in the shape ZRANGE replies with: a flat
/// array in RESP2, [member, score] pairs in RESP3 with scores.
fn reply_members<'a>(
    out: &mut ReplyWriter,
    entries: impl ExactSizeIterator<Item = (&'a [u8], f64)>,
    withscores: bool,
) {
    let resp3 = out.is_resp3();
    if withscores && !resp3 {
        out.array(entries.len() * 2);
    } else {
        out.array(entries.len());
    }
    for (member, score) in entries {
        if withscores && resp3 {
            out.array(2);
        }
        out.bulk(member);
        if withscores {
            reply_score(out, score);
        }
    }
}

fn zrange_generic(ctx: &mut Ctx, args: Args, by: RangeBy, reverse: Option<bool>) -> CmdResult {
    let range = Range::parse(&args, 1, false, by, reverse)?;
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        let Some(zset) = zset_of(object) else {
            out.array(0);
            return Ok(());
        };
        let ranks = range.ranks(zset);
        if range.reverse {
            reply_members(out, zset.range_rev(ranks), range.withscores);
        } else {
            reply_members(out, zset.range(ranks), range.withscores);
        }
        Ok(())
    })
}

fn zrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    zrange_generic(ctx, args, RangeBy::Auto, None)
}

fn zrevrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    zrange_generic(ctx, args, RangeBy::Rank, Some(true))
}

fn zrangebyscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    zrange_generic(ctx, args, RangeBy::Score, Some(false))
}

fn zrevrangebyscore(ctx: &mut Ctx, args: Args) -> CmdResult {
    zrange_generic(ctx, args, RangeBy::Score, Some(true))
}

fn zrangebylex(ctx: &mut Ctx, args: Args) -> CmdResult {
    zrange_generic(ctx, args, RangeBy::Lex, Some(false))
}

fn zrevrangebylex(ctx: &mut Ctx, args: Args) -> CmdResult {
    zrange_generic(ctx, args, RangeBy::Lex, Some(true))
}

/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]
fn zrangestore(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (dst, src) = (args.get(1), args.get(2));
    let range = Range::parse(&args, 2, true, RangeBy::Auto, None)?;
    let stored = ctx.write(&[dst, src], false, |txn, db, now| {
        let result = match zset_in(txn, db, src, now)? {
            None => SortedSet::new(),
            Some(zset) => {
                let mut result = SortedSet::new();
                for (member, score) in zset.range(range.ranks(zset)) {
                    result.insert(member, score_or_zero(score));
                }
                result
            }
        };
        store_result(txn, db, now, dst, result)
    })?;
    notify_stored(ctx, "zrangestore", dst, stored);
    ctx.out.int(stored.len as i64);
    Ok(())
}

/// What a *STORE did to its destination.
#[derive(Clone, Copy)]
pub(super) struct Stored {
    /// The result's size.
    pub len: usize,
    /// An empty result deleted a key that was there.
    pub deleted: bool,
}

/// Makes `dst` hold `result` (of any type before); an empty result
/// deletes it.
pub(super) fn store_result(
    txn: &mut Txn<'_>,
    db: usize,
    now: u64,
    dst: &[u8],
    result: SortedSet,
) -> Result<Stored, CmdError> {
    let len = result.len();
    let mut deleted = false;
    if len == 0 {
        deleted = txn.delete(db, dst, now)?;
    } else {
        txn.log(vec![Op::Replace {
            key: ckey(db, dst)?,
            object: Object::SortedSet(result),
        }])?;
    }
    Ok(Stored { len, deleted })
}

/// `value` as a score; NaN (which the aggregations never produce) as 0.
fn score_or_zero(value: f64) -> Score {
    Score::new(value)
        .or_else(|| Score::new(0.0))
        .expect("0 is a score")
}

// ---------------------------------------------------------------------------
// ZRANDMEMBER.

/// The most a ZRANDMEMBER with a negative count may send (the reply is
/// built in memory before it is sent).
const MAX_RANDOM_REPLY_BYTES: usize = 512 << 20;

fn zrandmember(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    if args.len() == 2 {
        return ctx.reply_collection(key, CKind::SortedSet, |out, object| {
            // (By rank: alike on every node from the seeded generator.)
            match zset_of(object).and_then(|zset| crate::random::with(|rng| zset.random(rng))) {
                Some((member, _)) => out.bulk(member),
                None => out.null(),
            }
            Ok(())
        });
    }
    let count = symmetric_int_arg(args.get(2))?;
    if args.len() > 4 || (args.len() == 4 && !is(args.get(3), "withscores")) {
        return Err(err(SYNTAX));
    }
    let withscores = args.len() == 4;
    if withscores && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
        return Err(err("ERR value is out of range"));
    }
    ctx.reply_collection(key, CKind::SortedSet, |out, object| {
        let Some(zset) = zset_of(object) else {
            out.array(0);
            return Ok(());
        };
        if count == 0 {
            out.array(0);
            return Ok(());
        }
        // The seeded generator on a replicated node's apply thread: picks
        // are ranks, so every node picks alike.
        let len = zset.len();
        let resp3 = out.is_resp3();
        let header = |out: &mut ReplyWriter, n: usize| {
            out.array(if withscores && !resp3 { n * 2 } else { n });
        };
        let emit = |out: &mut ReplyWriter, rank: usize| {
            if let Some((member, score)) = zset.select(rank) {
                if withscores && resp3 {
                    out.array(2);
                }
                out.bulk(member);
                if withscores {
                    reply_score(out, score);
                }
            }
        };
        if count < 0 {
            // With repetitions: |count| independent picks, streamed.
            let n = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
            let per_pick = zset.member_bytes() / len + 16 + if withscores { 32 } else { 0 };
            if n.saturating_mul(per_pick) > MAX_RANDOM_REPLY_BYTES {
                return Err(err(format!(
                    "ERR count is too large: the reply would exceed {} MB",
                    MAX_RANDOM_REPLY_BYTES >> 20
                )));
            }
            header(out, n);
            crate::random::with(|rng| {
                for _ in 0..n {
                    emit(out, rng.random_range(0..len));
                }
            });
            return Ok(());
        }
        // Distinct members.
        let n = usize::try_from(count).unwrap_or(usize::MAX);
        let ranks: Vec<usize> = crate::random::with(|rng| {
            if n >= len {
                // The whole set, in order.
                (0..len).collect()
            } else if n * 3 > len {
                // Most of the set: a partial shuffle of all ranks.
                let mut all: Vec<usize> = (0..len).collect();
                for i in 0..n {
                    let j = rng.random_range(i..len);
                    all.swap(i, j);
                }
                all.truncate(n);
                all
            } else {
                let mut seen = HashSet::with_capacity(n);
                let mut ranks = Vec::with_capacity(n);
                while ranks.len() < n {
                    let rank = rng.random_range(0..len);
                    if seen.insert(rank) {
                        ranks.push(rank);
                    }
                }
                ranks
            }
        });
        header(out, ranks.len());
        for rank in ranks {
            emit(out, rank);
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------
// ZSCAN.

/// Sets this small are sent whole by one ZSCAN call in score order (cursor
/// 0), as Redis does for its listpack encoding (`zset-max-listpack-entries`).
const SCAN_WHOLE_MAX: usize = 128;

fn zscan(ctx: &mut Ctx, args: Args) -> CmdResult {
    let cursor = cursor_arg(args.get(2))?;
    ctx.reply_collection(args.get(1), CKind::SortedSet, |out, object| {
        let Some(zset) = zset_of(object) else {
            out.array(2);
            out.bulk(b"0");
            out.array(0);
            return Ok(());
        };
        let mut count = 10usize;
        let mut pattern: Option<&[u8]> = None;
        let mut at = 3;
        while at < args.len() {
            let arg = args.get(at);
            let left = args.len() - at;
            if is(arg, "count") && left >= 2 {
                let n = int_arg(args.get(at + 1))?;
                if n < 1 {
                    return Err(err(SYNTAX));
                }
                count = usize::try_from(n).unwrap_or(usize::MAX);
            } else if is(arg, "match") && left >= 2 {
                let p = args.get(at + 1);
                pattern = (p != b"*").then_some(p);
            } else {
                return Err(err(SYNTAX));
            }
            at += 2;
        }
        let (next, batch): (u64, Vec<(&[u8], f64)>) = if zset.len() <= SCAN_WHOLE_MAX {
            (0, zset.iter().collect())
        } else {
            // Big sets in hash order, COUNT at a time (more only to finish
            // a run of equal hashes).
            zset.scan_by_hash(cursor, count)
        };
        let matching: Vec<(&[u8], f64)> = batch
            .into_iter()
            .filter(|(member, _)| pattern.is_none_or(|p| crate::glob::matches(p, member)))
            .collect();
        out.array(2);
        out.bulk(itoa::Buffer::new().format(next).as_bytes());
        out.array(matching.len() * 2);
        for (member, score) in matching {
            out.bulk(member);
            out.bulk(redis_double(score).as_bytes());
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::parse_score;

    #[test]
    fn scores_read_as_strtod_reads_them() {
        assert_eq!(parse_score(b"1.5"), Some(1.5));
        assert_eq!(parse_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"0x10"), Some(16.0));
        assert_eq!(parse_score(b"0X1p4"), Some(16.0));
        assert_eq!(parse_score(b"0x.8"), Some(0.5));
        assert_eq!(parse_score(b"-0x1.8p1"), Some(-3.0));
        assert_eq!(parse_score(b"+0x1P-2"), Some(0.25));
        assert_eq!(parse_score(b"0x0"), Some(0.0));
        assert_eq!(parse_score(b"0x1p-1074"), Some(f64::from_bits(1)));
        assert_eq!(
            parse_score(b"0x10000000000000000000p-1100"),
            Some(2f64.powi(-1024))
        );
        for bad in [
            "0x",
            "0x1p",
            "0xg",
            "0x1p+",
            "0x1.2.3",
            "0x1p1024",
            "0x1p-1080",
            " 0x1",
            "1e999",
            "nan",
        ] {
            assert_eq!(parse_score(bad.as_bytes()), None, "{bad}");
        }
    }
}
