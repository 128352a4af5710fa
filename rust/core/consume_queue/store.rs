//! ConsumeQueueStore: every consume queue of the store, opened lazily, and the derived store
//! (`DerivedStore`, critical, quick) that feeds them and runs their lifecycle; readers find
//! queues through it as the store's `QueueIndex`.
//!
//! On disk: `consumequeue/<topic>/<queueId>/`, and `queues.clean` (clean.rs) between a clean
//! close and the next writer open.
//!
//! Opening is lazy after a clean close: `load` reads the clean-shutdown record instead of the
//! queues' files, and a queue it lists is *pending* (known by its next queue offset alone; its
//! directory is listed and its files `stat`ed for a short file, none opened or mapped) until its
//! first use (a read, a dispatch, a topic change, or
//! retention), which loads it exactly as an open without the record would have and checks it
//! against the record. After a crash, or when the record is missing or does not match the
//! recovered commit log, every queue is loaded at open, as before: the first opener after a
//! crash checks every queue against the log it recovered before any other process may append.
//! With shared writers, other processes may append to a pending queue before its first use
//! here: the check then covers the units up to the record's end, and the units past it are
//! theirs (`load_pending`).
//!
//! A later shared writer (recovery.rs `attach`) opens lazily too: `attach` lists the queues'
//! directories and makes every queue pending, known by the shared table's next offset as the
//! append lock's holder read it (authoritative for what appenders reserved; the units other
//! processes dispatched may lag it). At its first use a queue is loaded and checked exactly as
//! the eager attach checked every queue at open (`load_attached`), against the log end and the
//! durable progress of the attach. That is sound later because this process dispatches every
//! record from its resume point on, and a dispatched record of a pending queue loads it first:
//! a queue still pending has no record at or past the resume point, so its units on disk up to
//! the attach's log end are the ones the eager check would have seen, and any past it (other
//! processes' dispatch, since) are dropped from this view and written again, the same bytes at
//! the same places, when this process's dispatch reaches their records. A queue the shared
//! table knows but that has no directory has never been dispatched by any process, so its
//! records are all past the resume point and its first dispatch here creates it.
//!
//! Invariant: a path is built only from a valid topic name (`[A-Za-z0-9_%|-]`, checked in
//! `dir_of`, the one place names become paths), so a directory can never leave the store root,
//! whatever a caller or a `topics.json` supplies.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::clean::{self, CleanRecord, QueueState};

use super::unit::CqUnit;
use super::ConsumeQueue;
use crate::commit_log::recovery::DurableCheck;
use crate::commit_log::CommitLog;
use crate::dispatch::derived::{DerivedStore, NextOffset, Progress};
use crate::dispatch::queue_index::{LogicalQueue, QueueIndex};
use crate::dispatch::{DispatchRequest, Dispatcher};
use crate::error::{Error, Result};
use crate::mapped_file_queue::MapCache;
use crate::message::{sysflag, validate, RecordView};
use crate::prepare::{Prepare, Preparer};
use crate::util::clock::Clock;
use crate::util::fs;

/// A topic's queues by queue id.
type ById = Vec<Option<Arc<ConsumeQueue>>>;
type QueueMap = HashMap<String, ById, crate::util::hash::FastBuild>;
/// Queues not loaded yet (module doc): topic -> queue id -> (next queue offset, max physical
/// offset). A later shared writer's pending queue has, for its max physical offset, the log
/// end of the attach: no record of the queue lies between the end of its last unit's record
/// and that end (module doc), which is what the clean-shutdown record needs of it.
type PendingMap = HashMap<String, HashMap<u32, (u64, u64)>, crate::util::hash::FastBuild>;

/// Queues loaded from their files in this process (every store): the scale tier's check that
/// a clean open loads none (`queue_loads`).
static QUEUE_LOADS: AtomicU64 = AtomicU64::new(0);

/// How many consume queues this process has loaded from their files (listed, and their last
/// file read) since it started: a test hook for the cost of opening a store.
#[doc(hidden)]
pub fn queue_loads() -> u64 {
    QUEUE_LOADS.load(Ordering::Relaxed)
}

/// `trusted_end` while no record is trusted.
const NO_RECORD: u64 = u64::MAX;

/// Where a later shared writer attached (`ConsumeQueueStore::attach`): what its pending queues
/// are checked against when they load.
#[derive(Debug, Clone, Copy)]
struct AttachPoint {
    /// The shared log end when it attached, holding the append lock.
    log_end: u64,
    /// The consume queues' durable progress, where their check starts (`recover`).
    resume_from: u64,
}

