//! ConsumeQueue: the logical index of one (topic, queue id) into the commit log.
//!
//! On disk: `consumequeue/<topic>/<queueId>/<20-digit byte offset>`, 20-byte units
//! (FORMAT.md §4); unit `k` is at byte `k * 20` of the queue's byte space.
//!
//! Invariants
//! - Unit `k` describes the record whose QUEUEOFFSET is `k`, and is written only after that
//!   record was published in the commit log.
//! - Units are appended in order by the single dispatcher; the size word of each unit is
//!   release-stored last, so any reader (of any process) that sees a non-zero size sees the
//!   whole unit. A zero size marks the end of data.
//! - `min_offset() <= max_offset()`; `max_offset()` is the next offset to be written.
//!
//! Disk (FORMAT.md §4): a unit file has its full length from its creation on (RocketMQ requires
//! it), as a hole with its first `INITIAL_RESERVE` bytes fallocated; the writer reserves more
//! before writing past the reserved end (`write_unit`: `FileWriter::make_room`), never writes
//! into a hole, and after an open, or after its idle queue let go of the file and maps it again,
//! reserves again ahead of itself before its first unit (what an earlier mapping reserved is
//! not recorded). A full disk is a `StoreFull` error of the unit's write: nothing is written,
//! and dispatch retries it. Only a writer that fills half its file within `FAST_HALF_FILE_MS`
//! has its next file prepared ahead; a new queue has no file before its first unit.
//!
//! Crash behaviour: recovery keeps the prefix of valid units, zeroes the rest of the last file,
//! and drops units pointing at or past the commit log's recovered end; dispatch then re-creates
//! what is missing (duplicates are ignored by the `max_physical_offset` rule). A file shorter
//! than the file size is dropped with every later file, and dispatch re-creates their units from
//! the end of the units that remain, below the checkpoint too (`recover`). A new file is
//! made durable (its fsync and its directory's) by the queue's next flush, not by the thread
//! that rolls to it: the flush comes before any checkpoint that covers the file's units, so
//! an OS crash can only lose a file whose units recovery re-dispatches anyway.
//!
//! A crash between a new file's sparse extension and its reservation leaves a full-length file of
//! zeros: an unused file (deleted at open when it is not the first), or an empty first file.
//!
//! Writers: only the dispatcher. Readers: any thread, any process.

pub mod clean;
pub mod store;
pub mod unit;

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::dispatch::queue_index::{LogicalQueue, QueueEntry};
use crate::error::{Error, Result};
use crate::mapped_file::mmap::Advice;
use crate::mapped_file::{FileWriter, MappedFile, Reserve};
use crate::mapped_file_queue::pace::Pace;
use crate::mapped_file_queue::warm::warm_chunk_ahead;
use crate::mapped_file_queue::{Backing, MappedFileQueue};
use crate::util::clock::Clock;
use crate::util::fs;
use crate::util::kill_point::kill_point;
use unit::{CqUnit, SIZE_POS, UNIT_SIZE};

/// Unit-file pages are faulted in a chunk of this many bytes ahead of the writer
/// (mapped_file_queue/warm.rs `warm_chunk_ahead`, on the dispatching thread: usually a
/// producer's, which would otherwise take a page fault every 204 units, a few of them tens
/// of microseconds long).
const WARM_CHUNK: u64 = 64 << 10;

/// Bytes of a file prepared ahead of its roll that are faulted in: the two chunks
/// `warm_chunk_ahead` keeps ready when a writer enters a file.
const PREPARED_WARM: u64 = 2 * WARM_CHUNK;

/// Disk blocks a new unit file reserves (204 units); the rest of the file is a hole until
/// the writer gets near it (mapped_file/alloc.rs `Reserve::Grow`). A queue that holds one
/// message costs one page, not a whole file.
pub const INITIAL_RESERVE: u64 = 4096;

/// A writer that fills the first half of its file within this many milliseconds of entering
/// it is fast: its next file is prepared ahead (prepare.rs). A slower queue creates its next
/// file when it rolls, which costs it well under a millisecond (the creation's fsyncs are
/// left to the next flush) once per half a file or more of this time.
pub const FAST_HALF_FILE_MS: i64 = 10_000;

