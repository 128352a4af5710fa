//! Transactional messages (RocketMQ's half messages). A producer prepares one or more halves
//! under a transaction id (`Store::txn_prepare`); they are stored in `RMQ_SYS_TRANS_HALF_TOPIC`
//! queue 0 with `REAL_TOPIC`, `REAL_QID`, `TRAN_MSG`, `PGROUP` and `__transactionId__`, and
//! reach no consume queue of their real topic. One op record in `RMQ_SYS_TRANS_OP_HALF_TOPIC`
//! decides any number of transactions at once, and may set a caller's progress value
//! (`Store::txn_end`): a commit, then its halves are re-put to their real topics, each copy
//! carrying the COMMIT transaction type and its half's offset as `prepared_transaction_offset`;
//! a rollback writes nothing else. The group's checkers claim the transactions left open too
//! long (`Store::txn_claim_checks`), each claim one check record; past the maximum the halves
//! are copied to `TRANS_CHECK_MAX_TIME_TOPIC` instead. Records: record.rs, FORMAT.md §17.
//! Design and failure matrix: docs/transactions.md.
//!
//! Invariants
//! - Every change (a half, a decision, a check) is made under the gate (`TXN_BYTE`): the
//!   holder walks the log to its end (state.rs), checks, appends, and lets go, so what it
//!   checked stays true until its record is in the log.
//! - A decision is one append; the re-puts follow it. The table knows which halves of a
//!   decided transaction have no copy yet (`undelivered`), and every gate holder that decides
//!   or checks first re-puts those: a crash between the decision and its copies loses nothing
//!   and duplicates nothing (a copy names its half).
//! - Deciding a transaction the way it is already decided writes nothing and succeeds (the
//!   caller's id makes commit idempotent); the other way is `TxnConflict`.
//!
//! Crash behaviour: a half, a decision or a check is whole in the log or absent. A half without
//! a decision stays open until a commit, a rollback, or the checks decide it; a decision
//! without all its copies gets them at the next gate holder's pass. The table lives in memory
//! only: the first call of a process walks the log from its first record.

pub mod record;
pub mod state;

use std::sync::Mutex;

use self::record::{Op, OpRecord};
use self::state::{Dest, Status, Table};
use super::timer::gate::Gate;
use super::{PutResult, Routing, Store};
use crate::error::{Error, Result};
use crate::message::{properties, sysflag, validate, MessageRef};

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

/// Properties a half's stored record owns: a caller's are dropped.
const OWNED: [&str; 5] = [
    properties::REAL_TOPIC,
    properties::REAL_QID,
    properties::TRAN_MSG,
    properties::PGROUP,
    record::TXN_ID,
];

impl Store {
    fn txns(&self) -> Result<&Txns> {
        self.check_writable()?;
        self.inner.txns.as_deref().ok_or(Error::ReadOnly)
    }

    /// Holds the gate, walks the log to its end and runs `f` on the table.
    fn with_table<R>(&self, f: impl FnOnce(&Store, &mut Table) -> Result<R>) -> Result<R> {
        let txns = self.txns()?;
        let _held = txns.gate.take()?;
        let mut table = txns.table.lock().unwrap_or_else(|p| p.into_inner());
        let log = &self.inner.commit_log;
        log.follow_shared()?;
        table.walk(log, log.max_offset());
        f(self, &mut table)
    }

