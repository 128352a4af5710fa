//! The timer engine's wake-up across processes (FORMAT.md §14): the put hooks of every writer
//! process count the timers and delayed messages they store in `timer arrivals` and wake the
//! thread that delivers them (in the leader, store/timer/), which sleeps on the word
//! `timer wake` until the count moves, instead of looking at the queues now and then.
//!
//! Invariants
//! - The count only moves up (wrapping after 2^64 announcements, which never compares equal
//!   to a count a sleeper saw in practice).
//! - No wake-up is lost: the sleeper and the announcer follow the wake word's protocol
//!   (wakeup/protocol.rs, model-checked there): the announcer raises the count, fences, then
//!   reads the word; the sleeper says it sleeps, fences, then compares the count with the one
//!   it saw before its last look at the queues.
//!
//! Crash behaviour: nothing to recover. An announcer that dies between its count and its append
//! costs the deliverer one needless look.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::layout::at;
use super::WriterShm;
use crate::wakeup::{announce, wait_on, WordAt};

impl WriterShm {
    /// How many timers the hooks of every process announced (see the module doc).
    pub fn timer_arrivals(&self) -> u64 {
        self.tables()
            .atomic(at::TIMER_ARRIVALS)
            .map_or(0, |a| u64::from_be(a.load(Ordering::Acquire)))
    }

    /// A put hook, before it stores a timer or delayed message: counts it and wakes the
    /// deliverer, in whichever process it sleeps.
    pub fn announce_timer(&self) {
        if let Some(a) = self.tables().atomic(at::TIMER_ARRIVALS) {
            let mut cur = a.load(Ordering::Acquire);
            loop {
                let next = u64::from_be(cur).wrapping_add(1).to_be();
                match a.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(actual) => cur = actual,
                }
            }
        }
        self.wake_timer_thread();
    }

    /// The deliverer: sleeps for `nap` at most, until the count differs from `seen` or
    /// `done()` says so (asked at every wake-up). Returns whether the count moved.
    pub fn wait_timer_arrival(&self, seen: u64, nap: Duration, done: impl Fn() -> bool) -> bool {
        let word = WordAt::new(&self.region, at::TIMER_WAKE);
        wait_on(&word, Some(Instant::now() + nap), nap, || {
            self.timer_arrivals() != seen || done()
        });
        self.timer_arrivals() != seen
    }

    /// Wakes the deliverer from `wait_timer_arrival` once what its `done()` looks at changed.
    pub fn wake_timer_thread(&self) {
        announce(&WordAt::new(&self.region, at::TIMER_WAKE));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::shared::layout::Capacity;
    use crate::shared::Initial;

    #[test]
    fn a_sleeping_deliverer_is_woken_by_an_announcement_not_by_its_nap() {
        let dir = tempfile::tempdir().unwrap();
        let shm = Arc::new(
            WriterShm::create(
                dir.path(),
                Capacity::for_counts(0, 0),
                &Initial::default(),
                0o700,
                0o600,
            )
            .unwrap(),
        );
        assert_eq!(shm.timer_arrivals(), 0);
        let seen = shm.timer_arrivals();
        let sleeper = {
            let shm = Arc::clone(&shm);
            // Only the announcement can end this wait within the test's life.
            std::thread::spawn(move || {
                shm.wait_timer_arrival(seen, Duration::from_secs(3600), || false)
            })
        };
        shm.announce_timer();
        assert!(sleeper.join().unwrap());
        assert_eq!(shm.timer_arrivals(), 1);
        assert!(!shm.wait_timer_arrival(1, Duration::ZERO, || false));
    }
}