/// One consume queue.
#[derive(Debug)]
pub struct ConsumeQueue {
    topic: String,
    queue_id: u32,
    files: MappedFileQueue,
    writer: Mutex<Option<FileWriter>>,
    // One past the last commit-log byte referenced by a unit (dispatch idempotence).
    max_physical: AtomicU64,
    min_logic: AtomicU64,
    // The commit-log minimum `min_logic` was last corrected for: a repeat call with it (read-only
    // followers correct on every lookup) is one load, not a search.
    min_corrected_for: AtomicU64,
    read_only: bool,
    // Set by recovery when a damaged unit or a short file cut the queue short (see `recover`).
    damaged: std::sync::atomic::AtomicBool,
    // Start of the first file `recover` left unloaded because it is short (`NO_FILE`: none);
    // it and later files are deleted by `remove_stale_files`.
    stale_from: AtomicU64,
    // Start of the file whose successor was asked for (`u64::MAX`: none yet), and the start
    // of that successor until the dispatcher takes the request (`NO_FILE`: nothing to ask).
    next_asked: AtomicU64,
    next_due: AtomicU64,
    // When the writer entered its current file (a roll, or recovery), for `note_fill`, as
    // `clock` reads it.
    entered_ms: AtomicI64,
    clock: Clock,
    // How fast units arrive, marked at each `WARM_CHUNK` (`warm_chunk_ahead`).
    pace: Pace,
    // A unit was published since the last `flush` (an idle queue lets go of its writer).
    written: std::sync::atomic::AtomicBool,
    // Other processes write this queue's files too (shared writers): an all-zero last file is
    // one another process has just rolled to, never a file prepared ahead and left unused.
    shared_files: bool,
}

/// `next_due` when no file is due.
const NO_FILE: u64 = u64::MAX;

impl ConsumeQueue {
    /// A queue whose files live in `dir` (or in memory when `dir` is `None`).
    pub fn new(
        topic: &str,
        queue_id: u32,
        dir: Option<PathBuf>,
        file_size: u64,
        mode: u32,
        read_only: bool,
    ) -> Self {
        let backing = match dir {
            Some(dir) => Backing::Dir {
                dir,
                mode,
                populate: false,
            },
            None => Backing::Memory,
        };
        ConsumeQueue {
            topic: topic.to_owned(),
            queue_id,
            files: MappedFileQueue::new(backing, file_size, !read_only)
                .with_deferred_create_sync()
                .with_reserve(Reserve::Grow {
                    initial: INITIAL_RESERVE,
                }),
            writer: Mutex::new(None),
            max_physical: AtomicU64::new(0),
            min_logic: AtomicU64::new(0),
            min_corrected_for: AtomicU64::new(0),
            read_only,
            damaged: std::sync::atomic::AtomicBool::new(false),
            stale_from: AtomicU64::new(NO_FILE),
            next_asked: AtomicU64::new(u64::MAX),
            next_due: AtomicU64::new(NO_FILE),
            entered_ms: AtomicI64::new(i64::MIN),
            clock: Clock::system(),
            pace: Pace::default(),
            written: std::sync::atomic::AtomicBool::new(false),
            shared_files: false,
        }
    }

    /// A queue whose files other processes write too (`shared_files`): `recover` keeps an
    /// all-zero last file.
    pub fn with_shared_files(mut self, shared: bool) -> Self {
        self.shared_files = shared;
        if shared {
            self.files.share();
        }
        self
    }

    /// Other processes create and write this queue's files from now on (a queue recovered by
    /// the first shared opener): they are created and published as shared files.
    pub fn share_files(&self) {
        self.files.share();
    }

    /// This queue keeps its recently used files mapped in `cache` (the store's).
    pub fn with_cache(mut self, cache: std::sync::Arc<crate::mapped_file_queue::MapCache>) -> Self {
        self.files = self.files.with_cache(cache);
        self
    }

