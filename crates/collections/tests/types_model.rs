//! Model-based tests of the collection types: random operation sequences run
//! against the real structure and a simple, obviously correct model, with
//! every query compared after every operation.
//!
//! - `RankedMap` against `BTreeMap` (rank, select, lower/upper rank and
//!   iteration from arbitrary ranks and keys), starting from trees deep
//!   enough to have internal levels;
//! - `Hash` against `HashMap`, `Set` against `BTreeSet`;
//! - `SortedSet` against a `Vec` sorted by `(score, member)`;
//! - `List` against a `Vec`, with reference implementations of LREM, LTRIM,
//!   LINSERT, LRANGE and LPOS written from the Redis documentation;
//! - HSCAN/SSCAN interleaved with writes: everything present throughout is
//!   returned, nothing twice, and the scan ends;
//! - images: decode(encode(x)) == x, and decoding random or corrupted bytes
//!   returns an error instead of panicking.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::num::NonZeroI64;

use engram_collections::types::{
    resolve_index, Hash, InsertPosition, LexBound, List, Object, RankedMap, Score, ScoreBound, Set,
    SortedSet,
};
use proptest::prelude::*;
use rand::SeedableRng;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------- RankedMap

#[derive(Clone, Debug)]
enum MapOp {
    Insert(u32, u32),
    Remove(u32),
    RemoveAtRank(usize),
    RemoveRankRange(usize, usize),
    PopFirst,
    PopLast,
    Increment(u32),
}

const KEY_SPACE: u32 = 12_000;

fn map_op() -> impl Strategy<Value = MapOp> {
    prop_oneof![
        4 => (0..KEY_SPACE, any::<u32>()).prop_map(|(k, v)| MapOp::Insert(k, v)),
        4 => (0..KEY_SPACE).prop_map(MapOp::Remove),
        2 => (0..7000usize).prop_map(MapOp::RemoveAtRank),
        1 => (0..7000usize, 0..400usize).prop_map(|(start, len)| MapOp::RemoveRankRange(start, start + len)),
        1 => (0..7000usize, 1000..7000usize).prop_map(|(start, len)| MapOp::RemoveRankRange(start, start + len)),
        1 => Just(MapOp::PopFirst),
        1 => Just(MapOp::PopLast),
        1 => (0..KEY_SPACE).prop_map(MapOp::Increment),
    ]
}

/// Compares every query of `map` with `model`, probing around `probe`.
fn check_map(
    map: &RankedMap<u32, u32>,
    model: &BTreeMap<u32, u32>,
    probe: u32,
) -> Result<(), TestCaseError> {
    if let Err(problem) = map.check_invariants() {
        return Err(TestCaseError::fail(problem));
    }
    prop_assert_eq!(map.len(), model.len());
    prop_assert!(map
        .iter()
        .map(|(k, v)| (*k, *v))
        .eq(model.iter().map(|(k, v)| (*k, *v))));
    prop_assert_eq!(map.first().map(|(k, _)| *k), model.keys().next().copied());
    prop_assert_eq!(
        map.last().map(|(k, _)| *k),
        model.keys().next_back().copied()
    );
    for key in [
        probe,
        probe.wrapping_add(1),
        probe / 2,
        probe.saturating_mul(3) % KEY_SPACE,
    ] {
        let below = model.range(..key).count();
        prop_assert_eq!(map.lower_rank(&key), below);
        prop_assert_eq!(map.upper_rank(&key), model.range(..=key).count());
        prop_assert_eq!(map.get(&key), model.get(&key));
        prop_assert_eq!(map.rank(&key), model.contains_key(&key).then_some(below));
        let inclusive: Vec<u32> = map
            .range_from(&key, true)
            .take(5)
            .map(|(k, _)| *k)
            .collect();
        let expected: Vec<u32> = model.range(key..).take(5).map(|(k, _)| *k).collect();
        prop_assert_eq!(inclusive, expected);
        let exclusive: Vec<u32> = map
            .range_from(&key, false)
            .take(5)
            .map(|(k, _)| *k)
            .collect();
        let expected: Vec<u32> = model
            .range(key.saturating_add(1)..)
            .take(5)
            .map(|(k, _)| *k)
            .collect();
        prop_assert_eq!(exclusive, expected);
    }
    let keys: Vec<u32> = model.keys().copied().collect();
    for rank in [
        0,
        1,
        probe as usize % (keys.len() + 1),
        keys.len().saturating_sub(1),
        keys.len(),
    ] {
        prop_assert_eq!(map.select(rank).map(|(k, _)| *k), keys.get(rank).copied());
        let forward: Vec<u32> = map.iter_from_rank(rank).take(70).map(|(k, _)| *k).collect();
        let expected: Vec<u32> = keys.iter().skip(rank).take(70).copied().collect();
        prop_assert_eq!(forward, expected);
        prop_assert_eq!(
            map.iter_from_rank(rank).len(),
            keys.len().saturating_sub(rank)
        );
        let backward: Vec<u32> = map
            .iter_rev_from_rank(rank)
            .take(70)
            .map(|(k, _)| *k)
            .collect();
        let expected: Vec<u32> = if rank < keys.len() {
            keys[..=rank].iter().rev().take(70).copied().collect()
        } else {
            Vec::new()
        };
        prop_assert_eq!(backward, expected);
    }
    prop_assert!(map
        .iter_rev()
        .map(|(k, _)| *k)
        .eq(keys.iter().rev().copied()));
    Ok(())
}

