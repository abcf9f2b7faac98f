//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT (LOAD, EXISTS, FLUSH,
//! KILL, DEBUG, HELP). The Lua side is `crate::scripting`; here are the
//! arguments, the script cache's replies and the order a run takes its
//! locks in: the keyspace (excluded whole, or EXEC's transaction), then
//! the Lua state.

use std::borrow::Cow;

use super::{
    err, int_arg, is, lowercase, unknown_subcommand, wrong_sub_arity, CmdError, CmdResult,
    CommandSpec, Ctx, Group, WHOLE_KEYSPACE,
};
use crate::keyspace::{PrefetchStep, Txn};
use crate::resp::{Args, OwnedArgs};
use crate::scripting::run::{run_script, Call};
use crate::scripting::running::KillOutcome;
use crate::scripting::{flags, sha1_hex, EvalEngine, Script, ScriptFlags};

pub const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
pub const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
pub const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands \
     against the dataset. You can either wait the script termination or kill the server in a \
     hard way using the SHUTDOWN NOSAVE command.";
/// SCRIPT KILL or FUNCTION KILL of a script a group's member runs for a
/// committed entry (Engram's; Redis's replicas run no scripts).
pub const UNKILLABLE_REPLICATED: &str = "UNKILLABLE The script runs a committed entry of the \
     replicated group, which every member must run whole. You can either wait the script \
     termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";
const NOTBUSY: &str = "NOTBUSY No scripts in execution right now.";

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("scripting");
    let none = (0, 0, 0);
    vec![
        g.command(
            "eval",
            -3,
            WHOLE_KEYSPACE,
            none,
            eval,
            "Executes a server-side Lua script.",
        ),
        g.command(
            "evalsha",
            -3,
            WHOLE_KEYSPACE,
            none,
            evalsha,
            "Executes a server-side Lua script by SHA1 digest.",
        ),
        g.command(
            "eval_ro",
            -3,
            WHOLE_KEYSPACE,
            none,
            eval_ro,
            "Executes a read-only server-side Lua script.",
        ),
        g.command(
            "evalsha_ro",
            -3,
            WHOLE_KEYSPACE,
            none,
            evalsha_ro,
            "Executes a read-only server-side Lua script by SHA1 digest.",
        ),
        g.keyless(
            "script",
            -2,
            0,
            script,
            "Manages the server-side Lua script cache.",
        ),
    ]
}

fn eval(ctx: &mut Ctx, args: Args) -> CmdResult {
    eval_generic(ctx, args, false, false)
}

fn evalsha(ctx: &mut Ctx, args: Args) -> CmdResult {
    eval_generic(ctx, args, true, false)
}

fn eval_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    eval_generic(ctx, args, false, true)
}

fn evalsha_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    eval_generic(ctx, args, true, true)
}

/// A script call's KEYS and ARGV.
pub type KeysAndArgs<'a> = (Vec<&'a [u8]>, Vec<&'a [u8]>);

/// The keys and arguments of EVAL/FCALL after the numkeys at `args[2]`.
pub fn keys_and_args<'a>(args: &Args<'a>) -> Result<KeysAndArgs<'a>, CmdError> {
    let numkeys = int_arg(args.get(2))?;
    if numkeys > (args.len() - 3) as i64 {
        return Err(err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    if numkeys < 0 {
        return Err(err("ERR Number of keys can't be negative"));
    }
    let split = 3 + numkeys as usize;
    Ok((
        args.iter().skip(3).take(numkeys as usize).collect(),
        args.iter().skip(split).collect(),
    ))
}

/// The cached script named `sha`, compiling `body` first if it is new;
/// the error is the reply.
fn load_script(
    shared: &crate::shared::Shared,
    eval: &mut EvalEngine,
    body: &[u8],
) -> Result<String, CmdError> {
    let sha = sha1_hex(body);
    if eval.scripts.contains_key(&sha) {
        return Ok(sha);
    }
    let (flags, shebang_len) = flags::parse_shebang(body).map_err(err)?;
    let function = eval
        .engine
        .compile(&body[shebang_len..], "@user_script")
        .map_err(|message| {
            err(format!(
                "ERR Error compiling script (new function): {message}"
            ))
        })?;
    eval.scripts.insert(
        sha.clone(),
        Script {
            flags,
            function,
            body: body.into(),
        },
    );
    shared.scripting.note_eval(eval, sha.len() + body.len());
    Ok(sha)
}

/// Refusals before a script runs, by its flags (Redis's
/// scriptPrepareForRun and the OOM check of processCommand).
pub fn check_flags(ctx: &Ctx, flags: ScriptFlags, ro_command: bool) -> CmdResult {
    if !flags.compat && !flags.no_writes && ro_command {
        return Err(err(
            "ERR Can not execute a script with write flag using *_ro command.",
        ));
    }
    let shared = ctx.shared;
    // A script without a shebang is checked command by command instead
    // (Redis's compatibility mode), so a read-only one still runs. A
    // group's apply checks no memory: the leader refused growth before
    // proposing, and a member's own memory must not split the state.
    if !(flags.compat || flags.allow_oom || flags.no_writes || ctx.session.applying())
        && shared.memory_limit.is_set()
        && shared
            .memory_limit
            .over(|| crate::maxmemory::usage(ctx.ks()).used())
    {
        return Err(err(crate::maxmemory::OOM));
    }
    Ok(())
}

/// How a script runs on the network worker that called it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// On the worker itself: the common case, a short script. If it runs
    /// long, its worker's other tasks are handed to a fresh thread, which
    /// (with the other network loops) answers BUSY and SCRIPT KILL.
    Inline,
    /// With the worker's other tasks handed to a fresh thread first
    /// (`run_blocking`): when the worker may have to wait for the key
    /// groups (another script holds them), inside EXEC, or off a
    /// multi-threaded runtime (nobody else would answer BUSY or SCRIPT KILL).
    Handed,
}

