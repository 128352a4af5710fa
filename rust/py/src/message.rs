//! Conversions between Python messages and the core: outgoing `Message` objects are read
//! attribute by attribute into an encoded property string; stored messages become `MessageExt`
//! objects that decode their fields lazily from a shared record buffer.

use std::borrow::Cow;
use std::sync::Arc;

use mqlite::message::builder::{Outgoing, PropertiesBuilder};
use mqlite::message::msg_id::UniqueId;
use mqlite::message::StoredBody;
use mqlite::{Appended, RecordView};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use pyo3::{intern, IntoPyObjectExt};

use crate::args::{
    self, Int, MessageKey, MessageProperty, MessageTags, PropertyName, Str, TopicName,
};
use crate::errors::{invalid_message, type_error};
use crate::outgoing::PyMessage;
use crate::queue::PyMessageQueue;

/// A message read from Python: owned references to its topic and body (so they stay alive
/// while the GIL is released) and the range of its encoded properties in a shared buffer.
pub struct Held<'py> {
    pub topic: Bound<'py, PyString>,
    pub body: Bound<'py, PyBytes>,
    pub flag: i32,
    pub props: (usize, usize),
}

impl<'py> Held<'py> {
    /// The core's outgoing message, borrowing the topic and body.
    pub fn outgoing(&self) -> PyResult<Outgoing<'_>> {
        Ok(Outgoing {
            topic: args::text::<TopicName>(&self.topic)?,
            body: self.body.as_bytes(),
            flag: self.flag,
            props: self.props,
            sysflag: 0,
        })
    }
}

/// Reads `msg.topic`, `msg.body`, `msg.tags`, `msg.keys`, `msg.properties`, `msg.flag` into
/// the core's message builder, which appends the encoded properties (with the given UNIQ_KEY)
/// to `props`. A `mqlite.Message`
/// (exactly that class) is read field by field without attribute look-ups; anything else
/// (a subclass, a duck-typed object) through its attributes. The fields are copied out of the
/// message first: reading `keys` or `properties` may run Python code that reads or changes the
/// message (see `PyMessage::fields`).
pub fn read_message<'py>(
    msg: &Bound<'py, PyAny>,
    props: &mut Vec<u8>,
    uniq: &str,
) -> PyResult<Held<'py>> {
    let py = msg.py();
    if msg.get_type().is(py.get_type::<PyMessage>()) {
        let f = PyMessage::fields(msg.cast::<PyMessage>()?)?;
        // Most messages have no level and no time: they take the same way as before levels
        // and timers existed.
        if f.delay_level.is_some() || !f.deliver_at.is_none(py) || !f.delay.is_none(py) {
            return held_with_timing(py, f, props, uniq);
        }
        let properties = f.properties.unwrap_or_else(|| py.None());
        return held_from(
            f.topic.into_bound(py),
            f.body.into_bound(py),
            f.tags.bind(py),
            f.keys.bind(py),
            properties.bind(py),
            f.flag.bind(py),
            props,
            uniq,
        );
    }
    // A missing attribute means the caller passed something that is not a message at all.
    let attr = |name: &Bound<'py, PyString>| {
        msg.getattr(name).map_err(|e| {
            if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) {
                type_error(format!(
                    "expected a mqlite.Message, not {} (it has no {:?} attribute)",
                    type_name(msg),
                    name.to_string_lossy()
                ))
            } else {
                e
            }
        })
    };
    let held = held_from(
        attr(intern!(py, "topic"))?,
        attr(intern!(py, "body"))?,
        &attr(intern!(py, "tags"))?,
        &attr(intern!(py, "keys"))?,
        &attr(intern!(py, "properties"))?,
        &attr(intern!(py, "flag"))?,
        props,
        uniq,
    )?;
    // Optional: message-like objects written before delay levels and timers have none.
    let level = msg.getattr_opt(intern!(py, "delay_level"))?;
    let none = py.None().into_bound(py);
    let at = msg.getattr_opt(intern!(py, "deliver_at"))?;
    let delay = msg.getattr_opt(intern!(py, "delay"))?;
    if level.is_none() && at.is_none() && delay.is_none() {
        return Ok(held);
    }
    with_timing(
        held,
        level.as_ref(),
        at.as_ref().unwrap_or(&none),
        delay.as_ref().unwrap_or(&none),
        props,
    )
}

