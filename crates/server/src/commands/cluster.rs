//! Redis Cluster's face of a Raft group (`group`): one shard owning all
//! 16384 slots, its leader the master, the other members its replicas, so
//! cluster-aware clients (redis-py's RedisCluster, `redis-cli -c`) find
//! the leader and follow `MOVED` to it. READONLY and READWRITE switch a
//! connection's stale reads on a follower. On a single node every one of
//! these answers as Redis without cluster support does.

use super::{err, is, CmdResult, Ctx, Group, FAST};
use crate::resp::Args;
use engram_replication::Replica;

pub fn commands() -> Vec<super::CommandSpec> {
    let g = Group("cluster");
    vec![
        g.keyless(
            "readonly",
            1,
            FAST,
            readonly,
            "Enables read-only queries for a connection to a Redis Cluster replica node.",
        ),
        g.keyless(
            "readwrite",
            1,
            FAST,
            readwrite,
            "Enables read-write queries for a connection to a Redis Cluster replica node.",
        ),
        Group("generic").keyless(
            "wait",
            3,
            0,
            wait,
            "Waits until this connection's writes are held by the given number of replicas \
             (followers of a Raft group), or the timeout.",
        ),
        g.keyless(
            "cluster",
            -2,
            0,
            cluster,
            "Describes the Raft group as one Redis Cluster shard (INFO MYID NODES SLOTS \
             SHARDS KEYSLOT FAILOVER).",
        ),
    ]
}

const DISABLED: &str = "ERR This instance has cluster support disabled";

fn group<'s>(ctx: &Ctx<'s, '_>) -> Result<&'s Replica, super::CmdError> {
    ctx.shared.group.get().ok_or_else(|| err(DISABLED))
}

fn readonly(ctx: &mut Ctx, _: Args) -> CmdResult {
    group(ctx)?;
    ctx.session.readonly = true;
    ctx.out.ok();
    Ok(())
}

fn readwrite(ctx: &mut Ctx, _: Args) -> CmdResult {
    group(ctx)?;
    ctx.session.readonly = false;
    ctx.out.ok();
    Ok(())
}

/// WAIT numreplicas timeout: checked here, waited for by the connection
/// (`group::wait_for_replicas`); inside MULTI or a script, answered at
/// once with the count now, as Redis does where a client cannot block.
fn wait(ctx: &mut Ctx, args: Args) -> CmdResult {
    let replicas = super::int_arg(args.get(1))?;
    let timeout = super::int_arg(args.get(2))?;
    if timeout < 0 {
        return Err(err("ERR timeout is negative"));
    }
    if let Some(replica) = ctx.shared.group.get() {
        if !replica.is_leader() {
            return Err(err(
                "ERR WAIT cannot be used with replica instances. Please also note that since \
                 Redis 4.0 if a replica is configured to be writable (which is not the \
                 default) writes to replicas are just local and are not propagated.",
            ));
        }
    }
    let holding = ctx
        .shared
        .group
        .get()
        .map_or(0, |g| g.followers_holding(ctx.session.last_write_index)) as i64;
    if holding >= replicas || ctx.exec.is_some() || ctx.session.in_script {
        ctx.out.int(holding);
    } else {
        ctx.session.wait_replicas = Some((replicas, timeout as u64));
    }
    Ok(())
}

/// CLUSTER HELP on a member of a group: what it answers.
const HELP: &[&str] = &[
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "INFO",
    "    Information about the group: one shard, its state and Raft term.",
    "MYID",
    "    This node's id (its Raft node id, as 40 hex digits).",
    "NODES",
    "    The members in Redis Cluster's format: the leader is the master.",
    "SLOTS",
    "    The slot range (all 16384) and its nodes, leader first.",
    "SHARDS",
    "    The one shard: its slots and nodes.",
    "KEYSLOT <key>",
    "    The hash slot of <key>.",
    "FAILOVER",
    "    On a follower: leadership moves to it.",
    "HELP",
    "    Prints this help.",
];

/// A node's 40-character id, as Redis Cluster names nodes.
fn node_name(id: u64) -> String {
    format!("{id:040x}")
}

/// `host:port` split for the replies that give them apart.
fn host_port(address: &str) -> (String, i64) {
    match address.rsplit_once(':') {
        Some((host, port)) => (host.to_string(), port.parse().unwrap_or(0)),
        None => (address.to_string(), 0),
    }
}

/// The members in reply order: the leader (or the last one known, during
/// an election) first, then the others by id.
fn members(replica: &Replica) -> Vec<u64> {
    let leader = replica.last_known_leader();
    let mut ids = replica.members();
    ids.sort_unstable_by_key(|&id| (id != leader, id));
    ids
}

