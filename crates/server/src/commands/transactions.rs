//! MULTI/EXEC/DISCARD and WATCH/UNWATCH.
//!
//! EXEC locks the stripes of every key its queue names (every stripe if a
//! queued command spans the keyspace, like KEYS or FLUSHDB) plus the
//! WATCHed keys, checks the WATCH flag under those locks, runs the queue
//! against one atomic transaction, and commits it as one batch: other
//! clients see all of it or none of it, and so does recovery after a crash.

use std::sync::atomic::Ordering;

use super::keys::db_index;
use super::{
    err, is, lookup, run, CmdResult, CommandSpec, Ctx, Group, FAST, NOT_QUEUED, WHOLE_KEYSPACE,
};
use crate::keyspace::{ekey, EKey, Keyspace};
use crate::resp::Args;
use crate::session::Session;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("transactions");
    let none = (0, 0, 0);
    vec![
        g.command(
            "multi",
            1,
            NOT_QUEUED | FAST,
            none,
            multi,
            "Starts a transaction.",
        ),
        g.command(
            "exec",
            1,
            NOT_QUEUED,
            none,
            exec,
            "Executes all commands in a transaction.",
        ),
        g.command(
            "discard",
            1,
            NOT_QUEUED | FAST,
            none,
            discard,
            "Discards a transaction.",
        ),
        g.command(
            "watch",
            -2,
            NOT_QUEUED | FAST,
            (1, -1, 1),
            watch,
            "Monitors changes to keys to determine the execution of a transaction.",
        ),
        g.command(
            "unwatch",
            1,
            FAST,
            none,
            unwatch,
            "Forgets about watched keys of a transaction.",
        ),
    ]
}

/// Drops every WATCH of the session.
pub fn unwatch_all(keyspace: &Keyspace, session: &mut Session) {
    if !session.watched.is_empty() {
        keyspace.unwatch(&session.watched, &session.watch_flag);
        session.watched.clear();
    }
    session.watch_flag.store(false, Ordering::Release);
}

fn multi(ctx: &mut Ctx, _args: Args) -> CmdResult {
    if ctx.session.in_multi() {
        return Err(err("ERR MULTI calls can not be nested"));
    }
    ctx.session.multi = Some(Vec::new());
    ctx.session.multi_failed = false;
    ctx.session.info.multi.store(0, Ordering::Relaxed);
    ctx.out.ok();
    Ok(())
}

fn discard(ctx: &mut Ctx, _args: Args) -> CmdResult {
    if !ctx.session.in_multi() {
        return Err(err("ERR DISCARD without MULTI"));
    }
    ctx.session.end_multi();
    unwatch_all(ctx.ks(), ctx.session);
    ctx.out.ok();
    Ok(())
}

fn watch(ctx: &mut Ctx, args: Args) -> CmdResult {
    if ctx.session.in_multi() {
        return Err(err("ERR WATCH inside MULTI is not allowed"));
    }
    for key in args.iter().skip(1) {
        // Reading first deletes the key if it already expired, so only an
        // expiry after WATCH counts as a change.
        ctx.read(key, |_, _| Ok(()))?;
        let watched = ctx
            .ks()
            .watch(ctx.session.db, key, &ctx.session.watch_flag)?;
        ctx.session.watched.push(watched);
    }
    ctx.out.ok();
    Ok(())
}

fn unwatch(ctx: &mut Ctx, _args: Args) -> CmdResult {
    // Inside EXEC the transaction holds the watched keys' stripes, and EXEC
    // unwatches everything when it ends anyway.
    if ctx.exec.is_none() {
        unwatch_all(ctx.ks(), ctx.session);
    }
    ctx.out.ok();
    Ok(())
}

