//! One client connection: read, parse every complete command in the buffer
//! (pipelining), run them, wait for durability if any wrote, send all the
//! replies with one write.
//!
//! ## Blocking commands
//!
//! A blocking command (BLPOP...) that finds nothing to serve records what
//! it waits for in the session (`Session::blocked`) and replies nothing.
//! The connection then sends the replies so far and waits: it registers for
//! wakeups on the keys, runs the command again (so a write that came before
//! the registration is not missed), and only if that finds nothing either,
//! sleeps until a write to one of the keys (then tries again), the
//! deadline (the timeout reply), CLIENT UNBLOCK from another connection
//! (the timeout reply, or an -UNBLOCKED error), a kill or shutdown, or the
//! client hanging up. The rest of a pipeline waits behind the blocked
//! command, as in Redis.
//!
//! While it waits the client is marked blocked in the registry
//! (`ClientInfo::begin_wait`: flag `b` in CLIENT LIST, INFO's
//! `blocked_clients`). CLIENT UNBLOCK and a retry that finds an element
//! race for that mark (see `clients`): whichever takes it first decides,
//! so an unblocked client never takes an element, and a served one is not
//! reported unblocked.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::clients::{ClientInfo, Unblock};
use crate::commands::{
    client_line, execute, finish_migration, leave_pubsub_and_monitor, lookup, run as run_command,
    unwatch_all,
};
use crate::outbox::Outbox;
use crate::output_limit::Class;
use crate::resp::{ReplyWriter, RequestParser, Step};
use crate::session::{Blocked, InLine, Session};
use crate::shared::Shared;

const READ_CHUNK: usize = 16 * 1024;
/// Output buffers larger than this are given back after use, so one big
/// reply does not pin memory for the connection's life.
const KEEP_OUTPUT_CAPACITY: usize = 1 << 20;

/// What a client speaks over: a `TcpStream`, or TLS over one (`tls`).
/// The connection is generic over it rather than boxed, so the plain TCP
/// path reads and writes the socket directly, as it did before TLS came:
/// no indirect call per read, no extra copy.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Whether a connection over this stream may move to another network
    /// loop (`net_loops`): plain TCP may.
    const MOVABLE: bool = false;

    /// The socket, taken out of this loop's reactor to join another's
    /// (only where `MOVABLE`).
    fn detach(self) -> std::io::Result<std::net::TcpStream>
    where
        Self: Sized,
    {
        Err(std::io::Error::other("this stream cannot move"))
    }
}

impl Stream for tokio::net::TcpStream {
    const MOVABLE: bool = true;

    fn detach(self) -> std::io::Result<std::net::TcpStream> {
        self.into_std()
    }
}

impl Stream for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {}

/// A connection's own state, which goes with it from one network loop to
/// another.
struct Conn {
    session: Session,
    out: ReplyWriter,
    parser: RequestParser,
    buf: BytesMut,
    /// Its rank among connections (`NetLoops::home`).
    rank: usize,
}

/// How `run` ended.
enum Exit {
    /// The client left or was closed.
    Done,
    /// The connection belongs to another network loop now: this one lets
    /// it go between two reads, nothing pending.
    Move(usize),
}

/// Serves one client until it leaves, then takes it out of the registry.
/// (`TCP_NODELAY` is the accept loop's to set: only it knows the socket.)
pub async fn serve<S: Stream>(shared: Arc<Shared>, stream: S, info: Arc<ClientInfo>, rank: usize) {
    let conn = Conn {
        session: Session::new(info, shared.acl.default_user(), !shared.acl.auth_required()),
        out: ReplyWriter::new(),
        parser: RequestParser::new(shared.runtime.proto_max_bulk_len.load(Ordering::Relaxed)),
        buf: BytesMut::with_capacity(READ_CHUNK),
        rank,
    };
    serve_conn(shared, stream, conn).await;
}

async fn serve_conn<S: Stream>(shared: Arc<Shared>, mut stream: S, mut conn: Conn) {
    let Conn {
        session,
        out,
        parser,
        buf,
        rank,
    } = &mut conn;
    let result = run(&shared, &mut stream, session, out, parser, buf, *rank).await;
    let info = conn.session.info.clone();
    match result {
        Ok(Exit::Move(target)) => match stream.detach() {
            Ok(socket) => return move_to(shared, socket, conn, target),
            Err(e) => log::debug!("client id={} closed: cannot move it: {e}", info.id),
        },
        Ok(Exit::Done) => {}
        Err(e) => log::debug!("client id={} closed: {e}", info.id),
    }
    close(&shared, &mut conn.session);
}

