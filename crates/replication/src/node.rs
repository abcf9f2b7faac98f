//! One member of a Raft group: the Raft loop (a thread driving raft-rs's
//! `RawNode`), the apply thread, and the handle the server holds.
//!
//! The Raft loop owns the `RawNode` and the durable log. Each pass takes
//! every message, proposal and read request queued, ticks when a tick is
//! due, then handles one `Ready`: messages a leader may send at once go out
//! first (its appends to followers overlap its own write), new entries and
//! the hard state are written and made durable with one sync, messages
//! that must follow persistence go out, committed entries go to the apply
//! thread. Everything that arrived while a sync ran is handled in the next
//! pass as one batch: the pipelined batching of Blizzard's section 5.2.
//!
//! The apply thread hands committed entries, in log order and in batches,
//! to the [`StateMachine`], then publishes the applied index. A proposal's
//! reply comes from the state machine's apply of that entry on this node
//! (`Reply`), so a client hears its result only once the entry is
//! committed (a majority has it, as durably as `LogSync` says) and
//! applied here.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{select, unbounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use protobuf::Message as _;
use raft::prelude::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, Message, MessageType,
};
use raft::{Config, RawNode, ReadOnlyOption, SnapshotStatus, StateRole};
use slog::Drain;
use tokio::sync::{oneshot, watch, Notify};

use crate::bus::{Bus, Directory, HelloFlags, PeerEvent};
use crate::error::{Error, Result};
use crate::membership::{Change, PeersFile};
use crate::raft_log::RaftLog;
use crate::snapshots::{SnapshotFile, Snapshots};

/// A member of the group: its id and bus address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub id: u64,
    pub bus: SocketAddr,
}

/// Parses `1@host:port,2@host:port,...` (the `--peers` option).
pub fn parse_peers(spec: &str) -> Result<Vec<Peer>> {
    let mut peers = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('@')
            .ok_or_else(|| Error::Peers(format!("'{part}' is not ID@HOST:PORT")))?;
        let id: u64 = id
            .parse()
            .ok()
            .filter(|&id| id > 0)
            .ok_or_else(|| Error::Peers(format!("'{id}' is not a node id (a number > 0)")))?;
        let bus = std::net::ToSocketAddrs::to_socket_addrs(addr)
            .map_err(|e| Error::Peers(format!("'{addr}': {e}")))?
            .next()
            .ok_or_else(|| Error::Peers(format!("'{addr}' names no address")))?;
        if peers.iter().any(|p: &Peer| p.id == id) {
            return Err(Error::Peers(format!("node id {id} appears twice")));
        }
        peers.push(Peer { id, bus });
    }
    if peers.is_empty() {
        return Err(Error::Peers("no peers given".into()));
    }
    Ok(peers)
}

/// When the Raft log's new entries are made durable (the node's
/// durability, as its keyspace's): the state slot (term, vote) is synced
/// whenever it changes, whatever this says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogSync {
    /// Before anything that depends on them (acknowledging, voting, the
    /// commit): power-fail durable on a majority before a client hears.
    EveryRound,
    /// At most a second behind.
    EverySecond,
    /// Never asked for: the stores to the mapped file survive a crash of
    /// the process, and the kernel writes them back in its own time.
    Never,
}

impl LogSync {
    /// Whether a round that wrote records must make them durable, the
    /// last time they were made so `since` ago.
    pub fn due(self, since: Duration) -> bool {
        match self {
            LogSync::EveryRound => true,
            LogSync::EverySecond => since >= Duration::from_secs(1),
            LogSync::Never => false,
        }
    }
}

/// The current policy, asked once per round (it may change at run time).
pub type LogSyncPolicy = Box<dyn Fn() -> LogSync + Send>;

pub struct NodeConfig {
    pub id: u64,
    /// Every voter of the group, this node included.
    pub peers: Vec<Peer>,
    /// Where the Raft log lives (`DIR/raft`).
    pub dir: PathBuf,
    /// The address clients reach this node at (told to the peers).
    pub client_addr: String,
    pub tick: Duration,
    pub heartbeat_ticks: usize,
    pub election_ticks: usize,
    /// The last index the state machine applied durably (from its own
    /// store at startup): raft-rs delivers the entries after it.
    pub applied: u64,
    /// The log is compacted once its records take this many bytes (up to
    /// what every follower holds, or past a follower that lags by four
    /// times as much, which then gets a snapshot).
    pub compact_bytes: u64,
    /// This node joins a running group (added with a membership change):
    /// it starts with no membership and waits for the leader's snapshot.
    pub join: bool,
    /// When entries are made durable (default: every round).
    pub log_sync: LogSyncPolicy,
}

impl NodeConfig {
    /// The defaults: a 10 ms tick, heartbeats every tick, elections after
    /// 6 to 12 silent ticks (60 to 120 ms).
    pub fn new(id: u64, peers: Vec<Peer>, dir: PathBuf, client_addr: String) -> NodeConfig {
        NodeConfig {
            id,
            peers,
            dir,
            client_addr,
            tick: Duration::from_millis(10),
            heartbeat_ticks: 1,
            election_ticks: 6,
            applied: 0,
            compact_bytes: 64 << 20,
            join: false,
            log_sync: Box::new(|| LogSync::EveryRound),
        }
    }
}

/// Why a proposal or a read was not served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// This node is not the leader; the leader's id if known.
    NotLeader(Option<u64>),
    /// Leadership changed before the outcome was known: the entry may or
    /// may not be applied.
    Unknown,
    /// The node is shutting down.
    Stopped,
    /// A membership change that cannot be made, and why.
    Invalid(String),
}

/// What a proposer hears once its entry is applied: the entry's index and
/// the state machine's reply.
#[derive(Debug, PartialEq, Eq)]
pub struct Applied {
    pub index: u64,
    pub reply: Vec<u8>,
}

/// Where the state machine sends a proposal's result (the server's reply
/// bytes); dropping it unanswered tells the proposer `Refused::Unknown`.
pub struct Reply {
    index: u64,
    sender: ProposalReply,
}

impl Reply {
    pub fn send(self, reply: Vec<u8>) {
        let _ = self.sender.send(Ok(Applied {
            index: self.index,
            reply,
        }));
    }
}

/// A committed entry, handed to the state machine in log order.
pub struct Committed {
    pub index: u64,
    pub term: u64,
    /// The proposal's bytes (empty for the entries a new leader appends).
    pub data: Bytes,
    /// Set on the node that proposed the entry, while its client waits.
    pub reply: Option<Reply>,
}

/// What the group replicates into: applies committed entries in log order.
pub trait StateMachine: Send + 'static {
    /// Applies a batch of committed entries, in order, and answers each
    /// `reply`. When it returns, the entries are applied (and their
    /// applied index recorded as the state machine's durability promises).
    fn apply(&mut self, entries: Vec<Committed>);

    /// The whole state as it is now (after the last entry applied), for a
    /// follower the log cannot catch up: what `restore` takes.
    fn snapshot(&mut self) -> std::result::Result<Vec<u8>, String>;

    /// Replaces the whole state with a snapshot's, taken at `index`, and
    /// records `index` as applied; durable when it returns.
    fn restore(&mut self, index: u64, data: &[u8]) -> std::result::Result<(), String>;

    /// Makes everything applied so far durable (the log is about to drop
    /// those entries).
    fn sync(&mut self) -> std::result::Result<(), String>;
}

