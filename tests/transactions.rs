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

/// Retention deletes what it may on a clock two hours on (files are an hour old by then).
fn expire(store: &Store, clock: &ManualClock) -> usize {
    clock.advance(Duration::from_secs(7_200));
    store.delete_expired_files().unwrap()
}

fn retained_config(clock: &ManualClock) -> StoreConfig {
    StoreConfig {
        file_reserved_time: Duration::from_secs(3_600),
        ..config(clock)
    }
}

/// The files of an open transaction's halves are kept by retention until it is decided, and
/// then its commit copies every half; afterwards they may go.
#[test]
fn retention_keeps_the_files_of_open_halves_until_they_are_decided() {
    let dir = tempfile::tempdir().unwrap();
    // Retention compares the store clock with file modification times: start at the real time.
    let clock = ManualClock::new(mqlite::util::clock::now_ms());
    let store = Store::open(dir.path(), retained_config(&clock)).unwrap();
    store.create_topic("T", 2, 6, false, true).unwrap();
    half(&store, "open", b"kept");
    common::scheduled::fill_files(&store);
    let before = common::scheduled::commit_log_files(dir.path());
    assert!(before >= 4, "{before} files");
    assert_eq!(
        expire(&store, &clock),
        0,
        "the first file holds an open half"
    );
    assert!(store.txn_end(&["open"], true, None).unwrap());
    assert_eq!(visible(&store), vec![b"kept".to_vec()]);
    store.flush().unwrap();
    assert!(expire(&store, &clock) >= 2);
    store.close().unwrap();
}

/// A close leaves the table's snapshot; retention then deletes the records of decided
/// transactions and of a progress value: a new handle still knows the progress (from the
/// snapshot), and the decided transactions have left the table (a late commit of one is
/// unknown), while an open one is kept with its file.
#[test]
fn the_snapshot_outlives_retention_and_decided_transactions_leave_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(mqlite::util::clock::now_ms());
    let store = Store::open(dir.path(), retained_config(&clock)).unwrap();
    store.create_topic("T", 2, 6, false, true).unwrap();
    half(&store, "done", b"d");
    assert!(store
        .txn_end(&["done"], true, Some(("sink", "batch 7")))
        .unwrap());
    common::scheduled::fill_files(&store);
    half(&store, "late", b"l");
    common::scheduled::fill_files(&store);
    store.close().unwrap();
    assert!(dir.path().join("config/transactions.json").exists());

    let store = Store::open(dir.path(), retained_config(&clock)).unwrap();
    assert!(expire(&store, &clock) >= 2);
    assert_eq!(
        store.txn_progress("sink").unwrap().as_deref(),
        Some("batch 7")
    );
    let ids: Vec<String> = store
        .txn_list(None, true)
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids, vec!["late".to_owned()]);
    assert!(matches!(
        store.txn_end(&["done"], true, None),
        Err(Error::TxnUnknown { .. })
    ));
    store.close().unwrap();
    let store = Store::open(dir.path(), retained_config(&clock)).unwrap();
    assert_eq!(
        store.txn_progress("sink").unwrap().as_deref(),
        Some("batch 7")
    );
    assert!(store.txn_end(&["late"], true, None).unwrap());
    // Queue offset 0 (the copy of "done") went with its file.
    let late: Vec<Vec<u8>> = store
        .get_messages("T", 1, 1, 10, &TagFilter::all())
        .unwrap()
        .iter()
        .map(|v| v.body().to_vec())
        .collect();
    assert_eq!(late, vec![b"l".to_vec()]);
    store.close().unwrap();
}

