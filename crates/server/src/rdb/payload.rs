//! DUMP payloads: a value (its type byte and contents), the RDB version as
//! two little-endian bytes, and the CRC-64 of both, little-endian. This is
//! what DUMP returns and RESTORE takes, in Redis and here.

use super::error::Error;
use super::input::Input;
use super::reader::read_object;
use super::value::Value;
use super::{crc64, file::MAX_VERSION};

/// The version Engram's payloads carry (Redis 7.0's).
pub const VERSION: u16 = 10;

/// Why RESTORE refuses a payload, in Redis's two words for it.
#[derive(Debug)]
pub enum PayloadError {
    /// Too short, of a newer version, or a wrong checksum.
    VersionOrChecksum,
    /// The value does not decode (what, and where).
    BadFormat(Error),
}

/// Appends the footer that makes `out` (a value) a DUMP payload.
pub fn seal(out: &mut Vec<u8>) {
    out.extend_from_slice(&VERSION.to_le_bytes());
    let crc = crc64(out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Checks a payload's footer (its version and CRC-64) without reading
/// its value; the value's bytes.
pub fn check(payload: &[u8]) -> Result<&[u8], PayloadError> {
    if payload.len() < 10 {
        return Err(PayloadError::VersionOrChecksum);
    }
    let footer = payload.len() - 10;
    let version = u16::from_le_bytes([payload[footer], payload[footer + 1]]);
    if u32::from(version) > MAX_VERSION {
        return Err(PayloadError::VersionOrChecksum);
    }
    let stored = u64::from_le_bytes(payload[footer + 2..].try_into().expect("8 bytes"));
    if stored != crc64(&payload[..footer + 2]) {
        return Err(PayloadError::VersionOrChecksum);
    }
    Ok(&payload[..footer])
}

/// Checks a payload's footer and reads its value.
pub fn open(payload: &[u8]) -> Result<Value, PayloadError> {
    // Like Redis, the value is read from the start of the payload and
    // whatever follows it is not looked at; unlike Redis, the reader may
    // not run into the footer.
    let mut input = Input::new(check(payload)?);
    let ty = input.u8().map_err(PayloadError::BadFormat)?;
    read_object(&mut input, ty).map_err(PayloadError::BadFormat)
}
