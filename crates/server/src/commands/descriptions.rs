//! What Redis 7.0 says of each command (COMMAND INFO's flags and ACL
//! categories, a subcommand's arity), for COMMAND INFO and COMMAND LIST
//! FILTERBY ACLCAT, and the subcommands of the container commands (CLIENT,
//! CONFIG, COMMAND, FUNCTION, SLOWLOG, LATENCY, MEMORY, MODULE, OBJECT) for
//! COMMAND LIST (`config|get`...), COMMAND INFO and COMMAND GETKEYS.
//!
//! The tables state Redis's facts about its command interface in Engram's
//! own form (key specs are in `key_specs`). The flags shown are Redis's
//! (`noscript`, `loading`... describe Redis's scripting and loading; they
//! are what clients read), and `movablekeys` is worked out from the key
//! specs as Redis does. A command's arity is Engram's own (its table's),
//! where Engram accepts more than Redis 7.0 (ZRANK's WITHSCORE). Each
//! container's handler parses its own subcommands: the table lists those
//! it knows.

use std::collections::HashMap;
use std::sync::LazyLock;

pub struct Description {
    /// A command's name, or `container|name` for a subcommand.
    pub name: &'static str,
    /// Redis's arity (COMMAND INFO shows it for subcommands).
    pub arity: i32,
    /// Redis's flags, in the order it replies them.
    pub flags: &'static [&'static str],
    /// The ACL categories given explicitly; `categories` adds those the
    /// flags imply.
    acl: &'static [&'static str],
}

/// ACL categories in the order Redis replies them (and ACL CAT lists them).
pub const CATEGORY_ORDER: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

impl Description {
    const fn new(
        name: &'static str,
        arity: i32,
        flags: &'static [&'static str],
        acl: &'static [&'static str],
    ) -> Description {
        Description {
            name,
            arity,
            flags,
            acl,
        }
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }

    pub fn has(&self, flag: &str) -> bool {
        self.flags.contains(&flag)
    }

    /// Redis's ACL categories: the explicit ones and those the flags imply
    /// (setImplicitACLCategories), in Redis's order.
    pub fn categories(&self) -> Vec<&'static str> {
        let mut categories = self.acl.to_vec();
        let implied = [
            ("write", "write"),
            ("readonly", "read"),
            ("admin", "admin"),
            ("admin", "dangerous"),
            ("pubsub", "pubsub"),
            ("fast", "fast"),
            ("blocking", "blocking"),
        ];
        for (flag, category) in implied {
            // Scripting commands are never @read.
            let excluded = category == "read" && self.acl.contains(&"scripting");
            if self.has(flag) && !excluded {
                categories.push(category);
            }
        }
        if !categories.contains(&"fast") {
            categories.push("slow");
        }
        categories.sort_by_key(|c| CATEGORY_ORDER.iter().position(|o| o == c));
        categories.dedup();
        categories
    }
}

static BY_NAME: LazyLock<HashMap<&'static str, &'static Description>> =
    LazyLock::new(|| COMMANDS.iter().map(|d| (d.name, d)).collect());

/// Redis's description of top-level command `name` (None for Engram's
/// own commands).
pub fn command(name: &str) -> Option<&'static Description> {
    BY_NAME.get(name).copied()
}

/// Each container's subcommands, in the order COMMAND lists them (looked
/// up per call: a script's every `redis.call` asks whether it is refused).
static BY_CONTAINER: LazyLock<HashMap<&'static str, Vec<&'static Description>>> =
    LazyLock::new(|| {
        let mut map: HashMap<&'static str, Vec<&'static Description>> = HashMap::new();
        for d in SUBCOMMANDS {
            let container = d.name.split('|').next().expect("split yields one");
            map.entry(container).or_default().push(d);
        }
        map
    });

/// The subcommands of `container`, in the order COMMAND lists them.
pub fn subcommands_of(container: &str) -> impl Iterator<Item = &'static Description> + '_ {
    BY_CONTAINER
        .get(container)
        .into_iter()
        .flat_map(|subs| subs.iter().copied())
}

