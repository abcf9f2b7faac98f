//! Server configuration: defaults, the configuration file, command-line
//! overrides, and the parameters `CONFIG GET/SET` can see and change.
//!
//! The file format is Redis's: one `name value...` per line, `#` comments,
//! quoting as in inline commands. Names Redis users know keep their meaning
//! (`appendfsync` is another spelling of `durability`).
//!
//! The integrity layer's settings (`integrity`, `integrity-period-ms`,
//! `integrity-stripe-pages`, `integrity-scrub-rate-mb`,
//! `integrity-scrub-period-sec`) go to the engine when
//! the store opens and are fixed for the server's life: `CONFIG GET` shows
//! them, `CONFIG SET` refuses them. So are the collections store's
//! checkpoint settings (`collections-checkpoint-bytes`,
//! `collections-backpressure-factor`), and `background-cpus`, the cores the
//! background threads start on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use engram_engine::{IntegrityOptions, ModeChoice};
use engram_threads::{self as background, BackgroundCpus};
use parking_lot::RwLock;

use crate::redis_params;
use crate::resp::parse::{split_words, DEFAULT_MAX_BULK_BYTES};
use crate::tls::TlsSettings;

pub use engram_keyspace::Durability;

/// The `appendfsync` value a Redis user would expect for `durability`.
pub fn appendfsync_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Process => "no",
        Durability::Everysec => "everysec",
        Durability::Always => "always",
    }
}

/// Reads a durability under Engram's names (`process`, `everysec`,
/// `always`) or Redis's `appendfsync` ones (`no`, `everysec`, `always`):
/// the protocol's edge, where the two vocabularies meet.
pub fn parse_durability(text: &str) -> Result<Durability, String> {
    if text.eq_ignore_ascii_case("no") {
        return Ok(Durability::Process);
    }
    text.parse().map_err(|_| {
        format!(
            "invalid durability '{text}' (expected process, everysec or always; \
             appendfsync's no, everysec, always also work)"
        )
    })
}

/// Redis's log levels, mapped onto the `log` crate's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogLevel {
    Debug,
    Verbose,
    #[default]
    Notice,
    Warning,
    Nothing,
}

impl LogLevel {
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Verbose => "verbose",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Nothing => "nothing",
        }
    }

    pub fn filter(self) -> log::LevelFilter {
        match self {
            LogLevel::Debug => log::LevelFilter::Trace,
            LogLevel::Verbose => log::LevelFilter::Debug,
            LogLevel::Notice => log::LevelFilter::Info,
            LogLevel::Warning => log::LevelFilter::Warn,
            LogLevel::Nothing => log::LevelFilter::Off,
        }
    }

    fn from_u8(v: u8) -> LogLevel {
        [
            LogLevel::Debug,
            LogLevel::Verbose,
            LogLevel::Notice,
            LogLevel::Warning,
            LogLevel::Nothing,
        ][v as usize % 5]
    }
}

impl std::str::FromStr for LogLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "debug" => Ok(LogLevel::Debug),
            "verbose" => Ok(LogLevel::Verbose),
            "notice" => Ok(LogLevel::Notice),
            "warning" => Ok(LogLevel::Warning),
            "nothing" => Ok(LogLevel::Nothing),
            _ => Err(format!(
                "invalid log level '{s}' (expected debug, verbose, notice, warning or nothing)"
            )),
        }
    }
}

