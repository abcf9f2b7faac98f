//! Every configuration parameter Redis 7.0 has, so that `CONFIG GET`,
//! `CONFIG SET` and configuration files written for Redis work unchanged.
//!
//! Most of Redis's parameters tune machinery Engram does not have: the
//! compact encodings of small collections (`*-max-listpack-*`,
//! `list-compress-depth`), RDB and AOF files, active defragmentation,
//! replication of Redis itself. Those are kept as values and validated
//! exactly as Redis validates them (the same ranges, units and error
//! texts), and `CONFIG GET` echoes what was set; they have no effect, and
//! COMPATIBILITY.md lists them. The parameters that do mean something here
//! (`port`, `timeout`, `maxclients`, `appendfsync`, ...) are handled by
//! `config.rs` and `commands/server.rs`; this table only supplies their
//! names (`CONFIG GET *`) where those do not. A few kept here also act:
//! `Shared::apply_redis_param` puts `maxmemory`, `maxmemory-policy`,
//! `maxmemory-samples`, `maxmemory-eviction-tenacity`, `lfu-*`, `slowlog-*`,
//! `latency-monitor-threshold`, `hll-sparse-max-bytes` and
//! `client-output-buffer-limit` (`output_limit`) into effect,
//! `enable-debug-command` gates DEBUG, and `disable-thp` (read once at
//! start, `serve.rs`) turns transparent huge pages off for the process.
//!
//! The table is Redis 7.0.15's: names, aliases (`hash-max-ziplist-entries`
//! is `hash-max-listpack-entries`), bounds and defaults.

use std::collections::HashMap;

/// What values a parameter takes.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// `yes` or `no`.
    Bool,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// An integer in `min..=max`; `memory`: with Redis's units (`64mb`);
    /// `percent`: also `N%` (of maxmemory, stored negated).
    Int {
        min: i128,
        max: i128,
        memory: bool,
        percent: bool,
    },
    /// Any text (file names, addresses, the multi-word parameters).
    Text,
}

#[derive(Clone, Copy, Debug)]
pub struct Param {
    pub name: &'static str,
    pub alias: Option<&'static str>,
    pub kind: Kind,
    pub default: &'static str,
    /// Set only in the configuration file (`can't set immutable config`).
    pub immutable: bool,
    /// Left out of `CONFIG GET *`, as Redis leaves out its debugging knobs.
    pub hidden: bool,
}

const I32: i128 = i32::MAX as i128;
const U32: i128 = u32::MAX as i128;
const I64: i128 = i64::MAX as i128;
const U64: i128 = u64::MAX as i128;

