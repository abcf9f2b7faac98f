//! COMMAND: the command table as clients see it. COUNT, LIST (with
//! subcommands, FILTERBY MODULE/ACLCAT/PATTERN), INFO (Redis's flags,
//! key ranges, ACL categories and key specs: `descriptions`, `key_specs`),
//! DOCS, GETKEYS and GETKEYSANDFLAGS, HELP.

use super::descriptions::{self, Description};
use super::key_specs::{self, Begin, Find};
use super::{
    err, is, lowercase, unknown_subcommand, wrong_sub_arity, CmdResult, CommandSpec, Ctx, ADMIN,
    FAST, READONLY, SYNTAX, TABLE, WRITE,
};
use crate::glob;
use crate::resp::{Args, ReplyWriter};

/// COMMAND INFO's flags of a command Redis does not have (ENGRAM.SCRUB),
/// from Engram's own; Redis's commands show Redis's (`descriptions`).
fn flag_names(spec: &CommandSpec) -> Vec<&'static str> {
    let mut names = Vec::new();
    for (flag, name) in [
        (WRITE, "write"),
        (READONLY, "readonly"),
        (ADMIN, "admin"),
        (super::NO_AUTH, "no_auth"),
        (FAST, "fast"),
    ] {
        if spec.is(flag) {
            names.push(name);
        }
    }
    if super::key_finder::is_movable(spec) {
        names.push("movablekeys");
    }
    names
}

/// The ACL categories of a command Redis does not have, as Redis would
/// name them: its group's, and the categories its flags imply.
fn categories(spec: &CommandSpec) -> Vec<&'static str> {
    let mut categories = match spec.group {
        "generic" => vec!["keyspace"],
        "transactions" => vec!["transaction"],
        "string" | "hash" | "list" | "set" | "sortedset" | "connection" | "scripting" => {
            vec![spec.group]
        }
        // server and engram: admin and dangerous come from the flags.
        _ => Vec::new(),
    };
    for (flag, category) in [
        (WRITE, "write"),
        (READONLY, "read"),
        (ADMIN, "admin"),
        (FAST, "fast"),
    ] {
        if spec.is(flag) {
            categories.push(category);
        }
    }
    if !spec.is(FAST) {
        categories.push("slow");
    }
    if spec.is(ADMIN) {
        categories.push("dangerous");
    }
    categories
}

/// A command's COMMAND INFO: Redis's description where Redis has the
/// command, with Engram's arity; Engram's approximation for its own.
fn command_info(ctx: &mut Ctx, spec: &CommandSpec) {
    let out = &mut *ctx.out;
    out.array(10);
    out.bulk(spec.name.as_bytes());
    out.int(spec.arity as i64);
    let (flags, (first, last, step)) = match descriptions::command(spec.name) {
        Some(description) => {
            let (range, movable) = key_specs::legacy_range(spec.name);
            (reply_flags(description, movable), range)
        }
        None => (
            flag_names(spec),
            (spec.keys.0.into(), spec.keys.1.into(), spec.keys.2.into()),
        ),
    };
    out.set(flags.len());
    for flag in flags {
        out.simple(flag);
    }
    out.int(first);
    out.int(last);
    out.int(step);
    reply_categories(out, &command_categories(spec));
    out.set(0); // tips
    reply_key_specs(out, spec.name);
    if descriptions::is_container(spec.name) {
        let subs: Vec<&Description> = descriptions::subcommands_of(spec.name).collect();
        out.array(subs.len());
        for sub in subs {
            subcommand_info(out, sub);
        }
    } else {
        out.set(0);
    }
}

/// Redis's flags, with `movablekeys` in its place when the keys move.
fn reply_flags(description: &Description, movable: bool) -> Vec<&'static str> {
    let mut flags = description.flags.to_vec();
    if movable {
        let at = flags
            .iter()
            .position(|f| *f == "allow_busy")
            .unwrap_or(flags.len());
        flags.insert(at, "movablekeys");
    }
    flags
}

/// The ACL categories of a command (Redis's, or Engram's approximation).
fn command_categories(spec: &CommandSpec) -> Vec<&'static str> {
    descriptions::command(spec.name).map_or_else(|| categories(spec), |d| d.categories())
}

fn subcommand_info(out: &mut ReplyWriter, sub: &Description) {
    out.array(10);
    out.bulk(sub.name.as_bytes());
    out.int(sub.arity as i64);
    let (range, movable) = key_specs::legacy_range(sub.name);
    let flags = reply_flags(sub, movable);
    out.set(flags.len());
    for flag in flags {
        out.simple(flag);
    }
    out.int(range.0);
    out.int(range.1);
    out.int(range.2);
    reply_categories(out, &sub.categories());
    out.set(0); // tips
    reply_key_specs(out, sub.name);
    out.set(0); // no subcommands of its own
}

