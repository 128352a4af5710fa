//! The read path: consume-queue ranges with tag filtering, RocketMQ's get statuses, lookups by
//! message id and by time, and waiting for new data.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::Store;
use crate::dispatch::queue_index::{LogicalQueue, QueueEntry};
use crate::error::{Error, Result};
use crate::mapped_file::mmap::Advice;
use crate::message::codec::{DecodeError, RecordView, STORE_HOST};
use crate::message::{msg_id, properties, validate};

/// RocketMQ's `GetMessageStatus` values that mqlite returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetStatus {
    /// Messages returned.
    Found,
    /// The queue has no message at all.
    NoMessageInQueue,
    /// The offset is below the queue's minimum (expired); `next_offset` is the minimum.
    OffsetTooSmall,
    /// The offset equals the queue's maximum: nothing new yet.
    OffsetOverflowOne,
    /// The offset is past the queue's maximum; `next_offset` is the maximum.
    OffsetOverflowBadly,
    /// Units were scanned but none matched the filter.
    NoMatchedMessage,
    /// Units were found but their records are gone (expired).
    OffsetFoundNull,
}

impl GetStatus {
    /// RocketMQ's name of the status.
    pub fn name(&self) -> &'static str {
        match self {
            GetStatus::Found => "FOUND",
            GetStatus::NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
            GetStatus::OffsetTooSmall => "OFFSET_TOO_SMALL",
            GetStatus::OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
            GetStatus::OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
            GetStatus::NoMatchedMessage => "NO_MATCHED_MESSAGE",
            GetStatus::OffsetFoundNull => "OFFSET_FOUND_NULL",
        }
    }
}

/// A tag subscription: empty = every message; otherwise messages whose TAGS is in the set.
#[derive(Debug, Clone, Default)]
pub struct TagFilter {
    tags: HashSet<String>,
    codes: HashSet<i64>,
}

impl TagFilter {
    /// Matches every message.
    pub fn all() -> Self {
        TagFilter::default()
    }

    /// Matches messages tagged with any of `tags` (`"*"` or no tag: everything).
    pub fn tags<'a>(tags: impl IntoIterator<Item = &'a str>) -> Self {
        let mut f = TagFilter::default();
        for t in tags {
            let t = t.trim();
            if t == "*" {
                return TagFilter::default();
            }
            if !t.is_empty() {
                f.codes.insert(crate::message::tags::of_tag(t));
                f.tags.insert(t.to_owned());
            }
        }
        f
    }

    /// Parses RocketMQ's expression `"TagA || TagB"` (`"*"` or empty: everything).
    pub fn parse(expr: &str) -> Self {
        TagFilter::tags(expr.split("||"))
    }

    /// True if the filter accepts everything.
    pub fn is_all(&self) -> bool {
        self.tags.is_empty()
    }

    fn code_matches(&self, code: i64) -> bool {
        self.is_all() || self.codes.contains(&code)
    }

    fn record_matches(&self, props: &[u8]) -> bool {
        self.is_all()
            || properties::get(props, properties::TAGS).is_some_and(|t| self.tags.contains(t))
    }
}

/// The result of one read: raw record bytes (decode them with `RecordView::parse`).
#[derive(Debug, Clone)]
pub struct GetResult {
    /// Status.
    pub status: GetStatus,
    /// Where the next read should start.
    pub next_offset: u64,
    /// Queue minimum offset at the time of the read.
    pub min_offset: u64,
    /// Queue maximum offset (next to be written) at the time of the read.
    pub max_offset: u64,
    /// Concatenated record bytes.
    pub buffer: Vec<u8>,
    /// `(start, len)` of each record in `buffer`.
    pub records: Vec<(u32, u32)>,
    /// The read stopped before a matching record because it would have taken `buffer` past
    /// the read's byte bound (`ReadLimit::bytes`); `next_offset` is that record's.
    pub byte_limited: bool,
}

/// The most one read returns: at most `messages` records, and at most `bytes` bytes of records,
/// except that with `oversized_first` a first matching record larger than `bytes` is returned
/// alone (so a reader whose bound is below one message still moves on, as Kafka's
/// `fetch.max.bytes` does). Without it a read whose first record is over the bound returns
/// nothing, with `byte_limited` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimit {
    /// Most records, in `[1, MAX_MESSAGES_PER_READ]`.
    pub messages: usize,
    /// Most bytes of records (whole stored records, as in `GetResult::buffer`).
    pub bytes: usize,
    /// Return a first record over `bytes` rather than nothing.
    pub oversized_first: bool,
}