/// What the Raft loop hands the apply thread, in log order.
enum ToApply {
    Entries(Vec<Committed>),
    /// A snapshot from the leader, already written to the snapshot file.
    Snapshot {
        index: u64,
        data: Bytes,
    },
    /// Make the state durable, then report how far (for compaction).
    Sync,
}

#[derive(Clone, Debug, Default)]
pub struct Status {
    pub id: u64,
    pub role: &'static str,
    pub leader: u64,
    pub term: u64,
    pub commit: u64,
    pub applied: u64,
    pub last_index: u64,
    pub log_bytes: u64,
    /// The index of the last entry the log dropped (compaction).
    pub compacted: u64,
    /// Snapshots this node installed from a leader, and built for
    /// followers, since it started.
    pub snapshots_installed: u64,
    pub snapshots_built: u64,
    /// Syncs of the log's records since the node started (each covers
    /// every entry appended since the previous one).
    pub log_syncs: u64,
    /// Appends (raft messages carrying entries) this node sent since it
    /// started, and the entries in them: how well proposals are batched.
    pub appends_sent: u64,
    pub entries_sent: u64,
    /// On the leader: each follower's match index.
    pub progress: Vec<(u64, u64)>,
    /// The members that do not vote (joining nodes not yet caught up).
    pub learners: Vec<u64>,
}

enum Input {
    Propose(Vec<u8>, ProposalReply),
    Read(oneshot::Sender<std::result::Result<u64, Refused>>),
    Transfer(u64),
    Members(Change, ProposalReply),
}

/// Everything the Raft loop waits for, on one channel: a loop that waited
/// on four (a `select!` over the handle's inputs, the bus's messages and
/// peer events, the apply thread's durable points) spent half its time
/// registering and unregistering with their wakers under load.
enum Event {
    Message(Message),
    Peer(PeerEvent),
    Input(Input),
    /// The apply thread made the state durable up to this index.
    Durable(u64),
    /// The handle was dropped (the server stopped), or the apply thread
    /// ended: the loop ends.
    Stop,
}

impl From<Message> for Event {
    fn from(message: Message) -> Event {
        Event::Message(message)
    }
}

impl From<PeerEvent> for Event {
    fn from(event: PeerEvent) -> Event {
        Event::Peer(event)
    }
}

/// The server's handle on its group.
pub struct Replica {
    id: u64,
    inputs: Sender<Event>,
    leader: Arc<AtomicU64>,
    /// The last leader this node knew (kept through an election).
    last_leader: Arc<AtomicU64>,
    is_leader: Arc<AtomicBool>,
    /// Notified when this node stops leading.
    stepped_down: Arc<Notify>,
    /// This node applied its own removal from the group.
    removed: Arc<AtomicBool>,
    applied: watch::Receiver<u64>,
    status: Arc<Mutex<Status>>,
    directory: Directory,
    /// Voters and learners, as this node last applied them.
    members: Arc<parking_lot::RwLock<Vec<u64>>>,
    pub bus_addr: SocketAddr,
}

