//! The fence between the appender and the preparer's zero fill.
//!
//! In async mode the preparer writes zeros (`pwrite`) over the log's pages ahead of the
//! appender before it faults them in: the kernel then fills the page cache with large folios
//! (64 KiB for a 64 KiB write) instead of faulting in one 4 KiB page at a time, which costs it
//! less per byte: its per-folio work is done once per 16 pages (measurements:
//! docs/engineering-notes.md#zero-fill). Only for a writer going fast (pace.rs); sync
//! mode keeps page-sized faults throughout: a group commit writes back whole folios, and a
//! 64 KiB folio per small commit would multiply the bytes each fsync writes by up to sixteen.
//!
//! A zero write must never land on bytes the appender has written, and the two threads share
//! no lock (the fill takes tens of microseconds, far too long to hold the append lock).
//!
//! Invariants
//! - The appender announces the end of every write (`announce`) before making it, rounded up
//!   to `RESERVE`, then waits while a fill announced by the preparer starts below that
//!   rounded end; the bytes below it are then its own (`owned`), and the writes that end
//!   there need no announcement of their own (a single 128 B record: one write in 268 pays).
//! - The preparer announces the start of a fill (`fill_if_ahead`), then fills only if the
//!   appender's announced end, and the published end of the log, are at or below that start;
//!   it withdraws the announcement when the fill is done or skipped.
//! - Both announcements and both checks are sequentially consistent, so when the two race at
//!   least one side sees the other: the preparer skips the range, or the appender waits for the
//!   fill to end. A fill in progress therefore always starts at or above what the appender
//!   owns, so a fill starting below the rounded end of its next write is one that overlaps
//!   the bytes it is about to own.
//!
//! Crash behaviour: the zeros lie past the end of the log, where the fallocated file reads as
//! zeros anyway; recovery's scan stops at the first zero header.

use std::sync::atomic::{AtomicU64, Ordering};

/// No fill in progress.
const NONE: u64 = u64::MAX;

/// The appender announces its writes' ends rounded up to a multiple of this: the bytes up to
/// there are its own until it writes past them.
const RESERVE: u64 = 64 << 10;

/// Spins before each yield while the appender waits for a fill (one fill step takes 10 to 30
/// microseconds; on a machine with one free core the preparer needs the CPU back).
const SPINS: u32 = 64;

/// Yields after which the appender sleeps between looks instead: a fill held up in the kernel
/// (writeback throttling a dirtying `pwrite`) can take milliseconds, and a waiter that only
/// yields would keep a CPU busy for all of them.
const YIELDS: u32 = 1000;

/// The sleep between looks after `YIELDS`.
const NAP: std::time::Duration = std::time::Duration::from_micros(50);

/// The appender's and the preparer's announcements.
#[derive(Debug)]
pub struct FillFence {
    // End of the latest write the appender announced (commit-log offset), rounded up to
    // `RESERVE`. Stored by the appender only.
    writing_to: AtomicU64,
    // The bytes below this are the appender's: announced, and no fill was in progress
    // below it after the announcement. Appender only.
    owned: AtomicU64,
    // Start of the preparer's fill in progress, or `NONE`.
    filling: AtomicU64,
}

impl Default for FillFence {
    fn default() -> Self {
        FillFence {
            writing_to: AtomicU64::new(0),
            owned: AtomicU64::new(0),
            filling: AtomicU64::new(NONE),
        }
    }
}

impl FillFence {
    /// Appender: announces a write ending at `end`, then waits until no fill in progress
    /// overlaps it. Nothing to do when the bytes up to `end` are already its own.
    pub fn announce(&self, end: u64) {
        let Some(reserved) = self.reserve(end) else {
            return;
        };
        let (mut spins, mut yields) = (0u32, 0u32);
        while self.filling.load(Ordering::SeqCst) < reserved {
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else if yields < YIELDS {
                spins = 0;
                yields += 1;
                std::thread::yield_now();
            } else {
                std::thread::sleep(NAP);
            }
        }
        self.owned.store(reserved, Ordering::Relaxed);
    }

