//! List commands, blocking ones included (Redis 7.0 semantics).
//!
//! Writes log resolved operations (`Op::List*`): the handler reads the list
//! under the key's lock, decides (LINSERT's pivot, LSET's index, how many a
//! pop takes) and logs one record, or nothing when nothing changes.
//!
//! ## Blocking (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP)
//!
//! A blocking command first tries like its plain form. Finding nothing, it
//! replies nothing and records in the session what it waits for; the
//! connection (see `connection`) waits for a write to one of the keys and
//! runs the command again, until it is served or times out. Inside
//! MULTI/EXEC it never blocks: it answers at once as if timed out.
//!
//! Clients blocked on a key are served in the order they blocked (Redis's
//! rule): a woken client takes from a key only if it is first in that key's
//! line (`WaitLines::first_in_line`). When tried again after a wakeup, a key
//! holding another type does not end the wait unless a list it could be
//! served from follows it: Redis only runs the command again when a key it
//! waits on holds a list, and the command then fails on the earlier key.
//!
//! CLIENT UNBLOCK may end a wait at any moment, a retry included: a retry
//! about to take an element first claims the client's blocked state
//! (`ClientInfo::claim_service`, under the key's lock, just before the
//! pop is logged). If CLIENT UNBLOCK came first, the retry takes nothing
//! and the element stays for the next client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_collections::types::List;
use engram_collections::Op;

use super::strings::parse_float;
use super::{
    err, int_arg, is, symmetric_int_arg, wrong_arity, CmdError, CmdResult, CommandSpec, Ctx, Group,
    FAST, READONLY, SYNTAX, WRITE, WRONGTYPE,
};
use crate::clients::ClientInfo;
use crate::keyspace::{self, ckey, now_ms, CKind, Object, Txn};
use crate::notify;
use crate::resp::{parse_int, Args, ReplyWriter};
use crate::session::Blocked;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("list");
    let one = (1, 1, 1);
    let two = (1, 2, 1);
    vec![
        g.command(
            "lpush",
            -3,
            WRITE | FAST,
            one,
            lpush,
            "Prepends one or more elements to a list. Creates the key if it doesn't exist.",
        ),
        g.command(
            "rpush",
            -3,
            WRITE | FAST,
            one,
            rpush,
            "Appends one or more elements to a list. Creates the key if it doesn't exist.",
        ),
        g.command(
            "lpushx",
            -3,
            WRITE | FAST,
            one,
            lpushx,
            "Prepends one or more elements to a list only when the list exists.",
        ),
        g.command(
            "rpushx",
            -3,
            WRITE | FAST,
            one,
            rpushx,
            "Appends an element to a list only when the list exists.",
        ),
        g.command(
            "lpop",
            -2,
            WRITE | FAST,
            one,
            lpop,
            "Returns the first elements in a list after removing it. Deletes the list if the \
             last element was popped.",
        ),
        g.command(
            "rpop",
            -2,
            WRITE | FAST,
            one,
            rpop,
            "Returns and removes the last elements of a list. Deletes the list if the last \
             element was popped.",
        ),
        g.command(
            "lrange",
            4,
            READONLY,
            one,
            lrange,
            "Returns a range of elements from a list.",
        ),
        g.command(
            "llen",
            2,
            READONLY | FAST,
            one,
            llen,
            "Returns the length of a list.",
        ),
        g.command(
            "lindex",
            3,
            READONLY,
            one,
            lindex,
            "Returns an element from a list by its index.",
        ),
        g.command(
            "lset",
            4,
            WRITE,
            one,
            lset,
            "Sets the value of an element in a list by its index.",
        ),
        g.command(
            "linsert",
            5,
            WRITE,
            one,
            linsert,
            "Inserts an element before or after another element in a list.",
        ),
        g.command(
            "lrem",
            4,
            WRITE,
            one,
            lrem,
            "Removes elements from a list. Deletes the list if the last element was removed.",
        ),
        g.command(
            "ltrim",
            4,
            WRITE,
            one,
            ltrim,
            "Removes elements from both ends a list. Deletes the list if all elements were \
             trimmed.",
        ),
        g.command(
            "lpos",
            -3,
            READONLY,
            one,
            lpos,
            "Returns the index of matching elements in a list.",
        ),
        g.command(
            "lmove",
            5,
            WRITE,
            two,
            lmove,
            "Returns an element after popping it from one list and pushing it to another. \
             Deletes the list if the last element was moved.",
        ),
        g.command(
            "rpoplpush",
            3,
            WRITE,
            two,
            rpoplpush,
            "Returns the last element of a list after removing and pushing it to another list. \
             Deletes the list if the last element was popped.",
        ),
        g.command(
            "lmpop",
            -4,
            WRITE,
            (2, -1, 1),
            lmpop,
            "Returns multiple elements from a list after removing them. Deletes the list if the \
             last element was popped.",
        ),
        g.command(
            "blpop",
            -3,
            WRITE,
            (1, -2, 1),
            blpop,
            "Removes and returns the first element in a list. Blocks until an element is \
             available otherwise. Deletes the list if the last element was popped.",
        ),
        g.command(
            "brpop",
            -3,
            WRITE,
            (1, -2, 1),
            brpop,
            "Removes and returns the last element in a list. Blocks until an element is \
             available otherwise. Deletes the list if the last element was popped.",
        ),
        g.command(
            "blmove",
            6,
            WRITE,
            two,
            blmove,
            "Pops an element from a list, pushes it to another list and returns it. Blocks \
             until an element is available otherwise. Deletes the list if the last element \
             was moved.",
        ),
        g.command(
            "brpoplpush",
            4,
            WRITE,
            two,
            brpoplpush,
            "Pops an element from a list, pushes it to another list and returns it. Blocks \
             until an element is available otherwise. Deletes the list if the last element \
             was popped.",
        ),
        g.command(
            "blmpop",
            -5,
            WRITE,
            (3, -1, 1),
            blmpop,
            "Pops the first element from one of multiple lists. Blocks until an element is \
             available otherwise. Deletes the list if the last element was popped.",
        ),
    ]
}

