//! Model-based test: random puts, batches, reads and close+reopen against a Vec-per-queue
//! reference model. Every read must match the model (bodies, queue offsets, status, next
//! offset), before and after reopening.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::settle;
use mqlite::{GetStatus, MessageRef, Store, StoreConfig, TagFilter};
use proptest::collection::vec;
use proptest::prelude::*;

const TOPICS: [&str; 2] = ["ModelA", "ModelB"];
const QUEUES: u32 = 3;

#[derive(Debug, Clone)]
enum Op {
    Put {
        topic: usize,
        queue: u32,
        body: Vec<u8>,
    },
    Batch {
        topic: usize,
        queue: u32,
        bodies: Vec<Vec<u8>>,
    },
    Read {
        topic: usize,
        queue: u32,
        offset: u64,
        max: usize,
    },
    Reopen,
}

fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => vec(any::<u8>(), 1..64),
        1 => vec(any::<u8>(), 1000..6000),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, 0..QUEUES, body_strategy())
            .prop_map(|(topic, queue, body)| Op::Put { topic, queue, body }),
        2 => (0..2usize, 0..QUEUES, vec(body_strategy(), 1..9))
            .prop_map(|(topic, queue, bodies)| Op::Batch { topic, queue, bodies }),
        5 => (0..2usize, 0..QUEUES, 0..40u64, 1..16usize)
            .prop_map(|(topic, queue, offset, max)| Op::Read { topic, queue, offset, max }),
        1 => Just(Op::Reopen),
    ]
}

fn config() -> StoreConfig {
    StoreConfig {
        commit_log_file_size: Some(64 << 10),
        consume_queue_file_units: Some(64),
        max_message_size: Some(8 << 10),
        warm_mapped_files: false,
        ..Default::default()
    }
}

/// model[topic][queue] = bodies by queue offset.
type Model = Vec<Vec<Vec<Vec<u8>>>>;

fn check_read(store: &Store, model: &Model, topic: usize, queue: u32, offset: u64, max: usize) {
    let q = &model[topic][queue as usize];
    let n = q.len() as u64;
    let r = store
        .get_messages(TOPICS[topic], queue, offset, max, &TagFilter::all())
        .unwrap();
    let ctx = format!(
        "{}/{queue} offset {offset} max {max} (model has {n})",
        TOPICS[topic]
    );
    if n == 0 {
        let want = if offset == 0 {
            GetStatus::NoMessageInQueue
        } else {
            GetStatus::OffsetOverflowBadly
        };
        assert_eq!(r.status, want, "{ctx}");
        assert_eq!(r.next_offset, 0, "{ctx}");
        assert!(r.records.is_empty(), "{ctx}");
        return;
    }
    assert_eq!((r.min_offset, r.max_offset), (0, n), "{ctx}");
    if offset == n {
        assert_eq!(r.status, GetStatus::OffsetOverflowOne, "{ctx}");
        assert_eq!(r.next_offset, n, "{ctx}");
    } else if offset > n {
        assert_eq!(r.status, GetStatus::OffsetOverflowBadly, "{ctx}");
        assert_eq!(r.next_offset, n, "{ctx}");
    } else {
        let end = n.min(offset + max as u64);
        assert_eq!(r.status, GetStatus::Found, "{ctx}");
        assert_eq!(r.next_offset, end, "{ctx}");
        let got: Vec<(u64, Vec<u8>)> = r
            .iter()
            .map(|v| (v.queue_offset(), v.body().to_vec()))
            .collect();
        let want: Vec<(u64, Vec<u8>)> = (offset..end).map(|k| (k, q[k as usize].clone())).collect();
        assert_eq!(got, want, "{ctx}");
    }
    assert_eq!(
        store.queue_offsets(TOPICS[topic], queue).unwrap(),
        (0, n),
        "{ctx}"
    );
}

fn check_everything(store: &Store, model: &Model) {
    for (t, queues) in model.iter().enumerate() {
        for q in 0..queues.len() as u32 {
            check_read(store, model, t, q, 0, 1000);
        }
    }
}

fn run(ops: &[Op], root: &Path) {
    let mut store = Store::open(root, config()).unwrap();
    let mut model: Model = vec![vec![Vec::new(); QUEUES as usize]; TOPICS.len()];
    for op in ops {
        match op {
            Op::Put { topic, queue, body } => {
                let a = store
                    .put(&MessageRef::new(TOPICS[*topic], *queue, body))
                    .unwrap()
                    .appended;
                let q = &mut model[*topic][*queue as usize];
                assert_eq!(a.queue_offset, q.len() as u64);
                q.push(body.clone());
            }
            Op::Batch {
                topic,
                queue,
                bodies,
            } => {
                let msgs: Vec<MessageRef<'_>> = bodies
                    .iter()
                    .map(|b| MessageRef::new(TOPICS[*topic], *queue, b))
                    .collect();
                let mut out = Vec::new();
                store.put_batch(&msgs, &mut out).unwrap();
                let q = &mut model[*topic][*queue as usize];
                let base = q.len() as u64;
                assert_eq!(out.len(), bodies.len());
                for (i, a) in out.iter().enumerate() {
                    assert_eq!(a.queue_offset, base + i as u64);
                }
                q.extend(bodies.iter().cloned());
            }
            Op::Read {
                topic,
                queue,
                offset,
                max,
            } => {
                settle(&store);
                check_read(&store, &model, *topic, *queue, *offset, *max);
            }
            Op::Reopen => {
                store.close().unwrap();
                store = Store::open(root, config()).unwrap();
                let report = store.recovery_report();
                assert!(!report.abnormal && !report.torn_tail, "{report:?}");
                check_everything(&store, &model);
            }
        }
    }
    settle(&store);
    check_everything(&store, &model);
    store.close().unwrap();
    let store = Store::open(root, config()).unwrap();
    check_everything(&store, &model);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn store_matches_model(ops in vec(op_strategy(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        run(&ops, dir.path());
    }
}
