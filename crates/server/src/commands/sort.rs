//! SORT and SORT_RO (Redis 7.0 semantics) over lists, sets and sorted
//! sets: numeric or ALPHA order, BY a pattern of other keys (strings, or
//! hash fields with `->`; a pattern without `*` means no sorting), LIMIT,
//! GET patterns (`#` for the element itself) and STORE into a list.
//!
//! Redis 7.0 refuses BY with a pattern, and GET, in cluster mode and to
//! users without access to every key; Engram has neither a cluster mode
//! (`cluster-enabled` is always `no`) nor ACL users, so it always allows
//! them, as Redis does outside those cases.
//!
//! The source is copied out first, then the BY and GET keys are read one
//! by one (lock-free outside EXEC; inside EXEC the command holds the whole
//! keyspace, since those keys come from the data). A STORE then writes the
//! destination under its own lock.

use std::cmp::Ordering;

use engram_collections::types::List;
use engram_collections::Op;

use super::{
    err, int_arg, is, CmdError, CmdResult, CommandSpec, Ctx, Group, READONLY, SYNTAX,
    WHOLE_KEYSPACE, WRITE,
};
use crate::keyspace::ckey;
use crate::keyspace::value::{Kind, StringValue};
use crate::keyspace::{CKind, Object};
use crate::notify;
use crate::resp::Args;

pub fn commands() -> Vec<CommandSpec> {
    let g = Group("generic");
    let one = (1, 1, 1);
    vec![
        g.command(
            "sort",
            -2,
            WRITE | WHOLE_KEYSPACE,
            one,
            sort,
            "Sorts the elements in a list, a set, or a sorted set, optionally storing the \
             result.",
        ),
        g.command(
            "sort_ro",
            -2,
            READONLY | WHOLE_KEYSPACE,
            one,
            sort_ro,
            "Returns the sorted elements of a list, a set, or a sorted set.",
        ),
    ]
}

fn sort(ctx: &mut Ctx, args: Args) -> CmdResult {
    sort_generic(ctx, args, false)
}

fn sort_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    sort_generic(ctx, args, true)
}

/// The parsed options.
struct Options<'a> {
    desc: bool,
    alpha: bool,
    limit_start: i64,
    limit_count: i64,
    by: Option<&'a [u8]>,
    /// BY a pattern without `*`: keep the source's own order.
    dontsort: bool,
    gets: Vec<&'a [u8]>,
    store: Option<&'a [u8]>,
}

/// `every_key`: the user may read every key (SORT's BY and GET read keys
/// the data names, which no ACL key pattern check could cover).
fn parse_options<'a>(
    args: &Args<'a>,
    readonly: bool,
    every_key: bool,
) -> Result<Options<'a>, CmdError> {
    let mut options = Options {
        desc: false,
        alpha: false,
        limit_start: 0,
        limit_count: -1,
        by: None,
        dontsort: false,
        gets: Vec::new(),
        store: None,
    };
    let mut j = 2;
    while j < args.len() {
        let arg = args.get(j);
        let left = args.len() - j - 1;
        if is(arg, "asc") {
            options.desc = false;
        } else if is(arg, "desc") {
            options.desc = true;
        } else if is(arg, "alpha") {
            options.alpha = true;
        } else if is(arg, "limit") && left >= 2 {
            options.limit_start = int_arg(args.get(j + 1))?;
            options.limit_count = int_arg(args.get(j + 2))?;
            j += 2;
        } else if !readonly && is(arg, "store") && left >= 1 {
            options.store = Some(args.get(j + 1));
            j += 1;
        } else if is(arg, "by") && left >= 1 {
            let pattern = args.get(j + 1);
            options.by = Some(pattern);
            options.dontsort = !pattern.contains(&b'*');
            if !options.dontsort && !every_key {
                return Err(err(
                    "ERR BY option of SORT denied due to insufficient ACL permissions.",
                ));
            }
            j += 1;
        } else if is(arg, "get") && left >= 1 {
            if !every_key {
                return Err(err(
                    "ERR GET option of SORT denied due to insufficient ACL permissions.",
                ));
            }
            options.gets.push(args.get(j + 1));
            j += 1;
        } else {
            return Err(err(SYNTAX));
        }
        j += 1;
    }
    Ok(options)
}

