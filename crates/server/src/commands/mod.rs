//! The command table and dispatch: name lookup, arity, authentication,
//! MULTI queuing, then the handler.
//!
//! A handler gets a `Ctx` (shared state, the session, the reply writer)
//! and the arguments, writes its reply, or returns an error whose text is
//! the reply. Writes go through `Ctx::write`, which locks the keys' stripes
//! (or, inside EXEC, uses the transaction that already holds them).

mod acl;
mod bitmaps;
mod cluster;
mod command;
mod connection;
mod debug;
pub(crate) mod descriptions;
pub(crate) mod dump;
mod engram;
mod functions;
mod geo;
mod hashes;
mod hyperloglog;
mod introspection;
mod key_finder;
pub(crate) use key_finder::key_positions;
pub(crate) mod key_specs;
mod keys;
mod lcs;
mod lists;
pub(crate) use lists::parse_timeout;
mod memory;
mod migrate;
mod pubsub;
mod scripting;
mod server;
mod sets;
mod sort;
mod sorted_sets;
mod streams;
mod string_patch;
mod strings;
mod transactions;

use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};

use crate::keyspace::{self, CKind, Keyspace, Object, Txn};
use crate::resp::{Args, ReplyWriter};
use crate::session::{ReplyMode, Session};
use crate::shared::Shared;

pub use acl::deny as record_acl_denial;
pub use connection::client_line;
pub use migrate::{finish as finish_migration, Pending as PendingMigration};
pub use pubsub::leave_all as leave_pubsub_and_monitor;
pub use scripting::{allowed_while_busy, evalsha_as_eval};
pub use transactions::unwatch_all;

/// A command's error reply (its text, starting with the error code).
#[derive(Debug)]
pub struct CmdError(pub String);

impl From<keyspace::Error> for CmdError {
    fn from(e: keyspace::Error) -> CmdError {
        use engram_engine::Error as Engine;
        match e {
            // Damaged data: say so plainly; the offset is for the operator
            // (ENGRAM.SCRUB names the same records).
            keyspace::Error::Engine(Engine::Unrepairable { offset }) => CmdError(format!(
                "ERR data for this key is corrupt and could not be repaired from parity \
                 (record at offset {offset:#x})"
            )),
            keyspace::Error::Engine(Engine::CorruptRecord { offset, what }) => CmdError(format!(
                "ERR data for this key is corrupt ({what} in the record at offset {offset:#x}); \
                 with integrity on, ENGRAM.SCRUB rebuilds it from parity if only one page of \
                 its stripe is damaged"
            )),
            keyspace::Error::Engine(engine) => CmdError(format!("ERR {engine}")),
            other => CmdError(other.to_string()),
        }
    }
}

pub type CmdResult = Result<(), CmdError>;

pub fn err(text: impl Into<String>) -> CmdError {
    CmdError(text.into())
}

pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Command flags.
pub const WRITE: u32 = 1;
pub const READONLY: u32 = 1 << 1;
pub const ADMIN: u32 = 1 << 2;
/// Allowed before AUTH.
pub const NO_AUTH: u32 = 1 << 3;
/// Runs at once inside MULTI instead of being queued.
pub const NOT_QUEUED: u32 = 1 << 4;
/// Reads or writes the whole keyspace: inside EXEC it needs every stripe.
pub const WHOLE_KEYSPACE: u32 = 1 << 5;
pub const FAST: u32 = 1 << 6;
/// Publishes or subscribes (Redis's `pubsub` flag).
pub const PUBSUB: u32 = 1 << 7;

pub type Handler = fn(&mut Ctx, Args) -> CmdResult;

pub struct CommandSpec {
    pub name: &'static str,
    /// Redis's convention: N exactly N arguments (with the name), -N at
    /// least N.
    pub arity: i32,
    pub flags: u32,
    /// Key positions: first, last (negative: from the end), step.
    pub keys: (i32, i32, i32),
    pub handler: Handler,
    pub group: &'static str,
    pub summary: &'static str,
}

