//! Scheduled delivery by delay level (RocketMQ's `ScheduleMessageService` storage): a put hook
//! stores a message with a `DELAY` level in `SCHEDULE_TOPIC_XXXX` (hook.rs), the timer engine
//! (store/timer/) delivers it to its real topic when due, and `config/delayOffset.json`
//! records how far each level is delivered (offsets.rs, FORMAT.md §15), in RocketMQ's shape:
//! a RocketMQ broker opening the store goes on from it, and this store from RocketMQ's. It
//! mirrors the engine's own record of the levels in `timerProgress.json` (written first; the
//! larger offset of the two is taken), which also holds what RocketMQ's shape cannot: the
//! delayed messages cancelled or rescheduled out of their level's order.
//!
//! Guarantees (the engine's): a delayed message is invisible in its topic until its delivery
//! time, then delivered with its body, keys, tags and properties; per level, in the order
//! stored; never early by the store's clock; exactly once across crashes of the process (the
//! re-put carries the id `L<level>:<offset>` and a start skips what the log shows delivered);
//! overdue messages after downtime go at the catch-up rate; retention keeps every commit-log
//! file from the one holding the oldest pending message.
//!
//! Hosting: delivery runs in one process at a time (two would each re-put the same due
//! messages and write the progress files over each other). A store opened by one writer
//! process starts it at open; with several writer processes the leader hosts it
//! (`Store::start_delivery` / `Store::stop_delivery`), and the hook of any process wakes it.
//! This module holds the `Store` calls that start, stop and run delivery, for both sources.

mod hook;
pub mod offsets;

pub(in crate::store) use hook::DelayLevelHook;

use super::Store;
use crate::error::Result;

impl Store {
    /// Delivers every delayed and timer message due by the store's clock to its real topic,
    /// makes the commit log durable and records the progress (`config/delayOffset.json`,
    /// `config/timerProgress.json`); returns how many messages this call delivered. The timer
    /// engine does the same on its own thread; this call is for a caller that moved a manual
    /// clock (`StoreConfig::clock`), which wakes no thread. A store whose process does not
    /// host delivery (`start_delivery`) delivers nothing.
    ///
    /// # Errors
    /// `Closed`, `ReadOnly`, and the first failed read, re-put, flush or offsets write (the
    /// messages delivered before it keep their offsets).
    pub fn deliver_due(&self) -> Result<usize> {
        self.check_writable()?;
        let Some(t) = &self.inner.timers else {
            return Ok(0);
        };
        let _hosting = t.hosting();
        if !self.delivers() {
            return Ok(0);
        }
        t.deliver_due(self)
    }

    /// Makes this process deliver the store's delayed and timer messages: starts the timer
    /// engine's thread, having read `config/delayOffset.json` and `config/timerProgress.json`.
    /// Nothing happens when it runs already. A store opened by one writer process starts it at open; with several writer
    /// processes (`StoreConfig::shared_writers`) the caller makes sure that one process at a
    /// time hosts it.
    ///
    /// # Errors
    /// `Closed`, `ReadOnly`, `UsedAfterFork`; `ConfigFile` when `delayOffset.json` or
    /// `timerProgress.json` and its `.bak` do not decode; `Io` when the thread cannot be
    /// spawned.
    pub fn start_delivery(&self) -> Result<()> {
        self.check_writable()?;
        let Some(t) = &self.inner.timers else {
            return Ok(());
        };
        let _hosting = t.hosting();
        if self.delivers() {
            return Ok(());
        }
        t.prepare_start()?;
        self.inner.delivery.start(vec![t.clone()])
    }

    /// Stops this process's delivery of delayed and timer messages (the thread is joined),
    /// then makes the commit log durable and writes the delay offsets and timer progress, so
    /// that the next process to host delivery goes on from here. Nothing happens when it does
    /// not run.
    ///
    /// # Errors
    /// `Closed`, `UsedAfterFork`, and a failed flush or offsets write (delivery is stopped
    /// anyway; the offsets are written again at the next start, pass or clean close).
    pub fn stop_delivery(&self) -> Result<()> {
        self.check_usable()?;
        let Some(t) = &self.inner.timers else {
            return Ok(());
        };
        let _hosting = t.hosting();
        if !self.delivers() {
            return Ok(());
        }
        self.inner.delivery.stop_all();
        t.persist_stopped(self)
    }

    /// True while this process hosts delivery (`start_delivery`).
    pub fn delivers(&self) -> bool {
        !self.inner.delivery.names().is_empty()
    }

    /// The delay offsets: level -> next offset of its queue in `SCHEDULE_TOPIC_XXXX` to
    /// deliver (as `config/delayOffset.json` records them).
    pub fn delay_offsets(&self) -> std::collections::BTreeMap<u32, u64> {
        self.inner
            .timers
            .as_ref()
            .map(|t| t.delay_offsets())
            .unwrap_or_default()
    }
}