const NO_SUCH_KEY: &str = "ERR no such key";
const OUT_OF_RANGE: &str = "ERR index out of range";
const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

/// The list at `key` inside a write, None when absent (WRONGTYPE for
/// another type).
fn list_in<'t>(
    txn: &'t mut Txn,
    db: usize,
    key: &[u8],
    now: u64,
) -> Result<Option<&'t List>, CmdError> {
    match txn.collection(db, key, CKind::List, now)? {
        None => Ok(None),
        Some(Object::List(list)) => Ok(Some(list)),
        Some(_) => Err(err(WRONGTYPE)),
    }
}

/// The list of a read (`read_collection` has checked the kind).
fn as_list(object: Option<&Object>) -> Result<Option<&List>, CmdError> {
    match object {
        None => Ok(None),
        Some(Object::List(list)) => Ok(Some(list)),
        Some(_) => Err(err(WRONGTYPE)),
    }
}

/// Copies of the `n` elements a pop from the head (or tail) takes, in the
/// order a pop returns them.
fn take(list: &List, front: bool, n: usize) -> Vec<Box<[u8]>> {
    if front {
        list.iter().take(n).map(Box::from).collect()
    } else {
        list.iter().rev().take(n).map(Box::from).collect()
    }
}

fn bulk_array(out: &mut ReplyWriter, items: &[Box<[u8]>]) {
    out.array(items.len());
    for item in items {
        out.bulk(item);
    }
}

/// LEFT or RIGHT: true for the head.
fn side(arg: &[u8]) -> Result<bool, CmdError> {
    if is(arg, "left") {
        Ok(true)
    } else if is(arg, "right") {
        Ok(false)
    } else {
        Err(err(SYNTAX))
    }
}

/// A count that must be >= 0 (LPOP's), with Redis's message for anything
/// else, non-integers included.
fn positive(arg: &[u8], message: &str) -> Result<i64, CmdError> {
    parse_int(arg)
        .filter(|&n| n >= 0)
        .ok_or_else(|| err(message))
}

// ---- pushes ----

fn lpush(ctx: &mut Ctx, args: Args) -> CmdResult {
    push(ctx, args, true, false)
}

fn rpush(ctx: &mut Ctx, args: Args) -> CmdResult {
    push(ctx, args, false, false)
}

