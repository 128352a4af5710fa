//! Waits that stay interruptible: Python runs a signal handler (Ctrl-C's KeyboardInterrupt)
//! only when the waiting thread holds the GIL, so a call that releases the GIL to wait for long
//! waits in slices of at most `SLICE` and retakes the GIL between two slices to run the
//! handlers (`py.check_signals()`). A handler that raises ends the wait with its exception;
//! nothing the wait was for has happened yet, so nothing is lost.
//!
//! Only the main thread runs signal handlers: on any other thread the check returns at once.

use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::errors::PyMqError;

/// Longest time a waiting call goes without looking for signals.
pub const SLICE: Duration = Duration::from_millis(100);

/// The end of a wait of `timeout` from now; `None` (no end) for no timeout, or one too large to
/// represent.
pub fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

/// The next slice of a wait that ends at `deadline`: at most `SLICE`, zero once it has passed.
pub fn slice(deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
        None => SLICE,
    }
}

/// Whether `deadline` has passed.
pub fn passed(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// Runs `step(slice)` without the GIL, slice after slice, until it returns `Some` or
/// `deadline` passes (`None`), running signal handlers between two slices. `step` must wait at
/// most the slice it is given, and be safe to call again after it returned `None`.
pub fn wait<T: Send>(
    py: Python<'_>,
    deadline: Option<Instant>,
    mut step: impl FnMut(Duration) -> mqlite::Result<Option<T>> + Send,
) -> PyResult<Option<T>> {
    loop {
        let slice = slice(deadline);
        if let Some(done) = py.detach(|| step(slice)).map_err(PyMqError)? {
            return Ok(Some(done));
        }
        py.check_signals()?;
        if passed(deadline) {
            return Ok(None);
        }
    }
}

/// The interruption hook of a core call that waits on its own (without the GIL): it retakes
/// the GIL to run signal handlers at most once per `SLICE`, and keeps the exception of the
/// handler that raised for `into_error`.
#[derive(Debug)]
pub struct SignalCheck {
    next: Instant,
    raised: Option<PyErr>,
}

impl Default for SignalCheck {
    fn default() -> Self {
        SignalCheck {
            next: Instant::now() + SLICE,
            raised: None,
        }
    }
}

impl SignalCheck {
    /// True once a signal handler has raised.
    pub fn interrupted(&mut self) -> bool {
        if self.raised.is_some() {
            return true;
        }
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        self.next = now + SLICE;
        self.raised = Python::attach(|py| py.check_signals()).err();
        self.raised.is_some()
    }

    /// The exception for a core call that failed: the handler's if the hook ended it with
    /// `Interrupted`, else the core error's.
    pub fn into_error(self, e: mqlite::Error) -> PyErr {
        match (e, self.raised) {
            (mqlite::Error::Interrupted, Some(raised)) => raised,
            (e, _) => PyMqError(e).into(),
        }
    }
}
