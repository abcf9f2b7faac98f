//! The servers as child processes: finding Redis's tools, picking ports,
//! starting `engram serve` and `redis-server` at a given durability,
//! waiting until they answer PING, reading their CPU time, and stopping
//! them.
//!
//! Each server writes its stdout and stderr to its own log file and its data
//! to its own fresh directory, so nothing carries over from one run to the
//! next and a failure can be diagnosed from the log afterwards.

use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::error::{Result, ServerBenchError};
use super::Durability;

/// Both servers listen here only: the benchmark is local, and nothing else
/// on the machine should be able to reach a server started without a
/// password.
pub const HOST: &str = "127.0.0.1";
/// Redis's default port, which a packaged redis-server (Debian starts one on
/// install) may be listening on: never measure that one by mistake.
const REDIS_DEFAULT_PORT: u16 = 6379;
/// How long a server has to answer PING after it is started.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server has to exit after SIGTERM before it is killed. Both
/// flush on the way out (Redis its AOF, Engram its mapping), which with a
/// gigabyte of dirty pages on a slow disk takes a while.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of a server's log quoted in an error.
const LOG_TAIL_LINES: usize = 20;

/// A server measured: Engram, Redis at the matching durability, or Redis
/// with its AOF never fsynced (the ceiling issue 25 measures `always`
/// against: what a durable Redis would do if fsync were free).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum System {
    Engram,
    Redis,
    RedisNoFsync,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Engram => "engram",
            System::Redis => "redis",
            System::RedisNoFsync => "redis-no-fsync",
        }
    }

    /// The arguments this system's server gets at `durability` (after the
    /// program name).
    pub fn server_args(self, port: u16, dir: &Path, durability: Durability) -> Vec<String> {
        match self {
            System::Engram => engram_args(port, dir, durability),
            System::Redis => redis_args(port, dir, durability),
            // Exactly the `process` pairing's Redis: AOF on, appendfsync no.
            System::RedisNoFsync => redis_args(port, dir, Durability::Process),
        }
    }

    /// Whether this is redis-server (started from `--redis-server`).
    pub fn is_redis(self) -> bool {
        self != System::Engram
    }
}

/// The arguments `engram serve` gets (after the program name).
pub fn engram_args(port: u16, dir: &Path, durability: Durability) -> Vec<String> {
    vec![
        "serve".into(),
        "--bind".into(),
        HOST.into(),
        "--port".into(),
        port.to_string(),
        "--dir".into(),
        dir.display().to_string(),
        "--durability".into(),
        durability.name().into(),
    ]
}

/// The arguments redis-server gets: AOF on with the matching `appendfsync`,
/// RDB snapshots off (`save ""`: with AOF they would only add forks), and
/// everything else at Redis's defaults, as Redis's persistence documentation
/// configures AOF durability. `aof-use-rdb-preamble yes` and the automatic
/// AOF rewrite are defaults too; they are spelled out or left alone so that
/// Redis runs as its users run it.
pub fn redis_args(port: u16, dir: &Path, durability: Durability) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        HOST,
        "--dir",
        &dir.display().to_string(),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        durability.appendfsync(),
        "--aof-use-rdb-preamble",
        "yes",
        "--daemonize",
        "no",
        "--protected-mode",
        "no",
    ]
    .iter()
    .map(|word| word.to_string())
    .collect()
}

/// A running server, stopped (and its data removed unless kept) when dropped.
pub struct Peer {
    pub system: System,
    pub port: u16,
    child: Child,
    log: PathBuf,
    data: PathBuf,
    keep_data: bool,
    stopped: bool,
}