fn lpushx(ctx: &mut Ctx, args: Args) -> CmdResult {
    push(ctx, args, true, true)
}

fn rpushx(ctx: &mut Ctx, args: Args) -> CmdResult {
    push(ctx, args, false, true)
}

/// LPUSH/RPUSH, and with `only_existing` LPUSHX/RPUSHX.
fn push(ctx: &mut Ctx, args: Args, front: bool, only_existing: bool) -> CmdResult {
    let key = args.get(1);
    let values: Vec<&[u8]> = args.iter().skip(2).collect();
    let len = ctx.write(&[key], false, move |txn, db, now| {
        let current = txn.collection_len(db, key, CKind::List, now)?;
        if current.is_none() && only_existing {
            return Ok(0);
        }
        let len = current.unwrap_or(0) + values.len();
        txn.list_push(db, key, front, values)?;
        Ok(len)
    })?;
    if len > 0 {
        ctx.notify(notify::LIST, if front { "lpush" } else { "rpush" }, key);
    }
    ctx.out.int(len as i64);
    Ok(())
}

/// A pop's events: `lpop` or `rpop`, and `del` when it took the last
/// element.
fn notify_popped(ctx: &mut Ctx, key: &[u8], front: bool, emptied: bool) {
    ctx.notify(notify::LIST, if front { "lpop" } else { "rpop" }, key);
    if emptied {
        ctx.notify(notify::GENERIC, "del", key);
    }
}

// ---- pops ----

fn lpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    pop(ctx, args, true)
}

fn rpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    pop(ctx, args, false)
}

/// LPOP/RPOP key [count]: a bulk without a count, an array with one.
fn pop(ctx: &mut Ctx, args: Args, front: bool) -> CmdResult {
    if args.len() > 3 {
        return Err(wrong_arity(if front { "lpop" } else { "rpop" }));
    }
    let key = args.get(1);
    let count = match args.len() {
        3 => Some(positive(args.get(2), MUST_BE_POSITIVE)? as u64),
        _ => None,
    };
    let (popped, emptied) = ctx.write(&[key], false, |txn, db, now| {
        let Some(list) = list_in(txn, db, key, now)? else {
            return Ok((None, false));
        };
        let n = count.unwrap_or(1).min(list.len() as u64) as usize;
        if n == 0 {
            return Ok((Some(Vec::new()), false));
        }
        let emptied = n == list.len();
        let values = take(list, front, n);
        txn.log(vec![Op::ListPop {
            key: ckey(db, key)?,
            front,
            count: n as u64,
        }])?;
        Ok((Some(values), emptied))
    })?;
    if popped.as_ref().is_some_and(|v| !v.is_empty()) {
        notify_popped(ctx, key, front, emptied);
    }
    match (count, popped) {
        (None, None) => ctx.out.null(),
        (Some(_), None) => ctx.out.null_array(),
        (None, Some(values)) => ctx.out.bulk(&values[0]),
        (Some(_), Some(values)) => bulk_array(ctx.out, &values),
    }
    Ok(())
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count], and BLMPOP's
/// arguments from `numkeys` on: the keys, the side and the count.
fn parse_mpop<'a>(
    args: &Args<'a>,
    numkeys_at: usize,
) -> Result<(Vec<&'a [u8]>, bool, usize), CmdError> {
    let numkeys = parse_int(args.get(numkeys_at))
        .filter(|&n| n >= 1)
        .ok_or_else(|| err("ERR numkeys should be greater than 0"))?;
    let side_at = (numkeys as u64)
        .checked_add(numkeys_at as u64 + 1)
        .filter(|&at| at < args.len() as u64)
        .ok_or_else(|| err(SYNTAX))? as usize;
    let front = side(args.get(side_at))?;
    let mut count = None;
    let mut i = side_at + 1;
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
    let keys = (numkeys_at + 1..side_at).map(|i| args.get(i)).collect();
    let count = usize::try_from(count.unwrap_or(1)).unwrap_or(usize::MAX);
    Ok((keys, front, count))
}

fn lmpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (keys, front, count) = parse_mpop(&args, 1)?;
    match pop_first(ctx, &keys, front, count, false)? {
        Some((at, values)) => reply_key_and_values(ctx.out, keys[at], &values),
        None => ctx.out.null_array(),
    }
    Ok(())
}

