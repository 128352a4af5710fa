//! Startup orchestration: lock, detect an abnormal shutdown, recover the commit log and every
//! registered derived store (dispatch/derived.rs), and choose where dispatch resumes for each.
//!
//! Order (the lock comes before anything touches a file):
//! 1. take the writer lock; note whether the abort marker exists (abnormal shutdown);
//! 2. read the checkpoint (mqlite's, or else RocketMQ's fields); load commit-log files;
//! 3. scan the commit log with CRC from a durable record boundary,
//!    `min(checkpoint dispatched, checkpoint flushed)` (the oldest file without a checkpoint),
//!    changing nothing; then `load` every derived store (consume queues: valid prefix of units
//!    kept, the rest of the last file zeroed after an abnormal shutdown; a queue with a file
//!    shorter than the file size ends before that file and is cut short) and cut the log's
//!    torn tail (zeroed after a crash);
//! 4. `recover` every derived store from its durable progress: the checkpoint's progress table
//!    entry for it, else the checkpoint's dispatched offset (consume queues drop units that
//!    point at or past the recovered end and cut each queue at the first unit written after
//!    the checkpoint that does not index exactly its record, a torn or stale unit; a unit that
//!    does not match is called stale only once the log records up to where it points are
//!    verified, so a damaged record below the scan start is reported, not dropped with it);
//!    when dispatch must resume below the scan start, the records in between are verified
//!    too (`CommitLog::verify_durable`);
//! 5. dispatch resumes for each store where its `recover` said (the critical stores share the
//!    lowest of theirs), re-creating anything missing (dispatch is idempotent), before the
//!    store is handed to the caller. The opener writes those points to the checkpoint before
//!    calling `recovered` (which deletes the files a short file cut off).
//!
//! What may be cut: only a torn tail, above the durable offset. A record is whole when its
//! length, magic, structure and body CRC hold (and its whole-record CRC, when it has the
//! property), whoever wrote it. The durable offset is mqlite's checkpoint's confirm offset.
//! Without an mqlite checkpoint (a store RocketMQ wrote): after a clean shutdown (no abort
//! marker) every byte was flushed, so any invalid record is corruption; after a crash, the
//! durable offset is RocketMQ's confirm offset or the end of the last record stored before
//! RocketMQ's last flush, whichever is higher, and an invalid record that whole records follow
//! is not a tail either. Corruption is a typed error naming the file, the offset and the
//! reason. The scan raises it before any file has been changed; the checks below the scan
//! start (step 4) raise it after only the torn tail and consume-queue units recovery re-creates
//! were touched, never before the unit pointing at the damaged record is cut or a file that a
//! short consume-queue file cut off is deleted, so the next open reports the damage again.

use crate::checkpoint::{CheckpointData, RocketMqCheckpoint, StoreProgress};
use crate::commit_log::CommitLog;
use crate::dispatch::derived::DerivedStores;
use crate::error::{Error, Result};
use crate::shared::Writer;

/// What recovery found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// True if the previous writer did not close cleanly.
    pub abnormal: bool,
    /// Commit-log offset where the scan started.
    pub scanned_from: u64,
    /// Recovered end of the commit log.
    pub end: u64,
    /// Records validated by the scan.
    pub records_scanned: u64,
    /// True if a torn tail was cut.
    pub torn_tail: bool,
    /// Where dispatch resumes for the critical derived stores.
    pub reput_from: u64,
}

/// What recovery found, and where dispatch resumes for each derived store (in registration
/// order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The report.
    pub report: RecoveryReport,
    /// Per derived store: where its dispatch resumes.
    pub starts: Vec<u64>,
}

/// What the checkpoint file told recovery.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpointed {
    /// mqlite's checkpoint, when a slot is valid.
    pub mqlite: Option<CheckpointData>,
    /// The derived stores' progress table of that slot (empty in older checkpoints).
    pub progress: Vec<StoreProgress>,
    /// RocketMQ's fields, when no mqlite slot is valid (a store RocketMQ wrote).
    pub rocketmq: Option<RocketMqCheckpoint>,
}

impl Checkpointed {
    /// The durable progress of the derived store `name`: its table entry, else the dispatched
    /// offset (`None` without an mqlite checkpoint).
    fn progress_of(&self, name: &str) -> Option<u64> {
        let c = self.mqlite?;
        Some(
            self.progress
                .iter()
                .find(|p| p.name == name)
                .map_or(c.logics_dispatched_offset, |p| p.offset),
        )
    }
}

