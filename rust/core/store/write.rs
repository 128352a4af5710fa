//! The write path: validation (bad input writes nothing), topic auto-creation, append,
//! dispatch, and the durability wait of sync mode.

use super::round_robin::RoundRobin;
use super::Store;
use crate::commit_log::append::{Appended, Prepared};
use crate::config::FlushMode;
use crate::dispatch::reput::Reput;
use crate::dispatch::DispatchRequest;
use crate::error::{Error, Result};
use crate::message::{properties, validate, MessageRef};
use crate::topic_config::{is_system_topic, TopicConfig, MAX_QUEUES, PERM_READ, PERM_WRITE};
use crate::util::{bytes, reuse};
use std::cell::Cell;

/// The largest body `Store::try_put_nowait` appends (copy and checksum stay a few
/// microseconds); larger ones take the blocking path.
pub const QUICK_BODY_MAX: usize = 64 * 1024;

/// Outcome of a put that wrote the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutStatus {
    /// Written (and, in sync mode, confirmed durable).
    PutOk,
    /// Sync mode: written, but the disk did not confirm within the timeout.
    FlushDiskTimeout,
}

/// Result of `put`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutResult {
    /// Durability status.
    pub status: PutStatus,
    /// Where the record landed.
    pub appended: Appended,
    /// The queue it went to (chosen by `put_round_robin`, or the message's own).
    pub queue_id: u32,
}

impl Store {
    /// Appends one message.
    ///
    /// # Errors
    /// A typed error for every invalid input (nothing is written), `ReadOnly`, `Closed`,
    /// `Poisoned` after a failed flush, `StoreFull` when no file can be created.
    pub fn put(&self, msg: &MessageRef<'_>) -> Result<PutResult> {
        self.put_to(msg, None, true)
    }

