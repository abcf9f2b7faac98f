//! `RankedMap`: an order-statistic B+-tree.
//!
//! Sorted sets need "what is the rank of this member" and "which member has
//! rank r" in O(log n); Redis answers both with a skiplist whose links carry
//! spans. Here the same job is done by a B+-tree whose internal nodes record
//! the number of entries below each child, so a descent can add up (rank) or
//! subtract (select) the counts of the children it skips. A B-tree keeps
//! 16–32 entries per node in contiguous `Vec`s, which is kinder to the cache
//! than a skiplist's one heap node per entry, and needs no `unsafe`.
//!
//! Shape (the invariants [`RankedMap::check_invariants`] verifies):
//!
//! - all entries live in leaves; all leaves are at the same depth;
//! - a leaf holds at most [`LEAF_MAX`] entries and, unless it is the root, at
//!   least `LEAF_MAX / 2`;
//! - an internal node holds at most [`INTERNAL_MAX`] children and, unless it is
//!   the root, at least `INTERNAL_MAX / 2`; an internal root has at least two;
//! - an internal node with children `c0 .. cm` holds separators `s0 .. s(m-1)`
//!   with `keys(c_i) < s_i <= keys(c_(i+1))`. A separator is a copy of a key
//!   that was the first of its right subtree when it was chosen; removing that
//!   key later leaves the separator in place, which is still a valid bound;
//! - `counts[i]` is the number of entries in the subtree of `children[i]`.
//!
//! Ownership: a `RankedMap` is plain data with no interior mutability; the
//! caller (a collection inside the keyspace) decides who may touch it.

use std::cmp::Ordering;
use std::fmt;
use std::ops::Range;

/// Most entries a leaf holds before it splits.
///
/// Measured (`RankedMap<(u64, Box<[u8]>), ()>`, 1M keys inserted, looked up,
/// ranked and removed in random order, on the project's 2-core machine while
/// it was otherwise busy, so only differences above ~10 % mean anything):
/// 32 for both leaves and internal nodes was 10–20 % faster at get and rank
/// than 64, and 16 and 128 were slower than both. Rank sums the counts of
/// the children left of the path linearly, which favours the smaller node.
pub const LEAF_MAX: usize = 32;
const LEAF_MIN: usize = LEAF_MAX / 2;

/// Most children an internal node holds before it splits (see [`LEAF_MAX`]
/// for how it was chosen).
pub const INTERNAL_MAX: usize = 32;
const INTERNAL_MIN: usize = INTERNAL_MAX / 2;

// A merge joins a node one short of the minimum with a sibling at exactly the
// minimum; the result must fit in one node.
const _: () = assert!(LEAF_MIN - 1 + LEAF_MIN <= LEAF_MAX);
const _: () = assert!(INTERNAL_MIN - 1 + INTERNAL_MIN <= INTERNAL_MAX);
// Splitting an overfull node must leave both halves at or above the minimum.
const _: () = assert!(LEAF_MAX.div_ceil(2) >= LEAF_MIN);
const _: () = assert!(INTERNAL_MAX.div_ceil(2) >= INTERNAL_MIN);
const _: () = assert!(INTERNAL_MIN >= 2);

/// A key's order in 64 bits: `a <= b` implies `a.prefix() <= b.prefix()`.
///
/// A node is searched by scanning its keys' prefixes, which sit inside the
/// keys and need no heap access (a hash's or set's key starts with the
/// member's hash, a sorted set's with its score), and only keys whose prefix
/// equals the probe's are compared in full. A scan reads a node's cache
/// lines in order, which the hardware fetches together, where a binary
/// search waits for one miss per probe: on this project's machine a lookup
/// in a set of 100,000 members took 950 ns with binary search and 550 ns
/// with the scan (`BENCHMARKS.md`, 2026-11-29, eleventh session).
pub trait Prefixed {
    fn prefix(&self) -> u64;
}

impl Prefixed for u64 {
    fn prefix(&self) -> u64 {
        *self
    }
}

impl Prefixed for u32 {
    fn prefix(&self) -> u64 {
        u64::from(*self)
    }
}

/// Keys made of a prefix and the bytes that break its ties.
impl<A: Prefixed, B: ?Sized> Prefixed for (A, Box<B>) {
    fn prefix(&self) -> u64 {
        self.0.prefix()
    }
}

/// A value that can be compared with the keys of a map of `K`s without
/// building a `K`.
///
/// `std`'s `Borrow` cannot express "a `(u64, Box<[u8]>)` key looked up by a
/// `(u64, &[u8])`" because `Borrow` must return a reference into the key, so
/// lookups would have to allocate a boxed copy of the probe. `compare` must be
/// consistent with `K`'s `Ord`, and `prefix` with `K`'s [`Prefixed`]: a key
/// below the probe has a prefix no greater than the probe's, a key above it
/// one no smaller.
pub trait Probe<K> {
    /// How `self` orders relative to `key`, as `self.cmp(key)` would.
    fn compare(&self, key: &K) -> Ordering;
    /// The prefix `self` would have as a key.
    fn prefix(&self) -> u64;
}

impl<K: Ord + Prefixed> Probe<K> for K {
    fn compare(&self, key: &K) -> Ordering {
        self.cmp(key)
    }
    fn prefix(&self) -> u64 {
        Prefixed::prefix(self)
    }
}

