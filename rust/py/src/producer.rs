//! `Producer`: message conversion, queue selection (round robin over the topic's write
//! queues, or an explicit queue id) and the send calls, with the GIL released while the store
//! works.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use mqlite::message::builder::{Compression, Outgoing};
use mqlite::message::compression::Codec;
use mqlite::message::msg_id::UniqueIdGenerator;
use mqlite::{
    Appended, BatchPut, FlushMode, MessageRef, PutRequest, PutResult, PutStatus, RoundRobin,
    Routing, Store, Wait,
};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString, PyTuple};

use crate::args::{self, CompressionOption, GroupName, Int, Str};
use crate::errors::PyMqError;
use crate::message::{read_message, topic_str, Held, PySendBatchResult, PySendResult};

/// Sends messages to a store. `mqlite.Producer` subclasses it, so `send` is this native
/// method with no Python frame in between.
#[pyclass(frozen, subclass, module = "mqlite._core", name = "Producer")]
#[derive(Debug)]
pub struct PyProducer {
    pub store: Arc<Store>,
    pub group: String,
    /// Round-robin turns, one per topic.
    pub next_queue: RoundRobin,
    /// The store's unique-id generator (`Store::unique_ids`).
    pub ids: Arc<UniqueIdGenerator>,
    /// Why sends are refused (`Closed`), set by `_mark_closed`: 0 while open.
    pub closed: AtomicU8,
    /// The store's path and the process that opened it, for the error of a refused send.
    pub store_path: String,
    pub opened_by: u32,
    /// Compression of single sends, when asked for (`compress_over`).
    pub compress: Option<Compression>,
}

/// The settings of `Producer(..., compress_over=, compression=, compression_level=)`.
fn compression_from_args(
    over: Option<Int>,
    codec: &str,
    level: Option<Int>,
) -> PyResult<Option<Compression>> {
    let codec = Codec::from_name(codec).ok_or_else(|| {
        crate::errors::InvalidConfigError::new_err(format!(
            "compression must be 'zlib', 'lz4' or 'zstd', not {codec:?}"
        ))
    })?;
    let level = args::option(level, "compression_level", Compression::DEFAULT_LEVEL)?;
    codec.check_level(level).map_err(PyMqError)?;
    let Some(over) = over else {
        return Ok(None);
    };
    let over = over.within(0, i64::MAX as usize, |v| {
        crate::errors::InvalidConfigError::new_err(format!(
            "compress_over must be >= 0 bytes, not {v}"
        ))
    })?;
    Ok(Some(
        Compression::new(codec, over, level).map_err(PyMqError)?,
    ))
}

/// `body` compressed by `c` with its SYSFLAG bits (`Compression::apply`), the GIL released
/// while the codec runs.
#[inline(never)]
fn compress(py: Python<'_>, c: &Compression, body: &[u8]) -> PyResult<Option<(Vec<u8>, i32)>> {
    if !c.applies_to(body.len()) {
        return Ok(None);
    }
    py.detach(|| c.apply(body)).map_err(|e| PyMqError(e).into())
}

impl PyProducer {
    /// A producer of `store` in `group`.
    pub fn create(
        store: &crate::store::PyStore,
        group: &str,
        compress: Option<Compression>,
    ) -> PyResult<Self> {
        check_group(group)?;
        let core = store.core();
        if core.is_closed() {
            return Err(PyMqError(mqlite::Error::Closed).into());
        }
        if core.is_read_only() {
            return Err(PyMqError(mqlite::Error::ReadOnly).into());
        }
        Ok(PyProducer {
            store: Arc::clone(core),
            group: group.to_owned(),
            next_queue: RoundRobin::new(std::process::id() % 1024),
            ids: core.unique_ids(),
            closed: AtomicU8::new(Closed::Open as u8),
            compress,
            store_path: store.path_str().to_owned(),
            opened_by: store.opened_by(),
        })
    }

