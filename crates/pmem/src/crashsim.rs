//! The crash simulator: what a power failure could leave of a region.
//!
//! `CrashSim` is a [`PersistObserver`] that keeps two images of the region:
//! `current`, what the program sees, and `persisted`, what is guaranteed to
//! survive a power failure. Every store is split into aligned 8-byte words
//! (the media's unit of atomicity) and queued on its cache line. A flush
//! marks the words queued on a line so far; the next fence moves them into
//! `persisted`. Words stored after a line's flush stay pending.
//!
//! A crash at a point of the program leaves `persisted` plus, independently
//! for every line with pending words, any prefix of them in program order
//! (the line was written back at some moment, carrying every store made to it
//! until then). That is exactly the media model in the crate docs; lines are
//! independent because nothing orders write-backs of different lines except
//! a fence.
//!
//! At every fence (before it takes effect, so flushed-but-unfenced lines are
//! still open) and whenever [`CrashSim::crash_now`] is called, the installed
//! hook receives a [`CrashPoint`] from which it can build any of those
//! images. The explorer in the engine's tests uses it. Use it with one thread
//! driving the store: the hook runs inside the fence, on that thread.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use parking_lot::Mutex;

use crate::{PersistObserver, CACHE_LINE_BYTES};

const WORD_BYTES: u64 = 8;

