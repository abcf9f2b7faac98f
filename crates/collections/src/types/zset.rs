//! `SortedSet`: the value of a Redis sorted-set key.
//!
//! Two structures, as in Redis (`t_zset.c` pairs a dict with a skiplist):
//! a hash map member -> score answers ZSCORE and membership in O(1), and a
//! [`RankedMap`] ordered by `(score, member)` answers everything positional
//! (ZRANK, ZRANGE, ZCOUNT, ZRANGEBYLEX, ZPOPMIN...) in O(log n). Every
//! member is in both, with the same score; each mutation updates both
//! before returning.

use std::cmp::Ordering;
use std::ops::Range;

use super::hashed::{self, HashedKey};
use super::hashed_map::HashedMap;
use super::ranked::{Prefixed, RankedMap};

/// A sorted-set score: an `f64` that is never NaN and never -0.0, so it has
/// a total order that agrees with `<` on numbers.
///
/// Redis refuses NaN scores ("resulting score is not a number") and treats
/// -0.0 and 0.0 as the same score; normalising at construction means the
/// order, equality and the checkpoint image all agree on that.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score(f64);

impl Score {
    /// The score `value`, with -0.0 turned into 0.0; `None` for NaN.
    pub fn new(value: f64) -> Option<Score> {
        if value.is_nan() {
            None
        } else if value == 0.0 {
            Some(Score(0.0))
        } else {
            Some(Score(value))
        }
    }

    /// The score as a number.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        // With NaN and -0.0 excluded, total_cmp is the numeric order.
        self.0.total_cmp(&other.0)
    }
}

/// The score's order as an unsigned integer: `total_cmp`'s signed view
/// of the bits (negative values' magnitude bits flipped), offset so that
/// unsigned comparison agrees.
impl Prefixed for Score {
    fn prefix(&self) -> u64 {
        let bits = self.0.to_bits() as i64;
        let ordered = bits ^ (((bits >> 63) as u64) >> 1) as i64;
        (ordered as u64) ^ (1 << 63)
    }
}

/// One end of a score range (ZCOUNT, ZRANGEBYSCORE): `1.5` is
/// `Inclusive(1.5)`, `(1.5` is `Exclusive(1.5)`, `-inf` / `+inf` are
/// `Inclusive(f64::NEG_INFINITY)` / `Inclusive(f64::INFINITY)`.
/// A NaN bound matches nothing (the server rejects it before getting here).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScoreBound {
    /// Scores equal to the bound are in range.
    Inclusive(f64),
    /// Scores equal to the bound are out of range.
    Exclusive(f64),
}

impl ScoreBound {
    /// Whether `score` lies below this bound taken as a minimum. Everything
    /// lies below a NaN minimum, so a NaN bound selects nothing.
    fn is_below_min(self, score: f64) -> bool {
        match self {
            ScoreBound::Inclusive(min) => score < min || min.is_nan(),
            ScoreBound::Exclusive(min) => score <= min || min.is_nan(),
        }
    }

    /// Whether `score` lies at or below this bound taken as a maximum.
    fn is_within_max(self, score: f64) -> bool {
        match self {
            ScoreBound::Inclusive(max) => score <= max,
            ScoreBound::Exclusive(max) => score < max,
        }
    }
}

/// One end of a lexicographic range (ZRANGEBYLEX, ZLEXCOUNT): `-` is `Min`,
/// `+` is `Max`, `[m` is `Inclusive(m)`, `(m` is `Exclusive(m)`. Members
/// compare as raw bytes (memcmp order), as in Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LexBound {
    /// `-`: below every member.
    Min,
    /// `+`: above every member.
    Max,
    /// `[member`: the member itself is in range.
    Inclusive(Box<[u8]>),
    /// `(member`: the member itself is out of range.
    Exclusive(Box<[u8]>),
}

impl LexBound {
    fn is_below_min(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Inclusive(min) => member < &min[..],
            LexBound::Exclusive(min) => member <= &min[..],
        }
    }

    fn is_within_max(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Inclusive(max) => member <= &max[..],
            LexBound::Exclusive(max) => member < &max[..],
        }
    }
}

type OrderKey = (Score, Box<[u8]>);

