//! Notifier: wakes the threads waiting for new data in a consume queue (a pull consumer's
//! `poll`, a push consumer's poller), in this process and, through the store's wake-up word,
//! read-only followers in other processes.
//!
//! Hand-off. A consumer that has been idle for a while gains nothing from waiting until the
//! producer's time slice ends: there is no batch to build up, only latency. So after waking
//! local waiters of which the latest went to sleep at least [`HANDOFF_IDLE`] ago, the waking
//! thread yields its CPU once. When the woken thread shares that CPU (the common case on small
//! machines, where the scheduler packs a producer and its consumer together), it runs at once
//! instead of after the producer next blocks, which on a virtual machine can be a timer set-up
//! of ten microseconds or more later. When it runs elsewhere the yield returns at once. A
//! consumer that only just went to sleep (it keeps up with a fast producer) is not handed the
//! CPU: it is woken as before and takes what has piled up in one read, so throughput is not
//! traded for a context switch per message.
//!
//! Invariant: no wake-up is lost. A waiter registers (`waiters`) and issues a SeqCst fence
//! before its last look at the data; a notifier publishes the data, issues a SeqCst fence and
//! reads `waiters`; and the waiter re-checks under the lock the notifier takes before it
//! signals.
//!
//! Model-checked with loom (`loom_` tests below, docs/reliability.md#model-checking): waiters
//! with no timeout and a publisher, every interleaving ending with each waiter woken (a lost
//! wake-up is a deadlock there). Followers of other processes are the wake word's model.

use std::sync::{Arc, OnceLock};

