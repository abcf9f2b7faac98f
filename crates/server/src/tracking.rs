//! Client-side caching (CLIENT TRACKING), as Redis 7.0 does it.
//!
//! - **Default mode**: the keys a tracking client reads (its read-only
//!   commands' keys; with OPTIN only after CLIENT CACHING yes, with OPTOUT
//!   not after CLIENT CACHING no) go into one table, key → clients. When a
//!   key changes, every client in its entry gets one invalidation and the
//!   entry goes (a client must read the key again to hear of it again).
//!   The table holds at most `tracking-table-max-keys` keys: past it,
//!   keys are invalidated and dropped to make room, as Redis does.
//! - **BCAST**: a client names prefixes (none: every key); every change to
//!   a key under one of them is sent, without reads being remembered.
//!   A command's keys for one prefix go in one message.
//!
//! Invalidations go to the client itself over RESP3 (`>2 invalidate
//! [keys]`), or to the client it REDIRECTs to: as a push if that one
//! speaks RESP3, as a message on `__redis__:invalidate` if it is a RESP2
//! subscriber, otherwise nowhere. A redirect to a client that has gone is
//! reported to a RESP3 client (`tracking-redir-broken`). FLUSHDB and
//! FLUSHALL send every tracking client a null invalidation (everything).
//!
//! The changed keys come from the keyspace (`keyspace::modified`: every
//! write, expiry and eviction passes WATCH's flags, which note them per
//! thread); a command's are taken right after it runs, so NOLOOP knows who
//! changed them. Like every other output to a client, the messages go
//! through its outbox: one taken before a command's reply (an eviction's)
//! precedes it; one caused by the command follows it. With no tracking
//! client at all, the request path pays one relaxed load.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use parking_lot::Mutex;

use crate::clients::ClientInfo;
use crate::outbox::{Frame, Outbox};
use crate::shared::Shared;

/// One tracking client's settings (CLIENT TRACKING ON's options).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The client invalidations go to; 0: this one.
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// BCAST's prefixes, sorted (as Redis's radix tree lists them).
    pub prefixes: Vec<Box<[u8]>>,
}

struct Tracker {
    info: Arc<ClientInfo>,
    outbox: Arc<Outbox>,
    options: Options,
    /// The redirect target was found gone (TRACKINGINFO's broken_redirect).
    broken_redirect: bool,
}

#[derive(Default)]
struct Inner {
    /// Default mode: key → the clients that read it since its last change.
    table: HashMap<Box<[u8]>, HashSet<u64>>,
    /// (key, client) pairs in `table` (INFO's tracking_total_items).
    items: usize,
    /// BCAST: prefix → its clients.
    prefixes: BTreeMap<Box<[u8]>, HashSet<u64>>,
    clients: HashMap<u64, Tracker>,
    /// Whether this server holds a `modified::want` (while `engaged`).
    wanted: bool,
}

/// The server's tracking state (in `Shared`).
pub struct Tracking {
    /// Some client tracks, or the table still holds keys read by clients
    /// that stopped (they go when written or flushed, as in Redis): while
    /// false the request path is free of tracking.
    engaged: AtomicBool,
    /// `tracking-table-max-keys` (0: no limit).
    max_keys: AtomicUsize,
    inner: Mutex<Inner>,
}

/// INFO's counts.
pub struct Counts {
    pub clients: usize,
    pub keys: usize,
    pub items: usize,
    pub prefixes: usize,
}

/// A frame to queue in one outbox once the tracking lock is released (a
/// push may disconnect a client over its output limit).
struct Message {
    outbox: Arc<Outbox>,
    frame: Frame,
}

impl Default for Tracking {
    fn default() -> Self {
        Tracking {
            engaged: AtomicBool::new(false),
            max_keys: AtomicUsize::new(1_000_000),
            inner: Mutex::default(),
        }
    }
}

impl Tracking {
    /// `tracking-table-max-keys`: enforced after the next command (as
    /// Redis's cron does it, after the CONFIG SET's reply).
    pub fn set_max_keys(&self, max: usize) {
        self.max_keys.store(max, Ordering::Relaxed);
    }

    pub fn active(&self) -> bool {
        self.engaged.load(Ordering::Relaxed)
    }

