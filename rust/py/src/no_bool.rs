//! Int arguments that refuse a bool. Python's `bool` is a subclass of `int`, so PyO3's own
//! conversion takes `True` as 1: `send(msg, queue_id=True)` would go to queue 1. Every int
//! argument of the binding that a user passes is converted through `NoBool` (or checked with
//! `refuse_bool`), and a bool is a `TypeError`, as a str there is.

use pyo3::prelude::*;
use pyo3::types::PyBool;

use crate::errors::type_error;

/// A `T` converted from a Python int that is not a bool.
#[derive(Debug, Clone, Copy)]
pub struct NoBool<T>(pub T);

impl<'a, 'py, T> FromPyObject<'a, 'py> for NoBool<T>
where
    T: FromPyObject<'a, 'py>,
    T::Error: Into<PyErr>,
{
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_instance_of::<PyBool>() {
            // PyO3 prefixes the argument's name.
            return Err(type_error("expected an int, not bool"));
        }
        T::extract(obj).map(NoBool).map_err(Into::into)
    }
}

/// `TypeError` naming `field` when `obj` (an int argument read from an object) is a bool.
pub fn refuse_bool(obj: &Bound<'_, PyAny>, field: &str) -> PyResult<()> {
    if obj.is_instance_of::<PyBool>() {
        return Err(type_error(format!("{field} must be an int, not bool")));
    }
    Ok(())
}
