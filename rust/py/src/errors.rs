//! One mapping from the core's `Error` to the exception classes of `mqlite.errors`.
//!
//! The classes are defined in Python (so they can also subclass `ValueError`, `LookupError`,
//! `TimeoutError`, ...) and imported here by name.

use mqlite::Error;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

pyo3::import_exception!(mqlite.errors, MQError);
pyo3::import_exception!(mqlite.errors, StoreIOError);
pyo3::import_exception!(mqlite.errors, StoreNotFoundError);
pyo3::import_exception!(mqlite.errors, StoreNotADirectoryError);
pyo3::import_exception!(mqlite.errors, StoreFullError);
pyo3::import_exception!(mqlite.errors, StoreLockedError);
pyo3::import_exception!(mqlite.errors, StoreClosedError);
pyo3::import_exception!(mqlite.errors, StoreReadOnlyError);
pyo3::import_exception!(mqlite.errors, IllegalStateError);
pyo3::import_exception!(mqlite.errors, StorePoisonedError);
pyo3::import_exception!(mqlite.errors, InvalidConfigError);
pyo3::import_exception!(mqlite.errors, ConfigFileError);
pyo3::import_exception!(mqlite.errors, InvalidTopicError);
pyo3::import_exception!(mqlite.errors, InvalidGroupError);
pyo3::import_exception!(mqlite.errors, FilterExpressionError);
pyo3::import_exception!(mqlite.errors, TopicNotFoundError);
pyo3::import_exception!(mqlite.errors, TopicNotWritableError);
pyo3::import_exception!(mqlite.errors, TopicNotReadableError);
pyo3::import_exception!(mqlite.errors, InvalidQueueError);
pyo3::import_exception!(mqlite.errors, InvalidMessageError);
pyo3::import_exception!(mqlite.errors, MessageTooLargeError);
pyo3::import_exception!(mqlite.errors, PropertiesTooLargeError);
pyo3::import_exception!(mqlite.errors, InvalidBatchError);
pyo3::import_exception!(mqlite.errors, TransactionNotFoundError);
pyo3::import_exception!(mqlite.errors, TransactionStateError);
pyo3::import_exception!(mqlite.errors, IllegalArgumentError);
pyo3::import_exception!(mqlite.errors, MessageNotFoundError);
pyo3::import_exception!(mqlite.errors, CorruptedLogError);
pyo3::import_exception!(mqlite.errors, StoreUsedAfterForkError);
pyo3::import_exception!(mqlite.errors, CompressionError);
pyo3::import_exception!(mqlite.errors, IndexUnavailableError);

/// Wraps a core error so `?` converts it (the orphan rule forbids `From<Error> for PyErr`).
#[derive(Debug)]
pub struct PyMqError(pub Error);

impl From<Error> for PyMqError {
    fn from(e: Error) -> Self {
        PyMqError(e)
    }
}

impl From<PyMqError> for PyErr {
    fn from(e: PyMqError) -> PyErr {
        to_pyerr(&e.0)
    }
}

