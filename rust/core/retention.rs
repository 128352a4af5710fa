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
//! - By disk usage (RocketMQ's forced cleaning, `diskSpaceCleanForciblyRatio`): while the file
//!   system holding the commit log is used above `StoreConfig::disk_force_clean_ratio`, a pass
//!   deletes the oldest files whatever their age, down to that ratio, within the same limits
//!   as below. Their messages are lost to consumers that had not read them.
//! - Every deleted file is recorded (`take_deleted`: its path, offsets, age and why), for the
//!   caller to log; the record holds the last `RECORD_MAX` deletions and counts the others.
//!
//! Shared writers run retention in their leader only (leader.rs); a file already deleted by a
//! previous leader counts as deleted.
//!
//! Invariants: files go from the head only, oldest first, up to the first that is not
//! expired (while the disk is used above the ratio: any); never the file being written, never one holding records the critical derived
//! stores have not been given (a lagging non-critical store loses them: it is best effort),
//! and never one at or past the floor a keeper reports (the oldest delayed message not yet
//! delivered).
//!
//! Crash behaviour: a crash between unlinks leaves a shorter head; the next open loads what is
//! there, and derived data pointing below the log's start is dropped by `delete_expired` or
//! skipped by readers.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::PathBuf;
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

/// Deletions kept in the record until `take_deleted` takes them; older ones are counted only.
const RECORD_MAX: usize = 4096;

/// Why retention deleted a commit-log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Last modified longer ago than the retention time.
    Expired,
    /// The file system was used above `disk_force_clean_ratio`.
    DiskFull,
}

impl Reason {
    /// Lower-case name (`expired`, `disk_full`).
    pub fn name(self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::DiskFull => "disk_full",
        }
    }
}

/// One commit-log file retention deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedFile {
    /// Its path (empty for a store in memory).
    pub path: PathBuf,
    /// Commit-log offset of its first byte.
    pub from_offset: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its last modification, epoch ms (0 when unknown).
    pub modified_ms: i64,
    /// Why it went.
    pub reason: Reason,
}

/// The deletions not yet taken (`Retention::take_deleted`).
#[derive(Debug, Default)]
struct Record {
    files: VecDeque<DeletedFile>,
    /// Deletions that fell out of `files` before they were taken.
    dropped: u64,
}

/// Used fraction of the file system holding the commit log, `None` when unknown (a store in
/// memory).
type DiskUsage = Box<dyn Fn() -> Option<f64> + Send + Sync>;

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
    /// Above this used fraction of the disk, files go whatever their age (`disk_usage`).
    disk_ratio: f64,
    disk_usage: Option<DiskUsage>,
    record: Mutex<Record>,
}

/// See `Retention::keeping`.
type Floor = Box<dyn Fn() -> u64 + Send + Sync>;

