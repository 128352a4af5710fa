//! Byte-range locks for consumer groups (`python/mqlite/group.py`): a group's members own its
//! queues through open-file-description record locks on one shared file, one byte per queue,
//! so a member holds one descriptor however many queues it owns (rust/FORMAT.md §13).

use mqlite::mapped_file::mmap::ofd_range_lock;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// `(start, len)` as `off_t`s; a range past `off_t` is a ValueError (the caller computes ranges
/// from slot numbers it bounds, so this is a programming error, not bad user input).
fn range(start: u64, len: u64) -> PyResult<(libc::off_t, libc::off_t)> {
    let fits = |v: u64| libc::off_t::try_from(v).ok();
    match (fits(start), fits(len)) {
        (Some(s), Some(l)) if l > 0 && s.checked_add(l).is_some() => Ok((s, l)),
        _ => Err(PyValueError::new_err(format!(
            "byte range {start}+{len} is empty or outside the file offsets"
        ))),
    }
}

fn os_error(op: &str, e: &std::io::Error) -> PyErr {
    let errno = e.raw_os_error().unwrap_or(libc::EIO);
    PyOSError::new_err((errno, format!("{op}: {e}")))
}

/// Takes an exclusive lock on bytes `start..start + len` of `fd`'s file for `fd`'s open file
/// description, without waiting; False when another open file description holds part of it.
/// An OS failure is an OSError with its errno.
#[pyfunction]
pub fn ofd_try_lock(fd: i32, start: u64, len: u64) -> PyResult<bool> {
    let (s, l) = range(start, len)?;
    ofd_range_lock(fd, s, l, false).map_err(|e| os_error("fcntl(F_OFD_SETLK, F_WRLCK)", &e))
}

/// Releases `fd`'s open file description's locks on bytes `start..start + len` (a range it does
/// not hold is a no-op).
#[pyfunction]
pub fn ofd_unlock(fd: i32, start: u64, len: u64) -> PyResult<()> {
    let (s, l) = range(start, len)?;
    ofd_range_lock(fd, s, l, true)
        .map(|_| ())
        .map_err(|e| os_error("fcntl(F_OFD_SETLK, F_UNLCK)", &e))
}