    /// Appends one message without waiting for the disk in sync mode: the caller pipelines
    /// sends and later confirms them with `wait_durable(result.end())`, so one fsync covers
    /// every send of every thread issued meanwhile. In async mode this is `put`. `queue_id`
    /// `None` picks round robin with `next`, as `put_round_robin`.
    ///
    /// # Errors
    /// As `put`.
    pub fn put_pipelined(
        &self,
        msg: &MessageRef<'_>,
        round_robin: Option<&RoundRobin>,
    ) -> Result<PutResult> {
        self.put_to(msg, round_robin, false)
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

    /// Appends one message to the next queue of its topic in `next` (`msg.queue_id` is
    /// ignored), which advances that topic's turn only: round robin over the write queues, as a
    /// RocketMQ producer does, with a single topic lookup.
    ///
    /// # Errors
    /// As `put`.
    pub fn put_round_robin(&self, msg: &MessageRef<'_>, next: &RoundRobin) -> Result<PutResult> {
        self.put_to(msg, Some(next), true)
    }

    /// `put_pipelined` for a caller that must not wait, such as a Python producer keeping the
    /// GIL for a short send: when the topic exists, the body is at most `QUICK_BODY_MAX` bytes
    /// and the append needs no new file, no page fault and no wait for the append lock, it
    /// appends and returns the result; otherwise it returns `Ok(None)` having written nothing
    /// (the caller then uses the blocking form). Invalid input is rejected as by `put`,
    /// writing nothing. `round_robin` picks the queue as `put_round_robin` does.
    ///
    /// - Async mode (and an in-memory store): the record is dispatched as far as that needs
    ///   no wait (the reput thread does the rest), as by `put`. Consumers waiting for it are
    ///   woken through `wake_via` (called only when there is one): the binding releases the
    ///   GIL around it, so that the woken thread, which may run at once, finds the GIL free.
    /// - Sync mode: a group commit is requested and nothing is awaited, as by `put_pipelined`;
    ///   the caller confirms the record with `wait_durable(result.end())`, which also
    ///   dispatches it (consumers see a sync-mode record only once it is durable).
    ///
    /// # Errors
    /// As `put`.
    pub fn try_put_nowait(
        &self,
        msg: &MessageRef<'_>,
        round_robin: Option<&RoundRobin>,
        wake_via: impl FnOnce(&(dyn Fn() + Sync)),
    ) -> Result<Option<PutResult>> {
        self.try_put_nowait_at(msg, round_robin, self.inner.config.clock.now_ms(), wake_via)
    }

    /// `try_put_nowait` for a caller that has just read the clock (`now_ms`, milliseconds
    /// since the epoch; a producer stamps the born timestamp with it): the record's store
    /// timestamp is taken from it rather than from another clock call, which costs about 20
    /// ns on a virtual machine, 4% of a send from Python.
    ///
    /// # Errors
    /// As `put`.
    pub fn try_put_nowait_at(
        &self,
        msg: &MessageRef<'_>,
        round_robin: Option<&RoundRobin>,
        now_ms: i64,
        wake_via: impl FnOnce(&(dyn Fn() + Sync)),
    ) -> Result<Option<PutResult>> {
        if msg.body.len() > QUICK_BODY_MAX {
            return Ok(None);
        }
        self.check_writable()?;
        let tags = self.check_message(msg)?;
        // Unknown topic (creating it writes a file), or the table busy with a change.
        let Some(Some(info)) = self.inner.topics.try_write_info(msg.topic) else {
            return Ok(None);
        };
        let msg = routed(msg, check_send_allowed(msg.topic, info)?, round_robin)?;
        let prepared = Prepared::new(msg)?;
        let Some(appended) = self.inner.commit_log.try_put(&prepared, now_ms)? else {
            if let Some(next) = round_robin {
                // Not sent: the blocking retry takes this queue's turn again.
                next.give_back(msg.topic);
            }
            return Ok(None);
        };
        let end = appended.physical_offset + u64::from(appended.size);
        match (self.inner.config.flush_mode, &self.inner.flush) {
            (FlushMode::Sync, Some(f)) => f.request_flush(end),
            // Async mode, or an in-memory store (nothing to flush).
            _ => {
                if let Some(r) = &self.inner.reput {
                    let req = known_request(
                        &msg,
                        &appended,
                        tags.map(properties::tags_hash).unwrap_or(0),
                    );
                    r.try_dispatch_quick(appended.physical_offset, end, &[req], wake_via);
                }
            }
        }
        Ok(Some(PutResult {
            status: PutStatus::PutOk,
            appended,
            queue_id: msg.queue_id,
        }))
    }

    fn put_to(
        &self,
        msg: &MessageRef<'_>,
        round_robin: Option<&RoundRobin>,
        wait: bool,
    ) -> Result<PutResult> {
        self.check_writable()?;
        // Message first: a rejected message must not auto-create its topic.
        let tags = self.check_message(msg)?;
        let msg = &routed(msg, self.writable_queues(msg.topic)?, round_robin)?;
        let prepared = Prepared::new(*msg)?;
        let appended = self.inner.commit_log.put(&prepared)?;
        let req = known_request(msg, &appended, tags.map(properties::tags_hash).unwrap_or(0));
        let end = appended.physical_offset + u64::from(appended.size);
        let status = self.after_append(
            end,
            |r| r.try_dispatch_known(appended.physical_offset, end, &[req]),
            wait,
        )?;
        Ok(PutResult {
            status,
            appended,
            queue_id: msg.queue_id,
        })
    }

    /// Appends a batch of messages for one topic and queue, with consecutive queue offsets, in
    /// one file and under one lock. All or nothing: an invalid message rejects the batch.
    pub fn put_batch(&self, msgs: &[MessageRef<'_>], out: &mut Vec<Appended>) -> Result<PutStatus> {
        self.put_batch_to(msgs, None, out).map(|(_, status)| status)
    }

    /// `put_batch` to the next queue of the batch's topic in `next` (the messages' queue ids
    /// are ignored), the topic's turn advancing once per batch; returns the queue chosen.
    ///
    /// # Errors
    /// As `put_batch`.
    pub fn put_batch_round_robin(
        &self,
        msgs: &[MessageRef<'_>],
        next: &RoundRobin,
        out: &mut Vec<Appended>,
    ) -> Result<(u32, PutStatus)> {
        self.put_batch_to(msgs, Some(next), out)
    }

    fn put_batch_to(
        &self,
        msgs: &[MessageRef<'_>],
        round_robin: Option<&RoundRobin>,
        out: &mut Vec<Appended>,
    ) -> Result<(u32, PutStatus)> {
        self.check_writable()?;
        let Some(first) = msgs.first() else {
            return Err(Error::InvalidBatch {
                reason: "empty batch".into(),
            });
        };
        let mut prepared: Vec<Prepared<'_>> = reuse::take(&PREPARED, msgs.len());
        let mut tags_codes: Vec<i64> = reuse::take(&TAGS_CODES, msgs.len());
        for m in msgs {
            // Pointer equality first: batch items usually share one topic string.
            let same_topic = std::ptr::eq(m.topic, first.topic) || m.topic == first.topic;
            if !same_topic || (round_robin.is_none() && m.queue_id != first.queue_id) {
                return Err(Error::InvalidBatch {
                    reason: "a batch must target one topic and queue".into(),
                });
            }
            if m.sysflag & crate::message::sysflag::TRANSACTION_MASK != 0 {
                return Err(Error::InvalidBatch {
                    reason: "transaction messages cannot be batched".into(),
                });
            }
            let tags = self.check_message(m)?;
            tags_codes.push(tags.map(properties::tags_hash).unwrap_or(0));
            prepared.push(Prepared::new(*m)?);
        }
        // Messages first: a rejected batch must not auto-create its topic.
        let queues = self.writable_queues(first.topic)?;
        let queue_id = match round_robin {
            Some(next) => next.next(first.topic, queues),
            None => first.queue_id,
        };
        check_queue_id(first.topic, queue_id, queues)?;
        for p in &mut prepared {
            p.msg.queue_id = queue_id;
        }
        let start = out.len();
        self.inner.commit_log.put_batch(&prepared, out)?;
        let appended = out.get(start..).unwrap_or(&[]);
        let status = match (appended.first(), appended.last()) {
            (Some(first), Some(last)) => {
                let end = last.physical_offset + u64::from(last.size);
                let dispatch = |r: &Reput| {
                    let mut reqs: Vec<DispatchRequest<'_>> = reuse::take(&REQUESTS, msgs.len());
                    reqs.extend(
                        prepared
                            .iter()
                            .zip(appended)
                            .zip(&tags_codes)
                            .map(|((p, a), &tags_code)| known_request(&p.msg, a, tags_code)),
                    );
                    r.try_dispatch_known(first.physical_offset, end, &reqs);
                    reuse::keep(&REQUESTS, reqs);
                };
                self.after_append(end, dispatch, true)?
            }
            _ => PutStatus::PutOk,
        };
        reuse::keep(&PREPARED, prepared);
        reuse::keep(&TAGS_CODES, tags_codes);
        Ok((queue_id, status))
    }

    /// Durability wait and dispatch after an append ending at `end`. In async mode the
    /// producer dispatches inline with `dispatch` (the records' metadata is known, so nothing
    /// is re-parsed, and a consumer blocked in `poll` wakes without a thread hop); when the
    /// dispatch lock is busy the reput thread does it. Either way reads stay read-your-writes:
    /// a read first catches dispatch up (`Store::catch_up`).
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

    fn check_writable(&self) -> Result<()> {
        self.check_usable()?;
        if self.inner.config.read_only {
            return Err(Error::ReadOnly);
        }
        if let Some(cause) = self.inner.flush.as_ref().and_then(|f| f.poisoned()) {
            return Err(Error::Poisoned { cause });
        }
        Ok(())
    }

    /// Validates sizes and properties; returns the TAGS value.
    fn check_message<'m>(&self, m: &MessageRef<'m>) -> Result<Option<&'m str>> {
        validate::check_sizes(
            m.body.len(),
            m.properties.len(),
            self.inner.max_message_size,
        )?;
        check_encoded_properties(m.properties)
    }

    /// The write queue count of a topic that accepts sends, auto-creating it if allowed.
    fn writable_queues(&self, topic: &str) -> Result<u32> {
        let info = match self.inner.topics.write_info(topic) {
            Some(info) => info,
            None => {
                validate::check_topic(topic)?;
                if is_system_topic(topic) {
                    return Err(Error::InvalidTopic {
                        topic: topic.to_owned(),
                        reason: "reserved system topic",
                    });
                }
                if !self.inner.config.auto_create_topics {
                    return Err(Error::TopicNotFound {
                        topic: topic.to_owned(),
                    });
                }
                let q = self.inner.config.default_queues;
                self.inner
                    .topics
                    .put(TopicConfig::new(topic, q, PERM_READ | PERM_WRITE, false))?;
                (q, true)
            }
        };
        check_send_allowed(topic, info)
    }

    /// What creating or growing `topic` to `queues` queues requires: a writer, a valid name that
    /// is not a system topic, a queue count within `[1, MAX_QUEUES]`.
    fn check_topic_change(&self, topic: &str, queues: u32) -> Result<()> {
        self.check_writable()?;
        validate::check_topic(topic)?;
        if is_system_topic(topic) {
            return Err(Error::InvalidTopic {
                topic: topic.to_owned(),
                reason: "reserved system topic",
            });
        }
        check_queue_count(queues)
    }

    /// Creates a topic. An existing one is left exactly as it is (`update_topic` grows it), or
    /// with `exist_ok = false` is an `InvalidArgument` error.
    pub fn create_topic(
        &self,
        topic: &str,
        queues: u32,
        perm: u32,
        order: bool,
        exist_ok: bool,
    ) -> Result<()> {
        self.check_topic_change(topic, queues)?;
        if perm & !7 != 0 {
            return Err(Error::InvalidArgument {
                field: "perm",
                reason: format!("{perm} is not a 3-bit permission"),
            });
        }
        if self.inner.topics.get(topic).is_some() {
            if exist_ok {
                // Like `mkdir -p`: an existing topic is left exactly as it is.
                return Ok(());
            }
            return Err(Error::InvalidArgument {
                field: "topic",
                reason: format!("{topic:?} exists already"),
            });
        }
        self.inner
            .topics
            .put(TopicConfig::new(topic, queues, perm, order))?;
        self.inner.cqs.prepare_topic(topic, queues)
    }

    /// Grows an existing topic to `queues` read and write queues (RocketMQ's `updateTopic`):
    /// producers and consumers can use the new queues as soon as this returns. The same count
    /// changes nothing.
    ///
    /// # Errors
    /// `TopicNotFound`; `InvalidTopic` for a system topic; `InvalidArgument` for a count outside
    /// `[1, MAX_QUEUES]` or below the topic's read or write queue count: a topic never shrinks,
    /// since the messages of a removed queue would no longer be read.
    pub fn update_topic(&self, topic: &str, queues: u32) -> Result<TopicConfig> {
        self.check_topic_change(topic, queues)?;
        let grow = |config: &mut TopicConfig| {
            let have = config.read_queue_nums.max(config.write_queue_nums);
            if queues < have {
                return Err(Error::InvalidArgument {
                    field: "queues",
                    reason: format!(
                        "topic {topic:?} has {have} queues and cannot shrink to {queues} \
                         (the messages of a removed queue would no longer be read)"
                    ),
                });
            }
            config.read_queue_nums = queues;
            config.write_queue_nums = queues;
            Ok(())
        };
        let config =
            self.inner
                .topics
                .update(topic, grow)?
                .ok_or_else(|| Error::TopicNotFound {
                    topic: topic.to_owned(),
                })?;
        self.inner.cqs.prepare_topic(topic, queues)?;
        Ok(config)
    }

    /// Every topic's configuration.
    pub fn topics(&self) -> Result<Vec<TopicConfig>> {
        self.check_usable()?;
        if self.inner.config.read_only {
            self.inner.topics.reload()?;
        }
        Ok(self.inner.topics.all())
    }

    /// One topic's configuration; `InvalidTopic` for a name no topic can have.
    pub fn topic(&self, topic: &str) -> Result<Option<TopicConfig>> {
        self.check_usable()?;
        if let Some(config) = self.inner.topics.get(topic) {
            return Ok(Some(config));
        }
        validate::check_topic(topic)?;
        if self.inner.config.read_only {
            self.inner.topics.reload()?;
        }
        Ok(self.inner.topics.get(topic))
    }
}

/// `msg` with its queue: the next in `round_robin` over `queues`, or its own, checked.
fn routed<'m>(
    msg: &MessageRef<'m>,
    queues: u32,
    round_robin: Option<&RoundRobin>,
) -> Result<MessageRef<'m>> {
    let mut msg = *msg;
    if let Some(next) = round_robin {
        msg.queue_id = next.next(msg.topic, queues);
    }
    check_queue_id(msg.topic, msg.queue_id, queues)?;
    Ok(msg)
}

