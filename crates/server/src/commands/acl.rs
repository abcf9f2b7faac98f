//! ACL: users and their permissions (SETUSER GETUSER DELUSER LIST USERS
//! WHOAMI CAT GENPASS LOG SAVE LOAD DRYRUN HELP), and the denial checks'
//! entry points that record into the ACL LOG (`deny`, `log_failed_auth`).

use std::sync::Arc;

use super::{
    err, int_arg, lookup, lowercase, subcommand_syntax_error, CmdResult, CommandSpec, Ctx, Group,
};
use crate::acl::{self, log, Denial, CATALOG, CATEGORIES};
use crate::keyspace::now_ms;
use crate::resp::Args;
use crate::session::Session;
use crate::shared::Shared;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("server");
    vec![g.keyless(
        "acl",
        -2,
        0,
        acl,
        "Manages users and their permissions (SETUSER GETUSER DELUSER LIST USERS WHOAMI CAT \
         GENPASS LOG SAVE LOAD DRYRUN).",
    )]
}

/// `acllog-max-len`.
fn log_max_len(shared: &Shared) -> usize {
    shared.redis_param("acllog-max-len").parse().unwrap_or(128)
}

fn add_log_entry(
    shared: &Shared,
    session: &Session,
    reason: log::Reason,
    context: log::Context,
    object: &[u8],
    username: &[u8],
) {
    let entry = log::Entry {
        count: 1,
        reason,
        context,
        object: object.to_vec(),
        username: username.to_vec(),
        at_ms: now_ms(),
        client_info: super::client_line(&session.info),
    };
    shared.acl.log.lock().add(entry, log_max_len(shared));
}

/// Records a denied call in the ACL LOG; `id` is the catalog's id of
/// what was called.
pub fn deny(
    shared: &Shared,
    session: &Session,
    denial: Denial,
    id: usize,
    args: &Args,
    context: log::Context,
) {
    let (reason, object): (_, &[u8]) = match denial {
        Denial::Command => (log::Reason::Command, acl::command_name(id).as_bytes()),
        Denial::Key(at) => (log::Reason::Key, args.get(at)),
        Denial::Channel(at) => (log::Reason::Channel, args.get(at)),
    };
    add_log_entry(shared, session, reason, context, object, &session.user.name);
}

/// Records a failed AUTH (or HELLO AUTH) as user `username`.
pub fn log_failed_auth(shared: &Shared, session: &Session, command: &[u8], username: &[u8]) {
    let context = if session.in_multi() {
        log::Context::Multi
    } else {
        log::Context::TopLevel
    };
    add_log_entry(
        shared,
        session,
        log::Reason::Auth,
        context,
        command,
        username,
    );
}

/// Closes the connections authenticated as any of `users` (deleted, or
/// replaced by ACL LOAD).
fn disconnect(shared: &Shared, session: &mut Session, users: &[Arc<acl::User>]) {
    for client in shared.clients.all() {
        if users.iter().any(|u| client.is_user(u)) {
            if client.id == session.info.id {
                // This very connection: it closes after the reply.
                session.close = true;
            } else {
                client.request_kill();
            }
        }
    }
}

/// After ACL SETUSER narrowed a user's channels: its subscribers that
/// hold a subscription the new rules refuse are disconnected, as Redis
/// does (their messages would otherwise keep coming).
fn disconnect_revoked_subscribers(
    shared: &Shared,
    session: &mut Session,
    user: &Arc<acl::User>,
    before: &acl::UserRules,
) {
    let after = user.rules();
    if after.selectors.iter().any(|s| s.all_channels) {
        return;
    }
    let kept = |old: &acl::UserRules| {
        old.selectors.iter().all(|s| {
            !s.all_channels
                && s.channels
                    .iter()
                    .all(|c| after.selectors.iter().any(|n| n.channels.contains(c)))
        })
    };
    if kept(before) {
        return;
    }
    let allowed = |channel: &[u8], pattern: bool| {
        after
            .selectors
            .iter()
            .any(|s| s.allows_channel(channel, pattern))
    };
    for client in shared.clients.all() {
        if !client.is_user(user) || !client.is_subscribed() {
            continue;
        }
        let revoked = shared
            .pubsub
            .subscriptions_of(client.id)
            .iter()
            .any(|(channel, pattern)| !allowed(channel, *pattern));
        if revoked {
            if client.id == session.info.id {
                session.close = true;
            } else {
                client.request_kill();
            }
        }
    }
}

