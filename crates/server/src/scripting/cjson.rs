//! `cjson` as Redis ships it (lua-cjson 2.1): `encode`, `decode`,
//! `null`, and the settings scripts call (`encode_max_depth`,
//! `decode_max_depth`, `encode_invalid_numbers`, `decode_invalid_numbers`,
//! `encode_keep_buffer`, `encode_number_precision`, `encode_sparse_array`).
//! Numbers are written with `%.14g`, `/` is escaped, an empty table is an
//! object, a table whose keys are 1..n (not too sparse) an array.
//!
//! Every function returns `ok, ...` and `sandbox.lua` raises the message
//! when `ok` is false, so errors read as lua-cjson's (no position).

use std::sync::Arc;

use mlua::{LightUserData, Lua, MultiValue, Table, Value};
use parking_lot::Mutex;

use super::number::format_g;

struct Settings {
    encode_max_depth: usize,
    decode_max_depth: usize,
    encode_invalid_numbers: bool,
    decode_invalid_numbers: bool,
    keep_buffer: bool,
    precision: usize,
    sparse_convert: bool,
    sparse_ratio: usize,
    sparse_safe: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: false,
            decode_invalid_numbers: true,
            keep_buffer: true,
            precision: 14,
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
        }
    }
}

/// cjson.null: a NULL light userdata, as lua-cjson's.
pub fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn fail(lua: &Lua, message: String) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![
        Value::Boolean(false),
        Value::String(lua.create_string(message)?),
    ]))
}

fn ok(values: Vec<Value>) -> MultiValue {
    let mut all = vec![Value::Boolean(true)];
    all.extend(values);
    MultiValue::from_vec(all)
}

fn number_arg(value: &Value) -> Option<f64> {
    match value {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let settings = Arc::new(Mutex::new(Settings::default()));
    let cjson = lua.create_table()?;
    let s = settings.clone();
    cjson.set(
        "encode",
        lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return fail(lua, "expected 1 argument".to_string());
            }
            let settings = s.lock();
            let mut out = Vec::new();
            match encode(&args[0], &mut out, 0, &settings) {
                Ok(()) => Ok(ok(vec![Value::String(lua.create_string(&out)?)])),
                Err(message) => fail(lua, message),
            }
        })?,
    )?;
    let s = settings.clone();
    cjson.set(
        "decode",
        lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return fail(lua, "expected 1 argument".to_string());
            }
            let text = match &args[0] {
                Value::String(text) => text.as_bytes().to_vec(),
                Value::Integer(i) => i.to_string().into_bytes(),
                Value::Number(n) => format_g(*n, 14).into_bytes(),
                other => {
                    return fail(
                        lua,
                        format!(
                            "bad argument #1 to 'decode' (string expected, got {})",
                            other.type_name()
                        ),
                    )
                }
            };
            let max_depth = s.lock().decode_max_depth;
            let mut decoder = Decoder {
                lua,
                text: &text,
                pos: 0,
                depth: 0,
                max_depth,
            };
            match decoder.document() {
                Ok(value) => Ok(ok(vec![value])),
                Err(message) => fail(lua, message),
            }
        })?,
    )?;
    cjson.set("null", null())?;
    cjson.set("_NAME", "cjson")?;
    cjson.set("_VERSION", "2.1.0")?;

    // Settings: each sets what it is given and returns the value in force.
    let s = settings.clone();
    cjson.set(
        "encode_max_depth",
        lua.create_function(move |_, args: MultiValue| {
            let mut settings = s.lock();
            if let Some(depth) = args.front().and_then(number_arg) {
                settings.encode_max_depth = depth.max(1.0) as usize;
            }
            Ok(ok(vec![Value::Integer(settings.encode_max_depth as i64)]))
        })?,
    )?;
    let s = settings.clone();
    cjson.set(
        "decode_max_depth",
        lua.create_function(move |_, args: MultiValue| {
            let mut settings = s.lock();
            if let Some(depth) = args.front().and_then(number_arg) {
                settings.decode_max_depth = depth.max(1.0) as usize;
            }
            Ok(ok(vec![Value::Integer(settings.decode_max_depth as i64)]))
        })?,
    )?;
    let s = settings.clone();
    cjson.set(
        "encode_number_precision",
        lua.create_function(move |_, args: MultiValue| {
            let mut settings = s.lock();
            if let Some(precision) = args.front().and_then(number_arg) {
                settings.precision = precision.clamp(1.0, 14.0) as usize;
            }
            Ok(ok(vec![Value::Integer(settings.precision as i64)]))
        })?,
    )?;
    for (name, which) in [
        ("encode_invalid_numbers", 0),
        ("decode_invalid_numbers", 1),
        ("encode_keep_buffer", 2),
    ] {
        let s = settings.clone();
        cjson.set(
            name,
            lua.create_function(move |_, args: MultiValue| {
                let mut settings = s.lock();
                let flag = match which {
                    0 => &mut settings.encode_invalid_numbers,
                    1 => &mut settings.decode_invalid_numbers,
                    _ => &mut settings.keep_buffer,
                };
                match args.front() {
                    Some(Value::Boolean(b)) => *flag = *b,
                    Some(Value::String(text)) => *flag = &*text.as_bytes() == b"on",
                    _ => {}
                }
                Ok(ok(vec![Value::Boolean(*flag)]))
            })?,
        )?;
    }
    let s = settings;
    cjson.set(
        "encode_sparse_array",
        lua.create_function(move |_, args: MultiValue| {
            let mut settings = s.lock();
            if let Some(Value::Boolean(convert)) = args.front() {
                settings.sparse_convert = *convert;
            }
            if let Some(ratio) = args.get(1).and_then(number_arg) {
                settings.sparse_ratio = ratio.max(0.0) as usize;
            }
            if let Some(safe) = args.get(2).and_then(number_arg) {
                settings.sparse_safe = safe.max(0.0) as usize;
            }
            Ok(ok(vec![
                Value::Boolean(settings.sparse_convert),
                Value::Integer(settings.sparse_ratio as i64),
                Value::Integer(settings.sparse_safe as i64),
            ]))
        })?,
    )?;
    Ok(cjson)
}

