//! Cancel, reschedule and list pending timers (FORMAT.md §16.1, docs/design-timers.md).
//!
//! A timer is any message the engine delivers later: a timer of the timer log (`<offset>`)
//! or a delayed message of a level (`L<level>:<offset>`). A cancel appends a cancel record
//! naming the timer to the timer topic's cancel queue; a reschedule appends a reschedule record
//! naming it and its new delivery time (one append: the timer keeps its id, and no crash can
//! leave it cancelled without its new time). A rescheduled level message leaves its level's
//! queue order: the engine delivers it at the new time from its own record, still under its
//! level id. Both run under the timer gate (gate.rs), as every delivery pass does.
//!
//! Invariants
//! - Under the gate, a timer's state is what its progress (the host's in memory when this
//!   process hosts, else `timerProgress.json` with `delayOffset.json`) and the log after the
//!   progress's `commitLogOffset` say together (scan.rs): nothing can change it until the gate
//!   is let go.
//! - A change record is appended only for a timer found pending under the gate, and the
//!   delivery of a timer happens only under the gate after every change record before it was
//!   applied: for one timer exactly one of its delivery and its cancel happens, and the answer
//!   (`Cancelled`, `AlreadyDelivered`, ...) is what the log holds when the gate is let go.
//! - "Done" in a progress is delivered or cancelled; a done timer is cancelled exactly when a
//!   cancel record names it after its own record (one is appended only while it is pending).
//! - Bad arguments are refused before the gate is taken or anything is written.
//!
//! Costs: a cancel or reschedule by offset id reads the log from the progress's
//! `commitLogOffset` (the host writes its progress every flush interval, and again once the log
//! ran `RESCAN_LIMIT` ahead with timers pending); by key or unique id it also reads the record of
//! every timer above the progress floor and every level message from its level's offset, and
//! when none of them matches, of every older one still retained (no index yet); a listing reads
//! each pending record.
//!
//! Crash behaviour: killed before the append, nothing changed (kill point
//! `timer.cancel_appended` / `timer.reschedule_appended` just after it): the record is whole
//! in the log or absent, and whoever takes the gate next (a host's delivery, a restart's scan,
//! another cancel) reads it there.

use super::levels::{self, level_count};
use super::progress::Progress;
use super::scan::{caught_up, scan_log};
use super::service::{first_log_record, TimerService};
use crate::dispatch::queue_index::QueueEntry;
use crate::error::{Error, Result};
use crate::message::msg_id::{self, UniqueId};
use crate::message::tags::SCHEDULE_TOPIC;
use crate::message::timer::TIMER_TOPIC;
use crate::message::timer_id::{Change, Source, TimerId, CANCEL_QUEUE};
use crate::message::{properties, MessageRef, RecordView};
use crate::store::Store;
use crate::util::kill_point::kill_point;

/// Queue units read at a time.
const BATCH: usize = 1024;

/// What a cancel or reschedule did to one timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerOutcome {
    /// It was pending; it will not be delivered.
    Cancelled,
    /// It was pending; it will be delivered at the new time.
    Rescheduled,
    /// It had been delivered.
    AlreadyDelivered,
    /// It had been cancelled.
    AlreadyCancelled,
    /// No timer of the store has this id (or retention removed its record).
    NotFound,
}

/// Which timers a cancel or reschedule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerTarget<'a> {
    /// A timer's id.
    Id(TimerId),
    /// A message id of the timer message: its unique id (`UNIQ_KEY`, a send's `msg_id`) or
    /// its offset id (the send's `offset_msg_id`).
    MsgId(&'a str),
    /// Every timer whose message has this key (`KEYS`), of `topic` when given.
    Key {
        /// The key.
        key: &'a str,
        /// The timer's destination topic.
        topic: Option<&'a str>,
    },
}

/// A stored timer as a listing or an answer shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerInfo {
    /// Its id.
    pub id: TimerId,
    /// Where it goes when due.
    pub topic: String,
    /// The queue of `topic` it goes to.
    pub queue_id: u32,
    /// Its message's keys.
    pub keys: Vec<String>,
    /// Its message's unique id (`UNIQ_KEY`), if it has one.
    pub unique_id: Option<String>,
    /// Its message's tags.
    pub tags: Option<String>,
    /// When it is due (epoch ms), a reschedule's time when it has one.
    pub due_ms: i64,
    /// The timer record's commit-log offset (its offset id names it).
    pub commit_log_offset: u64,
}

