//! `engram scrub DIR`: the integrity check of a stopped store, from the
//! command line.
//!
//! Opens the store in `DIR` with integrity `lazy` (creating the integrity
//! file if the store never had one), runs the engine's `scrub_now` (refresh
//! stale redundancy, verify every page and stripe, rebuild what parity can),
//! names the keys with data on pages it could not rebuild the way the server
//! names them (`db<N>:<key>` outside database 0), closes the store and
//! reports. Then the same for the collections' checkpoint images
//! (`DIR/collections/images`, an engine store of its own), when the
//! directory has them; damage there names the hash, set, sorted set or list
//! whose image it hit. (The collections' operation log is not under the
//! integrity layer: its records carry their own checksums.) Exit status: 0
//! when nothing is unrepairable, 1 when something is, 2 when the scrub
//! could not run (no store there, the directory locked by a running server,
//! an I/O error).
//!
//! Opening the store is part of the check: recovery, rebuilding the index,
//! asks the integrity layer about every record it cannot parse, so damage
//! under records is often found and rebuilt from parity (or found beyond
//! repair) before the scrub proper starts. The report counts both: the
//! pages repaired while opening (the engine gives their number, not their
//! offsets) and those the scrub repaired. Compaction stays off meanwhile:
//! checking a store should not move its records.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use engram_engine::{
    CompactionOptions, Error, IntegrityMode, IntegrityOptions, Options, ScrubReport, Store,
    DATA_FILE as VALUES_FILE,
};

use crate::serve::COLLECTIONS_DIR;

/// Exit status: nothing unrepairable.
pub const EXIT_CLEAN: i32 = 0;
/// Exit status: pages that parity could not rebuild.
pub const EXIT_UNREPAIRABLE: i32 = 1;
/// Exit status: the scrub could not run.
pub const EXIT_ERROR: i32 = 2;

/// What one `engram scrub` found.
#[derive(Debug)]
pub struct Findings {
    /// The strings store (`DIR`).
    pub strings: StoreFindings,
    /// The collections' checkpoint images, when `DIR` has them.
    pub images: Option<StoreFindings>,
}

impl Findings {
    pub fn unrepairable_pages(&self) -> usize {
        self.stores().map(|f| f.unrepairable.len()).sum()
    }

    /// Each store scrubbed.
    fn stores(&self) -> impl Iterator<Item = &StoreFindings> {
        std::iter::once(&self.strings).chain(self.images.as_ref())
    }
}

/// Where the collections' checkpoint images of the store in `dir` live.
fn images_dir(dir: &Path) -> std::path::PathBuf {
    dir.join(COLLECTIONS_DIR)
        .join(engram_collections::IMAGES_DIR)
}

/// What the scrub of one engine store found.
#[derive(Debug)]
pub struct StoreFindings {
    /// The integrity file did not exist: redundancy was built from the data
    /// as it is, so nothing older could be verified.
    pub created: bool,
    pub stripe_pages: u32,
    pub pages_checked: u64,
    pub pages_stale: u64,
    /// Corrupt pages found, while opening and by the scrub.
    pub corrupt_pages: u64,
    /// Pages rebuilt from parity while opening (recovery met them).
    pub repaired_at_open: u64,
    /// Data-file offsets of the pages the scrub rebuilt from parity.
    pub repaired: Vec<u64>,
    /// Data-file offsets of the pages that could not be rebuilt.
    pub unrepairable: Vec<u64>,
    pub parity_rewritten: u64,
    pub metadata_rebuilt: u64,
    /// Records on unrepairable pages: offset, and the key as a client names
    /// it when the record's header is intact.
    pub affected: Vec<(u64, Option<Vec<u8>>)>,
    /// Records recovery found on pages damaged beyond repair (indexed, and
    /// named above, when their header survived; otherwise lost).
    pub damaged_records: u64,
    pub duration: Duration,
}

