//! The wake word's protocol: the writer's and a follower's steps on the word, over any
//! [`Word`] (the mapped page in production, an emulated futex in the loom model below).
//!
//! Invariant: no wake-up is lost. The follower sets `SLEEPER`, issues a SeqCst fence, looks
//! for data, and sleeps only while the word still holds what it set (compared and slept
//! atomically). The writer publishes data, issues a SeqCst fence (`Notifier::notify_via`),
//! then reads the word; if `SLEEPER` is set it changes the word and wakes the sleepers. The
//! two fences order the pairs: either the writer sees the bit, or the follower sees the data;
//! a change of the word after the follower's look makes its sleep return at once.

use std::io;
use std::time::Duration;

use crate::util::loom_sync::atomic::{fence, Ordering};

/// Bit 0 of the word: a follower may be asleep on it. Bits 1 to 31 count wake-ups.
pub(crate) const SLEEPER: u32 = 1;

/// What the protocol needs of a shared 32-bit word.
pub(crate) trait Word {
    /// The word, read with acquire ordering (`None`: not readable).
    fn load(&self) -> Option<u32>;
    /// A SeqCst compare-exchange: `Ok(previous)` if it held `current`, else `Err(actual)`
    /// (`None`: not writable).
    fn compare_exchange(&self, current: u32, new: u32) -> Option<Result<u32, u32>>;
    /// Sleeps while the word holds `expected` (compared and put to sleep atomically), `timeout`
    /// at most; returns early on `wake` or a signal. `Err`: this word cannot be slept on.
    fn sleep(&self, expected: u32, timeout: Duration) -> io::Result<()>;
    /// Wakes every thread asleep on the word (best effort).
    fn wake(&self);
}

/// Writer, after publishing and a SeqCst fence: whether a follower may be asleep, having
/// changed the word (count up, `SLEEPER` cleared) so that none goes back to sleep on the old
/// value. The caller then calls `wake`.
pub(crate) fn publish(word: &impl Word) -> bool {
    let Some(mut cur) = word.load() else {
        return false;
    };
    while cur & SLEEPER != 0 {
        // (cur | 1) + 1 carries the set bit into the count.
        match word.compare_exchange(cur, cur.wrapping_add(1)) {
            Some(Ok(_)) => return true,
            Some(Err(actual)) => cur = actual,
            None => return false,
        }
    }
    false
}

/// The outcome of one [`look`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// The wait is over: `ready()`'s last answer.
    Done(bool),
    /// Slept, or the word changed under the look: look again (after checking the deadline).
    Again,
}

/// Follower: one look, `ready()` having been false just before. Sets `SLEEPER`, looks for
/// data once more, then sleeps `nap` at most while the word still holds what it set.
pub(crate) fn look(word: &impl Word, nap: Duration, ready: &mut impl FnMut() -> bool) -> Look {
    let Some(seen) = word.load() else {
        return Look::Done(ready());
    };
    if seen & SLEEPER == 0 {
        match word.compare_exchange(seen, seen | SLEEPER) {
            Some(Ok(_)) => {}
            // The writer changed it meanwhile: look again.
            Some(Err(_)) => return Look::Again,
            None => return Look::Done(ready()),
        }
    }
    // Pairs with the writer's fence between publishing and reading the word.
    fence(Ordering::SeqCst);
    if ready() {
        return Look::Done(true);
    }
    if word.sleep(seen | SLEEPER, nap).is_err() {
        // No futex on this word: a short sleep instead.
        crate::util::loom_sync::sleep(nap.min(Duration::from_millis(2)));
    }
    Look::Again
}

/// Loom model of the protocol (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_`).
#[cfg(test)]
#[cfg(loom)]
mod loom_model {
    use loom::sync::atomic::{AtomicU32, AtomicU64};
    use loom::sync::{Arc, Condvar, Mutex};

    use super::*;

    /// A futex: the word, and a queue whose lock makes "compare, then sleep" atomic with
    /// respect to `wake`, as the kernel's hash-bucket lock does. Loom does not model the
    /// timeout: a follower nobody wakes is a deadlock.
    #[derive(Default)]
    struct Futex {
        word: AtomicU32,
        queue: Mutex<()>,
        cv: Condvar,
    }

    impl Word for Futex {
        fn load(&self) -> Option<u32> {
            Some(self.word.load(Ordering::Acquire))
        }

        fn compare_exchange(&self, current: u32, new: u32) -> Option<Result<u32, u32>> {
            Some(
                self.word
                    .compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst),
            )
        }

        fn sleep(&self, expected: u32, _timeout: Duration) -> io::Result<()> {
            let queued = self.queue.lock().unwrap();
            if self.word.load(Ordering::Relaxed) == expected {
                drop(self.cv.wait(queued).unwrap());
            }
            Ok(())
        }

        fn wake(&self) {
            let _queued = self.queue.lock().unwrap();
            self.cv.notify_all();
        }
    }

    /// `followers` threads wait, with no deadline, for the data a writer then publishes as
    /// `Notifier::notify_via` does: store, SeqCst fence, `publish`, `wake`.
    fn no_wake_up_is_lost(followers: usize) {
        let bound = (followers > 1).then_some(4);
        crate::util::loom_sync::model(bound, move || {
            let word = Arc::new(Futex::default());
            let data = Arc::new(AtomicU64::new(0));
            let hs: Vec<_> = (0..followers)
                .map(|_| {
                    let (word, data) = (Arc::clone(&word), Arc::clone(&data));
                    loom::thread::spawn(move || {
                        let mut ready = || data.load(Ordering::Acquire) != 0;
                        while !ready() {
                            if let Look::Done(r) = look(&*word, Duration::MAX, &mut ready) {
                                return r;
                            }
                        }
                        true
                    })
                })
                .collect();
            data.store(1, Ordering::Release);
            fence(Ordering::SeqCst);
            if publish(&*word) {
                word.wake();
            }
            for h in hs {
                assert!(h.join().unwrap(), "woken without the data");
            }
        });
    }

    #[test]
    fn loom_a_follower_is_never_left_asleep() {
        no_wake_up_is_lost(1);
    }

    #[test]
    fn loom_two_followers_are_never_left_asleep() {
        no_wake_up_is_lost(2);
    }
}
