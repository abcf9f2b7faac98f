//! `List`: the value of a Redis list key, its elements packed into nodes.
//!
//! A list is a deque of nodes, each a buffer holding up to [`NODE_BYTES`]
//! of elements end to end (as Redis's quicklist holds 8 KiB listpacks). A
//! push copies the element's bytes into the end node: no allocation of its
//! own, and a million 200-byte elements are some 25,000 buffers instead of
//! a million allocations and a deque of a million pointers (which the
//! first version was: under `LPUSH -P 16` to one list, a tenth of the
//! server's CPU went to allocating elements, zeroing the fresh pages they
//! took, and copying the pointer deque as it doubled). A node keeps its
//! slack at the end it grows from, so a push at the head costs what one
//! at the tail does.
//!
//! Position `i` is found by walking the nodes from the nearer end (a few
//! thousand steps in a million elements), as Redis walks its quicklist;
//! LINDEX and LSET are O(n) there too. The commands that reshape the
//! middle (LINSERT, LSET to a different length, LREM) rebuild the nodes
//! they touch. Index arithmetic follows Redis (`t_list.c`): negative
//! indexes count from the tail, -1 being the last element.

use std::collections::VecDeque;
use std::num::NonZeroI64;
use std::ops::Range;

use super::hashed::ALLOCATION_OVERHEAD_BYTES;

/// Resolves a Redis list index (LINDEX, LSET): `0..len` from the head,
/// `-len..-1` from the tail. `None` when out of range.
pub fn resolve_index(index: i64, len: usize) -> Option<usize> {
    // i128 so neither `len as i64` nor `index + len` can overflow.
    let len = len as i128;
    let index = i128::from(index);
    let resolved = if index < 0 { index + len } else { index };
    (0..len).contains(&resolved).then_some(resolved as usize)
}

/// Resolves a Redis inclusive index range (LRANGE, LTRIM, ZRANGE by rank)
/// to a half-open range of positions: negative ends count from the tail, a
/// start before the head is clamped to 0, a stop past the tail to the last
/// element; an empty range when start > stop or start is past the tail.
pub fn resolve_range(start: i64, stop: i64, len: usize) -> Range<usize> {
    let len_wide = len as i128;
    let mut start = i128::from(start);
    let mut stop = i128::from(stop);
    if start < 0 {
        start += len_wide;
    }
    if stop < 0 {
        stop += len_wide;
    }
    start = start.max(0);
    if start > stop || start >= len_wide {
        return 0..0;
    }
    let stop = stop.min(len_wide - 1);
    // Both ends now lie in 0..len, so the casts are lossless.
    start as usize..stop as usize + 1
}

/// Where LINSERT puts the new element relative to the pivot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertPosition {
    /// `LINSERT key BEFORE pivot element`.
    Before,
    /// `LINSERT key AFTER pivot element`.
    After,
}

/// The most element bytes a node packs before the list starts another
/// (Redis's default `list-max-listpack-size -2`). An element larger than
/// this has a node of its own, sized to it.
pub const NODE_BYTES: usize = 8 * 1024;

/// The first buffer of a list's first node: a short list stays small.
const FIRST_NODE_BYTES: usize = 64;

/// Up to [`NODE_BYTES`] of elements, end to end in `buf[lo..hi]`.
///
/// Offsets are `u32`: a node holding more than one element has a buffer
/// of at most `NODE_BYTES`, and a node of one large element starts it at
/// 0, so every offset fits whatever the element's size.
#[derive(Clone)]
struct Node {
    buf: Box<[u8]>,
    lo: usize,
    hi: usize,
    /// Where each element starts in `buf`, head first; an element ends
    /// where the next starts, the last at `hi`.
    starts: VecDeque<u32>,
}

impl Node {
    /// An empty node of `capacity` bytes, its free space all at the end
    /// it will grow from.
    fn empty(capacity: usize, grows_at_front: bool) -> Node {
        let at = if grows_at_front { capacity } else { 0 };
        Node {
            buf: vec![0; capacity].into_boxed_slice(),
            lo: at,
            hi: at,
            starts: VecDeque::new(),
        }
    }

    /// `items` packed into one node with no free space (the middle of a
    /// rebuilt list).
    fn packed(items: &[&[u8]]) -> Node {
        let mut node = Node::empty(items.iter().map(|item| item.len()).sum(), false);
        for item in items {
            node.push_back(item);
        }
        node
    }

