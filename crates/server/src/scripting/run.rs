//! One script run (an EVAL script or a function): the caller holds the
//! keyspace (an atomic `Txn` excluding every other writer) and the Lua state;
//! `redis.call` runs each command through `commands::run` against that
//! `Txn` with a scratch reply writer, whose RESP is turned back into Lua
//! values. An instruction hook polls SCRIPT KILL. The result or the error
//! goes into the caller's reply as Redis writes it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use engram_lua_calls::{Arg, Dispatch, Outcome, StackArgs};
use mlua::{Function, HookTriggers, Lua, MultiValue, Table, Value, VmState};

use super::{lua_to_reply, number, reply_to_lua, Engine, Running, ScriptFlags};
use crate::commands::{self, CommandSpec};
use crate::keyspace::{Keyspace, Txn};
use crate::resp::{OwnedArgs, ReplyWriter};
use crate::session::Session;
use crate::shared::Shared;

/// Instructions between two polls of the kill flag.
const HOOK_EVERY_INSTRUCTIONS: u32 = 10_000;
const KILLED: &str = "Script killed by user with SCRIPT KILL...";

/// What is being run.
pub struct Call<'a> {
    /// The script's SHA-1 or the function's name (errors say it).
    pub name: &'a str,
    pub flags: ScriptFlags,
    /// EVAL (KEYS and ARGV are globals) or FCALL (they are arguments).
    pub eval: bool,
    /// EVAL_RO / FCALL_RO, or a script flagged no-writes.
    pub read_only: bool,
    pub keys: Vec<&'a [u8]>,
    pub args: Vec<&'a [u8]>,
    /// The command line that ran it (FUNCTION STATS).
    pub command: Vec<Vec<u8>>,
    /// The engine's hashes of the keys the script will likely reach first,
    /// whose index lines the caller started loading
    /// (`commands::scripting::KeysWarm`): their records are warmed last,
    /// just before the script starts.
    pub warm: &'a [u64],
    /// It runs on its network worker's own thread (`Placement::Inline`):
    /// once it has run a while, the worker's other tasks are handed to a
    /// fresh thread (see `hand_off_if_long`).
    pub inline: bool,
}

/// How long an inline script runs before its worker's queued tasks are
/// handed on: a task queued behind it (in the worker's LIFO slot, which
/// other workers cannot steal) would otherwise wait for the whole script,
/// and a client waiting to be told BUSY, or to send SCRIPT KILL, could be
/// that task.
const HAND_OFF_AFTER_MS: u64 = 2;
/// Then again this often: a hand-off is a best effort (the fresh thread
/// may not have started within the pause on a loaded machine), and once
/// one took, another costs only its pause.
const HAND_OFF_AGAIN_MS: u64 = 50;

/// Hands the worker's queued tasks to a fresh thread (`block_in_place`
/// with a short pause, long enough for that thread to take them; the
/// script then goes on here without them), when the run has gone on past
/// `Running::hand_off_at_ms` (0: never).
fn hand_off_if_long(running: &Running) {
    let next_ms = &running.hand_off_at_ms;
    let next = next_ms.load(Ordering::Relaxed);
    if next > 0 && running.elapsed_ms().is_some_and(|ms| ms >= next) {
        next_ms.store(next + HAND_OFF_AGAIN_MS, Ordering::Relaxed);
        commands::run_blocking(|| std::thread::sleep(std::time::Duration::from_millis(1)));
    }
}

/// A group's script refused a write (`CallState::saw_member_reply`).
pub const AFTER_MEMBER_REPLY: &str = "ERR Write commands are not allowed after a command \
     whose reply differs between the members of a replicated group (INFO, PUBLISH...) in a \
     script the group runs";

/// Commands whose reply is the member's own (its configuration, clients,
/// memory, subscribers, clock of saves...), not the data every member
/// holds alike. TIME, RANDOMKEY, KEYS, SCAN and the random picks answer
/// alike on a group's apply (the entry's time and seed, key order).
fn replies_per_member(name: &str) -> bool {
    matches!(
        name,
        "info"
            | "memory"
            | "object"
            | "lastsave"
            | "client"
            | "role"
            | "cluster"
            | "config"
            | "debug"
            | "slowlog"
            | "latency"
            | "pubsub"
            | "publish"
            | "spublish"
            | "acl"
    )
}

