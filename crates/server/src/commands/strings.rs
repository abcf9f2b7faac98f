//! String commands. Integers are stored as i64 (`value::Encoding::Int`),
//! so INCR on an integer is an in-place 8-byte update.

use super::{
    err, int_arg, is, CmdError, CmdResult, CommandSpec, Ctx, Group, FAST, NOT_FLOAT, NOT_INTEGER,
    READONLY, SYNTAX, WRITE, WRONGTYPE,
};
use crate::keyspace::value::{encode_int, Kind, Meta, StringValue, MAX_EXPIRE_MS, META_BYTES};
use crate::keyspace::{InPlaceAdd, Stored, Txn};
use crate::notify;
use crate::resp::{format_double, Args, ReplyWriter};

/// Redis's largest string (`proto-max-bulk-len`), less our meta word so a
/// value always fits the engine.
const MAX_STRING: usize = engram_engine::MAX_VALUE_BYTES - META_BYTES;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("string");
    let one = (1, 1, 1);
    vec![
        g.command(
            "get",
            2,
            READONLY | FAST,
            one,
            get,
            "Returns the string value of a key.",
        ),
        g.command(
            "set",
            -3,
            WRITE,
            one,
            set,
            "Sets the string value of a key, ignoring its type.",
        ),
        g.command(
            "setnx",
            3,
            WRITE | FAST,
            one,
            setnx,
            "Sets the value of a key only when it does not exist.",
        ),
        g.command(
            "setex",
            4,
            WRITE,
            one,
            setex,
            "Sets a value and its expiry in seconds.",
        ),
        g.command(
            "psetex",
            4,
            WRITE,
            one,
            psetex,
            "Sets a value and its expiry in milliseconds.",
        ),
        g.command(
            "mget",
            -2,
            READONLY | FAST,
            (1, -1, 1),
            mget,
            "Returns the values of one or more keys.",
        ),
        g.command(
            "mset",
            -3,
            WRITE,
            (1, -1, 2),
            mset,
            "Atomically sets the values of one or more keys.",
        ),
        g.command(
            "msetnx",
            -3,
            WRITE,
            (1, -1, 2),
            msetnx,
            "Atomically sets several keys only when none exists.",
        ),
        g.command(
            "incr",
            2,
            WRITE | FAST,
            one,
            incr,
            "Increments the integer value of a key by one.",
        ),
        g.command(
            "decr",
            2,
            WRITE | FAST,
            one,
            decr,
            "Decrements the integer value of a key by one.",
        ),
        g.command(
            "incrby",
            3,
            WRITE | FAST,
            one,
            incrby,
            "Increments the integer value of a key by a number.",
        ),
        g.command(
            "decrby",
            3,
            WRITE | FAST,
            one,
            decrby,
            "Decrements the integer value of a key by a number.",
        ),
        g.command(
            "incrbyfloat",
            3,
            WRITE | FAST,
            one,
            incrbyfloat,
            "Increments the value of a key by a floating point number.",
        ),
        g.command(
            "append",
            3,
            WRITE | FAST,
            one,
            append,
            "Appends a string to the value of a key.",
        ),
        g.command(
            "strlen",
            2,
            READONLY | FAST,
            one,
            strlen,
            "Returns the length of a string value.",
        ),
        g.command(
            "getrange",
            4,
            READONLY,
            one,
            getrange,
            "Returns a substring of a string value.",
        ),
        g.command(
            "substr",
            4,
            READONLY,
            one,
            getrange,
            "Returns a substring of a string value.",
        ),
        g.command(
            "setrange",
            4,
            WRITE,
            one,
            setrange,
            "Overwrites part of a string value from an offset.",
        ),
        g.command(
            "getset",
            3,
            WRITE | FAST,
            one,
            getset,
            "Returns the old value of a key after setting a new one.",
        ),
        g.command(
            "getdel",
            2,
            WRITE | FAST,
            one,
            getdel,
            "Returns the value of a key after deleting it.",
        ),
        g.command(
            "getex",
            -2,
            WRITE | FAST,
            one,
            getex,
            "Returns the value of a key after changing its expiry.",
        ),
    ]
}

