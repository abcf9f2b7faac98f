use super::*;
use mlua::{Table, Value};
use std::cell::RefCell;

thread_local! {
    /// What the test dispatch answers, and the arguments it saw.
    static REPLY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Answers `REPLY`, or a failure when the first argument is "refuse",
/// or panics when it is "panic"; records each argument as it read it.
struct Echo;

impl Dispatch for Echo {
    type Command = Vec<String>;

    fn read(args: &StackArgs) -> Result<Vec<String>, &'static str> {
        Ok((0..args.len())
            .map(|i| match args.get(i) {
                Arg::Bytes(b) => format!("s:{}", String::from_utf8_lossy(b)),
                Arg::Integer(n) => format!("i:{n}"),
                Arg::Number(n) => format!("n:{n}"),
                Arg::Other => "other".to_string(),
            })
            .collect())
    }

    fn run(seen: Vec<String>, answer: &mut dyn FnMut(Outcome<'_>)) {
        SEEN.with(|s| *s.borrow_mut() = seen.clone());
        match seen.first().map(String::as_str) {
            Some("s:refuse") => answer(Outcome::Failure {
                line: b"-NOPE not here",
                counted: false,
            }),
            Some("s:panic") => panic!("dispatch panicked"),
            _ => REPLY.with(|r| answer(Outcome::Reply(&r.borrow()))),
        }
    }
}

fn lua_with_calls() -> Lua {
    let lua = Lua::new();
    lua.globals()
        .set("call", command_function::<Echo>(&lua, true).unwrap())
        .unwrap();
    lua.globals()
        .set("pcall_", command_function::<Echo>(&lua, false).unwrap())
        .unwrap();
    lua
}

fn reply_of(lua: &Lua, resp: &[u8]) -> Value {
    REPLY.with(|r| *r.borrow_mut() = resp.to_vec());
    lua.load("return pcall_('x')").eval().unwrap()
}

#[test]
fn arguments_are_read_in_place_as_mlua_would_convert_them() {
    let lua = lua_with_calls();
    REPLY.with(|r| *r.borrow_mut() = b"+OK\r\n".to_vec());
    lua.load("call('SET', 'k\\0v', 42, 1.5, -3, {}, true)")
        .exec()
        .unwrap();
    SEEN.with(|s| {
        assert_eq!(
            *s.borrow(),
            ["s:SET", "s:k\0v", "i:42", "n:1.5", "i:-3", "other", "other"]
        )
    });
    // Beyond an i64: a number, not a wrapped integer.
    lua.load("call(2^63)").exec().unwrap();
    SEEN.with(|s| assert_eq!(s.borrow()[0], format!("n:{}", 2f64.powi(63))));
    lua.load("call()").exec().unwrap();
    SEEN.with(|s| assert!(s.borrow().is_empty()));
}

#[test]
fn a_call_at_lua_s_argument_limit_still_gets_its_reply() {
    let lua = lua_with_calls();
    // Redis's "Script check unpack with massive arguments": 8,000 values
    // on the stack leave none free until the arguments are popped.
    REPLY.with(|r| *r.borrow_mut() = b"*2\r\n:7999\r\n-ERR deep\r\n".to_vec());
    let (n, err): (i64, String) = lua
        .load(
            "local a = {} for i = 1, 7999 do a[i] = 1 end
             local t = call('lpush', unpack(a))
             return t[1], t[2].err",
        )
        .eval()
        .unwrap();
    assert_eq!((n, err.as_str()), (7999, "ERR deep"));
    SEEN.with(|s| assert_eq!(s.borrow().len(), 8000));
    // And a refusal there too.
    let err: Table = lua
        .load("local a = {} for i = 1, 7999 do a[i] = 1 end return pcall_('refuse', unpack(a))")
        .eval()
        .unwrap();
    assert_eq!(err.raw_get::<String>("err").unwrap(), "NOPE not here");
}

#[test]
fn resp2_and_resp3_replies_become_redis_s_lua_values() {
    let lua = lua_with_calls();
    let v = reply_of(&lua, b"*3\r\n:1\r\n$-1\r\n$3\r\nabc\r\n");
    let t = v.as_table().unwrap();
    assert_eq!(t.raw_get::<f64>(1).unwrap(), 1.0);
    assert!(!t.raw_get::<bool>(2).unwrap());
    assert_eq!(t.raw_get::<String>(3).unwrap(), "abc");
    assert_eq!(t.raw_len(), 3);

    let v = reply_of(&lua, b"+PONG\r\n");
    assert_eq!(
        v.as_table().unwrap().raw_get::<String>("ok").unwrap(),
        "PONG"
    );

    let v = reply_of(&lua, b"%2\r\n+a\r\n,1.5\r\n_\r\n:7\r\n");
    let map: Table = v.as_table().unwrap().raw_get("map").unwrap();
    // The nil key is dropped; the status key is a table.
    assert_eq!(map.pairs::<Value, Value>().count(), 1);
    let (key, value) = map.pairs::<Table, Table>().next().unwrap().unwrap();
    assert_eq!(key.raw_get::<String>("ok").unwrap(), "a");
    assert_eq!(value.raw_get::<f64>("double").unwrap(), 1.5);

    let v = reply_of(&lua, b"~2\r\n$1\r\nx\r\n$1\r\ny\r\n");
    let set: Table = v.as_table().unwrap().raw_get("set").unwrap();
    assert!(set.raw_get::<bool>("x").unwrap() && set.raw_get::<bool>("y").unwrap());

    assert!(reply_of(&lua, b"_\r\n").is_nil());
    assert_eq!(reply_of(&lua, b"#t\r\n"), Value::Boolean(true));
    assert_eq!(reply_of(&lua, b"*-1\r\n"), Value::Boolean(false));
    let v = reply_of(&lua, b"(12345678901234567890\r\n");
    assert_eq!(
        v.as_table()
            .unwrap()
            .raw_get::<String>("big_number")
            .unwrap(),
        "12345678901234567890"
    );
    let v = reply_of(&lua, b"=8\r\nmkd:abcd\r\n");
    let verbatim: Table = v.as_table().unwrap().raw_get("verbatim_string").unwrap();
    assert_eq!(verbatim.raw_get::<String>("format").unwrap(), "mkd");
    assert_eq!(verbatim.raw_get::<String>("string").unwrap(), "abcd");
    // An attribute is skipped: the value after it is the reply.
    assert_eq!(
        reply_of(&lua, b"|1\r\n+key\r\n:1\r\n:5\r\n"),
        Value::Number(5.0)
    );
    // An error inside an array is an error table, the call not failing.
    let v = reply_of(&lua, b"*2\r\n+OK\r\n-WRONGTYPE bad\r\n");
    let error: Table = v.as_table().unwrap().raw_get(2).unwrap();
    assert_eq!(error.raw_get::<String>("err").unwrap(), "WRONGTYPE bad");
}

#[test]
fn a_reply_that_cannot_be_read_is_an_error_not_a_crash() {
    let lua = lua_with_calls();
    for bad in [&b"*2\r\n:1\r\n"[..], b"$10\r\nabc\r\n", b"?\r\n", b""] {
        let v = reply_of(&lua, bad);
        let err = v.as_table().unwrap().raw_get::<String>("err").unwrap();
        assert!(err.starts_with("ERR "), "{err}");
    }
}

#[test]
fn call_raises_the_error_table_and_pcall_returns_it() {
    let lua = lua_with_calls();
    REPLY.with(|r| *r.borrow_mut() = b"-WRONGTYPE Operation\r\n".to_vec());
    let (ok, err): (bool, Table) = lua.load("return pcall(call, 'x')").eval().unwrap();
    assert!(!ok);
    assert_eq!(err.raw_get::<String>("err").unwrap(), "WRONGTYPE Operation");
    assert!(err.raw_get::<bool>("ignore_error_stats_update").unwrap());
    // A refusal not yet counted says so by leaving the flag out.
    let err: Table = lua.load("return pcall_('refuse')").eval().unwrap();
    assert_eq!(err.raw_get::<String>("err").unwrap(), "NOPE not here");
    assert_eq!(
        err.raw_get::<Value>("ignore_error_stats_update").unwrap(),
        Value::Nil
    );
    // Values below the call's arguments are left alone.
    let (a, b): (i64, i64) = lua
        .load("local a, b = 1, 2 pcall(call, 'refuse') return a, b")
        .eval()
        .unwrap();
    assert_eq!((a, b), (1, 2));
}

#[test]
fn a_panicking_dispatch_fails_the_call_and_is_resumed_after_it() {
    let lua = lua_with_calls();
    let (ok, err): (bool, Table) = lua.load("return pcall(call, 'panic')").eval().unwrap();
    assert!(!ok);
    assert!(err.raw_get::<String>("err").unwrap().contains("panicked"));
    let resumed = std::panic::catch_unwind(resume_panic).unwrap_err();
    assert_eq!(resumed.downcast_ref::<&str>(), Some(&"dispatch panicked"));
    // Once: nothing is left to resume.
    resume_panic();
}

#[test]
fn the_tables_function_returns_the_keys_and_argv_of_the_run_around_it() {
    let lua = Lua::new();
    let tables = tables_function(&lua).unwrap();
    let show: Function = lua
        .load(
            "local tables = ... return function()
                local k, a = tables()
                return #k .. ':' .. tostring(k[2]) .. ':' .. tostring(a[1])
             end",
        )
        .call(tables)
        .unwrap();
    let shown = with_tables(&[b"k1", b"k\0two"], &[b"a"], || {
        show.call::<mlua::String>(())
    });
    assert_eq!(shown.unwrap().as_bytes(), b"2:k\0two:a");
    // Nested runs see their own, and the outer one its own again after.
    let (inner, outer) = with_tables(&[b"x"], &[], || {
        let inner = with_tables(&[], &[b"y"], || show.call::<String>(()).unwrap());
        (inner, show.call::<String>(()).unwrap())
    });
    assert_eq!((inner.as_str(), outer.as_str()), ("0:nil:y", "1:nil:nil"));
    // Outside any run: empty tables.
    assert_eq!(show.call::<String>(()).unwrap(), "0:nil:nil");
}

#[test]
fn error_texts_as_redis() {
    assert_eq!(error_text(b"-ERR bad thing\r\n"), b"ERR bad thing");
    assert_eq!(error_text(b"-WRONGTYPE x y"), b"WRONGTYPE x y");
    assert_eq!(error_text(b"-NOCODE"), b"ERR NOCODE");
    assert_eq!(error_text(b"plain text"), b"ERR plain text");
}
