//! (in progress)
pub const MAX_KEY_BYTES: usize = 64 << 10;
pub const MAX_VALUE_BYTES: usize = 512 << 20;
