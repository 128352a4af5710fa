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
//! (op records, listing), deliver.rs (the copies), state.rs (the table), record.rs (the
//! records; FORMAT.md §20). Design and failure matrix: docs/transactions.md.
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
//!   caller's id makes commit idempotent); the other way is `TxnConflict`.
//!
//! Crash behaviour: a half, a decision or a check is whole in the log or absent. A half without
//! a decision stays open until a commit, a rollback, or the checks decide it; a decision
//! without all its copies gets them at the next gate holder's pass. The table lives in memory
//! only: the first call of a process walks the log from its first record.

mod decide;
mod deliver;
mod prepare;
pub mod record;
pub mod state;

use std::sync::Mutex;

use self::state::Table;
use super::timer::gate::Gate;
use super::Store;
use crate::error::{Error, Result};

/// What the store keeps for transactions: the gate and the table.
#[derive(Debug)]
pub(in crate::store) struct Txns {
    gate: Gate,
    table: Mutex<Table>,
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
        })
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
        let log = &self.inner.commit_log;
        log.follow_shared()?;
        table.walk(log, log.max_offset());
        f(self, &mut table)
    }
}
