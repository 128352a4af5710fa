//! Dispatch: turning commit-log records into derived data. `Dispatcher` is the per-record
//! step; `derived::DerivedStore` adds the rest of a derived store's life (consume queues now;
//! the index and the timer wheel implement the same traits when they land);
//! `queue_index::QueueIndex` is how readers find a queue's records.

pub mod derived;
mod handoff;
pub mod notifier;
pub mod queue_index;
pub mod reput;

use crate::error::Result;
use crate::message::tags;
use crate::message::RecordView;

/// What a dispatcher learns about one record (decoded without its CRC or body).
#[derive(Debug, Clone, Copy)]
pub struct DispatchRequest<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Queue id.
    pub queue_id: u32,
    /// Commit-log offset of the record.
    pub commit_log_offset: u64,
    /// Record size.
    pub size: u32,
    /// Tags code (`message::tags::of_record`).
    pub tags_code: i64,
    /// Store timestamp.
    pub store_timestamp: i64,
    /// Queue offset.
    pub queue_offset: u64,
    /// SYSFLAG.
    pub sysflag: i32,
    /// Encoded properties (KEYS and UNIQ_KEY for the index).
    pub properties: &'a [u8],
    /// Prepared transaction offset.
    pub prepared_transaction_offset: i64,
}

impl<'a> DispatchRequest<'a> {
    /// Builds the request for a decoded record.
    pub fn from_record(v: &RecordView<'a>) -> Self {
        let props = v.properties();
        DispatchRequest {
            topic: v.topic(),
            queue_id: v.queue_id(),
            commit_log_offset: v.physical_offset(),
            size: v.total_size(),
            tags_code: tags::of_stored(v.topic(), props, v.store_timestamp()),
            store_timestamp: v.store_timestamp(),
            queue_offset: v.queue_offset(),
            sysflag: v.sysflag(),
            properties: props,
            prepared_transaction_offset: v.prepared_transaction_offset(),
        }
    }
}

/// A consumer of commit-log records. Implementations must be idempotent: after a crash the same
/// record may be dispatched again.
pub trait Dispatcher: Send + Sync + std::fmt::Debug {
    /// Short name for errors and stats.
    fn name(&self) -> &'static str;
    /// Handles one record.
    ///
    /// # Errors
    /// An I/O failure writing derived data; the reput service stops at this record and retries.
    fn dispatch(&self, req: &DispatchRequest<'_>) -> Result<()>;
    /// Handles consecutive records (an appended batch) in commit-log order; the same as
    /// `dispatch` on each, which implementations may do with less locking.
    ///
    /// # Errors
    /// As `dispatch`; the records before the failing one may have been handled.
    fn dispatch_batch(&self, reqs: &[DispatchRequest<'_>]) -> Result<()> {
        reqs.iter().try_for_each(|r| self.dispatch(r))
    }

    /// `dispatch_batch` for a caller that must not wait (a producer holding Python's GIL):
    /// handles the records and returns true only if that needs no file created, opened or
    /// rolled and no lock waited for; otherwise may have handled some of them and returns
    /// false, and the reput thread dispatches them all again (dispatch is idempotent). The
    /// default refuses always.
    ///
    /// # Errors
    /// As `dispatch`.
    fn dispatch_quick(&self, reqs: &[DispatchRequest<'_>]) -> Result<bool> {
        let _ = reqs;
        Ok(false)
    }
}