/// The write queue count of a topic found with `(queues, writable)`, unless sends to it are
/// refused (a system topic, or no write permission).
fn check_send_allowed(topic: &str, (queues, writable): (u32, bool)) -> Result<u32> {
    if is_system_topic(topic) {
        return Err(Error::InvalidTopic {
            topic: topic.to_owned(),
            reason: "reserved system topic",
        });
    }
    if !writable {
        return Err(Error::TopicNotWritable {
            topic: topic.to_owned(),
        });
    }
    Ok(queues)
}

/// A topic's queue count is 1 to `MAX_QUEUES`.
fn check_queue_count(queues: u32) -> Result<()> {
    if !(1..=MAX_QUEUES).contains(&queues) {
        return Err(Error::InvalidArgument {
            field: "queues",
            reason: format!("{queues} is outside [1, {MAX_QUEUES}]"),
        });
    }
    Ok(())
}

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

thread_local! {
    // The batch path's temporary vectors, kept per thread between calls (util/reuse.rs).
    static PREPARED: Cell<Vec<Prepared<'static>>> = const { Cell::new(Vec::new()) };
    static TAGS_CODES: Cell<Vec<i64>> = const { Cell::new(Vec::new()) };
    static REQUESTS: Cell<Vec<DispatchRequest<'static>>> = const { Cell::new(Vec::new()) };
}

