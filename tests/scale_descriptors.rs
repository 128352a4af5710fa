//! A store of thousands of commit-log files and thousands of queues under a descriptor limit of
//! 256 (a common default is 1,024): the store's descriptors stay under a small constant, its
//! mappings under the map budget plus the files being written, and opening it maps only what
//! recovery reads.
//!
//! Each test runs its body in a child: this test binary executed again by a shell whose soft
//! `RLIMIT_NOFILE` is 256 (`ulimit -Sn`), so no other test runs under that limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use std::time::Duration;

use mqlite::util::clock::{now_ms, ManualClock};
use mqlite::{MessageRef, Store, StoreConfig, TagFilter};

/// The soft limit of open descriptors this binary runs under.
const NOFILE: u64 = 256;
/// Descriptors one open store may hold at any time (docs/design.md, "Descriptors and
/// mappings"): its lock and checkpoint files, the commit log's writer, and the few opened
/// for one call (a creation's fsync, a directory fsync, a zero fill) by its threads.
const STORE_DESCRIPTORS: usize = 16;
/// The map budget of the stores here (`StoreConfig::max_mapped_files`).
const BUDGET: usize = 32;
/// Files mapped besides the budget once writes stopped and two flushes passed: the commit
/// log's current file, the one prepared after it, the store's wake-up word
/// (`<store>/wakeup`), and the writers' shared state (`<store>/run/writer.shm`, the default
/// open being one of any number of writer processes).
const PINNED: usize = 4;
/// Commit-log files mapped right after a clean open: the last one (written next), the one
/// recovery scanned from (the checkpoint's, when it is the one before), and the next one
/// prepared ahead of the writer.
const OPEN_LOG_MAPPINGS: usize = 3;
/// 64 KiB commit-log files (the smallest), each holding two records of this body (the
/// largest a file that small takes).
const BODY: usize = 31 << 10;
/// Two topics of 1,024 queues (the most a topic has) and one of 52: 2,100 queues.
const TOPICS: [(&str, u32); 3] = [("wide_a", 1024), ("wide_b", 1024), ("wide_c", 52)];
const QUEUES: u64 = 2_100;
/// Two messages per queue: 4,200 records, 2,100 commit-log files.
const MESSAGES: u64 = 2 * QUEUES;
const FILES: u64 = MESSAGES / 2;

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Mappings of files under `root` (one line of /proc/self/maps each).
fn store_mappings(root: &Path) -> usize {
    mappings_under(root).len()
}

/// The lines of /proc/self/maps that map files under `dir` (for failure messages too).
fn mappings_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(dir))
        .map(str::to_owned)
        .collect()
}

/// Mappings of commit-log files.
fn log_mappings(root: &Path) -> Vec<String> {
    mappings_under(&root.join("commitlog"))
}

/// In memory when the machine has a tmpfs at /dev/shm: what is measured here does not depend on
/// the file system, and the 2,100 file creations' fsyncs then cost nothing.
fn scratch_dir() -> tempfile::TempDir {
    match Path::new("/dev/shm").is_dir() {
        true => tempfile::Builder::new().tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        commit_log_file_size: Some(64 << 10),
        consume_queue_file_units: Some(64),
        max_mapped_files: BUDGET,
        warm_mapped_files: false,
        ..Default::default()
    }
}

/// Message `i`: its queue (queue `i % QUEUES`, at queue offset `i / QUEUES`), and a body that
/// names it.
fn message(i: u64) -> (&'static str, u32, Vec<u8>) {
    let mut k = (i % QUEUES) as u32;
    for (topic, queues) in TOPICS {
        if k < queues {
            let mut body = vec![(i % 251) as u8; BODY];
            body[..8].copy_from_slice(&i.to_be_bytes());
            return (topic, k, body);
        }
        k -= queues;
    }
    unreachable!("message {i} past the queues")
}

