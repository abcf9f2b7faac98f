//! The checkpoint image of one [`Object`]: a compact, versioned encoding.
//!
//! A checkpoint writes each collection as one image; recovery decodes it and
//! replays the operation log's tail on top. Images are read back after a
//! crash, from media that may lie, so the decoder treats its input as
//! hostile: it checks every length against the bytes left, every order and
//! uniqueness the in-memory structure relies on, and never panics.
//!
//! # Format, version 1
//!
//! All integers are unsigned LEB128 varints ("varint": 7 bits per byte, least
//! significant group first, high bit set on every byte but the last; at most
//! 10 bytes for a `u64`; the shortest encoding only — a multi-byte varint whose
//! last byte is 0 is rejected, so every object has exactly one image).
//!
//! | offset | size    | field   | meaning                                          |
//! |--------|---------|---------|--------------------------------------------------|
//! | 0      | 1       | version | format version, `1`                              |
//! | 1      | 1       | kind    | `1` hash, `2` set, `3` sorted set, `4` list      |
//! | 2      | varint  | count   | number of entries that follow                    |
//! | ...    | entries | entries | `count` entries, as below                        |
//!
//! A *string* is a varint byte length followed by that many bytes.
//!
//! | kind       | entry                                  | entry order                                  |
//! |------------|----------------------------------------|----------------------------------------------|
//! | hash       | field string, value string             | any; fields distinct                         |
//! | set        | member string                          | any; members distinct                        |
//! | sorted set | member string, score (8-byte LE `f64`) | strictly increasing `(score, member)`        |
//! | list       | element string                         | head to tail                                 |
//! | stream     | see below                              | strictly increasing ID                       |
//!
//! The image ends right after the last entry; trailing bytes are an error.
//! Sorted sets are written in their tree order, so decoding bulk-builds the
//! tree in O(n) ([`RankedMap::from_sorted`]); the decoder rejects entries
//! that are out of order or repeated. Hashes and sets are written in their
//! table's order, `(hash, bytes)` under the writing process's hash seed
//! (see [`hashed`]): the decoder rehashes every entry under its own seed,
//! builds in O(n) when they come in its order (an image this process
//! wrote), sorts them first when not (an image from an earlier process,
//! and every image older builds wrote, under unseeded xxh3-64), and
//! rejects a repeated field or member. Scores are never NaN; -0.0 is read
//! as 0.0. A sorted set's member may appear once only, whatever its score.
//!
//! A stream (kind `5`) is the entry count, the entries, then the stream's
//! counters and groups. An *ID* is two varints, milliseconds then sequence.
//!
//! ```text
//! entry    = ID (above 0-0, strictly increasing), varint pair count,
//!            field and value strings
//! counters = last ID, recorded first ID, largest deleted ID, varint
//!            entries added
//! groups   = varint count, groups by strictly increasing name:
//!            name string, last delivered ID, entries read (zigzag varint,
//!            -1: unknown),
//!            varint consumer count, consumers by strictly increasing
//!            name: name string, varint seen time (Unix ms),
//!            varint PEL count, PEL entries by strictly increasing ID:
//!            ID, varint owner (index into this group's consumers),
//!            varint delivery time (Unix ms), varint delivery count
//! ```
//!
//! Each consumer's own pending list is rebuilt from the group's PEL, so
//! the two cannot disagree after recovery. Streams were added to version 1
//! as a new kind: every image an older build wrote still reads.
//!
//! There is no magic number or checksum here: an image is always stored
//! inside an engine record that carries its own type tag and checksum, and a
//! per-object magic would cost bytes on every small collection.
//!
//! [`RankedMap::from_sorted`]: super::ranked::RankedMap::from_sorted

use std::cmp::Ordering;

use super::hashed::{self, HashedKey};
use super::stream::{Group, Stream, StreamId};
use super::zset::Score;
use super::{Hash, Kind, List, Object, Set, SortedSet};

/// The image format this build writes, and the only one it reads.
pub const FORMAT_VERSION: u8 = 1;

const KIND_HASH: u8 = 1;
const KIND_SET: u8 = 2;
const KIND_SORTED_SET: u8 = 3;
const KIND_LIST: u8 = 4;
const KIND_STREAM: u8 = 5;
/// A list stored in pieces (`pieces.rs`): the image is a directory of runs
/// of elements held by other values of the images store, so
/// [`Object::decode`] cannot read it alone.
const KIND_LIST_PIECES: u8 = 6;

/// Longest varint encoding of a `u64`.
const VARINT_MAX_BYTES: usize = 10;

