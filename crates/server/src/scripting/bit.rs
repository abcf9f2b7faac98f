//! `bit` (LuaBitOp 1.0, as Redis ships it): 32-bit operations on Lua
//! numbers, each result a signed 32-bit number. Functions return
//! `ok, result` (see `cjson`).

use mlua::{Lua, MultiValue, Table, Value};

type Unary = (&'static str, fn(i32) -> i32);
type Fold = (&'static str, fn(i32, i32) -> i32);
type Shift = (&'static str, fn(i32, u32) -> i32);

/// LuaBitOp's conversion: the number rounded (to nearest, ties to even)
/// and taken modulo 2^32, as the 2^52+2^51 addition trick does.
fn tobit(n: f64) -> i32 {
    let biased = n + 6_755_399_441_055_744.0;
    biased.to_bits() as u32 as i32
}

fn number(value: Option<&Value>, position: usize, name: &str) -> Result<f64, String> {
    match value {
        Some(Value::Integer(i)) => Ok(*i as f64),
        Some(Value::Number(n)) => Ok(*n),
        Some(Value::String(s)) => s
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| {
                format!("bad argument #{position} to '{name}' (number expected, got string)")
            }),
        other => Err(format!(
            "bad argument #{position} to '{name}' (number expected, got {})",
            other.map_or("no value", |v| v.type_name())
        )),
    }
}

fn reply(lua: &Lua, result: Result<Value, String>) -> mlua::Result<MultiValue> {
    Ok(match result {
        Ok(value) => MultiValue::from_vec(vec![Value::Boolean(true), value]),
        Err(message) => MultiValue::from_vec(vec![
            Value::Boolean(false),
            Value::String(lua.create_string(message)?),
        ]),
    })
}

fn int(value: i32) -> Value {
    Value::Number(value as f64)
}

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let bit = lua.create_table()?;
    let unary: [Unary; 3] = [
        ("tobit", |x| x),
        ("bnot", |x| !x),
        ("bswap", |x| x.swap_bytes()),
    ];
    for (name, op) in unary {
        bit.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let result = number(args.front(), 1, name).map(|n| int(op(tobit(n))));
                reply(lua, result)
            })?,
        )?;
    }
    let folds: [Fold; 3] = [
        ("band", |a, b| a & b),
        ("bor", |a, b| a | b),
        ("bxor", |a, b| a ^ b),
    ];
    for (name, op) in folds {
        bit.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let result = (|| {
                    let mut acc = tobit(number(args.front(), 1, name)?);
                    for (i, value) in args.iter().enumerate().skip(1) {
                        acc = op(acc, tobit(number(Some(value), i + 1, name)?));
                    }
                    Ok(int(acc))
                })();
                reply(lua, result)
            })?,
        )?;
    }
    let shifts: [Shift; 5] = [
        ("lshift", |x, n| ((x as u32) << n) as i32),
        ("rshift", |x, n| ((x as u32) >> n) as i32),
        ("arshift", |x, n| x >> n),
        ("rol", |x, n| (x as u32).rotate_left(n) as i32),
        ("ror", |x, n| (x as u32).rotate_right(n) as i32),
    ];
    for (name, op) in shifts {
        bit.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let result = (|| {
                    let x = tobit(number(args.front(), 1, name)?);
                    let n = tobit(number(args.get(1), 2, name)?) as u32 & 31;
                    Ok(int(op(x, n)))
                })();
                reply(lua, result)
            })?,
        )?;
    }
    bit.set(
        "tohex",
        lua.create_function(|lua, args: MultiValue| {
            let result = (|| {
                let x = tobit(number(args.front(), 1, "tohex")?) as u32;
                let mut digits = match args.get(1) {
                    None | Some(Value::Nil) => 8,
                    value => tobit(number(value, 2, "tohex")?),
                };
                let upper = digits < 0;
                if upper {
                    digits = -digits;
                }
                let digits = digits.min(8) as usize;
                let masked = if digits < 8 {
                    x & ((1u32 << (4 * digits)) - 1)
                } else {
                    x
                };
                let text = if upper {
                    format!("{masked:0digits$X}")
                } else {
                    format!("{masked:0digits$x}")
                };
                Ok(Value::String(
                    lua.create_string(text).map_err(|e| e.to_string())?,
                ))
            })();
            reply(lua, result)
        })?,
    )?;
    Ok(bit)
}

#[cfg(test)]
mod tests {
    use super::tobit;

    #[test]
    fn tobit_wraps_and_rounds() {
        assert_eq!(tobit(1.0), 1);
        assert_eq!(tobit(4294967295.0), -1);
        assert_eq!(tobit(4294967296.0 + 5.0), 5);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(2.5), 2);
    }
}
