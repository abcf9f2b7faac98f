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
//! Sending never blocks the Raft loop: each peer has a bounded queue and a
//! thread that writes everything queued in one `write` (a batch of
//! messages per syscall), reconnecting with a short backoff after an
//! error. When the queue is full, or the peer cannot be reached, messages
//! are dropped: Raft retransmits what matters, and a peer that stays
//! silent is reported unreachable to raft-rs so it probes it gently.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use parking_lot::RwLock;
use protobuf::Message as _;
use raft::prelude::Message;

use crate::error::{Error, Result};

/// Messages queued for one peer before new ones are dropped.
const QUEUE: usize = 8192;
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
    queues: HashMap<u64, Sender<Message>>,
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
            queues: HashMap::new(),
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
        if peer == self.hello.id || self.queues.contains_key(&peer) {
            return Ok(());
        }
        self.members.write().push(peer);
        let (sender, receiver) = bounded(QUEUE);
        let hello = self.hello.clone();
        let stopped = self.stopped.clone();
        let unreachable = self.unreachable.clone();
        std::thread::Builder::new()
            .name(format!("engram-bus-{peer}"))
            .spawn(move || send_loop(peer, addr, hello, receiver, unreachable, stopped))
            .map_err(|e| Error::Internal(e.to_string()))?;
        self.queues.insert(peer, sender);
        Ok(())
    }

    /// Stops talking to `peer` (removed from the group): its sender ends
    /// with its queue, and its hellos are refused from now on.
    pub fn remove_peer(&mut self, peer: u64) {
        self.queues.remove(&peer);
        self.members.write().retain(|&m| m != peer);
        self.directory.write().remove(&peer);
    }

    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Queues messages for their peers; never blocks.
    pub fn send(&self, messages: Vec<Message>) {
        for message in messages {
            let Some(queue) = self.queues.get(&message.to) else {
                log::warn!("raft message to unknown node {}", message.to);
                continue;
            };
            match queue.try_send(message) {
                Ok(()) => {}
                Err(TrySendError::Full(message)) => {
                    log::debug!("bus queue to node {} full: message dropped", message.to);
                    self.unreachable.write().push(message.to);
                }
                Err(TrySendError::Disconnected(_)) => {}
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

fn send_loop(
    peer: u64,
    addr: SocketAddr,
    hello: Arc<Hello>,
    queue: Receiver<Message>,
    unreachable: Arc<RwLock<Vec<u64>>>,
    stopped: Arc<AtomicBool>,
) {
    let mut connection: Option<TcpStream> = None;
    let mut buf = Vec::with_capacity(64 << 10);
    loop {
        // Idle without a connection: connect anyway, so the peer hears
        // this node's hello (its client address) even if no message is
        // due, as between two followers.
        let first = match queue.recv_timeout(IDLE_CONNECT) {
            Ok(first) => Some(first),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        };
        if stopped.load(Ordering::Acquire) {
            return;
        }
        if connection.is_none() {
            connection = connect(peer, addr, &hello.frame());
        }
        let Some(first) = first else { continue };
        buf.clear();
        encode(&first, &mut buf);
        // Everything else queued now goes in the same write.
        for message in queue.try_iter().take(1024) {
            encode(&message, &mut buf);
        }
        let sent = match &mut connection {
            Some(stream) => stream.write_all(&buf).is_ok(),
            None => false,
        };
        if !sent {
            connection = None;
            unreachable.write().push(peer);
            // Drop what piled up meanwhile rather than replaying a backlog
            // of stale heartbeats; Raft resends what it still needs.
            std::thread::sleep(RECONNECT_BACKOFF);
            while queue.try_recv().is_ok() {}
        }
    }
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
