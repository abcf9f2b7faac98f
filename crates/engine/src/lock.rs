//! One open handle per store directory.
//!
//! Two layers, because `flock` alone is not enough: a lock held through a
//! descriptor is shared by every process that descriptor was copied into, and
//! a child being spawned by any thread holds a copy of every descriptor until
//! it execs (`O_CLOEXEC` closes it only then). So:
//!
//! - within this process, a registry of open directories decides at once;
//! - across processes, an exclusive `flock` on `DIR/LOCK`, retried for a short
//!   while so that a sibling thread's fork-exec window never reads as "in use"
//!   (found by the disk-full tests, which spawn `mount` while reopening).

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::{Error, Result};

const LOCK_FILE: &str = "LOCK";
/// How long another holder of the `flock` may take to let go before the
/// directory counts as in use by another process.
const FLOCK_PATIENCE: Duration = Duration::from_millis(250);
const FLOCK_RETRY: Duration = Duration::from_millis(2);

fn registry() -> &'static Mutex<HashSet<PathBuf>> {
    static OPEN: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Held for the life of a store; releases both layers when dropped.
pub struct DirectoryLock {
    file: Option<File>,
    key: PathBuf,
}

impl DirectoryLock {
    pub fn acquire(dir: &Path) -> Result<DirectoryLock> {
        let key = dir
            .canonicalize()
            .map_err(|e| Error::io("resolving data directory", dir, e))?;
        if !registry()
            .lock()
            .expect("lock registry")
            .insert(key.clone())
        {
            return Err(Error::Locked { path: dir.into() });
        }
        // From here on, dropping `lock` unregisters the directory.
        let mut lock = DirectoryLock { file: None, key };
        let path = dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("opening lock file", &path, e))?;
        let deadline = Instant::now() + FLOCK_PATIENCE;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(FLOCK_RETRY)
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::Locked { path: dir.into() })
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("locking", &path, e)),
            }
        }
        lock.file = Some(file);
        Ok(lock)
    }
}

impl Drop for DirectoryLock {
    fn drop(&mut self) {
        // Close (and so unlock) the file before another opener can pass the
        // registry.
        drop(self.file.take());
        registry().lock().expect("lock registry").remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_in_process_fails_and_release_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirectoryLock::acquire(dir.path()).unwrap();
        assert!(matches!(
            DirectoryLock::acquire(dir.path()),
            Err(Error::Locked { .. })
        ));
        drop(first);
        DirectoryLock::acquire(dir.path()).unwrap();
    }

    /// The bug the disk-full tests found: a child spawned by another thread
    /// briefly holds the lock file's descriptor; reopening must not fail.
    #[test]
    fn reopen_succeeds_while_another_thread_spawns_processes() {
        let dir = tempfile::tempdir().unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::process::Command::new("true").status();
                }
            });
            for _ in 0..200 {
                let lock =
                    DirectoryLock::acquire(dir.path()).expect("reopen while a sibling spawns");
                drop(lock);
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
}