/// A Redis sorted set: unique byte-string members, each with a [`Score`],
/// ordered by `(score, member bytes)`. Ranks are 0-based and ascending; the
/// server computes reverse ranks as `len - 1 - rank`.
///
/// Two structures hold the members: the tree `order` by `(score, member)`
/// for ranks and ranges, and the table `scores` in `(hash(member), member)`
/// order for score lookups in O(1) and for ZSCAN, whose cursor is a hash as
/// in [`Hash`](super::Hash) and [`Set`](super::Set): a step costs O(count).
#[derive(Clone, Default)]
pub struct SortedSet {
    scores: HashedMap<f64>,
    order: RankedMap<OrderKey, ()>,
    /// Sum of member lengths (each member is stored twice).
    payload_bytes: usize,
}

impl SortedSet {
    /// An empty sorted set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a sorted set from entries in strictly increasing `(score,
    /// member)` order, in O(n). Fails with the index of the first entry whose
    /// member already appeared (with another score), which the order check
    /// alone cannot see; the caller (the image decoder) checks the order.
    pub(crate) fn from_sorted(entries: Vec<OrderKey>) -> Result<Self, usize> {
        let mut by_hash: Vec<(HashedKey, f64, usize)> = entries
            .iter()
            .enumerate()
            .map(|(index, (score, member))| (hashed::key_of(member.clone()), score.get(), index))
            .collect();
        by_hash.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.2.cmp(&b.2)));
        if let Some(pair) = by_hash
            .windows(2)
            .filter(|w| w[0].0 == w[1].0)
            .min_by_key(|w| w[1].2)
        {
            return Err(pair[1].2);
        }
        let payload_bytes = entries.iter().map(|(_, member)| member.len()).sum();
        let scores = HashedMap::from_sorted(
            by_hash
                .into_iter()
                .map(|((hash, member), score, _)| (hash, member, score)),
        );
        let order = RankedMap::from_sorted(entries.into_iter().map(|key| (key, ())));
        Ok(SortedSet {
            scores,
            order,
            payload_bytes,
        })
    }

    /// Number of members (ZCARD).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the set has no members.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Adds `member` with `score` or moves it to `score` (ZADD); returns the
    /// previous score, `None` when the member is new.
    pub fn insert(&mut self, member: &[u8], score: Score) -> Option<f64> {
        let Some(slot) = self.scores.try_insert(member, score.get()) else {
            self.order.insert((score, member.into()), ());
            self.payload_bytes += member.len();
            return None;
        };
        let old = *slot;
        if old == score.get() {
            return Some(old);
        }
        *slot = score.get();
        // Move the tree entry, reusing its boxed member.
        let boxed = match self.order.remove_entry(&(Score(old), member)) {
            Some(((_, boxed), ())) => boxed,
            None => {
                debug_assert!(false, "member in the score map but not in the order tree");
                member.into()
            }
        };
        self.order.insert((score, boxed), ());
        Some(old)
    }

    /// Removes `member` (ZREM); returns its score if it was present.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let (_, score) = self.scores.remove(member)?;
        let removed = self.order.remove(&(Score(score), member));
        debug_assert!(
            removed.is_some(),
            "member in the score map but not in the order tree"
        );
        self.payload_bytes -= member.len();
        Some(score)
    }

    /// The score of `member` (ZSCORE), in O(1).
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// Whether `member` is present.
    pub fn contains(&self, member: &[u8]) -> bool {
        self.scores.contains_key(member)
    }

    /// The ascending 0-based rank of `member` (ZRANK), in O(log n).
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        self.order.rank(&(Score(score), member))
    }

    /// The member and score at ascending rank `rank`.
    pub fn select(&self, rank: usize) -> Option<(&[u8], f64)> {
        self.order
            .select(rank)
            .map(|((score, member), ())| (&member[..], score.get()))
    }

    /// The ranks of the members whose scores lie between `min` and `max`
    /// (ZRANGEBYSCORE, ZREMRANGEBYSCORE), in O(log n). Empty when the bounds
    /// cross.
    pub fn score_range_ranks(&self, min: ScoreBound, max: ScoreBound) -> Range<usize> {
        let start = self
            .order
            .partition_rank(|(score, _)| min.is_below_min(score.get()));
        let end = self
            .order
            .partition_rank(|(score, _)| max.is_within_max(score.get()));
        start..end.max(start)
    }

    /// The number of members whose scores lie between `min` and `max`
    /// (ZCOUNT), in O(log n).
    pub fn count_in_score_range(&self, min: ScoreBound, max: ScoreBound) -> usize {
        self.score_range_ranks(min, max).len()
    }

    /// The ranks of the members between `min` and `max` in byte order
    /// (ZRANGEBYLEX, ZLEXCOUNT, ZREMRANGEBYLEX), in O(log n).
    ///
    /// As in Redis, this is only meaningful when all members have the same
    /// score: the tree is searched as if it were ordered by member alone
    /// (Redis walks its skiplist comparing members only; here
    /// [`RankedMap::partition_rank`] binary-searches with a member-only
    /// predicate). With mixed scores the result is some range within
    /// `0..=len`, never a panic.
    pub fn lex_range_ranks(&self, min: &LexBound, max: &LexBound) -> Range<usize> {
        let start = self
            .order
            .partition_rank(|(_, member)| min.is_below_min(member));
        let end = self
            .order
            .partition_rank(|(_, member)| max.is_within_max(member));
        start..end.max(start)
    }

    /// The number of members between `min` and `max` in byte order
    /// (ZLEXCOUNT); see [`SortedSet::lex_range_ranks`].
    pub fn count_in_lex_range(&self, min: &LexBound, max: &LexBound) -> usize {
        self.lex_range_ranks(min, max).len()
    }

    /// Members and scores with ranks in `ranks` (clamped), ascending (ZRANGE).
    pub fn range(&self, ranks: Range<usize>) -> impl ExactSizeIterator<Item = (&[u8], f64)> + '_ {
        let end = ranks.end.min(self.len());
        let count = end.saturating_sub(ranks.start);
        self.order
            .iter_from_rank(ranks.start)
            .take(count)
            .map(|((score, member), ())| (&member[..], score.get()))
    }

    /// Members and scores with ranks in `ranks` (clamped), descending: rank
    /// `end - 1` first, rank `start` last (ZRANGE ... REV, ZREVRANGE).
    pub fn range_rev(
        &self,
        ranks: Range<usize>,
    ) -> impl ExactSizeIterator<Item = (&[u8], f64)> + '_ {
        let end = ranks.end.min(self.len());
        let count = end.saturating_sub(ranks.start);
        // With count 0 the start rank does not matter; usize::MAX is empty.
        let first = if count == 0 { usize::MAX } else { end - 1 };
        self.order
            .iter_rev_from_rank(first)
            .take(count)
            .map(|((score, member), ())| (&member[..], score.get()))
    }

    /// All members and scores in ascending order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], f64)> + '_ {
        self.range(0..self.len())
    }

    /// Removes and returns up to `count` lowest-ranked members (ZPOPMIN),
    /// lowest first.
    pub fn pop_min(&mut self, count: usize) -> Vec<(Box<[u8]>, f64)> {
        self.remove_rank_range(0..count)
    }

    /// Removes and returns up to `count` highest-ranked members (ZPOPMAX),
    /// highest first.
    pub fn pop_max(&mut self, count: usize) -> Vec<(Box<[u8]>, f64)> {
        let start = self.len().saturating_sub(count);
        let mut popped = self.remove_rank_range(start..self.len());
        popped.reverse();
        popped
    }

    /// Removes the members with ranks in `ranks` (clamped) and returns them
    /// in ascending order (ZREMRANGEBYRANK; with [`score_range_ranks`] and
    /// [`lex_range_ranks`] also ZREMRANGEBYSCORE and ZREMRANGEBYLEX).
    ///
    /// [`score_range_ranks`]: SortedSet::score_range_ranks
    /// [`lex_range_ranks`]: SortedSet::lex_range_ranks
    pub fn remove_rank_range(&mut self, ranks: Range<usize>) -> Vec<(Box<[u8]>, f64)> {
        let removed = self.order.remove_rank_range(ranks);
        removed
            .into_iter()
            .map(|((score, member), ())| {
                let was_present = self.scores.remove(&member);
                debug_assert!(
                    was_present.is_some(),
                    "member in the order tree but not in the score map"
                );
                self.payload_bytes -= member.len();
                (member, score.get())
            })
            .collect()
    }

    /// A uniformly random member and its score (ZRANDMEMBER), in O(log n).
    pub fn random<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Option<(&[u8], f64)> {
        self.select(hashed::random_rank(self.len(), rng)?)
    }

    /// Total bytes of all members (each counted once), in O(1): lets the
    /// server bound the size of a reply before writing it.
    pub fn member_bytes(&self) -> usize {
        self.payload_bytes
    }

    /// One step of a hash-ordered scan (ZSCAN over a big set): the members
    /// whose xxh3-64 hash is at least `cursor`, in hash order, at least
    /// `count` of them when that many remain (a run of equal hashes is
    /// never split), and the cursor for the next step (0 when none remain).
    ///
    /// The order does not depend on scores, so a member present for a whole
    /// scan is returned by it however scores change or members come and go
    /// meanwhile. A step costs O(count).
    pub fn scan_by_hash(&self, cursor: u64, count: usize) -> (u64, Vec<(&[u8], f64)>) {
        let (next, batch) = self.scores.scan(cursor, count);
        (
            next,
            batch
                .into_iter()
                .map(|(member, &score)| (member, score))
                .collect(),
        )
    }

    /// Estimated heap bytes owned by this sorted set, for memory accounting:
    /// each member's bytes twice (the tree's copy, and the table's unless
    /// held in its slot) with a per-allocation allowance, the table and the
    /// tree's nodes. O(1).
    pub fn approx_heap_bytes(&self) -> usize {
        let len = self.len();
        let heap_keys = self.scores.heap_keys();
        2 * self.payload_bytes - self.scores.inline_key_bytes()
            + hashed::ALLOCATION_OVERHEAD_BYTES * (len + heap_keys)
            + self.scores.table_bytes()
            + hashed::tree_bytes(len, std::mem::size_of::<OrderKey>())
    }

    /// Checks that the score map and the order tree hold the same members
    /// with the same scores, and the tree's own invariants. O(n); for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.order.check_invariants()?;
        self.scores.check_invariants()?;
        if self.scores.len() != self.order.len() {
            return Err(format!(
                "{} scores but {} ordered members",
                self.scores.len(),
                self.order.len()
            ));
        }
        for ((score, member), ()) in self.order.iter() {
            if self.score(member) != Some(score.get()) {
                return Err(format!(
                    "member {:?} has tree score {}",
                    String::from_utf8_lossy(member),
                    score.get()
                ));
            }
        }
        if self.payload_bytes
            != self
                .scores
                .iter()
                .map(|(_, member, _)| member.len())
                .sum::<usize>()
        {
            return Err("payload byte count drifted".to_string());
        }
        Ok(())
    }
}

