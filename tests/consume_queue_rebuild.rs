//! Consume-queue rebuild from the commit log after a crash: units lost or torn above the
//! checkpoint's dispatched watermark are re-created by re-dispatch at open.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::{
    body, child_dir, child_ready_and_wait, cq_dir, cq_file, crash_child, read_queue, settle,
};
use mqlite::{GetStatus, MessageRef, Store, StoreConfig, TagFilter};

const TOPIC: &str = "Rebuild";
/// Messages in queue 0 before the crash (cleanly closed: below the watermark).
const M: u64 = 20;
/// Messages the crashing child adds to queue 0 (above the watermark).
const K: u64 = 30;

fn config() -> StoreConfig {
    StoreConfig {
        flush_interval: Duration::from_secs(60),
        ..common::small_config()
    }
}

fn clean_prefix(root: &Path) {
    let store = Store::open(root, config()).unwrap();
    for i in 0..M {
        let b = body(i);
        store.put(&MessageRef::new(TOPIC, 0, &b)).unwrap();
    }
    store.close().unwrap();
}

fn child_puts(root: &Path) -> ! {
    let store = Store::open(root, config()).unwrap();
    for i in M..M + K {
        let b = body(i);
        store.put(&MessageRef::new(TOPIC, 0, &b)).unwrap();
        let b1 = body(10_000 + i);
        store.put(&MessageRef::new(TOPIC, 1, &b1)).unwrap();
    }
    settle(&store);
    child_ready_and_wait("done")
}

fn crashed_store(test_name: &str) -> tempfile::TempDir {
    if let Some(d) = child_dir() {
        child_puts(&d);
    }
    let dir = tempfile::tempdir().unwrap();
    clean_prefix(dir.path());
    assert_eq!(crash_child(test_name, dir.path()), "done");
    // The child's units are in the consume-queue file (64 units per file: offsets 0..50).
    let cq = std::fs::read(cq_file(dir.path(), TOPIC, 0, 0)).unwrap();
    assert_ne!(&cq[((M + K - 1) * 20 + 8) as usize..][..4], &[0, 0, 0, 0]);
    dir
}

fn assert_all_readable(store: &Store) {
    let read = read_queue(store, TOPIC, 0);
    let want: Vec<(u64, Vec<u8>)> = (0..M + K).map(|i| (i, body(i))).collect();
    assert_eq!(read, want);
    assert_eq!(store.queue_offsets(TOPIC, 0).unwrap(), (0, M + K));
    let q1 = store
        .get_messages(TOPIC, 1, 0, 1000, &TagFilter::all())
        .unwrap();
    assert_eq!(q1.records.len() as u64, K);
    for (i, v) in q1.iter().enumerate() {
        assert_eq!(v.body(), body(10_000 + M + i as u64).as_slice());
    }
    // New puts continue after the rebuilt units.
    let b = body(M + K);
    let a = store.put(&MessageRef::new(TOPIC, 0, &b)).unwrap().appended;
    assert_eq!(a.queue_offset, M + K);
}

fn zero_range(path: &Path, from: u64, len: u64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(from)).unwrap();
    f.write_all(&vec![0u8; len as usize]).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn units_zeroed_above_watermark_are_rebuilt() {
    let dir = crashed_store("units_zeroed_above_watermark_are_rebuilt");
    let path = cq_file(dir.path(), TOPIC, 0, 0);
    // Lose every unit the child wrote (as if its consume-queue pages never reached the disk).
    zero_range(&path, M * 20, K * 20);
    let store = Store::open(dir.path(), config()).unwrap();
    assert!(store.recovery_report().abnormal);
    assert_all_readable(&store);
}

#[test]
fn units_torn_in_the_middle_above_watermark_are_rebuilt() {
    let dir = crashed_store("units_torn_in_the_middle_above_watermark_are_rebuilt");
    let path = cq_file(dir.path(), TOPIC, 0, 0);
    // A hole in the middle of the child's units: the valid prefix ends at the hole and
    // everything after it is re-created from the commit log.
    zero_range(&path, (M + 5) * 20 + 8, 4);
    let store = Store::open(dir.path(), config()).unwrap();
    assert_all_readable(&store);
}

