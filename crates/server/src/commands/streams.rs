//! Stream commands (Redis 7.0 semantics): XADD, XRANGE, XREVRANGE, XLEN,
//! XDEL, XTRIM, XSETID here; XREAD and XREADGROUP (with BLOCK) in `read`;
//! the consumer groups (XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM) and
//! XINFO in `groups`.
//!
//! Writes log resolved operations (`Op::Stream*`, `Op::Group*`,
//! `Op::Consumer*`, `Op::Pending*`): the handler reads the stream under
//! the key's lock and decides everything Redis decides as it goes (the
//! new ID from the clock, how many entries a trim takes, delivery times,
//! read counters), then logs one record. Replay therefore never looks at
//! a clock or a node layout.

mod groups;
mod read;

use engram_collections::types::stream::{TrimStrategy, MAX_NODE_BYTES};
use engram_collections::types::{Stream, StreamEntry, StreamId};
use engram_collections::Op;

use super::{
    err, is, wrong_arity, CmdError, CmdResult, CommandSpec, Ctx, Group, FAST, READONLY, SYNTAX,
    WRITE, WRONGTYPE,
};
use crate::keyspace::{ckey, CKind, Object, Txn};
use crate::notify;
use crate::resp::{parse_int, Args, ReplyWriter};

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("stream");
    let one = (1, 1, 1);
    let mut table = vec![
        g.command(
            "xadd",
            -5,
            WRITE | FAST,
            one,
            xadd,
            "Appends a new message to a stream. Creates the key if it doesn't exist.",
        ),
        g.command(
            "xrange",
            -4,
            READONLY,
            one,
            xrange,
            "Returns the messages from a stream within a range of IDs.",
        ),
        g.command(
            "xrevrange",
            -4,
            READONLY,
            one,
            xrevrange,
            "Returns the messages from a stream within a range of IDs in reverse order.",
        ),
        g.command(
            "xlen",
            2,
            READONLY | FAST,
            one,
            xlen,
            "Return the number of messages in a stream.",
        ),
        g.command(
            "xdel",
            -3,
            WRITE | FAST,
            one,
            xdel,
            "Returns the number of messages after removing them from a stream.",
        ),
        g.command(
            "xtrim",
            -4,
            WRITE,
            one,
            xtrim,
            "Deletes messages from the beginning of a stream.",
        ),
        g.command(
            "xsetid",
            -3,
            WRITE | FAST,
            one,
            xsetid,
            "An internal command for replicating stream values.",
        ),
    ];
    table.extend(read::commands());
    table.extend(groups::commands());
    table
}

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// Redis's `streamGenericParseIDOrReply`: `ms-seq`, `ms` (the sequence
/// is `missing_seq`), `-` and `+` unless `strict`. With `star_seq`
/// (XADD) `ms-*` parses with a sequence still to choose: `Ok((id,
/// false))`.
fn parse_id_full(
    arg: &[u8],
    missing_seq: u64,
    strict: bool,
    star_seq: bool,
) -> Result<(StreamId, bool), CmdError> {
    let invalid = || err(INVALID_ID);
    if arg.len() > 127 {
        return Err(invalid());
    }
    match arg {
        b"-" | b"+" if strict => return Err(invalid()),
        b"-" => return Ok((StreamId::MIN, true)),
        b"+" => return Ok((StreamId::MAX, true)),
        _ => {}
    }
    let (ms, seq) = match arg.iter().position(|&b| b == b'-') {
        Some(at) => (&arg[..at], Some(&arg[at + 1..])),
        None => (arg, None),
    };
    let ms = parse_u64(ms).ok_or_else(invalid)?;
    match seq {
        None => Ok((StreamId::new(ms, missing_seq), true)),
        Some(b"*") if star_seq => Ok((StreamId::new(ms, 0), false)),
        Some(seq) => Ok((StreamId::new(ms, parse_u64(seq).ok_or_else(invalid)?), true)),
    }
}

