//! Streams in Redis's RDB encodings: read from `RDB_TYPE_STREAM_LISTPACKS`
//! (15, Redis 5–6.2), `_2` (19, Redis 7.0) and `_3` (21, Redis 7.2);
//! written as `_2`, which Redis 7.0 loads.
//!
//! The layout (Redis's `rdbSaveObject`): the node count, then per node a
//! string holding the node's master ID (16 bytes, big-endian ms and seq)
//! and a string holding its listpack; the length, last ID, (19+) first
//! ID, max deleted ID and entries added; the groups: name, last ID,
//! (19+) entries read, the PEL (raw 16-byte ID, delivery time as 8
//! little-endian bytes of ms, delivery count), the consumers (name, seen
//! time, (21) active time, and the IDs of their PEL entries).
//!
//! A node's listpack: entry count, deleted count, master field count, the
//! master fields, a 0; then per entry: flags (1 deleted, 2 same fields as
//! the master), ms and seq deltas from the master ID, the field count and
//! the fields and values (or only the values), and the entry's element
//! count.

use engram_collections::types::stream::Group;
use engram_collections::types::{Stream, StreamId};

use super::encodings::{listpack, Item};
use super::error::{Error, Result};
use super::input::Input;
use super::types;
use super::writer::{put_length, put_string};

const FLAG_DELETED: i64 = 1;
const FLAG_SAME_FIELDS: i64 = 2;
/// Entries per node written (Redis's default `stream-node-max-entries`).
const NODE_ENTRIES: usize = 100;

fn id_of(raw: &[u8]) -> StreamId {
    StreamId::new(
        u64::from_be_bytes(raw[..8].try_into().expect("8 bytes")),
        u64::from_be_bytes(raw[8..16].try_into().expect("8 bytes")),
    )
}

fn raw_id(id: StreamId) -> [u8; 16] {
    let mut raw = [0; 16];
    raw[..8].copy_from_slice(&id.ms.to_be_bytes());
    raw[8..].copy_from_slice(&id.seq.to_be_bytes());
    raw
}

fn int(item: Option<&Item>, at: u64) -> Result<i64> {
    match item {
        Some(Item::Int(n)) => Ok(*n),
        Some(Item::Bytes(bytes)) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| Error::at(at, "a stream listpack integer that is not one")),
        None => Err(Error::at(at, "a stream listpack ends early")),
    }
}

fn id_part(input: &mut Input) -> Result<u64> {
    input.length()
}

