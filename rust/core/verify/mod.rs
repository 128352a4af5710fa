//! Verification: a full, read-only scan of a store that names every damaged range.
//!
//! Steps, in order: the commit log (log.rs: every record whole), the consume queues
//! (queues.rs: every unit against the log), then each derived check ([`DerivedCheck`]; today
//! the key index, index.rs), which checks only what it can see on disk and skips cleanly when
//! its files are absent.
//!
//! Invariants
//! - Nothing is written and no lock is taken: files are read with `read`/`pread`, never mapped,
//!   so a verification runs beside a writer (of this or another process) and never delays it.
//! - The durable end is read once, first (the checkpoint's confirm offset): what lies past it
//!   may be in flight, and its invalid bytes end the scan without being called damage. Files
//!   only grow and records are only appended, so anything the scan reads below the durable end
//!   is final; a file retention removes during the scan is skipped.
//! - Every damage names its file, its offset and the messages it affects, as far as the log's
//!   own header or a consume-queue unit still names them.

mod index;
pub mod log;
mod queues;
pub mod report;

use std::path::Path;

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::message::codec::{RecordView, STORE_HOST};
use crate::message::msg_id::offset_msg_id;
use crate::message::{properties, sysflag};
use crate::util::fs;

pub use report::{AffectedMessage, Damage, DamageKind, StepReport, VerifyReport};

/// What a derived check found.
#[derive(Debug)]
pub enum StepOutcome {
    /// Nothing to check (its files are absent or unrecognised); the reason.
    Skipped(String),
    /// Checked: what was checked, and the damage found.
    Checked {
        /// What was checked.
        detail: String,
        /// The damage.
        damage: Vec<Damage>,
    },
}

/// A verification step for a derived store: checks its files against the log scan, reading
/// only. New derived stores add theirs to [`derived_checks`].
pub trait DerivedCheck: std::fmt::Debug {
    /// The step's name in the report.
    fn name(&self) -> &'static str;
    /// Checks the store at `root` against `log`; `durable` as the log step's (`None`: every
    /// byte written is durable).
    ///
    /// # Errors
    /// I/O failures that are not damage.
    fn check(&self, root: &Path, log: &log::LogScan, durable: Option<u64>) -> Result<StepOutcome>;
}

/// The derived checks, in the order they run.
pub fn derived_checks() -> Vec<Box<dyn DerivedCheck>> {
    vec![Box::new(index::IndexCheck)]
}

/// A message known only by its commit-log offset.
pub(crate) fn affected(offset: u64) -> AffectedMessage {
    AffectedMessage {
        commit_log_offset: offset,
        size: None,
        topic: None,
        queue_id: None,
        queue_offset: None,
        msg_id: offset_msg_id(&STORE_HOST, offset),
        unique_id: None,
    }
}

/// The durable end of the store at `root`: mqlite's checkpoint confirm offset; without one,
/// `None` (all written data) after a clean close, else RocketMQ's confirm offset (or 0).
pub fn durable_end(root: &Path) -> Result<Option<u64>> {
    let path = root.join("checkpoint");
    if fs::entry_exists(&path) {
        let (cp, data) = Checkpoint::open(&path, false, 0o600)?;
        if let Some(d) = data {
            return Ok(Some(d.confirm_phy_offset));
        }
        if crate::lock::abort_exists(root) {
            return Ok(Some(
                cp.rocketmq()
                    .and_then(|r| r.confirm_phy_offset)
                    .unwrap_or(0),
            ));
        }
    }
    Ok(None)
}

/// Checks that `root` is a store directory: `Io` (not found, not a directory) for a path that
/// is not a directory, `InvalidArgument` for a directory that holds no store.
pub(crate) fn check_store_dir(root: &Path) -> Result<()> {
    let md = std::fs::metadata(root).map_err(|e| Error::io("open store", root, e))?;
    if !md.is_dir() {
        return Err(Error::io(
            "open store",
            root,
            std::io::Error::from(std::io::ErrorKind::NotADirectory),
        ));
    }
    if !(root.join("commitlog").is_dir() || root.join("meta").is_file()) {
        return Err(Error::InvalidArgument {
            field: "path",
            reason: format!("{} is not an mqlite store directory", root.display()),
        });
    }
    Ok(())
}

/// Verifies the store at `root`, reading only. `progress(done, total)` is called with bytes
/// as the scan moves on; an error it returns ends the verification with that error.
///
/// # Errors
/// `Io` when `root` does not exist or is not a directory, `InvalidArgument` when it holds no
/// store; I/O failures (damage is reported, not raised); whatever `progress` returns.
pub fn verify(
    root: &Path,
    progress: &mut dyn FnMut(u64, u64) -> Result<()>,
) -> Result<VerifyReport> {
    run(root, progress).map(|(report, _)| report)
}

