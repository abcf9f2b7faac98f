//! The on-media format of `integrity.pmem`, byte by byte.
//!
//! The file sits beside the data file it protects and is itself a
//! persistent region (reached only through `engram_pmem::Region`). It is
//! stored apart from the data on purpose: a page of data and the redundancy
//! that can rebuild it never share a fate.
//!
//! ```text
//! page 0: header
//!   offset  size  field          mutability
//!        0     8  magic          "ENGRINTG"
//!        8     4  version        1
//!       12     4  page_bytes     4096
//!       16     4  stripe_pages   W: data pages per parity page (2..=64)
//!       20     4  group_pages    B: data pages per group, a multiple of W
//!       24     8  data_id        the data file's store id (its superblock)
//!       32     4  crc            CRC32C of bytes 0..32
//!       64     8  session        atomic: 0 after a clean close, else
//!                                (boot id hash | 1) while open
//!      128     8  shadow_group   atomic commit word: 0 = no shadow, else
//!                                group + 1 whose marks the shadow holds
//!      192   B/8  shadow_marks   copy of that group's marks (Algorithm 1's
//!                                dirtyBitvectorCopy)
//!
//! group g (g = 0, 1, ...) at 4096 + g * group_bytes covers data pages
//! [g * B, (g + 1) * B); group_bytes = (2 + B / W) * 4096:
//!   +0          B/8  marks       bit i set: data page g*B+i is stale
//!   +2048         4  meta        CRC32C(checksums page) ^ CRC32C(zero page)
//!   +4096      4 * B checksums   per page: CRC32C(page) ^ CRC32C(zero page)
//!   +8192  4096*B/W  parity      per stripe of W pages: their XOR
//! ```
//!
//! All integers little-endian. Checksums are stored XORed with the checksum
//! of a zero page (and `meta` likewise), so a freshly allocated, all-zero
//! group is already correct for freshly allocated, all-zero data: growth
//! needs no initialisation pass.
//!
//! ## What makes a page's redundancy trustworthy
//!
//! A page is *stale* when its mark is set, or when `shadow_group` names its
//! group and its shadow bit is set. A mark is persisted before the first
//! store that changes the page in a redundancy epoch, and cleared only after
//! the shadow holding it is persisted; the shadow is cleared only after the
//! new checksums and parity are persisted. So a page that is not stale has a
//! checksum (and a stripe parity, if no page of the stripe is stale) that
//! describes its content, and a mismatch is corruption, never a crash
//! artefact (the two orderings of the paper's Figure 4).

use engram_pmem::PmemOffset;

pub const MAGIC: [u8; 8] = *b"ENGRINTG";
pub const VERSION: u32 = 1;
pub const PAGE_BYTES: u64 = 4096;
pub const HEADER_CRC_COVERS: usize = 32;
pub const SESSION_OFFSET: PmemOffset = PmemOffset(64);
pub const SHADOW_GROUP_OFFSET: PmemOffset = PmemOffset(128);
pub const SHADOW_MARKS_OFFSET: PmemOffset = PmemOffset(192);
/// Group pages are at most this many, so a group's marks (and the shadow)
/// fit the 2048 bytes before `meta`, and its checksums one page.
pub const MAX_GROUP_PAGES: u64 = 1024;
pub const META_IN_GROUP: u64 = 2048;
pub const MIN_STRIPE_PAGES: u32 = 2;
pub const MAX_STRIPE_PAGES: u32 = 64;

const _: () = assert!(SHADOW_MARKS_OFFSET.0 + MAX_GROUP_PAGES / 8 <= PAGE_BYTES);
const _: () = assert!(MAX_GROUP_PAGES / 8 <= META_IN_GROUP);
const _: () = assert!(MAX_GROUP_PAGES * 4 <= PAGE_BYTES);

/// The geometry fixed when the file is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub stripe_pages: u64,
    pub group_pages: u64,
}

impl Geometry {
    /// Groups hold as many whole stripes as fit in [`MAX_GROUP_PAGES`].
    pub fn new(stripe_pages: u32) -> Geometry {
        debug_assert!((MIN_STRIPE_PAGES..=MAX_STRIPE_PAGES).contains(&stripe_pages));
        let stripe_pages = stripe_pages as u64;
        Geometry {
            stripe_pages,
            group_pages: MAX_GROUP_PAGES / stripe_pages * stripe_pages,
        }
    }

    pub fn group_bytes(&self) -> u64 {
        (2 + self.group_pages / self.stripe_pages) * PAGE_BYTES
    }

    pub fn group_offset(&self, group: u64) -> u64 {
        PAGE_BYTES + group * self.group_bytes()
    }

    /// File length that covers `groups` groups.
    pub fn file_bytes(&self, groups: u64) -> u64 {
        self.group_offset(groups)
    }

    pub fn groups_for_pages(&self, pages: u64) -> u64 {
        pages.div_ceil(self.group_pages)
    }

    /// The 8-byte word holding page `page`'s mark, and its bit.
    pub fn mark_word(&self, page: u64) -> (PmemOffset, u64) {
        let group = page / self.group_pages;
        let index = page % self.group_pages;
        (
            PmemOffset(self.group_offset(group) + index / 64 * 8),
            1u64 << (index % 64),
        )
    }

    pub fn marks_offset(&self, group: u64) -> PmemOffset {
        PmemOffset(self.group_offset(group))
    }

    pub fn meta_offset(&self, group: u64) -> PmemOffset {
        PmemOffset(self.group_offset(group) + META_IN_GROUP)
    }

