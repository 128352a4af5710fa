//! The timer engine: delivers timer messages and delayed (delay-level) messages when due, one
//! thread for both. Its sources:
//! - the timer log: the consume queue of `rmq_sys_wheel_timer` (one unit per timer: commit-log
//!   offset, size, and the exact delivery time in the tags-code slot), in arrival order, fed
//!   by dispatch and rebuilt by recovery like every consume queue. Its near tier is an
//!   in-memory ordered map of the timers due within `timer_window` of the clock, filled lazily
//!   from the log: memory grows with the timers due in the window, not with the number
//!   pending. Progress: `config/timerProgress.json` (progress.rs).
//! - each delay level's queue of `SCHEDULE_TOPIC_XXXX`, already in due order: only its head
//!   is read (levels.rs). Progress: `config/delayOffset.json`, RocketMQ's file.
//!
//! The thread merges them: it delivers the earliest due of the near tier's first timer and the
//! levels' heads, while it is due.
//!
//! Invariants
//! - A timer's id (id.rs) is its source queue and offset there. Timer-log ids below `cursor`
//!   have been looked at: each is delivered (`Progress`), in `near`, or due after `horizon`
//!   (then `far` holds the earliest such time and lowest such id). `horizon` only grows while
//!   the service hosts. A level is delivered in queue order (levels.rs).
//! - Nothing is delivered before the clock reads the delivery time its record states, read
//!   at the re-put (redeliver.rs), whatever the queue unit says.
//! - A timer is recorded as delivered (in memory) only after its re-put returned, and the
//!   progress files are written only after a flush that covers every delivery they record:
//!   `delayOffset.json` first, then `timerProgress.json`, whose `commitLogOffset` is the log's
//!   end at that write, so every delivery neither file records lies after it.
//! - Before delivering anything, a start reads both files afresh (`prepare_start`) and the
//!   commit log from `commitLogOffset` to the end (`recover`), marking every timer whose
//!   delivered copy (`MQLITE_TIMER_ID`) it finds, of either source: a timer or delayed
//!   message delivered before a crash is not delivered again.
//! - The thread sleeps until the earliest of: the first near timer's time, the first level
//!   head's time, the time the near tier must be refilled (the earliest far timer less half a
//!   window), the next catch-up slot, or an arrival a put announces after its append (wake.rs:
//!   of this process, or with shared writers of any process through the writer mapping). An
//!   arrival makes the thread follow the log to its end and, when that end is not yet
//!   dispatched here, wait for its dispatch (at most its nap). The longest sleep is `MAX_NAP`,
//!   a safety net for wall-clock jumps, not a poll for work.
//! - Timers and delayed messages already overdue when this process began hosting are
//!   delivered at most `timer_catchup_rate` per second together (counted on the store's
//!   clock); the others are not limited.
//! - Hosting: one process at a time delivers (`Store::start_delivery`; with shared writers
//!   the leader, `host`); starts, stops and caller-run passes are serialised (`hosting`).
//!
//! Crash behaviour: exactly once for a crash of the process (kill points
//! `timer.delivered_unrecorded`, `schedule.delivered_unrecorded`): the copy is in the log and
//! recovery finds its id. After a power cut, a delivery lost with the unflushed tail of the
//! log is delivered again, once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::id::{Source, TimerId};
use super::levels::Levels;
use super::progress::Progress;
use super::redeliver::redeliver;
use super::wake::Wake;
use crate::dispatch::queue_index::QueueEntry;
use crate::error::{Error, Result};
use crate::message::tags::SCHEDULE_TOPIC;
use crate::message::timer::{self, TIMER_TOPIC};
use crate::message::RecordView;
use crate::service::Service;
use crate::store::{Inner, Store};
use crate::util::clock::Clock;
use crate::util::kill_point::kill_point;

/// Longest sleep: a wall-clock jump is noticed within it.
const MAX_NAP: Duration = Duration::from_secs(10);
/// Back-off after a failed re-put.
const RETRY_NAP: Duration = Duration::from_secs(1);
/// Longest single wait for an announced record's dispatch (between looks at the stop).
const ARRIVAL_WAIT: Duration = Duration::from_millis(50);
/// Queue units read at a time.
const BATCH: usize = 1024;

