//! ReputService: tails the commit log and feeds every derived store (dispatch/derived.rs).
//!
//! Lanes: the critical stores share the main cursor, the one consumers wait on; each
//! non-critical store has a lane of its own, moved only by a thread of its own
//! (`FollowerService`, registered when such stores exist) and by a last `follow` at close, so
//! one that fails, lags or blocks never holds back the main cursor, the reput thread or a
//! producer. A lane's failure is recorded on it and retried at the follower thread's next
//! wake-up.
//!
//! Who runs it: whichever thread gets there first. A producer that just published records
//! tries to dispatch them itself (one `try_lock`, so a consumer blocked in `poll` is woken
//! without a thread hop); the service's own thread dispatches whenever the producer could not
//! (lock busy, or sync mode where only flushed bytes may be dispatched) and retries after
//! errors. A producer holding Python's GIL uses the quick form, which never waits: what it
//! cannot dispatch without creating a file or waiting for a lock, it leaves to the service
//! thread and wakes it. The try-lock protocol (handoff.rs, model-checked with loom there)
//! cannot lose a record: a producer publishes, then issues a SeqCst fence and tries the lock;
//! every holder releases, issues a SeqCst fence and re-reads the confirm offset, so at least
//! one of them sees the other's work.
//!
//! Invariant: `dispatched_offset()` is a record boundary `<= confirm offset`, and every record
//! below it was handed to every critical store in commit-log order; the same holds for each
//! non-critical store's own lane offset. Records of files retention deleted before a lagging
//! lane reached them are skipped by that lane.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::derived::{DerivedStore, DerivedStores, Progress};
use super::handoff::{self, Holder};
use super::notifier::Notifier;
use super::DispatchRequest;
use crate::commit_log::CommitLog;
use crate::error::{Error, Result};
use crate::message::codec::{self, Peek, RecordView};
use crate::service::Service;

/// The most records a lane hands each store in one call: a store's cost per call (the
/// index's writes, a queue's lock and publish) is paid once for them.
const BATCH: usize = 256;

/// The service thread's safety-net period. Producers (or the flush thread, in sync mode) wake
/// it whenever they leave records to it, so this bounds how soon a failed dispatch is retried
/// and how far non-critical stores lag when nothing else happens; every idle wake-up is CPU
/// time taken from the store's users (and, on a small machine, a chance to move a consumer to
/// another CPU).
pub const REPUT_IDLE: Duration = Duration::from_millis(100);

/// Where dispatch continues, and the commit-log file holding that offset (kept across records
/// and runs: looking the file up each time would take the file list's lock).
#[derive(Debug)]
struct Cursor {
    offset: u64,
    file: Option<Arc<crate::mapped_file::MappedFile>>,
}

/// A cursor over the commit log and the stores it feeds.
#[derive(Debug)]
struct Lane {
    stores: Vec<Arc<dyn DerivedStore>>,
    cursor: crate::util::loom_sync::Mutex<Cursor>,
    dispatched: AtomicU64,
    /// Store timestamp of the last record below `dispatched` (0: none yet).
    store_ts: AtomicI64,
    last_error: Mutex<Option<String>>,
    /// `last_error` is set (checked without its lock on every dispatch).
    has_error: AtomicBool,
}

impl Lane {
    fn new(stores: Vec<Arc<dyn DerivedStore>>, from: u64) -> Self {
        Lane {
            stores,
            cursor: crate::util::loom_sync::Mutex::new(Cursor {
                offset: from,
                file: None,
            }),
            dispatched: AtomicU64::new(from),
            store_ts: AtomicI64::new(0),
            last_error: Mutex::new(None),
            has_error: AtomicBool::new(false),
        }
    }

    fn progress(&self) -> Progress {
        Progress {
            offset: self.dispatched.load(Ordering::Acquire),
            store_timestamp: self.store_ts.load(Ordering::Relaxed),
        }
    }

