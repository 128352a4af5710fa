//! CommitLog: every message of every topic, appended to one run of mapped files.
//!
//! On disk: `commitlog/<20-digit start offset>`, records in RocketMQ's layout (FORMAT.md §1),
//! each file closed by an END_OF_FILE blank marker when the next record does not fit.
//!
//! Invariants
//! - Appends (single and batch) happen under one lock, which also assigns queue offsets, so
//!   queue offsets of a (topic, queue) increase by one along the log. With several writer
//!   processes that lock is the shared mapping's append lock, taken inside this process's
//!   (shared.rs).
//! - A record, and a batch, lies within one file; `published` of the last file only ever moves
//!   forward by whole records, so `max_offset()` is always a record boundary.
//! - `flushed_offset() <= max_offset()`, and bytes below `flushed_offset()` reached the disk.
//! - After a failed flush, or a panic in one of the store's service threads (service.rs), the
//!   log is poisoned: every later append fails until reopen.
//!
//! Crash behaviour: after a process crash every published record is intact. After an OS crash
//! the records below the last flush are intact; recovery (recovery.rs) stops at the first
//! invalid record and zeroes the rest of that file.
//!
//! Writers: producers through `put`/`put_batch`, and `try_put`, which declines instead of
//! waiting for the lock, a new file or a page fault. Readers: dispatch, consumers, lookups.
//!
//! Page cache: the log's warm-ahead (mapped_file_queue/warm.rs, `PageWarmer`) has the
//! preparer (prepare.rs) create the next file and fault in the pages ahead of the appender;
//! the log runs those jobs (`Preparable`) and reports each append to it, except that a batch
//! of large records asks for no warm-ahead (those go to the kernel with gathered `write()`s,
//! for which faulted-in pages only cost). The appender announces every write to the warmer's
//! fill fence before making it. A batch is encoded straight into the mapping when the warmer
//! reports its pages faulted in (`is_warm`), and otherwise written with one `pwrite` from a
//! buffer (the kernel fills the page cache without faults).

pub mod append;
mod queue_table;
pub mod recovery;
pub mod shared;
#[cfg(test)]
mod warm_tests;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use crate::error::{Error, Result};
use crate::mapped_file::MappedFile;
use crate::mapped_file_queue::warm::PageWarmer;
pub use crate::mapped_file_queue::warm::WarmAhead;
use crate::mapped_file_queue::MappedFileQueue;
use crate::message::codec::{self, RecordView};
#[cfg(test)]
use crate::prepare::Prepare;
use crate::prepare::{Preparable, Preparer};
use append::{Appended, Appender, Prepared};

/// The commit log.
#[derive(Debug)]
pub struct CommitLog {
    files: MappedFileQueue,
    appender: Mutex<Appender>,
    flushed: AtomicU64,
    // Warm-ahead and the fill fence the appender announces its writes to.
    warm: PageWarmer,
    last_store_ts: AtomicI64,
    // One past the last appended record, kept by the writer so readers need no file lookup;
    // `u64::MAX` until recovery sets it (read-only stores read the files instead).
    max: AtomicU64,
    // Set when the store is one of several writer processes' (shared.rs).
    shared: OnceLock<Arc<crate::shared::WriterShm>>,
}

impl CommitLog {
    /// A commit log over `files` (already loaded).
    pub fn new(files: MappedFileQueue) -> Self {
        CommitLog {
            files,
            appender: Mutex::new(Appender::default()),
            flushed: AtomicU64::new(0),
            warm: PageWarmer::default(),
            last_store_ts: AtomicI64::new(0),
            max: AtomicU64::new(u64::MAX),
            shared: OnceLock::new(),
        }
    }

    /// Reads store timestamps from `clock` from now on (the store's clock, set at open).
    pub fn set_clock(&self, clock: crate::util::clock::Clock) {
        self.lock_appender().clock = clock;
    }

