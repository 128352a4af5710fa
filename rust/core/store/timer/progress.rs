//! `config/timerProgress.json` (FORMAT.md §16): how far the timer engine has delivered, of
//! both sources: which timers of the timer log and which delay-level messages are done.
//!
//! - `queueOffset`: every timer below this offset of the timer topic's queue is delivered.
//! - `delivered`: half-open ranges `[from, to)` of timers at or above `queueOffset` done out of
//!   queue order (a later timer due first, or cancelled), sorted, disjoint. "Done" is delivered
//!   or cancelled: which one, the cancel queue tells (a cancel record names the timer).
//! - `rescheduled`: `[id, due ms]` of the pending timers at or above `queueOffset` whose
//!   delivery time a reschedule record changed (the last one in log order wins).
//! - `levelOffsets`: `[level, offset]`: every message of the level below the offset is done,
//!   but the moved ones. `config/delayOffset.json` (FORMAT.md §15, levels.rs) mirrors them in
//!   RocketMQ's shape, written after this file; a reader takes the larger of the two per level
//!   (the mirror is behind after a crash between the writes, ahead when RocketMQ delivered).
//! - `levelDone`: `[level, offset]` of the level messages at or above their level's offset done
//!   out of queue order (cancelled, or rescheduled and then delivered or cancelled); dropped
//!   once the level's offset passes them.
//! - `levelRescheduled`: `[level, offset, due ms]` of the pending level messages a reschedule
//!   moved: the engine delivers them at that time from their own record, wherever the level's
//!   offset is (it steps over them).
//! - `commitLogOffset`: every delivery, cancel and reschedule that the fields above do not
//!   record was appended at or after this commit-log offset. Recovery reads the log from there
//!   for `MQLITE_TIMER_ID`s and cancel records before delivering anything.
//!
//! Invariants: written only after the commit log is durable through every delivery it
//! records; replaced atomically with a `.bak` (as every config file); a file that does not
//! decode with no usable `.bak` is an error (`ConfigFile`), never an empty progress (which
//! would deliver every timer again).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::error::{Error, Result};
use crate::message::timer_id::{Source, TimerId};
use crate::util::fs;

/// File name, under `config/`.
pub const FILE: &str = "timerProgress.json";

/// The decoded file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Timers below are all done (delivered or cancelled).
    pub floor: u64,
    /// Done timers at or above `floor`: from -> to (half-open, disjoint, not touching).
    pub delivered: BTreeMap<u64, u64>,
    /// Pending timers at or above `floor` with a new delivery time: id -> due ms.
    pub rescheduled: BTreeMap<u64, i64>,
    /// Level -> next offset; every message of the level below it is done, except those in
    /// `level_moved` (`levelOffsets`, mirrored by `delayOffset.json`).
    pub levels: BTreeMap<u32, u64>,
    /// (level, offset) of done level messages at or above their level's offset.
    pub level_done: BTreeSet<(u32, u64)>,
    /// (level, offset) -> due ms of pending level messages a reschedule moved.
    pub level_moved: BTreeMap<(u32, u64), i64>,
    /// Where recovery starts looking for deliveries the file does not record.
    pub log_offset: u64,
    /// `dataVersion.counter`.
    pub counter: u64,
    /// The content came from the `.bak`.
    pub main_unreadable: bool,
}

impl Progress {
    /// Reads `path` (or its `.bak`); a fresh progress when neither exists.
    ///
    /// # Errors
    /// `ConfigFile` when neither decodes; I/O failures.
    pub fn load(path: &Path) -> Result<Self> {
        Ok(match fs::read_with_backup(path, decode)? {
            Some(l) => Progress {
                main_unreadable: l.main_unreadable,
                ..l.value
            },
            None => Progress::default(),
        })
    }

    /// Writes the progress with the next counter.
    ///
    /// # Errors
    /// I/O failures (the previous file is then unchanged).
    pub fn store(&mut self, path: &Path, now_ms: i64, mode: u32) -> Result<()> {
        self.counter += 1;
        let text = self.encode(now_ms);
        fs::stage(path, text.as_bytes(), mode)?.replace(!self.main_unreadable)?;
        self.main_unreadable = false;
        Ok(())
    }

