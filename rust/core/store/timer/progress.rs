//! `config/timerProgress.json` (FORMAT.md §16): how far the timer engine has delivered.
//!
//! - `queueOffset`: every timer below this offset of the timer topic's queue is delivered.
//! - `delivered`: half-open ranges `[from, to)` of timers at or above `queueOffset` delivered
//!   out of queue order (a later timer due first), sorted, disjoint.
//! - `commitLogOffset`: every delivery that the two fields above do not record was appended at
//!   or after this commit-log offset (the log's end when the file was written, after a flush).
//!   Recovery reads the log from there for `MQLITE_TIMER_ID`s before delivering anything.
//!
//! Invariants: written only after the commit log is durable through every delivery it
//! records; replaced atomically with a `.bak` (as every config file); a file that does not
//! decode with no usable `.bak` is an error (`ConfigFile`), never an empty progress (which
//! would deliver every timer again).

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::util::fs;

/// File name, under `config/`.
pub const FILE: &str = "timerProgress.json";

/// The decoded file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Timers below are all delivered.
    pub floor: u64,
    /// Delivered timers at or above `floor`: from -> to (half-open, disjoint, not touching).
    pub delivered: BTreeMap<u64, u64>,
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

    /// True when timer `id` is recorded as delivered.
    pub fn is_delivered(&self, id: u64) -> bool {
        id < self.floor
            || self
                .delivered
                .range(..=id)
                .next_back()
                .is_some_and(|(_, &to)| id < to)
    }

    /// Records timer `id` as delivered.
    pub fn mark(&mut self, id: u64) {
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

    /// Moves the floor up to `floor` (every timer below it delivered), folding in the ranges
    /// that touch it and dropping those below.
    pub fn raise_floor(&mut self, floor: u64) {
        let mut floor = floor.max(self.floor);
        self.delivered = self.delivered.split_off(&floor);
        while let Some(to) = self.delivered.remove(&floor) {
            floor = to;
        }
        self.floor = floor;
    }

    fn encode(&self, now_ms: i64) -> String {
        let ranges: Vec<String> = self
            .delivered
            .iter()
            .map(|(f, t)| format!("[{f}, {t}]"))
            .collect();
        format!(
            "{{\n  \"dataVersion\": {{\n    \"counter\": {},\n    \"stateVersion\": 0,\n    \
             \"timestamp\": {now_ms}\n  }},\n  \"queueOffset\": {},\n  \"commitLogOffset\": \
             {},\n  \"delivered\": [{}]\n}}",
            self.counter,
            self.floor,
            self.log_offset,
            ranges.join(", ")
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
    let counter = value
        .get("dataVersion")
        .and_then(|d| d.get("counter"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    Ok(Progress {
        floor,
        delivered,
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
        assert!(decode(Path::new("x"), b"{\"queueOffset\":1}").is_err());
        let overlapping = b"{\"queueOffset\":0,\"commitLogOffset\":0,\"delivered\":[[1,4],[2,5]]}";
        assert!(decode(Path::new("x"), overlapping).is_err());
    }
}
