//! Set algebra over sorted sets (and plain sets, whose members score 1):
//! ZUNION, ZINTER, ZDIFF, ZINTERCARD and the *STORE forms, as Redis's
//! `zunionInterDiffGenericCommand` does them: the sources' types are checked
//! before the options are parsed, union and intersection visit the sources
//! smallest first (which fixes the order of the floating-point sums), a
//! difference keeps the first source's scores.

use std::collections::HashMap;

use engram_collections::types::{Set, SortedSet};

use super::{notify_stored, reply_members, score_or_zero, store_result, Stored};
use crate::commands::{
    err, int_arg, is, CmdError, CmdResult, CommandSpec, Ctx, Group, READONLY, SYNTAX, WRITE,
};
use crate::keyspace::{self, CKind, Object, Txn};
use crate::resp::Args;

pub(super) fn commands(g: &Group) -> Vec<CommandSpec> {
    // Keys: every argument from the first source on (options included,
    // which only widens what EXEC locks), as the other numkeys commands.
    let stored = (1, -1, 1);
    let read = (2, -1, 1);
    vec![
        g.command(
            "zunionstore",
            -4,
            WRITE,
            stored,
            zunionstore,
            "Stores the union of sorted sets in a key.",
        ),
        g.command(
            "zinterstore",
            -4,
            WRITE,
            stored,
            zinterstore,
            "Stores the intersection of sorted sets in a key.",
        ),
        g.command(
            "zdiffstore",
            -4,
            WRITE,
            stored,
            zdiffstore,
            "Stores the difference of sorted sets in a key.",
        ),
        g.command(
            "zunion",
            -3,
            READONLY,
            read,
            zunion,
            "Returns the union of sorted sets.",
        ),
        g.command(
            "zinter",
            -3,
            READONLY,
            read,
            zinter,
            "Returns the intersection of sorted sets.",
        ),
        g.command(
            "zdiff",
            -3,
            READONLY,
            read,
            zdiff,
            "Returns the difference between sorted sets.",
        ),
        g.command(
            "zintercard",
            -3,
            READONLY,
            read,
            zintercard,
            "Returns the number of members of the intersection of sorted sets.",
        ),
    ]
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

/// The event a *STORE sends for its destination.
fn store_event(op: SetOp) -> &'static str {
    match op {
        SetOp::Union => "zunionstore",
        SetOp::Inter => "zinterstore",
        SetOp::Diff => "zdiffstore",
    }
}

/// What the command does with the result.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    Store,
    Reply,
    Cardinality,
}

fn zunionstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    zsetop(ctx, args, SetOp::Union, Output::Store, "zunionstore")
}

fn zinterstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    zsetop(ctx, args, SetOp::Inter, Output::Store, "zinterstore")
}

fn zdiffstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    zsetop(ctx, args, SetOp::Diff, Output::Store, "zdiffstore")
}

fn zunion(ctx: &mut Ctx, args: Args) -> CmdResult {
    zsetop(ctx, args, SetOp::Union, Output::Reply, "zunion")
}

fn zinter(ctx: &mut Ctx, args: Args) -> CmdResult {
    zsetop(ctx, args, SetOp::Inter, Output::Reply, "zinter")
}

fn zdiff(ctx: &mut Ctx, args: Args) -> CmdResult {
    zsetop(ctx, args, SetOp::Diff, Output::Reply, "zdiff")
}

fn zintercard(ctx: &mut Ctx, args: Args) -> CmdResult {
    zsetop(ctx, args, SetOp::Inter, Output::Cardinality, "zintercard")
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// Redis's `zunionInterAggregate`: a NaN sum (inf + -inf) is 0, and a
    /// NaN value never wins MIN or MAX.
    fn apply(self, target: &mut f64, value: f64) {
        match self {
            Aggregate::Sum => {
                *target += value;
                if target.is_nan() {
                    *target = 0.0;
                }
            }
            Aggregate::Min => {
                if value < *target {
                    *target = value;
                }
            }
            Aggregate::Max => {
                if value > *target {
                    *target = value;
                }
            }
        }
    }
}

