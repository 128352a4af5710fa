//! MappedFileQueue: rolling files named by 20-digit offsets, finding files by offset,
//! truncation, head deletion, and load-time repair of a crashed roll.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use mqlite::mapped_file_queue::{Backing, MapCache, MappedFileQueue};
use mqlite::Error;

const SIZE: u64 = 4096;

fn queue(dir: &Path) -> MappedFileQueue {
    MappedFileQueue::new(
        Backing::Dir {
            dir: dir.to_path_buf(),
            mode: 0o600,
            populate: false,
        },
        SIZE,
        true,
    )
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Rolls `n` files, writing `fill` bytes tagged with the file index into each.
fn roll_files(q: &MappedFileQueue, n: u64, fill: usize) {
    for k in 0..n {
        let mut w = q.roll(k * SIZE).unwrap();
        assert_eq!(w.pos(), 0);
        assert_eq!(w.remaining(), SIZE);
        w.append_with(fill, |b| b.fill(k as u8 + 1)).unwrap();
        w.publish();
    }
}

#[test]
fn roll_names_and_find() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path());
    assert!(q.is_empty());
    assert_eq!((q.min_offset(), q.max_offset()), (0, 0));
    assert!(q.find(0).is_none());
    roll_files(&q, 4, 100);
    assert_eq!(q.len(), 4);
    assert_eq!(
        names(dir.path()),
        vec![
            "00000000000000000000",
            "00000000000000004096",
            "00000000000000008192",
            "00000000000000012288"
        ]
    );
    assert_eq!(q.min_offset(), 0);
    assert_eq!(q.max_offset(), 3 * SIZE + 100);
    for f in q.mapped_files() {
        assert_eq!(std::fs::metadata(f.path()).unwrap().len(), SIZE);
    }
    for (offset, start) in [
        (0, 0),
        (4095, 0),
        (4096, 4096),
        (10_000, 8192),
        (16_383, 12_288),
    ] {
        let f = q.find(offset).unwrap();
        assert_eq!(f.from_offset(), start, "offset {offset}");
        assert!(offset - f.from_offset() < SIZE);
    }
    assert!(q.find(4 * SIZE).is_none());
    // Bytes written through the writer are readable (published) through the file.
    let f = q.find(5000).unwrap();
    assert_eq!(f.slice(0, 100).unwrap(), &[2u8; 100][..]);
    assert!(
        f.slice(0, 101).is_none(),
        "unpublished bytes are not readable"
    );
    // A file's writer is unique while it exists; dropped, it can be taken again, at the
    // published position.
    let w = q.last_writer().unwrap().unwrap();
    assert!(q.last_writer().unwrap().is_none());
    assert_eq!(w.pos(), 100);
    drop(w);
    assert_eq!(q.last_writer().unwrap().unwrap().pos(), 100);
}

#[test]
fn drop_files_from_removes_tail_files() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path());
    roll_files(&q, 5, 10);
    q.drop_files_from(2 * SIZE + 1).unwrap();
    assert_eq!(q.len(), 3);
    assert_eq!(q.last_file().unwrap().from_offset(), 2 * SIZE);
    assert_eq!(names(dir.path()).len(), 3);
    q.drop_files_from(2 * SIZE).unwrap();
    assert_eq!(q.len(), 2);
    assert!(q.find(2 * SIZE).is_none());
    assert!(!dir.path().join("00000000000000008192").exists());
    q.destroy().unwrap();
    assert!(q.is_empty());
    assert!(names(dir.path()).is_empty());
}

#[test]
fn delete_head_never_deletes_the_last_file() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path());
    roll_files(&q, 4, 10);
    // Limit respected.
    assert_eq!(q.delete_head_while(1, |_| true).unwrap(), 1);
    assert_eq!(q.min_offset(), SIZE);
    // Stops at the first file that is not expired.
    assert_eq!(
        q.delete_head_while(usize::MAX, |f| f.from_offset() < 2 * SIZE)
            .unwrap(),
        1
    );
    assert_eq!(q.min_offset(), 2 * SIZE);
    // Everything expired: the last file stays.
    assert_eq!(q.delete_head_while(usize::MAX, |_| true).unwrap(), 1);
    assert_eq!(q.len(), 1);
    assert_eq!(q.delete_head_while(usize::MAX, |_| true).unwrap(), 0);
    assert_eq!(names(dir.path()), vec!["00000000000000012288"]);
    // find works relative to the new head.
    assert!(q.find(0).is_none());
    assert_eq!(q.find(3 * SIZE + 5).unwrap().from_offset(), 3 * SIZE);
}

#[test]
fn load_deletes_an_empty_last_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let q = queue(dir.path());
        roll_files(&q, 2, 10);
        q.flush().unwrap();
    }
    // A roll killed right after creating the file.
    std::fs::write(dir.path().join("00000000000000008192"), b"").unwrap();
    let q = queue(dir.path());
    q.load().unwrap();
    assert_eq!(q.len(), 2);
    assert!(!dir.path().join("00000000000000008192").exists());
    assert_eq!(q.last_file().unwrap().from_offset(), SIZE);
    // Loaded data is intact (positions start at the file size; recovery sets the real end).
    assert_eq!(q.find(SIZE).unwrap().slice(0, 10).unwrap(), &[2u8; 10][..]);
    assert_eq!(q.max_offset(), 2 * SIZE);
}

