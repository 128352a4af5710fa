//! The delay levels as sources of the timer engine: each level's queue of
//! `SCHEDULE_TOPIC_XXXX` (level n is queue n - 1, FORMAT.md §15) holds its messages in due
//! order (one delay per level, store times that only grow), so the engine needs only each
//! level's head, merged with its near tier. How far each level is delivered is
//! `config/delayOffset.json`, in RocketMQ's shape (store/schedule/offsets.rs).
//!
//! Invariants
//! - A level is delivered in queue order: its offset moves past a message only after that
//!   message's re-put returned, so "delivered" is exactly "below the level's offset", and a
//!   delivered copy found by recovery (`MQLITE_TIMER_ID` `L<level>:<offset>`) moves the
//!   level's offset past it.
//! - `heads` holds, per level, the unit at its offset when that unit is readable: its due time
//!   (the unit's tags code, the record's delivery time) and its record's place.
//! - An offset outside its queue (a store copied without its queues, retention of a level no
//!   one delivered) restarts at the nearest end; a slot that stands for no record is stepped
//!   over.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::error::Result;
use crate::message::tags::SCHEDULE_TOPIC;
use crate::store::schedule::offsets::{self, DelayOffsets};
use crate::store::Store;

/// The next message of a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    /// When it is due (ms, store clock).
    pub due: i64,
    /// Its offset in the level's queue.
    pub offset: u64,
    /// Its record's commit-log offset.
    pub record: u64,
}

/// See the module doc.
#[derive(Debug)]
pub(super) struct Levels {
    /// `config/delayOffset.json` (`None`: an in-memory store).
    path: Option<PathBuf>,
    offsets: DelayOffsets,
    /// The offsets changed since they were last written.
    pub dirty: bool,
    heads: BTreeMap<u32, Head>,
}

impl Levels {
    /// The levels of the store whose config directory is `config_dir`, reading their offsets.
    ///
    /// # Errors
    /// `ConfigFile` when `delayOffset.json` and its `.bak` do not decode; I/O failures.
    pub fn new(config_dir: Option<PathBuf>) -> Result<Self> {
        let path = config_dir.map(|d| d.join(offsets::FILE));
        let offsets = match &path {
            Some(p) => DelayOffsets::load(p)?,
            None => DelayOffsets::default(),
        };
        Ok(Levels {
            path,
            offsets,
            dirty: false,
            heads: BTreeMap::new(),
        })
    }

    /// A new hosting: the offsets read again unless this process holds newer ones (another
    /// process may have delivered since), the heads forgotten.
    ///
    /// # Errors
    /// As `new`.
    pub fn reload(&mut self) -> Result<()> {
        if let (false, Some(path)) = (self.dirty, &self.path) {
            self.offsets = DelayOffsets::load(path)?;
        }
        self.heads.clear();
        Ok(())
    }

    /// Level -> next offset to deliver.
    pub fn table(&self) -> BTreeMap<u32, u64> {
        self.offsets.table.clone()
    }

    /// Recovery found the delivered copy of `level`'s message at `offset`: that message and
    /// every one before it are delivered (queue order).
    pub fn mark(&mut self, level: u32, offset: u64) {
        let next = offset.saturating_add(1);
        if self.offsets.table.get(&level).copied().unwrap_or(0) < next {
            self.offsets.table.insert(level, next);
            self.heads.remove(&level);
            self.dirty = true;
        }
    }

    /// Reads every level's head (a unit per level).
    pub fn refresh(&mut self, store: &Store) {
        for level in 1..=level_count(store) {
            self.refresh_level(store, level);
        }
    }

