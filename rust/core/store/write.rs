//! The write path, one pipeline for every put: validation (bad input writes nothing), routing
//! to a queue, the put hooks (hooks.rs), append, dispatch and the durability wait. Topics are
//! created and changed in admin.rs.
//!
//! A put is one message or a batch with a [`PutRequest`]: where it goes ([`Routing`]) and what
//! it waits for ([`Wait`]).
//!
//! Invariants
//! - A message is validated whole before anything is created or written: a rejected message
//!   neither auto-creates its topic nor advances its topic's round-robin turn.
//! - A caller's message to a system topic is refused; only a hook's rewrite goes there.
//! - A batch is appended to one queue, under one lock, all or nothing.
//! - Once `Wait::Durable` returns, the record is in its consume queue (read-your-writes) and,
//!   in sync mode, on disk.
//! - A put that stored a timer or delayed message tells the timer engine after its append (in
//!   whichever process hosts it, store/timer/wake.rs): the engine then finds the record in the
//!   log, never an announcement of a record still to come.

use super::hooks::{self, Rewrite};
use super::round_robin::RoundRobin;
use super::Store;
use crate::commit_log::append::{Appended, Prepared};
use crate::config::FlushMode;
use crate::dispatch::reput::Reput;
use crate::dispatch::DispatchRequest;
use crate::error::{Error, Result};
use crate::message::marks::Marks;
use crate::message::{properties, tags, validate, MessageRef};
use crate::topic_config::is_system_topic;
use crate::util::reuse;
use std::cell::Cell;

/// The largest body a `Wait::NoWait` put appends (copy and checksum stay a few microseconds);
/// larger ones are declined for the blocking path.
pub const QUICK_BODY_MAX: usize = 64 * 1024;

/// Outcome of a put that wrote the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutStatus {
    /// Written (and, in sync mode, confirmed durable).
    PutOk,
    /// Sync mode: written, but the disk did not confirm within the timeout.
    FlushDiskTimeout,
}

/// Result of a put of one message.
///
/// As RocketMQ's broker answers a producer: `queue_id` is the queue of the message's own
/// topic the put was routed to, and `appended` says where the record was stored, which is
/// another queue when a put hook moved it (`scheduled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutResult {
    /// Durability status.
    pub status: PutStatus,
    /// Where the record landed: its commit-log place, and its offset in the queue it was
    /// stored in (for a scheduled message, its level's queue of `SCHEDULE_TOPIC_XXXX`).
    pub appended: Appended,
    /// The queue of the message's topic it was sent to.
    pub queue_id: u32,
    /// The message was stored for later delivery (a delay level: in `SCHEDULE_TOPIC_XXXX`; a
    /// delivery time: in `rmq_sys_wheel_timer`):
    /// it reaches `queue_id` of its topic when due, with a queue offset given then.
    pub scheduled: bool,
}

/// Result of a batch put (`Store::put_messages`); see `PutResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPut {
    /// The queue of the batch's topic it was sent to.
    pub queue_id: u32,
    /// Durability status.
    pub status: PutStatus,
    /// The messages were stored for later delivery (all of a batch, or none: the hooks keep
    /// a batch together).
    pub scheduled: bool,
}

/// Which queue of the message's topic a put goes to.
#[derive(Debug, Clone, Copy)]
pub enum Routing<'r> {
    /// This queue (`InvalidQueue` when the topic has no such write queue).
    Queue(u32),
    /// The topic's next turn in this round robin, as a RocketMQ producer picks queues.
    RoundRobin(&'r RoundRobin),
    /// `hash % write queues`, the count read under the same lookup as the append: every
    /// message with one hash goes to one queue, in order (`Routing::sharding_key`).
    Hash(u32),
}

impl<'r> Routing<'r> {
    /// The routing of a sharding key: every message sent with `key` goes to one queue of its
    /// topic, in order. The queue is the IEEE (zlib) CRC32 of the key's bytes modulo the
    /// topic's write queue count; a key keeps its queue across versions (while the count does
    /// not change), so this must never change.
    pub fn sharding_key(key: &[u8]) -> Self {
        Routing::Hash(crate::util::crc::crc32(key))
    }
}