/// Everything `engram serve` can be told.
#[derive(Clone, Debug)]
pub struct Config {
    pub bind: String,
    pub port: u16,
    pub dir: PathBuf,
    pub durability: Durability,
    /// DAX, emulated, or detect (`auto`).
    pub mode: ModeChoice,
    pub requirepass: Option<String>,
    /// `user` lines: users defined in the configuration file, each line's
    /// words after `user` (Redis's alternative to an `aclfile`).
    pub users: Vec<Vec<String>>,
    pub maxclients: usize,
    /// Close clients idle this long, in seconds (0: never).
    pub timeout_secs: u64,
    pub loglevel: LogLevel,
    pub databases: usize,
    pub proto_max_bulk_len: usize,
    /// The most a client may have buffered of unparsed requests.
    pub client_query_buffer_limit: usize,
    /// Replies buffered beyond this are sent before more commands run, so a
    /// client that pipelines without reading holds at most this much
    /// (Redis's `client-output-buffer-limit`, which disconnects, is a
    /// run-time parameter: `output_limit`).
    pub reply_flush_bytes: usize,
    /// Network loops for connections (`net_loops`); 0 means one per core.
    pub threads: usize,
    /// The file this configuration came from, if any (`INFO server`).
    pub config_file: Option<PathBuf>,
    /// Shut down cleanly on SIGTERM and SIGINT (the binary; not embedders).
    pub handle_signals: bool,
    /// Page checksums, stripe parity and scrubbing over the data file
    /// (default: lazy, 1 s period, 4-page stripes, 64 MiB/s background
    /// scrub). Checked by [`check_integrity`] at start.
    pub integrity: IntegrityOptions,
    /// A checkpoint of the collections starts when this much operation log
    /// was written since the last one (default 64 MiB).
    pub collections_checkpoint_bytes: u64,
    /// Writers to collections slow down, gradually, once the log not yet
    /// checkpointed passes this many checkpoints' worth (default 4).
    pub collections_backpressure_factor: u64,
    /// The cores background threads (checkpoints, compaction, the
    /// integrity pass, expiry) start on: `auto` (the last quarter of the
    /// process's cores), `all`, or a CPU list. Process-wide
    /// ([`engram_threads`]).
    pub background_cpus: BackgroundCpus,
    /// TLS (`tls-port` and the files it needs; `tls`). With `port` 0 and
    /// a `tls-port`, only TLS is served, as in Redis; `port` 0 alone lets
    /// the OS choose the plain port (where Redis would listen nowhere).
    pub tls: TlsSettings,
    /// Redis parameters that only keep a value here (`redis_params`), as
    /// the configuration file set them: canonical name, checked value.
    pub redis_params: Vec<(&'static str, String)>,
    /// Replication (`node-id` and `peers`): this node's id in its Raft
    /// group and every member's bus address (`1@host:port,...`). Both or
    /// neither; without them the server is a single node.
    pub node_id: Option<u64>,
    pub peers: Option<Vec<engram_replication::Peer>>,
    /// Raft's clock (`raft-tick-ms`, default 10): heartbeats go out every
    /// tick; a follower that hears nothing for `raft-election-ticks` to
    /// twice that (default 6) calls an election.
    pub raft_tick_ms: u64,
    pub raft_election_ticks: usize,
    /// The Raft log is compacted once its records take this many bytes
    /// (`raft-compact-bytes`, default 64mb; 64kb to 64gb).
    pub raft_compact_bytes: u64,
    /// `join yes`: this node is being added to a running group (ENGRAM.GROUP
    /// ADD on the leader): it starts with no membership and waits for the
    /// leader's snapshot. Only read when its Raft log is created.
    pub join: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: "127.0.0.1".into(),
            port: 6379,
            dir: PathBuf::from("engram-data"),
            durability: Durability::Process,
            mode: ModeChoice::Auto,
            requirepass: None,
            users: Vec::new(),
            maxclients: 10_000,
            timeout_secs: 0,
            loglevel: LogLevel::Notice,
            databases: 16,
            proto_max_bulk_len: DEFAULT_MAX_BULK_BYTES,
            client_query_buffer_limit: 1 << 30,
            reply_flush_bytes: 64 << 20,
            threads: 0,
            config_file: None,
            handle_signals: false,
            integrity: IntegrityOptions::default(),
            collections_checkpoint_bytes: 64 << 20,
            collections_backpressure_factor: 4,
            background_cpus: BackgroundCpus::Auto,
            tls: TlsSettings::default(),
            redis_params: Vec::new(),
            node_id: None,
            peers: None,
            raft_tick_ms: 10,
            raft_election_ticks: 6,
            raft_compact_bytes: 64 << 20,
            join: false,
        }
    }
}