/// The keys of hashes, sets and sorted sets are `(prefix, Box<bytes>)`; this
/// lets them be probed with a borrowed `(prefix, &bytes)`.
impl<A: Ord + Prefixed, B: Ord + ?Sized> Probe<(A, Box<B>)> for (A, &B) {
    fn compare(&self, key: &(A, Box<B>)) -> Ordering {
        self.0.cmp(&key.0).then_with(|| (*self.1).cmp(&*key.1))
    }
    fn prefix(&self) -> u64 {
        self.0.prefix()
    }
}

#[derive(Clone)]
enum Node<K, V> {
    Leaf(Leaf<K, V>),
    Internal(Internal<K, V>),
}

#[derive(Clone)]
struct Leaf<K, V> {
    keys: Vec<K>,
    vals: Vec<V>,
}

#[derive(Clone)]
struct Internal<K, V> {
    separators: Vec<K>,
    children: Vec<Node<K, V>>,
    counts: Vec<usize>,
}

/// What a removal looks for.
enum Target<'q, Q: ?Sized> {
    Key(&'q Q),
    Rank(usize),
}

/// A node that overflowed split in two: the separator to insert into the
/// parent, the new right sibling and the number of entries it holds.
struct Split<K, V> {
    separator: K,
    right: Node<K, V>,
    right_count: usize,
}

impl<K, V> Node<K, V> {
    fn empty_leaf() -> Self {
        Node::Leaf(Leaf {
            keys: Vec::new(),
            vals: Vec::new(),
        })
    }

    /// Whether this (non-root) node is below its minimum fill.
    fn is_underfull(&self) -> bool {
        match self {
            Node::Leaf(leaf) => leaf.keys.len() < LEAF_MIN,
            Node::Internal(node) => node.children.len() < INTERNAL_MIN,
        }
    }

    /// Whether this node can give one entry (or child) to a sibling and stay
    /// at or above its minimum fill.
    fn can_lend(&self) -> bool {
        match self {
            Node::Leaf(leaf) => leaf.keys.len() > LEAF_MIN,
            Node::Internal(node) => node.children.len() > INTERNAL_MIN,
        }
    }

    fn drain_into(self, out: &mut Vec<(K, V)>) {
        match self {
            Node::Leaf(leaf) => out.extend(leaf.keys.into_iter().zip(leaf.vals)),
            Node::Internal(node) => {
                for child in node.children {
                    child.drain_into(out);
                }
            }
        }
    }
}

/// Which child holds the entry of rank `rank`, and its rank inside that child.
/// The caller guarantees `rank < counts.iter().sum()`; if it does not, the last
/// child is returned with a rank past its end, which every caller treats as
/// "not found" rather than indexing with it.
fn child_by_rank(counts: &[usize], mut rank: usize) -> (usize, usize) {
    for (index, &count) in counts.iter().enumerate() {
        if rank < count {
            return (index, rank);
        }
        rank -= count;
    }
    (counts.len().saturating_sub(1), rank)
}

/// The positions of the sorted `keys` whose prefix is `prefix`: every key
/// before them orders below a probe with that prefix, every key after them
/// above it.
fn prefix_run<K: Prefixed>(keys: &[K], prefix: u64) -> Range<usize> {
    let start = keys
        .iter()
        .position(|k| k.prefix() >= prefix)
        .unwrap_or(keys.len());
    let run = keys[start..]
        .iter()
        .position(|k| k.prefix() != prefix)
        .unwrap_or(keys.len() - start);
    start..start + run
}

/// Index of the child whose key range contains `probe`: the number of
/// separators `<= probe`.
fn child_by_key<K: Prefixed, Q: Probe<K> + ?Sized>(separators: &[K], probe: &Q) -> usize {
    let run = prefix_run(separators, probe.prefix());
    let start = run.start;
    start + separators[run].partition_point(|s| probe.compare(s) != Ordering::Less)
}

fn leaf_search<K: Prefixed, Q: Probe<K> + ?Sized>(keys: &[K], probe: &Q) -> Result<usize, usize> {
    let run = prefix_run(keys, probe.prefix());
    let start = run.start;
    keys[run]
        .binary_search_by(|k| probe.compare(k).reverse())
        .map(|i| start + i)
        .map_err(|i| start + i)
}

impl<K: Ord + Clone + Prefixed, V> Node<K, V> {
    fn insert(&mut self, key: K, val: V) -> (Option<V>, Option<Split<K, V>>) {
        match self {
            Node::Leaf(leaf) => match leaf_search(&leaf.keys, &key) {
                Ok(index) => (Some(std::mem::replace(&mut leaf.vals[index], val)), None),
                Err(index) => {
                    leaf.keys.insert(index, key);
                    leaf.vals.insert(index, val);
                    if leaf.keys.len() <= LEAF_MAX {
                        return (None, None);
                    }
                    let middle = leaf.keys.len() / 2;
                    let keys = leaf.keys.split_off(middle);
                    let vals = leaf.vals.split_off(middle);
                    let separator = keys[0].clone();
                    let right_count = keys.len();
                    let right = Node::Leaf(Leaf { keys, vals });
                    (
                        None,
                        Some(Split {
                            separator,
                            right,
                            right_count,
                        }),
                    )
                }
            },
            Node::Internal(node) => {
                let index = child_by_key(&node.separators, &key);
                let (old, split) = node.children[index].insert(key, val);
                if old.is_none() {
                    node.counts[index] += 1;
                }
                if let Some(split) = split {
                    node.counts[index] -= split.right_count;
                    node.separators.insert(index, split.separator);
                    node.children.insert(index + 1, split.right);
                    node.counts.insert(index + 1, split.right_count);
                }
                if node.children.len() <= INTERNAL_MAX {
                    return (old, None);
                }
                // Children [0, middle) stay; separator middle-1 moves up.
                let middle = node.children.len() / 2;
                let children = node.children.split_off(middle);
                let counts = node.counts.split_off(middle);
                let separators = node.separators.split_off(middle);
                let Some(separator) = node.separators.pop() else {
                    unreachable!("an overfull internal node has separators");
                };
                let right_count = counts.iter().sum();
                let right = Node::Internal(Internal {
                    separators,
                    children,
                    counts,
                });
                (
                    old,
                    Some(Split {
                        separator,
                        right,
                        right_count,
                    }),
                )
            }
        }
    }

