//! `read_columns`: a queue range read as Arrow column buffers, for columnar consumers (the
//! Spark source, `mqlite.spark`). One call returns each column as a few `bytes` objects laid
//! out as Arrow's buffers (values in the process's byte order, `i32` offsets, LSB-first validity
//! bits), so pyarrow wraps them without a Python object per message.
//!
//! Invariants of a result of `n` rows: every offsets buffer holds `n + 1` (or, for the strings
//! inside a list or map, entries + 1) `i32` values starting at 0 and never decreasing; a
//! validity bitmap holds `ceil(n / 8)` bytes. Rows are the matching messages of queue offsets
//! `[offset, end)`, in queue order; a read stops early rather than let a column's data pass
//! `MAX_COLUMN_BYTES`, so `i32` offsets never overflow.

use mqlite::{GetStatus, ReadLimit, RecordView, TagFilter};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::args::{self, FilterTag, Int, OwnedStr, Str, TopicName};
use crate::errors::{CorruptedLogError, PyMqError};
use crate::store::PyStore;

/// The most bytes of records one call reads: far below `i32::MAX`, so no column's data
/// (bodies, property text) can overflow its `i32` offsets.
const MAX_COLUMN_BYTES: usize = 256 << 20;

/// Appends `v` as Arrow stores it in memory: in the process's own byte order, since pyarrow
/// reads the buffer in place (it is never written to disk or sent elsewhere).
#[allow(clippy::host_endian_bytes)]
fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_ne_bytes());
}

/// `put_i32` of an `i64`.
#[allow(clippy::host_endian_bytes)]
fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_ne_bytes());
}

/// A variable-length column (binary or UTF-8 text): Arrow's offsets and data buffers.
#[derive(Default)]
struct VarColumn {
    offsets: Vec<u8>,
    data: Vec<u8>,
}

impl VarColumn {
    fn new() -> Self {
        let mut c = VarColumn::default();
        put_i32(&mut c.offsets, 0);
        c
    }

    /// Appends one value. The caller keeps the data under `MAX_COLUMN_BYTES` (< `i32::MAX`).
    fn push(&mut self, value: &[u8]) {
        self.data.extend_from_slice(value);
        put_i32(
            &mut self.offsets,
            i32::try_from(self.data.len()).unwrap_or(i32::MAX),
        );
    }

    /// The number of values so far, as the next list offset.
    fn count(&self) -> i32 {
        i32::try_from(self.offsets.len() / 4 - 1).unwrap_or(i32::MAX)
    }
}

/// A list column's offsets (`list<string>`, or a map's entries): `n + 1` `i32`s.
struct ListOffsets(Vec<u8>);

impl ListOffsets {
    fn new() -> Self {
        let mut o = ListOffsets(Vec::new());
        o.push(0);
        o
    }
    fn push(&mut self, end: i32) {
        put_i32(&mut self.0, end);
    }
}

/// Validity bits, LSB first, one per row.
#[derive(Default)]
struct Validity {
    bits: Vec<u8>,
    len: usize,
}

impl Validity {
    fn push(&mut self, valid: bool) {
        if self.len.is_multiple_of(8) {
            self.bits.push(0);
        }
        if valid {
            if let Some(last) = self.bits.last_mut() {
                *last |= 1 << (self.len % 8);
            }
        }
        self.len += 1;
    }
}

/// Every column of one read.
struct Columns {
    rows: usize,
    value: VarColumn,
    offset: Vec<u8>,
    timestamp_us: Vec<u8>,
    born_us: Vec<u8>,
    reconsume: Vec<u8>,
    tags: VarColumn,
    tags_valid: Validity,
    keys: ListOffsets,
    key_text: VarColumn,
    msg_id: VarColumn,
    /// With `properties`: the map's entry offsets, keys and values.
    props: Option<(ListOffsets, VarColumn, VarColumn)>,
}

impl Columns {
    fn new(properties: bool) -> Self {
        Columns {
            rows: 0,
            value: VarColumn::new(),
            offset: Vec::new(),
            timestamp_us: Vec::new(),
            born_us: Vec::new(),
            reconsume: Vec::new(),
            tags: VarColumn::new(),
            tags_valid: Validity::default(),
            keys: ListOffsets::new(),
            key_text: VarColumn::new(),
            msg_id: VarColumn::new(),
            props: properties.then(|| (ListOffsets::new(), VarColumn::new(), VarColumn::new())),
        }
    }

    /// Appends the message of one record the store returned (already verified by the read).
    fn push(&mut self, record: &[u8]) -> PyResult<()> {
        let view = RecordView::parse(record, false).map_err(|e| {
            CorruptedLogError::new_err(format!("stored record does not decode: {e}"))
        })?;
        let body = view.decoded_body().map_err(PyMqError)?;
        self.value.push(&body);
        put_i64(
            &mut self.offset,
            i64::try_from(view.queue_offset()).unwrap_or(i64::MAX),
        );
        // Spark's TIMESTAMP is microseconds since the epoch; the store keeps milliseconds.
        put_i64(
            &mut self.timestamp_us,
            view.store_timestamp().saturating_mul(1000),
        );
        put_i64(
            &mut self.born_us,
            view.born_timestamp().saturating_mul(1000),
        );
        put_i32(&mut self.reconsume, view.reconsume_times());
        let tags = view.tags();
        self.tags.push(tags.unwrap_or("").as_bytes());
        self.tags_valid.push(tags.is_some());
        for key in view.keys() {
            self.key_text.push(key.as_bytes());
        }
        self.keys.push(self.key_text.count());
        self.msg_id.push(view.msg_id().as_bytes());
        if let Some((entries, names, values)) = &mut self.props {
            for (name, value) in view.property_pairs() {
                names.push(name.as_bytes());
                values.push(value.as_bytes());
            }
            entries.push(names.count());
        }
        self.rows += 1;
        Ok(())
    }