    fn set_error(&self, e: &Error) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        self.has_error.store(true, Ordering::Relaxed);
    }

    fn error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Publishes progress to `to` (whose last record was stored at `ts`) and forgets a past
    /// error.
    fn advance(&self, to: u64, ts: i64) {
        self.store_ts.store(ts, Ordering::Relaxed);
        self.dispatched.store(to, Ordering::Release);
        if self.has_error.load(Ordering::Relaxed) {
            *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
            self.has_error.store(false, Ordering::Relaxed);
        }
    }
}

/// One derived store's dispatch state, as `Reput::progress` reports it.
#[derive(Debug, Clone)]
pub struct StoreState {
    /// The store.
    pub store: Arc<dyn DerivedStore>,
    /// What was dispatched to it.
    pub dispatched: Progress,
    /// The failure its lane is retrying, if any.
    pub error: Option<String>,
}

/// The reput service.
#[derive(Debug)]
pub struct Reput {
    commit_log: Arc<CommitLog>,
    /// The critical stores.
    main: Lane,
    /// Every critical store declares `quick`: producers may dispatch inline without waiting.
    quick: bool,
    /// One lane per non-critical store.
    followers: Vec<Lane>,
    only_flushed: bool,
    notifier: Arc<Notifier>,
    wake: (Mutex<bool>, Condvar),
    stop: AtomicBool,
    /// Tests: while set, the service thread dispatches nothing, so that what a test asserts
    /// does not depend on whether the scheduler ran that thread yet.
    #[cfg(test)]
    pub(crate) service_paused: AtomicBool,
}

impl Reput {
    /// A service feeding `stores`, each starting at its entry in `from` (the critical stores
    /// share a cursor, at the lowest of theirs; a missing entry is the lowest given);
    /// `only_flushed` limits dispatch to flushed bytes (sync mode).
    pub fn new(
        commit_log: Arc<CommitLog>,
        stores: &DerivedStores,
        from: &[u64],
        only_flushed: bool,
        notifier: Arc<Notifier>,
    ) -> Self {
        let lowest = from.iter().copied().min().unwrap_or(0);
        let start = |i: usize| from.get(i).copied().unwrap_or(lowest);
        let (mut critical, mut main_from, mut followers) = (Vec::new(), None, Vec::new());
        for (i, s) in stores.iter().enumerate() {
            if s.critical() {
                critical.push(Arc::clone(s));
                main_from = Some(main_from.map_or(start(i), |m: u64| m.min(start(i))));
            } else {
                followers.push(Lane::new(vec![Arc::clone(s)], start(i)));
            }
        }
        Reput {
            commit_log,
            quick: critical.iter().all(|s| s.quick()),
            main: Lane::new(critical, main_from.unwrap_or(lowest)),
            followers,
            only_flushed,
            notifier,
            wake: (Mutex::new(false), Condvar::new()),
            stop: AtomicBool::new(false),
            #[cfg(test)]
            service_paused: AtomicBool::new(false),
        }
    }

    /// Offset up to which records may be dispatched.
    pub fn confirm_offset(&self) -> u64 {
        if self.only_flushed {
            self.commit_log
                .flushed_offset()
                .min(self.commit_log.max_offset())
        } else {
            self.commit_log.max_offset()
        }
    }

    /// Every record below this offset was dispatched to every critical store.
    pub fn dispatched_offset(&self) -> u64 {
        self.main.dispatched.load(Ordering::Acquire)
    }

    /// What was dispatched to the critical stores.
    pub fn dispatched(&self) -> Progress {
        self.main.progress()
    }

    /// Dispatch lag of the critical stores in bytes.
    pub fn behind(&self) -> u64 {
        self.confirm_offset()
            .saturating_sub(self.dispatched_offset())
    }

    /// The last dispatch error of the critical stores, if the service is stuck retrying.
    pub fn last_error(&self) -> Option<String> {
        self.main.error()
    }

    /// Every store's dispatch state: the critical ones in order, then the others.
    pub fn progress(&self) -> Vec<StoreState> {
        std::iter::once(&self.main)
            .chain(&self.followers)
            .flat_map(|lane| {
                let (dispatched, error) = (lane.progress(), lane.error());
                lane.stores.iter().map(move |s| StoreState {
                    store: Arc::clone(s),
                    dispatched,
                    error: error.clone(),
                })
            })
            .collect()
    }

