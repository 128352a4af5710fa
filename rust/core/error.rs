//! Typed errors for every store operation.
//!
//! One `Error` enum with `#[non_exhaustive]` variants that carry what a caller needs to act on them
//! (path, offset, limit, actual value) and keep their cause typed, as `source()`: the `io::Error`
//! of `Io`/`StoreFull`, the `DecodeError` of `Corrupted`, the failure behind `Poisoned`. The
//! Python binding maps each variant to one exception class; `Error::kind` gives that mapping a
//! stable name. `DecodeError` lives here, not in the codec, so that this module depends on nothing
//! else in the crate.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure the store reports. Field meanings follow from each variant's description.
#[allow(missing_docs)]
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An I/O call failed; `op` says what the store was doing, `path` where.
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The file system has no room for a new or grown file (ENOSPC/EDQUOT/EFBIG).
    StoreFull { path: PathBuf, source: io::Error },
    /// Another process (or another handle in this process) holds the writer lock.
    StoreLocked {
        path: PathBuf,
        holder: Option<String>,
    },
    /// The store was closed; no call may use it any more.
    Closed,
    /// The store is open read-only and the call would write.
    ReadOnly,
    /// A flush (fsync/msync) failed earlier; the writer refuses every write until reopened.
    /// `cause` is the failure that poisoned the store, shared by every error reporting it.
    Poisoned { cause: Arc<Error> },
    /// A configuration value is out of range.
    InvalidConfig { field: &'static str, reason: String },
    /// An option given explicitly differs from the value the store records (its `meta` file, or
    /// what its files show): the file geometry is fixed when a store is created.
    ConfigConflict {
        field: &'static str,
        stored: u64,
        given: u64,
    },
    /// A metadata file of the store (`config/topics.json`) does not decode, or a value in it
    /// has the wrong type or is out of range, and no usable `.bak` copy stands in for it.
    /// `field` is the JSON path of the bad value, empty when the file as a whole is bad.
    ConfigFile {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// A topic name is not acceptable.
    InvalidTopic { topic: String, reason: &'static str },
    /// A producer or consumer group name is not acceptable.
    InvalidGroup { group: String, reason: &'static str },
    /// The topic does not exist and auto-creation is off (or the call never auto-creates).
    TopicNotFound { topic: String },
    /// The topic exists but its permission forbids the operation.
    TopicNotWritable { topic: String },
    /// The topic exists but its permission forbids reads (RocketMQ's NO_PERMISSION on a pull).
    TopicNotReadable { topic: String },
    /// A queue id outside `[0, queue count)`.
    InvalidQueue {
        topic: String,
        queue_id: u32,
        queue_count: u32,
    },
    /// The message is malformed (empty body, bad property, ...).
    InvalidMessage { reason: String },
    /// The body exceeds the configured maximum message size.
    MessageTooLarge { size: usize, limit: usize },
    /// The encoded properties exceed RocketMQ's 32,767-byte limit.
    PropertiesTooLarge { size: usize, limit: usize },
    /// A batch is empty, mixes topics, or is too large.
    InvalidBatch { reason: String },
    /// A read argument is out of range (max messages, offset).
    InvalidArgument { field: &'static str, reason: String },
    /// A message id is malformed, or no record starts at the offset looked up.
    MessageNotFound { key: MessageKey },
    /// Bytes on disk below the durable watermark do not decode. `cause` is the record
    /// decoder's verdict when a record failed to decode (then `reason` gives its context, and
    /// may be empty); `reason` alone describes any other inconsistency.
    Corrupted {
        path: PathBuf,
        offset: u64,
        reason: String,
        cause: Option<DecodeError>,
    },
    /// The store was used in a process forked from the one that opened it.
    UsedAfterFork,
    /// A body flagged compressed does not decompress (damaged, an unknown codec, or larger
    /// than the decompression limit), or a body could not be compressed.
    Compression { codec: &'static str, reason: String },
    /// A table of the shared writer mapping (`run/writer.shm`: topics, or queues) holds as
    /// many entries as it may (`limit`). Its size is chosen when the first process opens the
    /// store, from the topics and queues it has then.
    SharedTableFull { table: &'static str, limit: u32 },
    /// The caller's interruption hook ended a wait (the Python binding: a signal handler
    /// raised, such as Ctrl-C's KeyboardInterrupt). Nothing was changed.
    Interrupted,
    /// A background thread of the store (`thread`: dispatch, flush, timers, ...) panicked: a
    /// defect of mqlite. The store refuses writes from then on (`Poisoned` by this).
    ServiceFailed { thread: String, reason: String },
    /// No transaction of this id was ever prepared in the store (store/txn/).
    TxnUnknown { id: String },
    /// The transaction is already resolved the other way (`state`: `committed`,
    /// `rolled back` or `discarded`); asking to `asked` it writes nothing.
    TxnConflict {
        id: String,
        state: &'static str,
        asked: &'static str,
    },
    /// The key index cannot answer (`index_enabled` off, or this process does not build it);
    /// `reason` says why.
    IndexUnavailable { reason: String },
}

impl Error {
    /// Stable, machine-readable name of the variant (used as `MQError.code` in Python).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "IO_ERROR",
            Error::StoreFull { .. } => "STORE_FULL",
            Error::StoreLocked { .. } => "STORE_LOCKED",
            Error::Closed => "STORE_CLOSED",
            Error::ReadOnly => "STORE_READ_ONLY",
            Error::Poisoned { .. } => "STORE_POISONED",
            Error::InvalidConfig { .. } | Error::ConfigConflict { .. } => "INVALID_CONFIG",
            Error::ConfigFile { .. } => "CONFIG_FILE",
            Error::InvalidTopic { .. } => "INVALID_TOPIC",
            Error::InvalidGroup { .. } => "INVALID_GROUP",
            Error::TopicNotFound { .. } => "TOPIC_NOT_FOUND",
            Error::TopicNotWritable { .. } => "TOPIC_NOT_WRITABLE",
            Error::TopicNotReadable { .. } => "TOPIC_NOT_READABLE",
            Error::InvalidQueue { .. } => "INVALID_QUEUE",
            Error::InvalidMessage { .. } => "MESSAGE_ILLEGAL",
            Error::MessageTooLarge { .. } => "MESSAGE_TOO_LARGE",
            Error::PropertiesTooLarge { .. } => "PROPERTIES_SIZE_EXCEEDED",
            Error::InvalidBatch { .. } => "INVALID_BATCH",
            Error::InvalidArgument { .. } => "INVALID_ARGUMENT",
            Error::MessageNotFound { .. } => "MESSAGE_NOT_FOUND",
            Error::Corrupted { .. } => "CORRUPTED",
            Error::UsedAfterFork => "USED_AFTER_FORK",
            Error::Compression { .. } => "COMPRESSION",
            Error::Interrupted => "INTERRUPTED",
            Error::ServiceFailed { .. } => "SERVICE_FAILED",
            Error::TxnUnknown { .. } => "TRANSACTION_NOT_FOUND",
            Error::TxnConflict { .. } => "TRANSACTION_STATE",
            Error::SharedTableFull { .. } => "SHARED_TABLE_FULL",
            Error::IndexUnavailable { .. } => "INDEX_UNAVAILABLE",
        }
    }

    /// Wraps an `io::Error`, classifying "no space" errors as [`Error::StoreFull`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        let path = path.into();
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => {
                Error::StoreFull { path, source }
            }
            _ => Error::Io { op, path, source },
        }
    }

    /// `Corrupted` for a record that failed to decode at `offset` of `path`; `context` (may be
    /// empty) says where it was found.
    pub fn undecodable(
        path: impl Into<PathBuf>,
        offset: u64,
        cause: DecodeError,
        context: impl Into<String>,
    ) -> Error {
        Error::Corrupted {
            path: path.into(),
            offset,
            reason: context.into(),
            cause: Some(cause),
        }
    }

    /// `Poisoned` by `cause`, keeping a copy of it so that the failing call can still return
    /// `cause` itself (see [`Error::copy`]).
    pub fn poisoned_by(cause: &Error) -> Arc<Error> {
        Arc::new(cause.copy())
    }

    /// A copy of this error for a second reporter: I/O errors keep their operation, path and
    /// OS error code (or kind and message), `Poisoned` shares its cause, `Corrupted` and
    /// `ConfigFile` are copied whole; anything else (not a failure a flush reports) becomes an
    /// I/O error carrying its message.
    fn copy(&self) -> Error {
        match self {
            Error::Io { op, path, source } => Error::Io {
                op,
                path: path.clone(),
                source: copy_io(source),
            },
            Error::StoreFull { path, source } => Error::StoreFull {
                path: path.clone(),
                source: copy_io(source),
            },
            Error::Poisoned { cause } => Error::Poisoned {
                cause: Arc::clone(cause),
            },
            Error::Corrupted {
                path,
                offset,
                reason,
                cause,
            } => Error::Corrupted {
                path: path.clone(),
                offset: *offset,
                reason: reason.clone(),
                cause: cause.clone(),
            },
            Error::ConfigFile {
                path,
                field,
                reason,
            } => Error::ConfigFile {
                path: path.clone(),
                field: field.clone(),
                reason: reason.clone(),
            },
            Error::ServiceFailed { thread, reason } => Error::ServiceFailed {
                thread: thread.clone(),
                reason: reason.clone(),
            },
            other => Error::Io {
                op: "flush",
                path: PathBuf::new(),
                source: io::Error::other(other.to_string()),
            },
        }
    }
}

/// The same OS error (errno) when there is one, else the same kind and message.
fn copy_io(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => {
                write!(f, "{op} failed on {}: {source}", path.display())
            }
            Error::StoreFull { path, source } => {
                write!(f, "no space left for {}: {source}", path.display())
            }
            Error::StoreLocked { path, holder } => match holder {
                Some(h) => write!(
                    f,
                    "store {} is locked by another writer ({h})",
                    path.display()
                ),
                None => write!(f, "store {} is locked by another writer", path.display()),
            },
            Error::Closed => write!(f, "the store is closed"),
            Error::ReadOnly => write!(f, "the store is open read-only"),
            Error::Poisoned { cause } => {
                write!(
                    f,
                    "the store refuses writes after a failure ({cause}); reopen it"
                )
            }
            Error::InvalidConfig { field, reason } => write!(f, "invalid config {field}: {reason}"),
            Error::ConfigConflict {
                field,
                stored,
                given,
            } => write!(
                f,
                "invalid config {field}: the store was created with {stored}, {given} was given \
                 (leave it unset to use the store's)"
            ),
            Error::ConfigFile {
                path,
                field,
                reason,
            } => {
                if field.is_empty() {
                    write!(f, "unreadable {}: {reason}", path.display())
                } else {
                    write!(f, "unreadable {}: {field}: {reason}", path.display())
                }
            }
            Error::InvalidTopic { topic, reason } => write!(f, "invalid topic {topic:?}: {reason}"),
            Error::InvalidGroup { group, reason } => write!(f, "invalid group {group:?}: {reason}"),
            Error::TopicNotFound { topic } => write!(f, "topic {topic:?} does not exist"),
            Error::TopicNotWritable { topic } => {
                write!(f, "topic {topic:?} has no write permission")
            }
            Error::TopicNotReadable { topic } => {
                write!(f, "topic {topic:?} has no read permission")
            }
            Error::InvalidQueue {
                topic,
                queue_id,
                queue_count,
            } => write!(
                f,
                "queue id {queue_id} is out of range for topic {topic:?} ({queue_count} queues)"
            ),
            Error::InvalidMessage { reason } => write!(f, "invalid message: {reason}"),
            Error::MessageTooLarge { size, limit } => {
                write!(
                    f,
                    "message body of {size} bytes exceeds the limit of {limit} bytes"
                )
            }
            Error::PropertiesTooLarge { size, limit } => {
                write!(
                    f,
                    "encoded properties of {size} bytes exceed the limit of {limit} bytes"
                )
            }
            Error::InvalidBatch { reason } => write!(f, "invalid batch: {reason}"),
            Error::InvalidArgument { field, reason } => write!(f, "invalid {field}: {reason}"),
            Error::MessageNotFound {
                key: MessageKey::Id(id),
            } => write!(f, "no message with id {id}"),
            Error::MessageNotFound {
                key: MessageKey::Offset(offset),
            } => write!(f, "no message at commit-log offset {offset}"),
            Error::Corrupted {
                path,
                offset,
                reason,
                cause,
            } => {
                write!(
                    f,
                    "corrupted data in {} at offset {offset}: ",
                    path.display()
                )?;
                match cause {
                    Some(c) if reason.is_empty() => write!(f, "{c}"),
                    Some(c) => write!(f, "{c}: {reason}"),
                    None => write!(f, "{reason}"),
                }
            }
            Error::UsedAfterFork => {
                write!(
                    f,
                    "the store was opened in another process; reopen it after fork()"
                )
            }
            Error::Compression { codec, reason } => {
                write!(f, "{codec} body compression: {reason}")
            }
            Error::Interrupted => write!(f, "the wait was interrupted"),
            Error::TxnUnknown { id } => write!(f, "no transaction {id:?} in the store"),
            Error::TxnConflict { id, state, asked } => {
                write!(
                    f,
                    "cannot {asked} transaction {id:?}: it is already {state}"
                )
            }
            Error::IndexUnavailable { reason } => {
                write!(f, "the key index is unavailable: {reason}")
            }
            Error::ServiceFailed { thread, reason } => {
                write!(f, "the store's thread {thread} panicked: {reason}")
            }
            Error::SharedTableFull { table, limit } => write!(
                f,
                "the shared {table} table of run/writer.shm is full ({limit} entries); it is \
                 built larger when the store is next opened by a first process"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::StoreFull { source, .. } => Some(source),
            Error::Poisoned { cause } => Some(cause.as_ref()),
            Error::Corrupted { cause: Some(c), .. } => Some(c),
            _ => None,
        }
    }
}

/// How a message was looked up, in [`Error::MessageNotFound`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageKey {
    /// By offset message id (as given).
    Id(String),
    /// By commit-log offset.
    Offset(u64),
}

