//! `QueueCursor`: a pull consumer's position in one queue, and `Store.poll_cursors`, which reads
//! (or waits for) a set of cursors and advances them in one call.
//!
//! Why in the binding: a poll that returns one freshly arrived message is on the end-to-end
//! latency path. Doing the read, the wait, the tag filter, the position bookkeeping and the
//! message list in one native call keeps the consumer's Python work after a wake-up to a
//! single return, instead of a loop over per-queue results.
//!
//! Invariant: a cursor's position only moves forward here, and only if the cursor is still
//! `live` (assigned and not paused) and nobody moved it (seek, rebalance) while the call read
//! without the GIL. That check and the move run under the consumer's own lock, the lock its
//! Python methods take.

use std::sync::Arc;
use std::time::Duration;

use mqlite::{GetResult, GetStatus, Store, TagFilter};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::args::{self, FilterTag, Float, Int, OwnedStr, Str, TopicName};
use crate::errors::PyMqError;
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
        })
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

    /// The SQL92 selector applied after the tag filter (None: no SQL filter).
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

/// Reads the cursors in order until `max` messages are collected; if none had anything, waits
/// up to `timeout` for data and reads once more. One result per cursor read, in order.
fn read_or_wait(
    store: &Store,
    snaps: &[Snapshot],
    max: usize,
    timeout: Option<Duration>,
) -> mqlite::Result<Vec<GetResult>> {
    let read_all = || -> mqlite::Result<(Vec<GetResult>, usize)> {
        let mut out = Vec::with_capacity(snaps.len());
        let mut got = 0;
        for s in snaps {
            if got >= max {
                break;
            }
            let r = store.get_messages(&s.topic, s.queue_id, s.position, max - got, &s.filter)?;
            got += r.records.len();
            out.push(r);
        }
        Ok((out, got))
    };
    let (out, got) = read_all()?;
    if got > 0 || timeout.is_some_and(|t| t.is_zero()) {
        return Ok(out);
    }
    let waits: Vec<(&str, u32, u64)> = snaps
        .iter()
        .map(|s| (&*s.topic, s.queue_id, s.position))
        .collect();
    if store.wait_for_messages(&waits, timeout)? {
        return Ok(read_all()?.0);
    }
    Ok(out)
}

/// True when a read with this outcome moves the position on although it returned nothing.
fn skips(r: &GetResult) -> bool {
    r.status == GetStatus::NoMatchedMessage
        || r.status == GetStatus::OffsetTooSmall
        || (r.status == GetStatus::OffsetOverflowBadly && r.max_offset > 0)
}

/// `Store.poll_cursors`: see the module doc. `lock` is the consumer's lock (an RLock), taken
/// around the check-and-advance step.
pub fn poll_cursors(
    py: Python<'_>,
    store: &Store,
    cursors: &Bound<'_, PyList>,
    max_messages: Int,
    timeout: Option<Float>,
    lock: &Bound<'_, PyAny>,
) -> PyResult<Py<PyList>> {
    let max = args::max_messages(&max_messages)?;
    let timeout = timeout.map(args::timeout).transpose()?;
    let mut cs = Vec::with_capacity(cursors.len());
    let mut snaps = Vec::with_capacity(cursors.len());
    for c in cursors.iter() {
        let c = c.cast_into::<PyQueueCursor>()?;
        {
            let b = c.borrow();
            snaps.push(Snapshot {
                topic: Arc::clone(&b.topic),
                queue_id: b.queue_id,
                position: b.position,
                filter: Arc::clone(&b.filter),
            });
        }
        cs.push(c);
    }
    let results = py
        .detach(|| read_or_wait(store, &snaps, max, timeout))
        .map_err(PyMqError)?;
    lock.call_method0(intern!(py, "acquire"))?;
    let applied = advance(py, &cs, &snaps, results);
    let released = lock.call_method0(intern!(py, "release"));
    let out = applied?;
    released?;
    Ok(out)
}

/// Advances every still-live, unmoved cursor past its result and collects the messages (SQL
/// filter applied). The consumer's lock is held.
fn advance(
    py: Python<'_>,
    cs: &[Bound<'_, PyQueueCursor>],
    snaps: &[Snapshot],
    results: Vec<GetResult>,
) -> PyResult<Py<PyList>> {
    let out = PyList::empty(py);
    for ((c, snap), r) in cs.iter().zip(snaps).zip(results) {
        let mut cur = c.borrow_mut();
        if !cur.live || cur.position != snap.position {
            continue;
        }
        if r.records.is_empty() {
            if skips(&r) {
                cur.position = r.next_offset;
            }
            continue;
        }
        cur.position = r.next_offset;
        let sql = cur.sql.as_ref().map(|s| s.clone_ref(py));
        let queue = cur.queue.as_ref().map(|q| q.clone_ref(py));
        drop(cur);
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
                    let props = m.bind(py).getattr(intern!(py, "properties"))?;
                    if sql
                        .call_method1(intern!(py, "matches"), (props,))?
                        .is_truthy()?
                    {
                        out.append(m)?;
                    }
                }
            }
        }
    }
    Ok(out.unbind())
}