/// See the module doc.
#[derive(Debug)]
pub(in crate::store) struct TimerService {
    clock: Clock,
    /// `config/timerProgress.json` (`None`: an in-memory store).
    path: Option<PathBuf>,
    file_mode: u32,
    persist_every: Duration,
    window_ms: i64,
    catchup_rate: u32,
    wake: Wake,
    store: OnceLock<Weak<Inner>>,
    state: Mutex<State>,
    /// Held while delivery is started, stopped or run by a caller: one at a time.
    hosting: Mutex<()>,
}

#[derive(Debug)]
struct State {
    progress: Progress,
    /// The delay levels' offsets and heads.
    levels: Levels,
    /// Recovery ran since this process began hosting.
    loaded: bool,
    cursor: u64,
    horizon: i64,
    /// (due, id) -> (commit-log offset, size) of the timers due by `horizon`.
    near: BTreeMap<(i64, u64), (u64, u32)>,
    near_ids: BTreeSet<u64>,
    /// (earliest due, lowest id) of the looked-at timers due after `horizon`.
    far: Option<(i64, u64)>,
    /// `progress` changed since it was last written.
    dirty: bool,
    last_persist: Instant,
    hosted_at: i64,
    catchup_sent: u64,
}

/// What one pass did.
#[derive(Debug, Default)]
struct Pass {
    delivered: usize,
    /// When the next pass has work.
    next: Option<i64>,
    failed: Option<Error>,
}

impl TimerService {
    /// A service for the store whose config directory is `config_dir`, reading its progress
    /// files.
    ///
    /// # Errors
    /// `ConfigFile` when `timerProgress.json` or `delayOffset.json` and its `.bak` do not
    /// decode; I/O failures.
    pub(in crate::store) fn new(
        config: &crate::config::StoreConfig,
        config_dir: Option<PathBuf>,
    ) -> Result<Self> {
        let path = config_dir.as_ref().map(|d| d.join(super::progress::FILE));
        let levels = Levels::new(config_dir)?;
        let progress = match &path {
            Some(p) => Progress::load(p)?,
            None => Progress::default(),
        };
        Ok(TimerService {
            clock: config.clock.clone(),
            path,
            file_mode: config.file_mode,
            persist_every: config.flush_interval,
            window_ms: i64::try_from(config.timer_window.as_millis()).unwrap_or(i64::MAX),
            catchup_rate: config.timer_catchup_rate,
            wake: Wake::default(),
            store: OnceLock::new(),
            state: Mutex::new(State {
                progress,
                levels,
                loaded: false,
                cursor: 0,
                horizon: i64::MIN,
                near: BTreeMap::new(),
                near_ids: BTreeSet::new(),
                far: None,
                dirty: false,
                last_persist: Instant::now(),
                hosted_at: 0,
                catchup_sent: 0,
            }),
            hosting: Mutex::new(()),
        })
    }

    /// While the thread sleeps with nothing announced: the time it sleeps until.
    pub(in crate::store) fn sleeping_until(&self) -> Option<i64> {
        self.wake.sleeping_until()
    }

    /// Shared writers: the thread sleeps on the writer mapping's timer wake word, which the
    /// puts of every process announce on (wake.rs).
    pub(in crate::store) fn share(&self, shm: Arc<crate::shared::WriterShm>) {
        self.wake.share(shm);
    }

    /// A put appended a timer or delayed message: the thread looks at its sources, in
    /// whichever process it runs.
    pub(in crate::store) fn announce(&self) {
        self.wake.arrival();
    }

    /// The leader of shared writers hosts delivery (leader.rs): called when this process
    /// takes the role. A start that fails (the store closing, a progress file unreadable)
    /// leaves delivery to the next leader or the next open.
    pub(in crate::store) fn host(&self) {
        if let Some(inner) = self.store.get().and_then(Weak::upgrade) {
            let _ = Store::handle(inner).start_delivery();
        }
    }

