//! A timer's id: the source queue it is stored in and its offset there. The engine delivers
//! from two kinds of source: the timer log (`rmq_sys_wheel_timer` queue 0, arbitrary delivery
//! times) and each delay level's queue of `SCHEDULE_TOPIC_XXXX` (level n is queue n - 1).
//!
//! String form (the `MQLITE_TIMER_ID` property of a delivered copy, FORMAT.md §16): the timer
//! log's ids are the bare decimal offset (`"42"`); a level's are `L<level>:<offset>`
//! (`"L3:17"`: level 3, offset 17 of queue 2). Both forms are unambiguous, and every id
//! written before levels had ids (a bare offset) reads back as the timer log's.

use std::fmt;

/// Where a timer is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// `rmq_sys_wheel_timer` queue 0.
    Log,
    /// Delay level `n` (1-based): queue `n - 1` of `SCHEDULE_TOPIC_XXXX`.
    Level(u32),
}

/// See the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId {
    /// The queue the timer is stored in.
    pub source: Source,
    /// Its offset in that queue.
    pub offset: u64,
}

impl TimerId {
    /// A timer of the timer log.
    pub fn log(offset: u64) -> Self {
        TimerId {
            source: Source::Log,
            offset,
        }
    }

    /// A message of delay level `level` (1-based).
    pub fn level(level: u32, offset: u64) -> Self {
        TimerId {
            source: Source::Level(level),
            offset,
        }
    }

    /// Reads the string form; `None` for anything else (a property a caller set by hand).
    pub fn parse(s: &str) -> Option<Self> {
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        match s.strip_prefix('L') {
            None if digits(s) => s.parse().ok().map(TimerId::log),
            None => None,
            Some(rest) => {
                let (level, offset) = rest.split_once(':')?;
                if !digits(level) || !digits(offset) {
                    return None;
                }
                let level: u32 = level.parse().ok().filter(|&l| l >= 1)?;
                Some(TimerId::level(level, offset.parse().ok()?))
            }
        }
    }
}

impl fmt::Display for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            Source::Log => write!(f, "{}", self.offset),
            Source::Level(l) => write!(f, "L{l}:{}", self.offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_string_form_round_trips_and_bare_offsets_are_the_timer_log() {
        for id in [
            TimerId::log(0),
            TimerId::log(u64::MAX),
            TimerId::level(1, 0),
            TimerId::level(18, 12_345),
        ] {
            assert_eq!(TimerId::parse(&id.to_string()), Some(id));
        }
        assert_eq!(TimerId::parse("42"), Some(TimerId::log(42)));
        assert_eq!(TimerId::parse("L3:17"), Some(TimerId::level(3, 17)));
        for bad in [
            "", "L", "L3", "L0:1", "L3:", "L:5", "-1", "+4", "4 ", "l3:1", "L3:1:2",
        ] {
            assert_eq!(TimerId::parse(bad), None, "{bad:?}");
        }
    }
}
