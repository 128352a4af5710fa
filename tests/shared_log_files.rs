//! A shared writer's list of commit-log files when the directory holds files past the next
//! roll: a process killed right after it rolled, whose preparer had already made the file after
//! that one, leaves both behind (each published whole under its name, all zero past the
//! repaired roll) while the log end stays in the file before them. A writer that lists them
//! (a later opener loads the directory; a repair lists it again) rolls to the first of them
//! later, and each of its lookups by offset (reads, its dispatch) must find the file that
//! holds the offset: every message is read back at its offset and through its queue.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::small_config;
use mqlite::{MessageRef, Store, StoreConfig};

const TOPIC: &str = "Listed";
/// `small_config`'s commit-log file size.
const SIZE: u64 = 128 << 10;

fn shared() -> StoreConfig {
    StoreConfig {
        shared_writers: true,
        lock_wait: Some(Duration::from_secs(30)),
        ..small_config()
    }
}

/// Body of message `i`: 1 to 4 KiB, tagged with `i`.
fn body(i: u64) -> Vec<u8> {
    let len = 1024 + (i * 911 % 3072) as usize;
    let mut b = vec![(i % 251) as u8; len];
    b[..8].copy_from_slice(&i.to_be_bytes());
    b
}

/// What a preparer, or a roll, publishes: a zero file of the full size under its name.
fn plant_prepared_file(root: &Path, start: u64) {
    let f = std::fs::File::create(common::commit_log_file(root, start)).unwrap();
    f.set_len(SIZE).unwrap();
}

#[test]
fn a_writer_listing_files_past_its_next_roll_finds_every_record_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path(), shared()).unwrap();
    a.create_topic(TOPIC, 1, 6, false, false).unwrap();
    let mut sent = Vec::new();
    for i in 0..4 {
        let r = a.put(&MessageRef::new(TOPIC, 0, &body(i))).unwrap();
        sent.push((r.appended.physical_offset, i));
    }
    assert!(a.commit_log_range().1 < SIZE / 2);
    plant_prepared_file(dir.path(), SIZE);
    plant_prepared_file(dir.path(), 2 * SIZE);
    // A later opener: its list is the directory's, files 0, S and 2S, while the log ends in 0.
    let b = Store::open(dir.path(), shared()).unwrap();
    let mut i = sent.len() as u64;
    while b.commit_log_range().1 < 3 * SIZE + SIZE / 2 {
        let r = b.put(&MessageRef::new(TOPIC, 0, &body(i))).unwrap();
        sent.push((r.appended.physical_offset, i));
        i += 1;
    }
    let want: Vec<(u64, Vec<u8>)> = sent.iter().map(|&(_, i)| (i, body(i))).collect();
    for store in [&b, &a] {
        // A queue read follows the shared log end first (the other writer's records).
        assert_eq!(common::read_queue(store, TOPIC, 0), want);
        common::settle(store);
        for &(offset, i) in &sent {
            let got = store
                .get_by_offset(offset, |v| v.body().to_vec())
                .unwrap_or_else(|e| panic!("message {i} at {offset}: {e}"));
            assert_eq!(got, body(i), "message {i} at {offset}");
        }
    }
    a.close().unwrap();
    b.close().unwrap();
}
