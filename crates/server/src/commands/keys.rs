//! Generic key commands: existence, type, enumeration, renaming, expiry.

use super::strings::ExpireArg;
use super::{
    err, int_arg, is, lowercase, CmdError, CmdResult, CommandSpec, Ctx, Group, FAST, READONLY,
    SYNTAX, WHOLE_KEYSPACE, WRITE,
};
use crate::glob;
use crate::keyspace::value::Encoding;
use crate::keyspace::value::Meta;
use crate::keyspace::{ckey, KeyMeta};
use crate::notify;
use crate::resp::Args;
use engram_collections::Op;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("generic");
    let one = (1, 1, 1);
    let all = (1, -1, 1);
    let none = (0, 0, 0);
    vec![
        g.command("del", -2, WRITE, all, del, "Deletes one or more keys."),
        g.command(
            "unlink",
            -2,
            WRITE | FAST,
            all,
            del,
            "Deletes one or more keys.",
        ),
        g.command(
            "exists",
            -2,
            READONLY | FAST,
            all,
            exists,
            "Counts how many of the given keys exist.",
        ),
        g.command(
            "type",
            2,
            READONLY | FAST,
            one,
            type_of,
            "Returns the type of the value stored at a key.",
        ),
        g.command(
            "keys",
            2,
            READONLY | WHOLE_KEYSPACE,
            none,
            keys,
            "Returns all key names that match a pattern.",
        ),
        g.command(
            "scan",
            -2,
            READONLY | WHOLE_KEYSPACE,
            none,
            scan,
            "Iterates over the key names in the database.",
        ),
        g.command(
            "rename",
            3,
            WRITE,
            (1, 2, 1),
            rename,
            "Renames a key and overwrites the destination.",
        ),
        g.command(
            "renamenx",
            3,
            WRITE | FAST,
            (1, 2, 1),
            renamenx,
            "Renames a key only when the target key name doesn't exist.",
        ),
        g.command(
            "expire",
            -3,
            WRITE | FAST,
            one,
            expire,
            "Sets the expiration time of a key in seconds.",
        ),
        g.command(
            "pexpire",
            -3,
            WRITE | FAST,
            one,
            pexpire,
            "Sets the expiration time of a key in milliseconds.",
        ),
        g.command(
            "expireat",
            -3,
            WRITE | FAST,
            one,
            expireat,
            "Sets the expiration time of a key to a Unix timestamp.",
        ),
        g.command(
            "pexpireat",
            -3,
            WRITE | FAST,
            one,
            pexpireat,
            "Sets the expiration time of a key to a Unix milliseconds timestamp.",
        ),
        g.command(
            "ttl",
            2,
            READONLY | FAST,
            one,
            ttl,
            "Returns the expiration time in seconds of a key.",
        ),
        g.command(
            "pttl",
            2,
            READONLY | FAST,
            one,
            pttl,
            "Returns the expiration time in milliseconds of a key.",
        ),
        g.command(
            "expiretime",
            2,
            READONLY | FAST,
            one,
            expiretime,
            "Returns the expiration time of a key as a Unix timestamp.",
        ),
        g.command(
            "pexpiretime",
            2,
            READONLY | FAST,
            one,
            pexpiretime,
            "Returns the expiration time of a key as a Unix milliseconds timestamp.",
        ),
        g.command(
            "persist",
            2,
            WRITE | FAST,
            one,
            persist,
            "Removes the expiration time of a key.",
        ),
        g.command(
            "randomkey",
            1,
            READONLY | WHOLE_KEYSPACE,
            none,
            randomkey,
            "Returns a random key name from the database.",
        ),
        g.command(
            "touch",
            -2,
            READONLY | FAST,
            all,
            exists,
            "Returns the number of existing keys out of those specified.",
        ),
        g.command(
            "copy",
            -3,
            WRITE,
            (1, 2, 1),
            copy,
            "Copies the value of a key to a new key.",
        ),
        g.command(
            "move",
            3,
            WRITE | FAST,
            (1, 1, 1),
            move_key,
            "Moves a key to another database.",
        ),
        g.command(
            "object",
            -2,
            READONLY,
            (2, 2, 1),
            object,
            "Inspects the internals of a value (ENCODING).",
        ),
    ]
}

