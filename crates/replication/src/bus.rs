//! The peer bus: Raft messages between the nodes of a group over TCP.
//!
//! Each node listens on its bus port and opens one connection to every
//! peer, used only to send; so a pair of nodes has two connections, one per
//! direction. A connection starts with a hello frame (the sender's id, its
//! flags: whether it starts from an empty log and whether it still waits
//! for a snapshot to learn the membership; and the address its clients
//! use, so every node learns the others' client addresses from the group
//! itself), then carries frames of raft-rs messages: `[len u32][protobuf
//! bytes]`. Peers are added and removed as the membership changes; the
//! Raft loop hears of every hello and of every connection that ends.
//!
//! Sending never blocks the Raft loop. The loop writes a batch of messages
//! to a peer's socket itself, without blocking (one syscall per peer and
//! batch, and no thread to wake: a hand-off to a sender thread cost a
//! context switch per batch on each side, a tenth of a member's CPU).
//! What the socket does not take at once, and everything while the peer is
//! not connected, goes to the peer's backlog, which the peer's link thread
//! writes (blocking) and which the loop only appends to until it is empty
//! again, so bytes stay in order. The link thread also connects and
//! reconnects, with a short backoff after an error. When the backlog is
//! full, or the peer cannot be reached, messages are dropped: Raft
//! retransmits what matters, and a peer that stays silent is reported
//! unreachable to raft-rs so it probes it gently. Snapshots always go
//! through the backlog, encoded by the link thread (a large one would
//! hold up the loop).

use std::collections::{HashMap, VecDeque};
use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex, RwLock};
use protobuf::Message as _;
use raft::prelude::{Message, MessageType};

use crate::error::{Error, Result};

/// Bytes a peer's backlog holds before new messages are dropped (one
/// message is taken whatever its size when the backlog is empty).
const BACKLOG_BYTES: usize = 64 << 20;
/// Most bytes one frame may announce (a snapshot is one message). A
/// frame's buffer grows as its bytes arrive, so a peer that announces a
/// large frame and sends little costs little.
const MAX_FRAME: usize = 2 << 30;
const RECONNECT_BACKOFF: Duration = Duration::from_millis(20);
/// How often an idle sender without a connection tries to make one.
const IDLE_CONNECT: Duration = Duration::from_millis(500);

/// Node id → the address its clients use, as each peer said in its hello.
pub type Directory = Arc<RwLock<HashMap<u64, String>>>;

pub struct Bus {
    links: HashMap<u64, Arc<Link>>,
    directory: Directory,
    /// The peers whose hello is accepted (the group's other members).
    members: Arc<RwLock<Vec<u64>>>,
    /// What this node says in its hellos.
    hello: Arc<Hello>,
    /// Peers whose last send failed (reported to raft-rs, then cleared).
    unreachable: Arc<RwLock<Vec<u64>>>,
    stopped: Arc<AtomicBool>,
    pub local_addr: SocketAddr,
}

