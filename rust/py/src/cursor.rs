//! `QueueCursor`: a pull consumer's position in one queue, and `Store.poll_cursors`, which reads
//! (or waits for) a set of cursors and advances them in one call.
//!
//! Why in the binding: a poll that returns one freshly arrived message is on the end-to-end
//! latency path. Doing the read, the wait, the tag filter, the position bookkeeping and the
//! message list in one native call keeps the consumer's Python work after a wake-up to a
//! single return, instead of a loop over per-queue results.
//!
//! Cost: a poll snapshots and reads its cursors in batches that grow, and stops at its limit,
//! so it costs in proportion to the queues it reads rather than to the queues assigned; only a
//! poll that finds nothing anywhere has read (and then waits for) them all.
//!
//! Invariant: a cursor's position only moves forward here, and only if the cursor is still
//! `live` (assigned and not paused) and nobody moved it (seek, rebalance) while the call read
//! without the GIL. That check and the move run under the consumer's own lock, the lock its
//! Python methods take. A poll moves cursors only once it has its whole result: if building or
//! filtering the messages raises, no cursor moves (see `advance`).
//!
//! Per-queue failures: a cursor whose read fails (damage, a topic that forbids reads) keeps
//! its position, so nothing of its queue is skipped, and carries the error (`error`) until a
//! read of it succeeds; the other cursors are read and advanced as usual, and the wait is for
//! them only. The call raises a queue's error only when every cursor it read failed. Errors of
//! the store itself (closed, used after fork) are raised at once.
//!
//! Expired messages: a cursor below its queue's minimum (retention deleted the files under a
//! slow consumer) moves up to the minimum, and `on_skip(cursor, from, to)` is called once for
//! that jump, so the consumer can say which offsets it never delivered.
//!
//! Byte bound: a poll returns at most `max_bytes` bytes of records over all its cursors (whole
//! stored records), and at most `max_messages` records. With `oversized_first` a first record
//! larger than the bound is returned alone; without it (a consumer that already holds messages)
//! nothing over the bound is returned, and `on_full(cursor)` names the cursor whose next record
//! did not fit, so the caller waits for room instead of polling again at once.

use std::sync::Arc;
use std::time::Duration;

use mqlite::{Error, GetResult, GetStatus, ReadLimit, Store, TagFilter};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::args::{self, FilterTag, Float, Int, OwnedStr, Str, TopicName};
use crate::errors::{to_pyerr, PyMqError};
use crate::message::messages_from;
use crate::queue::PyMessageQueue;

/// One assigned queue's state in a pull consumer (mutable: the consumer moves it).
#[pyclass(module = "mqlite._core", name = "QueueCursor")]
#[derive(Debug)]
pub struct PyQueueCursor {
    mq: Py<PyAny>,
    /// `mq` when it is a `MessageQueue` (always, from the consumers): the queue the messages
    /// read through this cursor report (see `ReadBatch::mq`).
    queue: Option<Py<PyMessageQueue>>,
    topic: Arc<str>,
    queue_id: u32,
    /// The next offset to read.
    #[pyo3(get)]
    position: u64,
    tags: Option<Py<PyAny>>,
    sql: Option<Py<PyAny>>,
    /// The offset last written to the offset file for this queue (None: never).
    #[pyo3(get)]
    committed: Option<u64>,
    /// Assigned and not paused: only a live cursor is advanced by a poll.
    #[pyo3(get, set)]
    live: bool,
    filter: Arc<TagFilter>,
    /// The failure of the latest read of this queue by a poll, with its message (compared to
    /// tell a new failure from the same one again); None once a read succeeds.
    error: Option<(String, Py<PyAny>)>,
}

