//! The preparer (RocketMQ's AllocateMappedFileService): one background thread per writable
//! store that creates files before their writers need them and faults in the pages just ahead
//! of a writer.
//!
//! Creating a file costs an open, an fallocate, a mapping and two fsyncs (the file's and its
//! directory's), 0.3 to a few milliseconds; done at a roll, it would stall the sender. So
//! writers ask for the next file once their current one is half full (`Prepare::File`), and
//! may ask for the pages ahead of them to be faulted in (`Prepare::Warm`): the commit log
//! (mapped_file_queue/warm.rs) does both; a consume queue, whose files are written by the
//! dispatching thread, usually a producer's, asks for its next file only when it is written
//! fast (half a file within `consume_queue::FAST_HALF_FILE_MS`; with the default 50,000-unit
//! files and 128-byte messages a queue rolls every few milliseconds at full speed). A slow or
//! idle queue creates its next file when it rolls: a prepared file would hold disk for units
//! that may never come.
//!
//! The preparer knows its writers only through `Preparable`, which they implement: it runs a
//! job by calling the writer named in it, and drops a job whose writer is gone.
//!
//! Jobs are hints. A failed, late or dropped job only means the writer creates the file, or
//! takes the page faults, itself. A prepared file waits in its queue's ready slot
//! (`MappedFileQueue::prepare`) and is taken by the roll to its offset. Writers hold a
//! `Preparer`, which counts the file jobs not yet done: `Store::flush` waits for those
//! (`Preparer::wait_for_files`), so that after a flush nothing is being created on disk.
//!
//! Shared writers publish a prepared file under its name at once and never delete it at
//! close (another process may roll to it); see mapped_file_queue/mod.rs.
//!
//! Crash behaviour: a prepared file not yet rolled to is all zeros. Recovery never reads past
//! the end of the valid data before it (commit log: the scan stops at the first zero header;
//! consume queue: `ConsumeQueue::recover` deletes empty files at the end, and read-only
//! followers skip an empty last file), so it needs no repair.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, Weak};

/// A writer whose files and pages the preparer readies. Both are hints: a failure is not
/// reported, and the writer does the work itself when it gets there first.
pub trait Preparable: Send + Sync + std::fmt::Debug {
    /// Creates (preallocates, maps) the file starting at byte offset `start`, ready for the
    /// roll to it, its first pages faulted in as the writer wants them.
    fn prepare_next_file(&self, start: u64);

    /// Faults in the pages of `[from, to)` (byte offsets) ahead of the writer.
    fn fault_in(&self, from: u64, to: u64);
}

/// Work for the preparer.
#[derive(Debug, Clone)]
pub enum Prepare {
    /// Create the writer's file starting at this offset (`Preparable::prepare_next_file`).
    File(Weak<dyn Preparable>, u64),
    /// Fault in the writer's pages of `[from, to)` so it does not stop on them
    /// (`Preparable::fault_in`).
    Warm(Weak<dyn Preparable>, u64, u64),
    /// Answer once every job sent before this one is done (`Preparer::wait_for_files`).
    Barrier(Sender<()>),
    /// Exit after the jobs sent before this one (store close); later jobs are dropped.
    Stop,
}

impl Prepare {
    /// Whether the job creates a file (counted in `Preparer::files_pending`).
    fn makes_file(&self) -> bool {
        matches!(self, Prepare::File(..))
    }

    /// `File` for `writer`'s file starting at `start`.
    pub fn file<P: Preparable + 'static>(writer: &Arc<P>, start: u64) -> Self {
        let writer: Weak<dyn Preparable> = Arc::downgrade(writer) as Weak<dyn Preparable>;
        Prepare::File(writer, start)
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
    jobs: Mutex<Option<Receiver<Prepare>>>,
    tx: Preparer,
}

impl PreparerService {
    /// A preparer for the writers given `preparer()`.
    pub fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        PreparerService {
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
            run(&jobs, &self.tx.files_pending);
        }
    }

    fn stop(&self) {
        let _ = self.tx.tx.send(Prepare::Stop);
    }
}

/// Body of the preparer thread: runs jobs until `Prepare::Stop` or every sender is gone;
/// lowers `files_pending` after each file job (done, failed or dropped).
pub fn run(jobs: &Receiver<Prepare>, files_pending: &AtomicUsize) {
    while let Ok(job) = jobs.recv() {
        let file = job.makes_file();
        match job {
            Prepare::File(writer, start) => {
                if let Some(w) = writer.upgrade() {
                    w.prepare_next_file(start);
                }
            }
            Prepare::Warm(writer, from, to) => {
                if let Some(w) = writer.upgrade() {
                    w.fault_in(from, to);
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

impl Default for PreparerService {
    fn default() -> Self {
        Self::new()
    }
}