impl Config {
    /// The value the configuration gave a Redis parameter kept in
    /// `redis_params` (its last setting), None when it kept the default.
    pub fn redis_param(&self, name: &str) -> Option<&str> {
        self.redis_params
            .iter()
            .rev()
            .find(|(kept, _)| *kept == name)
            .map(|(_, value)| value.as_str())
    }

    /// The plain TCP port to listen on, if any: none when TLS is on and
    /// `port` is 0 (Redis's TLS-only setup).
    pub fn plain_port(&self) -> Option<u16> {
        match (self.port, self.tls.port) {
            (0, tls) if tls != 0 => None,
            (port, _) => Some(port),
        }
    }

    /// Network worker threads: as configured, or one per core.
    pub fn worker_threads(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        }
    }

    /// Reads a configuration file over the defaults.
    pub fn from_file(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        let mut config = Config {
            config_file: Some(path.to_path_buf()),
            ..Config::default()
        };
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words = split_words(line.as_bytes())
                .map_err(|e| format!("{}:{}: {e}", path.display(), number + 1))?;
            let words: Vec<String> = words
                .into_iter()
                .map(|w| String::from_utf8_lossy(&w).into_owned())
                .collect();
            let (name, values) = words.split_first().expect("a non-empty line has a word");
            config
                .set(name, values)
                .map_err(|e| format!("{}:{}: {e}", path.display(), number + 1))?;
        }
        Ok(config)
    }

    /// Sets one parameter by its configuration-file name.
    pub fn set(&mut self, name: &str, values: &[String]) -> Result<(), String> {
        let name = name.to_ascii_lowercase();
        let one = || -> Result<&str, String> {
            match values {
                [value] => Ok(value.as_str()),
                _ => Err(format!("'{name}' takes exactly one value")),
            }
        };
        match name.as_str() {
            // Redis accepts several addresses; Engram listens on the first.
            "bind" => {
                self.bind = values
                    .first()
                    .ok_or_else(|| "'bind' needs an address".to_string())?
                    .clone()
            }
            "port" => self.port = parse_number(&name, one()?)?,
            "dir" => self.dir = PathBuf::from(one()?),
            "durability" | "appendfsync" => self.durability = parse_durability(one()?)?,
            "mode" => {
                self.mode = match one()? {
                    "auto" => ModeChoice::Auto,
                    "dax" => ModeChoice::Dax,
                    "emulated" => ModeChoice::Emulated,
                    other => return Err(format!("invalid mode '{other}' (auto, dax or emulated)")),
                }
            }
            "requirepass" => {
                let value = one()?;
                self.requirepass = (!value.is_empty()).then(|| value.to_string());
            }
            "user" => {
                if values.is_empty() {
                    return Err("'user' needs a user name".into());
                }
                self.users.push(values.to_vec());
            }
            "maxclients" => self.maxclients = parse_number(&name, one()?)?,
            "timeout" => self.timeout_secs = parse_number(&name, one()?)?,
            "loglevel" => self.loglevel = one()?.parse()?,
            "databases" => {
                let n: usize = parse_number(&name, one()?)?;
                if !(1..=256).contains(&n) {
                    return Err(format!("databases must be 1 to 256, got {n}"));
                }
                self.databases = n;
            }
            "proto-max-bulk-len" => {
                let n: usize = parse_memory(one()?)?;
                if !(1024..=DEFAULT_MAX_BULK_BYTES).contains(&n) {
                    return Err(format!(
                        "proto-max-bulk-len must be 1kb to 512mb (the engine's value limit), got {n}"
                    ));
                }
                self.proto_max_bulk_len = n;
            }
            "client-query-buffer-limit" => self.client_query_buffer_limit = parse_memory(one()?)?,
            "threads" | "io-threads" => self.threads = parse_number(&name, one()?)?,
            "integrity" => {
                self.integrity.mode = one()?.parse().map_err(|_| {
                    format!(
                        "invalid integrity mode '{}' (expected off, lazy or inline)",
                        values[0]
                    )
                })?
            }
            "integrity-period-ms" => {
                let ms: u64 = parse_number(&name, one()?)?;
                self.integrity.period = Duration::from_millis(ms);
                check_integrity(&self.integrity)?;
            }
            "integrity-stripe-pages" => {
                self.integrity.stripe_pages = parse_number(&name, one()?)?;
                check_integrity(&self.integrity)?;
            }
            "integrity-scrub-rate-mb" => {
                let mib: u64 = parse_number(&name, one()?)?;
                if mib > MAX_SCRUB_RATE_MIB {
                    return Err(format!(
                        "integrity-scrub-rate-mb must be 0 (no background scrub) to \
                         {MAX_SCRUB_RATE_MIB} (MiB/s), got {mib}"
                    ));
                }
                self.integrity.scrub_bytes_per_sec = mib << 20;
            }
            "integrity-scrub-period-sec" => {
                let secs: u64 = parse_number(&name, one()?)?;
                self.integrity.scrub_period = Duration::from_secs(secs);
                check_integrity(&self.integrity)?;
            }
            "collections-checkpoint-bytes" => {
                let bytes = parse_memory(one()?)? as u64;
                if !(MIN_CHECKPOINT_BYTES..=MAX_CHECKPOINT_BYTES).contains(&bytes) {
                    return Err(format!(
                        "collections-checkpoint-bytes must be 1mb to 64gb, got {bytes}"
                    ));
                }
                self.collections_checkpoint_bytes = bytes;
            }
            "collections-backpressure-factor" => {
                let factor: u64 = parse_number(&name, one()?)?;
                if !(1..=MAX_BACKPRESSURE_FACTOR).contains(&factor) {
                    return Err(format!(
                        "collections-backpressure-factor must be 1 to \
                         {MAX_BACKPRESSURE_FACTOR}, got {factor}"
                    ));
                }
                self.collections_backpressure_factor = factor;
            }
            "node-id" => {
                let id: u64 = one()?
                    .parse()
                    .ok()
                    .filter(|&id| id > 0)
                    .ok_or("node-id must be a number above 0")?;
                self.node_id = Some(id);
            }
            "raft-tick-ms" => {
                let ms: u64 = parse_number(&name, one()?)?;
                if !(1..=1000).contains(&ms) {
                    return Err("raft-tick-ms must be 1 to 1000".into());
                }
                self.raft_tick_ms = ms;
            }
            "raft-election-ticks" => {
                let ticks: usize = parse_number(&name, one()?)?;
                if !(3..=1000).contains(&ticks) {
                    return Err("raft-election-ticks must be 3 to 1000".into());
                }
                self.raft_election_ticks = ticks;
            }
            "join" => {
                self.join = match one()?.to_ascii_lowercase().as_str() {
                    "yes" => true,
                    "no" => false,
                    other => return Err(format!("join must be yes or no, got '{other}'")),
                };
            }
            "raft-compact-bytes" => {
                let bytes = parse_memory(one()?)? as u64;
                if !((64 << 10)..=(64 << 30)).contains(&bytes) {
                    return Err(format!(
                        "raft-compact-bytes must be 64kb to 64gb, got {bytes}"
                    ));
                }
                self.raft_compact_bytes = bytes;
            }
            "peers" => {
                let peers = engram_replication::parse_peers(one()?).map_err(|e| e.to_string())?;
                self.peers = Some(peers);
            }
            "background-cpus" => {
                let choice: BackgroundCpus = one()?.parse().map_err(|e| format!("{e}"))?;
                // Refuse cores this process may not use now, not at start.
                background::resolve(&choice, &background::allowed_cpus())
                    .map_err(|e| e.to_string())?;
                self.background_cpus = choice;
            }
            name if crate::tls::PARAMETERS.contains(&name) => {
                self.tls.set(name, &values.join(" "))?
            }
            // Every other Redis 7.0 parameter: checked as Redis checks it,
            // kept, shown by CONFIG GET, without effect (`redis_params`).
            _ => {
                let param = redis_params::find(&name)
                    .ok_or_else(|| format!("unknown configuration parameter '{name}'"))?;
                let value = param
                    .check(&values.join(" "))
                    .map_err(|reason| format!("'{name}': {reason}"))?;
                // Each client-output-buffer-limit line changes only the
                // classes it names: later lines add to earlier ones.
                let earlier = self
                    .redis_params
                    .iter_mut()
                    .find(|(name, _)| *name == param.name && *name == "client-output-buffer-limit");
                match earlier {
                    Some((_, kept)) => *kept = format!("{kept} {value}"),
                    None => self.redis_params.push((param.name, value)),
                }
            }
        }
        Ok(())
    }
}

