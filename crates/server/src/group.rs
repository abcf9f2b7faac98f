//! The server as a member of a Raft group (issue 26): `node-id` and `peers`
//! make it one; without them nothing here runs.
//!
//! Writes are ordered by Raft before they run (state machine replication):
//! on the leader a write command is not executed where it arrives but
//! queued in its session (`Pending`); the connection proposes everything
//! queued as one entry (the client's pipelined writes, each with its
//! database, the leader's clock and the client's protocol), and every node
//! applies committed entries in log order on its apply thread
//! ([`Applier`]): all entries of a batch in one atomic whole-keyspace
//! transaction with the applied index, so a crash leaves each entry applied
//! exactly once. The client's replies are the ones the leader's apply
//! wrote, so it hears of its write only when a majority holds it as
//! durably as the node's durability promises.
//!
//! Reads on the leader wait for a Raft read barrier (ReadIndex), one per
//! batch of commands read from the socket, so a deposed leader cannot
//! answer from a stale keyspace. A follower answers writes with `MOVED`
//! (to the leader's client address, which the bus told it) and reads too,
//! unless the connection said READONLY (stale reads, opt-in).
//!
//! Every node applies an entry alike: commands see the entry's time (the
//! leader's clock when it proposed), and the randomness of writes (SPOP,
//! scripts' `math.random`) comes from a generator seeded by the entry's
//! index (`random`).
//!
//! Not yet (see issue 26's notes): WATCH (refused), blocking commands
//! (they apply as inside MULTI: no wait, a nil reply at once), expiry
//! proposed by the leader (active expiry and expiry on read are off on
//! every node, `KeyspaceOptions::expire_on_read`: an expired key is hidden
//! by reads and removed by the next write that meets it, at the entry's
//! time), keyspace notifications and client-side caching's
//! invalidations for replicated writes, membership changes, snapshots and
//! log compaction.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bytes::Buf;
use engram_replication::{Committed, LogSync, NodeConfig, Refused, Replica, StateMachine};

use crate::acl::User;
use crate::commands::{self, lookup, CommandSpec, READONLY, WRITE};
use crate::keyspace::now_ms;
use crate::resp::{Args, OwnedArgs, ReplyWriter};
use crate::session::{ReplyMode, Session};
use crate::shared::Shared;

/// A command (or a whole MULTI/EXEC) waiting in its session to be
/// proposed, or a reply produced meanwhile that must follow theirs.
pub enum Pending {
    /// `silent`: CLIENT REPLY OFF or SKIP dropped its reply. `wait`: what
    /// a blocking command waits for when its entry finds nothing.
    Command {
        db: usize,
        args: OwnedArgs,
        silent: bool,
        wait: Option<Wait>,
    },
    Exec {
        db: usize,
        queue: Vec<OwnedArgs>,
        silent: bool,
    },
    Local(Vec<u8>),
}

impl Pending {
    /// A blocking command (BLPOP, XREADGROUP ... BLOCK ...): proposed
    /// alone, so that if its entry finds nothing the connection can wait
    /// and propose it again (`Blocked::proposed`).
    pub fn may_block(&self) -> bool {
        matches!(self, Pending::Command { wait: Some(_), .. })
    }
}

/// The keys a blocking command waits on, and for how long (None: for
/// ever).
pub struct Wait {
    keys: Vec<Box<[u8]>>,
    timeout: Option<std::time::Duration>,
}

/// What `args` would wait for on a single node, when it finds nothing:
/// None for a command that does not block, or whose arguments are bad
/// (its entry's apply replies the error).
fn blocking_wait(name: &str, args: &Args) -> Option<Wait> {
    use crate::commands::parse_timeout;
    let n = args.len();
    let keys = |range: std::ops::Range<usize>| -> Vec<Box<[u8]>> {
        range.map(|i| Box::from(args.get(i))).collect()
    };
    let (keys, timeout) = match name {
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" if n >= 3 => {
            (keys(1..n - 1), parse_timeout(args.get(n - 1)).ok()?)
        }
        "brpoplpush" | "blmove" if n >= 4 => (keys(1..2), parse_timeout(args.get(n - 1)).ok()?),
        "blmpop" | "bzmpop" if n >= 5 => {
            let numkeys: usize = std::str::from_utf8(args.get(2)).ok()?.parse().ok()?;
            if numkeys == 0 || 3 + numkeys > n {
                return None;
            }
            (keys(3..3 + numkeys), parse_timeout(args.get(1)).ok()?)
        }
        "xreadgroup" => {
            let mut block = None;
            let mut i = 4;
            while i < n {
                let option = args.get(i).to_ascii_lowercase();
                match &option[..] {
                    b"streams" => break,
                    b"block" if i + 1 < n => {
                        let ms: u64 = std::str::from_utf8(args.get(i + 1)).ok()?.parse().ok()?;
                        block = Some((ms > 0).then(|| std::time::Duration::from_millis(ms)));
                        i += 2;
                    }
                    b"count" => i += 2,
                    _ => i += 1,
                }
            }
            let streams = n.checked_sub(i + 1)?;
            if streams == 0 || streams % 2 != 0 {
                return None;
            }
            (keys(i + 1..i + 1 + streams / 2), block?)
        }
        _ => return None,
    };
    Some(Wait { keys, timeout })
}