impl Placement {
    pub fn run<R>(self, work: impl FnOnce() -> R) -> R {
        match self {
            Placement::Inline => work(),
            Placement::Handed => super::run_blocking(work),
        }
    }
}

/// How long a network worker about to run a script inline waits for the
/// writers inside the keyspace to leave before it hands its tasks on and
/// waits on another thread: a write takes microseconds, unless it waits
/// for a sync under `always`.
const INLINE_PATIENCE: std::time::Duration = std::time::Duration::from_micros(200);

/// The transaction a script runs in: EXEC's (which excludes the keyspace
/// for a queue with a script), or the keyspace excluded now. Where the
/// groups are free at once (no other script runs) the script runs inline;
/// a worker that would wait for them hands its other tasks on first, so
/// that two scripts cannot hold up every worker between them. Boxed: it
/// moves from here into the script's state and back out to the commit, and
/// a `Txn` is large (five copies of it were ~530 of an EVALSHA's
/// instructions).
pub fn script_txn<'s>(ctx: &mut Ctx<'s, '_>) -> (Box<Txn<'s>>, bool, Placement) {
    if let Some(txn) = ctx.exec.take() {
        return (txn, true, Placement::Handed);
    }
    let keyspace = ctx.ks();
    // A script that runs long hands this worker's other clients to a
    // fresh thread (`run::hand_off_if_long`).
    if super::can_hand_off() {
        if let Some(txn) = keyspace.try_lock_all(true, INLINE_PATIENCE) {
            return (Box::new(txn), false, Placement::Inline);
        }
    }
    let txn = super::run_blocking(|| Box::new(keyspace.lock_all(true)));
    (txn, false, Placement::Handed)
}

/// Hands the script's transaction back to EXEC, or commits it (one
/// atomic, durable batch of the script's effects).
pub fn finish_txn<'s>(
    ctx: &mut Ctx<'s, '_>,
    txn: Box<Txn<'s>>,
    from_exec: bool,
    reply_start: usize,
) -> CmdResult {
    if from_exec {
        ctx.exec = Some(txn);
        return Ok(());
    }
    match txn.commit() {
        Ok(wrote) => {
            ctx.session.wrote |= wrote;
            Ok(())
        }
        Err(e) => {
            // Nothing the reply claims was applied.
            ctx.out.buf.truncate(reply_start);
            ctx.session.wrote = true;
            Err(CmdError::from(e))
        }
    }
}

/// EVALSHA's arguments as EVAL's, with the script's text for its SHA-1,
/// if this node has it cached. A group's leader proposes EVALSHA so:
/// each member's cache is its own (lost at a restart, for one), and an
/// entry must not run on one member and fail with NOSCRIPT on another.
pub fn evalsha_as_eval(shared: &crate::shared::Shared, args: Args) -> Option<OwnedArgs> {
    let body = {
        let eval = shared.scripting.eval.lock();
        eval.scripts.get(&lowercase(args.get(1)))?.body.clone()
    };
    let mut parts: Vec<&[u8]> = vec![b"eval", &body];
    parts.extend(args.iter().skip(2));
    Some(OwnedArgs::from_slices(&parts))
}

