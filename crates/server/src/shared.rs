//! What every connection shares: the keyspace, configuration, durability,
//! the client registry and the counters INFO reports.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_threads::StripedCounter;
use tokio::sync::Notify;

use crate::clients::Registry;
use crate::command_stats::CommandStats;
use crate::config::{Config, Runtime};
use crate::keyspace::Keyspace;
use crate::latency::LatencyMonitor;
use crate::maxmemory::MemoryLimit;
use crate::migrate_target::TargetCache;
use crate::monitor::Monitors;
use crate::output_limit::OutputLimits;
use crate::pause::Pause;
use crate::pubsub::PubSub;
use crate::reload::KeyspaceSlot;
use crate::scripting::Scripting;
use crate::session::WaitLines;
use crate::slowlog::SlowLog;

pub struct Shared {
    /// The network loops clients are served on (set once by `serve`;
    /// unset in tests that build a `Shared` alone).
    pub loops: std::sync::OnceLock<Arc<crate::net_loops::NetLoops>>,
    /// The keyspace, swapped whole by DEBUG RELOAD (`reload`): a command
    /// uses the one its `Ctx` holds, other code takes a guard per step.
    pub keyspace: Arc<KeyspaceSlot>,
    pub config: Config,
    pub runtime: Arc<Runtime>,
    pub clients: Registry,
    /// Clients blocked on each key, in the order they blocked.
    pub wait_lines: Arc<WaitLines>,
    pub stats: ServerStats,
    /// SLOWLOG.
    pub slowlog: SlowLog,
    /// CLIENT PAUSE.
    pub pause: Pause,
    /// `maxmemory` and its policy.
    pub memory_limit: MemoryLimit,
    /// Eviction's candidate pool and counters.
    pub eviction: crate::eviction::Eviction,
    /// LATENCY's events.
    pub latency: Arc<LatencyMonitor>,
    /// Subscriptions and message delivery (`publish` is the way in).
    pub pubsub: PubSub,
    /// Clients in MONITOR mode.
    pub monitors: Monitors,
    /// `client-output-buffer-limit`.
    pub output_limits: OutputLimits,
    /// Lua: EVAL's scripts, FUNCTION's libraries, the script running.
    pub scripting: Scripting,
    /// Users and their permissions (`acl`).
    pub acl: crate::acl::Acl,
    pub started: Instant,
    /// How long opening the store (recovery) and the keyspace scan took.
    pub recovery: Duration,
    pub keyspace_scan: Duration,
    /// The plain TCP port actually bound (the configured one, or the one
    /// the OS chose for port 0); 0 when only TLS listens (`tls-port` with
    /// `port 0`).
    pub port: u16,
    /// 40 random hex digits naming this run (INFO's run_id, master_replid).
    pub run_id: String,
    /// MIGRATE's cached connections to its targets.
    pub migrate_targets: Arc<TargetCache>,
    /// Whether the background expiry runs (DEBUG SET-ACTIVE-EXPIRE).
    pub active_expire: Arc<AtomicBool>,
    /// This node's Raft group, when `node-id` and `peers` make it one
    /// (`group`); set once at start.
    pub group: std::sync::OnceLock<engram_replication::Replica>,
    /// The keyspace notification classes in force (`notify-keyspace-events`).
    pub notifications: crate::notify::Notifications,
    /// Client-side caching: who tracks which keys (`tracking`).
    pub tracking: crate::tracking::Tracking,
    shutting_down: AtomicBool,
    pub shutdown: Notify,
}

#[derive(Default)]
pub struct ServerStats {
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    /// Per CPU, as every command or read bumps them.
    pub commands_processed: StripedCounter,
    pub net_input_bytes: StripedCounter,
    pub net_output_bytes: StripedCounter,
    pub protocol_errors: AtomicU64,
    /// TLS handshakes that failed or timed out (`tls`; INFO engram).
    pub tls_handshake_failures: AtomicU64,
    /// The most resident memory INFO memory has seen.
    pub memory_peak: AtomicU64,
    /// INFO commandstats and errorstats.
    pub commands: CommandStats,
}

