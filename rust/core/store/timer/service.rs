//! The timer service: delivers timer messages when due. Two tiers: the durable timer log is
//! the consume queue of `rmq_sys_wheel_timer` (one unit per timer: commit-log offset, size,
//! and the exact delivery time in the tags-code slot), fed by dispatch and rebuilt by recovery
//! like every consume queue; the near tier is an in-memory ordered map of the timers due
//! within `timer_window` of the clock, filled lazily from the log. Memory grows with the
//! timers due in the window, not with the number pending.
//!
//! Invariants
//! - A timer's id is its offset in the timer queue. Ids below `cursor` have been looked at:
//!   each is done (delivered or cancelled, `Progress`), in `near`, or due after `horizon`
//!   (then `far` holds the earliest such time and lowest such id). `horizon` only grows while
//!   the service hosts.
//! - A timer is delivered only once the clock reads its delivery time (its record's
//!   `TIMER_OUT_MS`, or the time a reschedule gave it), read at the re-put: never early,
//!   whatever the queue unit says.
//! - A pass runs under the timer gate (gate.rs) and, before delivering anything, applies every
//!   cancel and reschedule record appended to the cancel queue since its last look
//!   (`sync_changes`): a cancelled timer is never re-put, a rescheduled one goes at its new time.
//! - A timer is recorded as done (in memory) only after its re-put returned, and the progress
//!   file is written only after a flush that covers every delivery it records; its
//!   `commitLogOffset` is the log's end at that write or the end through which the cancel queue
//!   was applied (`synced_to`), whichever is lower, so every later delivery, cancel and
//!   reschedule lies after it.
//! - Before delivering anything, a start reads the progress file afresh and the commit log
//!   from its `commitLogOffset` to the end, marking every timer whose delivered copy
//!   (`MQLITE_TIMER_ID`) or cancel record it finds and applying every reschedule (scan.rs): a
//!   timer delivered or cancelled before a crash is not delivered (again).
//! - The thread sleeps until the earliest of: the first near timer's time, the time the
//!   near tier must be refilled (the earliest far timer less half a window), the next
//!   catch-up slot, or an arrival the put hook announces (hook.rs). A timer announced but not
//!   yet dispatched is waited for on the store's dispatch notification. The longest sleep is
//!   `MAX_NAP` (a safety net for wall-clock jumps, not a poll for work); shared writers sleep
//!   at most `SHARED_MAX_NAP`, as another process's hook announces nothing here.
//! - Timers already overdue when this process began hosting are delivered at most
//!   `timer_catchup_rate` per second (counted on the store's clock); the others are not
//!   limited.
//!
//! Crash behaviour: exactly once for a crash of the process (kill point
//! `timer.delivered_unrecorded`): the copy is in the log and recovery finds its id; a cancel
//! or reschedule record is found the same way (control.rs). After a power cut, a delivery lost
//! with the unflushed tail of the log is delivered again, once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::gate::Gate;
use super::progress::Progress;
use super::scan::{self, scan_log};
use crate::dispatch::queue_index::QueueEntry;
use crate::error::{Error, Result};
use crate::message::timer::{self, TIMER_TOPIC};
use crate::message::timer_id::{Change, CANCEL_QUEUE};
use crate::message::{properties, sysflag, MessageRef};
use crate::service::Service;
use crate::store::{Inner, PutRequest, Routing, Store};
use crate::util::clock::Clock;
use crate::util::kill_point::kill_point;

/// Longest sleep: a wall-clock jump is noticed within it.
const MAX_NAP: Duration = Duration::from_secs(10);
/// Longest sleep with shared writers (see the module doc).
const SHARED_MAX_NAP: Duration = Duration::from_millis(100);
/// Back-off after a failed re-put.
const RETRY_NAP: Duration = Duration::from_secs(1);
/// How long the thread waits for an announced timer to be dispatched.
const ARRIVAL_WAIT: Duration = Duration::from_millis(50);
/// Queue units read at a time.
const BATCH: usize = 1024;
/// How far the log may run ahead of the progress file's `commitLogOffset` while timers are
/// pending before the file is written again: a cancel in another process reads the log from
/// there (control.rs), so this bounds what it reads.
const RESCAN_LIMIT: u64 = 16 << 20;

