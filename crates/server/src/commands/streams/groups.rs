//! Consumer groups: XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM; and XINFO.

use engram_collections::op::Bytes;
use engram_collections::types::stream::Group as StreamGroup;
use engram_collections::types::{Stream, StreamId};
use engram_collections::Op;

use super::super::{
    err, is, lowercase, unknown_subcommand, wrong_sub_arity, CmdError, CmdResult, CommandSpec, Ctx,
    Group, FAST, READONLY, SYNTAX, WRITE,
};
use super::{
    as_stream, count_arg, int_or, parse_i64, parse_id, parse_interval, parse_strict_id,
    reply_entry, reply_id, stream_in,
};
use crate::keyspace::{ckey, CKind, Txn};
use crate::resp::{Args, ReplyWriter};

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("stream");
    let one = (1, 1, 1);
    vec![
        g.command(
            "xgroup",
            -2,
            0,
            (0, 0, 0),
            xgroup,
            "A container for consumer groups commands.",
        ),
        g.command(
            "xack",
            -4,
            WRITE | FAST,
            one,
            xack,
            "Returns the number of messages that were successfully acknowledged by the consumer \
             group member of a stream.",
        ),
        g.command(
            "xpending",
            -3,
            READONLY,
            one,
            xpending,
            "Returns the information and entries from a stream consumer group's pending \
             entries list.",
        ),
        g.command(
            "xclaim",
            -6,
            WRITE | FAST,
            one,
            xclaim,
            "Changes, or acquires, ownership of a message in a consumer group, as if the message \
             was delivered a consumer group member.",
        ),
        g.command(
            "xautoclaim",
            -6,
            WRITE | FAST,
            one,
            xautoclaim,
            "Changes, or acquires, ownership of messages in a consumer group, as if the messages \
             were delivered to as consumer group member.",
        ),
        g.command(
            "xinfo",
            -2,
            0,
            (0, 0, 0),
            xinfo,
            "A container for stream introspection commands.",
        ),
    ]
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn no_group(key: &[u8], group: &[u8]) -> CmdError {
    err(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        text(key),
        text(group)
    ))
}

