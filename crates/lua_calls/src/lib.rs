//! `redis.call` between Lua and Rust on Lua's own stack.
//!
//! mlua hands a Rust callback its arguments as `Value`s, and each string or
//! table among them (and each it returns) is a registry reference: a slot
//! in mlua's reference thread, made and freed under its state lock. A
//! script that runs two commands pays that for the command's name, every
//! argument, KEYS and ARGV and every reply, and at short scripts it was
//! a fifth of the server's time (BENCHMARKS.md, EVALSHA's profile), more
//! than the commands' own work. Redis's `luaRedisGenericCommand` reads the
//! arguments off the stack and pushes the reply onto it; so does this
//! crate:
//!
//! - [`command_function`]: a C function the VM calls directly as
//!   `redis.call` (raising the error table, as Redis's does) or
//!   `redis.pcall` (returning it). It reads its arguments in place
//!   ([`StackArgs`]), asks a [`Dispatch`] to run the command, and pushes
//!   the RESP reply the command wrote as Redis's Lua values
//!   (`redisProtocolToLuaType`).
//! - [`tables_function`] and [`with_tables`]: KEYS and ARGV made on the
//!   stack when the sandbox's runner asks for them.
//!
//! The `unsafe` is all here, so that the server crate keeps
//! `forbid(unsafe_code)`. Two rules make it sound. A value is pushed only
//! with functions that cannot raise a Lua error: mlua's allocator aborts
//! rather than fail with no memory limit set (Engram sets none), tables
//! are filled with `rawset` (no metamethods) and never with a nil key, and
//! the stack is grown with `lua_checkstack`, which answers instead of
//! raising. And the one deliberate raise, `redis.call`'s, happens after
//! every Rust value of the call has been dropped, in a frame holding only
//! plain integers, as mlua's own callbacks raise.

#![deny(unsafe_op_in_unsafe_fn)]

use std::any::Any;
use std::cell::RefCell;
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use mlua::{ffi, Function, Lua};

/// One argument of a `redis.call`, as it lies on the stack.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg<'a> {
    Bytes(&'a [u8]),
    /// A number with no fraction that fits an `i64` (mlua's `Integer`).
    Integer(i64),
    Number(f64),
    /// Anything else (a table, a boolean, nil...).
    Other,
}

/// The arguments of the call being answered.
pub struct StackArgs {
    state: *mut ffi::lua_State,
    count: c_int,
}

impl StackArgs {
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The `i`th argument (from 0). The bytes live as long as the call.
    pub fn get(&self, i: usize) -> Arg<'_> {
        assert!(i < self.len(), "argument {i} of {}", self.len());
        let index = i as c_int + 1;
        // `lua_tolstring` is used on a string only, so it does not convert
        // the slot in place; the bytes belong to a string the slot keeps.
        // SAFETY: `state` is the running call's, `index` an argument's slot
        // (checked above), which nothing pops while the call runs.
        unsafe {
            match ffi::lua_type(self.state, index) {
                ffi::LUA_TSTRING => {
                    let mut len = 0usize;
                    let data = ffi::lua_tolstring(self.state, index, &mut len);
                    Arg::Bytes(std::slice::from_raw_parts(data as *const u8, len))
                }
                ffi::LUA_TNUMBER => number(ffi::lua_tonumber(self.state, index)),
                _ => Arg::Other,
            }
        }
    }
}

/// A Lua 5.1 number as mlua sees it: an integer when it has no fraction
/// and fits.
fn number(n: f64) -> Arg<'static> {
    // -2^63 <= n < 2^63: `as` is then exact for integral values.
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n) {
        let i = n as i64;
        if (n - i as f64).abs() < f64::EPSILON {
            return Arg::Integer(i);
        }
    }
    Arg::Number(n)
}

