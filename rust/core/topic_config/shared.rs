//! Topic changes shared between the writer processes of one store
//! (`StoreConfig::shared_writers`, docs/design-many-writers.md): the journal lock
//! `config/topics.lock` and the topics generation of the writer mapping (FORMAT.md §14).
//!
//! Invariants
//! - Every change of the topic table, in any process, is made holding the journal lock (an
//!   exclusive `flock`): read the records the other processes appended, decide on the table
//!   they give, bump the generation, append the change's records. So the journal is one
//!   sequence of whole records, and a change is decided on every earlier one (two creates of
//!   one topic: the second finds the first).
//! - The generation changes only under the lock, once per change. A process remembers the
//!   generation its table reflects (`seen`); one atomic load tells it whether another process
//!   changed a topic since, and then it reads the new records holding the lock, so after the
//!   appender has finished (or died). The bump comes before the append so that a record is
//!   never in the journal without a generation that makes the others read it.
//!
//! Crash behaviour: the kernel releases the lock of a process that dies. A death before the
//! append's `fdatasync` leaves a torn tail (the next holder cuts it) or a whole record the
//! others read at their next lookup; the call that made it had not returned.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::shared::WriterShm;
use crate::util::fs;

/// The lock file's name, beside `topics.json`.
const LOCK_NAME: &str = "topics.lock";

/// One process's share of the topic table's cross-process state.
#[derive(Debug)]
pub(super) struct SharedTopics {
    shm: Arc<WriterShm>,
    /// The lock file; `None` once the store closed (a closed store holds no descriptor of
    /// its topic table). Taken only by holders of the table's write lock: never contended.
    lock: Mutex<Option<File>>,
    lock_path: PathBuf,
    /// The generation this process's table reflects.
    seen: AtomicU64,
}

impl SharedTopics {
    /// Opens (creating) the journal lock beside `topics_json`.
    pub(super) fn new(shm: Arc<WriterShm>, topics_json: &Path, mode: u32) -> Result<Self> {
        let lock_path = topics_json.with_file_name(LOCK_NAME);
        let lock = fs::open_rw(&lock_path, mode)?;
        Ok(SharedTopics {
            shm,
            lock: Mutex::new(Some(lock)),
            lock_path,
            seen: AtomicU64::new(0),
        })
    }

    /// True when another process changed a topic since this one last read the journal: one
    /// atomic load, for every lookup.
    #[inline(always)]
    pub(super) fn stale(&self) -> bool {
        self.shm.topics_generation() != self.seen.load(Ordering::Relaxed)
    }

    /// Takes the journal lock, waiting for the process that holds it (for one append).
    ///
    /// # Errors
    /// `Closed` after `close`; an I/O error taking the lock.
    pub(super) fn lock(&self) -> Result<Held<'_>> {
        let file = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let Some(f) = file.as_ref() else {
            return Err(Error::Closed);
        };
        f.lock()
            .map_err(|e| Error::io("flock", &self.lock_path, e))?;
        Ok(Held { shared: self, file })
    }

    /// Closes the lock file (the store's close).
    pub(super) fn close(&self) {
        *self.lock.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The journal lock, held; released when dropped.
#[derive(Debug)]
pub(super) struct Held<'a> {
    shared: &'a SharedTopics,
    file: MutexGuard<'a, Option<File>>,
}

impl Held<'_> {
    /// The generation now (stable while the lock is held).
    pub(super) fn generation(&self) -> u64 {
        self.shared.shm.topics_generation()
    }

    /// This process's table reflects generation `generation` (it read the journal to its end
    /// holding the lock).
    pub(super) fn saw(&self, generation: u64) {
        self.shared.seen.store(generation, Ordering::Relaxed);
    }

    /// Counts the change about to be appended, which this process's table reflects already.
    pub(super) fn bump(&self) {
        let next = self.shared.shm.bump_topics_generation();
        self.saw(next);
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.file.as_ref() {
            let _ = f.unlock();
        }
    }
}
