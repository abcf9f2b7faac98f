//! XREAD and XREADGROUP, with BLOCK.
//!
//! Blocking works as for the list pops (`lists`): finding nothing, the
//! command records what it waits for and the connection runs it again
//! after a write to one of its keys. XREAD's `$` means "after the last ID
//! when I blocked", so the command kept for the retries has each `$`
//! replaced by that ID. XREADGROUP's retries take their turn in the
//! key's line (`WaitLines::first_in_line`), so entries go to the consumers
//! in the order they blocked; XREAD takes nothing and serves everyone.

use std::time::{Duration, Instant};

use engram_collections::types::StreamId;
use engram_collections::Op;

use super::super::lists::BlockingRules;
use super::super::{
    err, is, CmdError, CmdResult, CommandSpec, Ctx, Group, READONLY, SYNTAX, WRITE,
};
use super::{as_stream, parse_strict_id, reply_entry, reply_id, stream_in};
use crate::keyspace::{ckey, CKind};
use crate::resp::{Args, OwnedArgs, ReplyWriter};
use crate::session::Blocked;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("stream");
    vec![
        g.command(
            "xread",
            -4,
            READONLY,
            (0, 0, 0),
            xread,
            "Returns messages from multiple streams with IDs greater than the ones requested. \
             Blocks until a message is available otherwise.",
        ),
        g.command(
            "xreadgroup",
            -7,
            WRITE,
            (0, 0, 0),
            xreadgroup,
            "Returns new or historical messages from a stream for a consumer in agroup. \
             Blocks until a message is available otherwise.",
        ),
    ]
}

/// Where each stream's ID says to read from.
#[derive(Clone, Copy)]
enum From {
    /// After this ID.
    After(StreamId),
    /// XREAD's `$`: after the stream's last ID.
    Last,
    /// XREADGROUP's `>`: entries never delivered to the group.
    New,
}

struct ReadArgs<'a> {
    block: Option<Option<Duration>>,
    count: u64,
    group: Option<(&'a [u8], &'a [u8])>,
    noack: bool,
    keys: Vec<&'a [u8]>,
    from: Vec<From>,
    /// Where the IDs start in the arguments.
    ids_at: usize,
}

fn parse<'a>(args: &Args<'a>, group_command: bool) -> Result<ReadArgs<'a>, CmdError> {
    let mut parsed = ReadArgs {
        block: None,
        count: 0,
        group: None,
        noack: false,
        keys: Vec::new(),
        from: Vec::new(),
        ids_at: 0,
    };
    let mut streams_at = 0;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let option = args.get(i);
        if is(option, "block") && more > 0 {
            i += 1;
            let ms = crate::resp::parse_int(args.get(i))
                .ok_or_else(|| err("ERR timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(err("ERR timeout is negative"));
            }
            parsed.block = Some((ms > 0).then(|| Duration::from_millis(ms as u64)));
        } else if is(option, "count") && more > 0 {
            i += 1;
            parsed.count = super::count_arg(args.get(i))?;
        } else if is(option, "streams") && more > 0 {
            streams_at = i + 1;
            let n = args.len() - streams_at;
            if !n.is_multiple_of(2) {
                return Err(err(
                    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' \
                     must be specified.",
                ));
            }
            break;
        } else if is(option, "group") && more >= 2 {
            if !group_command {
                return Err(err(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD \
                     instead.",
                ));
            }
            parsed.group = Some((args.get(i + 1), args.get(i + 2)));
            i += 2;
        } else if is(option, "noack") {
            if !group_command {
                return Err(err(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD \
                     instead.",
                ));
            }
            parsed.noack = true;
        } else {
            return Err(err(SYNTAX));
        }
        i += 1;
    }
    if streams_at == 0 {
        return Err(err(SYNTAX));
    }
    if group_command && parsed.group.is_none() {
        return Err(err("ERR Missing GROUP option for XREADGROUP"));
    }
    let n = (args.len() - streams_at) / 2;
    parsed.ids_at = streams_at + n;
    parsed.keys = (streams_at..streams_at + n).map(|i| args.get(i)).collect();
    for i in parsed.ids_at..args.len() {
        let arg = args.get(i);
        parsed.from.push(if arg == b"$" {
            if group_command {
                return Err(err(
                    "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read \
                     the history of this consumer by specifying a proper ID, or use the > ID \
                     to get new messages. The $ ID would just return an empty result set.",
                ));
            }
            From::Last
        } else if arg == b">" {
            if !group_command {
                return Err(err(
                    "ERR The > ID can be specified only when calling XREADGROUP using the \
                     GROUP <group> <consumer> option.",
                ));
            }
            From::New
        } else {
            From::After(parse_strict_id(arg)?)
        });
    }
    Ok(parsed)
}

/// Starts a reply of `n` streams (an array in RESP2, a map in RESP3).
fn reply_streams(out: &mut ReplyWriter, n: usize) {
    if out.is_resp3() {
        out.map(n);
    } else {
        out.array(n);
    }
}