/// [`verify`], also giving the log scan (repair needs its records).
pub(crate) fn run(
    root: &Path,
    progress: &mut dyn FnMut(u64, u64) -> Result<()>,
) -> Result<(VerifyReport, log::LogScan)> {
    check_store_dir(root)?;
    let durable = durable_end(root)?;
    let files = log::list_files(root)?;
    let mut total: u64 = files.iter().map(|f| f.len).sum();
    for (_, _, dir) in queues::queue_dirs(root)? {
        for (_, p) in fs::dir_entries(&dir)? {
            total += std::fs::metadata(&p).map_or(0, |m| m.len());
        }
    }
    let mut done = 0u64;
    let mut tick = |n: u64| -> Result<()> {
        done += n;
        progress(done.min(total), total)
    };
    let mut log = log::scan(files, durable, &mut tick)?;
    let q = queues::scan(root, &log, durable, &mut tick)?;
    for (di, m) in &q.in_log_damage {
        if let Some(d) = log.damage.get_mut(*di) {
            d.messages.push(m.clone());
        }
    }
    for i in 0..log.damage.len() {
        let offset = log.damage[i].offset;
        let mut msgs = std::mem::take(&mut log.damage[i].messages);
        if msgs.is_empty() {
            let length = log.damage[i].length;
            msgs.extend(header_message(&log, offset, length));
        }
        for m in &mut msgs {
            enrich(&log, m);
        }
        msgs.sort_by_key(|m| m.commit_log_offset);
        msgs.dedup_by_key(|m| m.commit_log_offset);
        log.damage[i].messages = msgs;
    }
    let mut steps = vec![
        StepReport {
            name: "commit_log".into(),
            status: status(log.damage.is_empty()),
            detail: format!(
                "{} records in {} files, {}..{}",
                log.records.len(),
                log.files.len(),
                log.min,
                log.end
            ),
        },
        StepReport {
            name: "consume_queues".into(),
            status: status(q.damage.is_empty()),
            detail: format!("{} units in {} queues", q.units, q.queues),
        },
    ];
    // The derived checks see the log's damage (an entry pointing into it is not theirs).
    let mut damage = log.damage.clone();
    damage.extend(q.damage);
    for c in derived_checks() {
        match c.check(root, &log, durable)? {
            StepOutcome::Skipped(why) => steps.push(StepReport {
                name: c.name().into(),
                status: "skipped".into(),
                detail: why,
            }),
            StepOutcome::Checked { detail, damage: d } => {
                steps.push(StepReport {
                    name: c.name().into(),
                    status: status(d.is_empty()),
                    detail,
                });
                damage.extend(d);
            }
        }
    }
    progress(total, total)?;
    let report = VerifyReport {
        store: root.to_string_lossy().into_owned(),
        ok: damage.is_empty(),
        log_min: log.min,
        log_end: log.end,
        durable_end: durable.unwrap_or(log.end),
        records: log.records.len() as u64,
        units: q.units,
        bytes_scanned: log.bytes + q.bytes,
        in_flight_from: log.in_flight_from,
        damage,
        steps,
    };
    Ok((report, log))
}

fn status(ok: bool) -> String {
    if ok { "ok" } else { "damaged" }.into()
}

/// The message a damaged record's header still names (its CRCs fail, but its structure and
/// PHYSICALOFFSET hold).
fn header_message(log: &log::LogScan, offset: u64, length: u64) -> Option<AffectedMessage> {
    let head = log.read_at(offset, 4)?;
    let total = u64::from(u32::from_be_bytes(head.get(..4)?.try_into().ok()?));
    if total > length {
        return None;
    }
    let bytes = log.read_at(offset, total as usize)?;
    let v = RecordView::parse(&bytes, false).ok()?;
    (v.physical_offset() == offset).then(|| AffectedMessage {
        size: Some(v.total_size()),
        topic: Some(v.topic().to_owned()),
        queue_id: Some(v.queue_id()),
        queue_offset: sysflag::is_dispatched(v.sysflag()).then(|| v.queue_offset()),
        ..affected(offset)
    })
}

/// Adds what the record at the message's offset still says (its unique id).
pub(crate) fn enrich(log: &log::LogScan, m: &mut AffectedMessage) {
    let Some(len) = m.size else {
        return;
    };
    let Some(bytes) = log.read_at(m.commit_log_offset, len as usize) else {
        return;
    };
    let Ok(v) = RecordView::parse(&bytes, false) else {
        return;
    };
    if v.physical_offset() != m.commit_log_offset {
        return;
    }
    m.unique_id = properties::get(v.properties(), properties::UNIQ_KEY).map(str::to_owned);
    m.size.get_or_insert(v.total_size());
    m.topic.get_or_insert_with(|| v.topic().to_owned());
    m.queue_id.get_or_insert(v.queue_id());
    if sysflag::is_dispatched(v.sysflag()) {
        m.queue_offset.get_or_insert(v.queue_offset());
    }
}
