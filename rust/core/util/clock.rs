//! Wall-clock milliseconds, the unit of every RocketMQ timestamp.

use std::time::{SystemTime, UNIX_EPOCH};

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
