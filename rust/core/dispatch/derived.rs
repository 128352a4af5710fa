//! DerivedStore: the life of anything built from the commit log (consume queues now; the index,
//! the timer log and transaction state implement it when they land), and `DerivedStores`, the
//! registered list the store's recovery, flush, retention and close iterate.
//!
//! Lifecycle, in the order the store calls it (RocketMQ's FileQueueLifeCycle):
//! 1. `load(abnormal)` once recovery has scanned the commit log and changed nothing yet, or
//!    `attach(log_end, next_offset)` for a later shared writer (recovery.rs `attach`);
//! 2. `recover(log, end, resume_from)`: drop what points at or past the log's recovered end,
//!    verify the tail written after the checkpoint, and say where dispatch must resume;
//! 3. `recovered()` once the checkpoint holds every resume point (files set aside in step 2
//!    may go), then dispatch of the recovered records to the critical stores, then
//!    `ready(log)` and `use_preparer(preparer)`;
//! 4. `dispatch*` (the `Dispatcher` supertrait) while the store runs, `flush(progress)` every
//!    flush interval, `delete_expired(log_min)` after retention deleted commit-log files,
//!    `release_pages()` to unmap old files, `prepare_topic(topic, queues)` when a topic is
//!    created or grows;
//! 5. `close()` after the services stopped and the final flush.
//!
//! A read-only store calls none of these but `close`: it reads the queue index
//! (queue_index.rs) directly.
//!
//! Invariants
//! - A *critical* store is dispatched in commit-log order at the dispatch cursor consumers
//!   wait on, inline by producers when it declares `quick`; its failure stops dispatch, and the
//!   checkpoint's dispatched offset is the critical cursor.
//! - A *non-critical* store (best effort, like RocketMQ's index) has a cursor of its own that
//!   only its follower thread (and a last pass at close) moves, never a producer: when it
//!   fails, lags or blocks, consumers and the critical stores go on without it, and its
//!   progress is recorded in the checkpoint separately (FORMAT.md §5.1). Records retention
//!   deleted before it reached them are skipped.
//! - Stores are named (`Dispatcher::name`) by 1 to 16 printable ASCII bytes, distinct, at most
//!   32 of them: the checkpoint's progress table key (checked at open).
//! - Dispatch is idempotent: after a crash a store may see a record again.

use std::sync::Arc;

use super::Dispatcher;
use crate::commit_log::CommitLog;
use crate::error::{Error, Result};
use crate::prepare::Preparer;

/// How far a derived store's data is durable: every record below `offset` (a commit-log
/// record boundary) is in it, and `store_timestamp` is the store time of the last of them
/// (0 when unknown). Recorded in the checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Commit-log offset below which every record is durably reflected.
    pub offset: u64,
    /// Store timestamp of the last record below `offset`.
    pub store_timestamp: i64,
}

/// The shared table's next offset of (topic, queue id), read by the append lock's holder
/// (`None`: the table has no such queue).
pub type NextOffset<'a> = dyn Fn(&str, u32) -> Result<Option<u64>> + 'a;

/// Everything built from the commit log. See the module doc for the order of calls.
pub trait DerivedStore: Dispatcher {
    /// Whether consumers depend on it (see the module doc). Consume queues are critical.
    fn critical(&self) -> bool {
        true
    }

    /// Whether `dispatch_quick` may accept records (a producer's inline dispatch). When a
    /// critical store declares false, every send leaves dispatch to the reput thread.
    fn quick(&self) -> bool {
        false
    }

    /// Loads the files found on disk (writers zero a torn tail after an `abnormal` shutdown).
    ///
    /// # Errors
    /// I/O failures and damage that is not a torn tail.
    fn load(&self, abnormal: bool) -> Result<()>;

    /// A later shared writer's load (recovery.rs `attach`), holding the append lock beside
    /// running writers: the commit log ends at `log_end`, and `next_offset` gives the shared
    /// table's next offset of a queue (`None`: not in the table). `recover` follows, as after
    /// `load`. Loads the files (`load(false)`) unless the store can defer them.
    ///
    /// # Errors
    /// As `load`.
    fn attach(&self, log_end: u64, next_offset: &NextOffset<'_>) -> Result<()> {
        let _ = (log_end, next_offset);
        self.load(false)
    }

    /// Drops data pointing at or past `log_end` (the recovered end of the commit log), checks
    /// what was written after `resume_from` (this store's durable progress, clamped to the
    /// log) against `log`, and returns where dispatch must resume for it (`<= resume_from`).
    ///
    /// # Errors
    /// I/O failures; `Corrupted` for damaged log records the check relies on.
    fn recover(&self, log: &CommitLog, log_end: u64, resume_from: u64) -> Result<u64>;

    /// Recovery is durable (the checkpoint holds the resume point): files `recover` set aside
    /// may be deleted.
    ///
    /// # Errors
    /// I/O failures.
    fn recovered(&self) -> Result<()> {
        Ok(())
    }

    /// The recovered records are dispatched and the store is about to serve: correct the
    /// minimum to the log's, and hand the appender what it needs (consume queues: the next
    /// queue offset of every queue).
    fn ready(&self, log: &CommitLog) {
        let _ = log;
    }

    /// Creates files ahead of need through `preparer` from now on (dropped at `close`).
    fn use_preparer(&self, preparer: Preparer) {
        let _ = preparer;
    }