    /// Dispatches what is available to the critical stores unless another thread is doing it
    /// (see the module doc).
    pub fn try_dispatch(&self) {
        handoff::try_run(&self.main.cursor, self);
    }

    /// Inline dispatch by the producer of the records `[first, end)` it just published,
    /// described by `reqs` in commit-log order (one record, or one batch): when they are the
    /// next to dispatch, the critical stores get the requests without the records being
    /// decoded again from the file, under one lock; otherwise (lock busy, a gap before them)
    /// this is `try_dispatch`. A store's error leaves the cursor at `first` for the reput
    /// thread to retry (dispatch is idempotent). Non-critical stores are left to the thread.
    pub fn try_dispatch_known<'a>(&self, first: u64, end: u64, reqs: &[DispatchRequest<'a>]) {
        let _ = handoff::try_with(&self.main.cursor, self, false, |cursor| {
            if cursor.offset != first || end > self.confirm_offset() {
                return Ok(false);
            }
            self.main.stores.iter().try_for_each(|d| match reqs {
                [one] => d.dispatch(one),
                _ => d.dispatch_batch(reqs),
            })?;
            cursor.offset = end;
            self.advanced(end, last_ts(reqs));
            Ok(true)
        });
    }

    /// `try_dispatch_known` for a producer that must not wait (it holds Python's GIL): the
    /// critical stores get the records through `dispatch_quick` only (consumers are woken
    /// through `wake_via`, see `Notifier::notify_via`), and whatever that refuses, or any
    /// undispatched record before these, goes to the service thread (woken here) instead of
    /// being dispatched on this thread; so does everything when a critical store does not
    /// declare `quick`. When another thread holds the cursor, that thread picks the records
    /// up after releasing it (handoff.rs). Returns whether these records were dispatched here.
    pub fn try_dispatch_quick<'a>(
        &self,
        first: u64,
        end: u64,
        reqs: &[DispatchRequest<'a>],
        wake_via: impl FnOnce(&(dyn Fn() + Sync)),
    ) -> bool {
        if !self.quick {
            self.kick_thread();
            return false;
        }
        handoff::try_with(&self.main.cursor, self, true, |cursor| {
            if cursor.offset != first || end > self.confirm_offset() {
                return Ok(false);
            }
            for d in &self.main.stores {
                if !d.dispatch_quick(reqs)? {
                    return Ok(false);
                }
            }
            cursor.offset = end;
            self.advanced_via(end, last_ts(reqs), wake_via);
            Ok(true)
        })
    }

    /// Records a critical store's dispatch failure and wakes the service thread to retry it.
    pub(crate) fn record_error(&self, e: &Error) {
        self.main.set_error(e);
        self.kick_thread();
    }

    /// Dispatches everything available to the critical stores, waiting for the lock
    /// (recovery, flush, shutdown, a put that must read its own write), then what producers
    /// that found the lock taken published meanwhile (handoff.rs). Non-critical stores are
    /// not touched: only `follow` moves them.
    ///
    /// # Errors
    /// A critical store's failure.
    pub fn dispatch_all(&self) -> Result<()> {
        handoff::run_all(&self.main.cursor, self)
    }

    /// Moves every non-critical lane forward unless another thread is doing it; a failure
    /// stays on its lane until the next attempt. Called by the follower thread, and once by
    /// close after that thread stopped (a store that blocks there blocks close).
    pub fn follow(&self) {
        for lane in &self.followers {
            let Some(mut from) = handoff::try_lock(&lane.cursor) else {
                continue;
            };
            if let Err(e) = self.run(lane, &mut from) {
                lane.set_error(&e);
            }
        }
    }

    /// Moves the lane of the non-critical store named `name` to the confirm offset on this
    /// thread, waiting for the follower thread if it holds the lane: for a reader that needs
    /// that store current (a lookup right after a send). A failure stays on the lane, as
    /// `follow` leaves it, and is returned.
    ///
    /// # Errors
    /// The store's dispatch failure.
    pub fn follow_store(&self, name: &str) -> Result<()> {
        match self
            .followers
            .iter()
            .find(|l| l.stores.iter().any(|s| s.name() == name))
        {
            Some(lane) => self.follow_lane(lane),
            None => Ok(()),
        }
    }

    /// Moves every non-critical lane to the confirm offset on this thread, waiting for the
    /// follower thread where it holds one (`Store::flush`: the flush then covers them). A
    /// failure stays on its lane.
    pub fn follow_all(&self) {
        for lane in &self.followers {
            let _ = self.follow_lane(lane);
        }
    }

    fn follow_lane(&self, lane: &Lane) -> Result<()> {
        let mut cursor = lane.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let ran = self.run(lane, &mut cursor);
        if let Err(e) = &ran {
            lane.set_error(e);
        }
        ran
    }

    fn run(&self, lane: &Lane, cursor: &mut Cursor) -> Result<()> {
        let target = self.confirm_offset();
        if cursor.offset >= target {
            return Ok(());
        }
        let Cursor {
            offset: from,
            file: current,
        } = cursor;
        let start = *from;
        let mut ts = lane.store_ts.load(Ordering::Relaxed);
        while *from < target {
            let pos = *from;
            let file = match current.take() {
                Some(f) if pos >= f.from_offset() && pos < f.from_offset() + f.size() => f,
                _ => match self.commit_log.file_at(pos) {
                    Some(f) => f,
                    None => {
                        // Expired below us: continue at the oldest stored byte.
                        let min = self.commit_log.min_offset();
                        if pos < min {
                            *from = min;
                            continue;
                        }
                        break;
                    }
                },
            };
            let local = pos - file.from_offset();
            let Some(buf) = file.slice(local, (file.published() - local) as usize) else {
                break;
            };
            match codec::peek(buf) {
                Peek::End => break,
                Peek::Blank => *from = self.commit_log.roll_next_file(pos),
                Peek::Record => {
                    // The whole records of this file's published bytes, up to BATCH of
                    // them, go to each store in one call. No CRC here (as in RocketMQ): the
                    // appender computed it, recovery and reads verify it.
                    let mut reqs = Vec::new();
                    let mut at = 0usize;
                    while reqs.len() < BATCH {
                        let Some(rest) = buf.get(at..) else { break };
                        if at > 0 && !matches!(codec::peek(rest), Peek::Record) {
                            break;
                        }
                        let v = RecordView::parse(rest, false)
                            .map_err(|e| Error::undecodable(file.path(), pos + at as u64, e, ""))?;
                        at += v.total_size() as usize;
                        reqs.push(DispatchRequest::from_record(&v));
                    }
                    for d in &lane.stores {
                        match reqs.as_slice() {
                            [one] => d.dispatch(one)?,
                            many => d.dispatch_batch(many)?,
                        }
                    }
                    if let Some(last) = reqs.last() {
                        ts = last.store_timestamp;
                    }
                    *from = pos + at as u64;
                }
            }
            *current = Some(file);
            lane.store_ts.store(ts, Ordering::Relaxed);
            lane.dispatched.store(*from, Ordering::Release);
        }
        if *from != start {
            if std::ptr::eq(lane, &self.main) {
                self.advanced(*from, ts);
            } else {
                lane.advance(*from, ts);
            }
        }
        Ok(())
    }

    /// The critical stores' dispatch progressed to `to`: publish it, forget a past error,
    /// wake waiting consumers.
    fn advanced(&self, to: u64, ts: i64) {
        self.advanced_via(to, ts, |wake| wake());
    }

    /// `advanced`, waking consumers through `via` (see `Notifier::notify_via`).
    fn advanced_via(&self, to: u64, ts: i64, via: impl FnOnce(&(dyn Fn() + Sync))) {
        self.main.advance(to, ts);
        self.notifier.notify_via(via);
    }

    /// Wakes the service thread.
    pub fn kick_thread(&self) {
        let mut w = self.wake.0.lock().unwrap_or_else(|p| p.into_inner());
        *w = true;
        self.wake.1.notify_one();
    }

    /// Body of the service thread: dispatch on wake-up, and every `idle` as a safety net.
    pub fn run_thread(&self, idle: Duration) {
        while !self.stop.load(Ordering::Acquire) {
            {
                let mut w = self.wake.0.lock().unwrap_or_else(|p| p.into_inner());
                if !*w {
                    w = match self.wake.1.wait_timeout(w, idle) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    };
                }
                *w = false;
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            #[cfg(test)]
            if self.service_paused.load(Ordering::Acquire) {
                continue;
            }
            // Shared writers: the records other processes published, found every `idle` at
            // the latest (commit_log/shared.rs). A failure leaves the view as it was; the next
            // wake-up and every read try again.
            let _ = self.commit_log.follow_shared();
            self.try_dispatch();
            if self.main.has_error.load(Ordering::Relaxed) {
                // The failure kicked this thread (`record_error`, for a producer's failed
                // inline dispatch): not a reason to retry at once, or a store stuck on an
                // error would keep a CPU busy. The next retry comes with new data (a
                // producer's kick), or after `idle`.
                *self.wake.0.lock().unwrap_or_else(|p| p.into_inner()) = false;
            }
        }
    }

    /// True when non-critical stores are registered (they need a `FollowerService`).
    pub fn has_followers(&self) -> bool {
        !self.followers.is_empty()
    }

    /// Lets go of the commit-log files the cursors hold (store close).
    pub fn release_file(&self) {
        for lane in std::iter::once(&self.main).chain(&self.followers) {
            lane.cursor.lock().unwrap_or_else(|p| p.into_inner()).file = None;
        }
    }

    /// Asks the service thread to exit.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.kick_thread();
    }
}

