//! `Stream`: the value of a Redis stream key (Redis 7.0's data model).
//!
//! Entries live in packed nodes (`node.rs`) kept in a `BTreeMap` keyed by
//! each node's first ID: appends go to the last node, range reads seek
//! one node and walk on, as Redis's radix tree of listpacks does. Beside
//! the entries: the last ID ever generated (kept when the entries that
//! carried it are deleted, so IDs never go backwards), the count of
//! entries ever added, the largest deleted ID, the recorded first ID, and
//! the consumer groups (`groups.rs`).
//!
//! Every change is one of the methods below, called by `apply` with
//! decisions already made by the caller (the IDs, the number of entries a
//! trim removes, delivery times): the same calls on the same state reach
//! the same state, whatever the node layout, which is not part of the
//! logical state (two streams with the same entries are equal however
//! their nodes were cut).

mod groups;
mod node;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use groups::{Consumer, Group, Pending, ENTRIES_READ_UNKNOWN};
pub use node::StreamEntry;
use node::{Node, NodeIter};

use crate::op::Bytes;

/// A stream entry ID: milliseconds, then a sequence number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence part.
    pub seq: u64,
}

impl StreamId {
    /// `0-0`.
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    /// `18446744073709551615-18446744073709551615`.
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// An ID from its two parts.
    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next ID, None after MAX.
    pub fn next(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId::new(ms + 1, 0)),
            (ms, seq) => Some(StreamId::new(ms, seq + 1)),
        }
    }

    /// The previous ID, None before MIN.
    pub fn prev(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
            (ms, seq) => Some(StreamId::new(ms, seq - 1)),
        }
    }

    /// Whether this is `0-0`.
    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Redis's `stream-node-max-entries` and `stream-node-max-bytes`: when the
/// last node is full, an append starts a new one. Process-wide (the
/// server's configuration sets them); they shape nodes only, never the
/// logical state, so replay with other values reaches an equal stream.
static NODE_MAX_ENTRIES: AtomicUsize = AtomicUsize::new(100);
static NODE_MAX_BYTES: AtomicUsize = AtomicUsize::new(4096);

/// Sets `stream-node-max-entries` (0: no limit, as in Redis).
pub fn set_node_max_entries(max_entries: usize) {
    NODE_MAX_ENTRIES.store(max_entries, Ordering::Relaxed);
}

/// Sets `stream-node-max-bytes` (0: no limit but Redis's listpack limit
/// of 1 GiB).
pub fn set_node_max_bytes(max_bytes: usize) {
    NODE_MAX_BYTES.store(max_bytes, Ordering::Relaxed);
}

/// The node limits in force: (entries, bytes).
pub fn node_limits() -> (usize, usize) {
    let bytes = match NODE_MAX_BYTES.load(Ordering::Relaxed) {
        0 => MAX_NODE_BYTES,
        bytes => bytes.min(MAX_NODE_BYTES),
    };
    (NODE_MAX_ENTRIES.load(Ordering::Relaxed), bytes)
}

/// Redis's `STREAM_LISTPACK_MAX_SIZE`: no entry's fields and values may
/// total more (XADD's "Elements are too large to be stored").
pub const MAX_NODE_BYTES: usize = 1 << 30;

/// A Redis stream.
#[derive(Clone, Default)]
pub struct Stream {
    nodes: BTreeMap<StreamId, Node>,
    len: u64,
    last_id: StreamId,
    first_id: StreamId,
    max_deleted_id: StreamId,
    entries_added: u64,
    groups: BTreeMap<Bytes, Group>,
}

/// How many entries the first `count` a trim would remove, for XADD/XTRIM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimStrategy {
    /// Keep at most this many entries.
    MaxLen(u64),
    /// Keep entries with IDs at or above this.
    MinId(StreamId),
}

impl Stream {
    /// An empty stream (XGROUP CREATE MKSTREAM).
    pub fn new() -> Stream {
        Stream::default()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the stream holds no entries (the key still exists).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The last ID ever generated or set (XSETID): every new ID is above it.
    pub fn last_id(&self) -> StreamId {
        self.last_id
    }

    /// Redis's recorded first ID (`recorded-first-entry-id`).
    pub fn first_id(&self) -> StreamId {
        self.first_id
    }

    /// The largest ID XDEL removed (0-0: none).
    pub fn max_deleted_id(&self) -> StreamId {
        self.max_deleted_id
    }

    /// Entries ever added.
    pub fn entries_added(&self) -> u64 {
        self.entries_added
    }

    /// Number of nodes (XINFO's `radix-tree-keys`).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The consumer groups, by name.
    pub fn groups(&self) -> &BTreeMap<Bytes, Group> {
        &self.groups
    }

    /// The group named `name`.
    pub fn group(&self, name: &[u8]) -> Option<&Group> {
        self.groups.get(name)
    }

    pub(crate) fn group_mut(&mut self, name: &[u8]) -> Option<&mut Group> {
        self.groups.get_mut(name)
    }

    /// The nodes that may hold IDs in `start..=end` (the node holding
    /// `start` may begin before it); none when `start > end`.
    fn nodes_covering(
        &self,
        start: StreamId,
        end: StreamId,
    ) -> std::collections::btree_map::Range<'_, StreamId, Node> {
        if start > end {
            return self.nodes.range(end..end);
        }
        let first_key = self
            .nodes
            .range(..=start)
            .next_back()
            .map(|(key, _)| *key)
            .unwrap_or(start);
        self.nodes.range(first_key..=end)
    }