    /// Whether sends are refused (`_mark_closed` was called).
    #[inline]
    fn is_marked_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) != Closed::Open as u8
    }

    /// The error of a send this producer refuses, naming what closed: in a process other than
    /// the store's `StoreUsedAfterForkError`, else `StoreClosedError` naming the store or the
    /// producer. The messages are the package's (`mqlite._context.ClientContext.dead`).
    fn closed_error(&self, py: Python<'_>) -> PyErr {
        let why = self.closed.load(Ordering::Acquire);
        let repr = |s: &str| {
            pyo3::types::PyString::new(py, s)
                .repr()
                .map_or_else(|_| format!("{s:?}"), |r| r.to_string())
        };
        if why == Closed::Forked as u8 || std::process::id() != self.opened_by {
            return crate::errors::StoreUsedAfterForkError::new_err(format!(
                "store {} was opened in process {}; open it again in the child (use the \
                 'spawn' start method)",
                repr(&self.store_path),
                self.opened_by
            ));
        }
        if why == Closed::Store as u8 || self.store.is_closed() {
            return crate::errors::StoreClosedError::new_err(format!(
                "store {} is closed",
                repr(&self.store_path)
            ));
        }
        crate::errors::StoreClosedError::new_err(format!(
            "producer {} is closed",
            repr(&self.group)
        ))
    }

    /// A core error of a send: a closed store is reported as `closed_error` says.
    pub(crate) fn send_error(&self, py: Python<'_>, e: mqlite::Error) -> PyErr {
        match e {
            mqlite::Error::Closed => self.closed_error(py),
            e => PyMqError(e).into(),
        }
    }
}

/// Why a producer refuses sends, worst last: a later reason replaces an earlier, milder one
/// (a producer closed before its store then reports the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Closed {
    /// Sends are accepted.
    Open = 0,
    /// `Producer.close()`.
    Producer = 1,
    /// Its store was closed.
    Store = 2,
    /// Its store is unusable in this (forked) process.
    Forked = 3,
}

impl Closed {
    /// `_mark_closed(reason=...)`: `"producer"`, `"store"` or `"fork"`.
    fn from_reason(reason: &str) -> PyResult<Self> {
        match reason {
            "producer" => Ok(Closed::Producer),
            "store" => Ok(Closed::Store),
            "fork" => Ok(Closed::Forked),
            other => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "reason must be 'producer', 'store' or 'fork', not {other:?}"
            ))),
        }
    }
}

/// The error of a send on a closed producer (`PyProducer::closed_error`).
fn dead(slf: &Bound<'_, PyProducer>) -> PyErr {
    slf.get().closed_error(slf.py())
}

