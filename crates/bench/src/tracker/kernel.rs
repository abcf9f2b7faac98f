//! The kernel's write tracking: userfaultfd write protection in asynchronous
//! mode, read and re-armed with the `PAGEMAP_SCAN` ioctl (Linux 6.7+).
//!
//! A range registered with `UFFDIO_REGISTER_MODE_WP` on a userfaultfd whose
//! API handshake enabled `UFFD_FEATURE_WP_ASYNC` is write-protected page by
//! page (`UFFDIO_WRITEPROTECT`). The first store to a protected page faults,
//! and the kernel itself resolves the fault (no handler thread: that is the
//! "async"): it drops the page's protection and lets the store go on. The
//! page is then "written" (`PAGE_IS_WRITTEN`). `PAGEMAP_SCAN` on
//! `/proc/self/pagemap` with `PM_SCAN_WP_MATCHING` returns the written pages
//! of a range and protects them again, each under its page-table lock: the
//! paper's `getDirtyBits` + `clearDirtyBits` (4.3), atomic per page, so no
//! store slips between the read and the clear (the race of its Figure 4(a)),
//! and no writer gate is needed. `PM_SCAN_CHECK_WPASYNC` makes the scan fail
//! rather than report pages of a range that is not tracked this way.
//!
//! What the kernel does not give: any of this surviving the process. The
//! protection bits live in page tables; when the process dies, or the
//! machine loses power, nothing records which pages were written.
//!
//! The structures and constants below are transcribed from the kernel's
//! uapi headers (`linux/userfaultfd.h`, `linux/fs.h`,
//! `asm-generic/ioctl.h`): the C library headers on the machines we build on
//! predate `UFFD_FEATURE_WP_ASYNC` and `PAGEMAP_SCAN`.

// The syscalls and ioctls need `unsafe`; each block says why it is sound.
// The crate root denies unsafe code elsewhere.
#![allow(unsafe_code)]

use std::fs::File;
use std::mem::size_of;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::memory::PAGE_BYTES;

/// `_IOWR(type, nr, size)` of asm-generic/ioctl.h: direction in bits 30-31
/// (`_IOC_READ | _IOC_WRITE` = 3), argument size in bits 16-29, type in
/// bits 8-15, number in bits 0-7.
const fn iowr(kind: u8, number: u8, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | ((kind as u64) << 8) | number as u64
}

// ---- linux/userfaultfd.h ----

/// `UFFD_API`: the API version `UFFDIO_API` must be asked for.
const UFFD_API: u64 = 0xAA;
/// `UFFDIO`: the ioctl type of every userfaultfd ioctl.
const UFFDIO: u8 = 0xAA;
/// `UFFD_USER_MODE_ONLY` (a `userfaultfd(2)` flag): handle only faults
/// from user mode. Lets a process without CAP_SYS_PTRACE open one when
/// `vm.unprivileged_userfaultfd` is 0; async write protection resolves
/// faults in the kernel anyway.
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
/// `UFFDIO_REGISTER_MODE_WP`: track writes to the range.
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
/// `UFFDIO_WRITEPROTECT_MODE_WP`: protect (rather than unprotect).
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;

/// `UFFD_FEATURE_*` bits of `struct uffdio_api.features`, by name (for the
/// report), in header order.
const FEATURE_NAMES: [(u32, &str); 17] = [
    (0, "PAGEFAULT_FLAG_WP"),
    (1, "EVENT_FORK"),
    (2, "EVENT_REMAP"),
    (3, "EVENT_REMOVE"),
    (4, "MISSING_HUGETLBFS"),
    (5, "MISSING_SHMEM"),
    (6, "EVENT_UNMAP"),
    (7, "SIGBUS"),
    (8, "THREAD_ID"),
    (9, "MINOR_HUGETLBFS"),
    (10, "MINOR_SHMEM"),
    (11, "EXACT_ADDRESS"),
    (12, "WP_HUGETLBFS_SHMEM"),
    (13, "WP_UNPOPULATED"),
    (14, "POISON"),
    (15, "WP_ASYNC"),
    (16, "MOVE"),
];
/// `UFFD_FEATURE_WP_HUGETLBFS_SHMEM`: write protection of shmem/hugetlbfs.
const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
/// `UFFD_FEATURE_WP_UNPOPULATED`: protecting a range also protects pages
/// not yet faulted in (anonymous memory; file memory always is).
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
/// `UFFD_FEATURE_WP_ASYNC` (Linux 6.7): the kernel resolves write-protect
/// faults itself, leaving the page "written".
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;