    fn remove<Q: Probe<K> + ?Sized>(&mut self, target: Target<'_, Q>) -> Option<(K, V)> {
        match self {
            Node::Leaf(leaf) => {
                let index = match target {
                    Target::Key(probe) => leaf_search(&leaf.keys, probe).ok()?,
                    Target::Rank(rank) if rank < leaf.keys.len() => rank,
                    Target::Rank(_) => return None,
                };
                Some((leaf.keys.remove(index), leaf.vals.remove(index)))
            }
            Node::Internal(node) => {
                let (index, target) = match target {
                    Target::Key(probe) => {
                        (child_by_key(&node.separators, probe), Target::Key(probe))
                    }
                    Target::Rank(rank) => {
                        let (index, rank) = child_by_rank(&node.counts, rank);
                        (index, Target::Rank(rank))
                    }
                };
                let removed = node.children[index].remove(target)?;
                node.counts[index] -= 1;
                if node.children[index].is_underfull() {
                    node.rebalance(index);
                }
                Some(removed)
            }
        }
    }
}

impl<K: Clone, V> Internal<K, V> {
    /// Restores the minimum fill of `children[index]` by borrowing from a
    /// sibling that can spare an entry, or else merging with a sibling.
    /// An internal node always has at least two children here (a non-root
    /// has `INTERNAL_MIN >= 2`, an internal root is collapsed at one).
    fn rebalance(&mut self, index: usize) {
        if index > 0 && self.children[index - 1].can_lend() {
            self.borrow_from_left(index);
        } else if index + 1 < self.children.len() && self.children[index + 1].can_lend() {
            self.borrow_from_right(index);
        } else if index > 0 {
            self.merge(index - 1);
        } else if self.children.len() > 1 {
            self.merge(index);
        }
    }

    fn borrow_from_left(&mut self, index: usize) {
        let (before, after) = self.children.split_at_mut(index);
        let moved = match (&mut before[index - 1], &mut after[0]) {
            (Node::Leaf(left), Node::Leaf(child)) => {
                let (Some(key), Some(val)) = (left.keys.pop(), left.vals.pop()) else {
                    unreachable!("a lending leaf is not empty");
                };
                child.keys.insert(0, key);
                child.vals.insert(0, val);
                self.separators[index - 1] = child.keys[0].clone();
                1
            }
            (Node::Internal(left), Node::Internal(child)) => {
                let (Some(grandchild), Some(count), Some(separator)) = (
                    left.children.pop(),
                    left.counts.pop(),
                    left.separators.pop(),
                ) else {
                    unreachable!("a lending internal node has children");
                };
                let old = std::mem::replace(&mut self.separators[index - 1], separator);
                child.separators.insert(0, old);
                child.children.insert(0, grandchild);
                child.counts.insert(0, count);
                count
            }
            _ => unreachable!("siblings are at the same depth"),
        };
        self.counts[index - 1] -= moved;
        self.counts[index] += moved;
    }

    fn borrow_from_right(&mut self, index: usize) {
        let (before, after) = self.children.split_at_mut(index + 1);
        let moved = match (&mut before[index], &mut after[0]) {
            (Node::Leaf(child), Node::Leaf(right)) => {
                child.keys.push(right.keys.remove(0));
                child.vals.push(right.vals.remove(0));
                self.separators[index] = right.keys[0].clone();
                1
            }
            (Node::Internal(child), Node::Internal(right)) => {
                let grandchild = right.children.remove(0);
                let count = right.counts.remove(0);
                let separator = right.separators.remove(0);
                let old = std::mem::replace(&mut self.separators[index], separator);
                child.separators.push(old);
                child.children.push(grandchild);
                child.counts.push(count);
                count
            }
            _ => unreachable!("siblings are at the same depth"),
        };
        self.counts[index + 1] -= moved;
        self.counts[index] += moved;
    }

    /// Merges `children[left + 1]` into `children[left]`.
    fn merge(&mut self, left: usize) {
        let right = self.children.remove(left + 1);
        let right_count = self.counts.remove(left + 1);
        let separator = self.separators.remove(left);
        match (&mut self.children[left], right) {
            (Node::Leaf(into), Node::Leaf(from)) => {
                into.keys.extend(from.keys);
                into.vals.extend(from.vals);
            }
            (Node::Internal(into), Node::Internal(from)) => {
                into.separators.push(separator);
                into.separators.extend(from.separators);
                into.children.extend(from.children);
                into.counts.extend(from.counts);
            }
            _ => unreachable!("siblings are at the same depth"),
        }
        self.counts[left] += right_count;
    }
}

/// An ordered map from `K` to `V` that also answers rank queries: the
/// position of a key, the key at a position, and the number of keys below a
/// bound, each in O(log n).
///
/// It is the shared engine of [`Hash`](super::Hash), [`Set`](super::Set) and
/// [`SortedSet`](super::SortedSet); see the module docs for the tree's shape.
#[derive(Clone)]
pub struct RankedMap<K, V> {
    root: Node<K, V>,
    len: usize,
}

