//! The copies a decision asks for: each committed half re-put to its real topic, each
//! discarded half copied to `TRANS_CHECK_MAX_TIME_TOPIC`, after the op record that decided it.
//!
//! Invariant: a copy carries its half's commit-log offset as `prepared_transaction_offset`, and
//! the table drops a half from `undelivered` when the walk meets its copy: a crash between the
//! decision and its copies, or between two copies, leaves exactly the missing ones to the next
//! gate holder, and none is made twice. A half retention deleted before its copy was made is
//! dropped (it is gone with its file).

use super::record;
use super::state::{Dest, Table};
use crate::error::{Error, Result};
use crate::message::{properties, sysflag, MessageRef};
use crate::store::Store;
use crate::util::kill_point::kill_point;

impl Store {
    /// Re-puts every decided half that has no copy yet (the caller holds the gate).
    pub(super) fn deliver(&self, table: &mut Table) -> Result<()> {
        let log = &self.inner.commit_log;
        while let Some((&half, &dest)) = table.undelivered.first_key_value() {
            if half < log.min_offset() {
                // Retention deleted the half before its copy was made: nothing is left to copy,
                // and the copies after it must not wait on it.
                table.undelivered.remove(&half);
                continue;
            }
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
            kill_point!("txn.copy_made");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::super::record::Op;
    use crate::config::StoreConfig;
    use crate::message::MessageRef;
    use crate::store::{Routing, Store, TagFilter};

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