#[pymethods]
impl PyQueueCursor {
    #[new]
    #[pyo3(signature = (mq, topic, queue_id, position, tags = None, sql = None))]
    fn new(
        mq: Py<PyAny>,
        topic: Str<'_, TopicName>,
        queue_id: Int,
        position: Int,
        tags: Option<Py<PyAny>>,
        sql: Option<Py<PyAny>>,
        py: Python<'_>,
    ) -> PyResult<Self> {
        let queue_id = args::queue_id(&queue_id)?;
        let position = args::offset(&position, "position")?;
        let filter = match &tags {
            Some(t) => {
                let names: Vec<OwnedStr<FilterTag>> = t.bind(py).extract()?;
                TagFilter::tags(names.iter().map(|n| &**n))
            }
            None => TagFilter::all(),
        };
        let queue = mq
            .bind(py)
            .cast::<PyMessageQueue>()
            .ok()
            .map(|q| q.clone().unbind());
        Ok(PyQueueCursor {
            mq,
            queue,
            topic: Arc::from(&*topic),
            queue_id,
            position,
            tags,
            sql,
            committed: None,
            live: false,
            filter: Arc::new(filter),
            error: None,
        })
    }

    /// The exception the latest poll's read of this queue raised (None: it read fine). The
    /// queue's position stays where that read started.
    #[getter]
    fn error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.error.as_ref().map(|(_, e)| e.clone_ref(py))
    }

    #[setter]
    fn set_position(&mut self, position: Int) -> PyResult<()> {
        self.position = args::offset(&position, "position")?;
        Ok(())
    }

    #[setter]
    fn set_committed(&mut self, committed: Option<Int>) -> PyResult<()> {
        self.committed = committed
            .map(|c| args::offset(&c, "committed"))
            .transpose()?;
        Ok(())
    }

    /// The queue (a `MessageQueue`).
    #[getter]
    fn mq(&self, py: Python<'_>) -> Py<PyAny> {
        self.mq.clone_ref(py)
    }

    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    #[getter]
    fn queue_id(&self) -> u32 {
        self.queue_id
    }

    /// The subscription's tag list (None: every tag).
    #[getter]
    fn tags(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.tags.as_ref().map(|t| t.clone_ref(py))
    }

    /// The SQL92 selector applied after the tag filter (None: no SQL filter); a poll keeps the
    /// messages for which its `_accepts(message)` is true.
    #[getter]
    fn sql(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.sql.as_ref().map(|t| t.clone_ref(py))
    }

    fn __repr__(&self) -> String {
        format!(
            "QueueCursor({}:{} position={} committed={:?} live={})",
            self.topic, self.queue_id, self.position, self.committed, self.live
        )
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.mq)?;
        if let Some(q) = &self.queue {
            visit.call(q)?;
        }
        if let Some(t) = &self.tags {
            visit.call(t)?;
        }
        if let Some(s) = &self.sql {
            visit.call(s)?;
        }
        if let Some((_, e)) = &self.error {
            visit.call(e)?;
        }
        Ok(())
    }
}

/// What a poll read from one cursor: where it started and the store's answer.
struct Snapshot {
    topic: Arc<str>,
    queue_id: u32,
    position: u64,
    filter: Arc<TagFilter>,
}

impl Snapshot {
    fn of(c: &PyQueueCursor) -> Self {
        Snapshot {
            topic: Arc::clone(&c.topic),
            queue_id: c.queue_id,
            position: c.position,
            filter: Arc::clone(&c.filter),
        }
    }
}

/// How many cursors a poll reads in its first batch, and by what factor each further batch
/// grows: few GIL hand-offs for a poll that reads every queue, little snapshotting for one
/// that finds its messages in the first queues.
const FIRST_BATCH: usize = 16;
const BATCH_GROWTH: usize = 4;

/// One cursor's read: the store's answer, or the error of that queue.
type Read = mqlite::Result<GetResult>;

/// True for an error of the store as a whole rather than of the queue read.
fn store_wide(e: &Error) -> bool {
    matches!(e, Error::Closed | Error::UsedAfterFork)
}

