//! `cmsgpack` (lua-cmsgpack, as Redis ships it): MessagePack from and to
//! Lua values, byte for byte as Redis's copy writes it (scripts compare
//! and store these bytes, so the encoding choices are part of the API):
//! integers in the smallest form, a double as float32 when that is exact,
//! strings as str8/16/32, a table as an array when its keys are exactly
//! 1..n (else a map in `next` order), nesting cut at 16 levels (deeper
//! tables become nil). Errors are raised here, from Rust: a Lua wrapper
//! called as `return cmsgpack.unpack(s)` would be a tail call, and the
//! script's line would be gone from the error.

use mlua::{Lua, MultiValue, Table, Value};

/// Tables nested deeper than this are encoded as nil, as lua-cmsgpack's
/// LUACMSGPACK_MAX_NESTING (a table that contains itself ends there).
const MAX_NESTING: usize = 16;

fn encode_int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        match n {
            0..=127 => out.push(n as u8),
            128..=0xff => out.extend([0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend((n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend((n as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend((n as u64).to_be_bytes());
            }
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend([0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend((n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend((n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend(n.to_be_bytes());
    }
}

fn encode_number(out: &mut Vec<u8>, n: f64) {
    // lua-cmsgpack's IS_INT64_EQUIVALENT: finite and equal to its int64.
    if n.is_finite() && (n as i64) as f64 == n {
        encode_int(out, n as i64);
    } else if (n as f32) as f64 == n || n.is_nan() {
        out.push(0xca);
        out.extend((n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend(n.to_be_bytes());
    }
}

/// A length-prefixed header: `small` (the fix form's base and limit), then
/// 16- and 32-bit forms (and, for strings only, an 8-bit one).
fn encode_len(out: &mut Vec<u8>, len: usize, fix: (u8, usize), len8: Option<u8>, wide: (u8, u8)) {
    if len < fix.1 {
        out.push(fix.0 | len as u8);
    } else if let Some(code) = len8.filter(|_| len <= 0xff) {
        out.extend([code, len as u8]);
    } else if len <= 0xffff {
        out.push(wide.0);
        out.extend((len as u16).to_be_bytes());
    } else {
        out.push(wide.1);
        out.extend((len as u32).to_be_bytes());
    }
}

/// lua-cmsgpack's table_is_an_array: every key a positive integer and
/// the largest equal to their count (so exactly 1..n; `{}` too).
fn is_array(table: &Table) -> mlua::Result<bool> {
    let (mut count, mut max) = (0i64, 0i64);
    for pair in table.clone().pairs::<Value, Value>() {
        let (key, _) = pair?;
        let n = match key {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => return Ok(false),
        };
        let index = n as i64;
        if index as f64 != n || index < 1 {
            return Ok(false);
        }
        count += 1;
        max = max.max(index);
    }
    Ok(max == count)
}

fn encode(out: &mut Vec<u8>, value: &Value, level: usize) -> mlua::Result<()> {
    match value {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => encode_number(out, *i as f64),
        Value::Number(n) => encode_number(out, *n),
        Value::String(s) => {
            let bytes = s.as_bytes();
            encode_len(out, bytes.len(), (0xa0, 32), Some(0xd9), (0xda, 0xdb));
            out.extend_from_slice(&bytes);
        }
        Value::Table(table) if level < MAX_NESTING => {
            if is_array(table)? {
                let len = table.raw_len();
                encode_len(out, len, (0x90, 16), None, (0xdc, 0xdd));
                for i in 1..=len {
                    encode(out, &table.raw_get::<Value>(i)?, level + 1)?;
                }
            } else {
                // Counted, then walked again (as lua-cmsgpack does): the
                // pairs are not all held at once, since every value held
                // from Rust takes a slot of the Lua stack (a map of 100,000
                // keys overflowed it).
                let mut count = 0;
                for pair in table.clone().pairs::<Value, Value>() {
                    pair?;
                    count += 1;
                }
                encode_len(out, count, (0x80, 16), None, (0xde, 0xdf));
                for pair in table.clone().pairs::<Value, Value>() {
                    let (key, value) = pair?;
                    encode(out, &key, level + 1)?;
                    encode(out, &value, level + 1)?;
                }
            }
        }
        // Nil, functions, userdata, and tables past the nesting limit.
        _ => out.push(0xc0),
    }
    Ok(())
}

/// Why decoding stopped (lua-cmsgpack's two error texts).
enum DecodeError {
    Eof,
    BadFormat,
    Lua(mlua::Error),
}

impl From<mlua::Error> for DecodeError {
    fn from(e: mlua::Error) -> DecodeError {
        DecodeError::Lua(e)
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or(DecodeError::Eof)?;
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn left(&self) -> usize {
        self.data.len() - self.at
    }
}

fn decode(lua: &Lua, c: &mut Cursor) -> Result<Value, DecodeError> {
    let code = c.take(1)?[0];
    let number = |n: f64| Ok(Value::Number(n));
    match code {
        0x00..=0x7f => number(code as f64),
        0xe0..=0xff => number(code as i8 as f64),
        0xcc => number(c.be(1)? as f64),
        0xcd => number(c.be(2)? as f64),
        0xce => number(c.be(4)? as f64),
        0xcf => number(c.be(8)? as f64),
        0xd0 => number(c.be(1)? as u8 as i8 as f64),
        0xd1 => number(c.be(2)? as u16 as i16 as f64),
        0xd2 => number(c.be(4)? as u32 as i32 as f64),
        0xd3 => number(c.be(8)? as i64 as f64),
        0xc0 => Ok(Value::Nil),
        0xc2 => Ok(Value::Boolean(false)),
        0xc3 => Ok(Value::Boolean(true)),
        0xca => number(f32::from_bits(c.be(4)? as u32) as f64),
        0xcb => number(f64::from_bits(c.be(8)?)),
        0xa0..=0xbf | 0xd9 | 0xda | 0xdb => {
            let len = match code {
                0xd9 => c.be(1)?,
                0xda => c.be(2)?,
                0xdb => c.be(4)?,
                _ => u64::from(code & 0x1f),
            } as usize;
            Ok(Value::String(lua.create_string(c.take(len)?)?))
        }
        0x90..=0x9f | 0xdc | 0xdd => {
            let len = match code {
                0xdc => c.be(2)?,
                0xdd => c.be(4)?,
                _ => u64::from(code & 0x0f),
            } as usize;
            // No more elements than bytes left: a huge announced length
            // fails on the data, not on the allocation.
            let table = lua.create_table_with_capacity(len.min(c.left()), 0)?;
            for i in 1..=len {
                table.raw_set(i, decode(lua, c)?)?;
            }
            Ok(Value::Table(table))
        }
        0x80..=0x8f | 0xde | 0xdf => {
            let len = match code {
                0xde => c.be(2)?,
                0xdf => c.be(4)?,
                _ => u64::from(code & 0x0f),
            } as usize;
            let table = lua.create_table_with_capacity(0, len.min(c.left()))?;
            for _ in 0..len {
                let key = decode(lua, c)?;
                let value = decode(lua, c)?;
                if !matches!(key, Value::Nil) {
                    table.raw_set(key, value)?;
                }
            }
            Ok(Value::Table(table))
        }
        _ => Err(DecodeError::BadFormat),
    }
}

/// Raises `message` as lua-cmsgpack's luaL_error reads in Redis: after
/// the position of the script's line (`user_script:3: ...`).
fn failed(lua: &Lua, message: &str) -> mlua::Result<MultiValue> {
    let place = (1..64)
        .map_while(|level| lua.inspect_stack(level))
        .find_map(|frame| {
            let source = frame.source().source?.into_owned();
            let name = source.strip_prefix('@')?.to_string();
            (name == "user_script" || name == "user_function")
                .then(|| format!("{name}:{}: ", frame.curr_line()))
        })
        .unwrap_or_default();
    Err(mlua::Error::runtime(format!("{place}{message}")))
}

/// lua-cmsgpack's mp_unpack_full: up to `limit` values from `offset`
/// (both 0: every value, and no offset returned); with a limit or an
/// offset, the next offset (-1 at the end) comes first.
fn unpack(lua: &Lua, data: &[u8], limit: i64, offset: i64) -> mlua::Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return failed(
            lua,
            &format!(
                "Invalid request to unpack with offset of {offset} and limit of {}.",
                data.len()
            ),
        );
    }
    if offset as usize > data.len() {
        return failed(
            lua,
            &format!(
                "Start offset {offset} greater than input length {}.",
                data.len()
            ),
        );
    }
    let decode_all = limit == 0 && offset == 0;
    let limit = if decode_all { i64::MAX } else { limit };
    let mut cursor = Cursor {
        data,
        at: offset as usize,
    };
    let mut values = Vec::new();
    let mut count = 0;
    while cursor.left() > 0 && count < limit {
        match decode(lua, &mut cursor) {
            Ok(value) => values.push(value),
            Err(DecodeError::Eof) => return failed(lua, "Missing bytes in input."),
            Err(DecodeError::BadFormat) => return failed(lua, "Bad data format in input."),
            Err(DecodeError::Lua(e)) => return Err(e),
        }
        count += 1;
    }
    if !decode_all {
        let next = if cursor.left() == 0 {
            -1
        } else {
            cursor.at as i64
        };
        values.insert(0, Value::Integer(next));
    }
    Ok(MultiValue::from_vec(values))
}

fn string_arg(args: &MultiValue, name: &str) -> Result<Vec<u8>, String> {
    match args.front() {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(i)) => Ok(i.to_string().into_bytes()),
        Some(Value::Number(n)) => Ok(super::number::format_g(*n, 14).into_bytes()),
        other => Err(format!(
            "bad argument #1 to '{name}' (string expected, got {})",
            other.map_or("no value", |v| v.type_name())
        )),
    }
}

fn integer_arg(
    args: &MultiValue,
    at: usize,
    default: Option<i64>,
    name: &str,
) -> Result<i64, String> {
    match args.get(at) {
        Some(Value::Integer(i)) => Ok(*i),
        Some(Value::Number(n)) => Ok(*n as i64),
        Some(Value::String(s)) => s
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .map(|n| n as i64)
            .ok_or_else(|| {
                format!(
                    "bad argument #{} to '{name}' (number expected, got string)",
                    at + 1
                )
            }),
        None | Some(Value::Nil) if default.is_some() => Ok(default.expect("checked")),
        other => Err(format!(
            "bad argument #{} to '{name}' (number expected, got {})",
            at + 1,
            other.map_or("no value", |v| v.type_name())
        )),
    }
}

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let cmsgpack = lua.create_table()?;
    cmsgpack.set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return failed(
                    lua,
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                );
            }
            let mut out = Vec::new();
            for value in args.iter() {
                encode(&mut out, value, 0)?;
            }
            Ok(MultiValue::from_vec(vec![Value::String(
                lua.create_string(&out)?,
            )]))
        })?,
    )?;
    cmsgpack.set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| match string_arg(&args, "unpack") {
            Ok(data) => unpack(lua, &data, 0, 0),
            Err(message) => failed(lua, &message),
        })?,
    )?;
    cmsgpack.set(
        "unpack_one",
        lua.create_function(|lua, args: MultiValue| {
            let parsed = string_arg(&args, "unpack_one")
                .and_then(|data| Ok((data, integer_arg(&args, 1, Some(0), "unpack_one")?)));
            match parsed {
                Ok((data, offset)) => unpack(lua, &data, 1, offset),
                Err(message) => failed(lua, &message),
            }
        })?,
    )?;
    cmsgpack.set(
        "unpack_limit",
        lua.create_function(|lua, args: MultiValue| {
            let parsed = string_arg(&args, "unpack_limit").and_then(|data| {
                let limit = integer_arg(&args, 1, None, "unpack_limit")?;
                Ok((data, limit, integer_arg(&args, 2, Some(0), "unpack_limit")?))
            });
            match parsed {
                Ok((data, limit, offset)) => unpack(lua, &data, limit, offset),
                Err(message) => failed(lua, &message),
            }
        })?,
    )?;
    cmsgpack.set("_NAME", "cmsgpack")?;
    cmsgpack.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    cmsgpack.set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    cmsgpack.set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(cmsgpack)
}
