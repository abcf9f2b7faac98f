//! Cache-line flush and store-fence instructions.
//!
//! On real persistent memory `clwb` (write back, keep the line cached) is the
//! instruction of choice; `clflushopt` also evicts the line. On emulated
//! memory neither is needed for correctness (the page cache holds the data),
//! but benchmarks select one anyway so that an emulated run pays the cost a
//! DAX run would.

use std::fmt;

/// The instruction used to write back one cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInstruction {
    Clwb,
    Clflushopt,
    /// Issue no flush; fences are still issued so ordering is unchanged.
    None,
}

impl FlushInstruction {
    pub fn name(self) -> &'static str {
        match self {
            FlushInstruction::Clwb => "clwb",
            FlushInstruction::Clflushopt => "clflushopt",
            FlushInstruction::None => "none",
        }
    }

    /// The best instruction this CPU offers for DAX persistence.
    pub fn best_available() -> FlushInstruction {
        if cpu_supports(FlushInstruction::Clwb) {
            FlushInstruction::Clwb
        } else if cpu_supports(FlushInstruction::Clflushopt) {
            FlushInstruction::Clflushopt
        } else {
            FlushInstruction::None
        }
    }
}

impl fmt::Display for FlushInstruction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FlushInstruction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "clwb" => Ok(FlushInstruction::Clwb),
            "clflushopt" => Ok(FlushInstruction::Clflushopt),
            "none" => Ok(FlushInstruction::None),
            other => Err(format!(
                "unknown flush instruction '{other}' (expected clwb, clflushopt or none)"
            )),
        }
    }
}

/// Whether this CPU implements `instruction` (CPUID leaf 7: EBX bit 24 is
/// CLWB, bit 23 is CLFLUSHOPT).
pub fn cpu_supports(instruction: FlushInstruction) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID leaf 7 exists on every x86_64 CPU that runs a current Linux
        // kernel; the intrinsic is safe and only reads registers.
        let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
        match instruction {
            FlushInstruction::Clwb => leaf7.ebx & (1 << 24) != 0,
            FlushInstruction::Clflushopt => leaf7.ebx & (1 << 23) != 0,
            FlushInstruction::None => true,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        instruction == FlushInstruction::None
    }
}

/// Writes back every cache line of `[start, start + len)`.
///
/// # Safety
/// The range must lie inside a live mapping and `instruction` must be
/// supported by this CPU (checked once when the region is opened).
#[inline]
pub(crate) unsafe fn flush_range(instruction: FlushInstruction, start: *const u8, len: usize) {
    if len == 0 || instruction == FlushInstruction::None {
        return;
    }
    let line = crate::region::CACHE_LINE_BYTES as usize;
    let first = (start as usize) & !(line - 1);
    let end = start as usize + len;
    let mut address = first;
    while address < end {
        #[cfg(target_arch = "x86_64")]
        match instruction {
            // SAFETY: the caller guarantees `address` is inside a live
            // mapping and that the CPU implements the instruction; both
            // instructions only write the line back, they change no data.
            FlushInstruction::Clwb => unsafe {
                core::arch::asm!("clwb [{0}]", in(reg) address, options(nostack, preserves_flags))
            },
            // SAFETY: as above.
            FlushInstruction::Clflushopt => unsafe {
                core::arch::asm!("clflushopt [{0}]", in(reg) address, options(nostack, preserves_flags))
            },
            FlushInstruction::None => {}
        }
        address += line;
    }
}

/// Orders every earlier store and flush before every later store.
#[inline]
pub(crate) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and no preconditions.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Asks the CPU to start loading the cache line holding `at` (into every
/// level), so that a load from it a little later does not wait for
/// memory. A hint only: nothing is read, nothing can fault, and the
/// program means the same with or without it. For loops that know their
/// next few misses (a batch of index updates), and issue them while
/// earlier work runs.
#[inline]
pub fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` takes any address, valid or not, mapped or
    // not, without faulting or changing memory; the only feature it needs
    // (SSE) is part of every x86_64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
