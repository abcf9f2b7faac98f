//! Pub/sub: who is subscribed to what, and delivery of messages.
//!
//! The registry maps channels (and, apart, shard channels) to their
//! subscribers in 64 shards, each behind its own read-write lock, and
//! keeps patterns in one map behind another. PUBLISH takes one shard's
//! read lock, and the patterns' read lock only while any pattern
//! subscription exists; under them it only appends a frame to each
//! subscriber's `Outbox` (no I/O, never waiting for a subscriber), so
//! publishers run in parallel and a slow subscriber holds up nobody.
//! SUBSCRIBE and UNSUBSCRIBE take the write lock of one shard.
//!
//! `Shared::publish` is the one way in for messages: PUBLISH, and the
//! seam for anything else that publishes (keyspace notifications).
//!
//! What a connection subscribed to is kept by the connection itself
//! (`ClientPubSub`, in its session), and mirrored in the registry; the
//! counts CLIENT LIST shows are copied into its `ClientInfo`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::RwLock;

use crate::clients::ClientInfo;
use crate::outbox::{Frame, Outbox};
use crate::output_limit::{Class, OutputLimits};

const SHARDS: usize = 64;

#[derive(Clone)]
struct Subscriber {
    id: u64,
    outbox: Arc<Outbox>,
}

type Lists = HashMap<Bytes, Vec<Subscriber>>;

/// Channel name → subscribers, in shards.
struct Channels {
    shards: Box<[RwLock<Lists>]>,
    /// Channels with at least one subscriber (INFO, PUBSUB).
    count: AtomicUsize,
}

impl Channels {
    fn new() -> Channels {
        Channels {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            count: AtomicUsize::new(0),
        }
    }

    fn shard(&self, channel: &[u8]) -> &RwLock<Lists> {
        &self.shards[xxhash_rust::xxh3::xxh3_64(channel) as usize % SHARDS]
    }

    fn add(&self, channel: Bytes, subscriber: Subscriber) {
        let mut lists = self.shard(&channel).write();
        lists
            .entry(channel)
            .or_insert_with(|| {
                self.count.fetch_add(1, Ordering::Relaxed);
                Vec::new()
            })
            .push(subscriber);
    }

    fn remove(&self, channel: &[u8], id: u64) {
        let mut lists = self.shard(channel).write();
        let Some(list) = lists.get_mut(channel) else {
            return;
        };
        list.retain(|s| s.id != id);
        if list.is_empty() {
            // No empty lists kept: a client cannot grow the registry by
            // subscribing to and leaving millions of channels.
            lists.remove(channel);
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Queues `frame` for every subscriber of `channel`; how many.
    fn deliver(
        &self,
        channel: &[u8],
        frame: impl FnOnce() -> Frame,
        limits: &OutputLimits,
    ) -> usize {
        let lists = self.shard(channel).read();
        let Some(list) = lists.get(channel) else {
            return 0;
        };
        let frame = frame();
        for subscriber in list {
            subscriber.outbox.push(frame.clone(), limits);
        }
        list.len()
    }

    fn subscribers(&self, channel: &[u8]) -> usize {
        self.shard(channel).read().get(channel).map_or(0, Vec::len)
    }

    fn names(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let mut names = Vec::new();
        for shard in self.shards.iter() {
            for name in shard.read().keys() {
                if pattern.is_none_or(|p| crate::glob::matches(p, name)) {
                    names.push(name.clone());
                }
            }
        }
        names
    }
}

/// The server's subscriptions (one, in `Shared`).
pub struct PubSub {
    channels: Channels,
    shard_channels: Channels,
    patterns: RwLock<Lists>,
    /// Pattern subscriptions of all clients: while none, PUBLISH skips the
    /// patterns' lock.
    pattern_subscriptions: AtomicUsize,
}

impl Default for PubSub {
    fn default() -> Self {
        PubSub {
            channels: Channels::new(),
            shard_channels: Channels::new(),
            patterns: RwLock::default(),
            pattern_subscriptions: AtomicUsize::new(0),
        }
    }
}

/// `$<len>\r\n<bytes>\r\n`.
fn put_bulk(buf: &mut BytesMut, bytes: &[u8]) {
    let mut digits = itoa::Buffer::new();
    buf.put_u8(b'$');
    buf.put_slice(digits.format(bytes.len()).as_bytes());
    buf.put_slice(b"\r\n");
    buf.put_slice(bytes);
    buf.put_slice(b"\r\n");
}

/// A message frame: `kind`, then each of `parts`, as bulk strings.
fn message(kind: &[u8], parts: &[&[u8]]) -> Frame {
    let size: usize = parts.iter().map(|p| p.len() + 16).sum::<usize>() + kind.len() + 8;
    let mut body = BytesMut::with_capacity(size);
    put_bulk(&mut body, kind);
    for part in parts {
        put_bulk(&mut body, part);
    }
    Frame {
        elements: 1 + parts.len() as u8,
        body: body.freeze(),
    }
}

impl PubSub {
    /// Every subscription of client `id`, as (channel or pattern,
    /// is_pattern). Scans everything: for rare administrative paths only
    /// (ACL SETUSER revoking channels).
    pub fn subscriptions_of(&self, id: u64) -> Vec<(Bytes, bool)> {
        let mut found = Vec::new();
        for channels in [&self.channels, &self.shard_channels] {
            for shard in channels.shards.iter() {
                for (name, list) in shard.read().iter() {
                    if list.iter().any(|s| s.id == id) {
                        found.push((name.clone(), false));
                    }
                }
            }
        }
        for (pattern, list) in self.patterns.read().iter() {
            if list.iter().any(|s| s.id == id) {
                found.push((pattern.clone(), true));
            }
        }
        found
    }

    /// PUBLISH: `message` to the subscribers of `channel` and of every
    /// pattern matching it (a client subscribed both ways gets it twice,
    /// as in Redis); returns how many received it.
    pub fn publish(&self, channel: &[u8], payload: &[u8], limits: &OutputLimits) -> usize {
        let mut receivers =
            self.channels
                .deliver(channel, || message(b"message", &[channel, payload]), limits);
        if self.pattern_subscriptions.load(Ordering::Acquire) == 0 {
            return receivers;
        }
        let patterns = self.patterns.read();
        for (pattern, list) in patterns.iter() {
            if !crate::glob::matches(pattern, channel) {
                continue;
            }
            let frame = message(b"pmessage", &[pattern, channel, payload]);
            for subscriber in list {
                subscriber.outbox.push(frame.clone(), limits);
            }
            receivers += list.len();
        }
        receivers
    }

    /// SPUBLISH: to the subscribers of shard channel `channel` (patterns
    /// do not apply).
    pub fn spublish(&self, channel: &[u8], payload: &[u8], limits: &OutputLimits) -> usize {
        self.shard_channels.deliver(
            channel,
            || message(b"smessage", &[channel, payload]),
            limits,
        )
    }

    /// Channels with subscribers, those matching `pattern` if given
    /// (PUBSUB CHANNELS).
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        self.channels.names(pattern)
    }

    pub fn shard_channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        self.shard_channels.names(pattern)
    }