fn key_entries_header(out: &mut ReplyWriter, key: &[u8]) {
    if !out.is_resp3() {
        out.array(2);
    }
    out.bulk(key);
}

/// Blocks: the connection runs `command` again after a write to `keys`.
fn block(ctx: &mut Ctx, keys: &[&[u8]], timeout: Option<Duration>, command: OwnedArgs) {
    ctx.session.blocked = Some(Blocked {
        db: ctx.session.db,
        keys: keys.iter().map(|&key| Box::from(key)).collect(),
        deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
        command,
        on_timeout: ReplyWriter::null_array,
        proposed: false,
    });
}

/// XREAD [COUNT count] [BLOCK ms] STREAMS key [key ...] id [id ...]
fn xread(ctx: &mut Ctx, args: Args) -> CmdResult {
    let parsed = parse(&args, false)?;
    let take = if parsed.count == 0 {
        usize::MAX
    } else {
        usize::try_from(parsed.count).unwrap_or(usize::MAX)
    };
    // The reply is built aside: a key of another type met later is an
    // error for the whole command.
    let mut body = ReplyWriter::new();
    body.set_resp3(ctx.out.is_resp3());
    let mut served = 0;
    let mut resolved: Vec<StreamId> = Vec::with_capacity(parsed.keys.len());
    let retrying = ctx.session.retrying;
    for (key, from) in parsed.keys.iter().zip(&parsed.from) {
        let from = *from;
        let found = ctx.read_collection(key, CKind::Stream, |object| {
            let stream = match as_stream(object) {
                Err(e) if !retrying => return Err(e),
                Err(_) => None,
                Ok(stream) => stream,
            };
            let after = match from {
                From::After(id) => id,
                From::Last => stream.map_or(StreamId::MIN, |s| s.last_id()),
                From::New => unreachable!("XREAD refuses >"),
            };
            let Some(stream) = stream else {
                return Ok((after, None));
            };
            let newer = stream.last_entry_id().is_some_and(|last| last > after);
            if !newer {
                return Ok((after, None));
            }
            let mut entries = ReplyWriter::new();
            entries.set_resp3(body.is_resp3());
            let start = after.next().unwrap_or(StreamId::MAX);
            let list: Vec<_> = stream.range(start, StreamId::MAX).take(take).collect();
            entries.array(list.len());
            for entry in &list {
                reply_entry(&mut entries, entry);
            }
            Ok((after, Some(entries.buf.to_vec())))
        });
        // Tried again after a wakeup, a key of another type is no stream
        // yet: the wait goes on (Redis wakes stream readers only for
        // streams).
        let found = match found {
            Err(e) if retrying && e.0.starts_with("WRONGTYPE") => (
                match from {
                    From::After(id) => id,
                    _ => StreamId::MIN,
                },
                None,
            ),
            other => other?,
        };
        resolved.push(found.0);
        if let Some(entries) = found.1 {
            key_entries_header(&mut body, key);
            body.buf.extend_from_slice(&entries);
            served += 1;
        }
    }
    if served > 0 {
        reply_streams(ctx.out, served);
        ctx.out.buf.extend_from_slice(&body.buf);
        return Ok(());
    }
    match parsed.block {
        Some(timeout) if ctx.exec.is_none() => {
            // Each `$` becomes the ID it meant now.
            let texts: Vec<String> = resolved.iter().map(|id| id.to_string()).collect();
            let mut parts: Vec<&[u8]> = (0..parsed.ids_at).map(|i| args.get(i)).collect();
            parts.extend(texts.iter().map(|t| t.as_bytes()));
            let command = OwnedArgs::from_slices(&parts);
            block(ctx, &parsed.keys, timeout, command);
        }
        _ => ctx.out.null_array(),
    }
    Ok(())
}