/// Most entries room is reserved for before any is read. A count is checked
/// against the bytes left, but an in-memory entry is up to 20 times larger
/// than its smallest encoding, so trusting a corrupt count fully could
/// reserve gigabytes for a large image; past this, vectors grow as entries
/// actually arrive.
const PREALLOCATE_MAX_ENTRIES: usize = 1 << 16;

/// Why an image could not be decoded. Offsets are byte positions in the
/// image; entry indexes count from 0.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The image ends inside a fixed-size field or a varint.
    #[error("image truncated at byte {offset}: {needed} more bytes needed")]
    Truncated {
        /// Where the incomplete field starts.
        offset: usize,
        /// How many bytes it needed beyond the end.
        needed: usize,
    },
    /// The version byte names a format this build does not read.
    #[error("image format version {version} is not supported (this build reads {FORMAT_VERSION})")]
    UnsupportedVersion {
        /// The version byte found.
        version: u8,
    },
    /// The kind byte names no collection type.
    #[error("unknown object kind {kind}")]
    UnknownKind {
        /// The kind byte found.
        kind: u8,
    },
    /// A varint is longer than 10 bytes, overflows 64 bits or is not in its
    /// shortest form.
    #[error("malformed varint at byte {offset}")]
    BadVarint {
        /// Where the varint starts.
        offset: usize,
    },
    /// A count or string length promises more than the bytes left could hold.
    #[error(
        "length {length} at byte {offset} exceeds what the {remaining} remaining bytes can hold"
    )]
    BadLength {
        /// Where the length varint starts.
        offset: usize,
        /// The length found.
        length: u64,
        /// Bytes left after the varint.
        remaining: usize,
    },
    /// A sorted-set score is NaN.
    #[error("entry {index}: score is NaN")]
    NanScore {
        /// The entry's index.
        index: usize,
    },
    /// An entry equals the entry before it.
    #[error("entry {index} repeats the entry before it")]
    DuplicateEntry {
        /// The entry's index.
        index: usize,
    },
    /// An entry sorts before the entry before it.
    #[error("entry {index} is out of order")]
    UnsortedEntry {
        /// The entry's index.
        index: usize,
    },
    /// A sorted-set member appears a second time (with another score).
    #[error("entry {index}: sorted-set member appears twice")]
    DuplicateMember {
        /// The entry's index.
        index: usize,
    },
    /// A stream's parts disagree (a pending entry owned by no consumer).
    #[error("stream image is inconsistent: {what}")]
    BadStream {
        /// What is wrong.
        what: &'static str,
    },
    /// A list in pieces, read without the store that holds its pieces.
    #[error("a list in pieces is read through its images store")]
    InPieces,
    /// A list in pieces names runs whose counts do not add up, or a run
    /// shorter than its elements could be.
    #[error("list in pieces is inconsistent: {what}")]
    BadPieces {
        /// What is wrong.
        what: &'static str,
    },
    /// Bytes follow the last entry.
    #[error("{count} bytes after the last entry")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
}

impl Object {
    /// Appends this object's image (format above) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(FORMAT_VERSION);
        match self {
            Object::Hash(hash) => {
                out.push(KIND_HASH);
                write_varint(out, hash.len() as u64);
                for (field, value) in hash.iter() {
                    write_string(out, field);
                    write_string(out, value);
                }
            }
            Object::Set(set) => {
                out.push(KIND_SET);
                write_varint(out, set.len() as u64);
                for member in set.iter() {
                    write_string(out, member);
                }
            }
            Object::SortedSet(zset) => {
                out.push(KIND_SORTED_SET);
                write_varint(out, zset.len() as u64);
                for (member, score) in zset.iter() {
                    write_string(out, member);
                    out.extend_from_slice(&score.to_le_bytes());
                }
            }
            Object::List(list) => {
                out.push(KIND_LIST);
                write_varint(out, list.len() as u64);
                for element in list.iter() {
                    write_string(out, element);
                }
            }
            Object::Stream(stream) => {
                out.push(KIND_STREAM);
                encode_stream(stream, out);
            }
        }
    }

    /// Decodes one image. Checks everything the in-memory structures rely
    /// on and returns an error, never panics, on any other input; runs in
    /// O(n) plus hashing.
    pub fn decode(bytes: &[u8]) -> Result<Object, DecodeError> {
        let mut reader = Reader { bytes, offset: 0 };
        let version = reader.byte()?;
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion { version });
        }
        let kind = match reader.byte()? {
            KIND_HASH => Kind::Hash,
            KIND_SET => Kind::Set,
            KIND_SORTED_SET => Kind::SortedSet,
            KIND_LIST => Kind::List,
            KIND_STREAM => Kind::Stream,
            KIND_LIST_PIECES => return Err(DecodeError::InPieces),
            kind => return Err(DecodeError::UnknownKind { kind }),
        };
        // The smallest entry of each kind, so a count can be checked against
        // the bytes left before anything is allocated for it.
        let min_entry_bytes = match kind {
            Kind::Hash => 2,
            Kind::Set | Kind::List => 1,
            Kind::SortedSet => 9,
            // An ID and a pair count.
            Kind::Stream => 3,
        };
        let count = reader.length(min_entry_bytes)?;
        let object = match kind {
            Kind::Hash => Object::Hash(decode_hash(&mut reader, count)?),
            Kind::Set => Object::Set(decode_set(&mut reader, count)?),
            Kind::SortedSet => Object::SortedSet(decode_sorted_set(&mut reader, count)?),
            Kind::List => Object::List(decode_list(&mut reader, count)?),
            Kind::Stream => Object::Stream(Box::new(decode_stream(&mut reader, count)?)),
        };
        match reader.remaining() {
            0 => Ok(object),
            count => Err(DecodeError::TrailingBytes { count }),
        }
    }
}

