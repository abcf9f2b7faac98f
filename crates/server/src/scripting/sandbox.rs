//! A Lua state prepared as Redis prepares its own: the base, table, string
//! and math libraries (no os, io, package or debug), cjson, bit, struct and
//! cmsgpack, the `redis` table, read-only globals and library tables, and
//! Redis's `pcall`. The Lua side is `sandbox.lua`; this module starts it
//! and keeps what it returns.

use mlua::{Function, Lua, LuaOptions, StdLib, Table};

/// Which of Redis's two Lua states this is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// EVAL's: KEYS and ARGV are globals, `redis.replicate_commands` exists.
    Eval,
    /// FUNCTION's: libraries load with only `redis.register_function`.
    Function,
}

pub struct Engine {
    pub lua: Lua,
    /// The globals scripts read (the real globals table is an empty view
    /// of this one).
    pub globals: Table,
    /// What FUNCTION LOAD's code sees as globals.
    pub load_globals: Table,
    /// The hook FUNCTION LOAD's `redis.register_function` calls through
    /// (`register_function`, set for a load) and `global_view`, the
    /// globals table's metatable (its `__index` is the table global names
    /// are read from).
    pub hooks: Table,
    /// `run(f, handler, keys, argv)`: `xpcall` of `f(keys, argv)`.
    pub runner: Function,
    /// `run_with(f, handler, set_globals)`: `xpcall` of `f(KEYS, ARGV)`,
    /// the two tables from `engram_lua_calls::with_tables` around the
    /// call, with `run::run_functions`' `redis.call` and `redis.pcall` in
    /// place for the run, and KEYS and ARGV as globals if asked (a script
    /// run).
    pub run_with: Function,
    /// The error handler: an error table with where the script failed.
    pub handler: Function,
    /// The real `redis` table: a run puts its `call` and `pcall` there (C
    /// functions, so `return redis.call(...)` keeps the script's frame on
    /// the stack for the error's line, as Redis's C function does).
    pub redis_api: Table,
    /// `redis.call` and `redis.pcall` outside a run (they raise Redis's
    /// error).
    pub outside_call: Function,
    pub outside_pcall: Function,
    /// The runs' instruction hook is in place (`run::run_script` sets it
    /// once; a kill's hook or a library load's replaces it).
    pub run_hook_set: std::sync::atomic::AtomicBool,
}

const SANDBOX: &str = include_str!("sandbox.lua");

impl Engine {
    pub fn new(mode: Mode) -> mlua::Result<Engine> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        let hooks = lua.create_table()?;
        let rust = super::redis_api::helpers(&lua)?;
        let run = super::run::run_functions(&lua)?;
        let (globals, load_globals, runner, redis_api, run_with): (
            Table,
            Table,
            Function,
            Table,
            Function,
        ) = lua.load(SANDBOX).set_name("=sandbox").call((
            hooks.clone(),
            rust,
            mode == Mode::Eval,
            run.call,
            run.pcall,
            run.tables,
            run.setresp,
            run.set_repl,
            run.acl_check_cmd,
        ))?;
        let handler = lua.create_function(super::run::error_handler)?;
        // What setting up left behind goes now: INFO's `used_memory_lua`
        // of a fresh state is its live heap, as Redis's is.
        lua.gc_collect()?;
        let outside_call = redis_api.raw_get("call")?;
        let outside_pcall = redis_api.raw_get("pcall")?;
        Ok(Engine {
            redis_api,
            outside_call,
            outside_pcall,
            run_hook_set: std::sync::atomic::AtomicBool::new(false),
            lua,
            globals,
            load_globals,
            hooks,
            runner,
            run_with,
            handler,
        })
    }

    /// Compiles `code` as a chunk named `name` (`@user_script`,
    /// `@user_function`); the error is Lua's message.
    pub fn compile(&self, code: &[u8], name: &str) -> Result<Function, String> {
        self.lua
            .load(code)
            .set_name(name)
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .map_err(|e| match e {
                mlua::Error::SyntaxError { message, .. } => message,
                other => other.to_string(),
            })
    }
}
