//! DEBUG: the subcommands Redis's own test helpers use, where they mean
//! something here.
//!
//! As in Redis, DEBUG is refused unless `enable-debug-command` is `yes`
//! (or `local`, for clients connecting over loopback), a setting of the
//! configuration file only.
//!
//! | subcommand | here |
//! |---|---|
//! | `SLEEP <seconds>` | blocks this client (Redis blocks the whole server; Engram's other clients go on) |
//! | `SET-DISABLE-DENY-SCRIPTS 0\|1` | lets scripts call the commands Redis refuses them (`noscript`: DEBUG itself), as Redis's tests of DEBUG PROTOCOL through scripts need; MIGRATE stays refused |
//! | `SET-ACTIVE-EXPIRE 0\|1` | stops and restarts the background expiry (reads still never return expired keys) |
//! | `NET-LOOPS <n>` | Engram's own: fixes how many network loops serve clients (`net_loops`; 0: as the load asks), replies with the count in use |
//! | `LOG <message>` | writes the message to the server log |
//! | `QUICKLIST-PACKED-THRESHOLD <size>` | checked and accepted; Engram's lists have no quicklist nodes |
//! | `OBJECT <key>` | the key's encoding and serialized length, in Redis's line format |
//! | `PROTOCOL <type>` | a reply of each RESP3 type (for clients testing their parsers) |
//! | `RELOAD [MERGE] [NOFLUSH] [NOSAVE]` | closes the keyspace and opens it again from persistent memory, recovery included, with every client still connected (`reload`); the options are accepted and change nothing: there is no dump to save or skip, and what is reloaded is exactly what was there |
//! | `LOADAOF` | the same reload: Redis reloads its append-only file, Engram its log |
//!
//! Everything else (DIGEST, JMAP, POPULATE, ...) is an unknown subcommand.
//! RELOAD and LOADAOF are refused inside MULTI and scripts, which hold the
//! keyspace the reload must close.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{
    err, int_arg, is, lowercase, run_blocking, unknown_subcommand, wrong_sub_arity, CmdResult,
    CommandSpec, Ctx, Group, ADMIN,
};
use crate::resp::Args;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("server");
    vec![g.keyless(
        "debug",
        -2,
        ADMIN,
        debug,
        "A container for debugging commands (SLEEP SET-ACTIVE-EXPIRE LOG OBJECT RELOAD LOADAOF).",
    )]
}

const NOT_ALLOWED: &str = "ERR DEBUG command not allowed. If the enable-debug-command option is \
     set to \"local\", you can run it from a local connection, otherwise you need to set this \
     option in the configuration file, and then restart the server.";

fn allowed(ctx: &Ctx) -> bool {
    match ctx.shared.redis_param("enable-debug-command").as_str() {
        "yes" => true,
        "local" => ctx.session.info.addr.ip().is_loopback(),
        _ => false,
    }
}