fn eval_generic(ctx: &mut Ctx, args: Args, by_sha: bool, ro: bool) -> CmdResult {
    // A group's apply never looks in this member's cache (the leader sent
    // what it had as EVAL: `evalsha_as_eval`).
    if by_sha && ctx.session.applying() {
        return Err(err(NOSCRIPT));
    }
    // Before it runs, so that the commands it calls come after it.
    crate::monitor::feed_script_command(ctx.shared, ctx.session, args);
    let (keys, argv) = keys_and_args(&args)?;
    // The script will likely reach its keys first, at random places of
    // the index: their lines start loading now, a step at a time (each
    // line is found through the one before), while the script is found
    // and its run is set up.
    let warm = KeysWarm::new(ctx, &keys);
    warm.step(ctx, PrefetchStep::Lock);
    let shared = ctx.shared;
    let body = args.get(1);
    // EVALSHA's SHA lowered on the stack (a SHA is 40 ASCII characters;
    // anything else names no script).
    let mut lowered = [0u8; 40];
    let (sha, flags) = {
        let mut eval = shared.scripting.eval.lock();
        let sha: Cow<str> = if by_sha {
            if body.len() != lowered.len() {
                return Err(err(NOSCRIPT));
            }
            for (low, byte) in lowered.iter_mut().zip(body) {
                *low = byte.to_ascii_lowercase();
            }
            Cow::Borrowed(std::str::from_utf8(&lowered).map_err(|_| err(NOSCRIPT))?)
        } else {
            Cow::Owned(load_script(shared, &mut eval, body)?)
        };
        match eval.scripts.get(sha.as_ref()) {
            Some(script) => (sha, script.flags),
            None => return Err(err(NOSCRIPT)),
        }
    };
    check_flags(ctx, flags, ro)?;
    let read_only = ro || (!flags.compat && flags.no_writes);
    let mut call = Call {
        name: sha.as_ref(),
        flags,
        eval: true,
        read_only,
        keys,
        args: argv,
        command: Vec::new(),
        warm: warm.hashes(),
        inline: false,
    };
    let (txn, from_exec, placement) = script_txn(ctx);
    // The record's step comes last, in `run_script`.
    warm.step(ctx, PrefetchStep::Bucket);
    call.inline = placement == super::scripting::Placement::Inline;
    let reply_start = ctx.out.len();
    let txn = {
        let mut eval = shared.scripting.eval.lock();
        // SCRIPT FLUSH may have come in between.
        if !eval.scripts.contains_key(sha.as_ref()) {
            if by_sha {
                let result = finish_txn(ctx, txn, from_exec, reply_start);
                return result.and(Err(err(NOSCRIPT)));
            }
            if let Err(e) = load_script(shared, &mut eval, body) {
                let result = finish_txn(ctx, txn, from_exec, reply_start);
                return result.and(Err(e));
            }
        }
        let eval = &*eval;
        let function = &eval
            .scripts
            .get(sha.as_ref())
            .expect("found or loaded above")
            .function;
        let keyspace = ctx.keyspace;
        let (session, out) = (&mut *ctx.session, &mut *ctx.out);
        placement.run(|| {
            run_script(
                shared,
                keyspace,
                session,
                out,
                &eval.engine,
                function,
                &call,
                txn,
            )
        })
    };
    finish_txn(ctx, txn, from_exec, reply_start)
}

/// The engine's hashes of a script's first keys, for warming their index
/// lines in the steps `PrefetchStep` orders (each step's line is found
/// through the one before, so the steps go a little apart).
pub(super) struct KeysWarm {
    hashes: [u64; KeysWarm::MOST],
    count: usize,
}

impl KeysWarm {
    /// A script's first few keys are the ones it likely reads at once.
    const MOST: usize = 4;

    pub(super) fn new(ctx: &Ctx, keys: &[&[u8]]) -> KeysWarm {
        let mut warm = KeysWarm {
            hashes: [0; KeysWarm::MOST],
            count: 0,
        };
        for key in keys.iter().take(KeysWarm::MOST) {
            if let Some(hash) = ctx.keyspace.prefetch_hash(ctx.session.db, key) {
                warm.hashes[warm.count] = hash;
                warm.count += 1;
            }
        }
        warm
    }

    pub(super) fn hashes(&self) -> &[u64] {
        &self.hashes[..self.count]
    }

    pub(super) fn step(&self, ctx: &Ctx, step: PrefetchStep) {
        for &hash in self.hashes() {
            ctx.keyspace.prefetch(hash, step);
        }
    }
}

