//! The timer engine: delivers timer messages and delayed (delay-level) messages when due, one
//! thread for both. Its sources: the timer log, with its near tier (tiers.rs), and each delay
//! level's queue of `SCHEDULE_TOPIC_XXXX`, already in due order, of which only the head is read
//! (levels.rs). The progress of both is `config/timerProgress.json` (progress.rs), the levels'
//! offsets mirrored in `config/delayOffset.json`, RocketMQ's file. The thread merges the
//! sources: it delivers the earliest due of the near tier's first timer, the levels' heads and
//! the moved level messages, while it is due.
//!
//! Invariants
//! - A timer's id (`message::timer_id`) is its source queue and offset there. The timer log's
//!   tiers hold every pending timer-log timer they looked at (tiers.rs). A level's head goes in
//!   queue order; a moved level message (a reschedule) waits in the progress's `level_moved`
//!   (levels.rs).
//! - Nothing is delivered before the clock reads its delivery time: the time a reschedule gave
//!   it, else the one its record states, read at the re-put (redeliver.rs), whatever the queue
//!   unit says.
//! - A pass runs under the timer gate (gate.rs), for both sources, and before delivering
//!   anything applies every cancel and reschedule record appended to the cancel queue since
//!   its last look (`sync_changes`): a cancelled timer is never re-put, a rescheduled one goes
//!   at its new time.
//! - A timer is recorded as done (in memory) only after its re-put returned, and the progress
//!   files are written only after a flush that covers every delivery they record:
//!   `timerProgress.json` first (both sources), whose `commitLogOffset` is the log's end at that
//!   write or the end through which the cancel queue was applied (`synced_to`), whichever is
//!   lower, so every delivery, cancel and reschedule it does not record lies after it; then its
//!   mirror `delayOffset.json`, read first and merged (levels.rs).
//! - Before delivering anything, a start reads both files afresh (`prepare_start`) and the
//!   commit log from `commitLogOffset` to the end (`recover`, scan.rs), applying every
//!   delivered copy (`MQLITE_TIMER_ID`) and change record it finds, of either source: a timer
//!   or delayed message delivered or cancelled before a crash is not delivered (again).
//! - The thread sleeps until the earliest of: the first near timer's time, the first level
//!   head's or moved level message's time, the time the near tier must be refilled (the
//!   earliest far timer less half a window), the next catch-up slot, or an arrival announced
//!   after its append (wake.rs: a put or a change record, of this process, or with shared
//!   writers of any process through the writer mapping). An arrival makes the thread follow
//!   the log to its end and, when that end is not yet dispatched here, wait for its dispatch
//!   (at most its nap). The longest sleep is `MAX_NAP`, a safety net for wall-clock jumps,
//!   not a poll for work.
//! - Timers and delayed messages already overdue when this process began hosting are
//!   delivered at most `timer_catchup_rate` per second together (counted on the store's
//!   clock); the others are not limited.
//! - Hosting: one process at a time delivers (`Store::start_delivery`; with shared writers
//!   the leader, `host`); starts, stops and caller-run passes are serialised (`hosting`).
//!
//! Crash behaviour: exactly once for a crash of the process (kill points
//! `timer.delivered_unrecorded`, `schedule.delivered_unrecorded`): the copy is in the log and
//! recovery finds its id; a cancel or reschedule record is found the same way (control.rs). A
//! crash between the two progress files (`timer.progress_written`) leaves the mirror behind,
//! which the next read's merge ignores. After a power cut, a delivery lost with the unflushed
//! tail of the log is delivered again, once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::gate::Gate;
use super::levels::{self, Levels};
use super::progress::Progress;
use super::redeliver::redeliver;
use super::scan::{self, scan_log};
use super::tiers::Tiers;
use super::wake::Wake;
use crate::dispatch::queue_index::QueueEntry;
use crate::error::{Error, Result};
use crate::message::tags::SCHEDULE_TOPIC;
use crate::message::timer::TIMER_TOPIC;
use crate::message::timer_id::{Change, Source, TimerId, CANCEL_QUEUE};
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
/// Cancel-queue units read at a time.
const BATCH: usize = 1024;
/// How far the log may run ahead of the progress file's `commitLogOffset` while timers are
/// pending before the file is written again: a cancel in another process reads the log from
/// there (control.rs), so this bounds what it reads.
const RESCAN_LIMIT: u64 = 16 << 20;

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
    /// Taken before `state` by every delivery pass, cancel and reschedule (gate.rs).
    gate: Gate,
    state: Mutex<State>,
    /// Held while delivery is started, stopped or run by a caller: one at a time.
    hosting: Mutex<()>,
}