/// Runs `engram scrub DIR [--json]`: prints the report (or the error) and
/// returns the exit status.
pub fn run(dir: &Path, json: bool) -> i32 {
    match scrub(dir) {
        Ok(findings) => {
            if json {
                println!("{}", render_json(dir, &findings));
            } else {
                print!("{}", render_text(dir, &findings));
            }
            if findings.unrepairable_pages() == 0 {
                EXIT_CLEAN
            } else {
                EXIT_UNREPAIRABLE
            }
        }
        Err(message) => {
            eprintln!("engram scrub: {message}");
            if json {
                println!("{{\"error\":{}}}", json_string(&message));
            }
            EXIT_ERROR
        }
    }
}

/// Scrubs the store in `dir`, and its collections' images (module docs).
pub fn scrub(dir: &Path) -> Result<Findings, String> {
    // Opening would create an empty store: refuse anything that is not one.
    if !dir.join(VALUES_FILE).is_file() {
        return Err(format!(
            "{} holds no Engram store (no {VALUES_FILE} there)",
            dir.display()
        ));
    }
    // Keys are named with the database numbers clients use (after any
    // SWAPDB), from the map the strings store holds.
    let (strings, client_name) = scrub_store(dir, crate::keyspace::key_namer)?;
    let images_dir = images_dir(dir);
    let images = if images_dir.join(VALUES_FILE).is_file() {
        let (images, _) = scrub_store(&images_dir, |_| {
            |key: &[u8]| image_owner_name(key, &client_name)
        })?;
        Some(images)
    } else {
        None
    };
    Ok(Findings { strings, images })
}

/// Scrubs the engine store in `dir`; the namer made from the opened store
/// turns an engine key of a damaged record into what a client would call
/// it (and is handed back).
fn scrub_store<N: Fn(&[u8]) -> Vec<u8>>(
    dir: &Path,
    namer: impl FnOnce(&Store) -> N,
) -> Result<(StoreFindings, N), String> {
    let options = Options {
        integrity: IntegrityOptions {
            mode: IntegrityMode::Lazy,
            // This process scrubs on demand; no background sweep besides.
            scrub_bytes_per_sec: 0,
            ..IntegrityOptions::default()
        },
        compaction: CompactionOptions {
            enabled: false,
            ..CompactionOptions::default()
        },
        ..Options::default()
    };
    let store = Store::open(dir, options).map_err(|e| match e {
        Error::Locked { .. } => format!(
            "{} is locked: a running server (engram serve) or another process has the \
             store open. Stop it first, or scrub the live store with `redis-cli ENGRAM.SCRUB`",
            dir.display()
        ),
        other => format!("cannot open the store in {}: {other}", dir.display()),
    })?;
    let name = namer(&store);
    let recovery = store.recovery_report();
    let opened = store.integrity_stats().unwrap_or_default();
    let report = store.scrub_now();
    let totals = store.integrity_stats().unwrap_or_default();
    let closed = store.close();
    let report = report.map_err(|e| format!("scrubbing {}: {e}", dir.display()))?;
    closed.map_err(|e| format!("closing the store in {}: {e}", dir.display()))?;
    let findings = StoreFindings {
        created: recovery.integrity.as_ref().is_some_and(|i| i.created),
        stripe_pages: totals.stripe_pages,
        pages_checked: report.pages_checked,
        pages_stale: report.pages_stale,
        // Distinct pages: those repaired while opening are sound by the
        // time the scrub looks (the engine's cumulative counter would count
        // a page again each time it is checked).
        corrupt_pages: opened.repaired + report.corrupt_pages,
        repaired_at_open: opened.repaired,
        repaired: report.repaired_pages.clone(),
        unrepairable: report.unrepairable_pages.clone(),
        parity_rewritten: report.parity_rewritten,
        metadata_rebuilt: opened.metadata_rebuilt + report.metadata_rebuilt,
        affected: names(&report, &name),
        damaged_records: recovery.damaged_records,
        duration: report.duration,
    };
    Ok((findings, name))
}

