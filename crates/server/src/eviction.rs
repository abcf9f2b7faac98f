//! Eviction: over `maxmemory`, keys are deleted as `maxmemory-policy`
//! says before a command runs, as Redis's `performEvictions` does.
//!
//! * `allkeys-*` choose among every key, `volatile-*` only among keys with
//!   an expiry time (none such: nothing can be evicted, and commands that
//!   may grow the data get the OOM error, as under `noeviction`).
//! * `*-lru` and `*-lfu` approximate the least recently / least frequently
//!   used key as Redis does: each round samples `maxmemory-samples` keys
//!   (at a random place in the keyspace, `Keyspace::eviction_sample`) into
//!   a pool of the 16 best candidates seen (kept between rounds and
//!   commands, so it improves over time), and the best of the pool that
//!   still exists goes. Scores: idle time under LRU, 255 minus the decayed
//!   counter under LFU, and for `volatile-ttl` the nearest expiry first.
//! * `*-random` delete one randomly sampled key per round.
//!
//! A key goes through `Keyspace::evict`, a normal delete under its key
//! group lock (WATCH sees it, counts and the expiry index follow), and the
//! command that triggered it waits for the group commit like any writer,
//! so an evicted key stays evicted after a restart. Used memory is
//! measured again after each key (`maxmemory::used_now`: two counters), so
//! one command evicts only what the limit asks, whatever the age of the
//! request path's 100 ms sample.
//!
//! `maxmemory-eviction-tenacity` bounds the time one command spends
//! evicting (Redis's limits: 50 µs per step up to 10, then 15% more per
//! step, unbounded at 100); a command that reaches it runs anyway, and the
//! next command carries on (Redis continues from a timer instead).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::keyspace::Keyspace;
use crate::maxmemory::{self, Policy};
use crate::session::Session;
use crate::shared::Shared;

/// Redis's `EVPOOL_SIZE`.
const POOL_SIZE: usize = 16;
/// Rounds of sampling that find nothing to delete before giving up.
const EMPTY_ROUNDS: usize = 16;

/// What an eviction pass achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Memory is under the limit (or there is no limit).
    Ok,
    /// Over the tenacity's time limit, still over: the command runs.
    Running,
    /// Still over and nothing (more) can be evicted.
    Fail,
}

#[derive(Default)]
pub struct Eviction {
    /// The candidate pool, best (largest score) last; held through a pass,
    /// so concurrent commands over the limit evict one after the other.
    pool: Mutex<Pool>,
    pub evicted_keys: AtomicU64,
    /// A group's leader has an eviction proposal in flight.
    pub proposing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Milliseconds spent over the limit in past episodes.
    exceeded_ms: AtomicU64,
    /// When the current episode over the limit began.
    over_since: Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Pool {
    /// (score, engine key), ascending by score.
    entries: Vec<(u64, Vec<u8>)>,
    /// The policy the scores were computed under.
    policy: Option<Policy>,
}

impl Eviction {
    /// Redis's `total_eviction_exceeded_time` and
    /// `current_eviction_exceeded_time`, in ms.
    pub fn exceeded_ms(&self) -> (u64, u64) {
        let current = self
            .over_since
            .lock()
            .map_or(0, |since| since.elapsed().as_millis() as u64);
        (self.exceeded_ms.load(Ordering::Relaxed) + current, current)
    }

    /// CONFIG RESETSTAT.
    pub fn reset_stats(&self) {
        self.evicted_keys.store(0, Ordering::Relaxed);
        self.exceeded_ms.store(0, Ordering::Relaxed);
    }