fn debug(ctx: &mut Ctx, args: Args) -> CmdResult {
    if !allowed(ctx) {
        return Err(err(NOT_ALLOWED));
    }
    let sub = args.get(1);
    let arity = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(wrong_sub_arity("debug", sub))
        }
    };
    match lowercase(sub).as_str() {
        "sleep" => {
            arity(3)?;
            let seconds: f64 = std::str::from_utf8(args.get(2))
                .ok()
                .and_then(|s| s.parse().ok())
                .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| err("ERR value is not a valid float"))?;
            run_blocking(|| std::thread::sleep(Duration::from_secs_f64(seconds)));
            ctx.out.ok();
        }
        // Lets scripts call the commands Redis refuses them (DEBUG itself,
        // for Redis's tests of DEBUG PROTOCOL through scripts).
        "set-disable-deny-scripts" => {
            arity(3)?;
            let disabled = int_arg(args.get(2))? != 0;
            ctx.shared
                .scripting
                .deny_scripts_disabled
                .store(disabled, Ordering::Relaxed);
            ctx.out.ok();
        }
        // Engram's own: how many network loops serve clients (`net_loops`),
        // fixed from now on; 0 gives the choice back to the load. Replies
        // with the count in use (fewer if the server has fewer loops).
        "net-loops" => {
            arity(3)?;
            let count = int_arg(args.get(2))?;
            if count < 0 {
                return Err(err("ERR the count of network loops must be 0 or more"));
            }
            let in_use = match ctx.shared.loops.get() {
                Some(loops) => loops.fix(count as usize),
                None => 1,
            };
            ctx.out.int(in_use as i64);
        }
        "set-active-expire" => {
            arity(3)?;
            let on = int_arg(args.get(2))? != 0;
            ctx.shared.active_expire.store(on, Ordering::Relaxed);
            ctx.out.ok();
        }
        // Redis pauses its cron; what runs on a timer here is the active
        // expiry (and the tracking table's trimming, done on writes).
        "pause-cron" => {
            arity(3)?;
            let paused = int_arg(args.get(2))? != 0;
            ctx.shared.active_expire.store(!paused, Ordering::Relaxed);
            ctx.out.ok();
        }
        "log" => {
            arity(3)?;
            log::warn!("DEBUG LOG: {}", String::from_utf8_lossy(args.get(2)));
            ctx.out.ok();
        }
        "quicklist-packed-threshold" => {
            arity(3)?;
            let text = String::from_utf8_lossy(args.get(2));
            crate::config::parse_memory(&text).map_err(|e| err(format!("ERR {e}")))?;
            ctx.out.ok();
        }
        "object" => {
            arity(3)?;
            let key = args.get(2);
            let db = ctx.db();
            let field = ctx.ks().access_of(db, key, 0)?.unwrap_or(0);
            let idle = ctx.ks().access.idle_ms(field) / 1000;
            // Redis looks the key up in its dictionary directly: a key past
            // its expiry time that nothing has deleted yet is still shown
            // (and not deleted). Read as at time 0, nothing has expired.
            let saved_now = std::mem::replace(&mut ctx.now_ms, 0);
            let line = ctx.read(key, |meta, payload| {
                let encoding = super::keys::encoding_name(meta, payload);
                Ok(format!(
                    "Value at:0x0 refcount:1 encoding:{encoding} serializedlength:{} \
                     lru:{field} lru_seconds_idle:{idle}",
                    payload.len()
                ))
            });
            ctx.now_ms = saved_now;
            match line? {
                Some(line) => ctx.out.simple(&line),
                None => return Err(err("ERR no such key")),
            }
        }
        "protocol" => {
            arity(3)?;
            protocol(ctx, args.get(2))?;
        }
        "reload" | "loadaof" => {
            if lowercase(sub) == "reload" {
                for option in args.iter().skip(2) {
                    if !["merge", "noflush", "nosave"].contains(&lowercase(option).as_str()) {
                        return Err(err(
                            "ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.",
                        ));
                    }
                }
            }
            // (LOADAOF takes no options; like Redis, it ignores any given.)
            if ctx.exec.is_some() {
                return Err(err(format!(
                    "ERR DEBUG {} cannot run inside MULTI or a script: it closes the keyspace \
                     they hold",
                    lowercase(sub).to_ascii_uppercase()
                )));
            }
            // The reply comes from the connection, after the reload.
            ctx.session.reload = true;
        }
        "help" => {
            let lines = [
                "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "LOADAOF",
                "    The same as RELOAD.",
                "LOG <message>",
                "    Write <message> to the server log.",
                "NET-LOOPS <n>",
                "    Serve clients from <n> network loops (0: as many as the load needs).",
                "OBJECT <key>",
                "    Show low-level info about the <key> and associated value.",
                "PROTOCOL <type>",
                "    Reply with a test value of the specified type. <type> can be: string,",
                "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
                "    true, false.",
                "QUICKLIST-PACKED-THRESHOLD <size>",
                "    Accepted for compatibility; no effect.",
                "RELOAD [MERGE] [NOFLUSH] [NOSAVE]",
                "    Close the keyspace and open it again from persistent memory (recovery",
                "    included). The options are accepted and change nothing.",
                "SET-ACTIVE-EXPIRE <0|1>",
                "    Setting it to 0 disables expiring keys in background.",
                "SET-DISABLE-DENY-SCRIPTS <0|1>",
                "    Setting it to 1 lets scripts call commands they are refused (DEBUG...).",
                "SLEEP <seconds>",
                "    Stop this client for <seconds> (decimal seconds are accepted).",
                "HELP",
                "    Print this help.",
            ];
            ctx.out.array(lines.len());
            for line in lines {
                ctx.out.simple(line);
            }
        }
        _ => return Err(unknown_subcommand("debug", sub)),
    }
    Ok(())
}

/// DEBUG PROTOCOL: Redis's sample reply of each type.
fn protocol(ctx: &mut Ctx, name: &[u8]) -> CmdResult {
    let out = &mut *ctx.out;
    match lowercase(name).as_str() {
        "string" => out.bulk(b"Hello World"),
        "integer" => out.int(12345),
        // Redis's sample double, not an approximation of pi.
        #[allow(clippy::approx_constant)]
        "double" => out.double(3.141),
        "bignum" => out.big_number("1234567999999999999999999999999999999"),
        "null" => out.null(),
        "array" | "set" => {
            if is(name, "set") {
                out.set(3);
            } else {
                out.array(3);
            }
            for j in 0..3 {
                out.int(j);
            }
        }
        "map" => {
            out.map(3);
            for j in 0..3 {
                out.int(j);
                out.boolean(j == 1);
            }
        }
        "attrib" => {
            if out.is_resp3() {
                out.attribute(1);
                out.bulk(b"key-popularity");
                out.array(2);
                out.bulk(b"key:123");
                out.int(90);
            }
            out.bulk(b"Some real reply following the attribute");
        }
        "push" => {
            if !out.is_resp3() {
                return Err(err("ERR RESP2 is not supported by this command"));
            }
            out.push(2);
            out.bulk(b"server-cpu-usage");
            out.int(42);
            out.bulk(b"Some real reply following the push reply");
        }
        "true" => out.boolean(true),
        "false" => out.boolean(false),
        "verbatim" => out.verbatim("This is a verbatim\nstring"),
        _ => {
            return Err(err(
                "ERR Wrong protocol type name. Please use one of the following: \
                 string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false",
            ))
        }
    }
    Ok(())
}