    /// Stores `msg` as a half of transaction `id` of producer `group`, routed to a queue of its
    /// topic by `routing`; returns the half's put (its queue id is the real queue's).
    ///
    /// # Errors
    /// As a put; `InvalidArgument` for a bad id, `InvalidGroup`, `InvalidMessage` for a
    /// message that asks for a delay or a delivery time, `TxnConflict` when `id` is already
    /// decided or belongs to another group. Nothing is written then.
    pub fn txn_prepare(
        &self,
        msg: &MessageRef<'_>,
        routing: Routing<'_>,
        group: &str,
        id: &str,
    ) -> Result<PutResult> {
        record::check_text("transaction id", id, false)?;
        validate::check_group(group)?;
        let checked = self.check_message(msg)?;
        if !checked.marks.is_none() {
            return Err(Error::InvalidMessage {
                reason: "a transactional message cannot ask for a delay, a delivery time or a \
                         send-back"
                    .into(),
            });
        }
        let queue_id = routing.pick(msg.topic, self.writable_queues(msg.topic)?)?;
        let mut props = Vec::with_capacity(msg.properties.len() + 96);
        for (k, v) in properties::iter(msg.properties) {
            if !OWNED.contains(&k) {
                properties::push(&mut props, k, v);
            }
        }
        properties::push(&mut props, properties::REAL_TOPIC, msg.topic);
        properties::push(&mut props, properties::REAL_QID, &queue_id.to_string());
        properties::push(&mut props, properties::TRAN_MSG, "true");
        properties::push(&mut props, properties::PGROUP, group);
        properties::push(&mut props, record::TXN_ID, id);
        // RocketMQ stores a half with the transaction type reset to NOT, so that it is
        // dispatched to the half topic's own queue (never to its real topic's).
        let half = MessageRef {
            topic: record::HALF_TOPIC,
            queue_id: 0,
            properties: &props,
            sysflag: msg.sysflag & !sysflag::TRANSACTION_MASK,
            ..*msg
        };
        let put = self.with_table(|store, table| {
            if let Some(t) = table.txns.get(id) {
                if t.status != Status::Open {
                    return Err(Error::TxnConflict {
                        id: id.to_owned(),
                        state: t.status.name(),
                        asked: "add a message to",
                    });
                }
                if t.group != group {
                    return Err(Error::InvalidArgument {
                        field: "transaction id",
                        reason: format!("{id:?} belongs to producer group {:?}", t.group),
                    });
                }
            }
            let put = store.put_internal(&half)?;
            Ok(PutResult { queue_id, ..put })
        });
        // A refused half does not take its topic's round-robin turn.
        put.inspect_err(|_| routing.give_back(msg.topic))
    }

    /// Decides transactions `ids` (commit when `commit`, else roll back) and sets progress
    /// `key = value` when given, in one append; then re-puts every committed half. Returns
    /// whether anything was appended: deciding an id the way it is already decided, with the
    /// same progress, writes nothing.
    ///
    /// # Errors
    /// `TxnUnknown` for an id never prepared, `TxnConflict` for one decided the other way,
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
            let mut open: Vec<&str> = Vec::with_capacity(ids.len());
            for id in ids {
                let Some(t) = table.txns.get(*id) else {
                    return Err(Error::TxnUnknown {
                        id: (*id).to_owned(),
                    });
                };
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
            }
            store.deliver(table)?;
            Ok(written)
        })
    }

    /// Appends the op record deciding `ids` and applies it to `table`.
    fn append_op(
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

    /// Re-puts every decided half that has no copy yet (the caller holds the gate).
    fn deliver(&self, table: &mut Table) -> Result<()> {
        let log = &self.inner.commit_log;
        while let Some((&half, &dest)) = table.undelivered.first_key_value() {
            let copy = log.read_record(half, |v| {
                let props = v.properties();
                let topic = properties::get(props, properties::REAL_TOPIC).map(str::to_owned);
                let qid = properties::get(props, properties::REAL_QID)
                    .and_then(|q| q.parse::<u32>().ok());
                let mut kept = Vec::with_capacity(props.len());
                for (k, val) in properties::iter(props) {
                    if dest == Dest::MaxTime
                        || !matches!(
                            k,
                            properties::REAL_TOPIC | properties::REAL_QID | properties::TRAN_MSG
                        )
                    {
                        properties::push(&mut kept, k, val);
                    }
                }
                (
                    topic,
                    qid,
                    kept,
                    v.body().to_vec(),
                    v.flag(),
                    v.sysflag(),
                    v.born_timestamp(),
                )
            })?;
            let (Some(topic), Some(qid), props, body, flag, flags, born) = copy else {
                return Err(Error::Corrupted {
                    path: std::path::PathBuf::new(),
                    offset: half,
                    reason: "a half message without REAL_TOPIC or REAL_QID".into(),
                    cause: None,
                });
            };
            let half_offset = i64::try_from(half).unwrap_or(i64::MAX);
            let (topic, queue_id, sysflag) = match dest {
                Dest::Real => (
                    topic.as_str(),
                    qid,
                    (flags & !sysflag::TRANSACTION_MASK) | sysflag::TRANSACTION_COMMIT,
                ),
                Dest::MaxTime => (
                    record::MAX_TIME_TOPIC,
                    0,
                    flags & !sysflag::TRANSACTION_MASK,
                ),
            };
            let msg = MessageRef {
                topic,
                queue_id,
                body: &body,
                flag,
                properties: &props,
                sysflag,
                born_timestamp: born,
                reconsume_times: 0,
                prepared_transaction_offset: half_offset,
            };
            // A real topic keeps its settings; one deleted or shrunk since the prepare gets
            // the queue back, as a system topic would (the committed message is not dropped).
            self.inner.topics.sync()?;
            let exists = self
                .inner
                .topics
                .write_info(topic)
                .is_some_and(|(queues, _)| queue_id < queues);
            let put = self.append_internal(&msg, !exists)?;
            let end = put.appended.physical_offset + u64::from(put.appended.size);
            table.walk(log, end);
            // The walk saw the copy; a table that did not (it cannot) must not loop.
            table.undelivered.remove(&half);
        }
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
            Ok(claim)
        })
    }

    /// The transactions of `group` (every group when `None`) in state `open`, or in every
    /// state when `all`, sorted by first half time.
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
            out.sort_by(|a, b| (a.first_ms, &a.id).cmp(&(b.first_ms, &b.id)));
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::store::TagFilter;
    use crate::StoreConfig;

    fn count(store: &Store, topic: &str) -> usize {
        store
            .get_messages(topic, 0, 0, 100, &TagFilter::all())
            .map(|g| g.iter().count())
            .unwrap_or(0)
    }

    /// A crash after a commit's op record and before its re-puts (the log holds the decision
    /// and no copy): the next gate holder of a new handle re-puts each half once.
    #[test]
    fn a_decision_without_its_copies_is_finished_once_by_the_next_handle() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
            store.create_topic("T", 1, 6, false, true).unwrap();
            for body in [&b"a"[..], b"b"] {
                let msg = MessageRef::new("T", 0, body);
                store
                    .txn_prepare(&msg, Routing::Queue(0), "G", "x")
                    .unwrap();
            }
            // The commit's first step alone.
            store
                .with_table(|s, table| s.append_op(table, Op::Commit, &["x"], None))
                .unwrap();
            assert_eq!(count(&store, "T"), 0);
            store.close().unwrap();
        }
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        // Idempotent: already committed, nothing new decided; the copies are made.
        assert!(!store.txn_end(&["x"], true, None).unwrap());
        assert_eq!(count(&store, "T"), 2);
        assert!(!store.txn_end(&["x"], true, None).unwrap());
        assert_eq!(count(&store, "T"), 2);
        store.close().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        assert!(store.txn_list(None, true).unwrap()[0].state == "committed");
        assert_eq!(count(&store, "T"), 2);
        store.close().unwrap();
    }
}

