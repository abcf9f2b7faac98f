//! Connection commands: PING ECHO HELLO AUTH SELECT QUIT RESET CLIENT.

use std::sync::atomic::Ordering;

use super::keys::db_index;
use super::transactions::unwatch_all;
use super::{
    err, int_arg, is, lowercase, unknown_subcommand, wrong_sub_arity, CmdError, CmdResult,
    CommandSpec, Ctx, Group, FAST, NOT_QUEUED, NO_AUTH, SYNTAX,
};
use crate::clients::Unblock;
use crate::resp::Args;
use crate::session::ReplyMode;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("connection");
    vec![
        g.keyless(
            "ping",
            -1,
            FAST,
            ping,
            "Returns the server's liveliness response.",
        ),
        g.keyless("echo", 2, FAST, echo, "Returns the given string."),
        g.keyless(
            "hello",
            -1,
            NO_AUTH | FAST,
            hello,
            "Handshakes with the server, choosing the protocol.",
        ),
        g.keyless(
            "auth",
            -2,
            NO_AUTH | FAST,
            auth,
            "Authenticates the connection.",
        ),
        g.keyless("select", 2, FAST, select, "Changes the selected database."),
        g.keyless(
            "quit",
            -1,
            NO_AUTH | NOT_QUEUED | FAST,
            quit,
            "Closes the connection.",
        ),
        g.keyless(
            "reset",
            1,
            NO_AUTH | NOT_QUEUED | FAST,
            reset,
            "Resets the connection.",
        ),
        g.keyless(
            "client",
            -2,
            0,
            client,
            "Manages client connections (ID SETNAME GETNAME LIST INFO KILL UNBLOCK SETINFO).",
        ),
    ]
}

fn ping(ctx: &mut Ctx, args: Args) -> CmdResult {
    if ctx.session.pubsub.subscribed() && !ctx.out.is_resp3() {
        // RESP2's subscribed mode: a message-shaped reply, so a client
        // reading messages can tell it apart.
        if args.len() > 2 {
            return Err(super::wrong_arity("ping"));
        }
        ctx.out.array(2);
        ctx.out.bulk(b"pong");
        ctx.out
            .bulk(if args.len() == 2 { args.get(1) } else { b"" });
        return Ok(());
    }
    match args.len() {
        1 => ctx.out.simple("PONG"),
        2 => ctx.out.bulk(args.get(1)),
        _ => return Err(super::wrong_arity("ping")),
    }
    Ok(())
}

fn echo(ctx: &mut Ctx, args: Args) -> CmdResult {
    ctx.out.bulk(args.get(1));
    Ok(())
}

/// Authenticates the connection as `user` (AUTH user pass, HELLO AUTH)
/// or, without one (AUTH pass), as the default user, which the
/// one-argument form needs to have a password (Redis's hint otherwise).
/// A failure is recorded in the ACL LOG.
fn check_password(
    ctx: &mut Ctx,
    command: &[u8],
    user: Option<&[u8]>,
    password: &[u8],
) -> CmdResult {
    let name: &[u8] = match user {
        Some(name) => name,
        None if ctx.shared.acl.default_user().rules().nopass => {
            return Err(err(
                "ERR AUTH <password> called without any password configured for the default \
                 user. Are you sure your configuration is correct?",
            ))
        }
        None => b"default",
    };
    match ctx.shared.acl.authenticate(name, password) {
        Some(user) => {
            ctx.session.set_user(user, true);
            Ok(())
        }
        None => {
            super::acl::log_failed_auth(ctx.shared, ctx.session, command, name);
            Err(err(
                "WRONGPASS invalid username-password pair or user is disabled.",
            ))
        }
    }
}

fn auth(ctx: &mut Ctx, args: Args) -> CmdResult {
    match args.len() {
        2 => check_password(ctx, args.get(0), None, args.get(1))?,
        3 => check_password(ctx, args.get(0), Some(args.get(1)), args.get(2))?,
        _ => return Err(err(SYNTAX)),
    }
    ctx.out.ok();
    Ok(())
}