fn help(out: &mut ReplyWriter, command: &str, lines: &[&str]) {
    out.array(lines.len() + 3);
    out.simple(&format!(
        "{command} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    ));
    for line in lines {
        out.simple(line);
    }
    out.simple("HELP");
    out.simple("    Prints this help.");
}

// ---- XGROUP ----

/// XGROUP CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER|HELP
fn xgroup(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    let name = lowercase(sub);
    let arity_ok = match name.as_str() {
        "create" | "setid" => args.len() >= 5,
        "destroy" => args.len() == 4,
        "createconsumer" | "delconsumer" => args.len() == 5,
        "help" => args.len() == 2,
        _ => return Err(unknown_subcommand("xgroup", sub)),
    };
    if !arity_ok {
        return Err(wrong_sub_arity("xgroup", sub));
    }
    if name == "help" {
        help(
            ctx.out,
            "XGROUP",
            &[
                "CREATE <key> <groupname> <id|$> [option]",
                "    Create a new consumer group. Options are:",
                "    * MKSTREAM",
                "      Create the empty stream if it does not exist.",
                "    * ENTRIESREAD entries_read",
                "      Set the group's entries_read counter (internal use).",
                "CREATECONSUMER <key> <groupname> <consumer>",
                "    Create a new consumer in the specified group.",
                "DELCONSUMER <key> <groupname> <consumer>",
                "    Remove the specified consumer.",
                "DESTROY <key> <groupname>",
                "    Remove the specified group.",
                "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
                "    Set the current group ID and entries_read counter.",
            ],
        );
        return Ok(());
    }
    let (create, setid) = (name == "create", name == "setid");
    let mut mkstream = false;
    let mut entries_read = -1i64;
    let mut i = 5;
    while i < args.len() {
        if create && is(args.get(i), "mkstream") {
            mkstream = true;
            i += 1;
        } else if (create || setid) && is(args.get(i), "entriesread") && i + 1 < args.len() {
            entries_read = parse_i64(args.get(i + 1))?;
            if entries_read < 0 && entries_read != -1 {
                return Err(err("ERR value for ENTRIESREAD must be positive or -1"));
            }
            i += 2;
        } else {
            return Err(super::super::subcommand_syntax_error("XGROUP", sub));
        }
    }
    if (create && args.len() > 8) || (setid && args.len() != 5 && args.len() != 7) {
        return Err(super::super::subcommand_syntax_error("XGROUP", sub));
    }
    let (key, group) = (args.get(2), args.get(3));
    let reply = ctx.write(&[key], false, |txn, db, now| {
        let stream = stream_in(txn, db, key, now)?;
        let Some(stream) = stream else {
            if !mkstream {
                return Err(err(
                    "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE \
                     you may want to use the MKSTREAM option to create an empty stream \
                     automatically.",
                ));
            }
            // CREATE ... MKSTREAM on a missing key.
            let id = match args.get(4) {
                b"$" => StreamId::MIN,
                arg => parse_strict_id(arg)?,
            };
            txn.log(vec![Op::GroupCreate {
                key: ckey(db, key)?,
                group: group.into(),
                last_id: id,
                entries_read,
            }])?;
            return Ok((Reply::Ok, Some("xgroup-create")));
        };
        let exists = stream.group(group).is_some();
        if !exists && matches!(name.as_str(), "setid" | "createconsumer" | "delconsumer") {
            return Err(err(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                text(group),
                text(key)
            )));
        }
        let ekey = ckey(db, key)?;
        match name.as_str() {
            "create" => {
                let id = match args.get(4) {
                    b"$" => stream.last_id(),
                    arg => parse_strict_id(arg)?,
                };
                if exists {
                    return Err(err("BUSYGROUP Consumer Group name already exists"));
                }
                txn.log(vec![Op::GroupCreate {
                    key: ekey,
                    group: group.into(),
                    last_id: id,
                    entries_read,
                }])?;
                Ok((Reply::Ok, Some("xgroup-create")))
            }
            "setid" => {
                let id = match args.get(4) {
                    b"$" => stream.last_id(),
                    arg => parse_id(arg, 0)?,
                };
                txn.log(vec![Op::GroupSetId {
                    key: ekey,
                    group: group.into(),
                    last_id: id,
                    entries_read,
                }])?;
                Ok((Reply::Ok, Some("xgroup-setid")))
            }
            "destroy" => {
                if !exists {
                    return Ok((Reply::Int(0), None));
                }
                txn.log(vec![Op::GroupDestroy {
                    key: ekey,
                    group: group.into(),
                }])?;
                Ok((Reply::Int(1), Some("xgroup-destroy")))
            }
            "createconsumer" => {
                let consumer = args.get(4);
                let state = stream.group(group).expect("checked");
                if state.consumer(consumer).is_some() {
                    return Ok((Reply::Int(0), None));
                }
                txn.log(vec![Op::ConsumerTouch {
                    key: ekey,
                    group: group.into(),
                    consumer: consumer.into(),
                    seen_ms: now,
                }])?;
                Ok((Reply::Int(1), Some("xgroup-createconsumer")))
            }
            _ => {
                let consumer = args.get(4);
                let state = stream.group(group).expect("checked");
                let Some(found) = state.consumer(consumer) else {
                    return Ok((Reply::Int(0), None));
                };
                let pending = found.pending().len() as i64;
                txn.log(vec![Op::ConsumerDelete {
                    key: ekey,
                    group: group.into(),
                    consumer: consumer.into(),
                }])?;
                Ok((Reply::Int(pending), Some("xgroup-delconsumer")))
            }
        }
    })?;
    let (reply, event) = reply;
    if let Some(event) = event {
        ctx.notify(crate::notify::STREAM, event, key);
    }
    match reply {
        Reply::Ok => ctx.out.ok(),
        Reply::Int(n) => ctx.out.int(n),
    }
    Ok(())
}

enum Reply {
    Ok,
    Int(i64),
}

// ---- XACK ----

/// XACK key group id [id ...]
fn xack(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, group) = (args.get(1), args.get(2));
    let acked = ctx.write(&[key], false, |txn, db, now| {
        let Some(state) = stream_in(txn, db, key, now)?.and_then(|s| s.group(group)) else {
            return Ok(0);
        };
        let ids = (3..args.len())
            .map(|i| parse_strict_id(args.get(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut pending: Vec<StreamId> = Vec::new();
        for id in ids {
            if state.pel().contains_key(&id) && !pending.contains(&id) {
                pending.push(id);
            }
        }
        let count = pending.len();
        if count > 0 {
            txn.log(vec![Op::PendingAck {
                key: ckey(db, key)?,
                group: group.into(),
                ids: pending,
            }])?;
        }
        Ok(count)
    })?;
    ctx.out.int(acked as i64);
    Ok(())
}

// ---- XPENDING ----

/// XPENDING key group [[IDLE min-idle-time] start end count [consumer]]
fn xpending(ctx: &mut Ctx, args: Args) -> CmdResult {
    let argc = args.len();
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(err(SYNTAX));
    }
    let (key, group) = (args.get(1), args.get(2));
    let mut range = None;
    if argc >= 6 {
        let mut at = 3;
        let mut min_idle = 0;
        if is(args.get(3), "idle") {
            min_idle = parse_i64(args.get(4))?;
            if argc < 8 {
                return Err(err(SYNTAX));
            }
            at += 2;
        }
        let count = count_arg(args.get(at + 2))?;
        let start = parse_interval(args.get(at), true)?;
        let end = parse_interval(args.get(at + 1), false)?;
        let consumer = (at + 3 < argc).then(|| args.get(at + 3));
        range = Some((min_idle, start, end, count, consumer));
    }
    let now = ctx.now_ms;
    ctx.reply_collection(key, CKind::Stream, |out, object| {
        let Some(state) = as_stream(object)?.and_then(|s| s.group(group)) else {
            return Err(no_group(key, group));
        };
        let Some((min_idle, start, end, count, consumer)) = range else {
            out.array(4);
            out.int(state.pel().len() as i64);
            if state.pel().is_empty() {
                out.null();
                out.null();
                out.null_array();
                return Ok(());
            }
            reply_id(out, *state.pel().keys().next().expect("not empty"));
            reply_id(out, *state.pel().keys().next_back().expect("not empty"));
            let owners: Vec<_> = state
                .consumers()
                .iter()
                .filter(|(_, c)| !c.pending().is_empty())
                .collect();
            out.array(owners.len());
            for (name, consumer) in owners {
                out.array(2);
                out.bulk(name);
                out.bulk_int(consumer.pending().len() as i64);
            }
            return Ok(());
        };
        let ids: Vec<StreamId> = match consumer {
            Some(name) => match state.consumer(name) {
                Some(c) if start <= end => c.pending().range(start..=end).copied().collect(),
                Some(_) => Vec::new(),
                None => {
                    out.array(0);
                    return Ok(());
                }
            },
            None if start <= end => state.pel().range(start..=end).map(|(id, _)| *id).collect(),
            None => Vec::new(),
        };
        let mut rows = Vec::new();
        for id in ids {
            if rows.len() as u64 >= count {
                break;
            }
            let pending = &state.pel()[&id];
            let idle = now as i64 - pending.delivery_ms as i64;
            if min_idle != 0 && idle < min_idle {
                continue;
            }
            rows.push((id, pending));
        }
        out.array(rows.len());
        for (id, pending) in rows {
            out.array(4);
            reply_id(out, id);
            out.bulk(&pending.consumer);
            out.int((now as i64 - pending.delivery_ms as i64).max(0));
            out.int(pending.deliveries as i64);
        }
        Ok(())
    })
}

// ---- XCLAIM and XAUTOCLAIM ----

/// The group of a claim, or NOGROUP.
fn claim_group<'t>(
    txn: &'t mut Txn,
    db: usize,
    key: &[u8],
    group: &[u8],
    now: u64,
) -> Result<(&'t Stream, &'t StreamGroup), CmdError> {
    let stream = stream_in(txn, db, key, now)?;
    match stream.and_then(|s| s.group(group).map(|g| (s, g))) {
        Some(found) => Ok(found),
        None => Err(no_group(key, group)),
    }
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms]
/// [TIME unix-time-milliseconds] [RETRYCOUNT count] [FORCE] [JUSTID]
/// [LASTID lastid]
fn xclaim(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, group, consumer) = (args.get(1), args.get(2), args.get(3));
    let out_buf = ctx.write(&[key], false, |txn, db, now| {
        let (stream, state) = claim_group(txn, db, key, group, now)?;
        let min_idle = int_or(args.get(4), "ERR Invalid min-idle-time argument for XCLAIM")?.max(0);
        let mut ids = Vec::new();
        let mut j = 5;
        while j < args.len() {
            match parse_id_full_quiet(args.get(j)) {
                Some(id) => ids.push(id),
                None => break,
            }
            j += 1;
        }
        let (mut force, mut justid) = (false, false);
        let mut delivery: Option<i64> = None;
        let mut retry_count: Option<i64> = None;
        let mut last_id = StreamId::MIN;
        while j < args.len() {
            let more = args.len() - 1 - j;
            let option = args.get(j);
            if is(option, "force") {
                force = true;
            } else if is(option, "justid") {
                justid = true;
            } else if is(option, "idle") && more > 0 {
                j += 1;
                let idle = int_or(args.get(j), "ERR Invalid IDLE option argument for XCLAIM")?;
                delivery = Some(now as i64 - idle);
            } else if is(option, "time") && more > 0 {
                j += 1;
                delivery = Some(int_or(
                    args.get(j),
                    "ERR Invalid TIME option argument for XCLAIM",
                )?);
            } else if is(option, "retrycount") && more > 0 {
                j += 1;
                retry_count = Some(int_or(
                    args.get(j),
                    "ERR Invalid RETRYCOUNT option argument for XCLAIM",
                )?);
            } else if is(option, "lastid") && more > 0 {
                j += 1;
                last_id = parse_strict_id(args.get(j))?;
            } else {
                return Err(err(format!(
                    "ERR Unrecognized XCLAIM option '{}'",
                    text(option)
                )));
            }
            j += 1;
        }
        let delivery_ms = match delivery {
            Some(t) if t >= 0 && t <= now as i64 => t as u64,
            _ => now,
        };
        let ekey = ckey(db, key)?;
        let mut ops = Vec::new();
        if last_id > state.last_id {
            ops.push(Op::GroupSetId {
                key: ekey.clone(),
                group: group.into(),
                last_id,
                entries_read: state.entries_read,
            });
        }
        let mut out = ReplyWriter::new();
        let mut claimed = Vec::new();
        let mut gone = Vec::new();
        let mut replies = 0;
        let mut touched = false;
        for id in ids {
            let pending = state.pel().get(&id);
            if !stream.contains(id) {
                if pending.is_some() && !gone.contains(&id) {
                    gone.push(id);
                }
                continue;
            }
            let (owned, deliveries) = match pending {
                Some(p) => (true, p.deliveries),
                // A forced entry starts as delivered once (Redis's new NACK).
                None if force => (false, 1),
                None => continue,
            };
            if owned && min_idle > 0 {
                let idle = now as i64 - pending.expect("owned").delivery_ms as i64;
                if idle < min_idle {
                    continue;
                }
            }
            touched = true;
            let deliveries = match retry_count {
                Some(n) if n >= 0 => n as u64,
                _ if !justid => deliveries + 1,
                _ => deliveries,
            };
            claimed.push((id, delivery_ms, deliveries));
            if justid {
                reply_id(&mut out, id);
            } else {
                reply_entry(&mut out, &stream.get(id).expect("exists"));
            }
            replies += 1;
        }
        let created = touched && state.consumer(consumer).is_none();
        let claim = Claim {
            ekey,
            group,
            consumer,
            now,
        };
        claim.ops(&mut ops, touched, gone, claimed);
        txn.log(ops)?;
        Ok((replies, out.buf, created))
    })?;
    if out_buf.2 {
        ctx.notify(crate::notify::STREAM, "xgroup-createconsumer", key);
    }
    ctx.out.array(out_buf.0);
    ctx.out.buf.extend_from_slice(&out_buf.1);
    Ok(())
}

