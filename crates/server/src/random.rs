//! The randomness of commands that write (SPOP, scripts' `math.random`):
//! from the thread's generator, or, on a replicated node's apply thread,
//! from a generator seeded by the entry being applied, so every node picks
//! the same members (`group::Applier` seeds it per entry).

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    static SEEDED: RefCell<Option<(u64, StdRng)>> = const { RefCell::new(None) };
}

/// Seeds this thread's generator (None: back to the thread's own).
pub fn seed(seed: Option<u64>) {
    SEEDED.with(|s| *s.borrow_mut() = seed.map(|seed| (seed, StdRng::seed_from_u64(seed))));
}

/// The seed set on this thread, if any.
pub fn seeded() -> Option<u64> {
    SEEDED.with(|s| s.borrow().as_ref().map(|(seed, _)| *seed))
}

/// Runs `f` with the generator commands must use.
pub fn with<T>(f: impl FnOnce(&mut dyn RngCore) -> T) -> T {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some((_, rng)) => f(rng),
        None => f(&mut rand::rng()),
    })
}

/// Runs `f` with the generator commands must use and whether their picks
/// must go by rank: on a replicated node's apply thread (seeded) they
/// must, since a hash table's slots depend on its history (a member that
/// loaded a set from a snapshot lays it out otherwise than one that grew
/// it) while its ranks depend on its contents only.
pub fn picking<T>(f: impl FnOnce(&mut dyn RngCore, bool) -> T) -> T {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some((_, rng)) => f(rng, true),
        None => f(&mut rand::rng(), false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_picks_everywhere() {
        let picks = |seed| {
            super::seed(Some(seed));
            let picked: Vec<u32> = (0..8).map(|_| with(|rng| rng.next_u32())).collect();
            super::seed(None);
            picked
        };
        assert_eq!(picks(7), picks(7));
        assert_ne!(picks(7), picks(8));
        assert_eq!(seeded(), None);
    }

    #[test]
    fn picks_go_by_rank_exactly_when_seeded() {
        assert!(!picking(|_, by_rank| by_rank));
        super::seed(Some(3));
        assert!(picking(|_, by_rank| by_rank));
        super::seed(None);
        assert!(!picking(|_, by_rank| by_rank));
    }
}
