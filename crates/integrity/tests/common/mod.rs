//! Shared by the integrity tests: a small data region and its integrity.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use engram_integrity::{Integrity, IntegrityMode, IntegrityOptions, OpenReport};
use engram_pmem::{ModeChoice, PersistObserver, Region, RegionOptions};

pub const DATA_ID: u64 = 0xda7a;
pub const PAGE: u64 = 4096;

/// Lazy redundancy with no background activity: tests drive every pass.
pub fn quiet_options() -> IntegrityOptions {
    IntegrityOptions {
        mode: IntegrityMode::Lazy,
        period: Duration::from_secs(24 * 3600),
        scrub_bytes_per_sec: 0,
        ..IntegrityOptions::default()
    }
}

pub fn region_options(observer: Option<Arc<dyn PersistObserver>>) -> RegionOptions {
    RegionOptions {
        mode: ModeChoice::Emulated,
        reserve_bytes: 64 << 20,
        populate: false,
        observer,
        ..RegionOptions::default()
    }
}

/// Creates `dir/data` of `pages` pages filled with seeded bytes.
pub fn create_data(dir: &Path, pages: u64, seed: u64) -> Region {
    let region = Region::create(&dir.join("data"), pages * PAGE, region_options(None)).unwrap();
    let mut state = seed | 1;
    let bytes: Vec<u8> = (0..pages * PAGE)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    region.write(engram_pmem::PmemOffset(0), &bytes);
    region
}

pub fn open_data(dir: &Path, observer: Option<Arc<dyn PersistObserver>>) -> Arc<Region> {
    Arc::new(Region::open(&dir.join("data"), region_options(observer)).unwrap())
}

pub fn open_integrity(
    dir: &Path,
    data: &Arc<Region>,
    options: IntegrityOptions,
    observer: Option<Arc<dyn PersistObserver>>,
) -> (Integrity, OpenReport) {
    Integrity::open(dir, Arc::clone(data), DATA_ID, options, observer).unwrap()
}

/// Flips `mask` in the byte at `offset` of `dir/name` with a positioned
/// write: the media "changes" without any store through the region.
pub fn corrupt_file(dir: &Path, name: &str, offset: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(name))
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    byte[0] ^= mask;
    file.write_all_at(&byte, offset).unwrap();
}

pub fn read_file(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap()
}