/// `read_message` of a `mqlite.Message` with a delay level, a delivery time or a delay.
#[cold]
#[inline(never)]
fn held_with_timing<'py>(
    py: Python<'py>,
    f: crate::outgoing::Fields,
    props: &mut Vec<u8>,
    uniq: &str,
) -> PyResult<Held<'py>> {
    let properties = f.properties.unwrap_or_else(|| py.None());
    let held = held_from(
        f.topic.into_bound(py),
        f.body.into_bound(py),
        f.tags.bind(py),
        f.keys.bind(py),
        properties.bind(py),
        f.flag.bind(py),
        props,
        uniq,
    )?;
    let level = f.delay_level.map(|d| d.into_bound(py));
    with_timing(
        held,
        level.as_ref(),
        f.deliver_at.bind(py),
        f.delay.bind(py),
        props,
    )
}

/// `held` with the message's `delay_level`, `deliver_at` or `delay` added after the
/// properties `held_from` encoded (they end the buffer: its last message's), as the builder
/// orders them. Out of line: most messages have none, and the plain send's code stays compact.
#[cold]
#[inline(never)]
fn with_timing<'py>(
    mut held: Held<'py>,
    level: Option<&Bound<'py, PyAny>>,
    deliver_at: &Bound<'py, PyAny>,
    delay: &Bound<'py, PyAny>,
    props: &mut Vec<u8>,
) -> PyResult<Held<'py>> {
    let level = level.map(delay_level_of).transpose()?.unwrap_or(0);
    let at = (!deliver_at.is_none())
        .then(|| deliver_at_ms(deliver_at))
        .transpose()?;
    let after = (!delay.is_none()).then(|| delay_ms(delay)).transpose()?;
    if usize::from(level > 0) + usize::from(at.is_some()) + usize::from(after.is_some()) > 1 {
        return Err(invalid_message(
            "give at most one of delay_level, deliver_at and delay",
        ));
    }
    let (start, end) = held.props;
    if end != props.len() {
        return Err(crate::errors::IllegalStateError::new_err(
            "the message's properties do not end the buffer",
        ));
    }
    let mut builder = PropertiesBuilder::new(props);
    builder.delay_level(level);
    if let Some(ms) = at {
        builder.deliver_at_ms(ms);
    }
    if let Some(ms) = after {
        builder
            .delay_ms(ms)
            .map_err(|e| invalid_message(e.to_string()))?;
    }
    held.props = (start, builder.finish().1);
    Ok(held)
}

/// A message's `deliver_at` in epoch ms: a `datetime` (a naive one is local time, as
/// `datetime.timestamp` reads it; a fraction of a ms rounds up: never early) or an int of
/// epoch milliseconds.
fn deliver_at_ms(d: &Bound<'_, PyAny>) -> PyResult<i64> {
    let py = d.py();
    if d.is_instance_of::<PyInt>() && !d.is_instance_of::<pyo3::types::PyBool>() {
        return d
            .extract::<i64>()
            .map_err(|_| invalid_message("deliver_at is out of range of epoch milliseconds"));
    }
    let datetime = py.import(intern!(py, "datetime"))?;
    if d.is_instance(&datetime.getattr(intern!(py, "datetime"))?)? {
        let secs: f64 = d.call_method0(intern!(py, "timestamp"))?.extract()?;
        let ms = (secs * 1000.0).ceil();
        if !ms.is_finite() || ms.abs() > 9.0e15 {
            return Err(invalid_message("deliver_at is out of range"));
        }
        return Ok(ms as i64);
    }
    Err(type_error(format!(
        "deliver_at must be a datetime or an int of epoch milliseconds, not {}",
        type_name(d)
    )))
}

