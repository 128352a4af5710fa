//! Store: the facade that opens, recovers, runs and closes a message store.
//!
//! Threads of a writable store are services (service.rs), started in this order and stopped in
//! reverse: reput (dispatch), derived (the non-critical derived stores' dispatch, when any is
//! registered), the preparer, then the leader's duties: flush and retention (stores with a
//! directory), then the timer engine (timers and delay levels, timer/), which the leader of
//! shared writers hosts. A shared writer runs those duties only while it is the elected leader
//! of the store's writer processes (leader.rs): its `leader` service starts and stops them. A
//! read-only store starts none: it maps files read-only and follows the writer by re-reading
//! the directories from its own calls (follow.rs). Derived stores (consume queues) are
//! registered in one list (`DerivedStores`) that recovery, flush, retention, page release,
//! topic preparation and close iterate; reads, followers and topic discovery go through the
//! queue index (`dispatch::queue_index`). Only the registration in open.rs names the consume
//! queues (tests/layering.rs).
//!
//! Invariants: one writer per store directory (the `lock` file, taken before recovery), or
//! any number of shared writers (`StoreConfig::shared_writers`: the `lock` file shared, the
//! first opener alone recovering, the last closer alone recording the clean state; lock.rs,
//! commit_log/shared.rs); a store used in a forked child refuses every call; after `close`
//! every call fails with `Closed`.

mod admin;
mod follow;
mod geometry;
pub mod hooks;
mod open;
mod query;
mod read;
pub mod retry;
mod round_robin;
pub mod schedule;
pub mod timer;
pub mod txn;
#[cfg(test)]
mod visibility_tests;
mod write;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::checkpoint::Checkpoint;
use crate::commit_log::CommitLog;
use crate::config::StoreConfig;
use crate::dispatch::derived::DerivedStores;
use crate::dispatch::notifier::Notifier;
use crate::dispatch::queue_index::QueueIndex;
use crate::dispatch::reput::Reput;
use crate::error::{Error, Result};
use crate::flush::FlushService;
use crate::lock::StoreLock;
use crate::mapped_file::mmap::fork_generation;
use crate::recovery::RecoveryReport;
use crate::retention::Retention;
use crate::service::Services;
use crate::topic_config::TopicTable;
use crate::util::kill_point::kill_point;

pub use admin::TopicUpdate;
pub use query::{IndexStatus, KeyQuery, MAX_KEY_QUERY};
pub use read::{GetResult, GetStatus, ReadLimit, TagFilter, MAX_MESSAGES_PER_READ};
pub use round_robin::RoundRobin;
pub use write::{
    BatchPut, PutRequest, PutResult, PutStatus, Routing, Wait, WakeVia, QUICK_BODY_MAX,
};

/// What a store runs besides its built-in parts, registered when it opens.
#[derive(Debug, Default)]
pub struct Extensions {
    /// Derived stores, after the consume queues (dispatch/derived.rs).
    pub derived: Vec<Arc<dyn crate::dispatch::derived::DerivedStore>>,
    /// Put hooks, in the order they run (the store's own timer and delay-level hooks run
    /// after them).
    pub put_hooks: Vec<Arc<dyn hooks::PutHook>>,
}

/// An open message store. Cheap to share: every method takes `&self` and is thread-safe.
#[derive(Debug)]
pub struct Store {
    inner: Arc<Inner>,
    /// Closes the store when dropped: the handle `open` returned. The store's own services
    /// use handles that do not (`Store::handle`).
    owner: bool,
}