/// Checks that `key` sorts strictly after `previous`.
fn check_order<K: Ord>(previous: Option<&K>, key: &K, index: usize) -> Result<(), DecodeError> {
    match previous.map(|previous| previous.cmp(key)) {
        Some(Ordering::Equal) => Err(DecodeError::DuplicateEntry { index }),
        Some(Ordering::Greater) => Err(DecodeError::UnsortedEntry { index }),
        Some(Ordering::Less) | None => Ok(()),
    }
}

/// Puts decoded entries into this process's hash order: one pass when they
/// already are (an image this process wrote), a sort when not. Fails with
/// the index (in the image) of the first entry that repeats an earlier one.
fn into_hash_order<V>(entries: Vec<(HashedKey, V)>) -> Result<Vec<(HashedKey, V)>, DecodeError> {
    let mut in_order = true;
    for (index, pair) in entries.windows(2).enumerate() {
        match pair[0].0.cmp(&pair[1].0) {
            Ordering::Less => {}
            Ordering::Equal => return Err(DecodeError::DuplicateEntry { index: index + 1 }),
            Ordering::Greater => in_order = false,
        }
    }
    if in_order {
        return Ok(entries);
    }
    let mut by_key: Vec<usize> = (0..entries.len()).collect();
    by_key.sort_unstable_by(|&a, &b| entries[a].0.cmp(&entries[b].0).then(a.cmp(&b)));
    if let Some(repeat) = by_key
        .windows(2)
        .filter(|pair| entries[pair[0]].0 == entries[pair[1]].0)
        .map(|pair| pair[1])
        .min()
    {
        return Err(DecodeError::DuplicateEntry { index: repeat });
    }
    let mut slots: Vec<Option<(HashedKey, V)>> = entries.into_iter().map(Some).collect();
    Ok(by_key
        .into_iter()
        .map(|index| slots[index].take().expect("each index once"))
        .collect())
}

fn decode_hash(reader: &mut Reader<'_>, count: usize) -> Result<Hash, DecodeError> {
    let mut entries: Vec<(HashedKey, Box<[u8]>)> =
        Vec::with_capacity(count.min(PREALLOCATE_MAX_ENTRIES));
    for _ in 0..count {
        let key = hashed::key_of(reader.string()?.into());
        let value = reader.string()?.into();
        entries.push((key, value));
    }
    Ok(Hash::from_sorted(into_hash_order(entries)?))
}

fn decode_set(reader: &mut Reader<'_>, count: usize) -> Result<Set, DecodeError> {
    let mut members: Vec<(HashedKey, ())> = Vec::with_capacity(count.min(PREALLOCATE_MAX_ENTRIES));
    for _ in 0..count {
        members.push((hashed::key_of(reader.string()?.into()), ()));
    }
    let members = into_hash_order(members)?;
    Ok(Set::from_sorted(members.into_iter().map(|(key, ())| key)))
}

fn decode_sorted_set(reader: &mut Reader<'_>, count: usize) -> Result<SortedSet, DecodeError> {
    let mut entries: Vec<(Score, Box<[u8]>)> =
        Vec::with_capacity(count.min(PREALLOCATE_MAX_ENTRIES));
    for index in 0..count {
        let member: Box<[u8]> = reader.string()?.into();
        let score = Score::new(reader.f64()?).ok_or(DecodeError::NanScore { index })?;
        let key = (score, member);
        check_order(entries.last(), &key, index)?;
        entries.push(key);
    }
    SortedSet::from_sorted(entries).map_err(|index| DecodeError::DuplicateMember { index })
}

