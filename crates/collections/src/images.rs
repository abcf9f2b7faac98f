//! Checkpoint images: each collection's state as of a checkpoint, stored as
//! one value in an engine store of its own (`DIR/images/`), so images get
//! the engine's crash safety, checksums, integrity coverage and compaction.
//!
//! A checkpoint writes images only of the keys its log touched, each under
//! a key naming the checkpoint (`version` = the last sequence number it
//! covers), then durably replaces the root. The root is the commit point:
//! for every key the image that counts is the one with the largest version
//! not above the root's; images of later versions belong to a checkpoint
//! that never committed and are discarded, older ones are superseded
//! garbage. A key deleted since its last image gets a tombstone image, so
//! an older image cannot come back. So a checkpoint is atomic however many
//! keys it writes, and costs what changed, not what exists.
//!
//! ```text
//! engine key                      engine value
//! "root"                          version (8 bytes LE)
//! 'i' ++ version (8 BE) ++ key    format (1 byte, 1) ++ flags (1 byte: 1 = tombstone)
//!                                 ++ expire_at_ms (8 bytes LE) ++ object image (codec)
//! 'p' ++ version (8 BE)           elements of a list in pieces (`pieces.rs`)
//!     ++ seq (8 BE) ++ key
//! ```
//!
//! A large list's image is a directory of runs of elements held in pieces,
//! so that a checkpoint writes only the elements pushed since the last one
//! (`pieces.rs`). A piece belongs to no version of its own: it lives as long
//! as a live image names it, and a piece no live image names is garbage.

use std::sync::Mutex;

use engram_engine::Store;
use hashbrown::HashMap;

use crate::error::{Error, Result};
use crate::op::Bytes;
use crate::state::{Access, Entry};
use crate::types::{Object, PieceRun, PiecesImage};

pub const ROOT_KEY: &[u8] = b"root";
const IMAGE_TAG: u8 = b'i';
const PIECE_TAG: u8 = b'p';
const FORMAT: u8 = 1;
const TOMBSTONE: u8 = 1;
const VALUE_HEADER_BYTES: usize = 10;

pub fn image_key(version: u64, key: &[u8]) -> Vec<u8> {
    let mut image_key = Vec::with_capacity(9 + key.len());
    image_key_into(version, key, &mut image_key);
    image_key
}

/// [`image_key`] into `out` (replacing its contents), for callers that
/// reuse one buffer for many keys.
pub fn image_key_into(version: u64, key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.push(IMAGE_TAG);
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(key);
}

/// The key of piece `seq` that checkpoint `version` wrote for `key`, into
/// `out` (replacing its contents).
pub fn piece_key_into(version: u64, seq: u64, key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.push(PIECE_TAG);
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(key);
}

/// (version, seq, user key) of a piece key.
pub fn parse_piece_key(piece_key: &[u8]) -> Option<(u64, u64, &[u8])> {
    if piece_key.len() < 17 || piece_key[0] != PIECE_TAG {
        return None;
    }
    let version = u64::from_be_bytes(piece_key[1..9].try_into().expect("8 bytes"));
    let seq = u64::from_be_bytes(piece_key[9..17].try_into().expect("8 bytes"));
    Some((version, seq, &piece_key[17..]))
}

/// (version, user key) of an image key.
pub fn parse_image_key(image_key: &[u8]) -> Option<(u64, &[u8])> {
    if image_key.len() < 9 || image_key[0] != IMAGE_TAG {
        return None;
    }
    let version = u64::from_be_bytes(image_key[1..9].try_into().expect("8 bytes"));
    Some((version, &image_key[9..]))
}

pub fn encode_image(entry: Option<&Entry>) -> Vec<u8> {
    let mut value = Vec::with_capacity(64);
    encode_image_into(entry, &mut value);
    value
}

/// [`encode_image`] into `value` (replacing its contents): the checkpointer
/// encodes every image into one buffer, which after the first few images
/// no longer grows (no reallocation and copy per image as a fresh vector
/// doubles its way up, and the buffer stays in cache).
pub fn encode_image_into(entry: Option<&Entry>, value: &mut Vec<u8>) {
    value.clear();
    match entry {
        None => {
            value.push(FORMAT);
            value.push(TOMBSTONE);
            value.extend_from_slice(&0u64.to_le_bytes());
        }
        Some(entry) => {
            // Room for the whole image first: grown by doubling, a list of
            // a million elements went through some twenty reallocations,
            // each copying what came before into pages the kernel zeroed
            // first (13% of the checkpointer's time under LPUSH to one
            // list, BENCHMARKS.md, 2026-11-29). The estimate of
            // the object's heap bytes is above its image's length (both
            // hold the payload; the image adds a few bytes of length per
            // element, the estimate more), and pages reserved but never
            // written cost nothing.
            value.reserve(VALUE_HEADER_BYTES + entry.object.approx_heap_bytes());
            encode_header_into(entry.expire_at_ms, value);
            entry.object.encode(value);
        }
    }
}

/// The header of a live key's image (its object image follows) into
/// `value`, which must be empty.
pub fn encode_header_into(expire_at_ms: u64, value: &mut Vec<u8>) {
    debug_assert!(value.is_empty());
    value.push(FORMAT);
    value.push(0);
    value.extend_from_slice(&expire_at_ms.to_le_bytes());
}

/// The object image within an image (after its header; checked by
/// [`decode_image_header`] first).
pub fn object_image(value: &[u8]) -> &[u8] {
    &value[VALUE_HEADER_BYTES.min(value.len())..]
}

