use std::time::Duration;

use crate::layout::{MAX_STRIPE_PAGES, MIN_STRIPE_PAGES};
use crate::{Error, Result};

/// How redundancy is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IntegrityMode {
    /// No checksums, no parity, no scrubbing.
    Off,
    /// A background pass refreshes the redundancy of stale pages every
    /// `period` (the paper's lazy redundancy); writers only mark pages.
    #[default]
    Lazy,
    /// Every store refreshes its pages' checksums and parity before it
    /// returns: no window without coverage, at a price (the paper's
    /// "TxBoundary" comparison point).
    Inline,
}

impl IntegrityMode {
    pub fn name(self) -> &'static str {
        match self {
            IntegrityMode::Off => "off",
            IntegrityMode::Lazy => "lazy",
            IntegrityMode::Inline => "inline",
        }
    }
}

impl std::str::FromStr for IntegrityMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(IntegrityMode::Off),
            "lazy" => Ok(IntegrityMode::Lazy),
            "inline" => Ok(IntegrityMode::Inline),
            other => Err(format!(
                "unknown integrity mode '{other}' (expected off, lazy or inline)"
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub struct IntegrityOptions {
    pub mode: IntegrityMode,
    /// Lazy mode: how often the background pass starts (start to start).
    /// A page written at time t is covered again by t + period + one pass.
    pub period: Duration,
    /// Data pages per parity page. Fixed when the integrity file is
    /// created; an existing file keeps its own.
    pub stripe_pages: u32,
    /// Background scrubbing speed at most; 0 turns background scrubbing
    /// off (an on-demand scrub still works).
    pub scrub_bytes_per_sec: u64,
    /// How long a background sweep of the whole region takes at least:
    /// the scrubber goes no faster than the region's size over this
    /// period (and never faster than `scrub_bytes_per_sec`), so a small
    /// store is not re-verified every few seconds for nothing. Zero: as
    /// fast as `scrub_bytes_per_sec` allows, sweep after sweep.
    pub scrub_period: Duration,
    /// Deliberate defects, for tests that check the checkers (only with
    /// the `fault-injection` feature, which the crate's tests turn on).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub faults: IntegrityFaults,
}

/// The two wrong orderings of the paper's Figure 4, to prove the crash
/// tests catch them.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IntegrityFaults {
    /// Figure 4(b): clear the marks before refreshing, with no shadow copy.
    pub skip_shadow: bool,
    /// Figure 4(a): refresh, then clear the marks (no shadow, no gate).
    pub clear_marks_after_refresh: bool,
}

pub const DEFAULT_PERIOD: Duration = Duration::from_secs(1);
pub const DEFAULT_STRIPE_PAGES: u32 = 4;
pub const DEFAULT_SCRUB_BYTES_PER_SEC: u64 = 64 << 20;
/// A sweep every ten minutes: a latent media error is found long before a
/// second one in the same stripe is likely (hardware patrol scrubbers
/// sweep DRAM about daily), and a store below ~37 GiB spends well under
/// 64 MiB/s on it (256 MiB: 0.4 MiB/s).
pub const DEFAULT_SCRUB_PERIOD: Duration = Duration::from_secs(600);
/// The longest period accepted: past it, coverage is too rare to be called
/// protection, and a typo (ms for s) is likelier than intent.
pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);
/// The longest sweep period accepted: a month.
pub const MAX_SCRUB_PERIOD: Duration = Duration::from_secs(31 * 24 * 3600);

impl Default for IntegrityOptions {
    fn default() -> Self {
        IntegrityOptions {
            mode: IntegrityMode::Lazy,
            period: DEFAULT_PERIOD,
            stripe_pages: DEFAULT_STRIPE_PAGES,
            scrub_bytes_per_sec: DEFAULT_SCRUB_BYTES_PER_SEC,
            scrub_period: DEFAULT_SCRUB_PERIOD,
            #[cfg(feature = "fault-injection")]
            faults: IntegrityFaults::default(),
        }
    }
}

impl IntegrityOptions {
    pub fn off() -> Self {
        IntegrityOptions {
            mode: IntegrityMode::Off,
            ..IntegrityOptions::default()
        }
    }

    pub fn validate(&self) -> Result<()> {
        if !(MIN_STRIPE_PAGES..=MAX_STRIPE_PAGES).contains(&self.stripe_pages) {
            return Err(Error::InvalidOption(format!(
                "stripe_pages must be from {MIN_STRIPE_PAGES} to {MAX_STRIPE_PAGES}, got {}",
                self.stripe_pages
            )));
        }
        if self.period.is_zero() || self.period > MAX_PERIOD {
            return Err(Error::InvalidOption(format!(
                "period must be above zero and at most {} s, got {:?}",
                MAX_PERIOD.as_secs(),
                self.period
            )));
        }
        if self.scrub_period > MAX_SCRUB_PERIOD {
            return Err(Error::InvalidOption(format!(
                "scrub_period must be at most {} s, got {:?}",
                MAX_SCRUB_PERIOD.as_secs(),
                self.scrub_period
            )));
        }
        Ok(())
    }
}