    /// Serialises starting, stopping and caller-run passes (store/schedule/mod.rs).
    pub(in crate::store) fn hosting(&self) -> MutexGuard<'_, ()> {
        self.hosting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The level -> next offset table of `delayOffset.json`, as it stands here.
    pub(in crate::store) fn delay_offsets(&self) -> BTreeMap<u32, u64> {
        self.lock().levels.table()
    }

    /// Binds the service to its store (once, before it starts).
    pub(in crate::store) fn attach(&self, store: Weak<Inner>) {
        let _ = self.store.set(store);
    }

    /// Makes the service ready to start hosting: both progress files read again unless this
    /// process holds newer ones (another process may have delivered since), the stop undone,
    /// and recovery (the log scanned for deliveries) left to the first pass.
    ///
    /// # Errors
    /// As `new`.
    pub(in crate::store) fn prepare_start(&self) -> Result<()> {
        let mut state = self.lock();
        if let (false, Some(path)) = (state.dirty, &self.path) {
            state.progress = Progress::load(path)?;
        }
        state.levels.reload()?;
        state.loaded = false;
        drop(state);
        self.wake.rearm();
        Ok(())
    }

    /// After the thread stopped: makes the log durable and writes both progress files, so
    /// that the next host goes on from here.
    ///
    /// # Errors
    /// The flush's or the write's failure.
    pub(in crate::store) fn persist_stopped(&self, store: &Store) -> Result<()> {
        let mut state = self.lock();
        self.persist_durable(store, &mut state)
    }

    /// Writes the progress files if they changed, for a close that has just flushed the whole
    /// log.
    ///
    /// # Errors
    /// I/O failures.
    pub(in crate::store) fn persist_after_flush(
        &self,
        log: &crate::commit_log::CommitLog,
    ) -> Result<()> {
        let mut state = self.lock();
        self.persist(log.max_offset(), &mut state)
    }

    /// Delivers every timer and delayed message due now, makes the log durable and writes the
    /// progress files; returns how many this call delivered.
    ///
    /// # Errors
    /// The first failed read, re-put, flush or progress write.
    pub(in crate::store) fn deliver_due(&self, store: &Store) -> Result<usize> {
        // Read-your-writes for the caller: what it appended is indexed first.
        store.catch_up();
        let mut state = self.lock();
        let pass = self.pass(store, &mut state);
        let persisted = self.persist_durable(store, &mut state);
        if let Some(e) = pass.failed {
            return Err(e);
        }
        persisted?;
        Ok(pass.delivered)
    }

    /// Timers stored and not yet delivered, as far as this process knows (the log from the
    /// recorded floor, less the recorded deliveries).
    pub(in crate::store) fn pending(&self, store: &Store) -> u64 {
        store.catch_up();
        let end = store
            .queue(TIMER_TOPIC, 0)
            .ok()
            .flatten()
            .map_or(0, |q| q.max_offset());
        let state = self.lock();
        let p = &state.progress;
        let done: u64 = p
            .delivered
            .iter()
            .map(|(f, t)| t.min(&end).saturating_sub(*f))
            .sum();
        end.saturating_sub(p.floor).saturating_sub(done)
    }

