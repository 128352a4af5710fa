//! Typed errors for every store operation.
//!
//! One `Error` enum with `#[non_exhaustive]` variants that carry what a caller needs to act on them
//! (path, offset, limit, actual value) and keep the underlying `io::Error` as `source()`. The Python
//! binding maps each variant to one exception class; `Error::kind` gives that mapping a stable name.

use std::fmt;
use std::io;
use std::path::PathBuf;

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
    Poisoned { reason: String },
    /// A configuration value is out of range.
    InvalidConfig { field: &'static str, reason: String },
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
    /// A message id is malformed or points at no record.
    MessageNotFound { msg_id: String },
    /// Bytes on disk below the durable watermark do not decode.
    Corrupted {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// The disk did not confirm a sync flush within the timeout. The message is written and
    /// will survive a process crash, but was not confirmed durable (RocketMQ FLUSH_DISK_TIMEOUT).
    FlushTimeout { offset: u64, timeout_ms: u64 },
    /// The store was used in a process forked from the one that opened it.
    UsedAfterFork,
    /// A body flagged compressed does not decompress (damaged, an unknown codec, or larger
    /// than the decompression limit), or a body could not be compressed.
    Compression { codec: &'static str, reason: String },
    /// The caller's interruption hook ended a wait (the Python binding: a signal handler
    /// raised, such as Ctrl-C's KeyboardInterrupt). Nothing was changed.
    Interrupted,
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
            Error::InvalidConfig { .. } => "INVALID_CONFIG",
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
            Error::FlushTimeout { .. } => "FLUSH_DISK_TIMEOUT",
            Error::UsedAfterFork => "USED_AFTER_FORK",
            Error::Compression { .. } => "COMPRESSION",
            Error::Interrupted => "INTERRUPTED",
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
            Error::Poisoned { reason } => {
                write!(
                    f,
                    "the store refuses writes after a failed flush ({reason}); reopen it"
                )
            }
            Error::InvalidConfig { field, reason } => write!(f, "invalid config {field}: {reason}"),
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
            Error::MessageNotFound { msg_id } => write!(f, "no message with id {msg_id}"),
            Error::Corrupted {
                path,
                offset,
                reason,
            } => {
                write!(
                    f,
                    "corrupted data in {} at offset {offset}: {reason}",
                    path.display()
                )
            }
            Error::FlushTimeout { offset, timeout_ms } => write!(
                f,
                "disk did not confirm the flush of offset {offset} within {timeout_ms} ms"
            ),
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
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::StoreFull { source, .. } => Some(source),
            _ => None,
        }
    }
}