impl Replica {
    /// Opens the log, binds the bus, starts the Raft loop and the apply
    /// thread.
    pub fn start(mut config: NodeConfig, mut machine: Box<dyn StateMachine>) -> Result<Replica> {
        // After a membership change the members are the ones applied last,
        // whatever --peers says now.
        let peers_file = PeersFile::new(&config.dir);
        if let Some(known) = peers_file.read()? {
            if !known.iter().any(|p| p.id == config.id) {
                return Err(Error::Peers(format!(
                    "node {} was removed from its group ({} names the members); to add it \
                     again, empty its directory and start it with --join",
                    config.id,
                    config.dir.join("peers").display()
                )));
            }
            if known != config.peers {
                log::info!("raft: the members come from the last membership change, not --peers");
            }
            config.peers = known;
        }
        let me = config
            .peers
            .iter()
            .find(|p| p.id == config.id)
            .ok_or_else(|| {
                Error::Peers(format!(
                    "this node's id {} is not among the peers",
                    config.id
                ))
            })?
            .clone();
        let bootstrap: Vec<u64> = if config.join {
            Vec::new()
        } else {
            config.peers.iter().map(|p| p.id).collect()
        };
        let synced = (config.log_sync)() != LogSync::Never;
        let mut log = RaftLog::open_with(&config.dir, &bootstrap, synced)?;
        // A snapshot from a leader that the state machine does not hold
        // yet (a crash came during or before its load): load it again.
        let snapshot_file = SnapshotFile::new(&config.dir);
        if let Some((index, term, data)) = snapshot_file.read()? {
            if index > config.applied {
                log::info!("raft: loading the snapshot at index {index} again");
                machine.restore(index, &data).map_err(Error::Internal)?;
                config.applied = index;
            }
            if log.compacted_to() < index {
                // The crash came between the file and the log's reset.
                let mut metadata = raft::prelude::SnapshotMetadata {
                    index,
                    term,
                    ..Default::default()
                };
                metadata.set_conf_state(log.conf_state().clone());
                log.apply_snapshot(&metadata)?;
            }
            snapshot_file.remove()?;
        }
        if config.applied < log.compacted_to() {
            return Err(Error::Corrupt(format!(
                "the state machine applied index {} but the Raft log starts after {}: the \
                 entries between are gone (data lost under a durability that allows it?); \
                 remove {} to rejoin the group from a snapshot",
                config.applied,
                log.compacted_to(),
                config.dir.display()
            )));
        }
        // Applied entries were committed, whatever commit index the last
        // state write recorded (a commit index alone is not written).
        if log.hard_state().commit < config.applied {
            if config.applied > log.last_index() {
                return Err(Error::Corrupt(format!(
                    "the state machine applied index {} but the Raft log in {} ends at {}: \
                     the log lost entries its node had applied (a power failure at a \
                     durability that allows it, or the log removed); empty the node's \
                     directory and start it again to rejoin the group from a snapshot",
                    config.applied,
                    config.dir.display(),
                    log.last_index()
                )));
            }
            log.set_commit(config.applied);
        }
        let (snapshots, snapshot_requests) = Snapshots::new();
        log.set_snapshots(snapshots.clone());
        let raft_config = Config {
            id: config.id,
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            applied: config.applied,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            // Proposals that arrive together (the loop takes every queued
            // input before it asks for a Ready) go to each follower as
            // one append, not one each: a follower then steps, logs and
            // answers once per batch (BENCHMARKS.md, issue 26: the Raft
            // loops' and bus receivers' CPU per write fell by a fifth).
            batch_append: true,
            check_quorum: true,
            pre_vote: true,
            read_only_option: ReadOnlyOption::Safe,
            ..Default::default()
        };
        raft_config.validate()?;
        let logger = slog::Logger::root(slog_stdlog::StdLog.fuse(), slog::o!());
        let raw = RawNode::new(&raft_config, log, &logger)?;

        let (events_tx, events_rx) = unbounded::<Event>();
        let peers: HashMap<u64, SocketAddr> = config.peers.iter().map(|p| (p.id, p.bus)).collect();
        let flags = HelloFlags::default();
        flags
            .fresh
            .store(raw.store().was_created(), Ordering::Release);
        flags
            .awaiting_snapshot
            .store(no_members(raw.store().conf_state()), Ordering::Release);
        let fresh = flags.fresh.clone();
        let awaiting_snapshot = flags.awaiting_snapshot.clone();
        let bus = Bus::start(
            config.id,
            me.bus,
            &peers,
            &config.client_addr,
            events_tx.clone(),
            flags,
        )?;
        let members = Arc::new(parking_lot::RwLock::new(member_ids(
            raw.store().conf_state(),
        )));
        let (applied_tx, applied_rx) = watch::channel(config.applied);
        let (apply_tx, apply_rx) = unbounded::<ToApply>();
        let status = Arc::new(Mutex::new(Status {
            id: config.id,
            applied: config.applied,
            ..Default::default()
        }));
        let leader = Arc::new(AtomicU64::new(0));
        let last_leader = Arc::new(AtomicU64::new(0));
        let is_leader = Arc::new(AtomicBool::new(false));
        let stepped_down = Arc::new(Notify::new());
        let removed = Arc::new(AtomicBool::new(false));
        let replica = Replica {
            id: config.id,
            inputs: events_tx.clone(),
            leader: leader.clone(),
            last_leader: last_leader.clone(),
            is_leader: is_leader.clone(),
            stepped_down: stepped_down.clone(),
            removed: removed.clone(),
            applied: applied_rx,
            status: status.clone(),
            directory: bus.directory().clone(),
            members: members.clone(),
            bus_addr: bus.local_addr,
        };
        {
            let applier = ApplyLoop {
                machine,
                status: status.clone(),
                applied: applied_tx,
                last: config.applied,
                snapshots,
                snapshot_file: SnapshotFile::new(&config.dir),
                durable: events_tx,
                build_at: None,
            };
            std::thread::Builder::new()
                .name("engram-apply".into())
                .spawn(move || applier.run(apply_rx, snapshot_requests))
                .map_err(|e| Error::Internal(e.to_string()))?;
        }
        let driver = Driver {
            raw,
            bus,
            events: events_rx,
            apply: apply_tx,
            tick: config.tick,
            pending: HashMap::new(),
            reads_waiting: Vec::new(),
            reads_in_flight: HashMap::new(),
            read_counter: 0,
            leader,
            last_leader,
            is_leader,
            stepped_down,
            removed,
            status,
            snapshot_file,
            fresh,
            awaiting_snapshot,
            catch_up_to: None,
            fast_election: None,
            addresses: config.peers.iter().map(|p| (p.id, p.bus)).collect(),
            members,
            peers_file,
            want_snapshot: HashSet::new(),
            compact_bytes: config.compact_bytes.max(1),
            sync_asked: false,
            log_sync: config.log_sync,
            records_synced: Instant::now(),
            appends_sent: 0,
            entries_sent: 0,
        };
        std::thread::Builder::new()
            .name("engram-raft".into())
            .spawn(move || driver.run())
            .map_err(|e| Error::Internal(e.to_string()))?;
        Ok(replica)
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The members of the group (voters and learners), in id order.
    pub fn members(&self) -> Vec<u64> {
        self.members.read().clone()
    }

    /// Proposes a membership change (on the leader); resolves once it is
    /// applied here.
    pub fn change_members(
        &self,
        change: Change,
    ) -> impl std::future::Future<Output = std::result::Result<Applied, Refused>> {
        self.submit(|reply| Input::Members(change, reply))
    }

    /// Hands the Raft loop an input that answers through a proposal's
    /// reply; a loop that is gone answers `Stopped`, a reply dropped
    /// unanswered `Unknown`.
    fn submit(
        &self,
        input: impl FnOnce(ProposalReply) -> Input,
    ) -> impl std::future::Future<Output = std::result::Result<Applied, Refused>> {
        let (tx, rx) = oneshot::channel();
        let sent = self.inputs.send(Event::Input(input(tx))).is_ok();
        async move {
            if !sent {
                return Err(Refused::Stopped);
            }
            rx.await.unwrap_or(Err(Refused::Unknown))
        }
    }

    /// Whether this node believes it leads (a hint: a proposal or a read
    /// barrier is what proves it).
    pub fn is_leader(&self) -> bool {
        self.is_leader.load(Ordering::Acquire)
    }

    /// Completes when this node stops leading (after this call: check
    /// `is_leader` once the future exists, as with any `Notify`).
    pub fn stepped_down(&self) -> tokio::sync::futures::Notified<'_> {
        self.stepped_down.notified()
    }

    /// Whether this node applied its own removal from the group (it hears
    /// nothing from the group since: its data is stale).
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// The leader's id, 0 when unknown.
    pub fn leader(&self) -> u64 {
        self.leader.load(Ordering::Acquire)
    }

    /// The leader now, or during an election the last one this node knew
    /// (0 if it never knew one): what a topology shown to clients names,
    /// as Redis Cluster keeps showing a failed master until it is replaced.
    pub fn last_known_leader(&self) -> u64 {
        match self.leader() {
            0 => self.last_leader.load(Ordering::Acquire),
            leader => leader,
        }
    }

    /// The address clients reach node `id` at, as it told the group.
    pub fn client_addr(&self, id: u64) -> Option<String> {
        self.directory.read().get(&id).cloned()
    }

    pub fn status(&self) -> Status {
        self.status.lock().clone()
    }

    /// Proposes `data` now; the future resolves with the state machine's
    /// reply once the entry is committed and applied here.
    pub fn propose(
        &self,
        data: Vec<u8>,
    ) -> impl std::future::Future<Output = std::result::Result<Applied, Refused>> {
        self.submit(|reply| Input::Propose(data, reply))
    }

    /// A linearizable read point (Raft's ReadIndex), asked for now: the
    /// future resolves once this node has confirmed with a majority that
    /// it still leads and has applied everything committed before the
    /// call.
    pub fn read_barrier(
        &self,
    ) -> impl std::future::Future<Output = std::result::Result<(), Refused>> + '_ {
        let (tx, rx) = oneshot::channel();
        let sent = self.inputs.send(Event::Input(Input::Read(tx))).is_ok();
        async move {
            if !sent {
                return Err(Refused::Stopped);
            }
            let index = rx.await.unwrap_or(Err(Refused::Unknown))?;
            self.wait_applied(index).await;
            Ok(())
        }
    }

    /// How many followers hold the log up to `index` durably (their match
    /// index, as the leader last heard it); 0 off the leader.
    pub fn followers_holding(&self, index: u64) -> usize {
        if !self.is_leader() {
            return 0;
        }
        let status = self.status.lock();
        status
            .progress
            .iter()
            .filter(|(_, matched)| *matched >= index)
            .count()
    }

    /// Waits until the applied index reaches `index`.
    pub async fn wait_applied(&self, index: u64) {
        let mut applied = self.applied.clone();
        let _ = applied.wait_for(|&applied| applied >= index).await;
    }

    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Asks raft-rs to hand leadership to `to` (a no-op off the leader).
    pub fn transfer_leader(&self, to: u64) {
        let _ = self.inputs.send(Event::Input(Input::Transfer(to)));
    }
}

