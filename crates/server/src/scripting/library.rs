//! FUNCTION's libraries: loading one (`#!lua name=...`, its code run once
//! with only `redis.register_function`, `log` and the version as globals),
//! the set of libraries and their functions, and the set as one
//! FUNCTION DUMP payload, which is also how it is persisted (the
//! keyspace's functions record, written when the set changes and loaded
//! at startup).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, HookTriggers, Lua, MultiValue, Table, Value, VmState};
use parking_lot::Mutex;

use super::sandbox::{Engine, Mode};
use super::ScriptFlags;

/// How long a library's code may run while it loads (Redis's 500 ms).
const LOAD_TIMEOUT: Duration = Duration::from_millis(500);
/// On a replicated group's member, how many Lua instructions a library's
/// code may run while it loads instead (about Redis's 500 ms on this
/// machine's cores): every member must load a library alike, and a
/// clock's limit would fail it on a slow or busy member only.
const LOAD_INSTRUCTIONS: u64 = 100_000_000;
/// The instruction hook's period while a library loads.
const LOAD_HOOK_EVERY: u32 = 100_000;

/// Set once this process is a group's member (`group::start`): loads are
/// limited by `LOAD_INSTRUCTIONS`.
static COUNTED_LOADS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a library's load has run too long, at the instruction hook's
/// `runs`-th call, `elapsed` after it began: by instructions when
/// `counted` (a group's member), by the clock otherwise.
fn load_over(counted: bool, runs: u64, elapsed: Duration) -> bool {
    if counted {
        runs * u64::from(LOAD_HOOK_EVERY) > LOAD_INSTRUCTIONS
    } else {
        elapsed > LOAD_TIMEOUT
    }
}

/// Library loads are limited by instructions, the same on every member,
/// not by time (a group's member).
pub fn count_load_instructions() {
    COUNTED_LOADS.store(true, std::sync::atomic::Ordering::Relaxed);
}

pub struct FunctionInfo {
    pub name: String,
    pub description: Option<String>,
    pub flags: ScriptFlags,
    pub function: Function,
}

pub struct Library {
    pub name: String,
    /// The code as loaded, shebang included (FUNCTION LIST WITHCODE, DUMP).
    pub code: Vec<u8>,
    pub functions: BTreeMap<String, FunctionInfo>,
}

pub struct FunctionsEngine {
    pub engine: Engine,
    pub libraries: BTreeMap<String, Library>,
    /// Function name in lowercase → its library's name.
    pub functions: HashMap<String, String>,
}

impl Default for FunctionsEngine {
    fn default() -> FunctionsEngine {
        FunctionsEngine::new()
    }
}

/// Letters, digits and underscores, at least one (Redis's
/// functionsVerifyName).
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

const BAD_NAME: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// The library name of `code` and where its Lua code starts (the line
/// feed ending the shebang), or Redis's error.
fn metadata(code: &[u8]) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".to_string());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid library metadata".to_string());
    };
    let line = String::from_utf8_lossy(&code[..end]);
    let mut parts = line.split_ascii_whitespace();
    let Some(first) = parts.next() else {
        return Err("ERR Invalid library metadata".to_string());
    };
    let engine = &first[2..];
    let mut name = None;
    for part in parts {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case("name=") {
            if name.is_some() {
                return Err(
                    "ERR Invalid metadata value, name argument was given multiple times"
                        .to_string(),
                );
            }
            // Redis splits the line as its config files (sdssplitargs):
            // `name="foo"` names `foo`.
            let value = &part[5..];
            let unquoted = ['"', '\'']
                .iter()
                .find_map(|&q| value.strip_prefix(q).and_then(|v| v.strip_suffix(q)))
                .unwrap_or(value);
            name = Some(unquoted.to_string());
            continue;
        }
        return Err(format!("ERR Invalid metadata value given: {part}"));
    }
    let Some(name) = name else {
        return Err("ERR Library name was not given".to_string());
    };
    if !valid_name(name.as_bytes()) {
        return Err(format!("ERR {BAD_NAME}"));
    }
    // Redis looks engines up by name without regard to case (`#!LUA`).
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    Ok((name, end))
}

impl FunctionsEngine {
    pub fn new() -> FunctionsEngine {
        FunctionsEngine {
            engine: Engine::new(Mode::Function).expect("the Lua state starts"),
            libraries: BTreeMap::new(),
            functions: HashMap::new(),
        }
    }

    /// FUNCTION FLUSH: a fresh Lua state, no libraries.
    pub fn flush(&mut self) {
        *self = FunctionsEngine::new();
    }