impl ReadLimit {
    /// `messages` records, however many bytes they take.
    pub fn messages(messages: usize) -> Self {
        ReadLimit {
            messages,
            bytes: usize::MAX,
            oversized_first: true,
        }
    }
}

impl GetResult {
    fn empty(status: GetStatus, next: u64, min: u64, max: u64) -> Self {
        GetResult {
            status,
            next_offset: next,
            min_offset: min,
            max_offset: max,
            buffer: Vec::new(),
            records: Vec::new(),
            byte_limited: false,
        }
    }

    /// Iterates the records.
    pub fn iter(&self) -> impl Iterator<Item = RecordView<'_>> {
        self.records.iter().filter_map(|&(s, l)| {
            self.buffer
                .get(s as usize..(s + l) as usize)
                .and_then(|b| RecordView::parse(b, false).ok())
        })
    }
}

/// Most units a filtered read scans before returning NO_MATCHED_MESSAGE.
const MAX_FILTER_SCAN: usize = 16_000;
/// Largest `max_messages` per read.
pub const MAX_MESSAGES_PER_READ: usize = 65_536;

impl Store {
    /// Read-your-writes: dispatches whatever was appended but not yet indexed (batches leave it
    /// to the reput thread) before a read looks at the consume queues. One atomic comparison
    /// when dispatch is caught up.
    pub(in crate::store) fn catch_up(&self) {
        if let Some(r) = &self.inner.reput {
            // Shared writers: what the other processes published (commit_log/shared.rs); a
            // failure leaves the view as it was, for the next read to retry.
            let _ = self.inner.commit_log.follow_shared();
            if r.dispatched_offset() < r.confirm_offset() {
                // A failure stays recorded in the reput service, which retries it.
                let _ = r.dispatch_all();
            }
        }
    }

    /// The queue, or `None` when it does not exist. `InvalidTopic` for a name no topic can
    /// have: every read entry point goes through here, so a bad name is reported the same way
    /// by each, and checked only when the lookup misses (every queue in the map has a valid
    /// name).
    pub(in crate::store) fn queue(
        &self,
        topic: &str,
        queue_id: u32,
    ) -> Result<Option<Arc<dyn LogicalQueue>>> {
        let Some(cq) = self.inner.index.queue(topic, queue_id)? else {
            validate::check_topic(topic)?;
            return Ok(None);
        };
        if self.inner.config.read_only && !self.follow() {
            // Follow the writer (follow.rs): map the files it created since we last looked,
            // and start after entries whose records are gone.
            cq.follow(false, self.inner.commit_log.min_offset());
        }
        // A topic created again after a delete starts at its `since` offset: the queue's older
        // entries are the deleted topic's. Shared writers: another process may have created it
        // again (`sync` is one comparison when no process changed the table).
        self.inner.topics.sync()?;
        let since = self.inner.topics.since(topic);
        if since > 0 {
            cq.skip_below(since);
        }
        Ok(Some(cq))
    }

    /// (min, max) logical offsets of a queue; max is the next offset to be written.
    pub fn queue_offsets(&self, topic: &str, queue_id: u32) -> Result<(u64, u64)> {
        self.check_usable()?;
        self.catch_up();
        Ok(self
            .queue(topic, queue_id)?
            .map(|cq| (cq.min_offset(), cq.max_offset()))
            .unwrap_or((0, 0)))
    }

    /// Reads up to `max` messages of (topic, queue) from `offset`, filtered by tag.
    /// `TopicNotReadable` if the topic's permission forbids reads.
    pub fn get_messages(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max: usize,
        filter: &TagFilter,
    ) -> Result<GetResult> {
        self.get_messages_within(topic, queue_id, offset, ReadLimit::messages(max), filter)
    }

