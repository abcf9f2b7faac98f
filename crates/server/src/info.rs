//! The INFO text: Redis's sections and field names where they have a
//! meaning here, plus an `engram` section for the engine and an
//! `integrity` section for the integrity layer (page checksums, stripe
//! parity, scrubbing):
//!
//! | field | meaning |
//! |---|---|
//! | `integrity_mode` | `off`, `lazy` or `inline` (with `off`, the only field) |
//! | `integrity_period_ms` | lazy mode: how often the background pass refreshes stale pages |
//! | `integrity_stripe_pages` | data pages per parity page (fixed when the integrity file was created) |
//! | `integrity_pages_covered` | 4 KiB data pages under protection (the whole data file) |
//! | `integrity_pages_stale` | pages written since their checksum and parity were last refreshed |
//! | `integrity_oldest_stale_age_ms` | how long the oldest stale page has waited (0: none) |
//! | `integrity_passes` | background (or on-demand) refresh passes run |
//! | `integrity_last_pass_duration_ms` | the last pass's duration (fractional) |
//! | `integrity_pages_refreshed` | pages whose redundancy was recomputed, in total |
//! | `integrity_scrub_sweeps` | complete verifications of every page (background or `ENGRAM.SCRUB`) |
//! | `integrity_pages_scrubbed` | pages verified, in total |
//! | `integrity_scrub_bytes_per_sec` | measured scrub speed while scrubbing |
//! | `integrity_scrub_bytes_per_sec_limit` | background scrub budget (0: background scrub off) |
//! | `integrity_scrub_period_sec` | the shortest time a background sweep takes (0: no pacing but the budget) |
//! | `integrity_corruptions_found` | times a page was found not matching its checksum (a page parity cannot rebuild is counted again at each check) |
//! | `integrity_repaired` | corrupt pages rebuilt from parity, in total |
//! | `integrity_unrepairable` | pages known corrupt now that parity could not rebuild |
//! | `integrity_metadata_rebuilt` | checksum pages found damaged and rebuilt from the data |
//!
//! and a `collections` section for hashes, sets, sorted sets and lists
//! (their operation log and background checkpoints):
//!
//! | field | meaning |
//! |---|---|
//! | `collections_keys` | collection keys in all databases |
//! | `oplog_file_bytes` | size of the operation log file |
//! | `oplog_segments_total`, `oplog_segments_free` | log segments, and those free for reuse |
//! | `oplog_bytes_since_checkpoint` | log written since the last checkpoint began |
//! | `checkpoints` | checkpoints completed since start |
//! | `checkpoint_in_progress` | 1 while one runs (in the background: nobody waits for it) |
//! | `checkpointed_through` | the last checkpoint covers every operation up to this sequence number |
//! | `last_checkpoint_duration_ms`, `last_checkpoint_keys`, `last_checkpoint_records` | what the last one did |
//! | `backpressure_waits`, `backpressure_wait_ms` | writes slowed because checkpoints fell behind (0 unless the log outgrows them) |
//! | `collections_recovery_ms`, `collections_images_loaded`, `collections_records_replayed` | the last start's recovery |

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::keyspace::Keyspace;
use crate::shared::Shared;

/// Redis 7.0's sections in its order, then Engram's own; `commandstats`
/// only when asked for by name or by `all`/`everything`, as in Redis.
const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
    "engram",
    "integrity",
    "collections",
    "commandstats",
];

/// Sections `INFO` and `INFO default` leave out.
const NOT_DEFAULT: &[&str] = &["commandstats"];

