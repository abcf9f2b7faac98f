//! MONITOR: every command any client runs, as a line to each monitoring
//! client, in Redis's format:
//!
//! ```text
//! +1700000000.123456 [0 127.0.0.1:50000] "set" "key" "value"
//! ```
//!
//! A command is shown once it has run (so it was accepted: commands
//! refused for their arity, authentication, or in subscribed mode are not
//! shown), like Redis's `call()`: administrative commands (CONFIG, DEBUG,
//! MONITOR itself...) are left out, inside EXEC each queued command is
//! shown and then EXEC, and AUTH's and HELLO's passwords are redacted.
//!
//! Without monitors this costs a command one relaxed atomic load.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

use crate::commands::{lookup, ADMIN};
use crate::outbox::{Frame, Outbox};
use crate::resp::Args;
use crate::session::Session;
use crate::shared::Shared;

#[derive(Default)]
pub struct Monitors {
    /// How many clients monitor: the one load a command pays without any.
    active: AtomicUsize,
    outboxes: RwLock<Vec<Arc<Outbox>>>,
}

impl Monitors {
    /// A client starts monitoring.
    pub fn add(&self, outbox: Arc<Outbox>) {
        let mut outboxes = self.outboxes.write();
        outboxes.push(outbox);
        self.active.store(outboxes.len(), Ordering::Relaxed);
    }

    /// Client `id` stops monitoring (RESET, disconnection).
    pub fn remove(&self, id: u64) {
        let mut outboxes = self.outboxes.write();
        outboxes.retain(|outbox| outbox.client.id != id);
        self.active.store(outboxes.len(), Ordering::Relaxed);
    }
}

/// Shows the command `args`, just run by `session`, to the monitors.
pub fn feed(shared: &Shared, session: &Session, args: Args) {
    if shared.monitors.active.load(Ordering::Relaxed) == 0 {
        return;
    }
    feed_monitors(shared, session, args, false);
}

/// A command a script called (`redis.call`), shown as `[db lua]`.
pub fn feed_from_script(shared: &Shared, session: &Session, args: Args) {
    if shared.monitors.active.load(Ordering::Relaxed) == 0 {
        return;
    }
    feed_monitors(shared, session, args, true);
}

/// EVAL, EVALSHA, FCALL and their _RO forms, shown before they run (so
/// that the commands the script calls come after them), as Redis feeds
/// them from their own handlers.
pub fn feed_script_command(shared: &Shared, session: &Session, args: Args) {
    if shared.monitors.active.load(Ordering::Relaxed) == 0 || session.monitor_fed {
        return;
    }
    push(
        shared,
        line(session.db, &session.info.addr.to_string(), args),
    );
}

#[cold]
fn feed_monitors(shared: &Shared, session: &Session, args: Args, from_script: bool) {
    let Some((_, spec)) = lookup(args.get(0)) else {
        return;
    };
    // Redis's CMD_ADMIN and CMD_SKIP_MONITOR (the script commands are fed
    // by their handlers, before the commands they call).
    if spec.is(ADMIN)
        || matches!(
            spec.name,
            "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
        )
        || (spec.name == "client" && args.len() > 1 && admin_client_subcommand(args.get(1)))
    {
        return;
    }
    let origin = if from_script {
        "lua".to_string()
    } else {
        session.info.addr.to_string()
    };
    push(shared, line(session.db, &origin, args));
}

fn push(shared: &Shared, line: Vec<u8>) {
    let line = Frame {
        elements: 0,
        body: Bytes::from(line),
    };
    for outbox in shared.monitors.outboxes.read().iter() {
        outbox.push(line.clone(), &shared.output_limits);
    }
}

/// The CLIENT subcommands Redis 7.0 flags as administrative (CLIENT's
/// other subcommands are shown).
fn admin_client_subcommand(sub: &[u8]) -> bool {
    ["kill", "list", "no-evict", "pause", "unblock", "unpause"]
        .iter()
        .any(|admin| sub.eq_ignore_ascii_case(admin.as_bytes()))
}