fn decode_list(reader: &mut Reader<'_>, count: usize) -> Result<List, DecodeError> {
    let mut list = List::new();
    for _ in 0..count {
        list.push_back([reader.string()?]);
    }
    Ok(list)
}

fn write_id(out: &mut Vec<u8>, id: StreamId) {
    write_varint(out, id.ms);
    write_varint(out, id.seq);
}

fn encode_stream(stream: &Stream, out: &mut Vec<u8>) {
    write_varint(out, stream.len() as u64);
    for entry in stream.iter() {
        write_id(out, entry.id);
        write_varint(out, entry.pairs() as u64);
        for field in &entry.fields {
            write_string(out, field);
        }
    }
    write_id(out, stream.last_id());
    write_id(out, stream.first_id());
    write_id(out, stream.max_deleted_id());
    write_varint(out, stream.entries_added());
    write_varint(out, stream.groups().len() as u64);
    for (name, group) in stream.groups() {
        write_string(out, name);
        write_id(out, group.last_id);
        write_varint(out, zigzag(group.entries_read));
        write_varint(out, group.consumers().len() as u64);
        let mut index = std::collections::HashMap::new();
        for (at, (name, consumer)) in group.consumers().iter().enumerate() {
            write_string(out, name);
            write_varint(out, consumer.seen_ms);
            index.insert(&**name, at as u64);
        }
        write_varint(out, group.pel().len() as u64);
        for (id, pending) in group.pel() {
            write_id(out, *id);
            write_varint(out, index[&*pending.consumer]);
            write_varint(out, pending.delivery_ms);
            write_varint(out, pending.deliveries);
        }
    }
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    (value >> 1) as i64 ^ -((value & 1) as i64)
}

fn decode_stream(reader: &mut Reader<'_>, count: usize) -> Result<Stream, DecodeError> {
    let mut stream = Stream::new();
    let mut previous = StreamId::MIN;
    let mut fields: Vec<&[u8]> = Vec::new();
    for index in 0..count {
        let id = reader.id()?;
        if id <= previous {
            return Err(if id == previous && index > 0 {
                DecodeError::DuplicateEntry { index }
            } else {
                DecodeError::UnsortedEntry { index }
            });
        }
        previous = id;
        let pairs = reader.length(2)?;
        fields.clear();
        for _ in 0..pairs * 2 {
            fields.push(reader.string()?);
        }
        stream.append(id, &fields);
    }
    let last_id = reader.id()?;
    let first_id = reader.id()?;
    let max_deleted_id = reader.id()?;
    let entries_added = reader.varint()?;
    // The counters are taken as they are: XSETID checks them against
    // the entries, and the image holds whatever state was reached.
    stream.set_meta(last_id, entries_added, max_deleted_id, first_id);
    let group_count = reader.length(6)?;
    let mut previous_name: Option<Box<[u8]>> = None;
    for index in 0..group_count {
        let name: Box<[u8]> = reader.string()?.into();
        check_order(previous_name.as_ref(), &name, index)?;
        let group_last = reader.id()?;
        let entries_read = unzigzag(reader.varint()?);
        let consumer_count = reader.length(2)?;
        let mut consumers: Vec<(std::sync::Arc<[u8]>, u64)> =
            Vec::with_capacity(consumer_count.min(PREALLOCATE_MAX_ENTRIES));
        for index in 0..consumer_count {
            let consumer: std::sync::Arc<[u8]> = reader.string()?.into();
            check_order(consumers.last().map(|(name, _)| name), &consumer, index)?;
            consumers.push((consumer, reader.varint()?));
        }
        let pel_count = reader.length(5)?;
        let mut pel = Vec::with_capacity(pel_count.min(PREALLOCATE_MAX_ENTRIES));
        let mut previous_id: Option<StreamId> = None;
        for index in 0..pel_count {
            let id = reader.id()?;
            check_order(previous_id.as_ref(), &id, index)?;
            previous_id = Some(id);
            let owner = reader.varint()?;
            let owner = usize::try_from(owner).unwrap_or(usize::MAX);
            pel.push((id, owner, reader.varint()?, reader.varint()?));
        }
        let group = Group::from_parts(group_last, entries_read, consumers, pel).ok_or(
            DecodeError::BadStream {
                what: "a pending entry owned by no consumer",
            },
        )?;
        stream.groups_mut().insert(name.clone(), group);
        previous_name = Some(name);
    }
    stream.seal_all();
    Ok(stream)
}

/// A list's image read only as far as its element boundaries (the
/// checkpointer's splice of a list touched at its ends: `splice.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListImage {
    /// Elements in the image.
    pub count: u64,
    /// Where the first element starts.
    pub elements_at: usize,
}