    fn len(&self) -> usize {
        self.starts.len()
    }

    fn used(&self) -> usize {
        self.hi - self.lo
    }

    /// The byte range of element `i` in `buf`.
    fn bounds(&self, i: usize) -> Range<usize> {
        let start = self.starts[i] as usize;
        let end = self
            .starts
            .get(i + 1)
            .map_or(self.hi, |&next| next as usize);
        start..end
    }

    fn get(&self, i: usize) -> &[u8] {
        &self.buf[self.bounds(i)]
    }

    /// Free bytes at the head (`front`) or the tail.
    fn room(&self, front: bool) -> usize {
        if front {
            self.lo
        } else {
            self.buf.len() - self.hi
        }
    }

    /// Adds `item` at the head; the caller made room.
    fn push_front(&mut self, item: &[u8]) {
        self.lo -= item.len();
        self.buf[self.lo..self.lo + item.len()].copy_from_slice(item);
        self.starts.push_front(self.lo as u32);
    }

    /// Adds `item` at the tail; the caller made room.
    fn push_back(&mut self, item: &[u8]) {
        let start = self.hi;
        self.hi += item.len();
        self.buf[start..self.hi].copy_from_slice(item);
        self.starts.push_back(start as u32);
    }

    /// Moves the elements to `buf[front_room..]` of a buffer of `capacity`
    /// bytes (this one, when the size is unchanged).
    fn relocate(&mut self, capacity: usize, front_room: usize) {
        let used = self.used();
        debug_assert!(front_room + used <= capacity);
        if capacity == self.buf.len() {
            self.buf.copy_within(self.lo..self.hi, front_room);
        } else {
            let mut buf = vec![0; capacity].into_boxed_slice();
            buf[front_room..front_room + used].copy_from_slice(&self.buf[self.lo..self.hi]);
            self.buf = buf;
        }
        for start in &mut self.starts {
            *start = (*start as usize - self.lo + front_room) as u32;
        }
        self.lo = front_room;
        self.hi = front_room + used;
    }

    /// Forgets the first `count` elements (at most all of them).
    fn drop_front(&mut self, count: usize) {
        self.starts.drain(..count);
        self.lo = self.starts.front().map_or(self.hi, |&start| start as usize);
    }

    /// Forgets the last `count` elements (at most all of them).
    fn drop_back(&mut self, count: usize) {
        let keep = self.len() - count;
        self.hi = self
            .starts
            .get(keep)
            .map_or(self.hi, |&start| start as usize);
        self.starts.truncate(keep);
    }
}

/// A Redis list of byte strings, head first.
#[derive(Clone, Default)]
pub struct List {
    /// Never an empty node.
    nodes: VecDeque<Node>,
    len: usize,
    /// The nodes' buffers, for memory accounting in O(1).
    buffer_bytes: usize,
}

impl List {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of elements (LLEN).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pushes each item at the head in turn, so the last one ends up first
    /// (LPUSH a b c gives c b a); returns the new length. The bytes are
    /// copied: an item may be borrowed.
    pub fn push_front<I: IntoIterator<Item = T>, T: AsRef<[u8]>>(&mut self, items: I) -> usize {
        for item in items {
            self.push_one(item.as_ref(), true);
        }
        self.len
    }

    /// Pushes each item at the tail in turn (RPUSH); returns the new
    /// length.
    pub fn push_back<I: IntoIterator<Item = T>, T: AsRef<[u8]>>(&mut self, items: I) -> usize {
        for item in items {
            self.push_one(item.as_ref(), false);
        }
        self.len
    }