fn encode(
    value: &Value,
    out: &mut Vec<u8>,
    depth: usize,
    settings: &Settings,
) -> Result<(), String> {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(ud) if ud.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => encode_number(*i as f64, out, settings)?,
        Value::Number(n) => encode_number(*n, out, settings)?,
        Value::String(s) => encode_string(&s.as_bytes(), out),
        Value::Table(table) => encode_table(table, out, depth + 1, settings)?,
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            ))
        }
    }
    Ok(())
}

fn encode_number(n: f64, out: &mut Vec<u8>, settings: &Settings) -> Result<(), String> {
    if !n.is_finite() {
        if !settings.encode_invalid_numbers {
            return Err("Cannot serialise number: must not be NaN or Inf".to_string());
        }
        let text = if n.is_nan() {
            "nan"
        } else if n > 0.0 {
            "inf"
        } else {
            "-inf"
        };
        out.extend_from_slice(text.as_bytes());
        return Ok(());
    }
    out.extend_from_slice(format_g(n, settings.precision).as_bytes());
    Ok(())
}

fn encode_string(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => {
                out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
            }
            b => out.push(b),
        }
    }
    out.push(b'"');
}

/// The array length of `table` if its keys are exactly positive integers
/// (lua-cjson's `lua_array_length`): None for an object.
fn array_length(table: &Table, settings: &Settings) -> Result<Option<usize>, String> {
    let mut max = 0usize;
    let mut items = 0usize;
    for pair in table.pairs::<Value, Value>() {
        let (key, _) = pair.map_err(|e| e.to_string())?;
        let index = match key {
            Value::Integer(i) if i >= 1 => i as usize,
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => n as usize,
            _ => return Ok(None),
        };
        max = max.max(index);
        items += 1;
    }
    if settings.sparse_ratio > 0
        && max > items * settings.sparse_ratio
        && max > settings.sparse_safe
    {
        if !settings.sparse_convert {
            return Err("Cannot serialise table: excessively sparse array".to_string());
        }
        return Ok(None);
    }
    Ok(Some(max))
}

