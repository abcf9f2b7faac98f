//! The registry of connected clients, for CLIENT LIST/INFO/KILL and INFO.
//!
//! Each connection owns its state; what other connections may look at or
//! act on (name, database, last command, a kill request, whether it is
//! blocked and a request to unblock it) sits in a shared `ClientInfo` of
//! atomics. The registry's lock is taken on connect, disconnect, CLIENT
//! LIST/KILL/UNBLOCK and INFO, never per command.
//!
//! ## Blocked clients (BLPOP...) and CLIENT UNBLOCK
//!
//! A connection waiting in a blocking command (see `connection`) is in the
//! `BLOCKED` state of its `ClientInfo::block`. Two parties may end that
//! state, and exactly one must win:
//!
//! - the connection itself, when a retry of its command is about to take
//!   an element (`claim_service`, called under the key's lock just before
//!   the pop is logged), moves it to `IDLE`;
//! - CLIENT UNBLOCK on another connection (`request_unblock`) moves it to
//!   `UNBLOCK_TIMEOUT` or `UNBLOCK_ERROR` and wakes the connection.
//!
//! Both are compare-and-swaps from `BLOCKED`, so either the element is taken
//! and CLIENT UNBLOCK answers 0 (the client was being served, no longer
//! blocked), or CLIENT UNBLOCK answers 1 and the retry takes nothing: the
//! element stays in the list for the next client. No lock is held across
//! the swap, so CLIENT UNBLOCK inside an EXEC (which holds key locks)
//! cannot deadlock with a retry (which takes them).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

pub struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub local_addr: SocketAddr,
    pub connected: Instant,
    pub name: Mutex<String>,
    pub lib_name: Mutex<String>,
    pub lib_ver: Mutex<String>,
    pub db: AtomicUsize,
    pub resp: AtomicU8,
    /// Odd while the connection waits for its client's next request (the
    /// only wait an idle `timeout` may end), even otherwise; the
    /// connection adds one as it enters and as it leaves that wait, two
    /// plain stores a read (see `Registry::sweep_idle`).
    pub read_waits: AtomicU64,
    /// `read_waits` as the last sweep saw it (written by the sweep only).
    swept_waits: AtomicU64,
    /// Milliseconds since `connected` from which the sweeps have seen the
    /// connection in one unbroken read wait (written by the sweep only).
    idle_since_ms: AtomicU64,
    /// The last command or subcommand (an id of the ACL catalog, which
    /// names subcommands `client|list` as CLIENT LIST shows them).
    pub last_command: AtomicUsize,
    /// Bytes of the query buffer from the command running on (CLIENT
    /// LIST's `qbuf`: Redis counts the command being processed).
    pub qbuf: AtomicUsize,
    /// Commands queued by MULTI, or -1 outside MULTI.
    pub multi: AtomicI64,
    pub killed: AtomicBool,
    pub kill: Notify,
    /// `IDLE`, `BLOCKED`, or an unblock request not yet acted on (see the
    /// module's documentation).
    block: AtomicU8,
    /// Wakes the blocked connection after `request_unblock`. A permit left
    /// over (the connection saw the request before waiting on this) only
    /// causes one spurious wakeup later, after which the state is checked.
    pub unblock: Notify,
    /// Subscriptions to channels, patterns and shard channels, as the
    /// connection's `ClientPubSub` holds them (CLIENT LIST's sub, psub,
    /// ssub).
    subscriptions: [AtomicU32; 3],
    /// In MONITOR mode (flag `O`).
    pub monitor: AtomicBool,
    /// The connection's outbox while it has one (subscriptions, MONITOR,
    /// tracking): where another client's tracking invalidations redirected
    /// here are queued. Weak: the outbox holds this info.
    pub outbox: Mutex<Option<std::sync::Weak<crate::outbox::Outbox>>>,
    /// The user the connection is authenticated as (CLIENT LIST's `user`;
    /// ACL DELUSER closes its connections). None before the session
    /// starts.
    pub user: Mutex<Option<Arc<crate::acl::User>>>,
}