/// `+<seconds>.<micros> [<db> <addr>] "arg" ...\r\n`.
fn line(db: usize, addr: &str, args: Args) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut line = format!(
        "+{}.{:06} [{db} {addr}]",
        now.as_secs(),
        now.subsec_micros()
    )
    .into_bytes();
    let redacted = redacted(args);
    for (i, arg) in args.iter().enumerate() {
        line.push(b' ');
        if redacted.contains(&i) {
            quote(&mut line, b"(redacted)");
        } else {
            quote(&mut line, arg);
        }
    }
    line.extend_from_slice(b"\r\n");
    line
}

/// The arguments Redis replaces by `(redacted)`: AUTH's (when it has the
/// two- or three-argument form), and the user and password of each HELLO
/// AUTH option its parser reaches, and ACL SETUSER's from the user name
/// on.
fn redacted(args: Args) -> Vec<usize> {
    let name = args.get(0);
    if name.eq_ignore_ascii_case(b"auth") {
        return match args.len() {
            2 => vec![1],
            3 => vec![1, 2],
            _ => Vec::new(),
        };
    }
    if name.eq_ignore_ascii_case(b"acl")
        && args.len() > 2
        && args.get(1).eq_ignore_ascii_case(b"setuser")
    {
        // The user's name too: it says who is being given what.
        return (2..args.len()).collect();
    }
    if !name.eq_ignore_ascii_case(b"hello") || args.len() < 2 {
        return Vec::new();
    }
    // HELLO checks the version before any option.
    if !matches!(crate::resp::parse_int(args.get(1)), Some(2 | 3)) {
        return Vec::new();
    }
    let mut redacted = Vec::new();
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = args.get(i);
        if option.eq_ignore_ascii_case(b"auth") && more >= 2 {
            redacted.extend([i + 1, i + 2]);
            i += 3;
        } else if option.eq_ignore_ascii_case(b"setname") && more >= 1 {
            i += 2;
        } else {
            break;
        }
    }
    redacted
}

/// Redis's `sdscatrepr`: a quoted string, `\\`, `\"`, `\n`, `\r`, `\t`,
/// `\a`, `\b` escaped, other unprintable bytes as `\xHH`.
fn quote(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            b' '..=b'~' => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::OwnedArgs;

    fn shown(parts: &[&[u8]]) -> String {
        let owned = OwnedArgs::from_slices(parts);
        let line = String::from_utf8(line(3, "127.0.0.1:5000", owned.args())).unwrap();
        let (_, rest) = line.split_once(' ').unwrap();
        rest.to_string()
    }

    #[test]
    fn lines_quote_and_escape_like_sdscatrepr() {
        assert_eq!(
            shown(&[b"set", b"k\"ey", b"a\r\n\t\x07\x08\\b\x00\xff "]),
            "[3 127.0.0.1:5000] \"set\" \"k\\\"ey\" \"a\\r\\n\\t\\a\\b\\\\b\\x00\\xff \"\r\n"
        );
        let owned = OwnedArgs::from_slices(&[b"ping"]);
        let line = String::from_utf8(line(0, "a", owned.args())).unwrap();
        let stamp = line[1..].split(' ').next().unwrap();
        let (secs, micros) = stamp.split_once('.').unwrap();
        assert!(secs.parse::<u64>().unwrap() > 1_600_000_000);
        assert_eq!(micros.len(), 6);
    }

    #[test]
    fn passwords_are_redacted_as_redis_redacts_them() {
        assert_eq!(
            shown(&[b"auth", b"pw"]),
            "[3 127.0.0.1:5000] \"auth\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            shown(&[b"AUTH", b"u", b"pw"]),
            "[3 127.0.0.1:5000] \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            shown(&[b"auth", b"a", b"b", b"c"]),
            "[3 127.0.0.1:5000] \"auth\" \"a\" \"b\" \"c\"\r\n"
        );
        assert_eq!(
            shown(&[b"hello", b"2", b"SETNAME", b"n", b"AUTH", b"u", b"p"]),
            "[3 127.0.0.1:5000] \"hello\" \"2\" \"SETNAME\" \"n\" \"AUTH\" \"(redacted)\" \
             \"(redacted)\"\r\n"
        );
        // A bad version or option stops HELLO before it reads a password.
        assert!(!shown(&[b"hello", b"4", b"AUTH", b"u", b"p"]).contains("redacted"));
        assert!(!shown(&[b"hello", b"3", b"x", b"AUTH", b"u", b"p"]).contains("redacted"));
    }
}
