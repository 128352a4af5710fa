//! Recovery after a clean close, after a process crash (a child process SIGKILLed after its
//! puts), with the tail of the commit log damaged in several ways, and with damage below the
//! durable watermark (which must be reported, not truncated away).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use common::{body, child_dir, child_ready_and_wait, commit_log_file, crash_child, settle};
use mqlite::checkpoint::CheckpointData;
use mqlite::{Error, MessageRef, Store, StoreConfig, TagFilter};

const TOPIC: &str = "Crash";
/// Messages written and cleanly closed before the crash (queue 0).
const M: u64 = 10;
/// Messages the crashing child writes to queue 0.
const K: u64 = 10;
/// Messages in queue 1: 3 before the crash, 2 by the child.
const Q1_BEFORE: u64 = 3;
const Q1_CHILD: u64 = 2;

fn config() -> StoreConfig {
    StoreConfig {
        // No background flush during the child's life: its records stay above the durable
        // watermark, as after a crash between two flushes.
        flush_interval: Duration::from_secs(60),
        ..common::small_config()
    }
}

fn file_size() -> u64 {
    config().commit_log_file_size.unwrap_or_default()
}

fn q1_body(i: u64) -> Vec<u8> {
    let mut b = body(1000 + i);
    b.insert(0, b'Q');
    b
}

/// Writes M messages to queue 0 and 3 to queue 1, and closes cleanly.
fn clean_prefix(root: &Path) {
    let store = Store::open(root, config()).unwrap();
    for i in 0..M {
        let b = body(i);
        assert_eq!(
            store
                .put(&MessageRef::new(TOPIC, 0, &b))
                .unwrap()
                .appended
                .queue_offset,
            i
        );
    }
    for i in 0..Q1_BEFORE {
        let b = q1_body(i);
        store.put(&MessageRef::new(TOPIC, 1, &b)).unwrap();
    }
    store.close().unwrap();
}

/// The crash child: K more messages to queue 0 (the last record is a queue-0 record) and 2 to
/// queue 1, no flush, then wait for SIGKILL. Prints "<phys> <size>" of the last record.
fn child_puts(root: &Path) -> ! {
    let store = Store::open(root, config()).unwrap();
    let mut last = None;
    for i in 0..K {
        if i == 3 || i == 6 {
            let b = q1_body(Q1_BEFORE + u64::from(i == 6));
            store.put(&MessageRef::new(TOPIC, 1, &b)).unwrap();
        }
        let b = body(M + i);
        last = Some(store.put(&MessageRef::new(TOPIC, 0, &b)).unwrap().appended);
    }
    settle(&store);
    let last = last.unwrap();
    child_ready_and_wait(&format!("{} {}", last.physical_offset, last.size))
}