#[derive(Debug)]
struct State {
    /// What is done, of both sources (the levels' offsets included).
    progress: Progress,
    /// The delay levels' heads and their offsets file.
    levels: Levels,
    /// Recovery ran since this process began hosting.
    loaded: bool,
    /// The timer log's near and far tiers.
    log: Tiers,
    /// The cancel queue's units below this offset have been applied (or were covered by the
    /// restart scan).
    cancel_cursor: u64,
    /// Every cancel and reschedule record below this commit-log offset is in `progress`.
    synced_to: u64,
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
        let gate = Gate::new(
            config_dir.as_deref().and_then(std::path::Path::parent),
            config.shared_writers,
            config.file_mode,
            crate::lock::TIMER_BYTE,
        )?;
        let path = config_dir.as_ref().map(|d| d.join(super::progress::FILE));
        // delayOffset.json first (levels.rs).
        let levels = Levels::new(config_dir)?;
        let mut progress = match &path {
            Some(p) => Progress::load(p)?,
            None => Progress::default(),
        };
        levels.merge_into(&mut progress);
        Ok(TimerService {
            clock: config.clock.clone(),
            path,
            file_mode: config.file_mode,
            persist_every: config.flush_interval,
            window_ms: i64::try_from(config.timer_window.as_millis()).unwrap_or(i64::MAX),
            catchup_rate: config.timer_catchup_rate,
            wake: Wake::default(),
            store: OnceLock::new(),
            gate,
            state: Mutex::new(State {
                progress,
                levels,
                loaded: false,
                log: Tiers::default(),
                cancel_cursor: 0,
                synced_to: 0,
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

    /// The gate every change of a timer's state is made under.
    pub(in crate::store) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The progress this process knows best, of both sources, for a caller holding the gate:
    /// the host's own when this process hosts, else the files (the host's last writes), else
    /// the one read at open (an in-memory store).
    ///
    /// # Errors
    /// `ConfigFile` when a file and its `.bak` do not decode; I/O failures.
    pub(super) fn known_progress(&self) -> Result<Progress> {
        let state = self.lock();
        match (&self.path, state.loaded) {
            (Some(path), false) => {
                // delayOffset.json first (levels.rs).
                let table = match path.parent() {
                    Some(dir) => levels::load_offsets(dir)?,
                    None => BTreeMap::new(),
                };
                let mut p = Progress::load(path)?;
                p.merge_levels(&table);
                Ok(p)
            }
            _ => Ok(state.progress.clone()),
        }
    }

    /// A caller holding the gate appended change records: when this process hosts, they are
    /// applied now; the thread that hosts, in whichever process, is woken (a reschedule may
    /// have made a timer due earlier).
    pub(super) fn changed(&self, store: &Store) {
        let mut state = self.lock();
        if state.loaded {
            // A failure leaves them to the next pass, which applies them before delivering.
            let _ = self.sync_changes(store, &mut state);
        }
        drop(state);
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
        self.lock().progress.levels.clone()
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
        let mut guard = self.lock();
        let state = &mut *guard;
        if let (false, false, Some(path)) =
            (state.dirty, state.levels.dirty(&state.progress), &self.path)
        {
            // delayOffset.json first (levels.rs).
            state.levels.reload()?;
            state.progress = Progress::load(path)?;
            state.levels.merge_into(&mut state.progress);
        }
        state.loaded = false;
        drop(guard);
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
        let end = log.max_offset().min(state.synced_to);
        self.persist(end, &mut state)
    }

    /// Delivers every timer and delayed message due now, makes the log durable and writes the
    /// progress files; returns how many this call delivered.
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

    /// Timers of both sources stored and neither delivered nor cancelled, as far as this
    /// process knows (the timer log from the recorded floor less the recorded done ones; each
    /// level's queue from its offset less its done ones, plus its moved ones).
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
        let log = end.saturating_sub(p.floor).saturating_sub(done);
        log + levels::pending(store, p)
    }

    /// The commit-log offset of the oldest timer or delayed message not known delivered
    /// (`u64::MAX`: none): retention keeps every file from the one holding it.
    pub(in crate::store) fn pending_floor(&self) -> u64 {
        let Some(inner) = self.store.get().and_then(Weak::upgrade) else {
            return u64::MAX;
        };
        let store = Store::handle(inner);
        let state = self.lock();
        let levels = levels::pending_floor(&store, &state.progress);
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
    /// and change records of either source (scan.rs), the near tier emptied, the levels'
    /// heads read.
    fn recover(&self, store: &Store, state: &mut State) -> Result<()> {
        // Before the log's end: every cancel unit below it has its record below the end, which
        // the scan covers.
        let cancel_units = store
            .queue(TIMER_TOPIC, CANCEL_QUEUE)
            .ok()
            .flatten()
            .map_or(0, |q| q.max_offset());
        let end = scan::caught_up(store)?;
        let log = &store.inner.commit_log;
        // A delivered copy or change record is appended after its source record: the scan
        // starts no earlier than the record of the first timer or delayed message not yet known
        // done, and there is none to do when none is pending (a store that never used them
        // reads no file here).
        let first_timer = first_log_record(store, state.progress.floor);
        let first_level = levels::pending_floor(store, &state.progress);
        let first_pending = [
            first_timer,
            (first_level != u64::MAX).then_some(first_level),
        ]
        .into_iter()
        .flatten()
        .min();
        let from = match first_pending {
            Some(record) => state.progress.log_offset.max(record).max(log.min_offset()),
            None => end,
        };
        if scan_log(store, from, end, &mut state.progress) {
            state.dirty = true;
        }
        let now = self.clock.now_ms();
        state
            .log
            .reset(state.progress.floor, now.saturating_add(self.window_ms));
        state.cancel_cursor = cancel_units;
        state.synced_to = end;
        state.levels.refresh(store, &mut state.progress);
        state.hosted_at = now;
        state.catchup_sent = 0;
        state.loaded = true;
        Ok(())
    }

    /// One pass (the caller holds the gate): recovery if due, the change records applied, new
    /// units read, the near tier refilled when the far timers come within half a window, the
    /// levels' heads read, then every due timer and delayed message delivered, earliest first.
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
        state.log.follow(store, &state.progress);
        let now = self.clock.now_ms();
        let half = self.window_ms / 2;
        state
            .log
            .refill(store, &state.progress, now, self.window_ms);
        state.levels.refresh(store, &mut state.progress);
        while let Some((due, id, record)) = next_due(store, state) {
            let now = self.clock.now_ms();
            if due > now {
                break;
            }
            if let Some(wait_until) = self.catchup_wait(state, due, now) {
                pass.next = Some(wait_until);
                break;
            }
            let moved = state.progress.moved(id);
            match redeliver(store, record, id, now, moved) {
                Ok(Some(at)) if at > now => {
                    // The record says later than its unit: wait for the record.
                    match id.source {
                        Source::Log => state.log.postpone(due, id.offset, at),
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
            state.progress.delivered(id);
            match id.source {
                Source::Log => {
                    state.log.remove(due, id.offset);
                    state.dirty = true;
                }
                Source::Level(l) => {
                    state.dirty |= moved.is_some();
                    state.levels.refresh_level(store, &mut state.progress, l);
                }
            }
        }
        let floor = state.log.floor();
        if floor > state.progress.floor {
            state.progress.raise_floor(floor);
            state.dirty = true;
        }
        let candidates = [
            next_due(store, state).map(|(d, _, _)| d),
            state.log.refill_at(half),
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
    /// A change record that cannot be read (nothing after it is applied).
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
                            self.apply_live(store, state, c);
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

    /// Applies one change to the progress and to the tiers (a level's head is read again).
    fn apply_live(&self, store: &Store, state: &mut State, change: Change) {
        let id = change.target();
        if !scan::apply(&mut state.progress, change) {
            return;
        }
        state.dirty = true;
        match id.source {
            Source::Log => state.log.apply(id.offset, change),
            Source::Level(l) => state.levels.refresh_level(store, &mut state.progress, l),
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
        let dirty = state.loaded && (state.dirty || state.levels.dirty(&state.progress));
        if !dirty || self.path.is_none() {
            return Ok(());
        }
        store.flush()?;
        self.persist(store.inner.commit_log.max_offset(), state)
    }

    /// Writes both progress files, the log durable through `log_end` (every delivery so far):
    /// the timer progress (of both sources) whose `commitLogOffset` says that it records every
    /// delivery, cancel and reschedule before it, then its mirror `delayOffset.json`.
    fn persist(&self, log_end: u64, state: &mut State) -> Result<()> {
        if !state.loaded {
            // Never hosted since the open: nothing of its own to record (the offsets merged at
            // open are the host's to write).
            return Ok(());
        }
        let levels_dirty = state.levels.dirty(&state.progress);
        if let (true, Some(path)) = (state.dirty || levels_dirty, &self.path) {
            // Changes of other processes are in `progress` only below `synced_to`.
            state.progress.log_offset = log_end.min(state.synced_to);
            state
                .progress
                .store(path, self.clock.now_ms(), self.file_mode)?;
        }
        state.dirty = false;
        if levels_dirty {
            kill_point!("timer.progress_written");
        }
        state
            .levels
            .persist(&state.progress, self.clock.now_ms(), self.file_mode)?;
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
        let Ok(gate) = self.gate.take() else {
            return (RETRY_NAP, None);
        };
        let mut state = self.lock();
        let pass = self.pass(store, &mut state);
        drop(gate);
        if state.log.cursor > state.progress.floor
            && store.inner.commit_log.max_offset() > state.progress.log_offset + RESCAN_LIMIT
        {
            state.dirty = true;
        }
        if state.last_persist.elapsed() >= self.persist_every {
            // Retried at the next turn on failure; the progress stays in memory.
            let _ = self.persist_durable(store, &mut state);
        }
        let dirty = state.dirty || state.levels.dirty(&state.progress);
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
}

/// Every source queue with its end: the timer log's, its cancel queue's, then each level's.
fn source_ends(store: &Store) -> Vec<(&'static str, u32, u64)> {
    let end = |q| {
        store
            .queue(TIMER_TOPIC, q)
            .ok()
            .flatten()
            .map_or(0, |q| q.max_offset())
    };
    let mut ends = vec![
        (TIMER_TOPIC, 0, end(0)),
        (TIMER_TOPIC, CANCEL_QUEUE, end(CANCEL_QUEUE)),
    ];
    ends.extend(
        levels::ends(store)
            .into_iter()
            .map(|(q, e)| (SCHEDULE_TOPIC, q, e)),
    );
    ends
}

/// The commit-log offset of the first timer record at or above timer-log offset `floor`.
pub(super) fn first_log_record(store: &Store, floor: u64) -> Option<u64> {
    let q = store.queue(TIMER_TOPIC, 0).ok().flatten()?;
    let mut unit = Vec::with_capacity(1);
    q.entries(floor.max(q.min_offset()), 1, &mut unit);
    unit.first().map(|&(_, e)| e.offset)
}

/// Where this process's dispatch is (`u64::MAX` without one).
fn dispatched(store: &Store) -> u64 {
    store
        .inner
        .reput
        .as_ref()
        .map_or(u64::MAX, |r| r.dispatched_offset())
}

/// The earliest of the near tier's first timer, the levels' heads and the moved level
/// messages: (due, id, commit-log offset of its record).
fn next_due(store: &Store, state: &State) -> Option<(i64, TimerId, u64)> {
    let log = state
        .log
        .first()
        .map(|(due, id, record)| (due, TimerId::log(id), record));
    let level = state
        .levels
        .earliest()
        .map(|(l, h)| (h.due, TimerId::level(l, h.offset), h.record));
    // Moved level messages are few (each is a caller's reschedule): all of them are looked at.
    let moved = state
        .progress
        .level_moved
        .iter()
        .filter_map(|(&(l, o), &due)| {
            let q = store.queue(SCHEDULE_TOPIC, l - 1).ok().flatten()?;
            let e = q.entry(o).filter(QueueEntry::has_record)?;
            Some((due, TimerId::level(l, o), e.offset))
        })
        .min_by_key(|&(due, _, _)| due);
    [log, level, moved]
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
                    let ends = source_ends(&store);
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