/// Bounds of `collections-checkpoint-bytes`: below 1 MiB a checkpoint would
/// rewrite hot images for every few thousand writes; 64 GiB of log is more
/// than a recovery should ever replay.
const MIN_CHECKPOINT_BYTES: u64 = 1 << 20;
const MAX_CHECKPOINT_BYTES: u64 = 64 << 30;
/// Beyond this many checkpoints' worth of log, waiting longer to slow
/// writers down only makes recovery longer.
const MAX_BACKPRESSURE_FACTOR: u64 = 1024;

/// The fastest background scrub `integrity-scrub-rate-mb` accepts (1 TiB/s:
/// far beyond any memory, and small enough that bytes fit a u64).
pub const MAX_SCRUB_RATE_MIB: u64 = 1 << 20;

/// Checks the integrity settings, naming the configuration parameter at
/// fault (the engine would name its own field instead).
pub fn check_integrity(options: &IntegrityOptions) -> Result<(), String> {
    let (min, max) = (
        engram_integrity::layout::MIN_STRIPE_PAGES,
        engram_integrity::layout::MAX_STRIPE_PAGES,
    );
    if !(min..=max).contains(&options.stripe_pages) {
        return Err(format!(
            "integrity-stripe-pages must be {min} to {max}, got {}",
            options.stripe_pages
        ));
    }
    let max_period = engram_integrity::MAX_PERIOD;
    if options.period.is_zero() || options.period > max_period {
        return Err(format!(
            "integrity-period-ms must be 1 to {} (24 hours), got {}",
            max_period.as_millis(),
            options.period.as_millis()
        ));
    }
    let max_sweep = engram_integrity::MAX_SCRUB_PERIOD;
    if options.scrub_period > max_sweep {
        return Err(format!(
            "integrity-scrub-period-sec must be 0 (no pacing) to {} (31 days), got {}",
            max_sweep.as_secs(),
            options.scrub_period.as_secs()
        ));
    }
    if options.scrub_bytes_per_sec > MAX_SCRUB_RATE_MIB << 20 {
        return Err(format!(
            "integrity-scrub-rate-mb must be at most {MAX_SCRUB_RATE_MIB}, got {} bytes/s",
            options.scrub_bytes_per_sec
        ));
    }
    Ok(())
}

