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
//! - A waiter on the main thread (the only one that runs Python's signal handlers) sleeps at
//!   most `interrupt::SLICE` at a time and runs the handlers in between, so Ctrl-C reaches it;
//!   other waiters never wake on a timer for that.
//! - A token belongs to the process that created it. In a forked child its holder (a thread of
//!   the parent) does not exist and its lock may be held by such a thread: `acquire` raises
//!   `StoreUsedAfterForkError` and `wake_all` does nothing, both without touching the lock.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use mqlite::mapped_file::mmap::fork_generation;
use pyo3::intern;
use pyo3::prelude::*;

use crate::args::Float;
use crate::errors::{InvalidConfigError, StoreUsedAfterForkError};
use crate::interrupt;

#[derive(Debug, Default)]
struct State {
    holder: Option<ThreadId>,
    /// When the holder began its current listener call; `None` while it polls.
    busy_since: Option<Instant>,
    /// A waiter is on the timed watch.
    watched: bool,
    /// Bumped by `wake_all`: every waiter goes back to check `keep_waiting`.
    epoch: u64,
    /// Threads inside `PyPollToken::wait` (asleep or looking), for `waiters`.
    waiters: usize,
    /// How many times a watcher has woken and looked at the holder, for `watch_looks`.
    looks: u64,
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
    /// `fork_generation()` of the creating process: another value means a forked child.
    fork_gen: u64,
}

impl PyPollToken {
    /// Whether this is a forked child of the process that created the token.
    fn forked(&self) -> bool {
        fork_generation() != self.fork_gen
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves `State` consistent (plain field writes), so a panic
        // elsewhere while holding the lock cannot leave it half-updated.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps (without the GIL) until the token is taken by this thread, `wake_all` moves the
    /// epoch past `epoch`, or `until` (if any) passes.
    fn wait(&self, me: ThreadId, epoch: u64, until: Option<Instant>) -> Wait {
        let mut s = self.lock();
        s.waiters += 1;
        let mut watching = false;
        let outcome = loop {
            let now = Instant::now();
            if s.takeable(now, self.stall) {
                s.take(me);
                break Wait::Taken;
            }
            if s.epoch != epoch {
                break Wait::Woken;
            }
            let left = until.map(|u| u.saturating_duration_since(now));
            if left.is_some_and(|l| l.is_zero()) {
                break Wait::Expired;
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
                let due = due.max(Duration::from_micros(100));
                let mut g = self.sleep(s, left.map_or(due, |l| l.min(due)));
                g.looks += 1;
                g
            } else {
                match left {
                    Some(l) => self.sleep(s, l),
                    None => self.cv.wait(s).unwrap_or_else(|p| p.into_inner()),
                }
            };
        };
        s.waiters -= 1;
        if watching {
            s.watched = false;
            drop(s);
            // A sleeping waiter takes the watch over (or the token, if it is free).
            self.cv.notify_one();
        }
        outcome
    }

    fn sleep<'a>(&self, s: MutexGuard<'a, State>, at_most: Duration) -> MutexGuard<'a, State> {
        match self.cv.wait_timeout(s, at_most) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        }
    }
}

/// How `PyPollToken::wait` ended.
enum Wait {
    /// This thread holds the token.
    Taken,
    /// `wake_all` was called: the waiter re-checks its `keep_waiting`.
    Woken,
    /// The wait's time limit passed.
    Expired,
}

/// Whether the calling thread is Python's main thread, the one that runs signal handlers.
fn on_main_thread(py: Python<'_>) -> PyResult<bool> {
    let threading = py.import(intern!(py, "threading"))?;
    let main = threading.call_method0(intern!(py, "main_thread"))?;
    let current = threading.call_method0(intern!(py, "current_thread"))?;
    Ok(main.is(&current))
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
            fork_gen: fork_generation(),
        })
    }

    /// Waits for the token: True once held, False (without it) once ``keep_waiting()`` is
    /// false, which is checked before the first sleep and whenever ``wake_all`` is called.
    /// On the main thread a signal handler that raises (Ctrl-C) ends the wait with its error.
    /// In a forked child it raises ``StoreUsedAfterForkError``: the holder may be a thread of
    /// the parent, which would never give the token up.
    fn acquire(&self, py: Python<'_>, keep_waiting: &Bound<'_, PyAny>) -> PyResult<bool> {
        if self.forked() {
            return Err(StoreUsedAfterForkError::new_err(
                "this poll token belongs to the process that created it; \
                 its threads do not exist in a forked child",
            ));
        }
        let me = thread::current().id();
        let mut interruptible = None;
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
            let interruptible = match interruptible {
                Some(i) => i,
                None => *interruptible.insert(on_main_thread(py)?),
            };
            loop {
                let until = interruptible.then(|| Instant::now() + interrupt::SLICE);
                match py.detach(|| self.wait(me, epoch, until)) {
                    Wait::Taken => return Ok(true),
                    Wait::Woken => break,
                    Wait::Expired => py.check_signals()?,
                }
            }
        }
    }

    /// Every waiter re-checks its ``keep_waiting`` (the consumer is stopping). Nothing to wake
    /// in a forked child.
    fn wake_all(&self) {
        if self.forked() {
            return;
        }
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

    /// How many threads are waiting for the token now (diagnostics: lets a test see that a
    /// waiter has gone to sleep rather than guess how long that takes).
    fn waiters(&self) -> usize {
        self.lock().waiters
    }

    /// How many times, since the token was made, a waiter on the stall watch woke and looked
    /// at the holder (diagnostics: lets a test wait for a number of watch periods).
    fn watch_looks(&self) -> u64 {
        self.lock().looks
    }
}