/// What XCLAIM and XAUTOCLAIM log for one consumer's claim.
struct Claim<'a> {
    ekey: Bytes,
    group: &'a [u8],
    consumer: &'a [u8],
    now: u64,
}

impl Claim<'_> {
    /// The consumer seen (if `touched`), the pending entries found deleted
    /// acknowledged, the rest moved to the consumer.
    fn ops(
        self,
        ops: &mut Vec<Op>,
        touched: bool,
        gone: Vec<StreamId>,
        claimed: Vec<(StreamId, u64, u64)>,
    ) {
        if touched {
            ops.push(Op::ConsumerTouch {
                key: self.ekey.clone(),
                group: self.group.into(),
                consumer: self.consumer.into(),
                seen_ms: self.now,
            });
        }
        if !gone.is_empty() {
            ops.push(Op::PendingAck {
                key: self.ekey.clone(),
                group: self.group.into(),
                ids: gone,
            });
        }
        if !claimed.is_empty() {
            ops.push(Op::PendingClaim {
                key: self.ekey,
                group: self.group.into(),
                consumer: self.consumer.into(),
                entries: claimed,
            });
        }
    }
}

/// An ID as XCLAIM reads its ID list: the first argument that is not one
/// starts the options.
fn parse_id_full_quiet(arg: &[u8]) -> Option<StreamId> {
    parse_strict_id(arg).ok()
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]
fn xautoclaim(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, group, consumer) = (args.get(1), args.get(2), args.get(3));
    let min_idle = int_or(
        args.get(4),
        "ERR Invalid min-idle-time argument for XAUTOCLAIM",
    )?
    .max(0);
    let start = parse_interval(args.get(5), true)?;
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if is(args.get(j), "count") && more > 0 {
            let max = i64::MAX / 16;
            count = crate::resp::parse_int(args.get(j + 1))
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| err("ERR COUNT must be > 0"))?;
            j += 1;
        } else if is(args.get(j), "justid") {
            justid = true;
        } else {
            return Err(err(SYNTAX));
        }
        j += 1;
    }
    let (next, body, deleted, created) = ctx.write(&[key], false, |txn, db, now| {
        let (stream, state) = claim_group(txn, db, key, group, now)?;
        let mut attempts = count.saturating_mul(10);
        let mut left = count;
        let mut out = ReplyWriter::new();
        let mut replies = 0;
        let mut claimed = Vec::new();
        let mut gone = Vec::new();
        let mut ids = state.pel().range(start..);
        let mut next = StreamId::MIN;
        loop {
            if attempts == 0 || left == 0 {
                next = ids.next().map_or(StreamId::MIN, |(id, _)| *id);
                break;
            }
            let Some((&id, pending)) = ids.next() else {
                break;
            };
            attempts -= 1;
            if !stream.contains(id) {
                gone.push(id);
                left -= 1;
                continue;
            }
            if min_idle > 0 && (now as i64 - pending.delivery_ms as i64) < min_idle {
                continue;
            }
            let deliveries = if justid {
                pending.deliveries
            } else {
                pending.deliveries + 1
            };
            claimed.push((id, now, deliveries));
            if justid {
                reply_id(&mut out, id);
            } else {
                reply_entry(&mut out, &stream.get(id).expect("exists"));
            }
            replies += 1;
            left -= 1;
        }
        let claim = Claim {
            ekey: ckey(db, key)?,
            group,
            consumer,
            now,
        };
        let mut ops = Vec::new();
        let created = !claimed.is_empty() && state.consumer(consumer).is_none();
        claim.ops(&mut ops, !claimed.is_empty(), gone.clone(), claimed);
        txn.log(ops)?;
        let mut body = ReplyWriter::new();
        body.array(replies);
        body.buf.extend_from_slice(&out.buf);
        Ok((next, body.buf, gone, created))
    })?;
    if created {
        ctx.notify(crate::notify::STREAM, "xgroup-createconsumer", key);
    }
    ctx.out.array(3);
    reply_id(ctx.out, next);
    ctx.out.buf.extend_from_slice(&body);
    ctx.out.array(deleted.len());
    for id in deleted {
        reply_id(ctx.out, id);
    }
    Ok(())
}