/// Renders the requested sections, each once: none or `default` means the
/// default ones, `all` and `everything` every one; names are
/// case-insensitive (the caller lowercases them) and unknown ones are
/// ignored, as in Redis.
pub fn render(shared: &Shared, ks: &Keyspace, requested: &[String]) -> String {
    let asked = |name: &str| requested.iter().any(|s| s == name);
    let all = asked("all") || asked("everything");
    let default = requested.is_empty() || asked("default");
    let mut text = String::new();
    for section in SECTIONS {
        let wanted = all || asked(section) || (default && !NOT_DEFAULT.contains(section));
        if !wanted {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let _ = match *section {
            "server" => server(shared, &mut text),
            "clients" => clients(shared, &mut text),
            "memory" => memory(shared, ks, &mut text),
            "persistence" => persistence(ks, &mut text),
            "stats" => stats(shared, ks, &mut text),
            "replication" => replication(shared, &mut text),
            "cpu" => cpu(&mut text),
            "modules" => write!(text, "# Modules\r\n"),
            "errorstats" => {
                text.push_str("# Errorstats\r\n");
                shared.stats.commands.render_errors(&mut text);
                Ok(())
            }
            "cluster" => write!(text, "# Cluster\r\ncluster_enabled:0\r\n"),
            "keyspace" => keyspace(ks, &mut text),
            "engram" => engram(shared, ks, &mut text),
            "integrity" => integrity(ks, &mut text),
            "collections" => collections(ks, &mut text),
            "commandstats" => {
                text.push_str("# Commandstats\r\n");
                shared.stats.commands.render_commands(&mut text);
                Ok(())
            }
            _ => Ok(()),
        };
    }
    text
}

fn server(shared: &Shared, out: &mut String) -> std::fmt::Result {
    let uptime = shared.started.elapsed().as_secs();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let hz = shared.redis_param("hz");
    write!(
        out,
        "# Server\r\n\
         redis_version:{}\r\n\
         redis_git_sha1:00000000\r\n\
         redis_git_dirty:0\r\n\
         redis_build_id:0\r\n\
         engram_version:{}\r\n\
         redis_mode:standalone\r\n\
         os:{} {}\r\n\
         arch_bits:64\r\n\
         monotonic_clock:POSIX clock_gettime\r\n\
         multiplexing_api:epoll\r\n\
         atomicvar_api:c11-builtin\r\n\
         gcc_version:0.0.0\r\n\
         process_id:{}\r\n\
         process_supervised:no\r\n\
         run_id:{}\r\n\
         tcp_port:{}\r\n\
         server_time_usec:{}\r\n\
         uptime_in_seconds:{}\r\n\
         uptime_in_days:{}\r\n\
         hz:{hz}\r\n\
         configured_hz:{hz}\r\n\
         lru_clock:{}\r\n\
         executable:{}\r\n\
         config_file:{}\r\n\
         io_threads_active:0\r\n",
        crate::REDIS_VERSION,
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
        std::process::id(),
        shared.run_id,
        shared.port,
        now.as_micros(),
        uptime,
        uptime / 86_400,
        now.as_secs() & ((1 << 24) - 1),
        std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        shared
            .config
            .config_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
    )?;
    // Engram's own (`net_loops`): the network loops, how many serve
    // clients now, and how many times a connection moved between them.
    if let Some(loops) = shared.loops.get() {
        write!(
            out,
            "net_loops:{}\r\nnet_loops_active:{}\r\nnet_loop_moves:{}\r\n",
            loops.count(),
            loops.active(),
            loops.moves.load(std::sync::atomic::Ordering::Relaxed)
        )?;
    }
    Ok(())
}

fn clients(shared: &Shared, out: &mut String) -> std::fmt::Result {
    write!(
        out,
        "# Clients\r\n\
         connected_clients:{}\r\n\
         cluster_connections:0\r\n\
         maxclients:{}\r\n\
         blocked_clients:{}\r\n\
         tracking_clients:{}\r\n",
        shared.clients.len(),
        shared.runtime.maxclients.load(Ordering::Relaxed),
        // Waiting in BLPOP/BRPOP/BLMOVE/BRPOPLPUSH/BLMPOP right now, or
        // held by CLIENT PAUSE.
        shared.clients.blocked() + shared.pause.held(),
        shared.tracking.counts().clients,
    )
}

/// Resident memory from /proc (the values live in the mapped file, so
/// this counts the DRAM index and buffers plus resident file pages), and
/// the persistent data file beside it.
/// Memory as Engram holds it: `used_memory` is the DRAM the allocator
/// holds (index, collections, buffers; the resident size when the
/// counting allocator is not installed) plus the live persistent data
/// (string records), since both are what a dataset costs and what
/// `maxmemory` bounds; the parts follow, and the resident size.
fn memory(shared: &Shared, ks: &Keyspace, out: &mut String) -> std::fmt::Result {
    let usage = crate::maxmemory::usage(ks);
    let peak = shared
        .stats
        .memory_peak
        .fetch_max(usage.used(), Ordering::Relaxed)
        .max(usage.used());
    let maxmemory: u64 = shared.redis_param("maxmemory").parse().unwrap_or(0);
    let store = ks.store().stats();
    let scripting = scripting_memory(shared);
    write!(
        out,
        "# Memory\r\n\
         used_memory:{}\r\n\
         used_memory_human:{}\r\n\
         used_memory_rss:{}\r\n\
         used_memory_rss_human:{}\r\n\
         used_memory_peak:{peak}\r\n\
         used_memory_peak_human:{}\r\n\
         used_memory_dram:{}\r\n\
         used_memory_persistent_live:{}\r\n\
         used_memory_persistent_file:{}\r\n\
         maxmemory:{maxmemory}\r\n\
         maxmemory_human:{}\r\n\
         maxmemory_policy:{}\r\n\
         mem_not_counted_for_evict:0\r\n\
         {scripting}\
         mem_allocator:mimalloc\r\n\
         lazyfree_pending_objects:{}\r\n\
         lazyfreed_objects:{}\r\n",
        usage.used(),
        human_bytes(usage.used()),
        usage.rss,
        human_bytes(usage.rss),
        human_bytes(peak),
        usage.dram,
        usage.persistent_live,
        store.file_bytes,
        human_bytes(maxmemory),
        shared.memory_limit.policy().name(),
        engram_collections::lazy_free::pending(),
        engram_collections::lazy_free::freed(),
    )
}

/// INFO memory's scripting lines, as Redis 7.0 writes them: each Lua
/// state's heap, the cached scripts and the libraries' code, and their
/// counts.
fn scripting_memory(shared: &Shared) -> String {
    let scripting = &shared.scripting;
    let memory = &scripting.memory;
    let load = |n: &std::sync::atomic::AtomicUsize| n.load(Ordering::Relaxed) as u64;
    let (eval_vm, functions_vm) = (load(&memory.eval_vm), load(&memory.functions_vm));
    let (eval_scripts, functions_code) = (load(&memory.eval_scripts), load(&memory.functions_code));
    format!(
        "used_memory_lua:{eval_vm}\r\n\
         used_memory_vm_eval:{eval_vm}\r\n\
         used_memory_lua_human:{}\r\n\
         used_memory_scripts_eval:{eval_scripts}\r\n\
         number_of_cached_scripts:{}\r\n\
         number_of_functions:{}\r\n\
         number_of_libraries:{}\r\n\
         used_memory_vm_functions:{functions_vm}\r\n\
         used_memory_vm_total:{}\r\n\
         used_memory_vm_total_human:{}\r\n\
         used_memory_functions:{functions_code}\r\n\
         used_memory_scripts:{}\r\n\
         used_memory_scripts_human:{}\r\n",
        human_bytes(eval_vm),
        load(&scripting.cached_scripts),
        load(&scripting.functions_count),
        load(&scripting.libraries_count),
        eval_vm + functions_vm,
        human_bytes(eval_vm + functions_vm),
        eval_scripts + functions_code,
        human_bytes(eval_scripts + functions_code),
    )
}

/// Redis's `bytesToHuman`: `1.50K`, `12.00M`, plain bytes below 1 KiB.
fn human_bytes(n: u64) -> String {
    let n = n as f64;
    for (unit, size) in [
        ("P", 1u64 << 50),
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ] {
        if n >= size as f64 {
            return format!("{:.2}{unit}", n / size as f64);
        }
    }
    format!("{n}B")
}

/// CPU time of the process and of its children, from /proc/self/stat
/// (clock ticks of 1/100 s, Linux's fixed USER_HZ).
fn cpu(out: &mut String) -> std::fmt::Result {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces, in parens):
    // utime is the 14th field, stime 15th, cutime 16th, cstime 17th.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<f64> = after_name
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|f| f.parse::<f64>().unwrap_or(0.0) / 100.0)
        .collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or(0.0);
    write!(
        out,
        "# CPU\r\n\
         used_cpu_sys:{:.6}\r\n\
         used_cpu_user:{:.6}\r\n\
         used_cpu_sys_children:{:.6}\r\n\
         used_cpu_user_children:{:.6}\r\n",
        field(1),
        field(0),
        field(3),
        field(2),
    )
}

