//! Damage to a record below the durable watermark, in a commit-log file before the one where
//! recovery's scan starts: recovery never verified that record, yet consume-queue recovery
//! relies on it (checking a queue's tail units against it) and re-dispatch may read it (a queue
//! cut short below the scan start). Either way the damage must surface as `Corrupted` naming
//! the record's file and offset, at open or when the queue is read; the message must never
//! just be missing with the queue ending before it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{commit_log_file, cq_file, small_config};
use mqlite::{Appended, Error, GetStatus, MessageRef, Store, TagFilter};

const TOPIC: &str = "Dmg";

/// Bytes flipped in a record header (rust/FORMAT.md §1.1): a TOTALSIZE byte (the record no
/// longer decodes), a QUEUEID byte and a QUEUEOFFSET byte (it decodes, and names another place).
const HEADER_BYTES: [(u64, &str); 3] = [(2, "TOTALSIZE"), (15, "QUEUEID"), (27, "QUEUEOFFSET")];

fn file_size() -> u64 {
    small_config().commit_log_file_size.unwrap()
}

/// A store whose queue 0 holds `q0` small messages, all in the first commit-log file, followed
/// by queue-1 messages filling more than two files, closed cleanly: the checkpoint's boundary,
/// where recovery's scan starts, is two files past queue 0's records. Returns queue 0's records.
fn build(root: &Path, q0: u64) -> Vec<Appended> {
    let store = Store::open(root, small_config()).unwrap();
    store.create_topic(TOPIC, 2, 6, false, false).unwrap();
    let mut zero = Vec::new();
    for i in 0..q0 {
        let b = common::body(i);
        zero.push(store.put(&MessageRef::new(TOPIC, 0, &b)).unwrap().appended);
    }
    let big = vec![7u8; 8 << 10];
    while store.commit_log_range().1 < 2 * file_size() + 4096 {
        store.put(&MessageRef::new(TOPIC, 1, &big)).unwrap();
    }
    store.close().unwrap();
    assert!(zero
        .iter()
        .all(|a| a.physical_offset + u64::from(a.size) < file_size()));
    zero
}

fn flip(root: &Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(commit_log_file(root, at - at % file_size()))
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at % file_size()).unwrap();
    f.write_all_at(&[b[0] ^ 0x40], at % file_size()).unwrap();
}

/// The open, or a read of queue 0 from `from`, reports the damaged record `victim`; queue 1
/// holds only its own messages.
fn assert_reported(root: &Path, victim: &Appended, from: u64, what: &str) {
    let path = commit_log_file(root, 0);
    let store = match Store::open(root, small_config()) {
        Err(Error::Corrupted {
            path: p, offset, ..
        }) => {
            assert_eq!(
                (p, offset),
                (path, victim.physical_offset),
                "{what}: open error"
            );
            return;
        }
        Err(e) => panic!("{what}: open failed with {e}"),
        Ok(s) => s,
    };
    match store.get_messages(TOPIC, 0, from, 1000, &TagFilter::all()) {
        Err(Error::Corrupted {
            path: p, offset, ..
        }) => {
            assert_eq!(
                (p, offset),
                (path, victim.physical_offset),
                "{what}: read error"
            );
        }
        Err(e) => panic!("{what}: read failed with {e}"),
        Ok(got) => panic!(
            "{what}: queue 0 read from {from} gave {:?} with {} records, queue ends at {:?}: \
             the damaged record at {} was not reported",
            got.status,
            got.records.len(),
            store.queue_offsets(TOPIC, 0).unwrap(),
            victim.physical_offset
        ),
    }
    let got = store
        .get_messages(TOPIC, 1, 0, 1000, &TagFilter::all())
        .unwrap();
    assert_eq!(got.status, GetStatus::Found, "{what}");
    assert!(
        got.iter()
            .all(|v| v.queue_id() == 1 && v.body().len() == 8 << 10),
        "{what}: queue 1 holds a record that is not its own"
    );
    store.close().unwrap();
}

/// The record a queue's last unit points at is checked when the store opens; when it is
/// damaged the unit is not garbage to drop: the damage is reported.
#[test]
fn damaged_header_of_a_queues_last_record_in_an_older_file_is_reported() {
    for (byte, field) in HEADER_BYTES {
        for crashed in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let zero = build(dir.path(), 10);
            let victim = zero[9];
            flip(dir.path(), victim.physical_offset + byte);
            if crashed {
                std::fs::write(dir.path().join("abort"), b"").unwrap();
            }
            let what = format!("{field} byte flipped, crashed {crashed}");
            assert_reported(dir.path(), &victim, 0, &what);
        }
    }
}

/// A consume-queue file cut short makes recovery re-dispatch the queue from the end of the
/// units before it, far below the scan start: the records re-dispatched are verified, and a
/// damaged one is reported, not dropped or dispatched to the queue its damaged header names.
#[test]
fn re_dispatch_below_the_scan_start_reports_a_damaged_record() {
    for (byte, field) in HEADER_BYTES {
        let dir = tempfile::tempdir().unwrap();
        // 80 units: the queue's second file (units 64..) is the one cut short.
        let zero = build(dir.path(), 80);
        let victim = zero[70];
        flip(dir.path(), victim.physical_offset + byte);
        let second = cq_file(dir.path(), TOPIC, 0, 64 * 20);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&second)
            .unwrap()
            .set_len(3 * 20)
            .unwrap();
        assert_reported(dir.path(), &victim, 64, &format!("{field} byte flipped"));
    }
}
