//! Pops from several sorted sets: ZMPOP, and the blocking BZMPOP,
//! BZPOPMIN and BZPOPMAX, which wait through the lists' blocking machinery
//! (`lists::block`, retried after a write to one of the keys, served in
//! the order clients blocked; see the `lists` module).
//!
//! As with lists, a key of another type met on a retry after a wakeup
//! does not end the wait unless a sorted set it could be served from
//! follows it (Redis wakes a client only for a key holding a sorted set).

use engram_collections::types::SortedSet;
use engram_collections::Op;

use super::{reply_score, zset_of};
use crate::commands::lists::{block, parse_timeout, BlockingRules};
use crate::commands::{err, is, CmdError, CmdResult, CommandSpec, Ctx, Group, SYNTAX, WRITE};
use crate::keyspace::{self, ckey, CKind};
use crate::resp::{parse_int, Args, ReplyWriter};

pub(super) fn commands(g: &Group) -> Vec<CommandSpec> {
    vec![
        g.command(
            "zmpop",
            -4,
            WRITE,
            (2, -1, 1),
            zmpop,
            "Returns the highest- or lowest-scoring members from one or more sorted sets \
             after removing them.",
        ),
        g.command(
            "bzmpop",
            -5,
            WRITE,
            (3, -1, 1),
            bzmpop,
            "Removes and returns a member by score from one or more sorted sets. Blocks \
             until a member is available otherwise.",
        ),
        g.command(
            "bzpopmin",
            -3,
            WRITE,
            (1, -2, 1),
            bzpopmin,
            "Removes and returns the member with the lowest score from one or more sorted \
             sets. Blocks until a member is available otherwise.",
        ),
        g.command(
            "bzpopmax",
            -3,
            WRITE,
            (1, -2, 1),
            bzpopmax,
            "Removes and returns the member with the highest score from one or more sorted \
             sets. Blocks until a member is available otherwise.",
        ),
    ]
}

/// The members (and scores) a pop of `n` takes: lowest first, or highest
/// first with `max`.
pub(super) fn take(zset: &SortedSet, max: bool, n: usize) -> Vec<(Box<[u8]>, f64)> {
    let n = n.min(zset.len());
    if max {
        zset.range_rev(zset.len() - n..zset.len())
            .map(|(member, score)| (member.into(), score))
            .collect()
    } else {
        zset.range(0..n)
            .map(|(member, score)| (member.into(), score))
            .collect()
    }
}

/// Which key a multi-key pop took from (its position) and what it took.
type Popped = (usize, Vec<(Box<[u8]>, f64)>);

/// Pops up to `count` members from the first of `keys` holding a sorted
/// set. `blocking`: a blocking command's rules (the line of blocked
/// clients; a key of another type met on a retry).
fn pop_first(
    ctx: &mut Ctx,
    keys: &[&[u8]],
    max: bool,
    count: usize,
    blocking: bool,
) -> Result<Option<Popped>, CmdError> {
    let rules = BlockingRules::of(ctx, blocking);
    let shared = ctx.shared;
    let popped = ctx.write(keys, false, |txn, db, now| {
        let mut wrong_type = false;
        for (at, key) in keys.iter().enumerate() {
            let zset = match txn.collection(db, key, CKind::SortedSet, now) {
                Err(keyspace::Error::WrongType) if rules.retrying => {
                    wrong_type = true;
                    continue;
                }
                Err(e) => return Err(e.into()),
                Ok(object) => match zset_of(object) {
                    Some(zset) if !zset.is_empty() => zset,
                    _ => continue,
                },
            };
            let ekey = ckey(db, key)?;
            if rules.wait_in_line && !shared.wait_lines.first_in_line(rules.client, &ekey) {
                continue;
            }
            if wrong_type {
                return Err(err(crate::commands::WRONGTYPE));
            }
            if !rules.may_serve() {
                return Ok(None);
            }
            let popped = take(zset, max, count);
            let emptied = popped.len() == zset.len();
            txn.log(vec![Op::SortedSetRemove {
                key: ekey,
                members: popped.iter().map(|(member, _)| member.clone()).collect(),
            }])?;
            return Ok(Some((at, popped, emptied)));
        }
        Ok(None)
    })?;
    Ok(popped.map(|(at, popped, emptied)| {
        let event = if max { "zpopmax" } else { "zpopmin" };
        super::notify_removed(ctx, event, keys[at], (popped.len(), emptied));
        (at, popped)
    }))
}