impl ListImage {
    /// The list image in `bytes` (an object image), or `None` when it is
    /// not a list of this format.
    pub fn read(bytes: &[u8]) -> Result<Option<ListImage>, DecodeError> {
        let mut reader = Reader { bytes, offset: 0 };
        if reader.byte()? != FORMAT_VERSION || reader.byte()? != KIND_LIST {
            return Ok(None);
        }
        let count = reader.length(1)? as u64;
        Ok(Some(ListImage {
            count,
            elements_at: reader.offset,
        }))
    }

    /// The bytes of elements `skip_front .. count - skip_back`, as they lie
    /// in the image (each a varint length and its bytes): found by stepping
    /// over the lengths, nothing decoded or allocated. Checked as the
    /// decoder checks: an element running past the image, or bytes after
    /// the last one, is an error.
    pub fn middle<'a>(
        &self,
        bytes: &'a [u8],
        skip_front: u64,
        skip_back: u64,
    ) -> Result<&'a [u8], DecodeError> {
        debug_assert!(skip_front + skip_back <= self.count);
        let mut reader = Reader {
            bytes,
            offset: self.elements_at,
        };
        let mut start = reader.offset;
        let mut end = reader.offset;
        for index in 0..self.count {
            if index == skip_front {
                start = reader.offset;
            }
            reader.string()?;
            if index + 1 == self.count - skip_back {
                end = reader.offset;
            }
        }
        if reader.remaining() != 0 {
            return Err(DecodeError::TrailingBytes {
                count: reader.remaining(),
            });
        }
        Ok(if skip_front + skip_back >= self.count {
            &bytes[0..0]
        } else {
            &bytes[start..end]
        })
    }

    /// The offset after the `n` elements that start at `at` in `bytes`
    /// (elements as a list image or a piece holds them), checked as the
    /// decoder checks.
    pub fn step(bytes: &[u8], at: usize, n: u64) -> Result<usize, DecodeError> {
        let mut reader = Reader { bytes, offset: at };
        for _ in 0..n {
            reader.string()?;
        }
        Ok(reader.offset)
    }

    /// How many of the elements at the start of `bytes` fit in `room`
    /// bytes, and where the last of them ends.
    pub fn fit(bytes: &[u8], room: usize) -> Result<(u64, usize), DecodeError> {
        let mut reader = Reader { bytes, offset: 0 };
        let mut fit = 0;
        let mut end = 0;
        while reader.remaining() > 0 {
            reader.string()?;
            if reader.offset > room {
                break;
            }
            fit += 1;
            end = reader.offset;
        }
        Ok((fit, end))
    }

    /// Decodes `bytes`, exactly `count` elements, onto the back of `list`.
    pub fn decode_elements(bytes: &[u8], count: u64, list: &mut List) -> Result<(), DecodeError> {
        let mut reader = Reader { bytes, offset: 0 };
        for _ in 0..count {
            list.push_back([reader.string()?]);
        }
        if reader.remaining() != 0 {
            return Err(DecodeError::TrailingBytes {
                count: reader.remaining(),
            });
        }
        Ok(())
    }

    /// Writes one element as the image holds it (its length, then its
    /// bytes) through `write`.
    pub fn write_element(element: &[u8], write: &mut impl FnMut(&[u8])) {
        let mut buffer = [0u8; VARINT_MAX_BYTES];
        let used = varint_into(element.len() as u64, &mut buffer);
        write(&buffer[..used]);
        write(element);
    }

    /// The bytes [`ListImage::write_element`] writes for `element`.
    pub fn element_bytes(element: &[u8]) -> usize {
        let mut buffer = [0u8; VARINT_MAX_BYTES];
        varint_into(element.len() as u64, &mut buffer) + element.len()
    }
}

/// One run of a list in pieces: `count` elements, `bytes` long, starting
/// `offset` bytes into the piece that checkpoint `version` wrote as its
/// `seq`-th for the key (`images::piece_key_into`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PieceRun {
    pub version: u64,
    pub seq: u64,
    pub offset: u64,
    pub bytes: u64,
    pub count: u64,
}

impl PieceRun {
    /// The piece this run lies in.
    pub fn piece(&self) -> (u64, u64) {
        (self.version, self.seq)
    }
}

/// The image of a list in pieces: its runs, head first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PiecesImage {
    /// Elements in the list (the runs' counts added up).
    pub count: u64,
    pub runs: Vec<PieceRun>,
}

