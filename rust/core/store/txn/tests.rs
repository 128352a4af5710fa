//! Tests of the transactions that need the store's own calls (an op record without its
//! copies, RocketMQ's records in the half and op topics).

mod decided {
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

mod rocketmq {
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
