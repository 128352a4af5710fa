//! A timer's id and the records that change a timer's state (FORMAT.md §16.1).
//!
//! A timer is named by the queue of the topic it waits in and its offset there: today every
//! deliver-at timer waits in queue 0 of `rmq_sys_wheel_timer`; the type leaves room for timers
//! that wait in other queues (delay levels, one queue per level).
//!
//! Text form: `<offset>` for queue 0 (the form `MQLITE_TIMER_ID` has always had on a delivered
//! copy), `<queue>:<offset>` otherwise. Code form (the consume-queue tags code of a cancel
//! record): `queue << 48 | offset`, so a cancel record's unit names its target without its
//! record being read.

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

/// See the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId {
    /// The queue of the timer topic the timer waits in.
    pub queue: u32,
    /// Its offset in that queue.
    pub offset: u64,
}

impl TimerId {
    /// The timer at `offset` of the deliver-at queue (queue 0).
    pub const fn at(offset: u64) -> Self {
        TimerId { queue: 0, offset }
    }

    /// The text form; `None` unless it is `<offset>` or `<queue>:<offset>` in decimal.
    pub fn parse(text: &str) -> Option<Self> {
        let (queue, offset) = match text.split_once(':') {
            Some((q, o)) => (q.parse().ok()?, o),
            None => (0, text),
        };
        let offset: u64 = offset.parse().ok()?;
        (offset < 1 << OFFSET_BITS && queue < 1 << (63 - OFFSET_BITS))
            .then_some(TimerId { queue, offset })
    }

    /// The code form (module doc).
    pub fn code(self) -> i64 {
        // In range by construction (`parse`, and queue offsets stay far below 2^48).
        ((i64::from(self.queue)) << OFFSET_BITS) | (self.offset & ((1 << OFFSET_BITS) - 1)) as i64
    }
}

impl fmt::Display for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.queue {
            0 => write!(f, "{}", self.offset),
            q => write!(f, "{q}:{}", self.offset),
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
        assert_eq!(TimerId::parse("17"), Some(TimerId::at(17)));
        let q = TimerId::parse("3:17").unwrap();
        assert_eq!(
            (q.queue, q.offset, q.to_string()),
            (3, 17, "3:17".to_owned())
        );
        assert_eq!(q.code(), (3 << 48) | 17);
        assert_eq!(TimerId::at(5).code(), 5);
        for bad in ["", "x", "-1", "1:", ":1", "1:2:3", "281474976710656"] {
            assert_eq!(TimerId::parse(bad), None, "{bad:?}");
        }
        for c in [
            Change::Cancel(TimerId::at(9)),
            Change::Reschedule(q, 1_700_000_000_000),
        ] {
            assert_eq!(Change::of(&c.encode()), Some(c));
        }
        assert_eq!(Change::of(&properties::encode([("KEYS", "k")])), None);
    }
}