impl Peer {
    /// Starts `program args` with its output in `log` and waits until it
    /// answers PING. `data` is created first and removed when the peer is
    /// dropped, unless `keep_data`.
    pub fn start(
        system: System,
        program: &Path,
        args: &[String],
        port: u16,
        data: PathBuf,
        log: PathBuf,
        keep_data: bool,
    ) -> Result<Peer> {
        std::fs::create_dir_all(&data)
            .map_err(|e| ServerBenchError::io("creating the data directory", &data, e))?;
        let out = File::create(&log)
            .map_err(|e| ServerBenchError::io("creating the server log", &log, e))?;
        let err = out
            .try_clone()
            .map_err(|e| ServerBenchError::io("opening the server log", &log, e))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| ServerBenchError::Spawn {
                program: program.display().to_string(),
                source,
            })?;
        let mut peer = Peer {
            system,
            port,
            child,
            log,
            data,
            keep_data,
            stopped: false,
        };
        peer.wait_ready(READY_TIMEOUT)?;
        Ok(peer)
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's user and system CPU time so far, all threads and the
    /// children it reaped (Redis's rewrite forks), in seconds; `None` if
    /// /proc cannot be read.
    pub fn cpu_seconds(&self) -> Option<f64> {
        crate::cpu_time::server_seconds(self.pid())
    }

    /// Fails if the server has exited; `when` says at what point, for the
    /// error ("before redis-benchmark").
    pub fn check_alive(&mut self, when: &'static str) -> Result<()> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(self.exited(status, when)),
            Ok(None) => Ok(()),
            Err(e) => Err(ServerBenchError::io(
                "waiting for the server logging to",
                &self.log,
                e,
            )),
        }
    }

    /// The number of keys in database 0 (`DBSIZE`), a sanity check that the
    /// writes landed; `None` if the server does not answer it.
    pub fn key_count(&self) -> Option<u64> {
        request(self.port, &redis::cmd("DBSIZE"), Duration::from_secs(10)).ok()
    }

    /// SIGTERM, as an init system would stop it; then a kill if it has not
    /// exited in `STOP_TIMEOUT`. A server that exits with an error status
    /// after the measurements is reported on standard error, not failed:
    /// the numbers were already taken.
    pub fn stop(mut self) -> Result<()> {
        self.stopped = true;
        let pid = self.child.id().to_string();
        let signalled = Command::new("kill")
            .args(["-TERM", &pid])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        let deadline = Instant::now() + STOP_TIMEOUT;
        while signalled && Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        eprintln!(
                            "warning: {} exited with {status} on SIGTERM; see {}",
                            self.system.name(),
                            self.log.display()
                        );
                    }
                    return Ok(());
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    return Err(ServerBenchError::io(
                        "waiting for the server logging to",
                        &self.log,
                        e,
                    ))
                }
            }
        }
        eprintln!(
            "warning: {} did not exit within {} s of SIGTERM; killing it",
            self.system.name(),
            STOP_TIMEOUT.as_secs()
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(())
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            self.check_alive("before answering PING")?;
            let ping = request::<String>(self.port, &redis::cmd("PING"), Duration::from_secs(1));
            let last = match ping {
                Ok(reply) if reply == "PONG" => {
                    // Another process on this port could have answered (the
                    // port was free a moment ago, not reserved): make sure
                    // ours is still up, which it would not be had it failed
                    // to bind.
                    std::thread::sleep(Duration::from_millis(50));
                    return self.check_alive("just after answering PING");
                }
                Ok(reply) => format!("reply {reply:?}"),
                // Redis answers -LOADING while it reads its AOF.
                Err(e) => e.to_string(),
            };
            if start.elapsed() >= timeout {
                return Err(ServerBenchError::NotReady {
                    system: self.system.name(),
                    port: self.port,
                    seconds: timeout.as_secs(),
                    last,
                    log: self.log.clone(),
                    tail: log_tail(&self.log),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn exited(&self, status: ExitStatus, when: &'static str) -> ServerBenchError {
        ServerBenchError::Exited {
            system: self.system.name(),
            status: status.to_string(),
            when,
            log: self.log.clone(),
            tail: log_tail(&self.log),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if !self.keep_data {
            let _ = std::fs::remove_dir_all(&self.data);
        }
    }
}

/// Sends `command` to the server on `port` over a fresh connection and
/// returns its reply; an error reply (Redis's `-LOADING` while it reads its
/// AOF) is an error.
fn request<T: redis::FromRedisValue>(
    port: u16,
    command: &redis::Cmd,
    timeout: Duration,
) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://{HOST}:{port}/"))?;
    let mut connection = client.get_connection_with_timeout(timeout)?;
    connection.set_read_timeout(Some(timeout))?;
    connection.set_write_timeout(Some(timeout))?;
    command.query(&mut connection)
}

/// A port nothing listens on now: the kernel's pick for port 0, released
/// again for the server to take. Never Redis's default port.
pub fn free_port() -> Result<u16> {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| ServerBenchError::io("finding a free port on", HOST, e))?;
        let port = listener
            .local_addr()
            .map_err(|e| ServerBenchError::io("finding a free port on", HOST, e))?
            .port();
        if port != REDIS_DEFAULT_PORT {
            return Ok(port);
        }
    }
}

/// The last lines of a log, for an error message.
pub fn log_tail(log: &Path) -> String {
    match std::fs::read(log) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
            if tail.trim().is_empty() {
                "(empty)".into()
            } else {
                tail
            }
        }
        Err(e) => format!("(unreadable: {e})"),
    }
}