impl Bus {
    /// Binds `listen`, starts the accept loop and one sender per peer.
    /// `inbound` takes the messages received and what the Raft loop hears
    /// of peers' connections (one channel with the loop's other inputs, so
    /// that it waits on one); `flags`: what this node says of itself in
    /// each hello.
    pub fn start<E: Inbound>(
        id: u64,
        listen: SocketAddr,
        peers: &HashMap<u64, SocketAddr>,
        client_addr: &str,
        inbound: Sender<E>,
        flags: HelloFlags,
    ) -> Result<Bus> {
        let listener = TcpListener::bind(listen)
            .map_err(|e| Error::Peers(format!("cannot listen on bus address {listen}: {e}")))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| Error::Peers(e.to_string()))?;
        let directory: Directory = Arc::new(RwLock::new(HashMap::new()));
        directory.write().insert(id, client_addr.to_string());
        let stopped = Arc::new(AtomicBool::new(false));
        let members = Arc::new(RwLock::new(Vec::new()));
        {
            let peers = Peers {
                members: members.clone(),
                directory: directory.clone(),
                inbound,
            };
            let stopped = stopped.clone();
            std::thread::Builder::new()
                .name("engram-bus-accept".into())
                .spawn(move || accept_loop(listener, peers, stopped))
                .map_err(|e| Error::Internal(e.to_string()))?;
        }
        let mut bus = Bus {
            links: HashMap::new(),
            directory,
            members,
            hello: Arc::new(Hello {
                id,
                flags,
                client_addr: client_addr.to_string(),
            }),
            unreachable: Arc::new(RwLock::new(Vec::new())),
            stopped,
            local_addr,
        };
        for (&peer, &addr) in peers {
            bus.add_peer(peer, addr)?;
        }
        Ok(bus)
    }

    /// Starts talking to `peer` at `addr` (a member, or one joining), and
    /// accepts its hellos.
    pub fn add_peer(&mut self, peer: u64, addr: SocketAddr) -> Result<()> {
        if peer == self.hello.id || self.links.contains_key(&peer) {
            return Ok(());
        }
        self.members.write().push(peer);
        let link = Arc::new(Link {
            peer,
            addr,
            hello: self.hello.clone(),
            unreachable: self.unreachable.clone(),
            stopped: self.stopped.clone(),
            state: Mutex::new(LinkState::default()),
            work: Condvar::new(),
        });
        let thread_link = link.clone();
        std::thread::Builder::new()
            .name(format!("engram-bus-{peer}"))
            .spawn(move || thread_link.run())
            .map_err(|e| Error::Internal(e.to_string()))?;
        self.links.insert(peer, link);
        Ok(())
    }

    /// Stops talking to `peer` (removed from the group): its link thread
    /// ends, and its hellos are refused from now on.
    pub fn remove_peer(&mut self, peer: u64) {
        if let Some(link) = self.links.remove(&peer) {
            link.close();
        }
        self.members.write().retain(|&m| m != peer);
        self.directory.write().remove(&peer);
    }

    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Sends messages to their peers, each peer's in one write where its
    /// socket takes them; never blocks.
    pub fn send(&self, messages: Vec<Message>) {
        if messages.is_empty() {
            return;
        }
        // Per peer, in order: frames encoded here, snapshots as they are.
        let mut batches: Vec<(u64, Vec<Pending>)> = Vec::new();
        for message in messages {
            let at = match batches.iter().position(|(to, _)| *to == message.to) {
                Some(at) => at,
                None => {
                    batches.push((message.to, Vec::new()));
                    batches.len() - 1
                }
            };
            let batch = &mut batches[at].1;
            if message.get_msg_type() == MessageType::MsgSnapshot {
                batch.push(Pending::Message(Box::new(message)));
                continue;
            }
            if !matches!(batch.last(), Some(Pending::Bytes(_))) {
                batch.push(Pending::Bytes(Vec::new()));
            }
            if let Some(Pending::Bytes(buf)) = batch.last_mut() {
                encode(&message, buf);
            }
        }
        for (to, batch) in batches {
            match self.links.get(&to) {
                Some(link) => link.send(batch),
                None => log::warn!("raft message to unknown node {to}"),
            }
        }
    }

    /// Peers a send failed to since the last call.
    pub fn take_unreachable(&self) -> Vec<u64> {
        let mut list = self.unreachable.write();
        let mut taken = std::mem::take(&mut *list);
        taken.sort_unstable();
        taken.dedup();
        taken
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Release);
        for link in self.links.values() {
            link.close();
        }
    }
}

/// What a node says of itself in its hellos (read at each connect).
#[derive(Clone, Default)]
pub struct HelloFlags {
    /// Its log was just created and it has not caught up with a leader
    /// (a new node, or one that lost its disk).
    pub fresh: Arc<AtomicBool>,
    /// It has no membership yet (it joins a running group): only a
    /// snapshot can bring it in.
    pub awaiting_snapshot: Arc<AtomicBool>,
}

const FRESH: u8 = 1;
const AWAITING_SNAPSHOT: u8 = 2;

/// What a connection's first frame says: `[id u64][flags u8][client
/// address]`.
struct Hello {
    id: u64,
    flags: HelloFlags,
    client_addr: String,
}

impl Hello {
    fn frame(&self) -> Vec<u8> {
        let mut body = self.id.to_le_bytes().to_vec();
        let flag = |set: &AtomicBool, bit: u8| if set.load(Ordering::Acquire) { bit } else { 0 };
        body.push(
            flag(&self.flags.fresh, FRESH) | flag(&self.flags.awaiting_snapshot, AWAITING_SNAPSHOT),
        );
        body.extend_from_slice(self.client_addr.as_bytes());
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        frame
    }
}

