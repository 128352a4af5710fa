//! The schedule service: delivers each delay level's due messages to their real topic and
//! records how far it got (offsets.rs). One per writable store, a service (service.rs) that is
//! started and stopped on its own (mod.rs: the process that hosts delivery runs it);
//! `Store::deliver_due` runs the same pass on the caller's thread (tests on a manual clock,
//! which wakes no thread).
//!
//! Invariants
//! - A level's queue is read from its delay offset in order; every message of a level has the
//!   same delay, so the first not yet due ends the level's pass. A message is due once the
//!   store's clock reads its delivery time (`message::tags::delivery_time`), never before.
//! - A message's offset moves past it only after its re-put returned: nothing is lost.
//! - The offsets are written to `delayOffset.json` only after the commit log is durable
//!   through every re-put they cover (a flush first), so after a power cut the file never
//!   claims a delivery the log lost. A pass writes them at most every `persist_every`, and a
//!   clean close writes them after its final flush.
//! - The thread sleeps until the earliest delivery time it knows of: the heads of the levels,
//!   and the due time the put hook announces for each message it stores. It looks again at
//!   least every `MAX_NAP` (a wall-clock jump forward, or an append that became readable only
//!   after its announced due time, is late by at most that), never polls faster, and backs off
//!   `MAX_NAP` after a failed re-put.
//! - The re-put keeps body, flag, SYSFLAG, born time, reconsume count, keys, tags and the
//!   caller's properties; it drops DELAY, MQLITE_DELAY_MS, TIMER_DELIVER_MS and
//!   TIMER_DELAY_SEC and keeps REAL_TOPIC and REAL_QID, as RocketMQ does. It goes to queue
//!   REAL_QID, or to `REAL_QID % queues` when the topic now has fewer queues. A schedule record
//!   that names no real topic (not written by the hook) is passed over; a re-put the store
//!   refuses (the topic gone and not auto-created, or not writable) holds its level back and is
//!   tried again, never dropped.
//!
//! - Hosting: a start reads `delayOffset.json` afresh (another process may have delivered
//!   since this one opened), and a stop makes the log durable and writes the offsets, so the
//!   next host goes on from where this one stopped. With shared writers the leader hosts it
//!   (`host`, leader.rs) and sleeps at most `SHARED_MAX_NAP`: the put hook of another process
//!   announces nothing here.
//!
//! Crash behaviour: at least once, never lost. A crash after a re-put and before the offsets
//! that cover it are written delivers that message again after the next open (kill point
//! `schedule.delivered_unrecorded`); a clean close delivers nothing twice.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::offsets::DelayOffsets;
use crate::error::{Error, Result};
use crate::message::{properties, sysflag, tags, MessageRef};
use crate::service::Service;
use crate::store::{Inner, PutRequest, Routing, Store, TagFilter};
use crate::util::clock::Clock;
use crate::util::kill_point::kill_point;

/// Longest sleep between two looks at the levels.
const MAX_NAP: Duration = Duration::from_secs(1);

/// Messages read from a level at a time.
const BATCH: usize = 32;

/// Properties a delivered copy does not keep (RocketMQ clears the first three).
const CLEARED: [&str; 4] = [
    properties::DELAY,
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC",
    properties::DELAY_MS,
];

/// What wakes the service thread: a put into a level (with its due time) or a stop.
#[derive(Debug, Default)]
pub(in crate::store) struct Wake {
    state: Mutex<WakeState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct WakeState {
    stopping: bool,
    /// Earliest due time announced since the service last took it.
    announced: Option<i64>,
}

impl Wake {
    /// A message due at `due_ms` is being stored.
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

    /// Undoes `stop`, before the service is started again.
    fn rearm(&self) {
        self.lock().stopping = false;
    }

    fn take_announced(&self) -> Option<i64> {
        self.lock().announced.take()
    }

    /// Sleeps for `nap` unless stopped or a message is announced; returns false once stopped.
    fn nap(&self, nap: Duration) -> bool {
        let s = self.lock();
        let (s, _) = self
            .cv
            .wait_timeout_while(s, nap, |s| !s.stopping && s.announced.is_none())
            .unwrap_or_else(|p| p.into_inner());
        !s.stopping
    }

