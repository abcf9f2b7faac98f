//! A lazy file system for power-failure tests, after LazyFS (Ramos et
//! al., "When Amnesia Strikes", VLDB 2024): a FUSE file system that keeps
//! in memory every write not yet made durable, and on command forgets all
//! of it, as a machine losing power forgets its page cache and the disk's
//! volatile cache.
//!
//! Mounted with [`LazyFs::mount`]. A test runs `engram serve` on it, calls
//! [`LazyFs::cut_power`] (from then on nothing more becomes durable),
//! SIGKILLs the server, and calls [`LazyFs::power_cycle`], which unmounts
//! (the kernel's remaining dirty pages are written back, and discarded),
//! keeps only what was durable, and mounts again. The state lives in
//! memory (`disk.rs`), so it survives the remount but not the test.
//! `ENGRAM_LAZY_FS_TRACE=1` prints every request but reads to stderr.
//!
//! The process serving the file system must not map its files itself
//! (the lazy file system's own tests map them from a child process): an
//! `munmap` holds the address-space lock while it waits for the
//! write-back of dirty pages, and the serving threads need that lock to
//! take any page fault, so both would wait for ever.
//!
//! # What is durable when
//!
//! Each file has a live image (what reads return) and a durable image
//! (what a power cycle keeps); each directory has live and durable entries.
//!
//! * **Bytes and length of a file** (`write`, the write-back of a shared
//!   mapping's dirty pages, `ftruncate`, `fallocate`) are live only, until
//!   an FSYNC of that file: `fsync`, `fdatasync`, or `msync(MS_SYNC)`,
//!   which on FUSE writes the dirty pages back and then sends FSYNC (the
//!   kernel sends it for the whole file; the disk makes the whole file
//!   durable, which includes pages written back earlier by the kernel on
//!   its own: real disks may keep those too). `close` (FLUSH) and
//!   `munmap` make nothing durable.
//! * **Names** (create, mkdir, unlink, rmdir, rename) go into a journal in
//!   the order they happen. An FSYNC of a file makes the journal durable
//!   up to and including the last change that gave that file a name; an
//!   FSYNC of a directory (`fsync` of a directory descriptor), up to and
//!   including the last change that added or removed one of its entries or
//!   named the directory itself. Always a prefix, in order, and a rename is
//!   one change (its old name goes exactly when the new one comes).
//! * After a cut nothing becomes durable; the kernel and the processes
//!   above go on seeing the live state until the unmount. A cut comes
//!   when the test says ([`LazyFs::cut_power`]) or right after the n-th
//!   FSYNC of a given file ([`LazyFs::cut_power_after_syncs`]).
//!
//! Not modelled: torn pages (a page is written whole or not at all), and
//! a disk's cache flush (any file's `fsync`) persisting pages of *other*
//! files that the kernel had written back on its own; here those wait
//! for their own file's FSYNC, so an ordering bug that needs them to be
//! durable early goes unseen.
//!
//! Why this rule: it is what Engram is entitled to rely on from ext4 (the
//! file system its users run it on), and stricter. On ext4 (`data=ordered`,
//! without `fast_commit`, which mkfs leaves off) an `fsync` or `fdatasync` that has anything to commit commits the whole
//! running journal transaction, so every name change made before it, in
//! any directory, becomes durable with it; a new file's name included.
//! Here only the prefix that ends at the synced inode's last change does,
//! and a name change after it stays volatile however many files are
//! synced. LazyFS itself keeps names as they are and drops only unsynced
//! data; this disk also loses names never made durable. What is *not*
//! stricter than ext4: a prefix may carry changes to other directories
//! along (a journal commits in order), and a file's length is durable
//! with its bytes (ext4's `fdatasync` commits a size change too).
//!
//! What Engram's files do under this rule: a new data file is written
//! under a temporary name, synced (its name so far is durable), renamed
//! and its directory synced (the rename is durable); the data directories
//! made by `create_dir_all` become durable with the first sync of a
//! directory or file inside them; a region's growth (`posix_fallocate`)
//! and its bytes are durable at the next `msync` of the region.