fn parse_number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("'{name}' needs a non-negative integer, got '{value}'"))
}

/// A size like Redis writes them: `1024`, `64kb`, `512mb`, `1gb`.
pub fn parse_memory(value: &str) -> Result<usize, String> {
    let lower = value.to_ascii_lowercase();
    let (digits, unit) = match lower.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => lower.split_at(at),
        None => (lower.as_str(), ""),
    };
    let multiplier: usize = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return Err(format!("invalid size '{value}'")),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| format!("invalid size '{value}'"))
}

/// The parameters that can change while the server runs (`CONFIG SET`),
/// read on the request path without locks. (Durability is the keyspace's:
/// `Keyspace::commit`.)
pub struct Runtime {
    loglevel: AtomicU8,
    pub maxclients: AtomicUsize,
    pub timeout_secs: AtomicU64,
    pub proto_max_bulk_len: AtomicUsize,
    pub client_query_buffer_limit: AtomicUsize,
    pub requirepass: RwLock<Option<String>>,
    /// The values of the Redis parameters that have no effect here, by
    /// canonical name (`redis_params`).
    pub redis_params: RwLock<HashMap<&'static str, String>>,
    /// Redis's `hll-sparse-max-bytes`: the size past which a sparse
    /// HyperLogLog turns dense.
    pub hll_sparse_max_bytes: AtomicUsize,
}