    fn push_one(&mut self, item: &[u8], front: bool) {
        let end = if front {
            self.nodes.front_mut()
        } else {
            self.nodes.back_mut()
        };
        match end {
            Some(node) if node.used() + item.len() <= NODE_BYTES => {
                if node.room(front) < item.len() {
                    // Grow by doubling up to NODE_BYTES (or, at that size,
                    // move the elements), leaving half the slack at each
                    // end: a node pushed at both ends does not move for
                    // every push.
                    let used = node.used();
                    let capacity = (2 * node.buf.len()).max(used + item.len()).min(NODE_BYTES);
                    let slack = capacity - used - item.len();
                    let front_room = if front { item.len() } else { 0 } + slack / 2;
                    self.buffer_bytes = self.buffer_bytes + capacity - node.buf.len();
                    node.relocate(capacity, front_room);
                }
                if front {
                    node.push_front(item);
                } else {
                    node.push_back(item);
                }
            }
            _ => {
                // A list's first node starts small; a later one is needed
                // only once a node filled, so it starts full size.
                let capacity = if self.nodes.is_empty() {
                    item.len()
                        .max(FIRST_NODE_BYTES)
                        .next_power_of_two()
                        .min(NODE_BYTES)
                } else {
                    NODE_BYTES
                }
                .max(item.len());
                let mut node = Node::empty(capacity, front);
                self.buffer_bytes += capacity;
                if front {
                    node.push_front(item);
                    self.nodes.push_front(node);
                } else {
                    node.push_back(item);
                    self.nodes.push_back(node);
                }
            }
        }
        self.len += 1;
    }

    /// Removes and returns up to `count` elements from the head (LPOP),
    /// head first.
    pub fn pop_front(&mut self, count: usize) -> Vec<Box<[u8]>> {
        let count = count.min(self.len);
        let mut popped = Vec::with_capacity(count);
        for item in self.iter().take(count) {
            popped.push(Box::from(item));
        }
        self.drop_front(count);
        popped
    }

    /// Removes and returns up to `count` elements from the tail (RPOP),
    /// tail first.
    pub fn pop_back(&mut self, count: usize) -> Vec<Box<[u8]>> {
        let count = count.min(self.len);
        let mut popped = Vec::with_capacity(count);
        for item in self.iter().rev().take(count) {
            popped.push(Box::from(item));
        }
        self.drop_back(count);
        popped
    }

    /// Removes up to `count` elements from the head without copying them
    /// (a replayed LPOP, LTRIM).
    pub fn drop_front(&mut self, count: usize) {
        self.drop_end(count, true);
    }

    /// Removes up to `count` elements from the tail without copying them.
    pub fn drop_back(&mut self, count: usize) {
        self.drop_end(count, false);
    }

    /// Removes up to `count` elements from the head (`front`) or the tail:
    /// whole nodes go, the last one touched is cut.
    fn drop_end(&mut self, count: usize, front: bool) {
        let mut count = count.min(self.len);
        self.len -= count;
        while count > 0 {
            let node = if front {
                self.nodes.front_mut()
            } else {
                self.nodes.back_mut()
            }
            .expect("len counts the nodes' elements");
            if count < node.len() {
                if front {
                    node.drop_front(count);
                } else {
                    node.drop_back(count);
                }
                return;
            }
            count -= node.len();
            self.buffer_bytes -= node.buf.len();
            if front {
                self.nodes.pop_front();
            } else {
                self.nodes.pop_back();
            }
        }
    }

    /// The node holding position `position` (< len) and the element's
    /// place in it, walking from the nearer end.
    fn locate(&self, position: usize) -> (usize, usize) {
        debug_assert!(position < self.len);
        if position < self.len / 2 {
            let mut rest = position;
            for (n, node) in self.nodes.iter().enumerate() {
                if rest < node.len() {
                    return (n, rest);
                }
                rest -= node.len();
            }
        } else {
            let mut from_tail = self.len - position;
            for (n, node) in self.nodes.iter().enumerate().rev() {
                if from_tail <= node.len() {
                    return (n, node.len() - from_tail);
                }
                from_tail -= node.len();
            }
        }
        unreachable!(
            "position {position} is below the list's length {}",
            self.len
        )
    }

    /// The element at Redis index `index` (LINDEX); see [`resolve_index`].
    pub fn get(&self, index: i64) -> Option<&[u8]> {
        let (n, i) = self.locate(resolve_index(index, self.len)?);
        Some(self.nodes[n].get(i))
    }

    /// Replaces the element at Redis index `index` (LSET) and returns the
    /// old one; `None` when the index is out of range (Redis replies "ERR
    /// index out of range").
    pub fn set(&mut self, index: i64, value: &[u8]) -> Option<Box<[u8]>> {
        let (n, i) = self.locate(resolve_index(index, self.len)?);
        let node = &mut self.nodes[n];
        let bounds = node.bounds(i);
        let old = Box::from(&node.buf[bounds.clone()]);
        if bounds.len() == value.len() {
            node.buf[bounds].copy_from_slice(value);
        } else {
            self.rebuild(n, i, true, Some(value));
        }
        Some(old)
    }

