//! A selector: one set of permissions (commands, key patterns, channel
//! patterns). A user has a root selector and may have more; a call is
//! allowed when any one selector allows all of it (Redis 7.0's model).
//!
//! Commands are a bitmap over the catalog's ids. `+@all` also sets the
//! "future commands" mark, which only `-@all` clears: it is what makes a
//! description start with `+@all` rather than `-@all`.

use super::catalog::{Catalog, CATALOG};
use super::RuleError;
use crate::glob;

/// Key access a pattern grants (`%R~`, `%W~`, `~` for both).
pub const READ: u8 = 1;
pub const WRITE: u8 = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    pub pattern: Vec<u8>,
    pub access: u8,
}

impl KeyPattern {
    /// As ACL rules write it: `~p`, `%R~p`, `%W~p`.
    pub fn describe(&self) -> String {
        let prefix = match self.access {
            READ => "%R~",
            WRITE => "%W~",
            _ => "~",
        };
        format!("{prefix}{}", String::from_utf8_lossy(&self.pattern))
    }
}

#[derive(Clone, Debug)]
pub struct Selector {
    allowed: Vec<u64>,
    /// Set by `+@all`, cleared by `-@all` only.
    future: bool,
    /// Every command allowed: no bit needs testing (cleared by any `-`).
    pub all_commands: bool,
    /// Command id → the first arguments allowed for it though the command
    /// is not (`+select|0`).
    first_args: Vec<(usize, Vec<Vec<u8>>)>,
    pub all_keys: bool,
    pub keys: Vec<KeyPattern>,
    pub all_channels: bool,
    pub channels: Vec<Vec<u8>>,
}

impl Default for Selector {
    /// Allows nothing.
    fn default() -> Selector {
        Selector {
            allowed: vec![0; CATALOG.len().div_ceil(64)],
            future: false,
            all_commands: false,
            first_args: Vec::new(),
            all_keys: false,
            keys: Vec::new(),
            all_channels: false,
            channels: Vec::new(),
        }
    }
}

impl Selector {
    pub fn allows_id(&self, id: usize) -> bool {
        self.allowed[id / 64] & (1 << (id % 64)) != 0
    }