/// What a put waits for before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The record is dispatched and, in sync mode, durable (`PutStatus::FlushDiskTimeout`
    /// when the disk did not confirm in time).
    Durable,
    /// Sync mode: the group commit is requested and not awaited; the caller confirms the
    /// record with `Store::wait_durable(end)`, so one fsync covers every send issued
    /// meanwhile. Async mode: as `Durable`.
    Pipelined,
    /// As `Pipelined`, for a caller that must not block at all (a Python producer holding
    /// the GIL): when the topic exists, the body is at most `QUICK_BODY_MAX` bytes and the
    /// append needs no new file, no page fault and no wait for a lock, the put appends;
    /// otherwise it returns `Ok(None)` having written nothing, and the caller puts again
    /// with another `Wait`. In async mode, when the record's consume-queue unit cannot be
    /// written without waiting (its file to create or roll to, a lock busy), the put waits
    /// for its dispatch through `PutRequest::wake_via`. A batch put never declines: it acts
    /// as `Pipelined`.
    NoWait,
}

/// Called by a `Wait::NoWait` put with what it must not run under the caller's lock: the
/// wake-up of consumers blocked on the new record, only when there is one, or (async mode)
/// the wait for the record's dispatch when the put could not dispatch it at once (which also
/// wakes them). Called at most once per put. The binding runs it with the GIL released, so
/// that the woken thread, which may run at once, finds the GIL free, and so that the wait
/// lets other Python threads run.
pub type WakeVia<'r> = &'r dyn Fn(&(dyn Fn() + Sync));

/// How to put: routing and wait, with the caller's clock reading.
#[derive(Clone, Copy)]
pub struct PutRequest<'r> {
    /// Where the message goes (the message's own `queue_id` is ignored).
    pub routing: Routing<'r>,
    /// What the put waits for.
    pub wait: Wait,
    /// The caller's clock reading in ms (a producer that stamps the born timestamp has just
    /// read it): a `NoWait` put's store timestamp, which spares a clock call. `None`: the
    /// store's clock.
    pub now_ms: Option<i64>,
    /// See [`WakeVia`]; `None` wakes consumers (and waits for dispatch) on the putting thread.
    pub wake_via: Option<WakeVia<'r>>,
}

impl std::fmt::Debug for PutRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutRequest")
            .field("routing", &self.routing)
            .field("wait", &self.wait)
            .field("now_ms", &self.now_ms)
            .finish_non_exhaustive()
    }
}

impl<'r> PutRequest<'r> {
    /// A durable put with `routing`.
    pub fn new(routing: Routing<'r>) -> Self {
        PutRequest {
            routing,
            wait: Wait::Durable,
            now_ms: None,
            wake_via: None,
        }
    }

    /// This request with `wait`.
    #[must_use]
    pub fn wait(self, wait: Wait) -> Self {
        PutRequest { wait, ..self }
    }

    /// This request with the caller's clock reading.
    #[must_use]
    pub fn now_ms(self, now_ms: i64) -> Self {
        PutRequest {
            now_ms: Some(now_ms),
            ..self
        }
    }

    /// This request waking consumers (and waiting for dispatch) through `wake_via`.
    #[must_use]
    pub fn wake_via(self, wake_via: WakeVia<'r>) -> Self {
        PutRequest {
            wake_via: Some(wake_via),
            ..self
        }
    }
}

impl Routing<'_> {
    /// The queue of `topic` (with `queues` write queues) this routing picks, checked.
    #[inline]
    pub(in crate::store) fn pick(self, topic: &str, queues: u32) -> Result<u32> {
        let queue_id = match self {
            Routing::Queue(q) => q,
            Routing::RoundRobin(next) => next.next(topic, queues),
            Routing::Hash(h) => h % queues.max(1),
        };
        check_queue_id(topic, queue_id, queues)?;
        Ok(queue_id)
    }

    /// Hands back a turn taken for a put that wrote nothing.
    pub(in crate::store) fn give_back(self, topic: &str) {
        if let Routing::RoundRobin(next) = self {
            next.give_back(topic);
        }
    }
}

impl Store {
    /// Appends one message to its own queue (`msg.queue_id`) and waits as `Wait::Durable`.
    ///
    /// # Errors
    /// A typed error for every invalid input (nothing is written), `ReadOnly`, `Closed`,
    /// `Poisoned` after a failed flush, `StoreFull` when no file can be created.
    pub fn put(&self, msg: &MessageRef<'_>) -> Result<PutResult> {
        self.put_blocking(msg, Routing::Queue(msg.queue_id), true)
    }

    /// Appends one message as `req` says. `Ok(None)` only for `Wait::NoWait`, when the put
    /// would have had to wait (nothing was written, no turn taken).
    ///
    /// # Errors
    /// As `put`.
    #[inline]
    pub fn put_message(
        &self,
        msg: &MessageRef<'_>,
        req: &PutRequest<'_>,
    ) -> Result<Option<PutResult>> {
        match req.wait {
            Wait::NoWait => self.put_quick(msg, req),
            Wait::Durable => self.put_blocking(msg, req.routing, true).map(Some),
            Wait::Pipelined => self.put_blocking(msg, req.routing, false).map(Some),
        }
    }

