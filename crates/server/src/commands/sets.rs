//! Set commands (Redis 7.0 semantics) on the collections' [`Set`].
//!
//! Writes log resolved effects: SPOP picks its members here and logs a
//! `SetRemove` of exactly those (or a `Delete` when it takes them all),
//! SMOVE logs a `SetRemove` and a `SetAdd` in one record, and the *STORE
//! commands log the computed result as one `Replace` of the destination.
//!
//! The multi-key commands (SINTER, SUNION, SDIFF, SINTERCARD and the
//! *STORE forms) read every key inside one `ctx.write`, so they see one
//! consistent state of all their keys. A transaction hands out one object
//! at a time, so the intersection walks the smallest set in chunks (by its
//! hash cursor) and filters each chunk through the other sets; SDIFF does
//! the same with the first set, or clones it and removes the others'
//! members when that is less work (Redis's two algorithms).

use std::collections::HashSet;

use engram_collections::types::Set;
use engram_collections::Op;
use rand::RngCore;

use super::{
    cursor_arg, err, int_arg, is, symmetric_int_arg, CmdError, CmdResult, CommandSpec, Ctx, Group,
    FAST, READONLY, SYNTAX, WRITE, WRONGTYPE,
};
use crate::glob;
use crate::keyspace::{ckey, CKind, Object, Txn};
use crate::notify;
use crate::resp::{parse_int, Args, ReplyWriter};

type Bytes = Box<[u8]>;

/// Members taken from a set per step of a chunked walk.
const CHUNK: usize = 1024;

/// The largest reply SRANDMEMBER with a negative count may build: such a
/// count repeats members, so a huge one would otherwise fill memory (Redis
/// keeps writing until the client is dropped).
const MAX_RANDOM_REPLY_BYTES: usize = 512 << 20;

/// The smallest wire size of one member in a reply (`$0\r\n\r\n`).
const MIN_MEMBER_REPLY_BYTES: u64 = 6;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("set");
    let one = (1, 1, 1);
    let all = (1, -1, 1);
    vec![
        g.command(
            "sadd",
            -3,
            WRITE | FAST,
            one,
            sadd,
            "Adds one or more members to a set, creating the key if needed.",
        ),
        g.command(
            "srem",
            -3,
            WRITE | FAST,
            one,
            srem,
            "Removes one or more members from a set; an emptied set is deleted.",
        ),
        g.command(
            "smembers",
            2,
            READONLY,
            one,
            smembers,
            "Returns all members of a set.",
        ),
        g.command(
            "sismember",
            3,
            READONLY | FAST,
            one,
            sismember,
            "Determines whether a member belongs to a set.",
        ),
        g.command(
            "smismember",
            -3,
            READONLY | FAST,
            one,
            smismember,
            "Determines whether each of several members belongs to a set.",
        ),
        g.command(
            "scard",
            2,
            READONLY | FAST,
            one,
            scard,
            "Returns the number of members in a set.",
        ),
        g.command(
            "spop",
            -2,
            WRITE | FAST,
            one,
            spop,
            "Returns one or more random members of a set after removing them.",
        ),
        g.command(
            "srandmember",
            -2,
            READONLY,
            one,
            srandmember,
            "Returns one or more random members of a set.",
        ),
        g.command(
            "smove",
            4,
            WRITE | FAST,
            (1, 2, 1),
            smove,
            "Moves a member from one set to another.",
        ),
        g.command(
            "sinter",
            -2,
            READONLY,
            all,
            sinter,
            "Returns the intersection of multiple sets.",
        ),
        g.command(
            "sintercard",
            -3,
            READONLY,
            (2, -1, 1),
            sintercard,
            "Returns the number of members of the intersection of multiple sets.",
        ),
        g.command(
            "sinterstore",
            -3,
            WRITE,
            all,
            sinterstore,
            "Stores the intersection of multiple sets in a key.",
        ),
        g.command(
            "sunion",
            -2,
            READONLY,
            all,
            sunion,
            "Returns the union of multiple sets.",
        ),
        g.command(
            "sunionstore",
            -3,
            WRITE,
            all,
            sunionstore,
            "Stores the union of multiple sets in a key.",
        ),
        g.command(
            "sdiff",
            -2,
            READONLY,
            all,
            sdiff,
            "Returns the difference of multiple sets.",
        ),
        g.command(
            "sdiffstore",
            -3,
            WRITE,
            all,
            sdiffstore,
            "Stores the difference of multiple sets in a key.",
        ),
        g.command(
            "sscan",
            -3,
            READONLY,
            one,
            sscan,
            "Iterates over members of a set.",
        ),
    ]
}

