//! Flush service: makes the commit log, consume queues and checkpoint durable.
//!
//! - Async mode: every `flush_interval` the thread msyncs the commit log's unflushed range.
//! - Sync mode (group commit): a put registers the end offset it needs and waits; the thread
//!   msyncs once for every put that arrived meanwhile, then wakes them. A put not confirmed
//!   within `sync_flush_timeout` returns FLUSH_DISK_TIMEOUT (its bytes are written, only not
//!   confirmed durable).
//!   A pipelined put only registers its end offset (`request_flush`) and confirms it later
//!   with `wait_flushed`, so one msync can cover many puts of one thread.
//! - Both modes: every derived store is flushed every interval, then the checkpoint records
//!   the flushed commit-log offset and each store's progress as its `flush` returned it from
//!   what was dispatched to it *before* the flush (the critical stores' as the dispatched
//!   offset), and the mappings of old files are released through the callback the store
//!   registers (`on_release_pages`; no data changes). A non-critical store that fails to
//!   flush keeps its last recorded progress and poisons nothing.
//!
//! - Shared writers (docs/design-many-writers.md): the thread runs in the leader only
//!   (leader.rs). Its flush covers the whole shared log, up to the mapping's `log_end` (files
//!   other processes created included: an msync or fsync of a file writes every process's
//!   dirty pages of it), then raises the mapping's `flushed` word and wakes the sync senders of
//!   every process waiting on it (shared/group_commit.rs). Sync senders of any process ask for
//!   a flush through the mapping and wait on that word, so they share group commits. Only the
//!   leader (or the last closer) writes the checkpoint; any process may flush.
//!
//! Invariant: a failed msync/fsync poisons the store (every later put fails, waiting puts fail)
//! and is never retried as if it had worked: Linux may mark the failed pages clean.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::checkpoint::{Checkpoint, CheckpointData, StoreProgress};
use crate::commit_log::CommitLog;
use crate::config::FlushMode;
use crate::dispatch::reput::Reput;
use crate::error::{Error, Result};
use crate::service::Service;

/// A shared writer's sync sender looks at the mapping's `flushed` word at least this often
/// while it waits (a safety net: the leader's flush wakes it).
const SHARED_NAP: Duration = Duration::from_millis(250);

#[derive(Debug, Default)]
struct State {
    requested: u64,
    flushed: u64,
    /// The failure that poisoned the store (see `Error::Poisoned`).
    poisoned: Option<Arc<Error>>,
}

/// The flush service.
pub struct FlushService {
    commit_log: Arc<CommitLog>,
    reput: Arc<Reput>,
    checkpoint: Option<Arc<Checkpoint>>,
    mode: FlushMode,
    interval: Duration,
    state: Mutex<State>,
    requested: Condvar,
    done: Condvar,
    stop: AtomicBool,
    poisoned_flag: AtomicBool,
    /// Writes the checkpoint: always for an exclusive writer; for a shared writer once it
    /// leads, or closes last.
    leading: AtomicBool,
    last_physic_ts: Mutex<i64>,
    // Drops old files' mappings after each periodic flush; registered by the store, which
    // knows every mapped file queue (none by default).
    release_pages: Box<dyn Fn() + Send + Sync>,
    // Runs after each periodic checkpoint while this service leads: derived state kept outside
    // the checkpoint (the transactions' snapshot) is written at the same cadence.
    after_checkpoint: Box<dyn Fn(&FlushService) + Send + Sync>,
}

