//! Scheduled delivery by delay level (RocketMQ's `ScheduleMessageService`): a put hook stores a
//! message with a `DELAY` level in `SCHEDULE_TOPIC_XXXX` (hook.rs), a service delivers it to
//! its real topic when due (service.rs), and `config/delayOffset.json` records how far each
//! level is delivered (offsets.rs, FORMAT.md §15).
//!
//! Guarantees: a delayed message is invisible in its topic until its delivery time, then
//! delivered with its body, keys, tags and properties; per level, in the order stored; never
//! early by the store's clock. At least once: a crash between a delivery and the write of the
//! offsets that cover it delivers the message again after the next open; nothing is lost, and
//! retention keeps every commit-log file from the one holding the oldest pending message.

mod hook;
pub mod offsets;
mod service;

pub(in crate::store) use hook::DelayLevelHook;
pub(in crate::store) use service::ScheduleService;