    /// `get_messages` bounded by bytes as well as by count (`ReadLimit`).
    pub fn get_messages_within(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        limit: ReadLimit,
        filter: &TagFilter,
    ) -> Result<GetResult> {
        let max = limit.messages;
        self.check_usable()?;
        self.catch_up();
        self.inner.topics.sync()?;
        if !self.inner.topics.readable(topic) {
            return Err(Error::TopicNotReadable {
                topic: topic.to_owned(),
            });
        }
        if max == 0 || max > MAX_MESSAGES_PER_READ {
            return Err(Error::InvalidArgument {
                field: "max_messages",
                reason: format!("{max} is outside [1, {MAX_MESSAGES_PER_READ}]"),
            });
        }
        let Some(cq) = self.queue(topic, queue_id)? else {
            let status = if offset == 0 {
                GetStatus::NoMessageInQueue
            } else {
                GetStatus::OffsetOverflowBadly
            };
            return Ok(GetResult::empty(status, 0, 0, 0));
        };
        let cq = cq.as_ref();
        match self.read_queue(cq, (topic, queue_id), offset, limit, filter) {
            // A follower may be looking at a file the writer replaced: damage is reported only
            // if it is still there once the files read were checked against the directories.
            Err(Error::Corrupted { .. }) if self.inner.config.read_only => {
                self.recheck(Some(cq));
                self.read_queue(cq, (topic, queue_id), offset, limit, filter)
            }
            r => r,
        }
    }

    /// `get_messages` of an existing queue, `(topic, queue_id)`.
    fn read_queue(
        &self,
        cq: &dyn LogicalQueue,
        (topic, queue_id): (&str, u32),
        offset: u64,
        limit: ReadLimit,
        filter: &TagFilter,
    ) -> Result<GetResult> {
        let max = limit.messages;
        let (min, maxo) = (cq.min_offset(), cq.max_offset());
        if maxo == 0 {
            return Ok(GetResult::empty(GetStatus::NoMessageInQueue, 0, min, maxo));
        }
        if offset < min {
            return Ok(GetResult::empty(GetStatus::OffsetTooSmall, min, min, maxo));
        }
        if offset == maxo {
            return Ok(GetResult::empty(
                GetStatus::OffsetOverflowOne,
                offset,
                min,
                maxo,
            ));
        }
        if offset > maxo {
            return Ok(GetResult::empty(
                GetStatus::OffsetOverflowBadly,
                maxo,
                min,
                maxo,
            ));
        }
        let scan = if filter.is_all() {
            max
        } else {
            MAX_FILTER_SCAN.max(max)
        };
        let mut units: Vec<(u64, QueueEntry)> = Vec::with_capacity(scan.min(4096));
        cq.entries(offset, scan, &mut units);
        if units.is_empty() {
            // Below the queue's end every slot holds a unit: an empty or malformed one is
            // damage, reported rather than left as a read that never advances.
            return Err(damaged_unit(
                cq,
                (topic, queue_id),
                offset,
                "empty or malformed unit below the queue's end",
            ));
        }
        let mut out = GetResult::empty(GetStatus::OffsetFoundNull, offset, min, maxo);
        let cap = crate::config::max_record_len(self.inner.max_message_size);
        out.buffer.reserve(
            units
                .iter()
                .take(max)
                .map(|(_, u)| (u.size as usize).min(cap))
                .sum::<usize>()
                .min(16 << 20)
                .min(limit.bytes),
        );
        let mut next = offset;
        let mut refreshed = false;
        let mut last_record = None;
        for (k, u) in units {
            if out.records.len() >= max {
                break;
            }
            if !u.has_record() || !filter.code_matches(u.tags_code) {
                next = k + 1;
                continue;
            }
            // The byte bound, checked on the unit's size (the record's): a record that would
            // pass it stays for the next read, unless it is an allowed oversized first one.
            let first = out.records.is_empty();
            if out.buffer.len().saturating_add(u.size as usize) > limit.bytes
                && !(first && limit.oversized_first)
            {
                out.byte_limited = true;
                break;
            }
            let mut got =
                self.copy_record(u.offset, u.size, (topic, queue_id, k), filter, &mut out);
            if matches!(got, Ok(None)) && self.inner.config.read_only && !refreshed {
                refreshed = true;
                let _ = self.inner.commit_log.files().refresh(false);
                got = self.copy_record(u.offset, u.size, (topic, queue_id, k), filter, &mut out);
            }
            let got = match got {
                Ok(got) => got,
                // A damaged record: hand out what was read before it; the next read starts at
                // it and reports the damage. Never skipped.
                Err(_) if !out.records.is_empty() => break,
                Err(e) => return Err(e),
            };
            if got.is_some() {
                last_record = Some(u.offset);
            }
            if got.is_none() && u.offset >= self.inner.commit_log.min_offset() {
                // Not expired, yet nothing there: the unit is damaged. Hand out what was read
                // before it; the next read starts at it and reports the damage.
                if !out.records.is_empty() {
                    break;
                }
                return Err(damaged_unit(
                    cq,
                    (topic, queue_id),
                    k,
                    "unit points past the end of the commit log",
                ));
            }
            next = k + 1;
        }
        self.release_behind_reader(cq, offset, next, last_record);
        out.next_offset = next;
        out.status = if !out.records.is_empty() {
            GetStatus::Found
        } else if next > offset {
            GetStatus::NoMatchedMessage
        } else {
            GetStatus::OffsetFoundNull
        };
        Ok(out)
    }

