//! Sync mode with pipelined puts: a `Wait::Pipelined` put appends without waiting for the disk and
//! `wait_durable` confirms a whole run of them with one group commit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use mqlite::{
    FlushMode, GetStatus, MessageRef, PutStatus, RoundRobin, Store, StoreConfig, TagFilter,
};

fn sync_config() -> StoreConfig {
    StoreConfig {
        flush_mode: FlushMode::Sync,
        ..common::small_config()
    }
}

#[test]
fn pipelined_puts_become_durable_and_readable_after_one_wait() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), sync_config()).unwrap();
    let body = [7u8; 100];
    let mut last_end = 0;
    for _ in 0..200 {
        let r = common::put_pipelined(&store, &MessageRef::new("T", 0, &body), None).unwrap();
        assert_eq!(r.status, PutStatus::PutOk);
        last_end = r.appended.physical_offset + u64::from(r.appended.size);
    }
    assert!(store
        .wait_durable(last_end, Duration::from_secs(10))
        .unwrap());
    assert!(
        store.flushed_offset() >= last_end,
        "confirmed before the disk"
    );
    let got = store
        .get_messages("T", 0, 0, 256, &TagFilter::all())
        .unwrap();
    assert_eq!(got.status, GetStatus::Found);
    assert_eq!(got.records.len(), 200);
    store.close().unwrap();

    // Everything confirmed is there after a reopen.
    let again = Store::open(dir.path(), sync_config()).unwrap();
    assert_eq!(again.queue_offsets("T", 0).unwrap(), (0, 200));
}

#[test]
fn threads_share_flushes_and_round_robin_spreads_queues() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), sync_config()).unwrap());
    store.create_topic("T", 4, 6, false, true).unwrap();
    let next = Arc::new(RoundRobin::new(0));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (store, next) = (Arc::clone(&store), Arc::clone(&next));
            std::thread::spawn(move || {
                let mut end = 0;
                for _ in 0..100 {
                    let r =
                        common::put_pipelined(&store, &MessageRef::new("T", 0, b"x"), Some(&next))
                            .unwrap();
                    end = end.max(r.appended.physical_offset + u64::from(r.appended.size));
                }
                assert!(store.wait_durable(end, Duration::from_secs(10)).unwrap());
                assert!(store.flushed_offset() >= end);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let per_queue: Vec<u64> = (0..4)
        .map(|q| store.queue_offsets("T", q).unwrap().1)
        .collect();
    assert_eq!(per_queue.iter().sum::<u64>(), 400);
    assert!(per_queue.iter().all(|&n| n == 100), "{per_queue:?}");
}

#[test]
fn wait_durable_in_async_mode_returns_at_once() {
    let store = Store::open_in_memory(common::small_config()).unwrap();
    let r = common::put_pipelined(&store, &MessageRef::new("T", 0, b"x"), None).unwrap();
    let end = r.appended.physical_offset + u64::from(r.appended.size);
    assert!(store.wait_durable(end, Duration::ZERO).unwrap());
    assert_eq!(store.queue_offsets("T", 0).unwrap(), (0, 1));
}
