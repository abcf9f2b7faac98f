//! Pub/sub and MONITOR: SUBSCRIBE UNSUBSCRIBE PSUBSCRIBE PUNSUBSCRIBE
//! SSUBSCRIBE SUNSUBSCRIBE PUBLISH SPUBLISH PUBSUB MONITOR.
//!
//! Without a cluster, shard channels behave as Redis 7.0 standalone's: a
//! namespace of their own, SPUBLISH reaching only SSUBSCRIBErs, no
//! patterns. Confirmations are push messages (RESP3 `>`, RESP2 arrays),
//! which CLIENT REPLY OFF does not silence. The registry and delivery are
//! in `crate::pubsub`, MONITOR's lines in `crate::monitor`.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{
    err, is, lowercase, wrong_sub_arity, CmdResult, CommandSpec, Ctx, Group, ADMIN, FAST, PUBSUB,
};
use crate::pubsub::Kind;
use crate::resp::{Args, ReplyWriter};

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("pubsub");
    vec![
        g.keyless(
            "subscribe",
            -2,
            PUBSUB,
            subscribe,
            "Listens for messages published to the given channels.",
        ),
        g.keyless(
            "unsubscribe",
            -1,
            PUBSUB,
            unsubscribe,
            "Stops listening to messages posted to channels.",
        ),
        g.keyless(
            "psubscribe",
            -2,
            PUBSUB,
            psubscribe,
            "Listens for messages published to channels that match one or more patterns.",
        ),
        g.keyless(
            "punsubscribe",
            -1,
            PUBSUB,
            punsubscribe,
            "Stops listening to messages published to channels that match one or more \
             patterns.",
        ),
        g.command(
            "ssubscribe",
            -2,
            PUBSUB,
            (1, -1, 1),
            ssubscribe,
            "Listens for messages published to shard channels.",
        ),
        g.command(
            "sunsubscribe",
            -1,
            PUBSUB,
            (1, -1, 1),
            sunsubscribe,
            "Stops listening to messages posted to shard channels.",
        ),
        g.keyless(
            "publish",
            3,
            PUBSUB | FAST,
            publish,
            "Posts a message to a channel.",
        ),
        g.command(
            "spublish",
            3,
            PUBSUB | FAST,
            (1, 1, 1),
            spublish,
            "Post a message to a shard channel",
        ),
        g.keyless(
            "pubsub",
            -2,
            0,
            pubsub,
            "A container for Pub/Sub commands (CHANNELS NUMSUB NUMPAT SHARDCHANNELS \
             SHARDNUMSUB).",
        ),
        Group("server").keyless(
            "monitor",
            1,
            ADMIN,
            monitor,
            "Listens for all requests received by the server in real-time.",
        ),
    ]
}

/// A subscription confirmation: `[verb, name or null, count]`, a push in
/// RESP3.
fn confirm(out: &mut ReplyWriter, verb: &str, name: Option<&[u8]>, count: usize) {
    if out.is_resp3() {
        out.push(3);
    } else {
        out.array(3);
    }
    out.bulk(verb.as_bytes());
    match name {
        Some(name) => out.bulk(name),
        None => out.null(),
    }
    out.int(count as i64);
}

fn subscribe_to(ctx: &mut Ctx, args: Args, kind: Kind) -> CmdResult {
    // Inside EXEC a client may not wait for messages (Redis's
    // DENY_BLOCKING); SUBSCRIBE and PSUBSCRIBE are let through there, as
    // Redis keeps them for compatibility.
    if kind == Kind::Shard && ctx.exec.is_some() {
        return Err(err(
            "ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client",
        ));
    }
    let (verb, _) = kind.verbs();
    let info = ctx.session.info.clone();
    for name in args.iter().skip(1) {
        let subs = &mut ctx.session.pubsub;
        subs.subscribe(&ctx.shared.pubsub, &info, kind, name);
        confirm(ctx.out, verb, Some(name), subs.count_for(kind));
    }
    ctx.session.pushed = true;
    Ok(())
}

fn unsubscribe_from(ctx: &mut Ctx, args: Args, kind: Kind) -> CmdResult {
    let (_, verb) = kind.verbs();
    let info = ctx.session.info.clone();
    let subs = &mut ctx.session.pubsub;
    let names: Vec<Bytes> = if args.len() == 1 {
        subs.names(kind)
    } else {
        args.iter().skip(1).map(Bytes::copy_from_slice).collect()
    };
    if names.is_empty() {
        // Subscribed to nothing: still one confirmation, with a null name.
        confirm(ctx.out, verb, None, subs.count_for(kind));
    }
    for name in names {
        subs.unsubscribe(&ctx.shared.pubsub, &info, kind, &name);
        confirm(ctx.out, verb, Some(&name), subs.count_for(kind));
    }
    ctx.session.pushed = true;
    Ok(())
}

fn subscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    subscribe_to(ctx, args, Kind::Channel)
}

