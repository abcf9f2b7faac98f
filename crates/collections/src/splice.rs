//! A large list's checkpoint when the log touched it only at its ends.
//!
//! A checkpoint replays a key's records onto its previous image, so a list
//! is decoded whole (an allocation per element), changed, and encoded
//! whole again. For a queue — LPUSH at one end, RPOP or LTRIM at the
//! other, the list itself long — nearly all of that work rebuilds elements
//! no record touched: under `redis-benchmark -t lpush -P 16` the
//! checkpointer took a third of the server's CPU, most of it faulting in
//! and filling the decoded copy (BENCHMARKS.md, fourteenth session).
//!
//! A [`SplicedList`] stands for such a list in the checkpointer's working
//! set without decoding it: the old image's element count, how many of its
//! elements were popped from each end, and the elements pushed at each end
//! since. The new image is the pushed head, the old image's untouched
//! middle copied as bytes (the image's element boundaries are found by
//! stepping over the lengths, nothing decoded), and the pushed tail. Any
//! other operation on the key, or a pop or trim that would empty the list
//! (the key would go, and a later push would start a new key), first turns
//! it into the ordinary decoded entry ([`SplicedList::materialize`]), and
//! replay goes on as before: the image is byte for byte what decoding and
//! replaying would have written (tested below against `apply`).

use std::collections::VecDeque;

use crate::op::Op;
use crate::state::{Access, Entry};
use crate::types::{resolve_range, DecodeError, ListImage, Object};

/// One touched list, not decoded: its image and the edits at its ends.
/// The pushed elements are borrowed from the archived log the checkpoint
/// replays (`'log`), which stays mapped until the checkpoint ends: a
/// queue's checkpoint copied every element pushed since the last one into
/// an allocation of its own before writing it out.
#[derive(Debug)]
pub(crate) struct SplicedList<'log> {
    /// The version of the image it splices (the key's image before this
    /// checkpoint).
    pub version: u64,
    image: ListImage,
    expire_at_ms: u64,
    /// Elements pushed at the head since the image, head first.
    front: VecDeque<&'log [u8]>,
    /// Elements pushed at the tail since the image, head first.
    back: VecDeque<&'log [u8]>,
    /// The image's elements popped from the head and from the tail.
    skip_front: u64,
    skip_back: u64,
}

/// The key of an operation a [`SplicedList`] may take: a push, pop or
/// trim of one list.
pub(crate) fn target<'log>(op: &Op<&'log [u8]>) -> Option<&'log [u8]> {
    match op {
        Op::ListPush { key, .. } | Op::ListPop { key, .. } | Op::ListTrim { key, .. } => Some(key),
        _ => None,
    }
}

