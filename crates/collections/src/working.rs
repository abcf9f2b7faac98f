//! The checkpointer's working set: every key the archived log touches,
//! with its collection as replay leaves it and the version of its image
//! before the checkpoint.
//!
//! One map holds both, so replaying an operation costs one lookup to see
//! whether its key is loaded and the lookups `apply` makes, and writing the
//! images and updating the versions afterwards walks the map once, with no
//! second set of touched keys to keep in step, and no copy of a key per
//! operation just to ask whether it was seen.
//!
//! The map outlives a checkpoint (see `checkpoint::Scratch`): cleared, it
//! keeps its table, so the next checkpoint neither reallocates nor faults
//! it in again.

use hashbrown::hash_map::EntryRef;
use hashbrown::HashMap;

use crate::error::Result;
use crate::op::Bytes;
use crate::state::{Entry, Keys};

/// Key slots the working set keeps between checkpoints, at most (the
/// checkpointer's scratch tables are bounded alike: `checkpoint.rs`).
const RETAINED_KEYS: usize = 4 * 1024;

/// One touched key.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The key's collection as replay has left it so far (`None`: absent).
    pub entry: Option<Entry>,
    /// The version of the key's image before this checkpoint, if it had
    /// one (then the checkpoint supersedes it, or hides it by a tombstone).
    pub imaged: Option<u64>,
    /// A large list the log touched only at its ends so far, not decoded:
    /// the checkpoint holds its `SplicedList` (`splice.rs`); `entry` is
    /// `None` meanwhile, and the key is present.
    pub spliced: bool,
    /// The pieces the key's image before this checkpoint names (a list in
    /// pieces: `pieces.rs`), `(version, seq)`: those the new image does
    /// not name go once it is committed.
    pub pieces: Vec<(u64, u64)>,
}

impl Slot {
    /// A slot holding `entry` (or nothing), whose image was `imaged`.
    pub fn new(entry: Option<Entry>, imaged: Option<u64>) -> Slot {
        Slot {
            entry,
            imaged,
            spliced: false,
            pieces: Vec::new(),
        }
    }

    /// Whether the key exists as replay has left it.
    pub fn present(&self) -> bool {
        self.entry.is_some() || self.spliced
    }
}

#[derive(Default)]
pub(crate) struct WorkingSet {
    slots: HashMap<Bytes, Slot>,
}

impl WorkingSet {
    /// Empties the set, keeping its table for the next checkpoint.
    pub fn clear(&mut self) {
        self.slots.clear();
    }

    /// Frees the table if it is far larger than `keep` keys need: enough
    /// to skip the regrowth when checkpoints are alike, without one huge
    /// checkpoint pinning its table for ever (nor more than
    /// [`RETAINED_KEYS`] slots between checkpoints).
    pub fn trim(&mut self, keep: usize) {
        let keep = keep.min(RETAINED_KEYS);
        if self.slots.capacity() > 4 * keep || self.slots.capacity() > RETAINED_KEYS {
            self.slots.shrink_to(keep);
        }
    }

    /// Makes sure `key` is in the set, loading it with `load` the first
    /// time it is touched.
    pub fn touch(&mut self, key: &[u8], load: impl FnOnce() -> Result<Slot>) -> Result<()> {
        if let EntryRef::Vacant(vacant) = self.slots.entry_ref(key) {
            vacant.insert(load()?);
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Gives `key`, whose list was spliced, its ordinary entry (the list
    /// decoded and its edits replayed).
    pub fn materialized(&mut self, key: &[u8], entry: Entry) {
        let slot = self.slots.get_mut(key).expect("a spliced key is touched");
        debug_assert!(slot.spliced);
        slot.spliced = false;
        slot.entry = Some(entry);
    }

    /// `key`'s entry if it is loaded and not a spliced list (for warming:
    /// unlike `Keys::get`, no operation is about to read it).
    pub fn peek(&self, key: &[u8]) -> Option<&Entry> {
        self.slots.get(key)?.entry.as_ref()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Slot)> {
        self.slots.iter()
    }
}

/// What `apply` sees: the entries of the touched keys. Every key an
/// operation touches is one of `Op::keys`, which the replay loop touches
/// (loads) before applying it.
impl Keys for WorkingSet {
    fn get(&self, key: &[u8]) -> Option<&Entry> {
        let slot = self.slots.get(key)?;
        debug_assert!(!slot.spliced, "a spliced list read by apply");
        slot.entry.as_ref()
    }

    fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let slot = self.slots.get_mut(key)?;
        debug_assert!(!slot.spliced, "a spliced list changed by apply");
        slot.entry.as_mut()
    }

    fn take(&mut self, key: &[u8]) -> Option<Entry> {
        let slot = self.slots.get_mut(key)?;
        debug_assert!(!slot.spliced, "a spliced list taken by apply");
        slot.entry.take()
    }

    fn put(&mut self, key: &[u8], entry: Entry) {
        match self.slots.get_mut(key) {
            Some(slot) => slot.entry = Some(entry),
            // Not reached (see above); were it, the key would get an image
            // and the older one it has, if any, would be left for
            // recovery's garbage collection.
            None => {
                debug_assert!(false, "a key put before it was touched");
                self.slots.insert(key.into(), Slot::new(Some(entry), None));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Kind, Object};

    fn entry() -> Entry {
        Entry {
            object: Object::new(Kind::List),
            expire_at_ms: 0,
            access: Default::default(),
        }
    }

    #[test]
    fn a_key_is_loaded_once_and_take_leaves_it_touched() {
        let mut set = WorkingSet::default();
        let mut loads = 0;
        for _ in 0..3 {
            set.touch(b"k", || {
                loads += 1;
                Ok(Slot::new(Some(entry()), Some(7)))
            })
            .unwrap();
        }
        assert_eq!(loads, 1);
        assert!(set.get(b"k").is_some());
        assert!(set.take(b"k").is_some());
        assert!(set.get(b"k").is_none());
        // Gone, but still touched: its old image must be hidden.
        assert_eq!(set.len(), 1);
        let (_, slot) = set.iter().next().unwrap();
        assert!(slot.entry.is_none());
        assert_eq!(slot.imaged, Some(7));
        set.put(b"k", entry());
        assert!(set.get_mut(b"k").is_some());
        set.clear();
        assert_eq!(set.len(), 0);
    }
}