impl TimerInfo {
    /// The offset message id of the timer record (a cancel by it is direct).
    pub fn offset_msg_id(&self) -> String {
        msg_id::offset_msg_id(&crate::message::codec::STORE_HOST, self.commit_log_offset)
    }
}

/// One timer a cancel or reschedule matched, and what it did; `id` is `None` when nothing
/// matched (`NotFound`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerAnswer {
    /// The timer's id.
    pub id: Option<TimerId>,
    /// What happened to it.
    pub outcome: TimerOutcome,
    /// The timer as it was found (its new time after a reschedule).
    pub timer: Option<TimerInfo>,
}

/// Which pending timers a listing returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerFilter<'a> {
    /// Only timers going to this topic.
    pub topic: Option<&'a str>,
    /// Only timers whose message has this key.
    pub key: Option<&'a str>,
    /// Only timers due at or after this epoch ms.
    pub due_from: Option<i64>,
    /// Only timers due before this epoch ms.
    pub due_to: Option<i64>,
    /// At most this many (the earliest due first).
    pub limit: usize,
}

/// A timer's state under the gate.
enum State {
    Pending(i64),
    Delivered,
    Cancelled,
    Missing,
}

/// The timers as the log says they are, under the gate (module doc).
struct View {
    progress: Progress,
}

impl View {
    fn build(store: &Store, svc: &TimerService) -> Result<Self> {
        let mut progress = svc.known_progress()?;
        let end = caught_up(store)?;
        let first_timer = first_log_record(store, progress.floor);
        let first_level = levels::pending_floor(store, &progress);
        let first_pending = [
            first_timer,
            (first_level != u64::MAX).then_some(first_level),
        ]
        .into_iter()
        .flatten()
        .min();
        if let Some(record) = first_pending {
            scan_log(store, progress.log_offset.max(record), end, &mut progress);
        }
        Ok(View { progress })
    }

    /// The state of timer `id` (unit `unit` of its source queue).
    fn state(&self, store: &Store, id: TimerId, unit: Option<QueueEntry>) -> State {
        let Some(unit) =
            unit.filter(|u| u.has_record() && u.offset >= store.inner.commit_log.min_offset())
        else {
            return State::Missing;
        };
        if !self.progress.is_done(id) {
            let due = self.progress.moved(id);
            return State::Pending(due.unwrap_or(unit.tags_code));
        }
        if cancelled(store, id, unit.offset) {
            State::Cancelled
        } else {
            State::Delivered
        }
    }
}

impl Store {
    fn timer_service(&self) -> Result<&TimerService> {
        self.check_writable()?;
        self.inner.timers.as_deref().ok_or(Error::ReadOnly)
    }

    /// Cancels the timers `target` names: each pending one is not delivered (a durable cancel
    /// record), and each answer says what was found. Nothing matched: one `NotFound` answer.
    ///
    /// # Errors
    /// `InvalidArgument` for a message id that is not one (nothing written); `ReadOnly`,
    /// `Closed`, `Poisoned`; a failed read or append (a key's timers before the failed one stay
    /// cancelled).
    pub fn cancel_timer(&self, target: TimerTarget<'_>) -> Result<Vec<TimerAnswer>> {
        self.change_timers(target, None)
    }

    /// Moves the timers `target` names to `due_ms` (epoch ms; a past time is due at once):
    /// each pending one keeps its id and is delivered at the new time (one durable record).
    ///
    /// # Errors
    /// As `cancel_timer`; `InvalidArgument` for a time more than `timer_max_delay` ahead.
    pub fn reschedule_timer(
        &self,
        target: TimerTarget<'_>,
        due_ms: i64,
    ) -> Result<Vec<TimerAnswer>> {
        let now = self.inner.config.clock.now_ms();
        let max = i64::try_from(self.inner.config.timer_max_delay.as_millis()).unwrap_or(i64::MAX);
        if due_ms.saturating_sub(now) > max {
            return Err(Error::InvalidArgument {
                field: "deliver_at",
                reason: format!(
                    "{due_ms} is {} ms ahead, more than the store's timer_max_delay ({max} ms)",
                    due_ms.saturating_sub(now)
                ),
            });
        }
        self.change_timers(target, Some(due_ms))
    }