    /// Sync mode: waits until every byte below `end` is on disk (one group commit for every
    /// waiter), then makes sure those records are dispatched. `Ok(false)` when the disk did not
    /// confirm within `timeout` (FLUSH_DISK_TIMEOUT). In async mode (or in memory) returns
    /// `Ok(true)` at once.
    ///
    /// # Errors
    /// `Poisoned` when the flush failed.
    pub fn wait_durable(&self, end: u64, timeout: std::time::Duration) -> Result<bool> {
        self.check_usable()?;
        match (&self.inner.flush, self.inner.config.flush_mode) {
            (Some(f), FlushMode::Sync) => {
                let confirmed = f.wait_flushed(end, timeout)?;
                if confirmed {
                    self.dispatch_through(end)?;
                }
                Ok(confirmed)
            }
            _ => Ok(true),
        }
    }

    /// The `Wait::NoWait` put. In async mode (and in memory) the record is dispatched before
    /// the put returns: inline when that needs no wait, else through `req.wake_via`
    /// (`finish_dispatch`); in sync mode a group commit is requested, and
    /// `wait_durable(result.end())` both confirms and dispatches the record (consumers see a
    /// sync-mode record only once it is durable).
    ///
    /// Its own function, as `put_blocking` is: the quick path's code stays compact in the
    /// instruction cache instead of interleaved with the waiting path's.
    #[inline(never)]
    fn put_quick(&self, msg: &MessageRef<'_>, req: &PutRequest<'_>) -> Result<Option<PutResult>> {
        if msg.body.len() > QUICK_BODY_MAX {
            return Ok(None);
        }
        self.check_writable()?;
        let checked = self.check_message(msg)?;
        let info = match self.inner.topics.try_write_info(msg.topic) {
            Some(Some(info)) => info,
            // Unknown: creating the topic writes a file, unless it can never be sent to.
            Some(None) if is_system_topic(msg.topic) => return Err(system_topic(msg.topic)),
            // Unknown, or the table busy with a change.
            _ => return Ok(None),
        };
        let mut routed = *msg;
        routed.queue_id = req
            .routing
            .pick(msg.topic, check_send_allowed(msg.topic, info)?)?;
        let rewrite = match self.hooked(checked.marks) {
            false => None,
            true => match self.rewrite(&routed, req.routing, false, checked.marks)? {
                Hooked::Unchanged => None,
                Hooked::Rewritten(r) => Some(r),
                Hooked::Declined => return Ok(None),
            },
        };
        // By reference: the message is not copied again before `Prepared::new`.
        let stored;
        let (msg, tags) = match &rewrite {
            None => (&routed, checked.tags),
            Some(r) => {
                stored = r.apply(&routed);
                (
                    &stored,
                    properties::get(stored.properties, properties::TAGS),
                )
            }
        };
        let now_ms = req
            .now_ms
            .unwrap_or_else(|| self.inner.config.clock.now_ms());
        let prepared = Prepared::new(*msg)?;
        let Some(appended) = self.inner.commit_log.try_put(&prepared, now_ms)? else {
            // Not sent: the blocking retry takes this queue's turn again.
            req.routing.give_back(routed.topic);
            return Ok(None);
        };
        let end = appended.physical_offset + u64::from(appended.size);
        match (self.inner.config.flush_mode, &self.inner.flush) {
            (FlushMode::Sync, Some(f)) => f.request_flush(end),
            // Async mode, or an in-memory store (nothing to flush).
            _ => {
                if let Some(r) = &self.inner.reput {
                    let code =
                        tags::of_record(msg.topic, msg.properties, tags, appended.store_timestamp);
                    let req_ = known_request(msg, &appended, code);
                    let done = match req.wake_via {
                        Some(w) => r.try_dispatch_quick(appended.physical_offset, end, &[req_], w),
                        None => {
                            r.try_dispatch_quick(appended.physical_offset, end, &[req_], |w| w())
                        }
                    };
                    // Left to another thread (a unit file to create or roll to, a lock
                    // busy): finished here, off the caller's lock, before the put returns.
                    if !done {
                        self.finish_dispatch_via(r, end, req.wake_via);
                    }
                }
            }
        }
        let scheduled = is_scheduled(rewrite.as_ref());
        if scheduled {
            self.announce_scheduled();
        }
        Ok(Some(PutResult {
            status: PutStatus::PutOk,
            appended,
            queue_id: routed.queue_id,
            scheduled,
        }))
    }