#[test]
fn cq_file_truncated_to_a_partial_unit_is_rebuilt() {
    let dir = crashed_store("cq_file_truncated_to_a_partial_unit_is_rebuilt");
    let path = cq_file(dir.path(), TOPIC, 0, 0);
    // Cut inside unit M+3 (before its size word): a short last file is re-preallocated.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len((M + 3) * 20 + 7).unwrap();
    drop(f);
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * 20);
    assert_all_readable(&store);
}

/// Deleting a queue's directory loses units *below* the checkpoint's dispatched offset too.
/// Re-dispatch starts at the checkpoint, so those are not rebuilt: the queue restarts at the
/// first re-dispatched record (offsets below it read as OFFSET_TOO_SMALL). This test asserts
/// the complete rebuild a user would expect and is ignored while that limitation stands.
#[test]
#[ignore = "known limitation: re-dispatch starts at the checkpoint, units below it are not rebuilt"]
fn deleted_queue_directory_is_rebuilt_completely() {
    let dir = crashed_store("deleted_queue_directory_is_rebuilt_completely");
    std::fs::remove_dir_all(cq_dir(dir.path(), TOPIC, 0)).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_all_readable(&store);
}

/// What happens today when a queue directory is deleted (see the ignored test above).
#[test]
fn deleted_queue_directory_keeps_only_units_above_watermark() {
    let dir = crashed_store("deleted_queue_directory_keeps_only_units_above_watermark");
    std::fs::remove_dir_all(cq_dir(dir.path(), TOPIC, 0)).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let (min, max) = store.queue_offsets(TOPIC, 0).unwrap();
    assert_eq!((min, max), (M, M + K));
    let r = store
        .get_messages(TOPIC, 0, 0, 1000, &TagFilter::all())
        .unwrap();
    assert_eq!(r.status, GetStatus::OffsetTooSmall);
    assert_eq!(r.status.name(), "OFFSET_TOO_SMALL");
    assert_eq!(r.next_offset, M);
    let r = store
        .get_messages(TOPIC, 0, M, 1000, &TagFilter::all())
        .unwrap();
    assert_eq!(r.status, GetStatus::Found);
    let got: Vec<Vec<u8>> = r.iter().map(|v| v.body().to_vec()).collect();
    let want: Vec<Vec<u8>> = (M..M + K).map(body).collect();
    assert_eq!(got, want);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// Units lost in a consume-queue file that a later file follows (a power cut wrote back the
/// later file's page but not the earlier one's) are re-created: the hole cuts the queue at
/// open and dispatch refills it, rather than a read failing on it.
#[test]
fn units_lost_before_a_later_file_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    clean_prefix(&live);
    let total = 80; // 64 units per file: file 0 holds 0..64, file 1 holds 64..80
    let store = Store::open(&live, config()).unwrap();
    for i in M..total {
        let b = body(i);
        store.put(&MessageRef::new(TOPIC, 0, &b)).unwrap();
    }
    settle(&store);
    // The store as a crash leaves it (abort marker, checkpoint at M), then the lost page.
    let image = dir.path().join("image");
    copy_dir(&live, &image);
    store.close().unwrap();
    zero_range(&cq_file(&image, TOPIC, 0, 0), 50 * 20, 14 * 20);
    let opened = Store::open(&image, config()).unwrap();
    assert!(opened.recovery_report().abnormal);
    let read = read_queue(&opened, TOPIC, 0);
    let wrong: Vec<u64> = (0..total)
        .filter(|&i| read.get(i as usize) != Some(&(i, body(i))))
        .collect();
    assert!(
        read.len() as u64 == total && wrong.is_empty(),
        "{} of {total} read; wrong or missing offsets: {wrong:?}",
        read.len()
    );
    let b = body(total);
    let a = opened.put(&MessageRef::new(TOPIC, 0, &b)).unwrap().appended;
    assert_eq!(a.queue_offset, total);
    opened.close().unwrap();
}
