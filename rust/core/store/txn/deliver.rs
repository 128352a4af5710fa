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
        }
        Ok(())
    }
}
