//! The index service's life: dispatch, idempotence, roll, crash recovery, retention.

use super::file::Geometry;
use super::query::lookup;
use super::service::IndexService;
use crate::commit_log::CommitLog;
use crate::dispatch::derived::{DerivedStore, Progress};
use crate::dispatch::{DispatchRequest, Dispatcher};
use crate::mapped_file_queue::{Backing, MappedFileQueue};
use crate::message::{properties, sysflag};
use crate::util::clock::Clock;

const SIZE: u32 = 100;

fn service(dir: &std::path::Path) -> IndexService {
    IndexService::new(
        Some(dir.join("index")),
        Geometry::with_slots(64),
        true,
        0o600,
        0o700,
        Clock::system(),
    )
}

fn log() -> CommitLog {
    CommitLog::new(MappedFileQueue::new(Backing::Memory, 1 << 20, true))
}

/// Record `i`: at offset `i * SIZE`, stored at `i` seconds, keys `k<i>` and `all`.
fn put(idx: &IndexService, i: u64, sysflag: i32) {
    let props = properties::encode([("KEYS", format!("k{i} all").as_str())]);
    let req = DispatchRequest {
        topic: "T",
        queue_id: 0,
        commit_log_offset: i * u64::from(SIZE),
        size: SIZE,
        tags_code: 0,
        store_timestamp: 1_000 * i as i64 + 1_000,
        queue_offset: i,
        sysflag,
        properties: &props,
        prepared_transaction_offset: 0,
    };
    idx.dispatch(&req).expect("dispatch");
}

/// Descriptors of this process open on files in `dir`.
fn descriptors_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(dir))
        .count()
}

fn find(idx: &IndexService, key: &str) -> Vec<u64> {
    let files = idx.files_for_query().expect("files");
    lookup(&files, "T", key, i64::MIN, i64::MAX, 10_000, |_| Ok(true))
        .expect("lookup")
        .offsets
}

#[test]
fn dispatch_is_idempotent_and_rollback_is_skipped() {
    let dir = tempfile::tempdir().expect("dir");
    let idx = service(dir.path());
    idx.load(false).expect("load");
    for i in 0..5 {
        put(&idx, i, 0);
    }
    put(&idx, 5, sysflag::TRANSACTION_ROLLBACK);
    // Records seen again after a crash add nothing new.
    for i in 0..5 {
        put(&idx, i, 0);
    }
    assert_eq!(find(&idx, "k3"), [300]);
    assert_eq!(find(&idx, "k5"), Vec::<u64>::new());
    assert_eq!(find(&idx, "all"), [400, 300, 200, 100, 0]);
}

#[test]
fn full_files_roll_and_lookups_span_them() {
    let dir = tempfile::tempdir().expect("dir");
    let idx = service(dir.path());
    idx.load(false).expect("load");
    // Two entries a record, 255 a file: 300 records make 3 files.
    for i in 0..300 {
        put(&idx, i, 0);
    }
    assert_eq!(idx.describe().expect("describe").0, 3);
    // Only the file being written holds a descriptor.
    assert_eq!(descriptors_in(&dir.path().join("index")), 1);
    let all = find(&idx, "all");
    assert_eq!(all, (0..300).rev().map(|i| i * 100).collect::<Vec<_>>());
    assert_eq!(find(&idx, "k0"), [0]);
    assert_eq!(find(&idx, "k299"), [29_900]);
    // A reader of the directory sees the same.
    let reader = IndexService::new(
        Some(dir.path().join("index")),
        Geometry::with_slots(64),
        false,
        0o600,
        0o700,
        Clock::system(),
    );
    assert_eq!(find(&reader, "all").len(), 300);
}

#[test]
fn recovery_resets_the_tail_past_the_progress_and_keeps_every_file() {
    let dir = tempfile::tempdir().expect("dir");
    let idx = service(dir.path());
    idx.load(false).expect("load");
    for i in 0..200 {
        put(&idx, i, 0);
    }
    idx.flush(Progress::default()).expect("flush");
    let files = idx.describe().expect("describe").0;
    idx.close();
    // The checkpoint said every record below record 100 was indexed durably.
    let idx = service(dir.path());
    idx.load(true).expect("load");
    let resume = idx.recover(&log(), 200 * 100, 100 * 100).expect("recover");
    assert_eq!(resume, 100 * 100);
    assert_eq!(idx.describe().expect("describe").0, files);
    assert_eq!(find(&idx, "k150"), Vec::<u64>::new());
    assert_eq!(find(&idx, "k99"), [9_900]);
    // Dispatch resumes at the progress: each record found once.
    for i in 100..200 {
        put(&idx, i, 0);
    }
    assert_eq!(find(&idx, "k150"), [15_000]);
    assert_eq!(find(&idx, "all").len(), 200);
}

#[test]
fn retention_deletes_files_below_the_log_start_but_never_the_newest() {
    let dir = tempfile::tempdir().expect("dir");
    let idx = service(dir.path());
    idx.load(false).expect("load");
    for i in 0..300 {
        put(&idx, i, 0);
    }
    assert_eq!(idx.delete_expired(0).expect("delete"), 0);
    // The first file indexes records 0..127.
    assert_eq!(idx.delete_expired(128 * 100).expect("delete"), 1);
    assert_eq!(idx.describe().expect("describe").0, 2);
    assert_eq!(idx.delete_expired(u64::MAX).expect("delete"), 1);
    assert_eq!(idx.describe().expect("describe").0, 1);
    let on_disk = std::fs::read_dir(dir.path().join("index"))
        .expect("dir")
        .count();
    assert_eq!(on_disk, 1);
    assert!(!find(&idx, "all").is_empty());
}
