//! Read-your-writes across handles: a put that returned has its record in its consume queue,
//! so a read-only follower (which cannot dispatch) opened afterwards reads it, whoever was to
//! dispatch it. The reput service thread is paused (`Reput::service_paused`) so that nothing
//! depends on whether the scheduler ran it yet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};

use super::{PutRequest, Routing, Store, TagFilter, Wait};
use crate::config::StoreConfig;
use crate::message::MessageRef;

/// Units per consume-queue file: a queue holding `UNITS` messages has a full first file, and
/// its next unit starts the second.
const UNITS: u64 = 64;

fn config() -> StoreConfig {
    StoreConfig {
        commit_log_file_size: Some(128 << 10),
        consume_queue_file_units: Some(UNITS),
        max_message_size: Some(64 << 10),
        ..Default::default()
    }
}

fn pause_dispatch_thread(store: &Store, paused: bool) {
    let reput = store.inner.reput.as_ref().expect("a writer dispatches");
    reput.service_paused.store(paused, Ordering::Release);
}

/// A `Wait::NoWait` put of `body` to queue 0 of `topic` (the Python producer's send in async
/// mode), counting the calls of its `wake_via`; returns the end of its record.
fn put_quick(store: &Store, topic: &str, body: &[u8], via_calls: &AtomicU32) -> u64 {
    let via = |run: &(dyn Fn() + Sync)| {
        via_calls.fetch_add(1, Ordering::SeqCst);
        run();
    };
    let req = PutRequest::new(Routing::Queue(0))
        .wait(Wait::NoWait)
        .wake_via(&via);
    let r = store
        .put_message(&MessageRef::new(topic, 0, body), &req)
        .unwrap()
        .expect("the append itself needs no new commit-log file");
    r.appended.physical_offset + u64::from(r.appended.size)
}

/// Bodies of up to `max` messages of queue 0 of `topic` from `offset`, as `store` reads them.
fn bodies(store: &Store, topic: &str, offset: u64, max: usize) -> Vec<Vec<u8>> {
    let r = store
        .get_messages(topic, 0, offset, max, &TagFilter::all())
        .unwrap();
    r.iter().map(|v| v.body().to_vec()).collect()
}

fn follower(dir: &std::path::Path) -> Store {
    Store::open(
        dir,
        StoreConfig {
            read_only: true,
            ..StoreConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn a_quick_put_whose_unit_starts_a_new_queue_file_is_read_by_a_follower_opened_after_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), config()).unwrap();
        store.create_topic("t", 1, 6, false, false).unwrap();
        for i in 0..UNITS {
            store
                .put(&MessageRef::new("t", 0, format!("{i}").as_bytes()))
                .unwrap();
        }
        store.close().unwrap();
    }
    // Reopened (sizes from the files), the queue's writer is parked and its next unit starts
    // the second file: the producer cannot write that unit without creating the file. Whole
    // log files are faulted in, so the append itself needs no wait.
    let writer = Store::open(
        dir.path(),
        StoreConfig {
            warm_mapped_files: true,
            ..StoreConfig::default()
        },
    )
    .unwrap();
    pause_dispatch_thread(&writer, true);
    let calls = AtomicU32::new(0);
    let end = put_quick(&writer, "t", b"more", &calls);
    assert!(
        writer.dispatched_offset() >= end,
        "the put returned before its record was dispatched"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the wait ran through wake_via"
    );
    let reader = follower(dir.path());
    assert_eq!(
        bodies(&reader, "t", UNITS - 1, 2),
        vec![format!("{}", UNITS - 1).into_bytes(), b"more".to_vec()]
    );
    drop(reader);
    pause_dispatch_thread(&writer, false);
    writer.close().unwrap();
}

#[test]
fn a_quick_put_to_a_queue_without_files_is_read_by_a_follower_opened_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), config()).unwrap();
    writer.create_topic("t", 1, 6, false, false).unwrap();
    writer.create_topic("u", 1, 6, false, false).unwrap();
    writer
        .put(&MessageRef::new("t", 0, b"open the log"))
        .unwrap();
    pause_dispatch_thread(&writer, true);
    // "u" has no consume-queue file yet: the producer cannot create it without waiting.
    let calls = AtomicU32::new(0);
    let end = put_quick(&writer, "u", b"first", &calls);
    assert!(
        writer.dispatched_offset() >= end,
        "the put returned before its record was dispatched"
    );
    let reader = follower(dir.path());
    assert_eq!(bodies(&reader, "u", 0, 1), vec![b"first".to_vec()]);
    drop(reader);
    pause_dispatch_thread(&writer, false);
    writer.close().unwrap();
}

#[test]
fn a_quick_put_the_producer_dispatches_itself_needs_no_wait() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), config()).unwrap();
    writer.create_topic("t", 1, 6, false, false).unwrap();
    writer.put(&MessageRef::new("t", 0, b"0")).unwrap();
    pause_dispatch_thread(&writer, true);
    // The queue's writer is live with room: the producer writes the unit itself, and nobody
    // waits for the message, so `wake_via` has nothing to run.
    let calls = AtomicU32::new(0);
    let end = put_quick(&writer, "t", b"1", &calls);
    assert!(writer.dispatched_offset() >= end);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    pause_dispatch_thread(&writer, false);
    writer.close().unwrap();
}
