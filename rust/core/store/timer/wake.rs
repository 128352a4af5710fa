//! What wakes the timer engine's thread: an arrival a put hook announces (a timer or a delayed
//! message being stored, with its due time), or a stop.
//!
//! Two ways to sleep, one type:
//! - One writer process: a condvar; the hooks of this process announce on it.
//! - Shared writers (once `share` gave it the writer mapping): the mapping's timer wake word
//!   (shared/timer_wake.rs). The hook of any process counts its arrival there and wakes the
//!   word, so the leader's thread sleeps on the word until the count moves, a stop, or its nap
//!   ends: no process's arrival waits for a nap.
//!
//! Invariants
//! - An arrival announced after `take_announced` ends the next `nap` at once (local: the
//!   `announced` flag checked under the lock the condvar waits with; shared: the count
//!   compared with the one `take_announced` saw, under the wake word's protocol).
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
    /// The earliest due time announced by this process since the thread last took it.
    announced: Option<i64>,
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

    /// A timer or delayed message due at `due_ms` is being stored (before its append).
    pub(in crate::store) fn arrival(&self, due_ms: i64) {
        let mut s = self.lock();
        s.announced = Some(s.announced.map_or(due_ms, |a| a.min(due_ms)));
        drop(s);
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

    /// The arrivals since the last call: the earliest due time this process announced, or
    /// `now` when another process announced one (its due time is not known here).
    pub(in crate::store) fn take_announced(&self, now: i64) -> Option<i64> {
        let mut s = self.lock();
        let local = s.announced.take();
        let remote = match self.shared.get() {
            Some(shm) => {
                let count = shm.timer_arrivals();
                let moved = count != s.seen;
                s.seen = count;
                moved
            }
            None => false,
        };
        match (local, remote) {
            (_, true) => Some(local.map_or(now, |l| l.min(now))),
            (l, false) => l,
        }
    }

    /// While the thread sleeps with nothing announced: the time it sleeps until.
    pub(in crate::store) fn sleeping_until(&self) -> Option<i64> {
        self.lock().sleeping_until
    }

    /// Sleeps for `nap` (until `until` by the store's clock) unless stopped or an arrival is
    /// announced; false once stopped.
    pub(in crate::store) fn nap(&self, nap: Duration, until: i64) -> bool {
        let mut s = self.lock();
        if s.announced.is_none() {
            s.sleeping_until = Some(until);
        }
        let mut s = match self.shared.get() {
            None => {
                self.cv
                    .wait_timeout_while(s, nap, |s| !s.stopping && s.announced.is_none())
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