/// The commands of one group (`@string`, `@generic`, ...), for building
/// the table.
pub struct Group(pub &'static str);

impl Group {
    pub fn command(
        &self,
        name: &'static str,
        arity: i32,
        flags: u32,
        keys: (i32, i32, i32),
        handler: Handler,
        summary: &'static str,
    ) -> CommandSpec {
        CommandSpec {
            name,
            arity,
            flags,
            keys,
            handler,
            group: self.0,
            summary,
        }
    }

    /// A command that names no keys.
    pub fn keyless(
        &self,
        name: &'static str,
        arity: i32,
        flags: u32,
        handler: Handler,
        summary: &'static str,
    ) -> CommandSpec {
        self.command(name, arity, flags, (0, 0, 0), handler, summary)
    }
}

impl CommandSpec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }

    pub fn is(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Every argument a call may use as a key, for locking: the spec's
    /// fixed positions (which for the commands with movable keys cover
    /// their other arguments too: locking one more is harmless) and the
    /// positions `key_finder` parses out (SORT's STORE destination).
    pub fn key_args<'a>(&self, args: &Args<'a>) -> Vec<&'a [u8]> {
        let mut positions = key_finder::fixed_positions(self, args.len());
        if key_finder::is_movable(self) {
            for i in key_finder::key_positions(self, args).unwrap_or_default() {
                if !positions.contains(&i) {
                    positions.push(i);
                }
            }
        }
        positions.into_iter().map(|i| args.get(i)).collect()
    }
}

/// Every command, in the order COMMAND lists them.
pub static TABLE: LazyLock<Vec<CommandSpec>> = LazyLock::new(|| {
    let mut table = Vec::new();
    table.extend(connection::commands());
    table.extend(cluster::commands());
    table.extend(acl::commands());
    table.extend(server::commands());
    table.extend(keys::commands());
    table.extend(dump::commands());
    table.extend(migrate::commands());
    table.extend(strings::commands());
    table.extend(lcs::commands());
    table.extend(bitmaps::commands());
    table.extend(hyperloglog::commands());
    table.extend(hashes::commands());
    table.extend(sets::commands());
    table.extend(sorted_sets::commands());
    table.extend(geo::commands());
    table.extend(sort::commands());
    table.extend(lists::commands());
    table.extend(streams::commands());
    table.extend(transactions::commands());
    table.extend(pubsub::commands());
    table.extend(scripting::commands());
    table.extend(functions::commands());
    table.extend(debug::commands());
    table.extend(introspection::commands());
    table.extend(memory::commands());
    table.extend(engram::commands());
    table
});

/// Looked up by every command: hashbrown's default hasher (foldhash)
/// costs a fraction of std's SipHash on a short name, and nothing here
/// needs SipHash's resistance to chosen collisions (the keys are ours).
/// Keyed by bytes: a name from the wire needs no UTF-8 check to be found.
static BY_NAME: LazyLock<hashbrown::HashMap<&'static [u8], usize>> = LazyLock::new(|| {
    TABLE
        .iter()
        .enumerate()
        .map(|(i, spec)| (spec.name.as_bytes(), i))
        .collect()
});

/// The command named `name` (any case) and its index in `TABLE`.
pub fn lookup(name: &[u8]) -> Option<(usize, &'static CommandSpec)> {
    let mut lower = [0u8; 32];
    if name.len() > lower.len() {
        return None;
    }
    for (dst, src) in lower.iter_mut().zip(name) {
        *dst = src.to_ascii_lowercase();
    }
    BY_NAME.get(&lower[..name.len()]).map(|&i| (i, &TABLE[i]))
}

/// The flags `call_has` answers from a table (a script's every
/// `redis.call` asks for the first two).
const CACHED_FLAGS: [&str; 2] = ["noscript", "denyoom"];

/// `descriptions::call_has` for the command at `index` of the table: the
/// flags of `CACHED_FLAGS` of a command that is not a container come from
/// a bit mask made once, not from looking its description up by name.
pub fn call_has(index: usize, spec: &CommandSpec, args: &Args, flag: &str) -> bool {
    static OWN: LazyLock<Vec<Option<u8>>> = LazyLock::new(|| {
        TABLE
            .iter()
            .map(|spec| {
                let own = descriptions::command(spec.name)?;
                (!descriptions::is_container(spec.name)).then(|| {
                    CACHED_FLAGS
                        .iter()
                        .enumerate()
                        .filter(|(_, flag)| own.has(flag))
                        .fold(0u8, |mask, (bit, _)| mask | 1 << bit)
                })
            })
            .collect()
    });
    match (OWN[index], CACHED_FLAGS.iter().position(|f| *f == flag)) {
        (Some(mask), Some(bit)) => mask & (1 << bit) != 0,
        _ => descriptions::call_has(spec.name, args, flag),
    }
}

