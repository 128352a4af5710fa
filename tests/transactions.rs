//! Transactions (store/txn/): halves stay out of their real topic until committed; a commit
//! re-puts each half once, with the COMMIT transaction type and its half's offset; a rollback
//! writes one op record only; deciding twice the same way writes nothing, the other way is a
//! typed error; several transactions and a progress value are decided in one record; the
//! table is rebuilt from the log by a new handle (after a close or beside a shared writer);
//! checks count and end in a discard to `TRANS_CHECK_MAX_TIME_TOPIC`. Checks run on a manual
//! clock, never a sleep.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use mqlite::message::{properties, sysflag};
use mqlite::store::txn::record::{HALF_TOPIC, MAX_TIME_TOPIC, OP_TOPIC};
use mqlite::store::txn::CheckPolicy;
use mqlite::util::clock::ManualClock;
use mqlite::{Error, MessageRef, Routing, Store, StoreConfig, TagFilter};

use common::small_config;

const T0: i64 = 1_700_000_000_000;

fn config(clock: &ManualClock) -> StoreConfig {
    StoreConfig {
        clock: clock.clone().into(),
        lock_wait: Some(Duration::from_secs(30)),
        ..small_config()
    }
}

fn half(store: &Store, id: &str, body: &[u8]) -> u64 {
    let msg = MessageRef::new("T", 0, body);
    let put = store.txn_prepare(&msg, Routing::Queue(1), "G", id).unwrap();
    assert_eq!(put.queue_id, 1);
    put.appended.physical_offset
}

/// Bodies of topic `T`, queue 1 (none when it has no message).
fn visible(store: &Store) -> Vec<Vec<u8>> {
    store
        .get_messages("T", 1, 0, 1000, &TagFilter::all())
        .map(|g| g.iter().map(|v| v.body().to_vec()).collect())
        .unwrap_or_default()
}

fn open(dir: &std::path::Path, clock: &ManualClock) -> Store {
    let store = Store::open(dir, config(clock)).unwrap();
    store.create_topic("T", 2, 6, false, true).unwrap();
    store
}