impl ServerStats {
    pub fn reset(&self) {
        for counter in [
            &self.connections_received,
            &self.rejected_connections,
            &self.protocol_errors,
            &self.tls_handshake_failures,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
        self.commands_processed.reset();
        self.net_input_bytes.reset();
        self.net_output_bytes.reset();
        self.commands.reset();
    }
}

impl Shared {
    pub fn new(
        keyspace: Arc<Keyspace>,
        config: Config,
        runtime: Arc<Runtime>,
        recovery: Duration,
        keyspace_scan: Duration,
        port: u16,
    ) -> Shared {
        let functions_record = keyspace.functions_record();
        let shared = Shared {
            loops: std::sync::OnceLock::new(),
            keyspace: Arc::new(KeyspaceSlot::new(keyspace)),
            config,
            runtime,
            clients: Registry::default(),
            wait_lines: Arc::default(),
            stats: ServerStats::default(),
            slowlog: SlowLog::default(),
            pause: Pause::default(),
            memory_limit: MemoryLimit::default(),
            eviction: Default::default(),
            latency: Arc::default(),
            pubsub: PubSub::default(),
            monitors: Monitors::default(),
            output_limits: OutputLimits::default(),
            scripting: Scripting::default(),
            acl: crate::acl::Acl::new(None),
            started: Instant::now(),
            recovery,
            keyspace_scan,
            port,
            run_id: {
                use rand::Rng;
                let mut rng = rand::rng();
                (0..40)
                    .map(|_| char::from_digit(rng.random_range(0..16), 16).expect("a hex digit"))
                    .collect()
            },
            migrate_targets: Arc::default(),
            active_expire: Arc::new(AtomicBool::new(true)),
            group: std::sync::OnceLock::new(),
            notifications: Default::default(),
            tracking: Default::default(),
            shutting_down: AtomicBool::new(false),
            shutdown: Notify::new(),
        };
        // The FUNCTION libraries, kept as the keyspace's functions record.
        match functions_record {
            Ok(Some(record)) => {
                use crate::scripting::library::RestorePolicy;
                let mut functions = shared.scripting.functions.lock();
                if let Err(e) = functions.restore(&record, RestorePolicy::Flush) {
                    log::warn!("the stored FUNCTION libraries could not be loaded: {e}");
                }
                shared.scripting.note_counts(&functions);
            }
            Ok(None) => {}
            Err(e) => log::warn!("the stored FUNCTION libraries could not be read: {e}"),
        }
        // The configuration file's values of the parameters that act.
        let values = shared.runtime.redis_params.read().clone();
        for (name, value) in &values {
            if let Some(shown) = shared.apply_redis_param(name, value) {
                shared.runtime.redis_params.write().insert(name, shown);
            }
        }
        shared
    }

    /// After DEBUG RELOAD: the parameters that set something on the
    /// keyspace (notifications' expired-key notes, LFU counting) set it
    /// on the new one.
    pub fn reapply_keyspace_params(&self) {
        let values = self.runtime.redis_params.read().clone();
        for name in ["notify-keyspace-events", "maxmemory-policy"] {
            if let Some(value) = values.get(name) {
                self.apply_redis_param(name, value);
            }
        }
    }

    /// Starts a clean shutdown (SIGTERM, SIGINT, SHUTDOWN).
    pub fn request_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.shutdown.notify_waiters();
        self.shutdown.notify_one();
        self.clients.kill_all();
    }

    /// Publishes `message` on `channel` to its subscribers and those of
    /// the patterns matching it; returns how many received it. PUBLISH
    /// calls this, and so should anything else that publishes (keyspace
    /// notifications): it never blocks on a subscriber.
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> usize {
        self.pubsub.publish(channel, message, &self.output_limits)
    }

    /// SPUBLISH: to the subscribers of shard channel `channel`.
    pub fn spublish(&self, channel: &[u8], message: &[u8]) -> usize {
        self.pubsub.spublish(channel, message, &self.output_limits)
    }