fn persistence(ks: &Keyspace, out: &mut String) -> std::fmt::Result {
    let commit = ks.commit();
    let durable = &commit.stats;
    let durability = commit.durability();
    write!(
        out,
        "# Persistence\r\n\
         loading:0\r\n\
         rdb_changes_since_last_save:{}\r\n\
         rdb_bgsave_in_progress:0\r\n\
         rdb_last_save_time:{}\r\n\
         rdb_last_bgsave_status:{}\r\n\
         aof_enabled:1\r\n\
         aof_rewrite_in_progress:0\r\n\
         aof_last_write_status:{}\r\n\
         durability:{}\r\n\
         appendfsync:{}\r\n\
         durability_requested:{}\r\n\
         syncs:{}\r\n\
         sync_failures:{}\r\n\
         syncs_per_sec:{}\r\n\
         writes_per_sync:{:.2}\r\n",
        durable.changes_since_sync.load(Ordering::Relaxed),
        durable.last_sync_unix.load(Ordering::Relaxed),
        if durable.sync_failures.load(Ordering::Relaxed) == 0 {
            "ok"
        } else {
            "err"
        },
        if durable.sync_failures.load(Ordering::Relaxed) == 0 {
            "ok"
        } else {
            "err"
        },
        durability.name(),
        crate::config::appendfsync_name(durability),
        commit.requested().name(),
        durable.syncs.load(Ordering::Relaxed),
        durable.sync_failures.load(Ordering::Relaxed),
        durable.syncs_last_second.load(Ordering::Relaxed),
        durable.writes_per_sync(),
    )
}