impl PartialEq for SortedSet {
    /// Equal when the same members have the same scores (the map follows
    /// from the tree).
    fn eq(&self, other: &Self) -> bool {
        self.order == other.order
    }
}

impl std::fmt::Debug for SortedSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.iter()
                    .map(|(member, score)| (String::from_utf8_lossy(member), score)),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(value: f64) -> Score {
        Score::new(value).expect("not NaN")
    }

    fn zset(entries: &[(&str, f64)]) -> SortedSet {
        let mut set = SortedSet::new();
        for (member, value) in entries {
            set.insert(member.as_bytes(), score(*value));
        }
        set
    }

    fn members<'a>(entries: impl Iterator<Item = (&'a [u8], f64)>) -> Vec<String> {
        entries
            .map(|(member, _)| String::from_utf8_lossy(member).into_owned())
            .collect()
    }

    #[test]
    fn a_score_s_prefix_orders_as_the_score() {
        let edges = [
            f64::NEG_INFINITY,
            f64::MIN,
            -1.5,
            -f64::MIN_POSITIVE,
            -f64::from_bits(1),
            0.0,
            f64::from_bits(1),
            f64::MIN_POSITIVE,
            1.0,
            1.5,
            f64::MAX,
            f64::INFINITY,
        ];
        let scores: Vec<Score> = edges.iter().map(|&v| score(v)).collect();
        for a in &scores {
            for b in &scores {
                assert_eq!(
                    a.cmp(b),
                    a.prefix().cmp(&b.prefix()),
                    "{} against {}",
                    a.get(),
                    b.get()
                );
            }
        }
        // -0.0 is stored as 0.0, so it shares its prefix.
        assert_eq!(score(-0.0).prefix(), score(0.0).prefix());
    }

    proptest::proptest! {
        #[test]
        fn any_two_scores_order_as_their_prefixes(a: f64, b: f64) {
            if let (Some(a), Some(b)) = (Score::new(a), Score::new(b)) {
                proptest::prop_assert_eq!(a.cmp(&b), a.prefix().cmp(&b.prefix()));
            }
        }
    }

    #[test]
    fn nan_is_refused_and_negative_zero_normalised() {
        assert_eq!(Score::new(f64::NAN), None);
        let zero = score(-0.0);
        assert!(zero.get().is_sign_positive());
        assert_eq!(zero, score(0.0));
        let mut set = SortedSet::new();
        set.insert(b"a", score(-0.0));
        set.insert(b"b", score(0.0));
        assert_eq!(set.score(b"a"), Some(0.0));
        assert!(set.score(b"a").is_some_and(f64::is_sign_positive));
        assert_eq!(set.rank(b"b"), Some(1));
        assert_eq!(set.insert(b"a", score(0.0)), Some(0.0));
        assert_eq!(
            set.count_in_score_range(ScoreBound::Inclusive(-0.0), ScoreBound::Inclusive(0.0)),
            2
        );
    }

    #[test]
    fn empty_set_answers_every_query() {
        let mut set = SortedSet::new();
        assert_eq!(set.rank(b"a"), None);
        assert_eq!(set.select(0), None);
        assert_eq!(
            set.score_range_ranks(
                ScoreBound::Inclusive(f64::NEG_INFINITY),
                ScoreBound::Inclusive(f64::INFINITY)
            ),
            0..0
        );
        assert_eq!(set.lex_range_ranks(&LexBound::Min, &LexBound::Max), 0..0);
        assert_eq!(set.range(0..10).count(), 0);
        assert_eq!(set.range_rev(0..10).count(), 0);
        assert!(set.pop_min(3).is_empty());
        assert!(set.pop_max(3).is_empty());
        assert_eq!(set.random(&mut rand::rng()), None);
    }

    #[test]
    fn infinite_scores_and_bounds() {
        let set = zset(&[
            ("low", f64::NEG_INFINITY),
            ("mid", 1.0),
            ("high", f64::INFINITY),
        ]);
        let all = set.score_range_ranks(
            ScoreBound::Inclusive(f64::NEG_INFINITY),
            ScoreBound::Inclusive(f64::INFINITY),
        );
        assert_eq!(all, 0..3);
        let open = set.score_range_ranks(
            ScoreBound::Exclusive(f64::NEG_INFINITY),
            ScoreBound::Exclusive(f64::INFINITY),
        );
        assert_eq!(open, 1..2);
        assert_eq!(members(set.range(open)), vec!["mid"]);
        assert_eq!(
            set.count_in_score_range(ScoreBound::Inclusive(2.0), ScoreBound::Inclusive(1.0)),
            0
        );
        assert_eq!(
            set.count_in_score_range(ScoreBound::Exclusive(1.0), ScoreBound::Inclusive(1.0)),
            0
        );
        assert_eq!(
            set.count_in_score_range(ScoreBound::Inclusive(f64::NAN), ScoreBound::Inclusive(5.0)),
            0
        );
        assert_eq!(
            set.count_in_score_range(ScoreBound::Exclusive(f64::NAN), ScoreBound::Inclusive(5.0)),
            0
        );
    }

    #[test]
    fn lex_bounds() {
        let set = zset(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]);
        let inclusive = |m: &str| LexBound::Inclusive(m.as_bytes().into());
        let exclusive = |m: &str| LexBound::Exclusive(m.as_bytes().into());
        assert_eq!(set.lex_range_ranks(&LexBound::Min, &LexBound::Max), 0..4);
        assert_eq!(set.lex_range_ranks(&inclusive("b"), &inclusive("c")), 1..3);
        assert_eq!(set.lex_range_ranks(&exclusive("b"), &inclusive("c")), 2..3);
        assert_eq!(set.lex_range_ranks(&exclusive("b"), &exclusive("c")), 2..2);
        assert_eq!(set.lex_range_ranks(&inclusive("bb"), &LexBound::Max), 2..4);
        assert_eq!(set.lex_range_ranks(&LexBound::Max, &LexBound::Min), 4..4);
        assert_eq!(set.lex_range_ranks(&LexBound::Min, &exclusive("a")), 0..0);
        assert_eq!(set.count_in_lex_range(&inclusive(""), &inclusive("c")), 3);
    }

    #[test]
    fn rank_order_breaks_ties_by_member() {
        let mut set = zset(&[("b", 1.0), ("a", 1.0), ("c", 0.5)]);
        assert_eq!(members(set.iter()), vec!["c", "a", "b"]);
        assert_eq!(set.insert(b"c", score(2.0)), Some(0.5));
        assert_eq!(members(set.range_rev(0..3)), vec!["c", "b", "a"]);
        assert_eq!(members(set.range_rev(1..2)), vec!["b"]);
        assert_eq!(set.rank(b"c"), Some(2));
        assert_eq!(
            set.pop_max(2),
            vec![(b"c".as_slice().into(), 2.0), (b"b".as_slice().into(), 1.0)]
        );
        assert_eq!(set.pop_min(5), vec![(b"a".as_slice().into(), 1.0)]);
        assert!(set.is_empty());
        assert!(set.check_invariants().is_ok());
    }
}
