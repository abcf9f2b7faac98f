//! `List`: the value of a Redis list key.
//!
//! A `VecDeque` gives O(1) push and pop at both ends and O(1) indexing, which
//! covers LPUSH/RPUSH/LPOP/RPOP/LINDEX/LSET; the commands that search or
//! reshape the middle (LINSERT, LREM, LPOS, LTRIM) are O(n) in Redis too.
//! Index arithmetic follows Redis (`t_list.c`): negative indexes count from
//! the tail, -1 being the last element.

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

/// A Redis list of byte strings, head first.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct List {
    items: VecDeque<Box<[u8]>>,
    /// Sum of element lengths, kept so memory accounting is O(1).
    payload_bytes: usize,
}

impl List {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// A list holding `items`, head first (the image decoder's constructor).
    pub(crate) fn from_items(items: VecDeque<Box<[u8]>>) -> Self {
        let payload_bytes = items.iter().map(|item| item.len()).sum();
        List {
            items,
            payload_bytes,
        }
    }

    /// Number of elements (LLEN).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the list has no elements.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Pushes each item at the head in turn, so the last one ends up first
    /// (LPUSH a b c gives c b a); returns the new length.
    pub fn push_front<I: IntoIterator<Item = Box<[u8]>>>(&mut self, items: I) -> usize {
        for item in items {
            self.payload_bytes += item.len();
            self.items.push_front(item);
        }
        self.items.len()
    }

    /// Pushes each item at the tail in turn (RPUSH); returns the new length.
    pub fn push_back<I: IntoIterator<Item = Box<[u8]>>>(&mut self, items: I) -> usize {
        for item in items {
            self.payload_bytes += item.len();
            self.items.push_back(item);
        }
        self.items.len()
    }

    /// Removes and returns up to `count` elements from the head (LPOP),
    /// head first.
    pub fn pop_front(&mut self, count: usize) -> Vec<Box<[u8]>> {
        let count = count.min(self.items.len());
        let popped: Vec<Box<[u8]>> = self.items.drain(..count).collect();
        self.payload_bytes -= popped.iter().map(|item| item.len()).sum::<usize>();
        popped
    }

    /// Removes and returns up to `count` elements from the tail (RPOP),
    /// tail first.
    pub fn pop_back(&mut self, count: usize) -> Vec<Box<[u8]>> {
        let count = count.min(self.items.len());
        let popped: Vec<Box<[u8]>> = self.items.drain(self.items.len() - count..).rev().collect();
        self.payload_bytes -= popped.iter().map(|item| item.len()).sum::<usize>();
        popped
    }

    /// The element at Redis index `index` (LINDEX); see [`resolve_index`].
    pub fn get(&self, index: i64) -> Option<&[u8]> {
        self.items
            .get(resolve_index(index, self.len())?)
            .map(|item| &item[..])
    }

    /// Replaces the element at Redis index `index` (LSET) and returns the old
    /// one; gives `value` back when the index is out of range (Redis replies
    /// "ERR index out of range").
    pub fn set(&mut self, index: i64, value: Box<[u8]>) -> Result<Box<[u8]>, Box<[u8]>> {
        let Some(position) = resolve_index(index, self.len()) else {
            return Err(value);
        };
        let Some(slot) = self.items.get_mut(position) else {
            return Err(value);
        };
        self.payload_bytes = self.payload_bytes - slot.len() + value.len();
        Ok(std::mem::replace(slot, value))
    }

