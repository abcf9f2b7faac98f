//! Redis 7.0's key specifications: for each command (and each subcommand,
//! named `container|name`) where its keys are and what it does with them
//! (RO/RW/OW/RM, access/update/insert/delete). COMMAND INFO shows them, and
//! COMMAND GETKEYS and GETKEYSANDFLAGS find a call's keys with them as
//! Redis does (`keys_with_flags`): by the specs; where a spec cannot say
//! (its keys follow a keyword anywhere, or depend on stored data: SORT's
//! STORE, MIGRATE's KEYS) or a key's flags depend on the arguments (SET
//! with GET, BITFIELD with only GETs), by the command's own key finder
//! (`key_finder`), with the flags Redis's getkeys functions give.
//!
//! The table states Redis's facts about its command interface (the key
//! specs of its commands) in Engram's own form; Redis's notes on them are
//! not carried.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::{is, key_finder, CommandSpec};
use crate::resp::Args;

pub const RO: u16 = 1;
pub const RW: u16 = 1 << 1;
pub const OW: u16 = 1 << 2;
pub const RM: u16 = 1 << 3;
pub const ACCESS: u16 = 1 << 4;
pub const UPDATE: u16 = 1 << 5;
pub const INSERT: u16 = 1 << 6;
pub const DELETE: u16 = 1 << 7;
pub const NOT_KEY: u16 = 1 << 8;
pub const INCOMPLETE: u16 = 1 << 9;
pub const VARIABLE_FLAGS: u16 = 1 << 10;

/// The flags' names, in the order Redis replies them.
const FLAG_NAMES: [(u16, &str); 11] = [
    (RO, "RO"),
    (RW, "RW"),
    (OW, "OW"),
    (RM, "RM"),
    (ACCESS, "access"),
    (UPDATE, "update"),
    (INSERT, "insert"),
    (DELETE, "delete"),
    (NOT_KEY, "not_key"),
    (INCOMPLETE, "incomplete"),
    (VARIABLE_FLAGS, "variable_flags"),
];

pub fn flag_names(flags: u16) -> Vec<&'static str> {
    FLAG_NAMES
        .iter()
        .filter(|(flag, _)| flags & flag != 0)
        .map(|&(_, name)| name)
        .collect()
}

/// Where the search for a spec's keys begins.
#[derive(Clone, Copy, Debug)]
pub enum Begin {
    /// At this argument (the command's name is 0).
    Index(i32),
    /// After this keyword, searched from `startfrom` (negative: from the
    /// end, backwards).
    Keyword(&'static str, i32),
    Unknown,
}

/// Which arguments from there are keys.
#[derive(Clone, Copy, Debug)]
pub enum Find {
    /// `lastkey` (relative to the first key; negative: from the end),
    /// `keystep`, `limit` (with lastkey -1: the keys are the first
    /// 1/limit of the rest).
    Range(i32, i32, i32),
    /// The argument at `keynumidx` (relative) counts the keys, which start
    /// at `firstkey` (relative), every `keystep`.
    Keynum(i32, i32, i32),
    Unknown,
}

#[derive(Clone, Copy, Debug)]
pub struct KeySpec {
    pub flags: u16,
    pub begin: Begin,
    pub find: Find,
}

impl KeySpec {
    const fn new(flags: u16, begin: Begin, find: Find) -> KeySpec {
        KeySpec { flags, begin, find }
    }
}

static BY_NAME: LazyLock<HashMap<&'static str, &'static [KeySpec]>> =
    LazyLock::new(|| KEY_SPECS.iter().copied().collect());

/// The key specs of command `name` (`container|sub` for a subcommand);
/// empty for a command without keys.
pub fn of(name: &str) -> &'static [KeySpec] {
    BY_NAME.get(name).copied().unwrap_or_default()
}

