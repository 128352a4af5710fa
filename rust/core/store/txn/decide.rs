//! Decisions: a commit or rollback of any number of transactions with a progress value, the
//! claims of checks and the discards past the maximum, each one op record appended under the
//! gate; and what the table says (the listing, the progress values).

use super::record::{self, Op, OpRecord};
use super::state::{Status, Table};
use super::{CheckPolicy, TxnInfo};
use crate::error::{Error, Result};
use crate::message::{validate, MessageRef};
use crate::store::Store;
use crate::util::kill_point::kill_point;

impl Store {
    /// Decides transactions `ids` (commit when `commit`, else roll back) and sets progress
    /// `key = value` when given, in one append; then re-puts every committed half. Returns
    /// whether anything was appended: deciding an id the way it is already decided, with the
    /// same progress, writes nothing.
    ///
    /// # Errors
    /// `TxnUnknown` for an id never prepared (before any conflict), `TxnConflict` for one
    /// decided the other way,
    /// `InvalidArgument` for no id and no progress, or a bad id, key or value. Nothing is
    /// written then.
    pub fn txn_end(
        &self,
        ids: &[&str],
        commit: bool,
        progress: Option<(&str, &str)>,
    ) -> Result<bool> {
        for id in ids {
            record::check_text("transaction id", id, false)?;
        }
        if let Some((k, v)) = progress {
            record::check_text("progress key", k, false)?;
            record::check_text("progress value", v, true)?;
        }
        if ids.is_empty() && progress.is_none() {
            return Err(Error::InvalidArgument {
                field: "transaction ids",
                reason: "no transaction and no progress given".into(),
            });
        }
        let (want, asked) = match commit {
            true => (Status::Committed, "commit"),
            false => (Status::RolledBack, "roll back"),
        };
        self.with_table(|store, table| {
            // Every id must exist before any is looked at for its state: an unknown id is
            // reported before a conflict, whatever the order of the list.
            if let Some(id) = ids.iter().find(|id| !table.txns.contains_key(**id)) {
                return Err(Error::TxnUnknown {
                    id: (*id).to_owned(),
                });
            }
            let mut open: Vec<&str> = Vec::with_capacity(ids.len());
            for (id, t) in ids
                .iter()
                .filter_map(|id| table.txns.get(*id).map(|t| (id, t)))
            {
                match t.status {
                    Status::Open if !open.contains(id) => open.push(id),
                    Status::Open => {}
                    s if s == want => {}
                    s => {
                        return Err(Error::TxnConflict {
                            id: (*id).to_owned(),
                            state: s.name(),
                            asked,
                        })
                    }
                }
            }
            let same_progress =
                progress.is_none_or(|(k, v)| table.progress.get(k).is_some_and(|p| p == v));
            let written = !open.is_empty() || !same_progress;
            if written {
                let op = if commit { Op::Commit } else { Op::Rollback };
                store.append_op(table, op, &open, progress)?;
                kill_point!("txn.decided");
            }
            store.deliver(table)?;
            Ok(written)
        })
    }

    /// Appends the op record deciding `ids` and applies it to `table`.
    pub(super) fn append_op(
        &self,
        table: &mut Table,
        op: Op,
        ids: &[&str],
        progress: Option<(&str, &str)>,
    ) -> Result<()> {
        let rec = OpRecord {
            op,
            ids: ids.to_vec(),
            progress,
        };
        let body = record::op_body(
            op,
            ids.iter()
                .filter_map(|id| table.txns.get(*id))
                .flat_map(|t| t.half_queue_offsets.iter().copied()),
        );
        let props = rec.encode(op != Op::Check && body.last() == Some(&b','));
        let msg = MessageRef::new(record::OP_TOPIC, 0, &body).with_properties(&props);
        let put = self.put_internal(&msg)?;
        let end = put.appended.physical_offset + u64::from(put.appended.size);
        table.walk(&self.inner.commit_log, end);
        Ok(())
    }

    /// Claims the transactions of producer `group` due for a check by `policy`: each claimed
    /// one gets one check record (its check count + 1) before this returns its id and first
    /// half offset; one past `policy.max_checks` is discarded instead (its halves copied to
    /// `TRANS_CHECK_MAX_TIME_TOPIC`). Also re-puts whatever a crash left undelivered.
    ///
    /// # Errors
    /// `InvalidGroup`; I/O failures.
    pub fn txn_claim_checks(&self, group: &str, policy: CheckPolicy) -> Result<Vec<(String, u64)>> {
        validate::check_group(group)?;
        let now = self.inner.config.clock.now_ms();
        self.with_table(|store, table| {
            let mut claim: Vec<(String, u64)> = Vec::new();
            let mut discard: Vec<String> = Vec::new();
            for (id, t) in &table.txns {
                if t.status != Status::Open || t.group != group {
                    continue;
                }
                let since = if t.last_check_ms == 0 {
                    policy.timeout_ms
                } else {
                    policy.interval_ms
                };
                let last = t.last_check_ms.max(t.first_ms);
                if now.saturating_sub(last) < since {
                    continue;
                }
                if t.checks >= policy.max_checks {
                    discard.push(id.clone());
                } else if claim.len() < policy.limit {
                    claim.push((id.clone(), t.halves.first().copied().unwrap_or(0)));
                }
            }
            claim.sort();
            if !discard.is_empty() {
                let ids: Vec<&str> = discard.iter().map(String::as_str).collect();
                store.append_op(table, Op::Discard, &ids, None)?;
            }
            if !claim.is_empty() {
                let ids: Vec<&str> = claim.iter().map(|(i, _)| i.as_str()).collect();
                store.append_op(table, Op::Check, &ids, None)?;
            }
            store.deliver(table)?;
            if !claim.is_empty() {
                kill_point!("txn.check_claimed");
            }
            Ok(claim)
        })
    }

    /// The transactions of `group` (every group when `None`) in state `open`, or in every
    /// state when `all`, oldest first (by first half time, then in log order).
    ///
    /// # Errors
    /// As `txn_claim_checks`.
    pub fn txn_list(&self, group: Option<&str>, all: bool) -> Result<Vec<TxnInfo>> {
        let now = self.inner.config.clock.now_ms();
        self.with_table(|store, table| {
            store.deliver(table)?;
            let mut out: Vec<TxnInfo> = table
                .txns
                .iter()
                .filter(|(_, t)| all || t.status == Status::Open)
                .filter(|(_, t)| group.is_none_or(|g| g == t.group))
                .map(|(id, t)| TxnInfo {
                    id: id.clone(),
                    group: t.group.clone(),
                    state: t.status.name(),
                    halves: t.halves.clone(),
                    checks: t.checks,
                    first_ms: t.first_ms,
                    age_ms: now.saturating_sub(t.first_ms).max(0),
                })
                .collect();
            // Oldest first: by first half time, then (within one millisecond) in log order.
            out.sort_by_key(|t| (t.first_ms, t.halves.first().copied(), t.id.clone()));
            Ok(out)
        })
    }

    /// The progress value last set under `key` (`txn_end`), if any.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad key; as `txn_claim_checks`.
    pub fn txn_progress(&self, key: &str) -> Result<Option<String>> {
        record::check_text("progress key", key, false)?;
        self.with_table(|_, table| Ok(table.progress.get(key).cloned()))
    }
}
