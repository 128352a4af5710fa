//! Repair: the operator's way back from damage below the durable end, which recovery refuses
//! to cut (recovery.rs). docs/runbook.md is the operator's guide.
//!
//! A repair verifies the store (verify/), then, by the mode the operator chose:
//! - **cut**: the log ends at its first damage; every record from there on is lost;
//! - **skip**: each damaged span is overwritten with bytes every reader skips (filler.rs,
//!   FORMAT.md §1.7), so only the messages of the damaged spans are lost and every other
//!   record keeps its offset. Where no whole record follows a span, the log is cut there.
//!
//! Either way the derived files (consume queues, `queues.clean`, the key index) are moved
//! aside and the checkpoint is reset so that the next open re-dispatches the whole log,
//! rebuilding them (recovery verifies every record as it does).
//!
//! Invariants
//! - It runs only on a store nothing has open: it holds the exclusive writer lock throughout
//!   (`StoreLocked` otherwise), a dry run too, so that what it reports is what it would do.
//! - Nothing is deleted and nothing is dropped without the report: before the first change,
//!   every file it will write is copied and every file it removes is moved into
//!   `<store>/repair/<unix ms>/` (same relative paths), and `report.json` there lists the
//!   damage and every message lost (topic, queue, queue offset, commit-log offset, ids).
//! - A dry run changes no byte: it returns the same report, without `kept_aside`.
//!
//! Crash behaviour: the order is copies and report (fsynced), derived files moved aside,
//! checkpoint reset, then the log writes (fsynced). A crash at any point leaves a store whose
//! next open either works or reports the damage again; running the repair again finishes it.

pub mod filler;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::checkpoint::{Checkpoint, CheckpointData};
use crate::error::{Error, Result};
use crate::lock::StoreLock;
use crate::message::codec::RecordView;
use crate::util::fs;
use crate::verify::log::LogScan;
use crate::verify::{self, AffectedMessage, Damage, DamageKind};

const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;
/// Derived files, under the store root, moved aside for the next open to rebuild.
const DERIVED: [&str; 3] = ["consumequeue", "queues.clean", "index"];

/// What a repair does with damaged commit-log records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepairMode {
    /// End the log at the first damage: everything after it is lost.
    Cut,
    /// Overwrite each damaged span with filler; everything else keeps its offset.
    Skip,
}

/// What a repair did (or, in a dry run, would do).
#[derive(Debug, Clone, Serialize)]
pub struct RepairReport {
    /// The store's root.
    pub store: String,
    /// The mode.
    pub mode: RepairMode,
    /// True for a dry run (nothing was changed).
    pub dry_run: bool,
    /// True when the store was (or would be) changed.
    pub changed: bool,
    /// The damage verification found.
    pub damage: Vec<Damage>,
    /// Every message lost, in commit-log order.
    pub lost: Vec<AffectedMessage>,
    /// What was (or would be) done, step by step.
    pub actions: Vec<String>,
    /// Where the changed and removed files were kept (`None` in a dry run or without change).
    pub kept_aside: Option<String>,
    /// The report's JSON copy (`<kept_aside>/report.json`).
    pub report_file: Option<String>,
    /// End of the valid log before the repair.
    pub log_end_before: u64,
    /// End of the log after it.
    pub log_end_after: u64,
}

/// One write into a commit-log file.
#[derive(Debug)]
struct Patch {
    path: PathBuf,
    at: u64,
    bytes: Vec<u8>,
}

/// What the repair will change.
#[derive(Debug, Default)]
struct Plan {
    patches: Vec<Patch>,
    /// Log files after a cut, moved aside.
    removed: Vec<PathBuf>,
    lost: Vec<AffectedMessage>,
    actions: Vec<String>,
    end: u64,
    /// Where the log is cut, if it is.
    cut: Option<u64>,
}

