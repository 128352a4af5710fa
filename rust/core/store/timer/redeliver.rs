//! The re-put of a due timer or delayed message to its real topic and queue.
//!
//! Invariants
//! - The delivery time is checked against the clock first: the time a reschedule gave the
//!   timer, else its record's own (`TIMER_OUT_MS` for the timer log, store time plus the
//!   level's delay for a level): nothing is put early, whatever its queue unit says.
//! - The copy keeps body, flag, SYSFLAG, born time, reconsume count, keys, tags and the
//!   caller's properties, and carries the timer's id (`MQLITE_TIMER_ID`, `message::timer_id`) and nothing of
//!   a stale one. A timer-log copy drops `REAL_TOPIC`, `REAL_QID` and the delay properties
//!   and gains `TIMER_ENQUEUE_MS` / `TIMER_DEQUEUE_MS` (RocketMQ 5), and a rescheduled one's
//!   `TIMER_OUT_MS` is its new time; a level copy drops
//!   `DELAY`, `MQLITE_DELAY_MS`, `TIMER_DELIVER_MS` and `TIMER_DELAY_SEC` and keeps
//!   `REAL_TOPIC` and `REAL_QID` (RocketMQ 4's `ScheduleMessageService`).
//! - It goes to queue `REAL_QID`, or to the queue the same key picks when the topic now has
//!   fewer queues. A record that names no destination (not written by a hook) is passed over:
//!   it can go nowhere, and waiting for it would hold its source back for good. A re-put the
//!   store refuses is an error: the timer stays pending and is tried again, never dropped.

use crate::error::{Error, Result};
use crate::message::timer;
use crate::message::timer_id::{Source, TimerId};
use crate::message::{properties, sysflag, tags, MessageRef};
use crate::store::{PutRequest, Routing, Store};

/// Properties a timer-log copy does not keep.
const CLEARED_LOG: [&str; 5] = [
    properties::REAL_TOPIC,
    properties::REAL_QID,
    timer::DELAY_SEC,
    timer::DELAY_MS,
    timer::TIMER_ID,
];

/// Properties a level copy does not keep (RocketMQ clears the first three).
const CLEARED_LEVEL: [&str; 5] = [
    properties::DELAY,
    timer::DELIVER_MS,
    timer::DELAY_SEC,
    properties::DELAY_MS,
    timer::TIMER_ID,
];

/// Re-puts the record at commit-log `offset`, timer `id`: `Ok(Some(t))` without putting when
/// its delivery time `t` (`moved` when a reschedule gave one, else the record's) is after
/// `now`, `Ok(None)` after a put or for a record that names no destination.
pub(super) fn redeliver(
    store: &Store,
    offset: u64,
    id: TimerId,
    now: i64,
    moved: Option<i64>,
) -> Result<Option<i64>> {
    store.get_by_offset(offset, |v| {
        let props = v.properties();
        let at = moved
            .or_else(|| match id.source {
                Source::Log => timer::out_ms(props),
                Source::Level(_) => tags::delivery_time(props, v.store_timestamp()),
            })
            .unwrap_or(i64::MIN);
        if at > now {
            return Ok(Some(at));
        }
        let real = properties::get(props, properties::REAL_TOPIC);
        let qid = properties::get(props, properties::REAL_QID).and_then(|q| q.parse::<u32>().ok());
        let (Some(topic), Some(qid)) = (real, qid) else {
            return Ok(None);
        };
        let cleared: &[&str] = match id.source {
            Source::Log => &CLEARED_LOG,
            Source::Level(_) => &CLEARED_LEVEL,
        };
        let mut kept = Vec::with_capacity(props.len() + 64);
        let replaced = |k: &str| moved.is_some() && id.source == Source::Log && k == timer::OUT_MS;
        for (k, val) in properties::iter(props) {
            if !(cleared.contains(&k) || replaced(k)) {
                properties::push(&mut kept, k, val);
            }
        }
        if id.source == Source::Log {
            if let Some(at) = moved {
                properties::push(&mut kept, timer::OUT_MS, &at.to_string());
            }
            properties::push(
                &mut kept,
                timer::ENQUEUE_MS,
                &v.store_timestamp().to_string(),
            );
            properties::push(&mut kept, timer::DEQUEUE_MS, &now.to_string());
        }
        properties::push(&mut kept, timer::TIMER_ID, &id.to_string());
        let msg = MessageRef {
            topic,
            queue_id: qid,
            body: v.body(),
            flag: v.flag(),
            properties: &kept,
            sysflag: v.sysflag() & !(sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6),
            born_timestamp: v.born_timestamp(),
            reconsume_times: v.reconsume_times(),
            prepared_transaction_offset: v.prepared_transaction_offset(),
        };
        match store.put_message(&msg, &PutRequest::new(Routing::Queue(qid))) {
            Ok(_) => Ok(None),
            // The topic shrank since: the queue the same key would pick now.
            Err(Error::InvalidQueue { .. }) => store
                .put_message(&msg, &PutRequest::new(Routing::Hash(qid)))
                .map(|_| None),
            Err(e) => Err(e),
        }
    })?
}