    /// Sends `Prepare` jobs for this log to a background preparer: next files always, and
    /// warm-ahead requests unless `warm` is `Off` (pointless when whole files are populated
    /// at creation).
    pub fn set_preallocator(self: &Arc<Self>, tx: Preparer, warm: WarmAhead) {
        let me: Weak<dyn Preparable> = Arc::downgrade(self) as Weak<dyn Preparable>;
        self.warm.set_preparer(tx, me, warm);
    }

    /// Preparer: readies the log's pages of `[at, end)` (one step, in one file or the prepared
    /// next one) for the appender and returns how far it got, or `None`, having written
    /// nothing, when the appender has announced a write past `at` (`PageWarmer::fault_in`).
    #[cfg(test)]
    pub(crate) fn fault_in_step(&self, at: u64, end: u64) -> Option<u64> {
        self.warm.fault_in(&self.files, at, end, &self.max)
    }

    /// Pages below this offset are known to be faulted in (`u64::MAX`: whole files are).
    pub fn warmed(&self) -> u64 {
        self.warm.warmed()
    }

    /// How far the writer has written or is writing now: the end of the batch in progress or
    /// of the last record published, whichever is further.
    pub fn writing_to(&self) -> u64 {
        self.warm.writing_to(self.max.load(Ordering::Acquire))
    }

    /// Whether the pages of `[start, end)` are known to be faulted in.
    pub fn is_warm(&self, start: u64, end: u64) -> bool {
        self.warm.is_warm(start, end)
    }

    /// Whether the latest append wants the pages ahead of it faulted in (not after a batch
    /// of large records).
    pub fn warm_wanted(&self) -> bool {
        self.warm.wanted()
    }

    /// Disconnects the background allocator (its thread then exits).
    pub fn stop_preallocator(&self) {
        self.warm.stop();
    }

    /// The underlying files.
    pub fn files(&self) -> &MappedFileQueue {
        &self.files
    }

    pub(crate) fn lock_appender(&self) -> MutexGuard<'_, Appender> {
        self.appender.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Offset of the oldest stored byte.
    pub fn min_offset(&self) -> u64 {
        self.files.min_offset()
    }

    /// One past the last published byte (a record boundary).
    pub fn max_offset(&self) -> u64 {
        match self.max.load(Ordering::Acquire) {
            u64::MAX => self.files.max_offset(),
            m => m,
        }
    }

    pub(crate) fn set_max_offset(&self, end: u64) {
        self.max.store(end, Ordering::Release);
    }

    /// Store timestamp of the newest appended record.
    pub fn last_store_timestamp(&self) -> i64 {
        self.last_store_ts.load(Ordering::Relaxed)
    }

    /// Bytes below this offset are on disk.
    pub fn flushed_offset(&self) -> u64 {
        let own = self.flushed.load(Ordering::Acquire);
        // Shared writers: whatever any process flushed (the leader, usually) and this one
        // has in view.
        match self.shared.get() {
            Some(shm) => own.max(shm.flushed().min(self.max_offset())),
            None => own,
        }
    }

    pub(crate) fn set_flushed_offset(&self, v: u64) {
        self.flushed.fetch_max(v, Ordering::AcqRel);
    }

    /// Appends one prepared record.
    pub fn put(&self, p: &Prepared<'_>) -> Result<Appended> {
        if let Some(shm) = self.shared.get() {
            return self.put_shared(shm, p);
        }
        let a = self.lock_appender();
        self.put_locked(a, p, None)
    }

    /// `put` for a caller that must not wait (it holds Python's GIL): `Ok(None)`, with
    /// nothing written, when another thread holds the append lock, when the record would roll
    /// the log to a new file, or when its pages are not known to be faulted in yet. What is
    /// left is a copy into mapped memory already in the page cache. `now_ms`: the caller's
    /// clock reading, taken just before (the lock was free, so it is current): one clock call
    /// fewer per send.
    pub fn try_put(&self, p: &Prepared<'_>, now_ms: i64) -> Result<Option<Appended>> {
        if let Some(shm) = self.shared.get() {
            return self.try_put_shared(shm, p, now_ms);
        }
        let Some(a) = crate::util::sync::try_lock(&self.appender) else {
            return Ok(None);
        };
        match a.fits(p.len as u64) {
            Some(end)
                if self.warm.is_warm(end - p.len as u64, end)
                    && self.warm.fence().try_announce(end) => {}
            _ => return Ok(None),
        }
        self.put_locked(a, p, Some(now_ms)).map(Some)
    }