/// Starts this node's Raft member when the configuration names a group.
pub fn start(shared: &Arc<Shared>, client: SocketAddr) -> Result<(), String> {
    let config = &shared.config;
    let (id, peers) = match (config.node_id, config.peers.clone()) {
        (None, None) => return Ok(()),
        (Some(id), Some(peers)) => (id, peers),
        _ => return Err("node-id and peers go together: give both or neither".into()),
    };
    let (applied, keys) = {
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().expect("the keyspace is open at start");
        let keys: u64 = (0..keyspace.databases())
            .map(|db| keyspace.dbsize(db))
            .sum();
        (keyspace.applied_index().map_err(|e| e.to_string())?, keys)
    };
    // Keys written as a single node are in no Raft log: the other members
    // would never have them, and this node's state would differ from
    // theirs for good.
    if applied == 0 && keys > 0 && !config.dir.join("raft").join("log").exists() {
        return Err(format!(
            "{} holds {keys} keys written outside a group: a group member starts with an \
             empty directory. Start the group empty, then load the keys through its leader \
             (MIGRATE or RESTORE from this directory's server, or redis-cli --pipe)",
            config.dir.display()
        ));
    }
    // The address peers hand to clients in MOVED: the bound one, or
    // loopback when bound to every interface.
    let host = if client.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        client.ip().to_string()
    };
    let mut node = NodeConfig::new(
        id,
        peers,
        config.dir.join("raft"),
        format!("{host}:{}", client.port()),
    );
    node.applied = applied;
    node.tick = std::time::Duration::from_millis(config.raft_tick_ms);
    node.election_ticks = config.raft_election_ticks;
    node.compact_bytes = config.raft_compact_bytes;
    node.join = config.join;
    // The log's entries follow the node's durability (CONFIG SET
    // appendfsync included): a write is acknowledged once a majority holds
    // it as durably as that promises.
    let durability_of = Arc::downgrade(shared);
    node.log_sync = Box::new(move || {
        let durability = durability_of.upgrade().and_then(|shared| {
            let guard = shared.keyspace.guard();
            guard
                .as_ref()
                .map(|keyspace| keyspace.commit().durability())
        });
        match durability {
            Some(crate::keyspace::Durability::Process) => LogSync::Never,
            Some(crate::keyspace::Durability::Everysec) => LogSync::EverySecond,
            _ => LogSync::EveryRound,
        }
    });
    let applier = Applier::new(shared);
    let replica = Replica::start(node, Box::new(applier)).map_err(|e| e.to_string())?;
    // Expiry must be the same on every node: not the local clock's (reads
    // do not expire keys either: `serve::keyspace_options`).
    shared.active_expire.store(false, Ordering::Relaxed);
    log::info!(
        "node {id} of a Raft group of {}: bus on {}, applied index {applied}",
        replica.members().len(),
        replica.bus_addr
    );
    shared
        .group
        .set(replica)
        .map_err(|_| "the group was started twice".to_string())
}

/// How often the leader looks for expired keys, and how many it proposes
/// to delete at most each time (Redis's active expiry runs 10 times a
/// second too).
const EXPIRE_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);
const EXPIRE_BATCH: usize = 512;

/// A group's active expiry: members run no expiry cycle (their clocks
/// differ, and a key deleted on one member only would split the state);
/// the leader looks for due keys and proposes `ENGRAM.EXPIRED` for them,
/// which every member applies at the entry's time (Redis's master sends
/// its replicas a DEL for each key it expires).
pub async fn expire(shared: Arc<Shared>) {
    let Some(replica) = shared.group.get() else {
        return;
    };
    let mut tick = tokio::time::interval(EXPIRE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if shared.is_shutting_down() {
            return;
        }
        // CLIENT PAUSE WRITE holds expiry, as on a single node.
        if !replica.is_leader()
            || shared.keyspace.is_reloading()
            || shared.pause.holds(true).is_some()
        {
            continue;
        }
        let due = match shared.keyspace.try_guard().as_ref() {
            Some(keyspace) => keyspace.due_keys(now_ms(), EXPIRE_BATCH),
            None => continue,
        };
        if due.is_empty() {
            continue;
        }
        let mut by_db: std::collections::BTreeMap<usize, Vec<Vec<u8>>> = Default::default();
        for (db, key) in due {
            by_db.entry(db).or_default().push(key);
        }
        let pending: Vec<Pending> = by_db
            .into_iter()
            .map(|(db, keys)| {
                let mut parts: Vec<&[u8]> = vec![b"engram.expired"];
                parts.extend(keys.iter().map(|k| k.as_slice()));
                Pending::Command {
                    db,
                    args: OwnedArgs::from_slices(&parts),
                    silent: true,
                    wait: None,
                }
            })
            .collect();
        // Waited for, so the next look does not propose the same keys.
        if let Err(refused) = replica
            .propose(encode_entry(now_ms(), false, None, &pending))
            .await
        {
            log::debug!(
                "expiry of due keys not proposed: {}",
                refusal(replica, &refused)
            );
        }
    }
}