#[derive(Debug)]
struct Inner {
    /// The options, with the geometry and message limit the open decided filled in.
    config: StoreConfig,
    /// The store's file sizes (its `meta` file's; geometry.rs).
    geometry: crate::store_meta::Geometry,
    /// Largest accepted body.
    max_message_size: usize,
    root: Option<PathBuf>,
    commit_log: Arc<CommitLog>,
    /// Where reads find a queue's records: the consume queues (their lifecycle runs through
    /// `derived`, like every derived store's).
    index: Arc<dyn QueueIndex>,
    /// Every derived store, in registration order.
    derived: DerivedStores,
    /// The key index (registered in `derived` when this process may build it; a read-only
    /// store reads its files); `None` with `index_enabled` off.
    key_index: Option<Arc<crate::index::IndexService>>,
    /// The put hooks, in the order they run (the timer hook, then the delay-level hook, last).
    hooks: Vec<Arc<dyn hooks::PutHook>>,
    /// What the hooks want together (`hooks::wanted`): a message with none of these marks
    /// runs no hook code.
    hooks_want: crate::message::marks::Marks,
    /// The timer engine: delivers timer and delayed messages (writable stores).
    timers: Option<Arc<timer::TimerService>>,
    /// Transactions: their gate and table (writable stores; txn/).
    txns: Option<Arc<txn::Txns>>,
    /// The timer engine's thread while this process hosts delivery (schedule/mod.rs):
    /// started and stopped on its own, apart from `services`, and stopped before them.
    delivery: Services,
    topics: TopicTable,
    checkpoint: Option<Arc<Checkpoint>>,
    reput: Option<Arc<Reput>>,
    flush: Option<Arc<FlushService>>,
    retention: Option<Arc<Retention>>,
    /// A shared writer's place in the leader election (leader.rs); `None` for other stores,
    /// which are their own leaders.
    leader: Option<Arc<crate::leader::Seat>>,
    /// The preparer's job queue (writable stores).
    preparer: Option<crate::prepare::Preparer>,
    notifier: Arc<Notifier>,
    /// The wake-up word: the writer's (also held by `notifier`) or, on a read-only store, the
    /// one this follower sleeps on.
    wake: Option<Arc<crate::wakeup::WakeWord>>,
    lock: Mutex<Option<StoreLock>>,
    services: Services,
    closed: AtomicBool,
    fork_gen: u64,
    recovery: RecoveryReport,
    /// The store's one generator of client unique ids, shared with its producers.
    uniq: Arc<crate::message::msg_id::UniqueIdGenerator>,
    /// When mapped pages of old files were last released (ms; see `release_pages`).
    last_release: std::sync::atomic::AtomicI64,
    /// Start of the commit-log file the latest read ended in (`u64::MAX`: none yet).
    last_read_file: std::sync::atomic::AtomicU64,
    /// Followers: when the file lists were last checked against the directories
    /// (`follow::monotonic_ms`).
    last_follow: std::sync::atomic::AtomicU64,
    /// Followers: the commit-log end found last (`follower_log_end`; 0: none yet).
    follow_end: std::sync::atomic::AtomicU64,
}

/// How often reads release the mapped pages of old files.
const RELEASE_INTERVAL_MS: i64 = 1000;

impl Store {
    /// Drops this process's mappings of old commit-log and derived-store files (all but the
    /// two newest commit-log files and, for consume queues, each queue's newest file). The
    /// data stays in the page cache and on disk; the next read of it faults it back in. The
    /// flush thread does this every flush interval and reads at most once a second, so the
    /// resident set stays flat while a store many times the size of memory is written or
    /// consumed.
    pub fn release_pages(&self) {
        release_pages(&self.inner.commit_log, &self.inner.derived);
    }

    /// `release_pages` if a second has passed since the last time.
    pub(crate) fn maybe_release_pages(&self) {
        let now = crate::util::clock::now_ms();
        let last = self.inner.last_release.load(Ordering::Relaxed);
        if now.saturating_sub(last) < RELEASE_INTERVAL_MS
            || self
                .inner
                .last_release
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        self.release_pages();
    }

    /// Opens (creating if needed) the store in directory `root`.
    ///
    /// # Errors
    /// `StoreLocked` if another writer holds it, `InvalidConfig`, `ConfigConflict` for a file
    /// size that differs from the store's, `ConfigFile` for a damaged `meta` file, `Corrupted`
    /// for damage below the durable watermark, `Io`/`StoreFull` for file-system failures.
    pub fn open(root: impl AsRef<Path>, config: StoreConfig) -> Result<Store> {
        open::open(Some(root.as_ref()), config, &mut || false)
    }