/// An image's header: the key's expiry, or `None` for a tombstone.
pub fn decode_image_header(key: &[u8], value: &[u8]) -> Result<Option<u64>> {
    if value.len() < VALUE_HEADER_BYTES {
        return Err(Error::corrupt_image(
            key,
            format!("{} bytes is too short", value.len()),
        ));
    }
    if value[0] != FORMAT {
        return Err(Error::corrupt_image(
            key,
            format!("unknown image format {}", value[0]),
        ));
    }
    if value[1] & TOMBSTONE != 0 {
        return Ok(None);
    }
    Ok(Some(u64::from_le_bytes(
        value[2..10].try_into().expect("8 bytes"),
    )))
}

/// The entry an image holds (`None`: a tombstone), a list in pieces read
/// from `images`; the pieces it names are added to `pieces`.
pub fn decode_image(
    images: &Store,
    key: &[u8],
    value: &[u8],
    pieces: &mut Vec<(u64, u64)>,
) -> Result<Option<Entry>> {
    let Some(expire_at_ms) = decode_image_header(key, value)? else {
        return Ok(None);
    };
    let object = match PiecesImage::read(object_image(value)) {
        Ok(Some(directory)) => {
            pieces.extend(directory.runs.iter().map(PieceRun::piece));
            Object::List(crate::pieces::decode_list(images, key, &directory)?)
        }
        Ok(None) => {
            Object::decode(object_image(value)).map_err(|e| Error::corrupt_image(key, e))?
        }
        Err(e) => return Err(Error::corrupt_image(key, e)),
    };
    Ok(Some(Entry {
        object,
        expire_at_ms,
        access: Access::default(),
    }))
}

pub fn read_root(images: &Store) -> Result<u64> {
    match images.get(ROOT_KEY)? {
        None => Ok(0),
        Some(value) if value.len() == 8 => {
            Ok(u64::from_le_bytes(value[..].try_into().expect("8 bytes")))
        }
        Some(value) => Err(Error::CorruptImage {
            key: "root".into(),
            what: format!("root of {} bytes, expected 8", value.len()),
        }),
    }
}

pub fn write_root(images: &Store, version: u64) -> Result<()> {
    images.put(ROOT_KEY, &version.to_le_bytes())?;
    Ok(())
}

/// Everything the images store holds, sorted out.
pub struct Loaded {
    /// The committed checkpoint's version (0: none yet).
    pub root: u64,
    /// The live collections as of `root`.
    pub entries: Vec<(Bytes, Entry)>,
    /// For each live key, the version of its current image.
    pub versions: HashMap<Bytes, u64>,
    /// Image keys that are garbage (uncommitted or superseded).
    pub garbage: Vec<Vec<u8>>,
    /// Committed tombstones: garbage too, but to be deleted only after the
    /// older images they hide are durably gone.
    pub tombstones: Vec<Vec<u8>>,
}

/// Reads the root and every image, decoding on `threads` threads.
pub fn load(images: &Store, threads: usize) -> Result<Loaded> {
    let root = read_root(images)?;
    // version of the winning image per key, and every image key seen.
    let mut winners: HashMap<Bytes, u64> = HashMap::new();
    let mut garbage = Vec::new();
    // Every piece seen; those no winning image names are garbage.
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut cursor = 0;
    loop {
        let (next, keys) = images.scan(cursor, 4096);
        for image_key in keys {
            if parse_piece_key(&image_key).is_some() {
                pieces.push(image_key);
                continue;
            }
            let Some((version, key)) = parse_image_key(&image_key) else {
                continue;
            };
            if version > root {
                garbage.push(image_key);
                continue;
            }
            match winners.get_mut(key) {
                Some(best) if *best >= version => garbage.push(image_key),
                Some(best) => {
                    garbage.push(self::image_key(*best, key));
                    *best = version;
                }
                None => {
                    winners.insert(key.into(), version);
                }
            }
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let winners: Vec<(Bytes, u64)> = winners.into_iter().collect();
    let threads = threads.clamp(1, 64);
    let chunk = winners.len().div_ceil(threads).max(1);
    type Decoded = Vec<(Bytes, u64, Option<Entry>, Vec<(u64, u64)>)>;
    let results: Mutex<Vec<Result<Decoded>>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for part in winners.chunks(chunk) {
            let results = &results;
            scope.spawn(move || {
                let decoded = part
                    .iter()
                    .map(|(key, version)| {
                        let value = images.get(&image_key(*version, key))?.ok_or_else(|| {
                            Error::corrupt_image(key, "image vanished while loading")
                        })?;
                        let mut named = Vec::new();
                        let entry = decode_image(images, key, &value, &mut named)?;
                        Ok((key.clone(), *version, entry, named))
                    })
                    .collect::<Result<Vec<_>>>();
                results.lock().expect("not poisoned").push(decoded);
            });
        }
    });
    let mut entries = Vec::with_capacity(winners.len());
    let mut versions = HashMap::with_capacity(winners.len());
    let mut tombstones = Vec::new();
    let mut named: hashbrown::HashSet<(u64, u64, Bytes)> = hashbrown::HashSet::new();
    for part in results.into_inner().expect("not poisoned") {
        for (key, version, entry, pieces) in part? {
            for (piece_version, seq) in pieces {
                named.insert((piece_version, seq, key.clone()));
            }
            match entry {
                Some(entry) => {
                    versions.insert(key.clone(), version);
                    entries.push((key, entry));
                }
                // A tombstone at the root: older images went with it.
                None => tombstones.push(image_key(version, &key)),
            }
        }
    }
    for piece in pieces {
        let (version, seq, key) = parse_piece_key(&piece).expect("sorted out as a piece");
        if !named.contains(&(version, seq, Bytes::from(key))) {
            garbage.push(piece);
        }
    }
    Ok(Loaded {
        root,
        entries,
        versions,
        garbage,
        tombstones,
    })
}
