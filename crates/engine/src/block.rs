//! Blocks: the unit of allocation, ownership and reclamation (Viper's VBlock).
//!
//! Data block `id` occupies `[(id + 1) * B, (id + 2) * B)` of the file, `B`
//! being the store's block size. A block is either a *log block*, which one
//! writer at a time fills with records back to back (Viper's variable-size
//! VPage log), or the head of an *extent*: `n` contiguous blocks holding one
//! record too large for a log block. Extent tail blocks have no header of
//! their own while the extent lives.
//!
//! ## Block header (first 64 bytes, one cache line; little-endian)
//!
//! ```text
//! offset size  field           valid when
//!      0    4  magic           = "EBLK"
//!      4    4  kind            1 = log, 2 = extent head, 3 = free
//!      8    4  generation      > 0; unique among all block claims of the store
//!     12    4  extent_blocks   1 for log/free blocks, n >= 1 for an extent head
//!     16   44  reserved (0)
//!     60    4  crc             CRC32C of bytes 0..60
//! ```
//!
//! The header is written and persisted *before* any record is written into
//! the block, and every record repeats the generation in its state word. A
//! block reused after reclamation gets a new generation, so records left over
//! from its previous life never match and are never resurrected. Generations
//! come from one store-wide counter, recovered as the largest generation in
//! any header plus one: a header is only ever overwritten by a newer claim.
//!
//! A header that fails its checksum (a claim torn by a crash) marks a block
//! that holds no record: it is treated as free.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use engram_pmem::{PmemOffset, Region};

pub const BLOCK_HEADER_BYTES: u64 = 64;
const MAGIC: [u8; 4] = *b"EBLK";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    Log = 1,
    Extent = 2,
    Free = 3,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    pub kind: BlockKind,
    pub generation: u32,
    pub extent_blocks: u32,
}

impl BlockHeader {
    /// Writes and persists the header of the block starting at `block`.
    pub fn write(&self, region: &Region, block: PmemOffset) {
        debug_assert!(self.generation > 0);
        debug_assert!(self.extent_blocks >= 1);
        let mut bytes = [0u8; BLOCK_HEADER_BYTES as usize];
        bytes[0..4].copy_from_slice(&MAGIC);
        bytes[4..8].copy_from_slice(&(self.kind as u32).to_le_bytes());
        bytes[8..12].copy_from_slice(&self.generation.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.extent_blocks.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[..60]);
        bytes[60..64].copy_from_slice(&crc.to_le_bytes());
        region.write(block, &bytes);
        region.persist(block, BLOCK_HEADER_BYTES);
    }

    /// Reads a header; `None` if it is not a valid header (never written,
    /// torn, or damaged).
    pub fn read(region: &Region, block: PmemOffset) -> Option<BlockHeader> {
        let bytes = region.read(block, BLOCK_HEADER_BYTES);
        if bytes[0..4] != MAGIC {
            return None;
        }
        let crc = u32::from_le_bytes(bytes[60..64].try_into().unwrap());
        if crc32c::crc32c(&bytes[..60]) != crc {
            return None;
        }
        let kind = match u32::from_le_bytes(bytes[4..8].try_into().unwrap()) {
            1 => BlockKind::Log,
            2 => BlockKind::Extent,
            3 => BlockKind::Free,
            _ => return None,
        };
        let generation = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        let extent_blocks = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
        (generation > 0 && extent_blocks >= 1).then_some(BlockHeader {
            kind,
            generation,
            extent_blocks,
        })
    }
}

/// DRAM state of a block. Transitions:
///
/// ```text
/// FREE -> OWNED (a lane fills it) -> SEALED -> [COMPACTING -> SEALED]* -> FREEING -> FREE
/// FREE -> EXTENT_HEAD (+ EXTENT_TAIL for the rest) -> FREEING -> FREE
///                        EXTENT_TAIL -> FREE (when its head is freed)
/// ```
///
/// Only a block whose live bytes are zero and that nobody fills any more goes
/// to FREEING, by compare-and-swap, so exactly one thread frees it; the free
/// itself waits for an epoch so that readers still copying from it finish.
/// Recovery, before the store is shared, also gives a block found on the
/// media the state a scan gives it (FREE -> SEALED) and frees a dead one at
/// once (SEALED, EXTENT_HEAD or EXTENT_TAIL -> FREE, FREE -> FREE): no
/// reader can hold it yet. [`BlockMeta`] checks every move against these.
pub mod state {
    pub const FREE: u8 = 0;
    pub const OWNED: u8 = 1;
    pub const SEALED: u8 = 2;
    pub const COMPACTING: u8 = 3;
    pub const FREEING: u8 = 4;
    pub const EXTENT_HEAD: u8 = 5;
    pub const EXTENT_TAIL: u8 = 6;

