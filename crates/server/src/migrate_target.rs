//! MIGRATE's side as a client of the target instance: connecting, the
//! pipelined AUTH / SELECT / RESTORE exchange, and the cache of target
//! connections.
//!
//! Everything here is async on the server's runtime: a MIGRATE waiting for
//! its target holds up only its own client, never a runtime worker.
//! `timeout` bounds the connect, each 64 KiB piece written, and each reply
//! line read, as in Redis.
//!
//! ## The connection cache
//!
//! As Redis does, a connection that served a MIGRATE is kept for the next
//! one to the same `host:port` (INFO's `migrate_cached_sockets`), with the
//! database it last selected so the next MIGRATE to that database sends no
//! SELECT, and closed after 10 s without use. Engram runs clients in
//! parallel, so a MIGRATE takes the cached connection out of the cache for
//! its exchange; a second MIGRATE to the same target meanwhile opens one of
//! its own, and whichever finishes last is the one kept. A connection that
//! failed is never put back. At most 64 targets are cached (Redis's
//! limit); past that a connection is closed after use.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Idle connections are closed after this long (Redis's
/// MIGRATE_SOCKET_CACHE_TTL).
const CACHE_TTL: Duration = Duration::from_secs(10);
/// Redis's MIGRATE_SOCKET_CACHE_ITEMS.
const CACHE_ITEMS: usize = 64;
/// Requests go out in pieces of this size, each within the timeout.
const WRITE_PIECE: usize = 64 * 1024;
/// Reply lines longer than this are cut (Redis reads them into 1 KiB).
const MAX_LINE: u64 = 1024;

/// What MIGRATE asks of one target.
pub struct Request {
    /// `host`, `port` as the client gave them (the cache's name).
    pub host: String,
    pub port: String,
    /// AUTH: an optional user name (AUTH2) and the password.
    pub auth: Option<(Option<Vec<u8>>, Vec<u8>)>,
    pub db: i64,
    /// RESTORE's key, TTL in ms (0: none) and DUMP payload, in order.
    pub restores: Vec<(Vec<u8>, u64, Vec<u8>)>,
    pub replace: bool,
    pub timeout: Duration,
}

/// How an exchange ended. `acked` holds the indexes (into
/// `Request::restores`) of the RESTOREs the target answered +OK, with no
/// AUTH or SELECT error before them: those keys are on the target.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every RESTORE was answered (errors included).
    Done {
        acked: Vec<usize>,
        /// The first error the target replied (AUTH's, SELECT's or a
        /// RESTORE's), without its leading `-`.
        target_error: Option<String>,
    },
    /// Connecting failed or timed out.
    ConnectFailed,
    /// Writing or reading failed or timed out (after one retry where Redis
    /// retries); `acked` as far as replies were read.
    Io { writing: bool, acked: Vec<usize> },
}

/// One open connection to a target.
struct Link {
    reader: BufReader<TcpStream>,
    /// The database the last successful exchange selected; -1 for none
    /// yet, or in doubt. As in Redis, a MIGRATE to database -1 then sends
    /// no SELECT (the target's current database receives the keys).
    selected: i64,
}

struct Cached {
    link: Link,
    last_use: Instant,
}

/// The cached target connections, one per `host:port` (shared by all
/// clients of a server).
#[derive(Default)]
pub struct TargetCache {
    links: Mutex<HashMap<String, Cached>>,
}

impl TargetCache {
    /// Connections cached now (INFO's `migrate_cached_sockets`).
    pub fn len(&self) -> usize {
        self.links.lock().len()
    }

    fn take(&self, name: &str) -> Option<Link> {
        self.links.lock().remove(name).map(|cached| cached.link)
    }

    /// Keeps `link` for the next MIGRATE to `name`, and closes it once
    /// it has been idle for `CACHE_TTL`.
    fn put_back(self: &Arc<Self>, name: String, link: Link) {
        let last_use = Instant::now();
        {
            let mut links = self.links.lock();
            if links.len() >= CACHE_ITEMS && !links.contains_key(&name) {
                return;
            }
            links.insert(name.clone(), Cached { link, last_use });
        }
        let cache = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(CACHE_TTL).await;
            if let Some(cache) = cache.upgrade() {
                let mut links = cache.links.lock();
                // Unless a later MIGRATE used it since (it then has a
                // sleeper of its own).
                if links.get(&name).is_some_and(|c| c.last_use == last_use) {
                    links.remove(&name);
                }
            }
        });
    }
}