/// COMMAND INFO's first key, last key and step, and whether the keys are
/// movable (`movablekeys`), worked out from the specs as Redis's
/// populateCommandLegacyRangeSpec does: one plain range spec is the range;
/// else the consecutive plain ranges joined; any other spec (keyword,
/// keynum, unknown, incomplete) makes the keys movable.
pub fn legacy_range(name: &str) -> ((i64, i64, i64), bool) {
    let specs = of(name);
    if let [spec] = specs {
        if let (Begin::Index(pos), Find::Range(lastkey, step, _)) = (spec.begin, spec.find) {
            let last = if lastkey >= 0 { pos + lastkey } else { lastkey };
            let range = (pos.into(), last.into(), step.into());
            return (range, spec.flags & INCOMPLETE != 0);
        }
    }
    let (mut first, mut last, mut prev_last) = (i32::MAX, 0i32, 0i32);
    let mut movable = false;
    for spec in specs {
        let (Begin::Index(pos), Find::Range(lastkey, step, _)) = (spec.begin, spec.find) else {
            movable = true;
            continue;
        };
        if step != 1 || (prev_last != 0 && prev_last != pos - 1) {
            movable = true;
            continue;
        }
        movable |= spec.flags & INCOMPLETE != 0;
        first = first.min(pos);
        let absolute = if lastkey >= 0 { lastkey + pos } else { lastkey };
        // Compared as unsigned, as in Redis: a negative (from the end)
        // last key wins.
        last = (last as u32).max(absolute as u32) as i32;
        prev_last = last;
    }
    if first == i32::MAX {
        return ((0, 0, 0), movable || !specs.is_empty());
    }
    ((first.into(), last.into(), 1), movable)
}

/// Whether a command may have keys at all (Redis's doesCommandHaveKeys):
/// a spec of a real key, or a key finder of its own.
pub fn has_keys(name: &str, spec: Option<&CommandSpec>) -> bool {
    of(name).iter().any(|s| s.flags & NOT_KEY == 0) || spec.is_some_and(key_finder::is_movable)
}

/// The keys of a call of `name` (`spec` for a top-level command) with
/// their flags, as Redis's getKeysFromCommandWithSpecs finds them: by the
/// specs unless one cannot say or the flags vary; then by the command's
/// key finder. Empty when the arguments name none (or are malformed).
pub fn keys_with_flags(name: &str, spec: Option<&CommandSpec>, args: &Args) -> Vec<(usize, u16)> {
    let specs = of(name);
    let variable = specs.iter().any(|s| s.flags & VARIABLE_FLAGS != 0);
    if specs.iter().any(|s| s.flags & NOT_KEY == 0) && !variable {
        if let Some(keys) = search(specs, args) {
            return keys;
        }
    }
    match spec {
        Some(spec) if key_finder::is_movable(spec) || variable => by_key_finder(spec, args),
        _ => Vec::new(),
    }
}

/// Redis's getKeysUsingKeySpecs; None where a spec cannot say (unknown,
/// incomplete, or arguments that do not fit it).
fn search(specs: &[KeySpec], args: &Args) -> Option<Vec<(usize, u16)>> {
    let argc = args.len() as i64;
    let mut keys = Vec::new();
    for spec in specs {
        if spec.flags & NOT_KEY != 0 {
            continue;
        }
        let first = match spec.begin {
            Begin::Index(pos) => i64::from(pos),
            Begin::Keyword(keyword, startfrom) => {
                let startfrom = i64::from(startfrom);
                // As Redis: forwards up to the last argument but one,
                // backwards down to the second (a keyword needs a key on
                // its far side).
                let found = if startfrom > 0 {
                    (startfrom..argc - 1).find(|&i| is(args.get(i as usize), keyword))
                } else {
                    (2..=argc + startfrom)
                        .rev()
                        .find(|&i| is(args.get(i as usize), keyword))
                };
                match found {
                    Some(at) => at + 1,
                    // No keyword: this spec names no keys in this call.
                    None => continue,
                }
            }
            Begin::Unknown => return None,
        };
        let (first, last, step) = match spec.find {
            Find::Range(lastkey, step, limit) => {
                let (lastkey, limit) = (i64::from(lastkey), i64::from(limit));
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc + lastkey
                } else {
                    first + ((argc - first) / limit + lastkey)
                };
                (first, last, i64::from(step))
            }
            Find::Keynum(keynumidx, firstkey, step) => {
                let at = first + i64::from(keynumidx);
                if at >= argc {
                    return None;
                }
                let count = std::str::from_utf8(args.get(at as usize))
                    .ok()?
                    .parse::<i64>()
                    .ok()
                    .filter(|&n| n >= 0)?;
                let first = first + i64::from(firstkey);
                (first, first + count - 1, i64::from(step))
            }
            Find::Unknown => return None,
        };
        if last >= argc || last < first || first >= argc {
            return None;
        }
        let mut i = first;
        while i <= last {
            keys.push((i as usize, spec.flags));
            i += step.max(1);
        }
        if spec.flags & INCOMPLETE != 0 {
            return None;
        }
    }
    Some(keys)
}