/// What a call answers.
pub enum Outcome<'a> {
    /// The reply a command wrote, in RESP2 or RESP3: Lua values, or an
    /// error table for an error reply (already counted in the error
    /// statistics, so the table says `ignore_error_stats_update`).
    Reply(&'a [u8]),
    /// A refusal before or instead of the command: `line` is `-CODE
    /// message` or `message` (code ERR); `counted`: it is in the error
    /// statistics already.
    Failure { line: &'a [u8], counted: bool },
}

/// What answers a call: `read` takes the command off the stack (its
/// arguments are popped once it returns, as Redis's
/// `luaRedisGenericCommand` pops them, so that a call of 8,000 arguments,
/// at Lua's limit, leaves room for its reply); `run` runs it and answers
/// (once, before returning).
pub trait Dispatch {
    /// The command, copied out of Lua.
    type Command: 'static;
    /// The command, or why its arguments are refused (an error not yet
    /// in the statistics).
    fn read(args: &StackArgs) -> Result<Self::Command, &'static str>;
    fn run(command: Self::Command, answer: &mut dyn FnMut(Outcome<'_>));
}

/// `redis.call` (`raise`: an error is raised, as Redis's) or
/// `redis.pcall` (the error table is returned), answered by `D`.
pub fn command_function<D: Dispatch>(lua: &Lua, raise: bool) -> mlua::Result<Function> {
    let function: ffi::lua_CFunction = if raise {
        answer::<D, true>
    } else {
        answer::<D, false>
    };
    // SAFETY: `answer` keeps the contract of a Lua C function: it uses
    // the stack it is given within the room it checks for, and returns
    // how many values it left on top.
    unsafe { lua.create_c_function(function) }
}

thread_local! {
    /// A panic inside a dispatch, kept for the caller of the Lua code to
    /// resume (it cannot unwind through Lua's C frames).
    static PANIC: RefCell<Option<Box<dyn Any + Send>>> = const { RefCell::new(None) };
}

/// Resumes a panic a dispatch raised during the Lua call that just
/// returned, if one did.
pub fn resume_panic() {
    if let Some(payload) = PANIC.with(|p| p.borrow_mut().take()) {
        std::panic::resume_unwind(payload);
    }
}

unsafe extern "C-unwind" fn answer<D: Dispatch, const RAISE: bool>(
    state: *mut ffi::lua_State,
) -> c_int {
    // SAFETY: the VM calls this with its running state.
    let failed = unsafe { answer_on_stack::<D>(state) };
    if RAISE && failed {
        // The answer has returned and dropped everything it made.
        // SAFETY: the error table is on top; this frame holds plain values
        // only, so the `longjmp` to the protected call skips no destructor.
        unsafe { ffi::lua_error(state) }
    }
    1
}

/// Runs `D` and pushes its answer: the reply's value, or an error table
/// (then true).
#[inline(never)]
unsafe fn answer_on_stack<D: Dispatch>(state: *mut ffi::lua_State) -> bool {
    // SAFETY: `state` is the running call's.
    let count = unsafe { ffi::lua_gettop(state) };
    let args = StackArgs { state, count };
    let mut answered = None;
    let run = catch_unwind(AssertUnwindSafe(|| {
        let read = D::read(&args);
        // SAFETY: as above. The command was copied out (`Command` borrows
        // nothing), so the arguments can go.
        unsafe { ffi::lua_settop(state, 0) };
        let mut answer = |outcome: Outcome<'_>| {
            // SAFETY: as above.
            answered = Some(unsafe { push_outcome(state, outcome) });
        };
        match read {
            Ok(command) => D::run(command, &mut answer),
            Err(why) => answer(Outcome::Failure {
                line: why.as_bytes(),
                counted: false,
            }),
        }
    }));
    match (run, answered) {
        (Ok(()), Some(failed)) => failed,
        (Ok(()), None) => {
            // SAFETY: as above.
            unsafe { push_error_table(state, b"-ERR the command gave no reply", true) };
            true
        }
        (Err(payload), _) => {
            PANIC.with(|p| *p.borrow_mut() = Some(payload));
            // SAFETY: as above; whatever the dispatch pushed is dropped.
            unsafe {
                ffi::lua_settop(state, 0);
                push_error_table(state, b"-ERR the command panicked", true);
            }
            true
        }
    }
}

/// Pushes `outcome` as one value; true if it is an error table.
unsafe fn push_outcome(state: *mut ffi::lua_State, outcome: Outcome<'_>) -> bool {
    match outcome {
        Outcome::Failure { line, counted } => {
            // SAFETY: the caller's state.
            unsafe { push_error_table(state, line, counted) };
            true
        }
        Outcome::Reply(resp) if resp.first() == Some(&b'-') => {
            let line = resp.strip_suffix(b"\r\n").unwrap_or(resp);
            // SAFETY: the caller's state.
            unsafe { push_error_table(state, line, true) };
            true
        }
        Outcome::Reply(resp) => {
            // SAFETY: the caller's state.
            let top = unsafe { ffi::lua_gettop(state) };
            let mut reader = Resp { resp, pos: 0 };
            // SAFETY: the caller's state; `push_value` checks its room.
            match unsafe { push_value(state, &mut reader) } {
                Ok(()) => false,
                Err(why) => {
                    // SAFETY: back to where the reply began.
                    unsafe {
                        ffi::lua_settop(state, top);
                        push_error_table(state, format!("-ERR {why}").as_bytes(), true);
                    }
                    true
                }
            }
        }
    }
}

/// `-CODE message` (or `message`) as `CODE message` (`ERR message`), the
/// message's surrounding line breaks trimmed (Redis's
/// `luaPushErrorBuff`).
pub fn error_text(line: &[u8]) -> Vec<u8> {
    let (code, message): (&[u8], &[u8]) = match line.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&b| b == b' ') {
            Some(space) => (&rest[..space], &rest[space + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", line),
    };
    let start = message
        .iter()
        .position(|b| !matches!(b, b'\r' | b'\n'))
        .unwrap_or(message.len());
    let end = message
        .iter()
        .rposition(|b| !matches!(b, b'\r' | b'\n'))
        .map_or(start, |i| i + 1);
    let mut text = code.to_vec();
    text.push(b' ');
    text.extend_from_slice(&message[start..end.max(start)]);
    text
}

/// Pushes `bytes` as a Lua string.
///
/// # Safety
/// `state` is a live state with a free slot.
unsafe fn push_bytes(state: *mut ffi::lua_State, bytes: &[u8]) {
    // SAFETY: the caller's promise; Lua copies the bytes.
    unsafe { ffi::lua_pushlstring(state, bytes.as_ptr() as *const c_char, bytes.len()) };
}

/// Sets `table[key] = <top>` for the table just below the top, popping
/// the value (a fresh table: raw, no metamethod).
///
/// # Safety
/// A table at -2 with a free slot above the value.
unsafe fn set_field(state: *mut ffi::lua_State, key: &[u8]) {
    // SAFETY: the caller's promise: table at -2, value at -1.
    unsafe {
        push_bytes(state, key);
        ffi::lua_insert(state, -2);
        ffi::lua_rawset(state, -3);
    }
}

/// `{err = "CODE message"}`, with `ignore_error_stats_update = true` if
/// `counted`.
///
/// # Safety
/// A live state (room is checked here).
unsafe fn push_error_table(state: *mut ffi::lua_State, line: &[u8], counted: bool) {
    // SAFETY: room for the table, a key and a value, checked; a fresh
    // table is filled raw.
    unsafe {
        if ffi::lua_checkstack(state, 3) == 0 {
            // Lua's own stack is out of room: a C function's frame
            // starts with LUA_MINSTACK free slots beyond its arguments,
            // the arguments are popped before an answer is pushed, and an
            // error replaces whatever the reply had pushed, so this cannot
            // happen. (No panic: it could not unwind through Lua's C
            // frames.)
            std::process::abort();
        }
        ffi::lua_createtable(state, 0, 2);
        push_bytes(state, &error_text(line));
        set_field(state, b"err");
        if counted {
            ffi::lua_pushboolean(state, 1);
            set_field(state, b"ignore_error_stats_update");
        }
    }
}

/// `{key = value}`.
///
/// # Safety
/// A live state with room for three values.
unsafe fn push_wrapped(state: *mut ffi::lua_State, key: &[u8], value: &[u8]) {
    // SAFETY: the caller's promise; a fresh table filled raw.
    unsafe {
        ffi::lua_createtable(state, 0, 1);
        push_bytes(state, value);
        set_field(state, key);
    }
}

/// A RESP reply being read.
struct Resp<'a> {
    resp: &'a [u8],
    pos: usize,
}

impl<'a> Resp<'a> {
    fn line(&mut self) -> Result<&'a [u8], &'static str> {
        let rest = &self.resp[self.pos..];
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated reply")?;
        self.pos += end + 2;
        Ok(&rest[..end])
    }

    fn number(&mut self) -> Result<i64, &'static str> {
        let line = self.line()?;
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("bad length in reply")
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], &'static str> {
        let end = self.pos.checked_add(len).ok_or("truncated reply")?;
        if end + 2 > self.resp.len() {
            return Err("truncated reply");
        }
        let bytes = &self.resp[self.pos..end];
        self.pos = end + 2;
        Ok(bytes)
    }
}

