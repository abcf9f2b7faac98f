//! Asymmetric fences: a nearly free fence for a hot path, paired with an
//! expensive one for a rare path, that together order a store before a
//! load on both sides (Dekker's pattern).
//!
//! The heavy side is `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: on
//! return, every thread of the process has executed a full memory barrier
//! (or was not running, and a context switch is one). So the light side
//! needs only to stop the compiler from reordering. This is the scheme of
//! liburcu's membarrier flavour and folly's `asymmetric_thread_fence`.
//! Where the kernel refuses membarrier, both sides fall back to a real
//! SeqCst fence (correct, a little slower on the hot path).
//!
//! The integrity layer's writer gate uses it: every store announces itself
//! with a plain store and a light fence, and the rare refresh, after
//! clearing dirty marks, issues the heavy fence before reading the
//! announcements.

use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering};

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

const UNKNOWN: u8 = 0;
const EXPEDITED: u8 = 1;
const FALLBACK: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Registers the process for expedited membarrier once; the answer is
/// remembered. Call before the first light fence is relied on (the state
/// only ever moves from unknown to a final value, and a light fence taken
/// while it is unknown is a full fence).
pub fn init_asymmetric_fences() -> bool {
    match STATE.load(Ordering::Acquire) {
        EXPEDITED => return true,
        FALLBACK => return false,
        _ => {}
    }
    // SAFETY: a plain system call with integer arguments; registration
    // affects only this process.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    let state = if rc == 0 { EXPEDITED } else { FALLBACK };
    // Another thread may have raced us here; both reach the same verdict.
    STATE.store(state, Ordering::Release);
    state == EXPEDITED
}

/// The hot side: orders this thread's earlier stores before its later
/// loads, provided the other side uses [`heavy_fence`].
#[inline]
pub fn light_fence() {
    if STATE.load(Ordering::Relaxed) == EXPEDITED {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The rare side: on return, every light fence of every thread is as
/// good as a full one with respect to this call.
pub fn heavy_fence() {
    fence(Ordering::SeqCst);
    if STATE.load(Ordering::Acquire) == EXPEDITED {
        // SAFETY: as above; the process is registered (EXPEDITED).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_PRIVATE_EXPEDITED,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        };
        assert_eq!(rc, 0, "membarrier failed after registration succeeded");
    }
    fence(Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Dekker with asymmetric fences: never may both sides miss the
    /// other's store.
    #[test]
    fn a_light_and_a_heavy_fence_never_both_miss() {
        init_asymmetric_fences();
        for _ in 0..2000 {
            let flags = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
            let light = {
                let flags = flags.clone();
                std::thread::spawn(move || {
                    flags[0].store(1, Ordering::Relaxed);
                    light_fence();
                    flags[1].load(Ordering::Relaxed)
                })
            };
            flags[1].store(1, Ordering::Relaxed);
            heavy_fence();
            let heavy_saw = flags[0].load(Ordering::Relaxed);
            let light_saw = light.join().unwrap();
            assert!(
                heavy_saw == 1 || light_saw == 1,
                "both sides missed the other"
            );
        }
    }
}
