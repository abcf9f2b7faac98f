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

use engram_engine::Store;

use crate::error::{Error, Result};
use crate::op::Op;
use crate::pieces::{self, Part, Written};
use crate::state::{Access, Entry};
use crate::types::{resolve_range, DecodeError, ListImage, Object, PieceRun, PiecesImage};

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
    source: Source,
    expire_at_ms: u64,
    /// Elements pushed at the head since the image, head first.
    front: VecDeque<&'log [u8]>,
    /// Elements pushed at the tail since the image, head first.
    back: VecDeque<&'log [u8]>,
    /// The image's elements popped from the head and from the tail.
    skip_front: u64,
    skip_back: u64,
}

/// The image a list is spliced from.
#[derive(Debug)]
enum Source {
    /// One value holding every element (a list that was decoded and
    /// encoded whole, until it grew past `splice_list_bytes`).
    Whole(ListImage),
    /// A directory of runs in pieces (`pieces.rs`).
    Pieces(PiecesImage),
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
    /// holds it after its header), whole or in pieces, or `None` when it is
    /// not a list.
    pub fn read(
        version: u64,
        expire_at_ms: u64,
        object_image: &[u8],
    ) -> std::result::Result<Option<SplicedList<'log>>, DecodeError> {
        let source = match ListImage::read(object_image)? {
            Some(image) => Source::Whole(image),
            None => match PiecesImage::read(object_image)? {
                Some(directory) => Source::Pieces(directory),
                None => return Ok(None),
            },
        };
        Ok(Some(SplicedList {
            version,
            source,
            expire_at_ms,
            front: VecDeque::new(),
            back: VecDeque::new(),
            skip_front: 0,
            skip_back: 0,
        }))
    }

    /// The pieces the old image names (none when it is whole).
    pub fn old_pieces(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let runs = match &self.source {
            Source::Whole(_) => &[][..],
            Source::Pieces(directory) => &directory.runs[..],
        };
        runs.iter().map(PieceRun::piece)
    }

    /// The bytes of the runs of a list in pieces (`None`: a whole image).
    pub fn pieces_bytes(&self) -> Option<u64> {
        match &self.source {
            Source::Whole(_) => None,
            Source::Pieces(directory) => Some(directory.runs.iter().map(|run| run.bytes).sum()),
        }
    }

    fn len(&self) -> u64 {
        self.front.len() as u64 + self.middle_len() + self.back.len() as u64
    }

    fn old_len(&self) -> u64 {
        match &self.source {
            Source::Whole(image) => image.count,
            Source::Pieces(directory) => directory.count,
        }
    }

    /// The image's elements still in the list.
    fn middle_len(&self) -> u64 {
        self.old_len() - self.skip_front - self.skip_back
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

    /// Writes the list's new pieces for checkpoint `version` into `images`
    /// (`pieces.rs`): the pushed elements, the old image's elements still
    /// in the list (copied from a whole image; from pieces, the runs kept
    /// where they lie, shortened at the ends as far as the pops reached,
    /// an end run shorter than the elements pushed at that end copied into
    /// their piece), pieces of at most `piece_bytes`. `object_image` is the old image. Returns the
    /// new directory, for the key's image.
    pub fn write(
        &self,
        images: &Store,
        key: &[u8],
        version: u64,
        piece_bytes: usize,
        object_image: &[u8],
    ) -> Result<Written> {
        let pushed_front = self.front.iter().map(|element| Part::Element(element));
        let pushed_back = self.back.iter().map(|element| Part::Element(element));
        let corrupt = |e: DecodeError| Error::corrupt_image(key, e);
        match &self.source {
            Source::Whole(image) => {
                let middle = image
                    .middle(object_image, self.skip_front, self.skip_back)
                    .map_err(corrupt)?;
                let count = self.middle_len();
                let middle = (count > 0).then_some(Part::Encoded {
                    bytes: middle,
                    count,
                });
                let parts = pushed_front.chain(middle).chain(pushed_back);
                pieces::write(images, key, version, piece_bytes, parts)
            }
            Source::Pieces(directory) => {
                let runs = self.trimmed_runs(images, key, directory)?;
                // A run at an end that new elements meet is copied into
                // their piece when it is shorter than they are (or than a
                // sixty-fourth of a piece): the copy costs at most what the
                // checkpoint writes anyway, and pushes a few at a time do
                // not leave a trail of small pieces.
                let pushed_bytes = |elements: &VecDeque<&[u8]>| -> u64 {
                    elements
                        .iter()
                        .map(|element| ListImage::element_bytes(element) as u64)
                        .sum()
                };
                let short = |pushed: u64| {
                    move |run: &PieceRun| {
                        pushed > 0 && run.bytes < pushed.max((piece_bytes / 64) as u64)
                    }
                };
                let merge_front = runs.front().is_some_and(short(pushed_bytes(&self.front)));
                let merge_back = runs.len() > usize::from(merge_front)
                    && runs.back().is_some_and(short(pushed_bytes(&self.back)));
                let mut piece_key = Vec::new();
                let read = |merge: bool, run: Option<&PieceRun>, piece_key: &mut Vec<u8>| match run
                    .filter(|_| merge)
                {
                    Some(run) => pieces::read_piece(images, key, run.piece(), piece_key).map(Some),
                    None => Ok(None),
                };
                let first = read(merge_front, runs.front(), &mut piece_key)?;
                let last = read(merge_back, runs.back(), &mut piece_key)?;
                let mut middle = Vec::with_capacity(runs.len());
                for (n, run) in runs.iter().enumerate() {
                    let copy_from = match (n, &first, &last) {
                        (0, Some(piece), _) => Some(piece),
                        (n, _, Some(piece)) if n + 1 == runs.len() => Some(piece),
                        _ => None,
                    };
                    middle.push(match copy_from {
                        Some(piece) => Part::Encoded {
                            bytes: pieces::run_bytes(key, piece, run)?,
                            count: run.count,
                        },
                        None => Part::Kept(*run),
                    });
                }
                let parts = pushed_front.chain(middle).chain(pushed_back);
                pieces::write(images, key, version, piece_bytes, parts)
            }
        }
    }

    /// The old directory's runs less the elements popped from either end:
    /// runs dropped whole, the runs at the ends shortened (stepping over
    /// the popped elements' lengths in their pieces).
    fn trimmed_runs(
        &self,
        images: &Store,
        key: &[u8],
        directory: &PiecesImage,
    ) -> Result<VecDeque<PieceRun>> {
        let mut runs: VecDeque<PieceRun> = directory.runs.iter().copied().collect();
        drop_elements(images, key, &mut runs, self.skip_front, true)?;
        drop_elements(images, key, &mut runs, self.skip_back, false)?;
        Ok(runs)
    }

    /// The expiry the image carries (unchanged: no push, pop or trim
    /// changes it).
    pub fn expire_at_ms(&self) -> u64 {
        self.expire_at_ms
    }

    /// The ordinary entry: the old image (`object_image`, whole, or read
    /// from its pieces in `images`) decoded, the edits applied.
    pub fn materialize(self, images: &Store, key: &[u8], object_image: &[u8]) -> Result<Entry> {
        let mut list = match &self.source {
            Source::Whole(_) => match Object::decode(object_image) {
                Ok(Object::List(list)) => list,
                Ok(_) => unreachable!("the image's kind byte was read as a list's"),
                Err(e) => return Err(Error::corrupt_image(key, e)),
            },
            Source::Pieces(directory) => pieces::decode_list(images, key, directory)?,
        };
        list.drop_front(self.skip_front as usize);
        list.drop_back(self.skip_back as usize);
        list.push_front(self.front.into_iter().rev());
        list.push_back(self.back);
        Ok(Entry {
            object: Object::List(list),
            expire_at_ms: self.expire_at_ms,
            access: Access::default(),
        })
    }
}