/// `[key, [values...]]`: LMPOP and BLMPOP.
fn reply_key_and_values(out: &mut ReplyWriter, key: &[u8], values: &[Box<[u8]>]) {
    out.array(2);
    out.bulk(key);
    bulk_array(out, values);
}

/// Which key a multi-key pop took from (its position) and what it took.
type Popped = (usize, Vec<Box<[u8]>>);

/// Pops up to `count` elements from the first of `keys` holding a list:
/// that key's position and the elements. `blocking`: a blocking command's
/// rules (the line of blocked clients; a key of another type met when tried
/// again after a wakeup).
fn pop_first(
    ctx: &mut Ctx,
    keys: &[&[u8]],
    front: bool,
    count: usize,
    blocking: bool,
) -> Result<Option<Popped>, CmdError> {
    let rules = BlockingRules::of(ctx, blocking);
    let shared = ctx.shared;
    let popped = ctx.write(keys, false, |txn, db, now| {
        let mut wrong_type = false;
        for (at, key) in keys.iter().enumerate() {
            let list = match txn.collection(db, key, CKind::List, now) {
                Err(keyspace::Error::WrongType) if rules.retrying => {
                    wrong_type = true;
                    continue;
                }
                Err(e) => return Err(e.into()),
                Ok(None) => continue,
                Ok(Some(Object::List(list))) => list,
                Ok(Some(_)) => return Err(err(WRONGTYPE)),
            };
            let ekey = ckey(db, key)?;
            if rules.wait_in_line && !shared.wait_lines.first_in_line(rules.client, &ekey) {
                continue;
            }
            if wrong_type {
                return Err(err(WRONGTYPE));
            }
            if !rules.may_serve() {
                return Ok(None);
            }
            let n = count.min(list.len());
            let emptied = n == list.len();
            let values = take(list, front, n);
            txn.log(vec![Op::ListPop {
                key: ekey,
                front,
                count: n as u64,
            }])?;
            return Ok(Some((at, values, emptied)));
        }
        Ok(None)
    })?;
    Ok(popped.map(|(at, values, emptied)| {
        notify_popped(ctx, keys[at], front, emptied);
        (at, values)
    }))
}

/// How a blocking command's try differs from its plain form's.
pub(super) struct BlockingRules {
    /// Tried again after a wakeup (not the first try).
    pub(super) retrying: bool,
    /// Defer to clients blocked earlier: not inside EXEC (it cannot block,
    /// so it takes what it finds).
    pub(super) wait_in_line: bool,
    pub(super) client: u64,
    /// Tried again after a wakeup: the client, whose blocked state the
    /// retry must claim before it takes anything (CLIENT UNBLOCK may have
    /// ended the wait meanwhile).
    waiting: Option<Arc<ClientInfo>>,
}

impl BlockingRules {
    pub(super) fn of(ctx: &Ctx, blocking: bool) -> BlockingRules {
        let retrying = blocking && ctx.session.retrying;
        BlockingRules {
            retrying,
            wait_in_line: blocking && ctx.exec.is_none(),
            client: ctx.session.info.id,
            waiting: retrying.then(|| ctx.session.info.clone()),
        }
    }

    /// Whether the command may take what it found: always on a first
    /// try; on a retry only if CLIENT UNBLOCK has not ended the wait (and
    /// then no later CLIENT UNBLOCK can: the client is being served).
    pub(super) fn may_serve(&self) -> bool {
        match &self.waiting {
            None => true,
            Some(info) => info.claim_service(),
        }
    }
}

// ---- reads ----

fn lrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    let start = int_arg(args.get(2))?;
    let stop = int_arg(args.get(3))?;
    ctx.reply_collection(args.get(1), CKind::List, |out, object| {
        match as_list(object)? {
            None => out.array(0),
            Some(list) => {
                let range = list.range(start, stop);
                out.array(range.len());
                for item in range {
                    out.bulk(item);
                }
            }
        }
        Ok(())
    })
}

fn llen(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::List, |out, object| {
        out.int(as_list(object)?.map_or(0, List::len) as i64);
        Ok(())
    })
}