// ---- XINFO ----

/// XINFO STREAM key [FULL [COUNT count]] | GROUPS key | CONSUMERS key group | HELP
fn xinfo(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    let name = lowercase(sub);
    if name == "help" {
        if args.len() != 2 {
            return Err(wrong_sub_arity("xinfo", sub));
        }
        help(
            ctx.out,
            "XINFO",
            &[
                "CONSUMERS <key> <groupname>",
                "    Show consumers of <groupname>.",
                "GROUPS <key>",
                "    Show the stream consumer groups.",
                "STREAM <key> [FULL [COUNT <count>]",
                "    Show information about the stream.",
            ],
        );
        return Ok(());
    }
    let arity_ok = match name.as_str() {
        "consumers" => args.len() == 4,
        "groups" => args.len() == 3,
        "stream" => args.len() >= 3,
        _ => return Err(unknown_subcommand("xinfo", sub)),
    };
    if !arity_ok {
        return Err(wrong_sub_arity("xinfo", sub));
    }
    let key = args.get(2);
    // XINFO STREAM's options, checked before the key.
    let mut full = None;
    if name == "stream" && args.len() > 3 {
        let options = args.len() - 3;
        if (options != 1 && options != 3) || !is(args.get(3), "full") {
            return Err(super::super::subcommand_syntax_error("XINFO", sub));
        }
        let mut count = 10;
        if options == 3 {
            if !is(args.get(4), "count") {
                return Err(super::super::subcommand_syntax_error("XINFO", sub));
            }
            count = parse_i64(args.get(5))?;
            if count < 0 {
                count = 10;
            }
        }
        full = Some(count as u64);
    }
    let now = ctx.now_ms;
    ctx.reply_collection(key, CKind::Stream, |out, object| {
        let Some(stream) = as_stream(object)? else {
            return Err(err("ERR no such key"));
        };
        match name.as_str() {
            "consumers" => {
                let group = args.get(3);
                let Some(state) = stream.group(group) else {
                    return Err(err(format!(
                        "NOGROUP No such consumer group '{}' for key name '{}'",
                        text(group),
                        text(key)
                    )));
                };
                out.array(state.consumers().len());
                for (name, consumer) in state.consumers() {
                    out.map(3);
                    out.bulk(b"name");
                    out.bulk(name);
                    out.bulk(b"pending");
                    out.int(consumer.pending().len() as i64);
                    out.bulk(b"idle");
                    out.int((now as i64 - consumer.seen_ms as i64).max(0));
                }
            }
            "groups" => {
                out.array(stream.groups().len());
                for (name, group) in stream.groups() {
                    out.map(6);
                    out.bulk(b"name");
                    out.bulk(name);
                    out.bulk(b"consumers");
                    out.int(group.consumers().len() as i64);
                    out.bulk(b"pending");
                    out.int(group.pel().len() as i64);
                    out.bulk(b"last-delivered-id");
                    reply_id(out, group.last_id);
                    reply_read_and_lag(out, stream, group);
                }
            }
            _ => info_stream(out, stream, full),
        }
        Ok(())
    })
}

