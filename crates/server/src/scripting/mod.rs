//! Lua scripting as Redis 7.0 does it: EVAL's script cache and FUNCTION's
//! libraries over Lua 5.1 (`mlua`, built from source).
//!
//! | module | what |
//! |---|---|
//! | `sandbox` | a Lua state as Redis prepares one: the libraries, read-only globals and library tables, Redis's `pcall`, `math.random` |
//! | `redis_api` | the `redis` table's Rust helpers: `error_reply`, `status_reply`, `sha1hex`, `log`, `setresp`, `set_repl`... (`call` and `pcall` are C functions of `engram_lua_calls`, which read their arguments off Lua's stack and push the command's reply onto it) |
//! | `reply_to_lua`, `lua_to_reply` | Redis's error tables for the hooks; a script's result into the caller's reply |
//! | `flags` | the `#!lua` shebang and the script flags |
//! | `run` | one script run: the keyspace held, `redis.call` through the command table, the kill hook, the error reply |
//! | `running` | what other clients see of the script running (BUSY, SCRIPT KILL) |
//! | `cjson`, `bit` | the libraries Redis scripts use most, written over mlua (`struct` and `cmsgpack` are not here yet) |
//! | `number` | C's `%.*g` (arguments `%.17g`, cjson `%.14g`) |
//! | `library` | FUNCTION's libraries: loading (`redis.register_function`), the set, its persistence |
//!
//! ## Atomicity and durability
//!
//! A script runs as one transaction, the way EXEC runs its queue: it
//! excludes every other writer from the keyspace (`Keyspace::lock_all(true)`,
//! since a script may touch keys it did not declare) and each `redis.call` runs through the same
//! `commands::run` EXEC uses, against that one atomic `Txn`. Its writes are
//! committed once, when the script ends, as one batch: one durable record
//! of the effects (never the script text), so a crash in the middle of a
//! script leaves none of them, and recovery replays effects
//! deterministically. A script that fails after writing keeps its writes
//! (Redis does not roll scripts back): they are committed too.
//!
//! ## Concurrency
//!
//! One Lua state runs EVAL scripts and another FUNCTION's libraries, each
//! behind a mutex. Lock order: the keyspace's exclusion → the Lua state's
//! mutex (EXEC holds the keyspace before an EVAL in its queue asks for the
//! state, so every script takes it first). While a script runs, `running` says so
//! without any lock: other clients' commands wait for it (asynchronously,
//! on their own tasks) and, past `busy-reply-threshold`, get BUSY.

mod bit;
mod cjson;
mod cmsgpack;
pub mod flags;
pub mod library;
mod lua_to_reply;
mod number;
mod redis_api;
mod reply_to_lua;
pub mod run;
pub mod running;
mod sandbox;

use hashbrown::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use mlua::Function;
use parking_lot::Mutex;

pub use flags::ScriptFlags;
pub use running::Running;
pub use sandbox::Engine;

/// A script EVAL compiled: its flags and Lua function, and its text (a
/// group's leader proposes EVALSHA as EVAL of it: `group::queue`).
pub struct Script {
    pub flags: ScriptFlags,
    pub function: Function,
    pub body: std::sync::Arc<[u8]>,
}

/// EVAL's Lua state and the scripts it has compiled, by SHA-1.
pub struct EvalEngine {
    pub engine: Engine,
    pub scripts: HashMap<String, Script>,
}

/// Everything scripting keeps for the server (in `Shared`).
pub struct Scripting {
    pub eval: Mutex<EvalEngine>,
    pub functions: Mutex<library::FunctionsEngine>,
    pub running: Arc<Running>,
    /// `busy-reply-threshold` (`lua-time-limit`), ms; 0: never BUSY.
    pub busy_threshold_ms: AtomicU64,
    /// How many libraries and functions `functions` holds, for FUNCTION
    /// STATS while a function runs (and holds `functions`).
    pub libraries_count: AtomicUsize,
    pub functions_count: AtomicUsize,
    /// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may call the commands Redis
    /// refuses them (`noscript`), for Redis's own tests of DEBUG PROTOCOL.
    pub deny_scripts_disabled: AtomicBool,
    /// Taken (asynchronously, first come first served) by a connection
    /// before it runs a script command: scripts run one at a time anyway
    /// (each excludes every other writer), and queueing here instead of on the
    /// key groups' locks keeps the waiting off the worker threads and wakes
    /// one waiter per script, not all of them (`connection`).
    pub gate: tokio::sync::Mutex<()>,
    /// Scripts EVAL and SCRIPT LOAD cached (INFO's
    /// `number_of_cached_scripts`, readable while a script holds `eval`).
    pub cached_scripts: AtomicUsize,
    /// INFO memory's scripting lines, readable while a script runs.
    pub memory: ScriptMemory,
}