/// XREADGROUP GROUP group consumer [COUNT count] [BLOCK ms] [NOACK]
/// STREAMS key [key ...] id [id ...]
fn xreadgroup(ctx: &mut Ctx, args: Args) -> CmdResult {
    let parsed = parse(&args, true)?;
    let (group, consumer) = parsed.group.expect("checked");
    let take = if parsed.count == 0 {
        usize::MAX
    } else {
        usize::try_from(parsed.count).unwrap_or(usize::MAX)
    };
    let rules = BlockingRules::of(ctx, parsed.block.is_some());
    let shared = ctx.shared;
    let resp3 = ctx.out.is_resp3();
    let noack = parsed.noack;
    let keys = parsed.keys.clone();
    let from = parsed.from.clone();
    // Keys whose group got the consumer by this read (Redis announces the
    // implicit creation: xgroup-createconsumer).
    let mut created: Vec<Vec<u8>> = Vec::new();
    let reply =
        ctx.write(&keys, false, |txn, db, now| {
            created.clear();
            // Every key must hold the group before anything is served.
            for key in &keys {
                let stream = match stream_in(txn, db, key, now) {
                    Err(e) if rules.retrying && e.0.starts_with("WRONGTYPE") => None,
                    Err(e) => return Err(e),
                    Ok(stream) => stream,
                };
                match stream {
                    None if rules.retrying => {
                        return Err(err("UNBLOCKED the stream key no longer exists"))
                    }
                    Some(stream) if stream.group(group).is_some() => {}
                    _ if rules.retrying => return Err(err(
                        "NOGROUP the consumer group this client was blocked on no longer exists",
                    )),
                    _ => {
                        return Err(err(format!(
                            "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with \
                         GROUP option",
                            String::from_utf8_lossy(key),
                            String::from_utf8_lossy(group)
                        )))
                    }
                }
            }
            let mut body = ReplyWriter::new();
            body.set_resp3(resp3);
            let mut served = 0;
            for (key, from) in keys.iter().zip(&from) {
                let ekey = ckey(db, key)?;
                if rules.wait_in_line && !shared.wait_lines.first_in_line(rules.client, &ekey) {
                    continue;
                }
                let stream = stream_in(txn, db, key, now)?.expect("checked above");
                let state = stream.group(group).expect("checked above");
                let mut ops = Vec::new();
                let mut entries = ReplyWriter::new();
                entries.set_resp3(resp3);
                match from {
                    From::New => {
                        let start = state.last_id.next().unwrap_or(StreamId::MAX);
                        let newer = stream
                            .last_entry_id()
                            .is_some_and(|last| last > state.last_id);
                        if !newer {
                            continue;
                        }
                        if !rules.may_serve() {
                            return Ok(None);
                        }
                        let list: Vec<_> = stream.range(start, StreamId::MAX).take(take).collect();
                        let mut entries_read = state.entries_read;
                        let mut last = state.last_id;
                        for entry in &list {
                            entries_read = stream.entries_read_after(entries_read, entry.id);
                            last = entry.id;
                        }
                        entries.array(list.len());
                        for entry in &list {
                            reply_entry(&mut entries, entry);
                        }
                        if state.consumer(consumer).is_none() {
                            created.push(key.to_vec());
                        }
                        ops.push(Op::ConsumerTouch {
                            key: ekey.clone(),
                            group: group.into(),
                            consumer: consumer.into(),
                            seen_ms: now,
                        });
                        if !list.is_empty() {
                            ops.push(Op::GroupSetId {
                                key: ekey.clone(),
                                group: group.into(),
                                last_id: last,
                                entries_read,
                            });
                            if !noack {
                                ops.push(Op::PendingClaim {
                                    key: ekey.clone(),
                                    group: group.into(),
                                    consumer: consumer.into(),
                                    entries: list.iter().map(|e| (e.id, now, 1)).collect(),
                                });
                            }
                        }
                    }
                    From::After(after) => {
                        // The consumer's own history.
                        let start = match after.next() {
                            Some(start) => start,
                            None => StreamId::MAX,
                        };
                        let owned: Vec<StreamId> = state
                            .consumer(consumer)
                            .map(|c| c.pending().range(start..).take(take).copied().collect())
                            .unwrap_or_default();
                        entries.array(owned.len());
                        let mut redelivered = Vec::new();
                        for id in owned {
                            match stream.get(id) {
                                Some(entry) => {
                                    reply_entry(&mut entries, &entry);
                                    let deliveries = state.pel()[&id].deliveries + 1;
                                    redelivered.push((id, now, deliveries));
                                }
                                None => {
                                    entries.array(2);
                                    reply_id(&mut entries, id);
                                    entries.null_array();
                                }
                            }
                        }
                        if state.consumer(consumer).is_none() {
                            created.push(key.to_vec());
                        }
                        ops.push(Op::ConsumerTouch {
                            key: ekey.clone(),
                            group: group.into(),
                            consumer: consumer.into(),
                            seen_ms: now,
                        });
                        if !redelivered.is_empty() {
                            ops.push(Op::PendingClaim {
                                key: ekey.clone(),
                                group: group.into(),
                                consumer: consumer.into(),
                                entries: redelivered,
                            });
                        }
                    }
                    From::Last => unreachable!("XREADGROUP refuses $"),
                }
                txn.log(ops)?;
                key_entries_header(&mut body, key);
                body.buf.extend_from_slice(&entries.buf);
                served += 1;
            }
            Ok((served > 0).then_some((served, body.buf)))
        });
    let reply = match reply {
        Err(e) if rules.retrying => {
            // The wait ends with the error.
            return Err(e);
        }
        other => other?,
    };
    for key in &created {
        ctx.notify(crate::notify::STREAM, "xgroup-createconsumer", key);
    }
    match reply {
        Some((served, body)) => {
            reply_streams(ctx.out, served);
            ctx.out.buf.extend_from_slice(&body);
        }
        None => match parsed.block {
            Some(timeout) if ctx.exec.is_none() => {
                let command = args.to_owned();
                block(ctx, &parsed.keys, timeout, command);
            }
            _ => ctx.out.null_array(),
        },
    }
    Ok(())
}