/// `ClientInfo::block`: not in a blocking command's wait.
const IDLE: u8 = 0;
/// Waiting in a blocking command.
const BLOCKED: u8 = 1;
/// CLIENT UNBLOCK asked the wait to end as if timed out.
const UNBLOCK_TIMEOUT: u8 = 2;
/// CLIENT UNBLOCK asked the wait to end with an -UNBLOCKED error.
const UNBLOCK_ERROR: u8 = 3;

/// How CLIENT UNBLOCK ends a wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unblock {
    /// The command's timeout reply (a null array for the list commands).
    Timeout,
    /// `-UNBLOCKED client unblocked via CLIENT UNBLOCK`.
    Error,
}

impl Unblock {
    fn from_state(state: u8) -> Option<Unblock> {
        match state {
            UNBLOCK_TIMEOUT => Some(Unblock::Timeout),
            UNBLOCK_ERROR => Some(Unblock::Error),
            _ => None,
        }
    }
}

/// A connection's wait in a blocking command, from `ClientInfo::begin_wait`:
/// the client is `BLOCKED` until `finish` or drop (served, timed out,
/// unblocked, killed, disconnected: every way out).
pub struct Wait<'a> {
    info: &'a ClientInfo,
}

impl Wait<'_> {
    /// An unblock request not yet acted on.
    pub fn unblock_requested(&self) -> Option<Unblock> {
        Unblock::from_state(self.info.block.load(Ordering::Acquire))
    }

    /// Ends the wait; returns the unblock request that came before, if
    /// any (it then decides the reply).
    pub fn finish(&self) -> Option<Unblock> {
        Unblock::from_state(self.info.block.swap(IDLE, Ordering::AcqRel))
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.info.block.store(IDLE, Ordering::Release);
    }
}