impl std::fmt::Debug for FlushService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlushService")
            .field("mode", &self.mode)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl FlushService {
    /// A service for the given parts.
    pub fn new(
        commit_log: Arc<CommitLog>,
        reput: Arc<Reput>,
        checkpoint: Option<Arc<Checkpoint>>,
        mode: FlushMode,
        interval: Duration,
    ) -> Self {
        let flushed = commit_log.flushed_offset();
        let leading = AtomicBool::new(commit_log.shared().is_none());
        FlushService {
            commit_log,
            reput,
            checkpoint,
            mode,
            interval,
            state: Mutex::new(State {
                requested: flushed,
                flushed,
                poisoned: None,
            }),
            requested: Condvar::new(),
            done: Condvar::new(),
            stop: AtomicBool::new(false),
            poisoned_flag: AtomicBool::new(false),
            leading,
            last_physic_ts: Mutex::new(0),
            release_pages: Box::new(|| {}),
            after_checkpoint: Box::new(|_| {}),
        }
    }

    /// Calls `release` after each periodic flush of the derived stores and checkpoint, to drop
    /// the mappings of old files (the store's `release_pages`).
    pub fn on_release_pages(mut self, release: impl Fn() + Send + Sync + 'static) -> Self {
        self.release_pages = Box::new(release);
        self
    }

    /// Calls `hook` after each periodic checkpoint this service writes (it leads), on the
    /// flush thread: the hook must not wait for anything that waits for a flush.
    pub fn after_checkpoint(
        mut self,
        hook: impl Fn(&FlushService) + Send + Sync + 'static,
    ) -> Self {
        self.after_checkpoint = Box::new(hook);
        self
    }

    /// Whether this service writes the checkpoint (see `set_leading`).
    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A shared writer that took over as leader, or closes last: writes the checkpoint from
    /// now on.
    pub fn set_leading(&self) {
        self.leading.store(true, Ordering::Release);
    }

    /// Sync mode: waits until `offset` is durable. `Ok(true)` when confirmed, `Ok(false)` on
    /// timeout (FLUSH_DISK_TIMEOUT), `Err(Poisoned)` if the flush failed. A shared writer
    /// waits for the leader's flush (module doc).
    pub fn wait_flushed(&self, offset: u64, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        if let Some(shm) = self.commit_log.shared() {
            shm.request_flush(offset);
            let poisoned = || self.poisoned_flag.load(Ordering::Acquire);
            let done = shm.wait_flushed(offset, deadline, SHARED_NAP, poisoned);
            if let Some(cause) = self.poisoned() {
                return Err(Error::Poisoned { cause });
            }
            return Ok(done);
        }
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
        if let Some(shm) = self.commit_log.shared() {
            shm.request_flush(offset);
            return;
        }
        let mut s = self.lock();
        if s.flushed < offset && s.requested < offset {
            s.requested = offset;
            self.requested.notify_one();
        }
    }

    /// Flushes the commit log now; poisons the store on failure. A shared writer flushes the
    /// whole shared log (module doc).
    pub fn flush_commit_log(&self) -> Result<u64> {
        let ts = self.commit_log.last_store_timestamp();
        let shared = match self.commit_log.shared() {
            Some(shm) => {
                let end = shm.log_end();
                // Every file up to `end` listed and the one holding it pinned (its flush
                // below covers it). Without that, the flush covers the files in view and
                // `flushed` stays where it is.
                let followed = self.commit_log.follow_shared().is_ok();
                Some((shm, shm.flushed().min(end), end, followed))
            }
            None => None,
        };
        // Capped at the log's end: a shared writer lists files other processes (or its own
        // preparer) published ahead of the end, whose bytes count as flushed in their mappings.
        let flushed = self.commit_log.files().flush().and_then(|flushed| {
            if let Some((_, from, end, true)) = shared {
                self.commit_log.files().sync_files(from, end)?;
            }
            Ok(flushed.min(self.commit_log.max_offset()))
        });
        match flushed {
            Ok(flushed) => {
                if let Some((shm, _, end, true)) = shared {
                    shm.advance_flushed(flushed.min(end));
                }
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

    /// Flushes the commit log, dispatches everything it holds (to the non-critical stores
    /// too), then flushes the derived stores and the checkpoint (`Store::flush`, close).
    ///
    /// # Errors
    /// The first failure; flush failures poison the store. A non-critical store's dispatch
    /// failure stays on its lane.
    pub fn flush_all(&self) -> Result<()> {
        self.flush_commit_log()?;
        self.reput.dispatch_all()?;
        self.reput.follow_all();
        self.flush_logics_and_checkpoint()
    }

    /// Flushes every derived store and records their progress in the checkpoint.
    ///
    /// # Errors
    /// A critical store's flush failure or the checkpoint write's (both poison the store).
    pub fn flush_logics_and_checkpoint(&self) -> Result<()> {
        // Captured before the flushes: everything below it is in the flushed files.
        let states = self.reput.progress();
        let mut main = self.reput.dispatched();
        let mut progress = Vec::with_capacity(states.len());
        let mut index_ts: Option<i64> = None;
        for st in &states {
            match st.store.flush(st.dispatched) {
                Ok(p) => {
                    if st.store.critical() {
                        main.offset = main.offset.min(p.offset);
                    } else {
                        index_ts =
                            Some(index_ts.map_or(p.store_timestamp, |t| t.min(p.store_timestamp)));
                    }
                    progress.push((st.store.name(), p));
                }
                Err(e) if st.store.critical() => {
                    self.commit_log.poison(Error::poisoned_by(&e));
                    return Err(e);
                }
                // Best effort: its recorded progress stays where it was.
                Err(_) => {}
            }
        }
        let Some(cp) = self
            .checkpoint
            .as_ref()
            .filter(|_| self.leading.load(Ordering::Acquire))
        else {
            return Ok(());
        };
        let confirm = self.commit_log.flushed_offset();
        let physic_ts = self.last_physic_ts.lock().map(|t| *t).unwrap_or(0);
        let table: Vec<StoreProgress> = progress
            .into_iter()
            .map(|(name, p)| StoreProgress {
                name: name.to_owned(),
                offset: p.offset.min(confirm),
                store_timestamp: p.store_timestamp,
            })
            .collect();
        cp.store_with_progress(
            CheckpointData {
                physic_msg_timestamp: physic_ts,
                logics_msg_timestamp: main.store_timestamp,
                index_msg_timestamp: index_ts.unwrap_or(0),
                confirm_phy_offset: confirm,
                logics_dispatched_offset: main.offset.min(confirm),
            },
            &table,
        )
        .inspect_err(|e| self.commit_log.poison(Error::poisoned_by(e)))
    }

    /// Body of the flush thread.
    pub fn run_thread(&self) {
        let mut last_logics = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            {
                let s = self.lock();
                let wait = match self.mode {
                    FlushMode::Sync => self.interval.min(Duration::from_millis(10)),
                    FlushMode::Async => self.interval,
                };
                let pending = |s: &State| s.requested > s.flushed && s.poisoned.is_none();
                if let (Some(shm), FlushMode::Sync) = (self.commit_log.shared(), self.mode) {
                    // Requests come from every process, through the mapping.
                    drop(s);
                    shm.wait_for_request(wait, || self.stop.load(Ordering::Acquire));
                } else if !(self.mode == FlushMode::Sync && pending(&s)) {
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
                if self.flush_logics_and_checkpoint().is_ok() && self.leading() {
                    (self.after_checkpoint)(self);
                }
                (self.release_pages)();
            }
        }
    }

    /// Asks the thread to exit.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(shm) = self.commit_log.shared() {
            shm.wake_flush_thread();
        }
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

impl Service for FlushService {
    fn name(&self) -> &'static str {
        "flush"
    }

    fn run(&self) {
        self.run_thread();
    }

    fn stop(&self) {
        FlushService::stop(self);
    }
}