/// A message's `delay` in ms: a `timedelta` or a number of seconds (an int or a float; a
/// fraction of a ms rounds up). Negative or not finite: `InvalidMessageError`.
fn delay_ms(d: &Bound<'_, PyAny>) -> PyResult<i64> {
    let py = d.py();
    let negative = || invalid_message(format!("delay must not be negative, got {d}"));
    let too_long = || invalid_message(format!("delay {d} is too long"));
    if d.is_instance_of::<pyo3::types::PyBool>() {
        return Err(type_error("delay must be a timedelta or seconds, not bool"));
    }
    let datetime = py.import(intern!(py, "datetime"))?;
    if d.is_instance(&datetime.getattr(intern!(py, "timedelta"))?)? {
        let days: i64 = d.getattr(intern!(py, "days"))?.extract()?;
        let secs: i64 = d.getattr(intern!(py, "seconds"))?.extract()?;
        let micros: i64 = d.getattr(intern!(py, "microseconds"))?.extract()?;
        if days < 0 {
            return Err(negative());
        }
        return days
            .checked_mul(86_400_000)
            .and_then(|ms| ms.checked_add(secs * 1000 + (micros + 999) / 1000))
            .ok_or_else(too_long);
    }
    if d.is_instance_of::<PyInt>() {
        let secs: i64 = d.extract().map_err(|_| too_long())?;
        if secs < 0 {
            return Err(negative());
        }
        return secs.checked_mul(1000).ok_or_else(too_long);
    }
    if d.is_instance_of::<pyo3::types::PyFloat>() {
        let secs: f64 = d.extract()?;
        if secs.is_nan() {
            return Err(invalid_message("delay must be a number, got nan"));
        }
        if secs < 0.0 {
            return Err(negative());
        }
        let ms = (secs * 1000.0).ceil();
        if !ms.is_finite() || ms > 9.0e15 {
            return Err(too_long());
        }
        return Ok(ms as i64);
    }
    Err(type_error(format!(
        "delay must be a timedelta or a number of seconds, not {}",
        type_name(d)
    )))
}

#[allow(clippy::too_many_arguments)]
fn held_from<'py>(
    topic: Bound<'py, PyAny>,
    body: Bound<'py, PyAny>,
    tags: &Bound<'py, PyAny>,
    keys: &Bound<'py, PyAny>,
    user: &Bound<'py, PyAny>,
    flag_obj: &Bound<'py, PyAny>,
    props: &mut Vec<u8>,
    uniq: &str,
) -> PyResult<Held<'py>> {
    let py = topic.py();
    let topic = topic.cast_into::<PyString>().map_err(|e| {
        type_error(format!(
            "topic must be a str, not {}",
            type_name(&e.into_inner())
        ))
    })?;
    let body = body.cast_into::<PyBytes>().map_err(|e| {
        type_error(format!(
            "body must be bytes, not {}",
            type_name(&e.into_inner())
        ))
    })?;
    let mut builder = PropertiesBuilder::new(props);
    if !tags.is_none() {
        let t = tags
            .cast::<PyString>()
            .map_err(|_| type_error("tags must be a str or None"))?;
        builder
            .tags(args::text::<MessageTags>(t)?)
            .map_err(|e| invalid_message(e.to_string()))?;
    }
    push_keys(keys, &mut builder)?;
    builder.unique_key(uniq);
    if let Ok(d) = user.cast::<PyDict>() {
        // The common case: a plain dict, often empty (iterating even an empty one costs a
        // method look-up and an iterator under the limited API).
        if !d.is_empty() {
            for (k, v) in d.iter() {
                push_property(&k, &v, &mut builder)?;
            }
        }
    } else if !user.is_none() {
        let items = user
            .call_method0(intern!(py, "items"))
            .map_err(|_| type_error("properties must be a mapping"))?;
        for item in items.try_iter()? {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            push_property(&k, &v, &mut builder)?;
        }
    }
    // An exact int in range (a bool is not one) takes the short way: this runs once per send.
    let exact = flag_obj
        .is_exact_instance_of::<PyInt>()
        .then(|| flag_obj.extract::<i32>().ok())
        .flatten();
    let flag = match exact {
        Some(f) => f,
        None => flag_obj
            .extract::<Int>()
            .map_err(|_| type_error(format!("flag must be an int, not {}", type_name(flag_obj))))?
            .to(|v| invalid_message(format!("flag must be in the i32 range, got {v}")))?,
    };
    Ok(Held {
        topic,
        body,
        flag,
        props: builder.finish(),
    })
}