    /// Node `n` packed again with its element `at` removed (`remove`)
    /// and/or `insert` put at `at`: one node, or more when it outgrows
    /// NODE_BYTES.
    fn rebuild(&mut self, n: usize, at: usize, remove: bool, insert: Option<&[u8]>) {
        let old = self.nodes.remove(n).expect("a located node");
        self.buffer_bytes -= old.buf.len();
        self.len -= old.len();
        let mut items: Vec<&[u8]> = (0..old.len()).map(|i| old.get(i)).collect();
        if remove {
            items.remove(at);
        }
        if let Some(value) = insert {
            items.insert(at, value);
        }
        self.len += items.len();
        let mut place = n;
        let mut rest = &items[..];
        while !rest.is_empty() {
            let mut bytes = 0;
            let count = rest
                .iter()
                .take_while(|item| {
                    bytes += item.len();
                    bytes <= NODE_BYTES
                })
                .count()
                .max(1);
            let node = Node::packed(&rest[..count]);
            self.buffer_bytes += node.buf.len();
            self.nodes.insert(place, node);
            place += 1;
            rest = &rest[count..];
        }
    }

    /// Inserts `value` before or after the first element equal to `pivot`,
    /// searching from the head (LINSERT); returns the new length, or `None`
    /// when no element equals `pivot`.
    pub fn insert(
        &mut self,
        position: InsertPosition,
        pivot: &[u8],
        value: &[u8],
    ) -> Option<usize> {
        let found = self.iter().position(|item| item == pivot)?;
        let at = match position {
            InsertPosition::Before => found,
            InsertPosition::After => found + 1,
        };
        if at == self.len {
            self.push_one(value, false);
        } else if at == 0 {
            self.push_one(value, true);
        } else {
            let (n, i) = self.locate(at);
            self.rebuild(n, i, false, Some(value));
        }
        Some(self.len)
    }

    /// Removes elements equal to `value` (LREM): the first `count` from the
    /// head when `count > 0`, the last `-count` from the tail when
    /// `count < 0`, all when `count == 0`. Returns how many were removed.
    pub fn remove(&mut self, count: i64, value: &[u8]) -> usize {
        let limit = match count {
            0 => usize::MAX,
            _ => usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX),
        };
        // Positions at or after `first_removable` may be removed. From the
        // tail, that is the position of the limit-th match counted backwards.
        let first_removable = if count < 0 {
            let mut matches = 0;
            let mut threshold = self.len;
            for (position, item) in self.iter().enumerate().rev() {
                if matches == limit {
                    break;
                }
                if item == value {
                    matches += 1;
                    threshold = position;
                }
            }
            threshold
        } else {
            0
        };
        if !self.iter().skip(first_removable).any(|item| item == value) {
            return 0;
        }
        // The list is copied once without them (LREM is O(n) in Redis too).
        let mut kept = List::new();
        let mut removed = 0;
        for (position, item) in self.iter().enumerate() {
            if position >= first_removable && removed < limit && item == value {
                removed += 1;
            } else {
                kept.push_one(item, false);
            }
        }
        *self = kept;
        removed
    }

    /// Keeps only the elements in the inclusive Redis range `start..=stop`
    /// (LTRIM); see [`resolve_range`]. An empty range empties the list.
    pub fn trim(&mut self, start: i64, stop: i64) {
        let keep = resolve_range(start, stop, self.len);
        self.drop_back(self.len - keep.end);
        self.drop_front(keep.start);
    }

    /// The elements in the inclusive Redis range `start..=stop` (LRANGE),
    /// head first; see [`resolve_range`].
    pub fn range(&self, start: i64, stop: i64) -> Iter<'_> {
        let range = resolve_range(start, stop, self.len);
        if range.is_empty() {
            return Iter::empty(self);
        }
        let (first, i) = self.locate(range.start);
        let (last, j) = self.locate(range.end - 1);
        Iter {
            nodes: &self.nodes,
            front: (first, i),
            back: (last, j + 1),
            remaining: range.len(),
        }
    }

    /// Positions (from the head, 0-based) of elements equal to `value` (LPOS).
    ///
    /// `rank` picks the first match to report: 1 is the first from the head,
    /// 2 the second...; -1 the first from the tail, -2 the second... Up to
    /// `count` positions are returned (0 = all), in search order. Only the
    /// first `max_len` elements in search order are compared (0 = all). LPOS
    /// without COUNT is `count = 1`, replying with the single position or nil.
    pub fn position(
        &self,
        value: &[u8],
        rank: NonZeroI64,
        count: usize,
        max_len: usize,
    ) -> Vec<usize> {
        let len = self.len;
        let limit = if count == 0 { usize::MAX } else { count };
        let compared = if max_len == 0 { len } else { max_len.min(len) };
        let mut skip = rank.get().unsigned_abs() - 1;
        let mut found = Vec::new();
        let mut visit = |position: usize, item: &[u8]| -> bool {
            if item == value {
                if skip > 0 {
                    skip -= 1;
                } else {
                    found.push(position);
                }
            }
            found.len() < limit
        };
        if rank.get() > 0 {
            for (position, item) in self.iter().take(compared).enumerate() {
                if !visit(position, item) {
                    break;
                }
            }
        } else {
            for (back, item) in self.iter().rev().take(compared).enumerate() {
                if !visit(len - 1 - back, item) {
                    break;
                }
            }
        }
        found
    }

    /// All elements, head first.
    pub fn iter(&self) -> Iter<'_> {
        match self.nodes.back() {
            None => Iter::empty(self),
            Some(last) => Iter {
                nodes: &self.nodes,
                front: (0, 0),
                back: (self.nodes.len() - 1, last.len()),
                remaining: self.len,
            },
        }
    }

    /// Estimated heap bytes owned by this list, for memory accounting: the
    /// nodes' buffers, their element offsets and allocations, and the
    /// node deque's slots. O(1).
    pub fn approx_heap_bytes(&self) -> usize {
        self.buffer_bytes
            + std::mem::size_of::<u32>() * self.len
            + 2 * ALLOCATION_OVERHEAD_BYTES * self.nodes.len()
            + self.nodes.capacity() * std::mem::size_of::<Node>()
    }
}