/// Pushes the next value of `reader` as Redis converts a reply for Lua:
/// integers are numbers, bulk strings strings, a null bulk or null array
/// `false`, arrays tables, a status `{ok=...}`, an error `{err=...}`; in
/// RESP3 also maps `{map={...}}`, sets `{set={k=true}}`, doubles
/// `{double=n}`, big numbers `{big_number=s}`, verbatim strings
/// `{verbatim_string={format=..., string=...}}`, booleans, and null as
/// nil. Attributes are skipped. On an error the caller resets the stack.
///
/// # Safety
/// A live state (room is checked here, level by level).
unsafe fn push_value(
    state: *mut ffi::lua_State,
    reader: &mut Resp<'_>,
) -> Result<(), &'static str> {
    // A wrapped value needs its table, the wrapper, a key and a value.
    // SAFETY: checks, never raises.
    if unsafe { ffi::lua_checkstack(state, 6) } == 0 {
        return Err("reached lua stack limit");
    }
    let Some(&kind) = reader.resp.get(reader.pos) else {
        return Err("empty reply");
    };
    reader.pos += 1;
    // SAFETY: room for six values was checked above (and each nested
    // value checks its own); the tables pushed here are fresh and filled
    // raw (no metamethod runs), never with a nil key, so no push raises.
    unsafe {
        match kind {
            b'+' => push_wrapped(state, b"ok", reader.line()?),
            b'-' => {
                let start = reader.pos - 1;
                reader.line()?;
                let line = &reader.resp[start..reader.pos - 2];
                push_error_table(state, line, true);
            }
            b':' => {
                let n = reader.number()?;
                ffi::lua_pushnumber(state, n as f64);
            }
            b'$' => match reader.number()? {
                len if len < 0 => ffi::lua_pushboolean(state, 0),
                len => {
                    let bytes = reader.bytes(len as usize)?;
                    push_bytes(state, bytes);
                }
            },
            b'*' | b'>' => match reader.number()? {
                len if len < 0 => ffi::lua_pushboolean(state, 0),
                len => {
                    ffi::lua_createtable(state, len.min(1 << 24) as c_int, 0);
                    for i in 1..=len {
                        push_value(state, reader)?;
                        ffi::lua_rawseti(state, -2, i as ffi::lua_Integer);
                    }
                }
            },
            b'%' | b'~' => {
                let len = reader.number()?;
                let map = kind == b'%';
                ffi::lua_createtable(state, 0, 1);
                ffi::lua_createtable(state, 0, len.min(1 << 24) as c_int);
                for _ in 0..len {
                    push_value(state, reader)?;
                    if map {
                        push_value(state, reader)?;
                    } else {
                        ffi::lua_pushboolean(state, 1);
                    }
                    if ffi::lua_type(state, -2) == ffi::LUA_TNIL {
                        ffi::lua_settop(state, -3);
                    } else {
                        ffi::lua_rawset(state, -3);
                    }
                }
                set_field(state, if map { b"map" } else { b"set" });
            }
            b'_' => {
                reader.line()?;
                ffi::lua_pushnil(state);
            }
            b'#' => {
                let yes = reader.line()? == b"t";
                ffi::lua_pushboolean(state, yes as c_int);
            }
            b',' => {
                let text = std::str::from_utf8(reader.line()?).unwrap_or("nan");
                let value = match text {
                    "inf" => f64::INFINITY,
                    "-inf" => f64::NEG_INFINITY,
                    other => other.parse().unwrap_or(f64::NAN),
                };
                ffi::lua_createtable(state, 0, 1);
                ffi::lua_pushnumber(state, value);
                set_field(state, b"double");
            }
            b'(' => push_wrapped(state, b"big_number", reader.line()?),
            b'=' => {
                let len = reader.number()?.max(0) as usize;
                let bytes = reader.bytes(len)?;
                let (format, text) = if bytes.len() >= 4 && bytes[3] == b':' {
                    (&bytes[..3], &bytes[4..])
                } else {
                    (&b"txt"[..], bytes)
                };
                ffi::lua_createtable(state, 0, 1);
                ffi::lua_createtable(state, 0, 2);
                push_bytes(state, text);
                set_field(state, b"string");
                push_bytes(state, format);
                set_field(state, b"format");
                set_field(state, b"verbatim_string");
            }
            b'|' => {
                let len = reader.number()?;
                for _ in 0..2 * len {
                    push_value(state, reader)?;
                    ffi::lua_settop(state, -2);
                }
                push_value(state, reader)?;
            }
            _ => return Err("unexpected reply type"),
        }
    }
    Ok(())
}

