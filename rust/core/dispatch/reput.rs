//! ReputService: tails the commit log from `reput_from` and feeds every dispatcher.
//!
//! Who runs it: whichever thread gets there first. A producer that just published records
//! tries to dispatch them itself (one `try_lock`, so a consumer blocked in `poll` is woken
//! without a thread hop); the service's own thread dispatches whenever the producer could not
//! (lock busy, or sync mode where only flushed bytes may be dispatched) and retries after
//! errors. A producer holding Python's GIL uses the quick form, which never waits: what it
//! cannot dispatch without creating a file or waiting for a lock, it leaves to the service
//! thread and wakes it. The try-lock protocol cannot lose a record: a producer publishes,
//! then issues a SeqCst fence and tries the lock; the holder releases, issues a SeqCst fence
//! and re-reads the confirm offset, so at least one of them sees the other's work.
//!
//! Invariant: `dispatched_offset()` is a record boundary `<= confirm offset`, and every record
//! below it was handed to every dispatcher in commit-log order.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::notifier::Notifier;
use super::{DispatchRequest, Dispatcher};
use crate::commit_log::CommitLog;
use crate::error::{Error, Result};
use crate::message::codec::{self, Peek, RecordView};

/// Where dispatch continues, and the commit-log file holding that offset (kept across records
/// and runs: looking the file up each time would take the file list's lock).
#[derive(Debug)]
struct Cursor {
    offset: u64,
    file: Option<Arc<crate::mapped_file::MappedFile>>,
}

/// The reput service.
#[derive(Debug)]
pub struct Reput {
    commit_log: Arc<CommitLog>,
    dispatchers: Vec<Arc<dyn Dispatcher>>,
    from: Mutex<Cursor>,
    dispatched: AtomicU64,
    only_flushed: bool,
    notifier: Arc<Notifier>,
    wake: (Mutex<bool>, Condvar),
    stop: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// `last_error` is set (checked without its lock on every dispatch).
    has_error: AtomicBool,
}

impl Reput {
    /// A service starting at `from`; `only_flushed` limits dispatch to flushed bytes (sync mode).
    pub fn new(
        commit_log: Arc<CommitLog>,
        dispatchers: Vec<Arc<dyn Dispatcher>>,
        from: u64,
        only_flushed: bool,
        notifier: Arc<Notifier>,
    ) -> Self {
        Reput {
            commit_log,
            dispatchers,
            from: Mutex::new(Cursor {
                offset: from,
                file: None,
            }),
            dispatched: AtomicU64::new(from),
            only_flushed,
            notifier,
            wake: (Mutex::new(false), Condvar::new()),
            stop: AtomicBool::new(false),
            last_error: Mutex::new(None),
            has_error: AtomicBool::new(false),
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

    /// Every record below this offset was dispatched.
    pub fn dispatched_offset(&self) -> u64 {
        self.dispatched.load(Ordering::Acquire)
    }

    /// Dispatch lag in bytes.
    pub fn behind(&self) -> u64 {
        self.confirm_offset()
            .saturating_sub(self.dispatched_offset())
    }

    /// The last dispatch error, if the service is stuck retrying.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Dispatches what is available unless another thread is doing it (see the module doc).
    pub fn try_dispatch(&self) {
        fence(Ordering::SeqCst);
        loop {
            let Some(mut from) = self.try_cursor() else {
                return;
            };
            let result = self.run(&mut from);
            drop(from);
            if let Err(e) = result {
                self.record_error(&e);
                return;
            }
            fence(Ordering::SeqCst);
            if self.confirm_offset() <= self.dispatched_offset() {
                return;
            }
        }
    }

    /// Inline dispatch by the producer of the records `[first, end)` it just published,
    /// described by `reqs` in commit-log order (one record, or one batch): when they are the
    /// next to dispatch, the dispatchers get the requests without the records being decoded
    /// again from the file, under one lock; otherwise (lock busy, a gap before them) this is
    /// `try_dispatch`. A dispatcher error leaves the cursor at `first` for the reput thread to
    /// retry (dispatchers are idempotent).
    pub fn try_dispatch_known<'a>(&self, first: u64, end: u64, reqs: &[DispatchRequest<'a>]) {
        fence(Ordering::SeqCst);
        let Some(mut cursor) = self.try_cursor() else {
            return;
        };
        if cursor.offset == first && end <= self.confirm_offset() {
            let dispatched = self.dispatchers.iter().try_for_each(|d| match reqs {
                [one] => d.dispatch(one),
                _ => d.dispatch_batch(reqs),
            });
            if let Err(e) = dispatched {
                drop(cursor);
                self.record_error(&e);
                return;
            }
            cursor.offset = end;
            self.advanced(end);
        }
        drop(cursor);
        fence(Ordering::SeqCst);
        if self.confirm_offset() > self.dispatched_offset() {
            self.try_dispatch();
        }
    }

