//! Starting and stopping the server: read the TLS files, open the store,
//! rebuild the keyspace, bind the plain and TLS ports, accept connections
//! (`accept`) on a multi-threaded runtime, and on shutdown drain clients,
//! sync and close the store.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::config::{Config, Runtime};
use crate::keyspace::{now_ms, Keyspace, KeyspaceOptions, OpenError, Opened};
use crate::shared::Shared;

pub use crate::keyspace::COLLECTIONS_DIR;

/// How often the active expiry cycle runs, and its time budget per run
/// (Redis: 10 Hz, 25% of a core at most).
const EXPIRE_PERIOD: Duration = Duration::from_millis(100);
const EXPIRE_BUDGET: Duration = Duration::from_millis(25);
/// How often idle clients are looked for (Redis's `clientsCron` visits
/// every client once a second).
const IDLE_SWEEP_PERIOD: Duration = Duration::from_secs(1);
/// How long shutdown waits for connections to finish their last batch.
const DRAIN_PATIENCE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Open(OpenError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot start the network runtime: {0}")]
    Runtime(std::io::Error),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot set up TLS: {0}")]
    Tls(String),
}

/// A running server. Dropping it does not stop it; call `shutdown` (or
/// send SHUTDOWN / a signal and call `wait`).
pub struct Server {
    /// Where the plain TCP port listens; the TLS port when it is the only
    /// one (`port 0` beside a `tls-port`).
    pub addr: SocketAddr,
    /// Where the TLS port listens, when `tls-port` is set.
    pub tls_addr: Option<SocketAddr>,
    /// Held until `join`: the store closes only once every handle is gone.
    shared: Option<Arc<Shared>>,
    main: Option<JoinHandle<Result<(), String>>>,
}