/// Properties a delivered copy does not keep.
const CLEARED: [&str; 4] = [
    properties::REAL_TOPIC,
    properties::REAL_QID,
    timer::DELAY_SEC,
    timer::DELAY_MS,
];

/// What wakes the service thread: an arrival (with its due time) or a stop.
#[derive(Debug, Default)]
pub(in crate::store) struct Wake {
    state: Mutex<WakeState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct WakeState {
    stopping: bool,
    announced: Option<i64>,
    /// While the thread sleeps: the store-clock time it sleeps until.
    sleeping_until: Option<i64>,
}

impl Wake {
    /// A timer due at `due_ms` is being stored.
    pub(in crate::store) fn arrival(&self, due_ms: i64) {
        let mut s = self.lock();
        s.announced = Some(s.announced.map_or(due_ms, |a| a.min(due_ms)));
        drop(s);
        self.cv.notify_all();
    }

    fn stop(&self) {
        self.lock().stopping = true;
        self.cv.notify_all();
    }

    fn rearm(&self) {
        self.lock().stopping = false;
    }

    fn take_announced(&self) -> Option<i64> {
        self.lock().announced.take()
    }

    /// Sleeps for `nap` (until `until` by the store's clock) unless stopped or a timer is
    /// announced; false once stopped.
    fn nap(&self, nap: Duration, until: i64) -> bool {
        let mut s = self.lock();
        if s.announced.is_none() {
            s.sleeping_until = Some(until);
        }
        let (mut s, _) = self
            .cv
            .wait_timeout_while(s, nap, |s| !s.stopping && s.announced.is_none())
            .unwrap_or_else(|p| p.into_inner());
        s.sleeping_until = None;
        !s.stopping
    }

