//! The commit log with its warm-ahead (mapped_file_queue/warm.rs) and the preparer's jobs
//! (prepare.rs): what the appender finds warm, and that no zero fill lands on its records.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use super::append::{Appended, Prepared};
use super::{CommitLog, WarmAhead};
use crate::mapped_file::POPULATE_STEP;
use crate::mapped_file_queue::{Backing, MappedFileQueue, WARM_AHEAD};
use crate::message::MessageRef;
use crate::prepare::{run, Prepare, Preparer};

const FILE: u64 = 1 << 20;

/// Matches `WRITER_LEAD` in mapped_file_queue/warm.rs: where the preparer restarts ahead of a
/// writer that has passed it.
const WRITER_LEAD: u64 = 256 << 10;

fn commit_log(dir: &std::path::Path) -> Arc<CommitLog> {
    let backing = Backing::Dir {
        dir: dir.to_path_buf(),
        mode: 0o600,
        populate: false,
    };
    Arc::new(CommitLog::new(MappedFileQueue::new(backing, FILE, true)))
}

/// Runs `jobs` on this thread, as the preparer thread would, until they are all done.
fn run_jobs(jobs: Vec<Prepare>) {
    let (tx, rx) = mpsc::channel();
    for j in jobs {
        tx.send(j).unwrap();
    }
    drop(tx);
    run(&rx, &AtomicUsize::new(usize::MAX));
}

fn warm_job(cl: &Arc<CommitLog>, from: u64, to: u64) -> Prepare {
    let w: std::sync::Weak<dyn crate::prepare::Preparable> = Arc::downgrade(cl) as _;
    Prepare::Warm(w, from, to)
}

#[test]
fn a_new_logs_first_file_counts_as_warm_and_a_later_file_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let cl = commit_log(dir.path());
    assert_eq!(cl.warmed(), 0);
    run_jobs(vec![Prepare::file(&cl, 0)]);
    assert!(dir
        .path()
        .join(crate::util::fs::offset_file_name(0))
        .exists());
    // From its start to the end of the file (the next one does not exist yet).
    let warm_end = WARM_AHEAD.min(FILE);
    assert_eq!(
        cl.warmed(),
        warm_end,
        "the writer starts in this file's warm pages"
    );
    assert!(cl.is_warm(0, warm_end));
    assert!(!cl.is_warm(0, warm_end + 1));

    // The writer is in the first file: the next one's warm pages are not the next to write.
    let other = tempfile::tempdir().unwrap();
    let cl = commit_log(other.path());
    cl.set_max_offset(4096);
    run_jobs(vec![Prepare::file(&cl, 1 << 20)]);
    assert_eq!(cl.warmed(), 0);

    // The first file was made without its pages (as a writer rolling to it first would),
    // and nothing is written yet: the job faults its first pages in all the same.
    let third = tempfile::tempdir().unwrap();
    let cl = commit_log(third.path());
    assert!(!cl.files().prepare(0, 0).unwrap());
    run_jobs(vec![Prepare::file(&cl, 0)]);
    assert_eq!(cl.warmed(), WARM_AHEAD.min(FILE));
}

#[test]
fn warming_restarts_ahead_of_a_writer_that_has_passed_it() {
    let dir = tempfile::tempdir().unwrap();
    let cl = commit_log(dir.path());
    assert!(!cl.files().prepare(0, 0).unwrap());
    // The writer is 300 KiB in when the job runs: the pages it wrote and those it may
    // be writing are left alone, and only the range past them counts as warm.
    let written = 300 << 10;
    cl.set_max_offset(written);
    run_jobs(vec![warm_job(&cl, 0, FILE)]);
    let from = (written + WRITER_LEAD).next_multiple_of(POPULATE_STEP);
    assert_eq!(cl.warmed(), FILE);
    assert!(cl.is_warm(from, FILE));
    assert!(!cl.is_warm(from - 1, FILE));
    assert!(!cl.is_warm(0, 4096));
}