/// DEL and UNLINK; UNLINK frees large collections in the background.
fn del(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let mut delete = || {
        ctx.write(&keys, keys.len() > 1, |txn, db, now| {
            keys.iter()
                .map(|key| Ok(txn.delete(db, key, now)?))
                .collect::<Result<Vec<bool>, CmdError>>()
        })
    };
    let deleted = if args.get(0).eq_ignore_ascii_case(b"unlink") {
        engram_collections::lazy_free::lazily(delete)?
    } else {
        delete()?
    };
    for (key, _) in keys.iter().zip(&deleted).filter(|(_, &d)| d) {
        ctx.notify(notify::GENERIC, "del", key);
    }
    ctx.out.int(deleted.iter().filter(|&&d| d).count() as i64);
    Ok(())
}

/// EXISTS and TOUCH: how many of the keys (repeats counted) are live.
fn exists(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut count = 0;
    for key in args.iter().skip(1) {
        count += ctx.read(key, |_, _| Ok(()))?.is_some() as i64;
    }
    ctx.out.int(count);
    Ok(())
}

fn type_of(ctx: &mut Ctx, args: Args) -> CmdResult {
    let name = ctx.read(args.get(1), |meta, _| Ok(meta.kind().name()))?;
    ctx.out.simple(name.unwrap_or("none"));
    Ok(())
}

/// Lays a transaction's buffered string writes (inside MULTI or a
/// script: `Txn::buffered_strings`) over keys a scan found: a deleted
/// key goes, a rewritten one takes its new meta word and, with
/// `add_new`, the keys written only in the transaction come in.
fn overlay(ctx: &Ctx, found: &mut Vec<KeyMeta>, add_new: bool) {
    let Some(txn) = &ctx.exec else { return };
    let buffered = txn.buffered_strings(ctx.db(), ctx.now_ms);
    if buffered.is_empty() {
        return;
    }
    let mut by_key: std::collections::HashMap<Vec<u8>, Option<Meta>> =
        buffered.into_iter().collect();
    found.retain_mut(|(key, meta)| match by_key.remove(key) {
        None => true,
        Some(Some(now)) => {
            *meta = now;
            true
        }
        Some(None) => false,
    });
    if add_new {
        found.extend(by_key.into_iter().filter_map(|(k, m)| m.map(|m| (k, m))));
    }
}

/// Every live key of the current database as the command sees it (the
/// transaction's own writes included); sorted on a group's apply, where
/// the order must not be a member's hash order.
fn every_key(ctx: &Ctx) -> Result<Vec<KeyMeta>, CmdError> {
    let mut found = Vec::new();
    let mut cursor = 0;
    loop {
        let (next, batch) = ctx.ks().scan(ctx.db(), cursor, 4096, ctx.now_ms)?;
        found.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    overlay(ctx, &mut found, true);
    if ctx.session.applying() {
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    }
    Ok(found)
}

fn keys(ctx: &mut Ctx, args: Args) -> CmdResult {
    let pattern = args.get(1);
    let found: Vec<KeyMeta> = every_key(ctx)?
        .into_iter()
        .filter(|(key, _)| glob::matches(pattern, key))
        .collect();
    ctx.out.array(found.len());
    for (key, _) in &found {
        ctx.out.bulk(key);
    }
    Ok(())
}

fn scan(ctx: &mut Ctx, args: Args) -> CmdResult {
    let cursor = std::str::from_utf8(args.get(1))
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
        .ok_or_else(|| err("ERR invalid cursor"))?;
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut type_filter: Option<String> = None;
    let mut i = 2;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Err(err(SYNTAX));
        }
        let (option, value) = (args.get(i), args.get(i + 1));
        if is(option, "match") {
            pattern = Some(value);
        } else if is(option, "count") {
            let n = int_arg(value)?;
            if n < 1 {
                return Err(err(SYNTAX));
            }
            count = n.min(1 << 20) as usize;
        } else if is(option, "type") {
            type_filter = Some(lowercase(value));
        } else {
            return Err(err(SYNTAX));
        }
        i += 2;
    }
    // On a group's apply (a script's SCAN) every member must return the
    // same keys, and members' hash orders differ: the whole database in
    // one reply, sorted (a full iteration in one call is a valid SCAN).
    let (next, batch) = if ctx.session.applying() {
        (0, every_key(ctx)?)
    } else {
        let (next, mut batch) = ctx.ks().scan(ctx.db(), cursor, count, ctx.now_ms)?;
        // Keys written only in the transaction come with the last step
        // (no earlier step can have returned them).
        overlay(ctx, &mut batch, next == 0);
        (next, batch)
    };
    let keys: Vec<Vec<u8>> = batch
        .into_iter()
        .filter(|(key, meta)| {
            pattern.is_none_or(|p| glob::matches(p, key))
                && type_filter
                    .as_deref()
                    .is_none_or(|t| meta.kind().name() == t)
        })
        .map(|(key, _)| key)
        .collect();
    ctx.out.array(2);
    ctx.out.bulk(next.to_string().as_bytes());
    ctx.out.array(keys.len());
    for key in &keys {
        ctx.out.bulk(key);
    }
    Ok(())
}