impl ClientInfo {
    /// The connection starts waiting in a blocking command: CLIENT
    /// LIST shows flag `b`, INFO counts it, CLIENT UNBLOCK may end it.
    pub fn begin_wait(&self) -> Wait<'_> {
        self.block.store(BLOCKED, Ordering::Release);
        Wait { info: self }
    }

    /// Whether the client waits in a blocking command now (an unblock
    /// requested but not yet acted on counts as unblocked, as in Redis,
    /// where CLIENT UNBLOCK takes effect at once).
    pub fn is_blocked(&self) -> bool {
        self.block.load(Ordering::Acquire) == BLOCKED
    }

    /// CLIENT UNBLOCK: true if the client was blocked and now will not be
    /// served (its connection replies as `how` says).
    pub fn request_unblock(&self, how: Unblock) -> bool {
        let to = match how {
            Unblock::Timeout => UNBLOCK_TIMEOUT,
            Unblock::Error => UNBLOCK_ERROR,
        };
        let won = self
            .block
            .compare_exchange(BLOCKED, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.unblock.notify_one();
        }
        won
    }

    /// A blocked command's retry is about to take something (called under
    /// the key's lock, before the operation is logged): false if CLIENT
    /// UNBLOCK came first, and the retry must then take nothing. True also
    /// when the client is not waiting at all.
    pub fn claim_service(&self) -> bool {
        match self
            .block
            .compare_exchange(BLOCKED, IDLE, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == IDLE,
        }
    }

    pub fn set_subscriptions(&self, channels: usize, patterns: usize, shard: usize) {
        for (count, n) in self.subscriptions.iter().zip([channels, patterns, shard]) {
            count.store(n as u32, Ordering::Relaxed);
        }
    }

    /// In Redis's subscribed mode: any subscription (flag `P`, client
    /// type `pubsub`).
    pub fn is_subscribed(&self) -> bool {
        self.subscriptions
            .iter()
            .any(|count| count.load(Ordering::Relaxed) > 0)
    }

    /// The type CLIENT LIST TYPE and CLIENT KILL TYPE select by, as Redis
    /// names it: `pubsub` while subscribed, else `normal` (a MONITOR
    /// client too, as in Redis).
    pub fn client_type(&self) -> &'static str {
        if self.is_subscribed() {
            "pubsub"
        } else {
            "normal"
        }
    }

    pub fn request_kill(&self) {
        self.killed.store(true, Ordering::Release);
        // Every wait of the connection's: the read loop keeps one
        // registered while a blocked command or a flush waits on another.
        self.kill.notify_waiters();
        // And a wait that read `killed` just before it was set but made
        // its `Notified` after the call above: it finds this permit.
        self.kill.notify_one();
    }

    /// The name of the user the connection is authenticated as.
    pub fn user_name(&self) -> String {
        match &*self.user.lock() {
            Some(user) => user.name_lossy(),
            None => "default".to_string(),
        }
    }

    /// Whether the connection is authenticated as `user` (that very user,
    /// not a later one of the same name).
    pub fn is_user(&self, user: &Arc<crate::acl::User>) -> bool {
        self.user
            .lock()
            .as_ref()
            .is_some_and(|u| Arc::ptr_eq(u, user))
    }

    /// Enters (`true`) or leaves the wait for the client's next request.
    /// Only the connection's own task calls this.
    #[inline]
    pub fn set_reading(&self, reading: bool) {
        let waits = self.read_waits.load(Ordering::Relaxed);
        if (waits & 1 == 1) != reading {
            self.read_waits.store(waits + 1, Ordering::Relaxed);
        }
    }

    /// How long the connection has waited for a request, as of the last
    /// sweep (a second's resolution, as Redis's `idle`): 0 when it is busy
    /// or has read something since.
    fn idle_ms(&self, age_ms: u64) -> u64 {
        let waits = self.read_waits.load(Ordering::Relaxed);
        if waits & 1 == 1 && waits == self.swept_waits.load(Ordering::Relaxed) {
            age_ms.saturating_sub(self.idle_since_ms.load(Ordering::Relaxed))
        } else {
            0
        }
    }

    /// Notes what the connection is doing now (`Registry::sweep_idle`) and
    /// says whether an idle `timeout` (0: none) should close it.
    fn sweep(&self, timeout_ms: u64) -> bool {
        let age_ms = self.connected.elapsed().as_millis() as u64;
        let waits = self.read_waits.load(Ordering::Relaxed);
        if waits != self.swept_waits.load(Ordering::Relaxed) || waits & 1 == 0 {
            // Busy, or a new wait since the last sweep: idle from now.
            self.swept_waits.store(waits, Ordering::Relaxed);
            self.idle_since_ms.store(age_ms, Ordering::Relaxed);
            return false;
        }
        // Subscribers and monitors wait for others' output: Redis spares
        // them, and blocked clients (who are never in a read wait here).
        timeout_ms > 0
            && !self.is_subscribed()
            && !self.monitor.load(Ordering::Relaxed)
            && self.idle_ms(age_ms) > timeout_ms
    }

    /// One line of CLIENT LIST, in Redis's format.
    pub fn describe(&self, command_name: &str) -> String {
        let age = self.connected.elapsed();
        let idle_ms = self.idle_ms(age.as_millis() as u64);
        // Redis's letters, in its order: O monitor, P subscribed, x in
        // MULTI, b blocked, N for none.
        let mut flags = String::new();
        for (on, letter) in [
            (self.monitor.load(Ordering::Relaxed), 'O'),
            (self.is_subscribed(), 'P'),
            (self.multi.load(Ordering::Relaxed) >= 0, 'x'),
            (self.is_blocked(), 'b'),
        ] {
            if on {
                flags.push(letter);
            }
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let [sub, psub, ssub] = [0, 1, 2].map(|i| self.subscriptions[i].load(Ordering::Relaxed));
        let mut line = String::new();
        let _ = write!(
            line,
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db={} sub={sub} psub={psub} ssub={ssub} \
             multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 \
             tot-mem=0 events=r cmd={} user={} redir=-1 resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.local_addr,
            self.name.lock(),
            age.as_secs(),
            idle_ms / 1000,
            flags,
            self.db.load(Ordering::Relaxed),
            self.multi.load(Ordering::Relaxed),
            self.qbuf.load(Ordering::Relaxed),
            command_name,
            self.user_name(),
            self.resp.load(Ordering::Relaxed),
            self.lib_name.lock(),
            self.lib_ver.lock(),
        );
        line
    }
}

