//! QueueIndex: the read side of the derived store that maps each (topic, queue) to its records
//! in the commit log (consume queues now; RocketMQ 5's `ConsumeQueueStoreInterface` is the
//! same seam). The store's read path, topic discovery and followers use only these traits, so
//! they never depend on how the index is kept on disk.
//!
//! Invariants an implementation keeps
//! - Entry `k` of a queue describes the record whose queue offset is `k`, and exists only once
//!   that record is published in the commit log.
//! - `min_offset() <= max_offset()`; `max_offset()` is the next queue offset to be written;
//!   every entry in `[min_offset(), max_offset())` can be read (a missing one is damage).
//! - Entries are in commit-log order within a queue.
//!
//! Cost: a read makes a few calls per request through these traits (lookup, bounds, one batch
//! of entries), never one per entry.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Result;

/// What a queue holds at one queue offset: where its record is in the commit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueEntry {
    /// Commit-log offset of the record.
    pub offset: u64,
    /// Record size; 0 for a slot that stands for no record (a placeholder before a queue's
    /// first message): readers step over it.
    pub size: u32,
    /// Tags code of the record (`message::tags`), for filtering without reading it.
    pub tags_code: i64,
}

impl QueueEntry {
    /// A slot that stands for no record.
    pub const EMPTY_SLOT: QueueEntry = QueueEntry {
        offset: 0,
        size: 0,
        tags_code: 0,
    };

    /// False for a slot that stands for no record.
    #[inline]
    pub fn has_record(&self) -> bool {
        self.size != 0
    }
}

/// One queue of the index, as readers see it.
pub trait LogicalQueue: Send + Sync + std::fmt::Debug {
    /// Lowest queue offset still held.
    fn min_offset(&self) -> u64;

    /// Next queue offset to be written.
    fn max_offset(&self) -> u64;

    /// The entry at queue offset `k` (`None`: absent, not yet written, or damaged).
    fn entry(&self, k: u64) -> Option<QueueEntry>;

    /// Appends `(k, entry)` for up to `max - out.len()` consecutive entries from queue offset
    /// `from`, stopping at the end of the data or at the first entry that cannot be read.
    fn entries(&self, from: u64, max: usize, out: &mut Vec<(u64, QueueEntry)>);

    /// A reader moved from queue offset `from` to `to`: the mappings of the index file it
    /// left behind may be dropped (the data stays in the page cache and on disk).
    fn release_behind(&self, from: u64, to: u64);

    /// The file holding entry `k` and the byte position of the entry in it, for an error
    /// report (an empty path when the queue has no such file, or lives in memory).
    fn locate(&self, k: u64) -> (PathBuf, u64);

    /// A follower (read-only open): re-reads the queue's files from disk (`verify`: also
    /// notices files replaced under the same name), then moves the minimum past entries whose
    /// records are below `log_min`, which the commit log no longer holds.
    fn follow(&self, verify: bool, log_min: u64);

    /// Raises the minimum past every entry whose record lies below commit-log offset `phy`:
    /// those records belong to an earlier topic of the same name (a deleted one), which the
    /// readers of the current topic must not see. Entries point at increasing commit-log
    /// offsets, so the entries kept are a suffix. Only ever raises the minimum.
    fn skip_below(&self, phy: u64) {
        let _ = phy;
    }
}

/// Every queue of the index.
pub trait QueueIndex: Send + Sync + std::fmt::Debug {
    /// The queue, if it exists (a follower also finds queues the writer created since).
    ///
    /// # Errors
    /// Loading the queue's files at its first use failed (consume_queue/store.rs: a queue
    /// known from the clean-shutdown record whose files do not match it).
    fn queue(
        &self,
        topic: &str,
        queue_id: u32,
    ) -> crate::error::Result<Option<Arc<dyn LogicalQueue>>>;

    /// The topics that have queues on disk, each with its highest queue id plus one, sorted
    /// by name (a store whose topic table was lost names its topics from these).
    ///
    /// # Errors
    /// I/O failures reading the directories.
    fn discover_topics(&self) -> Result<Vec<(String, u32)>>;

    /// `LogicalQueue::follow(true, log_min)` on every queue opened so far (a follower's
    /// periodic check against the directories).
    fn follow_all(&self, log_min: u64);
}