/// Ends the process as a crash would, when this node cannot go on
/// safely (its log or state cannot be written). Said on standard error
/// too: a process without a logger (a test, an embedder) would otherwise
/// exit 70 without a word.
fn stop(why: &str) -> ! {
    log::error!("{why}");
    eprintln!("engram replication: {why}");
    std::process::exit(70);
}

type ProposalReply = oneshot::Sender<std::result::Result<Applied, Refused>>;
type ReadReply = oneshot::Sender<std::result::Result<u64, Refused>>;

/// A follower's campaigns after its leader's connection closed.
struct FastElection {
    /// When this node campaigns next (first after its rank among the
    /// survivors, in ticks; then every as many ticks as there are
    /// survivors, so that they take turns).
    at: Instant,
    period: Duration,
    /// When the ordinary election timer has surely taken over.
    until: Instant,
}

struct Driver {
    raw: RawNode<RaftLog>,
    bus: Bus,
    events: Receiver<Event>,
    apply: Sender<ToApply>,
    tick: Duration,
    /// Proposals of this node waiting for their entry: index → (term, reply).
    pending: HashMap<u64, (u64, ProposalReply)>,
    reads_waiting: Vec<ReadReply>,
    reads_in_flight: HashMap<Vec<u8>, Vec<ReadReply>>,
    read_counter: u64,
    leader: Arc<AtomicU64>,
    last_leader: Arc<AtomicU64>,
    is_leader: Arc<AtomicBool>,
    stepped_down: Arc<Notify>,
    removed: Arc<AtomicBool>,
    status: Arc<Mutex<Status>>,
    snapshot_file: SnapshotFile,
    /// This node started with an empty log and has not caught up with a
    /// leader yet (see `step`); told to peers in the bus's hello.
    fresh: Arc<AtomicBool>,
    /// While fresh: the commit index of the first leader that reached it.
    catch_up_to: Option<u64>,
    /// The leader's connection ended and this node has yet to campaign
    /// for its place.
    fast_election: Option<FastElection>,
    /// This node has no membership yet (it joins): it takes no entries
    /// until a leader's snapshot gives it the group's.
    awaiting_snapshot: Arc<AtomicBool>,
    /// Every member's bus address, this node's included.
    addresses: HashMap<u64, SocketAddr>,
    members: Arc<parking_lot::RwLock<Vec<u64>>>,
    peers_file: PeersFile,
    /// Peers whose last hello asked for a snapshot (joining nodes).
    want_snapshot: HashSet<u64>,
    compact_bytes: u64,
    /// A sync for compaction was asked of the apply thread, not answered.
    sync_asked: bool,
    log_sync: LogSyncPolicy,
    /// When the log's records were last made durable.
    records_synced: Instant,
    /// Appends sent and the entries in them (`Status`).
    appends_sent: u64,
    entries_sent: u64,
}

impl Driver {
    fn run(mut self) {
        let mut next_tick = Instant::now() + self.tick;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            let mut next = match self.events.recv_timeout(wait) {
                Ok(event) => Some(event),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            // Everything queued meanwhile is handled in this pass.
            while let Some(event) = next {
                if !self.handle_event(event) {
                    return;
                }
                next = self.events.try_recv().ok();
            }
            if Instant::now() >= next_tick {
                if !self.catching_up() {
                    self.raw.tick();
                }
                next_tick += self.tick;
                if next_tick < Instant::now() {
                    // A stall (the machine was busy): do not tick in a burst.
                    next_tick = Instant::now() + self.tick;
                }
                for peer in self.bus.take_unreachable() {
                    self.raw.report_unreachable(peer);
                }
                self.maybe_ask_sync();
                self.promote_caught_up_learner();
            }
            self.run_fast_election();
            self.issue_reads();
            if let Err(e) = self.handle_ready() {
                // The log cannot be written: this node must not go on
                // voting or acknowledging. Stop, as a crash would.
                stop(&format!("replication stopped: {e}"));
            }
        }
    }

    /// Whether the loop goes on.
    fn handle_event(&mut self, event: Event) -> bool {
        match event {
            Event::Message(message) => self.step(message),
            Event::Input(input) => self.input(input),
            Event::Durable(index) => self.durable(index),
            Event::Peer(PeerEvent::Hello {
                peer,
                fresh,
                awaiting_snapshot,
            }) => self.peer_said_hello(peer, fresh, awaiting_snapshot),
            Event::Peer(PeerEvent::Closed(peer)) => self.peer_closed(peer),
            Event::Stop => return false,
        }
        true
    }

    fn step(&mut self, mut message: Message) {
        if self.fresh.load(Ordering::Relaxed) && !self.fresh_step(&mut message) {
            return;
        }
        if message.get_msg_type() == MessageType::MsgAppend
            && self.awaiting_snapshot.load(Ordering::Relaxed)
        {
            // Entries replayed onto no membership would build a wrong one:
            // a joining node learns the group's from a snapshot first.
            return;
        }
        if let Err(e) = self.raw.step(message) {
            log::debug!("raft step: {e}");
        }
    }

    /// A node that starts with an empty log may be one that lost its disk
    /// and rejoins a group with history, where Raft assumes every node
    /// keeps what it acknowledged. Until it has caught up with a leader it
    /// must not help elect a candidate that lacks committed entries it
    /// once held, nor campaign itself: it grants no vote to a candidate
    /// with a log (a brand-new group's first candidates have none), and
    /// once a leader has reached it, it neither ticks nor votes until its
    /// log is committed up to that leader's commit index. A heartbeat's
    /// commit index, computed by a leader that still counts the entries
    /// this node held before, is cut to its log (raft-rs would stop on
    /// it). Whether to step `message`.
    fn fresh_step(&mut self, message: &mut Message) -> bool {
        let leader_commit = match message.get_msg_type() {
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote => {
                if message.index > 0 {
                    log::debug!(
                        "raft: node {} starts empty: no vote for node {} (it has a log)",
                        self.raw.raft.id,
                        message.from
                    );
                    return false;
                }
                None
            }
            MessageType::MsgHeartbeat => {
                message.commit = message.commit.min(self.raw.raft.raft_log.last_index());
                None
            }
            MessageType::MsgAppend => Some(message.commit),
            MessageType::MsgSnapshot => Some(message.get_snapshot().get_metadata().index),
            _ => None,
        };
        if let Some(commit) = leader_commit {
            self.catch_up_to = Some(self.catch_up_to.unwrap_or(0).max(commit));
        }
        true
    }

