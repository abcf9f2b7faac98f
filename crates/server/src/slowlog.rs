//! The slow log (SLOWLOG): commands that ran longer than
//! `slowlog-log-slower-than` microseconds (-1: none, 0: all), the newest
//! `slowlog-max-len` of them, each with Redis's six fields: id, Unix time,
//! duration in µs, the arguments (at most 32, each cut at 128 bytes, as
//! Redis trims them), the client's address and name.
//!
//! The thresholds are read on every command, so they live in atomics; the
//! log's lock is taken only for a command that qualifies.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::resp::Args;

/// Redis keeps this many arguments (the last one replaced by a count of
/// the rest) and this many bytes of each.
const MAX_ARGS: usize = 32;
const MAX_ARG_BYTES: usize = 128;

pub struct Entry {
    pub id: u64,
    pub unix_time: u64,
    pub usec: u64,
    pub args: Vec<Vec<u8>>,
    pub client_addr: String,
    pub client_name: String,
}

pub struct SlowLog {
    /// `slowlog-log-slower-than`, µs.
    pub slower_than: AtomicI64,
    /// `slowlog-max-len`.
    pub max_len: AtomicUsize,
    next_id: AtomicU64,
    entries: Mutex<VecDeque<Entry>>,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog {
            slower_than: AtomicI64::new(10_000),
            max_len: AtomicUsize::new(128),
            next_id: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
        }
    }
}

impl SlowLog {
    /// Whether a command of `usec` belongs in the log.
    pub fn qualifies(&self, usec: u64) -> bool {
        let threshold = self.slower_than.load(Ordering::Relaxed);
        threshold >= 0 && usec >= threshold as u64
    }

    /// Adds a command; `args` are redacted by the caller where needed.
    pub fn push(&self, args: &Args, usec: u64, client_addr: String, client_name: String) {
        let entry = Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            unix_time: crate::keyspace::durability::unix_now(),
            usec,
            args: trimmed(args),
            client_addr,
            client_name,
        };
        let max = self.max_len.load(Ordering::Relaxed);
        let mut entries = self.entries.lock();
        entries.push_front(entry);
        entries.truncate(max);
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn reset(&self) {
        self.entries.lock().clear();
    }

    /// Applies a new `slowlog-max-len` to what is already logged.
    pub fn set_max_len(&self, max: usize) {
        self.max_len.store(max, Ordering::Relaxed);
        self.entries.lock().truncate(max);
    }

    /// The newest `count` entries (all for None), newest first.
    pub fn newest<R>(&self, count: Option<usize>, f: impl FnOnce(&[&Entry]) -> R) -> R {
        let entries = self.entries.lock();
        let taken: Vec<&Entry> = entries.iter().take(count.unwrap_or(usize::MAX)).collect();
        f(&taken)
    }
}

/// The arguments as Redis logs them: the first 31 and `... (N more
/// arguments)` when there are more than 32; each longer than 128 bytes cut
/// to 128 and `... (N more bytes)`.
fn trimmed(args: &Args) -> Vec<Vec<u8>> {
    let n = args.len();
    let kept = if n > MAX_ARGS { MAX_ARGS - 1 } else { n };
    let mut out: Vec<Vec<u8>> = (0..kept)
        .map(|i| {
            let arg = args.get(i);
            if redacted(args, i) {
                b"(redacted)".to_vec()
            } else if arg.len() > MAX_ARG_BYTES {
                let mut cut = arg[..MAX_ARG_BYTES].to_vec();
                cut.extend_from_slice(
                    format!("... ({} more bytes)", arg.len() - MAX_ARG_BYTES).as_bytes(),
                );
                cut
            } else {
                arg.to_vec()
            }
        })
        .collect();
    if n > MAX_ARGS {
        out.push(format!("... ({} more arguments)", n - kept).into_bytes());
    }
    out
}

/// Whether argument `i` is a secret Redis keeps out of the slow log
/// (replaced by `(redacted)`): passwords given to CONFIG SET, every
/// argument of ACL SETUSER from the user's name on, MIGRATE's AUTH.
pub fn redacted(args: &Args, i: usize) -> bool {
    let word = |j: usize| String::from_utf8_lossy(args.get(j)).to_ascii_lowercase();
    match word(0).as_str() {
        "config" if args.len() > 2 && word(1) == "set" => {
            i >= 3
                && (i - 3).is_multiple_of(2)
                && matches!(
                    word(i - 1).as_str(),
                    "requirepass" | "masterauth" | "tls-key-file-pass" | "tls-client-key-file-pass"
                )
        }
        "acl" if args.len() > 2 && word(1) == "setuser" => i >= 2,
        "migrate" => {
            (i >= 1 && matches!(word(i - 1).as_str(), "auth" | "auth2"))
                || (i >= 2 && word(i - 2) == "auth2")
        }
        _ => false,
    }
}
