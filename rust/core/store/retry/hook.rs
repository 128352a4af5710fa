//! The send-back put hook: stores a message marked `MQLITE_SEND_BACK` in the retry or
//! dead-letter topic the mark names (`%RETRY%<group>` or `%DLQ%<group>`), queue 0, without the
//! mark.
//!
//! Invariants
//! - It looks only at messages marked `SEND_BACK` (`message::marks`): a plain put runs none of
//!   it. Only `Store::send_back` writes the mark (user properties may not use its name).
//! - A marked message that also carries a `DELAY` level is left as it is: the delay-level hook,
//!   which runs after this one, schedules it to its origin topic with the mark kept, and the
//!   timer engine's re-put of it (the `DELAY` cleared) comes back here when due. So a retry
//!   waits in `SCHEDULE_TOPIC_XXXX`, and the retry topic, which is a system topic, is written
//!   by this hook alone.
//! - The mark's value must name a retry or DLQ topic; anything else is refused
//!   (`InvalidMessage`), never written.

use crate::error::{Error, Result};
use crate::message::marks::Marks;
use crate::message::{properties, validate, MessageRef};
use crate::store::hooks::{PutHook, Rewrite};

/// See the module doc.
#[derive(Debug, Default)]
pub(in crate::store) struct SendBackHook;

/// The destination a `MQLITE_SEND_BACK` value names, checked.
fn destination(value: &str) -> Result<&str> {
    if !(value.starts_with(super::RETRY_PREFIX) || value.starts_with(super::DLQ_PREFIX)) {
        return Err(Error::InvalidMessage {
            reason: format!(
                "{} names {value:?}, not a retry or DLQ topic",
                properties::SEND_BACK
            ),
        });
    }
    validate::check_topic(value)?;
    Ok(value)
}

impl PutHook for SendBackHook {
    fn name(&self) -> &'static str {
        "send-back"
    }

    fn wants(&self) -> Marks {
        Marks::SEND_BACK
    }

    fn check(&self, msg: &MessageRef<'_>) -> Result<()> {
        match properties::get(msg.properties, properties::SEND_BACK) {
            Some(value) => destination(value).map(|_| ()),
            None => Ok(()),
        }
    }

    fn rewrite(&self, msg: &MessageRef<'_>) -> Result<Option<Rewrite>> {
        let Some(value) = properties::get(msg.properties, properties::SEND_BACK) else {
            return Ok(None);
        };
        let target = destination(value)?;
        if properties::get(msg.properties, properties::DELAY).is_some_and(|d| d.trim() != "0") {
            return Ok(None);
        }
        let mut props = Vec::with_capacity(msg.properties.len());
        for (k, v) in properties::iter(msg.properties) {
            if k != properties::SEND_BACK && k != properties::DELAY {
                properties::push(&mut props, k, v);
            }
        }
        Ok(Some(Rewrite {
            topic: target.to_owned(),
            queue_id: 0,
            properties: props,
            sysflag: msg.sysflag,
        }))
    }
}