    pub fn can_run_future_commands(&self) -> bool {
        self.future
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.allowed[id / 64] |= 1 << (id % 64);
        } else {
            self.allowed[id / 64] &= !(1 << (id % 64));
            self.all_commands = false;
        }
    }

    /// Allows or denies a command, and with a container all its
    /// subcommands.
    pub fn set_command(&mut self, id: usize, on: bool) {
        self.set_bit(id, on);
        self.first_args.retain(|(of, _)| *of != id);
        for &child in &CATALOG.entries[id].children {
            self.set_bit(child, on);
        }
    }

    /// Every command (and subcommand) in the categories of `mask`.
    pub fn set_category(&mut self, mask: u32, on: bool) {
        for id in 0..CATALOG.len() {
            if CATALOG.entries[id].categories & mask != 0 {
                self.set_command(id, on);
            }
        }
    }

    pub fn set_all_commands(&mut self, on: bool) {
        let fill = if on { u64::MAX } else { 0 };
        self.allowed.iter_mut().for_each(|w| *w = fill);
        self.future = on;
        self.all_commands = on;
        self.first_args.clear();
    }

    /// The first arguments allowed for command `id` though it is not.
    pub fn first_args_of(&self, id: usize) -> &[Vec<u8>] {
        self.first_args
            .iter()
            .find(|(of, _)| *of == id)
            .map_or(&[], |(_, args)| args.as_slice())
    }

    pub fn same_commands(&self, other: &Selector) -> bool {
        self.allowed == other.allowed
    }

    /// Applies one selector rule (Redis's ACLSetSelector).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let text = String::from_utf8_lossy(op);
        let lower = text.to_ascii_lowercase();
        match lower.as_str() {
            "allkeys" | "~*" => {
                self.all_keys = true;
                self.keys.clear();
            }
            "resetkeys" => {
                self.all_keys = false;
                self.keys.clear();
            }
            "allchannels" | "&*" => {
                self.all_channels = true;
                self.channels.clear();
            }
            "resetchannels" => {
                self.all_channels = false;
                self.channels.clear();
            }
            "allcommands" | "+@all" => self.set_all_commands(true),
            "nocommands" | "-@all" => self.set_all_commands(false),
            _ => match op.first() {
                Some(b'~' | b'%') => self.add_key_pattern(op)?,
                Some(b'&') => self.add_channel(&op[1..])?,
                Some(b'+' | b'-') if op.get(1) == Some(&b'@') => {
                    let mask = Catalog::category(&text[2..]).ok_or(RuleError::UnknownCommand)?;
                    self.set_category(mask, op[0] == b'+');
                }
                Some(b'+') => self.allow_command(&text[1..])?,
                Some(b'-') => {
                    let id = CATALOG.id(&text[1..]).ok_or(RuleError::UnknownCommand)?;
                    self.set_command(id, false);
                }
                _ => return Err(RuleError::Syntax),
            },
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.all_keys {
            return Err(RuleError::KeysAfterAll);
        }
        let (access, pattern) = if op[0] == b'%' {
            let mut access = 0;
            let mut at = 1;
            loop {
                match op.get(at).map(u8::to_ascii_uppercase) {
                    Some(b'R') if access & READ == 0 => access |= READ,
                    Some(b'W') if access & WRITE == 0 => access |= WRITE,
                    Some(b'~') => {
                        at += 1;
                        break;
                    }
                    // Also a '%' with no '~' at all: Redis takes the rest
                    // as the pattern only after '~'.
                    None => break,
                    _ => return Err(RuleError::Syntax),
                }
                at += 1;
            }
            (access, &op[at.min(op.len())..])
        } else {
            (READ | WRITE, &op[1..])
        };
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.keys.iter_mut().find(|k| k.pattern == pattern) {
            Some(existing) => existing.access |= access,
            None => self.keys.push(KeyPattern {
                pattern: pattern.to_vec(),
                access,
            }),
        }
        Ok(())
    }

    fn add_channel(&mut self, pattern: &[u8]) -> Result<(), RuleError> {
        if self.all_channels {
            return Err(RuleError::ChannelsAfterAll);
        }
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        if !self.channels.iter().any(|c| c == pattern) {
            self.channels.push(pattern.to_vec());
        }
        Ok(())
    }

    /// `+cmd`, `+container|sub`, or `+cmd|first-arg` (a command without
    /// subcommands allowed with that first argument only).
    fn allow_command(&mut self, name: &str) -> Result<(), RuleError> {
        let Some((command, sub)) = name.rsplit_once('|') else {
            let id = CATALOG.id(name).ok_or(RuleError::UnknownCommand)?;
            self.set_command(id, true);
            return Ok(());
        };
        let id = CATALOG.id(command).ok_or(RuleError::UnknownCommand)?;
        if CATALOG.entries[id].parent.is_some() {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if !CATALOG.entries[id].children.is_empty() {
            let sub_id = CATALOG.id(name).ok_or(RuleError::UnknownCommand)?;
            self.set_command(sub_id, true);
            return Ok(());
        }
        log::warn!(
            "Deprecation warning: Allowing a first arg of an otherwise blocked command is a \
             misuse of ACL and may get disabled in the future (offender: +{name})"
        );
        let sub = sub.as_bytes().to_vec();
        match self.first_args.iter_mut().find(|(of, _)| *of == id) {
            Some((_, args)) => {
                if !args.iter().any(|a| a.eq_ignore_ascii_case(&sub)) {
                    args.push(sub);
                }
            }
            None => self.first_args.push((id, vec![sub])),
        }
        Ok(())
    }

    /// Whether key `key`, used with access `need` (READ, WRITE, both or
    /// neither), matches a pattern granting at least that.
    pub fn allows_key(&self, key: &[u8], need: u8) -> bool {
        self.all_keys
            || self
                .keys
                .iter()
                .any(|k| k.access & need == need && glob::matches(&k.pattern, key))
    }

    /// Whether the selector grants `need` on every key (`~*`, `%R~*`).
    pub fn allows_every_key(&self, need: u8) -> bool {
        self.all_keys
            || self
                .keys
                .iter()
                .any(|k| k.access & need == need && k.pattern == b"*")
    }

    /// A channel (`is_pattern`: a PSUBSCRIBE pattern, matched literally
    /// against the selector's patterns, as Redis does).
    pub fn allows_channel(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|allowed| {
                if is_pattern {
                    allowed == channel
                } else {
                    glob::matches(allowed, channel)
                }
            })
    }

    /// Keys, channels and commands as ACL LIST shows them.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if self.all_keys {
            out.push_str("~* ");
        } else {
            for key in &self.keys {
                out.push_str(&key.describe());
                out.push(' ');
            }
        }
        if self.all_channels {
            out.push_str("&* ");
        } else {
            out.push_str("resetchannels ");
            for channel in &self.channels {
                out.push('&');
                out.push_str(&String::from_utf8_lossy(channel));
                out.push(' ');
            }
        }
        out.push_str(&super::describe::command_rules(self));
        out
    }

    /// ACL GETUSER's `keys` field.
    pub fn describe_keys(&self) -> String {
        if self.all_keys {
            return "~*".to_string();
        }
        let keys: Vec<String> = self.keys.iter().map(KeyPattern::describe).collect();
        keys.join(" ")
    }

    /// ACL GETUSER's `channels` field.
    pub fn describe_channels(&self) -> String {
        if self.all_channels {
            return "&*".to_string();
        }
        let channels: Vec<String> = self
            .channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect();
        channels.join(" ")
    }
}