impl Runtime {
    pub fn new(config: &Config) -> Runtime {
        Runtime {
            loglevel: AtomicU8::new(config.loglevel as u8),
            maxclients: AtomicUsize::new(config.maxclients),
            timeout_secs: AtomicU64::new(config.timeout_secs),
            proto_max_bulk_len: AtomicUsize::new(config.proto_max_bulk_len),
            client_query_buffer_limit: AtomicUsize::new(config.client_query_buffer_limit),
            requirepass: RwLock::new(config.requirepass.clone()),
            redis_params: RwLock::new({
                let mut values = redis_params::defaults();
                values.extend(config.redis_params.iter().cloned());
                values
            }),
            hll_sparse_max_bytes: AtomicUsize::new(crate::hll::DEFAULT_SPARSE_MAX_BYTES),
        }
    }

    pub fn loglevel(&self) -> LogLevel {
        LogLevel::from_u8(self.loglevel.load(Ordering::Relaxed))
    }

    pub fn set_loglevel(&self, level: LogLevel) {
        self.loglevel.store(level as u8, Ordering::Relaxed);
        log::set_max_level(level.filter());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engram.conf");
        std::fs::write(
            &path,
            "# a comment\nport 7000\nappendfsync always\nrequirepass \"s3 cret\"\n\nloglevel warning\n",
        )
        .unwrap();
        let config = Config::from_file(&path).unwrap();
        assert_eq!(config.port, 7000);
        assert_eq!(config.durability, Durability::Always);
        assert_eq!(config.requirepass.as_deref(), Some("s3 cret"));
        assert_eq!(config.loglevel, LogLevel::Warning);
        assert_eq!(config.bind, "127.0.0.1");
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.conf");
        std::fs::write(&path, "port 7000\nport seventy\n").unwrap();
        let err = Config::from_file(&path).unwrap_err();
        assert!(
            err.contains("bad.conf:2") && err.contains("seventy"),
            "{err}"
        );
        std::fs::write(&path, "frobnicate yes\n").unwrap();
        let err = Config::from_file(&path).unwrap_err();
        assert!(
            err.contains("unknown configuration parameter 'frobnicate'"),
            "{err}"
        );
        std::fs::write(&path, "durability sometimes\n").unwrap();
        assert!(Config::from_file(&path)
            .unwrap_err()
            .contains("invalid durability"));
    }

    #[test]
    fn collections_settings() {
        let mut config = Config::default();
        assert_eq!(config.collections_checkpoint_bytes, 64 << 20);
        assert_eq!(config.collections_backpressure_factor, 4);
        config
            .set("collections-checkpoint-bytes", &["16mb".into()])
            .unwrap();
        config
            .set("collections-backpressure-factor", &["8".into()])
            .unwrap();
        assert_eq!(config.collections_checkpoint_bytes, 16 << 20);
        assert_eq!(config.collections_backpressure_factor, 8);
        for (name, value, error) in [
            (
                "collections-checkpoint-bytes",
                "1000",
                "must be 1mb to 64gb, got 1000",
            ),
            (
                "collections-checkpoint-bytes",
                "65gb",
                "must be 1mb to 64gb",
            ),
            ("collections-checkpoint-bytes", "-1", "invalid size '-1'"),
            (
                "collections-backpressure-factor",
                "0",
                "must be 1 to 1024, got 0",
            ),
            (
                "collections-backpressure-factor",
                "2000",
                "must be 1 to 1024, got 2000",
            ),
            (
                "collections-backpressure-factor",
                "x",
                "needs a non-negative integer",
            ),
        ] {
            let err = config.set(name, &[value.into()]).unwrap_err();
            assert!(err.contains(error), "{name} {value}: {err}");
        }
        // A refused value changes nothing.
        assert_eq!(config.collections_checkpoint_bytes, 16 << 20);
        assert_eq!(config.collections_backpressure_factor, 8);
    }

