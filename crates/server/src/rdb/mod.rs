//! Redis's serialization format (RDB), so data moves between Redis 7.0 and
//! Engram: DUMP/RESTORE payloads and `engram import` of RDB files.
//!
//! Reading takes everything Redis 7.0 writes or loads for the types Engram
//! has, in RDB versions up to 10: strings (raw, integer, LZF-compressed),
//! lists (plain, ziplist, quicklist of ziplists, quicklist 2 of listpacks
//! and plain nodes), sets (plain, intset), sorted sets (ZSET, ZSET_2,
//! ziplist, listpack), hashes (plain, zipmap, ziplist, listpack); in files
//! also expiry (seconds and milliseconds), SELECTDB, RESIZEDB, AUX, and
//! eviction hints (IDLE, FREQ: read and dropped, Engram keeps no LRU/LFU
//! data). Function libraries (FUNCTION2) are skipped and counted: Engram
//! has no Lua. Streams, module values and module AUX data are refused with
//! an error naming them.
//!
//! Writing (DUMP) uses plain encodings Redis 7.0 loads (see `writer`).
//!
//! Input is untrusted (RESTORE takes any client's bytes): every length is
//! checked against the bytes that remain before anything is allocated for
//! it, every encoded blob against its own header, and a bad input is an
//! [`Error`] naming the offset, never a panic.
//!
//! - `input`: the byte cursor (lengths, strings, LZF via `lzf`, doubles);
//! - `encodings`: ziplist, listpack, intset, zipmap;
//! - `reader`: values by type; `file`: whole files; `payload`: DUMP
//!   payloads; `writer`: encoding values; `value`: the neutral value type;
//! - `import`: `engram import`, a file into a data directory.

mod encodings;
mod error;
pub mod file;
pub mod import;
pub(crate) mod input;
mod lzf;
pub mod payload;
pub mod reader;
mod stream;
pub mod value;
pub mod writer;

pub use error::{Error, Result};
pub use value::Value;

/// The CRC-64 Redis uses (Jones polynomial, reflected), over RDB files and
/// DUMP payloads.
pub fn crc64(bytes: &[u8]) -> u64 {
    CRC64.checksum(bytes)
}

/// The same CRC, for checksums computed piece by piece (`CRC64.digest()`).
pub(crate) static CRC64: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_REDIS);

/// Value types (the byte before a value).
pub mod types {
    pub const STRING: u8 = 0;
    pub const LIST: u8 = 1;
    pub const SET: u8 = 2;
    pub const ZSET: u8 = 3;
    pub const HASH: u8 = 4;
    pub const ZSET_2: u8 = 5;
    pub const MODULE: u8 = 6;
    pub const MODULE_2: u8 = 7;
    pub const HASH_ZIPMAP: u8 = 9;
    pub const LIST_ZIPLIST: u8 = 10;
    pub const SET_INTSET: u8 = 11;
    pub const ZSET_ZIPLIST: u8 = 12;
    pub const HASH_ZIPLIST: u8 = 13;
    pub const LIST_QUICKLIST: u8 = 14;
    pub const STREAM_LISTPACKS: u8 = 15;
    pub const HASH_LISTPACK: u8 = 16;
    pub const ZSET_LISTPACK: u8 = 17;
    pub const LIST_QUICKLIST_2: u8 = 18;
    pub const STREAM_LISTPACKS_2: u8 = 19;
    /// Redis 7.2 (RDB 11); named so a payload of one gets a clear error.
    pub const STREAM_LISTPACKS_3: u8 = 21;
}

/// File opcodes (where a type byte would be).
pub mod opcode {
    pub const FUNCTION2: u8 = 245;
    pub const FUNCTION: u8 = 246;
    pub const MODULE_AUX: u8 = 247;
    pub const IDLE: u8 = 248;
    pub const FREQ: u8 = 249;
    pub const AUX: u8 = 250;
    pub const RESIZEDB: u8 = 251;
    pub const EXPIRETIME_MS: u8 = 252;
    pub const EXPIRETIME: u8 = 253;
    pub const SELECTDB: u8 = 254;
    pub const EOF: u8 = 255;
}

#[cfg(test)]
mod tests;
