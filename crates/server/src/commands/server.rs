//! Server commands: CONFIG INFO DBSIZE FLUSHDB FLUSHALL SWAPDB TIME SAVE
//! BGSAVE LASTSAVE SHUTDOWN, and the table entry of COMMAND (whose handler
//! is `super::command`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{
    err, is, lowercase, unknown_subcommand, wrong_sub_arity, CmdError, CmdResult, CommandSpec, Ctx,
    Group, ADMIN, FAST, NOT_QUEUED, READONLY, SYNTAX, WHOLE_KEYSPACE, WRITE,
};
use crate::config::{appendfsync_name, parse_durability, parse_memory, LogLevel};
use crate::keyspace::durability::unix_now;
use crate::resp::Args;
use crate::{glob, info, redis_params};

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("server");
    vec![
        g.keyless(
            "command",
            -1,
            0,
            super::command::command,
            "Returns detailed information about commands (COUNT INFO DOCS LIST).",
        ),
        g.keyless(
            "config",
            -2,
            ADMIN,
            config,
            "Reads and changes the configuration (GET SET RESETSTAT).",
        ),
        g.keyless(
            "info",
            -1,
            0,
            info,
            "Returns information and statistics about the server.",
        ),
        g.keyless(
            "dbsize",
            1,
            READONLY | FAST,
            dbsize,
            "Returns the number of keys in the database.",
        ),
        g.keyless(
            "flushdb",
            -1,
            WRITE | WHOLE_KEYSPACE,
            flushdb,
            "Removes all keys from the current database.",
        ),
        g.keyless(
            "flushall",
            -1,
            WRITE | WHOLE_KEYSPACE,
            flushall,
            "Removes all keys from all databases.",
        ),
        g.keyless(
            "swapdb",
            3,
            WRITE | FAST | WHOLE_KEYSPACE,
            swapdb,
            "Swaps two databases.",
        ),
        g.keyless("time", 1, FAST, time, "Returns the server time."),
        g.keyless(
            "save",
            1,
            ADMIN,
            save,
            "Makes everything written so far durable against power loss.",
        ),
        g.keyless(
            "bgsave",
            -1,
            ADMIN,
            bgsave,
            "Makes everything written durable, in the background.",
        ),
        g.keyless(
            "bgrewriteaof",
            1,
            ADMIN,
            bgrewriteaof,
            "Starts a checkpoint of the collections, which compacts their operation log \
             (Engram's counterpart of rewriting the append-only file).",
        ),
        g.keyless(
            "role",
            1,
            FAST,
            role,
            "Returns the replication role: always a primary without replicas.",
        ),
        g.keyless(
            "lolwut",
            -1,
            READONLY | FAST,
            lolwut,
            "Displays the version.",
        ),
        g.keyless(
            "module",
            -2,
            ADMIN,
            module,
            "Lists loaded modules (none: Engram loads no Redis modules).",
        ),
        g.keyless(
            "lastsave",
            1,
            FAST,
            lastsave,
            "Returns the Unix time of the last successful save (msync).",
        ),
        g.keyless(
            "shutdown",
            -1,
            ADMIN | NOT_QUEUED,
            shutdown,
            "Syncs the data and stops the server.",
        ),
    ]
}

// ---- CONFIG --------------------------------------------------------------

/// Every parameter CONFIG GET knows, with its current value: Engram's
/// own and the Redis parameters that mean something here, then the rest
/// of Redis's (`redis_params`: kept values without effect), each under its
/// name and its alias.
fn parameters(ctx: &Ctx) -> Vec<(&'static str, String)> {
    let mut all = live_parameters(ctx);
    let values = ctx.shared.runtime.redis_params.read();
    for param in redis_params::PARAMS {
        if param.hidden || all.iter().any(|(name, _)| *name == param.name) {
            continue;
        }
        let value = values.get(param.name).cloned().unwrap_or_default();
        if let Some(alias) = param.alias {
            all.push((alias, value.clone()));
        }
        all.push((param.name, value));
    }
    all
}