/// Takes a client that left out of everything it was part of.
fn close(shared: &Shared, session: &mut Session) {
    // (None while a reload has the keyspace closed: the watches went with
    // the old one.)
    if let Some(keyspace) = shared.keyspace.try_guard().as_ref() {
        unwatch_all(keyspace, session);
    }
    leave_pubsub_and_monitor(shared, session);
    shared.tracking.disable(session.info.id);
    shared.clients.unregister(session.info.id);
}

/// Goes on serving `conn` over `socket` on network loop `target`. (Not an
/// async fn: the task's type names `serve_conn`'s, which calls this.)
fn move_to(shared: Arc<Shared>, socket: std::net::TcpStream, mut conn: Conn, target: usize) {
    let loops = shared
        .loops
        .get()
        .cloned()
        .expect("a connection moves only between network loops");
    loops.moves.fetch_add(1, Ordering::Relaxed);
    let task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
        match tokio::net::TcpStream::from_std(socket) {
            Ok(stream) => serve_conn(shared, stream, conn).await,
            Err(e) => {
                log::debug!(
                    "client id={} closed: cannot move it: {e}",
                    conn.session.info.id
                );
                close(&shared, &mut conn.session);
            }
        }
    });
    loops.spawn_on(target, task);
}

/// What the connection woke up for.
enum Event {
    /// Bytes read (0: the client hung up).
    Read(usize),
    /// Other clients queued output for this one (messages, MONITOR lines).
    Outbox,
}

/// Completes when `outbox` may hold output; never without one.
async fn outbox_ready(outbox: Option<&Outbox>) {
    match outbox {
        Some(outbox) => outbox.ready().await,
        None => std::future::pending().await,
    }
}

