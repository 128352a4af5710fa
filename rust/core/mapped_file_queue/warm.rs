//! Warm-ahead: keeping the pages just ahead of a mapped file queue's writer faulted in, so its
//! writes do not stop for page allocation and zeroing (RocketMQ's warm-up of mapped files,
//! done continuously rather than once per file).
//!
//! Two shapes, for two kinds of writer:
//! - `PageWarmer`, for a writer that must not do the work itself (the commit log's appender,
//!   on a producer's thread). The writer reports each write (`after_write`) and, once its file
//!   is half full, asks the preparer (prepare.rs) for the next file (`maybe_prepare_next`);
//!   every `WARM_STEP` bytes written it asks the preparer to fault in up to `WARM_AHEAD` past
//!   its position. The preparer works in `POPULATE_STEP`s, publishing each (`[warm_from,
//!   warmed)`), and restarts ahead of the writer when the writer overtakes it. In
//!   `WarmAhead::ZeroFill` mode, while the writer goes fast (pace.rs), it writes zeros over
//!   each step before faulting it in, behind the fill fence (fence.rs), which keeps those
//!   writes off every byte the writer writes: the writer announces each write to
//!   `PageWarmer::fence` first.
//! - `warm_chunk_ahead`, for a writer that does it inline (a consume queue's dispatcher: its
//!   writes are small and regular, and it is the file's only writer, so no fence is needed).
//!
//! Invariants
//! - `[warm_from, warmed)` only ever covers pages that were faulted in; only the preparer
//!   moves it. It stores a new `warm_from` (after skipping pages the writer caught up with)
//!   before the `warmed` that covers pages past it, so a reader that loads `warmed` then
//!   `warm_from` never sees a range wider than the one faulted in.
//! - A zero fill never writes a byte the writer has written or announced (fence.rs).
//!
//! Both are optimisations only: a failed, late or dropped job means the writer creates the
//! file or takes the page faults itself. Crash behaviour: the zeros lie past the end of the
//! queue's data, where a fallocated file reads as zeros anyway.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

use super::fence::FillFence;
use super::pace::Pace;
use super::MappedFileQueue;
use crate::mapped_file::mmap::Advice;
use crate::mapped_file::{MappedFile, POPULATE_STEP};
use crate::prepare::{Preparable, Prepare, Preparer};
use crate::util::clock::now_ms;

/// How far ahead of the write position the commit log's pages are faulted in.
pub const WARM_AHEAD: u64 = 4 << 20;

/// Warm-ahead is re-requested each time the write position has advanced this far.
const WARM_STEP: u64 = 1 << 20;

/// How far ahead of a writer that has passed it the preparer restarts: room for the writer's
/// next batch (a thousand 128 B records take 244 KB), which it starts while the preparer
/// works on its first step.
const WRITER_LEAD: u64 = 256 << 10;

/// Where a restart ahead of the writer is aligned, and where steps end: a zero fill of a
/// whole aligned step becomes one large folio (the kernel aligns folios to their size).
const ALIGN: u64 = POPULATE_STEP;

/// How the preparer readies the pages ahead of the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmAhead {
    /// Not at all: whole files are populated when they are created.
    Off,
    /// Faulted in (`MADV_POPULATE_WRITE`), 4 KiB pages: sync mode, whose group commits write
    /// whole folios back.
    Fault,
    /// Zeros written over them first, then faulted in: the kernel builds large folios, a
    /// third cheaper to fill (async mode; fence.rs). Only while the writer goes fast
    /// (pace.rs); page by page otherwise.
    ZeroFill,
}

/// Where the writer's jobs go: the preparer, and the queue's owner that runs them.
#[derive(Debug)]
struct Jobs {
    preparer: Preparer,
    target: Weak<dyn Preparable>,
}

