//! Wall-clock milliseconds, the unit of every RocketMQ timestamp, and the store's clock.
//!
//! The core reads time for logic (record store timestamps, retention age, checkpoint
//! timestamps) through a [`Clock`]: the system clock by default, or a [`ManualClock`] that
//! tests set and advance, so time-dependent logic is tested without sleeping. Waits and
//! pacing of background threads (condition-variable timeouts, intervals) stay on
//! `std::time::Instant`: a manual clock does not make a thread wake up.
//!
//! Invariant: a `Clock` is cheap to read (a branch, then the system call or one atomic load)
//! and costs no dynamic dispatch, because the append path reads it for every record.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
#[inline]
pub fn now_ms() -> i64 {
    // Seconds and sub-second millis rather than `as_millis`: no 128-bit arithmetic on a path
    // taken twice per send. Seconds fit an i64 for the next 292 billion years.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| {
            i64::try_from(d.as_secs())
                .unwrap_or(i64::MAX / 1000)
                .saturating_mul(1000)
                + i64::from(d.subsec_millis())
        })
        .unwrap_or(0)
}

/// Where a store reads wall-clock time: the system clock (the default) or a manual clock.
#[derive(Debug, Clone, Default)]
pub struct Clock(Source);

#[derive(Debug, Clone, Default)]
enum Source {
    #[default]
    System,
    Manual(ManualClock),
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Clock(Source::System)
    }

    /// Milliseconds since the Unix epoch, as this clock reads them.
    #[inline]
    pub fn now_ms(&self) -> i64 {
        match &self.0 {
            Source::System => now_ms(),
            Source::Manual(m) => m.now_ms(),
        }
    }

    /// True for a manual clock.
    pub fn is_manual(&self) -> bool {
        matches!(self.0, Source::Manual(_))
    }
}

impl From<ManualClock> for Clock {
    fn from(m: ManualClock) -> Self {
        Clock(Source::Manual(m))
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(start_ms)))
    }

    /// The time it reads.
    pub fn now_ms(&self) -> i64 {
        self.0.load(Ordering::Acquire)
    }

    /// Sets the time (it may go back: that is what a wall clock can do too).
    pub fn set_ms(&self, ms: i64) {
        self.0.store(ms, Ordering::Release);
    }

    /// Moves the time forward by `by` (saturating).
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(ms))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_clones_share_it() {
        let m = ManualClock::new(1_000);
        let c = Clock::from(m.clone());
        assert!(c.is_manual());
        assert_eq!(c.clone().now_ms(), 1_000);
        m.advance(Duration::from_secs(2));
        assert_eq!(c.now_ms(), 3_000);
        m.set_ms(5);
        assert_eq!(c.now_ms(), 5);
        assert!(!Clock::default().is_manual());
        assert!(Clock::system().now_ms() > 1_600_000_000_000);
    }
}