    /// After any change to `inner`'s clients or table: whether commands
    /// must note what they change (`engaged`, and the keyspace's notes).
    fn settle(&self, inner: &mut Inner) {
        let engaged = !inner.clients.is_empty() || !inner.table.is_empty();
        if engaged != inner.wanted {
            engram_keyspace::modified::want(engaged);
            inner.wanted = engaged;
        }
        self.engaged.store(engaged, Ordering::Relaxed);
    }

    pub fn counts(&self) -> Counts {
        let inner = self.inner.lock();
        Counts {
            clients: inner.clients.len(),
            keys: inner.table.len(),
            items: inner.items,
            prefixes: inner.prefixes.len(),
        }
    }

    /// The options of client `id`, if it tracks.
    pub fn options(&self, id: u64) -> Option<(Options, bool)> {
        let inner = self.inner.lock();
        inner
            .clients
            .get(&id)
            .map(|t| (t.options.clone(), t.broken_redirect))
    }

    /// CLIENT TRACKING ON, its options checked by the caller (as Redis
    /// orders its errors); BCAST prefixes add to those already set.
    pub fn enable(&self, info: &Arc<ClientInfo>, outbox: Arc<Outbox>, mut options: Options) {
        let mut inner = self.inner.lock();
        let id = info.id;
        let old_prefixes = inner
            .clients
            .get(&id)
            .map(|t| t.options.prefixes.clone())
            .unwrap_or_default();
        if options.bcast {
            if options.prefixes.is_empty() && old_prefixes.is_empty() {
                options.prefixes.push(Box::from(&b""[..]));
            }
            for prefix in &options.prefixes {
                inner.prefixes.entry(prefix.clone()).or_default().insert(id);
            }
            let mut all: Vec<Box<[u8]>> = old_prefixes;
            all.extend(options.prefixes.iter().cloned());
            all.sort();
            all.dedup();
            options.prefixes = all;
        }
        inner.clients.insert(
            id,
            Tracker {
                info: info.clone(),
                outbox,
                options,
                broken_redirect: false,
            },
        );
        self.settle(&mut inner);
    }

    /// CLIENT TRACKING OFF (also RESET and disconnection). The client's
    /// keys stay in the table until they change or a flush: as in Redis,
    /// an entry for a client no longer tracking is skipped then (and INFO
    /// counts it meanwhile).
    pub fn disable(&self, id: u64) {
        let mut inner = self.inner.lock();
        let Some(tracker) = inner.clients.remove(&id) else {
            return;
        };
        for prefix in &tracker.options.prefixes {
            if let Some(clients) = inner.prefixes.get_mut(prefix) {
                clients.remove(&id);
                if clients.is_empty() {
                    inner.prefixes.remove(prefix);
                }
            }
        }
        self.settle(&mut inner);
    }

    /// Remembers `keys`, read by client `id` (default mode).
    pub fn remember(&self, id: u64, keys: &[&[u8]]) {
        let mut inner = self.inner.lock();
        for &key in keys {
            let clients = inner.table.entry(Box::from(key)).or_default();
            if clients.insert(id) {
                inner.items += 1;
            }
        }
    }

    /// Invalidates and forgets keys until the table holds at most
    /// `tracking-table-max-keys`, as Redis's `trackingLimitUsedSlots`.
    pub fn limit(&self, shared: &Shared) {
        let max_keys = self.max_keys.load(Ordering::Relaxed);
        let mut inner = self.inner.lock();
        let mut messages = Vec::new();
        while max_keys > 0 && inner.table.len() > max_keys {
            let Some(key) = inner.table.keys().next().cloned() else {
                break;
            };
            invalidate_key(&mut inner, shared, &key, None, &mut messages);
        }
        self.settle(&mut inner);
        drop(inner);
        send(shared, messages);
    }

    /// Invalidates `keys` (client names), changed by client `by` (None:
    /// the server itself: expiry).
    pub fn invalidate(&self, shared: &Shared, keys: &[Box<[u8]>], by: Option<u64>) {
        self.invalidate_tracked(shared, keys, by);
        self.broadcast(shared, keys, by);
    }

