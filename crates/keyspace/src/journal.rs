//! Atomic multi-key writes (MSET, RENAME, MULTI/EXEC) over an engine that
//! makes single keys atomic.
//!
//! A batch is first written whole as one *intent* record under a reserved
//! key (`0xFF 'J' seq`), then applied key by key, then the intent is
//! deleted; the keys' key groups stay locked throughout. The engine makes the
//! intent appear atomically, so after a crash either there is no intent
//! (the batch was never started, or fully applied) or there is one, and
//! the batch is applied again from it at startup. Re-applying is safe:
//! while an intent exists its keys were locked, so no later write to them
//! can exist. This is a redo log of one entry per batch.
//!
//! A batch that writes strings *and* collections (a MULTI mixing them)
//! also names, for each collection key it touched, that key's whole state
//! after the batch: the collections' own operation-log record of the batch
//! may or may not have been written before a crash, and a state (unlike an
//! operation) can be applied again without harm.

use super::{Error, Result};

/// The first two bytes of every intent key (0xFF is never a database).
pub const PREFIX: [u8; 2] = [0xFF, b'J'];

/// One write of a batch, to either store.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// A whole engine value, or (None) an engine delete.
    Engine(Option<Vec<u8>>),
    /// A collection key's state after the batch: its expiry (0: none) and
    /// image, or (None) its absence. Whole states, not operations, so
    /// applying one twice is harmless.
    Collection(Option<(u64, Vec<u8>)>),
}

pub type Op = (Vec<u8>, Write);

pub fn intent_key(seq: u64) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

pub fn is_intent_key(key: &[u8]) -> bool {
    key.len() == PREFIX.len() + 8 && key.starts_with(&PREFIX)
}

/// `count` then, per op, `[tag][key len][key]` and for tags 1 and 2
/// `[value len][value]`. Tags: 0 engine delete, 1 engine put, 2 collection
/// state (value = expiry as 8 bytes LE, then the image), 3 collection
/// absent. Batches written before collections existed use tags 0 and 1
/// only, so they still decode.
pub fn encode<'a>(ops: impl ExactSizeIterator<Item = (&'a [u8], &'a Write)>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for (key, write) in ops {
        let (tag, value): (u8, Option<Vec<u8>>) = match write {
            Write::Engine(None) => (0, None),
            Write::Engine(Some(value)) => (1, Some(value.clone())),
            Write::Collection(Some((expire, image))) => {
                let mut value = expire.to_le_bytes().to_vec();
                value.extend_from_slice(image);
                (2, Some(value))
            }
            Write::Collection(None) => (3, None),
        };
        out.push(tag);
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        if let Some(value) = value {
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(&value);
        }
    }
    out
}

pub fn decode(mut bytes: &[u8]) -> Result<Vec<Op>> {
    let bad = || Error::Internal("a batch intent record is malformed".into());
    let take = |n: usize, bytes: &mut &[u8]| -> Result<Vec<u8>> {
        if bytes.len() < n {
            return Err(bad());
        }
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(head.to_vec())
    };
    let read_u32 = |bytes: &mut &[u8]| -> Result<usize> {
        let raw = bytes.get(..4).ok_or_else(bad)?;
        let n = u32::from_le_bytes(raw.try_into().expect("4 bytes")) as usize;
        *bytes = &bytes[4..];
        Ok(n)
    };
    let count = read_u32(&mut bytes)?;
    let mut ops = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let tag = take(1, &mut bytes)?[0];
        let key_len = read_u32(&mut bytes)?;
        let key = take(key_len, &mut bytes)?;
        let write = match tag {
            0 => Write::Engine(None),
            1 => {
                let len = read_u32(&mut bytes)?;
                Write::Engine(Some(take(len, &mut bytes)?))
            }
            2 => {
                let len = read_u32(&mut bytes)?;
                let value = take(len, &mut bytes)?;
                if value.len() < 8 {
                    return Err(bad());
                }
                let expire = u64::from_le_bytes(value[..8].try_into().expect("8 bytes"));
                Write::Collection(Some((expire, value[8..].to_vec())))
            }
            3 => Write::Collection(None),
            _ => return Err(bad()),
        };
        ops.push((key, write));
    }
    if !bytes.is_empty() {
        return Err(bad());
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let ops: Vec<Op> = vec![
            (b"\0a".to_vec(), Write::Engine(Some(b"value".to_vec()))),
            (b"\0b".to_vec(), Write::Engine(None)),
            (b"\x03".to_vec(), Write::Engine(Some(Vec::new()))),
            (
                b"\0h".to_vec(),
                Write::Collection(Some((42, b"image".to_vec()))),
            ),
            (b"\0g".to_vec(), Write::Collection(None)),
        ];
        let bytes = encode(ops.iter().map(|(k, w)| (k.as_slice(), w)));
        assert_eq!(decode(&bytes).unwrap(), ops);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_tag = bytes.clone();
        bad_tag[4] = 9;
        assert!(decode(&bad_tag).is_err());
    }
}