/// An images-store key as a client knows the collection it belongs to:
/// `<key> (image of checkpoint N)`, `<key> (piece S of checkpoint N)`, or
/// what else it is.
fn image_owner_name(image_key: &[u8], client_key_name: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    if image_key == engram_collections::images::ROOT_KEY {
        return b"(the collections' checkpoint root)".to_vec();
    }
    if let Some((version, seq, key)) = engram_collections::images::parse_piece_key(image_key) {
        let mut name = client_key_name(key);
        name.extend_from_slice(format!(" (piece {seq} of checkpoint {version})").as_bytes());
        return name;
    }
    match engram_collections::images::parse_image_key(image_key) {
        Some((version, key)) => {
            let mut name = client_key_name(key);
            name.extend_from_slice(format!(" (image of checkpoint {version})").as_bytes());
            name
        }
        None => client_key_name(image_key),
    }
}

fn names(report: &ScrubReport, name: &impl Fn(&[u8]) -> Vec<u8>) -> Vec<(u64, Option<Vec<u8>>)> {
    report
        .affected_keys
        .iter()
        .map(|affected| (affected.offset, affected.key.as_deref().map(name)))
        .collect()
}

/// A key for a terminal: printable ASCII as is, other bytes as `\xNN`.
fn printable(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}

pub fn render_text(dir: &Path, findings: &Findings) -> String {
    let mut out = String::new();
    render_store(&mut out, dir, &findings.strings);
    if let Some(images) = &findings.images {
        render_store(&mut out, &images_dir(dir), images);
    }
    let corrupt: u64 = findings.stores().map(|f| f.corrupt_pages).sum();
    let verdict = match (findings.unrepairable_pages(), corrupt) {
        (0, 0) => "clean: every page matches its checksum".to_string(),
        (0, _) => "clean: every corrupt page was rebuilt from parity".to_string(),
        (n, _) => format!(
            "DAMAGED: {n} pages could not be rebuilt from parity (two or more bad pages in one \
             stripe); restore the keys named above from elsewhere"
        ),
    };
    let _ = writeln!(out, "result: {verdict}");
    out
}

/// One store's part of the text report.
fn render_store(out: &mut String, dir: &Path, f: &StoreFindings) {
    let pages = |n: u64| format!("{n} ({:.1} MiB)", (n * 4096) as f64 / (1 << 20) as f64);
    let _ = writeln!(
        out,
        "engram scrub {}: stripes of {} data pages + 1 parity page",
        dir.display(),
        f.stripe_pages
    );
    let _ = writeln!(
        out,
        "  pages checked      {} in {:.3} s{}",
        pages(f.pages_checked),
        f.duration.as_secs_f64(),
        if f.pages_stale > 0 {
            format!(" ({} skipped: written during the scrub)", f.pages_stale)
        } else {
            String::new()
        }
    );
    let _ = writeln!(out, "  corrupt pages      {}", f.corrupt_pages);
    let _ = writeln!(
        out,
        "  repaired           {}{}",
        f.repaired_at_open + f.repaired.len() as u64,
        if f.repaired_at_open > 0 {
            format!(
                " ({} while opening the store, when recovery met them)",
                f.repaired_at_open
            )
        } else {
            String::new()
        }
    );
    for offset in &f.repaired {
        let _ = writeln!(out, "    page at offset {offset:#x} rebuilt from parity");
    }
    let _ = writeln!(out, "  unrepairable       {}", f.unrepairable.len());
    for offset in &f.unrepairable {
        let _ = writeln!(out, "    page at offset {offset:#x}");
    }
    if f.parity_rewritten > 0 {
        let _ = writeln!(out, "  parity rewritten   {}", f.parity_rewritten);
    }
    if f.metadata_rebuilt > 0 {
        let _ = writeln!(out, "  checksums rebuilt  {}", f.metadata_rebuilt);
    }
    if !f.affected.is_empty() {
        let _ = writeln!(
            out,
            "  keys with data on unrepairable pages (reads of them fail until they are \
             rewritten or deleted):"
        );
        for (offset, key) in &f.affected {
            match key {
                Some(key) => {
                    let _ = writeln!(out, "    {} (record at {offset:#x})", printable(key));
                }
                None => {
                    let _ = writeln!(
                        out,
                        "    offset:{offset:#x} (the record's key is unreadable)"
                    );
                }
            }
        }
    }
    if f.created {
        let _ = writeln!(
            out,
            "note: the store had no integrity file: redundancy was just built from the data \
             as it is, so nothing older could be verified (damage already present is not \
             detectable); from now on it is"
        );
    }
    if f.damaged_records > 0 {
        let _ = writeln!(
            out,
            "note: opening the store met {} damaged records on pages parity could not \
             rebuild; those whose header survived are named above, any whose header was \
             destroyed could not be indexed (their keys are unknown, their data lost)",
            f.damaged_records
        );
    }
}

