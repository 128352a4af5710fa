//! ConsumeQueueStore: every consume queue of the store, opened lazily, and the derived store
//! (`DerivedStore`, critical, quick) that feeds them and runs their lifecycle; readers find
//! queues through it as the store's `QueueIndex`.
//!
//! On disk: `consumequeue/<topic>/<queueId>/`.
//!
//! Invariant: a path is built only from a valid topic name (`[A-Za-z0-9_%|-]`, checked in
//! `dir_of`, the one place names become paths), so a directory can never leave the store root,
//! whatever a caller or a `topics.json` supplies.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use super::unit::CqUnit;
use super::ConsumeQueue;
use crate::commit_log::recovery::DurableCheck;
use crate::commit_log::CommitLog;
use crate::dispatch::derived::{DerivedStore, Progress};
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
        }
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
            let cq = self.open_queue(&topic, qid)?;
            cq.recover(zero_tail)?;
            found.push(cq);
        }
        Ok(found)
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

    fn open_queue(&self, topic: &str, queue_id: u32) -> Result<Arc<ConsumeQueue>> {
        let dir = self.dir_of(topic, queue_id)?;
        let mut map = self.write();
        let v = map.entry(topic.to_owned()).or_default();
        let i = queue_id as usize;
        if v.len() <= i {
            v.resize(i + 1, None);
        }
        if let Some(Some(cq)) = v.get(i) {
            return Ok(Arc::clone(cq));
        }
        let cq = Arc::new(
            ConsumeQueue::new(
                topic,
                queue_id,
                dir,
                self.file_size,
                self.file_mode,
                self.read_only,
            )
            .with_cache(Arc::clone(&self.cache))
            .with_clock(self.clock.clone()),
        );
        if let Some(slot) = v.get_mut(i) {
            *slot = Some(Arc::clone(&cq));
        }
        Ok(cq)
    }

    /// The queue if it exists in memory, or (read-only followers) on disk.
    pub fn get(&self, topic: &str, queue_id: u32) -> Option<Arc<ConsumeQueue>> {
        if let Some(cq) = queue_in(&self.read(), topic, queue_id) {
            return Some(cq);
        }
        if self.read_only {
            let dir = self.dir_of(topic, queue_id).ok().flatten()?;
            if dir.is_dir() {
                let cq = self.open_queue(topic, queue_id).ok()?;
                cq.recover(false).ok()?;
                return Some(cq);
            }
        }
        None
    }

    /// The queue, created (directory included) if missing.
    pub fn get_or_create(&self, topic: &str, queue_id: u32) -> Result<Arc<ConsumeQueue>> {
        if let Some(cq) = self.get(topic, queue_id) {
            return Ok(cq);
        }
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if let Some(dir) = self.dir_of(topic, queue_id)? {
            fs::create_dir_all(&dir, self.dir_mode)?;
        }
        self.open_queue(topic, queue_id)
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

    /// Moves every queue's minimum past units whose records are below `phy_min`.
    pub fn correct_min_offsets(&self, phy_min: u64) {
        for cq in self.all() {
            cq.correct_min_offset(phy_min);
        }
    }

    /// Deletes queue files fully below the commit log's `phy_min`.
    pub fn delete_expired(&self, phy_min: u64) -> Result<usize> {
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

    fn load(&self, abnormal: bool) -> Result<()> {
        self.load_all(abnormal).map(drop)
    }

    /// Units pointing at or past `log_end` go; units past `resume_from` are kept only while
    /// each points at exactly the record it claims to index; a queue that a damaged unit or a
    /// short file cut short below that point is re-dispatched from the end of its last good
    /// unit.
    fn recover(&self, log: &CommitLog, log_end: u64, resume_from: u64) -> Result<u64> {
        self.truncate_dirty(log_end)?;
        let log_min = log.min_offset();
        let mut resume = resume_from;
        let durable = DurableCheck::new(log);
        for cq in self.all() {
            cq.verify_tail(resume_from, |unit, k| {
                if unit.offset < log_min {
                    return Ok(true); // the record expired: nothing to check it against
                }
                let matches = log
                    .with_bytes(unit.offset, unit.size, |b| {
                        RecordView::parse(b, false).is_ok_and(|v| {
                            v.physical_offset() == unit.offset
                                && v.queue_offset() == k
                                && v.queue_id() == cq.queue_id()
                                && v.topic() == cq.topic()
                        })
                    })
                    .unwrap_or(false);
                // Every unit left points below `log_end`, where the log is either verified
                // by the recovery scan or durable but unread: a mismatch is a stale unit only
                // if the records up to where it points are whole; if not, it is the log that
                // is damaged, and that is reported, not cut away with the unit.
                if !matches {
                    durable.through(unit.offset)?;
                }
                Ok(matches)
            })?;
            if cq.was_cut_short() {
                resume = resume.min(cq.max_physical_offset().max(log_min));
            }
        }
        Ok(resume)
    }

    fn recovered(&self) -> Result<()> {
        self.remove_stale_files()
    }

    /// Queues start at the log's minimum, and the appender continues each queue's offsets.
    fn ready(&self, log: &CommitLog) {
        self.correct_min_offsets(log.min_offset());
        let mut a = log.lock_appender();
        for cq in self.all() {
            a.set_queue_offset(cq.topic(), cq.queue_id(), cq.max_offset());
        }
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
    fn queue(&self, topic: &str, queue_id: u32) -> Option<Arc<dyn LogicalQueue>> {
        self.get(topic, queue_id)
            .map(|cq| cq as Arc<dyn LogicalQueue>)
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