/// What a command does on a replicated node.
pub enum Route {
    /// Runs here, as on a single node.
    Local,
    /// Queued to be proposed (the leader's writes).
    Propose,
    /// Refused with this error (a follower's writes and reads).
    Refuse(String),
}

/// Whether a command changes data, so it goes through the log.
pub fn is_write(spec: &CommandSpec, args: &Args) -> bool {
    if spec.is(WRITE) || commands::writes_by_subcommand(spec, args) {
        return true;
    }
    let sub = || {
        if args.len() > 1 {
            args.get(1).to_ascii_lowercase()
        } else {
            Vec::new()
        }
    };
    match spec.name {
        "eval" | "evalsha" | "fcall" | "exec" => true,
        // Through the log, so every member's subscribers get the message
        // (Redis Cluster sends a PUBLISH to every node over its bus).
        "publish" | "spublish" => true,
        "script" => matches!(&sub()[..], b"load" | b"flush"),
        "function" => matches!(&sub()[..], b"load" | b"delete" | b"flush" | b"restore"),
        _ => false,
    }
}

/// Whether the command reads data (and so needs the read barrier on the
/// leader, or READONLY on a follower).
fn is_read(spec: &CommandSpec) -> bool {
    spec.is(READONLY)
}

/// Whether the next command will be queued for proposal rather than run
/// (the connection resolves what is queued before anything else runs).
pub fn will_propose(session: &Session, args: &Args) -> bool {
    let Some((_, spec)) = lookup(args.get(0)) else {
        return false;
    };
    if session.in_multi() {
        return spec.name == "exec";
    }
    is_write(spec, args)
}

pub fn route(replica: &Replica, session: &Session, spec: &CommandSpec, args: &Args) -> Route {
    if spec.name == "watch" {
        // EXEC would have to check the watched keys where it is applied.
        return Route::Refuse("ERR WATCH is not supported on a replicated node yet".into());
    }
    let write = is_write(spec, args);
    if !write && !is_read(spec) {
        return Route::Local;
    }
    if replica.is_leader() {
        return if write {
            Route::Propose
        } else {
            // Only after this batch's barrier held: a node that became
            // leader after the batch's check may not have applied
            // everything committed yet.
            match session.read_fence {
                Some(true) => Route::Local,
                _ => Route::Refuse(not_leader(replica, spec, args)),
            }
        };
    }
    if replica.is_removed() {
        // Nothing reaches a removed node: even a stale read would be
        // staler every second. Sent to the leader it knew, if any.
        return Route::Refuse(match replica.leader() {
            0 => "CLUSTERDOWN this node was removed from its group and no longer follows it; \
                  empty its directory and start it with --join to add it again"
                .into(),
            _ => not_leader(replica, spec, args),
        });
    }
    if !write && session.readonly {
        return Route::Local;
    }
    Route::Refuse(not_leader(replica, spec, args))
}

/// The refusal of a command that only the leader may serve: `MOVED` to it
/// for a command with a key (what cluster clients follow), Redis's
/// replica errors otherwise.
fn not_leader(replica: &Replica, spec: &CommandSpec, args: &Args) -> String {
    let leader = replica.leader();
    let address = (leader != 0).then(|| replica.client_addr(leader)).flatten();
    let key = match spec.name {
        // Redirected by the channel's slot, as a cluster client expects.
        "publish" | "spublish" if args.len() > 1 => Some(args.get(1).to_vec()),
        _ => spec.key_args(args).first().map(|k| k.to_vec()),
    };
    match (key, address) {
        (Some(key), Some(address)) => format!("MOVED {} {address}", key_slot(&key)),
        (_, None) => "CLUSTERDOWN The cluster is down: no leader is known".into(),
        (None, Some(_)) if is_write(spec, args) => {
            "READONLY You can't write against a read only replica.".into()
        }
        (None, Some(address)) => format!("MOVED 0 {address}"),
    }
}

/// Redis Cluster's hash slot of a key: CRC16 (XMODEM) of the key, or of
/// its hash tag (the part between the first `{` and the next `}`, if not
/// empty), modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);
    CRC16.checksum(tagged.unwrap_or(key)) % 16384
}

/// MONITOR's lines for a write the leader proposes, with the client's
/// address, as a single node would show it: a transaction's queued
/// commands then EXEC, a script's call (its own calls follow at apply),
/// any other command. The apply of the entry here feeds nothing more
/// (`Session::monitor_fed`); a follower's apply feeds what it runs.
pub fn feed_monitors(shared: &Shared, session: &Session, spec: &CommandSpec, args: Args) {
    match spec.name {
        "exec" => {
            for queued in session.multi.iter().flatten() {
                crate::monitor::feed(shared, session, queued.args());
            }
            crate::monitor::feed(shared, session, args);
        }
        "eval" | "evalsha" | "fcall" => crate::monitor::feed_script_command(shared, session, args),
        _ => crate::monitor::feed(shared, session, args),
    }
}

