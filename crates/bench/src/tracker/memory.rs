//! The memory the trackers watch: a raw shared mapping of a file (ext4 or
//! tmpfs), of a memfd, or anonymous memory, and the store helpers the
//! writers use on it.
//!
//! Engram's own `engram_pmem::Region` maps only files and owns its tracker
//! hook, so the untracked baseline and the kernel tracker use this plain
//! mapping instead: the same stores (an atomic 8-byte store, a
//! `copy_nonoverlapping` of a few hundred bytes) with nothing in between.
//! The `region` tracker row of the report measures what Region's helpers add
//! on their own (a bounds check and an empty-tracker branch).
//!
//! ## Who touches what
//!
//! Writer threads store to disjoint slices (one per thread); the collection
//! pass reads whole pages while they do, with [`Mapping::copy_racy`]
//! (volatile word loads, the discipline of `Region::copy_racy`): a page read
//! while a writer changes it is one the kernel has marked written again, so
//! the next pass reads it once more.

// Raw mappings need `unsafe` (mmap, pointer stores, volatile loads); each
// block says why it is sound. The crate root denies unsafe code elsewhere.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// The OS page, which both trackers track (x86_64 Linux).
pub const PAGE_BYTES: u64 = 4096;

/// What backs the tracked range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryKind {
    /// A regular file, `MAP_SHARED` (what Engram's emulated mode maps); the
    /// file lives under `--dir` (ext4 on the development machines).
    File,
    /// A file on tmpfs (`--shm-dir`, default /dev/shm), `MAP_SHARED`: shmem,
    /// as a memfd is, but with a path, so Engram's Region can map it too.
    Tmpfs,
    /// `memfd_create`, `MAP_SHARED`: shmem without a path.
    Memfd,
    /// Anonymous private memory (`MAP_PRIVATE | MAP_ANONYMOUS`).
    Anon,
}

impl MemoryKind {
    pub const ALL: [MemoryKind; 4] = [
        MemoryKind::File,
        MemoryKind::Tmpfs,
        MemoryKind::Memfd,
        MemoryKind::Anon,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::File => "file",
            MemoryKind::Tmpfs => "tmpfs",
            MemoryKind::Memfd => "memfd",
            MemoryKind::Anon => "anon",
        }
    }

    /// Whether Engram's Region (and so its software tracker) can map it.
    pub fn has_path(self) -> bool {
        matches!(self, MemoryKind::File | MemoryKind::Tmpfs)
    }
}

impl std::str::FromStr for MemoryKind {
    type Err = String;
    fn from_str(name: &str) -> Result<Self, String> {
        MemoryKind::ALL
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("unknown memory '{name}' (expected file, tmpfs, memfd or anon)"))
    }
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a mapping is made.
#[derive(Clone, Copy, Debug, Default)]
pub struct MapOptions {
    /// Fault every page in for writing at once (as Region's `populate`).
    pub populate: bool,
    /// Shared file mappings: no readahead (`MADV_RANDOM`) before the pages
    /// are faulted in, so the page cache holds 4 KiB folios rather than
    /// large ones (as Region's `fine_writeback`).
    pub fine_writeback: bool,
}

impl MapOptions {
    pub const POPULATED: MapOptions = MapOptions {
        populate: true,
        fine_writeback: false,
    };
    pub const LAZY: MapOptions = MapOptions {
        populate: false,
        fine_writeback: false,
    };
}

/// One mapping, unmapped on drop. A file it was created on is left in place
/// (the caller's directory is removed after the run).
pub struct Mapping {
    base: *mut u8,
    len: u64,
    file: Option<File>,
}