    /// `try_dispatch_known` for a producer that must not wait (it holds Python's GIL): the
    /// dispatchers get the records through `dispatch_quick` only (consumers are woken through
    /// `wake_via`, see `Notifier::notify_via`), and whatever that refuses,
    /// or any undispatched record before these, goes to the service thread (woken here)
    /// instead of being dispatched on this thread. When another thread holds the cursor, that
    /// thread picks the records up after releasing it, as in `try_dispatch`.
    pub fn try_dispatch_quick<'a>(
        &self,
        first: u64,
        end: u64,
        reqs: &[DispatchRequest<'a>],
        wake_via: impl FnOnce(&(dyn Fn() + Sync)),
    ) {
        fence(Ordering::SeqCst);
        let Some(mut cursor) = self.try_cursor() else {
            return;
        };
        let mut done = false;
        if cursor.offset == first && end <= self.confirm_offset() {
            let mut all = true;
            for d in &self.dispatchers {
                match d.dispatch_quick(reqs) {
                    Ok(true) => {}
                    Ok(false) => {
                        all = false;
                        break;
                    }
                    Err(e) => {
                        drop(cursor);
                        self.record_error(&e);
                        return;
                    }
                }
            }
            if all {
                cursor.offset = end;
                self.advanced_via(end, wake_via);
                done = true;
            }
        }
        drop(cursor);
        fence(Ordering::SeqCst);
        if !done || self.confirm_offset() > self.dispatched_offset() {
            self.kick_thread();
        }
    }

    fn record_error(&self, e: &Error) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        self.has_error.store(true, Ordering::Relaxed);
        self.kick_thread();
    }

    fn clear_error(&self) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.has_error.store(false, Ordering::Relaxed);
    }

    /// Dispatches everything available, waiting for the lock (recovery, shutdown).
    pub fn dispatch_all(&self) -> Result<()> {
        let mut from = self.from.lock().unwrap_or_else(|p| p.into_inner());
        self.run(&mut from)
    }

    fn run(&self, cursor: &mut Cursor) -> Result<()> {
        let target = self.confirm_offset();
        if cursor.offset >= target {
            return Ok(());
        }
        let Cursor {
            offset: from,
            file: current,
        } = cursor;
        let start = *from;
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
                    // No CRC here (as in RocketMQ): the appender computed it, recovery and
                    // reads verify it.
                    let v = RecordView::parse(buf, false)
                        .map_err(|e| Error::undecodable(file.path(), pos, e, ""))?;
                    let req = DispatchRequest::from_record(&v);
                    for d in &self.dispatchers {
                        d.dispatch(&req)?;
                    }
                    *from = pos + u64::from(v.total_size());
                }
            }
            *current = Some(file);
            self.dispatched.store(*from, Ordering::Release);
        }
        if *from != start {
            self.advanced(*from);
        }
        Ok(())
    }

    /// The dispatch cursor, unless another thread holds it.
    fn try_cursor(&self) -> Option<std::sync::MutexGuard<'_, Cursor>> {
        crate::util::sync::try_lock(&self.from)
    }

    /// Dispatch progressed to `to`: publish it, forget a past error, wake waiting consumers.
    fn advanced(&self, to: u64) {
        self.advanced_via(to, |wake| wake());
    }

    /// `advanced`, waking consumers through `via` (see `Notifier::notify_via`).
    fn advanced_via(&self, to: u64, via: impl FnOnce(&(dyn Fn() + Sync))) {
        self.dispatched.store(to, Ordering::Release);
        if self.has_error.load(Ordering::Relaxed) {
            self.clear_error();
        }
        self.notifier.notify_via(via);
    }

    /// Wakes the service thread.
    pub fn kick_thread(&self) {
        let mut w = self.wake.0.lock().unwrap_or_else(|p| p.into_inner());
        *w = true;
        self.wake.1.notify_one();
    }

    /// Body of the service thread: dispatch on wake-up, and every `idle` as a safety net.
    pub fn run_thread(self: &Arc<Self>, idle: Duration) {
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
            self.try_dispatch();
        }
    }

    /// Lets go of the commit-log file the cursor holds (store close).
    pub fn release_file(&self) {
        self.from.lock().unwrap_or_else(|p| p.into_inner()).file = None;
    }

    /// Asks the service thread to exit.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.kick_thread();
    }
}
