//! A connection's own state: selected database, protocol, authentication,
//! the MULTI queue and WATCHed keys, a blocking command's wait, and its
//! subscriptions and MONITOR mode.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::clients::ClientInfo;
use crate::keyspace::{ekey, EKey};
use crate::output_limit::SoftClock;
use crate::pubsub::ClientPubSub;
use crate::reload::KeyspaceSlot;
use crate::resp::{OwnedArgs, ReplyWriter};
use crate::shared::Shared;

pub struct Session {
    pub info: Arc<ClientInfo>,
    pub db: usize,
    pub authenticated: bool,
    /// The user this connection is authenticated as (`default` until AUTH
    /// says otherwise); its rules are checked before every command.
    pub user: Arc<crate::acl::User>,
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
    /// A Raft group's apply of an entry this node proposed: MONITOR saw
    /// its commands when they were proposed (with the client's address),
    /// so EVAL and FCALL do not announce themselves again (the commands a
    /// script calls are still fed as they run).
    pub monitor_fed: bool,
    /// Set by MIGRATE, which replied nothing yet: the connection runs its
    /// exchange with the target, then `commands::finish_migration`.
    pub migration: Option<Box<crate::commands::PendingMigration>>,
    /// Set by DEBUG RELOAD, which replied nothing yet: the connection runs
    /// the reload once the command has let go of the keyspace (`reload`).
    pub reload: bool,
    /// CLIENT REPLY: whether replies are sent.
    pub reply: ReplyMode,
    /// Subscriptions, MONITOR, and the outbox they fill.
    pub pubsub: ClientPubSub,
    /// The command running wrote only push messages (subscription
    /// confirmations), which CLIENT REPLY OFF and SKIP do not silence.
    pub pushed: bool,
    /// Since when this client's buffered replies stay over its soft output
    /// limit (`output_limit`).
    pub output_soft_clock: SoftClock,
    /// Keyspace notifications of this batch, published once its writes
    /// are durable (`notify`).
    pub notifications: Vec<crate::notify::Pending>,
    /// CLIENT CACHING YES (OPTIN) or NO (OPTOUT) was given for the next
    /// command (`tracking::after_command` clears it).
    pub caching: bool,
    /// The queue of an EXEC that committed while some client tracks, for
    /// `tracking::after_command` to replay once the reply is placed.
    pub tracked_exec: Option<Vec<OwnedArgs>>,
    /// CLIENT NO-TOUCH ON: this client's commands (but TOUCH) leave keys'
    /// access fields alone.
    pub no_touch: bool,
    /// A script of this client is running: the commands now running are
    /// its `redis.call`s (SORT then orders a set's output, as Redis does
    /// for scripts).
    pub in_script: bool,
    /// When the running script started (ms): its commands see that time,
    /// so a key does not expire in the middle of a script (Redis's time
    /// snapshot).
    pub script_started_ms: u64,
    /// On a replicated node (`group`): writes queued to be proposed, in
    /// order, with any replies produced meanwhile.
    pub proposals: Vec<crate::group::Pending>,
    /// READONLY was sent: a follower serves this client's reads (stale).
    pub readonly: bool,
    /// The read barrier of this batch of commands on the leader: None
    /// before it is taken, then whether it held.
    pub read_fence: Option<bool>,
    /// The time commands see instead of the clock's (a replicated entry's
    /// time, the same on every node).
    pub clock_ms: Option<u64>,
    /// The index of this client's last replicated write (WAIT's target).
    pub last_write_index: u64,
    /// Set by WAIT, which replied nothing yet: the connection waits for
    /// (replicas, timeout ms), then replies.
    pub wait_replicas: Option<(i64, u64)>,
    /// ENGRAM.GROUP ADD/REMOVE's change, proposed by the connection after
    /// the command (it waits for the change to be applied).
    pub member_change: Option<engram_replication::Change>,
}

/// CLIENT REPLY's modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Set by CLIENT REPLY SKIP: the next command's reply is dropped.
    SkipNext,
    /// The command now running is that next one.
    Skip,
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
    /// A Raft group's leader: each try is proposed (`group::retry`), not
    /// run here.
    pub proposed: bool,
}

impl Session {
    /// Whether this session runs a replicated group's committed entries
    /// (the apply thread's; it carries the entry's clock). What such a
    /// run decides must be the same on every member: nothing may hang on
    /// this node's memory, configuration or clock.
    pub fn applying(&self) -> bool {
        self.clock_ms.is_some()
    }