/// The level of a message's `delay_level` (an int, not a bool; 0 is none). Whether the store
/// has the level is checked by the store (`InvalidMessageError`).
fn delay_level_of(d: &Bound<'_, PyAny>) -> PyResult<u32> {
    if d.is_exact_instance_of::<PyInt>() {
        if let Ok(0) = d.extract::<i64>() {
            return Ok(0);
        }
    }
    if d.is_instance_of::<pyo3::types::PyBool>() || !d.is_instance_of::<PyInt>() {
        return Err(type_error(format!(
            "delay_level must be an int, not {}",
            type_name(d)
        )));
    }
    d.extract::<Int>()
        .map_err(|_| type_error("delay_level must be an int"))?
        .to(|v| invalid_message(format!("delay_level must be a level from 0, got {v}")))
}

fn push_property(
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    builder: &mut PropertiesBuilder<'_>,
) -> PyResult<()> {
    let k = k
        .cast::<PyString>()
        .map_err(|_| type_error("property names must be str"))?;
    let v = v
        .cast::<PyString>()
        .map_err(|_| type_error("property values must be str"))?;
    let k = args::text::<MessageProperty>(k)?;
    let v = args::text::<MessageProperty>(v)?;
    builder
        .property(k, v)
        .map_err(|e| invalid_message(e.to_string()))
}

fn push_keys(keys: &Bound<'_, PyAny>, builder: &mut PropertiesBuilder<'_>) -> PyResult<()> {
    if keys.is_none() {
        return Ok(());
    }
    let mut add = |k: &Bound<'_, PyAny>| -> PyResult<()> {
        let k = k
            .cast::<PyString>()
            .map_err(|_| type_error("keys must be a str or a sequence of str"))?;
        builder
            .key(args::text::<MessageKey>(k)?)
            .map_err(|e| invalid_message(e.to_string()))
    };
    if keys.is_instance_of::<PyString>() {
        add(keys)?;
    } else if let Ok(t) = keys.cast::<PyTuple>() {
        // The default (an empty tuple) and the common sequences are indexed directly: no
        // iterator object per send.
        for k in t.iter() {
            add(&k)?;
        }
    } else if let Ok(l) = keys.cast::<PyList>() {
        for k in l.iter() {
            add(&k)?;
        }
    } else {
        for k in keys
            .try_iter()
            .map_err(|_| type_error("keys must be a str or a sequence of str"))?
        {
            add(&k?)?;
        }
    }
    Ok(())
}

/// The UTF-8 of a topic `str` object.
pub fn topic_str<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| type_error(format!("topic must be a str, not {}", type_name(obj))))?;
    args::text::<TopicName>(s)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

static SEND_STATUS: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();

/// `mqlite.message.SendStatus.SEND_OK` or `.FLUSH_DISK_TIMEOUT`.
pub fn send_status(py: Python<'_>, ok: bool) -> PyResult<Py<PyAny>> {
    let pair = SEND_STATUS.get_or_try_init(py, || -> PyResult<_> {
        let cls = py.import("mqlite.message")?.getattr("SendStatus")?;
        Ok((
            cls.getattr("SEND_OK")?.unbind(),
            cls.getattr("FLUSH_DISK_TIMEOUT")?.unbind(),
        ))
    })?;
    Ok(if ok {
        pair.0.clone_ref(py)
    } else {
        pair.1.clone_ref(py)
    })
}

/// Outcome of one send.
#[pyclass(frozen, module = "mqlite._core", name = "SendResult")]
#[derive(Debug)]
pub struct PySendResult {
    /// The message's own topic object (no copy per send).
    pub topic: Py<PyString>,
    /// The queue of that topic the message was sent to.
    pub queue_id: u32,
    pub ok: bool,
    /// Stored for later delivery (`PutResult::scheduled`).
    pub scheduled: bool,
    pub appended: Appended,
    /// The UNIQ_KEY, inline (no allocation per send).
    pub uniq: UniqueId,
}