    fn note_over(&self, over: bool) {
        let mut since = self.over_since.lock();
        match (*since, over) {
            (None, true) => *since = Some(Instant::now()),
            (Some(start), false) => {
                self.exceeded_ms
                    .fetch_add(start.elapsed().as_millis() as u64, Ordering::Relaxed);
                *since = None;
            }
            _ => {}
        }
    }
}

/// Before a command, with a limit set: evicts until used memory is under
/// it (when the last sample says it is over). Marks the session as having
/// written when it deleted anything, so the reply waits for durability.
pub fn before_command(shared: &Shared, ks: &Keyspace, session: &mut Session) -> Outcome {
    if shared.group.get().is_some() {
        return group_eviction(shared, ks);
    }
    let limit = &shared.memory_limit;
    if !limit.over(|| maxmemory::used_now(ks)) {
        shared.eviction.note_over(false);
        return Outcome::Ok;
    }
    let eviction = &shared.eviction;
    let policy = limit.policy();
    if policy == Policy::NoEviction {
        eviction.note_over(true);
        return Outcome::Fail;
    }
    let mut pool = eviction.pool.lock();
    // Another command may have evicted while this one waited.
    let mut used = maxmemory::used_now(ks);
    limit.record(used);
    let max = limit.limit.load(Ordering::Relaxed);
    let deadline = time_limit(limit.tenacity.load(Ordering::Relaxed)).map(|d| Instant::now() + d);
    let mut freed = 0u64;
    let outcome = loop {
        if used <= max {
            break Outcome::Ok;
        }
        match evict_one(shared, ks, &mut pool, policy, &mut |ekey| {
            evict(shared, ks, ekey)
        }) {
            Ok(true) => {
                freed += 1;
                session.wrote = true;
                eviction.evicted_keys.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => break Outcome::Fail,
            Err(e) => {
                log::warn!("eviction failed: {e}");
                break Outcome::Fail;
            }
        }
        used = maxmemory::used_now(ks);
        limit.record(used);
        // As Redis, the clock is read every 16 keys.
        if freed.is_multiple_of(16) && deadline.is_some_and(|d| Instant::now() >= d) {
            break if used <= max {
                Outcome::Ok
            } else {
                Outcome::Running
            };
        }
    };
    eviction.note_over(outcome != Outcome::Ok);
    outcome
}

/// Keys a group's leader proposes to evict at most at a time.
const GROUP_VICTIMS: usize = 16;

/// Eviction on a replicated group's member, where no member deletes a key
/// by itself: a key gone from one member only would split the state.
/// Followers ignore the limit, as Redis's replicas do by default
/// (`replica-ignore-maxmemory`). The leader picks victims as the policy
/// says and proposes `ENGRAM.EVICTED` for them (`group::propose_evictions`),
/// which every member applies, as Redis's master sends its replicas a DEL
/// for each key it evicts. The keys are gone only once the entry is
/// applied, so while one proposal is in flight no other is made and a
/// command over the limit runs meanwhile (as when a single node's
/// eviction reaches its time limit); with nothing to evict, commands that
/// may grow the data get the OOM error.
fn group_eviction(shared: &Shared, ks: &Keyspace) -> Outcome {
    let Some(replica) = shared.group.get() else {
        return Outcome::Ok;
    };
    let limit = &shared.memory_limit;
    let eviction = &shared.eviction;
    if !replica.is_leader() || !limit.over(|| maxmemory::used_now(ks)) {
        eviction.note_over(false);
        return Outcome::Ok;
    }
    eviction.note_over(true);
    let policy = limit.policy();
    if policy == Policy::NoEviction {
        return Outcome::Fail;
    }
    if eviction.proposing.swap(true, Ordering::AcqRel) {
        return Outcome::Running;
    }
    let mut victims: Vec<(usize, Vec<u8>)> = Vec::new();
    {
        let mut pool = eviction.pool.lock();
        for _ in 0..GROUP_VICTIMS {
            let mut pick = |ekey: &[u8]| {
                let Some((db, key)) = ks.client_key(ekey) else {
                    return Ok(false);
                };
                if victims.iter().any(|(d, k)| *d == db && k == key) {
                    return Ok(false);
                }
                victims.push((db, key.to_vec()));
                Ok(true)
            };
            match evict_one(shared, ks, &mut pool, policy, &mut pick) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    log::warn!("eviction failed: {e}");
                    break;
                }
            }
        }
    }
    if victims.is_empty() {
        eviction.proposing.store(false, Ordering::Release);
        return Outcome::Fail;
    }
    crate::group::propose_evictions(shared, victims);
    Outcome::Running
}

/// Redis's `evictionTimeLimitUs`: None for unlimited.
fn time_limit(tenacity: u32) -> Option<Duration> {
    match tenacity {
        0..=10 => Some(Duration::from_micros(50 * u64::from(tenacity))),
        11..=99 => Some(Duration::from_micros(
            (500.0 * 1.15f64.powi(tenacity as i32 - 10)) as u64,
        )),
        _ => None,
    }
}

