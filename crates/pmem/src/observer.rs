/// Sees every store, flush and fence a region performs.
///
/// The crash simulator implements this to learn which cache lines are
/// pending (stored but not yet flushed and fenced) at each point, and
/// materialises from that the images a power failure could leave. Normal runs
/// have no observer, and the hooks cost one predictable branch.
pub trait PersistObserver: Send + Sync {
    /// `bytes` were just stored at `offset` (for atomics: the word's new
    /// value).
    fn on_store(&self, offset: u64, bytes: &[u8]);
    /// The cache lines covering `[offset, offset + len)` were flushed.
    fn on_flush(&self, offset: u64, len: u64);
    /// A store fence: every flushed line is now persistent.
    fn on_fence(&self);
    /// The region grew to `new_len` bytes; the new range reads as zeros.
    fn on_grow(&self, _new_len: u64) {}
}
