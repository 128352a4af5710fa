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

/// Halves read per round of copies at most.
const WINDOW: usize = 4096;

/// One copy to make, read from its half.
struct Copy {
    half: u64,
    topic: String,
    queue_id: u32,
    props: Vec<u8>,
    body: Vec<u8>,
    flag: i32,
    sysflag: i32,
    born: i64,
}

impl Store {
    /// Re-puts every decided half that has no copy yet (the caller holds the gate). Rounds of
    /// up to `WINDOW` halves, in offset order: each round's copies are grouped by destination
    /// queue (in half order within a queue) and each group appended in batches.
    pub(super) fn deliver(&self, table: &mut Table) -> Result<()> {
        let log = &self.inner.commit_log;
        loop {
            // Retention deleted these halves before their copies were made: nothing is left
            // to copy, and the copies after them must not wait on them.
            while let Some((&half, _)) = table.undelivered.first_key_value() {
                if half >= log.min_offset() {
                    break;
                }
                table.undelivered.remove(&half);
            }
            let round: Vec<(u64, Dest)> = table
                .undelivered
                .iter()
                .take(WINDOW)
                .map(|(&h, &d)| (h, d))
                .collect();
            if round.is_empty() {
                return Ok(());
            }
            let mut groups: Vec<Vec<Copy>> = Vec::new();
            for (half, dest) in round {
                let copy = self.read_copy(half, dest)?;
                match groups.iter_mut().find(|g| {
                    g.first()
                        .is_some_and(|c| c.topic == copy.topic && c.queue_id == copy.queue_id)
                }) {
                    Some(g) => g.push(copy),
                    None => groups.push(vec![copy]),
                }
            }
            // A real topic keeps its settings; one deleted or shrunk since the prepare gets
            // the queue back, as a system topic would (the committed message is not dropped).
            self.inner.topics.sync()?;
            let mut appended = Vec::new();
            for group in &groups {
                let Some(first) = group.first() else { continue };
                let exists = self
                    .inner
                    .topics
                    .write_info(&first.topic)
                    .is_some_and(|(queues, _)| first.queue_id < queues);
                let msgs: Vec<MessageRef<'_>> = group.iter().map(Copy::message).collect();
                for piece in super::pieces(&msgs, self.commit_log_file_size()) {
                    appended.clear();
                    let copies = group.get(piece.clone()).unwrap_or(&[]);
                    self.append_internal_batch(
                        msgs.get(piece).unwrap_or(&[]),
                        !exists,
                        &mut appended,
                    )?;
                    if let Some(last) = appended.last() {
                        table.walk(log, last.physical_offset + u64::from(last.size));
                    }
                    // The walk saw the copies; a table that did not (it cannot) must not loop.
                    for c in copies {
                        table.undelivered.remove(&c.half);
                    }
                    kill_point!("txn.copy_made");
                }
            }
        }
    }

    /// The copy `dest` asks for of the half at `half`.
    fn read_copy(&self, half: u64, dest: Dest) -> Result<Copy> {
        let copy = self.inner.commit_log.read_record(half, |v| {
            let props = v.properties();
            let topic = properties::get(props, properties::REAL_TOPIC).map(str::to_owned);
            let qid =
                properties::get(props, properties::REAL_QID).and_then(|q| q.parse::<u32>().ok());
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
        let (topic, queue_id, sysflag) = match dest {
            Dest::Real => (
                topic,
                qid,
                (flags & !sysflag::TRANSACTION_MASK) | sysflag::TRANSACTION_COMMIT,
            ),
            Dest::MaxTime => (
                record::MAX_TIME_TOPIC.to_owned(),
                0,
                flags & !sysflag::TRANSACTION_MASK,
            ),
        };
        Ok(Copy {
            half,
            topic,
            queue_id,
            props,
            body,
            flag,
            sysflag,
            born,
        })
    }
}

impl Copy {
    fn message(&self) -> MessageRef<'_> {
        MessageRef {
            topic: &self.topic,
            queue_id: self.queue_id,
            body: &self.body,
            flag: self.flag,
            properties: &self.props,
            sysflag: self.sysflag,
            born_timestamp: self.born,
            reconsume_times: 0,
            prepared_transaction_offset: i64::try_from(self.half).unwrap_or(i64::MAX),
        }
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