    #[test]
    fn background_cpus_setting() {
        let mut config = Config::default();
        assert_eq!(config.background_cpus, BackgroundCpus::Auto);
        config.set("background-cpus", &["all".into()]).unwrap();
        assert_eq!(config.background_cpus, BackgroundCpus::All);
        let first = background::allowed_cpus()[0];
        config.set("background-cpus", &[first.to_string()]).unwrap();
        assert_eq!(config.background_cpus, BackgroundCpus::List(vec![first]));
        for (value, error) in [
            ("sometimes", "invalid background CPUs 'sometimes'"),
            ("3-1", "invalid background CPUs '3-1'"),
            (
                "1000",
                "CPU 1000 is not among the CPUs this process may use",
            ),
        ] {
            let err = config.set("background-cpus", &[value.into()]).unwrap_err();
            assert!(err.contains(error), "{value}: {err}");
        }
        // A refused value changes nothing.
        assert_eq!(config.background_cpus, BackgroundCpus::List(vec![first]));
    }

    #[test]
    fn integrity_settings() {
        let config = Config::default();
        assert_eq!(config.integrity.mode, engram_engine::IntegrityMode::Lazy);
        assert_eq!(config.integrity.period, Duration::from_millis(1000));
        assert_eq!(config.integrity.stripe_pages, 4);
        assert_eq!(config.integrity.scrub_bytes_per_sec, 64 << 20);
        assert_eq!(config.integrity.scrub_period, Duration::from_secs(600));
        assert_eq!(check_integrity(&config.integrity), Ok(()));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engram.conf");
        std::fs::write(
            &path,
            "integrity inline\nintegrity-period-ms 250\nintegrity-stripe-pages 8\n\
             integrity-scrub-rate-mb 0\nintegrity-scrub-period-sec 0\n",
        )
        .unwrap();
        let config = Config::from_file(&path).unwrap();
        assert_eq!(config.integrity.mode, engram_engine::IntegrityMode::Inline);
        assert_eq!(config.integrity.period, Duration::from_millis(250));
        assert_eq!(config.integrity.stripe_pages, 8);
        assert_eq!(config.integrity.scrub_bytes_per_sec, 0);
        assert_eq!(config.integrity.scrub_period, Duration::ZERO);

        let mut config = Config::default();
        config.set("integrity", &["OFF".into()]).unwrap();
        assert_eq!(config.integrity.mode, engram_engine::IntegrityMode::Off);
        for (name, value, expected) in [
            (
                "integrity",
                "sometimes",
                "invalid integrity mode 'sometimes'",
            ),
            (
                "integrity-period-ms",
                "0",
                "integrity-period-ms must be 1 to 86400000",
            ),
            (
                "integrity-period-ms",
                "86400001",
                "integrity-period-ms must be 1 to 86400000",
            ),
            (
                "integrity-period-ms",
                "soon",
                "'integrity-period-ms' needs a non-negative integer",
            ),
            (
                "integrity-stripe-pages",
                "1",
                "integrity-stripe-pages must be 2 to 64, got 1",
            ),
            (
                "integrity-stripe-pages",
                "65",
                "integrity-stripe-pages must be 2 to 64, got 65",
            ),
            (
                "integrity-scrub-rate-mb",
                "-1",
                "'integrity-scrub-rate-mb' needs a non-negative",
            ),
            (
                "integrity-scrub-rate-mb",
                "99999999999",
                "integrity-scrub-rate-mb must be 0",
            ),
            (
                "integrity-scrub-period-sec",
                "2678401",
                "integrity-scrub-period-sec must be 0 (no pacing) to 2678400",
            ),
            (
                "integrity-scrub-period-sec",
                "-5",
                "'integrity-scrub-period-sec' needs a non-negative",
            ),
        ] {
            let err = Config::default().set(name, &[value.into()]).unwrap_err();
            assert!(err.contains(expected), "{name} {value}: {err}");
        }
        std::fs::write(&path, "port 7000\nintegrity-stripe-pages 100\n").unwrap();
        let err = Config::from_file(&path).unwrap_err();
        assert!(
            err.contains("engram.conf:2") && err.contains("integrity-stripe-pages"),
            "{err}"
        );
    }