#[pymethods]
impl PySendResult {
    #[getter]
    fn send_status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        send_status(py, self.ok)
    }
    #[getter]
    fn msg_id(&self) -> &str {
        self.uniq.as_str()
    }
    #[getter]
    fn offset_msg_id(&self) -> String {
        self.appended.offset_msg_id()
    }
    #[getter]
    fn message_queue(&self, py: Python<'_>) -> PyResult<PyMessageQueue> {
        Ok(PyMessageQueue {
            topic: self.topic.bind(py).to_str()?.to_owned(),
            queue_id: self.queue_id,
        })
    }
    #[getter]
    fn queue_offset(&self) -> u64 {
        self.appended.queue_offset
    }
    #[getter]
    fn scheduled(&self) -> bool {
        self.scheduled
    }
    #[getter]
    fn commit_log_offset(&self) -> u64 {
        self.appended.physical_offset
    }
    /// Commit-log offset just past the record (what `Store.wait_durable` waits for).
    fn _end(&self) -> u64 {
        self.appended.physical_offset + u64::from(self.appended.size)
    }
    /// The same result with FLUSH_DISK_TIMEOUT status (the disk did not confirm in time).
    fn _timed_out(&self, py: Python<'_>) -> PySendResult {
        PySendResult {
            topic: self.topic.clone_ref(py),
            queue_id: self.queue_id,
            ok: false,
            scheduled: self.scheduled,
            appended: self.appended,
            uniq: self.uniq,
        }
    }
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "SendResult(send_status={}, msg_id={:?}, message_queue=MessageQueue(topic={:?}, queue_id={}), queue_offset={}{})",
            if self.ok { "SEND_OK" } else { "FLUSH_DISK_TIMEOUT" },
            self.uniq.as_str(),
            self.topic.bind(py).to_string_lossy(),
            self.queue_id,
            self.appended.queue_offset,
            if self.scheduled { ", scheduled=True" } else { "" }
        )
    }
}

/// Results of one batch, materialised on access.
#[pyclass(frozen, sequence, module = "mqlite._core", name = "SendBatchResult")]
#[derive(Debug)]
pub struct PySendBatchResult {
    pub topic: Py<PyString>,
    pub queue_id: u32,
    pub ok: bool,
    /// Stored for later delivery (`BatchPut::scheduled`).
    pub scheduled: bool,
    pub appended: Vec<Appended>,
    /// UNIQ_KEYs, 32 characters each, concatenated.
    pub uniq: String,
}

impl PySendBatchResult {
    fn item(&self, py: Python<'_>, i: usize) -> Option<PySendResult> {
        let a = *self.appended.get(i)?;
        let uniq = UniqueId::parse(self.uniq.get(i * 32..i * 32 + 32)?)?;
        Some(PySendResult {
            topic: self.topic.clone_ref(py),
            queue_id: self.queue_id,
            ok: self.ok,
            scheduled: self.scheduled,
            appended: a,
            uniq,
        })
    }
}

#[pymethods]
impl PySendBatchResult {
    #[getter]
    fn message_queue(&self, py: Python<'_>) -> PyResult<PyMessageQueue> {
        Ok(PyMessageQueue {
            topic: self.topic.bind(py).to_str()?.to_owned(),
            queue_id: self.queue_id,
        })
    }
    #[getter]
    fn first_queue_offset(&self) -> u64 {
        self.appended.first().map(|a| a.queue_offset).unwrap_or(0)
    }
    #[getter]
    fn scheduled(&self) -> bool {
        self.scheduled
    }
    #[getter]
    fn send_status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        send_status(py, self.ok)
    }
    fn __len__(&self) -> usize {
        self.appended.len()
    }
    fn __getitem__(&self, py: Python<'_>, index: Int) -> PyResult<PySendResult> {
        let out_of_range =
            |_: &str| pyo3::exceptions::PyIndexError::new_err("SendBatchResult index out of range");
        let index: isize = index.to(out_of_range)?;
        let n = self.appended.len() as isize;
        let i = if index < 0 { index + n } else { index };
        if i < 0 || i >= n {
            return Err(out_of_range(""));
        }
        self.item(py, i as usize)
            .ok_or_else(|| pyo3::exceptions::PyIndexError::new_err("index out of range"))
    }
    fn __iter__(slf: PyRef<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let items: Vec<PySendResult> = (0..slf.appended.len())
            .filter_map(|i| slf.item(py, i))
            .collect();
        let list = pyo3::types::PyList::new(
            py,
            items
                .into_iter()
                .map(|r| Py::new(py, r))
                .collect::<PyResult<Vec<_>>>()?,
        )?;
        Ok(list.try_iter()?.into_any().unbind())
    }
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "SendBatchResult(topic={:?}, queue_id={}, count={})",
            self.topic.bind(py).to_string_lossy(),
            self.queue_id,
            self.appended.len()
        )
    }
}