/// Writes a string reply from a stored value, or fails on another type.
fn reply_string(out: &mut ReplyWriter, meta: Meta, payload: &[u8]) -> CmdResult {
    if meta.kind() != Kind::String {
        return Err(err(WRONGTYPE));
    }
    match StringValue::from_payload(meta, payload) {
        StringValue::Int(n) => out.bulk_int(n),
        StringValue::Raw(bytes) => out.bulk(bytes),
    }
    Ok(())
}

fn reply_stored(out: &mut ReplyWriter, stored: Option<&Stored>) -> CmdResult {
    match stored {
        Some(stored) => reply_string(out, stored.meta, stored.payload()),
        None => {
            out.null();
            Ok(())
        }
    }
}

/// A stored value that must be a string.
fn string_of(stored: &Stored) -> Result<StringValue<'_>, CmdError> {
    if stored.meta.kind() != Kind::String {
        return Err(err(WRONGTYPE));
    }
    Ok(stored.string())
}

fn get(ctx: &mut Ctx, args: Args) -> CmdResult {
    if !ctx.read_reply(args.get(1), reply_string)? {
        ctx.out.null();
    }
    Ok(())
}

/// When a key expires, from a relative or absolute time argument.
#[derive(Clone, Copy)]
pub enum ExpireArg {
    Seconds,
    Millis,
    AtSeconds,
    AtMillis,
}

impl ExpireArg {
    /// The absolute expiry in ms; errors like Redis for non-integers, for
    /// times that are not positive (`allow_past`: EXPIRE and friends accept
    /// any time and delete the key when it has passed), and where Redis's
    /// own arithmetic (seconds to ms, now plus a relative time) overflows.
    pub fn resolve(
        self,
        arg: &[u8],
        now_ms: u64,
        command: &str,
        allow_past: bool,
    ) -> Result<u64, CmdError> {
        let n = int_arg(arg)?;
        let invalid = || err(format!("ERR invalid expire time in '{command}' command"));
        if n <= 0 && !allow_past {
            return Err(invalid());
        }
        let ms = match self {
            ExpireArg::Seconds | ExpireArg::AtSeconds => n.checked_mul(1000).ok_or_else(invalid)?,
            ExpireArg::Millis | ExpireArg::AtMillis => n,
        };
        let at = match self {
            ExpireArg::Seconds | ExpireArg::Millis => {
                (now_ms as i64).checked_add(ms).ok_or_else(invalid)?
            }
            ExpireArg::AtSeconds | ExpireArg::AtMillis => ms,
        };
        // A time already past stands for "now": the key is gone at once. A
        // time Redis accepts beyond what the meta word holds (48 bits of
        // ms: the year 10889) is kept as that, which is as never as Redis's.
        Ok(at.clamp(0, MAX_EXPIRE_MS as i64) as u64)
    }
}

struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    keep_ttl: bool,
    expire_at: Option<u64>,
}

fn parse_set_options(args: &Args, now_ms: u64) -> Result<SetOptions, CmdError> {
    let mut options = SetOptions {
        nx: false,
        xx: false,
        get: false,
        keep_ttl: false,
        expire_at: None,
    };
    let mut i = 3;
    while i < args.len() {
        let arg = args.get(i);
        let expire = if is(arg, "ex") {
            Some(ExpireArg::Seconds)
        } else if is(arg, "px") {
            Some(ExpireArg::Millis)
        } else if is(arg, "exat") {
            Some(ExpireArg::AtSeconds)
        } else if is(arg, "pxat") {
            Some(ExpireArg::AtMillis)
        } else {
            None
        };
        if let Some(kind) = expire {
            if options.expire_at.is_some() || options.keep_ttl || i + 1 >= args.len() {
                return Err(err(SYNTAX));
            }
            options.expire_at = Some(kind.resolve(args.get(i + 1), now_ms, "set", false)?);
            i += 2;
            continue;
        }
        if is(arg, "nx") && !options.xx {
            options.nx = true;
        } else if is(arg, "xx") && !options.nx {
            options.xx = true;
        } else if is(arg, "get") {
            options.get = true;
        } else if is(arg, "keepttl") && options.expire_at.is_none() {
            options.keep_ttl = true;
        } else {
            return Err(err(SYNTAX));
        }
        i += 1;
    }
    Ok(options)
}

