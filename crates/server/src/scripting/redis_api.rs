//! The Rust side of the `redis` table and of `math.random`: the helpers
//! `sandbox.lua` builds the API from (the per-run ones, `call` and
//! `setresp`, are in `run`).

use mlua::{Lua, Table, Value};
use parking_lot::Mutex;

/// Redis's `redisLrand48` state: one generator for the process, as in
/// Redis (7.0 does not reseed it per script).
static LRAND48: Mutex<u64> = Mutex::new(0x1234_ABCD_330E);
const LRAND48_MAX: i64 = i32::MAX as i64;

fn lrand48() -> i64 {
    let mut x = LRAND48.lock();
    *x = (x.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB)) & ((1 << 48) - 1);
    (*x >> 17) as i64
}

fn srand48(seed: i32) {
    *LRAND48.lock() = ((seed as u32 as u64) << 16) | 0x330E;
}

/// Reseeds the scripts' generator (a replicated entry's seed, so every
/// node's script draws the same numbers).
pub fn reseed(seed: u64) {
    srand48(seed as i32);
}

/// `redis_math_random`'s number in [0, 1).
fn random_fraction() -> f64 {
    (lrand48() % LRAND48_MAX) as f64 / LRAND48_MAX as f64
}

/// The table of helpers `sandbox.lua` receives as `rust`.
pub fn helpers(lua: &Lua) -> mlua::Result<Table> {
    let rust = lua.create_table()?;
    rust.set(
        "sha1hex",
        lua.create_function(|lua, value: Value| {
            let text = match &value {
                Value::String(s) => super::sha1_hex(&s.as_bytes()),
                Value::Integer(_) | Value::Number(_) => {
                    let shown = lua.coerce_string(value.clone())?;
                    super::sha1_hex(&shown.map(|s| s.as_bytes().to_vec()).unwrap_or_default())
                }
                _ => super::sha1_hex(b""),
            };
            Ok(text)
        })?,
    )?;
    rust.set(
        "log",
        lua.create_function(|_, (level, message): (i64, mlua::String)| {
            let message = message.to_string_lossy();
            match level {
                0 => log::debug!("{message}"),
                1 => log::debug!("{message}"),
                2 => log::info!("{message}"),
                _ => log::warn!("{message}"),
            }
            Ok(())
        })?,
    )?;
    rust.set(
        "raised_text",
        lua.create_function(|_, value: Value| {
            Ok(match &value {
                Value::Error(e) => super::run::raised_text(e),
                _ => None,
            })
        })?,
    )?;
    rust.set("rand", lua.create_function(|_, ()| Ok(random_fraction()))?)?;
    rust.set(
        "srand",
        lua.create_function(|_, seed: f64| {
            srand48(seed as i32);
            Ok(())
        })?,
    )?;
    rust.set("version", crate::REDIS_VERSION)?;
    rust.set("version_num", version_num(crate::REDIS_VERSION))?;
    rust.set("cjson", super::cjson::library(lua)?)?;
    rust.set("bit", super::bit::library(lua)?)?;
    rust.set("cmsgpack", super::cmsgpack::library(lua)?)?;
    Ok(rust)
}

/// `7.0.15` as Redis's REDIS_VERSION_NUM: 0x0007000f.
fn version_num(version: &str) -> i64 {
    version
        .split('.')
        .map(|part| part.parse::<i64>().unwrap_or(0))
        .fold(0, |acc, part| (acc << 8) | part)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_number() {
        assert_eq!(version_num("7.0.15"), 0x0007000f);
    }

    #[test]
    fn lrand48_is_the_c_sequence() {
        // glibc's lrand48() after srand48(0): 366850414, 1610402240, ...
        srand48(0);
        assert_eq!(lrand48(), 366850414);
        assert_eq!(lrand48(), 1610402240);
    }
}
