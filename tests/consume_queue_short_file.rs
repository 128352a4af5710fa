//! A consume-queue file shorter than the configured size (zero length or truncated) in a store
//! that was closed cleanly: the checkpoint says every unit was written, so only the commit log
//! can say what the file held. The writer rebuilds the queue's units from the commit log at
//! open; a read-only open writes nothing and serves the units before the short file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{body, cq_dir, cq_file, small_config};
use mqlite::{MessageRef, Store, StoreConfig, TagFilter};

const TOPIC: &str = "Short";
/// Units per consume-queue file (`small_config`).
const UNITS: u64 = 64;
const FILE_BYTES: u64 = UNITS * 20;
/// Messages in queue 0: three full files and part of a fourth. Queue 1 gets a few too.
const N: u64 = 3 * UNITS + 10;

fn store_with_messages() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    for i in 0..N {
        store.put(&MessageRef::new(TOPIC, 0, &body(i))).unwrap();
        if i % 16 == 0 {
            store
                .put(&MessageRef::new(TOPIC, 1, &body(10_000 + i)))
                .unwrap();
        }
    }
    store.close().unwrap();
    dir
}

fn truncate(path: &Path, len: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len).unwrap();
    f.sync_all().unwrap();
}

/// Every file of the store with its size (what a read-only open must leave as it is).
fn tree(root: &Path) -> BTreeMap<PathBuf, u64> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, u64>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.file_name().is_some_and(|n| n != "lock" && n != "wakeup") {
                out.insert(p.clone(), std::fs::metadata(&p).unwrap().len());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, &mut out);
    out
}

/// The queue offsets a read of `queue` from 0 returns, each checked to hold the body that was
/// sent with it (`body_of(queue offset)`).
fn readable(store: &Store, queue: u32, body_of: impl Fn(u64) -> Vec<u8>) -> Vec<u64> {
    let got = store
        .get_messages(TOPIC, queue, 0, 1000, &TagFilter::all())
        .unwrap();
    got.iter()
        .map(|v| {
            assert!(v.body() == body_of(v.queue_offset()), "wrong body");
            v.queue_offset()
        })
        .collect()
}

fn assert_whole_queue(store: &Store) {
    assert_eq!(readable(store, 0, body), (0..N).collect::<Vec<_>>());
    assert_eq!(store.queue_offsets(TOPIC, 0).unwrap(), (0, N));
    let q1 = readable(store, 1, |k| body(10_000 + 16 * k));
    assert_eq!(q1, (0..N.div_ceil(16)).collect::<Vec<_>>());
}

/// Shortens queue 0's file starting at `start` to `len` bytes, checks a read-only open (no
/// error, nothing written, the units before the file served), then a writable open (every
/// message readable, appends continue), then a clean reopen.
fn check(start: u64, len: u64) {
    let dir = store_with_messages();
    let root = dir.path();
    truncate(&cq_file(root, TOPIC, 0, start), len);

    let before = tree(root);
    let ro = Store::open(
        root,
        StoreConfig {
            read_only: true,
            ..small_config()
        },
    )
    .unwrap();
    let served = readable(&ro, 0, body);
    let before_short: Vec<u64> = (0..start / 20).collect();
    assert_eq!(
        served, before_short,
        "read-only: the units before the short file"
    );
    ro.close().unwrap();
    drop(ro);
    assert_eq!(tree(root), before, "a read-only open wrote");

    let store = Store::open(root, small_config()).unwrap();
    assert_whole_queue(&store);
    let a = store
        .put(&MessageRef::new(TOPIC, 0, &body(N)))
        .unwrap()
        .appended;
    assert_eq!(a.queue_offset, N);
    store.close().unwrap();
    drop(store);
    for f in std::fs::read_dir(cq_dir(root, TOPIC, 0)).unwrap() {
        assert_eq!(f.unwrap().metadata().unwrap().len(), FILE_BYTES);
    }
    let again = Store::open(root, small_config()).unwrap();
    assert_eq!(again.queue_offsets(TOPIC, 0).unwrap(), (0, N + 1));
    again.close().unwrap();
}

#[test]
fn last_file_truncated_to_zero_length_is_rebuilt() {
    check(3 * FILE_BYTES, 0);
}

#[test]
fn last_file_truncated_inside_a_unit_is_rebuilt() {
    check(3 * FILE_BYTES, 3 * 20 + 7);
}

#[test]
fn middle_file_truncated_to_zero_length_is_rebuilt() {
    check(FILE_BYTES, 0);
}

#[test]
fn middle_file_truncated_inside_a_unit_is_rebuilt() {
    check(2 * FILE_BYTES, FILE_BYTES / 2 + 13);
}

#[test]
fn first_file_truncated_to_zero_length_is_rebuilt() {
    check(0, 0);
}

#[test]
fn an_open_that_fails_before_the_rebuild_leaves_the_short_file_for_the_next() {
    let dir = store_with_messages();
    let root = dir.path();
    let short = cq_file(root, TOPIC, 0, FILE_BYTES);
    truncate(&short, 0);
    // Damage a record below the checkpoint so that recovery fails after the queues loaded.
    let log = common::commit_log_file(root, 0);
    let good = std::fs::read(&log).unwrap();
    let mut bad = good.clone();
    bad[100] ^= 0xFF; // inside the first record's body
    std::fs::write(&log, &bad).unwrap();
    match Store::open(root, small_config()) {
        Err(mqlite::Error::Corrupted { .. }) => {}
        other => panic!("expected Corrupted, got {other:?}"),
    }
    assert_eq!(
        std::fs::metadata(&short).unwrap().len(),
        0,
        "the short file went"
    );
    std::fs::write(&log, &good).unwrap();
    let store = Store::open(root, small_config()).unwrap();
    assert_whole_queue(&store);
    store.close().unwrap();
}