    fn lock(&self) -> MutexGuard<'_, WakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `ScheduleService::max_nap` of shared writers.
const SHARED_MAX_NAP: Duration = Duration::from_millis(100);

/// See the module doc.
#[derive(Debug)]
pub(in crate::store) struct ScheduleService {
    clock: Clock,
    /// `config/delayOffset.json` (`None`: an in-memory store).
    path: Option<PathBuf>,
    file_mode: u32,
    persist_every: Duration,
    /// Shared writers: the longest sleep between passes. A delayed message another process
    /// stores does not reach this process's wake-up, only its dispatch: a pass within this
    /// bound finds it.
    max_nap: Option<Duration>,
    wake: Arc<Wake>,
    /// The store it delivers in, set once the store exists; weak, so the service never keeps
    /// a store alive.
    store: OnceLock<Weak<Inner>>,
    state: Mutex<State>,
    /// Held while delivery is started, stopped or run by a caller (mod.rs): one at a time.
    hosting: Mutex<()>,
}

#[derive(Debug)]
struct State {
    offsets: DelayOffsets,
    /// Offsets changed since they were last written.
    dirty: bool,
    last_persist: Instant,
}

/// What one pass did.
#[derive(Debug)]
struct Pass {
    delivered: usize,
    /// The earliest delivery time of a message left pending.
    next_due: Option<i64>,
    /// The first failure: its level stopped there, the other levels went on.
    failed: Option<Error>,
}

impl ScheduleService {
    /// A service for the store whose config directory is `config_dir`, reading its offsets.
    ///
    /// # Errors
    /// `ConfigFile` when `delayOffset.json` and its `.bak` do not decode; I/O failures.
    pub(in crate::store) fn new(
        clock: Clock,
        config_dir: Option<PathBuf>,
        file_mode: u32,
        persist_every: Duration,
        shared: bool,
    ) -> Result<Self> {
        let path = config_dir.map(|d| d.join(super::offsets::FILE));
        let offsets = match &path {
            Some(p) => DelayOffsets::load(p)?,
            None => DelayOffsets::default(),
        };
        Ok(ScheduleService {
            clock,
            path,
            file_mode,
            persist_every,
            max_nap: shared.then_some(SHARED_MAX_NAP),
            wake: Arc::new(Wake::default()),
            store: OnceLock::new(),
            state: Mutex::new(State {
                offsets,
                dirty: false,
                last_persist: Instant::now(),
            }),
            hosting: Mutex::new(()),
        })
    }

    /// The leader of shared writers hosts delivery (leader.rs): called when this process
    /// takes the role. A start that fails (the store closing, its offsets file unreadable)
    /// leaves delivery to the next leader or the next open.
    pub(in crate::store) fn host(&self) {
        if let Some(inner) = self.store.get().and_then(Weak::upgrade) {
            let _ = Store::handle(inner).start_delivery();
        }
    }

    /// Serialises starting, stopping and caller-run passes (mod.rs).
    pub(in crate::store) fn hosting(&self) -> MutexGuard<'_, ()> {
        self.hosting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the service ready to start again: a stopped thread's stop request undone, and the
    /// offsets read from `delayOffset.json` again (another process may have delivered since).
    /// Offsets not yet written are kept (nothing changed them since this process stopped).
    ///
    /// # Errors
    /// As `new`.
    pub(in crate::store) fn prepare_start(&self) -> Result<()> {
        let mut state = self.lock();
        if let (false, Some(path)) = (state.dirty, &self.path) {
            state.offsets = DelayOffsets::load(path)?;
        }
        drop(state);
        self.wake.rearm();
        Ok(())
    }

    /// After the thread stopped: makes the log durable through every delivery and writes the
    /// offsets, so that the next host starts from them.
    ///
    /// # Errors
    /// The flush's or the offsets write's failure (the offsets stay in memory, dirty).
    pub(in crate::store) fn persist_stopped(&self, store: &Store) -> Result<()> {
        let mut state = self.lock();
        self.persist_durable(store, &mut state)
    }