fn apply_map_op(
    map: &mut RankedMap<u32, u32>,
    model: &mut BTreeMap<u32, u32>,
    op: &MapOp,
) -> Result<(), TestCaseError> {
    let keys: Vec<u32> = model.keys().copied().collect();
    match *op {
        MapOp::Insert(k, v) => prop_assert_eq!(map.insert(k, v), model.insert(k, v)),
        MapOp::Remove(k) => prop_assert_eq!(map.remove(&k), model.remove(&k)),
        MapOp::RemoveAtRank(rank) => {
            let expected = keys
                .get(rank)
                .map(|k| (*k, model.remove(k).unwrap_or_default()));
            prop_assert_eq!(map.remove_at_rank(rank), expected);
        }
        MapOp::RemoveRankRange(start, end) => {
            let end = end.min(keys.len());
            let start = start.min(end);
            let expected: Vec<(u32, u32)> = keys[start..end]
                .iter()
                .map(|k| (*k, model.remove(k).unwrap_or_default()))
                .collect();
            prop_assert_eq!(map.remove_rank_range(start..end), expected);
        }
        MapOp::PopFirst => prop_assert_eq!(map.pop_first(), model.pop_first()),
        MapOp::PopLast => prop_assert_eq!(map.pop_last(), model.pop_last()),
        MapOp::Increment(k) => {
            if let Some(v) = map.get_mut(&k) {
                *v = v.wrapping_add(1);
            }
            if let Some(v) = model.get_mut(&k) {
                *v = v.wrapping_add(1);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn ranked_map_matches_btreemap(
        initial in prop::collection::btree_map(0..KEY_SPACE, any::<u32>(), 0..6000),
        ops in prop::collection::vec((map_op(), 0..KEY_SPACE), 1..120),
    ) {
        let mut model = initial;
        let mut map = RankedMap::from_sorted(model.iter().map(|(k, v)| (*k, *v)));
        check_map(&map, &model, 0)?;
        for (op, probe) in &ops {
            apply_map_op(&mut map, &mut model, op)?;
            check_map(&map, &model, *probe)?;
        }
    }

    #[test]
    fn ranked_map_built_by_inserts_matches_btreemap(
        ops in prop::collection::vec((map_op(), 0..KEY_SPACE), 1..400),
    ) {
        // Small trees grown and shrunk through the one-leaf and two-level
        // shapes, where root splits and collapses happen.
        let mut model = BTreeMap::new();
        let mut map = RankedMap::new();
        for (op, probe) in &ops {
            let op = match op {
                MapOp::Insert(k, v) => MapOp::Insert(k % 300, *v),
                MapOp::Remove(k) => MapOp::Remove(k % 300),
                MapOp::RemoveAtRank(r) => MapOp::RemoveAtRank(r % 300),
                MapOp::RemoveRankRange(s, e) => MapOp::RemoveRankRange(s % 300, s % 300 + (e - s) % 40),
                other => other.clone(),
            };
            apply_map_op(&mut map, &mut model, &op)?;
            check_map(&map, &model, probe % 300)?;
        }
    }
}

// ---------------------------------------------------------------- Hash, Set

/// Short byte strings from a small alphabet, so operations collide often.
fn small_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![Just(b'a'), Just(b'b'), Just(0u8), Just(0xff)],
        0..4,
    )
}

#[derive(Clone, Debug)]
enum HashOp {
    Insert(Vec<u8>, Vec<u8>),
    Replace(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
}

fn hash_op() -> impl Strategy<Value = HashOp> {
    prop_oneof![
        3 => (small_bytes(), small_bytes()).prop_map(|(f, v)| HashOp::Insert(f, v)),
        1 => (small_bytes(), small_bytes()).prop_map(|(f, v)| HashOp::Replace(f, v)),
        2 => small_bytes().prop_map(HashOp::Remove),
    ]
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn hash_matches_hashmap(ops in prop::collection::vec((hash_op(), small_bytes(), any::<u64>()), 1..200)) {
        let mut hash = Hash::new();
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for (op, probe, seed) in &ops {
            match op {
                HashOp::Insert(f, v) => prop_assert_eq!(
                    hash.insert(f.clone().into(), v.clone().into()).map(Vec::from),
                    model.insert(f.clone(), v.clone())
                ),
                HashOp::Replace(f, v) => {
                    let expected = model.get_mut(f).map(|slot| std::mem::replace(slot, v.clone()));
                    let got = hash.replace(f, v.clone().into()).ok().map(Vec::from);
                    prop_assert_eq!(got, expected);
                }
                HashOp::Remove(f) => prop_assert_eq!(hash.remove(f).map(Vec::from), model.remove(f)),
            }
            if let Err(problem) = hash.check_invariants() {
                return Err(TestCaseError::fail(problem));
            }
            prop_assert_eq!(hash.len(), model.len());
            prop_assert_eq!(hash.get(probe), model.get(probe).map(|v| &v[..]));
            prop_assert_eq!(hash.contains(probe), model.contains_key(probe));
            let all: HashMap<Vec<u8>, Vec<u8>> = hash.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
            prop_assert_eq!(&all, &model);
            let mut rng = rand::rngs::StdRng::seed_from_u64(*seed);
            match hash.random(&mut rng) {
                Some((f, v)) => prop_assert_eq!(model.get(f).map(|v| &v[..]), Some(v)),
                None => prop_assert!(model.is_empty()),
            }
        }
    }

    #[test]
    fn set_matches_btreeset(ops in prop::collection::vec((0..5u8, small_bytes(), any::<u64>()), 1..200)) {
        let mut set = Set::new();
        let mut model: BTreeSet<Vec<u8>> = BTreeSet::new();
        for (kind, member, seed) in &ops {
            let mut rng = rand::rngs::StdRng::seed_from_u64(*seed);
            match kind {
                0 | 1 => prop_assert_eq!(set.insert(member.clone().into()), model.insert(member.clone())),
                2 | 3 => prop_assert_eq!(set.remove(member), model.remove(member)),
                _ => match set.pop_random(&mut rng) {
                    Some(popped) => prop_assert!(model.remove(&popped[..])),
                    None => prop_assert!(model.is_empty()),
                },
            }
            if let Err(problem) = set.check_invariants() {
                return Err(TestCaseError::fail(problem));
            }
            prop_assert_eq!(set.len(), model.len());
            prop_assert_eq!(set.contains(member), model.contains(member));
            let all: BTreeSet<Vec<u8>> = set.iter().map(<[u8]>::to_vec).collect();
            prop_assert_eq!(&all, &model);
            prop_assert_eq!(set.iter().len(), model.len());
            if let Some(member) = set.random(&mut rng) {
                prop_assert!(model.contains(member));
            }
        }
    }
}

// ---------------------------------------------------------------- SCAN

#[derive(Clone, Debug)]
enum ScanStep {
    Scan(usize),
    Insert(u16),
    Remove(u16),
}

fn scan_step() -> impl Strategy<Value = ScanStep> {
    prop_oneof![
        2 => (1..12usize).prop_map(ScanStep::Scan),
        1 => (0..600u16).prop_map(ScanStep::Insert),
        1 => (0..600u16).prop_map(ScanStep::Remove),
    ]
}

fn field(n: u16) -> Vec<u8> {
    format!("field:{n}").into_bytes()
}

/// Runs a scan interleaved with `steps`, over a structure seen through
/// `scan` / `insert` / `remove`, and checks Redis's SCAN guarantees.
fn check_scan(
    initial: &BTreeSet<u16>,
    steps: &[ScanStep],
    mut scan: impl FnMut(u64, usize) -> (u64, Vec<Vec<u8>>),
    mut insert: impl FnMut(&[u8]),
    mut remove: impl FnMut(&[u8]),
) -> Result<(), TestCaseError> {
    let mut present: BTreeSet<u16> = initial.clone();
    let mut touched: HashSet<u16> = HashSet::new();
    let mut returned: Vec<Vec<u8>> = Vec::new();
    let mut cursor = 0;
    let mut finished = false;
    let mut calls = 0;
    let mut steps = steps.iter();
    while !finished {
        // After the random steps run out, keep scanning until the end.
        let step = steps.next().cloned().unwrap_or(ScanStep::Scan(5));
        match step {
            ScanStep::Scan(count) => {
                let (next, batch) = scan(cursor, count);
                calls += 1;
                prop_assert!(calls <= 10_000, "scan does not end");
                prop_assert!(
                    next == 0 || next > cursor,
                    "cursor went from {} to {}",
                    cursor,
                    next
                );
                returned.extend(batch);
                cursor = next;
                finished = next == 0;
            }
            ScanStep::Insert(n) => {
                insert(&field(n));
                present.insert(n);
                touched.insert(n);
            }
            ScanStep::Remove(n) => {
                remove(&field(n));
                present.remove(&n);
                touched.insert(n);
            }
        }
    }
    let returned_set: HashSet<Vec<u8>> = returned.iter().cloned().collect();
    prop_assert_eq!(
        returned_set.len(),
        returned.len(),
        "a field was returned twice"
    );
    for n in initial.intersection(&present) {
        if !touched.contains(n) {
            prop_assert!(
                returned_set.contains(&field(*n)),
                "field {} present throughout was not returned",
                n
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn hash_scan_returns_everything_present_throughout(
        initial in prop::collection::btree_set(0..600u16, 0..300),
        steps in prop::collection::vec(scan_step(), 0..150),
    ) {
        let hash = std::cell::RefCell::new(Hash::new());
        for n in &initial {
            hash.borrow_mut().insert(field(*n).into(), b"v".as_slice().into());
        }
        check_scan(
            &initial,
            &steps,
            |cursor, count| {
                let hash = hash.borrow();
                let (next, batch) = hash.scan(cursor, count);
                (next, batch.into_iter().map(|(f, _)| f.to_vec()).collect())
            },
            |f| { hash.borrow_mut().insert(f.into(), b"w".as_slice().into()); },
            |f| { hash.borrow_mut().remove(f); },
        )?;
    }

    #[test]
    fn set_scan_returns_everything_present_throughout(
        initial in prop::collection::btree_set(0..600u16, 0..300),
        steps in prop::collection::vec(scan_step(), 0..150),
    ) {
        let set = std::cell::RefCell::new(Set::new());
        for n in &initial {
            set.borrow_mut().insert(field(*n).into());
        }
        check_scan(
            &initial,
            &steps,
            |cursor, count| {
                let set = set.borrow();
                let (next, batch) = set.scan(cursor, count);
                (next, batch.into_iter().map(<[u8]>::to_vec).collect())
            },
            |m| { set.borrow_mut().insert(m.into()); },
            |m| { set.borrow_mut().remove(m); },
        )?;
    }

    /// ZSCAN's order is by hash, not score: members whose scores move
    /// during the scan (an insert of a present member moves it) are still
    /// returned exactly once.
    #[test]
    fn zset_scan_returns_everything_present_throughout(
        initial in prop::collection::btree_set(0..600u16, 0..300),
        steps in prop::collection::vec(scan_step(), 0..150),
    ) {
        let zset = std::cell::RefCell::new(SortedSet::new());
        let next_score = std::cell::Cell::new(0.0);
        let score = || {
            next_score.set(next_score.get() - 1.0);
            Score::new(next_score.get()).unwrap()
        };
        for n in &initial {
            zset.borrow_mut().insert(&field(*n), score());
        }
        check_scan(
            &initial,
            &steps,
            |cursor, count| {
                let zset = zset.borrow();
                let (next, batch) = zset.scan_by_hash(cursor, count);
                (next, batch.into_iter().map(|(m, _)| m.to_vec()).collect())
            },
            |m| { zset.borrow_mut().insert(m, score()); },
            |m| { zset.borrow_mut().remove(m); },
        )?;
        prop_assert!(zset.borrow().check_invariants().is_ok());
    }
}

// ---------------------------------------------------------------- SortedSet

/// Scores with many ties and the special values.
fn score_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(-0.0),
        Just(1.0),
        Just(-1.5),
        Just(2.5),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        (-3i32..4).prop_map(f64::from),
    ]
}

fn score_bound() -> impl Strategy<Value = ScoreBound> {
    (score_value(), any::<bool>()).prop_map(|(value, inclusive)| {
        if inclusive {
            ScoreBound::Inclusive(value)
        } else {
            ScoreBound::Exclusive(value)
        }
    })
}

fn lex_bound() -> impl Strategy<Value = LexBound> {
    prop_oneof![
        1 => Just(LexBound::Min),
        1 => Just(LexBound::Max),
        3 => small_bytes().prop_map(|m| LexBound::Inclusive(m.into())),
        3 => small_bytes().prop_map(|m| LexBound::Exclusive(m.into())),
    ]
}

#[derive(Clone, Debug)]
enum ZsetOp {
    Insert(Vec<u8>, f64),
    Remove(Vec<u8>),
    PopMin(usize),
    PopMax(usize),
    RemoveRankRange(usize, usize),
}

fn zset_op() -> impl Strategy<Value = ZsetOp> {
    prop_oneof![
        6 => (small_bytes(), score_value()).prop_map(|(m, s)| ZsetOp::Insert(m, s)),
        3 => small_bytes().prop_map(ZsetOp::Remove),
        1 => (0..4usize).prop_map(ZsetOp::PopMin),
        1 => (0..4usize).prop_map(ZsetOp::PopMax),
        1 => (0..40usize, 0..10usize).prop_map(|(s, l)| ZsetOp::RemoveRankRange(s, s + l)),
    ]
}

/// The model: `(score, member)` pairs kept sorted, -0.0 stored as 0.0.
#[derive(Default)]
struct ZsetModel {
    entries: Vec<(f64, Vec<u8>)>,
}

impl ZsetModel {
    fn sort(&mut self) {
        self.entries.sort_by(|a, b| {
            a.0.partial_cmp(&b.0)
                .expect("no NaN")
                .then_with(|| a.1.cmp(&b.1))
        });
    }
    fn position(&self, member: &[u8]) -> Option<usize> {
        self.entries.iter().position(|(_, m)| m == member)
    }
    fn insert(&mut self, member: &[u8], score: f64) -> Option<f64> {
        let score = if score == 0.0 { 0.0 } else { score };
        let old = self.remove(member);
        self.entries.push((score, member.to_vec()));
        self.sort();
        old
    }
    fn remove(&mut self, member: &[u8]) -> Option<f64> {
        self.position(member).map(|at| self.entries.remove(at).0)
    }
    fn in_score_range(score: f64, min: ScoreBound, max: ScoreBound) -> bool {
        let above_min = match min {
            ScoreBound::Inclusive(m) => score >= m,
            ScoreBound::Exclusive(m) => score > m,
        };
        let below_max = match max {
            ScoreBound::Inclusive(m) => score <= m,
            ScoreBound::Exclusive(m) => score < m,
        };
        above_min && below_max
    }
    fn in_lex_range(member: &[u8], min: &LexBound, max: &LexBound) -> bool {
        let above_min = match min {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Inclusive(m) => member >= &m[..],
            LexBound::Exclusive(m) => member > &m[..],
        };
        let below_max = match max {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Inclusive(m) => member <= &m[..],
            LexBound::Exclusive(m) => member < &m[..],
        };
        above_min && below_max
    }
}

fn owned(entries: Vec<(Box<[u8]>, f64)>) -> Vec<(f64, Vec<u8>)> {
    entries
        .into_iter()
        .map(|(m, s)| (s, m.into_vec()))
        .collect()
}

fn check_zset(
    zset: &SortedSet,
    model: &ZsetModel,
    probe: &[u8],
    min: ScoreBound,
    max: ScoreBound,
    ranks: (usize, usize),
) -> Result<(), TestCaseError> {
    if let Err(problem) = zset.check_invariants() {
        return Err(TestCaseError::fail(problem));
    }
    let all: Vec<(f64, Vec<u8>)> = zset.iter().map(|(m, s)| (s, m.to_vec())).collect();
    prop_assert_eq!(&all, &model.entries);
    prop_assert!(
        all.iter()
            .all(|(s, _)| !(*s == 0.0 && s.is_sign_negative())),
        "-0.0 stored"
    );
    prop_assert_eq!(zset.len(), model.entries.len());
    prop_assert_eq!(zset.rank(probe), model.position(probe));
    prop_assert_eq!(
        zset.score(probe),
        model.position(probe).map(|at| model.entries[at].0)
    );
    let (start, end) = ranks;
    prop_assert_eq!(
        zset.select(start).map(|(m, s)| (s, m.to_vec())),
        model.entries.get(start).cloned()
    );
    let end = end.min(model.entries.len());
    let slice: Vec<(f64, Vec<u8>)> = model
        .entries
        .get(start..end)
        .map(<[_]>::to_vec)
        .unwrap_or_default();
    let forward: Vec<(f64, Vec<u8>)> = zset
        .range(start..end)
        .map(|(m, s)| (s, m.to_vec()))
        .collect();
    prop_assert_eq!(&forward, &slice);
    let backward: Vec<(f64, Vec<u8>)> = zset
        .range_rev(start..end)
        .map(|(m, s)| (s, m.to_vec()))
        .collect();
    prop_assert_eq!(backward, slice.into_iter().rev().collect::<Vec<_>>());

    let matching: Vec<usize> = (0..model.entries.len())
        .filter(|&at| ZsetModel::in_score_range(model.entries[at].0, min, max))
        .collect();
    let got = zset.score_range_ranks(min, max);
    prop_assert_eq!(zset.count_in_score_range(min, max), matching.len());
    if let (Some(first), Some(last)) = (matching.first(), matching.last()) {
        prop_assert_eq!(got, *first..*last + 1);
    } else {
        prop_assert!(got.is_empty());
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn sorted_set_matches_sorted_vec(
        ops in prop::collection::vec(
            (zset_op(), small_bytes(), score_bound(), score_bound(), (0..30usize, 0..30usize)),
            1..150,
        ),
    ) {
        let mut zset = SortedSet::new();
        let mut model = ZsetModel::default();
        for (op, probe, min, max, ranks) in &ops {
            match op {
                ZsetOp::Insert(member, score) => {
                    let score_typed = Score::new(*score).expect("not NaN");
                    prop_assert_eq!(zset.insert(member, score_typed), model.insert(member, *score));
                }
                ZsetOp::Remove(member) => prop_assert_eq!(zset.remove(member), model.remove(member)),
                ZsetOp::PopMin(count) => {
                    let take = (*count).min(model.entries.len());
                    let expected: Vec<_> = model.entries.drain(..take).collect();
                    prop_assert_eq!(owned(zset.pop_min(*count)), expected);
                }
                ZsetOp::PopMax(count) => {
                    let keep = model.entries.len().saturating_sub(*count);
                    let expected: Vec<_> = model.entries.drain(keep..).rev().collect();
                    prop_assert_eq!(owned(zset.pop_max(*count)), expected);
                }
                ZsetOp::RemoveRankRange(start, end) => {
                    let end = (*end).min(model.entries.len());
                    let start = (*start).min(end);
                    let expected: Vec<_> = model.entries.drain(start..end).collect();
                    prop_assert_eq!(owned(zset.remove_rank_range(start..end)), expected);
                }
            }
            check_zset(&zset, &model, probe, *min, *max, *ranks)?;
        }
    }

    #[test]
    fn lex_ranges_match_a_filter_when_scores_are_equal(
        members in prop::collection::btree_set(small_bytes(), 0..60),
        bounds in prop::collection::vec((lex_bound(), lex_bound()), 1..20),
    ) {
        let mut zset = SortedSet::new();
        for member in &members {
            zset.insert(member, Score::new(0.0).expect("not NaN"));
        }
        let ordered: Vec<&Vec<u8>> = members.iter().collect();
        for (min, max) in &bounds {
            let matching: Vec<usize> = (0..ordered.len())
                .filter(|&at| ZsetModel::in_lex_range(ordered[at], min, max))
                .collect();
            let got = zset.lex_range_ranks(min, max);
            prop_assert_eq!(zset.count_in_lex_range(min, max), matching.len());
            if let (Some(first), Some(last)) = (matching.first(), matching.last()) {
                prop_assert_eq!(got, *first..*last + 1);
            } else {
                prop_assert!(got.is_empty());
            }
        }
    }

    #[test]
    fn lex_ranges_never_panic_with_mixed_scores(
        entries in prop::collection::vec((small_bytes(), score_value()), 0..60),
        bounds in prop::collection::vec((lex_bound(), lex_bound()), 1..10),
    ) {
        let mut zset = SortedSet::new();
        for (member, score) in &entries {
            zset.insert(member, Score::new(*score).expect("not NaN"));
        }
        for (min, max) in &bounds {
            let got = zset.lex_range_ranks(min, max);
            prop_assert!(got.start <= got.end && got.end <= zset.len());
        }
    }
}

// ---------------------------------------------------------------- List

#[derive(Clone, Debug)]
enum ListOp {
    PushFront(Vec<Vec<u8>>),
    PushBack(Vec<Vec<u8>>),
    PopFront(usize),
    PopBack(usize),
    Set(i64, Vec<u8>),
    Insert(bool, Vec<u8>, Vec<u8>),
    Remove(i64, Vec<u8>),
    Trim(i64, i64),
}

/// Few distinct values, so searches match often.
fn element() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"x".to_vec()),
        Just(b"y".to_vec()),
        Just(b"".to_vec()),
        Just(b"zz".to_vec())
    ]
}

fn list_index() -> impl Strategy<Value = i64> {
    prop_oneof![8 => -12i64..12, 1 => Just(i64::MIN), 1 => Just(i64::MAX)]
}

fn list_op() -> impl Strategy<Value = ListOp> {
    prop_oneof![
        3 => prop::collection::vec(element(), 0..4).prop_map(ListOp::PushFront),
        3 => prop::collection::vec(element(), 0..4).prop_map(ListOp::PushBack),
        1 => (0..3usize).prop_map(ListOp::PopFront),
        1 => (0..3usize).prop_map(ListOp::PopBack),
        1 => (list_index(), element()).prop_map(|(i, v)| ListOp::Set(i, v)),
        1 => (any::<bool>(), element(), element()).prop_map(|(b, p, v)| ListOp::Insert(b, p, v)),
        1 => (-3i64..4, element()).prop_map(|(c, v)| ListOp::Remove(c, v)),
        1 => (list_index(), list_index()).prop_map(|(s, e)| ListOp::Trim(s, e)),
    ]
}

/// Redis index normalisation, written independently of the library: the
/// positions `i` of `0..len` with `start' <= i <= stop'`, where a negative
/// end counts from the tail.
fn model_range(len: usize, start: i64, stop: i64) -> Vec<usize> {
    let norm = |x: i64| {
        if x < 0 {
            i128::from(x) + len as i128
        } else {
            i128::from(x)
        }
    };
    let (start, stop) = (norm(start), norm(stop));
    (0..len)
        .filter(|&i| start <= i as i128 && i as i128 <= stop)
        .collect()
}

/// LPOS from its documentation: matches in search order (from the tail for
/// a negative rank), among the first `max_len` elements in that order
/// (0 = all), skipping `|rank| - 1`, at most `count` (0 = all).
fn model_lpos(
    items: &[Vec<u8>],
    value: &[u8],
    rank: i64,
    count: usize,
    max_len: usize,
) -> Vec<usize> {
    let len = items.len();
    let order: Vec<usize> = if rank > 0 {
        (0..len).collect()
    } else {
        (0..len).rev().collect()
    };
    let compared = if max_len == 0 { len } else { max_len.min(len) };
    let skip = usize::try_from(rank.unsigned_abs() - 1).unwrap_or(usize::MAX);
    let matches = order[..compared]
        .iter()
        .copied()
        .filter(|&i| items[i] == value)
        .skip(skip);
    if count == 0 {
        matches.collect()
    } else {
        matches.take(count).collect()
    }
}

fn model_lrem(items: &mut Vec<Vec<u8>>, count: i64, value: &[u8]) -> usize {
    let matches: Vec<usize> = (0..items.len()).filter(|&i| items[i] == value).collect();
    let chosen: Vec<usize> = match count {
        0 => matches,
        c if c > 0 => matches.into_iter().take(c as usize).collect(),
        c => matches
            .into_iter()
            .rev()
            .take(c.unsigned_abs() as usize)
            .collect(),
    };
    let chosen: HashSet<usize> = chosen.into_iter().collect();
    let mut index = 0;
    items.retain(|_| {
        let keep = !chosen.contains(&index);
        index += 1;
        keep
    });
    chosen.len()
}

fn boxes(values: &[Vec<u8>]) -> Vec<Box<[u8]>> {
    values
        .iter()
        .map(|v| v.clone().into_boxed_slice())
        .collect()
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn list_matches_vec(
        ops in prop::collection::vec(
            (list_op(), element(), list_index(), list_index(), (-4i64..4, 0..4usize, 0..6usize)),
            1..120,
        ),
    ) {
        let mut list = List::new();
        let mut model: Vec<Vec<u8>> = Vec::new();
        for (op, probe, a, b, (rank, count, max_len)) in &ops {
            match op {
                ListOp::PushFront(values) => {
                    for v in values {
                        model.insert(0, v.clone());
                    }
                    prop_assert_eq!(list.push_front(boxes(values)), model.len());
                }
                ListOp::PushBack(values) => {
                    model.extend(values.iter().cloned());
                    prop_assert_eq!(list.push_back(boxes(values)), model.len());
                }
                ListOp::PopFront(n) => {
                    let n = (*n).min(model.len());
                    let expected: Vec<Vec<u8>> = model.drain(..n).collect();
                    let got: Vec<Vec<u8>> = list.pop_front(n).into_iter().map(Vec::from).collect();
                    prop_assert_eq!(got, expected);
                }
                ListOp::PopBack(n) => {
                    let n = (*n).min(model.len());
                    let expected: Vec<Vec<u8>> = model.drain(model.len() - n..).rev().collect();
                    let got: Vec<Vec<u8>> = list.pop_back(n).into_iter().map(Vec::from).collect();
                    prop_assert_eq!(got, expected);
                }
                ListOp::Set(index, value) => {
                    let got = list.set(*index, value).map(Vec::from);
                    match resolve_index(*index, model.len()) {
                        Some(at) => prop_assert_eq!(got, Some(std::mem::replace(&mut model[at], value.clone()))),
                        None => prop_assert_eq!(got, None),
                    }
                }
                ListOp::Insert(before, pivot, value) => {
                    let position = if *before { InsertPosition::Before } else { InsertPosition::After };
                    let expected = model.iter().position(|v| v == pivot).map(|at| {
                        model.insert(if *before { at } else { at + 1 }, value.clone());
                        model.len()
                    });
                    prop_assert_eq!(list.insert(position, pivot, value), expected);
                }
                ListOp::Remove(count, value) => {
                    prop_assert_eq!(list.remove(*count, value), model_lrem(&mut model, *count, value));
                }
                ListOp::Trim(start, stop) => {
                    let keep = model_range(model.len(), *start, *stop);
                    model = keep.into_iter().map(|i| model[i].clone()).collect();
                    list.trim(*start, *stop);
                }
            }
            let all: Vec<Vec<u8>> = list.iter().map(<[u8]>::to_vec).collect();
            prop_assert_eq!(&all, &model);
            prop_assert_eq!(list.len(), model.len());
            let expected_get = resolve_index(*a, model.len()).map(|i| model[i].as_slice());
            prop_assert_eq!(list.get(*a), expected_get);
            let range: Vec<Vec<u8>> = list.range(*a, *b).map(<[u8]>::to_vec).collect();
            let expected_range: Vec<Vec<u8>> = model_range(model.len(), *a, *b).into_iter().map(|i| model[i].clone()).collect();
            prop_assert_eq!(range, expected_range);
            if let Some(rank_nonzero) = NonZeroI64::new(*rank) {
                prop_assert_eq!(
                    list.position(probe, rank_nonzero, *count, *max_len),
                    model_lpos(&model, probe, *rank, *count, *max_len)
                );
            }
        }
    }
}

#[test]
fn resolve_index_agrees_with_the_range_model() {
    for len in 0..5usize {
        for index in -7i64..7 {
            let expected = model_range(len, index, index).first().copied();
            assert_eq!(
                resolve_index(index, len),
                expected,
                "index {index} of {len}"
            );
        }
    }
}

// ---------------------------------------------------------------- images

/// A random object of a random kind, built through the public API.
fn object() -> impl Strategy<Value = Object> {
    let entries = prop::collection::vec((small_bytes(), small_bytes(), score_value()), 0..40);
    (0..4u8, entries, 0..200usize).prop_map(|(kind, entries, bulk)| match kind {
        0 => {
            let mut hash = Hash::new();
            for (f, v, _) in entries {
                hash.insert(f.into(), v.into());
            }
            // Enough fields, sometimes, for a multi-level tree.
            for n in 0..bulk {
                hash.insert(
                    format!("bulk{n}").into_bytes().into(),
                    b"v".as_slice().into(),
                );
            }
            Object::Hash(hash)
        }
        1 => {
            let mut set = Set::new();
            for (m, _, _) in entries {
                set.insert(m.into());
            }
            for n in 0..bulk {
                set.insert(format!("bulk{n}").into_bytes().into());
            }
            Object::Set(set)
        }
        2 => {
            let mut zset = SortedSet::new();
            for (m, _, s) in entries {
                zset.insert(&m, Score::new(s).expect("not NaN"));
            }
            for n in 0..bulk {
                zset.insert(
                    format!("bulk{n}").as_bytes(),
                    Score::new(n as f64 / 7.0).expect("not NaN"),
                );
            }
            Object::SortedSet(zset)
        }
        _ => {
            let mut list = List::new();
            list.push_back(entries.into_iter().map(|(v, _, _)| v.into_boxed_slice()));
            Object::List(list)
        }
    })
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, u8),
    Remove(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, mask)| Mutation::Flip(at, mask)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert(at, byte)),
        any::<usize>().prop_map(Mutation::Remove),
    ]
}

