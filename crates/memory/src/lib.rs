//! The process's memory. Accounting: how many bytes the process holds
//! through its allocator, as Redis's `zmalloc_used_memory` counts them; and
//! [`disable_huge_pages`], Redis's `disable-thp`.
//!
//! A binary installs [`Counting`] around its allocator:
//!
//! ```text
//! #[global_allocator]
//! static ALLOCATOR: engram_memory::Counting<mimalloc::MiMalloc> =
//!     engram_memory::Counting(mimalloc::MiMalloc);
//! ```
//!
//! and [`allocated`] then answers the bytes allocated and not yet freed
//! (requested sizes, not the allocator's rounding or its cached free
//! pages, which is what makes it fall at once when data is freed, where
//! the resident size lags). Without it installed (tests, embedders),
//! [`allocated`] is `None`.
//!
//! The count is one relaxed atomic add per allocation and per free.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

static ALLOCATED: AtomicIsize = AtomicIsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// A global allocator that counts what `A` hands out.
pub struct Counting<A>(pub A);

impl<A> Counting<A> {
    fn add(&self, bytes: usize) {
        ALLOCATED.fetch_add(bytes as isize, Ordering::Relaxed);
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
    }

    fn sub(&self, bytes: usize) {
        ALLOCATED.fetch_sub(bytes as isize, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `A` with the caller's arguments
// unchanged, so `A`'s guarantees (and the caller's obligations) carry over
// exactly; the counting touches only an atomic and never the memory.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size).
        let ptr = unsafe { self.0.alloc(layout) };
        if !ptr.is_null() {
            self.add(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { self.0.alloc_zeroed(layout) };
        if !ptr.is_null() {
            self.add(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller passes a block this allocator (hence `A`)
        // returned, with its layout.
        unsafe { self.0.dealloc(ptr, layout) };
        self.sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a block of `A` with its layout and a
        // valid new size.
        let new = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            self.add(new_size);
            self.sub(layout.size());
        }
        new
    }
}

/// Bytes allocated through [`Counting`] and not yet freed, or `None` when
/// the process does not use it.
pub fn allocated() -> Option<u64> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| ALLOCATED.load(Ordering::Relaxed).max(0) as u64)
}

/// No transparent huge pages for this process's memory from now on
/// (`PR_SET_THP_DISABLE`), whatever the allocator asks for: Redis's
/// `disable-thp yes`. mimalloc asks for them (`MADV_HUGEPAGE`), so on a
/// kernel whose THP mode is `madvise` (the usual one) memory that grows
/// (a list, a queue, a checkpoint's working set) is faulted in 2 MiB
/// pages, each zeroed whole on its first touch (on the development VM,
/// 43% of the server's CPU under a growing list's pushes). Pages already
/// faulted in stay as they are.
pub fn disable_huge_pages() -> std::io::Result<()> {
    // SAFETY: a prctl that sets a flag of this process; no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this process's memory may be backed by transparent huge pages
/// now: the kernel's `THP_enabled` line for it (0 once
/// [`disable_huge_pages`] ran). None where the kernel does not say.
pub fn huge_pages_allowed() -> Option<bool> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let value = status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))?;
    Some(value.trim() == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static TEST_ALLOCATOR: Counting<std::alloc::System> = Counting(std::alloc::System);

    #[test]
    fn counts_what_is_held() {
        let before = allocated().expect("installed in this test binary");
        let block = vec![0u8; 10 << 20];
        let during = allocated().unwrap();
        // Other test threads allocate too, but not 10 MiB at once.
        assert!(
            during >= before + (10 << 20) - (1 << 20),
            "{before} {during}"
        );
        let mut grown = block;
        grown.reserve_exact(30 << 20);
        assert!(allocated().unwrap() >= before + (35 << 20));
        drop(grown);
        assert!(allocated().unwrap() < before + (1 << 20));
    }

    #[test]
    fn huge_pages_once_disabled_are_reported_off() {
        // (The other test here does not care: the flag is process-wide.)
        disable_huge_pages().expect("PR_SET_THP_DISABLE on Linux 3.5 and later");
        assert_eq!(huge_pages_allowed(), Some(false));
    }
}
