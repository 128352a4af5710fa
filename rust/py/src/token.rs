//! `PollToken`: which of a push consumer's threads polls (one at a time), with take-over of a
//! holder stalled in a listener call.
//!
//! It is here, not in Python, for one reason: the stall watch. A waiter must look every `stall`
//! seconds whether the holder has been busy too long. In Python every such look wakes a thread
//! that must take the GIL, twenty times a second per idle consumer, and each time it lands
//! beside a message on its way to the listener, the delivering thread waits for the GIL behind
//! it (measured: the push path's p99 rose by about a third). Here the watcher wakes, looks and
//! sleeps again without the GIL; a waiter returns to Python only when it has taken the token
//! or `wake_all` asks every waiter to re-check its `keep_waiting`.
//!
//! Invariants
//! - At most one thread holds the token. A waiter takes it when it is free, or when its holder
//!   has been busy (in a listener call) for at least `stall`; the old holder then learns from
//!   `idle` that it lost it.
//! - While anyone waits, exactly one waiter is the watcher (timed waits) or is awake to become
//!   it: a watcher that stops waiting wakes another. The other waiters sleep until notified.
//! - `keep_waiting` is called with the GIL held, before a waiter first sleeps and after each
//!   `wake_all`; never from a timer wake-up.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::args::Float;
use crate::errors::InvalidConfigError;

#[derive(Debug, Default)]
struct State {
    holder: Option<ThreadId>,
    /// When the holder began its current listener call; `None` while it polls.
    busy_since: Option<Instant>,
    /// A waiter is on the timed watch.
    watched: bool,
    /// Bumped by `wake_all`: every waiter goes back to check `keep_waiting`.
    epoch: u64,
}

impl State {
    /// Whether a waiter may take the token at `now`.
    fn takeable(&self, now: Instant, stall: Duration) -> bool {
        match (self.holder, self.busy_since) {
            (None, _) => true,
            (Some(_), Some(since)) => now.saturating_duration_since(since) >= stall,
            (Some(_), None) => false,
        }
    }

    fn take(&mut self, me: ThreadId) {
        self.holder = Some(me);
        self.busy_since = None;
    }
}

/// See the module doc.
#[pyclass(frozen, module = "mqlite._core", name = "PollToken")]
#[derive(Debug)]
pub struct PyPollToken {
    state: Mutex<State>,
    cv: Condvar,
    stall: Duration,
}

impl PyPollToken {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves `State` consistent (plain field writes), so a panic
        // elsewhere while holding the lock cannot leave it half-updated.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps (without the GIL) until the token is taken by this thread (true) or `wake_all`
    /// moves the epoch past `epoch` (false).
    fn wait(&self, me: ThreadId, epoch: u64) -> bool {
        let mut s = self.lock();
        let mut watching = false;
        let taken = loop {
            let now = Instant::now();
            if s.takeable(now, self.stall) {
                s.take(me);
                break true;
            }
            if s.epoch != epoch {
                break false;
            }
            if !s.watched {
                s.watched = true;
                watching = true;
            }
            s = if watching {
                // Until the busy holder's stall is due, or one period while it polls (it may
                // start a listener call at any moment without telling anyone).
                let due = match s.busy_since.and_then(|since| since.checked_add(self.stall)) {
                    Some(at) => at.saturating_duration_since(now),
                    None => self.stall,
                };
                match self.cv.wait_timeout(s, due.max(Duration::from_micros(100))) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                }
            } else {
                self.cv.wait(s).unwrap_or_else(|p| p.into_inner())
            };
        };
        if watching {
            s.watched = false;
            drop(s);
            // A sleeping waiter takes the watch over (or the token, if it is free).
            self.cv.notify_one();
        }
        taken
    }
}

#[pymethods]
impl PyPollToken {
    #[new]
    fn new(stall: Float) -> PyResult<Self> {
        let stall = stall.0;
        let stall = Duration::try_from_secs_f64(stall)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                InvalidConfigError::new_err(format!(
                    "stall must be a positive number of seconds, got {stall}"
                ))
            })?;
        Ok(PyPollToken {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            stall,
        })
    }

    /// Waits for the token: True once held, False (without it) once ``keep_waiting()`` is
    /// false, which is checked before the first sleep and whenever ``wake_all`` is called.
    fn acquire(&self, py: Python<'_>, keep_waiting: &Bound<'_, PyAny>) -> PyResult<bool> {
        let me = thread::current().id();
        loop {
            let epoch = {
                let mut s = self.lock();
                if s.takeable(Instant::now(), self.stall) {
                    s.take(me);
                    return Ok(true);
                }
                s.epoch
            };
            if !keep_waiting.call0()?.is_truthy()? {
                return Ok(false);
            }
            if py.detach(|| self.wait(me, epoch)) {
                return Ok(true);
            }
        }
    }

    /// Every waiter re-checks its ``keep_waiting`` (the consumer is stopping).
    fn wake_all(&self) {
        self.lock().epoch += 1;
        self.cv.notify_all();
    }

    /// The holder starts a listener call and keeps the token meanwhile (a waiter may take it
    /// over once the call has run ``stall`` seconds).
    fn busy(&self) {
        let mut s = self.lock();
        if s.holder == Some(thread::current().id()) {
            s.busy_since = Some(Instant::now());
        }
    }

    /// The holder's listener call ended: True if it still holds the token (not taken over),
    /// which it keeps.
    fn idle(&self) -> bool {
        let mut s = self.lock();
        if s.holder == Some(thread::current().id()) {
            s.busy_since = None;
            true
        } else {
            false
        }
    }

    /// Gives the token up; a no-op for a holder whose token was taken over.
    fn release(&self) {
        let mut s = self.lock();
        if s.holder == Some(thread::current().id()) {
            s.holder = None;
            s.busy_since = None;
            drop(s);
            self.cv.notify_one();
        }
    }

    /// Whether the calling thread holds the token.
    fn held(&self) -> bool {
        self.lock().holder == Some(thread::current().id())
    }
}
