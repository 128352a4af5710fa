//! `verify` and `repair` of a store by path (mqlite::verify, mqlite::repair). The reports
//! cross as JSON; python/mqlite/maintenance.py turns them into typed objects.

use std::path::Path;

use mqlite::error::Error;
use mqlite::repair::{self, RepairMode};
use mqlite::verify;
use pyo3::prelude::*;

use crate::errors::PyMqError;

fn to_json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| {
        PyMqError(Error::InvalidArgument {
            field: "report",
            reason: e.to_string(),
        })
        .into()
    })
}

/// Verifies the store at `path` reading only (no lock); returns the report as JSON.
/// `progress(done, total)` is called with bytes as the scan moves on; an exception it raises,
/// or a signal handler's (Ctrl-C), ends the verification and propagates.
#[pyfunction]
#[pyo3(name = "_verify_store", signature = (path, progress=None))]
pub fn verify_store(py: Python<'_>, path: &str, progress: Option<Py<PyAny>>) -> PyResult<String> {
    let mut raised: Option<PyErr> = None;
    let result = py.detach(|| {
        verify::verify(Path::new(path), &mut |done, total| {
            // Between files: a signal handler's exception (Ctrl-C) ends the scan, and so
            // does one the callback raises.
            Python::attach(|py| {
                let called = py.check_signals().and_then(|()| match progress.as_ref() {
                    Some(cb) => cb.call1(py, (done, total)).map(drop),
                    None => Ok(()),
                });
                called.map_err(|e| {
                    raised = Some(e);
                    Error::Interrupted
                })
            })
        })
    });
    match (result, raised) {
        (_, Some(e)) => Err(e),
        (Ok(report), None) => to_json(&report),
        (Err(e), None) => Err(PyMqError(e).into()),
    }
}

/// Repairs the store at `path` (`mode`: `"cut"` or `"skip"`); returns the report as JSON.
#[pyfunction]
#[pyo3(name = "_repair_store", signature = (path, mode, dry_run))]
pub fn repair_store(py: Python<'_>, path: &str, mode: &str, dry_run: bool) -> PyResult<String> {
    let mode = match mode {
        "cut" => RepairMode::Cut,
        "skip" => RepairMode::Skip,
        other => {
            return Err(PyMqError(Error::InvalidArgument {
                field: "mode",
                reason: format!("mode must be \"cut\" or \"skip\", not {other:?}"),
            })
            .into())
        }
    };
    let report = py
        .detach(|| repair::repair(Path::new(path), mode, dry_run))
        .map_err(PyMqError)?;
    to_json(&report)
}