    /// Whether this node started empty, a leader reached it, and its log
    /// is not yet committed as far as that leader's was.
    fn catching_up(&mut self) -> bool {
        if !self.fresh.load(Ordering::Relaxed) {
            return false;
        }
        let Some(target) = self.catch_up_to else {
            return false;
        };
        if self.raw.raft.raft_log.committed >= target {
            self.fresh.store(false, Ordering::Release);
            log::info!(
                "raft: node {} caught up with the group (commit index {target})",
                self.raw.raft.id
            );
            return false;
        }
        true
    }

    /// The leader's connection to this node ended: its process is gone (a
    /// crash or a kill closes its sockets at once), or its host dropped
    /// the connection. Rather than wait out the election timeout, the
    /// followers forget it (a follower that still counts a live leader
    /// refuses to vote: check-quorum's lease) and the survivors campaign
    /// in the order of their ids, one tick apart, so that one of them
    /// wins the first round (the first in order whose log is complete)
    /// instead of all splitting the vote. A leader that is in fact alive
    /// loses nothing: the other follower still hears it and refuses.
    fn peer_closed(&mut self, peer: u64) {
        let raft = &mut self.raw.raft;
        if peer != raft.leader_id || raft.state == StateRole::Leader || self.catching_up() {
            return;
        }
        let raft = &mut self.raw.raft;
        raft.leader_id = raft::INVALID_ID;
        let mut survivors: Vec<u64> = raft
            .prs()
            .conf()
            .voters()
            .ids()
            .iter()
            .filter(|&id| id != peer)
            .collect();
        survivors.sort_unstable();
        let rank = survivors.iter().position(|&id| id == raft.id);
        log::info!(
            "raft: node {}: the leader's (node {peer}) connection closed; campaigning {}",
            raft.id,
            match rank {
                Some(0) => "now".to_string(),
                Some(rank) => format!("after {rank} tick(s) if no one leads"),
                None => "never (not a voter)".to_string(),
            }
        );
        let survivors = survivors.len().max(1) as u32;
        self.fast_election = rank.map(|rank| FastElection {
            at: Instant::now() + self.tick * rank as u32,
            period: self.tick * survivors,
            until: Instant::now() + self.tick * self.raw.raft.election_timeout() as u32,
        });
    }

    /// Campaigns when this node's turn in a fast election comes and no one
    /// leads yet, and again at its next turn if that round won nothing (a
    /// survivor busy catching up answers late, or one with a shorter log
    /// campaigned first); gives up past an election timeout (the ordinary
    /// timer goes on meanwhile). A candidate (past its pre-vote) is left
    /// to its round: campaigning again would only raise the term.
    fn run_fast_election(&mut self) {
        let Some(election) = &mut self.fast_election else {
            return;
        };
        let now = Instant::now();
        let raft = &self.raw.raft;
        if raft.leader_id != raft::INVALID_ID || now >= election.until {
            self.fast_election = None;
            return;
        }
        let may = matches!(raft.state, StateRole::Follower | StateRole::PreCandidate);
        if now >= election.at && may {
            election.at = now + election.period;
            if let Err(e) = self.raw.campaign() {
                log::debug!("raft: campaign: {e}");
            }
        }
    }

    /// A peer connected. Said it was fresh: a leader forgets what it
    /// believed the peer held and probes it from the start (from there it
    /// gets the log, or a snapshot if the log was compacted). Said it has
    /// no membership: it gets a snapshot (from whichever node leads now or
    /// later).
    fn peer_said_hello(&mut self, peer: u64, fresh: bool, awaiting_snapshot: bool) {
        if awaiting_snapshot {
            self.want_snapshot.insert(peer);
            self.request_snapshot_for(peer);
        } else {
            self.want_snapshot.remove(&peer);
        }
        if fresh {
            self.peer_is_fresh(peer);
        }
    }

    fn peer_is_fresh(&mut self, peer: u64) {
        let raft = &mut self.raw.raft;
        if raft.state != StateRole::Leader || peer == raft.id {
            return;
        }
        if let Some(progress) = raft.mut_prs().get_mut(peer) {
            if progress.matched > 0 {
                log::info!(
                    "raft: node {peer} starts with an empty log (it held up to {}): probing it \
                     from the start",
                    progress.matched
                );
            }
            progress.matched = 0;
            progress.become_probe();
        }
    }

    fn input(&mut self, input: Input) {
        match input {
            Input::Propose(data, reply) => {
                if self.raw.raft.state != StateRole::Leader {
                    let _ = reply.send(Err(Refused::NotLeader(self.known_leader())));
                    return;
                }
                match self.raw.propose(Vec::new(), data) {
                    Ok(()) => {
                        let index = self.raw.raft.raft_log.last_index();
                        self.pending.insert(index, (self.raw.raft.term, reply));
                    }
                    Err(_) => {
                        let _ = reply.send(Err(Refused::NotLeader(self.known_leader())));
                    }
                }
            }
            Input::Read(reply) => {
                if self.raw.raft.state != StateRole::Leader {
                    let _ = reply.send(Err(Refused::NotLeader(self.known_leader())));
                } else {
                    self.reads_waiting.push(reply);
                }
            }
            Input::Transfer(to) => self.raw.transfer_leader(to),
            Input::Members(change, reply) => match self.propose_change(change) {
                Ok(index) => {
                    self.pending.insert(index, (self.raw.raft.term, reply));
                }
                Err(refused) => {
                    let _ = reply.send(Err(refused));
                }
            },
        }
    }

    /// Checks and proposes a membership change; the index of its entry.
    fn propose_change(&mut self, change: Change) -> std::result::Result<u64, Refused> {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader {
            return Err(Refused::NotLeader(self.known_leader()));
        }
        if raft.has_pending_conf() {
            return Err(Refused::Invalid(
                "a membership change is in progress: try again once it is applied".into(),
            ));
        }
        let conf = raft.prs().conf();
        let voters: Vec<u64> = conf.voters().ids().iter().collect();
        let is_member = |id: u64| voters.contains(&id) || conf.learners().contains(&id);
        let mut cc = ConfChange::default();
        match change {
            Change::Add { id, bus } => {
                if id == 0 {
                    return Err(Refused::Invalid("node ids are numbers above 0".into()));
                }
                if is_member(id) {
                    return Err(Refused::Invalid(format!("node {id} is already a member")));
                }
                cc.set_change_type(ConfChangeType::AddLearnerNode);
                cc.node_id = id;
                cc.context = bus.to_string().into_bytes().into();
            }
            Change::Remove { id } => {
                if !is_member(id) {
                    return Err(Refused::Invalid(format!("node {id} is not a member")));
                }
                if id == raft.id {
                    return Err(Refused::Invalid(
                        "this node leads the group: hand leadership to another node first \
                         (CLUSTER FAILOVER on it), then remove this one there"
                            .into(),
                    ));
                }
                cc.set_change_type(ConfChangeType::RemoveNode);
                cc.node_id = id;
            }
        }
        self.raw
            .propose_conf_change(Vec::new(), cc)
            .map_err(|_| Refused::NotLeader(self.known_leader()))?;
        Ok(self.raw.raft.raft_log.last_index())
    }