    fn lock(&self) -> MutexGuard<'_, WakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

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
    max_nap: Duration,
    wake: Arc<Wake>,
    store: OnceLock<Weak<Inner>>,
    /// Taken before `state` by every delivery, cancel and reschedule (gate.rs).
    gate: Gate,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    progress: Progress,
    /// Recovery ran since this process began hosting.
    loaded: bool,
    cursor: u64,
    horizon: i64,
    /// (due, id) -> (commit-log offset, size) of the timers due by `horizon`.
    near: BTreeMap<(i64, u64), (u64, u32)>,
    /// id -> due of the timers in `near`.
    near_ids: BTreeMap<u64, i64>,
    /// The cancel queue's units below this offset have been applied (or were covered by the
    /// restart scan).
    cancel_cursor: u64,
    /// Every cancel and reschedule record below this commit-log offset is in `progress`.
    synced_to: u64,
    /// (earliest due, lowest id) of the looked-at timers due after `horizon`.
    far: Option<(i64, u64)>,
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
    /// A service for the store whose config directory is `config_dir`, reading its progress.
    ///
    /// # Errors
    /// `ConfigFile` when `timerProgress.json` and its `.bak` do not decode; I/O failures.
    pub(in crate::store) fn new(
        config: &crate::config::StoreConfig,
        config_dir: Option<PathBuf>,
    ) -> Result<Self> {
        let gate = Gate::new(
            config_dir.as_deref().and_then(std::path::Path::parent),
            config.shared_writers,
            config.file_mode,
        )?;
        let path = config_dir.map(|d| d.join(super::progress::FILE));
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
            max_nap: if config.shared_writers {
                SHARED_MAX_NAP
            } else {
                MAX_NAP
            },
            wake: Arc::new(Wake::default()),
            store: OnceLock::new(),
            gate,
            state: Mutex::new(State {
                progress,
                loaded: false,
                cursor: 0,
                horizon: i64::MIN,
                near: BTreeMap::new(),
                near_ids: BTreeMap::new(),
                cancel_cursor: 0,
                synced_to: 0,
                far: None,
                dirty: false,
                last_persist: Instant::now(),
                hosted_at: 0,
                catchup_sent: 0,
            }),
        })
    }

    /// While the thread sleeps with nothing announced: the time it sleeps until.
    pub(in crate::store) fn sleeping_until(&self) -> Option<i64> {
        self.wake.lock().sleeping_until
    }

    /// The wake-up the put hook tells of arrivals.
    pub(in crate::store) fn wake(&self) -> Arc<Wake> {
        Arc::clone(&self.wake)
    }

    /// The gate every change of a timer's state is made under.
    pub(super) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The progress this process knows best, for a caller holding the gate: the host's own
    /// when this process hosts, else the file (the host's last write), else the one read at
    /// open (an in-memory store).
    ///
    /// # Errors
    /// `ConfigFile` when the file and its `.bak` do not decode; I/O failures.
    pub(super) fn known_progress(&self) -> Result<Progress> {
        let state = self.lock();
        match (&self.path, state.loaded) {
            (Some(path), false) => Progress::load(path),
            _ => Ok(state.progress.clone()),
        }
    }

    /// A caller holding the gate appended change records: when this process hosts, they are
    /// applied now, and the thread is woken for `due_ms` (a reschedule's new time).
    pub(super) fn changed(&self, store: &Store, due_ms: Option<i64>) {
        let mut state = self.lock();
        if state.loaded {
            // A failure leaves them to the next pass, which applies them before delivering.
            let _ = self.sync_changes(store, &mut state);
        }
        drop(state);
        if let Some(at) = due_ms {
            self.wake.arrival(at);
        }
    }

    /// Binds the service to its store (once, before it starts).
    pub(in crate::store) fn attach(&self, store: Weak<Inner>) {
        let _ = self.store.set(store);
    }

    /// Makes the service ready to start hosting: the stop undone, and recovery (the progress
    /// file read again, the log scanned for deliveries) left to the first pass.
    pub(in crate::store) fn prepare_start(&self) {
        let mut state = self.lock();
        state.loaded = false;
        drop(state);
        self.wake.rearm();
    }

    /// After the thread stopped: makes the log durable and writes the progress.
    ///
    /// # Errors
    /// The flush's or the write's failure.
    pub(in crate::store) fn persist_stopped(&self, store: &Store) -> Result<()> {
        let mut state = self.lock();
        self.persist_durable(store, &mut state)
    }

    /// Writes the progress if it changed, for a close that has just flushed the whole log.
    ///
    /// # Errors
    /// I/O failures.
    pub(in crate::store) fn persist_after_flush(
        &self,
        log: &crate::commit_log::CommitLog,
    ) -> Result<()> {
        let mut state = self.lock();
        let end = log.max_offset().min(state.synced_to);
        self.persist(end, &mut state)
    }

    /// Delivers every timer due now, makes the log durable and writes the progress; returns
    /// how many this call delivered.
    ///
    /// # Errors
    /// The first failed read, re-put, flush or progress write.
    pub(in crate::store) fn deliver_due(&self, store: &Store) -> Result<usize> {
        // Read-your-writes for the caller: what it appended is indexed first.
        store.catch_up();
        let gate = self.gate.take()?;
        let mut state = self.lock();
        let pass = self.pass(store, &mut state);
        drop(gate);
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

    /// The commit-log offset of the oldest timer not known delivered (`u64::MAX`: none):
    /// retention keeps every file from the one holding it.
    pub(in crate::store) fn pending_floor(&self) -> u64 {
        let Some(inner) = self.store.get().and_then(Weak::upgrade) else {
            return u64::MAX;
        };
        let store = Store::handle(inner);
        let floor = self.lock().progress.floor;
        let Ok(q) = store.queue(TIMER_TOPIC, 0) else {
            return 0;
        };
        let Some(q) = q else {
            return u64::MAX;
        };
        if floor >= q.max_offset() {
            return u64::MAX;
        }
        // Unreadable now: keep everything rather than guess.
        q.entry(floor.max(q.min_offset())).map_or(0, |e| e.offset)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Recovery for a new hosting: the progress read again, the log scanned from its
    /// `commitLogOffset` for delivered ids, the near tier emptied.
    fn recover(&self, store: &Store, state: &mut State) -> Result<()> {
        if let (false, Some(path)) = (state.dirty, &self.path) {
            state.progress = Progress::load(path)?;
        }
        store.catch_up();
        // Before the log's end: every cancel unit below it has its record below the end, which
        // the scan covers.
        let cancel_units = store
            .queue(TIMER_TOPIC, CANCEL_QUEUE)
            .ok()
            .flatten()
            .map_or(0, |q| q.max_offset());
        let end = scan::caught_up(store)?;
        // A delivered copy is appended after its timer's record: the scan starts no earlier
        // than the record of the first timer not yet known delivered, and there is none to do
        // when no timer is pending (a store that never used timers reads no file here).
        let first_pending = store.queue(TIMER_TOPIC, 0).ok().flatten().and_then(|q| {
            let mut unit = Vec::with_capacity(1);
            q.entries(state.progress.floor.max(q.min_offset()), 1, &mut unit);
            unit.first().map(|&(_, e)| e.offset)
        });
        let from = match first_pending {
            Some(record) => state.progress.log_offset.max(record),
            None => end,
        };
        if scan_log(store, from, end, &mut state.progress) {
            state.dirty = true;
        }
        let now = self.clock.now_ms();
        state.cursor = state.progress.floor;
        state.cancel_cursor = cancel_units;
        state.synced_to = end;
        state.horizon = now.saturating_add(self.window_ms);
        state.near.clear();
        state.near_ids.clear();
        state.far = None;
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
                    || state.near_ids.contains_key(&id)
                {
                    continue;
                }
                let due = state
                    .progress
                    .rescheduled
                    .get(&id)
                    .copied()
                    .unwrap_or(e.tags_code);
                place(state, id, due, (e.offset, e.size));
            }
            at = last + 1;
        }
        at
    }

    /// One pass: recovery if due, new units read, the near tier refilled when the far timers
    /// come within half a window, then every due timer delivered.
    fn pass(&self, store: &Store, state: &mut State) -> Pass {
        let mut pass = Pass::default();
        if !state.loaded {
            if let Err(e) = self.recover(store, state) {
                pass.failed = Some(e);
                pass.next = Some(self.clock.now_ms());
                return pass;
            }
        }
        // Cancels and reschedules appended since the last look, before anything is delivered
        // (the caller holds the gate: none can be appended meanwhile).
        if let Err(e) = self.sync_changes(store, state) {
            pass.failed = Some(e);
            pass.next = Some(self.clock.now_ms());
            return pass;
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
        while let Some((&(due, id), &(offset, _))) = state.near.first_key_value() {
            let now = self.clock.now_ms();
            if due > now {
                break;
            }
            if let Some(wait_until) = self.catchup_wait(state, due, now) {
                pass.next = Some(wait_until);
                break;
            }
            let moved = state.progress.rescheduled.get(&id).copied();
            match redeliver(store, offset, id, now, moved) {
                Ok(Some(at)) if at > now => {
                    // The record says later than its unit: wait for the record.
                    state.near.remove(&(due, id));
                    state.near.insert((at, id), (offset, 0));
                    state.near_ids.insert(id, at);
                    continue;
                }
                Ok(_) => {
                    kill_point!("timer.delivered_unrecorded");
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
            state.near.remove(&(due, id));
            state.near_ids.remove(&id);
            state.progress.mark(id);
            state.dirty = true;
        }
        let floor = [
            state.near_ids.first_key_value().map(|(&i, _)| i),
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
            state.near.first_key_value().map(|(&(d, _), _)| d),
            state.far.map(|(d, _)| d.saturating_sub(half)),
            pass.next,
        ];
        pass.next = candidates.into_iter().flatten().min();
        pass
    }

    /// Applies the cancel queue's records appended since the last look (those below
    /// `synced_to` the restart scan applied): each cancelled timer recorded done and taken out
    /// of the tiers, each rescheduled one moved.
    ///
    /// # Errors
    /// A cancel record that cannot be read (nothing after it is applied).
    fn sync_changes(&self, store: &Store, state: &mut State) -> Result<()> {
        let end = scan::caught_up(store)?;
        if let Some(q) = store.queue(TIMER_TOPIC, CANCEL_QUEUE)? {
            let last = q.max_offset();
            let mut at = state.cancel_cursor.max(q.min_offset());
            let mut units: Vec<(u64, QueueEntry)> = Vec::with_capacity(BATCH);
            'units: while at < last {
                units.clear();
                q.entries(
                    at,
                    BATCH.min(usize::try_from(last - at).unwrap_or(BATCH)),
                    &mut units,
                );
                if units.is_empty() {
                    break;
                }
                for &(qo, e) in &units {
                    if e.has_record() && e.offset >= end {
                        // Appended after `end`: the next look applies it.
                        break 'units;
                    }
                    if e.has_record() && e.offset >= state.synced_to {
                        let change =
                            store.get_by_offset(e.offset, |v| Change::of(v.properties()))?;
                        if let Some(c) = change {
                            self.apply_live(state, c);
                        }
                    }
                    at = qo + 1;
                }
            }
            state.cancel_cursor = at;
        }
        state.synced_to = state.synced_to.max(end);
        Ok(())
    }

    /// Applies one change to the progress and to the tiers.
    fn apply_live(&self, state: &mut State, change: Change) {
        let id = change.target().offset;
        if !scan::apply(&mut state.progress, change) {
            return;
        }
        state.dirty = true;
        let unit = state
            .near_ids
            .remove(&id)
            .and_then(|due| state.near.remove(&(due, id)));
        if let Change::Reschedule(_, due) = change {
            match unit {
                Some(unit) => place(state, id, due, unit),
                // In the far tier (counted there; the refill reads its unit again), or not yet
                // looked at (`load` reads the new time).
                None if id < state.cursor => {
                    let (d, i) = state.far.unwrap_or((i64::MAX, u64::MAX));
                    state.far = Some((d.min(due), i.min(id)));
                }
                None => {}
            }
        }
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
        if !state.dirty || self.path.is_none() {
            return Ok(());
        }
        store.flush()?;
        self.persist(store.inner.commit_log.max_offset(), state)
    }

    /// Writes the progress, the log durable through `log_end` (every delivery so far).
    fn persist(&self, log_end: u64, state: &mut State) -> Result<()> {
        if let (true, Some(path)) = (state.dirty, &self.path) {
            // Cancels of other processes are in `progress` only below `synced_to`.
            state.progress.log_offset = log_end.min(state.synced_to);
            state
                .progress
                .store(path, self.clock.now_ms(), self.file_mode)?;
        }
        state.dirty = false;
        state.last_persist = Instant::now();
        Ok(())
    }

    /// One turn of the thread; returns how long to nap and whether an announced timer is
    /// still to be dispatched.
    fn turn(&self, store: &Store) -> (Duration, bool) {
        let announced = self.wake.take_announced();
        let Ok(gate) = self.gate.take() else {
            return (RETRY_NAP, false);
        };
        let mut state = self.lock();
        let before = state.cursor;
        let pass = self.pass(store, &mut state);
        drop(gate);
        if state.cursor > state.progress.floor
            && store.inner.commit_log.max_offset() > state.progress.log_offset + RESCAN_LIMIT
        {
            state.dirty = true;
        }
        if state.last_persist.elapsed() >= self.persist_every {
            // Retried at the next turn on failure; the progress stays in memory.
            let _ = self.persist_durable(store, &mut state);
        }
        let unseen = announced.is_some() && state.cursor == before;
        let dirty = state.dirty;
        drop(state);
        let now = self.clock.now_ms();
        let mut nap = match [pass.next, announced].into_iter().flatten().min() {
            Some(at) => Duration::from_millis(u64::try_from(at.saturating_sub(now)).unwrap_or(0)),
            None => self.max_nap,
        };
        nap = nap.min(self.max_nap);
        if dirty {
            nap = nap.min(self.persist_every);
        }
        (nap, unseen)
    }
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
            let (nap, unseen) = self.turn(&store);
            if unseen {
                // Announced before its append: wait for its dispatch (or the nap).
                let cursor = self.lock().cursor;
                let _ = store
                    .wait_for_messages(&[(TIMER_TOPIC, 0, cursor)], Some(nap.min(ARRIVAL_WAIT)));
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

/// Puts timer `id` (due `due`, its unit `unit`) in the near tier when due by the horizon,
/// else counts it in the far tier.
fn place(state: &mut State, id: u64, due: i64, unit: (u64, u32)) {
    if due <= state.horizon {
        state.near.insert((due, id), unit);
        state.near_ids.insert(id, due);
    } else {
        let (d, i) = state.far.unwrap_or((i64::MAX, u64::MAX));
        state.far = Some((d.min(due), i.min(id)));
    }
}

/// Re-puts the timer record at commit-log `offset` to its real topic and queue, carrying
/// `id`; `Ok(Some(t))` without putting when its delivery time `t` (`moved` when a reschedule
/// gave one, else the record's) is after `now`, `Ok(None)` after a put or for a record that
/// names no destination (passed over: it can go nowhere, and waiting for it would hold the
/// floor for good).
fn redeliver(
    store: &Store,
    offset: u64,
    id: u64,
    now: i64,
    moved: Option<i64>,
) -> Result<Option<i64>> {
    store.get_by_offset(offset, |v| {
        let props = v.properties();
        let at = moved.unwrap_or_else(|| timer::out_ms(props).unwrap_or(i64::MIN));
        if at > now {
            return Ok(Some(at));
        }
        let real = properties::get(props, properties::REAL_TOPIC);
        let qid = properties::get(props, properties::REAL_QID).and_then(|q| q.parse::<u32>().ok());
        let (Some(topic), Some(qid)) = (real, qid) else {
            return Ok(None);
        };
        let mut kept = Vec::with_capacity(props.len() + 64);
        for (k, val) in properties::iter(props) {
            let replaced = moved.is_some() && k == timer::OUT_MS;
            if !(CLEARED.contains(&k) || replaced) {
                properties::push(&mut kept, k, val);
            }
        }
        if let Some(at) = moved {
            properties::push(&mut kept, timer::OUT_MS, &at.to_string());
        }
        properties::push(
            &mut kept,
            timer::ENQUEUE_MS,
            &v.store_timestamp().to_string(),
        );
        properties::push(&mut kept, timer::DEQUEUE_MS, &now.to_string());
        properties::push(&mut kept, timer::TIMER_ID, &id.to_string());
        let msg = MessageRef {
            topic,
            queue_id: qid,
            body: v.body(),
            flag: v.flag(),
            properties: &kept,
            sysflag: v.sysflag() & !(sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6),
            born_timestamp: v.born_timestamp(),
            reconsume_times: v.reconsume_times(),
            prepared_transaction_offset: v.prepared_transaction_offset(),
        };
        match store.put_message(&msg, &PutRequest::new(Routing::Queue(qid))) {
            Ok(_) => Ok(None),
            // The topic shrank since: the queue the same key would pick now.
            Err(Error::InvalidQueue { .. }) => store
                .put_message(&msg, &PutRequest::new(Routing::Hash(qid)))
                .map(|_| None),
            Err(e) => Err(e),
        }
    })?
}
