//! The in-DRAM values of Redis's collection types, and their images.
//!
//! - [`Hash`](struct@Hash), [`Set`]: entries in hash order in a
//!   `HashedMap` (an ordered open-addressing table, short keys held in
//!   their slots: `inline_key`), so HSCAN and SSCAN cursors are hash values.
//! - [`SortedSet`]: member -> score in a `HashedMap` plus a [`RankedMap`]
//!   ordered by `(score, member)`, like Redis's dict + skiplist.
//! - [`List`]: elements packed end to end in nodes of up to 8 KiB, like
//!   Redis's quicklist of listpacks.
//! - [`Object`]: one of the above, the value of a collection key; its
//!   checkpoint image format is documented in `codec`.
//!
//! These are plain single-owner data structures: they take no locks and
//! know nothing of keys, expiry or the operation log. The keyspace that owns
//! them decides who may touch them; making changes durable is the job of the
//! crate's operation log and checkpoints.

mod codec;
mod hash;
mod hashed;
mod hashed_map;
mod inline_key;
mod list;
pub mod ranked;
mod set;
pub mod stream;
mod zset;

pub use codec::{DecodeError, ListImage, PieceRun, PiecesImage, FORMAT_VERSION};
pub use hash::{FieldValue, FieldWarm, Hash, WARM_FIELD_AHEAD};
pub use hashed::fix_seed as fix_hash_seed;
pub use list::{resolve_index, resolve_range, InsertPosition, List};
pub use ranked::RankedMap;
pub use set::Set;
pub use stream::{Stream, StreamEntry, StreamId};
pub use zset::{LexBound, Score, ScoreBound, SortedSet};

/// Which collection type a key holds: what TYPE replies and WRONGTYPE checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A Redis hash.
    Hash,
    /// A Redis set.
    Set,
    /// A Redis sorted set.
    SortedSet,
    /// A Redis list.
    List,
    /// A Redis stream.
    Stream,
}

impl Kind {
    /// The name the TYPE command replies with.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::SortedSet => "zset",
            Kind::List => "list",
            Kind::Stream => "stream",
        }
    }
}

/// The value of one collection key.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// A hash (HSET and friends).
    Hash(Hash),
    /// A set (SADD and friends).
    Set(Set),
    /// A sorted set (ZADD and friends).
    SortedSet(SortedSet),
    /// A list (LPUSH and friends).
    List(List),
    /// A stream (XADD and friends); boxed, it is the largest.
    Stream(Box<Stream>),
}

impl Object {
    /// An empty object of `kind`, for the first write to a new key.
    pub fn new(kind: Kind) -> Object {
        match kind {
            Kind::Hash => Object::Hash(Hash::new()),
            Kind::Set => Object::Set(Set::new()),
            Kind::SortedSet => Object::SortedSet(SortedSet::new()),
            Kind::List => Object::List(List::new()),
            Kind::Stream => Object::Stream(Box::default()),
        }
    }

    /// Which type this is.
    pub fn kind(&self) -> Kind {
        match self {
            Object::Hash(_) => Kind::Hash,
            Object::Set(_) => Kind::Set,
            Object::SortedSet(_) => Kind::SortedSet,
            Object::List(_) => Kind::List,
            Object::Stream(_) => Kind::Stream,
        }
    }

    /// Number of fields, members or elements.
    pub fn len(&self) -> usize {
        match self {
            Object::Hash(hash) => hash.len(),
            Object::Set(set) => set.len(),
            Object::SortedSet(zset) => zset.len(),
            Object::List(list) => list.len(),
            Object::Stream(stream) => stream.len(),
        }
    }

    /// Whether the object is empty; Redis deletes such keys. A stream is
    /// never empty in this sense: it stays when its last entry goes (with
    /// its last ID and groups), as in Redis.
    pub fn is_empty(&self) -> bool {
        match self {
            Object::Stream(_) => false,
            _ => self.len() == 0,
        }
    }

    /// Estimated heap bytes owned by the object (not counting the `Object`
    /// itself), for INFO memory and eviction. O(1); each type documents what
    /// its estimate counts.
    pub fn approx_heap_bytes(&self) -> usize {
        match self {
            Object::Hash(hash) => hash.approx_heap_bytes(),
            Object::Set(set) => set.approx_heap_bytes(),
            Object::SortedSet(zset) => zset.approx_heap_bytes(),
            Object::List(list) => list.approx_heap_bytes(),
            Object::Stream(stream) => stream.approx_heap_bytes(),
        }
    }
}

impl From<Hash> for Object {
    fn from(hash: Hash) -> Self {
        Object::Hash(hash)
    }
}

impl From<Set> for Object {
    fn from(set: Set) -> Self {
        Object::Set(set)
    }
}

impl From<SortedSet> for Object {
    fn from(zset: SortedSet) -> Self {
        Object::SortedSet(zset)
    }
}

impl From<Stream> for Object {
    fn from(stream: Stream) -> Self {
        Object::Stream(Box::new(stream))
    }
}

impl From<List> for Object {
    fn from(list: List) -> Self {
        Object::List(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_name_themselves_as_redis_does() {
        for (kind, name) in [
            (Kind::Hash, "hash"),
            (Kind::Set, "set"),
            (Kind::SortedSet, "zset"),
            (Kind::List, "list"),
            (Kind::Stream, "stream"),
        ] {
            let object = Object::new(kind);
            assert_eq!(object.kind(), kind);
            assert_eq!(kind.name(), name);
            assert_eq!(object.is_empty(), kind != Kind::Stream);
            assert_eq!(object.len(), 0);
        }
    }

    #[test]
    fn heap_estimate_grows_with_content() {
        let mut hash = Hash::new();
        let empty = hash.approx_heap_bytes();
        hash.insert(vec![0; 1000].into(), vec![0; 1000].into());
        assert!(Object::from(hash).approx_heap_bytes() >= empty + 2000);
    }
}
