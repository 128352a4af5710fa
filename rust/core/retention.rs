//! Retention (RocketMQ's CleanCommitLogService): deletes commit-log files older than the
//! retention, then what every derived store keeps only for records below the log's new start.
//!
//! - A file is expired once the store clock (`StoreConfig::clock`) reads at least its last
//!   modification time plus the retention (RocketMQ's rule): with a manual clock, tests
//!   expire files without waiting.
//! - The service thread makes a pass every `CLEAN_INTERVAL`. A pass deletes for at most
//!   `DELETE_BUDGET` before looking at `stop` again, and passes follow each other at once
//!   until no expired file is left, so the store is reclaimed as fast as the file system
//!   deletes files and the thread still stops promptly.
//!
//! Shared writers run retention in their leader only (leader.rs); a file already deleted by a
//! previous leader counts as deleted.
//!
//! Invariants: files go from the head only, oldest first, up to the first that is not
//! expired; never the file being written, never one holding records the critical derived
//! stores have not been given (a lagging non-critical store loses them: it is best effort),
//! and never one at or past the floor a keeper reports (the oldest delayed message not yet
//! delivered).
//!
//! Crash behaviour: a crash between unlinks leaves a shorter head; the next open loads what is
//! there, and derived data pointing below the log's start is dropped by `delete_expired` or
//! skipped by readers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::commit_log::CommitLog;
use crate::dispatch::derived::DerivedStores;
use crate::dispatch::reput::Reput;
use crate::error::Result;
use crate::service::Service;
use crate::util::clock::Clock;

/// How often expired files are looked for.
const CLEAN_INTERVAL: Duration = Duration::from_secs(10);

/// The longest one pass spends deleting before it checks whether the service is stopping.
const DELETE_BUDGET: Duration = Duration::from_millis(20);

/// What a retention pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deleted {
    /// Commit-log files deleted.
    pub files: usize,
    /// The pass stopped at its time budget with expired files possibly left.
    pub more: bool,
}

/// The retention service.
pub struct Retention {
    commit_log: Arc<CommitLog>,
    stores: DerivedStores,
    reput: Arc<Reput>,
    keep: Duration,
    clock: Clock,
    stopping: Mutex<bool>,
    wake: Condvar,
    stop_flag: AtomicBool,
    /// Commit-log offset no deleted file may reach (`u64::MAX`: none), asked at each pass.
    floor: Option<Floor>,
}

/// See `Retention::keeping`.
type Floor = Box<dyn Fn() -> u64 + Send + Sync>;

impl std::fmt::Debug for Retention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retention")
            .field("keep", &self.keep)
            .field("floor", &self.floor.is_some())
            .finish_non_exhaustive()
    }
}

impl Retention {
    /// Deletes files of `commit_log` last modified more than `keep` ago by `clock`, and the
    /// data of `stores` they alone were indexed by.
    pub fn new(
        commit_log: Arc<CommitLog>,
        stores: DerivedStores,
        reput: Arc<Reput>,
        keep: Duration,
        clock: Clock,
    ) -> Self {
        Retention {
            commit_log,
            stores,
            reput,
            keep,
            clock,
            stopping: Mutex::new(false),
            wake: Condvar::new(),
            stop_flag: AtomicBool::new(false),
            floor: None,
        }
    }

    /// Also keeps every file that ends past `floor()`, a commit-log offset asked at each pass
    /// (`u64::MAX` keeps nothing more).
    #[must_use]
    pub fn keeping(mut self, floor: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.floor = Some(Box::new(floor));
        self
    }

    /// Deletes every expired commit-log file (see `delete_expired_until`); returns how many.
    ///
    /// # Errors
    /// I/O failures deleting files.
    pub fn delete_expired(&self) -> Result<usize> {
        self.delete_expired_until(None).map(|d| d.files)
    }

    /// Deletes commit-log files whose last modification is older than the retention, oldest
    /// first, up to the first one that is not expired, never the file being written and never
    /// one holding records the critical stores were not given; then every derived store's data
    /// below the commit log's new minimum. With a `deadline`, stops deleting commit-log files
    /// once it has passed (`more`: some may be left for the next pass).
    ///
    /// # Errors
    /// I/O failures deleting files (retried at the next pass).
    pub fn delete_expired_until(&self, deadline: Option<Instant>) -> Result<Deleted> {
        let mut done = Deleted {
            files: 0,
            more: false,
        };
        let now_ms = self.clock.now_ms();
        let keep_ms = i64::try_from(self.keep.as_millis()).unwrap_or(i64::MAX);
        let dispatched = self.reput.dispatched_offset();
        let floor = self.floor.as_ref().map_or(u64::MAX, |f| f());
        let expired = |f: &crate::mapped_file::MappedFile| {
            let end = f.from_offset() + f.size();
            let old = std::fs::metadata(f.path())
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
                .and_then(|d| i64::try_from(d.as_millis()).ok())
                .is_some_and(|modified| now_ms >= modified.saturating_add(keep_ms));
            old && end <= dispatched && end <= floor
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
            self.stores.delete_expired(self.commit_log.min_offset())?;
        }
        deleted.map(|()| done)
    }
}

impl Service for Retention {
    fn name(&self) -> &'static str {
        "retention"
    }

    fn run(&self) {
        loop {
            {
                let s = self.stopping.lock().unwrap_or_else(|p| p.into_inner());
                let r = self
                    .wake
                    .wait_timeout_while(s, CLEAN_INTERVAL, |stopping| !*stopping);
                drop(r);
            }
            // A failed deletion is retried at the next pass; it never blocks writes.
            while !self.stop_flag.load(Ordering::Acquire) {
                let pass = self.delete_expired_until(Some(Instant::now() + DELETE_BUDGET));
                if !pass.is_ok_and(|d| d.more) {
                    break;
                }
            }
            if self.stop_flag.load(Ordering::Acquire) {
                return;
            }
        }
    }

    fn stop(&self) {
        self.stop_flag.store(true, Ordering::Release);
        *self.stopping.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake.notify_all();
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
    fn service(dir: &std::path::Path, files: u64) -> Retention {
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
        let stores = DerivedStores::default();
        let reput = Arc::new(Reput::new(
            Arc::clone(&log),
            &stores,
            &[files * SIZE],
            false,
            Arc::new(Notifier::default()),
        ));
        Retention::new(log, stores, reput, Duration::ZERO, Clock::system())
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