fn cluster(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    // As Redis without cluster support: every subcommand refused.
    let replica = group(ctx)?;
    if is(sub, "keyslot") {
        if args.len() != 3 {
            return Err(super::wrong_arity("cluster|keyslot"));
        }
        ctx.out.int(crate::group::key_slot(args.get(2)) as i64);
        return Ok(());
    }
    if is(sub, "help") {
        ctx.out.array(HELP.len());
        for line in HELP {
            ctx.out.simple(line);
        }
        return Ok(());
    }
    // During an election the topology still names the last leader (as
    // Redis Cluster lists a failed master until it is replaced), so
    // clients keep a map and retry; CLUSTER INFO says the state is fail.
    let leader = replica.last_known_leader();
    let address = |id: u64| replica.client_addr(id).unwrap_or_else(|| ":0".into());
    if is(sub, "myid") {
        ctx.out.bulk(node_name(replica.id()).as_bytes());
    } else if is(sub, "info") {
        let status = replica.status();
        let known = replica.members().len();
        let state = if replica.leader() != 0 { "ok" } else { "fail" };
        let assigned = if leader != 0 { 16384 } else { 0 };
        let text = format!(
            "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\n\
             cluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n\
             cluster_known_nodes:{known}\r\ncluster_size:1\r\ncluster_current_epoch:{term}\r\n\
             cluster_my_epoch:{term}\r\n",
            term = status.term
        );
        ctx.out.verbatim(&text);
    } else if is(sub, "nodes") {
        let mut text = String::new();
        for id in members(replica) {
            let myself = if id == replica.id() { "myself," } else { "" };
            let (role, master, slots) = if id == leader {
                ("master", "-".to_string(), " 0-16383")
            } else {
                ("slave", node_name(leader), "")
            };
            let link = if replica.client_addr(id).is_some() {
                "connected"
            } else {
                "disconnected"
            };
            text.push_str(&format!(
                "{} {}@0 {myself}{role} {master} 0 0 {} {link}{slots}\n",
                node_name(id),
                address(id),
                replica.status().term,
            ));
        }
        ctx.out.verbatim(&text);
    } else if is(sub, "slots") {
        if leader == 0 {
            ctx.out.array(0);
            return Ok(());
        }
        let ids = members(replica);
        ctx.out.array(1);
        ctx.out.array(2 + ids.len());
        ctx.out.int(0);
        ctx.out.int(16383);
        for id in ids {
            let (host, port) = host_port(&address(id));
            ctx.out.array(4);
            ctx.out.bulk(host.as_bytes());
            ctx.out.int(port);
            ctx.out.bulk(node_name(id).as_bytes());
            ctx.out.array(0);
        }
    } else if is(sub, "shards") {
        let ids = members(replica);
        let status = replica.status();
        ctx.out.array(1);
        ctx.out.map(2);
        ctx.out.bulk(b"slots");
        if leader == 0 {
            ctx.out.array(0);
        } else {
            ctx.out.array(2);
            ctx.out.int(0);
            ctx.out.int(16383);
        }
        ctx.out.bulk(b"nodes");
        ctx.out.array(ids.len());
        for id in ids {
            let (host, port) = host_port(&address(id));
            ctx.out.map(7);
            ctx.out.bulk(b"id");
            ctx.out.bulk(node_name(id).as_bytes());
            ctx.out.bulk(b"port");
            ctx.out.int(port);
            ctx.out.bulk(b"ip");
            ctx.out.bulk(host.as_bytes());
            ctx.out.bulk(b"endpoint");
            ctx.out.bulk(host.as_bytes());
            ctx.out.bulk(b"role");
            ctx.out
                .bulk(if id == leader { b"master" } else { b"replica" });
            ctx.out.bulk(b"replication-offset");
            let offset = status
                .progress
                .iter()
                .find(|(peer, _)| *peer == id)
                .map_or(status.applied, |(_, matched)| *matched);
            ctx.out.int(offset as i64);
            ctx.out.bulk(b"health");
            ctx.out.bulk(if replica.client_addr(id).is_some() {
                b"online"
            } else {
                b"fail"
            });
        }
    } else if is(sub, "failover") {
        // CLUSTER FAILOVER on a follower: leadership moves to it.
        if args.len() > 3 {
            return Err(err("ERR syntax error"));
        }
        if replica.is_leader() {
            return Err(err("ERR You should send CLUSTER FAILOVER to a replica"));
        }
        if replica.leader() == 0 {
            return Err(err("ERR no leader is known to hand over from"));
        }
        replica.transfer_leader(replica.id());
        ctx.out.ok();
    } else if super::descriptions::subcommand("cluster", sub).is_some() {
        // Redis Cluster's slot management and membership: a group is one
        // shard owning every slot, its membership Raft's.
        return Err(err(format!(
            "ERR CLUSTER {} is not supported: an Engram group is one Raft shard owning every slot",
            String::from_utf8_lossy(sub).to_uppercase()
        )));
    } else {
        return Err(super::unknown_subcommand("CLUSTER", sub));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        assert_eq!(node_name(3).len(), 40);
        assert!(node_name(3).ends_with('3'));
        assert_eq!(host_port("10.0.0.1:7001"), ("10.0.0.1".to_string(), 7001));
    }
}