    /// The wake-up the put hook tells of arrivals.
    pub(in crate::store) fn wake(&self) -> Arc<Wake> {
        Arc::clone(&self.wake)
    }

    /// Binds the service to its store (once, before it starts).
    pub(in crate::store) fn attach(&self, store: Weak<Inner>) {
        let _ = self.store.set(store);
    }

    /// The level -> offset table as it stands.
    pub(in crate::store) fn offsets(&self) -> std::collections::BTreeMap<u32, u64> {
        self.lock().offsets.table.clone()
    }

    /// Delivers every message due now, makes the log durable and writes the offsets; returns
    /// how many this call delivered (another pass may have delivered some meanwhile).
    ///
    /// # Errors
    /// The first failed read, re-put, flush or offsets write (the messages before it are
    /// delivered and their offsets kept).
    pub(in crate::store) fn deliver_due(&self, store: &Store) -> Result<usize> {
        let mut state = self.lock();
        let pass = self.pass(store, &mut state);
        let persisted = self.persist_durable(store, &mut state);
        if let Some(e) = pass.failed {
            return Err(e);
        }
        persisted?;
        Ok(pass.delivered)
    }

    /// Writes the offsets if they changed, without a flush: for a close that has just made
    /// the whole log durable.
    ///
    /// # Errors
    /// I/O failures writing the file.
    pub(in crate::store) fn persist_after_flush(&self) -> Result<()> {
        let mut state = self.lock();
        self.persist(&mut state)
    }