/// What the bus tells the Raft loop about a peer.
#[derive(Debug, PartialEq, Eq)]
pub enum PeerEvent {
    /// It connected, and said this of itself.
    Hello {
        peer: u64,
        fresh: bool,
        awaiting_snapshot: bool,
    },
    /// Its connection to this node ended (the peer's process is gone, as
    /// a rule: its sender never closes a working connection).
    Closed(u64),
}

/// Where the bus delivers what it receives: messages and peer events.
pub trait Inbound: From<Message> + From<PeerEvent> + Send + 'static {}

impl<E: From<Message> + From<PeerEvent> + Send + 'static> Inbound for E {}

/// What the receiving side needs: who may connect, where client
/// addresses, messages and peer events go.
struct Peers<E> {
    members: Arc<RwLock<Vec<u64>>>,
    directory: Directory,
    inbound: Sender<E>,
}

impl<E> Clone for Peers<E> {
    fn clone(&self) -> Self {
        Peers {
            members: self.members.clone(),
            directory: self.directory.clone(),
            inbound: self.inbound.clone(),
        }
    }
}

fn accept_loop<E: Inbound>(listener: TcpListener, peers: Peers<E>, stopped: Arc<AtomicBool>) {
    for stream in listener.incoming() {
        if stopped.load(Ordering::Acquire) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let peers = peers.clone();
        let stopped = stopped.clone();
        let spawned = std::thread::Builder::new()
            .name("engram-bus-recv".into())
            .spawn(move || {
                if let Err(e) = receive(stream, &peers, &stopped) {
                    log::debug!("bus connection closed: {e}");
                }
            });
        if let Err(e) = spawned {
            log::warn!("bus: cannot start a receiver: {e}");
        }
    }
}

fn read_frame(reader: &mut impl Read, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "a frame of {len} bytes (at most {MAX_FRAME})"
        )));
    }
    buf.clear();
    let read = reader.take(len as u64).read_to_end(buf)?;
    if read < len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

fn receive<E: Inbound>(
    stream: TcpStream,
    peers: &Peers<E>,
    stopped: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::with_capacity(256 << 10, stream);
    let mut buf = Vec::new();
    read_frame(&mut reader, &mut buf)?;
    if buf.len() < 9 {
        return Err(std::io::Error::other("short hello"));
    }
    let peer = u64::from_le_bytes(buf[..8].try_into().unwrap());
    if !peers.members.read().contains(&peer) {
        return Err(std::io::Error::other(format!(
            "a hello from node {peer}, not a peer of this group"
        )));
    }
    let client_addr = String::from_utf8_lossy(&buf[9..]).into_owned();
    peers.directory.write().insert(peer, client_addr);
    let _ = peers.inbound.send(E::from(PeerEvent::Hello {
        peer,
        fresh: buf[8] & FRESH != 0,
        awaiting_snapshot: buf[8] & AWAITING_SNAPSHOT != 0,
    }));
    let ended = carry(peer, &mut reader, &mut buf, peers, stopped);
    if ended.is_err() {
        let _ = peers.inbound.send(E::from(PeerEvent::Closed(peer)));
    }
    ended
}

/// Passes a peer's messages on until its connection ends.
fn carry<E: Inbound>(
    peer: u64,
    reader: &mut impl Read,
    buf: &mut Vec<u8>,
    peers: &Peers<E>,
    stopped: &AtomicBool,
) -> std::io::Result<()> {
    loop {
        read_frame(reader, buf)?;
        if stopped.load(Ordering::Acquire) {
            return Ok(());
        }
        let message = Message::parse_from_bytes(buf)
            .map_err(|e| std::io::Error::other(format!("bad message from node {peer}: {e}")))?;
        if peers.inbound.send(E::from(message)).is_err() {
            return Ok(());
        }
    }
}

/// One peer's outgoing connection: written by the Raft loop while it
/// takes the bytes at once, else by the link's thread from the backlog.
struct Link {
    peer: u64,
    addr: SocketAddr,
    hello: Arc<Hello>,
    unreachable: Arc<RwLock<Vec<u64>>>,
    stopped: Arc<AtomicBool>,
    state: Mutex<LinkState>,
    /// The link thread waits here for a backlog, a lost connection or
    /// the end.
    work: Condvar,
}