#[test]
fn load_re_preallocates_a_short_last_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let q = queue(dir.path());
        roll_files(&q, 2, 10);
        q.flush().unwrap();
    }
    let last = dir.path().join("00000000000000004096");
    let f = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    f.set_len(1000).unwrap();
    drop(f);
    let q = queue(dir.path());
    q.load().unwrap();
    assert_eq!(q.len(), 2);
    assert_eq!(std::fs::metadata(&last).unwrap().len(), SIZE);
    let f = q.last_file().unwrap();
    assert_eq!(f.slice(0, 10).unwrap(), &[2u8; 10][..]);
    assert!(f
        .slice(1000, (SIZE - 1000) as usize)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn load_reports_a_short_middle_file_as_corruption() {
    let dir = tempfile::tempdir().unwrap();
    {
        let q = queue(dir.path());
        roll_files(&q, 3, 10);
    }
    let middle = dir.path().join("00000000000000004096");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&middle)
        .unwrap()
        .set_len(100)
        .unwrap();
    let err = queue(dir.path()).load().unwrap_err();
    assert!(
        matches!(&err, Error::Corrupted { path, offset: 4096, .. } if *path == middle),
        "{err:?}"
    );
}

#[test]
fn load_reports_a_gap_as_corruption() {
    let dir = tempfile::tempdir().unwrap();
    {
        let q = queue(dir.path());
        roll_files(&q, 3, 10);
    }
    std::fs::remove_file(dir.path().join("00000000000000004096")).unwrap();
    let err = queue(dir.path()).load().unwrap_err();
    assert!(
        matches!(&err, Error::Corrupted { offset: 8192, .. }),
        "{err:?}"
    );
    // Files whose names are not 20 digits are ignored; a misaligned start is corruption.
    let dir2 = tempfile::tempdir().unwrap();
    {
        let q = queue(dir2.path());
        roll_files(&q, 1, 10);
    }
    std::fs::write(dir2.path().join("notes.txt"), b"x").unwrap();
    std::fs::write(dir2.path().join("0000000000000000100"), b"x").unwrap();
    let q = queue(dir2.path());
    q.load().unwrap();
    assert_eq!(q.len(), 1);
    std::fs::write(
        dir2.path().join("00000000000000004097"),
        vec![0u8; SIZE as usize],
    )
    .unwrap();
    assert!(matches!(
        queue(dir2.path()).load(),
        Err(Error::Corrupted { offset: 4097, .. })
    ));
}

#[test]
fn deferred_creation_syncs_are_paid_by_the_next_flush_and_only_then_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path()).with_deferred_create_sync();
    let mut w = q.roll(0).unwrap();
    let first = q.find(0).unwrap();
    assert!(first.create_sync_due(), "a rolled-to file owes its fsyncs");
    // A file prepared ahead of its roll sits in the ready slot, outside the list.
    q.prepare(SIZE, 0).unwrap();
    w.append_with(8, |b| b.fill(7)).unwrap();
    w.publish();
    q.flush().unwrap();
    assert!(!first.create_sync_due(), "the flush paid it");
    let w2 = q.roll(SIZE).unwrap();
    assert!(
        !w2.file().create_sync_due(),
        "the flush also paid for the prepared file"
    );
    drop(w2);
    q.prepare(2 * SIZE, 0).unwrap();
    let third = q.roll(2 * SIZE).unwrap();
    assert!(third.file().create_sync_due());

    // Without deferral the creation syncs at once.
    let dir2 = tempfile::tempdir().unwrap();
    let q2 = queue(dir2.path());
    let w = q2.roll(0).unwrap();
    assert!(!w.file().create_sync_due());
}

#[test]
fn warming_ahead_reaches_into_the_prepared_next_file() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path());
    let mut w = q.roll(0).unwrap();
    w.append_with(100, |b| b.fill(1)).unwrap();
    w.publish();
    if q.warm(0, SIZE) < SIZE {
        eprintln!("MADV_POPULATE_WRITE unsupported here: nothing to check");
        return;
    }
    // No next file yet: warming stops at the end of the last one.
    assert_eq!(q.warm(SIZE / 2, SIZE + SIZE / 2), SIZE);
    // Prepared (not rolled to): its pages are warmed before the writer arrives.
    q.prepare(SIZE, 0).unwrap();
    assert_eq!(q.warm(SIZE / 2, SIZE + SIZE / 2), SIZE + SIZE / 2);
    // Not past it, and the roll still takes the prepared file.
    assert_eq!(q.warm(SIZE, 3 * SIZE), 2 * SIZE);
    assert_eq!(q.roll(SIZE).unwrap().pos(), 0);
    assert_eq!(names(dir.path()).len(), 2);
}