impl Param {
    const fn new(name: &'static str, kind: Kind, default: &'static str) -> Param {
        Param {
            name,
            alias: None,
            kind,
            default,
            immutable: false,
            hidden: false,
        }
    }
    const fn bool(name: &'static str, default: &'static str) -> Param {
        Param::new(name, Kind::Bool, default)
    }
    const fn choice(
        name: &'static str,
        options: &'static [&'static str],
        default: &'static str,
    ) -> Param {
        Param::new(name, Kind::Choice(options), default)
    }
    const fn int(name: &'static str, min: i128, max: i128, default: &'static str) -> Param {
        let kind = Kind::Int {
            min,
            max,
            memory: false,
            percent: false,
        };
        Param::new(name, kind, default)
    }
    const fn memory(name: &'static str, min: i128, max: i128, default: &'static str) -> Param {
        let kind = Kind::Int {
            min,
            max,
            memory: true,
            percent: false,
        };
        Param::new(name, kind, default)
    }
    const fn text(name: &'static str, default: &'static str) -> Param {
        Param::new(name, Kind::Text, default)
    }
    const fn alias(mut self, alias: &'static str) -> Param {
        self.alias = Some(alias);
        self
    }
    const fn immutable(mut self) -> Param {
        self.immutable = true;
        self
    }
    const fn hidden(mut self) -> Param {
        self.hidden = true;
        self
    }
    const fn percent(mut self) -> Param {
        if let Kind::Int {
            min, max, memory, ..
        } = self.kind
        {
            self.kind = Kind::Int {
                min,
                max,
                memory,
                percent: true,
            };
        }
        self
    }

    /// Checks `value` as Redis would and returns it as `CONFIG GET` shows
    /// it (`yes`/`no`, a memory size in bytes, a choice in lowercase), or
    /// the reason Redis gives for refusing it.
    pub fn check(&self, value: &str) -> Result<String, String> {
        let value = self.check_kind(value)?;
        match not_supported_yet(self.name, &value) {
            Some(reason) => Err(reason.to_string()),
            None => Ok(value),
        }
    }

    /// `check` less the refusal of what Engram does not do yet (`tls`
    /// checks its own parameters' kinds with this).
    pub(crate) fn check_kind(&self, value: &str) -> Result<String, String> {
        match self.kind {
            Kind::Bool => match value.to_ascii_lowercase().as_str() {
                v @ ("yes" | "no") => Ok(v.to_string()),
                _ => Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Choice(options) => {
                let lower = value.to_ascii_lowercase();
                if options.contains(&lower.as_str()) {
                    Ok(lower)
                } else {
                    Err(format!(
                        "argument(s) must be one of the following: {}",
                        options.join(", ")
                    ))
                }
            }
            Kind::Int {
                min,
                max,
                memory,
                percent,
            } => {
                if percent {
                    if let Some(digits) = value.strip_suffix('%') {
                        let n: i128 = digits
                            .parse()
                            .ok()
                            .filter(|n| *n >= 0)
                            .ok_or("argument must be a memory or percent value")?;
                        if -n < min {
                            return Err(format!(
                                "percentage argument must be less or equal to {}",
                                -min
                            ));
                        }
                        return Ok(format!("{n}%"));
                    }
                }
                let n = if memory {
                    memory_value(value).ok_or("argument must be a memory value")?
                } else {
                    value
                        .parse::<i64>()
                        .map(i128::from)
                        .map_err(|_| "argument couldn't be parsed into an integer")?
                };
                if n < min || n > max {
                    return Err(format!(
                        "argument must be between {min} and {max} inclusive"
                    ));
                }
                Ok(n.to_string())
            }
            Kind::Text => check_text(self.name, value).map(|()| value.to_string()),
        }
    }
}

/// Values that ask for something Engram does not do yet. Accepting them
/// and doing nothing would be a silent surprise (a Unix socket nobody
/// listens on, a cipher list not applied), so they are refused with the
/// reason; only the value that asks for nothing is accepted.
fn not_supported_yet(name: &str, value: &str) -> Option<&'static str> {
    let asks = match name {
        "min-replicas-to-write" => value != "0",
        "cluster-enabled" | "daemonize" => value == "yes",
        "unixsocket" | "logfile" | "pidfile" | "replicaof" | "tls-ciphers" | "tls-ciphersuites"
        | "tls-ca-cert-dir" | "tls-key-file-pass" => !value.is_empty(),
        _ => false,
    };
    if !asks {
        return None;
    }
    Some(match name {
        "tls-ciphers" | "tls-ciphersuites" => {
            "Engram's TLS (rustls) offers its own set of modern cipher suites and takes no \
             OpenSSL cipher list: tls-ciphers and tls-ciphersuites must be empty"
        }
        "tls-ca-cert-dir" => {
            "Engram reads CA certificates from tls-ca-cert-file only: tls-ca-cert-dir must \
             be empty"
        }
        "tls-key-file-pass" => {
            "Engram does not read encrypted private keys: give tls-key-file unencrypted \
             (openssl pkey -in key.pem -out plain.pem) and leave tls-key-file-pass empty"
        }
        "min-replicas-to-write" | "replicaof" => {
            "Engram has no Redis replication (replication comes through Raft): only the \
             default is accepted"
        }
        "cluster-enabled" => "Engram has no cluster mode yet: cluster-enabled must be no",
        "daemonize" => {
            "Engram does not daemonize: run it under a supervisor (systemd, ...) instead"
        }
        "unixsocket" => "Engram does not listen on a Unix socket yet: unixsocket must be empty",
        "logfile" => "Engram logs to standard error only: logfile must be empty",
        _ => "Engram writes no pid file: pidfile must be empty",
    })
}

