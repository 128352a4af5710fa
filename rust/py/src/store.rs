//! `Store`: open/close, admin, reads and lookups; every call that touches the store releases
//! the GIL.

use std::sync::Arc;
use std::time::Duration;

use mqlite::message::delay_levels::DelayLevels;
use mqlite::store::timer::{TimerFilter, TimerInfo, TimerOutcome, TimerTarget};
use mqlite::{FlushMode, GetStatus, Store, StoreConfig, TagFilter, TopicConfig, TopicUpdate};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::args::{
    self, DelayLevelsOption, FilterTag, Float, FlushOption, GroupName, Int, LookupKey, MsgIdText,
    OwnedStr, StorePath, Str, TopicName,
};
use crate::errors::{InvalidConfigError, PyMqError};
use crate::interrupt;
use crate::message::{messages_from, PyMessageExt, ReadBatch};
use crate::producer::PyProducer;
use crate::queue::PyMessageQueue;

/// An open store.
#[pyclass(frozen, module = "mqlite._core", name = "Store")]
#[derive(Debug)]
pub struct PyStore {
    store: Arc<Store>,
    path: String,
    /// The process that opened it: a forked child may not use it.
    opened_by: u32,
}

impl PyStore {
    /// The core store.
    pub fn core(&self) -> &Arc<Store> {
        &self.store
    }

    /// The path it was opened with (`":memory:"` for an in-memory store).
    pub fn path_str(&self) -> &str {
        &self.path
    }

    /// The id of the process that opened it.
    pub fn opened_by(&self) -> u32 {
        self.opened_by
    }

    /// The record at commit-log offset `offset` as a `MessageExt`.
    fn record_at(&self, py: Python<'_>, offset: u64) -> PyResult<PyMessageExt> {
        let bytes = py
            .detach(|| self.store.record_bytes(offset))
            .map_err(PyMqError)?;
        let len = bytes.len() as u32;
        Ok(PyMessageExt {
            batch: Arc::new(ReadBatch { bytes, mq: None }),
            start: 0,
            len,
        })
    }

    /// The topic's config; `TopicNotFoundError` if it does not exist.
    fn existing_topic(&self, topic: &str) -> PyResult<TopicConfig> {
        self.store.topic(topic).map_err(PyMqError)?.ok_or_else(|| {
            PyMqError(mqlite::Error::TopicNotFound {
                topic: topic.to_owned(),
            })
            .into()
        })
    }
}

/// A file retention deleted: (path, first offset, size, last modified ms, reason).
type DeletedRow = (String, u64, u64, i64, &'static str);

/// A topic's config as RocketMQ's JSON names its fields.
fn index_status_dict<'py>(
    py: Python<'py>,
    s: &mqlite::store::IndexStatus,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("enabled", s.enabled)?;
    d.set_item("files", s.files)?;
    d.set_item("progress", s.progress)?;
    d.set_item("log_end", s.log_end)?;
    d.set_item("lag", s.lag)?;
    d.set_item("last_error", s.last_error.clone())?;
    Ok(d)
}

fn topic_dict<'py>(py: Python<'py>, t: &TopicConfig) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("topicName", &t.topic_name)?;
    d.set_item("readQueueNums", t.read_queue_nums)?;
    d.set_item("writeQueueNums", t.write_queue_nums)?;
    d.set_item("perm", t.perm)?;
    d.set_item("order", t.order)?;
    d.set_item("topicFilterType", &t.topic_filter_type)?;
    d.set_item("topicSysFlag", t.topic_sys_flag)?;
    d.set_item("attributes", t.attributes.clone())?;
    d.set_item("sinceOffset", t.since_offset())?;
    Ok(d)
}

/// A topic's queue count: `[1, MAX_QUEUES]`, else `IllegalArgumentError`.
/// A timer as a tuple: (id, topic, queue id, keys, unique id, tags, due ms, offset id).
fn timer_row<'py>(py: Python<'py>, t: &TimerInfo) -> PyResult<Bound<'py, PyAny>> {
    let offset_id = t.offset_msg_id();
    (
        t.id.to_string(),
        t.topic.as_str(),
        t.queue_id,
        t.keys.clone(),
        t.unique_id.as_deref(),
        t.tags.as_deref(),
        t.due_ms,
        offset_id,
    )
        .into_pyobject(py)
        .map(Bound::into_any)
}