    /// Makes durable everything dispatched to it, which was `dispatched` when the flush began;
    /// returns the progress now durable (at most `dispatched`).
    ///
    /// # Errors
    /// I/O failures (the store is then poisoned).
    fn flush(&self, dispatched: Progress) -> Result<Progress>;

    /// Deletes data that only describes records below `log_min` (retention deleted them).
    /// Returns how many files went.
    ///
    /// # Errors
    /// I/O failures (retried at the next pass).
    fn delete_expired(&self, log_min: u64) -> Result<usize>;

    /// Unmaps this process's mappings of old files (the data stays on disk).
    fn release_pages(&self) {}

    /// Topic `topic` was created or grew to `queues` queues (before the call that did it
    /// returns): make ready what its first records will need, so that dispatching them creates
    /// nothing. Most stores need nothing.
    ///
    /// # Errors
    /// I/O failures (the topic change is reported as failed).
    fn prepare_topic(&self, topic: &str, queues: u32) -> Result<()> {
        let _ = (topic, queues);
        Ok(())
    }

    /// The store closes cleanly (after the final flush; every record below `log_end` is
    /// dispatched and durable in it): record durably whatever lets the next open skip reading
    /// its files (consume queues: clean.rs). Nothing by default.
    ///
    /// # Errors
    /// I/O failures (the close is then not clean: the next open recovers as after a crash).
    fn record_clean(&self, log_end: u64) -> Result<()> {
        let _ = log_end;
        Ok(())
    }

    /// Drops the preparer and unmaps every file (store close, after the final flush).
    fn close(&self);
}

/// The registered derived stores, in registration order (critical ones are dispatched in this
/// order too).
#[derive(Debug, Clone, Default)]
pub struct DerivedStores {
    all: Vec<Arc<dyn DerivedStore>>,
}

impl DerivedStores {
    /// The stores `all`, in order.
    pub fn new(all: Vec<Arc<dyn DerivedStore>>) -> Self {
        DerivedStores { all }
    }

    /// Checks that the checkpoint can record stores of these names (FORMAT.md §5.1): at most
    /// `MAX_PROGRESS_ENTRIES`, distinct, each 1 to `PROGRESS_NAME_LEN` printable ASCII bytes.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first name that does not fit.
    pub fn check_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<()> {
        use crate::checkpoint::{MAX_PROGRESS_ENTRIES, PROGRESS_NAME_LEN};
        let invalid = |reason: String| Error::InvalidArgument {
            field: "derived stores",
            reason,
        };
        let mut seen: Vec<&str> = Vec::new();
        for name in names {
            if name.is_empty()
                || name.len() > PROGRESS_NAME_LEN
                || !name.bytes().all(|b| b.is_ascii_graphic())
            {
                return Err(invalid(format!(
                    "name {name:?} is not 1 to {PROGRESS_NAME_LEN} printable ASCII bytes"
                )));
            }
            if seen.contains(&name) {
                return Err(invalid(format!("name {name:?} is registered twice")));
            }
            seen.push(name);
        }
        if seen.len() > MAX_PROGRESS_ENTRIES {
            return Err(invalid(format!(
                "{} registered, at most {MAX_PROGRESS_ENTRIES}",
                seen.len()
            )));
        }
        Ok(())
    }

    /// Every store, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn DerivedStore>> {
        self.all.iter()
    }

    /// Number of stores.
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// True with no store registered.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// `load` on each.
    ///
    /// # Errors
    /// The first failure.
    pub fn load(&self, abnormal: bool) -> Result<()> {
        self.all.iter().try_for_each(|s| s.load(abnormal))
    }

    /// `attach` on each.
    ///
    /// # Errors
    /// The first failure.
    pub fn attach(&self, log_end: u64, next_offset: &NextOffset<'_>) -> Result<()> {
        self.all
            .iter()
            .try_for_each(|s| s.attach(log_end, next_offset))
    }

    /// `recovered` on each.
    ///
    /// # Errors
    /// The first failure.
    pub fn recovered(&self) -> Result<()> {
        self.all.iter().try_for_each(|s| s.recovered())
    }

    /// `ready` on each.
    pub fn ready(&self, log: &CommitLog) {
        self.all.iter().for_each(|s| s.ready(log));
    }

    /// `use_preparer` on each.
    pub fn use_preparer(&self, preparer: &Preparer) {
        self.all
            .iter()
            .for_each(|s| s.use_preparer(preparer.clone()));
    }

    /// `delete_expired` on each; every store is asked even after one failed.
    ///
    /// # Errors
    /// The first failure.
    pub fn delete_expired(&self, log_min: u64) -> Result<usize> {
        let mut deleted = 0;
        let mut first_err = None;
        for s in &self.all {
            match s.delete_expired(log_min) {
                Ok(n) => deleted += n,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(deleted), Err)
    }

    /// `release_pages` on each.
    pub fn release_pages(&self) {
        self.all.iter().for_each(|s| s.release_pages());
    }

    /// `prepare_topic` on each.
    ///
    /// # Errors
    /// The first failure.
    pub fn prepare_topic(&self, topic: &str, queues: u32) -> Result<()> {
        self.all
            .iter()
            .try_for_each(|s| s.prepare_topic(topic, queues))
    }

    /// `record_clean` on each.
    ///
    /// # Errors
    /// The first failure.
    pub fn record_clean(&self, log_end: u64) -> Result<()> {
        self.all.iter().try_for_each(|s| s.record_clean(log_end))
    }

    /// `close` on each.
    pub fn close(&self) {
        self.all.iter().for_each(|s| s.close());
    }
}