/// `struct uffdio_api`.
#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

/// `struct uffdio_range`.
#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

/// `struct uffdio_register`.
#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    /// Out: the ioctls the range supports.
    ioctls: u64,
}

/// `struct uffdio_writeprotect`.
#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `UFFDIO_API`: `_IOWR(UFFDIO, _UFFDIO_API = 0x3F, struct uffdio_api)`.
const UFFDIO_API: u64 = iowr(UFFDIO, 0x3F, size_of::<UffdioApi>());
/// `UFFDIO_REGISTER`: `_IOWR(UFFDIO, _UFFDIO_REGISTER = 0x00, ...)`.
const UFFDIO_REGISTER: u64 = iowr(UFFDIO, 0x00, size_of::<UffdioRegister>());
/// `UFFDIO_WRITEPROTECT`: `_IOWR(UFFDIO, _UFFDIO_WRITEPROTECT = 0x06, ...)`.
const UFFDIO_WRITEPROTECT: u64 = iowr(UFFDIO, 0x06, size_of::<UffdioWriteprotect>());

// ---- linux/fs.h ----

/// `PAGE_IS_WRITTEN`: written since last write-protected.
const PAGE_IS_WRITTEN: u64 = 1 << 1;
/// `PM_SCAN_WP_MATCHING`: write-protect the pages the scan matches.
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
/// `PM_SCAN_CHECK_WPASYNC`: fail on a page without async write protection.
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;

/// `struct page_region`: pages `[start, end)` (addresses) sharing the
/// categories reported.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `struct pm_scan_arg`.
#[repr(C)]
struct PmScanArg {
    /// `sizeof(struct pm_scan_arg)`: the kernel's version check.
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    /// Out: where the walk stopped (`end` when it covered the range).
    walk_end: u64,
    /// Address of the `page_region` array the kernel fills.
    vec: u64,
    vec_len: u64,
    /// At most this many pages reported (0: no limit).
    max_pages: u64,
    category_inverted: u64,
    /// A page matches only if all these categories are set.
    category_mask: u64,
    category_anyof_mask: u64,
    /// Categories reported in each `page_region`.
    return_mask: u64,
}

/// `PAGEMAP_SCAN`: `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = iowr(b'f', 16, size_of::<PmScanArg>());

// The layouts and request numbers, against the values the headers produce.
const _: () = assert!(size_of::<UffdioApi>() == 24);
const _: () = assert!(size_of::<UffdioRegister>() == 32);
const _: () = assert!(size_of::<UffdioWriteprotect>() == 24);
const _: () = assert!(size_of::<PageRegion>() == 24);
const _: () = assert!(size_of::<PmScanArg>() == 96);
const _: () = assert!(UFFDIO_API == 0xC018_AA3F);
const _: () = assert!(UFFDIO_REGISTER == 0xC020_AA00);
const _: () = assert!(UFFDIO_WRITEPROTECT == 0xC018_AA06);
const _: () = assert!(PAGEMAP_SCAN == 0xC060_6610);

/// Page regions fetched per `PAGEMAP_SCAN` call; a scan that finds more
/// calls again from where the kernel stopped.
const SCAN_REGIONS_PER_CALL: usize = 4096;

/// A kernel interface that refused: which step, and the errno.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelError {
    pub step: &'static str,
    pub errno: i32,
}

impl KernelError {
    fn last(step: &'static str) -> KernelError {
        KernelError {
            step,
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }
    }
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed: {} ({})",
            self.step,
            errno_name(self.errno),
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for KernelError {}

/// The symbolic name of the errnos these interfaces return.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EINVAL => "EINVAL",
        libc::ENOMEM => "ENOMEM",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTTY => "ENOTTY",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EACCES => "EACCES",
        libc::EAGAIN => "EAGAIN",
        libc::ESRCH => "ESRCH",
        other => return format!("errno {other}"),
    };
    name.to_string()
}

