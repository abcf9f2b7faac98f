//! Which memory the kernel tracker works on here, found by trying: for each
//! kind of memory, a small mapping is registered, protected, written and
//! scanned, and what the scans report is checked against what was written.
//!
//! Two further checks ask whether a write stays known across what the
//! kernel does to file pages behind our back: writeback (`msync`, which
//! write-protects the page-table entry for the kernel's own dirty
//! tracking) and reclaim (`MADV_PAGEOUT` after writeback, which removes the
//! entry altogether). Both matter for Engram's emulated mode, where the
//! data is page cache.

// Scans report page ranges; a one-range vector is a result, not a mistake.
#![allow(clippy::single_range_in_vec_init)]

use std::ops::Range;
use std::path::Path;

use serde::Serialize;

use super::kernel::{errno_name, WriteTracker};
use super::memory::{file_system_name, MapOptions, Mapping, MemoryKind, PAGE_BYTES};

/// Pages in a probe mapping.
const PROBE_PAGES: u64 = 64;

#[derive(Clone, Debug, Serialize)]
pub struct Support {
    pub memory: MemoryKind,
    /// The file system the memory's file is on (file and tmpfs kinds).
    pub file_system: Option<String>,
    /// Registration, protection and the write-tracking check all passed:
    /// the kernel tracker is measured on this memory.
    pub supported: bool,
    /// When not: the step that failed and why.
    pub reason: Option<String>,
    /// The errno of that step, by name.
    pub errno: Option<String>,
    /// Writes to pages 0, 5, 6 are reported as exactly those pages; a second
    /// scan reports nothing; page 6 written again is reported alone.
    pub tracks_writes: Option<bool>,
    /// A written page written back with `msync` is still reported written.
    pub written_survives_writeback: Option<bool>,
    /// A written page whose page-table entry reclaim removed (written back,
    /// then `MADV_PAGEOUT`) is still reported written. `None` when the
    /// entry could not be removed.
    pub written_survives_reclaim: Option<bool>,
    /// That evicted page, once faulted back in by a read, is reported
    /// written (a false positive, but the change is not lost for good).
    pub reclaimed_reported_after_refault: Option<bool>,
    pub notes: Vec<String>,
}

impl Support {
    /// Not probed: the memory could not be had at all.
    pub fn refused(memory: MemoryKind, reason: String) -> Support {
        let mut support = Support::new(memory, None);
        support.reason = Some(reason);
        support
    }

    fn new(memory: MemoryKind, file_system: Option<String>) -> Support {
        Support {
            memory,
            file_system,
            supported: false,
            reason: None,
            errno: None,
            tracks_writes: None,
            written_survives_writeback: None,
            written_survives_reclaim: None,
            reclaimed_reported_after_refault: None,
            notes: Vec::new(),
        }
    }
}

/// Creates `bytes` of `memory`: under `dir` for a file, `shm_dir` for tmpfs.
pub fn create_memory(
    memory: MemoryKind,
    dir: &Path,
    shm_dir: &Path,
    name: &str,
    bytes: u64,
    options: MapOptions,
) -> std::io::Result<Mapping> {
    match memory {
        MemoryKind::File => Mapping::create_file(&dir.join(name), bytes, options),
        MemoryKind::Tmpfs => Mapping::create_file(&shm_dir.join(name), bytes, options),
        MemoryKind::Memfd => Mapping::memfd(bytes, options),
        MemoryKind::Anon => Mapping::anonymous(bytes, options),
    }
}

/// Probes `memory` (files go in `dir` or `shm_dir`, and are removed).
pub fn probe(memory: MemoryKind, dir: &Path, shm_dir: &Path) -> Support {
    let file_system = match memory {
        MemoryKind::File => file_system_name(dir).ok(),
        MemoryKind::Tmpfs => file_system_name(shm_dir).ok(),
        MemoryKind::Memfd | MemoryKind::Anon => None,
    };
    let mut support = Support::new(memory, file_system);
    let name = format!("probe-{}", memory.name());
    let mapping = match create_memory(
        memory,
        dir,
        shm_dir,
        &name,
        PROBE_PAGES * PAGE_BYTES,
        MapOptions::POPULATED,
    ) {
        Ok(mapping) => mapping,
        Err(error) => {
            support.reason = Some(format!("creating the mapping failed: {error}"));
            support.errno = error.raw_os_error().map(errno_name);
            return support;
        }
    };
    check(&mut support, &mapping);
    drop(mapping);
    match memory {
        MemoryKind::File => {
            let _ = std::fs::remove_file(dir.join(&name));
        }
        MemoryKind::Tmpfs => {
            let _ = std::fs::remove_file(shm_dir.join(&name));
        }
        MemoryKind::Memfd | MemoryKind::Anon => {}
    }
    support
}