/// Subcommand `sub` (any case) of `container`.
pub fn subcommand(container: &str, sub: &[u8]) -> Option<&'static Description> {
    subcommands_of(container)
        .find(|d| d.name.as_bytes()[container.len() + 1..].eq_ignore_ascii_case(sub))
}

/// Whether a call of `name` with `args` (the name at 0) carries Redis's
/// flag `flag` (`noscript`, `denyoom`, `allow_busy`...): the command's
/// own, or for a container the subcommand `args[1]` names (none: false;
/// containers carry no such flag themselves).
pub fn call_has(name: &str, args: &crate::resp::Args, flag: &str) -> bool {
    if is_container(name) {
        return args.len() > 1 && subcommand(name, args.get(1)).is_some_and(|d| d.has(flag));
    }
    command(name).is_some_and(|d| d.has(flag))
}

/// Every subcommand, in the order COMMAND lists them.
pub fn all_subcommands() -> &'static [Description] {
    SUBCOMMANDS
}

/// Whether `name` is a container command (it has subcommands).
pub fn is_container(name: &str) -> bool {
    BY_CONTAINER.contains_key(name)
}

#[rustfmt::skip]
static COMMANDS: &[Description] = &[
    Description::new("acl", -2, &[], &[]),
    Description::new("append", 3, &["write", "denyoom", "fast"], &["string"]),
    Description::new("auth", -2, &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], &["connection"]),
    Description::new("bgrewriteaof", 1, &["admin", "noscript", "no_async_loading"], &[]),
    Description::new("bgsave", -1, &["admin", "noscript", "no_async_loading"], &[]),
    Description::new("bitcount", -2, &["readonly"], &["bitmap"]),
    Description::new("bitfield", -2, &["write", "denyoom"], &["bitmap"]),
    Description::new("bitfield_ro", -2, &["readonly", "fast"], &["bitmap"]),
    Description::new("bitop", -4, &["write", "denyoom"], &["bitmap"]),
    Description::new("bitpos", -3, &["readonly"], &["bitmap"]),
    Description::new("blmove", 6, &["write", "denyoom", "noscript", "blocking"], &["list"]),
    Description::new("blmpop", -5, &["write", "blocking"], &["list"]),
    Description::new("blpop", -3, &["write", "noscript", "blocking"], &["list"]),
    Description::new("brpop", -3, &["write", "noscript", "blocking"], &["list"]),
    Description::new("brpoplpush", 4, &["write", "denyoom", "noscript", "blocking"], &["list"]),
    Description::new("bzmpop", -5, &["write", "blocking"], &["sortedset"]),
    Description::new("bzpopmax", -3, &["write", "noscript", "blocking", "fast"], &["sortedset"]),
    Description::new("bzpopmin", -3, &["write", "noscript", "blocking", "fast"], &["sortedset"]),
    Description::new("client", -2, &[], &[]),
    Description::new("cluster", -2, &[], &[]),
    Description::new("wait", 3, &["noscript"], &["connection"]),
    Description::new("command", -1, &["loading", "stale"], &["connection"]),
    Description::new("config", -2, &[], &[]),
    Description::new("copy", -3, &["write", "denyoom"], &["keyspace"]),
    Description::new("dbsize", 1, &["readonly", "fast"], &["keyspace"]),
    Description::new("debug", -2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("decr", 2, &["write", "denyoom", "fast"], &["string"]),
    Description::new("decrby", 3, &["write", "denyoom", "fast"], &["string"]),
    Description::new("del", -2, &["write"], &["keyspace"]),
    Description::new("discard", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], &["transaction"]),
    Description::new("dump", 2, &["readonly"], &["keyspace"]),
    Description::new("echo", 2, &["loading", "stale", "fast"], &["connection"]),
    Description::new("eval", -3, &["noscript", "stale", "skip_monitor", "no_mandatory_keys"], &["scripting"]),
    Description::new("eval_ro", -3, &["readonly", "noscript", "stale", "skip_monitor", "no_mandatory_keys"], &["scripting"]),
    Description::new("evalsha", -3, &["noscript", "stale", "skip_monitor", "no_mandatory_keys"], &["scripting"]),
    Description::new("evalsha_ro", -3, &["readonly", "noscript", "stale", "skip_monitor", "no_mandatory_keys"], &["scripting"]),
    Description::new("exec", 1, &["noscript", "loading", "stale", "skip_slowlog"], &["transaction"]),
    Description::new("exists", -2, &["readonly", "fast"], &["keyspace"]),
    Description::new("expire", -3, &["write", "fast"], &["keyspace"]),
    Description::new("expireat", -3, &["write", "fast"], &["keyspace"]),
    Description::new("expiretime", 2, &["readonly", "fast"], &["keyspace"]),
    Description::new("flushall", -1, &["write"], &["keyspace", "dangerous"]),
    Description::new("flushdb", -1, &["write"], &["keyspace", "dangerous"]),
    Description::new("fcall", -3, &["noscript", "stale", "skip_monitor", "no_mandatory_keys"], &["scripting"]),
    Description::new("fcall_ro", -3, &["readonly", "noscript", "stale", "skip_monitor", "no_mandatory_keys"], &["scripting"]),
    Description::new("function", -2, &[], &[]),
    Description::new("geoadd", -5, &["write", "denyoom"], &["geo"]),
    Description::new("geodist", -4, &["readonly"], &["geo"]),
    Description::new("geohash", -2, &["readonly"], &["geo"]),
    Description::new("geopos", -2, &["readonly"], &["geo"]),
    Description::new("georadius", -6, &["write", "denyoom"], &["geo"]),
    Description::new("georadius_ro", -6, &["readonly"], &["geo"]),
    Description::new("georadiusbymember", -5, &["write", "denyoom"], &["geo"]),
    Description::new("georadiusbymember_ro", -5, &["readonly"], &["geo"]),
    Description::new("geosearch", -7, &["readonly"], &["geo"]),
    Description::new("geosearchstore", -8, &["write", "denyoom"], &["geo"]),
    Description::new("get", 2, &["readonly", "fast"], &["string"]),
    Description::new("getbit", 3, &["readonly", "fast"], &["bitmap"]),
    Description::new("getdel", 2, &["write", "fast"], &["string"]),
    Description::new("getex", -2, &["write", "fast"], &["string"]),
    Description::new("getrange", 4, &["readonly"], &["string"]),
    Description::new("getset", 3, &["write", "denyoom", "fast"], &["string"]),
    Description::new("hdel", -3, &["write", "fast"], &["hash"]),
    Description::new("hello", -1, &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], &["connection"]),
    Description::new("hexists", 3, &["readonly", "fast"], &["hash"]),
    Description::new("hget", 3, &["readonly", "fast"], &["hash"]),
    Description::new("hgetall", 2, &["readonly"], &["hash"]),
    Description::new("hincrby", 4, &["write", "denyoom", "fast"], &["hash"]),
    Description::new("hincrbyfloat", 4, &["write", "denyoom", "fast"], &["hash"]),
    Description::new("hkeys", 2, &["readonly"], &["hash"]),
    Description::new("hlen", 2, &["readonly", "fast"], &["hash"]),
    Description::new("hmget", -3, &["readonly", "fast"], &["hash"]),
    Description::new("hmset", -4, &["write", "denyoom", "fast"], &["hash"]),
    Description::new("hrandfield", -2, &["readonly"], &["hash"]),
    Description::new("hscan", -3, &["readonly"], &["hash"]),
    Description::new("hset", -4, &["write", "denyoom", "fast"], &["hash"]),
    Description::new("hsetnx", 4, &["write", "denyoom", "fast"], &["hash"]),
    Description::new("hstrlen", 3, &["readonly", "fast"], &["hash"]),
    Description::new("hvals", 2, &["readonly"], &["hash"]),
    Description::new("incr", 2, &["write", "denyoom", "fast"], &["string"]),
    Description::new("incrby", 3, &["write", "denyoom", "fast"], &["string"]),
    Description::new("incrbyfloat", 3, &["write", "denyoom", "fast"], &["string"]),
    Description::new("info", -1, &["loading", "stale"], &["dangerous"]),
    Description::new("keys", 2, &["readonly"], &["keyspace", "dangerous"]),
    Description::new("lastsave", 1, &["loading", "stale", "fast"], &["admin", "dangerous"]),
    Description::new("latency", -2, &[], &[]),
    Description::new("lcs", -3, &["readonly"], &["string"]),
    Description::new("lindex", 3, &["readonly"], &["list"]),
    Description::new("linsert", 5, &["write", "denyoom"], &["list"]),
    Description::new("llen", 2, &["readonly", "fast"], &["list"]),
    Description::new("lmove", 5, &["write", "denyoom"], &["list"]),
    Description::new("lmpop", -4, &["write"], &["list"]),
    Description::new("lolwut", -1, &["readonly", "fast"], &[]),
    Description::new("lpop", -2, &["write", "fast"], &["list"]),
    Description::new("lpos", -3, &["readonly"], &["list"]),
    Description::new("lpush", -3, &["write", "denyoom", "fast"], &["list"]),
    Description::new("lpushx", -3, &["write", "denyoom", "fast"], &["list"]),
    Description::new("lrange", 4, &["readonly"], &["list"]),
    Description::new("lrem", 4, &["write"], &["list"]),
    Description::new("lset", 4, &["write", "denyoom"], &["list"]),
    Description::new("ltrim", 4, &["write"], &["list"]),
    Description::new("memory", -2, &[], &[]),
    Description::new("mget", -2, &["readonly", "fast"], &["string"]),
    Description::new("migrate", -6, &["write"], &["keyspace", "dangerous"]),
    Description::new("module", -2, &[], &[]),
    Description::new("monitor", 1, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("move", 3, &["write", "fast"], &["keyspace"]),
    Description::new("mset", -3, &["write", "denyoom"], &["string"]),
    Description::new("msetnx", -3, &["write", "denyoom"], &["string"]),
    Description::new("multi", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], &["transaction"]),
    Description::new("object", -2, &[], &[]),
    Description::new("persist", 2, &["write", "fast"], &["keyspace"]),
    Description::new("pexpire", -3, &["write", "fast"], &["keyspace"]),
    Description::new("pexpireat", -3, &["write", "fast"], &["keyspace"]),
    Description::new("pexpiretime", 2, &["readonly", "fast"], &["keyspace"]),
    Description::new("pfadd", -2, &["write", "denyoom", "fast"], &["hyperloglog"]),
    Description::new("pfcount", -2, &["readonly"], &["hyperloglog"]),
    Description::new("pfdebug", 3, &["write", "denyoom", "admin"], &["hyperloglog"]),
    Description::new("pfmerge", -2, &["write", "denyoom"], &["hyperloglog"]),
    Description::new("pfselftest", 1, &["admin"], &["hyperloglog"]),
    Description::new("ping", -1, &["fast"], &["connection"]),
    Description::new("psetex", 4, &["write", "denyoom"], &["string"]),
    Description::new("psubscribe", -2, &["pubsub", "noscript", "loading", "stale"], &[]),
    Description::new("pttl", 2, &["readonly", "fast"], &["keyspace"]),
    Description::new("publish", 3, &["pubsub", "loading", "stale", "fast"], &[]),
    Description::new("pubsub", -2, &[], &[]),
    Description::new("punsubscribe", -1, &["pubsub", "noscript", "loading", "stale"], &[]),
    Description::new("quit", -1, &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], &["connection"]),
    Description::new("randomkey", 1, &["readonly"], &["keyspace"]),
    Description::new("readonly", 1, &["loading", "stale", "fast"], &["connection"]),
    Description::new("readwrite", 1, &["loading", "stale", "fast"], &["connection"]),
    Description::new("rename", 3, &["write"], &["keyspace"]),
    Description::new("renamenx", 3, &["write", "fast"], &["keyspace"]),
    Description::new("reset", 1, &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], &["connection"]),
    Description::new("restore", -4, &["write", "denyoom"], &["keyspace", "dangerous"]),
    Description::new("role", 1, &["noscript", "loading", "stale", "fast"], &["admin", "dangerous"]),
    Description::new("rpop", -2, &["write", "fast"], &["list"]),
    Description::new("rpoplpush", 3, &["write", "denyoom"], &["list"]),
    Description::new("rpush", -3, &["write", "denyoom", "fast"], &["list"]),
    Description::new("rpushx", -3, &["write", "denyoom", "fast"], &["list"]),
    Description::new("sadd", -3, &["write", "denyoom", "fast"], &["set"]),
    Description::new("save", 1, &["admin", "noscript", "no_async_loading", "no_multi"], &[]),
    Description::new("scan", -2, &["readonly"], &["keyspace"]),
    Description::new("script", -2, &[], &[]),
    Description::new("scard", 2, &["readonly", "fast"], &["set"]),
    Description::new("sdiff", -2, &["readonly"], &["set"]),
    Description::new("sdiffstore", -3, &["write", "denyoom"], &["set"]),
    Description::new("select", 2, &["loading", "stale", "fast"], &["connection"]),
    Description::new("set", -3, &["write", "denyoom"], &["string"]),
    Description::new("setbit", 4, &["write", "denyoom"], &["bitmap"]),
    Description::new("setex", 4, &["write", "denyoom"], &["string"]),
    Description::new("setnx", 3, &["write", "denyoom", "fast"], &["string"]),
    Description::new("setrange", 4, &["write", "denyoom"], &["string"]),
    Description::new("shutdown", -1, &["admin", "noscript", "loading", "stale", "no_multi", "allow_busy"], &[]),
    Description::new("sinter", -2, &["readonly"], &["set"]),
    Description::new("sintercard", -3, &["readonly"], &["set"]),
    Description::new("sinterstore", -3, &["write", "denyoom"], &["set"]),
    Description::new("sismember", 3, &["readonly", "fast"], &["set"]),
    Description::new("slowlog", -2, &[], &[]),
    Description::new("smembers", 2, &["readonly"], &["set"]),
    Description::new("smismember", -3, &["readonly", "fast"], &["set"]),
    Description::new("smove", 4, &["write", "fast"], &["set"]),
    Description::new("sort", -2, &["write", "denyoom"], &["set", "sortedset", "list", "dangerous"]),
    Description::new("sort_ro", -2, &["readonly"], &["set", "sortedset", "list", "dangerous"]),
    Description::new("spop", -2, &["write", "fast"], &["set"]),
    Description::new("spublish", 3, &["pubsub", "loading", "stale", "fast"], &[]),
    Description::new("srandmember", -2, &["readonly"], &["set"]),
    Description::new("srem", -3, &["write", "fast"], &["set"]),
    Description::new("sscan", -3, &["readonly"], &["set"]),
    Description::new("ssubscribe", -2, &["pubsub", "noscript", "loading", "stale"], &[]),
    Description::new("strlen", 2, &["readonly", "fast"], &["string"]),
    Description::new("subscribe", -2, &["pubsub", "noscript", "loading", "stale"], &[]),
    Description::new("substr", 4, &["readonly"], &["string"]),
    Description::new("sunion", -2, &["readonly"], &["set"]),
    Description::new("sunionstore", -3, &["write", "denyoom"], &["set"]),
    Description::new("sunsubscribe", -1, &["pubsub", "noscript", "loading", "stale"], &[]),
    Description::new("swapdb", 3, &["write", "fast"], &["keyspace", "dangerous"]),
    Description::new("time", 1, &["loading", "stale", "fast"], &[]),
    Description::new("touch", -2, &["readonly", "fast"], &["keyspace"]),
    Description::new("ttl", 2, &["readonly", "fast"], &["keyspace"]),
    Description::new("type", 2, &["readonly", "fast"], &["keyspace"]),
    Description::new("unlink", -2, &["write", "fast"], &["keyspace"]),
    Description::new("unsubscribe", -1, &["pubsub", "noscript", "loading", "stale"], &[]),
    Description::new("unwatch", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], &["transaction"]),
    Description::new("watch", -2, &["noscript", "loading", "stale", "fast", "allow_busy"], &["transaction"]),
    Description::new("zadd", -4, &["write", "denyoom", "fast"], &["sortedset"]),
    Description::new("zcard", 2, &["readonly", "fast"], &["sortedset"]),
    Description::new("zcount", 4, &["readonly", "fast"], &["sortedset"]),
    Description::new("zdiff", -3, &["readonly"], &["sortedset"]),
    Description::new("zdiffstore", -4, &["write", "denyoom"], &["sortedset"]),
    Description::new("zincrby", 4, &["write", "denyoom", "fast"], &["sortedset"]),
    Description::new("zinter", -3, &["readonly"], &["sortedset"]),
    Description::new("zintercard", -3, &["readonly"], &["sortedset"]),
    Description::new("zinterstore", -4, &["write", "denyoom"], &["sortedset"]),
    Description::new("zlexcount", 4, &["readonly", "fast"], &["sortedset"]),
    Description::new("zmpop", -4, &["write"], &["sortedset"]),
    Description::new("zmscore", -3, &["readonly", "fast"], &["sortedset"]),
    Description::new("zpopmax", -2, &["write", "fast"], &["sortedset"]),
    Description::new("zpopmin", -2, &["write", "fast"], &["sortedset"]),
    Description::new("zrandmember", -2, &["readonly"], &["sortedset"]),
    Description::new("zrange", -4, &["readonly"], &["sortedset"]),
    Description::new("zrangebylex", -4, &["readonly"], &["sortedset"]),
    Description::new("zrangebyscore", -4, &["readonly"], &["sortedset"]),
    Description::new("zrangestore", -5, &["write", "denyoom"], &["sortedset"]),
    Description::new("zrank", 3, &["readonly", "fast"], &["sortedset"]),
    Description::new("zrem", -3, &["write", "fast"], &["sortedset"]),
    Description::new("zremrangebylex", 4, &["write"], &["sortedset"]),
    Description::new("zremrangebyrank", 4, &["write"], &["sortedset"]),
    Description::new("zremrangebyscore", 4, &["write"], &["sortedset"]),
    Description::new("zrevrange", -4, &["readonly"], &["sortedset"]),
    Description::new("zrevrangebylex", -4, &["readonly"], &["sortedset"]),
    Description::new("zrevrangebyscore", -4, &["readonly"], &["sortedset"]),
    Description::new("zrevrank", 3, &["readonly", "fast"], &["sortedset"]),
    Description::new("zscan", -3, &["readonly"], &["sortedset"]),
    Description::new("zscore", 3, &["readonly", "fast"], &["sortedset"]),
    Description::new("zunion", -3, &["readonly"], &["sortedset"]),
    Description::new("xack", -4, &["write", "fast"], &["stream"]),
    Description::new("xadd", -5, &["write", "denyoom", "fast"], &["stream"]),
    Description::new("xautoclaim", -6, &["write", "fast"], &["stream"]),
    Description::new("xclaim", -6, &["write", "fast"], &["stream"]),
    Description::new("xdel", -3, &["write", "fast"], &["stream"]),
    Description::new("xgroup", -2, &[], &[]),
    Description::new("xinfo", -2, &[], &[]),
    Description::new("xlen", 2, &["readonly", "fast"], &["stream"]),
    Description::new("xpending", -3, &["readonly"], &["stream"]),
    Description::new("xrange", -4, &["readonly"], &["stream"]),
    Description::new("xread", -4, &["readonly", "blocking"], &["stream"]),
    Description::new("xreadgroup", -7, &["write", "blocking"], &["stream"]),
    Description::new("xrevrange", -4, &["readonly"], &["stream"]),
    Description::new("xsetid", -3, &["write", "denyoom", "fast"], &["stream"]),
    Description::new("xtrim", -4, &["write"], &["stream"]),
    Description::new("zunionstore", -4, &["write", "denyoom"], &["sortedset"]),
];

