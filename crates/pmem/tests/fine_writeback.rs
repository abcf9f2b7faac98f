//! `fine_writeback`: after the file's pages were cached by an ordinary read
//! (which builds large folios), a sync after a small write writes back
//! about a page, not a whole folio. Runs alone in its process so that
//! `/proc/self/io` counts only this test's writeback, on the target
//! directory's file system (a tmpfs /tmp would write nothing back at all).

use std::io::Read;

use engram_pmem::{ModeChoice, PmemOffset, Region, RegionOptions};

const FILE_BYTES: u64 = 64 << 20;
const SYNCS: u64 = 32;
/// Generous: a page of data plus file-system metadata per sync.
const MAX_BYTES_PER_SYNC: u64 = 64 << 10;

fn write_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").expect("reading /proc/self/io");
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("write_bytes in /proc/self/io")
}

#[test]
fn small_writes_sync_a_page_not_a_folio() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("region.pmem");
    let options = RegionOptions {
        mode: ModeChoice::Emulated,
        fine_writeback: true,
        ..RegionOptions::default()
    };
    {
        let region = Region::create(&path, FILE_BYTES, options.clone()).unwrap();
        let chunk = vec![0xa5u8; 1 << 20];
        for i in 0..FILE_BYTES >> 20 {
            region.write(PmemOffset(i << 20), &chunk);
        }
        region.sync_all().unwrap();
    }
    // Warm the page cache the way a restart on a busy machine finds it.
    let mut sink = Vec::new();
    std::fs::File::open(&path)
        .unwrap()
        .read_to_end(&mut sink)
        .unwrap();
    drop(sink);

    let region = Region::open(&path, options).unwrap();
    let before = write_bytes();
    for i in 0..SYNCS {
        // Spread over the file: each write lands in a different 2 MiB span.
        let at = PmemOffset(((i * 2) << 20) % FILE_BYTES + 4096 * (i % 7));
        region.write(at, &[i as u8; 200]);
        region.sync_all().unwrap();
    }
    let written = write_bytes() - before;
    assert!(
        written <= SYNCS * MAX_BYTES_PER_SYNC,
        "{SYNCS} syncs of 200-byte writes wrote back {written} bytes"
    );
}
