//! The commands as ACL rules name them: one id per command and per
//! subcommand (`config|get`), each with its ACL categories, so a selector
//! is a bitmap over ids and `+@read` sets the bits of a category.
//!
//! Ids: a top-level command's is its index in the command table; the
//! subcommands of the containers (CLIENT, CONFIG, ACL, ...) follow, in
//! the order of `descriptions`' subcommand table. A container's own id
//! stands for its subcommands the table does not know.

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::commands::{self, descriptions, CommandSpec, TABLE};
use crate::resp::Args;

/// Redis's ACL categories, in the order ACL CAT lists them (a category's
/// bit in `Entry::categories` is its index here).
pub const CATEGORIES: [&str; 21] = descriptions::CATEGORY_ORDER;

/// One command or subcommand.
pub struct Entry {
    /// `get`, or `config|get` for a subcommand.
    pub name: String,
    /// Bit i set: in category `CATEGORIES[i]`.
    pub categories: u32,
    /// For a container: its subcommands' ids. Allowing or denying a
    /// container does the same to all of them, as in Redis.
    pub children: Vec<usize>,
    /// For a subcommand: its container's id.
    pub parent: Option<usize>,
}

pub struct Catalog {
    pub entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
}

impl Catalog {
    /// The number of ids (the length of a selector's bitmap in bits).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The id of `name` (`get`, `config|get`; any case).
    pub fn id(&self, name: &str) -> Option<usize> {
        self.by_name.get(&name.to_ascii_lowercase()).copied()
    }

    /// The bit of category `name` (any case).
    pub fn category(name: &str) -> Option<u32> {
        CATEGORIES
            .iter()
            .position(|c| c.eq_ignore_ascii_case(name))
            .map(|i| 1 << i)
    }

    /// The id a call is checked against: its subcommand's, for a
    /// container called with one the table knows; else its command's.
    pub fn id_of_call(&self, index: usize, spec: &CommandSpec, args: &Args) -> usize {
        if args.len() > 1 && !self.entries[index].children.is_empty() {
            if let Some(sub) = descriptions::subcommand(spec.name, args.get(1)) {
                if let Some(&id) = self.by_name.get(sub.name) {
                    return id;
                }
            }
        }
        index
    }
}

/// The categories of a command Redis does not have (Engram's own), from
/// its flags the way Redis derives the implicit ones.
fn categories_from_flags(spec: &CommandSpec) -> Vec<&'static str> {
    let mut categories = Vec::new();
    if spec.is(commands::WRITE) {
        categories.push("write");
    }
    if spec.is(commands::READONLY) {
        categories.push("read");
    }
    if spec.is(commands::ADMIN) {
        categories.extend(["admin", "dangerous"]);
    }
    if spec.is(commands::PUBSUB) {
        categories.push("pubsub");
    }
    categories.push(if spec.is(commands::FAST) {
        "fast"
    } else {
        "slow"
    });
    categories
}

fn bits(categories: &[&str]) -> u32 {
    categories
        .iter()
        .filter_map(|c| Catalog::category(c))
        .fold(0, |all, bit| all | bit)
}

pub static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    let mut entries: Vec<Entry> = TABLE
        .iter()
        .map(|spec| Entry {
            name: spec.name.to_string(),
            categories: match descriptions::command(spec.name) {
                Some(description) => bits(&description.categories()),
                None => bits(&categories_from_flags(spec)),
            },
            children: Vec::new(),
            parent: None,
        })
        .collect();
    let mut by_name: HashMap<String, usize> = entries
        .iter()
        .enumerate()
        .map(|(id, e)| (e.name.clone(), id))
        .collect();
    for sub in descriptions::all_subcommands() {
        let container = sub.name.split('|').next().expect("split yields one part");
        let Some(&parent) = by_name.get(container) else {
            continue;
        };
        let id = entries.len();
        entries.push(Entry {
            name: sub.name.to_string(),
            categories: bits(&sub.categories()),
            children: Vec::new(),
            parent: Some(parent),
        });
        entries[parent].children.push(id);
        by_name.insert(sub.name.to_string(), id);
    }
    Catalog { entries, by_name }
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_subcommands_have_ids_and_redis_categories() {
        let get = CATALOG.id("GET").expect("get");
        let entry = &CATALOG.entries[get];
        for category in ["read", "string", "fast"] {
            assert_ne!(entry.categories & Catalog::category(category).unwrap(), 0);
        }
        assert_eq!(entry.categories & Catalog::category("write").unwrap(), 0);
        let config = CATALOG.id("config").expect("config");
        let config_get = CATALOG.id("config|get").expect("config|get");
        assert_eq!(CATALOG.entries[config_get].parent, Some(config));
        assert!(CATALOG.entries[config].children.contains(&config_get));
        let set = CATALOG.entries[config_get].categories;
        assert_ne!(set & Catalog::category("admin").unwrap(), 0);
        assert!(CATALOG.id("config|nope").is_none());
        assert!(Catalog::category("nope").is_none());
    }
}