fn set(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, value) = (args.get(1), args.get(2));
    check_len(value.len())?;
    if args.len() == 3 {
        // The common case: no read, one engine write.
        ctx.write(&[key], false, |txn, db, _| {
            Ok(txn.put_string(db, key, value, None)?)
        })?;
        ctx.notify(notify::STRING, "set", key);
        ctx.out.ok();
        return Ok(());
    }
    let options = parse_set_options(&args, ctx.now_ms)?;
    // SET NX of a key that exists writes nothing and signals nothing (a
    // lock already held: every contender of a distributed lock retries
    // this): answered by a lock-free look, it takes no key group. Inside
    // EXEC or a script the transaction answers.
    if options.nx && !options.get && ctx.exec.is_none() && ctx.exists_for_write(key)? {
        ctx.out.null();
        return Ok(());
    }
    let reply = ctx.write(&[key], false, |txn, db, now| {
        let old = txn.get(db, key, now)?;
        if options.get {
            if let Some(old) = &old {
                string_of(old)?;
            }
        }
        let exists = old.is_some();
        let proceed = !(options.nx && exists || options.xx && !exists);
        if proceed {
            let expire_at = if options.keep_ttl {
                old.as_ref().and_then(|o| o.meta.expire_at())
            } else {
                options.expire_at
            };
            if expire_at.is_some_and(|at| at <= now) {
                txn.delete(db, key, now)?;
            } else {
                txn.put_string(db, key, value, expire_at)?;
            }
        }
        Ok((proceed, old))
    })?;
    let (done, old) = reply;
    if done {
        ctx.notify(notify::STRING, "set", key);
        if options.expire_at.is_some() && !options.keep_ttl {
            ctx.notify(notify::GENERIC, "expire", key);
        }
    }
    if options.get {
        reply_stored(ctx.out, old.as_ref())?;
    } else if done {
        ctx.out.ok();
    } else {
        ctx.out.null();
    }
    Ok(())
}

pub(super) fn check_len(len: usize) -> CmdResult {
    if len > MAX_STRING {
        return Err(err(
            "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
        ));
    }
    Ok(())
}

fn setnx(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, value) = (args.get(1), args.get(2));
    check_len(value.len())?;
    // As SET NX: a key that exists is answered without its lock.
    if ctx.exec.is_none() && ctx.exists_for_write(key)? {
        ctx.out.int(0);
        return Ok(());
    }
    let set = ctx.write(&[key], false, |txn, db, now| {
        if txn.get(db, key, now)?.is_some() {
            return Ok(false);
        }
        txn.put_string(db, key, value, None)?;
        Ok(true)
    })?;
    if set {
        ctx.notify(notify::STRING, "set", key);
    }
    ctx.out.int(set as i64);
    Ok(())
}

fn set_with_expiry(ctx: &mut Ctx, args: Args, kind: ExpireArg, command: &str) -> CmdResult {
    let (key, value) = (args.get(1), args.get(3));
    check_len(value.len())?;
    let at = kind.resolve(args.get(2), ctx.now_ms, command, false)?;
    ctx.write(&[key], false, |txn, db, _| {
        Ok(txn.put_string(db, key, value, Some(at))?)
    })?;
    ctx.notify(notify::STRING, "set", key);
    ctx.notify(notify::GENERIC, "expire", key);
    ctx.out.ok();
    Ok(())
}

fn setex(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_with_expiry(ctx, args, ExpireArg::Seconds, "setex")
}

fn psetex(ctx: &mut Ctx, args: Args) -> CmdResult {
    set_with_expiry(ctx, args, ExpireArg::Millis, "psetex")
}