fn parse_info(info: &str) -> (u64, u64) {
    let mut it = info.split_whitespace().map(|s| s.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

fn write_at(path: &Path, at: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

fn read_queue(store: &Store, queue: u32) -> Vec<(u64, Vec<u8>)> {
    let got = store
        .get_messages(TOPIC, queue, 0, 1000, &TagFilter::all())
        .unwrap();
    got.iter()
        .map(|v| (v.queue_offset(), v.body().to_vec()))
        .collect()
}

fn assert_queue0(store: &Store, n: u64) {
    let got = read_queue(store, 0);
    assert_eq!(got.len() as u64, n);
    for (i, (qo, b)) in got.iter().enumerate() {
        assert_eq!(*qo, i as u64);
        assert_eq!(*b, body(i as u64), "body of queue offset {i}");
    }
    assert_eq!(store.queue_offsets(TOPIC, 0).unwrap(), (0, n));
}

fn assert_queue1(store: &Store) {
    let got = read_queue(store, 1);
    assert_eq!(got.len() as u64, Q1_BEFORE + Q1_CHILD);
    for (i, (qo, b)) in got.iter().enumerate() {
        assert_eq!(*qo, i as u64);
        assert_eq!(*b, q1_body(i as u64));
    }
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    /// Zero the second half of the last record (a write torn by a power loss).
    ZeroTail,
    /// Flip one bit in the last record's body.
    FlipBodyBit,
    /// Garbage after the last record.
    Garbage,
}

fn crash_and_damage(test_name: &str, damage: Damage) {
    if let Some(d) = child_dir() {
        child_puts(&d);
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    clean_prefix(root);
    let (phys, size) = parse_info(&crash_child(test_name, root));
    assert!(
        root.join("abort").exists(),
        "a killed writer leaves its abort file"
    );
    let fs = file_size();
    let path = commit_log_file(root, phys - phys % fs);
    let local = phys % fs;
    let expected_end = match damage {
        Damage::ZeroTail => {
            write_at(
                &path,
                local + size / 2,
                &vec![0u8; (size - size / 2) as usize],
            );
            phys
        }
        Damage::FlipBodyBit => {
            let at = local + 88 + 3;
            let mut b = [0u8; 1];
            b[0] = std::fs::read(&path).unwrap()[at as usize] ^ 0x10;
            write_at(&path, at, &b);
            phys
        }
        Damage::Garbage => {
            write_at(&path, local + size, &[0xA5; 64]);
            phys + size
        }
    };
    let intact = if matches!(damage, Damage::Garbage) {
        M + K
    } else {
        M + K - 1
    };

    let store = Store::open(root, config()).unwrap();
    let report = store.recovery_report();
    assert!(report.abnormal, "{report:?}");
    assert!(report.torn_tail, "{report:?}");
    assert_eq!(report.end, expected_end, "{report:?}");
    assert_eq!(store.commit_log_range().1, expected_end);
    assert_queue0(&store, intact);
    assert_queue1(&store);
    // The cut tail was zeroed on disk, so the torn bytes can never be read back.
    let bytes = std::fs::read(&path).unwrap();
    let from = (expected_end % fs) as usize;
    assert!(
        bytes[from..from + size as usize + 64]
            .iter()
            .all(|&b| b == 0),
        "tail after the recovered end must be zeroed"
    );
    // The damaged record cannot be fetched by its offset either.
    if !matches!(damage, Damage::Garbage) {
        assert!(matches!(
            store.get_by_offset(phys, |v| v.queue_offset()),
            Err(Error::MessageNotFound { .. })
        ));
    }

    // New puts continue at the right queue offsets and survive another reopen.
    let extra = body(intact);
    let a = store
        .put(&MessageRef::new(TOPIC, 0, &extra))
        .unwrap()
        .appended;
    assert_eq!(a.queue_offset, intact);
    assert_eq!(a.physical_offset, expected_end);
    let q1 = q1_body(Q1_BEFORE + Q1_CHILD);
    let b = store.put(&MessageRef::new(TOPIC, 1, &q1)).unwrap().appended;
    assert_eq!(b.queue_offset, Q1_BEFORE + Q1_CHILD);
    store.close().unwrap();
    assert!(!root.join("abort").exists());

    let store = Store::open(root, config()).unwrap();
    let report = store.recovery_report();
    assert!(!report.abnormal && !report.torn_tail, "{report:?}");
    assert_queue0(&store, intact + 1);
    let q1_all = read_queue(&store, 1);
    assert_eq!(q1_all.len() as u64, Q1_BEFORE + Q1_CHILD + 1);
    assert_eq!(q1_all.last().unwrap().1, q1);
}

#[test]
fn crash_with_zeroed_tail_of_last_record() {
    crash_and_damage("crash_with_zeroed_tail_of_last_record", Damage::ZeroTail);
}

#[test]
fn crash_with_flipped_bit_in_last_record() {
    crash_and_damage("crash_with_flipped_bit_in_last_record", Damage::FlipBodyBit);
}

#[test]
fn crash_with_garbage_after_last_record() {
    crash_and_damage("crash_with_garbage_after_last_record", Damage::Garbage);
}

#[test]
fn crash_without_damage_keeps_every_record() {
    if let Some(d) = child_dir() {
        child_puts(&d);
    }
    let dir = tempfile::tempdir().unwrap();
    clean_prefix(dir.path());
    let (phys, size) = parse_info(&crash_child(
        "crash_without_damage_keeps_every_record",
        dir.path(),
    ));
    let store = Store::open(dir.path(), config()).unwrap();
    let report = store.recovery_report();
    assert!(report.abnormal, "{report:?}");
    assert!(!report.torn_tail, "{report:?}");
    assert_eq!(report.end, phys + size);
    assert_queue0(&store, M + K);
    assert_queue1(&store);
}

#[test]
fn clean_close_then_reopen_sees_everything() {
    let dir = tempfile::tempdir().unwrap();
    clean_prefix(dir.path());
    assert!(!dir.path().join("abort").exists());
    let store = Store::open(dir.path(), config()).unwrap();
    let report = store.recovery_report();
    assert!(!report.abnormal, "{report:?}");
    assert!(!report.torn_tail, "{report:?}");
    assert!(
        dir.path().join("abort").exists(),
        "an open writer holds the abort file"
    );
    assert_queue0(&store, M);
    let got = read_queue(&store, 1);
    assert_eq!(got.len() as u64, Q1_BEFORE);
    let cp = store.checkpoint().unwrap();
    assert_eq!(cp.confirm_phy_offset, store.commit_log_range().1);
}

#[test]
fn forgotten_store_keeps_its_lock_in_this_process() {
    let dir = tempfile::tempdir().unwrap();
    let exclusive = StoreConfig {
        shared_writers: false,
        ..config()
    };
    let store = Store::open(dir.path(), exclusive.clone()).unwrap();
    let b = body(0);
    store.put(&MessageRef::new(TOPIC, 0, &b)).unwrap();
    store.flush().unwrap();
    // Dropping would close; forgetting leaks the open lock file description (and its flock).
    std::mem::forget(store);
    let err = Store::open(dir.path(), exclusive).unwrap_err();
    assert!(matches!(err, Error::StoreLocked { .. }), "{err:?}");
    // A read-only open takes no lock and sees the flushed data.
    let ro = Store::open(
        dir.path(),
        StoreConfig {
            read_only: true,
            ..config()
        },
    )
    .unwrap();
    assert_eq!(read_queue(&ro, 0), vec![(0, b)]);
}

/// Rewrites both checkpoint slots.
fn write_checkpoint(root: &Path, data: &CheckpointData) {
    let slot = data.encode();
    let path = root.join("checkpoint");
    write_at(&path, 0, &slot);
    write_at(&path, 2048, &slot);
}

fn flip_first_record_body_bit(root: &Path) -> u8 {
    let path = commit_log_file(root, 0);
    let mut b = [0u8; 1];
    b[0] = std::fs::read(&path).unwrap()[88] ^ 0x01;
    write_at(&path, 88, &b);
    b[0]
}

#[test]
fn damage_below_durable_watermark_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    clean_prefix(root);
    let cp = {
        let store = Store::open(root, config()).unwrap();
        let cp = store.checkpoint().unwrap();
        assert_eq!(cp.confirm_phy_offset, store.commit_log_range().1);
        cp
    };
    assert!(cp.confirm_phy_offset > 0);
    // A checkpoint whose dispatched offset lags the flushed one (the flush thread flushed the
    // commit log before the consume queues caught up): recovery scans from the dispatched
    // offset, and everything below confirmPhyOffset must be intact.
    write_checkpoint(
        root,
        &CheckpointData {
            logics_dispatched_offset: 0,
            ..cp
        },
    );
    let flipped = flip_first_record_body_bit(root);
    let err = Store::open(root, config()).unwrap_err();
    match &err {
        Error::Corrupted { path, offset, .. } => {
            assert_eq!(
                path,
                &commit_log_file(root, 0),
                "the error names the commit-log file"
            );
            assert_eq!(*offset, 0);
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
    assert!(matches!(err, Error::Corrupted { .. }));
    // Nothing was truncated: the damaged record is still on disk for an operator to inspect.
    let bytes = std::fs::read(commit_log_file(root, 0)).unwrap();
    assert_eq!(bytes[88], flipped);
    assert_eq!(&bytes[4..8], &[0xDA, 0xA3, 0x20, 0xA7]);
    assert!(
        !root.join("abort").exists(),
        "a failed open leaves no abort file"
    );
}

#[test]
fn end_below_durable_watermark_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    clean_prefix(root);
    let end = {
        let store = Store::open(root, config()).unwrap();
        store.commit_log_range().1
    };
    // The checkpoint claims more durable bytes than the log holds (lost writes).
    let cp = CheckpointData {
        confirm_phy_offset: end + 500,
        logics_dispatched_offset: 0,
        ..Default::default()
    };
    write_checkpoint(root, &cp);
    let err = Store::open(root, config()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupted { offset, .. } if *offset == end),
        "{err:?}"
    );
}

/// After a clean close recovery scans the whole commit-log file holding the checkpoint
/// (FORMAT.md §8 step 3), so damage to a record of that file below the durable offset is found
/// at open and reported as corruption naming the file and offset, never served or truncated.
#[test]
fn damage_below_checkpoint_in_its_file_is_reported_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    clean_prefix(root);
    flip_first_record_body_bit(root);
    let err = Store::open(root, config()).unwrap_err();
    match err {
        Error::Corrupted { path, offset, .. } => {
            assert!(path.ends_with("commitlog/00000000000000000000"), "{path:?}");
            assert_eq!(offset, 0);
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
}