/// A size as Redis's `memtoull` reads it: digits, then b, k, kb, m, mb, g
/// or gb (any case); a leading minus is allowed and kept.
pub(crate) fn memory_value(value: &str) -> Option<i128> {
    let lower = value.to_ascii_lowercase();
    let (sign, rest) = match lower.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, lower.as_str()),
    };
    let at = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (digits, unit) = rest.split_at(at);
    let multiplier: i128 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    let n: u64 = digits.parse().ok()?;
    Some(sign * i128::from(n) * multiplier)
}

/// The multi-word parameters Redis parses itself; the rest of the text
/// ones (file names, addresses) take anything.
fn check_text(name: &str, value: &str) -> Result<(), String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    let ints = |words: &[&str]| words.iter().all(|w| w.parse::<i64>().is_ok());
    match name {
        "save" if !(words.len().is_multiple_of(2) && ints(&words)) => {
            Err("Invalid save parameters".into())
        }
        "oom-score-adj-values" if !(words.len() == 3 && ints(&words)) => {
            Err("Invalid oom-score-adj-values".into())
        }
        "notify-keyspace-events" if !value.chars().all(|c| "AgKE$lshzxetmdn".contains(c)) => {
            Err("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".into())
        }
        "latency-tracking-info-percentiles"
            if !words
                .iter()
                .all(|w| w.parse::<f64>().is_ok_and(|p| (0.0..=100.0).contains(&p))) =>
        {
            Err(
                "latency-tracking-info-percentiles parameter should be between 0.0 and 100.0"
                    .into(),
            )
        }
        "client-output-buffer-limit" => check_output_buffer_limit(&words),
        _ => Ok(()),
    }
}

/// `<class> <hard> <soft> <seconds>`, repeated (`output_limit` parses
/// it); an empty value names no class.
fn check_output_buffer_limit(words: &[&str]) -> Result<(), String> {
    if words.is_empty() {
        return Err("Wrong number of arguments in buffer limit configuration.".to_string());
    }
    crate::output_limit::check(&words.join(" "))
}

/// The parameter called `name` (its own name or its alias, any case).
pub fn find(name: &str) -> Option<&'static Param> {
    let name = name.to_ascii_lowercase();
    PARAMS
        .iter()
        .find(|p| p.name == name || p.alias == Some(name.as_str()))
}

/// The current values of the parameters that only keep a value, by
/// canonical name.
pub fn defaults() -> HashMap<&'static str, String> {
    PARAMS
        .iter()
        .map(|p| (p.name, p.default.to_string()))
        .collect()
}

/// `client-output-buffer-limit`'s default (`output_limit`).
pub const OUTPUT_LIMIT_DEFAULT: &str =
    "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60";