fn lindex(ctx: &mut Ctx, args: Args) -> CmdResult {
    let index = args.get(2);
    ctx.reply_collection(args.get(1), CKind::List, |out, object| {
        let Some(list) = as_list(object)? else {
            out.null();
            return Ok(());
        };
        match list.get(int_arg(index)?) {
            Some(item) => out.bulk(item),
            None => out.null(),
        }
        Ok(())
    })
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]
fn lpos(ctx: &mut Ctx, args: Args) -> CmdResult {
    let element = args.get(2);
    let mut rank = 1i64;
    let mut count: Option<u64> = None;
    let mut max_len = 0u64;
    let mut i = 3;
    while i < args.len() {
        let option = args.get(i);
        let value = (i + 1 < args.len()).then(|| args.get(i + 1));
        match value {
            Some(value) if is(option, "rank") => {
                rank = symmetric_int_arg(value)?;
                if rank == 0 {
                    return Err(err(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from \
                         the second ... or use negative to start from the end of the list",
                    ));
                }
            }
            Some(value) if is(option, "count") => {
                count = Some(positive(value, "ERR COUNT can't be negative")? as u64);
            }
            Some(value) if is(option, "maxlen") => {
                max_len = positive(value, "ERR MAXLEN can't be negative")? as u64;
            }
            _ => return Err(err(SYNTAX)),
        }
        i += 2;
    }
    let rank = std::num::NonZeroI64::new(rank).expect("checked above");
    ctx.reply_collection(args.get(1), CKind::List, |out, object| {
        let Some(list) = as_list(object)? else {
            match count {
                Some(_) => out.array(0),
                None => out.null(),
            }
            return Ok(());
        };
        let wanted = usize::try_from(count.unwrap_or(1)).unwrap_or(usize::MAX);
        let max_len = usize::try_from(max_len).unwrap_or(usize::MAX);
        let found = list.position(element, rank, wanted, max_len);
        match count {
            Some(_) => {
                out.array(found.len());
                for position in found {
                    out.int(position as i64);
                }
            }
            None => match found.first() {
                Some(&position) => out.int(position as i64),
                None => out.null(),
            },
        }
        Ok(())
    })
}

// ---- in-place writes ----

fn lset(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, index, value) = (args.get(1), args.get(2), args.get(3));
    ctx.write(&[key], false, |txn, db, now| {
        let Some(list) = list_in(txn, db, key, now)? else {
            return Err(err(NO_SUCH_KEY));
        };
        let index = int_arg(index)?;
        let Some(index) = engram_collections::types::resolve_index(index, list.len()) else {
            return Err(err(OUT_OF_RANGE));
        };
        txn.log(vec![Op::ListSet {
            key: ckey(db, key)?,
            index: index as u64,
            value: value.into(),
        }])?;
        Ok(())
    })?;
    ctx.notify(notify::LIST, "lset", key);
    ctx.out.ok();
    Ok(())
}

/// LINSERT key BEFORE|AFTER pivot element: the new length, -1 without the
/// pivot, 0 without the key.
fn linsert(ctx: &mut Ctx, args: Args) -> CmdResult {
    let before = if is(args.get(2), "before") {
        true
    } else if is(args.get(2), "after") {
        false
    } else {
        return Err(err(SYNTAX));
    };
    let (key, pivot, value) = (args.get(1), args.get(3), args.get(4));
    let len = ctx.write(&[key], false, |txn, db, now| {
        let Some(list) = list_in(txn, db, key, now)? else {
            return Ok(0);
        };
        if !list.iter().any(|item| item == pivot) {
            return Ok(-1);
        }
        let len = list.len() as i64 + 1;
        txn.log(vec![Op::ListInsert {
            key: ckey(db, key)?,
            before,
            pivot: pivot.into(),
            value: value.into(),
        }])?;
        Ok(len)
    })?;
    if len > 0 {
        ctx.notify(notify::LIST, "linsert", key);
    }
    ctx.out.int(len);
    Ok(())
}