    /// `open`, asking `interrupted` every few milliseconds while it waits for the writer lock
    /// (`config.lock_wait`); once it says true, the open fails with `Interrupted`, having
    /// created at most the store directory and its lock file.
    ///
    /// # Errors
    /// As `open`, and `Interrupted`.
    pub fn open_interruptible(
        root: impl AsRef<Path>,
        config: StoreConfig,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Result<Store> {
        open::open(Some(root.as_ref()), config, interrupted)
    }

    /// `open`, registering `extra` derived stores after the consume queues: each is recovered,
    /// dispatched to, flushed, expired and closed with the store (dispatch/derived.rs). A
    /// non-critical one never holds back consumers.
    ///
    /// # Errors
    /// As `open`, and any failure of a store's `load` or `recover`.
    pub fn open_with_derived(
        root: impl AsRef<Path>,
        config: StoreConfig,
        extra: Vec<Arc<dyn crate::dispatch::derived::DerivedStore>>,
    ) -> Result<Store> {
        Store::open_extended(
            root,
            config,
            Extensions {
                derived: extra,
                ..Extensions::default()
            },
        )
    }

    /// `open`, registering what `ext` holds: derived stores (as `open_with_derived`) and put
    /// hooks, which run in the given order on every put (store/hooks.rs).
    ///
    /// # Errors
    /// As `open_with_derived`.
    pub fn open_extended(
        root: impl AsRef<Path>,
        config: StoreConfig,
        ext: Extensions,
    ) -> Result<Store> {
        open::open_with(Some(root.as_ref()), config, &mut || false, ext)
    }

    /// Opens a store that lives in anonymous memory only (nothing on disk).
    pub fn open_in_memory(config: StoreConfig) -> Result<Store> {
        open::open(
            None,
            StoreConfig {
                read_only: false,
                ..config
            },
            &mut || false,
        )
    }

    /// A handle on `inner` that does not close the store when dropped (the store's services
    /// hold the store weakly and act on it through one).
    pub(in crate::store) fn handle(inner: Arc<Inner>) -> Store {
        Store {
            inner,
            owner: false,
        }
    }

    fn check_usable(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if fork_generation() != self.inner.fork_gen {
            return Err(Error::UsedAfterFork);
        }
        Ok(())
    }

    /// The store directory (`None` for an in-memory store).
    pub fn root(&self) -> Option<&Path> {
        self.inner.root.as_deref()
    }

    /// The configuration in force: the options given, with the file sizes and the message
    /// limit the store uses filled in.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// The store's file sizes: those its `meta` file records (FORMAT.md §11).
    pub fn geometry(&self) -> crate::store_meta::Geometry {
        self.inner.geometry
    }

    /// The largest body a put accepts.
    pub fn max_message_size(&self) -> usize {
        self.inner.max_message_size
    }

    /// True if opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.inner.config.read_only
    }