    /// Applies a committed membership change: raft-rs's configuration, the
    /// log's (synced before anything later is applied), the bus, the
    /// members and the peers file.
    fn apply_conf_change(&mut self, entry: &Entry) -> Result<()> {
        let cc = ConfChange::parse_from_bytes(&entry.data)
            .map_err(|e| Error::Corrupt(format!("configuration change at {}: {e}", entry.index)))?;
        let conf = self.raw.apply_conf_change(&cc)?;
        let store = self.raw.mut_store();
        store.set_conf_state(conf.clone());
        store.sync(true)?;
        let id = cc.node_id;
        match cc.get_change_type() {
            ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                let bus = std::str::from_utf8(&cc.context)
                    .ok()
                    .and_then(|text| text.parse::<SocketAddr>().ok());
                if let Some(bus) = bus {
                    self.addresses.insert(id, bus);
                    self.bus.add_peer(id, bus)?;
                }
                if cc.get_change_type() == ConfChangeType::AddLearnerNode {
                    // It has no membership until a snapshot gives it one.
                    self.want_snapshot.insert(id);
                    self.request_snapshot_for(id);
                }
                log::info!(
                    "raft: node {} applied: node {id} {} (members {:?})",
                    self.raw.raft.id,
                    if cc.get_change_type() == ConfChangeType::AddNode {
                        "is a voter"
                    } else {
                        "joins as a learner"
                    },
                    member_ids(&conf)
                );
            }
            ConfChangeType::RemoveNode => {
                self.addresses.remove(&id);
                self.bus.remove_peer(id);
                if id == self.raw.raft.id {
                    // Nothing reaches it from the group any more: what it
                    // holds only ages. The server refuses its data.
                    self.removed.store(true, Ordering::Release);
                    log::warn!("raft: this node (node {id}) was removed from the group");
                } else {
                    log::info!(
                        "raft: node {} applied: node {id} removed (members {:?})",
                        self.raw.raft.id,
                        member_ids(&conf)
                    );
                }
            }
        }
        self.members_changed(&conf)
    }

    /// The members are `conf`'s now: the handle's list and the peers file.
    fn members_changed(&mut self, conf: &ConfState) -> Result<()> {
        let ids = member_ids(conf);
        let peers: Vec<Peer> = ids
            .iter()
            .filter_map(|id| self.addresses.get(id).map(|&bus| Peer { id: *id, bus }))
            .collect();
        *self.members.write() = ids;
        self.peers_file.write(&peers)
    }

    /// On the leader, once no change is pending: a learner whose log has
    /// caught up with the commit index becomes a voter.
    fn promote_caught_up_learner(&mut self) {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader || raft.has_pending_conf() {
            return;
        }
        let committed = raft.raft_log.committed;
        let ready = raft.prs().conf().learners().iter().copied().find(|&id| {
            raft.prs()
                .get(id)
                .is_some_and(|p| p.matched > 0 && p.matched >= committed)
        });
        let Some(id) = ready else { return };
        let mut cc = ConfChange::default();
        cc.set_change_type(ConfChangeType::AddNode);
        cc.node_id = id;
        if let Some(bus) = self.addresses.get(&id) {
            cc.context = bus.to_string().into_bytes().into();
        }
        log::info!("raft: node {id} has caught up: promoting it to voter");
        if let Err(e) = self.raw.propose_conf_change(Vec::new(), cc) {
            log::debug!("raft: promoting node {id}: {e}");
        }
    }

    /// On the leader: `peer` gets a snapshot before any entry.
    fn request_snapshot_for(&mut self, peer: u64) {
        let raft = &mut self.raw.raft;
        if raft.state != StateRole::Leader {
            return;
        }
        let index = raft.raft_log.committed.max(1);
        if let Some(progress) = raft.mut_prs().get_mut(peer) {
            if progress.pending_request_snapshot == raft::INVALID_INDEX {
                progress.pending_request_snapshot = index;
            }
        }
    }

    /// The apply thread made the state durable up to `index`: compact.
    fn durable(&mut self, index: u64) {
        self.sync_asked = false;
        if let Err(e) = self.compact(index) {
            stop(&format!(
                "replication stopped: compacting the Raft log: {e}"
            ));
        }
    }

    /// Starts a compaction when the log has grown past its threshold: the
    /// apply thread first makes the state durable (the entries dropped
    /// must not be needed by this node's own restart).
    fn maybe_ask_sync(&mut self) {
        if self.sync_asked || self.raw.store().bytes() < self.compact_bytes {
            return;
        }
        if self.apply.send(ToApply::Sync).is_ok() {
            self.sync_asked = true;
        }
    }

    /// Drops the log up to `durable`, the state machine's durable applied
    /// index; on the leader not past what a follower still needs, unless
    /// the log holds four times the threshold (that follower will get a
    /// snapshot).
    fn compact(&mut self, durable: u64) -> Result<()> {
        let raft = &self.raw.raft;
        let mut to = durable;
        if raft.state == StateRole::Leader {
            let lagging = raft
                .prs()
                .iter()
                .filter(|(&id, _)| id != raft.id)
                .map(|(_, progress)| progress.matched)
                .min();
            if let Some(matched) = lagging {
                if raft.raft_log.store.bytes() < self.compact_bytes.saturating_mul(4) {
                    to = to.min(matched);
                }
            }
        }
        let started = Instant::now();
        // The next file follows the policy of now (it may have changed
        // since the log was opened).
        self.raw.mut_store().synced = (self.log_sync)() != LogSync::Never;
        if self.raw.mut_store().compact(to)? {
            log::info!(
                "raft: node {} compacted its log up to index {to} in {:?}",
                self.raw.raft.id,
                started.elapsed()
            );
        }
        Ok(())
    }

    fn known_leader(&self) -> Option<u64> {
        Some(self.raw.raft.leader_id).filter(|&id| id != 0)
    }

    /// One ReadIndex request for every read that arrived since the last.
    fn issue_reads(&mut self) {
        if self.reads_waiting.is_empty() {
            return;
        }
        self.read_counter += 1;
        let context = self.read_counter.to_le_bytes().to_vec();
        self.raw.read_index(context.clone());
        self.reads_in_flight
            .insert(context, std::mem::take(&mut self.reads_waiting));
    }

    /// Hands messages to the bus, counting the appends among them.
    fn send(&mut self, messages: Vec<Message>) {
        for message in &messages {
            if message.get_msg_type() == MessageType::MsgAppend && !message.entries.is_empty() {
                self.appends_sent += 1;
                self.entries_sent += message.entries.len() as u64;
            }
        }
        self.bus.send(messages);
    }

    fn handle_ready(&mut self) -> Result<()> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();
        if let Some(soft) = ready.ss() {
            self.role_changed(soft.leader_id, soft.raft_state);
        }
        let messages = ready.take_messages();
        let snapshots_sent = snapshot_targets(&messages);
        self.send(messages);
        if !ready.snapshot().is_empty() {
            // The leader's state: durable in the snapshot file before the
            // log forgets the entries it replaces.
            let snapshot = ready.snapshot();
            let metadata = snapshot.get_metadata();
            self.snapshot_file
                .write(metadata.index, metadata.term, &snapshot.data)?;
            self.raw.mut_store().apply_snapshot(metadata)?;
            let conf = metadata.get_conf_state().clone();
            if !no_members(&conf) {
                self.awaiting_snapshot.store(false, Ordering::Release);
            }
            let ids = member_ids(&conf);
            for (&id, &bus) in &self.addresses {
                if ids.contains(&id) {
                    self.bus.add_peer(id, bus)?;
                } else {
                    self.bus.remove_peer(id);
                }
            }
            let me = self.raw.raft.id;
            self.addresses.retain(|id, _| ids.contains(id) || *id == me);
            self.members_changed(&conf)?;
            let snapshot = ready.snapshot();
            let metadata = snapshot.get_metadata();
            log::info!(
                "raft: installing a snapshot at index {} ({} bytes)",
                metadata.index,
                snapshot.data.len()
            );
            let _ = self.apply.send(ToApply::Snapshot {
                index: metadata.index,
                data: snapshot.data.clone(),
            });
        }
        let committed = ready.take_committed_entries();
        self.hand_to_apply(committed)?;
        let store = self.raw.mut_store();
        store.append(ready.entries())?;
        if let Some(hs) = ready.hs() {
            store.set_hard_state(hs.clone());
        }
        let records = (self.log_sync)().due(self.records_synced.elapsed());
        store.sync(records)?;
        if records {
            self.records_synced = Instant::now();
        }
        let persisted = ready.take_persisted_messages();
        let mut snapshots_sent = snapshots_sent;
        snapshots_sent.extend(snapshot_targets(&persisted));
        self.send(persisted);
        // Handed to the bus: raft-rs probes the follower again, which
        // either holds the snapshot by then or gets another.
        for to in snapshots_sent {
            self.raw.report_snapshot(to, SnapshotStatus::Finish);
        }
        for read in ready.take_read_states() {
            if let Some(replies) = self.reads_in_flight.remove(&read.request_ctx) {
                for reply in replies {
                    let _ = reply.send(Ok(read.index));
                }
            }
        }
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().set_commit(commit);
        }
        self.send(light.take_messages());
        let committed = light.take_committed_entries();
        self.hand_to_apply(committed)?;
        self.raw.advance_apply();
        self.publish_status();
        Ok(())
    }

    fn role_changed(&mut self, leader: u64, role: StateRole) {
        let was_leader = self.is_leader.load(Ordering::Relaxed);
        let leads = role == StateRole::Leader;
        self.leader.store(leader, Ordering::Release);
        if leader != 0 {
            self.last_leader.store(leader, Ordering::Release);
        }
        self.is_leader.store(leads, Ordering::Release);
        if leads && !was_leader {
            for peer in self.want_snapshot.clone() {
                self.request_snapshot_for(peer);
            }
        }
        if was_leader && !leads {
            self.stepped_down.notify_waiters();
            // Entries proposed here may still commit under the next
            // leader, or be replaced: their clients cannot be told which.
            for (_, (_, reply)) in self.pending.drain() {
                let _ = reply.send(Err(Refused::Unknown));
            }
            for (_, replies) in self.reads_in_flight.drain() {
                for reply in replies {
                    let _ = reply.send(Err(Refused::NotLeader(Some(leader).filter(|&l| l != 0))));
                }
            }
        }
        log::info!(
            "raft: node {} is now {:?} (leader {leader}, term {})",
            self.raw.raft.id,
            role,
            self.raw.raft.term
        );
    }

    fn hand_to_apply(&mut self, entries: Vec<Entry>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut batch = Vec::with_capacity(entries.len());
        for entry in entries {
            let reply = match self.pending.remove(&entry.index) {
                Some((term, sender)) if term == entry.term => Some(Reply {
                    index: entry.index,
                    sender,
                }),
                Some((_, reply)) => {
                    // Another leader's entry took our proposal's index.
                    let _ = reply.send(Err(Refused::Unknown));
                    None
                }
                None => None,
            };
            let (data, reply) = match entry.get_entry_type() {
                EntryType::EntryNormal => (entry.data, reply),
                EntryType::EntryConfChange => {
                    self.apply_conf_change(&entry)?;
                    if let Some(reply) = reply {
                        reply.send(Vec::new());
                    }
                    (Bytes::new(), None)
                }
                EntryType::EntryConfChangeV2 => {
                    // Never proposed here (one change at a time, V1).
                    log::warn!(
                        "raft: ignoring a joint configuration change at {}",
                        entry.index
                    );
                    (Bytes::new(), None)
                }
            };
            batch.push(Committed {
                index: entry.index,
                term: entry.term,
                data,
                reply,
            });
        }
        let _ = self.apply.send(ToApply::Entries(batch));
        Ok(())
    }

    fn publish_status(&self) {
        let raft = &self.raw.raft;
        let mut status = self.status.lock();
        status.role = match raft.state {
            StateRole::Leader => "leader",
            StateRole::Follower => "follower",
            StateRole::Candidate => "candidate",
            StateRole::PreCandidate => "pre-candidate",
        };
        status.leader = raft.leader_id;
        status.term = raft.term;
        status.commit = raft.raft_log.committed;
        status.last_index = raft.raft_log.last_index();
        status.log_bytes = raft.raft_log.store.bytes();
        status.compacted = raft.raft_log.store.compacted_to();
        status.log_syncs = raft.raft_log.store.records_syncs();
        status.appends_sent = self.appends_sent;
        status.entries_sent = self.entries_sent;
        status.learners = raft.prs().conf().learners().iter().copied().collect();
        status.learners.sort_unstable();
        status.progress.clear();
        if raft.state == StateRole::Leader {
            for (&id, progress) in raft.prs().iter() {
                if id != raft.id {
                    status.progress.push((id, progress.matched));
                }
            }
            status.progress.sort_unstable();
        }
    }
}

