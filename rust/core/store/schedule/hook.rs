//! The delay-level put hook: stores a message with a `DELAY` level as RocketMQ does, in
//! `SCHEDULE_TOPIC_XXXX`, queue level - 1, with `REAL_TOPIC` and `REAL_QID` naming where it
//! goes when due, and `MQLITE_DELAY_MS` stating the delay its level has in the store's table
//! (the record's consume-queue tags code is then its delivery time, `message::tags`).
//!
//! Invariants
//! - A level outside the store's table is refused (`InvalidMessage`), never clamped; level 0
//!   means no delay and leaves the message as it is.
//! - It looks only at messages marked `DELAY` (`message::marks`): a plain put runs none of it.
//! - With several writer processes, any of them stores delayed messages; the leader delivers
//!   them for all (`Store::start_delivery`), woken by the put of any process (store/write.rs).
//! - Only messages that reach a consume queue are delayed (RocketMQ: transaction types NOT and
//!   COMMIT); a message already in the schedule topic is left alone, so this hook may run after
//!   any other that gave a message a level.

use crate::error::Result;
use crate::message::delay_levels::DelayLevels;
use crate::message::marks::Marks;
use crate::message::{properties, sysflag, tags, MessageRef};
use crate::store::hooks::{PutHook, Rewrite};

/// See the module doc.
#[derive(Debug)]
pub(in crate::store) struct DelayLevelHook {
    levels: DelayLevels,
}

impl DelayLevelHook {
    pub(in crate::store) fn new(levels: DelayLevels) -> Self {
        DelayLevelHook { levels }
    }
}

impl PutHook for DelayLevelHook {
    fn name(&self) -> &'static str {
        "delay-levels"
    }

    fn wants(&self) -> Marks {
        Marks::DELAY
    }

    fn check(&self, msg: &MessageRef<'_>) -> Result<()> {
        let Some(value) = properties::get(msg.properties, properties::DELAY) else {
            return Ok(());
        };
        self.levels.level_of(value)?;
        Ok(())
    }

    fn rewrite(&self, msg: &MessageRef<'_>) -> Result<Option<Rewrite>> {
        let Some(value) = properties::get(msg.properties, properties::DELAY) else {
            return Ok(None);
        };
        if msg.topic == tags::SCHEDULE_TOPIC || !sysflag::is_dispatched(msg.sysflag) {
            return Ok(None);
        }
        let Some((level, delay_ms)) = self.levels.level_of(value)? else {
            return Ok(None);
        };
        // The caller's properties, less any stale bookkeeping of ours, then RocketMQ's.
        let mut props = Vec::with_capacity(msg.properties.len() + 64);
        for (k, v) in properties::iter(msg.properties) {
            // An id copied from a delivered message is not this record's (the engine writes
            // the id of the level's delivery).
            if k != properties::DELAY_MS && k != crate::message::timer::TIMER_ID {
                properties::push(&mut props, k, v);
            }
        }
        properties::push(&mut props, properties::REAL_TOPIC, msg.topic);
        properties::push(&mut props, properties::REAL_QID, &msg.queue_id.to_string());
        properties::push(&mut props, properties::DELAY_MS, &delay_ms.to_string());
        Ok(Some(Rewrite {
            topic: tags::SCHEDULE_TOPIC.to_owned(),
            queue_id: level - 1,
            properties: props,
            sysflag: msg.sysflag,
        }))
    }
}