/// LREM key count element: how many were removed.
fn lrem(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let count = int_arg(args.get(2))?;
    let value = args.get(3);
    let removed = ctx.write(&[key], false, |txn, db, now| {
        let Some(list) = list_in(txn, db, key, now)? else {
            return Ok((0, false));
        };
        let matches = list.iter().filter(|item| *item == value).count() as u64;
        let removed = match count {
            0 => matches,
            _ => matches.min(count.unsigned_abs()),
        };
        let emptied = removed == list.len() as u64;
        if removed > 0 {
            txn.log(vec![Op::ListRemove {
                key: ckey(db, key)?,
                count,
                value: value.into(),
            }])?;
        }
        Ok((removed, emptied))
    })?;
    let (removed, emptied) = removed;
    if removed > 0 {
        ctx.notify(notify::LIST, "lrem", key);
        if emptied {
            ctx.notify(notify::GENERIC, "del", key);
        }
    }
    ctx.out.int(removed as i64);
    Ok(())
}

fn ltrim(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let start = int_arg(args.get(2))?;
    let stop = int_arg(args.get(3))?;
    let trimmed = ctx.write(&[key], false, |txn, db, now| {
        let Some(list) = list_in(txn, db, key, now)? else {
            return Ok(None);
        };
        let keep = engram_collections::types::resolve_range(start, stop, list.len());
        if keep.len() == list.len() {
            // Redis announces an LTRIM of an existing list that keeps it whole too.
            return Ok(Some(false));
        }
        txn.log(vec![Op::ListTrim {
            key: ckey(db, key)?,
            start,
            stop,
        }])?;
        Ok(Some(keep.is_empty()))
    })?;
    if let Some(emptied) = trimmed {
        ctx.notify(notify::LIST, "ltrim", key);
        if emptied {
            ctx.notify(notify::GENERIC, "del", key);
        }
    }
    ctx.out.ok();
    Ok(())
}

// ---- moves ----

fn lmove(ctx: &mut Ctx, args: Args) -> CmdResult {
    let from_front = side(args.get(3))?;
    let to_front = side(args.get(4))?;
    let moved = move_one(ctx, args.get(1), args.get(2), from_front, to_front, false)?;
    reply_moved(ctx.out, moved);
    Ok(())
}

fn rpoplpush(ctx: &mut Ctx, args: Args) -> CmdResult {
    let moved = move_one(ctx, args.get(1), args.get(2), false, true, false)?;
    reply_moved(ctx.out, moved);
    Ok(())
}

fn reply_moved(out: &mut ReplyWriter, moved: Option<Box<[u8]>>) {
    match moved {
        Some(value) => out.bulk(&value),
        None => out.null(),
    }
}

/// LMOVE's work: pops one element from `source` and pushes it onto
/// `destination` (the same key: a rotation); the element, or None when the
/// source is empty. A destination of another type is WRONGTYPE, checked
/// before anything moves.
fn move_one(
    ctx: &mut Ctx,
    source: &[u8],
    destination: &[u8],
    from_front: bool,
    to_front: bool,
    blocking: bool,
) -> Result<Option<Box<[u8]>>, CmdError> {
    let rules = BlockingRules::of(ctx, blocking);
    let shared = ctx.shared;
    let moved = ctx.write(&[source, destination], false, |txn, db, now| {
        let list = match txn.collection(db, source, CKind::List, now) {
            // Tried again after a wakeup: the source still holds no list.
            Err(keyspace::Error::WrongType) if rules.retrying => return Ok(None),
            Err(e) => return Err(e.into()),
            Ok(None) => return Ok(None),
            Ok(Some(Object::List(list))) => list,
            Ok(Some(_)) => return Err(err(WRONGTYPE)),
        };
        let from = ckey(db, source)?;
        if rules.wait_in_line && !shared.wait_lines.first_in_line(rules.client, &from) {
            return Ok(None);
        }
        let emptied = list.len() == 1;
        let Some(value) = take(list, from_front, 1).pop() else {
            return Ok(None);
        };
        let op = if source == destination {
            // A rotation (of one element too: the key keeps its expiry).
            Op::ListMove {
                from: from.clone(),
                to: from,
                from_front,
                to_front,
            }
        } else {
            list_in(txn, db, destination, now)?;
            Op::ListMove {
                from,
                to: ckey(db, destination)?,
                from_front,
                to_front,
            }
        };
        if !rules.may_serve() {
            return Ok(None);
        }
        txn.log(vec![op])?;
        Ok(Some((value, emptied)))
    })?;
    Ok(moved.map(|(value, emptied)| {
        // Redis: the push's event, then the pop's (and `del`); a
        // rotation of one key has both.
        ctx.notify(
            notify::LIST,
            if to_front { "lpush" } else { "rpush" },
            destination,
        );
        notify_popped(ctx, source, from_front, emptied && source != destination);
        value
    }))
}