#[derive(Default)]
pub struct Registry {
    clients: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    next_id: AtomicU64,
}

impl Registry {
    /// Registers a new connection unless `maxclients` are connected.
    pub fn register(
        &self,
        addr: SocketAddr,
        local_addr: SocketAddr,
        maxclients: usize,
    ) -> Option<Arc<ClientInfo>> {
        let mut clients = self.clients.lock();
        if clients.len() >= maxclients {
            return None;
        }
        let info = self.new_info(addr, local_addr);
        clients.insert(info.id, info.clone());
        Some(info)
    }

    /// A client of the server's own that is no connection (a replicated
    /// node's apply thread): an id, never listed, never counted.
    pub fn detached(&self, addr: SocketAddr) -> Arc<ClientInfo> {
        self.new_info(addr, addr)
    }

    fn new_info(&self, addr: SocketAddr, local_addr: SocketAddr) -> Arc<ClientInfo> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        Arc::new(ClientInfo {
            id,
            addr,
            local_addr,
            connected: Instant::now(),
            name: Mutex::new(String::new()),
            lib_name: Mutex::new(String::new()),
            lib_ver: Mutex::new(String::new()),
            db: AtomicUsize::new(0),
            resp: AtomicU8::new(2),
            read_waits: AtomicU64::new(0),
            swept_waits: AtomicU64::new(0),
            idle_since_ms: AtomicU64::new(0),
            last_command: AtomicUsize::new(usize::MAX),
            qbuf: AtomicUsize::new(0),
            multi: AtomicI64::new(-1),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            block: AtomicU8::new(IDLE),
            unblock: Notify::new(),
            subscriptions: Default::default(),
            monitor: AtomicBool::new(false),
            outbox: Mutex::new(None),
            user: Mutex::new(None),
        })
    }

    pub fn unregister(&self, id: u64) {
        self.clients.lock().remove(&id);
    }

    pub fn len(&self) -> usize {
        self.clients.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn all(&self) -> Vec<Arc<ClientInfo>> {
        self.clients.lock().values().cloned().collect()
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientInfo>> {
        self.clients.lock().get(&id).cloned()
    }

    /// Clients waiting in a blocking command now (INFO's
    /// `blocked_clients`): counted from the clients' own states, so the
    /// number cannot drift from what CLIENT LIST shows.
    pub fn blocked(&self) -> usize {
        self.clients
            .lock()
            .values()
            .filter(|c| c.is_blocked())
            .count()
    }

    /// Redis's `clientsCron` timeout check, run once a second: notes which
    /// connections are waiting for a request and since when (CLIENT LIST's
    /// `idle`), and closes those idle longer than `timeout_secs` (0: none).
    /// Idleness is seen from here, not timed on each connection: a timer
    /// armed per read cost every request, and a client already idle when
    /// `CONFIG SET timeout` came was never closed.
    pub fn sweep_idle(&self, timeout_secs: u64) {
        for client in self.clients.lock().values() {
            if client.sweep(timeout_secs.saturating_mul(1000)) {
                log::debug!(
                    "client id={} idle for over {timeout_secs} s: closing",
                    client.id
                );
                client.request_kill();
            }
        }
    }

    /// Asks every connection to close (shutdown).
    pub fn kill_all(&self) {
        for client in self.clients.lock().values() {
            client.request_kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Arc<ClientInfo> {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        Registry::default().register(addr, addr, 1).unwrap()
    }

    #[test]
    fn a_sweep_closes_only_a_client_seen_waiting_for_a_request_too_long() {
        let pause = || std::thread::sleep(std::time::Duration::from_millis(30));
        let c = client();
        // Busy (in a command): never idle, however long.
        assert!(!c.sweep(10));
        pause();
        assert!(!c.sweep(10));
        assert_eq!(c.idle_ms(u64::MAX), 0);
        // Waiting: idle from the first sweep that sees the wait.
        c.set_reading(true);
        assert!(!c.sweep(10));
        pause();
        assert!(c.idle_ms(c.connected.elapsed().as_millis() as u64) >= 30);
        // No timeout: counted, never closed.
        assert!(!c.sweep(0));
        assert!(c.sweep(10));
        // A request read between two sweeps starts the count again.
        c.set_reading(false);
        c.set_reading(true);
        assert_eq!(c.idle_ms(u64::MAX), 0);
        assert!(!c.sweep(10));
        pause();
        // A subscriber or a monitor waits for others' output: spared.
        c.set_subscriptions(1, 0, 0);
        assert!(!c.sweep(10));
        c.set_subscriptions(0, 0, 0);
        c.monitor.store(true, Ordering::Relaxed);
        assert!(!c.sweep(10));
        c.monitor.store(false, Ordering::Relaxed);
        assert!(c.sweep(10));
    }

    #[test]
    fn one_of_unblock_and_service_wins() {
        let c = client();
        // Not waiting: nothing to unblock; a first try serves freely.
        assert!(!c.request_unblock(Unblock::Timeout));
        assert!(c.claim_service());

        // The unblock first: the retry must take nothing.
        let wait = c.begin_wait();
        assert!(c.is_blocked());
        assert!(c.request_unblock(Unblock::Error));
        assert!(!c.is_blocked());
        assert!(!c.request_unblock(Unblock::Timeout), "only once");
        assert!(!c.claim_service());
        assert_eq!(wait.unblock_requested(), Some(Unblock::Error));
        assert_eq!(wait.finish(), Some(Unblock::Error));
        drop(wait);

        // Service first: a later unblock finds the client served.
        let wait = c.begin_wait();
        assert!(c.claim_service());
        assert!(!c.is_blocked());
        assert!(!c.request_unblock(Unblock::Timeout));
        assert_eq!(wait.finish(), None);
        drop(wait);

        // Every way out of a wait ends it.
        let wait = c.begin_wait();
        drop(wait);
        assert!(!c.is_blocked());
        assert!(!c.request_unblock(Unblock::Timeout));
    }

    #[test]
    fn flags_in_client_list() {
        let c = client();
        let flags = |c: &ClientInfo| {
            let line = c.describe("blpop");
            line.split(' ')
                .find_map(|w| w.strip_prefix("flags="))
                .unwrap()
                .to_string()
        };
        assert_eq!(flags(&c), "N");
        c.set_subscriptions(1, 0, 2);
        assert_eq!(flags(&c), "P");
        assert!(c.describe("subscribe").contains(" sub=1 psub=0 ssub=2 "));
        assert_eq!(c.client_type(), "pubsub");
        c.set_subscriptions(0, 0, 0);
        c.monitor.store(true, Ordering::Relaxed);
        assert_eq!(flags(&c), "O");
        assert_eq!(c.client_type(), "normal");
        c.monitor.store(false, Ordering::Relaxed);
        let wait = c.begin_wait();
        assert_eq!(flags(&c), "b");
        c.multi.store(0, Ordering::Relaxed);
        assert_eq!(flags(&c), "xb");
        drop(wait);
        assert_eq!(flags(&c), "x");
    }
}