/// A source: a sorted set, or a set whose members all score 1.
enum Source<'o> {
    Absent,
    Sorted(&'o SortedSet),
    Plain(&'o Set),
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::Absent => 0,
            Source::Sorted(zset) => zset.len(),
            Source::Plain(set) => set.len(),
        }
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            Source::Absent => None,
            Source::Sorted(zset) => zset.score(member),
            Source::Plain(set) => set.contains(member).then_some(1.0),
        }
    }

    fn for_each(&self, mut f: impl FnMut(&[u8], f64)) {
        match self {
            Source::Absent => {}
            Source::Sorted(zset) => zset.iter().for_each(|(member, score)| f(member, score)),
            Source::Plain(set) => set.iter().for_each(|member| f(member, 1.0)),
        }
    }
}

/// Reads a source key: a sorted set or a set; any other type is WRONGTYPE.
fn source<'t>(
    txn: &'t mut Txn<'_>,
    db: usize,
    key: &[u8],
    now: u64,
) -> Result<Source<'t>, CmdError> {
    // Look first without borrowing the object, to pick the kind to ask for.
    let kind = match txn.collection(db, key, CKind::SortedSet, now) {
        Ok(None) => return Ok(Source::Absent),
        Ok(Some(_)) => CKind::SortedSet,
        Err(keyspace::Error::WrongType) => CKind::Set,
        Err(e) => return Err(e.into()),
    };
    Ok(match txn.collection(db, key, kind, now)? {
        Some(Object::SortedSet(zset)) => Source::Sorted(zset),
        Some(Object::Set(set)) => Source::Plain(set),
        _ => Source::Absent,
    })
}

/// The options after the keys.
struct Options {
    weights: Vec<f64>,
    aggregate: Aggregate,
    withscores: bool,
    /// ZINTERCARD's LIMIT; 0: none.
    limit: u64,
}

/// `[WEIGHTS w...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES] [LIMIT n]`, each
/// where the command allows it, in any order and repeatable.
fn parse_options(
    args: &Args,
    mut at: usize,
    numkeys: usize,
    op: SetOp,
    output: Output,
) -> Result<Options, CmdError> {
    let mut options = Options {
        weights: vec![1.0; numkeys],
        aggregate: Aggregate::Sum,
        withscores: false,
        limit: 0,
    };
    let algebra = op != SetOp::Diff && output != Output::Cardinality;
    while at < args.len() {
        let remaining = args.len() - at;
        let arg = args.get(at);
        if algebra && remaining > numkeys && is(arg, "weights") {
            for (i, weight) in options.weights.iter_mut().enumerate() {
                *weight = super::parse_score(args.get(at + 1 + i))
                    .ok_or_else(|| err("ERR weight value is not a float"))?;
            }
            at += 1 + numkeys;
        } else if algebra && remaining >= 2 && is(arg, "aggregate") {
            let which = args.get(at + 1);
            options.aggregate = if is(which, "sum") {
                Aggregate::Sum
            } else if is(which, "min") {
                Aggregate::Min
            } else if is(which, "max") {
                Aggregate::Max
            } else {
                return Err(err(SYNTAX));
            };
            at += 2;
        } else if output == Output::Reply && is(arg, "withscores") {
            options.withscores = true;
            at += 1;
        } else if output == Output::Cardinality && remaining >= 2 && is(arg, "limit") {
            // Redis's getPositiveLongFromObjectOrReply with a message of
            // its own: the same text for a negative and a non-number.
            options.limit = crate::resp::parse_int(args.get(at + 1))
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| err("ERR LIMIT can't be negative"))?;
            at += 2;
        } else {
            return Err(err(SYNTAX));
        }
    }
    Ok(options)
}

