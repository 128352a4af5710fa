//! What wakes the timer engine's thread: an arrival (a put appended a timer or a delayed
//! message, store/write.rs), or a stop.
//!
//! Two ways to sleep, one type:
//! - One writer process: a condvar; the puts of this process announce on it.
//! - Shared writers (once `share` gave it the writer mapping): the mapping's timer wake word
//!   (shared/timer_wake.rs). The put of any process counts its arrival there and wakes the
//!   word, so the leader's thread sleeps on the word until the count moves, a stop, or its nap
//!   ends: no process's arrival waits for a nap.
//!
//! Invariants
//! - An arrival announced after `take_announced` ends the next `nap` at once (local: the
//!   `announced` flag checked under the lock the condvar waits with; shared: the count
//!   compared with the one `take_announced` saw, under the wake word's protocol).
//! - An arrival is announced after its record's append: a look at the log after
//!   `take_announced` said so finds it (once dispatched).
//! - `sleeping_until` is set only while the thread sleeps with no arrival pending (a test hook).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::shared::WriterShm;

/// See the module doc.
#[derive(Debug, Default)]
pub(in crate::store) struct Wake {
    state: Mutex<WakeState>,
    cv: Condvar,
    /// The writer mapping of shared writers.
    shared: OnceLock<Arc<WriterShm>>,
}

#[derive(Debug, Default)]
struct WakeState {
    stopping: bool,
    /// This process announced an arrival since the thread last took them.
    announced: bool,
    /// The mapping's arrival count when the thread last took the announcements.
    seen: u64,
    /// While the thread sleeps: the store-clock time it sleeps until.
    sleeping_until: Option<i64>,
}

impl Wake {
    /// Shared writers: arrivals are announced to, and waited for on, `shm` from now on.
    pub(in crate::store) fn share(&self, shm: Arc<WriterShm>) {
        let seen = shm.timer_arrivals();
        if self.shared.set(shm).is_ok() {
            self.lock().seen = seen;
        }
    }

    /// A timer or delayed message was appended.
    pub(in crate::store) fn arrival(&self) {
        self.lock().announced = true;
        self.cv.notify_all();
        if let Some(shm) = self.shared.get() {
            shm.announce_timer();
        }
    }

    pub(in crate::store) fn stop(&self) {
        self.lock().stopping = true;
        self.cv.notify_all();
        if let Some(shm) = self.shared.get() {
            shm.wake_timer_thread();
        }
    }

    /// Undoes `stop`, before the thread is started again.
    pub(in crate::store) fn rearm(&self) {
        self.lock().stopping = false;
    }

    /// Whether an arrival was announced, by any process, since the last call.
    pub(in crate::store) fn take_announced(&self) -> bool {
        let mut s = self.lock();
        let local = std::mem::take(&mut s.announced);
        let remote = match self.shared.get() {
            Some(shm) => {
                let count = shm.timer_arrivals();
                let moved = count != s.seen;
                s.seen = count;
                moved
            }
            None => false,
        };
        local || remote
    }

    /// True once `stop` was called (and not undone).
    pub(in crate::store) fn stopping(&self) -> bool {
        self.lock().stopping
    }

    /// While the thread sleeps with nothing announced: the time it sleeps until.
    pub(in crate::store) fn sleeping_until(&self) -> Option<i64> {
        self.lock().sleeping_until
    }

    /// Sleeps for `nap` (until `until` by the store's clock) unless stopped or an arrival is
    /// announced; false once stopped.
    pub(in crate::store) fn nap(&self, nap: Duration, until: i64) -> bool {
        let mut s = self.lock();
        if !s.announced {
            s.sleeping_until = Some(until);
        }
        let mut s = match self.shared.get() {
            None => {
                self.cv
                    .wait_timeout_while(s, nap, |s| !s.stopping && !s.announced)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            Some(shm) => {
                let seen = s.seen;
                drop(s);
                // This process's own arrivals move the count too: one word to sleep on.
                shm.wait_timer_arrival(seen, nap, || self.lock().stopping);
                self.lock()
            }
        };
        s.sleeping_until = None;
        !s.stopping
    }

    fn lock(&self) -> MutexGuard<'_, WakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