fn queue_count(queues: &Int) -> PyResult<u32> {
    args::count(queues, "queues", 1, mqlite::topic_config::MAX_QUEUES)
}

fn flush_mode_name(mode: FlushMode) -> &'static str {
    match mode {
        FlushMode::Async => "async",
        FlushMode::Sync => "sync",
    }
}

fn duration_arg(secs: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| InvalidConfigError::new_err(format!("{what} must be a finite number >= 0")))
}

/// A result of `Store.read`.
#[pyclass(frozen, module = "mqlite._core", name = "GetResult")]
#[derive(Debug)]
pub struct PyGetResult {
    status: GetStatus,
    next_offset: u64,
    min_offset: u64,
    max_offset: u64,
    messages: Py<PyList>,
}

#[pymethods]
impl PyGetResult {
    #[getter]
    fn status(&self) -> &'static str {
        self.status.name()
    }
    #[getter]
    fn next_offset(&self) -> u64 {
        self.next_offset
    }
    #[getter]
    fn min_offset(&self) -> u64 {
        self.min_offset
    }
    #[getter]
    fn max_offset(&self) -> u64 {
        self.max_offset
    }
    #[getter]
    fn messages(&self, py: Python<'_>) -> Py<PyList> {
        self.messages.clone_ref(py)
    }
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "GetResult(status={}, next_offset={}, messages={})",
            self.status.name(),
            self.next_offset,
            self.messages.bind(py).len()
        )
    }
}

