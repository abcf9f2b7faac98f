//! A packed node of stream entries: up to `node_max_entries` entries (by
//! default 100, Redis's `stream-node-max-entries`) in one byte vector, as
//! Redis packs them in a listpack, so a million small entries cost a few
//! bytes each rather than a few allocations each.
//!
//! # Layout
//!
//! ```text
//! node    = master, entry*
//! master  = varint field count, field strings (the first entry's fields)
//! entry   = flag (1 byte: 1 = same fields as the master, 0 = own fields),
//!           varint ms delta from the previous entry (the first: from the
//!           node's key, so 0),
//!           varint seq: the delta from the previous seq when the ms delta
//!           is 0, else the seq itself,
//!           flag 1: one value string per master field
//!           flag 0: varint pair count, then field and value strings
//! string  = varint length, bytes
//! ```
//!
//! Entries are strictly increasing by ID; the node's key in the stream's
//! tree is its first entry's ID. Nothing here is persistent: a node is
//! DRAM only, rebuilt from the checkpoint image and the log.

use std::ops::Deref;

use super::StreamId;
use crate::op::put_varint;

#[derive(Clone, Debug)]
pub(super) struct Node {
    pub(super) bytes: Vec<u8>,
    pub(super) count: u32,
    /// The ID of the last entry.
    pub(super) last: StreamId,
}

/// One entry read from a node: its ID and its fields and values,
/// alternating (field, value, field, value...), borrowed from the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEntry<'a> {
    /// The entry's ID.
    pub id: StreamId,
    /// Fields and values, alternating.
    pub fields: Vec<&'a [u8]>,
}

impl StreamEntry<'_> {
    /// The number of field-value pairs.
    pub fn pairs(&self) -> usize {
        self.fields.len() / 2
    }
}

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Reads what `put_varint` wrote. Nodes are built only by this module,
/// so a malformed one is a bug: it panics.
fn varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = bytes[*at];
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
        shift += 7;
    }
}

fn string<'a>(bytes: &'a [u8], at: &mut usize) -> &'a [u8] {
    let len = varint(bytes, at) as usize;
    let out = &bytes[*at..*at + len];
    *at += len;
    out
}

impl Node {
    /// A node holding one entry.
    pub(super) fn new<F: Deref<Target = [u8]>>(id: StreamId, fields: &[F]) -> Node {
        let mut bytes = Vec::with_capacity(64);
        let pairs = fields.len() / 2;
        put_varint(&mut bytes, pairs as u64);
        for pair in fields.chunks(2) {
            put_string(&mut bytes, pair[0].deref());
        }
        let mut node = Node {
            bytes,
            count: 0,
            last: id,
        };
        node.push(id, fields);
        node
    }

    /// The master fields: where they end, and how many.
    fn master(&self) -> (usize, usize) {
        let mut at = 0;
        let count = varint(&self.bytes, &mut at) as usize;
        for _ in 0..count {
            string(&self.bytes, &mut at);
        }
        (at, count)
    }

    fn same_fields_as_master<F: Deref<Target = [u8]>>(&self, fields: &[F]) -> bool {
        let mut at = 0;
        let count = varint(&self.bytes, &mut at) as usize;
        if count * 2 != fields.len() {
            return false;
        }
        fields
            .chunks(2)
            .all(|pair| string(&self.bytes, &mut at) == pair[0].deref())
    }

    /// Appends an entry whose ID is above every ID in the node (and is the
    /// node's key when the node is empty).
    pub(super) fn push<F: Deref<Target = [u8]>>(&mut self, id: StreamId, fields: &[F]) {
        debug_assert!(self.count == 0 || id > self.last);
        let previous = self.last;
        let same = self.same_fields_as_master(fields);
        let out = &mut self.bytes;
        out.push(u8::from(same));
        let ms_delta = id.ms - previous.ms;
        put_varint(out, ms_delta);
        put_varint(
            out,
            if ms_delta == 0 {
                id.seq - previous.seq
            } else {
                id.seq
            },
        );
        if same {
            for pair in fields.chunks(2) {
                put_string(out, pair[1].deref());
            }
        } else {
            put_varint(out, (fields.len() / 2) as u64);
            for field in fields {
                put_string(out, field.deref());
            }
        }
        self.count += 1;
        self.last = id;
    }

    /// The entries in order; `first` is the node's key.
    pub(super) fn entries(&self, first: StreamId) -> NodeIter<'_> {
        let (start, master_count) = self.master();
        NodeIter {
            bytes: &self.bytes,
            at: start,
            master_count,
            previous: first,
            left: self.count,
        }
    }

    /// Approximate heap bytes.
    pub(super) fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    /// Gives back spare capacity (a node that will take no more entries).
    pub(super) fn seal(&mut self) {
        self.bytes.shrink_to_fit();
    }

    /// A node of `entries` (at least one), built afresh.
    pub(super) fn build<'a>(entries: impl IntoIterator<Item = StreamEntry<'a>>) -> Option<Node> {
        let mut node: Option<Node> = None;
        for entry in entries {
            match &mut node {
                None => node = Some(Node::new(entry.id, &entry.fields)),
                Some(node) => node.push(entry.id, &entry.fields),
            }
        }
        if let Some(node) = &mut node {
            node.seal();
        }
        node
    }
}

pub(super) struct NodeIter<'a> {
    bytes: &'a [u8],
    at: usize,
    master_count: usize,
    previous: StreamId,
    left: u32,
}

impl NodeIter<'_> {
    /// The next entry's ID and whether it has the master fields, reading
    /// past them (its values come next).
    fn header(&mut self) -> (StreamId, bool) {
        let bytes = self.bytes;
        let same = bytes[self.at] == 1;
        self.at += 1;
        let ms_delta = varint(bytes, &mut self.at);
        let seq = varint(bytes, &mut self.at);
        let id = if ms_delta == 0 {
            StreamId {
                ms: self.previous.ms,
                seq: self.previous.seq + seq,
            }
        } else {
            StreamId {
                ms: self.previous.ms + ms_delta,
                seq,
            }
        };
        (id, same)
    }

    /// Moves past the entries below `start` reading only their IDs and
    /// the lengths of their strings: a range that starts inside the node
    /// (XREADGROUP's next entry, XRANGE from an ID) builds no field list
    /// for the entries before it.
    pub(super) fn skip_below(&mut self, start: StreamId) {
        while self.left > 0 {
            let (at, previous) = (self.at, self.previous);
            let (id, same) = self.header();
            if id >= start {
                (self.at, self.previous) = (at, previous);
                return;
            }
            let strings = if same {
                self.master_count
            } else {
                2 * varint(self.bytes, &mut self.at) as usize
            };
            for _ in 0..strings {
                string(self.bytes, &mut self.at);
            }
            self.previous = id;
            self.left -= 1;
        }
    }
}

impl<'a> Iterator for NodeIter<'a> {
    type Item = StreamEntry<'a>;

    fn next(&mut self) -> Option<StreamEntry<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (id, same) = self.header();
        self.previous = id;
        let bytes = self.bytes;
        let fields = if same {
            let mut master_at = 0;
            varint(bytes, &mut master_at);
            let mut fields = Vec::with_capacity(self.master_count * 2);
            for _ in 0..self.master_count {
                fields.push(string(bytes, &mut master_at));
                fields.push(string(bytes, &mut self.at));
            }
            fields
        } else {
            let pairs = varint(bytes, &mut self.at) as usize;
            (0..pairs * 2)
                .map(|_| string(bytes, &mut self.at))
                .collect()
        };
        Some(StreamEntry { id, fields })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}
