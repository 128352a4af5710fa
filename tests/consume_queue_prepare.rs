//! The next consume-queue file of a queue written fast is created in the background
//! (prepare.rs) before the queue rolls to it; a slow queue, and a new queue, create theirs
//! when they need it. A prepared file never rolled to (all zeros) must not move the queue's
//! end, whether the store closed cleanly, crashed, or is read by a follower.
//!
//! The stores run on a manual clock: a queue is fast when it fills half a file before the
//! clock moves `FAST_HALF_FILE_MS`, which the tests decide by moving it (or not).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{body, cq_dir, read_queue, small_config};
use mqlite::consume_queue::FAST_HALF_FILE_MS;
use mqlite::util::clock::{now_ms, ManualClock};
use mqlite::{MessageRef, Store, StoreConfig};

const TOPIC: &str = "Prep";
/// `small_config`: 64 units of 20 bytes per consume-queue file.
const FILE_BYTES: u64 = 64 * 20;

fn cq_file(root: &Path, start: u64) -> PathBuf {
    common::cq_file(root, TOPIC, 0, start)
}

/// The start offsets of the files in queue `queue`'s directory, sorted.
fn queue_dir_files(root: &Path, queue: u32) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(cq_dir(root, TOPIC, queue))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    v.sort_unstable();
    v
}

/// A read-only follower of the store in `root`.
fn follower(root: &Path) -> Store {
    Store::open(
        root,
        StoreConfig {
            read_only: true,
            ..small_config()
        },
    )
    .unwrap()
}

/// `small_config` on a manual clock (returned too), which only moves when a test moves it.
fn clocked() -> (StoreConfig, ManualClock) {
    let clock = ManualClock::new(now_ms());
    let config = StoreConfig {
        clock: clock.clone().into(),
        ..small_config()
    };
    (config, clock)
}

fn put_range(store: &Store, from: u64, to: u64) {
    for i in from..to {
        let a = store.put(&MessageRef::new(TOPIC, 0, &body(i))).unwrap();
        assert_eq!(a.appended.queue_offset, i);
    }
}

fn assert_queue_holds(store: &Store, n: u64) {
    assert_eq!(store.queue_offsets(TOPIC, 0).unwrap(), (0, n));
    let read = read_queue(store, TOPIC, 0);
    let want: Vec<(u64, Vec<u8>)> = (0..n).map(|i| (i, body(i))).collect();
    assert_eq!(read, want);
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} was not prepared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// An exclusive writer: shared writers publish a prepared file at once and leave it at close
/// (another process may roll to it); the next first opener's recovery removes it.
fn exclusive(config: StoreConfig) -> StoreConfig {
    StoreConfig {
        shared_writers: false,
        ..config
    }
}

#[test]
fn the_next_file_is_prepared_before_the_roll_and_deleted_at_close_if_unused() {
    let dir = tempfile::tempdir().unwrap();
    // The clock never moves: the queue fills every half file at once, as fast as it gets.
    let store = Store::open(dir.path(), exclusive(clocked().0)).unwrap();
    // Past half of the first file: the second is created before any unit goes into it.
    put_range(&store, 0, 40);
    wait_for_file(&cq_file(dir.path(), FILE_BYTES));
    assert_eq!(store.queue_offsets(TOPIC, 0).unwrap(), (0, 40));
    // The roll uses it; past half of the second file, the third is prepared.
    put_range(&store, 40, 100);
    wait_for_file(&cq_file(dir.path(), 2 * FILE_BYTES));
    assert_queue_holds(&store, 100);
    store.close().unwrap();
    assert_eq!(
        queue_dir_files(dir.path(), 0),
        [0, FILE_BYTES],
        "the unused third file is gone"
    );
    let store = Store::open(dir.path(), small_config()).unwrap();
    assert_queue_holds(&store, 100);
    put_range(&store, 100, 140);
    assert_queue_holds(&store, 140);
}

#[test]
fn a_prepared_file_left_by_a_crash_moves_neither_the_writer_nor_a_follower() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    put_range(&store, 0, 40);
    store.close().unwrap();
    // What a crash leaves when it comes after the preparer made the next file: a file of
    // zeros after a partly filled one.
    std::fs::write(
        cq_file(dir.path(), FILE_BYTES),
        vec![0u8; FILE_BYTES as usize],
    )
    .unwrap();

    let follower = follower(dir.path());
    assert_queue_holds(&follower, 40);
    drop(follower);

    // Exclusive: a shared writer loads a queue at its first use beside other writers, and
    // keeps an all-zero last file (another process may have just rolled to it).
    let store = Store::open(dir.path(), exclusive(small_config())).unwrap();
    // Loaded at its first use (the store closed cleanly: FORMAT.md §4.1), the queue drops the
    // empty file then.
    assert_queue_holds(&store, 40);
    assert_eq!(
        queue_dir_files(dir.path(), 0),
        [0],
        "the empty file was deleted"
    );
    put_range(&store, 40, 80);
    assert_queue_holds(&store, 80);
}