use crate::util::loom_sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use crate::util::loom_sync::{yield_now, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::wakeup::WakeWord;

/// How long the latest local waiter must have slept for a wake-up to hand it the CPU.
pub const HANDOFF_IDLE: Duration = Duration::from_micros(50);

/// See the module doc.
#[derive(Debug)]
pub struct Notifier {
    seq: Mutex<u64>,
    cv: Condvar,
    waiters: AtomicUsize,
    remote: OnceLock<Arc<WakeWord>>,
    /// When the latest waiter went to sleep, in nanoseconds after `epoch`.
    slept_at: AtomicU64,
    epoch: Instant,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier {
            seq: Mutex::new(0),
            cv: Condvar::new(),
            waiters: AtomicUsize::new(0),
            remote: OnceLock::new(),
            slept_at: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl Notifier {
    /// Wakes every waiter (cheap when nobody waits).
    pub fn notify(&self) {
        self.notify_via(|wake| wake());
    }

    /// Also wakes followers of other processes through `word` from now on (writer stores).
    pub fn set_remote(&self, word: Arc<WakeWord>) {
        let _ = self.remote.set(word);
    }

    /// `notify`, the wake-up itself (a lock, a futex call, perhaps the hand-off yield) run by
    /// `via` when there is a waiter to wake: a caller holding Python's GIL releases it around
    /// the call, so that a woken consumer thread does not find the GIL taken.
    pub fn notify_via(&self, via: impl FnOnce(&(dyn Fn() + Sync))) {
        fence(Ordering::SeqCst);
        let local = self.waiters.load(Ordering::SeqCst) != 0;
        // Followers of other processes: a wake-up only if one said it sleeps.
        let remote = self.remote.get().filter(|w| w.publish());
        if !local && remote.is_none() {
            return;
        }
        via(&|| {
            if local {
                self.wake_all();
            }
            if let Some(w) = remote {
                w.wake();
            }
        });
    }

    fn wake_all(&self) {
        {
            let mut s = self.seq.lock().unwrap_or_else(|p| p.into_inner());
            *s += 1;
        }
        // Notified after the lock is released, so a woken waiter does not block on it at once.
        // No wake-up is lost: the waiter re-checks `ready()` under the lock before sleeping.
        self.cv.notify_all();
        if self.handoff_due() {
            yield_now();
        }
    }

    /// Whether a wake-up now hands the CPU over: the latest waiter has slept long enough.
    fn handoff_due(&self) -> bool {
        // Loom replays each interleaving and needs the same choices every time: with no clock
        // of its own there, every wake-up hands off (the yield changes only who runs next).
        cfg!(all(test, loom)) || self.idle_for() >= HANDOFF_IDLE
    }

    /// How long ago the latest waiter went to sleep.
    fn idle_for(&self) -> Duration {
        let slept = Duration::from_nanos(self.slept_at.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(slept)
    }

    /// Blocks until `ready()` is true or `timeout` passes (`None`: forever). Returns `ready()`.
    pub fn wait_until(&self, timeout: Option<Duration>, mut ready: impl FnMut() -> bool) -> bool {
        if ready() {
            return true;
        }
        let now = Instant::now();
        let deadline = timeout.map(|t| now + t);
        let since = u64::try_from(now.duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        self.slept_at.store(since, Ordering::Relaxed);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let mut guard = self.seq.lock().unwrap_or_else(|p| p.into_inner());
        let result = loop {
            if ready() {
                break true;
            }
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => break false,
                },
                None => Duration::from_secs(3600),
            };
            guard = match self.cv.wait_timeout(guard, wait) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        };
        drop(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

#[cfg(test)]
#[cfg(not(loom))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::thread;

    /// A waiter on `n` until `flag` is set; returns once it is registered.
    fn waiter(n: &Arc<Notifier>, flag: &Arc<AtomicBool>) -> thread::JoinHandle<bool> {
        let (n2, f2) = (Arc::clone(n), Arc::clone(flag));
        let h = thread::spawn(move || {
            n2.wait_until(Some(Duration::from_secs(30)), || f2.load(Ordering::SeqCst))
        });
        while n.waiters.load(Ordering::SeqCst) == 0 {
            thread::yield_now();
        }
        h
    }

    #[test]
    fn a_waiter_that_just_went_to_sleep_is_not_handed_the_cpu_but_a_long_idle_one_is() {
        let n = Arc::new(Notifier::default());
        thread::sleep(Duration::from_millis(20)); // the notifier's clock has run a while
        let flag = Arc::new(AtomicBool::new(false));
        let before = Instant::now();
        let h = waiter(&n, &flag);
        // The idle time counts from the wait, not from the notifier's creation.
        assert!(n.idle_for() <= before.elapsed(), "idle {:?}", n.idle_for());
        thread::sleep(HANDOFF_IDLE * 4);
        assert!(n.handoff_due());
        flag.store(true, Ordering::SeqCst);
        n.notify();
        assert!(h.join().unwrap());
    }

    #[test]
    fn notify_wakes_every_waiter() {
        let n = Arc::new(Notifier::default());
        let flag = Arc::new(AtomicBool::new(false));
        let hs: Vec<_> = (0..3).map(|_| waiter(&n, &flag)).collect();
        flag.store(true, Ordering::SeqCst);
        n.notify();
        for h in hs {
            assert!(h.join().unwrap(), "a waiter timed out");
        }
        assert_eq!(n.waiters.load(Ordering::SeqCst), 0);
    }
}

/// Loom model of the notifier (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_`).
#[cfg(test)]
#[cfg(loom)]
mod loom_model {
    use loom::sync::atomic::AtomicU64;
    use loom::sync::Arc;

    use super::*;

    /// `waiters` threads wait, without a timeout, for the data a publisher then stores and
    /// notifies; the model ends only if every waiter is woken with the data there.
    fn no_wake_up_is_lost(waiters: usize) {
        let bound = (waiters > 1).then_some(4);
        crate::util::loom_sync::model(bound, move || {
            let n = Arc::new(Notifier::default());
            let data = Arc::new(AtomicU64::new(0));
            let hs: Vec<_> = (0..waiters)
                .map(|_| {
                    let (n, data) = (Arc::clone(&n), Arc::clone(&data));
                    loom::thread::spawn(move || {
                        n.wait_until(None, || data.load(Ordering::Acquire) != 0)
                    })
                })
                .collect();
            // As the reput publishes a dispatched offset, then notifies.
            data.store(1, Ordering::Release);
            n.notify();
            for h in hs {
                assert!(h.join().unwrap(), "woken without the data");
            }
            assert_eq!(n.waiters.load(Ordering::SeqCst), 0);
        });
    }

    #[test]
    fn loom_one_waiter_is_never_left_asleep() {
        no_wake_up_is_lost(1);
    }

    #[test]
    fn loom_two_waiters_are_never_left_asleep() {
        no_wake_up_is_lost(2);
    }
}