/// RENAME and RENAMENX: moves the value (with its TTL) to the new name.
/// A collection moves by one logged Rename, in O(1); a string by a put and
/// a delete made atomic by a batch. The kind is peeked first so that a
/// collection moves in a direct transaction (its Rename logged at once,
/// no batch); if it changed meanwhile, the move starts over.
fn rename_with(ctx: &mut Ctx, args: Args, only_if_absent: bool) -> Result<bool, CmdError> {
    let (from, to) = (args.get(1), args.get(2));
    loop {
        let peeked = ctx.read(from, |meta, _| Ok(meta.is_collection()))?;
        let collection = peeked.unwrap_or(false);
        let moved = ctx.write(&[from, to], !collection, |txn, db, now| {
            let Some(value) = txn.get(db, from, now)? else {
                return Err(err("ERR no such key"));
            };
            if from == to {
                return Ok(Some(!only_if_absent));
            }
            if only_if_absent && txn.get(db, to, now)?.is_some() {
                return Ok(Some(false));
            }
            if value.meta.is_collection() {
                txn.log(vec![Op::Rename {
                    from: ckey(db, from)?,
                    to: ckey(db, to)?,
                }])?;
            } else if txn.is_atomic() {
                txn.put(db, to, value.raw())?;
                txn.delete(db, from, now)?;
            } else {
                return Ok(None);
            }
            Ok(Some(true))
        })?;
        if let Some(moved) = moved {
            if moved && from != to {
                ctx.notify(notify::GENERIC, "rename_from", from);
                ctx.notify(notify::GENERIC, "rename_to", to);
            }
            return Ok(moved);
        }
    }
}

/// MOVE: the key, its value and its expiry into database `db`, unless the
/// key is missing here or present there (0 then, as in Redis).
fn move_key(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let target = db_index(args.get(2), ctx.ks().databases())?;
    let db = ctx.db();
    if target == db {
        return Err(err("ERR source and destination objects are the same"));
    }
    let moved = ctx.write_in([(db, key), (target, key)], true, |txn, db, now| {
        let Some(value) = txn.get(db, key, now)? else {
            return Ok(false);
        };
        if txn.get(target, key, now)?.is_some() {
            return Ok(false);
        }
        if value.meta.is_collection() {
            txn.log(vec![Op::Rename {
                from: ckey(db, key)?,
                to: ckey(target, key)?,
            }])?;
        } else {
            txn.put(target, key, value.raw())?;
            txn.delete(db, key, now)?;
        }
        Ok(true)
    })?;
    if moved {
        ctx.notify(notify::GENERIC, "move_from", key);
        ctx.notify_in(notify::GENERIC, "move_to", target, key);
    }
    ctx.out.int(moved as i64);
    Ok(())
}

fn rename(ctx: &mut Ctx, args: Args) -> CmdResult {
    rename_with(ctx, args, false)?;
    ctx.out.ok();
    Ok(())
}

fn renamenx(ctx: &mut Ctx, args: Args) -> CmdResult {
    let renamed = rename_with(ctx, args, true)?;
    ctx.out.int(renamed as i64);
    Ok(())
}