    /// The default mode's half of `invalidate`: the table's entries.
    pub fn invalidate_tracked(&self, shared: &Shared, keys: &[Box<[u8]>], by: Option<u64>) {
        if keys.is_empty() {
            return;
        }
        let mut inner = self.inner.lock();
        let mut messages = Vec::new();
        for key in keys {
            invalidate_key(&mut inner, shared, key, by, &mut messages);
        }
        self.settle(&mut inner);
        drop(inner);
        send(shared, messages);
    }

    /// BCAST's half of `invalidate`: per prefix, one message with its keys
    /// to each of its clients.
    pub fn broadcast(&self, shared: &Shared, keys: &[Box<[u8]>], by: Option<u64>) {
        if keys.is_empty() {
            return;
        }
        let mut inner = self.inner.lock();
        let mut messages = Vec::new();
        let mut broadcasts: Vec<(u64, Vec<Box<[u8]>>)> = Vec::new();
        for (prefix, clients) in &inner.prefixes {
            let matching: Vec<Box<[u8]>> = keys
                .iter()
                .filter(|k| k.starts_with(prefix))
                .cloned()
                .collect();
            if matching.is_empty() {
                continue;
            }
            for &id in clients {
                broadcasts.push((id, matching.clone()));
            }
        }
        for (id, keys) in broadcasts {
            let noloop = inner.clients.get(&id).is_some_and(|t| t.options.noloop);
            let keys: Vec<Box<[u8]>> = if noloop && by == Some(id) {
                Vec::new()
            } else {
                keys
            };
            if !keys.is_empty() {
                address(&mut inner, shared, id, Some(keys), &mut messages);
            }
        }
        drop(inner);
        send(shared, messages);
    }

    /// FLUSHDB/FLUSHALL: every tracking client is told everything changed;
    /// the table is emptied.
    pub fn flushed(&self, shared: &Shared) {
        let mut inner = self.inner.lock();
        inner.table.clear();
        inner.items = 0;
        self.settle(&mut inner);
        let ids: Vec<u64> = inner.clients.keys().copied().collect();
        let mut messages = Vec::new();
        for id in ids {
            address(&mut inner, shared, id, None, &mut messages);
        }
        drop(inner);
        send(shared, messages);
    }
}

/// Removes `key` from the table and addresses its clients' invalidations.
fn invalidate_key(
    inner: &mut Inner,
    shared: &Shared,
    key: &[u8],
    by: Option<u64>,
    messages: &mut Vec<Message>,
) {
    let Some(ids) = inner.table.remove(key) else {
        return;
    };
    inner.items -= ids.len();
    for id in ids {
        let Some(tracker) = inner.clients.get(&id) else {
            continue;
        };
        if tracker.options.bcast || (tracker.options.noloop && by == Some(id)) {
            continue;
        }
        address(inner, shared, id, Some(vec![Box::from(key)]), messages);
    }
}

/// Addresses client `id`'s invalidation of `keys` (None: everything): to
/// itself over RESP3, or to its redirect target as Redis's
/// `sendTrackingMessage` decides.
fn address(
    inner: &mut Inner,
    shared: &Shared,
    id: u64,
    keys: Option<Vec<Box<[u8]>>>,
    messages: &mut Vec<Message>,
) {
    let Some(tracker) = inner.clients.get_mut(&id) else {
        return;
    };
    // A flush's null is in the tracking client's protocol, as Redis's.
    let null: &[u8] = if resp3(&tracker.info) {
        b"_\r\n"
    } else {
        b"$-1\r\n"
    };
    if tracker.options.redirect == 0 {
        if resp3(&tracker.info) {
            messages.push(Message {
                outbox: tracker.outbox.clone(),
                frame: invalidation(false, keys.as_deref(), null),
            });
        }
        return;
    }
    let Some(target) = shared.clients.get(tracker.options.redirect) else {
        tracker.broken_redirect = true;
        if resp3(&tracker.info) {
            let mut body = BytesMut::new();
            put_bulk(&mut body, b"tracking-redir-broken");
            body.put_slice(format!(":{}\r\n", tracker.options.redirect).as_bytes());
            messages.push(Message {
                outbox: tracker.outbox.clone(),
                frame: Frame {
                    elements: 2,
                    body: body.freeze(),
                },
            });
        }
        return;
    };
    let Some(outbox) = target.outbox.lock().as_ref().and_then(|w| w.upgrade()) else {
        return;
    };
    let as_pubsub = !resp3(&target);
    if as_pubsub && !target.is_subscribed() {
        // RESP2 and not subscribed: nothing can carry it.
        return;
    }
    messages.push(Message {
        outbox,
        frame: invalidation(as_pubsub, keys.as_deref(), null),
    });
}

