//! Error tables as Redis makes them for Lua (`luaPushErrorBuff`), for the
//! hooks that answer through mlua (`setresp`, `acl_check_cmd`, FUNCTION
//! LOAD's `register_function`). A command's reply reaches Lua through
//! `engram_lua_calls`, which pushes it onto Lua's stack as Redis's
//! `redisProtocolToLuaType` does.

use mlua::{Lua, Table};

pub use engram_lua_calls::error_text;

/// The error table Redis makes of an error reply `-CODE message`
/// (`luaPushErrorBuff`), marked as already counted in the error stats.
pub fn error_table(lua: &Lua, line: &[u8]) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.raw_set("err", lua.create_string(error_text(line))?)?;
    table.raw_set("ignore_error_stats_update", true)?;
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_tables_say_the_code_and_that_they_are_counted() {
        let lua = Lua::new();
        let table = error_table(&lua, b"-WRONGTYPE bad\r\n").unwrap();
        assert_eq!(table.raw_get::<String>("err").unwrap(), "WRONGTYPE bad");
        assert!(table.raw_get::<bool>("ignore_error_stats_update").unwrap());
    }
}
