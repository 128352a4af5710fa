//! Retry and dead letters (RocketMQ's `consumerSendMsgBack`): a message a consumer failed is
//! sent back as a new record of its group's retry topic `%RETRY%<group>`, delayed by a level
//! of the delay table, or once it has been consumed `max_reconsume_times` times (or when the
//! consumer asks) straight to the group's dead-letter topic `%DLQ%<group>`, never through the
//! delay topic. The consumer then moves past the original: the copy carries it on.
//!
//! The copy (FORMAT.md §17) keeps the original's body, flag, SYSFLAG compression bits, born
//! time, keys, tags and properties; its reconsume count is the original's plus one; it gains
//! `RETRY_TOPIC` (the topic the message was first sent to, kept from an earlier retry) and
//! `ORIGIN_MESSAGE_ID` (the first attempt's message id, likewise), and the consumer's error
//! as `MQLITE_ERROR_TYPE` / `MQLITE_ERROR` (bounded, see `MAX_ERROR_LEN`).
//!
//! Invariants
//! - The retry and DLQ topics are system topics, written by the send-back hook (hook.rs)
//!   alone; a delayed retry waits in `SCHEDULE_TOPIC_XXXX` with its origin topic as its real
//!   topic and reaches the retry topic through the hook when due.
//! - A send-back is one put of one record: it is stored whole or not at all. A consumer moves
//!   its offset past the original only after the send-back returned, so a crash in between
//!   sends it back again (at least once, never lost).
//! - A level the store's delay table lacks is refused (`InvalidMessage`), nothing written; the
//!   automatic level (3 + reconsume count, RocketMQ's) is capped at the table's last level.

mod hook;

pub(in crate::store) use hook::SendBackHook;

use super::{PutRequest, PutResult, Routing, Store};
use crate::error::{Error, Result};
use crate::message::compression::TYPE_MASK;
use crate::message::{properties, sysflag, validate, MessageRef};

/// Prefix of a group's retry topic.
pub const RETRY_PREFIX: &str = "%RETRY%";
/// Prefix of a group's dead-letter topic.
pub const DLQ_PREFIX: &str = "%DLQ%";
/// RocketMQ's default `retryMaxTimes`.
pub const DEFAULT_MAX_RECONSUME_TIMES: u32 = 16;
/// Longest error text stored on a copy, in bytes (cut at a character boundary).
pub const MAX_ERROR_LEN: usize = 1024;
/// Longest error type name stored on a copy, in bytes.
pub const MAX_ERROR_TYPE_LEN: usize = 200;
/// RocketMQ's automatic level is this plus the reconsume count.
const AUTO_LEVEL_BASE: u32 = 3;

/// The retry topic of `group`.
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_PREFIX}{group}")
}

/// The dead-letter topic of `group`.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_PREFIX}{group}")
}

/// When the sent-back message is consumed next (RocketMQ's `delayLevelWhenNextConsume`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextDelay {
    /// Level 3 + reconsume count (RocketMQ's 0).
    Auto,
    /// This level of the store's delay table.
    Level(u32),
    /// Straight to the dead-letter topic (RocketMQ's -1).
    DeadLetter,
}

/// A message to send back.
#[derive(Debug, Clone, Copy)]
pub struct SendBack<'a> {
    /// The consumer group that failed it.
    pub group: &'a str,
    /// The commit-log offset of the message as the consumer read it.
    pub commit_log_offset: u64,
    /// When it is consumed next.
    pub delay: NextDelay,
    /// Reconsume count at which it goes to the dead-letter topic instead.
    pub max_reconsume_times: u32,
    /// The failure: its type name and text, stored on the copy (cut to the bounds).
    pub error: Option<(&'a str, &'a str)>,
}

/// Where a send-back went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentBack {
    /// The retry or dead-letter topic the copy is stored in (or, delayed, will be).
    pub topic: String,
    /// True when it went to the dead-letter topic.
    pub dead: bool,
    /// The copy's reconsume count.
    pub reconsume_times: i32,
    /// The delay level it waits (0 for the dead-letter topic).
    pub delay_level: u32,
    /// The put of the copy.
    pub put: PutResult,
}

impl Store {
    /// Sends the message stored at `req.commit_log_offset` back for `req.group` (see the
    /// module doc) and waits as `Wait::Durable`.
    ///
    /// # Errors
    /// `InvalidGroup`; `MessageNotFound` / `Corrupted` when no record is at the offset;
    /// `InvalidArgument` when the record is not one a consumer can read (a schedule record, a
    /// half message) or another group's retry; `InvalidMessage` for a level outside the delay
    /// table; the put's errors (`TopicNotWritable` when the origin topic refuses sends).
    pub fn send_back(&self, req: &SendBack<'_>) -> Result<SentBack> {
        validate::check_group(req.group)?;
        self.check_writable()?;
        let original = self.get_by_offset(req.commit_log_offset, Original::of)??;
        let retry = retry_topic(req.group);
        if original.topic != retry && validate::is_retry_or_dlq(&original.topic) {
            return Err(bad_record(format!(
                "the record is in {}, not a topic of group {}",
                original.topic, req.group
            )));
        }
        let reconsumed = u32::try_from(original.reconsume_times).unwrap_or(0);
        let levels = &self.inner.config.delay_levels;
        let level = match req.delay {
            NextDelay::DeadLetter => None,
            _ if reconsumed >= req.max_reconsume_times => None,
            NextDelay::Auto => Some(
                AUTO_LEVEL_BASE
                    .saturating_add(reconsumed)
                    .min(levels.len())
                    .max(1),
            ),
            NextDelay::Level(l) => {
                levels.level_of(&l.to_string())?;
                Some(l)
            }
        };
        let target = match level {
            Some(_) => retry,
            None => dlq_topic(req.group),
        };
        let props = copy_properties(&original, &target, level, req.error);
        let msg = MessageRef {
            topic: &original.origin_topic,
            queue_id: 0,
            body: &original.body,
            flag: original.flag,
            properties: &props,
            sysflag: original.sysflag,
            born_timestamp: original.born_timestamp,
            reconsume_times: original.reconsume_times.saturating_add(1),
            prepared_transaction_offset: 0,
        };
        let put = self.put_message(&msg, &PutRequest::new(Routing::Hash(original.origin_queue)))?;
        let put = put.ok_or_else(|| Error::InvalidArgument {
            field: "send_back",
            reason: "the put declined to wait".into(),
        })?;
        Ok(SentBack {
            topic: target,
            dead: level.is_none(),
            reconsume_times: msg.reconsume_times,
            delay_level: level.unwrap_or(0),
            put,
        })
    }
}