mod disk;
mod fuse;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use fuser::{BackgroundSession, Config, MountOption};

use disk::Disk;
pub use disk::{Stats, Unsynced};
use fuse::LazyFuse;

/// Why power-cut tests cannot run on this machine, if they cannot: FUSE
/// needs `/dev/fuse`.
pub fn unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse does not exist: no FUSE on this machine".into());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        // Without libfuse's setuid helper, the mount is mount(2) itself.
        return Some("not root: mounting the FUSE file system needs mount(2)".into());
    }
    None
}

/// A mounted lazy file system (see the module docs).
pub struct LazyFs {
    disk: Arc<Mutex<Disk>>,
    mountpoint: PathBuf,
    session: Option<BackgroundSession>,
}

impl LazyFs {
    /// Mounts an empty lazy file system at `mountpoint` (an empty
    /// directory). Needs root, or a `fusermount3` for other users.
    pub fn mount(mountpoint: &Path) -> std::io::Result<LazyFs> {
        let mut fs = LazyFs {
            disk: Arc::default(),
            mountpoint: mountpoint.to_path_buf(),
            session: None,
        };
        fs.attach()?;
        Ok(fs)
    }

    fn attach(&mut self) -> std::io::Result<()> {
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("engram-lazyfs".into()),
            MountOption::Subtype("lazyfs".into()),
        ];
        // Two request threads: a page fault need not wait behind the
        // write-back of an msync.
        config.n_threads = Some(2);
        let filesystem = LazyFuse {
            disk: self.disk.clone(),
            trace: std::env::var_os("ENGRAM_LAZY_FS_TRACE").is_some(),
        };
        self.session = Some(fuser::spawn_mount(filesystem, &self.mountpoint, &config)?);
        Ok(())
    }

    /// The power fails: nothing more becomes durable. Processes using the
    /// file system carry on with what they see until they are killed.
    /// Returns what is lost.
    pub fn cut_power(&self) -> Unsynced {
        self.disk.lock().unwrap().cut_power()
    }

    /// Arms a cut at an exact point: right after the `syncs`-th FSYNC of
    /// `path` (relative to the mount point) from now, which is made
    /// durable; nothing after it is. [`LazyFs::powered`] says when it
    /// happened. What is lost is not reported, unlike [`LazyFs::cut_power`].
    pub fn cut_power_after_syncs(&self, path: &Path, syncs: u32) -> std::io::Result<()> {
        self.disk
            .lock()
            .unwrap()
            .cut_after_syncs(path, syncs)
            .map_err(std::io::Error::from_raw_os_error)
    }

    /// Whether the power is on: false from a cut to the next power cycle.
    pub fn powered(&self) -> bool {
        self.disk.lock().unwrap().powered()
    }

    /// Unmounts, forgets everything that was not durable, and mounts
    /// again. Every process that had a file of it open must be gone (the
    /// unmount fails with EBUSY otherwise).
    pub fn power_cycle(&mut self) -> std::io::Result<()> {
        if let Some(session) = self.session.take() {
            session.umount_and_join()?;
        }
        self.disk.lock().unwrap().power_cycle();
        self.attach()
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts (every process using the file system must be gone).
    pub fn unmount(mut self) -> std::io::Result<()> {
        match self.session.take() {
            Some(session) => session.umount_and_join(),
            None => Ok(()),
        }
    }

    pub fn stats(&self) -> Stats {
        self.disk.lock().unwrap().stats()
    }
}

/// Unmounts. A test that fails may leave a process inside (its server is
/// killed as its own guard drops, maybe after this one): the unmount is
/// lazy, so this never waits or fails.
impl Drop for LazyFs {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .status();
            drop(session);
        }
    }
}
