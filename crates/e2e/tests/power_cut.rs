//! The lazy file system the power-cut tests run Engram on (`lazy_fs/`):
//! writes, names and stores to a shared mapping that were never synced
//! are lost when the power is cut, synced ones kept.
//!
//! Without /dev/fuse the tests say so and pass; with it, a mount that
//! fails fails them.

mod lazy_fs;

use std::io::Write as _;
use std::path::Path;

use lazy_fs::LazyFs;

/// Mounts a lazy file system in a fresh directory, or says why this
/// machine cannot (then the test passes having checked nothing).
fn mount() -> Option<(tempfile::TempDir, LazyFs)> {
    if let Some(why) = lazy_fs::unavailable() {
        println!("power-cut test skipped: {why}");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().join("mnt");
    std::fs::create_dir(&mountpoint).unwrap();
    let fs = LazyFs::mount(&mountpoint)
        .unwrap_or_else(|e| panic!("mounting the lazy file system at {mountpoint:?}: {e}"));
    Some((dir, fs))
}

#[test]
fn lazy_fs_keeps_synced_files_and_names_and_drops_the_rest() {
    let Some((_dir, mut fs)) = mount() else {
        return;
    };
    let d = fs.mountpoint().join("d");
    std::fs::create_dir(&d).unwrap();
    let write_synced = |name: &str, bytes: &[u8]| {
        let mut file = std::fs::File::create(d.join(name)).unwrap();
        file.write_all(bytes).unwrap();
        file.sync_all().unwrap();
    };
    write_synced("synced", b"synced bytes");
    // A new file made durable the way Engram makes its data files.
    write_synced("tmp", b"renamed");
    std::fs::rename(d.join("tmp"), d.join("final")).unwrap();
    std::fs::File::open(&d).unwrap().sync_all().unwrap();
    // An unlink whose directory is never synced.
    write_synced("unlinked", b"back again");
    std::fs::remove_file(d.join("unlinked")).unwrap();
    // Bytes and a name never synced.
    std::fs::OpenOptions::new()
        .append(true)
        .open(d.join("synced"))
        .unwrap()
        .write_all(b" and more")
        .unwrap();
    std::fs::write(d.join("unsynced"), b"gone").unwrap();
    assert_eq!(
        std::fs::read(d.join("synced")).unwrap(),
        b"synced bytes and more"
    );

    fs.cut_power();
    fs.power_cycle().unwrap();

    assert_eq!(std::fs::read(d.join("synced")).unwrap(), b"synced bytes");
    assert_eq!(std::fs::read(d.join("final")).unwrap(), b"renamed");
    assert!(!d.join("tmp").exists(), "the rename was synced");
    assert_eq!(std::fs::read(d.join("unlinked")).unwrap(), b"back again");
    assert!(!d.join("unsynced").exists(), "its name was never synced");
    fs.unmount().unwrap();
}

/// Set in the child process that makes the mapped stores.
const MAPPED_STORES_CHILD: &str = "ENGRAM_LAZY_FS_MAPPED_STORES";

#[test]
fn lazy_fs_keeps_msynced_stores_to_a_shared_mapping_and_drops_the_rest() {
    if let Some(path) = std::env::var_os(MAPPED_STORES_CHILD) {
        return mapped_stores(Path::new(&path));
    }
    let Some((_dir, mut fs)) = mount() else {
        return;
    };
    let path = fs.mountpoint().join("region");
    // The stores are made by a child process (this test again): a process
    // must not map a file of a FUSE file system it serves itself. Its
    // munmap holds the address-space lock while it waits for the
    // write-back of the dirty pages, and the file system's threads need
    // that lock to serve the write-back (any page fault, any allocation
    // that maps memory): a deadlock. `engram serve` is its own process too.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lazy_fs_keeps_msynced_stores_to_a_shared_mapping_and_drops_the_rest",
            "--nocapture",
        ])
        .env(MAPPED_STORES_CHILD, &path)
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "the child making the stores: {}\n{}{}",
        child.status,
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    let synced = fs.stats();
    assert!(
        synced.syncs >= 2,
        "msync reached the file system: {synced:?}"
    );
    fs.cut_power();
    fs.power_cycle().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    assert_eq!(bytes.len(), 32 * page, "the growth was synced");
    let at = |page_index: usize, len: usize| &bytes[page_index * page..page_index * page + len];
    assert_eq!(at(0, 24), b"first page\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    assert_eq!(at(20, 13), b"in the growth");
    assert_eq!(at(5, 12), b"synced alone");
    assert!(at(3, 12).iter().all(|&b| b == 0), "never synced");
    assert!(at(6, 15).iter().all(|&b| b == 0), "never synced");
    fs.unmount().unwrap();
}

/// The child's part: stores through Engram's own region (a shared
/// writable mapping grown with posix_fallocate, made durable with
/// msync(MS_SYNC)), some synced and some not; the process exits with the
/// last ones still dirty (they are written back at munmap, and never
/// synced).
fn mapped_stores(path: &Path) {
    use engram_pmem::{ModeChoice, PmemOffset, Region, RegionOptions};
    let page = 4096;
    let options = RegionOptions {
        mode: ModeChoice::Emulated,
        fine_writeback: true,
        ..RegionOptions::default()
    };
    let region = Region::create(path, 16 * page, options).unwrap();
    region.write(PmemOffset(0), b"first page");
    region.grow_to(32 * page).unwrap();
    region.write(PmemOffset(20 * page), b"in the growth");
    region.sync_all().unwrap();
    region.write(PmemOffset(0), b"FIRST PAGE, never synced");
    region.write(PmemOffset(3 * page), b"never synced");
    // An msync of one page makes that page durable, not the others.
    region.write(PmemOffset(5 * page), b"synced alone");
    region.sync(PmemOffset(5 * page), 1).unwrap();
    region.write(PmemOffset(6 * page), b"dirty beside it");
}
