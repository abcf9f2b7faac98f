//! The data set of the timed parts: YCSB's records.
//!
//! Record `id` is the key `user` followed by `id` in 12 decimal digits (16
//! bytes, like YCSB's `user…` keys), holding `fields` fields named `field0`,
//! `field1`, ... of `field_bytes` bytes each: over collections a hash, over
//! strings one value of `fields × field_bytes` bytes (the fields side by
//! side, as YCSB's key-value bindings store a record). Values come from a
//! pool of random bytes ([`ValuePool`]), so nothing compresses them; field
//! `f` of record `id` at version `v` is `values.value(id × fields + f, v)`,
//! and the prefill writes version 0.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use engram_collections::types::Object;
use engram_collections::{Collections, Entry, Op};
use engram_engine::Store;
use indicatif::ProgressBar;

use super::error::{Result, TimelineError};
use crate::workload::{slice, ValuePool};

pub const KEY_PREFIX: &[u8; 4] = b"user";
/// Decimal digits of the record number in a key.
pub const KEY_DIGITS: usize = 12;
pub const KEY_BYTES: usize = KEY_PREFIX.len() + KEY_DIGITS;
/// Record numbers must fit the key's digits.
pub const MAX_RECORDS: u64 = 1_000_000_000_000;
/// More fields than this per record is a typo (YCSB's default is 10).
pub const MAX_FIELDS: usize = 1000;
/// The prefill writes (and publishes its progress) in chunks of this many
/// records.
pub const PROGRESS_STEP: u64 = 1024;

/// The records' shape, shared by every timed part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub records: u64,
    pub fields: usize,
    pub field_bytes: usize,
}

impl Shape {
    /// Bytes of one record's value over strings.
    pub fn record_bytes(&self) -> usize {
        self.fields * self.field_bytes
    }
}

/// Writes record `id`'s key into `key`.
#[inline]
pub fn fill_key(id: u64, key: &mut [u8; KEY_BYTES]) {
    debug_assert!(id < MAX_RECORDS);
    key[..KEY_PREFIX.len()].copy_from_slice(KEY_PREFIX);
    let mut rest = id;
    for digit in key[KEY_PREFIX.len()..].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
}

pub fn key(id: u64) -> [u8; KEY_BYTES] {
    let mut key = [0u8; KEY_BYTES];
    fill_key(id, &mut key);
    key
}

/// `field0`, `field1`, ...: built once, indexed by field number.
pub fn field_names(fields: usize) -> Vec<Box<[u8]>> {
    (0..fields)
        .map(|f| format!("field{f}").into_bytes().into_boxed_slice())
        .collect()
}

/// The pair a write of field `field` of record `id` at `version` logs.
pub fn field_pair(
    names: &[Box<[u8]>],
    values: &ValuePool,
    shape: &Shape,
    id: u64,
    field: usize,
    version: u64,
) -> (Box<[u8]>, Box<[u8]>) {
    (
        names[field].clone(),
        field_value(values, shape, id, field, version).into(),
    )
}

/// Field `field` of record `id` at `version`.
pub fn field_value<'a>(
    values: &'a ValuePool,
    shape: &Shape,
    id: u64,
    field: usize,
    version: u64,
) -> &'a [u8] {
    values.value(id * shape.fields as u64 + field as u64, version)
}

/// The HSET that creates record `id` (version 0 of every field).
pub fn record_op(names: &[Box<[u8]>], values: &ValuePool, shape: &Shape, id: u64) -> Op {
    Op::HashSet {
        key: key(id).into(),
        pairs: (0..shape.fields)
            .map(|field| field_pair(names, values, shape, id, field, 0))
            .collect(),
    }
}

/// Record `id`'s value over strings at `version`.
pub fn string_value(values: &ValuePool, id: u64, version: u64) -> &[u8] {
    values.value(id, version)
}

/// Copies every field of a record's hash into `out` (HGETALL's work);
/// returns the number of fields, or `None` when `entry` is no hash.
pub fn copy_all_fields(entry: Option<&Entry>, out: &mut Vec<u8>) -> Option<usize> {
    match entry {
        Some(Entry {
            object: Object::Hash(hash),
            ..
        }) => {
            out.clear();
            for (field, value) in hash.iter() {
                out.extend_from_slice(field);
                out.extend_from_slice(value);
            }
            Some(hash.len())
        }
        _ => None,
    }
}

