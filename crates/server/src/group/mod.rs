//! The server as a member of a Raft group (issue 26): `node-id` and `peers`
//! make it one; without them nothing here runs.
//!
//! Writes are ordered by Raft before they run (state machine replication):
//! on the leader a write command is not executed where it arrives but
//! queued in its session (`Pending`); the connection proposes everything
//! queued as one entry (`entry`: the client's pipelined writes, each with
//! its database, the leader's clock, the client's protocol and, for a
//! restricted user, its ACL rules), and every node applies committed
//! entries in log order on its apply thread (`applier`): all entries of a
//! batch in one atomic whole-keyspace transaction with the applied index,
//! so a crash leaves each entry applied exactly once. The client's replies
//! are the ones the leader's apply wrote, so it hears of its write only
//! when a majority holds it as durably as the node's durability promises.
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
//! index (`random`). No member expires keys by its own clock (reads do
//! not, `KeyspaceOptions::expire_on_read`, and there is no expiry cycle):
//! the leader proposes the deletion of due keys (`expiry`). Blocking
//! commands wait on the leader and take through the log (`blocking`);
//! PUBLISH goes through the log so every member's subscribers get it;
//! each member sends the keyspace events and tracking invalidations of
//! what it applies, and MONITOR shows writes on the leader as they are
//! proposed.
//!
//! Not yet (see issue 26's notes): WATCH (refused: EXEC would have to
//! decide on every member alike whether a watched key changed).

mod applier;
mod blocking;
mod entry;
mod expiry;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use engram_replication::{LogSync, NodeConfig, Refused, Replica};

use crate::commands::{self, lookup, CommandSpec, READONLY, WRITE};
use crate::keyspace::now_ms;
use crate::resp::{Args, OwnedArgs, ReplyWriter};
use crate::session::{ReplyMode, Session};
use crate::shared::Shared;

pub use applier::Applier;
use blocking::{blocking_wait, found_nothing};
pub use blocking::{retry_blocked, stepped_down, Wait};
use entry::{decode_replies, encode_entry};
pub use expiry::{expire, propose_evictions};

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
    crate::scripting::library::count_load_instructions();
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
pub(super) fn not_leader(replica: &Replica, spec: &CommandSpec, args: &Args) -> String {
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
pub fn queue(shared: &Shared, session: &mut Session, spec: &CommandSpec, args: Args) {
    let silent = match session.reply {
        ReplyMode::Off => true,
        ReplyMode::Skip => {
            session.reply = ReplyMode::On;
            true
        }
        ReplyMode::On | ReplyMode::SkipNext => false,
    };
    // EVALSHA goes as EVAL of the text cached here (none: EVALSHA, which
    // every member's apply answers with NOSCRIPT).
    let owned = |args: Args| {
        if args.len() >= 2 && args.get(0).eq_ignore_ascii_case(b"evalsha") {
            if let Some(eval) = commands::evalsha_as_eval(shared, args) {
                return eval;
            }
        }
        args.to_owned()
    };
    let pending = if spec.name == "exec" {
        let queue = session.multi.take().unwrap_or_default();
        session.end_multi();
        Pending::Exec {
            db: session.db,
            queue: queue.iter().map(|queued| owned(queued.args())).collect(),
            silent,
        }
    } else {
        Pending::Command {
            db: session.db,
            args: owned(args),
            silent,
            wait: blocking_wait(spec, &args),
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

pub(super) fn refusal(replica: &Replica, refused: &Refused) -> String {
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
}