    fn into_dict<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let put = |name: &str, bytes: &[u8]| d.set_item(name, PyBytes::new(py, bytes));
        put("value.offsets", &self.value.offsets)?;
        put("value.data", &self.value.data)?;
        put("offset", &self.offset)?;
        put("timestamp", &self.timestamp_us)?;
        put("bornTimestamp", &self.born_us)?;
        put("reconsumeTimes", &self.reconsume)?;
        put("tags.offsets", &self.tags.offsets)?;
        put("tags.data", &self.tags.data)?;
        put("tags.validity", &self.tags_valid.bits)?;
        put("keys.offsets", &self.keys.0)?;
        put("keys.item.offsets", &self.key_text.offsets)?;
        put("keys.item.data", &self.key_text.data)?;
        put("msgId.offsets", &self.msg_id.offsets)?;
        put("msgId.data", &self.msg_id.data)?;
        if let Some((entries, names, values)) = &self.props {
            put("properties.offsets", &entries.0)?;
            put("properties.key.offsets", &names.offsets)?;
            put("properties.key.data", &names.data)?;
            put("properties.value.offsets", &values.offsets)?;
            put("properties.value.data", &values.data)?;
        }
        Ok(d)
    }
}

/// What `read_columns` returns: `(status, next_offset, min_offset, max_offset, rows, columns)`.
type ColumnsResult<'py> = (&'static str, u64, u64, u64, usize, Bound<'py, PyDict>);

/// What one `read_columns` call found, before it becomes Python objects.
struct Found {
    status: GetStatus,
    next_offset: u64,
    min_offset: u64,
    max_offset: u64,
    columns: Columns,
}

/// Reads the matching messages of queue offsets `[offset, end)` of `(topic, queue_id)`, at most
/// `max_messages` of them and at most `MAX_COLUMN_BYTES` of records, as Arrow column buffers.
///
/// Returns `(status, next_offset, min_offset, max_offset, rows, columns)`: `status` is the
/// read's `GetResult.status` (`"OFFSET_TOO_SMALL"` when retention removed `offset`, with
/// `next_offset` the queue's first), `next_offset` is where the next call starts (at most
/// `end`), `columns` maps `"<column>[.<buffer>]"` to the buffer's bytes (the module's doc
/// gives the layout). With `tags`, only messages with one of those tags are rows (the others
/// are skipped, and `next_offset` moves past them). With `properties`, the `properties.*`
/// buffers (a `map<string, string>`) are there too.
#[pyfunction]
#[pyo3(signature = (store, topic, queue_id, offset, end, max_messages, tags = None, properties = false))]
#[allow(clippy::too_many_arguments)]
pub fn read_columns<'py>(
    py: Python<'py>,
    store: PyRef<'py, PyStore>,
    topic: Str<'_, TopicName>,
    queue_id: Int,
    offset: Int,
    end: Int,
    max_messages: Int,
    tags: Option<Vec<OwnedStr<FilterTag>>>,
    properties: bool,
) -> PyResult<ColumnsResult<'py>> {
    let q = args::queue_id(&queue_id)?;
    let offset = args::offset(&offset, "offset")?;
    let end = args::offset(&end, "end")?;
    let max = args::max_messages(&max_messages)?;
    let filter = match &tags {
        Some(t) => TagFilter::tags(t.iter().map(|t| &**t)),
        None => TagFilter::all(),
    };
    let topic: &str = &topic;
    let core = store.core();
    let found = py.detach(|| -> PyResult<Found> {
        let mut columns = Columns::new(properties);
        // Without a filter a read of `end - offset` messages stops at `end`; with one it may
        // scan past `end`, and the rows from there are left for a later range.
        let want = usize::try_from(end.saturating_sub(offset))
            .unwrap_or(usize::MAX)
            .min(max);
        if want == 0 {
            let (min, maxo) = core.queue_offsets(topic, q).map_err(PyMqError)?;
            return Ok(Found {
                status: GetStatus::NoMatchedMessage,
                next_offset: offset,
                min_offset: min,
                max_offset: maxo,
                columns,
            });
        }
        let limit = ReadLimit {
            messages: want,
            bytes: MAX_COLUMN_BYTES,
            oversized_first: true,
        };
        let r = core
            .get_messages_within(topic, q, offset, limit, &filter)
            .map_err(PyMqError)?;
        let mut next = r.next_offset.min(end);
        for &(start, len) in &r.records {
            let record = r
                .buffer
                .get(start as usize..start as usize + len as usize)
                .unwrap_or(&[]);
            let at = RecordView::parse(record, false)
                .map(|v| v.queue_offset())
                .unwrap_or(u64::MAX);
            if at >= end {
                next = end;
                break;
            }
            columns.push(record)?;
        }
        if r.status == GetStatus::OffsetTooSmall {
            next = r.next_offset;
        }
        Ok(Found {
            status: r.status,
            next_offset: next,
            min_offset: r.min_offset,
            max_offset: r.max_offset,
            columns,
        })
    })?;
    let rows = found.columns.rows;
    Ok((
        found.status.name(),
        found.next_offset,
        found.min_offset,
        found.max_offset,
        rows,
        found.columns.into_dict(py)?,
    ))
}
