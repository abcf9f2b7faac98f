//! Atomic multi-key writes (MSET, RENAME, MULTI/EXEC) over an engine that
//! makes single keys atomic.
//!
//! A batch is first written whole as one *intent* record under a reserved
//! key (`0xFF 'J' seq`), then applied key by key, then the intent is
//! deleted; the keys' stripes stay locked throughout. The engine makes the
//! intent appear atomically, so after a crash either there is no intent
//! (the batch was never started, or fully applied) or there is one, and
//! the batch is applied again from it at startup. Re-applying is safe:
//! while an intent exists its keys were locked, so no later write to them
//! can exist. This is a redo log of one entry per batch; the operation log
//! of the collections issue will take its place.

use super::{Error, Result};

/// The first two bytes of every intent key (0xFF is never a database).
pub const PREFIX: [u8; 2] = [0xFF, b'J'];

/// One write of a batch: a whole engine value, or a delete.
pub type Op = (Vec<u8>, Option<Vec<u8>>);

pub fn intent_key(seq: u64) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

pub fn is_intent_key(key: &[u8]) -> bool {
    key.len() == PREFIX.len() + 8 && key.starts_with(&PREFIX)
}

/// `count` then, per op, `[kind][key len][key][value len][value]`.
pub fn encode<'a>(ops: impl ExactSizeIterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for (key, value) in ops {
        out.push(value.is_some() as u8);
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        if let Some(value) = value {
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
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
        let kind = take(1, &mut bytes)?[0];
        let key_len = read_u32(&mut bytes)?;
        let key = take(key_len, &mut bytes)?;
        let value = match kind {
            0 => None,
            1 => {
                let len = read_u32(&mut bytes)?;
                Some(take(len, &mut bytes)?)
            }
            _ => return Err(bad()),
        };
        ops.push((key, value));
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
            (b"\0a".to_vec(), Some(b"value".to_vec())),
            (b"\0b".to_vec(), None),
            (b"\x03".to_vec(), Some(Vec::new())),
        ];
        let bytes = encode(ops.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
        assert_eq!(decode(&bytes).unwrap(), ops);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
