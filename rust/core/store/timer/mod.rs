//! The timer engine: one engine delivers every message that waits for its time. Timer
//! messages (RocketMQ 5's arbitrary delays, `message::timer`): a put hook stores a message
//! that asks for a delivery time in `rmq_sys_wheel_timer` (hook.rs); delayed messages (delay
//! levels, RocketMQ 4) are stored by their own hook in `SCHEDULE_TOPIC_XXXX` (store/schedule/).
//! The service delivers both to their real topic when due, exactly once (service.rs, merging
//! the timer log with the levels' queues, levels.rs), each re-put carrying the timer's id
//! (`message::timer_id`; redeliver.rs); the progress of both is `config/timerProgress.json`
//! (progress.rs, FORMAT.md §16), the levels' offsets mirrored in RocketMQ's
//! `config/delayOffset.json` (FORMAT.md §15).
//! What wakes it is wake.rs. Any pending timer of either source can be cancelled or
//! rescheduled, and the pending ones listed (control.rs), under the gate every delivery takes
//! too (gate.rs). Design: docs/design-timers.md.
//!
//! Guarantees: a timer or delayed message is invisible in its topic until its delivery time,
//! never delivered before it by the store's clock, then delivered once with its body, keys,
//! tags and properties, across crashes of the process; those overdue after downtime are all
//! delivered (no horizon), at the configured catch-up rate; retention keeps every commit-log
//! file from the one holding the oldest pending one.
//!
//! Hosting: the service runs in the process that hosts delivery (`Store::start_delivery`),
//! which with shared writers is the leader; the hooks of every process wake it.

mod control;
pub(in crate::store) mod gate;
mod hook;
mod levels;
pub mod progress;
mod redeliver;
mod scan;
mod service;
mod tiers;
mod wake;

pub use crate::message::timer_id::{Source, TimerId};
pub use control::{TimerAnswer, TimerFilter, TimerInfo, TimerOutcome, TimerTarget};
pub(in crate::store) use hook::TimerHook;
pub(in crate::store) use service::TimerService;

use super::Store;

/// Queue units read at a time by the engine's scans.
const BATCH: usize = 1024;

/// Calls `f` with each unit of `q` (its queue offset and entry) from `from` to `end`, `BATCH`
/// at a time, in order; stops at the first unit not yet written. Returns the offset after the
/// last unit seen (`from` when none).
///
/// # Errors
/// The first error `f` returns (the units after it are not seen).
fn each_unit(
    q: &dyn crate::dispatch::queue_index::LogicalQueue,
    from: u64,
    end: u64,
    mut f: impl FnMut(u64, crate::dispatch::queue_index::QueueEntry) -> crate::error::Result<()>,
) -> crate::error::Result<u64> {
    let mut at = from;
    let mut units = Vec::with_capacity(BATCH);
    while at < end {
        units.clear();
        q.entries(
            at,
            BATCH.min(usize::try_from(end - at).unwrap_or(BATCH)),
            &mut units,
        );
        let Some(&(last, _)) = units.last() else {
            break;
        };
        for &(qo, e) in &units {
            f(qo, e)?;
        }
        at = last + 1;
    }
    Ok(at)
}

impl Store {
    /// How many timer and delayed messages (both sources) are stored and neither delivered nor
    /// cancelled, as far as this process's progress knows: a process that does not host
    /// delivery sees what the host last recorded. `list_timers` reads the log for the exact
    /// list.
    pub fn pending_timers(&self) -> u64 {
        self.inner.timers.as_ref().map_or(0, |t| t.pending(self))
    }

    /// While this process's timer thread sleeps with no arrival announced: the store-clock
    /// time it sleeps until (for tests that must know the thread is asleep).
    #[doc(hidden)]
    pub fn timer_sleeping_until(&self) -> Option<i64> {
        self.inner.timers.as_ref().and_then(|t| t.sleeping_until())
    }
}
