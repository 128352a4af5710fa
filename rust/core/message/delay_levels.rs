//! Delay levels: the table that gives each `DELAY` level (1-based) its delay, written as
//! RocketMQ's `messageDelayLevel` setting ("1s 5s 10s 30s 1m ..."): tokens split on spaces,
//! each a positive count followed by its unit, `s` (seconds), `m` (minutes), `h` (hours) or
//! `d` (days). Level n is token n.
//!
//! Invariants: a table holds 1 to `MAX_LEVELS` levels, each delay in (0, `MAX_DELAY_MS`]; a
//! level outside `1..=len` has no delay (the caller refuses it: levels are never clamped).

use std::fmt;

use crate::error::{Error, Result};

/// RocketMQ's default table.
pub const DEFAULT_LEVELS: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// Most levels a table may hold (each level is a queue of the schedule topic).
pub const MAX_LEVELS: usize = 64;

/// Longest delay a level may have: 40 days (what the longest-delay hosted RocketMQ offers).
pub const MAX_DELAY_MS: i64 = 40 * 86_400_000;

/// A delay-level table. See the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayLevels {
    /// Delay of level `i + 1` in milliseconds.
    ms: Vec<i64>,
}

impl Default for DelayLevels {
    fn default() -> Self {
        DelayLevels {
            ms: super::tags::DELAY_LEVELS_MS.to_vec(),
        }
    }
}

impl DelayLevels {
    /// Parses a table written as RocketMQ's `messageDelayLevel`.
    ///
    /// # Errors
    /// `InvalidConfig` (field `delay_levels`) naming the first token that is not a positive
    /// count with a unit, a delay over `MAX_DELAY_MS`, an empty table or one of more than
    /// `MAX_LEVELS` levels.
    pub fn parse(table: &str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidConfig {
            field: "delay_levels",
            reason,
        };
        let mut ms = Vec::new();
        for token in table.split_whitespace() {
            let at = token.char_indices().last().map_or(0, |(at, _)| at);
            let (count, unit) = token.split_at(at);
            let scale = match unit {
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => {
                    return Err(bad(format!(
                        "{token:?} does not end with a unit (s, m, h or d)"
                    )))
                }
            };
            let count: i64 = match count.parse() {
                Ok(n) if n > 0 && count.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(bad(format!("{token:?} is not a positive count and unit"))),
            };
            let delay = count.saturating_mul(scale);
            if delay > MAX_DELAY_MS {
                return Err(bad(format!("{token:?} is longer than 40 days")));
            }
            ms.push(delay);
        }
        if ms.is_empty() {
            return Err(bad("no level given".into()));
        }
        if ms.len() > MAX_LEVELS {
            return Err(bad(format!(
                "{} levels given, at most {MAX_LEVELS}",
                ms.len()
            )));
        }
        Ok(DelayLevels { ms })
    }

    /// Number of levels (the highest level).
    pub fn len(&self) -> u32 {
        u32::try_from(self.ms.len()).unwrap_or(u32::MAX)
    }

    /// Never true: a table holds at least one level.
    pub fn is_empty(&self) -> bool {
        self.ms.is_empty()
    }

    /// The delay of `level` in ms; `None` outside `1..=len`.
    pub fn delay_ms(&self, level: i64) -> Option<i64> {
        let index = usize::try_from(level.checked_sub(1)?).ok()?;
        self.ms.get(index).copied()
    }

    /// The level of a `DELAY` property value: `Ok(None)` for level 0 (no delay), the level
    /// and its delay otherwise.
    ///
    /// # Errors
    /// `InvalidMessage` for a value that is not an integer, or a level outside `0..=len`.
    pub fn level_of(&self, value: &str) -> Result<Option<(u32, i64)>> {
        let level: i64 = value.trim().parse().map_err(|_| Error::InvalidMessage {
            reason: format!("delay level {value:?} is not an integer"),
        })?;
        if level == 0 {
            return Ok(None);
        }
        match (u32::try_from(level), self.delay_ms(level)) {
            (Ok(l), Some(ms)) => Ok(Some((l, ms))),
            _ => Err(Error::InvalidMessage {
                reason: format!(
                    "delay level {level} is outside 1..={} (0 is no delay)",
                    self.len()
                ),
            }),
        }
    }
}

impl fmt::Display for DelayLevels {
    /// The table in the form `parse` reads, each delay in its largest whole unit.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &ms) in self.ms.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            let (n, unit) = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m")]
                .into_iter()
                .find(|(scale, _)| ms % scale == 0)
                .map_or((ms / 1000, "s"), |(scale, u)| (ms / scale, u));
            write!(f, "{n}{unit}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_default_table_is_rocketmqs() {
        let d = DelayLevels::default();
        assert_eq!(d, DelayLevels::parse(DEFAULT_LEVELS).unwrap());
        assert_eq!(d.to_string(), DEFAULT_LEVELS);
        assert_eq!(d.len(), 18);
        assert_eq!(d.delay_ms(3), Some(10_000));
        assert_eq!(d.delay_ms(18), Some(7_200_000));
        assert_eq!(d.delay_ms(0), None);
        assert_eq!(d.delay_ms(19), None);
    }

    #[test]
    fn levels_are_refused_never_clamped() {
        let d = DelayLevels::parse("1s 2d").unwrap();
        assert_eq!(d.level_of("0").unwrap(), None);
        assert_eq!(d.level_of("2").unwrap(), Some((2, 172_800_000)));
        for bad in ["3", "-1", "x", "", "1.5", "99999999999999999999"] {
            assert!(
                matches!(d.level_of(bad), Err(Error::InvalidMessage { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn bad_tables_are_typed_errors() {
        for bad in ["", "1", "0s", "-1s", "1x", "1.5s", "+1s", "41d", "s"] {
            assert!(
                matches!(
                    DelayLevels::parse(bad),
                    Err(Error::InvalidConfig {
                        field: "delay_levels",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
        let many = vec!["1s"; MAX_LEVELS + 1].join(" ");
        assert!(DelayLevels::parse(&many).is_err());
    }
}
