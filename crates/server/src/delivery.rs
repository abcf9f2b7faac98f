//! The connection's side of its outbox (`outbox`): moving the messages and
//! MONITOR lines other clients queued into the connection's replies, in
//! the right place, and accounting for them until they are written.
//!
//! A subscriber's output is one stream, as in Redis: messages that arrived
//! before a command go before its reply (taken before it runs); those the
//! command caused (a RESP3 client publishing to a channel it listens to)
//! also go before its reply, as Redis adds them to the buffer while the
//! command runs; between commands the connection writes them as they
//! come.

use crate::resp::ReplyWriter;
use crate::session::Session;

/// At most this much is copied out of the outbox per write while idle, so
/// a backlog stays in the queue (shared frames) rather than in one copy.
pub const CHUNK: usize = 256 * 1024;

/// Appends everything queued for `session` to `out`.
pub fn take_all(session: &mut Session, out: &mut ReplyWriter) {
    let Some(outbox) = &session.pubsub.outbox else {
        return;
    };
    let resp3 = out.is_resp3();
    session.pubsub.taken += outbox.take(&mut out.buf, resp3, usize::MAX);
}

/// Inserts everything queued for `session` into `out` at `at` (before the
/// reply that starts there).
pub fn take_all_before(session: &mut Session, out: &mut ReplyWriter, at: usize) {
    let Some(outbox) = &session.pubsub.outbox else {
        return;
    };
    let mut pending = Vec::new();
    let taken = outbox.take(&mut pending, out.is_resp3(), usize::MAX);
    if taken == 0 {
        return;
    }
    session.pubsub.taken += taken;
    out.buf.splice(at..at, pending);
}

/// Takes up to about `CHUNK` bytes of queued output into `out`; how many.
pub fn take_chunk(session: &mut Session, out: &mut ReplyWriter) -> usize {
    let Some(outbox) = &session.pubsub.outbox else {
        return 0;
    };
    let resp3 = out.is_resp3();
    let taken = outbox.take(&mut out.buf, resp3, CHUNK);
    session.pubsub.taken += taken;
    taken
}

/// The reply buffer reached the socket: what was taken from the outbox no
/// longer counts against the client's output limit.
pub fn written(session: &mut Session) {
    if session.pubsub.taken == 0 {
        return;
    }
    if let Some(outbox) = &session.pubsub.outbox {
        outbox.written(session.pubsub.taken);
    }
    session.pubsub.taken = 0;
}