/// What dispatch would decode from the record of `msg` appended as `a`, known already: inline
/// dispatch skips re-parsing it. `properties` lacks only the record-CRC property the appender
/// added, which no dispatcher reads.
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

/// Checks that `props` is a well-formed property string: UTF-8 `name\x01value\x02` pairs with
/// non-empty names and values and no NUL or stray separator bytes. One pass over the bytes,
/// which also finds the TAGS value (the first one) for dispatch.
pub fn check_encoded_properties(props: &[u8]) -> Result<Option<&str>> {
    let bad = |reason: &str| {
        Err(Error::InvalidMessage {
            reason: reason.to_owned(),
        })
    };
    // The properties of most sends, a bare body's: the unique key alone. Accepted here with
    // one word-at-a-time scan of its value; anything else (or anything this would reject)
    // goes through the general parse below, which gives the same verdict for it.
    if let Some(value) = props
        .strip_prefix(properties::UNIQ_KEY.as_bytes())
        .and_then(|r| r.strip_prefix(&[properties::NAME_VALUE_SEPARATOR]))
        .and_then(|r| r.strip_suffix(&[properties::PROPERTY_SEPARATOR]))
    {
        if !value.is_empty() && bytes::all_ascii_from(value, 3) {
            return Ok(None);
        }
    }
    if !props.is_ascii() && std::str::from_utf8(props).is_err() {
        return bad("properties are not UTF-8");
    }
    let mut tags: Option<&[u8]> = None;
    let mut at = 0usize;
    while at < props.len() {
        let rest = props.get(at..).unwrap_or(&[]);
        // name, then \x01 (the next byte below 3 must be exactly that)
        let name_len = match bytes::find_below(rest, 3) {
            Some(i) if i > 0 && rest.get(i) == Some(&properties::NAME_VALUE_SEPARATOR) => i,
            _ => return bad("malformed property (empty name, or a NUL or \\x02 before \\x01)"),
        };
        let value_at = at + name_len + 1;
        let rest = props.get(value_at..).unwrap_or(&[]);
        let value_len =
            match bytes::find_below(rest, 3) {
                Some(i) if i > 0 && rest.get(i) == Some(&properties::PROPERTY_SEPARATOR) => i,
                _ => return bad(
                    "malformed property (empty value, or a NUL or stray \\x01, or no final \\x02)",
                ),
            };
        if tags.is_none() && props.get(at..at + name_len) == Some(properties::TAGS.as_bytes()) {
            tags = props.get(value_at..value_at + value_len);
        }
        at = value_at + value_len + 1;
    }
    // The whole string is UTF-8 and the value lies between ASCII separators.
    Ok(tags.and_then(|t| std::str::from_utf8(t).ok()))
}