    /// A queue that reads the time from `clock` (the store's; the system clock by default),
    /// for its pace (`FAST_HALF_FILE_MS`).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }
    /// Queue id.
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }
    /// The files.
    pub fn files(&self) -> &MappedFileQueue {
        &self.files
    }

    /// Creates, ahead of the roll to it, the unit file starting at byte `start`, with the
    /// pages its first units go to faulted in: the two chunks `warm_chunk_ahead` keeps ready when a
    /// writer enters a file. Not the whole file: a queue that is rarely written would hold a
    /// megabyte of dirty zero pages for nothing. Returns whether they were faulted in here.
    pub fn prepare_file(&self, start: u64) -> Result<bool> {
        self.files.prepare(start, PREPARED_WARM)
    }

    /// Loads files and finds the end of valid units (writers zero the rest of the last file
    /// when `zero_tail`). Returns the max offset.
    ///
    /// A file shorter than the file size (truncated, or a roll a crash interrupted) lost units
    /// that the checkpoint may count as dispatched, so only the commit log can restore them: a
    /// writer loads only the files before it and marks the queue cut short (`was_cut_short`),
    /// and recovery re-dispatches from the end of the units that remain. The short file and
    /// every later one stay on disk until `remove_stale_files`, called once the checkpoint
    /// records the lower dispatch point: a crash or failed open before then finds the short
    /// file again. A reader cannot repair: it serves the units of the files before the short
    /// one.
    pub fn recover(&self, zero_tail: bool) -> Result<u64> {
        let short = self.files.first_short_file()?;
        if self.read_only {
            self.files.load_below(short.unwrap_or(u64::MAX))?;
            return Ok(self.max_offset());
        }
        match short {
            Some(start) => {
                self.stale_from.store(start, Ordering::Release);
                self.damaged.store(true, Ordering::Release);
                self.files.load_below(start)?;
            }
            None => {
                // Files prepared ahead of a roll that never came (prepare.rs) are all zeros:
                // the queue ends where its units do. A shared writer's are left on disk
                // (another process may have just rolled to one, or prepared it for its own
                // roll) and loaded only when the file before them is full, which the end
                // found in that file then says; a roll of this process takes the file again.
                if self.shared_files {
                    match self.files.unused_tail_start(fs::is_all_zero)? {
                        Some(start) => self.files.load_below(start)?,
                        None => self.files.load()?,
                    }
                } else {
                    self.files.discard_unused_tail(fs::is_all_zero)?;
                    self.files.load()?;
                }
            }
        }
        let Some(last) = self.files.try_last_file()? else {
            return Ok(0);
        };
        let end_in_file = first_invalid_unit(&last);
        // Valid-looking units after the first invalid one mean a damaged unit cut the queue
        // short: the records those units indexed must be dispatched again (`damaged`). Searched
        // after a clean shutdown too: media damage can zero a unit whatever the shutdown.
        let mut pos = end_in_file + UNIT_SIZE;
        while pos + UNIT_SIZE <= last.size() {
            if read_unit(&last, pos).is_some() {
                self.damaged.store(true, Ordering::Release);
                break;
            }
            pos += UNIT_SIZE;
        }
        // The search touched the whole file past the units (mostly a hole): those pages are
        // let go of, so that a mapping the store's cache keeps does not hold them resident. A
        // hint: a failure only leaves them mapped.
        let _ = last.advise(0, last.size(), Advice::DontNeed);
        drop(last);
        let mut w = self.files.last_writer()?.ok_or(Error::ReadOnly)?;
        let zero_until = if zero_tail {
            w.file().size()
        } else {
            end_in_file
        };
        // Nothing of a file opened from disk counts as reserved: the writer reserves ahead of
        // itself again before its first unit (`write_unit`).
        w.truncate_to(end_in_file, zero_until)?;
        // The writer is taken again by the first put (`resume_writer`): until then the file
        // may be unmapped like any other (and mapped again with nothing counted as reserved).
        drop(w);
        self.files.park_last();
        self.entered_ms
            .store(self.clock.now_ms(), Ordering::Relaxed);
        self.refresh_max_physical();
        self.min_logic
            .store(self.files.min_offset() / UNIT_SIZE, Ordering::Release);
        Ok(self.max_offset())
    }

    fn refresh_max_physical(&self) {
        let max = self.max_offset();
        let mut found = 0;
        if max > self.min_offset() {
            if let Some(u) = self.unit(max - 1) {
                if !u.is_placeholder() {
                    found = u.offset + u64::from(u.size);
                }
            }
        }
        self.max_physical.store(found, Ordering::Release);
    }

    /// Deletes the files `recover` left unloaded (from a short file on), before dispatch
    /// re-creates their units. Call only after the checkpoint's dispatched offset is at or
    /// below the recovery's re-dispatch point.
    pub fn remove_stale_files(&self) -> Result<()> {
        let start = self.stale_from.swap(NO_FILE, Ordering::AcqRel);
        if start != NO_FILE {
            if let Err(e) = self.files.remove_files_from(start) {
                self.stale_from.store(start, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Unmaps the queue's files (store close).
    pub fn close_files(&self) {
        *self.lock_writer() = None;
        // A file prepared ahead of a roll is all zeros: deleted rather than left on disk.
        self.files.discard_prepared();
        self.files.clear();
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, Option<FileWriter>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops every unit whose record starts at or after `phy_end` (commit-log truncation).
    pub fn truncate_dirty(&self, phy_end: u64) -> Result<()> {
        let max = self.max_offset();
        let min = self.min_offset();
        // Units are in commit-log order: find the first unit that points at or past phy_end.
        let mut cut = max;
        while cut > min {
            match self.unit(cut - 1) {
                Some(u) if !u.is_placeholder() && u.offset >= phy_end => cut -= 1,
                _ => break,
            }
        }
        if cut == max {
            return Ok(());
        }
        self.cut_at(cut)
    }

    /// Recovery: checks the units that index records at or after `from_phy` (written after the
    /// last durable checkpoint, so possibly torn or stale) with `indexes(unit, k)`, which says
    /// whether the unit really points at the record whose queue offset is `k`. The queue is cut
    /// at the first unit that does not; dispatch then re-creates the rest.
    ///
    /// # Errors
    /// `indexes`'s: it fails, before anything is cut, when the bytes a unit points at are
    /// damaged log data rather than a sign of a stale unit.
    pub fn verify_tail(
        &self,
        from_phy: u64,
        indexes: impl Fn(&CqUnit, u64) -> Result<bool>,
    ) -> Result<bool> {
        let (min, max) = (self.min_offset(), self.max_offset());
        // A garbage unit can sit right after the real tail whatever it points at: drop tail
        // units that do not index their record before looking at the post-checkpoint range.
        let mut end = max;
        while end > min {
            match self.unit(end - 1) {
                Some(u) if u.is_placeholder() || indexes(&u, end - 1)? => break,
                _ => end -= 1,
            }
        }
        if end < max {
            self.cut_at(end)?;
            return self.verify_tail(from_phy, indexes).map(|_| true);
        }
        // Back to the last unit below `from_phy`. An empty or unreadable unit does not stop
        // the walk: above the checkpoint a page of units can be lost while a later page (or
        // file) reached the disk, and the hole must be found, not taken for the durable part.
        let mut k = max;
        while k > min {
            match self.unit(k - 1) {
                Some(u) if !u.is_placeholder() && u.offset < from_phy => break,
                _ => k -= 1,
            }
        }
        while k < max {
            match self.unit(k) {
                Some(u) if u.is_placeholder() || indexes(&u, k)? => k += 1,
                _ => {
                    self.cut_at(k)?;
                    // Dispatch resumes from the cut's last record, not from the checkpoint:
                    // the units from the hole on are re-created from the commit log.
                    self.damaged.store(true, Ordering::Release);
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Removes every unit at logical offset `cut` and after.
    ///
    /// A shared queue's cut is this process's view only: another process may be writing the
    /// units from `cut` on at this moment (a later opener checks its tails beside running
    /// writers), so nothing on disk changes; the queue ends at `cut` here and this process's
    /// dispatch writes those units again, the same bytes at the same places (a unit's place
    /// follows from its queue offset).
    fn cut_at(&self, cut: u64) -> Result<()> {
        let byte = cut * UNIT_SIZE;
        let mut guard = self.lock_writer();
        let file_size = self.files.file_size();
        let file_start = byte - byte % file_size;
        let shared = self.files.is_shared();
        // Dropped first: the writer of the file kept is taken again below.
        drop(guard.take());
        // Keep the file holding `byte` (even when the cut is at its first unit).
        if shared {
            self.files.forget_files_from(file_start + 1);
        } else {
            self.files.drop_files_from(file_start + 1)?;
        }
        if let Some(mut w) = self.files.last_writer()? {
            let (from, size) = (w.file().from_offset(), w.file().size());
            let at = byte.saturating_sub(from);
            if shared {
                w.reposition(at);
            } else {
                w.truncate_to(at, size)?;
            }
            *guard = Some(w);
        }
        drop(guard);
        self.refresh_max_physical();
        Ok(())
    }

    /// Minimum logical offset still stored.
    pub fn min_offset(&self) -> u64 {
        self.min_logic
            .load(Ordering::Acquire)
            .max(self.files.min_offset() / UNIT_SIZE)
    }

    /// Next logical offset to be written.
    pub fn max_offset(&self) -> u64 {
        if !self.read_only {
            return self.files.max_offset() / UNIT_SIZE;
        }
        let Some(last) = self.files.last_file() else {
            return 0;
        };
        let end = valid_units_end(&last);
        if end == 0 && last.from_offset() > 0 {
            // An empty last file may have been prepared ahead of its roll while the one
            // before it still fills (prepare.rs): the queue ends in that one. (When it is
            // full, both answers are the same.)
            if let Some(prev) = self.files.find(last.from_offset() - 1) {
                return (prev.from_offset() + valid_units_end(&prev)) / UNIT_SIZE;
            }
        }
        (last.from_offset() + end) / UNIT_SIZE
    }

    /// True when recovery set files aside (a short file and every later one) for
    /// `remove_stale_files`.
    pub fn has_stale_files(&self) -> bool {
        self.stale_from.load(Ordering::Acquire) != NO_FILE
    }

    /// True when recovery found this queue cut short by a damaged unit or a short file: every
    /// record after `max_physical_offset()` must be dispatched again.
    pub fn was_cut_short(&self) -> bool {
        self.damaged.load(Ordering::Acquire)
    }

    /// Highest commit-log end referenced (dispatch idempotence).
    pub fn max_physical_offset(&self) -> u64 {
        self.max_physical.load(Ordering::Acquire)
    }

    /// Reads the unit at logical `offset` (`None` if absent or not yet written).
    pub fn unit(&self, offset: u64) -> Option<CqUnit> {
        let byte = offset.checked_mul(UNIT_SIZE)?;
        let file = self.files.find(byte)?;
        read_unit(&file, byte - file.from_offset())
    }

    /// Reads up to `max` units starting at `offset` into `out` (stops at the end of data).
    pub fn units(&self, offset: u64, max: usize, out: &mut Vec<(u64, CqUnit)>) {
        self.units_as(offset, max, out, |u| u);
    }

    /// `units`, each unit stored in `out` as `to(unit)`.
    #[inline]
    fn units_as<T>(
        &self,
        offset: u64,
        max: usize,
        out: &mut Vec<(u64, T)>,
        to: impl Fn(CqUnit) -> T,
    ) {
        let mut k = offset;
        while out.len() < max {
            let byte = k * UNIT_SIZE;
            let Some(file) = self.files.find(byte) else {
                break;
            };
            let mut pos = byte - file.from_offset();
            let mut any = false;
            while out.len() < max && pos + UNIT_SIZE <= file.size() {
                match read_unit(&file, pos) {
                    Some(u) => out.push((k, to(u))),
                    None => return,
                }
                any = true;
                k += 1;
                pos += UNIT_SIZE;
            }
            if !any {
                break;
            }
        }
    }

    /// Appends the unit for `queue_offset` (dispatcher only). Idempotent: a unit for a record
    /// already indexed is ignored. A gap before `queue_offset` is filled with placeholders.
    pub fn put(&self, queue_offset: u64, unit: CqUnit) -> Result<bool> {
        self.put_run(queue_offset, std::iter::once(unit))
    }

    /// `put` of consecutive units (queue offsets `first_queue_offset`, `+1`, ...; commit-log
    /// offsets increasing) under one lock, published together. True if any unit was written.
    ///
    /// # Errors
    /// As `put`. Nothing of the run is published then; the units already written are
    /// published by the next successful put (the dispatcher retries the run, skipping them).
    pub fn put_run(
        &self,
        first_queue_offset: u64,
        units: impl IntoIterator<Item = CqUnit>,
    ) -> Result<bool> {
        let known_end = self.max_physical_offset();
        let mut guard = self.lock_writer();
        self.resume_writer(&mut guard)?;
        let mut max_end = None;
        for (i, unit) in units.into_iter().enumerate() {
            let unit_end = unit.offset + u64::from(unit.size);
            if unit_end <= known_end {
                continue;
            }
            let queue_offset = first_queue_offset + i as u64;
            // The common case, every unit of a run after its first: the unit goes right at
            // the writer's position in the current file (no gap, no roll, nothing to skip).
            if let Some(w) = guard.as_mut() {
                let at = w.pos();
                if w.file().from_offset() + at == queue_offset * UNIT_SIZE
                    && w.remaining() >= UNIT_SIZE
                {
                    write_unit(w, unit, &self.pace)?;
                    max_end = Some(unit_end);
                    continue;
                }
            }
            if self.put_locked(&mut guard, queue_offset, unit)? {
                max_end = Some(unit_end);
            }
        }
        let Some(max_end) = max_end else {
            return Ok(false);
        };
        if let Some(w) = guard.as_mut() {
            w.publish();
            self.note_fill(w);
        }
        self.written.store(true, Ordering::Release);
        self.max_physical.fetch_max(max_end, Ordering::AcqRel);
        Ok(true)
    }

    /// `put_run` for a caller that must not wait: writes and publishes the units (those already
    /// indexed skipped) only if they all go right at the writer's position in the current
    /// file and the writer's lock is free; otherwise writes nothing and returns false.
    ///
    /// # Errors
    /// A failed write (nothing is published then, as with `put_run`).
    pub fn try_put_run(&self, first_queue_offset: u64, units: &[CqUnit]) -> Result<bool> {
        let known_end = self.max_physical_offset();
        let skip = units
            .iter()
            .take_while(|u| u.offset + u64::from(u.size) <= known_end)
            .count();
        let rest = units.get(skip..).unwrap_or(&[]);
        let Some(last) = rest.last() else {
            return Ok(true);
        };
        let Some(mut guard) = crate::util::sync::try_lock(&self.writer) else {
            return Ok(false);
        };
        let Some(w) = guard.as_mut() else {
            return Ok(false);
        };
        let at = (first_queue_offset + skip as u64) * UNIT_SIZE;
        // Growing the reservation (an fallocate) is left to `put_run`.
        let len = rest.len() as u64 * UNIT_SIZE;
        if w.file().from_offset() + w.pos() != at || w.remaining() < len || w.room() < len {
            return Ok(false);
        }
        for u in rest {
            write_unit(w, *u, &self.pace)?;
        }
        w.publish();
        self.note_fill(w);
        self.written.store(true, Ordering::Release);
        self.max_physical
            .fetch_max(last.offset + u64::from(last.size), Ordering::AcqRel);
        Ok(true)
    }

    /// Under the writer lock: takes the last file's writer again when the queue let go of it
    /// while idle (`flush`, `recover`). Nothing to take in a queue without a file.
    fn resume_writer(&self, guard: &mut Option<FileWriter>) -> Result<()> {
        if guard.is_none() && !self.read_only {
            *guard = self.files.last_writer()?;
        }
        Ok(())
    }

    /// Under the writer lock, after a write: once the current file is half full, notes (once
    /// per file) that its successor should be prepared in the background (prepare.rs), if the
    /// writer got there fast (`FAST_HALF_FILE_MS`): an idle or slow queue's next file would
    /// hold disk long before its first unit, and it creates that file when it rolls.
    fn note_fill(&self, w: &FileWriter) {
        let f = w.file();
        if w.pos() * 2 < f.size() || self.next_asked.load(Ordering::Relaxed) == f.from_offset() {
            return;
        }
        self.next_asked.store(f.from_offset(), Ordering::Relaxed);
        let took = self
            .clock
            .now_ms()
            .saturating_sub(self.entered_ms.load(Ordering::Relaxed));
        if took <= FAST_HALF_FILE_MS {
            self.next_due
                .store(f.from_offset() + f.size(), Ordering::Relaxed);
        }
    }

    /// The start of the file to prepare next, once per file (the dispatcher sends it to the
    /// preparer after its write).
    pub fn take_next_file_due(&self) -> Option<u64> {
        if self.next_due.load(Ordering::Relaxed) == NO_FILE {
            return None;
        }
        let start = self.next_due.swap(NO_FILE, Ordering::Relaxed);
        (start != NO_FILE).then_some(start)
    }

    /// Puts back a due file the dispatcher could not send (the preparer's lock was busy).
    pub fn restore_next_file_due(&self, start: u64) {
        self.next_due.store(start, Ordering::Relaxed);
    }

    /// Writes one unit at `queue_offset` (placeholders first over a gap) unless the queue is
    /// already past it; the caller publishes.
    fn put_locked(
        &self,
        guard: &mut Option<FileWriter>,
        queue_offset: u64,
        unit: CqUnit,
    ) -> Result<bool> {
        let expected_byte = queue_offset * UNIT_SIZE;
        // The writer's position is the end of the queue; without one, look at the files.
        let mut end = match guard.as_ref() {
            Some(w) => w.file().from_offset() + w.pos(),
            None => self.files.max_offset(),
        };
        if guard.is_none() && self.files.is_empty() {
            end = expected_byte - expected_byte % self.files.file_size();
            self.min_logic.store(queue_offset, Ordering::Release);
        }
        if expected_byte < end {
            return Ok(false);
        }
        if expected_byte - end > self.files.file_size() {
            // A record claims a queue offset far past the queue's end: its header is damaged
            // (a legitimate gap only precedes a queue's very first unit). Filling the gap
            // with placeholders could take the whole disk.
            return Err(Error::Corrupted {
                path: self
                    .files
                    .last_file()
                    .map(|f| f.path().to_path_buf())
                    .unwrap_or_default(),
                offset: unit.offset,
                reason: format!(
                    "record for {}:{} claims queue offset {queue_offset}, the queue ends at {}",
                    self.topic,
                    self.queue_id,
                    end / UNIT_SIZE
                ),
                cause: None,
            });
        }
        while end < expected_byte {
            self.append_unit(guard, end, CqUnit::placeholder())?;
            end += UNIT_SIZE;
        }
        self.append_unit(guard, end, unit)?;
        Ok(true)
    }

    fn append_unit(&self, guard: &mut Option<FileWriter>, at: u64, unit: CqUnit) -> Result<()> {
        let need_roll = match guard.as_ref() {
            Some(w) => w.remaining() < UNIT_SIZE,
            None => true,
        };
        if need_roll {
            if let Some(w) = guard.as_mut() {
                w.publish();
            }
            *guard = None;
            *guard = Some(self.files.roll(at - at % self.files.file_size())?);
            self.entered_ms
                .store(self.clock.now_ms(), Ordering::Relaxed);
            kill_point!("consume_queue.rolled");
        }
        // `let else` rather than `ok_or(Error::Closed)`: this runs once per unit, and an
        // eagerly built error value still costs its drop.
        let Some(w) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        write_unit(w, unit, &self.pace)
    }

    /// Flushes unit files.
    ///
    /// A new file owes its creation fsync to this flush (the dispatcher rolled to it, or the
    /// preparer made it ahead), and its pages ahead of the writer were already faulted in
    /// (`warm_chunk_ahead`, `prepare_file`). That whole-file fsync writes those zero pages back and
    /// write-protects them, so each one's first unit would take a fault on the dispatching
    /// thread, usually a producer's. They are faulted in again here, once the debt is paid.
    ///
    /// A queue not written since its previous flush lets go of its writer and of its last
    /// file's pin (`MappedFileQueue::park_last`): the file is then unmapped like any other idle
    /// file, and the next put takes the writer again.
    pub fn flush(&self) -> Result<()> {
        let written = self.files.pinned_last().filter(|f| f.create_sync_due());
        let prepared = self.files.ready_file().filter(|f| f.create_sync_due());
        self.files.flush()?;
        if !self.written.swap(false, Ordering::AcqRel) {
            if let Some(mut guard) = crate::util::sync::try_lock(&self.writer) {
                if !self.written.load(Ordering::Acquire) {
                    *guard = None;
                    self.files.park_last();
                }
            }
        }
        if let Some(f) = written {
            let at = f.published();
            // From the page holding the write position (advice ranges start on a page).
            let _ = f.advise(
                at,
                (at / WARM_CHUNK + 2) * WARM_CHUNK,
                Advice::PopulateWrite,
            );
        }
        if let Some(f) = prepared {
            let _ = f.advise(0, PREPARED_WARM, Advice::PopulateWrite);
        }
        Ok(())
    }

    /// Re-reads the directory (read-only followers): maps new files, forgets deleted ones and,
    /// with `verify`, replaced ones (`MappedFileQueue::refresh`).
    pub fn refresh(&self, verify: bool) -> Result<()> {
        self.files.refresh(verify)
    }

    /// Deletes head files whose every unit points below `phy_min` (commit log expired), then
    /// moves the minimum offset past the remaining units that do (`correct_min_offset`).
    pub fn delete_expired(&self, phy_min: u64) -> Result<usize> {
        let n = self.files.delete_head_while(usize::MAX, |f| {
            let last_pos = f.size() - UNIT_SIZE;
            read_unit(f, last_pos).is_some_and(|u| u.offset + u64::from(u.size) <= phy_min)
        })?;
        if n > 0 {
            self.min_logic
                .store(self.files.min_offset() / UNIT_SIZE, Ordering::Release);
        }
        self.correct_min_offset(phy_min);
        Ok(n)
    }

    /// Moves the minimum queue offset to the first unit of the head file whose record the
    /// commit log still holds (RocketMQ's correctMinOffset): the head file can outlive some of
    /// the records it indexes. A queue's units point at increasing commit-log offsets, so a
    /// binary search finds it; placeholders and unwritten units count as "not below". Only
    /// ever raises the minimum; with every unit below `phy_min` it becomes the queue's end.
    /// Units are only appended, so the answer for a `phy_min` already applied cannot move.
    pub fn correct_min_offset(&self, phy_min: u64) {
        if phy_min <= self.min_corrected_for.load(Ordering::Acquire) {
            return;
        }
        let Some(f) = self.files.first_file() else {
            return;
        };
        let (mut lo, mut hi) = (0u64, f.size() / UNIT_SIZE);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match read_unit(&f, mid * UNIT_SIZE) {
                Some(u) if !u.is_placeholder() && u.offset < phy_min => lo = mid + 1,
                _ => hi = mid,
            }
        }
        let first_kept = (f.from_offset() / UNIT_SIZE + lo).min(self.max_offset());
        self.min_logic.fetch_max(first_kept, Ordering::AcqRel);
        self.min_corrected_for.fetch_max(phy_min, Ordering::AcqRel);
    }
}

/// Reads one unit with the cross-process protocol: acquire-load the size word, then copy.
fn read_unit(file: &MappedFile, pos: u64) -> Option<CqUnit> {
    let size = file.load_u32_acquire(pos + SIZE_POS as u64)?;
    if size == 0 {
        return None;
    }
    let mut b = [0u8; 20];
    if !file.copy_out(pos, &mut b) {
        return None;
    }
    b[SIZE_POS..SIZE_POS + 4].copy_from_slice(&size.to_be_bytes());
    CqUnit::decode(&b)
}

/// Byte position of the first invalid unit of `file` (recovery: a linear scan, because after a
/// power loss valid-looking units may follow a hole).
fn first_invalid_unit(file: &MappedFile) -> u64 {
    let mut pos = 0;
    while pos + UNIT_SIZE <= file.size() && read_unit(file, pos).is_some() {
        pos += UNIT_SIZE;
    }
    pos
}

/// Byte position in `file` just past its last valid unit, by binary search: valid for files
/// written by a live writer, whose units always form a non-zero prefix.
fn valid_units_end(file: &MappedFile) -> u64 {
    let units = file.size() / UNIT_SIZE;
    let (mut lo, mut hi) = (0u64, units);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if read_unit(file, mid * UNIT_SIZE).is_some() {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo * UNIT_SIZE
}

/// A unit as the index's readers see it: a placeholder is a slot with no record.
#[inline]
fn entry_of(u: CqUnit) -> QueueEntry {
    if u.is_placeholder() {
        return QueueEntry::EMPTY_SLOT;
    }
    QueueEntry {
        offset: u.offset,
        size: u.size,
        tags_code: u.tags_code,
    }
}

impl LogicalQueue for ConsumeQueue {
    fn min_offset(&self) -> u64 {
        ConsumeQueue::min_offset(self)
    }

    fn max_offset(&self) -> u64 {
        ConsumeQueue::max_offset(self)
    }

    fn entry(&self, k: u64) -> Option<QueueEntry> {
        self.unit(k).map(entry_of)
    }

    /// O(1) when nothing is to skip (the entry at the minimum is at or past `phy`, the case of
    /// every read once skipped); else a binary search over the queue's units. A placeholder or
    /// unreadable unit stands for no record: it counts as the first real unit after it does,
    /// so "below `phy`" stays true for a prefix of the queue and false after it.
    fn skip_below(&self, phy: u64) {
        let hi = self.max_offset();
        let below = |mut k: u64| {
            while k < hi {
                match self.unit(k) {
                    Some(u) if !u.is_placeholder() => return u.offset < phy,
                    _ => k += 1,
                }
            }
            false
        };
        let mut lo = self.min_offset();
        if lo >= hi || !below(lo) {
            return;
        }
        let mut top = hi;
        while lo < top {
            let mid = lo + (top - lo) / 2;
            if below(mid) {
                lo = mid + 1;
            } else {
                top = mid;
            }
        }
        self.min_logic.fetch_max(lo, Ordering::AcqRel);
    }

    fn entries(&self, from: u64, max: usize, out: &mut Vec<(u64, QueueEntry)>) {
        self.units_as(from, max, out, entry_of);
    }

    /// The unit file holding `from` is advised away when `to` is in a later one.
    fn release_behind(&self, from: u64, to: u64) {
        let units_per_file = self.files.file_size() / UNIT_SIZE;
        if units_per_file > 0 && from / units_per_file != to / units_per_file {
            if let Some(f) = self.files.find(from * UNIT_SIZE) {
                let _ = f.advise(0, f.size(), Advice::DontNeed);
            }
        }
    }

    fn locate(&self, k: u64) -> (PathBuf, u64) {
        let byte = k.saturating_mul(UNIT_SIZE);
        match self.files.find(byte) {
            Some(f) => (f.path().to_path_buf(), byte - f.from_offset()),
            None => (PathBuf::new(), byte),
        }
    }

    fn follow(&self, verify: bool, log_min: u64) {
        // A failed refresh leaves the file list as it was, for the next call to retry.
        let _ = self.refresh(verify);
        self.correct_min_offset(log_min);
    }
}

impl crate::prepare::Preparable for ConsumeQueue {
    fn prepare_next_file(&self, start: u64) {
        // A failure only means the roll creates the file and reports the error.
        let _ = self.prepare_file(start);
    }

    /// Nothing: the dispatcher warms a queue's pages inline (`write_unit`).
    fn fault_in(&self, _from: u64, _to: u64) {}
}

/// Appends `unit` at the writer's position (which has room for it in the file), its size
/// word last with release ordering, and keeps the pages ahead reserved and faulted in
/// (`pace`: the queue's).
///
/// # Errors
/// `StoreFull` when the reservation must grow for this unit and the disk has no room:
/// nothing is written then.
#[inline]
fn write_unit(w: &mut FileWriter, unit: CqUnit, pace: &Pace) -> Result<()> {
    let before = w.pos();
    let reserved = w.file().reserved();
    if before + UNIT_SIZE > reserved {
        w.make_room(UNIT_SIZE)?;
        // The pages just reserved are the ones the warm-ahead could not fault in (it stops
        // at the reserved end): fault them in now, up to where it would have.
        let warm_end = (before / WARM_CHUNK + 2) * WARM_CHUNK;
        let _ = w.file().populate(reserved, warm_end);
    }
    let bytes = unit.encode();
    let ok = w.append_with_release_word(UNIT_SIZE as usize, SIZE_POS, unit.size, |b| {
        b[..SIZE_POS].copy_from_slice(&bytes[..SIZE_POS]);
        b[SIZE_POS + 4..].copy_from_slice(&bytes[SIZE_POS + 4..]);
    });
    if !ok {
        return Err(Error::Closed);
    }
    let after = before + UNIT_SIZE;
    if before / WARM_CHUNK != after / WARM_CHUNK {
        // A whole chunk written in this file: reserve the chunk the warm-ahead readies next
        // too (a hint: a failure leaves `make_room` to report it when a unit needs it).
        let _ = w.file().reserve_to((after / WARM_CHUNK + 2) * WARM_CHUNK);
    }
    warm_chunk_ahead(w.file(), before, after, WARM_CHUNK, pace);
    Ok(())
}
