//! `mqlite.testing.ManualClock`: the core's manual clock for Python tests. A store opened with
//! `clock=` reads its time (store timestamps, delivery times, retention age) from it, and
//! `Store.deliver_due()` delivers what that time makes due, so tests of scheduled delivery
//! move time instead of waiting. Clones of the handle share one time; it lives in this
//! process only (another process's store reads its own clock).

use mqlite::util::clock::ManualClock;
use pyo3::prelude::*;

use crate::args::Int;
use crate::errors::IllegalArgumentError;

#[derive(Debug)]
#[pyclass(frozen, module = "mqlite._core", name = "ManualClock")]
pub struct PyManualClock {
    pub(crate) clock: ManualClock,
}

fn epoch_ms(v: &Int, what: &str) -> PyResult<i64> {
    v.to(|v| IllegalArgumentError::new_err(format!("{what} out of range: {v}")))
}

#[pymethods]
impl PyManualClock {
    /// A clock reading `start_ms` (epoch milliseconds).
    #[new]
    fn new(start_ms: Int) -> PyResult<Self> {
        Ok(PyManualClock {
            clock: ManualClock::new(epoch_ms(&start_ms, "start_ms")?),
        })
    }

    /// The time it reads, in epoch milliseconds.
    #[getter]
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Sets the time (it may go back, as a wall clock can).
    fn set_ms(&self, ms: Int) -> PyResult<()> {
        self.clock.set_ms(epoch_ms(&ms, "ms")?);
        Ok(())
    }

    /// Moves the time forward by `ms` milliseconds (not negative).
    fn advance_ms(&self, ms: Int) -> PyResult<()> {
        let by: u64 = ms.to(|v| {
            IllegalArgumentError::new_err(format!("advance_ms must not be negative, got {v}"))
        })?;
        self.clock.advance(std::time::Duration::from_millis(by));
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(now_ms={})", self.clock.now_ms())
    }
}