/// `ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]` and BZMPOP's
/// arguments from `numkeys` on: the keys, whether MAX, the count.
fn parse_mpop<'a>(
    args: &Args<'a>,
    numkeys_at: usize,
) -> Result<(Vec<&'a [u8]>, bool, usize), CmdError> {
    let numkeys = parse_int(args.get(numkeys_at))
        .filter(|&n| n >= 1)
        .ok_or_else(|| err("ERR numkeys should be greater than 0"))?;
    let where_at = (numkeys as u64)
        .checked_add(numkeys_at as u64 + 1)
        .filter(|&at| at < args.len() as u64)
        .ok_or_else(|| err(SYNTAX))? as usize;
    let where_arg = args.get(where_at);
    let max = if is(where_arg, "min") {
        false
    } else if is(where_arg, "max") {
        true
    } else {
        return Err(err(SYNTAX));
    };
    let mut count = None;
    let mut i = where_at + 1;
    while i < args.len() {
        if count.is_none() && is(args.get(i), "count") && i + 1 < args.len() {
            let n = parse_int(args.get(i + 1))
                .filter(|&n| n >= 1)
                .ok_or_else(|| err("ERR count should be greater than 0"))?;
            count = Some(n);
            i += 2;
        } else {
            return Err(err(SYNTAX));
        }
    }
    let keys = (numkeys_at + 1..where_at).map(|i| args.get(i)).collect();
    let count = usize::try_from(count.unwrap_or(1)).unwrap_or(usize::MAX);
    Ok((keys, max, count))
}

/// `[key, [[member, score], ...]]`: ZMPOP and BZMPOP, in RESP2 and RESP3.
fn reply_key_and_members(out: &mut ReplyWriter, key: &[u8], popped: &[(Box<[u8]>, f64)]) {
    out.array(2);
    out.bulk(key);
    out.array(popped.len());
    for (member, score) in popped {
        out.array(2);
        out.bulk(member);
        reply_score(out, *score);
    }
}

fn zmpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (keys, max, count) = parse_mpop(&args, 1)?;
    match pop_first(ctx, &keys, max, count, false)? {
        Some((at, popped)) => reply_key_and_members(ctx.out, keys[at], &popped),
        None => ctx.out.null_array(),
    }
    Ok(())
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]
fn bzmpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    // Redis parses the timeout after everything else.
    let (keys, max, count) = parse_mpop(&args, 2)?;
    let timeout = parse_timeout(args.get(1))?;
    match pop_first(ctx, &keys, max, count, true)? {
        Some((at, popped)) => reply_key_and_members(ctx.out, keys[at], &popped),
        None if ctx.exec.is_some() => ctx.out.null_array(),
        None => block(ctx, &args, &keys, timeout),
    }
    Ok(())
}

fn bzpopmin(ctx: &mut Ctx, args: Args) -> CmdResult {
    bzpop(ctx, args, false)
}

fn bzpopmax(ctx: &mut Ctx, args: Args) -> CmdResult {
    bzpop(ctx, args, true)
}

/// BZPOPMIN/BZPOPMAX key [key ...] timeout: `[key, member, score]`.
fn bzpop(ctx: &mut Ctx, args: Args, max: bool) -> CmdResult {
    let timeout = parse_timeout(args.get(args.len() - 1))?;
    let keys: Vec<&[u8]> = (1..args.len() - 1).map(|i| args.get(i)).collect();
    match pop_first(ctx, &keys, max, 1, true)? {
        Some((at, popped)) => {
            let (member, score) = &popped[0];
            ctx.out.array(3);
            ctx.out.bulk(keys[at]);
            ctx.out.bulk(member);
            reply_score(ctx.out, *score);
        }
        None if ctx.exec.is_some() => ctx.out.null_array(),
        None => block(ctx, &args, &keys, timeout),
    }
    Ok(())
}
