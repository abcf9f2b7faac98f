//! SETBIT on a 100 MB bitmap through the `engram` binary: each change is
//! stored in place, one 8-byte word (measured by the engine's own counts
//! in INFO engram: record bytes appended, words updated in place), and
//! every acknowledged change survives SIGKILL.

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::{connect, serve};

const BITS: u64 = 800_000_000; // 100 MB

fn setbit(con: &mut redis::Connection, offset: u64, on: bool) -> i64 {
    redis::cmd("SETBIT")
        .arg("bitmap")
        .arg(offset)
        .arg(i64::from(on))
        .query(con)
        .unwrap()
}

/// (record bytes appended, words updated in place) since the start.
fn written(con: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("engram").query(con).unwrap();
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("INFO engram has no {name}: {info}"))
            .trim()
            .parse()
            .unwrap()
    };
    (field("record_bytes_appended"), field("in_place_updates"))
}

#[test]
fn setbit_on_a_100_mb_bitmap_writes_in_place_and_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut expected: BTreeMap<u64, bool> = BTreeMap::new();
    let mut served = serve(&data, &["--durability", "always"]);
    let mut con = connect(served.port);
    // Creating the bitmap writes it whole, once.
    assert_eq!(setbit(&mut con, BITS - 1, true), 0);
    expected.insert(BITS - 1, true);
    let (appended_before, in_place_before) = written(&mut con);
    assert!(
        appended_before >= BITS / 8,
        "the bitmap was written whole once"
    );

    // 200 changes spread over the bitmap, each an 8-byte store in place
    // (200 rewrites would append 20 GB of records).
    let started = Instant::now();
    let mut offset = 12_345u64;
    for i in 0..200u64 {
        offset = offset
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407)
            % BITS;
        let on = i % 3 != 0;
        let before = expected.get(&offset).copied().unwrap_or(false);
        assert_eq!(setbit(&mut con, offset, on), i64::from(before));
        expected.insert(offset, on);
    }
    let elapsed = started.elapsed();
    let (appended, in_place) = written(&mut con);
    assert!(
        appended - appended_before < 1 << 20,
        "200 SETBITs appended {} record bytes",
        appended - appended_before
    );
    let changed = in_place - in_place_before;
    assert!(
        (100..=200).contains(&changed),
        "200 SETBITs (of which about 130 change a bit) updated {changed} words in place"
    );
    let strlen: u64 = redis::cmd("STRLEN").arg("bitmap").query(&mut con).unwrap();
    assert_eq!(strlen, BITS / 8);

    // Every acknowledged change is there after SIGKILL.
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    drop(served);
    let served = serve(&data, &[]);
    let mut con = connect(served.port);
    for (&offset, &on) in &expected {
        let bit: i64 = redis::cmd("GETBIT")
            .arg("bitmap")
            .arg(offset)
            .query(&mut con)
            .unwrap();
        assert_eq!(bit, i64::from(on), "bit {offset} after SIGKILL");
    }
    let count: u64 = redis::cmd("BITCOUNT")
        .arg("bitmap")
        .query(&mut con)
        .unwrap();
    assert_eq!(count, expected.values().filter(|&&on| on).count() as u64);
    eprintln!("200 SETBITs on a 100 MB bitmap took {elapsed:?}");
}
