//! Feeds arbitrary bytes to the RDB codec: as a DUMP payload (as given, and
//! with a correct footer around it so the value decoder itself is reached),
//! and as the records of an RDB file with a correct checksum. Its promise:
//! an error, never a panic, and never an allocation beyond what the input
//! could hold (libFuzzer's -rss_limit_mb catches those).

#![no_main]

use engram_server::rdb::{crc64, file::FileReader, payload};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = payload::open(data);

    let mut sealed = data.to_vec();
    payload::seal(&mut sealed);
    if let Ok(value) = payload::open(&sealed) {
        let _ = value.into_stored();
    }

    let mut file = b"REDIS0010".to_vec();
    file.extend_from_slice(data);
    file.push(255);
    let crc = crc64(&file);
    file.extend_from_slice(&crc.to_le_bytes());
    if let Ok(mut reader) = FileReader::new(&file) {
        while let Ok(Some(record)) = reader.next_record() {
            let _ = record.value.into_stored();
        }
    }
});
