//! Engram's own commands (no Redis equivalent): ENGRAM.SCRUB,
//! ENGRAM.GROUP (a replicated group's membership, below), and
//! ENGRAM.EXPIRED and ENGRAM.EVICTED (a group's expiry and eviction,
//! below).
//!
//! `ENGRAM.SCRUB` brings the integrity layer's redundancy up to date, then
//! verifies every page of the data file against its checksum and every
//! stripe against its parity, rebuilding what parity can rebuild (the
//! engine's `Store::scrub_now`). It blocks the calling client for as long
//! as that takes (seconds for gigabytes); other clients are served
//! meanwhile. The reply is a map (RESP3) or a flat array of name, value
//! pairs (RESP2):
//!
//! | field | value |
//! |---|---|
//! | `pages_checked` | pages verified |
//! | `pages_stale` | pages skipped because they were written during the scrub |
//! | `corrupt_pages` | pages that did not match their checksum |
//! | `repaired_pages` | how many of those were rebuilt from parity |
//! | `unrepairable_pages` | pages known corrupt that parity could not rebuild (two bad pages in one stripe) |
//! | `parity_rewritten` | parity pages found stale or wrong and rewritten |
//! | `metadata_rebuilt` | checksum pages found damaged and rebuilt from the data |
//! | `affected_keys` | keys with data on an unrepairable page, named as clients see them (`db<N>:<key>` outside database 0); `offset:0x...` for a record whose key cannot be read |
//! | `duration_ms` | how long the scrub took |
//!
//! Reads of an affected key fail with an error until the key is rewritten
//! or deleted; every other key stays readable. Inside MULTI the command is
//! queued and refused at EXEC (the transaction's locks would be held for
//! the whole scrub).

use super::{err, run_blocking, CmdResult, CommandSpec, Ctx, Group, ADMIN, WRITE};
use crate::resp::Args;
use engram_replication::Change;

/// The reply to ENGRAM.SCRUB on a server started with `--integrity off`.
pub const INTEGRITY_OFF: &str = "ERR integrity is off (start with --integrity lazy or inline)";

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("engram");
    vec![
        g.keyless(
            "engram.scrub",
            1,
            ADMIN,
            scrub,
            "Verifies every page of the data file against its checksum and parity, \
             repairs what parity can, and names the keys on pages it cannot.",
        ),
        g.keyless(
            "engram.group",
            -2,
            ADMIN,
            group,
            "A replicated group's membership: MEMBERS, ADD id host:busport, REMOVE id.",
        ),
        g.command(
            "engram.expired",
            -2,
            WRITE,
            (1, -1, 1),
            expired,
            "Deletes those of the keys that have expired (a replicated group's \
             leader proposes it for the keys it finds due).",
        ),
        g.command(
            "engram.evicted",
            -2,
            // Deletes any key it names: an administrator's (the leader
            // proposes it as the unrestricted caller).
            WRITE | ADMIN,
            (1, -1, 1),
            evicted,
            "Deletes the keys as evicted (a replicated group's leader proposes \
             it for the keys its maxmemory-policy picks).",
        ),
    ]
}