/// What `redis.call` works with during one run.
struct CallState<'s, 'c> {
    shared: &'s Shared,
    keyspace: &'s Arc<Keyspace>,
    session: &'c mut Session,
    txn: crate::commands::Exec<'s>,
    scratch: ReplyWriter,
    /// The script's protocol (`redis.setresp`).
    resp3: bool,
    read_only: bool,
    allow_oom: bool,
    wrote: bool,
    /// On a group's apply: the script called a command whose reply is
    /// this member's own (`replies_per_member`), so it may no longer
    /// write.
    saw_member_reply: bool,
    /// The keys the script declared (EVAL's KEYS): what client-side
    /// caching remembers when the script reads.
    declared: &'c [&'c [u8]],
}

/// What `run_functions`' functions reach of the run on their thread.
trait RunHooks {
    /// `redis.call` / `redis.pcall`: runs the command and answers.
    fn call(&mut self, command: &OwnedArgs, answer: &mut dyn FnMut(Outcome<'_>));
    fn set_resp(&mut self, lua: &Lua, args: MultiValue) -> mlua::Result<LuaOutcome>;
    fn acl_check_cmd(&mut self, lua: &Lua, args: MultiValue) -> mlua::Result<LuaOutcome>;
}

impl RunHooks for CallState<'_, '_> {
    fn call(&mut self, command: &OwnedArgs, answer: &mut dyn FnMut(Outcome<'_>)) {
        redis_call(self, command, answer)
    }
    fn set_resp(&mut self, lua: &Lua, args: MultiValue) -> mlua::Result<LuaOutcome> {
        set_resp(lua, self, args)
    }
    fn acl_check_cmd(&mut self, lua: &Lua, args: MultiValue) -> mlua::Result<LuaOutcome> {
        acl_check_cmd(lua, self, args)
    }
}

/// The run on this thread, as a `RunHooks` borrowed for its length.
struct Current<'a>(&'a mut (dyn RunHooks + 'a));

impl<'a, 'b> scoped_tls_hkt::ReborrowMut<'a> for Current<'b> {
    type Result = Current<'a>;
    fn reborrow_mut(&'a mut self) -> Current<'a> {
        Current(&mut *self.0)
    }
}

scoped_tls_hkt::scoped_thread_local!(
    /// Set by `run_script` for the length of a run (a run is synchronous
    /// on its thread), so that functions made once per Lua state can
    /// reach a state made per run.
    static mut CURRENT: for<'a> Current<'a>
);

/// Runs `work` on the run on this thread, if one runs.
fn with_current<R>(work: impl FnOnce(&mut dyn RunHooks) -> R) -> Option<R> {
    if !CURRENT.is_set() {
        return None;
    }
    Some(CURRENT.with(|current| work(current.0)))
}

/// `redis.call` (raising) and `redis.pcall` (returning the error table):
/// C functions that read their arguments off Lua's stack and push the
/// reply onto it (`engram_lua_calls`), answered by the run on this thread.
struct RunCall;

impl Dispatch for RunCall {
    type Command = OwnedArgs;

    fn read(args: &StackArgs) -> Result<OwnedArgs, &'static str> {
        stack_command(args)
    }

    fn run(command: OwnedArgs, answer: &mut dyn FnMut(Outcome<'_>)) {
        if with_current(|run| run.call(&command, &mut *answer)).is_none() {
            answer(Outcome::Failure {
                line: OUTSIDE_A_RUN.as_bytes(),
                counted: true,
            });
        }
    }
}

/// The run's functions, made once per Lua state: `redis.call` and
/// `redis.pcall` (`run_with` puts them in place for a run), the
/// `redis.setresp`, `redis.set_repl` and `redis.acl_check_cmd` the state
/// keeps, and the one that returns the run's KEYS and ARGV.
pub fn run_functions(lua: &Lua) -> mlua::Result<RunFunctions> {
    Ok(RunFunctions {
        call: engram_lua_calls::command_function::<RunCall>(lua, true)?,
        pcall: engram_lua_calls::command_function::<RunCall>(lua, false)?,
        setresp: run_api(lua, RunApi::SetResp)?,
        set_repl: run_api(lua, RunApi::SetRepl)?,
        acl_check_cmd: run_api(lua, RunApi::AclCheckCmd)?,
        tables: engram_lua_calls::tables_function(lua)?,
    })
}

/// What `run_functions` makes, for the sandbox to put in place.
pub struct RunFunctions {
    pub call: Function,
    pub pcall: Function,
    pub setresp: Function,
    pub set_repl: Function,
    pub acl_check_cmd: Function,
    pub tables: Function,
}

/// The `redis` functions, other than `call` and `pcall`, that act on the
/// run in progress.
#[derive(Clone, Copy)]
enum RunApi {
    SetResp,
    SetRepl,
    AclCheckCmd,
}

impl RunApi {
    /// Redis's error outside a run.
    fn outside(self) -> &'static str {
        match self {
            RunApi::SetResp => "redis.setresp can only be called inside a script invocation",
            RunApi::SetRepl => "redis.set_repl can only be called inside a script invocation",
            RunApi::AclCheckCmd => {
                "redis.acl_check_cmd can only be called inside a script invocation"
            }
        }
    }
}

/// `api` as a Rust (C) function, as Redis's are: its refusals are raised
/// from it, so that even `return redis.setresp(4)` (a tail call, which
/// would replace the script's frame by a Lua function's) leaves the
/// script's frame on the stack for the error's `script: ..., on
/// @user_script:N.`.
fn run_api(lua: &Lua, api: RunApi) -> mlua::Result<Function> {
    lua.create_function(move |lua, args: MultiValue| {
        let outcome = with_current(|run| match api {
            RunApi::SetResp => run.set_resp(lua, args),
            RunApi::SetRepl => set_repl(lua, args),
            RunApi::AclCheckCmd => run.acl_check_cmd(lua, args),
        })
        .unwrap_or_else(|| failure(lua, api.outside(), false))?;
        match outcome {
            (true, value) => Ok(value),
            (false, error) => Err(raise(&error)),
        }
    })
}

/// The instruction hook of the runs on `lua`: it hands the network
/// worker's other tasks on once a run has gone on a while, and polls
/// SCRIPT KILL.
fn set_run_hook(lua: &Lua, running: Arc<Running>) {
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(HOOK_EVERY_INSTRUCTIONS),
        move |lua, _| {
            hand_off_if_long(&running);
            if running.is_active() && running.is_killed() {
                // As Redis's hook: from now on every line raises, so a
                // `pcall` that caught this cannot keep the script going
                // (the line after it raises again). Every line of the
                // user's code: the sandbox's own (`run_with` putting the
                // run's functions away) goes on. Removed after the run.
                lua.set_hook(HookTriggers::new().every_line(), |_, debug| {
                    match debug.source().source.as_deref() {
                        Some("@user_script" | "@user_function") => {
                            Err(mlua::Error::runtime(KILLED))
                        }
                        _ => Ok(VmState::Continue),
                    }
                });
                Err(mlua::Error::runtime(KILLED))
            } else {
                Ok(VmState::Continue)
            }
        },
    );
}

/// What `redis.call` raises outside a script's run (as the sandbox's own).
const OUTSIDE_A_RUN: &str = "redis.call/pcall can only be called inside a script invocation";

/// Runs `function` as `call` says, with `txn` holding the keyspace, and
/// writes its reply to `out`. Returns the transaction (to commit, or to
/// hand back to EXEC).
#[allow(clippy::too_many_arguments)]
pub fn run_script<'s>(
    shared: &'s Shared,
    keyspace: &'s Arc<Keyspace>,
    session: &mut Session,
    out: &mut ReplyWriter,
    engine: &Engine,
    function: &Function,
    call: &Call,
    txn: Box<Txn<'s>>,
) -> Box<Txn<'s>> {
    let running: &Arc<Running> = &shared.scripting.running;
    running.begin(
        call.eval,
        session.applying(),
        call.name,
        call.command.clone(),
    );
    running.hand_off_at_ms.store(
        if call.inline { HAND_OFF_AFTER_MS } else { 0 },
        Ordering::Relaxed,
    );
    let saved_db = session.db;
    session.in_script = true;
    // On a replicated node's apply thread: the entry's time and seed, the
    // same on every node.
    session.script_started_ms = session.clock_ms.unwrap_or_else(crate::keyspace::now_ms);
    if let Some(seed) = crate::random::seeded() {
        super::redis_api::reseed(seed);
    }
    let mut state = CallState {
        shared,
        keyspace,
        session,
        txn: Some(txn),
        scratch: ReplyWriter::new(),
        resp3: false,
        read_only: call.read_only,
        allow_oom: call.flags.allow_oom || call.flags.no_writes,
        wrote: false,
        saw_member_reply: false,
        declared: &call.keys,
    };
    let lua = &engine.lua;
    // The instruction hook stays from run to run (setting and removing
    // it cost a run a few percent); a kill or a library's load replaces
    // it, and the next run puts it back.
    if !engine.run_hook_set.swap(true, Ordering::Relaxed) {
        set_run_hook(lua, running.clone());
    }
    // `redis.call` and the other `redis` functions that act on a run are
    // Rust functions made once with the state (`run_functions`); they
    // reach this run's state through `CURRENT`, set for the length of the
    // run. (Made per run, scoped to it, each cost its creation,
    // registration, destruction and garbage.)
    for &hash in call.warm {
        keyspace.prefetch(hash, crate::keyspace::PrefetchStep::Record);
    }
    // KEYS and ARGV are made on Lua's stack when the runner asks for
    // them, not as mlua values.
    let outcome = CURRENT.set(Current(&mut state), || {
        engram_lua_calls::with_tables(&call.keys, &call.args, || {
            engine
                .run_with
                .call::<(bool, Value)>((function, &engine.handler, call.eval))
        })
    });
    if running.is_killed() {
        // The every-line hook of a kill goes with the run.
        lua.remove_hook();
        engine.run_hook_set.store(false, Ordering::Relaxed);
    }
    if outcome.is_err() {
        // `run_with` did not get to take them away (an error it could not
        // catch, or one before it ran).
        let _ = engine
            .redis_api
            .raw_set("call", engine.outside_call.clone());
        let _ = engine
            .redis_api
            .raw_set("pcall", engine.outside_pcall.clone());
    }
    // A command that panicked inside the script: on, as a panic outside
    // one would go (Lua's frames are behind us now).
    engram_lua_calls::resume_panic();
    let resp3 = state.resp3;
    state.session.select(saved_db);
    state.session.in_script = false;
    match outcome {
        Ok((true, value)) => lua_to_reply::write(shared, out, &value, resp3),
        Ok((false, Value::Table(error))) => write_error(shared, out, &error, call.name),
        Ok((false, other)) => {
            let text = format!("ERR Error running script {}, {:?}", call.name, other);
            commands::reply_error(shared, out, &text);
        }
        Err(e) => {
            let text = format!(
                "ERR Error running script {}, {}",
                call.name,
                root_message(&e)
            );
            commands::reply_error(shared, out, &text);
        }
    }
    running.end();
    // Lua's garbage collector: a step of 50 every 50 runs, as Redis's
    // evalGenericCommand (Lua's own allocation-driven steps do the rest).
    if GC_RUNS.fetch_add(1, Ordering::Relaxed) % GC_PERIOD == GC_PERIOD - 1 {
        let _ = lua.gc_step_kbytes(GC_PERIOD as i32);
    }
    shared
        .scripting
        .memory
        .note_vm(call.eval, lua.used_memory());
    state.txn.expect("the script's transaction comes back")
}

/// Scripts run since start, for the collector's period.
static GC_RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
const GC_PERIOD: u32 = 50;

/// `-<err> script: <name>, on <source>:<line>.` (luaCallFunction).
fn write_error(shared: &Shared, out: &mut ReplyWriter, error: &Table, name: &str) {
    let message = match error.raw_get::<Value>("err") {
        Ok(Value::String(s)) => s.to_string_lossy(),
        Ok(Value::Integer(i)) => i.to_string(),
        Ok(Value::Number(n)) => number::format_g(n, 14),
        _ => "ERR unknown error".to_string(),
    };
    let source = error.raw_get::<Option<String>>("source").ok().flatten();
    let line = error.raw_get::<Option<i64>>("line").ok().flatten();
    let text = match (source, line) {
        (Some(source), Some(line)) => format!("{message} script: {name}, on {source}:{line}."),
        _ => message,
    };
    if matches!(
        error.raw_get::<Value>("ignore_error_stats_update"),
        Ok(Value::Boolean(true))
    ) {
        out.error(&text);
    } else {
        commands::reply_error(shared, out, &text);
    }
}

/// The error handler scripts run under: the error as a table
/// `{err=..., source=..., line=...}`, `source` and `line` naming the
/// innermost line of the user's code on the stack.
pub fn error_handler(lua: &Lua, error: Value) -> mlua::Result<Table> {
    let table = match error {
        Value::Table(table) => table,
        Value::Error(ref e) if find_raised(e).is_some() => {
            let raised = find_raised(e).expect("checked");
            let table = lua.create_table()?;
            table.raw_set("err", raised.text.as_str())?;
            if raised.counted {
                table.raw_set("ignore_error_stats_update", true)?;
            }
            table
        }
        other => {
            let text = match &other {
                Value::Error(e) => root_message(e),
                Value::String(s) => s.to_string_lossy(),
                Value::Integer(i) => i.to_string(),
                Value::Number(n) => number::format_g(*n, 14),
                Value::Nil => "nil".to_string(),
                Value::Boolean(b) => b.to_string(),
                v => v.type_name().to_string(),
            };
            let table = lua.create_table()?;
            table.raw_set("err", format!("ERR {text}"))?;
            table
        }
    };
    for level in 1..64 {
        let Some(frame) = lua.inspect_stack(level) else {
            break;
        };
        let source = frame.source().source.map(|s| s.into_owned());
        if let Some(source) = source {
            if source == "@user_script" || source == "@user_function" {
                table.raw_set("source", source)?;
                table.raw_set("line", frame.curr_line())?;
                break;
            }
        }
    }
    Ok(table)
}

/// An error table `redis.call` raises, carried through mlua as an error
/// value (a Rust function cannot raise a Lua table); the error handler and
/// Redis's `pcall` turn it back into the table and its text.
#[derive(Debug)]
struct Raised {
    text: String,
    counted: bool,
}

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Raised {}

fn raise(error: &Value) -> mlua::Error {
    let (text, counted) = match error {
        Value::Table(table) => (
            table
                .raw_get::<Option<String>>("err")
                .ok()
                .flatten()
                .unwrap_or_default(),
            matches!(
                table.raw_get::<Value>("ignore_error_stats_update"),
                Ok(Value::Boolean(true))
            ),
        ),
        _ => ("ERR unknown error".to_string(), false),
    };
    mlua::Error::external(Raised { text, counted })
}

fn find_raised(error: &mlua::Error) -> Option<&Raised> {
    match error {
        mlua::Error::CallbackError { cause, .. } => find_raised(cause),
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<Raised>(),
        _ => None,
    }
}

/// The text of an error `redis.call` raised (for Redis's `pcall`).
pub fn raised_text(error: &mlua::Error) -> Option<String> {
    find_raised(error).map(|raised| raised.text.clone())
}

/// The message of an error raised in Rust (the kill hook's), without
/// mlua's wrapping.
fn root_message(error: &mlua::Error) -> String {
    match error {
        mlua::Error::RuntimeError(message) => message.clone(),
        mlua::Error::CallbackError { cause, .. } => root_message(cause),
        other => other.to_string(),
    }
}

/// `(false, {err=...})` with Redis's code, for the hooks' errors.
fn failure(lua: &Lua, text: &str, counted: bool) -> mlua::Result<(bool, Value)> {
    let table = reply_to_lua::error_table(lua, text.as_bytes())?;
    if !counted {
        table.raw_set("ignore_error_stats_update", Value::Nil)?;
    }
    Ok((false, Value::Table(table)))
}

/// What a `redis.*` function returns to Lua: `(true, value)` or
/// `(false, {err=...})`.
type LuaOutcome = (bool, Value);

/// `redis.acl_check_cmd`'s command and arguments, read as `redis.call`'s
/// are (`stack_command`), or why not.
fn command_parts(args: &MultiValue) -> Result<OwnedArgs, &'static str> {
    if args.is_empty() {
        return Err(NO_ARGUMENTS);
    }
    let mut owned = OwnedArgs::with_capacity(args.len());
    for value in args.iter() {
        match value {
            Value::String(s) => push_arg(&mut owned, Arg::Bytes(&s.as_bytes()))?,
            Value::Integer(i) => push_arg(&mut owned, Arg::Integer(*i))?,
            Value::Number(n) => push_arg(&mut owned, Arg::Number(*n))?,
            _ => return Err(BAD_ARGUMENT),
        }
    }
    Ok(owned)
}

