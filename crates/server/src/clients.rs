//! The registry of connected clients, for CLIENT LIST/INFO/KILL and INFO.
//!
//! Each connection owns its state; what other connections may look at or
//! act on (name, database, last command, a kill request) sits in a shared
//! `ClientInfo` of atomics. The registry's lock is taken on connect,
//! disconnect and CLIENT LIST, never per command.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
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
    /// Milliseconds since `connected` at the last command.
    pub last_active_ms: AtomicU64,
    /// The last command's name (an index into the command table).
    pub last_command: AtomicUsize,
    /// Commands queued by MULTI, or -1 outside MULTI.
    pub multi: AtomicI64,
    pub killed: AtomicBool,
    pub kill: Notify,
}

impl ClientInfo {
    pub fn request_kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill.notify_one();
    }

    /// One line of CLIENT LIST, in Redis's format.
    pub fn describe(&self, command_name: &str) -> String {
        let age = self.connected.elapsed();
        let idle_ms =
            (age.as_millis() as u64).saturating_sub(self.last_active_ms.load(Ordering::Relaxed));
        let mut line = String::new();
        let _ = write!(
            line,
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags=N db={} sub=0 psub=0 ssub=0 \
             multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 \
             tot-mem=0 events=r cmd={} user=default redir=-1 resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.local_addr,
            self.name.lock(),
            age.as_secs(),
            idle_ms / 1000,
            self.db.load(Ordering::Relaxed),
            self.multi.load(Ordering::Relaxed),
            command_name,
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
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let info = Arc::new(ClientInfo {
            id,
            addr,
            local_addr,
            connected: Instant::now(),
            name: Mutex::new(String::new()),
            lib_name: Mutex::new(String::new()),
            lib_ver: Mutex::new(String::new()),
            db: AtomicUsize::new(0),
            resp: AtomicU8::new(2),
            last_active_ms: AtomicU64::new(0),
            last_command: AtomicUsize::new(usize::MAX),
            multi: AtomicI64::new(-1),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
        });
        clients.insert(id, info.clone());
        Some(info)
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

    /// Asks every connection to close (shutdown).
    pub fn kill_all(&self) {
        for client in self.clients.lock().values() {
            client.request_kill();
        }
    }
}