/// EXPIRE and friends, with Redis 7's NX/XX/GT/LT conditions.
fn set_expiry(ctx: &mut Ctx, args: Args, kind: ExpireArg, command: &str) -> CmdResult {
    let key = args.get(1);
    let at = kind.resolve(args.get(2), ctx.now_ms, command, true)?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in args.iter().skip(3) {
        if is(option, "nx") {
            nx = true;
        } else if is(option, "xx") {
            xx = true;
        } else if is(option, "gt") {
            gt = true;
        } else if is(option, "lt") {
            lt = true;
        } else {
            return Err(err(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(option)
            )));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let done = ctx.write(&[key], false, |txn, db, now| {
        let Some(old) = txn.get(db, key, now)? else {
            return Ok(None);
        };
        let current = old.meta.expire_at();
        // No expiry counts as an infinite TTL for GT and LT.
        let allowed = match current {
            None => !xx && !gt,
            Some(current) => !nx && (!gt || at > current) && (!lt || at < current),
        };
        if !allowed {
            return Ok(None);
        }
        if at <= now {
            txn.delete(db, key, now)?;
            Ok(Some("del"))
        } else {
            txn.set_meta(db, key, &old, old.meta.with_expire(Some(at)))?;
            Ok(Some("expire"))
        }
    })?;
    if let Some(event) = done {
        ctx.notify(notify::GENERIC, event, key);
    }
    ctx.out.int(done.is_some() as i64);
    Ok(())
}

fn expire(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_expiry(ctx, args, ExpireArg::Seconds, "expire")
}

fn pexpire(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_expiry(ctx, args, ExpireArg::Millis, "pexpire")
}

fn expireat(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_expiry(ctx, args, ExpireArg::AtSeconds, "expireat")
}

fn pexpireat(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_expiry(ctx, args, ExpireArg::AtMillis, "pexpireat")
}

/// -2 for a missing key, -1 for no expiry, else `f(expire_at, now)`.
fn expiry_reply(ctx: &mut Ctx, args: Args, f: fn(u64, u64) -> i64) -> CmdResult {
    let now = ctx.now_ms;
    let reply = ctx.read(args.get(1), |meta, _| {
        Ok(meta.expire_at().map_or(-1, |at| f(at, now)))
    })?;
    ctx.out.int(reply.unwrap_or(-2));
    Ok(())
}

fn ttl(ctx: &mut Ctx, args: Args) -> CmdResult {
    expiry_reply(ctx, args, |at, now| {
        (at.saturating_sub(now) as i64 + 500) / 1000
    })
}

fn pttl(ctx: &mut Ctx, args: Args) -> CmdResult {
    expiry_reply(ctx, args, |at, now| at.saturating_sub(now) as i64)
}

fn expiretime(ctx: &mut Ctx, args: Args) -> CmdResult {
    expiry_reply(ctx, args, |at, _| (at / 1000) as i64)
}

fn pexpiretime(ctx: &mut Ctx, args: Args) -> CmdResult {
    expiry_reply(ctx, args, |at, _| at as i64)
}

fn persist(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let done = ctx.write(&[key], false, |txn, db, now| {
        match txn.get(db, key, now)? {
            Some(old) if old.meta.expire_at().is_some() => {
                txn.set_meta(db, key, &old, old.meta.with_expire(None))?;
                Ok(true)
            }
            _ => Ok(false),
        }
    })?;
    if done {
        ctx.notify(notify::GENERIC, "persist", key);
    }
    ctx.out.int(done as i64);
    Ok(())
}

fn randomkey(ctx: &mut Ctx, _args: Args) -> CmdResult {
    // (Any buffered write, of any database: `every_key` lays those of
    // this one over the stores' keys.)
    let buffered = ctx
        .exec
        .as_ref()
        .is_some_and(|txn| txn.buffered_writes() > 0);
    // A group's apply picks by rank in key order with the entry's seed,
    // the same on every member; a transaction with writes of its own
    // picks among the keys it sees.
    let picked = if ctx.session.applying() || buffered {
        let mut keys = every_key(ctx)?;
        (!keys.is_empty()).then(|| {
            let at = crate::random::with(|rng| rng.next_u64() % keys.len() as u64);
            keys.swap_remove(at as usize).0
        })
    } else {
        ctx.ks().random_key(ctx.db(), ctx.now_ms)?
    };
    match picked {
        Some(key) => ctx.out.bulk(&key),
        None => ctx.out.null(),
    }
    Ok(())
}

fn copy(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (from, to) = (args.get(1), args.get(2));
    let mut target_db = ctx.db();
    let mut replace = false;
    let mut i = 3;
    while i < args.len() {
        if is(args.get(i), "replace") {
            replace = true;
            i += 1;
        } else if is(args.get(i), "db") && i + 1 < args.len() {
            target_db = db_index(args.get(i + 1), ctx.ks().databases())?;
            i += 2;
        } else {
            return Err(err(SYNTAX));
        }
    }
    let db = ctx.db();
    if from == to && db == target_db {
        return Err(err("ERR source and destination objects are the same"));
    }
    // One write each way (a string put, or one logged Copy): no batch.
    let copied = ctx.write_in([(db, from), (target_db, to)], false, |txn, _, now| {
        let Some(value) = txn.get(db, from, now)? else {
            return Ok(false);
        };
        if !replace && txn.get(target_db, to, now)?.is_some() {
            return Ok(false);
        }
        if value.meta.is_collection() {
            txn.log(vec![Op::Copy {
                from: ckey(db, from)?,
                to: ckey(target_db, to)?,
            }])?;
        } else {
            txn.put(target_db, to, value.raw())?;
        }
        Ok(true)
    })?;
    if copied {
        ctx.notify_in(notify::GENERIC, "copy_to", target_db, to);
    }
    ctx.out.int(copied as i64);
    Ok(())
}

/// A database number argument (SELECT, COPY ... DB, MOVE).
pub fn db_index(arg: &[u8], databases: usize) -> Result<usize, CmdError> {
    let n = int_arg(arg)?;
    if n < 0 || n as usize >= databases {
        return Err(err("ERR DB index is out of range"));
    }
    Ok(n as usize)
}

/// OBJECT ENCODING's answer for a value.
pub fn encoding_name(meta: crate::keyspace::value::Meta, payload: &[u8]) -> &'static str {
    match meta.encoding() {
        _ if meta.is_collection() => meta.kind().collection_encoding(),
        Encoding::Int => "int",
        raw => raw.name(payload.len()),
    }
}

