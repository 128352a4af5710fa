//! Transactional messages (RocketMQ's half messages). A producer prepares one or more halves
//! under a transaction id (`Store::txn_prepare`); they are stored in `RMQ_SYS_TRANS_HALF_TOPIC`
//! queue 0 with `REAL_TOPIC`, `REAL_QID`, `TRAN_MSG`, `PGROUP` and `__transactionId__`, and
//! reach no consume queue of their real topic. One op record in `RMQ_SYS_TRANS_OP_HALF_TOPIC`
//! decides any number of transactions at once, and may set a caller's progress value
//! (`Store::txn_end`): a commit, then its halves are re-put to their real topics, each copy
//! carrying the COMMIT transaction type and its half's offset as `prepared_transaction_offset`;
//! a rollback writes nothing else. The group's checkers claim the transactions left open too
//! long (`Store::txn_claim_checks`), each claim one check record; past the maximum the halves
//! are copied to `TRANS_CHECK_MAX_TIME_TOPIC` instead. Files: prepare.rs (halves), decide.rs
//! (op records, listing), deliver.rs (the copies), state.rs (the table), snapshot.rs (the
//! table's file), record.rs (the records; FORMAT.md §20). Design and failure matrix:
//! docs/transactions.md.
//!
//! Invariants
//! - Every change (a half, a decision, a check) is made under the gate (`TXN_BYTE`): the
//!   holder walks the log to its end (state.rs), checks, appends, and lets go, so what it
//!   checked stays true until its record is in the log.
//! - A decision is one append; the re-puts follow it. The table knows which halves of a
//!   decided transaction have no copy yet (`undelivered`), and every decision, check pass and
//!   listing makes those copies before it lets the gate go: a crash between the decision and
//!   its copies loses nothing and duplicates nothing (a copy names its half).
//! - Deciding a transaction the way it is already decided writes nothing and succeeds (the
//!   caller's id makes commit idempotent); the other way is `TxnConflict`. A transaction
//!   evicted from the table (decided, and its halves deleted by retention) is unknown.
//! - Retention keeps every file from the table's floor on (`Txns::floor`): the halves of open
//!   transactions and of decided ones without their copies.
//!
//! Crash behaviour: a half, a decision or a check is whole in the log or absent. A half without
//! a decision stays open until a commit, a rollback, or the checks decide it; a decision
//! without all its copies gets them at the next gate holder's pass. The first call of a process
//! loads the snapshot (snapshot.rs; ignored when untrustworthy) and walks the log from its
//! offset.

mod decide;
mod deliver;
mod prepare;
pub mod record;
pub mod snapshot;
pub mod state;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use self::state::Table;
use super::timer::gate::Gate;
use super::Store;
use crate::commit_log::CommitLog;
use crate::error::{Error, Result};

/// A snapshot is written at the checkpoint cadence when a transaction record was applied since
/// the last one, or the walk has gone this far past it (bounding a first call's walk); and the
/// flush thread, retention and close walk at most this much per turn (a long log never walked
/// is caught up in the background, never in one long stall).
const SNAPSHOT_STRIDE: u64 = 64 << 20;

/// Bytes of records appended in one piece at most (halves, copies): a piece sits in one
/// commit-log file.
const BATCH_BYTES: usize = 4 << 20;
/// More than a record's fixed fields take (FORMAT.md §1), for sizing the pieces.
const RECORD_OVERHEAD: usize = 128;

/// `msgs` cut into consecutive pieces of at most `BATCH_BYTES` and half of a commit-log file
/// of `file_size` bytes, each appended in one piece (a record alone may exceed the limit: its
/// size was checked against the file's).
fn pieces(msgs: &[crate::message::MessageRef<'_>], file_size: u64) -> Vec<std::ops::Range<usize>> {
    let limit = BATCH_BYTES.min(usize::try_from(file_size / 2).unwrap_or(usize::MAX));
    let mut out = Vec::new();
    let (mut from, mut bytes) = (0, 0);
    for (i, m) in msgs.iter().enumerate() {
        let len = RECORD_OVERHEAD + m.topic.len() + m.body.len() + m.properties.len();
        if i > from && bytes + len > limit {
            out.push(from..i);
            (from, bytes) = (i, 0);
        }
        bytes += len;
    }
    if from < msgs.len() {
        out.push(from..msgs.len());
    }
    out
}

/// What the store keeps for transactions: the gate, the table and the table's file.
#[derive(Debug)]
pub(in crate::store) struct Txns {
    gate: Gate,
    table: Mutex<Table>,
    /// `config/transactions.json` (`None`: an in-memory store).
    path: Option<PathBuf>,
    file_mode: u32,
    /// The last floor computed under the gate (0: none yet, keep everything). It stays a safe
    /// floor: a half appended since lies past the walk it was computed from.
    last_floor: AtomicU64,
}

/// Whether a snapshot write may wait for the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Wait {
    /// Close: wait.
    Yes,
    /// The flush thread: a gate holder may be waiting for this very thread's flush, so skip
    /// this turn when the gate is taken.
    No,
}

impl Txns {
    pub(in crate::store) fn new(
        config: &crate::config::StoreConfig,
        root: Option<&std::path::Path>,
    ) -> Result<Self> {
        Ok(Txns {
            gate: Gate::new(
                root,
                config.shared_writers,
                config.file_mode,
                crate::lock::TXN_BYTE,
            )?,
            table: Mutex::new(Table::default()),
            path: root.map(|r| r.join("config").join(snapshot::FILE)),
            file_mode: config.file_mode,
            last_floor: AtomicU64::new(0),
        })
    }

