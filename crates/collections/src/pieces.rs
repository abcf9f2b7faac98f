//! A large list's image in pieces, so that a checkpoint writes what changed.
//!
//! Spliced (`splice.rs`), a queue's checkpoint no longer decoded its list,
//! but it still wrote the whole list again: the image was one value, and
//! the checkpoint's new image had to hold every element, touched or not.
//! Under `LPUSH` to one list the checkpointer wrote the list again and
//! again, and the images store grew by a whole image each time (a run of
//! blocks as large as the list, which no freed run could hold), every new
//! page zero-filled by the file system first (BENCHMARKS.md, sixteenth
//! session).
//!
//! So a list that is spliced is written in pieces: values of the images
//! store of about [`CollectionsOptions::list_piece_bytes`] each, holding
//! elements as a list image holds them (each a varint length and its
//! bytes), and the key's image is a directory of runs, head first: this
//! piece, from this byte, so many elements ([`PiecesImage`]). A checkpoint
//! writes new pieces for the elements pushed since the last one, keeps the
//! runs it did not touch where they lie, and shortens the runs at the ends
//! that pops and trims reached (stepping over the popped elements' lengths,
//! nothing copied). A run at an end that new elements meet is copied into
//! their piece when it is shorter than they are (or than a sixty-fourth of
//! a piece), so pushes a few at a time do not leave a trail of small
//! pieces, and the copy costs at most what the checkpoint writes anyway.
//!
//! A piece is named by the checkpoint that wrote it and a sequence number
//! (`images::piece_key_into`). Images of later checkpoints name it as long as
//! its elements are in the list; it is deleted once the checkpoint whose
//! image no longer names it has committed, and recovery deletes every piece
//! no live image names (a checkpoint that never committed leaves such
//! pieces).
//!
//! [`CollectionsOptions::list_piece_bytes`]: crate::CollectionsOptions::list_piece_bytes

use engram_engine::{Store, ValueRef};

use crate::error::{Error, Result};
use crate::images::piece_key_into;
use crate::types::{List, ListImage, PieceRun, PiecesImage};

/// A list in pieces, read whole: every run's elements, head first.
pub(crate) fn decode_list(images: &Store, key: &[u8], directory: &PiecesImage) -> Result<List> {
    let mut list = List::new();
    let mut piece_key = Vec::new();
    for run in &directory.runs {
        let piece = read_piece(images, key, run.piece(), &mut piece_key)?;
        ListImage::decode_elements(run_bytes(key, &piece, run)?, run.count, &mut list)
            .map_err(|e| Error::corrupt_image(key, e))?;
    }
    Ok(list)
}

/// The piece `(version, seq)` of `key`, in place in the images store; a
/// missing piece is corruption (a live image names it). `piece_key` is a
/// buffer.
pub(crate) fn read_piece<'s>(
    images: &'s Store,
    key: &[u8],
    (version, seq): (u64, u64),
    piece_key: &mut Vec<u8>,
) -> Result<ValueRef<'s>> {
    piece_key_into(version, seq, key, piece_key);
    images.get_ref(piece_key)?.ok_or_else(|| {
        Error::corrupt_image(
            key,
            format!("piece {seq} of checkpoint {version} is missing"),
        )
    })
}

/// `run`'s bytes within `piece`, which must hold them.
pub(crate) fn run_bytes<'p>(key: &[u8], piece: &'p [u8], run: &PieceRun) -> Result<&'p [u8]> {
    let range = usize::try_from(run.offset)
        .ok()
        .zip(usize::try_from(run.bytes).ok())
        .and_then(|(start, len)| Some(start..start.checked_add(len)?))
        .filter(|range| range.end <= piece.len());
    match range {
        Some(range) => Ok(&piece[range]),
        None => Err(Error::corrupt_image(
            key,
            format!(
                "a run of {} bytes at {} lies outside its piece of {} bytes",
                run.bytes,
                run.offset,
                piece.len()
            ),
        )),
    }
}