/// A snapshot that claims more of the log than the log holds (a tail cut after it was
/// written), or that does not decode, is never trusted: the table comes from the log.
#[test]
fn a_snapshot_past_the_log_end_or_undecodable_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    half(&store, "a", b"one");
    half(&store, "b", b"two");
    assert!(store.txn_end(&["a"], true, Some(("k", "1"))).unwrap());
    store.close().unwrap();
    let path = dir.path().join("config/transactions.json");
    let bak = dir.path().join("config/transactions.json.bak");
    let text = std::fs::read_to_string(&path).unwrap();
    let snapshot: serde_json::Value = serde_json::from_str(&text).unwrap();
    let end = snapshot["commitLogOffset"].as_u64().unwrap();
    let log_bytes: u64 = std::fs::read_dir(dir.path().join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(end > 0 && end < log_bytes, "{text}");
    // A snapshot of an empty table at a far offset; its .bak likewise.
    let forged = format!(
        "{{\"version\": 1, \"commitLogOffset\": {}, \"transactions\": [], \
         \"queueOffsets\": [], \"undelivered\": [], \"progress\": []}}",
        end + 4096
    );
    for (main, backup) in [
        (forged.as_bytes(), forged.as_bytes()),
        (b"{not json".as_slice(), b"".as_slice()),
    ] {
        std::fs::write(&path, main).unwrap();
        std::fs::write(&bak, backup).unwrap();
        let store = open(dir.path(), &clock);
        let states: Vec<(String, &str)> = store
            .txn_list(None, true)
            .unwrap()
            .into_iter()
            .map(|t| (t.id, t.state))
            .collect();
        assert_eq!(
            states,
            vec![("a".into(), "committed"), ("b".into(), "open")]
        );
        assert_eq!(store.txn_progress("k").unwrap().as_deref(), Some("1"));
        assert_eq!(visible(&store), vec![b"one".to_vec()]);
        // Never trusted, and replaced by a good one at close.
        store.close().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"id\": \"b\""), "{text}");
    }
}

/// The flush thread writes the snapshot after its periodic checkpoint while the store is open
/// (not only at close), and sync-mode commits, which wait for that thread's flushes, go on
/// beside it.
#[test]
fn the_flush_thread_writes_the_snapshot_while_the_store_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let cfg = StoreConfig {
        flush_mode: mqlite::FlushMode::Sync,
        flush_interval: Duration::from_millis(10),
        ..config(&clock)
    };
    let store = Store::open(dir.path(), cfg).unwrap();
    store.create_topic("T", 2, 6, false, true).unwrap();
    half(&store, "a", b"one");
    assert!(store.txn_end(&["a"], true, None).unwrap());
    let path = dir.path().join("config/transactions.json");
    // Written by the flush thread: nothing else writes it before close.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&path).is_ok_and(|t| t.contains("\"id\": \"a\"")) {
        assert!(std::time::Instant::now() < deadline, "no snapshot written");
        std::thread::sleep(Duration::from_millis(5));
    }
    for i in 0..50 {
        let id = format!("b{i}");
        half(&store, &id, b"more");
        assert!(store.txn_end(&[&id], true, None).unwrap());
    }
    assert_eq!(visible(&store).len(), 51);
    store.close().unwrap();
}

/// `txn_prepare_batch`: halves of many topics and queues, more bytes than half a commit-log
/// file (so several appends, each in one file), all invisible until one commit delivers each
/// once, in order per queue; round-robin routing takes one turn per message.
#[test]
fn a_batch_of_halves_spans_files_and_queues_and_commits_as_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    store.create_topic("U", 3, 6, false, true).unwrap();
    let rr = mqlite::RoundRobin::new(0);
    let bodies: Vec<Vec<u8>> = (0..300)
        .map(|i| format!("{i:04}").repeat(250).into_bytes())
        .collect();
    let items: Vec<(MessageRef<'_>, Routing<'_>)> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| match i % 2 {
            0 => (MessageRef::new("T", 0, b), Routing::Queue(1)),
            _ => (MessageRef::new("U", 0, b), Routing::RoundRobin(&rr)),
        })
        .collect();
    let files_before = store.commit_log_range();
    let mut puts = Vec::new();
    store
        .txn_prepare_batch(&items, "G", "big", &mut puts)
        .unwrap();
    assert_eq!(puts.len(), 300);
    // 300 KB of halves over 128 KiB files: several files, each append in one of them.
    assert!(store.commit_log_range().1 - files_before.1 > 2 * (128 << 10));
    let u_queues: Vec<u32> = puts.iter().skip(1).step_by(2).map(|p| p.queue_id).collect();
    assert_eq!(
        u_queues.iter().filter(|&&q| q == 0).count(),
        50,
        "{u_queues:?}"
    );
    assert!(visible(&store).is_empty());
    for q in 0..3 {
        assert_eq!(store.queue_offsets("U", q).map_or(0, |o| o.1), 0);
    }
    assert_eq!(store.queue_offsets(HALF_TOPIC, 0).unwrap(), (0, 300));
    let offsets: Vec<u64> = puts.iter().map(|p| p.appended.physical_offset).collect();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]));

    assert!(store.txn_end(&["big"], true, None).unwrap());
    let t: Vec<Vec<u8>> = store
        .get_messages("T", 1, 0, 1000, &TagFilter::all())
        .unwrap()
        .iter()
        .map(|v| v.body().to_vec())
        .collect();
    let want_t: Vec<Vec<u8>> = bodies.iter().step_by(2).cloned().collect();
    assert_eq!(t, want_t);
    let mut u = Vec::new();
    for q in 0..3 {
        let got = store
            .get_messages("U", q, 0, 1000, &TagFilter::all())
            .unwrap();
        let b: Vec<Vec<u8>> = got.iter().map(|v| v.body().to_vec()).collect();
        let want: Vec<Vec<u8>> = bodies
            .iter()
            .skip(1)
            .step_by(2)
            .zip(&u_queues)
            .filter(|(_, &uq)| uq == q)
            .map(|(b, _)| b.clone())
            .collect();
        assert_eq!(b, want, "queue {q} in send order");
        u.extend(b);
    }
    assert_eq!(u.len(), 150);
    store.close().unwrap();
}