/// Why bytes are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the header or the declared size.
    Truncated,
    /// Unknown magic code.
    BadMagic(u32),
    /// Declared total size disagrees with the field lengths.
    BadLength,
    /// Stored body CRC differs from the computed one.
    #[allow(missing_docs)]
    CrcMismatch { stored: u32, computed: u32 },
    /// The whole-record CRC property differs from the CRC of the bytes it covers.
    #[allow(missing_docs)]
    RecordCrcMismatch { stored: u32, computed: u32 },
    /// The topic is not UTF-8.
    BadTopic,
    /// The topic is not the one the reader was led to (by a consume-queue unit).
    OtherTopic,
    /// A record without the whole-record CRC property whose topic or properties hold a zero
    /// byte: a torn write.
    TornFields,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "record truncated"),
            DecodeError::BadMagic(m) => write!(f, "bad magic code {m:#010x}"),
            DecodeError::BadLength => write!(f, "record length disagrees with its fields"),
            DecodeError::CrcMismatch { stored, computed } => {
                write!(
                    f,
                    "body CRC mismatch (stored {stored:#x}, computed {computed:#x})"
                )
            }
            DecodeError::RecordCrcMismatch { stored, computed } => {
                write!(
                    f,
                    "whole-record CRC mismatch (stored {stored:#x}, computed {computed:#x})"
                )
            }
            DecodeError::BadTopic => write!(f, "topic is not UTF-8"),
            DecodeError::OtherTopic => write!(f, "topic differs from the one expected"),
            DecodeError::TornFields => write!(
                f,
                "topic or properties torn (zero bytes, and no record CRC to check them)"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn corrupted_keeps_the_decode_error_as_its_source() {
        let e = Error::undecodable(
            "log",
            7,
            DecodeError::BadLength,
            "below the durable offset 9",
        );
        let source = e.source().and_then(|s| s.downcast_ref::<DecodeError>());
        assert_eq!(source, Some(&DecodeError::BadLength));
        assert_eq!(
            e.to_string(),
            "corrupted data in log at offset 7: record length disagrees with its fields: \
             below the durable offset 9"
        );
    }

    #[test]
    fn poisoned_keeps_the_io_error_of_the_failed_flush() {
        let failed = Error::io("msync", "log", io::Error::from_raw_os_error(libc::EIO));
        let e = Error::Poisoned {
            cause: Error::poisoned_by(&failed),
        };
        let cause = e.source().and_then(|s| s.downcast_ref::<Error>());
        assert!(
            matches!(cause, Some(Error::Io { op: "msync", source, .. })
                if source.raw_os_error() == Some(libc::EIO)),
            "{cause:?}"
        );
        assert!(e.to_string().contains(&failed.to_string()), "{e}");
    }
}
