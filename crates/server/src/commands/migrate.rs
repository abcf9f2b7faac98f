//! MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
//! [AUTH password] [AUTH2 username password] [KEYS key [key ...]]:
//! moves keys to another Redis-protocol server (Redis or Engram) as RESTORE
//! commands carrying DUMP payloads, then deletes them here unless COPY.
//!
//! The command runs in two parts. The handler checks the arguments as
//! Redis does (options first, then the timeout and the database as
//! integers), serializes the keys that exist (`dump::serialize`: the bytes
//! DUMP would return, and each key's expiry, sent as the TTL left) and
//! hands the work to the connection (`Session::migration`) without
//! replying. The connection then runs the exchange with the target
//! (`crate::migrate_target`: async, so a slow target holds up only this
//! client) and calls `finish`, which deletes what the target acknowledged
//! and writes the reply. A pipeline's later commands wait behind it, as in
//! Redis.
//!
//! ## Not atomic: what if a key changes meanwhile
//!
//! Redis runs MIGRATE on its single thread: nothing can touch the keys
//! between the serialization and the delete. Engram runs clients in
//! parallel and does not hold key locks across network waits, so another
//! client may write a key after it was serialized. Engram's rule: a key is
//! deleted only if nothing wrote it since it was serialized. Each key is
//! watched (WATCH's mechanism: every write to a key, an expiry's delete
//! included, raises its watchers' flags under the key's lock) from before
//! it is read until MIGRATE ends, and the flag is checked under the key's
//! write lock, right before the delete. A key written meanwhile (a new
//! value, a new TTL, even the same value again, or a RESTORE of it when
//! MIGRATE's target is this very server) is left here, newer than the copy
//! the target holds, and MIGRATE still replies +OK for it, since the target
//! did take the value sent. So a newer value is never lost; at worst the
//! key exists on both sides, as after COPY.
//!
//! MIGRATE inside MULTI is refused when queued (a transaction holds its
//! keys' locks and cannot wait on the network), and the transaction with it.
//! A client killed, or a server shut down, while MIGRATE waits for its
//! target gets no reply and loses nothing here: keys are deleted only after
//! the target acknowledged them, and only by a MIGRATE still running.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dump::serialize;
use super::{err, int_arg, is, CmdError, CmdResult, CommandSpec, Ctx, Group, SYNTAX, WRITE};
use crate::keyspace::{now_ms, EKey, Keyspace};
use crate::migrate_target::{exchange, Outcome, Request};
use crate::resp::{Args, OwnedArgs, ReplyWriter};
use crate::session::{ReplyMode, Session};
use crate::shared::Shared;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("generic");
    vec![g.command(
        "migrate",
        -6,
        WRITE,
        (3, 3, 1),
        migrate,
        "Atomically transfers a key from one Redis instance to another.",
    )]
}

/// A MIGRATE whose keys are serialized, for the connection to finish.
pub struct Pending {
    request: Request,
    /// Each RESTORE's key, watched since before it was serialized.
    watches: Vec<KeyWatch>,
    copy: bool,
    /// CLIENT REPLY OFF or SKIP applied to this command: no reply is sent.
    silent: bool,
    /// The call, for the command statistics and the slow log, which see
    /// it when it ends.
    call: OwnedArgs,
    started: Instant,
}

const KEYS_NEED_EMPTY_KEY: &str =
    "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string";

/// MIGRATE on a replicated group's member (it would run on every member,
/// each sending the keys and waiting for the target outside the log).
const IN_GROUP: &str = "ERR MIGRATE is not supported on a member of a replicated group";

fn migrate(ctx: &mut Ctx, args: Args) -> CmdResult {
    if ctx.shared.group.get().is_some() {
        return Err(err(IN_GROUP));
    }
    let started = Instant::now();
    let (mut copy, mut replace) = (false, false);
    let mut auth: Option<(Option<Vec<u8>>, Vec<u8>)> = None;
    let (mut first_key, mut num_keys) = (3, 1);
    let mut j = 6;
    while j < args.len() {
        let arg = args.get(j);
        let more = args.len() - 1 - j;
        if is(arg, "copy") {
            copy = true;
        } else if is(arg, "replace") {
            replace = true;
        } else if is(arg, "auth") {
            if more < 1 {
                return Err(err(SYNTAX));
            }
            j += 1;
            // AUTH after AUTH2 keeps AUTH2's user name, as in Redis.
            let user = auth.take().and_then(|(user, _)| user);
            auth = Some((user, args.get(j).to_vec()));
        } else if is(arg, "auth2") {
            if more < 2 {
                return Err(err(SYNTAX));
            }
            auth = Some((Some(args.get(j + 1).to_vec()), args.get(j + 2).to_vec()));
            j += 2;
        } else if is(arg, "keys") {
            if !args.get(3).is_empty() {
                return Err(err(KEYS_NEED_EMPTY_KEY));
            }
            first_key = j + 1;
            num_keys = args.len() - j - 1;
            break;
        } else {
            return Err(err(SYNTAX));
        }
        j += 1;
    }
    let timeout = int_arg(args.get(5))?;
    let db = int_arg(args.get(4))?;
    let timeout = Duration::from_millis(if timeout <= 0 { 1000 } else { timeout as u64 });
    if ctx.exec.is_some() {
        // Refused when queued (see the module docs); never reached.
        return Err(err("ERR Command not allowed inside a transaction"));
    }

    let mut restores = Vec::with_capacity(num_keys);
    let mut watches = Vec::with_capacity(num_keys);
    for i in first_key..first_key + num_keys {
        let key = args.get(i);
        // Watched first: a write after the read below raises the flag.
        let watch = KeyWatch::new(ctx.keyspace, ctx.session.db, key)?;
        let Some(dumped) = serialize(ctx, key)? else {
            continue;
        };
        // The TTL left, at least 1 ms (0 would mean none); a key that
        // expired meanwhile is not sent.
        let ttl = match dumped.expire_at {
            None => 0,
            Some(at) if at < ctx.now_ms => continue,
            Some(at) => (at - ctx.now_ms).max(1),
        };
        restores.push((key.to_vec(), ttl, dumped.payload));
        watches.push(watch);
    }
    if restores.is_empty() {
        ctx.out.simple("NOKEY");
        return Ok(());
    }
    let silent = matches!(ctx.session.reply, ReplyMode::Off | ReplyMode::Skip);
    ctx.session.migration = Some(Box::new(Pending {
        request: Request {
            host: String::from_utf8_lossy(args.get(1)).into_owned(),
            port: String::from_utf8_lossy(args.get(2)).into_owned(),
            auth,
            db,
            restores,
            replace,
            timeout,
        },
        watches,
        copy,
        silent,
        call: args.to_owned(),
        started,
    }));
    Ok(())
}

