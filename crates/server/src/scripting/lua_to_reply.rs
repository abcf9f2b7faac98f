//! A script's result into the caller's reply (Redis's
//! `luaReplyToRedisReply`): a string is a bulk string, a number an integer
//! (truncated), a boolean 1 or null under RESP2 (the script's protocol,
//! `redis.setresp`) or a boolean under RESP3, a table with `err` an error,
//! `ok` a status, `double`, `big_number`, `verbatim_string`, `map` or
//! `set` those types, any other table an array up to its first nil;
//! anything else is null. The writer spells each type in the caller's
//! protocol.

use mlua::{Table, Value};

use crate::resp::ReplyWriter;
use crate::shared::Shared;

/// How deep nested tables may go before the reply says so (Redis's Lua
/// stack limit; a table that contains itself ends there).
const MAX_DEPTH: usize = 1000;

pub fn write(shared: &Shared, out: &mut ReplyWriter, value: &Value, script_resp3: bool) {
    write_at(shared, out, value, script_resp3, 0);
}

fn write_at(shared: &Shared, out: &mut ReplyWriter, value: &Value, resp3: bool, depth: usize) {
    if depth >= MAX_DEPTH {
        out.error("ERR reached lua stack limit");
        return;
    }
    match value {
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Boolean(b) => {
            if resp3 {
                out.boolean(*b);
            } else if *b {
                out.int(1);
            } else {
                out.null();
            }
        }
        Value::Integer(i) => out.int(*i),
        Value::Number(n) => out.int(truncate(*n)),
        Value::Table(table) => write_table(shared, out, table, resp3, depth),
        _ => out.null(),
    }
}

/// C's `(long long)` of a double, saturating where C is undefined.
fn truncate(n: f64) -> i64 {
    if n.is_nan() {
        i64::MIN
    } else {
        n as i64
    }
}

fn string_field(table: &Table, key: &str) -> Option<Vec<u8>> {
    match table.raw_get::<Value>(key).ok()? {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        // Lua numbers are strings to `lua_isstring`, but Redis reads these
        // fields with `lua_type == LUA_TSTRING`.
        _ => None,
    }
}

fn write_table(shared: &Shared, out: &mut ReplyWriter, table: &Table, resp3: bool, depth: usize) {
    if let Some(err) = string_field(table, "err") {
        let text = String::from_utf8_lossy(&err);
        let counted = matches!(
            table.raw_get::<Value>("ignore_error_stats_update"),
            Ok(Value::Boolean(true))
        );
        if counted {
            out.error(&text);
        } else {
            crate::commands::reply_error(shared, out, &text);
        }
        return;
    }
    if let Some(ok) = string_field(table, "ok") {
        out.simple(&String::from_utf8_lossy(&ok).replace(['\r', '\n'], " "));
        return;
    }
    if let Ok(Value::Number(_) | Value::Integer(_)) = table.raw_get::<Value>("double") {
        let value: f64 = table.raw_get("double").unwrap_or(0.0);
        out.double(value);
        return;
    }
    if let Some(big) = string_field(table, "big_number") {
        out.big_number(&String::from_utf8_lossy(&big).replace(['\r', '\n'], " "));
        return;
    }
    if let Ok(Value::Table(verbatim)) = table.raw_get::<Value>("verbatim_string") {
        if let (Some(format), Some(text)) = (
            string_field(&verbatim, "format"),
            string_field(&verbatim, "string"),
        ) {
            out.verbatim_as(&format, &text);
            return;
        }
    }
    if let Ok(Value::Table(map)) = table.raw_get::<Value>("map") {
        let pairs: Vec<(Value, Value)> = map.pairs::<Value, Value>().flatten().collect();
        out.map(pairs.len());
        for (key, value) in &pairs {
            write_at(shared, out, key, resp3, depth + 1);
            write_at(shared, out, value, resp3, depth + 1);
        }
        return;
    }
    if let Ok(Value::Table(set)) = table.raw_get::<Value>("set") {
        let members: Vec<Value> = set
            .pairs::<Value, Value>()
            .flatten()
            .map(|(k, _)| k)
            .collect();
        out.set(members.len());
        for member in &members {
            write_at(shared, out, member, resp3, depth + 1);
        }
        return;
    }
    let mut elements = Vec::new();
    for i in 1.. {
        match table.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(value) => elements.push(value),
        }
    }
    out.array(elements.len());
    for element in &elements {
        write_at(shared, out, element, resp3, depth + 1);
    }
}