/// Runs `request` against its target: Redis's migrateCommand from the
/// connection on, with its single retry (on a fresh connection) when a
/// cached connection turns out to be dead before any RESTORE was answered.
pub async fn exchange(cache: &Arc<TargetCache>, request: &Request) -> Outcome {
    let name = format!("{}:{}", request.host, request.port);
    let mut may_retry = true;
    loop {
        let link = match cache.take(&name) {
            Some(link) => link,
            None => match connect(request).await {
                Connected::Link(link) => link,
                Connected::Failed => return Outcome::ConnectFailed,
                Connected::Refused if may_retry => {
                    may_retry = false;
                    continue;
                }
                Connected::Refused => {
                    return Outcome::Io {
                        writing: true,
                        acked: Vec::new(),
                    }
                }
            },
        };
        let (outcome, link) = attempt(link, request).await;
        match outcome {
            Attempt::Done {
                acked,
                target_error,
            } => {
                // A link that failed after the target's error is dropped.
                if let Some(mut link) = link {
                    // After an error the selected database is in doubt.
                    link.selected = if target_error.is_none() {
                        request.db
                    } else {
                        -1
                    };
                    cache.put_back(name, link);
                }
                return Outcome::Done {
                    acked,
                    target_error,
                };
            }
            Attempt::Failed {
                writing,
                acked,
                timed_out,
            } => {
                // As Redis: retry once, unless it was a timeout or some
                // RESTORE was already answered.
                if may_retry && !timed_out && acked.is_empty() {
                    may_retry = false;
                    continue;
                }
                return Outcome::Io { writing, acked };
            }
        }
    }
}

/// How connecting ended.
enum Connected {
    Link(Link),
    /// The target refused: Redis's connect does not wait for the refusal
    /// and reports it when the request is written ("writing"), after its
    /// retry; Engram replies the same.
    Refused,
    /// Timed out, or no address for the host.
    Failed,
}

async fn connect(request: &Request) -> Connected {
    let port = atoi_port(&request.port);
    let host = request.host.as_str();
    match tokio::time::timeout(request.timeout, TcpStream::connect((host, port))).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Connected::Link(Link {
                reader: BufReader::new(stream),
                selected: -1,
            })
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Connected::Refused,
        _ => Connected::Failed,
    }
}