/// Queues a write in its session (the leader's path in `execute`), with
/// whether CLIENT REPLY silences it (as `execute` would after running it).
pub fn queue(session: &mut Session, spec: &CommandSpec, args: Args) {
    let silent = match session.reply {
        ReplyMode::Off => true,
        ReplyMode::Skip => {
            session.reply = ReplyMode::On;
            true
        }
        ReplyMode::On | ReplyMode::SkipNext => false,
    };
    let pending = if spec.name == "exec" {
        let queue = session.multi.take().unwrap_or_default();
        session.end_multi();
        Pending::Exec {
            db: session.db,
            queue,
            silent,
        }
    } else {
        Pending::Command {
            db: session.db,
            args: args.to_owned(),
            silent,
            wait: blocking_wait(spec.name, &args),
        }
    };
    session.proposals.push(pending);
}

/// Proposes what the session queued, as one entry, and writes the replies
/// (with any local ones in between) in order.
pub async fn resolve(shared: &Shared, session: &mut Session, out: &mut ReplyWriter) {
    let pending = std::mem::take(&mut session.proposals);
    let Some(replica) = shared.group.get() else {
        return;
    };
    if pending.iter().all(|p| matches!(p, Pending::Local(_))) {
        for p in pending {
            if let Pending::Local(bytes) = p {
                out.buf.extend_from_slice(&bytes);
            }
        }
        return;
    }
    // The caller's rules, when it has any: the calls a script makes are
    // checked at apply, on every member, against them (see `Applier`).
    let caller = match session.user.rules().unrestricted {
        true => None,
        false => Some(session.user.line()),
    };
    let entry = encode_entry(now_ms(), out.is_resp3(), caller.as_deref(), &pending);
    let result = replica.propose(entry).await;
    if let Ok(applied) = &result {
        // What WAIT waits for.
        session.last_write_index = applied.index;
    }
    let mut replies = match &result {
        Ok(applied) => decode_replies(&applied.reply),
        Err(_) => Vec::new(),
    }
    .into_iter();
    for p in pending {
        match p {
            Pending::Local(bytes) => out.buf.extend_from_slice(&bytes),
            Pending::Command {
                db,
                args,
                wait: Some(wait),
                ..
            } if result.is_ok() && replies.as_slice().first() == Some(&&found_nothing(out)[..]) => {
                // Applied and found nothing: the connection waits for a
                // write to its keys and proposes it again (as a single
                // node runs it again), replying nothing now.
                replies.next();
                session.blocked = Some(crate::session::Blocked {
                    db,
                    keys: wait.keys,
                    deadline: wait
                        .timeout
                        .and_then(|t| std::time::Instant::now().checked_add(t)),
                    command: args,
                    on_timeout: ReplyWriter::null_array,
                    proposed: true,
                });
            }
            Pending::Command { silent, .. } | Pending::Exec { silent, .. } => {
                match (&result, replies.next()) {
                    _ if silent => {}
                    (Ok(_), Some(reply)) => out.buf.extend_from_slice(reply),
                    (Ok(_), None) => {
                        commands::reply_error(shared, out, "ERR replication: a reply went missing")
                    }
                    (Err(refused), _) => {
                        commands::reply_error(shared, out, &refusal(replica, refused))
                    }
                }
            }
        }
    }
    session.wrote = true;
}

fn refusal(replica: &Replica, refused: &Refused) -> String {
    match refused {
        Refused::NotLeader(Some(leader)) => match replica.client_addr(*leader) {
            Some(address) => format!("MOVED 0 {address}"),
            None => "CLUSTERDOWN The cluster is down: the leader's address is unknown".into(),
        },
        Refused::NotLeader(None) => "CLUSTERDOWN The cluster is down: no leader is known".into(),
        Refused::Unknown => "TRYAGAIN leadership changed before the write was confirmed: it may \
                             or may not have been applied"
            .into(),
        Refused::Stopped => "ERR the server is shutting down".into(),
        Refused::Invalid(why) => format!("ERR {why}"),
    }
}

/// ENGRAM.GROUP ADD/REMOVE: proposes the change and waits until it is
/// applied here; the error text otherwise.
pub async fn change_members(
    shared: &Shared,
    change: engram_replication::Change,
) -> Result<(), String> {
    let replica = shared
        .group
        .get()
        .ok_or("ERR this server is not a member of a replicated group")?;
    replica
        .change_members(change)
        .await
        .map(|_| ())
        .map_err(|refused| refusal(replica, &refused))
}

