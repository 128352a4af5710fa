//! Verify and repair across commit-log files (rust/core/verify, rust/core/repair): a damaged
//! span that runs to the end of its file is skipped with an END_OF_FILE marker and the next
//! file's records keep their offsets; a cut moves every later file aside. After either, the
//! store opens and serves every message the report does not list as lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{commit_log_file, small_config};
use mqlite::repair::{repair, RepairMode};
use mqlite::verify::{verify, DamageKind};
use mqlite::{Appended, MessageRef, Store};

const TOPIC: &str = "Rep";

fn file_size() -> u64 {
    small_config().commit_log_file_size.unwrap()
}

/// A closed store whose queue 0 fills more than three commit-log files.
fn build(root: &Path) -> Vec<Appended> {
    let store = Store::open(root, small_config()).unwrap();
    store.create_topic(TOPIC, 1, 6, false, false).unwrap();
    let mut out = Vec::new();
    let mut i = 0;
    while store.commit_log_range().1 < 3 * file_size() + 4096 {
        let b = vec![(i % 251) as u8; 900 + (i % 50) as usize];
        out.push(store.put(&MessageRef::new(TOPIC, 0, &b)).unwrap().appended);
        i += 1;
    }
    store.close().unwrap();
    out
}

fn queue_offsets(store: &Store) -> Vec<(u64, u64)> {
    let got = store
        .get_messages(TOPIC, 0, 0, 10_000, &mqlite::TagFilter::all())
        .unwrap();
    got.iter()
        .map(|v| (v.queue_offset(), v.physical_offset()))
        .collect()
}

#[test]
fn a_span_to_the_end_of_a_file_is_skipped_and_the_next_files_keep_their_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let sent = build(dir.path());
    // Zero file 0 from its third-last record to its end (its END_OF_FILE marker included).
    let in_first: Vec<&Appended> = sent
        .iter()
        .filter(|a| a.physical_offset < file_size())
        .collect();
    let victim = in_first[in_first.len() - 3];
    let f = commit_log_file(dir.path(), 0);
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[victim.physical_offset as usize..].fill(0);
    std::fs::write(&f, &bytes).unwrap();

    let report = verify(dir.path(), &mut |_, _| Ok(())).unwrap();
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    let d = &report.damage[0];
    assert_eq!(d.kind, DamageKind::LogZeroed);
    assert_eq!(
        (d.offset, d.length),
        (victim.physical_offset, file_size() - victim.physical_offset)
    );
    let lost: Vec<u64> = in_first[in_first.len() - 3..]
        .iter()
        .map(|a| a.physical_offset)
        .collect();
    assert_eq!(
        d.messages
            .iter()
            .map(|m| m.commit_log_offset)
            .collect::<Vec<_>>(),
        lost
    );

    let fixed = repair(dir.path(), RepairMode::Skip, false).unwrap();
    assert_eq!(
        fixed
            .lost
            .iter()
            .map(|m| m.commit_log_offset)
            .collect::<Vec<_>>(),
        lost
    );
    let store = Store::open(dir.path(), small_config()).unwrap();
    let kept: Vec<(u64, u64)> = sent
        .iter()
        .filter(|a| !lost.contains(&a.physical_offset))
        .map(|a| (a.queue_offset, a.physical_offset))
        .collect();
    assert_eq!(queue_offsets(&store), kept);
    store.close().unwrap();
    assert!(verify(dir.path(), &mut |_, _| Ok(())).unwrap().ok);
}

#[test]
fn a_cut_moves_every_later_file_aside_and_the_log_ends_at_the_damage() {
    let dir = tempfile::tempdir().unwrap();
    let sent = build(dir.path());
    let victim = sent
        .iter()
        .find(|a| a.physical_offset > file_size() + 10_000)
        .unwrap();
    let f = commit_log_file(dir.path(), file_size());
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[(victim.physical_offset - file_size()) as usize + 95] ^= 0x20;
    std::fs::write(&f, &bytes).unwrap();

    let report = repair(dir.path(), RepairMode::Cut, false).unwrap();
    let lost: Vec<u64> = sent
        .iter()
        .filter(|a| a.physical_offset >= victim.physical_offset)
        .map(|a| a.physical_offset)
        .collect();
    assert_eq!(
        report
            .lost
            .iter()
            .map(|m| m.commit_log_offset)
            .collect::<Vec<_>>(),
        lost
    );
    let aside = Path::new(report.kept_aside.as_deref().unwrap()).join("commitlog");
    for start in [2 * file_size(), 3 * file_size()] {
        assert!(!commit_log_file(dir.path(), start).exists());
        assert!(aside.join(format!("{start:020}")).exists());
    }
    let store = Store::open(dir.path(), small_config()).unwrap();
    assert_eq!(store.commit_log_range().1, victim.physical_offset);
    let kept: Vec<(u64, u64)> = sent
        .iter()
        .filter(|a| a.physical_offset < victim.physical_offset)
        .map(|a| (a.queue_offset, a.physical_offset))
        .collect();
    assert_eq!(queue_offsets(&store), kept);
    store.close().unwrap();
}
