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
//! - Each side puts a SeqCst fence between its announcement and its check (a store-fence-load
//!   pair on each side), so when the two race at least one side sees the other: the preparer
//!   skips the range, or the appender waits for the fill to end. A fill in progress therefore
//!   always starts at or above what the appender owns, so a fill starting below the rounded
//!   end of its next write is one that overlaps the bytes it is about to own.
//! - The preparer's stores of `filling` release, the appender's loads acquire: an appender
//!   that sees a fill ended (or a later one started) sees its zeros written.
//!
//! Model-checked with loom (`loom_` tests below, docs/reliability.md#model-checking): an
//! appender and a preparer over three blocks, the fills never touching a byte the appender
//! writes, whatever the interleaving.
//!
//! Crash behaviour: the zeros lie past the end of the log, where the fallocated file reads as
//! zeros anyway; recovery's scan stops at the first zero header.

use crate::util::loom_sync::atomic::{fence, AtomicU64, Ordering};
use crate::util::loom_sync::{sleep, spin_loop, yield_now};

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
                spin_loop();
            } else if yields < YIELDS {
                spins = 0;
                yields += 1;
                yield_now();
            } else {
                sleep(NAP);
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
        // Pairs with the fence in `fill_if_ahead`: announcement, fence, then the caller's check.
        fence(Ordering::SeqCst);
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
        // Pairs with the fence in `reserve`: announcement, fence, then the check.
        fence(Ordering::SeqCst);
        let clear = self.writing_to.load(Ordering::SeqCst) <= at && published() <= at;
        let r = clear.then(fill);
        self.filling.store(NONE, Ordering::SeqCst);
        r
    }
}

#[cfg(test)]
#[cfg(not(loom))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

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
        let written = &AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(move || {
                f.fill_if_ahead(
                    RESERVE,
                    || 0,
                    || {
                        started.send(()).unwrap();
                        hold.recv().unwrap();
                        // The fill has not ended: the waiter cannot have written.
                        assert!(!written.load(Ordering::SeqCst), "wrote during the fill");
                    },
                )
                .unwrap();
            });
            filling.recv().unwrap();
            // A write ending at the fill's start does not overlap it.
            assert!(f.try_announce(RESERVE));
            // One reaching into it declines without waiting ...
            assert!(!f.try_announce(RESERVE + 1));
            // ... or waits for the fill to end (that it never writes during one, whatever the
            // interleaving, is the loom model's to show).
            let waiter = s.spawn(move || {
                f.announce(RESERVE + 2);
                written.store(true, Ordering::SeqCst);
            });
            release.send(()).unwrap();
            waiter.join().unwrap();
            assert!(written.load(Ordering::SeqCst));
        });
        // Later fills stay above the announced writes.
        assert_eq!(f.fill_if_ahead(RESERVE, || 0, || ()), None);
        assert_eq!(f.fill_if_ahead(2 * RESERVE, || 0, || ()), Some(()));
    }
}

/// Loom model of the fence (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_`).
#[cfg(test)]
#[cfg(loom)]
mod loom_model {
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicU8;
    use loom::sync::Arc;

    use super::*;

    /// Blocks of `RESERVE` bytes of the log: enough for an appender crossing two block
    /// boundaries and a preparer filling the two blocks ahead of its start.
    const BLOCKS: usize = 3;

    /// The log as the two threads see it: who touched which block (loom reports two accesses
    /// of a block that no happens-before edge orders), what the block holds (0: zeros,
    /// 1: record bytes), and the published end.
    struct Log {
        fence: FillFence,
        access: [UnsafeCell<()>; BLOCKS],
        bytes: [AtomicU8; BLOCKS],
        published: AtomicU64,
    }

    impl Log {
        fn new() -> Self {
            Log {
                fence: FillFence::default(),
                access: std::array::from_fn(|_| UnsafeCell::new(())),
                bytes: std::array::from_fn(|_| AtomicU8::new(0)),
                published: AtomicU64::new(0),
            }
        }

        /// Writes `value` over every block `[start, end)` touches.
        fn write(&self, start: u64, end: u64, value: u8) {
            let (first, last) = (start / RESERVE, (end - 1) / RESERVE);
            for b in first..=last {
                let b = usize::try_from(b).unwrap();
                self.access[b].with_mut(|_| {});
                self.bytes[b].store(value, Ordering::Relaxed);
            }
        }

        /// The appender's write of a record `[start, end)`, as `append.rs` makes it: announce
        /// (waiting), write, publish.
        fn append(&self, start: u64, end: u64) {
            self.fence.announce(end);
            self.write(start, end, 1);
            self.published.store(end, Ordering::Release);
        }

        /// The preparer's zero fill of block `b`, as `PageWarmer::fault_in` makes it.
        fn fill(&self, b: u64) -> bool {
            let at = b * RESERVE;
            self.fence
                .fill_if_ahead(
                    at,
                    || self.published.load(Ordering::SeqCst),
                    || self.write(at, at + RESERVE, 0),
                )
                .is_some()
        }
    }

    #[test]
    fn loom_fills_never_touch_a_byte_the_appender_writes() {
        crate::util::loom_sync::model(None, || {
            let log = Arc::new(Log::new());
            let appender = {
                let log = Arc::clone(&log);
                loom::thread::spawn(move || {
                    log.append(0, 100);
                    // Crosses into block 1: a fill of block 1 in progress holds it up.
                    log.append(100, RESERVE + 100);
                    // The non-waiting form (`CommitLog::try_put`), then the waiting one.
                    let end = 2 * RESERVE + 100;
                    if log.fence.try_announce(end) {
                        log.write(RESERVE + 100, end, 1);
                        log.published.store(end, Ordering::Release);
                    } else {
                        log.append(RESERVE + 100, end);
                    }
                })
            };
            let filled = [log.fill(1), log.fill(2)];
            appender.join().unwrap();
            for (b, byte) in log.bytes.iter().enumerate() {
                assert_eq!(
                    byte.load(Ordering::Relaxed),
                    1,
                    "block {b} zeroed over the appender's bytes (fills done: {filled:?})"
                );
            }
        });
    }
}
