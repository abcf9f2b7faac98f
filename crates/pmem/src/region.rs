//! A persistent region: one file mapped at a fixed virtual address.
//!
//! At open the region reserves `reserve_bytes` of address space with an
//! inaccessible anonymous mapping, then maps the file over the start of that
//! reservation with `MAP_FIXED`. Growing extends the file (with
//! `posix_fallocate`, so that a full disk is an error now rather than a
//! `SIGBUS` on some later store; with fine writeback also writing zeros
//! over it, so that a sync of its pages writes no extent changes) and
//! maps the new tail right after the old one. The base address therefore
//! never moves, and every slice or offset handed out stays valid until
//! the region is dropped.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::flush::{cpu_supports, flush_range, store_fence, FlushInstruction};
use crate::staged::DirtyPages;
use crate::{Error, Mode, ModeChoice, PersistObserver, PmemOffset, Result, StoreTracker};

pub const CACHE_LINE_BYTES: u64 = 64;
pub const OS_PAGE_BYTES: u64 = 4096;
const _: () = assert!(OS_PAGE_BYTES.is_multiple_of(CACHE_LINE_BYTES));

/// `madvise` advice that pre-faults a range writable (Linux 5.14+). Older
/// kernels answer EINVAL, which we ignore: it is only an optimisation.
const MADV_POPULATE_WRITE: libc::c_int = 23;
/// Likewise, read-only: maps pages already in the page cache without marking
/// them dirty (used at open, where dirtying would make the next msync write
/// the whole file).
const MADV_POPULATE_READ: libc::c_int = 22;

/// Default address space reserved for one region: 1 TiB, far below the 128 TiB
/// of user address space x86_64 Linux offers, and free until mapped.
pub const DEFAULT_RESERVE_BYTES: u64 = 1 << 40;

#[derive(Clone)]
pub struct RegionOptions {
    pub mode: ModeChoice,
    /// `None` picks the default of the mode: the best available instruction
    /// on DAX, no flush on emulated memory (the page cache holds the data).
    pub flush: Option<FlushInstruction>,
    /// Address space reserved up front; the region can never grow past it.
    pub reserve_bytes: u64,
    /// Pre-fault newly mapped ranges for writing so the write path takes no
    /// page faults.
    pub populate: bool,
    /// A quota: growing past this many bytes fails as a full disk would.
    /// Used to test the out-of-space path without filling a real disk.
    pub file_limit_bytes: Option<u64>,
    /// Sees every store, flush and fence (the crash simulator).
    pub observer: Option<Arc<dyn PersistObserver>>,
    /// Emulated memory that is synced often (group commit): keep the file's
    /// page cache in single 4 KiB pages, so an `msync` writes back only the
    /// pages that were written. Otherwise the kernel's readahead builds
    /// large folios, and writeback writes a whole folio (up to 2 MiB) for a
    /// 200-byte record. Costs a read of the file at open, because cached
    /// large folios are dropped first (done in large reads that keep
    /// single pages: `Region::read_in_single_pages`).
    pub fine_writeback: bool,
    /// Emulated memory only: map the file privately, so that stores stay
    /// in the process's own pages, and make a sync copy the pages stored
    /// to since the last one into the file (`pwrite` + `fdatasync`)
    /// instead of `msync`ing a shared mapping (`staged.rs` says why).
    /// Until then a store survives neither a power failure nor a process
    /// crash: for owners whose every acknowledged write waits for a sync.
    pub staged: bool,
}

impl Default for RegionOptions {
    fn default() -> Self {
        RegionOptions {
            mode: ModeChoice::Auto,
            flush: None,
            reserve_bytes: DEFAULT_RESERVE_BYTES,
            populate: true,
            file_limit_bytes: None,
            observer: None,
            fine_writeback: false,
            staged: false,
        }
    }
}

impl std::fmt::Debug for RegionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionOptions")
            .field("mode", &self.mode)
            .field("flush", &self.flush)
            .field("reserve_bytes", &self.reserve_bytes)
            .field("populate", &self.populate)
            .field("file_limit_bytes", &self.file_limit_bytes)
            .field("observer", &self.observer.is_some())
            .field("fine_writeback", &self.fine_writeback)
            .field("staged", &self.staged)
            .finish()
    }
}

pub struct Region {
    path: PathBuf,
    file: File,
    base: *mut u8,
    reserve_bytes: u64,
    /// Bytes of the file currently mapped. Only grows (under `grow_lock`);
    /// published with Release after the new range is mapped.
    len: AtomicU64,
    grow_lock: Mutex<()>,
    mode: Mode,
    flush: FlushInstruction,
    populate: bool,
    /// See `RegionOptions::fine_writeback` (never set on DAX).
    fine_writeback: bool,
    /// `u64::MAX` when there is no quota.
    file_limit_bytes: AtomicU64,
    observer: Option<Arc<dyn PersistObserver>>,
    /// Sees every store before it happens (the integrity layer). Set once,
    /// before the first store; see [`Region::set_tracker`].
    tracker: OnceLock<Arc<dyn StoreTracker>>,
    /// A staged region's pages stored to since the last sync
    /// ([`RegionOptions::staged`]).
    staged: Option<DirtyPages>,
    /// Tests' points inside a staged sync (`write_out`); nothing outside
    /// test builds.
    write_out_hooks: WriteOutHooks,
}

/// Outside test builds the points of a staged sync are the real thing
/// (the tests' own, `tests::WriteOutHooks`, can pause or fail there).
#[cfg(not(test))]
#[derive(Default)]
struct WriteOutHooks {}

#[cfg(not(test))]
impl WriteOutHooks {
    fn after_take(&self) {}

    fn copy(&self, copy: impl FnOnce() -> std::io::Result<()>) -> std::io::Result<()> {
        copy()
    }

    fn sync(&self, sync: impl FnOnce() -> std::io::Result<()>) -> std::io::Result<()> {
        sync()
    }
}