impl<K, V> Default for RankedMap<K, V> {
    fn default() -> Self {
        RankedMap {
            root: Node::empty_leaf(),
            len: 0,
        }
    }
}

impl<K: Ord + Clone + Prefixed, V> RankedMap<K, V> {
    /// An empty map. Allocates nothing until the first insert.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a map from entries in strictly increasing key order in O(n),
    /// with leaves and internal nodes filled evenly between half and full.
    ///
    /// Used when a checkpoint image is loaded: rebuilding by repeated inserts
    /// would cost O(n log n) and leave nodes half empty. The order is the
    /// caller's promise (debug builds check it); an image decoder must check
    /// it itself, as an error, before calling this.
    pub fn from_sorted<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let entries: Vec<(K, V)> = entries.into_iter().collect();
        debug_assert!(
            entries.windows(2).all(|pair| pair[0].0 < pair[1].0),
            "from_sorted needs strictly increasing keys"
        );
        let len = entries.len();
        if len <= LEAF_MAX {
            let (keys, vals) = entries.into_iter().unzip();
            return RankedMap {
                root: Node::Leaf(Leaf { keys, vals }),
                len,
            };
        }

        // One level at a time: (node, entries below it, its first key).
        let mut level: Vec<(Node<K, V>, usize, K)> = Vec::new();
        let mut entries = entries.into_iter();
        for size in even_chunks(len, LEAF_MAX) {
            let (keys, vals): (Vec<K>, Vec<V>) = entries.by_ref().take(size).unzip();
            let Some(first) = keys.first().cloned() else {
                break;
            };
            level.push((Node::Leaf(Leaf { keys, vals }), size, first));
        }
        while level.len() > 1 {
            let mut parents = Vec::with_capacity(level.len().div_ceil(INTERNAL_MAX));
            let total = level.len();
            let mut nodes = level.into_iter();
            for size in even_chunks(total, INTERNAL_MAX) {
                let Some((first_child, first_count, first_key)) = nodes.next() else {
                    break;
                };
                let mut node = Internal {
                    separators: Vec::with_capacity(size - 1),
                    children: Vec::with_capacity(size),
                    counts: Vec::with_capacity(size),
                };
                node.children.push(first_child);
                node.counts.push(first_count);
                for (child, count, key) in nodes.by_ref().take(size - 1) {
                    node.separators.push(key);
                    node.children.push(child);
                    node.counts.push(count);
                }
                let count = node.counts.iter().sum();
                parents.push((Node::Internal(node), count, first_key));
            }
            level = parents;
        }
        let root = level
            .pop()
            .map_or_else(Node::empty_leaf, |(node, _, _)| node);
        RankedMap { root, len }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Inserts or replaces; returns the previous value of `key`, if any.
    /// The stored key is not replaced when the key was present.
    pub fn insert(&mut self, key: K, val: V) -> Option<V> {
        let (old, split) = self.root.insert(key, val);
        if old.is_none() {
            self.len += 1;
        }
        if let Some(split) = split {
            let left = std::mem::replace(&mut self.root, Node::empty_leaf());
            self.root = Node::Internal(Internal {
                separators: vec![split.separator],
                children: vec![left, split.right],
                counts: vec![self.len - split.right_count, split.right_count],
            });
        }
        old
    }

    /// Removes `key`; returns its value if it was present.
    pub fn remove<Q: Probe<K> + ?Sized>(&mut self, key: &Q) -> Option<V> {
        self.remove_entry(key).map(|(_, val)| val)
    }

    /// Removes `key`; returns the stored key and value if it was present.
    pub fn remove_entry<Q: Probe<K> + ?Sized>(&mut self, key: &Q) -> Option<(K, V)> {
        let removed = self.root.remove(Target::Key(key));
        self.after_remove(removed)
    }

    /// Removes the entry at `rank` (0-based, ascending).
    pub fn remove_at_rank(&mut self, rank: usize) -> Option<(K, V)> {
        if rank >= self.len {
            return None;
        }
        let removed = self.root.remove(Target::<K>::Rank(rank));
        self.after_remove(removed)
    }

    fn after_remove(&mut self, removed: Option<(K, V)>) -> Option<(K, V)> {
        if removed.is_some() {
            self.len -= 1;
            // A root left with one child is replaced by it: this is how the
            // tree gets shorter, and it keeps "an internal root has >= 2
            // children", which rebalancing relies on.
            while let Node::Internal(node) = &mut self.root {
                if node.children.len() != 1 {
                    break;
                }
                let Some(child) = node.children.pop() else {
                    break;
                };
                self.root = child;
            }
        }
        removed
    }

    /// Removes and returns the entries with ranks in `ranks` (clamped to the
    /// map), in ascending order.
    ///
    /// Removing k entries costs O(k log n); when k is a large share of the
    /// map, draining the whole map and bulk-building the rest in O(n) is
    /// cheaper, so that is done instead.
    pub fn remove_rank_range(&mut self, ranks: Range<usize>) -> Vec<(K, V)> {
        let end = ranks.end.min(self.len);
        let start = ranks.start.min(end);
        let count = end - start;
        if count == 0 {
            return Vec::new();
        }
        if count >= self.len / 4 {
            let mut all = std::mem::take(self).into_vec();
            let removed: Vec<(K, V)> = all.drain(start..end).collect();
            *self = Self::from_sorted(all);
            return removed;
        }
        let mut removed = Vec::with_capacity(count);
        for _ in 0..count {
            match self.remove_at_rank(start) {
                Some(entry) => removed.push(entry),
                None => break,
            }
        }
        removed
    }

