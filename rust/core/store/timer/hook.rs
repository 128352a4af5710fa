//! The timer put hook: stores a message that asks for a delivery time (`message::timer`) as
//! RocketMQ 5 does, in `rmq_sys_wheel_timer` queue 0, with `REAL_TOPIC` and `REAL_QID` naming
//! where it goes when due and `TIMER_OUT_MS` its exact delivery time in ms (also the record's
//! consume-queue tags code, `message::tags`).
//!
//! Invariants
//! - It looks only at messages marked `TIMER` (`message::marks`): a plain put runs none of it.
//! - A bad value, a negative delay, or a time more than `timer_max_delay` ahead is refused in
//!   `check`, before anything is looked up or written.
//! - A time at or before the put is due at once: the message is stored as it is, in its topic
//!   (RocketMQ does the same).
//! - A message with a `DELAY` level above 0 is left to the delay-level hook (the level wins,
//!   as in RocketMQ); a delivered copy (it carries `MQLITE_TIMER_ID`), a record already in the
//!   timer topic and a message that reaches no consume queue are left alone.
//! - The caller's `TIMER_OUT_MS`, `REAL_TOPIC`, `REAL_QID` and `MQLITE_TIMER_ID` never reach
//!   the stored record: the hook writes its own. Nor do `MQLITE_TIMER_CANCEL` and
//!   `MQLITE_TIMER_RESCHEDULE_MS`, which only a cancel or reschedule record carries.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::message::marks::Marks;
use crate::message::timer::{self, Asked};
use crate::message::{properties, sysflag, timer_id, MessageRef};
use crate::store::hooks::{PutHook, Rewrite};
use crate::util::clock::Clock;

/// See the module doc.
#[derive(Debug)]
pub(in crate::store) struct TimerHook {
    clock: Clock,
    max_delay_ms: i64,
}

/// Properties the hook owns on a stored timer record (a change record's names among them:
/// only a cancel or reschedule may write those).
const OWNED: [&str; 6] = [
    timer::OUT_MS,
    properties::REAL_TOPIC,
    properties::REAL_QID,
    timer::TIMER_ID,
    timer_id::CANCEL,
    timer_id::RESCHEDULE_MS,
];

impl TimerHook {
    pub(in crate::store) fn new(clock: Clock, max_delay: Duration) -> Self {
        TimerHook {
            clock,
            max_delay_ms: i64::try_from(max_delay.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// The delivery time `msg` asks for when the hook handles it: `None` for a message left
    /// to others or due at once.
    fn due(&self, msg: &MessageRef<'_>, now: i64) -> Result<Option<i64>> {
        let props = msg.properties;
        if properties::get(props, timer::TIMER_ID).is_some()
            || properties::get(props, properties::DELAY).is_some_and(|l| l.trim() != "0")
        {
            return Ok(None);
        }
        let Asked::At(at) = timer::asked(props, now)? else {
            return Ok(None);
        };
        if at.saturating_sub(now) > self.max_delay_ms {
            return Err(Error::InvalidMessage {
                reason: format!(
                    "delivery time {at} is {} ms ahead, more than the store's timer_max_delay \
                     ({} ms)",
                    at.saturating_sub(now),
                    self.max_delay_ms
                ),
            });
        }
        Ok((at > now).then_some(at))
    }
}

impl PutHook for TimerHook {
    fn name(&self) -> &'static str {
        "timers"
    }

    fn wants(&self) -> Marks {
        Marks::TIMER
    }

    fn check(&self, msg: &MessageRef<'_>) -> Result<()> {
        self.due(msg, self.clock.now_ms()).map(|_| ())
    }

    fn rewrite(&self, msg: &MessageRef<'_>) -> Result<Option<Rewrite>> {
        if msg.topic == timer::TIMER_TOPIC || !sysflag::is_dispatched(msg.sysflag) {
            return Ok(None);
        }
        let Some(at) = self.due(msg, self.clock.now_ms())? else {
            return Ok(None);
        };
        let mut props = Vec::with_capacity(msg.properties.len() + 64);
        for (k, v) in properties::iter(msg.properties) {
            if !OWNED.contains(&k) {
                properties::push(&mut props, k, v);
            }
        }
        properties::push(&mut props, properties::REAL_TOPIC, msg.topic);
        properties::push(&mut props, properties::REAL_QID, &msg.queue_id.to_string());
        properties::push(&mut props, timer::OUT_MS, &at.to_string());
        Ok(Some(Rewrite {
            topic: timer::TIMER_TOPIC.to_owned(),
            queue_id: 0,
            properties: props,
            sysflag: msg.sysflag,
        }))
    }
}