    /// Keeps a consumer's resident set flat: when a read moved on from one commit-log file (or
    /// queue-index file) to the next, the mappings of the file left behind are released
    /// (the data stays in the page cache), and once a second every old file's are.
    fn release_behind_reader(
        &self,
        cq: &dyn LogicalQueue,
        from: u64,
        next: u64,
        last: Option<u64>,
    ) {
        cq.release_behind(from, next);
        if let Some(at) = last {
            let size = self.inner.commit_log.files().file_size();
            let file = at - at % size;
            let prev = self.inner.last_read_file.swap(file, Ordering::Relaxed);
            // Not the files being written (the two newest): the writer is still in them.
            if prev != file && prev.saturating_add(2 * size) <= self.inner.commit_log.max_offset() {
                if let Some(f) = self.inner.commit_log.file_at(prev) {
                    let _ = f.advise(0, f.size(), Advice::DontNeed);
                }
            }
        }
        self.maybe_release_pages();
    }

    /// Copies the record into `out` if it is intact and passes the tag check. `Some(matched)`
    /// when the record was readable.
    fn copy_record(
        &self,
        offset: u64,
        size: u32,
        expect: (&str, u32, u64),
        filter: &TagFilter,
        out: &mut GetResult,
    ) -> Result<Option<bool>> {
        let Some(file) = self.inner.commit_log.file_at(offset) else {
            return Ok(None);
        };
        let local = offset - file.from_offset();
        let Some(b) = file.slice(local, size as usize) else {
            return Ok(None);
        };
        // Every read verifies the whole-record CRC, which covers the body and its BODYCRC: a
        // damaged record is an error, never a message. The parse also requires the unit's topic.
        match RecordView::parse_read(b, expect.0) {
            // The rest of the header must agree with the unit that led here too.
            Ok(v)
                if v.physical_offset() == offset
                    && (v.queue_id(), v.queue_offset()) == (expect.1, expect.2) =>
            {
                if !filter.record_matches(v.properties()) {
                    return Ok(Some(false));
                }
                let start = out.buffer.len() as u32;
                out.buffer.extend_from_slice(b);
                out.records.push((start, size));
                Ok(Some(true))
            }
            Ok(_) | Err(DecodeError::OtherTopic) => Err(Error::Corrupted {
                path: file.path().to_path_buf(),
                offset,
                reason: format!(
                    "record header disagrees with its consume-queue unit {}:{}:{}",
                    expect.0, expect.1, expect.2
                ),
                cause: None,
            }),
            Err(e) => Err(Error::undecodable(file.path(), offset, e, "")),
        }
    }