/// The parameters whose values Engram acts on.
fn live_parameters(ctx: &Ctx) -> Vec<(&'static str, String)> {
    let shared = ctx.shared;
    let config = &shared.config;
    let runtime = &shared.runtime;
    // The rule asked for, which CONFIG REWRITE keeps and the next opening
    // takes (INFO persistence shows the one in force).
    let durability = ctx.ks().commit().requested();
    let integrity = &config.integrity;
    let stats = ctx.ks().store().integrity_stats();
    vec![
        ("bind", config.bind.clone()),
        ("port", shared.port.to_string()),
        ("dir", config.dir.display().to_string()),
        ("databases", config.databases.to_string()),
        ("io-threads", config.worker_threads().to_string()),
        ("durability", durability.name().into()),
        ("appendfsync", appendfsync_name(durability).into()),
        (
            "requirepass",
            runtime.requirepass.read().clone().unwrap_or_default(),
        ),
        (
            "maxclients",
            runtime.maxclients.load(Ordering::Relaxed).to_string(),
        ),
        (
            "timeout",
            runtime.timeout_secs.load(Ordering::Relaxed).to_string(),
        ),
        ("loglevel", runtime.loglevel().name().into()),
        (
            "proto-max-bulk-len",
            runtime
                .proto_max_bulk_len
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            "client-query-buffer-limit",
            runtime
                .client_query_buffer_limit
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            "mode",
            if ctx.ks().commit().is_dax() {
                "dax"
            } else {
                "emulated"
            }
            .into(),
        ),
        ("integrity", integrity.mode.name().into()),
        (
            "integrity-period-ms",
            integrity.period.as_millis().to_string(),
        ),
        // The stripe width in force: an existing integrity file keeps the
        // one it was created with, whatever the configuration says.
        (
            "integrity-stripe-pages",
            stats
                .map_or(integrity.stripe_pages, |s| s.stripe_pages)
                .to_string(),
        ),
        (
            "integrity-scrub-rate-mb",
            (integrity.scrub_bytes_per_sec >> 20).to_string(),
        ),
        (
            "integrity-scrub-period-sec",
            integrity.scrub_period.as_secs().to_string(),
        ),
        (
            "collections-checkpoint-bytes",
            config.collections_checkpoint_bytes.to_string(),
        ),
        (
            "collections-backpressure-factor",
            config.collections_backpressure_factor.to_string(),
        ),
        ("background-cpus", config.background_cpus.to_string()),
    ]
    .into_iter()
    .chain(config.tls.parameters())
    .collect()
}

const IMMUTABLE: &[&str] = &["bind", "port", "dir", "databases", "mode", "io-threads"];

/// Settings the engine takes when the store opens (see `config`).
const FIXED_AT_STARTUP: &[&str] = &[
    "integrity",
    "integrity-period-ms",
    "integrity-stripe-pages",
    "integrity-scrub-rate-mb",
    "integrity-scrub-period-sec",
    "collections-checkpoint-bytes",
    "collections-backpressure-factor",
    "background-cpus",
];

