//! A consume queue's disk follows its data: a new unit file reserves blocks for its first page
//! only and grows the reservation ahead of the writer, the rest of the file being a hole. The
//! files still have their full length at all times (RocketMQ requires it), and a reopened
//! store reserves again ahead of the writer before writing.
//!
//! Disk is measured as the blocks the files hold (`st_blocks`), not their length.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::{body, small_config};
use mqlite::consume_queue::INITIAL_RESERVE;
use mqlite::{MessageRef, Store, StoreConfig, TagFilter};

/// Units per file at the default size (1,000,000-byte files).
const UNITS: u64 = 50_000;
const FILE_BYTES: u64 = UNITS * 20;

/// Small commit-log files, default-size consume-queue files.
fn config() -> StoreConfig {
    StoreConfig {
        consume_queue_file_units: None,
        ..small_config()
    }
}

/// Every consume-queue file of the store.
fn cq_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for topic in std::fs::read_dir(root.join("consumequeue")).unwrap() {
        for queue in std::fs::read_dir(topic.unwrap().path()).unwrap() {
            for f in std::fs::read_dir(queue.unwrap().path()).unwrap() {
                out.push(f.unwrap().path());
            }
        }
    }
    out.sort();
    out
}

/// Bytes of disk blocks the file holds.
fn disk(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// The bodies of queue `q` of `topic` from offset 0, in order.
fn bodies(store: &Store, topic: &str, q: u32, max: usize) -> Vec<Vec<u8>> {
    let got = store
        .get_messages(topic, q, 0, max, &TagFilter::all())
        .unwrap();
    got.iter().map(|v| v.body().to_vec()).collect()
}

#[test]
fn queues_holding_one_message_each_take_a_page_of_disk_not_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let (topics, queues) = (25u32, 4u32);
    for t in 0..topics {
        let topic = format!("T{t}");
        store.create_topic(&topic, queues, 6, false, false).unwrap();
        for q in 0..queues {
            store
                .put(&MessageRef::new(&topic, q, &body(t.into())))
                .unwrap();
        }
    }
    store.flush().unwrap();
    let files = cq_files(dir.path());
    assert_eq!(files.len(), (topics * queues) as usize, "one file a queue");
    for f in &files {
        assert_eq!(std::fs::metadata(f).unwrap().len(), FILE_BYTES, "{f:?}");
        // A file system may round an allocation up to its block size (4 KiB here).
        assert!(
            disk(f) <= 2 * INITIAL_RESERVE,
            "{f:?} holds {} bytes of disk for one unit",
            disk(f)
        );
    }
    store.close().unwrap();
}

#[test]
fn a_cleanly_closed_store_has_full_length_queue_files_and_reopens_reserving_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    // Past the first page: the reservation grew ahead of the writer.
    let n = 1_000u64;
    for i in 0..n {
        store.put(&MessageRef::new("Grow", 0, &body(i))).unwrap();
    }
    store.put(&MessageRef::new("Grow", 1, &body(0))).unwrap();
    store.close().unwrap();

    // What RocketMQ requires: every file at its full length; the blocks follow the data.
    let q0 = common::cq_file(dir.path(), "Grow", 0, 0);
    let q1 = common::cq_file(dir.path(), "Grow", 1, 0);
    for f in [&q0, &q1] {
        assert_eq!(std::fs::metadata(f).unwrap().len(), FILE_BYTES, "{f:?}");
    }
    let data = n * 20;
    assert!(disk(&q0) >= data, "the units have blocks");
    assert!(
        disk(&q0) <= 2 * data + INITIAL_RESERVE,
        "{} bytes of disk for {data} bytes of units",
        disk(&q0)
    );
    assert!(disk(&q1) <= 2 * INITIAL_RESERVE);

    // A reopened writer reserves ahead of itself before writing past what is on disk.
    let store = Store::open(dir.path(), config()).unwrap();
    let more = 3_000u64;
    for i in n..n + more {
        store.put(&MessageRef::new("Grow", 0, &body(i))).unwrap();
    }
    for i in 1..300 {
        store.put(&MessageRef::new("Grow", 1, &body(i))).unwrap();
    }
    store.flush().unwrap();
    let want: Vec<Vec<u8>> = (0..n + more).map(body).collect();
    assert_eq!(bodies(&store, "Grow", 0, 10_000), want);
    assert_eq!(
        bodies(&store, "Grow", 1, 1_000),
        (0..300).map(body).collect::<Vec<_>>()
    );
    store.close().unwrap();
    let data = (n + more) * 20;
    assert!(disk(&q0) >= data);
    // Reserved at most twice the units, or a warm-ahead chunk (64 KiB) and the one after it.
    assert!(
        disk(&q0) <= (2 * data).max(data + (128 << 10)) + INITIAL_RESERVE,
        "{} bytes of disk for {data} bytes of units",
        disk(&q0)
    );
    assert!(disk(&q1) <= 2 * 300 * 20 + INITIAL_RESERVE);
    assert_eq!(std::fs::metadata(&q0).unwrap().len(), FILE_BYTES);
}