    /// The commit-log offset of the oldest timer or delayed message not known delivered
    /// (`u64::MAX`: none): retention keeps every file from the one holding it.
    pub(in crate::store) fn pending_floor(&self) -> u64 {
        let Some(inner) = self.store.get().and_then(Weak::upgrade) else {
            return u64::MAX;
        };
        let store = Store::handle(inner);
        let state = self.lock();
        let levels = state.levels.pending_floor(&store);
        let floor = state.progress.floor;
        drop(state);
        let log = match store.queue(TIMER_TOPIC, 0) {
            Err(_) => return 0,
            Ok(None) => u64::MAX,
            Ok(Some(q)) if floor >= q.max_offset() => u64::MAX,
            // Unreadable now: keep everything rather than guess.
            Ok(Some(q)) => q.entry(floor.max(q.min_offset())).map_or(0, |e| e.offset),
        };
        log.min(levels)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Recovery for a new hosting: the log scanned from `commitLogOffset` for delivered ids
    /// of either source, the near tier emptied, the levels' heads read.
    fn recover(&self, store: &Store, state: &mut State) -> Result<()> {
        store.catch_up();
        let log = &store.inner.commit_log;
        let end = log.max_offset();
        // A delivered copy is appended after its source record: the scan starts no earlier
        // than the record of the first timer or delayed message not yet known delivered, and
        // there is none to do when none is pending (a store that never used them reads no
        // file here).
        let first_timer = store.queue(TIMER_TOPIC, 0).ok().flatten().and_then(|q| {
            let mut unit = Vec::with_capacity(1);
            q.entries(state.progress.floor.max(q.min_offset()), 1, &mut unit);
            unit.first().map(|&(_, e)| e.offset)
        });
        state.levels.refresh(store);
        let first_pending = [first_timer, state.levels.first_record()]
            .into_iter()
            .flatten()
            .min();
        let mut off = match first_pending {
            Some(record) => state.progress.log_offset.max(record).max(log.min_offset()),
            None => end,
        };
        while off < end {
            let read = log.read_record(off, |v: &RecordView<'_>| {
                // A stored timer or delayed record may carry a copied id: only a delivered
                // copy (in its real topic) counts.
                let stored = matches!(v.topic(), TIMER_TOPIC | SCHEDULE_TOPIC);
                let id = v
                    .property(timer::TIMER_ID)
                    .filter(|_| !stored)
                    .and_then(TimerId::parse);
                (v.bytes().len() as u64, id)
            });
            match read {
                Ok((size, id)) => {
                    match id.map(|i| (i.source, i.offset)) {
                        Some((Source::Log, o)) => {
                            state.progress.mark(o);
                            state.dirty = true;
                        }
                        Some((Source::Level(l), o)) => state.levels.mark(l, o),
                        None => {}
                    }
                    off += size.max(1);
                }
                // The blank at the end of a file.
                Err(_) => off = log.roll_next_file(off),
            }
        }
        let now = self.clock.now_ms();
        state.cursor = state.progress.floor;
        state.horizon = now.saturating_add(self.window_ms);
        state.near.clear();
        state.near_ids.clear();
        state.far = None;
        state.levels.refresh(store);
        state.hosted_at = now;
        state.catchup_sent = 0;
        state.loaded = true;
        Ok(())
    }

    /// Reads the timer queue's units in `[from, to)` (`to = None`: to its end), putting each
    /// timer not delivered and not in `near` into `near` (due by `horizon`) or `far`; returns
    /// the offset after the last unit read.
    fn load(&self, store: &Store, state: &mut State, from: u64, to: Option<u64>) -> u64 {
        let Some(q) = store.queue(TIMER_TOPIC, 0).ok().flatten() else {
            return from;
        };
        let end = to.unwrap_or_else(|| q.max_offset());
        let mut at = from.max(q.min_offset());
        let mut units: Vec<(u64, QueueEntry)> = Vec::with_capacity(BATCH);
        while at < end {
            units.clear();
            q.entries(
                at,
                BATCH.min(usize::try_from(end - at).unwrap_or(BATCH)),
                &mut units,
            );
            let Some(&(last, _)) = units.last() else {
                break;
            };
            for &(id, e) in &units {
                if !e.has_record()
                    || state.progress.is_delivered(id)
                    || state.near_ids.contains(&id)
                {
                    continue;
                }
                let due = e.tags_code;
                if due <= state.horizon {
                    state.near.insert((due, id), (e.offset, e.size));
                    state.near_ids.insert(id);
                } else {
                    let (d, i) = state.far.unwrap_or((i64::MAX, u64::MAX));
                    state.far = Some((d.min(due), i.min(id)));
                }
            }
            at = last + 1;
        }
        at
    }