/// The strings store's findings at the top level (as before collections
/// had images), the images' in `collections_images` (null when there are
/// none), and `ok` for both.
pub fn render_json(dir: &Path, findings: &Findings) -> String {
    let images = findings
        .images
        .as_ref()
        .map_or("null".to_string(), |f| format!("{{{}}}", json_fields(f)));
    format!(
        "{{\"dir\":{},\"ok\":{},{},\"collections_images\":{images}}}",
        json_string(&dir.display().to_string()),
        findings.unrepairable_pages() == 0,
        json_fields(&findings.strings),
    )
}

/// One store's findings as JSON object members.
fn json_fields(f: &StoreFindings) -> String {
    let offsets = |list: &[u64]| {
        list.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let affected = f
        .affected
        .iter()
        .map(|(offset, key)| {
            format!(
                "{{\"offset\":{offset},\"key\":{}}}",
                key.as_deref()
                    .map_or("null".to_string(), |k| json_string(&printable(k)))
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "\"integrity_file_created\":{},\"stripe_pages\":{},\
         \"pages_checked\":{},\"pages_stale\":{},\"corrupt_pages\":{},\
         \"repaired_at_open\":{},\"repaired_pages\":[{}],\"unrepairable_pages\":[{}],\
         \"parity_rewritten\":{},\"metadata_rebuilt\":{},\"affected_keys\":[{affected}],\
         \"damaged_records_at_open\":{},\"duration_ms\":{:.3}",
        f.created,
        f.stripe_pages,
        f.pages_checked,
        f.pages_stale,
        f.corrupt_pages,
        f.repaired_at_open,
        offsets(&f.repaired),
        offsets(&f.unrepairable),
        f.parity_rewritten,
        f.metadata_rebuilt,
        f.damaged_records,
        f.duration.as_secs_f64() * 1000.0,
    )
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_what_they_must() {
        assert_eq!(json_string("a\"b\\c\nd"), "\"a\\\"b\\\\c\\u000ad\"");
        assert_eq!(printable(b"k\x00\xff\"x"), "k\\x00\\xff\\\"x");
    }

    #[test]
    fn images_and_pieces_are_named_by_their_key() {
        let name = |image_key: &[u8]| {
            String::from_utf8(image_owner_name(image_key, |key| key.to_vec())).unwrap()
        };
        let mut key = Vec::new();
        engram_collections::images::piece_key_into(9, 3, b"queue", &mut key);
        assert_eq!(name(&key), "queue (piece 3 of checkpoint 9)");
        assert_eq!(
            name(&engram_collections::images::image_key(9, b"queue")),
            "queue (image of checkpoint 9)"
        );
    }

    #[test]
    fn no_store_is_an_error_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let err = scrub(&dir.path().join("missing")).unwrap_err();
        assert!(err.contains("holds no Engram store"), "{err}");
        assert!(!dir.path().join("missing").exists());
    }
}
