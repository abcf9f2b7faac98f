//! Hash commands (`@hash`), over the collections' [`Hash`].
//!
//! Reads go through `Ctx::read_collection`/`reply_collection` (lock-free
//! outside EXEC); writes decide their effect under the key's lock and log
//! it as one resolved operation: HINCRBY logs the sum, not the increment,
//! so replay needs no arithmetic and no reads. Nothing is logged when a
//! command changes nothing and Redis would not count it as a change (HDEL
//! of absent fields, HSETNX of a present one).

use std::collections::HashSet;

use engram_collections::Op;

use super::strings::parse_float;
use super::{
    cursor_arg, err, int_arg, is, symmetric_int_arg, wrong_arity, CmdError, CmdResult, CommandSpec,
    Ctx, Group, FAST, NOT_FLOAT, READONLY, SYNTAX, WRITE, WRONGTYPE,
};
use crate::glob;
use crate::keyspace::{ckey, CKind, Object};
use crate::notify;
use crate::resp::{format_double, Args, ReplyWriter};
use engram_collections::types::Hash;
use rand::RngCore;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("hash");
    let one = (1, 1, 1);
    vec![
        g.command(
            "hset",
            -4,
            WRITE | FAST,
            one,
            hset,
            "Creates or modifies the value of a field in a hash.",
        ),
        g.command(
            "hsetnx",
            4,
            WRITE | FAST,
            one,
            hsetnx,
            "Sets the value of a field in a hash only when the field doesn't exist.",
        ),
        g.command(
            "hmset",
            -4,
            WRITE | FAST,
            one,
            hmset,
            "Sets the values of multiple fields.",
        ),
        g.command(
            "hget",
            3,
            READONLY | FAST,
            one,
            hget,
            "Returns the value of a field in a hash.",
        ),
        g.command(
            "hmget",
            -3,
            READONLY | FAST,
            one,
            hmget,
            "Returns the values of all fields in a hash.",
        ),
        g.command(
            "hdel",
            -3,
            WRITE | FAST,
            one,
            hdel,
            "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.",
        ),
        g.command(
            "hgetall",
            2,
            READONLY,
            one,
            hgetall,
            "Returns all fields and values in a hash.",
        ),
        g.command(
            "hkeys",
            2,
            READONLY,
            one,
            hkeys,
            "Returns all fields in a hash.",
        ),
        g.command(
            "hvals",
            2,
            READONLY,
            one,
            hvals,
            "Returns all values in a hash.",
        ),
        g.command(
            "hlen",
            2,
            READONLY | FAST,
            one,
            hlen,
            "Returns the number of fields in a hash.",
        ),
        g.command(
            "hexists",
            3,
            READONLY | FAST,
            one,
            hexists,
            "Determines whether a field exists in a hash.",
        ),
        g.command(
            "hstrlen",
            3,
            READONLY | FAST,
            one,
            hstrlen,
            "Returns the length of the value of a field.",
        ),
        g.command(
            "hincrby",
            4,
            WRITE | FAST,
            one,
            hincrby,
            "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.",
        ),
        g.command(
            "hincrbyfloat",
            4,
            WRITE | FAST,
            one,
            hincrbyfloat,
            "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.",
        ),
        g.command(
            "hscan",
            -3,
            READONLY,
            one,
            hscan,
            "Iterates over fields and values of a hash.",
        ),
        g.command(
            "hrandfield",
            -2,
            READONLY,
            one,
            hrandfield,
            "Returns one or more random fields from a hash.",
        ),
    ]
}

/// The hash in a collection lookup (the kind was checked by the keyspace;
/// another object here would be a bug, answered as WRONGTYPE).
fn hash_of(object: Option<&Object>) -> Result<Option<&Hash>, CmdError> {
    match object {
        None => Ok(None),
        Some(Object::Hash(hash)) => Ok(Some(hash)),
        Some(_) => Err(err(WRONGTYPE)),
    }
}

fn boxed(bytes: &[u8]) -> Box<[u8]> {
    bytes.into()
}