    #[test]
    fn tls_settings_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engram.conf");
        std::fs::write(
            &path,
            "port 0\ntls-port 6380\ntls-cert-file /etc/engram/server.pem\n\
             tls-key-file /etc/engram/server.key\ntls-ca-cert-file /etc/engram/ca.pem\n\
             tls-auth-clients optional\ntls-protocols \"TLSv1.2 TLSv1.3\"\n",
        )
        .unwrap();
        let config = Config::from_file(&path).unwrap();
        assert_eq!(config.tls.port, 6380);
        assert_eq!(
            config.tls.cert_file.as_deref(),
            Some(Path::new("/etc/engram/server.pem"))
        );
        assert_eq!(
            config.tls.key_file.as_deref(),
            Some(Path::new("/etc/engram/server.key"))
        );
        assert_eq!(
            config.tls.ca_cert_file.as_deref(),
            Some(Path::new("/etc/engram/ca.pem"))
        );
        assert_eq!(config.tls.auth_clients, crate::tls::AuthClients::Optional);
        assert_eq!(config.tls.protocols.len(), 2);
        // port 0 beside a tls-port: TLS only, as in Redis.
        assert_eq!(config.plain_port(), None);

        let mut config = Config::default();
        assert_eq!(config.plain_port(), Some(6379));
        config.set("port", &["0".into()]).unwrap();
        assert_eq!(config.plain_port(), Some(0), "the OS chooses");
        config.set("tls-port", &["6380".into()]).unwrap();
        config.set("port", &["7000".into()]).unwrap();
        assert_eq!(config.plain_port(), Some(7000), "both");

        std::fs::write(&path, "tls-protocols TLSv1.2 SSLv3\n").unwrap();
        let err = Config::from_file(&path).unwrap_err();
        assert!(
            err.contains("engram.conf:1") && err.contains("unknown protocol 'SSLv3'"),
            "{err}"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_memory("512mb").unwrap(), 512 << 20);
        assert_eq!(parse_memory("1gb").unwrap(), 1 << 30);
        assert_eq!(parse_memory("100").unwrap(), 100);
        assert!(parse_memory("12xb").is_err());
        assert!(parse_memory("99999999999999999999gb").is_err());
    }

    #[test]
    fn group_settings() {
        let mut config = Config::default();
        config.set("node-id", &["2".into()]).unwrap();
        config
            .set(
                "peers",
                &["1@127.0.0.1:7101, 2@127.0.0.1:7102,3@127.0.0.1:7103".into()],
            )
            .unwrap();
        assert_eq!(config.node_id, Some(2));
        let peers = config.peers.clone().unwrap();
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[1].bus.port(), 7102);
        config.set("raft-tick-ms", &["5".into()]).unwrap();
        config.set("raft-election-ticks", &["8".into()]).unwrap();
        assert_eq!((config.raft_tick_ms, config.raft_election_ticks), (5, 8));
        config.set("raft-compact-bytes", &["1mb".into()]).unwrap();
        assert_eq!(config.raft_compact_bytes, 1 << 20);
        for (name, value, error) in [
            ("node-id", "0", "node-id must be a number above 0"),
            ("node-id", "x", "node-id must be a number above 0"),
            ("peers", "", "no peers given"),
            (
                "peers",
                "1@127.0.0.1:1,1@127.0.0.1:2",
                "node id 1 appears twice",
            ),
            ("peers", "127.0.0.1:7000", "is not ID@HOST:PORT"),
            ("peers", "0@127.0.0.1:7000", "is not a node id"),
            ("peers", "1@nowhere", "nowhere"),
            ("raft-tick-ms", "0", "raft-tick-ms must be 1 to 1000"),
            (
                "raft-compact-bytes",
                "1kb",
                "raft-compact-bytes must be 64kb to 64gb",
            ),
            ("raft-compact-bytes", "-5", "invalid size"),
            (
                "raft-election-ticks",
                "2",
                "raft-election-ticks must be 3 to 1000",
            ),
        ] {
            let err = config.set(name, &[value.into()]).unwrap_err();
            assert!(err.contains(error), "{name} {value}: {err}");
        }
        // A refused value changes nothing.
        assert_eq!(config.node_id, Some(2));
        assert_eq!(config.peers.as_ref().map(Vec::len), Some(3));
        assert_eq!(config.raft_tick_ms, 5);
    }
}