fn reply_read_and_lag(out: &mut ReplyWriter, stream: &Stream, group: &StreamGroup) {
    out.bulk(b"entries-read");
    if group.entries_read >= 0 {
        out.int(group.entries_read);
    } else {
        out.null();
    }
    out.bulk(b"lag");
    match stream.lag(group) {
        Some(lag) => out.int(lag as i64),
        None => out.null(),
    }
}

fn info_stream(out: &mut ReplyWriter, stream: &Stream, full: Option<u64>) {
    out.map(if full.is_some() { 9 } else { 10 });
    out.bulk(b"length");
    out.int(stream.len() as i64);
    out.bulk(b"radix-tree-keys");
    out.int(stream.node_count() as i64);
    out.bulk(b"radix-tree-nodes");
    // Ours is a B-tree; this is the count Redis's radix tree has for no
    // key or one (a root, and a compressed node per key), and about its
    // count beyond.
    out.int(stream.node_count() as i64 + 1);
    out.bulk(b"last-generated-id");
    reply_id(out, stream.last_id());
    out.bulk(b"max-deleted-entry-id");
    reply_id(out, stream.max_deleted_id());
    out.bulk(b"entries-added");
    out.int(stream.entries_added() as i64);
    out.bulk(b"recorded-first-entry-id");
    reply_id(out, stream.first_id());
    let Some(count) = full else {
        out.bulk(b"groups");
        out.int(stream.groups().len() as i64);
        out.bulk(b"first-entry");
        match stream.iter().next() {
            Some(entry) => reply_entry(out, &entry),
            None => out.null(),
        }
        out.bulk(b"last-entry");
        match stream.rev_range(StreamId::MIN, StreamId::MAX).next() {
            Some(entry) => reply_entry(out, &entry),
            None => out.null(),
        }
        return;
    };
    let take = if count == 0 {
        usize::MAX
    } else {
        count as usize
    };
    out.bulk(b"entries");
    let entries: Vec<_> = stream.iter().take(take).collect();
    out.array(entries.len());
    for entry in &entries {
        reply_entry(out, entry);
    }
    out.bulk(b"groups");
    out.array(stream.groups().len());
    for (name, group) in stream.groups() {
        out.map(7);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"last-delivered-id");
        reply_id(out, group.last_id);
        reply_read_and_lag(out, stream, group);
        out.bulk(b"pel-count");
        out.int(group.pel().len() as i64);
        out.bulk(b"pending");
        let pel: Vec<_> = group.pel().iter().take(take).collect();
        out.array(pel.len());
        for (id, pending) in pel {
            out.array(4);
            reply_id(out, *id);
            out.bulk(&pending.consumer);
            out.int(pending.delivery_ms as i64);
            out.int(pending.deliveries as i64);
        }
        out.bulk(b"consumers");
        out.array(group.consumers().len());
        for (name, consumer) in group.consumers() {
            out.map(4);
            out.bulk(b"name");
            out.bulk(name);
            out.bulk(b"seen-time");
            out.int(consumer.seen_ms as i64);
            out.bulk(b"pel-count");
            out.int(consumer.pending().len() as i64);
            out.bulk(b"pending");
            let ids: Vec<_> = consumer.pending().iter().take(take).collect();
            out.array(ids.len());
            for id in ids {
                let pending = &group.pel()[id];
                out.array(3);
                reply_id(out, *id);
                out.int(pending.delivery_ms as i64);
                out.int(pending.deliveries as i64);
            }
        }
    }
}