    /// Reads `level`'s head.
    pub fn refresh_level(&mut self, store: &Store, level: u32) {
        self.heads.remove(&level);
        let Some(q) = store.queue(SCHEDULE_TOPIC, level - 1).ok().flatten() else {
            return;
        };
        loop {
            let offset = self.offsets.table.get(&level).copied().unwrap_or(0);
            let clamped = offset.clamp(q.min_offset(), q.max_offset().max(q.min_offset()));
            if clamped != offset {
                self.offsets.table.insert(level, clamped);
                self.dirty = true;
                continue;
            }
            match q.entry(offset) {
                Some(e) if e.has_record() => {
                    let head = Head {
                        due: e.tags_code,
                        offset,
                        record: e.offset,
                    };
                    self.heads.insert(level, head);
                }
                Some(_) => {
                    self.offsets.table.insert(level, offset + 1);
                    self.dirty = true;
                    continue;
                }
                None => {}
            }
            return;
        }
    }

    /// The level whose head is due first, with its head.
    pub fn earliest(&self) -> Option<(u32, Head)> {
        self.heads
            .iter()
            .min_by_key(|(_, h)| h.due)
            .map(|(&l, &h)| (l, h))
    }

    /// The record of `level`'s head says it is due at `due`, later than its unit did.
    pub fn postpone(&mut self, level: u32, due: i64) {
        if let Some(h) = self.heads.get_mut(&level) {
            h.due = due;
        }
    }

    /// `level`'s head was delivered: the level moves on to its next message.
    pub fn advance(&mut self, store: &Store, level: u32, offset: u64) {
        self.offsets.table.insert(level, offset.saturating_add(1));
        self.dirty = true;
        self.refresh_level(store, level);
    }

    /// The lowest commit-log offset of a level message not yet delivered, among the heads
    /// read (`None`: none).
    pub fn first_record(&self) -> Option<u64> {
        self.heads.values().map(|h| h.record).min()
    }

    /// Writes the offsets if they changed (the log already durable through every delivery
    /// they record).
    ///
    /// # Errors
    /// I/O failures (the offsets stay dirty).
    pub fn persist(&mut self, now_ms: i64, mode: u32) -> Result<()> {
        if let (true, Some(path)) = (self.dirty, &self.path) {
            self.offsets.store(path, now_ms, mode)?;
        }
        self.dirty = false;
        Ok(())
    }

    /// The lowest commit-log offset of a level message not yet delivered, read from the
    /// queues (`u64::MAX`: none; 0 when a queue cannot be read: keep everything rather than
    /// guess).
    pub fn pending_floor(&self, store: &Store) -> u64 {
        let mut floor = u64::MAX;
        for level in 1..=level_count(store) {
            let q = match store.queue(SCHEDULE_TOPIC, level - 1) {
                Ok(Some(q)) => q,
                Ok(None) => continue,
                Err(_) => return 0,
            };
            let offset = self.offsets.table.get(&level).copied().unwrap_or(0);
            let from = offset.max(q.min_offset());
            if from >= q.max_offset() {
                continue;
            }
            // The first unit that stands for a record (placeholders are stepped over).
            let mut at = from;
            let mut units = Vec::with_capacity(16);
            loop {
                units.clear();
                q.entries(at, 16, &mut units);
                let Some(&(last, _)) = units.last() else {
                    return 0;
                };
                if let Some(&(_, e)) = units.iter().find(|(_, e)| e.has_record()) {
                    floor = floor.min(e.offset);
                    break;
                }
                at = last + 1;
                if at >= q.max_offset() {
                    break;
                }
            }
        }
        floor
    }

    /// Each level's queue with its end (for a wait on any of them growing).
    pub fn ends(&self, store: &Store) -> Vec<(u32, u64)> {
        (0..level_count(store))
            .map(|q| {
                let end = store
                    .queue(SCHEDULE_TOPIC, q)
                    .ok()
                    .flatten()
                    .map_or(0, |cq| cq.max_offset());
                (q, end)
            })
            .collect()
    }
}

/// Levels that have a queue (queues of the schedule topic); 0 before the first delayed message.
fn level_count(store: &Store) -> u32 {
    store
        .topic(SCHEDULE_TOPIC)
        .ok()
        .flatten()
        .map_or(0, |t| t.read_queue_nums.max(t.write_queue_nums))
}
