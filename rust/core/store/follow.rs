//! Following the writer from a read-only open (a follower, usually in another process).
//!
//! A follower maps the files it found and re-reads the directories: the consume queue it reads,
//! on every read, to map new files; and every file list of the store, at most every
//! `FOLLOW_INTERVAL_MS` from any read or offsets call (`follow`), and the lists a read looked
//! at, at once before it would report damage or a missing record (`recheck`), to forget files
//! the writer deleted and files it replaced under the same name.
//!
//! Invariants
//! - A follower never writes store data; following only maps, unmaps and closes files.
//! - A file the writer deleted stays mapped only until the follower's first call at least
//!   `FOLLOW_INTERVAL_MS` after the previous refresh (plus any read still holding it), so its
//!   disk space is freed even by a handle that reads nothing (a monitor calling offsets).
//! - A file replaced under its name (same name, another inode) is never read as the queue's
//!   data after such a refresh: a read that finds damage refreshes and reads again before it
//!   reports the damage.
//! - A follower's commit-log end (`follower_log_end`) is the end of the last whole record,
//!   CRC-checked, never the size of the files it mapped: it cannot see the writer's position,
//!   and a file the writer created ahead of time holds no record yet.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Instant;

use super::Store;
use crate::dispatch::queue_index::LogicalQueue;
use crate::message::codec::{self, RecordCheck};

/// The longest a follower's file lists go without being checked against the directories while
/// the follower is used.
const FOLLOW_INTERVAL_MS: u64 = 200;

/// Milliseconds on a monotonic clock (since this process first asked): a wall clock set back
/// must not stop a follower from following.
pub(super) fn monotonic_ms() -> u64 {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    u64::try_from(ANCHOR.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Store {
    /// A follower: `follow_now` if `FOLLOW_INTERVAL_MS` passed since the last time; true if it
    /// ran. Writers need nothing (their lists are the directories).
    pub(super) fn follow(&self) -> bool {
        if !self.inner.config.read_only {
            return false;
        }
        let now = monotonic_ms();
        let last = self.inner.last_follow.load(Ordering::Relaxed);
        if now.saturating_sub(last) < FOLLOW_INTERVAL_MS
            || self
                .inner
                .last_follow
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        self.follow_now();
        true
    }

    /// A follower: re-reads every file list of the store (commit log and every queue of the
    /// index opened so far), forgetting deleted and replaced files and mapping new ones, then
    /// moves each queue's minimum past the records the commit log no longer holds. A failed
    /// refresh leaves that list as it was, for the next one to retry.
    fn follow_now(&self) {
        let _ = self.inner.commit_log.files().refresh(true);
        self.inner
            .index
            .follow_all(self.inner.commit_log.min_offset());
    }

    /// A follower about to report damage or a missing record: `follow_now` for the commit log
    /// and `queue` only (the files such a read looked at), whenever it is called.
    pub(super) fn recheck(&self, queue: Option<&dyn LogicalQueue>) {
        let _ = self.inner.commit_log.files().refresh(true);
        if let Some(q) = queue {
            q.follow(true, self.inner.commit_log.min_offset());
        }
    }

    /// A follower's commit-log end: one past the last whole record (CRC-checked) the writer
    /// has written. Scans forward from the end found last time, or from the start of the
    /// newest file that holds a record (the newer ones were created ahead of the writer), so
    /// a scan covers each byte about once. The directory is read first (not only every
    /// `FOLLOW_INTERVAL_MS`): the end must include a file the writer has just rolled into.
    pub(super) fn follower_log_end(&self) -> u64 {
        let log = &self.inner.commit_log;
        let files = log.files();
        // Files the writer created since the last look hold the newest records.
        if !self.follow() {
            let _ = files.refresh(false);
        }
        let (low, high) = (files.min_offset(), files.max_offset());
        let mut start = files.last_file().map_or(low, |f| f.from_offset());
        while start > low && !self.first_record_is_whole(start) {
            start = start.saturating_sub(files.file_size()).max(low);
        }
        let known = self.inner.follow_end.load(Ordering::Relaxed);
        // A known end outside the files (deleted, or cut after a writer's crash) is forgotten.
        let from = if (start..=high).contains(&known) {
            known
        } else {
            start
        };
        let end = log
            .scan(from, true, 0, false, |_| Ok(()))
            .map_or(from, |e| e.end);
        self.inner.follow_end.store(end, Ordering::Relaxed);
        end
    }

    /// Whether a whole record starts the commit-log file beginning at `start`.
    fn first_record_is_whole(&self, start: u64) -> bool {
        self.inner.commit_log.file_at(start).is_some_and(|f| {
            f.slice(0, f.size() as usize).is_some_and(|b| {
                matches!(
                    codec::check_stored(b, true, Some(start)),
                    RecordCheck::Record(_)
                )
            })
        })
    }
}