    #[inline(never)]
    fn put_blocking(
        &self,
        msg: &MessageRef<'_>,
        routing: Routing<'_>,
        wait: bool,
    ) -> Result<PutResult> {
        self.check_writable()?;
        // Message first: a rejected message must not auto-create its topic.
        let checked = self.check_message(msg)?;
        let mut routed = *msg;
        routed.queue_id = routing.pick(msg.topic, self.writable_queues(msg.topic)?)?;
        let rewrite = match self.hooked(checked.marks) {
            false => None,
            true => match self.rewrite(&routed, routing, true, checked.marks)? {
                Hooked::Rewritten(r) => Some(r),
                Hooked::Unchanged | Hooked::Declined => None,
            },
        };
        // By reference: the message is not copied again before `Prepared::new`.
        let stored;
        let (msg, tags) = match &rewrite {
            None => (&routed, checked.tags),
            Some(r) => {
                stored = r.apply(&routed);
                (
                    &stored,
                    properties::get(stored.properties, properties::TAGS),
                )
            }
        };
        let prepared = Prepared::new(*msg)?;
        let appended = self.inner.commit_log.put(&prepared)?;
        let code = tags::of_record(msg.topic, msg.properties, tags, appended.store_timestamp);
        let req = known_request(msg, &appended, code);
        let end = appended.physical_offset + u64::from(appended.size);
        let status = self.after_append(
            end,
            |r| r.try_dispatch_known(appended.physical_offset, end, &[req]),
            wait,
        )?;
        let scheduled = is_scheduled(rewrite.as_ref());
        if scheduled {
            self.announce_scheduled();
        }
        Ok(PutResult {
            status,
            appended,
            queue_id: routed.queue_id,
            scheduled,
        })
    }