impl PiecesImage {
    /// The directory in `bytes` (an object image), or `None` when it is
    /// not a list in pieces.
    pub fn read(bytes: &[u8]) -> Result<Option<PiecesImage>, DecodeError> {
        let mut reader = Reader { bytes, offset: 0 };
        if reader.byte()? != FORMAT_VERSION || reader.byte()? != KIND_LIST_PIECES {
            return Ok(None);
        }
        let count = reader.varint()?;
        // Five varints a run.
        let runs_len = reader.length(5)?;
        let mut runs = Vec::with_capacity(runs_len);
        let mut total: u64 = 0;
        for _ in 0..runs_len {
            let run = PieceRun {
                version: reader.varint()?,
                seq: reader.varint()?,
                offset: reader.varint()?,
                bytes: reader.varint()?,
                count: reader.varint()?,
            };
            // An element takes at least its length byte.
            if run.count == 0 || run.bytes < run.count {
                return Err(DecodeError::BadPieces {
                    what: "a run is empty or shorter than its elements",
                });
            }
            total = total.checked_add(run.count).ok_or(DecodeError::BadPieces {
                what: "the runs' counts overflow",
            })?;
            runs.push(run);
        }
        if total != count {
            return Err(DecodeError::BadPieces {
                what: "the runs' counts do not add up to the list's",
            });
        }
        if reader.remaining() != 0 {
            return Err(DecodeError::TrailingBytes {
                count: reader.remaining(),
            });
        }
        Ok(Some(PiecesImage { count, runs }))
    }

    /// Appends the directory (an object image) to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(FORMAT_VERSION);
        out.push(KIND_LIST_PIECES);
        write_varint(out, self.count);
        write_varint(out, self.runs.len() as u64);
        for run in &self.runs {
            for field in [run.version, run.seq, run.offset, run.bytes, run.count] {
                write_varint(out, field);
            }
        }
    }
}