/// An invalid message anywhere in a batch (or an unknown queue) rejects the whole batch:
/// nothing written, no round-robin turn taken; a decided transaction refuses a batch.
#[test]
fn a_batch_with_one_bad_message_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    let rr = mqlite::RoundRobin::new(0);
    let big = vec![0u8; 65 << 10];
    let end = store.commit_log_range().1;
    for bad in [
        (MessageRef::new("T", 0, &big), Routing::Queue(1)),
        (MessageRef::new("T", 0, b"x"), Routing::Queue(9)),
    ] {
        let items = [
            (MessageRef::new("T", 0, b"a"), Routing::RoundRobin(&rr)),
            bad,
            (MessageRef::new("T", 0, b"b"), Routing::RoundRobin(&rr)),
        ];
        let mut puts = Vec::new();
        store
            .txn_prepare_batch(&items, "G", "bad", &mut puts)
            .unwrap_err();
        assert!(puts.is_empty());
        assert_eq!(store.commit_log_range().1, end, "nothing written");
    }
    // The first round-robin send after the refusals takes the first turn (queue 0 of seed 0's
    // order), as if the refused batches never happened.
    let mut puts = Vec::new();
    let rr2 = mqlite::RoundRobin::new(0);
    let one = [(MessageRef::new("T", 0, b"c"), Routing::RoundRobin(&rr))];
    let two = [(MessageRef::new("T", 0, b"c"), Routing::RoundRobin(&rr2))];
    store.txn_prepare_batch(&one, "G", "ok", &mut puts).unwrap();
    store.txn_prepare_batch(&two, "G", "ok", &mut puts).unwrap();
    assert_eq!(puts[0].queue_id, puts[1].queue_id);
    assert!(store.txn_end(&["ok"], false, None).unwrap());
    let err = store
        .txn_prepare_batch(&two, "G", "ok", &mut puts)
        .unwrap_err();
    assert!(matches!(err, Error::TxnConflict { .. }), "{err:?}");
    assert_eq!(puts.len(), 2);
    store.close().unwrap();
}

/// A message whose properties fit alone but not with the ones its half adds (real topic and
/// queue, group, transaction id): `PropertiesTooLarge` before anything of the batch is written.
#[test]
fn a_half_whose_added_properties_overflow_the_limit_rejects_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    let mut props = Vec::new();
    properties::push(&mut props, "k", &"v".repeat(32_700));
    let fat = MessageRef {
        properties: &props,
        ..MessageRef::new("T", 0, b"x")
    };
    store
        .txn_prepare(&fat, Routing::Queue(0), "G", "t")
        .unwrap_err();
    let end = store.commit_log_range().1;
    // The first half fills a piece (half a 128 KiB file): the fat one would be the next
    // append's.
    let big = vec![b'a'; 60_000];
    let items = [
        (MessageRef::new("T", 0, &big), Routing::Queue(0)),
        (fat, Routing::Queue(0)),
    ];
    let mut puts = Vec::new();
    let err = store
        .txn_prepare_batch(&items, "G", "t", &mut puts)
        .unwrap_err();
    assert!(matches!(err, Error::PropertiesTooLarge { .. }), "{err:?}");
    assert!(puts.is_empty());
    assert_eq!(store.commit_log_range().1, end, "nothing written");
    assert!(store.txn_list(None, true).unwrap().is_empty());
    store.close().unwrap();
}

/// Transactions begun in the same millisecond are listed in the order they began (log order),
/// not by id.
#[test]
fn transactions_of_one_millisecond_are_listed_in_log_order() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    for id in ["z", "m", "a"] {
        half(&store, id, b"x");
    }
    let ids: Vec<String> = store
        .txn_list(None, false)
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids, ["z", "m", "a"]);
    store.close().unwrap();
}