/// The records of one read and the queue they came from, shared by the read's messages.
#[derive(Debug)]
pub struct ReadBatch {
    pub bytes: Vec<u8>,
    /// A consumer asks for a batch's queue (to find its bookkeeping); building it means a
    /// decode and a string copy. None: built on demand.
    pub mq: Option<Py<PyMessageQueue>>,
}

/// A stored message: a view into a shared buffer of raw records.
#[pyclass(frozen, module = "mqlite._core", name = "MessageExt")]
#[derive(Debug)]
pub struct PyMessageExt {
    pub batch: Arc<ReadBatch>,
    pub start: u32,
    pub len: u32,
}

impl PyMessageExt {
    fn record(&self) -> &[u8] {
        self.batch
            .bytes
            .get(self.start as usize..(self.start + self.len) as usize)
            .unwrap_or(&[])
    }

    /// The stored body: the store verified the record when it was read, so only the body's
    /// place is needed.
    fn stored_body(&self) -> PyResult<StoredBody<'_>> {
        match RecordView::stored_body(self.record()) {
            Some(body) => Ok(body),
            None => Err(self.view().err().unwrap_or_else(|| {
                crate::errors::CorruptedLogError::new_err("stored record has no body")
            })),
        }
    }

    fn view(&self) -> PyResult<RecordView<'_>> {
        RecordView::parse(self.record(), false).map_err(|e| {
            crate::errors::CorruptedLogError::new_err(format!("stored record does not decode: {e}"))
        })
    }
}