/// The warm-ahead state of one mapped file queue with a preparer (see the module doc).
///
/// The writer's methods (`after_write`, `maybe_prepare_next`, `set_wanted`) are called under
/// the writer's lock; the preparer's (`prepare_file`, `warm`, `fault_in`) from the preparer
/// thread only.
#[derive(Debug)]
pub struct PageWarmer {
    jobs: Mutex<Option<Jobs>>,
    // Start of the last file for which the next one was requested.
    prepare_asked: AtomicU64,
    // Pages below this offset were asked to be faulted in; `u64::MAX` while there is no
    // warm-ahead (no preparer, or whole files populated).
    warm_to: AtomicU64,
    // Pages below this offset have been faulted in (a warm-ahead job finished, or whole
    // files are populated at creation: `u64::MAX`), down to `warm_from`. Batches within
    // `[warm_from, warmed)` are encoded straight into the mapping.
    warmed: AtomicU64,
    warm_from: AtomicU64,
    // The end of the write being made (or of the last one), announced before its bytes are
    // written: the preparer keeps off the pages the writer is in (`warm`), and its zero fill
    // off every byte the writer writes.
    fence: FillFence,
    // The warm-ahead may write zeros before faulting pages in (`WarmAhead::ZeroFill`), and
    // does so now: the writer went fast over the latest `WARM_STEP` (`after_write`).
    fill_allowed: AtomicBool,
    zero_fill: AtomicBool,
    pace: Pace,
    // Whether the latest write wants the pages ahead of it faulted in: not after a batch of
    // large records, which goes to the kernel with gathered `write()`s whatever the state of
    // the pages. Faulting pages in costs the kernel about three times what its own page-cache
    // writes do, and the preparer faulting the pages the writer is writing at that moment
    // contends with it for their locks: 4 KiB batches ran 40% faster without it.
    wanted: AtomicBool,
}

impl Default for PageWarmer {
    fn default() -> Self {
        PageWarmer {
            jobs: Mutex::new(None),
            prepare_asked: AtomicU64::new(u64::MAX),
            warm_to: AtomicU64::new(u64::MAX),
            warmed: AtomicU64::new(0),
            warm_from: AtomicU64::new(0),
            fence: FillFence::default(),
            fill_allowed: AtomicBool::new(false),
            zero_fill: AtomicBool::new(false),
            pace: Pace::default(),
            wanted: AtomicBool::new(true),
        }
    }
}

impl PageWarmer {
    /// Sends jobs for `target` (the queue's owner) to `preparer`: next files always, and
    /// warm-ahead requests unless `mode` is `Off` (pointless when whole files are populated
    /// at creation).
    pub fn set_preparer(&self, preparer: Preparer, target: Weak<dyn Preparable>, mode: WarmAhead) {
        *self.lock_jobs() = Some(Jobs { preparer, target });
        if mode == WarmAhead::Off {
            self.warmed.store(u64::MAX, Ordering::Relaxed);
        } else {
            self.warm_to.store(0, Ordering::Relaxed);
        }
        self.fill_allowed
            .store(mode == WarmAhead::ZeroFill, Ordering::Relaxed);
    }

    /// Stops sending jobs (store close: the preparer then exits once told to).
    pub fn stop(&self) {
        *self.lock_jobs() = None;
    }