/// What a list's new image is made of, head first.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Part<'a> {
    /// An element to encode (one pushed since the last checkpoint).
    Element(&'a [u8]),
    /// `count` elements as an image or a piece holds them, to copy.
    Encoded { bytes: &'a [u8], count: u64 },
    /// A run kept where it lies.
    Kept(PieceRun),
}

/// What [`write`] wrote: the new directory, and the bytes of the new
/// pieces.
pub(crate) struct Written {
    pub directory: PiecesImage,
    pub piece_bytes: u64,
}

/// Writes `parts` as the list's pieces for checkpoint `version`: elements
/// and copied bytes gathered into new pieces of at most `target` bytes
/// (an element larger than that gets a piece of its own), kept runs
/// named as they are. Returns the directory naming them all, head first.
pub(crate) fn write<'a>(
    images: &Store,
    key: &[u8],
    version: u64,
    target: usize,
    parts: impl IntoIterator<Item = Part<'a>>,
) -> Result<Written> {
    let mut packer = Packer {
        images,
        key,
        version,
        target: target.max(1),
        pending: Vec::new(),
        pending_bytes: 0,
        pending_count: 0,
        next_seq: 0,
        piece_key: Vec::new(),
        written: Written {
            directory: PiecesImage::default(),
            piece_bytes: 0,
        },
    };
    for part in parts {
        match part {
            Part::Element(element) => {
                let bytes = ListImage::element_bytes(element);
                packer.make_room(bytes)?;
                packer.add(Chunk::Element(element), bytes, 1);
            }
            Part::Encoded {
                mut bytes,
                mut count,
            } => {
                while count > 0 {
                    let room = packer.target.saturating_sub(packer.pending_bytes);
                    let (fit, end) = if bytes.len() <= room {
                        (count, bytes.len())
                    } else {
                        ListImage::fit(bytes, room).map_err(|e| Error::corrupt_image(key, e))?
                    };
                    let (fit, end) = match fit {
                        0 if packer.pending_count > 0 => {
                            packer.flush()?;
                            continue;
                        }
                        // An element larger than a piece: a piece of its own.
                        0 => (
                            1,
                            ListImage::step(bytes, 0, 1)
                                .map_err(|e| Error::corrupt_image(key, e))?,
                        ),
                        _ => (fit, end),
                    };
                    if fit > count {
                        return Err(Error::corrupt_image(key, "more elements than counted"));
                    }
                    packer.add(Chunk::Raw(&bytes[..end]), end, fit);
                    bytes = &bytes[end..];
                    count -= fit;
                    if count > 0 {
                        packer.flush()?;
                    }
                }
                if !bytes.is_empty() {
                    return Err(Error::corrupt_image(
                        key,
                        "bytes after the counted elements",
                    ));
                }
            }
            Part::Kept(run) => {
                packer.flush()?;
                packer.written.directory.count += run.count;
                packer.written.directory.runs.push(run);
            }
        }
    }
    packer.flush()?;
    Ok(packer.written)
}

/// A piece's content before it is written.
enum Chunk<'a> {
    Element(&'a [u8]),
    Raw(&'a [u8]),
}

struct Packer<'s, 'a> {
    images: &'s Store,
    key: &'s [u8],
    version: u64,
    target: usize,
    pending: Vec<Chunk<'a>>,
    pending_bytes: usize,
    pending_count: u64,
    next_seq: u64,
    piece_key: Vec<u8>,
    written: Written,
}

impl<'a> Packer<'_, 'a> {
    fn add(&mut self, chunk: Chunk<'a>, bytes: usize, count: u64) {
        self.pending.push(chunk);
        self.pending_bytes += bytes;
        self.pending_count += count;
    }

    /// Writes the piece gathered so far if `bytes` more would take it past
    /// the target.
    fn make_room(&mut self, bytes: usize) -> Result<()> {
        if self.pending_count > 0 && self.pending_bytes + bytes > self.target {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the piece gathered so far (if any) and names it.
    fn flush(&mut self) -> Result<()> {
        if self.pending_count == 0 {
            return Ok(());
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        piece_key_into(self.version, seq, self.key, &mut self.piece_key);
        // Taken for the writer's closure and put back cleared: the next
        // piece gathers into the same allocation.
        let mut pending = std::mem::take(&mut self.pending);
        self.images
            .put_written(&self.piece_key, self.pending_bytes, |writer| {
                for chunk in &pending {
                    match chunk {
                        Chunk::Element(element) => {
                            ListImage::write_element(element, &mut |piece| writer.write(piece))
                        }
                        Chunk::Raw(bytes) => writer.write(bytes),
                    }
                }
            })?;
        let run = PieceRun {
            version: self.version,
            seq,
            offset: 0,
            bytes: self.pending_bytes as u64,
            count: self.pending_count,
        };
        self.written.directory.count += run.count;
        self.written.directory.runs.push(run);
        self.written.piece_bytes += run.bytes;
        pending.clear();
        self.pending = pending;
        self.pending_bytes = 0;
        self.pending_count = 0;
        Ok(())
    }
}
