//! What a verification found: the damage (file, offset, kind, messages affected) and what each
//! step checked. Serialised as JSON for the Python binding and the repair report's file.

use serde::Serialize;

/// A message that damage makes unreadable (or that a repair drops), with what is known of it.
/// Fields that could not be recovered from the log or a consume queue are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AffectedMessage {
    /// Commit-log offset of the record.
    pub commit_log_offset: u64,
    /// Record size, when known.
    pub size: Option<u32>,
    /// Topic.
    pub topic: Option<String>,
    /// Queue id.
    pub queue_id: Option<u32>,
    /// Offset in its consume queue.
    pub queue_offset: Option<u64>,
    /// The offset message id (store host and commit-log offset).
    pub msg_id: String,
    /// The client's unique id (`UNIQ_KEY`), when the record's properties could be read.
    pub unique_id: Option<String>,
}

/// What kind of damage was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DamageKind {
    /// A commit-log record fails its checks (length, magic, structure, a CRC).
    LogRecord,
    /// Zeros where whole records follow: a lost page or an unwritten range.
    LogZeroed,
    /// The commit log ends before its durable end (mqlite's checkpoint).
    LogShort,
    /// A consume-queue unit does not decode, or leaves a hole before later units.
    QueueUnit,
    /// A consume-queue unit decodes but does not index its record (offset, size, topic, queue,
    /// queue offset or tags code).
    QueueMismatch,
    /// A key-index entry points outside the log or at a record with another key.
    IndexEntry,
}

/// One damaged range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Damage {
    /// The damaged file.
    pub file: String,
    /// Where the damage starts: a commit-log offset for the log, the queue's byte offset
    /// (unit index × 20) for a consume queue, the byte position for an index file.
    pub offset: u64,
    /// Position of the damage inside `file`.
    pub file_offset: u64,
    /// Damaged bytes from `offset` (for the log: up to the next whole record or file end).
    pub length: u64,
    /// The kind.
    pub kind: DamageKind,
    /// What failed, in words.
    pub detail: String,
    /// The messages affected.
    pub messages: Vec<AffectedMessage>,
}

/// What one step of the verification checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepReport {
    /// The step (`commit_log`, `consume_queues`, `index`).
    pub name: String,
    /// `ok`, `damaged` or `skipped`.
    pub status: String,
    /// What it checked, or why it was skipped.
    pub detail: String,
}

/// The result of [`super::verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The store's root.
    pub store: String,
    /// True when no damage was found.
    pub ok: bool,
    /// Lowest commit-log offset held.
    pub log_min: u64,
    /// End of the valid data the scan reached.
    pub log_end: u64,
    /// The durable end mqlite's checkpoint records (every byte below it was flushed).
    pub durable_end: u64,
    /// Whole records read.
    pub records: u64,
    /// Consume-queue units checked.
    pub units: u64,
    /// Bytes read.
    pub bytes_scanned: u64,
    /// Start of a range past the durable end that a writer may still be filling (not damage).
    pub in_flight_from: Option<u64>,
    /// Every damaged range found, commit log first, in offset order.
    pub damage: Vec<Damage>,
    /// What each step checked.
    pub steps: Vec<StepReport>,
}