fn reply_categories(out: &mut ReplyWriter, categories: &[&str]) {
    out.set(categories.len());
    for category in categories {
        out.simple(&format!("@{category}"));
    }
}

/// COMMAND INFO's key specifications, as Redis writes them.
fn reply_key_specs(out: &mut ReplyWriter, name: &str) {
    let specs = key_specs::of(name);
    out.set(specs.len());
    for spec in specs {
        out.map(3);
        out.bulk(b"flags");
        let flags = key_specs::flag_names(spec.flags);
        out.set(flags.len());
        for flag in flags {
            out.simple(flag);
        }
        out.bulk(b"begin_search");
        out.map(2);
        out.bulk(b"type");
        match spec.begin {
            Begin::Index(index) => {
                out.bulk(b"index");
                out.bulk(b"spec");
                out.map(1);
                out.bulk(b"index");
                out.int(index.into());
            }
            Begin::Keyword(keyword, startfrom) => {
                out.bulk(b"keyword");
                out.bulk(b"spec");
                out.map(2);
                out.bulk(b"keyword");
                out.bulk(keyword.as_bytes());
                out.bulk(b"startfrom");
                out.int(startfrom.into());
            }
            Begin::Unknown => {
                out.bulk(b"unknown");
                out.bulk(b"spec");
                out.map(0);
            }
        }
        out.bulk(b"find_keys");
        out.map(2);
        out.bulk(b"type");
        match spec.find {
            Find::Range(lastkey, keystep, limit) => {
                out.bulk(b"range");
                out.bulk(b"spec");
                out.map(3);
                for (name, value) in [("lastkey", lastkey), ("keystep", keystep), ("limit", limit)]
                {
                    out.bulk(name.as_bytes());
                    out.int(value.into());
                }
            }
            Find::Keynum(keynumidx, firstkey, keystep) => {
                out.bulk(b"keynum");
                out.bulk(b"spec");
                out.map(3);
                for (name, value) in [
                    ("keynumidx", keynumidx),
                    ("firstkey", firstkey),
                    ("keystep", keystep),
                ] {
                    out.bulk(name.as_bytes());
                    out.int(value.into());
                }
            }
            Find::Unknown => {
                out.bulk(b"unknown");
                out.bulk(b"spec");
                out.map(0);
            }
        }
    }
}

/// COMMAND INFO of `name`: a command, or `container|sub`; null for none.
fn info_by_name(ctx: &mut Ctx, name: &[u8]) {
    let mut parts = name.split(|&b| b == b'|');
    let (first, sub, rest) = (parts.next(), parts.next(), parts.next());
    match (first.and_then(super::lookup), sub, rest) {
        (Some((_, spec)), None, _) => command_info(ctx, spec),
        (Some((_, spec)), Some(sub), None) => match descriptions::subcommand(spec.name, sub) {
            Some(sub) => subcommand_info(ctx.out, sub),
            None => ctx.out.null_array(),
        },
        _ => ctx.out.null_array(),
    }
}

/// COMMAND LIST's names: every command, each followed by its subcommands,
/// those `keep` accepts (the FILTERBY).
fn list_names(keep: impl Fn(&str, &[&str]) -> bool) -> Vec<&'static str> {
    let mut names = Vec::new();
    for spec in TABLE.iter() {
        if keep(spec.name, &command_categories(spec)) {
            names.push(spec.name);
        }
        for sub in descriptions::subcommands_of(spec.name) {
            if keep(sub.name, &sub.categories()) {
                names.push(sub.name);
            }
        }
    }
    names
}