fn mget(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    // Locked, so an MSET is seen whole or not at all.
    let values = ctx.write(&keys, false, |txn, db, now| {
        keys.iter()
            .map(|key| Ok(txn.get(db, key, now)?))
            .collect::<Result<Vec<_>, CmdError>>()
    })?;
    ctx.out.array(values.len());
    for value in &values {
        match value {
            Some(stored) if stored.meta.kind() == Kind::String => {
                reply_string(ctx.out, stored.meta, stored.payload())?
            }
            _ => ctx.out.null(),
        }
    }
    Ok(())
}

/// A key and the value to write under it.
type Pair<'a> = (&'a [u8], &'a [u8]);

fn mset_pairs<'a>(args: &Args<'a>, command: &str) -> Result<Vec<Pair<'a>>, CmdError> {
    if args.len().is_multiple_of(2) {
        return Err(super::wrong_arity(command));
    }
    let mut pairs = Vec::with_capacity(args.len() / 2);
    for i in (1..args.len()).step_by(2) {
        check_len(args.get(i + 1).len())?;
        pairs.push((args.get(i), args.get(i + 1)));
    }
    Ok(pairs)
}

fn mset(ctx: &mut Ctx, args: Args) -> CmdResult {
    let pairs = mset_pairs(&args, "mset")?;
    let keys: Vec<&[u8]> = pairs.iter().map(|(k, _)| *k).collect();
    ctx.write(&keys, true, |txn, db, _| {
        for (key, value) in &pairs {
            txn.put_string(db, key, value, None)?;
        }
        Ok(())
    })?;
    for key in keys {
        ctx.notify(notify::STRING, "set", key);
    }
    ctx.out.ok();
    Ok(())
}

fn msetnx(ctx: &mut Ctx, args: Args) -> CmdResult {
    let pairs = mset_pairs(&args, "msetnx")?;
    let keys: Vec<&[u8]> = pairs.iter().map(|(k, _)| *k).collect();
    let set = ctx.write(&keys, true, |txn, db, now| {
        for key in &keys {
            if txn.get(db, key, now)?.is_some() {
                return Ok(false);
            }
        }
        for (key, value) in &pairs {
            txn.put_string(db, key, value, None)?;
        }
        Ok(true)
    })?;
    if set {
        for key in keys {
            ctx.notify(notify::STRING, "set", key);
        }
    }
    ctx.out.int(set as i64);
    Ok(())
}

/// Adds `delta` to an integer value (creating it at 0), keeping its TTL.
fn add(ctx: &mut Ctx, key: &[u8], delta: i64) -> CmdResult {
    let new = ctx.write(&[key], false, |txn, db, now| {
        add_in(txn, db, key, delta, now)
    })?;
    ctx.notify(notify::STRING, "incrby", key);
    ctx.out.int(new);
    Ok(())
}

fn add_in(txn: &mut Txn, db: usize, key: &[u8], delta: i64, now: u64) -> Result<i64, CmdError> {
    let overflow = || err("ERR increment or decrement would overflow");
    match txn.add_in_place(db, key, now, delta)? {
        InPlaceAdd::Added(sum) => return Ok(sum),
        InPlaceAdd::Overflow => return Err(overflow()),
        InPlaceAdd::Elsewhere => {}
    }
    let Some(old) = txn.get(db, key, now)? else {
        let mut value = Vec::new();
        encode_int(&mut value, delta, None);
        txn.put(db, key, &value)?;
        return Ok(delta);
    };
    // An integer here only inside MULTI or a script (a direct transaction
    // changed it in place above), or a raw string holding a number.
    let n = match string_of(&old)? {
        StringValue::Int(n) => n,
        StringValue::Raw(text) => crate::resp::parse_int(text).ok_or_else(|| err(NOT_INTEGER))?,
    };
    let new = n.checked_add(delta).ok_or_else(overflow)?;
    let mut value = Vec::new();
    encode_int(&mut value, new, old.meta.expire_at());
    txn.put(db, key, &value)?;
    Ok(new)
}

fn incr(ctx: &mut Ctx, args: Args) -> CmdResult {
    add(ctx, args.get(1), 1)
}