fn psubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    subscribe_to(ctx, args, Kind::Pattern)
}

fn ssubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    subscribe_to(ctx, args, Kind::Shard)
}

fn unsubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    unsubscribe_from(ctx, args, Kind::Channel)
}

fn punsubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    unsubscribe_from(ctx, args, Kind::Pattern)
}

fn sunsubscribe(ctx: &mut Ctx, args: Args) -> CmdResult {
    unsubscribe_from(ctx, args, Kind::Shard)
}

fn publish(ctx: &mut Ctx, args: Args) -> CmdResult {
    let receivers = ctx.shared.publish(args.get(1), args.get(2));
    ctx.out.int(receivers as i64);
    Ok(())
}

fn spublish(ctx: &mut Ctx, args: Args) -> CmdResult {
    let receivers = ctx.shared.spublish(args.get(1), args.get(2));
    ctx.out.int(receivers as i64);
    Ok(())
}

fn channel_list(ctx: &mut Ctx, names: Vec<Bytes>) {
    ctx.out.array(names.len());
    for name in names {
        ctx.out.bulk(&name);
    }
}

fn counts(ctx: &mut Ctx, args: Args, count: impl Fn(&[u8]) -> usize) {
    // An array of name, count pairs in RESP3 too, as Redis 7.0 replies.
    ctx.out.array(2 * (args.len() - 2));
    for name in args.iter().skip(2) {
        ctx.out.bulk(name);
        ctx.out.int(count(name) as i64);
    }
}

fn pubsub(ctx: &mut Ctx, args: Args) -> CmdResult {
    let sub = args.get(1);
    let argc = args.len();
    // Redis's subcommand arities, then its handler's own check.
    let (min, max) = match lowercase(sub).as_str() {
        "channels" | "shardchannels" => (2, 3),
        "numsub" | "shardnumsub" => (2, usize::MAX),
        "numpat" | "help" => (2, 2),
        _ => return Err(super::unknown_subcommand("pubsub", sub)),
    };
    if argc < min || (max == 2 && argc != 2) {
        return Err(wrong_sub_arity("pubsub", sub));
    }
    if argc > max {
        return Err(super::subcommand_syntax_error("pubsub", sub));
    }
    let pattern = (argc == 3).then(|| args.get(2));
    let pubsub = &ctx.shared.pubsub;
    if is(sub, "channels") {
        let names = pubsub.channels(pattern);
        channel_list(ctx, names);
    } else if is(sub, "shardchannels") {
        let names = pubsub.shard_channels(pattern);
        channel_list(ctx, names);
    } else if is(sub, "numsub") {
        counts(ctx, args, |name| pubsub.numsub(name));
    } else if is(sub, "shardnumsub") {
        counts(ctx, args, |name| pubsub.shard_numsub(name));
    } else if is(sub, "numpat") {
        ctx.out.int(pubsub.numpat() as i64);
    } else {
        let lines = [
            "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CHANNELS [<pattern>]",
            "    Return the currently active channels matching a <pattern> (default: '*').",
            "NUMPAT",
            "    Return number of subscriptions to patterns.",
            "NUMSUB [<channel> ...]",
            "    Return the number of subscribers for the specified channels, excluding",
            "    pattern subscriptions(default: no channels).",
            "SHARDCHANNELS [<pattern>]",
            "    Return the currently active shard level channels matching a <pattern> \
             (default: '*').",
            "SHARDNUMSUB [<shardchannel> ...]",
            "    Return the number of subscribers for the specified shard level channel(s)",
            "HELP",
            "    Prints this help.",
        ];
        ctx.out.array(lines.len());
        for line in lines {
            ctx.out.simple(line);
        }
    }
    Ok(())
}

/// MONITOR: this connection receives a line for every command run from
/// now on (`crate::monitor`), until RESET or it disconnects. A second
/// MONITOR is ignored without a reply, as in Redis.
fn monitor(ctx: &mut Ctx, _args: Args) -> CmdResult {
    if ctx.exec.is_some() {
        return Err(err("ERR MONITOR isn't allowed for DENY BLOCKING client"));
    }
    if ctx.session.pubsub.monitoring {
        return Ok(());
    }
    let info = ctx.session.info.clone();
    let outbox = ctx.session.pubsub.outbox(&info);
    ctx.session.pubsub.monitoring = true;
    info.monitor.store(true, Ordering::Relaxed);
    ctx.shared.monitors.add(outbox);
    ctx.out.ok();
    Ok(())
}

/// Leaves subscribed mode and MONITOR mode without a word (RESET, and a
/// connection's end).
pub fn leave_all(shared: &crate::shared::Shared, session: &mut crate::session::Session) {
    let info = session.info.clone();
    session.pubsub.unsubscribe_all(&shared.pubsub, &info);
    if session.pubsub.monitoring {
        session.pubsub.monitoring = false;
        info.monitor.store(false, Ordering::Relaxed);
        shared.monitors.remove(info.id);
    }
}
