//! `client-output-buffer-limit`: how much output may wait for a client
//! before the server gives up on it, per class of client, as Redis 7.0 has
//! it (`<class> <hard> <soft> <soft seconds>`, classes `normal`, `slave`
//! (alias `replica`) and `pubsub`; defaults `normal 0 0 0 slave 268435456
//! 67108864 60 pubsub 33554432 8388608 60`; 0 turns a limit off).
//!
//! A client whose pending output reaches the hard limit, or stays at or
//! over the soft limit for longer than the soft seconds, is disconnected
//! and the disconnection logged, as Redis does. Why it matters here: a
//! subscriber that never reads would otherwise make every PUBLISH grow its
//! queue (`outbox`) without end. The limits are atomics: checking them is
//! a relaxed load or two, and the `normal` class costs an ordinary command
//! one load while it is unlimited (the default).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Redis's output-buffer classes, in the order CONFIG GET lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Normal = 0,
    /// Replicas. Engram has none (replication is Raft's), but the class is
    /// kept and shown, as configuration files name it.
    Slave = 1,
    /// A client subscribed to a channel, pattern or shard channel.
    Pubsub = 2,
}

const CLASSES: [(Class, &str); 3] = [
    (Class::Normal, "normal"),
    (Class::Slave, "slave"),
    (Class::Pubsub, "pubsub"),
];

#[derive(Default)]
struct Limit {
    hard: AtomicU64,
    soft: AtomicU64,
    soft_seconds: AtomicU64,
    /// Hard or soft is set: the one load an unlimited class costs.
    limited: AtomicBool,
}

/// The three classes' limits (one per server, in `Shared`).
pub struct OutputLimits {
    limits: [Limit; 3],
}

/// A client's soft-limit clock: when its output first stayed over the
/// soft limit (None while under it).
#[derive(Default, Debug)]
pub struct SoftClock(Option<Instant>);

impl Default for OutputLimits {
    fn default() -> Self {
        let limits = OutputLimits {
            limits: Default::default(),
        };
        limits
            .set(crate::redis_params::OUTPUT_LIMIT_DEFAULT)
            .expect("the default limits parse");
        limits
    }
}

impl OutputLimits {
    /// Applies `value` (already checked by `redis_params`) over the current
    /// limits: as in Redis, only the classes it names change.
    pub fn set(&self, value: &str) -> Result<(), String> {
        for (class, hard, soft, seconds) in parse(value)? {
            let limit = &self.limits[class as usize];
            limit.hard.store(hard, Ordering::Relaxed);
            limit.soft.store(soft, Ordering::Relaxed);
            limit.soft_seconds.store(seconds, Ordering::Relaxed);
            limit
                .limited
                .store(hard != 0 || soft != 0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The value as CONFIG GET shows it: every class, sizes in bytes.
    pub fn render(&self) -> String {
        CLASSES
            .iter()
            .map(|&(class, name)| {
                let limit = &self.limits[class as usize];
                format!(
                    "{name} {} {} {}",
                    limit.hard.load(Ordering::Relaxed),
                    limit.soft.load(Ordering::Relaxed),
                    limit.soft_seconds.load(Ordering::Relaxed)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Whether `class` has any limit (both 0: nothing to check).
    pub fn is_limited(&self, class: Class) -> bool {
        self.limits[class as usize].limited.load(Ordering::Relaxed)
    }

    /// Whether a client of `class` with `pending` bytes of output must be
    /// disconnected now (Redis's `checkClientOutputBufferLimits`): at or
    /// over the hard limit, or over the soft limit continuously for more
    /// than its seconds (`clock` remembers since when).
    pub fn exceeded(&self, class: Class, pending: usize, clock: &mut SoftClock) -> bool {
        let limit = &self.limits[class as usize];
        let pending = pending as u64;
        let hard = limit.hard.load(Ordering::Relaxed);
        if hard != 0 && pending >= hard {
            return true;
        }
        let soft = limit.soft.load(Ordering::Relaxed);
        if soft == 0 || pending < soft {
            clock.0 = None;
            return false;
        }
        match clock.0 {
            // The first time over: the clock starts.
            None => {
                clock.0 = Some(Instant::now());
                false
            }
            Some(since) => since.elapsed().as_secs() > limit.soft_seconds.load(Ordering::Relaxed),
        }
    }
}

/// `<class> <hard> <soft> <seconds>` groups, sizes with Redis's units.
fn parse(value: &str) -> Result<Vec<(Class, u64, u64, u64)>, String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    if !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    words
        .chunks(4)
        .map(|group| {
            let class = match group[0].to_ascii_lowercase().as_str() {
                "normal" => Class::Normal,
                "slave" | "replica" => Class::Slave,
                "pubsub" => Class::Pubsub,
                _ => {
                    return Err(
                        "Invalid client class specified in buffer limit configuration.".into(),
                    )
                }
            };
            let size = |word: &str| {
                crate::redis_params::memory_value(word)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| {
                        "Error in hard, soft or soft_seconds setting in buffer limit \
                         configuration."
                            .to_string()
                    })
            };
            let seconds = group[3].parse::<u64>().map_err(|_| {
                "Error in hard, soft or soft_seconds setting in buffer limit configuration."
                    .to_string()
            })?;
            Ok((class, size(group[1])?, size(group[2])?, seconds))
        })
        .collect()
}

/// Checks a value as Redis does before anything changes (the whole value
/// or nothing).
pub fn check(value: &str) -> Result<(), String> {
    parse(value).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_partial_updates_render_like_redis() {
        let limits = OutputLimits::default();
        assert_eq!(
            limits.render(),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        limits.set("pubsub 1mb 512kb 5 replica 1 2 3").unwrap();
        assert_eq!(
            limits.render(),
            "normal 0 0 0 slave 1 2 3 pubsub 1048576 524288 5"
        );
        assert!(!limits.is_limited(Class::Normal));
        assert!(limits.is_limited(Class::Pubsub));
        assert!(check("normal 1 2").is_err());
        assert!(check("master 1 2 3").is_err());
        assert!(check("normal x 2 3").is_err());
        assert!(check("normal 1 2 -3").is_err());
    }

    #[test]
    fn hard_at_once_soft_after_its_seconds() {
        let limits = OutputLimits::default();
        limits.set("pubsub 100 10 0").unwrap();
        let mut clock = SoftClock::default();
        assert!(!limits.exceeded(Class::Pubsub, 9, &mut clock));
        // Over soft: the clock starts; not yet.
        assert!(!limits.exceeded(Class::Pubsub, 10, &mut clock));
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert!(limits.exceeded(Class::Pubsub, 10, &mut clock));
        // Back under: the clock stops.
        assert!(!limits.exceeded(Class::Pubsub, 5, &mut clock));
        assert!(clock.0.is_none());
        assert!(limits.exceeded(Class::Pubsub, 100, &mut clock));
        // Normal is unlimited by default.
        assert!(!limits.exceeded(Class::Normal, usize::MAX, &mut clock));
    }
}