/// The key finder's positions with the flags Redis's getkeys functions
/// give them (none, where Redis's give none).
fn by_key_finder(spec: &CommandSpec, args: &Args) -> Vec<(usize, u16)> {
    let positions = key_finder::key_positions(spec, args).unwrap_or_default();
    positions
        .into_iter()
        .map(|i| {
            let flags = match spec.name {
                // SET with GET reads the old value.
                "set" if (3..args.len()).any(|j| is(args.get(j), "get")) => RW | ACCESS | UPDATE,
                "set" => OW | UPDATE,
                "bitfield" if bitfield_reads_only(args) => RO | ACCESS,
                "bitfield" => RW | ACCESS | UPDATE,
                "sort" if i > 1 => OW | UPDATE,
                "sort" | "sort_ro" => RO | ACCESS,
                "migrate" => RW | ACCESS | DELETE,
                _ => 0,
            };
            (i, flags)
        })
        .collect()
}

/// Redis's bitfieldGetKeys: read-only when every operation is a GET (an
/// unknown word counts as a write, as there).
fn bitfield_reads_only(args: &Args) -> bool {
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - i - 1;
        let arg = args.get(i);
        if is(arg, "get") && more >= 2 {
            i += 3;
        } else if is(arg, "overflow") && more >= 1 {
            i += 2;
        } else {
            return false;
        }
    }
    true
}