/// The read barrier before a batch's reads on the leader; its outcome is
/// what `route` sees for the batch's reads.
pub async fn fence(shared: &Shared, session: &mut Session) {
    let Some(replica) = shared.group.get() else {
        return;
    };
    if session.read_fence.is_some() {
        return;
    }
    // Off the leader there is no barrier to take (a READONLY follower
    // reads without one); should this node lead by the time the read runs,
    // the read is refused rather than served unfenced.
    let held = replica.is_leader() && replica.read_barrier().await.is_ok();
    session.read_fence = Some(held);
}

/// WAIT's wait (the connection runs it once the command asked): until
/// `replicas` followers hold this client's last write durably in their
/// logs, or `timeout_ms` passed (0: no limit); how many do. A single node
/// has no replicas: it answers 0, at once if none were asked for.
pub async fn wait_for_replicas(
    shared: &Shared,
    session: &Session,
    replicas: i64,
    timeout_ms: u64,
) -> i64 {
    let deadline = (timeout_ms > 0)
        .then(|| std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms));
    loop {
        let holding = shared
            .group
            .get()
            .map_or(0, |g| g.followers_holding(session.last_write_index))
            as i64;
        if holding >= replicas
            || deadline.is_some_and(|d| std::time::Instant::now() >= d)
            || session.info.killed.load(Ordering::Acquire)
        {
            return holding;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// Whether a command needs the read barrier first.
pub fn needs_fence(args: &Args) -> bool {
    lookup(args.get(0)).is_some_and(|(_, spec)| is_read(spec))
}

/// The reply to a client blocked on the leader when the node stops
/// leading (Redis Cluster's redirect of blocked clients): MOVED to the new
/// leader when it is known, else Redis's UNBLOCKED for a role change.
pub fn stepped_down(shared: &Shared, blocked: &crate::session::Blocked) -> String {
    let Some(replica) = shared.group.get() else {
        return UNBLOCKED.into();
    };
    let args = blocked.command.args();
    match lookup(args.get(0)) {
        Some((_, spec)) if replica.leader() != 0 && replica.leader() != replica.id() => {
            not_leader(replica, spec, &args)
        }
        _ => UNBLOCKED.into(),
    }
}

const UNBLOCKED: &str =
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";

/// What a blocking command's apply replies when it finds nothing (it runs
/// as in MULTI there): the null array of `out`'s protocol.
fn found_nothing(out: &ReplyWriter) -> Vec<u8> {
    let mut nothing = ReplyWriter::new();
    nothing.set_resp3(out.is_resp3());
    nothing.null_array();
    nothing.buf.to_vec()
}

/// A blocked command's next try on the leader: proposed alone; its reply
/// goes to `out`, or, if it found nothing again, `session.blocked` is set
/// again (with a fresh deadline, which the caller replaces).
pub async fn retry_blocked(
    shared: &Shared,
    session: &mut Session,
    out: &mut ReplyWriter,
    blocked: &crate::session::Blocked,
) {
    session.proposals.push(Pending::Command {
        db: blocked.db,
        args: blocked.command.clone(),
        silent: false,
        wait: Some(Wait {
            keys: blocked.keys.clone(),
            timeout: None,
        }),
    });
    resolve(shared, session, out).await;
}

/// An item's tag: a MULTI/EXEC (its replies are one array).
const EXEC: u8 = 1;
/// In the entry's flags byte (beside RESP3's bit): the caller's ACL line
/// follows. Entries without it (every unrestricted caller's, and those
/// written before it existed) apply with every permission.
const CALLER: u8 = 2;

/// An entry: `[time_ms u64][flags u8]([caller len u32][caller])?[items
/// u32]`, then per item `[tag u8][db u8][commands u32]` and each command's
/// `[argc u32]([len u32][bytes])*`. Local replies are not in it.
fn encode_entry(time_ms: u64, resp3: bool, caller: Option<&str>, pending: &[Pending]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(256);
    entry.extend_from_slice(&time_ms.to_le_bytes());
    entry.push(resp3 as u8 | if caller.is_some() { CALLER } else { 0 });
    if let Some(line) = caller {
        entry.extend_from_slice(&(line.len() as u32).to_le_bytes());
        entry.extend_from_slice(line.as_bytes());
    }
    let items = pending
        .iter()
        .filter(|p| !matches!(p, Pending::Local(_)))
        .count();
    entry.extend_from_slice(&(items as u32).to_le_bytes());
    for p in pending {
        match p {
            Pending::Command { db, args, .. } => {
                entry.extend_from_slice(&[0, *db as u8]);
                entry.extend_from_slice(&1u32.to_le_bytes());
                encode_args(&mut entry, &args.args());
            }
            Pending::Exec { db, queue, .. } => {
                entry.extend_from_slice(&[EXEC, *db as u8]);
                entry.extend_from_slice(&(queue.len() as u32).to_le_bytes());
                for args in queue {
                    encode_args(&mut entry, &args.args());
                }
            }
            Pending::Local(_) => {}
        }
    }
    entry
}

fn encode_args(out: &mut Vec<u8>, args: &Args) {
    out.extend_from_slice(&(args.len() as u32).to_le_bytes());
    for arg in args.iter() {
        out.extend_from_slice(&(arg.len() as u32).to_le_bytes());
        out.extend_from_slice(arg);
    }
}

struct Entry {
    time_ms: u64,
    resp3: bool,
    /// The proposing client's user as an ACL file line, if restricted.
    caller: Option<String>,
    items: Vec<(usize, bool, Vec<OwnedArgs>)>,
}

/// The next `n` bytes of `r`, if it holds them.
fn take<'a>(r: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    (r.len() >= n).then(|| {
        let (head, rest) = r.split_at(n);
        *r = rest;
        head
    })
}