// ---- blocking ----

/// A blocking command's timeout in seconds (a float; 0: none), as Redis
/// 7.0 parses it: milliseconds rounded up. A time too large for Redis's
/// 64-bit milliseconds is "negative" there (its conversion overflows to
/// the most negative value), and is here too; one that fits but runs past
/// the end of time from now is out of range.
pub(crate) fn parse_timeout(arg: &[u8]) -> Result<Option<Duration>, CmdError> {
    let seconds =
        parse_float(arg).ok_or_else(|| err("ERR timeout is not a float or out of range"))?;
    let ms = seconds * 1000.0;
    if ms > i64::MAX as f64 {
        return Err(err("ERR timeout is negative"));
    }
    let ms = ms.ceil() as i64;
    if ms < 0 {
        return Err(err("ERR timeout is negative"));
    }
    if ms == 0 {
        return Ok(None);
    }
    if ms > i64::MAX - now_ms() as i64 {
        return Err(err("ERR timeout is out of range"));
    }
    Ok(Some(Duration::from_millis(ms as u64)))
}

/// Makes the connection wait for a write to `keys` and run the command
/// again; no reply now.
pub(super) fn block(ctx: &mut Ctx, args: &Args, keys: &[&[u8]], timeout: Option<Duration>) {
    ctx.session.blocked = Some(Blocked {
        db: ctx.session.db,
        keys: keys.iter().map(|&key| Box::from(key)).collect(),
        deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
        command: args.to_owned(),
        // Redis answers every list wait that times out with a null array
        // (BLMOVE and BRPOPLPUSH included), and every sorted-set wait too.
        on_timeout: ReplyWriter::null_array,
        proposed: false,
    });
}

fn blpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    blocking_pop(ctx, args, true)
}

fn brpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    blocking_pop(ctx, args, false)
}

/// BLPOP/BRPOP key [key ...] timeout: `[key, element]`.
fn blocking_pop(ctx: &mut Ctx, args: Args, front: bool) -> CmdResult {
    let timeout = parse_timeout(args.get(args.len() - 1))?;
    let keys: Vec<&[u8]> = (1..args.len() - 1).map(|i| args.get(i)).collect();
    match pop_first(ctx, &keys, front, 1, true)? {
        Some((at, values)) => {
            ctx.out.array(2);
            ctx.out.bulk(keys[at]);
            ctx.out.bulk(&values[0]);
        }
        None if ctx.exec.is_some() => ctx.out.null_array(),
        None => block(ctx, &args, &keys, timeout),
    }
    Ok(())
}

/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]
fn blmpop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (keys, front, count) = parse_mpop(&args, 2)?;
    let timeout = parse_timeout(args.get(1))?;
    match pop_first(ctx, &keys, front, count, true)? {
        Some((at, values)) => reply_key_and_values(ctx.out, keys[at], &values),
        None if ctx.exec.is_some() => ctx.out.null_array(),
        None => block(ctx, &args, &keys, timeout),
    }
    Ok(())
}

/// BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout
fn blmove(ctx: &mut Ctx, args: Args) -> CmdResult {
    let from_front = side(args.get(3))?;
    let to_front = side(args.get(4))?;
    let timeout = parse_timeout(args.get(5))?;
    blocking_move(ctx, args, from_front, to_front, timeout)
}

/// BRPOPLPUSH source destination timeout
fn brpoplpush(ctx: &mut Ctx, args: Args) -> CmdResult {
    let timeout = parse_timeout(args.get(3))?;
    blocking_move(ctx, args, false, true, timeout)
}

