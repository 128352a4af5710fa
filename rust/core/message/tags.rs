//! The consume-queue tags code of a record (FORMAT.md §3): the one rule that inline dispatch,
//! dispatch from the log and recovery all apply, so a consume queue rebuilt from the log holds
//! the codes the write path put there.
//!
//! - An ordinary record's code is the Java `String.hashCode` of its TAGS value (0 without one).
//! - A record of `SCHEDULE_TOPIC_XXXX` with a DELAY level above 0 has its delivery time instead:
//!   the store timestamp plus the delay the store gave it when it was put (its
//!   `MQLITE_DELAY_MS` property, from the store's level table), or, for a record without that
//!   property (written by RocketMQ), the delay of its level in RocketMQ's default table (a
//!   level above the highest counts as the highest), as RocketMQ's `computeDeliverTimestamp`
//!   gives it. The timer engine reads the head of each level's queue and needs no record to
//!   know whether it is due.
//!
//! - A record of `rmq_sys_wheel_timer` with a `TIMER_OUT_MS` has that delivery time: the
//!   timer topic's consume queue is the timer engine's durable log (store/timer/). A cancel
//!   or reschedule record of its cancel queue has the code form of the timer it changes
//!   (`message::timer_id`).
//!
//! The code is a function of the stored record alone (topic, properties, store timestamp): a
//! code the record could not reproduce would change when recovery rebuilds the queue.

use super::{properties, timer, timer_id};

/// The delay of each level in milliseconds, level 1 first: RocketMQ's default
/// `messageDelayLevel` ("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h").
pub const DELAY_LEVELS_MS: [i64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

/// The topic delayed messages are stored in, one queue per level (queue id = level - 1).
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// The code of a tag: Java `String.hashCode` of `tag`, sign-extended. Tag filters compare it
/// with the codes of stored records.
#[inline]
pub fn of_tag(tag: &str) -> i64 {
    i64::from(java_string_hash(tag))
}

/// Java `String.hashCode` of `s` (UTF-16 code units, wrapping), sign-extended to i64: the
/// consume-queue tags code of a tag.
pub fn java_string_hash(s: &str) -> i32 {
    let mut h: i32 = 0;
    for unit in s.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    h
}

/// The code of a stored record of `topic` with encoded `props` and `store_timestamp`.
pub fn of_stored(topic: &str, props: &[u8], store_timestamp: i64) -> i64 {
    of_record(
        topic,
        props,
        properties::get(props, properties::TAGS),
        store_timestamp,
    )
}

/// `of_stored` for a caller that has found the record's TAGS value already (`tags`, `None`
/// when it has none): the write path, whose validation pass finds it.
#[inline]
pub fn of_record(topic: &str, props: &[u8], tags: Option<&str>, store_timestamp: i64) -> i64 {
    TopicRule::of_topic(topic).code(props, tags, store_timestamp)
}

/// Which rule gives the codes of one topic's records: found once for a batch, whose records
/// share a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicRule {
    /// The TAGS hash.
    Tags,
    /// `SCHEDULE_TOPIC_XXXX`: the delivery time of a record with a DELAY level.
    Schedule,
    /// `rmq_sys_wheel_timer`: the delivery time of a timer record (its `TIMER_OUT_MS`); the
    /// code form of the timer a cancel or reschedule record changes (`message::timer_id`).
    Timer,
}

impl TopicRule {
    /// The rule of `topic`'s records.
    #[inline]
    pub fn of_topic(topic: &str) -> Self {
        if topic.len() == SCHEDULE_TOPIC.len() && topic == SCHEDULE_TOPIC {
            TopicRule::Schedule
        } else if topic == timer::TIMER_TOPIC {
            TopicRule::Timer
        } else {
            TopicRule::Tags
        }
    }

    /// The code of a record with encoded `props`, TAGS value `tags` and `store_timestamp`.
    #[inline]
    pub fn code(self, props: &[u8], tags: Option<&str>, store_timestamp: i64) -> i64 {
        let at = match self {
            TopicRule::Schedule => delivery_time(props, store_timestamp),
            TopicRule::Timer => timer::out_ms(props)
                .or_else(|| timer_id::Change::of(props).map(|c| c.target().code())),
            TopicRule::Tags => None,
        };
        if let Some(at) = at {
            return at;
        }
        tags.map_or(0, of_tag)
    }
}

/// The delivery time of a delayed record: its store time plus the delay it was given
/// (`MQLITE_DELAY_MS`), else the default delay of its DELAY level (clamped to the highest
/// level); `None` without a level above 0.
pub fn delivery_time(props: &[u8], store_timestamp: i64) -> Option<i64> {
    let level: i64 = properties::get(props, properties::DELAY)?.parse().ok()?;
    let given = properties::get(props, properties::DELAY_MS)
        .and_then(|ms| ms.parse::<i64>().ok())
        .filter(|&ms| ms >= 0);
    let delay = match given {
        Some(ms) if level >= 1 => ms,
        _ => level_delay_ms(level)?,
    };
    Some(store_timestamp.saturating_add(delay))
}

/// The delay of `level` (1-based), clamped to the highest level; `None` for a level below 1.
pub fn level_delay_ms(level: i64) -> Option<i64> {
    let highest = DELAY_LEVELS_MS.len() as i64;
    if level < 1 {
        return None;
    }
    let index = usize::try_from(level.min(highest) - 1).ok()?;
    DELAY_LEVELS_MS.get(index).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_records_hash_their_tag() {
        let props = properties::encode([("TAGS", "A"), ("KEYS", "k")]);
        assert_eq!(of_stored("T", &props, 5), 65);
        assert_eq!(of_record("T", &props, Some("A"), 5), 65);
        assert_eq!(of_stored("T", b"", 5), 0);
        // A DELAY level means nothing outside the schedule topic.
        let delayed = properties::encode([("TAGS", "A"), ("DELAY", "3")]);
        assert_eq!(of_stored("T", &delayed, 5), 65);
    }

    #[test]
    fn schedule_records_carry_their_delivery_time() {
        let delayed = properties::encode([("TAGS", "A"), ("DELAY", "3")]);
        assert_eq!(of_stored(SCHEDULE_TOPIC, &delayed, 1_000), 11_000);
        let beyond = properties::encode([("DELAY", "99")]);
        assert_eq!(
            of_stored(SCHEDULE_TOPIC, &beyond, 0),
            7_200_000,
            "a level above the highest counts as the highest"
        );
        // The delay the store gave the record wins over the default table.
        let given = properties::encode([("DELAY", "1"), ("MQLITE_DELAY_MS", "250")]);
        assert_eq!(of_stored(SCHEDULE_TOPIC, &given, 1_000), 1_250);
        for no_level in [
            &b""[..],
            b"DELAY\x010\x02",
            b"DELAY\x01x\x02",
            b"TAGS\x01A\x02",
        ] {
            assert_eq!(
                of_stored(SCHEDULE_TOPIC, no_level, 0),
                properties::get(no_level, "TAGS").map_or(0, of_tag)
            );
        }
    }
}
