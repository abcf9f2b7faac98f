//! The signal between writers and a thread that keeps a reserve full (the
//! free blocks of a data file, the free segments of the collections'
//! operation log): a writer whose claim leaves the reserve low asks, the
//! thread waits for asks and refills, and stops when told. While an ask is
//! pending, further asks cost one atomic swap, not a lock.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Condvar, Mutex};

#[derive(Default)]
pub struct RefillSignal {
    /// An ask the thread has not taken yet.
    pending: AtomicBool,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    refill: bool,
    stop: bool,
}

impl RefillSignal {
    pub fn new() -> RefillSignal {
        RefillSignal::default()
    }

    /// Asks the thread for a refill (once, however many ask before it
    /// takes the request).
    pub fn request(&self) {
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        self.state.lock().refill = true;
        self.wake.notify_one();
    }

    /// For the thread: waits for an ask and takes it; false once
    /// [`RefillSignal::stop`] was called (the thread ends).
    pub fn wait(&self) -> bool {
        let mut state = self.state.lock();
        while !state.refill && !state.stop {
            self.wake.wait(&mut state);
        }
        if state.stop {
            return false;
        }
        state.refill = false;
        drop(state);
        // Asks from now on are new: the refill about to run may not cover
        // what they claim.
        self.pending.store(false, Ordering::Release);
        true
    }

    /// Ends the thread's wait (at once, or after the refill it is running).
    pub fn stop(&self) {
        self.state.lock().stop = true;
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_wake_the_thread_once_each_until_stopped() {
        let signal = std::sync::Arc::new(RefillSignal::new());
        signal.request();
        signal.request();
        assert!(signal.wait(), "an ask is pending");
        let thread = {
            let signal = std::sync::Arc::clone(&signal);
            std::thread::spawn(move || {
                let mut refills = 0;
                while signal.wait() {
                    refills += 1;
                }
                refills
            })
        };
        signal.request();
        // The thread takes the ask before it is stopped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while signal.pending.load(Ordering::Acquire) {
            assert!(std::time::Instant::now() < deadline);
            std::thread::yield_now();
        }
        signal.stop();
        assert_eq!(thread.join().unwrap(), 1);
    }
}