/// `value` as a varint into `buffer`; how many bytes it took.
fn varint_into(mut value: u64, buffer: &mut [u8; VARINT_MAX_BYTES]) -> usize {
    let mut used = 0;
    while value >= 0x80 {
        buffer[used] = (value as u8 & 0x7f) | 0x80;
        value >>= 7;
        used += 1;
    }
    buffer[used] = value as u8;
    used + 1
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn write_string(out: &mut Vec<u8>, bytes: &[u8]) {
    write_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A cursor over an image that reports where it failed.
struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.offset
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .offset
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(DecodeError::Truncated {
                offset: self.offset,
                needed: len - self.remaining(),
            });
        };
        let taken = &self.bytes[self.offset..end];
        self.offset = end;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn f64(&mut self) -> Result<f64, DecodeError> {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(self.take(8)?);
        Ok(f64::from_le_bytes(raw))
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let start = self.offset;
        let mut value: u64 = 0;
        for index in 0..VARINT_MAX_BYTES {
            let byte = self.byte()?;
            let group = u64::from(byte & 0x7f);
            // The tenth byte holds bit 63 only.
            if index == VARINT_MAX_BYTES - 1 && group > 1 {
                return Err(DecodeError::BadVarint { offset: start });
            }
            value |= group << (7 * index);
            if byte & 0x80 == 0 {
                if index > 0 && byte == 0 {
                    return Err(DecodeError::BadVarint { offset: start });
                }
                return Ok(value);
            }
        }
        Err(DecodeError::BadVarint { offset: start })
    }

    /// A varint length of items at least `min_item_bytes` long each, checked
    /// against the bytes left.
    fn length(&mut self, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let offset = self.offset;
        let length = self.varint()?;
        let remaining = self.remaining();
        let capacity = (remaining / min_item_bytes.max(1)) as u64;
        if length > capacity {
            return Err(DecodeError::BadLength {
                offset,
                length,
                remaining,
            });
        }
        // length <= remaining, which is a usize.
        Ok(length as usize)
    }

    fn string(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.length(1)?;
        self.take(len)
    }

    fn id(&mut self) -> Result<StreamId, DecodeError> {
        Ok(StreamId::new(self.varint()?, self.varint()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(object: &Object) -> Vec<u8> {
        let mut image = Vec::new();
        object.encode(&mut image);
        assert_eq!(Object::decode(&image).as_ref(), Ok(object));
        image
    }

    #[test]
    fn empty_objects_round_trip() {
        for kind in [Kind::Hash, Kind::Set, Kind::SortedSet, Kind::List] {
            let image = roundtrip(&Object::new(kind));
            assert_eq!(image.len(), 3);
        }
        // A stream's counters and group count follow its entries.
        let image = roundtrip(&Object::new(Kind::Stream));
        assert_eq!(image, vec![1, KIND_STREAM, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    /// An image written by another process (another hash seed, or an older
    /// build's unseeded xxh3) lists fields in an order that is not this
    /// process's: it decodes to the same object.
    #[test]
    fn hashes_and_sets_decode_from_any_order() {
        let mut hash = Hash::new();
        let mut set = Set::new();
        for n in 0..500u32 {
            hash.insert(format!("f{n}").into_bytes().into(), n.to_le_bytes().into());
            set.insert(format!("m{n}").into_bytes().into());
        }
        let mut image = vec![1, KIND_HASH];
        write_varint(&mut image, 500);
        let mut fields: Vec<(&[u8], &[u8])> = hash.iter().collect();
        fields.reverse();
        fields.swap(10, 400);
        for (field, value) in fields {
            write_string(&mut image, field);
            write_string(&mut image, value);
        }
        let decoded = Object::decode(&image).expect("decodes");
        let Object::Hash(decoded) = &decoded else {
            panic!("a hash image decoded to {:?}", decoded.kind())
        };
        decoded.check_invariants().unwrap();
        assert_eq!(decoded, &hash);

        let mut image = vec![1, KIND_SET];
        write_varint(&mut image, 500);
        let mut members: Vec<&[u8]> = set.iter().collect();
        members.sort();
        for member in members {
            write_string(&mut image, member);
        }
        let decoded = Object::decode(&image).expect("decodes");
        let Object::Set(decoded) = &decoded else {
            panic!("a set image decoded to {:?}", decoded.kind())
        };
        decoded.check_invariants().unwrap();
        assert_eq!(decoded, &set);
    }

    #[test]
    fn list_image_is_byte_exact() {
        let mut list = List::new();
        list.push_back([b"ab".as_slice(), b"".as_slice()]);
        let image = roundtrip(&Object::List(list));
        assert_eq!(image, vec![1, KIND_LIST, 2, 2, b'a', b'b', 0]);
    }

    #[test]
    fn sorted_set_image_is_byte_exact() {
        let mut zset = SortedSet::new();
        zset.insert(b"m", Score::new(-0.0).expect("not NaN"));
        let image = roundtrip(&Object::SortedSet(zset));
        let mut expected = vec![1, KIND_SORTED_SET, 1, 1, b'm'];
        expected.extend_from_slice(&0.0f64.to_le_bytes());
        assert_eq!(image, expected);
    }

    /// The checkpointer reserves an image's room from the object's heap
    /// estimate (`images::encode_image_into`): it must not fall short of
    /// the image, or a large object's image grows by doubling again.
    #[test]
    fn the_heap_estimate_covers_the_image() {
        let bytes = |n: usize, len: usize| vec![(n % 251) as u8; len].into_boxed_slice();
        let mut list = List::new();
        let mut set = Set::new();
        let mut hash = Hash::new();
        let mut zset = SortedSet::new();
        let mut stream = Stream::new();
        for n in 0..3000 {
            // Sizes from 0 to 300 bytes, and members distinct.
            let len = n % 301;
            let member = format!("member:{n}:{}", "x".repeat(len)).into_bytes();
            list.push_back([bytes(n, len)]);
            set.insert(member.clone().into_boxed_slice());
            hash.insert(member.clone().into_boxed_slice(), bytes(n, len));
            zset.insert(&member, Score::new(n as f64).expect("not NaN"));
            stream.append(
                StreamId::new(n as u64 + 1, 0),
                &[&member[..], &bytes(n, len)[..]],
            );
        }
        for object in [
            Object::List(list),
            Object::Set(set),
            Object::Hash(hash),
            Object::SortedSet(zset),
            Object::Stream(Box::new(stream)),
        ] {
            let image = roundtrip(&object);
            assert!(
                image.len() <= object.approx_heap_bytes(),
                "{:?}: an image of {} bytes, an estimate of {}",
                object.kind(),
                image.len(),
                object.approx_heap_bytes()
            );
        }
    }

    #[test]
    fn images_larger_than_the_preallocation_bound_round_trip() {
        let count = PREALLOCATE_MAX_ENTRIES + 10;
        let mut list = List::new();
        list.push_back((0..count).map(|n| (n as u32).to_le_bytes().to_vec().into_boxed_slice()));
        let mut set = Set::new();
        for n in 0..count {
            set.insert((n as u32).to_le_bytes().to_vec().into_boxed_slice());
        }
        roundtrip(&Object::List(list));
        roundtrip(&Object::Set(set));
    }

    #[test]
    fn varints_round_trip_and_reject_bad_forms() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            write_varint(&mut out, value);
            let mut reader = Reader {
                bytes: &out,
                offset: 0,
            };
            assert_eq!(reader.varint(), Ok(value));
            assert_eq!(reader.remaining(), 0);
        }
        let bad: [&[u8]; 4] = [
            &[0x80, 0x00],                                                 // overlong zero
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], // 65 bits
            &[0x80; 11],                                                   // too long
            &[0xff, 0x80, 0x00],                                           // overlong
        ];
        for bytes in bad {
            let mut reader = Reader { bytes, offset: 0 };
            assert_eq!(
                reader.varint(),
                Err(DecodeError::BadVarint { offset: 0 }),
                "{bytes:?}"
            );
        }
        let mut reader = Reader {
            bytes: &[0x80],
            offset: 0,
        };
        assert_eq!(
            reader.varint(),
            Err(DecodeError::Truncated {
                offset: 1,
                needed: 1
            })
        );
    }

    #[test]
    fn each_error_is_reported() {
        use DecodeError::*;
        assert_eq!(
            Object::decode(&[]),
            Err(Truncated {
                offset: 0,
                needed: 1
            })
        );
        assert_eq!(
            Object::decode(&[2, 1, 0]),
            Err(UnsupportedVersion { version: 2 })
        );
        assert_eq!(Object::decode(&[1, 0, 0]), Err(UnknownKind { kind: 0 }));
        assert_eq!(Object::decode(&[1, 9, 0]), Err(UnknownKind { kind: 9 }));
        assert_eq!(
            Object::decode(&[1, KIND_LIST]),
            Err(Truncated {
                offset: 2,
                needed: 1
            })
        );
        assert_eq!(
            Object::decode(&[1, KIND_LIST, 0x80, 0]),
            Err(BadVarint { offset: 2 })
        );
        assert_eq!(
            Object::decode(&[1, KIND_LIST, 3, 0, 0]),
            Err(BadLength {
                offset: 2,
                length: 3,
                remaining: 2
            })
        );
        assert_eq!(
            Object::decode(&[1, KIND_LIST, 1, 5, b'a']),
            Err(BadLength {
                offset: 3,
                length: 5,
                remaining: 1
            })
        );
        assert_eq!(
            Object::decode(&[1, KIND_LIST, 0, 7]),
            Err(TrailingBytes { count: 1 })
        );
        let mut nan = vec![1, KIND_SORTED_SET, 1, 1, b'm'];
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(Object::decode(&nan), Err(NanScore { index: 0 }));
        let mut short_score = vec![1, KIND_SORTED_SET, 1, 1, b'm'];
        short_score.extend_from_slice(&[0; 4]);
        assert_eq!(
            Object::decode(&short_score),
            Err(BadLength {
                offset: 2,
                length: 1,
                remaining: 6
            })
        );
    }

    #[test]
    fn order_and_uniqueness_are_checked() {
        use DecodeError::*;
        let zset_image = |entries: &[(&[u8], f64)]| {
            let mut image = vec![1, KIND_SORTED_SET, entries.len() as u8];
            for (member, score) in entries {
                write_string(&mut image, member);
                image.extend_from_slice(&score.to_le_bytes());
            }
            image
        };
        assert_eq!(
            Object::decode(&zset_image(&[(b"a", 1.0), (b"a", 1.0)])),
            Err(DuplicateEntry { index: 1 })
        );
        assert_eq!(
            Object::decode(&zset_image(&[(b"b", 1.0), (b"a", 1.0)])),
            Err(UnsortedEntry { index: 1 })
        );
        assert_eq!(
            Object::decode(&zset_image(&[(b"a", 2.0), (b"a", 1.0)])),
            Err(UnsortedEntry { index: 1 })
        );
        assert_eq!(
            Object::decode(&zset_image(&[(b"a", 1.0), (b"a", 2.0)])),
            Err(DuplicateMember { index: 1 })
        );
        assert_eq!(
            Object::decode(&zset_image(&[(b"a", 0.0), (b"a", -0.0)])),
            Err(DuplicateEntry { index: 1 })
        );

        // A member repeated, next to it or after others (the entries are
        // then out of this process's order, and sorted first).
        let mut image = vec![1, KIND_SET, 2];
        write_string(&mut image, b"x");
        write_string(&mut image, b"x");
        assert_eq!(Object::decode(&image), Err(DuplicateEntry { index: 1 }));
        let members: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b"e"];
        let mut image = vec![1, KIND_SET, 6];
        for member in members.iter().chain([&&b"b"[..]]) {
            write_string(&mut image, member);
        }
        assert_eq!(Object::decode(&image), Err(DuplicateEntry { index: 5 }));
        let mut image = vec![1, KIND_HASH, 2];
        for _ in 0..2 {
            write_string(&mut image, b"f");
            write_string(&mut image, b"v");
        }
        assert_eq!(Object::decode(&image), Err(DuplicateEntry { index: 1 }));
    }
}