type Hook = Box<dyn FnMut(&CrashPoint<'_>) + Send>;

pub struct CrashSim {
    state: Mutex<SimState>,
    hook: Mutex<Option<Hook>>,
}

struct SimState {
    current: Vec<u8>,
    persisted: Vec<u8>,
    /// Lines with words not yet persisted, by line number.
    pending: BTreeMap<u64, Line>,
    fences: u64,
}

#[derive(Clone, Default)]
struct Line {
    /// (word offset, new content), in program order.
    words: Vec<(u64, [u8; 8])>,
    /// How many of `words` the last flush of this line covered.
    flushed: usize,
}

/// The state of the region at a crash point: `persisted` plus, per pending
/// line, a choice of how many of its words reached the media.
pub struct CrashPoint<'a> {
    /// Fences executed before this point.
    pub fence: u64,
    persisted: &'a [u8],
    lines: Vec<(u64, &'a Line)>,
}

impl CrashSim {
    /// A simulator for a region whose persisted contents are `initial`.
    pub fn new(initial: Vec<u8>) -> CrashSim {
        CrashSim {
            state: Mutex::new(SimState {
                persisted: initial.clone(),
                current: initial,
                pending: BTreeMap::new(),
                fences: 0,
            }),
            hook: Mutex::new(None),
        }
    }

    /// Installs the function called at every crash point.
    pub fn set_hook(&self, hook: impl FnMut(&CrashPoint<'_>) + Send + 'static) {
        *self.hook.lock() = Some(Box::new(hook));
    }

    /// Removes the hook (returning it), so that no more crash points fire.
    pub fn clear_hook(&self) {
        *self.hook.lock() = None;
    }

    /// A crash point here and now (e.g. at the end of a workload).
    pub fn crash_now(&self) {
        self.fire_hook();
    }

    /// The program's view of the region, for checking the simulator itself.
    pub fn current(&self) -> Vec<u8> {
        self.state.lock().current.clone()
    }

    /// Lines with pending words right now.
    pub fn pending_lines(&self) -> usize {
        self.state.lock().pending.len()
    }

    fn fire_hook(&self) {
        let Some(mut hook) = self.hook.lock().take() else {
            return;
        };
        {
            let state = self.state.lock();
            let point = CrashPoint {
                fence: state.fences,
                persisted: &state.persisted,
                lines: state
                    .pending
                    .iter()
                    .map(|(line, words)| (*line, words))
                    .collect(),
            };
            hook(&point);
        }
        let mut slot = self.hook.lock();
        if slot.is_none() {
            *slot = Some(hook);
        }
    }
}

impl PersistObserver for CrashSim {
    fn on_store(&self, offset: u64, bytes: &[u8]) {
        let mut state = self.state.lock();
        let end = offset + bytes.len() as u64;
        assert!(
            end <= state.current.len() as u64,
            "store past the simulated region"
        );
        state.current[offset as usize..end as usize].copy_from_slice(bytes);
        let mut word = offset & !(WORD_BYTES - 1);
        while word < end {
            let content: [u8; 8] = state.current[word as usize..(word + WORD_BYTES) as usize]
                .try_into()
                .unwrap();
            state
                .pending
                .entry(word / CACHE_LINE_BYTES)
                .or_default()
                .words
                .push((word, content));
            word += WORD_BYTES;
        }
    }

    fn on_flush(&self, offset: u64, len: u64) {
        let mut state = self.state.lock();
        if len == 0 {
            return;
        }
        let first = offset / CACHE_LINE_BYTES;
        let last = (offset + len - 1) / CACHE_LINE_BYTES;
        for (_, line) in state.pending.range_mut(first..=last) {
            line.flushed = line.words.len();
        }
    }

    fn on_fence(&self) {
        self.fire_hook();
        let mut state = self.state.lock();
        state.fences += 1;
        let SimState {
            pending, persisted, ..
        } = &mut *state;
        pending.retain(|_, line| {
            for (word, content) in line.words.drain(..line.flushed) {
                persisted[word as usize..(word + WORD_BYTES) as usize].copy_from_slice(&content);
            }
            line.flushed = 0;
            !line.words.is_empty()
        });
    }

    fn on_grow(&self, new_len: u64) {
        let mut state = self.state.lock();
        state.current.resize(new_len as usize, 0);
        state.persisted.resize(new_len as usize, 0);
    }
}

impl CrashPoint<'_> {
    /// Lines with pending words.
    pub fn pending_lines(&self) -> usize {
        self.lines.len()
    }

    /// For each pending line, how many prefixes it has (words + 1).
    pub fn choices(&self) -> Vec<usize> {
        self.lines
            .iter()
            .map(|(_, line)| line.words.len() + 1)
            .collect()
    }

    /// How many distinct images this point allows (saturating).
    pub fn image_count(&self) -> u128 {
        self.choices()
            .iter()
            .fold(1u128, |product, n| product.saturating_mul(*n as u128))
    }

    /// Every prefix choice, for exhaustive exploration (there are
    /// `image_count()` of them: check it first).
    pub fn all_prefixes(&self) -> Vec<Vec<usize>> {
        let choices = self.choices();
        let mut all = Vec::new();
        let mut prefix = vec![0; choices.len()];
        loop {
            all.push(prefix.clone());
            // Count in a mixed radix: line i has choices[i] digits.
            let mut i = 0;
            loop {
                if i == prefix.len() {
                    return all;
                }
                prefix[i] += 1;
                if prefix[i] < choices[i] {
                    break;
                }
                prefix[i] = 0;
                i += 1;
            }
        }
    }

    /// The image in which line `i` kept the first `prefix[i]` of its
    /// pending words.
    pub fn image(&self, prefix: &[usize]) -> Vec<u8> {
        assert_eq!(prefix.len(), self.lines.len());
        let mut image = self.persisted.to_vec();
        for ((_, line), &keep) in self.lines.iter().zip(prefix) {
            for (word, content) in &line.words[..keep] {
                image[*word as usize..(*word + WORD_BYTES) as usize].copy_from_slice(content);
            }
        }
        image
    }

    /// The pending lines and the choice made for each, for failure reports.
    pub fn describe(&self, prefix: &[usize]) -> String {
        let mut text = format!("fence {}: {} pending line(s)", self.fence, self.lines.len());
        for ((line, words), keep) in self.lines.iter().zip(prefix) {
            let _ = write!(
                text,
                "\n  line {:#x}: kept {keep} of {} word(s) ({} flushed)",
                line * CACHE_LINE_BYTES,
                words.words.len(),
                words.flushed
            );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_images(point: &CrashPoint<'_>) -> Vec<Vec<u8>> {
        point
            .all_prefixes()
            .iter()
            .map(|prefix| point.image(prefix))
            .collect()
    }

    #[test]
    fn unflushed_stores_may_or_may_not_survive_in_program_order() {
        let sim = CrashSim::new(vec![0; 128]);
        sim.on_store(0, &[1; 8]);
        sim.on_store(8, &[2; 8]);
        sim.on_store(64, &[3; 8]);
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        sim.set_hook(move |point| sink.lock().extend(all_images(point)));
        sim.crash_now();
        let images = seen.lock().clone();
        // Line 0 has 3 prefixes, line 1 has 2: 6 images.
        assert_eq!(images.len(), 6);
        // Never the second word of line 0 without the first.
        assert!(images.iter().all(|image| !(image[8] == 2 && image[0] == 0)));
        assert!(images.iter().any(|image| image[0] == 0 && image[64] == 3));
    }

    #[test]
    fn flush_then_fence_persists_only_what_was_flushed() {
        let sim = CrashSim::new(vec![0; 128]);
        sim.on_store(0, &[1; 8]);
        sim.on_flush(0, 8);
        sim.on_store(8, &[2; 8]);
        sim.on_fence();
        assert_eq!(sim.pending_lines(), 1);
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        sim.set_hook(move |point| sink.lock().extend(all_images(point)));
        sim.crash_now();
        let images = seen.lock().clone();
        assert_eq!(images.len(), 2);
        assert!(
            images.iter().all(|image| image[0] == 1),
            "flushed+fenced word must survive"
        );
        assert!(images.iter().any(|image| image[8] == 0));
    }

    #[test]
    fn partial_word_stores_keep_the_rest_of_the_word() {
        let sim = CrashSim::new(vec![9; 64]);
        sim.on_store(3, &[1, 2]);
        sim.on_flush(0, 64);
        sim.on_fence();
        assert_eq!(sim.pending_lines(), 0);
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        sim.set_hook(move |point| sink.lock().push(point.image(&[])));
        sim.crash_now();
        assert_eq!(&seen.lock()[0][..8], &[9, 9, 9, 1, 2, 9, 9, 9]);
    }

    #[test]
    fn growth_extends_both_images_with_zeros() {
        let sim = CrashSim::new(vec![5; 64]);
        sim.on_grow(128);
        sim.on_store(100, &[7]);
        assert_eq!(sim.current().len(), 128);
        assert_eq!(sim.current()[100], 7);
        assert_eq!(sim.current()[64], 0);
    }
}