#[test]
fn a_slow_queue_creates_its_next_file_when_it_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let (config, clock) = clocked();
    let store = Store::open(dir.path(), config).unwrap();
    put_range(&store, 0, 20);
    // Half of the first file (32 units) is reached after more than the fast pace allows.
    clock.advance(Duration::from_millis(FAST_HALF_FILE_MS as u64 + 1));
    put_range(&store, 20, 40);
    store.flush().unwrap(); // every file asked of the preparer is made
    assert_eq!(
        queue_dir_files(dir.path(), 0),
        [0],
        "nothing prepared ahead"
    );
    // The roll creates the second file; its half is reached at once: the third is prepared.
    put_range(&store, 40, 100);
    wait_for_file(&cq_file(dir.path(), 2 * FILE_BYTES));
    assert_queue_holds(&store, 100);
    store.close().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    assert_queue_holds(&store, 100);
}

#[test]
fn a_new_topics_queues_hold_no_file_before_their_first_unit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    store.create_topic(TOPIC, 3, 6, false, false).unwrap();
    store.flush().unwrap(); // every file asked of the preparer is made
    for q in 0..3 {
        assert!(cq_dir(dir.path(), TOPIC, q).is_dir(), "queue {q} exists");
        assert!(
            queue_dir_files(dir.path(), q).is_empty(),
            "queue {q} has a file"
        );
        assert_eq!(store.queue_offsets(TOPIC, q).unwrap(), (0, 0));
    }
    put_range(&store, 0, 10);
    assert_queue_holds(&store, 10);
    store.close().unwrap();
    assert_eq!(queue_dir_files(dir.path(), 0), [0]);
    for q in 1..3 {
        assert!(queue_dir_files(dir.path(), q).is_empty(), "queue {q}");
    }
    let store = Store::open(dir.path(), small_config()).unwrap();
    assert_queue_holds(&store, 10);
    for q in 1..3 {
        assert_eq!(store.queue_offsets(TOPIC, q).unwrap(), (0, 0));
        let a = store
            .put(&MessageRef::new(TOPIC, q, &body(q.into())))
            .unwrap();
        assert_eq!(a.appended.queue_offset, 0);
    }
}

#[test]
fn a_new_queues_first_file_left_empty_by_a_crash_is_an_empty_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    store.create_topic(TOPIC, 1, 6, false, false).unwrap();
    store.close().unwrap();
    // What a crash leaves after the preparer made the first file: one file of zeros.
    std::fs::write(cq_file(dir.path(), 0), vec![0u8; FILE_BYTES as usize]).unwrap();
    let follower = follower(dir.path());
    assert_eq!(follower.queue_offsets(TOPIC, 0).unwrap(), (0, 0));
    drop(follower);
    let store = Store::open(dir.path(), small_config()).unwrap();
    assert_eq!(store.queue_offsets(TOPIC, 0).unwrap(), (0, 0));
    put_range(&store, 0, 5);
    assert_queue_holds(&store, 5);
}

#[test]
fn flush_returns_after_the_files_being_made_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    // The default commit-log size: a new store's preparer first makes the 32 MiB commit-log
    // file and faults in its first 4 MiB, so the queue files asked for next are still to come
    // when an (otherwise quick) flush is called. The clock never moves: every queue is fast.
    let (config, _clock) = clocked();
    let config = StoreConfig {
        commit_log_file_size: None,
        ..config
    };
    let store = Store::open(dir.path(), config).unwrap();
    let queues = 8;
    store.create_topic(TOPIC, queues, 6, false, false).unwrap();
    for i in 0..40 {
        for q in 0..queues {
            store.put(&MessageRef::new(TOPIC, q, &body(i))).unwrap();
        }
    }
    store.flush().unwrap();
    let want = store.geometry().consume_queue_file_size();
    for q in 0..queues {
        let path = common::cq_file(dir.path(), TOPIC, q, want);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert_eq!(len, want, "{} after flush", path.display());
    }
}