const NO_ARGUMENTS: &str = "Please specify at least one argument for this redis lib call";
const BAD_ARGUMENT: &str = "Lua redis lib command arguments must be strings or integers";

/// Appends one argument of a call as Redis writes it: a string as it is,
/// a number as `%.17g` (an integer as an integer); anything else refused.
fn push_arg(owned: &mut OwnedArgs, arg: Arg) -> Result<(), &'static str> {
    match arg {
        Arg::Bytes(bytes) => owned.push(bytes),
        Arg::Integer(i) => owned.push(i.to_string().as_bytes()),
        Arg::Number(n) => owned.push(number::format_g(n, 17).as_bytes()),
        Arg::Other => return Err(BAD_ARGUMENT),
    }
    Ok(())
}

/// Whether Redis refuses `spec` inside scripts (its `noscript` flag, per
/// subcommand for containers). MIGRATE too, in Engram: it waits on the
/// network, which a script holding the keyspace cannot.
fn refused_in_scripts(
    shared: &Shared,
    index: usize,
    spec: &CommandSpec,
    args: &crate::resp::Args,
) -> bool {
    if spec.name == "migrate" {
        return true;
    }
    if shared
        .scripting
        .deny_scripts_disabled
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return false;
    }
    commands::call_has(index, spec, args, "noscript")
}