/// What the reads of a poll took so far, over all its cursors.
#[derive(Debug, Default, Clone, Copy)]
struct Taken {
    messages: usize,
    bytes: usize,
    /// A record did not fit the byte bound: the poll is over.
    full: bool,
}

impl Taken {
    /// The poll has all it may take.
    fn done(&self, limit: ReadLimit) -> bool {
        self.full || self.messages >= limit.messages || self.bytes >= limit.bytes
    }
}

/// Reads `snaps` in order, appending one result per cursor read to `out`, until `limit` (over
/// the whole poll, `taken` included) is reached. Fails only for an error of the store as a
/// whole.
fn read_into(
    store: &Store,
    snaps: &[Snapshot],
    limit: ReadLimit,
    taken: &mut Taken,
    out: &mut Vec<Read>,
) -> mqlite::Result<()> {
    for s in snaps {
        if taken.done(limit) {
            break;
        }
        let left = ReadLimit {
            messages: limit.messages - taken.messages,
            bytes: limit.bytes - taken.bytes,
            oversized_first: limit.oversized_first && taken.messages == 0,
        };
        match store.get_messages_within(&s.topic, s.queue_id, s.position, left, &s.filter) {
            Ok(r) => {
                taken.messages += r.records.len();
                taken.bytes += r.buffer.len();
                taken.full = r.byte_limited;
                out.push(Ok(r));
            }
            Err(e) if store_wide(&e) => return Err(e),
            Err(e) => out.push(Err(e)),
        }
    }
    Ok(())
}

/// Reads the cursors in order until `limit` (over all of them) is reached, unless `read` is
/// false (the caller just read them all and found nothing); if none had anything, waits up to
/// `timeout` for data in the queues that read without error, and reads once more. One result
/// per cursor read, in order, and whether the poll is over: something was read, or a record did
/// not fit the byte bound, or data arrived (or the store closed) while waiting, or the timeout
/// is zero, or no queue read without error. `previous` are the results of the caller's read
/// when `read` is false. Fails only for an error of the store as a whole.
fn read_or_wait(
    store: &Store,
    snaps: &[Snapshot],
    limit: ReadLimit,
    timeout: Duration,
    previous: Option<Vec<Read>>,
) -> mqlite::Result<(Vec<Read>, bool)> {
    let read_all = || -> mqlite::Result<(Vec<Read>, Taken)> {
        let mut out = Vec::with_capacity(snaps.len());
        let mut taken = Taken::default();
        read_into(store, snaps, limit, &mut taken, &mut out)?;
        Ok((out, taken))
    };
    let out = match previous {
        Some(out) => out,
        None => {
            let (out, taken) = read_all()?;
            if taken.messages > 0 || taken.full || timeout.is_zero() {
                return Ok((out, true));
            }
            out
        }
    };
    // Not the failed queues: their data is there, unread, and would end the wait at once.
    let waits: Vec<(&str, u32, u64)> = snaps
        .iter()
        .zip(&out)
        .filter(|(_, r)| r.is_ok())
        .map(|(s, _)| (&*s.topic, s.queue_id, s.position))
        .collect();
    if waits.is_empty() {
        return Ok((out, true));
    }
    if store.wait_for_messages(&waits, Some(timeout))? {
        return Ok((read_all()?.0, true));
    }
    Ok((out, false))
}

/// True when a read with this outcome moves the position on although it returned nothing.
fn skips(r: &GetResult) -> bool {
    r.status == GetStatus::NoMatchedMessage
        || r.status == GetStatus::OffsetTooSmall
        || (r.status == GetStatus::OffsetOverflowBadly && r.max_offset > 0)
}

