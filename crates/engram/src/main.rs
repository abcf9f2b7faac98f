//! The `engram` command line: `engram serve` (the Redis-compatible server),
//! `engram scrub` (the integrity check of a stopped store) and `engram
//! import` (a Redis RDB file into a data directory). The
//! benchmarks are a binary of their own, `engram-bench` (crates/bench).

#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

#[global_allocator]
// Counted, for INFO memory's `used_memory` and `maxmemory` (engram-memory).
static ALLOCATOR: engram_memory::Counting<mimalloc::MiMalloc> =
    engram_memory::Counting(mimalloc::MiMalloc);

#[derive(Parser)]
#[command(
    name = "engram",
    version,
    about = "Engram: a persistent-memory-native data store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the Redis-compatible server (defaults: 127.0.0.1:6379, data in
    /// ./engram-data, durability `process`).
    // Boxed: its options dwarf scrub's two.
    Serve(Box<ServeArgs>),
    /// Verifies a stopped store against its page checksums and parity,
    /// rebuilds what parity can, and names the keys on pages it cannot.
    /// Exit status 0: nothing unrepairable; 1: some pages unrepairable; 2:
    /// the scrub could not run (no store, directory locked by a server).
    Scrub(ScrubArgs),
    /// Loads a Redis RDB file (a dump.rdb) into a data directory.
    ///
    /// Reads RDB versions up to 10 (Redis 7.0): strings, lists, sets,
    /// sorted sets and hashes in every encoding Redis writes, in every
    /// database, with their expiry. Keys already expired are skipped, as
    /// Redis skips them when it loads a file; so are empty collections and
    /// keys longer than Engram's key limit. Function libraries are not
    /// imported (Engram has no Lua engine); a file with streams, module
    /// values or module data is refused.
    ///
    /// The whole file is checked (checksum, then every record) before
    /// anything is written, so a damaged file changes nothing; the error
    /// names the byte offset of the damage. The directory is created if
    /// missing; keys it already holds stay, except those the file names,
    /// which are replaced. A directory a running server has open is
    /// refused: stop the server first (or use RESTORE against it).
    ///
    /// Prints what was imported (keys per database and per type) and what
    /// was skipped. Exit status 0: imported; 1: nothing imported (or, if
    /// the error says so, the import stopped part way).
    Import(ImportArgs),
}

#[derive(Args)]
struct ImportArgs {
    /// The RDB file (Redis's dump.rdb, or any file Redis 7.0 SAVEs).
    file: PathBuf,
    /// The data directory to load it into (what `engram serve --dir` is
    /// then given).
    #[arg(long)]
    dir: PathBuf,
}

#[derive(Args)]
struct ScrubArgs {
    /// The store's data directory (what `engram serve --dir` was given).
    dir: PathBuf,
    /// Print the report as JSON on standard output.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => serve(*args),
        Command::Scrub(args) => {
            std::process::exit(engram_server::offline_scrub::run(&args.dir, args.json))
        }
        Command::Import(args) => match engram_server::rdb::import::import(&args.file, &args.dir) {
            Ok(summary) => {
                print!("{summary}");
                Ok(())
            }
            Err(message) => {
                eprintln!("engram import: {message}");
                std::process::exit(1)
            }
        },
    }
}