/// The set in a read object (the kind was checked by the caller's `CKind`).
fn as_set(object: Option<&Object>) -> Result<Option<&Set>, CmdError> {
    match object {
        None => Ok(None),
        Some(Object::Set(set)) => Ok(Some(set)),
        Some(_) => Err(err(WRONGTYPE)),
    }
}

/// The set `key` holds in a write context, or None; another type is
/// WRONGTYPE.
fn set_of<'t>(
    txn: &'t mut Txn<'_>,
    db: usize,
    key: &[u8],
    now: u64,
) -> Result<Option<&'t Set>, CmdError> {
    as_set(txn.collection(db, key, CKind::Set, now)?)
}

/// Arguments from `start` on, each once, in order of first appearance.
/// A few (the usual SADD or SREM of one member) are checked against those
/// already kept: a set would cost its hasher's seeding, an allocation and
/// a SipHash per member, 2% of the server's CPU under SADD.
fn distinct<'a>(args: &Args<'a>, start: usize) -> Vec<&'a [u8]> {
    const SCANNED: usize = 8;
    let count = args.len().saturating_sub(start);
    let mut kept = Vec::with_capacity(count);
    if count <= SCANNED {
        for arg in args.iter().skip(start) {
            if !kept.contains(&arg) {
                kept.push(arg);
            }
        }
        return kept;
    }
    let mut seen = HashSet::with_capacity(count);
    kept.extend(args.iter().skip(start).filter(|arg| seen.insert(*arg)));
    kept
}

fn sadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let members = distinct(&args, 2);
    // An SADD of members all there already changes nothing (Redis replies
    // 0 and writes nothing): found by a lock-free read first, it takes no
    // key group. A working set's SADDs are mostly such, and on one hot set
    // the network workers otherwise queued on its group for each of them
    // (BENCHMARKS.md, sixteenth session). Inside EXEC or a script the
    // command runs in the transaction, which reads through its own locks.
    if ctx.exec.is_none() {
        let all_there = ctx.read_collection_for_write(key, CKind::Set, |object| {
            Ok(as_set(object)?.is_some_and(|set| members.iter().all(|m| set.contains(m))))
        })?;
        if all_there {
            ctx.out.int(0);
            return Ok(());
        }
    }
    let added = ctx.write(&[key], false, |txn, db, now| {
        let set = set_of(txn, db, key, now)?;
        let new: Vec<Bytes> = members
            .iter()
            .filter(|m| set.is_none_or(|s| !s.contains(m)))
            .map(|m| Bytes::from(*m))
            .collect();
        let added = new.len();
        if added > 0 {
            txn.log(vec![Op::SetAdd {
                key: ckey(db, key)?,
                members: new,
            }])?;
        }
        Ok(added)
    })?;
    if added > 0 {
        ctx.notify(notify::SET, "sadd", key);
    }
    ctx.out.int(added as i64);
    Ok(())
}