/// Where `program` would be run from: itself if it names a path, else the
/// first match on PATH.
pub fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// What to do about a missing Redis: the benchmarks install nothing
/// themselves (they also run under `cargo test`, which must not change the
/// machine).
pub const INSTALL_REDIS: &str =
    "install Redis 6.2 or later (Debian/Ubuntu: apt-get install redis-server redis-tools)";

/// Makes sure redis-server and redis-benchmark can be run (see
/// [`check_redis_programs`]).
pub fn check_redis_tools(redis_server: &Path, redis_benchmark: &Path) -> Result<()> {
    check_redis_programs(&[
        (redis_server, "redis-server"),
        (redis_benchmark, "redis-benchmark"),
    ])
}

/// Makes sure each of Redis's `programs` can be run: `(program, name)`, where
/// `name` is both the program's default and the flag that names another
/// (`redis-server`, `redis-benchmark`). A default missing from PATH is an
/// error that says how to install it; a named program that does not exist,
/// an error about its flag.
pub fn check_redis_programs(programs: &[(&Path, &'static str)]) -> Result<()> {
    for &(program, name) in programs {
        if find_program(program).is_some() {
            continue;
        }
        return Err(if program == Path::new(name) {
            ServerBenchError::NotInstalled(format!(
                "{name} is not on PATH: {INSTALL_REDIS}, or pass --{name}"
            ))
        } else {
            ServerBenchError::flag(name, format!("{} does not exist", program.display()))
        });
    }
    Ok(())
}

/// The first line `program --version` prints, or why there is none.
pub fn version(program: &Path) -> String {
    match Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
        Ok(output) => format!(
            "unknown ({} --version: {})",
            program.display(),
            output.status
        ),
        Err(e) => format!("unknown ({} --version: {e})", program.display()),
    }
}

/// Writes dirty pages back before a measurement, so that neither server
/// pays for the write-back of the one measured before it. Best effort.
pub fn sync_file_systems() {
    let _ = Command::new("sync")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_gets_aof_at_the_matching_fsync_policy() {
        let args = redis_args(7000, Path::new("/d"), Durability::Process).join(" ");
        assert!(args.contains("--appendonly yes --appendfsync no"), "{args}");
        assert!(args.contains("--save  "), "{args}");
        assert!(args.contains("--bind 127.0.0.1"), "{args}");
        let args = redis_args(7000, Path::new("/d"), Durability::Always).join(" ");
        assert!(args.contains("--appendfsync always"), "{args}");
        let args = System::RedisNoFsync
            .server_args(7000, Path::new("/d"), Durability::Always)
            .join(" ");
        assert!(args.contains("--appendonly yes --appendfsync no"), "{args}");
        let args = engram_args(7000, Path::new("/d"), Durability::Everysec).join(" ");
        assert_eq!(
            args,
            "serve --bind 127.0.0.1 --port 7000 --dir /d --durability everysec"
        );
    }

    #[test]
    fn free_ports_are_not_redis_default() {
        assert_ne!(free_port().unwrap(), REDIS_DEFAULT_PORT);
    }
}
