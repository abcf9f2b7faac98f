//! The keys this thread's writes changed, for whoever asked to hear of
//! them: the server's client-side caching (CLIENT TRACKING), which must
//! invalidate every key a write, an expiry or an eviction changes (Redis's
//! `signalModifiedKey`). Every change to a key already passes one place,
//! the WATCH flags (`key_groups::touch`); that place notes the key here.
//!
//! Per thread, so a command's handler, which runs on one thread from its
//! first read to its commit, takes exactly the keys it changed (and the
//! server knows who changed them: NOLOOP). Process-wide switch, off by
//! default: then a write pays one relaxed load for it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many holders want the notes (a server with tracking clients).
static WANTED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static KEYS: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// Starts (`true`) or stops one holder's interest; counted, so two
/// servers in one process do not turn each other's notes off.
pub fn want(on: bool) {
    if on {
        WANTED.fetch_add(1, Ordering::Relaxed);
    } else {
        WANTED.fetch_sub(1, Ordering::Relaxed);
    }
}

pub fn is_wanted() -> bool {
    WANTED.load(Ordering::Relaxed) > 0
}

/// Notes stored key `ekey` as changed by this thread.
pub(crate) fn note(ekey: &[u8]) {
    if is_wanted() {
        KEYS.with(|keys| keys.borrow_mut().push(ekey.into()));
    }
}

/// The stored keys this thread changed since the last call, in order
/// (a key may repeat); see `Keyspace::client_key` for their names.
pub fn take() -> Vec<Box<[u8]>> {
    KEYS.with(|keys| std::mem::take(&mut *keys.borrow_mut()))
}

/// Forgets this thread's notes (a FLUSHALL announces itself whole).
pub fn discard() {
    KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        keys.clear();
        keys.shrink_to(1024);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_only_while_wanted_and_per_thread() {
        note(b"\0before");
        assert!(take().is_empty());
        want(true);
        note(b"\0a");
        note(b"\0b");
        std::thread::spawn(|| note(b"\0elsewhere")).join().unwrap();
        assert_eq!(take(), vec![b"\0a".to_vec().into(), b"\0b".to_vec().into()]);
        assert!(take().is_empty());
        note(b"\0c");
        discard();
        assert!(take().is_empty());
        want(false);
        note(b"\0after");
        assert!(take().is_empty());
    }
}
