//! The delay levels as sources of the timer engine: each level's queue of
//! `SCHEDULE_TOPIC_XXXX` (level n is queue n - 1, FORMAT.md §15) holds its messages in due
//! order (one delay per level, store times that only grow), so the engine needs only each
//! level's head, merged with its near tier. How far each level is delivered is recorded in the
//! progress (progress.rs, `timerProgress.json`), beside the level messages done out of order,
//! and mirrored in `config/delayOffset.json`, RocketMQ's file and shape
//! (store/schedule/offsets.rs), so that a RocketMQ broker goes on from it.
//!
//! Invariants
//! - A level's head is delivered in queue order: its offset moves past a message only after
//!   that message's re-put returned, or when it is done out of order (cancelled) or moved (a
//!   reschedule: the engine then delivers it at its new time from the progress's
//!   `level_moved`, not as a head). So a level message is done when it is below its level's
//!   offset and not moved, or marked done; and a head's delivered copy found by recovery
//!   (`MQLITE_TIMER_ID` `L<level>:<offset>`) moves the level's offset past it.
//! - `heads` holds, per level, the unit at its offset when that unit is readable: its due time
//!   (the unit's tags code, the record's delivery time) and its record's place.
//! - `delayOffset.json` is read before `timerProgress.json` and written after it, and a reader
//!   takes the larger offset of the two per level: the offsets read never pass a message whose
//!   move or cancel the progress read does not record.
//! - An offset outside its queue (a store copied without its queues, retention of a level no
//!   one delivered) restarts at the nearest end; a slot that stands for no record is stepped
//!   over.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::progress::Progress;
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
    /// The file as last read or written (the progress holds the live table).
    offsets: DelayOffsets,
    heads: BTreeMap<u32, Head>,
}

impl Levels {
    /// The levels of the store whose config directory is `config_dir`, reading
    /// `delayOffset.json` (before the caller reads the progress: module doc).
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
            heads: BTreeMap::new(),
        })
    }

    /// Reads `delayOffset.json` again (before the caller reads the progress again), the heads
    /// forgotten.
    ///
    /// # Errors
    /// As `new`.
    pub fn reload(&mut self) -> Result<()> {
        if let Some(path) = &self.path {
            self.offsets = DelayOffsets::load(path)?;
        }
        self.heads.clear();
        Ok(())
    }

    /// Merges the offsets read from `delayOffset.json` into `progress` (module doc).
    pub fn merge_into(&self, progress: &mut Progress) {
        progress.merge_levels(&self.offsets.table);
    }

    /// The offsets in `progress` changed since they were last read or written.
    pub fn dirty(&self, progress: &Progress) -> bool {
        self.offsets.table != progress.levels
    }

    /// Reads every level's head (a unit per level).
    pub fn refresh(&mut self, store: &Store, progress: &mut Progress) {
        for level in 1..=level_count(store) {
            self.refresh_level(store, progress, level);
        }
    }

    /// Reads `level`'s head, stepping over the messages done out of order or moved.
    pub fn refresh_level(&mut self, store: &Store, progress: &mut Progress, level: u32) {
        self.heads.remove(&level);
        let Some(q) = store.queue(SCHEDULE_TOPIC, level - 1).ok().flatten() else {
            return;
        };
        loop {
            let offset = progress.level_offset(level);
            let clamped = offset.clamp(q.min_offset(), q.max_offset().max(q.min_offset()));
            if clamped != offset {
                progress.set_level_offset(level, clamped);
                continue;
            }
            let stepped = progress.level_done.contains(&(level, offset))
                || progress.level_moved.contains_key(&(level, offset));
            match q.entry(offset) {
                Some(e) if e.has_record() && !stepped => {
                    let head = Head {
                        due: e.tags_code,
                        offset,
                        record: e.offset,
                    };
                    self.heads.insert(level, head);
                }
                Some(_) => {
                    progress.set_level_offset(level, offset + 1);
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

    /// Writes the offsets in `progress` to `delayOffset.json` if they changed, after the
    /// progress that records them.
    ///
    /// # Errors
    /// I/O failures (the offsets stay dirty).
    pub fn persist(&mut self, progress: &Progress, now_ms: i64, mode: u32) -> Result<()> {
        if let (true, Some(path)) = (self.dirty(progress), &self.path) {
            let last = std::mem::replace(&mut self.offsets.table, progress.levels.clone());
            if let Err(e) = self.offsets.store(path, now_ms, mode) {
                self.offsets.table = last;
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Reads `delayOffset.json` (before the progress file, module doc), for a process that does
/// not host delivery.
///
/// # Errors
/// As `Levels::new`.
pub(super) fn load_offsets(config_dir: &std::path::Path) -> Result<BTreeMap<u32, u64>> {
    Ok(DelayOffsets::load(&config_dir.join(offsets::FILE))?.table)
}

/// The lowest commit-log offset of a level message not yet done, read from the queues
/// (`u64::MAX`: none; 0 when a queue cannot be read: keep everything rather than guess): the
/// first record at or above each level's offset, and each moved message's record.
pub(super) fn pending_floor(store: &Store, progress: &Progress) -> u64 {
    let mut floor = u64::MAX;
    for &(level, offset) in progress.level_moved.keys() {
        match store.queue(SCHEDULE_TOPIC, level - 1) {
            Ok(Some(q)) => {
                if let Some(e) = q.entry(offset).filter(|e| e.has_record()) {
                    floor = floor.min(e.offset);
                }
            }
            Ok(None) => {}
            Err(_) => return 0,
        }
    }
    for level in 1..=level_count(store) {
        let q = match store.queue(SCHEDULE_TOPIC, level - 1) {
            Ok(Some(q)) => q,
            Ok(None) => continue,
            Err(_) => return 0,
        };
        let from = progress.level_offset(level).max(q.min_offset());
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

/// Level messages stored and not done: the units from each level's offset, less those done
/// out of order, plus the moved ones the offset passed.
pub(super) fn pending(store: &Store, progress: &Progress) -> u64 {
    let units: u64 = ends(store)
        .into_iter()
        .map(|(q, end)| end.saturating_sub(progress.level_offset(q + 1)))
        .sum();
    let above = |&(l, o): &(u32, u64)| o >= progress.level_offset(l);
    let done = progress.level_done.iter().filter(|k| above(k)).count();
    let moved_below = progress.level_moved.keys().filter(|k| !above(k)).count();
    units.saturating_sub(done as u64) + moved_below as u64
}

/// Each level's queue (0-based) with its end (for a wait on any of them growing).
pub(super) fn ends(store: &Store) -> Vec<(u32, u64)> {
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

/// Levels that have a queue (queues of the schedule topic); 0 before the first delayed message.
pub(super) fn level_count(store: &Store) -> u32 {
    store
        .topic(SCHEDULE_TOPIC)
        .ok()
        .flatten()
        .map_or(0, |t| t.read_queue_nums.max(t.write_queue_nums))
}
