//! ACL LOG: the most recent denials, newest first, at most
//! `acllog-max-len`. A denial like one of the last ten (same reason,
//! context, object and user, within a minute) bumps that entry's count
//! and moves it to the front instead of adding another, as Redis does.

use std::collections::VecDeque;

/// Entries this close in time may be grouped (Redis's 60 s).
const GROUPING_MS: u64 = 60_000;
/// How many of the newest entries are looked at for grouping.
const GROUPING_SCAN: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Channel,
    Auth,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    TopLevel,
    Multi,
    Lua,
}

impl Context {
    pub fn name(self) -> &'static str {
        match self {
            Context::TopLevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

pub struct Entry {
    pub count: u64,
    pub reason: Reason,
    pub context: Context,
    /// The command, key, channel, or (for AUTH) the command's name.
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    /// Unix milliseconds of the latest occurrence.
    pub at_ms: u64,
    /// CLIENT LIST's line for the client, at the latest occurrence.
    pub client_info: String,
}

#[derive(Default)]
pub struct AclLog {
    entries: VecDeque<Entry>,
}

impl AclLog {
    pub fn add(&mut self, entry: Entry, max_len: usize) {
        let similar = self.entries.iter().take(GROUPING_SCAN).position(|old| {
            old.reason == entry.reason
                && old.context == entry.context
                && old.at_ms.abs_diff(entry.at_ms) <= GROUPING_MS
                && old.object == entry.object
                && old.username == entry.username
        });
        match similar {
            Some(at) => {
                let mut old = self.entries.remove(at).expect("found above");
                old.count += 1;
                old.at_ms = entry.at_ms;
                old.client_info = entry.client_info;
                self.entries.push_front(old);
            }
            None => {
                self.entries.push_front(entry);
                self.entries.truncate(max_len);
            }
        }
    }

    /// The newest `count` entries.
    pub fn newest(&self, count: usize) -> impl Iterator<Item = &Entry> {
        self.entries.iter().take(count)
    }

    pub fn reset(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(object: &str, at_ms: u64) -> Entry {
        Entry {
            count: 1,
            reason: Reason::Command,
            context: Context::TopLevel,
            object: object.as_bytes().to_vec(),
            username: b"u".to_vec(),
            at_ms,
            client_info: String::new(),
        }
    }

    #[test]
    fn similar_denials_group_and_the_log_is_bounded() {
        let mut log = AclLog::default();
        log.add(entry("get", 0), 3);
        log.add(entry("set", 10), 3);
        log.add(entry("get", 20), 3);
        assert_eq!(log.newest(10).count(), 2);
        let newest: Vec<(&[u8], u64)> = log.newest(10).map(|e| (&e.object[..], e.count)).collect();
        assert_eq!(newest, vec![(&b"get"[..], 2), (&b"set"[..], 1)]);
        // Over a minute later: a new entry.
        log.add(entry("get", 20 + GROUPING_MS + 1), 3);
        log.add(entry("del", 100_000), 3);
        assert_eq!(log.newest(10).count(), 3);
        assert_eq!(log.newest(1).next().unwrap().object, b"del");
        log.add(entry("lpush", 100_001), 1);
        assert_eq!(log.newest(10).count(), 1);
    }
}