/// Repairs the store at `root` (see the module's description).
///
/// # Errors
/// `InvalidArgument` when `root` is not a store, or a damaged span is too short for a filler
/// (use `Cut`); `StoreLocked` when a process has the store open; I/O failures.
pub fn repair(root: &Path, mode: RepairMode, dry_run: bool) -> Result<RepairReport> {
    verify::check_store_dir(root)?;
    let _lock = StoreLock::acquire(root, None, FILE_MODE, &mut || false)?;
    let (report, log) = verify::run(root, &mut |_, _| Ok(()))?;
    let plan = plan(&log, &report.damage, mode)?;
    let changed = !report.damage.is_empty();
    let mut out = RepairReport {
        store: root.to_string_lossy().into_owned(),
        mode,
        dry_run,
        changed,
        damage: report.damage,
        lost: plan.lost,
        actions: plan.actions,
        kept_aside: None,
        report_file: None,
        log_end_before: report.log_end,
        log_end_after: plan.end,
    };
    if !changed {
        out.actions.push("nothing to repair".into());
        return Ok(out);
    }
    let derived: Vec<&str> = DERIVED
        .iter()
        .copied()
        .filter(|n| fs::entry_exists(&root.join(n)))
        .collect();
    for n in &derived {
        out.actions.push(format!(
            "move {n} aside; the next open rebuilds it from the log"
        ));
    }
    out.actions.push(format!(
        "reset the checkpoint: durable end {}, dispatch from {}",
        plan.end.min(report.durable_end),
        log.min
    ));
    if dry_run {
        return Ok(out);
    }
    // A fresh directory: an earlier repair's copies are never written over.
    let ms = unix_ms();
    let mut aside = root.join("repair").join(ms.to_string());
    let mut n = 0;
    while fs::entry_exists(&aside) {
        n += 1;
        aside = root.join("repair").join(format!("{ms}-{n}"));
    }
    fs::create_dir_all(&aside.join("commitlog"), DIR_MODE)?;
    out.kept_aside = Some(aside.to_string_lossy().into_owned());
    out.report_file = Some(aside.join("report.json").to_string_lossy().into_owned());
    // Copies and the report first: from here on nothing is lost without them.
    let mut copied: Vec<&Path> = Vec::new();
    for p in &plan.patches {
        if !copied.contains(&p.path.as_path()) {
            copy_aside(&p.path, &aside.join("commitlog"))?;
            copied.push(&p.path);
        }
    }
    if fs::entry_exists(&root.join("checkpoint")) {
        copy_aside(&root.join("checkpoint"), &aside)?;
    }
    let json = serde_json::to_vec_pretty(&out).map_err(|e| Error::InvalidArgument {
        field: "report",
        reason: e.to_string(),
    })?;
    fs::stage(&aside.join("report.json"), &json, FILE_MODE)?.replace(false)?;
    fs::fsync_dir(&aside.join("commitlog"))?;
    fs::fsync_dir(&aside)?;
    for n in &derived {
        fs::rename(&root.join(n), &aside.join(n))?;
    }
    for p in &plan.removed {
        if let Some(name) = p.file_name() {
            fs::rename(p, &aside.join("commitlog").join(name))?;
        }
    }
    fs::fsync_dir(&root.join("commitlog"))?;
    fs::fsync_dir(root)?;
    let (cp, old) = Checkpoint::open(&root.join("checkpoint"), true, FILE_MODE)?;
    let old = old.unwrap_or_default();
    cp.reset(
        CheckpointData {
            confirm_phy_offset: plan.end.min(report.durable_end),
            logics_dispatched_offset: log.min,
            ..old
        },
        Vec::new(),
    )?;
    cp.close();
    for p in &plan.patches {
        let f = fs::reopen(&p.path, true)?;
        f.write_all_at(&p.bytes, p.at)
            .map_err(|e| Error::io("write", &p.path, e))?;
        fs::sync_data(&f, &p.path)?;
    }
    Ok(out)
}

/// The changes for `mode`.
fn plan(log: &LogScan, damage: &[Damage], mode: RepairMode) -> Result<Plan> {
    let mut plan = Plan {
        end: log.end,
        ..Plan::default()
    };
    let log_damage: Vec<&Damage> = damage
        .iter()
        .filter(|d| {
            matches!(
                d.kind,
                DamageKind::LogRecord | DamageKind::LogZeroed | DamageKind::LogShort
            )
        })
        .collect();
    for (i, d) in log_damage.iter().enumerate() {
        let cut = mode == RepairMode::Cut || d.kind == DamageKind::LogShort || d.offset >= log.end;
        if cut {
            // Every damaged span from here on goes with the cut.
            for later in log_damage.get(i..).unwrap_or(&[]) {
                plan.lost.extend(later.messages.iter().cloned());
            }
            cut_at(log, d.offset, &mut plan);
            break;
        }
        plan.lost.extend(d.messages.iter().cloned());
        fill(log, d, &mut plan)?;
    }
    plan.lost
        .retain(|m| m.topic.as_deref() != Some(filler::FILLER_TOPIC));
    plan.lost.sort_by_key(|m| m.commit_log_offset);
    plan.lost.dedup_by_key(|m| m.commit_log_offset);
    if let Some(at) = plan.cut {
        let after = plan.lost.partition_point(|m| m.commit_log_offset < at);
        let shortened = shortened_queues(plan.lost.get(after..).unwrap_or(&[]));
        plan.actions.extend(shortened);
    }
    Ok(plan)
}