    /// The lowest commit-log offset of a message not yet delivered (`u64::MAX`: none):
    /// retention keeps every file from the one holding it.
    pub(in crate::store) fn pending_floor(&self) -> u64 {
        let Some(inner) = self.store.get().and_then(Weak::upgrade) else {
            return u64::MAX;
        };
        let store = Store::handle(inner);
        let state = self.lock();
        let mut floor = u64::MAX;
        for queue in 0..level_queues(&store) {
            let offset = state.offsets.table.get(&(queue + 1)).copied().unwrap_or(0);
            match store.get_messages(tags::SCHEDULE_TOPIC, queue, offset, 1, &TagFilter::all()) {
                Ok(got) => {
                    if let Some(v) = got.iter().next() {
                        floor = floor.min(v.physical_offset());
                    } else if got.next_offset < got.max_offset {
                        // Unreadable now: keep everything rather than guess.
                        return 0;
                    }
                }
                // Keep everything rather than guess.
                Err(_) => return 0,
            }
        }
        floor
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One pass over every level queue: delivers what is due, in order. A level whose read or
    /// re-put fails stops there until the next pass; the others go on.
    fn pass(&self, store: &Store, state: &mut State) -> Pass {
        let mut pass = Pass {
            delivered: 0,
            next_due: None,
            failed: None,
        };
        for queue in 0..level_queues(store) {
            if let Err(e) = self.pass_level(store, state, queue, &mut pass) {
                pass.failed.get_or_insert(e);
            }
        }
        pass
    }

    /// `pass` over the queue of level `queue + 1`.
    fn pass_level(
        &self,
        store: &Store,
        state: &mut State,
        queue: u32,
        pass: &mut Pass,
    ) -> Result<()> {
        let level = queue + 1;
        loop {
            let offset = state.offsets.table.get(&level).copied().unwrap_or(0);
            let got = store.get_messages(
                tags::SCHEDULE_TOPIC,
                queue,
                offset,
                BATCH,
                &TagFilter::all(),
            )?;
            // An offset outside the queue (a store copied without its queues, retention
            // of a level nobody delivered) restarts at the nearest end.
            let clamped = offset.clamp(got.min_offset, got.max_offset.max(got.min_offset));
            if clamped != offset {
                state.offsets.table.insert(level, clamped);
                state.dirty = true;
                continue;
            }
            let now = self.clock.now_ms();
            let mut read = 0;
            let mut waiting = false;
            for v in got.iter() {
                read += 1;
                let props = v.properties();
                let due = tags::delivery_time(props, v.store_timestamp()).unwrap_or(i64::MIN);
                if due > now {
                    pass.next_due = Some(pass.next_due.map_or(due, |n| n.min(due)));
                    waiting = true;
                    break;
                }
                if redeliver(store, &v)? {
                    kill_point!("schedule.delivered_unrecorded");
                    pass.delivered += 1;
                }
                state
                    .offsets
                    .table
                    .insert(level, v.queue_offset().saturating_add(1));
                state.dirty = true;
            }
            if waiting || read < BATCH || got.next_offset <= offset {
                return Ok(());
            }
        }
    }

    /// Makes the log durable through every re-put, then writes the offsets if they changed.
    fn persist_durable(&self, store: &Store, state: &mut State) -> Result<()> {
        if !state.dirty || self.path.is_none() {
            return Ok(());
        }
        store.flush()?;
        self.persist(state)
    }

    fn persist(&self, state: &mut State) -> Result<()> {
        if let (true, Some(path)) = (state.dirty, &self.path) {
            state
                .offsets
                .store(path, self.clock.now_ms(), self.file_mode)?;
        }
        state.dirty = false;
        state.last_persist = Instant::now();
        Ok(())
    }

    /// One turn of the thread: a pass, the offsets written when due; returns how long to nap.
    fn turn(&self, store: &Store) -> Duration {
        let announced = self.wake.take_announced();
        let mut state = self.lock();
        let pass = self.pass(store, &mut state);
        if state.last_persist.elapsed() >= self.persist_every {
            // A failure is retried at the next turn; the offsets stay in memory meanwhile.
            let _ = self.persist_durable(store, &mut state);
        }
        let dirty = state.dirty;
        drop(state);
        // Every time here is ahead of the clock (a due message was delivered or failed), so a
        // failed level is tried again at the next wake-up, at most `MAX_NAP` later.
        let next = [pass.next_due, announced].into_iter().flatten().min();
        let mut nap = match next {
            Some(due) => {
                let ms = due.saturating_sub(self.clock.now_ms()).max(0);
                Duration::from_millis(u64::try_from(ms).unwrap_or(0)).min(MAX_NAP)
            }
            None => MAX_NAP,
        };
        if dirty {
            nap = nap.min(self.persist_every);
        }
        nap
    }
}

impl Service for ScheduleService {
    fn name(&self) -> &'static str {
        "schedule"
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
            let nap = self.turn(&store);
            let nap = self.max_nap.map_or(nap, |m| nap.min(m));
            drop(store);
            if !self.wake.nap(nap) {
                return;
            }
        }
    }

    fn stop(&self) {
        self.wake.stop();
    }
}

/// Queues of the schedule topic (level = queue + 1); 0 before the first delayed message.
fn level_queues(store: &Store) -> u32 {
    store
        .topic(tags::SCHEDULE_TOPIC)
        .ok()
        .flatten()
        .map_or(0, |t| t.read_queue_nums.max(t.write_queue_nums))
}

/// Puts the delivered copy of the schedule record `v` to its real topic and queue; false for
/// a record that names no destination (not one the hook wrote), which is passed over: it can
/// go nowhere, and waiting for it would stop its level for good.
fn redeliver(store: &Store, v: &crate::message::RecordView<'_>) -> Result<bool> {
    let props = v.properties();
    let real = properties::get(props, properties::REAL_TOPIC);
    let qid = properties::get(props, properties::REAL_QID).and_then(|q| q.parse::<u32>().ok());
    let (Some(topic), Some(qid)) = (real, qid) else {
        return Ok(false);
    };
    let mut kept = Vec::with_capacity(props.len());
    for (k, val) in properties::iter(props) {
        if !CLEARED.contains(&k) {
            properties::push(&mut kept, k, val);
        }
    }
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
        Ok(_) => Ok(true),
        // The topic shrank since: the queue the same key would pick now.
        Err(Error::InvalidQueue { .. }) => store
            .put_message(&msg, &PutRequest::new(Routing::Hash(qid)))
            .map(|_| true),
        Err(e) => Err(e),
    }
}