/// Redis's replies to OBJECT IDLETIME under an LFU policy and OBJECT FREQ
/// under any other.
const IDLETIME_UNDER_LFU: &str = "ERR An LFU maxmemory policy is selected, idle time not \
    tracked. Please note that when switching between policies at runtime LRU and LFU data \
    will take some time to adjust.";
const FREQ_WITHOUT_LFU: &str = "ERR An LFU maxmemory policy is not selected, access \
    frequency not tracked. Please note that when switching between policies at runtime LRU \
    and LFU data will take some time to adjust.";

/// OBJECT ENCODING, REFCOUNT, IDLETIME and FREQ (from the key's access
/// field: see `keyspace::access`). OBJECT never touches the key.
fn object(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    if is(sub, "help") {
        let lines = [
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key> (always 1: Engram shares no values).",
            "IDLETIME <key>",
            "    Return the seconds since the <key> was last read or written (approximately;",
            "    not under an LFU maxmemory-policy).",
            "FREQ <key>",
            "    Return the <key>'s logarithmic access counter (under an LFU maxmemory-policy",
            "    only).",
            "HELP",
            "    Print this help.",
        ];
        ctx.out.array(lines.len());
        for line in lines {
            ctx.out.simple(line);
        }
        return Ok(());
    }
    let known = ["encoding", "refcount", "freq", "idletime"];
    if !known.iter().any(|k| is(sub, k)) {
        return Err(super::unknown_subcommand("object", sub));
    }
    if args.len() != 3 {
        return Err(super::wrong_sub_arity("object", sub));
    }
    if is(sub, "freq") || is(sub, "idletime") {
        let key = args.get(2);
        if ctx.read(key, |_, _| Ok(()))?.is_none() {
            ctx.out.null();
            return Ok(());
        }
        let access = &ctx.ks().access;
        let lfu = access.is_lfu();
        if is(sub, "idletime") && lfu {
            return Err(err(IDLETIME_UNDER_LFU));
        }
        if is(sub, "freq") && !lfu {
            return Err(err(FREQ_WITHOUT_LFU));
        }
        let Some(field) = ctx.ks().access_of(ctx.db(), key, ctx.now_ms)? else {
            ctx.out.null();
            return Ok(());
        };
        let access = &ctx.ks().access;
        ctx.out.int(if lfu {
            i64::from(access.frequency(field))
        } else {
            (access.idle_ms(field) / 1000) as i64
        });
        return Ok(());
    }
    let name = ctx.read(args.get(2), |meta, payload| {
        Ok(encoding_name(meta, payload))
    })?;
    match name {
        None => ctx.out.null(),
        Some(_) if is(sub, "refcount") => ctx.out.int(1),
        Some(name) => ctx.out.bulk(name.as_bytes()),
    }
    Ok(())
}