/// Strings lent for a run, as a raw slice (see `TABLES`).
type Lent = *const [&'static [u8]];

thread_local! {
    /// The KEYS and ARGV of the run on this thread (`with_tables`), as
    /// raw slices: valid while `with_tables` runs, the only time the
    /// tables function can be called from.
    static TABLES: std::cell::Cell<Option<(Lent, Lent)>> = const { std::cell::Cell::new(None) };
}

/// Runs `run` with `keys` and `args` as what [`tables_function`]'s
/// function returns: the runner asks for KEYS and ARGV once it runs,
/// and gets them built on Lua's stack. (Passing them from Rust as mlua
/// tables cost a registry reference per string; passing them through
/// `Lua::exec_raw` made two C closures of garbage per run.)
pub fn with_tables<R>(keys: &[&[u8]], args: &[&[u8]], run: impl FnOnce() -> R) -> R {
    struct Restore(Option<(Lent, Lent)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            TABLES.with(|t| t.set(self.0));
        }
    }
    // The lifetimes are erased only for the thread-local's type: the
    // pointers are read while this frame lives (`Restore` puts the
    // previous ones back when it ends, unwinding included).
    let keys = std::ptr::from_ref(keys) as Lent;
    let args = std::ptr::from_ref(args) as Lent;
    let _restore = Restore(TABLES.with(|t| t.replace(Some((keys, args)))));
    run()
}

