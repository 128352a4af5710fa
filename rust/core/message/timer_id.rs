//! A timer's id and the records that change a timer's state (FORMAT.md §16).
//!
//! The timer engine delivers from two kinds of source: the timer log (`rmq_sys_wheel_timer`
//! queue 0, arbitrary delivery times) and each delay level's queue of `SCHEDULE_TOPIC_XXXX`
//! (level n is queue n - 1). A timer is named by its source and its offset in that queue.
//!
//! Text form (the `MQLITE_TIMER_ID` of a delivered copy, the `MQLITE_TIMER_CANCEL` of a change
//! record, the id the API shows): the timer log's ids are the bare decimal offset (`"42"`, the
//! form ids have always had); a level's are `L<level>:<offset>` (`"L3:17"`: level 3, offset 17
//! of queue 2). Both are unambiguous. Code form (the consume-queue tags code of a change
//! record): `level << 48 | offset` (level 0 for the timer log), so a change record's unit
//! names its target without its record being read.

use std::fmt;

use super::properties;

/// The timer topic's queue of cancel and reschedule records.
pub const CANCEL_QUEUE: u32 = 1;
/// On a cancel or reschedule record: the id of the timer it changes.
pub const CANCEL: &str = "MQLITE_TIMER_CANCEL";
/// On a reschedule record: the timer's new delivery time (epoch ms). A cancel record has none.
pub const RESCHEDULE_MS: &str = "MQLITE_TIMER_RESCHEDULE_MS";

/// Offsets fit below this bound in the code form.
const OFFSET_BITS: u32 = 48;
/// Levels fit below this bound in the code form (the code stays positive).
const LEVEL_BITS: u32 = 63 - OFFSET_BITS;

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
    pub const fn log(offset: u64) -> Self {
        TimerId {
            source: Source::Log,
            offset,
        }
    }

    /// A message of delay level `level` (1-based).
    pub const fn level(level: u32, offset: u64) -> Self {
        TimerId {
            source: Source::Level(level),
            offset,
        }
    }

    /// Reads the text form; `None` for anything else (a property a caller set by hand, an
    /// offset or level too large for the code form).
    pub fn parse(s: &str) -> Option<Self> {
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        let id = match s.strip_prefix('L') {
            None if digits(s) => TimerId::log(s.parse().ok()?),
            None => return None,
            Some(rest) => {
                let (level, offset) = rest.split_once(':')?;
                if !digits(level) || !digits(offset) {
                    return None;
                }
                let level: u32 = level
                    .parse()
                    .ok()
                    .filter(|l| (1..1 << LEVEL_BITS).contains(l))?;
                TimerId::level(level, offset.parse().ok()?)
            }
        };
        (id.offset < 1 << OFFSET_BITS).then_some(id)
    }

    /// The code form (module doc).
    pub fn code(self) -> i64 {
        let level = match self.source {
            Source::Log => 0,
            Source::Level(l) => i64::from(l & ((1 << LEVEL_BITS) - 1)),
        };
        // In range by construction (`parse`; queue offsets stay far below 2^48).
        (level << OFFSET_BITS) | (self.offset & ((1 << OFFSET_BITS) - 1)) as i64
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

/// What a record of the cancel queue does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The timer is not to be delivered.
    Cancel(TimerId),
    /// The timer is to be delivered at this epoch ms instead.
    Reschedule(TimerId, i64),
}

impl Change {
    /// The change a record's properties describe, if any.
    pub fn of(props: &[u8]) -> Option<Self> {
        let id = TimerId::parse(properties::get(props, CANCEL)?)?;
        Some(match properties::get(props, RESCHEDULE_MS) {
            Some(ms) => Change::Reschedule(id, ms.parse().ok()?),
            None => Change::Cancel(id),
        })
    }

    /// The timer it changes.
    pub fn target(self) -> TimerId {
        match self {
            Change::Cancel(id) | Change::Reschedule(id, _) => id,
        }
    }

    /// The properties of its record.
    pub fn encode(self) -> Vec<u8> {
        let id = self.target().to_string();
        match self {
            Change::Cancel(_) => properties::encode([(CANCEL, id.as_str())]),
            Change::Reschedule(_, ms) => {
                properties::encode([(CANCEL, id.as_str()), (RESCHEDULE_MS, &ms.to_string())])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_code_and_records_round_trip() {
        for id in [
            TimerId::log(0),
            TimerId::log((1 << 48) - 1),
            TimerId::level(1, 0),
            TimerId::level(18, 12_345),
        ] {
            assert_eq!(TimerId::parse(&id.to_string()), Some(id));
        }
        assert_eq!(TimerId::parse("42"), Some(TimerId::log(42)));
        let l = TimerId::parse("L3:17").unwrap();
        assert_eq!(
            (l, l.to_string()),
            (TimerId::level(3, 17), "L3:17".to_owned())
        );
        assert_eq!(l.code(), (3 << 48) | 17);
        assert_eq!(TimerId::log(5).code(), 5);
        for bad in [
            "",
            "x",
            "L",
            "L3",
            "L0:1",
            "L3:",
            "L:5",
            "-1",
            "+4",
            "4 ",
            "l3:1",
            "L3:1:2",
            "3:17",
            "281474976710656",
            "L32768:1",
        ] {
            assert_eq!(TimerId::parse(bad), None, "{bad:?}");
        }
        for c in [
            Change::Cancel(TimerId::log(9)),
            Change::Cancel(l),
            Change::Reschedule(l, 1_700_000_000_000),
        ] {
            assert_eq!(Change::of(&c.encode()), Some(c));
        }
        assert_eq!(Change::of(&properties::encode([("KEYS", "k")])), None);
    }
}