/// `e`, and when it is damage recovery will not cut (`Corrupted`), what the operator does
/// about it: verify, then repair (docs/runbook.md). `root` is the store's directory.
pub fn with_repair_hint(e: Error, root: Option<&std::path::Path>) -> Error {
    match e {
        Error::Corrupted {
            path,
            offset,
            reason,
            cause,
        } => {
            let store = root.map_or_else(|| "<store>".into(), |r| r.display().to_string());
            let hint = format!(
                "the store cannot open until an operator repairs it: `mqlite store verify {store}` \
                 (mqlite.verify) names the damage and the messages affected, `mqlite store repair \
                 {store}` (mqlite.repair) brings the store back; see docs/runbook.md"
            );
            let reason = if reason.is_empty() {
                hint
            } else {
                format!("{reason}; {hint}")
            };
            Error::Corrupted {
                path,
                offset,
                reason,
                cause,
            }
        }
        other => other,
    }
}

/// Recovers the commit log and the derived stores (steps 3 and 4 above); loads the stores.
///
/// # Errors
/// `Corrupted` for damage below the durable offset (nothing was changed then); I/O failures.
pub fn recover(
    commit_log: &CommitLog,
    stores: &DerivedStores,
    checkpointed: &Checkpointed,
    abnormal: bool,
    check_crc: bool,
) -> Result<Recovered> {
    let checkpoint = checkpointed.mqlite;
    let min = commit_log.min_offset();
    let durable = match (checkpoint, checkpointed.rocketmq) {
        (Some(c), _) => c.confirm_phy_offset,
        (None, Some(r)) => r.confirm_phy_offset.unwrap_or(0),
        (None, None) => 0,
    };
    let Some(last) = commit_log.files().try_last_file()? else {
        if durable > 0 {
            return Err(Error::Corrupted {
                path: "commitlog".into(),
                offset: 0,
                reason: format!("no commit-log file, but {durable} bytes were confirmed durable"),
                cause: None,
            });
        }
        // An empty log ends at 0, whatever a file prepared after this reports as published.
        commit_log.set_max_offset(0);
        stores.load(abnormal)?;
        let starts = stores
            .iter()
            .map(|s| s.recover(commit_log, 0, 0))
            .collect::<Result<Vec<_>>>()?;
        return Ok(Recovered {
            report: RecoveryReport {
                abnormal,
                ..Default::default()
            },
            starts,
        });
    };
    // Both kinds of recovery start at the checkpoint's durable, dispatched record boundary
    // (the oldest file without a checkpoint); they differ in what they do with the tail.
    // Starting at the last file instead would be wrong: it may be a preallocated, still empty
    // successor of the file where the data really ends.
    let boundary = match checkpoint {
        Some(c) => c
            .logics_dispatched_offset
            .min(c.confirm_phy_offset)
            .max(min),
        None => min,
    };
    // Scan the whole file holding the boundary (RocketMQ checks its last files too): damage to
    // records of that file below the durable offset is then found and reported, not served.
    let file_size = commit_log.files().file_size();
    let from = (boundary - boundary % file_size).max(min);
    let from = from.min(last.from_offset() + last.size());
    // Below `keep`, an invalid record is corruption. mqlite's checkpoint names exactly what was
    // durable. Without it (a store RocketMQ wrote): after a clean shutdown the whole log, every
    // byte having been flushed; after a crash, what RocketMQ's checkpoint proves flushed.
    let keep = match (checkpoint, checkpointed.rocketmq) {
        (Some(_), _) => durable,
        (None, _) if !abnormal => u64::MAX,
        (None, Some(r)) => durable.max(commit_log.flushed_floor(r.physic_msg_timestamp)),
        (None, None) => durable,
    };
    // mqlite's checkpoint says exactly what was durable: above it, whatever a power cut left
    // is not promised and is cut at the first invalid record. Without it, only a real tail is.
    let tail_only = checkpoint.is_none();
    let scan = commit_log.scan(from, check_crc, keep, tail_only, |_| Ok(()))?;
    if scan.end < durable {
        let file = commit_log.file_at(scan.end).unwrap_or(last);
        return Err(Error::Corrupted {
            path: file.path().to_path_buf(),
            offset: scan.end,
            reason: format!(
                "commit log ends at {} but {durable} bytes were confirmed durable",
                scan.end
            ),
            cause: None,
        });
    }
    // Nothing was changed above this line.
    stores.load(abnormal)?;
    commit_log.truncate_to(scan.end, abnormal || scan.torn)?;
    // Units past a store's durable progress may be torn or stale copies: each store checks
    // them against the log and may resume lower. A queue whose units reach past its resume
    // point shows dispatch got further than the checkpoint says; re-dispatching from the
    // checkpoint is still correct (idempotent).
    let mut starts = Vec::with_capacity(stores.len());
    let mut reput_from: Option<u64> = None;
    for s in stores.iter() {
        let durable = checkpointed.progress_of(s.name()).unwrap_or(min);
        let start = s.recover(commit_log, scan.end, durable.clamp(min, scan.end))?;
        if s.critical() {
            reput_from = Some(reput_from.map_or(start, |r| r.min(start)));
        }
        starts.push(start);
    }
    let reput_from = match checkpoint {
        Some(c) => c.logics_dispatched_offset.clamp(min, scan.end),
        None => min,
    }
    .min(reput_from.unwrap_or(u64::MAX));
    // Dispatch from below the scan start (a queue cut short resumes at its last good unit)
    // reads records the scan did not verify; they are durable, so each must be whole. Checked
    // here, damage is reported by the open instead of being dispatched under a damaged header
    // or stopping dispatch with the queue's end before it.
    if reput_from < from {
        commit_log.verify_durable(reput_from, from)?;
    }
    Ok(Recovered {
        report: RecoveryReport {
            abnormal,
            scanned_from: from,
            end: scan.end,
            records_scanned: scan.records,
            torn_tail: scan.torn,
            reput_from,
        },
        starts,
    })
}