fn exec(ctx: &mut Ctx, _args: Args) -> CmdResult {
    let Some(queue) = ctx.session.multi.take() else {
        return Err(err("ERR EXEC without MULTI"));
    };
    let failed = ctx.session.multi_failed;
    ctx.session.end_multi();
    if failed {
        unwatch_all(ctx.ks(), ctx.session);
        return Err(err(
            "EXECABORT Transaction discarded because of previous errors.",
        ));
    }

    // Every key the queue may touch, in the database it will be in.
    let keyspace = &ctx.ks();
    let mut whole = false;
    let mut keys: Vec<EKey> = ctx.session.watched.clone();
    let mut db = ctx.session.db;
    for queued in &queue {
        let args = queued.args();
        let (_, spec) = lookup(args.get(0)).expect("queued commands were looked up");
        whole |= spec.is(WHOLE_KEYSPACE);
        if spec.name == "select" {
            if let Ok(selected) = db_index(args.get(1), keyspace.databases()) {
                db = selected;
            }
        }
        for (key_db, key) in keys_of(spec, &args, db, keyspace.databases()) {
            keys.push(ekey(key_db, key)?);
        }
    }
    let mut txn = if whole {
        keyspace.lock_all(true)
    } else {
        keyspace.lock_ekeys(keys.iter().map(|k| k.as_slice()), true)
    };

    // Under the locks: a watched key that expired since WATCH is deleted
    // here, which raises the flag like any other change.
    let now = ctx.now_ms;
    for watched in &ctx.session.watched {
        txn.get_ekey(watched, now)?;
    }
    if ctx.session.watch_flag.load(Ordering::Acquire) {
        ctx.session.wrote |= txn.commit()?;
        // After the commit: unwatching locks the watched keys' stripes.
        unwatch_all(ctx.ks(), ctx.session);
        ctx.out.null_array();
        return Ok(());
    }

    let reply_start = ctx.out.len();
    let events_start = ctx.session.notifications.len();
    ctx.out.array(queue.len());
    let mut txn = Some(Box::new(txn));
    for queued in &queue {
        let args = queued.args();
        let (index, spec) = lookup(args.get(0)).expect("queued commands were looked up");
        // The rules may have changed since the command was queued.
        let rules = ctx.session.user.rules();
        if !rules.unrestricted {
            if let Err((denial, id)) = crate::acl::check(&rules, index, spec, &args) {
                super::acl::deny(
                    ctx.shared,
                    ctx.session,
                    denial,
                    id,
                    &args,
                    crate::acl::Context::Multi,
                );
                super::reply_error(
                    ctx.shared,
                    ctx.out,
                    &format!(
                        "NOPERM ACLs rules changed between the moment the transaction was \
                         accumulated and the EXEC call. This command is no longer allowed for \
                         the following reason: {}",
                        denial.exec_reason()
                    ),
                );
                continue;
            }
        }
        txn = run(
            ctx.shared,
            ctx.keyspace,
            ctx.session,
            ctx.out,
            txn,
            index,
            args,
        );
        crate::monitor::feed(ctx.shared, ctx.session, args);
    }
    let txn = txn.expect("queued commands hand the transaction back");
    let committed = txn.commit();
    unwatch_all(ctx.ks(), ctx.session);
    match committed {
        Ok(wrote) => {
            ctx.session.wrote |= wrote;
            if ctx.shared.tracking.active() {
                // Replayed after the reply (`tracking::after_command`).
                ctx.session.tracked_exec = Some(queue);
            }
            Ok(())
        }
        Err(e) => {
            // Nothing the replies claim was applied: replace them, and
            // announce none of it.
            ctx.out.buf.truncate(reply_start);
            ctx.session.notifications.truncate(events_start);
            ctx.session.wrote = true;
            Err(err(format!(
                "EXECABORT Transaction failed while committing: {}",
                super::CmdError::from(e).0
            )))
        }
    }
}

/// The (database, key) pairs a queued command may touch, for locking.
fn keys_of<'a>(
    spec: &CommandSpec,
    args: &Args<'a>,
    db: usize,
    databases: usize,
) -> Vec<(usize, &'a [u8])> {
    let mut keys: Vec<(usize, &[u8])> = spec.key_args(args).into_iter().map(|k| (db, k)).collect();
    // MOVE key n writes the key into another database.
    if spec.name == "move" && keys.len() == 1 {
        if let Ok(target) = db_index(args.get(2), databases) {
            keys.push((target, keys[0].1));
        }
    }
    // COPY ... DB n writes its destination into another database.
    if spec.name == "copy" && keys.len() == 2 {
        let mut i = 3;
        while i + 1 < args.len() {
            if is(args.get(i), "db") {
                if let Ok(target) = db_index(args.get(i + 1), databases) {
                    keys[1].0 = target;
                }
            }
            i += 1;
        }
    }
    keys
}
