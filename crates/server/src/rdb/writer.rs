//! Writing values in encodings Redis 7.0 loads: the plain ones (a string
//! as its bytes, a list as `RDB_TYPE_LIST`, a set as `RDB_TYPE_SET`, a
//! sorted set as `RDB_TYPE_ZSET_2` with binary scores, a hash as
//! `RDB_TYPE_HASH`, a stream as `RDB_TYPE_STREAM_LISTPACKS_2`). Redis converts them to its compact encodings as it
//! loads them when they are small enough.

use engram_collections::types::Object;

use super::types;
use super::value::Value;

pub fn put_length(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

pub fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    put_length(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A string value: its type byte and bytes.
pub fn put_string_value(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(types::STRING);
    put_string(out, bytes);
}

/// A collection: its type byte and elements.
pub fn put_object(out: &mut Vec<u8>, object: &Object) {
    match object {
        Object::List(list) => {
            out.push(types::LIST);
            put_length(out, list.len() as u64);
            for item in list.iter() {
                put_string(out, item);
            }
        }
        Object::Set(set) => {
            out.push(types::SET);
            put_length(out, set.len() as u64);
            for member in set.iter() {
                put_string(out, member);
            }
        }
        Object::SortedSet(zset) => {
            out.push(types::ZSET_2);
            put_length(out, zset.len() as u64);
            for (member, score) in zset.iter() {
                put_string(out, member);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
        Object::Hash(hash) => {
            out.push(types::HASH);
            put_length(out, hash.len() as u64);
            for (field, value) in hash.iter() {
                put_string(out, field);
                put_string(out, value);
            }
        }
        Object::Stream(stream) => super::stream::write(out, stream),
    }
}

/// Any value: its type byte and contents (the same encodings as above).
pub fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(bytes) => put_string_value(out, bytes),
        Value::List(items) | Value::Set(items) => {
            out.push(if matches!(value, Value::List(_)) {
                types::LIST
            } else {
                types::SET
            });
            put_length(out, items.len() as u64);
            for item in items {
                put_string(out, item);
            }
        }
        Value::SortedSet(pairs) => {
            out.push(types::ZSET_2);
            put_length(out, pairs.len() as u64);
            for (member, score) in pairs {
                put_string(out, member);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
        Value::Hash(pairs) => {
            out.push(types::HASH);
            put_length(out, pairs.len() as u64);
            for (field, value) in pairs {
                put_string(out, field);
                put_string(out, value);
            }
        }
        Value::Stream(stream) => super::stream::write(out, stream),
    }
}
