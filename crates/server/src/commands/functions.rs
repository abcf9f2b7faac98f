//! FUNCTION (LOAD, LIST, DELETE, FLUSH, DUMP, RESTORE, STATS, KILL, HELP),
//! FCALL and FCALL_RO: Redis 7.0's function libraries
//! (`crate::scripting::library`).
//!
//! Libraries are data: every change to the set writes the whole set (its
//! FUNCTION DUMP payload) as the keyspace's functions record, under every
//! key group, and the reply waits for it to be durable like any write's.
//! Lock order as for scripts: key groups, then the Lua state.

use super::scripting::{check_flags, finish_txn, keys_and_args, kill_reply, script_txn, KeysWarm};
use super::{
    err, is, lowercase, unknown_subcommand, wrong_sub_arity, CmdResult, CommandSpec, Ctx, Group,
    WHOLE_KEYSPACE,
};
use crate::keyspace::PrefetchStep;
use crate::resp::Args;
use crate::scripting::library::{FunctionsEngine, RestorePolicy};
use crate::scripting::run::{run_script, Call};

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("scripting");
    let none = (0, 0, 0);
    vec![
        g.keyless("function", -2, 0, function, "Manages function libraries."),
        g.command(
            "fcall",
            -3,
            WHOLE_KEYSPACE,
            none,
            fcall,
            "Invokes a function.",
        ),
        g.command(
            "fcall_ro",
            -3,
            WHOLE_KEYSPACE,
            none,
            fcall_ro,
            "Invokes a read-only function.",
        ),
    ]
}

fn fcall(ctx: &mut Ctx, args: Args) -> CmdResult {
    fcall_generic(ctx, args, false)
}

fn fcall_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    fcall_generic(ctx, args, true)
}

fn fcall_generic(ctx: &mut Ctx, args: Args, ro: bool) -> CmdResult {
    // Before it runs, so that the commands it calls come after it.
    crate::monitor::feed_script_command(ctx.shared, ctx.session, args);
    let name = String::from_utf8_lossy(args.get(1)).into_owned();
    let shared = ctx.shared;
    let flags = {
        let engine = shared.scripting.functions.lock();
        match engine.function(&name) {
            Some(function) => function.flags,
            None => return Err(err("ERR Function not found")),
        }
    };
    // FCALL's own text where EVAL says "value is not an integer".
    if super::int_arg(args.get(2)).is_err() {
        return Err(err("ERR Bad number of keys provided"));
    }
    let (keys, argv) = keys_and_args(&args)?;
    let warm = KeysWarm::new(ctx, &keys);
    warm.step(ctx, PrefetchStep::Lock);
    check_flags(ctx, flags, ro)?;
    let mut call = Call {
        name: &name,
        flags,
        eval: false,
        read_only: ro || flags.no_writes,
        keys,
        args: argv,
        command: args.iter().map(|a| a.to_vec()).collect(),
        warm: warm.hashes(),
        inline: false,
    };
    let (txn, from_exec, placement) = script_txn(ctx);
    warm.step(ctx, PrefetchStep::Bucket);
    call.inline = placement == super::scripting::Placement::Inline;
    let reply_start = ctx.out.len();
    let txn = {
        let engine = shared.scripting.functions.lock();
        let Some(function) = engine.function(&name) else {
            // FUNCTION DELETE or FLUSH came in between.
            let result = finish_txn(ctx, txn, from_exec, reply_start);
            return result.and(Err(err("ERR Function not found")));
        };
        let keyspace = ctx.keyspace;
        let (session, out) = (&mut *ctx.session, &mut *ctx.out);
        let lua_function = &function.function;
        placement.run(|| {
            run_script(
                shared,
                keyspace,
                session,
                out,
                &engine.engine,
                lua_function,
                &call,
                txn,
            )
        })
    };
    finish_txn(ctx, txn, from_exec, reply_start)
}

/// Runs `change` on the library set with the keyspace held, and if it
/// succeeds writes the new set as the functions record.
fn change_libraries<R>(
    ctx: &mut Ctx,
    change: impl FnOnce(&mut FunctionsEngine) -> Result<R, String>,
) -> Result<R, super::CmdError> {
    let (mut txn, from_exec, _) = script_txn(ctx);
    let reply_start = ctx.out.len();
    let outcome = {
        let mut engine = ctx.shared.scripting.functions.lock();
        let changed = change(&mut engine);
        ctx.shared.scripting.note_counts(&engine);
        match changed {
            Ok(value) => txn
                .put_functions_record(&engine.dump())
                .map(|()| value)
                .map_err(super::CmdError::from),
            Err(text) => Err(err(text)),
        }
    };
    finish_txn(ctx, txn, from_exec, reply_start)?;
    outcome
}

