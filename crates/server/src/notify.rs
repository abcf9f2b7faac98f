//! Keyspace notifications (`notify-keyspace-events`), as Redis 7.0 sends
//! them: for each event of an enabled class, `__keyspace@<db>__:<key>`
//! gets the event's name and `__keyevent@<db>__:<event>` gets the key,
//! through the one way into pub/sub (`Shared::publish`).
//!
//! A command's events wait in its session until the batch's writes are
//! durable (`connection::flush`), as Redis writes a notification to its
//! subscribers only after the AOF fsync of `always`: no subscriber hears
//! of a write a crash could still take back, and an EXEC whose commit
//! fails takes its events back with it. Expiry (found by reads, writes or
//! the active cycle) and eviction publish at once. With every class off
//! (the default) an event costs one relaxed load.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::session::Session;
use crate::shared::Shared;

pub const KEYSPACE: u32 = 1 << 0; // K
pub const KEYEVENT: u32 = 1 << 1; // E
pub const GENERIC: u32 = 1 << 2; // g
pub const STRING: u32 = 1 << 3; // $
pub const LIST: u32 = 1 << 4; // l
pub const SET: u32 = 1 << 5; // s
pub const HASH: u32 = 1 << 6; // h
pub const ZSET: u32 = 1 << 7; // z
pub const EXPIRED: u32 = 1 << 8; // x
pub const EVICTED: u32 = 1 << 9; // e
pub const STREAM: u32 = 1 << 10; // t
pub const KEY_MISS: u32 = 1 << 11; // m
pub const MODULE: u32 = 1 << 13; // d
pub const NEW: u32 = 1 << 14; // n
/// `A`: every class but key misses and new keys, as in Redis.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The classes a `notify-keyspace-events` value names (Redis's
/// `keyspaceEventsStringToFlags`); None for a character outside them.
pub fn parse(classes: &str) -> Option<u32> {
    classes.chars().try_fold(0, |flags, c| {
        Some(
            flags
                | match c {
                    'A' => ALL,
                    'g' => GENERIC,
                    '$' => STRING,
                    'l' => LIST,
                    's' => SET,
                    'h' => HASH,
                    'z' => ZSET,
                    'x' => EXPIRED,
                    'e' => EVICTED,
                    'K' => KEYSPACE,
                    'E' => KEYEVENT,
                    't' => STREAM,
                    'm' => KEY_MISS,
                    'd' => MODULE,
                    'n' => NEW,
                    _ => return None,
                },
        )
    })
}

/// The value CONFIG GET shows for `flags` (Redis's
/// `keyspaceEventsFlagsToString`: `A` when it covers them all, then K, E, m).
pub fn render(flags: u32) -> String {
    let mut out = String::new();
    if flags & ALL == ALL {
        out.push('A');
    } else {
        for (flag, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & flag != 0 {
                out.push(c);
            }
        }
    }
    for (flag, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & flag != 0 {
            out.push(c);
        }
    }
    out
}

/// The classes in force (in `Shared`).
#[derive(Default)]
pub struct Notifications {
    flags: AtomicU32,
}

impl Notifications {
    pub fn set(&self, flags: u32) {
        self.flags.store(flags, Ordering::Relaxed);
    }

    /// Whether events of `class` are sent anywhere: the class is on and so
    /// is at least one of the two channel kinds.
    pub fn wants(&self, class: u32) -> bool {
        let flags = self.flags.load(Ordering::Relaxed);
        flags & class != 0 && flags & (KEYSPACE | KEYEVENT) != 0
    }
}

/// An event waiting in its session for the batch's durability.
pub struct Pending {
    pub class: u32,
    pub event: &'static str,
    pub db: usize,
    pub key: Box<[u8]>,
}

/// Publishes one event now.
pub fn publish(shared: &Shared, class: u32, event: &str, db: usize, key: &[u8]) {
    if !shared.notifications.wants(class) {
        return;
    }
    let flags = shared.notifications.flags.load(Ordering::Relaxed);
    if flags & KEYSPACE != 0 {
        let mut channel = format!("__keyspace@{db}__:").into_bytes();
        channel.extend_from_slice(key);
        shared.publish(&channel, event.as_bytes());
    }
    if flags & KEYEVENT != 0 {
        let channel = format!("__keyevent@{db}__:{event}");
        shared.publish(channel.as_bytes(), key);
    }
}

/// Publishes what expiry deleted since the last call (the keyspace notes
/// such keys only while `x` is on with K or E).
pub fn publish_expired(shared: &Shared) {
    // (None in a reload's instant: the notes went with the old keyspace.)
    let keyspace = shared.keyspace.try_guard();
    let Some(keyspace) = keyspace.as_ref() else {
        return;
    };
    if !keyspace.expired.is_recording() {
        return;
    }
    for (db, key) in keyspace.expired.take() {
        publish(shared, EXPIRED, "expired", db, &key);
    }
}

/// Publishes the events of `session`'s batch: called once its writes are
/// durable. Keys that expired on the way go first, as Redis sends
/// `expired` from the lookup, before the command's own event.
pub fn publish_pending(shared: &Shared, session: &mut Session) {
    publish_expired(shared);
    for event in session.notifications.drain(..) {
        publish(shared, event.class, event.event, event.db, &event.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_and_render_as_redis_does() {
        for (given, shown) in [
            ("gKE", "gKE"),
            ("$lshzxeKE", "$lshzxeKE"),
            ("KA", "AK"),
            ("EA", "AE"),
            ("", ""),
            ("Egn", "gnE"),
            ("Am", "Am"),
            ("mK", "Km"),
        ] {
            assert_eq!(render(parse(given).unwrap()), shown, "{given}");
        }
        assert_eq!(parse("KEq"), None);
        assert_eq!(parse("A"), Some(ALL));
        assert_eq!(ALL & (KEY_MISS | NEW), 0);
    }

    #[test]
    fn nothing_is_wanted_without_a_channel_kind() {
        let n = Notifications::default();
        assert!(!n.wants(STRING));
        n.set(parse("A").unwrap());
        assert!(!n.wants(STRING), "classes alone publish nowhere");
        n.set(parse("K$").unwrap());
        assert!(n.wants(STRING));
        assert!(!n.wants(LIST));
    }
}