    /// One pass: recovery if due, new units read, the near tier refilled when the far timers
    /// come within half a window, the levels' heads read, then every due timer and delayed
    /// message delivered, earliest first.
    fn pass(&self, store: &Store, state: &mut State) -> Pass {
        let mut pass = Pass::default();
        if !state.loaded {
            if let Err(e) = self.recover(store, state) {
                pass.failed = Some(e);
                pass.next = Some(self.clock.now_ms());
                return pass;
            }
        }
        // No dispatch from here: the reput thread indexes (and retries a failing store on its
        // own schedule), and an announced timer not yet indexed is waited for (`run`).
        let cursor = state.cursor;
        state.cursor = self.load(store, state, cursor, None);
        let now = self.clock.now_ms();
        let half = self.window_ms / 2;
        if state
            .far
            .is_some_and(|(d, _)| d.saturating_sub(half) <= now)
        {
            state.horizon = now.saturating_add(self.window_ms);
            state.far = None;
            let (floor, cursor) = (state.progress.floor, state.cursor);
            self.load(store, state, floor, Some(cursor));
        }
        state.levels.refresh(store);
        while let Some((due, id, record)) = next_due(state) {
            let now = self.clock.now_ms();
            if due > now {
                break;
            }
            if let Some(wait_until) = self.catchup_wait(state, due, now) {
                pass.next = Some(wait_until);
                break;
            }
            match redeliver(store, record, id, now) {
                Ok(Some(at)) if at > now => {
                    // The record says later than its unit: wait for the record.
                    match id.source {
                        Source::Log => {
                            state.near.remove(&(due, id.offset));
                            state.near.insert((at, id.offset), (record, 0));
                        }
                        Source::Level(l) => state.levels.postpone(l, at),
                    }
                    continue;
                }
                Ok(_) => {
                    match id.source {
                        Source::Log => kill_point!("timer.delivered_unrecorded"),
                        Source::Level(_) => kill_point!("schedule.delivered_unrecorded"),
                    }
                    if due < state.hosted_at {
                        state.catchup_sent += 1;
                    }
                    pass.delivered += 1;
                }
                Err(e) => {
                    pass.failed = Some(e);
                    pass.next = Some(now.saturating_add(RETRY_NAP.as_millis() as i64));
                    break;
                }
            }
            match id.source {
                Source::Log => {
                    state.near.remove(&(due, id.offset));
                    state.near_ids.remove(&id.offset);
                    state.progress.mark(id.offset);
                    state.dirty = true;
                }
                Source::Level(l) => state.levels.advance(store, l, id.offset),
            }
        }
        let floor = [
            state.near_ids.first().copied(),
            state.far.map(|(_, i)| i),
            Some(state.cursor),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(state.cursor);
        if floor > state.progress.floor {
            state.progress.raise_floor(floor);
            state.dirty = true;
        }
        let candidates = [
            next_due(state).map(|(d, _, _)| d),
            state.far.map(|(d, _)| d.saturating_sub(half)),
            pass.next,
        ];
        pass.next = candidates.into_iter().flatten().min();
        pass
    }

    /// When a timer overdue since before this hosting must wait for the catch-up rate: the
    /// time its slot comes; `None` when it may go now.
    fn catchup_wait(&self, state: &State, due: i64, now: i64) -> Option<i64> {
        if self.catchup_rate == 0 || due >= state.hosted_at {
            return None;
        }
        let rate = i64::from(self.catchup_rate);
        // `rate` in the first second, `rate` more each second after.
        let allowed =
            rate.saturating_add(now.saturating_sub(state.hosted_at).saturating_mul(rate) / 1000);
        let sent = i64::try_from(state.catchup_sent).unwrap_or(i64::MAX);
        if sent < allowed {
            return None;
        }
        let ms = (sent + 1 - rate)
            .saturating_mul(1000)
            .saturating_add(rate - 1)
            / rate;
        Some(state.hosted_at.saturating_add(ms).max(now + 1))
    }

    /// Makes the log durable through every delivery, then writes the progress.
    fn persist_durable(&self, store: &Store, state: &mut State) -> Result<()> {
        if !(state.dirty || state.levels.dirty) || self.path.is_none() {
            return Ok(());
        }
        store.flush()?;
        self.persist(store.inner.commit_log.max_offset(), state)
    }

    /// Writes both progress files, the log durable through `log_end` (every delivery so far):
    /// the levels' offsets first, then the timer progress whose `commitLogOffset` says that
    /// both files record every delivery before `log_end`.
    fn persist(&self, log_end: u64, state: &mut State) -> Result<()> {
        let levels_dirty = state.levels.dirty;
        state.levels.persist(self.clock.now_ms(), self.file_mode)?;
        if let (true, Some(path)) = (state.dirty || levels_dirty, &self.path) {
            state.progress.log_offset = log_end;
            state
                .progress
                .store(path, self.clock.now_ms(), self.file_mode)?;
        }
        state.dirty = false;
        state.last_persist = Instant::now();
        Ok(())
    }

    /// One turn of the thread; returns how long to nap and, when an arrival was announced
    /// whose record is not yet dispatched here, the log end it lies below.
    fn turn(&self, store: &Store) -> (Duration, Option<u64>) {
        let announced = self.wake.take_announced().then(|| {
            // Shared writers: what the other processes appended, followed here.
            store.catch_up();
            store.inner.commit_log.max_offset()
        });
        let mut state = self.lock();
        let pass = self.pass(store, &mut state);
        if state.last_persist.elapsed() >= self.persist_every {
            // Retried at the next turn on failure; the progress stays in memory.
            let _ = self.persist_durable(store, &mut state);
        }
        let dirty = state.dirty || state.levels.dirty;
        drop(state);
        let now = self.clock.now_ms();
        let mut nap = match pass.next {
            Some(at) => Duration::from_millis(u64::try_from(at.saturating_sub(now)).unwrap_or(0)),
            None => MAX_NAP,
        };
        nap = nap.min(MAX_NAP);
        if dirty {
            nap = nap.min(self.persist_every);
        }
        (nap, announced.filter(|&end| dispatched(store) < end))
    }

    /// Every source queue with its end: the timer log's, then each level's.
    fn source_ends(&self, store: &Store, state: &State) -> Vec<(&'static str, u32, u64)> {
        let log_end = store
            .queue(TIMER_TOPIC, 0)
            .ok()
            .flatten()
            .map_or(0, |q| q.max_offset());
        let mut ends = vec![(TIMER_TOPIC, 0, log_end)];
        ends.extend(
            state
                .levels
                .ends(store)
                .into_iter()
                .map(|(q, e)| (SCHEDULE_TOPIC, q, e)),
        );
        ends
    }
}

/// Where this process's dispatch is (`u64::MAX` without one).
fn dispatched(store: &Store) -> u64 {
    store
        .inner
        .reput
        .as_ref()
        .map_or(u64::MAX, |r| r.dispatched_offset())
}

/// The earliest of the near tier's first timer and the levels' heads: (due, id, commit-log
/// offset of its record).
fn next_due(state: &State) -> Option<(i64, TimerId, u64)> {
    let log = state
        .near
        .first_key_value()
        .map(|(&(due, id), &(record, _))| (due, TimerId::log(id), record));
    let level = state
        .levels
        .earliest()
        .map(|(l, h)| (h.due, TimerId::level(l, h.offset), h.record));
    [log, level]
        .into_iter()
        .flatten()
        .min_by_key(|&(due, _, _)| due)
}

impl Service for TimerService {
    fn name(&self) -> &'static str {
        "timers"
    }

    fn run(&self) {
        loop {
            let Some(inner) = self.store.get().and_then(Weak::upgrade) else {
                return;
            };
            let store = Store::handle(inner);
            if store.is_closed() {
                return;
            }
            let (nap, behind) = self.turn(&store);
            if let Some(end) = behind {
                // An announced record appended but not yet dispatched here (a sync put not
                // yet durable): wait for its dispatch, as long as the nap at most.
                let until = Instant::now() + nap;
                while dispatched(&store) < end && !self.wake.stopping() && !store.is_closed() {
                    let Some(left) = until.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    let ends = self.source_ends(&store, &self.lock());
                    if store
                        .wait_for_messages(&ends, Some(left.min(ARRIVAL_WAIT)))
                        .is_err()
                    {
                        break;
                    }
                }
                continue;
            }
            drop(store);
            let until = self
                .clock
                .now_ms()
                .saturating_add(i64::try_from(nap.as_millis()).unwrap_or(i64::MAX));
            if !self.wake.nap(nap, until) {
                return;
            }
        }
    }

    fn stop(&self) {
        self.wake.stop();
    }
}
