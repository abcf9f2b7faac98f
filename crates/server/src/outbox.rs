//! A client's queue of output that other connections produce for it: pub/sub
//! messages (PUBLISH runs on the publisher's task) and MONITOR lines.
//!
//! Why a queue and not a write: the producer must never wait for the
//! subscriber's socket. A PUBLISH appends a frame (a shared `Bytes`, so 50
//! subscribers cost 50 reference counts and no copies) under the
//! subscriber's own short lock, and wakes the subscriber's connection task
//! if the queue was empty; that task copies the frames into its reply
//! buffer and writes them. Frames are queued in the order they are pushed,
//! so one publisher's messages reach each subscriber in publish order.
//!
//! The queue is bounded by `client-output-buffer-limit` (`output_limit`):
//! `pending` counts the bytes queued plus those the connection took and has
//! not written yet, so a client that never reads (its connection stuck in a
//! write) still reaches the limit. Then the producer closes the queue
//! (dropping what it holds), logs as Redis does and asks the connection to
//! close; the producer itself sees no error.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::clients::ClientInfo;
use crate::output_limit::{Class, OutputLimits, SoftClock};

/// One unit of output: an aggregate header chosen by the receiver's
/// protocol (`*n` in RESP2, the push `>n` in RESP3), or none, then bytes.
#[derive(Clone)]
pub struct Frame {
    /// Elements of the aggregate that `body` holds, 0 for a frame sent as
    /// it is (a MONITOR line).
    pub elements: u8,
    pub body: Bytes,
}

impl Frame {
    /// The bytes this frame takes in a client's output.
    fn size(&self) -> usize {
        self.body.len() + if self.elements > 0 { 4 } else { 0 }
    }

    fn write_to(&self, out: &mut Vec<u8>, resp3: bool) {
        if self.elements > 0 {
            out.push(if resp3 { b'>' } else { b'*' });
            out.push(b'0' + self.elements);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(&self.body);
    }
}

struct Queue {
    frames: VecDeque<Frame>,
    soft: SoftClock,
    /// Over its limit: takes nothing more; the connection is closing.
    closed: bool,
}

pub struct Outbox {
    pub client: Arc<ClientInfo>,
    queue: Mutex<Queue>,
    /// Bytes queued plus bytes taken and not yet written.
    pending: AtomicUsize,
    /// The output-buffer class the client is in now (`Class as u8`).
    class: AtomicU8,
    ready: Notify,
}

impl Outbox {
    pub fn new(client: Arc<ClientInfo>) -> Outbox {
        Outbox {
            client,
            queue: Mutex::new(Queue {
                frames: VecDeque::new(),
                soft: SoftClock::default(),
                closed: false,
            }),
            pending: AtomicUsize::new(0),
            class: AtomicU8::new(Class::Normal as u8),
            ready: Notify::new(),
        }
    }

    pub fn set_class(&self, class: Class) {
        self.class.store(class as u8, Ordering::Relaxed);
    }

    pub fn class(&self) -> Class {
        match self.class.load(Ordering::Relaxed) {
            2 => Class::Pubsub,
            _ => Class::Normal,
        }
    }

    /// Queues `frame` unless the client is past its output limit (then it
    /// is disconnected and the frame dropped). Never blocks on the client.
    pub fn push(&self, frame: Frame, limits: &OutputLimits) {
        let size = frame.size();
        let mut queue = self.queue.lock();
        if queue.closed {
            return;
        }
        let was_empty = queue.frames.is_empty();
        queue.frames.push_back(frame);
        let pending = self.pending.fetch_add(size, Ordering::Relaxed) + size;
        if limits.exceeded(self.class(), pending, &mut queue.soft) {
            queue.closed = true;
            queue.frames = VecDeque::new();
            drop(queue);
            self.over_limit();
            return;
        }
        drop(queue);
        if was_empty {
            self.ready.notify_one();
        }
    }

    /// Disconnects the client for its output, as Redis logs it.
    #[cold]
    fn over_limit(&self) {
        log::warn!(
            "Client {} scheduled to be closed ASAP for overcoming of output buffer limits.",
            crate::commands::client_line(&self.client)
        );
        self.client.request_kill();
    }

    /// Moves queued frames into `out` (encoded for `resp3`) until it holds
    /// at least `max` bytes or the queue is empty; returns the bytes taken,
    /// which stay pending until `written`.
    pub fn take(&self, out: &mut Vec<u8>, resp3: bool, max: usize) -> usize {
        let mut queue = self.queue.lock();
        let mut taken = 0;
        while out.len() < max {
            let Some(frame) = queue.frames.pop_front() else {
                break;
            };
            frame.write_to(out, resp3);
            taken += frame.size();
        }
        taken
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.queue.lock().frames.is_empty()
    }

    /// `bytes` taken earlier reached the socket.
    pub fn written(&self, bytes: usize) {
        self.pending.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes waiting for this client (queued or taken, not yet written).
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Completes when frames may be waiting (a permit is kept if none
    /// waits, so a push between two waits is never missed).
    pub async fn ready(&self) {
        self.ready.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox() -> Outbox {
        let addr: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
        let info = crate::clients::Registry::default()
            .register(addr, addr, 1)
            .unwrap();
        Outbox::new(info)
    }

    fn frame(text: &str) -> Frame {
        Frame {
            elements: 1,
            body: Bytes::from(format!("${}\r\n{text}\r\n", text.len())),
        }
    }

    #[test]
    fn frames_come_out_in_order_in_the_receivers_protocol() {
        let limits = OutputLimits::default();
        let outbox = outbox();
        outbox.set_class(Class::Pubsub);
        outbox.push(frame("a"), &limits);
        outbox.push(frame("b"), &limits);
        let mut out = Vec::new();
        let taken = outbox.take(&mut out, false, usize::MAX);
        assert_eq!(out, b"*1\r\n$1\r\na\r\n*1\r\n$1\r\nb\r\n");
        assert_eq!(taken, out.len());
        assert_eq!(outbox.pending(), taken, "pending until written");
        outbox.written(taken);
        assert_eq!(outbox.pending(), 0);
        outbox.push(frame("c"), &limits);
        let mut out = Vec::new();
        outbox.take(&mut out, true, usize::MAX);
        assert_eq!(out, b">1\r\n$1\r\nc\r\n");
    }

    #[test]
    fn a_client_past_its_limit_is_killed_and_its_queue_dropped() {
        let limits = OutputLimits::default();
        limits.set("pubsub 64 0 0").unwrap();
        let outbox = outbox();
        outbox.set_class(Class::Pubsub);
        for _ in 0..5 {
            outbox.push(frame("0123456789"), &limits);
        }
        assert!(outbox.client.killed.load(Ordering::Acquire));
        assert!(outbox.is_empty());
        // A normal client is unlimited by default.
        let normal = super::tests::outbox();
        for _ in 0..100 {
            normal.push(frame("0123456789"), &limits);
        }
        assert!(!normal.client.killed.load(Ordering::Acquire));
    }
}