#[derive(Args)]
struct ServeArgs {
    /// A configuration file in redis.conf syntax (`port 6380`, `appendfsync
    /// always`, ...); flags given here override it.
    config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long)]
    bind: Option<String>,
    #[arg(long)]
    port: Option<u16>,
    /// Data directory (created if missing).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// When a write is acknowledged: process (survives a process crash),
    /// everysec (power loss: at most ~1 s lost) or always (power-fail
    /// durable before the reply). Redis's appendfsync names no, everysec,
    /// always are accepted too.
    #[arg(long)]
    durability: Option<String>,
    /// Persistent memory: auto (DAX if the file system offers MAP_SYNC),
    /// dax, or emulated.
    #[arg(long)]
    mode: Option<String>,
    /// Require AUTH with this password.
    #[arg(long)]
    requirepass: Option<String>,
    /// yes (the default, as Redis): without a password, only clients on
    /// the loopback interface are served; no: any client.
    #[arg(long)]
    protected_mode: Option<String>,
    #[arg(long)]
    maxclients: Option<usize>,
    /// Close clients idle this many seconds (0: never).
    #[arg(long)]
    timeout: Option<u64>,
    /// debug, verbose, notice or warning.
    #[arg(long)]
    loglevel: Option<String>,
    /// Logical databases (SELECT 0..N-1).
    #[arg(long)]
    databases: Option<usize>,
    /// Network loops (each a worker thread; as many serve as the load
    /// needs) [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
    /// Page checksums and stripe parity over the data file: off, lazy
    /// (refreshed by a background pass) or inline (before each write
    /// returns) [default: lazy].
    #[arg(long)]
    integrity: Option<String>,
    /// Lazy integrity: how often stale pages are refreshed [default: 1000].
    #[arg(long)]
    integrity_period_ms: Option<u64>,
    /// Data pages per parity page, 2 to 64; fixed when the integrity file is
    /// created [default: 4].
    #[arg(long)]
    integrity_stripe_pages: Option<u32>,
    /// Background scrub speed in MiB/s; 0 turns background scrubbing off
    /// (ENGRAM.SCRUB still works) [default: 64].
    #[arg(long)]
    integrity_scrub_rate_mb: Option<u64>,
    /// A background scrub sweeps the whole store once per this many
    /// seconds, no faster (and never above the rate); 0: as fast as the
    /// rate allows [default: 600].
    #[arg(long)]
    integrity_scrub_period_sec: Option<u64>,
    /// Cores the background threads (checkpoints, compaction, the integrity
    /// pass, expiry) start on: auto (the last quarter of this process's
    /// cores; none set apart on one core), all, or a CPU list like 3 or
    /// 2-3,6 [default: auto].
    #[arg(long)]
    background_cpus: Option<String>,
    /// Serve TLS on this port too (0: no TLS); with --port 0, TLS only.
    #[arg(long)]
    tls_port: Option<u16>,
    /// The server's certificate chain, PEM (needed with --tls-port).
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// The server's private key, PEM: PKCS#8, RSA or SEC1, unencrypted.
    #[arg(long)]
    tls_key_file: Option<PathBuf>,
    /// The CA certificates that sign client certificates, PEM.
    #[arg(long)]
    tls_ca_cert_file: Option<PathBuf>,
    /// yes: clients must present a certificate signed by the CA; no: none
    /// is asked for; optional: verified if presented [default: yes].
    #[arg(long)]
    tls_auth_clients: Option<String>,
    /// The TLS versions offered, e.g. "TLSv1.3" or "TLSv1.2 TLSv1.3"
    /// [default: both].
    #[arg(long)]
    tls_protocols: Option<String>,
    /// This node's id in its Raft group (with --peers): a number above 0.
    #[arg(long)]
    node_id: Option<u64>,
    /// Every member of the group with its bus address (Raft's traffic),
    /// this node included: 1@HOST:BUSPORT,2@HOST:BUSPORT,3@HOST:BUSPORT.
    #[arg(long)]
    peers: Option<String>,
    /// Raft's tick in ms: a heartbeat every tick [default: 10].
    #[arg(long)]
    raft_tick_ms: Option<u64>,
    /// Silent ticks before a follower calls an election (randomised up to
    /// twice this) [default: 6].
    #[arg(long)]
    raft_election_ticks: Option<usize>,
    /// Compact the Raft log once it holds this many bytes (64kb to 64gb)
    /// [default: 64mb].
    #[arg(long)]
    raft_compact_bytes: Option<String>,
    /// This node joins a running group (added with ENGRAM.GROUP ADD on
    /// the leader): it waits for the leader's snapshot.
    #[arg(long)]
    join: bool,
}

fn serve(args: ServeArgs) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => engram_server::Config::from_file(path).map_err(anyhow::Error::msg)?,
        None => engram_server::Config::default(),
    };
    let path = |file: Option<PathBuf>| file.map(|f| f.display().to_string());
    let overrides: [(&str, Option<String>); 30] = [
        ("bind", args.bind),
        ("port", args.port.map(|p| p.to_string())),
        ("dir", args.dir.map(|d| d.display().to_string())),
        ("durability", args.durability),
        ("mode", args.mode),
        ("requirepass", args.requirepass),
        ("protected-mode", args.protected_mode),
        ("maxclients", args.maxclients.map(|n| n.to_string())),
        ("timeout", args.timeout.map(|n| n.to_string())),
        ("loglevel", args.loglevel),
        ("databases", args.databases.map(|n| n.to_string())),
        ("threads", args.threads.map(|n| n.to_string())),
        ("integrity", args.integrity),
        (
            "integrity-period-ms",
            args.integrity_period_ms.map(|n| n.to_string()),
        ),
        (
            "integrity-stripe-pages",
            args.integrity_stripe_pages.map(|n| n.to_string()),
        ),
        (
            "integrity-scrub-rate-mb",
            args.integrity_scrub_rate_mb.map(|n| n.to_string()),
        ),
        (
            "integrity-scrub-period-sec",
            args.integrity_scrub_period_sec.map(|n| n.to_string()),
        ),
        ("background-cpus", args.background_cpus),
        ("tls-port", args.tls_port.map(|p| p.to_string())),
        ("tls-cert-file", path(args.tls_cert_file)),
        ("tls-key-file", path(args.tls_key_file)),
        ("tls-ca-cert-file", path(args.tls_ca_cert_file)),
        ("tls-auth-clients", args.tls_auth_clients),
        ("tls-protocols", args.tls_protocols),
        ("node-id", args.node_id.map(|n| n.to_string())),
        ("peers", args.peers),
        ("raft-tick-ms", args.raft_tick_ms.map(|n| n.to_string())),
        (
            "raft-election-ticks",
            args.raft_election_ticks.map(|n| n.to_string()),
        ),
        ("raft-compact-bytes", args.raft_compact_bytes),
        ("join", args.join.then(|| "yes".to_string())),
    ];
    for (name, value) in overrides {
        if let Some(value) = value {
            config
                .set(name, &[value])
                .map_err(|e| anyhow::anyhow!("--{name}: {e}"))?;
        }
    }
    config.handle_signals = true;
    env_logger::Builder::new()
        .filter_level(log::LevelFilter::Trace)
        .format_timestamp_millis()
        .init();
    log::set_max_level(config.loglevel.filter());
    let server = engram_server::Server::start(config)?;
    server.wait().map_err(anyhow::Error::msg)
}
