//! Group commit across the processes of a store (FORMAT.md §14): the words of the writer
//! mapping through which sync senders of every process ask the leader (leader.rs) for a flush
//! and wait for it.
//!
//! Invariants
//! - `flushed` only grows, and every byte of the commit log below it is durable: only a flush
//!   that made `[.., to)` durable raises it to `to` (`advance_flushed`).
//! - `flush_requested` only grows; a sender raises it to its record's end before it waits.
//! - No wake-up is lost: both waits follow the wake word's protocol (wakeup/protocol.rs,
//!   model-checked there). A waiter announces itself on the word, fences, then looks at the
//!   value; the publisher stores the value, fences, then reads the word and wakes the sleepers.
//!
//! Crash behaviour: nothing to recover. A leader that dies leaves `flushed` where its last
//! flush put it (every byte below it durable) and requests above it, which the next leader
//! serves: its first act is a flush of the whole log (leader.rs). A waiter that dies leaves its
//! announcement, which costs one needless wake-up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::layout::at;
use super::WriterShm;
use crate::wakeup::{announce, wait_on, WordAt};

impl WriterShm {
    fn u64_word(&self, pos: usize) -> Option<&AtomicU64> {
        self.tables().word(pos).ok()
    }

    fn load_word(&self, pos: usize) -> u64 {
        self.u64_word(pos)
            .map_or(0, |a| u64::from_be(a.load(Ordering::Acquire)))
    }

    /// Raises the big-endian word at `pos` to `to` if it is lower; whether it changed.
    fn raise_word(&self, pos: usize, to: u64) -> bool {
        let Some(a) = self.u64_word(pos) else {
            return false;
        };
        let mut cur = a.load(Ordering::Acquire);
        while u64::from_be(cur) < to {
            match a.compare_exchange_weak(cur, to.to_be(), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
        false
    }

    /// Everything below it is durable, whichever process flushed it.
    pub fn flushed(&self) -> u64 {
        self.load_word(at::FLUSHED)
    }

    /// The highest end a sync sender asked to be made durable.
    pub fn flush_requested(&self) -> u64 {
        self.load_word(at::FLUSH_REQUESTED)
    }

    /// After a flush made every byte below `to` durable: raises `flushed` and wakes the sync
    /// senders of every process that wait on it.
    pub fn advance_flushed(&self, to: u64) {
        if self.raise_word(at::FLUSHED, to) {
            announce(&WordAt::new(&self.region, at::FLUSHED_WAKE));
        }
    }

    /// A sync sender: asks the leader to make every byte below `end` durable.
    pub fn request_flush(&self, end: u64) {
        if self.flushed() < end && self.raise_word(at::FLUSH_REQUESTED, end) {
            announce(&WordAt::new(&self.region, at::REQUEST_WAKE));
        }
    }

    /// A sync sender: waits until every byte below `end` is durable, `deadline` passes or
    /// `give_up()` says so (it is asked at every wake-up, and at least every `nap`). Returns
    /// whether `end` is durable.
    pub fn wait_flushed(
        &self,
        end: u64,
        deadline: Instant,
        nap: Duration,
        give_up: impl Fn() -> bool,
    ) -> bool {
        let word = WordAt::new(&self.region, at::FLUSHED_WAKE);
        wait_on(&word, Some(deadline), nap, || {
            self.flushed() >= end || give_up()
        });
        self.flushed() >= end
    }

    /// The leader's flush thread: sleeps until a flush is requested past `flushed`, `stop()`
    /// says so, or `nap` passes. Returns whether a flush is requested.
    pub fn wait_for_request(&self, nap: Duration, stop: impl Fn() -> bool) -> bool {
        let pending = || self.flush_requested() > self.flushed();
        let word = WordAt::new(&self.region, at::REQUEST_WAKE);
        wait_on(&word, Some(Instant::now() + nap), nap, || {
            pending() || stop()
        });
        pending()
    }

    /// Wakes the leader's flush thread from `wait_for_request` once its stop flag is set (the
    /// flag is the data its `stop()` looks at).
    pub fn wake_flush_thread(&self) {
        announce(&WordAt::new(&self.region, at::REQUEST_WAKE));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::shared::layout::Capacity;
    use crate::shared::Initial;

    fn build(root: &std::path::Path) -> WriterShm {
        let initial = Initial {
            log_end: 1000,
            dispatched: 1000,
            flushed: 400,
            ..Initial::default()
        };
        WriterShm::create(root, Capacity::for_counts(0, 0), &initial, 0o700, 0o600).unwrap()
    }

    #[test]
    fn words_only_grow() {
        let dir = tempfile::tempdir().unwrap();
        let shm = build(dir.path());
        assert_eq!((shm.flushed(), shm.flush_requested()), (400, 0));
        shm.request_flush(300);
        assert_eq!(shm.flush_requested(), 0, "already durable: nothing asked");
        shm.request_flush(900);
        shm.request_flush(700);
        assert_eq!(shm.flush_requested(), 900);
        shm.advance_flushed(800);
        shm.advance_flushed(500);
        assert_eq!(shm.flushed(), 800);
    }

    #[test]
    fn a_waiting_sender_is_woken_by_the_flush_not_by_its_nap() {
        let dir = tempfile::tempdir().unwrap();
        let shm = Arc::new(build(dir.path()));
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let shm = Arc::clone(&shm);
            std::thread::spawn(move || {
                shm.request_flush(900);
                tx.send(()).unwrap();
                // Neither the nap nor the deadline can end the wait within the test's life.
                let far = Instant::now() + Duration::from_secs(3600);
                shm.wait_flushed(900, far, Duration::from_secs(3600), || false)
            })
        };
        rx.recv().unwrap();
        // The leader's side: a request is pending, so its wait returns at once.
        assert!(shm.wait_for_request(Duration::from_secs(3600), || false));
        shm.advance_flushed(950);
        assert!(waiter.join().unwrap());
        assert!(!shm.wait_for_request(Duration::ZERO, || false));
    }
}
