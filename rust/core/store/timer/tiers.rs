//! The timer log as a source of the timer engine: the consume queue of `rmq_sys_wheel_timer`
//! queue 0 (one unit per timer: commit-log offset, size, and the exact delivery time in the
//! tags-code slot), in arrival order, fed by dispatch and rebuilt by recovery like every
//! consume queue. Its near tier is an in-memory ordered map of the timers due within
//! `timer_window` of the clock, filled lazily from the log: memory grows with the timers due
//! in the window, not with the number pending. What is done is the progress's (progress.rs).
//!
//! Invariants
//! - Ids below `cursor` have been looked at: each is done (delivered or cancelled), in `near`,
//!   or due after `horizon` (then `far` holds the earliest such time and lowest such id).
//!   `horizon` only grows while the service hosts.
//! - A timer's due time here is the one a reschedule gave it, else its unit's (the re-put reads
//!   its record's again: never early).
//! - `near_ids` holds exactly the ids of `near`, with their due times.

use std::collections::BTreeMap;

use super::progress::Progress;
use crate::message::timer::TIMER_TOPIC;
use crate::message::timer_id::Change;
use crate::store::Store;

/// See the module doc.
#[derive(Debug)]
pub(super) struct Tiers {
    pub cursor: u64,
    horizon: i64,
    /// (due, id) -> (commit-log offset, size) of the timers due by `horizon`.
    near: BTreeMap<(i64, u64), (u64, u32)>,
    /// id -> due of the timers in `near`.
    near_ids: BTreeMap<u64, i64>,
    /// (earliest due, lowest id) of the looked-at timers due after `horizon`.
    far: Option<(i64, u64)>,
}

impl Default for Tiers {
    fn default() -> Self {
        Tiers {
            cursor: 0,
            horizon: i64::MIN,
            near: BTreeMap::new(),
            near_ids: BTreeMap::new(),
            far: None,
        }
    }
}

impl Tiers {
    /// A new hosting: nothing looked at above `floor`, the horizon at `horizon`.
    pub fn reset(&mut self, floor: u64, horizon: i64) {
        *self = Tiers {
            cursor: floor,
            horizon,
            ..Tiers::default()
        };
    }

    /// Reads the units the log gained since the last look.
    pub fn follow(&mut self, store: &Store, progress: &Progress) {
        let cursor = self.cursor;
        self.cursor = self.load(store, progress, cursor, None);
    }

    /// When the far timers come within half a window of `now`: the horizon moved to `now` plus
    /// `window_ms` and the pending part of the log read again.
    pub fn refill(&mut self, store: &Store, progress: &Progress, now: i64, window_ms: i64) {
        let half = window_ms / 2;
        if self.far.is_some_and(|(d, _)| d.saturating_sub(half) <= now) {
            self.horizon = now.saturating_add(window_ms);
            self.far = None;
            let cursor = self.cursor;
            self.load(store, progress, progress.floor, Some(cursor));
        }
    }

    /// When the near tier must be refilled (`half` a window before the earliest far timer).
    pub fn refill_at(&self, half: i64) -> Option<i64> {
        self.far.map(|(d, _)| d.saturating_sub(half))
    }

    /// The first near timer: (due, id, commit-log offset of its record).
    pub fn first(&self) -> Option<(i64, u64, u64)> {
        self.near
            .first_key_value()
            .map(|(&(due, id), &(record, _))| (due, id, record))
    }

    /// Timer `id`, near and due at `due`, is due at `at` instead (its record says later).
    pub fn postpone(&mut self, due: i64, id: u64, at: i64) {
        if let Some(unit) = self.near.remove(&(due, id)) {
            self.near.insert((at, id), unit);
            self.near_ids.insert(id, at);
        }
    }

    /// Timer `id`, near and due at `due`, was delivered.
    pub fn remove(&mut self, due: i64, id: u64) {
        self.near.remove(&(due, id));
        self.near_ids.remove(&id);
    }

    /// A change of timer `id` was applied to the progress: a cancelled timer leaves the tiers,
    /// a rescheduled one moves.
    pub fn apply(&mut self, id: u64, change: Change) {
        let unit = self
            .near_ids
            .remove(&id)
            .and_then(|due| self.near.remove(&(due, id)));
        if let Change::Reschedule(_, due) = change {
            match unit {
                Some(unit) => self.place(id, due, unit),
                // In the far tier (counted there; the refill reads its unit again), or not yet
                // looked at (`load` reads the new time).
                None if id < self.cursor => self.count_far(id, due),
                None => {}
            }
        }
    }

    /// The lowest id not known done: no timer below it is pending.
    pub fn floor(&self) -> u64 {
        [
            self.near_ids.first_key_value().map(|(&i, _)| i),
            self.far.map(|(_, i)| i),
            Some(self.cursor),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(self.cursor)
    }

    /// Reads the timer queue's units in `[from, to)` (`to = None`: to its end), putting each
    /// timer not done and not in `near` into `near` (due by `horizon`) or `far`; returns the
    /// offset after the last unit read.
    fn load(&mut self, store: &Store, progress: &Progress, from: u64, to: Option<u64>) -> u64 {
        let Some(q) = store.queue(TIMER_TOPIC, 0).ok().flatten() else {
            return from;
        };
        let end = to.unwrap_or_else(|| q.max_offset());
        let start = from.max(q.min_offset());
        let placed = super::each_unit(&*q, start, end, |id, e| {
            if e.has_record() && !progress.is_delivered(id) && !self.near_ids.contains_key(&id) {
                let due = progress
                    .rescheduled
                    .get(&id)
                    .copied()
                    .unwrap_or(e.tags_code);
                self.place(id, due, (e.offset, e.size));
            }
            Ok(())
        });
        // The closure never fails.
        placed.unwrap_or(start)
    }

    /// Puts timer `id` (due `due`, its unit `unit`) in the near tier when due by the horizon,
    /// else counts it in the far tier.
    fn place(&mut self, id: u64, due: i64, unit: (u64, u32)) {
        if due <= self.horizon {
            self.near.insert((due, id), unit);
            self.near_ids.insert(id, due);
        } else {
            self.count_far(id, due);
        }
    }

    fn count_far(&mut self, id: u64, due: i64) {
        let (d, i) = self.far.unwrap_or((i64::MAX, u64::MAX));
        self.far = Some((d.min(due), i.min(id)));
    }
}
