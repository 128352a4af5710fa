//! `Wait::NoWait` puts (`Store::put_message`), the append a Python producer makes while keeping the GIL: what it
//! writes must be exactly what `put` writes (same queue offsets, records that pass every
//! check on read), it must decline, writing nothing, whenever it could wait (an unknown
//! topic, a large body, a roll to the next file), in sync mode it must append without waiting
//! for the disk (a pipelined send, confirmed by `wait_durable`), and the consume-queue units
//! it cannot write without creating or rolling a file must still reach their queues before
//! it returns (waiting through `wake_via`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use mqlite::RoundRobin;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{body, settle, small_config};
use mqlite::config::FlushMode;
use mqlite::store::QUICK_BODY_MAX;
use mqlite::{MessageRef, Store, StoreConfig, TagFilter};

fn config() -> StoreConfig {
    StoreConfig {
        // Whole files are faulted in at creation: no append waits for a page.
        warm_mapped_files: true,
        ..small_config()
    }
}

/// Every message of `topic:queue_id` as (queue offset, body), read back with CRC checks.
fn contents(store: &Store, topic: &str, queue_id: u32) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let r = store
            .get_messages(topic, queue_id, at, 64, &TagFilter::all())
            .unwrap();
        if r.records.is_empty() {
            return out;
        }
        for v in r.iter() {
            out.push((v.queue_offset(), v.body().to_vec()));
        }
        at = r.next_offset;
    }
}

/// A thread blocked in `wait_for_messages` until queue 0 of `topic` holds more than `offset`
/// messages (30 s at most); it returns whether they arrived.
fn wait_for_more_than(store: &Arc<Store>, topic: &'static str, offset: u64) -> JoinHandle<bool> {
    let store = Arc::clone(store);
    std::thread::spawn(move || {
        store
            .wait_for_messages(&[(topic, 0, offset)], Some(Duration::from_secs(30)))
            .unwrap()
    })
}

#[test]
fn quick_puts_store_what_put_stores() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let quick = Store::open(da.path(), config()).unwrap();
    let plain = Store::open(db.path(), config()).unwrap();
    for s in [&quick, &plain] {
        s.create_topic("T", 3, 6, false, false).unwrap();
    }
    let props = mqlite::message::properties::encode([("TAGS", "a"), ("KEYS", "k1 k2")]);
    let (rr_quick, rr_plain) = (RoundRobin::new(0), RoundRobin::new(0));
    let mut quick_count = 0;
    // 128 KiB commit-log files and 64-unit queue files: rolls of both happen on the way.
    for i in 0..3000u64 {
        let b = body(i);
        let m = MessageRef::new("T", 0, &b).with_properties(&props);
        let q = match common::put_nowait(&quick, &m, Some(&rr_quick), |w| w()).unwrap() {
            Some(r) => {
                quick_count += 1;
                r
            }
            None => {
                common::put_waiting(&quick, &m, Some(&rr_quick), mqlite::Wait::Durable).unwrap()
            }
        };
        let p = common::put_waiting(&plain, &m, Some(&rr_plain), mqlite::Wait::Durable).unwrap();
        assert_eq!(
            (q.queue_id, q.appended.queue_offset, q.appended.size),
            (p.queue_id, p.appended.queue_offset, p.appended.size),
            "message {i}"
        );
        assert_eq!(q.appended.physical_offset, p.appended.physical_offset);
    }
    // Declines happen only at the few file rolls.
    assert!(quick_count > 2900, "only {quick_count} quick puts");
    settle(&quick);
    for q in 0..3 {
        let got = contents(&quick, "T", q);
        assert_eq!(got.len(), 1000);
        assert_eq!(got, contents(&plain, "T", q), "queue {q}");
    }
    quick.close().unwrap();
    let reopened = Store::open(da.path(), config()).unwrap();
    assert_eq!(contents(&reopened, "T", 1), contents(&plain, "T", 1));
}

#[test]
fn quick_put_declines_whenever_it_could_wait_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The exclusive writer: it creates its first file at the first append (a shared writer
    // prepares it at open, so there is no such append to decline).
    let exclusive = StoreConfig {
        shared_writers: false,
        ..config()
    };
    let store = Store::open(dir.path(), exclusive).unwrap();
    store.create_topic("T", 2, 6, false, false).unwrap();
    let rr = RoundRobin::new(5);

    // No file yet: the first append creates it, so it is declined.
    let m = MessageRef::new("T", 0, b"x");
    assert!(common::put_nowait(&store, &m, Some(&rr), |w| w())
        .unwrap()
        .is_none());
    assert_eq!(
        rr.next("T", 2),
        5 % 2,
        "a declined send keeps its queue's turn"
    );
    store.put(&m).unwrap();

    // An unknown topic is neither created nor written.
    let unknown = MessageRef::new("Unknown", 0, b"x");
    assert!(common::put_nowait(&store, &unknown, None, |w| w())
        .unwrap()
        .is_none());
    assert!(store.topic("Unknown").unwrap().is_none());

    // A body over the limit is left to the blocking path.
    let big = vec![7u8; QUICK_BODY_MAX + 1];
    assert!(
        common::put_nowait(&store, &MessageRef::new("T", 0, &big), None, |w| w())
            .unwrap()
            .is_none()
    );

    // Invalid input is rejected as `put` rejects it.
    let bad = MessageRef::new("T", 9, b"x");
    assert!(common::put_nowait(&store, &bad, None, |w| w()).is_err());
    let bad_props = MessageRef::new("T", 0, b"x").with_properties(b"no separators");
    assert!(common::put_nowait(&store, &bad_props, None, |w| w()).is_err());

    assert_eq!(store.queue_offsets("T", 0).unwrap(), (0, 1));
    let end = store.commit_log_range().1;
    assert!(common::put_nowait(&store, &m, None, |w| w())
        .unwrap()
        .is_some());
    assert!(store.commit_log_range().1 > end);
}