fn config(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    match lowercase(sub).as_str() {
        "get" => {
            if args.len() < 3 {
                return Err(wrong_sub_arity("config", sub));
            }
            let mut all = parameters(ctx);
            let patterns: Vec<String> = args.iter().skip(2).map(lowercase).collect();
            // Hidden parameters answer only when named exactly, as Redis.
            let values = ctx.shared.runtime.redis_params.read().clone();
            for param in redis_params::PARAMS.iter().filter(|p| p.hidden) {
                if patterns.iter().any(|p| p == param.name) {
                    let value = values.get(param.name).cloned().unwrap_or_default();
                    all.push((param.name, value));
                }
            }
            let found: Vec<&(&str, String)> = all
                .iter()
                .filter(|(name, _)| {
                    patterns
                        .iter()
                        .any(|p| glob::matches(p.as_bytes(), name.as_bytes()))
                })
                .collect();
            ctx.out.map(found.len());
            for (name, value) in found {
                ctx.out.bulk(name.as_bytes());
                ctx.out.bulk(value.as_bytes());
            }
        }
        "set" => {
            if args.len() < 4 || !args.len().is_multiple_of(2) {
                return Err(wrong_sub_arity("config", sub));
            }
            // Validate everything first so a bad pair changes nothing.
            let mut changes = Vec::new();
            let mut seen: Vec<String> = Vec::new();
            for i in (2..args.len()).step_by(2) {
                let name = lowercase(args.get(i));
                let value = String::from_utf8_lossy(args.get(i + 1)).into_owned();
                let canonical = redis_params::find(&name).map_or(name.clone(), |p| p.name.into());
                if seen.contains(&canonical) {
                    return Err(err(format!(
                        "ERR CONFIG SET failed (possibly related to argument '{name}') - \
                         duplicate parameter"
                    )));
                }
                seen.push(canonical);
                changes.push(validate_setting(&name, &value)?);
            }
            for change in changes {
                change(ctx);
            }
            ctx.out.ok();
        }
        "resetstat" => {
            if args.len() != 2 {
                return Err(wrong_sub_arity("config", sub));
            }
            ctx.shared.stats.reset();
            let ks = &ctx.ks().stats;
            ks.hits.reset();
            ks.misses.reset();
            ks.expired_keys.store(0, Ordering::Relaxed);
            ctx.shared.eviction.reset_stats();
            engram_collections::lazy_free::reset_freed();
            ctx.out.ok();
        }
        "rewrite" => {
            return Err(err(
                "ERR CONFIG REWRITE is not supported; edit the configuration file instead",
            ))
        }
        "help" => {
            let lines = [
                "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET <pattern> [<pattern> ...]",
                "SET <directive> <value> [<directive> <value> ...]",
                "RESETSTAT",
                "HELP",
            ];
            ctx.out.array(lines.len());
            for line in lines {
                ctx.out.simple(line);
            }
        }
        _ => return Err(unknown_subcommand("config", sub)),
    }
    Ok(())
}

type Change = Box<dyn FnOnce(&mut Ctx)>;