#[cfg(test)]
use tests::WriteOutHooks;

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("path", &self.path)
            .field("len", &self.len())
            .field("mode", &self.mode)
            .field("flush", &self.flush)
            .finish()
    }
}

// SAFETY: the raw base pointer refers to a mapping owned by the region for its
// whole life; concurrent access discipline is documented at the crate root and
// kept by the layer above (one writer per range, atomics for shared words).
unsafe impl Send for Region {}
// SAFETY: as above; all interior mutability is atomics or the grow lock.
unsafe impl Sync for Region {}

impl Region {
    /// Creates a new region file of `len_bytes` (a multiple of the OS page).
    /// Fails if the file exists.
    pub fn create(path: &Path, len_bytes: u64, options: RegionOptions) -> Result<Region> {
        if !len_bytes.is_multiple_of(OS_PAGE_BYTES) {
            return Err(Error::Unaligned {
                bytes: len_bytes,
                page_bytes: OS_PAGE_BYTES,
            });
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::io("creating region file", path, e))?;
        let region = Region::map(path, file, 0, options)?;
        region.grow_to(len_bytes)?;
        Ok(region)
    }

    /// Maps an existing region file as it is. Never writes to the file: the
    /// caller validates its contents before changing anything.
    pub fn open(path: &Path, options: RegionOptions) -> Result<Region> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::io("opening region file", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("reading size of region file", path, e))?
            .len();
        Region::map(path, file, len, options)
    }

    fn map(path: &Path, file: File, len: u64, options: RegionOptions) -> Result<Region> {
        let mode = match options.mode {
            ModeChoice::Emulated => Mode::Emulated,
            ModeChoice::Dax => {
                probe_map_sync(&file).map_err(|source| Error::DaxUnavailable {
                    path: path.to_path_buf(),
                    source,
                })?;
                Mode::Dax
            }
            ModeChoice::Auto => match probe_map_sync(&file) {
                Ok(()) => Mode::Dax,
                Err(_) => Mode::Emulated,
            },
        };
        let flush = options.flush.unwrap_or(match mode {
            Mode::Dax => FlushInstruction::best_available(),
            Mode::Emulated => FlushInstruction::None,
        });
        if !cpu_supports(flush) {
            return Err(Error::FlushUnsupported {
                instruction: flush.name(),
            });
        }
        let reserve_bytes = options
            .reserve_bytes
            .max(len)
            .next_multiple_of(OS_PAGE_BYTES);
        // SAFETY: an anonymous PROT_NONE reservation at an address of the
        // kernel's choosing; it touches no existing memory.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve_bytes as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::io(
                "reserving address space for",
                path,
                std::io::Error::last_os_error(),
            ));
        }
        let region = Region {
            path: path.to_path_buf(),
            file,
            base: base as *mut u8,
            reserve_bytes,
            len: AtomicU64::new(0),
            grow_lock: Mutex::new(()),
            mode,
            flush,
            populate: options.populate,
            file_limit_bytes: AtomicU64::new(options.file_limit_bytes.unwrap_or(u64::MAX)),
            observer: options.observer,
            tracker: OnceLock::new(),
            fine_writeback: options.fine_writeback && mode == Mode::Emulated,
            staged: (options.staged && mode == Mode::Emulated)
                .then(|| DirtyPages::new(reserve_bytes)),
            write_out_hooks: WriteOutHooks::default(),
        };
        if len > 0 && region.fine_writeback {
            region.drop_cached_pages()?;
        }
        if len > 0 {
            region.map_file_range(0, len, MADV_POPULATE_READ)?;
            region.len.store(len, Ordering::Release);
        }
        Ok(region)
    }

    /// Maps file bytes `[from, to)` at `base + from`, over the reservation.
    fn map_file_range(&self, from: u64, to: u64, populate_advice: libc::c_int) -> Result<()> {
        debug_assert!(from.is_multiple_of(OS_PAGE_BYTES));
        debug_assert!(to <= self.reserve_bytes);
        let flags = match self.mode {
            Mode::Dax => libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC | libc::MAP_FIXED,
            Mode::Emulated if self.staged.is_some() => libc::MAP_PRIVATE | libc::MAP_FIXED,
            Mode::Emulated => libc::MAP_SHARED | libc::MAP_FIXED,
        };
        // SAFETY: `[base + from, base + to)` lies inside our own reservation
        // (checked against `reserve_bytes` by every caller) and is not yet
        // mapped to the file, so MAP_FIXED replaces only our PROT_NONE pages.
        let address = unsafe {
            libc::mmap(
                self.base.add(from as usize) as *mut libc::c_void,
                (to - from) as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                self.file.as_raw_fd(),
                from as libc::off_t,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(Error::io(
                "mapping region file",
                &self.path,
                std::io::Error::last_os_error(),
            ));
        }
        if self.fine_writeback {
            // No readahead, so faults bring in single pages (see
            // `RegionOptions::fine_writeback`).
            // SAFETY: advisory call on the range we just mapped.
            unsafe {
                libc::madvise(address, (to - from) as usize, libc::MADV_RANDOM);
            }
        }
        if self.populate {
            // SAFETY: advisory call on the range we just mapped.
            unsafe {
                libc::madvise(address, (to - from) as usize, populate_advice);
            }
        }
        Ok(())
    }

    /// Writes back and evicts the file's cached pages, so that the mapping
    /// faults them in again as single pages. Dirty pages (left by a process
    /// that crashed) are written first and nothing is lost: the kernel
    /// never drops a dirty page.
    fn drop_cached_pages(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("syncing region file", &self.path, e))?;
        // SAFETY: advisory call on our own open file descriptor.
        let rc =
            unsafe { libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(Error::io(
                "dropping cached pages of",
                &self.path,
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        self.read_in_single_pages()
    }

    /// Reads the whole file back into the page cache in large reads that
    /// still leave single pages: with the descriptor's access pattern
    /// random, the kernel reads exactly the range asked for into order-0
    /// folios (no readahead, which would build large ones). Faulting the
    /// mapping in instead, under `MADV_RANDOM`, reads one 4 KiB page per
    /// fault: 9 s for a 626 MB file on this disk, against well under one
    /// this way. A failure here only costs that time: faults read the rest.
    fn read_in_single_pages(&self) -> Result<()> {
        use std::os::unix::fs::FileExt;
        const CHUNK: usize = 8 << 20;
        // SAFETY: advisory call on our own open file descriptor.
        unsafe { libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        let len = self
            .file
            .metadata()
            .map_err(|e| Error::io("reading the size of", &self.path, e))?
            .len();
        let mut buffer = vec![0u8; CHUNK];
        let mut offset = 0;
        while offset < len {
            match self.file.read_at(&mut buffer, offset) {
                Ok(0) | Err(_) => break,
                Ok(read) => offset += read as u64,
            }
        }
        Ok(())
    }

    /// Grows the file and the mapping to `new_len` bytes (a multiple of the OS
    /// page). Growing to a smaller size is a no-op. On a full disk returns
    /// [`Error::NoSpace`] and leaves the region exactly as it was.
    pub fn grow_to(&self, new_len: u64) -> Result<()> {
        let _guard = self.grow_lock.lock();
        let old_len = self.len.load(Ordering::Acquire);
        if new_len <= old_len {
            return Ok(());
        }
        if !new_len.is_multiple_of(OS_PAGE_BYTES) || !old_len.is_multiple_of(OS_PAGE_BYTES) {
            return Err(Error::Unaligned {
                bytes: if !new_len.is_multiple_of(OS_PAGE_BYTES) {
                    new_len
                } else {
                    old_len
                },
                page_bytes: OS_PAGE_BYTES,
            });
        }
        if new_len > self.reserve_bytes {
            return Err(Error::ReservationExhausted {
                path: self.path.clone(),
                needed_bytes: new_len,
                reserved_bytes: self.reserve_bytes,
            });
        }
        if new_len > self.file_limit_bytes.load(Ordering::Relaxed) {
            return Err(Error::NoSpace {
                path: self.path.clone(),
                needed_bytes: new_len,
                have_bytes: old_len,
            });
        }
        if let Some(tracker) = self.tracker.get() {
            tracker.before_grow(new_len)?;
        }
        // SAFETY: plain system call on our own descriptor.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                old_len as libc::off_t,
                (new_len - old_len) as libc::off_t,
            )
        };
        if rc != 0 {
            // Give back whatever part was allocated; the old contents are
            // untouched either way.
            let _ = self.file.set_len(old_len);
            let source = std::io::Error::from_raw_os_error(rc);
            return Err(
                if rc == libc::ENOSPC || rc == libc::EDQUOT || rc == libc::EFBIG {
                    Error::NoSpace {
                        path: self.path.clone(),
                        needed_bytes: new_len,
                        have_bytes: old_len,
                    }
                } else {
                    Error::io("extending region file", &self.path, source)
                },
            );
        }
        if self.fine_writeback {
            if let Err(error) = self.write_zeros(old_len, new_len) {
                let _ = self.file.set_len(old_len);
                return Err(error);
            }
        }
        // Pre-faulting for writing marks every new page dirty, so some sync
        // writes the whole growth back as zeros. With fine-grained
        // writeback (frequent syncs) pre-fault for reading instead: the
        // first store to each page then takes a small write fault.
        // A staged region's pages are its own once written (copies of the
        // file's): made so now, not by a fault on the write path, and
        // never written back for it.
        let advice = if self.fine_writeback && self.staged.is_none() {
            MADV_POPULATE_READ
        } else {
            MADV_POPULATE_WRITE
        };
        if let Err(error) = self.map_file_range(old_len, new_len, advice) {
            let _ = self.file.set_len(old_len);
            return Err(error);
        }
        self.len.store(new_len, Ordering::Release);
        if let Some(observer) = &self.observer {
            observer.on_grow(new_len);
        }
        Ok(())
    }

    /// Writes zeros over `[from, to)` of the file and starts their
    /// writeback, so that its blocks are written, not merely reserved.
    /// Why: `posix_fallocate` leaves unwritten extents on ext4 and XFS,
    /// and the first writeback of each page converts its extent, so an
    /// `msync` of freshly appended pages (the log's tail, every time) also
    /// wrote the inode and the extent blocks, each synchronously: 140–149
    /// µs of wall time and 47 of CPU per durable 4 KB append against 95
    /// and 33 in a written file (`scripts/sync_paths.py`). Page by page,
    /// so the page cache keeps single pages (see
    /// [`RegionOptions::fine_writeback`]; zeros written a MiB at a time
    /// made each such `msync` 620 µs). A crash in the middle leaves zeros
    /// or reserved blocks that read as zeros: the same bytes.
    fn write_zeros(&self, from: u64, to: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let page = [0u8; OS_PAGE_BYTES as usize];
        let mut at = from;
        while at < to {
            self.file
                .write_all_at(&page, at)
                .map_err(|e| Error::io("writing zeros into region file", &self.path, e))?;
            at += OS_PAGE_BYTES;
        }
        // Written back now, not waited for: the extents are converted as
        // the writes complete, before the log's tail reaches these pages.
        self.sync_file_range(from, to, libc::SYNC_FILE_RANGE_WRITE)
    }

    /// `sync_file_range` of file bytes `[from, to)`: page cache writeback
    /// only, no metadata and no device flush.
    fn sync_file_range(&self, from: u64, to: u64, flags: libc::c_uint) -> Result<()> {
        // SAFETY: plain system call on our own descriptor.
        let rc = unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                from as libc::off64_t,
                (to - from) as libc::off64_t,
                flags,
            )
        };
        if rc != 0 {
            return Err(Error::io(
                "writing back region file",
                &self.path,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Changes the injected quota (see [`RegionOptions::file_limit_bytes`]).
    pub fn set_file_limit(&self, limit_bytes: Option<u64>) {
        self.file_limit_bytes
            .store(limit_bytes.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn flush_instruction(&self) -> FlushInstruction {
        self.flush
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn reserve_bytes(&self) -> u64 {
        self.reserve_bytes
    }

    /// Whether `[offset, offset + len)` lies inside the mapped region. Use it
    /// before reading anything whose bounds came from the media.
    pub fn contains(&self, offset: PmemOffset, len: u64) -> bool {
        offset
            .0
            .checked_add(len)
            .is_some_and(|end| end <= self.len())
    }

    #[inline]
    fn pointer(&self, offset: PmemOffset, len: u64) -> *mut u8 {
        assert!(
            self.contains(offset, len),
            "region access [{}, +{len}) outside mapped length {}",
            offset,
            self.len()
        );
        // SAFETY: the range was just checked to be inside the mapping.
        unsafe { self.base.add(offset.0 as usize) }
    }

    /// The bytes at `[offset, offset + len)`. They stay mapped for the
    /// region's life; see the crate docs for who may write them meanwhile.
    #[inline]
    pub fn read(&self, offset: PmemOffset, len: u64) -> &[u8] {
        let pointer = self.pointer(offset, len);
        // SAFETY: in bounds (checked by `pointer`), mapped for `self`'s
        // lifetime, and by the crate's contract not written concurrently
        // except through 8-byte atomics.
        unsafe { std::slice::from_raw_parts(pointer, len as usize) }
    }

    /// Whether the region is staged ([`RegionOptions::staged`]): its stores
    /// reach the file only at a sync.
    pub fn is_staged(&self) -> bool {
        self.staged.is_some()
    }

    /// Whether the page cache is kept in single pages
    /// ([`RegionOptions::fine_writeback`], on emulated memory only).
    pub fn keeps_single_pages(&self) -> bool {
        self.fine_writeback
    }

    /// Starts loading the cache line at `offset` (see [`crate::prefetch`]);
    /// nothing when it lies outside the mapping.
    #[inline]
    pub fn prefetch(&self, offset: PmemOffset) {
        if self.contains(offset, 1) {
            crate::prefetch(self.pointer(offset, 1));
        }
    }

    /// Stores `bytes` at `offset` (not yet persistent: see [`Region::persist`]).
    #[inline]
    pub fn write(&self, offset: PmemOffset, bytes: &[u8]) {
        let pointer = self.pointer(offset, bytes.len() as u64);
        self.tracked(offset, bytes.len() as u64, || {
            // SAFETY: in bounds; the caller owns this range (crate contract),
            // and `bytes` cannot overlap it unless it was read from the same
            // range, which the engine never does for a range it writes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), pointer, bytes.len()) };
        });
        if let Some(observer) = &self.observer {
            observer.on_store(offset.0, bytes);
        }
    }

    /// Runs `store` inside the tracker's bracket (see [`StoreTracker`]).
    #[inline]
    fn tracked<R>(&self, offset: PmemOffset, len: u64, store: impl FnOnce() -> R) -> R {
        let result = match self.tracker.get() {
            None => store(),
            Some(tracker) => {
                let ticket = tracker.before_store(offset.0, len);
                let result = store();
                tracker.after_store(self, ticket, offset.0, len);
                result
            }
        };
        if let Some(dirty) = &self.staged {
            // After the store: see `staged.rs`.
            dirty.mark(offset.0, len);
        }
        result
    }

    /// Installs the store tracker. Call it before the first store; a region
    /// takes one tracker for its whole life (`Err` returns the one offered
    /// when a tracker is already set).
    pub fn set_tracker(
        &self,
        tracker: Arc<dyn StoreTracker>,
    ) -> std::result::Result<(), Arc<dyn StoreTracker>> {
        self.tracker.set(tracker)
    }

    /// Copies `[offset, offset + buffer.len())` into `buffer` although other
    /// threads may be storing to it meanwhile. The copy may then mix old and
    /// new bytes; the caller must learn by other means whether the range
    /// changed (the integrity layer: the page's dirty mark, set before any
    /// store). Used to checksum pages that writers may touch at any time.
    pub fn copy_racy(&self, offset: PmemOffset, buffer: &mut [u8]) {
        let len = buffer.len();
        let pointer = self.pointer(offset, len as u64);
        assert!(
            offset.0.is_multiple_of(8) && len.is_multiple_of(8),
            "racy copies are of whole aligned words"
        );
        for (index, chunk) in buffer.chunks_exact_mut(8).enumerate() {
            // Concurrent writers change bytes, never the mapping: a stale or
            // mixed value is possible and handled by the caller.
            // SAFETY: in bounds and 8-byte aligned (checked above; the base is
            // page aligned); a volatile word read is neither elided nor torn.
            let word = unsafe { std::ptr::read_volatile((pointer as *const u64).add(index)) };
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
    }

    /// Replaces the aligned word at `offset` if it still holds `expected`,
    /// without telling the tracker: for the integrity layer putting back the
    /// bytes a page's checksum already describes (a repair), which must not
    /// make the page stale. A word a writer changed meanwhile is left alone,
    /// so a repair never undoes a store. The observer still sees it.
    pub fn repair_u64(&self, offset: PmemOffset, expected: u64, new: u64) -> bool {
        let swapped = self
            .atomic(offset)
            .compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if swapped {
            if let Some(dirty) = &self.staged {
                dirty.mark(offset.0, 8);
            }
            self.observed_store(offset, new);
        }
        swapped
    }

    #[inline]
    fn atomic(&self, offset: PmemOffset) -> &AtomicU64 {
        assert!(
            offset.0.is_multiple_of(8),
            "atomic access at unaligned offset {offset}"
        );
        let pointer = self.pointer(offset, 8);
        // SAFETY: in bounds and 8-byte aligned (the base is page aligned);
        // AtomicU64 has the layout of u64, and mapped memory lives as long
        // as `self`.
        unsafe { &*(pointer as *const AtomicU64) }
    }

    /// Atomic 8-byte load (the media's unit of atomicity).
    #[inline]
    pub fn load_u64(&self, offset: PmemOffset) -> u64 {
        self.atomic(offset).load(Ordering::Acquire)
    }

    /// Atomic 8-byte store.
    #[inline]
    pub fn store_u64(&self, offset: PmemOffset, value: u64) {
        self.tracked(offset, 8, || {
            self.atomic(offset).store(value, Ordering::Release)
        });
        self.observed_store(offset, value);
    }

    /// Atomic OR, returning the previous word.
    #[inline]
    pub fn fetch_or_u64(&self, offset: PmemOffset, bits: u64) -> u64 {
        let previous = self.tracked(offset, 8, || {
            self.atomic(offset).fetch_or(bits, Ordering::AcqRel)
        });
        self.observed_store(offset, previous | bits);
        previous
    }

    /// Atomic AND, returning the previous word.
    #[inline]
    pub fn fetch_and_u64(&self, offset: PmemOffset, bits: u64) -> u64 {
        let previous = self.tracked(offset, 8, || {
            self.atomic(offset).fetch_and(bits, Ordering::AcqRel)
        });
        self.observed_store(offset, previous & bits);
        previous
    }

    /// Atomic wrapping add, returning the previous word.
    #[inline]
    pub fn fetch_add_u64(&self, offset: PmemOffset, delta: u64) -> u64 {
        let previous = self.tracked(offset, 8, || {
            self.atomic(offset).fetch_add(delta, Ordering::AcqRel)
        });
        self.observed_store(offset, previous.wrapping_add(delta));
        previous
    }

    /// Atomic compare-and-swap; `Ok(previous)` when it swapped.
    #[inline]
    pub fn compare_exchange_u64(
        &self,
        offset: PmemOffset,
        current: u64,
        new: u64,
    ) -> std::result::Result<u64, u64> {
        let result = self.tracked(offset, 8, || {
            self.atomic(offset)
                .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
        });
        if result.is_ok() {
            self.observed_store(offset, new);
        }
        result
    }

    #[inline]
    fn observed_store(&self, offset: PmemOffset, new_value: u64) {
        if let Some(observer) = &self.observer {
            observer.on_store(offset.0, &new_value.to_le_bytes());
        }
    }

    /// Writes back the cache lines of a range (no ordering: see [`Region::fence`]).
    #[inline]
    pub fn flush(&self, offset: PmemOffset, len: u64) {
        let pointer = self.pointer(offset, len);
        // SAFETY: in bounds; the instruction was checked at open.
        unsafe { flush_range(self.flush, pointer, len as usize) };
        if let Some(observer) = &self.observer {
            observer.on_flush(offset.0, len);
        }
    }

    /// Store fence: every earlier flush completes before any later store.
    #[inline]
    pub fn fence(&self) {
        store_fence();
        if let Some(observer) = &self.observer {
            observer.on_fence();
        }
    }

    /// Flush + fence: on DAX the range is power-fail durable on return.
    #[inline]
    pub fn persist(&self, offset: PmemOffset, len: u64) {
        self.flush(offset, len);
        self.fence();
    }

    /// Makes a range durable against power loss in the emulated mode
    /// (`msync(MS_SYNC)`); on DAX this is a no-op because persist already did it.
    pub fn sync(&self, offset: PmemOffset, len: u64) -> Result<()> {
        if self.mode == Mode::Dax || len == 0 {
            return Ok(());
        }
        if self.staged.is_some() {
            return self.write_out(&[(offset, len)]);
        }
        let (start, end) = self.page_span(offset, len);
        let pointer = self.pointer(PmemOffset(start), end - start);
        // SAFETY: page-aligned range inside our mapping.
        let rc = unsafe {
            libc::msync(
                pointer as *mut libc::c_void,
                (end - start) as usize,
                libc::MS_SYNC,
            )
        };
        if rc != 0 {
            return Err(Error::io(
                "syncing region file",
                &self.path,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// The file bytes a sync of `[offset, offset + len)` covers: from the
    /// start of its first page to its end, within the mapping (empty if
    /// it lies beyond).
    fn page_span(&self, offset: PmemOffset, len: u64) -> (u64, u64) {
        let start = offset.0 & !(OS_PAGE_BYTES - 1);
        (start, (offset.0 + len).min(self.len()).max(start))
    }

    /// [`Region::sync`] of several ranges (offset, length), sorted and
    /// disjoint, with one device flush for all of them: the ranges but the
    /// last are written back and waited for (`sync_file_range`, which
    /// flushes nothing), then the last is `msync`ed, which writes it, any
    /// file system metadata the file needs, and flushes the device's
    /// cache over every write that completed before. An `msync` each cost
    /// a flush each: two lanes' tails, two flushes per group commit.
    /// Every range's write is started before any is waited for, the
    /// last's too, so that the device serves them side by side: one
    /// write's latency per commit, not one per range.
    pub fn sync_ranges(&self, ranges: &[(PmemOffset, u64)]) -> Result<()> {
        let Some((&(last, last_len), rest)) = ranges.split_last() else {
            return Ok(());
        };
        if self.staged.is_some() {
            return self.write_out(ranges);
        }
        if self.mode == Mode::Emulated && !rest.is_empty() {
            let pages = |&(offset, len): &(PmemOffset, u64)| self.page_span(offset, len);
            // (An empty range would name the whole rest of the file:
            // there are none.)
            for (start, end) in ranges.iter().map(pages).filter(|(s, e)| e > s) {
                self.sync_file_range(start, end, libc::SYNC_FILE_RANGE_WRITE)?;
            }
            for (start, end) in rest.iter().map(pages).filter(|(s, e)| e > s) {
                self.sync_file_range(
                    start,
                    end,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                )?;
            }
        }
        self.sync(last, last_len)
    }

    /// [`Region::sync`] over the whole mapped region.
    pub fn sync_all(&self) -> Result<()> {
        self.sync(PmemOffset(0), self.len())
    }

    /// A staged region's sync: copies the pages of `ranges` stored to
    /// since the last sync into the file, then one `fdatasync` (the file's
    /// size and extents were settled when it grew, so that writes no
    /// metadata of its own).
    fn write_out(&self, ranges: &[(PmemOffset, u64)]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let dirty = self.staged.as_ref().expect("a staged region");
        let mut runs = Vec::new();
        {
            let _turn = dirty.lock_copying();
            for &(offset, len) in ranges {
                let (start, end) = self.page_span(offset, len);
                runs.extend(dirty.take(start, end.next_multiple_of(OS_PAGE_BYTES)));
            }
            self.write_out_hooks.after_take();
            for &(from, to) in &runs {
                let to = to.min(self.len());
                let copied = self.write_out_hooks.copy(|| {
                    self.file
                        .write_all_at(self.read(PmemOffset(from), to - from), from)
                });
                if let Err(e) = copied {
                    dirty.mark_runs(&runs);
                    return Err(Error::io("writing out staged region", &self.path, e));
                }
            }
        }
        let synced = self.write_out_hooks.sync(|| self.file.sync_data());
        synced.map_err(|e| {
            dirty.mark_runs(&runs);
            Error::io("syncing region file", &self.path, e)
        })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the reservation made in `map`; nothing
        // borrowed from the region outlives it (slices borrow `&self`).
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.reserve_bytes as usize);
        }
    }
}

/// Asks the kernel for a `MAP_SYNC` mapping of one page: success means the
/// file lives on DAX-capable persistent memory.
fn probe_map_sync(file: &File) -> std::io::Result<()> {
    // SAFETY: a fresh mapping at a kernel-chosen address, unmapped at once.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            OS_PAGE_BYTES as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
            file.as_raw_fd(),
            0,
        )
    };
    if address == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: unmapping the page mapped just above.
    unsafe { libc::munmap(address, OS_PAGE_BYTES as usize) };
    Ok(())
}

/// fsyncs a directory so that a rename or create inside it is durable.
pub fn sync_directory(path: &Path) -> std::io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: opening with a NUL-terminated path we own.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is the descriptor opened above, closed right after.
    let rc = unsafe { libc::fsync(fd) };
    let error = std::io::Error::last_os_error();
    // SAFETY: closing the descriptor we opened.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(error);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Points inside a staged region's sync (`Region::write_out`) for the
    /// tests below: a pause after the sync has taken its pages' marks (to
    /// race another sync against it), and a failed copy or `fdatasync`
    /// in place of the real one (the next call only).
    #[derive(Default)]
    pub(super) struct WriteOutHooks {
        after_take: Mutex<Option<Box<dyn FnOnce() + Send>>>,
        fail_copy: AtomicBool,
        fail_sync: AtomicBool,
    }

    impl WriteOutHooks {
        pub(super) fn after_take(&self) {
            let hook = self.after_take.lock().take();
            if let Some(hook) = hook {
                hook();
            }
        }

        pub(super) fn copy(
            &self,
            copy: impl FnOnce() -> std::io::Result<()>,
        ) -> std::io::Result<()> {
            Self::fail_or(&self.fail_copy, copy)
        }

        pub(super) fn sync(
            &self,
            sync: impl FnOnce() -> std::io::Result<()>,
        ) -> std::io::Result<()> {
            Self::fail_or(&self.fail_sync, sync)
        }

        fn fail_or(
            flag: &AtomicBool,
            real: impl FnOnce() -> std::io::Result<()>,
        ) -> std::io::Result<()> {
            if flag.swap(false, Ordering::SeqCst) {
                return Err(std::io::Error::other("injected by the test"));
            }
            real()
        }
    }

    fn emulated() -> RegionOptions {
        RegionOptions {
            mode: ModeChoice::Emulated,
            reserve_bytes: 1 << 30,
            ..RegionOptions::default()
        }
    }

    /// The file's bytes at `[offset, offset + len)`, as a reader of the
    /// file (not of the mapping) sees them.
    fn in_file(path: &Path, offset: u64, len: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0; len];
        File::open(path)
            .unwrap()
            .read_exact_at(&mut bytes, offset)
            .unwrap();
        bytes
    }

    /// A staged region's stores are in no file until a sync copies them,
    /// and a sync copies exactly what it covers: a range sync leaves the
    /// pages outside it for a later one, over growth too; what no sync
    /// copied is gone when the region is dropped (a process crash).
    #[test]
    fn a_staged_region_writes_its_file_only_at_a_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("staged");
        let page = OS_PAGE_BYTES;
        let options = RegionOptions {
            staged: true,
            fine_writeback: true,
            ..emulated()
        };
        let region = Region::create(&path, 4 * page, options.clone()).unwrap();
        assert!(region.is_staged());
        region.write(PmemOffset(100), b"first");
        region.store_u64(PmemOffset(2 * page), 7);
        assert_eq!(region.read(PmemOffset(100), 5), b"first");
        assert_eq!(in_file(&path, 100, 5), [0; 5], "stored, not yet synced");
        region.sync(PmemOffset(100), 5).unwrap();
        assert_eq!(in_file(&path, 100, 5), b"first");
        assert_eq!(in_file(&path, 2 * page, 8), [0; 8], "outside the sync");
        region.grow_to(8 * page).unwrap();
        region.write(PmemOffset(6 * page + 8), b"grown");
        region.sync_ranges(&[(PmemOffset(6 * page), 16)]).unwrap();
        assert_eq!(in_file(&path, 6 * page + 8, 5), b"grown");
        assert_eq!(in_file(&path, 2 * page, 8), [0; 8]);
        region.sync_all().unwrap();
        assert_eq!(in_file(&path, 2 * page, 8), 7u64.to_le_bytes());
        region.fetch_or_u64(PmemOffset(2 * page), 0b1000);
        region.write(PmemOffset(100), b"FIRST");
        region.sync_all().unwrap();
        region.write(PmemOffset(3 * page), b"never synced");
        drop(region);
        let reopened = Region::open(&path, options).unwrap();
        assert_eq!(reopened.read(PmemOffset(100), 5), b"FIRST");
        assert_eq!(reopened.load_u64(PmemOffset(2 * page)), 15);
        assert_eq!(reopened.read(PmemOffset(6 * page + 8), 5), b"grown");
        assert_eq!(reopened.read(PmemOffset(3 * page), 12), [0; 12]);
    }

    fn staged_region(path: &Path, len: u64) -> Region {
        let options = RegionOptions {
            staged: true,
            ..emulated()
        };
        Region::create(path, len, options).unwrap()
    }

    /// Writes `bytes` at `offset` of the file itself (not the mapping):
    /// what the page cache may hold after a failed write-back.
    fn clobber_file(path: &Path, offset: u64, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .write_all_at(bytes, offset)
            .unwrap();
    }

    /// A staged sync whose copy or `fdatasync` fails puts back the marks
    /// it took: the next sync writes those pages again. After a failed
    /// `fdatasync` the kernel may have dropped the pages it could not
    /// write (here: the file holds other bytes), so they must be copied
    /// once more, not taken as written.
    #[test]
    fn a_failed_staged_sync_leaves_its_pages_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("staged");
        let region = staged_region(&path, 4 * OS_PAGE_BYTES);
        region.write(PmemOffset(100), b"stored");
        region
            .write_out_hooks
            .fail_copy
            .store(true, Ordering::SeqCst);
        let error = region.sync(PmemOffset(100), 6).unwrap_err();
        assert!(error.to_string().contains("injected"), "{error}");
        assert_eq!(in_file(&path, 100, 6), [0; 6], "the copy failed");
        region.sync(PmemOffset(100), 6).unwrap();
        assert_eq!(in_file(&path, 100, 6), b"stored");

        region.write(PmemOffset(OS_PAGE_BYTES + 8), b"second");
        region
            .write_out_hooks
            .fail_sync
            .store(true, Ordering::SeqCst);
        assert!(region.sync_all().is_err());
        clobber_file(&path, OS_PAGE_BYTES + 8, b"LOSTPG");
        region.sync_all().unwrap();
        assert_eq!(in_file(&path, OS_PAGE_BYTES + 8, 6), b"second");
    }

    /// Two syncs of one page: the second, finding its mark taken by the
    /// first, returns only after the first has copied the page (the copy
    /// turn, `DirtyPages::lock_copying`), so its `fdatasync` covers it. A
    /// group commit racing a retirement round must not return before the
    /// page is in the file.
    #[test]
    fn a_sync_that_finds_its_pages_taken_waits_for_their_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("staged");
        let region = Arc::new(staged_region(&path, 4 * OS_PAGE_BYTES));
        region.write(PmemOffset(64), b"raced");
        let (taken_tx, taken_rx) = std::sync::mpsc::channel();
        *region.write_out_hooks.after_take.lock() = Some(Box::new(move || {
            taken_tx.send(()).unwrap();
            // The first sync holds the page's mark, uncopied, a while.
            std::thread::sleep(std::time::Duration::from_millis(300));
        }));
        let first = {
            let region = Arc::clone(&region);
            std::thread::spawn(move || region.sync(PmemOffset(64), 5).unwrap())
        };
        taken_rx.recv().unwrap();
        region.sync(PmemOffset(64), 5).unwrap();
        assert_eq!(
            in_file(&path, 64, 5),
            b"raced",
            "the second sync returned before the page was copied"
        );
        first.join().unwrap();
    }

    /// Not staged, a store is in the file (the page cache) at once.
    #[test]
    fn a_shared_region_writes_its_file_at_each_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared");
        let region = Region::create(&path, 4 * OS_PAGE_BYTES, emulated()).unwrap();
        assert!(!region.is_staged());
        region.write(PmemOffset(100), b"first");
        assert_eq!(in_file(&path, 100, 5), b"first");
    }

    /// Whether any extent of the file at `path` is reserved but unwritten
    /// (`FS_IOC_FIEMAP`); `None` where the file system cannot tell.
    fn has_unwritten_extents(path: &Path) -> Option<bool> {
        const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
        const FIEMAP_EXTENT_LAST: u32 = 0x1;
        const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
        const EXTENTS: usize = 64;
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Extent {
            logical: u64,
            physical: u64,
            length: u64,
            reserved64: [u64; 2],
            flags: u32,
            reserved: [u32; 3],
        }
        #[repr(C)]
        struct Fiemap {
            start: u64,
            length: u64,
            flags: u32,
            mapped_extents: u32,
            extent_count: u32,
            reserved: u32,
            extents: [Extent; EXTENTS],
        }
        let file = File::open(path).unwrap();
        let mut start = 0;
        loop {
            let mut map = Fiemap {
                start,
                length: u64::MAX - start,
                flags: 0,
                mapped_extents: 0,
                extent_count: EXTENTS as u32,
                reserved: 0,
                extents: [Extent::default(); EXTENTS],
            };
            // SAFETY: FS_IOC_FIEMAP on our own descriptor with a request
            // laid out as the kernel's `struct fiemap` and room for
            // `extent_count` extents after it.
            let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &mut map) };
            if rc != 0 {
                return None;
            }
            let found = &map.extents[..map.mapped_extents as usize];
            if found.iter().any(|e| e.flags & FIEMAP_EXTENT_UNWRITTEN != 0) {
                return Some(true);
            }
            match found.last() {
                Some(last) if last.flags & FIEMAP_EXTENT_LAST == 0 => {
                    start = last.logical + last.length
                }
                _ => return Some(false),
            }
        }
    }

    #[test]
    fn fine_writeback_grows_into_written_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let reserved = dir.path().join("reserved.pmem");
        let written = dir.path().join("written.pmem");
        let coarse = Region::create(&reserved, 1 << 20, emulated()).unwrap();
        coarse.grow_to(2 << 20).unwrap();
        let fine_options = RegionOptions {
            fine_writeback: true,
            ..emulated()
        };
        let fine = Region::create(&written, 1 << 20, fine_options).unwrap();
        fine.grow_to(2 << 20).unwrap();
        let control = has_unwritten_extents(&reserved);
        drop(coarse);
        // The zeros' writeback began at the growth; this waits for it.
        fine.sync_all().unwrap();
        match control {
            None => eprintln!("this file system does not report extents: not checked"),
            Some(false) => eprintln!("posix_fallocate wrote its blocks here: not checked"),
            Some(true) => assert_eq!(
                has_unwritten_extents(&written),
                Some(false),
                "a fine-writeback region grew into unwritten extents"
            ),
        }
        assert_eq!(fine.read(PmemOffset(0), 8), [0u8; 8]);
        assert_eq!(fine.read(PmemOffset((2 << 20) - 8), 8), [0u8; 8]);
    }

    #[test]
    fn create_write_reopen_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.pmem");
        {
            let region = Region::create(&path, 8192, emulated()).unwrap();
            assert_eq!(region.mode(), Mode::Emulated);
            region.write(PmemOffset(100), b"hello");
            region.store_u64(PmemOffset(4096), 42);
            region.persist(PmemOffset(100), 5);
            region.sync_all().unwrap();
        }
        let region = Region::open(&path, emulated()).unwrap();
        assert_eq!(region.len(), 8192);
        assert_eq!(region.read(PmemOffset(100), 5), b"hello");
        assert_eq!(region.load_u64(PmemOffset(4096)), 42);
    }

    #[test]
    fn growing_keeps_addresses_and_contents() {
        let dir = tempfile::tempdir().unwrap();
        let region = Region::create(&dir.path().join("g.pmem"), 4096, emulated()).unwrap();
        region.write(PmemOffset(10), b"abc");
        let before = region.read(PmemOffset(10), 3).as_ptr();
        region.grow_to(1 << 20).unwrap();
        assert_eq!(region.len(), 1 << 20);
        assert_eq!(region.read(PmemOffset(10), 3).as_ptr(), before);
        region.write(PmemOffset((1 << 20) - 3), b"end");
        assert_eq!(region.read(PmemOffset(10), 3), b"abc");
        assert_eq!(std::fs::metadata(region.path()).unwrap().len(), 1 << 20);
    }

    #[test]
    fn quota_makes_growth_fail_cleanly_and_can_be_lifted() {
        let dir = tempfile::tempdir().unwrap();
        let options = RegionOptions {
            file_limit_bytes: Some(8192),
            ..emulated()
        };
        let region = Region::create(&dir.path().join("q.pmem"), 8192, options).unwrap();
        region.write(PmemOffset(0), b"kept");
        let error = region.grow_to(16384).unwrap_err();
        assert!(matches!(error, Error::NoSpace { .. }), "{error}");
        assert_eq!(region.len(), 8192);
        assert_eq!(region.read(PmemOffset(0), 4), b"kept");
        region.set_file_limit(None);
        region.grow_to(16384).unwrap();
        assert_eq!(region.len(), 16384);
    }

    #[test]
    fn growth_past_the_reservation_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let options = RegionOptions {
            reserve_bytes: 8192,
            ..emulated()
        };
        let region = Region::create(&dir.path().join("x.pmem"), 4096, options).unwrap();
        let error = region.grow_to(1 << 20).unwrap_err();
        assert!(
            matches!(error, Error::ReservationExhausted { .. }),
            "{error}"
        );
    }

    #[test]
    fn unaligned_sizes_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let error = Region::create(&dir.path().join("u.pmem"), 1000, emulated()).unwrap_err();
        assert!(matches!(error, Error::Unaligned { .. }));
    }

    #[test]
    fn atomics_and_flushes_work_on_this_cpu() {
        let dir = tempfile::tempdir().unwrap();
        let options = RegionOptions {
            flush: Some(FlushInstruction::best_available()),
            ..emulated()
        };
        let region = Region::create(&dir.path().join("a.pmem"), 4096, options).unwrap();
        assert_eq!(region.fetch_or_u64(PmemOffset(8), 0b100), 0);
        assert_eq!(region.fetch_add_u64(PmemOffset(8), 1), 0b100);
        assert_eq!(region.compare_exchange_u64(PmemOffset(8), 5, 9), Ok(5));
        assert_eq!(region.compare_exchange_u64(PmemOffset(8), 5, 1), Err(9));
        region.persist(PmemOffset(0), 4096);
        assert_eq!(region.load_u64(PmemOffset(8)), 9);
    }

    #[test]
    fn dax_is_refused_on_a_regular_file_system_when_forced() {
        // /tmp is not DAX on development machines; forcing DAX must fail
        // with a clear error instead of silently emulating.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.pmem");
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        let options = RegionOptions {
            mode: ModeChoice::Dax,
            ..emulated()
        };
        match Region::open(&path, options) {
            Err(Error::DaxUnavailable { .. }) => {}
            Ok(region) => assert_eq!(region.mode(), Mode::Dax),
            Err(other) => panic!("unexpected error {other}"),
        }
    }

    struct Counter(
        std::sync::atomic::AtomicU64,
        std::sync::atomic::AtomicU64,
        std::sync::atomic::AtomicU64,
    );
    impl PersistObserver for Counter {
        fn on_store(&self, _: u64, _: &[u8]) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn on_flush(&self, _: u64, _: u64) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
        fn on_fence(&self) {
            self.2.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn observer_sees_every_store_flush_and_fence() {
        let dir = tempfile::tempdir().unwrap();
        let counter = Arc::new(Counter(
            Default::default(),
            Default::default(),
            Default::default(),
        ));
        let options = RegionOptions {
            observer: Some(counter.clone()),
            ..emulated()
        };
        let region = Region::create(&dir.path().join("o.pmem"), 4096, options).unwrap();
        region.write(PmemOffset(0), b"x");
        region.store_u64(PmemOffset(8), 1);
        region.fetch_or_u64(PmemOffset(8), 2);
        region.persist(PmemOffset(0), 16);
        assert_eq!(counter.0.load(Ordering::Relaxed), 3);
        assert_eq!(counter.1.load(Ordering::Relaxed), 1);
        assert_eq!(counter.2.load(Ordering::Relaxed), 1);
    }
}