/// The transaction a command runs inside (EXEC, a script, a replicated
/// batch), if any. Boxed: a `Txn` is large, and every command moved it
/// into its `Ctx` and back out (two `memcpy`s, ~176 of a GET's ~4,500
/// instructions, for the None of nearly every command).
pub type Exec<'s> = Option<Box<Txn<'s>>>;

/// Everything a handler works with.
pub struct Ctx<'s, 'c> {
    pub shared: &'s Shared,
    /// The keyspace this command runs against (see `reload`): use this,
    /// never a guard of its own, which a reload starting meanwhile would
    /// make wait for this very command.
    pub keyspace: &'s Arc<Keyspace>,
    pub session: &'c mut Session,
    pub out: &'c mut ReplyWriter,
    /// Inside EXEC: the transaction holding every key of the queue.
    pub exec: Exec<'s>,
    pub now_ms: u64,
}

impl<'s> Ctx<'s, '_> {
    pub fn ks(&self) -> &'s Keyspace {
        self.keyspace
    }

    pub fn db(&self) -> usize {
        self.session.db
    }

    /// A keyspace notification for `key` of the current database (see
    /// `notify`): sent once this batch's writes are durable.
    pub fn notify(&mut self, class: u32, event: &'static str, key: &[u8]) {
        let db = self.session.db;
        self.notify_in(class, event, db, key);
    }

    /// `notify` for a key of database `db`.
    pub fn notify_in(&mut self, class: u32, event: &'static str, db: usize, key: &[u8]) {
        if self.shared.notifications.wants(class) {
            self.session.notifications.push(crate::notify::Pending {
                class,
                event,
                db,
                key: key.into(),
            });
        }
    }

    /// Reads `key` of the current database: `f` sees its meta word and
    /// payload. Lock-free outside EXEC.
    pub fn read<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(keyspace::value::Meta, &[u8]) -> Result<R, CmdError>,
    ) -> Result<Option<R>, CmdError> {
        let db = self.session.db;
        let now = self.now_ms;
        if let Some(txn) = &mut self.exec {
            return match txn.get(db, key, now)? {
                Some(stored) => f(stored.meta, stored.payload()).map(Some),
                None => Ok(None),
            };
        }
        self.keyspace.read(db, key, now, f)?.transpose()
    }

    /// Reads `key` and lets `f` write the reply straight from the value
    /// (no copy outside EXEC); false if the key is absent.
    pub fn read_reply(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&mut ReplyWriter, keyspace::value::Meta, &[u8]) -> CmdResult,
    ) -> Result<bool, CmdError> {
        let (db, now) = (self.session.db, self.now_ms);
        let out = &mut *self.out;
        let found = match &mut self.exec {
            Some(txn) => txn
                .get(db, key, now)?
                .map(|stored| f(out, stored.meta, stored.payload())),
            None => self
                .keyspace
                .read(db, key, now, |meta, payload| f(out, meta, payload))?,
        };
        found.transpose().map(|found| found.is_some())
    }

    /// Reads collection `key` of the current database: `f` sees its object,
    /// or None when the key is absent. A key of another type is a
    /// WRONGTYPE error. Lock-free outside EXEC.
    pub fn read_collection<R>(
        &mut self,
        key: &[u8],
        kind: CKind,
        f: impl FnOnce(Option<&Object>) -> Result<R, CmdError>,
    ) -> Result<R, CmdError> {
        let (db, now) = (self.session.db, self.now_ms);
        if let Some(txn) = &mut self.exec {
            return f(txn.collection(db, key, kind, now)?);
        }
        self.keyspace.read_collection(db, key, kind, now, f)?
    }

    /// `read_collection` for a write command that looks before it takes
    /// the key's lock (not a keyspace hit or miss). Outside EXEC only:
    /// inside, the transaction's own locks are the way in.
    pub fn read_collection_for_write<R>(
        &mut self,
        key: &[u8],
        kind: CKind,
        f: impl FnOnce(Option<&Object>) -> Result<R, CmdError>,
    ) -> Result<R, CmdError> {
        debug_assert!(self.exec.is_none(), "a lock-free look inside EXEC");
        let (db, now) = (self.session.db, self.now_ms);
        self.keyspace
            .read_collection_for_write(db, key, kind, now, f)?
    }

    /// Whether `key` lives, looked at before a write command takes its
    /// lock (`Keyspace::exists_for_write`: not a keyspace hit or miss).
    /// Outside EXEC only, as `read_collection_for_write`.
    pub fn exists_for_write(&mut self, key: &[u8]) -> Result<bool, CmdError> {
        debug_assert!(self.exec.is_none(), "a lock-free look inside EXEC");
        let (db, now) = (self.session.db, self.now_ms);
        Ok(self.keyspace.exists_for_write(db, key, now)?)
    }

    /// `read_collection` that writes the reply straight from the object.
    pub fn reply_collection(
        &mut self,
        key: &[u8],
        kind: CKind,
        f: impl FnOnce(&mut ReplyWriter, Option<&Object>) -> CmdResult,
    ) -> CmdResult {
        let (db, now) = (self.session.db, self.now_ms);
        let out = &mut *self.out;
        if let Some(txn) = &mut self.exec {
            return f(out, txn.collection(db, key, kind, now)?);
        }
        self.keyspace
            .read_collection(db, key, kind, now, |object| f(out, object))?
    }

    /// Runs `f` with the stripes of `keys` (in the current database)
    /// locked. `atomic`: its writes become visible and durable as one unit.
    pub fn write<R>(
        &mut self,
        keys: &[&[u8]],
        atomic: bool,
        f: impl FnOnce(&mut Txn<'s>, usize, u64) -> Result<R, CmdError>,
    ) -> Result<R, CmdError> {
        let db = self.session.db;
        self.write_in(keys.iter().map(|k| (db, *k)), atomic, f)
    }

    /// `write` for keys of any database.
    pub fn write_in<'k, R>(
        &mut self,
        keys: impl IntoIterator<Item = (usize, &'k [u8])>,
        atomic: bool,
        f: impl FnOnce(&mut Txn<'s>, usize, u64) -> Result<R, CmdError>,
    ) -> Result<R, CmdError> {
        let db = self.session.db;
        let now = self.now_ms;
        if let Some(txn) = &mut self.exec {
            return f(txn, db, now);
        }
        let mut txn = self.keyspace.lock(keys, atomic)?;
        let result = f(&mut txn, db, now);
        // A failed command's buffered writes are dropped with the
        // transaction; direct writes already made stay (as in Redis).
        match result {
            Ok(value) => {
                self.session.wrote |= txn.commit()?;
                Ok(value)
            }
            Err(e) => {
                self.session.wrote |= txn.wrote();
                Err(e)
            }
        }
    }
}

/// Runs blocking work (seconds of it: a scrub) from a handler without
/// stalling the other connections of this network worker: on the server's
/// multi-threaded runtime the worker hands its other tasks to a fresh
/// thread meanwhile (`block_in_place`); elsewhere it just runs.
pub fn run_blocking<R>(work: impl FnOnce() -> R) -> R {
    if can_hand_off() {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// Whether this thread is a worker of a multi-threaded runtime (every
/// network loop is one), which can hand its other tasks to a fresh thread
/// (`block_in_place`).
pub fn can_hand_off() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Parses an integer argument (Redis's "value is not an integer" error).
pub fn int_arg(arg: &[u8]) -> Result<i64, CmdError> {
    crate::resp::parse_int(arg).ok_or_else(|| err(NOT_INTEGER))
}

/// An integer argument Redis range-checks to ±`i64::MAX` (a count or rank
/// whose negation must fit): `i64::MIN` gets Redis's out-of-range error.
pub fn symmetric_int_arg(arg: &[u8]) -> Result<i64, CmdError> {
    match int_arg(arg)? {
        i64::MIN => Err(err(format!(
            "ERR value is out of range, value must between {} and {}",
            -i64::MAX,
            i64::MAX
        ))),
        value => Ok(value),
    }
}

/// A SCAN-family cursor as Redis reads one (`strtoul`, base 10): an
/// optional sign (a minus wraps around, as in C), digits, nothing around
/// them, no overflow; like `strtoul`, an empty argument is cursor 0.
pub fn cursor_arg(arg: &[u8]) -> Result<u64, CmdError> {
    let invalid = || err("ERR invalid cursor");
    let (negative, digits) = match arg {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, arg),
    };
    if digits.is_empty() {
        // `strtoul` parsed nothing: valid only if there was nothing.
        return if arg.is_empty() {
            Ok(0)
        } else {
            Err(invalid())
        };
    }
    let mut value: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return Err(invalid());
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit - b'0')))
            .ok_or_else(invalid)?;
    }
    Ok(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// Whether `arg` is `word`, ignoring ASCII case.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

pub fn lowercase(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_lowercase()
}

pub fn wrong_arity(name: &str) -> CmdError {
    err(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// Redis's reply to an unknown command, quoting its first arguments.
fn unknown_command(args: &Args) -> CmdError {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        printable(args.get(0), 128)
    );
    for arg in args.iter().skip(1).take(16) {
        text.push('\'');
        text.push_str(&printable(arg, 128 - text.len().min(128)));
        text.push_str("' ");
    }
    err(text)
}

fn printable(bytes: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(max)])
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Runs one client command end to end (lookup, checks, MULTI queuing,
/// handler, error reply).
/// The ACL check before a command runs or is queued: a denial is logged
/// and becomes the reply.
fn check_acl(
    shared: &Shared,
    session: &Session,
    index: usize,
    spec: &CommandSpec,
    args: &Args,
) -> Result<(), String> {
    let rules = session.user.rules();
    if rules.unrestricted {
        return Ok(());
    }
    crate::acl::check(&rules, index, spec, args).map_err(|(denial, id)| {
        let context = if session.in_multi() {
            crate::acl::Context::Multi
        } else {
            crate::acl::Context::TopLevel
        };
        acl::deny(shared, session, denial, id, args, context);
        denial.reply(crate::acl::command_name(id))
    })
}

/// Whether a container's subcommand writes (XGROUP CREATE...): the
/// container's own flags say nothing, Redis's description of the
/// subcommand does.
pub fn writes_by_subcommand(spec: &CommandSpec, args: &Args) -> bool {
    descriptions::is_container(spec.name) && descriptions::call_has(spec.name, args, "write")
}

pub fn execute(shared: &Shared, session: &mut Session, out: &mut ReplyWriter, args: Args) {
    shared.stats.commands_processed.incr();
    let Some((index, spec)) = lookup(args.get(0)) else {
        fail_in_multi(session);
        reply_error(shared, out, &unknown_command(&args).0);
        return;
    };
    session.info.last_command.store(
        crate::acl::CATALOG.id_of_call(index, spec, &args),
        Ordering::Relaxed,
    );
    // The keyspace for this command, everything it calls included (see
    // `reload`).
    let guard = shared.keyspace.guard();
    let keyspace: &Arc<Keyspace> = guard.as_ref().expect("guard() holds a keyspace");
    let refusal = if !spec.arity_ok(args.len()) {
        Some(wrong_arity(spec.name).0)
    } else if !session.authenticated && !spec.is(NO_AUTH) {
        Some("NOAUTH Authentication required.".to_string())
    } else if let Err(text) = check_acl(shared, session, index, spec, &args) {
        Some(text)
    } else if let Some(busy) = shared
        .scripting
        .running
        .is_active()
        .then(|| scripting::busy_refusal(shared, spec, &args))
        .flatten()
    {
        Some(busy)
    } else if session.in_multi() && matches!(spec.name, "save" | "shutdown" | "migrate") {
        // Redis's no-multi commands: refused while queueing, and the
        // transaction with them. MIGRATE too, in Engram only: it waits on
        // the network, which a transaction holding its locks cannot.
        Some("ERR Command not allowed inside a transaction".to_string())
    } else if shared.memory_limit.is_set()
        // As Redis, every command evicts first when memory is over the
        // limit; only those that may grow the data are refused.
        && crate::eviction::before_command(shared, keyspace, session) == crate::eviction::Outcome::Fail
        && may_grow(spec, &args, session)
    {
        Some(crate::maxmemory::OOM.to_string())
    } else if session.pubsub.subscribed()
        && !out.is_resp3()
        && !ALLOWED_WHEN_SUBSCRIBED.contains(&spec.name)
    {
        Some(format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
             RESET are allowed in this context",
            full_name(spec, &args)
        ))
    } else {
        None
    };
    if let Some(text) = refusal {
        shared.stats.commands.rejected(index, &args);
        if spec.name == "exec" && session.in_multi() {
            // As Redis's execCommandAbort: the transaction is discarded
            // (and MONITOR told, which saw the MULTI).
            session.end_multi();
            unwatch_all(keyspace, session);
            reply_error(
                shared,
                out,
                &format!("EXECABORT Transaction discarded because of: {text}"),
            );
            crate::monitor::feed(shared, session, args);
            return;
        }
        fail_in_multi(session);
        reply_error(shared, out, &text);
        return;
    }
    if session.in_multi() && !spec.is(NOT_QUEUED) {
        let queue = session.multi.as_mut().expect("in MULTI");
        queue.push(args.to_owned());
        session
            .info
            .multi
            .store(queue.len() as i64, Ordering::Relaxed);
        out.simple("QUEUED");
        return;
    }
    if let Some(replica) = shared.group.get() {
        match crate::group::route(replica, session, spec, &args) {
            crate::group::Route::Local => {}
            crate::group::Route::Propose => {
                crate::group::feed_monitors(shared, session, spec, args);
                crate::group::queue(shared, session, spec, args);
                return;
            }
            crate::group::Route::Refuse(text) => {
                if spec.name == "exec" {
                    session.end_multi();
                    unwatch_all(keyspace, session);
                }
                reply_error(shared, out, &text);
                return;
            }
        }
    }
    let tracking = shared.tracking.active();
    if tracking {
        // Keys changed before this command ran (an eviction): their
        // invalidations precede its reply.
        crate::tracking::invalidate_modified(shared, Some(session.info.id));
    }
    if session.pubsub.outbox.is_some() {
        // Messages that came before this command go before its reply.
        crate::delivery::take_all(session, out);
    }
    let mark = out.len();
    session.pushed = false;
    run(shared, keyspace, session, out, None, index, args);
    crate::monitor::feed(shared, session, args);
    // CLIENT REPLY OFF and SKIP: the reply is written, then dropped
    // (subscription confirmations are pushes, and stay).
    let silence = !session.pushed;
    match session.reply {
        ReplyMode::On => {}
        ReplyMode::Off if silence => out.buf.truncate(mark),
        ReplyMode::Off => {}
        ReplyMode::SkipNext => session.reply = ReplyMode::Skip,
        ReplyMode::Skip => {
            if silence {
                out.buf.truncate(mark);
            }
            session.reply = ReplyMode::On;
        }
    }
    if session.pubsub.outbox.is_some() {
        // Messages the command itself caused (a subscriber publishing to
        // its own channel) go before its reply, as in Redis.
        crate::delivery::take_all_before(session, out, mark);
        session.pubsub.release_if_idle();
    }
    if tracking || shared.tracking.active() {
        // Invalidations the command caused follow its reply.
        crate::tracking::after_command(shared, session, spec, &args);
    }
}

/// What RESP2's subscribed mode allows (Redis's processCommand).
const ALLOWED_WHEN_SUBSCRIBED: &[&str] = &[
    "ping",
    "subscribe",
    "ssubscribe",
    "unsubscribe",
    "sunsubscribe",
    "psubscribe",
    "punsubscribe",
    "quit",
    "reset",
];

/// A command's name as Redis's errors give it: `client|list` for a
/// container's subcommand.
fn full_name(spec: &CommandSpec, args: &Args) -> String {
    if args.len() > 1 && crate::command_stats::CONTAINERS.contains(&spec.name) {
        format!("{}|{}", spec.name, lowercase(args.get(1)))
    } else {
        spec.name.to_string()
    }
}

/// Commands whose key lookups do not count as accesses (Redis's
/// `LOOKUP_NOTOUCH` and the commands that look keys up without
/// `lookupKey`: DEBUG OBJECT, MEMORY USAGE).
const NO_TOUCH: &[&str] = &[
    "exists",
    "type",
    "ttl",
    "pttl",
    "expiretime",
    "pexpiretime",
    "object",
    "debug",
    "memory",
    "scan",
    "keys",
    "randomkey",
    "dbsize",
];

/// `NO_TOUCH` by command index, for the per-command check.
static IS_NO_TOUCH: LazyLock<Vec<bool>> = LazyLock::new(|| {
    TABLE
        .iter()
        .map(|spec| NO_TOUCH.contains(&spec.name))
        .collect()
});

/// Whether the command may grow memory (refused over `maxmemory`):
/// Redis's denyoom commands, EXEC of a queue holding one, and, as in
/// Redis, any command queued inside MULTI (a queue grows without bound).
fn may_grow(spec: &CommandSpec, args: &Args, session: &Session) -> bool {
    if session.in_multi() && !matches!(spec.name, "exec" | "discard" | "quit" | "reset") {
        return true;
    }
    this_or_queued(spec, args, session, |spec, args| {
        descriptions::call_has(spec.name, args, "denyoom")
    })
}

/// `test` of the command, or for EXEC, of any command in its queue: what
/// Redis decides by the flags of a transaction's commands (maxmemory's
/// denyoom, CLIENT PAUSE's may-write).
pub fn this_or_queued(
    spec: &CommandSpec,
    args: &Args,
    session: &Session,
    test: impl Fn(&CommandSpec, &Args) -> bool,
) -> bool {
    if spec.name != "exec" {
        return test(spec, args);
    }
    session.multi.as_ref().is_some_and(|queue| {
        queue.iter().any(|q| {
            let args = q.args();
            lookup(args.get(0)).is_some_and(|(_, s)| test(s, &args))
        })
    })
}

/// Sends an error reply and counts it (INFO errorstats).
pub fn reply_error(shared: &Shared, out: &mut ReplyWriter, text: &str) {
    shared.stats.commands.error_reply(text);
    out.error(text);
}

/// Runs a handler; inside EXEC `exec` is the transaction. Returns the
/// transaction back (EXEC runs the next queued command with it).
pub fn run<'s>(
    shared: &'s Shared,
    keyspace: &'s Arc<Keyspace>,
    session: &mut Session,
    out: &mut ReplyWriter,
    exec: Exec<'s>,
    index: usize,
    args: Args,
) -> Exec<'s> {
    // One clock read for both the command's time and its duration.
    let now = crate::keyspace::clock::now();
    // A script's commands see the time it started at (Redis's snapshot).
    let now_ms = if session.in_script {
        session.script_started_ms
    } else if let Some(clock) = session.clock_ms {
        clock
    } else {
        now.unix_ms
    };
    let mut ctx = Ctx {
        shared,
        keyspace,
        session,
        out,
        exec,
        now_ms,
    };
    let started = now.instant;
    let spec = &TABLE[index];
    // Redis's LOOKUP_NOTOUCH commands, and a CLIENT NO-TOUCH client's
    // commands other than TOUCH, leave keys' access fields alone.
    let no_touch = IS_NO_TOUCH[index] || (ctx.session.no_touch && spec.name != "touch");
    let reply_start = ctx.out.len();
    let absent = absent_keys(&mut ctx, spec, &args);
    let first_event = ctx.session.notifications.len();
    let result = keyspace::access::without_touching(no_touch, || (spec.handler)(&mut ctx, args));
    if let Some(absent) = absent {
        announce_new_keys(&mut ctx, absent, first_event);
    }
    // A command whose reply is an error failed, whether the handler
    // returned it or wrote it (a script returning an error, as Redis
    // counts failed_calls).
    let failed = result.is_err() || matches!(ctx.out.buf.get(reply_start), Some(b'-' | b'!'));
    if ctx.session.migration.is_some() {
        // MIGRATE waits for its target: the call is counted, timed and
        // logged when it ends (`migrate::finish`), as Redis times it whole.
        return ctx.exec;
    }
    if let Err(e) = &result {
        reply_error(shared, ctx.out, &e.0);
    }
    // A command that blocked is counted once, when its wait ends (served
    // or failed by a retry, timed out, unblocked), as Redis counts it.
    if result.is_err() || ctx.session.blocked.is_none() {
        record_call(shared, ctx.session, index, &args, started, failed);
    }
    ctx.exec
}