    /// The entries with IDs in `start..=end`, in order.
    pub fn range(&self, start: StreamId, end: StreamId) -> Range<'_> {
        let nodes = self.nodes_covering(start, end);
        Range {
            nodes,
            current: None,
            start,
            end,
        }
    }

    /// The entries with IDs in `start..=end`, last first.
    pub fn rev_range(
        &self,
        start: StreamId,
        end: StreamId,
    ) -> impl Iterator<Item = StreamEntry<'_>> {
        let nodes = self.nodes_covering(start, end);
        nodes.rev().flat_map(move |(key, node)| {
            let mut entries: Vec<StreamEntry<'_>> = node
                .entries(*key)
                .filter(|e| e.id >= start && e.id <= end)
                .collect();
            entries.reverse();
            entries
        })
    }

    /// Every entry, in order.
    pub fn iter(&self) -> Range<'_> {
        self.range(StreamId::MIN, StreamId::MAX)
    }

    /// The entry with ID `id`.
    pub fn get(&self, id: StreamId) -> Option<StreamEntry<'_>> {
        self.range(id, id).next()
    }

    /// Whether an entry has ID `id`.
    pub fn contains(&self, id: StreamId) -> bool {
        self.get(id).is_some()
    }

    /// The ID of the last entry (Redis's `streamLastValidID`).
    pub fn last_entry_id(&self) -> Option<StreamId> {
        self.nodes.values().next_back().map(|node| node.last)
    }

    /// The ID of the first entry.
    pub fn first_entry_id(&self) -> Option<StreamId> {
        self.nodes.keys().next().copied()
    }

    /// How many entries, from the first, a trim removes (Redis's
    /// `streamTrim`: `approx` removes whole nodes only, and stops before
    /// `limit` entries when it is non-zero).
    pub fn trim_count(&self, strategy: TrimStrategy, approx: bool, limit: u64) -> u64 {
        self.trim_count_after(None, 0, strategy, approx, limit)
    }

    /// [`Stream::trim_count`] as it will be once an entry with ID `id` and
    /// `entry_bytes` of fields and values is appended (XADD trims after it
    /// adds; the count is decided before, so that both go in one record).
    pub fn trim_count_after(
        &self,
        appended: Option<StreamId>,
        entry_bytes: usize,
        strategy: TrimStrategy,
        approx: bool,
        limit: u64,
    ) -> u64 {
        // The nodes as they will be: (entries, last ID, whether the new
        // entry is in it, the node's key).
        let mut nodes: Vec<PlannedNode<'_>> = self
            .nodes
            .iter()
            .map(|(key, node)| (u64::from(node.count), node.last, false, Some((key, node))))
            .collect();
        let mut length = self.len;
        if let Some(id) = appended {
            length += 1;
            let (max_entries, max_bytes) = node_limits();
            let fits = self.nodes.values().next_back().is_some_and(|node| {
                !((max_entries != 0 && node.count as usize >= max_entries)
                    || node.bytes.len() + entry_bytes >= max_bytes)
            });
            match nodes.last_mut() {
                Some(last) if fits => {
                    last.0 += 1;
                    last.1 = id;
                    last.2 = true;
                }
                _ => nodes.push((1, id, true, None)),
            }
        }
        let mut removed = 0u64;
        for (entries, last, holds_new, node) in nodes {
            if let TrimStrategy::MaxLen(max) = strategy {
                if length <= max {
                    break;
                }
            }
            if limit != 0 && removed + entries > limit {
                break;
            }
            let whole = match strategy {
                TrimStrategy::MaxLen(max) => length - entries >= max,
                TrimStrategy::MinId(min) => last < min,
            };
            if whole {
                removed += entries;
                length -= entries;
                continue;
            }
            if approx {
                break;
            }
            let ids = node
                .into_iter()
                .flat_map(|(key, node)| node.entries(*key).map(|e| e.id))
                .chain(holds_new.then_some(last));
            for id in ids {
                let stop = match strategy {
                    TrimStrategy::MaxLen(max) => length <= max,
                    TrimStrategy::MinId(min) => id >= min,
                };
                if stop {
                    break;
                }
                removed += 1;
                length -= 1;
            }
            break;
        }
        removed
    }

    /// Redis's `streamRangeHasTombstones` from `start` to the end.
    pub fn has_tombstones_from(&self, start: StreamId) -> bool {
        if self.len == 0 || self.max_deleted_id.is_zero() {
            return false;
        }
        if self.first_id > self.max_deleted_id {
            return false;
        }
        start <= self.max_deleted_id
    }

    /// Redis's `streamEstimateDistanceFromFirstEverEntry`: the logical
    /// read counter of `id`, None when it cannot be known.
    pub fn estimate_entries_read(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.len == 0 && id <= self.last_id {
            return Some(self.entries_added);
        }
        match id.cmp(&self.last_id) {
            std::cmp::Ordering::Equal => return Some(self.entries_added),
            std::cmp::Ordering::Greater => return None,
            std::cmp::Ordering::Less => {}
        }
        if self.max_deleted_id.is_zero() || self.max_deleted_id < self.first_id {
            match id.cmp(&self.first_id) {
                std::cmp::Ordering::Less => return Some(self.entries_added - self.len),
                std::cmp::Ordering::Equal => return Some(self.entries_added - self.len + 1),
                std::cmp::Ordering::Greater => {}
            }
        }
        None
    }

    /// A group's lag (XINFO), None when it cannot be known.
    pub fn lag(&self, group: &Group) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if group.entries_read >= 0 && !self.has_tombstones_from(group.last_id) {
            return Some(self.entries_added.saturating_sub(group.entries_read as u64));
        }
        self.estimate_entries_read(group.last_id)
            .map(|read| self.entries_added.saturating_sub(read))
    }

    /// The group counters after delivering new entries up to `id` (one
    /// step of Redis's `streamReplyWithRange` for a group).
    pub fn entries_read_after(&self, entries_read: i64, id: StreamId) -> i64 {
        if entries_read >= 0 && !self.has_tombstones_from(id) {
            entries_read + 1
        } else if self.entries_added != 0 {
            self.estimate_entries_read(id).map_or(-1, |n| n as i64)
        } else {
            entries_read
        }
    }

    // ---- changes (called by `apply`) ----

    /// Appends an entry (`fields`: field, value, ...). An ID not above the
    /// last ID and the last entry is ignored (the caller checked), and so
    /// is an odd number of fields.
    pub fn append<F: Deref<Target = [u8]>>(&mut self, id: StreamId, fields: &[F]) {
        if id <= self.last_id
            || self.last_entry_id().is_some_and(|last| id <= last)
            || !fields.len().is_multiple_of(2)
        {
            return;
        }
        let (max_entries, max_bytes) = node_limits();
        let entry_bytes: usize = fields.iter().map(|f| f.deref().len()).sum();
        let mut fresh = true;
        if let Some(node) = self.nodes.values_mut().next_back() {
            let full = (max_entries != 0 && node.count as usize >= max_entries)
                || node.bytes.len() + entry_bytes >= max_bytes;
            if !full {
                node.push(id, fields);
                fresh = false;
            } else {
                node.seal();
            }
        }
        if fresh {
            self.nodes.insert(id, Node::new(id, fields));
        }
        self.len += 1;
        self.entries_added += 1;
        self.last_id = id;
        if self.len == 1 {
            self.first_id = id;
        }
    }

    /// Removes the first `count` entries (a resolved XTRIM or XADD trim).
    pub fn trim(&mut self, count: u64) -> u64 {
        let mut removed = 0;
        while removed < count {
            let Some(entry) = self.nodes.first_entry() else {
                break;
            };
            let node_count = u64::from(entry.get().count);
            if removed + node_count <= count {
                entry.remove();
                removed += node_count;
                continue;
            }
            let skip = (count - removed) as usize;
            let key = *entry.key();
            let node = entry.remove();
            let rebuilt = Node::build(node.entries(key).skip(skip)).expect("entries remain");
            let new_key = rebuilt_key(&rebuilt, &node, key, skip);
            self.nodes.insert(new_key, rebuilt);
            removed += skip as u64;
        }
        self.len -= removed;
        if self.len == 0 {
            self.first_id = StreamId::MIN;
        } else if removed > 0 {
            self.first_id = self.first_entry_id().unwrap_or_default();
        }
        removed
    }

    /// Removes the entries with these IDs (XDEL); how many there were.
    pub fn delete(&mut self, ids: &[StreamId]) -> u64 {
        let mut deleted = 0;
        let mut first_entry = false;
        for &id in ids {
            let Some((&key, _)) = self.nodes.range(..=id).next_back() else {
                continue;
            };
            let node = &self.nodes[&key];
            if id > node.last || !node.entries(key).any(|e| e.id == id) {
                continue;
            }
            let node = self.nodes.remove(&key).expect("just found");
            if let Some(rebuilt) = Node::build(node.entries(key).filter(|e| e.id != id)) {
                let new_key = rebuilt.first(&node, key, id);
                self.nodes.insert(new_key, rebuilt);
            }
            self.len -= 1;
            deleted += 1;
            if id == self.first_id {
                first_entry = true;
            }
            if id > self.max_deleted_id {
                self.max_deleted_id = id;
            }
        }
        if deleted > 0 {
            if self.len == 0 {
                self.first_id = StreamId::MIN;
            } else if first_entry {
                self.first_id = self.first_entry_id().unwrap_or_default();
            }
        }
        deleted
    }

    /// Sets the counters (XSETID, and undo).
    pub fn set_meta(
        &mut self,
        last_id: StreamId,
        entries_added: u64,
        max_deleted_id: StreamId,
        first_id: StreamId,
    ) {
        self.last_id = last_id;
        self.entries_added = entries_added;
        self.max_deleted_id = max_deleted_id;
        self.first_id = first_id;
    }

    pub(crate) fn groups_mut(&mut self) -> &mut BTreeMap<Bytes, Group> {
        &mut self.groups
    }

    /// Adds (or replaces) a group: for loading a stream from another
    /// format (Redis's RDB), not for the operation log's changes.
    pub fn insert_group(&mut self, name: Bytes, group: Group) {
        self.groups.insert(name, group);
    }

    /// Approximate heap bytes (INFO memory, MEMORY USAGE).
    pub fn approx_heap_bytes(&self) -> usize {
        const NODE_OVERHEAD_BYTES: usize = 64;
        let nodes: usize = self
            .nodes
            .values()
            .map(|n| n.heap_bytes() + NODE_OVERHEAD_BYTES)
            .sum();
        let groups: usize = self
            .groups
            .iter()
            .map(|(name, group)| name.len() + group.approx_heap_bytes())
            .sum();
        nodes + groups
    }

    /// Gives back the nodes' spare capacity (after a bulk load).
    pub(crate) fn seal_all(&mut self) {
        for node in self.nodes.values_mut() {
            node.seal();
        }
    }
}