fn blocking_move(
    ctx: &mut Ctx,
    args: Args,
    from_front: bool,
    to_front: bool,
    timeout: Option<Duration>,
) -> CmdResult {
    let (source, destination) = (args.get(1), args.get(2));
    match move_one(ctx, source, destination, from_front, to_front, true)? {
        Some(value) => ctx.out.bulk(&value),
        // Inside MULTI Redis answers a plain null here (a null array only
        // when a wait times out).
        None if ctx.exec.is_some() => ctx.out.null(),
        None => block(ctx, &args, &[source], timeout),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The race between a blocked client's retry and CLIENT UNBLOCK,
    //! played in a fixed order (over TCP the window is too narrow to hit
    //! at will): the retry runs after the unblock has won the client's
    //! blocked state, as if the unblock came while the retry waited for the
    //! key's lock.

    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::clients::Unblock;
    use crate::commands::execute;
    use crate::config::{Config, Runtime};
    use crate::keyspace::{open_stores_for_tests, Durability, Keyspace};
    use crate::resp::{OwnedArgs, ReplyWriter};
    use crate::session::Session;
    use crate::shared::Shared;

    fn shared(dir: &std::path::Path) -> Shared {
        let (store, collections) = open_stores_for_tests(dir);
        let config = Config::default();
        Shared::new(
            Keyspace::open(store, collections, 16, Durability::Process).unwrap(),
            config.clone(),
            Arc::new(Runtime::new(&config)),
            Duration::ZERO,
            Duration::ZERO,
            0,
        )
    }

    fn session(shared: &Shared) -> Session {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        Session::new(
            shared.clients.register(addr, addr, 10).unwrap(),
            shared.acl.default_user(),
            true,
        )
    }

    /// Runs one command (words split on spaces); its raw reply.
    fn call(shared: &Shared, session: &mut Session, line: &str) -> String {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let args = OwnedArgs::from_slices(&words);
        let mut out = ReplyWriter::new();
        execute(shared, session, &mut out, args.args());
        String::from_utf8(out.buf).unwrap()
    }

    /// What the connection does after a wakeup: the blocked command again.
    fn retry(shared: &Shared, session: &mut Session, line: &str) -> String {
        session.retrying = true;
        let reply = call(shared, session, line);
        session.retrying = false;
        reply
    }

    #[test]
    fn a_retry_after_client_unblock_takes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(dir.path());
        let mut other = session(&shared);
        for command in [
            "BLPOP k 0",
            "BRPOP k 0",
            "BLMOVE k dst LEFT RIGHT 0",
            "BRPOPLPUSH k dst 0",
            "BLMPOP 0 1 k LEFT COUNT 2",
        ] {
            let mut waiter = session(&shared);
            // Finds nothing: blocks, no reply.
            assert_eq!(call(&shared, &mut waiter, command), "", "{command}");
            assert!(waiter.blocked.take().is_some(), "{command}: blocks");
            let info = waiter.info.clone();
            let wait = info.begin_wait();
            assert_eq!(call(&shared, &mut other, "RPUSH k a b"), ":2\r\n");
            // CLIENT UNBLOCK wins the client before its retry takes `a`.
            assert_eq!(
                call(&shared, &mut other, &format!("CLIENT UNBLOCK {}", info.id)),
                ":1\r\n"
            );
            assert_eq!(retry(&shared, &mut waiter, command), "", "{command}");
            assert!(waiter.blocked.is_some(), "{command}: waits again");
            assert_eq!(wait.finish(), Some(Unblock::Timeout));
            assert_eq!(call(&shared, &mut other, "LLEN k"), ":2\r\n", "{command}");
            assert_eq!(call(&shared, &mut other, "EXISTS dst"), ":0\r\n");

            // Without an unblock the retry is served, and a later CLIENT
            // UNBLOCK finds nothing to unblock.
            let wait = info.begin_wait();
            waiter.blocked = None;
            let served = retry(&shared, &mut waiter, command);
            assert!(
                served.starts_with('*') || served.starts_with('$'),
                "{command}: {served:?}"
            );
            assert_ne!(call(&shared, &mut other, "LLEN k"), ":2\r\n", "{command}");
            assert!(waiter.blocked.is_none(), "{command}");
            assert!(!info.is_blocked());
            assert_eq!(
                call(
                    &shared,
                    &mut other,
                    &format!("CLIENT UNBLOCK {} ERROR", info.id)
                ),
                ":0\r\n"
            );
            assert_eq!(wait.finish(), None);
            call(&shared, &mut other, "DEL k dst");
        }
    }
}