/// Redis 7.0.15's parameters: name, bounds, default.
pub static PARAMS: &[Param] = &[
    Param::choice(
        "acl-pubsub-default",
        &["allchannels", "resetchannels"],
        "resetchannels",
    ),
    Param::text("aclfile", "").immutable(),
    Param::int("acllog-max-len", 0, I64, "128"),
    Param::int("active-defrag-cycle-max", 1, 99, "25"),
    Param::int("active-defrag-cycle-min", 1, 99, "1"),
    Param::memory("active-defrag-ignore-bytes", 1, I64, "104857600"),
    Param::int("active-defrag-max-scan-fields", 1, I64, "1000"),
    Param::int("active-defrag-threshold-lower", 0, 1000, "10"),
    Param::int("active-defrag-threshold-upper", 0, 1000, "100"),
    Param::int("active-expire-effort", 1, 10, "1"),
    Param::bool("activedefrag", "no"),
    Param::bool("activerehashing", "yes"),
    Param::bool("always-show-logo", "no").immutable(),
    Param::bool("aof-disable-auto-gc", "no"),
    Param::bool("aof-load-truncated", "yes"),
    Param::bool("aof-rewrite-incremental-fsync", "yes"),
    Param::bool("aof-timestamp-enabled", "no"),
    Param::bool("aof-use-rdb-preamble", "yes"),
    Param::text("aof_rewrite_cpulist", "").immutable(),
    Param::text("appenddirname", "appendonlydir").immutable(),
    Param::text("appendfilename", "appendonly.aof").immutable(),
    Param::choice("appendfsync", &["everysec", "always", "no"], "everysec"),
    Param::bool("appendonly", "no"),
    Param::memory("auto-aof-rewrite-min-size", 0, I64, "67108864"),
    Param::int("auto-aof-rewrite-percentage", 0, I32, "100"),
    Param::text("bgsave_cpulist", "").immutable(),
    Param::text("bind", "* -::*"),
    Param::text("bind-source-addr", ""),
    Param::text("bio_cpulist", "").immutable(),
    Param::int("busy-reply-threshold", 0, I64, "5000").alias("lua-time-limit"),
    Param::text("client-output-buffer-limit", OUTPUT_LIMIT_DEFAULT),
    Param::memory("client-query-buffer-limit", 1048576, I64, "1073741824"),
    Param::bool("cluster-allow-pubsubshard-when-down", "yes"),
    Param::bool("cluster-allow-reads-when-down", "no"),
    Param::bool("cluster-allow-replica-migration", "yes"),
    Param::int("cluster-announce-bus-port", 0, 65535, "0"),
    Param::text("cluster-announce-hostname", ""),
    Param::text("cluster-announce-ip", ""),
    Param::int("cluster-announce-port", 0, 65535, "0"),
    Param::int("cluster-announce-tls-port", 0, 65535, "0"),
    Param::text("cluster-config-file", "nodes.conf").immutable(),
    Param::bool("cluster-enabled", "no").immutable(),
    Param::memory("cluster-link-sendbuf-limit", 0, U64, "0"),
    Param::int("cluster-migration-barrier", 0, I32, "1"),
    Param::int("cluster-node-timeout", 0, I64, "15000"),
    Param::int("cluster-port", 0, 65535, "0").immutable(),
    Param::choice(
        "cluster-preferred-endpoint-type",
        &["ip", "hostname", "unknown-endpoint"],
        "ip",
    ),
    Param::bool("cluster-replica-no-failover", "no").alias("cluster-slave-no-failover"),
    Param::int("cluster-replica-validity-factor", 0, I32, "10")
        .alias("cluster-slave-validity-factor"),
    Param::bool("cluster-require-full-coverage", "yes"),
    Param::bool("crash-log-enabled", "yes"),
    Param::bool("crash-memcheck-enabled", "yes"),
    Param::bool("daemonize", "no").immutable(),
    Param::int("databases", 1, I32, "16").immutable(),
    Param::text("dbfilename", "dump.rdb"),
    Param::text("dir", ""),
    Param::bool("disable-thp", "yes").immutable(),
    Param::bool("dynamic-hz", "yes"),
    Param::choice("enable-debug-command", &["no", "yes", "local"], "no").immutable(),
    Param::choice("enable-module-command", &["no", "yes", "local"], "no").immutable(),
    Param::choice("enable-protected-configs", &["no", "yes", "local"], "no").immutable(),
    Param::int("hash-max-listpack-entries", 0, I64, "512").alias("hash-max-ziplist-entries"),
    Param::memory("hash-max-listpack-value", 0, I64, "64").alias("hash-max-ziplist-value"),
    Param::memory("hll-sparse-max-bytes", 0, I64, "3000"),
    Param::int("hz", 0, I32, "10"),
    Param::text("ignore-warnings", ""),
    Param::int("io-threads", 1, 128, "1").immutable(),
    Param::bool("io-threads-do-reads", "no").immutable(),
    Param::bool("jemalloc-bg-thread", "yes"),
    Param::int("key-load-delay", -I32 - 1, I32, "0").hidden(),
    Param::int("latency-monitor-threshold", 0, I64, "0"),
    Param::bool("latency-tracking", "yes"),
    Param::text("latency-tracking-info-percentiles", "50 99 99.9"),
    Param::bool("lazyfree-lazy-eviction", "no"),
    Param::bool("lazyfree-lazy-expire", "no"),
    Param::bool("lazyfree-lazy-server-del", "no"),
    Param::bool("lazyfree-lazy-user-del", "no"),
    Param::bool("lazyfree-lazy-user-flush", "no"),
    Param::int("lfu-decay-time", 0, I32, "1"),
    Param::int("lfu-log-factor", 0, I32, "10"),
    Param::int("list-compress-depth", 0, I32, "0"),
    Param::int("list-max-listpack-size", -I32 - 1, I32, "-2").alias("list-max-ziplist-size"),
    Param::int(
        "loading-process-events-interval-bytes",
        1024,
        I32,
        "2097152",
    )
    .hidden(),
    Param::text("logfile", "").immutable(),
    Param::choice(
        "loglevel",
        &["debug", "verbose", "notice", "warning"],
        "notice",
    ),
    Param::text("masterauth", ""),
    Param::text("masteruser", ""),
    Param::int("maxclients", 1, U32, "10000"),
    Param::memory("maxmemory", 0, U64, "0"),
    Param::memory("maxmemory-clients", -100, I64, "0").percent(),
    Param::int("maxmemory-eviction-tenacity", 0, 100, "10"),
    Param::choice(
        "maxmemory-policy",
        &[
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "noeviction",
        ],
        "noeviction",
    ),
    Param::int("maxmemory-samples", 1, I32, "5"),
    Param::int("min-replicas-max-lag", 0, I32, "10").alias("min-slaves-max-lag"),
    Param::int("min-replicas-to-write", 0, I32, "0").alias("min-slaves-to-write"),
    Param::bool("no-appendfsync-on-rewrite", "no"),
    Param::text("notify-keyspace-events", ""),
    Param::choice(
        "oom-score-adj",
        &["no", "yes", "relative", "absolute"],
        "no",
    ),
    Param::text("oom-score-adj-values", "0 200 800"),
    Param::text("pidfile", "").immutable(),
    Param::int("port", 0, 65535, "6379"),
    Param::text("proc-title-template", "{title} {listen-addr} {server-mode}"),
    Param::choice(
        "propagation-error-behavior",
        &["ignore", "panic", "panic-on-replicas"],
        "ignore",
    ),
    Param::bool("protected-mode", "yes"),
    Param::memory("proto-max-bulk-len", 1048576, I64, "536870912"),
    Param::bool("rdb-del-sync-files", "no"),
    Param::int("rdb-key-save-delay", -I32 - 1, I32, "0").hidden(),
    Param::bool("rdb-save-incremental-fsync", "yes"),
    Param::bool("rdbchecksum", "yes").immutable(),
    Param::bool("rdbcompression", "yes"),
    Param::memory("repl-backlog-size", 1, I64, "1048576"),
    Param::int("repl-backlog-ttl", 0, I64, "3600"),
    Param::bool("repl-disable-tcp-nodelay", "no"),
    Param::choice(
        "repl-diskless-load",
        &["disabled", "on-empty-db", "swapdb"],
        "disabled",
    ),
    Param::bool("repl-diskless-sync", "yes"),
    Param::int("repl-diskless-sync-delay", 0, I32, "5"),
    Param::int("repl-diskless-sync-max-replicas", 0, I32, "0"),
    Param::int("repl-ping-replica-period", 1, I32, "10").alias("repl-ping-slave-period"),
    Param::int("repl-timeout", 1, I32, "60"),
    Param::text("replica-announce-ip", "").alias("slave-announce-ip"),
    Param::int("replica-announce-port", 0, 65535, "0").alias("slave-announce-port"),
    Param::bool("replica-announced", "yes"),
    Param::bool("replica-ignore-disk-write-errors", "no"),
    Param::bool("replica-ignore-maxmemory", "yes").alias("slave-ignore-maxmemory"),
    Param::bool("replica-lazy-flush", "no").alias("slave-lazy-flush"),
    Param::int("replica-priority", 0, I32, "100").alias("slave-priority"),
    Param::bool("replica-read-only", "yes").alias("slave-read-only"),
    Param::bool("replica-serve-stale-data", "yes").alias("slave-serve-stale-data"),
    Param::text("replicaof", "").alias("slaveof").immutable(),
    Param::text("requirepass", ""),
    Param::choice("sanitize-dump-payload", &["no", "yes", "clients"], "no"),
    Param::text("save", "3600 1 300 100 60 10000"),
    Param::text("server_cpulist", "").immutable(),
    Param::int("set-max-intset-entries", 0, I64, "512"),
    Param::bool("set-proc-title", "yes").immutable(),
    Param::choice(
        "shutdown-on-sigint",
        &["default", "save", "nosave", "now", "force"],
        "default",
    ),
    Param::choice(
        "shutdown-on-sigterm",
        &["default", "save", "nosave", "now", "force"],
        "default",
    ),
    Param::int("shutdown-timeout", 0, I32, "10"),
    Param::int("slowlog-log-slower-than", -1, I64, "10000"),
    Param::int("slowlog-max-len", 0, I64, "128"),
    Param::int("socket-mark-id", 0, U32, "0").immutable(),
    Param::bool("stop-writes-on-bgsave-error", "yes"),
    Param::memory("stream-node-max-bytes", 0, I64, "4096"),
    Param::int("stream-node-max-entries", 0, I64, "100"),
    Param::choice("supervised", &["upstart", "systemd", "auto", "no"], "no").immutable(),
    Param::bool("syslog-enabled", "no").immutable(),
    Param::choice(
        "syslog-facility",
        &[
            "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
        ],
        "local0",
    )
    .immutable(),
    Param::text("syslog-ident", "redis").immutable(),
    Param::int("tcp-backlog", 0, I32, "511").immutable(),
    Param::int("tcp-keepalive", 0, I32, "300"),
    Param::int("timeout", 0, I32, "0"),
    Param::choice("tls-auth-clients", &["no", "yes", "optional"], "yes"),
    Param::text("tls-ca-cert-dir", ""),
    Param::text("tls-ca-cert-file", ""),
    Param::text("tls-cert-file", ""),
    Param::text("tls-ciphers", ""),
    Param::text("tls-ciphersuites", ""),
    Param::text("tls-client-cert-file", ""),
    Param::text("tls-client-key-file", ""),
    Param::text("tls-client-key-file-pass", ""),
    Param::bool("tls-cluster", "no"),
    Param::text("tls-dh-params-file", ""),
    Param::text("tls-key-file", ""),
    Param::text("tls-key-file-pass", ""),
    Param::int("tls-port", 0, 65535, "0"),
    Param::bool("tls-prefer-server-ciphers", "no"),
    Param::text("tls-protocols", ""),
    Param::bool("tls-replication", "no"),
    Param::int("tls-session-cache-size", 0, I32, "20480"),
    Param::int("tls-session-cache-timeout", 0, I32, "300"),
    Param::bool("tls-session-caching", "yes"),
    Param::int("tracking-table-max-keys", 0, I64, "1000000"),
    Param::text("unixsocket", "").immutable(),
    Param::int("unixsocketperm", 0, 0o777, "0").immutable(),
    Param::bool("use-exit-on-panic", "no").hidden(),
    Param::int("watchdog-period", 0, I32, "0").hidden(),
    Param::int("zset-max-listpack-entries", 0, I64, "128").alias("zset-max-ziplist-entries"),
    Param::memory("zset-max-listpack-value", 0, I64, "64").alias("zset-max-ziplist-value"),
];