    /// Appends a batch to the queue its messages name (they must all name the same one),
    /// waiting as `Wait::Durable`. See `put_messages`.
    ///
    /// # Errors
    /// As `put_messages`.
    pub fn put_batch(&self, msgs: &[MessageRef<'_>], out: &mut Vec<Appended>) -> Result<PutStatus> {
        let queue_id = msgs.first().map_or(0, |m| m.queue_id);
        if msgs.iter().any(|m| m.queue_id != queue_id) {
            return Err(Error::InvalidBatch {
                reason: "a batch must target one topic and queue".into(),
            });
        }
        self.put_messages(msgs, &PutRequest::new(Routing::Queue(queue_id)), out)
            .map(|put| put.status)
    }

    /// Appends a batch of messages for one topic to one queue (chosen by `req.routing` once
    /// for the batch; the messages' own queue ids are ignored), with consecutive queue offsets,
    /// in one file and under one lock; pushes each record's `Appended` to `out` and returns the
    /// queue of the topic it was sent to. All or nothing: an invalid message rejects the batch.
    ///
    /// # Errors
    /// As `put`, and `InvalidBatch` for an empty batch, several topics, transaction messages,
    /// or hooks that send its messages to different queues.
    pub fn put_messages(
        &self,
        msgs: &[MessageRef<'_>],
        req: &PutRequest<'_>,
        out: &mut Vec<Appended>,
    ) -> Result<BatchPut> {
        self.check_writable()?;
        let Some(first) = msgs.first() else {
            return Err(Error::InvalidBatch {
                reason: "empty batch".into(),
            });
        };
        let mut prepared: Vec<Prepared<'_>> = reuse::take(&PREPARED, msgs.len());
        let mut tag_values: Vec<Option<&str>> = reuse::take(&TAG_VALUES, msgs.len());
        let mut hooked = false;
        for m in msgs {
            // Pointer equality first: batch items usually share one topic string.
            let same_topic = std::ptr::eq(m.topic, first.topic) || m.topic == first.topic;
            if !same_topic {
                return Err(Error::InvalidBatch {
                    reason: "a batch must target one topic and queue".into(),
                });
            }
            if m.sysflag & crate::message::sysflag::TRANSACTION_MASK != 0 {
                return Err(Error::InvalidBatch {
                    reason: "transaction messages cannot be batched".into(),
                });
            }
            let checked = self.check_message(m)?;
            hooked |= self.hooked(checked.marks);
            tag_values.push(checked.tags);
            prepared.push(Prepared::new(*m)?);
        }
        // Messages first: a rejected batch must not auto-create its topic.
        let queue_id = req
            .routing
            .pick(first.topic, self.writable_queues(first.topic)?)?;
        for p in &mut prepared {
            p.msg.queue_id = queue_id;
        }
        let rewrites = match hooked {
            false => None,
            true => self
                .batch_rewrites(msgs, queue_id)
                .inspect_err(|_| req.routing.give_back(first.topic))?,
        };
        if let Some(rs) = &rewrites {
            prepared.clear();
            for (m, r) in msgs.iter().zip(rs) {
                let m = MessageRef { queue_id, ..*m };
                prepared.push(Prepared::new(match r {
                    Some(r) => r.apply(&m),
                    None => m,
                })?);
            }
        }
        let scheduled = rewrites
            .as_ref()
            .and_then(|rs| rs.first())
            .is_some_and(|r| is_scheduled(r.as_ref()));
        // One topic (the hooks keep a batch together): one tags-code rule.
        let rule = tags::TopicRule::of_topic(prepared.first().map_or(first.topic, |p| p.msg.topic));
        let start = out.len();
        self.inner.commit_log.put_batch(&prepared, out)?;
        let appended = out.get(start..).unwrap_or(&[]);
        let status = match (appended.first(), appended.last()) {
            (Some(first), Some(last)) => {
                let end = last.physical_offset + u64::from(last.size);
                let dispatch = |r: &Reput| {
                    let mut reqs: Vec<DispatchRequest<'_>> = reuse::take(&REQUESTS, msgs.len());
                    reqs.extend(prepared.iter().zip(appended).zip(&tag_values).map(
                        |((p, a), &tags)| {
                            let code = match &rewrites {
                                None => rule.code(p.msg.properties, tags, a.store_timestamp),
                                // A rewritten record's TAGS value is the rewrite's, not the
                                // one validation found.
                                Some(_) => tags::of_stored(
                                    p.msg.topic,
                                    p.msg.properties,
                                    a.store_timestamp,
                                ),
                            };
                            known_request(&p.msg, a, code)
                        },
                    ));
                    r.try_dispatch_known(first.physical_offset, end, &reqs);
                    reuse::keep(&REQUESTS, reqs);
                };
                self.after_append(end, dispatch, req.wait == Wait::Durable)?
            }
            _ => PutStatus::PutOk,
        };
        reuse::keep(&PREPARED, prepared);
        reuse::keep(&TAG_VALUES, tag_values);
        if scheduled {
            self.announce_scheduled();
        }
        Ok(BatchPut {
            queue_id,
            status,
            scheduled,
        })
    }

    /// The hooks' rewrites of a batch routed to `queue_id`, one per message; only called when
    /// a hook wants one of its messages (a batch no hook wants costs nothing more).
    #[cold]
    #[inline(never)]
    fn batch_rewrites(
        &self,
        msgs: &[MessageRef<'_>],
        queue_id: u32,
    ) -> Result<Option<Vec<Option<Rewrite>>>> {
        let mut rewrites = Vec::with_capacity(msgs.len());
        let mut target: Option<(String, u32)> = None;
        for m in msgs {
            let m = MessageRef { queue_id, ..*m };
            let r = hooks::run(&self.inner.hooks, &m, Marks::of_properties(m.properties))?;
            let stored = r.as_ref().map_or(m, |r| r.apply(&m));
            match &target {
                Some((t, q)) if t != stored.topic || *q != stored.queue_id => {
                    return Err(Error::InvalidBatch {
                        reason: "put hooks sent the batch's messages to different queues".into(),
                    });
                }
                Some(_) => {}
                None => target = Some((stored.topic.to_owned(), stored.queue_id)),
            }
            if let Some(r) = &r {
                self.check_message(&r.apply(&m))?;
                self.hook_target(&r.apply(&m))?;
            }
            rewrites.push(r);
        }
        Ok(Some(rewrites))
    }

    /// True when a registered hook wants a message with these marks (hooks.rs): only then
    /// does a put run hook code.
    #[inline]
    fn hooked(&self, marks: Marks) -> bool {
        self.inner.hooks_want.selects(marks)
    }

    /// The hooks' verdict on one message, whose marks are `marks`, routed to its queue (only
    /// called when a hook wants it, which keeps the plain put free of this code): the rewrite,
    /// validated as a caller's message, and its destination checked. `create`: a system
    /// destination is created or grown (a put that may wait); otherwise a destination that
    /// does not take the queue yet declines the put. A refused or declined put gives its
    /// round-robin turn back.
    #[cold]
    #[inline(never)]
    fn rewrite(
        &self,
        routed: &MessageRef<'_>,
        routing: Routing<'_>,
        create: bool,
        marks: Marks,
    ) -> Result<Hooked> {
        let verdict = (|| {
            let Some(r) = hooks::run(&self.inner.hooks, routed, marks)? else {
                return Ok(Hooked::Unchanged);
            };
            let m = r.apply(routed);
            self.check_message(&m)?;
            if create {
                self.hook_target(&m)?;
            } else {
                match self.inner.topics.try_write_info(m.topic) {
                    Some(Some((queues, true))) if m.queue_id < queues => {}
                    _ => return Ok(Hooked::Declined),
                }
            }
            Ok(Hooked::Rewritten(r))
        })();
        if !matches!(verdict, Ok(Hooked::Unchanged | Hooked::Rewritten(_))) {
            routing.give_back(routed.topic);
        }
        verdict
    }

    /// Makes sure a hook's destination can take `msg`: a system topic is created or grown to
    /// hold its queue; any other topic is looked up (or auto-created) as for a caller's put.
    fn hook_target(&self, msg: &MessageRef<'_>) -> Result<()> {
        validate::check_topic(msg.topic)?;
        if is_system_topic(msg.topic) {
            return self.ensure_system_queue(msg.topic, msg.queue_id);
        }
        check_queue_id(msg.topic, msg.queue_id, self.writable_queues(msg.topic)?)
    }

    /// Durability wait and dispatch after an append ending at `end`. In async mode the
    /// producer dispatches inline with `dispatch` (the records' metadata is known, so nothing
    /// is re-parsed, and a consumer blocked in `poll` wakes without a thread hop); when the
    /// dispatch lock is busy it waits for the holder to dispatch them (`finish_dispatch`).
    fn after_append(
        &self,
        end: u64,
        dispatch: impl FnOnce(&Reput),
        wait: bool,
    ) -> Result<PutStatus> {
        match self.inner.config.flush_mode {
            FlushMode::Async => {
                if let Some(r) = &self.inner.reput {
                    dispatch(r);
                    self.finish_dispatch(r, end);
                }
                Ok(PutStatus::PutOk)
            }
            FlushMode::Sync => match &self.inner.flush {
                Some(f) if !wait => {
                    // Pipelined: start the group commit; `wait_durable` confirms it later.
                    f.request_flush(end);
                    Ok(PutStatus::PutOk)
                }
                Some(f) => {
                    let confirmed = f.wait_flushed(end, self.inner.config.sync_flush_timeout)?;
                    if confirmed {
                        self.dispatch_through(end)?;
                    }
                    Ok(if confirmed {
                        PutStatus::PutOk
                    } else {
                        PutStatus::FlushDiskTimeout
                    })
                }
                None => {
                    // In-memory store: nothing to flush.
                    self.dispatch_through(end)?;
                    Ok(PutStatus::PutOk)
                }
            },
        }
    }

    /// A timer or delayed message was appended: the timer engine looks at its sources.
    fn announce_scheduled(&self) {
        if let Some(t) = &self.inner.timers {
            t.announce();
        }
    }

    /// `finish_dispatch` of a `Wait::NoWait` put, through its `wake_via` (off the caller's
    /// lock). Out of line: the quick put's code stays compact.
    #[cold]
    #[inline(never)]
    fn finish_dispatch_via(&self, r: &Reput, end: u64, wake_via: Option<WakeVia<'_>>) {
        let finish = || self.finish_dispatch(r, end);
        match wake_via {
            Some(w) => w(&finish),
            None => finish(),
        }
    }

    /// Async mode, after a producer's inline dispatch: when a put returns, its record is in
    /// its consume queue, for every handle. A handle of this store would catch dispatch up
    /// before it reads (`Store::catch_up`), but a read-only follower cannot dispatch: it reads
    /// the units the writers wrote. One comparison when the inline dispatch did it; else the
    /// records are dispatched here, waiting for the dispatch lock when another thread holds
    /// it. A dispatch failure is not the put's (its record is stored): it stays recorded in
    /// the reput service, which retries it, and the record reaches its queue then.
    fn finish_dispatch(&self, r: &Reput, end: u64) {
        if r.dispatched_offset() >= end {
            return;
        }
        r.try_dispatch();
        if r.dispatched_offset() < end {
            if let Err(e) = r.dispatch_all() {
                r.record_error(&e);
            }
        }
    }

    /// Read-your-writes: when `put` returns, its record is in its consume queue. Usually the
    /// putting thread dispatches itself (one uncontended try-lock); if another thread holds
    /// the dispatch lock, wait for it.
    fn dispatch_through(&self, end: u64) -> Result<()> {
        if let Some(r) = &self.inner.reput {
            r.try_dispatch();
            if r.dispatched_offset() < end {
                r.dispatch_all()?;
            }
        }
        Ok(())
    }

    /// Appends one record the store itself writes into a system topic (a timer's cancel or
    /// reschedule record, store/timer/control.rs): validated as a caller's message, its queue
    /// created if needed, no hook run, and waited for as `put` waits.
    ///
    /// # Errors
    /// As `put`.
    pub(in crate::store) fn put_internal(&self, msg: &MessageRef<'_>) -> Result<PutResult> {
        self.append_internal(msg, true)
    }

    /// `put_internal`; `ensure`: create or grow the queue as needed, else the caller knows it
    /// exists (a committed transaction's re-put to its real topic, store/txn/, leaves the
    /// topic's settings as they are, whatever its permission).
    ///
    /// # Errors
    /// As `put`.
    pub(in crate::store) fn append_internal(
        &self,
        msg: &MessageRef<'_>,
        ensure: bool,
    ) -> Result<PutResult> {
        self.check_writable()?;
        validate::check_sizes(
            msg.body.len(),
            msg.properties.len(),
            self.inner.max_message_size,
        )?;
        let checked = properties::check_encoded(msg.properties)?;
        if ensure {
            self.ensure_system_queue(msg.topic, msg.queue_id)?;
        }
        let prepared = Prepared::new(*msg)?;
        let appended = self.inner.commit_log.put(&prepared)?;
        let code = tags::of_record(
            msg.topic,
            msg.properties,
            checked.tags,
            appended.store_timestamp,
        );
        let req = known_request(msg, &appended, code);
        let end = appended.physical_offset + u64::from(appended.size);
        let status = self.after_append(
            end,
            |r| r.try_dispatch_known(appended.physical_offset, end, &[req]),
            true,
        )?;
        Ok(PutResult {
            status,
            appended,
            queue_id: msg.queue_id,
            scheduled: false,
        })
    }

    /// `append_internal` of several records for one queue (they all name it), in one append
    /// (they must fit one commit-log file); pushes each record's `Appended` to `out`.
    ///
    /// # Errors
    /// As `put_messages`.
    pub(in crate::store) fn append_internal_batch(
        &self,
        msgs: &[MessageRef<'_>],
        ensure: bool,
        out: &mut Vec<Appended>,
    ) -> Result<PutStatus> {
        self.check_writable()?;
        let Some(first) = msgs.first() else {
            return Ok(PutStatus::PutOk);
        };
        let mut prepared = Vec::with_capacity(msgs.len());
        let mut tag_values = Vec::with_capacity(msgs.len());
        for m in msgs {
            if m.topic != first.topic || m.queue_id != first.queue_id {
                return Err(Error::InvalidBatch {
                    reason: "a batch must target one topic and queue".into(),
                });
            }
            validate::check_sizes(
                m.body.len(),
                m.properties.len(),
                self.inner.max_message_size,
            )?;
            tag_values.push(properties::check_encoded(m.properties)?.tags);
            prepared.push(Prepared::new(*m)?);
        }
        if ensure {
            self.ensure_system_queue(first.topic, first.queue_id)?;
        }
        let start = out.len();
        self.inner.commit_log.put_batch(&prepared, out)?;
        let appended = out.get(start..).unwrap_or(&[]);
        let (Some(a0), Some(last)) = (appended.first(), appended.last()) else {
            return Ok(PutStatus::PutOk);
        };
        let end = last.physical_offset + u64::from(last.size);
        let rule = tags::TopicRule::of_topic(first.topic);
        let dispatch = |r: &Reput| {
            let reqs: Vec<DispatchRequest<'_>> = prepared
                .iter()
                .zip(appended)
                .zip(&tag_values)
                .map(|((p, a), &t)| {
                    known_request(&p.msg, a, rule.code(p.msg.properties, t, a.store_timestamp))
                })
                .collect();
            r.try_dispatch_known(a0.physical_offset, end, &reqs);
        };
        self.after_append(end, dispatch, true)
    }

    /// The commit log's file size (a batch appended in one piece must fit one file).
    pub(in crate::store) fn commit_log_file_size(&self) -> u64 {
        self.inner.commit_log.files().file_size()
    }

    pub(super) fn check_writable(&self) -> Result<()> {
        self.check_usable()?;
        if self.inner.config.read_only {
            return Err(Error::ReadOnly);
        }
        if let Some(cause) = self.inner.flush.as_ref().and_then(|f| f.poisoned()) {
            return Err(Error::Poisoned { cause });
        }
        Ok(())
    }

    /// Validates sizes, properties and, for a message a hook wants, what the hooks check
    /// (hooks.rs); returns the TAGS value and the message's marks. Inline, as every put's
    /// first step; the hooks' checks, which plain puts skip, are out of line.
    #[inline(always)]
    pub(in crate::store) fn check_message<'m>(
        &self,
        m: &MessageRef<'m>,
    ) -> Result<properties::Checked<'m>> {
        validate::check_sizes(
            m.body.len(),
            m.properties.len(),
            self.inner.max_message_size,
        )?;
        let checked = properties::check_encoded(m.properties)?;
        if self.hooked(checked.marks) {
            self.check_hooked(m, checked.marks)?;
        }
        Ok(checked)
    }

    /// The checks of the hooks that want `m`, whose marks are `marks`.
    #[cold]
    #[inline(never)]
    fn check_hooked(&self, m: &MessageRef<'_>, marks: Marks) -> Result<()> {
        hooks::check(&self.inner.hooks, m, marks)
    }

    /// The write queue count of a topic that accepts sends, auto-creating it if allowed.
    pub(in crate::store) fn writable_queues(&self, topic: &str) -> Result<u32> {
        self.inner.topics.sync()?;
        let info = match self.inner.topics.write_info(topic) {
            Some(info) => info,
            None => {
                validate::check_topic(topic)?;
                if is_system_topic(topic) {
                    return Err(system_topic(topic));
                }
                self.auto_create_topic(topic)?
            }
        };
        check_send_allowed(topic, info)
    }
}

/// The write queue count of a topic found with `(queues, writable)`, unless sends to it are
/// refused (a system topic, or no write permission).
#[inline]
fn check_send_allowed(topic: &str, (queues, writable): (u32, bool)) -> Result<u32> {
    if is_system_topic(topic) {
        return Err(system_topic(topic));
    }
    if !writable {
        return Err(Error::TopicNotWritable {
            topic: topic.to_owned(),
        });
    }
    Ok(queues)
}

/// The error of a caller's send to, or change of, a system topic: only put hooks write one.
pub(super) fn system_topic(topic: &str) -> Error {
    Error::InvalidTopic {
        topic: topic.to_owned(),
        reason: "reserved system topic",
    }
}

#[inline]
fn check_queue_id(topic: &str, queue_id: u32, queues: u32) -> Result<()> {
    if queue_id >= queues {
        return Err(Error::InvalidQueue {
            topic: topic.to_owned(),
            queue_id,
            queue_count: queues,
        });
    }
    Ok(())
}

/// True when `rewrite` stores its message for later delivery (`PutResult::scheduled`).
#[inline(always)]
fn is_scheduled(rewrite: Option<&Rewrite>) -> bool {
    rewrite.is_some_and(|r| {
        r.topic == tags::SCHEDULE_TOPIC || r.topic == crate::message::timer::TIMER_TOPIC
    })
}

/// What the hooks made of one message (`Store::rewrite`).
enum Hooked {
    /// Stored as the caller gave it.
    Unchanged,
    /// Stored as this rewrite says.
    Rewritten(Rewrite),
    /// A put that must not wait declines: the rewrite's destination needs creating.
    Declined,
}

thread_local! {
    // The batch path's temporary vectors, kept per thread between calls (util/reuse.rs).
    static PREPARED: Cell<Vec<Prepared<'static>>> = const { Cell::new(Vec::new()) };
    static TAG_VALUES: Cell<Vec<Option<&'static str>>> = const { Cell::new(Vec::new()) };
    static REQUESTS: Cell<Vec<DispatchRequest<'static>>> = const { Cell::new(Vec::new()) };
}

/// What dispatch would decode from the record of `msg` appended as `a`, known already: inline
/// dispatch skips re-parsing it. `properties` lacks only the record-CRC property the appender
/// added, which no dispatcher reads. `tags_code` is the record's (`message::tags`).
fn known_request<'a>(msg: &MessageRef<'a>, a: &Appended, tags_code: i64) -> DispatchRequest<'a> {
    DispatchRequest {
        topic: msg.topic,
        queue_id: msg.queue_id,
        commit_log_offset: a.physical_offset,
        size: a.size,
        tags_code,
        store_timestamp: a.store_timestamp,
        queue_offset: a.queue_offset,
        sysflag: msg.sysflag,
        properties: msg.properties,
        prepared_transaction_offset: msg.prepared_transaction_offset,
    }
}