/// The main lane, as the hand-off drives it.
impl Holder<Cursor> for Reput {
    fn pending(&self) -> bool {
        self.confirm_offset() > self.dispatched_offset()
    }

    fn catch_up(&self, cursor: &mut Cursor) -> Result<()> {
        self.run(&self.main, cursor)
    }

    fn failed(&self, e: &Error) {
        self.record_error(e);
    }

    fn kick(&self) {
        self.kick_thread();
    }
}

/// The thread that moves the non-critical stores' lanes every `idle` (`REPUT_IDLE` as a
/// service), apart from the reput thread so that a store that blocks stalls only itself.
#[derive(Debug)]
pub struct FollowerService {
    reput: Arc<Reput>,
    idle: Duration,
    stopping: Mutex<bool>,
    wake: Condvar,
}

impl FollowerService {
    /// The follower thread of `reput`'s non-critical stores.
    pub fn new(reput: Arc<Reput>, idle: Duration) -> Self {
        FollowerService {
            reput,
            idle,
            stopping: Mutex::new(false),
            wake: Condvar::new(),
        }
    }
}

impl Service for FollowerService {
    fn name(&self) -> &'static str {
        "derived"
    }

    fn run(&self) {
        loop {
            {
                let s = self.stopping.lock().unwrap_or_else(|p| p.into_inner());
                let (s, _) = self
                    .wake
                    .wait_timeout_while(s, self.idle, |stopping| !*stopping)
                    .unwrap_or_else(|p| p.into_inner());
                if *s {
                    return;
                }
            }
            self.reput.follow();
        }
    }

    fn stop(&self) {
        *self.stopping.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake.notify_all();
    }
}

impl Service for Reput {
    fn name(&self) -> &'static str {
        "reput"
    }

    fn run(&self) {
        self.run_thread(REPUT_IDLE);
    }

    fn stop(&self) {
        Reput::stop(self);
    }
}

/// Store timestamp of the last of `reqs` (0 for none).
fn last_ts(reqs: &[DispatchRequest<'_>]) -> i64 {
    reqs.last().map_or(0, |r| r.store_timestamp)
}