impl Node {
    /// The key of a node rebuilt from `old` (keyed `key`) without `id`.
    fn first(&self, old: &Node, key: StreamId, id: StreamId) -> StreamId {
        if id != key {
            return key;
        }
        old.entries(key)
            .map(|e| e.id)
            .find(|&e| e != id)
            .expect("a rebuilt node has an entry")
    }
}

/// The key of a node rebuilt from `old` without its first `skip` entries.
fn rebuilt_key(_rebuilt: &Node, old: &Node, key: StreamId, skip: usize) -> StreamId {
    old.entries(key)
        .nth(skip)
        .map(|e| e.id)
        .expect("a rebuilt node has an entry")
}

/// A node as a trim plan sees it: entries, last ID, whether it holds the
/// entry about to be appended, and the node itself (None: a new one).
type PlannedNode<'a> = (u64, StreamId, bool, Option<(&'a StreamId, &'a Node)>);

/// Entries in `start..=end`, in order (see [`Stream::range`]).
pub struct Range<'a> {
    nodes: std::collections::btree_map::Range<'a, StreamId, Node>,
    current: Option<NodeIter<'a>>,
    start: StreamId,
    end: StreamId,
}

impl<'a> Iterator for Range<'a> {
    type Item = StreamEntry<'a>;

    fn next(&mut self) -> Option<StreamEntry<'a>> {
        loop {
            if let Some(current) = &mut self.current {
                current.skip_below(self.start);
                for entry in current.by_ref() {
                    if entry.id > self.end {
                        self.current = None;
                        return None;
                    }
                    if entry.id >= self.start {
                        return Some(entry);
                    }
                }
            }
            let (key, node) = self.nodes.next()?;
            if node.last < self.start {
                continue;
            }
            self.current = Some(node.entries(*key));
        }
    }
}

impl PartialEq for Stream {
    /// Logical equality: the same entries, counters and groups, however
    /// the entries are cut into nodes.
    fn eq(&self, other: &Stream) -> bool {
        self.len == other.len
            && self.last_id == other.last_id
            && self.first_id == other.first_id
            && self.max_deleted_id == other.max_deleted_id
            && self.entries_added == other.entries_added
            && self.groups == other.groups
            && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("len", &self.len)
            .field("last_id", &self.last_id)
            .field("first_id", &self.first_id)
            .field("max_deleted_id", &self.max_deleted_id)
            .field("entries_added", &self.entries_added)
            .field("groups", &self.groups)
            .finish()
    }
}

#[cfg(test)]
mod tests;
