//! Flush service: makes the commit log, consume queues and checkpoint durable.
//!
//! - Async mode: every `flush_interval` the thread msyncs the commit log's unflushed range.
//! - Sync mode (group commit): a put registers the end offset it needs and waits; the thread
//!   msyncs once for every put that arrived meanwhile, then wakes them. A put not confirmed
//!   within `sync_flush_timeout` returns FLUSH_DISK_TIMEOUT (its bytes are written, only not
//!   confirmed durable).
//!   A pipelined put only registers its end offset (`request_flush`) and confirms it later
//!   with `wait_flushed`, so one msync can cover many puts of one thread.
//! - Both modes: consume queues are flushed every interval, then the checkpoint records the
//!   flushed commit-log offset and the dispatched offset captured *before* the queue flush,
//!   and the mappings of old files are released (`store::release_pages`; no data changes).
//! - Retention: every `CLEAN_INTERVAL` a pass deletes every expired commit-log file (oldest
//!   first) and the consume-queue files that only index deleted records (`delete_expired_until`).
//!   A pass stops after `DELETE_BUDGET`; the next one then runs right after the next flush,
//!   until none is left, so the store is reclaimed as fast as the file system deletes files.
//!
//! Invariant: a failed msync/fsync poisons the store (every later put fails, waiting puts fail)
//! and is never retried as if it had worked: Linux may mark the failed pages clean.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::checkpoint::{Checkpoint, CheckpointData};
use crate::commit_log::CommitLog;
use crate::config::FlushMode;
use crate::consume_queue::store::ConsumeQueueStore;
use crate::dispatch::reput::Reput;
use crate::error::{Error, Result};
use crate::util::clock::now_ms;

/// How often expired files are looked for.
const CLEAN_INTERVAL: Duration = Duration::from_secs(10);

/// The longest one pass of the flush thread spends deleting expired files. What is left is
/// deleted by the passes that follow, each right after a flush, so a backlog of expired files
/// never holds a flush (and the sends waiting on it) up for longer.
const DELETE_BUDGET: Duration = Duration::from_millis(20);

/// What a retention pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deleted {
    /// Commit-log files deleted.
    pub files: usize,
    /// The pass stopped at its time budget with expired files possibly left.
    pub more: bool,
}

#[derive(Debug, Default)]
struct State {
    requested: u64,
    flushed: u64,
    /// The failure that poisoned the store (see `Error::Poisoned`).
    poisoned: Option<Arc<Error>>,
}

/// The flush service.
#[derive(Debug)]
pub struct FlushService {
    commit_log: Arc<CommitLog>,
    cqs: Arc<ConsumeQueueStore>,
    reput: Arc<Reput>,
    checkpoint: Option<Arc<Checkpoint>>,
    mode: FlushMode,
    interval: Duration,
    /// Commit-log files last modified longer ago than this are deleted (`delete_expired`).
    pub retention: Option<Duration>,
    state: Mutex<State>,
    requested: Condvar,
    done: Condvar,
    stop: AtomicBool,
    poisoned_flag: AtomicBool,
    last_physic_ts: Mutex<i64>,
}