/// All consume queues.
#[derive(Debug)]
pub struct ConsumeQueueStore {
    root: Option<PathBuf>,
    file_size: u64,
    file_mode: u32,
    dir_mode: u32,
    read_only: bool,
    queues: RwLock<QueueMap>,
    // The queues of the topic the dispatcher used last, by queue id: consecutive records mostly
    // share a topic (round robin over its queues), and this saves a map lookup per record.
    last: std::sync::Mutex<Option<(String, ById)>>,
    // Where queues' next files are asked for (prepare.rs); `None` without a preparer.
    preparer: Mutex<Option<Preparer>>,
    // The store's budget of idle mappings, shared by every queue.
    cache: Arc<MapCache>,
    // The store's clock, given to each queue (its pace: `ConsumeQueue::with_clock`).
    clock: Clock,
    // Where the clean-shutdown record lives (`None`: in memory, or no record kept).
    clean_path: Option<PathBuf>,
    // Queues the trusted record lists that are not loaded yet (module doc); `has_pending`
    // is false once the map is empty, so that lookups of missing queues skip its lock.
    pending: Mutex<PendingMap>,
    has_pending: AtomicBool,
    // The commit-log end the trusted record names (`NO_RECORD`: none trusted).
    trusted_end: AtomicU64,
    // The commit log's minimum as last applied to the queues' minimums: a pending queue gets
    // it when loaded.
    log_min: AtomicU64,
    // The store's commit log: a pending queue that a damaged unit cut short is re-indexed from
    // it when loaded (`reindex`).
    log: Option<Arc<CommitLog>>,
    // Other processes write the queues' files too (`share_files`).
    shared_files: AtomicBool,
    // Set by `attach` (a later shared writer): pending queues are checked against it rather
    // than against a clean-shutdown record.
    attached: Mutex<Option<AttachPoint>>,
}

impl ConsumeQueueStore {
    /// The consume queues' name as a derived store (the checkpoint's progress table key).
    pub const NAME: &'static str = "consume_queue";

    /// Queues under `root` (`None`: in memory).
    pub fn new(
        root: Option<PathBuf>,
        file_size: u64,
        file_mode: u32,
        dir_mode: u32,
        read_only: bool,
    ) -> Self {
        ConsumeQueueStore {
            root,
            file_size,
            file_mode,
            dir_mode,
            read_only,
            queues: RwLock::new(QueueMap::default()),
            last: std::sync::Mutex::new(None),
            preparer: Mutex::new(None),
            cache: Arc::new(MapCache::default()),
            clock: Clock::system(),
            clean_path: None,
            pending: Mutex::new(PendingMap::default()),
            has_pending: AtomicBool::new(false),
            trusted_end: AtomicU64::new(NO_RECORD),
            log_min: AtomicU64::new(0),
            log: None,
            shared_files: AtomicBool::new(false),
            attached: Mutex::new(None),
        }
    }

    /// Queues whose records are in `log` (the store's).
    pub fn with_log(mut self, log: Arc<CommitLog>) -> Self {
        self.log = Some(log);
        self
    }

    /// Keeps the clean-shutdown record at `path` (clean.rs): written at a clean close, read
    /// and then deleted by the next writer open.
    pub fn with_clean_record(mut self, path: PathBuf) -> Self {
        self.clean_path = Some(path);
        self
    }

    /// Every queue keeps its recently used files mapped in `cache` (the store's).
    pub fn with_cache(mut self, cache: Arc<MapCache>) -> Self {
        self.cache = cache;
        self
    }