fn decode_entry(data: &[u8]) -> Option<Entry> {
    let mut r = data;
    let time_ms = r.try_get_u64_le().ok()?;
    let flags = r.try_get_u8().ok()?;
    let resp3 = flags & 1 != 0;
    let caller = match flags & CALLER {
        0 => None,
        _ => {
            let len = r.try_get_u32_le().ok()? as usize;
            Some(String::from_utf8(take(&mut r, len)?.to_vec()).ok()?)
        }
    };
    let n = r.try_get_u32_le().ok()? as usize;
    let mut items = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let tag = r.try_get_u8().ok()?;
        let db = r.try_get_u8().ok()?;
        let commands = r.try_get_u32_le().ok()? as usize;
        let mut list = Vec::with_capacity(commands.min(1024));
        for _ in 0..commands {
            let argc = r.try_get_u32_le().ok()? as usize;
            let mut parts: Vec<&[u8]> = Vec::with_capacity(argc.min(1024));
            for _ in 0..argc {
                let len = r.try_get_u32_le().ok()? as usize;
                parts.push(take(&mut r, len)?);
            }
            list.push(OwnedArgs::from_slices(&parts));
        }
        items.push((db as usize, tag == EXEC, list));
    }
    Some(Entry {
        time_ms,
        resp3,
        caller,
        items,
    })
}

fn decode_replies(bytes: &[u8]) -> Vec<&[u8]> {
    let mut r = bytes;
    let mut replies = Vec::new();
    while let Ok(len) = r.try_get_u32_le() {
        match take(&mut r, len as usize) {
            Some(reply) => replies.push(reply),
            None => break,
        }
    }
    replies
}

/// Applies committed entries to the keyspace: every entry of a batch in
/// one atomic transaction that excludes the keyspace (as a script runs),
/// with the applied index in the same batch.
///
/// Each entry runs as its caller: with every permission when the caller
/// had them, else as a user rebuilt from the rules the entry carries, so
/// a script's `redis.call`s are refused what its caller may not do, and
/// every member decides alike whatever users its own ACL holds (an
/// outcome that hung on a node's configuration would split the state).
pub struct Applier {
    shared: Weak<Shared>,
    session: Session,
    unrestricted: Arc<User>,
    /// Callers seen lately, by their line (parsed once, not per entry).
    callers: HashMap<String, Arc<User>>,
}

/// How many distinct callers `Applier` keeps parsed.
const CALLERS_KEPT: usize = 64;

impl Applier {
    fn new(shared: &Arc<Shared>) -> Applier {
        let info = shared
            .clients
            .detached("127.0.0.1:0".parse().expect("an address"));
        let unrestricted = User::unrestricted(b"default");
        Applier {
            shared: Arc::downgrade(shared),
            session: Session::new(info, unrestricted.clone(), true),
            unrestricted,
            callers: HashMap::new(),
        }
    }

    /// The user an entry runs as.
    fn caller(&mut self, line: Option<&str>) -> Arc<User> {
        let Some(line) = line else {
            return self.unrestricted.clone();
        };
        if let Some(user) = self.callers.get(line) {
            return user.clone();
        }
        if self.callers.len() >= CALLERS_KEPT {
            self.callers.clear();
        }
        // Channels are spelled out in the line, so the node's
        // `acl-pubsub-default` does not matter.
        let user = User::from_line(line, false).unwrap_or_else(|e| {
            // Written by a member's `User::line`: every member fails it
            // alike, and runs the entry allowed nothing.
            log::error!("a Raft entry's caller does not parse ({e}): its calls are refused");
            User::allowed_nothing(b"default")
        });
        self.callers.insert(line.to_string(), user.clone());
        user
    }
}

/// An apply transaction is committed once it holds this many writes (at
/// an entry's end), so its batch stays one engine record run.
const APPLY_CHUNK_WRITES: usize = 512;