#[pymethods]
impl PyProducer {
    #[new]
    #[pyo3(signature = (
        store,
        group = Str::of("DEFAULT_PRODUCER"),
        *,
        compress_over = None,
        compression = Str::of("zlib"),
        compression_level = None
    ))]
    fn py_new(
        store: &Bound<'_, PyAny>,
        group: Str<'_, GroupName>,
        compress_over: Option<Int>,
        compression: Str<'_, CompressionOption>,
        compression_level: Option<Int>,
    ) -> PyResult<Self> {
        let store = store
            .cast::<crate::store::PyStore>()
            .map_err(|_| crate::errors::type_error("store must be an mqlite._core.Store"))?;
        let compress = compression_from_args(compress_over, &compression, compression_level)?;
        Self::create(store.get(), &group, compress)
    }

    /// `(codec, compress_over, level)` when single sends are compressed, else None.
    #[getter]
    fn compression(&self) -> Option<(&'static str, usize, i32)> {
        self.compress.map(|c| (c.codec.name(), c.over, c.level))
    }

    #[getter]
    fn group(&self) -> &str {
        &self.group
    }

    /// True after `close()` or once the store is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.is_marked_closed() || self.store.is_closed()
    }

    /// Marks the producer closed: every later send fails with the error `reason` names
    /// (`"producer"`: closed itself, `"store"`: its store closed, `"fork"`: used in a forked
    /// child). A milder reason never replaces a graver one.
    #[pyo3(signature = (reason = "producer"))]
    fn _mark_closed(&self, reason: &str) -> PyResult<()> {
        let why = Closed::from_reason(reason)?;
        self.closed.fetch_max(why as u8, Ordering::AcqRel);
        Ok(())
    }

    /// Raises the error a send would raise once the producer or its store is closed (see
    /// `_mark_closed`); returns None while sends are accepted.
    fn _check_open(&self, py: Python<'_>) -> PyResult<()> {
        if self.closed() {
            return Err(self.closed_error(py));
        }
        Ok(())
    }

    /// Sends one message (`mqlite.Message`) and returns its `SendResult`.
    ///
    /// The queue is round robin over the topic's write queues, unless `queue_id` names it,
    /// `sharding_key` hashes to it (CRC32 modulo the queue count: one key keeps to one queue,
    /// hence in order) or `selector(queues, msg, arg)` returns it.
    #[pyo3(signature = (msg, queue_id = None, *, sharding_key = None, selector = None, arg = None))]
    fn send(
        slf: &Bound<'_, Self>,
        msg: &Bound<'_, PyAny>,
        queue_id: Option<Int>,
        sharding_key: Option<&Bound<'_, PyAny>>,
        selector: Option<&Bound<'_, PyAny>>,
        arg: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySendResult> {
        let py = slf.py();
        let this = slf.get();
        if this.is_marked_closed() {
            return Err(dead(slf));
        }
        if selector.is_some() {
            // Rare path: a custom selector is Python code, called by the Python subclass.
            let q = slf.call_method1(
                intern!(py, "_select"),
                (msg, queue_id.as_ref(), sharding_key, selector, arg),
            )?;
            let q = args::opt_queue_id(Some(&q.extract::<Int>()?))?;
            return this.put_one(py, msg, this.routing(q), true);
        }
        let queue_id = args::opt_queue_id(queue_id.as_ref())?;
        let routing = match sharding_key {
            None => this.routing(queue_id),
            Some(key) => this.key_routing(queue_id, key)?,
        };
        this.put_one(py, msg, routing, true)
    }
    /// Stores `msg` as a half message of transaction `txn_id` of this producer's group
    /// (`mqlite.TransactionProducer`): invisible in its topic until the transaction commits.
    /// The queue is `queue_id` or round robin.
    #[pyo3(signature = (msg, txn_id, queue_id = None))]
    fn _send_half(
        slf: &Bound<'_, Self>,
        msg: &Bound<'_, PyAny>,
        txn_id: &str,
        queue_id: Option<Int>,
    ) -> PyResult<PySendResult> {
        let py = slf.py();
        let this = slf.get();
        if this.is_marked_closed() {
            return Err(dead(slf));
        }
        let queue_id = args::opt_queue_id(queue_id.as_ref())?;
        let routing = this.routing(queue_id);
        let now = this.store.config().clock.now_ms();
        let uniq = this.ids.next_id(now);
        let mut props = Vec::new();
        let held = read_message(msg, &mut props, uniq.as_str())?;
        let out = held.outgoing()?;
        let m = out.to_ref(&props, now).map_err(PyMqError)?;
        let put = py
            .detach(|| this.store.txn_prepare(&m, routing, &this.group, txn_id))
            .map_err(|e| this.send_error(py, e))?;
        Ok(PySendResult {
            topic: held.topic.clone().unbind(),
            queue_id: put.queue_id,
            ok: put.status == PutStatus::PutOk,
            scheduled: false,
            appended: put.appended,
            uniq,
        })
    }

    /// Stores every `Message` of `msgs` as a half message of transaction `txn_id` in one call
    /// (halves.rs); `queues`: each message's queue, None for round robin. Returns the count.
    #[pyo3(signature = (msgs, txn_id, queues = None))]
    fn _send_halves(
        slf: &Bound<'_, Self>,
        msgs: &Bound<'_, PyList>,
        txn_id: &str,
        queues: Option<&Bound<'_, PyList>>,
    ) -> PyResult<usize> {
        let this = slf.get();
        if this.is_marked_closed() {
            return Err(dead(slf));
        }
        crate::halves::send_halves(this, slf.py(), msgs, txn_id, queues)
    }

    /// Appends one message without waiting for the disk, for `Producer.send_async` and
    /// `send_oneway` only: in a sync-flush store the record is not durable yet when this
    /// returns, and the store's completion thread confirms it
    /// (`_core.Store.wait_durable(result._end())`) before a future reports it. The queue is
    /// `queue_id`, the one `sharding_key` hashes to, or round robin.
    #[pyo3(signature = (msg, queue_id = None, *, sharding_key = None))]
    fn _send_pipelined(
        slf: &Bound<'_, Self>,
        msg: &Bound<'_, PyAny>,
        queue_id: Option<Int>,
        sharding_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySendResult> {
        let this = slf.get();
        if this.is_marked_closed() {
            return Err(dead(slf));
        }
        let queue_id = args::opt_queue_id(queue_id.as_ref())?;
        let routing = match sharding_key {
            None => this.routing(queue_id),
            Some(key) => this.key_routing(queue_id, key)?,
        };
        this.put_one(slf.py(), msg, routing, false)
    }

    /// Sends a batch to one queue of one topic in one call: items are `Message` objects or
    /// `bytes` (which need `topic`).
    #[pyo3(signature = (msgs, topic = None, queue_id = None))]
    fn send_batch(
        &self,
        py: Python<'_>,
        msgs: &Bound<'_, PyAny>,
        topic: Option<&Bound<'_, PyAny>>,
        queue_id: Option<Int>,
    ) -> PyResult<PySendBatchResult> {
        if self.is_marked_closed() {
            return Err(self.closed_error(py));
        }
        let queue_id = args::opt_queue_id(queue_id.as_ref())?;
        let seq = if let Ok(l) = msgs.cast::<PyList>() {
            l.to_tuple()
        } else if let Ok(t) = msgs.cast::<PyTuple>() {
            t.clone()
        } else {
            PyTuple::new(py, msgs.try_iter()?.collect::<PyResult<Vec<_>>>()?)?
        };
        // The core validates the batch (not empty, one topic, each message).
        let n = seq.len();
        let topic_str = match topic {
            Some(t) => Some(topic_str(t)?),
            None => None,
        };
        // The store's clock (the system's unless a test gave a manual one): born and store
        // timestamps and delivery times then read one time.
        let now = self.store.config().clock.now_ms();
        let mut uniq = String::with_capacity(n * 32);
        self.ids.next_batch_into(now, n, &mut uniq);
        let mut props: Vec<u8> = Vec::with_capacity(n * 44);
        let mut held: Vec<Item<'_>> = Vec::with_capacity(n);
        for (i, item) in seq.iter().enumerate() {
            let id = uniq.get(i * 32..i * 32 + 32).unwrap_or("");
            match item.cast_into::<pyo3::types::PyBytes>() {
                Ok(body) => {
                    if topic_str.is_none() {
                        return Err(crate::errors::InvalidBatchError::new_err(
                            "bytes items need topic=",
                        ));
                    }
                    let start = props.len();
                    mqlite::message::properties::push(
                        &mut props,
                        mqlite::message::properties::UNIQ_KEY,
                        id,
                    );
                    held.push(Item::Bytes(body, (start, props.len())));
                }
                Err(e) => held.push(Item::Message(read_message(
                    &e.into_inner(),
                    &mut props,
                    id,
                )?)),
            }
        }
        // Bytes items borrow the one `topic=` string: no per-item conversion.
        // A loop rather than `collect::<PyResult<Vec<_>>>()`: that collect cannot size the
        // vector up front and regrows it.
        let mut outs: Vec<Outgoing<'_>> = Vec::with_capacity(n);
        for h in &held {
            outs.push(match h {
                Item::Bytes(body, range) => Outgoing {
                    topic: topic_str.unwrap_or(""),
                    body: body.as_bytes(),
                    flag: 0,
                    props: *range,
                    sysflag: 0,
                },
                Item::Message(m) => m.outgoing()?,
            });
        }
        if let Some(t) = topic_str {
            if let Some(o) = outs.iter().find(|o| o.topic != t) {
                return Err(crate::errors::InvalidBatchError::new_err(format!(
                    "message topic {:?} differs from topic= {t:?}",
                    o.topic
                )));
            }
        }
        let result = py.detach(|| -> mqlite::Result<(BatchPut, Vec<Appended>)> {
            let mut refs: Vec<MessageRef<'_>> = Vec::with_capacity(outs.len());
            for o in &outs {
                refs.push(o.to_ref(&props, now)?);
            }
            let routing = match queue_id {
                Some(q) => Routing::Queue(q),
                None => Routing::RoundRobin(&self.next_queue),
            };
            let mut appended = Vec::with_capacity(refs.len());
            let put = self
                .store
                .put_messages(&refs, &PutRequest::new(routing), &mut appended)?;
            Ok((put, appended))
        });
        let (put, appended) = result.map_err(|e| self.send_error(py, e))?;
        let result_topic = match (held.first(), topic) {
            (Some(Item::Message(m)), _) => m.topic.clone().unbind(),
            (_, Some(t)) => t
                .cast::<pyo3::types::PyString>()
                .map_err(|_| crate::errors::type_error("topic must be a str"))?
                .clone()
                .unbind(),
            _ => return Err(crate::errors::InvalidBatchError::new_err("empty batch")),
        };
        Ok(PySendBatchResult {
            topic: result_topic,
            queue_id: put.queue_id,
            ok: put.status == PutStatus::PutOk,
            scheduled: put.scheduled,
            appended,
            uniq,
        })
    }
}

thread_local! {
    /// Reused encoded-property buffer of `put_one` (taken and put back: never borrowed across
    /// a call that could re-enter it).
    static PROPS: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Largest property buffer kept for reuse.
const PROPS_KEEP: usize = 4096;

impl PyProducer {
    /// Where a send goes without a sharding key: `queue_id`, or the topic's next round-robin
    /// turn.
    #[inline]
    pub(crate) fn routing(&self, queue_id: Option<u32>) -> Routing<'_> {
        match queue_id {
            Some(q) => Routing::Queue(q),
            None => Routing::RoundRobin(&self.next_queue),
        }
    }

    /// Where a send with sharding key `key` goes: the queue the key hashes to, computed by the
    /// core under the same topic lookup as the append. The key is a `str` (its UTF-8 bytes;
    /// a lone surrogate is an error) or bytes-like (`bytes`, `bytearray`, `memoryview`).
    /// `IllegalArgumentError` with a `queue_id` too, or for a key of another type. Out of
    /// line: the plain send stays compact.
    #[inline(never)]
    fn key_routing(&self, queue_id: Option<u32>, key: &Bound<'_, PyAny>) -> PyResult<Routing<'_>> {
        if queue_id.is_some() {
            return Err(crate::errors::IllegalArgumentError::new_err(
                "give at most one of queue_id, sharding_key and selector",
            ));
        }
        if let Ok(s) = key.cast::<PyString>() {
            return Ok(Routing::sharding_key(s.to_str()?.as_bytes()));
        }
        if let Ok(b) = key.cast::<PyBytes>() {
            return Ok(Routing::sharding_key(b.as_bytes()));
        }
        if key.is_instance_of::<PyByteArray>() || key.is_instance_of::<PyMemoryView>() {
            let b = key.py().get_type::<PyBytes>().call1((key,))?;
            return Ok(Routing::sharding_key(b.cast::<PyBytes>()?.as_bytes()));
        }
        Err(crate::errors::IllegalArgumentError::new_err(format!(
            "sharding_key must be str or bytes, not {}",
            key.get_type().name()?
        )))
    }

    /// One send, after the closed check and queue selection; `wait`: for the disk in sync mode.
    fn put_one(
        &self,
        py: Python<'_>,
        msg: &Bound<'_, PyAny>,
        routing: Routing<'_>,
        wait: bool,
    ) -> PyResult<PySendResult> {
        // The store's clock (the system's unless a test gave a manual one): born and store
        // timestamps and delivery times then read one time.
        let now = self.store.config().clock.now_ms();
        let uniq = self.ids.next_id(now);
        // The encoded properties go to this thread's reused buffer: no allocation per send.
        let mut props = PROPS.take();
        props.clear();
        let result = read_message(msg, &mut props, uniq.as_str()).and_then(|held| {
            let mut out = held.outgoing()?;
            let packed = match &self.compress {
                Some(c) => compress(py, c, out.body)?,
                None => None,
            };
            if let Some((body, flags)) = &packed {
                out.body = body;
                out.sysflag = *flags;
            }
            let m = out.to_ref(&props, now).map_err(PyMqError)?;
            // A short append that cannot wait keeps the GIL: releasing and retaking it costs
            // more than the append (and, with several sending threads, hands the GIL around
            // once per message). Waking a consumer is done without it, so that the woken
            // thread (which the scheduler may run at once) does not block on the GIL, and so
            // is the rare wait for the record's dispatch (a consume-queue file to create). A send
            // that waits for the disk (sync mode) releases the GIL anyway: it appends there.
            let quick = !wait || self.store.config().flush_mode == FlushMode::Async;
            let wake = |wake: &(dyn Fn() + Sync)| py.detach(wake);
            let put = quick
                .then(|| {
                    let req = PutRequest::new(routing)
                        .wait(Wait::NoWait)
                        .now_ms(now)
                        .wake_via(&wake);
                    self.store.put_message(&m, &req)
                })
                .and_then(Result::transpose)
                .unwrap_or_else(|| {
                    let wait = if wait { Wait::Durable } else { Wait::Pipelined };
                    py.detach(|| put_blocking(&self.store, &m, routing, wait))
                });
            Ok((held, put))
        });
        // A message with huge properties does not pin its buffer to the thread.
        if props.capacity() <= PROPS_KEEP {
            PROPS.set(props);
        }
        let (held, result) = result?;
        let put = result.map_err(|e| self.send_error(py, e))?;
        Ok(PySendResult {
            topic: held.topic.clone().unbind(),
            queue_id: put.queue_id,
            ok: put.status == PutStatus::PutOk,
            scheduled: put.scheduled,
            appended: put.appended,
            uniq,
        })
    }
}

/// One item of a batch: a bare body (sent to `topic=`) with its property range, or a message.
enum Item<'py> {
    Bytes(Bound<'py, pyo3::types::PyBytes>, (usize, usize)),
    Message(Held<'py>),
}

/// A put that waits (`Wait::Durable` or `Wait::Pipelined`), which never declines. Out of
/// line: the quick path of `put_one` stays compact in the instruction cache.
#[inline(never)]
fn put_blocking(
    store: &Store,
    m: &MessageRef<'_>,
    routing: Routing<'_>,
    wait: Wait,
) -> mqlite::Result<PutResult> {
    store
        .put_message(m, &PutRequest::new(routing).wait(wait))?
        .ok_or_else(|| mqlite::Error::InvalidArgument {
            field: "wait",
            reason: "only a NoWait put declines".into(),
        })
}

/// Rejects an empty or malformed group name (`InvalidGroupError`).
pub fn check_group(group: &str) -> PyResult<()> {
    mqlite::message::validate::check_group(group).map_err(|e| PyMqError(e).into())
}
