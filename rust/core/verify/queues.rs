//! The consume-queue step of verification: every unit of every queue
//! (`consumequeue/<topic>/<queueId>/`) checked against the commit-log scan.
//!
//! A unit at slot k of queue (T, q) must index a whole record that starts at its offset, has
//! its size, topic T, queue q, QUEUEOFFSET k and its tags code, and goes to a consume queue;
//! placeholders are skipped, and a zero unit ends the queue unless units below the durable end
//! follow it (a hole). Units that point below the log's first file (retention) or past the
//! durable end (a writer may be dispatching) are not judged. A unit that points into a damaged
//! log span is not queue damage: it names a message the log damage affects.

use std::path::Path;

use crate::consume_queue::unit::{CqUnit, UNIT_SIZE};
use crate::error::Result;
use crate::util::fs;

use super::affected;
use super::log::LogScan;
use super::report::{AffectedMessage, Damage, DamageKind};

/// What the consume-queue step found.
#[derive(Debug, Default)]
pub struct QueueScan {
    /// Units read (placeholders and judged ones).
    pub units: u64,
    /// Queues read.
    pub queues: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Damaged units, merged into runs.
    pub damage: Vec<Damage>,
    /// For each damaged log span (index into the log's damage): the units pointing into it.
    pub in_log_damage: Vec<(usize, AffectedMessage)>,
}

/// Every queue directory of the store at `root`: (topic, queue id, path), sorted.
pub fn queue_dirs(root: &Path) -> Result<Vec<(String, u32, std::path::PathBuf)>> {
    let mut out = Vec::new();
    for (topic, tdir) in fs::dir_entries(&root.join("consumequeue"))? {
        if !tdir.is_dir() {
            continue;
        }
        for (qname, qdir) in fs::dir_entries(&tdir)? {
            if let (Ok(q), true) = (qname.parse::<u32>(), qdir.is_dir()) {
                out.push((topic.clone(), q, qdir));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Checks every queue under `root` against `log`; `durable` as the log step's.
pub fn scan(
    root: &Path,
    log: &LogScan,
    durable: Option<u64>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<QueueScan> {
    let mut s = QueueScan::default();
    let judged_below = durable.map_or(log.end, |d| d.min(log.end));
    for (topic, queue_id, dir) in queue_dirs(root)? {
        s.queues += 1;
        let mut files: Vec<(u64, std::path::PathBuf)> = fs::dir_entries(&dir)?
            .into_iter()
            .filter_map(|(n, p)| Some((fs::parse_offset_file_name(&n)?, p)))
            .collect();
        files.sort();
        // The first zero unit not yet known to end the queue: (file, slot, position in file).
        let mut zero: Option<(std::path::PathBuf, u64, u64)> = None;
        for (start, path) in files {
            let Ok(data) = std::fs::read(&path) else {
                continue;
            };
            s.bytes += data.len() as u64;
            progress(data.len() as u64)?;
            for (i, raw) in data.chunks_exact(UNIT_SIZE as usize).enumerate() {
                let file_offset = i as u64 * UNIT_SIZE;
                let slot = (start + file_offset) / UNIT_SIZE;
                let Ok(bytes) = <&[u8; 20]>::try_from(raw) else {
                    continue;
                };
                if raw.iter().all(|b| *b == 0) {
                    zero.get_or_insert((path.clone(), slot, file_offset));
                    continue;
                }
                s.units += 1;
                let unit = CqUnit::decode(bytes);
                if let Some(u) = unit {
                    if u.is_placeholder() || u.offset < log.min {
                        continue;
                    }
                    // Before the durable end test: a span the scan could not get past ends
                    // the valid log, and its units name the messages it affects.
                    if let Some(di) = log
                        .damage
                        .iter()
                        .position(|d| d.offset <= u.offset && u.offset < d.offset + d.length)
                    {
                        s.in_log_damage.push((
                            di,
                            AffectedMessage {
                                size: Some(u.size),
                                topic: Some(topic.clone()),
                                queue_id: Some(queue_id),
                                queue_offset: Some(slot),
                                ..affected(u.offset)
                            },
                        ));
                        zero = None;
                        continue;
                    }
                    if u.offset >= judged_below {
                        continue;
                    }
                }
                if let Some((zpath, zslot, zoff)) = zero.take() {
                    let d = unit_damage(
                        &zpath,
                        zslot,
                        zoff,
                        DamageKind::QueueUnit,
                        "a zero unit (hole) before later units".into(),
                    );
                    push_merged(&mut s.damage, d, &topic, queue_id, zslot, None);
                }
                let Some(u) = unit else {
                    let d = unit_damage(
                        &path,
                        slot,
                        file_offset,
                        DamageKind::QueueUnit,
                        "the unit does not decode".into(),
                    );
                    push_merged(&mut s.damage, d, &topic, queue_id, slot, None);
                    continue;
                };
                if let Some(why) = mismatch(log, &u, &topic, queue_id, slot) {
                    let d = unit_damage(&path, slot, file_offset, DamageKind::QueueMismatch, why);
                    push_merged(&mut s.damage, d, &topic, queue_id, slot, Some(&u));
                }
            }
        }
    }
    Ok(s)
}

/// Why `u`, at `slot` of (topic, queue_id), does not index its record; `None` when it does.
fn mismatch(log: &LogScan, u: &CqUnit, topic: &str, queue_id: u32, slot: u64) -> Option<String> {
    let Some(r) = log.record_at(u.offset) else {
        return Some(format!("points at {}, where no record starts", u.offset));
    };
    let rtopic = log.topics.get(r.topic as usize).map_or("", String::as_str);
    let mut why = Vec::new();
    if r.size != u.size {
        why.push(format!("size {} but the record has {}", u.size, r.size));
    }
    if rtopic != topic || r.queue_id != queue_id {
        why.push(format!("the record belongs to {rtopic}:{}", r.queue_id));
    }
    if r.queue_offset != slot {
        why.push(format!("the record has queue offset {}", r.queue_offset));
    }
    if r.tags_code != u.tags_code {
        why.push(format!(
            "tags code {} but the record's is {}",
            u.tags_code, r.tags_code
        ));
    }
    if !r.dispatched {
        why.push("the record never goes to a consume queue".into());
    }
    (!why.is_empty()).then(|| format!("unit for offset {}: {}", u.offset, why.join("; ")))
}

fn unit_damage(
    path: &Path,
    slot: u64,
    file_offset: u64,
    kind: DamageKind,
    detail: String,
) -> Damage {
    Damage {
        file: path.to_string_lossy().into_owned(),
        offset: slot * UNIT_SIZE,
        file_offset,
        length: UNIT_SIZE,
        kind,
        detail,
        messages: Vec::new(),
    }
}

/// Appends `d` (one unit), merged into the previous run when it continues it (same file and
/// kind, the next slot). The unit's message is recorded; its record is still in the log, so a
/// rebuilt queue serves it again.
fn push_merged(
    out: &mut Vec<Damage>,
    mut d: Damage,
    topic: &str,
    queue_id: u32,
    slot: u64,
    unit: Option<&CqUnit>,
) {
    let msg = unit.map(|u| AffectedMessage {
        size: Some(u.size),
        topic: Some(topic.to_owned()),
        queue_id: Some(queue_id),
        queue_offset: Some(slot),
        ..affected(u.offset)
    });
    if let Some(last) = out.last_mut() {
        if last.file == d.file && last.kind == d.kind && last.offset + last.length == d.offset {
            last.length += d.length;
            last.messages.extend(msg);
            return;
        }
    }
    d.messages.extend(msg);
    out.push(d);
}