/// A C function returning two arrays, the KEYS and ARGV of the
/// [`with_tables`] around the call (two empty ones outside any).
pub fn tables_function(lua: &Lua) -> mlua::Result<Function> {
    // SAFETY: `tables` keeps the contract of a Lua C function: it pushes
    // two values within the room it checks for, and says so.
    unsafe { lua.create_c_function(tables) }
}

unsafe extern "C-unwind" fn tables(state: *mut ffi::lua_State) -> c_int {
    let current = TABLES.with(|t| t.get());
    // SAFETY: the pointers were set by a `with_tables` still running on
    // this thread (it restores the previous value when it returns), so
    // the slices they point at are alive; `push_strings` checks room.
    unsafe {
        match current {
            Some((keys, args)) => {
                push_strings(state, &*keys);
                push_strings(state, &*args);
            }
            None => {
                push_strings(state, &[]);
                push_strings(state, &[]);
            }
        }
    }
    2
}

/// A table of `items` as a Lua array.
///
/// # Safety
/// A live state.
unsafe fn push_strings(state: *mut ffi::lua_State, items: &[&[u8]]) {
    // SAFETY: room checked (a full stack here would be Lua's own limit,
    // not a script's doing: the runner's frame holds only its arguments;
    // and no panic, which could not unwind through Lua's C frames).
    unsafe {
        if ffi::lua_checkstack(state, 3) == 0 {
            std::process::abort();
        }
        ffi::lua_createtable(state, items.len().min(1 << 24) as c_int, 0);
        for (i, item) in items.iter().enumerate() {
            push_bytes(state, item);
            ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
        }
    }
}

#[cfg(test)]
mod tests;