fn stats(shared: &Shared, ks: &Keyspace, out: &mut String) -> std::fmt::Result {
    let s = &shared.stats;
    let ks = &ks.stats;
    let (exceeded_total, exceeded_current) = shared.eviction.exceeded_ms();
    let tracking = shared.tracking.counts();
    write!(
        out,
        "# Stats\r\n\
         total_connections_received:{}\r\n\
         total_commands_processed:{}\r\n\
         total_net_input_bytes:{}\r\n\
         total_net_output_bytes:{}\r\n\
         rejected_connections:{}\r\n\
         expired_keys:{}\r\n\
         evicted_keys:{}\r\n\
         total_eviction_exceeded_time:{}\r\n\
         current_eviction_exceeded_time:{}\r\n\
         keyspace_hits:{}\r\n\
         keyspace_misses:{}\r\n\
         total_error_replies:{}\r\n\
         pubsub_channels:{}\r\n\
         pubsub_patterns:{}\r\n\
         pubsubshard_channels:{}\r\n\
         tracking_total_keys:{}\r\n\
         tracking_total_items:{}\r\n\
         tracking_total_prefixes:{}\r\n\
         migrate_cached_sockets:{}\r\n\
         protocol_errors:{}\r\n",
        s.connections_received.load(Ordering::Relaxed),
        s.commands_processed.get(),
        s.net_input_bytes.get(),
        s.net_output_bytes.get(),
        s.rejected_connections.load(Ordering::Relaxed),
        ks.expired_keys.load(Ordering::Relaxed),
        shared.eviction.evicted_keys.load(Ordering::Relaxed),
        exceeded_total,
        exceeded_current,
        ks.hits.get(),
        ks.misses.get(),
        s.commands.total_errors(),
        shared.pubsub.channel_count(),
        shared.pubsub.numpat(),
        shared.pubsub.shard_channel_count(),
        tracking.keys,
        tracking.items,
        tracking.prefixes,
        shared.migrate_targets.len(),
        s.protocol_errors.load(Ordering::Relaxed),
    )
}