#[cfg(test)]
mod rocketmq_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::StoreConfig;

    /// RocketMQ's half, as its broker stores it: NOT type, the real topic named, its UNIQ_KEY
    /// as the transaction id; `check_times`: its check service's re-appended copy.
    fn rocketmq_half(store: &Store, id: &str, check_times: Option<&str>) -> u64 {
        let mut props = Vec::new();
        properties::push(&mut props, properties::TRAN_MSG, "true");
        properties::push(&mut props, properties::PGROUP, "G");
        properties::push(&mut props, properties::REAL_TOPIC, "T");
        properties::push(&mut props, properties::REAL_QID, "0");
        properties::push(&mut props, record::TXN_ID, id);
        if let Some(n) = check_times {
            properties::push(&mut props, record::CHECK_TIMES, n);
        }
        let msg = MessageRef::new(record::HALF_TOPIC, 0, b"rmq").with_properties(&props);
        store.put_internal(&msg).unwrap().appended.queue_offset
    }

    fn rocketmq_op(store: &Store, body: &[u8]) {
        let mut props = Vec::new();
        properties::push(&mut props, properties::TAGS, record::OP_TAG);
        let msg = MessageRef::new(record::OP_TOPIC, 0, body).with_properties(&props);
        store.put_internal(&msg).unwrap();
    }

    /// A store RocketMQ wrote: its check copies are not second halves, and its op records
    /// (5.x `17,18,` or 4.x `17`) resolve their transactions, which mqlite then neither checks
    /// nor commits.
    #[test]
    fn rocketmq_s_halves_check_copies_and_op_records_are_understood() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        store.create_topic("T", 1, 6, false, true).unwrap();
        let a = rocketmq_half(&store, "A", None);
        rocketmq_half(&store, "B", None);
        rocketmq_half(&store, "C", None);
        let b_copy = rocketmq_half(&store, "B", Some("1"));
        rocketmq_op(&store, format!("{a},").as_bytes());
        rocketmq_op(&store, b_copy.to_string().as_bytes());
        let all = store.txn_list(None, true).unwrap();
        let states: Vec<(&str, &str, usize)> = all
            .iter()
            .map(|t| (t.id.as_str(), t.state, t.halves.len()))
            .collect();
        assert_eq!(
            states,
            vec![
                ("A", "resolved by RocketMQ", 1),
                ("B", "resolved by RocketMQ", 1),
                ("C", "open", 1)
            ]
        );
        assert!(matches!(
            store.txn_end(&["A"], true, None),
            Err(Error::TxnConflict { .. })
        ));
        store.close().unwrap();
    }
}