impl FlushService {
    /// A service for the given parts.
    pub fn new(
        commit_log: Arc<CommitLog>,
        cqs: Arc<ConsumeQueueStore>,
        reput: Arc<Reput>,
        checkpoint: Option<Arc<Checkpoint>>,
        mode: FlushMode,
        interval: Duration,
    ) -> Self {
        let flushed = commit_log.flushed_offset();
        FlushService {
            commit_log,
            cqs,
            reput,
            checkpoint,
            mode,
            interval,
            retention: None,
            state: Mutex::new(State {
                requested: flushed,
                flushed,
                poisoned: None,
            }),
            requested: Condvar::new(),
            done: Condvar::new(),
            stop: AtomicBool::new(false),
            poisoned_flag: AtomicBool::new(false),
            last_physic_ts: Mutex::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sync mode: waits until `offset` is durable. `Ok(true)` when confirmed, `Ok(false)` on
    /// timeout (FLUSH_DISK_TIMEOUT), `Err(Poisoned)` if the flush failed.
    pub fn wait_flushed(&self, offset: u64, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let mut s = self.lock();
        if s.flushed >= offset {
            return Ok(true);
        }
        if s.requested < offset {
            s.requested = offset;
            self.requested.notify_one();
        }
        loop {
            if let Some(cause) = &s.poisoned {
                return Err(Error::Poisoned {
                    cause: Arc::clone(cause),
                });
            }
            if s.flushed >= offset {
                return Ok(true);
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Ok(false);
            };
            s = match self.done.wait_timeout(s, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Sync mode: asks the flush thread to make `offset` durable, without waiting.
    pub fn request_flush(&self, offset: u64) {
        let mut s = self.lock();
        if s.flushed < offset && s.requested < offset {
            s.requested = offset;
            self.requested.notify_one();
        }
    }

    /// Flushes the commit log now; poisons the store on failure.
    pub fn flush_commit_log(&self) -> Result<u64> {
        let ts = self.commit_log.last_store_timestamp();
        match self.commit_log.files().flush() {
            Ok(flushed) => {
                self.commit_log.set_flushed_offset(flushed);
                let mut s = self.lock();
                s.flushed = s.flushed.max(flushed);
                self.done.notify_all();
                drop(s);
                if self.mode == FlushMode::Sync {
                    self.reput.try_dispatch();
                }
                self.last_physic_ts.lock().map(|mut t| *t = ts).ok();
                Ok(flushed)
            }
            Err(e) => {
                let cause = Error::poisoned_by(&e);
                self.commit_log.poison(Arc::clone(&cause));
                let mut s = self.lock();
                s.poisoned.get_or_insert(cause);
                self.poisoned_flag.store(true, Ordering::Release);
                self.done.notify_all();
                Err(e)
            }
        }
    }

    /// Flushes consume queues and records progress in the checkpoint.
    pub fn flush_logics_and_checkpoint(&self) -> Result<()> {
        // Captured before the queue flush: every unit below it is in the flushed files.
        let dispatched = self.reput.dispatched_offset();
        self.cqs
            .flush_all()
            .inspect_err(|e| self.commit_log.poison(Error::poisoned_by(e)))?;
        let Some(cp) = &self.checkpoint else {
            return Ok(());
        };
        let confirm = self.commit_log.flushed_offset();
        let physic_ts = self.last_physic_ts.lock().map(|t| *t).unwrap_or(0);
        cp.store(CheckpointData {
            physic_msg_timestamp: physic_ts,
            logics_msg_timestamp: now_ms(),
            index_msg_timestamp: 0,
            confirm_phy_offset: confirm,
            logics_dispatched_offset: dispatched.min(confirm),
        })
        .inspect_err(|e| self.commit_log.poison(Error::poisoned_by(e)))
    }

    /// Body of the flush thread.
    pub fn run_thread(&self) {
        let mut last_logics = Instant::now();
        let mut last_clean = Instant::now();
        // A retention pass ran out of time: the next one runs right after the next flush.
        let mut deleting = false;
        while !self.stop.load(Ordering::Acquire) {
            {
                let s = self.lock();
                let wait = match self.mode {
                    _ if deleting => Duration::ZERO,
                    FlushMode::Sync => self.interval.min(Duration::from_millis(10)),
                    FlushMode::Async => self.interval,
                };
                let pending = |s: &State| s.requested > s.flushed && s.poisoned.is_none();
                if !(self.mode == FlushMode::Sync && pending(&s)) {
                    let r = self.requested.wait_timeout_while(s, wait, |s| {
                        !(self.stop.load(Ordering::Acquire)
                            || (self.mode == FlushMode::Sync && pending(s)))
                    });
                    drop(r);
                }
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            if self.lock().poisoned.is_some() {
                continue;
            }
            if self.flush_commit_log().is_err() {
                continue;
            }
            if last_logics.elapsed() >= self.interval {
                last_logics = Instant::now();
                let _ = self.flush_logics_and_checkpoint();
                crate::store::release_pages(&self.commit_log, &self.cqs);
            }
            if deleting || last_clean.elapsed() >= CLEAN_INTERVAL {
                last_clean = Instant::now();
                // A failed deletion is retried at the next pass; it never blocks writes.
                deleting = self
                    .delete_expired_until(Some(Instant::now() + DELETE_BUDGET))
                    .is_ok_and(|d| d.more);
            }
        }
    }

    /// Deletes every expired commit-log file (see `delete_expired_until`); returns how many.
    pub fn delete_expired(&self) -> Result<usize> {
        self.delete_expired_until(None).map(|d| d.files)
    }

    /// Deletes commit-log files whose last modification is older than the retention, oldest
    /// first, up to the first one that is not expired, never the file being written and never
    /// one holding records dispatch has not indexed yet; then the consume-queue files whose
    /// units all point below the commit log's new minimum. With a `deadline`, stops deleting
    /// commit-log files once it has passed (`more`: some may be left for the next pass).
    pub fn delete_expired_until(&self, deadline: Option<Instant>) -> Result<Deleted> {
        let mut done = Deleted {
            files: 0,
            more: false,
        };
        let Some(retention) = self.retention else {
            return Ok(done);
        };
        let now = std::time::SystemTime::now();
        let dispatched = self.reput.dispatched_offset();
        let expired = |f: &crate::mapped_file::MappedFile| {
            let end = f.from_offset() + f.size();
            let old = std::fs::metadata(f.path())
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age > retention);
            old && end <= dispatched
        };
        // One file at a time: each unlink may take milliseconds (the file system frees its
        // blocks), and the deadline is checked between them.
        let deleted = loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                done.more = true;
                break Ok(());
            }
            match self.commit_log.files().delete_head_while(1, expired) {
                Ok(0) => break Ok(()),
                Ok(n) => done.files += n,
                Err(e) => break Err(e),
            }
        };
        if done.files > 0 {
            self.cqs.delete_expired(self.commit_log.min_offset())?;
        }
        deleted.map(|()| done)
    }

    /// Asks the thread to exit.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _g = self.lock();
        self.requested.notify_all();
    }

    /// Why the store is poisoned, if it is.
    pub fn poisoned(&self) -> Option<Arc<Error>> {
        if !self.poisoned_flag.load(Ordering::Acquire) {
            return None;
        }
        self.lock().poisoned.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::dispatch::notifier::Notifier;
    use crate::mapped_file_queue::{Backing, MappedFileQueue};

    /// A service over a commit log of `files` files, all expired (zero retention) and all
    /// dispatched.
    fn service(dir: &std::path::Path, files: u64) -> FlushService {
        const SIZE: u64 = 64 << 10;
        let backing = Backing::Dir {
            dir: dir.join("commitlog"),
            mode: 0o600,
            populate: false,
        };
        std::fs::create_dir_all(dir.join("commitlog")).unwrap();
        let queue = MappedFileQueue::new(backing, SIZE, true);
        for k in 0..files {
            queue.roll(k * SIZE).unwrap();
        }
        let log = Arc::new(CommitLog::new(queue));
        let cqs = Arc::new(ConsumeQueueStore::new(
            Some(dir.join("consumequeue")),
            1000,
            0o600,
            0o700,
            false,
        ));
        let reput = Arc::new(Reput::new(
            Arc::clone(&log),
            Vec::new(),
            files * SIZE,
            false,
            Arc::new(Notifier::default()),
        ));
        let mut s = FlushService::new(
            log,
            cqs,
            reput,
            None,
            FlushMode::Async,
            Duration::from_millis(500),
        );
        s.retention = Some(Duration::ZERO);
        s
    }

    /// A pass out of time reports the files it left; a pass without a deadline deletes every
    /// expired file, all but the one being written.
    #[test]
    fn a_pass_deletes_every_expired_file_unless_its_time_is_up() {
        let dir = tempfile::tempdir().unwrap();
        let s = service(dir.path(), 25);
        let late = s.delete_expired_until(Some(Instant::now())).unwrap();
        assert_eq!(
            late,
            Deleted {
                files: 0,
                more: true
            }
        );
        let all = s.delete_expired_until(None).unwrap();
        assert_eq!(
            all,
            Deleted {
                files: 24,
                more: false
            }
        );
        assert_eq!(s.commit_log.files().len(), 1);
        assert_eq!(
            std::fs::read_dir(dir.path().join("commitlog"))
                .unwrap()
                .count(),
            1
        );
    }
}
