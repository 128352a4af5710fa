//! Timer messages (RocketMQ 5's arbitrary delays): which properties ask for a delivery time,
//! how the time follows from them, and the names the timer engine (store/timer/) writes.
//!
//! A message asks for a delivery time with one of `TIMER_DELAY_SEC` (seconds from the put),
//! `TIMER_DELAY_MS` (milliseconds from the put), `TIMER_DELIVER_MS` (epoch ms) or
//! `__STARTDELIVERTIME` (epoch ms, the older client's name), read in that order as RocketMQ's
//! `HookUtils` reads the first three: the first present wins. A value that is not a decimal
//! integer, or a negative delay, is refused; a time at or before the put is due at once.

use super::properties;
use crate::error::{Error, Result};

/// The topic timer messages are stored in until due (one queue, 0).
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";
/// Seconds from the put.
pub const DELAY_SEC: &str = "TIMER_DELAY_SEC";
/// Milliseconds from the put.
pub const DELAY_MS: &str = "TIMER_DELAY_MS";
/// Epoch milliseconds.
pub const DELIVER_MS: &str = "TIMER_DELIVER_MS";
/// Epoch milliseconds (RocketMQ 4 / ONS clients).
pub const START_DELIVER_TIME: &str = "__STARTDELIVERTIME";
/// The exact delivery time (epoch ms) of a stored timer record; its consume-queue tags code
/// holds the same value (`message::tags`).
pub const OUT_MS: &str = "TIMER_OUT_MS";
/// On a delivered copy: the store time of the timer record it came from.
pub const ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
/// On a delivered copy: the time it was delivered.
pub const DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
/// On a delivered copy (of a timer or a delay level): the timer's id, its source queue and
/// offset there (`message::timer_id`: `42` for the timer topic's queue, `L3:17` for level 3).
/// Recovery looks for it to learn what was delivered after the last progress write.
pub const TIMER_ID: &str = "MQLITE_TIMER_ID";

/// What the timer properties of a message ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// No timer property.
    Nothing,
    /// Delivery at this epoch ms (possibly at or before now: due at once).
    At(i64),
}

/// The delivery time `props` ask for, relative delays counted from `now_ms`.
///
/// # Errors
/// `InvalidMessage` for a value that is not a decimal integer, a negative delay, or a time
/// that does not fit an i64 of milliseconds.
pub fn asked(props: &[u8], now_ms: i64) -> Result<Asked> {
    let int = |name: &str, v: &str| -> Result<i64> {
        v.trim().parse::<i64>().map_err(|_| Error::InvalidMessage {
            reason: format!("{name} must be a decimal integer, got {v:?}"),
        })
    };
    let delay = |name: &str, v: &str, unit: i64| -> Result<Asked> {
        let n = int(name, v)?;
        if n < 0 {
            return Err(Error::InvalidMessage {
                reason: format!("{name} must not be negative, got {n}"),
            });
        }
        n.checked_mul(unit)
            .and_then(|ms| now_ms.checked_add(ms))
            .map(Asked::At)
            .ok_or_else(|| Error::InvalidMessage {
                reason: format!("{name} {n} is too far in the future"),
            })
    };
    if let Some(v) = properties::get(props, DELAY_SEC) {
        return delay(DELAY_SEC, v, 1000);
    }
    if let Some(v) = properties::get(props, DELAY_MS) {
        return delay(DELAY_MS, v, 1);
    }
    for name in [DELIVER_MS, START_DELIVER_TIME] {
        if let Some(v) = properties::get(props, name) {
            return Ok(Asked::At(int(name, v)?));
        }
    }
    Ok(Asked::Nothing)
}

/// The exact delivery time of a stored timer record (its `TIMER_OUT_MS`).
pub fn out_ms(props: &[u8]) -> Option<i64> {
    properties::get(props, OUT_MS)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_property_gives_a_time_first_present_wins() {
        let p = |pairs: &[(&str, &str)]| properties::encode(pairs.iter().copied());
        assert_eq!(asked(&p(&[]), 10).unwrap(), Asked::Nothing);
        assert_eq!(
            asked(&p(&[(DELAY_SEC, "2")]), 10).unwrap(),
            Asked::At(2_010)
        );
        assert_eq!(asked(&p(&[(DELAY_MS, "7")]), 10).unwrap(), Asked::At(17));
        assert_eq!(asked(&p(&[(DELIVER_MS, "99")]), 10).unwrap(), Asked::At(99));
        assert_eq!(
            asked(&p(&[(START_DELIVER_TIME, "5")]), 10).unwrap(),
            Asked::At(5)
        );
        let both = p(&[(DELIVER_MS, "99"), (DELAY_SEC, "1")]);
        assert_eq!(asked(&both, 10).unwrap(), Asked::At(1_010));
    }

    #[test]
    fn bad_values_are_typed_errors() {
        for (name, v) in [
            (DELAY_SEC, "-1"),
            (DELAY_MS, "-5"),
            (DELAY_SEC, "x"),
            (DELIVER_MS, "1.5"),
            (START_DELIVER_TIME, "soon"),
            (DELAY_SEC, "9223372036854775807"),
        ] {
            let props = properties::encode([(name, v)]);
            assert!(
                matches!(asked(&props, 0), Err(Error::InvalidMessage { .. })),
                "{name}={v:?}"
            );
        }
    }
}