fn zsetop(ctx: &mut Ctx, args: Args, op: SetOp, output: Output, name: &str) -> CmdResult {
    let numkeys_at = if output == Output::Store { 2 } else { 1 };
    let numkeys = int_arg(args.get(numkeys_at))?;
    if numkeys < 1 {
        return Err(err(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        )));
    }
    if numkeys > (args.len() - numkeys_at - 1) as i64 {
        return Err(err(SYNTAX));
    }
    let numkeys = numkeys as usize;
    let first = numkeys_at + 1;
    let sources: Vec<&[u8]> = args.iter().skip(first).take(numkeys).collect();
    let dst = (output == Output::Store).then(|| args.get(1));
    let mut locked: Vec<&[u8]> = Vec::with_capacity(numkeys + 1);
    locked.extend(dst);
    locked.extend(&sources);
    let (result, count, withscores) = ctx.write(&locked, false, |txn, db, now| {
        // Types first (as Redis: WRONGTYPE before any option error).
        let mut lens = Vec::with_capacity(sources.len());
        for key in &sources {
            lens.push(source(txn, db, key, now)?.len());
        }
        let options = parse_options(&args, first + numkeys, numkeys, op, output)?;
        let (result, count) = compute(txn, db, now, &sources, &lens, op, &options)?;
        let stored = match dst {
            Some(dst) => store_result(txn, db, now, dst, result)?,
            None if output == Output::Cardinality => Stored {
                len: count,
                deleted: false,
            },
            None => {
                return Ok((
                    Some(result),
                    Stored {
                        len: 0,
                        deleted: false,
                    },
                    options.withscores,
                ));
            }
        };
        Ok((None, stored, false))
    })?;
    if let Some(dst) = dst {
        notify_stored(ctx, store_event(op), dst, count);
    }
    let count = count.len;
    match result {
        Some(result) => reply_members(ctx.out, result.iter(), withscores),
        None => ctx.out.int(count as i64),
    }
    Ok(())
}

/// The result set, and for ZINTERCARD (which builds no set) the count.
fn compute(
    txn: &mut Txn<'_>,
    db: usize,
    now: u64,
    sources: &[&[u8]],
    lens: &[usize],
    op: SetOp,
    options: &Options,
) -> Result<(SortedSet, usize), CmdError> {
    let weights = &options.weights;
    let aggregate = options.aggregate;
    let weighted = |score: f64, weight: f64| {
        let value = score * weight;
        if value.is_nan() {
            0.0
        } else {
            value
        }
    };
    let mut result = SortedSet::new();
    match op {
        SetOp::Inter => {
            // Smallest first, as Redis does (it fixes the order of the sums).
            let mut order: Vec<usize> = (0..sources.len()).collect();
            order.sort_by_key(|&i| lens[i]);
            let first = order[0];
            if lens[first] == 0 {
                return Ok((result, 0));
            }
            let mut candidates: Vec<(Box<[u8]>, f64)> = Vec::with_capacity(lens[first]);
            source(txn, db, sources[first], now)?.for_each(|member, score| {
                candidates.push((member.into(), weighted(score, weights[first])));
            });
            for &i in &order[1..] {
                let src = source(txn, db, sources[i], now)?;
                candidates.retain_mut(|(member, total)| match src.score(member) {
                    Some(score) => {
                        aggregate.apply(total, score * weights[i]);
                        true
                    }
                    None => false,
                });
                if candidates.is_empty() {
                    break;
                }
            }
            if options.limit > 0 {
                let limit = usize::try_from(options.limit).unwrap_or(usize::MAX);
                candidates.truncate(limit);
            }
            let count = candidates.len();
            for (member, total) in candidates {
                result.insert(&member, score_or_zero(total));
            }
            Ok((result, count))
        }
        SetOp::Union => {
            let mut order: Vec<usize> = (0..sources.len()).collect();
            order.sort_by_key(|&i| lens[i]);
            let mut totals: HashMap<Box<[u8]>, f64> = HashMap::new();
            for &i in &order {
                source(txn, db, sources[i], now)?.for_each(|member, score| {
                    let value = weighted(score, weights[i]);
                    match totals.get_mut(member) {
                        Some(total) => aggregate.apply(total, value),
                        None => {
                            totals.insert(member.into(), value);
                        }
                    }
                });
            }
            let count = totals.len();
            for (member, total) in totals {
                result.insert(&member, score_or_zero(total));
            }
            Ok((result, count))
        }
        SetOp::Diff => {
            // The first source's members that no other source holds, with
            // their own scores (no weights).
            let mut kept: Vec<(Box<[u8]>, f64)> = Vec::new();
            source(txn, db, sources[0], now)?.for_each(|member, score| {
                kept.push((member.into(), score));
            });
            for key in &sources[1..] {
                if kept.is_empty() {
                    break;
                }
                let src = source(txn, db, key, now)?;
                kept.retain(|(member, _)| src.score(member).is_none());
            }
            let count = kept.len();
            for (member, score) in kept {
                result.insert(&member, score_or_zero(score));
            }
            Ok((result, count))
        }
    }
}