    /// FUNCTION LOAD: compiles and runs `code`, then adds its library
    /// (replacing one of the same name if `replace`). Returns the
    /// library's name, or the error reply.
    pub fn load(&mut self, code: &[u8], replace: bool) -> Result<String, String> {
        let (name, code_start) = metadata(code)?;
        if self.libraries.contains_key(&name) && !replace {
            return Err(format!("ERR Library '{name}' already exists"));
        }
        let functions = self.run_library(&code[code_start..])?;
        if functions.is_empty() {
            return Err("ERR No functions registered".to_string());
        }
        for function in functions.keys() {
            if let Some(owner) = self.functions.get(&function.to_ascii_lowercase()) {
                if *owner != name {
                    return Err(format!("ERR Function {function} already exists"));
                }
            }
        }
        self.remove(&name);
        for function in functions.keys() {
            self.functions
                .insert(function.to_ascii_lowercase(), name.clone());
        }
        self.libraries.insert(
            name.clone(),
            Library {
                name: name.clone(),
                code: code.to_vec(),
                functions,
            },
        );
        Ok(name)
    }

    /// Removes library `name` and its functions; false if there is none.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(library) = self.libraries.remove(name) else {
            return false;
        };
        for function in library.functions.keys() {
            self.functions.remove(&function.to_ascii_lowercase());
        }
        true
    }

    /// Function `name`, in any case (Redis's function names are
    /// case-insensitive; each keeps the case it was registered with).
    pub fn function(&self, name: &str) -> Option<&FunctionInfo> {
        let library = self.functions.get(&name.to_ascii_lowercase())?;
        let functions = &self.libraries.get(library)?.functions;
        // The exact name first: one library may register `a` and `A`.
        functions.get(name).or_else(|| {
            functions
                .iter()
                .find(|(registered, _)| registered.eq_ignore_ascii_case(name))
                .map(|(_, info)| info)
        })
    }

    /// Runs a library's code with the load-time globals; returns what it
    /// registered.
    fn run_library(&self, code: &[u8]) -> Result<BTreeMap<String, FunctionInfo>, String> {
        let engine = &self.engine;
        let chunk = engine
            .compile(code, "@user_function")
            .map_err(|message| format!("ERR Error compiling function: {message}"))?;
        let registered: Arc<Mutex<BTreeMap<String, FunctionInfo>>> = Arc::default();
        let lua = &engine.lua;
        let started = Instant::now();
        let counted = COUNTED_LOADS.load(std::sync::atomic::Ordering::Relaxed);
        let hooks = std::sync::atomic::AtomicU64::new(0);
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(LOAD_HOOK_EVERY),
            move |_, _| {
                let runs = hooks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if load_over(counted, runs, started.elapsed()) {
                    Err(mlua::Error::runtime("FUNCTION LOAD timeout"))
                } else {
                    Ok(VmState::Continue)
                }
            },
        );
        let outcome = (|| -> mlua::Result<(bool, Value)> {
            let sink = registered.clone();
            engine.hooks.raw_set(
                "register_function",
                lua.create_function(move |lua, args: MultiValue| register(lua, &sink, args))?,
            )?;
            engine
                .hooks
                .raw_get::<Table>("global_view")?
                .raw_set("__index", engine.load_globals.clone())?;
            engine.runner.call::<(bool, Value)>((
                chunk,
                engine.handler.clone(),
                Value::Nil,
                Value::Nil,
            ))
        })();
        lua.remove_hook();
        engine
            .run_hook_set
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let _ = engine.hooks.raw_set("register_function", Value::Nil);
        let _ = engine
            .hooks
            .raw_get::<Table>("global_view")
            .and_then(|view| view.raw_set("__index", engine.globals.clone()));
        match outcome {
            Ok((true, _)) => {}
            Ok((false, Value::Table(error))) => {
                let message: String = error
                    .raw_get::<Option<String>>("err")
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| "ERR unknown error".to_string());
                return Err(format!("ERR Error registering functions: {message}"));
            }
            Ok((false, _)) => return Err("ERR Error registering functions".to_string()),
            Err(e) => return Err(format!("ERR Error registering functions: {e}")),
        }
        let functions = std::mem::take(&mut *registered.lock());
        Ok(functions)
    }
}

fn failure(lua: &Lua, text: &str) -> mlua::Result<(bool, Value)> {
    let table = super::reply_to_lua::error_table(lua, text.as_bytes())?;
    table.raw_set("ignore_error_stats_update", Value::Nil)?;
    Ok((false, Value::Table(table)))
}

fn string_of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.to_string_lossy()),
        Value::Integer(i) => Some(i.to_string()),
        Value::Number(n) => Some(super::number::format_g(*n, 14)),
        _ => None,
    }
}

