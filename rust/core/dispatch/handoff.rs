//! The try-lock hand-off of the dispatch cursor: whichever thread gets the cursor dispatches,
//! and no thread waits for it on the producers' path.
//!
//! Invariant: no published record is left behind with nobody to dispatch it. A producer
//! publishes, issues a SeqCst fence, then tries the cursor; every holder, however it took the
//! cursor, releases it, issues a SeqCst fence and re-reads what is pending. The fences order
//! the pair: either the producer gets the cursor, or the holder sees the producer's records
//! and dispatches them (or wakes the service thread for them). Each record is dispatched once,
//! in order, by whoever holds the cursor when it moves past it.
//!
//! The cursor's owner (`Reput`) supplies what is pending and how to run; the loom model below
//! drives these same functions with a counting owner.

use std::sync::TryLockError;

use crate::error::{Error, Result};
use crate::util::loom_sync::atomic::{fence, Ordering};
use crate::util::loom_sync::{Mutex, MutexGuard};

/// What the hand-off drives: the owner of a cursor of type `C`.
pub(crate) trait Holder<C> {
    /// Records are published past the cursor.
    fn pending(&self) -> bool;
    /// Dispatches everything published, moving `cursor`.
    fn catch_up(&self, cursor: &mut C) -> Result<()>;
    /// Records `e` and wakes the service thread to retry.
    fn failed(&self, e: &Error);
    /// Wakes the service thread to dispatch what is pending.
    fn kick(&self);
}

/// The cursor, unless another thread holds it; the caller has just published.
fn try_take<C>(cursor: &Mutex<C>) -> Option<MutexGuard<'_, C>> {
    fence(Ordering::SeqCst);
    try_lock(cursor)
}

/// `cursor`'s guard, or `None` while another thread holds it. A poisoned lock counts as taken
/// (`crate::util::sync::try_lock` for the hand-off's primitives).
pub(crate) fn try_lock<C>(cursor: &Mutex<C>) -> Option<MutexGuard<'_, C>> {
    match cursor.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Releases the cursor, then whether records were published meanwhile.
fn release<C>(guard: MutexGuard<'_, C>, h: &impl Holder<C>) -> bool {
    drop(guard);
    fence(Ordering::SeqCst);
    h.pending()
}

/// Dispatches what is pending unless another thread holds the cursor (which then does it),
/// until nothing is.
pub(crate) fn try_run<C>(cursor: &Mutex<C>, h: &impl Holder<C>) {
    loop {
        let Some(mut c) = try_take(cursor) else {
            return;
        };
        let result = h.catch_up(&mut c);
        if let Err(e) = result {
            drop(c);
            h.failed(&e);
            return;
        }
        if !release(c, h) {
            return;
        }
    }
}

/// Dispatches what is pending, waiting for the cursor; then as `try_run` for what was
/// published while it held it (producers that found it taken left that to it).
pub(crate) fn run_all<C>(cursor: &Mutex<C>, h: &impl Holder<C>) -> Result<()> {
    let mut c = cursor.lock().unwrap_or_else(|p| p.into_inner());
    // A failure goes back to the caller; the service thread retries on its next round.
    h.catch_up(&mut c)?;
    if release(c, h) {
        try_run(cursor, h);
    }
    Ok(())
}

/// A producer's own records: `work` with the cursor (it dispatches them when they are next,
/// returning whether it did) unless another thread holds it; then whatever is still pending
/// is dispatched here (`quick` false) or left to the service thread (`quick`: this thread must
/// not wait), as is everything when `work` declined. Returns whether `work` ran and did it.
pub(crate) fn try_with<C>(
    cursor: &Mutex<C>,
    h: &impl Holder<C>,
    quick: bool,
    work: impl FnOnce(&mut C) -> Result<bool>,
) -> bool {
    let Some(mut c) = try_take(cursor) else {
        return false;
    };
    let done = match work(&mut c) {
        Ok(done) => done,
        Err(e) => {
            drop(c);
            h.failed(&e);
            return false;
        }
    };
    let pending = release(c, h);
    if quick {
        if !done || pending {
            h.kick();
        }
    } else if pending {
        try_run(cursor, h);
    }
    done
}

/// Loom model of the hand-off (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_`).
#[cfg(test)]
#[cfg(loom)]
mod loom_model {
    use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};
    use loom::sync::Arc;

    use super::*;

    /// Records published.
    const RECORDS: usize = 2;

    /// A log of numbered records (the cursor is the next one to dispatch) that counts how often
    /// each record is dispatched, with the service thread's wake-up as a flag.
    #[derive(Default)]
    struct Log {
        append: Mutex<()>,
        published: AtomicU64,
        dispatched: AtomicU64,
        times: [AtomicU8; RECORDS],
        kicked: AtomicBool,
    }

    impl Log {
        fn dispatch(&self, record: u64) {
            let i = usize::try_from(record).unwrap();
            self.times[i].fetch_add(1, Ordering::Relaxed);
        }

        /// A producer: appends one record under the append lock, then hands it to the
        /// dispatcher as `Reput::try_dispatch_known` (`quick` false) or `_quick` does.
        fn produce(&self, cursor: &Mutex<u64>, quick: bool) {
            let first = {
                let _a = self.append.lock().unwrap();
                let first = self.published.load(Ordering::Relaxed);
                self.published.store(first + 1, Ordering::Release);
                first
            };
            let _ = try_with(cursor, self, quick, |c| {
                if *c != first || first + 1 > self.published.load(Ordering::Acquire) {
                    return Ok(false);
                }
                self.dispatch(first);
                *c = first + 1;
                self.dispatched.store(*c, Ordering::Release);
                Ok(true)
            });
        }
    }

    impl Holder<u64> for Log {
        fn pending(&self) -> bool {
            self.published.load(Ordering::Acquire) > self.dispatched.load(Ordering::Acquire)
        }

        fn catch_up(&self, cursor: &mut u64) -> Result<()> {
            let target = self.published.load(Ordering::Acquire);
            while *cursor < target {
                self.dispatch(*cursor);
                *cursor += 1;
            }
            self.dispatched.store(*cursor, Ordering::Release);
            Ok(())
        }

        fn failed(&self, e: &Error) {
            panic!("no failure is modelled: {e}");
        }

        fn kick(&self) {
            self.kicked.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn loom_every_record_is_dispatched_once_and_none_is_left_behind() {
        crate::util::loom_sync::model(Some(4), || {
            let log = Arc::new(Log::default());
            let cursor = Arc::new(Mutex::new(0u64));
            // A producer holding the GIL (quick) and one that is not.
            let producers: Vec<_> = [true, false]
                .into_iter()
                .map(|quick| {
                    let (log, cursor) = (Arc::clone(&log), Arc::clone(&cursor));
                    loom::thread::spawn(move || log.produce(&cursor, quick))
                })
                .collect();
            // A reader catching up (`Store::catch_up`): it waits for the cursor.
            run_all(&cursor, &*log).unwrap();
            for p in producers {
                p.join().unwrap();
            }
            // The service thread, if it was woken (it also runs every `REPUT_IDLE`, which
            // only bounds how late a record left behind would be dispatched).
            if log.kicked.load(Ordering::SeqCst) {
                try_run(&cursor, &*log);
            }
            let times: Vec<u8> = log
                .times
                .iter()
                .map(|t| t.load(Ordering::Relaxed))
                .collect();
            assert_eq!(times, [1; RECORDS], "dispatches per record");
            assert_eq!(log.dispatched.load(Ordering::Acquire), RECORDS as u64);
        });
    }
}