    /// Inserts `value` before or after the first element equal to `pivot`,
    /// searching from the head (LINSERT); returns the new length, or `None`
    /// (and drops `value`) when no element equals `pivot`.
    pub fn insert(
        &mut self,
        position: InsertPosition,
        pivot: &[u8],
        value: Box<[u8]>,
    ) -> Option<usize> {
        let found = self.items.iter().position(|item| &item[..] == pivot)?;
        let at = match position {
            InsertPosition::Before => found,
            InsertPosition::After => found + 1,
        };
        self.payload_bytes += value.len();
        self.items.insert(at, value);
        Some(self.items.len())
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
            let mut threshold = self.items.len();
            for (position, item) in self.items.iter().enumerate().rev() {
                if matches == limit {
                    break;
                }
                if &item[..] == value {
                    matches += 1;
                    threshold = position;
                }
            }
            threshold
        } else {
            0
        };
        let mut removed = 0;
        let mut removed_bytes = 0;
        let mut position = 0;
        self.items.retain(|item| {
            let remove = position >= first_removable && removed < limit && &item[..] == value;
            position += 1;
            if remove {
                removed += 1;
                removed_bytes += item.len();
            }
            !remove
        });
        self.payload_bytes -= removed_bytes;
        removed
    }

    /// Keeps only the elements in the inclusive Redis range `start..=stop`
    /// (LTRIM); see [`resolve_range`]. An empty range empties the list.
    pub fn trim(&mut self, start: i64, stop: i64) {
        let keep = resolve_range(start, stop, self.len());
        let tail_bytes: usize = self.items.range(keep.end..).map(|item| item.len()).sum();
        let head_bytes: usize = self.items.range(..keep.start).map(|item| item.len()).sum();
        self.items.truncate(keep.end);
        self.items.drain(..keep.start);
        self.payload_bytes -= tail_bytes + head_bytes;
    }

    /// The elements in the inclusive Redis range `start..=stop` (LRANGE),
    /// head first; see [`resolve_range`].
    pub fn range(&self, start: i64, stop: i64) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.items
            .range(resolve_range(start, stop, self.len()))
            .map(|item| &item[..])
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
        let len = self.items.len();
        let limit = if count == 0 { usize::MAX } else { count };
        let compared = if max_len == 0 { len } else { max_len.min(len) };
        let mut skip = rank.get().unsigned_abs() - 1;
        let mut found = Vec::new();
        let mut visit = |position: usize| -> bool {
            if &self.items[position][..] == value {
                if skip > 0 {
                    skip -= 1;
                } else {
                    found.push(position);
                }
            }
            found.len() < limit
        };
        if rank.get() > 0 {
            for position in 0..compared {
                if !visit(position) {
                    break;
                }
            }
        } else {
            for position in (len - compared..len).rev() {
                if !visit(position) {
                    break;
                }
            }
        }
        found
    }

    /// All elements, head first.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + DoubleEndedIterator + '_ {
        self.items.iter().map(|item| &item[..])
    }

    /// Estimated heap bytes owned by this list, for memory accounting: the
    /// element bytes plus a per-allocation allowance, plus the deque's slots
    /// (its capacity, which may exceed its length). O(1).
    pub fn approx_heap_bytes(&self) -> usize {
        self.payload_bytes
            + ALLOCATION_OVERHEAD_BYTES * self.len()
            + self.items.capacity() * std::mem::size_of::<Box<[u8]>>()
    }
}

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

    fn list(items: &[&str]) -> List {
        let mut list = List::new();
        list.push_back(items.iter().map(|item| item.as_bytes().into()));
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
        assert_eq!(
            list.push_front([b"a".as_slice().into(), b"b".as_slice().into()]),
            2
        );
        assert_eq!(list.push_back([b"c".as_slice().into()]), 3);
        assert_eq!(strings(list.iter()), vec!["b", "a", "c"]);
        assert_eq!(
            list.pop_back(2),
            vec![Box::from(&b"c"[..]), Box::from(&b"a"[..])]
        );
        assert_eq!(list.pop_front(5), vec![Box::from(&b"b"[..])]);
        assert!(list.pop_front(1).is_empty());
        assert_eq!(list.approx_heap_bytes() - list.items.capacity() * 16, 0);
    }

    #[test]
    fn get_and_set_with_negative_indexes() {
        let mut list = list(&["a", "b", "c"]);
        assert_eq!(list.get(-1), Some(&b"c"[..]));
        assert_eq!(list.get(-4), None);
        assert_eq!(
            list.set(-3, b"z".as_slice().into()),
            Ok(Box::from(&b"a"[..]))
        );
        assert_eq!(
            list.set(3, b"q".as_slice().into()),
            Err(Box::from(&b"q"[..]))
        );
        assert_eq!(strings(list.iter()), vec!["z", "b", "c"]);
    }

    #[test]
    fn linsert_finds_the_first_pivot() {
        let mut list = list(&["a", "p", "p"]);
        assert_eq!(
            list.insert(InsertPosition::After, b"p", b"x".as_slice().into()),
            Some(4)
        );
        assert_eq!(
            list.insert(InsertPosition::Before, b"a", b"y".as_slice().into()),
            Some(5)
        );
        assert_eq!(
            list.insert(InsertPosition::Before, b"none", b"w".as_slice().into()),
            None
        );
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
        assert_eq!(all.payload_bytes, 1);
    }

    #[test]
    fn ltrim_and_lrange() {
        let mut list = list(&["a", "b", "c", "d"]);
        assert_eq!(strings(list.range(1, -2)), vec!["b", "c"]);
        assert_eq!(strings(list.range(-100, 0)), vec!["a"]);
        assert_eq!(list.range(2, 1).len(), 0);
        list.trim(1, -2);
        assert_eq!(strings(list.iter()), vec!["b", "c"]);
        assert_eq!(list.payload_bytes, 2);
        list.trim(5, 10);
        assert!(list.is_empty());
        assert_eq!(list.payload_bytes, 0);
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
}