    /// All entries in ascending order, consuming the map, in O(n).
    pub fn into_vec(self) -> Vec<(K, V)> {
        let mut out = Vec::with_capacity(self.len);
        self.root.drain_into(&mut out);
        out
    }

    /// The value of `key`, if present.
    pub fn get<Q: Probe<K> + ?Sized>(&self, key: &Q) -> Option<&V> {
        self.get_key_value(key).map(|(_, val)| val)
    }

    /// The stored key and value of `key`, if present.
    pub fn get_key_value<Q: Probe<K> + ?Sized>(&self, key: &Q) -> Option<(&K, &V)> {
        let mut node = &self.root;
        loop {
            match node {
                Node::Internal(inner) => {
                    node = &inner.children[child_by_key(&inner.separators, key)]
                }
                Node::Leaf(leaf) => {
                    let index = leaf_search(&leaf.keys, key).ok()?;
                    return Some((&leaf.keys[index], &leaf.vals[index]));
                }
            }
        }
    }

    /// A mutable reference to the value of `key`, if present.
    pub fn get_mut<Q: Probe<K> + ?Sized>(&mut self, key: &Q) -> Option<&mut V> {
        let mut node = &mut self.root;
        loop {
            match node {
                Node::Internal(inner) => {
                    let index = child_by_key(&inner.separators, key);
                    node = &mut inner.children[index];
                }
                Node::Leaf(leaf) => {
                    let index = leaf_search(&leaf.keys, key).ok()?;
                    return Some(&mut leaf.vals[index]);
                }
            }
        }
    }

    /// Whether `key` is present.
    pub fn contains_key<Q: Probe<K> + ?Sized>(&self, key: &Q) -> bool {
        self.get_key_value(key).is_some()
    }

    /// The 0-based ascending position of `key`, if present.
    pub fn rank<Q: Probe<K> + ?Sized>(&self, key: &Q) -> Option<usize> {
        let mut below = 0;
        let mut node = &self.root;
        loop {
            match node {
                Node::Internal(inner) => {
                    let index = child_by_key(&inner.separators, key);
                    below += inner.counts[..index].iter().sum::<usize>();
                    node = &inner.children[index];
                }
                Node::Leaf(leaf) => return leaf_search(&leaf.keys, key).ok().map(|i| below + i),
            }
        }
    }

    /// The number of keys strictly less than `key`, whether or not `key` is
    /// present: the rank `key` has or would have.
    pub fn lower_rank<Q: Probe<K> + ?Sized>(&self, key: &Q) -> usize {
        self.partition_rank(|k| key.compare(k) == Ordering::Greater)
    }

    /// The number of keys less than or equal to `key`.
    pub fn upper_rank<Q: Probe<K> + ?Sized>(&self, key: &Q) -> usize {
        self.partition_rank(|k| key.compare(k) != Ordering::Less)
    }

    /// The number of leading keys for which `is_before` holds, in O(log n).
    ///
    /// `is_before` must be monotone over all values of `K` (true for every key
    /// below some point, false from there on), because it is also applied to
    /// separators, which may be copies of keys since removed. This is how
    /// range bounds that are not themselves keys (a score without a member)
    /// are located. A predicate that is not monotone gets some rank in
    /// `0..=len`, never a panic.
    pub fn partition_rank<F: Fn(&K) -> bool>(&self, is_before: F) -> usize {
        let mut below = 0;
        let mut node = &self.root;
        loop {
            match node {
                Node::Internal(inner) => {
                    let index = inner.separators.partition_point(&is_before);
                    below += inner.counts[..index].iter().sum::<usize>();
                    node = &inner.children[index];
                }
                Node::Leaf(leaf) => return below + leaf.keys.partition_point(&is_before),
            }
        }
    }

    /// The entry at ascending 0-based position `rank`, if `rank < len`.
    pub fn select(&self, rank: usize) -> Option<(&K, &V)> {
        if rank >= self.len {
            return None;
        }
        let mut rank = rank;
        let mut node = &self.root;
        loop {
            match node {
                Node::Internal(inner) => {
                    let (index, inner_rank) = child_by_rank(&inner.counts, rank);
                    rank = inner_rank;
                    node = &inner.children[index];
                }
                Node::Leaf(leaf) => return Some((leaf.keys.get(rank)?, leaf.vals.get(rank)?)),
            }
        }
    }

    /// The smallest entry.
    pub fn first(&self) -> Option<(&K, &V)> {
        self.select(0)
    }

    /// The largest entry.
    pub fn last(&self) -> Option<(&K, &V)> {
        self.select(self.len.checked_sub(1)?)
    }

    /// Removes and returns the smallest entry.
    pub fn pop_first(&mut self) -> Option<(K, V)> {
        self.remove_at_rank(0)
    }

    /// Removes and returns the largest entry.
    pub fn pop_last(&mut self) -> Option<(K, V)> {
        self.remove_at_rank(self.len.checked_sub(1)?)
    }