async fn run<S: Stream>(
    shared: &Shared,
    stream: &mut S,
    session: &mut Session,
    out: &mut ReplyWriter,
    parser: &mut RequestParser,
    buf: &mut BytesMut,
    rank: usize,
) -> std::io::Result<Exit> {
    let info = session.info.clone();
    // One registration for the connection's life, not one per read: a
    // `Notified` made and dropped around every read took a lock twice a
    // request (~7% of a GET's user time at -P 1). `request_kill` wakes
    // every waiter, so the waits below that watch for a kill of their own
    // still see it while this one stays registered.
    let kill = info.kill.notified();
    tokio::pin!(kill);
    loop {
        if info.killed.load(Ordering::Acquire) {
            return Ok(Exit::Done);
        }
        // Between two reads, nothing to send: a plain connection whose
        // network loop changed goes there. (A subscriber's or monitor's
        // outbox goes with it: publishers only queue and notify.) Clients
        // on one loop are served in the order their requests arrive, as
        // Redis serves them; on two, side by side.
        if S::MOVABLE {
            if let Some(target) = shared.loops.get().and_then(|loops| loops.relocation(rank)) {
                return Ok(Exit::Move(target));
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let outbox = session.pubsub.outbox.clone();
        // The idle `timeout` is the once-a-second sweep's
        // (`Registry::sweep_idle`): it closes a connection through `kill`
        // when it has seen it in this wait long enough.
        info.set_reading(true);
        let event = tokio::select! {
            read = stream.read_buf(buf) => Event::Read(read?),
            _ = &mut kill => return Ok(Exit::Done),
            _ = outbox_ready(outbox.as_deref()) => Event::Outbox,
        };
        info.set_reading(false);
        let read = match event {
            Event::Read(0) => return Ok(Exit::Done),
            Event::Read(read) => read,
            Event::Outbox => {
                // Let the publishers that are running now add theirs
                // first: one write then carries what one event-loop pass
                // of Redis's would, not one message per syscall.
                tokio::task::yield_now().await;
                deliver(shared, stream, session, out).await?;
                continue;
            }
        };
        shared.stats.net_input_bytes.add(read as i64);
        parser.set_max_bulk(shared.runtime.proto_max_bulk_len.load(Ordering::Relaxed));

        let mut offset = 0;
        let mut commands = 0usize;
        let mut failure = None;
        // The scripts' gate, kept from one script call to the next of this
        // read (a pipeline of EVALSHA takes it once, as Redis runs a
        // client's whole query buffer in one go), and let go before
        // anything else and before every wait of this client's own.
        let mut gate = None;
        loop {
            match parser.parse(&buf[offset..]) {
                Ok(Step::Command { consumed }) => {
                    let script = runs_script(parser.args(&buf[offset..]));
                    if !script {
                        gate = None;
                    }
                    let held = held_by_pause(shared, session, parser.args(&buf[offset..]));
                    if let Some((until, may_write)) = held {
                        gate = None;
                        if !wait_unpaused(shared, stream, session, out, until, may_write).await? {
                            return Ok(Exit::Done);
                        }
                    }
                    if script && gate.is_none() {
                        gate = script_gate(shared).await;
                    }
                    if must_wait_for_script(shared, parser.args(&buf[offset..])) {
                        wait_for_script(shared).await;
                    }
                    if shared.keyspace.is_reloading() {
                        shared.keyspace.wait_reloaded().await;
                    }
                    info.qbuf.store(buf.len() - offset, Ordering::Relaxed);
                    let replicated = shared.group.get().is_some();
                    if replicated {
                        let args = parser.args(&buf[offset..]);
                        if !session.proposals.is_empty()
                            && !crate::group::will_propose(session, &args)
                        {
                            // This command may read what they write, and its
                            // reply follows theirs.
                            gate = None;
                            crate::group::resolve(shared, session, out).await;
                        }
                        if crate::group::needs_fence(&args) {
                            gate = None;
                            crate::group::fence(shared, session).await;
                        }
                    }
                    let mark = out.len();
                    commands += 1;
                    execute(shared, session, out, parser.args(&buf[offset..]));
                    if replicated && !session.proposals.is_empty() && out.len() > mark {
                        // A refusal (arity, ACL) of a command after queued
                        // writes: its reply goes after theirs.
                        let reply = out.buf.split_off(mark);
                        session
                            .proposals
                            .push(crate::group::Pending::Local(reply.to_vec()));
                    }
                    offset += consumed;
                    if replicated && session.proposals.last().is_some_and(|p| p.may_block()) {
                        // Proposed at once, alone after what came before:
                        // if it finds nothing, this client waits here.
                        gate = None;
                        crate::group::resolve(shared, session, out).await;
                    }
                    // Not held across this client's own waits (a flush to a
                    // client that does not read would hold every script up).
                    if session.reload
                        || session.migration.is_some()
                        || session.blocked.is_some()
                        || session.close
                        || out.len() >= shared.config.reply_flush_bytes
                    {
                        gate = None;
                    }
                    if let Some(change) = session.member_change.take() {
                        gate = None;
                        match crate::group::change_members(shared, change).await {
                            Ok(()) => out.ok(),
                            Err(text) => crate::commands::reply_error(shared, out, &text),
                        }
                    }
                    if let Some((replicas, timeout)) = session.wait_replicas.take() {
                        gate = None;
                        let holding =
                            crate::group::wait_for_replicas(shared, session, replicas, timeout)
                                .await;
                        out.int(holding);
                    }
                    if std::mem::take(&mut session.reload) {
                        match crate::reload::reload(shared).await {
                            Ok(()) => out.ok(),
                            Err(text) => crate::commands::reply_error(shared, out, &text),
                        }
                    }
                    if let Some(pending) = session.migration.take() {
                        if !finish_migration(shared, session, out, pending).await {
                            return Ok(Exit::Done);
                        }
                    }
                    if session.blocked.is_some()
                        && !wait_unblocked(shared, stream, session, out, buf).await?
                    {
                        return Ok(Exit::Done);
                    }
                    if session.close {
                        break;
                    }
                    if over_output_limit(shared, session, out) {
                        return Ok(Exit::Done);
                    }
                    if out.len() >= shared.config.reply_flush_bytes {
                        // A client pipelining faster than it reads: send
                        // what we have before running more.
                        flush(shared, stream, session, out).await?;
                    }
                }
                Ok(Step::Skip { consumed }) => offset += consumed,
                Ok(Step::Incomplete { needed }) => {
                    let limit = shared
                        .runtime
                        .client_query_buffer_limit
                        .load(Ordering::Relaxed);
                    if needed > limit {
                        failure = Some(format!(
                            "Protocol error: the request needs {needed} bytes, more than \
                             client-query-buffer-limit ({limit})"
                        ));
                    } else if needed > buf.len() - offset {
                        // A large bulk announced: make room for it at once.
                        buf.reserve(needed - (buf.len() - offset));
                    }
                    break;
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        drop(gate);
        // The next batch takes a read barrier of its own.
        session.read_fence = None;
        buf.advance(offset);
        if let Some(text) = failure {
            shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
            log::info!("client id={} addr={}: {text}; closing", info.id, info.addr);
            crate::commands::reply_error(shared, out, &format!("ERR {text}"));
            session.close = true;
        }
        if commands > 1 {
            // A pipeline's replies wait for the other clients whose
            // requests are ready now, as Redis writes every client's
            // replies at the end of its event loop's pass: a client woken
            // by the first write then finds the others' replies too,
            // instead of being woken again for each (the wake-ups were a
            // tenth of the server's time under EVALSHA -P 16). A lone
            // command's reply goes at once: there the extra pass of the
            // scheduler cost more than it saved.
            tokio::task::yield_now().await;
        }
        flush(shared, stream, session, out).await?;
        if session.close {
            let _ = stream.shutdown().await;
            return Ok(Exit::Done);
        }
    }
}

/// Writes what other clients queued for this one, a chunk at a time,
/// until the queue is empty.
async fn deliver<S: Stream>(
    shared: &Shared,
    stream: &mut S,
    session: &mut Session,
    out: &mut ReplyWriter,
) -> std::io::Result<()> {
    while crate::delivery::take_chunk(session, out) > 0 {
        flush(shared, stream, session, out).await?;
    }
    Ok(())
}

/// `client-output-buffer-limit` for the replies this connection buffered
/// (and, for a subscriber, the messages queued for it): true when the
/// client must be closed, as Redis closes it. For a client of an
/// unlimited class (ordinary clients, by default) this is one atomic load.
fn over_output_limit(shared: &Shared, session: &mut Session, out: &ReplyWriter) -> bool {
    let class = if session.pubsub.subscribed() {
        Class::Pubsub
    } else {
        Class::Normal
    };
    if !shared.output_limits.is_limited(class) {
        return false;
    }
    let queued = session.pubsub.outbox.as_ref().map_or(0, |outbox| {
        outbox.pending().saturating_sub(session.pubsub.taken)
    });
    let pending = out.len() + queued;
    if !shared
        .output_limits
        .exceeded(class, pending, &mut session.output_soft_clock)
    {
        return false;
    }
    log::warn!(
        "Client {} closed for overcoming of output buffer limits.",
        client_line(&session.info)
    );
    true
}

/// The deadline CLIENT PAUSE holds this command to, if it does: any
/// command under PAUSE ALL; under PAUSE WRITE, the ones that may write
/// (and PFCOUNT and PUBLISH, which Redis holds too), and EXEC of a queue
/// with one of those. Commands queued inside MULTI are not held. Without
/// a pause this is one atomic load.
fn held_by_pause(
    shared: &Shared,
    session: &Session,
    args: crate::resp::Args,
) -> Option<(Instant, bool)> {
    if !shared.pause.is_active() {
        return None;
    }
    let (_, spec) = lookup(args.get(0))?;
    // A call refused before it runs (wrong arity) is answered at once, as
    // Redis rejects it before looking at the pause.
    if !spec.arity_ok(args.len()) {
        return None;
    }
    if session.in_multi() && !spec.is(crate::commands::NOT_QUEUED) {
        return None;
    }
    let writes = |spec: &crate::commands::CommandSpec, args: &crate::resp::Args| {
        spec.is(crate::commands::WRITE)
            || crate::commands::writes_by_subcommand(spec, args)
            || matches!(spec.name, "pfcount" | "publish" | "spublish")
            || (matches!(spec.name, "eval" | "evalsha" | "fcall")
                && shared.scripting.call_may_write(spec.name, args))
    };
    // EXEC: by the commands of its queue.
    let may_write = if spec.name == "exec" {
        session.multi.as_ref().is_some_and(|queue| {
            queue.iter().any(|queued| {
                let args = queued.args();
                lookup(args.get(0)).is_some_and(|(_, spec)| writes(spec, &args))
            })
        })
    } else {
        writes(spec, &args)
    };
    shared
        .pause
        .holds(may_write)
        .map(|until| (until, may_write))
}

/// Whether this command must wait for the script running (it needs the
/// keyspace the script holds, or it could see the script half done):
/// anything but the few commands Redis runs while a script is busy. One
/// atomic load when no script runs.
fn must_wait_for_script(shared: &Shared, args: crate::resp::Args) -> bool {
    if !shared.scripting.running.is_active() {
        return false;
    }
    lookup(args.get(0)).is_some_and(|(_, spec)| !crate::commands::allowed_while_busy(spec, &args))
}

/// Whether the call runs a script (and takes the scripts' gate first).
fn runs_script(args: crate::resp::Args) -> bool {
    let name = args.get(0);
    [
        "eval",
        "evalsha",
        "eval_ro",
        "evalsha_ro",
        "fcall",
        "fcall_ro",
    ]
    .iter()
    .any(|s| name.eq_ignore_ascii_case(s.as_bytes()))
}

/// The scripts' gate (`Scripting::gate`), or None once the script holding
/// it has run past `busy-reply-threshold`: this call then goes on to get
/// BUSY, as in Redis, instead of waiting for it.
async fn script_gate(shared: &Shared) -> Option<tokio::sync::MutexGuard<'_, ()>> {
    let scripting = &shared.scripting;
    // Free: no timer to set and clear. (No spinning for it: the gate is
    // handed to the first queued waiter, so a spinner cannot win it from
    // a queue.)
    if let Ok(guard) = scripting.gate.try_lock() {
        return Some(guard);
    }
    let gate = scripting.gate.lock();
    tokio::pin!(gate);
    loop {
        tokio::select! {
            guard = &mut gate => return Some(guard),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {
                let threshold_ms = scripting.busy_threshold_ms();
                let over = scripting
                    .running
                    .elapsed_ms()
                    .is_some_and(|ms| threshold_ms > 0 && ms >= threshold_ms);
                if over {
                    return None;
                }
            }
        }
    }
}

/// Waits, without holding a worker thread, until the script running ends
/// or runs past `busy-reply-threshold` (then the command gets BUSY).
async fn wait_for_script(shared: &Shared) {
    let scripting = &shared.scripting;
    loop {
        // Registered before the check, so an end in between is not missed.
        let ended = scripting.running.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        let Some(elapsed_ms) = scripting.running.elapsed_ms() else {
            return;
        };
        let threshold_ms = scripting.busy_threshold_ms();
        if threshold_ms > 0 && elapsed_ms >= threshold_ms {
            return;
        }
        // Until it ends, or (to answer BUSY) reaches the threshold; the
        // threshold may change meanwhile, so look again now and then.
        let wait_ms = if threshold_ms > 0 {
            (threshold_ms - elapsed_ms).min(100)
        } else {
            100
        };
        tokio::select! {
            _ = &mut ended => {}
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
        }
    }
}

/// Waits out CLIENT PAUSE (until `until`, CLIENT UNPAUSE, or a new
/// pause's deadline); false when the connection must close instead.
async fn wait_unpaused<S: Stream>(
    shared: &Shared,
    stream: &mut S,
    session: &mut Session,
    out: &mut ReplyWriter,
    mut until: Instant,
    may_write: bool,
) -> std::io::Result<bool> {
    flush(shared, stream, session, out).await?;
    let info = session.info.clone();
    shared.pause.held.fetch_add(1, Ordering::Relaxed);
    let result = loop {
        let changed = shared.pause.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => {}
            _ = &mut changed => {}
            _ = info.kill.notified() => break false,
        }
        if info.killed.load(Ordering::Acquire) || shared.is_shutting_down() {
            break false;
        }
        // The command may still be held: by a longer or stricter pause.
        match shared.pause.holds(may_write) {
            Some(later) if later > Instant::now() => until = later,
            _ => break true,
        }
    };
    shared.pause.held.fetch_sub(1, Ordering::Relaxed);
    Ok(result)
}

/// Waits until the blocked command of `session` is served, times out or
/// fails; false when the connection must close instead (killed, shutdown,
/// the client hung up). Reads what the client sends meanwhile into `buf`
/// (up to the query buffer limit), to be run after.
async fn wait_unblocked<S: Stream>(
    shared: &Shared,
    stream: &mut S,
    session: &mut Session,
    out: &mut ReplyWriter,
    buf: &mut BytesMut,
) -> std::io::Result<bool> {
    let Some(mut blocked) = session.blocked.take() else {
        return Ok(true);
    };
    let info = session.info.clone();
    // Blocked from here (the command found nothing and replied nothing):
    // even while earlier replies are sent, CLIENT UNBLOCK may end the wait.
    let wait = info.begin_wait();
    flush(shared, stream, session, out).await?;
    // Clients blocked on a key are served in the order they joined its line
    // (after the flush: a client that does not read its replies must not
    // hold up the others); left on every way out (drop).
    let _line = InLine::join(shared, info.id, blocked.db, &blocked.keys);
    let deadline = blocked.deadline;
    let sleep = tokio::time::sleep_until(match deadline {
        Some(at) => at.into(),
        None => tokio::time::Instant::now() + Duration::from_secs(1 << 30),
    });
    tokio::pin!(sleep);
    loop {
        // This try's keyspace, held until the next wake (a reload wakes
        // every blocked client so that they let go of it, then waits here).
        if shared.keyspace.is_reloading() {
            shared.keyspace.wait_reloaded().await;
        }
        let keyspace = shared.keyspace.get();
        let mut waiters = Vec::with_capacity(blocked.keys.len());
        for key in &blocked.keys {
            match keyspace.wait_written(blocked.db, key) {
                Ok(waiter) => waiters.push(waiter),
                Err(e) => {
                    out.error(&crate::commands::CmdError::from(e).0);
                    return Ok(true);
                }
            }
        }
        let mut notified: Vec<_> = waiters.iter().map(|w| Box::pin(w.notified())).collect();
        let kill = info.kill.notified();
        let shutdown = shared.shutdown.notified();
        let unblocked = info.unblock.notified();
        // A group's leader that stops leading: its waits through the log
        // end (created before the check below, so none is missed).
        let replica = shared.group.get().filter(|_| blocked.proposed);
        let demoted = replica.map(|r| r.stepped_down());
        let demoted = async move {
            match demoted {
                Some(demoted) => demoted.await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(kill, shutdown, unblocked, demoted);
        if replica.is_some_and(|r| !r.is_leader()) {
            crate::commands::reply_error(
                shared,
                out,
                &crate::group::stepped_down(shared, &blocked),
            );
            count_ended_wait(shared, session, &blocked, true);
            return Ok(true);
        }
        if info.killed.load(Ordering::Acquire) || shared.is_shutting_down() {
            return Ok(false);
        }
        // CLIENT UNBLOCK came while we slept, or during the last retry
        // (which then took nothing).
        if let Some(how) = wait.unblock_requested() {
            reply_unblocked(out, how, blocked.on_timeout);
            count_ended_wait(shared, session, &blocked, how == Unblock::Error);
            return Ok(true);
        }

        // Registered: now a write after this try wakes us. If the retry
        // finds an element it takes it only if CLIENT UNBLOCK has not come
        // first (`ClientInfo::claim_service`, in the list commands).
        let mark = out.len();
        let tried = if !blocked.proposed {
            let args = blocked.command.args();
            let (index, _) = lookup(args.get(0)).expect("a blocked command was looked up");
            session.retrying = true;
            run_command(shared, &keyspace, session, out, None, index, args);
            session.retrying = false;
            true
        } else if shared
            .wait_lines
            .first_in_any(info.id, blocked.db, &blocked.keys)
        {
            // A group's leader: the try goes through the log, by the
            // first in line only.
            crate::group::retry_blocked(shared, session, out, &blocked).await;
            true
        } else {
            false
        };
        match session.blocked.take() {
            _ if !tried => {}
            None if blocked.proposed => {
                // Applied: what it took is the client's, whatever CLIENT
                // UNBLOCK asked meanwhile.
                let _ = wait.finish();
                return Ok(true);
            }
            None => {
                // Served (the claim already ended the wait), or failed
                // (WRONGTYPE...) without taking anything. In the latter
                // case an unblock that came first wins, as it would have
                // in Redis: its reply replaces the error.
                if let Some(how) = wait.finish() {
                    out.buf.truncate(mark);
                    reply_unblocked(out, how, blocked.on_timeout);
                }
                return Ok(true);
            }
            Some(again) => {
                blocked = again;
                blocked.deadline = deadline;
            }
        }

        let mut written = std::future::poll_fn(|cx| {
            for future in notified.iter_mut() {
                if future.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        });
        loop {
            let limit = shared
                .runtime
                .client_query_buffer_limit
                .load(Ordering::Relaxed);
            let can_read = buf.len() < limit;
            if can_read && buf.capacity() - buf.len() < READ_CHUNK / 4 {
                buf.reserve(READ_CHUNK);
            }
            tokio::select! {
                _ = &mut written => break,
                // Checked at the top of the outer loop.
                _ = &mut unblocked => break,
                _ = &mut sleep, if deadline.is_some() => {
                    // An unblock that came as the deadline passed still
                    // decides the reply (CLIENT UNBLOCK ... ERROR said 1).
                    let failed = match wait.finish() {
                        Some(how) => {
                            reply_unblocked(out, how, blocked.on_timeout);
                            how == Unblock::Error
                        }
                        None => {
                            (blocked.on_timeout)(out);
                            false
                        }
                    };
                    count_ended_wait(shared, session, &blocked, failed);
                    return Ok(true);
                }
                _ = &mut kill => return Ok(false),
                _ = &mut shutdown => return Ok(false),
                _ = &mut demoted => break,
                read = stream.read_buf(buf), if can_read => {
                    let read = read?;
                    if read == 0 {
                        return Ok(false);
                    }
                    shared
                        .stats
                        .net_input_bytes
                        .add(read as i64);
                }
            }
        }
    }
}

/// Counts a blocked command whose wait ended without a retry (timed out,
/// or CLIENT UNBLOCK): its first try, which blocked, was not counted.
fn count_ended_wait(shared: &Shared, session: &Session, blocked: &Blocked, failed: bool) {
    let args = blocked.command.args();
    if let Some((index, _)) = lookup(args.get(0)) {
        crate::commands::record_call(shared, session, index, &args, Instant::now(), failed);
    }
}

/// The reply of a wait ended by CLIENT UNBLOCK (Redis's
/// `unblockClientOnTimeout` / `unblockClientOnError`).
fn reply_unblocked(out: &mut ReplyWriter, how: Unblock, on_timeout: fn(&mut ReplyWriter)) {
    match how {
        Unblock::Timeout => on_timeout(out),
        Unblock::Error => out.error("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
    }
}

/// Waits until this batch's writes are durable (if the mode asks for it),
/// then sends the replies.
async fn flush<S: Stream>(
    shared: &Shared,
    stream: &mut S,
    session: &mut Session,
    out: &mut ReplyWriter,
) -> std::io::Result<()> {
    if shared.tracking.active() {
        // What ran outside `commands::execute` (a blocked command's retry,
        // MIGRATE's delete), taken before this task awaits anything.
        crate::tracking::invalidate_modified(shared, Some(session.info.id));
    }
    if !session.proposals.is_empty() {
        crate::group::resolve(shared, session, out).await;
    }
    if session.wrote {
        session.wrote = false;
        let commit = shared
            .keyspace
            .try_guard()
            .as_ref()
            .map(|k| k.commit_handle());
        match commit {
            Some(commit) => {
                // The first of this pass's writers to get here syncs for
                // all of them (`GroupCommit::wait`).
                if let Some(ticket) = commit.wrote_leading() {
                    commit.wait(ticket).await;
                }
            }
            // A reload is closing the keyspace these writes went to, and
            // closing syncs them.
            None => shared.keyspace.wait_reloaded().await,
        }
    }
    let recording = || {
        let keyspace = shared.keyspace.try_guard();
        keyspace.as_ref().is_some_and(|k| k.expired.is_recording())
    };
    if !session.notifications.is_empty() || recording() {
        crate::notify::publish_pending(shared, session);
    }
    if out.is_empty() {
        return Ok(());
    }
    if session.pubsub.outbox.is_none() {
        stream.write_all(&out.buf).await?;
        // TLS may keep the last record of a write in its buffer when the
        // socket is full; without the flush the client would wait for it
        // forever. On a TcpStream it returns at once.
        stream.flush().await?;
    } else {
        // A subscriber that does not read must not keep its connection
        // stuck here once its output limit closed it (or CLIENT KILL).
        let kill = session.info.kill.notified();
        tokio::select! {
            written = async {
                stream.write_all(&out.buf).await?;
                stream.flush().await
            } => written?,
            _ = kill => return Err(std::io::Error::other("closed while writing")),
        }
        crate::delivery::written(session);
    }
    shared.stats.net_output_bytes.add(out.len() as i64);
    out.buf.clear();
    if out.buf.capacity() > KEEP_OUTPUT_CAPACITY {
        out.buf.shrink_to(READ_CHUNK);
    }
    Ok(())
}
