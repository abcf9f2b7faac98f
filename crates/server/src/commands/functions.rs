//! FUNCTION: Redis 7.0's function libraries.
//!
//! Engram has no Lua engine yet, so no library can be loaded and the set
//! of libraries is always empty. The subcommands that only read or clear
//! that set (FLUSH, LIST, STATS, HELP) answer exactly what Redis
//! answers for an empty set, which is what every client's and test
//! suite's setup calls; the ones that would need a script engine (LOAD,
//! RESTORE, DUMP) say so; DELETE and KILL find nothing to act on.

use super::{
    err, is, lowercase, unknown_subcommand, wrong_sub_arity, CmdResult, CommandSpec, Ctx, Group,
    SYNTAX,
};
use crate::resp::Args;

const NO_ENGINE: &str = "ERR functions are not available: this server has no Lua engine yet";

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("scripting");
    vec![g.keyless(
        "function",
        -2,
        0,
        function,
        "Manages function libraries (FLUSH LIST STATS; LOAD needs a Lua engine).",
    )]
}

fn function(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    match lowercase(sub).as_str() {
        "flush" => {
            match args.len() {
                2 => {}
                3 if is(args.get(2), "async") || is(args.get(2), "sync") => {}
                3 => return Err(err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")),
                _ => return Err(wrong_sub_arity("function", sub)),
            }
            ctx.out.ok();
        }
        "list" => {
            // LIBRARYNAME pattern and WITHCODE are accepted and match
            // nothing: there are no libraries.
            let mut i = 2;
            while i < args.len() {
                if is(args.get(i), "withcode") {
                    i += 1;
                } else if is(args.get(i), "libraryname") && i + 1 < args.len() {
                    i += 2;
                } else {
                    return Err(err(SYNTAX));
                }
            }
            ctx.out.array(0);
        }
        "stats" => {
            if args.len() != 2 {
                return Err(wrong_sub_arity("function", sub));
            }
            let out = &mut *ctx.out;
            out.map(2);
            out.bulk(b"running_script");
            out.null();
            out.bulk(b"engines");
            out.map(0);
        }
        "kill" => return Err(err("NOTBUSY No scripts in execution right now.")),
        "delete" => {
            if args.len() != 3 {
                return Err(wrong_sub_arity("function", sub));
            }
            return Err(err("ERR Library not found"));
        }
        "load" | "restore" | "dump" => return Err(err(NO_ENGINE)),
        "help" => {
            let lines = [
                "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "LOAD [REPLACE] <FUNCTION CODE>",
                "DELETE <LIBRARY NAME>",
                "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
                "FLUSH [ASYNC|SYNC]",
                "STATS",
                "KILL",
                "DUMP",
                "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
                "HELP",
            ];
            ctx.out.array(lines.len());
            for line in lines {
                ctx.out.simple(line);
            }
        }
        _ => return Err(unknown_subcommand("function", sub)),
    }
    Ok(())
}