/// HSET and HMSET: sets every pair; the number of fields that were new.
fn set_pairs(ctx: &mut Ctx, args: &Args, command: &str) -> Result<i64, CmdError> {
    if !args.len().is_multiple_of(2) {
        return Err(wrong_arity(command));
    }
    let key = args.get(1);
    let pairs: Vec<(&[u8], &[u8])> = (2..args.len())
        .step_by(2)
        .map(|i| (args.get(i), args.get(i + 1)))
        .collect();
    ctx.write(&[key], false, |txn, db, now| {
        // The type check (one lookup: the hash itself is not needed);
        // which fields are new, the write itself says.
        txn.collection_len(db, key, CKind::Hash, now)?;
        // Logged even when every value is already there: Redis counts an
        // HSET as a modification whatever it sets (WATCH sees it). The
        // pairs are borrowed from the request (`Txn::hash_set`).
        let created = txn.hash_set(db, key, pairs)?;
        Ok(created as i64)
    })
}

fn hset(ctx: &mut Ctx, args: Args) -> CmdResult {
    let created = set_pairs(ctx, &args, "hset")?;
    ctx.notify(notify::HASH, "hset", args.get(1));
    ctx.out.int(created);
    Ok(())
}

fn hmset(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_pairs(ctx, &args, "hmset")?;
    ctx.notify(notify::HASH, "hset", args.get(1));
    ctx.out.ok();
    Ok(())
}

fn hsetnx(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, field, value) = (args.get(1), args.get(2), args.get(3));
    // A field that is there already is answered by a lock-free look (as
    // SADD of members already there): nothing is written or signalled.
    if ctx.exec.is_none() {
        let there = ctx.read_collection_for_write(key, CKind::Hash, |object| {
            Ok(hash_of(object)?.is_some_and(|hash| hash.contains(field)))
        })?;
        if there {
            ctx.out.int(0);
            return Ok(());
        }
    }
    let set = ctx.write(&[key], false, |txn, db, now| {
        let current = hash_of(txn.collection(db, key, CKind::Hash, now)?)?;
        if current.is_some_and(|hash| hash.contains(field)) {
            return Ok(false);
        }
        txn.log(vec![Op::HashSet {
            key: ckey(db, key)?,
            pairs: vec![(boxed(field), boxed(value))],
        }])?;
        Ok(true)
    })?;
    if set {
        ctx.notify(notify::HASH, "hset", key);
    }
    ctx.out.int(set as i64);
    Ok(())
}

fn reply_value(out: &mut ReplyWriter, value: Option<&[u8]>) {
    match value {
        Some(value) => out.bulk(value),
        None => out.null(),
    }
}

fn hget(ctx: &mut Ctx, args: Args) -> CmdResult {
    let field = args.get(2);
    ctx.reply_collection(args.get(1), CKind::Hash, |out, object| {
        reply_value(out, hash_of(object)?.and_then(|hash| hash.get(field)));
        Ok(())
    })
}

fn hmget(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::Hash, |out, object| {
        let hash = hash_of(object)?;
        out.array(args.len() - 2);
        for field in args.iter().skip(2) {
            reply_value(out, hash.and_then(|hash| hash.get(field)));
        }
        Ok(())
    })
}