    /// Queues that read the time from `clock` (the store's) rather than the system clock.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, QueueMap> {
        self.queues.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, QueueMap> {
        self.queues.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The queue's directory: `Ok(None)` in memory, `InvalidTopic` for a name that could
    /// leave the store root.
    fn dir_of(&self, topic: &str, queue_id: u32) -> Result<Option<PathBuf>> {
        validate::check_topic(topic)?;
        Ok(self
            .root
            .as_ref()
            .map(|r| r.join(topic).join(queue_id.to_string())))
    }

    /// Loads and recovers every queue found on disk. Returns them.
    pub fn load_all(&self, zero_tail: bool) -> Result<Vec<Arc<ConsumeQueue>>> {
        let mut found = Vec::new();
        for (topic, qid) in self.queue_dirs()? {
            let cq = self.new_queue(&topic, qid)?;
            cq.recover(zero_tail)?;
            QUEUE_LOADS.fetch_add(1, Ordering::Relaxed);
            found.push(self.insert(&topic, qid, cq));
        }
        Ok(found)
    }

    /// Writer open after a clean close: takes the queues from the clean-shutdown record
    /// (pending) and returns true, or returns false when there is no record that verifies.
    fn load_recorded(&self) -> Result<bool> {
        let Some(path) = &self.clean_path else {
            return Ok(false);
        };
        let Some(record) = clean::read(path)? else {
            return Ok(false);
        };
        let mut pending = self.lock_pending();
        pending.clear();
        for q in record.queues {
            pending
                .entry(q.topic)
                .or_default()
                .insert(q.queue_id, (q.max_offset, q.max_physical));
        }
        // A queue with a short file (truncated, or a creation a crash interrupted) lost units
        // that only recovery may restore, below the checkpoint (`ConsumeQueue::recover`): it
        // is loaded now, as without the record. Finding one lists the queue's directory and
        // `stat`s its files; no file is opened.
        let mut short = Vec::new();
        for (topic, m) in pending.iter() {
            for &queue_id in m.keys() {
                let cq = self.new_queue(topic, queue_id)?;
                if !matches!(cq.files().first_short_file(), Ok(None)) {
                    short.push((topic.clone(), queue_id));
                }
            }
        }
        for (topic, queue_id) in short {
            if let Some(m) = pending.get_mut(&topic) {
                m.remove(&queue_id);
                if m.is_empty() {
                    pending.remove(&topic);
                }
            }
            let cq = self.new_queue(&topic, queue_id)?;
            cq.recover(false)?;
            QUEUE_LOADS.fetch_add(1, Ordering::Relaxed);
            self.insert(&topic, queue_id, cq);
        }
        self.has_pending
            .store(!pending.is_empty(), Ordering::Release);
        self.trusted_end.store(record.log_end, Ordering::Release);
        Ok(true)
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, PendingMap> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn attach_point(&self) -> Option<AttachPoint> {
        *self.attached.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A later shared writer's open (module doc): every queue with a directory is pending, at
    /// the next offset `next_offset` gives it (0 when the table does not have it: no record
    /// of it was appended); no queue file is opened.
    fn attach_lazily(&self, log_end: u64, next_offset: &NextOffset<'_>) -> Result<()> {
        let dirs = self.queue_dirs()?;
        let mut pending = self.lock_pending();
        pending.clear();
        for (topic, queue_id) in dirs {
            let next = next_offset(&topic, queue_id)?.unwrap_or(0);
            pending
                .entry(topic)
                .or_default()
                .insert(queue_id, (next, log_end));
        }
        *self.attached.lock().unwrap_or_else(|p| p.into_inner()) = Some(AttachPoint {
            log_end,
            // Raised by `recover` to the durable progress; from 0, a check covers every unit.
            resume_from: 0,
        });
        self.has_pending
            .store(!pending.is_empty(), Ordering::Release);
        Ok(())
    }

    /// A later shared writer's pending queue, loaded from its files and checked exactly as the
    /// eager attach checked every queue at open: units pointing at or past the attach's log
    /// end dropped, the tail from the durable progress on checked against the log (a unit
    /// that does not index its record is cut from this view only: another process may be
    /// writing it), and, when that cut the queue short, its units from the cut up to the
    /// durable progress written again from the log; this process's dispatch writes the rest as
    /// it reaches their records (the module doc has why nothing between is missing).
    fn load_attached(&self, topic: &str, queue_id: u32, at: AttachPoint) -> Result<ConsumeQueue> {
        let cq = self.new_queue(topic, queue_id)?;
        cq.recover(false)?;
        QUEUE_LOADS.fetch_add(1, Ordering::Relaxed);
        cq.truncate_dirty(at.log_end)?;
        if let Some(log) = &self.log {
            if check_tail(log, &DurableCheck::new(log), &cq, at.resume_from).is_err() {
                // The leading process's retention may have deleted log files this process
                // still lists (it lists them at its open, and keeps those it mapped): the
                // records of the queue's last units are then gone, not damaged. The list is
                // brought in line with the directory, which puts such units below the log's
                // minimum, where the check passes them as expired; damage is reported by the
                // second check. A failed check cut at most tail units that do not index their
                // records, which the second one would cut too: it is the same check.
                log.files().refresh(false)?;
                check_tail(log, &DurableCheck::new(log), &cq, at.resume_from)?;
            }
            if cq.was_cut_short() {
                self.reindex(&cq, at.resume_from)?;
            }
        }
        Ok(cq)
    }

    /// Loads the pending queue `topic:queue_id` from its files, as an open after a clean close
    /// without the record would have, and checks it ends where the record says. `Ok(None)`:
    /// not pending (unknown, or loaded meanwhile by another thread: then it is in the map).
    fn load_pending(&self, topic: &str, queue_id: u32) -> Result<Option<Arc<ConsumeQueue>>> {
        // Held through the load: one thread loads a queue, and others wait for it to be in
        // the map rather than see it half recovered.
        let mut pending = self.lock_pending();
        let Some(&(max_offset, max_physical)) = pending.get(topic).and_then(|m| m.get(&queue_id))
        else {
            return Ok(queue_in(&self.read(), topic, queue_id));
        };
        if let Some(at) = self.attach_point() {
            let cq = self.load_attached(topic, queue_id, at)?;
            return Ok(Some(self.finish_load(&mut pending, topic, queue_id, cq)));
        }
        let cq = self.new_queue(topic, queue_id)?;
        cq.recover(false)?;
        QUEUE_LOADS.fetch_add(1, Ordering::Relaxed);
        if self.shared_files.load(Ordering::Acquire)
            && cq.max_offset() > max_offset
            && !cq.has_stale_files()
        {
            // Other writer processes appended to it past the clean-shutdown end since the
            // first opener shared the files: the part the record vouches for is checked (its
            // last unit indexes exactly its record, below the clean end, where the log is
            // whole); the units past it are theirs, and this process's dispatch writes the
            // same bytes at the same places again.
            let vouched = match (max_offset.checked_sub(1), &self.log) {
                (Some(k), Some(log)) => cq.unit(k).is_some_and(|u| indexes_record(log, &cq, &u, k)),
                _ => true,
            };
            if !vouched {
                let (path, _) = LogicalQueue::locate(&cq, max_offset.saturating_sub(1));
                return Err(Error::Corrupted {
                    path,
                    offset: max_offset.saturating_sub(1),
                    reason: format!(
                        "consume queue {topic}:{queue_id}: the unit at queue offset {} does not \
                         index its record, its clean-shutdown record says the queue ended there",
                        max_offset.saturating_sub(1)
                    ),
                    cause: None,
                });
            }
            return Ok(Some(self.finish_load(&mut pending, topic, queue_id, cq)));
        }
        // What recovery checks of every queue's tail after a clean shutdown, here at first
        // use: its last unit indexes exactly its record, and damage to that record is reported.
        if let Some(log) = &self.log {
            check_tail(log, &DurableCheck::new(log), &cq, max_physical)?;
        }
        if cq.was_cut_short() && !cq.has_stale_files() {
            // A damaged unit cut it short (media damage since the close): its units come back
            // from the log, as recovery's re-dispatch would have restored them.
            self.reindex(&cq, max_physical)?;
        }
        if cq.has_stale_files() || cq.max_offset() != max_offset {
            let (path, _) = LogicalQueue::locate(&cq, cq.max_offset());
            return Err(Error::Corrupted {
                path,
                offset: cq.max_offset(),
                reason: format!(
                    "consume queue {topic}:{queue_id} ends at queue offset {}{}, its clean-shutdown \
                     record says {max_offset}",
                    cq.max_offset(),
                    if cq.has_stale_files() { " (a short file)" } else { "" },
                ),
                cause: None,
            });
        }
        Ok(Some(self.finish_load(&mut pending, topic, queue_id, cq)))
    }

    /// A pending queue loaded and checked: into the map, out of `pending`.
    fn finish_load(
        &self,
        pending: &mut PendingMap,
        topic: &str,
        queue_id: u32,
        cq: ConsumeQueue,
    ) -> Arc<ConsumeQueue> {
        cq.correct_min_offset(self.log_min.load(Ordering::Acquire));
        let cq = self.insert(topic, queue_id, cq);
        if let Some(m) = pending.get_mut(topic) {
            m.remove(&queue_id);
            if m.is_empty() {
                pending.remove(topic);
            }
        }
        self.has_pending
            .store(!pending.is_empty(), Ordering::Release);
        cq
    }

    /// Re-creates `cq`'s units for the records from the end of its last unit up to `to` (the
    /// end of the last record it indexed at the clean close). Idempotent, like dispatch: a crash
    /// meanwhile is recovered as any crash is.
    fn reindex(&self, cq: &ConsumeQueue, to: u64) -> Result<()> {
        let Some(log) = &self.log else {
            return Ok(());
        };
        let mut pos = cq.max_physical_offset().max(log.min_offset());
        while pos < to {
            // Each record's unit, if it is one of this queue's; then the next record (a blank
            // or the end of a file's data: the next file).
            let step = log.read_record(pos, |v| {
                let r = DispatchRequest::from_record(v);
                let mine = r.topic == cq.topic()
                    && r.queue_id == cq.queue_id()
                    && sysflag::is_dispatched(r.sysflag);
                (mine.then(|| (r.queue_offset, unit_of(&r))), r.size)
            });
            match step {
                Ok((unit, size)) => {
                    if let Some((k, unit)) = unit {
                        cq.put(k, unit)?;
                    }
                    pos += u64::from(size.max(1));
                }
                Err(_) => pos = log.roll_next_file(pos),
            }
        }
        Ok(())
    }

    /// Loads every pending queue (recovery that cannot trust the record; retention, which must
    /// see every queue's files), each checked as at its first use.
    fn load_all_pending(&self) -> Result<()> {
        if !self.has_pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let keys: Vec<(String, u32)> = self
            .lock_pending()
            .iter()
            .flat_map(|(t, m)| m.keys().map(move |q| (t.clone(), *q)))
            .collect();
        for (topic, qid) in keys {
            self.load_pending(&topic, qid)?;
        }
        Ok(())
    }

    /// The state of every queue for the clean-shutdown record: the loaded ones as they are,
    /// the pending ones as they were known when they became pending (nothing changed them:
    /// this process's dispatch, complete at a clean close, would have loaded a queue it
    /// indexed a record of).
    fn states(&self) -> Vec<QueueState> {
        let mut out: Vec<QueueState> = self
            .all()
            .iter()
            .map(|cq| QueueState {
                topic: cq.topic().to_owned(),
                queue_id: cq.queue_id(),
                max_offset: cq.max_offset(),
                max_physical: cq.max_physical_offset(),
            })
            .collect();
        for (topic, m) in self.lock_pending().iter() {
            for (&queue_id, &(max_offset, max_physical)) in m {
                out.push(QueueState {
                    topic: topic.clone(),
                    queue_id,
                    max_offset,
                    max_physical,
                });
            }
        }
        out
    }

    /// Writes the clean-shutdown record (store close, clean: after the final flush, every
    /// record below `log_end` dispatched and durable in the queues).
    ///
    /// # Errors
    /// I/O failures (the close is then not clean).
    pub fn record_clean(&self, log_end: u64) -> Result<()> {
        let (Some(path), false) = (&self.clean_path, self.read_only) else {
            return Ok(());
        };
        let record = CleanRecord {
            log_end,
            queues: self.states(),
        };
        clean::write(path, &record, self.file_mode)
    }

    /// The topics that have queue directories, each with its highest queue id plus one, sorted
    /// by name; reads directories only.
    pub fn discover_topics(&self) -> Result<Vec<(String, u32)>> {
        let mut found: Vec<(String, u32)> = Vec::new();
        for (topic, qid) in self.queue_dirs()? {
            let Some(n) = qid.checked_add(1) else {
                continue;
            };
            match found.iter_mut().find(|(t, _)| *t == topic) {
                Some((_, count)) => *count = (*count).max(n),
                None => found.push((topic, n)),
            }
        }
        found.sort();
        Ok(found)
    }

    /// Every `<topic>/<queue id>` directory on disk whose names are a valid topic and a queue id.
    fn queue_dirs(&self) -> Result<Vec<(String, u32)>> {
        let Some(root) = &self.root else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        for (topic, tdir) in fs::dir_entries(root)? {
            if validate::check_topic(&topic).is_err() || !tdir.is_dir() {
                continue;
            }
            for (q, _) in fs::dir_entries(&tdir)? {
                if let Ok(qid) = q.parse::<u32>() {
                    found.push((topic.clone(), qid));
                }
            }
        }
        Ok(found)
    }

    /// A queue object for `topic:queue_id`, not yet in the map, its files not loaded.
    fn new_queue(&self, topic: &str, queue_id: u32) -> Result<ConsumeQueue> {
        let dir = self.dir_of(topic, queue_id)?;
        Ok(ConsumeQueue::new(
            topic,
            queue_id,
            dir,
            self.file_size,
            self.file_mode,
            self.read_only,
        )
        .with_cache(Arc::clone(&self.cache))
        .with_clock(self.clock.clone())
        .with_shared_files(self.shared_files.load(Ordering::Acquire)))
    }

    /// From now on other processes write the queues' files too (shared writers): a queue
    /// loaded later keeps an all-zero last file (`ConsumeQueue::with_shared_files`), and a
    /// pending queue other processes appended to is checked at its first use up to the end the
    /// clean-shutdown record gives it (`load_pending`), or, in a later shared opener, as its
    /// attach would have checked it (`load_attached`). Set by a later shared opener before its
    /// recovery, and by the first one after its own, before the others may open.
    ///
    /// # Errors
    /// None today; kept for the open's error path.
    pub fn share_files(&self) -> Result<()> {
        self.shared_files.store(true, Ordering::Release);
        // Queues loaded before: their files are created and published as shared ones from
        // now on (mapped_file_queue/mod.rs).
        for cq in self.all() {
            cq.share_files();
        }
        Ok(())
    }

    /// Puts `cq` into the map, unless the queue is there already: returns the one in the map.
    fn insert(&self, topic: &str, queue_id: u32, cq: ConsumeQueue) -> Arc<ConsumeQueue> {
        let mut map = self.write();
        let v = map.entry(topic.to_owned()).or_default();
        let i = queue_id as usize;
        if v.len() <= i {
            v.resize(i + 1, None);
        }
        match v.get_mut(i) {
            Some(Some(found)) => Arc::clone(found),
            Some(slot) => Arc::clone(slot.insert(Arc::new(cq))),
            None => Arc::new(cq),
        }
    }

    /// The queue if it exists in memory, pending (loaded now), or (read-only followers) on
    /// disk.
    ///
    /// # Errors
    /// Loading a pending queue failed (it stays pending).
    pub fn lookup(&self, topic: &str, queue_id: u32) -> Result<Option<Arc<ConsumeQueue>>> {
        if let Some(cq) = queue_in(&self.read(), topic, queue_id) {
            return Ok(Some(cq));
        }
        if self.has_pending.load(Ordering::Acquire) {
            if let Some(cq) = self.load_pending(topic, queue_id)? {
                return Ok(Some(cq));
            }
        }
        if self.read_only {
            // A follower that cannot load a queue the writer is still making finds it at a
            // later call: not found until then.
            let Some(dir) = self.dir_of(topic, queue_id).ok().flatten() else {
                return Ok(None);
            };
            if dir.is_dir() {
                let Ok(cq) = self.new_queue(topic, queue_id) else {
                    return Ok(None);
                };
                if cq.recover(false).is_err() {
                    return Ok(None);
                }
                return Ok(Some(self.insert(topic, queue_id, cq)));
            }
        }
        Ok(None)
    }

    /// `lookup`, with a failure taken as "no such queue".
    pub fn get(&self, topic: &str, queue_id: u32) -> Option<Arc<ConsumeQueue>> {
        self.lookup(topic, queue_id).ok().flatten()
    }

    /// The queue, created (directory included) if missing.
    pub fn get_or_create(&self, topic: &str, queue_id: u32) -> Result<Arc<ConsumeQueue>> {
        if let Some(cq) = self.lookup(topic, queue_id)? {
            return Ok(cq);
        }
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if let Some(dir) = self.dir_of(topic, queue_id)? {
            fs::create_dir_all(&dir, self.dir_mode)?;
        }
        let cq = self.new_queue(topic, queue_id)?;
        Ok(self.insert(topic, queue_id, cq))
    }

    /// Every open queue.
    pub fn all(&self) -> Vec<Arc<ConsumeQueue>> {
        self.read()
            .values()
            .flat_map(|v| v.iter().flatten().cloned())
            .collect()
    }

    /// Sends queues' next-file requests to `tx` from now on.
    pub fn set_preparer(&self, tx: Preparer) {
        *self.preparer.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }

    /// Stops sending requests (store close: the preparer thread exits once every sender is
    /// gone).
    pub fn stop_preparer(&self) {
        *self.preparer.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// After a write to `cq`: asks the preparer for its next file when one is due. Never
    /// waits (a producer holding Python's GIL may be the caller): with the preparer's lock
    /// busy, the request stays due for the next write.
    fn ask_next_file(&self, cq: &Arc<ConsumeQueue>) {
        let Some(start) = cq.take_next_file_due() else {
            return;
        };
        match self.preparer.try_lock() {
            Ok(tx) => {
                if let Some(tx) = tx.as_ref() {
                    let _ = tx.send(Prepare::file(cq, start));
                }
            }
            Err(_) => cq.restore_next_file_due(start),
        }
    }

    /// Blocks until the preparer has made every file asked of it so far (at most `limit`); at
    /// once without a preparer or a pending file job.
    pub fn wait_for_prepared_files(&self, limit: std::time::Duration) {
        let p = self
            .preparer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(p) = p {
            p.wait_for_files(limit);
        }
    }

    /// A new topic's queues: each is created (its directory included), without a file. A
    /// queue's first file is made by its first unit (disk follows the data: a queue never
    /// written costs no file); that costs the dispatching thread an open, a sparse extension
    /// and a one-page fallocate (the fsyncs are left to the next flush).
    fn make_topic_queues(&self, topic: &str, queues: u32) -> Result<()> {
        for queue_id in 0..queues {
            self.get_or_create(topic, queue_id)?;
        }
        Ok(())
    }

    /// `ConsumeQueue::remove_stale_files` of every queue (recovery, once the checkpoint holds
    /// the re-dispatch point).
    pub fn remove_stale_files(&self) -> Result<()> {
        for cq in self.all() {
            cq.remove_stale_files()?;
        }
        Ok(())
    }

    /// Unmaps every queue's files (store close).
    pub fn close_files(&self) {
        for cq in self.all() {
            cq.close_files();
        }
    }

    /// Flushes every queue.
    pub fn flush_all(&self) -> Result<()> {
        for cq in self.all() {
            cq.flush()?;
        }
        Ok(())
    }

    /// Drops units pointing at or past `phy_end` in every queue.
    pub fn truncate_dirty(&self, phy_end: u64) -> Result<()> {
        for cq in self.all() {
            cq.truncate_dirty(phy_end)?;
        }
        Ok(())
    }

    /// Moves every queue's minimum past units whose records are below `phy_min` (a pending
    /// queue's when it is loaded).
    pub fn correct_min_offsets(&self, phy_min: u64) {
        self.log_min.fetch_max(phy_min, Ordering::AcqRel);
        for cq in self.all() {
            cq.correct_min_offset(phy_min);
        }
    }

    /// Deletes queue files fully below the commit log's `phy_min` (pending queues are loaded
    /// first: which of their files expired is known only from their units).
    pub fn delete_expired(&self, phy_min: u64) -> Result<usize> {
        self.log_min.fetch_max(phy_min, Ordering::AcqRel);
        self.load_all_pending()?;
        let mut n = 0;
        for cq in self.all() {
            n += cq.delete_expired(phy_min)?;
        }
        Ok(n)
    }
}

impl DerivedStore for ConsumeQueueStore {
    fn critical(&self) -> bool {
        true
    }

    fn quick(&self) -> bool {
        true
    }

    /// After a clean shutdown with a clean-shutdown record: the record, no queue file.
    /// Otherwise every queue's files.
    fn load(&self, abnormal: bool) -> Result<()> {
        if !abnormal && !self.read_only && self.load_recorded()? {
            return Ok(());
        }
        self.load_all(abnormal).map(drop)
    }

    /// Every queue pending, no queue file opened (module doc).
    fn attach(&self, log_end: u64, next_offset: &NextOffset<'_>) -> Result<()> {
        if self.read_only {
            return self.load(false);
        }
        self.attach_lazily(log_end, next_offset)
    }

    /// Units pointing at or past `log_end` go; units past `resume_from` are kept only while
    /// each points at exactly the record it claims to index; a queue that a damaged unit or a
    /// short file cut short below that point is re-dispatched from the end of its last good
    /// unit.
    ///
    /// Pending queues need nothing when the record is trusted: it names this recovered end,
    /// and every record below it is durably in the queues, so no unit points at or past the
    /// end and none was written after `resume_from`. Otherwise the record is dropped and every
    /// queue loaded first. A later shared writer's pending queues get this check at their
    /// first use (`load_attached`), from the `resume_from` given here.
    fn recover(&self, log: &CommitLog, log_end: u64, resume_from: u64) -> Result<u64> {
        // A later shared writer: its pending queues are checked from here when they load.
        if let Some(at) = self
            .attached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            at.resume_from = resume_from;
        }
        let end = self.trusted_end.swap(NO_RECORD, Ordering::AcqRel);
        if end != NO_RECORD && (end != log_end || resume_from < log_end) {
            // Not the store the record describes: forget it and load every queue as an open
            // without it does (`load` took the record only after a clean shutdown).
            self.lock_pending().clear();
            self.has_pending.store(false, Ordering::Release);
            self.load_all(false)?;
        }
        self.truncate_dirty(log_end)?;
        let log_min = log.min_offset();
        let mut resume = resume_from;
        let durable = DurableCheck::new(log);
        for cq in self.all() {
            check_tail(log, &durable, &cq, resume_from)?;
            if cq.was_cut_short() {
                resume = resume.min(cq.max_physical_offset().max(log_min));
            }
        }
        Ok(resume)
    }

    /// Also deletes the clean-shutdown record, used or not (clean.rs: a record never
    /// outlives the close that wrote it).
    fn recovered(&self) -> Result<()> {
        if let (Some(path), false) = (&self.clean_path, self.read_only) {
            clean::remove(path)?;
        }
        self.remove_stale_files()
    }

    /// Queues start at the log's minimum, and the appender continues each queue's offsets
    /// (a pending queue's from the record).
    fn ready(&self, log: &CommitLog) {
        self.correct_min_offsets(log.min_offset());
        let mut a = log.lock_appender();
        for cq in self.all() {
            a.set_queue_offset(cq.topic(), cq.queue_id(), cq.max_offset());
        }
        for (topic, m) in self.lock_pending().iter() {
            for (&queue_id, &(max_offset, _)) in m {
                a.set_queue_offset(topic, queue_id, max_offset);
            }
        }
    }

    fn record_clean(&self, log_end: u64) -> Result<()> {
        ConsumeQueueStore::record_clean(self, log_end)
    }

    fn use_preparer(&self, preparer: Preparer) {
        self.set_preparer(preparer);
    }

    /// Every unit dispatched is in a flushed file afterwards.
    fn flush(&self, dispatched: Progress) -> Result<Progress> {
        self.flush_all().map(|()| dispatched)
    }

    fn delete_expired(&self, log_min: u64) -> Result<usize> {
        ConsumeQueueStore::delete_expired(self, log_min)
    }

    /// The topic's queues exist (directories included) when this returns, and their first
    /// files are being made ahead (`make_topic_queues`).
    fn prepare_topic(&self, topic: &str, queues: u32) -> Result<()> {
        self.make_topic_queues(topic, queues)
    }

    /// Each queue keeps its newest file mapped.
    fn release_pages(&self) {
        for cq in self.all() {
            cq.files().release_pages(1);
        }
    }

    fn close(&self) {
        self.stop_preparer();
        self.close_files();
    }
}

impl QueueIndex for ConsumeQueueStore {
    fn queue(&self, topic: &str, queue_id: u32) -> Result<Option<Arc<dyn LogicalQueue>>> {
        Ok(self
            .lookup(topic, queue_id)?
            .map(|cq| cq as Arc<dyn LogicalQueue>))
    }

    fn discover_topics(&self) -> Result<Vec<(String, u32)>> {
        ConsumeQueueStore::discover_topics(self)
    }

    fn follow_all(&self, log_min: u64) {
        for cq in self.all() {
            LogicalQueue::follow(cq.as_ref(), true, log_min);
        }
    }
}

impl Dispatcher for ConsumeQueueStore {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn dispatch(&self, req: &DispatchRequest<'_>) -> Result<()> {
        self.dispatch_batch(std::slice::from_ref(req))
    }

    /// Runs of consecutive records of one (topic, queue) with consecutive queue offsets (an
    /// appended batch is one run) go to their queue with one `put_run`: one lock and one
    /// publish per run.
    fn dispatch_batch(&self, reqs: &[DispatchRequest<'_>]) -> Result<()> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let mut rest = reqs;
        while let Some((first, _)) = rest.split_first() {
            let run = rest
                .iter()
                .enumerate()
                .take_while(|(i, r)| {
                    r.queue_id == first.queue_id
                        && r.sysflag == first.sysflag
                        && r.queue_offset == first.queue_offset + *i as u64
                        && (std::ptr::eq(r.topic, first.topic) || r.topic == first.topic)
                })
                .count()
                .max(1);
            let (head, tail) = rest.split_at(run.min(rest.len()));
            rest = tail;
            if !sysflag::is_dispatched(first.sysflag) {
                continue;
            }
            if last.as_ref().is_none_or(|(t, _)| t != first.topic) {
                *last = Some((first.topic.to_owned(), Vec::new()));
            }
            let Some((_, by_id)) = last.as_mut() else {
                return Err(Error::Closed);
            };
            let i = first.queue_id as usize;
            if by_id.len() <= i {
                by_id.resize(i + 1, None);
            }
            let Some(slot) = by_id.get_mut(i) else {
                return Err(Error::Closed);
            };
            let cq = match slot {
                Some(cq) => cq,
                None => slot.insert(self.get_or_create(first.topic, first.queue_id)?),
            };
            cq.put_run(first.queue_offset, head.iter().map(unit_of))?;
            self.ask_next_file(cq);
        }
        Ok(())
    }

    /// One request (a producer's `send`), when its queue is open and its unit goes into the
    /// current file; anything else is left to `dispatch_batch` on the reput thread.
    fn dispatch_quick(&self, reqs: &[DispatchRequest<'_>]) -> Result<bool> {
        let [req] = reqs else {
            return Ok(false);
        };
        if !sysflag::is_dispatched(req.sysflag) {
            return Ok(true);
        }
        // The dispatcher's cached queues first, then the map; either lock busy: decline. The
        // cached queue is used under the cache's lock rather than cloned out of it: the put
        // only try-locks, so holding the cache cannot deadlock, and a send saves the two
        // atomic reference-count updates of a clone.
        if let Ok(last) = self.last.try_lock() {
            let cached = last
                .as_ref()
                .filter(|(t, _)| t == req.topic)
                .and_then(|(_, by_id)| by_id.get(req.queue_id as usize))
                .and_then(Option::as_ref);
            if let Some(cq) = cached {
                let put = cq.try_put_run(req.queue_offset, &[unit_of(req)]);
                self.ask_next_file(cq);
                return put;
            }
        }
        let found = self
            .queues
            .try_read()
            .ok()
            .and_then(|map| queue_in(&map, req.topic, req.queue_id));
        match found {
            Some(cq) => {
                let put = cq.try_put_run(req.queue_offset, &[unit_of(req)]);
                self.ask_next_file(&cq);
                put
            }
            None => Ok(false),
        }
    }
}

/// Recovery's check of `cq`'s tail against `log` (`ConsumeQueue::verify_tail` from
/// `resume_from`): units that do not index exactly their record are cut, unless the log bytes
/// they point at are damaged, which is reported.
fn check_tail(
    log: &CommitLog,
    durable: &DurableCheck<'_>,
    cq: &ConsumeQueue,
    resume_from: u64,
) -> Result<bool> {
    let log_min = log.min_offset();
    cq.verify_tail(resume_from, |unit, k| {
        if unit.offset < log_min {
            return Ok(true); // the record expired: nothing to check it against
        }
        let matches = indexes_record(log, cq, unit, k);
        // Every unit left points below the log's recovered end, where the log is either
        // verified by the recovery scan or durable but unread: a mismatch is a stale unit only
        // if the records up to where it points are whole; if not, it is the log that is
        // damaged, and that is reported, not cut away with the unit.
        if !matches {
            durable.through(unit.offset)?;
        }
        Ok(matches)
    })
}

/// Whether `unit` points exactly at the record of `cq` whose queue offset is `k`.
fn indexes_record(log: &CommitLog, cq: &ConsumeQueue, unit: &CqUnit, k: u64) -> bool {
    log.with_bytes(unit.offset, unit.size, |b| {
        RecordView::parse(b, false).is_ok_and(|v| {
            v.physical_offset() == unit.offset
                && v.queue_offset() == k
                && v.queue_id() == cq.queue_id()
                && v.topic() == cq.topic()
        })
    })
    .unwrap_or(false)
}

fn queue_in(map: &QueueMap, topic: &str, queue_id: u32) -> Option<Arc<ConsumeQueue>> {
    map.get(topic)
        .and_then(|v| v.get(queue_id as usize))
        .and_then(Clone::clone)
}

fn unit_of(r: &DispatchRequest<'_>) -> CqUnit {
    CqUnit {
        offset: r.commit_log_offset,
        size: r.size,
        tags_code: r.tags_code,
    }
}