fn decr(ctx: &mut Ctx, args: Args) -> CmdResult {
    add(ctx, args.get(1), -1)
}

fn incrby(ctx: &mut Ctx, args: Args) -> CmdResult {
    let delta = int_arg(args.get(2))?;
    add(ctx, args.get(1), delta)
}

fn decrby(ctx: &mut Ctx, args: Args) -> CmdResult {
    let delta = int_arg(args.get(2))?;
    let delta = delta
        .checked_neg()
        .ok_or_else(|| err("ERR decrement would overflow"))?;
    add(ctx, args.get(1), delta)
}

/// A float as Redis reads one: no blanks, not NaN.
pub fn parse_float(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.is_empty() || text.trim() != text {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

fn incrbyfloat(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let delta = parse_float(args.get(2)).ok_or_else(|| err(NOT_FLOAT))?;
    let text = ctx.write(&[key], false, |txn, db, now| {
        let old = txn.get(db, key, now)?;
        let (current, expire_at) = match &old {
            None => (0.0, None),
            Some(stored) => {
                let text = string_of(stored)?.to_bytes();
                let value = parse_float(&text).ok_or_else(|| err(NOT_FLOAT))?;
                (value, stored.meta.expire_at())
            }
        };
        let new = current + delta;
        if !new.is_finite() {
            return Err(err("ERR increment would produce NaN or Infinity"));
        }
        let text = format_double(new);
        txn.put_string(db, key, text.as_bytes(), expire_at)?;
        Ok(text)
    })?;
    ctx.notify(notify::STRING, "incrbyfloat", key);
    // A bulk string in RESP2 and RESP3 alike, as Redis replies.
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

fn append(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, suffix) = (args.get(1), args.get(2));
    let len = ctx.write(&[key], false, |txn, db, now| {
        let old = txn.get(db, key, now)?;
        let (mut text, expire_at) = match &old {
            None => (Vec::new(), None),
            Some(stored) => (string_of(stored)?.to_bytes(), stored.meta.expire_at()),
        };
        check_len(text.len() + suffix.len())?;
        text.extend_from_slice(suffix);
        txn.put_string(db, key, &text, expire_at)?;
        Ok(text.len())
    })?;
    ctx.notify(notify::STRING, "append", key);
    ctx.out.int(len as i64);
    Ok(())
}

fn strlen(ctx: &mut Ctx, args: Args) -> CmdResult {
    let len = ctx.read(args.get(1), |meta, payload| {
        if meta.kind() != Kind::String {
            return Err(err(WRONGTYPE));
        }
        Ok(StringValue::from_payload(meta, payload).len())
    })?;
    ctx.out.int(len.unwrap_or(0) as i64);
    Ok(())
}

fn getrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    let start = int_arg(args.get(2))?;
    let end = int_arg(args.get(3))?;
    let slice = ctx.read(args.get(1), |meta, payload| {
        if meta.kind() != Kind::String {
            return Err(err(WRONGTYPE));
        }
        let text = StringValue::from_payload(meta, payload).to_bytes();
        Ok(range_of(&text, start, end).to_vec())
    })?;
    ctx.out.bulk(&slice.unwrap_or_default());
    Ok(())
}

/// Redis's GETRANGE arithmetic: negative offsets count from the end, the
/// range is clamped, an inverted range is empty.
fn range_of(text: &[u8], start: i64, end: i64) -> &[u8] {
    let len = text.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return &[];
    }
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let end = if end < 0 {
        (len + end).max(0)
    } else {
        end.min(len - 1)
    };
    if start > end || start >= len {
        return &[];
    }
    &text[start as usize..=end as usize]
}

