//! Opening after a clean close takes the consume queues from their clean-shutdown record
//! (`queues.clean`, FORMAT.md §4.1) and loads a queue's files only at its first use; after a
//! crash, or with a record that does not match the store, every queue is loaded as before. In
//! every case each queue's offsets stay exact and sends continue each queue's offsets.
//!
//! The number of queues loaded is counted by `consume_queue::store::queue_loads`, a process-wide
//! counter: the tests of this file take `SERIAL` so that no other test loads queues meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Mutex;

use mqlite::consume_queue::store::queue_loads;
use mqlite::{MessageRef, Store};

use common::{read_queue, small_config};

static SERIAL: Mutex<()> = Mutex::new(());

const TOPICS: usize = 20;
const QUEUES: u32 = 4;

fn topic(i: usize) -> String {
    format!("t{i:03}")
}

/// A store of `TOPICS` x `QUEUES` queues, queue `q` of every topic holding `q + 1` messages,
/// closed cleanly.
fn build(root: &Path) {
    let store = Store::open(root, small_config()).unwrap();
    for i in 0..TOPICS {
        for q in 0..QUEUES {
            for _ in 0..=q {
                store
                    .put(&MessageRef::new(
                        &topic(i),
                        q,
                        format!("{i}/{q}").as_bytes(),
                    ))
                    .unwrap();
            }
        }
    }
    store.close().unwrap();
}

/// Opens the store; returns it and how many queues the open loaded.
fn open_counting(root: &Path) -> (Store, u64) {
    let before = queue_loads();
    let store = Store::open(root, small_config()).unwrap();
    (store, queue_loads() - before)
}

fn assert_exact(store: &Store) {
    for i in 0..TOPICS {
        for q in 0..QUEUES {
            assert_eq!(
                store.queue_offsets(&topic(i), q).unwrap(),
                (0, u64::from(q) + 1),
                "{}:{q}",
                topic(i)
            );
        }
    }
}

#[test]
fn clean_open_loads_no_queue_and_first_use_loads_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    build(root);
    assert!(root.join("queues.clean").exists());

    let (store, loaded) = open_counting(root);
    assert_eq!(loaded, 0, "a clean open loaded {loaded} queues");
    // The record is gone once the open used it: a later crash cannot find it.
    assert!(!root.join("queues.clean").exists());
    let before = queue_loads();
    assert_eq!(store.queue_offsets("t003", 2).unwrap(), (0, 3));
    assert_eq!(queue_loads() - before, 1, "one queue used, one loaded");
    // A send to a queue never loaded continues its offsets (the appender had them from the
    // record), and its unit lands after the ones on disk.
    let put = store.put(&MessageRef::new("t007", 1, b"next")).unwrap();
    assert_eq!(put.appended.queue_offset, 2);
    common::settle(&store);
    let got = read_queue(&store, "t007", 1);
    assert_eq!(
        got,
        vec![
            (0, b"7/1".to_vec()),
            (1, b"7/1".to_vec()),
            (2, b"next".to_vec())
        ]
    );
    store.close().unwrap();

    // The next clean close recorded the loaded queues as they are and the others as they were.
    let (store, loaded) = open_counting(root);
    assert_eq!(loaded, 0);
    assert_eq!(store.queue_offsets("t007", 1).unwrap(), (0, 3));
    assert_eq!(store.queue_offsets("t007", 2).unwrap(), (0, 3));
    assert_eq!(store.queue_offsets("t019", 0).unwrap(), (0, 1));
    store.close().unwrap();
}

#[test]
fn open_after_a_crash_loads_every_queue_and_ignores_the_record() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    build(root);
    // As a writer killed after the close wrote the record, before it removed the abort
    // marker, leaves the store.
    std::fs::write(root.join("abort"), b"1").unwrap();
    let (store, loaded) = open_counting(root);
    assert_eq!(loaded, u64::from(QUEUES) * TOPICS as u64);
    assert!(!root.join("queues.clean").exists());
    assert_exact(&store);
    store.close().unwrap();
}

#[test]
fn a_record_that_does_not_match_the_store_is_not_trusted() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    build(root);
    let stale = std::fs::read(root.join("queues.clean")).unwrap();
    // One more message to t000:0, then a clean close; the previous close's record is put
    // back: it names a commit-log end the store has passed.
    let store = Store::open(root, small_config()).unwrap();
    store.put(&MessageRef::new("t000", 0, b"more")).unwrap();
    store.close().unwrap();
    std::fs::write(root.join("queues.clean"), &stale).unwrap();
    let (store, loaded) = open_counting(root);
    assert_eq!(loaded, u64::from(QUEUES) * TOPICS as u64);
    assert_eq!(store.queue_offsets("t000", 0).unwrap(), (0, 2));
    let put = store.put(&MessageRef::new("t000", 0, b"again")).unwrap();
    assert_eq!(put.appended.queue_offset, 2);
    store.close().unwrap();

    // A damaged record (one flipped byte) is not used either.
    let mut torn = std::fs::read(root.join("queues.clean")).unwrap();
    torn[30] ^= 1;
    std::fs::write(root.join("queues.clean"), &torn).unwrap();
    let (store, loaded) = open_counting(root);
    assert_eq!(loaded, u64::from(QUEUES) * TOPICS as u64);
    assert_eq!(store.queue_offsets("t000", 0).unwrap(), (0, 3));
    store.close().unwrap();
}

#[test]
fn a_queue_a_damaged_unit_cut_short_is_reindexed_at_first_use() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    build(root);
    // Media damage while the store was closed: t005:3's second unit reads as zeros, a valid
    // unit after it.
    let file = common::cq_file(root, "t005", 3, 0);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[20..40].fill(0);
    std::fs::write(&file, &bytes).unwrap();
    let (store, loaded) = open_counting(root);
    assert_eq!(loaded, 0);
    assert_eq!(store.queue_offsets("t005", 3).unwrap(), (0, 4));
    let got: Vec<u64> = read_queue(&store, "t005", 3).iter().map(|m| m.0).collect();
    assert_eq!(got, vec![0, 1, 2, 3]);
    let put = store.put(&MessageRef::new("t005", 3, b"next")).unwrap();
    assert_eq!(put.appended.queue_offset, 4);
    store.close().unwrap();
}

#[test]
fn a_queue_that_does_not_end_where_the_record_says_is_reported_on_first_use() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    build(root);
    // A queue's file deleted behind the closed store's back.
    std::fs::remove_file(common::cq_file(root, "t005", 3, 0)).unwrap();
    let (store, _) = open_counting(root);
    let err = store.queue_offsets("t005", 3).unwrap_err();
    assert!(matches!(err, mqlite::Error::Corrupted { .. }), "{err:?}");
    assert!(err.to_string().contains("t005:3"), "{err}");
    // Nothing was written for it, and the other queues are served.
    assert!(!common::cq_file(root, "t005", 3, 0).exists());
    assert_eq!(store.queue_offsets("t005", 2).unwrap(), (0, 3));
    store.close().unwrap();
}