    /// Authenticates the connection as `user` (AUTH, HELLO AUTH, RESET).
    pub fn set_user(&mut self, user: Arc<crate::acl::User>, authenticated: bool) {
        *self.info.user.lock() = Some(user.clone());
        self.user = user;
        self.authenticated = authenticated;
    }

    pub fn new(info: Arc<ClientInfo>, user: Arc<crate::acl::User>, authenticated: bool) -> Session {
        *info.user.lock() = Some(user.clone());
        Session {
            info,
            db: 0,
            authenticated,
            user,
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            watch_flag: Arc::new(AtomicBool::new(false)),
            wrote: false,
            close: false,
            blocked: None,
            retrying: false,
            monitor_fed: false,
            migration: None,
            reload: false,
            reply: ReplyMode::On,
            pubsub: ClientPubSub::default(),
            pushed: false,
            output_soft_clock: SoftClock::default(),
            notifications: Vec::new(),
            caching: false,
            tracked_exec: None,
            no_touch: false,
            in_script: false,
            script_started_ms: 0,
            proposals: Vec::new(),
            readonly: false,
            read_fence: None,
            clock_ms: None,
            last_write_index: 0,
            wait_replicas: None,
            member_change: None,
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
/// the first to block is served first. One per server (in `Shared`).
#[derive(Default)]
pub struct WaitLines {
    lines: Mutex<HashMap<EKey, VecDeque<u64>>>,
    /// Clients in all lines: none (the usual case), no lock to take.
    waiting: AtomicUsize,
}

impl WaitLines {
    /// Whether `client` is first in the line of one of `keys` of `db`: a
    /// group leader's waiter proposes its retry only then (one proposal
    /// per write, in the order the clients blocked; the others are woken
    /// again when it leaves the line).
    pub fn first_in_any(&self, client: u64, db: usize, keys: &[Box<[u8]>]) -> bool {
        keys.iter()
            .filter_map(|key| ekey(db, key).ok())
            .any(|ekey| self.first_in_line(client, &ekey))
    }

    /// Whether `client` may take from `ekey` now: nobody waits for it, or
    /// the client is first in its line. Others wait their turn (they were
    /// woken by the same write and the first of them takes it).
    pub fn first_in_line(&self, client: u64, ekey: &[u8]) -> bool {
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return true;
        }
        let lines = self.lines.lock();
        match lines.get(ekey) {
            None => true,
            Some(line) => line.front().is_none_or(|&first| first == client),
        }
    }
}

/// A blocked client's places in the lines of its keys; leaving them (on
/// drop: served, timed out, killed, disconnected) wakes the clients behind,
/// who may now be first.
pub struct InLine {
    client: u64,
    ekeys: Vec<EKey>,
    lines: Arc<WaitLines>,
    keyspace: Arc<KeyspaceSlot>,
}

impl InLine {
    /// Puts the client at the end of the line of each of `keys` of `db`.
    pub fn join(shared: &Shared, client: u64, db: usize, keys: &[Box<[u8]>]) -> InLine {
        let mut ekeys: Vec<EKey> = keys.iter().filter_map(|k| ekey(db, k).ok()).collect();
        ekeys.sort();
        ekeys.dedup();
        let lines = &shared.wait_lines;
        {
            let mut map = lines.lines.lock();
            for ekey in &ekeys {
                map.entry(ekey.clone()).or_default().push_back(client);
            }
            lines.waiting.fetch_add(ekeys.len(), Ordering::SeqCst);
        }
        InLine {
            client,
            ekeys,
            lines: lines.clone(),
            keyspace: shared.keyspace.clone(),
        }
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        let mut behind = Vec::new();
        {
            let mut map = self.lines.lines.lock();
            for ekey in &self.ekeys {
                let Some(line) = map.get_mut(ekey) else {
                    continue;
                };
                if let Some(at) = line.iter().position(|&c| c == self.client) {
                    line.remove(at);
                    self.lines.waiting.fetch_sub(1, Ordering::SeqCst);
                }
                if line.is_empty() {
                    map.remove(ekey);
                } else {
                    behind.push(ekey.clone());
                }
            }
        }
        // (No keyspace while a reload has it closed: the reload wakes
        // every blocked client itself.)
        if let Some(keyspace) = self.keyspace.try_guard().as_ref() {
            for ekey in behind {
                keyspace.signal_written(&ekey);
            }
        }
    }
}