    /// Subscribers of `channel`, not counting patterns (PUBSUB NUMSUB).
    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.channels.subscribers(channel)
    }

    pub fn shard_numsub(&self, channel: &[u8]) -> usize {
        self.shard_channels.subscribers(channel)
    }

    /// Distinct patterns subscribed to (PUBSUB NUMPAT, INFO).
    pub fn numpat(&self) -> usize {
        self.patterns.read().len()
    }

    /// Channels with subscribers (INFO's `pubsub_channels`).
    pub fn channel_count(&self) -> usize {
        self.channels.count.load(Ordering::Relaxed)
    }

    pub fn shard_channel_count(&self) -> usize {
        self.shard_channels.count.load(Ordering::Relaxed)
    }

    fn add_pattern(&self, pattern: Bytes, subscriber: Subscriber) {
        self.patterns
            .write()
            .entry(pattern)
            .or_default()
            .push(subscriber);
        self.pattern_subscriptions.fetch_add(1, Ordering::Release);
    }

    fn remove_pattern(&self, pattern: &[u8], id: u64) {
        let mut patterns = self.patterns.write();
        if let Some(list) = patterns.get_mut(pattern) {
            let before = list.len();
            list.retain(|s| s.id != id);
            self.pattern_subscriptions
                .fetch_sub(before - list.len(), Ordering::Release);
            if list.is_empty() {
                patterns.remove(pattern);
            }
        }
    }
}

/// The three kinds of subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
    Shard,
}

impl Kind {
    /// The words of the confirmations (`subscribe`, `punsubscribe`, ...).
    pub fn verbs(self) -> (&'static str, &'static str) {
        match self {
            Kind::Channel => ("subscribe", "unsubscribe"),
            Kind::Pattern => ("psubscribe", "punsubscribe"),
            Kind::Shard => ("ssubscribe", "sunsubscribe"),
        }
    }
}

/// One connection's subscriptions and its outbox (while it has any
/// subscription or monitors).
#[derive(Default)]
pub struct ClientPubSub {
    channels: HashSet<Bytes>,
    /// In subscription order, as Redis keeps them (PUNSUBSCRIBE without
    /// arguments answers in this order).
    patterns: Vec<Bytes>,
    shard: HashSet<Bytes>,
    /// MONITOR is on.
    pub monitoring: bool,
    /// CLIENT TRACKING is on: invalidations come through the outbox.
    pub tracking: bool,
    /// The connection speaks RESP3: pushes may come at any time.
    pub resp3: bool,
    pub outbox: Option<Arc<Outbox>>,
    /// Bytes taken from the outbox into the reply buffer and not yet
    /// written (they still count against the output limit).
    pub taken: usize,
}