/// Redis's `string2ull`: digits only, no sign, fits 64 bits.
fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// An ID argument (`-` and `+` allowed; a missing sequence is
/// `missing_seq`).
fn parse_id(arg: &[u8], missing_seq: u64) -> Result<StreamId, CmdError> {
    parse_id_full(arg, missing_seq, false, false).map(|(id, _)| id)
}

/// An ID that must be an ID (no `-` or `+`).
fn parse_strict_id(arg: &[u8]) -> Result<StreamId, CmdError> {
    parse_id_full(arg, 0, true, false).map(|(id, _)| id)
}

/// A range end of XRANGE, XPENDING, XAUTOCLAIM: `(` makes it exclusive.
/// `start`: the low end (an exclusive one moves up, else down).
fn parse_interval(arg: &[u8], start: bool) -> Result<StreamId, CmdError> {
    let missing_seq = if start { 0 } else { u64::MAX };
    if arg.len() > 1 && arg[0] == b'(' {
        let id = parse_id_full(&arg[1..], missing_seq, true, false)?.0;
        return if start {
            id.next()
                .ok_or_else(|| err("ERR invalid start ID for the interval"))
        } else {
            id.prev()
                .ok_or_else(|| err("ERR invalid end ID for the interval"))
        };
    }
    parse_id(arg, missing_seq)
}

/// A count argument: an integer (Redis's message), negative read as 0.
fn count_arg(arg: &[u8]) -> Result<u64, CmdError> {
    Ok(super::int_arg(arg)?.max(0) as u64)
}

/// An ID as a bulk string, its text made on the stack (`format!` cost
/// XADD a thousand instructions a reply, a tenth of its whole call).
pub(super) fn reply_id(out: &mut ReplyWriter, id: StreamId) {
    // Two u64s of at most 20 digits and the dash.
    let mut text = [0u8; 41];
    let mut digits = itoa::Buffer::new();
    let ms = digits.format(id.ms).as_bytes();
    text[..ms.len()].copy_from_slice(ms);
    text[ms.len()] = b'-';
    let at = ms.len() + 1;
    let seq = digits.format(id.seq).as_bytes();
    text[at..at + seq.len()].copy_from_slice(seq);
    out.bulk(&text[..at + seq.len()]);
}

/// `[id, [field, value, ...]]`.
pub(super) fn reply_entry(out: &mut ReplyWriter, entry: &StreamEntry<'_>) {
    out.array(2);
    reply_id(out, entry.id);
    out.array(entry.fields.len());
    for field in &entry.fields {
        out.bulk(field);
    }
}

fn reply_entries<'a>(out: &mut ReplyWriter, entries: impl Iterator<Item = StreamEntry<'a>>) {
    let entries: Vec<StreamEntry<'a>> = entries.collect();
    out.array(entries.len());
    for entry in &entries {
        reply_entry(out, entry);
    }
}

/// The stream at `key` inside a write (WRONGTYPE for another type).
pub(super) fn stream_in<'t>(
    txn: &'t mut Txn,
    db: usize,
    key: &[u8],
    now: u64,
) -> Result<Option<&'t Stream>, CmdError> {
    match txn.collection(db, key, CKind::Stream, now)? {
        None => Ok(None),
        Some(Object::Stream(stream)) => Ok(Some(stream)),
        Some(_) => Err(err(WRONGTYPE)),
    }
}

/// The stream of a read.
pub(super) fn as_stream(object: Option<&Object>) -> Result<Option<&Stream>, CmdError> {
    match object {
        None => Ok(None),
        Some(Object::Stream(stream)) => Ok(Some(stream)),
        Some(_) => Err(err(WRONGTYPE)),
    }
}

// ---- XADD and XTRIM ----

/// What XADD and XTRIM parse (Redis's `streamAddTrimArgs`).
#[derive(Default)]
struct AddTrimArgs {
    trim: Option<TrimStrategy>,
    approx: bool,
    /// Redis's LIMIT: how many entries an approximate trim may remove,
    /// counted in whole nodes.
    limit: u64,
    /// On a Raft group's member, the LIMIT given, counted in entries
    /// (`layout_free`); 0: none.
    cap: u64,
    no_mkstream: bool,
    /// The ID and whether its sequence was given (XADD).
    id: Option<(StreamId, bool)>,
    /// Where the ID argument is (XADD: the fields follow it).
    id_at: usize,
}