/// The consumer's callbacks of a poll (called with its lock held): `on_error(cursor)` when a
/// cursor's error changed, `on_skip(cursor, from, to)` when a cursor moved past expired
/// messages, `on_full(cursor)` when the cursor's next record did not fit the byte bound.
#[derive(Debug, Clone, Copy)]
pub struct Hooks<'a, 'py> {
    pub on_error: Option<&'a Bound<'py, PyAny>>,
    pub on_skip: Option<&'a Bound<'py, PyAny>>,
    pub on_full: Option<&'a Bound<'py, PyAny>>,
}

/// `Store.poll_cursors`: see the module doc. `lock` is the consumer's lock (an RLock), taken
/// around the check-and-advance step; `on_error`, if given, is called (lock held) with each
/// cursor whose `error` changed: a read of it failed, failed differently, or read again.
/// `bound` is the byte bound and `oversized_first` (see the module doc); None: no byte bound.
/// The cursors are read in order from the one at index `start` (modulo their number) on, and
/// round to the one before it: the caller's rotation without a rotated copy of its list.
#[allow(clippy::too_many_arguments)]
pub fn poll_cursors(
    py: Python<'_>,
    store: &Store,
    cursors: &Bound<'_, PyList>,
    max_messages: Int,
    timeout: Option<Float>,
    lock: &Bound<'_, PyAny>,
    bound: (Option<Int>, bool),
    start: usize,
    hooks: Hooks<'_, '_>,
) -> PyResult<Py<PyList>> {
    let limit = ReadLimit {
        messages: args::max_messages(&max_messages)?,
        bytes: match &bound.0 {
            Some(b) => args::max_bytes(b)?,
            None => usize::MAX,
        },
        oversized_first: bound.1,
    };
    let timeout = timeout.map(args::timeout).transpose()?;
    let n = cursors.len();
    let mut cs = Vec::with_capacity(n.min(FIRST_BATCH));
    let mut snaps = Vec::with_capacity(n.min(FIRST_BATCH));
    // First a read of the cursors in batches, each snapshotted just before it is read: a poll
    // whose first queues have data (the rotation starts at the queues not served last) costs
    // in proportion to the queues it reads, not to the queues assigned.
    let mut taken = Taken::default();
    let mut first = Vec::new();
    let mut batch = FIRST_BATCH;
    while cs.len() < n && !taken.done(limit) {
        let from = cs.len();
        for i in from..n.min(from.saturating_add(batch)) {
            let c = cursors
                .get_item(start.wrapping_add(i) % n)?
                .cast_into::<PyQueueCursor>()?;
            snaps.push(Snapshot::of(&c.borrow()));
            cs.push(c);
        }
        py.detach(|| read_into(store, &snaps[from..], limit, &mut taken, &mut first))
            .map_err(PyMqError)?;
        batch = batch.saturating_mul(BATCH_GROWTH);
    }
    let over = taken.messages > 0 || taken.full || timeout.is_some_and(|t| t.is_zero());
    let results = if over {
        first
    } else {
        // Every cursor was read and had nothing: wait for them, in slices, running signal
        // handlers between two (see `interrupt.rs`); a poll that wakes to a message still
        // returns from its first release of the GIL.
        let deadline = crate::interrupt::deadline(timeout);
        let mut previous = Some(first);
        loop {
            let slice = crate::interrupt::slice(deadline);
            let (results, done) = py
                .detach(|| read_or_wait(store, &snaps, limit, slice, previous.take()))
                .map_err(PyMqError)?;
            if done || crate::interrupt::passed(deadline) {
                break results;
            }
            py.check_signals()?;
        }
    };
    lock.call_method0(intern!(py, "acquire"))?;
    let applied = advance(py, &cs, &snaps, results, hooks);
    let released = lock.call_method0(intern!(py, "release"));
    let out = applied?;
    released?;
    Ok(out)
}