fn srem(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let members = distinct(&args, 2);
    let removed = ctx.write(&[key], false, |txn, db, now| {
        let Some(set) = set_of(txn, db, key, now)? else {
            return Ok((0, false));
        };
        let gone: Vec<Bytes> = members
            .iter()
            .filter(|m| set.contains(m))
            .map(|m| Bytes::from(*m))
            .collect();
        let removed = gone.len();
        let emptied = removed == set.len();
        if removed > 0 {
            // SetRemove deletes the key when the set empties.
            txn.log(vec![Op::SetRemove {
                key: ckey(db, key)?,
                members: gone,
            }])?;
        }
        Ok((removed, emptied))
    })?;
    let (removed, emptied) = removed;
    if removed > 0 {
        ctx.notify(notify::SET, "srem", key);
        if emptied {
            ctx.notify(notify::GENERIC, "del", key);
        }
    }
    ctx.out.int(removed as i64);
    Ok(())
}

fn smembers(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::Set, |out, object| {
        match as_set(object)? {
            None => out.set(0),
            Some(set) => reply_members(out, set.len(), set.iter()),
        }
        Ok(())
    })
}

/// A RESP3 set (RESP2 array) of `len` members.
fn reply_members<'m>(out: &mut ReplyWriter, len: usize, members: impl Iterator<Item = &'m [u8]>) {
    out.set(len);
    for member in members {
        out.bulk(member);
    }
}

fn sismember(ctx: &mut Ctx, args: Args) -> CmdResult {
    let member = args.get(2);
    ctx.reply_collection(args.get(1), CKind::Set, |out, object| {
        let found = as_set(object)?.is_some_and(|set| set.contains(member));
        out.int(found as i64);
        Ok(())
    })
}

fn smismember(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::Set, |out, object| {
        let set = as_set(object)?;
        out.array(args.len() - 2);
        for member in args.iter().skip(2) {
            out.int(set.is_some_and(|set| set.contains(member)) as i64);
        }
        Ok(())
    })
}

fn scard(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::Set, |out, object| {
        out.int(as_set(object)?.map_or(0, |set| set.len()) as i64);
        Ok(())
    })
}

/// `count` distinct members picked uniformly at random (`count < len`),
/// by rank where `random::picking` says (alike on every node of a group).
fn sample(set: &Set, count: usize) -> Vec<Bytes> {
    crate::random::picking(|rng, by_rank| {
        let picked = if by_rank {
            set.sample_by_rank(count, rng)
        } else {
            set.sample(count, rng)
        };
        picked.into_iter().map(Bytes::from).collect()
    })
}

/// One member picked uniformly at random (SPOP, SRANDMEMBER), by rank
/// when `random::picking` says.
fn pick_member<'s>(set: &'s Set, rng: &mut dyn RngCore, by_rank: bool) -> Option<&'s [u8]> {
    if by_rank {
        set.random_by_rank(rng)
    } else {
        set.random(rng)
    }
}

fn spop(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    match args.len() {
        2 => {}
        3 => return spop_count(ctx, key, args.get(2)),
        _ => return Err(err(SYNTAX)),
    }
    let (popped, emptied) = ctx.write(&[key], false, |txn, db, now| {
        let set = set_of(txn, db, key, now)?;
        let emptied = set.is_some_and(|set| set.len() == 1);
        let member = set
            .and_then(|set| crate::random::picking(|rng, by_rank| pick_member(set, rng, by_rank)))
            .map(Bytes::from);
        if let Some(member) = &member {
            txn.log(vec![Op::SetRemove {
                key: ckey(db, key)?,
                members: vec![member.clone()],
            }])?;
        }
        Ok((member, emptied))
    })?;
    if popped.is_some() {
        notify_popped(ctx, key, emptied);
    }
    match popped {
        Some(member) => ctx.out.bulk(&member),
        None => ctx.out.null(),
    }
    Ok(())
}

