//! The preparer (RocketMQ's AllocateMappedFileService): one background thread per writable
//! store that creates files before their writers need them and faults in the pages just ahead
//! of the commit log's writer.
//!
//! Creating a file costs an open, an fallocate, a mapping and two fsyncs (the file's and its
//! directory's), 0.3 to a few milliseconds; done at a roll, it would stall the sender. So
//! writers ask for the next file once their current one is half full:
//! - the commit log (`Prepare::File`), and its warm-ahead (`Prepare::Warm`);
//! - each consume queue (`Prepare::QueueFile`), whose files are written by the dispatching
//!   thread, usually a producer's: with the default 50,000-unit files and 128-byte messages a
//!   queue rolls every few milliseconds at full speed.
//!
//! Jobs are hints. A failed, late or dropped job only means the writer creates the file, or
//! takes the page faults, itself. A prepared file waits in its queue's ready slot
//! (`MappedFileQueue::prepare`) and is taken by the roll to its offset. Writers hold a
//! `Preparer`, which counts the file jobs not yet done: `Store::flush` waits for those
//! (`Preparer::wait_for_files`), so that after a flush nothing is being created on disk.
//!
//! Crash behaviour: a prepared file not yet rolled to is all zeros. Recovery never reads past
//! the end of the valid data before it (commit log: the scan stops at the first zero header;
//! consume queue: `ConsumeQueue::recover` deletes empty files at the end, and read-only
//! followers skip an empty last file), so it needs no repair.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, Weak};

use crate::commit_log::CommitLog;
use crate::consume_queue::ConsumeQueue;
use crate::mapped_file::POPULATE_STEP;
use crate::mapped_file_queue::WARM_AHEAD;

/// Work for the preparer.
#[derive(Debug, Clone)]
pub enum Prepare {
    /// Create (preallocate, map) the commit-log file starting at this offset.
    File(u64),
    /// Fault in the commit-log pages of `[from, to)` so the appender does not stop on them.
    Warm(u64, u64),
    /// Create the file of this consume queue starting at this byte offset, its first pages
    /// faulted in (`ConsumeQueue::prepare_file`).
    QueueFile(Weak<ConsumeQueue>, u64),
    /// Answer once every job sent before this one is done (`Preparer::wait_for_files`).
    Barrier(Sender<()>),
    /// Exit after the jobs sent before this one (store close); later jobs are dropped.
    Stop,
}

impl Prepare {
    /// Whether the job creates a file (counted in `Preparer::files_pending`).
    fn makes_file(&self) -> bool {
        matches!(self, Prepare::File(_) | Prepare::QueueFile(..))
    }
}

/// The writers' handle on the preparer: its job queue, and how many file-creating jobs were
/// sent and are not done yet.
#[derive(Debug, Clone)]
pub struct Preparer {
    tx: Sender<Prepare>,
    files_pending: Arc<AtomicUsize>,
}

impl Preparer {
    /// A handle on `tx`, whose receiving thread runs `run` with `self.counter()`.
    pub fn new(tx: Sender<Prepare>) -> Self {
        Preparer {
            tx,
            files_pending: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The count the preparer thread lowers as it finishes file jobs.
    pub fn counter(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.files_pending)
    }

    /// Queues `job`; false when the preparer is gone.
    pub fn send(&self, job: Prepare) -> bool {
        let file = job.makes_file();
        if file {
            self.files_pending.fetch_add(1, Ordering::AcqRel);
        }
        let sent = self.tx.send(job).is_ok();
        if file && !sent {
            self.files_pending.fetch_sub(1, Ordering::AcqRel);
        }
        sent
    }

    /// Blocks until every file job sent so far is done (at most `limit`); warm-ups are waited
    /// for only when queued before such a job.
    pub fn wait_for_files(&self, limit: std::time::Duration) {
        if self.files_pending.load(Ordering::Acquire) == 0 {
            return;
        }
        let (done, answer) = std::sync::mpsc::channel();
        if self.tx.send(Prepare::Barrier(done)).is_ok() {
            let _ = answer.recv_timeout(limit);
        }
    }
}

/// The preparer thread as a store service: `stop` queues `Prepare::Stop`, so the thread
/// finishes the jobs queued before it and exits.
#[derive(Debug)]
pub struct PreparerService {
    commit_log: Weak<CommitLog>,
    jobs: Mutex<Option<Receiver<Prepare>>>,
    tx: Preparer,
}

impl PreparerService {
    /// A preparer for `commit_log` (and the files of derived stores given `preparer()`).
    pub fn new(commit_log: &Arc<CommitLog>) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        PreparerService {
            commit_log: Arc::downgrade(commit_log),
            jobs: Mutex::new(Some(rx)),
            tx: Preparer::new(tx),
        }
    }