    pub fn checksums_offset(&self, group: u64) -> PmemOffset {
        PmemOffset(self.group_offset(group) + PAGE_BYTES)
    }

    pub fn checksum_offset(&self, page: u64) -> PmemOffset {
        let group = page / self.group_pages;
        PmemOffset(self.checksums_offset(group).0 + (page % self.group_pages) * 4)
    }

    /// The parity page of the stripe that starts at data page `first_page`.
    pub fn parity_offset(&self, first_page: u64) -> PmemOffset {
        let group = first_page / self.group_pages;
        let stripe_in_group = (first_page % self.group_pages) / self.stripe_pages;
        PmemOffset(self.group_offset(group) + 2 * PAGE_BYTES + stripe_in_group * PAGE_BYTES)
    }

    /// Words of marks per group.
    pub fn mark_words(&self) -> u64 {
        self.group_pages.div_ceil(64)
    }
}

/// The header's immutable part, encoded.
pub fn encode_header(geometry: Geometry, data_id: u64) -> [u8; 36] {
    let mut bytes = [0u8; 36];
    bytes[0..8].copy_from_slice(&MAGIC);
    bytes[8..12].copy_from_slice(&VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&(PAGE_BYTES as u32).to_le_bytes());
    bytes[16..20].copy_from_slice(&(geometry.stripe_pages as u32).to_le_bytes());
    bytes[20..24].copy_from_slice(&(geometry.group_pages as u32).to_le_bytes());
    bytes[24..32].copy_from_slice(&data_id.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..HEADER_CRC_COVERS]);
    bytes[32..36].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// What is wrong with a header, for the error message.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderProblem {
    Magic,
    Version(u32),
    Checksum,
    Geometry,
}

/// Decodes and validates the header: `(geometry, data_id)`.
pub fn decode_header(bytes: &[u8]) -> Result<(Geometry, u64), HeaderProblem> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    if bytes[0..8] != MAGIC {
        return Err(HeaderProblem::Magic);
    }
    // The version before the checksum: another version may lay out (or
    // checksum) its header differently, so its checksum means nothing to
    // this build, and "too new" is the problem to name, not "damaged".
    if u32_at(8) != VERSION {
        return Err(HeaderProblem::Version(u32_at(8)));
    }
    if u32_at(32) != crc32c::crc32c(&bytes[..HEADER_CRC_COVERS]) {
        return Err(HeaderProblem::Checksum);
    }
    let stripe = u32_at(16);
    if u32_at(12) as u64 != PAGE_BYTES || !(MIN_STRIPE_PAGES..=MAX_STRIPE_PAGES).contains(&stripe) {
        return Err(HeaderProblem::Geometry);
    }
    let geometry = Geometry::new(stripe);
    if u32_at(20) as u64 != geometry.group_pages {
        return Err(HeaderProblem::Geometry);
    }
    Ok((
        geometry,
        u64::from_le_bytes(bytes[24..32].try_into().unwrap()),
    ))
}

/// CRC32C of an all-zero page: the XOR key of stored checksums.
pub fn zero_page_crc() -> u32 {
    static ZERO: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ZERO.get_or_init(|| crc32c::crc32c(&[0u8; PAGE_BYTES as usize]))
}

/// A page's checksum as stored.
pub fn stored_checksum(page: &[u8]) -> u32 {
    crc32c::crc32c(page) ^ zero_page_crc()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_every_single_byte_flip() {
        let geometry = Geometry::new(4);
        let bytes = encode_header(geometry, 0xfeed);
        assert_eq!(decode_header(&bytes), Ok((geometry, 0xfeed)));
        for at in 0..bytes.len() {
            let mut bad = bytes;
            bad[at] ^= 0x10;
            assert!(decode_header(&bad).is_err(), "flip at byte {at} accepted");
        }
    }

    #[test]
    fn another_version_is_named_whatever_its_checksum() {
        let mut bytes = encode_header(Geometry::new(4), 0xfeed);
        bytes[8..12].copy_from_slice(&9u32.to_le_bytes());
        // The checksum still describes version 1: a future file need not
        // checksum its header as this build does.
        assert_eq!(decode_header(&bytes), Err(HeaderProblem::Version(9)));
        let crc = crc32c::crc32c(&bytes[..HEADER_CRC_COVERS]);
        bytes[32..36].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_header(&bytes), Err(HeaderProblem::Version(9)));
    }

    #[test]
    fn groups_hold_whole_stripes_and_sections_do_not_overlap() {
        for stripe in MIN_STRIPE_PAGES..=MAX_STRIPE_PAGES {
            let g = Geometry::new(stripe);
            assert_eq!(g.group_pages % g.stripe_pages, 0);
            assert!(g.group_pages <= MAX_GROUP_PAGES);
            let last_page = g.group_pages - 1;
            assert!(g.mark_word(last_page).0 .0 < g.meta_offset(0).0);
            assert!(g.checksum_offset(last_page).0 + 4 <= g.group_offset(0) + 2 * PAGE_BYTES);
            let last_stripe = last_page / g.stripe_pages * g.stripe_pages;
            assert_eq!(
                g.parity_offset(last_stripe).0 + PAGE_BYTES,
                g.group_offset(1)
            );
            assert_eq!(g.mark_word(g.group_pages).0, g.marks_offset(1));
        }
    }

    #[test]
    fn a_zero_page_has_a_zero_stored_checksum() {
        assert_eq!(stored_checksum(&[0u8; PAGE_BYTES as usize]), 0);
        assert_ne!(stored_checksum(&[1u8; PAGE_BYTES as usize]), 0);
    }
}