/// The keys of a write command that do not exist before it runs, when
/// someone listens for the `new` event (class `n`); None otherwise, at no
/// cost. Scripts are left out: each of their calls is checked.
fn absent_keys(ctx: &mut Ctx, spec: &CommandSpec, args: &Args) -> Option<Vec<Vec<u8>>> {
    if !ctx.shared.notifications.wants(crate::notify::NEW)
        || !spec.is(WRITE)
        || matches!(spec.name, "eval" | "evalsha" | "fcall")
    {
        return None;
    }
    let positions = key_finder::key_positions(spec, args)?;
    let mut absent = Vec::new();
    for at in positions {
        let key = args.get(at);
        let exists = keyspace::access::without_touching(true, || ctx.read(key, |_, _| Ok(())));
        if matches!(exists, Ok(None)) && !absent.iter().any(|k: &Vec<u8>| k == key) {
            absent.push(key.to_vec());
        }
    }
    Some(absent)
}

/// Redis's `new` event (sent by dbAdd, before the command's own events)
/// for each of `absent` that the command created.
fn announce_new_keys(ctx: &mut Ctx, absent: Vec<Vec<u8>>, first_event: usize) {
    let db = ctx.session.db;
    let mut at = first_event.min(ctx.session.notifications.len());
    for key in absent {
        let exists = keyspace::access::without_touching(true, || ctx.read(&key, |_, _| Ok(())));
        if matches!(exists, Ok(Some(_))) {
            ctx.session.notifications.insert(
                at,
                crate::notify::Pending {
                    class: crate::notify::NEW,
                    event: "new",
                    db,
                    key: key.into(),
                },
            );
            at += 1;
        }
    }
}