    /// Puts a Redis parameter's new value into effect where Engram acts
    /// on it (the slow log, the latency monitor, output limits); the value
    /// is already checked. Returns the value to keep for CONFIG GET when
    /// it is not the one given (`client-output-buffer-limit` changes only
    /// the classes named, and is shown whole).
    pub fn apply_redis_param(&self, name: &str, value: &str) -> Option<String> {
        let number = || value.parse::<i64>().unwrap_or(0);
        match name {
            "client-output-buffer-limit" => {
                if let Err(e) = self.output_limits.set(value) {
                    log::warn!("client-output-buffer-limit '{value}': {e}");
                }
                return Some(self.output_limits.render());
            }
            "slowlog-log-slower-than" => {
                self.slowlog.slower_than.store(number(), Ordering::Relaxed)
            }
            "notify-keyspace-events" => {
                let flags = crate::notify::parse(value).unwrap_or(0);
                self.notifications.set(flags);
                // Expiry notes its keys only while someone would hear.
                let heard =
                    crate::notify::EXPIRED | crate::notify::KEYSPACE | crate::notify::KEYEVENT;
                // (In a reload's instant without a keyspace, the reload
                // sets it on the new one.)
                if let Some(keyspace) = self.keyspace.try_guard().as_ref() {
                    keyspace.expired.set_recording(
                        flags & crate::notify::EXPIRED != 0
                            && flags & heard != crate::notify::EXPIRED,
                    );
                }
                return Some(crate::notify::render(flags));
            }
            "acl-pubsub-default" => self.acl.set_all_channels_default(value == "allchannels"),
            "tracking-table-max-keys" => self.tracking.set_max_keys(number().max(0) as usize),
            "slowlog-max-len" => self.slowlog.set_max_len(number().max(0) as usize),
            "maxmemory" => self.memory_limit.set_limit(number().max(0) as u64),
            "maxmemory-policy" | "lfu-log-factor" | "lfu-decay-time" => {
                if let Some(policy) = crate::maxmemory::Policy::parse(value) {
                    self.memory_limit.set_policy(policy);
                }
                let policy = self.memory_limit.policy();
                let param = |name| self.redis_param(name).parse::<u32>().ok();
                if let Some(keyspace) = self.keyspace.try_guard().as_ref() {
                    keyspace.access.configure(
                        policy.is_lfu(),
                        if name == "lfu-log-factor" {
                            number() as u32
                        } else {
                            param("lfu-log-factor").unwrap_or(10)
                        },
                        if name == "lfu-decay-time" {
                            number() as u32
                        } else {
                            param("lfu-decay-time").unwrap_or(1)
                        },
                    );
                }
            }
            "maxmemory-samples" => self.memory_limit.samples.store(
                number().clamp(1, i64::from(u32::MAX)) as u32,
                Ordering::Relaxed,
            ),
            "maxmemory-eviction-tenacity" => self
                .memory_limit
                .tenacity
                .store(number().clamp(0, 100) as u32, Ordering::Relaxed),
            "hll-sparse-max-bytes" => self
                .runtime
                .hll_sparse_max_bytes
                .store(number().max(0) as usize, Ordering::Relaxed),
            "busy-reply-threshold" => self
                .scripting
                .busy_threshold_ms
                .store(number().max(0) as u64, Ordering::Relaxed),
            "stream-node-max-entries" => {
                engram_collections::types::stream::set_node_max_entries(number().max(0) as usize)
            }
            "stream-node-max-bytes" => {
                engram_collections::types::stream::set_node_max_bytes(number().max(0) as usize)
            }
            "latency-monitor-threshold" => self
                .latency
                .threshold_ms
                .store(number().max(0) as u64, Ordering::Relaxed),
            _ => {}
        }
        None
    }

    /// The current value of a Redis parameter kept without effect
    /// (`redis_params`), as CONFIG GET shows it.
    /// The ACL configured at startup (`acl::configured`).
    pub fn with_acl(mut self, acl: crate::acl::Acl) -> Shared {
        self.acl = acl;
        self
    }

    pub fn redis_param(&self, name: &str) -> String {
        self.runtime
            .redis_params
            .read()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }
}