// SAFETY: the pointer refers to a mapping owned by this value for its whole
// life. Concurrent use follows the module's discipline: writers store to
// disjoint slices (8-byte stores are atomic), readers copy with volatile
// word loads and never build references to bytes being written.
unsafe impl Send for Mapping {}
// SAFETY: as above; no interior state besides the mapped bytes.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Creates `path` (it must not exist), allocates `len` bytes of it on
    /// disk (as Region's growth does) and maps it shared.
    pub fn create_file(path: &Path, len: u64, options: MapOptions) -> io::Result<Mapping> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        // SAFETY: plain call on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Mapping::map(Some(file), len, libc::MAP_SHARED, options)
    }

    /// Maps an existing file as it is, shared (for the cold re-checksum).
    pub fn open_file(path: &Path, options: MapOptions) -> io::Result<Mapping> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        let len = file.metadata()?.len();
        Mapping::map(Some(file), len, libc::MAP_SHARED, options)
    }

    pub fn memfd(len: u64, options: MapOptions) -> io::Result<Mapping> {
        let name = CString::new("engram-tracker-bench").expect("no NUL in the name");
        // SAFETY: `name` is a NUL-terminated string alive across the call.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned to us and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len)?;
        Mapping::map(Some(file), len, libc::MAP_SHARED, options)
    }

    pub fn anonymous(len: u64, options: MapOptions) -> io::Result<Mapping> {
        Mapping::map(None, len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, options)
    }

    fn map(
        file: Option<File>,
        len: u64,
        flags: libc::c_int,
        options: MapOptions,
    ) -> io::Result<Mapping> {
        assert!(
            len > 0 && len.is_multiple_of(PAGE_BYTES),
            "mapping of {len} bytes"
        );
        let fd = file.as_ref().map_or(-1, |file| file.as_raw_fd());
        // SAFETY: a new mapping at an address of the kernel's choosing; it
        // overlaps nothing we hold.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mapping = Mapping {
            base: base as *mut u8,
            len,
            file,
        };
        // Both trackers track 4 KiB pages; a transparent huge page would be
        // tracked (and faulted, and checksummed) 2 MiB at a time. Advisory:
        // an error only means the kernel has no THP to refuse.
        let _ = mapping.advise(0, len, libc::MADV_NOHUGEPAGE);
        if options.fine_writeback && mapping.file.is_some() {
            mapping.advise(0, len, libc::MADV_RANDOM)?;
        }
        if options.populate {
            // Fault every page in for writing now, so the timed stores take
            // no first-touch faults (Region's `populate` does the same).
            mapping.advise(0, len, libc::MADV_POPULATE_WRITE)?;
        }
        Ok(mapping)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn pages(&self) -> u64 {
        self.len / PAGE_BYTES
    }

    /// The first byte's virtual address (for the kernel interfaces).
    pub fn address(&self) -> u64 {
        self.base as u64
    }

    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    #[inline]
    fn check(&self, offset: u64, len: u64) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "access [{offset}, +{len}) outside mapping of {} bytes",
            self.len
        );
    }

    /// Atomic 8-byte store, as `Region::store_u64` (Release).
    #[inline]
    pub fn store_u64(&self, offset: u64, value: u64) {
        self.check(offset, 8);
        assert!(
            offset.is_multiple_of(8),
            "unaligned 8-byte store at {offset}"
        );
        // SAFETY: in bounds and 8-byte aligned (checked; the base is page
        // aligned); AtomicU64 has u64's layout, and the mapping outlives
        // `self`'s borrow.
        let word = unsafe { &*(self.base.add(offset as usize) as *const AtomicU64) };
        word.store(value, Ordering::Release);
    }

    /// Copies `bytes` to `offset`, as `Region::write`.
    #[inline]
    pub fn write(&self, offset: u64, bytes: &[u8]) {
        self.check(offset, bytes.len() as u64);
        // SAFETY: in bounds (checked); `bytes` is a Rust slice and cannot
        // overlap the mapping's bytes, which are never handed out as
        // slices; the range belongs to the calling writer (module docs).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.base.add(offset as usize),
                bytes.len(),
            )
        };
    }

    /// Copies `[offset, offset + buffer.len())` while writers may be
    /// storing to it (volatile 8-byte loads, as `Region::copy_racy`).
    pub fn copy_racy(&self, offset: u64, buffer: &mut [u8]) {
        self.check(offset, buffer.len() as u64);
        assert!(
            offset.is_multiple_of(8) && buffer.len().is_multiple_of(8),
            "racy copies are of whole aligned words"
        );
        // SAFETY: in bounds and aligned (checked above; the base is page
        // aligned). A volatile word load is never torn into bytes, and
        // writers only change bytes, never the mapping.
        let words = unsafe { self.base.add(offset as usize) } as *const u64;
        for (index, chunk) in buffer.chunks_exact_mut(8).enumerate() {
            // SAFETY: as above, word `index` of the checked range.
            let word = unsafe { std::ptr::read_volatile(words.add(index)) };
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
    }

    pub fn advise(&self, offset: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
        self.check(offset, len);
        // SAFETY: advice on a page-aligned range of our own mapping; none
        // of the advice used here (populate, huge pages, page-out) changes
        // the bytes a later load sees.
        let rc = unsafe {
            libc::madvise(
                self.base.add(offset as usize) as *mut libc::c_void,
                len as usize,
                advice,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// `msync(MS_SYNC)` of a page-aligned range (writes back dirty pages).
    pub fn sync(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check(offset, len);
        // SAFETY: a page-aligned range of our own mapping.
        let rc = unsafe {
            libc::msync(
                self.base.add(offset as usize) as *mut libc::c_void,
                len as usize,
                libc::MS_SYNC,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// How many pages of `[offset, offset + len)` are resident (`mincore`).
    pub fn resident_pages(&self, offset: u64, len: u64) -> io::Result<u64> {
        self.check(offset, len);
        let mut vector = vec![0u8; len.div_ceil(PAGE_BYTES) as usize];
        // SAFETY: a page-aligned range of our mapping, and a vector of one
        // byte per page of it, which mincore fills.
        let rc = unsafe {
            libc::mincore(
                self.base.add(offset as usize) as *mut libc::c_void,
                len as usize,
                vector.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vector.iter().filter(|&&byte| byte & 1 != 0).count() as u64)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; nothing borrowed
        // from it outlives `self` (no slices of it are handed out).
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len as usize);
        }
    }
}

/// Writes `file`'s dirty pages back and evicts its cached pages, so that
/// the next reads come from the disk. Pages still mapped are kept: call it
/// with no mapping of the file left.
pub fn drop_cached_pages(file: &File) -> io::Result<()> {
    file.sync_all()?;
    // SAFETY: advisory call on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// The file system type of `path`, by `statfs` magic: "ext4", "tmpfs",
/// or the magic number in hex.
pub fn file_system_name(path: &Path) -> io::Result<String> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    // SAFETY: all-zero bytes are a valid `struct statfs` (integers only).
    let mut buffer: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a `struct statfs` to fill, both
    // alive across the call.
    let rc = unsafe { libc::statfs(c_path.as_ptr(), &mut buffer) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // f_type and the magic constants share the C library's type.
    let magic = buffer.f_type;
    Ok(match magic {
        m if m == libc::EXT4_SUPER_MAGIC => "ext4".into(),
        m if m == libc::TMPFS_MAGIC => "tmpfs".into(),
        m if m == libc::XFS_SUPER_MAGIC => "xfs".into(),
        m if m == libc::BTRFS_SUPER_MAGIC => "btrfs".into(),
        m if m == libc::OVERLAYFS_SUPER_MAGIC => "overlayfs".into(),
        other => format!("{other:#x}"),
    })
}