fn function(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    match lowercase(sub).as_str() {
        "load" => {
            if args.len() < 3 {
                return Err(wrong_sub_arity("function", sub));
            }
            let mut replace = false;
            let mut i = 2;
            while i < args.len() - 1 {
                if is(args.get(i), "replace") {
                    replace = true;
                    i += 1;
                    continue;
                }
                return Err(err(format!(
                    "ERR Unknown option given: {}",
                    String::from_utf8_lossy(args.get(i))
                )));
            }
            let code = args.get(args.len() - 1);
            let name = change_libraries(ctx, |engine| engine.load(code, replace))?;
            ctx.out.bulk(name.as_bytes());
        }
        "delete" => {
            if args.len() != 3 {
                return Err(wrong_sub_arity("function", sub));
            }
            let name = String::from_utf8_lossy(args.get(2)).into_owned();
            change_libraries(ctx, |engine| {
                if engine.remove(&name) {
                    Ok(())
                } else {
                    Err("ERR Library not found".to_string())
                }
            })?;
            ctx.out.ok();
        }
        "flush" => {
            match args.len() {
                2 => {}
                3 if is(args.get(2), "async") || is(args.get(2), "sync") => {}
                3 => return Err(err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")),
                _ => return Err(super::subcommand_syntax_error("function", sub)),
            }
            change_libraries(ctx, |engine| {
                engine.flush();
                Ok(())
            })?;
            ctx.out.ok();
        }
        "restore" => {
            if args.len() < 3 {
                return Err(wrong_sub_arity("function", sub));
            }
            if args.len() > 4 {
                return Err(super::subcommand_syntax_error("function", sub));
            }
            let policy = match args.len() {
                3 => RestorePolicy::Append,
                _ if is(args.get(3), "flush") => RestorePolicy::Flush,
                _ if is(args.get(3), "append") => RestorePolicy::Append,
                _ if is(args.get(3), "replace") => RestorePolicy::Replace,
                _ => {
                    return Err(err(
                        "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                    ))
                }
            };
            let payload = args.get(2);
            change_libraries(ctx, |engine| engine.restore(payload, policy))?;
            ctx.out.ok();
        }
        "dump" => {
            if args.len() != 2 {
                return Err(wrong_sub_arity("function", sub));
            }
            let payload = ctx.shared.scripting.functions.lock().dump();
            ctx.out.bulk(&payload);
        }
        "list" => list(ctx, &args)?,
        "stats" => {
            if args.len() != 2 {
                return Err(wrong_sub_arity("function", sub));
            }
            stats(ctx);
        }
        "kill" => {
            if args.len() != 2 {
                return Err(wrong_sub_arity("function", sub));
            }
            kill_reply(ctx, false)?;
        }
        "help" => {
            let lines = HELP;
            ctx.out.array(lines.len());
            for line in lines {
                ctx.out.simple(line);
            }
        }
        _ => return Err(unknown_subcommand("function", sub)),
    }
    Ok(())
}

fn list(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let mut with_code = false;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 2;
    while i < args.len() {
        let arg = args.get(i);
        i += 1;
        if is(arg, "withcode") && !with_code {
            with_code = true;
        } else if is(arg, "libraryname") && pattern.is_none() {
            if i >= args.len() {
                return Err(err("ERR library name argument was not given"));
            }
            pattern = Some(args.get(i));
            i += 1;
        } else {
            return Err(err(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(arg)
            )));
        }
    }
    let engine = ctx.shared.scripting.functions.lock();
    let libraries: Vec<_> = engine
        .libraries
        .values()
        .filter(|library| pattern.is_none_or(|p| crate::glob::matches(p, library.name.as_bytes())))
        .collect();
    let out = &mut *ctx.out;
    out.array(libraries.len());
    for library in libraries {
        out.map(if with_code { 4 } else { 3 });
        out.bulk(b"library_name");
        out.bulk(library.name.as_bytes());
        out.bulk(b"engine");
        out.bulk(b"LUA");
        out.bulk(b"functions");
        out.array(library.functions.len());
        for function in library.functions.values() {
            out.map(3);
            out.bulk(b"name");
            out.bulk(function.name.as_bytes());
            out.bulk(b"description");
            match &function.description {
                Some(text) => out.bulk(text.as_bytes()),
                None => out.null(),
            }
            out.bulk(b"flags");
            let names = function.flags.names();
            out.set(names.len());
            for name in names {
                out.simple(name);
            }
        }
        if with_code {
            out.bulk(b"library_code");
            out.bulk(&library.code);
        }
    }
    Ok(())
}

fn stats(ctx: &mut Ctx) {
    let scripting = &ctx.shared.scripting;
    let running = scripting
        .running
        .description()
        .filter(|_| !scripting.running.is_eval());
    let duration_ms = scripting.running.elapsed_ms().unwrap_or(0);
    // Not from `functions` itself: a running function holds it.
    let (libraries, functions) = (
        scripting
            .libraries_count
            .load(std::sync::atomic::Ordering::Relaxed),
        scripting
            .functions_count
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    let out = &mut *ctx.out;
    out.map(2);
    out.bulk(b"running_script");
    match running {
        None => out.null(),
        Some((name, command)) => {
            out.map(3);
            out.bulk(b"name");
            out.bulk(name.as_bytes());
            out.bulk(b"command");
            out.array(command.len());
            for arg in &command {
                out.bulk(arg);
            }
            out.bulk(b"duration_ms");
            out.int(duration_ms as i64);
        }
    }
    out.bulk(b"engines");
    out.map(1);
    out.bulk(b"LUA");
    out.map(2);
    out.bulk(b"libraries_count");
    out.int(libraries as i64);
    out.bulk(b"functions_count");
    out.int(functions as i64);
}

const HELP: [&str; 40] = [
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];