    /// True when timer `id` is recorded as done (delivered or cancelled).
    pub fn is_delivered(&self, id: u64) -> bool {
        id < self.floor
            || self
                .delivered
                .range(..=id)
                .next_back()
                .is_some_and(|(_, &to)| id < to)
    }

    /// Records timer `id` as done (delivered or cancelled).
    pub fn mark(&mut self, id: u64) {
        self.rescheduled.remove(&id);
        if self.is_delivered(id) {
            return;
        }
        let mut from = id;
        let mut to = id + 1;
        if let Some((&f, &t)) = self.delivered.range(..id).next_back() {
            if t == id {
                from = f;
                self.delivered.remove(&f);
            }
        }
        if let Some(t) = self.delivered.remove(&to) {
            to = t;
        }
        self.delivered.insert(from, to);
    }

    /// True when timer `id`, of either source, is recorded as done (delivered or cancelled).
    pub fn is_done(&self, id: TimerId) -> bool {
        match id.source {
            Source::Log => self.is_delivered(id.offset),
            Source::Level(l) => {
                !self.level_moved.contains_key(&(l, id.offset))
                    && (id.offset < self.level_offset(l)
                        || self.level_done.contains(&(l, id.offset)))
            }
        }
    }

    /// The delivery time a reschedule gave pending timer `id`, if one did.
    pub fn moved(&self, id: TimerId) -> Option<i64> {
        match id.source {
            Source::Log => self.rescheduled.get(&id.offset).copied(),
            Source::Level(l) => self.level_moved.get(&(l, id.offset)).copied(),
        }
    }

    /// Level `level`'s offset: every message below it is done, but the moved ones.
    pub fn level_offset(&self, level: u32) -> u64 {
        self.levels.get(&level).copied().unwrap_or(0)
    }

    /// Takes each level's offset of `table` (a `delayOffset.json`) where it is ahead.
    pub fn merge_levels(&mut self, table: &BTreeMap<u32, u64>) {
        for (&level, &offset) in table {
            if offset > self.level_offset(level) {
                self.set_level_offset(level, offset);
            }
        }
    }

    /// Moves level `level`'s offset to `offset` (up or, for a queue that lost its head, to the
    /// nearest end), forgetting the done marks it passes.
    pub fn set_level_offset(&mut self, level: u32, offset: u64) {
        self.levels.insert(level, offset);
        self.level_done.retain(|&(l, o)| l != level || o >= offset);
    }

    /// Records timer `id` as delivered. A level message delivered from its level's head (not
    /// moved) means every one before it is done: levels deliver in queue order.
    pub fn delivered(&mut self, id: TimerId) {
        match id.source {
            Source::Log => self.mark(id.offset),
            Source::Level(l) if self.level_moved.contains_key(&(l, id.offset)) => {
                self.level_out_of_order(l, id.offset);
            }
            Source::Level(l) => {
                let next = id.offset.saturating_add(1);
                if self.level_offset(l) < next {
                    self.set_level_offset(l, next);
                }
            }
        }
    }

    /// Records timer `id` as cancelled.
    pub fn cancelled(&mut self, id: TimerId) {
        match id.source {
            Source::Log => self.mark(id.offset),
            Source::Level(l) => self.level_out_of_order(l, id.offset),
        }
    }

    /// Gives pending timer `id` the delivery time `due`.
    pub fn reschedule(&mut self, id: TimerId, due: i64) {
        match id.source {
            Source::Log => {
                self.rescheduled.insert(id.offset, due);
            }
            Source::Level(l) => {
                self.level_done.remove(&(l, id.offset));
                self.level_moved.insert((l, id.offset), due);
            }
        }
    }

    /// Level message (`level`, `offset`) done outside queue order.
    fn level_out_of_order(&mut self, level: u32, offset: u64) {
        self.level_moved.remove(&(level, offset));
        if offset >= self.level_offset(level) {
            self.level_done.insert((level, offset));
        }
    }

    /// Moves the floor up to `floor` (every timer below it delivered), folding in the ranges
    /// that touch it and dropping those below.
    pub fn raise_floor(&mut self, floor: u64) {
        let mut floor = floor.max(self.floor);
        self.delivered = self.delivered.split_off(&floor);
        while let Some(to) = self.delivered.remove(&floor) {
            floor = to;
        }
        self.rescheduled = self.rescheduled.split_off(&floor);
        self.floor = floor;
    }