/// A single node: a primary without replicas (the fields clients read to
/// find the role). A member of a Raft group: its role as Redis names it,
/// then the group's own state (term, commit and applied index, each
/// follower's match index and lag on the leader).
fn replication(shared: &Shared, out: &mut String) -> std::fmt::Result {
    if let Some(replica) = shared.group.get() {
        let status = replica.status();
        let leader = status.leader;
        let address = |id: u64| replica.client_addr(id).unwrap_or_default();
        if replica.is_leader() {
            write!(
                out,
                "# Replication\r\nrole:master\r\nconnected_slaves:{}\r\n",
                status.progress.len()
            )?;
            for (i, (id, matched)) in status.progress.iter().enumerate() {
                let (host, port) = address(*id)
                    .rsplit_once(':')
                    .map(|(h, p)| (h.to_string(), p.to_string()))
                    .unwrap_or_default();
                write!(
                    out,
                    "slave{i}:ip={host},port={port},state=online,offset={matched},lag={}\r\n",
                    status.last_index.saturating_sub(*matched)
                )?;
            }
        } else {
            let (host, port) = address(leader)
                .rsplit_once(':')
                .map(|(h, p)| (h.to_string(), p.to_string()))
                .unwrap_or_default();
            write!(
                out,
                "# Replication\r\nrole:slave\r\nmaster_host:{host}\r\nmaster_port:{port}\r\n\
                 master_link_status:{}\r\nslave_repl_offset:{}\r\nslave_read_only:1\r\n",
                if leader != 0 { "up" } else { "down" },
                status.applied
            )?;
        }
        return write!(
            out,
            "master_repl_offset:{}\r\nraft_node_id:{}\r\nraft_role:{}\r\nraft_leader:{leader}\r\n\
             raft_term:{}\r\nraft_commit_index:{}\r\nraft_applied_index:{}\r\n\
             raft_last_index:{}\r\nraft_log_bytes:{}\r\nraft_compacted_index:{}\r\n\
             raft_snapshots_installed:{}\r\nraft_snapshots_built:{}\r\nraft_log_syncs:{}\r\n\
             raft_appends_sent:{}\r\nraft_entries_sent:{}\r\n",
            status.applied,
            status.id,
            status.role,
            status.term,
            status.commit,
            status.applied,
            status.last_index,
            status.log_bytes,
            status.compacted,
            status.snapshots_installed,
            status.snapshots_built,
            status.log_syncs,
            status.appends_sent,
            status.entries_sent,
        );
    }
    write!(
        out,
        "# Replication\r\n\
         role:master\r\n\
         connected_slaves:0\r\n\
         master_failover_state:no-failover\r\n\
         master_replid:{}\r\n\
         master_replid2:0000000000000000000000000000000000000000\r\n\
         master_repl_offset:0\r\n\
         second_repl_offset:-1\r\n\
         repl_backlog_active:0\r\n\
         repl_backlog_size:{}\r\n\
         repl_backlog_first_byte_offset:0\r\n\
         repl_backlog_histlen:0\r\n",
        shared.run_id,
        shared.redis_param("repl-backlog-size"),
    )
}

fn keyspace(ks: &Keyspace, out: &mut String) -> std::fmt::Result {
    out.push_str("# Keyspace\r\n");
    for db in 0..ks.databases() {
        let keys = ks.dbsize(db);
        if keys > 0 {
            writeln!(
                out,
                "db{db}:keys={keys},expires={},avg_ttl=0\r",
                ks.expiring(db)
            )?;
        }
    }
    Ok(())
}

fn engram(shared: &Shared, ks: &Keyspace, out: &mut String) -> std::fmt::Result {
    let stats = ks.store().stats();
    let recovery = ks.store().recovery_report();
    write!(
        out,
        "# Engram\r\n\
         mode:{}\r\n\
         flush_instruction:{}\r\n\
         durability:{}\r\n\
         data_dir:{}\r\n\
         file_bytes:{}\r\n\
         live_bytes:{}\r\n\
         engine_keys:{}\r\n\
         blocks_total:{}\r\n\
         blocks_free:{}\r\n\
         compactions:{}\r\n\
         records_moved:{}\r\n\
         record_bytes_appended:{}\r\n\
         in_place_updates:{}\r\n\
         recovery_ms:{}\r\n\
         recovery_records:{}\r\n\
         recovery_threads:{}\r\n\
         keyspace_scan_ms:{}\r\n\
         batches_replayed:{}\r\n\
         keys_in_hidden_dbs:{}\r\n\
         background_cpus:{}\r\n\
         tls_handshake_failures:{}\r\n",
        stats.mode,
        stats.flush,
        ks.commit().durability().name(),
        shared.config.dir.display(),
        stats.file_bytes,
        stats.live_bytes,
        stats.keys,
        stats.blocks_total,
        stats.blocks_free,
        stats.compactions,
        stats.records_moved,
        stats.appended_bytes,
        stats.in_place_updates,
        shared.recovery.as_millis(),
        recovery.records,
        recovery.threads,
        shared.keyspace_scan.as_millis(),
        ks.stats.batches_replayed.load(Ordering::Relaxed),
        ks.stats.keys_in_hidden_dbs.load(Ordering::Relaxed),
        engram_threads::describe(&engram_threads::placement()),
        shared.stats.tls_handshake_failures.load(Ordering::Relaxed),
    )
}

