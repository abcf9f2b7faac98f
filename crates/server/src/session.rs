//! A connection's own state: selected database, protocol, authentication,
//! the MULTI queue and WATCHed keys.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::clients::ClientInfo;
use crate::keyspace::EKey;
use crate::resp::OwnedArgs;

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
