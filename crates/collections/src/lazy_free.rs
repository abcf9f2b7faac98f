//! Freeing large collections off the writer's path, as Redis's lazy free
//! does: a key deleted inside [`lazily`] (the server's UNLINK and FLUSHDB/
//! FLUSHALL ASYNC, as Redis's defaults have it; DEL, expiry and eviction
//! free at once) whose object would take more than [`THRESHOLD`] steps to
//! free is handed to a background thread, so the delete costs the same for
//! a million-member set as for a small one.
//!
//! Only the frontend's deletes come here (the checkpointer's shadow copy
//! frees its own, already in the background), so the counters are Redis's
//! INFO fields: `lazyfree_pending_objects` and `lazyfreed_objects`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

use crate::types::Object;

/// Redis's LAZYFREE_THRESHOLD: objects whose free effort is at most this
/// are freed at once, where handing them over would cost more.
pub const THRESHOLD: usize = 64;

static PENDING: AtomicU64 = AtomicU64::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);
static FREER: OnceLock<Option<Sender<Object>>> = OnceLock::new();

thread_local! {
    /// Whether this thread's deletes are lazy now (`lazily`).
    static LAZY: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's deletes freeing large objects in the
/// background.
pub fn lazily<R>(f: impl FnOnce() -> R) -> R {
    let before = LAZY.with(|lazy| lazy.replace(true));
    let result = f();
    LAZY.with(|lazy| lazy.set(before));
    result
}

/// Frees `object` now, or on the background thread if it is large.
pub fn dispose(object: Object) {
    if !LAZY.with(Cell::get) || free_effort(&object) <= THRESHOLD {
        return;
    }
    let Some(freer) = FREER.get_or_init(start) else {
        return; // No thread: freed here, at the end of this function.
    };
    PENDING.fetch_add(1, Ordering::Relaxed);
    if let Err(returned) = freer.send(object) {
        PENDING.fetch_sub(1, Ordering::Relaxed);
        drop(returned);
    }
}

/// Redis's lazyfreeGetFreeEffort, for Engram's structures: the elements
/// of a hash, set, sorted set or list; for a stream its nodes plus, per
/// consumer group, one and its pending entries.
pub fn free_effort(object: &Object) -> usize {
    match object {
        Object::Stream(stream) => {
            stream.node_count()
                + stream
                    .groups()
                    .values()
                    .map(|group| 1 + group.pel.len())
                    .sum::<usize>()
        }
        other => other.len(),
    }
}

/// Objects handed over and not freed yet (INFO `lazyfree_pending_objects`).
pub fn pending() -> u64 {
    PENDING.load(Ordering::Relaxed)
}

/// Objects the background thread has freed (INFO `lazyfreed_objects`).
pub fn freed() -> u64 {
    FREED.load(Ordering::Relaxed)
}

/// CONFIG RESETSTAT.
pub fn reset_freed() {
    FREED.store(0, Ordering::Relaxed);
}

fn start() -> Option<Sender<Object>> {
    let (sender, receiver) = channel::<Object>();
    let spawned = engram_threads::spawn("engram-lazyfree", move || {
        for object in receiver {
            drop(object);
            PENDING.fetch_sub(1, Ordering::Relaxed);
            FREED.fetch_add(1, Ordering::Relaxed);
        }
    });
    match spawned {
        Ok(_) => Some(sender),
        Err(e) => {
            log::warn!("no lazy-free thread ({e}): large objects are freed inline");
            None
        }
    }
}