/// COMMAND GETKEYS / GETKEYSANDFLAGS of `call` (a whole command line), with
/// Redis's errors.
fn getkeys(ctx: &mut Ctx, call: &Args, with_flags: bool) -> CmdResult {
    let Some((_, spec)) = super::lookup(call.get(0)) else {
        return Err(err("ERR Invalid command specified"));
    };
    // A container's keys are its subcommand's (MEMORY USAGE, OBJECT ...).
    let (name, arity_ok, top) = if descriptions::is_container(spec.name) && call.len() >= 2 {
        let Some(sub) = descriptions::subcommand(spec.name, call.get(1)) else {
            return Err(err("ERR Invalid command specified"));
        };
        (sub.name, sub.arity_ok(call.len()), None)
    } else {
        (spec.name, spec.arity_ok(call.len()), Some(spec))
    };
    // Redis's order: a command without keys at all, then the arity, then a
    // call whose arguments name none.
    if !key_specs::has_keys(name, top) {
        return Err(err("ERR The command has no key arguments"));
    }
    if !arity_ok {
        return Err(err("ERR Invalid number of arguments specified for command"));
    }
    let keys = key_specs::keys_with_flags(name, top, call);
    // EVAL with 0 keys and the like (no_mandatory_keys): no keys is an
    // answer, not an error.
    let optional = descriptions::command(name).is_some_and(|d| d.has("no_mandatory_keys"));
    if keys.is_empty() && !optional {
        return Err(err("ERR Invalid arguments specified for command"));
    }
    let out = &mut *ctx.out;
    out.array(keys.len());
    for (i, flags) in keys {
        if with_flags {
            out.array(2);
            out.bulk(call.get(i));
            let names = key_specs::flag_names(flags);
            out.set(names.len());
            for name in names {
                out.simple(name);
            }
        } else {
            out.bulk(call.get(i));
        }
    }
    Ok(())
}

fn command_docs(ctx: &mut Ctx, spec: &CommandSpec) {
    let out = &mut *ctx.out;
    out.bulk(spec.name.as_bytes());
    out.map(3);
    out.bulk(b"summary");
    out.bulk(spec.summary.as_bytes());
    out.bulk(b"since");
    out.bulk(b"1.0.0");
    out.bulk(b"group");
    out.bulk(spec.group.as_bytes());
}

pub fn command(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() == 1 {
        ctx.out.array(TABLE.len());
        for spec in TABLE.iter() {
            command_info(ctx, spec);
        }
        return Ok(());
    }
    let sub = args.get(1);
    match lowercase(sub).as_str() {
        "count" => {
            if args.len() != 2 {
                return Err(wrong_sub_arity("command", sub));
            }
            ctx.out.int(TABLE.len() as i64);
        }
        "list" => {
            let filter = match args.len() {
                2 => None,
                5 if is(args.get(2), "filterby") => Some((lowercase(args.get(3)), args.get(4))),
                _ => return Err(err(SYNTAX)),
            };
            let names = match &filter {
                None => list_names(|_, _| true),
                Some((by, value)) => match by.as_str() {
                    // No modules: no module's commands.
                    "module" => Vec::new(),
                    "aclcat" => list_names(|_, categories| categories.iter().any(|c| is(value, c))),
                    // Redis matches names ignoring case.
                    "pattern" => {
                        let pattern = value.to_ascii_lowercase();
                        list_names(|name, _| glob::matches(&pattern, name.as_bytes()))
                    }
                    _ => return Err(err(SYNTAX)),
                },
            };
            ctx.out.array(names.len());
            for name in names {
                ctx.out.bulk(name.as_bytes());
            }
        }
        "getkeys" | "getkeysandflags" => {
            // Redis's arity for both: -4 (a command and one argument).
            if args.len() < 4 {
                return Err(wrong_sub_arity("command", sub));
            }
            getkeys(ctx, &args.from(2), is(sub, "getkeysandflags"))?;
        }
        "info" => {
            let names: Vec<&[u8]> = args.iter().skip(2).collect();
            if names.is_empty() {
                ctx.out.array(TABLE.len());
                for spec in TABLE.iter() {
                    command_info(ctx, spec);
                }
            } else {
                ctx.out.array(names.len());
                for name in names {
                    info_by_name(ctx, name);
                }
            }
        }
        "docs" => {
            let specs: Vec<&CommandSpec> = if args.len() == 2 {
                TABLE.iter().collect()
            } else {
                args.iter()
                    .skip(2)
                    .filter_map(|name| super::lookup(name).map(|(_, spec)| spec))
                    .collect()
            };
            ctx.out.map(specs.len());
            for spec in specs {
                command_docs(ctx, spec);
            }
        }
        "help" => {
            let lines = [
                "COMMAND [<subcommand>]. Subcommands are:",
                "(no subcommand)",
                "COUNT",
                "DOCS [<command-name> ...]",
                "GETKEYS <full-command>",
                "GETKEYSANDFLAGS <full-command>",
                "INFO [<command-name> ...]",
                "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
                "HELP",
            ];
            ctx.out.array(lines.len());
            for line in lines {
                ctx.out.simple(line);
            }
        }
        _ => return Err(unknown_subcommand("command", sub)),
    }
    Ok(())
}
