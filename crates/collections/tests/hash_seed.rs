//! The collections' hash seed is chosen once per process: a Raft group's
//! member fixes it at 0 before anything is hashed (`engram serve` with
//! `node-id` does), and a process that already hashed members with its
//! random seed is told it cannot (`serve` then refuses to start as a
//! member). Its own test binary: the seed is the process's.

use engram_collections::types::{fix_hash_seed, Set};

#[test]
fn the_seed_cannot_be_fixed_once_members_were_hashed_with_another() {
    let mut set = Set::default();
    set.insert(b"member".as_slice().into());
    assert!(set.contains(b"member"));
    // The random seed is 0 once in 2^64 runs.
    assert!(
        !fix_hash_seed(0),
        "the seed changed under members already hashed"
    );
    assert!(set.contains(b"member"), "the member is still found");
}