/// Recovery of a later shared writer (`StoreConfig::shared_writers`), holding the shared
/// append lock (`writer`): another process recovered the log when it opened first, and every
/// append since published whole records up to the mapping's `log_end`, so nothing is scanned
/// or cut. The writer continues at `log_end`, and each derived store attaches
/// (`DerivedStore::attach`) and recovers from its durable progress against that end, as step 4
/// above says.
///
/// The consume queues attach lazily: every queue is pending, known by the shared table's next
/// offset, and is loaded and checked at its first use as this recovery would have checked it
/// (consume_queue/store.rs): the open lists the queues' directories and opens no queue file
/// (the dispatch that follows loads the queues of the records past the checkpoint). The
/// first opener after a crash stays eager: it alone may cut the log and the queues, and every
/// queue must be checked against the log it recovered before any other process appends.
///
/// # Errors
/// As `recover`'s step 4.
pub fn attach(
    commit_log: &CommitLog,
    stores: &DerivedStores,
    checkpointed: &Checkpointed,
    writer: &Writer<'_>,
) -> Result<Recovered> {
    let min = commit_log.min_offset();
    let log_end = writer.log_end();
    {
        let mut a = commit_log.lock_appender();
        commit_log.follow_to(&mut a, log_end, true)?;
    }
    // Durable is what the checkpoint proves, never more (other processes' bytes may not be).
    let durable = checkpointed
        .mqlite
        .map_or(0, |c| c.confirm_phy_offset)
        .min(log_end);
    commit_log.set_flushed_offset(durable);
    // Read under the append lock: each queue's next offset as of `log_end`.
    let next_offset = |topic: &str, queue_id: u32| -> Result<Option<u64>> {
        writer
            .find_queue(topic, queue_id)?
            .map(|slot| writer.next_offset(slot))
            .transpose()
    };
    stores.attach(log_end, &next_offset)?;
    let mut starts = Vec::with_capacity(stores.len());
    let mut reput_from: Option<u64> = None;
    for s in stores.iter() {
        let from = checkpointed.progress_of(s.name()).unwrap_or(min);
        let start = s.recover(commit_log, log_end, from.clamp(min, log_end))?;
        if s.critical() {
            reput_from = Some(reput_from.map_or(start, |r| r.min(start)));
        }
        starts.push(start);
    }
    Ok(Recovered {
        report: RecoveryReport {
            abnormal: false,
            scanned_from: log_end,
            end: log_end,
            records_scanned: 0,
            torn_tail: false,
            reput_from: reput_from.unwrap_or(log_end),
        },
        starts,
    })
}