/// What the sort reads: its elements in the source's own order.
enum Source {
    List(Vec<Box<[u8]>>),
    Set(Vec<Box<[u8]>>),
    /// Members in score order.
    SortedSet(Vec<Box<[u8]>>),
}

fn read_source(ctx: &mut Ctx, key: &[u8]) -> Result<Source, CmdError> {
    let Some(kind) = ctx.read(key, |meta, _| Ok(meta.kind()))? else {
        return Ok(Source::List(Vec::new()));
    };
    let ckind = match kind {
        Kind::List => CKind::List,
        Kind::Set => CKind::Set,
        Kind::SortedSet => CKind::SortedSet,
        _ => return Err(err(super::WRONGTYPE)),
    };
    ctx.read_collection(key, ckind, |object| {
        Ok(match object {
            Some(Object::List(list)) => Source::List(list.iter().map(Box::from).collect()),
            Some(Object::Set(set)) => Source::Set(set.iter().map(Box::from).collect()),
            Some(Object::SortedSet(zset)) => {
                Source::SortedSet(zset.iter().map(|(member, _)| Box::from(member)).collect())
            }
            // Deleted (or retyped) in between: as if absent.
            _ => Source::List(Vec::new()),
        })
    })
}

/// The value a BY or GET pattern names for `element`: `#` is the element
/// itself; otherwise the first `*` is replaced by the element, and a `->`
/// after it names a hash field. A pattern without `*`, a missing key or
/// one of another type: None.
fn lookup(ctx: &mut Ctx, pattern: &[u8], element: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
    if pattern == b"#" {
        return Ok(Some(element.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else {
        return Ok(None);
    };
    let after = &pattern[star + 1..];
    let arrow = after
        .windows(2)
        .position(|w| w == b"->")
        .filter(|&at| at + 2 < after.len());
    let (postfix, field) = match arrow {
        Some(at) => (&after[..at], Some(&after[at + 2..])),
        None => (after, None),
    };
    let mut key = Vec::with_capacity(pattern.len() + element.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(postfix);
    let Some(kind) = ctx.read(&key, |meta, _| Ok(meta.kind()))? else {
        return Ok(None);
    };
    match (field, kind) {
        (None, Kind::String) => ctx.read(&key, |meta, payload| {
            Ok(StringValue::from_payload(meta, payload).to_bytes())
        }),
        (Some(field), Kind::Hash) => ctx.read_collection(&key, CKind::Hash, |object| {
            Ok(match object {
                Some(Object::Hash(hash)) => hash.get(field).map(<[u8]>::to_vec),
                _ => None,
            })
        }),
        _ => Ok(None),
    }
}

/// A number as SORT reads one (`strtod` over the whole text: leading
/// blanks allowed, an empty text is 0; no NaN, no overflow or underflow).
fn sort_number(text: &[u8]) -> Option<f64> {
    let start = text
        .iter()
        .position(|&b| !(b.is_ascii_whitespace() || b == 0x0b))
        .unwrap_or(text.len());
    let text = std::str::from_utf8(&text[start..]).ok()?;
    if text.is_empty() {
        return Some(0.0);
    }
    let value: f64 = text.parse().ok()?;
    if value.is_nan() {
        return None;
    }
    let unsigned = text.trim_start_matches(['+', '-']);
    if value.is_infinite()
        && !unsigned.eq_ignore_ascii_case("inf")
        && !unsigned.eq_ignore_ascii_case("infinity")
    {
        return None;
    }
    let mantissa_nonzero = unsigned
        .bytes()
        .take_while(|&b| b != b'e' && b != b'E')
        .any(|b| (b'1'..=b'9').contains(&b));
    if value == 0.0 && mantissa_nonzero {
        return None;
    }
    Some(value)
}

/// One element with what it sorts by.
struct Item {
    element: Box<[u8]>,
    score: f64,
    /// ALPHA BY: the looked-up value (None: missing, sorts first).
    by_value: Option<Vec<u8>>,
}

fn sort_generic(ctx: &mut Ctx, args: Args, readonly: bool) -> CmdResult {
    let every_key = {
        let (index, spec) = super::lookup(args.get(0)).expect("SORT is in the table");
        crate::acl::may_read_every_key(&ctx.session.user.rules(), index, spec, &args)
    };
    let mut options = parse_options(&args, readonly, every_key)?;
    let source = read_source(ctx, args.get(1))?;
    // A set has no order of its own: to store it, or to hand it to a
    // script (replicas, and a script's effects, must agree), sort it by
    // its elements.
    if options.dontsort
        && matches!(source, Source::Set(_))
        && (options.store.is_some() || ctx.session.in_script)
    {
        options.dontsort = false;
        options.alpha = true;
        options.by = None;
    }
    let (elements, ordered) = match source {
        Source::List(e) | Source::SortedSet(e) => (e, true),
        Source::Set(e) => (e, false),
    };
    let len = elements.len() as i64;
    // Redis's LIMIT clamping.
    let mut start = options.limit_start.clamp(0, len);
    let count = options.limit_count.clamp(-1, len);
    let mut end = if count < 0 {
        len - 1
    } else {
        start + count - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    let mut items: Vec<Item> = elements
        .into_iter()
        .map(|element| Item {
            element,
            score: 0.0,
            by_value: None,
        })
        .collect();
    if options.dontsort {
        // The source's own order (a sorted set's or list's, reversed by
        // DESC); a set keeps whatever order it iterates in.
        if ordered && options.desc {
            items.reverse();
        }
    } else {
        let mut conversion_error = false;
        for item in &mut items {
            let value = match options.by {
                Some(pattern) => match lookup(ctx, pattern, &item.element)? {
                    Some(value) => value,
                    None => continue,
                },
                None => item.element.to_vec(),
            };
            if options.alpha {
                if options.by.is_some() {
                    item.by_value = Some(value);
                }
            } else {
                match sort_number(&value) {
                    Some(score) => item.score = score,
                    None => conversion_error = true,
                }
            }
        }
        let by_pattern = options.by.is_some();
        let alpha = options.alpha;
        items.sort_by(|a, b| {
            let cmp = if !alpha {
                a.score
                    .partial_cmp(&b.score)
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| a.element.cmp(&b.element))
            } else if by_pattern {
                // Byte order: Redis's strcoll under the C locale (and its
                // binary compare when storing); a missing value first.
                a.by_value.cmp(&b.by_value)
            } else {
                a.element.cmp(&b.element)
            };
            if options.desc {
                cmp.reverse()
            } else {
                cmp
            }
        });
        if conversion_error {
            return Err(err("ERR One or more scores can't be converted into double"));
        }
    }
    let selected: &[Item] = if end >= start {
        &items[start as usize..=end as usize]
    } else {
        &[]
    };
    // The output: the elements, or per element each GET's value.
    let mut output: Vec<Option<Vec<u8>>> = Vec::new();
    for item in selected {
        if options.gets.is_empty() {
            output.push(Some(item.element.to_vec()));
        }
        for pattern in &options.gets {
            output.push(lookup(ctx, pattern, &item.element)?);
        }
    }
    match options.store {
        None => {
            ctx.out.array(output.len());
            for value in &output {
                match value {
                    Some(value) => ctx.out.bulk(value),
                    None => ctx.out.null(),
                }
            }
        }
        Some(dst) => {
            let n = output.len();
            let deleted = ctx.write(&[dst], false, |txn, db, now| {
                if n == 0 {
                    return Ok(txn.delete(db, dst, now)?);
                } else {
                    let mut list = List::new();
                    list.push_back(
                        output
                            .into_iter()
                            .map(|value| value.unwrap_or_default().into_boxed_slice()),
                    );
                    txn.log(vec![Op::Replace {
                        key: ckey(db, dst)?,
                        object: Object::List(list),
                    }])?;
                }
                Ok(false)
            })?;
            if n > 0 {
                ctx.notify(notify::LIST, "sortstore", dst);
            } else if deleted {
                ctx.notify(notify::GENERIC, "del", dst);
            }
            ctx.out.int(n as i64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::sort_number;

    #[test]
    fn numbers_as_strtod_reads_them() {
        assert_eq!(sort_number(b"1.5"), Some(1.5));
        assert_eq!(sort_number(b"  -2"), Some(-2.0));
        assert_eq!(sort_number(b""), Some(0.0));
        assert_eq!(sort_number(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(sort_number(b"1e999"), None);
        assert_eq!(sort_number(b"1x"), None);
        assert_eq!(sort_number(b"nan"), None);
    }
}