    /// Loads the snapshot into a table not loaded yet, then walks it to the log's end (with a
    /// `budget`, about that many bytes at most: the rest is for a later call) and drops what
    /// retention made obsolete. The caller holds the gate.
    fn catch_up(&self, table: &mut Table, log: &CommitLog, budget: Option<u64>) -> Result<()> {
        log.follow_shared()?;
        if !table.loaded {
            if let Some(path) = &self.path {
                if let Some(t) = snapshot::load(path, log.max_offset())? {
                    *table = t;
                    table.persisted_to = table.walked_to;
                }
            }
            table.loaded = true;
        }
        let from = table.walked_to.max(log.min_offset());
        let end = budget.map_or(u64::MAX, |b| from.saturating_add(b));
        table.walk(log, log.max_offset().min(end));
        table.evict(log.min_offset());
        Ok(())
    }

    /// Walks the table on (at most `SNAPSHOT_STRIDE`) and writes its snapshot when a
    /// transaction record was walked since the last one, or the walk moved a stride; `flush`
    /// makes the log durable and returns the offset it is durable through. Skipped when the
    /// gate is taken and `wait` is `No`, and at a close that never walked the table.
    ///
    /// # Errors
    /// The walk's, the flush's or the write's failure.
    pub(in crate::store) fn persist(
        &self,
        log: &CommitLog,
        wait: Wait,
        flush: impl FnOnce() -> Result<u64>,
    ) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let _held = match wait {
            Wait::Yes => self.gate.take()?,
            Wait::No => match self.gate.try_take()? {
                Some(h) => h,
                None => return Ok(()),
            },
        };
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if wait == Wait::Yes && !table.loaded {
            // Close of a process that never looked at transactions (nor ran a checkpoint turn
            // or a retention pass since its open): it has nothing to add to the snapshot.
            return Ok(());
        }
        self.catch_up(&mut table, log, Some(SNAPSHOT_STRIDE))?;
        // A store without transactions gets a snapshot only every stride: its closes and
        // checkpoints stay free of the file's write and syncs.
        let due =
            table.dirty || table.walked_to.saturating_sub(table.persisted_to) >= SNAPSHOT_STRIDE;
        if !due {
            return Ok(());
        }
        // Durable through the snapshot's offset first: it must never reflect a record that a
        // crash can cut.
        if log.flushed_offset() < table.walked_to && flush()? < table.walked_to {
            return Ok(());
        }
        snapshot::store(path, &table, self.file_mode)?;
        table.persisted_to = table.walked_to;
        table.dirty = false;
        Ok(())
    }

    /// The commit-log offset from which retention must keep every file (see `Table::floor`).
    /// Never waits for the gate (its holder may wait for a flush of the thread that asks):
    /// when it is taken, or the table cannot be brought up to date, the last floor computed.
    pub(in crate::store) fn floor(&self, log: &CommitLog) -> u64 {
        let last = self.last_floor.load(Ordering::Acquire);
        let Ok(Some(_held)) = self.gate.try_take() else {
            return last;
        };
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if self
            .catch_up(&mut table, log, Some(SNAPSHOT_STRIDE))
            .is_err()
        {
            return last;
        }
        let floor = table.floor(log.min_offset());
        self.last_floor.store(floor, Ordering::Release);
        floor
    }

    /// Store close: the gate's descriptor goes.
    pub(in crate::store) fn release(&self) {
        self.gate.release();
    }
}

/// One transaction as `Store::txn_list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnInfo {
    /// Id.
    pub id: String,
    /// Producer group.
    pub group: String,
    /// State name (`open`, `committed`, `rolled back`, `discarded`).
    pub state: &'static str,
    /// Commit-log offsets of its halves.
    pub halves: Vec<u64>,
    /// Checker calls recorded.
    pub checks: u32,
    /// Store time of its first half (ms).
    pub first_ms: i64,
    /// Its age by the store's clock when listed (ms).
    pub age_ms: i64,
}

/// Limits of one claim of checks (`Store::txn_claim_checks`).
#[derive(Debug, Clone, Copy)]
pub struct CheckPolicy {
    /// A transaction is checked once its first half is this old (ms; RocketMQ: 6000).
    pub timeout_ms: i64,
    /// And no sooner than this after its last check (ms).
    pub interval_ms: i64,
    /// After this many checks it is discarded (RocketMQ: 15).
    pub max_checks: u32,
    /// Claim at most this many.
    pub limit: usize,
}

impl Store {
    pub(super) fn txns(&self) -> Result<&Txns> {
        self.check_writable()?;
        self.inner.txns.as_deref().ok_or(Error::ReadOnly)
    }

    /// Holds the gate, walks the log to its end and runs `f` on the table.
    pub(super) fn with_table<R>(
        &self,
        f: impl FnOnce(&Store, &mut Table) -> Result<R>,
    ) -> Result<R> {
        let txns = self.txns()?;
        let _held = txns.gate.take()?;
        let mut table = txns.table.lock().unwrap_or_else(|p| p.into_inner());
        txns.catch_up(&mut table, &self.inner.commit_log, None)?;
        f(self, &mut table)
    }
}