/// Deletes one key as `policy` chooses; false when there is none to
/// delete.
fn evict_one(
    shared: &Shared,
    ks: &Keyspace,
    pool: &mut Pool,
    policy: Policy,
    take: &mut dyn FnMut(&[u8]) -> crate::keyspace::Result<bool>,
) -> crate::keyspace::Result<bool> {
    let volatile = policy.is_volatile();
    if policy.is_random() {
        for _ in 0..EMPTY_ROUNDS {
            // A sample can come back empty with keys left (it landed on
            // the keyspace's own records only).
            let Some(candidate) = ks.eviction_sample(volatile, 1, false).pop() else {
                if !ks.has_evictable(volatile) {
                    return Ok(false);
                }
                continue;
            };
            if take(&candidate.ekey)? {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    if pool.policy != Some(policy) {
        // Scores of another policy rank by something else.
        pool.entries.clear();
        pool.policy = Some(policy);
    }
    let samples = shared.memory_limit.samples.load(Ordering::Relaxed).max(1) as usize;
    let ttl = policy == Policy::VolatileTtl;
    for _ in 0..EMPTY_ROUNDS {
        let sample = ks.eviction_sample(volatile, samples, !ttl);
        if sample.is_empty() && pool.entries.is_empty() && !ks.has_evictable(volatile) {
            return Ok(false);
        }
        for candidate in sample {
            let score = if ttl {
                u64::MAX - candidate.expire_at.unwrap_or(u64::MAX)
            } else {
                ks.access.eviction_score(candidate.access)
            };
            pool.insert(score, candidate.ekey);
        }
        // The best candidate that still exists goes; ones deleted since
        // they were pooled are dropped.
        while let Some((_, ekey)) = pool.entries.pop() {
            if take(&ekey)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Deletes stored key `ekey` for eviction (a durable delete like any
/// write's) and announces it (`evicted`); false if it was gone already.
fn evict(shared: &Shared, ks: &Keyspace, ekey: &[u8]) -> crate::keyspace::Result<bool> {
    let evicted = ks.evict(ekey)?;
    if evicted && shared.notifications.wants(crate::notify::EVICTED) {
        if let Some((db, key)) = ks.client_key(ekey) {
            crate::notify::publish(shared, crate::notify::EVICTED, "evicted", db, key);
        }
    }
    Ok(evicted)
}

impl Pool {
    /// Adds a candidate in score order (its old entry replaced), keeping
    /// the best `POOL_SIZE`.
    fn insert(&mut self, score: u64, ekey: Vec<u8>) {
        self.entries.retain(|(_, k)| *k != ekey);
        if self.entries.len() == POOL_SIZE && score <= self.entries[0].0 {
            return;
        }
        let at = self.entries.partition_point(|(s, _)| *s < score);
        self.entries.insert(at, (score, ekey));
        if self.entries.len() > POOL_SIZE {
            self.entries.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_keeps_the_sixteen_best_in_order() {
        let mut pool = Pool::default();
        for score in [5u64, 1, 9, 3, 7] {
            pool.insert(score, vec![score as u8]);
        }
        pool.insert(4, vec![9]);
        let scores: Vec<u64> = pool.entries.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            scores,
            [1, 3, 4, 5, 7],
            "a key pooled again takes its new score"
        );
        for score in 100..120u64 {
            pool.insert(score, vec![score as u8]);
        }
        assert_eq!(pool.entries.len(), POOL_SIZE);
        assert_eq!(pool.entries[0].0, 104);
        assert_eq!(pool.entries.last().unwrap().0, 119);
        pool.insert(2, vec![200]);
        assert_eq!(
            pool.entries[0].0, 104,
            "worse than the whole full pool: left out"
        );
    }

    #[test]
    fn tenacity_limits_are_redis_s() {
        assert_eq!(time_limit(0), Some(Duration::ZERO));
        assert_eq!(time_limit(10), Some(Duration::from_micros(500)));
        let eleven = time_limit(11).unwrap().as_micros();
        assert!((574..=575).contains(&eleven), "{eleven}");
        assert!(time_limit(99).unwrap() > Duration::from_secs(1));
        assert_eq!(time_limit(100), None);
    }

    #[test]
    fn policies_parse_by_name() {
        for policy in Policy::ALL {
            assert_eq!(Policy::parse(policy.name()), Some(policy));
        }
        assert_eq!(Policy::parse("ALLKEYS-LRU"), Some(Policy::AllKeysLru));
        assert_eq!(Policy::parse("lru"), None);
        assert!(Policy::VolatileTtl.is_volatile() && !Policy::AllKeysLfu.is_volatile());
        assert!(Policy::VolatileLfu.is_lfu() && !Policy::VolatileLru.is_lfu());
    }
}