fn setrange(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, patch) = (args.get(1), args.get(3));
    let offset = int_arg(args.get(2))?;
    if offset < 0 {
        return Err(err("ERR offset is out of range"));
    }
    let offset = offset as usize;
    let len = ctx.write(&[key], false, |txn, db, now| {
        let old = txn.get(db, key, now)?;
        let (mut text, expire_at) = match &old {
            None => (Vec::new(), None),
            Some(stored) => (string_of(stored)?.to_bytes(), stored.meta.expire_at()),
        };
        if patch.is_empty() {
            // Nothing to write: Redis neither creates nor pads the key.
            return Ok(text.len());
        }
        check_len(offset.saturating_add(patch.len()))?;
        if text.len() < offset + patch.len() {
            text.resize(offset + patch.len(), 0);
        }
        text[offset..offset + patch.len()].copy_from_slice(patch);
        txn.put_string(db, key, &text, expire_at)?;
        Ok(text.len())
    })?;
    if !patch.is_empty() {
        ctx.notify(notify::STRING, "setrange", key);
    }
    ctx.out.int(len as i64);
    Ok(())
}

fn getset(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (key, value) = (args.get(1), args.get(2));
    check_len(value.len())?;
    let old = ctx.write(&[key], false, |txn, db, now| {
        let old = txn.get(db, key, now)?;
        if let Some(old) = &old {
            string_of(old)?;
        }
        txn.put_string(db, key, value, None)?;
        Ok(old)
    })?;
    ctx.notify(notify::STRING, "set", key);
    reply_stored(ctx.out, old.as_ref())
}

fn getdel(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let old = ctx.write(&[key], false, |txn, db, now| {
        let old = txn.get(db, key, now)?;
        if let Some(stored) = &old {
            string_of(stored)?;
            txn.delete(db, key, now)?;
        }
        Ok(old)
    })?;
    if old.is_some() {
        ctx.notify(notify::GENERIC, "del", key);
    }
    reply_stored(ctx.out, old.as_ref())
}

fn getex(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    // None: leave the TTL; Some(None): PERSIST; Some(Some(t)): expire at t.
    let change: Option<Option<u64>> = match args.len() {
        2 => None,
        3 if is(args.get(2), "persist") => Some(None),
        4 => {
            let option = args.get(2);
            let kind = if is(option, "ex") {
                ExpireArg::Seconds
            } else if is(option, "px") {
                ExpireArg::Millis
            } else if is(option, "exat") {
                ExpireArg::AtSeconds
            } else if is(option, "pxat") {
                ExpireArg::AtMillis
            } else {
                return Err(err(SYNTAX));
            };
            Some(Some(kind.resolve(
                args.get(3),
                ctx.now_ms,
                "getex",
                false,
            )?))
        }
        _ => return Err(err(SYNTAX)),
    };
    let (old, event) = ctx.write(&[key], false, |txn, db, now| {
        let Some(old) = txn.get(db, key, now)? else {
            return Ok((None, None));
        };
        string_of(&old)?;
        let event = match change {
            None => None,
            Some(Some(at)) if at <= now => {
                txn.delete(db, key, now)?;
                Some("del")
            }
            Some(None) if old.meta.expire_at().is_none() => None,
            Some(at) => {
                if old.meta.expire_at() != at {
                    txn.set_meta(db, key, &old, old.meta.with_expire(at))?;
                }
                Some(if at.is_some() { "expire" } else { "persist" })
            }
        };
        Ok((Some(old), event))
    })?;
    if let Some(event) = event {
        ctx.notify(notify::GENERIC, event, key);
    }
    reply_stored(ctx.out, old.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrange_matches_redis() {
        let text = b"This is a string";
        assert_eq!(range_of(text, 0, 3), b"This");
        assert_eq!(range_of(text, -3, -1), b"ing");
        assert_eq!(range_of(text, 0, -1), text);
        assert_eq!(range_of(text, 10, 100), b"string");
        assert_eq!(range_of(text, 5, 3), b"");
        assert_eq!(range_of(text, -1, -5), b"");
        assert_eq!(range_of(b"", 0, -1), b"");
        assert_eq!(range_of(text, -100, 3), b"This");
    }

    #[test]
    fn floats_like_redis() {
        assert_eq!(parse_float(b"10.5"), Some(10.5));
        assert_eq!(parse_float(b"5.0e3"), Some(5000.0));
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b"abc"), None);
        assert_eq!(parse_float(b"nan"), None);
        assert_eq!(parse_float(b""), None);
    }
}