/// Counts a call that began at `started` (INFO commandstats, LATENCY
/// HISTOGRAM) and shows it to the slow log and the latency monitor.
pub fn record_call(
    shared: &Shared,
    session: &Session,
    index: usize,
    args: &Args,
    started: std::time::Instant,
    failed: bool,
) {
    let usec = started.elapsed().as_micros() as u64;
    shared.stats.commands.called(index, args, usec, failed);
    observe_slow(shared, session, index, args, usec);
}

/// The slow log and the latency monitor's `command` events. EXEC itself is
/// left out (its commands are logged one by one), and so are AUTH and
/// HELLO, whose arguments hold passwords.
fn observe_slow(shared: &Shared, session: &Session, index: usize, args: &Args, usec: u64) {
    let spec = &TABLE[index];
    if matches!(spec.name, "exec" | "auth" | "hello") {
        return;
    }
    if shared.slowlog.qualifies(usec) {
        let name = session.info.name.lock().clone();
        shared
            .slowlog
            .push(args, usec, session.info.addr.to_string(), name);
    }
    let event = if spec.is(FAST) {
        "fast-command"
    } else {
        "command"
    };
    shared.latency.observe(event, usec / 1000);
}

fn fail_in_multi(session: &mut Session) {
    if session.in_multi() {
        session.multi_failed = true;
    }
}