fn script(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    let shared = ctx.shared;
    match lowercase(sub).as_str() {
        "load" => {
            if args.len() != 3 {
                return Err(wrong_sub_arity("script", sub));
            }
            let sha = load_script(shared, &mut shared.scripting.eval.lock(), args.get(2))?;
            ctx.out.bulk(sha.as_bytes());
        }
        "exists" => {
            if args.len() < 3 {
                return Err(wrong_sub_arity("script", sub));
            }
            let eval = shared.scripting.eval.lock();
            ctx.out.array(args.len() - 2);
            for sha in args.iter().skip(2) {
                ctx.out
                    .int(eval.scripts.contains_key(&lowercase(sha)) as i64);
            }
        }
        "flush" => {
            match args.len() {
                2 => {}
                3 if is(args.get(2), "async") || is(args.get(2), "sync") => {}
                3 => return Err(err("ERR SCRIPT FLUSH only support SYNC|ASYNC option")),
                _ => return Err(wrong_sub_arity("script", sub)),
            }
            shared.scripting.flush_eval();
            ctx.out.ok();
        }
        "kill" => {
            if args.len() != 2 {
                return Err(wrong_sub_arity("script", sub));
            }
            kill_reply(ctx, true)?;
        }
        "debug" => {
            if args.len() != 3 {
                return Err(wrong_sub_arity("script", sub));
            }
            if is(args.get(2), "no") {
                ctx.out.ok();
            } else if is(args.get(2), "yes") || is(args.get(2), "sync") {
                return Err(err(
                    "ERR SCRIPT DEBUG is not supported by Engram: the Lua debugger is not built in",
                ));
            } else {
                return Err(err("ERR Use SCRIPT DEBUG YES/SYNC/NO"));
            }
        }
        "help" => {
            let lines = [
                "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DEBUG (YES|SYNC|NO)",
                "    Set the debug mode for subsequent scripts executed.",
                "EXISTS <sha1> [<sha1> ...]",
                "    Return information about the existence of the scripts in the script cache.",
                "FLUSH [ASYNC|SYNC]",
                "    Flush the Lua scripts cache. Very dangerous on replicas.",
                "    When called without the optional mode argument, the behavior is determined by the",
                "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
                "    * ASYNC: Asynchronously flush the scripts cache.",
                "    * SYNC: Synchronously flush the scripts cache.",
                "KILL",
                "    Kill the currently executing Lua script.",
                "LOAD <script>",
                "    Load a script into the scripts cache without executing it.",
                "HELP",
                "    Prints this help.",
            ];
            ctx.out.array(lines.len());
            for line in lines {
                ctx.out.simple(line);
            }
        }
        _ => return Err(unknown_subcommand("script", sub)),
    }
    Ok(())
}

/// SCRIPT KILL (`eval`) or FUNCTION KILL.
pub fn kill_reply(ctx: &mut Ctx, eval: bool) -> CmdResult {
    match ctx.shared.scripting.running.kill(eval) {
        KillOutcome::Killed => {
            ctx.out.ok();
            Ok(())
        }
        KillOutcome::NotBusy => Err(err(NOTBUSY)),
        KillOutcome::Unkillable => Err(err(UNKILLABLE)),
        KillOutcome::Replicated => Err(err(UNKILLABLE_REPLICATED)),
        KillOutcome::WrongKind if eval => Err(err(BUSY_FUNCTION)),
        KillOutcome::WrongKind => Err(err(BUSY_EVAL)),
    }
}

/// Whether `spec` may run while a script is past `busy-reply-threshold`
/// (Redis's `allow_busy` flag, per subcommand for containers).
pub fn allowed_while_busy(spec: &CommandSpec, args: &Args) -> bool {
    super::descriptions::call_has(spec.name, args, "allow_busy")
}

/// The BUSY reply for `spec` if a script has run past the threshold.
pub fn busy_refusal(
    shared: &crate::shared::Shared,
    spec: &CommandSpec,
    args: &Args,
) -> Option<String> {
    let scripting = &shared.scripting;
    let elapsed = scripting.running.elapsed_ms()?;
    let threshold = scripting.busy_threshold_ms();
    if threshold == 0 || elapsed < threshold || allowed_while_busy(spec, args) {
        return None;
    }
    Some(
        if scripting.running.is_eval() {
            BUSY_EVAL
        } else {
            BUSY_FUNCTION
        }
        .to_string(),
    )
}
