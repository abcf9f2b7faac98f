//! The hook through which the integrity layer learns of every store.
//!
//! Lazy redundancy (Kateja et al., "Lazy Redundancy for NVM Storage", 4.2)
//! needs to know which pages changed since their checksum and parity were
//! last computed, and needs that knowledge to survive a crash. The paper
//! repurposes page-table dirty bits with kernel and hardware support we do
//! not have; Engram instead routes every store through [`Region`]'s helpers
//! (which the crash simulator needs anyway) and lets a tracker record the
//! page before the store happens. The tracker lives in the integrity crate;
//! this crate only calls it.
//!
//! [`Region`]: crate::Region

/// Sees every store to a region before and after it happens.
///
/// `before_store` runs before any byte of `[offset, offset + len)` changes
/// and must leave a durable record that the range's pages are stale;
/// `after_store` runs once the bytes are in place, with the ticket
/// `before_store` returned. The pair brackets one store, so a tracker can
/// tell when every store that began before some moment has finished (the
/// integrity layer's writer gate).
pub trait StoreTracker: Send + Sync {
    fn before_store(&self, offset: u64, len: u64) -> StoreTicket;
    /// `region` is the region stored to (passed in, so that a tracker need
    /// not own the region that owns it).
    fn after_store(&self, region: &crate::Region, ticket: StoreTicket, offset: u64, len: u64);
    /// The region is about to grow to `new_len` bytes; an error refuses the
    /// growth (the region stays as it was).
    fn before_grow(&self, new_len: u64) -> crate::Result<()>;
}

/// Opaque to the region: whatever the tracker needs to close a bracket.
#[derive(Clone, Copy, Debug)]
pub struct StoreTicket(pub u64);

/// `words` atomic words, all zero, allocated lazily: the kernel backs the
/// pages only when they are first written, so a bitmap sized for a region's
/// whole reservation costs memory only for the part in use.
pub fn zeroed_atomic_words(words: usize) -> Box<[std::sync::atomic::AtomicU64]> {
    use std::sync::atomic::AtomicU64;
    if words == 0 {
        return Box::new([]);
    }
    let layout = std::alloc::Layout::array::<AtomicU64>(words).expect("bitmap size overflows");
    // SAFETY: the layout has a non-zero size (words > 0).
    let pointer = unsafe { std::alloc::alloc_zeroed(layout) } as *mut AtomicU64;
    if pointer.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // The Box takes ownership and frees it with the same layout.
    // SAFETY: `pointer` is a fresh zeroed allocation of exactly `words`
    // AtomicU64 with that array's layout; zero bytes are a valid AtomicU64.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(pointer, words)) }
}
