//! `Key`: a `HashedMap` key held in its slot when short, on the heap
//! otherwise.
//!
//! Most members and fields are short (ids, names, `element:000000012345`).
//! Held in the slot, such a key is compared on the cache line the probe
//! already reads, where a boxed key cost a second cache miss on every hit
//! (the `memcmp` of a SADD to a 100,000-member set was 5% of the server's
//! samples), and it costs no allocation. The slot grows by 8 bytes (24
//! instead of the box's 16), which the saved allocation more than pays
//! for up to [`INLINE`] bytes.

use std::ops::Deref;

/// The longest key held in the slot: what fits beside the tag and the
/// length in the 24 bytes a heap key's tag and box take.
pub(crate) const INLINE: usize = 22;

#[derive(Clone)]
pub(crate) enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

// The point of the type: no bigger than a tag and a box.
const _: () = assert!(std::mem::size_of::<Key>() == 24);

impl Key {
    pub(crate) fn new(key: &[u8]) -> Key {
        if key.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            Key::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            Key::Heap(key.into())
        }
    }

    /// A key from one already boxed: kept boxed when long, copied into
    /// the slot (and the box freed) when short.
    pub(crate) fn from_box(key: Box<[u8]>) -> Key {
        if key.len() <= INLINE {
            Key::new(&key)
        } else {
            Key::Heap(key)
        }
    }

    pub(crate) fn into_box(self) -> Box<[u8]> {
        match self {
            Key::Heap(key) => key,
            Key::Inline { .. } => (*self).into(),
        }
    }

    /// Whether the key has an allocation of its own.
    pub(crate) fn is_heap(&self) -> bool {
        matches!(self, Key::Heap(_))
    }
}

impl Deref for Key {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(key) => key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_stay_inline_and_long_ones_go_to_the_heap() {
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 100] {
            let bytes: Vec<u8> = (0..len as u8).collect();
            for key in [Key::new(&bytes), Key::from_box(bytes.clone().into())] {
                assert_eq!(&*key, &bytes[..], "len {len}");
                assert_eq!(key.is_heap(), len > INLINE, "len {len}");
                assert_eq!(&*key.clone().into_box(), &bytes[..]);
            }
        }
    }

    #[test]
    fn a_slot_with_a_key_is_as_small_as_promised() {
        // Option's None takes a spare tag value: no extra word per slot.
        assert_eq!(std::mem::size_of::<Option<(u64, Key)>>(), 32);
    }
}