impl<'log> SplicedList<'log> {
    /// The list in `object_image` (an object's image, as the images store
    /// holds it after its header), or `None` when it is not a list.
    pub fn read(
        version: u64,
        expire_at_ms: u64,
        object_image: &[u8],
    ) -> Result<Option<SplicedList<'log>>, DecodeError> {
        Ok(ListImage::read(object_image)?.map(|image| SplicedList {
            version,
            image,
            expire_at_ms,
            front: VecDeque::new(),
            back: VecDeque::new(),
            skip_front: 0,
            skip_back: 0,
        }))
    }

    fn len(&self) -> u64 {
        self.front.len() as u64 + self.middle_len() + self.back.len() as u64
    }

    /// The image's elements still in the list.
    fn middle_len(&self) -> u64 {
        self.image.count - self.skip_front - self.skip_back
    }

    /// Applies `op` if it is a push, pop or trim that leaves the list
    /// non-empty, as `apply` would; false (and nothing changed) otherwise:
    /// then the caller materializes the list and applies `op` the ordinary
    /// way.
    pub fn apply(&mut self, op: &Op<&'log [u8]>) -> bool {
        match *op {
            Op::ListPush {
                front, ref values, ..
            } => {
                let values = values.iter().copied();
                if front {
                    // Each value goes to the head in turn: the last first.
                    for value in values {
                        self.front.push_front(value);
                    }
                } else {
                    self.back.extend(values);
                }
                true
            }
            Op::ListPop { front, count, .. } => {
                if count >= self.len() {
                    return false;
                }
                if front {
                    self.pop_front(count);
                } else {
                    self.pop_back(count);
                }
                true
            }
            Op::ListTrim { start, stop, .. } => {
                let len = self.len();
                let keep = resolve_range(start, stop, len as usize);
                if keep.is_empty() {
                    return false;
                }
                self.pop_back(len - keep.end as u64);
                self.pop_front(keep.start as u64);
                true
            }
            _ => false,
        }
    }

    fn pop_front(&mut self, mut count: u64) {
        let pushed = count.min(self.front.len() as u64);
        self.front.drain(..pushed as usize);
        count -= pushed;
        let old = count.min(self.middle_len());
        self.skip_front += old;
        count -= old;
        self.back.drain(..count as usize);
    }

    fn pop_back(&mut self, mut count: u64) {
        let pushed = count.min(self.back.len() as u64);
        self.back.truncate(self.back.len() - pushed as usize);
        count -= pushed;
        let old = count.min(self.middle_len());
        self.skip_back += old;
        count -= old;
        self.front.truncate(self.front.len() - count as usize);
    }

    /// The list's new image (an object image: what follows the images
    /// store's header) into `out`, `object_image` being the old one (the
    /// tests' form of [`SplicedList::write`]).
    #[cfg(test)]
    pub fn encode(&self, object_image: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
        let middle = self.middle(object_image)?;
        let before = out.len();
        self.write(middle, &mut |bytes| out.extend_from_slice(bytes));
        debug_assert_eq!(out.len() - before, self.image_bytes(middle));
        Ok(())
    }

    /// The old image's elements still in the list, as they lie in
    /// `object_image` (each a length and its bytes), found by stepping over
    /// the lengths: nothing decoded, nothing copied.
    pub fn middle<'i>(&self, object_image: &'i [u8]) -> Result<&'i [u8], DecodeError> {
        self.image
            .middle(object_image, self.skip_front, self.skip_back)
    }

    /// The bytes of the new image, `middle` being [`SplicedList::middle`].
    pub fn image_bytes(&self, middle: &[u8]) -> usize {
        let pushed: usize = self
            .front
            .iter()
            .chain(&self.back)
            .map(|element| ListImage::element_bytes(element))
            .sum();
        ListImage::header_bytes(self.len()) + pushed + middle.len()
    }

    /// Writes the new image through `write`: the header, the pushed head,
    /// `middle`, the pushed tail. The images store takes the pieces
    /// straight into the new record (`Store::put_written`): nothing of a
    /// queue's checkpoint is assembled in DRAM.
    pub fn write(&self, middle: &[u8], write: &mut impl FnMut(&[u8])) {
        let mut header = Vec::with_capacity(ListImage::header_bytes(self.len()));
        ListImage::write_header(self.len(), &mut header);
        write(&header);
        for element in &self.front {
            ListImage::write_element(element, write);
        }
        write(middle);
        for element in &self.back {
            ListImage::write_element(element, write);
        }
    }

    /// The expiry the image carries (unchanged: no push, pop or trim
    /// changes it).
    pub fn expire_at_ms(&self) -> u64 {
        self.expire_at_ms
    }

    /// The ordinary entry: the old image decoded, the edits applied.
    pub fn materialize(self, object_image: &[u8]) -> Result<Entry, DecodeError> {
        let Object::List(mut list) = Object::decode(object_image)? else {
            unreachable!("the image's kind byte was read as a list's (`SplicedList::read`)");
        };
        list.pop_front(self.skip_front as usize);
        list.pop_back(self.skip_back as usize);
        list.push_front(self.front.into_iter().rev().map(Box::from));
        list.push_back(self.back.into_iter().map(Box::from));
        Ok(Entry {
            object: Object::List(list),
            expire_at_ms: self.expire_at_ms,
            access: Access::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::apply;
    use crate::op::Bytes;
    use crate::types::List;
    use hashbrown::HashMap;
    use proptest::prelude::*;

    fn image_of(list: &List) -> Vec<u8> {
        let mut image = Vec::new();
        Object::List(list.clone()).encode(&mut image);
        image
    }

    fn edit() -> impl Strategy<Value = (u8, bool, u64, i64, i64, Vec<Vec<u8>>)> {
        (
            0u8..3,
            any::<bool>(),
            0u64..6,
            -8i64..8,
            -8i64..8,
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..4),
        )
    }

    proptest! {
        /// Whatever the pushes, pops and trims, the spliced image is the
        /// one decoding and replaying would have written, and so is the
        /// materialized entry; an edit the splice refuses is one that
        /// empties the list.
        #[test]
        fn a_spliced_image_is_the_replayed_one(
            start in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 1..40),
            edits in prop::collection::vec(edit(), 0..30),
        ) {
            let mut list = List::new();
            list.push_back(start.iter().map(|item| item.clone().into_boxed_slice()));
            let old = image_of(&list);
            // What the checkpoint would replay onto: the decoded key, with
            // the operations applied by `apply` itself.
            let mut keys: HashMap<Bytes, Entry> = HashMap::new();
            keys.insert(
                Bytes::from(&b"k"[..]),
                Entry { object: Object::List(list.clone()), expire_at_ms: 1234, access: Access::default() },
            );
            let mut spliced = SplicedList::read(7, 1234, &old).unwrap().unwrap();
            for (kind, front, count, start, stop, values) in &edits {
                let values: Vec<&[u8]> = values.iter().map(|v| &v[..]).collect();
                let op = match kind {
                    0 => Op::ListPush { key: &b"k"[..], front: *front, values },
                    1 => Op::ListPop { key: &b"k"[..], front: *front, count: *count },
                    _ => Op::ListTrim { key: &b"k"[..], start: *start, stop: *stop },
                };
                let accepted = spliced.apply(&op);
                apply(&mut keys, op.clone());
                let Some(entry) = keys.get(&b"k"[..]) else {
                    // The list emptied, and the key went: the splice
                    // must have refused exactly that.
                    prop_assert!(!accepted, "accepted {op:?}, which empties the list");
                    break;
                };
                prop_assert!(accepted, "refused {op:?}, which leaves the list non-empty");
                let Object::List(replayed) = &entry.object else { panic!("not a list") };
                list = replayed.clone();
                let mut image = Vec::new();
                spliced.encode(&old, &mut image).unwrap();
                prop_assert_eq!(&image, &image_of(&list));
            }
            let entry = spliced.materialize(&old).unwrap();
            prop_assert_eq!(entry.expire_at_ms, 1234);
            let Object::List(materialized) = entry.object else { panic!("not a list") };
            prop_assert_eq!(materialized, list);
        }
    }

    #[test]
    fn only_lists_are_spliced_and_damage_is_an_error() {
        let mut set_image = Vec::new();
        let mut set = crate::types::Set::default();
        set.insert(b"m".as_slice().into());
        Object::Set(set).encode(&mut set_image);
        assert!(SplicedList::read(1, 0, &set_image).unwrap().is_none());
        let mut list = List::new();
        list.push_back([b"a".as_slice().into(), b"bc".as_slice().into()]);
        let image = image_of(&list);
        let spliced = SplicedList::read(1, 0, &image).unwrap().unwrap();
        // An element running past the image, and bytes after the last.
        assert!(spliced
            .encode(&image[..image.len() - 1], &mut Vec::new())
            .is_err());
        let mut longer = image.clone();
        longer.push(0);
        assert!(spliced.encode(&longer, &mut Vec::new()).is_err());
        // A count larger than the bytes could hold.
        assert!(SplicedList::read(1, 0, &image[..3]).is_err());
    }
}
