//! The transaction table: what the commit log says about every transaction, built by walking
//! the log in order (`walk`) from a snapshot (snapshot.rs) or its first record, and kept up to
//! date by walking on from where the last walk ended: after a crash or in another process the
//! same walk gives the same table.
//!
//! Lifecycle: a transaction enters with its first half and leaves (`evict`) once it is decided,
//! its copies are made and retention has deleted all its halves; until it is decided or
//! discarded its halves are kept from retention (`floor`). Progress values are kept for good.
//!
//! Invariants
//! - Records are applied in log order: a half before any op naming its id, a decision before
//!   the copies it asks for (a commit's re-puts, a discard's copies).
//! - A transaction's first decision (commit, rollback, discard) is its state for good; a later
//!   one is ignored (under the gate none is ever appended).
//! - `undelivered` holds exactly the halves whose decision asks for a copy that the log does
//!   not hold yet: a copy names its half by `prepared_transaction_offset`.

use std::collections::{BTreeMap, HashMap};

use super::record::{self, Op, OpRecord};
use crate::commit_log::CommitLog;
use crate::message::{properties, sysflag, RecordView};

/// The state of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Prepared, not decided.
    Open,
    /// Committed: its halves are (or are being) re-put to their real topics.
    Committed,
    /// Rolled back: its halves are dropped.
    RolledBack,
    /// Checked the maximum number of times: its halves are copied to `MAX_TIME_TOPIC`.
    Discarded,
    /// Resolved by RocketMQ's own op record (a store RocketMQ wrote): the record does not say
    /// how, and RocketMQ made the copy if it committed.
    Foreign,
}

impl Status {
    /// Lower-case name, for errors and listings.
    pub fn name(self) -> &'static str {
        match self {
            Status::Open => "open",
            Status::Committed => "committed",
            Status::RolledBack => "rolled back",
            Status::Discarded => "discarded",
            Status::Foreign => "resolved by RocketMQ",
        }
    }
}

/// One transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    /// Producer group of its halves.
    pub group: String,
    /// Commit-log offsets of its halves, in log order.
    pub halves: Vec<u64>,
    /// Queue offsets of its halves in the half topic (for RocketMQ's op body).
    pub half_queue_offsets: Vec<u64>,
    /// State.
    pub status: Status,
    /// Checker calls recorded.
    pub checks: u32,
    /// Store time of its first half (ms).
    pub first_ms: i64,
    /// Store time of its last check record (ms; 0: never checked).
    pub last_check_ms: i64,
}

/// Where a decided half's copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// To its real topic (a commit).
    Real,
    /// To `MAX_TIME_TOPIC` (a discard).
    MaxTime,
}

/// The table. See the module doc.
#[derive(Debug, Default)]
pub struct Table {
    /// Every transaction seen, by id.
    pub txns: HashMap<String, Txn>,
    /// Progress values by key.
    pub progress: HashMap<String, String>,
    /// Halves decided whose copy is not in the log yet, by half offset.
    pub undelivered: BTreeMap<u64, Dest>,
    /// The transaction of each half-topic queue offset of an open transaction, RocketMQ's
    /// check copies included: what RocketMQ's op records name.
    pub by_queue_offset: HashMap<u64, String>,
    /// The log is applied below this offset.
    pub walked_to: u64,
    /// The snapshot was looked for (the table is walked on from it or from the start).
    pub loaded: bool,
    /// A transaction record was applied since the last snapshot written.
    pub dirty: bool,
    /// `walked_to` of the last snapshot written or loaded.
    pub persisted_to: u64,
    /// `evict` last ran for this log start.
    pub evicted_for: u64,
}

impl Table {
    /// Applies every record of `log` that begins in `[walked_to, end)`; `end` must not be
    /// past the log's published end. The walk ends on a record boundary, at or past `end`.
    pub fn walk(&mut self, log: &CommitLog, end: u64) {
        let mut off = self.walked_to.max(log.min_offset());
        while off < end {
            match log.read_record(off, |v| {
                self.apply(v);
                v.bytes().len() as u64
            }) {
                Ok(size) => off += size.max(1),
                // The blank at the end of a file.
                Err(_) => off = log.roll_next_file(off),
            }
        }
        self.walked_to = self.walked_to.max(off);
    }

    /// Removes the decided transactions whose copies are made and whose halves are all below
    /// `min_offset` (deleted by retention): a late decision naming one finds it unknown.
    pub fn evict(&mut self, min_offset: u64) {
        if min_offset == self.evicted_for {
            return;
        }
        self.evicted_for = min_offset;
        let undelivered = &self.undelivered;
        let before = self.txns.len();
        self.txns.retain(|_, t| {
            t.status == Status::Open
                || t.halves
                    .iter()
                    .any(|h| *h >= min_offset || undelivered.contains_key(h))
        });
        self.dirty |= self.txns.len() != before;
    }