    /// True after `close`.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// What recovery did at open.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner.recovery
    }

    /// The store's generator of client unique ids (UNIQ_KEY): every producer of this store
    /// takes its ids from it, so they are unique across producers. A producer keeps the handle
    /// (its counter then sits in an allocation of its own, apart from the store's state).
    pub fn unique_ids(&self) -> Arc<crate::message::msg_id::UniqueIdGenerator> {
        Arc::clone(&self.inner.uniq)
    }

    /// Commit-log offsets: (oldest byte, one past the newest record).
    pub fn commit_log_range(&self) -> (u64, u64) {
        if self.inner.config.read_only {
            let end = self.follower_log_end();
            return (self.inner.commit_log.min_offset(), end);
        }
        (
            self.inner.commit_log.min_offset(),
            self.inner.commit_log.max_offset(),
        )
    }

    /// Each derived store's dispatch state (critical ones first): what it was given and the
    /// failure it is retrying, if any. Empty for a read-only store (it dispatches nothing).
    pub fn derived_progress(&self) -> Vec<crate::dispatch::reput::StoreState> {
        self.inner
            .reput
            .as_ref()
            .map(|r| r.progress())
            .unwrap_or_default()
    }

    /// Offset below which every record is dispatched to its consume queue. A follower does not
    /// dispatch (it reads the writer's queues): it reports its commit-log end.
    pub fn dispatched_offset(&self) -> u64 {
        match &self.inner.reput {
            Some(r) => r.dispatched_offset(),
            None if self.inner.config.read_only => self.follower_log_end(),
            None => self.inner.commit_log.max_offset(),
        }
    }

    /// The checkpoint as last written (`None` for in-memory and checkpoint-less read-only opens).
    pub fn checkpoint(&self) -> Option<crate::checkpoint::CheckpointData> {
        self.inner.checkpoint.as_ref().map(|c| c.get())
    }

    /// Offset below which the commit log is durable.
    pub fn flushed_offset(&self) -> u64 {
        self.inner.commit_log.flushed_offset()
    }

    /// Forces the commit log and the derived stores to disk and updates the checkpoint, after
    /// the files being created in the background are complete.
    pub fn flush(&self) -> Result<()> {
        self.check_usable()?;
        // Files being made in the background are finished first: after a flush, nothing is
        // being created in the store's directories (and the new files are covered).
        if let Some(p) = &self.inner.preparer {
            p.wait_for_files(std::time::Duration::from_secs(10));
        }
        match &self.inner.flush {
            Some(f) => f.flush_all(),
            None => Ok(()),
        }
    }

    /// Deletes expired commit-log files now (the retention service also does it every 10 s),
    /// and younger ones while the disk is used above `disk_force_clean_ratio`
    /// and the derived-store files that only point into them. Returns how many commit-log
    /// files went. A file is expired once the store's clock (`StoreConfig::clock`) reads at
    /// least its modification time plus `file_reserved_time`. A shared writer that is not
    /// the leader deletes nothing (0): retention is the leader's.
    pub fn delete_expired_files(&self) -> Result<usize> {
        self.check_usable()?;
        if !self.is_leader() {
            return Ok(0);
        }
        match &self.inner.retention {
            Some(r) => r.delete_expired(),
            None => Ok(0),
        }
    }

    /// The commit-log files retention deleted in this process (its service's passes and
    /// `delete_expired_files`) since the last call, oldest first, and how many more it
    /// deleted that fell out of its bounded record. Empty for a store in memory or read-only.
    pub fn take_deleted_files(&self) -> (Vec<crate::retention::DeletedFile>, u64) {
        self.inner
            .retention
            .as_ref()
            .map(|r| r.take_deleted())
            .unwrap_or_default()
    }

    /// Whether this store runs the background duties (flush, checkpoint, retention): always
    /// for a writer of its own; among shared writers, the one elected (leader.rs). False for a
    /// read-only store.
    pub fn is_leader(&self) -> bool {
        if self.inner.config.read_only {
            return false;
        }
        self.inner.leader.as_ref().is_none_or(|s| s.is_leader())
    }

    /// Waits until this store leads (`is_leader`), or `timeout` passes, or it closes. A shared
    /// writer takes over at once when the leader's process closes its store or dies.
    pub fn wait_leader(&self, timeout: std::time::Duration) -> bool {
        match &self.inner.leader {
            Some(seat) => seat.wait_leader(timeout),
            None => self.is_leader(),
        }
    }

    /// Stops the threads, flushes everything, removes the abort marker and releases the lock.
    /// Idempotent.
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if fork_generation() != self.inner.fork_gen {
            // A forked child must not flush, unlink or unlock on the parent's behalf.
            return Ok(());
        }
        self.inner.shutdown()
    }
}

impl Inner {
    /// A shared writer closing: `open.lock` (held until the close ends) and whether this is
    /// the last writer. Any other store: nothing, and it is the last.
    fn closing_shared(&self) -> (Option<crate::lock::OpenLock>, bool) {
        let (Some(root), true) = (&self.root, self.config.shared_writers) else {
            return (None, true);
        };
        let closing = crate::lock::OpenLock::acquire(root, self.config.file_mode, &mut || false);
        let held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        // Unsure whether others write (the lock could not be asked): not the last.
        let last = closing.is_ok() && held.as_ref().is_some_and(|l| l.is_last().unwrap_or(false));
        (closing.ok(), last)
    }