/// Redis refuses spaces and NULs in names and patterns (they could not be
/// written back to an ACL file).
pub fn has_spaces(text: &[u8]) -> bool {
    text.iter().any(|&b| b.is_ascii_whitespace() || b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(rules: &[&str]) -> Selector {
        let mut s = Selector::default();
        for rule in rules {
            s.apply(rule.as_bytes()).unwrap();
        }
        s
    }

    #[test]
    fn key_patterns_grant_read_write_or_both() {
        let s = selector(&["%R~read:*", "%W~write:*", "~both:*"]);
        assert!(s.allows_key(b"read:1", READ));
        assert!(!s.allows_key(b"read:1", WRITE));
        assert!(s.allows_key(b"write:1", WRITE));
        assert!(!s.allows_key(b"write:1", READ | WRITE));
        assert!(s.allows_key(b"both:1", READ | WRITE));
        assert!(!s.allows_key(b"other", 0));
        assert!(s.allows_key(b"read:x", 0));
        // The same pattern again widens its access.
        let s = selector(&["%R~k", "%W~k"]);
        assert_eq!(s.keys.len(), 1);
        assert_eq!(s.keys[0].describe(), "~k");
    }

    #[test]
    fn rule_errors_are_redis_errors() {
        let mut s = selector(&["allkeys"]);
        assert_eq!(s.apply(b"~foo"), Err(RuleError::KeysAfterAll));
        let mut s = selector(&["allchannels"]);
        assert_eq!(s.apply(b"&foo"), Err(RuleError::ChannelsAfterAll));
        let mut s = Selector::default();
        assert_eq!(s.apply(b"+nosuch"), Err(RuleError::UnknownCommand));
        assert_eq!(s.apply(b"+@nosuch"), Err(RuleError::UnknownCommand));
        assert_eq!(s.apply(b"%X~k"), Err(RuleError::Syntax));
        assert_eq!(s.apply(b"bogus"), Err(RuleError::Syntax));
        assert_eq!(
            s.apply(b"+config|get|x"),
            Err(RuleError::FirstArgOfSubcommand)
        );
        assert_eq!(s.apply(b"+select|"), Err(RuleError::Syntax));
    }

    #[test]
    fn containers_carry_their_subcommands() {
        let s = selector(&["+config"]);
        assert!(s.allows_id(CATALOG.id("config|get").unwrap()));
        let s = selector(&["+@all", "-config|set"]);
        assert!(s.allows_id(CATALOG.id("config|get").unwrap()));
        assert!(!s.allows_id(CATALOG.id("config|set").unwrap()));
        assert!(!s.all_commands);
        assert!(s.can_run_future_commands());
        let s = selector(&["+select|0"]);
        let select = CATALOG.id("select").unwrap();
        assert!(!s.allows_id(select));
        assert_eq!(s.first_args_of(select), &[b"0".to_vec()]);
    }

    #[test]
    fn channel_patterns_match_channels_and_literal_patterns() {
        let s = selector(&["&news.*"]);
        assert!(s.allows_channel(b"news.sport", false));
        assert!(!s.allows_channel(b"news.*x", true));
        assert!(s.allows_channel(b"news.*", true));
        assert!(!s.allows_channel(b"other", false));
    }
}