fn hello(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut version = None;
    if args.len() > 1 {
        let v = int_arg(args.get(1))
            .map_err(|_| err("ERR Protocol version is not an integer or out of range"))?;
        if v != 2 && v != 3 {
            return Err(err("NOPROTO unsupported protocol version"));
        }
        version = Some(v);
    }
    let mut i = 2;
    let mut name = None;
    while i < args.len() {
        if is(args.get(i), "auth") && i + 2 < args.len() {
            check_password(ctx, args.get(0), Some(args.get(i + 1)), args.get(i + 2))?;
            i += 3;
        } else if is(args.get(i), "setname") && i + 1 < args.len() {
            name = Some(valid_name(args.get(i + 1))?);
            i += 2;
        } else {
            return Err(err(format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(args.get(i))
            )));
        }
    }
    if !ctx.session.authenticated {
        return Err(err(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time",
        ));
    }
    if let Some(name) = name {
        *ctx.session.info.name.lock() = name;
    }
    if let Some(v) = version {
        ctx.out.set_resp3(v == 3);
        ctx.session.info.resp.store(v as u8, Ordering::Relaxed);
        // A RESP3 connection takes pushes at any time (another client's
        // tracking invalidations redirected here): it keeps an outbox.
        ctx.session.pubsub.resp3 = v == 3;
        if v == 3 {
            let info = ctx.session.info.clone();
            ctx.session.pubsub.outbox(&info);
        } else {
            ctx.session.pubsub.release_if_idle();
        }
    }
    let proto = if ctx.out.is_resp3() { 3 } else { 2 };
    ctx.out.map(7);
    ctx.out.bulk(b"server");
    ctx.out.bulk(b"redis");
    ctx.out.bulk(b"version");
    ctx.out.bulk(crate::REDIS_VERSION.as_bytes());
    ctx.out.bulk(b"proto");
    ctx.out.int(proto);
    ctx.out.bulk(b"id");
    ctx.out.int(ctx.session.info.id as i64);
    ctx.out.bulk(b"mode");
    ctx.out.bulk(b"standalone");
    ctx.out.bulk(b"role");
    ctx.out.bulk(b"master");
    ctx.out.bulk(b"modules");
    ctx.out.array(0);
    Ok(())
}

fn select(ctx: &mut Ctx, args: Args) -> CmdResult {
    let db = db_index(args.get(1), ctx.ks().databases())?;
    ctx.session.select(db);
    ctx.out.ok();
    Ok(())
}

fn quit(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.session.close = true;
    ctx.out.ok();
    Ok(())
}

fn reset(ctx: &mut Ctx, _args: Args) -> CmdResult {
    ctx.session.end_multi();
    unwatch_all(ctx.ks(), ctx.session);
    // Out of subscribed mode and MONITOR, silently (messages already
    // queued still go before the reply).
    super::pubsub::leave_all(ctx.shared, ctx.session);
    ctx.shared.tracking.disable(ctx.session.info.id);
    ctx.session.pubsub.tracking = false;
    ctx.session.pubsub.resp3 = false;
    ctx.session.caching = false;
    ctx.session.pubsub.release_if_idle();
    ctx.session.select(0);
    ctx.out.set_resp3(false);
    ctx.session.info.resp.store(2, Ordering::Relaxed);
    ctx.session.info.name.lock().clear();
    let default = ctx.shared.acl.default_user();
    ctx.session
        .set_user(default, !ctx.shared.acl.auth_required());
    ctx.out.simple("RESET");
    Ok(())
}

/// CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX p ...] [OPTIN]
/// [OPTOUT] [NOLOOP], with Redis's checks in Redis's order.
fn tracking(ctx: &mut Ctx, args: &Args) -> CmdResult {
    use crate::tracking::Options;
    if args.len() < 3 {
        return Err(super::wrong_sub_arity("client", args.get(1)));
    }
    let mut options = Options::default();
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        let option = args.get(i);
        if is(option, "redirect") && more {
            i += 1;
            if options.redirect != 0 {
                return Err(err(
                    "ERR A client can only redirect to a single other client",
                ));
            }
            let id = int_arg(args.get(i))?;
            if id <= 0 || ctx.shared.clients.get(id as u64).is_none() {
                return Err(err("ERR The client ID you want redirect to does not exist"));
            }
            options.redirect = id as u64;
        } else if is(option, "bcast") {
            options.bcast = true;
        } else if is(option, "optin") {
            options.optin = true;
        } else if is(option, "optout") {
            options.optout = true;
        } else if is(option, "noloop") {
            options.noloop = true;
        } else if is(option, "prefix") && more {
            i += 1;
            options.prefixes.push(Box::from(args.get(i)));
        } else {
            return Err(err(SYNTAX));
        }
        i += 1;
    }
    let id = ctx.session.info.id;
    let current = ctx.shared.tracking.options(id);
    if is(args.get(2), "on") {
        if !options.bcast && !options.prefixes.is_empty() {
            return Err(err("ERR PREFIX option requires BCAST mode to be enabled"));
        }
        if let Some((old, _)) = &current {
            if old.bcast != options.bcast {
                return Err(err(
                    "ERR You can't switch BCAST mode on/off before disabling tracking for this \
                     client, and then re-enabling it with a different mode.",
                ));
            }
        }
        if options.bcast && (options.optin || options.optout) {
            return Err(err("ERR OPTIN and OPTOUT are not compatible with BCAST"));
        }
        if options.optin && options.optout {
            return Err(err("ERR You can't specify both OPTIN mode and OPTOUT mode"));
        }
        if let Some((old, _)) = &current {
            if (options.optin && old.optout) || (options.optout && old.optin) {
                return Err(err(
                    "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this \
                     client, and then re-enabling it with a different mode.",
                ));
            }
        }
        if options.bcast {
            let existing = current
                .as_ref()
                .map(|(o, _)| o.prefixes.clone())
                .unwrap_or_default();
            check_prefixes(&existing, &options.prefixes)?;
        }
        let info = ctx.session.info.clone();
        let outbox = ctx.session.pubsub.outbox(&info);
        ctx.session.pubsub.tracking = true;
        ctx.shared.tracking.enable(&info, outbox, options);
    } else if is(args.get(2), "off") {
        ctx.shared.tracking.disable(id);
        ctx.session.pubsub.tracking = false;
        ctx.session.caching = false;
    } else {
        return Err(err(SYNTAX));
    }
    ctx.out.ok();
    Ok(())
}

/// Redis's `checkPrefixCollisionsOrReply`: a new prefix may not be a
/// prefix of another of the client's (old or new), nor have one, nor
/// equal one.
fn check_prefixes(existing: &[Box<[u8]>], new: &[Box<[u8]>]) -> CmdResult {
    let text = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
    for (i, prefix) in new.iter().enumerate() {
        for old in existing {
            if old.starts_with(prefix) || prefix.starts_with(old) {
                return Err(err(format!(
                    "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a \
                     single client must not overlap.",
                    text(prefix),
                    text(old)
                )));
            }
        }
        for other in &new[i + 1..] {
            if other.starts_with(prefix) || prefix.starts_with(other) {
                return Err(err(format!(
                    "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a \
                     single client must not overlap.",
                    text(prefix),
                    text(other)
                )));
            }
        }
    }
    Ok(())
}