impl Server {
    /// Reads the TLS files, binds, opens the store, recovers, and starts
    /// serving in background threads. Returns once the ports accept
    /// connections.
    pub fn start(config: Config) -> Result<Server, StartError> {
        if !(1..=255).contains(&config.databases) {
            return Err(StartError::Config(format!(
                "databases must be 1 to 255, got {}",
                config.databases
            )));
        }
        crate::config::check_integrity(&config.integrity).map_err(StartError::Config)?;
        // Before the store opens: a bad ACL file stops startup at once.
        let acl = crate::acl::configured(&config).map_err(StartError::Config)?;
        // Every TLS file is read now, before the store is created or
        // opened: a bad one stops the start with its name.
        let tls = match config.tls.port {
            0 => None,
            _ => Some(crate::tls::acceptor(&config.tls).map_err(StartError::Tls)?),
        };
        // Before the store opens: its background threads start on these.
        let background_cpus = engram_threads::configure(&config.background_cpus)
            .map_err(|e| StartError::Config(e.to_string()))?;
        raise_fd_limit(config.maxclients);
        // Redis's `disable-thp yes`, its default: under `LPUSH -P 16` the
        // zeroing of fresh 2 MiB pages was 43% of the server's CPU on the
        // development VM (BENCHMARKS.md, thirty-second session).
        // Process-wide, as in Redis: an embedder that starts a `Server`
        // gets it too unless it sets `no`.
        if config.redis_param("disable-thp") != Some("no") {
            if let Err(e) = engram_memory::disable_huge_pages() {
                log::warn!("disable-thp: cannot turn transparent huge pages off: {e}");
            }
        }
        let loops = crate::net_loops::NetLoops::new(
            config.worker_threads(),
            config.durability == engram_keyspace::Durability::Always,
        )
        .map_err(StartError::Runtime)?;
        let runtime = loops.main().clone();
        // Bound before the store opens: a port in use is reported at once,
        // not after a recovery, and leaves the store untouched. Clients
        // that connect meanwhile wait in the backlog until accepts start.
        let Listeners { plain, tls } = bind(&runtime, &config, tls)?;
        let plain_addr = plain.as_ref().map(|(_, local)| *local);
        let tls_addr = tls.as_ref().map(|(_, local, _)| *local);
        let local = plain_addr
            .or(tls_addr)
            .expect("a plain listener unless TLS listens");
        // A group's members replay the same commands (scripts, SPOP) and
        // must iterate collections alike: they share one hash seed.
        if config.node_id.is_some() && !engram_collections::types::fix_hash_seed(0) {
            return Err(StartError::Config(
                "a Raft group member needs the collections' fixed hash seed, \
                 but this process already hashed with another"
                    .to_string(),
            ));
        }
        let Opened {
            keyspace,
            engine_recovery: recovery,
            keyspace_scan,
        } = Keyspace::open_dir(&config.dir, &keyspace_options(&config))
            .map_err(StartError::Open)?;

        let runtime_config = Arc::new(Runtime::new(&config));
        runtime_config.set_loglevel(config.loglevel);
        let stop_background = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(
            Shared::new(
                keyspace.clone(),
                config.clone(),
                runtime_config,
                recovery,
                keyspace_scan,
                plain_addr.map_or(0, |addr| addr.port()),
            )
            .with_acl(acl),
        );
        let _ = shared.loops.set(loops.clone());
        let served = shared.clone();
        loops.start_controller(move || served.stats.commands_processed.get());
        crate::group::start(&shared, local).map_err(StartError::Config)?;
        let expiry_thread = spawn_expiry_thread(shared.clone(), stop_background.clone());

        crate::protected_mode::warn_at_startup(&shared, local);
        let stats = keyspace.store().stats();
        let listening = match (plain_addr, tls_addr) {
            (Some(plain), Some(tls)) => format!("{plain} and {tls} (TLS)"),
            (None, Some(tls)) => format!("{tls} (TLS only)"),
            _ => local.to_string(),
        };
        log::info!(
            "Engram {} ready on {listening}: mode {} (flush {}), durability {}, data in {}, \
             background threads on CPUs {}",
            env!("CARGO_PKG_VERSION"),
            stats.mode,
            stats.flush,
            config.durability.name(),
            config.dir.display(),
            engram_threads::describe(&background_cpus),
        );
        let report = keyspace.store().recovery_report();
        log::info!(
            "recovered {} keys in {:.3} s (engine {:.3} s with {} threads, {}; keyspace scan \
             {:.3} s){}",
            stats.keys,
            (recovery + keyspace_scan).as_secs_f64(),
            recovery.as_secs_f64(),
            report.threads,
            describe_image_use(&report.index_image),
            keyspace_scan.as_secs_f64(),
            match keyspace.stats.batches_replayed.load(Ordering::Relaxed) {
                0 => String::new(),
                n => format!("; re-applied {n} interrupted multi-key writes"),
            }
        );
        log_integrity(&config, keyspace.store());
        // From here the keyspace is the slot's alone: DEBUG RELOAD closes it
        // once no one else holds it.
        drop(keyspace);

        if config.handle_signals {
            runtime.spawn(shutdown_on_signal(shared.clone()));
        }
        if shared.group.get().is_some() {
            runtime.spawn(crate::group::expire(shared.clone()));
        }
        runtime.spawn(sweep_idle_clients(shared.clone()));
        let main_shared = shared.clone();
        let main = std::thread::Builder::new()
            .name("engram-main".into())
            .spawn(move || {
                let plain = plain.map(|(listener, _)| listener);
                let tls = tls.map(|(listener, _, acceptor)| (listener, acceptor));
                loops.block_on(crate::accept::run(main_shared.clone(), plain, tls));
                // Let connections finish their batch and leave.
                let deadline = Instant::now() + DRAIN_PATIENCE;
                while !main_shared.clients.is_empty() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                loops.shutdown(Duration::from_secs(1));
                stop_background.store(true, Ordering::Release);
                let _ = expiry_thread.join();
                // The slot's keyspace (DEBUG RELOAD may have replaced the
                // one opened above).
                let keyspace = main_shared.keyspace.take();
                drop(main_shared);
                match keyspace {
                    Some(keyspace) => close_keyspace(keyspace),
                    None => Err("the keyspace was lost to a failed reload".into()),
                }
            })
            .map_err(StartError::Runtime)?;
        Ok(Server {
            addr: local,
            tls_addr,
            shared: Some(shared),
            main: Some(main),
        })
    }

    /// Asks the server to stop and waits until the store is closed.
    pub fn shutdown(mut self) -> Result<(), String> {
        self.request_shutdown();
        self.join()
    }

    /// Waits for a shutdown requested elsewhere (SHUTDOWN, a signal).
    pub fn wait(mut self) -> Result<(), String> {
        self.join()
    }

    /// Starts a shutdown without waiting (signal handlers).
    pub fn request_shutdown(&self) {
        if let Some(shared) = &self.shared {
            shared.request_shutdown();
        }
    }

    fn join(&mut self) -> Result<(), String> {
        self.shared = None;
        let main = self.main.take().expect("joined once");
        main.join()
            .unwrap_or_else(|_| Err("the server's main thread panicked".into()))
    }
}

