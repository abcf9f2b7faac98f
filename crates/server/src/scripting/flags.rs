//! Script flags: EVAL's `#!lua flags=...` shebang and FUNCTION's
//! `flags={...}`, with Redis 7.0's names and errors.

/// What a script or function declares about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptFlags {
    /// An EVAL script without a shebang: Redis's pre-7.0 rules (writes
    /// allowed, OOM checked per command, keys across slots).
    pub compat: bool,
    pub no_writes: bool,
    pub allow_oom: bool,
    pub allow_stale: bool,
    pub no_cluster: bool,
    pub allow_cross_slot_keys: bool,
}

/// Each flag's name, in the order FUNCTION LIST shows them.
pub const NAMES: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

impl ScriptFlags {
    /// Sets the flag called `name`; false if there is none.
    pub fn set(&mut self, name: &[u8]) -> bool {
        match name {
            b"no-writes" => self.no_writes = true,
            b"allow-oom" => self.allow_oom = true,
            b"allow-stale" => self.allow_stale = true,
            b"no-cluster" => self.no_cluster = true,
            b"allow-cross-slot-keys" => self.allow_cross_slot_keys = true,
            _ => return false,
        }
        true
    }

    /// The names of the flags set, in `NAMES` order.
    pub fn names(&self) -> Vec<&'static str> {
        let set = [
            self.no_writes,
            self.allow_oom,
            self.allow_stale,
            self.no_cluster,
            self.allow_cross_slot_keys,
        ];
        NAMES
            .iter()
            .zip(set)
            .filter(|(_, on)| *on)
            .map(|(name, _)| *name)
            .collect()
    }
}

/// Reads the shebang of an EVAL script: its flags and how many bytes the
/// shebang line takes (the line feed stays with the code, so line numbers
/// are the user's). Errors are Redis's reply texts.
pub fn parse_shebang(body: &[u8]) -> Result<(ScriptFlags, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((
            ScriptFlags {
                compat: true,
                ..ScriptFlags::default()
            },
            0,
        ));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid script shebang".to_string());
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let mut parts = line.split_ascii_whitespace();
    let Some(engine) = parts.next() else {
        return Err("ERR Invalid engine in script shebang".to_string());
    };
    if engine != "#!lua" {
        return Err(format!("ERR Unexpected engine in script shebang: {engine}"));
    }
    let mut flags = ScriptFlags::default();
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {part}"));
        };
        if list.is_empty() {
            continue;
        }
        for name in list.split(',') {
            if !flags.set(name.as_bytes()) {
                return Err(format!("ERR Unexpected flag in script shebang: {name}"));
            }
        }
    }
    Ok((flags, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs() {
        let (flags, len) = parse_shebang(b"return 1").unwrap();
        assert!(flags.compat);
        assert_eq!(len, 0);
        let (flags, len) = parse_shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(!flags.compat && flags.no_writes && flags.allow_oom && !flags.allow_stale);
        assert_eq!(len, 31);
        assert_eq!(
            parse_shebang(b"#!lua").unwrap_err(),
            "ERR Invalid script shebang"
        );
        assert_eq!(
            parse_shebang(b"#!python\n").unwrap_err(),
            "ERR Unexpected engine in script shebang: #!python"
        );
        assert_eq!(
            parse_shebang(b"#!lua flags=bad\n").unwrap_err(),
            "ERR Unexpected flag in script shebang: bad"
        );
        assert_eq!(
            parse_shebang(b"#!lua name=x\n").unwrap_err(),
            "ERR Unknown lua shebang option: name=x"
        );
    }
}
