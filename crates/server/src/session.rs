//! A connection's own state: selected database, protocol, authentication,
//! the MULTI queue and WATCHed keys, and a blocking command's wait.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use parking_lot::Mutex;

use crate::clients::ClientInfo;
use crate::keyspace::{ekey, EKey, Keyspace};
use crate::resp::{OwnedArgs, ReplyWriter};
use crate::shared::Shared;

pub struct Session {
    pub info: Arc<ClientInfo>,
    pub db: usize,
    pub authenticated: bool,
    /// Commands queued since MULTI (None outside MULTI).
    pub multi: Option<Vec<OwnedArgs>>,
    /// A command was rejected while queuing: EXEC must abort.
    pub multi_failed: bool,
    /// Keys this client WATCHes, and the flag writers raise on them.
    pub watched: Vec<EKey>,
    pub watch_flag: Arc<AtomicBool>,
    /// Whether this batch of commands wrote anything (its replies wait for
    /// durability).
    pub wrote: bool,
    /// Close the connection once the pending replies are sent (QUIT).
    pub close: bool,
    /// Set by a blocking command (BLPOP...) that found nothing to serve and
    /// wrote no reply: the connection waits for a write to one of its keys
    /// and runs it again (see `connection`).
    pub blocked: Option<Blocked>,
    /// The command running is a blocked one tried again after a wakeup.
    pub retrying: bool,
}

/// What a blocked client waits for.
pub struct Blocked {
    pub db: usize,
    pub keys: Vec<Box<[u8]>>,
    /// None: no timeout.
    pub deadline: Option<Instant>,
    /// The command, run again on every wakeup (it may block again).
    pub command: OwnedArgs,
    /// Writes the reply for a timeout.
    pub on_timeout: fn(&mut ReplyWriter),
}

impl Session {
    pub fn new(info: Arc<ClientInfo>, authenticated: bool) -> Session {
        Session {
            info,
            db: 0,
            authenticated,
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            watch_flag: Arc::new(AtomicBool::new(false)),
            wrote: false,
            close: false,
            blocked: None,
            retrying: false,
        }
    }

    pub fn select(&mut self, db: usize) {
        self.db = db;
        self.info.db.store(db, Ordering::Relaxed);
    }

    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    pub fn end_multi(&mut self) {
        self.multi = None;
        self.multi_failed = false;
        self.info.multi.store(-1, Ordering::Relaxed);
    }
}

/// The clients blocked on each key, in the order they blocked: as in Redis,
/// the first to block is served first. Keyed by server (the address of its
/// `Shared`, so servers in one process stay apart) and engine key.
static LINES: LazyLock<Mutex<Lines>> = LazyLock::new(Default::default);
type Lines = HashMap<(usize, EKey), VecDeque<u64>>;
/// Clients in all lines: none (the usual case), no lock to take.
static IN_LINES: AtomicUsize = AtomicUsize::new(0);

fn server_id(shared: &Shared) -> usize {
    shared as *const Shared as usize
}

/// A blocked client's places in the lines of its keys; leaving them (on
/// drop: served, timed out, killed, disconnected) wakes the clients behind,
/// who may now be first.
pub struct InLine {
    server: usize,
    client: u64,
    ekeys: Vec<EKey>,
    keyspace: Arc<Keyspace>,
}

impl InLine {
    /// Puts the client at the end of the line of each of `keys` of `db`.
    pub fn join(shared: &Shared, client: u64, db: usize, keys: &[Box<[u8]>]) -> InLine {
        let server = server_id(shared);
        let mut ekeys: Vec<EKey> = keys.iter().filter_map(|k| ekey(db, k).ok()).collect();
        ekeys.sort();
        ekeys.dedup();
        {
            let mut lines = LINES.lock();
            for ekey in &ekeys {
                lines
                    .entry((server, ekey.clone()))
                    .or_default()
                    .push_back(client);
            }
            IN_LINES.fetch_add(ekeys.len(), Ordering::SeqCst);
        }
        InLine {
            server,
            client,
            ekeys,
            keyspace: shared.keyspace.clone(),
        }
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        let mut behind = Vec::new();
        {
            let mut lines = LINES.lock();
            for ekey in &self.ekeys {
                let entry = (self.server, ekey.clone());
                let Some(line) = lines.get_mut(&entry) else {
                    continue;
                };
                if let Some(at) = line.iter().position(|&c| c == self.client) {
                    line.remove(at);
                    IN_LINES.fetch_sub(1, Ordering::SeqCst);
                }
                if line.is_empty() {
                    lines.remove(&entry);
                } else {
                    behind.push(ekey.clone());
                }
            }
        }
        for ekey in behind {
            self.keyspace.signal_written(&ekey);
        }
    }
}

/// Whether `client` may take from `ekey` now: nobody waits for it, or the
/// client is first in its line. Others wait their turn (they were woken by
/// the same write and the first of them takes it).
pub fn first_in_line(shared: &Shared, client: u64, ekey: &[u8]) -> bool {
    if IN_LINES.load(Ordering::SeqCst) == 0 {
        return true;
    }
    let lines = LINES.lock();
    match lines.get(&(server_id(shared), EKey::from_slice(ekey))) {
        None => true,
        Some(line) => match line.front() {
            None => true,
            Some(&first) => first == client,
        },
    }
}