    /// All entries in ascending order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        self.iter_from_rank(0)
    }

    /// Entries in ascending order starting at rank `rank` (empty when
    /// `rank >= len`). Positioning costs O(log n), each step O(1) amortised.
    pub fn iter_from_rank(&self, rank: usize) -> Iter<'_, K, V> {
        let mut iter = Iter {
            stack: Vec::new(),
            keys: &[],
            vals: &[],
            position: 0,
            remaining: self.len.saturating_sub(rank),
        };
        if iter.remaining == 0 {
            return iter;
        }
        let mut rank = rank;
        let mut node = &self.root;
        loop {
            match node {
                Node::Internal(inner) => {
                    let (index, inner_rank) = child_by_rank(&inner.counts, rank);
                    iter.stack.push((&inner.children[..], index));
                    rank = inner_rank;
                    node = &inner.children[index];
                }
                Node::Leaf(leaf) => {
                    iter.keys = &leaf.keys;
                    iter.vals = &leaf.vals;
                    iter.position = rank;
                    return iter;
                }
            }
        }
    }

    /// Entries in ascending order starting at the first key `>= key`
    /// (`inclusive`) or `> key` (not `inclusive`).
    pub fn range_from<Q: Probe<K> + ?Sized>(&self, key: &Q, inclusive: bool) -> Iter<'_, K, V> {
        let rank = if inclusive {
            self.lower_rank(key)
        } else {
            self.upper_rank(key)
        };
        self.iter_from_rank(rank)
    }

    /// Entries in descending order starting at rank `rank` and ending with
    /// rank 0 (empty when `rank >= len`).
    pub fn iter_rev_from_rank(&self, rank: usize) -> RevIter<'_, K, V> {
        let mut iter = RevIter {
            stack: Vec::new(),
            keys: &[],
            vals: &[],
            position: 0,
            remaining: 0,
        };
        if rank >= self.len {
            return iter;
        }
        iter.remaining = rank + 1;
        let mut rank = rank;
        let mut node = &self.root;
        loop {
            match node {
                Node::Internal(inner) => {
                    let (index, inner_rank) = child_by_rank(&inner.counts, rank);
                    iter.stack.push((&inner.children[..], index));
                    rank = inner_rank;
                    node = &inner.children[index];
                }
                Node::Leaf(leaf) => {
                    iter.keys = &leaf.keys;
                    iter.vals = &leaf.vals;
                    iter.position = rank + 1;
                    return iter;
                }
            }
        }
    }

    /// All entries in descending order.
    pub fn iter_rev(&self) -> RevIter<'_, K, V> {
        match self.len.checked_sub(1) {
            Some(last) => self.iter_rev_from_rank(last),
            None => self.iter_rev_from_rank(0),
        }
    }

    /// Checks every structural invariant listed in the module docs, in O(n).
    /// For tests and debugging; returns a description of the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut leaf_depth = None;
        let count = check_node(&self.root, true, 0, None, None, &mut leaf_depth)?;
        if count != self.len {
            return Err(format!("len is {} but the tree holds {count}", self.len));
        }
        Ok(())
    }
}

fn check_node<K: Ord + Prefixed, V>(
    node: &Node<K, V>,
    is_root: bool,
    depth: usize,
    lower: Option<&K>,
    upper: Option<&K>,
    leaf_depth: &mut Option<usize>,
) -> Result<usize, String> {
    match node {
        Node::Leaf(leaf) => {
            if leaf.keys.len() != leaf.vals.len() {
                return Err(format!(
                    "leaf at depth {depth}: {} keys, {} values",
                    leaf.keys.len(),
                    leaf.vals.len()
                ));
            }
            if leaf.keys.len() > LEAF_MAX {
                return Err(format!(
                    "leaf at depth {depth} overfull: {}",
                    leaf.keys.len()
                ));
            }
            if !is_root && leaf.keys.len() < LEAF_MIN {
                return Err(format!(
                    "leaf at depth {depth} underfull: {}",
                    leaf.keys.len()
                ));
            }
            if !leaf.keys.windows(2).all(|pair| pair[0] < pair[1]) {
                return Err(format!("leaf at depth {depth} not strictly increasing"));
            }
            if !leaf
                .keys
                .windows(2)
                .all(|pair| pair[0].prefix() <= pair[1].prefix())
            {
                return Err(format!(
                    "leaf at depth {depth}: prefixes out of the keys' order"
                ));
            }
            if let (Some(lower), Some(first)) = (lower, leaf.keys.first()) {
                if first < lower {
                    return Err(format!(
                        "leaf at depth {depth} has a key below its separator"
                    ));
                }
            }
            if let (Some(upper), Some(last)) = (upper, leaf.keys.last()) {
                if last >= upper {
                    return Err(format!(
                        "leaf at depth {depth} has a key at or above its separator"
                    ));
                }
            }
            match *leaf_depth {
                None => *leaf_depth = Some(depth),
                Some(expected) if expected != depth => {
                    return Err(format!("leaves at depths {expected} and {depth}"));
                }
                Some(_) => {}
            }
            Ok(leaf.keys.len())
        }
        Node::Internal(inner) => {
            let children = inner.children.len();
            if children > INTERNAL_MAX {
                return Err(format!(
                    "internal node at depth {depth} overfull: {children}"
                ));
            }
            let minimum = if is_root { 2 } else { INTERNAL_MIN };
            if children < minimum {
                return Err(format!(
                    "internal node at depth {depth} underfull: {children}"
                ));
            }
            if inner.separators.len() + 1 != children || inner.counts.len() != children {
                return Err(format!(
                    "internal node at depth {depth}: mismatched vector lengths"
                ));
            }
            if !inner.separators.windows(2).all(|pair| pair[0] < pair[1]) {
                return Err(format!(
                    "internal node at depth {depth}: separators not increasing"
                ));
            }
            let mut total = 0;
            for (index, child) in inner.children.iter().enumerate() {
                let child_lower = if index == 0 {
                    lower
                } else {
                    inner.separators.get(index - 1)
                };
                let child_upper = inner.separators.get(index).or(upper);
                let count = check_node(
                    child,
                    false,
                    depth + 1,
                    child_lower,
                    child_upper,
                    leaf_depth,
                )?;
                if count != inner.counts[index] {
                    return Err(format!(
                        "internal node at depth {depth}: child {index} holds {count}, recorded {}",
                        inner.counts[index]
                    ));
                }
                total += count;
            }
            Ok(total)
        }
    }
}