/// Collects the messages of every still-live, unmoved cursor (SQL filter applied), then moves
/// those cursors past what they read; records each one's failure or success (`on_error` for
/// changes) and calls `on_skip` for each cursor moved past expired messages. When every
/// cursor read failed, raises the first failure. The consumer's lock is held.
///
/// All or nothing: building or filtering the messages runs Python code that may raise (a
/// `KeyboardInterrupt`, a `MemoryError`, a selector's own error). Such an error returns before
/// any cursor moved, so nothing read by this call is skipped: the next poll reads it again.
/// A cursor thus only passes messages this call returns or its filter rejected.
fn advance(
    py: Python<'_>,
    cs: &[Bound<'_, PyQueueCursor>],
    snaps: &[Snapshot],
    results: Vec<Read>,
    hooks: Hooks<'_, '_>,
) -> PyResult<Py<PyList>> {
    let out = PyList::empty(py);
    let all_failed = !results.is_empty() && results.iter().all(Result::is_err);
    let mut first_error = None;
    let mut changed = Vec::new();
    // (cursor, the position read from, the position after), applied once every message is in
    // `out`.
    let mut moves: Vec<(&Bound<'_, PyQueueCursor>, u64, u64)> = Vec::with_capacity(cs.len());
    // The moves past expired messages (OFFSET_TOO_SMALL), reported once applied.
    let mut expired = Vec::new();
    // The cursor whose next record did not fit the byte bound (the last one read).
    let mut full = None;
    for ((c, snap), r) in cs.iter().zip(snaps).zip(results) {
        let (sql, queue, r) = {
            let mut cur = c.borrow_mut();
            if !cur.live || cur.position != snap.position {
                continue;
            }
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    let err = to_pyerr(&e);
                    let text = e.to_string();
                    if cur.error.as_ref().is_none_or(|(t, _)| *t != text) {
                        cur.error = Some((text, err.value(py).clone().into_any().unbind()));
                        changed.push(c);
                    }
                    first_error.get_or_insert(err);
                    continue;
                }
            };
            if cur.error.take().is_some() {
                changed.push(c);
            }
            if r.byte_limited {
                full = Some(c);
            }
            if r.records.is_empty() {
                if skips(&r) {
                    moves.push((c, snap.position, r.next_offset));
                    if r.status == GetStatus::OffsetTooSmall {
                        expired.push((c, snap.position, r.next_offset));
                    }
                }
                continue;
            }
            (
                cur.sql.as_ref().map(|s| s.clone_ref(py)),
                cur.queue.as_ref().map(|q| q.clone_ref(py)),
                r,
            )
        };
        let next = r.next_offset;
        let msgs = messages_from(py, r.buffer, &r.records, queue)?;
        match sql {
            None => {
                for m in msgs {
                    out.append(m)?;
                }
            }
            Some(sql) => {
                let sql = sql.bind(py);
                for m in msgs {
                    // `MessageSelector._accepts`: a message whose properties the filter cannot
                    // evaluate is "no match" there, so only the process's own errors raise.
                    if sql
                        .call_method1(intern!(py, "_accepts"), (&m,))?
                        .is_truthy()?
                    {
                        out.append(m)?;
                    }
                }
            }
        }
        moves.push((c, snap.position, next));
    }
    for (c, from, next) in moves {
        let mut cur = c.borrow_mut();
        // The filter ran Python code: a cursor moved meanwhile (on this thread, the lock being
        // reentrant) keeps where it was put.
        if cur.position == from {
            cur.position = next;
        }
    }
    if let Some(f) = hooks.on_skip {
        for (c, from, to) in expired {
            // Moved by this call (not put elsewhere by a seek meanwhile).
            if c.borrow().position == to {
                f.call1((c, from, to))?;
            }
        }
    }
    if let Some(f) = hooks.on_error {
        for c in changed {
            f.call1((c,))?;
        }
    }
    if let (Some(f), Some(c)) = (hooks.on_full, full) {
        f.call1((c,))?;
    }
    match first_error {
        Some(e) if all_failed => Err(e),
        _ => Ok(out.unbind()),
    }
}