fn validate_setting(name: &str, value: &str) -> Result<Change, CmdError> {
    let failed = |reason: String| {
        err(format!(
            "ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}"
        ))
    };
    if IMMUTABLE.contains(&name) {
        return Err(failed("can't set immutable config".into()));
    }
    if FIXED_AT_STARTUP.contains(&name) {
        return Err(failed(
            "can't set immutable config: the integrity and collections checkpoint settings \
             are fixed at startup (set them in the configuration file, or the integrity \
             ones with engram serve --integrity...)"
                .into(),
        ));
    }
    if crate::tls::PARAMETERS.contains(&name) {
        return Err(failed(
            "can't set immutable config: the TLS settings are read once, at startup \
             (set them in the configuration file or on the command line and restart)"
                .into(),
        ));
    }
    let number = || {
        value
            .parse::<u64>()
            .map_err(|_| failed("argument couldn't be parsed into an integer".into()))
    };
    Ok(match name {
        "durability" | "appendfsync" => {
            let durability = parse_durability(value).map_err(failed)?;
            Box::new(move |ctx: &mut Ctx| {
                // A staged keyspace logs why the rule waits for a reopening.
                ctx.ks().set_durability(durability);
                log::info!("durability set to {}", durability.name());
            })
        }
        "requirepass" => {
            let password = (!value.is_empty()).then(|| value.to_string());
            Box::new(move |ctx: &mut Ctx| {
                // As Redis's ACLUpdateDefaultUserPassword: the default
                // user's only password, or nopass when empty.
                ctx.shared
                    .acl
                    .set_default_password(password.as_deref().map(str::as_bytes));
                *ctx.shared.runtime.requirepass.write() = password;
            })
        }
        "maxclients" => {
            let n = number()? as usize;
            if n == 0 {
                return Err(failed(
                    "argument must be between 1 and 4294967295 inclusive".into(),
                ));
            }
            Box::new(move |ctx: &mut Ctx| ctx.shared.runtime.maxclients.store(n, Ordering::Relaxed))
        }
        "timeout" => {
            let n = number()?;
            Box::new(move |ctx: &mut Ctx| {
                ctx.shared.runtime.timeout_secs.store(n, Ordering::Relaxed)
            })
        }
        "loglevel" => {
            let level: LogLevel = value.parse().map_err(failed)?;
            Box::new(move |ctx: &mut Ctx| ctx.shared.runtime.set_loglevel(level))
        }
        "proto-max-bulk-len" => {
            let n = parse_memory(value).map_err(failed)?;
            if !(1024..=crate::resp::parse::DEFAULT_MAX_BULK_BYTES).contains(&n) {
                return Err(failed(
                    "argument must be a memory value between 1kb and 512mb".into(),
                ));
            }
            Box::new(move |ctx: &mut Ctx| {
                ctx.shared
                    .runtime
                    .proto_max_bulk_len
                    .store(n, Ordering::Relaxed)
            })
        }
        "client-query-buffer-limit" => {
            let n = parse_memory(value).map_err(failed)?;
            if n < 1024 * 1024 {
                return Err(failed(
                    "argument must be a memory value of at least 1mb".into(),
                ));
            }
            Box::new(move |ctx: &mut Ctx| {
                ctx.shared
                    .runtime
                    .client_query_buffer_limit
                    .store(n, Ordering::Relaxed)
            })
        }
        _ => {
            let Some(param) = redis_params::find(name) else {
                return Err(err(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                )));
            };
            if param.immutable {
                return Err(failed("can't set immutable config".into()));
            }
            let value = param.check(value).map_err(failed)?;
            let canonical = param.name;
            Box::new(move |ctx: &mut Ctx| {
                let shown = ctx.shared.apply_redis_param(canonical, &value);
                ctx.shared
                    .runtime
                    .redis_params
                    .write()
                    .insert(canonical, shown.unwrap_or(value));
                // As Redis, a lower limit evicts at once, not at the next
                // command (outside EXEC: its locks are held).
                if canonical == "maxmemory"
                    && ctx.exec.is_none()
                    && ctx.shared.memory_limit.is_set()
                {
                    crate::eviction::before_command(ctx.shared, ctx.ks(), ctx.session);
                }
            })
        }
    })
}

// ---- INFO and the rest ---------------------------------------------------

fn info(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sections: Vec<String> = args.iter().skip(1).map(lowercase).collect();
    let text = info::render(ctx.shared, ctx.ks(), &sections);
    ctx.out.verbatim(&text);
    Ok(())
}

fn dbsize(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let n = match &ctx.exec {
        // Inside EXEC (a script, a replicated node's apply) the count
        // includes the transaction's buffered writes, which stay buffered:
        // applied here, they would outlive a crash without the apply's
        // applied index, and be applied again after it.
        Some(txn) => txn.dbsize(ctx.session.db),
        None => ctx.ks().dbsize(ctx.session.db),
    };
    ctx.out.int(n as i64);
    Ok(())
}

fn flush_mode(args: &Args) -> CmdResult {
    match args.len() {
        1 => Ok(()),
        2 if is(args.get(1), "async") || is(args.get(1), "sync") => Ok(()),
        _ => Err(err(SYNTAX)),
    }
}

fn flush(ctx: &mut Ctx, db: Option<usize>) -> CmdResult {
    match &mut ctx.exec {
        Some(txn) => {
            txn.flush(db)?;
        }
        None => {
            let mut txn = ctx.ks().lock_all(false);
            let result = txn.flush(db);
            ctx.session.wrote |= txn.commit()?;
            result?;
        }
    }
    ctx.session.wrote = true;
    ctx.out.ok();
    Ok(())
}

fn flushdb(ctx: &mut Ctx, args: Args) -> CmdResult {
    flush_mode(&args)?;
    let db = ctx.session.db;
    flush_as_asked(ctx, &args, Some(db))
}