fn acl(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = lowercase(args.get(1));
    let argc = args.len();
    if let Some(description) = super::descriptions::subcommand("acl", args.get(1)) {
        if !description.arity_ok(argc) {
            return Err(err(format!(
                "ERR wrong number of arguments for '{}' command",
                description.name
            )));
        }
    }
    match (sub.as_str(), argc) {
        ("setuser", 3..) => setuser(ctx, &args),
        ("deluser", 3..) => {
            let names: Vec<&[u8]> = (2..argc).map(|i| args.get(i)).collect();
            if names.contains(&&b"default"[..]) {
                return Err(err("ERR The 'default' user cannot be removed"));
            }
            let removed = ctx.shared.acl.delete_users(&names);
            disconnect(ctx.shared, ctx.session, &removed);
            ctx.out.int(removed.len() as i64);
            Ok(())
        }
        ("getuser", 3) => getuser(ctx, args.get(2)),
        ("list" | "users", 2) => {
            let users = ctx.shared.acl.users();
            ctx.out.array(users.len());
            for user in users {
                if sub == "users" {
                    ctx.out.bulk(&user.name);
                } else {
                    ctx.out.bulk(user.line().as_bytes());
                }
            }
            Ok(())
        }
        ("whoami", 2) => {
            let name = ctx.session.user.name.clone();
            ctx.out.bulk(&name);
            Ok(())
        }
        ("load" | "save", 2) if ctx.shared.acl.file.is_none() => Err(err(
            "ERR This Redis instance is not configured to use an ACL file. You may want to \
             specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming \
             you have a Redis configuration file set) in order to store users in the Redis \
             configuration.",
        )),
        ("load", 2) => {
            let path = ctx.shared.acl.file.clone().expect("checked above");
            let users = acl::file::load(&path, ctx.shared.acl.all_channels_default())
                .map_err(|e| err(format!("ERR {e}")))?;
            let replaced = ctx.shared.acl.replace_all(users);
            disconnect(ctx.shared, ctx.session, &replaced);
            ctx.out.ok();
            Ok(())
        }
        ("save", 2) => {
            let path = ctx.shared.acl.file.clone().expect("checked above");
            if let Err(e) = acl::file::save(&path, &ctx.shared.acl.users()) {
                ::log::warn!("ACL SAVE to {} failed: {e}", path.display());
                return Err(err(
                    "ERR There was an error trying to save the ACLs. Please check the server \
                     logs for more information",
                ));
            }
            ctx.out.ok();
            Ok(())
        }
        ("cat", 2) => {
            ctx.out.array(CATEGORIES.len());
            for category in CATEGORIES {
                ctx.out.bulk(category.as_bytes());
            }
            Ok(())
        }
        ("cat", 3) => {
            let wanted = String::from_utf8_lossy(args.get(2));
            let Some(mask) = acl::Catalog::category(&wanted) else {
                let shown: String = wanted.chars().take(128).collect();
                return Err(err(format!("ERR Unknown category '{shown}'")));
            };
            let names: Vec<&str> = CATALOG
                .entries
                .iter()
                .filter(|e| e.categories & mask != 0)
                .map(|e| e.name.as_str())
                .collect();
            ctx.out.array(names.len());
            for name in names {
                ctx.out.bulk(name.as_bytes());
            }
            Ok(())
        }
        ("genpass", 2 | 3) => {
            let bits = if argc == 3 {
                int_arg(args.get(2))?
            } else {
                256
            };
            if !(1..=4096).contains(&bits) {
                return Err(err(
                    "ERR ACL GENPASS argument must be the number of bits for the output \
                     password, a positive number up to 4096",
                ));
            }
            let chars = (bits as usize).div_ceil(4);
            let bytes: Vec<u8> = (0..chars.div_ceil(2))
                .map(|_| rand::random::<u8>())
                .collect();
            let mut hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            hex.truncate(chars);
            ctx.out.bulk(hex.as_bytes());
            Ok(())
        }
        ("log", 2 | 3) => acl_log(ctx, &args),
        ("dryrun", 4..) => dryrun(ctx, &args),
        ("help", 2) => {
            super::introspection::help(ctx, &[
                "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CAT [<category>]",
                "    List all commands that belong to <category>, or all command categories",
                "    when no category is specified.",
                "DELUSER <username> [<username> ...]",
                "    Delete a list of users.",
                "DRYRUN <username> <command> [<arg> ...]",
                "    Returns whether the user can execute the given command without executing the command.",
                "GETUSER <username>",
                "    Get the user's details.",
                "GENPASS [<bits>]",
                "    Generate a secure 256-bit user password. The optional `bits` argument can",
                "    be used to specify a different size.",
                "LIST",
                "    Show users details in config file format.",
                "LOAD",
                "    Reload users from the ACL file.",
                "LOG [<count> | RESET]",
                "    Show the ACL log entries.",
                "SAVE",
                "    Save the current config to the ACL file.",
                "SETUSER <username> <attribute> [<attribute> ...]",
                "    Create or modify a user with the specified attributes.",
                "USERS",
                "    List all the registered usernames.",
                "WHOAMI",
                "    Return the current connection username.",
                "HELP",
                "    Print this help.",
            ]);
            Ok(())
        }
        _ if super::descriptions::subcommand("acl", args.get(1)).is_none() => {
            Err(super::unknown_subcommand("acl", args.get(1)))
        }
        _ => Err(subcommand_syntax_error("acl", args.get(1))),
    }
}