#[derive(Default)]
struct LinkState {
    /// Connected, hello sent; non-blocking except while the link thread
    /// drains the backlog.
    stream: Option<Arc<TcpStream>>,
    /// What the Raft loop could not write, in order, for the link thread.
    backlog: VecDeque<Pending>,
    backlog_bytes: usize,
    /// The link thread is writing what it took from the backlog: the
    /// loop appends to the backlog until it is done.
    draining: bool,
    closed: bool,
}

/// Bytes ready for the socket, or a snapshot the link thread encodes.
enum Pending {
    Bytes(Vec<u8>),
    Message(Box<Message>),
}

impl Pending {
    fn len(&self) -> usize {
        match self {
            Pending::Bytes(bytes) => bytes.len(),
            Pending::Message(message) => message.get_snapshot().data.len(),
        }
    }
}

impl Link {
    /// The Raft loop's send: straight to the socket when nothing waits
    /// before it, else to the backlog (or dropped when that is full).
    fn send(&self, batch: Vec<Pending>) {
        let mut state = self.state.lock();
        if state.closed {
            return;
        }
        let mut batch = batch.into_iter();
        let direct = !state.draining
            && state.backlog.is_empty()
            && state.stream.is_some()
            && matches!(batch.as_slice().first(), Some(Pending::Bytes(_)));
        if direct {
            let Some(Pending::Bytes(mut bytes)) = batch.next() else {
                unreachable!("checked: the batch starts with bytes")
            };
            let stream = state.stream.as_deref().expect("checked: connected");
            let Some(written) = write_available(stream, &bytes) else {
                // As the link thread does on a failed write: these
                // messages are lost, the next ones reconnect.
                state.stream = None;
                self.work.notify_one();
                drop(state);
                self.unreachable.write().push(self.peer);
                return;
            };
            if written < bytes.len() {
                bytes.drain(..written);
                state.backlog_bytes += bytes.len();
                state.backlog.push_back(Pending::Bytes(bytes));
            }
        }
        let mut dropped = false;
        for pending in batch {
            let len = pending.len();
            if !state.backlog.is_empty() && state.backlog_bytes + len > BACKLOG_BYTES {
                dropped = true;
                continue;
            }
            state.backlog_bytes += len;
            state.backlog.push_back(pending);
        }
        if !state.backlog.is_empty() {
            self.work.notify_one();
        }
        drop(state);
        if dropped {
            log::debug!("bus backlog to node {} full: messages dropped", self.peer);
            self.unreachable.write().push(self.peer);
        }
    }

    fn close(&self) {
        self.state.lock().closed = true;
        self.work.notify_one();
    }

    fn ended(&self, state: &LinkState) -> bool {
        state.closed || self.stopped.load(Ordering::Acquire)
    }

    /// The link thread: connects (also when idle, so that the peer hears
    /// this node's hello, its client address, even with no message due,
    /// as between two followers), and writes the backlog.
    fn run(&self) {
        let mut buf = Vec::new();
        let mut state = self.state.lock();
        loop {
            if self.ended(&state) {
                return;
            }
            if state.stream.is_none() {
                if state.backlog.is_empty() {
                    self.work.wait_for(&mut state, IDLE_CONNECT);
                    if self.ended(&state) {
                        return;
                    }
                }
                let connected = parking_lot::MutexGuard::unlocked(&mut state, || {
                    let stream = connect(self.peer, self.addr, &self.hello.frame())?;
                    stream.set_nonblocking(true).ok()?;
                    Some(Arc::new(stream))
                });
                match connected {
                    Some(stream) => state.stream = Some(stream),
                    None => self.lost(&mut state, false),
                }
                continue;
            }
            if state.backlog.is_empty() {
                self.work.wait(&mut state);
                continue;
            }
            let stream = state.stream.clone().expect("connected");
            let items = std::mem::take(&mut state.backlog);
            state.backlog_bytes = 0;
            state.draining = true;
            let sent = parking_lot::MutexGuard::unlocked(&mut state, || {
                write_blocking(&stream, items, &mut buf)
            });
            state.draining = false;
            if !sent {
                state.stream = None;
                self.lost(&mut state, true);
            }
        }
    }