fn hdel(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let deleted = ctx.write(&[key], false, |txn, db, now| {
        let Some(hash) = hash_of(txn.collection(db, key, CKind::Hash, now)?)? else {
            return Ok((0, false));
        };
        let mut fields: Vec<&[u8]> = Vec::new();
        let mut seen: HashSet<&[u8]> = HashSet::new();
        for field in args.iter().skip(2) {
            if hash.contains(field) && seen.insert(field) {
                fields.push(field);
            }
        }
        if fields.is_empty() {
            return Ok((0, false));
        }
        let count = fields.len();
        let emptied = count == hash.len();
        txn.log(vec![Op::HashDelete {
            key: ckey(db, key)?,
            fields: fields.into_iter().map(boxed).collect(),
        }])?;
        Ok((count, emptied))
    })?;
    let (deleted, emptied) = deleted;
    if deleted > 0 {
        ctx.notify(notify::HASH, "hdel", key);
    }
    if emptied {
        ctx.notify(notify::GENERIC, "del", key);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

/// HGETALL, HKEYS, HVALS.
fn get_all(ctx: &mut Ctx, args: Args, fields: bool, values: bool) -> CmdResult {
    ctx.reply_collection(args.get(1), CKind::Hash, |out, object| {
        let hash = hash_of(object)?;
        let len = hash.map_or(0, Hash::len);
        if fields && values {
            out.map(len);
        } else {
            out.array(len);
        }
        for (field, value) in hash.into_iter().flat_map(Hash::iter) {
            if fields {
                out.bulk(field);
            }
            if values {
                out.bulk(value);
            }
        }
        Ok(())
    })
}

fn hgetall(ctx: &mut Ctx, args: Args) -> CmdResult {
    get_all(ctx, args, true, true)
}

fn hkeys(ctx: &mut Ctx, args: Args) -> CmdResult {
    get_all(ctx, args, true, false)
}

fn hvals(ctx: &mut Ctx, args: Args) -> CmdResult {
    get_all(ctx, args, false, true)
}

fn hlen(ctx: &mut Ctx, args: Args) -> CmdResult {
    let len = ctx.read_collection(args.get(1), CKind::Hash, |object| {
        Ok(hash_of(object)?.map_or(0, Hash::len))
    })?;
    ctx.out.int(len as i64);
    Ok(())
}

fn hexists(ctx: &mut Ctx, args: Args) -> CmdResult {
    let field = args.get(2);
    let found = ctx.read_collection(args.get(1), CKind::Hash, |object| {
        Ok(hash_of(object)?.is_some_and(|hash| hash.contains(field)))
    })?;
    ctx.out.int(found as i64);
    Ok(())
}

fn hstrlen(ctx: &mut Ctx, args: Args) -> CmdResult {
    let field = args.get(2);
    let len = ctx.read_collection(args.get(1), CKind::Hash, |object| {
        Ok(hash_of(object)?
            .and_then(|hash| hash.get(field))
            .map_or(0, <[u8]>::len))
    })?;
    ctx.out.int(len as i64);
    Ok(())
}

fn hincrby(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let delta = int_arg(args.get(3))?;
    let new = ctx.write(&[key], false, |txn, db, now| {
        let hash = hash_of(txn.collection(db, key, CKind::Hash, now)?)?;
        let old = match hash.and_then(|hash| hash.get(field)) {
            None => 0,
            Some(text) => crate::resp::parse_int(text)
                .ok_or_else(|| err("ERR hash value is not an integer"))?,
        };
        let new = old
            .checked_add(delta)
            .ok_or_else(|| err("ERR increment or decrement would overflow"))?;
        let mut digits = itoa::Buffer::new();
        txn.log(vec![Op::HashSet {
            key: ckey(db, key)?,
            pairs: vec![(boxed(field), boxed(digits.format(new).as_bytes()))],
        }])?;
        Ok(new)
    })?;
    ctx.notify(notify::HASH, "hincrby", key);
    ctx.out.int(new);
    Ok(())
}

/// Redis reads at most this many characters as a float (`MAX_LONG_DOUBLE_CHARS`).
const MAX_FLOAT_CHARS: usize = 5 * 1024;

/// A float as Redis's `string2ld` reads one.
fn float_of(text: &[u8]) -> Option<f64> {
    if text.len() >= MAX_FLOAT_CHARS {
        return None;
    }
    parse_float(text)
}

fn hincrbyfloat(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let delta = float_of(args.get(3)).ok_or_else(|| err(NOT_FLOAT))?;
    if !delta.is_finite() {
        return Err(err("ERR value is NaN or Infinity"));
    }
    let text = ctx.write(&[key], false, |txn, db, now| {
        let hash = hash_of(txn.collection(db, key, CKind::Hash, now)?)?;
        let old = match hash.and_then(|hash| hash.get(field)) {
            None => 0.0,
            Some(text) => float_of(text).ok_or_else(|| err("ERR hash value is not a float"))?,
        };
        let new = old + delta;
        if !new.is_finite() {
            return Err(err("ERR increment would produce NaN or Infinity"));
        }
        let text = format_double(new);
        txn.log(vec![Op::HashSet {
            key: ckey(db, key)?,
            pairs: vec![(boxed(field), boxed(text.as_bytes()))],
        }])?;
        Ok(text)
    })?;
    ctx.notify(notify::HASH, "hincrbyfloat", key);
    // A bulk string in RESP2 and RESP3 alike, as Redis replies.
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

struct ScanOptions<'a> {
    pattern: Option<&'a [u8]>,
    count: usize,
    values: bool,
}

fn parse_scan_options<'a>(args: &Args<'a>) -> Result<ScanOptions<'a>, CmdError> {
    let mut options = ScanOptions {
        pattern: None,
        count: 10,
        values: true,
    };
    let mut i = 3;
    while i < args.len() {
        let option = args.get(i);
        let has_value = i + 1 < args.len();
        if is(option, "count") && has_value {
            let n = int_arg(args.get(i + 1))?;
            if n < 1 {
                return Err(err(SYNTAX));
            }
            // The batch is sized by what the hash holds, not by this.
            options.count = usize::try_from(n).unwrap_or(usize::MAX);
            i += 2;
        } else if is(option, "match") && has_value {
            let pattern = args.get(i + 1);
            options.pattern = (pattern != b"*").then_some(pattern);
            i += 2;
        } else if is(option, "novalues") {
            options.values = false;
            i += 1;
        } else {
            return Err(err(SYNTAX));
        }
    }
    Ok(options)
}