impl std::fmt::Debug for Retention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retention")
            .field("keep", &self.keep)
            .field("floor", &self.floor.is_some())
            .field("disk_ratio", &self.disk_ratio)
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
            disk_ratio: 1.0,
            disk_usage: None,
            record: Mutex::new(Record::default()),
        }
    }

    /// Also deletes the oldest files whatever their age while `usage()` (the used fraction of
    /// the file system holding the log) is above `ratio`.
    #[must_use]
    pub fn limiting_disk(
        mut self,
        ratio: f64,
        usage: impl Fn() -> Option<f64> + Send + Sync + 'static,
    ) -> Self {
        self.disk_ratio = ratio;
        self.disk_usage = Some(Box::new(usage));
        self
    }

    /// The files deleted since the last call, oldest first, and how many more were deleted but
    /// fell out of the record (it keeps the last `RECORD_MAX`).
    pub fn take_deleted(&self) -> (Vec<DeletedFile>, u64) {
        let mut r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        let dropped = std::mem::take(&mut r.dropped);
        (r.files.drain(..).collect(), dropped)
    }

    fn remember(&self, file: DeletedFile) {
        let mut r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        if r.files.len() == RECORD_MAX {
            r.files.pop_front();
            r.dropped += 1;
        }
        r.files.push_back(file);
    }

    /// Whether the disk is used above the ratio (never when its usage is unknown).
    fn disk_full(&self) -> bool {
        self.disk_usage
            .as_ref()
            .and_then(|u| u())
            .is_some_and(|used| used > self.disk_ratio)
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

    /// Deletes commit-log files whose last modification is older than the retention (and,
    /// while the disk is used above the ratio, younger ones), oldest first, up to the first one
    /// that may not go, never the file being written and never one holding records the
    /// critical stores were not given; then every derived store's data below the commit log's
    /// new minimum. Each file deleted is recorded (`take_deleted`). With a `deadline`, stops deleting commit-log files
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
        // The file the predicate last chose, recorded once it is deleted.
        let chosen: RefCell<Option<DeletedFile>> = RefCell::new(None);
        let expired = |f: &crate::mapped_file::MappedFile, full: bool| {
            let end = f.from_offset() + f.size();
            let modified = std::fs::metadata(f.path())
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
                .and_then(|d| i64::try_from(d.as_millis()).ok());
            let old = modified.is_some_and(|m| now_ms >= m.saturating_add(keep_ms));
            let may = end <= dispatched && end <= floor;
            let reason = match (old, full) {
                (true, _) => Reason::Expired,
                (false, true) => Reason::DiskFull,
                (false, false) => return false,
            };
            *chosen.borrow_mut() = Some(DeletedFile {
                path: f.path().to_path_buf(),
                from_offset: f.from_offset(),
                size: f.size(),
                modified_ms: modified.unwrap_or(0),
                reason,
            });
            may
        };
        // One file at a time: each unlink may take milliseconds (the file system frees its
        // blocks), and the deadline and the disk's usage are checked between them.
        let deleted = loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                done.more = true;
                break Ok(());
            }
            let full = self.disk_full();
            match self
                .commit_log
                .files()
                .delete_head_while(1, |f| expired(f, full))
            {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    done.files += n;
                    if let Some(file) = chosen.borrow_mut().take() {
                        self.remember(file);
                    }
                }
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
        service_keeping(dir, files, Duration::ZERO)
    }

    /// `service`, keeping files for `keep`.
    fn service_keeping(dir: &std::path::Path, files: u64, keep: Duration) -> Retention {
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
        Retention::new(log, stores, reput, keep, Clock::system())
    }

    fn files_in(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir.join("commitlog")).unwrap().count()
    }

    /// A disk used above the ratio loses its oldest files, young as they are, until its usage
    /// is down to the ratio; each deletion is recorded with its reason.
    #[test]
    fn a_full_disk_loses_its_oldest_files_down_to_the_ratio() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        // Usage: a tenth per file in the log.
        let s = service_keeping(dir.path(), 10, Duration::from_secs(3600))
            .limiting_disk(0.5, move || Some(files_in(&root) as f64 / 10.0));
        assert_eq!(s.delete_expired().unwrap(), 5);
        assert_eq!(files_in(dir.path()), 5);
        let (deleted, dropped) = s.take_deleted();
        assert_eq!(dropped, 0);
        let starts: Vec<u64> = deleted.iter().map(|d| d.from_offset).collect();
        assert_eq!(starts, (0..5).map(|k| k * (64 << 10)).collect::<Vec<_>>());
        assert!(deleted.iter().all(|d| d.reason == Reason::DiskFull));
        assert!(deleted
            .iter()
            .all(|d| !d.path.exists() && d.size == 64 << 10));
        assert_eq!(s.take_deleted().0, Vec::new());
        // At the ratio, young files stay.
        assert_eq!(s.delete_expired().unwrap(), 0);
    }

    /// Expired files are recorded as such; without a full disk, young ones stay.
    #[test]
    fn expired_files_are_recorded_and_young_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let young = service_keeping(dir.path(), 3, Duration::from_secs(3600))
            .limiting_disk(0.85, || Some(0.2));
        assert_eq!(young.delete_expired().unwrap(), 0);
        assert_eq!(young.take_deleted().0, Vec::new());
        let dir = tempfile::tempdir().unwrap();
        let old = service(dir.path(), 3).limiting_disk(0.85, || None);
        assert_eq!(old.delete_expired().unwrap(), 2);
        let (deleted, _) = old.take_deleted();
        assert_eq!(deleted.len(), 2);
        assert!(deleted
            .iter()
            .all(|d| d.reason == Reason::Expired && d.modified_ms > 0));
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
