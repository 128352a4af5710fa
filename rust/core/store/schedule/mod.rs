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
//!
//! Hosting: delivery must run in one process at a time (two would each re-put the same due
//! messages and write `delayOffset.json` over each other). A store opened by one writer
//! process starts it at open; a store shared by several writer processes starts it in none,
//! refuses new delayed messages (hook.rs) and leaves it to the process chosen to host it
//! (`Store::start_delivery` / `Store::stop_delivery`).

mod hook;
pub mod offsets;
mod service;

pub(in crate::store) use hook::DelayLevelHook;
pub(in crate::store) use service::ScheduleService;

use super::Store;
use crate::error::Result;

impl Store {
    /// Delivers every delayed and timer message due by the store's clock to its real topic, makes the
    /// commit log durable and records the delay offsets (`config/delayOffset.json`); returns
    /// how many messages this call delivered. The schedule service does the same on its own
    /// thread; this call is for a caller that moved a manual clock (`StoreConfig::clock`),
    /// which wakes no thread. A store whose process does not host delivery
    /// (`start_delivery`) delivers nothing.
    ///
    /// # Errors
    /// `Closed`, `ReadOnly`, and the first failed read, re-put, flush or offsets write (the
    /// messages delivered before it keep their offsets).
    pub fn deliver_due(&self) -> Result<usize> {
        self.check_writable()?;
        let Some(s) = &self.inner.schedule else {
            return Ok(0);
        };
        let _hosting = s.hosting();
        if !self.delivers() {
            return Ok(0);
        }
        let levels = s.deliver_due(self);
        let timers = match &self.inner.timers {
            Some(t) => t.deliver_due(self),
            None => Ok(0),
        };
        Ok(levels? + timers?)
    }

    /// Makes this process deliver the store's delayed and timer messages: starts the
    /// schedule service's and the timer service's threads, which read
    /// `config/delayOffset.json` and `config/timerProgress.json` first. Nothing happens when it runs
    /// already. A store opened by one writer process starts it at open; with several writer
    /// processes (`StoreConfig::shared_writers`) the caller makes sure that one process at a
    /// time hosts it.
    ///
    /// # Errors
    /// `Closed`, `ReadOnly`, `UsedAfterFork`; `ConfigFile` when `delayOffset.json` and its
    /// `.bak` do not decode; `Io` when the thread cannot be spawned.
    pub fn start_delivery(&self) -> Result<()> {
        self.check_writable()?;
        let Some(s) = &self.inner.schedule else {
            return Ok(());
        };
        let _hosting = s.hosting();
        if self.delivers() {
            return Ok(());
        }
        s.prepare_start()?;
        let mut services: Vec<std::sync::Arc<dyn crate::service::Service>> = vec![s.clone()];
        if let Some(t) = &self.inner.timers {
            t.prepare_start();
            services.push(t.clone());
        }
        self.inner.delivery.start(services)
    }

    /// Stops this process's delivery of delayed and timer messages (the threads are joined),
    /// then makes the commit log durable and writes the delay offsets and timer progress, so that the next process to host
    /// delivery goes on from here. Nothing happens when it does not run.
    ///
    /// # Errors
    /// `Closed`, `UsedAfterFork`, and a failed flush or offsets write (delivery is stopped
    /// anyway; the offsets are written again at the next start, pass or clean close).
    pub fn stop_delivery(&self) -> Result<()> {
        self.check_usable()?;
        let Some(s) = &self.inner.schedule else {
            return Ok(());
        };
        let _hosting = s.hosting();
        if !self.delivers() {
            return Ok(());
        }
        self.inner.delivery.stop_all();
        let levels = s.persist_stopped(self);
        let timers = match &self.inner.timers {
            Some(t) => t.persist_stopped(self),
            None => Ok(()),
        };
        levels.and(timers)
    }

    /// True while this process hosts delivery (`start_delivery`).
    pub fn delivers(&self) -> bool {
        !self.inner.delivery.names().is_empty()
    }

    /// The schedule service's delay offsets: level -> next offset of its queue in
    /// `SCHEDULE_TOPIC_XXXX` to deliver (as `config/delayOffset.json` records them).
    pub fn delay_offsets(&self) -> std::collections::BTreeMap<u32, u64> {
        self.inner
            .schedule
            .as_ref()
            .map(|s| s.offsets())
            .unwrap_or_default()
    }
}