    /// The pending timers `filter` selects, the earliest due first (ties in arrival order).
    ///
    /// # Errors
    /// `ReadOnly`, `Closed`, `Poisoned`; a failed read.
    pub fn list_timers(&self, filter: &TimerFilter<'_>) -> Result<Vec<TimerInfo>> {
        let svc = self.timer_service()?;
        let view = {
            let _gate = svc.gate().take()?;
            View::build(self, svc)?
        };
        let mut found = Vec::new();
        for_each_timer(self, &view.progress, Span::Undone, |id, unit, v| {
            if let State::Pending(due) = view.state(self, id, Some(unit)) {
                let info = info(id, due, v);
                let keep = filter.topic.is_none_or(|t| t == info.topic)
                    && filter.key.is_none_or(|k| info.keys.iter().any(|x| x == k))
                    && filter.due_from.is_none_or(|f| due >= f)
                    && filter.due_to.is_none_or(|t| due < t);
                if keep {
                    found.push(info);
                }
            }
        })?;
        found.sort_by_key(|t| (t.due_ms, t.id));
        found.truncate(filter.limit);
        Ok(found)
    }

    fn change_timers(
        &self,
        target: TimerTarget<'_>,
        due_ms: Option<i64>,
    ) -> Result<Vec<TimerAnswer>> {
        let svc = self.timer_service()?;
        let msg_id = match target {
            TimerTarget::MsgId(text) => Some(parse_msg_id(text)?),
            _ => None,
        };
        let gate = svc.gate().take()?;
        let view = View::build(self, svc)?;
        let unit = |id: TimerId| unit_of(self, id);
        // An offset id names a timer when a timer record starts there; else it is read as a
        // unique id (both are 32 hex characters).
        let direct = match (target, msg_id.as_ref()) {
            (TimerTarget::Id(id), _) => Some(id),
            (_, Some(m)) => m.offset.and_then(|off| self.timer_at(off)),
            _ => None,
        };
        // (id, unit, the record's facts) of every timer named.
        let mut named: Vec<(TimerId, Option<QueueEntry>, Option<TimerInfo>)> = Vec::new();
        if let Some(id) = direct {
            named.push((id, unit(id), None));
        } else {
            let (unique, key, topic) = match (target, msg_id.as_ref()) {
                (TimerTarget::Key { key, topic }, _) => (None, Some(key), topic),
                (_, Some(m)) => (Some(m.unique.as_str()), None, None),
                _ => (None, None, None),
            };
            let matches = |v: &RecordView<'_>| match (unique, key) {
                (Some(u), _) => v.property(properties::UNIQ_KEY) == Some(u),
                (None, Some(k)) => {
                    let to = destination(v);
                    topic.is_none_or(|t| t == to) && v.keys().any(|x| x == k)
                }
                (None, None) => false,
            };
            // The timers not known done first; only when none matches, the older ones still
            // retained (all done), so that a done timer gets its true answer.
            for span in [Span::Undone, Span::Older] {
                for_each_timer(self, &view.progress, span, |id, e, v| {
                    if matches(v) {
                        named.push((id, Some(e), Some(info(id, e.tags_code, v))));
                    }
                })?;
                if !named.is_empty() {
                    break;
                }
            }
        }
        if named.is_empty() {
            return Ok(vec![TimerAnswer {
                id: None,
                outcome: TimerOutcome::NotFound,
                timer: None,
            }]);
        }
        let mut answers = Vec::with_capacity(named.len());
        let mut appended = false;
        let answer_each = || -> Result<()> {
            for (id, u, timer) in named {
                let mut timer = timer.or_else(|| {
                    let u = u.filter(QueueEntry::has_record)?;
                    self.get_by_offset(u.offset, |v| info(id, u.tags_code, v))
                        .ok()
                });
                let state = view.state(self, id, u);
                if let (Some(t), Some(due)) = (timer.as_mut(), view.progress.moved(id)) {
                    t.due_ms = due;
                }
                let outcome = match state {
                    State::Missing => {
                        timer = None;
                        TimerOutcome::NotFound
                    }
                    State::Delivered => TimerOutcome::AlreadyDelivered,
                    State::Cancelled => TimerOutcome::AlreadyCancelled,
                    State::Pending(_) => {
                        let change = match due_ms {
                            None => Change::Cancel(id),
                            Some(at) => Change::Reschedule(id, at),
                        };
                        let props = change.encode();
                        // The body names the timer too (a record's body is never empty).
                        let body = id.to_string();
                        self.put_internal(
                            &MessageRef::new(TIMER_TOPIC, CANCEL_QUEUE, body.as_bytes())
                                .with_properties(&props),
                        )?;
                        appended = true;
                        match due_ms {
                            None => {
                                kill_point!("timer.cancel_appended");
                                TimerOutcome::Cancelled
                            }
                            Some(at) => {
                                kill_point!("timer.reschedule_appended");
                                if let Some(t) = timer.as_mut() {
                                    t.due_ms = at;
                                }
                                TimerOutcome::Rescheduled
                            }
                        }
                    }
                };
                answers.push(TimerAnswer {
                    id: Some(id),
                    outcome,
                    timer,
                });
            }
            Ok(())
        };
        let result = answer_each();
        if appended {
            // The host in this process applies them now (its thread wakes for an earlier time),
            // those before a failure too.
            svc.changed(self);
        }
        drop(gate);
        result.map(|()| answers)
    }
}