/// What a send-back copies from the original record.
struct Original {
    topic: String,
    origin_topic: String,
    origin_queue: u32,
    body: Vec<u8>,
    flag: i32,
    sysflag: i32,
    born_timestamp: i64,
    reconsume_times: i32,
    msg_id: String,
    properties: Vec<u8>,
}

impl Original {
    fn of(v: &crate::message::RecordView<'_>) -> Result<Original> {
        if !sysflag::is_dispatched(v.sysflag()) || v.topic() == crate::message::tags::SCHEDULE_TOPIC
        {
            return Err(bad_record(format!(
                "the record in {} is not one a consumer reads",
                v.topic()
            )));
        }
        let topic = v.topic().to_owned();
        let (origin_topic, origin_queue) = match v.property(properties::RETRY_TOPIC) {
            Some(t) if validate::is_retry_or_dlq(&topic) => (
                t.to_owned(),
                v.property(properties::REAL_QID)
                    .and_then(|q| q.parse().ok())
                    .unwrap_or(0),
            ),
            _ => (topic.clone(), v.queue_id()),
        };
        if validate::is_retry_or_dlq(&origin_topic) {
            return Err(bad_record(format!(
                "the record in {topic} names no origin topic"
            )));
        }
        Ok(Original {
            origin_topic,
            origin_queue,
            body: v.body().to_vec(),
            flag: v.flag(),
            sysflag: v.sysflag() & (sysflag::COMPRESSED | sysflag::MULTI_TAGS | TYPE_MASK),
            born_timestamp: v.born_timestamp(),
            reconsume_times: v.reconsume_times(),
            msg_id: v.msg_id().into_owned(),
            properties: v.properties().to_vec(),
            topic,
        })
    }
}

/// Properties a copy does not take from the original: the store's bookkeeping of an earlier
/// trip, replaced or no longer true.
const NOT_COPIED: [&str; 9] = [
    properties::SEND_BACK,
    properties::DELAY,
    properties::DELAY_MS,
    properties::REAL_TOPIC,
    properties::REAL_QID,
    properties::ERROR_TYPE,
    properties::ERROR,
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC",
];

fn copy_properties(
    original: &Original,
    target: &str,
    level: Option<u32>,
    error: Option<(&str, &str)>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(original.properties.len() + 128);
    let mut retry_topic = None;
    let mut origin_id = None;
    for (k, v) in properties::iter(&original.properties) {
        match k {
            properties::RETRY_TOPIC => retry_topic = Some(v),
            properties::ORIGIN_MESSAGE_ID => origin_id = Some(v),
            _ if NOT_COPIED.contains(&k) => {}
            _ => properties::push(&mut out, k, v),
        }
    }
    properties::push(
        &mut out,
        properties::RETRY_TOPIC,
        retry_topic.unwrap_or(&original.origin_topic),
    );
    properties::push(
        &mut out,
        properties::ORIGIN_MESSAGE_ID,
        origin_id.unwrap_or(&original.msg_id),
    );
    // A property value may not be empty: an empty part of the error is left out.
    if let Some((kind, text)) = error {
        for (name, value) in [
            (properties::ERROR_TYPE, bounded(kind, MAX_ERROR_TYPE_LEN)),
            (properties::ERROR, bounded(text, MAX_ERROR_LEN)),
        ] {
            if !value.is_empty() {
                properties::push(&mut out, name, &value);
            }
        }
    }
    if let Some(l) = level {
        properties::push(&mut out, properties::DELAY, &l.to_string());
    }
    properties::push(&mut out, properties::SEND_BACK, target);
    out
}

/// `text` cut to at most `max` bytes at a character boundary, with the characters a property
/// value may not hold (NUL and the separators) made spaces.
fn bounded(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end)
        .unwrap_or("")
        .chars()
        .map(|c| match c {
            '\u{0}' | '\u{1}' | '\u{2}' => ' ',
            c => c,
        })
        .collect()
}

fn bad_record(reason: String) -> Error {
    Error::InvalidArgument {
        field: "commit_log_offset",
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_cuts_at_a_char_boundary_and_drops_separators() {
        assert_eq!(bounded("ab\u{1}c\u{2}", 100), "ab c ");
        assert_eq!(bounded("éé", 3), "é");
        assert_eq!(bounded("abc", 0), "");
    }
}