/// The names of the `UFFD_FEATURE_*` bits set in `features`.
pub fn feature_names(features: u64) -> Vec<String> {
    (0..64)
        .filter(|bit| features & (1u64 << bit) != 0)
        .map(|bit| {
            FEATURE_NAMES
                .iter()
                .find(|(known, _)| *known == bit)
                .map_or_else(|| format!("bit {bit}"), |(_, name)| name.to_string())
        })
        .collect()
}

fn open_userfaultfd() -> Result<OwnedFd, KernelError> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY;
    // SAFETY: userfaultfd(2) takes only flags (no memory) and returns a new
    // descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        return Err(KernelError::last("userfaultfd(2)"));
    }
    // SAFETY: a descriptor the kernel just gave us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// The API handshake, asking for `features`; returns what the kernel
/// reports (all it supports, when `features` is 0).
fn handshake(uffd: &OwnedFd, features: u64) -> Result<u64, KernelError> {
    let mut api = UffdioApi {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes one `struct uffdio_api`, which
    // `api` is (repr(C), the header's three u64 fields), alive and
    // exclusively borrowed across the call.
    let rc = unsafe {
        libc::ioctl(
            uffd.as_raw_fd(),
            UFFDIO_API as libc::Ioctl,
            &mut api as *mut UffdioApi,
        )
    };
    if rc != 0 {
        return Err(KernelError::last("UFFDIO_API"));
    }
    Ok(api.features)
}

/// Every `UFFD_FEATURE_*` this kernel offers (a handshake asking for none
/// reports them all, on a throw-away descriptor: the handshake is once per
/// descriptor).
pub fn offered_features() -> Result<u64, KernelError> {
    let uffd = open_userfaultfd()?;
    handshake(&uffd, 0)
}

/// Asynchronous write tracking of one range, and the scanner that collects
/// and re-protects its written pages. Dropping it closes the userfaultfd,
/// which unregisters the range.
pub struct WriteTracker {
    uffd: OwnedFd,
    pagemap: File,
    start: u64,
    len: u64,
    regions: Vec<PageRegion>,
}

/// What one collection found.
#[derive(Clone, Copy, Debug, Default)]
pub struct Collected {
    pub pages: u64,
    pub ioctl_calls: u64,
}

impl WriteTracker {
    /// Registers `[start, start + len)` (page aligned; a mapping the caller
    /// keeps for the tracker's whole life) for asynchronous write tracking.
    /// Nothing is protected yet: call [`WriteTracker::protect_all`].
    pub fn register(start: u64, len: u64) -> Result<WriteTracker, KernelError> {
        assert!(start.is_multiple_of(PAGE_BYTES) && len.is_multiple_of(PAGE_BYTES) && len > 0);
        let offered = offered_features()?;
        if offered & UFFD_FEATURE_WP_ASYNC == 0 {
            return Err(KernelError {
                step: "UFFDIO_API (UFFD_FEATURE_WP_ASYNC not offered)",
                errno: libc::EOPNOTSUPP,
            });
        }
        // WP_ASYNC is what we need. The other two widen where protection
        // applies (shmem, pages not faulted in); ask for them when offered.
        let wanted = UFFD_FEATURE_WP_ASYNC
            | offered & (UFFD_FEATURE_WP_UNPOPULATED | UFFD_FEATURE_WP_HUGETLBFS_SHMEM);
        let uffd = open_userfaultfd()?;
        // A kernel that refuses a requested feature fails the handshake, so
        // past this line faults in the range never wait for a handler.
        handshake(&uffd, wanted)?;
        let mut register = UffdioRegister {
            range: UffdioRange { start, len },
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        // With WP_ASYNC enabled (the handshake above succeeded), a protected
        // page's fault is resolved by the kernel: stores still complete.
        // SAFETY: UFFDIO_REGISTER reads and writes one live `uffdio_register`
        // (`register`) and changes no memory contents.
        let rc = unsafe {
            libc::ioctl(
                uffd.as_raw_fd(),
                UFFDIO_REGISTER as libc::Ioctl,
                &mut register as *mut UffdioRegister,
            )
        };
        if rc != 0 {
            return Err(KernelError::last("UFFDIO_REGISTER (MODE_WP)"));
        }
        let pagemap = File::open("/proc/self/pagemap").map_err(|error| KernelError {
            step: "open /proc/self/pagemap",
            errno: error.raw_os_error().unwrap_or(0),
        })?;
        Ok(WriteTracker {
            uffd,
            pagemap,
            start,
            len,
            regions: vec![PageRegion::default(); SCAN_REGIONS_PER_CALL],
        })
    }

    pub fn pages(&self) -> u64 {
        self.len / PAGE_BYTES
    }

    /// Write-protects the whole range: every page counts as not written.
    pub fn protect_all(&self) -> Result<(), KernelError> {
        let mut protect = UffdioWriteprotect {
            range: UffdioRange {
                start: self.start,
                len: self.len,
            },
            mode: UFFDIO_WRITEPROTECT_MODE_WP,
        };
        // SAFETY: UFFDIO_WRITEPROTECT reads one `struct uffdio_writeprotect`,
        // which `protect` is. It changes page protection inside our
        // registered range only; stores still complete (async mode).
        let rc = unsafe {
            libc::ioctl(
                self.uffd.as_raw_fd(),
                UFFDIO_WRITEPROTECT as libc::Ioctl,
                &mut protect as *mut UffdioWriteprotect,
            )
        };
        if rc != 0 {
            return Err(KernelError::last("UFFDIO_WRITEPROTECT"));
        }
        Ok(())
    }

    /// Fills `written` with the pages (numbers from the range's start, as
    /// ascending ranges) written since they were last protected, and
    /// protects them again.
    pub fn collect_written(
        &mut self,
        written: &mut Vec<Range<u64>>,
    ) -> Result<Collected, KernelError> {
        written.clear();
        let end = self.start + self.len;
        let mut cursor = self.start;
        let mut collected = Collected::default();
        while cursor < end {
            let mut arg = PmScanArg {
                size: size_of::<PmScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                start: cursor,
                end,
                walk_end: 0,
                vec: self.regions.as_mut_ptr() as u64,
                vec_len: self.regions.len() as u64,
                max_pages: 0,
                category_inverted: 0,
                category_mask: PAGE_IS_WRITTEN,
                category_anyof_mask: 0,
                return_mask: PAGE_IS_WRITTEN,
            };
            // The protection it changes is inside our registered range only
            // (CHECK_WPASYNC refuses any other); stores there still complete.
            // SAFETY: PAGEMAP_SCAN reads `arg`, writes its `walk_end` and at
            // most `vec_len` repr(C) `page_region`s into `self.regions`
            // (that many entries, exclusively borrowed across the call).
            let found = unsafe {
                libc::ioctl(
                    self.pagemap.as_raw_fd(),
                    PAGEMAP_SCAN as libc::Ioctl,
                    &mut arg as *mut PmScanArg,
                )
            };
            if found < 0 {
                return Err(KernelError::last("PAGEMAP_SCAN"));
            }
            collected.ioctl_calls += 1;
            for region in &self.regions[..found as usize] {
                let pages = (region.start - self.start) / PAGE_BYTES
                    ..(region.end - self.start) / PAGE_BYTES;
                collected.pages += pages.end - pages.start;
                match written.last_mut() {
                    // A run split between two calls: one range again.
                    Some(last) if last.end == pages.start => last.end = pages.end,
                    _ => written.push(pages),
                }
            }
            if arg.walk_end <= cursor {
                // No progress: the kernel stopped where it started.
                return Err(KernelError {
                    step: "PAGEMAP_SCAN (walk made no progress)",
                    errno: libc::EAGAIN,
                });
            }
            cursor = arg.walk_end;
        }
        Ok(collected)
    }
}
