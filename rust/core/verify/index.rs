//! The key-index step of verification: what can be checked of `index/` from its files alone.
//!
//! RocketMQ's IndexFile layout (FORMAT.md, the index section): a 40-byte header (begin and end
//! timestamps, begin and end commit-log offsets, used slot count, next entry number), S hash
//! slots of 4 bytes, then 20-byte entries (key hash, commit-log offset, time difference,
//! previous entry in the chain), entry numbers starting at 1. The slot count is not in the
//! header: it is taken from the file's length with RocketMQ's proportion of four entries per
//! slot; a file of any other length is skipped, never judged. Each used entry must point at a
//! whole record (or below the log's first file, or past the durable end, both unjudged) one of
//! whose keys (`topic#key` for every KEYS piece, `topic#UNIQ_KEY`) has its hash, and chain to
//! an earlier entry only. An entry pointing into a damaged span of the log is not index
//! damage: the log's damage names that message.

use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::Result;
use crate::message::codec::RecordView;
use crate::message::properties;
use crate::message::tags::java_string_hash;
use crate::util::bytes::{be_u32, be_u64};
use crate::util::fs;

use super::log::LogScan;
use super::report::{Damage, DamageKind};
use super::{DerivedCheck, StepOutcome};

const HEADER: usize = 40;
const SLOT: usize = 4;
const ENTRY: usize = 20;
const ENTRIES_PER_SLOT: usize = 4;

/// The check of `<store>/index/`.
#[derive(Debug, Default)]
pub struct IndexCheck;

impl DerivedCheck for IndexCheck {
    fn name(&self) -> &'static str {
        "index"
    }

    fn check(&self, root: &Path, log: &LogScan, durable: Option<u64>) -> Result<StepOutcome> {
        let dir = root.join("index");
        if !dir.is_dir() {
            return Ok(StepOutcome::Skipped("the store has no index".into()));
        }
        let mut files: Vec<(String, std::path::PathBuf)> = fs::dir_entries(&dir)?
            .into_iter()
            .filter(|(n, p)| !n.starts_with('.') && p.is_file())
            .collect();
        files.sort();
        let judged_below = durable.map_or(log.end, |d| d.min(log.end));
        let (mut damage, mut entries, mut skipped) = (Vec::new(), 0u64, 0u64);
        for (_, path) in files {
            // Only the header and the used entries are read: the file is mostly slots and
            // unwritten entries (a sparse 420 MB with RocketMQ's defaults).
            let Ok(file) = fs::open_ro(&path) else {
                continue;
            };
            let len = file.metadata().map_or(0, |m| m.len()) as usize;
            let body = len.saturating_sub(HEADER);
            let mut header = [0u8; HEADER];
            if len < HEADER
                || !body.is_multiple_of(SLOT + ENTRIES_PER_SLOT * ENTRY)
                || file.read_exact_at(&mut header, 0).is_err()
            {
                skipped += 1;
                continue;
            }
            let slots = body / (SLOT + ENTRIES_PER_SLOT * ENTRY);
            let count = (be_u32(&header, 36).unwrap_or(0) as usize).min(slots * ENTRIES_PER_SLOT);
            let first_entry = HEADER + slots * SLOT;
            let mut data = vec![0u8; count * ENTRY];
            if file.read_exact_at(&mut data, first_entry as u64).is_err() {
                skipped += 1;
                continue;
            }
            for n in 1..count {
                let at = n * ENTRY;
                let hash = be_u32(&data, at).unwrap_or(0);
                let offset = be_u64(&data, at + 4).unwrap_or(0);
                let prev = be_u32(&data, at + 16).unwrap_or(0) as usize;
                entries += 1;
                let why = if prev >= n {
                    Some(format!("entry {n} chains to a later entry {prev}"))
                } else if offset < log.min || offset >= judged_below || in_log_damage(log, offset) {
                    // Outside what is judged, or a record the log's own damage names.
                    None
                } else if log.record_at(offset).is_none() {
                    Some(format!(
                        "entry {n} points at {offset}, where no record starts"
                    ))
                } else if !key_hashes(log, offset).contains(&hash) {
                    Some(format!(
                        "entry {n}: no key of the record at {offset} has hash {hash}"
                    ))
                } else {
                    None
                };
                if let Some(detail) = why {
                    let at = (first_entry + at) as u64;
                    damage.push(Damage {
                        file: path.to_string_lossy().into_owned(),
                        offset: at,
                        file_offset: at,
                        length: ENTRY as u64,
                        kind: DamageKind::IndexEntry,
                        detail,
                        messages: Vec::new(),
                    });
                }
            }
        }
        Ok(StepOutcome::Checked {
            detail: format!(
                "{entries} entries checked; {skipped} files of an unrecognised size skipped"
            ),
            damage,
        })
    }
}

/// Whether `offset` falls in a damaged span of the log: an entry pointing there names a
/// message the log damage affects, not damage of the index.
fn in_log_damage(log: &LogScan, offset: u64) -> bool {
    log.damage
        .iter()
        .any(|d| offset >= d.offset && offset < d.offset.saturating_add(d.length))
}

/// The index hashes of the keys of the whole record at `offset` (RocketMQ's: the absolute
/// value of the Java hash of `topic#key`, 0 for `i32::MIN`).
fn key_hashes(log: &LogScan, offset: u64) -> Vec<u32> {
    let Some(r) = log.record_at(offset) else {
        return Vec::new();
    };
    let Some(bytes) = log.read_at(offset, r.size as usize) else {
        return Vec::new();
    };
    let Ok(v) = RecordView::parse(&bytes, false) else {
        return Vec::new();
    };
    let topic = v.topic();
    let props = v.properties();
    let mut keys: Vec<&str> = properties::get(props, "KEYS")
        .map(|k| k.split(' ').filter(|k| !k.is_empty()).collect())
        .unwrap_or_default();
    keys.extend(properties::get(props, properties::UNIQ_KEY));
    keys.iter()
        .map(|k| {
            let h = java_string_hash(&format!("{topic}#{k}"));
            h.checked_abs().unwrap_or(0) as u32
        })
        .collect()
}