/// `ENGRAM.EXPIRED key [key ...]`: deletes each key that has expired by
/// the command's clock (as a read would find it), and nothing else: a key
/// written again since with no expiry or a later one stays. A Raft group's
/// members run no expiry cycle of their own (their clocks differ); the
/// leader proposes this for the keys it finds due (`group::expire`), and
/// every member applies it at the entry's time, so all delete the same
/// keys. Harmless from a client: it does what reading the keys would.
fn expired(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    ctx.write(&keys, keys.len() > 1, |txn, db, now| {
        for key in &keys {
            // Deletes it on the way if it has expired (counted and
            // announced as an expiry).
            txn.get(db, key, now)?;
        }
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

/// `ENGRAM.EVICTED key [key ...]`: deletes each key that exists, counted
/// in `evicted_keys` and announced as `evicted` (keyspace events class
/// `e`), as a single node's eviction does. A group's members evict
/// nothing by themselves; the leader proposes this for the keys its
/// policy picks (`eviction::group_eviction`) and every member applies it.
/// The reply is how many keys it deleted.
fn evicted(ctx: &mut Ctx, args: Args) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let deleted = ctx.write(&keys, keys.len() > 1, |txn, db, now| {
        let mut deleted = Vec::new();
        for key in &keys {
            if txn.delete(db, key, now)? {
                deleted.push(*key);
            }
        }
        Ok(deleted)
    })?;
    ctx.shared
        .eviction
        .evicted_keys
        .fetch_add(deleted.len() as u64, std::sync::atomic::Ordering::Relaxed);
    for key in &deleted {
        ctx.notify(crate::notify::EVICTED, "evicted", key);
    }
    ctx.out.int(deleted.len() as i64);
    Ok(())
}

/// `ENGRAM.GROUP MEMBERS`: each member as `[id, role, client address]`
/// (role `leader`, `voter` or `learner`; the address empty while the node
/// has not said it). `ENGRAM.GROUP ADD id host:busport`: on the leader,
/// adds node `id` (started with `--join` and `--peers` naming the members
/// and itself) as a learner; it is sent a snapshot and promoted to voter
/// once caught up; the reply comes once the change is applied here.
/// `ENGRAM.GROUP REMOVE id`: on the leader, removes node `id` (not the
/// leader itself). One change at a time; inside MULTI or a script it is
/// refused.
fn group(ctx: &mut Ctx, args: Args) -> CmdResult {
    let Some(replica) = ctx.shared.group.get() else {
        return Err(err("ERR this server is not a member of a replicated group"));
    };
    let sub = args.get(1).to_ascii_lowercase();
    let arity = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(err(format!(
                "ERR wrong number of arguments for 'engram.group|{}' command",
                String::from_utf8_lossy(&sub)
            )))
        }
    };
    match &sub[..] {
        b"members" => {
            arity(2)?;
            let status = replica.status();
            let members = replica.members();
            ctx.out.array(members.len());
            for id in members {
                let role = if id == status.leader {
                    "leader"
                } else if status.learners.contains(&id) {
                    "learner"
                } else {
                    "voter"
                };
                ctx.out.array(3);
                ctx.out.int(id as i64);
                ctx.out.bulk(role.as_bytes());
                ctx.out
                    .bulk(replica.client_addr(id).unwrap_or_default().as_bytes());
            }
            Ok(())
        }
        b"add" | b"remove" => {
            if ctx.exec.is_some() || ctx.session.in_script {
                return Err(err(
                    "ERR ENGRAM.GROUP is not allowed inside MULTI/EXEC or a script",
                ));
            }
            let id = std::str::from_utf8(args.get(2))
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .filter(|&id| id > 0);
            let change = if &sub[..] == b"add" {
                arity(4)?;
                let id = id.ok_or_else(|| err("ERR the node id must be a number above 0"))?;
                let bus = std::str::from_utf8(args.get(3))
                    .ok()
                    .and_then(|t| std::net::ToSocketAddrs::to_socket_addrs(t).ok())
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| err("ERR the bus address must be HOST:PORT"))?;
                Change::Add { id, bus }
            } else {
                arity(3)?;
                let id = id.ok_or_else(|| err("ERR the node id must be a number above 0"))?;
                Change::Remove { id }
            };
            // The connection proposes it and answers once it is applied.
            ctx.session.member_change = Some(change);
            Ok(())
        }
        _ => Err(super::subcommand_syntax_error("engram.group", args.get(1))),
    }
}

fn scrub(ctx: &mut Ctx, _args: Args) -> CmdResult {
    if ctx.exec.is_some() {
        // EXEC holds the stripes of its queued keys: writers to them would
        // wait out the whole scrub.
        return Err(err("ERR ENGRAM.SCRUB is not allowed inside MULTI/EXEC"));
    }
    let store = ctx.ks().store();
    if store.integrity_stats().is_none() {
        return Err(err(INTEGRITY_OFF));
    }
    let report = run_blocking(|| store.scrub_now()).map_err(|e| match e {
        engram_engine::Error::InvalidOption(_) => err(INTEGRITY_OFF),
        other => err(format!("ERR scrub failed: {other}")),
    })?;
    let summary = format!(
        "ENGRAM.SCRUB by client id={}: {} pages checked in {} ms, {} corrupt, {} repaired, \
         {} unrepairable, {} keys affected",
        ctx.session.info.id,
        report.pages_checked,
        report.duration.as_millis(),
        report.corrupt_pages,
        report.repaired_pages.len(),
        report.unrepairable_pages.len(),
        report.affected_keys.len(),
    );
    if report.unrepairable_pages.is_empty() && report.corrupt_pages == 0 {
        log::info!("{summary}");
    } else {
        log::warn!("{summary}");
    }

    let ks = ctx.ks();
    let out = &mut *ctx.out;
    out.map(9);
    for (name, value) in [
        ("pages_checked", report.pages_checked),
        ("pages_stale", report.pages_stale),
        ("corrupt_pages", report.corrupt_pages),
        ("repaired_pages", report.repaired_pages.len() as u64),
        ("unrepairable_pages", report.unrepairable_pages.len() as u64),
        ("parity_rewritten", report.parity_rewritten),
        ("metadata_rebuilt", report.metadata_rebuilt),
    ] {
        out.bulk(name.as_bytes());
        out.int(value as i64);
    }
    out.bulk(b"affected_keys");
    out.array(report.affected_keys.len());
    for affected in &report.affected_keys {
        match &affected.key {
            Some(ekey) => out.bulk(&ks.client_key_name(ekey)),
            None => out.bulk(format!("offset:{:#x}", affected.offset).as_bytes()),
        }
    }
    out.bulk(b"duration_ms");
    out.int(report.duration.as_millis() as i64);
    Ok(())
}
