//! Marks: which of the properties the store acts on when a message is put (a delay level, a
//! timer) a message carries. The validation pass over the properties
//! (`properties::check_encoded`) reads every name anyway and reports them, so a put learns a
//! message's marks at no extra pass; put hooks declare the marks they act on
//! (`store::hooks::PutHook::wants`), and a message that carries none of those runs no hook
//! code. A hook may also want every message (`Marks::EVERY`, the default).
//!
//! Invariant: a message's marks are a function of the names in its encoded properties alone
//! (a name's presence, whatever its value or how often it occurs), so any code that has the
//! properties finds the same marks (`Marks::of_properties`).

use super::properties;

/// A set of marks. See the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Marks(u8);

impl Marks {
    /// No mark.
    pub const NONE: Marks = Marks(0);
    /// A `DELAY` property (RocketMQ's delay level).
    pub const DELAY: Marks = Marks(1);
    /// A deliver-at or delay-time property: `TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`,
    /// `TIMER_DELAY_MS` (RocketMQ 5's timer messages) or `__STARTDELIVERTIME`.
    pub const TIMER: Marks = Marks(2);
    /// A send-back to a retry or DLQ topic (`MQLITE_SEND_BACK`, `store::retry`).
    pub const SEND_BACK: Marks = Marks(4);
    /// Wanted by a hook that looks at every message, whatever its marks (`selects`); no
    /// message carries it.
    pub const EVERY: Marks = Marks(0x80);

    /// The mark of a property name (`NONE` for a name the store does not act on at put).
    #[inline]
    pub fn of_name(name: &[u8]) -> Marks {
        match name {
            b"DELAY" => Marks::DELAY,
            b"TIMER_DELIVER_MS"
            | b"TIMER_DELAY_SEC"
            | b"TIMER_DELAY_MS"
            | b"__STARTDELIVERTIME" => Marks::TIMER,
            b"MQLITE_SEND_BACK" => Marks::SEND_BACK,
            _ => Marks::NONE,
        }
    }

    /// The marks of an encoded property string, read pair by pair (`properties::iter`).
    pub fn of_properties(props: &[u8]) -> Marks {
        properties::iter(props).fold(Marks::NONE, |m, (name, _)| {
            m.with(Marks::of_name(name.as_bytes()))
        })
    }

    /// Both sets together.
    #[inline]
    #[must_use]
    pub const fn with(self, other: Marks) -> Marks {
        Marks(self.0 | other.0)
    }

    /// True when a hook that wants `self` looks at a message whose marks are `message`: it
    /// wants every message, or one of the message's marks.
    #[inline]
    pub const fn selects(self, message: Marks) -> bool {
        self.0 & (Marks::EVERY.0 | message.0) != 0
    }

    /// True for the empty set.
    #[inline]
    pub const fn is_none(self) -> bool {
        self.0 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_store_acts_on_are_marked() {
        assert_eq!(Marks::of_name(b"DELAY"), Marks::DELAY);
        for timer in [
            &b"TIMER_DELIVER_MS"[..],
            b"TIMER_DELAY_SEC",
            b"TIMER_DELAY_MS",
            b"__STARTDELIVERTIME",
        ] {
            assert_eq!(Marks::of_name(timer), Marks::TIMER);
        }
        for plain in [&b"TAGS"[..], b"KEYS", b"UNIQ_KEY", b"DELAYS", b"delay", b""] {
            assert_eq!(Marks::of_name(plain), Marks::NONE);
        }
        let both = properties::encode([("TAGS", "a"), ("DELAY", "3"), ("TIMER_DELAY_MS", "9")]);
        assert_eq!(Marks::of_properties(&both), Marks::DELAY.with(Marks::TIMER));
        let plain = Marks::of_properties(b"UNIQ_KEY\x01x\x02");
        assert!(plain.is_none());
        assert!(Marks::EVERY.selects(plain) && Marks::EVERY.selects(Marks::DELAY));
        assert!(Marks::DELAY.selects(Marks::DELAY.with(Marks::TIMER)));
        assert!(!Marks::DELAY.selects(Marks::TIMER) && !Marks::DELAY.selects(plain));
        assert!(!Marks::NONE.selects(plain));
    }
}