/// What scripting holds in memory, as INFO memory reports it (Redis's
/// `used_memory_vm_eval`, `used_memory_scripts_eval` and the rest): kept
/// current by whoever changes it, since a running script holds the engine
/// INFO would otherwise have to wait for.
#[derive(Default)]
pub struct ScriptMemory {
    /// Each Lua state's heap, as its allocator counts it (after each run,
    /// load and flush).
    pub eval_vm: AtomicUsize,
    pub functions_vm: AtomicUsize,
    /// The cached scripts' bodies and names; the libraries' code.
    pub eval_scripts: AtomicUsize,
    pub functions_code: AtomicUsize,
}

impl ScriptMemory {
    /// A run on `eval`'s state (else FUNCTION's) left its heap at `bytes`.
    pub fn note_vm(&self, eval: bool, bytes: usize) {
        let vm = if eval {
            &self.eval_vm
        } else {
            &self.functions_vm
        };
        vm.store(bytes, Ordering::Relaxed);
    }
}

impl Scripting {
    /// Whether a script command may write, for CLIENT PAUSE WRITE (Redis's
    /// flags of EVAL and FCALL come from the script's): the _RO variants
    /// and scripts flagged `no-writes` may not; a script or function not
    /// known, or whose engine is busy running one, is taken to write.
    pub fn call_may_write(&self, name: &str, args: &crate::resp::Args) -> bool {
        let no_writes = match name {
            "eval_ro" | "evalsha_ro" | "fcall_ro" => return false,
            "eval" => flags::parse_shebang(args.get(1))
                .is_ok_and(|(flags, _)| !flags.compat && flags.no_writes),
            "evalsha" => {
                let sha = String::from_utf8_lossy(args.get(1)).to_ascii_lowercase();
                self.eval.try_lock().is_some_and(|eval| {
                    eval.scripts
                        .get(&sha)
                        .is_some_and(|s| !s.flags.compat && s.flags.no_writes)
                })
            }
            "fcall" => {
                let function = String::from_utf8_lossy(args.get(1));
                self.functions.try_lock().is_some_and(|functions| {
                    functions
                        .function(&function)
                        .is_some_and(|f| f.flags.no_writes)
                })
            }
            _ => return true,
        };
        !no_writes
    }

    /// Notes the library set's size (`libraries_count`) and memory, after
    /// a change.
    pub fn note_counts(&self, engine: &library::FunctionsEngine) {
        self.libraries_count
            .store(engine.libraries.len(), Ordering::Relaxed);
        self.functions_count
            .store(engine.functions.len(), Ordering::Relaxed);
        let code = engine.libraries.values().map(|l| l.code.len()).sum();
        self.memory.functions_code.store(code, Ordering::Relaxed);
        self.memory.note_vm(false, engine.engine.lua.used_memory());
    }

    /// Notes EVAL's script cache (`cached_scripts`) and memory after
    /// `added` bytes of scripts (names and bodies) joined it. The cache's
    /// bytes are a running total: summing every script at each load would
    /// make a new script cost the whole cache.
    pub fn note_eval(&self, eval: &EvalEngine, added: usize) {
        self.cached_scripts
            .store(eval.scripts.len(), Ordering::Relaxed);
        self.memory.eval_scripts.fetch_add(added, Ordering::Relaxed);
        self.memory.note_vm(true, eval.engine.lua.used_memory());
    }
}

impl Default for Scripting {
    fn default() -> Scripting {
        let scripting = Scripting {
            eval: Mutex::new(EvalEngine {
                engine: Engine::new(sandbox::Mode::Eval).expect("the Lua state starts"),
                scripts: HashMap::new(),
            }),
            functions: Mutex::new(library::FunctionsEngine::new()),
            running: Arc::default(),
            busy_threshold_ms: AtomicU64::new(5000),
            libraries_count: AtomicUsize::new(0),
            deny_scripts_disabled: AtomicBool::new(false),
            functions_count: AtomicUsize::new(0),
            gate: tokio::sync::Mutex::new(()),
            cached_scripts: AtomicUsize::new(0),
            memory: ScriptMemory::default(),
        };
        scripting.note_eval(&scripting.eval.lock(), 0);
        scripting.note_counts(&scripting.functions.lock());
        scripting
    }
}

impl Scripting {
    pub fn busy_threshold_ms(&self) -> u64 {
        self.busy_threshold_ms.load(Ordering::Relaxed)
    }

    /// SCRIPT FLUSH: a fresh Lua state, no scripts.
    pub fn flush_eval(&self) {
        let mut eval = self.eval.lock();
        eval.scripts.clear();
        eval.engine = Engine::new(sandbox::Mode::Eval).expect("the Lua state starts");
        self.memory.eval_scripts.store(0, Ordering::Relaxed);
        self.note_eval(&eval, 0);
    }
}

/// The SHA-1 of `body` in lowercase hex (script names, `redis.sha1hex`).
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}
