//! 10,000 topics of 4 queues with a message in every queue, under a descriptor limit of 256 (a
//! common default is 1,024): half the topics are created in one batch, half auto-created by
//! their first message; the store is closed, reopened (a clean open loads no consume queue) and
//! every message read back. The store's
//! descriptors stay under the bound docs/design.md documents and the process's mappings far
//! below `vm.max_map_count`.
//!
//! The body runs in a child: this test binary executed again by a shell whose soft
//! `RLIMIT_NOFILE` is 256 (`ulimit -Sn`), so no other test runs under that limit. The scale tier
//! (CONTRIBUTING.md, "Test tiers"): `cargo nextest run --profile scale`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use mqlite::{MessageRef, Store, StoreConfig, TagFilter};

/// The soft limit of open descriptors the child runs under.
const NOFILE: u64 = 256;
const TOPICS: usize = 10_000;
const QUEUES: u32 = 4;
/// This test's name: the child runs it alone.
const TEST: &str = "scale_ten_thousand_topics_with_a_message_in_every_queue_under_256_descriptors";

/// The most descriptors an open store holds, as docs/design.md states it ("File descriptors:
/// at most N per open store"); without such a sentence, the limit itself.
fn descriptor_bound() -> usize {
    let design = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/design.md");
    let text = std::fs::read_to_string(design).unwrap();
    const SAYS: &str = "File descriptors: at most ";
    match text.find(SAYS) {
        Some(at) => {
            let rest = &text[at + SAYS.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            assert!(
                rest[digits.len()..].starts_with(" per open store"),
                "{rest:.60}"
            );
            digits.parse().unwrap()
        }
        None => NOFILE as usize,
    }
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("listing /proc/self/fd (EMFILE: every descriptor is taken)")
        .count()
}

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

fn max_map_count() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// In memory when the machine has a tmpfs at /dev/shm: what is measured does not depend on the
/// file system, and 40,000 file creations' fsyncs then cost nothing.
fn scratch_dir() -> tempfile::TempDir {
    match Path::new("/dev/shm").is_dir() {
        true => tempfile::Builder::new().tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    }
}

fn topic(i: usize) -> String {
    format!("t{i:05}")
}

fn body(topic: &str, queue: u32) -> Vec<u8> {
    format!("{topic}/{queue}").into_bytes()
}

/// Asserts the store's descriptors and the process's mappings are within their bounds.
struct Limits {
    base: usize,
    bound: usize,
    maps: usize,
}

impl Limits {
    fn check(&self, at: &str) {
        let fds = open_descriptors() - self.base;
        assert!(
            fds <= self.bound,
            "{fds} descriptors {at}; docs/design.md: {}",
            self.bound
        );
        let maps = mappings();
        assert!(maps < self.maps, "{maps} mappings {at}");
    }
}

#[test]
fn scale_ten_thousand_topics_with_a_message_in_every_queue_under_256_descriptors() {
    if !common::under_descriptor_limit(TEST, NOFILE) {
        return;
    }
    let dir = scratch_dir();
    let root = dir.path();
    let limits = Limits {
        base: open_descriptors(),
        bound: descriptor_bound(),
        maps: max_map_count() / 2,
    };
    let config = || StoreConfig {
        consume_queue_file_units: Some(64),
        ..Default::default()
    };
    let names: Vec<String> = (0..TOPICS).map(topic).collect();
    let store = Store::open(root, config()).unwrap();
    let batch: Vec<&str> = names[..TOPICS / 2].iter().map(String::as_str).collect();
    let created = store
        .create_topics(&batch, QUEUES, 6, false, false)
        .unwrap();
    assert_eq!(created.len(), TOPICS / 2);
    // The other half is auto-created by its first message.
    for (i, name) in names.iter().enumerate() {
        for q in 0..QUEUES {
            if let Err(e) = store.put(&MessageRef::new(name, q, &body(name, q))) {
                panic!("sending to {name}:{q}: {e}");
            }
        }
        if i % 500 == 0 {
            limits.check(&format!("after sending to {i} topics"));
        }
    }
    store.flush().unwrap();
    limits.check("after the flush");
    store.close().unwrap();
    drop(store);

    let loads = mqlite::consume_queue::store::queue_loads();
    let store = Store::open(root, config()).unwrap();
    limits.check("after the reopen");
    // A clean open takes the queues from their clean-shutdown record: it loads no queue's
    // files (FORMAT.md §4.1); each is loaded at its first read below.
    assert_eq!(
        mqlite::consume_queue::store::queue_loads() - loads,
        0,
        "queues loaded by the clean reopen"
    );
    for (i, name) in names.iter().enumerate() {
        for q in 0..QUEUES {
            let got = store
                .get_messages(name, q, 0, 8, &TagFilter::all())
                .unwrap();
            let bodies: Vec<&[u8]> = got.iter().map(|v| v.body()).collect();
            assert_eq!(bodies, vec![&body(name, q)[..]], "{name}:{q}");
        }
        if i % 500 == 0 {
            limits.check(&format!("after reading {i} topics"));
        }
    }
    store.close().unwrap();
}
