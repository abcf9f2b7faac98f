//! Blocking commands (BLPOP, XREADGROUP ... BLOCK) on a group's leader:
//! one is proposed alone; at apply it runs as inside MULTI, and when its
//! reply says it found nothing the connection waits as a single node's
//! does (`Blocked::proposed`) and proposes it again after each write to
//! its keys, so what it takes is taken in log order on every member. A
//! waiter whose node stops leading is redirected.

use super::{not_leader, resolve, Pending};
use crate::commands::{key_positions, lookup, parse_timeout, CommandSpec};
use crate::resp::{Args, ReplyWriter};
use crate::session::Session;
use crate::shared::Shared;

/// The keys a blocking command waits on, and for how long (None: for
/// ever).
pub struct Wait {
    pub(super) keys: Vec<Box<[u8]>>,
    pub(super) timeout: Option<std::time::Duration>,
}

/// What `args` would wait for on a single node, when it finds nothing:
/// None for a command that does not block, or whose arguments are bad
/// (its entry's apply replies the error). Its keys are where
/// `key_positions` finds them; BLMOVE and BRPOPLPUSH wait on their source
/// only.
pub(super) fn blocking_wait(spec: &CommandSpec, args: &Args) -> Option<Wait> {
    let n = args.len();
    let timeout = match spec.name {
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" | "brpoplpush" | "blmove" => {
            parse_timeout(args.get(n - 1)).ok()?
        }
        "blmpop" | "bzmpop" => parse_timeout(args.get(1)).ok()?,
        "xreadgroup" => xreadgroup_block(args)?,
        _ => return None,
    };
    let mut positions = key_positions(spec, args)?;
    if matches!(spec.name, "brpoplpush" | "blmove") {
        positions.truncate(1);
    }
    if positions.is_empty() {
        return None;
    }
    let keys = positions
        .into_iter()
        .map(|i| Box::from(args.get(i)))
        .collect();
    Some(Wait { keys, timeout })
}

/// XREADGROUP's BLOCK option among those before STREAMS (milliseconds;
/// 0: for ever); None without it, or when it is not a number.
fn xreadgroup_block(args: &Args) -> Option<Option<std::time::Duration>> {
    let mut block = None;
    let mut i = 4;
    while i < args.len() {
        let option = args.get(i);
        if option.eq_ignore_ascii_case(b"streams") {
            break;
        } else if option.eq_ignore_ascii_case(b"block") && i + 1 < args.len() {
            let ms: u64 = std::str::from_utf8(args.get(i + 1)).ok()?.parse().ok()?;
            block = Some((ms > 0).then(|| std::time::Duration::from_millis(ms)));
            i += 2;
        } else if option.eq_ignore_ascii_case(b"count") {
            i += 2;
        } else {
            i += 1;
        }
    }
    block
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
pub(super) fn found_nothing(out: &ReplyWriter) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::OwnedArgs;

    #[test]
    fn a_blocking_commands_keys_and_timeout_are_read_from_its_arguments() {
        let wait = |parts: &[&str]| {
            let bytes: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
            let args = OwnedArgs::from_slices(&bytes);
            let (_, spec) = lookup(parts[0].as_bytes()).expect("a command");
            blocking_wait(spec, &args.args()).map(|w| {
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
}