fn mutate(image: &mut Vec<u8>, mutation: &Mutation) {
    let len = image.len();
    match *mutation {
        Mutation::Flip(at, mask) if len > 0 => image[at % len] ^= mask,
        Mutation::Truncate(at) => image.truncate(at % (len + 1)),
        Mutation::Insert(at, byte) => image.insert(at % (len + 1), byte),
        Mutation::Remove(at) if len > 0 => {
            image.remove(at % len);
        }
        _ => {}
    }
}

/// Whatever `decode` accepts must be a valid object that re-encodes to an
/// image decoding to the same object.
fn check_decoded(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(object) = Object::decode(bytes) else {
        return Ok(());
    };
    let valid = match &object {
        Object::Hash(hash) => hash.check_invariants(),
        Object::Set(set) => set.check_invariants(),
        Object::SortedSet(zset) => zset.check_invariants(),
        Object::List(_) | Object::Stream(_) => Ok(()),
    };
    if let Err(problem) = valid {
        return Err(TestCaseError::fail(format!(
            "decode accepted an invalid object: {problem}"
        )));
    }
    let mut image = Vec::new();
    object.encode(&mut image);
    prop_assert_eq!(Object::decode(&image), Ok(object));
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn images_round_trip(object in object()) {
        let mut image = Vec::new();
        object.encode(&mut image);
        let decoded = Object::decode(&image);
        prop_assert_eq!(decoded.as_ref(), Ok(&object));
        if let Ok(decoded) = decoded {
            prop_assert_eq!(decoded.kind(), object.kind());
            prop_assert_eq!(decoded.len(), object.len());
            prop_assert_eq!(decoded.approx_heap_bytes() > 0, !object.is_empty());
        }
    }

    #[test]
    fn decoding_random_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        check_decoded(&bytes)?;
        // The same bytes behind a valid header reach the entry decoders.
        for kind in 1..=4u8 {
            let mut image = vec![1, kind];
            image.extend_from_slice(&bytes);
            check_decoded(&image)?;
        }
    }

    #[test]
    fn decoding_corrupted_images_never_panics(
        object in object(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut image = Vec::new();
        object.encode(&mut image);
        for mutation in &mutations {
            mutate(&mut image, mutation);
        }
        check_decoded(&image)?;
    }
}