impl ClientPubSub {
    /// Channels and patterns: the count SUBSCRIBE and PSUBSCRIBE report.
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    pub fn shard_count(&self) -> usize {
        self.shard.len()
    }

    /// Redis's subscribed mode (`CLIENT_PUBSUB`): any subscription.
    pub fn subscribed(&self) -> bool {
        self.count() + self.shard_count() > 0
    }

    /// The count a confirmation of `kind` reports.
    pub fn count_for(&self, kind: Kind) -> usize {
        match kind {
            Kind::Shard => self.shard_count(),
            _ => self.count(),
        }
    }

    /// This client's outbox, made on first use.
    pub fn outbox(&mut self, info: &Arc<ClientInfo>) -> Arc<Outbox> {
        self.outbox
            .get_or_insert_with(|| {
                let outbox = Arc::new(Outbox::new(info.clone()));
                *info.outbox.lock() = Some(Arc::downgrade(&outbox));
                outbox
            })
            .clone()
    }

    /// Subscribes to `name`; false if already subscribed.
    pub fn subscribe(
        &mut self,
        pubsub: &PubSub,
        info: &Arc<ClientInfo>,
        kind: Kind,
        name: &[u8],
    ) -> bool {
        let outbox = self.outbox(info);
        let subscriber = Subscriber {
            id: info.id,
            outbox,
        };
        let name = Bytes::copy_from_slice(name);
        let added = match kind {
            Kind::Channel => self.channels.insert(name.clone()),
            Kind::Shard => self.shard.insert(name.clone()),
            Kind::Pattern => {
                let new = !self.patterns.contains(&name);
                if new {
                    self.patterns.push(name.clone());
                }
                new
            }
        };
        if added {
            match kind {
                Kind::Channel => pubsub.channels.add(name, subscriber),
                Kind::Shard => pubsub.shard_channels.add(name, subscriber),
                Kind::Pattern => pubsub.add_pattern(name, subscriber),
            }
        }
        self.mirror(info);
        added
    }

    /// Unsubscribes from `name`; false if not subscribed.
    pub fn unsubscribe(
        &mut self,
        pubsub: &PubSub,
        info: &ClientInfo,
        kind: Kind,
        name: &[u8],
    ) -> bool {
        let removed = match kind {
            Kind::Channel => self.channels.remove(name),
            Kind::Shard => self.shard.remove(name),
            Kind::Pattern => match self.patterns.iter().position(|p| p == name) {
                Some(at) => {
                    self.patterns.remove(at);
                    true
                }
                None => false,
            },
        };
        if removed {
            match kind {
                Kind::Channel => pubsub.channels.remove(name, info.id),
                Kind::Shard => pubsub.shard_channels.remove(name, info.id),
                Kind::Pattern => pubsub.remove_pattern(name, info.id),
            }
        }
        self.mirror(info);
        removed
    }

    /// Every subscription of `kind`, in the order unsubscribing from all
    /// of them answers.
    pub fn names(&self, kind: Kind) -> Vec<Bytes> {
        match kind {
            Kind::Channel => self.channels.iter().cloned().collect(),
            Kind::Shard => self.shard.iter().cloned().collect(),
            Kind::Pattern => self.patterns.clone(),
        }
    }

    /// Leaves every subscription, silently (RESET, disconnection).
    pub fn unsubscribe_all(&mut self, pubsub: &PubSub, info: &ClientInfo) {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for name in self.names(kind) {
                self.unsubscribe(pubsub, info, kind, &name);
            }
        }
    }

    /// Copies the counts into the client's shared info (CLIENT LIST) and
    /// the output class into the outbox.
    fn mirror(&self, info: &ClientInfo) {
        info.set_subscriptions(self.channels.len(), self.patterns.len(), self.shard.len());
        if let Some(outbox) = &self.outbox {
            outbox.set_class(if self.subscribed() {
                Class::Pubsub
            } else {
                Class::Normal
            });
        }
    }

    /// Drops the outbox once nothing feeds it (no subscription, no
    /// MONITOR); the caller has taken what it held.
    pub fn release_if_idle(&mut self) {
        if !self.subscribed()
            && !self.monitoring
            && !self.tracking
            && !self.resp3
            && self.outbox.is_some()
        {
            if let Some(outbox) = self.outbox.take() {
                *outbox.client.outbox.lock() = None;
            }
            self.taken = 0;
        }
    }
}