    fn lock_jobs(&self) -> std::sync::MutexGuard<'_, Option<Jobs>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, job: impl FnOnce(Weak<dyn Preparable>) -> Prepare) {
        if let Some(j) = self.lock_jobs().as_ref() {
            // A closed preparer only means the writer does the work itself.
            let _ = j.preparer.send(job(j.target.clone()));
        }
    }

    /// The fence the writer announces each write to before making it.
    pub fn fence(&self) -> &FillFence {
        &self.fence
    }

    /// Pages below this offset are known to be faulted in (`u64::MAX`: whole files are).
    pub fn warmed(&self) -> u64 {
        self.warmed.load(Ordering::Acquire)
    }

    /// Preparer: it faulted in the pages of `[from, to)`: with those it faulted in before,
    /// when `from` is not past them, or alone.
    pub fn set_warmed(&self, from: u64, to: u64) {
        if from > self.warmed.load(Ordering::Acquire) {
            self.warm_from.store(from, Ordering::Release);
        }
        self.warmed.fetch_max(to, Ordering::Release);
    }

    /// Whether the pages of `[start, end)` are known to be faulted in.
    #[inline]
    pub fn is_warm(&self, start: u64, end: u64) -> bool {
        let to = self.warmed.load(Ordering::Acquire);
        end <= to && start >= self.warm_from.load(Ordering::Acquire)
    }

    /// Whether the latest write wants the pages ahead of it faulted in.
    pub fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
    }

    /// Writer: whether its latest write wants the pages ahead faulted in (not a batch
    /// written with gathered `write()`s).
    #[inline]
    pub fn set_wanted(&self, wanted: bool) {
        if self.wanted.load(Ordering::Relaxed) != wanted {
            self.wanted.store(wanted, Ordering::Relaxed);
        }
    }

    /// How far the writer has written or is writing now: the end of the write in progress,
    /// or `published` (the end of the last write published; `u64::MAX`: not known),
    /// whichever is further.
    pub fn writing_to(&self, published: u64) -> u64 {
        let announced = self.fence.writing_to();
        if published == u64::MAX {
            announced
        } else {
            published.max(announced)
        }
    }

    /// Writer, after a write into `file` left its position at `pos`: asks for the next file
    /// once this one is half full (once per file).
    #[inline]
    pub fn maybe_prepare_next(&self, file: &MappedFile, pos: u64) {
        if pos * 2 < file.size() || self.prepare_asked.load(Ordering::Relaxed) == file.from_offset()
        {
            return;
        }
        self.prepare_asked
            .store(file.from_offset(), Ordering::Relaxed);
        let next = file.from_offset() + file.size();
        self.send(|t| Prepare::File(t, next));
    }

    /// Writer, after a write ending at `end` that went through the mapping: every `WARM_STEP`
    /// bytes, asks the preparer to fault in up to `WARM_AHEAD` past `end`, so page allocation
    /// and zeroing happen on that thread rather than inside the writer's writes. Zero-filled
    /// first when allowed and the writer covered the step fast (pace.rs).
    #[inline]
    pub fn after_write(&self, end: u64) {
        let warmed = self.warm_to.load(Ordering::Relaxed);
        if warmed == u64::MAX || end + WARM_AHEAD < warmed + WARM_STEP {
            return;
        }
        if self.fill_allowed.load(Ordering::Relaxed) {
            let fast = self.pace.mark(end, now_ms());
            if self.zero_fill.load(Ordering::Relaxed) != fast {
                self.zero_fill.store(fast, Ordering::Relaxed);
            }
        }
        let to = end + WARM_AHEAD;
        self.warm_to.store(to, Ordering::Relaxed);
        let from = warmed.max(end);
        self.send(|t| Prepare::Warm(t, from, to));
    }

    /// Preparer: creates the file of `files` starting at `start` and faults in its first
    /// pages when the writer wants them. `at_writer`: the writer's position is that file's
    /// start (a new queue's first file), so they count as warm as they are done; otherwise
    /// the writer is still in the file before, whose warm range must stay, and they are
    /// faulted in unpublished (a later warm-ahead job publishes them at little cost).
    /// `published`: as for `fault_in`.
    pub fn prepare_file(
        &self,
        files: &MappedFileQueue,
        start: u64,
        at_writer: bool,
        published: &AtomicU64,
    ) {
        let wanted = self.wanted();
        // A failure only means the roll creates the file itself and reports the error to
        // the writer.
        if files.prepare(start, 0).is_err() || !wanted {
            return;
        }
        if at_writer {
            self.warm(files, start, start + WARM_AHEAD, published);
        } else {
            let mut at = start;
            let to = start + WARM_AHEAD;
            while at < to {
                let end = to.min((at / ALIGN + 1) * ALIGN);
                match self.fault_in(files, at, end, published) {
                    Some(got) if got == end => at = end,
                    _ => break,
                }
            }
        }
    }

    /// Preparer: faults in the pages of `[from, to)` one `POPULATE_STEP` at a time,
    /// publishing each step as it is done, so the writer writes into a step's pages as soon
    /// as they are ready. When the writer has passed it, or is writing a batch that reaches
    /// past it (on a 2-vCPU VM the commit log appends small records twice as fast as the
    /// kernel faults pages in), the work restarts `WRITER_LEAD` ahead of the writer: pages it
    /// has written need nothing, and faulting in the pages it is writing only makes both
    /// threads wait on each page's lock, page after page. A writer that has not reached `from`
    /// is left to come (a new queue's first pages are faulted in from its start).
    pub fn warm(&self, files: &MappedFileQueue, from: u64, to: u64, published: &AtomicU64) {
        let mut at = from;
        while at < to {
            let writer = self.writing_to(published.load(Ordering::Acquire));
            if writer > at {
                at = (writer + WRITER_LEAD).next_multiple_of(ALIGN);
                continue;
            }
            let end = to.min((at / ALIGN + 1) * ALIGN);
            // `None`: the writer announced a write past `at` since it was looked at (the loop
            // then restarts ahead of it), or the queue's end is not known.
            let Some(got) = self.fault_in(files, at, end, published) else {
                if self.writing_to(published.load(Ordering::Acquire)) > at {
                    continue;
                }
                break;
            };
            if got > at {
                self.set_warmed(at, got);
            }
            if got < end {
                break;
            }
            at = end;
        }
    }

    /// Preparer: readies the pages of `[at, end)` of `files` (one step, in one file or the
    /// prepared next one) for the writer and returns how far it got, or `None`, having
    /// written nothing, when the writer has announced a write past `at`. `published`: one
    /// past the writer's last published byte (`u64::MAX`: not known), read with the fence's
    /// ordering; in `ZeroFill` mode the zeros are written only behind the fence.
    pub fn fault_in(
        &self,
        files: &MappedFileQueue,
        at: u64,
        end: u64,
        published: &AtomicU64,
    ) -> Option<u64> {
        if self.zero_fill.load(Ordering::Relaxed) {
            let filled = self.fence.fill_if_ahead(
                at,
                || published.load(Ordering::SeqCst),
                || files.zero_fill(at, end),
            )?;
            return Some(files.warm(at, filled));
        }
        if self.writing_to(published.load(Ordering::Acquire)) > at {
            return None;
        }
        Some(files.warm(at, end))
    }

    /// Zero-fills before faulting in from now on, as after a fast step (tests of the fence).
    #[cfg(test)]
    pub(crate) fn force_zero_fill(&self) {
        self.zero_fill.store(true, Ordering::Relaxed);
    }
}

