//! Part 3, strings: the engine store's two recovery paths on one data set.
//!
//! 1. **Build** `string_keys` keys of `value_bytes` bytes with `threads`
//!    writers (no image is written behind the part's back: neither in the
//!    background nor at close).
//! 2. **Image**: `Store::write_index_image` (timed), then a **tail** of
//!    `tail_percent` % new keys; `crash`.
//! 3. **(b) full scan**: open with index images disabled (every block is
//!    read and every record's checksums verified), check, `crash`.
//! 4. **(a) image + tail**: open as usual (the image is read, each record
//!    it names is checked where it lies, only the blocks claimed after the
//!    image are scanned), check, `crash`.
//!
//! Both opens read files still in the page cache, as after a process
//! crash, with `recovery_threads` threads.

use std::time::{Duration, Instant};

use engram_engine::{IndexImageOptions, Options, RecoveryReport, Store};
use indicatif::ProgressBar;

use super::error::{Result, TimelineError};
use super::recovery::check_count;
use super::{records, Config};
use crate::command::remove_if_present;
use crate::progress::progress_bar;

/// One timed engine recovery.
#[derive(Clone, Debug)]
pub struct StringRecovered {
    /// `Store::open`, wall time.
    pub open: Duration,
    pub report: RecoveryReport,
    pub keys_found: u64,
}

#[derive(Clone, Debug)]
pub struct StringRecoveryMeasured {
    pub keys: u64,
    pub value_bytes: usize,
    pub build: Duration,
    pub data_file_bytes: u64,
    pub image: Duration,
    pub image_entries: u64,
    pub tail_keys: u64,
    pub from_scan: StringRecovered,
    pub from_image: StringRecovered,
}

fn options(config: &Config, images: bool) -> Options {
    Options {
        recovery_threads: config.recovery_threads,
        index_image: IndexImageOptions {
            enabled: images,
            every_bytes: u64::MAX,
            on_close: false,
        },
        ..Options::default()
    }
}

fn key(id: u64) -> Vec<u8> {
    format!("string:{id:010}").into_bytes()
}

fn value(id: u64, bytes: usize) -> Vec<u8> {
    let mut value = id.to_le_bytes().repeat(bytes.div_ceil(8));
    value.truncate(bytes);
    value
}

/// Runs the strings half of the part in `config.dir/string-recovery`.
pub fn measure(config: &Config, keys: u64) -> Result<StringRecoveryMeasured> {
    let value_bytes = config.recovery.member_bytes;
    let dir = config.dir.join("string-recovery");
    remove_if_present(&dir)?;
    let store = Store::open(&dir, options(config, true))?;
    let bar = progress_bar(config.progress, Some(keys), "string recovery build");
    let began = Instant::now();
    put_keys(&store, 0..keys, value_bytes, config.threads, &bar)?;
    bar.finish_and_clear();
    let build = began.elapsed();
    let image = store.write_index_image()?;
    let tail_keys = (keys as f64 * config.recovery_tail_percent / 100.0).ceil() as u64;
    put_keys(
        &store,
        keys..keys + tail_keys,
        value_bytes,
        config.threads,
        &ProgressBar::hidden(),
    )?;
    let data_file_bytes = store.stats().file_bytes;
    store.crash();

    let expected = keys + tail_keys;
    let from_scan = recover(config, &dir, false, expected, value_bytes)?;
    let from_image = recover(config, &dir, true, expected, value_bytes)?;
    if from_image.report.index_image.image != Some(image.number) {
        return Err(TimelineError::LostWrite {
            store: "strings",
            what: format!(
                "recovery did not start from the index image: {:?}",
                from_image.report.index_image
            ),
        });
    }
    remove_if_present(&dir)?;
    Ok(StringRecoveryMeasured {
        keys,
        value_bytes,
        build,
        data_file_bytes,
        image: image.duration,
        image_entries: image.entries,
        tail_keys,
        from_scan,
        from_image,
    })
}

fn recover(
    config: &Config,
    dir: &std::path::Path,
    images: bool,
    expected: u64,
    value_bytes: usize,
) -> Result<StringRecovered> {
    let began = Instant::now();
    let store = Store::open(dir, options(config, images))?;
    let open = began.elapsed();
    let found = store.len();
    for id in check_count("strings", found, expected)? {
        if store.get(&key(id))? != Some(value(id, value_bytes)) {
            return Err(TimelineError::LostWrite {
                store: "strings",
                what: format!("after recovery, key {id} does not hold its value"),
            });
        }
    }
    let report = store.recovery_report();
    store.crash();
    Ok(StringRecovered {
        open,
        report,
        keys_found: found,
    })
}

/// Puts keys `ids` with `threads` writers, each a consecutive slice.
fn put_keys(
    store: &Store,
    ids: std::ops::Range<u64>,
    value_bytes: usize,
    threads: usize,
    bar: &ProgressBar,
) -> Result<()> {
    records::write_each(ids.end - ids.start, threads, bar, |i| {
        let id = ids.start + i;
        store.put(&key(id), &value(id, value_bytes))?;
        Ok(())
    })?;
    Ok(())
}