/// `redis.register_function(name, callback)` or
/// `redis.register_function{function_name=..., callback=..., flags={...},
/// description=...}`.
fn register(
    lua: &Lua,
    sink: &Mutex<BTreeMap<String, FunctionInfo>>,
    args: MultiValue,
) -> mlua::Result<(bool, Value)> {
    let (name, callback, description, flags) = match args.len() {
        1 => {
            let Value::Table(named) = &args[0] else {
                return failure(lua, "calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).");
            };
            match named_args(named) {
                Ok(parsed) => parsed,
                Err(message) => return failure(lua, message),
            }
        }
        2 => {
            let Some(name) = string_of(&args[0]) else {
                return failure(
                    lua,
                    "first argument to redis.register_function must be a string",
                );
            };
            let Value::Function(callback) = &args[1] else {
                return failure(
                    lua,
                    "second argument to redis.register_function must be a function",
                );
            };
            (name, callback.clone(), None, ScriptFlags::default())
        }
        _ => return failure(lua, "wrong number of arguments to redis.register_function"),
    };
    if !valid_name(name.as_bytes()) {
        return failure(lua, BAD_NAME);
    }
    let mut functions = sink.lock();
    if functions.contains_key(&name) {
        return failure(lua, "Function already exists in the library");
    }
    functions.insert(
        name.clone(),
        FunctionInfo {
            name,
            description,
            flags,
            function: callback,
        },
    );
    Ok((true, Value::Nil))
}

type Registration = (String, Function, Option<String>, ScriptFlags);

fn named_args(named: &Table) -> Result<Registration, &'static str> {
    let (mut name, mut callback, mut description, mut flags) =
        (None, None, None, ScriptFlags::default());
    for pair in named.pairs::<Value, Value>() {
        let (key, value) = pair
            .map_err(|_| "named argument key given to redis.register_function is not a string")?;
        let Some(key) = string_of(&key) else {
            return Err("named argument key given to redis.register_function is not a string");
        };
        match key.to_ascii_lowercase().as_str() {
            "function_name" => {
                name = Some(string_of(&value).ok_or(
                    "function_name argument given to redis.register_function must be a string",
                )?)
            }
            "description" => {
                description = Some(string_of(&value).ok_or(
                    "description argument given to redis.register_function must be a string",
                )?)
            }
            "callback" => match value {
                Value::Function(f) => callback = Some(f),
                _ => {
                    return Err(
                        "callback argument given to redis.register_function must be a function",
                    )
                }
            },
            "flags" => {
                let Value::Table(list) = value else {
                    return Err("flags argument to redis.register_function must be a table representing function flags");
                };
                for i in 1.. {
                    match list.raw_get::<Value>(i) {
                        Ok(Value::Nil) | Err(_) => break,
                        Ok(flag) => {
                            let Some(flag) = string_of(&flag) else {
                                return Err("unknown flag given");
                            };
                            if !flags.set(flag.to_ascii_lowercase().as_bytes()) {
                                return Err("unknown flag given");
                            }
                        }
                    }
                }
            }
            _ => return Err("unknown argument given to redis.register_function"),
        }
    }
    let name = name.ok_or("redis.register_function must get a function name argument")?;
    let callback = callback.ok_or("redis.register_function must get a callback argument")?;
    Ok((name, callback, description, flags))
}

#[cfg(test)]
mod tests {
    /// On a group's member a load's limit is its instructions, whatever
    /// the clock says (a slow member must fail a library exactly where
    /// the others do); elsewhere Redis's 500 ms.
    #[test]
    fn a_members_load_is_limited_by_instructions_not_time() {
        use super::{load_over, LOAD_HOOK_EVERY, LOAD_INSTRUCTIONS, LOAD_TIMEOUT};
        use std::time::Duration;
        let last_allowed = LOAD_INSTRUCTIONS / u64::from(LOAD_HOOK_EVERY);
        let long = Duration::from_secs(10);
        assert!(!load_over(true, last_allowed, long));
        assert!(load_over(true, last_allowed + 1, Duration::ZERO));
        assert!(!load_over(false, last_allowed * 100, Duration::ZERO));
        assert!(load_over(false, 1, LOAD_TIMEOUT + Duration::from_millis(1)));
    }

    use super::*;