fn integrity(ks: &Keyspace, out: &mut String) -> std::fmt::Result {
    let Some(stats) = ks.store().integrity_stats() else {
        return write!(out, "# Integrity\r\nintegrity_mode:off\r\n");
    };
    write!(
        out,
        "# Integrity\r\n\
         integrity_mode:{}\r\n\
         integrity_period_ms:{}\r\n\
         integrity_stripe_pages:{}\r\n\
         integrity_pages_covered:{}\r\n\
         integrity_pages_stale:{}\r\n\
         integrity_oldest_stale_age_ms:{}\r\n\
         integrity_passes:{}\r\n\
         integrity_last_pass_duration_ms:{:.3}\r\n\
         integrity_pages_refreshed:{}\r\n\
         integrity_scrub_sweeps:{}\r\n\
         integrity_pages_scrubbed:{}\r\n\
         integrity_scrub_bytes_per_sec:{}\r\n\
         integrity_scrub_bytes_per_sec_limit:{}\r\n\
         integrity_scrub_period_sec:{}\r\n\
         integrity_corruptions_found:{}\r\n\
         integrity_repaired:{}\r\n\
         integrity_unrepairable:{}\r\n\
         integrity_metadata_rebuilt:{}\r\n",
        stats.mode.name(),
        stats.period.as_millis(),
        stats.stripe_pages,
        stats.pages_covered,
        stats.pages_stale,
        stats.oldest_stale_age.as_millis(),
        stats.passes,
        stats.last_pass_duration.as_secs_f64() * 1000.0,
        stats.pages_refreshed,
        stats.scrub_sweeps,
        stats.pages_scrubbed,
        stats.scrub_bytes_per_sec_measured,
        stats.scrub_bytes_per_sec_limit,
        stats.scrub_period.as_secs(),
        stats.corruptions_found,
        stats.repaired,
        stats.unrepairable,
        stats.metadata_rebuilt,
    )
}

fn collections(ks: &Keyspace, out: &mut String) -> std::fmt::Result {
    let collections = ks.collections();
    let stats = collections.stats();
    let recovery = collections.recovery_report();
    let last = stats.last_checkpoint.clone().unwrap_or_default();
    write!(
        out,
        "# Collections\r\n\
         collections_keys:{}\r\n\
         oplog_file_bytes:{}\r\n\
         oplog_segments_total:{}\r\n\
         oplog_segments_free:{}\r\n\
         oplog_bytes_since_checkpoint:{}\r\n\
         checkpoints:{}\r\n\
         checkpoint_in_progress:{}\r\n\
         checkpointed_through:{}\r\n\
         last_checkpoint_duration_ms:{}\r\n\
         last_checkpoint_keys:{}\r\n\
         last_checkpoint_records:{}\r\n\
         backpressure_waits:{}\r\n\
         backpressure_wait_ms:{}\r\n\
         collections_recovery_ms:{}\r\n\
         collections_images_loaded:{}\r\n\
         collections_records_replayed:{}\r\n",
        stats.keys,
        stats.log.file_bytes,
        stats.log.segments_total,
        stats.log.segments_free,
        stats.log_bytes_since_checkpoint,
        stats.checkpoints,
        stats.checkpoint_running as u8,
        stats.checkpointed_through,
        last.duration.as_millis(),
        last.keys_written,
        last.records,
        stats.backpressure_waits,
        stats.backpressure_wait_time.as_millis(),
        recovery.total.as_millis(),
        recovery.images_loaded,
        recovery.records_replayed,
    )
}