/// The exception for a core error, with `.code` set to the variant's stable name. Typed causes
/// stay reachable: `StorePoisonedError.__cause__` is the exception of the failure that poisoned
/// the store, and `CorruptedLogError` carries `path`, `offset` and `decode_error` (the record
/// decoder's verdict, None when the damage is not a record that failed to decode).
pub fn to_pyerr(e: &Error) -> PyErr {
    let msg = e.to_string();
    let err = match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            StoreNotFoundError::new_err(msg)
        }
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotADirectory => {
            StoreNotADirectoryError::new_err(msg)
        }
        Error::Io { .. } => StoreIOError::new_err(msg),
        Error::StoreFull { .. } => StoreFullError::new_err(msg),
        Error::StoreLocked { .. } => StoreLockedError::new_err(msg),
        Error::Closed => StoreClosedError::new_err(msg),
        Error::ReadOnly => StoreReadOnlyError::new_err(msg),
        Error::Poisoned { .. } => StorePoisonedError::new_err(msg),
        Error::InvalidConfig { .. } | Error::ConfigConflict { .. } => {
            InvalidConfigError::new_err(msg)
        }
        Error::ConfigFile { .. } => ConfigFileError::new_err(msg),
        Error::InvalidTopic { .. } => InvalidTopicError::new_err(msg),
        Error::InvalidGroup { .. } => InvalidGroupError::new_err(msg),
        Error::TopicNotFound { .. } => TopicNotFoundError::new_err(msg),
        Error::TopicNotWritable { .. } => TopicNotWritableError::new_err(msg),
        Error::TopicNotReadable { .. } => TopicNotReadableError::new_err(msg),
        Error::InvalidQueue { .. } => InvalidQueueError::new_err(msg),
        Error::InvalidMessage { .. } => InvalidMessageError::new_err(msg),
        Error::MessageTooLarge { .. } => MessageTooLargeError::new_err(msg),
        Error::PropertiesTooLarge { .. } => PropertiesTooLargeError::new_err(msg),
        Error::InvalidBatch { .. } => InvalidBatchError::new_err(msg),
        Error::TxnUnknown { .. } => TransactionNotFoundError::new_err(msg),
        Error::TxnConflict { .. } => TransactionStateError::new_err(msg),
        Error::InvalidArgument { .. } => IllegalArgumentError::new_err(msg),
        Error::MessageNotFound { .. } => MessageNotFoundError::new_err(msg),
        Error::Corrupted { .. } => CorruptedLogError::new_err(msg),
        Error::UsedAfterFork => StoreUsedAfterForkError::new_err(msg),
        Error::Compression { .. } => CompressionError::new_err(msg),
        Error::IndexUnavailable { .. } => IndexUnavailableError::new_err(msg),
        _ => MQError::new_err(msg),
    };
    Python::attach(|py| {
        // Best effort: an exception object that refuses attributes keeps its defaults.
        let value = err.value(py);
        let _ = value.setattr("code", e.kind());
        // OSError subclasses (StoreIOError, StoreFullError) carry errno and the path. Once
        // filename is set, OSError's str() is "[Errno {errno}] {strerror}: {filename}", so all
        // three are always set.
        if let Error::Io { source, path, .. } | Error::StoreFull { source, path } = e {
            let _ = value.setattr("errno", errno_of(source));
            let _ = value.setattr("strerror", e.to_string());
            let _ = value.setattr("filename", path.to_string_lossy().as_ref());
        }
        if let Error::InvalidConfig { field, .. } = e {
            let _ = value.setattr("field", *field);
        }
        if let Error::ConfigConflict {
            field,
            stored,
            given,
        } = e
        {
            let _ = value.setattr("field", *field);
            let _ = value.setattr("stored", *stored);
            let _ = value.setattr("given", *given);
        }
        if let Error::ConfigFile { path, field, .. } = e {
            let _ = value.setattr("path", path.to_string_lossy().as_ref());
            let _ = value.setattr("field", field.as_str());
        }
        if let Error::Corrupted {
            path,
            offset,
            cause,
            ..
        } = e
        {
            let _ = value.setattr("path", path.to_string_lossy().as_ref());
            let _ = value.setattr("offset", *offset);
            let _ = value.setattr("decode_error", cause.as_ref().map(|c| c.to_string()));
        }
        if let Error::Poisoned { cause } = e {
            err.set_cause(py, Some(to_pyerr(cause)));
        }
    });
    err
}

/// The errno of an I/O error; for one the store made itself without an OS error number, the
/// errno closest to its kind.
fn errno_of(e: &std::io::Error) -> i32 {
    use std::io::ErrorKind;
    e.raw_os_error().unwrap_or(match e.kind() {
        ErrorKind::NotFound => libc::ENOENT,
        ErrorKind::InvalidInput => libc::EINVAL,
        ErrorKind::Unsupported => libc::EOPNOTSUPP,
        _ => libc::EIO,
    })
}

/// `InvalidMessageError` for a malformed message detected in the binding.
pub fn invalid_message(msg: impl Into<String>) -> PyErr {
    InvalidMessageError::new_err(msg.into())
}

/// `TypeError` helper.
pub fn type_error(msg: impl Into<String>) -> PyErr {
    PyTypeError::new_err(msg.into())
}