/// The port as Redis reads it: `atoi` (leading digits, 0 without any),
/// then cut to 16 bits as the address lookup does (70000 is port 4464).
fn atoi_port(text: &str) -> u16 {
    let text = text.trim_start();
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let value = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| {
            n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
    let value = if negative { -value } else { value };
    value as u16
}

enum Attempt {
    Done {
        acked: Vec<usize>,
        target_error: Option<String>,
    },
    Failed {
        writing: bool,
        acked: Vec<usize>,
        timed_out: bool,
    },
}

/// One try on `link`; gives the link back if it is still good.
async fn attempt(mut link: Link, request: &Request) -> (Attempt, Option<Link>) {
    let select = link.selected != request.db;
    let bytes = encode(request, select);
    for piece in bytes.chunks(WRITE_PIECE) {
        let written =
            tokio::time::timeout(request.timeout, link.reader.get_mut().write_all(piece)).await;
        if let Some(timed_out) = failed(written) {
            let failure = Attempt::Failed {
                writing: true,
                acked: Vec::new(),
                timed_out,
            };
            return (failure, None);
        }
    }

    let mut first_error = None;
    let mut acked = Vec::new();
    let mut ahead = Vec::new();
    // AUTH's and SELECT's replies: an error there fails every RESTORE.
    let preamble = usize::from(request.auth.is_some()) + usize::from(select);
    for _ in 0..preamble {
        match read_line(&mut link, request.timeout).await {
            Ok(line) => ahead.push(line),
            Err(timed_out) => {
                let failure = Attempt::Failed {
                    writing: false,
                    acked,
                    timed_out,
                };
                return (failure, None);
            }
        }
    }
    let preamble_error = ahead.into_iter().find_map(error_text);
    for index in 0..request.restores.len() {
        match read_line(&mut link, request.timeout).await {
            Ok(line) => match preamble_error.clone().or_else(|| error_text(line)) {
                Some(text) => {
                    first_error.get_or_insert(text);
                }
                None => acked.push(index),
            },
            Err(timed_out) => {
                // Replies already read stand (those keys are on the
                // target); the target's error, if one came, is the reply.
                if let Some(text) = first_error {
                    let done = Attempt::Done {
                        acked,
                        target_error: Some(text),
                    };
                    return (done, None);
                }
                let failure = Attempt::Failed {
                    writing: false,
                    acked,
                    timed_out,
                };
                return (failure, None);
            }
        }
    }
    let done = Attempt::Done {
        acked,
        target_error: first_error,
    };
    (done, Some(link))
}

/// None if `result` is a success; else whether it was a timeout.
fn failed<T>(result: Result<std::io::Result<T>, tokio::time::error::Elapsed>) -> Option<bool> {
    match result {
        Ok(Ok(_)) => None,
        Ok(Err(_)) => Some(false),
        Err(_) => Some(true),
    }
}

/// An error reply's text (after the `-`), None for any other reply.
fn error_text(line: Vec<u8>) -> Option<String> {
    match line.split_first() {
        Some((b'-', text)) => Some(String::from_utf8_lossy(text).into_owned()),
        _ => None,
    }
}

/// One reply line without its CRLF; Err(timed out?) on failure or EOF.
async fn read_line(link: &mut Link, timeout: Duration) -> Result<Vec<u8>, bool> {
    let mut line = Vec::new();
    let mut limited = (&mut link.reader).take(MAX_LINE);
    let read = tokio::time::timeout(timeout, limited.read_until(b'\n', &mut line)).await;
    match read {
        Err(_) => Err(true),
        Ok(Err(_)) | Ok(Ok(0)) => Err(false),
        Ok(Ok(_)) => {
            if line.ends_with(b"\n") {
                line.pop();
                if line.ends_with(b"\r") {
                    line.pop();
                }
            } else if line.len() as u64 == MAX_LINE {
                // A longer line: skip the rest of it.
                let mut rest = Vec::new();
                let skipped =
                    tokio::time::timeout(timeout, link.reader.read_until(b'\n', &mut rest)).await;
                if let Some(timed_out) = failed(skipped) {
                    return Err(timed_out);
                }
            } else {
                return Err(false);
            }
            Ok(line)
        }
    }
}

/// The whole pipeline: AUTH, SELECT when needed, one RESTORE per key.
fn encode(request: &Request, select: bool) -> Vec<u8> {
    let size: usize = request
        .restores
        .iter()
        .map(|(key, _, payload)| key.len() + payload.len() + 64)
        .sum();
    let mut out = Vec::with_capacity(size + 64);
    if let Some((user, password)) = &request.auth {
        let mut words: Vec<&[u8]> = vec![b"AUTH"];
        words.extend(user.as_deref());
        words.push(password);
        command(&mut out, &words);
    }
    if select {
        command(&mut out, &[b"SELECT", request.db.to_string().as_bytes()]);
    }
    for (key, ttl, payload) in &request.restores {
        let ttl = ttl.to_string();
        let mut words: Vec<&[u8]> = vec![b"RESTORE", key, ttl.as_bytes(), payload];
        if request.replace {
            words.push(b"REPLACE");
        }
        command(&mut out, &words);
    }
    out
}

fn command(out: &mut Vec<u8>, words: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", words.len()).as_bytes());
    for word in words {
        out.extend_from_slice(format!("${}\r\n", word.len()).as_bytes());
        out.extend_from_slice(word);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_read_as_atoi_reads_them() {
        assert_eq!(atoi_port("6379"), 6379);
        assert_eq!(atoi_port(" 12abc"), 12);
        assert_eq!(atoi_port("abc"), 0);
        assert_eq!(atoi_port("-0"), 0);
        assert_eq!(atoi_port("-1"), 65535);
        assert_eq!(atoi_port("70000"), 4464);
    }

    #[test]
    fn the_pipeline_is_auth_select_then_restores() {
        let request = Request {
            host: "h".into(),
            port: "1".into(),
            auth: Some((Some(b"u".to_vec()), b"p".to_vec())),
            db: -1,
            restores: vec![(b"k".to_vec(), 0, b"x".to_vec())],
            replace: true,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(
            encode(&request, true),
            b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n\
              *2\r\n$6\r\nSELECT\r\n$2\r\n-1\r\n\
              *5\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n$1\r\n0\r\n$1\r\nx\r\n$7\r\nREPLACE\r\n"
                .to_vec()
        );
        assert_eq!(
            encode(&request, false)
                .windows(6)
                .filter(|w| w == b"SELECT")
                .count(),
            0
        );
    }
}
