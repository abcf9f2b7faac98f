//! HyperLogLog commands: PFADD PFCOUNT PFMERGE, and PFDEBUG and
//! PFSELFTEST (Redis's own test suite uses both). The values are plain
//! strings in Redis's byte layout (see `crate::hll`), so GET and SET carry
//! them between Engram and Redis unchanged.

use std::sync::atomic::Ordering;

use super::string_patch::{write_patch, Patch};
use super::{
    err, lowercase, run_blocking, CmdError, CmdResult, CommandSpec, Ctx, Group, ADMIN, FAST,
    READONLY, WRITE, WRONGTYPE,
};
use crate::hll::{self, REGISTERS};
use crate::keyspace::value::{Encoding, Kind, Meta};
use crate::notify;
use crate::resp::Args;

/// A string that is not a HyperLogLog (Redis's own WRONGTYPE text).
const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("hyperloglog");
    vec![
        g.command(
            "pfadd",
            -2,
            WRITE | FAST,
            (1, 1, 1),
            pfadd,
            "Adds elements to a HyperLogLog key. Creates the key if it doesn't exist.",
        ),
        g.command(
            "pfcount",
            -2,
            READONLY,
            (1, -1, 1),
            pfcount,
            "Returns the approximated cardinality of the set(s) observed by the HyperLogLog key(s).",
        ),
        g.command(
            "pfmerge",
            -2,
            WRITE,
            (1, -1, 1),
            pfmerge,
            "Merges one or more HyperLogLog values into a single key.",
        ),
        g.command(
            "pfdebug",
            3,
            WRITE | ADMIN,
            (2, 2, 1),
            pfdebug,
            "Internal commands for debugging HyperLogLog values.",
        ),
        g.keyless(
            "pfselftest",
            1,
            ADMIN,
            pfselftest,
            "An internal command for testing HyperLogLog values.",
        ),
    ]
}

/// A stored value as a HyperLogLog: another type is the usual WRONGTYPE,
/// a string that is not one is Redis's HyperLogLog WRONGTYPE.
fn hll_of(meta: Meta, payload: &[u8]) -> Result<&[u8], CmdError> {
    if meta.kind() != Kind::String {
        return Err(err(WRONGTYPE));
    }
    if meta.encoding() == Encoding::Int {
        return Err(err(NOT_HLL));
    }
    hll::validate(payload).map_err(|_| err(NOT_HLL))?;
    Ok(payload)
}

fn corrupt<T>(_: T) -> CmdError {
    err(CORRUPT)
}

/// `hll-sparse-max-bytes`; a group's apply takes the default, so that
/// every member encodes alike whatever its own setting.
fn sparse_max(ctx: &Ctx) -> usize {
    if ctx.session.applying() {
        return crate::hll::DEFAULT_SPARSE_MAX_BYTES;
    }
    ctx.shared
        .runtime
        .hll_sparse_max_bytes
        .load(Ordering::Relaxed)
}

fn pfadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let sparse_max = sparse_max(ctx);
    let updated = ctx.write(&[key], false, |txn, db, now| {
        let stored = txn.get(db, key, now)?;
        // A new key counts as a change even with no elements.
        let (mut value, mut updated, expire_at) = match &stored {
            Some(s) => (
                hll_of(s.meta, s.payload())?.to_vec(),
                false,
                s.meta.expire_at(),
            ),
            None => (hll::new_sparse(), true, None),
        };
        for element in args.iter().skip(2) {
            updated |= hll::add(&mut value, element, sparse_max).map_err(corrupt)?;
        }
        if updated {
            hll::invalidate_cache(&mut value);
            txn.put_string(db, key, &value, expire_at)?;
        }
        Ok(updated)
    })?;
    if updated {
        ctx.notify(notify::STRING, "pfadd", key);
    }
    ctx.out.int(i64::from(updated));
    Ok(())
}

fn pfcount(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 2 {
        return pfcount_union(ctx, args);
    }
    let key = args.get(1);
    // Lock-free first: a valid cached count is the common case.
    let cached = ctx.read(key, |meta, payload| {
        Ok(hll::cached_count(hll_of(meta, payload)?))
    })?;
    let count = match cached {
        None => 0,
        Some(Some(count)) => count,
        // Stale on a group's member, outside the apply: the count is not
        // stored (a read runs on one member only, and the value's bytes
        // must stay the same on every member).
        Some(None) if ctx.shared.group.get().is_some() && !ctx.session.applying() => ctx
            .read(key, |meta, payload| {
                hll::count(hll_of(meta, payload)?).map_err(corrupt)
            })?
            .unwrap_or(0),
        // Stale: count, and store the count in the header as Redis does
        // (a read-only command that writes its cache).
        Some(None) => ctx.write(&[key], false, |txn, db, now| {
            let Some(stored) = txn.get(db, key, now)? else {
                return Ok(0);
            };
            let value = hll_of(stored.meta, stored.payload())?;
            if let Some(count) = hll::cached_count(value) {
                return Ok(count);
            }
            let count = hll::count(value).map_err(corrupt)?;
            let patch = Patch {
                offset: 8,
                bytes: hll::cache_bytes(count).to_vec(),
                min_len: value.len(),
            };
            write_patch(txn, db, key, Some(&stored), &patch)?;
            Ok(count)
        })?,
    };
    ctx.out.int(count as i64);
    Ok(())
}

