//! Looking a key up: walks the hash chain of `topic#key` in every file whose time range meets
//! the window, newest file first, and hands each distinct record offset to the caller's check.
//!
//! An entry proves nothing: hashes collide, entry times are whole seconds, and a torn or
//! stale entry may point anywhere. The caller re-checks every candidate on the record (topic,
//! key, store time, offset inside the log) and only what passes counts toward the limit, so
//! collisions never shorten an answer.

use std::collections::HashSet;

use super::file::{self, IndexFile};
use super::hash;
use crate::error::Result;

/// What a lookup found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Offsets of the matching records, newest first.
    pub offsets: Vec<u64>,
    /// More matches exist than `limit`.
    pub truncated: bool,
}

/// Finds up to `limit` records indexed under `topic#key` whose store time is in
/// `[begin_ms, end_ms]`, newest first; `matches(offset)` re-checks a candidate on its record.
///
/// # Errors
/// I/O failures reading the files; the first error of `matches`.
pub fn lookup(
    files: &[std::sync::Arc<IndexFile>],
    topic: &str,
    key: &str,
    begin_ms: i64,
    end_ms: i64,
    limit: usize,
    mut matches: impl FnMut(u64) -> Result<bool>,
) -> Result<Found> {
    let h = hash::topic_key_hash(topic, key);
    // Entry times are floored to whole seconds after the file's begin time.
    let floor = begin_ms.saturating_sub(999);
    let mut seen = HashSet::new();
    let mut found = Found::default();
    let mut err = None;
    for f in files.iter().rev() {
        // One descriptor at a time, for the walk of one file.
        let Some(f) = f.for_reading()? else { continue };
        let hd = f.header()?;
        if hd.index_count <= 1 {
            continue;
        }
        if hd.begin_timestamp > end_ms || hd.end_timestamp < floor {
            continue;
        }
        let mut candidates = Vec::new();
        file::walk(&f, h, |offset, ts| {
            if ts <= end_ms && ts >= floor && seen.insert(offset) {
                candidates.push(offset);
            }
            true
        })?;
        // A chain is newest first; newer files hold later records.
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        for offset in candidates {
            match matches(offset) {
                Ok(true) if found.offsets.len() == limit => {
                    found.truncated = true;
                    break;
                }
                Ok(true) => found.offsets.push(offset),
                Ok(false) => {}
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
        if found.truncated {
            break;
        }
    }
    match err {
        Some(e) if found.offsets.is_empty() => Err(e),
        _ => Ok(found),
    }
}
