//! DUMP and RESTORE: a key's value as a Redis DUMP payload, and a key made
//! from one (Redis 7.0's or Engram's: see `crate::rdb`).
//!
//! RESTORE writes through the same keyspace paths as the type's own
//! commands: a string as one engine write with its expiry in its meta
//! word, a collection as one operation-log record (the whole object, then
//! its expiry), so a restored key appears whole, with its expiry, or not at
//! all. IDLETIME (under an LRU policy) and FREQ (under an LFU one) set
//! the key's access field, as Redis's `objectSetLRUOrLFU`; each is
//! ignored under the other family of policies, as there.

use engram_collections::Op;

use super::{
    err, int_arg, is, CmdError, CmdResult, CommandSpec, Ctx, Group, READONLY, SYNTAX, WRITE,
};
use crate::keyspace::value::{Kind, Meta, StringValue};
use crate::keyspace::{ckey, CKind, Object, Txn};
use crate::notify;
use crate::rdb::payload::{self, PayloadError};
use crate::rdb::value::Stored;
use crate::rdb::writer;
use crate::resp::Args;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("generic");
    vec![
        g.command(
            "dump",
            2,
            READONLY,
            (1, 1, 1),
            dump,
            "Returns a serialized representation of the value stored at a key.",
        ),
        g.command(
            "restore",
            -4,
            WRITE,
            (1, 1, 1),
            restore,
            "Creates a key from the serialized representation of a value.",
        ),
    ]
}

const BUSYKEY: &str = "BUSYKEY Target key name already exists.";
const BAD_PAYLOAD: &str = "ERR DUMP payload version or checksum are wrong";
const BAD_FORMAT: &str = "ERR Bad data format";

fn dump(ctx: &mut Ctx, args: Args) -> CmdResult {
    match serialize(ctx, args.get(1))? {
        Some(dumped) => ctx.out.bulk(&dumped.payload),
        None => ctx.out.null(),
    }
    Ok(())
}

/// A key's value as a sealed DUMP payload, and its expiry then.
#[derive(Debug, PartialEq, Eq)]
pub struct Dumped {
    pub payload: Vec<u8>,
    /// Unix ms; None without expiry.
    pub expire_at: Option<u64>,
}

/// `key` of the current database serialized as DUMP serializes it (MIGRATE
/// sends the same bytes); None if absent. Lock-free outside EXEC; inside a
/// transaction (`Ctx::exec`), under its locks.
pub fn serialize(ctx: &mut Ctx, key: &[u8]) -> Result<Option<Dumped>, CmdError> {
    // A collection is read in a second step, by its kind; should the key
    // change type in between, the first step runs again.
    for _ in 0..8 {
        let found = ctx.read(key, |meta, payload| {
            if meta.is_collection() {
                return Ok((meta.expire_at(), Err(meta.kind())));
            }
            Ok((meta.expire_at(), Ok(string_body(meta, payload))))
        })?;
        let (expire_at, body) = match found {
            None => return Ok(None),
            Some((expire_at, Ok(body))) => (expire_at, body),
            Some((expire_at, Err(kind))) => {
                let read = ctx.read_collection(key, collection_kind(kind), |object| {
                    Ok(object.map(object_body))
                });
                match read {
                    Ok(Some(body)) => (expire_at, body),
                    Ok(None) => return Ok(None),
                    Err(CmdError(text)) if text.starts_with("WRONGTYPE") => continue,
                    Err(e) => return Err(e),
                }
            }
        };
        let mut payload = body;
        payload::seal(&mut payload);
        return Ok(Some(Dumped { payload, expire_at }));
    }
    Err(err(
        "ERR the key kept changing type while DUMP read it; try again",
    ))
}

/// A string's value as DUMP encodes it (before the seal).
pub fn string_body(meta: Meta, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(payload.len() + 16);
    match StringValue::from_payload(meta, payload) {
        StringValue::Raw(bytes) => writer::put_string_value(&mut body, bytes),
        StringValue::Int(n) => {
            writer::put_string_value(&mut body, itoa::Buffer::new().format(n).as_bytes())
        }
    }
    body
}

/// A collection as DUMP encodes it (before the seal).
pub fn object_body(object: &Object) -> Vec<u8> {
    let mut body = Vec::new();
    writer::put_object(&mut body, object);
    body
}