    /// The lowest commit-log offset retention must keep: the first half of an open
    /// transaction, a decided half without its copy, or the end of the walk (what lies past
    /// it is unknown); halves already below `min_offset` are gone and pin nothing.
    pub fn floor(&self, min_offset: u64) -> u64 {
        let open = self
            .txns
            .values()
            .filter(|t| t.status == Status::Open)
            .flat_map(|t| t.halves.iter().copied());
        open.chain(self.undelivered.keys().copied())
            .filter(|h| *h >= min_offset)
            .fold(self.walked_to, u64::min)
    }

    /// Applies one record.
    pub fn apply(&mut self, v: &RecordView<'_>) {
        let props = v.properties();
        match v.topic() {
            record::HALF_TOPIC | record::OP_TOPIC | record::MAX_TIME_TOPIC => self.dirty = true,
            _ if v.sysflag() & sysflag::TRANSACTION_MASK == sysflag::TRANSACTION_COMMIT => {
                self.dirty = true;
            }
            _ => {}
        }
        match v.topic() {
            record::HALF_TOPIC => self.half(v),
            record::OP_TOPIC => match OpRecord::decode(props) {
                Some(op) => self.op(&op, v.store_timestamp()),
                None => self.foreign_op(v),
            },
            record::MAX_TIME_TOPIC => self.copied(v.prepared_transaction_offset()),
            _ if v.sysflag() & sysflag::TRANSACTION_MASK == sysflag::TRANSACTION_COMMIT => {
                self.copied(v.prepared_transaction_offset());
            }
            _ => {}
        }
    }

    fn half(&mut self, v: &RecordView<'_>) {
        let props = v.properties();
        if properties::get(props, properties::TRAN_MSG).is_none() {
            return;
        }
        let Some(id) = properties::get(props, record::TXN_ID) else {
            return;
        };
        let txn = self.txns.entry(id.to_owned()).or_insert_with(|| Txn {
            group: properties::get(props, properties::PGROUP)
                .unwrap_or_default()
                .to_owned(),
            halves: Vec::new(),
            half_queue_offsets: Vec::new(),
            status: Status::Open,
            checks: 0,
            first_ms: v.store_timestamp(),
            last_check_ms: 0,
        });
        if txn.status != Status::Open {
            // A half appended after the decision cannot happen under the gate; ignored if seen.
            return;
        }
        self.by_queue_offset.insert(v.queue_offset(), id.to_owned());
        // RocketMQ's check re-appends a copy of the half (with its check count): the same
        // message, which a commit must not copy twice.
        if properties::get(props, record::CHECK_TIMES).is_some() {
            return;
        }
        // `halves` is in log order (the walk is): a new half goes at the end, found in
        // O(log n) when walked again, so a transaction of many halves is never quadratic.
        if let Err(at) = txn.halves.binary_search(&v.physical_offset()) {
            txn.halves.insert(at, v.physical_offset());
            txn.half_queue_offsets.insert(at, v.queue_offset());
        }
    }

    /// RocketMQ's op record (tag `d`, a body of half-topic queue offsets, each followed by
    /// `,`, or one offset in 4.x): the transactions of those halves are resolved.
    fn foreign_op(&mut self, v: &RecordView<'_>) {
        if properties::get(v.properties(), properties::TAGS) != Some(record::OP_TAG) {
            return;
        }
        let body = String::from_utf8_lossy(v.body());
        for part in body.split(',') {
            let Ok(offset) = part.trim().parse::<u64>() else {
                continue;
            };
            let Some(id) = self.by_queue_offset.remove(&offset) else {
                continue;
            };
            if let Some(t) = self.txns.get_mut(&id) {
                if t.status == Status::Open {
                    t.status = Status::Foreign;
                }
            }
        }
    }

    fn op(&mut self, op: &OpRecord<'_>, at_ms: i64) {
        for id in &op.ids {
            let Some(txn) = self.txns.get_mut(*id) else {
                continue;
            };
            if txn.status != Status::Open {
                continue;
            }
            let copy = match op.op {
                Op::Check => {
                    txn.checks = txn.checks.saturating_add(1);
                    txn.last_check_ms = at_ms;
                    None
                }
                Op::Rollback => {
                    txn.status = Status::RolledBack;
                    None
                }
                Op::Commit => {
                    txn.status = Status::Committed;
                    Some(Dest::Real)
                }
                Op::Discard => {
                    txn.status = Status::Discarded;
                    Some(Dest::MaxTime)
                }
            };
            if let Some(c) = copy {
                for h in &txn.halves {
                    self.undelivered.insert(*h, c);
                }
            }
            if txn.status != Status::Open {
                for q in &txn.half_queue_offsets {
                    self.by_queue_offset.remove(q);
                }
            }
        }
        if let Some((k, v)) = op.progress {
            self.progress.insert(k.to_owned(), v.to_owned());
        }
    }

    fn copied(&mut self, half: i64) {
        if let Ok(h) = u64::try_from(half) {
            self.undelivered.remove(&h);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::super::record;
    use crate::config::StoreConfig;
    use crate::error::Error;
    use crate::message::{properties, MessageRef};
    use crate::store::Store;

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
