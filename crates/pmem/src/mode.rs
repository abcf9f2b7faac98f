use std::fmt;

/// How a region reached persistence, decided when it is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Real persistent memory: the mapping was made with `MAP_SYNC`, so a
    /// flushed and fenced cache line is durable with no `msync`.
    Dax,
    /// A shared mapping of a regular file in the page cache: durable against
    /// a process crash at once, against power loss after `msync`.
    Emulated,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Dax => "dax",
            Mode::Emulated => "emulated",
        })
    }
}

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ModeChoice {
    /// Try `MAP_SYNC`; fall back to emulated when the file system refuses.
    #[default]
    Auto,
    /// Insist on DAX; opening fails if `MAP_SYNC` is refused.
    Dax,
    /// Never try `MAP_SYNC`.
    Emulated,
}

impl std::str::FromStr for ModeChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(ModeChoice::Auto),
            "dax" => Ok(ModeChoice::Dax),
            "emulated" => Ok(ModeChoice::Emulated),
            other => Err(format!(
                "unknown persistence mode '{other}' (expected auto, dax or emulated)"
            )),
        }
    }
}