    #[test]
    fn metadata_as_redis() {
        assert_eq!(
            metadata(b"#!lua name=lib\ncode").unwrap(),
            ("lib".to_string(), 14)
        );
        assert_eq!(
            metadata(b"code").unwrap_err(),
            "ERR Missing library metadata"
        );
        assert_eq!(
            metadata(b"#!lua name=lib").unwrap_err(),
            "ERR Invalid library metadata"
        );
        assert_eq!(
            metadata(b"#!lua\n").unwrap_err(),
            "ERR Library name was not given"
        );
        assert_eq!(
            metadata(b"#!lua name=a name=b\n").unwrap_err(),
            "ERR Invalid metadata value, name argument was given multiple times"
        );
        assert_eq!(
            metadata(b"#!lua foo=bar\n").unwrap_err(),
            "ERR Invalid metadata value given: foo=bar"
        );
        assert_eq!(metadata(b"#!LUA name=x\n").unwrap().0, "x");
        assert_eq!(metadata(b"#!lua name=\"foo\"\n").unwrap().0, "foo");
        assert_eq!(
            metadata(b"#!py name=x\n").unwrap_err(),
            "ERR Engine 'py' not found"
        );
        assert!(metadata(b"#!lua name=a-b\n")
            .unwrap_err()
            .contains("Library names can only"));
    }

    #[test]
    fn load_register_and_replace() {
        let mut engine = FunctionsEngine::new();
        let code = b"#!lua name=lib\nredis.register_function('f1', function(keys, args) return 1 end)\nredis.register_function{function_name='f2', callback=function() return 2 end, flags={'no-writes'}}";
        assert_eq!(engine.load(code, false).unwrap(), "lib");
        assert!(engine.function("f2").unwrap().flags.no_writes);
        assert!(engine
            .load(code, false)
            .unwrap_err()
            .contains("already exists"));
        assert_eq!(engine.load(code, true).unwrap(), "lib");
        let other = b"#!lua name=other\nredis.register_function('f1', function() return 1 end)";
        assert_eq!(
            engine.load(other, false).unwrap_err(),
            "ERR Function f1 already exists"
        );
        let none = b"#!lua name=none\nlocal a = 1";
        assert_eq!(
            engine.load(none, false).unwrap_err(),
            "ERR No functions registered"
        );
        let bad = b"#!lua name=bad\nreturn math.random()";
        assert!(engine
            .load(bad, false)
            .unwrap_err()
            .contains("attempted to access nonexistent global variable 'math'"));
    }
}

/// RDB's opcode for a function library (`RDB_OPCODE_FUNCTION2`).
const OPCODE_FUNCTION2: u8 = 245;

/// How FUNCTION RESTORE treats the libraries already there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RestorePolicy {
    Flush,
    Append,
    Replace,
}

impl FunctionsEngine {
    /// FUNCTION DUMP: each library's code after RDB's function opcode,
    /// then RDB version 10 and CRC-64, as Redis writes it (so payloads
    /// move between Redis and Engram). Also the persisted record.
    pub fn dump(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for library in self.libraries.values() {
            out.push(OPCODE_FUNCTION2);
            crate::rdb::writer::put_string(&mut out, &library.code);
        }
        crate::rdb::payload::seal(&mut out);
        out
    }

    /// FUNCTION RESTORE: the libraries of `payload` added by `policy`,
    /// all or none.
    pub fn restore(&mut self, payload: &[u8], policy: RestorePolicy) -> Result<(), String> {
        let codes = parse_payload(payload)?;
        let mut next = FunctionsEngine::new();
        if policy != RestorePolicy::Flush {
            for library in self.libraries.values() {
                next.load(&library.code, false)?;
            }
        }
        for code in &codes {
            if let Err(e) = next.load(code, policy == RestorePolicy::Replace) {
                // Redis names the library without quotes here.
                return Err(match metadata(code) {
                    Ok((name, _)) if e.ends_with("already exists") && e.contains('\'') => {
                        format!("ERR Library {name} already exists")
                    }
                    _ => e,
                });
            }
        }
        *self = next;
        Ok(())
    }
}

/// The library codes of a FUNCTION DUMP payload.
fn parse_payload(payload: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    const WRONG: &str = "ERR DUMP payload version or checksum are wrong";
    if payload.len() < 10 {
        return Err(WRONG.to_string());
    }
    let footer = payload.len() - 10;
    let version = u16::from_le_bytes([payload[footer], payload[footer + 1]]);
    let stored = u64::from_le_bytes(payload[footer + 2..].try_into().expect("8 bytes"));
    if u32::from(version) > crate::rdb::file::MAX_VERSION
        || stored != crate::rdb::crc64(&payload[..footer + 2])
    {
        return Err(WRONG.to_string());
    }
    let mut input = crate::rdb::input::Input::new(&payload[..footer]);
    let mut codes = Vec::new();
    while input.remaining() > 0 {
        let opcode = input
            .u8()
            .map_err(|_| "ERR can not read data type".to_string())?;
        if opcode != OPCODE_FUNCTION2 {
            return Err("ERR given type is not a function".to_string());
        }
        let code = input
            .string()
            .map_err(|_| "ERR failed loading the given functions payload".to_string())?;
        codes.push(code.into_owned());
    }
    Ok(codes)
}