/// Redis's `streamParseAddOrTrimArgsOrReply`.
/// `member`: this node is a Raft group's member (`layout_free`).
fn parse_add_trim(args: &Args, xadd: bool, member: bool) -> Result<AddTrimArgs, CmdError> {
    let mut parsed = AddTrimArgs::default();
    let mut limit_given = false;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = args.get(i);
        if xadd && option == b"*" {
            break;
        } else if (is(option, "maxlen") || is(option, "minid")) && more > 0 {
            if parsed.trim.is_some() {
                return Err(err(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not \
                     compatible",
                ));
            }
            parsed.approx = false;
            let next = args.get(i + 1);
            if more >= 2 && next == b"~" {
                parsed.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let value = args.get(i + 1);
            parsed.trim = Some(if is(option, "maxlen") {
                let max = super::int_arg(value)?;
                if max < 0 {
                    return Err(err("ERR The MAXLEN argument must be >= 0."));
                }
                TrimStrategy::MaxLen(max as u64)
            } else {
                TrimStrategy::MinId(parse_strict_id(value)?)
            });
            i += 1;
        } else if is(option, "limit") && more > 0 {
            let limit = super::int_arg(args.get(i + 1))?;
            if limit < 0 {
                return Err(err("ERR The LIMIT argument must be >= 0."));
            }
            parsed.limit = limit as u64;
            limit_given = true;
            i += 1;
        } else if xadd && is(option, "nomkstream") {
            parsed.no_mkstream = true;
        } else if xadd {
            parsed.id = Some(parse_id_full(option, 0, true, true)?);
            break;
        } else {
            return Err(err(SYNTAX));
        }
        i += 1;
    }
    parsed.id_at = i;
    if parsed.limit != 0 && parsed.trim.is_none() {
        return Err(err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && parsed.trim.is_none() {
        return Err(err(
            "ERR syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if limit_given {
        if !parsed.approx {
            return Err(err(
                "ERR syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
    } else if parsed.approx {
        let entries = engram_collections::types::stream::node_limits().0 as u64;
        parsed.limit = (100 * entries).clamp(1, 1_000_000);
        if entries == 0 {
            parsed.limit = 10_000;
        }
    } else {
        parsed.limit = 0;
    }
    if member {
        layout_free(&mut parsed, limit_given);
    }
    Ok(parsed)
}

/// A trim every member of a Raft group decides alike. Where a stream's
/// nodes end is no part of its state: a member that restarted from a
/// checkpoint image or installed a snapshot packs them anew, and
/// `stream-node-max-entries` is each node's own. So `~`, which removes
/// whole nodes only, would remove a different count on each member. On a
/// member a trim is exact (`~` allows it: at least the threshold is
/// kept), and an explicit LIMIT caps the entries removed. (Redis makes
/// its replicas agree by rewriting the trim it made into an exact one
/// before it propagates it.)
fn layout_free(parsed: &mut AddTrimArgs, limit_given: bool) {
    if parsed.approx {
        parsed.cap = if limit_given { parsed.limit } else { 0 };
        parsed.approx = false;
        parsed.limit = 0;
    }
}

/// How many entries `parsed`'s trim removes from `stream`, as if an
/// entry `appended` (with `entry_bytes`) were added first.
fn trim_count(stream: &Stream, parsed: &AddTrimArgs, appended: Option<(StreamId, usize)>) -> u64 {
    let Some(strategy) = parsed.trim else {
        return 0;
    };
    let (id, bytes) = appended.map_or((None, 0), |(id, bytes)| (Some(id), bytes));
    let count = stream.trim_count_after(id, bytes, strategy, parsed.approx, parsed.limit);
    match parsed.cap {
        0 => count,
        cap => count.min(cap),
    }
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]]
/// *|id field value [field value ...]
fn xadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let parsed = parse_add_trim(&args, true, ctx.shared.group.get().is_some())?;
    let fields_at = parsed.id_at + 1;
    let field_args = args.len().saturating_sub(fields_at);
    if field_args < 2 || field_args % 2 == 1 {
        return Err(wrong_arity("xadd"));
    }
    if let Some((id, true)) = parsed.id {
        if id.is_zero() {
            return Err(err("ERR The ID specified in XADD must be greater than 0-0"));
        }
    }
    let key = args.get(1);
    let added = ctx.write(&[key], false, |txn, db, now| {
        let stream = stream_in(txn, db, key, now)?;
        if stream.is_none() && parsed.no_mkstream {
            return Ok(None);
        }
        let last = stream.map_or(StreamId::MIN, Stream::last_id);
        if last == StreamId::MAX {
            return Err(err(
                "ERR The stream has exhausted the last possible ID, unable to add more items",
            ));
        }
        let too_small = || {
            err("ERR The ID specified in XADD is equal or smaller than the target stream top item")
        };
        let id = match parsed.id {
            None => {
                if now > last.ms {
                    StreamId::new(now, 0)
                } else {
                    last.next().ok_or_else(too_small)?
                }
            }
            Some((id, true)) => id,
            Some((id, false)) => {
                if last.ms == id.ms {
                    if last.seq == u64::MAX {
                        return Err(too_small());
                    }
                    StreamId::new(id.ms, last.seq + 1)
                } else {
                    id
                }
            }
        };
        if id <= last {
            return Err(too_small());
        }
        let fields: Vec<&[u8]> = (fields_at..args.len()).map(|i| args.get(i)).collect();
        let entry_bytes: usize = fields.iter().map(|f| f.len()).sum();
        if entry_bytes > MAX_NODE_BYTES {
            return Err(err("ERR Elements are too large to be stored"));
        }
        let trimmed = match stream {
            Some(stream) => trim_count(stream, &parsed, Some((id, entry_bytes))),
            None => trim_count(&Stream::new(), &parsed, Some((id, entry_bytes))),
        };
        txn.stream_add(db, key, id, fields, trimmed)?;
        Ok(Some((id, trimmed > 0)))
    })?;
    match added {
        Some((id, trimmed)) => {
            ctx.notify(notify::STREAM, "xadd", key);
            if trimmed {
                ctx.notify(notify::STREAM, "xtrim", key);
            }
            reply_id(ctx.out, id)
        }
        None => ctx.out.null(),
    }
    Ok(())
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]
fn xtrim(ctx: &mut Ctx, args: Args) -> CmdResult {
    let parsed = parse_add_trim(&args, false, ctx.shared.group.get().is_some())?;
    let key = args.get(1);
    let removed = ctx.write(&[key], false, |txn, db, now| {
        let Some(stream) = stream_in(txn, db, key, now)? else {
            return Ok(0);
        };
        let count = trim_count(stream, &parsed, None);
        if count > 0 {
            txn.log(vec![Op::StreamTrim {
                key: ckey(db, key)?,
                count,
            }])?;
        }
        Ok(count)
    })?;
    if removed > 0 {
        ctx.notify(notify::STREAM, "xtrim", key);
    }
    ctx.out.int(removed as i64);
    Ok(())
}

// ---- reads ----

fn xrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    range(ctx, args, false)
}

fn xrevrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    range(ctx, args, true)
}

/// XRANGE key start end [COUNT count] (XREVRANGE: end first).
fn range(ctx: &mut Ctx, args: Args, rev: bool) -> CmdResult {
    let (start_arg, end_arg) = if rev {
        (args.get(3), args.get(2))
    } else {
        (args.get(2), args.get(3))
    };
    let start = parse_interval(start_arg, true)?;
    let end = parse_interval(end_arg, false)?;
    let mut count: Option<u64> = None;
    let mut i = 4;
    while i < args.len() {
        if is(args.get(i), "count") && i + 1 < args.len() {
            count = Some(count_arg(args.get(i + 1))?);
            i += 2;
        } else {
            return Err(err(SYNTAX));
        }
    }
    ctx.reply_collection(args.get(1), CKind::Stream, |out, object| {
        let Some(stream) = as_stream(object)? else {
            out.array(0);
            return Ok(());
        };
        match count {
            Some(0) => out.null_array(),
            _ => {
                let take = count.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
                if rev {
                    reply_entries(out, stream.rev_range(start, end).take(take));
                } else {
                    reply_entries(out, stream.range(start, end).take(take));
                }
            }
        }
        Ok(())
    })
}

fn xlen(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::Stream, |out, object| {
        out.int(as_stream(object)?.map_or(0, Stream::len) as i64);
        Ok(())
    })
}

// ---- XDEL and XSETID ----

/// XDEL key id [id ...]
fn xdel(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let deleted = ctx.write(&[key], false, |txn, db, now| {
        let Some(stream) = stream_in(txn, db, key, now)? else {
            return Ok(0);
        };
        let ids = (2..args.len())
            .map(|i| parse_strict_id(args.get(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut present: Vec<StreamId> = Vec::new();
        for id in ids {
            if !present.contains(&id) && stream.contains(id) {
                present.push(id);
            }
        }
        if !present.is_empty() {
            let count = present.len();
            txn.log(vec![Op::StreamDelete {
                key: ckey(db, key)?,
                ids: present,
            }])?;
            return Ok(count);
        }
        Ok(0)
    })?;
    if deleted > 0 {
        ctx.notify(notify::STREAM, "xdel", key);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

/// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]
fn xsetid(ctx: &mut Ctx, args: Args) -> CmdResult {
    let id = parse_strict_id(args.get(2))?;
    let mut entries_added: Option<u64> = None;
    let mut max_deleted = StreamId::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = args.get(i);
        if is(option, "entriesadded") && more > 0 {
            let n = super::int_arg(args.get(i + 1))?;
            if n < 0 {
                return Err(err("ERR entries_added must be positive"));
            }
            entries_added = Some(n as u64);
            i += 2;
        } else if is(option, "maxdeletedid") && more > 0 {
            max_deleted = parse_strict_id(args.get(i + 1))?;
            if id < max_deleted {
                return Err(err(
                    "ERR The ID specified in XSETID is smaller than the provided \
                     max_deleted_entry_id",
                ));
            }
            i += 2;
        } else {
            return Err(err(SYNTAX));
        }
    }
    let key = args.get(1);
    ctx.write(&[key], false, |txn, db, now| {
        let Some(stream) = stream_in(txn, db, key, now)? else {
            return Err(err("ERR no such key"));
        };
        if let Some(last) = stream.last_entry_id() {
            if id < last {
                return Err(err(
                    "ERR The ID specified in XSETID is smaller than the target stream top item",
                ));
            }
            if entries_added.is_some_and(|n| (stream.len() as u64) > n) {
                return Err(err(
                    "ERR The entries_added specified in XSETID is smaller than the target \
                     stream length",
                ));
            }
        }
        let op = Op::StreamSetMeta {
            key: ckey(db, key)?,
            last_id: id,
            entries_added: entries_added.unwrap_or(stream.entries_added()),
            max_deleted_id: if max_deleted.is_zero() {
                stream.max_deleted_id()
            } else {
                max_deleted
            },
            first_id: stream.first_id(),
        };
        txn.log(vec![op])?;
        Ok(())
    })?;
    ctx.notify(notify::STREAM, "xsetid", key);
    ctx.out.ok();
    Ok(())
}

/// A non-negative integer option (Redis's `getLongLongFromObjectOrReply`
/// then a range check), for the group commands.
fn parse_i64(arg: &[u8]) -> Result<i64, CmdError> {
    super::int_arg(arg)
}

/// `parse_int` for callers that give their own message.
fn int_or(arg: &[u8], message: &str) -> Result<i64, CmdError> {
    parse_int(arg).ok_or_else(|| err(message))
}