fn encode_table(
    table: &Table,
    out: &mut Vec<u8>,
    depth: usize,
    settings: &Settings,
) -> Result<(), String> {
    if depth > settings.encode_max_depth {
        return Err(format!("Cannot serialise, excessive nesting ({depth})"));
    }
    match array_length(table, settings)? {
        Some(len) if len > 0 => {
            out.push(b'[');
            for i in 1..=len {
                if i > 1 {
                    out.push(b',');
                }
                let value: Value = table.raw_get(i).map_err(|e| e.to_string())?;
                encode(&value, out, depth, settings)?;
            }
            out.push(b']');
        }
        _ => {
            out.push(b'{');
            let mut first = true;
            for pair in table.pairs::<Value, Value>() {
                let (key, value) = pair.map_err(|e| e.to_string())?;
                if !first {
                    out.push(b',');
                }
                first = false;
                match &key {
                    Value::String(s) => encode_string(&s.as_bytes(), out),
                    Value::Integer(i) => {
                        encode_string(format_g(*i as f64, settings.precision).as_bytes(), out)
                    }
                    Value::Number(n) => {
                        encode_string(format_g(*n, settings.precision).as_bytes(), out)
                    }
                    _ => {
                        return Err(
                            "Cannot serialise table: table key must be a number or string"
                                .to_string(),
                        )
                    }
                }
                out.push(b':');
                encode(&value, out, depth, settings)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

struct Decoder<'a> {
    lua: &'a Lua,
    text: &'a [u8],
    pos: usize,
    depth: usize,
    max_depth: usize,
}

impl Decoder<'_> {
    fn skip_space(&mut self) {
        while self
            .text
            .get(self.pos)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.pos += 1;
        }
    }

    fn expected(&self, what: &str) -> String {
        let found = match self.text.get(self.pos) {
            None => "T_END",
            Some(b'{') => "T_OBJ_BEGIN",
            Some(b'}') => "T_OBJ_END",
            Some(b'[') => "T_ARR_BEGIN",
            Some(b']') => "T_ARR_END",
            Some(b',') => "T_COMMA",
            Some(b':') => "T_COLON",
            Some(b'"') => "T_STRING",
            _ => "invalid token",
        };
        format!(
            "Expected {what} but found {found} at character {}",
            self.pos + 1
        )
    }

    fn document(&mut self) -> Result<Value, String> {
        let value = self.value()?;
        self.skip_space();
        if self.pos < self.text.len() {
            return Err(self.expected("the end"));
        }
        Ok(value)
    }

    fn value(&mut self) -> Result<Value, String> {
        self.skip_space();
        let lua = self.lua;
        match self.text.get(self.pos) {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => {
                let bytes = self.string()?;
                Ok(Value::String(
                    lua.create_string(&bytes).map_err(|e| e.to_string())?,
                ))
            }
            Some(b't') if self.text[self.pos..].starts_with(b"true") => {
                self.pos += 4;
                Ok(Value::Boolean(true))
            }
            Some(b'f') if self.text[self.pos..].starts_with(b"false") => {
                self.pos += 5;
                Ok(Value::Boolean(false))
            }
            Some(b'n') if self.text[self.pos..].starts_with(b"null") => {
                self.pos += 4;
                Ok(null())
            }
            Some(b'-' | b'0'..=b'9' | b'i' | b'I' | b'n' | b'N') => self.number(),
            _ => Err(self.expected("value")),
        }
    }

    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth,
                self.pos + 1
            ));
        }
        Ok(())
    }

    fn object(&mut self) -> Result<Value, String> {
        self.enter()?;
        self.pos += 1;
        let table = self.lua.create_table().map_err(|e| e.to_string())?;
        self.skip_space();
        if self.text.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Table(table));
        }
        loop {
            self.skip_space();
            if self.text.get(self.pos) != Some(&b'"') {
                return Err(self.expected("object key string"));
            }
            let key = self.string()?;
            self.skip_space();
            if self.text.get(self.pos) != Some(&b':') {
                return Err(self.expected("colon"));
            }
            self.pos += 1;
            let value = self.value()?;
            let key = self.lua.create_string(&key).map_err(|e| e.to_string())?;
            table.raw_set(key, value).map_err(|e| e.to_string())?;
            self.skip_space();
            match self.text.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.expected("comma or object end")),
            }
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }

    fn array(&mut self) -> Result<Value, String> {
        self.enter()?;
        self.pos += 1;
        let table = self.lua.create_table().map_err(|e| e.to_string())?;
        self.skip_space();
        if self.text.get(self.pos) == Some(&b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Table(table));
        }
        let mut index = 1;
        loop {
            let value = self.value()?;
            table.raw_set(index, value).map_err(|e| e.to_string())?;
            index += 1;
            self.skip_space();
            match self.text.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.expected("comma or array end")),
            }
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }

    fn string(&mut self) -> Result<Vec<u8>, String> {
        let start = self.pos;
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.text.get(self.pos) else {
                self.pos = start;
                return Err(format!(
                    "Expected value but found unexpected end of string at character {}",
                    start + 1
                ));
            };
            self.pos += 1;
            match b {
                b'"' => return Ok(out),
                b'\\' => {
                    let Some(&escape) = self.text.get(self.pos) else {
                        return Err(format!(
                            "Expected value but found invalid escape code at character {}",
                            start + 1
                        ));
                    };
                    self.pos += 1;
                    match escape {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let code = self.hex4(start)?;
                            let code = if (0xD800..0xDC00).contains(&code)
                                && self.text[self.pos..].starts_with(b"\\u")
                            {
                                self.pos += 2;
                                let low = self.hex4(start)?;
                                0x10000
                                    + ((code - 0xD800) << 10)
                                    + (low.wrapping_sub(0xDC00) & 0x3FF)
                            } else {
                                code
                            };
                            let c = char::from_u32(code).unwrap_or('\u{FFFD}');
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => {
                            return Err(format!(
                                "Expected value but found invalid escape code at character {}",
                                start + 1
                            ))
                        }
                    }
                }
                b => out.push(b),
            }
        }
    }

    fn hex4(&mut self, start: usize) -> Result<u32, String> {
        let digits = self.text.get(self.pos..self.pos + 4).ok_or_else(|| {
            format!(
                "Expected value but found invalid unicode escape code at character {}",
                start + 1
            )
        })?;
        let text = std::str::from_utf8(digits).map_err(|_| "invalid unicode escape".to_string())?;
        let code = u32::from_str_radix(text, 16).map_err(|_| {
            format!(
                "Expected value but found invalid unicode escape code at character {}",
                start + 1
            )
        })?;
        self.pos += 4;
        Ok(code)
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.pos;
        while self
            .text
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
        {
            self.pos += 1;
        }
        let token = std::str::from_utf8(&self.text[start..self.pos]).unwrap_or("");
        let lower = token.to_ascii_lowercase();
        let value = match lower.as_str() {
            "nan" | "-nan" => Some(f64::NAN),
            "inf" | "infinity" => Some(f64::INFINITY),
            "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
            _ if lower.starts_with("0x") || lower.starts_with("-0x") => {
                let (negative, digits) = match lower.strip_prefix('-') {
                    Some(rest) => (true, &rest[2..]),
                    None => (false, &lower[2..]),
                };
                i64::from_str_radix(digits, 16).ok().map(|v| {
                    if negative {
                        -(v as f64)
                    } else {
                        v as f64
                    }
                })
            }
            _ => token.parse::<f64>().ok(),
        };
        match value {
            Some(n) => Ok(Value::Number(n)),
            None => {
                self.pos = start;
                Err(self.expected("value"))
            }
        }
    }
}