    fn encode(&self, now_ms: i64) -> String {
        let ranges: Vec<String> = self
            .delivered
            .iter()
            .map(|(f, t)| format!("[{f}, {t}]"))
            .collect();
        let moved: Vec<String> = self
            .rescheduled
            .iter()
            .map(|(id, due)| format!("[{id}, {due}]"))
            .collect();
        let level_offsets: Vec<String> = self
            .levels
            .iter()
            .map(|(l, o)| format!("[{l}, {o}]"))
            .collect();
        let level_done: Vec<String> = self
            .level_done
            .iter()
            .map(|(l, o)| format!("[{l}, {o}]"))
            .collect();
        let level_moved: Vec<String> = self
            .level_moved
            .iter()
            .map(|((l, o), due)| format!("[{l}, {o}, {due}]"))
            .collect();
        format!(
            "{{\n  \"dataVersion\": {{\n    \"counter\": {},\n    \"stateVersion\": 0,\n    \
             \"timestamp\": {now_ms}\n  }},\n  \"queueOffset\": {},\n  \"commitLogOffset\": \
             {},\n  \"delivered\": [{}],\n  \"rescheduled\": [{}],\n  \"levelOffsets\": [{}],\n  \
             \"levelDone\": [{}],\n  \"levelRescheduled\": [{}]\n}}",
            self.counter,
            self.floor,
            self.log_offset,
            ranges.join(", "),
            moved.join(", "),
            level_offsets.join(", "),
            level_done.join(", "),
            level_moved.join(", ")
        )
    }
}