/// Writes a decoded value as `key` of `db`, with its expiry: a string as
/// one engine write, a collection as one operation-log record (the whole
/// object, then its expiry), so it appears whole or not at all.
pub fn put_stored(
    txn: &mut Txn,
    db: usize,
    key: &[u8],
    stored: Stored,
    expire_at: Option<u64>,
) -> Result<(), CmdError> {
    match stored {
        Stored::String(text) => txn.put_string(db, key, &text, expire_at)?,
        Stored::Collection(object) => {
            let ckey = ckey(db, key)?;
            let mut ops = vec![Op::Replace {
                key: ckey.clone(),
                object,
            }];
            if let Some(at_ms) = expire_at {
                ops.push(Op::Expire { key: ckey, at_ms });
            }
            txn.log(ops)?;
        }
    }
    Ok(())
}

pub fn collection_kind(kind: Kind) -> CKind {
    match kind {
        Kind::Hash => CKind::Hash,
        Kind::Set => CKind::Set,
        Kind::SortedSet => CKind::SortedSet,
        Kind::Stream => CKind::Stream,
        // Strings never get here (they are read in the first step).
        Kind::List | Kind::String => CKind::List,
    }
}

fn restore(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let (mut replace, mut absttl) = (false, false);
    let (mut idletime, mut freq) = (None, None);
    let mut j = 4;
    while j < args.len() {
        let arg = args.get(j);
        let more = args.len() - j - 1;
        if is(arg, "replace") {
            replace = true;
        } else if is(arg, "absttl") {
            absttl = true;
        } else if is(arg, "idletime") && more >= 1 && freq.is_none() {
            let idle = int_arg(args.get(j + 1))?;
            if idle < 0 {
                return Err(err("ERR Invalid IDLETIME value, must be >= 0"));
            }
            idletime = Some(idle);
            j += 1;
        } else if is(arg, "freq") && more >= 1 && idletime.is_none() {
            let f = int_arg(args.get(j + 1))?;
            if !(0..=255).contains(&f) {
                return Err(err("ERR Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq = Some(f);
            j += 1;
        } else {
            return Err(err(SYNTAX));
        }
        j += 1;
    }
    // Decoded before the key is locked; their errors still come after
    // BUSYKEY's, in Redis's order.
    let ttl = int_arg(args.get(2));
    let decoded = payload::open(args.get(3));
    let event = ctx.write(&[key], false, |txn, db, now| {
        if !replace && txn.get(db, key, now)?.is_some() {
            return Err(err(BUSYKEY));
        }
        let ttl = ttl?;
        if ttl < 0 {
            return Err(err("ERR Invalid TTL value, must be >= 0"));
        }
        let value = decoded.map_err(|e| match e {
            PayloadError::VersionOrChecksum => err(BAD_PAYLOAD),
            PayloadError::BadFormat(_) => err(BAD_FORMAT),
        })?;
        if value.is_empty_collection() {
            return Err(err(BAD_FORMAT));
        }
        let stored = value.into_stored().map_err(|_| err(BAD_FORMAT))?;
        let expire_at = match ttl {
            0 => None,
            _ if absttl => Some(ttl as u64),
            _ => Some((ttl as u64).saturating_add(now)),
        };
        if expire_at.is_some_and(|at| at <= now) {
            // Already expired: the key ends up absent, as in Redis.
            if replace && txn.delete(db, key, now)? {
                return Ok(Some((notify::GENERIC, "del")));
            }
            return Ok(None);
        }
        put_stored(txn, db, key, stored, expire_at)?;
        Ok(Some((notify::GENERIC, "restore")))
    })?;
    if let Some((class, event)) = event {
        ctx.notify(class, event, key);
    }
    // Set after the write (inside EXEC, whose writes are applied at its
    // end, the key is not there yet and keeps a new key's field).
    let access = &ctx.ks().access;
    let field = match (idletime, freq) {
        (Some(idle), _) if !access.is_lfu() => Some(access.field_for_idle(idle as u64)),
        (_, Some(freq)) if access.is_lfu() => Some(access.field_for_frequency(freq as u8)),
        _ => None,
    };
    if let Some(field) = field {
        ctx.ks().set_access(ctx.db(), key, field)?;
    }
    ctx.out.simple("OK");
    Ok(())
}
