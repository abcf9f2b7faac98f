//! Where a call's keys are, for commands whose key positions depend on
//! their other arguments (Redis's "movablekeys": ZUNIONSTORE's numkeys,
//! SORT's STORE, ...); every other command's keys are at the fixed
//! positions of its `CommandSpec::keys`. COMMAND GETKEYS answers from
//! here, and EXEC locks exactly these keys.

use super::{is, CommandSpec};
use crate::resp::Args;

/// Commands whose keys are found by parsing their arguments.
pub const MOVABLE: &[&str] = &[
    "zunionstore",
    "zinterstore",
    "zdiffstore",
    "zunion",
    "zinter",
    "zdiff",
    "zintercard",
    "sintercard",
    "lmpop",
    "blmpop",
    "zmpop",
    "bzmpop",
    "sort",
    "sort_ro",
    "georadius",
    "georadiusbymember",
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
    "xread",
    "xreadgroup",
    "migrate",
];

pub fn is_movable(spec: &CommandSpec) -> bool {
    MOVABLE.contains(&spec.name)
}

/// The positions of the keys of `args` (the command name at 0), or None
/// when the arguments do not say (a numkeys that is not a number or
/// points past the end).
pub fn key_positions(spec: &CommandSpec, args: &Args) -> Option<Vec<usize>> {
    let n = args.len();
    let numkeys_at = |at: usize, first: usize| -> Option<Vec<usize>> {
        let count: usize = std::str::from_utf8(args.get(at)).ok()?.parse().ok()?;
        (first + count <= n).then(|| (first..first + count).collect())
    };
    Some(match spec.name {
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "lmpop" | "zmpop"
            if n > 1 =>
        {
            numkeys_at(1, 2)?
        }
        "blmpop" | "bzmpop" | "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall"
        | "fcall_ro"
            if n > 2 =>
        {
            numkeys_at(2, 3)?
        }
        "zunionstore" | "zinterstore" | "zdiffstore" if n > 2 => {
            let mut keys = vec![1];
            keys.extend(numkeys_at(2, 3)?);
            keys
        }
        // Redis's sortGetKeys: the source and the last STORE's key
        // (LIMIT's two arguments, GET's and BY's one are skipped). SORT
        // stores into that last one.
        "sort" => {
            let mut store = None;
            let mut i = 2;
            while i < n {
                let arg = args.get(i);
                if is(arg, "limit") {
                    i += 2;
                } else if is(arg, "store") && i + 1 < n {
                    store = Some(i + 1);
                } else if is(arg, "get") || is(arg, "by") {
                    i += 1;
                }
                i += 1;
            }
            std::iter::once(1).chain(store).collect()
        }
        // Redis's key specifications: the source, the key after the first
        // STORE and the one after the first STOREDIST among the options.
        // (The command stores into the last of them; it locks the whole
        // keyspace inside EXEC.)
        "georadius" | "georadiusbymember" => {
            let first_option = if spec.name == "georadius" { 6 } else { 5 };
            let after_first = |word: &str| {
                (first_option..n.saturating_sub(1))
                    .find(|&i| is(args.get(i), word))
                    .map(|i| i + 1)
            };
            std::iter::once(1)
                .chain(after_first("store"))
                .chain(after_first("storedist"))
                .collect()
        }
        "xread" | "xreadgroup" => {
            let at = (1..n).find(|&i| is(args.get(i), "streams"))?;
            let rest = n - at - 1;
            if rest == 0 || !rest.is_multiple_of(2) {
                return None;
            }
            (at + 1..at + 1 + rest / 2).collect()
        }
        // Redis's migrateGetKeys: the key argument, or the keys after
        // KEYS (AUTH's and AUTH2's arguments skipped); none for KEYS after
        // a non-empty key, which MIGRATE refuses.
        "migrate" if n > 3 => {
            let mut keys = vec![3];
            let mut i = 6;
            while i < n {
                let arg = args.get(i);
                if is(arg, "keys") {
                    keys = if args.get(3).is_empty() {
                        (i + 1..n).collect()
                    } else {
                        Vec::new()
                    };
                    break;
                } else if is(arg, "auth") {
                    i += 1;
                } else if is(arg, "auth2") {
                    i += 2;
                }
                i += 1;
            }
            keys
        }
        _ => fixed_positions(spec, n),
    })
}

/// Positions from the spec's (first, last, step).
pub fn fixed_positions(spec: &CommandSpec, n: usize) -> Vec<usize> {
    let (first, last, step) = spec.keys;
    if first <= 0 || n <= first as usize {
        return Vec::new();
    }
    let last = if last < 0 {
        n as i32 + last
    } else {
        last.min(n as i32 - 1)
    };
    (first..=last)
        .step_by(step.max(1) as usize)
        .map(|i| i as usize)
        .collect()
}