    /// Whether `from -> to` is a move of the state machine above.
    pub fn legal(from: u8, to: u8) -> bool {
        matches!(
            (from, to),
            (FREE, OWNED)
                | (OWNED, SEALED)
                | (SEALED, COMPACTING)
                | (COMPACTING, SEALED)
                | (SEALED | COMPACTING | EXTENT_HEAD, FREEING)
                | (FREEING, FREE)
                | (FREE, EXTENT_HEAD | EXTENT_TAIL)
                | (EXTENT_TAIL, FREE)
        )
    }

    /// [`legal`], or one of recovery's own moves (see above).
    pub fn legal_in_recovery(from: u8, to: u8) -> bool {
        legal(from, to)
            || matches!(
                (from, to),
                (FREE, SEALED | FREE) | (SEALED | EXTENT_HEAD | EXTENT_TAIL, FREE)
            )
    }

    /// The state's name, for assertion messages.
    pub fn name(state: u8) -> &'static str {
        match state {
            FREE => "FREE",
            OWNED => "OWNED",
            SEALED => "SEALED",
            COMPACTING => "COMPACTING",
            FREEING => "FREEING",
            EXTENT_HEAD => "EXTENT_HEAD",
            EXTENT_TAIL => "EXTENT_TAIL",
            _ => "(not a state)",
        }
    }
}

#[derive(Default)]
pub struct BlockMeta {
    /// Bytes of records in this block that are not retired (for an extent,
    /// counted on its head). Includes records being published.
    pub live_bytes: AtomicU64,
    /// One of [`state`]'s values; changed only through the methods below,
    /// which check the move.
    state: AtomicU8,
    pub generation: AtomicU32,
    pub extent_blocks: AtomicU32,
    /// Lazy retirement: the block holds a tombstone (cleared at claim).
    /// Its death makes the next round set every deferred bit.
    pub holds_tombstone: AtomicBool,
    /// Lazy retirement: a round wrote this dead log block's FREE header,
    /// so its records need no DELETED bits (cleared at claim).
    pub freed_on_media: AtomicBool,
}

impl BlockMeta {
    pub fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Moves the block to `to`. For the thread that owns the block's state
    /// (the lane filling it, the thread freeing or claiming it); moves that
    /// threads race for go through [`BlockMeta::change_state`].
    pub fn set_state(&self, to: u8) {
        self.store_state(to, state::legal);
    }

    /// [`BlockMeta::set_state`] for recovery, which may also make its own
    /// moves (see [`state`]).
    pub fn set_state_in_recovery(&self, to: u8) {
        self.store_state(to, state::legal_in_recovery);
    }

    /// Moves the block from `from` to `to` by compare-and-swap; false (and
    /// no move) when it was not in `from`.
    pub fn change_state(&self, from: u8, to: u8) -> bool {
        debug_assert!(
            state::legal(from, to),
            "block state {} -> {} is not a move of the block state machine",
            state::name(from),
            state::name(to)
        );
        self.state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn store_state(&self, to: u8, legal: fn(u8, u8) -> bool) {
        if cfg!(feature = "verify") {
            // A swap, so the state checked is the one replaced.
            let from = self.state.swap(to, Ordering::AcqRel);
            assert!(
                legal(from, to),
                "block state {} -> {} is not a move of the block state machine",
                state::name(from),
                state::name(to)
            );
        } else {
            self.state.store(to, Ordering::Release);
        }
    }
}

const CHUNK_BLOCKS: usize = 4096;

/// Block metadata for every block the region could ever hold, allocated a
/// chunk at a time on first use, never moved, read without locks.
pub struct BlockTable {
    chunks: Box<[OnceLock<Box<[BlockMeta]>>]>,
}

impl BlockTable {
    pub fn new(max_blocks: u64) -> BlockTable {
        let chunks = (max_blocks as usize).div_ceil(CHUNK_BLOCKS).max(1);
        BlockTable {
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
        }
    }

    pub fn get(&self, id: u32) -> &BlockMeta {
        let id = id as usize;
        let chunk = self.chunks[id / CHUNK_BLOCKS]
            .get_or_init(|| (0..CHUNK_BLOCKS).map(|_| BlockMeta::default()).collect());
        &chunk[id % CHUNK_BLOCKS]
    }
}