fn may_replicate(spec: &CommandSpec) -> bool {
    // Redis 7.0's MAY_REPLICATE commands (COMMAND INFO does not show the
    // flag); EVAL, EVALSHA and FCALL cannot be called from a script.
    matches!(spec.name, "publish" | "spublish" | "pfcount")
}

/// Whether an XREAD or XREADGROUP call has BLOCK among its options (the
/// words before STREAMS).
fn blocks(args: &crate::resp::Args) -> bool {
    (1..args.len())
        .map(|i| args.get(i))
        .take_while(|a| !a.eq_ignore_ascii_case(b"streams"))
        .any(|a| a.eq_ignore_ascii_case(b"block"))
}

/// `redis.call` / `redis.pcall`: runs the command against the run's
/// transaction and answers with its reply, or with a refusal.
fn redis_call(st: &mut CallState, command: &OwnedArgs, answer: &mut dyn FnMut(Outcome<'_>)) {
    let args = command.args();
    let shared = st.shared;
    let refuse = |answer: &mut dyn FnMut(Outcome<'_>), text: &str| {
        shared.stats.commands.error_reply(text);
        answer(Outcome::Failure {
            line: format!("-{text}").as_bytes(),
            counted: true,
        })
    };
    let Some((index, spec)) = commands::lookup(args.get(0)) else {
        return refuse(answer, "ERR Unknown Redis command called from script");
    };
    // From here a refusal counts as the command's rejected call (INFO
    // commandstats), as Redis's scriptCall counts it.
    let refuse = |answer: &mut dyn FnMut(Outcome<'_>), text: &str| {
        shared.stats.commands.rejected(index, &args);
        refuse(answer, text)
    };
    if !spec.arity_ok(args.len()) {
        return refuse(
            answer,
            "ERR Wrong number of args calling Redis command from script",
        );
    }
    if refused_in_scripts(shared, index, spec, &args) {
        return refuse(answer, "ERR This Redis command is not allowed from script");
    }
    if matches!(spec.name, "xread" | "xreadgroup") && blocks(&args) {
        // A script cannot wait: Redis refuses BLOCK outright.
        return refuse(
            answer,
            &format!(
                "ERR {} command is not allowed with BLOCK option from scripts",
                String::from_utf8_lossy(args.get(0))
            ),
        );
    }
    let rules = st.session.user.rules();
    if !rules.unrestricted {
        if let Err((denial, id)) = crate::acl::check(&rules, index, spec, &args) {
            commands::record_acl_denial(
                shared,
                st.session,
                denial,
                id,
                &args,
                crate::acl::Context::Lua,
            );
            return refuse(
                answer,
                &format!(
                    "ERR The user executing the script {}",
                    denial.script_reason()
                ),
            );
        }
    }
    let writes = spec.is(commands::WRITE);
    if st.read_only && (writes || may_replicate(spec)) {
        return refuse(
            answer,
            "ERR Write commands are not allowed from read-only scripts.",
        );
    }
    // Not in a group's apply (see `Session::applying`).
    if !st.allow_oom
        && !st.wrote
        && !st.session.applying()
        && shared.memory_limit.is_set()
        && commands::call_has(index, spec, &args, "denyoom")
        && shared
            .memory_limit
            .over(|| crate::maxmemory::usage(st.keyspace).used())
    {
        return refuse(answer, crate::maxmemory::OOM);
    }
    if st.session.applying() {
        // Every member runs the script: a write that follows a reply of
        // this member's own could be made on some members only (Redis
        // refused the same before it replicated scripts by their
        // effects).
        if writes && st.saw_member_reply {
            return refuse(answer, AFTER_MEMBER_REPLY);
        }
        st.saw_member_reply |= replies_per_member(spec.name);
    }
    if writes {
        st.wrote = true;
        shared.scripting.running.set_wrote();
    }
    st.scratch.buf.clear();
    st.scratch.set_resp3(st.resp3);
    let txn = st.txn.take();
    st.txn = commands::run(
        shared,
        st.keyspace,
        st.session,
        &mut st.scratch,
        txn,
        index,
        args,
    );
    crate::monitor::feed_from_script(shared, st.session, args);
    if shared.tracking.active() {
        // As Redis's `call`: a read-only command in a script makes the
        // caller track the keys the script declared.
        if spec.is(crate::commands::READONLY) {
            crate::tracking::remember(shared, st.session, st.declared);
        }
    }
    answer(Outcome::Reply(&st.scratch.buf));
}

/// A call's command and arguments off Lua's stack (`push_arg`), or the
/// refusal when none is given. Copied once, into one buffer.
fn stack_command(stack: &StackArgs) -> Result<OwnedArgs, &'static str> {
    if stack.is_empty() {
        return Err(NO_ARGUMENTS);
    }
    let mut owned = OwnedArgs::with_capacity(stack.len());
    for i in 0..stack.len() {
        push_arg(&mut owned, stack.get(i))?;
    }
    Ok(owned)
}

