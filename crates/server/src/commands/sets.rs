//! (being written)

use super::CommandSpec;

pub fn commands() -> Vec<CommandSpec> {
    Vec::new()
}