/// Decodes the file's bytes.
///
/// # Errors
/// `ConfigFile` naming `path` and the field at fault.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<Progress> {
    let bad = |field: &str, reason: String| Error::ConfigFile {
        path: path.to_path_buf(),
        field: field.to_owned(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| bad("", format!("not JSON: {e}")))?;
    let offset = |field: &str| {
        value
            .get(field)
            .and_then(serde_json::Value::as_u64)
            .filter(|&o| o <= i64::MAX as u64)
            .ok_or_else(|| bad(field, "missing or not an offset".into()))
    };
    let floor = offset("queueOffset")?;
    let log_offset = offset("commitLogOffset")?;
    let Some(list) = value.get("delivered").and_then(|d| d.as_array()) else {
        return Err(bad("delivered", "missing or not a list".into()));
    };
    let mut delivered = BTreeMap::new();
    let mut last = floor;
    for r in list {
        let pair = r
            .as_array()
            .filter(|p| p.len() == 2)
            .and_then(|p| Some((p[0].as_u64()?, p[1].as_u64()?)))
            .filter(|&(f, t)| f >= last && f < t)
            .ok_or_else(|| {
                bad(
                    "delivered",
                    format!("{r} is not a sorted range above the floor"),
                )
            })?;
        delivered.insert(pair.0, pair.1);
        last = pair.1;
    }
    // Absent in files written before reschedules existed.
    let mut rescheduled = BTreeMap::new();
    if let Some(list) = value.get("rescheduled") {
        let Some(list) = list.as_array() else {
            return Err(bad("rescheduled", "not a list".into()));
        };
        for r in list {
            let pair = r
                .as_array()
                .filter(|p| p.len() == 2)
                .and_then(|p| Some((p[0].as_u64()?, p[1].as_i64()?)))
                .filter(|&(id, _)| id >= floor)
                .ok_or_else(|| {
                    bad(
                        "rescheduled",
                        format!("{r} is not an [id, due ms] pair above the floor"),
                    )
                })?;
            rescheduled.insert(pair.0, pair.1);
        }
    }
    // Absent in files written before level messages could be cancelled or rescheduled.
    let level_list = |field: &str, len: usize| -> Result<Vec<Vec<u64>>> {
        let Some(list) = value.get(field) else {
            return Ok(Vec::new());
        };
        let Some(list) = list.as_array() else {
            return Err(bad(field, "not a list".into()));
        };
        list.iter()
            .map(|r| {
                r.as_array()
                    .filter(|p| p.len() == len)
                    .and_then(|p| p.iter().map(serde_json::Value::as_u64).collect())
                    .filter(|p: &Vec<u64>| {
                        p[0] >= 1
                            && p[0] <= u64::from(u32::MAX)
                            && p.iter().all(|&v| v <= i64::MAX as u64)
                    })
                    .ok_or_else(|| {
                        bad(
                            field,
                            format!(
                                "{r} is not a [level, offset{}] entry",
                                if len == 3 { ", due ms" } else { "" }
                            ),
                        )
                    })
            })
            .collect()
    };
    let levels = level_list("levelOffsets", 2)?
        .into_iter()
        .map(|p| (p[0] as u32, p[1]))
        .collect();
    let level_done = level_list("levelDone", 2)?
        .into_iter()
        .map(|p| (p[0] as u32, p[1]))
        .collect();
    let level_moved = level_list("levelRescheduled", 3)?
        .into_iter()
        .map(|p| ((p[0] as u32, p[1]), p[2] as i64))
        .collect();
    let counter = value
        .get("dataVersion")
        .and_then(|d| d.get("counter"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    Ok(Progress {
        floor,
        delivered,
        rescheduled,
        levels,
        level_done,
        level_moved,
        log_offset,
        counter,
        main_unreadable: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_fold_into_the_floor() {
        let mut p = Progress::default();
        for id in [5, 3, 4, 9] {
            p.mark(id);
        }
        assert_eq!(p.delivered, BTreeMap::from([(3, 6), (9, 10)]));
        assert!(p.is_delivered(4) && !p.is_delivered(6) && !p.is_delivered(2));
        p.raise_floor(3);
        assert_eq!((p.floor, p.delivered.len()), (6, 1));
        let text = p.encode(1);
        let back = decode(Path::new("x"), text.as_bytes()).unwrap();
        assert_eq!((back.floor, back.delivered), (6, BTreeMap::from([(9, 10)])));
        p.rescheduled.insert(7, 1_000);
        p.rescheduled.insert(8, 2_000);
        let back = decode(Path::new("x"), p.encode(1).as_bytes()).unwrap();
        assert_eq!(back.rescheduled, p.rescheduled);
        p.mark(7);
        assert!(!p.rescheduled.contains_key(&7));
        p.raise_floor(11);
        assert!(p.rescheduled.is_empty());
        let below =
            b"{\"queueOffset\":5,\"commitLogOffset\":0,\"delivered\":[],\"rescheduled\":[[4,1]]}";
        assert!(decode(Path::new("x"), below).is_err());
        assert!(decode(Path::new("x"), b"{\"queueOffset\":1}").is_err());
        let overlapping = b"{\"queueOffset\":0,\"commitLogOffset\":0,\"delivered\":[[1,4],[2,5]]}";
        assert!(decode(Path::new("x"), overlapping).is_err());
    }

    #[test]
    fn level_messages_are_done_below_the_offset_or_out_of_order() {
        let mut p = Progress::default();
        p.set_level_offset(3, 10);
        let (l9, l10, l11, l12) = (
            TimerId::level(3, 9),
            TimerId::level(3, 10),
            TimerId::level(3, 11),
            TimerId::level(3, 12),
        );
        assert!(p.is_done(l9) && !p.is_done(l10));
        p.cancelled(l11);
        p.reschedule(l12, 5_000);
        assert!(p.is_done(l11) && !p.is_done(l12));
        assert_eq!(p.moved(l12), Some(5_000));
        let back = decode(Path::new("x"), p.encode(1).as_bytes()).unwrap();
        assert_eq!(
            (
                back.levels.clone(),
                back.level_done.clone(),
                back.level_moved.clone()
            ),
            (
                p.levels.clone(),
                p.level_done.clone(),
                p.level_moved.clone()
            )
        );
        // A delayOffset.json behind is ignored, one ahead taken.
        let mut merged = back.clone();
        merged.merge_levels(&BTreeMap::from([(3, 5), (4, 2)]));
        assert_eq!(merged.levels, BTreeMap::from([(3, 10), (4, 2)]));
        // The head delivered in order past the cancelled and the moved one.
        p.delivered(l10);
        p.set_level_offset(3, 13);
        assert!(p.level_done.is_empty() && !p.is_done(l12));
        p.delivered(l12);
        assert!(p.is_done(l12) && p.level_moved.is_empty());
        let bad =
            b"{\"queueOffset\":0,\"commitLogOffset\":0,\"delivered\":[],\"levelDone\":[[0,1]]}";
        assert!(decode(Path::new("x"), bad).is_err());
    }
}