/// A message id as a cancel reads it: a unique id, and the commit-log offset it names when it
/// has the form of this store's offset ids.
struct MsgId {
    unique: UniqueId,
    offset: Option<u64>,
}

/// Reads `text` (either case) as a message id.
///
/// # Errors
/// `InvalidArgument` unless it is 32 hex characters.
fn parse_msg_id(text: &str) -> Result<MsgId> {
    let upper = text.to_ascii_uppercase();
    let Some(unique) = UniqueId::parse(&upper) else {
        return Err(Error::InvalidArgument {
            field: "msg_id",
            reason: format!("{text:?} is not a message id (32 hex characters)"),
        });
    };
    let offset = match msg_id::decode_offset_msg_id(&upper) {
        Some((host, off)) if host == crate::message::codec::STORE_HOST => Some(off),
        _ => None,
    };
    Ok(MsgId { unique, offset })
}

impl Store {
    /// The timer whose record starts at commit-log offset `off`, if one does: a timer-log
    /// record or a delay level's.
    fn timer_at(&self, off: u64) -> Option<TimerId> {
        self.get_by_offset(off, |v| match (v.topic(), v.queue_id()) {
            (TIMER_TOPIC, 0) => Some(TimerId::log(v.queue_offset())),
            (SCHEDULE_TOPIC, q) => Some(TimerId::level(q + 1, v.queue_offset())),
            _ => None,
        })
        .ok()
        .flatten()
    }
}

/// The queue unit of timer `id` in its source queue.
fn unit_of(store: &Store, id: TimerId) -> Option<QueueEntry> {
    let (topic, q) = match id.source {
        Source::Log => (TIMER_TOPIC, 0),
        Source::Level(l) => (SCHEDULE_TOPIC, l.checked_sub(1)?),
    };
    store.queue(topic, q).ok().flatten()?.entry(id.offset)
}

/// Which stored timers a walk visits.
#[derive(Clone, Copy)]
enum Span {
    /// Those a progress does not know done: the timer log from its floor, each level from its
    /// offset, and the moved level messages below it.
    Undone,
    /// The older ones still retained (all done but the moved ones, visited by `Undone`).
    Older,
}