/// Sizes of `chunks` near-equal consecutive chunks covering `total` items with
/// at most `max` each. With more than one chunk every chunk holds more than
/// `max / 2`, the minimum fill of a non-root node.
fn even_chunks(total: usize, max: usize) -> impl Iterator<Item = usize> {
    let chunks = total.div_ceil(max).max(1);
    let base = total / chunks;
    let extra = total % chunks;
    (0..chunks).map(move |index| base + usize::from(index < extra))
}

/// Ascending iterator over a [`RankedMap`], from [`RankedMap::iter_from_rank`].
///
/// Safe Rust gives leaves no sibling links, so the iterator keeps the path
/// from the root: for each internal level, that level's children and the
/// index of the child being walked.
pub struct Iter<'a, K, V> {
    stack: Vec<(&'a [Node<K, V>], usize)>,
    keys: &'a [K],
    vals: &'a [V],
    position: usize,
    remaining: usize,
}

impl<'a, K, V> Iter<'a, K, V> {
    /// Moves to the first entry of the next leaf; false if there is none.
    fn next_leaf(&mut self) -> bool {
        while let Some((children, index)) = self.stack.pop() {
            if index + 1 < children.len() {
                self.stack.push((children, index + 1));
                let mut node = &children[index + 1];
                loop {
                    match node {
                        Node::Internal(inner) => {
                            self.stack.push((&inner.children[..], 0));
                            node = &inner.children[0];
                        }
                        Node::Leaf(leaf) => {
                            self.keys = &leaf.keys;
                            self.vals = &leaf.vals;
                            self.position = 0;
                            return true;
                        }
                    }
                }
            }
        }
        false
    }
}

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        if self.position >= self.keys.len() && !self.next_leaf() {
            self.remaining = 0;
            return None;
        }
        let index = self.position;
        self.position += 1;
        self.remaining -= 1;
        Some((self.keys.get(index)?, self.vals.get(index)?))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}

/// Descending iterator over a [`RankedMap`], from
/// [`RankedMap::iter_rev_from_rank`]. `position` counts the entries of the
/// current leaf not yet yielded.
pub struct RevIter<'a, K, V> {
    stack: Vec<(&'a [Node<K, V>], usize)>,
    keys: &'a [K],
    vals: &'a [V],
    position: usize,
    remaining: usize,
}

impl<'a, K, V> RevIter<'a, K, V> {
    /// Moves past the last entry of the previous leaf; false if there is none.
    fn previous_leaf(&mut self) -> bool {
        while let Some((children, index)) = self.stack.pop() {
            if index > 0 {
                self.stack.push((children, index - 1));
                let mut node = &children[index - 1];
                loop {
                    match node {
                        Node::Internal(inner) => {
                            let last = inner.children.len() - 1;
                            self.stack.push((&inner.children[..], last));
                            node = &inner.children[last];
                        }
                        Node::Leaf(leaf) => {
                            self.keys = &leaf.keys;
                            self.vals = &leaf.vals;
                            self.position = leaf.keys.len();
                            return true;
                        }
                    }
                }
            }
        }
        false
    }
}

impl<'a, K, V> Iterator for RevIter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        if self.position == 0 && !self.previous_leaf() {
            self.remaining = 0;
            return None;
        }
        self.position -= 1;
        self.remaining -= 1;
        Some((self.keys.get(self.position)?, self.vals.get(self.position)?))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<K, V> ExactSizeIterator for RevIter<'_, K, V> {}

impl<'a, K: Ord + Clone + Prefixed, V> IntoIterator for &'a RankedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Ord + Clone + Prefixed, V> FromIterator<(K, V)> for RankedMap<K, V> {
    /// Inserts one by one (any order; later duplicates win). Use
    /// [`RankedMap::from_sorted`] for sorted input.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut map = RankedMap::new();
        for (key, val) in entries {
            map.insert(key, val);
        }
        map
    }
}

impl<K: Ord + Clone + Prefixed, V: PartialEq> PartialEq for RankedMap<K, V> {
    /// Equal when the entries are equal, whatever the trees' shapes.
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<K: Ord + Clone + Prefixed, V: Eq> Eq for RankedMap<K, V> {}

impl<K: Ord + Clone + Prefixed + fmt::Debug, V: fmt::Debug> fmt::Debug for RankedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(map: &RankedMap<u32, u32>) {
        if let Err(problem) = map.check_invariants() {
            panic!("{problem}");
        }
    }

    #[test]
    fn empty_map_answers_every_query() {
        let map: RankedMap<u32, u32> = RankedMap::new();
        checked(&map);
        assert!(map.is_empty());
        assert_eq!(map.get(&1), None);
        assert_eq!(map.rank(&1), None);
        assert_eq!(map.lower_rank(&1), 0);
        assert_eq!(map.select(0), None);
        assert_eq!(map.first(), None);
        assert_eq!(map.last(), None);
        assert_eq!(map.iter().count(), 0);
        assert_eq!(map.iter_rev().count(), 0);
        assert_eq!(map.iter_rev_from_rank(0).count(), 0);
        assert_eq!(map.iter_from_rank(5).count(), 0);
    }