/// A client name: printable, no spaces (Redis's rule).
fn valid_name(name: &[u8]) -> Result<String, CmdError> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(err(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// CLIENT LIST's `cmd`: the last command or subcommand (`client|list`).
fn command_name(id: usize) -> &'static str {
    if id < crate::acl::CATALOG.len() {
        crate::acl::command_name(id)
    } else {
        "NULL"
    }
}

/// A client's line of CLIENT LIST (for logs too).
pub fn client_line(info: &crate::clients::ClientInfo) -> String {
    info.describe(command_name(info.last_command.load(Ordering::Relaxed)))
}

fn client(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    let argc = args.len();
    let sub_lower = lowercase(sub);
    let exact = |n: usize| -> CmdResult {
        if argc == n {
            Ok(())
        } else {
            Err(wrong_sub_arity("client", sub))
        }
    };
    match sub_lower.as_str() {
        "id" => {
            exact(2)?;
            ctx.out.int(ctx.session.info.id as i64);
        }
        "setname" => {
            exact(3)?;
            *ctx.session.info.name.lock() = valid_name(args.get(2))?;
            ctx.out.ok();
        }
        "getname" => {
            exact(2)?;
            let name = ctx.session.info.name.lock().clone();
            if name.is_empty() {
                ctx.out.null();
            } else {
                ctx.out.bulk(name.as_bytes());
            }
        }
        "info" => {
            exact(2)?;
            let info = &ctx.session.info;
            let line = info.describe(command_name(info.last_command.load(Ordering::Relaxed)));
            ctx.out.verbatim(&format!("{line}\n"));
        }
        "list" => {
            let mut ids: Option<Vec<u64>> = None;
            let mut kind = None;
            let mut i = 2;
            while i < argc {
                if is(args.get(i), "type") && i + 1 < argc {
                    kind = Some(client_type(args.get(i + 1))?);
                    i += 2;
                } else if is(args.get(i), "id") && i + 1 < argc {
                    let mut list = Vec::new();
                    for arg in args.iter().skip(i + 1) {
                        let id = int_arg(arg)
                            .ok()
                            .filter(|&id| id > 0)
                            .ok_or_else(|| err("ERR Invalid client ID"))?;
                        list.push(id as u64);
                    }
                    ids = Some(list);
                    i = argc;
                } else {
                    return Err(err(SYNTAX));
                }
            }
            let mut text = String::new();
            for client in ctx.shared.clients.all() {
                if ids.as_ref().is_some_and(|ids| !ids.contains(&client.id))
                    || kind.is_some_and(|kind| kind != client.client_type())
                {
                    continue;
                }
                text.push_str(&client_line(&client));
                text.push('\n');
            }
            ctx.out.verbatim(&text);
        }
        "pause" => {
            if !(3..=4).contains(&argc) {
                return Err(wrong_sub_arity("client", sub));
            }
            let all = match args.len() {
                4 if is(args.get(3), "write") => false,
                4 if is(args.get(3), "all") => true,
                4 => return Err(err("ERR CLIENT PAUSE mode must be WRITE or ALL")),
                _ => true,
            };
            let ms = int_arg(args.get(2))
                .map_err(|_| err("ERR timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(err("ERR timeout is negative"));
            }
            let until = std::time::Instant::now() + std::time::Duration::from_millis(ms as u64);
            ctx.shared.pause.pause(until, all);
            // Expired keys stay until the pause ends (Redis 7.0: the data
            // set does not change while writes are held).
            ctx.ks()
                .hold_expiry(Some(crate::keyspace::now_ms().saturating_add(ms as u64)));
            ctx.out.ok();
        }
        "unpause" => {
            exact(2)?;
            ctx.shared.pause.unpause();
            ctx.ks().hold_expiry(None);
            ctx.out.ok();
        }
        "reply" => {
            exact(3)?;
            let mode = args.get(2);
            ctx.session.reply = if is(mode, "on") {
                ctx.out.ok();
                ReplyMode::On
            } else if is(mode, "off") {
                ReplyMode::Off
            } else if is(mode, "skip") {
                // Unless replies are off already: then SKIP changes nothing.
                if ctx.session.reply == ReplyMode::Off {
                    ReplyMode::Off
                } else {
                    ReplyMode::SkipNext
                }
            } else {
                return Err(err(SYNTAX));
            };
        }
        "kill" => client_kill(ctx, args)?,
        "unblock" => client_unblock(ctx, args)?,
        "setinfo" => {
            exact(4)?;
            let value = String::from_utf8_lossy(args.get(3)).into_owned();
            if value.contains(|c: char| c == ' ' || c.is_control()) {
                return Err(err(format!(
                    "ERR {} cannot contain spaces, newlines or special characters.",
                    lowercase(args.get(2))
                )));
            }
            match lowercase(args.get(2)).as_str() {
                "lib-name" => *ctx.session.info.lib_name.lock() = value,
                "lib-ver" => *ctx.session.info.lib_ver.lock() = value,
                _ => {
                    return Err(err(format!(
                        "ERR Unrecognized option '{}'",
                        String::from_utf8_lossy(args.get(2))
                    )))
                }
            }
            ctx.out.ok();
        }
        // Client eviction (maxmemory-clients) does not exist here; accept
        // the switch clients send on connect.
        "no-evict" => {
            exact(3)?;
            if !is(args.get(2), "on") && !is(args.get(2), "off") {
                return Err(err(SYNTAX));
            }
            ctx.out.ok();
        }
        // Redis 7.2's: reads stop touching keys' access fields (TOUCH
        // still does; see `commands::run`).
        "no-touch" => {
            exact(3)?;
            ctx.session.no_touch = match () {
                _ if is(args.get(2), "on") => true,
                _ if is(args.get(2), "off") => false,
                _ => return Err(err(SYNTAX)),
            };
            ctx.out.ok();
        }
        "tracking" => tracking(ctx, &args)?,
        "caching" => {
            exact(3)?;
            let Some((options, _)) = ctx.shared.tracking.options(ctx.session.info.id) else {
                return Err(err(
                    "ERR CLIENT CACHING can be called only when the client is in tracking mode \
                     with OPTIN or OPTOUT mode enabled",
                ));
            };
            if is(args.get(2), "yes") {
                if !options.optin {
                    return Err(err(
                        "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
                    ));
                }
            } else if is(args.get(2), "no") {
                if !options.optout {
                    return Err(err(
                        "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
                    ));
                }
            } else {
                return Err(err(SYNTAX));
            }
            // For the next command only (`tracking::after_command`).
            ctx.session.caching = true;
            ctx.out.ok();
        }
        "getredir" => {
            exact(2)?;
            let redirect = ctx.shared.tracking.options(ctx.session.info.id);
            ctx.out
                .int(redirect.map_or(-1, |(options, _)| options.redirect as i64));
        }
        "trackinginfo" => {
            exact(2)?;
            let tracked = ctx.shared.tracking.options(ctx.session.info.id);
            let caching = ctx.session.caching;
            let out = &mut *ctx.out;
            out.map(3);
            out.bulk(b"flags");
            let mut flags: Vec<&str> = Vec::new();
            match &tracked {
                None => flags.push("off"),
                Some((options, broken)) => {
                    flags.push("on");
                    if options.bcast {
                        flags.push("bcast");
                    }
                    if options.optin {
                        flags.push("optin");
                        if caching {
                            flags.push("caching-yes");
                        }
                    }
                    if options.optout {
                        flags.push("optout");
                        if caching {
                            flags.push("caching-no");
                        }
                    }
                    if options.noloop {
                        flags.push("noloop");
                    }
                    if *broken {
                        flags.push("broken_redirect");
                    }
                }
            }
            out.set(flags.len());
            for flag in flags {
                out.bulk(flag.as_bytes());
            }
            out.bulk(b"redirect");
            out.int(tracked.as_ref().map_or(-1, |(o, _)| o.redirect as i64));
            out.bulk(b"prefixes");
            let prefixes = tracked.map(|(o, _)| o.prefixes).unwrap_or_default();
            out.array(prefixes.len());
            for prefix in &prefixes {
                out.bulk(prefix);
            }
        }
        "help" => {
            let lines = [
                "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ID",
                "GETNAME",
                "SETNAME <name>",
                "LIST [TYPE normal] [ID id ...]",
                "INFO",
                "KILL <ip:port> | KILL [ID id] [ADDR ip:port] [LADDR ip:port] [SKIPME yes|no]",
                "UNBLOCK <clientid> [TIMEOUT|ERROR]",
                "PAUSE <timeout> [WRITE|ALL]",
                "UNPAUSE",
                "REPLY (ON|OFF|SKIP)",
                "NO-EVICT (ON|OFF)",
                "NO-TOUCH (ON|OFF)",
                "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
                "         [OPTIN] [OPTOUT] [NOLOOP]",
                "CACHING (YES|NO)",
                "GETREDIR",
                "TRACKINGINFO",
                "SETINFO <LIB-NAME|LIB-VER> <value>",
                "HELP",
            ];
            ctx.out.array(lines.len());
            for line in lines {
                ctx.out.simple(line);
            }
        }
        _ => return Err(unknown_subcommand("client", sub)),
    }
    Ok(())
}

/// CLIENT UNBLOCK <client-id> [TIMEOUT|ERROR]: 1 if the client waited in
/// a blocking command and now will not (it replies as if timed out, or
/// `-UNBLOCKED client unblocked via CLIENT UNBLOCK`), 0 otherwise (not
/// blocked, no such client, being served already). As in Redis
/// (networking.c), the reason is checked before the id.
fn client_unblock(ctx: &mut Ctx, args: Args) -> CmdResult {
    if !(3..=4).contains(&args.len()) {
        return Err(wrong_sub_arity("client", args.get(1)));
    }
    let how = match args.len() {
        4 if is(args.get(3), "timeout") => Unblock::Timeout,
        4 if is(args.get(3), "error") => Unblock::Error,
        4 => return Err(err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")),
        _ => Unblock::Timeout,
    };
    let id = int_arg(args.get(2))?;
    let unblocked = u64::try_from(id)
        .ok()
        .and_then(|id| ctx.shared.clients.get(id))
        .is_some_and(|client| client.request_unblock(how));
    ctx.out.int(i64::from(unblocked));
    Ok(())
}

fn client_kill(ctx: &mut Ctx, args: Args) -> CmdResult {
    let argc = args.len();
    if argc == 2 {
        return Err(wrong_sub_arity("client", args.get(1)));
    }
    if argc == 3 {
        // The old form: CLIENT KILL addr:port; replies OK or an error.
        let addr = String::from_utf8_lossy(args.get(2)).into_owned();
        let target = ctx
            .shared
            .clients
            .all()
            .into_iter()
            .find(|c| c.addr.to_string() == addr)
            .ok_or_else(|| err("ERR No such client"))?;
        kill(ctx, &target);
        ctx.out.ok();
        return Ok(());
    }
    if argc < 4 || !argc.is_multiple_of(2) {
        return Err(err(SYNTAX));
    }
    let (mut id, mut addr, mut laddr, mut skip_me) = (None, None, None, true);
    let mut kind = None;
    let mut user = None;
    for pair in (2..argc).step_by(2) {
        let (option, value) = (args.get(pair), args.get(pair + 1));
        let text = String::from_utf8_lossy(value).into_owned();
        if is(option, "id") {
            id = Some(
                int_arg(value)
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| err("ERR client-id should be greater than 0"))?
                    as u64,
            );
        } else if is(option, "addr") {
            addr = Some(text);
        } else if is(option, "laddr") {
            laddr = Some(text);
        } else if is(option, "skipme") {
            skip_me = match text.to_ascii_lowercase().as_str() {
                "yes" => true,
                "no" => false,
                _ => return Err(err(SYNTAX)),
            };
        } else if is(option, "type") {
            kind = Some(client_type(value)?);
        } else if is(option, "user") {
            user = Some(
                ctx.shared
                    .acl
                    .user(value)
                    .ok_or_else(|| err(format!("ERR No such user '{text}'")))?,
            );
        } else {
            return Err(err(SYNTAX));
        }
    }
    let mut killed = 0;
    for client in ctx.shared.clients.all() {
        let me = client.id == ctx.session.info.id;
        if (skip_me && me)
            || id.is_some_and(|id| id != client.id)
            || addr.as_ref().is_some_and(|a| *a != client.addr.to_string())
            || laddr
                .as_ref()
                .is_some_and(|a| *a != client.local_addr.to_string())
            || kind.is_some_and(|kind| kind != client.client_type())
            || user.as_ref().is_some_and(|u| !client.is_user(u))
        {
            continue;
        }
        kill(ctx, &client);
        killed += 1;
    }
    ctx.out.int(killed);
    Ok(())
}

/// A client type as CLIENT LIST and KILL take it (`replica` is `slave`);
/// Engram's clients are `normal` or `pubsub` (no replicas, no master).
fn client_type(name: &[u8]) -> Result<&'static str, CmdError> {
    match lowercase(name).as_str() {
        "normal" => Ok("normal"),
        "pubsub" => Ok("pubsub"),
        "slave" | "replica" => Ok("slave"),
        "master" => Ok("master"),
        other => Err(err(format!("ERR Unknown client type '{other}'"))),
    }
}

fn kill(ctx: &mut Ctx, client: &crate::clients::ClientInfo) {
    if client.id == ctx.session.info.id {
        // Killing yourself: the reply is sent, then the connection closes.
        ctx.session.close = true;
    } else {
        client.request_kill();
    }
}
