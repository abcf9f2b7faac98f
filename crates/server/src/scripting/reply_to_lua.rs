//! A command's reply, as the server wrote it in RESP, into the Lua value
//! `redis.call` returns (Redis's `redisProtocolToLuaType`): integers are
//! numbers, bulk strings strings, a null bulk or null array `false`,
//! arrays tables, a status `{ok=...}`, an error `{err=...}`; with
//! `redis.setresp(3)` also maps `{map={...}}`, sets `{set={k=true}}`,
//! doubles `{double=n}`, big numbers `{big_number=s}`, verbatim strings
//! `{verbatim_string={format=..., string=...}}`, booleans, and null as
//! nil. Attributes are skipped.

use mlua::{Lua, Table, Value};

/// The Lua value of the one reply in `resp`.
pub fn convert(lua: &Lua, resp: &[u8]) -> mlua::Result<Value> {
    let mut parser = Parser { lua, resp, pos: 0 };
    parser.value()
}

/// The error table Redis makes of an error reply `-CODE message`
/// (`luaPushErrorBuff`), marked as already counted in the error stats.
pub fn error_table(lua: &Lua, line: &[u8]) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.raw_set("err", lua.create_string(error_text(line))?)?;
    table.raw_set("ignore_error_stats_update", true)?;
    Ok(table)
}

/// `-CODE message` (or `message`) as `CODE message` (`ERR message`).
pub fn error_text(line: &[u8]) -> Vec<u8> {
    let (code, message): (&[u8], &[u8]) = match line.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&b| b == b' ') {
            Some(space) => (&rest[..space], &rest[space + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", line),
    };
    let trimmed = {
        let start = message
            .iter()
            .position(|b| !matches!(b, b'\r' | b'\n'))
            .unwrap_or(message.len());
        let end = message
            .iter()
            .rposition(|b| !matches!(b, b'\r' | b'\n'))
            .map_or(start, |i| i + 1);
        &message[start..end.max(start)]
    };
    let mut text = code.to_vec();
    text.push(b' ');
    text.extend_from_slice(trimmed);
    text
}

struct Parser<'a> {
    lua: &'a Lua,
    resp: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn line(&mut self) -> mlua::Result<&[u8]> {
        let rest = &self.resp[self.pos..];
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| mlua::Error::runtime("truncated reply"))?;
        self.pos += end + 2;
        Ok(&rest[..end])
    }

    fn number(&mut self) -> mlua::Result<i64> {
        let line = self.line()?;
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| mlua::Error::runtime("bad length in reply"))
    }

    fn bytes(&mut self, len: usize) -> mlua::Result<&[u8]> {
        let end = self.pos + len;
        if end + 2 > self.resp.len() {
            return Err(mlua::Error::runtime("truncated reply"));
        }
        let bytes = &self.resp[self.pos..end];
        self.pos = end + 2;
        Ok(bytes)
    }

    fn single(&self, key: &str, value: impl mlua::IntoLua) -> mlua::Result<Value> {
        let table = self.lua.create_table()?;
        table.raw_set(key, value)?;
        Ok(Value::Table(table))
    }

    fn value(&mut self) -> mlua::Result<Value> {
        let Some(&kind) = self.resp.get(self.pos) else {
            return Err(mlua::Error::runtime("empty reply"));
        };
        self.pos += 1;
        let lua = self.lua;
        Ok(match kind {
            b'+' => {
                let line = self.line()?.to_vec();
                self.single("ok", lua.create_string(&line)?)?
            }
            b'-' => {
                let mut line = b"-".to_vec();
                line.extend_from_slice(self.line()?);
                Value::Table(error_table(lua, &line)?)
            }
            b':' => Value::Number(self.number()? as f64),
            b'$' => match self.number()? {
                len if len < 0 => Value::Boolean(false),
                len => Value::String(lua.create_string(self.bytes(len as usize)?)?),
            },
            b'*' | b'>' => match self.number()? {
                len if len < 0 => Value::Boolean(false),
                len => {
                    let table = lua.create_table_with_capacity(len as usize, 0)?;
                    for i in 1..=len {
                        let element = self.value()?;
                        table.raw_set(i, element)?;
                    }
                    Value::Table(table)
                }
            },
            b'%' => {
                let len = self.number()?;
                let map = lua.create_table()?;
                for _ in 0..len {
                    let key = self.value()?;
                    let value = self.value()?;
                    if !key.is_nil() {
                        map.raw_set(key, value)?;
                    }
                }
                self.single("map", map)?
            }
            b'~' => {
                let len = self.number()?;
                let set = lua.create_table()?;
                for _ in 0..len {
                    let member = self.value()?;
                    if !member.is_nil() {
                        set.raw_set(member, true)?;
                    }
                }
                self.single("set", set)?
            }
            b'_' => {
                self.line()?;
                Value::Nil
            }
            b'#' => Value::Boolean(self.line()? == b"t"),
            b',' => {
                let line = self.line()?;
                let text = std::str::from_utf8(line).unwrap_or("nan");
                let value = match text {
                    "inf" => f64::INFINITY,
                    "-inf" => f64::NEG_INFINITY,
                    other => other.parse().unwrap_or(f64::NAN),
                };
                self.single("double", value)?
            }
            b'(' => {
                let line = self.line()?.to_vec();
                self.single("big_number", lua.create_string(&line)?)?
            }
            b'=' => {
                let len = self.number()?.max(0) as usize;
                let bytes = self.bytes(len)?.to_vec();
                let (format, text) = if bytes.len() >= 4 && bytes[3] == b':' {
                    (&bytes[..3], &bytes[4..])
                } else {
                    (&b"txt"[..], &bytes[..])
                };
                let verbatim = lua.create_table()?;
                verbatim.raw_set("string", lua.create_string(text)?)?;
                verbatim.raw_set("format", lua.create_string(format)?)?;
                self.single("verbatim_string", verbatim)?
            }
            b'|' => {
                let len = self.number()?;
                for _ in 0..2 * len {
                    self.value()?;
                }
                self.value()?
            }
            other => {
                return Err(mlua::Error::runtime(format!(
                    "unexpected reply type {:?}",
                    other as char
                )))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_texts_as_redis() {
        assert_eq!(error_text(b"-ERR bad thing\r\n"), b"ERR bad thing");
        assert_eq!(error_text(b"-WRONGTYPE x y"), b"WRONGTYPE x y");
        assert_eq!(error_text(b"-NOCODE"), b"ERR NOCODE");
        assert_eq!(error_text(b"plain text"), b"ERR plain text");
    }

    #[test]
    fn resp2_and_resp3_values() {
        let lua = Lua::new();
        let v = convert(&lua, b"*3\r\n:1\r\n$-1\r\n$3\r\nabc\r\n").unwrap();
        let t = v.as_table().unwrap();
        assert_eq!(t.raw_get::<f64>(1).unwrap(), 1.0);
        assert!(!t.raw_get::<bool>(2).unwrap());
        assert_eq!(t.raw_get::<String>(3).unwrap(), "abc");
        let v = convert(&lua, b"%1\r\n+a\r\n,1.5\r\n").unwrap();
        let map: Table = v.as_table().unwrap().raw_get("map").unwrap();
        assert_eq!(map.pairs::<Value, Value>().count(), 1);
        assert!(convert(&lua, b"_\r\n").unwrap().is_nil());
    }
}