/// PFCOUNT of several keys: the count of their union (absent keys are
/// empty), with no cache to update.
fn pfcount_union(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut max = Box::new([0u8; REGISTERS]);
    for key in args.iter().skip(1) {
        ctx.read(key, |meta, payload| {
            hll::merge(&mut max, hll_of(meta, payload)?).map_err(corrupt)
        })?;
    }
    ctx.out.int(hll::count_registers(&max) as i64);
    Ok(())
}

fn pfmerge(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let dest = keys[0];
    let sparse_max = sparse_max(ctx);
    ctx.write(&keys, false, |txn, db, now| {
        let mut max = Box::new([0u8; REGISTERS]);
        let mut use_dense = false;
        let mut target = None;
        // The destination is the first source.
        for (i, key) in keys.iter().enumerate() {
            let Some(stored) = txn.get(db, key, now)? else {
                continue;
            };
            let value = hll_of(stored.meta, stored.payload())?;
            use_dense |= hll::is_dense(value);
            hll::merge(&mut max, value).map_err(corrupt)?;
            if i == 0 {
                target = Some((value.to_vec(), stored.meta.expire_at()));
            }
        }
        let (mut value, expire_at) = target.unwrap_or_else(|| (hll::new_sparse(), None));
        // A dense source makes the result dense at once.
        if use_dense {
            hll::to_dense(&mut value).map_err(corrupt)?;
        }
        for (index, &count) in max.iter().enumerate() {
            if count != 0 {
                // Redis ignores a failure here: every source was read
                // whole above, and the target is one of them.
                let _ = hll::set_register(&mut value, index, count, sparse_max);
            }
        }
        hll::invalidate_cache(&mut value);
        txn.put_string(db, dest, &value, expire_at)?;
        Ok(())
    })?;
    ctx.notify(notify::STRING, "pfadd", dest);
    ctx.out.ok();
    Ok(())
}

enum DebugReply {
    Registers(Vec<u8>),
    Text(String),
    Status(&'static str),
    Int(i64),
}

fn pfdebug(ctx: &mut Ctx, args: Args) -> CmdResult {
    let (sub, key) = (args.get(1), args.get(2));
    let sub_name = String::from_utf8_lossy(sub).into_owned();
    let sub_lower = lowercase(sub);
    let reply = ctx.write(&[key], false, |txn, db, now| {
        let Some(stored) = txn.get(db, key, now)? else {
            return Err(err("ERR The specified key does not exist"));
        };
        let mut value = hll_of(stored.meta, stored.payload())?.to_vec();
        let expire_at = stored.meta.expire_at();
        Ok(match sub_lower.as_str() {
            // Both turn the stored value dense, as in Redis.
            "getreg" | "todense" => {
                let converted = hll::to_dense(&mut value).map_err(corrupt)?;
                if converted {
                    txn.put_string(db, key, &value, expire_at)?;
                }
                if sub_lower == "getreg" {
                    DebugReply::Registers(hll::dense_registers(&value))
                } else {
                    DebugReply::Int(i64::from(converted))
                }
            }
            "decode" => {
                if hll::is_dense(&value) {
                    return Err(err("ERR HLL encoding is not sparse"));
                }
                DebugReply::Text(hll::decode_sparse(&value))
            }
            "encoding" => DebugReply::Status(if hll::is_dense(&value) {
                "dense"
            } else {
                "sparse"
            }),
            _ => return Err(err(format!("ERR Unknown PFDEBUG subcommand '{sub_name}'"))),
        })
    })?;
    match reply {
        DebugReply::Registers(registers) => {
            ctx.out.array(registers.len());
            for register in registers {
                ctx.out.int(i64::from(register));
            }
        }
        DebugReply::Text(text) => ctx.out.bulk(text.as_bytes()),
        DebugReply::Status(status) => ctx.out.simple(status),
        DebugReply::Int(n) => ctx.out.int(n),
    }
    Ok(())
}

fn pfselftest(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let sparse_max = sparse_max(ctx);
    // Ten million additions: seconds of work, off this worker's other
    // connections.
    run_blocking(|| hll::self_test(sparse_max)).map_err(|text| err(format!("ERR {text}")))?;
    ctx.out.ok();
    Ok(())
}