    #[test]
    fn one_element() {
        let mut map = RankedMap::new();
        assert_eq!(map.insert(7, 70), None);
        assert_eq!(map.insert(7, 71), Some(70));
        checked(&map);
        assert_eq!(map.len(), 1);
        assert_eq!(map.rank(&7), Some(0));
        assert_eq!(map.lower_rank(&7), 0);
        assert_eq!(map.upper_rank(&7), 1);
        assert_eq!(map.lower_rank(&8), 1);
        assert_eq!(map.select(0), Some((&7, &71)));
        assert_eq!(
            map.iter_rev_from_rank(0).collect::<Vec<_>>(),
            vec![(&7, &71)]
        );
        assert_eq!(map.remove(&7), Some(71));
        assert_eq!(map.remove(&7), None);
        checked(&map);
    }

    #[test]
    fn grows_and_shrinks_through_several_levels() {
        let mut map = RankedMap::new();
        // A multiplicative permutation of 0..N so inserts land everywhere.
        const N: u32 = 20_000;
        for i in 0..N {
            let key = (i * 7919) % N;
            map.insert(key, key * 2);
        }
        checked(&map);
        for rank in [0, 1, 63, 64, 65, 4095, 4096, 19_999] {
            let (key, val) = map.select(rank as usize).expect("in range");
            assert_eq!(*key, rank);
            assert_eq!(*val, rank * 2);
            assert_eq!(map.rank(&rank), Some(rank as usize));
        }
        let forward: Vec<u32> = map.iter_from_rank(19_990).map(|(k, _)| *k).collect();
        assert_eq!(forward, (19_990..N).collect::<Vec<_>>());
        let backward: Vec<u32> = map.iter_rev_from_rank(70).map(|(k, _)| *k).collect();
        assert_eq!(backward, (0..=70).rev().collect::<Vec<_>>());
        for i in 0..N {
            let key = (i * 4099) % N;
            if matches!(key % 3, 1 | 2) {
                assert_eq!(map.remove(&key), Some(key * 2));
            }
        }
        checked(&map);
        let expected: Vec<u32> = (0..N).filter(|k| k % 3 == 0).collect();
        assert_eq!(map.iter().map(|(k, _)| *k).collect::<Vec<_>>(), expected);
        assert_eq!(map.lower_rank(&4), 2);
        assert_eq!(map.upper_rank(&3), 2);
        assert_eq!(map.range_from(&4, true).next(), Some((&6, &12)));
        assert_eq!(map.range_from(&6, false).next(), Some((&9, &18)));
    }

    #[test]
    fn from_sorted_builds_valid_trees_at_every_size_boundary() {
        let leaf = LEAF_MAX as u32;
        let two_levels = (LEAF_MAX * INTERNAL_MAX) as u32;
        for len in [
            0,
            1,
            leaf - 1,
            leaf,
            leaf + 1,
            2 * leaf,
            2 * leaf + 1,
            two_levels,
            two_levels + 1,
            3 * two_levels + 5,
        ] {
            let map = RankedMap::from_sorted((0..len).map(|k| (k, k)));
            checked(&map);
            assert_eq!(map.len(), len as usize);
            assert!(map.iter().map(|(k, _)| *k).eq(0..len));
        }
    }

    #[test]
    fn remove_rank_range_both_strategies() {
        for (start, end) in [(10, 20), (0, 900), (500, 1000), (999, 5000), (7, 7)] {
            let mut map = RankedMap::from_sorted((0..1000u32).map(|k| (k, k)));
            let removed: Vec<u32> = map
                .remove_rank_range(start..end)
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            let end = end.min(1000);
            assert_eq!(removed, (start as u32..end as u32).collect::<Vec<_>>());
            checked(&map);
            assert_eq!(map.len(), 1000 - (end - start));
        }
    }

    #[test]
    fn borrowed_probe_finds_boxed_keys() {
        let mut map: RankedMap<(u64, Box<[u8]>), u8> = RankedMap::new();
        map.insert((1, b"b".to_vec().into_boxed_slice()), 1);
        map.insert((1, b"a".to_vec().into_boxed_slice()), 2);
        assert_eq!(map.get(&(1u64, &b"a"[..])), Some(&2));
        assert_eq!(map.rank(&(1u64, &b"b"[..])), Some(1));
        assert_eq!(map.remove(&(1u64, &b"a"[..])), Some(2));
        assert_eq!(map.len(), 1);
    }

    /// Many keys per prefix: runs of equal prefixes span nodes and
    /// separators, so the search's full comparisons inside a run (and the
    /// scan around it) decide every answer.
    #[test]
    fn keys_sharing_prefixes_are_found_compared_in_full() {
        use std::collections::BTreeMap;
        type Key = (u64, Box<[u8]>);
        let key = |i: u64| -> Key {
            (
                i % 5,
                format!("{:06}", i * 7919 % 10_007).into_bytes().into(),
            )
        };
        let mut map: RankedMap<Key, u64> = RankedMap::new();
        let mut model: BTreeMap<Key, u64> = BTreeMap::new();
        for i in 0..3_000 {
            assert_eq!(map.insert(key(i), i), model.insert(key(i), i));
        }
        map.check_invariants().expect("valid after inserts");
        for i in (0..3_000).step_by(3) {
            let probe = key(i);
            assert_eq!(map.remove(&(probe.0, &probe.1[..])), model.remove(&probe));
        }
        map.check_invariants().expect("valid after removals");
        for i in 0..3_100 {
            let probe = key(i);
            let borrowed = (probe.0, &probe.1[..]);
            assert_eq!(map.get(&borrowed), model.get(&probe), "get {i}");
            let rank = model.range(..&probe).count();
            assert_eq!(map.lower_rank(&borrowed), rank, "lower rank {i}");
            let present = model.contains_key(&probe);
            assert_eq!(map.rank(&borrowed), present.then_some(rank), "rank {i}");
        }
    }
}