/// Idle files beyond the map budget are unmapped and mapped again when used; a file a reader
/// holds stays mapped (and readable) whatever the cache does meanwhile.
#[test]
fn idle_files_beyond_the_budget_are_unmapped_and_mapped_again_on_use() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path()).with_cache(Arc::new(MapCache::new(2)));
    roll_files(&q, 6, SIZE as usize);
    q.flush().unwrap();
    // The last file stays pinned (a writer may come back to it); the others are idle.
    assert!(q.mapped_files().len() <= 3, "{}", q.mapped_files().len());
    let held = q.find(0).unwrap();
    for k in 1..6 {
        assert_eq!(
            q.find(k * SIZE).unwrap().slice(0, 1).unwrap(),
            &[k as u8 + 1]
        );
    }
    assert!(q.mapped_files().len() <= 4, "budget + pinned + held");
    assert!(q.mapped_files().iter().any(|f| Arc::ptr_eq(f, &held)));
    assert_eq!(
        held.slice(0, SIZE as usize).unwrap(),
        &[1u8; SIZE as usize][..]
    );
    drop(held);
    assert_eq!(q.find(0).unwrap().slice(0, 1).unwrap(), &[1]);
}

/// Anonymous (`:memory:`) files hold the data itself: flushed and idle, they stay mapped
/// whatever the budget.
#[test]
fn in_memory_files_are_never_unmapped() {
    let q =
        MappedFileQueue::new(Backing::Memory, SIZE, true).with_cache(Arc::new(MapCache::new(1)));
    roll_files(&q, 4, SIZE as usize);
    q.flush().unwrap();
    assert!(!q.park_last());
    for k in 0..4 {
        let f = q.find(k * SIZE).unwrap();
        assert_eq!(
            f.slice(0, SIZE as usize).unwrap(),
            &[k as u8 + 1; SIZE as usize][..]
        );
    }
}

/// A last file its owner let go of (`park_last`) is unmapped once idle; the queue still knows
/// where its data ends, and a writer taken again continues there.
#[test]
fn a_parked_last_file_continues_where_its_data_ends() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path()).with_cache(Arc::new(MapCache::new(0)));
    roll_files(&q, 2, 100);
    assert!(!q.park_last(), "bytes wait for a flush");
    q.flush().unwrap();
    assert!(q.park_last());
    assert!(
        q.mapped_files().is_empty(),
        "a budget of 0 keeps nothing idle"
    );
    assert_eq!(q.max_offset(), SIZE + 100);
    let mut w = q.last_writer().unwrap().unwrap();
    assert_eq!(w.pos(), 100);
    w.append_with(4, |b| b.copy_from_slice(b"next")).unwrap();
    w.publish();
    assert_eq!(q.max_offset(), SIZE + 104);
    assert_eq!(q.find(SIZE).unwrap().slice(100, 4).unwrap(), b"next");
    assert!(!q.park_last(), "a writer exists");
}

/// A file that grows its reservation (`Reserve::Grow`), let go of while idle and unmapped,
/// is mapped again with nothing counted as reserved, whatever its earlier mapping reserved:
/// its writer cannot write through the mapping until it reserves again (`make_room`, which
/// reopens the file by path), so it never writes into a hole.
#[test]
fn a_growing_file_mapped_again_after_parking_reserves_before_writing() {
    use mqlite::mapped_file::Reserve;
    use std::os::unix::fs::MetadataExt;
    const BIG: u64 = 64 << 10;
    let dir = tempfile::tempdir().unwrap();
    let q = MappedFileQueue::new(
        Backing::Dir {
            dir: dir.path().to_path_buf(),
            mode: 0o600,
            populate: false,
        },
        BIG,
        true,
    )
    .with_reserve(Reserve::Grow { initial: SIZE })
    .with_cache(Arc::new(MapCache::new(0)));
    let mut w = q.roll(0).unwrap();
    assert_eq!(w.file().reserved(), SIZE);
    w.append_with(100, |b| b.fill(1)).unwrap();
    w.publish();
    drop(w);
    q.flush().unwrap();
    assert!(q.park_last());
    assert!(q.mapped_files().is_empty(), "unmapped once parked");

    let mut w = q.last_writer().unwrap().unwrap();
    assert_eq!(w.pos(), 100, "continues where the data ends");
    assert_eq!(
        w.file().reserved(),
        0,
        "a new mapping counts nothing as reserved"
    );
    assert!(
        w.append_with(4, |b| b.copy_from_slice(b"next")).is_none(),
        "no write through the mapping before a reservation"
    );
    w.make_room(4).unwrap();
    assert!(w.file().reserved() >= 104);
    w.append_with(4, |b| b.copy_from_slice(b"next")).unwrap();
    w.publish();
    assert_eq!(
        q.find(0).unwrap().slice(96, 8).unwrap(),
        b"\x01\x01\x01\x01next"
    );
    let path = dir.path().join(format!("{:020}", 0));
    let meta = std::fs::metadata(path).unwrap();
    assert_eq!(meta.len(), BIG, "full length");
    assert!(meta.blocks() * 512 < BIG, "still mostly a hole");
}
