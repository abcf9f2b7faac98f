//! Reading values: the object that follows a type byte, in a DUMP payload
//! or after a key in a file (`file` reads the rest of a file).

use std::borrow::Cow;

use super::encodings::{intset, listpack, ziplist, zipmap, Item};
use super::error::{Error, Result};
use super::input::Input;
use super::types;
use super::value::Value;

/// Quicklist 2 node containers.
const CONTAINER_PLAIN: u64 = 1;
const CONTAINER_PACKED: u64 = 2;

/// Reads the value of type `ty` at the input's position.
pub fn read_object(input: &mut Input, ty: u8) -> Result<Value> {
    let at = input.offset();
    let value = match ty {
        types::STRING => Value::String(input.string()?.into_owned()),
        types::LIST => Value::List(strings(input, "list length")?),
        types::SET => Value::Set(strings(input, "set size")?),
        types::ZSET | types::ZSET_2 => {
            let n = input.count("sorted set size", 2)?;
            let mut pairs = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                let member = input.string()?.into_owned();
                let score = if ty == types::ZSET_2 {
                    input.f64_le()?
                } else {
                    input.text_double()?
                };
                pairs.push((member, score));
            }
            Value::SortedSet(pairs)
        }
        types::HASH => {
            let n = input.count("hash size", 2)?;
            let mut pairs = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                let field = input.string()?.into_owned();
                let value = input.string()?.into_owned();
                pairs.push((field, value));
            }
            Value::Hash(pairs)
        }
        types::LIST_QUICKLIST | types::LIST_QUICKLIST_2 => {
            let nodes = input.count("quicklist node count", 2)?;
            let mut items = Vec::new();
            for _ in 0..nodes {
                let container = if ty == types::LIST_QUICKLIST_2 {
                    input.length()?
                } else {
                    CONTAINER_PACKED
                };
                let node_at = input.offset();
                let blob = input.string()?;
                match container {
                    CONTAINER_PLAIN => items.push(blob.into_owned()),
                    CONTAINER_PACKED => {
                        let entries = if ty == types::LIST_QUICKLIST_2 {
                            listpack::entries(&blob)
                        } else {
                            ziplist::entries(&blob)
                        };
                        let entries = entries.map_err(|e| Error::at(node_at, e))?;
                        // An empty node adds nothing (Redis skips them too).
                        items.extend(entries.into_iter().map(Item::to_vec));
                    }
                    other => {
                        return Err(Error::at(
                            node_at,
                            format!("unknown quicklist container {other}"),
                        ))
                    }
                }
            }
            Value::List(items)
        }
        types::LIST_ZIPLIST => Value::List(with_items(input, ziplist::entries, |_, items| {
            Ok(items.iter().map(|item| item.to_vec()).collect())
        })?),
        types::SET_INTSET => {
            let blob_at = input.offset();
            let blob = input.string()?;
            let members = intset::members(&blob).map_err(|e| Error::at(blob_at, e))?;
            Value::Set(members.into_iter().map(|n| Item::Int(n).to_vec()).collect())
        }
        types::ZSET_ZIPLIST | types::ZSET_LISTPACK => {
            let decode = if ty == types::ZSET_ZIPLIST {
                ziplist::entries
            } else {
                listpack::entries
            };
            Value::SortedSet(with_items(input, decode, |at, items| {
                pairs_of(items, at)?
                    .map(|pair| {
                        let score = pair[1].to_score().ok_or_else(|| {
                            Error::at(at, "a sorted set score that is not a number")
                        })?;
                        Ok((pair[0].to_vec(), score))
                    })
                    .collect()
            })?)
        }
        types::HASH_ZIPLIST | types::HASH_LISTPACK => {
            let decode = if ty == types::HASH_ZIPLIST {
                ziplist::entries
            } else {
                listpack::entries
            };
            Value::Hash(with_items(input, decode, |at, items| {
                Ok(pairs_of(items, at)?
                    .map(|pair| (pair[0].to_vec(), pair[1].to_vec()))
                    .collect())
            })?)
        }
        types::HASH_ZIPMAP => {
            let blob_at = input.offset();
            let blob = input.string()?;
            let pairs = zipmap::pairs(&blob).map_err(|e| Error::at(blob_at, e))?;
            Value::Hash(
                pairs
                    .into_iter()
                    .map(|(field, value)| (field.to_vec(), value.to_vec()))
                    .collect(),
            )
        }
        types::MODULE | types::MODULE_2 => {
            return Err(Error::unsupported(
                at,
                format!("a module value (RDB type {ty}): Engram has no modules"),
            ))
        }
        types::STREAM_LISTPACKS | types::STREAM_LISTPACKS_2 | types::STREAM_LISTPACKS_3 => {
            Value::Stream(Box::new(super::stream::read(input, ty)?))
        }
        other => return Err(Error::at(at, format!("unknown value type {other}"))),
    };
    Ok(value)
}

fn strings(input: &mut Input, what: &str) -> Result<Vec<Vec<u8>>> {
    let n = input.count(what, 1)?;
    let mut items = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        items.push(input.string()?.into_owned());
    }
    Ok(items)
}

/// Decodes the encoded blob (a string) at the input's position and hands
/// its entries, and the blob's offset for errors, to `f`.
fn with_items<R>(
    input: &mut Input,
    decode: fn(&[u8]) -> std::result::Result<Vec<Item<'_>>, String>,
    f: impl FnOnce(u64, &[Item]) -> Result<R>,
) -> Result<R> {
    let at = input.offset();
    let blob: Cow<[u8]> = input.string()?;
    let items = decode(&blob).map_err(|e| Error::at(at, e))?;
    f(at, &items)
}

fn pairs_of<'i, 'b>(
    items: &'i [Item<'b>],
    at: u64,
) -> Result<std::slice::ChunksExact<'i, Item<'b>>> {
    if !items.len().is_multiple_of(2) {
        return Err(Error::at(at, "an odd number of entries where pairs belong"));
    }
    Ok(items.chunks_exact(2))
}