/// Runs `pending`'s exchange with its target, deletes the keys the target
/// acknowledged (unless COPY, and only those nothing wrote since they were
/// serialized), and writes MIGRATE's reply. False when the connection must
/// close instead (the client was killed, the server is shutting down).
pub async fn finish(
    shared: &Shared,
    session: &mut Session,
    out: &mut ReplyWriter,
    pending: Box<Pending>,
) -> bool {
    let info = session.info.clone();
    let kill = info.kill.notified();
    let shutdown = shared.shutdown.notified();
    tokio::pin!(kill, shutdown);
    kill.as_mut().enable();
    shutdown.as_mut().enable();
    if info.killed.load(std::sync::atomic::Ordering::Acquire) || shared.is_shutting_down() {
        return false;
    }
    let outcome = tokio::select! {
        outcome = exchange(&shared.migrate_targets, &pending.request) => outcome,
        _ = &mut kill => return false,
        _ = &mut shutdown => return false,
    };
    let acked: &[usize] = match &outcome {
        Outcome::Done { acked, .. } | Outcome::Io { acked, .. } => acked,
        Outcome::ConnectFailed => &[],
    };
    let deleted = if pending.copy || acked.is_empty() {
        Ok(())
    } else {
        delete_unwritten(shared, session, &pending, acked)
    };
    let reply = match (deleted, outcome) {
        (Err(e), _) => Err(e),
        (
            Ok(()),
            Outcome::Done {
                target_error: Some(text),
                ..
            },
        ) => Err(err(format!(
            "ERR Target instance replied with error: {text}"
        ))),
        (Ok(()), Outcome::Done { .. }) => Ok(()),
        (Ok(()), Outcome::ConnectFailed) => {
            Err(err("IOERR error or timeout connecting to the client"))
        }
        (Ok(()), Outcome::Io { writing, .. }) => Err(err(format!(
            "IOERR error or timeout {} to target instance",
            if writing { "writing" } else { "reading" }
        ))),
    };
    let mark = out.len();
    let failed = reply.is_err();
    match reply {
        Ok(()) => out.ok(),
        Err(CmdError(text)) => super::reply_error(shared, out, &text),
    }
    if pending.silent {
        out.buf.truncate(mark);
    }
    let (index, _) = super::lookup(b"migrate").expect("MIGRATE is in the table");
    let args = pending.call.args();
    super::record_call(shared, session, index, &args, pending.started, failed);
    true
}

/// Deletes the keys of the RESTOREs at `acked` that nothing wrote since
/// they were serialized, each checked under its write lock.
fn delete_unwritten(
    shared: &Shared,
    session: &mut Session,
    pending: &Pending,
    acked: &[usize],
) -> CmdResult {
    let db = session.db;
    let restores = &pending.request.restores;
    let keys = acked.iter().map(|&i| (db, restores[i].0.as_slice()));
    let keyspace = shared.keyspace.guard();
    let keyspace = keyspace.as_ref().expect("guard() holds a keyspace");
    let mut txn = keyspace.lock(keys, false)?;
    let now = now_ms();
    let mut result = Ok(());
    for &i in acked {
        if pending.watches[i].written() {
            continue;
        }
        match txn.delete(db, &restores[i].0, now) {
            Ok(true) if shared.notifications.wants(crate::notify::GENERIC) => {
                session.notifications.push(crate::notify::Pending {
                    class: crate::notify::GENERIC,
                    event: "del",
                    db,
                    key: restores[i].0.as_slice().into(),
                });
            }
            Ok(_) => {}
            Err(e) => {
                result = Err(CmdError::from(e));
                break;
            }
        }
    }
    match result {
        Ok(()) => session.wrote |= txn.commit()?,
        Err(_) => session.wrote |= txn.wrote(),
    }
    result
}

/// One key watched as WATCH watches keys: any write to it raises the flag.
/// Unwatched when dropped (never while its key group is locked: MIGRATE's
/// delete has released its locks before `Pending` goes).
struct KeyWatch {
    keyspace: Arc<Keyspace>,
    ekey: EKey,
    flag: Arc<AtomicBool>,
}

impl KeyWatch {
    fn new(keyspace: &Arc<Keyspace>, db: usize, key: &[u8]) -> Result<KeyWatch, CmdError> {
        let flag = Arc::new(AtomicBool::new(false));
        let ekey = keyspace.watch(db, key, &flag)?;
        Ok(KeyWatch {
            keyspace: keyspace.clone(),
            ekey,
            flag,
        })
    }

    fn written(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        self.keyspace
            .unwatch(std::slice::from_ref(&self.ekey), &self.flag);
    }
}