/// `>2 invalidate [keys]` (the header by the receiver's protocol), or
/// RESP2's `message __redis__:invalidate [keys]`.
fn invalidation(as_pubsub: bool, keys: Option<&[Box<[u8]>]>, null: &[u8]) -> Frame {
    let mut body = BytesMut::new();
    let elements = if as_pubsub {
        put_bulk(&mut body, b"message");
        put_bulk(&mut body, b"__redis__:invalidate");
        3
    } else {
        put_bulk(&mut body, b"invalidate");
        2
    };
    match keys {
        Some(keys) => {
            body.put_slice(format!("*{}\r\n", keys.len()).as_bytes());
            for key in keys {
                put_bulk(&mut body, key);
            }
        }
        None => body.put_slice(null),
    }
    Frame {
        elements,
        body: body.freeze(),
    }
}

fn resp3(info: &ClientInfo) -> bool {
    info.resp.load(Ordering::Relaxed) >= 3
}

fn put_bulk(body: &mut BytesMut, bytes: &[u8]) {
    body.put_slice(format!("${}\r\n", bytes.len()).as_bytes());
    body.put_slice(bytes);
    body.put_slice(b"\r\n");
}

fn send(shared: &Shared, messages: Vec<Message>) {
    for message in messages {
        message.outbox.push(message.frame, &shared.output_limits);
    }
}

/// Invalidates the keys this thread's writes changed since the last call
/// (`keyspace::modified`), changed by client `by` (None: the server).
pub fn invalidate_modified(shared: &Shared, by: Option<u64>) {
    invalidate_modified_in_order(shared, by, &[]);
}

/// `invalidate_modified`, the keys among `order` first and in its order.
fn invalidate_modified_in_order(shared: &Shared, by: Option<u64>, order: &[&[u8]]) {
    let stored = engram_keyspace::modified::take();
    if stored.is_empty() || !shared.tracking.active() {
        return;
    }
    // A reload's instant without a keyspace: no names to give, so every
    // tracked key is invalidated, as the reload does anyway.
    let keyspace = shared.keyspace.try_guard();
    let Some(keyspace) = keyspace.as_ref() else {
        shared.tracking.flushed(shared);
        return;
    };
    let mut keys: Vec<Box<[u8]>> = Vec::with_capacity(stored.len());
    for ekey in &stored {
        if let Some((_, key)) = keyspace.client_key(ekey) {
            if !keys.iter().any(|k| **k == *key) {
                keys.push(Box::from(key));
            }
        }
    }
    if !order.is_empty() {
        let rank = |key: &[u8]| order.iter().position(|k| *k == key).unwrap_or(usize::MAX);
        keys.sort_by_key(|key| rank(key));
    }
    shared.tracking.invalidate(shared, &keys, by);
}

/// After a command of a client, while some client tracks: what it
/// changed is invalidated (a FLUSH invalidates everything), then, for a
/// tracking client in default mode, the keys of a read-only command are
/// remembered (OPTIN: after CLIENT CACHING yes only; OPTOUT: not after
/// CLIENT CACHING no). CLIENT CACHING's word lasts one command (outside
/// MULTI; CLIENT's own subcommands keep it).
pub fn after_command(
    shared: &Shared,
    session: &mut crate::session::Session,
    spec: &crate::commands::CommandSpec,
    args: &crate::resp::Args,
) {
    let id = session.info.id;
    if let Some(queue) = session.tracked_exec.take() {
        after_exec(shared, session, &queue);
    } else if matches!(spec.name, "flushdb" | "flushall") {
        engram_keyspace::modified::discard();
        shared.tracking.flushed(shared);
    } else {
        // In the order the command names its keys (MSET k2 .. k1: k2's
        // invalidation first), as Redis sends them.
        let order = spec.key_args(args);
        invalidate_modified_in_order(shared, Some(id), &order);
    }
    remember_keys(shared, session, spec, args);
    shared.tracking.limit(shared);
    if spec.name != "client" && !session.in_multi() {
        session.caching = false;
    }
}