/// Reads a stream of RDB type `ty`.
pub fn read(input: &mut Input, ty: u8) -> Result<Stream> {
    let mut stream = Stream::new();
    let nodes = input.count("stream node count", 2)?;
    let mut entries: Vec<(StreamId, Vec<Vec<u8>>)> = Vec::new();
    for _ in 0..nodes {
        let key_at = input.offset();
        let key = input.string()?;
        if key.len() != 16 {
            return Err(Error::at(key_at, "a stream node key that is not 16 bytes"));
        }
        let master = id_of(&key);
        let at = input.offset();
        let blob = input.string()?;
        let items = listpack::entries(&blob).map_err(|e| Error::at(at, e))?;
        if items.is_empty() {
            return Err(Error::at(at, "an empty stream listpack"));
        }
        let mut it = items.iter();
        let _count = int(it.next(), at)?;
        let _deleted = int(it.next(), at)?;
        let master_fields = int(it.next(), at)?;
        if master_fields < 0 || master_fields as usize > items.len() {
            return Err(Error::at(at, "a bad stream master field count"));
        }
        let fields: Vec<Vec<u8>> = (0..master_fields)
            .map(|_| it.next().map(|i| i.to_vec()))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::at(at, "a stream listpack ends early"))?;
        int(it.next(), at)?; // the master entry's terminator
        while let Some(flags) = it.next() {
            let flags = int(Some(flags), at)?;
            let ms = master.ms.wrapping_add(int(it.next(), at)? as u64);
            let seq = master.seq.wrapping_add(int(it.next(), at)? as u64);
            let mut entry = Vec::new();
            if flags & FLAG_SAME_FIELDS != 0 {
                for field in &fields {
                    let value = it
                        .next()
                        .ok_or_else(|| Error::at(at, "a stream entry ends early"))?;
                    entry.push(field.clone());
                    entry.push(value.to_vec());
                }
            } else {
                let n = int(it.next(), at)?;
                if n < 0 || n as usize > items.len() {
                    return Err(Error::at(at, "a bad stream entry field count"));
                }
                for _ in 0..n * 2 {
                    let item = it
                        .next()
                        .ok_or_else(|| Error::at(at, "a stream entry ends early"))?;
                    entry.push(item.to_vec());
                }
            }
            int(it.next(), at)?; // the entry's element count
            if flags & FLAG_DELETED == 0 {
                entries.push((StreamId::new(ms, seq), entry));
            }
        }
    }
    let mut previous = StreamId::MIN;
    for (id, fields) in &entries {
        if *id <= previous || fields.is_empty() {
            return Err(input.error("stream entries out of order, or an entry without fields"));
        }
        previous = *id;
        stream.append(*id, fields);
    }
    let length = input.length()?;
    if length != entries.len() as u64 {
        return Err(input.error("a stream length that does not match its entries"));
    }
    let last_id = StreamId::new(id_part(input)?, id_part(input)?);
    let (first_id, max_deleted, entries_added) = if ty >= types::STREAM_LISTPACKS_2 {
        let first = StreamId::new(id_part(input)?, id_part(input)?);
        let max_deleted = StreamId::new(id_part(input)?, id_part(input)?);
        (first, max_deleted, input.length()?)
    } else {
        (
            stream.first_entry_id().unwrap_or_default(),
            StreamId::MIN,
            length,
        )
    };
    stream.set_meta(last_id, entries_added, max_deleted, first_id);
    let groups = input.count("stream group count", 3)?;
    for _ in 0..groups {
        let name = input.string()?.into_owned();
        let last = StreamId::new(id_part(input)?, id_part(input)?);
        let entries_read = if ty >= types::STREAM_LISTPACKS_2 {
            input.length()? as i64
        } else {
            stream.estimate_entries_read(last).map_or(-1, |n| n as i64)
        };
        let mut group = Group::new(last, entries_read);
        let pel_count = input.count("stream PEL size", 17)?;
        let mut pel = std::collections::BTreeMap::new();
        for _ in 0..pel_count {
            let id = id_of(input.bytes(16)?);
            let delivery_ms = input.i64_le()? as u64;
            let deliveries = input.length()?;
            pel.insert(id, (delivery_ms, deliveries));
        }
        let consumers = input.count("stream consumer count", 2)?;
        let mut owned = 0;
        for _ in 0..consumers {
            let consumer = input.string()?.into_owned();
            let seen_ms = input.i64_le()? as u64;
            if ty >= types::STREAM_LISTPACKS_3 {
                input.i64_le()?; // active time (Redis 7.2)
            }
            group.touch(&consumer, seen_ms);
            let ids = input.count("stream consumer PEL size", 16)?;
            for _ in 0..ids {
                let id = id_of(input.bytes(16)?);
                let Some(&(delivery_ms, deliveries)) = pel.get(&id) else {
                    return Err(input.error("a consumer's pending entry not in its group's PEL"));
                };
                group.claim(id, &consumer, delivery_ms, deliveries);
                owned += 1;
            }
            group.touch(&consumer, seen_ms);
        }
        if owned != pel.len() {
            return Err(input.error("a group's pending entry owned by no consumer"));
        }
        stream.insert_group(name.into_boxed_slice(), group);
    }
    Ok(stream)
}