impl StateMachine for Applier {
    fn apply(&mut self, entries: Vec<Committed>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().expect("guard() holds a keyspace");
        let mut txn = Some(keyspace.lock_all(true));
        let mut answers = Vec::new();
        // A FLUSHALL or FLUSHDB in the chunk: tracking clients hear of it
        // whole (as after a single node's flush), not key by key.
        let mut flushed = false;
        let total = entries.len();
        for (at, committed) in entries.into_iter().enumerate() {
            let index = committed.index;
            if !committed.data.is_empty() {
                match decode_entry(&committed.data) {
                    Some(entry) => {
                        flushed |= entry
                            .items
                            .iter()
                            .flat_map(|(_, _, commands)| commands)
                            .any(|c| {
                                let name = c.args().get(0).to_ascii_lowercase();
                                name == b"flushall" || name == b"flushdb"
                            });
                        let caller = self.caller(entry.caller.as_deref());
                        let session = &mut self.session;
                        session.user = caller;
                        session.monitor_fed = committed.reply.is_some();
                        session.clock_ms = Some(entry.time_ms);
                        crate::random::seed(Some(index));
                        let replies;
                        (txn, replies) = apply_entry(&shared, keyspace, session, txn, &entry);
                        if let Some(reply) = committed.reply {
                            answers.push((reply, replies));
                        }
                    }
                    None => log::error!("raft entry {index} does not decode: skipped"),
                }
            }
            let full = txn
                .as_ref()
                .is_some_and(|t| t.buffered_writes() >= APPLY_CHUNK_WRITES);
            if full || at + 1 == total {
                let mut done = txn.take().expect("commands hand the transaction back");
                let committed = done.put_applied_index(index).and_then(|()| done.commit());
                if let Err(e) = committed {
                    // The keyspace no longer follows the log: stop as a
                    // crash would; the restart applies these entries again.
                    log::error!("applying Raft entries up to {index} failed: {e}; stopping");
                    std::process::exit(70);
                }
                // Keyspace events of what was applied, to this member's
                // subscribers (every member's, as Redis's replicas send
                // those of what they replay).
                crate::notify::publish_pending(&shared, &mut self.session);
                // Clients tracking keys on this member: invalidations of
                // what the chunk changed (the apply thread noted them).
                let was_flushed = std::mem::take(&mut flushed);
                if engram_keyspace::modified::is_wanted() {
                    if was_flushed {
                        engram_keyspace::modified::discard();
                        shared.tracking.flushed(&shared);
                    } else {
                        crate::tracking::invalidate_modified(&shared, None);
                    }
                }
                for (reply, bytes) in answers.drain(..) {
                    reply.send(bytes);
                }
                if at + 1 < total {
                    txn = Some(keyspace.lock_all(true));
                }
            }
        }
        self.session.clock_ms = None;
        self.session.monitor_fed = false;
        self.session.user = self.unrestricted.clone();
        crate::random::seed(None);
    }

    fn snapshot(&mut self) -> Result<Vec<u8>, String> {
        let shared = self.shared.upgrade().ok_or("the server stopped")?;
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().expect("guard() holds a keyspace");
        crate::snapshot::build(&shared, keyspace)
    }

    fn restore(&mut self, index: u64, data: &[u8]) -> Result<(), String> {
        let shared = self.shared.upgrade().ok_or("the server stopped")?;
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().expect("guard() holds a keyspace");
        crate::snapshot::load(&shared, keyspace, index, data)
    }

    fn sync(&mut self) -> Result<(), String> {
        let shared = self.shared.upgrade().ok_or("the server stopped")?;
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().expect("guard() holds a keyspace");
        keyspace.sync().map_err(|e| e.to_string())
    }
}