fn hscan(ctx: &mut Ctx, args: Args) -> CmdResult {
    let cursor = cursor_arg(args.get(2))?;
    // As in Redis, options are checked only once the key is found to be a
    // hash: a missing key answers an empty scan whatever follows.
    let options = parse_scan_options(&args);
    ctx.reply_collection(args.get(1), CKind::Hash, |out, object| {
        let Some(hash) = hash_of(object)? else {
            out.array(2);
            out.bulk(b"0");
            out.array(0);
            return Ok(());
        };
        let options = options?;
        let (next, batch) = hash.scan(cursor, options.count);
        let matched: Vec<(&[u8], &[u8])> = batch
            .into_iter()
            .filter(|(field, _)| options.pattern.is_none_or(|p| glob::matches(p, field)))
            .collect();
        out.array(2);
        let mut digits = itoa::Buffer::new();
        out.bulk(digits.format(next).as_bytes());
        out.array(matched.len() * if options.values { 2 } else { 1 });
        for (field, value) in matched {
            out.bulk(field);
            if options.values {
                out.bulk(value);
            }
        }
        Ok(())
    })
}

/// A field and its value picked uniformly at random (HRANDFIELD), by rank
/// when `random::picking` says (alike on every node of a group).
fn pick_field<'h>(
    hash: &'h Hash,
    rng: &mut dyn RngCore,
    by_rank: bool,
) -> Option<(&'h [u8], &'h [u8])> {
    if by_rank {
        hash.random_by_rank(rng)
    } else {
        hash.random(rng)
    }
}

fn hrandfield(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    if args.len() == 2 {
        return ctx.reply_collection(key, CKind::Hash, |out, object| {
            let picked = hash_of(object)?.and_then(|hash| {
                crate::random::picking(|rng, by_rank| pick_field(hash, rng, by_rank))
            });
            reply_value(out, picked.map(|(field, _)| field));
            Ok(())
        });
    }
    let count = symmetric_int_arg(args.get(2))?;
    if args.len() > 4 || (args.len() == 4 && !is(args.get(3), "withvalues")) {
        return Err(err(SYNTAX));
    }
    let with_values = args.len() == 4;
    if with_values && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
        return Err(err("ERR value is out of range"));
    }
    ctx.reply_collection(key, CKind::Hash, |out, object| {
        let hash = match hash_of(object)? {
            Some(hash) if count != 0 => hash,
            _ => {
                out.array(0);
                return Ok(());
            }
        };
        let reply_pair = |out: &mut ReplyWriter, (field, value): (&[u8], &[u8])| {
            if with_values && out.is_resp3() {
                out.array(2);
            }
            out.bulk(field);
            if with_values {
                out.bulk(value);
            }
        };
        let header = |out: &mut ReplyWriter, n: usize| {
            out.array(if with_values && !out.is_resp3() {
                2 * n
            } else {
                n
            });
        };
        let wanted = count.unsigned_abs();
        if count < 0 || wanted == 1 {
            // May repeat: independent picks, written as they are made (a
            // huge count grows the reply, never a buffer up front).
            let wanted = usize::try_from(wanted).unwrap_or(usize::MAX);
            header(out, wanted);
            crate::random::picking(|rng, by_rank| {
                for _ in 0..wanted {
                    reply_pair(out, pick_field(hash, rng, by_rank).expect("not empty"));
                }
            });
        } else if wanted >= hash.len() as u64 {
            header(out, hash.len());
            for pair in hash.iter() {
                reply_pair(out, pair);
            }
        } else {
            // Distinct: fewer than the hash holds, so bounded by its size.
            let picked = crate::random::picking(|rng, by_rank| match by_rank {
                true => hash.sample_by_rank(wanted as usize, rng),
                false => hash.sample(wanted as usize, rng),
            });
            header(out, picked.len());
            for pair in picked {
                reply_pair(out, pair);
            }
        }
        Ok(())
    })
}
