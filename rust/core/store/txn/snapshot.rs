//! `config/transactions.json` (FORMAT.md §20.1): the transaction table as it stood at one
//! commit-log offset, so that a process's first transaction call walks the log from there
//! instead of from its first record.
//!
//! Invariants
//! - The table it holds is exactly what a walk of the log below `commitLogOffset` gives (from a
//!   previous snapshot, or from the log's first record), and the log is durable through that
//!   offset before the file is written: a snapshot never reflects a record a crash can cut.
//! - Written only under the transactions' gate, with the table walked to the offset it names,
//!   by the process that runs services (the leader of shared writers) at the checkpoint
//!   cadence, and at close; replaced atomically (tmp, fsync, rename) with the previous one kept
//!   as `.bak`.
//!
//! Crash behaviour: a crash leaves the previous file or the new one whole. A reader trusts a
//! file only if it decodes and its offset is at or below the recovered end of the log (a tail
//! cut after the snapshot, or a different log, makes it untrustworthy); otherwise it tries the
//! `.bak` under the same rules, then walks from the log's first record. Nothing is lost by
//! ignoring a file but the walk's time, and the progress values set by op records retention
//! has since deleted.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::state::{Dest, Status, Table, Txn};
use crate::error::{Error, Result};
use crate::util::fs;
use crate::util::kill_point::kill_point;

/// File name, under `config/`.
pub const FILE: &str = "transactions.json";

/// Format version this code writes and reads.
pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Doc {
    version: u32,
    commit_log_offset: u64,
    transactions: Vec<Entry>,
    /// `[half-topic queue offset, id]` of open transactions (RocketMQ's op records name these).
    queue_offsets: Vec<(u64, String)>,
    /// `[half offset, "real" | "maxTime"]`: decided halves without their copy yet.
    undelivered: Vec<(u64, String)>,
    /// `[key, value]`.
    progress: Vec<(String, String)>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    id: String,
    group: String,
    state: String,
    /// `[commit-log offset, half-topic queue offset]` of each half, in log order.
    halves: Vec<(u64, u64)>,
    checks: u32,
    first_ms: i64,
    last_check_ms: i64,
}

fn state_name(s: Status) -> &'static str {
    match s {
        Status::Open => "open",
        Status::Committed => "committed",
        Status::RolledBack => "rolledBack",
        Status::Discarded => "discarded",
        Status::Foreign => "foreign",
    }
}

fn parse_state(s: &str) -> Option<Status> {
    Some(match s {
        "open" => Status::Open,
        "committed" => Status::Committed,
        "rolledBack" => Status::RolledBack,
        "discarded" => Status::Discarded,
        "foreign" => Status::Foreign,
        _ => return None,
    })
}

/// The file's text for `table`, walked to `table.walked_to` (sorted: the same table always
/// gives the same bytes).
pub fn encode(table: &Table) -> String {
    let mut transactions: Vec<Entry> = table
        .txns
        .iter()
        .map(|(id, t)| Entry {
            id: id.clone(),
            group: t.group.clone(),
            state: state_name(t.status).to_owned(),
            halves: t
                .halves
                .iter()
                .copied()
                .zip(t.half_queue_offsets.iter().copied())
                .collect(),
            checks: t.checks,
            first_ms: t.first_ms,
            last_check_ms: t.last_check_ms,
        })
        .collect();
    transactions.sort_by(|a, b| a.id.cmp(&b.id));
    let mut queue_offsets: Vec<(u64, String)> = table
        .by_queue_offset
        .iter()
        .map(|(q, id)| (*q, id.clone()))
        .collect();
    queue_offsets.sort();
    let mut progress: Vec<(String, String)> = table
        .progress
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    progress.sort();
    let doc = Doc {
        version: VERSION,
        commit_log_offset: table.walked_to,
        transactions,
        queue_offsets,
        undelivered: table
            .undelivered
            .iter()
            .map(|(h, d)| {
                let d = match d {
                    Dest::Real => "real",
                    Dest::MaxTime => "maxTime",
                };
                (*h, d.to_owned())
            })
            .collect(),
        progress,
    };
    // Serialising plain strings and integers cannot fail.
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// The table `bytes` (the content of `path`) holds, walked to its `commitLogOffset`.
///
/// # Errors
/// `ConfigFile` when it does not decode, names an unknown version, state or destination, or
/// gives a transaction halves of unequal counts.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<Table> {
    let bad = |field: &str, reason: String| Error::ConfigFile {
        path: path.to_path_buf(),
        field: field.to_owned(),
        reason,
    };
    let doc: Doc = serde_json::from_slice(bytes).map_err(|e| bad("", e.to_string()))?;
    if doc.version != VERSION {
        return Err(bad("version", format!("{} is not {VERSION}", doc.version)));
    }
    let mut txns = HashMap::with_capacity(doc.transactions.len());
    for e in doc.transactions {
        let status = parse_state(&e.state)
            .ok_or_else(|| bad("transactions.state", format!("{:?} is unknown", e.state)))?;
        let (halves, half_queue_offsets) = e.halves.into_iter().unzip();
        let txn = Txn {
            group: e.group,
            halves,
            half_queue_offsets,
            status,
            checks: e.checks,
            first_ms: e.first_ms,
            last_check_ms: e.last_check_ms,
        };
        if txns.insert(e.id, txn).is_some() {
            return Err(bad("transactions.id", "an id is listed twice".into()));
        }
    }
    let mut undelivered = BTreeMap::new();
    for (h, d) in doc.undelivered {
        let d = match d.as_str() {
            "real" => Dest::Real,
            "maxTime" => Dest::MaxTime,
            _ => return Err(bad("undelivered", format!("{d:?} is unknown"))),
        };
        undelivered.insert(h, d);
    }
    Ok(Table {
        txns,
        progress: doc.progress.into_iter().collect(),
        undelivered,
        by_queue_offset: doc.queue_offsets.into_iter().collect(),
        walked_to: doc.commit_log_offset,
        ..Table::default()
    })
}

/// The newest trustworthy snapshot at `path` (or its `.bak`) for a log that ends at `log_end`:
/// one that decodes and whose offset is not past `log_end`. `None` when there is none.
///
/// # Errors
/// I/O failures reading the files (an undecodable file is no error: it is skipped).
pub fn load(path: &Path, log_end: u64) -> Result<Option<Table>> {
    for p in [path.to_path_buf(), fs::backup_path(path)] {
        let Some(bytes) = fs::read_if_exists(&p)? else {
            continue;
        };
        match decode(&p, &bytes) {
            Ok(t) if t.walked_to <= log_end => return Ok(Some(t)),
            _ => {}
        }
    }
    Ok(None)
}

/// Writes `table` to `path` atomically, the previous file kept as `.bak`.
///
/// # Errors
/// I/O failures (the previous file is then unchanged).
pub fn store(path: &Path, table: &Table, mode: u32) -> Result<()> {
    let staged = fs::stage(path, encode(table).as_bytes(), mode)?;
    kill_point!("txn.snapshot_before_rename");
    staged.replace(true)
}