/// Runs one entry's items against the apply transaction; their replies,
/// each `[len u32][bytes]`.
fn apply_entry<'s>(
    shared: &'s Shared,
    keyspace: &'s Arc<crate::keyspace::Keyspace>,
    session: &mut Session,
    mut txn: Option<crate::keyspace::Txn<'s>>,
    entry: &Entry,
) -> (Option<crate::keyspace::Txn<'s>>, Vec<u8>) {
    let mut out = ReplyWriter::new();
    out.set_resp3(entry.resp3);
    let mut replies = Vec::new();
    for (db, exec, commands) in &entry.items {
        let start = out.len();
        session.db = *db;
        if *exec {
            out.array(commands.len());
        }
        let feed = |session: &Session, args: Args| {
            if !session.monitor_fed {
                crate::monitor::feed(shared, session, args);
            }
        };
        if *exec {
            feed(session, OwnedArgs::from_slices(&[b"multi"]).args());
        }
        for args in commands {
            let args = args.args();
            match lookup(args.get(0)) {
                Some((index, _)) => {
                    txn = commands::run(shared, keyspace, session, &mut out, txn, index, args);
                    feed(session, args);
                }
                None => out.error("ERR unknown command"),
            }
        }
        if *exec {
            feed(session, OwnedArgs::from_slices(&[b"exec"]).args());
        }
        let reply = &out.buf[start..];
        replies.extend_from_slice(&(reply.len() as u32).to_le_bytes());
        replies.extend_from_slice(reply);
    }
    (txn, replies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // Values from Redis Cluster's specification and CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
    }

    #[test]
    fn entries_round_trip() {
        let owned = |parts: &[&[u8]]| OwnedArgs::from_slices(parts);
        let pending = [
            Pending::Command {
                db: 3,
                args: owned(&[b"set", b"k", b"v"]),
                silent: false,
                wait: None,
            },
            Pending::Local(b"-ERR local\r\n".to_vec()),
            Pending::Exec {
                db: 200,
                queue: vec![owned(&[b"incr", b"n"]), owned(&[b"get", b"n"])],
                silent: true,
            },
        ];
        let entry = encode_entry(42, true, None, &pending);
        let decoded = decode_entry(&entry).unwrap();
        assert_eq!((decoded.time_ms, decoded.resp3), (42, true));
        assert_eq!(decoded.caller, None);
        assert_eq!(
            decoded.items.len(),
            2,
            "the local reply is not in the entry"
        );
        assert_eq!((decoded.items[0].0, decoded.items[0].1), (3, false));
        assert_eq!(decoded.items[1].2[1].args().get(0), b"get");
        assert_eq!((decoded.items[1].0, decoded.items[1].1), (200, true));
        // A truncated entry is refused, not misread.
        assert!(decode_entry(&entry[..entry.len() - 1]).is_none());

        // A restricted caller's line travels with the entry, RESP2 too.
        let line = "user app on resetchannels ~app:* -@all +eval +set";
        let entry = encode_entry(7, false, Some(line), &pending[..1]);
        let decoded = decode_entry(&entry).unwrap();
        assert_eq!(decoded.caller.as_deref(), Some(line));
        assert!(!decoded.resp3);
        assert_eq!(decoded.items[0].2[0].args().get(1), b"k");
        assert!(decode_entry(&entry[..20]).is_none(), "cut inside the line");
    }

    #[test]
    fn a_blocking_commands_keys_and_timeout_are_read_from_its_arguments() {
        let wait = |parts: &[&str]| {
            let bytes: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
            let args = OwnedArgs::from_slices(&bytes);
            let name = parts[0].to_ascii_lowercase();
            blocking_wait(&name, &args.args()).map(|w| {
                let keys: Vec<String> = w
                    .keys
                    .iter()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect();
                (keys, w.timeout.map(|t| t.as_millis()))
            })
        };
        let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            wait(&["BLPOP", "a", "b", "1.5"]),
            Some((keys(&["a", "b"]), Some(1500)))
        );
        assert_eq!(wait(&["brpop", "a", "0"]), Some((keys(&["a"]), None)));
        assert_eq!(
            wait(&["BZPOPMIN", "z", "2"]),
            Some((keys(&["z"]), Some(2000)))
        );
        assert_eq!(
            wait(&["BLMOVE", "s", "d", "LEFT", "RIGHT", "0.01"]),
            Some((keys(&["s"]), Some(10)))
        );
        assert_eq!(
            wait(&["BRPOPLPUSH", "s", "d", "0"]),
            Some((keys(&["s"]), None))
        );
        assert_eq!(
            wait(&["BLMPOP", "3", "2", "x", "y", "LEFT"]),
            Some((keys(&["x", "y"]), Some(3000)))
        );
        assert_eq!(
            wait(&[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "COUNT",
                "2",
                "BLOCK",
                "700",
                "STREAMS",
                "s",
                "t",
                ">",
                ">"
            ]),
            Some((keys(&["s", "t"]), Some(700)))
        );
        assert_eq!(
            wait(&[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "block",
                "0",
                "NOACK",
                "STREAMS",
                "s",
                ">"
            ]),
            Some((keys(&["s"]), None))
        );
        // No BLOCK, bad arguments, other commands: nothing to wait for
        // (a bad call's apply replies its error).
        assert_eq!(
            wait(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"]),
            None
        );
        assert_eq!(
            wait(&[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "x",
                "STREAMS",
                "s",
                ">"
            ]),
            None
        );
        assert_eq!(
            wait(&[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "1",
                "STREAMS",
                "s"
            ]),
            None
        );
        assert_eq!(wait(&["BLPOP", "a", "-1"]), None);
        assert_eq!(wait(&["BLPOP", "a", "soon"]), None);
        assert_eq!(wait(&["BLMPOP", "1", "5", "x", "LEFT"]), None);
        assert_eq!(wait(&["BLMPOP", "1", "0", "x", "LEFT"]), None);
        assert_eq!(wait(&["LPOP", "a"]), None);
    }

    #[test]
    fn an_entrys_caller_is_rebuilt_from_its_line_and_a_bad_line_allows_nothing() {
        let line = "user app on resetchannels ~app:* -@all +eval +set";
        let user = User::from_line(line, false).unwrap();
        assert_eq!(user.name, b"app");
        assert!(!user.rules().unrestricted);
        assert_eq!(
            user.line(),
            User::from_line(&user.line(), false).unwrap().line()
        );
        assert!(User::from_line("user app ~x ((", false).is_err());
        assert!(User::from_line("user a on\nuser b on", false).is_err());
        assert!(User::from_line("", false).is_err());
        assert!(!User::allowed_nothing(b"x").rules().root().all_commands);
    }
}