fn set_resp(lua: &Lua, state: &mut CallState, args: MultiValue) -> mlua::Result<(bool, Value)> {
    if args.len() != 1 {
        return failure(lua, "redis.setresp() requires one argument.", false);
    }
    let version = match &args[0] {
        Value::Integer(i) => *i as f64,
        Value::Number(n) => *n,
        Value::String(s) => s
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0.0),
        _ => 0.0,
    } as i64;
    if version != 2 && version != 3 {
        return failure(lua, "RESP version must be 2 or 3.", false);
    }
    state.resp3 = version == 3;
    Ok((true, Value::Nil))
}

fn set_repl(lua: &Lua, args: MultiValue) -> mlua::Result<(bool, Value)> {
    if args.len() != 1 {
        return failure(lua, "redis.set_repl() requires two arguments.", false);
    }
    let flags = match &args[0] {
        Value::Integer(i) => *i,
        Value::Number(n) => *n as i64,
        _ => 0,
    };
    if flags & !3 != 0 {
        return failure(
            lua,
            "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
            false,
        );
    }
    // Engram has no replication yet: every effect is recorded whole.
    Ok((true, Value::Nil))
}

/// `redis.acl_check_cmd`: whether the calling user may run the command
/// with these arguments (an unknown command is an error).
fn acl_check_cmd(
    lua: &Lua,
    state: &mut CallState,
    args: MultiValue,
) -> mlua::Result<(bool, Value)> {
    // Refusals are raised where the script called it (Redis's luaError),
    // so the reply names the script and line.
    let refuse = |why: &str| -> mlua::Result<(bool, Value)> {
        let (_, error) = failure(lua, why, false)?;
        Err(raise(&error))
    };
    let owned = match command_parts(&args) {
        Ok(owned) => owned,
        Err(why) => return refuse(why),
    };
    let Some((index, spec)) = commands::lookup(owned.args().get(0)) else {
        return refuse("Invalid command passed to redis.acl_check_cmd()");
    };
    let rules = state.session.user.rules();
    let allowed = crate::acl::check(&rules, index, spec, &owned.args()).is_ok();
    Ok((true, Value::Boolean(allowed)))
}