#[test]
fn a_commit_re_puts_each_half_once_with_rocketmq_s_fields() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    let h1 = half(&store, "a", b"one");
    let h2 = half(&store, "a", b"two");
    assert!(visible(&store).is_empty());
    // The halves are in the half topic's queue 0, with the real topic and queue named.
    let halves = store
        .get_messages(HALF_TOPIC, 0, 0, 10, &TagFilter::all())
        .unwrap();
    let props: Vec<(String, String)> = halves
        .iter()
        .map(|v| {
            let p = v.properties();
            assert_eq!(v.sysflag() & sysflag::TRANSACTION_MASK, 0);
            (
                properties::get(p, properties::REAL_TOPIC)
                    .unwrap()
                    .to_owned(),
                properties::get(p, "__transactionId__").unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(props, vec![("T".into(), "a".into()); 2]);

    assert!(store.txn_end(&["a"], true, None).unwrap());
    let got = store
        .get_messages("T", 1, 0, 10, &TagFilter::all())
        .unwrap();
    let copies: Vec<(Vec<u8>, i32, i64, bool)> = got
        .iter()
        .map(|v| {
            (
                v.body().to_vec(),
                v.sysflag() & sysflag::TRANSACTION_MASK,
                v.prepared_transaction_offset(),
                properties::get(v.properties(), properties::REAL_TOPIC).is_some(),
            )
        })
        .collect();
    let commit = sysflag::TRANSACTION_COMMIT;
    assert_eq!(
        copies,
        vec![
            (b"one".to_vec(), commit, h1 as i64, false),
            (b"two".to_vec(), commit, h2 as i64, false)
        ]
    );
    // The op record lists the halves' queue offsets as RocketMQ 5 does.
    let ops = store
        .get_messages(OP_TOPIC, 0, 0, 10, &TagFilter::all())
        .unwrap();
    let bodies: Vec<Vec<u8>> = ops.iter().map(|v| v.body().to_vec()).collect();
    assert_eq!(bodies, vec![b"0,1,".to_vec()]);

    // Idempotent: the same commit writes nothing.
    let end = store.commit_log_range().1;
    assert!(!store.txn_end(&["a"], true, None).unwrap());
    assert_eq!(store.commit_log_range().1, end);
    assert_eq!(visible(&store).len(), 2);
    store.close().unwrap();
}

#[test]
fn the_other_decision_unknown_ids_and_bad_input_are_typed_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    half(&store, "r", b"x");
    assert!(store.txn_end(&["r"], false, None).unwrap());
    let end = store.commit_log_range().1;
    assert!(matches!(
        store.txn_end(&["r"], true, None),
        Err(Error::TxnConflict {
            state: "rolled back",
            ..
        })
    ));
    assert!(matches!(
        store.txn_end(&["nope"], true, None),
        Err(Error::TxnUnknown { .. })
    ));
    // An unknown id is reported before a conflict, wherever it is in the list.
    assert!(matches!(
        store.txn_end(&["r", "nope"], true, None),
        Err(Error::TxnUnknown { .. })
    ));
    let msg = MessageRef::new("T", 0, b"late");
    assert!(matches!(
        store.txn_prepare(&msg, Routing::Queue(0), "G", "r"),
        Err(Error::TxnConflict { .. })
    ));
    for bad in ["", "a,b", "a\u{1}b"] {
        assert!(matches!(
            store.txn_prepare(&msg, Routing::Queue(0), "G", bad),
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert!(matches!(
        store.txn_end(&[], true, None),
        Err(Error::InvalidArgument { .. })
    ));
    // A half to a system topic is refused as a caller's message would be.
    let sys = MessageRef::new(HALF_TOPIC, 0, b"x");
    assert!(store
        .txn_prepare(&sys, Routing::Queue(0), "G", "s")
        .is_err());
    assert_eq!(store.commit_log_range().1, end);
    assert!(visible(&store).is_empty());
    store.close().unwrap();
}

#[test]
fn several_transactions_and_progress_are_one_record_rebuilt_by_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    {
        let store = open(dir.path(), &clock);
        for id in ["s:1:0", "s:1:1", "s:1:2"] {
            half(&store, id, id.as_bytes());
        }
        let before = store
            .get_messages(OP_TOPIC, 0, 0, 10, &TagFilter::all())
            .map(|g| g.iter().count())
            .unwrap_or(0);
        assert!(store
            .txn_end(&["s:1:0", "s:1:1"], true, Some(("sink", "1")))
            .unwrap());
        let ops = store
            .get_messages(OP_TOPIC, 0, 0, 10, &TagFilter::all())
            .unwrap();
        assert_eq!(ops.iter().count(), before + 1);
        assert_eq!(store.txn_progress("sink").unwrap().as_deref(), Some("1"));
        store.close().unwrap();
    }
    let store = open(dir.path(), &clock);
    assert_eq!(store.txn_progress("sink").unwrap().as_deref(), Some("1"));
    assert_eq!(visible(&store), vec![b"s:1:0".to_vec(), b"s:1:1".to_vec()]);
    let open: Vec<String> = store
        .txn_list(Some("G"), false)
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(open, vec!["s:1:2".to_owned()]);
    // Progress alone, then the same again (nothing written).
    assert!(store.txn_end(&[], true, Some(("sink", "2"))).unwrap());
    assert!(!store.txn_end(&[], true, Some(("sink", "2"))).unwrap());
    store.close().unwrap();
}

#[test]
fn checks_wait_count_and_end_in_a_discard() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    half(&store, "c", b"checked");
    let policy = CheckPolicy {
        timeout_ms: 6000,
        interval_ms: 1000,
        max_checks: 2,
        limit: 100,
    };
    assert!(store.txn_claim_checks("G", policy).unwrap().is_empty());
    clock.advance(Duration::from_millis(6000));
    assert_eq!(store.txn_claim_checks("G", policy).unwrap().len(), 1);
    // Claimed: not again before the interval.
    assert!(store.txn_claim_checks("G", policy).unwrap().is_empty());
    assert!(store.txn_claim_checks("Other", policy).unwrap().is_empty());
    clock.advance(Duration::from_millis(1000));
    assert_eq!(store.txn_claim_checks("G", policy).unwrap().len(), 1);
    assert_eq!(store.txn_list(None, false).unwrap()[0].checks, 2);
    clock.advance(Duration::from_millis(1000));
    assert!(store.txn_claim_checks("G", policy).unwrap().is_empty());
    let maxed = store
        .get_messages(MAX_TIME_TOPIC, 0, 0, 10, &TagFilter::all())
        .unwrap();
    let bodies: Vec<Vec<u8>> = maxed.iter().map(|v| v.body().to_vec()).collect();
    assert_eq!(bodies, vec![b"checked".to_vec()]);
    assert!(matches!(
        store.txn_end(&["c"], true, None),
        Err(Error::TxnConflict {
            state: "discarded",
            ..
        })
    ));
    assert!(visible(&store).is_empty());
    store.close().unwrap();
}

#[test]
fn a_shared_writer_sees_another_handle_s_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let shared = |c: &ManualClock| StoreConfig {
        shared_writers: true,
        ..config(c)
    };
    let a = Store::open(dir.path(), shared(&clock)).unwrap();
    a.create_topic("T", 2, 6, false, true).unwrap();
    let b = Store::open(dir.path(), shared(&clock)).unwrap();
    half(&a, "x", b"from a");
    // B decides A's transaction; A's idempotent commit then writes nothing.
    assert!(b.txn_end(&["x"], true, None).unwrap());
    assert!(!a.txn_end(&["x"], true, None).unwrap());
    assert!(matches!(
        a.txn_end(&["x"], false, None),
        Err(Error::TxnConflict { .. })
    ));
    b.close().unwrap();
    assert_eq!(visible(&a), vec![b"from a".to_vec()]);
    a.close().unwrap();
}

#[test]
fn a_commit_leaves_a_read_only_topic_s_settings_alone() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    half(&store, "p", b"x");
    let before = store.topic("T").unwrap().unwrap();
    assert!(store.txn_end(&["p"], true, None).unwrap());
    assert_eq!(store.topic("T").unwrap().unwrap(), before);
    store.close().unwrap();
}