/// Copies one field's value into `out` (HGET's work); its length, or
/// `None` when the record or the field is missing.
pub fn copy_field(entry: Option<&Entry>, field: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    match entry {
        Some(Entry {
            object: Object::Hash(hash),
            ..
        }) => hash.get(field).map(|value| {
            out.clear();
            out.extend_from_slice(value);
            value.len()
        }),
        _ => None,
    }
}

/// Writes records `0..records` with `threads` threads, each over a
/// consecutive slice of them in chunks of [`PROGRESS_STEP`] records:
/// `write(state, chunk)` with the state `open(thread)` made on the thread
/// (a connection, or nothing). Advances `bar` after each chunk; returns the
/// time it all took.
pub fn write_in_parallel<S>(
    records: u64,
    threads: usize,
    bar: &ProgressBar,
    open: impl Fn(usize) -> Result<S> + Sync,
    write: impl Fn(&mut S, Range<u64>) -> Result<()> + Sync,
) -> Result<Duration> {
    let began = Instant::now();
    let done = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let (open, write, done) = (&open, &write, &done);
                scope.spawn(move || -> Result<()> {
                    let mut state = open(thread)?;
                    let ids = slice(0, records, thread, threads);
                    let mut from = ids.start;
                    while from < ids.end {
                        let to = ids.end.min(from + PROGRESS_STEP);
                        write(&mut state, from..to)?;
                        let total = done.fetch_add(to - from, Ordering::Relaxed);
                        bar.set_position(total + to - from);
                        from = to;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(began.elapsed())
}

/// [`write_in_parallel`] with nothing held per thread: `write(id)` for
/// each record.
pub fn write_each(
    records: u64,
    threads: usize,
    bar: &ProgressBar,
    write: impl Fn(u64) -> Result<()> + Sync,
) -> Result<Duration> {
    write_in_parallel(
        records,
        threads,
        bar,
        |_| Ok(()),
        |_, ids| ids.into_iter().try_for_each(&write),
    )
}

/// `found` keys where `expected` should be after the prefill: an error.
pub fn check_prefilled(store: &'static str, found: u64, expected: u64) -> Result<()> {
    if found != expected {
        return Err(TimelineError::WrongKeyCount {
            store,
            when: "after the prefill",
            found,
            expected,
        });
    }
    Ok(())
}

/// Creates records `0..shape.records` as hashes with `threads` threads
/// (each a consecutive slice, one logged HSET per record), then checks the
/// key count. `extra(id)` may add operations to a record's write (the
/// range index of YCSB E), creating `extra_keys` keys in all.
pub fn prefill_collections(
    collections: &Collections,
    shape: &Shape,
    values: &ValuePool,
    threads: usize,
    bar: &ProgressBar,
    extra: &(dyn Fn(u64) -> Vec<Op> + Sync),
    extra_keys: u64,
) -> Result<Duration> {
    let names = field_names(shape.fields);
    let elapsed = write_each(shape.records, threads, bar, |id| {
        let mut ops = vec![record_op(&names, values, shape, id)];
        ops.extend(extra(id));
        collections.write(ops)?;
        Ok(())
    })?;
    check_prefilled("collections", collections.len(), shape.records + extra_keys)?;
    Ok(elapsed)
}

/// Creates records `0..shape.records` as strings with `threads` threads,
/// then checks the key count.
pub fn prefill_strings(
    store: &Store,
    shape: &Shape,
    values: &ValuePool,
    threads: usize,
    bar: &ProgressBar,
) -> Result<Duration> {
    let elapsed = write_each(shape.records, threads, bar, |id| {
        store.put(&key(id), string_value(values, id, 0))?;
        Ok(())
    })?;
    check_prefilled("strings", store.len(), shape.records)?;
    Ok(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fixed_width_and_ordered() {
        assert_eq!(&key(0), b"user000000000000");
        assert_eq!(&key(1234), b"user000000001234");
        assert_eq!(&key(MAX_RECORDS - 1), b"user999999999999");
        assert!(key(99) < key(100));
        assert_eq!(field_names(3)[2].as_ref(), b"field2");
    }
}