    /// Decodes the message stored at commit-log `offset` and hands it to `f`.
    pub fn get_by_offset<R>(&self, offset: u64, f: impl FnOnce(&RecordView<'_>) -> R) -> Result<R> {
        self.check_usable()?;
        if !self.inner.config.read_only {
            return self.inner.commit_log.read_record(offset, f);
        }
        if !self.follow() && offset >= self.inner.commit_log.max_offset() {
            let _ = self.inner.commit_log.files().refresh(false);
        }
        // The record may be in a file the writer replaced since the last check: look again
        // before saying it is not there. `f` runs only for a record that was read.
        let mut f = Some(f);
        let mut call = |v: &RecordView<'_>| f.take().map(|f| f(v));
        let got = match self.inner.commit_log.read_record(offset, &mut call) {
            Err(_) => {
                self.recheck(None);
                self.inner.commit_log.read_record(offset, &mut call)
            }
            got => got,
        };
        got?.ok_or_else(|| self.inner.commit_log.not_found(offset))
    }

    /// Copies the raw bytes of the record at commit-log `offset`.
    pub fn record_bytes(&self, offset: u64) -> Result<Vec<u8>> {
        self.get_by_offset(offset, |v| v.bytes().to_vec())
    }

    /// Commit-log offset named by an offset message id (32 upper-case hex characters).
    pub fn decode_msg_id(&self, id: &str) -> Result<u64> {
        match msg_id::decode_offset_msg_id(id) {
            Some((host, off)) if host == STORE_HOST => Ok(off),
            _ => Err(Error::MessageNotFound {
                key: crate::error::MessageKey::Id(id.to_owned()),
            }),
        }
    }

    /// The first logical offset whose store timestamp is >= `ts_ms` (the max offset if none).
    pub fn offset_for_timestamp(&self, topic: &str, queue_id: u32, ts_ms: i64) -> Result<u64> {
        self.check_usable()?;
        self.catch_up();
        let Some(cq) = self.queue(topic, queue_id)? else {
            return Ok(0);
        };
        let (mut lo, mut hi) = (cq.min_offset(), cq.max_offset());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let ts = cq
                .entry(mid)
                .filter(QueueEntry::has_record)
                .and_then(|u| {
                    self.inner
                        .commit_log
                        .with_bytes(u.offset, u.size, store_timestamp)
                })
                .flatten()
                .unwrap_or(i64::MIN);
            if ts < ts_ms {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Blocks until any of `queues` (topic, queue id, offset) has a message at or after its
    /// offset, or `timeout` passes. Writers wake waiters by notification; shared writers and
    /// read-only followers sleep on the store's wake-up word, which every writer process
    /// changes after dispatching (so an append in any process wakes them); followers without
    /// the word poll the files every few milliseconds.
    pub fn wait_for_messages(
        &self,
        queues: &[(&str, u32, u64)],
        timeout: Option<Duration>,
    ) -> Result<bool> {
        self.check_usable()?;
        for &(topic, _, _) in queues {
            validate::check_topic(topic)?;
        }
        self.catch_up();
        // Names were checked above: a lookup error here can only mean "no such queue yet".
        let ready = || {
            queues.iter().any(|&(t, q, off)| {
                self.queue(t, q)
                    .ok()
                    .flatten()
                    .is_some_and(|cq| cq.max_offset() > off)
            }) || self.is_closed()
        };
        let shared = self.inner.commit_log.shared().is_some();
        if let (Some(w), true) = (&self.inner.wake, shared) {
            let deadline = timeout.map(|t| std::time::Instant::now() + t);
            // Each look first takes in what the other processes appended.
            let ready = || {
                if !self.is_closed() {
                    self.catch_up();
                }
                ready()
            };
            return Ok(w.wait(deadline, crate::wakeup::FOLLOWER_NAP, ready));
        }
        if self.inner.config.read_only {
            let deadline = timeout.map(|t| std::time::Instant::now() + t);
            if let Some(w) = &self.inner.wake {
                return Ok(w.wait(deadline, crate::wakeup::FOLLOWER_NAP, ready));
            }
            loop {
                if ready() {
                    return Ok(true);
                }
                if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    return Ok(false);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Ok(self.inner.notifier.wait_until(timeout, ready))
    }
}

fn store_timestamp(b: &[u8]) -> Option<i64> {
    crate::message::codec::store_timestamp_of(b)
}

/// `Corrupted` naming the index file and byte position of entry `k` of `(topic, queue_id)`.
fn damaged_unit(
    cq: &dyn LogicalQueue,
    (topic, queue_id): (&str, u32),
    k: u64,
    reason: &str,
) -> Error {
    let (path, offset) = cq.locate(k);
    Error::Corrupted {
        path,
        offset,
        reason: format!("{topic}:{queue_id} unit {k}: {reason}"),
        cause: None,
    }
}
