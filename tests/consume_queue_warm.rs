//! The dispatching thread (usually a producer's) must not take a page fault per consume-queue
//! page: the pages ahead of the writer are faulted in, writable, before it gets there. The
//! trap this pins: a whole-file fsync (a new file's creation sync) writes back pages already
//! faulted in and write-protects them, so each one's first unit would fault after all.
//!
//! Faults are counted for the writing thread (`/proc/thread-self/stat`), over units written
//! to the pages after a flush. Without the advice (kernels before 5.14) there is nothing to
//! check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use mqlite::consume_queue::unit::CqUnit;
use mqlite::consume_queue::ConsumeQueue;
use mqlite::mapped_file::mmap::Advice;

const UNIT: u64 = 20;
/// Units written after the flush: 15 pages, inside one 64 KiB chunk (entering the next chunk
/// faults in another one, counted against this thread too).
const UNITS: u64 = 15 * 4096 / UNIT;

/// The first unit of the file's second 64 KiB chunk. A new file reserves disk blocks for its
/// first page only and grows the reservation as units arrive; entering the second chunk
/// reserves (and faults in) the chunk after it, so the pages after this unit are reserved
/// and warm before the flush.
const SECOND_CHUNK_UNIT: u64 = (64 << 10) / UNIT + 1;

/// Minor faults taken by the calling thread so far (field 10 of its stat line).
fn thread_minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(7).unwrap().parse().unwrap()
}

fn queue(dir: &Path) -> ConsumeQueue {
    let q = ConsumeQueue::new(
        "Warm",
        0,
        Some(dir.to_path_buf()),
        50_000 * UNIT,
        0o600,
        false,
    );
    q.recover(true).unwrap();
    q
}

fn unit(i: u64) -> CqUnit {
    CqUnit {
        offset: i * 100,
        size: 100,
        tags_code: 0,
    }
}

/// With units up to `SECOND_CHUNK_UNIT` written: flushes, then writes `UNITS` more and
/// returns the faults they took.
fn faults_after_first_flush(q: &ConsumeQueue) -> Option<u64> {
    let f = q.files().last_file().unwrap();
    if f.advise(0, 1, Advice::PopulateWrite).is_err() {
        eprintln!("MADV_POPULATE_WRITE unsupported here: nothing to check");
        return None;
    }
    q.flush().unwrap();
    assert!(!f.create_sync_due(), "the flush made the file durable");
    thread_minor_faults();
    let before = thread_minor_faults();
    for i in SECOND_CHUNK_UNIT + 1..=SECOND_CHUNK_UNIT + UNITS {
        assert!(q.put(i, unit(i)).unwrap());
    }
    Some(thread_minor_faults() - before)
}

#[test]
fn a_file_rolled_to_by_the_writer_is_warm_again_after_the_flush_that_syncs_its_creation() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path());
    // No preparer: the put rolls to a new file itself, its creation sync owed to the flush.
    for i in 0..=SECOND_CHUNK_UNIT {
        assert!(q.put(i, unit(i)).unwrap());
    }
    assert!(q.files().last_file().unwrap().create_sync_due());
    if let Some(faults) = faults_after_first_flush(&q) {
        assert!(
            faults <= 2,
            "{faults} page faults writing 15 pages after the creation sync"
        );
    }
}

#[test]
fn a_prepared_file_is_warm_again_after_the_flush_that_syncs_it_before_its_roll() {
    let dir = tempfile::tempdir().unwrap();
    // Small files (40 pages), so that the test can fill one and roll to the next.
    const FILE_UNITS: u64 = 8192;
    let q = ConsumeQueue::new(
        "Warm",
        0,
        Some(dir.path().to_path_buf()),
        FILE_UNITS * UNIT,
        0o600,
        false,
    );
    q.recover(true).unwrap();
    assert!(q.put(0, unit(0)).unwrap());
    if q.files()
        .last_file()
        .unwrap()
        .advise(0, 1, Advice::PopulateWrite)
        .is_err()
    {
        eprintln!("MADV_POPULATE_WRITE unsupported here: nothing to check");
        return;
    }
    // The next file, made ahead of the roll with its first pages faulted in; its creation
    // sync is owed, and paid by the flush while it waits in the ready slot.
    q.prepare_file(FILE_UNITS * UNIT).unwrap();
    let next = q.files().ready_file().unwrap();
    assert!(next.create_sync_due());
    q.flush().unwrap();
    assert!(
        !next.create_sync_due(),
        "the flush made the prepared file durable"
    );
    for i in 1..FILE_UNITS {
        assert!(q.put(i, unit(i)).unwrap());
    }
    thread_minor_faults();
    let before = thread_minor_faults();
    // The roll takes the prepared file; its first units go to the pages faulted in again.
    for i in FILE_UNITS..FILE_UNITS + UNITS {
        assert!(q.put(i, unit(i)).unwrap());
    }
    let faults = thread_minor_faults() - before;
    assert_eq!(
        q.files().last_file().unwrap().from_offset(),
        FILE_UNITS * UNIT
    );
    assert!(
        faults <= 2,
        "{faults} page faults writing 15 pages of a prepared file after its sync"
    );
}