#[test]
fn a_job_whose_writer_is_gone_is_dropped_and_still_counted_done() {
    let dir = tempfile::tempdir().unwrap();
    let cl = commit_log(dir.path());
    let job = Prepare::file(&cl, 0);
    drop(cl);
    let (tx, rx) = mpsc::channel();
    let preparer = Preparer::new(tx);
    assert!(preparer.send(job));
    drop(preparer);
    let pending = AtomicUsize::new(1);
    run(&rx, &pending);
    assert_eq!(pending.load(Ordering::Acquire), 0);
    assert!(!dir
        .path()
        .join(crate::util::fs::offset_file_name(0))
        .exists());
}

#[test]
fn records_survive_a_preparer_zero_filling_at_the_writers_heels() {
    let dir = tempfile::tempdir().unwrap();
    let backing = Backing::Dir {
        dir: dir.path().to_path_buf(),
        mode: 0o644,
        populate: false,
    };
    // Small files: the writer rolls a dozen times, writing END_OF_FILE markers.
    let cl = Arc::new(CommitLog::new(MappedFileQueue::new(backing, 1 << 20, true)));
    cl.set_max_offset(0);
    let (tx, _jobs) = mpsc::channel();
    cl.set_preallocator(Preparer::new(tx), WarmAhead::ZeroFill);
    // As after a fast step (this test's pace is not what it is about).
    cl.warm.force_zero_fill();
    let bodies: Vec<Vec<u8>> = (0..64u8)
        .map(|i| vec![i; 50 + 37 * usize::from(i)])
        .collect();
    let stop = AtomicBool::new(false);
    let mut fills = 0u64;
    let mut written: Vec<(Appended, usize)> = Vec::new();
    std::thread::scope(|s| {
        // The preparer at its most aggressive: zero fills as long as the writer's next
        // 256 KiB, right where its announced writes end, again and again (a writer that
        // did not wait for them would be caught writing under one).
        const FILL: u64 = 256 << 10;
        let filler = s.spawn(|| {
            let mut n = 0u64;
            let mut tries = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let at = cl.writing_to();
                tries += 1;
                if tries.is_multiple_of(2) {
                    // Now and then with a position gone stale: the fence must refuse.
                    std::thread::yield_now();
                }
                if cl.fault_in_step(at, at + FILL).is_some_and(|got| got > at) {
                    n += 1;
                }
            }
            n
        });
        let mut out = Vec::new();
        for round in 0..3000usize {
            let pick = |k: usize| (round * 7 + k) % bodies.len();
            if round % 3 == 0 {
                let b = pick(0);
                let msg = MessageRef::new("Fence", 1, &bodies[b]);
                written.push((cl.put(&Prepared::new(msg).unwrap()).unwrap(), b));
            } else {
                let picks: Vec<usize> = (0..1 + round % 20).map(pick).collect();
                let batch: Vec<Prepared<'_>> = picks
                    .iter()
                    .map(|&b| Prepared::new(MessageRef::new("Fence", 0, &bodies[b])))
                    .collect::<crate::error::Result<_>>()
                    .unwrap();
                out.clear();
                cl.put_batch(&batch, &mut out).unwrap();
                written.extend(out.iter().copied().zip(picks));
            }
        }
        stop.store(true, Ordering::Relaxed);
        fills = filler.join().unwrap();
    });
    assert!(
        fills > 100,
        "the filler ran beside the writer ({fills} fills)"
    );
    assert!(
        written.last().unwrap().0.physical_offset > 10 << 20,
        "it rolled"
    );
    for (a, b) in &written {
        let body = cl
            .read_record(a.physical_offset, |v| v.body().to_vec())
            .unwrap_or_else(|e| panic!("record at {}: {e}", a.physical_offset));
        assert_eq!(body, bodies[*b]);
    }
}
