//! A selector's command permissions written back as rules (ACL LIST,
//! ACL GETUSER, the ACL file), the way Redis 7.0 writes them: `+@all` or
//! `-@all` first (whether future commands are allowed), then categories
//! chosen greedily while each covers more commands it should than ones it
//! should not, then the single commands that still differ. Applying the
//! rules to an empty selector gives back the same bitmap; a test checks.

use super::catalog::{CATALOG, CATEGORIES};
use super::selector::Selector;

/// How many commands of category `mask` `selector` allows and denies.
fn count(selector: &Selector, mask: u32) -> (usize, usize) {
    let (mut on, mut off) = (0, 0);
    for (id, entry) in CATALOG.entries.iter().enumerate() {
        if entry.categories & mask != 0 {
            if selector.allows_id(id) {
                on += 1;
            } else {
                off += 1;
            }
        }
    }
    (on, off)
}

pub fn command_rules(selector: &Selector) -> String {
    let additive = !selector.can_run_future_commands();
    let mut rules: Vec<String> = Vec::new();
    let mut fake = Selector::default();
    if additive {
        rules.push("-@all".into());
    } else {
        rules.push("+@all".into());
        fake.set_all_commands(true);
    }
    // `remaining` starts as the selector and has each chosen category
    // undone, so the next choice fits what is left to say.
    let mut remaining = selector.clone();
    let mut applied = [false; CATEGORIES.len()];
    loop {
        let mut best = None;
        let (mut min_diff, mut max_same) = (usize::MAX, 0);
        for (i, _) in CATEGORIES.iter().enumerate() {
            if applied[i] {
                continue;
            }
            let (on, off) = count(&remaining, 1 << i);
            let (diff, same) = if additive { (off, on) } else { (on, off) };
            if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                best = Some(i);
                min_diff = diff;
                max_same = same;
            }
        }
        let Some(best) = best else { break };
        fake.set_category(1 << best, additive);
        remaining.set_category(1 << best, !additive);
        rules.push(format!(
            "{}@{}",
            if additive { '+' } else { '-' },
            CATEGORIES[best]
        ));
        applied[best] = true;
    }
    for (id, entry) in CATALOG.entries.iter().enumerate() {
        let wanted = selector.allows_id(id);
        if wanted != fake.allows_id(id) {
            rules.push(format!("{}{}", if wanted { '+' } else { '-' }, entry.name));
            fake.set_command(id, wanted);
        }
        if !wanted {
            for first in selector.first_args_of(id) {
                rules.push(format!(
                    "+{}|{}",
                    entry.name,
                    String::from_utf8_lossy(first)
                ));
            }
        }
    }
    debug_assert!(
        fake.same_commands(selector),
        "ACL rules {rules:?} do not rebuild the selector's commands"
    );
    rules.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(rules: &[&str]) -> String {
        let mut s = Selector::default();
        for rule in rules {
            s.apply(rule.as_bytes()).unwrap();
        }
        command_rules(&s)
    }

    fn rebuilt_matches(rules: &[&str]) {
        let mut s = Selector::default();
        for rule in rules {
            s.apply(rule.as_bytes()).unwrap();
        }
        let text = command_rules(&s);
        let mut again = Selector::default();
        for rule in text.split(' ') {
            again.apply(rule.as_bytes()).unwrap();
        }
        assert!(again.same_commands(&s), "{rules:?} described as {text}");
    }

    #[test]
    fn simple_rules_come_back_as_written() {
        assert_eq!(described(&["+@all"]), "+@all");
        assert_eq!(described(&[]), "-@all");
        assert_eq!(described(&["+get"]), "-@all +get");
        assert_eq!(described(&["+@all", "-flushall"]), "+@all -flushall");
        assert_eq!(described(&["+select|0"]), "-@all +select|0");
        assert_eq!(described(&["+@hash"]), "-@all +@hash");
    }

    #[test]
    fn descriptions_rebuild_the_same_bitmap() {
        rebuilt_matches(&["+@read", "-get", "+config|get", "+set"]);
        rebuilt_matches(&["+@all", "-@dangerous", "+client|list", "-@write"]);
        rebuilt_matches(&["+@string", "+@list", "-lpush", "+debug"]);
        rebuilt_matches(&["+@all", "-config", "+config|get"]);
    }
}
