//! The neutral value the codec reads and writes: a Redis value as plain
//! data, whatever encoding it came in, and its conversion into what the
//! keyspace stores (a string, or a collection object).

use engram_collections::types::{Hash, List, Object, Score, Set, SortedSet, Stream};

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    String(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    /// Members and scores, in any order.
    SortedSet(Vec<(Vec<u8>, f64)>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A stream, read straight into the collections' structure (entries,
    /// counters and groups have no plainer form).
    Stream(Box<Stream>),
}

/// A value as the keyspace stores it.
pub enum Stored {
    String(Vec<u8>),
    Collection(Object),
}

impl Value {
    /// The name TYPE replies with.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "string",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::SortedSet(_) => "zset",
            Value::Hash(_) => "hash",
            Value::Stream(_) => "stream",
        }
    }

    /// A collection without elements: Redis refuses to restore one, and
    /// skips one when it loads a file.
    pub fn is_empty_collection(&self) -> bool {
        match self {
            Value::String(_) => false,
            Value::List(items) | Value::Set(items) => items.is_empty(),
            Value::SortedSet(pairs) => pairs.is_empty(),
            Value::Hash(pairs) => pairs.is_empty(),
            // Redis keeps an empty stream (its last ID and groups).
            Value::Stream(_) => false,
        }
    }

    /// What the keyspace stores for this value. Refuses what Redis refuses
    /// when it loads one: repeated set members, hash fields or sorted set
    /// members, and NaN scores.
    pub fn into_stored(self) -> Result<Stored, String> {
        let object = match self {
            Value::String(bytes) => return Ok(Stored::String(bytes)),
            Value::List(items) => {
                let mut list = List::new();
                list.push_back(items.into_iter().map(Vec::into_boxed_slice));
                Object::List(list)
            }
            Value::Set(members) => {
                let mut set = Set::new();
                for member in members {
                    if !set.insert(member.into_boxed_slice()) {
                        return Err("duplicate set member".into());
                    }
                }
                Object::Set(set)
            }
            Value::SortedSet(pairs) => {
                let mut zset = SortedSet::new();
                for (member, score) in pairs {
                    let score = Score::new(score).ok_or("sorted set score is NaN")?;
                    if zset.insert(&member, score).is_some() {
                        return Err("duplicate sorted set member".into());
                    }
                }
                Object::SortedSet(zset)
            }
            Value::Hash(pairs) => {
                let mut hash = Hash::new();
                for (field, value) in pairs {
                    if hash
                        .insert(field.into_boxed_slice(), value.into_boxed_slice())
                        .is_some()
                    {
                        return Err("duplicate hash field".into());
                    }
                }
                Object::Hash(hash)
            }
            Value::Stream(stream) => Object::Stream(stream),
        };
        Ok(Stored::Collection(object))
    }

    /// The value of a stored collection (for tests and tools: DUMP writes
    /// straight from the object).
    pub fn from_object(object: &Object) -> Value {
        match object {
            Object::List(list) => Value::List(list.iter().map(<[u8]>::to_vec).collect()),
            Object::Set(set) => Value::Set(set.iter().map(<[u8]>::to_vec).collect()),
            Object::SortedSet(zset) => Value::SortedSet(
                zset.iter()
                    .map(|(member, score)| (member.to_vec(), score))
                    .collect(),
            ),
            Object::Hash(hash) => Value::Hash(
                hash.iter()
                    .map(|(field, value)| (field.to_vec(), value.to_vec()))
                    .collect(),
            ),
            Object::Stream(stream) => Value::Stream(stream.clone()),
        }
    }
}