/// Redis's addReplySubcommandSyntaxError: a subcommand whose arguments
/// its handler refuses beyond the declared arity.
pub fn subcommand_syntax_error(command: &str, sub: &[u8]) -> CmdError {
    err(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        printable(sub, 128),
        command.to_ascii_uppercase()
    ))
}

/// `ERR unknown subcommand 'x'. Try CLIENT HELP.`
pub fn unknown_subcommand(command: &str, sub: &[u8]) -> CmdError {
    err(format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        printable(sub, 128),
        command.to_ascii_uppercase()
    ))
}

/// `ERR wrong number of arguments for 'client|setname' command`.
pub fn wrong_sub_arity(command: &str, sub: &[u8]) -> CmdError {
    wrong_arity(&format!("{command}|{}", lowercase(sub)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_like_strtoul() {
        assert_eq!(cursor_arg(b"0").unwrap(), 0);
        assert_eq!(cursor_arg(b"").unwrap(), 0);
        assert_eq!(cursor_arg(b"+7").unwrap(), 7);
        assert_eq!(cursor_arg(b"-1").unwrap(), u64::MAX);
        assert_eq!(cursor_arg(b"18446744073709551615").unwrap(), u64::MAX);
        assert!(cursor_arg(b"18446744073709551616").is_err());
        assert!(cursor_arg(b" 1").is_err());
        assert!(cursor_arg(b"1 ").is_err());
        assert!(cursor_arg(b"x").is_err());
        assert!(cursor_arg(b"-").is_err());
    }

    #[test]
    fn symmetric_ints_refuse_only_i64_min() {
        assert_eq!(
            symmetric_int_arg(b"-9223372036854775807").unwrap(),
            -i64::MAX
        );
        assert_eq!(symmetric_int_arg(b"9223372036854775807").unwrap(), i64::MAX);
        let CmdError(text) = symmetric_int_arg(b"-9223372036854775808").unwrap_err();
        assert_eq!(
            text,
            "ERR value is out of range, value must between -9223372036854775807 and \
             9223372036854775807"
        );
        assert!(symmetric_int_arg(b"x").is_err());
    }
}