#[rustfmt::skip]
static SUBCOMMANDS: &[Description] = &[
    Description::new("acl|cat", -2, &["noscript", "loading", "stale"], &[]),
    Description::new("acl|deluser", -3, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("acl|dryrun", -4, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("acl|genpass", -2, &["noscript", "loading", "stale"], &[]),
    Description::new("acl|getuser", 3, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("acl|help", 2, &["loading", "stale"], &[]),
    Description::new("acl|list", 2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("acl|load", 2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("acl|log", -2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("acl|save", 2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("acl|setuser", -3, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("acl|users", 2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("acl|whoami", 2, &["noscript", "loading", "stale"], &[]),
    Description::new("client|id", 2, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|setname", 3, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|getname", 2, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|info", 2, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|list", -2, &["admin", "noscript", "loading", "stale"], &["connection"]),
    Description::new("client|pause", -3, &["admin", "noscript", "loading", "stale"], &["connection"]),
    Description::new("client|unpause", 2, &["admin", "noscript", "loading", "stale"], &["connection"]),
    Description::new("client|reply", 3, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|kill", -3, &["admin", "noscript", "loading", "stale"], &["connection"]),
    Description::new("client|unblock", -3, &["admin", "noscript", "loading", "stale"], &["connection"]),
    // CLIENT SETINFO and NO-TOUCH come from Redis 7.2 (Engram has them).
    Description::new("client|setinfo", -4, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|no-touch", 3, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|no-evict", 3, &["admin", "noscript", "loading", "stale"], &["connection"]),
    Description::new("client|tracking", -3, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|caching", 3, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|getredir", 2, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|trackinginfo", 2, &["noscript", "loading", "stale"], &["connection"]),
    Description::new("client|help", 2, &["loading", "stale"], &["connection"]),
    // Redis 7.0's order (COMMAND lists them so).
    Description::new("cluster|links", 2, &["stale"], &[]),
    Description::new("cluster|replicate", 3, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|help", 2, &["loading", "stale"], &[]),
    Description::new("cluster|saveconfig", 2, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|delslotsrange", -4, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|bumpepoch", 2, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|shards", 2, &["stale"], &[]),
    Description::new("cluster|forget", 3, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|countkeysinslot", 3, &["stale"], &[]),
    Description::new("cluster|replicas", 3, &["admin", "stale"], &[]),
    Description::new("cluster|failover", -2, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|delslots", -3, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|getkeysinslot", 4, &["stale"], &[]),
    Description::new("cluster|addslotsrange", -4, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|setslot", -4, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|info", 2, &["stale"], &[]),
    Description::new("cluster|slots", 2, &["stale"], &[]),
    Description::new("cluster|nodes", 2, &["stale"], &[]),
    Description::new("cluster|meet", -4, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|flushslots", 2, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|count-failure-reports", 3, &["admin", "stale"], &[]),
    Description::new("cluster|keyslot", 3, &["stale"], &[]),
    Description::new("cluster|myid", 2, &["stale"], &[]),
    Description::new("cluster|slaves", 3, &["admin", "stale"], &[]),
    Description::new("cluster|set-config-epoch", 3, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|addslots", -3, &["admin", "stale", "no_async_loading"], &[]),
    Description::new("cluster|reset", -2, &["admin", "noscript", "stale"], &[]),
    Description::new("config|get", -3, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("config|set", -4, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("config|resetstat", 2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("config|rewrite", 2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("config|help", 2, &["loading", "stale"], &[]),
    Description::new("command|count", 2, &["loading", "stale"], &["connection"]),
    Description::new("command|list", -2, &["loading", "stale"], &["connection"]),
    Description::new("command|getkeys", -4, &["loading", "stale"], &["connection"]),
    Description::new("command|getkeysandflags", -4, &["loading", "stale"], &["connection"]),
    Description::new("command|info", -2, &["loading", "stale"], &["connection"]),
    Description::new("command|docs", -2, &["loading", "stale"], &["connection"]),
    Description::new("command|help", 2, &["loading", "stale"], &["connection"]),
    Description::new("function|flush", -2, &["write", "noscript"], &["scripting"]),
    Description::new("function|list", -2, &["noscript"], &["scripting"]),
    Description::new("function|stats", 2, &["noscript", "allow_busy"], &["scripting"]),
    Description::new("function|kill", 2, &["noscript", "allow_busy"], &["scripting"]),
    Description::new("function|delete", 3, &["write", "noscript"], &["scripting"]),
    Description::new("function|load", -3, &["write", "denyoom", "noscript"], &["scripting"]),
    Description::new("function|restore", -3, &["write", "denyoom", "noscript"], &["scripting"]),
    Description::new("function|dump", 2, &["noscript"], &["scripting"]),
    Description::new("function|help", 2, &["loading", "stale"], &["scripting"]),
    Description::new("script|help", 2, &["loading", "stale"], &["scripting"]),
    Description::new("script|exists", -3, &["noscript"], &["scripting"]),
    Description::new("script|debug", 3, &["noscript"], &["scripting"]),
    Description::new("script|load", 3, &["noscript", "stale"], &["scripting"]),
    Description::new("script|flush", -2, &["noscript"], &["scripting"]),
    Description::new("script|kill", 2, &["noscript", "allow_busy"], &["scripting"]),
    Description::new("pubsub|channels", -2, &["pubsub", "loading", "stale"], &[]),
    Description::new("pubsub|help", 2, &["loading", "stale"], &[]),
    Description::new("pubsub|numpat", 2, &["pubsub", "loading", "stale"], &[]),
    Description::new("pubsub|numsub", -2, &["pubsub", "loading", "stale"], &[]),
    Description::new("pubsub|shardchannels", -2, &["pubsub", "loading", "stale"], &[]),
    Description::new("pubsub|shardnumsub", -2, &["pubsub", "loading", "stale"], &[]),
    Description::new("slowlog|get", -2, &["admin", "loading", "stale"], &[]),
    Description::new("slowlog|len", 2, &["admin", "loading", "stale"], &[]),
    Description::new("slowlog|reset", 2, &["admin", "loading", "stale"], &[]),
    Description::new("slowlog|help", 2, &["loading", "stale"], &[]),
    Description::new("latency|reset", -2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("latency|histogram", -2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("latency|latest", 2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("latency|history", 3, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("latency|graph", 3, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("latency|doctor", 2, &["admin", "noscript", "loading", "stale"], &[]),
    Description::new("latency|help", 2, &["loading", "stale"], &[]),
    Description::new("memory|usage", -3, &["readonly"], &[]),
    Description::new("memory|stats", 2, &[], &[]),
    Description::new("memory|doctor", 2, &[], &[]),
    Description::new("memory|malloc-stats", 2, &[], &[]),
    Description::new("memory|purge", 2, &[], &[]),
    Description::new("memory|help", 2, &["loading", "stale"], &[]),
    Description::new("module|list", 2, &["admin", "noscript"], &[]),
    Description::new("module|load", -3, &["admin", "noscript", "no_async_loading"], &[]),
    Description::new("module|loadex", -3, &["admin", "noscript", "no_async_loading"], &[]),
    Description::new("module|unload", 3, &["admin", "noscript", "no_async_loading"], &[]),
    Description::new("module|help", 2, &["loading", "stale"], &[]),
    Description::new("object|encoding", 3, &["readonly"], &["keyspace"]),
    Description::new("object|refcount", 3, &["readonly"], &["keyspace"]),
    Description::new("object|freq", 3, &["readonly"], &["keyspace"]),
    Description::new("object|idletime", 3, &["readonly"], &["keyspace"]),
    Description::new("object|help", 2, &["loading", "stale"], &["keyspace"]),
    Description::new("xgroup|create", -5, &["write", "denyoom"], &["stream"]),
    Description::new("xgroup|setid", -5, &["write"], &["stream"]),
    Description::new("xgroup|destroy", 4, &["write"], &["stream"]),
    Description::new("xgroup|createconsumer", 5, &["write", "denyoom"], &["stream"]),
    Description::new("xgroup|delconsumer", 5, &["write"], &["stream"]),
    Description::new("xgroup|help", 2, &["loading", "stale"], &["stream"]),
    Description::new("xinfo|consumers", 4, &["readonly"], &["stream"]),
    Description::new("xinfo|groups", 3, &["readonly"], &["stream"]),
    Description::new("xinfo|stream", -3, &["readonly"], &["stream"]),
    Description::new("xinfo|help", 2, &["loading", "stale"], &["stream"]),
];
