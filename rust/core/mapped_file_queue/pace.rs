//! A writer's pace, taken where it asks for the pages ahead of it to be readied: a fast
//! writer gets them zero-filled first (large folios, fence.rs), a slow one has them
//! faulted in page by page. Every flush writes back whole folios, so a slow writer, whose
//! flushes each find a few bytes new, would write a whole 64 KiB folio where a page would do.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Bytes per millisecond from which a writer counts as fast: 20 MB/s. A flush interval of
/// 500 ms then covers 10 MB, next to which a 64 KiB folio written back whole adds under 1%.
pub const FAST_BYTES_PER_MS: u64 = 20_000;

/// No mark taken yet.
const NEVER: i64 = i64::MIN;

/// The writer's position and the time at its last mark. Marked by one writer at a time
/// (callers hold the writer's lock); read by no one else.
#[derive(Debug)]
pub struct Pace {
    at: AtomicU64,
    ms: AtomicI64,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            at: AtomicU64::new(0),
            ms: AtomicI64::new(NEVER),
        }
    }
}

impl Pace {
    /// Records that the writer is at `at` (a position that only grows) at `now_ms`; returns
    /// whether it came from the previous mark at `FAST_BYTES_PER_MS` or faster. The first
    /// mark, a position that went back, or a clock that did, count as slow.
    pub fn mark(&self, at: u64, now_ms: i64) -> bool {
        let prev_at = self.at.swap(at, Ordering::Relaxed);
        let prev_ms = self.ms.swap(now_ms, Ordering::Relaxed);
        if prev_ms == NEVER {
            return false;
        }
        let (Some(bytes), Ok(ms)) = (at.checked_sub(prev_at), u64::try_from(now_ms - prev_ms))
        else {
            return false;
        };
        bytes >= FAST_BYTES_PER_MS.saturating_mul(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_means_at_least_twenty_megabytes_a_second_since_the_previous_mark() {
        let p = Pace::default();
        assert!(
            !p.mark(1 << 20, 1_000),
            "the first mark has nothing to compare"
        );
        // 1 MiB more in 50 ms: 21 MB/s. In 53 ms: 19.8 MB/s.
        assert!(p.mark(2 << 20, 1_050));
        assert!(!p.mark(3 << 20, 1_103));
        // Within the same millisecond: as fast as it gets.
        assert!(p.mark(3 << 20 | 4096, 1_103));
        // A clock that stepped back, a position that went back.
        assert!(!p.mark(4 << 20, 1_000));
        assert!(!p.mark(1, 1_001));
        assert!(p.mark(20_001, 1_002));
    }
}
