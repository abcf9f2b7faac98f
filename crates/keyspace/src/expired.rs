//! Keys deleted because they expired, kept for whoever asked to hear of
//! them: the server's `expired` keyspace notifications. Expiry happens
//! deep in the keyspace (a read that finds a key past its time, a write's
//! transaction, the active expiry cycle), where nothing knows pub/sub, so
//! the keyspace notes the keys and the server takes them (a pull, not a
//! callback up). Off by default: then expiry pays one relaxed load.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// At most this many keys wait to be taken; beyond it the oldest notes
/// are kept and newer ones dropped (counted), so a server that stopped
/// taking them cannot grow without bound.
const MAX_PENDING: usize = 1 << 20;

#[derive(Default)]
pub struct ExpiredKeys {
    on: AtomicBool,
    /// (client database, key) in the order they expired.
    pending: Mutex<Vec<(usize, Box<[u8]>)>>,
    dropped: std::sync::atomic::AtomicU64,
}

impl ExpiredKeys {
    pub fn set_recording(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
        if !on {
            self.pending.lock().clear();
        }
    }

    pub fn is_recording(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub(crate) fn note(&self, db: usize, key: &[u8]) {
        let mut pending = self.pending.lock();
        if pending.len() < MAX_PENDING {
            pending.push((db, key.into()));
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The keys noted since the last call, oldest first.
    pub fn take(&self) -> Vec<(usize, Box<[u8]>)> {
        if !self.is_recording() {
            return Vec::new();
        }
        std::mem::take(&mut *self.pending.lock())
    }

    /// Notes dropped because `MAX_PENDING` were waiting.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_kept_in_order_only_while_recording_and_bounded() {
        let expired = ExpiredKeys::default();
        assert!(expired.take().is_empty());
        expired.set_recording(true);
        expired.note(0, b"a");
        expired.note(3, b"b");
        assert_eq!(
            expired.take(),
            vec![(0, b"a".to_vec().into()), (3, b"b".to_vec().into())]
        );
        assert!(expired.take().is_empty());
        for _ in 0..MAX_PENDING + 5 {
            expired.note(0, b"k");
        }
        assert_eq!(expired.dropped(), 5);
        assert_eq!(expired.take().len(), MAX_PENDING);
        expired.note(0, b"x");
        expired.set_recording(false);
        assert!(expired.take().is_empty());
    }
}