/// The bound ports, each with its address; the TLS one with its acceptor.
struct Listeners {
    plain: Option<(TcpListener, SocketAddr)>,
    tls: Option<(TcpListener, SocketAddr, TlsAcceptor)>,
}

/// Binds the plain port (unless only TLS is served) and, with an
/// acceptor, the TLS port.
fn bind(
    runtime: &tokio::runtime::Handle,
    config: &Config,
    tls: Option<TlsAcceptor>,
) -> Result<Listeners, StartError> {
    let bind = |port: u16| {
        let addr = format!("{}:{}", config.bind, port);
        let bound = runtime
            .block_on(TcpListener::bind(&addr))
            .and_then(|listener| Ok((listener.local_addr()?, listener)));
        bound
            .map(|(local, listener)| (listener, local))
            .map_err(|source| StartError::Bind { addr, source })
    };
    let plain = config.plain_port().map(bind).transpose()?;
    let tls = match tls {
        Some(acceptor) => {
            let (listener, local) = bind(config.tls.port)?;
            Some((listener, local, acceptor))
        }
        None => None,
    };
    Ok(Listeners { plain, tls })
}

/// The idle `timeout`, and CLIENT LIST's `idle`: `Registry::sweep_idle`
/// once a period.
async fn sweep_idle_clients(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(IDLE_SWEEP_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let timeout = shared.runtime.timeout_secs.load(Ordering::Relaxed);
        shared.clients.sweep_idle(timeout);
    }
}

/// SIGTERM and SIGINT start a clean shutdown, as in Redis.
async fn shutdown_on_signal(shared: Arc<Shared>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        log::warn!("cannot install signal handlers; use SHUTDOWN to stop the server");
        return;
    };
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    log::warn!("received {name}: shutting down");
    shared.request_shutdown();
}

/// Deletes expired keys in the background, while `active` (DEBUG
/// SET-ACTIVE-EXPIRE turns it off; reads still never see expired keys).
/// A pass that takes at least `latency-monitor-threshold` is an
/// `expire-cycle` latency event. The keys it (and anything else) expired
/// are published as `expired` notifications after each pass.
///
/// After a restart it first indexes the expiries recovery only noted
/// (`Keyspace::index_expiries`), a slice at a time without the pause
/// between passes, so the server is ready before its expiry index is.
/// How the strings store's recovery used its index images, for the
/// start-up log: from which image and how much it scanned beyond it, or
/// that it scanned every block and why no image served.
fn describe_image_use(image: &engram_engine::ImageRecovery) -> String {
    match image.image {
        Some(number) => format!(
            "from index image {number} and {} blocks written since",
            image.tail_blocks
        ),
        None if image.rejected.is_empty() => "every block scanned: no index image".into(),
        None => format!(
            "every block scanned: index images not used ({})",
            image.rejected.join("; ")
        ),
    }
}

fn spawn_expiry_thread(shared: Arc<Shared>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    engram_threads::spawn("engram-expire", move || {
        while !stop.load(Ordering::Acquire) {
            // (A reloaded keyspace has noted its expiries anew.)
            let guard = shared.keyspace.try_guard();
            let indexing = guard.as_ref().is_some_and(|keyspace| {
                keyspace.expiries_unindexed()
                    && keyspace.index_expiries(Instant::now() + EXPIRE_BUDGET)
            });
            drop(guard);
            if indexing {
                continue;
            }
            std::thread::sleep(EXPIRE_PERIOD);
            // A group's member expires nothing by its own clock, whatever
            // DEBUG SET-ACTIVE-EXPIRE says: its leader proposes deletions
            // (`group::expire`), which every member applies alike.
            if !shared.active_expire.load(Ordering::Relaxed)
                || shared.group.get().is_some()
                || shared.keyspace.is_reloading()
            {
                continue;
            }
            let started = Instant::now();
            let guard = shared.keyspace.try_guard();
            let Some(keyspace) = guard.as_ref() else {
                continue;
            };
            if let Err(e) = keyspace.expire_cycle(now_ms(), started + EXPIRE_BUDGET) {
                log::error!("active expiry failed: {e}");
            }
            drop(guard);
            shared
                .latency
                .observe("expire-cycle", started.elapsed().as_millis() as u64);
            crate::notify::publish_expired(&shared);
            crate::tracking::invalidate_modified(&shared, None);
        }
    })
    .expect("spawning the expiry thread")
}