/// Calls `f` with each timer of both sources in `span` of `progress` whose record is retained,
/// and its record (one read each).
///
/// # Errors
/// A record that cannot be read.
fn for_each_timer(
    store: &Store,
    progress: &Progress,
    span: Span,
    mut f: impl FnMut(TimerId, QueueEntry, &RecordView<'_>),
) -> Result<()> {
    let bounds = |floor: u64| match span {
        Span::Undone => (floor, u64::MAX),
        Span::Older => (0, floor),
    };
    let (from, until) = bounds(progress.floor);
    for_each_in(store, Source::Log, from, until, &mut f)?;
    for level in 1..=level_count(store) {
        let (from, until) = bounds(progress.level_offset(level));
        for_each_in(store, Source::Level(level), from, until, &mut |id, e, v| {
            // A moved message below the offset is visited as undone only.
            if !matches!(span, Span::Older) || progress.moved(id).is_none() {
                f(id, e, v);
            }
        })?;
    }
    if let Span::Undone = span {
        for &(l, o) in progress.level_moved.keys() {
            if o < progress.level_offset(l) {
                for_each_in(store, Source::Level(l), o, o + 1, &mut f)?;
            }
        }
    }
    Ok(())
}

/// Calls `f` with each timer of `source` in `[floor, until)` whose record is retained.
///
/// # Errors
/// A record that cannot be read.
fn for_each_in(
    store: &Store,
    source: Source,
    floor: u64,
    until: u64,
    f: &mut impl FnMut(TimerId, QueueEntry, &RecordView<'_>),
) -> Result<()> {
    let (topic, qid) = match source {
        Source::Log => (TIMER_TOPIC, 0),
        Source::Level(l) => (SCHEDULE_TOPIC, l - 1),
    };
    let Some(q) = store.queue(topic, qid)? else {
        return Ok(());
    };
    let end = q.max_offset().min(until);
    let min_log = store.inner.commit_log.min_offset();
    super::each_unit(&*q, floor.max(q.min_offset()), end, |qo, e| {
        if e.has_record() && e.offset >= min_log {
            let id = TimerId { source, offset: qo };
            store.get_by_offset(e.offset, |v| f(id, e, v))?;
        }
        Ok(())
    })?;
    Ok(())
}

/// True when a cancel record names `id` (whose record is at `record`) in the cancel queue.
fn cancelled(store: &Store, id: TimerId, record: u64) -> bool {
    let Some(q) = store.queue(TIMER_TOPIC, CANCEL_QUEUE).ok().flatten() else {
        return false;
    };
    // Units are in log order: the first one after the timer's record, by bisection.
    let (mut lo, mut hi) = (q.min_offset(), q.max_offset());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match q.entry(mid) {
            Some(e) if e.offset > record => hi = mid,
            _ => lo = mid + 1,
        }
    }
    let code = id.code();
    let mut units: Vec<(u64, QueueEntry)> = Vec::with_capacity(BATCH);
    let end = q.max_offset();
    while lo < end {
        units.clear();
        q.entries(
            lo,
            BATCH.min(usize::try_from(end - lo).unwrap_or(BATCH)),
            &mut units,
        );
        let Some(&(last, _)) = units.last() else {
            break;
        };
        for &(_, e) in &units {
            if e.has_record() && e.tags_code == code {
                let change = store.get_by_offset(e.offset, |v| Change::of(v.properties()));
                if matches!(change, Ok(Some(Change::Cancel(t))) if t == id) {
                    return true;
                }
            }
        }
        lo = last + 1;
    }
    false
}

/// The topic a timer's record goes to when due: for a retry (marked `SEND_BACK`), the retry or
/// dead-letter topic the mark names (store/retry/hook.rs), not the origin topic it waits under.
fn destination<'v>(v: &RecordView<'v>) -> &'v str {
    v.property(properties::SEND_BACK)
        .or_else(|| v.property(properties::REAL_TOPIC))
        .unwrap_or("")
}

/// The facts of timer `id` (due `due`) from its record; its topic and queue are where it goes
/// when due (`destination`; a retry goes to queue 0).
fn info(id: TimerId, due: i64, v: &RecordView<'_>) -> TimerInfo {
    TimerInfo {
        id,
        topic: destination(v).to_owned(),
        queue_id: match v.property(properties::SEND_BACK) {
            Some(_) => 0,
            None => v
                .property(properties::REAL_QID)
                .and_then(|q| q.parse().ok())
                .unwrap_or(0),
        },
        keys: v.keys().map(str::to_owned).collect(),
        unique_id: v.property(properties::UNIQ_KEY).map(str::to_owned),
        tags: v.tags().map(str::to_owned),
        due_ms: due,
        commit_log_offset: v.physical_offset(),
    }
}