/// Voters and learners, in id order.
fn member_ids(conf: &ConfState) -> Vec<u64> {
    let mut ids: Vec<u64> = conf.voters.iter().chain(&conf.learners).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// A configuration naming no one: a joining node's before its snapshot.
fn no_members(conf: &ConfState) -> bool {
    conf.voters.is_empty() && conf.learners.is_empty()
}

/// The peers a batch of messages sends snapshots to.
fn snapshot_targets(messages: &[Message]) -> Vec<u64> {
    messages
        .iter()
        .filter(|m| m.get_msg_type() == MessageType::MsgSnapshot)
        .map(|m| m.to)
        .collect()
}

/// The apply thread: committed entries and snapshots in log order, and
/// snapshots built for followers between batches.
struct ApplyLoop {
    machine: Box<dyn StateMachine>,
    status: Arc<Mutex<Status>>,
    applied: watch::Sender<u64>,
    /// The last index applied.
    last: u64,
    snapshots: Arc<Snapshots>,
    snapshot_file: SnapshotFile,
    /// Where durable points go (to the Raft loop, for compaction); told
    /// `Stop` when this loop ends, a panic included.
    durable: Sender<Event>,
    /// A snapshot was asked for, at this index or later.
    build_at: Option<u64>,
}

impl Drop for Replica {
    /// The server stopped: so does the Raft loop (the bus's threads hold
    /// senders of its channel too, so it would not see a disconnection).
    fn drop(&mut self) {
        let _ = self.inputs.send(Event::Stop);
    }
}

impl Drop for ApplyLoop {
    /// The Raft loop must not go on acknowledging what no thread applies.
    fn drop(&mut self) {
        let _ = self.durable.send(Event::Stop);
    }
}

impl ApplyLoop {
    fn run(mut self, work: Receiver<ToApply>, snapshot_requests: Receiver<u64>) {
        loop {
            select! {
                recv(work) -> item => match item {
                    Ok(item) => self.handle(item, &work),
                    Err(_) => return,
                },
                recv(snapshot_requests) -> request => match request {
                    Ok(floor) => {
                        self.build_at = Some(floor);
                        self.build_when_due();
                    }
                    Err(_) => return,
                },
            }
        }
    }

    fn handle(&mut self, item: ToApply, work: &Receiver<ToApply>) {
        match item {
            ToApply::Entries(mut batch) => {
                // Whatever else is committed goes in the same batch.
                let mut next = None;
                while let Ok(more) = work.try_recv() {
                    match more {
                        ToApply::Entries(more) => batch.extend(more),
                        other => {
                            next = Some(other);
                            break;
                        }
                    }
                }
                if let Some(last) = batch.last().map(|c| c.index) {
                    self.machine.apply(batch);
                    self.published(last);
                    self.build_when_due();
                }
                if let Some(next) = next {
                    self.handle(next, work);
                }
            }
            ToApply::Snapshot { index, data } => {
                if let Err(e) = self.machine.restore(index, &data) {
                    // The snapshot file stays: the restart loads it again.
                    stop(&format!(
                        "loading the leader's snapshot at {index} failed: {e}; stopping"
                    ));
                }
                if let Err(e) = self.snapshot_file.remove_if_at(index) {
                    log::warn!("raft: {e}");
                }
                self.status.lock().snapshots_installed += 1;
                self.published(index);
            }
            ToApply::Sync => match self.machine.sync() {
                Ok(()) => {
                    let _ = self.durable.send(Event::Durable(self.last));
                }
                Err(e) => {
                    stop(&format!(
                        "making applied entries durable failed: {e}; stopping"
                    ));
                }
            },
        }
    }

    fn published(&mut self, index: u64) {
        self.last = index;
        self.status.lock().applied = index;
        self.applied.send_replace(index);
    }

    /// Builds the snapshot asked for once the entries up to its floor are
    /// applied (a build before would be too old, and wasted).
    fn build_when_due(&mut self) {
        if self.build_at.is_some_and(|floor| self.last >= floor) {
            self.build_at = None;
            self.build_snapshot();
        }
    }

    fn build_snapshot(&mut self) {
        let started = Instant::now();
        match self.machine.snapshot() {
            Ok(data) => {
                log::info!(
                    "raft: built a snapshot at index {} ({} bytes) in {:?}",
                    self.last,
                    data.len(),
                    started.elapsed()
                );
                self.status.lock().snapshots_built += 1;
                self.snapshots.publish(self.last, Bytes::from(data));
            }
            Err(e) => {
                log::error!("raft: cannot build a snapshot: {e}");
                self.snapshots.publish_failed();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Restored = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

    /// Records the snapshots it is asked to restore.
    struct Restores(Restored);

    impl StateMachine for Restores {
        fn apply(&mut self, _entries: Vec<Committed>) {}

        fn snapshot(&mut self) -> std::result::Result<Vec<u8>, String> {
            Ok(Vec::new())
        }

        fn restore(&mut self, index: u64, data: &[u8]) -> std::result::Result<(), String> {
            self.0.lock().push((index, data.to_vec()));
            Ok(())
        }

        fn sync(&mut self) -> std::result::Result<(), String> {
            Ok(())
        }
    }

    fn one_node(dir: &std::path::Path, applied: u64) -> NodeConfig {
        let bus = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut config = NodeConfig::new(
            1,
            vec![Peer { id: 1, bus }],
            dir.to_path_buf(),
            "127.0.0.1:1".into(),
        );
        config.applied = applied;
        config
    }

    #[test]
    fn a_snapshot_not_yet_loaded_is_loaded_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let raft = dir.path().join("raft");
        // The log was written, then a leader's snapshot at 7 was kept, and
        // the node crashed before the log's reset and the load.
        drop(RaftLog::open(&raft, &[1]).unwrap());
        SnapshotFile::new(&raft).write(7, 2, b"state").unwrap();
        let restores = Arc::new(Mutex::new(Vec::new()));
        let replica =
            Replica::start(one_node(&raft, 3), Box::new(Restores(restores.clone()))).unwrap();
        assert_eq!(*restores.lock(), vec![(7, b"state".to_vec())]);
        assert_eq!(replica.applied(), 7);
        assert!(!raft.join("snapshot").exists());
        drop(replica);
        std::thread::sleep(Duration::from_millis(100));
        let log = RaftLog::open(&raft, &[1]).unwrap();
        assert_eq!(log.compacted_to(), 7);
        assert!(log.hard_state().commit >= 7);
    }

    #[test]
    fn records_are_synced_as_the_durability_says() {
        let (now, later) = (Duration::ZERO, Duration::from_millis(1500));
        assert!(LogSync::EveryRound.due(now));
        assert!(!LogSync::EverySecond.due(now) && LogSync::EverySecond.due(later));
        assert!(!LogSync::Never.due(later));
    }

    #[test]
    fn a_state_machine_ahead_of_its_log_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let raft = dir.path().join("raft");
        drop(RaftLog::open(&raft, &[1]).unwrap());
        let restores = Arc::new(Mutex::new(Vec::new()));
        let error = Replica::start(one_node(&raft, 9), Box::new(Restores(restores)))
            .err()
            .expect("refused");
        assert!(
            error.to_string().contains("empty the node's directory"),
            "{error}"
        );
    }

    #[test]
    fn a_state_machine_behind_the_compacted_log_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let raft = dir.path().join("raft");
        let mut log = RaftLog::open(&raft, &[1]).unwrap();
        let mut metadata = raft::prelude::SnapshotMetadata {
            index: 20,
            term: 1,
            ..Default::default()
        };
        metadata.set_conf_state(log.conf_state().clone());
        log.apply_snapshot(&metadata).unwrap();
        drop(log);
        let restores = Arc::new(Mutex::new(Vec::new()));
        let error = Replica::start(one_node(&raft, 5), Box::new(Restores(restores)))
            .err()
            .expect("refused");
        assert!(error.to_string().contains("to rejoin the group"), "{error}");
    }
}