#[cfg(test)]
mod tests {
    use super::check_encoded_properties;

    #[test]
    fn encoded_property_validation() {
        assert_eq!(check_encoded_properties(b"").unwrap(), None);
        assert_eq!(
            check_encoded_properties(b"a\x01b\x02cc\x01dd\x02").unwrap(),
            None
        );
        assert_eq!(
            check_encoded_properties(b"a\x01b\x02TAGS\x01red\x02TAGS\x01blue\x02").unwrap(),
            Some("red")
        );
        for bad in [
            &b"a\x01b"[..],
            b"\x01b\x02",
            b"a\x01\x02",
            b"a\x02",
            b"a\x01b\x01c\x02",
            b"a\x00\x01b\x02",
            b"\x02",
        ] {
            assert!(check_encoded_properties(bad).is_err(), "{bad:?}");
        }
    }

    /// The reference reading of FORMAT.md §2 for strings the store accepts: split on \x02
    /// (the last piece empty), each piece one non-empty name, \x01, one non-empty value.
    fn reference(props: &[u8]) -> Option<Option<Vec<u8>>> {
        if props.is_empty() {
            return Some(None);
        }
        let body = props.strip_suffix(b"\x02")?;
        let mut tags = None;
        for pair in body.split(|&b| b == 2) {
            let k = pair.iter().position(|&b| b == 1)?;
            let (name, value) = (&pair[..k], &pair[k + 1..]);
            let bad = |s: &[u8]| s.is_empty() || s.iter().any(|&b| b < 3);
            if bad(name) || bad(value) {
                return None;
            }
            if tags.is_none() && name == b"TAGS" {
                tags = Some(value.to_vec());
            }
        }
        Some(tags)
    }