/// Inline warm-ahead for a file's only writer: when a write (file bytes `[before, after)`)
/// enters a new `chunk`, faults in the next chunk in one call, instead of a page fault every
/// 4 KiB on the writer's thread. When the writer filled its last chunk fast (pace.rs), the
/// next is first written over with zeros (`MappedFile::zero_fill`: the kernel then builds it
/// from one large folio, which makes filling it about a third cheaper); the caller is the
/// file's only writer and has written nothing past `after`, so the zeros land on zeros. Both
/// are optimisations only: a failure leaves the pages to be faulted in on write.
#[inline]
pub fn warm_chunk_ahead(file: &MappedFile, before: u64, after: u64, chunk: u64, pace: &Pace) {
    if before != 0 && before / chunk == after / chunk {
        return;
    }
    let size = file.size();
    let next = (after / chunk + 1) * chunk;
    let from = if before == 0 { 0 } else { next };
    if pace.mark(file.from_offset() + after, now_ms()) {
        let _ = file.zero_fill(next.min(size), (next + chunk).min(size));
    }
    let _ = file.advise(
        from.min(size),
        (next + chunk).min(size),
        Advice::PopulateWrite,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warm_range_that_restarts_past_its_end_forgets_the_pages_before_the_gap() {
        let w = PageWarmer::default();
        w.set_warmed(0, 100);
        assert!(w.is_warm(0, 100));
        w.set_warmed(100, 200);
        assert!(w.is_warm(0, 200), "contiguous steps extend the range");
        w.set_warmed(300, 400);
        assert!(w.is_warm(300, 400));
        assert!(!w.is_warm(150, 350), "the gap is not warm");
        assert!(
            !w.is_warm(0, 100),
            "nor what lay before it, which the writer has passed"
        );
        assert!(!w.is_warm(300, 401));
    }
}