#[rustfmt::skip]
static KEY_SPECS: &[(&str, &[KeySpec])] = &[
    ("append", &[KeySpec::new(RW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("bitcount", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("bitfield", &[KeySpec::new(RW | UPDATE | ACCESS | VARIABLE_FLAGS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("bitfield_ro", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("bitop", &[KeySpec::new(OW | UPDATE, Begin::Index(2), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(3), Find::Range(-1, 1, 0))]),
    ("bitpos", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("blmove", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RW | INSERT, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("blmpop", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("blpop", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(-2, 1, 0))]),
    ("brpop", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(-2, 1, 0))]),
    ("brpoplpush", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RW | INSERT, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("bzmpop", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("bzpopmax", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(-2, 1, 0))]),
    ("bzpopmin", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(-2, 1, 0))]),
    ("copy", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(OW | UPDATE, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("decr", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("decrby", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("del", &[KeySpec::new(RM | DELETE, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("dump", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("eval", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("eval_ro", &[KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("evalsha", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("evalsha_ro", &[KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("fcall", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("fcall_ro", &[KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("exists", &[KeySpec::new(RO, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("expire", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("expireat", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("expiretime", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("geoadd", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("geodist", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("geohash", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("geopos", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("georadius", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(OW | UPDATE, Begin::Keyword("STORE", 6), Find::Range(0, 1, 0)), KeySpec::new(OW | UPDATE, Begin::Keyword("STOREDIST", 6), Find::Range(0, 1, 0))]),
    ("georadius_ro", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("georadiusbymember", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(OW | UPDATE, Begin::Keyword("STORE", 5), Find::Range(0, 1, 0)), KeySpec::new(OW | UPDATE, Begin::Keyword("STOREDIST", 5), Find::Range(0, 1, 0))]),
    ("georadiusbymember_ro", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("geosearch", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("geosearchstore", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("get", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("getbit", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("getdel", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("getex", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("getrange", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("getset", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hdel", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hexists", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hget", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hgetall", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hincrby", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hincrbyfloat", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hkeys", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hlen", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hmget", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hmset", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hrandfield", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hscan", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hset", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hsetnx", &[KeySpec::new(RW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hstrlen", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("hvals", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("incr", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("incrby", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("incrbyfloat", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("lcs", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(1, 1, 0))]),
    ("lindex", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("linsert", &[KeySpec::new(RW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("llen", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("lmove", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RW | INSERT, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("lmpop", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Keynum(0, 1, 1))]),
    ("lpop", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("lpos", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("lpush", &[KeySpec::new(RW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("lpushx", &[KeySpec::new(RW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("lrange", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("lrem", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("lset", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("ltrim", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("mget", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("migrate", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(3), Find::Range(0, 1, 0)), KeySpec::new(RW | ACCESS | DELETE | INCOMPLETE, Begin::Keyword("KEYS", -2), Find::Range(-1, 1, 0))]),
    ("move", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("mset", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(-1, 2, 0))]),
    ("msetnx", &[KeySpec::new(OW | INSERT, Begin::Index(1), Find::Range(-1, 2, 0))]),
    ("persist", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("pexpire", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("pexpireat", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("pexpiretime", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("pfadd", &[KeySpec::new(RW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("pfcount", &[KeySpec::new(RW | ACCESS, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("pfdebug", &[KeySpec::new(RW | ACCESS, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("pfmerge", &[KeySpec::new(RW | ACCESS | INSERT, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Range(-1, 1, 0))]),
    ("psetex", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("pttl", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("rename", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(OW | UPDATE, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("renamenx", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(OW | INSERT, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("restore", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("rpop", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("rpoplpush", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RW | INSERT, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("rpush", &[KeySpec::new(RW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("rpushx", &[KeySpec::new(RW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("sadd", &[KeySpec::new(RW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("scard", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("sdiff", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("sdiffstore", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Range(-1, 1, 0))]),
    ("set", &[KeySpec::new(RW | ACCESS | UPDATE | VARIABLE_FLAGS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("setbit", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("setex", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("setnx", &[KeySpec::new(OW | INSERT, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("setrange", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("sinter", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("sintercard", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Keynum(0, 1, 1))]),
    ("sinterstore", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Range(-1, 1, 0))]),
    ("sismember", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("smembers", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("smismember", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("smove", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RW | INSERT, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("sort", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Unknown, Find::Unknown), KeySpec::new(OW | UPDATE, Begin::Unknown, Find::Unknown)]),
    ("sort_ro", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Unknown, Find::Unknown)]),
    ("spop", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("spublish", &[KeySpec::new(NOT_KEY, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("srandmember", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("srem", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("sscan", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("ssubscribe", &[KeySpec::new(NOT_KEY, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("strlen", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("substr", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("sunion", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("sunionstore", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Range(-1, 1, 0))]),
    ("sunsubscribe", &[KeySpec::new(NOT_KEY, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("touch", &[KeySpec::new(RO, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("ttl", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("type", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("unlink", &[KeySpec::new(RM | DELETE, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("watch", &[KeySpec::new(RO, Begin::Index(1), Find::Range(-1, 1, 0))]),
    ("zadd", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zcard", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zcount", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zdiff", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Keynum(0, 1, 1))]),
    ("zdiffstore", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("zincrby", &[KeySpec::new(RW | ACCESS | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zinter", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Keynum(0, 1, 1))]),
    ("zintercard", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Keynum(0, 1, 1))]),
    ("zinterstore", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("zlexcount", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zmpop", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Keynum(0, 1, 1))]),
    ("zmscore", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zpopmax", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zpopmin", &[KeySpec::new(RW | ACCESS | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrandmember", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrange", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrangebylex", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrangebyscore", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrangestore", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("zrank", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrem", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zremrangebylex", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zremrangebyrank", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zremrangebyscore", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrevrange", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrevrangebylex", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrevrangebyscore", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zrevrank", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zscan", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zscore", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("zunion", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Keynum(0, 1, 1))]),
    ("xack", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xadd", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xautoclaim", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xclaim", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xdel", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xlen", &[KeySpec::new(RO, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xpending", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xrange", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xrevrange", &[KeySpec::new(RO | ACCESS, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xsetid", &[KeySpec::new(RW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xtrim", &[KeySpec::new(RW | DELETE, Begin::Index(1), Find::Range(0, 1, 0))]),
    ("xread", &[KeySpec::new(RO | ACCESS, Begin::Keyword("STREAMS", 1), Find::Range(-1, 1, 2))]),
    ("xreadgroup", &[KeySpec::new(RO | ACCESS, Begin::Keyword("STREAMS", 4), Find::Range(-1, 1, 2))]),
    ("xgroup|create", &[KeySpec::new(RW | INSERT, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("xgroup|setid", &[KeySpec::new(RW | UPDATE, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("xgroup|destroy", &[KeySpec::new(RW | DELETE, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("xgroup|createconsumer", &[KeySpec::new(RW | INSERT, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("xgroup|delconsumer", &[KeySpec::new(RW | DELETE, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("xinfo|stream", &[KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("xinfo|groups", &[KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("xinfo|consumers", &[KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("zunionstore", &[KeySpec::new(OW | UPDATE, Begin::Index(1), Find::Range(0, 1, 0)), KeySpec::new(RO | ACCESS, Begin::Index(2), Find::Keynum(0, 1, 1))]),
    ("memory|usage", &[KeySpec::new(RO, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("object|encoding", &[KeySpec::new(RO, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("object|freq", &[KeySpec::new(RO, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("object|idletime", &[KeySpec::new(RO, Begin::Index(2), Find::Range(0, 1, 0))]),
    ("object|refcount", &[KeySpec::new(RO, Begin::Index(2), Find::Range(0, 1, 0))]),
];