/// Drops `count` elements from the head of `runs` (`front`) or from its
/// tail: whole runs while they go whole, then the part of one, found by
/// stepping over element lengths in its piece (no element copied).
fn drop_elements(
    images: &Store,
    key: &[u8],
    runs: &mut VecDeque<PieceRun>,
    mut count: u64,
    front: bool,
) -> Result<()> {
    let mut piece_key = Vec::new();
    while count > 0 {
        let run = match front {
            true => runs.front_mut(),
            false => runs.back_mut(),
        }
        .expect("the runs add up to the count");
        if run.count <= count {
            count -= run.count;
            match front {
                true => runs.pop_front(),
                false => runs.pop_back(),
            };
            continue;
        }
        // The cut lies this many elements into the run.
        let before_cut = if front { count } else { run.count - count };
        let piece = pieces::read_piece(images, key, run.piece(), &mut piece_key)?;
        let cut = ListImage::step(pieces::run_bytes(key, &piece, run)?, 0, before_cut)
            .map_err(|e| Error::corrupt_image(key, e))? as u64;
        if front {
            run.offset += cut;
            run.bytes -= cut;
        } else {
            run.bytes = cut;
        }
        run.count -= count;
        break;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::apply;
    use crate::op::Bytes;
    use crate::types::List;
    use engram_engine::{IntegrityOptions, ModeChoice};
    use hashbrown::HashMap;
    use proptest::prelude::*;

    fn image_of(list: &List) -> Vec<u8> {
        let mut image = Vec::new();
        Object::List(list.clone()).encode(&mut image);
        image
    }

    /// An images store of small blocks, so that pieces of a few hundred
    /// bytes go to log blocks and larger ones to extents.
    fn images(dir: &std::path::Path) -> Store {
        Store::open(
            dir,
            engram_engine::Options {
                mode: ModeChoice::Emulated,
                block_size_bytes: 64 << 10,
                grow_bytes: 256 << 10,
                reserve_bytes: 64 << 20,
                populate: false,
                integrity: IntegrityOptions::off(),
                ..Default::default()
            },
        )
        .unwrap()
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
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the pushes, pops and trims, over checkpoints one after
        /// the other (the first from a whole image, the rest from pieces),
        /// the list in pieces reads back as decoding and replaying would
        /// have left it, and so does the materialized entry; an edit the
        /// splice refuses is one that empties the list. New pieces hold at
        /// most `piece_bytes`, unless one element is larger.
        #[test]
        fn a_list_in_pieces_is_the_replayed_one(
            start in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 1..40),
            rounds in prop::collection::vec(
                (prop::collection::vec(edit(), 0..20), 1usize..2000),
                1..4,
            ),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = images(dir.path());
            let mut list = List::new();
            list.push_back(start.iter().map(|item| item.clone().into_boxed_slice()));
            let mut old = image_of(&list);
            // What the checkpoint would replay onto: the decoded key, with
            // the operations applied by `apply` itself.
            let mut keys: HashMap<Bytes, Entry> = HashMap::new();
            keys.insert(
                Bytes::from(&b"k"[..]),
                Entry { object: Object::List(list.clone()), expire_at_ms: 1234, access: Access::default() },
            );
            for (round, (edits, piece_bytes)) in rounds.iter().enumerate() {
                let version = round as u64 + 2;
                let mut spliced = SplicedList::read(version - 1, 1234, &old).unwrap().unwrap();
                let mut emptied = false;
                for (kind, front, count, start, stop, values) in edits {
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
                        emptied = true;
                        break;
                    };
                    prop_assert!(accepted, "refused {op:?}, which leaves the list non-empty");
                    let Object::List(replayed) = &entry.object else { panic!("not a list") };
                    list = replayed.clone();
                }
                let written = spliced.write(&store, b"k", version, *piece_bytes, &old).unwrap();
                for run in written.directory.runs.iter().filter(|run| run.version == version) {
                    prop_assert!(run.bytes <= *piece_bytes as u64 || run.count == 1, "{run:?}");
                }
                prop_assert_eq!(&crate::pieces::decode_list(&store, b"k", &written.directory).unwrap(), &list);
                let entry = spliced.materialize(&store, b"k", &old).unwrap();
                prop_assert_eq!(entry.expire_at_ms, 1234);
                let Object::List(materialized) = entry.object else { panic!("not a list") };
                prop_assert_eq!(&materialized, &list);
                if emptied {
                    break;
                }
                old.clear();
                written.directory.write(&mut old);
            }
        }
    }

    #[test]
    fn new_elements_meet_a_short_end_run_in_one_piece() {
        // A list in one short piece; a push at each end copies it into the
        // new elements' piece rather than leaving three small pieces.
        let dir = tempfile::tempdir().unwrap();
        let store = images(dir.path());
        let mut list = List::new();
        list.push_back([b"a".as_slice(), b"b".as_slice()]);
        let spliced = SplicedList::read(1, 0, &image_of(&list)).unwrap().unwrap();
        let written = spliced
            .write(&store, b"k", 2, 1000, &image_of(&list))
            .unwrap();
        assert_eq!(written.directory.runs.len(), 1);
        let mut old = Vec::new();
        written.directory.write(&mut old);
        let mut spliced = SplicedList::read(2, 0, &old).unwrap().unwrap();
        assert!(spliced.apply(&Op::ListPush {
            key: b"k",
            front: true,
            values: vec![b"x"]
        }));
        assert!(spliced.apply(&Op::ListPush {
            key: b"k",
            front: false,
            values: vec![b"y"]
        }));
        let next = spliced.write(&store, b"k", 3, 1000, &old).unwrap();
        assert_eq!(next.directory.runs.len(), 1, "{:?}", next.directory);
        assert_eq!(next.directory.runs[0].version, 3);
        let read = crate::pieces::decode_list(&store, b"k", &next.directory).unwrap();
        assert_eq!(
            read.iter().collect::<Vec<_>>(),
            [b"x".as_slice(), b"a", b"b", b"y"]
        );
        // A run as long as half a piece is kept where it lies.
        let mut spliced = SplicedList::read(3, 0, &{
            let mut image = Vec::new();
            next.directory.write(&mut image);
            image
        })
        .unwrap()
        .unwrap();
        assert!(spliced.apply(&Op::ListPush {
            key: b"k",
            front: true,
            values: vec![b"z"]
        }));
        let kept = spliced.write(&store, b"k", 4, 8, &[]).unwrap();
        assert_eq!(kept.directory.runs.len(), 2);
        assert_eq!(kept.directory.runs[1], next.directory.runs[0]);
    }

    #[test]
    fn only_lists_are_spliced_and_damage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = images(dir.path());
        let mut set_image = Vec::new();
        let mut set = crate::types::Set::default();
        set.insert(b"m".as_slice().into());
        Object::Set(set).encode(&mut set_image);
        assert!(SplicedList::read(1, 0, &set_image).unwrap().is_none());
        let mut list = List::new();
        list.push_back([b"a".as_slice(), b"bc".as_slice()]);
        let image = image_of(&list);
        let spliced = SplicedList::read(1, 0, &image).unwrap().unwrap();
        // An element running past the image, and bytes after the last.
        assert!(spliced
            .write(&store, b"k", 2, 100, &image[..image.len() - 1])
            .is_err());
        let mut longer = image.clone();
        longer.push(0);
        assert!(spliced.write(&store, b"k", 2, 100, &longer).is_err());
        // A count larger than the bytes could hold.
        assert!(SplicedList::read(1, 0, &image[..3]).is_err());
        // A directory whose runs do not add up, a run past its piece, a
        // piece that is gone.
        let written = spliced.write(&store, b"k", 2, 100, &image).unwrap();
        let mut directory = written.directory.clone();
        directory.count += 1;
        let mut bytes = Vec::new();
        directory.write(&mut bytes);
        assert!(SplicedList::read(2, 0, &bytes).is_err());
        let mut directory = written.directory.clone();
        directory.runs[0].bytes += 1;
        assert!(crate::pieces::decode_list(&store, b"k", &directory).is_err());
        let mut directory = written.directory.clone();
        directory.runs[0].seq = 7;
        let error = crate::pieces::decode_list(&store, b"k", &directory).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("piece 7 of checkpoint 2 is missing"),
            "{error}"
        );
        // Read alone, a list in pieces is refused, not misread.
        assert_eq!(Object::decode(&bytes), Err(DecodeError::InPieces));
    }
}