    /// After a failed connect or write: reports the peer unreachable when
    /// messages were lost (`failed_write`, or a backlog left unsent),
    /// drops what piled up rather than replaying a backlog of stale
    /// heartbeats (Raft resends what it still needs), and waits a little
    /// before trying again.
    fn lost(&self, state: &mut parking_lot::MutexGuard<'_, LinkState>, failed_write: bool) {
        if failed_write || !state.backlog.is_empty() {
            self.unreachable.write().push(self.peer);
        }
        parking_lot::MutexGuard::unlocked(state, || std::thread::sleep(RECONNECT_BACKOFF));
        state.backlog.clear();
        state.backlog_bytes = 0;
    }
}

/// Writes what the non-blocking `stream` takes of `bytes` now: how many
/// bytes it took, or None on an error (the connection is lost).
fn write_available(mut stream: &TcpStream, bytes: &[u8]) -> Option<usize> {
    let mut written = 0;
    while written < bytes.len() {
        match stream.write(&bytes[written..]) {
            Ok(0) => return None,
            Ok(n) => written += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => return None,
        }
    }
    Some(written)
}

/// Writes `items` in order, waiting as long as the peer takes to read
/// them (the socket is blocking meanwhile; the Raft loop does not write
/// while the link thread drains). False on an error.
fn write_blocking(stream: &TcpStream, items: VecDeque<Pending>, buf: &mut Vec<u8>) -> bool {
    if stream.set_nonblocking(false).is_err() {
        return false;
    }
    let mut writer = stream;
    for item in items {
        let written = match item {
            Pending::Bytes(bytes) => writer.write_all(&bytes),
            Pending::Message(message) => {
                buf.clear();
                encode(&message, buf);
                let written = writer.write_all(buf);
                buf.clear();
                buf.shrink_to(64 << 10);
                written
            }
        };
        if written.is_err() {
            return false;
        }
    }
    stream.set_nonblocking(true).is_ok()
}

fn connect(peer: u64, addr: SocketAddr, hello: &[u8]) -> Option<TcpStream> {
    match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
        Ok(mut stream) => {
            let _ = stream.set_nodelay(true);
            stream.write_all(hello).ok().map(|()| stream)
        }
        Err(e) => {
            log::debug!("bus: node {peer} at {addr} unreachable: {e}");
            None
        }
    }
}