fn flushall(ctx: &mut Ctx, args: Args) -> CmdResult {
    flush_mode(&args)?;
    flush_as_asked(ctx, &args, None)
}

/// ASYNC frees large collections in the background (lazy free).
fn flush_as_asked(ctx: &mut Ctx, args: &Args, db: Option<usize>) -> CmdResult {
    if args.len() == 2 && is(args.get(1), "async") {
        engram_collections::lazy_free::lazily(|| flush(ctx, db))
    } else {
        flush(ctx, db)
    }
}

/// SWAPDB: the two numbers exchange what they name (the keyspace swaps
/// two entries of its database map: one small durable write). Clients
/// keep their selected numbers, watches and blocked keys.
fn swapdb(ctx: &mut Ctx, args: Args) -> CmdResult {
    let index = |arg: &[u8], which: &str| {
        std::str::from_utf8(arg)
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
            .ok_or_else(|| err(format!("ERR invalid {which} DB index")))
    };
    let (a, b) = (index(args.get(1), "first")?, index(args.get(2), "second")?);
    let databases = ctx.ks().databases() as i32;
    if !(0..databases).contains(&a) || !(0..databases).contains(&b) {
        return Err(err("ERR DB index is out of range"));
    }
    let (a, b) = (a as usize, b as usize);
    let now = ctx.now_ms;
    match &mut ctx.exec {
        Some(txn) => txn.swap_databases(a, b, now)?,
        None => {
            let mut txn = ctx.ks().lock_all(false);
            let result = txn.swap_databases(a, b, now);
            ctx.session.wrote |= txn.commit()?;
            result?;
        }
    }
    ctx.session.wrote = true;
    ctx.out.ok();
    Ok(())
}

fn time(ctx: &mut Ctx, _args: Args) -> CmdResult {
    // In a group's apply (a script or transaction of a committed entry),
    // the entry's time: what a script does with it must be the same on
    // every member.
    let now = match ctx.session.clock_ms {
        Some(ms) => std::time::Duration::from_millis(ms),
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    };
    ctx.out.array(2);
    ctx.out.bulk(now.as_secs().to_string().as_bytes());
    ctx.out.bulk(now.subsec_micros().to_string().as_bytes());
    Ok(())
}

/// SAVE: everything durable now, and a checkpoint of the collections
/// (waits for it), so the next start replays little.
fn save(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.ks().sync().map_err(|e| err(format!("ERR {e}")))?;
    super::run_blocking(|| ctx.ks().collections().checkpoint_now())
        .map_err(|e| err(format!("ERR checkpoint failed: {e}")))?;
    ctx.out.ok();
    Ok(())
}

/// BGREWRITEAOF: Redis compacts its append-only log by rewriting it; the
/// log Engram compacts is the collections' operation log, by a checkpoint
/// (strings need none: they are written in place in the data file).
fn bgrewriteaof(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.ks().collections().request_checkpoint();
    ctx.out
        .simple("Background append only file rewriting started");
    Ok(())
}

/// ROLE: a primary with no replicas (replication offset 0).
fn role(ctx: &mut Ctx, _args: Args) -> CmdResult {
    if let Some(replica) = ctx.shared.group.get() {
        // A Raft group as Redis's replication shows itself: the leader is
        // the master, each follower a replica of it (offsets: log indexes).
        let status = replica.status();
        let split = |address: Option<String>| {
            let address = address.unwrap_or_else(|| ":0".into());
            let (host, port) = address.rsplit_once(':').unwrap_or((&address, "0"));
            (host.to_string(), port.to_string())
        };
        if replica.is_leader() {
            ctx.out.array(3);
            ctx.out.bulk(b"master");
            ctx.out.int(status.applied as i64);
            ctx.out.array(status.progress.len());
            for (id, matched) in &status.progress {
                let (host, port) = split(replica.client_addr(*id));
                ctx.out.array(3);
                ctx.out.bulk(host.as_bytes());
                ctx.out.bulk(port.as_bytes());
                ctx.out.bulk(matched.to_string().as_bytes());
            }
        } else {
            let leader = replica.leader();
            let (host, port) = split((leader != 0).then(|| replica.client_addr(leader)).flatten());
            ctx.out.array(5);
            ctx.out.bulk(b"slave");
            ctx.out.bulk(host.as_bytes());
            ctx.out.int(port.parse().unwrap_or(0));
            ctx.out.bulk(if leader != 0 {
                b"connected"
            } else {
                b"connect"
            });
            ctx.out.int(status.applied as i64);
        }
        return Ok(());
    }
    ctx.out.array(3);
    ctx.out.bulk(b"master");
    ctx.out.int(0);
    ctx.out.array(0);
    Ok(())
}