/// After an EXEC that committed, while some client tracks. Its writes
/// were applied at the commit, so the keys they changed are known only
/// then; Redis, applying command by command, invalidates a key written
/// before a read of it in the transaction and remembers it after. That
/// order is replayed here over the queue: keys changed otherwise (an
/// expiry a read found) first, then per command in order a write's
/// changed keys invalidated, a read's keys remembered.
pub fn after_exec(
    shared: &Shared,
    session: &crate::session::Session,
    queue: &[crate::resp::OwnedArgs],
) {
    let id = session.info.id;
    let commands: Vec<_> = queue
        .iter()
        .filter_map(|queued| {
            let args = queued.args();
            crate::commands::lookup(args.get(0)).map(|(_, spec)| (spec, args))
        })
        .collect();
    if commands
        .iter()
        .any(|(spec, _)| matches!(spec.name, "flushdb" | "flushall"))
    {
        // Everything is invalidated; the reads after the flush remember.
        engram_keyspace::modified::discard();
        shared.tracking.flushed(shared);
        let mut flushed = false;
        for (spec, args) in &commands {
            flushed |= matches!(spec.name, "flushdb" | "flushall");
            if flushed && !spec.is(crate::commands::WRITE) {
                remember_keys(shared, session, spec, args);
            }
        }
        return;
    }
    let keyspace = shared.keyspace.try_guard();
    let Some(keyspace) = keyspace.as_ref() else {
        engram_keyspace::modified::discard();
        shared.tracking.flushed(shared);
        return;
    };
    let mut changed: Vec<Box<[u8]>> = Vec::new();
    for ekey in engram_keyspace::modified::take() {
        if let Some((_, key)) = keyspace.client_key(&ekey) {
            if !changed.iter().any(|k| **k == *key) {
                changed.push(Box::from(key));
            }
        }
    }
    let written = |key: &[u8]| {
        commands.iter().any(|(spec, args)| {
            spec.is(crate::commands::WRITE) && spec.key_args(args).contains(&key)
        })
    };
    let otherwise: Vec<Box<[u8]>> = changed.iter().filter(|k| !written(k)).cloned().collect();
    shared
        .tracking
        .invalidate_tracked(shared, &otherwise, Some(id));
    for (spec, args) in &commands {
        if spec.is(crate::commands::WRITE) {
            let keys: Vec<Box<[u8]>> = spec
                .key_args(args)
                .into_iter()
                .filter(|k| changed.iter().any(|c| **c == **k))
                .map(Box::from)
                .collect();
            shared.tracking.invalidate_tracked(shared, &keys, Some(id));
        } else {
            remember_keys(shared, session, spec, args);
        }
    }
    // BCAST: one message per prefix for the whole transaction.
    shared.tracking.broadcast(shared, &changed, Some(id));
}

/// Remembers the keys of a read-only command of a tracking client in
/// default mode (also each of EXEC's, as Redis's `call` does).
pub fn remember_keys(
    shared: &Shared,
    session: &crate::session::Session,
    spec: &crate::commands::CommandSpec,
    args: &crate::resp::Args,
) {
    // A script's keys are remembered when it reads (`scripting::run`), not
    // for running it.
    if !spec.is(crate::commands::READONLY)
        || matches!(spec.name, "eval_ro" | "evalsha_ro" | "fcall_ro")
    {
        return;
    }
    remember(shared, session, &spec.key_args(args));
}

/// Remembers `keys` as read by `session`'s client, if its tracking mode
/// wants them (not BCAST; OPTIN only after CACHING yes, OPTOUT unless
/// CACHING no).
pub fn remember(shared: &Shared, session: &crate::session::Session, keys: &[&[u8]]) {
    let id = session.info.id;
    let Some((options, _)) = shared.tracking.options(id) else {
        return;
    };
    let caching = session.caching;
    if options.bcast || (options.optin && !caching) || (options.optout && caching) {
        return;
    }
    if !keys.is_empty() {
        shared.tracking.remember(id, keys);
    }
}