#[test]
fn in_sync_mode_a_quick_put_is_pipelined_and_wait_durable_confirms_it() {
    let dir = tempfile::tempdir().unwrap();
    let sync_config = || StoreConfig {
        flush_mode: FlushMode::Sync,
        ..config()
    };
    let store = Store::open(dir.path(), sync_config()).unwrap();
    store.create_topic("T", 2, 6, false, false).unwrap();
    store
        .put(&MessageRef::new("T", 0, b"opens the log"))
        .unwrap();
    let rr = RoundRobin::new(0);
    let mut last = 0;
    for i in 0..200u32 {
        let b = body(u64::from(i));
        let r = common::put_nowait(&store, &MessageRef::new("T", 0, &b), Some(&rr), |w| w())
            .unwrap()
            .expect("a pipelined append in a warmed file needs no wait");
        assert_eq!(r.queue_id, i % 2, "round robin over the write queues");
        last = r.appended.physical_offset + u64::from(r.appended.size);
    }
    assert_eq!(store.commit_log_range().1, last);
    // The group commit was requested by the puts: confirming the last covers them all, and
    // makes them readable.
    assert!(store.wait_durable(last, Duration::from_secs(10)).unwrap());
    assert!(store.flushed_offset() >= last);
    let q0 = contents(&store, "T", 0);
    let q1 = contents(&store, "T", 1);
    assert_eq!((q0.len(), q1.len()), (101, 100));
    assert_eq!(q1[99], (99, body(199)));
    drop(store);
    let store = Store::open(dir.path(), sync_config()).unwrap();
    assert_eq!(
        contents(&store, "T", 1),
        q1,
        "confirmed records survive a reopen"
    );
}

#[test]
fn units_the_producer_cannot_write_inline_reach_their_queue_before_the_put_returns() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), config()).unwrap());
    store.create_topic("T", 1, 6, false, false).unwrap();
    store.create_topic("U", 1, 6, false, false).unwrap();
    store
        .put(&MessageRef::new("T", 0, b"open the log"))
        .unwrap();
    settle(&store);
    // U's consume queue does not exist: the commit log takes the record at once, and the put
    // waits (through `wake_via`) for its queue to be created, which also wakes a waiting
    // reader.
    let waiter = wait_for_more_than(&store, "U", 0);
    std::thread::sleep(Duration::from_millis(50));
    let r = common::put_nowait(&store, &MessageRef::new("U", 0, b"first"), None, |w| w())
        .unwrap()
        .expect("the append itself needs no new file");
    assert_eq!(r.appended.queue_offset, 0);
    assert!(waiter.join().unwrap(), "the reader was not woken");
    settle(&store);
    assert_eq!(contents(&store, "U", 0), vec![(0, b"first".to_vec())]);
}

#[test]
fn a_waiting_consumer_is_woken_through_wake_via_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), config()).unwrap());
    store.create_topic("T", 1, 6, false, false).unwrap();
    store.put(&MessageRef::new("T", 0, b"0")).unwrap();
    settle(&store);
    let calls = AtomicU32::new(0);
    let counted = |w: &(dyn Fn() + Sync)| {
        calls.fetch_add(1, Ordering::SeqCst);
        w();
    };
    // Nobody waits: no wake-up to make.
    let m = MessageRef::new("T", 0, b"1");
    assert!(common::put_nowait(&store, &m, None, counted)
        .unwrap()
        .is_some());
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // The waiter wants a message 20 puts ahead: every put made while it waits wakes it
    // through `wake_via` (it re-checks and waits again until the 20th).
    let waiter = wait_for_more_than(&store, "T", 21);
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(10));
        assert!(common::put_nowait(&store, &m, None, counted)
            .unwrap()
            .is_some());
    }
    assert!(waiter.join().unwrap());
    let woken = calls.load(Ordering::SeqCst);
    assert!((1..=20).contains(&woken), "{woken} wake-ups");
}

#[test]
fn a_quick_put_stamps_the_callers_clock_reading_and_store_time_never_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    store.put(&MessageRef::new("T", 0, b"first")).unwrap();
    let stamp = |s: &Store, offset: u64| {
        let r = s
            .get_messages("T", 0, offset, 1, &TagFilter::all())
            .unwrap();
        let ts = r.iter().next().unwrap().store_timestamp();
        ts
    };
    let first = stamp(&store, 0);
    // A reading later than the log's latest stamp is the record's store timestamp as given.
    let later = first + 60_000;
    let m = MessageRef::new("T", 0, b"later");
    let r = common::put_nowait_at(&store, &m, None, later, |w| w()).unwrap();
    assert!(r.is_some(), "the quick put was declined");
    settle(&store);
    assert_eq!(stamp(&store, 1), later);
    // An older reading (a caller that read the clock before another thread appended) does
    // not put the log's store time back.
    let m = MessageRef::new("T", 0, b"earlier");
    assert!(common::put_nowait_at(&store, &m, None, first - 5, |w| w())
        .unwrap()
        .is_some());
    // Nor does a blocking put or a batch, which read the clock themselves.
    store.put(&MessageRef::new("T", 0, b"blocking")).unwrap();
    let batch = [
        MessageRef::new("T", 0, b"b1"),
        MessageRef::new("T", 0, b"b2"),
    ];
    let mut out = Vec::new();
    store.put_batch(&batch, &mut out).unwrap();
    settle(&store);
    for offset in 2..6 {
        assert_eq!(stamp(&store, offset), later, "offset {offset}");
    }
}