fn spop_count(ctx: &mut Ctx, key: &[u8], count: &[u8]) -> CmdResult {
    let count = int_arg(count)?;
    if count < 0 {
        return Err(err("ERR value is out of range, must be positive"));
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let popped = ctx.write(&[key], false, |txn, db, now| {
        let Some(set) = set_of(txn, db, key, now)? else {
            return Ok((Vec::new(), false));
        };
        if count == 0 {
            return Ok((Vec::new(), false));
        }
        let ekey = ckey(db, key)?;
        if count >= set.len() {
            let all: Vec<Bytes> = set.iter().map(Bytes::from).collect();
            txn.log(vec![Op::Delete { key: ekey }])?;
            return Ok((all, true));
        }
        let chosen = sample(set, count);
        txn.log(vec![Op::SetRemove {
            key: ekey,
            members: chosen.clone(),
        }])?;
        Ok((chosen, false))
    })?;
    let (popped, emptied) = popped;
    if !popped.is_empty() {
        notify_popped(ctx, key, emptied);
    }
    reply_members(ctx.out, popped.len(), popped.iter().map(|m| &m[..]));
    Ok(())
}

/// SPOP's events: `spop`, and `del` when it took the last member.
fn notify_popped(ctx: &mut Ctx, key: &[u8], emptied: bool) {
    ctx.notify(notify::SET, "spop", key);
    if emptied {
        ctx.notify(notify::GENERIC, "del", key);
    }
}

fn srandmember(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    if args.len() == 2 {
        return ctx.reply_collection(key, CKind::Set, |out, object| {
            let picked = as_set(object)?.and_then(|set| {
                crate::random::picking(|rng, by_rank| pick_member(set, rng, by_rank))
            });
            match picked {
                Some(member) => out.bulk(member),
                None => out.null(),
            }
            Ok(())
        });
    }
    if args.len() > 3 {
        return Err(err(SYNTAX));
    }
    let count = symmetric_int_arg(args.get(2))?;
    ctx.reply_collection(key, CKind::Set, |out, object| {
        let Some(set) = as_set(object)? else {
            out.array(0);
            return Ok(());
        };
        if count >= 0 {
            // Distinct members, at most the whole set.
            let count = usize::try_from(count).unwrap_or(usize::MAX);
            if count >= set.len() {
                out.array(set.len());
                set.iter().for_each(|member| out.bulk(member));
            } else {
                let chosen = sample(set, count);
                out.array(chosen.len());
                chosen.iter().for_each(|member| out.bulk(member));
            }
            return Ok(());
        }
        // Negative: that many independent picks, repeats allowed.
        let picks = count.unsigned_abs();
        let too_large = || {
            err(format!(
                "ERR SRANDMEMBER count is too large: the reply would exceed {} MB",
                MAX_RANDOM_REPLY_BYTES >> 20
            ))
        };
        if picks.saturating_mul(MIN_MEMBER_REPLY_BYTES) > MAX_RANDOM_REPLY_BYTES as u64 {
            return Err(too_large());
        }
        let start = out.len();
        out.array(picks as usize);
        let within_bound = crate::random::picking(|rng, by_rank| {
            for _ in 0..picks {
                if let Some(member) = pick_member(set, rng, by_rank) {
                    out.bulk(member);
                }
                if out.len() - start > MAX_RANDOM_REPLY_BYTES {
                    return false;
                }
            }
            true
        });
        if !within_bound {
            out.buf.truncate(start);
            return Err(too_large());
        }
        Ok(())
    })
}

fn smove(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (source, destination, member) = (args.get(1), args.get(2), args.get(3));
    let moved = ctx.write(&[source, destination], false, |txn, db, now| {
        let Some(from) = set_of(txn, db, source, now)? else {
            return Ok(None);
        };
        let present = from.contains(member);
        let emptied = from.len() == 1;
        // Both types are checked before anything changes.
        let already_there =
            set_of(txn, db, destination, now)?.is_some_and(|to| to.contains(member));
        if !present {
            return Ok(None);
        }
        if source == destination {
            return Ok(Some((false, false)));
        }
        let mut ops = vec![Op::SetRemove {
            key: ckey(db, source)?,
            members: vec![member.into()],
        }];
        // As in Redis, a destination that has the member already is not
        // written (nor touched for WATCH): only the source changes.
        if !already_there {
            ops.push(Op::SetAdd {
                key: ckey(db, destination)?,
                members: vec![member.into()],
            });
        }
        txn.log(ops)?;
        Ok(Some((emptied, !already_there)))
    })?;
    // Redis: `srem` (and `del`) on the source, `sadd` on a destination
    // that gained the member; nothing when both are one key.
    if let Some((emptied, added)) = moved {
        if source != destination {
            ctx.notify(notify::SET, "srem", source);
            if emptied {
                ctx.notify(notify::GENERIC, "del", source);
            }
            if added {
                ctx.notify(notify::SET, "sadd", destination);
            }
        }
    }
    ctx.out.int(moved.is_some() as i64);
    Ok(())
}

/// The result of a set operation: members already in iteration order (a
/// walk of one set), or a set built along the way.
enum Outcome {
    Sorted(Vec<Bytes>),
    Built(Set),
}

impl Outcome {
    fn len(&self) -> usize {
        match self {
            Outcome::Sorted(members) => members.len(),
            Outcome::Built(set) => set.len(),
        }
    }

    fn reply(&self, out: &mut ReplyWriter) {
        match self {
            Outcome::Sorted(members) => {
                reply_members(out, members.len(), members.iter().map(|m| &m[..]))
            }
            Outcome::Built(set) => reply_members(out, set.len(), set.iter()),
        }
    }

    fn into_object(self) -> Object {
        Object::Set(match self {
            Outcome::Sorted(members) => members.into_iter().collect(),
            Outcome::Built(set) => set,
        })
    }
}

/// The sizes of the sets `keys` hold (0 for an absent key), checking every
/// key's type first, as Redis does before any set algebra.
fn sizes(txn: &mut Txn<'_>, db: usize, now: u64, keys: &[&[u8]]) -> Result<Vec<usize>, CmdError> {
    keys.iter()
        .map(|key| Ok(set_of(txn, db, key, now)?.map_or(0, |set| set.len())))
        .collect()
}

/// One chunk of `key`'s members from `cursor` on, copied, and the next
/// cursor (0: done).
fn chunk(
    txn: &mut Txn<'_>,
    db: usize,
    now: u64,
    key: &[u8],
    cursor: u64,
) -> Result<(u64, Vec<Bytes>), CmdError> {
    Ok(match set_of(txn, db, key, now)? {
        Some(set) => {
            let (next, batch) = set.scan(cursor, CHUNK);
            (next, batch.into_iter().map(Bytes::from).collect())
        }
        None => (0, Vec::new()),
    })
}

/// Keeps the members of `batch` that `key`'s set holds (`keep == true`)
/// or does not hold (`keep == false`).
fn filter(
    txn: &mut Txn<'_>,
    db: usize,
    now: u64,
    key: &[u8],
    batch: &mut Vec<Bytes>,
    keep: bool,
) -> Result<(), CmdError> {
    match set_of(txn, db, key, now)? {
        Some(set) => batch.retain(|m| set.contains(m) == keep),
        None if keep => batch.clear(),
        None => {}
    }
    Ok(())
}

/// Calls `each` with the members of the intersection of `keys`' sets (an
/// absent key is an empty set), in iteration order of the smallest set,
/// until `each` returns false.
fn intersect(
    txn: &mut Txn<'_>,
    db: usize,
    now: u64,
    keys: &[&[u8]],
    mut each: impl FnMut(Bytes) -> bool,
) -> Result<(), CmdError> {
    let sizes = sizes(txn, db, now, keys)?;
    let Some(smallest) = (0..keys.len()).min_by_key(|&i| sizes[i]) else {
        return Ok(());
    };
    if sizes[smallest] == 0 {
        return Ok(());
    }
    // The other keys, each once, smallest first: most likely to drop members.
    let mut seen = HashSet::from([keys[smallest]]);
    let mut others: Vec<usize> = (0..keys.len()).filter(|&i| seen.insert(keys[i])).collect();
    others.sort_by_key(|&i| sizes[i]);
    let mut cursor = 0;
    loop {
        let (next, mut batch) = chunk(txn, db, now, keys[smallest], cursor)?;
        for &i in &others {
            if batch.is_empty() {
                break;
            }
            filter(txn, db, now, keys[i], &mut batch, true)?;
        }
        for member in batch {
            if !each(member) {
                return Ok(());
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

fn inter(txn: &mut Txn<'_>, db: usize, now: u64, keys: &[&[u8]]) -> Result<Outcome, CmdError> {
    let mut members = Vec::new();
    intersect(txn, db, now, keys, |member| {
        members.push(member);
        true
    })?;
    Ok(Outcome::Sorted(members))
}

fn union(txn: &mut Txn<'_>, db: usize, now: u64, keys: &[&[u8]]) -> Result<Outcome, CmdError> {
    let sizes = sizes(txn, db, now, keys)?;
    let Some(largest) = (0..keys.len()).max_by_key(|&i| sizes[i]) else {
        return Ok(Outcome::Sorted(Vec::new()));
    };
    // Start from a copy of the largest set, then add the others' members.
    let mut result = set_of(txn, db, keys[largest], now)?
        .cloned()
        .unwrap_or_default();
    let mut seen = HashSet::from([keys[largest]]);
    for &key in keys {
        if !seen.insert(key) {
            continue;
        }
        if let Some(set) = set_of(txn, db, key, now)? {
            for member in set.iter() {
                if !result.contains(member) {
                    result.insert(member.into());
                }
            }
        }
    }
    Ok(Outcome::Built(result))
}

fn diff(txn: &mut Txn<'_>, db: usize, now: u64, keys: &[&[u8]]) -> Result<Outcome, CmdError> {
    let sizes = sizes(txn, db, now, keys)?;
    let first = keys[0];
    // Subtracting the first set itself leaves nothing.
    if sizes[0] == 0 || keys[1..].contains(&first) {
        return Ok(Outcome::Sorted(Vec::new()));
    }
    let mut seen = HashSet::from([first]);
    let mut others: Vec<usize> = (1..keys.len())
        .filter(|&i| sizes[i] > 0 && seen.insert(keys[i]))
        .collect();
    // Redis's choice: walking the first set costs its size per other set
    // (but stops early, hence the halving); copying it and removing the
    // others' members costs the sizes of all.
    let walk_work = sizes[0] * (others.len() + 1) / 2;
    let copy_work: usize = sizes[0] + others.iter().map(|&i| sizes[i]).sum::<usize>();
    if walk_work <= copy_work {
        // Largest first: most likely to drop members early.
        others.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
        let mut members = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, mut batch) = chunk(txn, db, now, first, cursor)?;
            for &i in &others {
                if batch.is_empty() {
                    break;
                }
                filter(txn, db, now, keys[i], &mut batch, false)?;
            }
            members.append(&mut batch);
            if next == 0 {
                return Ok(Outcome::Sorted(members));
            }
            cursor = next;
        }
    }
    let mut result = set_of(txn, db, first, now)?.cloned().unwrap_or_default();
    for &i in &others {
        if let Some(set) = set_of(txn, db, keys[i], now)? {
            for member in set.iter() {
                result.remove(member);
            }
        }
        if result.is_empty() {
            break;
        }
    }
    Ok(Outcome::Built(result))
}

type Algebra = fn(&mut Txn<'_>, usize, u64, &[&[u8]]) -> Result<Outcome, CmdError>;

/// SINTER, SUNION, SDIFF: all keys read under one lock.
fn read_algebra(ctx: &mut Ctx, args: Args, algebra: Algebra) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let outcome = ctx.write(&keys, false, |txn, db, now| algebra(txn, db, now, &keys))?;
    outcome.reply(ctx.out);
    Ok(())
}

/// SINTERSTORE, SUNIONSTORE, SDIFFSTORE: the result replaces the
/// destination whatever it held; an empty one deletes it.
fn store_algebra(ctx: &mut Ctx, args: Args, algebra: Algebra, event: &'static str) -> CmdResult {
    let destination = args.get(1);
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let (stored, deleted) = ctx.write(&keys, false, |txn, db, now| {
        let outcome = algebra(txn, db, now, &keys[1..])?;
        let len = outcome.len();
        let mut deleted = false;
        if len == 0 {
            // (A Replace with an empty object would leave a string there.)
            deleted = txn.delete(db, destination, now)?;
        } else {
            txn.log(vec![Op::Replace {
                key: ckey(db, destination)?,
                object: outcome.into_object(),
            }])?;
        }
        Ok((len, deleted))
    })?;
    if stored > 0 {
        ctx.notify(notify::SET, event, destination);
    } else if deleted {
        ctx.notify(notify::GENERIC, "del", destination);
    }
    ctx.out.int(stored as i64);
    Ok(())
}

fn sinter(ctx: &mut Ctx, args: Args) -> CmdResult {
    read_algebra(ctx, args, inter)
}

fn sunion(ctx: &mut Ctx, args: Args) -> CmdResult {
    read_algebra(ctx, args, union)
}

fn sdiff(ctx: &mut Ctx, args: Args) -> CmdResult {
    read_algebra(ctx, args, diff)
}

fn sinterstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    store_algebra(ctx, args, inter, "sinterstore")
}

fn sunionstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    store_algebra(ctx, args, union, "sunionstore")
}

fn sdiffstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    store_algebra(ctx, args, diff, "sdiffstore")
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]
fn sintercard(ctx: &mut Ctx, args: Args) -> CmdResult {
    let numkeys = parse_int(args.get(1))
        .filter(|&n| n > 0)
        .ok_or_else(|| err("ERR numkeys should be greater than 0"))?;
    if numkeys > args.len() as i64 - 2 {
        return Err(err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let end = 2 + numkeys as usize;
    let mut limit = 0u64;
    let mut i = end;
    while i < args.len() {
        if is(args.get(i), "limit") && i + 1 < args.len() {
            i += 1;
            limit = parse_int(args.get(i))
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| err("ERR LIMIT can't be negative"))?;
        } else {
            return Err(err(SYNTAX));
        }
        i += 1;
    }
    let keys: Vec<&[u8]> = (2..end).map(|i| args.get(i)).collect();
    let count = ctx.write(&keys, false, |txn, db, now| {
        let mut count = 0u64;
        intersect(txn, db, now, &keys, |_| {
            count += 1;
            limit == 0 || count < limit
        })?;
        Ok(count)
    })?;
    ctx.out.int(count as i64);
    Ok(())
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]; the cursor is a member
/// hash (see `Set::scan`).
fn sscan(ctx: &mut Ctx, args: Args) -> CmdResult {
    let cursor = cursor_arg(args.get(2))?;
    ctx.reply_collection(args.get(1), CKind::Set, |out, object| {
        // As in Redis, an absent key answers before the options are read.
        let Some(set) = as_set(object)? else {
            out.array(2);
            out.bulk(b"0");
            out.array(0);
            return Ok(());
        };
        let mut pattern: Option<&[u8]> = None;
        let mut count = 10usize;
        let mut i = 3;
        while i < args.len() {
            let (option, has_value) = (args.get(i), i + 1 < args.len());
            if is(option, "count") && has_value {
                let n = int_arg(args.get(i + 1))?;
                if n < 1 {
                    return Err(err(SYNTAX));
                }
                count = usize::try_from(n).unwrap_or(usize::MAX);
            } else if is(option, "match") && has_value {
                let p = args.get(i + 1);
                pattern = (p != b"*").then_some(p);
            } else {
                return Err(err(SYNTAX));
            }
            i += 2;
        }
        let (next, batch) = set.scan(cursor, count);
        let members: Vec<&[u8]> = batch
            .into_iter()
            .filter(|member| pattern.is_none_or(|p| glob::matches(p, member)))
            .collect();
        out.array(2);
        out.bulk(next.to_string().as_bytes());
        out.array(members.len());
        for member in members {
            out.bulk(member);
        }
        Ok(())
    })
}