#[test]
fn thousands_of_log_files_and_queues_are_written_reopened_and_read_under_256_descriptors() {
    if !common::under_descriptor_limit(
        "thousands_of_log_files_and_queues_are_written_reopened_and_read_under_256_descriptors",
        NOFILE,
    ) {
        return;
    }
    let dir = scratch_dir();
    let root = dir.path();
    let base = open_descriptors();
    let store = Store::open(root, config()).unwrap();
    for (topic, queues) in TOPICS {
        store.create_topic(topic, queues, 6, false, false).unwrap();
    }
    for i in 0..MESSAGES {
        let (topic, queue, body) = message(i);
        store.put(&MessageRef::new(topic, queue, &body)).unwrap();
        if i % 100 == 0 {
            let fds = open_descriptors() - base;
            assert!(
                fds <= STORE_DESCRIPTORS,
                "{fds} descriptors after {i} sends"
            );
        }
    }
    let logs = std::fs::read_dir(root.join("commitlog")).unwrap().count() as u64;
    assert!(logs >= FILES, "{logs} commit-log files");
    // A queue not written since the previous flush lets go of its file.
    store.flush().unwrap();
    store.flush().unwrap();
    let maps = store_mappings(root);
    assert!(
        maps <= BUDGET + PINNED,
        "{maps} mappings after writing: {:#?}",
        mappings_under(root)
    );
    store.close().unwrap();
    drop(store);
    assert_eq!(open_descriptors(), base, "close releases every descriptor");
    assert_eq!(store_mappings(root), 0, "close releases every mapping");

    let store = Store::open(root, config()).unwrap();
    let maps = store_mappings(root);
    assert!(maps <= BUDGET + PINNED, "{maps} mappings after open");
    for i in 0..QUEUES {
        let (topic, queue, first) = message(i);
        let (_, _, second) = message(i + QUEUES);
        let got = store
            .get_messages(topic, queue, 0, 8, &TagFilter::all())
            .unwrap();
        let bodies: Vec<&[u8]> = got.iter().map(|v| v.body()).collect();
        assert_eq!(bodies, vec![&first[..], &second[..]], "{topic}:{queue}");
        drop(got);
        if i % 100 == 0 {
            let fds = open_descriptors() - base;
            assert!(
                fds <= STORE_DESCRIPTORS,
                "{fds} descriptors after {i} reads"
            );
            let maps = store_mappings(root);
            assert!(maps <= BUDGET + PINNED, "{maps} mappings after {i} reads");
        }
    }
    // And the store still takes writes into a queue whose file it let go of.
    let (topic, queue, body) = message(7);
    let put = store.put(&MessageRef::new(topic, queue, &body)).unwrap();
    assert_eq!(put.appended.queue_offset, 2);
    store.close().unwrap();
}

#[test]
fn a_log_of_thousands_of_files_opens_mapping_its_tail_and_is_read_and_expired_under_256_descriptors(
) {
    if !common::under_descriptor_limit(
        "a_log_of_thousands_of_files_opens_mapping_its_tail_and_is_read_and_expired_under_256_descriptors",
        NOFILE,
    ) {
        return;
    }
    let dir = scratch_dir();
    let root = dir.path();
    let clock = ManualClock::new(now_ms());
    let config = || StoreConfig {
        file_reserved_time: Duration::from_secs(3600),
        clock: clock.clone().into(),
        ..config()
    };
    let base = open_descriptors();
    let body = |i: u64| {
        let mut b = vec![(i % 251) as u8; BODY];
        b[..8].copy_from_slice(&i.to_be_bytes());
        b
    };
    let store = Store::open(root, config()).unwrap();
    for i in 0..MESSAGES {
        store.put(&MessageRef::new("long", 0, &body(i))).unwrap();
    }
    store.close().unwrap();
    drop(store);
    let logs = std::fs::read_dir(root.join("commitlog")).unwrap().count() as u64;
    assert!(logs >= FILES, "{logs} commit-log files");

    // After a clean close, recovery scans from the checkpoint: the last files only.
    let store = Store::open(root, config()).unwrap();
    let opened = log_mappings(root);
    assert!(
        opened.len() <= OPEN_LOG_MAPPINGS,
        "open mapped these of {logs} commit-log files:\n{}",
        opened.join("\n")
    );
    assert!(open_descriptors() - base <= STORE_DESCRIPTORS);

    let mut next = 0u64;
    while next < MESSAGES {
        let got = store
            .get_messages("long", 0, next, 32, &TagFilter::all())
            .unwrap();
        for v in got.iter() {
            assert_eq!(v.queue_offset(), next);
            assert_eq!(v.body(), &body(next)[..], "message {next}");
            next += 1;
        }
        drop(got);
        let maps = store_mappings(root);
        assert!(maps <= BUDGET + PINNED, "{maps} mappings at message {next}");
        let fds = open_descriptors() - base;
        assert!(
            fds <= STORE_DESCRIPTORS,
            "{fds} descriptors at message {next}"
        );
    }

    // Past the retention every file but the one being written goes.
    clock.advance(Duration::from_secs(2 * 3600));
    let (_, end) = store.commit_log_range();
    let last_file = end - end % (64 << 10);
    while store.commit_log_range().0 < last_file {
        store.delete_expired_files().unwrap();
    }
    let left = std::fs::read_dir(root.join("commitlog")).unwrap().count();
    assert!(left <= 2, "{left} commit-log files left");
    assert!(open_descriptors() - base <= STORE_DESCRIPTORS);
    store.close().unwrap();
}