/// LOLWUT [VERSION v]: Redis draws art; Engram names itself.
fn lolwut(ctx: &mut Ctx, args: Args) -> CmdResult {
    match args.len() {
        1 => {}
        n if n >= 3 && is(args.get(1), "version") => {
            super::int_arg(args.get(2))?;
        }
        _ => return Err(err(SYNTAX)),
    }
    ctx.out.verbatim(&format!(
        "Engram {} (Redis ver. {})\n",
        env!("CARGO_PKG_VERSION"),
        crate::REDIS_VERSION
    ));
    Ok(())
}

/// MODULE: no Redis module can be loaded into Engram (they are C code
/// against Redis's internals), so the list is empty.
fn module(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    match lowercase(sub).as_str() {
        "list" if args.len() == 2 => ctx.out.array(0),
        "load" | "loadex" if args.len() >= 3 => {
            return Err(err(
                "ERR Error loading the extension. Engram does not load Redis modules.",
            ))
        }
        "unload" if args.len() == 3 => {
            return Err(err(
                "ERR Error unloading module: no such module with that name",
            ))
        }
        "help" if args.len() == 2 => {
            let lines = [
                "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "LIST",
                "    Return a list of loaded modules (always empty here).",
                "LOAD <path> [<arg> ...]",
                "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
                "UNLOAD <name>",
                "    Refused: Engram does not load Redis modules.",
                "HELP",
                "    Print this help.",
            ];
            ctx.out.array(lines.len());
            for line in lines {
                ctx.out.simple(line);
            }
        }
        "list" | "load" | "loadex" | "unload" | "help" => {
            return Err(wrong_sub_arity("module", sub))
        }
        _ => return Err(unknown_subcommand("module", sub)),
    }
    Ok(())
}

fn bgsave(ctx: &mut Ctx, args: Args) -> CmdResult {
    if args.len() > 2 || (args.len() == 2 && !is(args.get(1), "schedule")) {
        return Err(err(SYNTAX));
    }
    // The checkpoint runs on the collections' own background thread.
    ctx.ks().collections().request_checkpoint();
    let keyspace = Arc::clone(ctx.keyspace);
    engram_threads::spawn("engram-bgsave", move || {
        let _ = keyspace.sync();
    })
    .map_err(|e| err(format!("ERR cannot start the background save: {e}")))?;
    ctx.out.simple("Background saving started");
    Ok(())
}

fn lastsave(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let last = ctx
        .ks()
        .commit()
        .stats
        .last_sync_unix
        .load(Ordering::Relaxed);
    ctx.out.int(last.min(unix_now()) as i64);
    Ok(())
}

fn shutdown(ctx: &mut Ctx, args: Args) -> CmdResult {
    for arg in args.iter().skip(1) {
        if is(arg, "abort") {
            return Err(err("ERR No shutdown in progress."));
        }
        if !(is(arg, "nosave") || is(arg, "save") || is(arg, "now") || is(arg, "force")) {
            return Err(err(SYNTAX));
        }
    }
    // Like Redis: no reply; the connection closes as the server stops.
    log::warn!("SHUTDOWN requested by client id={}", ctx.session.info.id);
    ctx.session.close = true;
    ctx.shared.request_shutdown();
    Ok(())
}