fn setuser(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let name = args.get(2);
    if acl::has_spaces(name) {
        return Err(err("ERR Usernames can't contain spaces or null characters"));
    }
    let rules: Vec<&[u8]> = (3..args.len()).map(|i| args.get(i)).collect();
    let (user, before) = ctx
        .shared
        .acl
        .set_user(name, &rules)
        .map_err(|e| err(format!("ERR {e}")))?;
    if let Some(before) = before {
        disconnect_revoked_subscribers(ctx.shared, ctx.session, &user, &before);
    }
    ctx.out.ok();
    Ok(())
}

fn getuser(ctx: &mut Ctx, name: &[u8]) -> CmdResult {
    let Some(user) = ctx.shared.acl.user(name) else {
        ctx.out.null();
        return Ok(());
    };
    let rules = user.rules();
    let out = &mut *ctx.out;
    out.map(6);
    out.bulk(b"flags");
    let flags = rules.flags();
    out.set(flags.len());
    for flag in flags {
        out.bulk(flag.as_bytes());
    }
    out.bulk(b"passwords");
    out.array(rules.passwords.len());
    for password in &rules.passwords {
        out.bulk(password.as_bytes());
    }
    let describe = |out: &mut crate::resp::ReplyWriter, s: &acl::Selector| {
        out.bulk(b"commands");
        out.bulk(acl::describe_commands(s).as_bytes());
        out.bulk(b"keys");
        out.bulk(s.describe_keys().as_bytes());
        out.bulk(b"channels");
        out.bulk(s.describe_channels().as_bytes());
    };
    describe(out, rules.root());
    out.bulk(b"selectors");
    out.array(rules.selectors.len() - 1);
    for selector in &rules.selectors[1..] {
        out.map(3);
        describe(out, selector);
    }
    Ok(())
}

fn acl_log(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let mut count = 10;
    if args.len() == 3 {
        if super::is(args.get(2), "reset") {
            ctx.shared.acl.log.lock().reset();
            ctx.out.ok();
            return Ok(());
        }
        count = int_arg(args.get(2))?.max(0) as usize;
    }
    let now = now_ms();
    let log = ctx.shared.acl.log.lock();
    let entries: Vec<&log::Entry> = log.newest(count).collect();
    ctx.out.array(entries.len());
    for entry in entries {
        ctx.out.map(7);
        ctx.out.bulk(b"count");
        ctx.out.int(entry.count as i64);
        ctx.out.bulk(b"reason");
        ctx.out.bulk(entry.reason.name().as_bytes());
        ctx.out.bulk(b"context");
        ctx.out.bulk(entry.context.name().as_bytes());
        ctx.out.bulk(b"object");
        ctx.out.bulk(&entry.object);
        ctx.out.bulk(b"username");
        ctx.out.bulk(&entry.username);
        ctx.out.bulk(b"age-seconds");
        ctx.out
            .double(now.saturating_sub(entry.at_ms) as f64 / 1000.0);
        ctx.out.bulk(b"client-info");
        ctx.out.bulk(entry.client_info.as_bytes());
    }
    Ok(())
}

/// ACL DRYRUN user command args...: whether `user` could run the call,
/// without running it (and without logging a denial).
fn dryrun(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let Some(user) = ctx.shared.acl.user(args.get(2)) else {
        return Err(err(format!(
            "ERR User '{}' not found",
            String::from_utf8_lossy(args.get(2))
        )));
    };
    let call = args.from(3);
    let Some((index, spec)) = lookup(call.get(0)) else {
        return Err(err(format!(
            "ERR Command '{}' not found",
            String::from_utf8_lossy(call.get(0))
        )));
    };
    let id = CATALOG.id_of_call(index, spec, &call);
    let arity_ok = match super::descriptions::all_subcommands()
        .iter()
        .find(|d| d.name == acl::command_name(id))
    {
        Some(sub) => sub.arity_ok(call.len()),
        None => spec.arity_ok(call.len()),
    };
    if !arity_ok {
        return Err(err(format!(
            "ERR wrong number of arguments for '{}' command",
            acl::command_name(id)
        )));
    }
    match acl::check(&user.rules(), index, spec, &call) {
        Ok(()) => ctx.out.ok(),
        Err((denial, id)) => {
            let text = match denial {
                Denial::Command => format!(
                    "This user has no permissions to run the '{}' command",
                    acl::command_name(id)
                ),
                Denial::Key(at) => format!(
                    "This user has no permissions to access the '{}' key",
                    String::from_utf8_lossy(call.get(at))
                ),
                Denial::Channel(at) => format!(
                    "This user has no permissions to access the '{}' channel",
                    String::from_utf8_lossy(call.get(at))
                ),
            };
            ctx.out.bulk(text.as_bytes());
        }
    }
    Ok(())
}