fn encode(message: &Message, buf: &mut Vec<u8>) {
    let at = buf.len();
    buf.extend_from_slice(&[0; 4]);
    message
        .write_to_vec(buf)
        .expect("a raft message always encodes");
    let len = (buf.len() - at - 4) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::prelude::Entry;

    #[derive(Debug)]
    enum Heard {
        Message,
        Peer,
    }

    impl From<Message> for Heard {
        fn from(_: Message) -> Heard {
            Heard::Message
        }
    }

    impl From<PeerEvent> for Heard {
        fn from(_: PeerEvent) -> Heard {
            Heard::Peer
        }
    }

    /// A bus of node 1 whose only peer, node 2, is `peer`.
    fn bus_to(peer: &TcpListener) -> Bus {
        let (inbound, _) = crossbeam_channel::unbounded::<Heard>();
        let peers = HashMap::from([(2, peer.local_addr().unwrap())]);
        let listen = "127.0.0.1:0".parse().unwrap();
        Bus::start(
            1,
            listen,
            &peers,
            "127.0.0.1:1",
            inbound,
            HelloFlags::default(),
        )
        .unwrap()
    }

    /// An append to node 2 numbered `index`, with `bytes` of payload.
    fn append(index: u64, bytes: usize) -> Message {
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgAppend);
        message.to = 2;
        message.from = 1;
        message.index = index;
        let entry = Entry {
            data: vec![index as u8; bytes].into(),
            ..Default::default()
        };
        message.entries = vec![entry].into();
        message
    }

    /// Reads the hello, then messages until one numbered `last`: their
    /// indexes.
    fn read_indexes(stream: TcpStream, last: u64) -> Vec<u64> {
        // A frame cut short fails the test instead of hanging it.
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut reader = BufReader::new(stream);
        let mut buf = Vec::new();
        read_frame(&mut reader, &mut buf).unwrap();
        assert_eq!(
            u64::from_le_bytes(buf[..8].try_into().unwrap()),
            1,
            "the hello"
        );
        let mut indexes = Vec::new();
        while indexes.last() != Some(&last) {
            read_frame(&mut reader, &mut buf).unwrap();
            indexes.push(Message::parse_from_bytes(&buf).unwrap().index);
        }
        indexes
    }

    #[test]
    fn a_peer_that_does_not_read_holds_up_no_send_and_gets_every_message_in_order() {
        let peer = TcpListener::bind("127.0.0.1:0").unwrap();
        let bus = Arc::new(bus_to(&peer));
        let (stream, _) = peer.accept().unwrap();
        // 16 MiB: far more than the sockets hold, so most goes through the
        // backlog while the peer reads nothing.
        const COUNT: u64 = 4096;
        let (done, finished) = crossbeam_channel::bounded(1);
        let sender = bus.clone();
        std::thread::spawn(move || {
            for index in 0..COUNT {
                sender.send(vec![append(index, 4096)]);
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("sends return while the peer reads nothing");
        let indexes = read_indexes(stream, COUNT - 1);
        assert_eq!(indexes, (0..COUNT).collect::<Vec<_>>());
        assert!(bus.take_unreachable().is_empty(), "nothing was dropped");
    }

    /// A snapshot goes through the link thread (encoded off the Raft
    /// loop), between the appends sent with it, in order.
    #[test]
    fn a_snapshot_keeps_its_place_among_the_messages_sent_with_it() {
        let peer = TcpListener::bind("127.0.0.1:0").unwrap();
        let bus = bus_to(&peer);
        let (stream, _) = peer.accept().unwrap();
        let mut snapshot = Message::default();
        snapshot.set_msg_type(MessageType::MsgSnapshot);
        snapshot.to = 2;
        snapshot.index = 2;
        snapshot.mut_snapshot().data = vec![7; 1 << 20].into();
        bus.send(vec![append(1, 16), snapshot, append(3, 16)]);
        bus.send(vec![append(4, 16)]);
        assert_eq!(read_indexes(stream, 4), vec![1, 2, 3, 4]);
    }

    /// A peer that reads nothing fills the backlog; past it messages are
    /// dropped and the peer is reported unreachable, and sending goes on.
    #[test]
    fn past_a_full_backlog_messages_are_dropped_and_the_peer_reported() {
        let peer = TcpListener::bind("127.0.0.1:0").unwrap();
        let bus = bus_to(&peer);
        let (_stream, _) = peer.accept().unwrap();
        // Twice the backlog: the link thread may have taken up to a
        // backlog's worth out to write before the peer's socket filled.
        let per_message = 64 << 10;
        for index in 0..(2 * BACKLOG_BYTES / per_message + 64) as u64 {
            bus.send(vec![append(index, per_message)]);
        }
        assert_eq!(bus.take_unreachable(), vec![2]);
    }

    #[test]
    fn after_the_connection_breaks_the_link_reconnects_with_a_hello() {
        let peer = TcpListener::bind("127.0.0.1:0").unwrap();
        let bus = bus_to(&peer);
        let (stream, _) = peer.accept().unwrap();
        bus.send(vec![append(1, 16)]);
        assert_eq!(read_indexes(stream, 1), vec![1]);
        // The peer's side is gone (read_indexes dropped it): sends fail,
        // the peer is reported, and a later send reaches a new connection.
        let (accepted, accepted_rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let (stream, _) = peer.accept().unwrap();
            accepted.send(stream).unwrap();
        });
        let mut reported = false;
        let stream = loop {
            bus.send(vec![append(2, 16)]);
            reported |= !bus.take_unreachable().is_empty();
            if let Ok(stream) = accepted_rx.recv_timeout(Duration::from_millis(50)) {
                break stream;
            }
        };
        assert!(reported, "the failed sends reported the peer unreachable");
        bus.send(vec![append(3, 16)]);
        let indexes = read_indexes(stream, 3);
        assert!(indexes.iter().rev().skip(1).all(|&i| i == 2), "{indexes:?}");
    }
}