    proptest::proptest! {
        #[test]
        fn validation_agrees_with_the_reference(
            picks in proptest::collection::vec(0usize..10, 0..48)
        ) {
            const ALPHABET: [&[u8]; 10] =
                [b"a", b"b", b"\x00", b"\x01", b"\x02", b"TAGS", b"\x01", b"\x02", b"x\x01y\x02", b"\xc3\xa9"];
            let props: Vec<u8> = picks.iter().flat_map(|&i| ALPHABET[i].iter().copied()).collect();
            let got = check_encoded_properties(&props).ok().map(|t| t.map(|s| s.as_bytes().to_vec()));
            proptest::prop_assert_eq!(got, reference(&props), "{:?}", props);
        }

        /// The unique-key-alone shortcut, fed values of every byte, of every length around
        /// the word size, and with the key followed by more properties.
        #[test]
        fn unique_key_shortcut_agrees_with_the_reference(
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            tail in proptest::collection::vec(0usize..10, 0..4),
        ) {
            const ALPHABET: [&[u8]; 10] =
                [b"a", b"\x00", b"\x01", b"\x02", b"TAGS", b"\x01", b"\x02", b"x\x01y\x02", b"\xc3\xa9", b"\x80"];
            let mut props = b"UNIQ_KEY\x01".to_vec();
            props.extend_from_slice(&value);
            props.push(2);
            props.extend(tail.iter().flat_map(|&i| ALPHABET[i].iter().copied()));
            let got = check_encoded_properties(&props).ok().map(|t| t.map(|s| s.as_bytes().to_vec()));
            // The reference has no UTF-8 rule: only compare what is UTF-8.
            if std::str::from_utf8(&props).is_ok() {
                proptest::prop_assert_eq!(got, reference(&props), "{:?}", props);
            } else {
                proptest::prop_assert!(got.is_none(), "{:?}", props);
            }
        }
    }
}