#[pymethods]
impl PyStore {
    /// Every option left `None` takes the core's default (`StoreConfig::default()`), or for the
    /// file sizes the store's own.
    #[new]
    #[pyo3(signature = (
        path, *, read_only = false, exclusive = false, wait = None, flush = None,
        flush_interval_ms = None,
        sync_flush_timeout_ms = None, commit_log_file_size = None, consume_queue_file_units = None,
        max_message_size = None, auto_create_topics = None, default_queues = None,
        file_mode = None, dir_mode = None, retention_hours = None, max_mapped_files = None,
        delay_levels = None, timer_max_delay_hours = None, timer_catchup_rate = None,
        disk_force_clean_ratio = None, index_enabled = None, index_hash_slots = None, clock = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: Str<'_, StorePath>,
        read_only: bool,
        exclusive: bool,
        wait: Option<Float>,
        flush: Option<Str<'_, FlushOption>>,
        flush_interval_ms: Option<Int>,
        sync_flush_timeout_ms: Option<Int>,
        commit_log_file_size: Option<Int>,
        consume_queue_file_units: Option<Int>,
        max_message_size: Option<Int>,
        auto_create_topics: Option<bool>,
        default_queues: Option<Int>,
        file_mode: Option<Int>,
        dir_mode: Option<Int>,
        retention_hours: Option<Float>,
        max_mapped_files: Option<Int>,
        delay_levels: Option<Str<'_, DelayLevelsOption>>,
        timer_max_delay_hours: Option<Float>,
        timer_catchup_rate: Option<Int>,
        disk_force_clean_ratio: Option<Float>,
        index_enabled: Option<bool>,
        index_hash_slots: Option<Int>,
        clock: Option<PyRef<'_, crate::clock::PyManualClock>>,
    ) -> PyResult<Self> {
        // `StoreConfig::default()` is the one source of defaults; an option the type cannot
        // hold is InvalidConfigError here, and the core's validation checks the rest of each
        // option's range. The file sizes stay unset unless given: the store's meta file, or its
        // files, decide them.
        let defaults = StoreConfig::default();
        if exclusive && read_only {
            return Err(InvalidConfigError::new_err(
                "exclusive=True and read_only=True contradict each other: a read-only open \
                 writes nothing and takes no writer lock",
            ));
        }
        let flush_interval_ms = args::option(
            flush_interval_ms,
            "flush_interval_ms",
            defaults.flush_interval.as_millis() as u64,
        )?;
        let sync_flush_timeout_ms = args::option(
            sync_flush_timeout_ms,
            "sync_flush_timeout_ms",
            defaults.sync_flush_timeout.as_millis() as u64,
        )?;
        let flush_mode = match flush.as_deref() {
            None => defaults.flush_mode,
            Some("async") => FlushMode::Async,
            Some("sync") => FlushMode::Sync,
            Some(other) => {
                return Err(InvalidConfigError::new_err(format!(
                    "flush must be 'async' or 'sync', not {other:?}"
                )))
            }
        };
        let file_reserved_time = match retention_hours {
            Some(h) => duration_arg(h.0 * 3600.0, "retention_hours")?,
            None => defaults.file_reserved_time,
        };
        let timer_max_delay = match timer_max_delay_hours {
            Some(h) => duration_arg(h.0 * 3600.0, "timer_max_delay_hours")?,
            None => defaults.timer_max_delay,
        };
        let unset_or = |n: Option<Int>, field: &str| -> PyResult<Option<u64>> {
            n.map(|n| args::option(Some(n), field, 0u64)).transpose()
        };
        let config = StoreConfig {
            read_only,
            shared_writers: !exclusive,
            lock_wait: wait.map(|w| duration_arg(w.0, "wait")).transpose()?,
            flush_mode,
            flush_interval: Duration::from_millis(flush_interval_ms),
            sync_flush_timeout: Duration::from_millis(sync_flush_timeout_ms),
            commit_log_file_size: unset_or(commit_log_file_size, "commit_log_file_size")?,
            consume_queue_file_units: unset_or(
                consume_queue_file_units,
                "consume_queue_file_units",
            )?,
            max_message_size: max_message_size
                .map(|n| args::option(Some(n), "max_message_size", 0usize))
                .transpose()?,
            auto_create_topics: auto_create_topics.unwrap_or(defaults.auto_create_topics),
            default_queues: args::option(
                default_queues,
                "default_queues",
                defaults.default_queues,
            )?,
            file_mode: args::option(file_mode, "file_mode", defaults.file_mode)?,
            dir_mode: args::option(dir_mode, "dir_mode", defaults.dir_mode)?,
            file_reserved_time,
            max_mapped_files: args::option(
                max_mapped_files,
                "max_mapped_files",
                defaults.max_mapped_files,
            )?,
            delay_levels: match delay_levels.as_deref() {
                Some(table) => DelayLevels::parse(table).map_err(PyMqError)?,
                None => defaults.delay_levels.clone(),
            },
            timer_max_delay,
            timer_catchup_rate: args::option(
                timer_catchup_rate,
                "timer_catchup_rate",
                defaults.timer_catchup_rate,
            )?,
            disk_force_clean_ratio: disk_force_clean_ratio
                .map_or(defaults.disk_force_clean_ratio, |r| r.0),
            index_enabled: index_enabled.unwrap_or(defaults.index_enabled),
            index_hash_slots: args::option(
                index_hash_slots,
                "index_hash_slots",
                defaults.index_hash_slots,
            )?,
            clock: clock.map_or_else(|| defaults.clock.clone(), |c| c.clock.clone().into()),
            ..defaults
        };
        let path = path.to_owned();
        let in_memory = path == ":memory:";
        if in_memory && read_only {
            return Err(InvalidConfigError::new_err(
                "an in-memory store cannot be read-only",
            ));
        }
        // The wait for another writer's lock (`wait=`) stays interruptible by Ctrl-C.
        let mut signals = crate::interrupt::SignalCheck::default();
        let opened = py.detach(|| {
            if in_memory {
                Store::open_in_memory(config)
            } else {
                Store::open_interruptible(&path, config, &mut || signals.interrupted())
            }
        });
        let store = opened.map_err(|e| signals.into_error(e))?;
        Ok(PyStore {
            store: Arc::new(store),
            path,
            opened_by: std::process::id(),
        })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    #[getter]
    fn read_only(&self) -> bool {
        self.store.is_read_only()
    }

    /// The queue count of topics created without one (auto-created topics).
    #[getter]
    fn default_queues(&self) -> u32 {
        self.store.config().default_queues
    }

    /// Whether sends create unknown topics.
    #[getter]
    fn auto_create_topics(&self) -> bool {
        self.store.config().auto_create_topics
    }

    /// "async" or "sync".
    #[getter]
    fn flush_mode(&self) -> &'static str {
        flush_mode_name(self.store.config().flush_mode)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.store.is_closed()
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let s = Arc::clone(&self.store);
        py.detach(move || s.close())
            .map_err(|e| PyMqError(e).into())
    }

    #[pyo3(signature = (group = Str::of("DEFAULT_PRODUCER")))]
    fn producer(&self, group: Str<'_, GroupName>) -> PyResult<PyProducer> {
        PyProducer::create(self, &group, None)
    }

    #[pyo3(signature = (
        topic, queues = Int::Fits(4), *, perm = Int::Fits(6), order = false, exist_ok = true
    ))]
    fn create_topic(
        &self,
        py: Python<'_>,
        topic: Str<'_, TopicName>,
        queues: Int,
        perm: Int,
        order: bool,
        exist_ok: bool,
    ) -> PyResult<()> {
        let queues = queue_count(&queues)?;
        let perm = args::count(&perm, "perm", 0, 7)?;
        py.detach(|| {
            self.store
                .create_topic(&topic, queues, perm, order, exist_ok)
        })
        .map_err(|e| PyMqError(e).into())
    }

    /// Creates the topics of `topics` that do not exist yet, writing the topic table once;
    /// returns the names created, sorted.
    #[pyo3(signature = (
        topics, queues = Int::Fits(4), *, perm = Int::Fits(6), order = false, exist_ok = true
    ))]
    fn create_topics(
        &self,
        py: Python<'_>,
        topics: Vec<Bound<'_, pyo3::types::PyString>>,
        queues: Int,
        perm: Int,
        order: bool,
        exist_ok: bool,
    ) -> PyResult<Vec<String>> {
        let queues = queue_count(&queues)?;
        let perm = args::count(&perm, "perm", 0, 7)?;
        let names = topics
            .iter()
            .map(args::text::<TopicName>)
            .collect::<PyResult<Vec<&str>>>()?;
        py.detach(|| {
            self.store
                .create_topics(&names, queues, perm, order, exist_ok)
        })
        .map_err(|e| PyMqError(e).into())
    }

    /// Changes the given settings of an existing topic (`queues`: read and write queues at
    /// once); returns its new config.
    #[pyo3(signature = (
        topic, queues = None, *, read_queues = None, write_queues = None, perm = None, order = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn update_topic<'py>(
        &self,
        py: Python<'py>,
        topic: Str<'_, TopicName>,
        queues: Option<Int>,
        read_queues: Option<Int>,
        write_queues: Option<Int>,
        perm: Option<Int>,
        order: Option<bool>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let max = mqlite::topic_config::MAX_QUEUES;
        let count = |v: &Option<Int>, name| v.as_ref().map(|q| args::count(q, name, 1, max));
        let queues = count(&queues, "queues").transpose()?;
        let update = TopicUpdate {
            read_queues: count(&read_queues, "read_queues").transpose()?.or(queues),
            write_queues: count(&write_queues, "write_queues").transpose()?.or(queues),
            perm: perm
                .as_ref()
                .map(|p| args::count(p, "perm", 0, 7))
                .transpose()?,
            order,
        };
        let config = py
            .detach(|| self.store.update_topic_settings(&topic, update))
            .map_err(PyMqError)?;
        topic_dict(py, &config)
    }

    /// Deletes a topic's config (its records go with retention).
    fn delete_topic(&self, py: Python<'_>, topic: Str<'_, TopicName>) -> PyResult<()> {
        py.detach(|| self.store.delete_topic(&topic))
            .map_err(|e| PyMqError(e).into())
    }

    fn topics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let topics = self.store.topics().map_err(PyMqError)?;
        let list = PyList::empty(py);
        for t in topics {
            list.append(topic_dict(py, &t)?)?;
        }
        Ok(list)
    }

    /// The queues a consumer group shares: the read queue count, 0 for a topic whose
    /// permission forbids reads (RocketMQ offers consumers no queue of such a topic).
    fn consumer_queue_count(&self, topic: Str<'_, TopicName>) -> PyResult<u32> {
        let t = self.existing_topic(&topic)?;
        Ok(if t.readable() { t.read_queue_nums } else { 0 })
    }

    fn queue_count(&self, topic: Str<'_, TopicName>) -> PyResult<u32> {
        Ok(self.existing_topic(&topic)?.read_queue_nums)
    }

    fn offsets(
        &self,
        py: Python<'_>,
        topic: Str<'_, TopicName>,
        queue_id: Int,
    ) -> PyResult<(u64, u64)> {
        let q = args::queue_id(&queue_id)?;
        py.detach(|| self.store.queue_offsets(&topic, q))
            .map_err(|e| PyMqError(e).into())
    }

    #[pyo3(signature = (topic, queue_id, offset, max_messages = Int::Fits(32), tags = None))]
    fn read(
        &self,
        py: Python<'_>,
        topic: Str<'_, TopicName>,
        queue_id: Int,
        offset: Int,
        max_messages: Int,
        tags: Option<Vec<OwnedStr<FilterTag>>>,
    ) -> PyResult<PyGetResult> {
        let q = args::queue_id(&queue_id)?;
        let offset = args::offset(&offset, "offset")?;
        let max = args::max_messages(&max_messages)?;
        let filter = match &tags {
            Some(t) => TagFilter::tags(t.iter().map(|t| &**t)),
            None => TagFilter::all(),
        };
        let topic: &str = &topic;
        let r = py
            .detach(|| self.store.get_messages(topic, q, offset, max, &filter))
            .map_err(PyMqError)?;
        let mq = match r.records.is_empty() {
            true => None,
            false => Some(Py::new(
                py,
                PyMessageQueue {
                    topic: topic.to_owned(),
                    queue_id: q,
                },
            )?),
        };
        let msgs = messages_from(py, r.buffer, &r.records, mq)?;
        Ok(PyGetResult {
            status: r.status,
            next_offset: r.next_offset,
            min_offset: r.min_offset,
            max_offset: r.max_offset,
            messages: PyList::new(py, msgs)?.unbind(),
        })
    }

    /// The message whose offset id or unique id (through the key index) is `msg_id`.
    fn get(&self, py: Python<'_>, msg_id: Str<'_, MsgIdText>) -> PyResult<PyMessageExt> {
        let id: &str = &msg_id;
        // An offset id names its record directly; anything else is looked up as a unique id.
        if let Ok(offset) = self.store.decode_msg_id(id) {
            if let Ok(m) = self.record_at(py, offset) {
                return Ok(m);
            }
        }
        let not_found = || {
            PyMqError(mqlite::Error::MessageNotFound {
                key: mqlite::error::MessageKey::Id(id.to_owned()),
            })
        };
        let found = py.detach(|| self.store.find_by_unique_id(id, None));
        match found {
            Ok(Some(offset)) => self.record_at(py, offset),
            // A text that cannot be a key is no message's id.
            Ok(None) | Err(mqlite::Error::InvalidArgument { .. }) => Err(not_found().into()),
            Err(mqlite::Error::IndexUnavailable { .. }) => Err(not_found().into()),
            Err(e) => Err(PyMqError(e).into()),
        }
    }

    /// Messages of `topic` indexed under `key` stored in `[begin_ms, end_ms]`, newest first:
    /// (messages, truncated, index status).
    #[pyo3(signature = (topic, key, begin_ms, end_ms, limit))]
    fn find_by_key<'py>(
        &self,
        py: Python<'py>,
        topic: Str<'_, TopicName>,
        key: Str<'_, LookupKey>,
        begin_ms: Int,
        end_ms: Int,
        limit: Int,
    ) -> PyResult<(Vec<PyMessageExt>, bool, Bound<'py, PyDict>)> {
        let begin = args::millis(&begin_ms, "begin")?;
        let end = args::millis(&end_ms, "end")?;
        let limit = args::count(&limit, "limit", 1, mqlite::store::MAX_KEY_QUERY)?;
        let (topic, key): (&str, &str) = (&topic, &key);
        let q = py
            .detach(|| self.store.find_by_key(topic, key, begin, end, limit))
            .map_err(PyMqError)?;
        let mut msgs = Vec::with_capacity(q.offsets.len());
        for off in q.offsets {
            match self.record_at(py, off) {
                Ok(m) => msgs.push(m),
                // Deleted by retention since the lookup.
                Err(_) => continue,
            }
        }
        Ok((msgs, q.truncated, index_status_dict(py, &q.status)?))
    }

    /// The key index's state.
    fn index_status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = py.detach(|| self.store.index_status()).map_err(PyMqError)?;
        index_status_dict(py, &s)
    }

    fn get_by_offset(&self, py: Python<'_>, commit_log_offset: Int) -> PyResult<PyMessageExt> {
        let off = args::offset(&commit_log_offset, "commit_log_offset")?;
        self.record_at(py, off)
    }

    /// Sends the message at `commit_log_offset` back for `group` (`mqlite::store::retry`):
    /// `delay_level` 0 lets the store pick (3 + reconsume count), a level of the delay table
    /// chooses it, -1 sends it to the dead-letter topic. Returns (topic, dead, reconsume
    /// times, delay level).
    #[pyo3(signature = (group, commit_log_offset, delay_level, max_reconsume_times, error_type = None, error = None))]
    #[allow(clippy::too_many_arguments)]
    fn send_back(
        &self,
        py: Python<'_>,
        group: Str<'_, GroupName>,
        commit_log_offset: Int,
        delay_level: Int,
        max_reconsume_times: Int,
        error_type: Option<String>,
        error: Option<String>,
    ) -> PyResult<(String, bool, i32, u32)> {
        use mqlite::store::retry::{NextDelay, SendBack};
        let offset = args::offset(&commit_log_offset, "commit_log_offset")?;
        let level: i64 = delay_level.to(|v| {
            crate::errors::InvalidMessageError::new_err(format!("delay_level out of range: {v}"))
        })?;
        let delay = match level {
            -1 => NextDelay::DeadLetter,
            0 => NextDelay::Auto,
            l => NextDelay::Level(u32::try_from(l).map_err(|_| {
                crate::errors::InvalidMessageError::new_err(format!(
                    "delay_level must be -1 (dead letter), 0 (automatic) or a level, got {l}"
                ))
            })?),
        };
        let max: u32 = max_reconsume_times.to(|v| {
            InvalidConfigError::new_err(format!("max_reconsume_times out of range: {v}"))
        })?;
        let error = match (&error_type, &error) {
            (Some(t), Some(e)) => Some((t.as_str(), e.as_str())),
            (Some(t), None) => Some((t.as_str(), "")),
            (None, Some(e)) => Some(("", e.as_str())),
            (None, None) => None,
        };
        let group: &str = &group;
        let req = SendBack {
            group,
            commit_log_offset: offset,
            delay,
            max_reconsume_times: max,
            error,
        };
        let sent = py
            .detach(|| self.store.send_back(&req))
            .map_err(PyMqError)?;
        Ok((
            sent.topic,
            sent.dead,
            sent.reconsume_times,
            sent.delay_level,
        ))
    }

    fn offset_for_timestamp(
        &self,
        py: Python<'_>,
        topic: Str<'_, TopicName>,
        queue_id: Int,
        timestamp_ms: Int,
    ) -> PyResult<u64> {
        let q = args::queue_id(&queue_id)?;
        let ts = args::millis(&timestamp_ms, "timestamp")?;
        let topic: &str = &topic;
        py.detach(|| self.store.offset_for_timestamp(topic, q, ts))
            .map_err(|e| PyMqError(e).into())
    }

    /// Reads the cursors in order (waiting up to `timeout` when none has anything) and advances
    /// them; a cursor whose read fails keeps its position and carries the error, and
    /// `on_error(cursor)` is called when that changes; `on_skip(cursor, from, to)` when a cursor
    /// moves past expired messages; reading starts at index `start`; see `cursor.rs`. Returns
    /// the messages.
    #[pyo3(signature = (
        cursors, max_messages, timeout, lock, on_error = None, on_skip = None, *,
        max_bytes = None, oversized_first = true, on_full = None, start = 0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn poll_cursors(
        &self,
        py: Python<'_>,
        cursors: &Bound<'_, PyList>,
        max_messages: Int,
        timeout: Option<Float>,
        lock: &Bound<'_, PyAny>,
        on_error: Option<&Bound<'_, PyAny>>,
        on_skip: Option<&Bound<'_, PyAny>>,
        max_bytes: Option<Int>,
        oversized_first: bool,
        on_full: Option<&Bound<'_, PyAny>>,
        start: usize,
    ) -> PyResult<Py<PyList>> {
        crate::cursor::poll_cursors(
            py,
            &self.store,
            cursors,
            max_messages,
            timeout,
            lock,
            (max_bytes, oversized_first),
            start,
            crate::cursor::Hooks {
                on_error,
                on_skip,
                on_full,
            },
        )
    }

    fn wait_for(
        &self,
        py: Python<'_>,
        queues: Vec<(OwnedStr<TopicName>, Int, Int)>,
        timeout: Option<Float>,
    ) -> PyResult<bool> {
        let mut qs = Vec::with_capacity(queues.len());
        for (t, q, o) in &queues {
            qs.push((&**t, args::queue_id(q)?, args::offset(o, "offset")?));
        }
        let timeout = timeout.map(args::timeout).transpose()?;
        let deadline = interrupt::deadline(timeout);
        let ready = interrupt::wait(py, deadline, |slice| {
            let ready = self.store.wait_for_messages(&qs, Some(slice))?;
            Ok(ready.then_some(()))
        })?;
        Ok(ready.is_some())
    }

    /// Delivers the delayed, timer and retry messages the store's clock makes due, when this
    /// process hosts delivery; the number delivered (0 in a process that does not host it).
    fn deliver_due(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.store.deliver_due())
            .map_err(|e| PyMqError(e).into())
    }

    /// Cancels the timers named by `msg_id` or by `key` (of `topic`); `due_ms`: reschedules
    /// them instead. One tuple per timer: (id, outcome name, its facts or None), the id None
    /// when nothing matched. The arguments' types are checked by `mqlite.Store`.
    /// `delay_ms`: reschedules them to that long after the store's clock.
    #[pyo3(signature = (msg_id, key, topic, due_ms = None, delay_ms = None))]
    fn _change_timers<'py>(
        &self,
        py: Python<'py>,
        msg_id: Option<String>,
        key: Option<String>,
        topic: Option<String>,
        due_ms: Option<i64>,
        delay_ms: Option<i64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let due_ms = match delay_ms {
            Some(d) => Some(self.store.config().clock.now_ms().saturating_add(d)),
            None => due_ms,
        };
        let target = match (&msg_id, &key) {
            (Some(id), None) => TimerTarget::MsgId(id),
            (None, Some(k)) => TimerTarget::Key {
                key: k,
                topic: topic.as_deref(),
            },
            _ => {
                return Err(PyMqError(mqlite::Error::InvalidArgument {
                    field: "msg_id",
                    reason: "give msg_id or key, not both".into(),
                })
                .into())
            }
        };
        let answers = py
            .detach(|| match due_ms {
                None => self.store.cancel_timer(target),
                Some(at) => self.store.reschedule_timer(target, at),
            })
            .map_err(PyMqError)?;
        let rows = answers
            .iter()
            .map(|a| {
                let outcome = match a.outcome {
                    TimerOutcome::Cancelled => "CANCELLED",
                    TimerOutcome::Rescheduled => "RESCHEDULED",
                    TimerOutcome::AlreadyDelivered => "ALREADY_DELIVERED",
                    TimerOutcome::AlreadyCancelled => "ALREADY_CANCELLED",
                    TimerOutcome::NotFound => "NOT_FOUND",
                };
                let timer = a.timer.as_ref().map(|t| timer_row(py, t)).transpose()?;
                Ok((a.id.map(|i| i.to_string()), outcome, timer))
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, rows)
    }

    /// Decides transactions `ids` (commit when `commit`, else roll back) and sets progress
    /// `progress = (key, value)` when given, in one append; True when anything was written.
    /// Argument types are checked by `mqlite.TransactionProducer`.
    #[pyo3(signature = (ids, commit, progress = None))]
    fn _txn_end(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        commit: bool,
        progress: Option<(String, String)>,
    ) -> PyResult<bool> {
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let progress = progress.as_ref().map(|(k, v)| (k.as_str(), v.as_str()));
        py.detach(|| self.store.txn_end(&refs, commit, progress))
            .map_err(|e| PyMqError(e).into())
    }

    /// Claims the transactions of `group` due for a check: `(id, first half offset)` each.
    #[pyo3(signature = (group, timeout_ms, interval_ms, max_checks, limit))]
    fn _txn_claim(
        &self,
        py: Python<'_>,
        group: &str,
        timeout_ms: i64,
        interval_ms: i64,
        max_checks: u32,
        limit: usize,
    ) -> PyResult<Vec<(String, u64)>> {
        let policy = mqlite::store::txn::CheckPolicy {
            timeout_ms,
            interval_ms,
            max_checks,
            limit,
        };
        py.detach(|| self.store.txn_claim_checks(group, policy))
            .map_err(|e| PyMqError(e).into())
    }

    /// Transactions as tuples `(id, group, state, half offsets, checks, first_ms, age_ms)`: the
    /// open ones, or all when `all`, of `group` or of every group.
    #[pyo3(signature = (group = None, all = false))]
    #[allow(clippy::type_complexity)]
    fn _txn_list(
        &self,
        py: Python<'_>,
        group: Option<&str>,
        all: bool,
    ) -> PyResult<Vec<(String, String, &'static str, Vec<u64>, u32, i64, i64)>> {
        let rows = py
            .detach(|| self.store.txn_list(group, all))
            .map_err(PyMqError)?;
        Ok(rows
            .into_iter()
            .map(|t| {
                (
                    t.id, t.group, t.state, t.halves, t.checks, t.first_ms, t.age_ms,
                )
            })
            .collect())
    }

    /// The progress value last set under `key` by `_txn_end`, or None.
    fn _txn_progress(&self, py: Python<'_>, key: &str) -> PyResult<Option<String>> {
        py.detach(|| self.store.txn_progress(key))
            .map_err(|e| PyMqError(e).into())
    }

    /// How many timers are stored and neither delivered nor cancelled, as far as this
    /// process's progress knows.
    fn pending_timers(&self, py: Python<'_>) -> u64 {
        py.detach(|| self.store.pending_timers())
    }

    /// The pending timers the filter selects, the earliest due first, as tuples (see
    /// `timer_row`).
    #[pyo3(signature = (topic, key, due_from, due_to, limit))]
    fn _list_timers<'py>(
        &self,
        py: Python<'py>,
        topic: Option<String>,
        key: Option<String>,
        due_from: Option<i64>,
        due_to: Option<i64>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let filter = TimerFilter {
            topic: topic.as_deref(),
            key: key.as_deref(),
            due_from,
            due_to,
            limit,
        };
        let timers = py
            .detach(|| self.store.list_timers(&filter))
            .map_err(PyMqError)?;
        let rows = timers
            .iter()
            .map(|t| timer_row(py, t))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, rows)
    }

    /// The commit-log files retention deleted since the last call, as (path, first offset,
    /// size, last modified ms, reason) oldest first, and how many more fell out of the record.
    fn _take_deleted_files(&self) -> (Vec<DeletedRow>, u64) {
        let (files, dropped) = self.store.take_deleted_files();
        let rows = files
            .into_iter()
            .map(|f| {
                let path = f.path.to_string_lossy().into_owned();
                (path, f.from_offset, f.size, f.modified_ms, f.reason.name())
            })
            .collect();
        (rows, dropped)
    }

    fn delete_expired_files(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.store.delete_expired_files())
            .map_err(|e| PyMqError(e).into())
    }

    /// Sync mode: waits until the commit log is durable below `end` (one group commit for
    /// every waiter). False when the disk did not confirm within the store's sync flush
    /// timeout. Async mode: true at once.
    fn wait_durable(&self, py: Python<'_>, end: Int) -> PyResult<bool> {
        let end = args::offset(&end, "end")?;
        let deadline = interrupt::deadline(Some(self.store.config().sync_flush_timeout));
        let durable = interrupt::wait(py, deadline, |slice| {
            Ok(self.store.wait_durable(end, slice)?.then_some(()))
        })?;
        Ok(durable.is_some())
    }

    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.store.flush())
            .map_err(|e| PyMqError(e).into())
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let (min, max) = self.store.commit_log_range();
        d.set_item("commit_log_min_offset", min)?;
        d.set_item("commit_log_max_offset", max)?;
        d.set_item("flushed_offset", self.store.flushed_offset())?;
        d.set_item("dispatched_offset", self.store.dispatched_offset())?;
        let r = self.store.recovery_report();
        d.set_item("recovery_abnormal", r.abnormal)?;
        d.set_item("recovery_end", r.end)?;
        d.set_item("recovery_records_scanned", r.records_scanned)?;
        d.set_item("recovery_torn_tail", r.torn_tail)?;
        d.set_item("read_only", self.store.is_read_only())?;
        d.set_item(
            "flush_mode",
            flush_mode_name(self.store.config().flush_mode),
        )?;
        let g = self.store.geometry();
        d.set_item("commit_log_file_size", g.commit_log_file_size)?;
        d.set_item("consume_queue_file_units", g.consume_queue_file_units)?;
        d.set_item("max_message_size", self.store.max_message_size())?;
        Ok(d)
    }
}