    /// `announce` for a caller that must not wait: false, having announced `end` (which only
    /// keeps later fills above it, and makes nothing its own), when a fill in progress
    /// overlaps the write.
    pub fn try_announce(&self, end: u64) -> bool {
        let Some(reserved) = self.reserve(end) else {
            return true;
        };
        if self.filling.load(Ordering::SeqCst) < reserved {
            return false;
        }
        self.owned.store(reserved, Ordering::Relaxed);
        true
    }

    /// Announces `end` rounded up to `RESERVE` and returns that, or `None` when the bytes up
    /// to `end` are already the appender's own. Once no fill in progress starts below the
    /// returned end, every byte below it is: later fills start above it.
    fn reserve(&self, end: u64) -> Option<u64> {
        // Relaxed: only the appender stores `owned`, and it reads its own store.
        if end <= self.owned.load(Ordering::Relaxed) {
            return None;
        }
        let reserved = end.div_ceil(RESERVE).saturating_mul(RESERVE);
        self.writing_to.fetch_max(reserved, Ordering::SeqCst);
        Some(reserved)
    }

    /// The end of the latest write the appender announced, rounded up to `RESERVE`.
    pub fn writing_to(&self) -> u64 {
        self.writing_to.load(Ordering::Acquire)
    }

    /// Preparer: runs `fill` (which writes at or above `at`) unless the appender has announced
    /// a write ending past `at`, or the log's published end (`published`, read now, after the
    /// announcement) is past it. `None` when it did not run.
    pub fn fill_if_ahead<R>(
        &self,
        at: u64,
        published: impl FnOnce() -> u64,
        fill: impl FnOnce() -> R,
    ) -> Option<R> {
        self.filling.store(at, Ordering::SeqCst);
        let clear = self.writing_to.load(Ordering::SeqCst) <= at && published() <= at;
        let r = clear.then(fill);
        self.filling.store(NONE, Ordering::SeqCst);
        r
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_fill_behind_the_appender_or_the_published_end_is_skipped() {
        let f = FillFence::default();
        assert_eq!(f.fill_if_ahead(0, || 0, || 7), Some(7));
        f.announce(100);
        assert_eq!(f.writing_to(), RESERVE, "announced up to the next multiple");
        assert_eq!(f.fill_if_ahead(RESERVE - 1, || 0, || 7), None, "reserved");
        assert_eq!(f.fill_if_ahead(RESERVE, || 0, || 7), Some(7), "right after");
        let published = || RESERVE + 1;
        assert_eq!(
            f.fill_if_ahead(RESERVE, published, || 7),
            None,
            "records past it"
        );
        let unknown = || u64::MAX;
        assert_eq!(
            f.fill_if_ahead(2 * RESERVE, unknown, || 7),
            None,
            "end not known"
        );
        assert!(f.try_announce(RESERVE + 1), "no fill left in progress");
        assert_eq!(f.writing_to(), 2 * RESERVE);
    }

    #[test]
    fn the_appender_waits_for_an_overlapping_fill_and_declines_when_it_must_not_wait() {
        let f = &FillFence::default();
        let (started, filling) = mpsc::channel();
        let (release, hold) = mpsc::channel::<()>();
        let written = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(move || {
                f.fill_if_ahead(
                    RESERVE,
                    || 0,
                    || {
                        started.send(()).unwrap();
                        hold.recv().unwrap();
                    },
                )
                .unwrap();
            });
            filling.recv().unwrap();
            // A write ending at the fill's start does not overlap it.
            assert!(f.try_announce(RESERVE));
            // One reaching into it declines without waiting ...
            assert!(!f.try_announce(RESERVE + 1));
            // ... or waits for the fill to end.
            let waiter = s.spawn(|| {
                f.announce(RESERVE + 2);
                written.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(!written.load(Ordering::SeqCst), "wrote during the fill");
            release.send(()).unwrap();
            waiter.join().unwrap();
            assert!(written.load(Ordering::SeqCst));
        });
        // Later fills stay above the announced writes.
        assert_eq!(f.fill_if_ahead(RESERVE, || 0, || ()), None);
        assert_eq!(f.fill_if_ahead(2 * RESERVE, || 0, || ()), Some(()));
    }
}
