//! MEMORY: what a key costs, and the server's memory at a glance.
//!
//! `MEMORY USAGE` counts what the key holds on both sides of Engram's
//! split: a string is its persistent record (header, key, value, padding:
//! the engine's `record::encoded_bytes`) plus its DRAM index entry; a
//! collection is its DRAM structure (`Object::approx_heap_bytes`) plus
//! the key. (Its logged operations and checkpoint images are shared
//! storage, not counted per key.)

use super::{
    err, int_arg, is, lowercase, unknown_subcommand, wrong_sub_arity, CmdResult, CommandSpec, Ctx,
    Group, READONLY, SYNTAX,
};
use crate::keyspace::value::Kind;
use crate::keyspace::CKind;
use crate::resp::Args;

/// The DRAM index's entry for one string key (hash and offset), plus the
/// table's share of empty slots at its usual load.
const INDEX_ENTRY_BYTES: u64 = 24;
/// A collection key's own bookkeeping beside its structure (the map entry
/// holding it and the meta word).
const COLLECTION_KEY_BYTES: u64 = 48;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("server");
    vec![g.command(
        "memory",
        -2,
        READONLY,
        (2, 2, 1),
        memory,
        "Reports memory use (USAGE STATS DOCTOR MALLOC-STATS PURGE).",
    )]
}

fn memory(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    match lowercase(sub).as_str() {
        "usage" if args.len() >= 3 => {
            // SAMPLES is checked as Redis checks it; the count is exact
            // here, so the sample size changes nothing.
            match args.len() {
                3 => {}
                5 if is(args.get(3), "samples") => {
                    int_arg(args.get(4))?;
                }
                _ => return Err(err(SYNTAX)),
            }
            let key = args.get(2);
            let meta = ctx.read(key, |meta, payload| Ok((meta, payload.len())))?;
            let Some((meta, value_len)) = meta else {
                ctx.out.null();
                return Ok(());
            };
            let bytes = match meta.kind() {
                Kind::String => {
                    engram_engine::record::encoded_bytes(key.len() + 1, value_len)
                        + INDEX_ENTRY_BYTES
                }
                kind => {
                    let ckind = match kind {
                        Kind::Hash => CKind::Hash,
                        Kind::Set => CKind::Set,
                        Kind::SortedSet => CKind::SortedSet,
                        Kind::Stream => CKind::Stream,
                        _ => CKind::List,
                    };
                    let heap = ctx.read_collection(key, ckind, |object| {
                        Ok(object.map_or(0, |o| o.approx_heap_bytes()))
                    })?;
                    heap as u64 + key.len() as u64 + COLLECTION_KEY_BYTES
                }
            };
            ctx.out.int(bytes as i64);
        }
        "stats" if args.len() == 2 => {
            let store = ctx.ks().store().stats();
            let usage = crate::maxmemory::usage(ctx.ks());
            let keys: u64 = (0..ctx.ks().databases())
                .map(|db| ctx.ks().dbsize(db))
                .sum();
            let out = &mut *ctx.out;
            let pairs: [(&str, i64); 7] = [
                ("total.allocated", usage.used() as i64),
                ("dram.allocated", usage.dram as i64),
                ("rss", usage.rss as i64),
                ("keys.count", keys as i64),
                ("persistent.file.bytes", store.file_bytes as i64),
                ("persistent.live.bytes", store.live_bytes as i64),
                ("index.keys", store.keys as i64),
            ];
            out.map(pairs.len());
            for (name, value) in pairs {
                out.bulk(name.as_bytes());
                out.int(value);
            }
        }
        "doctor" if args.len() == 2 => {
            let store = ctx.ks().store().stats();
            let text = format!(
                "Engram keeps values in a persistent data file ({} bytes, {} live) and its \
                 index and collections in DRAM. Nothing unusual to report; INFO memory and \
                 MEMORY STATS give the numbers.\n",
                store.file_bytes, store.live_bytes
            );
            ctx.out.verbatim(&text);
        }
        "malloc-stats" if args.len() == 2 => {
            ctx.out
                .verbatim("Stats not supported for the current allocator (mimalloc)\n");
        }
        "purge" if args.len() == 2 => ctx.out.ok(),
        "help" if args.len() == 2 => {
            let lines = [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return memory problems reports.",
                "MALLOC-STATS",
                "    Return internal statistics report from the memory allocator.",
                "PURGE",
                "    Attempt to purge dirty pages for reclamation by the allocator.",
                "STATS",
                "    Return information about the memory usage of the server.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value. Nested values are",
                "    sampled up to <count> times (default: 5, 0 means sample all).",
                "HELP",
                "    Print this help.",
            ];
            ctx.out.array(lines.len());
            for line in lines {
                ctx.out.simple(line);
            }
        }
        "usage" | "stats" | "doctor" | "malloc-stats" | "purge" | "help" => {
            return Err(wrong_sub_arity("memory", sub))
        }
        _ => return Err(unknown_subcommand("memory", sub)),
    }
    Ok(())
}