/// The startup line about the integrity layer: its settings in force, and
/// what opening its file found.
fn log_integrity(config: &Config, store: &engram_engine::Store) {
    let recovery = store.recovery_report();
    if recovery.torn_tails > 0 {
        // With integrity on, recovery has told tears from damage (below);
        // without it, a damaged record looks torn too.
        log::info!(
            "recovery ended {} block logs at a record torn by a crash{}",
            recovery.torn_tails,
            if recovery.integrity.is_none() {
                " (or damaged: with integrity off the two cannot be told apart)"
            } else {
                ""
            }
        );
    }
    let (Some(stats), Some(found)) = (store.integrity_stats(), recovery.integrity) else {
        log::info!(
            "integrity off: no page checksums, no parity, no scrubbing \
             (start with --integrity lazy or inline to protect the data file)"
        );
        return;
    };
    let scrub = match stats.scrub_bytes_per_sec_limit {
        0 => "background scrub off".to_string(),
        rate => match stats.scrub_period.as_secs() {
            0 => format!("background scrub {} MiB/s", rate >> 20),
            period => format!(
                "background scrub a sweep per {period} s, at most {} MiB/s",
                rate >> 20
            ),
        },
    };
    let mut opened = Vec::new();
    if found.created {
        opened.push(format!(
            "{} created: redundancy is being built for all {} pages, so nothing \
             written before now can be verified",
            engram_integrity::FILE_NAME,
            found.stale_pages
        ));
    } else if found.unclean {
        opened.push("the last session did not close cleanly".to_string());
    } else {
        opened.push("the last session closed cleanly".to_string());
    }
    if found.shadow_restored {
        opened.push("shadow marks restored (a refresh was cut short)".into());
    }
    if found.marks_distrusted {
        opened.push(
            "marks distrusted (power failure or OS crash on emulated memory: \
             every page is refreshed, not verified)"
                .into(),
        );
    }
    if !found.created {
        opened.push(format!("{} stale pages", found.stale_pages));
    }
    let line = format!(
        "integrity {}: period {} ms, stripes of {} data pages + 1 parity, {scrub}; {}",
        stats.mode.name(),
        stats.period.as_millis(),
        stats.stripe_pages,
        opened.join(", "),
    );
    if found.marks_distrusted || found.shadow_restored {
        log::warn!("{line}");
    } else {
        log::info!("{line}");
    }
    if stats.repaired > 0 {
        log::warn!(
            "recovery met {} corrupt data pages under records and rebuilt them from parity",
            stats.repaired
        );
    }
    if recovery.damaged_records > 0 || stats.unrepairable > 0 {
        log::error!(
            "{} records lie on {} data pages that parity could not rebuild: reads of their \
             keys fail until they are rewritten or deleted (ENGRAM.SCRUB names them); records \
             whose header was destroyed are lost",
            recovery.damaged_records,
            stats.unrepairable
        );
    }
    if stats.stripe_pages != config.integrity.stripe_pages {
        log::warn!(
            "integrity-stripe-pages {} ignored: {} was created with stripes of {} pages, \
             which it keeps",
            config.integrity.stripe_pages,
            engram_integrity::FILE_NAME,
            stats.stripe_pages
        );
    }
}

/// What the keyspace needs from the server's configuration.
pub(crate) fn keyspace_options(config: &Config) -> KeyspaceOptions {
    KeyspaceOptions {
        mode: config.mode,
        durability: config.durability,
        databases: config.databases,
        integrity: config.integrity.clone(),
        collections_checkpoint_bytes: config.collections_checkpoint_bytes,
        collections_backpressure_factor: config.collections_backpressure_factor,
        // A member of a Raft group applies each batch of entries atomically.
        atomic_batches: config.node_id.is_some(),
        // Expiry on a member happens at entries' times only.
        expire_on_read: config.node_id.is_none(),
        ..KeyspaceOptions::default()
    }
}

fn close_keyspace(keyspace: Arc<Keyspace>) -> Result<(), String> {
    match Keyspace::close(keyspace) {
        Ok(()) => {
            log::info!("data synced and store closed; bye");
            Ok(())
        }
        Err(e) => {
            // A connection outlived the drain: what it wrote is synced;
            // the directory lock goes with the process.
            log::warn!("{e}");
            Ok(())
        }
    }
}

/// Lets the process hold a descriptor per client (Redis does the same).
fn raise_fd_limit(maxclients: usize) {
    let wanted = maxclients as u64 + 64;
    match rlimit::increase_nofile_limit(wanted) {
        Ok(got) if got < wanted => log::warn!(
            "open-file limit is {got}, below maxclients + 64 = {wanted}; \
             connections beyond it will be refused by the kernel"
        ),
        Ok(_) => {}
        Err(e) => log::warn!("cannot raise the open-file limit: {e}"),
    }
}