/// Writes `stream` as `RDB_TYPE_STREAM_LISTPACKS_2` (type byte included).
pub fn write(out: &mut Vec<u8>, stream: &Stream) {
    out.push(types::STREAM_LISTPACKS_2);
    let entries: Vec<_> = stream.iter().collect();
    let chunks: Vec<_> = entries.chunks(NODE_ENTRIES).collect();
    put_length(out, chunks.len() as u64);
    for chunk in &chunks {
        let master = chunk[0].id;
        put_string(out, &raw_id(master));
        let master_fields: Vec<&[u8]> = chunk[0].fields.iter().step_by(2).copied().collect();
        let mut lp = Listpack::default();
        lp.int(chunk.len() as i64);
        lp.int(0);
        lp.int(master_fields.len() as i64);
        for field in &master_fields {
            lp.string(field);
        }
        lp.int(0);
        for entry in chunk.iter() {
            let names: Vec<&[u8]> = entry.fields.iter().step_by(2).copied().collect();
            let same = names == master_fields;
            lp.int(if same { FLAG_SAME_FIELDS } else { 0 });
            lp.int(entry.id.ms.wrapping_sub(master.ms) as i64);
            lp.int(entry.id.seq.wrapping_sub(master.seq) as i64);
            let pairs = entry.fields.len() / 2;
            if same {
                for value in entry.fields.iter().skip(1).step_by(2) {
                    lp.string(value);
                }
                lp.int(pairs as i64 + 3);
            } else {
                lp.int(pairs as i64);
                for field in &entry.fields {
                    lp.string(field);
                }
                lp.int(2 * pairs as i64 + 4);
            }
        }
        put_string(out, &lp.finish());
    }
    put_length(out, stream.len() as u64);
    for id in [stream.last_id(), stream.first_id(), stream.max_deleted_id()] {
        put_length(out, id.ms);
        put_length(out, id.seq);
    }
    put_length(out, stream.entries_added());
    put_length(out, stream.groups().len() as u64);
    for (name, group) in stream.groups() {
        put_string(out, name);
        put_length(out, group.last_id.ms);
        put_length(out, group.last_id.seq);
        put_length(out, group.entries_read as u64);
        put_length(out, group.pel().len() as u64);
        for (id, pending) in group.pel() {
            out.extend_from_slice(&raw_id(*id));
            out.extend_from_slice(&(pending.delivery_ms as i64).to_le_bytes());
            put_length(out, pending.deliveries);
        }
        put_length(out, group.consumers().len() as u64);
        for (consumer_name, consumer) in group.consumers() {
            put_string(out, consumer_name);
            out.extend_from_slice(&(consumer.seen_ms as i64).to_le_bytes());
            put_length(out, consumer.pending().len() as u64);
            for id in consumer.pending() {
                out.extend_from_slice(&raw_id(*id));
            }
        }
    }
}

/// A listpack being written (Redis's `listpack.c` encodings).
#[derive(Default)]
struct Listpack {
    body: Vec<u8>,
    count: usize,
}

impl Listpack {
    fn int(&mut self, n: i64) {
        let start = self.body.len();
        if (0..=127).contains(&n) {
            self.body.push(n as u8);
        } else if (-4096..=4095).contains(&n) {
            let u = (n as u16) & 0x1fff;
            self.body
                .extend_from_slice(&[0xC0 | (u >> 8) as u8, u as u8]);
        } else if i16::try_from(n).is_ok() {
            self.body.push(0xF1);
            self.body.extend_from_slice(&(n as i16).to_le_bytes());
        } else if (-(1 << 23)..(1 << 23)).contains(&n) {
            self.body.push(0xF2);
            self.body.extend_from_slice(&(n as i32).to_le_bytes()[..3]);
        } else if i32::try_from(n).is_ok() {
            self.body.push(0xF3);
            self.body.extend_from_slice(&(n as i32).to_le_bytes());
        } else {
            self.body.push(0xF4);
            self.body.extend_from_slice(&n.to_le_bytes());
        }
        self.backlen(start);
    }

    fn string(&mut self, bytes: &[u8]) {
        let start = self.body.len();
        let len = bytes.len();
        if len < 64 {
            self.body.push(0x80 | len as u8);
        } else if len < 4096 {
            self.body
                .extend_from_slice(&[0xE0 | (len >> 8) as u8, len as u8]);
        } else {
            self.body.push(0xF0);
            self.body.extend_from_slice(&(len as u32).to_le_bytes());
        }
        self.body.extend_from_slice(bytes);
        self.backlen(start);
    }

    /// The entry's length, written after it for walking backwards.
    fn backlen(&mut self, start: usize) {
        let l = (self.body.len() - start) as u64;
        let bytes: Vec<u8> = if l <= 127 {
            vec![l as u8]
        } else if l < 16383 {
            vec![(l >> 7) as u8, (l & 127) as u8 | 128]
        } else if l < 2097151 {
            vec![
                (l >> 14) as u8,
                ((l >> 7) & 127) as u8 | 128,
                (l & 127) as u8 | 128,
            ]
        } else if l < 268435455 {
            vec![
                (l >> 21) as u8,
                ((l >> 14) & 127) as u8 | 128,
                ((l >> 7) & 127) as u8 | 128,
                (l & 127) as u8 | 128,
            ]
        } else {
            vec![
                (l >> 28) as u8,
                ((l >> 21) & 127) as u8 | 128,
                ((l >> 14) & 127) as u8 | 128,
                ((l >> 7) & 127) as u8 | 128,
                (l & 127) as u8 | 128,
            ]
        };
        self.body.extend_from_slice(&bytes);
        self.count += 1;
    }

    fn finish(self) -> Vec<u8> {
        let total = 6 + self.body.len() + 1;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&(total as u32).to_le_bytes());
        out.extend_from_slice(&(self.count.min(65535) as u16).to_le_bytes());
        out.extend_from_slice(&self.body);
        out.push(0xFF);
        out
    }
}