    /// A handle writers send jobs through.
    pub fn preparer(&self) -> Preparer {
        self.tx.clone()
    }
}

impl crate::service::Service for PreparerService {
    fn name(&self) -> &'static str {
        "prealloc"
    }

    /// Runs the jobs; a second call returns at once (the job queue has one consumer).
    fn run(&self) {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(jobs) = jobs {
            run(&self.commit_log, &jobs, &self.tx.files_pending);
        }
    }

    fn stop(&self) {
        let _ = self.tx.tx.send(Prepare::Stop);
    }
}

/// Body of the preparer thread: runs jobs until `Prepare::Stop`, every sender is gone or the
/// commit log is; lowers `files_pending` after each file job.
pub fn run(commit_log: &Weak<CommitLog>, jobs: &Receiver<Prepare>, files_pending: &AtomicUsize) {
    while let Ok(job) = jobs.recv() {
        if matches!(job, Prepare::Stop) {
            break;
        }
        let file = job.makes_file();
        let Some(cl) = commit_log.upgrade() else {
            break;
        };
        // A failure here only means the roll creates the file itself and reports the error
        // to the writer.
        match job {
            Prepare::File(start) => {
                let wanted = cl.warm_wanted();
                if cl.max_offset() == start {
                    // A new log's first file: its first pages are the writer's next ones, so
                    // they are faulted in as the warm-ahead does it, published step by step.
                    if cl.files().prepare(start, 0).is_ok() && wanted {
                        warm_log(&cl, start, start + WARM_AHEAD);
                    }
                } else if cl.files().prepare(start, 0).is_ok() && wanted {
                    fault_in_unpublished(&cl, start, start + WARM_AHEAD);
                }
            }
            Prepare::Warm(from, to) => warm_log(&cl, from, to),
            Prepare::QueueFile(cq, start) => {
                if let Some(cq) = cq.upgrade() {
                    let _ = cq.prepare_file(start);
                }
            }
            Prepare::Barrier(done) => {
                let _ = done.send(());
            }
            Prepare::Stop => break,
        }
        if file {
            files_pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// How far ahead of a writer that has passed it the preparer restarts: room for the writer's
/// next batch (a thousand 128 B records take 244 KB), which it starts while the preparer
/// works on its first step.
const WRITER_LEAD: u64 = 256 << 10;

/// Where a restart ahead of the writer is aligned, and where steps end: a zero fill of a
/// whole aligned step becomes one large folio (the kernel aligns folios to their size).
const ALIGN: u64 = POPULATE_STEP;

/// Faults in the log's pages of `[from, to)` one `POPULATE_STEP` at a time, publishing each
/// step as it is done, so the appender writes into a step's pages as soon as they are ready.
/// When the writer has passed it, or is writing a batch that reaches past it (on this 2-vCPU
/// VM it appends small records twice as fast as the kernel faults pages in), the work
/// restarts `WRITER_LEAD` ahead of the writer: pages it has written need nothing, and
/// faulting in the pages it is writing with `pwrite` only makes both threads wait on each
/// page's lock, page after page (a 128 B batch then took 250 us instead of 100). A writer that
/// has not reached `at` is left to come (a new log's first pages are faulted in from its
/// start).
fn warm_log(cl: &CommitLog, from: u64, to: u64) {
    let mut at = from;
    while at < to {
        let writer = cl.writing_to();
        if writer > at {
            at = (writer + WRITER_LEAD).next_multiple_of(ALIGN);
            continue;
        }
        let end = to.min((at / ALIGN + 1) * ALIGN);
        // `None`: the writer announced a write past `at` since it was looked at (the loop
        // then restarts ahead of it), or the log's end is not known.
        let Some(got) = cl.fault_in(at, end) else {
            if cl.writing_to() > at {
                continue;
            }
            break;
        };
        if got > at {
            cl.set_warmed(at, got);
        }
        if got < end {
            break;
        }
        at = end;
    }
}

/// Readies the first pages of the next file, `[from, to)`, without publishing them as warm:
/// the writer is still in the file before, whose warm range must stay. It reaches these
/// after the roll, when a warm-ahead job publishes them at little cost (they are in place).
fn fault_in_unpublished(cl: &CommitLog, from: u64, to: u64) {
    let mut at = from;
    while at < to {
        let end = to.min((at / ALIGN + 1) * ALIGN);
        match cl.fault_in(at, end) {
            Some(got) if got == end => at = end,
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::mpsc;

    use super::*;
    use crate::mapped_file_queue::{Backing, MappedFileQueue};

    const FILE: u64 = 1 << 20;

    fn commit_log(dir: &std::path::Path) -> Arc<CommitLog> {
        let backing = Backing::Dir {
            dir: dir.to_path_buf(),
            mode: 0o600,
            populate: false,
        };
        Arc::new(CommitLog::new(MappedFileQueue::new(backing, FILE, true)))
    }

    /// Runs `jobs` on this thread, as the preparer thread would, until they are all done.
    fn run_jobs(cl: &Arc<CommitLog>, jobs: Vec<Prepare>) {
        let (tx, rx) = mpsc::channel();
        for j in jobs {
            tx.send(j).unwrap();
        }
        drop(tx);
        run(&Arc::downgrade(cl), &rx, &AtomicUsize::new(usize::MAX));
    }

    #[test]
    fn a_new_logs_first_file_counts_as_warm_and_a_later_file_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let cl = commit_log(dir.path());
        assert_eq!(cl.warmed(), 0);
        run_jobs(&cl, vec![Prepare::File(0)]);
        assert!(dir
            .path()
            .join(crate::util::fs::offset_file_name(0))
            .exists());
        // From its start to the end of the file (the next one does not exist yet).
        let warm_end = WARM_AHEAD.min(FILE);
        assert_eq!(
            cl.warmed(),
            warm_end,
            "the writer starts in this file's warm pages"
        );
        assert!(cl.is_warm(0, warm_end));
        assert!(!cl.is_warm(0, warm_end + 1));

        // The writer is in the first file: the next one's warm pages are not the next to write.
        let other = tempfile::tempdir().unwrap();
        let cl = commit_log(other.path());
        cl.set_max_offset(4096);
        run_jobs(&cl, vec![Prepare::File(1 << 20)]);
        assert_eq!(cl.warmed(), 0);

        // The first file was made without its pages (as a writer rolling to it first would),
        // and nothing is written yet: the job faults its first pages in all the same.
        let third = tempfile::tempdir().unwrap();
        let cl = commit_log(third.path());
        assert!(!cl.files().prepare(0, 0).unwrap());
        run_jobs(&cl, vec![Prepare::File(0)]);
        assert_eq!(cl.warmed(), WARM_AHEAD.min(FILE));
    }

    #[test]
    fn warming_restarts_ahead_of_a_writer_that_has_passed_it() {
        let dir = tempfile::tempdir().unwrap();
        let cl = commit_log(dir.path());
        assert!(!cl.files().prepare(0, 0).unwrap());
        // The writer is 300 KiB in when the job runs: the pages it wrote and those it may
        // be writing are left alone, and only the range past them counts as warm.
        let written = 300 << 10;
        cl.set_max_offset(written);
        run_jobs(&cl, vec![Prepare::Warm(0, FILE)]);
        let from = (written + WRITER_LEAD).next_multiple_of(ALIGN);
        assert_eq!(cl.warmed(), FILE);
        assert!(cl.is_warm(from, FILE));
        assert!(!cl.is_warm(from - 1, FILE));
        assert!(!cl.is_warm(0, 4096));
    }

    #[test]
    fn a_warm_range_that_restarts_past_its_end_forgets_the_pages_before_the_gap() {
        let dir = tempfile::tempdir().unwrap();
        let cl = commit_log(dir.path());
        cl.set_warmed(0, 100);
        assert!(cl.is_warm(0, 100));
        cl.set_warmed(100, 200);
        assert!(cl.is_warm(0, 200), "contiguous steps extend the range");
        cl.set_warmed(300, 400);
        assert!(cl.is_warm(300, 400));
        assert!(!cl.is_warm(150, 350), "the gap is not warm");
        assert!(
            !cl.is_warm(0, 100),
            "nor what lay before it, which the writer has passed"
        );
        assert!(!cl.is_warm(300, 401));
    }
}