#[pymethods]
impl PyMessageExt {
    /// The topic the message was sent to: for a retry (a record of a `%RETRY%` topic with a
    /// `RETRY_TOPIC` property) that origin topic, as RocketMQ's consumer shows it;
    /// `message_queue` stays the queue it was read from. For a half message (a transaction's,
    /// as a check sees it) or one discarded after its maximum checks, its real topic.
    #[getter]
    fn topic(&self) -> PyResult<String> {
        let v = self.view()?;
        let stored = v.topic();
        if stored.starts_with(mqlite::store::retry::RETRY_PREFIX) {
            if let Some(origin) = v.property(mqlite::message::properties::RETRY_TOPIC) {
                return Ok(origin.to_owned());
            }
        }
        if matches!(
            stored,
            mqlite::store::txn::record::HALF_TOPIC | mqlite::store::txn::record::MAX_TIME_TOPIC
        ) {
            if let Some(real) = v.property(mqlite::message::properties::REAL_TOPIC) {
                return Ok(real.to_owned());
            }
        }
        Ok(stored.to_owned())
    }
    #[getter]
    fn queue_id(&self) -> PyResult<u32> {
        Ok(self.view()?.queue_id())
    }
    #[getter]
    fn queue_offset(&self) -> PyResult<u64> {
        Ok(self.view()?.queue_offset())
    }
    #[getter]
    fn commit_log_offset(&self) -> PyResult<u64> {
        Ok(self.view()?.physical_offset())
    }
    #[getter]
    fn msg_id(&self) -> PyResult<String> {
        Ok(self.view()?.msg_id().into_owned())
    }
    #[getter]
    fn offset_msg_id(&self) -> PyResult<String> {
        Ok(self.view()?.offset_msg_id())
    }
    /// The body as the producer sent it: decompressed when the record's SYSFLAG marks it
    /// compressed (FORMAT.md §1.6), again on each access.
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let stored = self.stored_body()?;
        if !stored.is_compressed() {
            return Ok(PyBytes::new(py, stored.bytes()));
        }
        let decoded = py
            .detach(|| stored.decode().map(Cow::into_owned))
            .map_err(crate::errors::PyMqError)?;
        Ok(PyBytes::new(py, &decoded))
    }
    /// The body bytes as stored: the compressed bytes of a compressed body.
    #[getter]
    fn raw_body<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, self.stored_body()?.bytes()))
    }
    #[getter]
    fn tags(&self) -> PyResult<Option<String>> {
        Ok(self.view()?.tags().map(str::to_owned))
    }
    #[getter]
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let keys: Vec<&str> = self.view()?.keys().collect();
        PyTuple::new(py, keys)
    }
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.view()?.property_pairs() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
    fn get_property(&self, name: Str<'_, PropertyName>) -> PyResult<Option<String>> {
        Ok(self.view()?.property(&name).map(str::to_owned))
    }
    #[getter]
    fn flag(&self) -> PyResult<i32> {
        Ok(self.view()?.flag())
    }
    #[getter]
    fn sysflag(&self) -> PyResult<i32> {
        Ok(self.view()?.sysflag())
    }
    #[getter]
    fn born_timestamp(&self) -> PyResult<i64> {
        Ok(self.view()?.born_timestamp())
    }
    #[getter]
    fn store_timestamp(&self) -> PyResult<i64> {
        Ok(self.view()?.store_timestamp())
    }
    #[getter]
    fn reconsume_times(&self) -> PyResult<i32> {
        Ok(self.view()?.reconsume_times())
    }
    #[getter]
    fn store_size(&self) -> PyResult<u32> {
        Ok(self.len)
    }
    #[getter]
    fn message_queue(&self, py: Python<'_>) -> PyResult<Py<PyMessageQueue>> {
        if let Some(mq) = &self.batch.mq {
            return Ok(mq.clone_ref(py));
        }
        let v = self.view()?;
        Py::new(
            py,
            PyMessageQueue {
                topic: v.topic().to_owned(),
                queue_id: v.queue_id(),
            },
        )
    }
    fn __repr__(&self) -> PyResult<String> {
        let v = self.view()?;
        Ok(format!(
            "MessageExt(topic={:?}, queue_id={}, queue_offset={}, body_len={})",
            v.topic(),
            v.queue_id(),
            v.queue_offset(),
            v.body().len()
        ))
    }
}

/// A read's records share one buffer up to this size; a bigger read gives each record a
/// buffer of its own, so a message a consumer still holds keeps only its own bytes alive
/// (consumers bound the bytes they hold by the sizes of the messages they hold).
const SHARED_BUFFER_MAX: usize = 1 << 20;

/// Wraps records of a read into `MessageExt` objects: sharing one buffer, or each with its own
/// when the read is over `SHARED_BUFFER_MAX`.
pub fn messages_from(
    py: Python<'_>,
    buffer: Vec<u8>,
    records: &[(u32, u32)],
    mq: Option<Py<PyMessageQueue>>,
) -> PyResult<Vec<Py<PyAny>>> {
    if buffer.len() > SHARED_BUFFER_MAX && records.len() > 1 {
        return records
            .iter()
            .map(|&(start, len)| {
                let bytes = buffer
                    .get(start as usize..start as usize + len as usize)
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default();
                let batch = Arc::new(ReadBatch {
                    bytes,
                    mq: mq.as_ref().map(|q| q.clone_ref(py)),
                });
                PyMessageExt {
                    batch,
                    start: 0,
                    len,
                }
                .into_py_any(py)
            })
            .collect();
    }
    let batch = Arc::new(ReadBatch { bytes: buffer, mq });
    records
        .iter()
        .map(|&(start, len)| {
            PyMessageExt {
                batch: Arc::clone(&batch),
                start,
                len,
            }
            .into_py_any(py)
        })
        .collect()
}