/// After a cut, each queue that loses its tail: its next messages take the lost queue offsets
/// again, so offsets committed past its new end (consumer groups, the timer engine's progress
/// for the timer topic) would skip them until reset.
fn shortened_queues(lost: &[AffectedMessage]) -> Vec<String> {
    let mut ends: std::collections::BTreeMap<(&str, u32), (u64, u64)> = Default::default();
    for m in lost {
        if let (Some(t), Some(q), Some(o)) = (m.topic.as_deref(), m.queue_id, m.queue_offset) {
            let e = ends.entry((t, q)).or_insert((o, o));
            e.0 = e.0.min(o);
            e.1 = e.1.max(o);
        }
    }
    ends.into_iter()
        .map(|((t, q), (from, to))| {
            format!(
                "queue {t}:{q} now ends at offset {from} (it held up to {to}): new messages \
                 take offsets {from}.. again; reset consumer offsets committed past {from}"
            )
        })
        .collect()
}

/// Ends the log at `at`: zeros to the end of its file, later files moved aside, every whole
/// record from `at` on lost.
fn cut_at(log: &LogScan, at: u64, plan: &mut Plan) {
    plan.end = at;
    plan.cut = Some(at);
    for r in log.records_from(at) {
        let topic = log.topics.get(r.topic as usize).cloned();
        if topic.as_deref() == Some(filler::FILLER_TOPIC) {
            continue;
        }
        let mut m = AffectedMessage {
            size: Some(r.size),
            topic,
            queue_id: Some(r.queue_id),
            queue_offset: r.dispatched.then_some(r.queue_offset),
            ..verify::affected(r.offset)
        };
        verify::enrich(log, &mut m);
        plan.lost.push(m);
    }
    if let Some(f) = log.file_of(at) {
        let local = at - f.start;
        plan.patches.push(Patch {
            path: f.path.clone(),
            at: local,
            bytes: vec![0u8; (f.len - local) as usize],
        });
        plan.actions.push(format!(
            "cut the log at {at}: zero {} from byte {local} to its end",
            f.path.display()
        ));
    }
    for f in log.files.iter().filter(|f| f.start > at) {
        plan.removed.push(f.path.clone());
        plan.actions
            .push(format!("move {} aside (after the cut)", f.path.display()));
    }
}

/// Overwrites the damaged span `d` with filler (FORMAT.md §1.7).
fn fill(log: &LogScan, d: &Damage, plan: &mut Plan) -> Result<()> {
    let (from, to) = (d.offset, d.offset + d.length);
    for f in log
        .files
        .iter()
        .filter(|f| f.start + f.len > from && f.start < to)
    {
        let local = from.max(f.start) - f.start;
        let (bytes, what) = if to < f.start + f.len {
            let ts = store_timestamp_before(log, from);
            let len = (to - from.max(f.start)) as usize;
            (
                filler::record(from.max(f.start), len, ts)?,
                "a filler record",
            )
        } else {
            (
                filler::end_of_file((f.len - local) as usize),
                "an END_OF_FILE marker",
            )
        };
        plan.actions.push(format!(
            "skip {} bytes at {}: write {what} over {} from byte {local}",
            bytes.len(),
            f.start + local,
            f.path.display()
        ));
        plan.patches.push(Patch {
            path: f.path.clone(),
            at: local,
            bytes,
        });
    }
    Ok(())
}

/// The store timestamp of the last whole record before `at` (0 when there is none).
fn store_timestamp_before(log: &LogScan, at: u64) -> i64 {
    let i = log.records.partition_point(|r| r.offset < at);
    let Some(r) = i.checked_sub(1).and_then(|i| log.records.get(i)) else {
        return 0;
    };
    log.read_at(r.offset, r.size as usize)
        .and_then(|b| {
            RecordView::parse(&b, false)
                .ok()
                .map(|v| v.store_timestamp())
        })
        .unwrap_or(0)
}

fn copy_aside(path: &Path, dir: &Path) -> Result<()> {
    let Some(name) = path.file_name() else {
        return Ok(());
    };
    let to = dir.join(name);
    std::fs::copy(path, &to).map_err(|e| Error::io("copy", &to, e))?;
    fs::sync_file(&fs::open_ro(&to)?, &to)
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}