fn check(support: &mut Support, mapping: &Mapping) {
    let mut tracker = match WriteTracker::register(mapping.address(), mapping.len()) {
        Ok(tracker) => tracker,
        Err(error) => {
            support.errno = Some(errno_name(error.errno));
            support.reason = Some(error.to_string());
            return;
        }
    };
    if let Err(error) = tracker.protect_all() {
        support.errno = Some(errno_name(error.errno));
        support.reason = Some(error.to_string());
        return;
    }
    let scan = |tracker: &mut WriteTracker| -> Result<Vec<Range<u64>>, String> {
        let mut written = Vec::new();
        tracker
            .collect_written(&mut written)
            .map_err(|error| error.to_string())?;
        Ok(written)
    };
    let touch = |page: u64| mapping.store_u64(page * PAGE_BYTES, page + 1);
    let steps: [(&[u64], Vec<Range<u64>>); 4] = [
        (&[], vec![]),
        (&[0, 5, 6], vec![0..1, 5..7]),
        (&[], vec![]),
        (&[6], vec![6..7]),
    ];
    for (step, (pages, expected)) in steps.into_iter().enumerate() {
        pages.iter().copied().for_each(touch);
        match scan(&mut tracker) {
            Ok(found) if found == expected => {}
            Ok(found) => {
                support.tracks_writes = Some(false);
                support.reason = Some(format!(
                    "scan {} after writing pages {pages:?} reported {found:?}, expected {expected:?}",
                    step + 1
                ));
                return;
            }
            Err(error) => {
                support.tracks_writes = Some(false);
                support.reason = Some(error);
                return;
            }
        }
    }
    support.tracks_writes = Some(true);
    support.supported = true;

    // Writeback: the kernel write-protects the entry to see the next write.
    if support.memory != MemoryKind::Anon {
        touch(9);
        let synced = mapping.sync(0, mapping.len());
        match (synced, scan(&mut tracker)) {
            (Ok(()), Ok(found)) => support.written_survives_writeback = Some(found == vec![9..10]),
            (Err(error), _) => support.notes.push(format!("msync failed: {error}")),
            (_, Err(error)) => support
                .notes
                .push(format!("scan after msync failed: {error}")),
        }
    }

    // Reclaim: written back, then evicted; the page-table entry is gone.
    let page = 12;
    touch(page);
    let at = page * PAGE_BYTES;
    if support.memory != MemoryKind::Anon {
        let _ = mapping.sync(0, mapping.len());
    }
    if let Err(error) = mapping.advise(at, PAGE_BYTES, libc::MADV_PAGEOUT) {
        support.notes.push(format!("MADV_PAGEOUT failed: {error}"));
        return;
    }
    match entry_present(mapping.address() + at) {
        Ok(false) => {}
        Ok(true) => {
            support.notes.push(match support.memory {
                MemoryKind::Anon => {
                    "MADV_PAGEOUT cannot evict anonymous memory here (no swap)".into()
                }
                _ => "MADV_PAGEOUT left the written page mapped".into(),
            });
            return;
        }
        Err(error) => {
            support
                .notes
                .push(format!("reading /proc/self/pagemap failed: {error}"));
            return;
        }
    }
    if support.memory != MemoryKind::File {
        // shmem without swap: the entry goes, the page stays in the cache.
        support.notes.push(
            "MADV_PAGEOUT removed the page-table entry (the page stays in shmem: no swap)".into(),
        );
    }
    match scan(&mut tracker) {
        Ok(found) => support.written_survives_reclaim = Some(found == vec![page..page + 1]),
        Err(error) => {
            support
                .notes
                .push(format!("scan after reclaim failed: {error}"));
            return;
        }
    }
    if support.written_survives_reclaim == Some(true) {
        return;
    }
    // Lost: does any later fault on the page bring it back as written?
    let mut word = [0u8; 8];
    mapping.copy_racy(at, &mut word);
    if let Ok(found) = scan(&mut tracker) {
        support.reclaimed_reported_after_refault = Some(found.contains(&(page..page + 1)));
    }
}

/// Whether the page at virtual `address` has a present page-table entry:
/// bit 63 of its 8-byte entry in `/proc/self/pagemap`.
fn entry_present(address: u64) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let pagemap = std::fs::File::open("/proc/self/pagemap")?;
    let mut entry = [0u8; 8];
    pagemap.read_exact_at(&mut entry, address / PAGE_BYTES * 8)?;
    Ok(u64::from_ne_bytes(entry) >> 63 == 1)
}