impl PartialEq for List {
    fn eq(&self, other: &List) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for List {}

/// A list's elements from `front` up to `back` (exclusive), as (node,
/// element) places; a place at a node's end stands for the next node's
/// start.
#[derive(Clone)]
pub struct Iter<'a> {
    nodes: &'a VecDeque<Node>,
    front: (usize, usize),
    back: (usize, usize),
    remaining: usize,
}

impl<'a> Iter<'a> {
    fn empty(list: &'a List) -> Iter<'a> {
        Iter {
            nodes: &list.nodes,
            front: (0, 0),
            back: (0, 0),
            remaining: 0,
        }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.remaining == 0 {
            return None;
        }
        let (mut n, mut i) = self.front;
        if i == self.nodes[n].len() {
            n += 1;
            i = 0;
        }
        self.front = (n, i + 1);
        self.remaining -= 1;
        Some(self.nodes[n].get(i))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let (mut n, mut i) = self.back;
        if i == 0 {
            n -= 1;
            i = self.nodes[n].len();
        }
        i -= 1;
        self.back = (n, i);
        self.remaining -= 1;
        Some(self.nodes[n].get(i))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl std::iter::FusedIterator for Iter<'_> {}

impl std::fmt::Debug for List {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn list(items: &[&str]) -> List {
        let mut list = List::new();
        list.push_back(items.iter().map(|item| item.as_bytes()));
        list
    }

    fn strings<'a>(items: impl Iterator<Item = &'a [u8]>) -> Vec<String> {
        items
            .map(|item| String::from_utf8_lossy(item).into_owned())
            .collect()
    }

    fn rank(value: i64) -> NonZeroI64 {
        NonZeroI64::new(value).expect("non-zero")
    }

    #[test]
    fn indexes_resolve_like_redis() {
        assert_eq!(resolve_index(0, 0), None);
        assert_eq!(resolve_index(-1, 0), None);
        assert_eq!(resolve_index(0, 3), Some(0));
        assert_eq!(resolve_index(-1, 3), Some(2));
        assert_eq!(resolve_index(-3, 3), Some(0));
        assert_eq!(resolve_index(-4, 3), None);
        assert_eq!(resolve_index(3, 3), None);
        assert_eq!(resolve_index(i64::MIN, 3), None);
        assert_eq!(resolve_index(i64::MAX, 3), None);
    }

    #[test]
    fn ranges_resolve_like_redis() {
        assert_eq!(resolve_range(0, -1, 0), 0..0);
        assert_eq!(resolve_range(0, -1, 5), 0..5);
        assert_eq!(resolve_range(-100, 100, 5), 0..5);
        assert_eq!(resolve_range(-2, -1, 5), 3..5);
        assert_eq!(resolve_range(3, 1, 5), 0..0);
        assert_eq!(resolve_range(5, 10, 5), 0..0);
        assert_eq!(resolve_range(0, -6, 5), 0..0);
        assert_eq!(resolve_range(i64::MIN, i64::MAX, 2), 0..2);
    }

    #[test]
    fn push_and_pop_both_ends() {
        let mut list = List::new();
        assert_eq!(list.push_front([b"a".as_slice(), b"b".as_slice()]), 2);
        assert_eq!(list.push_back([b"c"]), 3);
        assert_eq!(strings(list.iter()), vec!["b", "a", "c"]);
        assert_eq!(
            list.pop_back(2),
            vec![Box::from(&b"c"[..]), Box::from(&b"a"[..])]
        );
        assert_eq!(list.pop_front(5), vec![Box::from(&b"b"[..])]);
        assert!(list.pop_front(1).is_empty());
        check(&list);
        assert_eq!(list.buffer_bytes, 0);
    }

    #[test]
    fn get_and_set_with_negative_indexes() {
        let mut list = list(&["a", "b", "c"]);
        assert_eq!(list.get(-1), Some(&b"c"[..]));
        assert_eq!(list.get(-4), None);
        assert_eq!(list.set(-3, b"z"), Some(Box::from(&b"a"[..])));
        assert_eq!(list.set(3, b"q"), None);
        assert_eq!(list.set(1, b"longer"), Some(Box::from(&b"b"[..])));
        check(&list);
        assert_eq!(strings(list.iter()), vec!["z", "longer", "c"]);
    }

    #[test]
    fn linsert_finds_the_first_pivot() {
        let mut list = list(&["a", "p", "p"]);
        assert_eq!(list.insert(InsertPosition::After, b"p", b"x"), Some(4));
        assert_eq!(list.insert(InsertPosition::Before, b"a", b"y"), Some(5));
        assert_eq!(list.insert(InsertPosition::Before, b"none", b"w"), None);
        assert_eq!(strings(list.iter()), vec!["y", "a", "p", "x", "p"]);
    }

    #[test]
    fn lrem_from_either_end() {
        let items = ["x", "a", "x", "b", "x"];
        let mut head = list(&items);
        assert_eq!(head.remove(2, b"x"), 2);
        assert_eq!(strings(head.iter()), vec!["a", "b", "x"]);
        let mut tail = list(&items);
        assert_eq!(tail.remove(-2, b"x"), 2);
        assert_eq!(strings(tail.iter()), vec!["x", "a", "b"]);
        let mut all = list(&items);
        assert_eq!(all.remove(0, b"x"), 3);
        assert_eq!(strings(all.iter()), vec!["a", "b"]);
        assert_eq!(all.remove(i64::MIN, b"a"), 1);
        assert_eq!(all.remove(5, b"none"), 0);
        assert_eq!(strings(all.iter()), vec!["b"]);
        check(&all);
    }

    #[test]
    fn ltrim_and_lrange() {
        let mut list = list(&["a", "b", "c", "d"]);
        assert_eq!(strings(list.range(1, -2)), vec!["b", "c"]);
        assert_eq!(strings(list.range(-100, 0)), vec!["a"]);
        assert_eq!(list.range(2, 1).len(), 0);
        list.trim(1, -2);
        assert_eq!(strings(list.iter()), vec!["b", "c"]);
        check(&list);
        list.trim(5, 10);
        assert!(list.is_empty());
        check(&list);
        assert_eq!(list.buffer_bytes, 0);
    }

    #[test]
    fn lpos_rank_count_maxlen() {
        // The example from the LPOS documentation.
        let list = list(&["a", "b", "c", "1", "2", "3", "c", "c"]);
        assert_eq!(list.position(b"c", rank(1), 1, 0), vec![2]);
        assert_eq!(list.position(b"c", rank(2), 1, 0), vec![6]);
        assert_eq!(list.position(b"c", rank(-1), 1, 0), vec![7]);
        assert_eq!(list.position(b"c", rank(1), 2, 0), vec![2, 6]);
        assert_eq!(list.position(b"c", rank(-1), 2, 0), vec![7, 6]);
        assert_eq!(list.position(b"c", rank(1), 0, 0), vec![2, 6, 7]);
        assert_eq!(list.position(b"c", rank(1), 0, 3), vec![2]);
        assert_eq!(list.position(b"c", rank(1), 0, 2), Vec::<usize>::new());
        assert_eq!(list.position(b"c", rank(-1), 0, 2), vec![7, 6]);
        assert_eq!(list.position(b"c", rank(4), 0, 0), Vec::<usize>::new());
        assert_eq!(
            list.position(b"c", rank(i64::MIN), 0, 0),
            Vec::<usize>::new()
        );
        assert_eq!(
            List::new().position(b"c", rank(-1), 0, 0),
            Vec::<usize>::new()
        );
    }

    /// The list's invariants: no empty node, the counts and buffer bytes
    /// its fields keep, offsets in order inside each node, and a node of
    /// more than one element within NODE_BYTES.
    fn check(list: &List) {
        let mut len = 0;
        let mut buffers = 0;
        for node in &list.nodes {
            assert!(node.len() > 0, "an empty node");
            assert!(node.lo <= node.hi && node.hi <= node.buf.len());
            assert_eq!(node.starts.front().map(|&s| s as usize), Some(node.lo));
            assert!(node
                .starts
                .iter()
                .zip(node.starts.iter().skip(1))
                .all(|(a, b)| a <= b));
            assert!(node.len() == 1 || node.buf.len() <= NODE_BYTES);
            len += node.len();
            buffers += node.buf.len();
        }
        assert_eq!(list.len, len);
        assert_eq!(list.buffer_bytes, buffers);
        assert_eq!(list.iter().len(), len);
        assert_eq!(list.iter().rev().count(), len);
    }

    #[test]
    fn elements_pack_into_nodes_and_large_ones_stand_alone() {
        let mut list = List::new();
        let value = [7u8; 200];
        for _ in 0..1000 {
            list.push_front([&value[..]]);
        }
        check(&list);
        // 1000 elements of 200 bytes: 25 nodes of 40, not 1000 allocations;
        // about 211 bytes an element (the old deque of boxes took 232).
        assert_eq!(list.nodes.len(), 25);
        assert!(list.approx_heap_bytes() < 1000 * 212);
        let big = vec![1u8; 3 * NODE_BYTES];
        list.push_back([&big[..], b"after".as_slice()]);
        list.push_front([&big[..]]);
        check(&list);
        assert_eq!(list.get(-2), Some(&big[..]));
        assert_eq!(list.get(0), Some(&big[..]));
        assert_eq!(list.get(-1), Some(&b"after"[..]));
        assert_eq!(list.get(500), Some(&value[..]));
        list.drop_front(1);
        list.drop_back(2);
        check(&list);
        assert_eq!(list.len(), 1000);
        assert_eq!(list.iter().filter(|item| *item == &value[..]).count(), 1000);
    }

    /// One operation of the model test.
    #[derive(Clone, Debug)]
    enum Action {
        Push {
            front: bool,
            items: Vec<Vec<u8>>,
        },
        Pop {
            front: bool,
            count: usize,
        },
        Set {
            index: i64,
            value: Vec<u8>,
        },
        Insert {
            after: bool,
            pivot: u8,
            value: Vec<u8>,
        },
        Remove {
            count: i64,
            value: u8,
        },
        Trim {
            start: i64,
            stop: i64,
        },
    }

    /// Elements named by their first byte (0..4, so that LREM and LINSERT
    /// find them), of lengths from empty to several nodes.
    fn element() -> impl Strategy<Value = Vec<u8>> {
        (
            0u8..4,
            prop_oneof![
                0usize..3,
                100usize..900,
                Just(NODE_BYTES),
                2 * NODE_BYTES..3 * NODE_BYTES
            ],
        )
            .prop_map(|(name, len)| {
                let mut bytes = vec![b'.'; len.max(1)];
                bytes[0] = name;
                if len == 0 {
                    bytes.clear();
                }
                bytes
            })
    }

    fn action() -> impl Strategy<Value = Action> {
        prop_oneof![
            6 => (any::<bool>(), proptest::collection::vec(element(), 1..40))
                .prop_map(|(front, items)| Action::Push { front, items }),
            2 => (any::<bool>(), 0usize..50).prop_map(|(front, count)| Action::Pop { front, count }),
            1 => (-60i64..60, element()).prop_map(|(index, value)| Action::Set { index, value }),
            1 => (any::<bool>(), 0u8..4, element())
                .prop_map(|(after, pivot, value)| Action::Insert { after, pivot, value }),
            1 => (-3i64..3, 0u8..4).prop_map(|(count, value)| Action::Remove { count, value }),
            1 => (-80i64..80, -80i64..80).prop_map(|(start, stop)| Action::Trim { start, stop }),
        ]
    }

    proptest! {
        /// Every command's effect matches a deque of owned elements (the
        /// previous representation), and the invariants hold after each.
        #[test]
        fn behaves_as_a_deque(actions in proptest::collection::vec(action(), 1..60)) {
            let mut list = List::new();
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            for action in actions {
                match action {
                    Action::Push { front, items } => {
                        for item in &items {
                            if front { model.push_front(item.clone()) } else { model.push_back(item.clone()) }
                        }
                        let len = if front { list.push_front(&items) } else { list.push_back(&items) };
                        prop_assert_eq!(len, model.len());
                    }
                    Action::Pop { front, count } => {
                        let count = count.min(model.len());
                        let expected: Vec<Vec<u8>> = if front {
                            model.drain(..count).collect()
                        } else {
                            let at = model.len() - count;
                            model.drain(at..).rev().collect()
                        };
                        let popped = if front { list.pop_front(count) } else { list.pop_back(count) };
                        prop_assert_eq!(popped.iter().map(|p| p.to_vec()).collect::<Vec<_>>(), expected);
                    }
                    Action::Set { index, value } => {
                        let old = resolve_index(index, model.len())
                            .map(|at| std::mem::replace(&mut model[at], value.clone()));
                        prop_assert_eq!(list.set(index, &value).map(|old| old.to_vec()), old);
                    }
                    Action::Insert { after, pivot, value } => {
                        let found = model.iter().position(|item| item.first() == Some(&pivot));
                        let pivot_bytes = found.map(|at| model[at].clone());
                        if let Some(at) = found {
                            model.insert(at + usize::from(after), value.clone());
                        }
                        if let Some(pivot_bytes) = pivot_bytes {
                            let position = if after { InsertPosition::After } else { InsertPosition::Before };
                            prop_assert_eq!(list.insert(position, &pivot_bytes, &value), Some(model.len()));
                        }
                    }
                    Action::Remove { count, value } => {
                        let Some(target) = model.iter().find(|item| item.first() == Some(&value)).cloned() else {
                            continue;
                        };
                        let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
                        let mut removed = 0;
                        if count >= 0 {
                            let mut kept = VecDeque::new();
                            for item in model.drain(..) {
                                if removed < limit && item == target { removed += 1 } else { kept.push_back(item) }
                            }
                            model = kept;
                        } else {
                            let mut kept = VecDeque::new();
                            for item in model.drain(..).rev() {
                                if removed < limit && item == target { removed += 1 } else { kept.push_front(item) }
                            }
                            model = kept;
                        }
                        prop_assert_eq!(list.remove(count, &target), removed);
                    }
                    Action::Trim { start, stop } => {
                        let keep = resolve_range(start, stop, model.len());
                        model = model.drain(keep).collect();
                        list.trim(start, stop);
                    }
                }
                check(&list);
                prop_assert_eq!(list.len(), model.len());
                prop_assert!(list.iter().eq(model.iter().map(|item| &item[..])));
                prop_assert!(list.iter().rev().eq(model.iter().rev().map(|item| &item[..])));
                for (index, item) in model.iter().enumerate() {
                    prop_assert_eq!(list.get(index as i64), Some(&item[..]));
                }
                let (start, stop) = (model.len() as i64 / 3, -(model.len() as i64) / 4);
                let expected = resolve_range(start, stop, model.len());
                prop_assert!(list.range(start, stop).eq(model.range(expected).map(|item| &item[..])));
            }
        }
    }
}
