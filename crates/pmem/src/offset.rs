/// A byte offset from the start of a region. Persistent data stores these,
/// never raw pointers, so a region can be mapped at any address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PmemOffset(pub u64);

impl PmemOffset {
    pub const fn get(self) -> u64 {
        self.0
    }

    pub const fn add(self, bytes: u64) -> PmemOffset {
        PmemOffset(self.0 + bytes)
    }
}

impl std::fmt::Display for PmemOffset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