    fn put_locked(
        &self,
        mut a: MutexGuard<'_, Appender>,
        p: &Prepared<'_>,
        now_ms: Option<i64>,
    ) -> Result<Appended> {
        let r = a.append_one(&self.files, self.warm.fence(), p, now_ms, None)?;
        let end = r.physical_offset + u64::from(r.size);
        self.max.store(end, Ordering::Release);
        self.maybe_prepare_next(&a);
        // A single record is written through the mapping, so it always wants the pages warm.
        self.warm.set_wanted(true);
        self.warm.after_write(end);
        drop(a);
        self.last_store_ts
            .store(r.store_timestamp, Ordering::Relaxed);
        Ok(r)
    }

    /// Appends a batch for one (topic, queue) into one file.
    pub fn put_batch(&self, batch: &[Prepared<'_>], out: &mut Vec<Appended>) -> Result<()> {
        if let Some(shm) = self.shared.get() {
            return self.put_batch_shared(shm, batch, out);
        }
        let mut a = self.lock_appender();
        // Called once the batch's place is known and announced, before any of it is written.
        let warm = |start: u64, end: u64| self.warm.is_warm(start, end);
        let total = a.append_batch(&self.files, self.warm.fence(), batch, warm, None, out)?;
        let gathered = append::written_by_gathering(total, batch.len());
        self.warm.set_wanted(!gathered);
        if let Some(last) = out.last() {
            let end = last.physical_offset + u64::from(last.size);
            self.max.store(end, Ordering::Release);
            if !gathered {
                self.warm.after_write(end);
            }
        }
        self.maybe_prepare_next(&a);
        drop(a);
        if let Some(last) = out.last() {
            self.last_store_ts
                .store(last.store_timestamp, Ordering::Relaxed);
        }
        Ok(())
    }

    #[inline]
    pub(super) fn maybe_prepare_next(&self, a: &Appender) {
        if let Some(w) = a.writer.as_ref() {
            self.warm.maybe_prepare_next(w.file(), w.pos());
        }
    }

    /// Unmaps every file (store close; appends fail afterwards).
    pub fn close_files(&self) {
        self.lock_appender().writer = None;
        self.files.clear();
    }

    /// Refuses every later append (after a failed flush, or a service thread's panic).
    pub fn poison(&self, cause: Arc<Error>) {
        self.lock_appender().poisoned.get_or_insert(cause);
    }

    /// Why appends are refused, if they are.
    pub fn poisoned(&self) -> Option<Arc<Error>> {
        self.lock_appender().poisoned.clone()
    }

    /// Runs `f` over the published bytes of the record `[offset, offset+size)`.
    pub fn with_bytes<R>(&self, offset: u64, size: u32, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let file = self.files.find(offset)?;
        let pos = offset - file.from_offset();
        file.slice(pos, size as usize).map(f)
    }

    /// The size of the record starting at `offset` (reads its TOTALSIZE field).
    pub fn record_size_at(&self, offset: u64) -> Option<u32> {
        let file = self.files.find(offset)?;
        let pos = offset - file.from_offset();
        let b = file.slice(pos, 4)?;
        Some(u32::from_be_bytes(b.try_into().ok()?))
    }

    /// Decodes the record at `offset` (any size), checking its CRC.
    pub fn read_record<R>(&self, offset: u64, f: impl FnOnce(&RecordView<'_>) -> R) -> Result<R> {
        let size = self
            .record_size_at(offset)
            .ok_or_else(|| self.not_found(offset))?;
        if !(codec::FIXED_V1_IPV4 as u32..=1 << 30).contains(&size) {
            return Err(self.not_found(offset));
        }
        self.with_bytes(offset, size, |b| match RecordView::parse_verified(b) {
            Ok(v) if v.physical_offset() == offset => Ok(f(&v)),
            _ => Err(self.not_found(offset)),
        })
        .unwrap_or_else(|| Err(self.not_found(offset)))
    }

    /// `MessageNotFound` for the record at `offset`.
    pub(crate) fn not_found(&self, offset: u64) -> Error {
        Error::MessageNotFound {
            key: crate::error::MessageKey::Offset(offset),
        }
    }

    /// The file holding `offset`. A shared writer's list may miss a file another process
    /// created below the shared log end (its dispatch and reads run ahead of its own appends):
    /// the directory is then listed again, once. Not below the oldest listed file: retention
    /// deleted those.
    pub fn file_at(&self, offset: u64) -> Option<Arc<MappedFile>> {
        if let Some(f) = self.files.find(offset) {
            return Some(f);
        }
        let shm = self.shared.get()?;
        let expired = !self.files.is_empty() && offset < self.files.min_offset();
        if expired || offset >= shm.log_end() || self.files.refresh(false).is_err() {
            return None;
        }
        self.files.find(offset)
    }

    /// Offset where the file after the one holding `offset` starts.
    pub fn roll_next_file(&self, offset: u64) -> u64 {
        let size = self.files.file_size();
        offset + size - offset % size
    }
}

impl Preparable for CommitLog {
    /// Creates the file at `start`; its first pages count as warm when the appender starts
    /// there (a new log's first file), and are faulted in unpublished otherwise
    /// (`PageWarmer::prepare_file`).
    fn prepare_next_file(&self, start: u64) {
        let at_writer = self.max_offset() == start;
        self.warm
            .prepare_file(&self.files, start, at_writer, &self.max);
    }

    fn fault_in(&self, from: u64, to: u64) {
        self.warm.warm(&self.files, from, to, &self.max);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::mpsc;

    use super::*;
    use crate::mapped_file_queue::Backing;
    use crate::message::MessageRef;

    /// The warm-ahead jobs sent so far.
    fn warm_jobs(rx: &mpsc::Receiver<Prepare>) -> usize {
        rx.try_iter()
            .filter(|j| matches!(j, Prepare::Warm(..)))
            .count()
    }

    #[test]
    fn batches_of_large_records_ask_for_no_warm_ahead_and_single_puts_ask_again() {
        let dir = tempfile::tempdir().unwrap();
        let backing = Backing::Dir {
            dir: dir.path().to_path_buf(),
            mode: 0o644,
            populate: false,
        };
        let cl = Arc::new(CommitLog::new(MappedFileQueue::new(
            backing,
            64 << 20,
            true,
        )));
        let (tx, rx) = mpsc::channel();
        cl.set_preallocator(crate::prepare::Preparer::new(tx), WarmAhead::Fault);
        let (small, large) = (vec![1u8; 128], vec![2u8; 4096]);
        let batch = |body: &[u8]| {
            let prepared: Vec<Prepared<'_>> = (0..300)
                .map(|_| Prepared::new(MessageRef::new("W", 0, body)).unwrap())
                .collect();
            let mut out = Vec::new();
            cl.put_batch(&prepared, &mut out).unwrap();
            assert_eq!(out.len(), 300);
        };
        // Small records go through the mapping: warm-ahead requested past the writer.
        batch(&small);
        assert!(cl.warm_wanted());
        assert_eq!(warm_jobs(&rx), 1);
        // 300 x 4 KiB per batch, 3.6 MiB in all: past the point (`WARM_STEP`, 1 MiB on) where
        // the writer would have asked for warm-ahead again.
        for _ in 0..3 {
            batch(&large);
        }
        assert!(!cl.warm_wanted(), "large batches are written with write()");
        assert_eq!(warm_jobs(&rx), 0);
        // A single record is written through the mapping: it wants the pages again.
        let single = Prepared::new(MessageRef::new("W", 0, &large)).unwrap();
        cl.put(&single).unwrap();
        assert!(cl.warm_wanted());
        assert_eq!(warm_jobs(&rx), 1);
    }
}