    fn shutdown(&self) -> Result<()> {
        // Threads blocked waiting for messages return (`closed` is set); a follower's sleepers
        // on the wake-up word are woken when it is released below.
        self.notifier.notify();
        // Delivery first: its re-puts use the services stopped next.
        self.delivery.stop_all();
        self.services.stop_all();
        let mut result = Ok(());
        // A shared writer closes under `open.lock`; only the last one records the clean state
        // and compacts the topic journal (lock.rs): the others' appends go on meanwhile.
        let (_closing, last) = self.closing_shared();
        if let (Some(f), true) = (&self.flush, last) {
            // The last one alone: its checkpoint is the store's, whoever led.
            f.set_leading();
        }
        if let (Some(f), Some(r)) = (&self.flush, &self.reput) {
            // The last shared writer first indexes what the others appended since it last
            // looked: its flush and clean record then cover the whole log.
            let followed = match self.commit_log.shared() {
                Some(_) if last => self
                    .commit_log
                    .follow_shared()
                    .and_then(|()| r.dispatch_all()),
                _ => Ok(()),
            };
            result = followed.and_then(|()| f.flush_all());
            if let (Ok(()), Some(t)) = (&result, &self.timers) {
                // The log is durable through every delivery: the progress files may say so.
                result = t.persist_after_flush(&self.commit_log);
            }
            if let (Ok(()), Some(t), true) = (&result, &self.txns, f.leading()) {
                // The leader (or the last closer) leaves the table's snapshot at the log's end.
                result = t.persist(&self.commit_log, txn::Wait::Yes, || f.flush_commit_log());
            }
            if result.is_ok() && r.has_followers() {
                // The non-critical stores get what their stopped thread had not given them.
                r.follow();
                result = f.flush_logics_and_checkpoint();
            }
            let clean =
                last && result.is_ok() && r.behind() == 0 && self.commit_log.poisoned().is_none();
            if clean {
                if let Some(root) = &self.root {
                    // The record first: the abort marker, removed last, is what makes it
                    // trusted (consume_queue/clean.rs).
                    result = self
                        .derived
                        .record_clean(self.commit_log.max_offset())
                        .and_then(|()| {
                            kill_point!("store.clean_recorded");
                            crate::lock::remove_abort(root)
                        });
                }
            }
        }
        // The whole topic table into topics.json, the file RocketMQ reads (a no-op without
        // journal records, and for a read-only store, which has no journal); only the last of
        // shared writers, the others' appends going on meanwhile.
        let topics = self.topics.close(last);
        if result.is_ok() {
            result = topics;
        }
        // Unmap and close every file now rather than when the last handle to the store goes
        // (a closed store must not keep hundreds of MiB mapped and descriptors open).
        if let Some(r) = &self.reput {
            r.release_file();
        }
        self.commit_log.stop_preallocator();
        self.commit_log.close_files();
        self.derived.close();
        if let Some(cp) = &self.checkpoint {
            cp.close();
        }
        if let Some(w) = &self.wake {
            w.release();
        }
        // After the last flush and checkpoint: the next leader takes over from here.
        if let Some(seat) = &self.leader {
            seat.resign();
        }
        if let Some(t) = &self.timers {
            t.gate().release();
        }
        if let Some(t) = &self.txns {
            t.release();
        }
        if let Some(shm) = self.commit_log.shared() {
            shm.release();
        }
        *self.lock.lock().unwrap_or_else(|p| p.into_inner()) = None;
        result
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.owner {
            let _ = self.close();
        }
    }
}

/// See `Store::release_pages`.
pub(crate) fn release_pages(commit_log: &CommitLog, derived: &DerivedStores) {
    commit_log.files().release_pages(2);
    derived.release_pages();
}
